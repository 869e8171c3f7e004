//! What the reader of one shard shares with its deliveries and its checkpoint writer: the
//! watermark, the checkpoint waiting to be written, and whether the shard may still deliver.

pub(crate) mod keeper;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use crate::clock::Instant;

use tokio::sync::Notify;

use crate::lease::{LeaseError, LeaseKey, LeaseStore, millis};
use crate::record::Record;
use crate::watermark::{Ticket, Watermark};
use crate::{KinesisError, LeaseTimings, SHARD_END, epoch_millis};
use keeper::LeaseKeeper;

/// When a call that grants the lease (a take, a renewal, a checkpoint that renews) was sent, by
/// both of this instance's clocks.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sent {
    pub(crate) at: Instant,
    pub(crate) at_ms: u64,
}

impl Sent {
    pub(crate) fn now() -> Self {
        Self {
            at: Instant::now(),
            at_ms: epoch_millis(),
        }
    }
}

/// Whether a lease usable until `until` by the monotonic clock and until `until_ms` by the
/// wall clock may still deliver at (`now`, `now_ms`). Both clocks must agree. The monotonic one
/// ignores steps of the wall clock, but stands still while the host is suspended, and the
/// lease in the table runs on in wall time meanwhile: after a suspension longer than the lease,
/// only the wall clock knows that another instance may hold the shard by now.
fn usable(until: Option<Instant>, until_ms: Option<u64>, now: Instant, now_ms: u64) -> bool {
    until.is_some_and(|until| now < until) && until_ms.is_some_and(|until_ms| now_ms < until_ms)
}

/// A record a handler handed back (`nack(true)`, `nack_after`, or dropped unsettled), waiting to
/// be delivered again.
#[derive(Debug)]
pub(crate) struct Redelivery {
    pub(crate) record: Record,
    pub(crate) ticket: Ticket,
    /// How many times it was delivered so far.
    pub(crate) attempts: u64,
    /// Not before this moment.
    pub(crate) due: Instant,
}

#[derive(Debug, Default)]
struct ShardState {
    watermark: Watermark,
    /// Deliveries handed out and neither settled nor dropped, of any seek generation: a closed
    /// shard is finished only once this is zero.
    in_flight: usize,
    /// Records handed back, in the order they are due.
    retries: Vec<Redelivery>,
    /// Set once no checkpoint of this shard will be written any more (its lease is lost, or its
    /// final checkpoint was taken): a later settlement is refused rather than answered as if it
    /// counted.
    sealed: bool,
    /// The newest checkpoint not yet handed to the store.
    pending: Option<Arc<str>>,
    /// Until when this instance may deliver, by its own monotonic clock.
    valid_until: Option<Instant>,
    /// The same moment by its wall clock (milliseconds since the epoch).
    valid_until_ms: Option<u64>,
    /// When the newest checkpoint write that also renewed the lease was sent, for the keeper.
    renewed: Option<Instant>,
}

/// One shard this instance holds the lease of.
#[derive(Debug)]
pub(crate) struct ShardHandle {
    pub(crate) key: LeaseKey,
    state: Mutex<ShardState>,
    /// Wakes the checkpoint writer when a checkpoint is pending.
    pub(crate) wake: Notify,
    /// Wakes a reader waiting for every delivery to be settled.
    pub(crate) settled: Notify,
    /// Wakes the redelivery task when a record was handed back.
    pub(crate) handed_back: Notify,
    /// Set once the shard must deliver nothing more: its lease is lost or its reader stopped.
    stopped: AtomicBool,
    /// Serialises the checkpoint calls of this shard, so they reach the store in order.
    pub(crate) writing: tokio::sync::Mutex<()>,
    /// Whether the broker was shut down: settlements then answer an error.
    broker_closed: Arc<AtomicBool>,
}

impl ShardHandle {
    pub(crate) fn new(key: LeaseKey, broker_closed: Arc<AtomicBool>) -> Self {
        Self {
            key,
            state: Mutex::default(),
            wake: Notify::new(),
            settled: Notify::new(),
            handed_back: Notify::new(),
            stopped: AtomicBool::new(false),
            writing: tokio::sync::Mutex::new(()),
            broker_closed,
        }
    }

    fn lock(&self) -> MutexGuard<'_, ShardState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The watermark's generation: a seek starts a new one.
    pub(crate) fn generation(&self) -> u64 {
        self.lock().watermark.generation()
    }

    /// Records a delivery about to be handed out, unless a seek started a new generation since
    /// the record was fetched in `generation`.
    pub(crate) fn track(&self, sequence: Arc<str>, generation: u64) -> Option<Ticket> {
        let mut state = self.lock();
        if state.watermark.generation() != generation {
            return None;
        }
        state.in_flight += 1;
        Some(state.watermark.push(sequence))
    }

    /// Settles one delivery; a grown prefix becomes the pending checkpoint. A settlement that can
    /// no longer be checkpointed (the lease is lost, the shard was handed back) is refused: the
    /// shard's next owner delivers the record again.
    pub(crate) fn settle(&self, ticket: Ticket) -> Result<(), KinesisError> {
        let mut state = self.lock();
        state.in_flight = state.in_flight.saturating_sub(1);
        if self.broker_closed.load(Ordering::Acquire) {
            drop(state);
            self.settled.notify_waiters();
            return Err(KinesisError::ShutDown {
                what: "settling a delivery",
            });
        }
        if state.sealed {
            drop(state);
            self.settled.notify_waiters();
            return Err(KinesisError::SettledAfterHandover {
                stream: self.key.stream().to_owned(),
                shard: self.key.shard().to_owned(),
            });
        }
        if let Some(checkpoint) = state.watermark.settle(ticket) {
            state.pending = Some(checkpoint);
            drop(state);
            self.wake.notify_one();
        } else {
            drop(state);
        }
        self.settled.notify_waiters();
        Ok(())
    }

    /// Lets go of a delivery that never reached its handler: it moves no checkpoint, and the
    /// shard's next owner (or the seek that made it stale) delivers it again.
    pub(crate) fn forget(&self, ticket: Ticket) {
        let _ = ticket;
        let mut state = self.lock();
        state.in_flight = state.in_flight.saturating_sub(1);
        drop(state);
        self.settled.notify_waiters();
    }

    /// Takes back a delivery its handler did not settle, to deliver it again `delay` from now,
    /// still unsettled meanwhile. A delivery of a stopped shard, or one a seek made stale, is
    /// forgotten instead: the shard's next owner, or the seek, delivers it again.
    pub(crate) fn hand_back(
        &self,
        record: Record,
        ticket: Ticket,
        attempts: u64,
        delay: Duration,
    ) -> Result<(), KinesisError> {
        let closed = self.broker_closed.load(Ordering::Acquire);
        let mut state = self.lock();
        if closed || self.is_stopped() || ticket.generation != state.watermark.generation() {
            state.in_flight = state.in_flight.saturating_sub(1);
            drop(state);
            self.settled.notify_waiters();
            return if closed {
                Err(KinesisError::ShutDown {
                    what: "handing a delivery back",
                })
            } else {
                Ok(())
            };
        }
        let due = Instant::now() + delay;
        let at = state.retries.partition_point(|waiting| waiting.due <= due);
        state.retries.insert(
            at,
            Redelivery {
                record,
                ticket,
                attempts,
                due,
            },
        );
        drop(state);
        self.handed_back.notify_one();
        Ok(())
    }

    /// The handed-back records due at `now`, in order, and when the next one falls due.
    pub(crate) fn take_due(&self, now: Instant) -> (Vec<Redelivery>, Option<Instant>) {
        let mut state = self.lock();
        let generation = state.watermark.generation();
        // A seek since the hand-back: the seek's position delivers what follows it.
        let before = state.retries.len();
        state
            .retries
            .retain(|waiting| waiting.ticket.generation == generation);
        let stale = before - state.retries.len();
        state.in_flight = state.in_flight.saturating_sub(stale);
        let due_now = state.retries.partition_point(|waiting| waiting.due <= now);
        let due: Vec<Redelivery> = state.retries.drain(..due_now).collect();
        let next = state.retries.first().map(|waiting| waiting.due);
        (due, next)
    }

    /// Whether every delivery of this shard was settled (or dropped after a seek or a stop).
    pub(crate) fn is_drained(&self) -> bool {
        self.lock().in_flight == 0
    }

    /// How many deliveries of the current generation wait for a settlement at or behind the
    /// oldest unsettled one: what the shard holds in memory while a record stays unsettled.
    pub(crate) fn unsettled(&self) -> usize {
        self.lock().watermark.unsettled()
    }

    /// Forgets every delivery, handed-back record and pending checkpoint (a seek); answers the
    /// new generation.
    pub(crate) fn reset(&self) -> u64 {
        let mut state = self.lock();
        state.watermark.reset();
        state.pending = None;
        // The seek's position delivers what follows it: records waiting to come back do not,
        // and a closed shard need not wait for their timers to finish.
        let dropped = state.retries.len();
        state.retries.clear();
        state.in_flight = state.in_flight.saturating_sub(dropped);
        let generation = state.watermark.generation();
        drop(state);
        self.settled.notify_waiters();
        self.handed_back.notify_one();
        generation
    }

    /// Takes the pending checkpoint, if any.
    pub(crate) fn take_pending(&self) -> Option<Arc<str>> {
        self.lock().pending.take()
    }

    /// Puts back a checkpoint whose write failed, unless a newer one arrived meanwhile.
    pub(crate) fn restore_pending(&self, checkpoint: Arc<str>) {
        let mut state = self.lock();
        if state.pending.is_none() {
            state.pending = Some(checkpoint);
        }
    }

    /// Records a successful take or renewal sent at `sent`: the lease may be used until
    /// [`LeaseKeeper::valid_after`] it, by each clock. A late answer never shortens it.
    pub(crate) fn extend(&self, sent: Sent, timings: &LeaseTimings) {
        let until = LeaseKeeper::valid_after(timings, sent.at);
        let until_ms = sent.at_ms.saturating_add(millis(timings.usable_lease()));
        let mut state = self.lock();
        state.valid_until = Some(state.valid_until.map_or(until, |known| known.max(until)));
        state.valid_until_ms = Some(
            state
                .valid_until_ms
                .map_or(until_ms, |known| known.max(until_ms)),
        );
    }

    /// Takes the send time of the newest checkpoint write that renewed the lease, if any.
    pub(crate) fn take_renewed(&self) -> Option<Instant> {
        self.lock().renewed.take()
    }

    /// Whether this instance may still deliver from the shard.
    pub(crate) fn may_deliver(&self) -> bool {
        if self.stopped.load(Ordering::Acquire) {
            return false;
        }
        let state = self.lock();
        usable(
            state.valid_until,
            state.valid_until_ms,
            Instant::now(),
            epoch_millis(),
        )
    }

    /// Until when the lease is valid by our monotonic clock.
    pub(crate) fn valid_until(&self) -> Option<Instant> {
        self.lock().valid_until
    }

    /// Stops deliveries from this shard at once, and writes no checkpoint of it any more: its
    /// lease is lost, or ran out by this instance's clock.
    pub(crate) fn stop(&self) {
        self.lock().sealed = true;
        self.halt();
    }

    /// Stops deliveries from this shard at once; settlements still count until the final
    /// checkpoint is taken ([`close`](Self::close)).
    fn halt(&self) {
        self.stopped.store(true, Ordering::Release);
        self.wake.notify_one();
        self.settled.notify_waiters();
    }

    /// Takes the pending checkpoint for the shard's last write, sealing it: later settlements
    /// are refused.
    fn take_final(&self) -> Option<Arc<str>> {
        let mut state = self.lock();
        state.sealed = true;
        state.pending.take()
    }

    pub(crate) fn is_stopped(&self) -> bool {
        self.stopped.load(Ordering::Acquire)
    }

    /// Writes the pending checkpoint, in order with every other write of this shard; the write
    /// also renews the lease, which the keeper learns through [`take_renewed`](Self::take_renewed).
    /// A stopped shard writes nothing here: its last writes are [`close`](Self::close)'s.
    pub(crate) async fn write_pending(
        &self,
        store: &dyn LeaseStore,
        owner: &str,
        timings: &LeaseTimings,
    ) -> Result<(), LeaseError> {
        let _writing = self.writing.lock().await;
        if self.is_stopped() {
            return Ok(());
        }
        let Some(checkpoint) = self.take_pending() else {
            return Ok(());
        };
        let sent = Sent::now();
        match store
            .checkpoint_and_renew(&self.key, owner, &checkpoint, timings.lease())
            .await
        {
            Ok(()) => {
                self.extend(sent, timings);
                let mut state = self.lock();
                let sent = sent.at;
                state.renewed = Some(state.renewed.map_or(sent, |known| known.max(sent)));
                Ok(())
            }
            Err(err) => {
                if !err.is_fenced() {
                    self.restore_pending(checkpoint);
                }
                Err(err)
            }
        }
    }
}

/// How a shard this instance still holds is handed back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Close {
    /// Write the pending checkpoint, then release.
    Release,
    /// Read to its end, every delivery settled: write `SHARD_END`, then release.
    Finished,
}

impl ShardHandle {
    /// The shard's last writes: stops its deliveries, then writes its final checkpoint (or
    /// `SHARD_END`) and releases the lease, all under the write lock, so no renewal or checkpoint
    /// of this shard lands after the release (a late one would push the expiry out and the next
    /// owner would wait a lease for it). Answers whether the final checkpoint landed, and the
    /// first write the store refused or failed (nothing more is written after it).
    pub(crate) async fn close(
        &self,
        store: &dyn LeaseStore,
        owner: &str,
        how: Close,
    ) -> (bool, Option<LeaseError>) {
        self.halt();
        let _writing = self.writing.lock().await;
        let written = match how {
            Close::Release => match self.take_final() {
                None => Ok(()),
                Some(checkpoint) => {
                    let written = store.checkpoint(&self.key, owner, &checkpoint).await;
                    if written.as_ref().is_err_and(|err| !err.is_fenced()) {
                        self.restore_pending(checkpoint);
                    }
                    written
                }
            },
            Close::Finished => {
                // SHARD_END covers every settled record; a checkpoint still pending would land
                // after it and move the shard back.
                let _ = self.take_final();
                store.checkpoint(&self.key, owner, SHARD_END).await
            }
        };
        if let Err(err) = written {
            return (false, Some(err));
        }
        (true, store.release(&self.key, owner).await.err())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::test_store::Recording;

    fn record(sequence: &str) -> Record {
        Record {
            payload: bytes::Bytes::new(),
            headers: ruststream::HeaderMap::new(),
            partition_key: "k".to_owned(),
            sequence: Arc::from(sequence),
            arrived_ms: None,
        }
    }

    #[test]
    fn a_seek_drops_the_records_waiting_to_come_back() {
        let handle = ShardHandle::new(
            LeaseKey::new("orders", "shardId-000000000000"),
            Arc::default(),
        );
        handle.extend(Sent::now(), &LeaseTimings::default());
        let ticket = handle.track(Arc::from("1"), 0).unwrap();
        handle
            .hand_back(record("1"), ticket, 1, Duration::from_secs(3600))
            .unwrap();
        assert!(
            !handle.is_drained(),
            "a record waits to come back in an hour"
        );
        handle.reset();
        assert!(
            handle.is_drained(),
            "after a seek nothing waits: a closed shard need not wait out the retry's timer"
        );
        assert!(
            handle
                .take_due(Instant::now() + Duration::from_secs(7200))
                .0
                .is_empty()
        );
    }

    #[test]
    fn a_settlement_after_the_lease_was_lost_is_refused() {
        let handle = ShardHandle::new(
            LeaseKey::new("orders", "shardId-000000000000"),
            Arc::default(),
        );
        handle.extend(Sent::now(), &LeaseTimings::default());
        let ticket = handle.track(Arc::from("1"), 0).unwrap();
        handle.stop();
        let err = handle.settle(ticket).unwrap_err();
        assert!(
            matches!(err, KinesisError::SettledAfterHandover { .. }),
            "{err}"
        );
        assert!(handle.take_pending().is_none(), "nothing to write");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_checkpoint_queued_behind_the_closing_writes_is_never_written_after_the_release() {
        let store = Arc::new(Recording::default());
        *store.write_delay.lock().unwrap() = Duration::from_millis(200);
        let key = LeaseKey::new("orders", "shardId-000000000000");
        store
            .acquire(&key, "me", Duration::from_secs(30))
            .await
            .unwrap();
        let handle = Arc::new(ShardHandle::new(key, Arc::default()));
        let timings = LeaseTimings::default();
        handle.extend(Sent::now(), &timings);
        handle.lock().pending = Some(Arc::from("5"));
        // The shard stops while a renewal holds the write lock.
        let held = handle.writing.lock().await;
        let closing = tokio::spawn({
            let (handle, store) = (Arc::clone(&handle), Arc::clone(&store));
            async move { handle.close(store.as_ref(), "me", Close::Release).await }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        // The checkpoint writer, woken by an acknowledgement, queues behind the closing writes,
        // and a last settlement lands while they are on their way.
        let writing = tokio::spawn({
            let (handle, store) = (Arc::clone(&handle), Arc::clone(&store));
            async move { handle.write_pending(store.as_ref(), "me", &timings).await }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        drop(held);
        tokio::time::sleep(Duration::from_millis(100)).await;
        handle.lock().pending = Some(Arc::from("7"));
        let (written, failed) = closing.await.unwrap();
        assert!(written && failed.is_none(), "{failed:?}");
        writing.await.unwrap().unwrap();
        let calls = store.calls_of("me");
        let release = calls
            .iter()
            .find(|call| call.operation == "release")
            .expect("the release");
        assert!(
            calls
                .iter()
                .all(|call| call.operation == "release" || call.ended <= release.started),
            "a write of the shard ran past its release: {calls:#?}"
        );
    }

    const SECOND: Duration = Duration::from_secs(1);

    #[test]
    fn a_lease_is_usable_only_while_both_clocks_say_so() {
        let now = Instant::now();
        let now_ms = 1_000_000;
        assert!(usable(Some(now + SECOND), Some(now_ms + 1000), now, now_ms));
        // The wall clock ran on while the monotonic one stood still (a suspended host).
        assert!(!usable(Some(now + SECOND), Some(now_ms - 1), now, now_ms));
        // The monotonic deadline passed; a wall clock stepped back does not revive the lease.
        assert!(!usable(Some(now), Some(now_ms + 60_000), now, now_ms));
        assert!(!usable(None, Some(now_ms + 1000), now, now_ms));
        assert!(!usable(Some(now + SECOND), None, now, now_ms));
    }

    #[test]
    fn after_a_suspension_longer_than_the_lease_the_shard_delivers_nothing() {
        let timings = LeaseTimings::default();
        let handle = ShardHandle::new(
            LeaseKey::new("orders", "shardId-000000000000"),
            Arc::default(),
        );
        handle.extend(Sent::now(), &timings);
        assert!(handle.may_deliver());

        // A take sent before a 60 s suspension: by the monotonic clock it was sent just now.
        let suspended = ShardHandle::new(
            LeaseKey::new("orders", "shardId-000000000001"),
            Arc::default(),
        );
        let sent = Sent {
            at: Instant::now(),
            at_ms: epoch_millis() - 60_000,
        };
        suspended.extend(sent, &timings);
        assert!(
            suspended
                .valid_until()
                .is_some_and(|until| until > Instant::now()),
            "the monotonic clock alone would still deliver"
        );
        assert!(!suspended.may_deliver());
    }

    #[test]
    fn a_late_answer_never_shortens_the_lease_on_either_clock() {
        let timings = LeaseTimings::default();
        let handle = ShardHandle::new(
            LeaseKey::new("orders", "shardId-000000000000"),
            Arc::default(),
        );
        let fresh = Sent::now();
        handle.extend(fresh, &timings);
        let older = Sent {
            at: fresh
                .at
                .checked_sub(Duration::from_secs(9))
                .unwrap_or(fresh.at),
            at_ms: fresh.at_ms - 9_000,
        };
        handle.extend(older, &timings);
        assert!(handle.may_deliver());
        assert_eq!(
            handle.valid_until(),
            Some(LeaseKeeper::valid_after(&timings, fresh.at))
        );
    }
}

//! What the reader of one shard shares with its deliveries and its lease writer: the
//! watermark, the records handed back, and the shard's [`ShardLease`] (its deadline, the
//! pending checkpoint, the write in flight and the closing writes).

pub(crate) mod lease;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use crate::clock::Instant;

use tokio::sync::Notify;

use ruststream::AckError;

use crate::lease::LeaseKey;
use crate::message::{Check, Settlement};
use crate::record::Record;
use crate::watermark::{Ticket, Watermark};
use crate::{KinesisError, epoch_millis};
pub(crate) use lease::{Answer, Close, Ending, Lost, Next, ShardLease, Write};

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

/// A seek the seeker resolved for one shard: an iterator Kinesis gave for the position, and where
/// later iterators start until a record is delivered.
#[derive(Debug, Clone)]
pub(crate) struct Restart {
    pub(crate) iterator: String,
    pub(crate) resume: crate::position::ShardStart,
    /// The watermark generation the seek started: records of this iterator are tracked in it.
    pub(crate) generation: u64,
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

#[derive(Debug)]
struct ShardState {
    watermark: Watermark,
    /// Deliveries handed out and neither settled nor dropped, of any seek generation: a closed
    /// shard is finished only once this is zero.
    in_flight: usize,
    /// Records handed back, in the order they are due.
    retries: Vec<Redelivery>,
    /// A settlement or hand-back was refused because the broker shut down: the record was not
    /// settled, so the shard is never finished by this instance (`SHARD_END` would pass it).
    refused: bool,
    lease: ShardLease,
}

/// One shard this instance holds the lease of.
#[derive(Debug)]
pub(crate) struct ShardHandle {
    pub(crate) key: LeaseKey,
    state: Mutex<ShardState>,
    /// Wakes the lease writer: a checkpoint is pending, the shard is closing or stopped.
    pub(crate) wake: Notify,
    /// Wakes a reader waiting for every delivery to be settled.
    pub(crate) settled: Notify,
    /// Wakes the redelivery task when a record was handed back.
    pub(crate) handed_back: Notify,
    /// Wakes whoever waits for the lease to end (the reader's `finish`).
    ended: Notify,
    /// Whether the broker was shut down: settlements then answer an error.
    broker_closed: Arc<AtomicBool>,
}

impl ShardHandle {
    /// The handle of a shard whose take granted `lease`.
    pub(crate) fn new(key: LeaseKey, broker_closed: Arc<AtomicBool>, lease: ShardLease) -> Self {
        Self {
            key,
            state: Mutex::new(ShardState {
                watermark: Watermark::default(),
                in_flight: 0,
                retries: Vec::new(),
                refused: false,
                lease,
            }),
            wake: Notify::new(),
            settled: Notify::new(),
            handed_back: Notify::new(),
            ended: Notify::new(),
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
            state.refused = true;
            drop(state);
            self.settled.notify_waiters();
            return Err(KinesisError::ShutDown {
                what: "settling a delivery",
            });
        }
        if !state.lease.takes_settlements() {
            drop(state);
            self.settled.notify_waiters();
            return Err(KinesisError::SettledAfterHandover {
                stream: self.key.stream().to_owned(),
                shard: self.key.shard().to_owned(),
            });
        }
        let grown = state
            .watermark
            .settle(ticket)
            .is_some_and(|checkpoint| state.lease.checkpoint_ready(checkpoint));
        drop(state);
        if grown {
            self.wake.notify_one();
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
        if closed || state.lease.is_halted() || ticket.generation != state.watermark.generation() {
            state.in_flight = state.in_flight.saturating_sub(1);
            state.refused |= closed;
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
    /// Never after a settlement the broker's shutdown refused: that record is the next owner's.
    pub(crate) fn is_drained(&self) -> bool {
        let state = self.lock();
        state.in_flight == 0 && !state.refused
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
        state.lease.drop_pending();
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

    /// Whether this instance may still deliver from the shard: it holds it, and the lease is
    /// valid by both of its clocks.
    pub(crate) fn may_deliver(&self) -> bool {
        self.lock()
            .lease
            .may_deliver(Instant::now(), epoch_millis())
    }

    /// Stops deliveries from this shard at once, and writes no checkpoint of it any more: its
    /// lease ran out by this instance's clock. A shard already closing goes on closing.
    pub(crate) fn stop(&self) {
        self.lock().lease.run_out();
        self.halted();
    }

    /// Wakes everyone who must see that the shard delivers nothing more.
    fn halted(&self) {
        self.wake.notify_one();
        self.settled.notify_waiters();
        self.ended.notify_waiters();
    }

    /// Whether the shard delivers nothing more: its lease is lost, or it is being handed back.
    pub(crate) fn is_stopped(&self) -> bool {
        self.lock().lease.is_halted()
    }

    /// Whether the lease is lost (refused, or run out): the shard is left without a checkpoint.
    pub(crate) fn is_lost(&self) -> bool {
        self.lock().lease.is_lost()
    }

    /// What the lease writer does next (a write it sends now, or how long it waits).
    pub(crate) fn next_write(&self) -> Next<Instant> {
        self.lock().lease.next(Instant::now(), epoch_millis())
    }

    /// The store answered the write in flight.
    pub(crate) fn answer(&self, answer: Answer) {
        let ended = {
            let mut state = self.lock();
            state.lease.on_answer(Instant::now(), answer);
            state.lease.ending().is_some()
        };
        if ended {
            self.halted();
        }
    }

    /// Hands the shard back `how` and waits until its lease writer sent the final writes (the
    /// pending checkpoint or `SHARD_END`, then the release) after the write in flight, and no
    /// write of the shard follows the release. Answers how the lease ended: a lost one writes
    /// nothing.
    pub(crate) async fn close(&self, how: Close) -> Ending {
        loop {
            let ended = self.ended.notified();
            let mut ended = std::pin::pin!(ended);
            ended.as_mut().enable();
            {
                let mut state = self.lock();
                state.lease.close(how);
                if let Some(ending) = state.lease.ending() {
                    return ending;
                }
            }
            self.wake.notify_one();
            self.settled.notify_waiters();
            ended.await;
        }
    }
}

/// A live delivery settles against the shard that read it, by its place in the watermark.
impl Settlement for ShardHandle {
    fn on_settle(&self, ticket: Ticket) -> Result<(), AckError> {
        self.settle(ticket)
            .map_err(|err| AckError::Broker(Box::new(err)))
    }

    fn on_forget(&self, ticket: Ticket) {
        self.forget(ticket);
    }

    fn on_hand_back(
        &self,
        ticket: Ticket,
        record: Record,
        _shard: &Arc<str>,
        attempt: u64,
        delay: Duration,
    ) -> Result<(), AckError> {
        self.hand_back(record, ticket, attempt, delay)
            .map_err(|err| AckError::Broker(Box::new(err)))
    }

    fn check(&self, ticket: Ticket, _shard: &str) -> Check {
        if self.is_stopped() {
            return Check::Stopped;
        }
        if !self.may_deliver() {
            // Another instance may hold the shard by now; stopping it also ends its reader, so
            // nothing waits on this record.
            self.stop();
            return Check::RanOut;
        }
        if self.generation() == ticket.generation {
            Check::Current
        } else {
            Check::Stale
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::LeaseTimings;

    fn record(sequence: &str) -> Record {
        Record {
            payload: bytes::Bytes::new(),
            headers: ruststream::HeaderMap::new(),
            partition_key: "k".to_owned(),
            sequence: Arc::from(sequence),
            arrived_ms: None,
        }
    }

    /// The handle of a shard taken just now.
    fn taken() -> ShardHandle {
        let sent = Sent::now();
        ShardHandle::new(
            LeaseKey::new("orders", "shardId-000000000000"),
            Arc::default(),
            ShardLease::taken(LeaseTimings::default(), sent.at, sent.at_ms),
        )
    }

    #[test]
    fn a_seek_drops_the_records_waiting_to_come_back() {
        let handle = taken();
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
        let handle = taken();
        let ticket = handle.track(Arc::from("1"), 0).unwrap();
        handle.stop();
        let err = handle.settle(ticket).unwrap_err();
        assert!(
            matches!(err, KinesisError::SettledAfterHandover { .. }),
            "{err}"
        );
        assert_eq!(
            handle.next_write(),
            Next::Ended(Ending::Lost(Lost::RanOut)),
            "nothing to write"
        );
    }

    #[test]
    fn a_settlement_that_grows_the_prefix_is_the_next_write() {
        let handle = taken();
        let first = handle.track(Arc::from("1"), 0).unwrap();
        let second = handle.track(Arc::from("2"), 0).unwrap();
        handle.settle(second).unwrap();
        assert!(
            matches!(handle.next_write(), Next::Wait(Some(_))),
            "nothing settled in order yet"
        );
        handle.settle(first).unwrap();
        assert_eq!(
            handle.next_write(),
            Next::Send(Write::Checkpoint(Arc::from("2")))
        );
    }

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn a_close_waits_for_the_write_in_flight_then_its_final_writes() {
        let handle = Arc::new(taken());
        let ticket = handle.track(Arc::from("1"), 0).unwrap();
        handle.settle(ticket).unwrap();
        let Next::Send(Write::Checkpoint(_)) = handle.next_write() else {
            panic!("the checkpoint goes out");
        };
        let closing = tokio::spawn({
            let handle = Arc::clone(&handle);
            async move { handle.close(Close::Release).await }
        });
        tokio::task::yield_now().await;
        assert!(handle.is_stopped(), "a closing shard delivers nothing");
        assert_eq!(
            handle.next_write(),
            Next::Wait(None),
            "after the write in flight"
        );
        assert!(!closing.is_finished());
        handle.answer(Answer::Done);
        assert_eq!(handle.next_write(), Next::Send(Write::Release));
        handle.answer(Answer::Done);
        assert_eq!(closing.await.unwrap(), Ending::Closed { written: true });
    }

    #[test]
    fn a_shard_whose_settlement_the_shutdown_refused_is_never_drained() {
        let closed = Arc::new(AtomicBool::new(false));
        let sent = Sent::now();
        let handle = ShardHandle::new(
            LeaseKey::new("orders", "shardId-000000000000"),
            Arc::clone(&closed),
            ShardLease::taken(LeaseTimings::default(), sent.at, sent.at_ms),
        );
        let first = handle.track(Arc::from("1"), 0).unwrap();
        let last = handle.track(Arc::from("2"), 0).unwrap();
        handle.settle(first).unwrap();
        closed.store(true, Ordering::Release);
        let err = handle.settle(last).unwrap_err();
        assert!(matches!(err, KinesisError::ShutDown { .. }), "{err}");
        assert!(
            !handle.is_drained(),
            "record 2 was not settled: a closed shard must not be finished past it"
        );
    }

    #[test]
    fn after_a_suspension_longer_than_the_lease_the_shard_delivers_nothing() {
        let timings = LeaseTimings::default();
        assert!(taken().may_deliver());
        // A take sent before a 60 s suspension: by the monotonic clock it was sent just now.
        let suspended = ShardHandle::new(
            LeaseKey::new("orders", "shardId-000000000001"),
            Arc::default(),
            ShardLease::taken(timings, Instant::now(), epoch_millis() - 60_000),
        );
        assert!(!suspended.may_deliver());
    }
}

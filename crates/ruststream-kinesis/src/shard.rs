//! What the reader of one shard shares with its deliveries and its checkpoint writer: the
//! watermark, the checkpoint waiting to be written, and whether the shard may still deliver.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use tokio::sync::Notify;

use crate::coordinator::keeper::LeaseKeeper;
use crate::lease::{LeaseError, LeaseKey, LeaseStore, millis};
use crate::watermark::{Ticket, Watermark};
use crate::{LeaseTimings, epoch_millis};

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

#[derive(Debug, Default)]
struct ShardState {
    watermark: Watermark,
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
        (state.watermark.generation() == generation).then(|| state.watermark.push(sequence))
    }

    /// Settles one delivery; a grown prefix becomes the pending checkpoint.
    pub(crate) fn settle(&self, ticket: Ticket) -> Result<(), crate::KinesisError> {
        if self.broker_closed.load(Ordering::Acquire) {
            return Err(crate::KinesisError::ShutDown {
                what: "settling a delivery",
            });
        }
        let mut state = self.lock();
        if let Some(checkpoint) = state.watermark.settle(ticket) {
            state.pending = Some(checkpoint);
            drop(state);
            self.wake.notify_one();
        }
        self.settled.notify_waiters();
        Ok(())
    }

    /// Whether every delivery of this shard was settled.
    pub(crate) fn is_drained(&self) -> bool {
        self.lock().watermark.is_drained()
    }

    /// Forgets every delivery and pending checkpoint (a seek).
    pub(crate) fn reset(&self) {
        let mut state = self.lock();
        state.watermark.reset();
        state.pending = None;
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

    /// Stops deliveries from this shard at once.
    pub(crate) fn stop(&self) {
        self.stopped.store(true, Ordering::Release);
        self.wake.notify_one();
        self.settled.notify_waiters();
    }

    pub(crate) fn is_stopped(&self) -> bool {
        self.stopped.load(Ordering::Acquire)
    }

    /// Writes the pending checkpoint, in order with every other write of this shard; the write
    /// also renews the lease, which the keeper learns through [`take_renewed`](Self::take_renewed).
    pub(crate) async fn write_pending(
        &self,
        store: &dyn LeaseStore,
        owner: &str,
        timings: &LeaseTimings,
    ) -> Result<(), LeaseError> {
        let _writing = self.writing.lock().await;
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

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

//! What the reader of one shard shares with its deliveries and its checkpoint writer: the
//! watermark, the checkpoint waiting to be written, and whether the shard may still deliver.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use tokio::sync::Notify;

use crate::lease::{LeaseError, LeaseKey, LeaseStore};
use crate::watermark::{Ticket, Watermark};

#[derive(Debug, Default)]
struct ShardState {
    watermark: Watermark,
    /// The newest checkpoint not yet handed to the store.
    pending: Option<Arc<str>>,
    /// Until when this instance may deliver, by its own monotonic clock.
    valid_until: Option<Instant>,
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

    /// Records a successful take or renewal: the lease holds until `until` by our clock.
    pub(crate) fn extend(&self, until: Instant) {
        let mut state = self.lock();
        state.valid_until = Some(state.valid_until.map_or(until, |known| known.max(until)));
    }

    /// Takes the send time of the newest checkpoint write that renewed the lease, if any.
    pub(crate) fn take_renewed(&self) -> Option<Instant> {
        self.lock().renewed.take()
    }

    /// Whether this instance may still deliver from the shard.
    pub(crate) fn may_deliver(&self) -> bool {
        !self.stopped.load(Ordering::Acquire)
            && self
                .lock()
                .valid_until
                .is_some_and(|until| Instant::now() < until)
    }

    /// Until when the lease is valid by our clock.
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
        timings: &crate::LeaseTimings,
    ) -> Result<(), LeaseError> {
        let _writing = self.writing.lock().await;
        let Some(checkpoint) = self.take_pending() else {
            return Ok(());
        };
        let sent = Instant::now();
        match store
            .checkpoint_and_renew(&self.key, owner, &checkpoint, timings.lease())
            .await
        {
            Ok(()) => {
                self.extend(crate::coordinator::keeper::LeaseKeeper::valid_after(
                    timings, sent,
                ));
                let mut state = self.lock();
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

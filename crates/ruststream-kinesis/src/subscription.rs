//! One live subscription: its settings, its channel, the shards it reads, and what its readers
//! tell it (a failure to report, a shard that ended, left the stream or could not be read).
//! The coordinator (`coordinator/`) decides which shards it takes; each reader (`reader/`)
//! reads one of them.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use aws_sdk_kinesis::Client;
use tokio::sync::{Notify, mpsc};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::api::ShardInfo;
use crate::clock::Instant;
use crate::lease::LeaseStore;
use crate::message::Item;
use crate::shard::ShardHandle;
use crate::{KinesisError, KinesisPosition, LeaseTimings};

/// The first wait after a take that failed once the lease was won (its iterator refused, a
/// legacy row in the way); it doubles with each failure in a row, up to the longer of the lease
/// and the listing interval (10 s by default): a shard whose takes failed during an outage is
/// taken again no later than a lapsed lease would be.
const TAKE_BACKOFF: Duration = Duration::from_secs(1);

/// The longest wait after `failures` failed takes of a shard in a row: doubling from
/// [`TAKE_BACKOFF`], capped at `longest` (the longer of the lease and the listing interval).
pub(crate) fn take_backoff_ceiling(failures: u32, longest: Duration) -> Duration {
    TAKE_BACKOFF
        .saturating_mul(1 << failures.saturating_sub(1).min(10))
        .min(longest.max(TAKE_BACKOFF))
}

/// A shard whose takes keep failing after the lease was won: how often in a row, and when it
/// may be tried again.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TakeBackoff {
    pub(crate) failures: u32,
    pub(crate) until: Instant,
}

impl TakeBackoff {
    /// The backoff after one more failure than `previous`: doubling from [`TAKE_BACKOFF`], with
    /// jitter so the instances that all fail on one shard do not retry in step.
    pub(crate) fn after(previous: Option<Self>, now: Instant, longest: Duration) -> Self {
        let failures = previous.map_or(1, |backoff| backoff.failures.saturating_add(1));
        let ceiling = take_backoff_ceiling(failures, longest);
        let wait = rand::Rng::random_range(&mut rand::rng(), ceiling / 2..=ceiling);
        Self {
            failures,
            until: now + wait,
        }
    }
}

/// A shard this subscription reads.
#[derive(Debug)]
pub(crate) struct Running {
    pub(crate) handle: Arc<ShardHandle>,
}

/// One live subscription: its settings, its channel, and the shards it reads.
#[derive(Debug)]
pub(crate) struct Subscription {
    pub(crate) stream: Arc<str>,
    pub(crate) client: Client,
    pub(crate) store: Arc<dyn LeaseStore>,
    pub(crate) owner: Arc<str>,
    pub(crate) timings: LeaseTimings,
    pub(crate) poll_interval: Duration,
    pub(crate) batch_size: u32,
    /// How many deliveries a shard holds at most behind its oldest unsettled one before its
    /// reader stops reading ahead.
    pub(crate) window: usize,
    pub(crate) tx: mpsc::Sender<Item>,
    pub(crate) cancel: CancellationToken,
    /// This subscription's tasks, which a later subscription to the stream waits for.
    pub(crate) tasks: TaskTracker,
    /// The broker's tasks, which its shutdown waits for.
    pub(crate) broker_tasks: TaskTracker,
    pub(crate) runtime: tokio::runtime::Handle,
    pub(crate) broker_closed: Arc<AtomicBool>,
    pub(crate) running: Mutex<HashMap<Arc<str>, Running>>,
    pub(crate) finished: Mutex<HashSet<Arc<str>>>,
    /// Closed shards this subscription never read and that would start at the tip: never
    /// taken while the initial position stays the tip.
    pub(crate) skipped: Mutex<HashSet<Arc<str>>>,
    /// Shards that left the stream while this subscription read them: never taken again, but
    /// their rows still tell their children that they were read.
    pub(crate) gone: Mutex<HashSet<Arc<str>>>,
    /// Shards whose takes failed after the lease was won, and until when they are left alone.
    pub(crate) take_backoff: Mutex<HashMap<Arc<str>, TakeBackoff>>,
    /// Wakes the coordinator before its next listing (a shard ended or stopped).
    pub(crate) wake: Notify,
    /// Where shards without a checkpoint start; a seek made before any shard was taken sets it.
    pub(crate) initial: Mutex<KinesisPosition>,
    /// The shards the last listing found, for the handover poll between listings.
    pub(crate) last_listing: Mutex<Vec<ShardInfo>>,
}

impl Subscription {
    /// Runs `task` on the broker's runtime, tracked by this subscription and by the broker.
    pub(crate) fn spawn(&self, task: impl std::future::Future<Output = ()> + Send + 'static) {
        let held = self.broker_tasks.token();
        self.tasks.spawn_on(
            async move {
                let _held = held;
                task.await;
            },
            &self.runtime,
        );
    }

    /// Sends a failure to the subscriber stream without waiting; a full channel drops it with a
    /// warning rather than stalling a reader.
    pub(crate) fn report(&self, err: KinesisError) {
        tracing::warn!(stream = %self.stream, error = %err, "kinesis subscription");
        let _ = self.tx.try_send(Err(err));
    }

    pub(crate) fn lease_error(&self, shard: &str, source: crate::LeaseError) -> KinesisError {
        KinesisError::Lease {
            stream: self.stream.to_string(),
            shard: shard.to_owned(),
            source: Box::new(source),
        }
    }

    /// Never reads `shard` again (it left the stream while this instance read it).
    pub(crate) fn forget(&self, shard: &Arc<str>) {
        lock(&self.gone).insert(Arc::clone(shard));
    }

    /// Leaves `shard` alone for a backoff that doubles with each failure in a row; answers it.
    pub(crate) fn delay_take(&self, shard: &Arc<str>) -> TakeBackoff {
        let mut waits = lock(&self.take_backoff);
        let longest = self.timings.lease().max(self.timings.listing_interval());
        let backoff = TakeBackoff::after(waits.get(shard).copied(), Instant::now(), longest);
        waits.insert(Arc::clone(shard), backoff);
        backoff
    }

    /// Forgets a shard whose reader ended, and lists again soon.
    pub(crate) fn reader_ended(&self, shard: &Arc<str>, finished: bool) {
        lock(&self.running).remove(shard);
        if finished {
            lock(&self.finished).insert(Arc::clone(shard));
        }
        self.wake.notify_one();
    }
}

/// Locks `mutex`, whatever a panicking holder left.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

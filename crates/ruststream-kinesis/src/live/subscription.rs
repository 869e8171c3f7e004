//! One live subscription: its settings, its channel, the shards it reads, and what its readers
//! tell it (a failure to report, a shard that ended, left the stream or could not be read).
//! The coordinator (`coordinator/`) decides which shards it takes; each reader (`reader/`)
//! reads one of them.

use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use aws_sdk_kinesis::Client;
use tokio::sync::{Notify, mpsc};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::clock::Instant;
use crate::coordinator::machine::Coordinator;
use crate::delivery::message::Item;
use crate::kinesis::fan_out::Consumer;
use crate::lease::LeaseStore;
use crate::live::pause::Pause;
use crate::live::upkeep::Upkeeps;
use crate::shard::ShardHandle;
use crate::telemetry::Meters;
use crate::{KinesisError, LeaseTimings};

/// A shard this subscription reads.
#[derive(Debug)]
pub(crate) struct Running {
    pub(crate) handle: Arc<ShardHandle>,
    /// Its reader's own token: cancelled, it writes its final checkpoint and releases.
    pub(crate) cancel: CancellationToken,
}

/// One live subscription: its settings, its channel, and the shards it reads.
#[derive(Debug)]
pub(crate) struct Subscription {
    pub(crate) stream: Arc<str>,
    pub(crate) client: Client,
    pub(crate) store: Arc<dyn LeaseStore>,
    /// Where this subscription's reads and leases are counted.
    pub(crate) meters: Meters,
    pub(crate) owner: Arc<str>,
    pub(crate) timings: LeaseTimings,
    pub(crate) poll_interval: Duration,
    pub(crate) batch_size: u32,
    /// How many deliveries a shard holds at most behind its oldest unsettled one before its
    /// reader stops reading ahead.
    pub(crate) window: usize,
    /// How long a shard may deliver nothing while records wait before it counts as stalled.
    pub(crate) stall_after: Duration,
    /// The enhanced fan-out consumer the shards are read through; `None`: polling.
    pub(crate) fan_out: Option<Consumer>,
    pub(crate) tx: mpsc::Sender<Item>,
    pub(crate) cancel: CancellationToken,
    /// Whether the instance is paused (an earlier run under its owner id is alive), shared by
    /// every subscription of the broker.
    pub(crate) pause: Arc<Pause>,
    /// Which of the coordinator's upkeep calls keep failing.
    pub(crate) upkeeps: Upkeeps,
    /// This subscription's tasks, which a later subscription to the stream waits for.
    pub(crate) tasks: TaskTracker,
    /// The broker's tasks, which its shutdown waits for.
    pub(crate) broker_tasks: TaskTracker,
    pub(crate) runtime: tokio::runtime::Handle,
    pub(crate) broker_closed: Arc<AtomicBool>,
    pub(crate) running: Mutex<HashMap<Arc<str>, Running>>,
    /// What it knows of the stream's shards, and the coordinator's decisions on it.
    pub(crate) coordinator: Mutex<Coordinator<Instant>>,
    /// Wakes the coordinator before its next listing (a shard ended or stopped).
    pub(crate) wake: Notify,
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

    /// Forgets a shard whose reader ended, and lists again soon.
    pub(crate) fn reader_ended(&self, shard: &Arc<str>, finished: bool) {
        self.meters.reader_ended(&self.stream, shard, &self.owner);
        lock(&self.running).remove(shard);
        lock(&self.coordinator).reader_ended(shard, finished);
        self.wake.notify_one();
    }
}

/// Locks `mutex`, whatever a panicking holder left.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

//! One live subscription: its settings, its channel, the shards it reads, and what its readers
//! tell it (a failure to report, a shard that ended, left the stream or could not be read).
//! The coordinator (`coordinator/`) decides which shards it takes; each reader (`reader/`)
//! reads one of them.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::clock::Instant;
use crate::coordinator::machine::Coordinator;
use crate::coordinator::twins::Incarnation;
use crate::delivery::outlet::Outlet;
use crate::kinesis::calls::Kinesis;
use crate::kinesis::fan_out::Consumer;
use crate::lease::{LeaseStore, Timed};
use crate::live::chain::Beats;
use crate::live::heard::Heard;
use crate::live::lock;
use crate::live::pause::Pause;
use crate::live::upkeep::Upkeeps;
use crate::shard::{ReadSettings, ShardHandle, Stop};
use crate::telemetry::Meters;
use crate::{KinesisError, KinesisStream, LeaseTimings};

/// The seeks of a subscription to a position of every shard (not to one shard's record): a take
/// planned before one, whose reader registered only after the seek looked at the shards read,
/// started where it was planned, and is sought once its pass is over
/// ([`take_all`](Subscription::take_all)).
#[derive(Debug, Default)]
pub(crate) struct EveryShardSeek {
    /// How many there were.
    pub(crate) count: u64,
    /// Where the last one moved to, and when (epoch ms): a late take sought to `Latest` reads
    /// from that moment, not from the later tip.
    pub(crate) to: Option<(crate::KinesisPosition, u64)>,
}

/// A shard this subscription reads.
#[derive(Debug)]
pub(crate) struct Running {
    pub(super) handle: Arc<ShardHandle>,
    /// Its reader's own token: cancelled, it writes its final checkpoint and releases.
    pub(super) cancel: CancellationToken,
}

/// What every subscription of one connected broker shares: the Kinesis it reads, the lease
/// store and how this instance holds leases there, this run of the instance, and the broker's
/// token, tasks, runtime and closed flag. Made once, at connect.
#[derive(Debug, Clone)]
pub(crate) struct Instance {
    kinesis: Kinesis,
    store: Arc<dyn LeaseStore>,
    meters: Meters,
    owner: Arc<str>,
    /// The owner id the metrics carry: the broker's, without a run's suffix (leases kept alive
    /// by beat), so a restart adds no series.
    owner_label: Arc<str>,
    timings: LeaseTimings,
    /// Whether the instances balance the shards by handoffs.
    balance: bool,
    /// This run of the instance, recorded under its owner id.
    incarnation: Incarnation,
    /// Whether the instance is paused: an earlier run under its owner id is alive.
    pause: Arc<Pause>,
    /// The broker's token: cancelled at shutdown.
    cancel: CancellationToken,
    /// The broker's tasks, which its shutdown waits for.
    tasks: TaskTracker,
    /// The runtime the broker connected on, where every task of it runs.
    runtime: tokio::runtime::Handle,
    /// Whether the broker was shut down.
    closed: Arc<AtomicBool>,
    /// In process, where exactly-once handlings are recorded.
    #[cfg(all(feature = "testing", feature = "dynamodb-lease"))]
    journal: Option<crate::InProcessCommits>,
}

impl Instance {
    /// The instance a broker connects as, on the current runtime: it reads `kinesis` and holds
    /// its leases in `store` as `owner` under `timings`, balancing the shards by handoffs when
    /// `balance`, counting into `meters`; a run of its own, nothing running yet.
    pub(crate) fn new(
        kinesis: Kinesis,
        store: Arc<dyn LeaseStore>,
        owner: Arc<str>,
        timings: LeaseTimings,
        balance: bool,
        meters: Meters,
    ) -> Self {
        Self {
            kinesis,
            store,
            meters,
            owner_label: Arc::clone(&owner),
            owner,
            timings,
            balance,
            incarnation: Incarnation::new(crate::epoch_millis(), rand::random()),
            pause: Arc::default(),
            cancel: CancellationToken::new(),
            tasks: TaskTracker::new(),
            runtime: tokio::runtime::Handle::current(),
            closed: Arc::new(AtomicBool::new(false)),
            #[cfg(all(feature = "testing", feature = "dynamodb-lease"))]
            journal: None,
        }
    }

    /// The instance holds its rows as `owner` (a run's own, kept alive by beat), its metrics
    /// still labelled with the owner id it was made with.
    pub(crate) fn holding_as(self, owner: Arc<str>) -> Self {
        Self { owner, ..self }
    }

    /// In process: the instance records its exactly-once handlings in `journal`.
    #[cfg(all(feature = "testing", feature = "dynamodb-lease"))]
    pub(crate) fn with_journal(self, journal: crate::InProcessCommits) -> Self {
        Self {
            journal: Some(journal),
            ..self
        }
    }

    /// The Kinesis the subscriptions read.
    pub(crate) fn kinesis(&self) -> &Kinesis {
        &self.kinesis
    }

    /// Where the broker counts what it does.
    pub(crate) fn meters(&self) -> &Meters {
        &self.meters
    }

    /// This instance's owner id in the lease table.
    pub(crate) fn owner(&self) -> &str {
        &self.owner
    }

    /// The runtime the broker connected on.
    pub(crate) fn runtime(&self) -> &tokio::runtime::Handle {
        &self.runtime
    }

    /// The broker's closed flag, which publishers and deliveries check too.
    pub(crate) fn closed(&self) -> &Arc<AtomicBool> {
        &self.closed
    }

    /// The lease store, as the broker was given it.
    pub(crate) fn store(&self) -> &Arc<dyn LeaseStore> {
        &self.store
    }

    /// How this instance holds leases.
    pub(crate) fn timings(&self) -> LeaseTimings {
        self.timings
    }

    /// Whether the broker was shut down.
    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Shuts the instance down: later publishes, settlements and seeks fail from here on, and
    /// every reader stops, writes its final checkpoint and releases its lease. Waits for them up
    /// to `grace`; `false` when they did not finish within it.
    pub(crate) async fn shut_down(&self, grace: Duration) -> bool {
        self.closed.store(true, Ordering::Release);
        self.cancel.cancel();
        self.tasks.close();
        tokio::time::timeout(grace, self.tasks.wait()).await.is_ok()
    }
}

/// One live subscription: its settings, its channel, and the shards it reads.
#[derive(Debug)]
pub(crate) struct Subscription {
    pub(super) stream: Arc<str>,
    pub(super) kinesis: Kinesis,
    pub(super) store: Arc<dyn LeaseStore>,
    /// Where this subscription's reads and leases are counted.
    pub(super) meters: Meters,
    pub(super) owner: Arc<str>,
    /// The owner id the metrics carry (without a run's suffix).
    pub(super) owner_label: Arc<str>,
    pub(super) timings: LeaseTimings,
    /// How each shard is read (from the subscription's `KinesisStream`).
    pub(super) read: ReadSettings,
    /// How long a shard may deliver nothing while records wait before it counts as stalled.
    pub(super) stall_after: Duration,
    /// The enhanced fan-out consumer the shards are read through; `None`: polling.
    pub(super) fan_out: Option<Consumer>,
    /// Whether handlers' staged writes commit with the checkpoint (exactly once).
    pub(super) exactly_once: bool,
    /// The store's transactions, which commit them (exactly once only).
    #[cfg(feature = "dynamodb-lease")]
    pub(super) transactions: Option<crate::lease::Transactions>,
    /// Exactly once, the units of batches that span shards, waiting for their joint commit.
    #[cfg(feature = "dynamodb-lease")]
    pub(super) joints: Option<Arc<crate::shard::Joints>>,
    /// In process, where exactly-once handlings are recorded.
    #[cfg(all(feature = "testing", feature = "dynamodb-lease"))]
    pub(super) journal: Option<crate::InProcessCommits>,
    pub(super) tx: Outlet,
    pub(super) cancel: CancellationToken,
    /// Whether the instance is paused (an earlier run under its owner id is alive), shared by
    /// every subscription of the broker.
    pub(super) pause: Arc<Pause>,
    /// Which of the coordinator's upkeep calls keep failing.
    pub(super) upkeeps: Upkeeps,
    /// This subscription's tasks, which a later subscription to the stream waits for.
    tasks: TaskTracker,
    /// The broker's tasks, which its shutdown waits for.
    broker_tasks: TaskTracker,
    runtime: tokio::runtime::Handle,
    pub(super) broker_closed: Arc<AtomicBool>,
    pub(super) running: Mutex<HashMap<Arc<str>, Running>>,
    /// The seeks of every shard made so far, changed and read under the `running` lock.
    pub(super) every_shard_seek: Mutex<EveryShardSeek>,
    /// What the readers and the seeks told the coordinator, in order, applied by its driver
    /// before it next uses it.
    heard: Mutex<Vec<Heard>>,
    /// Wakes the coordinator before its next listing (a shard ended or stopped).
    pub(super) wake: Notify,
    /// With leases kept alive by beat, this subscription's chain of beats; `None`: renewed per
    /// row.
    pub(super) beats: Option<Beats>,
}

impl Subscription {
    /// The subscription `source` describes on `instance`, its deliveries going out on `tx`,
    /// read through the enhanced fan-out consumer `fan_out` if any, and the coordinator its
    /// driver is to own; nothing runs yet ([`coordinator::start`](crate::live::coordinator::start)
    /// runs it).
    pub(crate) fn new(
        instance: Instance,
        source: &KinesisStream,
        fan_out: Option<Consumer>,
        tx: Outlet,
    ) -> (Arc<Self>, Coordinator<Instant>) {
        let Instance {
            kinesis,
            store,
            meters,
            owner,
            owner_label,
            timings,
            balance,
            incarnation,
            pause,
            cancel,
            tasks,
            runtime,
            closed,
            #[cfg(all(feature = "testing", feature = "dynamodb-lease"))]
            journal,
        } = instance;
        let stream: Arc<str> = Arc::from(source.name.as_ref());
        let read = ReadSettings::of(source, fan_out.is_some(), kinesis.pushes());
        let coordinator = Coordinator::new(timings, source.initial.clone())
            .with_balancing(balance)
            .with_notice_head_apart(store.keeps_notice_head_apart())
            .with_polls_behind(store.polls_read_behind())
            .with_incarnation(incarnation);
        let store: Arc<dyn LeaseStore> = Arc::new(Timed::new(
            store,
            timings.store_call_timeout(),
            meters.clone(),
        ));
        #[cfg(feature = "dynamodb-lease")]
        let transactions = if source.exactly_once {
            store.transactions()
        } else {
            None
        };
        let sub = Arc::new(Self {
            heard: Mutex::default(),
            store,
            exactly_once: source.exactly_once,
            #[cfg(feature = "dynamodb-lease")]
            joints: transactions.as_ref().map(|_| Arc::default()),
            #[cfg(feature = "dynamodb-lease")]
            transactions,
            #[cfg(all(feature = "testing", feature = "dynamodb-lease"))]
            journal,
            upkeeps: Upkeeps::start(&stream, &meters),
            stream,
            kinesis,
            meters,
            owner,
            owner_label,
            timings,
            read,
            stall_after: source.stall_after,
            fan_out,
            tx,
            cancel: cancel.child_token(),
            pause,
            tasks: TaskTracker::new(),
            broker_tasks: tasks,
            runtime,
            broker_closed: closed,
            running: Mutex::default(),
            every_shard_seek: Mutex::default(),
            wake: Notify::new(),
            beats: timings.is_kept_by_beat().then(Beats::default),
        });
        (sub, coordinator)
    }

    /// This subscription's tasks, which a later subscription to the stream waits for.
    pub(crate) fn tasks(&self) -> TaskTracker {
        self.tasks.clone()
    }

    /// Runs `task` on the broker's runtime, tracked by this subscription and by the broker.
    pub(crate) fn spawn(&self, task: impl std::future::Future<Output = ()> + Send + 'static) {
        drop(self.spawn_joined(task));
    }

    /// Runs `task` as [`spawn`](Self::spawn) does, and answers its handle.
    pub(crate) fn spawn_joined<T: Send + 'static>(
        &self,
        task: impl std::future::Future<Output = T> + Send + 'static,
    ) -> tokio::task::JoinHandle<T> {
        let held = self.broker_tasks.token();
        self.tasks.spawn_on(
            async move {
                let _held = held;
                task.await
            },
            &self.runtime,
        )
    }

    /// Sends a failure to the subscriber stream without waiting; a full channel drops it with a
    /// warning rather than stalling a reader.
    pub(crate) fn report(&self, err: KinesisError) {
        tracing::warn!(stream = %self.stream, error = %err, "kinesis subscription");
        self.tx.report(err);
    }

    pub(crate) fn lease_error(&self, shard: &str, source: crate::LeaseError) -> KinesisError {
        KinesisError::Lease {
            stream: self.stream.to_string(),
            shard: shard.to_owned(),
            source: Box::new(source),
        }
    }

    /// The reader of `shard` stopped reading, as `stop` says: told to the coordinator before the
    /// shard is handed back.
    pub(crate) fn reader_stopped(&self, shard: &Arc<str>, stop: Stop) {
        self.hear(Heard::ReaderStopped {
            shard: Arc::clone(shard),
            stop,
            at: Instant::now(),
            coin: rand::random(),
        });
    }

    /// Forgets a shard whose reader ended, and lists again soon.
    pub(crate) fn reader_ended(&self, shard: &Arc<str>, finished: bool) {
        lock(&self.running).remove(shard);
        self.hear(Heard::ReaderEnded {
            shard: Arc::clone(shard),
            finished,
        });
        self.wake.notify_one();
    }

    /// Tells the coordinator `heard`; it applies it before its driver next uses it.
    pub(super) fn hear(&self, heard: Heard) {
        lock(&self.heard).push(heard);
    }

    /// What the readers and seeks told the coordinator since its driver last asked, in the
    /// order told.
    pub(super) fn told(&self) -> Vec<Heard> {
        std::mem::take(&mut *lock(&self.heard))
    }
}

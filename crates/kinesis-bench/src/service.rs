//! The service every live figure runs: one `#[subscriber]` handler that decodes a small JSON
//! record, tells a [`Probe`] and acknowledges, mounted on a `KinesisBroker` with the lease store
//! and timings the figure chooses.

use std::collections::HashSet;
use std::convert::Infallible;
use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use ruststream_kinesis::prelude::*;
use ruststream_kinesis::{KinesisPosition, ShardId};
use serde::Deserialize;
use tokio::sync::Notify;

use crate::stack::Stack;

/// What the producers write and the handler decodes; other fields (the padding of the memory
/// figure) are skipped.
#[derive(Debug, Deserialize)]
pub struct BenchRecord {
    pub id: u64,
}

/// The body of record `i`: about 60 bytes of JSON.
pub fn body(i: u64) -> Vec<u8> {
    format!(
        r#"{{"id":{i},"sku":"sku-{:02}","quantity":{}}}"#,
        i % 17,
        i % 5 + 1
    )
    .into_bytes()
}

/// The body of record `i` padded to about `size` bytes.
pub fn padded_body(i: u64, size: usize) -> Vec<u8> {
    let head = format!(r#"{{"id":{i},"pad":""#);
    let pad = size.saturating_sub(head.len() + 2);
    let mut out = head.into_bytes();
    out.extend(std::iter::repeat_n(b'x', pad));
    out.extend_from_slice(b"\"}");
    out
}

/// What a figure learns from a running service: how many records it handled, when the first
/// one and a target one arrived, and which shards they came from.
#[derive(Debug, Clone)]
pub struct Probe(Arc<ProbeInner>);

#[derive(Debug)]
struct ProbeInner {
    count: AtomicU64,
    count_target: AtomicU64,
    shard_target: AtomicU64,
    /// Every target shard delivered: the handler stops taking the lock for them.
    shards_done: AtomicBool,
    marks: Mutex<Marks>,
    /// Woken when a mark is set, so a figure waiting for one costs no CPU meanwhile: the CPU
    /// figures charge this process's every thread to the read, and a waiter polling the marks
    /// every few milliseconds was charged to the service's side alone.
    marked: Notify,
    /// How long the handler works on each record (the memory figure's slow consumer).
    delay: Duration,
    /// Print `HANDLED` lines on stdout (a child process reports to its parent this way).
    echo: bool,
    /// Each record's id and when it was handled, for the latency figure.
    arrivals: Option<Mutex<Vec<(u64, Instant)>>>,
}

#[derive(Debug, Default)]
struct Marks {
    first: Option<Instant>,
    /// This process's CPU time at the first record and at the target count.
    first_cpu: Option<f64>,
    count_reached_cpu: Option<f64>,
    /// The CPU time the thread that handled the target record had used by then, since it
    /// started: a service on a runtime of its own with one worker thread handles every record
    /// there, and its readers run there too.
    count_reached_thread_cpu: Option<f64>,
    count_reached: Option<Instant>,
    shards_reached: Option<Instant>,
    /// This process's CPU time and the records handled when the shard target was reached.
    shards_reached_at: Option<(f64, u64)>,
    shards: HashSet<Arc<str>>,
}

impl Default for Probe {
    fn default() -> Self {
        Self::new(Duration::ZERO, false)
    }
}

impl Probe {
    pub fn new(delay: Duration, echo: bool) -> Self {
        Self::made(delay, echo, None)
    }

    /// A probe that also keeps when each record was handled ([`arrivals`](Self::arrivals)).
    pub fn recording() -> Self {
        Self::made(Duration::ZERO, false, Some(Mutex::default()))
    }

    fn made(delay: Duration, echo: bool, arrivals: Option<Mutex<Vec<(u64, Instant)>>>) -> Self {
        Self(Arc::new(ProbeInner {
            count: AtomicU64::new(0),
            count_target: AtomicU64::new(u64::MAX),
            shard_target: AtomicU64::new(u64::MAX),
            shards_done: AtomicBool::new(false),
            marks: Mutex::default(),
            marked: Notify::new(),
            delay,
            echo,
            arrivals,
        }))
    }

    /// Each record's id and when it was handled, for a probe made by [`recording`](Self::recording).
    pub fn arrivals(&self) -> Vec<(u64, Instant)> {
        self.0.arrivals.as_ref().map_or_else(Vec::new, |arrivals| {
            arrivals
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone()
        })
    }

    fn marks(&self) -> std::sync::MutexGuard<'_, Marks> {
        self.0.marks.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Marks the moment the `n`th record is handled.
    pub fn target_count(&self, n: u64) {
        self.0.count_target.store(n, Ordering::SeqCst);
    }

    /// Marks the moment records from `n` distinct shards have been handled.
    pub fn target_shards(&self, n: u64) {
        self.0.shard_target.store(n, Ordering::SeqCst);
    }

    async fn handled(&self, id: u64, shard: Arc<str>) {
        self.count_one(id, Some(shard));
        if !self.0.delay.is_zero() {
            tokio::time::sleep(self.0.delay).await;
        }
    }

    /// A record of a batch handled: as [`handled`](Self::handled), without its shard (a batch
    /// spans shards) and without the delay.
    fn handled_id(&self, id: u64) {
        self.count_one(id, None);
    }

    /// Counts a record handled, and marks the moments due.
    fn count_one(&self, id: u64, shard: Option<Arc<str>>) {
        if let Some(arrivals) = &self.0.arrivals {
            arrivals
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push((id, Instant::now()));
        }
        let n = self.0.count.fetch_add(1, Ordering::SeqCst) + 1;
        let target = n == self.0.count_target.load(Ordering::SeqCst);
        let shard_target = self.0.shard_target.load(Ordering::SeqCst);
        // A shard counts towards the shards' mark only while that mark is still due.
        let shard = shard
            .filter(|_| shard_target != u64::MAX && !self.0.shards_done.load(Ordering::Relaxed));
        // The lock and the clocks only where a mark may be due, so the handler costs about what
        // the hand-written loop's counting costs (the CPU figures compare the two).
        if n == 1 || target || shard.is_some() {
            let now = Instant::now();
            let mut marks = self.marks();
            if marks.first.is_none() {
                marks.first = Some(now);
                marks.first_cpu = Some(crate::consume::process_cpu());
            }
            if target {
                marks.count_reached = Some(now);
                marks.count_reached_cpu = Some(crate::consume::process_cpu());
                marks.count_reached_thread_cpu = Some(crate::consume::thread_cpu());
            }
            if let Some(shard) = shard
                && marks.shards.insert(shard)
                && marks.shards.len() as u64 == shard_target
            {
                marks.shards_reached = Some(now);
                marks.shards_reached_at = Some((crate::consume::process_cpu(), n));
                self.0.shards_done.store(true, Ordering::Relaxed);
            }
            drop(marks);
            self.0.marked.notify_waiters();
        }
        if self.0.echo && (n == 1 || n.is_multiple_of(50)) {
            println!("HANDLED {n} id {id}");
        }
    }

    pub fn count(&self) -> u64 {
        self.0.count.load(Ordering::SeqCst)
    }

    pub fn first(&self) -> Option<Instant> {
        self.marks().first
    }

    /// This process's CPU seconds from the moment every target shard had delivered to the target
    /// count, and the records handled meanwhile, once both were reached.
    pub fn cpu_from_shards_to_target(&self) -> Option<(f64, u64)> {
        let marks = self.marks();
        let (cpu, handled) = marks.shards_reached_at?;
        let target = self.0.count_target.load(Ordering::SeqCst);
        Some((marks.count_reached_cpu? - cpu, target.checked_sub(handled)?))
    }

    /// This process's CPU seconds from the first record to the target count, once reached.
    pub fn cpu_to_target(&self) -> Option<f64> {
        let marks = self.marks();
        Some(marks.count_reached_cpu? - marks.first_cpu?)
    }

    /// The CPU seconds the thread that handled the target record had used by then, since it
    /// started, once reached.
    pub fn thread_cpu_at_target(&self) -> Option<f64> {
        self.marks().count_reached_thread_cpu
    }

    /// Waits until `read` answers a moment, woken as marks are set, for at most `limit`.
    async fn wait(
        &self,
        limit: Duration,
        read: impl Fn(&Marks) -> Option<Instant>,
    ) -> Option<Instant> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            // Registered before the marks are read, so a mark set in between still wakes it.
            let marked = self.0.marked.notified();
            tokio::pin!(marked);
            marked.as_mut().enable();
            if let Some(at) = read(&self.marks()) {
                return Some(at);
            }
            if tokio::time::timeout_at(deadline, marked).await.is_err() {
                return read(&self.marks());
            }
        }
    }

    pub async fn wait_first(&self, limit: Duration) -> Option<Instant> {
        self.wait(limit, |m| m.first).await
    }

    pub async fn wait_count(&self, limit: Duration) -> Option<Instant> {
        self.wait(limit, |m| m.count_reached).await
    }

    pub async fn wait_shards(&self, limit: Duration) -> Option<Instant> {
        self.wait(limit, |m| m.shards_reached).await
    }
}

/// The application state: the probe, which the handler takes with `State<Probe>`.
#[derive(Debug, Clone, FromRef)]
pub struct BenchState {
    pub probe: Probe,
}

/// Where the next service built reads: the `#[subscriber]` attribute evaluates its descriptor
/// when the app is built, from these.
#[derive(Debug, Clone)]
pub struct Mount {
    pub stream: String,
    pub batch_size: u32,
    /// Mount the batch handler with batches of up to this many records, in place of the handler
    /// of one record.
    pub handler_batch: Option<NonZeroUsize>,
    /// Count into the crate's Prometheus collectors (`KinesisBroker::metrics`), in a registry
    /// of this app's own.
    pub metered: bool,
    /// Read with enhanced fan-out through this consumer.
    pub fan_out: Option<String>,
    /// Count into the crate's Prometheus collectors registered in this registry, which the
    /// figure reads (every Kinesis and lease-table call by operation).
    pub registry: Option<prometheus::Registry>,
    /// Balance the shards with the other instances (`KinesisBroker::balance_shards(true)`).
    pub balance: bool,
    /// Keep every lease alive by the instance's beat
    /// (`KinesisBroker::keep_leases_alive_by_beat(true)`).
    pub by_beat: bool,
    /// Seek every shard the instance holds to its start at startup (`start_at(TrimHorizon)`);
    /// else shards without a checkpoint start at the stream's initial position (`Latest`).
    pub from_start: bool,
}

impl Mount {
    pub fn new(stream: &str) -> Self {
        Self {
            stream: stream.to_owned(),
            batch_size: 1000,
            handler_batch: None,
            metered: false,
            fan_out: None,
            registry: None,
            balance: false,
            by_beat: false,
            from_start: true,
        }
    }
}

static MOUNT: Mutex<Option<Mount>> = Mutex::new(None);
/// Held while an app is built, so two figures building at once never swap descriptors.
static BUILDING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn mounted() -> Mount {
    MOUNT
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone()
        .expect("a Mount is set before an app is built")
}

fn mount_stream() -> String {
    mounted().stream
}

fn mount_batch() -> u32 {
    mounted().batch_size
}

fn mount_consumer() -> String {
    mounted().fan_out.unwrap_or_default()
}

/// Decodes the record, tells the probe, acknowledges.
#[subscriber(KinesisStream::new(mount_stream()).batch_size(mount_batch()))]
async fn handle(
    record: &BenchRecord,
    Ctx(shard): Ctx<ShardId>,
    State(probe): State<Probe>,
) -> HandlerOutcome {
    probe.handled(record.id, shard).await;
    HandlerOutcome::ack()
}

/// As [`handle`], reading with enhanced fan-out through the mounted consumer.
#[subscriber(KinesisStream::new(mount_stream()).enhanced_fan_out(mount_consumer()))]
async fn handle_fan_out(
    record: &BenchRecord,
    Ctx(shard): Ctx<ShardId>,
    State(probe): State<Probe>,
) -> HandlerOutcome {
    probe.handled(record.id, shard).await;
    HandlerOutcome::ack()
}

/// Decodes a batch of records, tells the probe of each, acknowledges them all.
#[subscriber(KinesisStream::new(mount_stream()).batch_size(mount_batch()))]
async fn handle_batch(records: &[BenchRecord], State(probe): State<Probe>) -> HandlerOutcome {
    for record in records {
        probe.handled_id(record.id);
    }
    HandlerOutcome::ack()
}

/// The service on `mount`'s stream with `store`, named `owner` in the lease table, reading each
/// shard it takes without a checkpoint from the start of the shard.
pub async fn app(
    stack: &Stack,
    store: Arc<dyn LeaseStore>,
    owner: &str,
    timings: LeaseTimings,
    mount: Mount,
    probe: Probe,
) -> impl App + use<> {
    let _building = BUILDING.lock().await;
    let handler_batch = mount.handler_batch;
    let metered = mount.metered;
    let registry = mount.registry.clone();
    let balance = mount.balance;
    let by_beat = mount.by_beat;
    let from_start = mount.from_start;
    let fan_out = mount.fan_out.is_some();
    *MOUNT.lock().unwrap_or_else(PoisonError::into_inner) = Some(mount);
    let mut broker = stack
        .broker(store, owner)
        .lease_timings(timings)
        .balance_shards(balance)
        .keep_leases_alive_by_beat(by_beat);
    if let Some(registry) = registry {
        let metrics = ruststream_kinesis::KinesisMetrics::register(&registry)
            .expect("the figure's registry holds none of the series yet");
        broker = broker.metrics(metrics);
    } else if metered {
        let metrics = ruststream_kinesis::KinesisMetrics::register(&prometheus::Registry::new())
            .expect("a new registry has none of the series");
        broker = broker.metrics(metrics);
    }
    RustStream::new(AppInfo::new("kinesis-bench", "0.1.0"))
        .on_startup(async move |()| Ok::<_, Infallible>(BenchState { probe }))
        .with_broker(broker, move |b| match handler_batch {
            None if fan_out => {
                b.include(handle_fan_out.start_at(KinesisPosition::TrimHorizon));
            }
            None if from_start => {
                b.include(handle.start_at(KinesisPosition::TrimHorizon));
            }
            None => {
                b.include(handle);
            }
            Some(size) => {
                b.include(
                    handle_batch
                        .batch(size)
                        .start_at(KinesisPosition::TrimHorizon),
                );
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_decode_as_bench_records() {
        let record: BenchRecord = serde_json::from_slice(&body(42)).unwrap();
        assert_eq!(record.id, 42);
        let padded = padded_body(7, 2048);
        assert_eq!(padded.len(), 2048);
        let record: BenchRecord = serde_json::from_slice(&padded).unwrap();
        assert_eq!(record.id, 7);
    }

    #[tokio::test]
    async fn the_probe_marks_its_targets() {
        let probe = Probe::default();
        probe.target_count(2);
        probe.target_shards(2);
        probe.handled(1, Arc::from("a")).await;
        assert!(probe.first().is_some());
        assert!(probe.marks().count_reached.is_none());
        probe.handled(2, Arc::from("b")).await;
        assert!(probe.wait_count(Duration::ZERO).await.is_some());
        assert!(probe.wait_shards(Duration::ZERO).await.is_some());
        assert_eq!(probe.count(), 2);
    }
}

//! Consume overhead and durable checkpoints: records per second read from one backlog by a
//! hand-written `GetRecords` loop, by the `#[subscriber]` service with `MemoryLeaseStore`, and by
//! the same service with `DynamoLeaseStore`, interleaved in rounds on one stream.

use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError};
use std::time::{Duration, Instant};

use aws_sdk_kinesis::types::ShardIteratorType;
use futures::future::try_join_all;
use ruststream_kinesis::LeaseTimings;
use ruststream_kinesis::prelude::App;

use crate::counting::{CountingStore, Counts};
use crate::report::{Figure, median, thousands};
use crate::service::{self, BenchRecord, Mount, Probe};
use crate::stack::{self, Stack, sdk, unique};
use crate::{Error, Options};

/// The service's fastest `GetRecords` cadence per shard, which the hand-written loop keeps too:
/// Kinesis allows five calls per second per shard.
const MIN_CALL_GAP: Duration = Duration::from_millis(200);
/// The `Limit` of every `GetRecords` call on both sides (the service's default batch size).
const LIMIT: i32 = 1000;
/// The enhanced fan-out consumer of [`Side::FanOut`]: one per stream, registered by its first
/// read.
pub const FAN_OUT_CONSUMER: &str = "kinesis-bench";
/// The most CPU a record consumed may cost the service against the SDK loop, with one worker
/// thread (issue 29, item 5).
const CPU_RATIO_TARGET: f64 = 1.35;

/// Set (to anything), every side is read alone, one after the other, the service with a
/// handler of batches too, and no service beside the loop: what `record-path` profiles.
pub const SIDES_IN_TURN: &str = "KINESIS_BENCH_SIDES_IN_TURN";

/// The backlog's shards: enough that kinesis-mock, not the five-calls-per-second pacing, bounds
/// the read, and few enough records per shard that the emulator stays fast (it slows as shards
/// fill).
const SHARDS: u32 = 8;

/// The largest batch the batch handler of [`Side::Batches`] takes.
const HANDLER_BATCH: NonZeroUsize = NonZeroUsize::new(500).expect("not zero");

/// How long one reader took: from its start (`start()`, or the loop's first call) to the last
/// record, and from the first record to the last.
#[derive(Debug, Clone)]
pub struct Took {
    pub from_start: Duration,
    pub steady: Duration,
    /// The lease-store calls of a service reader, from `start()` to its shutdown.
    calls: Counts,
    /// CPU seconds used meanwhile by this process, kinesis-mock and moto.
    pub cpu: [f64; 3],
    /// CPU seconds this process used from the first record handled to the last.
    pub read_cpu: f64,
    /// CPU seconds the thread that handled the last record had used by then, since it
    /// started: the reader's whole CPU, start-up included, when it ran on a runtime of its own
    /// with one worker thread ([`beside_the_loop`]); 0 when not marked.
    pub thread_cpu_at_last: f64,
}

/// The CPU seconds a record costs a reader, from its worker thread's CPU at its last record in a
/// read of `records` and in a read of `fewer` on a stream of as many shards: what the reader
/// spends whatever the backlog (its start, its first calls) is in both and drops out of the
/// difference, and everything the larger read's records cost is in it, taken apart and handled
/// alike. A window between two records of one read would not be: a reader takes a whole answer
/// apart before it hands out its first record, and the service's readers each hold one while the
/// subscriber works, so where a window opened decided how many answers' taking apart it missed.
/// `None` where a mark is missing or the difference is not a cost.
pub fn cpu_a_record(larger: f64, smaller: f64, records: u64, fewer: u64) -> Option<f64> {
    let more = records.checked_sub(fewer).filter(|more| *more > 0)?;
    let spent = larger - smaller;
    (larger > 0.0 && smaller > 0.0 && spent > 0.0).then(|| spent / more as f64)
}

/// The median of the rounds' ratios of `(numerator, denominator)` CPU, and how many rounds had
/// one. A round whose either side read no CPU (a mark missing) has no ratio; none at all makes
/// NaN, which fails a figure rather than reading as a ratio of zero.
fn median_of_ratios(rounds: &[(f64, f64)]) -> (f64, usize) {
    let ratios: Vec<f64> = rounds
        .iter()
        .filter(|(num, den)| *num > 0.0 && *den > 0.0)
        .map(|(num, den)| num / den)
        .collect();
    let value = if ratios.is_empty() {
        f64::NAN
    } else {
        median(&ratios)
    };
    (value, ratios.len())
}

/// The processes whose CPU time a read is charged with: this one, and the stack's emulators
/// (their pid files in `.local-stack/`, when this is the stack `scripts/local-stack.sh` started).
pub fn processes() -> [Option<u32>; 3] {
    let dir = std::env::var("LOCAL_STACK_DIR").unwrap_or_else(|_| ".local-stack".to_owned());
    let pid = |name: &str| {
        std::fs::read_to_string(format!("{dir}/{name}.pid"))
            .ok()
            .and_then(|p| p.trim().parse().ok())
    };
    [Some(std::process::id()), pid("kinesis"), pid("dynamodb")]
}

/// This process's CPU time so far (user and system, every thread), in seconds
/// (`clock_gettime`).
pub fn process_cpu() -> f64 {
    cpu_time::ProcessTime::now().as_duration().as_secs_f64()
}

/// The calling thread's CPU time so far (user and system), in seconds (`clock_gettime`).
pub fn thread_cpu() -> f64 {
    cpu_time::ThreadTime::now().as_duration().as_secs_f64()
}

/// CPU seconds (user + system) each process has used so far.
pub fn cpu_seconds(pids: &[Option<u32>; 3]) -> [f64; 3] {
    pids.map(|pid| {
        pid.and_then(|pid| std::fs::read_to_string(format!("/proc/{pid}/stat")).ok())
            .and_then(|stat| {
                // Fields after the command name, which is in parentheses and may hold spaces.
                let rest = stat.rsplit_once(") ")?.1;
                let fields: Vec<&str> = rest.split_whitespace().collect();
                let user: f64 = fields.get(11)?.parse().ok()?;
                let system: f64 = fields.get(12)?.parse().ok()?;
                Some((user + system) / 100.0)
            })
            .unwrap_or(0.0)
    })
}

/// Who reads the backlog.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The hand-written loop over the SDK: one task per shard.
    Sdk,
    /// The service with `MemoryLeaseStore`.
    Memory,
    /// The service with `MemoryLeaseStore` and a handler of batches of up to [`HANDLER_BATCH`].
    Batches,
    /// The service with `DynamoLeaseStore` on a new table.
    Dynamo,
    /// The service with `MemoryLeaseStore`, counting into the crate's Prometheus collectors.
    Metered,
    /// The service with `MemoryLeaseStore`, reading with enhanced fan-out.
    FanOut,
}

impl Side {
    fn name(self) -> &'static str {
        match self {
            Self::Sdk => "SDK loop",
            Self::Memory => "service + MemoryLeaseStore",
            Self::Batches => "service + MemoryLeaseStore, batch handler",
            Self::Dynamo => "service + DynamoLeaseStore",
            Self::Metered => "service + MemoryLeaseStore, metrics on",
            Self::FanOut => "service + MemoryLeaseStore, enhanced fan-out",
        }
    }
}

/// The two figures this experiment can produce, from the sides it ran.
pub async fn run(stack: &Stack, opts: &Options, sides: &[Side]) -> Result<Vec<Figure>, Error> {
    let shards = SHARDS;
    let records: u64 = opts
        .records
        .unwrap_or(if opts.quick { 8000 } else { 20_000 });
    let rounds = if opts.quick { 1 } else { 9 };
    let stream = unique("bench-consume");
    stack.create_stream(&stream, shards).await?;
    let result = match stack.fill(&stream, records, service::body).await {
        Ok(filled) => rounds_on(stack, &stream, records, rounds, sides)
            .await
            .map(|took| (filled, took)),
        Err(err) => Err(err),
    };
    stack.delete_stream(&stream).await;
    let (filled, (took, pairs)) = result?;

    let rates = |side: Side, steady: bool| -> Vec<f64> {
        took.iter()
            .filter_map(|round| round.iter().find(|(s, _)| *s == side))
            .map(|(_, t)| {
                let d = if steady { t.steady } else { t.from_start };
                records as f64 / d.as_secs_f64().max(1e-6)
            })
            .collect()
    };
    let ratio = |num: Side, den: Side, steady: bool| -> f64 {
        let ratios: Vec<f64> = rates(num, steady)
            .iter()
            .zip(rates(den, steady))
            .map(|(n, d)| if d > 0.0 { n / d } else { 0.0 })
            .collect();
        median(&ratios)
    };
    let per_round = |side: Side| {
        let list = |steady| {
            rates(side, steady)
                .iter()
                .map(|r| thousands(*r))
                .collect::<Vec<_>>()
                .join(", ")
        };
        format!(
            "{}: first to last record {} records/s (median {}); from start {} (median {})",
            side.name(),
            list(true),
            thousands(median(&rates(side, true))),
            list(false),
            thousands(median(&rates(side, false)))
        )
    };
    let cpu = |side: Side| {
        let per = |i: usize| {
            let values: Vec<f64> = took
                .iter()
                .filter_map(|round| round.iter().find(|(s, _)| *s == side))
                .map(|(_, t)| t.cpu[i])
                .collect();
            median(&values)
        };
        format!(
            "{}: CPU per read (median, start to shutdown) {:.2} s in this process, {:.2} s in \
             kinesis-mock, {:.2} s in moto",
            side.name(),
            per(0),
            per(1),
            per(2)
        )
    };
    let setup = format!(
        "{records} records of ~60 B JSON on {shards} shards, written in {:.1} s before reading; \
         {rounds} round(s), the order of the sides rotating each round; each reader reads the \
         whole backlog from TRIM_HORIZON and decodes every record; GetRecords Limit {LIMIT}, at \
         most one call per shard per {} ms on both sides",
        filled.as_secs_f64(),
        MIN_CALL_GAP.as_millis()
    );
    let method = "the figure divides the rates between the first and the last record handled \
                  (the read itself; start-up has a figure of its own), as the median of the \
                  per-round ratios; `from start` counts from `start()` (the loop: from its \
                  ListShards) to the last record";
    let read_cpu = |side: Side| -> Vec<f64> {
        took.iter()
            .filter_map(|round| round.iter().find(|(s, _)| *s == side))
            .map(|(_, t)| t.read_cpu)
            .collect()
    };
    // The median of the per-round ratios of `num`'s read CPU to `den`'s, and how many rounds
    // had one.
    let cpu_ratio = |num: Side, den: Side| -> (f64, usize) {
        let both: Vec<(f64, f64)> = read_cpu(num).into_iter().zip(read_cpu(den)).collect();
        median_of_ratios(&both)
    };
    let per_record = |side: Side| median(&read_cpu(side)) / records as f64 * 1e6;
    let cpu_list = |side: Side| {
        read_cpu(side)
            .iter()
            .map(|c| format!("{c:.3}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    // Each round's CPU a record of the service and of the loop, read side by side.
    let paired = |side: Side| -> Vec<(f64, f64)> {
        pairs
            .iter()
            .filter_map(|round| round.iter().find(|(s, _, _)| *s == side))
            .map(|(_, service, sdk)| (*service, *sdk))
            .collect()
    };
    let mut figures = Vec::new();
    for (side, name) in [
        (Side::Memory, "CPU per record consumed"),
        (Side::Batches, "CPU per record consumed, batch handler"),
    ] {
        if !(sides.contains(&Side::Sdk) && sides.contains(&side)) {
            continue;
        }
        let both = paired(side);
        // Read in turn ([`SIDES_IN_TURN`]), no service read beside the loop.
        if both.is_empty() {
            continue;
        }
        let (value, counted) = median_of_ratios(&both);
        let per_record = |values: Vec<f64>| median(&values) * 1e6;
        let list = |values: Vec<f64>| {
            values
                .iter()
                .map(|c| format!("{:.2}", c * 1e6))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let service_cpu = || both.iter().map(|(service, _)| *service).collect::<Vec<_>>();
        let sdk_cpu = || both.iter().map(|(_, sdk)| *sdk).collect::<Vec<_>>();
        let mut figure = Figure::new(name, "consume");
        figure.measured = format!(
            "{value:.2} (service {:.2} µs ÷ SDK loop {:.2} µs per record)",
            per_record(service_cpu()),
            per_record(sdk_cpu())
        );
        // Issue 29, item 5 (an earlier issue's 1.25 is below what a per-message subscriber on
        // RustStream 0.7 can reach: the benchmarks page's "Where the CPU goes").
        figure.target = format!("≤ {CPU_RATIO_TARGET}");
        figure.pass = Some(value <= CPU_RATIO_TARGET && counted == rounds);
        figure.detail(setup.clone());
        figure.detail(match side {
            Side::Batches => format!(
                "the service's handler takes a slice of up to {HANDLER_BATCH} records \
                 (`#[subscriber]` over `&[BenchRecord]`, mounted with `batch({HANDLER_BATCH})` and \
                 the default `max_wait` of 50 ms), decodes each and acknowledges the batch"
            ),
            _ => "the service's handler takes one record (`#[subscriber]` over `&BenchRecord`), \
                  decodes it and acknowledges it"
                .to_owned(),
        });
        figure.detail(
            "each round the service and the SDK loop read the backlog side by side (the loop \
             starts once the service handled its first record), each on a runtime of its own \
             with one worker thread, on a thread of its own, with clients of its own, and then \
             a fifth of the backlog on a stream of its own the same way; a side's CPU a record \
             is its worker thread's CPU time (user + system, `clock_gettime`) at its last record \
             of the backlog less at its last of the fifth, divided by the records between (what \
             a reader spends whatever the backlog drops out, and every answer's taking apart is \
             in); the figure is the median of the per-round ratios",
        );
        figure.detail(format!(
            "CPU µs a record, round by round: SDK loop {}; {} {}",
            list(sdk_cpu()),
            side.name(),
            list(service_cpu())
        ));
        figures.push(figure);
    }
    if sides.contains(&Side::Memory) && sides.contains(&Side::Metered) {
        let (value, counted) = cpu_ratio(Side::Metered, Side::Memory);
        let mut figure = Figure::new("CPU per record consumed, metrics on ÷ off", "metrics-cost");
        figure.measured = format!(
            "{value:.2} (metrics on {:.2} µs ÷ off {:.2} µs per record)",
            per_record(Side::Metered),
            per_record(Side::Memory)
        );
        figure.target = "≤ 1.05".to_owned();
        figure.pass = Some(value <= 1.05 && counted == rounds);
        figure.detail(setup.clone());
        figure.detail(
            "the same service and handler of one record; `metrics on` counts into the crate's \
             Prometheus collectors (`KinesisBroker::metrics`, a registry of its own): per \
             GetRecords answer, per lease write and per store call, never per record",
        );
        figure.detail(format!(
            "CPU s per read of {records} records, first to last record: off {}; on {}",
            cpu_list(Side::Memory),
            cpu_list(Side::Metered)
        ));
        figures.push(figure);
    }
    if sides.contains(&Side::Memory) && sides.contains(&Side::FanOut) {
        let value = ratio(Side::FanOut, Side::Memory, true);
        let mut figure = Figure::new("catching up a backlog, fan-out ÷ polling", "fan-out");
        figure.measured = format!(
            "{value:.2} (enhanced fan-out {} rec/s ÷ polling {} rec/s)",
            thousands(median(&rates(Side::FanOut, true))),
            thousands(median(&rates(Side::Memory, true)))
        );
        figure.target = "recorded".to_owned();
        figure.detail(setup.clone());
        figure.detail(method);
        figure.detail(per_round(Side::Memory));
        figure.detail(per_round(Side::FanOut));
        figure.detail(cpu(Side::Memory));
        figure.detail(cpu(Side::FanOut));
        figure.detail(
            "on the local engine a subscription pushes one event a second of at most 10,000 \
             records, where polling calls up to five times a second for 1,000 each; on AWS each \
             consumer has 2 MB/s per shard of its own, and polling applications share one",
        );
        figures.push(figure);
    }
    if sides.contains(&Side::Sdk) && sides.contains(&Side::Memory) {
        let value = ratio(Side::Memory, Side::Sdk, true);
        let mut figure = Figure::new("consume overhead", "consume");
        figure.measured = format!(
            "{value:.2} (service {} rec/s ÷ SDK loop {} rec/s)",
            thousands(median(&rates(Side::Memory, true))),
            thousands(median(&rates(Side::Sdk, true)))
        );
        figure.target = "≥ 0.95".to_owned();
        figure.pass = Some(value >= 0.95);
        figure.detail(setup.clone());
        figure.detail(method);
        figure.detail(per_round(Side::Sdk));
        figure.detail(per_round(Side::Memory));
        figure.detail(format!(
            "from start: {:.2}",
            ratio(Side::Memory, Side::Sdk, false)
        ));
        figure.detail(cpu(Side::Sdk));
        figure.detail(cpu(Side::Memory));
        figures.push(figure);
    }
    if sides.contains(&Side::Memory) && sides.contains(&Side::Dynamo) {
        let value = ratio(Side::Dynamo, Side::Memory, true);
        let mut figure = Figure::new("durable checkpoints", "checkpoints");
        figure.measured = format!(
            "{value:.2} (DynamoLeaseStore {} rec/s ÷ MemoryLeaseStore {} rec/s)",
            thousands(median(&rates(Side::Dynamo, true))),
            thousands(median(&rates(Side::Memory, true)))
        );
        figure.target = "≥ 0.90".to_owned();
        figure.pass = Some(value >= 0.90);
        figure.detail(setup);
        figure.detail(method);
        if !sides.contains(&Side::Sdk) {
            figure.detail(per_round(Side::Memory));
        }
        figure.detail(per_round(Side::Dynamo));
        figure.detail(cpu(Side::Memory));
        figure.detail(cpu(Side::Dynamo));
        if let Some((_, first)) = took
            .first()
            .and_then(|round| round.iter().find(|(s, _)| *s == Side::Dynamo))
        {
            figure.detail(format!(
                "lease-store calls of the DynamoDB reader in the first round, start to shutdown: {}",
                first.calls.describe()
            ));
        }
        figure.detail(format!(
            "from start: {:.2}; default timings (a shard's checkpoint written at most once a \
             second); each round on a new table",
            ratio(Side::Dynamo, Side::Memory, false)
        ));
        figures.push(figure);
    }
    Ok(figures)
}

/// What the rounds measured: each round's `(side, timing)` of the sides read one after the
/// other, and each round's `(side, service, loop)` CPU seconds a record of the services read
/// beside the loop ([`cpu_a_record`]; 0 where a mark was missing).
type Rounds = (Vec<Vec<(Side, Took)>>, Vec<Vec<(Side, f64, f64)>>);

/// Runs every side once per round. With the SDK loop among the sides, the service with a handler
/// of records and the one with a handler of batches each also read beside the loop
/// ([`beside_the_loop`]), the backlog and a fifth of it on a stream of its own, for the CPU
/// figures; the service with a handler of batches has no other figure, so it is read that way
/// only.
async fn rounds_on(
    stack: &Stack,
    stream: &str,
    records: u64,
    rounds: usize,
    sides: &[Side],
) -> Result<Rounds, Error> {
    // `record-path` profiles the sides read in turn, as its sum was made for.
    let in_turn = std::env::var_os(SIDES_IN_TURN).is_some();
    let beside: Vec<Side> = if sides.contains(&Side::Sdk) && !in_turn {
        [Side::Memory, Side::Batches]
            .into_iter()
            .filter(|side| sides.contains(side))
            .collect()
    } else {
        Vec::new()
    };
    let smaller = unique("bench-consume-fifth");
    let fewer = records / 5;
    let with_pairs = !beside.is_empty();
    if with_pairs {
        // Deleted on every failure: creating it may fail after the stream was made (not
        // active in time).
        let made = match stack.create_stream(&smaller, SHARDS).await {
            Ok(()) => stack.fill(&smaller, fewer, service::body).await.map(|_| ()),
            Err(err) => Err(err),
        };
        if let Err(err) = made {
            stack.delete_stream(&smaller).await;
            return Err(err);
        }
    }
    let result = rounds_with(
        stack,
        (stream, records),
        (&smaller, fewer),
        rounds,
        sides,
        &beside,
    )
    .await;
    if with_pairs {
        stack.delete_stream(&smaller).await;
    }
    result
}

/// [`rounds_on`], the backlog of `records` on `stream` and, for the services read `beside` the
/// loop, a fifth of it on `smaller`.
async fn rounds_with(
    stack: &Stack,
    (stream, records): (&str, u64),
    (smaller, fewer): (&str, u64),
    rounds: usize,
    sides: &[Side],
    beside: &[Side],
) -> Result<Rounds, Error> {
    let alone: Vec<Side> = sides
        .iter()
        .copied()
        .filter(|side| !(*side == Side::Batches && beside.contains(side)))
        .collect();
    let mut out = Vec::new();
    let mut pairs = Vec::new();
    for round in 0..rounds {
        let mut paired = Vec::new();
        for i in 0..beside.len() {
            let side = beside[(i + round) % beside.len()];
            let (service, sdk) = beside_the_loop(stack, stream, records, side).await?;
            let (service_fewer, sdk_fewer) = beside_the_loop(stack, smaller, fewer, side).await?;
            let cost = |larger: &Took, smaller: &Took| {
                cpu_a_record(
                    larger.thread_cpu_at_last,
                    smaller.thread_cpu_at_last,
                    records,
                    fewer,
                )
                .unwrap_or(0.0)
            };
            let (service_cost, sdk_cost) = (cost(&service, &service_fewer), cost(&sdk, &sdk_fewer));
            eprintln!(
                "consume: round {} {} beside the SDK loop: {records} records, its thread's CPU at \
                 the last {:.3} s ({:.3} s for {fewer}), the loop's {:.3} s ({:.3} s): {:.2} µs \
                 ÷ {:.2} µs a record",
                round + 1,
                side.name(),
                service.thread_cpu_at_last,
                service_fewer.thread_cpu_at_last,
                sdk.thread_cpu_at_last,
                sdk_fewer.thread_cpu_at_last,
                service_cost * 1e6,
                sdk_cost * 1e6
            );
            paired.push((side, service_cost, sdk_cost));
        }
        pairs.push(paired);
        let sides = &alone;
        let mut timings = Vec::new();
        for i in 0..sides.len() {
            let side = sides[(i + round) % sides.len()];
            let pids = processes();
            let before = cpu_seconds(&pids);
            let mut took = match side {
                Side::Sdk => sdk_loop(stack, stream, records).await?,
                Side::Memory => through_service(stack, stream, records, false).await?,
                Side::Batches => {
                    let mount = Mount {
                        handler_batch: Some(HANDLER_BATCH),
                        ..Mount::new(stream)
                    };
                    through_service_with(stack, mount, records, false).await?
                }
                Side::Metered => {
                    let mount = Mount {
                        metered: true,
                        ..Mount::new(stream)
                    };
                    through_service_with(stack, mount, records, false).await?
                }
                Side::FanOut => {
                    let mount = Mount {
                        fan_out: Some(FAN_OUT_CONSUMER.to_owned()),
                        ..Mount::new(stream)
                    };
                    through_service_with(stack, mount, records, false).await?
                }
                Side::Dynamo => through_service(stack, stream, records, true).await?,
            };
            let after = cpu_seconds(&pids);
            for (slot, (a, b)) in took.cpu.iter_mut().zip(after.iter().zip(before)) {
                *slot = a - b;
            }
            eprintln!(
                "consume: round {} {}: {records} records, {:.2} s from start, {:.2} s first to last",
                round + 1,
                side.name(),
                took.from_start.as_secs_f64(),
                took.steady.as_secs_f64(),
            );
            timings.push((side, took));
        }
        out.push(timings);
    }
    Ok((out, pairs))
}

/// How long the service takes from `start()` to handling the `records`th record.
pub async fn through_service(
    stack: &Stack,
    stream: &str,
    records: u64,
    durable: bool,
) -> Result<Took, Error> {
    through_service_with(stack, Mount::new(stream), records, durable).await
}

/// As [`through_service`], mounted as `mount` says.
async fn through_service_with(
    stack: &Stack,
    mount: Mount,
    records: u64,
    durable: bool,
) -> Result<Took, Error> {
    through_service_probed(stack, mount, records, durable, Probe::default()).await
}

/// As [`through_service_with`], marking what it handles on `probe`.
async fn through_service_probed(
    stack: &Stack,
    mount: Mount,
    records: u64,
    durable: bool,
    probe: Probe,
) -> Result<Took, Error> {
    let (store, table) = stack::store(stack, durable).await?;
    let counted = Arc::new(CountingStore::new(store));
    probe.target_count(records);
    let app = service::app(
        stack,
        counted.clone(),
        &unique("bench-consumer"),
        LeaseTimings::default(),
        mount,
        probe.clone(),
    )
    .await;
    let started = Instant::now();
    let running = app.start().await?;
    let reached = probe
        .wait_count(Duration::from_secs(60) + Duration::from_millis(records * 10))
        .await;
    running.shutdown().await?;
    if let Some(table) = table {
        stack.drop_table(&table).await;
    }
    let reached = reached.ok_or_else(|| {
        format!(
            "the service handled {} of {records} records before the deadline",
            probe.count()
        )
    })?;
    let first = probe.first().unwrap_or(started);
    Ok(Took {
        from_start: reached - started,
        steady: reached - first,
        calls: counted.snapshot(),
        cpu: [0.0; 3],
        read_cpu: probe.cpu_to_target().unwrap_or(0.0),
        thread_cpu_at_last: probe.thread_cpu_at_target().unwrap_or(0.0),
    })
}

/// The service mounted as `side` says and the SDK loop reading `records` from `stream` side by
/// side, each on a runtime of its own with one worker thread, on a thread of its own, with
/// clients of its own, so that each side's worker thread does all of that side's reading (part
/// of its start-up runs on the thread that started it; the figures leave start-up out) and both
/// work under much the same load of the host and the stack (read one after the other, the two
/// sides' CPU a record moved by up to half between neighbouring reads on this host). The loop
/// starts once the service handled its first record (a service takes longer to start), so the
/// two reads overlap. Answers the service's timing, then the loop's.
async fn beside_the_loop(
    stack: &Stack,
    stream: &str,
    records: u64,
    side: Side,
) -> Result<(Took, Took), Error> {
    let mount = Mount {
        handler_batch: (side == Side::Batches).then_some(HANDLER_BATCH),
        ..Mount::new(stream)
    };
    let probe = Probe::default();
    let service = {
        let probe = probe.clone();
        on_a_runtime_of_its_own(&stack.url, "bench-service", move |stack| async move {
            through_service_probed(&stack, mount, records, false, probe).await
        })?
    };
    tokio::pin!(service);
    let limit = Duration::from_secs(60) + Duration::from_millis(records * 10);
    tokio::select! {
        // The first record first: a service that read its whole backlog before this task was
        // polled has answered too, and that is no failure.
        biased;
        first = probe.wait_first(limit) => if first.is_none() {
            return Err(format!("the service handled no record of {stream} within {limit:?}").into());
        },
        // An answer before the first record is a failure to start, or to read.
        answered = &mut service => {
            return Err(answered.err().unwrap_or_else(|| {
                format!("the service answered before it handled a record of {stream}").into()
            }));
        }
    }
    let stream = stream.to_owned();
    let sdk = on_a_runtime_of_its_own(&stack.url, "bench-sdk-loop", move |stack| async move {
        sdk_loop(&stack, &stream, records).await
    })?;
    let (service, sdk) = futures::join!(service, sdk);
    Ok((service?, sdk?))
}

/// Runs `work` on a thread of its own, on a runtime of its own with one worker thread, given a
/// stack of its own (so its clients' connections live on that runtime), and answers its result.
fn on_a_runtime_of_its_own<T, F>(
    url: &str,
    name: &str,
    work: impl FnOnce(Stack) -> F + Send + 'static,
) -> Result<impl Future<Output = Result<T, Error>>, Error>
where
    F: Future<Output = Result<T, Error>>,
    T: Send + 'static,
{
    let (answer, answered) = tokio::sync::oneshot::channel();
    let url = url.to_owned();
    std::thread::Builder::new()
        .name(name.to_owned())
        .spawn(move || {
            let result = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .map_err(Error::from)
                .and_then(|runtime| runtime.block_on(work(Stack::new(&url))));
            // The figure waiting for it may have given up.
            let _ = answer.send(result);
        })?;
    Ok(async move {
        answered
            .await
            .map_err(|_| Error::from("a reader's thread ended without an answer"))?
    })
}

/// How long a hand-written loop takes to read and decode `records` records: one task per shard,
/// an iterator at TRIM_HORIZON, `GetRecords` until the shard's backlog is read.
async fn sdk_loop(stack: &Stack, stream: &str, records: u64) -> Result<Took, Error> {
    let started = Instant::now();
    let read = Arc::new(AtomicU64::new(0));
    // This process's and this thread's CPU time at the first record and at the last, as the
    // service's probe marks.
    let cpu_marks = Arc::new(std::sync::Mutex::new((None, None)));

    let shards = stack.shards(stream).await?;
    // Each shard's loop is a task of the runtime, as the service's readers are: read from the
    // main thread instead, every answer would cross to it from the worker that drives the
    // connections, a cost the service does not pay.
    let last = try_join_all(shards.iter().map(|(shard, _)| {
        let client = stack.kinesis.clone();
        let read = Arc::clone(&read);
        let cpu_marks = Arc::clone(&cpu_marks);
        let stream = stream.to_owned();
        let shard = shard.clone();
        let task = tokio::spawn(async move {
            let mut iterator = client
                .get_shard_iterator()
                .stream_name(&stream)
                .shard_id(&shard)
                .shard_iterator_type(ShardIteratorType::TrimHorizon)
                .send()
                .await
                .map_err(|err| format!("GetShardIterator: {}", sdk(err)))?
                .shard_iterator()
                .map(str::to_owned);
            let mut last_call = started.checked_sub(MIN_CALL_GAP).unwrap_or(started);
            let mut first_record = None;
            let mut last_record = None;
            while let Some(current) = iterator {
                tokio::time::sleep_until((last_call + MIN_CALL_GAP).into()).await;
                last_call = Instant::now();
                let out = client
                    .get_records()
                    .shard_iterator(current)
                    .limit(LIMIT)
                    .send()
                    .await
                    .map_err(|err| format!("GetRecords: {}", sdk(err)))?;
                for record in out.records() {
                    let decoded: BenchRecord = serde_json::from_slice(record.data().as_ref())?;
                    std::hint::black_box(decoded.id);
                    let n = read.fetch_add(1, Ordering::Relaxed) + 1;
                    if n == 1 || n == records {
                        let mut marks = cpu_marks.lock().unwrap_or_else(PoisonError::into_inner);
                        let slot = if n == 1 { &mut marks.0 } else { &mut marks.1 };
                        *slot = Some((process_cpu(), thread_cpu()));
                    }
                    let now = Instant::now();
                    first_record.get_or_insert(now);
                    last_record = Some(now);
                }
                if out.records().is_empty() && out.millis_behind_latest().unwrap_or(0) == 0 {
                    break;
                }
                iterator = out.next_shard_iterator().map(str::to_owned);
            }
            Ok::<_, Error>((first_record, last_record))
        });
        async move { task.await.map_err(Error::from)? }
    }))
    .await?;
    let total = read.load(Ordering::Relaxed);
    if total < records {
        return Err(format!("the SDK loop read {total} of {records} records").into());
    }
    let first = last.iter().filter_map(|(f, _)| *f).min().unwrap_or(started);
    let last = last.iter().filter_map(|(_, l)| *l).max().unwrap_or(started);
    let (first_cpu, last_cpu) = *cpu_marks.lock().unwrap_or_else(PoisonError::into_inner);
    let between = last_cpu.zip(first_cpu);
    Ok(Took {
        from_start: last - started,
        steady: last - first,
        calls: Counts::default(),
        cpu: [0.0; 3],
        read_cpu: between.map_or(0.0, |(l, f)| l.0 - f.0),
        thread_cpu_at_last: last_cpu.map_or(0.0, |(_, thread)| thread),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_costs_what_the_larger_read_spent_beyond_the_smaller() {
        // Start-up 0.2 s in both reads, 2 µs a record: 20,000 records against 4,000.
        let larger = 0.2 + 20_000.0 * 2e-6;
        let smaller = 0.2 + 4_000.0 * 2e-6;
        let cost = cpu_a_record(larger, smaller, 20_000, 4_000).expect("a cost");
        assert!((cost - 2e-6).abs() < 1e-12, "{cost}");
    }

    #[test]
    fn a_missing_mark_or_no_difference_makes_no_cost() {
        assert_eq!(cpu_a_record(0.0, 0.1, 20_000, 4_000), None);
        assert_eq!(cpu_a_record(0.3, 0.0, 20_000, 4_000), None);
        assert_eq!(cpu_a_record(0.1, 0.3, 20_000, 4_000), None);
        assert_eq!(cpu_a_record(0.3, 0.1, 4_000, 4_000), None);
        assert_eq!(cpu_a_record(0.3, 0.1, 4_000, 20_000), None);
    }
}

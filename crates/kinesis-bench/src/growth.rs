//! How cost grows with work: one instance, a child process of its own, on 4, 16 and 48 shards
//! with default timings and a `DynamoLeaseStore` on a new table. Each run reads a backlog of the
//! same number of records per shard in batches of [`BATCH`] (its CPU per record from the moment
//! every shard delivered, beyond what holding the shards costs idle, is the figure that should
//! stay flat), then holds the shards idle and then under the same load per shard. Per run: CPU
//! per million records reading the backlog, CPU while idle (the cost of holding shards: a
//! `GetRecords` call per shard per poll, renewals, listings), CPU per million records under a
//! steady load all told, lease-table writes per shard per minute under load, and the resident
//! memory, from which the memory per shard follows.

use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ruststream_kinesis::LeaseTimings;
use ruststream_kinesis::prelude::App;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio_util::sync::CancellationToken;

use crate::consume::process_cpu;
use crate::counting::CountingStore;
use crate::memory::rss;
use crate::report::{Figure, thousands};
use crate::service::{self, Mount, Probe};
use crate::stack::{self, Stack, unique};
use crate::{Error, Options, pause};

/// The shard counts of the three runs.
const SHARDS: [u32; 3] = [4, 16, 48];
/// Records per second per shard the producer writes (as in `kinesis-bench writes`).
const PER_SHARD: u64 = 10;
/// How far apart CPU per record may be across the runs: within 20 % of the lowest.
const FLAT: f64 = 1.2;

/// Records per shard in each run's backlog.
const BACKLOG_PER_SHARD: u64 = 500;
/// The `GetRecords` limit of the instance, so that a shard's backlog takes several calls and the
/// measured part of the read (after every shard delivered its first batch) is steady reading.
const BATCH: u32 = 100;

/// What a child measured: CPU seconds reading the backlog, per second idle, and over the loaded
/// window.
#[derive(Debug, Clone, Copy)]
struct Measured {
    /// Records of the backlog handled from the moment every shard had delivered to the last.
    backlog: u64,
    backlog_cpu: f64,
    /// Seconds from that moment to the last record of the backlog.
    backlog_secs: f64,
    idle_cpu_per_second: f64,
    cpu_seconds: f64,
    handled: u64,
    writes_per_shard_minute: f64,
    rss_bytes: u64,
}

impl Measured {
    /// CPU seconds per million records of the backlog, from every shard delivering to the last.
    fn backlog_cpu_per_million(&self) -> f64 {
        self.backlog_cpu / self.backlog.max(1) as f64 * 1e6
    }

    /// The same, less what holding the shards idle costs over as long.
    fn record_cpu_per_million(&self) -> f64 {
        (self.backlog_cpu - self.idle_cpu_per_second * self.backlog_secs).max(0.0)
            / self.backlog.max(1) as f64
            * 1e6
    }

    /// CPU seconds per million records under the steady load, all told.
    fn cpu_per_million(&self) -> f64 {
        self.cpu_seconds / (self.handled.max(1) as f64) * 1e6
    }
}

/// How long the child lets the load settle after it said it is done idling.
const RAMP: Duration = Duration::from_secs(5);

/// `kinesis-bench growth-child STREAM SHARDS BACKLOG WARMUP WINDOW`: one instance on `STREAM` (of
/// `SHARDS` shards) with a counting `DynamoLeaseStore` on a new table. It reads the stream's
/// backlog of `BACKLOG` records and prints `BACKLOG <cpu seconds> <records> <seconds>` from the
/// moment every shard delivered to the last record; after `WARMUP` seconds it
/// measures `WINDOW` seconds idle and prints `IDLE <cpu seconds>` (the parent then starts its
/// producer); after a ramp it measures `WINDOW` seconds under load and prints
/// `GROWTH <cpu seconds> <records handled> <writes per shard per minute> <rss bytes>`.
pub async fn child_command(opts: Options) -> Result<(), Error> {
    let [stream, shards, backlog, warmup, window] = &opts.rest[..] else {
        return Err("usage: kinesis-bench growth-child STREAM SHARDS BACKLOG WARMUP WINDOW".into());
    };
    let (shards, backlog): (u64, u64) = (shards.parse()?, backlog.parse()?);
    let (warmup, window) = (
        Duration::from_secs(warmup.parse()?),
        Duration::from_secs(window.parse()?),
    );
    let stack = Stack::new(&stack::endpoint());
    let table = stack.table("bench-growth").await?;
    let counted = Arc::new(CountingStore::new(Arc::new(table.clone())));
    let probe = Probe::default();
    probe.target_count(backlog);
    probe.target_shards(shards);
    let mut mount = Mount::new(stream);
    mount.batch_size = BATCH;
    let running = service::app(
        &stack,
        counted.clone(),
        &unique("bench-growth"),
        LeaseTimings::default(),
        mount,
        probe.clone(),
    )
    .await
    .start()
    .await?;
    let Some(last) = probe.wait_count(Duration::from_secs(120)).await else {
        return Err(format!(
            "read {} of the {backlog} records of the backlog",
            probe.count()
        )
        .into());
    };
    let every_shard = probe.wait_shards(Duration::ZERO).await.unwrap_or(last);
    let (cpu, records) = probe
        .cpu_from_shards_to_target()
        .ok_or("no shard mark: a shard delivered none of its backlog")?;
    println!(
        "BACKLOG {cpu} {records} {}",
        (last - every_shard).as_secs_f64()
    );
    pause(warmup).await;
    let idle_from = process_cpu();
    pause(window).await;
    println!("IDLE {}", process_cpu() - idle_from);
    pause(RAMP).await;
    let (cpu_before, handled_before, from) = (process_cpu(), probe.count(), Instant::now());
    pause(window).await;
    let (cpu_after, handled_after, to) = (process_cpu(), probe.count(), Instant::now());
    let rss_bytes = rss();
    let writes = counted.writes_per_row_minute(from, to).unwrap_or(0.0);
    running.shutdown().await?;
    stack.drop_table(table.table()).await;
    println!(
        "GROWTH {} {} {writes} {rss_bytes}",
        cpu_after - cpu_before,
        handled_after - handled_before
    );
    Ok(())
}

/// One run: a stream of `shards` shards, idle and then under load, read by a child.
async fn one(stack: &Stack, shards: u32, warmup: u64, window: u64) -> Result<Measured, Error> {
    let stream = unique("bench-growth");
    stack.create_stream(&stream, shards).await?;
    let stop = CancellationToken::new();
    let backlog = BACKLOG_PER_SHARD * u64::from(shards);
    let measured = match stack.fill(&stream, backlog, service::body).await {
        Ok(_) => child(stack, &stream, shards, warmup, window, &stop).await,
        Err(err) => Err(err),
    };
    stop.cancel();
    stack.delete_stream(&stream).await;
    let (measured, written) = measured?;
    eprintln!(
        "growth: {shards} shards: {written} records written, {} handled in the window, {:.3} CPU \
         s, {:.4} CPU s per s idle",
        measured.handled, measured.cpu_seconds, measured.idle_cpu_per_second
    );
    Ok(measured)
}

/// Runs the child on `stream`, starting the producer once it measured itself idle; what it
/// measured, and how many records the producer wrote.
async fn child(
    stack: &Stack,
    stream: &str,
    shards: u32,
    warmup: u64,
    window: u64,
    stop: &CancellationToken,
) -> Result<(Measured, u64), Error> {
    let url = &stack.url;
    let mut child = tokio::process::Command::new(std::env::current_exe()?)
        .args([
            "growth-child",
            stream,
            &shards.to_string(),
            &(BACKLOG_PER_SHARD * u64::from(shards)).to_string(),
            &warmup.to_string(),
            &window.to_string(),
        ])
        .env("KINESIS_TEST_ENDPOINT", url)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()?;
    let stdout = child.stdout.take().ok_or("no stdout of the child")?;
    let mut lines = BufReader::new(stdout).lines();
    let mut backlog = None;
    let mut idle = None;
    let mut measured = None;
    let mut producer = None;
    while let Some(line) = lines.next_line().await? {
        match line.split_whitespace().collect::<Vec<_>>()[..] {
            ["BACKLOG", cpu, records, secs] => {
                backlog = Some((cpu.parse::<f64>()?, records.parse()?, secs.parse::<f64>()?));
            }
            ["IDLE", cpu] => {
                idle = Some(cpu.parse::<f64>()? / window as f64);
                producer = Some(tokio::spawn(stack::produce(
                    stack.clone(),
                    stream.to_owned(),
                    PER_SHARD * u64::from(shards),
                    stop.clone(),
                )));
            }
            ["GROWTH", cpu, handled, writes, rss] => {
                measured = Some(Measured {
                    backlog: backlog.map_or(0, |(_, records, _)| records),
                    backlog_cpu: backlog.map_or(0.0, |(cpu, _, _)| cpu),
                    backlog_secs: backlog.map_or(0.0, |(_, _, secs)| secs),
                    idle_cpu_per_second: idle.unwrap_or(0.0),
                    cpu_seconds: cpu.parse()?,
                    handled: handled.parse()?,
                    writes_per_shard_minute: writes.parse()?,
                    rss_bytes: rss.parse()?,
                });
            }
            _ => {}
        }
    }
    let status = child.wait().await?;
    stop.cancel();
    let written = match producer {
        Some(producer) => producer.await??,
        None => 0,
    };
    let measured =
        measured.ok_or_else(|| format!("the growth child printed no figures ({status})"))?;
    Ok((measured, written))
}

pub async fn run(stack: &Stack, opts: &Options) -> Result<Vec<Figure>, Error> {
    let (warmup, window) = if opts.quick { (10, 20) } else { (10, 40) };
    let mut runs = Vec::new();
    for shards in SHARDS {
        runs.push((shards, one(stack, shards, warmup, window).await?));
    }
    let cpu: Vec<f64> = runs
        .iter()
        .map(|(_, m)| m.record_cpu_per_million())
        .collect();
    let lowest = cpu.iter().copied().fold(f64::INFINITY, f64::min);
    let highest = cpu.iter().copied().fold(0.0, f64::max);
    let spread = highest / lowest.max(1e-9);
    let mib = |b: f64| b / 1_048_576.0;
    let (first, last) = (runs[0], runs[runs.len() - 1]);
    let per_shard =
        (last.1.rss_bytes as f64 - first.1.rss_bytes as f64) / f64::from(last.0 - first.0);
    let list = |f: &dyn Fn(u32, &Measured) -> String| {
        runs.iter()
            .map(|(shards, m)| format!("{shards}: {}", f(*shards, m)))
            .collect::<Vec<_>>()
            .join(", ")
    };

    let mut f = Figure::new("how cost grows, 4 / 16 / 48 shards", "growth");
    f.measured = format!(
        "CPU {} s per million records read beyond holding the shards; {} lease-table writes \
         per shard per minute under load; {:.2} MiB per shard",
        cpu.iter()
            .map(|c| format!("{c:.1}"))
            .collect::<Vec<_>>()
            .join(" / "),
        runs.iter()
            .map(|(_, m)| format!("{:.1}", m.writes_per_shard_minute))
            .collect::<Vec<_>>()
            .join(" / "),
        mib(per_shard)
    );
    f.target = format!("CPU per record flat within {:.0} %", (FLAT - 1.0) * 100.0);
    f.pass = Some(spread <= FLAT);
    f.detail(format!(
        "one instance per run, a child process of its own, default timings, a `DynamoLeaseStore` \
         on a new table counted by a `CountingStore`; a producer in the parent writes \
         {PER_SHARD} records/s per shard of ~60 B JSON. The child first reads a backlog of \
         {BACKLOG_PER_SHARD} records per shard (~60 B JSON) from TRIM_HORIZON in GetRecords \
         calls of {BATCH}, and takes its CPU time (user + system, every thread) from the moment \
         every shard had delivered a record (start-up done) to the last record; then \
         after a {warmup} s warm-up it measures its CPU over {window} s idle, and, \
         {} s after the producer started, over {window} s under load: the records its handler \
         decoded and acknowledged, the writes per shard per minute ((writes - 1) / (last - first) \
         per row, averaged) and its resident set at the end (which keeps what the allocator held \
         on to from the backlog); memory per shard = (RSS({}) - RSS({})) / {}; the figure: (CPU \
         reading the backlog - CPU idle over as long) / records read meanwhile",
        RAMP.as_secs(),
        last.0,
        first.0,
        last.0 - first.0
    ));
    f.detail(format!(
        "CPU s per million records reading the backlog, beyond holding the shards: {} (highest \
         ÷ lowest {spread:.2}); all told: {} (over {} s and {} records); under the steady load, \
         all told: {}",
        list(&|_, m| format!("{:.2}", m.record_cpu_per_million())),
        list(&|_, m| format!("{:.2}", m.backlog_cpu_per_million())),
        list(&|_, m| format!("{:.2}", m.backlog_secs)),
        list(&|_, m| thousands(m.backlog as f64)),
        list(&|_, m| format!("{:.2}", m.cpu_per_million()))
    ));
    f.detail(format!(
        "CPU while idle, per shard: {} ms per second (the whole instance: {} ms per second)",
        list(&|shards, m| format!("{:.3}", m.idle_cpu_per_second * 1000.0 / f64::from(shards))),
        list(&|_, m| format!("{:.2}", m.idle_cpu_per_second * 1000.0))
    ));
    f.detail(format!(
        "records handled in the window: {}",
        list(&|_, m| thousands(m.handled as f64))
    ));
    f.detail(format!(
        "resident set: {}",
        list(&|_, m| format!("{:.1} MiB", mib(m.rss_bytes as f64)))
    ));
    f.detail(
        "holding a shard costs about the same whatever its rate (a GetRecords call per poll \
         interval, a renewal every 3 s, or a checkpoint write a second under load), so at 10 \
         records/s per shard it can outweigh the records themselves, and the instance's own \
         fixed costs weigh most with few shards: compare the CPU per record under the steady \
         load across the runs",
    );
    Ok(vec![f])
}

//! How cost grows with work: one instance, a child process of its own, reading 4, 16 and 48
//! shards under the same load per shard, with default timings and a `DynamoLeaseStore` on a new
//! table. Per run: the child's CPU seconds per million records handled, its lease-table writes
//! per shard per minute, and its resident memory, from which the memory per shard follows.
//!
//! The child measures itself over a window after a warm-up, so start-up (taking every lease,
//! reading what the producer wrote before) is not counted: what is left is the steady cost of a
//! shard under load, which should grow with the records and the shards and nothing else.

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

/// What a child measured over its window.
#[derive(Debug, Clone, Copy)]
struct Measured {
    cpu_seconds: f64,
    handled: u64,
    writes_per_shard_minute: f64,
    rss_bytes: u64,
}

impl Measured {
    fn cpu_per_million(&self) -> f64 {
        self.cpu_seconds / (self.handled.max(1) as f64) * 1e6
    }
}

/// `kinesis-bench growth-child STREAM WARMUP WINDOW`: one instance on `STREAM` with a counting
/// `DynamoLeaseStore` on a new table; after `WARMUP` seconds it measures for `WINDOW` seconds and
/// prints `GROWTH <cpu seconds> <records handled> <writes per shard per minute> <rss bytes>`.
pub async fn child_command(opts: Options) -> Result<(), Error> {
    let [stream, warmup, window] = &opts.rest[..] else {
        return Err("usage: kinesis-bench growth-child STREAM WARMUP WINDOW".into());
    };
    let (warmup, window) = (
        Duration::from_secs(warmup.parse()?),
        Duration::from_secs(window.parse()?),
    );
    let stack = Stack::new(&stack::endpoint());
    let table = stack.table("bench-growth").await?;
    let counted = Arc::new(CountingStore::new(Arc::new(table.clone())));
    let probe = Probe::default();
    let running = service::app(
        &stack,
        counted.clone(),
        &unique("bench-growth"),
        LeaseTimings::default(),
        Mount::new(stream),
        probe.clone(),
    )
    .await
    .start()
    .await?;
    pause(warmup).await;
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

/// One run: a stream of `shards` shards under load, read by a child.
async fn one(stack: &Stack, shards: u32, warmup: u64, window: u64) -> Result<Measured, Error> {
    let stream = unique("bench-growth");
    stack.create_stream(&stream, shards).await?;
    let stop = CancellationToken::new();
    let producer = tokio::spawn(stack::produce(
        stack.clone(),
        stream.clone(),
        PER_SHARD * u64::from(shards),
        stop.clone(),
    ));
    let measured = child(&stream, warmup, window, &stack.url).await;
    stop.cancel();
    let written = producer.await?;
    stack.delete_stream(&stream).await;
    let measured = measured?;
    eprintln!(
        "growth: {shards} shards: {} records written, {} handled in the window, {:.3} CPU s",
        written?, measured.handled, measured.cpu_seconds
    );
    Ok(measured)
}

async fn child(stream: &str, warmup: u64, window: u64, url: &str) -> Result<Measured, Error> {
    let mut child = tokio::process::Command::new(std::env::current_exe()?)
        .args([
            "growth-child",
            stream,
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
    let mut measured = None;
    while let Some(line) = lines.next_line().await? {
        if let ["GROWTH", cpu, handled, writes, rss] =
            line.split_whitespace().collect::<Vec<_>>()[..]
        {
            measured = Some(Measured {
                cpu_seconds: cpu.parse()?,
                handled: handled.parse()?,
                writes_per_shard_minute: writes.parse()?,
                rss_bytes: rss.parse()?,
            });
        }
    }
    let status = child.wait().await?;
    measured.ok_or_else(|| format!("the growth child printed no figures ({status})").into())
}

pub async fn run(stack: &Stack, opts: &Options) -> Result<Vec<Figure>, Error> {
    let (warmup, window) = if opts.quick { (10, 20) } else { (15, 60) };
    let mut runs = Vec::new();
    for shards in SHARDS {
        runs.push((shards, one(stack, shards, warmup, window).await?));
    }
    let cpu: Vec<f64> = runs.iter().map(|(_, m)| m.cpu_per_million()).collect();
    let lowest = cpu.iter().copied().fold(f64::INFINITY, f64::min);
    let highest = cpu.iter().copied().fold(0.0, f64::max);
    let spread = highest / lowest.max(1e-9);
    let mib = |b: f64| b / 1_048_576.0;
    let (first, last) = (runs[0], runs[runs.len() - 1]);
    let per_shard =
        (last.1.rss_bytes as f64 - first.1.rss_bytes as f64) / f64::from(last.0 - first.0);
    let list = |f: &dyn Fn(&Measured) -> String| {
        runs.iter()
            .map(|(shards, m)| format!("{shards}: {}", f(m)))
            .collect::<Vec<_>>()
            .join(", ")
    };

    let mut f = Figure::new("how cost grows, 4 / 16 / 48 shards", "growth");
    f.measured = format!(
        "CPU {} s per million records; {} lease-table writes per shard per minute; {:.2} MiB \
         per shard",
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
         {PER_SHARD} records/s per shard of ~60 B JSON; the child measures over {window} s after \
         a {warmup} s warm-up: its CPU time (user + system, every thread), the records its \
         handler decoded and acknowledged, the writes per shard per minute ((writes - 1) / (last \
         - first) per row, averaged) and its resident set at the end; memory per shard = \
         (RSS({}) - RSS({})) / {}",
        last.0,
        first.0,
        last.0 - first.0
    ));
    f.detail(format!(
        "CPU s per million records: {} (highest ÷ lowest {spread:.2})",
        list(&|m| format!("{:.2}", m.cpu_per_million()))
    ));
    f.detail(format!(
        "records handled in the window: {}",
        list(&|m| thousands(m.handled as f64))
    ));
    f.detail(format!(
        "resident set: {}",
        list(&|m| format!("{:.1} MiB", mib(m.rss_bytes as f64)))
    ));
    f.detail(
        "a shard under load costs a GetRecords call a second and a checkpoint write a second \
         (the default 1 s cadence) whatever its rate, so CPU per record stays flat while the \
         load per shard does; at a lower rate per shard those per-shard costs weigh more per \
         record",
    );
    Ok(vec![f])
}

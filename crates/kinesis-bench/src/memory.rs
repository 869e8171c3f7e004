//! Memory per owned shard, and that it stays bounded: the resident set of an instance (a child
//! process of its own) holding 1 shard and one holding 16, each shard with a backlog far larger
//! than what the instance may hold, and a handler slower than the stream, sampled every second.

use std::sync::Arc;
use std::time::Duration;

use ruststream_kinesis::prelude::App;
use ruststream_kinesis::{LeaseTimings, MemoryLeaseStore};

use crate::report::{Figure, median, thousands};
use crate::service::{self, Mount, Probe};
use crate::stack::{self, Stack, unique};
use crate::{Error, Options, pause};

/// Records per shard written before the instance starts.
const BACKLOG: u64 = 300;
/// Size of each record.
const RECORD: usize = 2048;
/// The `GetRecords` limit of the instances (the channel holds `max(BATCH, 64)` deliveries).
const BATCH: u32 = 100;
/// How long the handler works on each record: slower than the stream.
const DELAY_MS: u64 = 250;

/// The resident set of this process, in bytes.
pub fn rss() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| {
            s.split_whitespace()
                .nth(1)
                .and_then(|p| p.parse::<u64>().ok())
        })
        .map_or(0, |pages| pages * 4096)
}

/// `kinesis-bench memory-child STREAM SECONDS`: one instance on `STREAM` with a slow handler,
/// printing `RSS <second> <bytes>` every second and `HANDLED <n>` at the end.
pub async fn child_command(opts: Options) -> Result<(), Error> {
    let [stream, seconds] = &opts.rest[..] else {
        return Err("usage: kinesis-bench memory-child STREAM SECONDS".into());
    };
    let seconds: u64 = seconds.parse()?;
    let stack = Stack::new(&stack::endpoint());
    let probe = Probe::new(Duration::from_millis(DELAY_MS), false);
    let mut mount = Mount::new(stream);
    mount.batch_size = BATCH;
    let running = service::app(
        &stack,
        Arc::new(MemoryLeaseStore::new()),
        &unique("bench-memory"),
        LeaseTimings::default(),
        mount,
        probe.clone(),
    )
    .await
    .start()
    .await?;
    for second in 1..=seconds {
        pause(Duration::from_secs(1)).await;
        println!("RSS {second} {}", rss());
    }
    println!("HANDLED {}", probe.count());
    // The process ends here; a stop that releases would wait for the slow handler.
    drop(running);
    Ok(())
}

/// One child's samples: `(second, bytes)`.
async fn sample(stream: &str, seconds: u64, url: &str) -> Result<(Vec<(u64, u64)>, u64), Error> {
    let (mut child, mut lines) =
        crate::child::spawn(url, &["memory-child", stream, &seconds.to_string()])?;
    let mut samples = Vec::new();
    let mut handled = 0;
    while let Some(line) = lines.recv().await {
        let parts: Vec<&str> = line.split_whitespace().collect();
        match parts[..] {
            ["RSS", second, bytes] => samples.push((second.parse()?, bytes.parse()?)),
            ["HANDLED", n] => handled = n.parse()?,
            _ => {}
        }
    }
    let status = child.wait().await?;
    if samples.len() < usize::try_from(seconds)? {
        return Err(format!("the memory child ended early ({status})").into());
    }
    Ok((samples, handled))
}

pub async fn run(stack: &Stack, opts: &Options) -> Result<Vec<Figure>, Error> {
    let seconds: u64 = if opts.quick { 12 } else { 24 };
    let one = unique("bench-memory-1");
    let many = unique("bench-memory-16");
    stack.create_stream(&one, 1).await?;
    stack.create_stream(&many, 16).await?;
    let result = async {
        let body = |i| service::padded_body(i, RECORD);
        stack.fill(&one, BACKLOG, body).await?;
        stack.fill(&many, BACKLOG * 16, body).await?;
        let (small, small_handled) = sample(&one, seconds, &stack.url).await?;
        let (large, large_handled) = sample(&many, seconds, &stack.url).await?;
        Ok::<_, Error>((small, small_handled, large, large_handled))
    }
    .await;
    stack.delete_stream(&one).await;
    stack.delete_stream(&many).await;
    let (small, small_handled, large, large_handled) = result?;

    // Steady state: the second half of the run.
    let half = seconds / 2;
    let steady = |samples: &[(u64, u64)]| {
        let values: Vec<f64> = samples
            .iter()
            .filter(|(s, _)| *s > half)
            .map(|(_, b)| *b as f64)
            .collect();
        median(&values)
    };
    let growth = |samples: &[(u64, u64)]| {
        let at = |second: u64| {
            samples
                .iter()
                .find(|(s, _)| *s == second)
                .map_or(0.0, |(_, b)| *b as f64)
        };
        at(seconds) - at(half)
    };
    let (rss1, rss16) = (steady(&small), steady(&large));
    let per_shard = (rss16 - rss1) / 15.0;
    let mib = |b: f64| b / 1_048_576.0;
    let capacity = u64::from(BATCH).max(64);
    let bound = |shards: u64| (capacity + shards * u64::from(BATCH)) * RECORD as u64;
    let mut f = Figure::new("memory per owned shard", "memory");
    f.measured = format!(
        "{:.2} MiB per shard (RSS {:.1} MiB with 1 shard, {:.1} MiB with 16)",
        mib(per_shard),
        mib(rss1),
        mib(rss16)
    );
    f.target = "bounded".to_owned();
    let bounded = growth(&large) <= 2.0 * 1_048_576.0 && growth(&small) <= 2.0 * 1_048_576.0;
    f.pass = Some(bounded);
    f.detail(format!(
        "two child processes, one instance each with `MemoryLeaseStore`, batch size {BATCH}, a \
         handler that takes {DELAY_MS} ms per record; every shard holds a backlog of {BACKLOG} \
         records of {RECORD} B, more than an instance may hold; RSS from /proc/self/statm every \
         second for {seconds} s, the steady value the median of the second half; per shard = \
         (RSS(16) - RSS(1)) / 15"
    ));
    f.detail(format!(
        "growth over the second half: {} KiB with 1 shard, {} KiB with 16 (bounded: no queue \
         grows with the backlog); handled {small_handled} and {large_handled} records",
        thousands(growth(&small) / 1024.0),
        thousands(growth(&large) / 1024.0)
    ));
    f.detail(format!(
        "what an instance may hold at most: the subscription's channel (max(batch size, 64) = \
         {capacity} deliveries) plus one GetRecords batch per reader ({BATCH} records), i.e. \
         {:.2} MiB of records with 1 shard and {:.2} MiB with 16 at {RECORD} B per record; at the \
         default batch size of 1,000 each shard may hold 1,000 records (up to 10 MiB, the most a \
         GetRecords call returns)",
        mib(bound(1) as f64),
        mib(bound(16) as f64)
    ));
    Ok(vec![f])
}

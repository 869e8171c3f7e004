//! Start-up: from `start()` to every one of 40 shards read (a record handled from each), one
//! instance, with a DynamoDB lease table (the figure) and with memory (a detail), alternating.

use std::time::{Duration, Instant};

use ruststream_kinesis::LeaseTimings;
use ruststream_kinesis::prelude::App;

use crate::report::{Figure, median, secs_list};
use crate::service::{self, Mount, Probe};
use crate::stack::{self, Stack, unique};
use crate::{Error, Options};

const SHARDS: u32 = 40;

pub async fn run(stack: &Stack, opts: &Options) -> Result<Vec<Figure>, Error> {
    let reps = if opts.quick { 1 } else { 3 };
    let stream = unique("bench-startup");
    stack.create_stream(&stream, SHARDS).await?;
    let result = async {
        // One record in each shard: the first one handled from a shard shows it is read.
        stack.fill(&stream, u64::from(SHARDS), service::body).await?;
        let mut durable = Vec::new();
        let mut memory = Vec::new();
        let mut start_returned = Vec::new();
        for rep in 0..reps {
            for dynamo in [rep % 2 == 0, rep % 2 != 0] {
                let (all_read, returned) = once(stack, &stream, dynamo).await?;
                eprintln!(
                    "startup: {} store: start() returned after {:.2} s, every shard read after {:.2} s",
                    if dynamo { "DynamoDB" } else { "memory" },
                    returned.as_secs_f64(),
                    all_read.as_secs_f64()
                );
                if dynamo {
                    durable.push(all_read.as_secs_f64());
                    start_returned.push(returned.as_secs_f64());
                } else {
                    memory.push(all_read.as_secs_f64());
                }
            }
        }
        Ok::<_, Error>((durable, memory, start_returned))
    }
    .await;
    stack.delete_stream(&stream).await;
    let (durable, memory, returned) = result?;
    let value = median(&durable);
    let mut f = Figure::new("start-up, 40 shards", "startup");
    f.measured = format!("{value:.2} s (median of {})", durable.len());
    f.target = "≤ 5 s".to_owned();
    f.pass = Some(value <= 5.0);
    f.detail(format!(
        "one instance, default timings, a new {SHARDS}-shard stream holding one record per \
         shard, a new DynamoDB table each time; from `start()` to a record handled from every \
         shard (s): {}; `start()` itself returned after (s): {}",
        secs_list(&durable),
        secs_list(&returned)
    ));
    f.detail(format!(
        "the same with `MemoryLeaseStore` (s): {} (median {:.2})",
        secs_list(&memory),
        median(&memory)
    ));
    Ok(vec![f])
}

/// From `start()` to every shard read, and to `start()` returning.
async fn once(stack: &Stack, stream: &str, dynamo: bool) -> Result<(Duration, Duration), Error> {
    let (store, table) = stack::store(stack, dynamo).await?;
    let probe = Probe::default();
    probe.target_shards(u64::from(SHARDS));
    let app = service::app(
        stack,
        store,
        &unique("bench-starter"),
        LeaseTimings::default(),
        Mount::new(stream),
        probe.clone(),
    )
    .await;
    let began = Instant::now();
    let running = app.start().await?;
    let returned = began.elapsed();
    let all = probe.wait_shards(Duration::from_secs(60)).await;
    running.shutdown().await?;
    if let Some(table) = table {
        stack.drop_table(&table).await;
    }
    let all = all.ok_or("not every shard was read within 60 s")?;
    Ok((all - began, returned))
}

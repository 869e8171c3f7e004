//! Publishing: messages per second through the crate's publisher (the typed
//! `publisher.message(..).to(..).publish()` a service writes, 500 in flight) ÷ a hand-written
//! `PutRecords` loop (500 records per call), each on a new stream, alternating.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use ruststream::ConnectedBroker;
use ruststream_kinesis::MemoryLeaseStore;
use ruststream_kinesis::prelude::{Broker, Outgoing, PublishExt};
use serde::Serialize;

use crate::report::{Figure, median, thousands};
use crate::stack::{Stack, unique};
use crate::{Error, Options};

/// What both sides publish: the same ~60 B of JSON the consumers read.
#[derive(Debug, Serialize, Outgoing)]
struct OutRecord {
    id: u64,
    sku: String,
    quantity: u32,
}

fn record(i: u64) -> OutRecord {
    OutRecord {
        id: i,
        sku: format!("sku-{:02}", i % 17),
        quantity: u32::try_from(i % 5).unwrap_or(0) + 1,
    }
}

/// One `PutRecords` call's worth of publishes.
const IN_FLIGHT: usize = 500;
const SHARDS: u32 = 4;

pub async fn run(stack: &Stack, opts: &Options) -> Result<Vec<Figure>, Error> {
    let messages: u64 = if opts.quick { 1000 } else { 2000 };
    let reps = if opts.quick { 1 } else { 5 };
    // The loop, then the crate with one call's worth in flight, then with two (what its
    // writer's queue holds); the order rotates each round.
    let sides = [None, Some(IN_FLIGHT), Some(2 * IN_FLIGHT)];
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); sides.len()];
    let mut batches: Vec<Vec<usize>> = vec![Vec::new(); sides.len()];
    // One round of each side unmeasured first: the stack's first calls of a run are slower
    // (kinesis-mock's JVM warming up), and would count against whichever side went first.
    let stream = unique("bench-publish");
    stack.create_stream(&stream, SHARDS).await?;
    sdk_publish(stack, &stream, messages).await?;
    crate_publish(stack, &stream, messages, 2 * IN_FLIGHT).await?;
    stack.delete_stream(&stream).await;
    for rep in 0..reps {
        for i in 0..sides.len() {
            let side = (i + rep) % sides.len();
            let stream = unique("bench-publish");
            stack.create_stream(&stream, SHARDS).await?;
            let took = match sides[side] {
                Some(in_flight) => crate_publish(stack, &stream, messages, in_flight)
                    .await
                    .map(|(took, waves)| {
                        if batches[side].is_empty() {
                            batches[side] = waves;
                        }
                        took
                    }),
                None => sdk_publish(stack, &stream, messages).await,
            };
            stack.delete_stream(&stream).await;
            let rate = messages as f64 / took?.as_secs_f64();
            eprintln!(
                "publish: {}: {} messages/s",
                sides[side].map_or_else(
                    || "PutRecords loop".to_owned(),
                    |n| format!("crate, {n} in flight")
                ),
                thousands(rate)
            );
            rates[side].push(rate);
        }
    }
    // One publish at a time: what a service that awaits each publish gets.
    let stream = unique("bench-publish");
    stack.create_stream(&stream, SHARDS).await?;
    let single = crate_publish_one_by_one(stack, &stream, 200).await;
    stack.delete_stream(&stream).await;
    let single = 200.0 / single?.as_secs_f64();

    let ratio = |side: usize| {
        let ratios: Vec<f64> = rates[side]
            .iter()
            .zip(&rates[0])
            .map(|(c, s)| c / s)
            .collect();
        median(&ratios)
    };
    let list = |side: usize| {
        rates[side]
            .iter()
            .map(|r| thousands(*r))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let value = ratio(2);
    let mut f = Figure::new("publishing", "publish");
    f.measured = format!(
        "{value:.2} (crate {} msg/s ÷ PutRecords loop {} msg/s)",
        thousands(median(&rates[2])),
        thousands(median(&rates[0]))
    );
    f.target = "≥ 0.95".to_owned();
    f.pass = Some(value >= 0.95);
    f.detail(format!(
        "{messages} messages of ~60 B JSON per side and round, each side on a new {SHARDS}-shard \
         stream (kinesis-mock slows as a shard fills), {reps} round(s) after one unmeasured, the \
         order rotating; the \
         crate: `publisher.message(&value).to(stream).publish()` with {} publishes in flight \
         (`buffer_unordered`; the figure) or {IN_FLIGHT} (below), its writer batching them into \
         `PutRecords` calls; the loop: `serde_json::to_vec` and `PutRecords` of 500 records, one \
         call at a time; random partition keys on both sides",
        2 * IN_FLIGHT
    ));
    f.detail(format!(
        "per round: loop {} msg/s; crate with {} in flight {}; the figure is the median of the \
         per-round ratios",
        list(0),
        2 * IN_FLIGHT,
        list(2)
    ));
    f.detail(format!(
        "with {IN_FLIGHT} in flight (one call's worth): {:.2} (crate {} msg/s: {}); its writer \
         answered in {} waves of {:?} (one wave per PutRecords call, read from when the \
         publishes completed), against {} waves of {:?} with {} in flight and {} calls of the loop",
        ratio(1),
        thousands(median(&rates[1])),
        list(1),
        batches[1].len(),
        batches[1],
        batches[2].len(),
        batches[2],
        2 * IN_FLIGHT,
        messages.div_ceil(500)
    ));
    f.detail(format!(
        "one publish at a time (each awaited before the next, so each is its own PutRecords \
         call): {} msg/s",
        thousands(single)
    ));
    Ok(vec![f])
}

/// Groups publish completion times into waves (gaps over 2 ms): each wave is one `PutRecords`
/// answer of the crate's writer, so the waves show how it batched.
fn waves(mut done: Vec<Instant>) -> Vec<usize> {
    done.sort();
    let mut out: Vec<usize> = Vec::new();
    let mut last: Option<Instant> = None;
    for at in done {
        match last {
            Some(prev) if at - prev <= Duration::from_millis(2) => {
                if let Some(n) = out.last_mut() {
                    *n += 1;
                }
            }
            _ => out.push(1),
        }
        last = Some(at);
    }
    out
}

async fn crate_publish(
    stack: &Stack,
    stream: &str,
    messages: u64,
    in_flight: usize,
) -> Result<(Duration, Vec<usize>), Error> {
    let connected = stack
        .broker(Arc::new(MemoryLeaseStore::new()), "bench-publisher")
        .connect()
        .await?;
    let publisher = connected.publisher().await?;
    let began = Instant::now();
    let published = futures::stream::iter(0..messages)
        .map(|i| {
            let publisher = &publisher;
            async move {
                let value = record(i);
                publisher
                    .message(&value)
                    .to(stream)
                    .publish()
                    .await
                    .map(|()| Instant::now())
            }
        })
        .buffer_unordered(in_flight)
        .try_collect::<Vec<Instant>>()
        .await;
    let took = began.elapsed();
    connected.shutdown().await?;
    let done = published.map_err(|err| format!("publish: {err}"))?;
    Ok((took, waves(done)))
}

async fn crate_publish_one_by_one(
    stack: &Stack,
    stream: &str,
    messages: u64,
) -> Result<Duration, Error> {
    let connected = stack
        .broker(Arc::new(MemoryLeaseStore::new()), "bench-publisher")
        .connect()
        .await?;
    let publisher = connected.publisher().await?;
    let began = Instant::now();
    for i in 0..messages {
        publisher
            .message(&record(i))
            .to(stream)
            .publish()
            .await
            .map_err(|err| format!("publish: {err}"))?;
    }
    let took = began.elapsed();
    connected.shutdown().await?;
    Ok(took)
}

async fn sdk_publish(stack: &Stack, stream: &str, messages: u64) -> Result<Duration, Error> {
    use aws_sdk_kinesis::primitives::Blob;
    use aws_sdk_kinesis::types::PutRecordsRequestEntry;
    let began = Instant::now();
    let mut next = 0;
    while next < messages {
        let end = (next + 500).min(messages);
        let entries = (next..end)
            .map(|i| {
                let body = serde_json::to_vec(&record(i))?;
                let key = format!("{:032x}", crate::stack::random_u128());
                Ok(PutRecordsRequestEntry::builder()
                    .data(Blob::new(body))
                    .partition_key(key)
                    .build()?)
            })
            .collect::<Result<Vec<_>, Error>>()?;
        stack.put_all(stream, entries).await?;
        next = end;
    }
    Ok(began.elapsed())
}

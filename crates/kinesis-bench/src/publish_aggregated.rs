//! Publishing aggregated: user records per second per shard through the crate's publisher with
//! `KinesisPublish::aggregate(true)` ÷ the plain `PutRecords` loop (500 records per call), on
//! four shards, with records of 100 bytes. A shard takes at most 1,000 records a second but 1 MiB:
//! against AWS the plain side is capped at 1,000 records/s per shard, and only aggregates pass
//! it. kinesis-mock enforces no such cap, so the ratio here is the work both sides cost.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use ruststream::{Broker, ConnectedBroker, OutgoingMessage, PublishPolicy, Publisher};
use ruststream_kinesis::{KinesisOptions, KinesisPublish, MemoryLeaseStore};

use crate::report::{Figure, median, thousands, thousands_list};
use crate::stack::{Stack, unique};
use crate::{Error, Options};

/// The bytes of each record: what the figure names.
const RECORD_BYTES: usize = 100;
/// Publishes in flight on the crate's side: what its writer gathers for one write.
const IN_FLIGHT: usize = 2000;
/// Shards of each stream. kinesis-mock slows as one shard fills (to under 100 records/s at
/// 20,000 in one shard), so the records are spread; the figure is per shard.
const SHARDS: u32 = 4;

fn body(i: u64) -> Vec<u8> {
    let mut body = format!("{{\"id\":{i},\"pad\":\"").into_bytes();
    body.resize(RECORD_BYTES - 2, b'x');
    body.extend_from_slice(b"\"}");
    body
}

pub async fn run(stack: &Stack, opts: &Options) -> Result<Vec<Figure>, Error> {
    let records: u64 = if opts.quick { 2_000 } else { 4_000 };
    let reps = if opts.quick { 1 } else { 3 };
    let mut plain = Vec::new();
    let mut packed = Vec::new();
    let mut stored = 0;
    for rep in 0..reps {
        for side in [rep % 2, (rep + 1) % 2] {
            let stream = unique("bench-aggregate");
            stack.create_stream(&stream, SHARDS).await?;
            let took = if side == 0 {
                stack.fill(&stream, records, body).await?
            } else {
                let took = publish_packed(stack, &stream, records, body).await?;
                stored = stack.count_records(&stream).await?;
                took
            };
            stack.delete_stream(&stream).await;
            let rate = records as f64 / took.as_secs_f64() / f64::from(SHARDS);
            eprintln!(
                "publish-aggregated: {}: {} user records/s per shard",
                if side == 0 {
                    "PutRecords loop"
                } else {
                    "crate, aggregated"
                },
                thousands(rate)
            );
            if side == 0 {
                plain.push(rate);
            } else {
                packed.push(rate);
            }
        }
    }
    let ratios: Vec<f64> = packed.iter().zip(&plain).map(|(a, p)| a / p).collect();
    let value = median(&ratios);
    let mut f = Figure::new("publishing aggregated", "publish-aggregated");
    f.measured = format!(
        "{value:.2} (crate, aggregated {} user records/s per shard ÷ PutRecords loop {} records/s)",
        thousands(median(&packed)),
        thousands(median(&plain))
    );
    f.target = "≥ 5".to_owned();
    f.pass = Some(value >= 5.0);
    f.detail(format!(
        "{records} records of {RECORD_BYTES} B per side and round, each side on a new \
         {SHARDS}-shard stream (per shard: the rate ÷ {SHARDS}), {reps} round(s), the order \
         alternating; the crate: `publisher.publish(..)` \
         with a partition key per record (random) and {IN_FLIGHT} publishes in flight, policy \
         `KinesisPublish::default().aggregate(true)`; the loop: `PutRecords` of 500 records spread \
         evenly over the shards, one call at a time"
    ));
    f.detail(format!(
        "per round: loop {} records/s; aggregated {} user records/s; the figure is the median \
         of the per-round ratios; the last aggregated round stored {stored} Kinesis records for \
         {records} user records",
        thousands_list(&plain),
        thousands_list(&packed)
    ));
    f.detail(
        "kinesis-mock caps no shard at 1,000 records/s: against AWS the loop's side is capped \
         there (and at 1 MiB/s), aggregates only at 1 MiB/s, about 10,000 records of 100 B a \
         second",
    );
    Ok(vec![f])
}

/// Publishes `records` bodies (`body(i)`) to `stream` through the crate's publisher with
/// `aggregate(true)`, a random partition key each, [`IN_FLIGHT`] at once; how long it took.
pub async fn publish_packed(
    stack: &Stack,
    stream: &str,
    records: u64,
    body: impl Fn(u64) -> Vec<u8>,
) -> Result<Duration, Error> {
    let connected = stack
        .broker(Arc::new(MemoryLeaseStore::new()), "bench-aggregator")
        .connect()
        .await?;
    let publisher = KinesisPublish::default()
        .aggregate(true)
        .pair(&connected)
        .await
        .map_err(|err| format!("pair: {err}"))?;
    let began = Instant::now();
    futures::stream::iter(0..records)
        .map(|i| {
            let (publisher, body) = (&publisher, body(i));
            async move {
                let key = format!("{:032x}", crate::stack::random_u128());
                let options = KinesisOptions::default().with_partition_key(key);
                publisher
                    .publish(OutgoingMessage::new(stream, &body), Some(&options))
                    .await
            }
        })
        .buffer_unordered(IN_FLIGHT)
        .try_collect::<Vec<()>>()
        .await
        .map_err(|err| format!("publish: {err}"))?;
    let took = began.elapsed();
    connected
        .shutdown()
        .await
        .map_err(|err| format!("shutdown: {err}"))?;
    Ok(took)
}

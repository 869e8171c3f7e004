//! Exactly once into DynamoDB against at least once, on one shard of a pre-filled stream: the
//! same count of each record (`ADD applied :one` on the record's item) staged through
//! `DynamoWrites` and committed with the checkpoint (A), or written by the handler with one
//! `UpdateItem` per record, acknowledged after it (B). Records per second from the service's
//! start to the last record committed (A: the lease row's checkpoint at the last record) or
//! written (B); the write units each way, modelled from the calls (moto returns no consumed
//! capacity for a transaction); the table's counts afterwards (each must be 1).
//!
//! The counts are spread over [`TABLES`] tables: moto copies every table a transaction writes
//! to before applying it, so one table of thousands of items would measure that copy.

use std::collections::HashMap;
use std::convert::Infallible;
use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, KeySchemaElement, KeyType,
    ScalarAttributeType, TransactWriteItem, Update,
};
use ruststream_kinesis::prelude::*;
use ruststream_kinesis::{DynamoWrites, KinesisBatchContext, KinesisPosition, LeaseKey};

use crate::report::Figure;
use crate::service::{BenchRecord, body};
use crate::stack::{Stack, unique};
use crate::{Error, Options};

mod crash;
pub use crash::child_command;

/// Tables the counts are spread over.
const TABLES: u64 = 16;

/// What the two handlers need: the prefix of the count tables, the client B writes with, and how
/// many records B wrote.
struct Bench {
    prefix: String,
    dynamo: aws_sdk_dynamodb::Client,
    written: AtomicU64,
    /// Records A's batch handler handled (staged), deliveries again included.
    handled: AtomicU64,
}

/// The side that runs (one at a time): its stream and what its handlers need.
static STREAM: Mutex<String> = Mutex::new(String::new());
static SIDE: Mutex<Option<Arc<Bench>>> = Mutex::new(None);

fn stream() -> String {
    STREAM
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone()
}

fn bench() -> Arc<Bench> {
    SIDE.lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone()
        .expect("the side is set before its app is built")
}

/// The count of record `id`: its item in its table.
fn count(prefix: &str, id: u64) -> Update {
    Update::builder()
        .table_name(format!("{prefix}-{}", id % TABLES))
        .key("id", AttributeValue::S(id.to_string()))
        .update_expression("ADD applied :one")
        .expression_attribute_values(":one", AttributeValue::N("1".into()))
        .build()
        .expect("table, key and expression are set")
}

/// A: stages the count; it commits with the checkpoint.
#[subscriber(KinesisStream::new(stream()).exactly_once())]
async fn exactly_once(record: &BenchRecord, Ctx(writes): Ctx<DynamoWrites>) -> HandlerOutcome {
    let update = count(&bench().prefix, record.id);
    match writes.stage(TransactWriteItem::builder().update(update).build()) {
        Ok(()) => HandlerOutcome::ack(),
        Err(_) => HandlerOutcome::retry(),
    }
}

/// A, batch handler: stages the count of each record of the batch; they commit with the
/// shard's checkpoint, in one transaction a batch.
#[subscriber(KinesisStream::new(stream()).exactly_once())]
async fn stage_batch(
    batch: &[BenchRecord],
    ctx: &mut Context<'_, KinesisBatchContext>,
) -> HandlerOutcome {
    let writes = ctx.context(DynamoWrites);
    let bench = bench();
    for record in batch {
        let update = count(&bench.prefix, record.id);
        if writes
            .stage(TransactWriteItem::builder().update(update).build())
            .is_err()
        {
            return HandlerOutcome::retry();
        }
    }
    bench
        .handled
        .fetch_add(batch.len() as u64, Ordering::Relaxed);
    HandlerOutcome::ack()
}

/// B, batch handler: writes the count of each record of the batch, one `UpdateItem` after the
/// other, then acknowledges the batch.
#[subscriber(KinesisStream::new(stream()))]
async fn write_batch(batch: &[BenchRecord]) -> HandlerOutcome {
    for record in batch {
        if write_count(record.id).await.is_err() {
            return HandlerOutcome::retry();
        }
    }
    HandlerOutcome::ack()
}

/// B's write of record `id`'s count, counted once it landed.
async fn write_count(id: u64) -> Result<(), Error> {
    let bench = bench();
    let update = count(&bench.prefix, id);
    bench
        .dynamo
        .update_item()
        .table_name(update.table_name())
        .set_key(Some(update.key().clone()))
        .update_expression(update.update_expression())
        .set_expression_attribute_values(update.expression_attribute_values().cloned())
        .send()
        .await
        .map_err(|err| format!("UpdateItem: {}", crate::stack::sdk(err)))?;
    bench.written.fetch_add(1, Ordering::Relaxed);
    Ok(())
}

/// B: writes the count, then acknowledges.
#[subscriber(KinesisStream::new(stream()))]
async fn at_least_once(record: &BenchRecord) -> HandlerOutcome {
    match write_count(record.id).await {
        Ok(()) => HandlerOutcome::ack(),
        Err(_) => HandlerOutcome::retry(),
    }
}

/// Creates the count tables of `prefix`.
async fn count_tables(stack: &Stack, prefix: &str) -> Result<(), Error> {
    for n in 0..TABLES {
        stack
            .dynamo
            .create_table()
            .table_name(format!("{prefix}-{n}"))
            .billing_mode(BillingMode::PayPerRequest)
            .key_schema(
                KeySchemaElement::builder()
                    .attribute_name("id")
                    .key_type(KeyType::Hash)
                    .build()?,
            )
            .attribute_definitions(
                AttributeDefinition::builder()
                    .attribute_name("id")
                    .attribute_type(ScalarAttributeType::S)
                    .build()?,
            )
            .send()
            .await
            .map_err(|err| format!("CreateTable {prefix}-{n}: {}", crate::stack::sdk(err)))?;
    }
    Ok(())
}

/// Every count in the tables of `prefix`, by record id.
async fn counts(stack: &Stack, prefix: &str) -> Result<HashMap<String, u64>, Error> {
    let mut counts = HashMap::new();
    for n in 0..TABLES {
        let mut start = None;
        loop {
            let page = stack
                .dynamo
                .scan()
                .table_name(format!("{prefix}-{n}"))
                .consistent_read(true)
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(|err| format!("Scan: {}", crate::stack::sdk(err)))?;
            for item in page.items() {
                let id = item.get("id").and_then(|v| v.as_s().ok()).cloned();
                let applied = item
                    .get("applied")
                    .and_then(|v| v.as_n().ok())
                    .and_then(|n| n.parse().ok());
                if let (Some(id), Some(applied)) = (id, applied) {
                    counts.insert(id, applied);
                }
            }
            start = page.last_evaluated_key().cloned();
            if start.is_none() {
                break;
            }
        }
    }
    Ok(counts)
}

/// Whether the lease row of `key` holds `sequence` as its checkpoint: the shard committed
/// through that record.
async fn committed_through(
    store: &DynamoLeaseStore,
    key: &LeaseKey,
    sequence: &str,
) -> Result<bool, Error> {
    Ok(store
        .read(key)
        .await?
        .and_then(|row| row.checkpoint)
        .is_some_and(|checkpoint| checkpoint == sequence))
}

/// Of `counts`, how many records were counted once, and how many more than once.
fn tally(counts: &HashMap<String, u64>) -> (usize, usize) {
    (
        counts.values().filter(|&&n| n == 1).count(),
        counts.values().filter(|&&n| n > 1).count(),
    )
}

/// One side's run: the records per second from the start to the last record done, and whether
/// every record was counted exactly once.
struct Side {
    per_second: f64,
    counted_once: usize,
    counted_more: usize,
}

/// The records a batch handler takes at most: what one transaction holds beside the lease row.
const BATCH: usize = 99;

/// The service on `stream` (read from its start) through `broker`: A (`exactly`) or B, with a
/// single-record handler or a batch handler (`batches`). The handlers' mounts read the stream
/// set here.
fn app(broker: KinesisBroker, stream: &str, exactly: bool, batches: bool) -> RustStream {
    stream.clone_into(&mut STREAM.lock().unwrap_or_else(PoisonError::into_inner));
    RustStream::new(AppInfo::new("kinesis-bench", "0.1.0"))
        .on_startup(async move |()| Ok::<_, Infallible>(()))
        .with_broker(broker, move |b| {
            let batch = NonZeroUsize::new(BATCH).expect("a batch holds records");
            let start = KinesisPosition::TrimHorizon;
            match (exactly, batches) {
                (true, false) => {
                    b.include(exactly_once.start_at(start));
                }
                (false, false) => {
                    b.include(at_least_once.start_at(start));
                }
                (true, true) => {
                    b.include(stage_batch.batch(batch).start_at(start));
                }
                (false, true) => {
                    b.include(write_batch.batch(batch).start_at(start));
                }
            }
        })
}

/// Sets the side that runs next: its counts' tables under `prefix`.
fn set_side(stack: &Stack, prefix: &str) -> Arc<Bench> {
    let side = Arc::new(Bench {
        prefix: prefix.to_owned(),
        dynamo: stack.dynamo.clone(),
        written: AtomicU64::new(0),
        handled: AtomicU64::new(0),
    });
    SIDE.lock()
        .unwrap_or_else(PoisonError::into_inner)
        .replace(Arc::clone(&side));
    side
}

async fn run_side(
    stack: &Stack,
    records: u64,
    exactly: bool,
    batches: bool,
) -> Result<Side, Error> {
    let stream = unique(if exactly { "bench-eo" } else { "bench-alo" });
    stack.create_stream(&stream, 1).await?;
    stack.fill(&stream, records, body).await?;
    let last = stack
        .shards(&stream)
        .await?
        .first()
        .map(|(shard, _)| shard.clone())
        .ok_or("no shard")?;
    let prefix = unique("bench-counts");
    count_tables(stack, &prefix).await?;
    let store = stack.table("bench-eo-leases").await?;
    let side_bench = set_side(stack, &prefix);
    let broker = stack.broker(Arc::new(store.clone()), &unique("bench-eo"));
    let app = app(broker, &stream, exactly, batches);
    let started = Instant::now();
    let running = app.start().await?;
    let key = LeaseKey::new(stream.as_str(), last.as_str());
    let last_sequence = stack
        .read_shard(&stream, &last)
        .await?
        .1
        .ok_or("the filled shard reads empty")?;
    let deadline = started + Duration::from_secs(600);
    let done = loop {
        let finished = if exactly {
            committed_through(&store, &key, &last_sequence).await?
        } else {
            side_bench.written.load(Ordering::Relaxed) >= records
        };
        if finished {
            break started.elapsed();
        }
        if Instant::now() > deadline {
            return Err("the side did not finish within 10 minutes".into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    running.shutdown().await?;
    let (counted_once, counted_more) = tally(&counts(stack, &prefix).await?);
    Ok(Side {
        per_second: records as f64 / done.as_secs_f64(),
        counted_once,
        counted_more,
    })
}

pub async fn run(stack: &Stack, opts: &Options) -> Result<Vec<Figure>, Error> {
    let records = if opts.quick { 500 } else { 2_000 };
    let mut figures = Vec::new();
    for batches in [false, true] {
        let a = run_side(stack, records, true, batches).await?;
        let b = run_side(stack, records, false, batches).await?;
        let handler = if batches {
            format!("a batch handler of at most {BATCH} records")
        } else {
            "a single-record handler".to_owned()
        };
        let mut figure = Figure::new(
            if batches {
                "exactly once ÷ at least once, batch handler"
            } else {
                "exactly once ÷ at least once"
            },
            "exactly-once",
        );
        let ratio = a.per_second / b.per_second;
        figure.measured = format!(
            "{ratio:.2} ({:.0} ÷ {:.0} records/s, one shard, {handler})",
            a.per_second, b.per_second
        );
        figure.target = "≥ 0.5".to_owned();
        figure.pass = Some(ratio >= 0.5 && a.counted_more == 0);
        figure.detail(format!(
            "{records} records pre-filled in one shard; A: {handler} stages `ADD applied :one` on each record's item through DynamoWrites under exactly_once(), measured from the start to the lease row's checkpoint at the last record; B: the same handler, at least once, writes it with one UpdateItem per record and acknowledges after it (each write awaited in turn), measured to the last write; counts spread over {TABLES} tables (moto copies every table a transaction writes to)"
        ));
        figure.detail(format!(
            "counted once: A {} of {records} (more than once: {}), B {} of {records} (more than once: {})",
            a.counted_once, a.counted_more, b.counted_once, b.counted_more
        ));
        figure.detail(
            "write units per record, modelled (items under 1 KB): A 2 + 2/n with n records per transaction (a transactional write costs twice a plain one), B 1 plus the checkpoint writes at the 1 s cadence",
        );
        figures.push(figure);
    }
    figures.push(crash::run(stack, records).await?);
    Ok(figures)
}

//! What the two inventory examples share (`kinesis_leases_store` with macros and
//! `manual_kinesis_leases_store` without): the code that starts two instances of the service on
//! one lease store against the local stack, feeds them stock changes and checks that the shards
//! were split, each change handled by exactly one instance.
//!
//! Each instance runs under `TestApp::start_live`: the framework's harness around the real app on
//! the real stack, which records what each instance's handler received. In production the same
//! `service(..)` runs with `.run().await`.

use std::collections::BTreeMap;
use std::error::Error;
use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_sdk_kinesis::types::StreamStatus;
use ruststream::testing::TestApp;
use ruststream::{Broker, ConnectedBroker, OutgoingMessage, Publisher};
use ruststream_kinesis::prelude::*;

/// The stream the service reads.
pub const STREAM: &str = "inventory";

/// The service under test, as each example builds it.
pub type Service = fn(KinesisBroker, Arc<dyn LeaseStore>) -> RustStream;

/// What is published: a SKU (also the partition key, so one SKU's changes stay in order in one
/// shard) and a change of stock. With two shards these SKUs land on both.
const CHANGES: [(&str, i64); 12] = [
    ("bolts", 40),
    ("screws", 500),
    ("hinges", 12),
    ("washers", 200),
    ("nails", 1000),
    ("nuts", 300),
    ("bolts", -5),
    ("screws", -120),
    ("hinges", -2),
    ("washers", -50),
    ("nails", -250),
    ("nuts", -30),
];

const OWNERS: [&str; 2] = ["inventory-a", "inventory-b"];
const DEADLINE: Duration = Duration::from_secs(30);

/// The local stack's endpoint, or `None` to skip a live test (failing instead when
/// `KINESIS_TEST_STRICT=1`, so CI cannot pass by skipping).
#[cfg(test)]
pub fn live_endpoint() -> Option<String> {
    match std::env::var("KINESIS_TEST_ENDPOINT") {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            assert!(
                std::env::var("KINESIS_TEST_STRICT").as_deref() != Ok("1"),
                "KINESIS_TEST_ENDPOINT is not set and KINESIS_TEST_STRICT=1: live tests may not \
                 be skipped"
            );
            eprintln!("skipped: set KINESIS_TEST_ENDPOINT to run the live example");
            None
        }
    }
}

/// The endpoint `main` runs against: `KINESIS_TEST_ENDPOINT`, or the local stack's default.
pub fn endpoint() -> String {
    std::env::var("KINESIS_TEST_ENDPOINT")
        .ok()
        .filter(|url| !url.is_empty())
        .unwrap_or_else(|| "http://127.0.0.1:4566".to_owned())
}

/// A broker on the local stack: one endpoint, static test credentials.
pub fn local_broker(endpoint: &str) -> KinesisBroker {
    KinesisBroker::new()
        .endpoint(endpoint)
        .region("us-east-1")
        .test_credentials()
}

/// Runs two instances of `service` on one `MemoryLeaseStore`, publishes [`CHANGES`] and checks
/// that every change was handled by exactly one instance, and that each instance read a shard.
///
/// # Errors
///
/// When the stack cannot be reached, or a change was handled by both instances or by none, or
/// one instance read nothing.
pub async fn two_instances(endpoint: &str, service: Service) -> Result<(), Box<dyn Error>> {
    let shards = inventory_shards(endpoint).await?;
    let store = MemoryLeaseStore::new();
    let leases: Arc<dyn LeaseStore> = Arc::new(store.clone());

    // Who reads a shard is whoever takes its lease first, and an instance takes every free shard
    // it lists, so two instances started one after the other would not split anything: the first
    // would hold both shards and the second would stand by. Stage the moment a fleet reaches
    // sooner or later: instance B already holds shard 1 (its lease is in the shared store, under
    // its name). A then takes the free shard 0 and leaves shard 1 alone; B, started under the
    // same name, gets its lease back at once.
    let staged = LeaseKey::new(STREAM, shards[1].clone());
    leases
        .acquire(&staged, OWNERS[1], LeaseTimings::default().lease())
        .await?;

    let a = TestApp::start_live(service(
        local_broker(endpoint).owner_id(OWNERS[0]),
        Arc::clone(&leases),
    ))
    .await?;
    let b = TestApp::start_live(service(
        local_broker(endpoint).owner_id(OWNERS[1]),
        Arc::clone(&leases),
    ))
    .await?;
    println!("the shared lease store after both instances started:");
    print_rows(&store);

    // A producer of its own: what the instances handle comes from the stream, not the harness.
    let run = format!("{:08x}", rand::random::<u32>());
    let producer = local_broker(endpoint).connect().await?;
    let publisher = producer.publisher().await?;
    for (sku, delta) in CHANGES {
        let body =
            serde_json::to_vec(&serde_json::json!({ "sku": sku, "delta": delta, "run": run }))?;
        publisher
            .publish(
                OutgoingMessage::new(STREAM, body.as_slice()),
                Some(&KinesisOptions::default().with_partition_key(sku)),
            )
            .await?;
    }
    println!("published {} stock changes to {STREAM}", CHANGES.len());

    let handled = |app: &TestApp<()>| -> Vec<(String, i64)> {
        app.broker::<KinesisBroker>()
            .subscriber(STREAM)
            .received::<serde_json::Value>()
            .into_iter()
            .filter(|change| change["run"] == run.as_str())
            .map(|change| {
                (
                    change["sku"].as_str().unwrap_or_default().to_owned(),
                    change["delta"].as_i64().unwrap_or_default(),
                )
            })
            .collect()
    };
    let started = Instant::now();
    while handled(&a).len() + handled(&b).len() < CHANGES.len() && started.elapsed() < DEADLINE {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // A little longer, so that a change handled twice would show.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let by_instance = [handled(&a), handled(&b)];
    a.shutdown().await?;
    b.shutdown().await?;
    producer.shutdown().await?;
    println!("after both stopped (each wrote its final checkpoint and released its lease):");
    print_rows(&store);

    for (owner, changes) in OWNERS.iter().zip(&by_instance) {
        let listed: Vec<String> = changes
            .iter()
            .map(|(sku, delta)| format!("{sku} {delta:+}"))
            .collect();
        println!("{owner} handled {}: {}", changes.len(), listed.join(", "));
    }
    let mut problems = Vec::new();
    for (sku, delta) in CHANGES {
        let times: Vec<&str> = OWNERS
            .iter()
            .zip(&by_instance)
            .flat_map(|(owner, changes)| {
                changes
                    .iter()
                    .filter(move |change| change.0 == sku && change.1 == delta)
                    .map(move |_| *owner)
            })
            .collect();
        if times.len() != 1 {
            problems.push(format!("{sku} {delta:+} was handled by {times:?}"));
        }
    }
    for (owner, changes) in OWNERS.iter().zip(&by_instance) {
        if changes.is_empty() {
            problems.push(format!(
                "{owner} handled nothing: the shards were not split"
            ));
        }
    }
    if !problems.is_empty() {
        return Err(problems.join("; ").into());
    }
    println!("every change was handled once, by the instance holding its shard");
    Ok(())
}

fn print_rows(store: &MemoryLeaseStore) {
    let mut by_key = BTreeMap::new();
    for (key, row) in store.rows() {
        if key.stream() == STREAM {
            by_key.insert(key.to_string(), row);
        }
    }
    for (key, row) in by_key {
        println!(
            "  {key}  owner {:<12} checkpoint {}",
            row.owner.as_deref().unwrap_or("-"),
            row.checkpoint.as_deref().unwrap_or("-"),
        );
    }
}

/// The open shards of `inventory`, created with two shards when it does not exist: the stream
/// is infrastructure, made before the service starts.
async fn inventory_shards(endpoint: &str) -> Result<Vec<String>, Box<dyn Error>> {
    let client = aws_sdk_kinesis::Client::new(&ruststream_kinesis::local_stack_config(endpoint));
    let started = Instant::now();
    loop {
        match client
            .describe_stream_summary()
            .stream_name(STREAM)
            .send()
            .await
        {
            Ok(out) => {
                let status = out
                    .stream_description_summary()
                    .map(|summary| summary.stream_status().clone());
                if status == Some(StreamStatus::Active) {
                    break;
                }
            }
            Err(err)
                if err
                    .as_service_error()
                    .is_some_and(|e| e.is_resource_not_found_exception()) =>
            {
                let created = client
                    .create_stream()
                    .stream_name(STREAM)
                    .shard_count(2)
                    .send()
                    .await;
                if let Err(err) = created
                    && !err
                        .as_service_error()
                        .is_some_and(|e| e.is_resource_in_use_exception())
                {
                    return Err(err.into());
                }
            }
            Err(err) => return Err(err.into()),
        }
        if started.elapsed() > DEADLINE {
            return Err(format!("stream {STREAM} is not active after {DEADLINE:?}").into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let listed = client.list_shards().stream_name(STREAM).send().await?;
    let mut open: Vec<String> = listed
        .shards()
        .iter()
        .filter(|shard| {
            shard
                .sequence_number_range()
                .is_some_and(|range| range.ending_sequence_number().is_none())
        })
        .map(|shard| shard.shard_id().to_owned())
        .collect();
    open.sort();
    if open.len() < 2 {
        return Err(format!(
            "stream {STREAM} has {} open shard(s); the example needs two",
            open.len()
        )
        .into());
    }
    Ok(open)
}

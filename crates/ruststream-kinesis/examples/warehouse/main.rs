//! The warehouse service of the "Several instances" guide: every instance picks orders from the
//! shards it holds, and a lease table in DynamoDB gives each shard of `warehouse-orders` to one
//! instance and keeps its checkpoint.
//!
//! It runs wherever `aws_config` finds its configuration in the environment. On the local stack:
//!
//! ```text
//! scripts/local-stack.sh start
//! export AWS_ENDPOINT_URL=http://127.0.0.1:4566 AWS_REGION=us-east-1 \
//!     AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test
//! cargo run -p lease-table -- warehouse-leases --create         # the table, once
//! cargo run -p ruststream-kinesis --features dynamodb-lease --example warehouse   # an instance
//! cargo run -p ruststream-kinesis --features dynamodb-lease --example warehouse -- produce
//! ```
//!
//! Settings, from the command line or the environment: the lease table (first argument, or
//! `WAREHOUSE_TABLE`, default `warehouse-leases`) and the instance's name in it (`WAREHOUSE_OWNER`;
//! unique per instance when unset). With the `metrics` feature, `WAREHOUSE_METRICS_ADDR` (such as
//! `127.0.0.1:9464`, with `WAREHOUSE_OWNER` set) serves the metrics on `/metrics` there
//! (`observed.rs`). `warehouse produce [--count N] [--every MS]` publishes orders
//! instead (the demo's producer). With the `asyncapi` feature, `warehouse asyncapi gen [-o FILE]
//! [--yaml]` prints the service's `AsyncAPI` document (`spec.rs`); `docs/asyncapi/warehouse.json`
//! is its snapshot, which a test compares.
//!
//! The tests: one in process, with a configuration built without I/O (feature `testing`), and one
//! live, which runs two instances on a new lease table and sees the second take the shards over
//! when the first stops (it needs `KINESIS_TEST_ENDPOINT`).

use std::error::Error;
use std::process::ExitCode;

use aws_config::BehaviorVersion;
use ruststream_kinesis::prelude::*;
use serde::{Deserialize, Serialize};

#[cfg(feature = "metrics")]
mod observed;
mod produce;
mod spec;

// ANCHOR: order
/// An order to pick: which item, under the order's number.
#[derive(Debug, PartialEq, Deserialize, Serialize, Outgoing)]
#[cfg_attr(
    feature = "asyncapi",
    derive(ruststream::schemars::JsonSchema),
    schemars(crate = "ruststream::schemars")
)]
#[outgoing(name = "warehouse-orders")]
struct Order {
    id: u64,
    sku: String,
}
// ANCHOR_END: order

// ANCHOR: service
/// Picks each order. Every instance runs this handler, and each shard is read by the one instance
/// that holds its lease.
#[subscriber(KinesisStream::new("warehouse-orders").create_if_missing(2))]
async fn pick(order: &Order) -> HandlerOutcome {
    tracing::info!(order.id, order.sku, "order picked");
    HandlerOutcome::ack()
}

/// The lease store and the broker share one AWS configuration: one account, one region. The
/// broker is registered under a label, the name of its server in the service's AsyncAPI document.
fn service(config: &SdkConfig, table: &str) -> RustStream {
    let leases = Arc::new(DynamoLeaseStore::new(config, table));
    let broker = KinesisBroker::from_config(config.clone()).lease_store(leases);
    RustStream::new(AppInfo::new("warehouse", "0.1.0")).with_broker_labeled(
        "kinesis",
        broker,
        |b| {
            b.include(pick);
        },
    )
}
// ANCHOR_END: service

// ANCHOR: named
/// The same service under a name of its own in the lease table, such as its pod's name. It must
/// never be shared by two instances running at the same time.
fn named_service(config: &SdkConfig, table: &str, owner: &str) -> RustStream {
    let leases = Arc::new(DynamoLeaseStore::new(config, table));
    let broker = KinesisBroker::from_config(config.clone())
        .lease_store(leases)
        .owner_id(owner);
    RustStream::new(AppInfo::new("warehouse", "0.1.0")).with_broker_labeled(
        "kinesis",
        broker,
        |b| {
            b.include(pick);
        },
    )
}
// ANCHOR_END: named

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("asyncapi") {
        return spec::print(&table_named(None));
    }
    match serve(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("warehouse: {err}");
            ExitCode::FAILURE
        }
    }
}

/// The lease table: `given` (the first argument), else `WAREHOUSE_TABLE`, else
/// `warehouse-leases`.
fn table_named(given: Option<&String>) -> String {
    given
        .cloned()
        .or_else(|| std::env::var("WAREHOUSE_TABLE").ok())
        .unwrap_or_else(|| "warehouse-leases".to_owned())
}

#[tokio::main]
async fn serve(args: &[String]) -> Result<(), Box<dyn Error>> {
    tracing_subscriber::fmt()
        .with_max_level(tracing::Level::INFO)
        .with_target(false)
        .init();
    if args.first().map(String::as_str) == Some("produce") {
        return produce::run(&args[1..]).await;
    }
    let table = table_named(args.first());
    let owner = std::env::var("WAREHOUSE_OWNER").ok();
    #[cfg(feature = "metrics")]
    if let (Ok(addr), Some(owner)) = (std::env::var("WAREHOUSE_METRICS_ADDR"), owner.as_deref()) {
        return observed::run(&table, owner, &addr).await;
    }

    // ANCHOR: main
    // Region, credentials and endpoint from the environment, loaded once for the store and the
    // broker. `run` serves until SIGINT or SIGTERM, then stops gracefully: each reader writes its
    // final checkpoint and releases its lease, so another instance can take the shard at its next
    // listing instead of waiting for the lease to expire.
    let config = aws_config::defaults(BehaviorVersion::latest()).load().await;
    let app = match owner.as_deref() {
        None => service(&config, &table),
        Some(owner) => named_service(&config, &table, owner),
    };
    app.run().await?;
    // ANCHOR_END: main
    Ok(())
}

#[cfg(all(test, feature = "testing"))]
mod tests {
    use std::collections::HashSet;
    use std::time::{Duration, Instant};

    use aws_config::Region;
    use ruststream::testing::TestApp;
    use ruststream::{Broker, ConnectedBroker};

    use super::*;

    // ANCHOR: in_process
    #[tokio::test]
    async fn an_order_is_picked() -> Result<(), Box<dyn Error>> {
        // A configuration built without I/O: the in-process Kinesis needs no credentials, and it
        // consults no lease store, so the table is never reached.
        let config = SdkConfig::builder()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new("us-east-1"))
            .build();
        let tb = TestApp::start(service(&config, "t")).await?;
        let orders = tb.broker::<KinesisBroker>();
        let order = Order {
            id: 7,
            sku: "bolts".to_owned(),
        };
        orders.message(&order).publish().await?;

        orders
            .subscriber("warehouse-orders")
            .assert_called_once()
            .with(&order)
            .settled(HandlerOutcome::ack());
        Ok(())
    }
    // ANCHOR_END: in_process

    /// The stack's configuration, or `None` (after a skip line) when `KINESIS_TEST_ENDPOINT` is
    /// not set; with `KINESIS_TEST_STRICT=1` the test fails instead.
    fn live_config() -> Option<SdkConfig> {
        match std::env::var("KINESIS_TEST_ENDPOINT") {
            Ok(endpoint) if !endpoint.is_empty() => {
                Some(ruststream_kinesis::local_stack_config(endpoint))
            }
            _ => {
                assert!(
                    std::env::var("KINESIS_TEST_STRICT").as_deref() != Ok("1"),
                    "KINESIS_TEST_ENDPOINT is not set and KINESIS_TEST_STRICT=1: live tests may \
                     not be skipped"
                );
                eprintln!("skipped: set KINESIS_TEST_ENDPOINT to run the live warehouse test");
                None
            }
        }
    }

    /// The orders of this run that an instance's handler received, by id.
    fn picked(app: &TestApp<()>, sku: &str) -> Vec<u64> {
        app.broker::<KinesisBroker>()
            .subscriber("warehouse-orders")
            .received::<Order>()
            .into_iter()
            .filter(|order| order.sku == sku)
            .map(|order| order.id)
            .collect()
    }

    /// Waits until `done` holds, for at most `limit`.
    async fn wait_for(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
        let started = Instant::now();
        while !done() {
            if started.elapsed() > limit {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        true
    }

    /// The owner of every row of the table (`None` for a released row).
    async fn owners(store: &DynamoLeaseStore) -> Vec<Option<String>> {
        let rows = store.rows().await.expect("read the lease table");
        rows.into_iter()
            .filter(|(key, _)| key.stream() == "warehouse-orders")
            .map(|(_, row)| row.owner)
            .collect()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_second_instance_takes_over_after_the_first_stops() -> Result<(), Box<dyn Error>> {
        let Some(config) = live_config() else {
            return Ok(());
        };
        let table = format!("warehouse-test-{:08x}", rand::random::<u32>());
        let store = DynamoLeaseStore::new(&config, table.as_str());
        store.create_table().await?;
        // Orders of this run carry a SKU of their own: other runs may share the stream.
        let sku = format!("test-{:08x}", rand::random::<u32>());
        let base = u64::from(rand::random::<u32>()) * 100;

        // The first instance lists first and takes every shard; the second stands by.
        let first = TestApp::start_live(service(&config, &table)).await?;
        let held = owners(&store).await;
        assert!(
            held.len() >= 2,
            "the first instance holds no shards: {held:?}"
        );
        let first_owner = held[0].clone().expect("an owner");
        assert!(
            held.iter()
                .all(|owner| owner.as_deref() == Some(&first_owner))
        );
        let second = TestApp::start_live(service(&config, &table)).await?;
        assert_eq!(
            owners(&store).await,
            held,
            "the second instance took nothing"
        );

        let producer = KinesisBroker::from_config(config.clone()).connect().await?;
        let publisher = producer.publisher().await?;
        let before: Vec<u64> = (base..base + 10).collect();
        for &id in &before {
            let order = Order {
                id,
                sku: sku.clone(),
            };
            publisher.message(&order).publish().await?;
        }
        assert!(
            wait_for(Duration::from_secs(30), || picked(&first, &sku).len()
                >= before.len())
            .await,
            "the first instance picked {:?} of {before:?}",
            picked(&first, &sku)
        );
        let first_picked = picked(&first, &sku);

        // A release: final checkpoints, then the leases are released.
        first.shutdown().await?;
        assert!(
            owners(&store).await.iter().all(Option::is_none),
            "the stopped instance released its leases"
        );

        let after: Vec<u64> = (base + 10..base + 20).collect();
        for &id in &after {
            let order = Order {
                id,
                sku: sku.clone(),
            };
            publisher.message(&order).publish().await?;
        }
        // The second instance lists every 10 s: it takes the shards at its next listing.
        assert!(
            wait_for(Duration::from_secs(40), || picked(&second, &sku).len()
                >= after.len())
            .await,
            "the second instance picked {:?} of {after:?}",
            picked(&second, &sku)
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
        let second_picked = picked(&second, &sku);
        let now_held = owners(&store).await;
        second.shutdown().await?;
        producer.shutdown().await?;

        let mut first_sorted = first_picked.clone();
        first_sorted.sort_unstable();
        assert_eq!(
            first_sorted, before,
            "the first instance picked each early order once"
        );
        let mut second_sorted = second_picked.clone();
        second_sorted.sort_unstable();
        assert_eq!(
            second_sorted, after,
            "the second instance picked every later order once, and none the first one acked"
        );
        let second_owner: HashSet<_> = now_held.iter().collect();
        assert_eq!(
            second_owner.len(),
            1,
            "one instance holds every shard: {now_held:?}"
        );
        assert!(
            now_held
                .iter()
                .all(|owner| owner.is_some() && owner.as_deref() != Some(&first_owner)),
            "the second instance holds the shards the first released: {now_held:?}"
        );
        Ok(())
    }
}

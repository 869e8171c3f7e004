//! The warehouse service of the Getting started page: `warehouse` picks the orders of the stream
//! `orders`, sharing its shards with every other instance on the lease table `warehouse-leases`;
//! `warehouse produce N` publishes N orders and exits.

use std::error::Error;

use aws_config::BehaviorVersion;
use ruststream::{Broker, ConnectedBroker};
use ruststream_kinesis::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Debug, PartialEq, Deserialize, Serialize, Outgoing)]
#[outgoing(name = "orders")]
struct Order {
    id: u64,
    sku: String,
}

/// Picks each order. Every instance runs this handler; each shard is read by the one instance
/// that holds its lease.
#[subscriber(
    KinesisStream::new("orders")
        .create_if_missing(2)
        .initial_position(KinesisPosition::TrimHorizon)
)]
async fn pick(order: &Order, Ctx(shard): Ctx<ShardId>) -> HandlerOutcome {
    tracing::info!(order.id, order.sku, %shard, "order picked");
    HandlerOutcome::ack()
}

/// The lease table and the broker share one AWS configuration. Each instance is named after its
/// pod when it has one (a restart then takes its leases back at once), and keeps its unique
/// default name otherwise; the instances balance the shards between them.
fn service(config: &SdkConfig) -> RustStream {
    let leases = Arc::new(DynamoLeaseStore::new(config, "warehouse-leases"));
    let mut broker = KinesisBroker::from_config(config.clone())
        .lease_store(leases)
        .balance_shards(true);
    if let Ok(pod) = std::env::var("POD_NAME") {
        broker = broker.owner_id(pod);
    }
    RustStream::new(AppInfo::new("warehouse", "0.1.0")).with_broker(broker, |b| {
        b.include(pick);
    })
}

/// Publishes `count` orders, each under its SKU as the partition key.
async fn produce(config: SdkConfig, count: u64) -> Result<(), Box<dyn Error>> {
    let connected = KinesisBroker::from_config(config).connect().await?;
    let publisher = connected.publisher().await?;
    for id in 1..=count {
        let sku = ["bolts", "screws", "hinges", "nails"][(id % 4) as usize];
        let order = Order {
            id,
            sku: sku.to_owned(),
        };
        publisher.message(&order).partition_key(sku).publish().await?;
    }
    println!("published {count} orders");
    connected.shutdown().await?;
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    tracing_subscriber::fmt().init();
    // Region, credentials and endpoint come from the environment.
    let config = aws_config::defaults(BehaviorVersion::latest()).load().await;
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("produce") => {
            let count = args.get(1).map_or(Ok(20), |n| n.parse())?;
            produce(config, count).await
        }
        // Serves until SIGINT or SIGTERM, then stops gracefully: each reader writes its final
        // checkpoint and releases its lease.
        _ => Ok(service(&config).run().await?),
    }
}

//! The main job: a small service on the local stack that publishes orders and consumes them,
//! printing what it handles.
//!
//! ```text
//! scripts/demo.sh            # starts the stack, runs this, stops the stack
//! ```

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use ruststream::{Broker, OutgoingMessage, Publisher};
use ruststream_kinesis::prelude::*;
use ruststream_kinesis::{KinesisOptions, ShardId};

const STREAM: &str = "demo-orders";
const ORDERS: usize = 20;

static HANDLED: AtomicUsize = AtomicUsize::new(0);

// ANCHOR: service
#[derive(Debug, serde::Deserialize, serde::Serialize)]
struct Order {
    id: u64,
    sku: String,
}

/// Prints each order and the shard it came from.
#[subscriber(KinesisStream::new(STREAM).create_if_missing(2).poll_interval(Duration::from_millis(200)))]
async fn pick(order: &Order, shard: Ctx<ShardId>) -> HandlerOutcome {
    println!(
        "handled order {:>3} sku {:<8} from {}",
        order.id, order.sku, shard.0
    );
    HANDLED.fetch_add(1, Ordering::SeqCst);
    HandlerOutcome::ack()
}

fn local_broker(endpoint: &str) -> KinesisBroker {
    KinesisBroker::new()
        .endpoint(endpoint)
        .region("us-east-1")
        .test_credentials()
}
// ANCHOR_END: service

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let endpoint = std::env::var("KINESIS_TEST_ENDPOINT")
        .unwrap_or_else(|_| "http://127.0.0.1:4566".to_owned());
    // ANCHOR: app
    let app =
        RustStream::new(AppInfo::new("demo", "0.1.0")).with_broker(local_broker(&endpoint), |b| {
            b.include(pick);
        });
    // ANCHOR_END: app
    let producer = async {
        let connected = local_broker(&endpoint).connect().await.expect("connect");
        let publisher = connected.publisher().await.expect("publisher");
        for id in 0..ORDERS as u64 {
            let order = Order {
                id,
                sku: format!("sku-{}", id % 4),
            };
            let body = serde_json::to_vec(&order).expect("json");
            let key = KinesisOptions::default().with_partition_key(order.sku.clone());
            publisher
                .publish(OutgoingMessage::new(STREAM, body.as_slice()), Some(&key))
                .await
                .expect("publish");
        }
        println!("published {ORDERS} orders to {STREAM}");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        while HANDLED.load(Ordering::SeqCst) < ORDERS && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        println!(
            "handled {} of {ORDERS} orders",
            HANDLED.load(Ordering::SeqCst)
        );
    };
    app.run_until(producer).await?;
    if HANDLED.load(Ordering::SeqCst) < ORDERS {
        return Err("not every order was handled".into());
    }
    Ok(())
}

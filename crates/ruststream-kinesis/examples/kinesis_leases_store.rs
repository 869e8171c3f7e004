//! The inventory service of the "LeaseStore" page: its broker takes the lease store from the code
//! that starts it, so two instances given one store split the shards of `inventory`.
//!
//! `main` runs two instances on one `MemoryLeaseStore` against the local stack, publishes a dozen
//! stock changes, prints which instance handled which, and fails when a change was handled by
//! both instances or by none.
//!
//! ```text
//! scripts/local-stack.sh start
//! cargo run -p ruststream-kinesis --example kinesis_leases_store --features testing
//! KINESIS_TEST_ENDPOINT=http://127.0.0.1:4566 cargo test -p ruststream-kinesis \
//!     --example kinesis_leases_store --features testing
//! ```

use std::error::Error;

use ruststream_kinesis::prelude::*;
use serde::{Deserialize, Serialize};

#[path = "support/inventory.rs"]
mod support;

// ANCHOR: change
/// One change of stock for one SKU.
#[derive(Debug, PartialEq, Deserialize, Serialize)]
struct StockChange {
    sku: String,
    delta: i64,
}
// ANCHOR_END: change

// ANCHOR: service
/// Applies each stock change. Every instance of the service runs this handler; the lease store
/// decides which instance reads which shard.
#[subscriber(KinesisStream::new("inventory"))]
async fn apply(change: &StockChange) -> HandlerOutcome {
    tracing::info!(change.sku, change.delta, "stock changed");
    HandlerOutcome::ack()
}

/// The service, given its broker and the store its instances share.
fn service(broker: KinesisBroker, leases: Arc<dyn LeaseStore>) -> RustStream {
    RustStream::new(AppInfo::new("inventory", "0.1.0")).with_broker(
        broker.lease_store(leases),
        |b| {
            b.include(apply);
        },
    )
}
// ANCHOR_END: service

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    support::two_instances(&support::endpoint(), service).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn two_instances_on_one_store_split_the_shards() {
        let Some(endpoint) = support::live_endpoint() else {
            return;
        };
        support::two_instances(&endpoint, service)
            .await
            .expect("two instances split the shards of inventory");
    }
}

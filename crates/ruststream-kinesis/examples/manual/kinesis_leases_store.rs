//! The inventory service of `examples/kinesis_leases_store.rs` written without the `macros`
//! feature: the handler is a type implementing `Handle<StockChange>`, and
//! `subscriber(source, handler).build()` is what `include` mounts. Everything else, the store the
//! broker takes from the code that starts it and the two instances splitting the shards, is the
//! same.
//!
//! ```text
//! scripts/local-stack.sh start
//! cargo run -p ruststream-kinesis --example manual_kinesis_leases_store \
//!     --no-default-features --features json,testing
//! ```

use std::error::Error;
use std::future::{Future, ready};

use ruststream_kinesis::prelude::*;
use serde::{Deserialize, Serialize};

#[path = "../support/inventory.rs"]
mod support;

// The framework's `asyncapi` feature (this crate's, forwarded) describes each message's schema:
// a handler mounted by hand needs it on its message type.
#[cfg_attr(
    feature = "asyncapi",
    derive(ruststream::schemars::JsonSchema),
    schemars(crate = "ruststream::schemars")
)]
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
struct Apply;

impl Handle<StockChange> for Apply {
    fn handle(
        &self,
        change: &StockChange,
        _outs: &(),
        _ctx: &mut Context<'_>,
    ) -> impl Future<Output = Result<(), HandlerOutcome>> {
        tracing::info!(change.sku, change.delta, "stock changed");
        ready(Ok(()))
    }
}

/// The service, given its broker and the store its instances share.
fn service(broker: KinesisBroker, leases: Arc<dyn LeaseStore>) -> RustStream {
    RustStream::new(AppInfo::new("inventory", "0.1.0")).with_broker(
        broker.lease_store(leases),
        |b| {
            b.include(subscriber(KinesisStream::new("inventory"), Apply).build());
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

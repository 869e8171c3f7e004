//! The Amazon Kinesis Data Streams broker for [RustStream](https://docs.rs/ruststream).
//!
//! A service consumes a stream with `#[subscriber(KinesisStream::new("orders"))]` and publishes
//! with `#[derive(Outgoing)]`. Kinesis records nobody's progress, so this crate keeps it in a
//! **lease table**: one row per shard of each stream, keyed `stream:shard`, with the owner, the
//! lease expiry, a counter and the checkpoint ([`LeaseStore`]). A service depends on `ruststream`
//! and `serde` too: the macros expand to `::ruststream` paths.
//!
//! - **Leases.** A subscription lists the shards when it opens and every 10 s, takes every shard
//!   that is free or whose lease expired, and reads it. A lease lasts 10 s and is renewed every
//!   3 s; a reader whose renewal is refused stops at once without checkpointing. A stopping reader
//!   writes its final checkpoint and releases its lease, and the other instances look at the table
//!   every second between listings, so a graceful handover takes about a second. Up to 2 s of
//!   clock skew between instances is tolerated ([`SKEW_TOLERANCE`] plus a holder margin).
//!   [`MemoryLeaseStore`] (the default) serves one instance; `DynamoLeaseStore` (feature
//!   `dynamodb-lease`) lets several instances share the shards through one DynamoDB table.
//! - **Checkpoints.** An acknowledged record moves its shard's checkpoint along the contiguous
//!   prefix of settled records, so an out-of-order ack never skips an unsettled one. A shard read
//!   to its end is checkpointed [`SHARD_END`], and its children start only after every parent is
//!   there, so per-key order survives splits and merges. Delivery is at least once. A retried
//!   record (`nack(true)`, `nack_after(..)`, or one dropped unsettled) comes back on this instance,
//!   alone, unsettled meanwhile; `redelivery_count()` counts its deliveries, so `max_attempts(..)`
//!   and dead letters apply ([`KinesisMessage`]).
//! - **Enhanced fan-out.** `KinesisStream::enhanced_fan_out(consumer)` reads each shard through a
//!   registered consumer with `SubscribeToShard` (its own 2 MB/s per shard, records pushed as
//!   they arrive) instead of polling; leases, checkpoints and handovers work as with polling.
//! - **Describing.** The broker describes its server (`DescribeServer`, for
//!   `with_broker_labeled`); with the `asyncapi` feature streams and publish policies add
//!   `x-kinesis` bindings to the service's AsyncAPI document. No credential is ever part of it.
//! - **Testing.** With the `testing` feature, `ruststream::testing::TestApp::start(app)` runs the
//!   service's own app, its shards read by the same readers as live, on an in-process Kinesis,
//!   with no configured lease store consulted; the crate's live
//!   tests run against a local Kinesis + DynamoDB stack (`scripts/local-stack.sh`).
//!
//! The user guide (leases, the lease store, several instances, checkpoints, testing, benchmarks;
//! in English, and the leases pages in Russian) is built from `docs/` by `scripts/docs.sh`.
//!
//! ```
//! # #[cfg(feature = "testing")]
//! # mod demo {
//! use ruststream_kinesis::prelude::*;
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Debug, PartialEq, Deserialize, Serialize, Outgoing)]
//! #[outgoing(name = "orders")]
//! struct Order {
//!     id: u64,
//! }
//!
//! #[subscriber(KinesisStream::new("orders").create_if_missing(2))]
//! async fn pick(order: &Order) -> HandlerOutcome {
//!     tracing::info!(order.id, "order picked");
//!     HandlerOutcome::ack()
//! }
//!
//! fn app() -> RustStream {
//!     RustStream::new(AppInfo::new("warehouse", "0.1.0")).with_broker(KinesisBroker::new(), |b| {
//!         b.include(pick);
//!     })
//! }
//!
//! // In process: no AWS account, and no lease store of yours is called.
//! pub async fn test() -> Result<(), Box<dyn std::error::Error>> {
//!     let tb = ruststream::testing::TestApp::start(app()).await?;
//!     let orders = tb.broker::<KinesisBroker>();
//!     orders.message(&Order { id: 1 }).publish().await?;
//!     orders
//!         .subscriber("orders")
//!         .assert_called_once()
//!         .with(&Order { id: 1 })
//!         .settled(HandlerOutcome::ack());
//!     Ok(())
//! }
//! # }
//! # #[cfg(feature = "testing")]
//! # tokio::runtime::Runtime::new().unwrap().block_on(demo::test()).unwrap();
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod broker;
mod clock;
mod commit;
mod coordinator;
mod delivery;
mod describe;
#[cfg(test)]
mod docs_facts;
#[cfg(test)]
mod doubles;
mod error;
mod kinesis;
pub mod lease;
mod live;
mod local_stack;
mod publisher;
mod registry;
mod sdk;
mod settings;
mod shard;
mod shared_str;
#[cfg(test)]
mod simulation;
mod telemetry;
mod watermark;

pub use broker::{ConnectedKinesisBroker, KinesisBroker};
pub use delivery::context::{
    KinesisBatchContext, KinesisContext, PartitionKey, Position, SeekHandle, SequenceNumber,
    ShardId, StreamName,
};
pub use delivery::message::KinesisMessage;
pub use delivery::seeker::KinesisSeeker;
pub use delivery::subscriber::KinesisSubscriber;
#[cfg(feature = "dynamodb-lease")]
pub use delivery::writes::{DynamoWrites, StageError, StagedWrites};
pub use error::{ExactlyOnceRefusal, KinesisError};
#[cfg(feature = "dynamodb-lease")]
pub use lease::{CommitRefused, DynamoLeaseStore, Transactions};
pub use lease::{
    HANDOFF_REQUEST_LIFETIME, Handoff, LeaseError, LeaseFuture, LeaseKey, LeaseState, LeaseStore,
    MemoryLeaseStore, NOTICE_LAYOUT, NOTICE_LAYOUT_APART, Notice, SHARD_END, SHARD_SKIPPED,
    SKEW_TOLERANCE, epoch_millis,
};
#[cfg(all(feature = "testing", feature = "dynamodb-lease"))]
pub use lease::{
    HandledRecord, HandlingOutcome, InProcessCommit, InProcessCommits, InProcessHandling,
};
pub use local_stack::local_stack_config;
pub use publisher::{KinesisOptions, KinesisPublish, KinesisPublishSteps, KinesisPublisher};
pub use settings::position::KinesisPosition;
pub use settings::stream::{DEFAULT_MAX_UNSETTLED, DEFAULT_STALL_AFTER, KinesisStream};
pub use settings::timings::LeaseTimings;
pub use settings::validate::{
    MAX_GET_RECORDS_LIMIT, MAX_PUT_RECORDS, MAX_PUT_RECORDS_BYTES, MAX_RECORD_BYTES,
};
pub use shared_str::SharedStr;
#[cfg(feature = "metrics")]
pub use telemetry::KinesisMetrics;

/// The Rust blocks of the README and of the user guide's pages, compiled (and run, unless
/// `no_run`) as doctests with every feature on (`cargo test --all-features --doc`, in the test
/// command), so that no snippet drifts from the API; `docs_facts` checks that every page with one
/// is here. (The blocks that include an example's lines are the example's, which `cargo test`
/// compiles.)
#[cfg(all(
    doctest,
    feature = "dynamodb-lease",
    feature = "metrics",
    feature = "asyncapi",
    feature = "testing"
))]
mod guide {
    #[doc = include_str!("../../../README.md")]
    struct Readme;
    #[doc = include_str!("../../../docs/src/getting-started.md")]
    struct GettingStarted;
    #[doc = include_str!("../../../docs/src/checkpoints.md")]
    struct Checkpoints;
    #[doc = include_str!("../../../docs/src/exactly-once.md")]
    struct ExactlyOnce;
    #[doc = include_str!("../../../docs/src/ru/exactly-once.md")]
    struct ExactlyOnceRu;
    #[doc = include_str!("../../../docs/src/describing.md")]
    struct Describing;
    #[doc = include_str!("../../../docs/src/enhanced-fan-out.md")]
    struct EnhancedFanOut;
    #[doc = include_str!("../../../docs/src/fault-injector.md")]
    struct FaultInjector;
    #[doc = include_str!("../../../docs/src/operating.md")]
    struct Operating;
    #[doc = include_str!("../../../docs/src/several-instances.md")]
    struct SeveralInstances;
    #[doc = include_str!("../../../docs/src/ru/several-instances.md")]
    struct SeveralInstancesRu;
}

/// What a service file imports: the framework's prelude, this crate's service-facing types, and
/// the publish policy under the uniform name `Publish`.
pub mod prelude {
    pub use ruststream::prelude::*;

    #[cfg(feature = "dynamodb-lease")]
    pub use crate::DynamoLeaseStore;
    pub use crate::KinesisPublish as Publish;
    pub use crate::{
        KinesisBroker, KinesisContext, KinesisError, KinesisOptions, KinesisPosition,
        KinesisPublishSteps, KinesisStream, LeaseKey, LeaseState, LeaseStore, LeaseTimings,
        MemoryLeaseStore, PartitionKey, SHARD_END, SequenceNumber, ShardId, StreamName,
    };
    pub use aws_config::SdkConfig;
    pub use std::sync::Arc;
}

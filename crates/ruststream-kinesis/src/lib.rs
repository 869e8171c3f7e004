//! The Amazon Kinesis Data Streams broker for [RustStream](https://docs.rs/ruststream).
//!
//! A service consumes a stream with `#[subscriber(KinesisStream::new("orders"))]` and publishes
//! with `#[derive(Outgoing)]`. Kinesis records nobody's progress, so this crate keeps it in a
//! **lease table**: one row per shard of each stream, keyed `stream:shard`, with the owner, the
//! lease expiry, a counter and the checkpoint ([`LeaseStore`]).
//!
//! - **Leases.** A subscription lists the shards when it opens and every 10 s, takes every shard
//!   that is free or whose lease expired, and reads it. A lease lasts 10 s and is renewed every
//!   3 s; a reader whose renewal is refused stops at once without checkpointing. A stopping reader
//!   writes its final checkpoint and releases its lease, so the next owner starts at once.
//!   [`MemoryLeaseStore`] (the default) serves one instance; `DynamoLeaseStore` (feature
//!   `dynamodb-lease`) lets several instances share the shards through one DynamoDB table.
//! - **Checkpoints.** An acknowledged record moves its shard's checkpoint along the contiguous
//!   prefix of settled records, so an out-of-order ack never skips an unsettled one. A shard read
//!   to its end is checkpointed [`SHARD_END`], and its children start only after every parent is
//!   there, so per-key order survives splits and merges. Delivery is at least once.
//! - **Testing.** With the `testing` feature, `ruststream::testing::TestApp::start(app)` runs the
//!   service's own app on an in-process Kinesis that consults no lease store; the crate's live
//!   tests run against a local Kinesis + DynamoDB stack (`scripts/local-stack.sh`).
//!
//! ```no_run
//! use ruststream_kinesis::prelude::*;
//!
//! #[derive(Debug, serde::Deserialize)]
//! struct Order { id: u64 }
//!
//! #[subscriber(KinesisStream::new("orders").create_if_missing(2))]
//! async fn pick(order: &Order) -> HandlerOutcome {
//!     tracing::info!(order.id, "order picked");
//!     HandlerOutcome::ack()
//! }
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! RustStream::new(AppInfo::new("warehouse", "0.1.0"))
//!     .with_broker(KinesisBroker::new(), |b| { b.include(pick); })
//!     .run()
//!     .await?;
//! # Ok(())
//! # }
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod api;
mod broker;
mod context;
mod coordinator;
mod envelope;
mod error;
#[cfg(feature = "testing")]
mod in_process;
pub mod lease;
mod message;
mod position;
mod publisher;
mod reader;
mod shard;
mod stream;
mod subscriber;
mod timings;
mod validate;
mod watermark;

pub use broker::{ConnectedKinesisBroker, KinesisBroker};
pub use context::{KinesisContext, SequenceNumber, ShardId, StreamName};
pub use error::KinesisError;
#[cfg(feature = "dynamodb-lease")]
pub use lease::DynamoLeaseStore;
pub use lease::{
    LeaseError, LeaseFuture, LeaseKey, LeaseState, LeaseStore, MemoryLeaseStore, SHARD_END,
    SKEW_TOLERANCE, epoch_millis,
};
pub use message::KinesisMessage;
pub use position::KinesisPosition;
pub use publisher::{KinesisOptions, KinesisPublish, KinesisPublishSteps, KinesisPublisher};
pub use stream::KinesisStream;
pub use subscriber::{KinesisSeeker, KinesisSubscriber};
pub use timings::LeaseTimings;
pub use validate::{
    MAX_GET_RECORDS_LIMIT, MAX_PUT_RECORDS, MAX_PUT_RECORDS_BYTES, MAX_RECORD_BYTES,
};

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
        MemoryLeaseStore, SHARD_END, SequenceNumber, ShardId, StreamName,
    };
    pub use aws_config::SdkConfig;
    pub use std::sync::Arc;
}

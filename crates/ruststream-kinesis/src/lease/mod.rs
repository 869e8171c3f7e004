//! Who reads which shard, and how far they got: the lease table.
//!
//! Kinesis records nobody's progress, so a subscription keeps it in a [`LeaseStore`]: one row
//! per shard of each stream, keyed [`LeaseKey`] (`stream:shard`), holding the owner, the lease
//! expiry, a counter bumped by every write, and the checkpoint. [`MemoryLeaseStore`] is the
//! default and serves one instance; `DynamoLeaseStore` (feature `dynamodb-lease`) lets several
//! instances share the shards of a stream.

mod clock;
#[cfg(feature = "dynamodb-lease")]
mod commit_tables;
mod error;
#[cfg(all(feature = "testing", feature = "dynamodb-lease"))]
mod journal;
mod key;
mod memory;
mod notice;
#[cfg(feature = "dynamodb-lease")]
mod outcome;
pub(crate) mod rules;
mod state;
mod store;
#[cfg(any(test, feature = "store-suite"))]
pub mod suite;
mod timed;
#[cfg(feature = "dynamodb-lease")]
mod transactions;

#[cfg(feature = "dynamodb-lease")]
mod dynamo;

#[cfg(test)]
pub(crate) use clock::epoch_millis_of;
pub(crate) use clock::millis;
pub use clock::{SKEW_TOLERANCE, epoch_millis};
#[cfg(feature = "dynamodb-lease")]
pub(crate) use commit_tables::{CommitTables, arn_part, table_of};
#[cfg(feature = "dynamodb-lease")]
pub use dynamo::DynamoLeaseStore;
pub use error::LeaseError;
#[cfg(all(feature = "testing", feature = "dynamodb-lease"))]
pub use journal::{HandledRecord, InProcessCommit, InProcessCommits, InProcessHandling};
#[cfg(all(feature = "testing", feature = "dynamodb-lease"))]
pub(crate) use journal::{HandlingEntry, HandlingSeed};
pub use key::LeaseKey;
pub use memory::MemoryLeaseStore;
#[cfg(any(test, feature = "dynamodb-lease"))]
pub(crate) use notice::{BEAT_GROUPS, NOTICE_SUFFIX, beat_group, beats_key, notice_key, runs_key};
pub use notice::{NOTICE_LAYOUT, NOTICE_LAYOUT_APART, Notice};
#[cfg(feature = "dynamodb-lease")]
pub use outcome::{CommitRefused, HandlingOutcome};
pub(crate) use state::KEPT_BY_BEAT;
pub(crate) use state::request_stands;
pub use state::{HANDOFF_REQUEST_LIFETIME, Handoff, LeaseState, SHARD_END, SHARD_SKIPPED};
pub(crate) use state::{split_within, within_checkpoint};
pub use store::{LeaseFuture, LeaseStore};
pub(crate) use timed::Timed;
#[cfg(feature = "dynamodb-lease")]
pub use transactions::Transactions;
#[cfg(feature = "dynamodb-lease")]
pub(crate) use transactions::{CommitAnswer, CommitRequest, CommitRow, UserRefusal};

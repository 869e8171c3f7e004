//! What a lease store call can fail with, and which failures mean another owner holds the row.

use thiserror::Error;

use super::LeaseKey;

/// Why a [`LeaseStore`](crate::LeaseStore) call failed.
///
/// [`Held`](Self::Held), [`Lost`](Self::Lost) and [`Deleted`](Self::Deleted) are refusals by the
/// protocol: the shard belongs to another owner, or its row was deleted
/// ([`is_fenced`](Self::is_fenced)). The others are failures of the store
/// itself, which a retry may cure. A subscription reports the failures as
/// [`KinesisError::Lease`](crate::KinesisError::Lease), naming the stream and the shard; a
/// refusal mostly means another instance was faster or took the shard over, and the subscription
/// leaves the shard to it.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use ruststream_kinesis::{LeaseError, LeaseKey, LeaseStore, MemoryLeaseStore};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), LeaseError> {
/// let store = MemoryLeaseStore::new();
/// let key = LeaseKey::new("orders", "shardId-000000000000");
/// store.acquire(&key, "pod-a", Duration::from_secs(10)).await?;
///
/// // pod-b cannot take the live lease, and the answer names its holder.
/// let taken = store.acquire(&key, "pod-b", Duration::from_secs(10)).await;
/// assert!(matches!(&taken, Err(LeaseError::Held { owner, .. }) if owner == "pod-a"));
///
/// // Nor can it write a checkpoint for the shard: the write is fenced.
/// let written = store.checkpoint(&key, "pod-b", "4959").await.unwrap_err();
/// assert!(matches!(&written, LeaseError::Lost { owner, .. } if owner == "pod-b"));
/// assert!(written.is_fenced());
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum LeaseError {
    /// Another owner holds the row (a take found it held and unexpired).
    #[error("lease {key} is held by {owner:?} for another {expires_in_ms} ms")]
    Held {
        /// The row.
        key: LeaseKey,
        /// Who holds it.
        owner: String,
        /// How long the lease still runs by this instance's clock.
        expires_in_ms: u64,
    },
    /// This owner no longer holds the row: a renewal, checkpoint or release was refused because
    /// another owner took it (or it was released). The reader stops without checkpointing.
    #[error("lease {key} is no longer held by {owner:?}; another instance took the shard")]
    Lost {
        /// The row.
        key: LeaseKey,
        /// The owner whose write was refused.
        owner: String,
    },
    /// A take found no row where the store had seen one: a round deleted it since (its shard was
    /// finished, or left the stream), and the take creates none. Nothing is taken; the next
    /// round reads the rows again.
    #[error("lease {key} was deleted since it was read; nothing was taken")]
    Deleted {
        /// The row.
        key: LeaseKey,
    },
    /// The lease table does not exist.
    #[error("lease table {table:?} does not exist; create it with: {create_command}")]
    TableMissing {
        /// The table name.
        table: String,
        /// The command that creates it.
        create_command: String,
    },
    /// The table exists but cannot be a lease table: it is not keyed by one string attribute,
    /// `lease_key`, and nothing else (the Java KCL's table, keyed `leaseKey`, is one such).
    /// Nothing was read from it or written to it.
    #[error(
        "lease table {table:?} cannot be this crate's lease table: {problem}. A lease table is \
         keyed by one string attribute, lease_key, and nothing else; a table of the Java KCL \
         (keyed leaseKey) cannot be shared with it. Point the store at a table of its own, \
         created with: {create_command}"
    )]
    TableMismatch {
        /// The table name.
        table: String,
        /// What is wrong with it: how it is keyed, where DynamoDB said so.
        problem: String,
        /// The command that creates a right one.
        create_command: String,
    },
    /// A row written by an earlier version, keyed by the shard id alone, holds a checkpoint that
    /// this store cannot attribute to a stream.
    #[error(
        "lease table {table:?} has a row keyed by the bare shard id {shard:?} with checkpoint \
         {checkpoint:?}, written by an earlier version; it may belong to stream {stream:?} or to \
         another one. If it belongs to {stream:?}, set `DynamoLeaseStore::legacy_stream({stream:?})`; \
         otherwise delete the row. The shard stays stopped so it neither starts from another \
         stream's progress nor from the tip"
    )]
    LegacyRow {
        /// The table name.
        table: String,
        /// The stream whose shard found the bare row.
        stream: String,
        /// The shard id.
        shard: String,
        /// The checkpoint the bare row holds.
        checkpoint: String,
    },
    /// The row belongs to another application: two applications were pointed at one lease
    /// table, and each would read part of the stream. The take is refused, so the application
    /// that took the stream's shards first keeps them all, and this one reads none of them and
    /// says so.
    #[error(
        "lease {key} in table {table:?} belongs to application {theirs:?}, not to {}; two \
         applications that read one stream each need a lease table of their own (or, if they are \
         one application, the same `DynamoLeaseStore::application` name; renaming one: first \
         REMOVE the `application` attribute of its rows and of its streams' notice rows, keyed \
         `<stream>#notice`, as the several-instances guide shows)",
        ours_name(.ours)
    )]
    OtherApplication {
        /// The table name.
        table: String,
        /// The row.
        key: LeaseKey,
        /// This store's application name (`None`: it names none).
        ours: Option<String>,
        /// The application named in the row.
        theirs: String,
    },
    /// The store refused the call for want of capacity (DynamoDB's
    /// `ProvisionedThroughputExceededException`, `ThrottlingException` or
    /// `RequestLimitExceeded`, after the SDK's own retries): nothing was written, and the caller
    /// tries again after its backoff. Never a lost lease; a lease whose renewals stay throttled
    /// runs out by its holder's clock, as with any failure.
    #[error(
        "lease store call {operation} for {key} was throttled ({code}); it is tried again. The \
         lease table takes fewer writes a second than the fleet sends: an on-demand table \
         starts at about 4,000 and grows as it is used, a provisioned one needs more write \
         capacity"
    )]
    Throttled {
        /// The row.
        key: LeaseKey,
        /// The call, as for [`LeaseError::Store`].
        operation: &'static str,
        /// DynamoDB's code.
        code: String,
    },
    /// The store could not be reached or answered an error.
    #[error("lease store call {operation} for {key} failed: {message}")]
    Store {
        /// The row.
        key: LeaseKey,
        /// The call: `acquire`, `renew`, `checkpoint`, `read` or `release`, or the table-wide
        /// `rows` and `create_table` of a store that has them. `DynamoLeaseStore` names a
        /// checkpoint that also renews the lease `checkpoint`, and the `list` of the handover
        /// poll `rows`.
        operation: &'static str,
        /// What the store said.
        message: String,
    },
}

/// How [`LeaseError::OtherApplication`] names the application of the store that was refused.
fn ours_name(ours: &Option<String>) -> String {
    match ours {
        Some(name) => format!("this application ({name:?})"),
        None => "this store, which names no application".to_owned(),
    }
}

impl LeaseError {
    /// Whether this error means the lease belongs to someone else (a fenced write), as opposed
    /// to a failure of the store itself that a retry may cure.
    #[must_use]
    pub fn is_fenced(&self) -> bool {
        matches!(
            self,
            Self::Held { .. } | Self::Lost { .. } | Self::Deleted { .. }
        )
    }

    /// Whether the store refused the call for want of capacity ([`LeaseError::Throttled`]):
    /// tried again, and counted as `throttled`.
    #[must_use]
    pub fn is_throttled(&self) -> bool {
        matches!(self, Self::Throttled { .. })
    }
}

//! Every error the broker reports, each naming the stream, shard, table, key or consumer it is
//! about and what fixes it.

use thiserror::Error;

use crate::LeaseError;

/// Everything the Kinesis broker reports: every variant names the stream (and the shard, where
/// there is one) and, where there is one, the fix.
///
/// A failure of the lease store comes as [`Lease`](Self::Lease), naming the stream and the shard;
/// its `source` tells a fenced write ([`LeaseError::is_fenced`]: the shard belongs to another
/// instance now) from a failure of the store itself, which a retry may cure.
///
/// # Examples
///
/// ```
/// use ruststream_kinesis::{KinesisError, LeaseError, LeaseKey};
///
/// fn explain(err: &KinesisError) -> String {
///     match err {
///         KinesisError::Lease { stream, shard, source } if source.is_fenced() => {
///             format!("{shard} of {stream} belongs to another instance now")
///         }
///         KinesisError::Lease { stream, shard, source } => {
///             format!("the lease store failed for {shard} of {stream}: {source}")
///         }
///         other => other.to_string(),
///     }
/// }
///
/// let lost = KinesisError::Lease {
///     stream: "orders".to_owned(),
///     shard: "shardId-000000000000".to_owned(),
///     source: Box::new(LeaseError::Lost {
///         key: LeaseKey::new("orders", "shardId-000000000000"),
///         owner: "pod-a".to_owned(),
///     }),
/// };
/// assert_eq!(explain(&lost), "shardId-000000000000 of orders belongs to another instance now");
///
/// // A missing stream says how to create it, or to let the subscription do it.
/// let missing = KinesisError::StreamNotFound { stream: "orders".to_owned() };
/// let message = explain(&missing);
/// assert!(message.contains("aws kinesis create-stream --stream-name orders"));
/// assert!(message.contains(r#"KinesisStream::new("orders").create_if_missing(shards)"#));
/// ```
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum KinesisError {
    /// The broker's configuration cannot work (an endpoint that is not a URL, no region).
    #[error("kinesis broker configuration: {message}")]
    Config {
        /// What is wrong and how to fix it.
        message: String,
    },
    /// A stream name Kinesis would reject.
    #[error(
        "stream name {name:?} is invalid: {reason}; a stream name has 1 to 128 characters from \
         a-z, A-Z, 0-9, '_', '-' and '.'"
    )]
    InvalidStreamName {
        /// The name as given.
        name: String,
        /// Which rule it breaks.
        reason: &'static str,
    },
    /// A partition key Kinesis would reject.
    #[error(
        "partition key for stream {stream:?} is invalid: {reason}; a partition key has 1 to 256 \
         Unicode characters"
    )]
    InvalidPartitionKey {
        /// The stream published to.
        stream: String,
        /// Which rule it breaks.
        reason: String,
    },
    /// A record larger than its stream accepts.
    #[error(
        "record for stream {stream:?} is {size} bytes (data, headers and partition key), over \
         the stream's limit of {limit} bytes (its MaxRecordSizeInKiB, 1 MiB unless raised with \
         `aws kinesis update-max-record-size`); split the message or store the body elsewhere \
         and publish a reference"
    )]
    RecordTooLarge {
        /// The stream published to.
        stream: String,
        /// The record's size on the wire: the payload, the header envelope when there are
        /// headers, and the partition key.
        size: usize,
        /// The stream's limit.
        limit: usize,
    },
    /// A shard this instance held left the stream: trimmed after a resharding, or the stream
    /// was deleted. Its lease is released and it is not read again.
    #[error(
        "shard {shard} of stream {stream:?} no longer exists (trimmed after a resharding, or the \
         stream was deleted); its lease is released and it is not read again"
    )]
    ShardNotFound {
        /// The stream.
        stream: String,
        /// The shard.
        shard: String,
    },
    /// A delivery was settled after this instance stopped reading its shard (the lease was
    /// lost, or the shard was handed back): the settlement is not checkpointed, and the shard's
    /// next owner delivers the record again.
    #[error(
        "a delivery of shard {shard} of stream {stream:?} was settled after this instance \
         stopped reading the shard (its lease was lost, or it was handed back); the settlement \
         is not checkpointed, and the shard's next owner delivers the record again"
    )]
    SettledAfterHandover {
        /// The stream.
        stream: String,
        /// The shard.
        shard: String,
    },
    /// The stream does not exist.
    #[error(
        "stream {stream:?} does not exist: create it (aws kinesis create-stream --stream-name \
         {stream} --shard-count 1), or subscribe with \
         `KinesisStream::new({stream:?}).create_if_missing(shards)`"
    )]
    StreamNotFound {
        /// The stream.
        stream: String,
    },
    /// A second subscription to a stream on one broker.
    #[error(
        "stream {stream:?} already has a subscription on this broker: one broker reads a stream \
         through one subscription, because both would hold the same shard leases; mount one \
         handler, or a second broker with a lease store of its own"
    )]
    DuplicateSubscription {
        /// The stream.
        stream: String,
    },
    /// The broker was shut down.
    #[error("the kinesis broker is shut down; {what} is no longer possible")]
    ShutDown {
        /// What was attempted.
        what: &'static str,
    },
    /// A lease store call for one shard failed. The subscription goes on: a failed take is tried
    /// again at a later listing round, and a failed renewal or checkpoint again while the lease is
    /// still valid by this instance's clock. A `SHARD_END` that could not be written leaves the
    /// lease to lapse, and the next owner reads the shard's end again.
    #[error("lease of shard {shard} of stream {stream:?}: {source}")]
    Lease {
        /// The stream.
        stream: String,
        /// The shard.
        shard: String,
        /// What the store said.
        #[source]
        source: Box<LeaseError>,
    },
    /// The lease store cannot serve as the lease table at all, so the broker does not start
    /// (`connect` checks it before any subscription reads): a DynamoDB table that does not exist
    /// ([`LeaseError::TableMissing`]), one keyed otherwise than by `lease_key`
    /// ([`LeaseError::TableMismatch`]), or one DynamoDB refuses a read of otherwise (a table
    /// name it rejects). The source names the table and the fix.
    #[error("the lease store cannot be used, so the broker does not start: {source}")]
    LeaseStore {
        /// What the store said.
        #[source]
        source: Box<LeaseError>,
    },
    /// Another instance runs under this one's owner id, and started earlier: this instance
    /// paused reading every stream (its readers wrote their final checkpoints and released what
    /// they held) until the other is gone, so no record is handled twice; the other keeps its
    /// shards. Publishing goes on. Two instances that share a name take each other's shards back
    /// and forth; give each its own.
    #[error(
        "another instance runs under owner id {owner:?} on {table}, and started earlier (its run \
         {theirs}, this one {mine}): this instance paused reading until that one is gone, so \
         that no record is handled twice, and the other keeps its shards. Give each instance an \
         owner id of its own (KinesisBroker::owner_id, e.g. the pod's name), or leave it unset \
         for a unique one"
    )]
    OwnerIdInUse {
        /// The owner id both run under.
        owner: String,
        /// The lease table (`lease table "name"`), or `this lease store`.
        table: String,
        /// The earlier run, which keeps reading: `<started ms>-<nonce>`.
        theirs: String,
        /// This run, which stopped.
        mine: String,
    },
    /// A Kinesis call failed.
    #[error("kinesis {operation} on stream {stream:?} failed: {message}")]
    Api {
        /// The stream.
        stream: String,
        /// The API operation.
        operation: &'static str,
        /// What the service said.
        message: String,
    },
    /// Records Kinesis kept rejecting inside `PutRecords` answers, after retries.
    #[error(
        "kinesis rejected {failed} record(s) for stream {stream:?} after {attempts} attempts: \
         {code}: {message}"
    )]
    PutRejected {
        /// The stream.
        stream: String,
        /// How many records were not written.
        failed: usize,
        /// How many attempts were made.
        attempts: u32,
        /// The first error code Kinesis gave.
        code: String,
        /// Its message.
        message: String,
    },
    /// The enhanced fan-out consumer does not exist, and the subscription may not register it
    /// ([`KinesisStream::consumer_must_exist`](crate::KinesisStream::consumer_must_exist)).
    #[error(
        "enhanced fan-out consumer {consumer:?} of stream {stream:?} is not registered, and this \
         subscription may not register it (consumer_must_exist): register it (aws kinesis \
         register-stream-consumer --stream-arn <the ARN of {stream}> --consumer-name {consumer}), \
         or let the subscription do it by dropping .consumer_must_exist()"
    )]
    ConsumerNotFound {
        /// The stream.
        stream: String,
        /// The consumer's name.
        consumer: String,
    },
    /// The enhanced fan-out consumer did not become `ACTIVE` in time, or is being deleted.
    #[error(
        "enhanced fan-out consumer {consumer:?} of stream {stream:?} is {status}, not ACTIVE: a \
         consumer being deleted cannot be read (wait until it is gone and subscribe again, or use \
         another name), and one still CREATING after two minutes means the service is slow; see \
         aws kinesis describe-stream-consumer --stream-arn <the ARN of {stream}> --consumer-name \
         {consumer}"
    )]
    ConsumerNotActive {
        /// The stream.
        stream: String,
        /// The consumer's name.
        consumer: String,
        /// Its status as last described.
        status: String,
    },
    /// The stream has as many enhanced fan-out consumers as it may (20 on AWS).
    #[error(
        "stream {stream:?} has as many enhanced fan-out consumers as it may: registering \
         {consumer:?} was refused ({message}); deregister one no application reads with any \
         more (aws kinesis list-stream-consumers --stream-arn <the ARN of {stream}>), or read \
         this stream by polling (drop .enhanced_fan_out(..))"
    )]
    ConsumerLimit {
        /// The stream.
        stream: String,
        /// The consumer's name.
        consumer: String,
        /// What the service said.
        message: String,
    },
    /// A seek the subscription cannot perform.
    #[error("seek on stream {stream:?}: {reason}")]
    Seek {
        /// The stream.
        stream: String,
        /// Why.
        reason: String,
    },
    /// An exactly-once subscription ([`KinesisStream::exactly_once`](crate::KinesisStream))
    /// cannot hold its promise where it would run: the start fails.
    #[error("stream {stream:?}: exactly once cannot hold here: {refusal}")]
    ExactlyOnce {
        /// The stream.
        stream: String,
        /// Why, and the fix.
        refusal: ExactlyOnceRefusal,
    },
}

/// Why an exactly-once subscription cannot start ([`KinesisError::ExactlyOnce`]).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum ExactlyOnceRefusal {
    /// The lease store cannot commit a handler's DynamoDB writes with its rows (a
    /// `MemoryLeaseStore`, whose rows live in this process, or a store of your own).
    #[error(
        "the lease store ({store}) cannot commit DynamoDB writes with its lease rows; give the \
         broker a DynamoLeaseStore (KinesisBroker::new().lease_store(..)) in the account and \
         region of the handler's tables"
    )]
    StoreCannotCommit {
        /// The store, as it describes itself.
        store: String,
    },
    /// The lease outlasts the ten minutes DynamoDB keeps a transaction's request token, so a
    /// resent commit could no longer be recognised by it.
    #[error(
        "a lease of {lease:?} is longer than exactly once allows (9 minutes: DynamoDB keeps a \
         transaction's ClientRequestToken for 10); set a shorter LeaseTimings"
    )]
    LeaseTooLong {
        /// The lease.
        lease: std::time::Duration,
    },
    /// The lease table is in another region than the broker: a commit runs in the lease
    /// table's region, so a handler's tables named there would not be the ones the service
    /// reads and writes elsewhere.
    #[error(
        "the lease table {table:?} is in region {lease_region}, the broker in {region}: a commit \
         writes the handler's tables in the lease table's region; make the DynamoLeaseStore \
         from the broker's config (DynamoLeaseStore::new(&config, ..))"
    )]
    OtherRegion {
        /// The lease table.
        table: String,
        /// Its region.
        lease_region: String,
        /// The broker's.
        region: String,
    },
    /// The lease table is in another AWS account than the stream: a commit runs in the lease
    /// table's account, so a handler's tables named there would not be the service's.
    #[error(
        "the lease table {table:?} is in account {lease_account}, the stream {stream:?} in \
         {stream_account}: a commit writes the handler's tables in the lease table's account; \
         make the DynamoLeaseStore with the credentials of the stream's account"
    )]
    OtherAccount {
        /// The lease table.
        table: String,
        /// Its account.
        lease_account: String,
        /// The stream.
        stream: String,
        /// The stream's account.
        stream_account: String,
    },
}

impl KinesisError {
    /// A failed call about one shard: the message names it.
    pub(crate) fn shard_api(
        stream: &str,
        shard: &str,
        operation: &'static str,
        err: impl std::error::Error + 'static,
    ) -> Self {
        Self::Api {
            stream: stream.to_owned(),
            operation,
            message: format!("shard {shard}: {}", crate::sdk::failure::described(&err)),
        }
    }

    pub(crate) fn api(
        stream: &str,
        operation: &'static str,
        err: impl std::error::Error + 'static,
    ) -> Self {
        Self::Api {
            stream: stream.to_owned(),
            operation,
            message: crate::sdk::failure::described(&err),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::LeaseKey;

    /// The gallery of `tests/credentials_errors.rs`, which produces every variant a run reaches
    /// through a configuration with credentials in it, or lists why none does.
    const GALLERY: &str = include_str!("../tests/credentials_errors.rs");

    /// A variant's name. The matches are exhaustive: a new variant does not compile until it is
    /// named here, and added to `one_of_each` below.
    fn named(err: &KinesisError) -> String {
        let variant = match err {
            KinesisError::Config { .. } => "Config",
            KinesisError::InvalidStreamName { .. } => "InvalidStreamName",
            KinesisError::InvalidPartitionKey { .. } => "InvalidPartitionKey",
            KinesisError::RecordTooLarge { .. } => "RecordTooLarge",
            KinesisError::ShardNotFound { .. } => "ShardNotFound",
            KinesisError::SettledAfterHandover { .. } => "SettledAfterHandover",
            KinesisError::StreamNotFound { .. } => "StreamNotFound",
            KinesisError::DuplicateSubscription { .. } => "DuplicateSubscription",
            KinesisError::ShutDown { .. } => "ShutDown",
            KinesisError::Lease { source, .. } => return lease_named(source),
            KinesisError::LeaseStore { .. } => "LeaseStore",
            KinesisError::OwnerIdInUse { .. } => "OwnerIdInUse",
            KinesisError::Api { .. } => "Api",
            KinesisError::PutRejected { .. } => "PutRejected",
            KinesisError::ConsumerNotFound { .. } => "ConsumerNotFound",
            KinesisError::ConsumerNotActive { .. } => "ConsumerNotActive",
            KinesisError::ConsumerLimit { .. } => "ConsumerLimit",
            KinesisError::Seek { .. } => "Seek",
            KinesisError::ExactlyOnce { .. } => "ExactlyOnce",
        };
        format!("KinesisError::{variant}")
    }

    fn lease_named(err: &LeaseError) -> String {
        let variant = match err {
            LeaseError::Held { .. } => "Held",
            LeaseError::Lost { .. } => "Lost",
            LeaseError::Deleted { .. } => "Deleted",
            LeaseError::TableMissing { .. } => "TableMissing",
            LeaseError::TableMismatch { .. } => "TableMismatch",
            LeaseError::LegacyRow { .. } => "LegacyRow",
            LeaseError::OtherApplication { .. } => "OtherApplication",
            LeaseError::Throttled { .. } => "Throttled",
            LeaseError::Store { .. } => "Store",
        };
        format!("LeaseError::{variant}")
    }

    fn one_of_each() -> Vec<KinesisError> {
        let text = String::new;
        let key = || LeaseKey::new("orders", "shardId-000000000000");
        let lease = |source| KinesisError::Lease {
            stream: text(),
            shard: text(),
            source: Box::new(source),
        };
        vec![
            KinesisError::Config { message: text() },
            KinesisError::InvalidStreamName {
                name: text(),
                reason: "",
            },
            KinesisError::InvalidPartitionKey {
                stream: text(),
                reason: text(),
            },
            KinesisError::RecordTooLarge {
                stream: text(),
                size: 0,
                limit: 0,
            },
            KinesisError::ShardNotFound {
                stream: text(),
                shard: text(),
            },
            KinesisError::SettledAfterHandover {
                stream: text(),
                shard: text(),
            },
            KinesisError::StreamNotFound { stream: text() },
            KinesisError::DuplicateSubscription { stream: text() },
            KinesisError::ShutDown { what: "" },
            KinesisError::Api {
                stream: text(),
                operation: "",
                message: text(),
            },
            KinesisError::PutRejected {
                stream: text(),
                failed: 0,
                attempts: 0,
                code: text(),
                message: text(),
            },
            KinesisError::ConsumerNotFound {
                stream: text(),
                consumer: text(),
            },
            KinesisError::ConsumerNotActive {
                stream: text(),
                consumer: text(),
                status: text(),
            },
            KinesisError::ConsumerLimit {
                stream: text(),
                consumer: text(),
                message: text(),
            },
            KinesisError::Seek {
                stream: text(),
                reason: text(),
            },
            KinesisError::ExactlyOnce {
                stream: text(),
                refusal: ExactlyOnceRefusal::LeaseTooLong {
                    lease: std::time::Duration::ZERO,
                },
            },
            KinesisError::ExactlyOnce {
                stream: text(),
                refusal: ExactlyOnceRefusal::OtherRegion {
                    table: text(),
                    lease_region: text(),
                    region: text(),
                },
            },
            KinesisError::ExactlyOnce {
                stream: text(),
                refusal: ExactlyOnceRefusal::OtherAccount {
                    table: text(),
                    lease_account: text(),
                    stream: text(),
                    stream_account: text(),
                },
            },
            lease(LeaseError::Held {
                key: key(),
                owner: text(),
                expires_in_ms: 0,
            }),
            lease(LeaseError::Lost {
                key: key(),
                owner: text(),
            }),
            lease(LeaseError::Deleted { key: key() }),
            lease(LeaseError::TableMissing {
                table: text(),
                create_command: text(),
            }),
            lease(LeaseError::TableMismatch {
                table: text(),
                problem: text(),
                create_command: text(),
            }),
            KinesisError::OwnerIdInUse {
                owner: text(),
                table: text(),
                theirs: text(),
                mine: text(),
            },
            KinesisError::LeaseStore {
                source: Box::new(LeaseError::TableMissing {
                    table: text(),
                    create_command: text(),
                }),
            },
            lease(LeaseError::LegacyRow {
                table: text(),
                stream: text(),
                shard: text(),
                checkpoint: text(),
            }),
            lease(LeaseError::OtherApplication {
                table: text(),
                key: key(),
                ours: None,
                theirs: text(),
            }),
            lease(LeaseError::Throttled {
                key: key(),
                operation: "",
                code: text(),
            }),
            lease(LeaseError::Store {
                key: key(),
                operation: "",
                message: text(),
            }),
        ]
    }

    #[test]
    fn every_variant_is_in_the_credentials_gallery() {
        for err in one_of_each() {
            let name = named(&err);
            assert!(
                GALLERY.contains(&format!("\"{name}\"")),
                "{name} is not in tests/credentials_errors.rs: produce it there through a \
                 configuration with credentials in it, or list why no run reaches it"
            );
        }
    }
}

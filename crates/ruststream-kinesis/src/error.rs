use thiserror::Error;

use crate::LeaseError;

/// Everything the Kinesis broker reports: every variant names the stream (and the shard, where
/// there is one) and, where there is one, the fix.
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
    /// A record larger than Kinesis accepts.
    #[error(
        "record for stream {stream:?} is {size} bytes, over the Kinesis limit of {limit} bytes \
         (1 MiB of data per record, headers included); split the message or store the body \
         elsewhere and publish a reference"
    )]
    RecordTooLarge {
        /// The stream published to.
        stream: String,
        /// The record's size on the wire (payload, plus the header envelope when there are headers).
        size: usize,
        /// The limit.
        limit: usize,
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
    /// A lease store call failed for one shard; the shard is tried again at the next listing.
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
    /// A seek the subscription cannot perform.
    #[error("seek on stream {stream:?}: {reason}")]
    Seek {
        /// The stream.
        stream: String,
        /// Why.
        reason: String,
    },
}

impl KinesisError {
    pub(crate) fn api(
        stream: &str,
        operation: &'static str,
        err: impl std::error::Error + 'static,
    ) -> Self {
        Self::Api {
            stream: stream.to_owned(),
            operation,
            message: aws_sdk_kinesis::error::DisplayErrorContext(&err).to_string(),
        }
    }
}

//! The Kinesis calls the live transport makes, over the official SDK client: listing, creating,
//! iterators, reading and writing. Everything here is I/O; the decisions live elsewhere.

use std::sync::Arc;
use std::time::Duration;

use crate::clock::Instant;

use aws_sdk_kinesis::Client;
use aws_sdk_kinesis::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_kinesis::operation::describe_stream_summary::DescribeStreamSummaryError;
use aws_sdk_kinesis::operation::get_records::GetRecordsError;
use aws_sdk_kinesis::primitives::{Blob, DateTime};
use aws_sdk_kinesis::types::{PutRecordsRequestEntry, ShardIteratorType, StreamStatus};
use bytes::Bytes;

use super::iterator::ShardIterator;
pub(crate) use super::shards::ShardInfo;
use crate::settings::position::ShardStart;
use crate::shared_str::{Gathered, Shared};
use crate::{KinesisError, KinesisPosition, SharedStr};

/// The error of a failed call on `stream`: [`KinesisError::StreamNotFound`] when the service
/// says the stream does not exist, which names the fix, and the service's own error otherwise.
fn call_failed<E, R>(stream: &str, operation: &'static str, err: SdkError<E, R>) -> KinesisError
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
    R: std::fmt::Debug + 'static,
{
    if err.code() == Some("ResourceNotFoundException") {
        return KinesisError::StreamNotFound {
            stream: stream.to_owned(),
        };
    }
    KinesisError::api(stream, operation, err)
}

/// One record as `GetRecords` returns it.
#[derive(Debug, Clone)]
pub(crate) struct FetchedRecord {
    pub(crate) data: Bytes,
    pub(crate) partition_key: SharedStr,
    pub(crate) sequence: SharedStr,
    pub(crate) arrived_ms: Option<i64>,
}

/// The records of one answer (`GetRecords`, or an event of `SubscribeToShard`) as its source
/// gave them: the SDK's, taken apart one by one as the reader decodes them
/// ([`taken_apart`](Self::taken_apart)), not into a list of their own first (a move of each record
/// and a pass less, on every record read); or, in process, records made as they were read.
#[derive(Debug)]
pub(crate) enum AnswerRecords {
    Sdk(Vec<aws_sdk_kinesis::types::Record>),
    #[cfg(any(test, feature = "testing"))]
    Made(Vec<FetchedRecord>),
}

impl AnswerRecords {
    /// How many records the answer brought.
    pub(crate) fn len(&self) -> usize {
        match self {
            Self::Sdk(records) => records.len(),
            #[cfg(any(test, feature = "testing"))]
            Self::Made(records) => records.len(),
        }
    }

    /// Whether the answer brought no record.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bytes of the records' data, all told.
    pub(crate) fn data_bytes(&self) -> u64 {
        match self {
            Self::Sdk(records) => records.iter().map(|r| r.data.as_ref().len() as u64).sum(),
            #[cfg(any(test, feature = "testing"))]
            Self::Made(records) => records.iter().map(|r| r.data.len() as u64).sum(),
        }
    }

    /// The sequence numbers of the first record and the last, if any.
    pub(crate) fn first_and_last(&self) -> Option<(&str, &str)> {
        match self {
            Self::Sdk(records) => Some((
                &*records.first()?.sequence_number,
                &*records.last()?.sequence_number,
            )),
            #[cfg(any(test, feature = "testing"))]
            Self::Made(records) => Some((&*records.first()?.sequence, &*records.last()?.sequence)),
        }
    }

    /// The records, in order, each taken apart as it is reached ([`TakenApart`]).
    pub(crate) fn taken_apart(self) -> TakenApart {
        match self {
            Self::Sdk(records) => TakenApart::sdk(records),
            #[cfg(any(test, feature = "testing"))]
            Self::Made(records) => TakenApart::Made(records.into_iter()),
        }
    }

    /// The records in a list of their own.
    #[cfg(test)]
    pub(crate) fn into_vec(self) -> Vec<FetchedRecord> {
        self.taken_apart().collect()
    }
}

/// What one `GetRecords` call answered.
#[derive(Debug)]
pub(crate) enum Fetched {
    Records {
        records: AnswerRecords,
        /// `None` when the shard is closed and read to its end.
        next: Option<ShardIterator>,
        /// How far the answer is behind the shard's tip (`MillisBehindLatest`), when told.
        millis_behind: Option<i64>,
    },
    /// The iterator expired; ask for a fresh one.
    Expired,
    /// The shard's read throughput is exceeded; back off.
    Throttled,
    /// The shard is no longer in the stream (`ResourceNotFoundException`: trimmed after a
    /// resharding, or the stream deleted).
    Gone,
}

/// One record to write.
#[derive(Debug, Clone)]
pub(crate) struct OutRecord {
    pub(crate) data: Bytes,
    pub(crate) partition_key: String,
    /// Routes the record to the shard whose hash key range holds it, in place of the partition
    /// key's hash (a KPL aggregate bound for one shard).
    pub(crate) explicit_hash_key: Option<String>,
}

/// Whether `stream` exists, and creates it with `create_shards` shards when asked and missing;
/// waits until it is active either way. Answers its ARN, which enhanced fan-out's consumer calls
/// take.
pub(crate) async fn ensure_stream(
    client: &Client,
    stream: &str,
    create_shards: Option<u32>,
) -> Result<String, KinesisError> {
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut created = false;
    loop {
        match client
            .describe_stream_summary()
            .stream_name(stream)
            .send()
            .await
        {
            Ok(out) => {
                if let Some(summary) = out.stream_description_summary()
                    && matches!(
                        summary.stream_status(),
                        StreamStatus::Active | StreamStatus::Updating
                    )
                {
                    return Ok(summary.stream_arn().to_owned());
                }
            }
            Err(SdkError::ServiceError(err))
                if matches!(
                    err.err(),
                    DescribeStreamSummaryError::ResourceNotFoundException(_)
                ) =>
            {
                let Some(shards) = create_shards else {
                    return Err(KinesisError::StreamNotFound {
                        stream: stream.to_owned(),
                    });
                };
                if !created {
                    create(client, stream, shards).await?;
                    created = true;
                }
            }
            Err(err) => return Err(KinesisError::api(stream, "DescribeStreamSummary", err)),
        }
        if Instant::now() > deadline {
            return Err(KinesisError::Api {
                stream: stream.to_owned(),
                operation: "DescribeStreamSummary",
                message: "the stream did not become active within 120 s".to_owned(),
            });
        }
        // The SDK's waiter sleeps at least 10 s between polls; a local stack is ready in
        // milliseconds, so poll briefly ourselves.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The largest record `stream` accepts, data and partition key together
/// (`MaxRecordSizeInKiB`); the default 1 MiB where the service does not say.
pub(crate) async fn max_record_bytes(client: &Client, stream: &str) -> Result<usize, KinesisError> {
    let out = client
        .describe_stream_summary()
        .stream_name(stream)
        .send()
        .await
        .map_err(|err| call_failed(stream, "DescribeStreamSummary", err))?;
    let kib = out
        .stream_description_summary()
        .and_then(|summary| summary.max_record_size_in_kib())
        .and_then(|kib| usize::try_from(kib).ok())
        .filter(|kib| *kib > 0);
    Ok(kib.map_or(crate::MAX_RECORD_BYTES, |kib| kib * 1024))
}

async fn create(client: &Client, stream: &str, shards: u32) -> Result<(), KinesisError> {
    let shard_count = i32::try_from(shards).unwrap_or(i32::MAX);
    match client
        .create_stream()
        .stream_name(stream)
        .shard_count(shard_count)
        .send()
        .await
    {
        Ok(_) => {
            tracing::info!(stream, shards, "created kinesis stream");
            Ok(())
        }
        // Another instance created it first.
        Err(SdkError::ServiceError(err)) if err.err().is_resource_in_use_exception() => Ok(()),
        Err(err) => Err(KinesisError::api(stream, "CreateStream", err)),
    }
}

/// Every shard of `stream`, paging through `ListShards`.
pub(crate) async fn list_shards(
    client: &Client,
    stream: &str,
) -> Result<Vec<ShardInfo>, KinesisError> {
    Ok(every_shard(client, stream)
        .await?
        .iter()
        .map(|shard| ShardInfo {
            id: Arc::from(shard.shard_id()),
            parents: [shard.parent_shard_id(), shard.adjacent_parent_shard_id()]
                .into_iter()
                .flatten()
                .map(Arc::from)
                .collect(),
            closed: is_closed(shard),
        })
        .collect())
}

/// The hash key ranges of the open shards of `stream`, lowest first: where a record whose key
/// hashes to a number goes.
pub(crate) async fn open_hash_ranges(
    client: &Client,
    stream: &str,
) -> Result<Vec<HashRange>, KinesisError> {
    let mut ranges: Vec<HashRange> = every_shard(client, stream)
        .await?
        .iter()
        .filter(|shard| !is_closed(shard))
        .filter_map(|shard| {
            let range = shard.hash_key_range()?;
            Some(HashRange {
                shard: Arc::from(shard.shard_id()),
                start: range.starting_hash_key().parse().ok()?,
                end: range.ending_hash_key().parse().ok()?,
            })
        })
        .collect();
    ranges.sort_by_key(|range| range.start);
    Ok(ranges)
}

/// The hash keys one open shard takes, both ends included.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HashRange {
    pub(crate) shard: Arc<str>,
    pub(crate) start: u128,
    pub(crate) end: u128,
}

fn is_closed(shard: &aws_sdk_kinesis::types::Shard) -> bool {
    shard
        .sequence_number_range()
        .is_some_and(|range| range.ending_sequence_number().is_some())
}

/// Every shard `ListShards` answers for `stream`, page by page.
async fn every_shard(
    client: &Client,
    stream: &str,
) -> Result<Vec<aws_sdk_kinesis::types::Shard>, KinesisError> {
    let mut shards = Vec::new();
    let mut next_token: Option<String> = None;
    loop {
        // With a NextToken the service refuses the stream name: the token carries it.
        let request = match &next_token {
            Some(token) => client.list_shards().next_token(token),
            None => client.list_shards().stream_name(stream),
        };
        let out = request
            .send()
            .await
            .map_err(|err| call_failed(stream, "ListShards", err))?;
        shards.extend(out.shards().iter().cloned());
        match out.next_token() {
            Some(token) => next_token = Some(token.to_owned()),
            None => return Ok(shards),
        }
    }
}

/// An iterator for `shard` of `stream` at `start`.
pub(crate) async fn shard_iterator(
    client: &Client,
    stream: &str,
    shard: &str,
    start: &ShardStart,
) -> Result<ShardIterator, KinesisError> {
    let (kind, sequence, timestamp) = starting_at(start);
    let request = client
        .get_shard_iterator()
        .stream_name(stream)
        .shard_id(shard)
        .shard_iterator_type(kind)
        .set_starting_sequence_number(sequence)
        .set_timestamp(timestamp);
    let out = request.send().await.map_err(|err| {
        if err.code() == Some("ResourceNotFoundException") {
            KinesisError::ShardNotFound {
                stream: stream.to_owned(),
                shard: shard.to_owned(),
            }
        } else {
            KinesisError::shard_api(stream, shard, "GetShardIterator", err)
        }
    })?;
    out.shard_iterator()
        .map(ShardIterator::service)
        .ok_or_else(|| KinesisError::Api {
            stream: stream.to_owned(),
            operation: "GetShardIterator",
            message: format!("no iterator returned for shard {shard}"),
        })
}

/// Where `start` reads from, as `GetShardIterator` and `SubscribeToShard` both take it: the
/// iterator type, and its sequence number or timestamp.
pub(crate) fn starting_at(
    start: &ShardStart,
) -> (ShardIteratorType, Option<String>, Option<DateTime>) {
    match start {
        ShardStart::After(sequence) => (
            ShardIteratorType::AfterSequenceNumber,
            Some(sequence.to_string()),
            None,
        ),
        // The aggregate again: its user records already settled are dropped by the reader.
        ShardStart::Within { sequence, .. } => (
            ShardIteratorType::AtSequenceNumber,
            Some(sequence.to_string()),
            None,
        ),
        ShardStart::At(KinesisPosition::TrimHorizon) => {
            (ShardIteratorType::TrimHorizon, None, None)
        }
        ShardStart::At(KinesisPosition::Latest) => (ShardIteratorType::Latest, None, None),
        ShardStart::At(KinesisPosition::AtTimestamp(at)) => (
            ShardIteratorType::AtTimestamp,
            None,
            Some(DateTime::from(*at)),
        ),
        ShardStart::At(
            KinesisPosition::AtSequence { sequence, .. }
            | KinesisPosition::AtSubSequence { sequence, .. },
        ) => (
            ShardIteratorType::AtSequenceNumber,
            Some(sequence.to_string()),
            None,
        ),
    }
}

/// The records of one answer, taken apart one at a time as they are reached, not borrowed: each
/// one's data moves into its delivery uncopied, and the SDK's records' sequence numbers and
/// partition keys are gathered into one string the records share (one allocation for the
/// answer, not two for each record). An iterator, so that the reader decodes each record in the
/// loop that takes it apart (not a list of them made first, nor a call for each).
#[derive(Debug)]
pub(crate) enum TakenApart {
    Sdk {
        records: std::vec::IntoIter<aws_sdk_kinesis::types::Record>,
        shared: Shared,
        /// Where the next record's texts begin in `shared`.
        at: usize,
    },
    #[cfg(any(test, feature = "testing"))]
    Made(std::vec::IntoIter<FetchedRecord>),
}

impl TakenApart {
    /// The SDK's `records`, their texts gathered.
    fn sdk(records: Vec<aws_sdk_kinesis::types::Record>) -> Self {
        let bytes = records
            .iter()
            .map(|record| {
                record.sequence_number.len() + record.partition_key.as_deref().map_or(0, str::len)
            })
            .sum();
        let mut gathered = Gathered::with_capacity(bytes);
        for record in &records {
            gathered.push(&record.sequence_number);
            gathered.push(record.partition_key.as_deref().unwrap_or_default());
        }
        Self::Sdk {
            records: records.into_iter(),
            shared: gathered.share(),
            at: 0,
        }
    }
}

impl Iterator for TakenApart {
    type Item = FetchedRecord;

    // Inlined into the reader's loop, which decodes each record as it comes.
    #[inline]
    fn next(&mut self) -> Option<FetchedRecord> {
        match self {
            Self::Sdk {
                records,
                shared,
                at,
            } => {
                let record = records.next()?;
                // Each record's texts lie where `sdk` pushed them, one after the other: read
                // off by their lengths again rather than kept in a `Vec` of spans (an
                // allocation and a move each record less).
                let mut next = |text: &str| {
                    let span = (*at, *at + text.len());
                    *at = span.1;
                    shared.part(span)
                };
                let sequence = next(&record.sequence_number);
                let partition_key = next(record.partition_key.as_deref().unwrap_or_default());
                Some(FetchedRecord {
                    partition_key,
                    sequence,
                    arrived_ms: record
                        .approximate_arrival_timestamp
                        .and_then(|at| at.to_millis().ok()),
                    data: record.data.into_bytes(),
                })
            }
            #[cfg(any(test, feature = "testing"))]
            Self::Made(records) => records.next(),
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        match self {
            Self::Sdk { records, .. } => records.size_hint(),
            #[cfg(any(test, feature = "testing"))]
            Self::Made(records) => records.size_hint(),
        }
    }
}

/// One `GetRecords` call on `shard`.
pub(crate) async fn get_records(
    client: &Client,
    stream: &str,
    shard: &str,
    iterator: &str,
    limit: u32,
) -> Result<Fetched, KinesisError> {
    let answer = client
        .get_records()
        .shard_iterator(iterator)
        .limit(i32::try_from(limit).unwrap_or(10_000))
        .send()
        .await;
    let out = match answer {
        Ok(out) => out,
        Err(SdkError::ServiceError(err)) => {
            return match err.err() {
                GetRecordsError::ExpiredIteratorException(_) => Ok(Fetched::Expired),
                GetRecordsError::ProvisionedThroughputExceededException(_) => {
                    Ok(Fetched::Throttled)
                }
                GetRecordsError::ResourceNotFoundException(_) => Ok(Fetched::Gone),
                _ => Err(KinesisError::shard_api(
                    stream,
                    shard,
                    "GetRecords",
                    SdkError::ServiceError(err),
                )),
            };
        }
        Err(err) => return Err(KinesisError::shard_api(stream, shard, "GetRecords", err)),
    };
    let records = AnswerRecords::Sdk(out.records);
    Ok(Fetched::Records {
        records,
        next: out.next_shard_iterator.map(ShardIterator::Service),
        millis_behind: out.millis_behind_latest,
    })
}

/// Outcome of one record of a `PutRecords` call.
#[derive(Debug)]
pub(crate) enum PutOutcome {
    /// Written, to this shard.
    Written {
        shard: Option<String>,
    },
    Rejected {
        code: String,
        message: String,
    },
}

/// One `PutRecords` call; the answer is per record, in order.
pub(crate) async fn put_records(
    client: &Client,
    stream: &str,
    records: &[OutRecord],
) -> Result<Vec<PutOutcome>, KinesisError> {
    let entries = records
        .iter()
        .map(|record| {
            PutRecordsRequestEntry::builder()
                .data(Blob::new(record.data.to_vec()))
                .partition_key(&record.partition_key)
                .set_explicit_hash_key(record.explicit_hash_key.clone())
                .build()
                .map_err(|err| KinesisError::api(stream, "PutRecords", err))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let out = client
        .put_records()
        .stream_name(stream)
        .set_records(Some(entries))
        .send()
        .await
        .map_err(|err| call_failed(stream, "PutRecords", err))?;
    Ok(out
        .records()
        .iter()
        .map(|entry| match entry.error_code() {
            Some(code) => PutOutcome::Rejected {
                code: code.to_owned(),
                message: entry.error_message().unwrap_or_default().to_owned(),
            },
            None => PutOutcome::Written {
                shard: entry.shard_id().map(str::to_owned),
            },
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doubles::fake_kinesis::{client, error};

    #[tokio::test]
    async fn a_throttled_or_expired_read_is_told_apart_from_a_failure() {
        let (client, seen) = client(|n, _, _| match n {
            0 => (400, error("ProvisionedThroughputExceededException")),
            1 => (400, error("ExpiredIteratorException")),
            2 => (
                200,
                serde_json::json!({
                    "Records": [{
                        "Data": "aGk=",
                        "PartitionKey": "k",
                        "SequenceNumber": "49590338271490256608559692538361571095921575989136588898",
                    }],
                    "NextShardIterator": "next",
                    "MillisBehindLatest": 1500,
                }),
            ),
            _ => (400, error("KMSAccessDeniedException")),
        });
        assert!(matches!(
            get_records(&client, "orders", "shardId-000000000000", "it", 500).await,
            Ok(Fetched::Throttled)
        ));
        assert!(matches!(
            get_records(&client, "orders", "shardId-000000000000", "it", 500).await,
            Ok(Fetched::Expired)
        ));
        let Ok(Fetched::Records {
            records,
            next,
            millis_behind,
        }) = get_records(&client, "orders", "shardId-000000000000", "it", 500).await
        else {
            panic!("records expected");
        };
        assert_eq!(&records.into_vec()[0].data[..], b"hi");
        assert_eq!(next, Some(ShardIterator::service("next")));
        assert_eq!(millis_behind, Some(1500));
        let err = get_records(&client, "orders", "shardId-000000000000", "it", 500)
            .await
            .unwrap_err();
        assert!(err.to_string().contains("orders"), "{err}");
        let calls = seen.lock().unwrap();
        assert!(
            calls
                .iter()
                .all(|(op, body)| op == "GetRecords" && body["Limit"] == 500)
        );
    }

    /// A fetch's records share one string for their sequence numbers and partition keys, and
    /// each reads as its own: a missing key, a key of several bytes a char, their order.
    #[test]
    fn the_records_of_a_fetch_read_their_own_texts_from_the_string_they_share() {
        let record = |sequence: &str, key: Option<&str>, data: &'static [u8]| {
            aws_sdk_kinesis::types::Record::builder()
                .sequence_number(sequence)
                .set_partition_key(key.map(str::to_owned))
                .data(Blob::new(data))
                .build()
                .expect("a record")
        };
        let answer = AnswerRecords::Sdk(vec![
            record("4959001", Some("order-ü€"), b"one"),
            record("4959002", None, b"two"),
            record("4959003", Some("k"), b"three"),
        ]);
        assert_eq!(answer.first_and_last(), Some(("4959001", "4959003")));
        assert_eq!(answer.data_bytes(), 11);
        let fetched = answer.into_vec();
        let read: Vec<(&str, &str, &[u8])> = fetched
            .iter()
            .map(|r| (r.sequence.as_str(), r.partition_key.as_str(), &r.data[..]))
            .collect();
        assert_eq!(
            read,
            [
                ("4959001", "order-ü€", &b"one"[..]),
                ("4959002", "", &b"two"[..]),
                ("4959003", "k", &b"three"[..]),
            ]
        );
        let none = AnswerRecords::Sdk(Vec::new());
        assert!(none.is_empty() && none.first_and_last().is_none());
        assert!(none.into_vec().is_empty());
    }
}

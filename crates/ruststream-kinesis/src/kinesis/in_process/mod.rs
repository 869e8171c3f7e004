//! A Kinesis in memory (feature `testing`): streams of shards written with the checks the
//! service makes and read through the calls a reader makes of the service (`GetShardIterator`,
//! `GetRecords`, `ListShards`), with iterators that are positions in a shard rather than
//! strings.
//!
//! Gaps, each covered live instead: no throttling, no expired iterators and no trimming (the
//! reader's handling of those is covered by its unit tests and the fault injector), no
//! resharding (split and merge run against the local stack).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};

use bytes::Bytes;
use ruststream::testing::Coordinator;
use ruststream::{OutgoingMessage, RawMessage};

use crate::kinesis::api::{AnswerRecords, Fetched, FetchedRecord, OutRecord};
use crate::kinesis::fan_out::{Consumer, Refused};
use crate::kinesis::iterator::ShardIterator;
use crate::kinesis::shards::ShardInfo;
use crate::kinesis::{envelope, kpl};
use crate::lease::epoch_millis;
use crate::settings::position::{ShardStart, sequence_cmp};
use crate::{KinesisError, KinesisPosition, SharedStr};

mod events;
mod log;
mod tap;

pub(crate) use events::InProcessEvents;
pub(crate) use log::shard_id;
#[cfg(test)]
pub(crate) use log::shard_of;
use log::{Sequences, StreamLog, hash_key, shard_of_hash};
pub(crate) use tap::{Delivering, Tap};

/// The in-process Kinesis every connection of one broker (and its clones) shares.
#[derive(Debug, Default)]
pub(crate) struct InProcessKinesis {
    streams: Mutex<Streams>,
    /// How many records were written, to every stream: the next sequence number.
    written: AtomicU64,
}

#[derive(Debug, Default)]
struct Streams {
    /// Each stream's name, at its index in `list`. Searched in order, not hashed: a test has a
    /// few streams, and hashing the name cost more than the rest of a publish's lookup.
    names: Vec<String>,
    list: Vec<StreamLog>,
    /// The next sequence numbers, formatted ahead.
    sequences: Sequences,
}

impl Streams {
    /// Whether `stream` exists.
    fn has(&self, stream: &str) -> bool {
        self.names.iter().any(|name| name == stream)
    }

    fn index_of(&self, stream: &str) -> Result<u32, KinesisError> {
        self.names
            .iter()
            .position(|name| name == stream)
            .map(|index| u32::try_from(index).unwrap_or(u32::MAX))
            .ok_or_else(|| KinesisError::StreamNotFound {
                stream: stream.to_owned(),
            })
    }

    /// Creates `stream` with `shards` shards unless it exists.
    fn create(&mut self, stream: &str, shards: u32) {
        if !self.has(stream) {
            self.list.push(StreamLog::new(shards));
            self.names.push(stream.to_owned());
        }
    }
}

impl InProcessKinesis {
    fn lock(&self) -> MutexGuard<'_, Streams> {
        self.streams.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether `stream` exists, created with `create_shards` shards when asked and missing;
    /// answers its ARN. A missing stream not to be created is
    /// [`KinesisError::StreamNotFound`], as the service answers.
    pub(crate) fn ensure_stream(
        &self,
        stream: &str,
        create_shards: Option<u32>,
    ) -> Result<String, KinesisError> {
        let mut streams = self.lock();
        if !streams.has(stream) {
            let Some(shards) = create_shards else {
                return Err(KinesisError::StreamNotFound {
                    stream: stream.to_owned(),
                });
            };
            streams.create(stream, shards);
        }
        Ok(format!(
            "arn:aws:kinesis:in-process:000000000000:stream/{stream}"
        ))
    }

    /// Every shard of `stream`: all open, none with parents.
    pub(crate) fn list_shards(&self, stream: &str) -> Result<Vec<ShardInfo>, KinesisError> {
        let streams = self.lock();
        let index = streams.index_of(stream)?;
        let shards = streams.list[index as usize].shards.len();
        Ok((0..shards)
            .map(|shard| ShardInfo {
                id: shard_id(shard),
                parents: Vec::new(),
                closed: false,
            })
            .collect())
    }

    /// An iterator for `shard` of `stream` at `start`. A sequence number the shard does not
    /// hold (one of another shard, or never written) is refused at it, as the service refuses
    /// it (`InvalidArgumentException`); after it, reading starts at the next one the shard
    /// holds.
    pub(crate) fn shard_iterator(
        &self,
        stream: &str,
        shard: &str,
        start: &ShardStart,
    ) -> Result<ShardIterator, KinesisError> {
        let streams = self.lock();
        let stream_index = streams.index_of(stream)?;
        let log = &streams.list[stream_index as usize];
        let Some(shard_index) = log.index_of(shard) else {
            return Err(KinesisError::ShardNotFound {
                stream: stream.to_owned(),
                shard: shard.to_owned(),
            });
        };
        let records = &log.shards[shard_index];
        let first_after = |sequence: &str| {
            records.partition_point(|r| sequence_cmp(&r.sequence, sequence).is_le())
        };
        let held = |sequence: &str| {
            let at = records.partition_point(|r| sequence_cmp(&r.sequence, sequence).is_lt());
            (records.get(at).is_some_and(|r| *r.sequence == *sequence)).then_some(at)
        };
        let position = match start {
            ShardStart::After(sequence) => first_after(sequence),
            ShardStart::At(KinesisPosition::TrimHorizon) => 0,
            ShardStart::At(KinesisPosition::Latest) => records.len(),
            ShardStart::At(KinesisPosition::AtTimestamp(at)) => {
                let at_ms = at
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
                records
                    .iter()
                    .position(|r| r.arrived_ms >= at_ms)
                    .unwrap_or(records.len())
            }
            ShardStart::Within { sequence, .. }
            | ShardStart::At(
                KinesisPosition::AtSequence { sequence, .. }
                | KinesisPosition::AtSubSequence { sequence, .. },
            ) => held(sequence).ok_or_else(|| KinesisError::Api {
                stream: stream.to_owned(),
                operation: "GetShardIterator",
                message: format!(
                    "InvalidArgumentException: shard {shard} holds no record {sequence}"
                ),
            })?,
        };
        Ok(ShardIterator::InProcess {
            stream: stream_index,
            shard: u32::try_from(shard_index).unwrap_or(u32::MAX),
            position: position as u64,
        })
    }

    /// One `GetRecords` call from `iterator`, for at most `limit` records: what lies there (its
    /// bytes shared, not copied), the iterator after it, and how far behind the shard's newest
    /// record the last one returned is (at least 1 ms while any follows it).
    pub(crate) fn get_records(
        &self,
        iterator: &ShardIterator,
        limit: u32,
    ) -> Result<Fetched, KinesisError> {
        let Some((stream, shard, position)) = iterator.in_process() else {
            return Err(KinesisError::Api {
                stream: String::new(),
                operation: "GetRecords",
                message: format!("the in-process Kinesis was handed iterator {iterator}"),
            });
        };
        let streams = self.lock();
        let records = &streams.list[stream as usize].shards[shard as usize];
        let (read, to) = page(records, position, limit);
        let millis_behind = match (read.last(), records.last()) {
            (Some(last), Some(newest)) if to < records.len() => {
                (newest.arrived_ms - last.arrived_ms).max(1)
            }
            (None, _) if to < records.len() => 1,
            _ => 0,
        };
        Ok(Fetched::Records {
            records: AnswerRecords::Made(read.iter().map(log::Stored::fetched).collect()),
            next: Some(ShardIterator::InProcess {
                stream,
                shard,
                position: to as u64,
            }),
            millis_behind: Some(millis_behind),
        })
    }

    /// At most `limit` records of a shard from `position` on, and the position after them.
    fn read_from(
        &self,
        stream: u32,
        shard: u32,
        position: u64,
        limit: u32,
    ) -> (Vec<FetchedRecord>, u64) {
        let streams = self.lock();
        let records = &streams.list[stream as usize].shards[shard as usize];
        let (read, to) = page(records, position, limit);
        (read.iter().map(log::Stored::fetched).collect(), to as u64)
    }

    /// The enhanced fan-out consumer `name` of `stream`, registered when missing and `register`
    /// allows, else [`KinesisError::ConsumerNotFound`] as the service answers.
    pub(crate) fn ensure_consumer(
        &self,
        stream: &str,
        name: &str,
        register: bool,
    ) -> Result<Consumer, KinesisError> {
        let mut streams = self.lock();
        let index = streams.index_of(stream)?;
        let log = &mut streams.list[index as usize];
        if !log.consumers.contains(name) {
            if !register {
                return Err(KinesisError::ConsumerNotFound {
                    stream: stream.to_owned(),
                    consumer: name.to_owned(),
                });
            }
            log.consumers.insert(name.to_owned());
        }
        Ok(Consumer {
            name: Arc::from(name),
            arn: Arc::from(format!(
                "arn:aws:kinesis:in-process:000000000000:stream/{stream}/consumer/{name}"
            )),
        })
    }

    /// `SubscribeToShard` of a consumer to `shard` of `stream` at `start`. One subscription
    /// per consumer and shard is not enforced (the service's `ResourceInUseException`).
    pub(crate) fn subscribe(
        self: &Arc<Self>,
        stream: &str,
        shard: &str,
        start: &ShardStart,
    ) -> Result<InProcessEvents, Refused> {
        let iterator = self
            .shard_iterator(stream, shard, start)
            .map_err(|err| match err {
                KinesisError::ShardNotFound { .. } | KinesisError::StreamNotFound { .. } => {
                    Refused::Gone
                }
                err => Refused::Failed(err),
            })?;
        let (stream, shard, position) = iterator.in_process().ok_or(Refused::Gone)?;
        let news = Arc::clone(&self.lock().list[stream as usize].news[shard as usize]);
        Ok(InProcessEvents {
            kinesis: Arc::clone(self),
            stream,
            shard,
            position,
            news,
        })
    }

    /// Writes one record, as `PutRecords` would: to the shard its explicit hash key or its
    /// partition key's MD5 falls in.
    pub(crate) fn put(&self, stream: &str, record: OutRecord) -> Result<(), KinesisError> {
        let OutRecord {
            data,
            partition_key,
            explicit_hash_key,
        } = record;
        let hash = explicit_hash_key
            .and_then(|key| key.parse::<u128>().ok())
            .unwrap_or_else(|| hash_key(&partition_key));
        let mut streams = self.lock();
        let index = streams.index_of(stream)?;
        self.append(
            &mut streams,
            index,
            data,
            SharedStr::from(partition_key),
            hash,
        );
        Ok(())
    }

    /// A test's input: written to `name` as a publish would be, under a random partition key of
    /// the shard next in turn; `create_streams` creates a missing stream with that many shards,
    /// as a subscription would.
    pub(crate) fn inject(
        &self,
        message: OutgoingMessage<'_>,
        create_streams: Option<u32>,
    ) -> Result<(), KinesisError> {
        let (name, payload, headers) = message.into_parts();
        let mut streams = self.lock();
        if let Some(shards) = create_streams {
            streams.create(name, shards);
        }
        let index = streams.index_of(name)?;
        let log = &mut streams.list[index as usize];
        let data = log.arena.encode(payload, &headers);
        let (key, hash) = log.input_key();
        self.append(&mut streams, index, data, key, hash);
        Ok(())
    }

    /// Writes a record to the stream at `index`, in the shard `hash` falls in.
    fn append(
        &self,
        streams: &mut Streams,
        index: u32,
        data: Bytes,
        partition_key: SharedStr,
        hash: u128,
    ) {
        let written = self.written.fetch_add(1, Ordering::Relaxed);
        let sequence = streams.sequences.number(written + 1);
        let log = &mut streams.list[index as usize];
        let shard = shard_of_hash(hash, log.shards.len());
        let stored = log::Stored {
            data,
            partition_key,
            sequence,
            arrived_ms: i64::try_from(epoch_millis()).unwrap_or(i64::MAX),
        };
        log.shards[shard].push(stored);
        log.news[shard].notify_waiters();
        log.taps[shard].retain(|tap| match tap.upgrade() {
            Some(tap) => {
                tap.written();
                true
            }
            None => false,
        });
    }

    /// A tap for a reader of the shard `iterator` reads, which owes every record from there on
    /// to `harness` (once a `TestApp` installed one); `None` for an iterator of the service.
    pub(crate) fn tap(
        self: &Arc<Self>,
        iterator: &ShardIterator,
        harness: &OnceLock<Coordinator>,
    ) -> Option<Arc<Tap>> {
        let (stream, shard, position) = iterator.in_process()?;
        let mut streams = self.lock();
        let log = &mut streams.list[stream as usize];
        let tap = Arc::new(Tap::new(Arc::clone(self), (stream, shard), harness));
        let len = log.shards[shard as usize].len() as u64;
        tap.owe(usize::try_from(len.saturating_sub(position)).unwrap_or(usize::MAX));
        log.taps[shard as usize].push(Arc::downgrade(&tap));
        Some(tap)
    }

    /// Runs `f` with the length of `tap`'s shard, under the streams' lock (no write between).
    fn len_locked(&self, tap: &Tap, f: impl FnOnce(u64)) {
        let streams = self.lock();
        let len = streams.list[tap.stream as usize].shards[tap.shard as usize].len();
        f(len as u64);
    }

    /// What was published to `name`, in order: each record as its publish sent it, and each
    /// user record of an aggregate as its own message. Read back from the stream's records when
    /// a test asks, so a publish keeps no second copy.
    pub(crate) fn published(&self, name: &str) -> Vec<RawMessage> {
        let streams = self.lock();
        let Ok(index) = streams.index_of(name) else {
            return Vec::new();
        };
        let mut records: Vec<&log::Stored> = streams.list[index as usize]
            .shards
            .iter()
            .flatten()
            .collect();
        // Sequence numbers are given out in write order, over every shard.
        records.sort_by(|a, b| sequence_cmp(&a.sequence, &b.sequence));
        let name = ruststream::Str::from(name.to_owned());
        let message = |data: Bytes| {
            let (payload, headers) = envelope::decode(data);
            RawMessage::new(name.clone(), payload).with_headers(headers)
        };
        let mut out = Vec::with_capacity(records.len());
        for stored in records {
            match kpl::deaggregate(&stored.data) {
                Some(users) => out.extend(
                    users
                        .into_iter()
                        .map(|user| message(Bytes::from(user.data))),
                ),
                None => out.push(message(stored.data.clone())),
            }
        }
        out
    }
}

/// At most `limit` of `records` from `position` on, and the index after them.
fn page(records: &[log::Stored], position: u64, limit: u32) -> (&[log::Stored], usize) {
    let from = usize::try_from(position)
        .unwrap_or(usize::MAX)
        .min(records.len());
    let to = from
        .saturating_add(usize::try_from(limit).unwrap_or(usize::MAX))
        .min(records.len());
    (&records[from..to], to)
}

#[cfg(test)]
mod tests;

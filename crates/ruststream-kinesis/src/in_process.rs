//! The in-process Kinesis behind the `testing` feature: streams of shards in memory, written with
//! the same checks the service makes and read in order per key. It consults no lease store: a
//! `TestApp` test exercises the handler, and the live tests exercise the leases.
//!
//! Gaps, each covered live instead: no throttling (the reader's backoff is covered by unit tests),
//! no resharding (split and merge run against the local stack), no lease fencing (the lease suites
//! run against both stores).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError, Weak};

use bytes::{Bytes, BytesMut};
use md5::{Digest, Md5};
use ruststream::testing::Coordinator;
use ruststream::{AckError, OutgoingMessage, RawMessage};
use tokio::sync::mpsc;

use crate::delivery::message::{Hold, Item, Settlement, Standing};
use crate::delivery::record::{self, Record};
use crate::delivery::seeker::{Seeking, Source};
use crate::kinesis::api::{FetchedRecord, OutRecord};
use crate::kinesis::{envelope, kpl};
use crate::watermark::Ticket;
use crate::{KinesisError, KinesisMessage, KinesisPosition, KinesisSeeker, lease::epoch_millis};

#[derive(Debug)]
struct Stored {
    data: Bytes,
    partition_key: Arc<str>,
    sequence: Arc<str>,
    arrived_ms: i64,
    /// Position in the stream's publish order, so a replay interleaves shards as written.
    order: u64,
}

#[derive(Debug, Default)]
struct StreamLog {
    shards: Vec<Vec<Stored>>,
    subscribers: Vec<Weak<InProcessSubscription>>,
    /// Where the records a test injects are written.
    arena: Arena,
    /// The partition keys of injected records, [`INPUT_KEYS_PER_SHARD`] landing in each shard,
    /// with their hash keys; made at the stream's first inject.
    input_keys: Vec<Vec<(Arc<str>, u128)>>,
    /// How many records a test injected.
    injected: usize,
}

/// How many partition keys of each shard injected records take in turn.
const INPUT_KEYS_PER_SHARD: usize = 32;

impl StreamLog {
    /// The partition key of the next record a test injects (Kinesis requires one, and a test
    /// names none), with its hash key: random keys given out shard by shard in turn, so inputs
    /// spread evenly over the shards, and an input costs neither a key nor an MD5 of its own.
    fn input_key(&mut self) -> (Arc<str>, u128) {
        let shards = self.shards.len();
        if self.input_keys.is_empty() {
            let mut keys: Vec<Vec<(Arc<str>, u128)>> = vec![Vec::new(); shards];
            let mut short = shards;
            while short > 0 {
                let key = random_key();
                let hash = hash_key(&key);
                let of_shard = &mut keys[shard_of_hash(hash, shards)];
                if of_shard.len() < INPUT_KEYS_PER_SHARD {
                    of_shard.push((key, hash));
                    if of_shard.len() == INPUT_KEYS_PER_SHARD {
                        short -= 1;
                    }
                }
            }
            self.input_keys = keys;
        }
        let n = self.injected;
        self.injected += 1;
        let (key, hash) = &self.input_keys[n % shards][(n / shards) % INPUT_KEYS_PER_SHARD];
        (Arc::clone(key), *hash)
    }
}

/// The bytes of the records a test injects into one stream, written one after another into
/// shared chunks: a record is a slice of its chunk, so storing it allocates nothing of its own
/// and each delivery's copy of it only counts a reference (a buffer of its own would be
/// allocated once, and again when it is first shared). A chunk lives as long as a record in it,
/// which the stream's log keeps anyway.
#[derive(Debug, Default)]
struct Arena(BytesMut);

/// The size of an [`Arena`]'s chunks: about 1,500 small records each.
const ARENA_CHUNK: usize = 64 * 1024;

impl Arena {
    /// `payload` with `headers` in our envelope, as a record of its own.
    fn encode(&mut self, payload: &[u8], headers: &ruststream::HeaderMap) -> Bytes {
        let len = envelope::encoded_len(payload, headers);
        if self.0.capacity() < len {
            self.0 = BytesMut::with_capacity(ARENA_CHUNK.max(len));
        }
        envelope::encode_into(&mut self.0, payload, headers);
        self.0.split().freeze()
    }
}

/// The streams every connection of one broker (and its clones) shares.
#[derive(Debug, Default)]
pub(crate) struct World {
    streams: Mutex<HashMap<String, StreamLog>>,
    next_sequence: AtomicU64,
    coordinator: OnceLock<Coordinator>,
}

/// One in-process subscription.
#[derive(Debug)]
pub(crate) struct InProcessSubscription {
    /// Itself, for a seek through the seeker (which holds it as a [`Source`]).
    me: Weak<InProcessSubscription>,
    stream: Arc<str>,
    tx: mpsc::UnboundedSender<Item>,
    /// Each shard's seek generation, as a live shard's watermark keeps it: a seek of one shard
    /// makes only that shard's deliveries stale.
    generations: Mutex<HashMap<Arc<str>, u64>>,
    closed: AtomicBool,
    broker_closed: Arc<AtomicBool>,
    world: Weak<World>,
    /// The runtime the broker connected on, for a delayed redelivery's timer.
    runtime: tokio::runtime::Handle,
}

/// The harness's hold on one in-process delivery while it is settled, released once when it is
/// dropped.
#[derive(Debug)]
pub(crate) struct InProcessSettle {
    coordinator: Option<Coordinator>,
    sub: Arc<InProcessSubscription>,
    /// The shard's seek generation the delivery belongs to, from its ticket.
    generation: u64,
}

impl InProcessSettle {
    /// Refuses a settlement once the broker shut down.
    fn refuse_if_closed(&self) -> Result<(), AckError> {
        if self.is_closed() {
            return Err(AckError::Broker(Box::new(KinesisError::ShutDown {
                what: "settling a delivery",
            })));
        }
        Ok(())
    }

    fn is_closed(&self) -> bool {
        self.sub.broker_closed.load(Ordering::Acquire)
    }

    fn is_current(&self, shard: &str) -> bool {
        self.sub.is_current(shard, self.generation)
    }

    /// Delivers `record` again to its subscription, after `delay`, as a live shard does with a
    /// record its handler handed back; nothing once a seek made it stale or the subscription
    /// closed. The new delivery is counted before this one's count is released, so the harness
    /// sees no moment without it.
    fn redeliver(
        self,
        record: Record,
        shard: &Arc<str>,
        attempt: u64,
        delay: std::time::Duration,
    ) -> Result<(), AckError> {
        let generation = self.generation;
        self.refuse_if_closed()?;
        if !self.is_current(shard) {
            return Ok(());
        }
        let Some(world) = self.sub.world.upgrade() else {
            return Ok(());
        };
        let sub = Arc::clone(&self.sub);
        let shard = Arc::clone(shard);
        if delay.is_zero() {
            world.hand_out(&sub, shard, record, generation, attempt + 1);
            return Ok(());
        }
        // The delivery is released now and its redelivery counted when the delay ran out, on the
        // harness's timers when a test drives the clock.
        let redeliver = move || {
            if sub.is_current(&shard, generation) {
                world.hand_out(&sub, shard, record, generation, attempt + 1);
            }
        };
        match self.coordinator.clone() {
            Some(coordinator) => {
                drop(self);
                coordinator.schedule_redelivery(delay, redeliver);
            }
            None => {
                let runtime = self.sub.runtime.clone();
                drop(self);
                runtime.spawn(async move {
                    tokio::time::sleep(delay).await;
                    redeliver();
                });
            }
        }
        Ok(())
    }
}

/// An in-process delivery's ticket: its shard's seek generation, and whether the harness
/// counted it (an index of [`COUNTED`]).
const COUNTED: u64 = 1;

impl InProcessSubscription {
    /// The harness's hold on the delivery `ticket` names, released (counted as consumed) when
    /// dropped.
    fn hold(&self, ticket: Ticket) -> Option<InProcessSettle> {
        let sub = self.me.upgrade()?;
        let coordinator = (ticket.index == COUNTED)
            .then(|| self.world.upgrade()?.coordinator.get().cloned())
            .flatten();
        Some(InProcessSettle {
            coordinator,
            sub,
            generation: ticket.generation,
        })
    }
}

/// An in-process delivery settles against its subscription: nothing to checkpoint, only the
/// harness's count to release, and a seek generation per shard.
impl Settlement for InProcessSubscription {
    fn on_settle(&self, ticket: Ticket) -> Result<(), AckError> {
        self.hold(ticket)
            .map_or(Ok(()), |hold| hold.refuse_if_closed())
    }

    fn on_forget(&self, ticket: Ticket) {
        drop(self.hold(ticket));
    }

    fn on_hand_back(
        &self,
        ticket: Ticket,
        record: Record,
        shard: &Arc<str>,
        attempt: u64,
        delay: std::time::Duration,
    ) -> Result<(), AckError> {
        match self.hold(ticket) {
            Some(hold) => hold.redeliver(record, shard, attempt, delay),
            None => Ok(()),
        }
    }

    fn standing(&self, ticket: Ticket, shard: &str) -> Standing {
        if self.is_current(shard, ticket.generation) {
            Standing::Current
        } else {
            Standing::Stale
        }
    }
}

impl Drop for InProcessSettle {
    fn drop(&mut self) {
        if let Some(coordinator) = &self.coordinator {
            coordinator.consumed();
        }
    }
}

/// Which shard of `shards` a partition key lands in: its MD5 as a 128-bit hash key, in equal
/// ranges, as Kinesis maps keys.
#[cfg(test)]
fn shard_of(partition_key: &str, shards: usize) -> usize {
    shard_of_hash(hash_key(partition_key), shards)
}

/// A partition key's hash key: its MD5 as a 128-bit number, as Kinesis hashes keys.
fn hash_key(partition_key: &str) -> u128 {
    u128::from_be_bytes(Md5::digest(partition_key.as_bytes()).into())
}

/// Which shard of `shards` a hash key lands in, in equal ranges.
fn shard_of_hash(hash: u128, shards: usize) -> usize {
    let width = u128::MAX / shards as u128;
    usize::try_from(hash / width).unwrap_or(0).min(shards - 1)
}

/// The id of the shard at `index`, as Kinesis names it; made once per index and shared after
/// (every delivery names its shard).
fn shard_id(index: usize) -> Arc<str> {
    static IDS: Mutex<Vec<Arc<str>>> = Mutex::new(Vec::new());
    let mut ids = IDS.lock().unwrap_or_else(PoisonError::into_inner);
    while ids.len() <= index {
        let next = ids.len();
        ids.push(Arc::from(format!("shardId-{next:012}")));
    }
    Arc::clone(&ids[index])
}

/// A random partition key (32 hex digits), as a publish without one gets, in one allocation.
fn random_key() -> Arc<str> {
    fixed_width::<32>(rand::random::<u128>(), 16)
}

/// The sequence number of the `n`th record written: 56 digits, as Kinesis's are, in one
/// allocation.
fn sequence_number(n: u64) -> Arc<str> {
    fixed_width::<56>(u128::from(n), 10)
}

/// `n` in `radix` (10 or 16), zero-padded to `WIDTH` digits, formatted on the stack: the one
/// allocation is the shared string.
fn fixed_width<const WIDTH: usize>(n: u128, radix: u32) -> Arc<str> {
    let mut digits = [b'0'; WIDTH];
    let mut rest = n;
    for digit in digits.iter_mut().rev() {
        if rest == 0 {
            break;
        }
        let value = u32::try_from(rest % u128::from(radix)).unwrap_or(0);
        *digit = char::from_digit(value, radix).map_or(b'0', |c| c as u8);
        rest /= u128::from(radix);
    }
    Arc::from(std::str::from_utf8(&digits).unwrap_or_default())
}

impl World {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, StreamLog>> {
        self.streams.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn create(streams: &mut HashMap<String, StreamLog>, name: &str, shards: u32) {
        streams.entry(name.to_owned()).or_insert_with(|| StreamLog {
            shards: (0..shards.max(1)).map(|_| Vec::new()).collect(),
            ..StreamLog::default()
        });
    }

    /// Writes one record, as `PutRecords` would, and hands it to every open subscription.
    pub(crate) fn put(&self, stream: &str, record: OutRecord) -> Result<(), KinesisError> {
        let OutRecord {
            data,
            partition_key,
            explicit_hash_key,
        } = record;
        // An explicit hash key routes the record as Kinesis does, in place of its key's hash.
        let hash = explicit_hash_key
            .and_then(|key| key.parse::<u128>().ok())
            .unwrap_or_else(|| hash_key(&partition_key));
        let mut streams = self.lock();
        let Some(log) = streams.get_mut(stream) else {
            return Err(KinesisError::StreamNotFound {
                stream: stream.to_owned(),
            });
        };
        self.append(log, data, Arc::from(partition_key), hash);
        Ok(())
    }

    /// Appends a record routed by `hash` to `log`, and hands it to every open subscription.
    fn append(&self, log: &mut StreamLog, data: Bytes, partition_key: Arc<str>, hash: u128) {
        let order = self.next_sequence.fetch_add(1, Ordering::Relaxed);
        let shard = shard_of_hash(hash, log.shards.len());
        let stored = Stored {
            data,
            partition_key,
            sequence: sequence_number(order + 1),
            arrived_ms: i64::try_from(epoch_millis()).unwrap_or(i64::MAX),
            order,
        };
        log.subscribers.retain(|sub| sub.strong_count() > 0);
        for sub in log.subscribers.iter().filter_map(Weak::upgrade) {
            self.deliver(&sub, shard, &stored, 0);
        }
        log.shards[shard].push(stored);
    }

    /// Delivers `stored` to `sub`: its user records when it is a KPL aggregate, from the one at
    /// index `from` on (a seek to a user record), as a live reader does.
    fn deliver(&self, sub: &Arc<InProcessSubscription>, shard: usize, stored: &Stored, from: u64) {
        if sub.closed.load(Ordering::Acquire) {
            return;
        }
        let fetched = FetchedRecord {
            data: stored.data.clone(),
            partition_key: Arc::clone(&stored.partition_key),
            sequence: Arc::clone(&stored.sequence),
            arrived_ms: Some(stored.arrived_ms),
        };
        let shard = shard_id(shard);
        let generation = sub.generation_of(&shard);
        for record in record::decoded(fetched) {
            if record
                .sub_sequence
                .is_none_or(|sub_sequence| sub_sequence >= from)
            {
                self.hand_out(sub, Arc::clone(&shard), record, generation, 1);
            }
        }
    }

    /// Hands `record` to `sub`, its `attempt`th delivery, counted by the harness until settled.
    fn hand_out(
        &self,
        sub: &Arc<InProcessSubscription>,
        shard: Arc<str>,
        record: Record,
        generation: u64,
        attempt: u64,
    ) {
        let counted = match self.coordinator.get() {
            Some(coordinator) => {
                coordinator.enqueued();
                true
            }
            None => false,
        };
        let message = KinesisMessage {
            record,
            stream: Arc::clone(&sub.stream),
            shard,
            attempt,
            seeker: KinesisSeeker::new(Arc::clone(sub) as Arc<dyn Source>),
            refused: OnceLock::new(),
            settle: Some(Hold {
                target: Arc::clone(sub) as Arc<dyn Settlement>,
                ticket: Ticket {
                    generation,
                    index: u64::from(counted),
                },
            }),
        };
        // A closed receiver gives the message back: its settle hold releases the harness count,
        // and nothing hands it back again (there is no subscription left to hand it to).
        if let Err(tokio::sync::mpsc::error::SendError(Ok(mut message))) = sub.tx.send(Ok(message))
            && let Some(hold) = message.settle.take()
        {
            hold.target.on_forget(hold.ticket);
        }
    }

    /// Opens a subscription at the tip of `stream`.
    pub(crate) fn subscribe(
        self: &Arc<Self>,
        stream: &str,
        create_if_missing: Option<u32>,
        broker_closed: Arc<AtomicBool>,
        runtime: tokio::runtime::Handle,
    ) -> Result<(Arc<InProcessSubscription>, mpsc::UnboundedReceiver<Item>), KinesisError> {
        let mut streams = self.lock();
        if let Some(shards) = create_if_missing {
            Self::create(&mut streams, stream, shards);
        }
        let Some(log) = streams.get_mut(stream) else {
            return Err(KinesisError::StreamNotFound {
                stream: stream.to_owned(),
            });
        };
        let (tx, rx) = mpsc::unbounded_channel();
        let sub = Arc::new_cyclic(|me| InProcessSubscription {
            me: me.clone(),
            stream: Arc::from(stream),
            tx,
            generations: Mutex::default(),
            closed: AtomicBool::new(false),
            broker_closed,
            world: Arc::downgrade(self),
            runtime,
        });
        log.subscribers.push(Arc::downgrade(&sub));
        Ok((sub, rx))
    }
}

impl InProcessSubscription {
    /// Whether a delivery of `shard` in seek `generation` still counts: the subscription is
    /// open and no seek moved the shard since.
    fn is_current(&self, shard: &str, generation: u64) -> bool {
        !self.closed.load(Ordering::Acquire) && self.generation_of(shard) == generation
    }

    /// The seek generation of `shard`'s deliveries.
    fn generation_of(&self, shard: &str) -> u64 {
        let generations = self
            .generations
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        // No seek yet (the common case): no key to hash.
        if generations.is_empty() {
            return 0;
        }
        generations.get(shard).copied().unwrap_or(0)
    }

    /// Restarts the subscription at `to`: what the stream holds from there is delivered again.
    pub(crate) fn seek_to(self: &Arc<Self>, to: &KinesisPosition) -> Result<(), KinesisError> {
        if self.broker_closed.load(Ordering::Acquire) {
            return Err(KinesisError::ShutDown { what: "seeking" });
        }
        let Some(world) = self.world.upgrade() else {
            return Err(KinesisError::ShutDown { what: "seeking" });
        };
        let streams = world.lock();
        let Some(log) = streams.get(self.stream.as_ref()) else {
            return Err(KinesisError::StreamNotFound {
                stream: self.stream.to_string(),
            });
        };
        if let Some(refused) = self.refusal(log, to) {
            return Err(refused);
        }
        {
            let mut generations = self
                .generations
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            for index in 0..log.shards.len() {
                let id = shard_id(index);
                if to.applies_to(&id) {
                    *generations.entry(id).or_insert(0) += 1;
                }
            }
        }
        for (index, stored) in replay(log, to) {
            // A seek to a user record starts inside its aggregate.
            let from = match to {
                KinesisPosition::AtSubSequence {
                    sequence,
                    sub_sequence,
                    ..
                } if *stored.sequence == **sequence => *sub_sequence,
                _ => 0,
            };
            world.deliver(self, index, stored, from);
        }
        Ok(())
    }
}

impl InProcessSubscription {
    /// Why Kinesis would refuse a seek of the stream `log` to `to`: a shard it does not have,
    /// or a sequence number its shard does not hold (one of another shard, or trimmed); the
    /// seek then moves nothing.
    fn refusal(&self, log: &StreamLog, to: &KinesisPosition) -> Option<KinesisError> {
        if let Some(shard) = to.shard()
            && !(0..log.shards.len()).any(|index| *shard_id(index) == *shard)
        {
            return Some(KinesisError::Seek {
                stream: self.stream.to_string(),
                reason: format!("the stream has no shard {shard}"),
            });
        }
        // Kinesis refuses a sequence number its shard does not hold (one of another shard, or
        // trimmed), and the seek moves nothing.
        if let KinesisPosition::AtSequence { shard, sequence }
        | KinesisPosition::AtSubSequence {
            shard, sequence, ..
        } = to
            && let Some(index) = (0..log.shards.len()).find(|index| *shard_id(*index) == **shard)
            && !log.shards[index]
                .iter()
                .any(|stored| *stored.sequence == **sequence)
        {
            return Some(KinesisError::Seek {
                stream: self.stream.to_string(),
                reason: format!(
                    "Kinesis refused the position {to:?} for shard {shard}: the shard holds no \
                     record {sequence}; every shard reads on where it was"
                ),
            });
        }
        None
    }
}

/// What a seek of `log` to `to` delivers again, in the stream's publish order.
fn replay<'a>(log: &'a StreamLog, to: &KinesisPosition) -> Vec<(usize, &'a Stored)> {
    let mut replay: Vec<(usize, &Stored)> = Vec::new();
    for (index, shard) in log.shards.iter().enumerate() {
        let id = shard_id(index);
        if !to.applies_to(&id) {
            continue;
        }
        replay.extend(
            shard
                .iter()
                .filter(|stored| match to {
                    KinesisPosition::TrimHorizon => true,
                    KinesisPosition::Latest => false,
                    KinesisPosition::AtTimestamp(at) => {
                        let at_ms = at
                            .duration_since(std::time::UNIX_EPOCH)
                            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
                        stored.arrived_ms >= at_ms
                    }
                    KinesisPosition::AtSequence { sequence, .. }
                    | KinesisPosition::AtSubSequence { sequence, .. } => {
                        crate::settings::position::sequence_cmp(&stored.sequence, sequence).is_ge()
                    }
                })
                .map(|stored| (index, stored)),
        );
    }
    replay.sort_by_key(|(_, stored)| stored.order);
    replay
}

impl Source for InProcessSubscription {
    fn seek(&self, to: KinesisPosition) -> Seeking<'_> {
        let sought = match self.me.upgrade() {
            Some(me) => me.seek_to(&to),
            None => Err(KinesisError::ShutDown { what: "seeking" }),
        };
        Box::pin(std::future::ready(sought))
    }

    fn close(&self) {
        self.closed.store(true, Ordering::Release);
    }
}

impl World {
    /// The harness's coordinator, which counts deliveries in flight and drives delayed ones.
    pub(crate) fn install_coordinator(&self, coordinator: Coordinator) {
        let _ = self.coordinator.set(coordinator);
    }

    /// A test's input: written to `name` as a publish would be, under a random partition key of
    /// the shard next in turn (see [`StreamLog::input_key`]);
    /// `create_streams` creates a missing stream with that many shards, as a subscription would.
    pub(crate) fn inject(&self, message: OutgoingMessage<'_>, create_streams: Option<u32>) {
        let (name, payload, headers) = message.into_parts();
        let mut streams = self.lock();
        if let Some(shards) = create_streams {
            Self::create(&mut streams, name, shards);
        }
        let Some(log) = streams.get_mut(name) else {
            // Kinesis refuses a record for a stream it does not have; so does the test stream.
            let err = KinesisError::StreamNotFound {
                stream: name.to_owned(),
            };
            tracing::warn!(error = %err, "in-process kinesis refused an injected record");
            return;
        };
        let data = log.arena.encode(payload, &headers);
        let (key, hash) = log.input_key();
        self.append(log, data, key, hash);
    }

    /// What was published to `name`, in order: each record as its publish sent it, and each
    /// user record of an aggregate as its own message. Read back from the stream's records when
    /// a test asks, so a publish keeps no second copy.
    pub(crate) fn published(&self, name: &str) -> Vec<RawMessage> {
        let streams = self.lock();
        let Some(log) = streams.get(name) else {
            return Vec::new();
        };
        let mut records: Vec<&Stored> = log.shards.iter().flatten().collect();
        records.sort_by_key(|stored| stored.order);
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

/// The payload a test reads back from an in-process stream, for the crate's own tests.
#[cfg(test)]
pub(crate) fn headers_of(record: &Bytes) -> ruststream::HeaderMap {
    envelope::decode(record.clone()).1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn injected_records_spread_evenly_over_the_shards_under_keys_of_their_shard() {
        for shards in [1usize, 3, 48] {
            let mut log = StreamLog {
                shards: (0..shards).map(|_| Vec::new()).collect(),
                ..StreamLog::default()
            };
            let mut per_shard = vec![0usize; shards];
            let mut keys = std::collections::HashSet::new();
            for _ in 0..shards * 40 {
                let (key, hash) = log.input_key();
                assert_eq!(hash, hash_key(&key), "the hash key is the key's MD5");
                per_shard[shard_of_hash(hash, shards)] += 1;
                keys.insert(key);
            }
            assert!(per_shard.iter().all(|n| *n == 40), "{per_shard:?}");
            assert_eq!(keys.len(), shards * INPUT_KEYS_PER_SHARD);
        }
    }

    #[test]
    fn one_key_always_lands_in_one_shard_and_keys_spread() {
        let shards: std::collections::HashSet<usize> =
            (0..200).map(|i| shard_of(&format!("key-{i}"), 4)).collect();
        assert_eq!(shards.len(), 4, "200 keys reach all four shards");
        assert_eq!(shard_of("customer-1", 4), shard_of("customer-1", 4));
        assert_eq!(shard_of("anything", 1), 0);
    }

    #[tokio::test]
    async fn a_seek_of_one_shard_leaves_the_others_deliveries_current() {
        let world = Arc::new(World::default());
        let (sub, mut rx) = world
            .subscribe(
                "orders",
                Some(2),
                Arc::default(),
                tokio::runtime::Handle::current(),
            )
            .unwrap();
        // Keys that land in each of the two shards.
        let keys: Vec<String> = (0..64).map(|i| format!("key-{i}")).collect();
        let key_in = |shard| {
            keys.iter()
                .find(|key| shard_of(key, 2) == shard)
                .unwrap()
                .clone()
        };
        for shard in [0, 1, 0, 1] {
            let record = OutRecord {
                data: Bytes::from_static(b"x"),
                partition_key: key_in(shard),
                explicit_hash_key: None,
            };
            world.put("orders", record).unwrap();
        }
        let mut delivered = Vec::new();
        while let Ok(Ok(message)) = rx.try_recv() {
            delivered.push(message);
        }
        assert_eq!(delivered.len(), 4);
        let first_of_0 = delivered.iter().find(|m| *m.shard == *shard_id(0)).unwrap();
        // Kinesis refuses a sequence number the shard does not hold; nothing moves.
        let elsewhere = delivered
            .iter()
            .find(|m| *m.shard == *shard_id(1))
            .unwrap()
            .record
            .sequence
            .clone();
        let refused = sub.seek_to(&KinesisPosition::at_sequence(shard_id(0), elsewhere));
        assert!(
            matches!(&refused, Err(KinesisError::Seek { reason, .. }) if reason.contains("refused")),
            "{refused:?}"
        );
        let to = KinesisPosition::at_sequence(shard_id(0), Arc::clone(&first_of_0.record.sequence));
        sub.seek_to(&to).unwrap();
        for message in &delivered {
            assert_eq!(
                message.is_current(),
                *message.shard == *shard_id(1),
                "only the sought shard's deliveries go stale"
            );
        }
        // The sought shard's records come again. (Kept: a delivery dropped unsettled would
        // come back once more.)
        let mut again = Vec::new();
        while let Ok(Ok(message)) = rx.try_recv() {
            assert_eq!(*message.shard, *shard_id(0));
            again.push(message);
        }
        assert_eq!(again.len(), 2);
        sub.close();
    }

    #[tokio::test]
    async fn an_aggregate_arrives_as_its_user_records_and_a_seek_names_one() {
        use ruststream::{IncomingMessage, Positioned};
        let world = Arc::new(World::default());
        let (sub, mut rx) = world
            .subscribe(
                "orders",
                Some(1),
                Arc::default(),
                tokio::runtime::Handle::current(),
            )
            .unwrap();
        let mut aggregate = crate::kinesis::kpl::Aggregate::new();
        for n in 0..4 {
            aggregate.push(&format!("key-{n}"), None, format!("user-{n}").into_bytes());
        }
        let record = OutRecord {
            data: Bytes::from(aggregate.encode()),
            partition_key: "outer".to_owned(),
            explicit_hash_key: None,
        };
        world.put("orders", record).unwrap();
        let mut delivered = Vec::new();
        while let Ok(Ok(message)) = rx.try_recv() {
            delivered.push(message);
        }
        let seen: Vec<_> = delivered
            .iter()
            .map(|m| (m.payload().to_vec(), m.partition_key_str().to_owned()))
            .collect();
        let want: Vec<_> = (0..4)
            .map(|n| (format!("user-{n}").into_bytes(), format!("key-{n}")))
            .collect();
        assert_eq!(seen, want);
        // A seek to the third user record's position delivers it and the one after.
        let third = delivered[2].position();
        assert!(
            matches!(
                third,
                KinesisPosition::AtSubSequence {
                    sub_sequence: 2,
                    ..
                }
            ),
            "{third:?}"
        );
        sub.seek_to(&third).unwrap();
        // (Kept: a delivery dropped unsettled would come back once more.)
        let mut again = Vec::new();
        while let Ok(Ok(message)) = rx.try_recv() {
            again.push(message);
        }
        let subs: Vec<_> = again
            .iter()
            .map(KinesisMessage::sub_sequence_number)
            .collect();
        assert_eq!(subs, [Some(2), Some(3)]);
        sub.close();
    }

    #[test]
    fn sequence_numbers_and_keys_are_fixed_width_as_formatted() {
        assert_eq!(&*sequence_number(42), format!("{:056}", 42).as_str());
        assert_eq!(
            &*sequence_number(u64::MAX),
            format!("{:056}", u64::MAX).as_str()
        );
        assert_eq!(
            &*fixed_width::<32>(0xab_cdef, 16),
            format!("{:032x}", 0xab_cdef).as_str()
        );
        let key = random_key();
        assert!(
            key.len() == 32
                && key
                    .bytes()
                    .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        );
    }

    #[test]
    fn a_plain_record_has_no_headers() {
        assert!(headers_of(&Bytes::from_static(b"plain")).is_empty());
    }
}

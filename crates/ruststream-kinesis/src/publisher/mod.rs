//! Publishing: the policy a mount site names, the per-message options, and the live publisher,
//! which writes with `PutRecords` whatever is ready at once.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, PoisonError};
use std::time::Duration;

use futures::StreamExt;
use rand::Rng;
use ruststream::runtime::{PublishBuilder, PublishSink};
use ruststream::{Lend, OutgoingMessage, Publisher};
use tokio::sync::{mpsc, oneshot};

use crate::KinesisError;
use crate::kinesis::api::{self, OutRecord, PutOutcome};
use crate::kinesis::envelope;
#[cfg(feature = "testing")]
use crate::kinesis::in_process::InProcessKinesis;
use crate::settings::validate::{self, MAX_PUT_RECORDS, MAX_PUT_RECORDS_BYTES};
use crate::telemetry::Meters;

mod pack;
mod rounds;

/// How often a record Kinesis rejected inside a `PutRecords` answer is tried again before the
/// publish reports it.
const PUT_ATTEMPTS: u32 = 5;
/// How many scheduler turns the writer waits for more records before it sends a call that is
/// not full: enough for publishers woken by the previous answer to queue again, far below a
/// network round trip.
const GATHER_TURNS: u32 = 3;
/// How many rounds of calls the writer has out at once. A second round goes while the first is
/// answered, so a call that left small (the first publish of a burst, taken before the rest
/// queued) does not keep the rest waiting for its answer; the records of a key the first round
/// carries wait for it ([`rounds::Routes`]).
const ROUNDS_IN_FLIGHT: usize = 2;

/// Per-message settings of a Kinesis publish: every field optional, so a call carries only what
/// it adjusted.
///
/// # Examples
///
/// ```
/// use ruststream_kinesis::KinesisOptions;
///
/// let options = KinesisOptions::default().with_partition_key("customer-42");
/// assert_eq!(options.partition_key.as_deref(), Some("customer-42"));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct KinesisOptions {
    /// The record's partition key: records with one key land in one shard, in order.
    pub partition_key: Option<String>,
}

impl KinesisOptions {
    /// These options with `key` as the partition key.
    #[must_use]
    pub fn with_partition_key(mut self, key: impl Into<String>) -> Self {
        self.partition_key = Some(key.into());
        self
    }
}

/// The call-site step that sets one publish's partition key.
///
/// It appears on the builder of a publisher whose options are [`KinesisOptions`]: the live
/// publisher of a connected broker, or an `Out` slot bound to `impl Publisher<Options =
/// KinesisOptions>`. Records with one key land in one shard, in publish order.
///
/// # Examples
///
/// ```no_run
/// use ruststream_kinesis::prelude::*;
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Debug, PartialEq, Deserialize, Serialize, Outgoing)]
/// #[outgoing(name = "orders")]
/// struct Order {
///     id: u64,
///     sku: String,
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let connected = KinesisBroker::new().connect().await?;
/// let publisher = connected.publisher().await?;
/// let order = Order { id: 7, sku: "sku-1".to_owned() };
/// // The orders of one SKU stay in order: they share a shard.
/// publisher.message(&order).partition_key(order.sku.clone()).publish().await?;
/// # Ok(())
/// # }
/// ```
pub trait KinesisPublishSteps {
    /// Publishes this one message under partition key `key`.
    #[must_use]
    fn partition_key(self, key: impl Into<String>) -> Self;
}

impl<Sink, Body, Enc, Hdrs, Dest> KinesisPublishSteps
    for PublishBuilder<Sink, Body, Enc, Hdrs, Dest>
where
    Sink: PublishSink<Options = KinesisOptions>,
{
    fn partition_key(mut self, key: impl Into<String>) -> Self {
        self.options_mut()
            .get_or_insert_with(KinesisOptions::default)
            .partition_key = Some(key.into());
        self
    }
}

/// The publish policy: where a message goes is its type's or the call site's; this holds the
/// defaults.
///
/// Without a partition key of its own (the policy's or the call's), each record gets a random
/// one, which spreads records over the shards.
///
/// # Examples
///
/// ```
/// use ruststream_kinesis::KinesisPublish;
///
/// // Every record of this publisher lands in one shard, in publish order.
/// let ordered = KinesisPublish::default().partition_key("all-in-order");
/// # let _ = ordered;
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KinesisPublish {
    partition_key: Option<String>,
    aggregate: bool,
}

impl KinesisPublish {
    /// The partition key every publish takes unless the call names one; `None`: a random one.
    #[cfg(feature = "asyncapi")]
    pub(crate) fn fixed_key(&self) -> Option<&str> {
        self.partition_key.as_deref()
    }

    /// Whether records go out as KPL aggregates.
    #[cfg(feature = "asyncapi")]
    pub(crate) fn aggregates(&self) -> bool {
        self.aggregate
    }

    /// Publishes under `key` unless the call names another one.
    #[must_use]
    pub fn partition_key(mut self, key: impl Into<String>) -> Self {
        self.partition_key = Some(key.into());
        self
    }

    /// Packs the records ready at once into KPL aggregates, one per destination shard, up to
    /// the stream's record limit, as the Kinesis Producer Library does: a shard takes at most
    /// 1,000 records a second but 1 MiB, so small records go many times faster. Consumers that
    /// de-aggregate (this crate, the KCL, AWS's aggregation libraries) read them back as the
    /// records published, headers included; others see the aggregates. Off by default. The
    /// records of a partition key keep their order; an aggregate the service rejects is sent
    /// again whole, and every publish in it gets its answer.
    ///
    /// ```
    /// use ruststream_kinesis::KinesisPublish;
    ///
    /// let packed = KinesisPublish::default().aggregate(true);
    /// # let _ = packed;
    /// ```
    #[must_use]
    pub fn aggregate(mut self, on: bool) -> Self {
        self.aggregate = on;
        self
    }

    /// A live publisher of this policy: its writer runs on `runtime` until `closed`.
    pub(crate) fn live(
        self,
        client: &aws_sdk_kinesis::Client,
        runtime: &tokio::runtime::Handle,
        closed: &Arc<AtomicBool>,
        limits: &RecordLimits,
        meters: &Meters,
    ) -> KinesisPublisher {
        let (tx, rx) = mpsc::channel(MAX_PUT_RECORDS * 2);
        let aggregate = self.aggregate.then(|| Arc::clone(limits));
        runtime.spawn(flush(
            client.clone(),
            rx,
            Arc::clone(closed),
            aggregate,
            meters.clone(),
        ));
        self.publisher(
            Sink::Live {
                tx,
                client: client.clone(),
                meters: meters.clone(),
            },
            closed,
            limits,
        )
    }

    /// A publisher of this policy onto the in-process streams.
    #[cfg(feature = "testing")]
    pub(crate) fn in_process(
        self,
        kinesis: &Arc<InProcessKinesis>,
        closed: &Arc<AtomicBool>,
        limits: &RecordLimits,
    ) -> KinesisPublisher {
        self.publisher(Sink::InProcess(Arc::clone(kinesis)), closed, limits)
    }

    fn publisher(
        self,
        sink: Sink,
        closed: &Arc<AtomicBool>,
        limits: &RecordLimits,
    ) -> KinesisPublisher {
        KinesisPublisher {
            default_key: self.partition_key,
            #[cfg(feature = "testing")]
            aggregate: self.aggregate,
            sink,
            closed: Arc::clone(closed),
            limits: Arc::clone(limits),
        }
    }
}

/// Where a publish's answer goes.
type Done = oneshot::Sender<Result<(), KinesisError>>;

/// A record on its way, and the publishes it answers: one, or every one packed into it.
#[derive(Debug)]
struct Pending {
    stream: String,
    record: OutRecord,
    done: Vec<Done>,
    /// The shard the packer's map routed it to: written elsewhere, the map is stale.
    shard: Option<Arc<str>>,
}

impl Pending {
    /// What orders it among the stream's records: its partition key, or a packed record's
    /// explicit hash key (its shard's). The records of one route go one a call, in order.
    fn route(&self) -> &str {
        self.record
            .explicit_hash_key
            .as_deref()
            .unwrap_or(&self.record.partition_key)
    }
}

#[derive(Debug, Clone)]
enum Sink {
    Live {
        tx: mpsc::Sender<Pending>,
        client: aws_sdk_kinesis::Client,
        /// Counts the publishes refused before they reach the writer.
        meters: Meters,
    },
    #[cfg(feature = "testing")]
    InProcess(Arc<InProcessKinesis>),
}

/// The live publisher a [`KinesisPublish`] pairs into.
///
/// Each publish is checked before any call (stream name, partition key, the record limit: 1 MiB,
/// or the stream's own, asked once, for a larger record) and then queued; a background writer
/// sends everything queued at once in one `PutRecords` call per stream (up to 500 records,
/// 5 MiB; a second round of calls beside one out once it makes a full call, with no key of the
/// first's), retries records the service rejected inside the answer, and answers each publish
/// with its own record's outcome.
#[derive(Debug, Clone)]
pub struct KinesisPublisher {
    default_key: Option<String>,
    /// In process, each publish goes out as a KPL aggregate of its own (live, the writer packs).
    #[cfg(feature = "testing")]
    aggregate: bool,
    sink: Sink,
    closed: Arc<AtomicBool>,
    /// The largest record of each stream published to, read once per stream.
    limits: RecordLimits,
}

/// The largest record of each stream a broker's publishers wrote to, by stream name.
pub(crate) type RecordLimits = Arc<std::sync::Mutex<HashMap<String, usize>>>;

impl KinesisPublisher {
    /// Checks and encodes one message into a record for a stream whose records may be `limit`
    /// bytes at most.
    pub(crate) fn record(
        &self,
        stream: &str,
        payload: &[u8],
        headers: &ruststream::HeaderMap,
        options: Option<&KinesisOptions>,
        limit: usize,
    ) -> Result<OutRecord, KinesisError> {
        let partition_key = options
            .and_then(|options| options.partition_key.clone())
            .or_else(|| self.default_key.clone())
            .unwrap_or_else(random_key);
        validate::partition_key(stream, &partition_key)?;
        // Kinesis counts the partition key in the record's size.
        let size = envelope::encoded_len(payload, headers) + partition_key.len();
        validate::record_size(stream, size, limit)?;
        Ok(OutRecord {
            data: envelope::encode(payload, headers),
            partition_key,
            explicit_hash_key: None,
        })
    }

    /// The largest record `stream` accepts, for a record over the 1 MiB every stream takes:
    /// asked of the stream once, then remembered. A stream that does not exist fails the publish
    /// before any write; a stream whose limit cannot be read (no permission for
    /// `DescribeStreamSummary`) keeps the default 1 MiB.
    async fn limit_of(
        &self,
        client: &aws_sdk_kinesis::Client,
        stream: &str,
    ) -> Result<usize, KinesisError> {
        if let Some(limit) = self
            .limits
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(stream)
        {
            return Ok(*limit);
        }
        match api::max_record_bytes(client, stream).await {
            Ok(limit) => {
                self.limits
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert(stream.to_owned(), limit);
                Ok(limit)
            }
            Err(err @ KinesisError::StreamNotFound { .. }) => Err(err),
            // Not remembered: a throttled or refused look-up is tried again at the next publish.
            Err(err) => {
                tracing::debug!(stream, error = %err, "the stream's record limit could not be read; publishing with the default 1 MiB");
                Ok(validate::MAX_RECORD_BYTES)
            }
        }
    }
}

impl KinesisPublisher {
    /// A live publish: checked (against the stream's own record limit only for a record over
    /// 1 MiB), queued for the writer, and answered with the writer's answer of its record.
    async fn publish_live(
        &self,
        tx: &mpsc::Sender<Pending>,
        client: &aws_sdk_kinesis::Client,
        meters: &Meters,
        stream: &str,
        msg: &OutgoingMessage<'_, &[u8]>,
        options: Option<&KinesisOptions>,
    ) -> Result<(), KinesisError> {
        // Every stream takes records of 1 MiB: only a larger one needs the stream's own limit,
        // so an ordinary publish makes no call but its write.
        let record = |limit| self.record(stream, msg.payload(), msg.headers(), options, limit);
        let checked = match record(validate::MAX_RECORD_BYTES) {
            Err(KinesisError::RecordTooLarge { .. }) => match self.limit_of(client, stream).await {
                Ok(limit) => record(limit),
                Err(err) => Err(err),
            },
            checked => checked,
        };
        let record = match checked {
            Ok(record) => record,
            Err(err) => {
                // Refused before any write: the writer never counts it.
                meters.published(stream, 0, 1);
                return Err(err);
            }
        };
        let (done, answer) = oneshot::channel();
        let pending = Pending {
            stream: stream.to_owned(),
            record,
            done: vec![done],
            shard: None,
        };
        // The writer answers (and counts) every publish it took; one it never took, or dropped
        // unanswered at shutdown, is counted here.
        if tx.send(pending).await.is_ok()
            && let Ok(answered) = answer.await
        {
            return answered;
        }
        meters.published(stream, 0, 1);
        Err(KinesisError::ShutDown { what: "publishing" })
    }
}

fn random_key() -> String {
    format!("{:032x}", rand::rng().random::<u128>())
}

impl Publisher for KinesisPublisher {
    type Payload = Lend;
    type Error = KinesisError;
    type Options = KinesisOptions;

    async fn publish(
        &self,
        msg: OutgoingMessage<'_, &[u8]>,
        options: Option<&KinesisOptions>,
    ) -> Result<(), KinesisError> {
        if self.closed.load(Ordering::Acquire) {
            return Err(KinesisError::ShutDown { what: "publishing" });
        }
        let stream = msg.name();
        validate::stream_name(stream)?;
        match &self.sink {
            Sink::Live { tx, client, meters } => {
                self.publish_live(tx, client, meters, stream, &msg, options)
                    .await
            }
            #[cfg(feature = "testing")]
            Sink::InProcess(kinesis) => {
                let record = self.record(
                    stream,
                    msg.payload(),
                    msg.headers(),
                    options,
                    validate::MAX_RECORD_BYTES,
                )?;
                // Nothing waits to be written with it: an aggregate of its own, which a
                // subscriber reads as user record 0.
                let record = if self.aggregate {
                    pack::alone(record)
                } else {
                    record
                };
                kinesis.put(stream, record)
            }
        }
    }
}

/// The background writer of one publisher: takes everything queued, writes it per stream, and
/// answers each publish.
///
/// With nothing out, what is queued goes at once (after a few scheduler turns for more). With
/// one round out, the next goes beside it only once it makes a full call, else it waits for the
/// first's answer: a burst's first publish, taken alone, does not hold the rest back, and calls
/// stay full. At most [`ROUNDS_IN_FLIGHT`] rounds are out, none carrying a route another
/// carries. `aggregate`: the records are packed into KPL aggregates, within the record limits
/// of each stream as known, one round at a time.
async fn flush(
    client: aws_sdk_kinesis::Client,
    mut rx: mpsc::Receiver<Pending>,
    closed: Arc<AtomicBool>,
    aggregate: Option<RecordLimits>,
    meters: Meters,
) {
    let mut writer = Writer {
        client,
        aggregate,
        meters,
        shard_maps: pack::ShardMaps::default(),
        routes: rounds::Routes::default(),
        held: Vec::new(),
    };
    // Packed records go one round at a time: a packed record's route is its shard's hash key
    // by the shard map, which can change between two rounds (listed again, or not listed and
    // the records sent plain), so two rounds out could carry one key into one shard by two
    // routes; and a batch packed apart from what is held makes smaller aggregates.
    let most_out = if writer.aggregate.is_some() {
        1
    } else {
        ROUNDS_IN_FLIGHT
    };
    let mut in_flight = futures::stream::FuturesUnordered::new();
    let mut queued = Queued::default();
    let mut open = true;
    loop {
        // Taken and not yet sent stays bounded: past it, publishers wait on the channel.
        let room =
            in_flight.len() < most_out && queued.records.len() + writer.held.len() < Queued::MOST;
        let mut released = false;
        tokio::select! {
            biased;
            Some(ended) = in_flight.next() => {
                writer.ended(ended);
                released = true;
            }
            first = rx.recv(), if open && room => match first {
                Some(first) => queued.take(first, &mut rx),
                None => open = false,
            },
            // Nothing out (so nothing held), nothing queued, and nothing more to come.
            else => break,
        }
        let go = match in_flight.len() {
            0 => {
                if !queued.records.is_empty() {
                    queued.gather(&mut rx).await;
                }
                !queued.records.is_empty() || !writer.held.is_empty()
            }
            // Beside a round out: a full call, the last records, or what waited for the round
            // that just ended.
            n if n < most_out => queued.is_full() || !open || (released && !writer.held.is_empty()),
            _ => false,
        };
        if go && let Some(round) = writer.round(std::mem::take(&mut queued).records).await {
            in_flight.push(round);
        }
        if closed.load(Ordering::Acquire) && rx.is_empty() {
            // Keep answering queued publishes with an error rather than writing after shutdown.
            rx.close();
        }
    }
}

/// The records the writer took and has not sent yet.
#[derive(Debug, Default)]
struct Queued {
    records: Vec<Pending>,
    bytes: usize,
}

impl Queued {
    /// At most this many records a round (of several streams, in several calls).
    const MOST: usize = MAX_PUT_RECORDS * 4;

    /// `first`, and whatever is queued behind it.
    fn take(&mut self, first: Pending, rx: &mut mpsc::Receiver<Pending>) {
        self.push(first);
        while self.has_room()
            && let Ok(next) = rx.try_recv()
        {
            self.push(next);
        }
    }

    /// What comes within a few scheduler turns, while a call would not be full: publishers
    /// answered by the previous call are about to queue their next records, which then join
    /// this call rather than start a small one of their own.
    async fn gather(&mut self, rx: &mut mpsc::Receiver<Pending>) {
        let mut idle_turns = 0;
        while self.has_room() {
            match rx.try_recv() {
                Ok(next) => {
                    self.push(next);
                    idle_turns = 0;
                }
                Err(_) if idle_turns < GATHER_TURNS && !self.is_full() => {
                    idle_turns += 1;
                    tokio::task::yield_now().await;
                }
                Err(_) => break,
            }
        }
    }

    fn push(&mut self, pending: Pending) {
        self.bytes += pending.record.data.len();
        self.records.push(pending);
    }

    fn has_room(&self) -> bool {
        self.records.len() < Self::MOST && self.bytes <= MAX_PUT_RECORDS_BYTES * 4
    }

    /// Whether the records make a full `PutRecords` call.
    fn is_full(&self) -> bool {
        self.records.len() >= MAX_PUT_RECORDS || self.bytes >= MAX_PUT_RECORDS_BYTES
    }
}

/// `records` by stream, each stream's in their order.
fn grouped_by_stream(records: Vec<Pending>) -> HashMap<String, Vec<Pending>> {
    let mut by_stream: HashMap<String, Vec<Pending>> = HashMap::new();
    for pending in records {
        by_stream
            .entry(pending.stream.clone())
            .or_default()
            .push(pending);
    }
    by_stream
}

/// What one round of calls answers: per stream, the routes it carried, and whether a record
/// routed by the packer's shard map landed in another shard.
type RoundEnded = Vec<(String, HashSet<String>, bool)>;

/// The writer's state between rounds.
struct Writer {
    client: aws_sdk_kinesis::Client,
    aggregate: Option<RecordLimits>,
    meters: Meters,
    shard_maps: pack::ShardMaps,
    routes: rounds::Routes,
    /// Records whose route a round in flight carries, in publish order.
    held: Vec<Pending>,
}

impl Writer {
    /// The next round: the records held for routes now free, then `batch` (packed when the
    /// writer aggregates), each stream's in one `write_stream`; `None` when nothing may go.
    async fn round(
        &mut self,
        batch: Vec<Pending>,
    ) -> Option<impl Future<Output = RoundEnded> + use<>> {
        let mut by_stream = grouped_by_stream(batch);
        if let Some(limits) = &self.aggregate {
            for (stream, pending) in &mut by_stream {
                let Some(ranges) = self.shard_maps.of(&self.client, stream).await else {
                    continue;
                };
                let limit = limits
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .get(stream)
                    .copied()
                    .unwrap_or(validate::MAX_RECORD_BYTES);
                *pending = pack::pack(std::mem::take(pending), ranges, limit);
            }
        }
        // What waited goes before what came since (held records are packed already).
        for (stream, mut pending) in grouped_by_stream(std::mem::take(&mut self.held)) {
            let newer = by_stream.remove(&stream).unwrap_or_default();
            pending.extend(newer);
            by_stream.insert(stream, pending);
        }
        let mut streams = Vec::with_capacity(by_stream.len());
        for (stream, pending) in by_stream {
            let (go, claimed) = self.routes.claim(&stream, pending, &mut self.held);
            if !go.is_empty() {
                streams.push((stream, go, claimed));
            }
        }
        if streams.is_empty() {
            return None;
        }
        let client = self.client.clone();
        let meters = self.meters.clone();
        Some(async move {
            let writes = streams.into_iter().map(|(stream, pending, claimed)| {
                let (client, meters) = (&client, &meters);
                async move {
                    let (stream, strayed) = write_stream(client, stream, pending, meters).await;
                    (stream, claimed, strayed)
                }
            });
            futures::future::join_all(writes).await
        })
    }

    /// A round is over: its routes are free, and a stream whose packed record strayed has its
    /// shards listed again.
    fn ended(&mut self, ended: RoundEnded) {
        for (stream, claimed, strayed) in ended {
            self.routes.release(&stream, &claimed);
            if strayed {
                // A record routed by the map landed in another shard: the stream was resharded.
                tracing::debug!(
                    stream,
                    "a packed record landed in another shard than its map said; listing the shards again"
                );
                self.shard_maps.forget(&stream);
            }
        }
    }
}

/// Writes the records of one stream in calls within the service's limits, and keeps the
/// records of one partition key in their publish order: a call carries at most one record of a
/// key, and the next record of that key goes out only once the call (with its retries of
/// rejected records) is over. Kinesis can reject one record of a call and write the ones after
/// it, so a second record of the key in the same call could land before the first one's retry.
///
/// Answers the stream, and whether a record routed by the packer's shard map landed in another
/// shard.
async fn write_stream(
    client: &aws_sdk_kinesis::Client,
    stream: String,
    pending: Vec<Pending>,
    meters: &Meters,
) -> (String, bool) {
    let mut strayed = false;
    let mut rest: VecDeque<Pending> = pending.into();
    while !rest.is_empty() {
        let mut chunk = Vec::new();
        let mut keys = HashSet::new();
        let mut later = Vec::new();
        let mut bytes = 0;
        while let Some(next) = rest.pop_front() {
            let size = next.record.data.len() + next.record.partition_key.len();
            if chunk.len() == MAX_PUT_RECORDS
                || (!chunk.is_empty() && bytes + size > MAX_PUT_RECORDS_BYTES)
            {
                rest.push_front(next);
                break;
            }
            // An aggregate is routed by its explicit hash key: one per shard and call.
            if !keys.insert(next.route().to_owned()) {
                // A record of this key is in the call: this one waits for the next call.
                later.push(next);
                continue;
            }
            bytes += size;
            chunk.push(next);
        }
        // What waited goes first, in publish order.
        for waiting in later.into_iter().rev() {
            rest.push_front(waiting);
        }
        strayed |= write_chunk(client, &stream, chunk, meters).await;
    }
    (stream, strayed)
}

/// One chunk: `PutRecords`, then the rejected records again with a jittered backoff, up to
/// [`PUT_ATTEMPTS`]; every publish gets its own record's answer. Whether a record routed by the
/// packer's shard map landed in another shard.
async fn write_chunk(
    client: &aws_sdk_kinesis::Client,
    stream: &str,
    mut chunk: Vec<Pending>,
    meters: &Meters,
) -> bool {
    let mut strayed = false;
    for attempt in 1..=PUT_ATTEMPTS {
        let records: Vec<OutRecord> = chunk.iter().map(|p| p.record.clone()).collect();
        let outcomes = match api::put_records(client, stream, &records).await {
            Ok(outcomes) => outcomes,
            Err(err) => {
                call_failed(stream, chunk, err, meters);
                return strayed;
            }
        };
        let mut rejected = Vec::new();
        let mut written = Vec::new();
        let mut last_reason = (String::new(), String::new());
        for (pending, outcome) in chunk.into_iter().zip(outcomes) {
            match outcome {
                PutOutcome::Written { shard } => {
                    strayed |= pending
                        .shard
                        .as_deref()
                        .is_some_and(|routed| shard.as_deref().is_some_and(|at| at != routed));
                    written.extend(pending.done);
                }
                PutOutcome::Rejected { code, message } => {
                    last_reason = (code, message);
                    rejected.push(pending);
                }
            }
        }
        // Counted before any publish is answered, so a publisher that reads the metrics after
        // its publish returned finds it counted. One count per call, the zeros included: a
        // stream's series show from its first call.
        let last = attempt == PUT_ATTEMPTS;
        let refused: u64 = rejected
            .iter()
            .map(|pending| pending.done.len() as u64)
            .sum();
        let (failed, retried) = if last { (refused, 0) } else { (0, refused) };
        meters.published(stream, written.len() as u64, failed);
        meters.publish_retry(stream, retried);
        for done in written {
            let _ = done.send(Ok(()));
        }
        if rejected.is_empty() {
            return strayed;
        }
        if last {
            rejected_for_good(stream, rejected, &last_reason);
            return strayed;
        }
        let ceiling = 100u64 << attempt;
        let wait = rand::rng().random_range(50..=ceiling);
        tokio::time::sleep(Duration::from_millis(wait)).await;
        chunk = rejected;
    }
    strayed
}

/// A `PutRecords` call failed with `err`: every publish of `chunk` gets the same kind of error,
/// a missing stream staying `StreamNotFound` (with its fix), anything else the service's message.
fn call_failed(stream: &str, chunk: Vec<Pending>, err: KinesisError, meters: &Meters) {
    let answered = chunk.iter().map(|pending| pending.done.len() as u64).sum();
    meters.published(stream, 0, answered);
    meters.publish_retry(stream, 0);
    let missing = matches!(err, KinesisError::StreamNotFound { .. });
    let message = err.to_string();
    let mut first = Some(err);
    for done in chunk.into_iter().flat_map(|pending| pending.done) {
        let err = first.take().unwrap_or_else(|| {
            if missing {
                KinesisError::StreamNotFound {
                    stream: stream.to_owned(),
                }
            } else {
                KinesisError::Api {
                    stream: stream.to_owned(),
                    operation: "PutRecords",
                    message: message.clone(),
                }
            }
        });
        let _ = done.send(Err(err));
    }
}

/// The records of `rejected` were rejected at every attempt: each publish learns so, with the
/// service's last `(code, message)`.
fn rejected_for_good(stream: &str, rejected: Vec<Pending>, reason: &(String, String)) {
    let failed = rejected.len();
    for done in rejected.into_iter().flat_map(|pending| pending.done) {
        let _ = done.send(Err(KinesisError::PutRejected {
            stream: stream.to_owned(),
            failed,
            attempts: PUT_ATTEMPTS,
            code: reason.0.clone(),
            message: reason.1.clone(),
        }));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ConnectedKinesisBroker;
    use crate::doubles::fake_kinesis::{client, error};

    fn pending(
        n: usize,
    ) -> (
        Vec<Pending>,
        Vec<oneshot::Receiver<Result<(), KinesisError>>>,
    ) {
        (0..n)
            .map(|i| {
                let (done, answer) = oneshot::channel();
                let record = OutRecord {
                    data: bytes::Bytes::from(format!("record-{i}")),
                    partition_key: format!("key-{i}"),
                    explicit_hash_key: None,
                };
                let pending = Pending {
                    stream: "orders".to_owned(),
                    record,
                    done: vec![done],
                    shard: None,
                };
                (pending, answer)
            })
            .unzip()
    }

    fn answer(failed: &[bool]) -> serde_json::Value {
        let records: Vec<_> = failed
            .iter()
            .map(|&failed| {
                if failed {
                    serde_json::json!({
                        "ErrorCode": "ProvisionedThroughputExceededException",
                        "ErrorMessage": "Rate exceeded for shard",
                    })
                } else {
                    serde_json::json!({ "SequenceNumber": "1", "ShardId": "shardId-000000000000" })
                }
            })
            .collect();
        let count = failed.iter().filter(|f| **f).count();
        serde_json::json!({ "FailedRecordCount": count, "Records": records })
    }

    #[tokio::test]
    async fn a_packed_record_written_to_another_shard_than_its_map_said_is_noticed() {
        // The answer says shardId-000000000000 for every record.
        let (client, _seen) = client(|_, _, _| (200, answer(&[false, false])));
        for (routed, strayed) in [
            ("shardId-000000000000", false),
            ("shardId-000000000001", true),
        ] {
            let (mut chunk, answers) = pending(2);
            chunk[1].shard = Some(Arc::from(routed));
            assert_eq!(
                write_chunk(&client, "orders", chunk, &Meters::default()).await,
                strayed,
                "routed to {routed}"
            );
            for answer in answers {
                answer.await.unwrap().unwrap();
            }
        }
    }

    #[tokio::test]
    async fn a_record_rejected_inside_the_answer_is_written_again() {
        let (client, seen) = client(|n, _, body| {
            let sent = body["Records"].as_array().map_or(0, Vec::len);
            if n == 0 {
                // The second of three is rejected the first time.
                (200, answer(&[false, true, false]))
            } else {
                (200, answer(&vec![false; sent]))
            }
        });
        let (chunk, answers) = pending(3);
        write_chunk(&client, "orders", chunk, &Meters::default()).await;
        for answer in answers {
            answer.await.unwrap().unwrap();
        }
        let calls = seen.lock().unwrap();
        assert_eq!(calls.len(), 2, "one retry call");
        let retried = calls[1].1["Records"].as_array().unwrap();
        assert_eq!(retried.len(), 1, "only the rejected record is sent again");
        assert_eq!(retried[0]["PartitionKey"], "key-1");
    }

    #[tokio::test]
    async fn a_record_rejected_every_time_is_reported_never_dropped() {
        let (client, seen) = client(|_, _, body| {
            let sent = body["Records"].as_array().map_or(0, Vec::len);
            (200, answer(&vec![true; sent]))
        });
        let (chunk, answers) = pending(2);
        write_chunk(&client, "orders", chunk, &Meters::default()).await;
        for answer in answers {
            let err = answer.await.unwrap().unwrap_err();
            assert!(
                matches!(&err, KinesisError::PutRejected { stream, attempts, code, .. }
                    if stream == "orders" && *attempts == PUT_ATTEMPTS
                        && code == "ProvisionedThroughputExceededException"),
                "{err}"
            );
        }
        assert_eq!(seen.lock().unwrap().len(), PUT_ATTEMPTS as usize);
    }

    #[tokio::test]
    async fn publishes_ready_at_once_leave_in_one_put_records_call_per_stream() {
        let (client, seen) = client(|_, _, body| {
            let sent = body["Records"].as_array().map_or(0, Vec::len);
            (200, answer(&vec![false; sent]))
        });
        let (tx, rx) = mpsc::channel(16);
        let (mut chunk, answers) = pending(5);
        chunk[4].stream = "payments".to_owned();
        for pending in chunk {
            tx.send(pending).await.unwrap();
        }
        drop(tx);
        flush(
            client,
            rx,
            Arc::new(AtomicBool::new(false)),
            None,
            Meters::default(),
        )
        .await;
        for answer in answers {
            answer.await.unwrap().unwrap();
        }
        let calls = seen.lock().unwrap();
        let mut per_stream: Vec<(String, usize)> = calls
            .iter()
            .map(|(op, body)| {
                assert_eq!(op, "PutRecords");
                (
                    body["StreamName"].as_str().unwrap().to_owned(),
                    body["Records"].as_array().unwrap().len(),
                )
            })
            .collect();
        per_stream.sort();
        assert_eq!(
            per_stream,
            [("orders".to_owned(), 4), ("payments".to_owned(), 1)]
        );
    }

    /// The data of the records a `PutRecords` call carried, in order.
    fn sent_data(body: &serde_json::Value) -> Vec<String> {
        body["Records"]
            .as_array()
            .unwrap()
            .iter()
            .map(|record| {
                let data = record["Data"].as_str().unwrap();
                String::from_utf8(aws_smithy_types::base64::decode(data).unwrap()).unwrap()
            })
            .collect()
    }

    /// The writer on a fake that answers `PutRecords` call `n` after `slow[n]` seconds (else at
    /// once): `first` is sent, and once its call is out (10 ms on), `then`; publishing closes
    /// 10 s on. Every publish answered; the records (their data) of each call, and when each
    /// call was sent from the start.
    async fn calls_answered_after(
        slow: &'static [u64],
        first: Pending,
        then: Vec<Pending>,
        answers: Vec<oneshot::Receiver<Result<(), KinesisError>>>,
    ) -> (Vec<Vec<String>>, Vec<Duration>) {
        use crate::doubles::fake_kinesis::{Reply, bodies, replying};
        let sent_at = Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen_at = Arc::clone(&sent_at);
        let (config, seen) = replying(move |n, _, body| {
            seen_at.lock().unwrap().push(tokio::time::Instant::now());
            let sent = body["Records"].as_array().map_or(0, Vec::len);
            let wait = slow.get(n).copied().unwrap_or_default();
            Reply::ok(answer(&vec![false; sent])).after(Duration::from_secs(wait))
        });
        let (tx, rx) = mpsc::channel(MAX_PUT_RECORDS * 2);
        let began = tokio::time::Instant::now();
        let writer = tokio::spawn(flush(
            aws_sdk_kinesis::Client::new(&config),
            rx,
            Arc::new(AtomicBool::new(false)),
            None,
            Meters::default(),
        ));
        tx.send(first).await.unwrap();
        tokio::time::sleep(Duration::from_millis(10)).await;
        for pending in then {
            tx.send(pending).await.unwrap();
        }
        // Publishing stays open past the first answer: with none to come, nothing would wait.
        tokio::time::sleep(Duration::from_secs(10)).await;
        drop(tx);
        writer.await.unwrap();
        for answer in answers {
            answer.await.unwrap().unwrap();
        }
        let calls = bodies(&seen, "PutRecords").iter().map(sent_data).collect();
        let sent_at = sent_at
            .lock()
            .unwrap()
            .iter()
            .map(|at| *at - began)
            .collect();
        (calls, sent_at)
    }

    /// [`calls_answered_after`]: record 0 of key `a` alone, then a call's worth with record 1
    /// of key `a` among them.
    async fn key_a_alone_then_a_full_call(
        slow: &'static [u64],
    ) -> (Vec<Vec<String>>, Vec<Duration>) {
        let (mut records, answers) = pending(MAX_PUT_RECORDS + 1);
        records[0].record.partition_key = "a".to_owned();
        records[1].record.partition_key = "a".to_owned();
        let first = records.remove(0);
        calls_answered_after(slow, first, records, answers).await
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_call_of_other_keys_goes_while_one_is_answered_and_a_key_in_flight_waits() {
        let (calls, sent_at) = key_a_alone_then_a_full_call(&[1]).await;
        assert_eq!(calls.len(), 3, "{sent_at:?}");
        assert_eq!(calls[0], ["record-0"]);
        let beside: Vec<String> = (2..=MAX_PUT_RECORDS)
            .map(|i| format!("record-{i}"))
            .collect();
        assert_eq!(
            calls[1], beside,
            "every record but key a's, beside the first call"
        );
        assert!(sent_at[1] < Duration::from_secs(1), "{sent_at:?}");
        assert_eq!(
            calls[2],
            ["record-1"],
            "key a's second record after its first"
        );
        assert!(sent_at[2] >= Duration::from_secs(1), "{sent_at:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_held_record_goes_when_its_round_ends_though_the_other_is_still_out() {
        // The first call is answered after a second, the full one beside it after five.
        let (calls, sent_at) = key_a_alone_then_a_full_call(&[1, 5]).await;
        assert_eq!(calls[2], ["record-1"]);
        assert!(
            sent_at[2] >= Duration::from_secs(1) && sent_at[2] < Duration::from_secs(5),
            "key a's second record went at the first's answer: {sent_at:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn records_short_of_a_full_call_wait_for_the_call_out_and_then_go_together() {
        let (mut records, answers) = pending(3);
        let first = records.remove(0);
        let (calls, sent_at) = calls_answered_after(&[1], first, records, answers).await;
        assert_eq!(calls, [vec!["record-0"], vec!["record-1", "record-2"]]);
        assert!(sent_at[1] >= Duration::from_secs(1), "{sent_at:?}");
    }

    /// A fake `PutRecords` that rejects the first record of its first call and writes the rest.
    fn first_record_throttled_once(
        n: usize,
        _: &str,
        body: &serde_json::Value,
    ) -> (u16, serde_json::Value) {
        let sent = body["Records"].as_array().map_or(0, Vec::len);
        let mut failed = vec![false; sent];
        if n == 0 {
            failed[0] = true;
        }
        (200, answer(&failed))
    }

    #[tokio::test]
    async fn records_of_one_key_keep_their_order_when_one_is_rejected() {
        // The first record of key `k` is throttled inside the answer of its call.
        let (client, seen) = client(first_record_throttled_once);
        let (mut chunk, answers) = pending(4);
        for (i, pending) in chunk.iter_mut().enumerate() {
            pending.record.partition_key = if i == 2 { "j" } else { "k" }.to_owned();
        }
        write_stream(&client, "orders".to_owned(), chunk, &Meters::default()).await;
        for answer in answers {
            answer.await.unwrap().unwrap();
        }
        // What Kinesis wrote, in order: the records of each call it did not reject.
        let calls = seen.lock().unwrap();
        let mut written = Vec::new();
        for (n, (_, body)) in calls.iter().enumerate() {
            for (i, record) in body["Records"].as_array().unwrap().iter().enumerate() {
                let key = record["PartitionKey"].as_str().unwrap();
                let data =
                    aws_smithy_types::base64::decode(record["Data"].as_str().unwrap()).unwrap();
                assert!(
                    body["Records"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .filter(|other| other["PartitionKey"] == key)
                        .count()
                        == 1,
                    "two records of key {key} in one call"
                );
                if !(n == 0 && i == 0) {
                    written.push((key.to_owned(), String::from_utf8(data).unwrap()));
                }
            }
        }
        let of_k: Vec<&str> = written
            .iter()
            .filter(|(key, _)| key == "k")
            .map(|(_, data)| data.as_str())
            .collect();
        assert_eq!(of_k, ["record-0", "record-1", "record-3"]);
    }

    #[tokio::test]
    async fn aggregates_of_one_shard_go_one_per_call_and_a_rejected_one_is_retried_whole_first() {
        // The first aggregate of the shard is throttled inside the answer of its call.
        let (client, seen) = client(first_record_throttled_once);
        // Three aggregates bound for one shard (one explicit hash key), under different keys.
        let (mut chunk, answers) = pending(3);
        for (i, pending) in chunk.iter_mut().enumerate() {
            pending.record.partition_key = format!("first-key-of-{i}");
            pending.record.explicit_hash_key = Some("0".to_owned());
        }
        write_stream(&client, "orders".to_owned(), chunk, &Meters::default()).await;
        for answer in answers {
            answer.await.unwrap().unwrap();
        }
        let calls = seen.lock().unwrap();
        let sent: Vec<Vec<String>> = calls.iter().map(|(_, body)| sent_data(body)).collect();
        // One per call; the rejected one again, whole, before the next of its shard.
        assert_eq!(
            sent,
            [
                vec!["record-0"],
                vec!["record-0"],
                vec!["record-1"],
                vec!["record-2"]
            ]
        );
    }

    /// A connected broker on a fake Kinesis whose stream `orders` takes records of `kib` KiB
    /// (`None`: the service does not say).
    async fn broker_with_limit(
        kib: Option<u32>,
    ) -> (ConnectedKinesisBroker, crate::doubles::fake_kinesis::Seen) {
        use ruststream::Broker;
        let (config, seen) =
            crate::doubles::fake_kinesis::config(move |_, operation, body| match operation {
                "DescribeStreamSummary" => {
                    let mut summary = serde_json::json!({
                        "StreamName": "orders",
                        "StreamARN": "arn:aws:kinesis:us-east-1:000000000000:stream/orders",
                        "StreamStatus": "ACTIVE",
                        "RetentionPeriodHours": 24,
                        "StreamCreationTimestamp": 0,
                        "EnhancedMonitoring": [],
                        "OpenShardCount": 1,
                    });
                    if let Some(kib) = kib {
                        summary["MaxRecordSizeInKiB"] = serde_json::json!(kib);
                    }
                    (
                        200,
                        serde_json::json!({ "StreamDescriptionSummary": summary }),
                    )
                }
                "PutRecords" => {
                    let sent = body["Records"].as_array().map_or(0, Vec::len);
                    (200, answer(&vec![false; sent]))
                }
                other => (400, error(&format!("Unexpected{other}"))),
            });
        let connected = crate::KinesisBroker::from_config(config)
            .connect()
            .await
            .unwrap();
        (connected, seen)
    }

    async fn publish_sized(
        publisher: &KinesisPublisher,
        payload: usize,
    ) -> Result<(), KinesisError> {
        let body = vec![b'x'; payload];
        let options = KinesisOptions::default().with_partition_key("k".repeat(10));
        publisher
            .publish(
                ruststream::OutgoingMessage::new("orders", body.as_slice()),
                Some(&options),
            )
            .await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_record_limit_counts_the_partition_key_and_follows_the_stream() {
        // The default 1 MiB, the key included.
        let (connected, seen) = broker_with_limit(None).await;
        let publisher = connected.publisher().await.unwrap();
        publish_sized(&publisher, crate::MAX_RECORD_BYTES - 10)
            .await
            .expect("data and key together at the limit");
        let err = publish_sized(&publisher, crate::MAX_RECORD_BYTES - 9)
            .await
            .expect_err("one byte over, counting the key");
        assert!(
            matches!(&err, KinesisError::RecordTooLarge { limit, size, .. }
                if *limit == crate::MAX_RECORD_BYTES && *size == crate::MAX_RECORD_BYTES + 1),
            "{err}"
        );
        assert_eq!(
            crate::doubles::fake_kinesis::calls(&seen, "PutRecords"),
            1,
            "refused before any write"
        );
        assert_eq!(
            crate::doubles::fake_kinesis::calls(&seen, "DescribeStreamSummary"),
            1,
            "the limit is read once per stream"
        );
        // A stream raised to 2 MiB.
        let (connected, seen) = broker_with_limit(Some(2048)).await;
        let publisher = connected.publisher().await.unwrap();
        publish_sized(&publisher, 3 << 19)
            .await
            .expect("1.5 MiB fits a 2 MiB stream");
        let err = publish_sized(&publisher, 2 << 20)
            .await
            .expect_err("over 2 MiB");
        assert!(err.to_string().contains("2097152"), "{err}");
        assert_eq!(crate::doubles::fake_kinesis::calls(&seen, "PutRecords"), 1);
    }

    /// Every stream takes records of 1 MiB: publishes within it ask nothing of the stream, so a
    /// thousand first publishes at once make no thousand look-ups ahead of their writes.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn publishes_within_a_mebibyte_ask_nothing_of_the_stream() {
        let (connected, seen) = broker_with_limit(Some(2048)).await;
        let publisher = connected.publisher().await.unwrap();
        let publishes = (0..200).map(|_| publish_sized(&publisher, 1000));
        for published in futures::future::join_all(publishes).await {
            published.unwrap();
        }
        assert_eq!(
            crate::doubles::fake_kinesis::calls(&seen, "DescribeStreamSummary"),
            0,
            "no look-up for records every stream takes"
        );
        // A larger record asks the stream once.
        publish_sized(&publisher, 3 << 19).await.unwrap();
        publish_sized(&publisher, 3 << 19).await.unwrap();
        assert_eq!(
            crate::doubles::fake_kinesis::calls(&seen, "DescribeStreamSummary"),
            1
        );
    }

    #[tokio::test]
    async fn in_process_an_aggregating_publisher_writes_aggregates_a_reader_reads_as_user_records()
    {
        use crate::settings::position::ShardStart;
        let kinesis = Arc::new(InProcessKinesis::default());
        kinesis.ensure_stream("orders", Some(1)).unwrap();
        let closed = Arc::new(AtomicBool::new(false));
        let limits = RecordLimits::default();
        for (aggregate, body) in [(false, "plain"), (true, "packed")] {
            let publisher = KinesisPublish::default()
                .aggregate(aggregate)
                .in_process(&kinesis, &closed, &limits);
            let mut headers = ruststream::HeaderMap::new();
            headers.insert("kind", body);
            let msg = OutgoingMessage::new("orders", body.as_bytes()).with_headers(headers);
            publisher.publish(msg, None).await.unwrap();
        }
        // Read as a shard reader reads them: each Kinesis record, decoded into its user records.
        let shard = crate::kinesis::in_process::shard_id(0);
        let start = ShardStart::At(crate::KinesisPosition::TrimHorizon);
        let iterator = kinesis.shard_iterator("orders", &shard, &start).unwrap();
        let crate::kinesis::api::Fetched::Records { records, .. } =
            kinesis.get_records(&iterator, 10).unwrap()
        else {
            panic!("records");
        };
        let read: Vec<_> = records
            .taken_apart()
            .flat_map(crate::delivery::record::decoded)
            .map(|r| {
                let sub_sequence = r.sub_sequence();
                (
                    r.payload,
                    r.headers.get("kind").map(<[u8]>::to_vec),
                    sub_sequence,
                )
            })
            .collect();
        assert_eq!(
            read,
            [
                (
                    bytes::Bytes::from_static(b"plain"),
                    Some(b"plain".to_vec()),
                    None
                ),
                (
                    bytes::Bytes::from_static(b"packed"),
                    Some(b"packed".to_vec()),
                    Some(0)
                ),
            ],
            "a plain record, then an aggregate of one user record, each with its headers"
        );
        let published: Vec<Vec<u8>> = kinesis
            .published("orders")
            .iter()
            .map(|raw| raw.payload().to_vec())
            .collect();
        assert_eq!(
            published,
            [b"plain".to_vec(), b"packed".to_vec()],
            "as published"
        );
    }

    #[tokio::test]
    async fn a_missing_stream_fails_every_publish_of_the_call_naming_it() {
        let (client, _) = client(|_, _, _| (400, error("ResourceNotFoundException")));
        let (chunk, answers) = pending(2);
        write_chunk(&client, "orders", chunk, &Meters::default()).await;
        for answer in answers {
            let err = answer.await.unwrap().unwrap_err();
            assert!(
                matches!(&err, KinesisError::StreamNotFound { stream } if stream == "orders"),
                "{err}"
            );
        }
    }
}

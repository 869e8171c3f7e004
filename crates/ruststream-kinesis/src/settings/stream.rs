//! What a service configures for one subscribed stream: `KinesisStream`, its read settings and
//! its initial position.

use std::borrow::Cow;
use std::time::Duration;

use ruststream::FromName;

/// A subscription to one Kinesis stream: the descriptor `#[subscriber(KinesisStream::new(..))]`
/// takes, and the source of the manual mount `subscriber(KinesisStream::new(..), handler)`.
///
/// Each shard is read by one reader that holds the shard's lease; see the crate docs for how the
/// shards are shared between instances. `#[subscriber("orders")]` subscribes by the bare name,
/// with the defaults below; [`KinesisBroker::create_streams_if_missing`](crate::KinesisBroker::create_streams_if_missing)
/// then says whether a missing stream is created.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use ruststream_kinesis::KinesisStream;
///
/// let orders = KinesisStream::new("orders")
///     .create_if_missing(2)
///     .poll_interval(Duration::from_millis(500))
///     .batch_size(500)
///     .max_wait(Duration::from_millis(20));
/// assert_eq!(orders.stream_name(), "orders");
/// ```
///
/// Without the macros, the handler is a type implementing `Handle<T>`, mounted with
/// `subscriber(KinesisStream::new(..), handler).build()`:
///
/// ```
/// use std::future::{Future, ready};
///
/// use ruststream_kinesis::prelude::*;
/// use serde::Deserialize;
///
/// #[derive(Debug, Deserialize)]
/// # #[cfg_attr(feature = "asyncapi", derive(ruststream::schemars::JsonSchema))]
/// # #[cfg_attr(feature = "asyncapi", schemars(crate = "ruststream::schemars"))]
/// struct Order {
///     id: u64,
/// }
///
/// /// Picks each order.
/// struct Pick;
///
/// impl Handle<Order> for Pick {
///     fn handle(
///         &self,
///         order: &Order,
///         _outs: &(),
///         _ctx: &mut Context<'_>,
///     ) -> impl Future<Output = Result<(), HandlerOutcome>> {
///         tracing::info!(order.id, "order picked");
///         ready(Ok(()))
///     }
/// }
///
/// let app = RustStream::new(AppInfo::new("warehouse", "0.1.0")).with_broker(KinesisBroker::new(), |b| {
///     b.include(subscriber(KinesisStream::new("orders").create_if_missing(2), Pick).build());
/// });
/// # let _ = app;
/// ```
#[derive(Debug, Clone)]
pub struct KinesisStream {
    pub(crate) name: Cow<'static, str>,
    pub(crate) create_if_missing: Option<u32>,
    pub(crate) poll_interval: Duration,
    pub(crate) batch_size: u32,
    pub(crate) max_wait: Duration,
    pub(crate) max_unsettled: usize,
    pub(crate) initial: crate::KinesisPosition,
    pub(crate) fan_out: Option<FanOut>,
    pub(crate) stall_after: Duration,
    /// Whether a handler's staged DynamoDB writes commit with the checkpoint (exactly once).
    pub(crate) exactly_once: bool,
}

/// An enhanced fan-out consumer a subscription reads through.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FanOut {
    /// The consumer's name.
    pub(crate) consumer: Cow<'static, str>,
    /// Whether a missing consumer is registered.
    pub(crate) register: bool,
}

/// How many deliveries a shard holds at most, by default, from its oldest unsettled record on,
/// before its reader stops reading ahead.
pub const DEFAULT_MAX_UNSETTLED: usize = 10_000;

/// How long, by default, a shard this instance reads may deliver nothing while records wait
/// behind it before it counts as stalled ([`KinesisStream::stall_after`]).
pub const DEFAULT_STALL_AFTER: Duration = Duration::from_secs(120);

impl KinesisStream {
    /// Reads the stream `name`.
    #[must_use]
    pub fn new(name: impl Into<Cow<'static, str>>) -> Self {
        Self {
            name: name.into(),
            create_if_missing: None,
            poll_interval: Duration::from_millis(1000),
            batch_size: 1000,
            max_wait: Duration::from_millis(50),
            max_unsettled: DEFAULT_MAX_UNSETTLED,
            initial: crate::KinesisPosition::Latest,
            fan_out: None,
            stall_after: DEFAULT_STALL_AFTER,
            exactly_once: false,
        }
    }

    /// How long a shard this instance reads may deliver nothing while records wait behind it
    /// (its last read was behind the shard's newest record, records it read wait to be handed
    /// out, or its window is full of unsettled deliveries, so it reads no further) before it
    /// counts as stalled (default [`DEFAULT_STALL_AFTER`], two minutes): a handler
    /// that never settles a record in a full window, reads that keep failing, a reader that
    /// cannot get an iterator. A stall is a WARN naming the stream, the shard and the owner, and
    /// the gauge `aws_kinesis_shard_stalled` (feature `metrics`; `aws.kinesis.shard.stalled`
    /// with `otel`) is 1 until the shard delivers again, which is an INFO. `Duration::ZERO`
    /// turns the check off. It is checked at each lease write (every renewal interval at
    /// least).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use ruststream_kinesis::KinesisStream;
    ///
    /// // Handlers that may take ten minutes over one record.
    /// let reports = KinesisStream::new("reports").stall_after(Duration::from_secs(900));
    /// # let _ = reports;
    /// ```
    #[must_use]
    pub fn stall_after(mut self, quiet: Duration) -> Self {
        self.stall_after = quiet;
        self
    }

    /// Creates the stream with `shards` shards when it does not exist, and waits until it is
    /// active. Without it, a missing stream fails startup with an error naming the stream.
    #[must_use]
    pub fn create_if_missing(mut self, shards: u32) -> Self {
        self.create_if_missing = Some(shards.max(1));
        self
    }

    /// How often a reader that has caught up with its shard calls `GetRecords` (default 1 s),
    /// counted from one call to the next. A reader that is behind (its last answer was a full
    /// batch, or `MillisBehindLatest` was above zero) calls again after 200 ms, the service's
    /// limit of five calls per second per shard, until it reaches the tip.
    ///
    /// The interval is the longest a new record waits before it is read, and under a steady
    /// trickle it sets the cost: one call and at most one checkpoint write per shard per
    /// interval.
    #[must_use]
    pub fn poll_interval(mut self, interval: Duration) -> Self {
        self.poll_interval = interval;
        self
    }

    /// The `Limit` of each `GetRecords` call (default 1,000, at most 10,000).
    #[must_use]
    pub fn batch_size(mut self, size: u32) -> Self {
        self.batch_size = size.clamp(1, crate::settings::validate::MAX_GET_RECORDS_LIMIT);
        self
    }

    /// How long a batch handler (`&[T]`) waits to fill a batch before it takes what arrived
    /// (default 50 ms), counted from the batch's first delivery. The batch size is the mount
    /// site's `batch(n)`; a single-message handler (`&T`) gets each delivery at once.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// use ruststream_kinesis::prelude::*;
    /// use serde::{Deserialize, Serialize};
    ///
    /// #[derive(Debug, PartialEq, Deserialize, Serialize, Outgoing)]
    /// #[outgoing(name = "orders")]
    /// struct Order {
    ///     id: u64,
    /// }
    ///
    /// /// One call per batch of up to 100 orders, gathered for at most 200 ms.
    /// #[subscriber(KinesisStream::new("orders").max_wait(Duration::from_millis(200)))]
    /// async fn store(orders: &[Order]) -> HandlerOutcome {
    ///     tracing::info!(count = orders.len(), "stored");
    ///     HandlerOutcome::ack()
    /// }
    ///
    /// let app = RustStream::new(AppInfo::new("warehouse", "0.1.0")).with_broker(KinesisBroker::new(), |b| {
    ///     b.include(store.batch(nonzero!(100)));
    /// });
    /// # let _ = app;
    /// ```
    #[must_use]
    pub fn max_wait(mut self, wait: Duration) -> Self {
        self.max_wait = wait;
        self
    }

    /// How many deliveries one shard holds at most from its oldest unsettled record on (default
    /// [`DEFAULT_MAX_UNSETTLED`], 10,000). A record that stays unsettled (a handler that keeps
    /// retrying it, a `retry_after(..)` with a long delay) keeps the shard's checkpoint behind
    /// it; the records after it are still delivered, up to this many, and then the shard's reader
    /// stops reading ahead until the record is settled. That bounds the memory a shard takes
    /// (a sequence number and a flag per delivery, and the bytes of the records handed back),
    /// and what the next owner delivers again after a crash.
    ///
    /// # Examples
    ///
    /// ```
    /// use ruststream_kinesis::KinesisStream;
    ///
    /// // Read at most 1,000 records past a record that waits to be retried.
    /// let orders = KinesisStream::new("orders").max_unsettled(1_000);
    /// # let _ = orders;
    /// ```
    #[must_use]
    pub fn max_unsettled(mut self, deliveries: usize) -> Self {
        self.max_unsettled = deliveries.max(1);
        self
    }

    /// Where a shard that has no checkpoint yet starts (default the tip,
    /// [`Latest`](crate::KinesisPosition::Latest)): [`TrimHorizon`](crate::KinesisPosition::TrimHorizon)
    /// reads what the stream still holds, [`AtTimestamp`](crate::KinesisPosition::AtTimestamp)
    /// what was written from then on. It applies only where the lease table has no checkpoint for
    /// the shard: a restarted or taken-over shard resumes after its checkpoint whatever this says.
    /// A shard born from a split or a merge of shards this application read starts at its
    /// beginning; one whose parents it never read starts here too (a new application at the tip
    /// does not replay the children's retention, and closed shards it never read are skipped).
    ///
    /// Unlike `start_at(..)` at the mount site, which seeks the shards this instance holds at
    /// every startup, this is the Kinesis Client Library's "initial position in stream".
    ///
    /// # Examples
    ///
    /// ```
    /// use ruststream_kinesis::{KinesisPosition, KinesisStream};
    ///
    /// // A new application reads the stream's whole retention once, then resumes after its
    /// // checkpoints.
    /// let orders = KinesisStream::new("orders").initial_position(KinesisPosition::TrimHorizon);
    /// # let _ = orders;
    /// ```
    #[must_use]
    pub fn initial_position(mut self, position: crate::KinesisPosition) -> Self {
        self.initial = position;
        self
    }

    /// Reads each shard with enhanced fan-out through the registered consumer `consumer`, instead
    /// of polling with `GetRecords`: the consumer gets its own 2 MB/s per shard, pushed to it
    /// over a `SubscribeToShard` subscription as records arrive (about 70 ms from write to read
    /// on AWS), where polling applications share one 2 MB/s and five calls a second per shard.
    ///
    /// The consumer name is the application's: every instance of one service uses the same
    /// name and they share the shards through the lease table as with polling, while another
    /// application reading the same stream uses its own name and reads every record too. A
    /// missing consumer is registered at startup (as the Kinesis Client Library does), and the
    /// subscription waits until it is `ACTIVE`; [`consumer_must_exist`](Self::consumer_must_exist)
    /// forbids registering. Leases, checkpoints, `SHARD_END`, handovers, start positions,
    /// seeks and KPL records work as with polling; [`poll_interval`](Self::poll_interval) and
    /// [`batch_size`](Self::batch_size) do not apply. Each registered consumer costs per
    /// consumer-shard hour and per GB on AWS; a stream takes at most 20.
    ///
    /// # Examples
    ///
    /// ```
    /// use ruststream_kinesis::KinesisStream;
    ///
    /// let orders = KinesisStream::new("orders").enhanced_fan_out("warehouse");
    /// assert_eq!(orders.fan_out_consumer(), Some("warehouse"));
    /// ```
    #[must_use]
    pub fn enhanced_fan_out(mut self, consumer: impl Into<Cow<'static, str>>) -> Self {
        self.fan_out = Some(FanOut {
            consumer: consumer.into(),
            register: true,
        });
        self
    }

    /// With [`enhanced_fan_out`](Self::enhanced_fan_out): the consumer must be registered
    /// already (by infrastructure code, say, where the service's role may not call
    /// `RegisterStreamConsumer`); a missing one fails startup with an error naming the stream,
    /// the consumer and the command that registers it. Without `enhanced_fan_out` it does
    /// nothing.
    ///
    /// # Examples
    ///
    /// ```
    /// use ruststream_kinesis::KinesisStream;
    ///
    /// let orders = KinesisStream::new("orders")
    ///     .enhanced_fan_out("warehouse")
    ///     .consumer_must_exist();
    /// # let _ = orders;
    /// ```
    #[must_use]
    pub fn consumer_must_exist(mut self) -> Self {
        if let Some(fan_out) = &mut self.fan_out {
            fan_out.register = false;
        }
        self
    }

    /// Exactly once into DynamoDB: what a handler stages through
    /// [`DynamoWrites`](crate::DynamoWrites) commits when it acknowledges the record, together with
    /// the checkpoint that covers it, in one `TransactWriteItems` whose lease-row update is
    /// conditioned on this instance's lease (its owner and counter). A committed record is never
    /// handled again by any instance; a commit refused because the lease moved applies nothing
    /// and stops the shard's reader; a commit refused by one of the handling's own writes
    /// applies nothing and delivers the record again, its handler reading why off
    /// [`StagedWrites::refused`](crate::StagedWrites::refused). Records of a shard commit in
    /// order. A batch handler stages through its
    /// [`KinesisBatchContext`](crate::KinesisBatchContext): what it stages commits with all of
    /// its records or with none, in one transaction with the checkpoint of every shard among
    /// them. The lease store must be
    /// a [`DynamoLeaseStore`](crate::DynamoLeaseStore) in the account and region of the
    /// handler's tables: another store, a lease table in another region than the broker or in
    /// another account than the stream fails the start
    /// ([`ExactlyOnceRefusal`](crate::ExactlyOnceRefusal)), and a write naming a table by an ARN
    /// in another region is refused where it is staged. In process (`TestApp`),
    /// `KinesisBroker::in_process_commits` (feature `testing`) shows what each handling staged
    /// and how it ended.
    ///
    /// # Examples
    ///
    /// ```
    /// use ruststream_kinesis::KinesisStream;
    ///
    /// let orders = KinesisStream::new("orders").exactly_once();
    /// assert!(orders.is_exactly_once());
    /// ```
    #[cfg(feature = "dynamodb-lease")]
    #[must_use]
    pub fn exactly_once(mut self) -> Self {
        self.exactly_once = true;
        self
    }

    /// Whether the subscription commits exactly once ([`exactly_once`](Self::exactly_once)).
    #[must_use]
    pub fn is_exactly_once(&self) -> bool {
        self.exactly_once
    }

    /// The enhanced fan-out consumer's name, when the stream is read with enhanced fan-out.
    #[must_use]
    pub fn fan_out_consumer(&self) -> Option<&str> {
        self.fan_out
            .as_ref()
            .map(|fan_out| fan_out.consumer.as_ref())
    }

    /// The stream's name.
    #[must_use]
    pub fn stream_name(&self) -> &str {
        &self.name
    }
}

impl FromName for KinesisStream {
    fn from_name(name: impl Into<Cow<'static, str>>) -> Self {
        Self::new(name)
    }
}

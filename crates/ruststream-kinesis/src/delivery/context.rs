//! What a handler reads off a delivery: `Ctx<ShardId>`, `Ctx<SequenceNumber>`, `Ctx<StreamName>`,
//! `Ctx<PartitionKey>`, `Ctx<Position>` and `Ctx<SeekHandle>`; a batch body reads `SeekHandle` off its batch context.

use std::sync::Arc;

use ruststream::{BuildBatchContext, BuildContext, ContextField, Field, Positioned};

use crate::{KinesisMessage, KinesisPosition, KinesisSeeker, SharedStr};

/// The per-delivery context of a Kinesis subscription: a handler reads it through the keys
/// [`ShardId`], [`SequenceNumber`], [`StreamName`], [`PartitionKey`], [`Position`] and
/// [`SeekHandle`]
/// (`Ctx<ShardId>`, ...).
#[non_exhaustive]
#[derive(Debug, Clone)]
pub struct KinesisContext {
    /// The stream the record was read from.
    pub stream: Arc<str>,
    /// The shard it was read from.
    pub shard: Arc<str>,
    /// Its sequence number (a KPL aggregate's, for one of its user records): part of one string
    /// that the records of its fetch share ([`SharedStr`]).
    pub sequence: SharedStr,
    /// Its partition key: a user record's own, inside a KPL aggregate.
    pub partition_key: SharedStr,
    /// Its position: seeking to it delivers the record again, and what follows it in its shard.
    pub position: KinesisPosition,
    /// The subscription's seeker.
    pub seeker: KinesisSeeker,
    /// What the handling stages to commit exactly once ([`DynamoWrites`](crate::DynamoWrites)).
    #[cfg(feature = "dynamodb-lease")]
    pub writes: crate::StagedWrites,
}

impl BuildContext<KinesisMessage> for KinesisContext {
    fn build(msg: &KinesisMessage) -> Self {
        Self {
            stream: Arc::clone(&msg.origin.stream),
            shard: Arc::clone(&msg.origin.shard),
            sequence: msg.record.sequence.clone(),
            partition_key: msg.record.partition_key.clone(),
            position: msg.position(),
            seeker: msg.origin.seeker.clone(),
            #[cfg(feature = "dynamodb-lease")]
            writes: msg.writes.clone(),
        }
    }
}

/// The batch context of a Kinesis subscription: the subscription's seeker, which a batch body
/// reads through [`SeekHandle`]. A batch spans records of several shards, so per-record fields
/// have no place here.
///
/// # Examples
///
/// ```
/// use ruststream_kinesis::prelude::*;
/// use ruststream_kinesis::{KinesisBatchContext, SeekHandle};
/// use ruststream::Seeker;
/// use serde::Deserialize;
///
/// #[derive(Debug, Deserialize)]
/// struct Order {
///     id: u64,
/// }
///
/// /// Replays the stream from its oldest records when a batch carries the marker order 0.
/// struct Replay;
///
/// impl Handle<[Order], (), (), KinesisBatchContext> for Replay {
///     async fn handle(
///         &self,
///         batch: &[Order],
///         _outs: &(),
///         ctx: &mut Context<'_, KinesisBatchContext>,
///     ) -> Result<(), Vec<HandlerOutcome>> {
///         if batch.iter().any(|order| order.id == 0) {
///             let seeker = ctx.context(SeekHandle);
///             if seeker.seek(KinesisPosition::TrimHorizon).await.is_err() {
///                 return Err(batch.iter().map(|_| HandlerOutcome::retry()).collect());
///             }
///         }
///         Ok(())
///     }
/// }
/// ```
#[non_exhaustive]
#[derive(Debug, Clone)]
pub struct KinesisBatchContext {
    /// The subscription's seeker.
    pub seeker: KinesisSeeker,
    /// What the batch stages to commit exactly once ([`DynamoWrites`](crate::DynamoWrites)):
    /// under [`exactly_once`](crate::KinesisStream::exactly_once) what it stages commits with all
    /// of its records or with none, in one transaction with the checkpoint of every shard among
    /// them.
    #[cfg(feature = "dynamodb-lease")]
    pub writes: crate::StagedWrites,
}

impl BuildBatchContext<KinesisMessage> for KinesisBatchContext {
    fn build(first: &KinesisMessage) -> Self {
        Self {
            seeker: first.origin.seeker.clone(),
            #[cfg(feature = "dynamodb-lease")]
            writes: first.writes.clone(),
        }
    }
}

/// `Ctx<Position>` in a handler binds the delivery's [`KinesisPosition`]
/// ([`AtSequence`](KinesisPosition::AtSequence), or
/// [`AtSubSequence`](KinesisPosition::AtSubSequence) for a user record of a KPL aggregate):
/// seeking to it delivers the record again.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Position;

impl ContextField for Position {
    type Context = KinesisContext;
    type Value = KinesisPosition;
    fn read(self, src: &KinesisContext) -> KinesisPosition {
        src.position.clone()
    }
}

impl Field<KinesisContext> for Position {
    type Value<'a> = &'a KinesisPosition;
    fn get(self, src: &KinesisContext) -> &KinesisPosition {
        &src.position
    }
}

/// `Ctx<SeekHandle>` in a handler binds the subscription's [`KinesisSeeker`]; a batch body reads
/// it with `ctx.context(SeekHandle)` off [`KinesisBatchContext`].
///
/// # Examples
///
/// ```
/// # #[cfg(feature = "testing")]
/// # mod demo {
/// use ruststream::Seeker;
/// use ruststream_kinesis::prelude::*;
/// use ruststream_kinesis::{Position, SeekHandle};
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Debug, PartialEq, Deserialize, Serialize, Outgoing)]
/// #[outgoing(name = "orders")]
/// struct Order {
///     id: u64,
///     replay: bool,
/// }
///
/// /// An order marked `replay` rewinds its shard to itself: it and what follows come again. (A
/// /// real handler remembers which records it rewound: the record comes back marked too.)
/// #[subscriber(KinesisStream::new("orders").create_if_missing(1))]
/// async fn pick(order: &Order, Ctx(at): Ctx<Position>, Ctx(seeker): Ctx<SeekHandle>) -> HandlerOutcome {
///     if order.replay && seeker.seek(at).await.is_err() {
///         return HandlerOutcome::retry();
///     }
///     HandlerOutcome::ack()
/// }
///
/// fn app() -> RustStream {
///     RustStream::new(AppInfo::new("warehouse", "0.1.0")).with_broker(KinesisBroker::new(), |b| {
///         b.include(pick);
///     })
/// }
///
/// pub async fn test() -> Result<(), Box<dyn std::error::Error>> {
///     let tb = ruststream::testing::TestApp::start(app()).await?;
///     tb.broker::<KinesisBroker>()
///         .message(&Order { id: 1, replay: false })
///         .publish()
///         .await?;
///     Ok(())
/// }
/// # }
/// # #[cfg(feature = "testing")]
/// # tokio::runtime::Runtime::new().unwrap().block_on(demo::test()).unwrap();
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct SeekHandle;

impl ContextField for SeekHandle {
    type Context = KinesisContext;
    type Value = KinesisSeeker;
    fn read(self, src: &KinesisContext) -> KinesisSeeker {
        src.seeker.clone()
    }
}

impl Field<KinesisContext> for SeekHandle {
    type Value<'a> = &'a KinesisSeeker;
    fn get(self, src: &KinesisContext) -> &KinesisSeeker {
        &src.seeker
    }
}

impl Field<KinesisBatchContext> for SeekHandle {
    type Value<'a> = &'a KinesisSeeker;
    fn get(self, src: &KinesisBatchContext) -> &KinesisSeeker {
        &src.seeker
    }
}

macro_rules! context_key {
    ($(#[$doc:meta])* $key:ident => $field:ident: $value:ty) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
        pub struct $key;

        impl ContextField for $key {
            type Context = KinesisContext;
            type Value = $value;
            fn read(self, src: &KinesisContext) -> $value {
                src.$field.clone()
            }
        }

        impl Field<KinesisContext> for $key {
            type Value<'a> = &'a str;
            fn get(self, src: &KinesisContext) -> &str {
                &src.$field
            }
        }
    };
}

context_key!(
    /// `Ctx<ShardId>` in a handler binds the id of the shard the record came from.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[cfg(feature = "testing")]
    /// # mod demo {
    /// use std::sync::Mutex;
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
    /// static PICKED: Mutex<Vec<String>> = Mutex::new(Vec::new());
    ///
    /// /// Notes which shard each order came from.
    /// #[subscriber(KinesisStream::new("orders").create_if_missing(1))]
    /// async fn pick(order: &Order, shard: Ctx<ShardId>) -> HandlerOutcome {
    ///     PICKED.lock().unwrap().push(format!("order {} from {}", order.id, shard.0));
    ///     HandlerOutcome::ack()
    /// }
    ///
    /// fn app() -> RustStream {
    ///     RustStream::new(AppInfo::new("warehouse", "0.1.0")).with_broker(KinesisBroker::new(), |b| {
    ///         b.include(pick);
    ///     })
    /// }
    ///
    /// // In process: no AWS account, and no lease store of yours is called.
    /// pub async fn test() -> Result<(), Box<dyn std::error::Error>> {
    ///     let tb = ruststream::testing::TestApp::start(app()).await?;
    ///     tb.broker::<KinesisBroker>().message(&Order { id: 7 }).publish().await?;
    ///     assert_eq!(*PICKED.lock().unwrap(), ["order 7 from shardId-000000000000"]);
    ///     Ok(())
    /// }
    /// # }
    /// # #[cfg(feature = "testing")]
    /// # tokio::runtime::Runtime::new().unwrap().block_on(demo::test()).unwrap();
    /// ```
    ShardId => shard: Arc<str>
);
context_key!(
    /// `Ctx<SequenceNumber>` in a handler binds the record's sequence number, a [`SharedStr`]
    /// (part of one string its fetch's records share: keep `to_string()` of it where a handler
    /// stores it for long).
    SequenceNumber => sequence: SharedStr
);
context_key!(
    /// `Ctx<StreamName>` in a handler binds the stream the record was read from.
    StreamName => stream: Arc<str>
);
context_key!(
    /// `Ctx<PartitionKey>` in a handler binds the record's partition key: a user record's own,
    /// inside a KPL aggregate; a [`SharedStr`], as the sequence number is.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[cfg(feature = "testing")]
    /// # mod demo {
    /// use std::sync::Mutex;
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
    /// static KEYS: Mutex<Vec<String>> = Mutex::new(Vec::new());
    ///
    /// #[subscriber(KinesisStream::new("orders").create_if_missing(1))]
    /// async fn pick(order: &Order, key: Ctx<PartitionKey>) -> HandlerOutcome {
    ///     KEYS.lock().unwrap().push(format!("order {} under {}", order.id, key.0));
    ///     HandlerOutcome::ack()
    /// }
    ///
    /// fn app() -> RustStream {
    ///     RustStream::new(AppInfo::new("warehouse", "0.1.0")).with_broker(KinesisBroker::new(), |b| {
    ///         b.include(pick);
    ///     })
    /// }
    ///
    /// pub async fn test() -> Result<(), Box<dyn std::error::Error>> {
    ///     let tb = ruststream::testing::TestApp::start(app()).await?;
    ///     tb.broker::<KinesisBroker>().message(&Order { id: 7 }).publish().await?;
    ///     let keys = KEYS.lock().unwrap();
    ///     assert_eq!(keys.len(), 1);
    ///     assert!(keys[0].starts_with("order 7 under "), "{keys:?}");
    ///     Ok(())
    /// }
    /// # }
    /// # #[cfg(feature = "testing")]
    /// # tokio::runtime::Runtime::new().unwrap().block_on(demo::test()).unwrap();
    /// ```
    PartitionKey => partition_key: SharedStr
);

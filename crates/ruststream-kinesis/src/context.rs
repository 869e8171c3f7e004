//! What a handler reads off a delivery: `Ctx<ShardId>`, `Ctx<SequenceNumber>`, `Ctx<StreamName>`.

use std::sync::Arc;

use ruststream::{BuildContext, ContextField, Field};

use crate::KinesisMessage;

/// The per-delivery context of a Kinesis subscription: a handler reads it through the keys
/// [`ShardId`], [`SequenceNumber`] and [`StreamName`] (`Ctx<ShardId>`, ...).
#[non_exhaustive]
#[derive(Debug, Clone)]
pub struct KinesisContext {
    /// The stream the record was read from.
    pub stream: Arc<str>,
    /// The shard it was read from.
    pub shard: Arc<str>,
    /// Its sequence number.
    pub sequence: Arc<str>,
}

impl BuildContext<KinesisMessage> for KinesisContext {
    fn build(msg: &KinesisMessage) -> Self {
        Self {
            stream: Arc::clone(&msg.stream),
            shard: Arc::clone(&msg.shard),
            sequence: Arc::clone(&msg.sequence),
        }
    }
}

macro_rules! context_key {
    ($(#[$doc:meta])* $key:ident => $field:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
        pub struct $key;

        impl ContextField for $key {
            type Context = KinesisContext;
            type Value = Arc<str>;
            fn read(self, src: &KinesisContext) -> Arc<str> {
                Arc::clone(&src.$field)
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
    /// // In process: no AWS account, no lease store.
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
    ShardId => shard
);
context_key!(
    /// `Ctx<SequenceNumber>` in a handler binds the record's sequence number.
    SequenceNumber => sequence
);
context_key!(
    /// `Ctx<StreamName>` in a handler binds the stream the record was read from.
    StreamName => stream
);

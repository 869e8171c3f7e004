//! What a handler reads off a delivery: `Ctx<ShardId>`, `Ctx<SequenceNumber>`, `Ctx<StreamName>`.

use std::sync::Arc;

use ruststream::{BuildContext, ContextField, Field};

use crate::KinesisMessage;

/// The per-delivery context of a Kinesis subscription.
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

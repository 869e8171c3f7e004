//! The `x-kinesis` bindings (feature `asyncapi`): on each stream what the subscription and the
//! publish policy do. The specification has no binding object for Kinesis, so each is an
//! extension at the level a binding would sit at. They come from the descriptors alone, which
//! hold no secret.

use std::time::UNIX_EPOCH;

use ruststream::asyncapi::{Binding, Bindings};
use serde_json::{Value, json};

use crate::settings::stream::KinesisStream;
use crate::{KinesisPosition, KinesisPublish};

/// The extension every Kinesis binding is.
const EXTENSION: &str = "x-kinesis";

/// `body` as the one `x-kinesis` extension of a level. A body that cannot be built is one the
/// document goes without: a service never fails over a description of itself.
fn extension(body: &Value) -> Bindings {
    Binding::extension(EXTENSION, body)
        .map_or_else(|_| Bindings::new(), |b| Bindings::new().with(b))
}

/// The channel of a subscribed stream: its name, and its shard count where the subscription
/// creates it.
pub(crate) fn stream_channel(source: &KinesisStream) -> Bindings {
    let mut body = json!({ "stream": source.name.as_ref() });
    if let Some(shards) = source.create_if_missing {
        body["shardsIfCreated"] = json!(shards);
    }
    extension(&body)
}

/// The receive operation of a subscribed stream: where a new application starts, and how the
/// shards are read (polling, or enhanced fan-out through a named consumer).
pub(crate) fn stream_operation(source: &KinesisStream) -> Bindings {
    let read = match &source.fan_out {
        Some(fan_out) => json!({
            "enhancedFanOut": {
                "consumer": fan_out.consumer.as_ref(),
                "registersIfMissing": fan_out.register,
            }
        }),
        None => json!({
            "polling": {
                "intervalMs": u64::try_from(source.poll_interval.as_millis()).unwrap_or(u64::MAX),
                "batchSize": source.batch_size,
            }
        }),
    };
    extension(&json!({
        "initialPosition": initial_position(&source.initial),
        "read": read,
        "maxUnsettled": source.max_unsettled,
    }))
}

fn initial_position(position: &KinesisPosition) -> Value {
    match position {
        KinesisPosition::Latest => json!("LATEST"),
        KinesisPosition::TrimHorizon => json!("TRIM_HORIZON"),
        KinesisPosition::AtTimestamp(at) => json!({
            "atTimestampMs": at.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
        }),
        // Refused by the subscription before it starts: a stream's initial position names no
        // shard.
        KinesisPosition::AtSequence { .. } | KinesisPosition::AtSubSequence { .. } => {
            json!("a record of one shard (refused at startup)")
        }
    }
}

/// The messages a publish policy writes: how each record's partition key is chosen, and whether
/// records go out as KPL aggregates.
pub(crate) fn published_message(policy: &KinesisPublish) -> Bindings {
    let key = match policy.fixed_key() {
        Some(key) => json!({ "policy": "fixed", "key": key }),
        None => json!({ "policy": "random per record" }),
    };
    extension(&json!({
        "partitionKey": key,
        "overridable": "a publish's KinesisOptions::with_partition_key",
        "kplAggregated": policy.aggregates(),
    }))
}

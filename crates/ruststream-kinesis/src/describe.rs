//! What a Kinesis service says of itself in its `AsyncAPI` document (feature `asyncapi`): the
//! server it reaches, and on each stream what the subscription and the publish policy do. The
//! specification has no binding object for Kinesis, so each is an `x-kinesis` extension at the
//! level a binding would sit at.
//!
//! Nothing here reads a credential. The server is the endpoint's host and port (the scheme,
//! user-info, path and query are dropped by `ServerSpec::from_url`), else the regional host,
//! and the bindings come from the descriptors alone, which hold no secret.

use std::time::UNIX_EPOCH;

use ruststream::ServerSpec;
use ruststream::asyncapi::{Binding, Bindings};
use serde_json::{Value, json};

use crate::settings::stream::KinesisStream;
use crate::{KinesisPosition, KinesisPublish};

/// The protocol the document names for a Kinesis server.
pub const PROTOCOL: &str = "kinesis";

/// The extension every Kinesis binding is.
const EXTENSION: &str = "x-kinesis";

/// The server at `endpoint`'s host and port, else Kinesis's host in the `region` it asks for,
/// else Kinesis's global name.
pub(crate) fn server(
    endpoint: Option<String>,
    region: impl FnOnce() -> Option<String>,
) -> ServerSpec {
    let spec = match endpoint {
        Some(url) => ServerSpec::from_url(&url, PROTOCOL),
        None => match region() {
            Some(region) => ServerSpec::new(format!("kinesis.{region}.amazonaws.com"), PROTOCOL),
            None => ServerSpec::new("kinesis.amazonaws.com", PROTOCOL),
        },
    };
    spec.description("Amazon Kinesis Data Streams")
}

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
    let key = match policy.partition_key.as_deref() {
        Some(key) => json!({ "policy": "fixed", "key": key }),
        None => json!({ "policy": "random per record" }),
    };
    extension(&json!({
        "partitionKey": key,
        "overridable": "a publish's KinesisOptions::with_partition_key",
        "kplAggregated": policy.aggregate,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_server_is_the_endpoints_host_else_the_regional_one_else_the_global_one() {
        let endpoint = "https://key:secret@kinesis.internal:8443/path?X-Amz-Security-Token=secret";
        let spec = server(Some(endpoint.to_owned()), || Some("eu-west-1".to_owned()));
        assert_eq!(spec.host.as_deref(), Some("kinesis.internal:8443"));
        assert_eq!(spec.protocol, PROTOCOL);
        let regional = server(None, || Some("eu-west-1".to_owned()));
        assert_eq!(
            regional.host.as_deref(),
            Some("kinesis.eu-west-1.amazonaws.com")
        );
        let global = server(None, || None);
        assert_eq!(global.host.as_deref(), Some("kinesis.amazonaws.com"));
    }
}

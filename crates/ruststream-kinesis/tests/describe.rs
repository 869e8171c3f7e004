//! The service's `AsyncAPI` description (feature `asyncapi`): the framework's credential scans of
//! the server, of a subscription's bindings and of the publish policy's, with an endpoint that
//! carries a secret in its user-info and in its query; and what the `x-kinesis` bindings say.
#![cfg(all(feature = "asyncapi", feature = "conformance"))]

use std::time::Duration;

use ruststream::DescribeServer;
use ruststream::conformance::{harness, message_shape};
use ruststream::{PublishPolicy, SubscriptionSource};
use ruststream_kinesis::{
    ConnectedKinesisBroker, KinesisBroker, KinesisPosition, KinesisPublish, KinesisStream,
};
use serde_json::{Value, json};

const SECRET: &str = "kinesis-secret-5e1f";

/// An endpoint with the secret in its user-info and in its query, as a presigned or proxied
/// URL may carry one.
fn secret_endpoint() -> String {
    format!("https://svc:{SECRET}@kinesis.internal.example:8443/base?X-Amz-Security-Token={SECRET}")
}

fn json_of(bindings: &ruststream::asyncapi::Bindings) -> Value {
    serde_json::to_value(bindings).expect("bindings serialize")
}

#[test]
fn the_server_and_a_subscription_describe_no_credential() {
    let broker = KinesisBroker::new()
        .endpoint(secret_endpoint())
        .region("eu-west-1");
    for source in [
        KinesisStream::new("orders").create_if_missing(4),
        KinesisStream::new("orders")
            .enhanced_fan_out("warehouse")
            .initial_position(KinesisPosition::TrimHorizon),
    ] {
        harness::describes_without_credentials(&broker, &source, SECRET);
    }
    let server = broker.describe_server();
    assert_eq!(
        server.host.as_deref(),
        Some("kinesis.internal.example:8443")
    );
    assert_eq!(server.protocol, "kinesis");
}

#[test]
fn the_publish_policy_describes_no_credential() {
    for policy in [
        KinesisPublish::default(),
        KinesisPublish::default()
            .partition_key("orders-key")
            .aggregate(true),
    ] {
        message_shape::publishes_without_credentials::<ConnectedKinesisBroker, _>(&policy, SECRET);
    }
}

#[test]
fn a_broker_described_from_one_of_several_addresses_carries_none_of_their_credentials() {
    message_shape::describes_addresses_without_credentials(
        |addrs| KinesisBroker::new().endpoint(addrs[0]),
        "https",
    );
}

#[test]
fn the_bindings_say_the_stream_its_shards_how_it_is_read_and_where_it_starts() {
    let polling = KinesisStream::new("orders")
        .create_if_missing(4)
        .poll_interval(Duration::from_millis(500))
        .batch_size(200)
        .max_unsettled(1_000);
    assert_eq!(
        json_of(&SubscriptionSource::<ConnectedKinesisBroker>::channel_bindings(&polling)),
        json!({ "x-kinesis": { "stream": "orders", "shardsIfCreated": 4 } })
    );
    assert_eq!(
        json_of(&SubscriptionSource::<ConnectedKinesisBroker>::operation_bindings(&polling)),
        json!({ "x-kinesis": {
            "initialPosition": "LATEST",
            "read": { "polling": { "intervalMs": 500, "batchSize": 200 } },
            "maxUnsettled": 1000,
        } })
    );
    let fan_out = KinesisStream::new("orders")
        .enhanced_fan_out("warehouse")
        .consumer_must_exist()
        .initial_position(KinesisPosition::TrimHorizon);
    assert_eq!(
        json_of(&SubscriptionSource::<ConnectedKinesisBroker>::channel_bindings(&fan_out)),
        json!({ "x-kinesis": { "stream": "orders" } }),
        "no shard count where the subscription does not create the stream"
    );
    let operation =
        json_of(&SubscriptionSource::<ConnectedKinesisBroker>::operation_bindings(&fan_out));
    assert_eq!(operation["x-kinesis"]["initialPosition"], "TRIM_HORIZON");
    assert_eq!(
        operation["x-kinesis"]["read"],
        json!({ "enhancedFanOut": { "consumer": "warehouse", "registersIfMissing": false } })
    );
}

#[test]
fn the_message_bindings_say_the_partition_key_policy() {
    let random = PublishPolicy::<ConnectedKinesisBroker>::message_bindings(
        &KinesisPublish::default(),
        "orders",
    );
    assert_eq!(
        json_of(&random)["x-kinesis"]["partitionKey"],
        json!({ "policy": "random per record" })
    );
    let fixed = PublishPolicy::<ConnectedKinesisBroker>::message_bindings(
        &KinesisPublish::default()
            .partition_key("tenant-7")
            .aggregate(true),
        "orders",
    );
    let fixed = json_of(&fixed);
    assert_eq!(
        fixed["x-kinesis"]["partitionKey"],
        json!({ "policy": "fixed", "key": "tenant-7" })
    );
    assert_eq!(fixed["x-kinesis"]["kplAggregated"], true);
}

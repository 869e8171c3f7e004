//! No credential in any error (the local stack). Every error variant a run can reach is produced
//! here through a configuration carrying a recognisable secret key, session token and endpoint
//! password: by the calls and faults that cause it (a missing table, a stolen lease, a refused
//! seek, an unreachable endpoint, an answer of the fault injector...). Neither its `Display` nor
//! its `Debug` may carry one of them, nor any line logged on the way at TRACE. The variants no
//! run reaches through a configuration are listed with the reason (`NOT_REACHED`), and the test
//! fails when a variant is neither produced nor listed. It owns its binary: it installs the
//! process's global `tracing` subscriber.
#![cfg(all(feature = "dynamodb-lease", feature = "testing"))]

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use aws_types::service_config::{LoadServiceConfig, ServiceConfigKey};
use common::captured::Captured;
use common::faults::{Action, Faults, Rule, Service};
use common::secrets;
use futures::StreamExt as _;
use ruststream::{
    AckError, Broker, ConnectedBroker, DescribeServer, IncomingMessage, OutgoingMessage, Publisher,
    Seekable, Seeker, SubscriptionSource,
};
use ruststream_kinesis::{
    DynamoLeaseStore, KinesisBroker, KinesisError, KinesisOptions, KinesisPosition, KinesisStream,
    KinesisSubscriber, LeaseError, LeaseKey, LeaseStore,
};

/// Every variant of the two error types, as `Type::Variant`.
const EVERY_VARIANT: [&str; 28] = [
    "KinesisError::Config",
    "KinesisError::InvalidStreamName",
    "KinesisError::InvalidPartitionKey",
    "KinesisError::RecordTooLarge",
    "KinesisError::ShardNotFound",
    "KinesisError::SettledAfterHandover",
    "KinesisError::StreamNotFound",
    "KinesisError::DuplicateSubscription",
    "KinesisError::ShutDown",
    "KinesisError::Lease",
    "KinesisError::LeaseStore",
    "KinesisError::OwnerIdInUse",
    "KinesisError::Api",
    "KinesisError::PutRejected",
    "KinesisError::ConsumerNotFound",
    "KinesisError::ConsumerNotActive",
    "KinesisError::ConsumerLimit",
    "KinesisError::Seek",
    "KinesisError::ExactlyOnce",
    "LeaseError::Held",
    "LeaseError::Lost",
    "LeaseError::Deleted",
    "LeaseError::TableMissing",
    "LeaseError::TableMismatch",
    "LeaseError::LegacyRow",
    "LeaseError::OtherApplication",
    "LeaseError::Throttled",
    "LeaseError::Store",
];

/// The variants no run reaches through a configuration, and why.
const NOT_REACHED: [(&str, &str); 3] = [
    (
        "KinesisError::PutRejected",
        "Kinesis refusing single records inside a PutRecords answer: neither the emulator nor the \
         fault injector (whole-call faults) does it; its text is the stream, counts and the \
         service's per-record code and message, and the publisher's unit tests produce it",
    ),
    (
        "KinesisError::ShardNotFound",
        "never reported: a reader that meets it gives its shard up, and a seek wraps its text in \
         a Seek error",
    ),
    (
        "KinesisError::ConsumerNotActive",
        "a consumer described as DELETING, or CREATING for two minutes: the emulator deletes a \
         consumer at once and activates one within a second; its text is the stream, the \
         consumer and the status",
    ),
];

/// Every error shown, by variant: its `Display` and its `Debug`.
#[derive(Default)]
struct Gallery {
    shown: BTreeMap<String, Vec<(String, String)>>,
}

impl Gallery {
    fn kinesis(&mut self, err: &KinesisError) {
        if let KinesisError::Lease { source, .. } | KinesisError::LeaseStore { source } = err {
            self.lease(source);
        }
        self.add("KinesisError", format!("{err}"), format!("{err:?}"));
    }

    fn lease(&mut self, err: &LeaseError) {
        self.add("LeaseError", format!("{err}"), format!("{err:?}"));
    }

    fn add(&mut self, kind: &str, display: String, debug: String) {
        let variant: String = debug
            .chars()
            .take_while(char::is_ascii_alphanumeric)
            .collect();
        self.shown
            .entry(format!("{kind}::{variant}"))
            .or_default()
            .push((display, debug));
    }

    fn has(&self, variant: &str) -> bool {
        self.shown.contains_key(variant)
    }
}

/// The errors `sub` reports until one satisfies `wanted` (within 60 s), each shown.
async fn reported(
    sub: &mut KinesisSubscriber,
    gallery: &mut Gallery,
    wanted: impl Fn(&KinesisError) -> bool,
) -> KinesisError {
    let mut stream = std::pin::pin!(ruststream::Subscriber::stream(sub));
    loop {
        let item = tokio::time::timeout(Duration::from_secs(60), stream.next())
            .await
            .expect("the error within 60 s")
            .expect("the subscription is open");
        if let Err(err) = item {
            gallery.kinesis(&err);
            if wanted(&err) {
                return err;
            }
        }
    }
}

fn polling(stream: &str) -> KinesisStream {
    KinesisStream::new(stream.to_owned())
        .create_if_missing(1)
        .poll_interval(Duration::from_millis(200))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_error_of_any_variant_carries_a_credential() {
    let Some(url) = common::endpoint() else {
        return;
    };
    let captured = Captured::everything();
    // A client name of this run's own: a rule a killed run left behind never meets it.
    let client = common::unique("credentials-errors");
    // Its requests go through the fault injector, which passes them on to the stack.
    let faults = Faults::new(&url);
    let config = faults.around(secrets::config(&url, &client));
    let mut gallery = Gallery::default();
    let table = common::unique("credentials-errors");
    let store = DynamoLeaseStore::new(&config, table.as_str());
    store.create_table().await.unwrap();
    let store = Arc::new(store);
    let broker = || {
        KinesisBroker::from_config(config.clone())
            .lease_store(Arc::clone(&store) as Arc<dyn LeaseStore>)
            .lease_timings(common::instances::timings())
    };

    // The configuration: no region; a stream's initial position naming a record.
    let no_region = config.clone().into_builder().region(None).build();
    let err = KinesisBroker::from_config(no_region)
        .connect()
        .await
        .unwrap_err();
    gallery.kinesis(&err);
    let connected = broker().connect().await.unwrap();
    let err = KinesisStream::new("orders")
        .initial_position(KinesisPosition::at_sequence("shardId-000000000000", "1"))
        .subscribe(&connected)
        .await
        .unwrap_err();
    gallery.kinesis(&err);
    // Exactly once with a lease longer than DynamoDB keeps a transaction's request token.
    let long_lease = KinesisBroker::from_config(config.clone())
        .lease_store(Arc::clone(&store) as Arc<dyn LeaseStore>)
        .lease_timings(
            ruststream_kinesis::LeaseTimings::new(Duration::from_secs(600), Duration::from_secs(3))
                .unwrap(),
        )
        .connect()
        .await
        .unwrap();
    let err = KinesisStream::new("orders")
        .exactly_once()
        .subscribe(&long_lease)
        .await
        .unwrap_err();
    gallery.kinesis(&err);
    long_lease.shutdown().await.unwrap();

    // Names: a stream name Kinesis rejects, a stream that does not exist, a second subscription.
    let err = KinesisStream::new("bad name")
        .subscribe(&connected)
        .await
        .unwrap_err();
    gallery.kinesis(&err);
    let missing = common::unique("missing");
    let err = KinesisStream::new(missing.clone())
        .subscribe(&connected)
        .await
        .unwrap_err();
    gallery.kinesis(&err);
    let stream = common::unique("credentials-errors");
    let mut sub = polling(&stream).subscribe(&connected).await.unwrap();
    let err = polling(&stream).subscribe(&connected).await.unwrap_err();
    gallery.kinesis(&err);

    // Publishing: an empty partition key, a record over the limit, a call the service refuses.
    let publisher = connected.publisher().await.unwrap();
    let empty_key = KinesisOptions::default().with_partition_key("");
    let err = publisher
        .publish(
            OutgoingMessage::new(stream.as_str(), b"x".as_slice()),
            Some(&empty_key),
        )
        .await
        .unwrap_err();
    gallery.kinesis(&err);
    let err = publisher
        .publish(
            OutgoingMessage::new(stream.as_str(), vec![0u8; 1024 * 1024 + 1].as_slice()),
            None,
        )
        .await
        .unwrap_err();
    gallery.kinesis(&err);
    let refusal = faults.add(Rule::on(
        Service::Kinesis,
        "PutRecords",
        refused_by_the_test(),
    ));
    let err = publisher
        .publish(OutgoingMessage::new(stream.as_str(), b"x".as_slice()), None)
        .await
        .unwrap_err();
    gallery.kinesis(&err);
    faults.remove(refusal);

    // Seeks: a shard this instance does not read, and a position Kinesis refuses.
    let one_key = KinesisOptions::default().with_partition_key("k");
    publisher
        .publish(
            OutgoingMessage::new(stream.as_str(), b"first".as_slice()),
            Some(&one_key),
        )
        .await
        .unwrap();
    let held = {
        let mut deliveries = std::pin::pin!(ruststream::Subscriber::stream(&mut sub));
        common::next_delivery_past(&mut deliveries, |err| gallery.kinesis(&err)).await
    };
    let seeker = sub.seeker();
    let err = seeker
        .seek(KinesisPosition::at_sequence("shardId-000000000009", "1"))
        .await
        .unwrap_err();
    gallery.kinesis(&err);
    let err = seeker
        .seek(KinesisPosition::at_sequence(
            "shardId-000000000000",
            "49590338271490256608559692538361571095921575989136588898",
        ))
        .await
        .unwrap_err();
    assert!(
        !err.to_string().contains("no longer exists"),
        "a refused position is not a gone shard: {err}"
    );
    gallery.kinesis(&err);

    // A lease stolen in the table: the renewal is refused, the reader stops (a lost lease is
    // logged, not reported), and the delivery it handed out is settled after the handover.
    let key = LeaseKey::new(stream.as_str(), "shardId-000000000000");
    steal(&url, &table, &key).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !captured
        .lines()
        .iter()
        .any(|line| line.contains("lease lost ("))
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the lease is lost within 30 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    match held.ack().await {
        Err(AckError::Broker(err)) => gallery.kinesis(
            err.downcast_ref::<KinesisError>()
                .expect("the broker's own error"),
        ),
        other => panic!("a settlement after the handover is refused: {other:?}"),
    }

    // Enhanced fan-out: a consumer that must exist and does not, one past the limit.
    let fanned = common::unique("credentials-fan-out");
    let err = KinesisStream::new(fanned.clone())
        .create_if_missing(1)
        .enhanced_fan_out("nobody-registered-me")
        .consumer_must_exist()
        .subscribe(&connected)
        .await
        .unwrap_err();
    gallery.kinesis(&err);
    let raw = common::raw_kinesis(&url);
    common::fill_consumers(&raw, &common::stream_arn(&raw, &fanned).await).await;
    let err = KinesisStream::new(fanned.clone())
        .create_if_missing(1)
        .enhanced_fan_out("one-too-many")
        .subscribe(&connected)
        .await
        .unwrap_err();
    gallery.kinesis(&err);

    // The lease store, called directly: held, lost, another application's row, a bare row of an
    // earlier version, a row deleted since it was read, a failing call.
    lease_store_errors(&url, &config, &table, &faults, &mut gallery).await;

    // A store on a table that does not exist, and one keyed as the Java KCL keys its table:
    // each refuses the start.
    let absent = Arc::new(DynamoLeaseStore::new(&config, common::unique("absent")));
    let err = KinesisBroker::from_config(config.clone())
        .lease_store(absent as Arc<dyn LeaseStore>)
        .connect()
        .await
        .unwrap_err();
    assert!(
        matches!(&err, KinesisError::LeaseStore { source }
            if matches!(**source, LeaseError::TableMissing { .. })),
        "{err:?}"
    );
    gallery.kinesis(&err);
    let kcl = common::unique("kcl");
    aws_sdk_dynamodb::Client::new(&common::sdk_config(&url))
        .create_table()
        .table_name(&kcl)
        .billing_mode(aws_sdk_dynamodb::types::BillingMode::PayPerRequest)
        .attribute_definitions(
            aws_sdk_dynamodb::types::AttributeDefinition::builder()
                .attribute_name("leaseKey")
                .attribute_type(aws_sdk_dynamodb::types::ScalarAttributeType::S)
                .build()
                .unwrap(),
        )
        .key_schema(
            aws_sdk_dynamodb::types::KeySchemaElement::builder()
                .attribute_name("leaseKey")
                .key_type(aws_sdk_dynamodb::types::KeyType::Hash)
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
    let mismatched = Arc::new(DynamoLeaseStore::new(&config, kcl));
    gallery.kinesis(
        &KinesisBroker::from_config(config.clone())
            .lease_store(mismatched as Arc<dyn LeaseStore>)
            .connect()
            .await
            .unwrap_err(),
    );

    // One owner id on two running instances: the later stops, and says so.
    let twin = || broker().owner_id("twin-pod").connect();
    let (earlier, later) = (twin().await.unwrap(), twin().await.unwrap());
    let twins = common::unique("twins");
    let kept = polling(&twins).subscribe(&earlier).await.unwrap();
    let mut stopped = polling(&twins).subscribe(&later).await.unwrap();
    reported(&mut stopped, &mut gallery, |err| {
        matches!(err, KinesisError::OwnerIdInUse { .. })
    })
    .await;
    drop((kept, stopped));

    // A row the store cannot read, reported by the subscription that needs it.
    let unreadable = common::unique("unreadable");
    aws_sdk_dynamodb::Client::new(&common::sdk_config(&url))
        .put_item()
        .table_name(table.as_str())
        .item(
            "lease_key",
            aws_sdk_dynamodb::types::AttributeValue::S(format!(
                "{unreadable}:shardId-000000000000"
            )),
        )
        .item(
            "lease_expiry",
            aws_sdk_dynamodb::types::AttributeValue::S("soon".to_owned()),
        )
        .send()
        .await
        .unwrap();
    let mut blocked = polling(&unreadable).subscribe(&connected).await.unwrap();
    reported(&mut blocked, &mut gallery, |err| {
        matches!(err, KinesisError::Lease { .. })
    })
    .await;
    drop(blocked);
    earlier.shutdown().await.unwrap();
    later.shutdown().await.unwrap();

    // Endpoints: the service's own (as AWS_ENDPOINT_URL_KINESIS or a profile's [services] set
    // it), and one that does not parse.
    let mut scanned = endpoints(&url, &config, &stream, &mut gallery).await;

    // After shutdown, and against an endpoint nothing answers.
    drop(sub);
    connected.shutdown().await.unwrap();
    let err = publisher
        .publish(OutgoingMessage::new(stream.as_str(), b"x".as_slice()), None)
        .await
        .unwrap_err();
    gallery.kinesis(&err);
    let nowhere = config
        .clone()
        .into_builder()
        .endpoint_url(secrets::with_password("http://127.0.0.1:9"))
        .build();
    let unreachable = KinesisBroker::from_config(nowhere).connect().await.unwrap();
    let err = polling(&stream).subscribe(&unreachable).await.unwrap_err();
    gallery.kinesis(&err);

    for variant in EVERY_VARIANT {
        let listed = NOT_REACHED.iter().any(|(name, _)| *name == variant);
        assert!(
            gallery.has(variant) != listed,
            "{variant}: produced {}, listed as not reached {listed}",
            gallery.has(variant)
        );
    }
    for (variant, shown) in &gallery.shown {
        assert!(
            EVERY_VARIANT.contains(&variant.as_str()),
            "{variant} is new: list it"
        );
        for (display, debug) in shown {
            secrets::assert_none_in(display, variant);
            secrets::assert_none_in(debug, variant);
            // A message is one line of prose: no SDK `Debug` dump of the raw answer, no run of
            // spaces from a string broken across source lines.
            assert!(
                !display.contains("ErrorMetadata {") && !display.contains("  "),
                "{variant} reads as a message: {display}"
            );
            if std::env::var_os("SHOW_ERRORS").is_some() {
                println!("{variant}: {display}");
            }
        }
    }
    scanned.extend(captured.lines());
    let lines = scanned;
    for line in &lines {
        secrets::assert_none_in(line, "a log line");
    }
    assert!(
        lines.len() > 100,
        "the run logged at TRACE ({} lines)",
        lines.len()
    );
}

/// Another owner takes the row of `key` behind the store's back, for an hour.
async fn steal(url: &str, table: &str, key: &LeaseKey) {
    let later = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis()
        + 3_600_000;
    aws_sdk_dynamodb::Client::new(&common::sdk_config(url))
        .update_item()
        .table_name(table)
        .key("lease_key", AttributeValue::S(key.row_key()))
        .update_expression("SET lease_owner = :thief, lease_expiry = :later ADD lease_counter :one")
        .expression_attribute_values(":thief", AttributeValue::S("thief".to_owned()))
        .expression_attribute_values(":later", AttributeValue::N(later.to_string()))
        .expression_attribute_values(":one", AttributeValue::N("1".to_owned()))
        .send()
        .await
        .expect("steal the row");
}

async fn lease_store_errors(
    url: &str,
    config: &aws_config::SdkConfig,
    table: &str,
    faults: &Faults,
    gallery: &mut Gallery,
) {
    let lease = Duration::from_secs(30);
    let store = DynamoLeaseStore::new(config, table);
    let key = LeaseKey::new("orders", "shardId-000000000001");
    store.acquire(&key, "pod-a", lease).await.unwrap();
    gallery.lease(&store.acquire(&key, "pod-b", lease).await.unwrap_err());
    gallery.lease(&store.renew(&key, "pod-b", lease).await.unwrap_err());

    let warehouse = DynamoLeaseStore::new(config, table).application("warehouse");
    let billing = DynamoLeaseStore::new(config, table).application("billing");
    let claimed = LeaseKey::new("orders", "shardId-000000000002");
    warehouse.acquire(&claimed, "pod-a", lease).await.unwrap();
    warehouse.release(&claimed, "pod-a").await.unwrap();
    gallery.lease(&billing.acquire(&claimed, "pod-b", lease).await.unwrap_err());

    aws_sdk_dynamodb::Client::new(&common::sdk_config(url))
        .put_item()
        .table_name(table)
        .item(
            "lease_key",
            AttributeValue::S("shardId-000000000003".to_owned()),
        )
        .item("lease_counter", AttributeValue::N("1".to_owned()))
        .item("checkpoint", AttributeValue::S("42".to_owned()))
        .send()
        .await
        .expect("put a bare row");
    let bare = LeaseKey::new("orders", "shardId-000000000003");
    gallery.lease(&store.acquire(&bare, "pod-a", lease).await.unwrap_err());

    let finished = LeaseKey::new("orders", "shardId-000000000004");
    store.acquire(&finished, "pod-a", lease).await.unwrap();
    store.release(&finished, "pod-a").await.unwrap();
    let stale = DynamoLeaseStore::new(config, table);
    let counter = stale
        .read(&finished)
        .await
        .unwrap()
        .expect("the row")
        .counter;
    assert!(store.delete(&finished, counter).await.unwrap());
    gallery.lease(
        &stale
            .acquire_from(&finished, "pod-b", lease, "TRIM_HORIZON")
            .await
            .unwrap_err(),
    );

    let failing = faults.add(Rule::on(
        Service::DynamoDb,
        "GetItem",
        refused_by_the_test(),
    ));
    gallery.lease(&store.read(&key).await.unwrap_err());
    faults.remove(failing);

    // Throttled past the SDK's retries (three attempts, backing off for less than the default
    // so that they fit the call's bound).
    let quick = DynamoLeaseStore::new(
        &config
            .to_builder()
            .retry_config(
                aws_config::retry::RetryConfig::standard()
                    .with_initial_backoff(Duration::from_millis(50))
                    .with_max_backoff(Duration::from_millis(200)),
            )
            .build(),
        table,
    );
    let throttled =
        faults.add(Rule::on(Service::DynamoDb, "UpdateItem", Action::Throttle).times(3));
    let err = quick.renew(&key, "pod-a", lease).await.unwrap_err();
    assert!(err.is_throttled() && !err.is_fenced(), "{err}");
    gallery.lease(&err);
    faults.remove(throttled);
}

/// The fault injector's answer to a request it refuses: a `ValidationException`, applying
/// nothing.
fn refused_by_the_test() -> Action {
    Action::Status {
        status: 400,
        error_type: "ValidationException",
        message: "refused by the test",
    }
}

/// Every service's endpoint from the configuration's per-service settings.
#[derive(Debug)]
struct PerService(String);

impl LoadServiceConfig for PerService {
    fn load_config(&self, key: ServiceConfigKey<'_>) -> Option<String> {
        (key.profile() == "endpoint_url").then(|| self.0.clone())
    }
}

/// A broker and a store reaching the local stack through a per-service endpoint with the
/// password and the token in it, and a broker and a store given an endpoint that does not parse;
/// answers the descriptions and `Debug`s to scan with the log.
async fn endpoints(
    url: &str,
    config: &aws_config::SdkConfig,
    stream: &str,
    gallery: &mut Gallery,
) -> Vec<String> {
    let mut per_service = config.clone().into_builder();
    per_service.set_endpoint_url(None);
    let per_service = per_service
        .service_config(PerService(secrets::with_password(url)))
        .build();
    let store = DynamoLeaseStore::new(&per_service, common::unique("per-service"));
    store
        .create_table()
        .await
        .expect("the store reaches DynamoDB");
    let broker = KinesisBroker::from_config(per_service).lease_store(Arc::new(store));
    let mut scanned = vec![
        format!("{broker:?}"),
        format!("{:?}", broker.describe_server()),
    ];
    let connected = broker.connect().await.unwrap();
    let err = KinesisStream::new(common::unique("per-service-missing"))
        .subscribe(&connected)
        .await
        .unwrap_err();
    assert!(
        matches!(err, KinesisError::StreamNotFound { .. }),
        "the broker reached Kinesis: {err}"
    );
    gallery.kinesis(&err);
    connected.shutdown().await.unwrap();

    let slashed = config
        .clone()
        .into_builder()
        .endpoint_url(secrets::with_slashed_password(url))
        .build();
    let broker = KinesisBroker::from_config(slashed.clone());
    scanned.push(format!("{broker:?}"));
    let described = broker.describe_server();
    assert_eq!(
        described.host.as_deref(),
        Some("kinesis.us-east-1.amazonaws.com"),
        "an endpoint that does not parse is not described"
    );
    let err = broker.connect().await.unwrap_err();
    assert!(
        matches!(&err, KinesisError::Config { message } if message.contains("scheme://host")),
        "{err}"
    );
    gallery.kinesis(&err);
    let store = DynamoLeaseStore::new(&slashed, "slashed");
    let err = store
        .read(&LeaseKey::new(stream, "shardId-000000000000"))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("scheme://host"), "{err}");
    gallery.lease(&err);
    scanned.push(format!("{store:?}"));
    scanned
}

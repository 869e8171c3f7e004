//! Degradations are loud, live on the local stack: a lease-table call of the coordinator that
//! keeps failing (here the notice read, refused as an IAM policy would) is one WARN per episode
//! saying what stops working, an INFO when it recovers, and the gauge
//! `aws_kinesis_coordination_degraded` meanwhile; a shard that delivers nothing while records
//! wait behind it is a stall: a WARN naming stream, shard and owner, and the gauge
//! `aws_kinesis_shard_stalled`, until it delivers again.
//!
//! They run when `KINESIS_TEST_ENDPOINT` names the local stack.
#![cfg(all(feature = "dynamodb-lease", feature = "testing", feature = "metrics"))]

mod common;

use std::pin::pin;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use common::captured::Captured;
use common::faults::{Action, Faults, Rule, Service};
use common::instances::{Instance, publish_all, timings};
use ruststream::{Broker, ConnectedBroker, IncomingMessage, Subscriber, SubscriptionSource};
use ruststream_kinesis::{
    DynamoLeaseStore, KinesisMetrics, KinesisPosition, KinesisStream, LeaseStore,
};
use tokio::sync::mpsc;

/// This binary's log, captured once.
fn logs() -> &'static Captured {
    static LOGS: OnceLock<Captured> = OnceLock::new();
    LOGS.get_or_init(Captured::everything)
}

/// The lines logged so far that contain every one of `words`.
fn logged(words: &[&str]) -> Vec<String> {
    logs()
        .lines()
        .into_iter()
        .filter(|line| words.iter().all(|word| line.contains(word)))
        .collect()
}

/// The value of the series `name` with `labels` (each `key="value"`) in `registry`'s scrape.
fn series(registry: &prometheus::Registry, name: &str, labels: &[&str]) -> Option<f64> {
    use prometheus::Encoder;
    let mut text = Vec::new();
    prometheus::TextEncoder::new()
        .encode(&registry.gather(), &mut text)
        .unwrap();
    String::from_utf8(text).unwrap().lines().find_map(|line| {
        let (head, value) = line.rsplit_once(' ')?;
        (head.starts_with(&format!("{name}{{")) && labels.iter().all(|l| head.contains(l)))
            .then(|| value.parse().ok())?
    })
}

/// Waits up to `within` for `check`.
async fn until(within: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if check() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    check()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_notice_that_cannot_be_read_is_one_warning_until_it_recovers() {
    let Some(url) = common::endpoint() else {
        return;
    };
    logs();
    let faults = Faults::new(&url);
    let store = DynamoLeaseStore::new(&faults.sdk_config(), common::unique("leases"));
    store.create_table().await.unwrap();
    let store: Arc<dyn LeaseStore> = Arc::new(store);
    let registry = prometheus::Registry::new();
    let broker = common::broker_with(&url, store)
        .lease_timings(timings())
        .metrics(KinesisMetrics::register(&registry).unwrap());
    let stream = common::unique("degraded");
    let (tx, _rx) = mpsc::unbounded_channel();
    let instance = Instance::start_with(broker, "pod-a", (&stream, 1), tx, None).await;
    let degraded = |registry: &prometheus::Registry| {
        series(
            registry,
            "aws_kinesis_coordination_degraded",
            &["call=\"notice\"", &format!("stream=\"{stream}\"")],
        )
    };
    assert_eq!(
        degraded(&registry),
        Some(0.0),
        "the series shows from the start"
    );

    // Every GetItem of this client refused, as a policy without dynamodb:GetItem would.
    let refusal = faults.add(Rule::on(
        Service::DynamoDb,
        "GetItem",
        Action::Status {
            status: 400,
            error_type: "AccessDeniedException",
            message: "not allowed by the test",
        },
    ));
    let warned = || logged(&["WARN", "lease-table call notice failed", &stream]);
    assert!(until(Duration::from_secs(15), || !warned().is_empty()).await);
    // The poll reads the notice every second: several failures, one warning.
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(
        faults.hits(refusal) >= 3,
        "the notice was read and refused again"
    );
    let warnings = warned();
    assert_eq!(warnings.len(), 1, "{warnings:#?}");
    assert!(
        warnings[0].contains("handover poll sees nothing"),
        "says what stops working: {}",
        warnings[0]
    );
    assert_eq!(degraded(&registry), Some(1.0));

    faults.remove(refusal);
    assert!(
        until(Duration::from_secs(15), || {
            !logged(&["INFO", "lease-table call notice works again", &stream]).is_empty()
        })
        .await,
        "the recovery is logged"
    );
    assert_eq!(degraded(&registry), Some(0.0));
    assert_eq!(warned().len(), 1);
    instance.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shard_that_delivers_nothing_while_records_wait_is_a_stall() {
    let Some(url) = common::endpoint() else {
        return;
    };
    logs();
    let registry = prometheus::Registry::new();
    let connected = common::broker(&url)
        .owner_id("pod-stall")
        .lease_timings(timings())
        .metrics(KinesisMetrics::register(&registry).unwrap())
        .connect()
        .await
        .unwrap();
    let stream = common::unique("stalled");
    // One record in flight at most, three read per call: a handler that does not settle stops
    // the shard with records behind it.
    let source = KinesisStream::new(stream.clone())
        .create_if_missing(1)
        .initial_position(KinesisPosition::TrimHorizon)
        .poll_interval(Duration::from_millis(200))
        .batch_size(3)
        .max_unsettled(1)
        .stall_after(Duration::from_secs(2));
    // Every record is in the shard before the first read: that read is a full batch, behind the
    // shard's newest record. (Published while the reader polled, a first read of one record,
    // caught up, then a full window would leave nothing known to wait behind the shard.)
    let raw = common::raw_kinesis(&url);
    common::create_stream(&raw, &stream, 1).await;
    publish_all(&url, &stream, (0..12).map(|n| format!("record-{n}"))).await;
    let mut subscriber = source.subscribe(&connected).await.unwrap();
    let mut deliveries = pin!(subscriber.stream());
    let held = common::next_delivery(&mut deliveries).await;
    let shard = held.shard_id().to_owned();
    let stalled = |registry: &prometheus::Registry| {
        series(
            registry,
            "aws_kinesis_shard_stalled",
            &[
                &format!("shard=\"{shard}\""),
                &format!("stream=\"{stream}\""),
            ],
        )
    };
    assert_eq!(
        stalled(&registry),
        Some(0.0),
        "the series shows from the start"
    );
    let warned = || logged(&["WARN", "the shard stalled", &stream, &shard, "pod-stall"]);
    let began = Instant::now();
    assert!(
        until(Duration::from_secs(20), || !warned().is_empty()).await,
        "a stall within the bound (2 s) and a lease write"
    );
    println!(
        "stall found {:?} after the handler held its record",
        began.elapsed()
    );
    assert_eq!(stalled(&registry), Some(1.0));
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(warned().len(), 1, "said once");

    // The handler settles: the shard delivers again, and says so.
    held.ack().await.unwrap();
    for _ in 1..12 {
        common::next_delivery(&mut deliveries)
            .await
            .ack()
            .await
            .unwrap();
    }
    assert!(
        until(Duration::from_secs(15), || {
            !logged(&["INFO", "the shard delivers again", &stream, &shard]).is_empty()
        })
        .await
    );
    assert_eq!(stalled(&registry), Some(0.0));
    connected.shutdown().await.unwrap();
}

/// `broker`, counting into `registry`, connected and reading a new stream of one shard named
/// after `prefix` from its oldest record.
async fn metered(
    broker: ruststream_kinesis::KinesisBroker,
    registry: &prometheus::Registry,
    prefix: &str,
) -> (
    ruststream_kinesis::ConnectedKinesisBroker,
    String,
    ruststream_kinesis::KinesisSubscriber,
) {
    let connected = broker
        .lease_timings(timings())
        .metrics(KinesisMetrics::register(registry).unwrap())
        .connect()
        .await
        .unwrap();
    let stream = common::unique(prefix);
    let subscriber = KinesisStream::new(stream.clone())
        .create_if_missing(1)
        .initial_position(KinesisPosition::TrimHorizon)
        .poll_interval(Duration::from_millis(200))
        .subscribe(&connected)
        .await
        .unwrap();
    (connected, stream, subscriber)
}

/// Every Kinesis call is an operation in `messaging_client_operation_duration_seconds`, its
/// error type the service's error code: here reads throttled by the router, as Kinesis does
/// when a shard's five reads a second are spent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_throttled_read_is_an_operation_with_the_services_error_code() {
    let Some(url) = common::endpoint() else {
        return;
    };
    let faults = Faults::new(&url);
    let registry = prometheus::Registry::new();
    let broker = ruststream_kinesis::KinesisBroker::from_config(faults.sdk_config());
    let (connected, stream, mut subscriber) = metered(broker, &registry, "throttled-op").await;
    let throttled = faults.add(Rule::on(Service::Kinesis, "GetRecords", Action::Throttle).times(4));
    publish_all(&url, &stream, ["one".to_owned()]).await;
    let mut deliveries = pin!(subscriber.stream());
    common::next_delivery(&mut deliveries)
        .await
        .ack()
        .await
        .unwrap();
    assert_eq!(faults.hits(throttled), 4);
    let calls = |error: &str| {
        series(
            &registry,
            "messaging_client_operation_duration_seconds_count",
            &[
                "operation=\"GetRecords\"",
                &format!("error_type=\"{error}\""),
            ],
        )
    };
    // The SDK tries a throttled call three times before it answers with the error: four
    // throttles fail one call at least.
    let failed = calls("ProvisionedThroughputExceededException").unwrap_or(0.0);
    assert!(failed >= 1.0, "throttled GetRecords calls: {failed}");
    assert!(calls("").is_some_and(|answered| answered >= 1.0));
    connected.shutdown().await.unwrap();
}

/// A lease-table call DynamoDB throttles past the SDK's retries is counted `throttled` (not
/// `failed`, never `refused`) and tried again: the lease is kept, and the shard reads on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_throttled_lease_call_is_counted_throttled_and_the_lease_is_kept() {
    let Some(url) = common::endpoint() else {
        return;
    };
    let faults = Faults::new(&url);
    let (_, created) = common::instances::table(&url).await;
    let table = created.table_name().unwrap().to_owned();
    let store = quickly_retried_store(&faults, &table);
    let registry = prometheus::Registry::new();
    let broker = ruststream_kinesis::KinesisBroker::from_config(faults.sdk_config())
        .lease_store(Arc::new(store.clone()))
        .owner_id("pod-throttled");
    let (connected, stream, mut subscriber) = metered(broker, &registry, "throttled-lease").await;
    let mut deliveries = pin!(subscriber.stream());
    publish_all(&url, &stream, ["before".to_owned()]).await;
    common::next_delivery(&mut deliveries)
        .await
        .ack()
        .await
        .unwrap();
    // The next renewal (or checkpoint) is throttled on each of the SDK's three attempts.
    let throttled =
        faults.add(Rule::on(Service::DynamoDb, "UpdateItem", Action::Throttle).times(3));
    let counted = |error: &str| {
        series(
            &registry,
            "messaging_client_operation_duration_seconds_count",
            &[
                "operation=\"lease_table.",
                &format!("error_type=\"{error}\""),
            ],
        )
    };
    assert!(
        until(Duration::from_secs(15), || counted("throttled").is_some()).await,
        "a throttled lease call is counted as such: timeout {:?}, failed {:?}, hits {}",
        counted("timeout"),
        counted("failed"),
        faults.hits(throttled)
    );
    assert_eq!(faults.hits(throttled), 3);
    assert_eq!(counted("refused"), None, "throttling is never a lost lease");
    publish_all(&url, &stream, ["after".to_owned()]).await;
    let after = common::next_delivery(&mut deliveries).await;
    assert_eq!(after.payload(), b"after", "the shard reads on");
    after.ack().await.unwrap();
    let rows = store.list(&stream).await.unwrap().unwrap_or_default();
    assert!(
        rows.iter()
            .all(|(_, row)| row.owner.as_deref() == Some("pod-throttled")),
        "the lease is kept: {rows:?}"
    );
    connected.shutdown().await.unwrap();
}

/// Takes the lease table throttles past the SDK's retries pause every take of the instance for
/// a backoff, each a WARN naming the stream and the shard, counted `throttled` and never
/// `refused`; once the table accepts writes again, every shard is taken and every record read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn throttled_takes_pause_warn_and_every_shard_is_read_once_the_table_accepts_writes() {
    let Some(url) = common::endpoint() else {
        return;
    };
    logs();
    let faults = Faults::new(&url);
    let (_, created) = common::instances::table(&url).await;
    let table = created.table_name().unwrap().to_owned();
    let store = quickly_retried_store(&faults, &table);
    let stream = common::unique("throttled-takes");
    let bodies: Vec<String> = (0..30).map(|n| format!("record-{n}")).collect();
    {
        // The stream (three shards) and its records first, with the in-process store: the takes
        // are the first writes to the table.
        let connected = common::broker(&url).connect().await.unwrap();
        let _ = common::instances::stream_of(&stream, 3)
            .subscribe(&connected)
            .await
            .unwrap();
        connected.shutdown().await.unwrap();
        publish_all(&url, &stream, bodies.clone()).await;
    }
    let registry = prometheus::Registry::new();
    // Every write throttled while the subscription starts: its takes among them.
    let throttled = faults.add(Rule::on(Service::DynamoDb, "UpdateItem", Action::Throttle));
    let connected = ruststream_kinesis::KinesisBroker::from_config(faults.sdk_config())
        .lease_store(Arc::new(store.clone()))
        .owner_id("pod-throttled-takes")
        .lease_timings(timings())
        .metrics(KinesisMetrics::register(&registry).unwrap())
        .connect()
        .await
        .unwrap();
    let mut subscriber = KinesisStream::new(stream.clone())
        .initial_position(KinesisPosition::TrimHorizon)
        .poll_interval(Duration::from_millis(200))
        .subscribe(&connected)
        .await
        .unwrap();
    let acquires = |error: &str| {
        series(
            &registry,
            "messaging_client_operation_duration_seconds_count",
            &[
                "operation=\"lease_table.acquire\"",
                &format!("error_type=\"{error}\""),
            ],
        )
    };
    assert!(
        until(Duration::from_secs(20), || acquires("throttled").is_some()).await,
        "a throttled take is counted as such: timeout {:?}, failed {:?}, hits {}",
        acquires("timeout"),
        acquires("failed"),
        faults.hits(throttled)
    );
    assert!(
        until(Duration::from_secs(10), || {
            !logged(&["the lease table throttled a take", &stream]).is_empty()
        })
        .await,
        "a throttled take is a WARN naming the stream"
    );
    // The table accepts writes again: every shard is taken, every record read.
    faults.remove(throttled);
    let mut deliveries = pin!(subscriber.stream());
    let mut read = std::collections::BTreeSet::new();
    while read.len() < bodies.len() {
        let delivery = common::next_delivery(&mut deliveries).await;
        read.insert(String::from_utf8(delivery.payload().to_vec()).unwrap());
        delivery.ack().await.unwrap();
    }
    assert_eq!(read, bodies.iter().cloned().collect());
    assert_eq!(
        acquires("refused"),
        None,
        "a throttled take is never a lost lease"
    );
    let rows = store.list(&stream).await.unwrap().unwrap_or_default();
    assert!(
        rows.len() == 3
            && rows
                .iter()
                .all(|(_, row)| row.owner.as_deref() == Some("pod-throttled-takes")),
        "every shard taken: {rows:?}"
    );
    connected.shutdown().await.unwrap();
}

/// A lease store on `table` whose SDK retries back off for less than the default (1 s,
/// doubling): a throttled call's three attempts fit its bound (the renewal interval), so it
/// answers as throttled rather than as a timeout.
fn quickly_retried_store(faults: &Faults, table: &str) -> DynamoLeaseStore {
    let quick = faults
        .sdk_config()
        .into_builder()
        .retry_config(
            aws_config::retry::RetryConfig::standard()
                .with_initial_backoff(Duration::from_millis(50))
                .with_max_backoff(Duration::from_millis(200)),
        )
        .build();
    DynamoLeaseStore::new(&quick, table)
}

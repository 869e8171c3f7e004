//! Live tests of the faults the emulators never produce (docs/src/fault-injector.md): a write
//! DynamoDB applied whose answer was lost, a shard that left the stream, hung calls, throttled
//! reads, injected at the SDK's connector seam (`common::faults`), whose rules only the clients
//! of each test see; and a call held on the wire by the local stack's router, for a pooled
//! connection that must outlive the runtime that opened it.
#![cfg(feature = "dynamodb-lease")]

mod common;

use std::pin::pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::faults::{Action, Faults, Rule, Service};
use common::injector::Injector;
use futures::StreamExt;
use ruststream::{
    Broker, ConnectedBroker, IncomingMessage, OutgoingMessage, Publisher, Subscriber,
    SubscriptionSource,
};
use ruststream_kinesis::{
    DynamoLeaseStore, KinesisBroker, KinesisMessage, KinesisOptions, KinesisStream, LeaseKey,
    LeaseStore, LeaseTimings,
};
use serde_json::json;

fn timings() -> LeaseTimings {
    LeaseTimings::new(Duration::from_secs(3), Duration::from_secs(1))
        .unwrap()
        .with_listing_interval(Duration::from_secs(1))
}

async fn table(config: &aws_config::SdkConfig) -> DynamoLeaseStore {
    let store = DynamoLeaseStore::new(config, common::unique("faults"));
    store.create_table().await.expect("the lease table");
    store
}

/// An instance on `stream` (created with one shard) whose calls go through `faults`, with
/// `store` or the default in-memory lease store.
async fn instance(
    faults: &Faults,
    stream: &str,
    store: Option<Arc<dyn LeaseStore>>,
) -> (
    ruststream_kinesis::ConnectedKinesisBroker,
    ruststream_kinesis::KinesisSubscriber,
) {
    let mut broker = KinesisBroker::from_config(faults.sdk_config()).lease_timings(timings());
    if let Some(store) = store {
        broker = broker.lease_store(store);
    }
    let connected = broker.connect().await.unwrap();
    let sub = KinesisStream::new(stream.to_owned())
        .create_if_missing(1)
        .poll_interval(Duration::from_millis(200))
        .subscribe(&connected)
        .await
        .unwrap();
    (connected, sub)
}

async fn next_record<S>(stream: &mut S, within: Duration) -> Option<KinesisMessage>
where
    S: futures::Stream<Item = Result<KinesisMessage, ruststream_kinesis::KinesisError>> + Unpin,
{
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline, stream.next()).await {
            Ok(Some(Ok(message))) => return Some(message),
            Ok(Some(Err(err))) => eprintln!("subscription reported: {err}"),
            Ok(None) | Err(_) => return None,
        }
    }
}

async fn publish(url: &str, stream: &str, bodies: &[&str]) {
    let producer = common::broker(url).connect().await.unwrap();
    let publisher = producer.publisher().await.unwrap();
    let key = KinesisOptions::default().with_partition_key("k");
    for body in bodies {
        publisher
            .publish(OutgoingMessage::new(stream, body.as_bytes()), Some(&key))
            .await
            .unwrap();
    }
    producer.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_dynamodb_applied_whose_answer_was_lost_keeps_the_lease() {
    let Some(url) = common::endpoint() else {
        return;
    };
    let faults = Faults::new(&url);
    let store = table(&faults.sdk_config()).await;
    let key = LeaseKey::new("orders", "shardId-000000000000");
    store
        .acquire(&key, "me", Duration::from_secs(30))
        .await
        .unwrap();
    // DynamoDB applies the renewal and the answer is a 500; the SDK sends it again, and the
    // resend is refused by the counter its first attempt moved.
    let lost = faults.add(
        Rule::on(
            Service::DynamoDb,
            "UpdateItem",
            Action::ApplyThenStatus(500),
        )
        .times(1),
    );
    store
        .renew(&key, "me", Duration::from_secs(30))
        .await
        .expect("the renewal landed: the lease is this owner's");
    assert_eq!(faults.hits(lost), 1, "the fault acted");
    // The same with the connection reset after the write was applied.
    let reset =
        faults.add(Rule::on(Service::DynamoDb, "UpdateItem", Action::ApplyThenReset).times(1));
    store
        .checkpoint_and_renew(&key, "me", "42", Duration::from_secs(30))
        .await
        .expect("the checkpoint landed");
    assert_eq!(faults.hits(reset), 1);
    // Later writes go on from the counter the landed ones left.
    store.checkpoint(&key, "me", "43").await.unwrap();
    let row = store.read(&key).await.unwrap().unwrap();
    assert_eq!(row.owner.as_deref(), Some("me"));
    assert_eq!(row.checkpoint.as_deref(), Some("43"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shard_that_left_the_stream_is_released_and_not_read_again() {
    let Some(url) = common::endpoint() else {
        return;
    };
    let name = common::unique("trimmed");
    let faults = Faults::new(&url);
    let store: Arc<dyn LeaseStore> = Arc::new(table(&faults.sdk_config()).await);
    let (connected, sub) = instance(&faults, &name, Some(Arc::clone(&store))).await;
    let gone = faults.add(Rule::on(
        Service::Kinesis,
        "GetRecords",
        Action::Status {
            status: 400,
            error_type: "ResourceNotFoundException",
            message: "Shard shardId-000000000000 does not exist",
        },
    ));
    let key = LeaseKey::new(name.as_str(), "shardId-000000000000");
    let deadline = Instant::now() + Duration::from_secs(20);
    while store
        .read(&key)
        .await
        .unwrap()
        .and_then(|row| row.owner)
        .is_some()
    {
        assert!(
            Instant::now() < deadline,
            "the shard's lease was never released"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let reads = faults.hits(gone);
    assert!(reads >= 1);
    // Three listing intervals more: the shard is neither read nor taken again.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        faults.hits(gone),
        reads,
        "a shard that left the stream was read again"
    );
    assert_eq!(
        store.read(&key).await.unwrap().and_then(|row| row.owner),
        None
    );
    drop(sub);
    connected.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_read_is_timed_out_and_a_hung_release_does_not_outlast_shutdown() {
    let Some(url) = common::endpoint() else {
        return;
    };
    let name = common::unique("hung");
    let faults = Faults::new(&url);
    let store: Arc<dyn LeaseStore> = Arc::new(table(&faults.sdk_config()).await);
    let (connected, mut sub) = instance(&faults, &name, Some(Arc::clone(&store))).await;
    // The next read hangs: the SDK's attempt timeout ends it, and the retry reads the record.
    let hung = faults.add(Rule::on(Service::Kinesis, "GetRecords", Action::Blackhole).times(1));
    publish(&url, &name, &["after the hang"]).await;
    let started = Instant::now();
    {
        let mut stream = pin!(sub.stream());
        let record = next_record(&mut stream, Duration::from_secs(30))
            .await
            .expect("the record, once the hung read timed out");
        assert_eq!(record.payload(), b"after the hang");
        record.ack().await.unwrap();
    }
    assert_eq!(faults.hits(hung), 1, "the read hung");
    eprintln!("read after a hung GetRecords in {:?}", started.elapsed());
    // Every lease-table write of this instance hangs from now on: the final checkpoint and
    // the release give up within their bounds, and shutdown does not wait the whole grace.
    let _blackholed = faults.add(Rule::on(Service::DynamoDb, "UpdateItem", Action::Blackhole));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let stopping = Instant::now();
    drop(sub);
    connected.shutdown().await.unwrap();
    let took = stopping.elapsed();
    eprintln!("shutdown with every lease-table write hung took {took:?}");
    assert!(
        took < Duration::from_secs(6),
        "shutdown waited {took:?} on hung lease-table calls"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn throttled_reads_back_off_and_deliver_every_record_once() {
    let Some(url) = common::endpoint() else {
        return;
    };
    let name = common::unique("throttled");
    let faults = Faults::new(&url);
    let (connected, mut sub) = instance(&faults, &name, None).await;
    let throttled = faults.add(Rule::on(Service::Kinesis, "GetRecords", Action::Throttle).times(4));
    let bodies = ["a", "b", "c", "d", "e"];
    publish(&url, &name, &bodies).await;
    let mut seen = Vec::new();
    {
        let mut stream = pin!(sub.stream());
        while seen.len() < bodies.len() {
            let record = next_record(&mut stream, Duration::from_secs(30))
                .await
                .expect("every record, after the throttling");
            seen.push(String::from_utf8(record.payload().to_vec()).unwrap());
            record.ack().await.unwrap();
        }
        assert!(
            next_record(&mut stream, Duration::from_secs(2))
                .await
                .is_none(),
            "a record came twice"
        );
    }
    assert_eq!(seen, bodies);
    assert_eq!(faults.hits(throttled), 4, "the reads were throttled");
    drop(sub);
    connected.shutdown().await.unwrap();
}

/// hyper keeps a pooled connection alive with a task on the runtime of the call that opened it.
/// A handler's publish of a record over 1 MiB looks up the stream's record limit from the
/// handler's runtime (a seek asks for iterators from there too); the connection that call leaves
/// in the pool must not die with that runtime while the broker is using it. Here the broker's
/// next write runs on it, held 1.5 s by the router, while that runtime stops.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_opened_from_a_runtime_that_stops_outlives_it() {
    let Some(url) = common::endpoint() else {
        return;
    };
    let stream = common::unique("foreign-connection");
    let raw = common::raw_kinesis(&url);
    common::create_stream(&raw, &stream, 1).await;
    let mut faults = Injector::new(&url, &common::unique("foreign"));
    // Nothing has called through this client yet: its pool is empty.
    let connected = Arc::new(
        KinesisBroker::from_config(faults.sdk_config())
            .connect()
            .await
            .unwrap(),
    );
    let publisher = connected.publisher().await.unwrap();

    let foreign = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let first = publisher.clone();
    let to = stream.clone();
    let refused = foreign
        .spawn(async move {
            // Over the 1 MiB the stream takes: its limit is asked, then the record refused.
            let big = vec![b'x'; 1024 * 1024 + 1];
            first
                .publish(OutgoingMessage::new(to.as_str(), big.as_slice()), None)
                .await
        })
        .await
        .unwrap()
        .expect_err("a record over the stream's limit");
    assert!(refused.to_string().contains("1048576"), "{refused}");

    let held = faults.add(
        "kinesis",
        "PutRecords",
        json!({"latency_ms": 1500}),
        Some(1),
    );
    let second = tokio::spawn({
        let publisher = publisher.clone();
        let to = stream.clone();
        async move {
            publisher
                .publish(
                    OutgoingMessage::new(to.as_str(), b"second".as_slice()),
                    None,
                )
                .await
        }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        faults.hits(&held),
        1,
        "the second write is held by the router"
    );
    tokio::task::spawn_blocking(move || drop(foreign))
        .await
        .unwrap();
    second
        .await
        .unwrap()
        .expect("the write outlives the runtime that opened its connection");
    drop(connected);
}

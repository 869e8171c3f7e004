//! Live integration tests of the broker against the local stack (`KINESIS_TEST_ENDPOINT`):
//! records round-trip, restarts resume after the checkpoint, start positions, resharding under
//! load, and the errors a missing or doubly subscribed stream gives.

mod common;

use std::collections::HashMap;
use std::pin::pin;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use aws_sdk_kinesis::primitives::Blob;
use futures::{Stream, StreamExt};
use ruststream::{
    Broker, ConnectedBroker, HeaderMap, IncomingMessage, OutgoingMessage, Positioned, Publisher,
    StartAt, Subscriber, SubscriptionSource,
};
use ruststream_kinesis::{
    ConnectedKinesisBroker, KinesisError, KinesisMessage, KinesisOptions, KinesisPosition,
    KinesisStream, LeaseStore, MemoryLeaseStore,
};

fn stream_of(name: &str, shards: u32) -> KinesisStream {
    KinesisStream::new(name.to_owned())
        .create_if_missing(shards)
        .poll_interval(Duration::from_millis(200))
}

async fn next<S>(stream: &mut S) -> KinesisMessage
where
    S: Stream<Item = Result<KinesisMessage, KinesisError>> + Unpin,
{
    common::next_delivery(stream).await
}

async fn nothing_within<S>(stream: &mut S, wait: Duration)
where
    S: Stream<Item = Result<KinesisMessage, KinesisError>> + Unpin,
{
    if let Ok(Some(Ok(msg))) = tokio::time::timeout(wait, stream.next()).await {
        panic!(
            "nothing was expected, got {:?}",
            String::from_utf8_lossy(msg.payload())
        );
    }
}

async fn publish(connected: &ConnectedKinesisBroker, stream: &str, body: &str, key: &str) {
    let publisher = connected.publisher().await.unwrap();
    publisher
        .publish(
            OutgoingMessage::new(stream, body.as_bytes()),
            Some(&KinesisOptions::default().with_partition_key(key)),
        )
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn payload_headers_and_key_round_trip() {
    let Some(url) = common::endpoint() else {
        return;
    };
    let name = common::unique("roundtrip");
    let connected = common::broker(&url).connect().await.unwrap();
    let mut subscriber = stream_of(&name, 2).subscribe(&connected).await.unwrap();
    let mut deliveries = Box::pin(subscriber.stream());

    let mut headers = HeaderMap::new();
    headers.insert("content-type", "application/json");
    headers.insert("binary", vec![0u8, 255, 1, 128]);
    let publisher = connected.publisher().await.unwrap();
    publisher
        .publish(
            OutgoingMessage::new(name.as_str(), b"{\"id\":1}".as_slice())
                .with_headers(headers.clone()),
            Some(&KinesisOptions::default().with_partition_key("customer-7")),
        )
        .await
        .unwrap();
    let msg = next(&mut deliveries).await;
    assert_eq!(msg.payload(), b"{\"id\":1}");
    assert_eq!(msg.headers(), &headers);
    assert_eq!(msg.partition_key(), Some(b"customer-7".as_slice()));
    assert!(msg.shard_id().starts_with("shardId-"), "{}", msg.shard_id());
    assert!(!msg.sequence_number().is_empty());
    msg.ack().await.unwrap();

    // A plain payload is written plain: other consumers read it unchanged.
    publish(&connected, &name, "plain", "customer-7").await;
    let plain = next(&mut deliveries).await;
    assert_eq!(plain.payload(), b"plain");
    assert!(plain.headers().is_empty());
    let raw = common::raw_kinesis(&url);
    let iterator = raw
        .get_shard_iterator()
        .stream_name(&name)
        .shard_id(plain.shard_id())
        .shard_iterator_type(aws_sdk_kinesis::types::ShardIteratorType::AtSequenceNumber)
        .starting_sequence_number(plain.sequence_number())
        .send()
        .await
        .unwrap();
    let records = raw
        .get_records()
        .shard_iterator(iterator.shard_iterator().unwrap())
        .limit(1)
        .send()
        .await
        .unwrap();
    assert_eq!(records.records()[0].data().as_ref(), b"plain");
    plain.ack().await.unwrap();

    // A foreign producer's record reads as a headerless message.
    raw.put_record()
        .stream_name(&name)
        .partition_key("foreign")
        .data(Blob::new(b"\0RSK-not-an-envelope".to_vec()))
        .send()
        .await
        .unwrap();
    let foreign = next(&mut deliveries).await;
    assert_eq!(foreign.payload(), b"\0RSK-not-an-envelope");
    assert!(foreign.headers().is_empty());
    assert_eq!(foreign.partition_key(), Some(b"foreign".as_slice()));
    foreign.ack().await.unwrap();
    drop(deliveries);
    drop(subscriber);
    connected.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_on_a_shared_store_resumes_after_the_checkpoint() {
    let Some(url) = common::endpoint() else {
        return;
    };
    let name = common::unique("restart");
    let store: Arc<dyn LeaseStore> = Arc::new(MemoryLeaseStore::new());

    let first = common::broker_with(&url, Arc::clone(&store))
        .connect()
        .await
        .unwrap();
    let mut subscriber = stream_of(&name, 1).subscribe(&first).await.unwrap();
    {
        let mut deliveries = pin!(subscriber.stream());
        for i in 0..5 {
            publish(&first, &name, &format!("before-{i}"), "k").await;
        }
        for i in 0..5 {
            let msg = next(&mut deliveries).await;
            assert_eq!(msg.payload(), format!("before-{i}").as_bytes());
            msg.ack().await.unwrap();
        }
    }
    drop(subscriber);
    first.shutdown().await.unwrap();

    let producer = common::broker(&url).connect().await.unwrap();
    for i in 0..3 {
        publish(&producer, &name, &format!("after-{i}"), "k").await;
    }
    let second = common::broker_with(&url, Arc::clone(&store))
        .connect()
        .await
        .unwrap();
    let mut subscriber = stream_of(&name, 1).subscribe(&second).await.unwrap();
    let mut deliveries = pin!(subscriber.stream());
    for i in 0..3 {
        let msg = next(&mut deliveries).await;
        assert_eq!(
            msg.payload(),
            format!("after-{i}").as_bytes(),
            "the restart resumes right after the last acknowledged record"
        );
        msg.ack().await.unwrap();
    }
    nothing_within(&mut deliveries, Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_out_of_order_ack_never_checkpoints_past_an_unsettled_record() {
    let Some(url) = common::endpoint() else {
        return;
    };
    let name = common::unique("watermark");
    let store: Arc<dyn LeaseStore> = Arc::new(MemoryLeaseStore::new());
    let first = common::broker_with(&url, Arc::clone(&store))
        .connect()
        .await
        .unwrap();
    let mut subscriber = stream_of(&name, 1).subscribe(&first).await.unwrap();
    {
        let mut deliveries = pin!(subscriber.stream());
        for body in ["one", "two", "three"] {
            publish(&first, &name, body, "k").await;
        }
        let one = next(&mut deliveries).await;
        let two = next(&mut deliveries).await;
        let three = next(&mut deliveries).await;
        one.ack().await.unwrap();
        three.ack().await.unwrap();
        drop(two);
    }
    drop(subscriber);
    first.shutdown().await.unwrap();

    let second = common::broker_with(&url, store).connect().await.unwrap();
    let mut subscriber = stream_of(&name, 1).subscribe(&second).await.unwrap();
    let mut deliveries = pin!(subscriber.stream());
    let again = next(&mut deliveries).await;
    assert_eq!(
        again.payload(),
        b"two",
        "the unsettled record comes back first"
    );
    let after = next(&mut deliveries).await;
    assert_eq!(
        after.payload(),
        b"three",
        "and what was acked past it, a duplicate"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_start_position() {
    let Some(url) = common::endpoint() else {
        return;
    };
    let name = common::unique("positions");
    let connected = common::broker(&url).connect().await.unwrap();
    // The stream exists and holds three records before any subscription opens.
    {
        let subscriber = stream_of(&name, 1).subscribe(&connected).await.unwrap();
        drop(subscriber);
    }
    for body in ["a", "b"] {
        publish(&connected, &name, body, "k").await;
    }
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let between = SystemTime::now();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    publish(&connected, &name, "c", "k").await;
    connected.shutdown().await.unwrap();

    async fn read_from(
        url: &str,
        name: &str,
        position: KinesisPosition,
        want: &[&str],
    ) -> Vec<KinesisMessage> {
        let connected = common::broker(url).connect().await.unwrap();
        let mut subscriber = StartAt::new(stream_of(name, 1), position.clone())
            .subscribe(&connected)
            .await
            .unwrap();
        let mut got = Vec::new();
        {
            let mut deliveries = pin!(subscriber.stream());
            for expected in want {
                let msg = next(&mut deliveries).await;
                assert_eq!(msg.payload(), expected.as_bytes(), "from {position:?}");
                got.push(msg);
            }
            nothing_within(&mut deliveries, Duration::from_millis(800)).await;
        }
        drop(subscriber);
        connected.shutdown().await.unwrap();
        got
    }

    let all = read_from(&url, &name, KinesisPosition::TrimHorizon, &["a", "b", "c"]).await;
    read_from(&url, &name, KinesisPosition::Latest, &[]).await;
    read_from(&url, &name, KinesisPosition::AtTimestamp(between), &["c"]).await;
    let captured = all[1].position();
    read_from(&url, &name, captured, &["b", "c"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_streams_and_a_second_subscription_are_refused_with_the_fix() {
    let Some(url) = common::endpoint() else {
        return;
    };
    let connected = common::broker(&url).connect().await.unwrap();
    let missing = common::unique("missing");
    let err = KinesisStream::new(missing.clone())
        .subscribe(&connected)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(&missing) && err.contains("create_if_missing"),
        "{err}"
    );

    let publisher = connected.publisher().await.unwrap();
    let err = publisher
        .publish(
            OutgoingMessage::new(missing.as_str(), b"x".as_slice()),
            None,
        )
        .await
        .unwrap_err();
    assert!(matches!(err, KinesisError::StreamNotFound { .. }), "{err}");
    assert!(err.to_string().contains(&missing), "{err}");

    let err = publisher
        .publish(OutgoingMessage::new("bad name", b"x".as_slice()), None)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("bad name") && err.contains("128"), "{err}");
    let name = common::unique("twice");
    let _first = stream_of(&name, 1).subscribe(&connected).await.unwrap();
    // Over the stream's limit (the default 1 MiB: the local stack names none), the partition key
    // counted: refused before any write, naming the limit.
    let err = publisher
        .publish(
            OutgoingMessage::new(name.as_str(), vec![0u8; 1024 * 1024 - 31].as_slice()),
            None,
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, KinesisError::RecordTooLarge { size, .. } if size == 1024 * 1024 + 1),
        "{err}"
    );
    assert!(err.to_string().contains("1048576"), "{err}");
    let err = stream_of(&name, 1).subscribe(&connected).await.unwrap_err();
    assert!(
        matches!(err, KinesisError::DuplicateSubscription { .. }),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_split_and_a_merge_under_load_keep_per_key_order_and_lose_nothing() {
    let Some(url) = common::endpoint() else {
        return;
    };
    let name = common::unique("reshard");
    let connected = common::broker(&url)
        .lease_timings(
            ruststream_kinesis::LeaseTimings::new(Duration::from_secs(3), Duration::from_secs(1))
                .unwrap()
                .with_listing_interval(Duration::from_millis(500)),
        )
        .connect()
        .await
        .unwrap();
    let mut subscriber = stream_of(&name, 1).subscribe(&connected).await.unwrap();
    let keys = ["k0", "k1", "k2", "k3", "k4", "k5"];
    let per_key = 40;

    let producer_url = url.clone();
    let producer_name = name.clone();
    let producer = tokio::spawn(async move {
        let connected = common::broker(&producer_url).connect().await.unwrap();
        let raw = common::raw_kinesis(&producer_url);
        for round in 0..per_key {
            for key in keys {
                publish(&connected, &producer_name, &format!("{key}:{round}"), key).await;
            }
            if round == 10 {
                common::split_first(&raw, &producer_name).await;
            }
            if round == 25 {
                common::merge_first_two(&raw, &producer_name).await;
            }
        }
    });

    let mut last: HashMap<String, i64> = HashMap::new();
    let mut seen: HashMap<String, std::collections::HashSet<i64>> = HashMap::new();
    let total = keys.len() * per_key;
    let mut deliveries = pin!(subscriber.stream());
    while seen
        .values()
        .map(std::collections::HashSet::len)
        .sum::<usize>()
        < total
    {
        let msg = next(&mut deliveries).await;
        let body = String::from_utf8(msg.payload().to_vec()).unwrap();
        let (key, round) = body.split_once(':').unwrap();
        let round: i64 = round.parse().unwrap();
        let previous = last.insert(key.to_owned(), round).unwrap_or(-1);
        assert!(
            round > previous || seen[key].contains(&round),
            "key {key}: round {round} arrived after round {previous} (from {})",
            msg.shard_id()
        );
        seen.entry(key.to_owned()).or_default().insert(round);
        msg.ack().await.unwrap();
    }
    producer.await.unwrap();
    for key in keys {
        assert_eq!(
            seen[key].len(),
            per_key,
            "every record of {key} was delivered"
        );
    }
}

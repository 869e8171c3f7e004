//! KPL aggregates on the local stack (`KINESIS_TEST_ENDPOINT`), written by AWS's own aggregation
//! library: read as their user records, mixed with plain records, checkpointed inside an
//! aggregate (a restart there resumes after the last settled user record), and sought to by a
//! user record's position.

mod common;

use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_kinesis::primitives::Blob;
use ruststream::{
    Broker, ConnectedBroker, IncomingMessage, Positioned, Seekable, Seeker, Subscriber,
    SubscriptionSource,
};
use ruststream_kinesis::{KinesisPosition, KinesisStream, LeaseStore, MemoryLeaseStore};

fn stream_of(name: &str, shards: u32) -> KinesisStream {
    KinesisStream::new(name.to_owned())
        .create_if_missing(shards)
        .poll_interval(Duration::from_millis(200))
}

/// Puts what the library packed, one `PutRecord` each, under the library's keys.
async fn put_packed(raw: &aws_sdk_kinesis::Client, stream: &str, packed: &[common::kpl::Packed]) {
    for record in packed {
        raw.put_record()
            .stream_name(stream)
            .partition_key(&record.partition_key)
            .set_explicit_hash_key(record.explicit_hash_key.clone())
            .data(Blob::new(record.data.clone()))
            .send()
            .await
            .expect("PutRecord");
    }
}

async fn put_plain(raw: &aws_sdk_kinesis::Client, stream: &str, body: &str) {
    raw.put_record()
        .stream_name(stream)
        .partition_key("plain-key")
        .data(Blob::new(body.as_bytes().to_vec()))
        .send()
        .await
        .expect("PutRecord");
}

fn user_records(prefix: &str, count: usize) -> Vec<(String, Option<String>, Vec<u8>)> {
    (0..count)
        .map(|n| {
            let key = format!("{prefix}-key-{}", n % 5);
            (key, None, format!("{prefix}-{n}").into_bytes())
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_the_kpl_aggregated_arrive_as_their_user_records_beside_plain_ones() {
    let (Some(url), Some(python)) = (common::endpoint(), common::kpl::python()) else {
        return;
    };
    let name = common::unique("kpl-read");
    let connected = common::broker(&url).connect().await.unwrap();
    let mut subscriber = stream_of(&name, 1).subscribe(&connected).await.unwrap();
    let mut deliveries = pin!(subscriber.stream());
    let raw = common::raw_kinesis(&url);

    let first = user_records("a", 40);
    let packed = common::kpl::aggregate(&python, &first);
    assert_eq!(packed.len(), 1, "forty small records fit one aggregate");
    put_plain(&raw, &name, "plain-before").await;
    put_packed(&raw, &name, &packed).await;
    put_plain(&raw, &name, "plain-after").await;

    let msg = common::next_delivery(&mut deliveries).await;
    assert_eq!(msg.payload(), b"plain-before");
    assert_eq!(msg.sub_sequence_number(), None);
    msg.ack().await.unwrap();
    let mut aggregate_sequence = None;
    for (n, (key, _, data)) in first.iter().enumerate() {
        let msg = common::next_delivery(&mut deliveries).await;
        assert_eq!(msg.payload(), &data[..], "user record {n}");
        assert_eq!(msg.partition_key_str(), key, "user record {n}: its own key");
        assert_eq!(msg.sub_sequence_number(), Some(n as u64));
        assert!(msg.headers().is_empty(), "written by the KPL: no headers");
        let sequence = msg.sequence_number().to_owned();
        assert_eq!(
            aggregate_sequence.get_or_insert_with(|| sequence.clone()),
            &sequence,
            "every user record shares the aggregate's sequence number"
        );
        msg.ack().await.unwrap();
    }
    let msg = common::next_delivery(&mut deliveries).await;
    assert_eq!(msg.payload(), b"plain-after");
    msg.ack().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_inside_an_aggregate_resumes_after_its_last_settled_user_record() {
    restart_inside_an_aggregate(None).await;
}

/// The same with enhanced fan-out: the subscription starts at the aggregate and drops the user
/// records settled before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_fan_out_a_restart_inside_an_aggregate_resumes_after_its_last_settled_user_record() {
    restart_inside_an_aggregate(Some("kpl-reader")).await;
}

async fn restart_inside_an_aggregate(fan_out: Option<&str>) {
    let (Some(url), Some(python)) = (common::endpoint(), common::kpl::python()) else {
        return;
    };
    let source = |name: &str| match fan_out {
        Some(consumer) => stream_of(name, 1).enhanced_fan_out(consumer.to_owned()),
        None => stream_of(name, 1),
    };
    let name = common::unique("kpl-resume");
    let store: Arc<dyn LeaseStore> = Arc::new(MemoryLeaseStore::new());
    let raw = common::raw_kinesis(&url);
    let records = user_records("b", 10);
    let packed = common::kpl::aggregate(&python, &records);

    let first = common::broker_with(&url, Arc::clone(&store))
        .connect()
        .await
        .unwrap();
    let mut subscriber = source(&name).subscribe(&first).await.unwrap();
    {
        let mut deliveries = pin!(subscriber.stream());
        put_plain(&raw, &name, "plain-before").await;
        put_packed(&raw, &name, &packed).await;
        put_plain(&raw, &name, "plain-after").await;
        let msg = common::next_delivery(&mut deliveries).await;
        assert_eq!(msg.payload(), b"plain-before");
        msg.ack().await.unwrap();
        // Six of the ten user records settle; the rest are left unsettled by a stopping handler.
        for n in 0..6 {
            let msg = common::next_delivery(&mut deliveries).await;
            assert_eq!(msg.sub_sequence_number(), Some(n));
            msg.ack().await.unwrap();
        }
    }
    drop(subscriber);
    first.shutdown().await.unwrap();

    let second = common::broker_with(&url, Arc::clone(&store))
        .connect()
        .await
        .unwrap();
    let mut subscriber = source(&name).subscribe(&second).await.unwrap();
    let mut deliveries = pin!(subscriber.stream());
    // The checkpoint named user record 5: the aggregate is read again from it, nothing settled
    // comes twice and nothing is lost.
    for (n, (_, _, data)) in records.iter().enumerate().skip(6) {
        let msg = common::next_delivery(&mut deliveries).await;
        assert_eq!(msg.payload(), &data[..], "user record {n}");
        assert_eq!(msg.sub_sequence_number(), Some(n as u64));
        msg.ack().await.unwrap();
    }
    let msg = common::next_delivery(&mut deliveries).await;
    assert_eq!(msg.payload(), b"plain-after");
    msg.ack().await.unwrap();
    second.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_seek_to_a_user_records_position_delivers_it_and_what_follows() {
    let (Some(url), Some(python)) = (common::endpoint(), common::kpl::python()) else {
        return;
    };
    let name = common::unique("kpl-seek");
    let connected = common::broker(&url).connect().await.unwrap();
    let mut subscriber = stream_of(&name, 1).subscribe(&connected).await.unwrap();
    let seeker = subscriber.seeker();
    let mut deliveries = pin!(subscriber.stream());
    let raw = common::raw_kinesis(&url);
    let records = user_records("c", 6);
    put_packed(&raw, &name, &common::kpl::aggregate(&python, &records)).await;
    put_plain(&raw, &name, "plain-after").await;

    let mut positions = Vec::new();
    for _ in 0..records.len() {
        let msg = common::next_delivery(&mut deliveries).await;
        positions.push(msg.position());
        msg.ack().await.unwrap();
    }
    let msg = common::next_delivery(&mut deliveries).await;
    assert_eq!(msg.payload(), b"plain-after");
    msg.ack().await.unwrap();
    assert!(
        matches!(
            &positions[3],
            KinesisPosition::AtSubSequence {
                sub_sequence: 3,
                ..
            }
        ),
        "{:?}",
        positions[3]
    );
    seeker.seek(positions[3].clone()).await.unwrap();
    for (n, (_, _, data)) in records.iter().enumerate().skip(3) {
        let msg = common::next_delivery(&mut deliveries).await;
        assert_eq!(msg.payload(), &data[..], "user record {n} again");
        msg.ack().await.unwrap();
    }
    let msg = common::next_delivery(&mut deliveries).await;
    assert_eq!(
        msg.payload(),
        b"plain-after",
        "and what follows the aggregate"
    );
    msg.ack().await.unwrap();
}

/// The hash of a partition key, as Kinesis maps keys to shards: the MD5 as a 128-bit number.
fn hash_of(partition_key: &str) -> u128 {
    use md5::{Digest, Md5};
    u128::from_be_bytes(Md5::digest(partition_key.as_bytes()).into())
}

/// An aggregate holds user records of keys that, on their own, would go to another shard: a KPL
/// whose shard map was stale packed them together (right after a split). The Java KCL drops
/// those user records, counting on the sibling shard to hold them; it does not: each was written
/// once, inside this aggregate, to this shard. We deliver them where they are.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_records_whose_keys_map_to_a_sibling_shard_are_delivered_not_dropped() {
    let (Some(url), Some(python)) = (common::endpoint(), common::kpl::python()) else {
        return;
    };
    let name = common::unique("kpl-range");
    let connected = common::broker(&url).connect().await.unwrap();
    let mut subscriber = stream_of(&name, 2).subscribe(&connected).await.unwrap();
    let mut deliveries = pin!(subscriber.stream());
    let raw = common::raw_kinesis(&url);
    let shards = common::open_shards(&raw, &name).await;
    let range = |shard: &aws_sdk_kinesis::types::Shard| {
        let range = shard.hash_key_range().unwrap();
        let start: u128 = range.starting_hash_key().parse().unwrap();
        let end: u128 = range.ending_hash_key().parse().unwrap();
        start..=end
    };
    let (first, second) = (range(&shards[0]), range(&shards[1]));
    let records = user_records("d", 12);
    let elsewhere = records
        .iter()
        .filter(|(key, _, _)| second.contains(&hash_of(key)))
        .count();
    assert!(elsewhere > 0, "some keys map to the second shard");
    // The whole aggregate goes to the first shard, by its explicit hash key.
    let mut packed = common::kpl::aggregate(&python, &records);
    for record in &mut packed {
        record.explicit_hash_key = Some(first.start().to_string());
    }
    put_packed(&raw, &name, &packed).await;

    for (n, (key, _, data)) in records.iter().enumerate() {
        let msg = common::next_delivery(&mut deliveries).await;
        assert_eq!(msg.payload(), &data[..], "user record {n}");
        assert_eq!(msg.partition_key_str(), key);
        assert_eq!(
            msg.shard_id(),
            shards[0].shard_id(),
            "user record {n}: where the aggregate is, whatever its key's hash"
        );
        msg.ack().await.unwrap();
    }
}

/// Every record of `stream` from its oldest, shard by shard: (partition key, data).
async fn raw_records(raw: &aws_sdk_kinesis::Client, stream: &str) -> Vec<(String, Vec<u8>)> {
    let mut all = Vec::new();
    for shard in common::open_shards(raw, stream).await {
        let iterator = raw
            .get_shard_iterator()
            .stream_name(stream)
            .shard_id(shard.shard_id())
            .shard_iterator_type(aws_sdk_kinesis::types::ShardIteratorType::TrimHorizon)
            .send()
            .await
            .unwrap();
        let mut iterator = iterator.shard_iterator().map(str::to_owned);
        while let Some(current) = iterator.take() {
            let out = raw
                .get_records()
                .shard_iterator(current)
                .send()
                .await
                .unwrap();
            let got = out.records().len();
            all.extend(out.records().iter().map(|record| {
                (
                    record.partition_key().unwrap_or_default().to_owned(),
                    record.data().as_ref().to_vec(),
                )
            }));
            if got > 0 {
                iterator = out.next_shard_iterator().map(str::to_owned);
            }
        }
    }
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_published_aggregated_read_back_as_published_here_and_in_aws_kinesis_agg() {
    use ruststream::{HeaderMap, OutgoingMessage, PublishPolicy, Publisher};
    use ruststream_kinesis::{KinesisOptions, KinesisPublish};

    let (Some(url), Some(python)) = (common::endpoint(), common::kpl::python()) else {
        return;
    };
    let name = common::unique("kpl-publish");
    let connected = common::broker(&url).connect().await.unwrap();
    let mut subscriber = stream_of(&name, 2).subscribe(&connected).await.unwrap();
    let mut deliveries = pin!(subscriber.stream());
    let publisher = KinesisPublish::default()
        .aggregate(true)
        .pair(&connected)
        .await
        .unwrap();
    // Ten keys publish at once, each its thirty messages one after another (so each key has
    // an order); every third message with a header.
    let messages: Vec<(String, String)> = (0..300)
        .map(|n| (format!("key-{}", n % 10), format!("message-{n}")))
        .collect();
    let chains = (0..10usize).map(|key| {
        let (publisher, name, messages) = (&publisher, &name, &messages);
        async move {
            for n in (key..300).step_by(10) {
                let mut headers = HeaderMap::new();
                if n.is_multiple_of(3) {
                    headers.insert("n", n.to_string());
                }
                let (key, body) = &messages[n];
                let msg = OutgoingMessage::new(name, body.as_bytes()).with_headers(headers);
                let options = KinesisOptions::default().with_partition_key(key);
                publisher.publish(msg, Some(&options)).await?;
            }
            Ok::<(), ruststream_kinesis::KinesisError>(())
        }
    });
    let published = futures::future::join_all(chains).await;
    assert!(published.iter().all(Result::is_ok), "{published:?}");

    // Far fewer Kinesis records than publishes, each an aggregate AWS's library reads.
    let raw = common::raw_kinesis(&url);
    let stored = raw_records(&raw, &name).await;
    assert!(
        stored.len() <= 150,
        "{} Kinesis records for 300 publishes: the keys' records share aggregates",
        stored.len()
    );
    let mut unpacked = Vec::new();
    for (key, data) in &stored {
        let users = common::kpl::deaggregate(&python, key, data);
        assert!(!users.is_empty(), "an aggregate");
        unpacked.extend(users);
    }
    assert_eq!(unpacked.len(), 300);
    for user in unpacked
        .iter()
        .filter(|user| user.data.starts_with(b"message-"))
    {
        let n: usize = std::str::from_utf8(&user.data["message-".len()..])
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(
            user.partition_key, messages[n].0,
            "message {n}: its own key"
        );
        assert!(
            !n.is_multiple_of(3),
            "a message without headers is its bytes alone"
        );
    }

    // Read back here: every message once, each key in publish order, headers inside.
    let mut last_of_key: std::collections::HashMap<String, usize> = Default::default();
    for _ in 0..messages.len() {
        let msg = common::next_delivery(&mut deliveries).await;
        let body = std::str::from_utf8(msg.payload()).unwrap().to_owned();
        let n: usize = body["message-".len()..].parse().unwrap();
        assert_eq!(msg.partition_key_str(), messages[n].0);
        if let Some(before) = last_of_key.insert(messages[n].0.clone(), n) {
            assert!(before < n, "{}: {before} then {n}", messages[n].0);
        }
        assert_eq!(
            msg.headers().get("n").map(<[u8]>::to_vec),
            n.is_multiple_of(3).then(|| n.to_string().into_bytes()),
            "message {n}"
        );
        msg.ack().await.unwrap();
    }
    assert_eq!(last_of_key.len(), 10);
}

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

fn stream_of(name: &str) -> KinesisStream {
    KinesisStream::new(name.to_owned())
        .create_if_missing(1)
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
    let mut subscriber = stream_of(&name).subscribe(&connected).await.unwrap();
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
    let (Some(url), Some(python)) = (common::endpoint(), common::kpl::python()) else {
        return;
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
    let mut subscriber = stream_of(&name).subscribe(&first).await.unwrap();
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
    let mut subscriber = stream_of(&name).subscribe(&second).await.unwrap();
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
    let mut subscriber = stream_of(&name).subscribe(&connected).await.unwrap();
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

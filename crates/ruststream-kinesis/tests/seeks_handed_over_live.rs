//! A seek is applied, and what it moved survives a handover, or it is answered with an error:
//! never `Ok` and lost. Live on the local stack: a seek whose position settled nothing before a
//! release is where the next owner reads on from, and a seek of a shard being handed off to
//! another instance fails, naming the shard.
//!
//! They run when `KINESIS_TEST_ENDPOINT` names the local stack.
#![cfg(all(feature = "dynamodb-lease", feature = "testing"))]

mod common;

use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use ruststream::{
    Broker, ConnectedBroker, IncomingMessage, Seekable, Seeker, Subscriber, SubscriptionSource,
};
use ruststream_kinesis::{KinesisPosition, KinesisStream, LeaseKey, LeaseStore, MemoryLeaseStore};

fn stream_of(name: &str, shards: u32) -> KinesisStream {
    KinesisStream::new(name.to_owned())
        .create_if_missing(shards)
        .initial_position(KinesisPosition::TrimHorizon)
        .poll_interval(Duration::from_millis(200))
}

/// The checkpoint of `stream`'s shard `shard` in `store`, once it is `wanted` (within 30 s).
async fn checkpoint_becomes(store: &MemoryLeaseStore, stream: &str, shard: &str, wanted: &str) {
    let key = LeaseKey::new(stream, shard);
    for _ in 0..300 {
        let row = store.read(&key).await.unwrap();
        if row.as_ref().and_then(|row| row.checkpoint.as_deref()) == Some(wanted) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!(
        "the checkpoint of {key} never became {wanted}: {:?}",
        store.read(&key).await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_seek_that_settled_nothing_before_a_release_is_where_the_next_owner_reads_on() {
    let Some(url) = common::endpoint() else {
        return;
    };
    let name = common::unique("seek-stop");
    let store = MemoryLeaseStore::new();
    let shared: Arc<dyn LeaseStore> = Arc::new(store.clone());
    let first = common::broker_with(&url, Arc::clone(&shared))
        .connect()
        .await
        .unwrap();
    let mut subscriber = stream_of(&name, 1).subscribe(&first).await.unwrap();
    let bodies: Vec<String> = (0..6).map(|i| format!("record-{i}")).collect();
    common::instances::publish_all(&url, &name, bodies.clone()).await;
    let mut sequences = Vec::new();
    let mut shard = String::new();
    {
        let mut deliveries = pin!(subscriber.stream());
        for body in &bodies {
            let msg = common::next_delivery(&mut deliveries).await;
            assert_eq!(msg.payload(), body.as_bytes());
            sequences.push(msg.sequence_number().to_owned());
            shard = msg.shard_id().to_owned();
            msg.ack().await.unwrap();
        }
    }
    checkpoint_becomes(&store, &name, &shard, &sequences[5]).await;

    // Back to record 2; nothing of the new position is handled before the stop.
    subscriber
        .seeker()
        .seek(KinesisPosition::at_sequence(
            shard.clone(),
            sequences[2].clone(),
        ))
        .await
        .expect("the seek is applied");
    drop(subscriber);
    first.shutdown().await.unwrap();
    let row = store
        .read(&LeaseKey::new(name.as_str(), shard.as_str()))
        .await
        .unwrap();
    assert_eq!(
        row.and_then(|row| row.checkpoint).as_deref(),
        Some(format!("SEEK:AT_SEQUENCE:{}", sequences[2]).as_str()),
        "the final checkpoint is the seek's position"
    );

    let second = common::broker_with(&url, shared).connect().await.unwrap();
    let mut subscriber = stream_of(&name, 1).subscribe(&second).await.unwrap();
    {
        let mut deliveries = pin!(subscriber.stream());
        for body in &bodies[2..] {
            let msg = common::next_delivery(&mut deliveries).await;
            assert_eq!(
                msg.payload(),
                body.as_bytes(),
                "the next owner reads on from the seek's position"
            );
            msg.ack().await.unwrap();
        }
    }
    drop(subscriber);
    second.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_seek_of_a_shard_being_handed_to_another_instance_fails_naming_it() {
    let Some(url) = common::endpoint() else {
        return;
    };
    let name = common::unique("seek-move");
    let store = MemoryLeaseStore::new();
    let shared: Arc<dyn LeaseStore> = Arc::new(store.clone());
    // A long drain: the handoff waits for the held deliveries while the seek comes.
    let timings = common::instances::timings().with_handoff_drain(Duration::from_secs(20));
    let balancing = |store: &Arc<dyn LeaseStore>, owner: &str| {
        common::broker_with(&url, Arc::clone(store))
            .owner_id(owner)
            .lease_timings(timings)
            .balance_shards(true)
    };
    let first = balancing(&shared, "pod-a").connect().await.unwrap();
    let mut subscriber = stream_of(&name, 2).subscribe(&first).await.unwrap();
    let bodies: Vec<String> = (0..16).map(|i| format!("record-{i}")).collect();
    common::instances::publish_all(&url, &name, bodies.clone()).await;
    let seeker = subscriber.seeker();
    let (second, joined) = {
        let mut deliveries = pin!(subscriber.stream());
        // One delivery of each shard held, unsettled, so that a handoff waits for it.
        let mut held = Vec::new();
        while held.len() < 2 {
            let msg = common::next_delivery(&mut deliveries).await;
            if held
                .iter()
                .all(|other: &ruststream_kinesis::KinesisMessage| {
                    other.shard_id() != msg.shard_id()
                })
            {
                held.push(msg);
            }
        }
        // A second instance joins: it asks for one of the two shards.
        let second = balancing(&shared, "pod-b").connect().await.unwrap();
        let joined = stream_of(&name, 2).subscribe(&second).await.unwrap();
        let mut asked = None;
        for _ in 0..300 {
            asked = store
                .rows()
                .into_iter()
                .find(|(key, row)| key.stream() == name && row.handoff.is_some());
            if asked.is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let (moving, _) = asked.expect("the second instance asks for a handoff within 30 s");
        // The holder sees the request at its next renewal (every second here).
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let refused = seeker.seek(KinesisPosition::TrimHorizon).await;
        let Err(err) = refused else {
            panic!("a seek of a shard being handed over must fail, not be dropped");
        };
        let said = err.to_string();
        assert!(
            said.contains(moving.shard()) && said.contains("being handed back"),
            "{said}"
        );
        for msg in held {
            let _ = msg.ack().await;
        }
        (second, joined)
    };
    drop((subscriber, joined));
    first.shutdown().await.unwrap();
    second.shutdown().await.unwrap();
}

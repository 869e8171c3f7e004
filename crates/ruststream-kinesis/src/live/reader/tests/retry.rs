//! A record a handler hands back comes back on this instance, alone, and the checkpoint follows
//! once it is settled; what a shard holds while a record stays unsettled is bounded.

use std::time::{Duration, Instant};

use ruststream::IncomingMessage;

use super::{Rig, RigSettings, eventually, next, next_within, stop, text};
use crate::KinesisStream;
use crate::doubles::fake_kinesis::calls;
use crate::doubles::fake_stream::sequence_string;

async fn checkpoint_of(store: &std::sync::Arc<dyn crate::LeaseStore>) -> Option<String> {
    store
        .read(&crate::LeaseKey::new("orders", "shardId-000000000000"))
        .await
        .unwrap()
        .and_then(|row| row.checkpoint)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_record_comes_back_alone_and_the_checkpoint_follows() {
    let rig = Rig::with_records(3).await;
    let mut sub = rig.sub;
    let [first, second, third] = [
        next(&mut sub).await,
        next(&mut sub).await,
        next(&mut sub).await,
    ];
    assert_eq!(first.redelivery_count(), Some(1));
    first.ack().await.unwrap();
    second
        .nack(true)
        .await
        .expect("a retry is accepted: the record comes back");
    third.ack().await.unwrap();
    let again = next(&mut sub).await;
    assert_eq!(text(&again), "1", "the retried record comes back");
    assert_eq!(
        again.redelivery_count(),
        Some(2),
        "counted as its second delivery"
    );
    // Settled since: the first, and the third, which waits behind the retried one.
    let store = rig.store.clone();
    eventually("the checkpoint reaches the first record", || {
        let store = store.clone();
        async move { checkpoint_of(&store).await == Some(sequence_string(1)) }
    })
    .await;
    again.ack().await.unwrap();
    eventually(
        "the checkpoint passes the retried record to the third",
        || {
            let store = store.clone();
            async move { checkpoint_of(&store).await == Some(sequence_string(3)) }
        },
    )
    .await;
    assert!(
        next_within(&mut sub, Duration::from_millis(500))
            .await
            .is_none(),
        "a record settled after the retried one came again"
    );
    stop(sub, rig.connected).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delayed_retry_comes_back_after_its_delay() {
    let rig = Rig::with_records(1).await;
    let mut sub = rig.sub;
    let first = next(&mut sub).await;
    assert!(first.supports_nack_after());
    let handed_back = Instant::now();
    first
        .nack_after(Duration::from_millis(700))
        .await
        .expect("a delayed retry is accepted");
    let again = next(&mut sub).await;
    assert!(
        handed_back.elapsed() >= Duration::from_millis(700),
        "came back after {:?}",
        handed_back.elapsed()
    );
    assert_eq!(again.redelivery_count(), Some(2));
    again.ack().await.unwrap();
    stop(sub, rig.connected).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_dropped_unsettled_comes_back() {
    let rig = Rig::with_records(2).await;
    let mut sub = rig.sub;
    let first = next(&mut sub).await;
    let second = next(&mut sub).await;
    drop(first);
    second.ack().await.unwrap();
    let again = next(&mut sub).await;
    assert_eq!(text(&again), "0", "the dropped delivery came back");
    again.ack().await.unwrap();
    let store = rig.store.clone();
    eventually("the checkpoint passes both records", || {
        let store = store.clone();
        async move { checkpoint_of(&store).await == Some(sequence_string(2)) }
    })
    .await;
    stop(sub, rig.connected).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_held_unsettled_stops_reading_ahead_past_the_window() {
    let rig = Rig::start(
        RigSettings {
            records: 40,
            stream: KinesisStream::new("orders").batch_size(4).max_unsettled(10),
            ..RigSettings::default()
        },
        |_, _, _| None,
    )
    .await;
    let mut sub = rig.sub;
    let held = next(&mut sub).await;
    let mut delivered = 1;
    while let Some(message) = next_within(&mut sub, Duration::from_millis(1500)).await {
        message.ack().await.unwrap();
        delivered += 1;
    }
    assert!(
        (10..=14).contains(&delivered),
        "{delivered} deliveries past an unsettled record with a window of 10 (batches of 4)"
    );
    let reads = calls(&rig.seen, "GetRecords");
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert_eq!(
        calls(&rig.seen, "GetRecords"),
        reads,
        "the reader read ahead"
    );
    // Settled: reading goes on to the end.
    held.ack().await.unwrap();
    while next_within(&mut sub, Duration::from_millis(1500))
        .await
        .map(|message| drop(tokio::spawn(message.ack())))
        .is_some()
    {
        delivered += 1;
    }
    assert_eq!(
        delivered, 40,
        "every record was delivered once the window opened"
    );
    stop(sub, rig.connected).await;
}

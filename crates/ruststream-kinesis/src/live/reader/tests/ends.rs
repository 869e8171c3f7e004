//! How a shard's reading ends: only a closed shard read to its end is finished; one whose
//! iterator cannot be had, or that left the stream, is released unfinished.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::StreamExt;
use ruststream::{ConnectedBroker, IncomingMessage, Seekable, Seeker, Subscriber};

use super::{Recording, Rig, RigSettings, eventually, next, next_within, stop, text};
use crate::doubles::fake_kinesis::{Reply, calls};
use crate::{KinesisPosition, SHARD_END};

/// Every read finds its iterator expired, and Kinesis fails every fresh iterator after the take's
/// own.
fn expired_then_no_iterator() -> impl Fn(usize, &str, &serde_json::Value) -> Option<Reply> {
    let iterators = AtomicUsize::new(0);
    move |_, operation, _| match operation {
        "GetRecords" => Some(Reply::error(400, "ExpiredIteratorException")),
        "GetShardIterator" if iterators.fetch_add(1, Ordering::SeqCst) >= 1 => {
            Some(Reply::error(500, "InternalFailure"))
        }
        _ => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_shard_whose_iterator_cannot_be_had_is_released_not_finished() {
    let rig = Rig::start(RigSettings::default(), expired_then_no_iterator()).await;
    let seen = rig.seen.clone();
    eventually(
        "fresh iterators are asked for, and refused, after the expiry",
        || {
            let asked = calls(&seen, "GetShardIterator");
            async move { asked >= 3 }
        },
    )
    .await;
    let Rig {
        connected,
        sub,
        store,
        ..
    } = rig;
    drop(sub);
    connected.shutdown().await.expect("shutdown");
    let row = store
        .read(&crate::LeaseKey::new("orders", "shardId-000000000000"))
        .await
        .unwrap()
        .expect("the row exists");
    assert_ne!(
        row.checkpoint.as_deref(),
        Some(SHARD_END),
        "an open shard without an iterator was marked finished: {row:?}"
    );
    assert_eq!(row.owner, None, "the stopping reader released the shard");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shard_that_left_the_stream_is_released_and_not_read_again() {
    let reads = AtomicUsize::new(0);
    let rig = Rig::start(
        RigSettings {
            records: 2,
            ..RigSettings::default()
        },
        move |_, operation, _| {
            // Two records are read; then the shard is trimmed away.
            (operation == "GetRecords" && reads.fetch_add(1, Ordering::SeqCst) >= 1)
                .then(|| Reply::error(400, "ResourceNotFoundException"))
        },
    )
    .await;
    let mut sub = rig.sub;
    for _ in 0..2 {
        next(&mut sub).await.ack().await.unwrap();
    }
    let store = rig.store.clone();
    eventually("the shard's lease is released", || {
        let store = store.clone();
        async move {
            let row = store
                .read(&crate::LeaseKey::new("orders", "shardId-000000000000"))
                .await
                .unwrap()
                .unwrap();
            row.owner.is_none()
        }
    })
    .await;
    let reads = calls(&rig.seen, "GetRecords");
    // Two more listing intervals: the shard is neither read nor taken again.
    assert!(
        next_within(&mut sub, Duration::from_millis(2500))
            .await
            .is_none()
    );
    assert_eq!(
        calls(&rig.seen, "GetRecords"),
        reads,
        "a shard that left the stream was read again"
    );
    stop(sub, rig.connected).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_seek_during_a_closed_shards_drain_is_read_before_the_shard_ends() {
    let rig = Rig::start(
        RigSettings {
            records: 2,
            closed: true,
            ..RigSettings::default()
        },
        |_, _, _| None,
    )
    .await;
    let mut sub = rig.sub;
    // Both records are in handlers; the shard is read to its end and drains.
    let first = next(&mut sub).await;
    let second = next(&mut sub).await;
    assert_eq!((text(&first), text(&second)), ("0".into(), "1".into()));
    tokio::time::sleep(Duration::from_millis(500)).await;
    sub.seeker()
        .seek(KinesisPosition::TrimHorizon)
        .await
        .expect("the seek");
    // The old deliveries settle after the seek: they move nothing, and the shard is not over.
    first.ack().await.unwrap();
    second.ack().await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_ne!(
        rig_row(&rig.store).await.checkpoint.as_deref(),
        Some(SHARD_END),
        "SHARD_END was written while the seek's records were still to be delivered"
    );
    let again = [next(&mut sub).await, next(&mut sub).await];
    assert_eq!(text(&again[0]), "0", "the seek read the shard again");
    for message in again {
        message.ack().await.unwrap();
    }
    let store = rig.store.clone();
    eventually("the shard ends once the seek's deliveries settled", || {
        let store = store.clone();
        async move { rig_row(&store).await.checkpoint.as_deref() == Some(SHARD_END) }
    })
    .await;
    stop(sub, rig.connected).await;
}

async fn rig_row(store: &std::sync::Arc<dyn crate::LeaseStore>) -> crate::LeaseState {
    store
        .read(&crate::LeaseKey::new("orders", "shardId-000000000000"))
        .await
        .unwrap()
        .expect("the row exists")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_withheld_while_its_shard_closes_moves_no_checkpoint() {
    let (rig, store) = Rig::recorded(2).await;
    let mut sub = rig.sub;
    let handled = next(&mut sub).await;
    let waiting = next(&mut sub).await;
    handled.ack().await.unwrap();
    // The subscription stops while the store is slow, so the shard's closing writes are still
    // on their way; the runtime still holds the second delivery, refuses it at its handler, and
    // settles it by the decode policy.
    *store.write_delay.lock().unwrap() = Duration::from_millis(600);
    drop(sub);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        store
            .calls_of("rig")
            .iter()
            .all(|call| call.operation != "release"),
        "the shard is still closing"
    );
    let withheld = waiting
        .decode_error()
        .expect("a delivery of a closing shard is withheld");
    assert!(withheld.to_string().contains("stopped"), "{withheld}");
    waiting.nack(false).await.unwrap();
    rig.connected.shutdown().await.unwrap();
    let row = rig_row(&rig.store).await;
    assert_eq!(
        row.checkpoint.as_deref(),
        Some(crate::doubles::fake_stream::sequence_string(1).as_str()),
        "the final checkpoint passed a record no handler saw"
    );
    assert_eq!(row.owner, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_application_at_the_trim_horizon_reads_a_closed_parent_before_its_child() {
    let rig = Rig::start(
        RigSettings::parent_and_child(KinesisPosition::TrimHorizon),
        |_, _, _| None,
    )
    .await;
    let mut sub = rig.sub;
    let mut seen = Vec::new();
    for _ in 0..3 {
        let message = next(&mut sub).await;
        seen.push(text(&message));
        message.ack().await.unwrap();
    }
    assert_eq!(
        seen,
        ["0", "1", "child 0"],
        "the parent first, then its child"
    );
    stop(sub, rig.connected).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_application_at_the_tip_skips_a_closed_parent_and_starts_its_child_at_the_tip() {
    let rig = Rig::start(
        RigSettings {
            shards: 2,
            records: 2,
            closed: true,
            child_records: Some(1),
            seeded: false,
            ..RigSettings::default()
        },
        |_, _, _| None,
    )
    .await;
    let mut sub = rig.sub;
    rig.state
        .lock()
        .unwrap()
        .append(1, b"child written after the start");
    let message = next(&mut sub).await;
    assert_eq!(
        text(&message),
        "child written after the start",
        "neither the parent nor the child's older records are replayed"
    );
    message.ack().await.unwrap();
    assert!(
        next_within(&mut sub, Duration::from_millis(1500))
            .await
            .is_none()
    );
    let parent_key = crate::LeaseKey::new("orders", "shardId-000000000000");
    let parent = rig.store.read(&parent_key).await.unwrap().expect("a row");
    assert!(
        parent.is_skipped() && parent.owner.is_none(),
        "the parent is marked never to be read, and handed back: {parent:?}"
    );
    // An instance that saw the parent open and takes it late finds the mark: it reads nothing.
    let late = rig
        .store
        .acquire_from(
            &parent_key,
            "late-instance",
            Duration::from_secs(10),
            "AT_TIMESTAMP:0",
        )
        .await
        .unwrap();
    assert_eq!(late.checkpoint.as_deref(), Some(crate::SHARD_SKIPPED));
    stop(sub, rig.connected).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_take_that_finds_its_shard_marked_skipped_reads_nothing_and_reports_nothing() {
    // Another instance marked the shard never to be read between this round's read of the
    // table and its take: the take hands it back without asking Kinesis for an iterator.
    let store = Arc::new(Recording::default());
    store
        .mark_before_take
        .store(true, std::sync::atomic::Ordering::Release);
    let rig = Rig::start(
        RigSettings {
            seeded: false,
            store: store.clone(),
            ..RigSettings::default()
        },
        |_, _, _| None,
    )
    .await;
    let mut sub = rig.sub;
    {
        let mut stream = std::pin::pin!(sub.stream());
        let quiet = tokio::time::timeout(Duration::from_millis(1500), stream.next()).await;
        assert!(
            quiet.is_err(),
            "nothing is delivered or reported: {:?}",
            quiet.ok().flatten().map(|item| item.map(|m| text(&m)))
        );
    }
    assert_eq!(
        calls(&rig.seen, "GetShardIterator"),
        0,
        "no iterator is asked for a shard marked never to be read"
    );
    let row = rig_row(&rig.store).await;
    assert!(row.is_skipped() && row.owner.is_none(), "{row:?}");
    stop(sub, rig.connected).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shard_whose_iterators_keep_failing_is_handed_back_unfinished() {
    let rig = Rig::start(RigSettings::default(), expired_then_no_iterator()).await;
    let store = rig.store.clone();
    // Ten tries with backoff: the reader gives up, writes no SHARD_END and releases the shard
    // while the subscription runs on.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let row = rig_row(&store).await;
        assert_ne!(row.checkpoint.as_deref(), Some(SHARD_END));
        if row.owner.is_none() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the shard was never handed back"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    drop(rig.sub);
    rig.connected.shutdown().await.unwrap();
}

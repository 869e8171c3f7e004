//! Seeks: a position Kinesis refuses fails the seek and moves nothing; a delivery read before a
//! seek never reaches a handler after it; a shard opened at the tip resumes from that moment.

use std::time::Duration;

use ruststream::{ConnectedBroker, IncomingMessage, Seekable, Seeker};

use super::{Rig, RigSettings, eventually, next, stop, text};
use crate::doubles::fake_kinesis::Reply;
use crate::doubles::fake_kinesis::bodies;
use crate::doubles::fake_stream::sequence_string;
use crate::{KinesisError, KinesisPosition};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_seek_kinesis_refuses_fails_naming_the_shard_and_reading_goes_on() {
    let rig = Rig::with_records(1).await;
    let mut sub = rig.sub;
    next(&mut sub).await.ack().await.unwrap();
    // A sequence number the shard does not hold (of another shard, say): Kinesis refuses it.
    let refused = sub
        .seeker()
        .seek(KinesisPosition::at_sequence(
            "shardId-000000000000",
            sequence_string(999),
        ))
        .await
        .expect_err("Kinesis refused the position");
    let message = refused.to_string();
    assert!(
        matches!(refused, KinesisError::Seek { .. })
            && message.contains("orders")
            && message.contains("shardId-000000000000")
            && message.contains("InvalidArgumentException"),
        "{message}"
    );
    // The reader reads on where it was: the next record, not the first again.
    rig.state.lock().unwrap().append(0, b"after");
    let following = next(&mut sub).await;
    assert_eq!(text(&following), "after");
    following.ack().await.unwrap();
    stop(sub, rig.connected).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_read_before_a_seek_never_reaches_a_handler_after_it() {
    let rig = Rig::with_records(2).await;
    let mut sub = rig.sub;
    // Pulled by the runtime (a worker lane, a batch gathering), not yet handed to a handler.
    let waiting = next(&mut sub).await;
    assert!(
        waiting.decode_error().is_none(),
        "fresh deliveries reach their handler"
    );
    sub.seeker()
        .seek(KinesisPosition::TrimHorizon)
        .await
        .expect("the seek");
    let withheld = waiting
        .decode_error()
        .expect("a delivery of the old position is withheld from its handler");
    assert!(withheld.to_string().contains("seek"), "{withheld}");
    waiting.nack(false).await.unwrap();
    // The seek's position delivers the records again.
    let again = next(&mut sub).await;
    assert_eq!(text(&again), "0");
    assert!(again.decode_error().is_none());
    again.ack().await.unwrap();
    stop(sub, rig.connected).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shard_opened_at_the_tip_resumes_from_that_moment_after_an_expiry() {
    let expired = std::sync::atomic::AtomicBool::new(false);
    let rig = Rig::start(
        RigSettings {
            records: 1,
            seeded: false,
            ..RigSettings::default()
        },
        move |_, operation, _| {
            (operation == "GetRecords" && !expired.swap(true, std::sync::atomic::Ordering::SeqCst))
                .then(|| Reply::error(400, "ExpiredIteratorException"))
        },
    )
    .await;
    let seen = rig.seen.clone();
    eventually("a fresh iterator after the expiry", || {
        let asked = bodies(&seen, "GetShardIterator").len();
        async move { asked >= 2 }
    })
    .await;
    let iterators = bodies(&rig.seen, "GetShardIterator");
    assert_eq!(
        iterators[0]["ShardIteratorType"], "LATEST",
        "opened at the tip"
    );
    assert_eq!(
        iterators[1]["ShardIteratorType"], "AT_TIMESTAMP",
        "the tip was asked for again after the expiry: what was written meanwhile is skipped"
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
    drop(rig.sub);
    rig.connected.shutdown().await.unwrap();
}

/// A subscription whose subscriber was dropped (the broker still running) reads nothing more: a
/// seek through a seeker kept from it fails, naming the stream, instead of answering `Ok` for a
/// position nothing will ever read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_seek_of_a_closed_subscription_fails() {
    let rig = Rig::with_records(1).await;
    let mut sub = rig.sub;
    next(&mut sub).await.ack().await.unwrap();
    let seeker = sub.seeker();
    drop(sub);
    // Its readers hand their shards back; none is left to refuse the seek.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let refused = seeker
        .seek(KinesisPosition::TrimHorizon)
        .await
        .expect_err("nothing reads the closed subscription");
    let message = refused.to_string();
    assert!(
        matches!(refused, KinesisError::Seek { .. })
            && message.contains("orders")
            && message.contains("closed"),
        "{message}"
    );
    rig.connected.shutdown().await.unwrap();
}

/// More shards than an instance takes at once before it knows its peers.
const SHARDS: usize = 20;

/// [`SHARDS`] shards of a new application: each starts at the tip.
fn at_the_tip() -> RigSettings {
    RigSettings {
        shards: SHARDS,
        seeded: false,
        ..RigSettings::default()
    }
}

/// A seek at startup (`start_at(..)` at the mount site) covers the shards this instance takes
/// later too: a lone instance takes a large stream at its pace (a dozen shards at once before
/// it knows its peers), and the shards taken after the seek started at the stream's initial
/// position (the tip) without it: 28 of 40 shards skipped their records at the start-up
/// benchmark (fifteenth session).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_seek_made_while_takes_wait_for_the_pace_moves_where_those_shards_start() {
    every_shard_read_after_a_seek_at_startup(Duration::ZERO).await;
}

/// And the takes on their way when the seek comes (their iterators asked at the tip, slowly
/// answered here): they were planned at the old start, and are sought once they read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_seek_made_while_takes_are_on_their_way_moves_those_shards_too() {
    every_shard_read_after_a_seek_at_startup(Duration::from_millis(300)).await;
}

/// Twenty shards at the tip, each given a record once the first round took what the pace
/// allows, then a seek to the trim horizon: every shard's record is read. `iterator_delay`
/// slows each take's `GetShardIterator` answer (at the tip), and the seek waits two thirds of it
/// after the records were written, so that takes are on their way at the seek and read after
/// it.
async fn every_shard_read_after_a_seek_at_startup(iterator_delay: Duration) {
    let rig = Rig::start(
        at_the_tip(),
        // Only the takes' iterators (at the tip): the seek's own answer at once, so that it
        // is over before those takes read.
        move |_, operation, body| {
            (operation == "GetShardIterator"
                && body["ShardIteratorType"] == "LATEST"
                && !iterator_delay.is_zero())
            .then_some(Reply::Stream(iterator_delay))
        },
    )
    .await;
    let rows = rig.store.list("orders").await.unwrap().unwrap_or_default();
    let held = rows.iter().filter(|(_, row)| row.owner.is_some()).count();
    assert!(
        held < SHARDS,
        "the first round takes at the pace: {held} of {SHARDS} at once"
    );
    {
        let mut state = rig.state.lock().unwrap();
        for index in 0..SHARDS {
            state.append(index, format!("record of shard {index}").as_bytes());
        }
    }
    // Takes whose iterators are asked after the records were written, and answered after the
    // seek began, start after the records unless the seek moves them.
    tokio::time::sleep(iterator_delay * 2 / 3).await;
    let mut sub = rig.sub;
    sub.seeker()
        .seek(KinesisPosition::TrimHorizon)
        .await
        .expect("the seek");
    let mut read = std::collections::BTreeSet::new();
    while read.len() < SHARDS {
        let message = super::next_within(&mut sub, super::PATIENCE)
            .await
            .unwrap_or_else(|| panic!("every shard's record read; read {read:?}"));
        read.insert(text(&message));
        message.ack().await.unwrap();
    }
    stop(sub, rig.connected).await;
}

/// A seek of every shard that Kinesis refuses moves nothing: neither the shards read nor where
/// the shards taken after it start (review of the fifteenth session: the start moved before
/// the iterators were asked).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_seek_of_every_shard_moves_where_no_later_take_starts() {
    let rig = Rig::start(at_the_tip(), |_, operation, body| {
        (operation == "GetShardIterator" && body["ShardIteratorType"] == "TRIM_HORIZON")
            .then(|| Reply::error(400, "InvalidArgumentException"))
    })
    .await;
    let refused = rig
        .sub
        .seeker()
        .seek(KinesisPosition::TrimHorizon)
        .await
        .expect_err("Kinesis refused the position");
    assert!(matches!(refused, KinesisError::Seek { .. }), "{refused}");
    let store = std::sync::Arc::clone(&rig.store);
    eventually("every shard taken", || {
        let store = std::sync::Arc::clone(&store);
        async move {
            let rows = store.list("orders").await.unwrap().unwrap_or_default();
            rows.len() == SHARDS && rows.iter().all(|(_, row)| row.owner.is_some())
        }
    })
    .await;
    let rows = rig.store.list("orders").await.unwrap().unwrap_or_default();
    let moved: Vec<String> = rows
        .iter()
        .filter(|(_, row)| row.checkpoint.as_deref() == Some("TRIM_HORIZON"))
        .map(|(key, _)| key.to_string())
        .collect();
    assert!(
        moved.is_empty(),
        "taken at the refused seek's start: {moved:?}"
    );
    stop(rig.sub, rig.connected).await;
}

/// A reshard's child is planned at the trim horizon whatever the start (its parent was read to
/// its end), so a take of it planned after a seek to the tip is not late: it reads the child
/// from its first record (review of the fifteenth session: every fresh take that read after the
/// seek and started elsewhere than the seek's position was moved to it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_taken_after_a_seek_to_the_tip_reads_from_its_first_record() {
    let rig = Rig::start(
        RigSettings::parent_and_child(KinesisPosition::TrimHorizon),
        |_, _, _| None,
    )
    .await;
    let mut sub = rig.sub;
    sub.seeker()
        .seek(KinesisPosition::Latest)
        .await
        .expect("the seek");
    loop {
        let message = next(&mut sub).await;
        if text(&message) == "child 0" {
            message.ack().await.unwrap();
            break;
        }
        // The parent's records read before the seek are withheld from handlers.
        assert!(
            message.decode_error().is_some(),
            "after the seek to the tip, only the child's records: {}",
            text(&message)
        );
        message.nack(false).await.unwrap();
    }
    stop(sub, rig.connected).await;
}

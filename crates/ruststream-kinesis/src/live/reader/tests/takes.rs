//! Takes that fail after the lease was won back off per shard, reported once per backoff.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use ruststream::Subscriber;

use super::{Rig, RigSettings, stop};
use crate::doubles::fake_kinesis::{Reply, calls};
use crate::{KinesisError, LeaseKey, LeaseStore, LeaseTimings, MemoryLeaseStore};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_take_whose_iterator_is_refused_backs_off_and_is_reported_once_per_try() {
    // Kinesis refuses every iterator of the shard; its lease is free and listed every second.
    // A 6 s lease, listed every second: backoffs of 1, 2, 4 s, then 6 s at most.
    let rig = Rig::start(
        RigSettings {
            timings: crate::LeaseTimings::new(Duration::from_secs(6), Duration::from_secs(2))
                .unwrap()
                .with_listing_interval(Duration::from_secs(1)),
            ..RigSettings::default()
        },
        |_, operation, _| {
            (operation == "GetShardIterator").then(|| Reply::error(500, "InternalFailure"))
        },
    )
    .await;
    let mut sub = rig.sub;
    let mut reported = 0;
    {
        let mut stream = std::pin::pin!(sub.stream());
        let watching = tokio::time::sleep(Duration::from_secs(8));
        tokio::pin!(watching);
        loop {
            tokio::select! {
                () = &mut watching => break,
                item = stream.next() => match item {
                    Some(Err(err)) => {
                        let message = err.to_string();
                        assert!(
                            matches!(err, KinesisError::Api { .. })
                                && message.contains("shardId-000000000000")
                                && message.contains("GetShardIterator"),
                            "{message}"
                        );
                        reported += 1;
                    }
                    Some(Ok(_)) => panic!("nothing can be read"),
                    None => break,
                },
            }
        }
    }
    let tries = calls(&rig.seen, "GetShardIterator");
    // Waits of 1 s, 2 s, 4 s (each drawn from its upper half): at most five tries in 8 s, where
    // a try at every listing and handover poll would be eight or more.
    assert!((2..=5).contains(&tries), "{tries} takes in 8 s");
    assert_eq!(reported, tries, "one report per failed take");
    stop(sub, rig.connected).await;
}

/// Pins the first round's end: the subscription is handed out once the round is over, whatever
/// it took. An instance that joins while another holds every shard takes nothing, and must not
/// wait for the next listing (or poll) before `subscribe` returns.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_subscribe_that_takes_nothing_returns_when_its_first_round_is_over() {
    let store: Arc<dyn LeaseStore> = Arc::new(MemoryLeaseStore::new());
    let key = LeaseKey::new("orders", "shardId-000000000000");
    store
        .acquire_from(&key, "pod-b", Duration::from_secs(3600), "TRIM_HORIZON")
        .await
        .expect("pod-b holds the only shard");
    let timings = LeaseTimings::default()
        .with_listing_interval(Duration::from_secs(600))
        .with_handover_poll_interval(Duration::ZERO);
    let opened = tokio::time::Instant::now();
    let rig = Rig::start(
        RigSettings {
            store,
            timings,
            seeded: false,
            ..RigSettings::default()
        },
        |_, _, _| None,
    )
    .await;
    let took = opened.elapsed();
    assert!(
        took < Duration::from_secs(60),
        "subscribe returned {took:?} (virtual) after it began: it waited for the next listing"
    );
    stop(rig.sub, rig.connected).await;
}

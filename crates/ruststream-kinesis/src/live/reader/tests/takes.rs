//! Takes that fail after the lease was won back off per shard, reported once per backoff.

use std::time::Duration;

use futures::StreamExt;
use ruststream::Subscriber;

use super::{Rig, RigSettings, stop};
use crate::KinesisError;
use crate::fake_kinesis::{Reply, calls};

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

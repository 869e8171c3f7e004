//! Faults of Kinesis calls the local stack never produces: a hung call, a throttled read.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use ruststream::IncomingMessage;

use super::{Rig, RigSettings, next, stop, text};
use crate::doubles::fake_kinesis::{Reply, calls};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_read_times_out_and_the_shard_is_read_again() {
    let reads = AtomicUsize::new(0);
    let rig = Rig::start(
        RigSettings {
            records: 1,
            ..RigSettings::default()
        },
        move |_, operation, _| {
            (operation == "GetRecords" && reads.fetch_add(1, Ordering::SeqCst) == 0)
                .then_some(Reply::Hang)
        },
    )
    .await;
    let started = Instant::now();
    let mut sub = rig.sub;
    // The timed-out call is reported on the subscription; the record follows.
    let record = super::next_within(&mut sub, super::PATIENCE)
        .await
        .expect("the record, once the hung call timed out");
    assert_eq!(text(&record), "0");
    // A Kinesis call is bounded (10 s at least, an attempt at half of it); then the reader asks
    // again.
    assert!(
        started.elapsed() < Duration::from_secs(12),
        "read after {:?}",
        started.elapsed()
    );
    assert!(calls(&rig.seen, "GetRecords") >= 2);
    record.ack().await.unwrap();
    stop(sub, rig.connected).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_throttled_read_backs_off_and_reads_every_record_once() {
    let reads = AtomicUsize::new(0);
    let rig = Rig::start(
        RigSettings {
            records: 3,
            ..RigSettings::default()
        },
        move |_, operation, _| {
            (operation == "GetRecords" && reads.fetch_add(1, Ordering::SeqCst) < 3)
                .then(|| Reply::error(400, "ProvisionedThroughputExceededException"))
        },
    )
    .await;
    let mut sub = rig.sub;
    let mut seen = Vec::new();
    for _ in 0..3 {
        let message = next(&mut sub).await;
        seen.push(text(&message));
        message.ack().await.unwrap();
    }
    assert_eq!(seen, ["0", "1", "2"]);
    assert!(
        super::next_within(&mut sub, Duration::from_millis(1500))
            .await
            .is_none(),
        "a record came twice after the throttling"
    );
    stop(sub, rig.connected).await;
}

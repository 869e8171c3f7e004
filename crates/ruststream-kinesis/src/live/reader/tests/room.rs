//! A reader sends what it read in batches, not a record at a time: when handlers lag, and
//! after every fetch.

use std::sync::atomic::Ordering;
use std::time::Duration;

use ruststream::IncomingMessage;

use super::{Rig, RigSettings, next, stop, text};
use crate::KinesisStream;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_that_waited_for_room_fills_it_when_it_comes() {
    const RECORDS: usize = 2_000;
    // A fetch brings more records than the channel's 16 sends hold.
    let mut rig = Rig::start(
        RigSettings {
            records: RECORDS,
            stream: KinesisStream::new("orders").batch_size(1_000),
            ..RigSettings::default()
        },
        |_, _, _| None,
    )
    .await;
    // The handlers lag: the channel (16 sends) fills before the first record is taken, and
    // the reader waits for room with a record handed out; the handlers stay behind.
    tokio::time::sleep(Duration::from_secs(1)).await;
    for n in 0..RECORDS {
        let message = next(&mut rig.sub).await;
        assert_eq!(text(&message), n.to_string(), "in order, none lost");
        message.ack().await.unwrap();
        // Slower than the reader: the channel stays full, and the reader waits for room.
        tokio::time::sleep(Duration::from_micros(500)).await;
    }
    // Each slot the handlers freed went straight to the waiting reader: had it sent what it
    // held alone each time (one record a send), the 2,000 records would take over 1,000
    // sends; filled, a send carries up to 64.
    let sends = rig.sub.sends.load(Ordering::Relaxed);
    assert!(
        sends <= RECORDS / 10,
        "{sends} sends for {RECORDS} records: the room was not filled"
    );
    stop(rig.sub, rig.connected).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_records_a_fetch_brought_go_out_together_the_first_with_the_rest() {
    const RECORDS: usize = 1_000;
    // Fetches of 100 (the rig's batch size) to a channel with room: each goes in two sends of
    // 64 and 36. (The step an answer decides handed its first record out alone: three sends.)
    let mut rig = Rig::with_records(RECORDS).await;
    for n in 0..RECORDS {
        let message = next(&mut rig.sub).await;
        assert_eq!(text(&message), n.to_string(), "in order, none lost");
        message.ack().await.unwrap();
    }
    let sends = rig.sub.sends.load(Ordering::Relaxed);
    assert!(
        sends <= 2 * RECORDS / 100,
        "{sends} sends for {RECORDS} records in fetches of 100"
    );
    stop(rig.sub, rig.connected).await;
}

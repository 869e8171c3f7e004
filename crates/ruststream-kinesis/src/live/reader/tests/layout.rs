//! A subscription of a store that keeps the notice's head apart opens only once its read of
//! the notice found no other layout and its own layout landed.

use std::sync::atomic::Ordering;

use super::*;
use crate::doubles::recording_store::Recording;

/// Subscribes to the fake stream's one shard with `store`: what `subscribe` answers.
async fn open(store: Arc<Recording>) -> Result<KinesisSubscriber, String> {
    let state = fake_stream::stream(1);
    let (config, _) = fake_stream::config(&state, |_, _, _| None);
    let connected = KinesisBroker::from_config(config)
        .lease_store(store as Arc<dyn LeaseStore>)
        .owner_id("rig")
        .lease_timings(timings())
        .connect()
        .await
        .expect("the broker connects");
    KinesisStream::new("orders")
        .subscribe(&connected)
        .await
        .map_err(|err| err.to_string())
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_store_keeping_the_head_apart_does_not_open_when_its_read_of_the_notice_fails() {
    let store = Arc::new(Recording::default());
    store.head_apart.store(true, Ordering::SeqCst);
    store.fail_notice.store(true, Ordering::SeqCst);
    let Err(told) = open(Arc::clone(&store)).await else {
        panic!("opened without knowing which layout the stream keeps");
    };
    assert!(
        told.contains("orders") && told.contains("AccessDenied"),
        "{told}"
    );
    assert_eq!(
        store.layout_writes.load(Ordering::SeqCst),
        0,
        "a layout written without knowing the stream's"
    );
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_one_row_store_opens_when_its_read_of_the_notice_fails() {
    let store = Arc::new(Recording::default());
    store.fail_notice.store(true, Ordering::SeqCst);
    assert!(open(store).await.is_ok());
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_subscription_whose_layout_did_not_land_does_not_open() {
    let store = Arc::new(Recording::default());
    store.head_apart.store(true, Ordering::SeqCst);
    store.fail_layout.store(true, Ordering::SeqCst);
    let Err(told) = open(Arc::clone(&store)).await else {
        panic!("opened with its layout unwritten");
    };
    assert!(
        told.contains("orders") && told.contains("keep_layout"),
        "{told}"
    );
}

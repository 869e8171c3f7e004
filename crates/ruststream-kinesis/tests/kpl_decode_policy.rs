//! A user record of a KPL aggregate that fails to decode goes through the subscription's decode
//! policy alone: its siblings reach the handler, and the checkpoint moves past the whole
//! aggregate. Live, with the framework's runtime (`TestApp::start_live`) and an aggregate that
//! AWS's aggregation library packed.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_sdk_kinesis::primitives::Blob;
use ruststream::testing::TestApp;
use ruststream_kinesis::prelude::*;
use serde::{Deserialize, Serialize};

/// The stream of this test alone (the app's mount names it at compile time).
const STREAM: &str = "kpl-decode-policy";

#[derive(Debug, PartialEq, Deserialize, Serialize)]
struct Order {
    id: u64,
}

#[subscriber(KinesisStream::new(STREAM).create_if_missing(1).poll_interval(Duration::from_millis(200)))]
async fn take_order(order: &Order) -> HandlerOutcome {
    tracing::info!(order.id, "order");
    HandlerOutcome::ack()
}

fn service(broker: KinesisBroker, leases: Arc<dyn LeaseStore>) -> RustStream {
    RustStream::new(AppInfo::new("orders", "0.1.0")).with_broker(broker.lease_store(leases), |b| {
        b.include(take_order);
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_record_that_fails_to_decode_takes_none_of_its_siblings_with_it() {
    let (Some(url), Some(python)) = (common::endpoint(), common::kpl::python()) else {
        return;
    };
    let store = MemoryLeaseStore::new();
    let leases: Arc<dyn LeaseStore> = Arc::new(store.clone());
    let app = TestApp::start_live(service(common::broker(&url), Arc::clone(&leases)))
        .await
        .unwrap();
    // One aggregate: a valid order, a user record that is no order, another valid order.
    let users = [
        ("k-1".to_owned(), None, br#"{"id":1}"#.to_vec()),
        ("k-2".to_owned(), None, b"not an order".to_vec()),
        ("k-3".to_owned(), None, br#"{"id":3}"#.to_vec()),
    ];
    let packed = common::kpl::aggregate(&python, &users);
    assert_eq!(packed.len(), 1);
    let raw = common::raw_kinesis(&url);
    let written = raw
        .put_record()
        .stream_name(STREAM)
        .partition_key(&packed[0].partition_key)
        .data(Blob::new(packed[0].data.clone()))
        .send()
        .await
        .unwrap();
    let key = LeaseKey::new(STREAM, written.shard_id());
    let sequence = written.sequence_number().to_owned();

    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let broker = app.broker::<KinesisBroker>();
        let subscriber = broker.subscriber(STREAM);
        let received = subscriber.received_raw();
        let checkpoint = leases
            .read(&key)
            .await
            .unwrap()
            .and_then(|row| row.checkpoint);
        if received.len() >= 3 && checkpoint.as_deref() == Some(sequence.as_str()) {
            let payloads: Vec<&[u8]> = received.iter().map(|bytes| &bytes[..]).collect();
            let want: Vec<&[u8]> = users.iter().map(|(_, _, data)| data.as_slice()).collect();
            assert_eq!(
                payloads, want,
                "each user record a delivery of its own, in order"
            );
            let outcomes: Vec<String> = subscriber
                .outcomes()
                .iter()
                .map(|outcome| format!("{outcome:?}"))
                .collect();
            assert_eq!(outcomes.len(), 3, "{outcomes:?}");
            assert_eq!(
                outcomes[0], outcomes[2],
                "both orders handled alike: {outcomes:?}"
            );
            assert_ne!(
                outcomes[1], outcomes[0],
                "the one that is no order went through the decode policy: {outcomes:?}"
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "within 30 s: received {received:?}, checkpoint {checkpoint:?} (the aggregate is \
             {sequence})"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    app.shutdown().await.unwrap();
}

//! Two applications pointed at one lease table by mistake, live on the local stack: each names
//! itself (`DynamoLeaseStore::application`), and they start together on one stream. The stream
//! is claimed for one application before any shard is taken, so the other is refused whole: its
//! subscription fails, naming both applications and the table, instead of each silently reading
//! part of the stream for good.
//!
//! They run when `KINESIS_TEST_ENDPOINT` names the local stack.
#![cfg(all(feature = "dynamodb-lease", feature = "testing"))]

mod common;

use std::sync::Arc;

use common::instances::{holders, stream_of, table, timings};
use ruststream::{Broker, ConnectedBroker, SubscriptionSource};
use ruststream_kinesis::{DynamoLeaseStore, KinesisError, LeaseError, LeaseStore};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_applications_starting_together_on_one_stream_leave_it_whole_to_one() {
    let Some(url) = common::endpoint() else {
        return;
    };
    let (config, store) = table(&url).await;
    let stream = common::unique("two-apps");
    // The stream exists before either starts, so both open at once.
    {
        let connected = common::broker(&url).connect().await.unwrap();
        drop(stream_of(&stream, 4).subscribe(&connected).await.unwrap());
        connected.shutdown().await.unwrap();
    }
    let app = |name: &str| {
        let leases: Arc<dyn LeaseStore> =
            Arc::new(DynamoLeaseStore::new(&config, store.table()).application(name));
        common::broker_with(&url, leases)
            .owner_id(format!("{name}-pod"))
            .lease_timings(timings())
    };
    let (warehouse, billing) = (
        app("warehouse").connect().await.unwrap(),
        app("billing").connect().await.unwrap(),
    );
    let (a, b) = tokio::join!(
        stream_of(&stream, 4).subscribe(&warehouse),
        stream_of(&stream, 4).subscribe(&billing),
    );
    let (kept, refused, winner) = match (a, b) {
        (Ok(kept), Err(refused)) => (kept, refused, "warehouse"),
        (Err(refused), Ok(kept)) => (kept, refused, "billing"),
        (Ok(_), Ok(_)) => panic!("both applications opened the stream: they split its shards"),
        (Err(a), Err(b)) => panic!("neither opened it: {a} / {b}"),
    };
    let said = refused.to_string();
    assert!(
        matches!(&refused, KinesisError::Lease { source, .. }
            if matches!(**source, LeaseError::OtherApplication { .. })),
        "{refused:?}"
    );
    assert!(
        said.contains("\"warehouse\"")
            && said.contains("\"billing\"")
            && said.contains(store.table()),
        "names both applications and the table: {said}"
    );
    // Every shard the winner reads; none is the other's.
    let owner = format!("{winner}-pod");
    for _ in 0..100 {
        let rows = holders(&store, &stream).await;
        if rows.len() == 4 && rows.values().all(|o| o.as_deref() == Some(owner.as_str())) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let rows = holders(&store, &stream).await;
    assert!(
        rows.len() == 4 && rows.values().all(|o| o.as_deref() == Some(owner.as_str())),
        "{rows:?}"
    );
    drop(kept);
    warehouse.shutdown().await.unwrap();
    billing.shutdown().await.unwrap();
}

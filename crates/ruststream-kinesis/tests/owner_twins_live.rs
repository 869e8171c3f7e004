//! One owner id on two running instances, live on the local stack: the later of the two pauses
//! reading with `KinesisError::OwnerIdInUse` naming the owner id and the table, within two leases
//! and a listing interval; the earlier keeps every shard, and from then on no record is handled
//! twice. Once the earlier stops, the later reads again. (A restart under the same owner id after
//! a crash is not taken for a second instance: `leases_kinesis.rs`,
//! `a_restart_under_the_same_owner_id_resumes_at_once`.)
//!
//! They run when `KINESIS_TEST_ENDPOINT` names the local stack.
#![cfg(all(feature = "dynamodb-lease", feature = "testing"))]

mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::instances::{Handled, Instance, collect_until, holders, stream_of, table, timings};
use ruststream::{Broker, ConnectedBroker, OutgoingMessage, Publisher};
use ruststream_kinesis::{KinesisOptions, LeaseStore};
use tokio::sync::mpsc;

/// Publishes a numbered record every 20 ms until `stop`, each under a key of its own; answers
/// when each number was published.
async fn publish_until(url: String, stream: String, stop: Arc<AtomicBool>) -> Vec<Instant> {
    let connected = common::broker(&url).connect().await.unwrap();
    let publisher = connected.publisher().await.unwrap();
    let mut published = Vec::new();
    while !stop.load(Ordering::Acquire) {
        let n = published.len();
        let key = KinesisOptions::default().with_partition_key(format!("key-{}", n % 16));
        publisher
            .publish(
                OutgoingMessage::new(stream.as_str(), n.to_string().as_bytes()),
                Some(&key),
            )
            .await
            .unwrap();
        published.push(Instant::now());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    connected.shutdown().await.unwrap();
    published
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_later_of_two_instances_under_one_owner_id_pauses_while_the_earlier_runs() {
    let Some(url) = common::endpoint() else {
        return;
    };
    let (_, store) = table(&url).await;
    let table_name = store.table().to_owned();
    let store: Arc<dyn LeaseStore> = Arc::new(store);
    let stream = common::unique("twins");
    let (tx, mut rx) = mpsc::unbounded_channel();
    let (early_errors, mut early_said) = mpsc::unbounded_channel();
    let (late_errors, mut late_said) = mpsc::unbounded_channel();
    let pod = |store: &Arc<dyn LeaseStore>| {
        common::broker_with(&url, Arc::clone(store))
            .owner_id("pod-a")
            .lease_timings(timings())
    };
    let early = Instance::reading(
        pod(&store),
        "early",
        stream_of(&stream, 2),
        tx.clone(),
        Some(early_errors),
    )
    .await;
    let stop = Arc::new(AtomicBool::new(false));
    let publishing = tokio::spawn(publish_until(
        url.clone(),
        stream.clone(),
        Arc::clone(&stop),
    ));
    let mut handled: Vec<Handled> = Vec::new();
    collect_until(&mut rx, &mut handled, Duration::from_secs(30), |h| {
        h.len() >= 20
    })
    .await;
    assert!(handled.len() >= 20, "the first instance reads: {handled:?}");

    // A second instance under the same name: it takes the first one's shards (its own, by name).
    let started = Instant::now();
    let late = Instance::reading(
        pod(&store),
        "late",
        stream_of(&stream, 2),
        tx,
        Some(late_errors),
    )
    .await;
    let said = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            let err = late_said.recv().await.expect("the later instance runs");
            if err.contains("runs under owner id") {
                return err;
            }
        }
    })
    .await
    .expect("the later instance says within 30 s that another runs under its owner id");
    let found = started.elapsed();
    // Two leases (3 s) and a listing interval (1 s) with these timings, and the calls' time.
    assert!(
        found < Duration::from_secs(10),
        "found {found:?} after the second instance started"
    );
    assert!(
        said.contains("\"pod-a\"") && said.contains(&table_name),
        "names the owner id and the table: {said}"
    );
    println!("one owner id on two instances: found {found:?} after the second started: {said}");

    // From a lease after it was found on, every record is handled once, by the earlier one.
    let settled = Instant::now() + Duration::from_secs(3);
    tokio::time::sleep(Duration::from_secs(8)).await;
    stop.store(true, Ordering::Release);
    let published = publishing.await.unwrap();
    let due: Vec<String> = published
        .iter()
        .enumerate()
        .filter(|(_, at)| **at >= settled)
        .map(|(n, _)| n.to_string())
        .collect();
    assert!(due.len() > 50, "records were published after it was found");
    collect_until(&mut rx, &mut handled, Duration::from_secs(30), |h| {
        let seen: std::collections::HashSet<&str> = h.iter().map(|h| h.payload.as_str()).collect();
        due.iter().all(|n| seen.contains(n.as_str()))
    })
    .await;
    // What is still on its way.
    collect_until(&mut rx, &mut handled, Duration::from_secs(2), |_| false).await;
    let mut times: HashMap<&str, Vec<&str>> = HashMap::new();
    for h in &handled {
        times
            .entry(h.payload.as_str())
            .or_default()
            .push(h.instance.as_str());
    }
    for n in &due {
        let by = times.get(n.as_str()).cloned().unwrap_or_default();
        assert_eq!(
            by,
            vec!["early"],
            "record {n}, published after the later instance stopped, is handled once, by the \
             earlier one"
        );
    }
    let rows = holders(
        &ruststream_kinesis::DynamoLeaseStore::new(&common::sdk_config(&url), table_name.as_str()),
        &stream,
    )
    .await;
    assert_eq!(rows.len(), 2);
    assert!(
        rows.values().all(|owner| owner.as_deref() == Some("pod-a")),
        "{rows:?}"
    );
    // The earlier one reported no error of its own.
    early.stop().await;
    while let Ok(err) = early_said.try_recv() {
        assert!(!err.contains("runs under owner id"), "{err}");
    }

    // The earlier stopped: the later's record stands a lease (3 s) unanswered, and it reads again.
    let stopped = Instant::now();
    let after: Vec<String> = (0..20).map(|n| format!("after-{n}")).collect();
    common::instances::publish_all(&url, &stream, after.clone()).await;
    collect_until(&mut rx, &mut handled, Duration::from_secs(60), |h| {
        after
            .iter()
            .all(|body| h.iter().any(|h| h.payload == *body && h.instance == "late"))
    })
    .await;
    for body in &after {
        assert!(
            handled
                .iter()
                .any(|h| h.payload == *body && h.instance == "late"),
            "the later instance reads again once the earlier stopped: {body} not handled"
        );
    }
    println!(
        "one owner id on two instances: the later read again {:?} after the earlier stopped",
        stopped.elapsed()
    );
    late.stop().await;
    let mut told = 0;
    while let Ok(err) = late_said.try_recv() {
        told += usize::from(err.contains("runs under owner id"));
    }
    assert_eq!(told, 0, "told once, at the pause (received above)");
}

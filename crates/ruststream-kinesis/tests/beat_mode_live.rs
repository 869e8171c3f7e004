//! Live tests of liveness by beat (`KinesisBroker::keep_leases_alive_by_beat`) on the local
//! stack's DynamoDB: two instances share a stream with every lease kept alive by their beats
//! (rows kept by beat, no renewal written, one beat per instance while idle, rows released at
//! a stop), an instance that joins gets its share from an idle holder (balancing by beat), and
//! a fleet split between the two ways is refused, as is a notice kept in another layout by
//! another version; a fleet that keeps the notice's head apart reads the head at its polls and
//! refuses the one-row layout, and is refused by it. The takeover of a killed
//! instance is in `leases_kinesis.rs`, the chaos run in `chaos_live.rs`.
#![cfg(all(feature = "dynamodb-lease", feature = "testing"))]

mod common;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use ruststream::{Broker, SubscriptionSource};
use ruststream_kinesis::{DynamoLeaseStore, KinesisBroker, KinesisError, LeaseStore};
use tokio::sync::mpsc;

use common::counting::{Counting, delta};
use common::instances::{
    Instance, collect_until, payloads, publish_all, publish_and_handle, stream_of, table, timings,
    until_shares,
};
use common::now_ms;

const SHARDS: u32 = 4;

fn by_beat(url: &str, store: Arc<dyn LeaseStore>, owner: &str) -> KinesisBroker {
    common::broker_with(url, store)
        .owner_id(owner)
        .lease_timings(timings())
        .keep_leases_alive_by_beat(true)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_kept_alive_by_beat_read_every_shard_and_write_one_beat_each_when_idle() {
    let Some(url) = common::endpoint() else {
        return;
    };
    let (config, store) = table(&url).await;
    let stream = common::unique("by-beat");
    let own_store = || Counting::new(DynamoLeaseStore::new(&config, store.table()));
    let (store_a, store_b) = (own_store(), own_store());
    let (tx, mut rx) = mpsc::unbounded_channel();
    let (a, b) = start_pair(&url, (store_a.clone(), store_b.clone()), &stream, &tx).await;
    let handled = publish_and_handle(&url, &stream, ("r", 80), &mut rx).await;
    one_instance_a_shard(&handled);
    // Every held row is kept by beat: no instance judges it by its expiry.
    let rows = store.rows().await.unwrap();
    let ours: Vec<_> = rows
        .iter()
        .filter(|(key, _)| key.stream() == stream)
        .collect();
    assert_eq!(ours.len(), SHARDS as usize);
    assert!(
        ours.iter()
            .all(|(_, row)| row.owner.is_some() && row.is_kept_by_beat(now_ms())),
        "every row held and kept by beat: {ours:?}"
    );
    // Idle: the checkpoints of the last acknowledgements written, then only beats.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (a_before, b_before) = (store_a.snapshot(), store_b.snapshot());
    let window = Duration::from_secs(6);
    tokio::time::sleep(window).await;
    let (a_after, b_after) = (store_a.snapshot(), store_b.snapshot());
    let writes = |after: &HashMap<&'static str, u64>, before: &HashMap<&'static str, u64>| {
        ["renew", "checkpoint", "beat", "acquire", "take_over"]
            .map(|call| (call, delta(after, before, call)))
    };
    let (a_writes, b_writes) = (writes(&a_after, &a_before), writes(&b_after, &b_before));
    println!(
        "idle over {window:?} with {SHARDS} shards kept alive by beat: pod-a {a_writes:?}, \
         pod-b {b_writes:?}"
    );
    for (instance, after, before) in [
        ("pod-a", &a_after, &a_before),
        ("pod-b", &b_after, &b_before),
    ] {
        assert_eq!(
            delta(after, before, "renew") + delta(after, before, "checkpoint"),
            0,
            "{instance} writes no row while idle"
        );
        // A beat every renewal interval (1 s): about six in the window.
        let beats = delta(after, before, "beat");
        assert!(
            (3..=12).contains(&beats),
            "{instance} beats once a renewal interval: {beats}"
        );
    }
    // A stop releases every row as before, though nothing renewed them.
    a.stop().await;
    b.stop().await;
    let rows = store.rows().await.unwrap();
    let released = rows
        .iter()
        .filter(|(key, _)| key.stream() == stream)
        .all(|(_, row)| row.owner.is_none());
    assert!(released, "released at the stop: {rows:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_split_between_the_two_ways_is_refused_with_the_fix() {
    let Some(url) = common::endpoint() else {
        return;
    };
    let (_, store) = table(&url).await;
    let store: Arc<dyn LeaseStore> = Arc::new(store);
    let stream = common::unique("split");
    let (tx, mut rx) = mpsc::unbounded_channel();
    // pod-a renews per row and holds both shards.
    let a = Instance::start(
        &url,
        Arc::clone(&store),
        "pod-a",
        &stream,
        2,
        tx.clone(),
        None,
    )
    .await;
    publish_all(&url, &stream, ["held".to_owned()]).await;
    let mut handled = Vec::new();
    collect_until(&mut rx, &mut handled, Duration::from_secs(30), |h| {
        payloads(h).contains("held")
    })
    .await;
    assert!(payloads(&handled).contains("held"));
    // pod-b keeps its leases alive by beat: it does not open on the stream.
    let by_beat_refused = refused(by_beat(&url, Arc::clone(&store), "pod-b"), &stream).await;
    for named in [
        stream.as_str(),
        "pod-a",
        "pod-b",
        "keep_leases_alive_by_beat",
        "shardId-",
    ] {
        assert!(
            by_beat_refused.contains(named),
            "the error names {named}: {by_beat_refused}"
        );
    }
    println!("refused: {by_beat_refused}");
    a.stop().await;
    // Released, the rows hold no one: the beat fleet starts, and then a per-row instance is
    // refused the other way.
    let c = Instance::start_with(
        by_beat(&url, Arc::clone(&store), "pod-c"),
        "pod-c",
        (&stream, 2),
        tx.clone(),
        None,
    )
    .await;
    let bodies = vec![
        "after-1".to_owned(),
        "after-2".to_owned(),
        "after-3".to_owned(),
    ];
    publish_all(&url, &stream, bodies.clone()).await;
    collect_until(&mut rx, &mut handled, Duration::from_secs(30), |h| {
        bodies.iter().all(|body| payloads(h).contains(body))
    })
    .await;
    assert!(
        handled
            .iter()
            .filter(|h| h.payload.starts_with("after"))
            .all(|h| h.instance == "pod-c")
    );
    let per_row = common::broker_with(&url, Arc::clone(&store))
        .owner_id("pod-d")
        .lease_timings(timings());
    let per_row_refused = refused(per_row, &stream).await;
    assert!(
        per_row_refused.contains("pod-c") && per_row_refused.contains("by beat"),
        "{per_row_refused}"
    );
    c.stop().await;
}

/// The error `broker`'s subscription to `stream` fails to open with.
/// An instance of another version that keeps the stream's notice in another layout (its beats
/// elsewhere) wrote its layout into the notice row: an instance of this version, per row or by
/// beat, does not open on the stream, and says why and what to do; by beat, it wrote no beat
/// into that notice first. A layout that cannot be read is refused as another.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_notice_kept_in_another_layout_is_refused_in_either_way_with_the_fix() {
    use aws_sdk_dynamodb::types::AttributeValue;

    let Some(url) = common::endpoint() else {
        return;
    };
    let (config, store) = table(&url).await;
    let stream = common::unique("layout");
    let client = aws_sdk_dynamodb::Client::new(&config);
    let table_name = store.table().to_owned();
    let set_layout = |value: AttributeValue| {
        client
            .update_item()
            .table_name(&table_name)
            .key("lease_key", AttributeValue::S(format!("{stream}#notice")))
            .update_expression("SET notice_layout = :layout")
            .expression_attribute_values(":layout", value)
            .send()
    };
    // A layout of a later version (layout 2, kept apart, counts only while its beats run).
    set_layout(AttributeValue::N("3".to_owned())).await.unwrap();
    let store: Arc<dyn LeaseStore> = Arc::new(store);
    let counter = store.notice(&stream).await.unwrap().unwrap().counter;
    for broker in [
        common::broker_with(&url, Arc::clone(&store))
            .owner_id("pod-a")
            .lease_timings(timings()),
        by_beat(&url, Arc::clone(&store), "pod-b"),
    ] {
        let refused = refused(broker, &stream).await;
        for named in [stream.as_str(), "layout 3", "layout 1", "one version"] {
            assert!(
                refused.contains(named),
                "the error names {named}: {refused}"
            );
        }
        println!("refused: {refused}");
    }
    // Refused before its beat started, the instance by beat wrote no beat into the other
    // version's notice (nor removed one, which bumps the counter).
    let notice = store.notice(&stream).await.unwrap().unwrap();
    assert!(!notice.beats.contains_key("pod-b"), "{notice:?}");
    assert_eq!(notice.counter, counter, "{notice:?}");
    set_layout(AttributeValue::S("two".to_owned()))
        .await
        .unwrap();
    let refused = refused(by_beat(&url, Arc::clone(&store), "pod-b"), &stream).await;
    assert!(refused.contains("cannot read"), "{refused}");
}

/// Two instances by beat whose store keeps each notice's head apart
/// (`DynamoLeaseStore::keep_notice_head_apart`) share a stream: one instance a shard, and their
/// polls read the head alone far more often than the whole notice. An instance of the one-row
/// layout does not open beside them, and one of theirs does not open beside a one-row fleet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_that_keeps_the_notice_head_apart_reads_the_head_and_refuses_the_one_row_layout() {
    let Some(url) = common::endpoint() else {
        return;
    };
    let (config, store) = table(&url).await;
    let stream = common::unique("apart");
    let apart = || DynamoLeaseStore::new(&config, store.table()).keep_notice_head_apart();
    // One of them reads its polls eventually consistent: instances of a stream may differ in it.
    let (store_a, store_b) = (
        Counting::new(apart()),
        Counting::new(apart().eventually_consistent_polls()),
    );
    let (tx, mut rx) = mpsc::unbounded_channel();
    let (a, b) = start_pair(&url, (store_a.clone(), store_b.clone()), &stream, &tx).await;
    let handled = publish_and_handle(&url, &stream, ("r", 40), &mut rx).await;
    one_instance_a_shard(&handled);
    // With these timings (a lease of 3 s, beats every second) a whole read is due about every
    // 2 s, when the first beat it showed ends; the polls between read the head alone.
    let before = store_a.snapshot();
    tokio::time::sleep(Duration::from_secs(10)).await;
    let after = store_a.snapshot();
    let (heads, wholes) = (
        delta(&after, &before, "notice_head"),
        delta(&after, &before, "notice"),
    );
    println!("pod-a over 10 s: {heads} head reads, {wholes} whole reads");
    assert!(
        heads > 0 && heads >= wholes,
        "{heads} head reads, {wholes} whole reads"
    );
    let one_row: Arc<dyn LeaseStore> = Arc::new(store.clone());
    let refused_one_row = refused(by_beat(&url, Arc::clone(&one_row), "pod-c"), &stream).await;
    assert!(refused_one_row.contains("layout 2"), "{refused_one_row}");
    a.stop().await;
    b.stop().await;
    // A one-row fleet by beat on another stream: an instance that keeps the head apart is
    // refused, and names the layout it found.
    let other = common::unique("one-row");
    let c = Instance::start_with(
        by_beat(&url, Arc::clone(&one_row), "pod-c"),
        "pod-c",
        (&other, 2),
        tx.clone(),
        None,
    )
    .await;
    until_shares(&store, &other, &[("pod-c", 2)], Duration::from_secs(15)).await;
    let refused_apart = refused(by_beat(&url, Counting::new(apart()), "pod-d"), &other).await;
    assert!(
        refused_apart.contains("layout 1") && refused_apart.contains("keeps layout 2"),
        "{refused_apart}"
    );
    c.stop().await;
}

/// Starts pod-a on `stores.0` and pod-b on `stores.1`, both by beat, on `stream`'s shards.
async fn start_pair(
    url: &str,
    stores: (Arc<Counting>, Arc<Counting>),
    stream: &str,
    tx: &mpsc::UnboundedSender<common::instances::Handled>,
) -> (Instance, Instance) {
    let mut started = Vec::new();
    for (owner, store) in [("pod-a", stores.0), ("pod-b", stores.1)] {
        started.push(
            Instance::start_with(
                by_beat(url, store, owner),
                owner,
                (stream, SHARDS),
                tx.clone(),
                None,
            )
            .await,
        );
    }
    let b = started.pop().expect("two");
    (started.pop().expect("two"), b)
}

/// Asserts that every shard of `handled` was handled by one instance alone.
fn one_instance_a_shard(handled: &[common::instances::Handled]) {
    let mut owner_of: HashMap<&str, HashSet<&str>> = HashMap::new();
    for h in handled {
        owner_of.entry(&h.shard).or_default().insert(&h.instance);
    }
    assert!(
        owner_of.values().all(|instances| instances.len() == 1),
        "one instance a shard: {owner_of:?}"
    );
}

/// The error `broker`'s subscription to `stream` is refused with as it opens.
async fn refused(broker: KinesisBroker, stream: &str) -> String {
    let connected = broker.connect().await.unwrap();
    let opened = stream_of(stream, 2).subscribe(&connected).await;
    let err = match opened {
        Ok(_) => panic!("a subscription that was to be refused opened"),
        Err(err) => err,
    };
    assert!(matches!(err, KinesisError::Config { .. }), "{err:?}");
    ruststream::ConnectedBroker::shutdown(connected)
        .await
        .unwrap();
    err.to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_joining_a_fleet_kept_alive_by_beat_gets_its_share_from_an_idle_holder() {
    let Some(url) = common::endpoint() else {
        return;
    };
    let (_, store) = table(&url).await;
    let stream = common::unique("beat-balance");
    let shared: Arc<dyn LeaseStore> = Arc::new(store.clone());
    let (tx, mut rx) = mpsc::unbounded_channel();
    let start = |owner: &'static str| {
        let broker = by_beat(&url, Arc::clone(&shared), owner).balance_shards(true);
        let tx = tx.clone();
        let stream = stream.clone();
        async move { Instance::start_with(broker, owner, (&stream, SHARDS), tx, None).await }
    };
    let a = start("pod-a").await;
    until_shares(&store, &stream, &[("pod-a", 4)], Duration::from_secs(15)).await;
    // pod-a is idle: kept alive by its beat, it writes no row, so no renewal's answer can tell
    // it of a request.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let b = start("pod-b").await;
    let joined = until_shares(
        &store,
        &stream,
        &[("pod-a", 2), ("pod-b", 2)],
        Duration::from_secs(30),
    )
    .await;
    println!("pod-b joined an idle fleet kept alive by beat: 2 + 2 after {joined:?}");
    // The moved shards are read by their new holder, and nothing is lost.
    let handled = publish_and_handle(&url, &stream, ("j", 40), &mut rx).await;
    let readers: HashSet<&str> = handled.iter().map(|h| h.instance.as_str()).collect();
    assert_eq!(readers.len(), 2, "both instances read: {readers:?}");
    a.stop().await;
    b.stop().await;
}

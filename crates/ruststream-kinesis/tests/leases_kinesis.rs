//! Live tests of the lease protocol with several instances on one DynamoDB lease table (the
//! local stack): exclusivity, handover after a release, takeover after SIGKILL, restart under
//! the same owner id, the legacy table upgrade, resharding with two instances, a table deleted
//! mid-run, and the handover poll's steady cost (the stream's notice alone). Each prints the
//! times it measured.
#![cfg(all(feature = "dynamodb-lease", feature = "testing"))]

mod common;

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader};
use std::pin::pin;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use ruststream::{
    Broker, ConnectedBroker, IncomingMessage, OutgoingMessage, Publisher, Subscriber,
    SubscriptionSource,
};
use ruststream_kinesis::{
    DynamoLeaseStore, KinesisBroker, KinesisError, KinesisOptions, LeaseKey, LeaseStore,
    LeaseTimings,
};
use tokio::sync::mpsc;

use common::counting::{Counting, delta};
use common::instances::{
    Instance, collect_until, holders, payloads, publish_all, stream_of, table, timings,
};
use common::now_ms;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_never_handle_one_shard_at_the_same_time() {
    let Some(url) = common::endpoint() else {
        return;
    };
    let (_, store) = table(&url).await;
    let store: Arc<dyn LeaseStore> = Arc::new(store);
    let stream = common::unique("exclusive");
    let (tx, mut rx) = mpsc::unbounded_channel();
    let (a, b) = Instance::pair(&url, &store, &stream, 4, &tx).await;
    let bodies: Vec<String> = (0..120).map(|i| format!("r{i}")).collect();
    publish_all(&url, &stream, bodies.clone()).await;
    let mut handled = Vec::new();
    collect_until(&mut rx, &mut handled, Duration::from_secs(60), |h| {
        payloads(h).len() == bodies.len()
    })
    .await;
    assert_eq!(payloads(&handled), bodies.iter().cloned().collect());
    let mut owner_of: HashMap<&str, HashSet<&str>> = HashMap::new();
    for h in &handled {
        owner_of.entry(&h.shard).or_default().insert(&h.instance);
    }
    for (shard, instances) in &owner_of {
        assert_eq!(
            instances.len(),
            1,
            "shard {shard} was handled by {instances:?}"
        );
    }
    assert_eq!(handled.len(), bodies.len(), "no record was handled twice");
    a.stop().await;
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_hands_the_shards_over_after_the_checkpoint() {
    let Some(url) = common::endpoint() else {
        return;
    };
    let (_, store) = table(&url).await;
    let dynamo = store.clone();
    let store: Arc<dyn LeaseStore> = Arc::new(store);
    let stream = common::unique("graceful");
    let (tx, mut rx) = mpsc::unbounded_channel();
    // The first instance lists first and takes every shard.
    let (a, b) = Instance::pair(&url, &store, &stream, 2, &tx).await;
    let first: Vec<String> = (0..40).map(|i| format!("first-{i}")).collect();
    publish_all(&url, &stream, first.clone()).await;
    let mut handled = Vec::new();
    collect_until(&mut rx, &mut handled, Duration::from_secs(60), |h| {
        payloads(h).len() == first.len()
    })
    .await;
    assert!(
        handled.iter().all(|h| h.instance == "pod-a"),
        "pod-a holds every shard"
    );
    assert!(
        holders(&dynamo, &stream)
            .await
            .values()
            .all(|o| o.as_deref() == Some("pod-a"))
    );

    let stopping = Instant::now();
    a.stop().await;
    let stopped = stopping.elapsed();
    let second: Vec<String> = (0..40).map(|i| format!("second-{i}")).collect();
    publish_all(&url, &stream, second.clone()).await;
    let mut after = Vec::new();
    collect_until(&mut rx, &mut after, Duration::from_secs(60), |h| {
        payloads(h).len() >= second.len()
    })
    .await;
    assert!(after.iter().all(|h| h.instance == "pod-b"));
    assert_eq!(
        payloads(&after),
        second.iter().cloned().collect(),
        "pod-b handles every later record and none that pod-a acked"
    );
    let takeover = after.iter().map(|h| h.at).min().unwrap() - stopping;
    println!(
        "handover after a release: shutdown took {stopped:?}; first record handled by pod-b {takeover:?} \
         after pod-a's shutdown began (lease 3 s, listing 1 s)"
    );
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_under_the_same_owner_id_resumes_at_once() {
    let Some(url) = common::endpoint() else {
        return;
    };
    let (_, store) = table(&url).await;
    let stream = common::unique("same-owner");
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut child = spawn_child(&url, store.table(), &stream, "pod-a", false);
    wait_ready(&mut child);
    publish_all(&url, &stream, ["one".to_owned()]).await;
    let handled = read_child_until(&mut child, |h| h.contains("one"));
    assert!(handled, "the child handled the first record");
    child.kill().unwrap();
    child.wait().unwrap();
    // Its leases are still live in the table; the same name takes them back without waiting.
    let restarting = Instant::now();
    let store: Arc<dyn LeaseStore> = Arc::new(store);
    let (errors, mut said) = mpsc::unbounded_channel();
    let again = Instance::start(&url, store, "pod-a", &stream, 1, tx, Some(errors)).await;
    publish_all(&url, &stream, ["two".to_owned()]).await;
    let mut handled = Vec::new();
    collect_until(&mut rx, &mut handled, Duration::from_secs(30), |h| {
        payloads(h).contains("two")
    })
    .await;
    let resumed = handled
        .iter()
        .find(|h| h.payload == "two")
        .expect("resumed")
        .at
        - restarting;
    assert!(
        resumed < Duration::from_secs(3),
        "the restarted owner read again before its old lease (3 s) could expire: {resumed:?}"
    );
    println!("restart under the same owner id: reading again after {resumed:?}");
    // The killed run's record under the owner id is a leftover, not a second instance: the
    // restart keeps reading through several looks at the notice (one a second here).
    tokio::time::sleep(Duration::from_secs(4)).await;
    publish_all(&url, &stream, ["three".to_owned()]).await;
    collect_until(&mut rx, &mut handled, Duration::from_secs(30), |h| {
        payloads(h).contains("three")
    })
    .await;
    assert!(payloads(&handled).contains("three"), "still reading");
    while let Ok(err) = said.try_recv() {
        assert!(!err.contains("runs under owner id"), "{err}");
    }
    again.stop().await;
}

/// Kept alive by beat, a restart under the same owner id beside an earlier run that is only
/// paused (SIGSTOP) waits for that run's beat to lapse before it reads the shard, and the earlier
/// run, woken again, reads nothing: its chain of beats lapsed while it slept, and the row is the
/// restart's. (Retaking the row at once as its own, the restart read beside the earlier run: no
/// write of the earlier run on a schedule would have been refused.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_by_beat_under_the_same_owner_id_waits_for_a_paused_earlier_run() {
    let Some(url) = common::endpoint() else {
        return;
    };
    let (_, store) = table(&url).await;
    let stream = common::unique("paused-owner");
    let mut child = spawn_child(&url, store.table(), &stream, "pod-a", true);
    wait_ready(&mut child);
    publish_all(&url, &stream, ["one".to_owned()]).await;
    assert!(read_child_until(&mut child, |line| line.contains("one")));
    // The earlier run's lines from here on, read aside.
    let (lines_tx, lines) = std::sync::mpsc::channel();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = lines_tx.send(line);
        }
    });
    signal(&child, "-STOP");
    let paused = Instant::now();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let store: Arc<dyn LeaseStore> = Arc::new(store);
    let broker = common::broker_with(&url, store)
        .owner_id("pod-a")
        .lease_timings(timings())
        .keep_leases_alive_by_beat(true);
    let again = Instance::start_with(broker, "pod-a", (&stream, 1), tx, None).await;
    publish_all(&url, &stream, ["two".to_owned()]).await;
    let mut handled = Vec::new();
    collect_until(&mut rx, &mut handled, Duration::from_secs(30), |h| {
        payloads(h).contains("two")
    })
    .await;
    let taken = handled
        .iter()
        .find(|h| h.payload == "two")
        .expect("the restart read the shard")
        .at
        - paused;
    // The earlier run beat at most a second before its pause: its beat runs 3 s from there,
    // and lapses for a taker a second (the skew tolerance) later.
    assert!(
        taken >= Duration::from_secs(2),
        "the restart read the shard {taken:?} after the earlier run's pause, before its beat \
         could lapse"
    );
    println!(
        "restart by beat beside a paused run under the same owner id: reading after {taken:?}"
    );
    signal(&child, "-CONT");
    publish_all(&url, &stream, ["three".to_owned()]).await;
    collect_until(&mut rx, &mut handled, Duration::from_secs(30), |h| {
        payloads(h).contains("three")
    })
    .await;
    assert!(payloads(&handled).contains("three"), "the restart reads on");
    tokio::time::sleep(Duration::from_secs(4)).await;
    let woken: Vec<String> = lines
        .try_iter()
        .filter(|line| line.contains("HANDLED"))
        .collect();
    assert!(
        woken.is_empty(),
        "the earlier run, woken, handled {woken:?} beside the restart"
    );
    child.kill().unwrap();
    child.wait().unwrap();
    again.stop().await;
}

fn signal(child: &Child, signal: &str) {
    let sent = Command::new("kill")
        .args([signal, &child.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success(), "kill {signal}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_instance_is_taken_over_within_lease_and_listing() {
    killed_and_taken_over(false).await;
}

/// The same with every lease kept alive by its instance's beat: the killed instance's row
/// stays kept by beat (no expiry to lapse), and pod-b takes it over once pod-a's beat lapsed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_instance_kept_alive_by_beat_is_taken_over_within_lease_and_listing() {
    killed_and_taken_over(true).await;
}

async fn killed_and_taken_over(by_beat: bool) {
    let Some(url) = common::endpoint() else {
        return;
    };
    let (config, store) = table(&url).await;
    let stream = common::unique("killed");
    let mut child = spawn_child(&url, store.table(), &stream, "pod-a", by_beat);
    wait_ready(&mut child);
    let (tx, mut rx) = mpsc::unbounded_channel();
    let reader = DynamoLeaseStore::new(&config, store.table());
    let store: Arc<dyn LeaseStore> = Arc::new(store);
    let broker = common::broker_with(&url, store)
        .owner_id("pod-b")
        .lease_timings(timings())
        .keep_leases_alive_by_beat(by_beat);
    let b = Instance::start_with(broker, "pod-b", (&stream, 1), tx, None).await;
    publish_all(&url, &stream, ["before".to_owned()]).await;
    assert!(read_child_until(&mut child, |line| line.contains("before")));
    let rows = reader.rows().await.unwrap();
    let (_, row) = rows
        .iter()
        .find(|(key, _)| key.stream() == stream)
        .expect("pod-a's row");
    // Kept alive by beat, each run holds its rows under an owner of its own.
    let owner = row.owner.as_deref().unwrap_or_default();
    assert!(
        if by_beat {
            owner.starts_with("pod-a#") && owner.len() > "pod-a#".len()
        } else {
            owner == "pod-a"
        },
        "{owner}"
    );
    assert_eq!(
        row.is_kept_by_beat(now_ms()),
        by_beat,
        "a row kept alive by beat carries an expiry past any lease: {row:?}"
    );
    let killed = Instant::now();
    child.kill().unwrap();
    child.wait().unwrap();
    publish_all(&url, &stream, ["after".to_owned()]).await;
    let mut handled = Vec::new();
    collect_until(&mut rx, &mut handled, Duration::from_secs(30), |h| {
        payloads(h).contains("after")
    })
    .await;
    let taken = handled
        .iter()
        .find(|h| h.payload == "after")
        .expect("pod-b took over")
        .at
        - killed;
    // Lease 3 s + listing 1 s + the skew tolerance of 1 s, with room for a busy machine.
    assert!(taken < Duration::from_secs(12), "takeover took {taken:?}");
    println!(
        "takeover after SIGKILL{}: first record handled by pod-b {taken:?} after the kill (lease 3 s, listing 1 s)",
        if by_beat {
            ", leases kept alive by beat"
        } else {
            ""
        }
    );
    b.stop().await;
}

fn spawn_child(url: &str, table: &str, stream: &str, owner: &str, by_beat: bool) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_instance",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(
            "LEASE_CHILD",
            format!("{url}|{table}|{stream}|{owner}|{}", u8::from(by_beat)),
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

fn wait_ready(child: &mut Child) {
    assert!(
        read_child_until(child, |line| line.contains("READY")),
        "the child started"
    );
}

/// Reads the child's stdout until a line satisfies `found` (true) or it ends (false).
fn read_child_until(child: &mut Child, found: impl Fn(&str) -> bool) -> bool {
    let stdout = child.stdout.as_mut().unwrap();
    let mut reader = BufReader::new(stdout);
    let mut line = String::new();
    loop {
        line.clear();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return false;
        }
        if found(line.trim()) {
            return true;
        }
    }
}

/// The instance a killed-process test runs in a child process; idle unless `LEASE_CHILD` is set.
#[test]
fn child_instance() {
    let Ok(spec) = std::env::var("LEASE_CHILD") else {
        return;
    };
    let parts: Vec<&str> = spec.split('|').collect();
    let [url, table, stream, owner, by_beat] = parts[..] else {
        panic!("bad LEASE_CHILD {spec}")
    };
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let config = common::sdk_config(url);
        let store = Arc::new(DynamoLeaseStore::new(&config, table));
        let connected = KinesisBroker::from_config(config)
            .lease_store(store)
            .owner_id(owner)
            .lease_timings(timings())
            .keep_leases_alive_by_beat(by_beat == "1")
            .connect()
            .await
            .unwrap();
        let mut subscriber = stream_of(stream, 1).subscribe(&connected).await.unwrap();
        println!("READY");
        let mut deliveries = pin!(subscriber.stream());
        while let Some(item) = deliveries.next().await {
            if let Ok(msg) = item {
                println!("HANDLED {}", String::from_utf8_lossy(msg.payload()));
                msg.ack().await.unwrap();
            }
        }
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_legacy_table_upgrade_both_ways() {
    let Some(url) = common::endpoint() else {
        return;
    };
    let (config, store) = table(&url).await;
    let stream = common::unique("legacy");
    // The stream exists; its one shard has a bare row written by an earlier version.
    {
        let connected = common::broker(&url).connect().await.unwrap();
        drop(stream_of(&stream, 1).subscribe(&connected).await.unwrap());
        connected.shutdown().await.unwrap();
    }
    publish_all(&url, &stream, ["old".to_owned(), "new".to_owned()]).await;
    let raw = common::raw_kinesis(&url);
    let iterator = raw
        .get_shard_iterator()
        .stream_name(&stream)
        .shard_id("shardId-000000000000")
        .shard_iterator_type(aws_sdk_kinesis::types::ShardIteratorType::TrimHorizon)
        .send()
        .await
        .unwrap();
    let records = raw
        .get_records()
        .shard_iterator(iterator.shard_iterator().unwrap())
        .send()
        .await
        .unwrap();
    let old_sequence = records.records()[0].sequence_number().to_owned();
    aws_sdk_dynamodb::Client::new(&config)
        .put_item()
        .table_name(store.table())
        .item(
            "lease_key",
            aws_sdk_dynamodb::types::AttributeValue::S("shardId-000000000000".into()),
        )
        .item(
            "checkpoint",
            aws_sdk_dynamodb::types::AttributeValue::S(old_sequence),
        )
        .item(
            "lease_counter",
            aws_sdk_dynamodb::types::AttributeValue::N("1".into()),
        )
        .send()
        .await
        .unwrap();

    // Without the setting the shard stops with a lease error naming table, shard and stream.
    let (tx, _rx) = mpsc::unbounded_channel();
    let (errors_tx, mut errors) = mpsc::unbounded_channel();
    let plain: Arc<dyn LeaseStore> = Arc::new(DynamoLeaseStore::new(&config, store.table()));
    let refused = Instance::start(&url, plain, "pod-a", &stream, 1, tx, Some(errors_tx)).await;
    let err = tokio::time::timeout(Duration::from_secs(10), errors.recv())
        .await
        .unwrap()
        .unwrap();
    assert!(
        err.contains(store.table())
            && err.contains("shardId-000000000000")
            && err.contains(&stream),
        "{err}"
    );
    refused.stop().await;

    // With it, the shard resumes after the bare row's checkpoint.
    let (tx, mut rx) = mpsc::unbounded_channel();
    let upgraded: Arc<dyn LeaseStore> =
        Arc::new(DynamoLeaseStore::new(&config, store.table()).legacy_stream(stream.clone()));
    let reader = Instance::start(&url, Arc::clone(&upgraded), "pod-a", &stream, 1, tx, None).await;
    let mut handled = Vec::new();
    collect_until(&mut rx, &mut handled, Duration::from_secs(20), |h| {
        !h.is_empty()
    })
    .await;
    assert_eq!(
        handled[0].payload, "new",
        "resumed after the legacy checkpoint"
    );
    reader.stop().await;
    let row = upgraded
        .read(&LeaseKey::new(stream.clone(), "shardId-000000000000"))
        .await
        .unwrap()
        .expect("the upgraded row");
    assert!(row.checkpoint.is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_lease_table_surfaces_and_the_shard_resumes_when_it_is_back() {
    let Some(url) = common::endpoint() else {
        return;
    };
    let (config, store) = table(&url).await;
    let stream = common::unique("table-gone");
    let (tx, mut rx) = mpsc::unbounded_channel();
    let (errors_tx, mut errors) = mpsc::unbounded_channel();
    let shared: Arc<dyn LeaseStore> = Arc::new(store.clone());
    let instance = Instance::start(&url, shared, "pod-a", &stream, 1, tx, Some(errors_tx)).await;
    aws_sdk_dynamodb::Client::new(&config)
        .delete_table()
        .table_name(store.table())
        .send()
        .await
        .unwrap();
    let err = tokio::time::timeout(Duration::from_secs(15), errors.recv())
        .await
        .unwrap()
        .unwrap();
    assert!(err.contains("lease") && err.contains(&stream), "{err}");
    store.create_table().await.unwrap();
    // Once the table is back the shard is taken again at the next listing and read.
    let mut handled = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline && !payloads(&handled).contains("back") {
        publish_all(&url, &stream, ["back".to_owned()]).await;
        collect_until(&mut rx, &mut handled, Duration::from_secs(3), |h| {
            payloads(h).contains("back")
        })
        .await;
    }
    assert!(payloads(&handled).contains("back"), "the shard resumed");
    instance.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_split_and_a_merge_with_two_instances_keep_parent_first_order() {
    let Some(url) = common::endpoint() else {
        return;
    };
    let (_, store) = table(&url).await;
    let store: Arc<dyn LeaseStore> = Arc::new(store);
    let stream = common::unique("reshard-two");
    let (tx, mut rx) = mpsc::unbounded_channel();
    let (a, b) = Instance::pair(&url, &store, &stream, 1, &tx).await;
    let raw = common::raw_kinesis(&url);
    let keys = 6;
    let rounds = 30;
    let connected = common::broker(&url).connect().await.unwrap();
    let publisher = connected.publisher().await.unwrap();
    for round in 0..rounds {
        for key in 0..keys {
            publisher
                .publish(
                    OutgoingMessage::new(stream.as_str(), format!("k{key}:{round}").as_bytes()),
                    Some(&KinesisOptions::default().with_partition_key(format!("k{key}"))),
                )
                .await
                .unwrap();
        }
        if round == 8 {
            common::split_first(&raw, &stream).await;
        }
        if round == 18 {
            common::merge_first_two(&raw, &stream).await;
        }
    }
    let total = keys * rounds;
    let mut handled = Vec::new();
    collect_until(&mut rx, &mut handled, Duration::from_secs(90), |h| {
        payloads(h).len() == total
    })
    .await;
    assert_eq!(payloads(&handled).len(), total, "every record was handled");
    let mut last: HashMap<String, i64> = HashMap::new();
    let mut firsts = HashSet::new();
    for h in &handled {
        if !firsts.insert(h.payload.clone()) {
            continue;
        }
        let (key, round) = h.payload.split_once(':').unwrap();
        let round: i64 = round.parse().unwrap();
        let previous = last.insert(key.to_owned(), round).unwrap_or(-1);
        assert!(
            round > previous,
            "key {key}: round {round} first handled after round {previous}"
        );
    }
    connected.shutdown().await.unwrap();
    a.stop().await;
    b.stop().await;
}

#[allow(dead_code)]
fn _error_type_names_stream_and_shard(err: &KinesisError) -> bool {
    matches!(err, KinesisError::Lease { .. })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_reads_only_the_notice_until_a_release_bumps_it() {
    let Some(url) = common::endpoint() else {
        return;
    };
    let (config, store) = table(&url).await;
    let stream = common::unique("notice");
    // Listing every 60 s: between the first rounds and the next, only the poll can find a
    // release. A 200 ms poll, so the window below holds many polls.
    let timings = LeaseTimings::new(Duration::from_secs(3), Duration::from_secs(1))
        .unwrap()
        .with_listing_interval(Duration::from_secs(60))
        .with_handover_poll_interval(Duration::from_millis(200));
    let own_store = || Counting::new(DynamoLeaseStore::new(&config, store.table()));
    let (store_a, store_b) = (own_store(), own_store());
    let (tx, mut rx) = mpsc::unbounded_channel();
    let a = Instance::start_timed(
        &url,
        store_a.clone(),
        "pod-a",
        (&stream, 2),
        tx.clone(),
        None,
        timings,
    )
    .await;
    let b = Instance::start_timed(
        &url,
        store_b.clone(),
        "pod-b",
        (&stream, 2),
        tx.clone(),
        None,
        timings,
    )
    .await;
    // Settled: pod-b read the rows once after its first notice, and pod-a saw pod-b's beat.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (a_before, b_before) = (store_a.snapshot(), store_b.snapshot());
    let window = Duration::from_secs(5);
    tokio::time::sleep(window).await;
    let (a_after, b_after) = (store_a.snapshot(), store_b.snapshot());
    let notices = delta(&b_after, &b_before, "notice");
    println!(
        "standby over {window:?}: {notices} notice reads, {} beats, {} lists, {} reads; holder: \
         {} beats, {} renewals",
        delta(&b_after, &b_before, "beat"),
        delta(&b_after, &b_before, "list"),
        delta(&b_after, &b_before, "read"),
        delta(&a_after, &a_before, "beat"),
        delta(&a_after, &a_before, "renew"),
    );
    assert!(notices >= 10, "the standby polls the notice ({notices})");
    assert_eq!(
        delta(&b_after, &b_before, "list") + delta(&b_after, &b_before, "read"),
        0,
        "a standby whose holder beats reads no row between listings"
    );
    assert!(
        delta(&b_after, &b_before, "beat") >= 1 && delta(&a_after, &a_before, "beat") >= 1,
        "both beat: the standby waits, the holder is waited on"
    );
    // pod-a stops: its releases bump the notice, and pod-b takes both shards within a few polls,
    // long before its next listing.
    let stopping = Instant::now();
    a.stop().await;
    let bodies: Vec<String> = (0..20).map(|i| format!("after-{i}")).collect();
    publish_all(&url, &stream, bodies.clone()).await;
    let mut handled = Vec::new();
    collect_until(&mut rx, &mut handled, Duration::from_secs(30), |h| {
        payloads(h).len() == bodies.len()
    })
    .await;
    assert_eq!(payloads(&handled), bodies.iter().cloned().collect());
    assert!(handled.iter().all(|h| h.instance == "pod-b"));
    let took = stopping.elapsed();
    println!("pod-b handled every later record {took:?} after pod-a began to stop");
    assert!(
        took < Duration::from_secs(30),
        "taken through the notice, not at the listing 60 s later"
    );
    assert!(
        delta(&store_b.snapshot(), &b_after, "list") >= 1,
        "the bump had the rows read"
    );
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_applications_on_one_table_by_mistake_do_not_split_the_stream() {
    let Some(url) = common::endpoint() else {
        return;
    };
    let (config, store) = table(&url).await;
    let stream = common::unique("two-apps");
    let named = |name: &str| -> Arc<dyn LeaseStore> {
        Arc::new(DynamoLeaseStore::new(&config, store.table()).application(name))
    };
    let (tx, mut rx) = mpsc::unbounded_channel();
    let warehouse = Instance::start(
        &url,
        named("warehouse"),
        "pod-w",
        &stream,
        2,
        tx.clone(),
        None,
    )
    .await;
    // billing cannot open the stream: warehouse claimed it. The refusal names both.
    let billing = common::broker_with(&url, named("billing"))
        .owner_id("pod-b")
        .lease_timings(common::instances::timings())
        .connect()
        .await
        .unwrap();
    let refused = |answer: Result<ruststream_kinesis::KinesisSubscriber, KinesisError>| {
        let error = answer
            .expect_err("billing's subscription is refused")
            .to_string();
        assert!(
            error.contains("\"warehouse\"")
                && error.contains("\"billing\"")
                && error.contains(&stream),
            "{error}"
        );
    };
    refused(stream_of(&stream, 2).subscribe(&billing).await);
    let bodies: Vec<String> = (0..30).map(|i| format!("order-{i}")).collect();
    publish_all(&url, &stream, bodies.clone()).await;
    let mut handled = Vec::new();
    collect_until(&mut rx, &mut handled, Duration::from_secs(60), |h| {
        payloads(h).len() == bodies.len()
    })
    .await;
    assert_eq!(payloads(&handled), bodies.iter().cloned().collect());
    assert!(
        handled.iter().all(|h| h.instance == "pod-w"),
        "the application that took the shards first reads all of them"
    );
    // warehouse stops and releases its rows: billing still cannot open the stream.
    warehouse.stop().await;
    refused(stream_of(&stream, 2).subscribe(&billing).await);
    assert!(
        holders(&store, &stream).await.values().all(Option::is_none),
        "nobody took warehouse's released rows"
    );
    billing.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_parents_row_is_deleted_once_its_children_moved_on_and_never_read_again() {
    let Some(url) = common::endpoint() else {
        return;
    };
    let (_, store) = table(&url).await;
    let dynamo = store.clone();
    let store: Arc<dyn LeaseStore> = Arc::new(store);
    let stream = common::unique("tidy");
    let (tx, mut rx) = mpsc::unbounded_channel();
    let a = Instance::start(
        &url,
        Arc::clone(&store),
        "pod-a",
        &stream,
        1,
        tx.clone(),
        None,
    )
    .await;
    let raw = common::raw_kinesis(&url);
    let before: Vec<String> = (0..12).map(|i| format!("before-{i}")).collect();
    publish_all(&url, &stream, before.clone()).await;
    let parent = holders(&dynamo, &stream).await.into_keys().next().unwrap();
    common::split_first(&raw, &stream).await;
    let after: Vec<String> = (0..24).map(|i| format!("after-{i}")).collect();
    publish_all(&url, &stream, after.clone()).await;
    let mut handled = Vec::new();
    collect_until(&mut rx, &mut handled, Duration::from_secs(60), |h| {
        payloads(h).len() == before.len() + after.len()
    })
    .await;
    assert_eq!(payloads(&handled).len(), before.len() + after.len());
    // Listing every second: the grace is 30 s from the round that first saw the row deletable.
    let deadline = Instant::now() + Duration::from_secs(90);
    let parent_key = LeaseKey::new(stream.as_str(), parent.as_str());
    let mut deleted_after = None;
    let started = Instant::now();
    while Instant::now() < deadline {
        if dynamo.read(&parent_key).await.unwrap().is_none() {
            deleted_after = Some(started.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let deleted_after = deleted_after.expect("the finished parent's row is deleted");
    println!("the parent's row was deleted {deleted_after:?} after every record was handled");
    let rows = holders(&dynamo, &stream).await;
    assert_eq!(rows.len(), 2, "the children's rows stay: {rows:?}");
    // A new instance on the table (the parent still listed, its row gone) reads nothing again.
    a.stop().await;
    let b = Instance::start(
        &url,
        Arc::clone(&store),
        "pod-b",
        &stream,
        1,
        tx.clone(),
        None,
    )
    .await;
    let more: Vec<String> = (0..8).map(|i| format!("more-{i}")).collect();
    publish_all(&url, &stream, more.clone()).await;
    let mut later = Vec::new();
    collect_until(&mut rx, &mut later, Duration::from_secs(60), |h| {
        payloads(h).len() >= more.len()
    })
    .await;
    assert_eq!(
        payloads(&later),
        more.iter().cloned().collect(),
        "only the new records: the parent (whose row is gone) is not read again"
    );
    assert!(!holders(&dynamo, &stream).await.contains_key(&parent));
    b.stop().await;
}

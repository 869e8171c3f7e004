//! Live tests of balancing (`KinesisBroker::balance_shards`) on the local stack: instances that
//! join and leave one at a time converge to an even share through handoffs, and no record
//! is handled twice or lost on the way; a handoff to an instance that is gone falls back to
//! the lease's expiry. Each prints the times it measured.
#![cfg(all(feature = "dynamodb-lease", feature = "testing"))]

mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::instances::{
    Handled, Instance, collect_until, holders, publish_all, table, until_shares,
};
use ruststream_kinesis::{KinesisBroker, LeaseKey, LeaseStore, LeaseTimings};
use tokio::sync::mpsc;

/// A 3 s lease renewed every second, listing every second, a handover poll of 200 ms, and a
/// drain of 2 s.
fn balancing_timings() -> LeaseTimings {
    LeaseTimings::new(Duration::from_secs(3), Duration::from_secs(1))
        .unwrap()
        .with_listing_interval(Duration::from_secs(1))
        .with_handover_poll_interval(Duration::from_millis(200))
        .with_handoff_drain(Duration::from_secs(2))
}

fn balancing_broker(url: &str, store: &Arc<dyn LeaseStore>, owner: &str) -> KinesisBroker {
    common::broker_with(url, Arc::clone(store))
        .owner_id(owner)
        .lease_timings(balancing_timings())
        .balance_shards(true)
}

/// Publishes `count` records named `<prefix>-<n>` over about `over`, in the background.
fn publish_over(
    url: &str,
    stream: &str,
    prefix: &str,
    count: usize,
    over: Duration,
) -> tokio::task::JoinHandle<Vec<String>> {
    let (url, stream, prefix) = (url.to_owned(), stream.to_owned(), prefix.to_owned());
    tokio::spawn(async move {
        let mut sent = Vec::new();
        let batches = 20;
        for batch in 0..batches {
            let bodies: Vec<String> = (0..count / batches)
                .map(|n| format!("{prefix}-{}", batch * (count / batches) + n))
                .collect();
            publish_all(&url, &stream, bodies.clone()).await;
            sent.extend(bodies);
            tokio::time::sleep(over / batches as u32).await;
        }
        sent
    })
}

/// The payloads of `handled` handled more than once, with how often.
fn twice(handled: &[Handled]) -> Vec<(String, usize)> {
    let mut counts: HashMap<&str, usize> = HashMap::new();
    for handled in handled {
        *counts.entry(&handled.payload).or_default() += 1;
    }
    let mut twice: Vec<(String, usize)> = counts
        .into_iter()
        .filter(|(_, count)| *count > 1)
        .map(|(payload, count)| (payload.to_owned(), count))
        .collect();
    twice.sort();
    twice
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_joining_and_leaving_converge_and_the_handoffs_redeliver_nothing() {
    let Some(url) = common::endpoint() else {
        return;
    };
    let (_, store) = table(&url).await;
    let stream = common::unique("balance");
    let shared: Arc<dyn LeaseStore> = Arc::new(store.clone());
    let (tx, mut rx) = mpsc::unbounded_channel();
    let start = |owner: &'static str| {
        let broker = balancing_broker(&url, &shared, owner);
        let tx = tx.clone();
        let stream = stream.clone();
        async move { Instance::start_with(broker, owner, (&stream, 4), tx, None).await }
    };
    let a = start("pod-a").await;
    until_shares(&store, &stream, &[("pod-a", 4)], Duration::from_secs(15)).await;
    // Records flow the whole time: each move happens while shards are read.
    let publishing = publish_over(&url, &stream, "r", 400, Duration::from_secs(16));
    let mut handled = Vec::new();

    let b = start("pod-b").await;
    let joined_b = until_shares(
        &store,
        &stream,
        &[("pod-a", 2), ("pod-b", 2)],
        Duration::from_secs(20),
    )
    .await;
    let c = start("pod-c").await;
    let joined_c = until_shares(
        &store,
        &stream,
        &[("pod-a", 2), ("pod-b", 1), ("pod-c", 1)],
        Duration::from_secs(20),
    )
    .await;
    // pod-c reads its shard for a while before it leaves.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let leaving = Instant::now();
    c.stop().await;
    let left_c = until_shares(
        &store,
        &stream,
        &[("pod-a", 2), ("pod-b", 2)],
        Duration::from_secs(20),
    )
    .await
        + leaving.elapsed();
    let sent = publishing.await.unwrap();
    collect_until(&mut rx, &mut handled, Duration::from_secs(60), |handled| {
        handled.len() >= sent.len()
    })
    .await;
    // Anything handled twice would show up by now.
    collect_until(&mut rx, &mut handled, Duration::from_secs(2), |_| false).await;
    println!(
        "pod-b joined: 2 + 2 after {joined_b:?}; pod-c joined: 2 + 1 + 1 after {joined_c:?}; \
         pod-c left: 2 + 2 after {left_c:?}; {} records handled",
        handled.len()
    );
    let missing: Vec<&String> = sent
        .iter()
        .filter(|payload| !handled.iter().any(|h| &h.payload == *payload))
        .collect();
    assert!(missing.is_empty(), "lost: {missing:?}");
    assert_eq!(
        twice(&handled),
        Vec::<(String, usize)>::new(),
        "handoffs and releases redeliver nothing"
    );
    let movers: HashMap<&str, usize> = handled.iter().fold(HashMap::new(), |mut by, h| {
        *by.entry(h.instance.as_str()).or_default() += 1;
        by
    });
    assert!(
        movers.len() == 3,
        "every instance handled records of the shards moved to it: {movers:?}"
    );
    a.stop().await;
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handoff_to_an_instance_that_is_gone_falls_back_to_the_lease_expiry() {
    let Some(url) = common::endpoint() else {
        return;
    };
    let (_, store) = table(&url).await;
    let stream = common::unique("ghost");
    let shared: Arc<dyn LeaseStore> = Arc::new(store.clone());
    let (tx, mut rx) = mpsc::unbounded_channel();
    let a = Instance::start_with(
        balancing_broker(&url, &shared, "pod-a"),
        "pod-a",
        (&stream, 1),
        tx,
        None,
    )
    .await;
    until_shares(&store, &stream, &[("pod-a", 1)], Duration::from_secs(15)).await;
    publish_all(&url, &stream, (0..10).map(|n| format!("before-{n}"))).await;
    let mut handled = Vec::new();
    collect_until(&mut rx, &mut handled, Duration::from_secs(30), |h| {
        h.len() >= 10
    })
    .await;
    // An instance asks for the shard and is gone before it takes it.
    let shard = holders(&store, &stream).await.into_keys().next().unwrap();
    let key = LeaseKey::new(stream.clone(), shard);
    // The request names the counter it read; pod-a's renewals move it, so it may take a try
    // or two.
    let mut tries = 0;
    loop {
        let counter = store.read(&key).await.unwrap().unwrap().counter;
        let asked_ms = ruststream_kinesis::epoch_millis();
        if store
            .ask_handoff(&key, "pod-a", counter, "pod-gone", asked_ms)
            .await
            .unwrap()
        {
            break;
        }
        tries += 1;
        assert!(tries < 20, "no request landed between pod-a's writes");
    }
    let asked = Instant::now();
    until_shares(&store, &stream, &[("pod-gone", 1)], Duration::from_secs(10)).await;
    let handed = asked.elapsed();
    // The row was seen as pod-gone's after the handoff landed, so the time from here to
    // pod-a's take is at most the row's real time as pod-gone's (the handoff leaves a lease
    // less the skew tolerance, and a taker waits the tolerance past it: 3 s here). It is
    // measured from here, not from after the publishing, which took over a second in CI.
    let seen_gone = Instant::now();
    publish_all(&url, &stream, (0..10).map(|n| format!("after-{n}"))).await;
    // Nobody takes the row from pod-gone before its lease lapses; then pod-a takes it back.
    until_shares(&store, &stream, &[("pod-a", 1)], Duration::from_secs(15)).await;
    let back = seen_gone.elapsed();
    collect_until(&mut rx, &mut handled, Duration::from_secs(30), |h| {
        h.len() >= 20
    })
    .await;
    println!("handed to the gone instance after {handed:?}; pod-a held it again {back:?} later");
    assert!(
        back >= Duration::from_secs(2),
        "the handed row was the gone instance's for its lease: {back:?}"
    );
    for n in 0..10 {
        let payload = format!("after-{n}");
        assert!(
            handled.iter().any(|h| h.payload == payload),
            "{payload} was never handled"
        );
    }
    a.stop().await;
}

/// An asker that stops after its holder handed it a shard off, before it took the row
/// (here: it lists every 10 s with the handover poll off), hands the row back as it stops: the
/// holder reads the shard again at its next look, not after the handed lease (10 s) lapses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_asker_that_stops_hands_back_a_shard_handed_to_it() {
    let Some(url) = common::endpoint() else {
        return;
    };
    let (_, store) = table(&url).await;
    let stream = common::unique("asker-stops");
    let shared: Arc<dyn LeaseStore> = Arc::new(store.clone());
    let (tx, _rx) = mpsc::unbounded_channel();
    let lease = LeaseTimings::new(Duration::from_secs(10), Duration::from_secs(1)).unwrap();
    let holder = common::broker_with(&url, Arc::clone(&shared))
        .owner_id("pod-a")
        .lease_timings(lease.with_listing_interval(Duration::from_secs(1)))
        .balance_shards(true);
    let a = Instance::start_with(holder, "pod-a", (&stream, 2), tx.clone(), None).await;
    until_shares(&store, &stream, &[("pod-a", 2)], Duration::from_secs(15)).await;
    // The asker asks at its first round, and would take a handed row only at its next one.
    let asker = common::broker_with(&url, Arc::clone(&shared))
        .owner_id("pod-b")
        .lease_timings(
            lease
                .with_listing_interval(Duration::from_secs(10))
                .with_handover_poll_interval(Duration::ZERO),
        )
        .balance_shards(true);
    let b = Instance::start_with(asker, "pod-b", (&stream, 2), tx, None).await;
    until_shares(
        &store,
        &stream,
        &[("pod-a", 1), ("pod-b", 1)],
        Duration::from_secs(8),
    )
    .await;
    let stopping = Instant::now();
    b.stop().await;
    let back = until_shares(&store, &stream, &[("pod-a", 2)], Duration::from_secs(20)).await;
    let back = back.max(stopping.elapsed());
    println!("the asker stopped holding a handed row; pod-a held it again {back:?} later");
    assert!(
        back < Duration::from_secs(6),
        "handed back as the asker stopped, not left to its 10 s lease: {back:?}"
    );
    a.stop().await;
}

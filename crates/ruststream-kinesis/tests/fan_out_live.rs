//! Live tests of enhanced fan-out (`KinesisStream::enhanced_fan_out`) on the local stack: two
//! applications with their own consumers each read every record while two instances of one of
//! them share the shards; a handover under fan-out loses nothing; a subscription renewed across
//! its five-minute end skips nothing and repeats nothing; a consumer that must exist and does not
//! fails startup naming stream and consumer.
#![cfg(all(feature = "dynamodb-lease", feature = "testing"))]

mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::instances::{Handled, Instance, collect_until, holders, payloads, publish_all, table};
use ruststream::{Broker, SubscriptionSource};
use ruststream_kinesis::{
    KinesisBroker, KinesisError, KinesisPosition, KinesisStream, LeaseStore, LeaseTimings,
};
use tokio::sync::mpsc;

/// A 3 s lease renewed every second, listing every second, a handover poll of 200 ms and a
/// drain of 2 s.
fn timings() -> LeaseTimings {
    LeaseTimings::new(Duration::from_secs(3), Duration::from_secs(1))
        .unwrap()
        .with_listing_interval(Duration::from_secs(1))
        .with_handover_poll_interval(Duration::from_millis(200))
        .with_handoff_drain(Duration::from_secs(2))
}

fn fan_out(stream: &str, consumer: &str) -> KinesisStream {
    KinesisStream::new(stream.to_owned())
        .create_if_missing(2)
        .initial_position(KinesisPosition::TrimHorizon)
        .enhanced_fan_out(consumer.to_owned())
}

fn broker(url: &str, store: &Arc<dyn LeaseStore>, owner: &str) -> KinesisBroker {
    common::broker_with(url, Arc::clone(store))
        .owner_id(owner)
        .lease_timings(timings())
        .balance_shards(true)
}

/// An instance `owner` of the balancing service on `store`, reading `source`.
async fn pod(
    url: &str,
    store: &Arc<dyn LeaseStore>,
    owner: &str,
    source: KinesisStream,
    seen: &mpsc::UnboundedSender<Handled>,
    errors: Option<mpsc::UnboundedSender<String>>,
) -> Instance {
    Instance::reading(
        broker(url, store, owner),
        owner,
        source,
        seen.clone(),
        errors,
    )
    .await
}

/// How often each payload of `handled` was handled.
fn counts(handled: &[Handled]) -> HashMap<String, usize> {
    let mut counts = HashMap::new();
    for handled in handled {
        *counts.entry(handled.payload.clone()).or_default() += 1;
    }
    counts
}

/// Waits until the rows of `stream` are held by `owners`, one shard each.
async fn until_one_each(
    store: &ruststream_kinesis::DynamoLeaseStore,
    stream: &str,
    owners: &[&str],
) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let mut held: Vec<String> = holders(store, stream)
            .await
            .into_values()
            .flatten()
            .collect();
        held.sort();
        if held == owners {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the shards of {stream} are held by {held:?}, not one each by {owners:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_applications_each_read_every_record_and_one_shares_its_shards_between_two_instances() {
    let Some(url) = common::endpoint() else {
        return;
    };
    let stream = common::unique("fan-out");
    let (_, warehouse_table) = table(&url).await;
    let (_, billing_table) = table(&url).await;
    let warehouse_store: Arc<dyn LeaseStore> = Arc::new(warehouse_table.clone());
    let billing_store: Arc<dyn LeaseStore> = Arc::new(billing_table);
    let (warehouse_tx, mut warehouse_rx) = mpsc::unbounded_channel();
    let (billing_tx, mut billing_rx) = mpsc::unbounded_channel();
    let a = pod(
        &url,
        &warehouse_store,
        "pod-a",
        fan_out(&stream, "warehouse"),
        &warehouse_tx,
        None,
    )
    .await;
    let b = pod(
        &url,
        &warehouse_store,
        "pod-b",
        fan_out(&stream, "warehouse"),
        &warehouse_tx,
        None,
    )
    .await;
    let billing = pod(
        &url,
        &billing_store,
        "billing-1",
        fan_out(&stream, "billing"),
        &billing_tx,
        None,
    )
    .await;
    // pod-a took both shards, and pod-b asked for one: a handoff under fan-out.
    until_one_each(&warehouse_table, &stream, &["pod-a", "pod-b"]).await;
    let bodies: Vec<String> = (0..60).map(|n| format!("order-{n}")).collect();
    let started = Instant::now();
    publish_all(&url, &stream, bodies.clone()).await;
    let expected: std::collections::HashSet<String> = bodies.into_iter().collect();
    let (mut warehouse, mut billing_seen) = (Vec::new(), Vec::new());
    let done = |seen: &[Handled]| payloads(seen) == expected;
    collect_until(
        &mut warehouse_rx,
        &mut warehouse,
        Duration::from_secs(60),
        done,
    )
    .await;
    collect_until(
        &mut billing_rx,
        &mut billing_seen,
        Duration::from_secs(60),
        done,
    )
    .await;
    println!(
        "60 records read by both applications {:.2?} after the first publish",
        started.elapsed()
    );
    assert_eq!(
        payloads(&warehouse),
        expected,
        "warehouse read every record"
    );
    assert_eq!(
        payloads(&billing_seen),
        expected,
        "billing read every record"
    );
    let by_instance: std::collections::HashSet<&str> =
        warehouse.iter().map(|h| h.instance.as_str()).collect();
    assert_eq!(
        by_instance,
        ["pod-a", "pod-b"].into_iter().collect(),
        "both warehouse instances read"
    );
    // Each shard was read by one warehouse instance.
    let mut readers: HashMap<&str, std::collections::HashSet<&str>> = HashMap::new();
    for handled in &warehouse {
        readers
            .entry(handled.shard.as_str())
            .or_default()
            .insert(handled.instance.as_str());
    }
    assert!(
        readers.values().all(|instances| instances.len() == 1),
        "{readers:?}"
    );
    a.stop().await;
    b.stop().await;
    billing.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handover_under_fan_out_loses_nothing() {
    let Some(url) = common::endpoint() else {
        return;
    };
    let stream = common::unique("fan-out-handover");
    let (_, table) = table(&url).await;
    let store: Arc<dyn LeaseStore> = Arc::new(table.clone());
    let (tx, mut rx) = mpsc::unbounded_channel();
    let a = pod(
        &url,
        &store,
        "pod-a",
        fan_out(&stream, "warehouse"),
        &tx,
        None,
    )
    .await;
    let first: Vec<String> = (0..20).map(|n| format!("before-{n}")).collect();
    publish_all(&url, &stream, first.clone()).await;
    let mut seen = Vec::new();
    let want: std::collections::HashSet<String> = first.iter().cloned().collect();
    collect_until(&mut rx, &mut seen, Duration::from_secs(30), |s| {
        payloads(s) == want
    })
    .await;
    assert_eq!(payloads(&seen), want, "pod-a read the first records");
    // pod-a stops: its subscriptions close, its final checkpoints and releases land, and pod-b
    // takes both shards and subscribes from them.
    let b = pod(
        &url,
        &store,
        "pod-b",
        fan_out(&stream, "warehouse"),
        &tx,
        None,
    )
    .await;
    let stopped = Instant::now();
    a.stop().await;
    until_one_each_of(&table, &stream, "pod-b", 2).await;
    let second: Vec<String> = (0..20).map(|n| format!("after-{n}")).collect();
    publish_all(&url, &stream, second.clone()).await;
    let want_all: std::collections::HashSet<String> =
        first.iter().chain(&second).cloned().collect();
    collect_until(&mut rx, &mut seen, Duration::from_secs(60), |s| {
        payloads(s) == want_all
    })
    .await;
    println!(
        "the later records read by pod-b {:.2?} after pod-a began to stop",
        stopped.elapsed()
    );
    assert_eq!(payloads(&seen), want_all, "nothing was lost");
    for handled in seen.iter().filter(|h| h.payload.starts_with("after-")) {
        assert_eq!(handled.instance, "pod-b", "{handled:?}");
    }
    let repeated: Vec<_> = counts(&seen).into_iter().filter(|(_, n)| *n > 1).collect();
    assert!(
        repeated.is_empty(),
        "a handover after a release repeats nothing: {repeated:?}"
    );
    b.stop().await;
}

async fn until_one_each_of(
    store: &ruststream_kinesis::DynamoLeaseStore,
    stream: &str,
    owner: &str,
    shards: usize,
) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let held = holders(store, stream).await;
        let mine = held.values().flatten().filter(|o| *o == owner).count();
        if mine == shards {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{owner} holds {mine} shards of {stream}, not {shards}: {held:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_that_must_exist_and_does_not_fails_startup_naming_stream_and_consumer() {
    let Some(url) = common::endpoint() else {
        return;
    };
    let stream = common::unique("fan-out-missing");
    let connected = common::broker(&url).connect().await.unwrap();
    let source = KinesisStream::new(stream.clone())
        .create_if_missing(1)
        .enhanced_fan_out("nobody-registered-me")
        .consumer_must_exist();
    let err = match source.subscribe(&connected).await {
        Err(err) => err,
        Ok(_) => panic!("a consumer that must exist and does not fails startup"),
    };
    match &err {
        KinesisError::ConsumerNotFound {
            stream: named,
            consumer,
        } => {
            assert_eq!(named, &stream);
            assert_eq!(consumer, "nobody-registered-me");
        }
        other => panic!("not ConsumerNotFound: {other}"),
    }
    let message = err.to_string();
    assert!(
        message.contains("register-stream-consumer") && message.contains(&stream),
        "{message}"
    );
    // Allowed to register, the same subscription starts.
    let registering = KinesisStream::new(stream.clone()).enhanced_fan_out("nobody-registered-me");
    let subscriber = registering.subscribe(&connected).await.unwrap();
    drop(subscriber);
    ruststream::ConnectedBroker::shutdown(connected)
        .await
        .unwrap();
}

/// The local engine names no child shards: the parent's end is confirmed through the listing and
/// `GetRecords`, it is checkpointed `SHARD_END`, and its children are read after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_split_under_fan_out_finishes_the_parent_and_reads_the_children() {
    let Some(url) = common::endpoint() else {
        return;
    };
    let stream = common::unique("fan-out-split");
    let (_, table) = table(&url).await;
    let store: Arc<dyn LeaseStore> = Arc::new(table.clone());
    let (tx, mut rx) = mpsc::unbounded_channel();
    let reader = pod(
        &url,
        &store,
        "pod-a",
        fan_out(&stream, "splitter").create_if_missing(1),
        &tx,
        None,
    )
    .await;
    let before: Vec<String> = (0..10).map(|n| format!("parent-{n}")).collect();
    publish_all(&url, &stream, before.clone()).await;
    let mut seen = Vec::new();
    let want: std::collections::HashSet<String> = before.iter().cloned().collect();
    collect_until(&mut rx, &mut seen, Duration::from_secs(30), |s| {
        payloads(s) == want
    })
    .await;
    assert_eq!(payloads(&seen), want, "the parent's records");
    let raw = common::raw_kinesis(&url);
    common::split_first(&raw, &stream).await;
    let split = Instant::now();
    let after: Vec<String> = (0..20).map(|n| format!("child-{n}")).collect();
    publish_all(&url, &stream, after.clone()).await;
    let want_all: std::collections::HashSet<String> =
        before.iter().chain(&after).cloned().collect();
    collect_until(&mut rx, &mut seen, Duration::from_secs(60), |s| {
        payloads(s) == want_all
    })
    .await;
    println!(
        "the children's records read {:.2?} after the split",
        split.elapsed()
    );
    assert_eq!(
        payloads(&seen),
        want_all,
        "every record, the children's too"
    );
    let children: std::collections::HashSet<&str> = seen
        .iter()
        .filter(|h| h.payload.starts_with("child-"))
        .map(|h| h.shard.as_str())
        .collect();
    assert!(
        !children.contains("shardId-000000000000") && !children.is_empty(),
        "the children's records came from the children: {children:?}"
    );
    let rows = table.rows().await.unwrap();
    let parent = rows
        .iter()
        .find(|(key, _)| key.stream() == stream && key.shard() == "shardId-000000000000")
        .map(|(_, row)| row.checkpoint.clone());
    assert_eq!(
        parent,
        Some(Some(ruststream_kinesis::SHARD_END.to_owned())),
        "the parent is finished"
    );
    reader.stop().await;
}

/// A stream with as many consumers as it may refuses one more: the subscription fails startup
/// with an error naming the stream and the consumer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_consumer_past_the_limit_fails_startup_naming_stream_and_consumer() {
    let Some(url) = common::endpoint() else {
        return;
    };
    let stream = common::unique("fan-out-limit");
    let connected = common::broker(&url).connect().await.unwrap();
    let raw = common::raw_kinesis(&url);
    // The stream, and its ARN.
    let first = KinesisStream::new(stream.clone())
        .create_if_missing(1)
        .enhanced_fan_out("consumer-0");
    drop(first.subscribe(&connected).await.unwrap());
    let arn = common::stream_arn(&raw, &stream).await;
    common::fill_consumers(&raw, &arn).await;
    let err = match KinesisStream::new(stream.clone())
        .enhanced_fan_out("one-too-many")
        .subscribe(&connected)
        .await
    {
        Err(err) => err,
        Ok(_) => panic!("a consumer past the limit fails startup"),
    };
    match &err {
        KinesisError::ConsumerLimit {
            stream: named,
            consumer,
            ..
        } => {
            assert_eq!(named, &stream);
            assert_eq!(consumer, "one-too-many");
        }
        other => panic!("not ConsumerLimit: {other}"),
    }
    assert!(err.to_string().contains("list-stream-consumers"), "{err}");
    ruststream::ConnectedBroker::shutdown(connected)
        .await
        .unwrap();
}

/// A shard with nothing new for longer than the SDK's stalled-stream grace is not cut: the
/// subscription reports nothing, and the next record is read at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_shard_keeps_its_subscription() {
    let Some(url) = common::endpoint() else {
        return;
    };
    let stream = common::unique("fan-out-idle");
    let (_, table) = table(&url).await;
    let store: Arc<dyn LeaseStore> = Arc::new(table);
    let (tx, mut rx) = mpsc::unbounded_channel();
    let (errors_tx, mut errors_rx) = mpsc::unbounded_channel();
    let reader = pod(
        &url,
        &store,
        "pod-a",
        fan_out(&stream, "idle").create_if_missing(1),
        &tx,
        Some(errors_tx),
    )
    .await;
    tokio::time::sleep(Duration::from_secs(25)).await;
    let published = Instant::now();
    publish_all(&url, &stream, ["after-the-quiet".to_owned()]).await;
    let mut seen = Vec::new();
    collect_until(&mut rx, &mut seen, Duration::from_secs(10), |s| {
        !s.is_empty()
    })
    .await;
    println!("read {:.2?} after 25 s of quiet", published.elapsed());
    assert_eq!(
        payloads(&seen),
        ["after-the-quiet".to_owned()].into_iter().collect()
    );
    reader.stop().await;
    let mut reported = Vec::new();
    while let Ok(err) = errors_rx.try_recv() {
        reported.push(err);
    }
    assert!(reported.is_empty(), "nothing reported: {reported:?}");
}

/// The service answers `ResourceNotFoundException` for a consumer it does not know as for a
/// shard that left the stream: an instance that subscribes through a consumer deregistered
/// since it started reports it, naming stream, shard and consumer, and does not give the shard
/// up as gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deregistered_consumer_is_reported_and_no_shard_is_given_up() {
    let Some(url) = common::endpoint() else {
        return;
    };
    let stream = common::unique("fan-out-deregistered");
    let (_, table) = table(&url).await;
    let store: Arc<dyn LeaseStore> = Arc::new(table.clone());
    let (tx, mut rx) = mpsc::unbounded_channel();
    let (errors_tx, mut errors_rx) = mpsc::unbounded_channel();
    // Without balancing pod-a keeps the shard and pod-b waits, both with the consumer's ARN.
    let unbalanced = |owner: &str| {
        common::broker_with(&url, Arc::clone(&store))
            .owner_id(owner)
            .lease_timings(timings())
    };
    let a = Instance::reading(
        unbalanced("pod-a"),
        "pod-a",
        fan_out(&stream, "short-lived").create_if_missing(1),
        tx.clone(),
        None,
    )
    .await;
    let b = Instance::reading(
        unbalanced("pod-b"),
        "pod-b",
        fan_out(&stream, "short-lived").create_if_missing(1),
        tx,
        Some(errors_tx),
    )
    .await;
    publish_all(&url, &stream, ["first".to_owned()]).await;
    let mut seen = Vec::new();
    collect_until(&mut rx, &mut seen, Duration::from_secs(30), |s| {
        !s.is_empty()
    })
    .await;
    assert_eq!(seen.len(), 1, "read through the consumer");
    let raw = common::raw_kinesis(&url);
    let arn = common::stream_arn(&raw, &stream).await;
    raw.deregister_stream_consumer()
        .stream_arn(arn)
        .consumer_name("short-lived")
        .send()
        .await
        .unwrap();
    // pod-b takes the shard pod-a hands back, and subscribes through the ARN it knows.
    a.stop().await;
    let deadline = Instant::now() + Duration::from_secs(30);
    let reported = loop {
        match tokio::time::timeout_at(deadline.into(), errors_rx.recv()).await {
            Ok(Some(err)) if err.contains("does not know the consumer") => break err,
            Ok(Some(other)) => eprintln!("reported: {other}"),
            _ => panic!("no error said the consumer is unknown within 30 s"),
        }
    };
    assert!(
        reported.contains(&stream)
            && reported.contains("shardId-000000000000")
            && reported.contains("short-lived"),
        "{reported}"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    let held = holders(&table, &stream).await;
    assert_eq!(
        held.get("shardId-000000000000"),
        Some(&Some("pod-b".to_owned())),
        "the shard is not given up as gone"
    );
    b.stop().await;
}

/// The local engine ends a subscription after five minutes, as AWS does: records published
/// every two seconds for five and a half minutes are each handled exactly once, across the
/// renewal the log shows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscription_renewed_across_its_five_minute_end_skips_and_repeats_nothing() {
    let Some(url) = common::endpoint() else {
        return;
    };
    let captured = common::captured::Captured::default();
    tracing_subscriber::fmt()
        .with_writer(captured.clone())
        .with_max_level(tracing::Level::INFO)
        .with_ansi(false)
        .try_init()
        .expect("the only subscriber of this test binary");
    let stream = common::unique("fan-out-renewal");
    let (_, table) = table(&url).await;
    let store: Arc<dyn LeaseStore> = Arc::new(table);
    let (tx, mut rx) = mpsc::unbounded_channel();
    let reader = pod(
        &url,
        &store,
        "pod-a",
        fan_out(&stream, "renewal").create_if_missing(1),
        &tx,
        None,
    )
    .await;
    let started = Instant::now();
    let publishing = {
        let (url, stream) = (url.clone(), stream.clone());
        tokio::spawn(async move {
            let mut sent = Vec::new();
            let mut n = 0;
            while started.elapsed() < Duration::from_secs(330) {
                let body = format!("tick-{n}");
                publish_all(&url, &stream, [body.clone()]).await;
                sent.push(body);
                n += 1;
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
            sent
        })
    };
    let mut seen = Vec::new();
    collect_until(&mut rx, &mut seen, Duration::from_secs(335), |_| false).await;
    let sent = publishing.await.unwrap();
    let want: std::collections::HashSet<String> = sent.iter().cloned().collect();
    collect_until(&mut rx, &mut seen, Duration::from_secs(30), |s| {
        payloads(s) == want
    })
    .await;
    reader.stop().await;
    let renewals: Vec<String> = captured
        .lines()
        .into_iter()
        .filter(|line| line.contains(&stream) && line.contains("subscribing again"))
        .collect();
    println!(
        "{} records over {:.0?}; renewals: {renewals:#?}",
        sent.len(),
        started.elapsed()
    );
    assert!(
        !renewals.is_empty(),
        "the subscription was renewed at least once"
    );
    assert_eq!(payloads(&seen), want, "no record skipped");
    let repeated: Vec<_> = counts(&seen).into_iter().filter(|(_, n)| *n > 1).collect();
    assert!(repeated.is_empty(), "no record repeated: {repeated:?}");
}

/// A registration refused because too many consumers are being created at once (AWS allows 5)
/// is asked again, not reported as the stream's limit: the subscription starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registration_refused_for_now_is_asked_again_and_the_subscription_starts() {
    let Some(url) = common::endpoint() else {
        return;
    };
    let faults = common::faults::Faults::new(&url);
    // The SDK retries a LimitExceededException itself, three attempts in all: three refusals
    // reach the subscription.
    let refusal = faults.add(
        common::faults::Rule::on(
            common::faults::Service::Kinesis,
            "RegisterStreamConsumer",
            common::faults::Action::Status {
                status: 400,
                error_type: "LimitExceededException",
                message: "Only 5 consumers can be created at the same time",
            },
        )
        .times(3),
    );
    let connected = KinesisBroker::from_config(faults.sdk_config())
        .connect()
        .await
        .unwrap();
    let stream = common::unique("fan-out-not-now");
    let subscriber = KinesisStream::new(stream.clone())
        .create_if_missing(1)
        .enhanced_fan_out("patient")
        .subscribe(&connected)
        .await
        .expect("the registration is asked again until it is taken");
    assert_eq!(faults.hits(refusal), 3, "every refusal was met");
    drop(subscriber);
    ruststream::ConnectedBroker::shutdown(connected)
        .await
        .unwrap();
}

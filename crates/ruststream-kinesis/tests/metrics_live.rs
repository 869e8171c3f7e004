//! The broker's metrics on a running service (the local stack): two instances, each counting
//! into a Prometheus registry of its own, share a stream through one DynamoDB lease table. The
//! test scrapes both registries as the run goes: the first instance reads a backlog, so its lag
//! is above zero and falls to 0 once it has caught up; its leases move to the second instance
//! across a handover after a release; and every series the Operating page lists is there.
#![cfg(all(feature = "dynamodb-lease", feature = "testing", feature = "metrics"))]

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use prometheus::{Encoder, Registry, TextEncoder};
use ruststream::{Broker, ConnectedBroker, OutgoingMessage, Publisher};
use ruststream_kinesis::{KinesisMetrics, KinesisOptions, KinesisPosition, LeaseStore};
use tokio::sync::mpsc;

use common::instances::{Instance, collect_until, payloads, stream_of, table, timings};

/// The registry as a `/metrics` route renders it.
fn scrape(registry: &Registry) -> String {
    let mut text = Vec::new();
    TextEncoder::new()
        .encode(&registry.gather(), &mut text)
        .unwrap();
    String::from_utf8(text).unwrap()
}

/// The samples of series `name` whose labels include each of `labels` (`key="value"`), summed;
/// `None` when there is none.
fn sample(text: &str, name: &str, labels: &[&str]) -> Option<f64> {
    let mut found = None;
    for line in text.lines().filter(|line| !line.starts_with('#')) {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let (series_name, series_labels) = series.split_once('{').unwrap_or((series, ""));
        if series_name == name && labels.iter().all(|label| series_labels.contains(label)) {
            *found.get_or_insert(0.0) += value.parse::<f64>().unwrap();
        }
    }
    found
}

/// Waits until `holds` is true of a scrape of `registry`; the last scrape.
async fn until(registry: &Registry, what: &str, holds: impl Fn(&str) -> bool) -> String {
    let started = Instant::now();
    loop {
        let text = scrape(registry);
        if holds(&text) {
            return text;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{what} did not happen within 30 s; the last scrape:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scrape_shows_lag_falling_to_zero_and_leases_moving_across_a_handover() {
    let Some(url) = common::endpoint() else {
        return;
    };
    let (_, store) = table(&url).await;
    let store: Arc<dyn LeaseStore> = Arc::new(store);
    let stream = common::unique("metrics");
    let raw = common::raw_kinesis(&url);
    common::create_stream(&raw, &stream, 2).await;
    let (registry_a, registry_b) = (Registry::new(), Registry::new());
    let (metrics_a, metrics_b) = (
        KinesisMetrics::register(&registry_a).unwrap(),
        KinesisMetrics::register(&registry_b).unwrap(),
    );
    let broker = |owner: &str, metrics: &KinesisMetrics| {
        common::broker_with(&url, Arc::clone(&store))
            .owner_id(owner)
            .lease_timings(timings())
            .metrics(metrics.clone())
    };

    // A backlog, published one record at a time over a second or more, through pod-a's broker.
    let backlog: Vec<String> = (0..200).map(|i| format!("backlog-{i}")).collect();
    {
        let connected = broker("pod-a", &metrics_a).connect().await.unwrap();
        let publisher = connected.publisher().await.unwrap();
        for (i, body) in backlog.iter().enumerate() {
            let key = KinesisOptions::default().with_partition_key(format!("key-{}", i % 16));
            publisher
                .publish(OutgoingMessage::new(&stream, body.as_bytes()), Some(&key))
                .await
                .unwrap();
        }
        connected.shutdown().await.unwrap();
    }
    let published = scrape(&registry_a);
    assert_eq!(
        sample(
            &published,
            "messaging_client_sent_messages_total",
            &[r#"error_type="""#]
        ),
        Some(200.0),
        "{published}"
    );

    // pod-a reads the backlog ten records a call: the first answers are behind the newest record.
    let (tx, mut rx) = mpsc::unbounded_channel();
    let a = Instance::reading(
        broker("pod-a", &metrics_a),
        "pod-a",
        stream_of(&stream, 2)
            .batch_size(10)
            .initial_position(KinesisPosition::TrimHorizon),
        tx.clone(),
        None,
    )
    .await;
    let mut handled = Vec::new();
    let mut most_behind = 0.0_f64;
    let started = Instant::now();
    while payloads(&handled).len() < backlog.len() {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "pod-a handled {} of the backlog",
            payloads(&handled).len()
        );
        collect_until(&mut rx, &mut handled, Duration::from_millis(20), |_| false).await;
        if let Some(behind) = sample(
            &scrape(&registry_a),
            "aws_kinesis_shard_behind_seconds",
            &[],
        ) {
            most_behind = most_behind.max(behind);
        }
    }
    assert!(
        most_behind > 0.0,
        "while reading the backlog, a shard's lag was above zero"
    );
    let caught_up = until(
        &registry_a,
        "pod-a's lag and checkpoint lag falling to 0 on both shards",
        |text| {
            text.lines()
                .filter(|line| line.starts_with("aws_kinesis_shard_behind_seconds{"))
                .count()
                == 2
                && sample(text, "aws_kinesis_shard_behind_seconds", &[]) == Some(0.0)
                // Every delivery acknowledged, and its checkpoint written.
                && sample(text, "aws_kinesis_checkpoint_lag_records", &[]) == Some(0.0)
        },
    )
    .await;
    println!("pod-a at most {most_behind} s behind while reading the backlog");
    for (series, labels) in [
        ("aws_kinesis_records_read_total", vec![]),
        ("aws_kinesis_read_bytes_total", vec![]),
        ("aws_kinesis_leases_held", vec![r#"owner="pod-a""#]),
        (
            "aws_kinesis_lease_events_total",
            vec![r#"event="taken""#, r#"owner="pod-a""#],
        ),
        (
            "messaging_client_operation_duration_seconds_count",
            vec![r#"operation="lease_table.acquire""#, r#"error_type="""#],
        ),
        (
            "messaging_client_operation_duration_seconds_count",
            vec![r#"operation="lease_table.checkpoint""#, r#"error_type="""#],
        ),
        // The Kinesis calls, timed by the SDK client's interceptor.
        (
            "messaging_client_operation_duration_seconds_count",
            vec![r#"operation="GetRecords""#, r#"error_type="""#],
        ),
        (
            "messaging_client_operation_duration_seconds_count",
            vec![r#"operation="GetShardIterator""#, r#"error_type="""#],
        ),
        (
            "messaging_client_operation_duration_seconds_count",
            vec![r#"operation="ListShards""#, r#"error_type="""#],
        ),
        (
            "messaging_client_operation_duration_seconds_count",
            vec![r#"operation="PutRecords""#, r#"error_type="""#],
        ),
    ] {
        assert!(
            sample(&caught_up, series, &labels).is_some_and(|value| value > 0.0),
            "{series}{labels:?} is missing or 0:\n{caught_up}"
        );
    }
    assert_eq!(
        sample(&caught_up, "aws_kinesis_records_read_total", &[]),
        Some(200.0),
        "each record read once"
    );
    assert_eq!(
        sample(&caught_up, "messaging_client_consumed_messages_total", &[]),
        Some(200.0),
        "each message consumed once (no KPL aggregates: one message a record)"
    );
    // Every series the Operating page lists shows in the scrape of a service that read and
    // published, its fault counters at 0.
    let listed: Vec<String> = include_str!("../../../docs/src/operating.md")
        .lines()
        .filter_map(|line| line.strip_prefix("| `"))
        .filter_map(|rest| rest.split_once('`'))
        .map(|(name, _)| name.to_owned())
        .filter(|name| name.starts_with("aws_kinesis_") || name.starts_with("messaging_client_"))
        .collect();
    assert!(listed.len() >= 15, "{listed:?}");
    for name in &listed {
        assert!(
            caught_up.contains(&format!("# TYPE {name} ")),
            "{name} is not in the scrape:\n{caught_up}"
        );
    }
    assert_eq!(
        sample(&caught_up, "aws_kinesis_read_retries_total", &[]),
        Some(0.0),
        "a healthy run retries no read"
    );
    assert_eq!(
        sample(&caught_up, "aws_kinesis_leases_held", &[r#"owner="pod-a""#]),
        Some(2.0)
    );

    // A handover after a release: pod-b stands by, pod-a stops; the leases move across.
    let b = Instance::reading(
        broker("pod-b", &metrics_b),
        "pod-b",
        stream_of(&stream, 2),
        tx.clone(),
        None,
    )
    .await;
    let standing_by = scrape(&registry_b);
    assert_eq!(
        sample(&standing_by, "aws_kinesis_leases_held", &[]).unwrap_or(0.0),
        0.0,
        "pod-b holds nothing while pod-a reads:\n{standing_by}"
    );
    a.stop().await;
    let stopped = scrape(&registry_a);
    assert_eq!(
        sample(&stopped, "aws_kinesis_leases_held", &[r#"owner="pod-a""#]),
        Some(0.0),
        "{stopped}"
    );
    assert_eq!(
        sample(
            &stopped,
            "aws_kinesis_lease_events_total",
            &[r#"event="released""#, r#"owner="pod-a""#]
        ),
        Some(2.0),
        "{stopped}"
    );
    assert_eq!(
        sample(&stopped, "aws_kinesis_shard_behind_seconds", &[]),
        None,
        "a stopped instance tells no shard's lag:\n{stopped}"
    );
    let taken_over = until(&registry_b, "pod-b holding both leases", |text| {
        sample(text, "aws_kinesis_leases_held", &[r#"owner="pod-b""#]) == Some(2.0)
    })
    .await;
    assert_eq!(
        sample(
            &taken_over,
            "aws_kinesis_lease_events_total",
            &[r#"event="taken""#, r#"owner="pod-b""#]
        ),
        Some(2.0),
        "{taken_over}"
    );
    // pod-b reads on from pod-a's checkpoints: what is published now, and nothing before.
    let after: Vec<String> = (0..20).map(|i| format!("after-{i}")).collect();
    common::instances::publish_all(&url, &stream, after.clone()).await;
    let mut later = Vec::new();
    collect_until(&mut rx, &mut later, Duration::from_secs(60), |h| {
        payloads(h).len() >= after.len()
    })
    .await;
    let read_by_b = until(&registry_b, "pod-b counting what it read", |text| {
        sample(text, "aws_kinesis_records_read_total", &[]) == Some(20.0)
            && sample(text, "aws_kinesis_shard_behind_seconds", &[]) == Some(0.0)
    })
    .await;
    println!("{read_by_b}");
    b.stop().await;
}

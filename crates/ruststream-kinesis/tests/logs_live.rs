//! The log a healthy run leaves (the local stack): two instances on one DynamoDB lease table
//! share a stream, hold it for a few seconds of renewals and polls, then the first stops and
//! releases its leases and the second takes its shards over. Every lease
//! event shows once at INFO naming stream, shard and owner (a reader's events inside its
//! `shard_reader` span), and nothing is logged at WARN or above. The test owns its binary: it installs the process's global `tracing` subscriber.
#![cfg(all(feature = "dynamodb-lease", feature = "testing"))]

mod common;

use std::sync::Arc;
use std::time::Duration;

use ruststream_kinesis::LeaseStore;
use tokio::sync::mpsc;

use common::captured::Captured;
use common::instances::{Instance, collect_until, payloads, publish_all, table};

/// The lines with `message` that name `stream`, `shard` and `owner`.
fn events<'a>(
    lines: &'a [String],
    message: &str,
    stream: &str,
    shard: &str,
    owner: &str,
) -> Vec<&'a String> {
    lines
        .iter()
        .filter(|line| {
            line.contains(message)
                && line.contains(&format!("stream={stream}"))
                && line.contains(&format!("shard={shard}"))
                && line.contains(&format!("owner={owner}"))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_healthy_run_logs_each_lease_event_once_at_info_and_nothing_at_warn() {
    let Some(url) = common::endpoint() else {
        return;
    };
    let captured = Captured::default();
    tracing_subscriber::fmt()
        .with_writer(captured.clone())
        .with_ansi(false)
        .with_env_filter(tracing_subscriber::EnvFilter::new("info"))
        .init();

    let (_, store) = table(&url).await;
    let store: Arc<dyn LeaseStore> = Arc::new(store);
    let stream = common::unique("logs");
    let (tx, mut rx) = mpsc::unbounded_channel();
    // pod-a lists first and takes both shards; pod-b stands by.
    let (a, b) = Instance::pair(&url, &store, &stream, 2, &tx).await;
    let first: Vec<String> = (0..20).map(|i| format!("first-{i}")).collect();
    publish_all(&url, &stream, first.clone()).await;
    let mut handled = Vec::new();
    collect_until(&mut rx, &mut handled, Duration::from_secs(60), |h| {
        payloads(h).len() == first.len()
    })
    .await;
    // The steady state: renewals every second, listing rounds, pod-b's handover polls.
    tokio::time::sleep(Duration::from_secs(5)).await;
    // A stop: pod-a writes its final checkpoints and releases; pod-b takes over.
    a.stop().await;
    let second: Vec<String> = (0..20).map(|i| format!("second-{i}")).collect();
    publish_all(&url, &stream, second.clone()).await;
    let mut after = Vec::new();
    collect_until(&mut rx, &mut after, Duration::from_secs(60), |h| {
        payloads(h).len() >= second.len()
    })
    .await;
    assert!(
        after.iter().all(|h| h.instance == "pod-b"),
        "pod-b took over"
    );
    b.stop().await;

    let lines = captured.lines();
    let shown = lines.join("\n");
    for line in lines.iter().filter(|line| line.contains("lease")) {
        println!("{line}");
    }
    let loud: Vec<&String> = lines
        .iter()
        .filter(|line| line.contains(" WARN ") || line.contains(" ERROR "))
        .collect();
    assert!(
        loud.is_empty(),
        "a healthy run logged at WARN or above:\n{}",
        loud.iter()
            .map(|line| line.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    );
    let shards: Vec<String> = lines
        .iter()
        .filter(|line| line.contains("lease taken") && line.contains("owner=pod-a"))
        .filter_map(|line| {
            line.split_whitespace()
                .find_map(|field| field.strip_prefix("shard="))
                .map(str::to_owned)
        })
        .collect();
    assert_eq!(shards.len(), 2, "pod-a took both shards:\n{shown}");
    for shard in &shards {
        for (message, owner) in [
            ("lease taken", "pod-a"),
            ("lease released", "pod-a"),
            ("lease taken", "pod-b"),
            ("lease released", "pod-b"),
        ] {
            let found = events(&lines, message, &stream, shard, owner);
            assert_eq!(
                found.len(),
                1,
                "{message:?} of shard {shard} by {owner} once at INFO, found {found:?}; the log:\n{shown}"
            );
            assert!(found[0].contains(" INFO "), "{}", found[0]);
            // The reader's own events carry its span.
            if message == "lease released" {
                assert!(
                    found[0].contains(&format!(
                        "shard_reader{{stream={stream} shard={shard} owner={owner}}}"
                    )),
                    "the release is logged inside the reader's span: {}",
                    found[0]
                );
            }
        }
    }
}

use std::time::Duration;

use prometheus::Registry;

use super::{KinesisMetrics, scrape};
use crate::telemetry::{CallOutcome, LeaseEvent, Meters, ReadRetry};

fn meters() -> (Registry, Meters) {
    let registry = Registry::new();
    let metrics = KinesisMetrics::register(&registry).unwrap();
    (registry, Meters::default().with_prometheus(metrics))
}

#[test]
fn a_read_counts_records_and_bytes_and_sets_the_shards_lag() {
    let (registry, meters) = meters();
    meters.read("orders", "shardId-0", 3, 120, Some(4_000));
    meters.read("orders", "shardId-0", 2, 80, Some(0));
    let text = scrape(&registry);
    assert!(
        text.contains(r#"kinesis_records_read_total{shard="shardId-0",stream="orders"} 5"#),
        "{text}"
    );
    assert!(
        text.contains(r#"kinesis_bytes_read_total{shard="shardId-0",stream="orders"} 200"#),
        "{text}"
    );
    assert!(
        text.contains(r#"kinesis_millis_behind_latest{shard="shardId-0",stream="orders"} 0"#),
        "{text}"
    );
}

#[test]
fn a_lease_taken_is_held_until_its_reader_ends_and_its_lag_goes_with_it() {
    let (registry, meters) = meters();
    meters.lease_event("orders", "pod-a", LeaseEvent::Taken);
    meters.lease_event("orders", "pod-a", LeaseEvent::Taken);
    meters.read("orders", "shardId-1", 1, 1, Some(250));
    meters.checkpoint_lag("orders", "shardId-1", 12);
    let text = scrape(&registry);
    assert!(
        text.contains(r#"kinesis_checkpoint_lag_records{shard="shardId-1",stream="orders"} 12"#),
        "{text}"
    );
    assert!(
        text.contains(r#"kinesis_leases_held{owner="pod-a",stream="orders"} 2"#),
        "{text}"
    );
    meters.lease_event("orders", "pod-a", LeaseEvent::HandedOver);
    meters.reader_ended("orders", "shardId-1", "pod-a");
    let text = scrape(&registry);
    assert!(
        text.contains(r#"kinesis_leases_held{owner="pod-a",stream="orders"} 1"#),
        "{text}"
    );
    assert!(
        text.contains(
            r#"kinesis_lease_events_total{event="handed_over",owner="pod-a",stream="orders"} 1"#
        ),
        "{text}"
    );
    assert!(
        !text.contains(r#"kinesis_millis_behind_latest{shard="shardId-1""#),
        "a shard read elsewhere now has no lag of ours: {text}"
    );
    assert!(!text.contains("kinesis_checkpoint_lag_records{"), "{text}");
}

/// A reader's counters show at 0 from its start: an alert on `rate()` sees them before the
/// first fault, and a look at the scrape finds every series.
#[test]
fn a_readers_fault_counters_show_at_zero_from_its_start() {
    let (registry, meters) = meters();
    meters.reader_started("orders", "shardId-0");
    let text = scrape(&registry);
    for series in [
        r#"kinesis_read_retries_total{cause="throttled",shard="shardId-0",stream="orders"} 0"#,
        r#"kinesis_read_retries_total{cause="failed",shard="shardId-0",stream="orders"} 0"#,
        r#"kinesis_iterator_resets_total{shard="shardId-0",stream="orders"} 0"#,
        r#"kinesis_decode_failures_total{shard="shardId-0",stream="orders"} 0"#,
        r#"kinesis_checkpoint_lag_records{shard="shardId-0",stream="orders"} 0"#,
    ] {
        assert!(text.contains(series), "{series} missing: {text}");
    }
}

#[test]
fn store_calls_are_timed_by_call_and_outcome() {
    let (registry, meters) = meters();
    meters.store_call("renew", CallOutcome::Ok, Duration::from_millis(4));
    meters.store_call("renew", CallOutcome::Refused, Duration::from_millis(3));
    meters.store_call("checkpoint", CallOutcome::TimedOut, Duration::from_secs(3));
    let text = scrape(&registry);
    for series in [
        r#"kinesis_lease_table_call_duration_seconds_count{call="renew",outcome="ok"} 1"#,
        r#"kinesis_lease_table_call_duration_seconds_count{call="renew",outcome="refused"} 1"#,
        r#"kinesis_lease_table_call_duration_seconds_count{call="checkpoint",outcome="timed_out"} 1"#,
        r#"kinesis_lease_table_call_duration_seconds_bucket{call="renew",outcome="ok",le="0.005"} 1"#,
    ] {
        assert!(text.contains(series), "{series} missing: {text}");
    }
}

#[test]
fn publishes_retries_and_read_faults_are_counted_by_kind() {
    let (registry, meters) = meters();
    meters.published("orders", 5, 0);
    meters.published("orders", 2, 2);
    meters.publish_retry("orders", 3);
    meters.read_retry("orders", "shardId-0", ReadRetry::Throttled);
    meters.iterator_reset("orders", "shardId-0");
    meters.decode_failure("orders", "shardId-0");
    let text = scrape(&registry);
    for series in [
        r#"kinesis_records_published_total{outcome="ok",stream="orders"} 7"#,
        r#"kinesis_records_published_total{outcome="failed",stream="orders"} 2"#,
        r#"kinesis_publish_retries_total{stream="orders"} 3"#,
        r#"kinesis_read_retries_total{cause="throttled",shard="shardId-0",stream="orders"} 1"#,
        r#"kinesis_iterator_resets_total{shard="shardId-0",stream="orders"} 1"#,
        r#"kinesis_decode_failures_total{shard="shardId-0",stream="orders"} 1"#,
    ] {
        assert!(text.contains(series), "{series} missing: {text}");
    }
}

#[test]
fn a_second_registration_in_one_registry_is_refused() {
    let registry = Registry::new();
    KinesisMetrics::register(&registry).unwrap();
    assert!(KinesisMetrics::register(&registry).is_err());
}

/// The Operating page's metrics table lists exactly the series the collectors render.
#[test]
fn the_operating_pages_table_lists_every_series() {
    let (registry, meters) = meters();
    meters.read("orders", "shardId-0", 1, 1, Some(0));
    meters.read_retry("orders", "shardId-0", ReadRetry::Failed);
    meters.iterator_reset("orders", "shardId-0");
    meters.decode_failure("orders", "shardId-0");
    meters.checkpoint_lag("orders", "shardId-0", 0);
    meters.lease_event("orders", "pod-a", LeaseEvent::Taken);
    meters.store_call("renew", CallOutcome::Ok, Duration::from_millis(1));
    meters.published("orders", 1, 0);
    meters.publish_retry("orders", 1);
    let mut rendered: Vec<String> = registry
        .gather()
        .iter()
        .map(|family| family.name().to_owned())
        .collect();
    rendered.sort();
    let page = include_str!("../../../../../docs/src/operating.md");
    let mut listed: Vec<String> = page
        .lines()
        .filter_map(|line| line.strip_prefix("| `kinesis_"))
        .filter_map(|rest| rest.split_once('`'))
        .map(|(name, _)| format!("kinesis_{name}"))
        .collect();
    listed.sort();
    assert_eq!(listed, rendered);
}

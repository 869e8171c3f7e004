use std::time::Duration;

use prometheus::Registry;

use super::{KinesisMetrics, scrape};
use crate::telemetry::{CallOutcome, LeaseEvent, Meters, ReadRetry, ShardCount, of_shard};

fn meters() -> (Registry, Meters) {
    let registry = Registry::new();
    let metrics = KinesisMetrics::register(&registry).unwrap();
    (registry, Meters::default().with_prometheus(metrics))
}

#[test]
fn a_read_counts_records_and_bytes_and_sets_the_shards_lag() {
    let (registry, meters) = meters();
    of_shard(&meters, "shardId-0").read(3, 120, Some(4_000));
    of_shard(&meters, "shardId-0").read(2, 80, Some(0));
    let text = scrape(&registry);
    assert!(
        text.contains(r#"aws_kinesis_records_read_total{shard="shardId-0",stream="orders"} 5"#),
        "{text}"
    );
    assert!(
        text.contains(r#"aws_kinesis_read_bytes_total{shard="shardId-0",stream="orders"} 200"#),
        "{text}"
    );
    assert!(
        text.contains(r#"aws_kinesis_shard_behind_seconds{shard="shardId-0",stream="orders"} 0"#),
        "{text}"
    );
}

#[test]
fn a_lease_taken_is_held_until_its_reader_ends_and_its_lag_goes_with_it() {
    let (registry, meters) = meters();
    meters.lease_event("orders", "pod-a", LeaseEvent::Taken);
    meters.lease_event("orders", "pod-a", LeaseEvent::Taken);
    of_shard(&meters, "shardId-1").read(1, 1, Some(250));
    of_shard(&meters, "shardId-1").checkpoint_lag(12);
    let text = scrape(&registry);
    assert!(
        text.contains(
            r#"aws_kinesis_checkpoint_lag_records{shard="shardId-1",stream="orders"} 12"#
        ),
        "{text}"
    );
    assert!(
        text.contains(r#"aws_kinesis_leases_held{owner="pod-a",stream="orders"} 2"#),
        "{text}"
    );
    meters.lease_event("orders", "pod-a", LeaseEvent::HandedOver);
    of_shard(&meters, "shardId-1").reader_ended();
    let text = scrape(&registry);
    assert!(
        text.contains(r#"aws_kinesis_leases_held{owner="pod-a",stream="orders"} 1"#),
        "{text}"
    );
    assert!(
        text.contains(
            r#"aws_kinesis_lease_events_total{event="handed_over",owner="pod-a",stream="orders"} 1"#
        ),
        "{text}"
    );
    assert!(
        !text.contains(r#"aws_kinesis_shard_behind_seconds{shard="shardId-1""#),
        "a shard read elsewhere now has no lag of ours: {text}"
    );
    assert!(
        !text.contains("aws_kinesis_checkpoint_lag_records{"),
        "{text}"
    );
}

/// A reader's counters show at 0 from its start: an alert on `rate()` sees them before the
/// first fault, and a look at the scrape finds every series.
#[test]
fn a_readers_fault_counters_show_at_zero_from_its_start() {
    let (registry, meters) = meters();
    of_shard(&meters, "shardId-0").reader_started();
    let text = scrape(&registry);
    for series in [
        r#"aws_kinesis_read_retries_total{cause="throttled",shard="shardId-0",stream="orders"} 0"#,
        r#"aws_kinesis_read_retries_total{cause="failed",shard="shardId-0",stream="orders"} 0"#,
        r#"aws_kinesis_iterator_resets_total{shard="shardId-0",stream="orders"} 0"#,
        r#"aws_kinesis_kpl_decode_failures_total{shard="shardId-0",stream="orders"} 0"#,
        r#"aws_kinesis_checkpoint_lag_records{shard="shardId-0",stream="orders"} 0"#,
        r#"aws_kinesis_shard_stalled{shard="shardId-0",stream="orders"} 0"#,
        r#"messaging_client_consumed_messages_total{shard="shardId-0",stream="orders"} 0"#,
    ] {
        assert!(text.contains(series), "{series} missing: {text}");
    }
    for count in ShardCount::ALL {
        let series = format!(
            r#"{}{{shard="shardId-0",stream="orders"}} 0"#,
            count.named().prometheus
        );
        assert!(text.contains(&series), "{series} missing: {text}");
    }
}

#[test]
fn lease_table_calls_are_operations_named_after_the_call_with_their_error_type() {
    let (registry, meters) = meters();
    meters.store_call("renew", CallOutcome::Ok, Duration::from_millis(4));
    meters.store_call("renew", CallOutcome::Refused, Duration::from_millis(3));
    meters.store_call("checkpoint", CallOutcome::TimedOut, Duration::from_secs(3));
    let text = scrape(&registry);
    for series in [
        r#"messaging_client_operation_duration_seconds_count{error_type="",operation="lease_table.renew"} 1"#,
        r#"messaging_client_operation_duration_seconds_count{error_type="refused",operation="lease_table.renew"} 1"#,
        r#"messaging_client_operation_duration_seconds_count{error_type="timeout",operation="lease_table.checkpoint"} 1"#,
        r#"messaging_client_operation_duration_seconds_bucket{error_type="",operation="lease_table.renew",le="0.005"} 1"#,
        r#"messaging_client_operation_duration_seconds_sum{error_type="timeout",operation="lease_table.checkpoint"} 3"#,
    ] {
        assert!(text.contains(series), "{series} missing: {text}");
    }
}

#[test]
fn kinesis_calls_are_operations_named_after_the_api_with_the_services_error_code() {
    let (registry, meters) = meters();
    meters.operation("GetRecords", None, Duration::from_millis(20));
    meters.operation(
        "GetRecords",
        Some("ProvisionedThroughputExceededException"),
        Duration::from_millis(5),
    );
    let text = scrape(&registry);
    for series in [
        r#"messaging_client_operation_duration_seconds_count{error_type="",operation="GetRecords"} 1"#,
        r#"messaging_client_operation_duration_seconds_count{error_type="ProvisionedThroughputExceededException",operation="GetRecords"} 1"#,
        r#"messaging_client_operation_duration_seconds_bucket{error_type="",operation="GetRecords",le="0.01"} 0"#,
        r#"messaging_client_operation_duration_seconds_bucket{error_type="",operation="GetRecords",le="0.025"} 1"#,
    ] {
        assert!(text.contains(series), "{series} missing: {text}");
    }
}

#[test]
fn consumed_messages_count_user_records_and_the_lag_is_in_seconds() {
    let (registry, meters) = meters();
    of_shard(&meters, "shardId-0").read(1, 900, Some(2_500));
    of_shard(&meters, "shardId-0").count(ShardCount::Consumed, 12);
    let text = scrape(&registry);
    for series in [
        r#"messaging_client_consumed_messages_total{shard="shardId-0",stream="orders"} 12"#,
        r#"aws_kinesis_records_read_total{shard="shardId-0",stream="orders"} 1"#,
        r#"aws_kinesis_shard_behind_seconds{shard="shardId-0",stream="orders"} 2.5"#,
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
    of_shard(&meters, "shardId-0").read_retry(ReadRetry::Throttled);
    of_shard(&meters, "shardId-0").count(ShardCount::IteratorResets, 1);
    of_shard(&meters, "shardId-0").count(ShardCount::DecodeFailures, 1);
    let text = scrape(&registry);
    for series in [
        r#"messaging_client_sent_messages_total{error_type="",stream="orders"} 7"#,
        r#"messaging_client_sent_messages_total{error_type="failed",stream="orders"} 2"#,
        r#"aws_kinesis_publish_retries_total{stream="orders"} 3"#,
        r#"aws_kinesis_read_retries_total{cause="throttled",shard="shardId-0",stream="orders"} 1"#,
        r#"aws_kinesis_iterator_resets_total{shard="shardId-0",stream="orders"} 1"#,
        r#"aws_kinesis_kpl_decode_failures_total{shard="shardId-0",stream="orders"} 1"#,
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
    of_shard(&meters, "shardId-0").read(1, 1, Some(0));
    of_shard(&meters, "shardId-0").read_retry(ReadRetry::Failed);
    of_shard(&meters, "shardId-0").count(ShardCount::IteratorResets, 1);
    of_shard(&meters, "shardId-0").count(ShardCount::DecodeFailures, 1);
    of_shard(&meters, "shardId-0").checkpoint_lag(0);
    meters.lease_event("orders", "pod-a", LeaseEvent::Taken);
    meters.store_call("renew", CallOutcome::Ok, Duration::from_millis(1));
    meters.published("orders", 1, 0);
    meters.publish_retry("orders", 1);
    meters.operation("GetRecords", None, Duration::from_millis(1));
    of_shard(&meters, "shardId-0").count(ShardCount::Consumed, 1);
    of_shard(&meters, "shardId-0").stalled(false);
    meters.coordination("orders", "notice", false);
    let mut rendered: Vec<String> = registry
        .gather()
        .iter()
        .map(|family| family.name().to_owned())
        .collect();
    rendered.sort();
    let page = include_str!("../../../../../docs/src/operating.md");
    let mut listed: Vec<String> = page
        .lines()
        .filter_map(|line| line.strip_prefix("| `"))
        .filter_map(|rest| rest.split_once('`'))
        .map(|(name, _)| name.to_owned())
        .filter(|name| name.starts_with("aws_kinesis_") || name.starts_with("messaging_client_"))
        .collect();
    listed.sort();
    assert_eq!(listed, rendered);
}

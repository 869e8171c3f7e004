use std::time::Duration;

use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData};
use opentelemetry_sdk::metrics::{InMemoryMetricExporter, PeriodicReader, SdkMeterProvider};

use crate::telemetry::{CallOutcome, LeaseEvent, Meters, ReadRetry, ShardCount, of_shard};

/// Every report lands on the global meter provider installed before the meters were made, under
/// the names the Operating page lists, with the stream and shard as the messaging conventions'
/// attributes.
#[test]
fn each_report_is_an_instrument_on_the_global_meter() {
    let exporter = InMemoryMetricExporter::default();
    let provider = SdkMeterProvider::builder()
        .with_reader(PeriodicReader::builder(exporter.clone()).build())
        .build();
    opentelemetry::global::set_meter_provider(provider.clone());
    let meters = Meters::default().with_global_meter();
    of_shard(&meters, "shardId-0").read(3, 120, Some(1_500));
    of_shard(&meters, "shardId-0").read_retry(ReadRetry::Throttled);
    of_shard(&meters, "shardId-0").count(ShardCount::IteratorResets, 1);
    of_shard(&meters, "shardId-0").count(ShardCount::DecodeFailures, 1);
    of_shard(&meters, "shardId-0").checkpoint_lag(3);
    meters.lease_event("orders", "pod-a", LeaseEvent::Taken);
    meters.store_call("renew", CallOutcome::Ok, Duration::from_millis(4));
    meters.published("orders", 2, 1);
    meters.publish_retry("orders", 1);
    of_shard(&meters, "shardId-0").count(ShardCount::Consumed, 5);
    meters.operation(
        "GetRecords",
        Some("ProvisionedThroughputExceededException"),
        Duration::from_millis(9),
    );
    of_shard(&meters, "shardId-0").stalled(false);
    meters.coordination("orders", "notice", true);
    provider.force_flush().unwrap();

    let exported = exporter.get_finished_metrics().unwrap();
    let metrics: Vec<_> = exported
        .iter()
        .flat_map(|resource| resource.scope_metrics())
        .filter(|scope| scope.scope().name() == "ruststream-kinesis")
        .flat_map(|scope| scope.metrics())
        .collect();
    let mut names: Vec<&str> = metrics.iter().map(|metric| metric.name()).collect();
    names.sort_unstable();
    // The Operating page's table: the OpenTelemetry name is each row's second cell.
    let page = include_str!("../../../../../docs/src/operating.md");
    let mut listed: Vec<&str> = page
        .lines()
        .filter(|line| {
            line.starts_with("| `aws_kinesis_") || line.starts_with("| `messaging_client_")
        })
        .filter_map(|line| line.split('|').nth(2))
        .filter_map(|cell| cell.split('`').nth(1))
        .collect();
    listed.sort_unstable();
    assert_eq!(listed, names, "the page lists each instrument once");
    let lag = metrics
        .iter()
        .find(|metric| metric.name() == "aws.kinesis.shard.behind")
        .unwrap();
    assert_eq!(lag.unit(), "s", "seconds, the conventions' unit");
    let AggregatedMetrics::F64(MetricData::Gauge(gauge)) = lag.data() else {
        panic!("the lag is an f64 gauge: {:?}", lag.data());
    };
    let point = gauge.data_points().next().unwrap();
    assert!((point.value() - 1.5).abs() < 1e-9, "{}", point.value());
    let attributes: Vec<String> = point
        .attributes()
        .map(|kv| format!("{}={}", kv.key, kv.value))
        .collect();
    for attribute in [
        "messaging.system=aws_kinesis",
        "messaging.destination.name=orders",
        "messaging.destination.partition.id=shardId-0",
    ] {
        assert!(
            attributes.iter().any(|a| a == attribute),
            "{attribute} missing from {attributes:?}"
        );
    }
}

/// The points of gauge `name` in the last export, as (shard, value).
fn gauge_points(exporter: &InMemoryMetricExporter, name: &str) -> Vec<(String, f64)> {
    let exported = exporter.get_finished_metrics().unwrap();
    let last = exported.last().expect("an export");
    let Some(metric) = last
        .scope_metrics()
        .flat_map(|scope| scope.metrics())
        .find(|metric| metric.name() == name)
    else {
        return Vec::new();
    };
    fn shard_of<'a>(mut attributes: impl Iterator<Item = &'a opentelemetry::KeyValue>) -> String {
        attributes
            .find(|kv| kv.key.as_str() == "messaging.destination.partition.id")
            .map(|kv| kv.value.to_string())
            .unwrap_or_default()
    }
    match metric.data() {
        AggregatedMetrics::I64(MetricData::Gauge(gauge)) => gauge
            .data_points()
            .map(|p| (shard_of(p.attributes()), p.value() as f64))
            .collect(),
        AggregatedMetrics::U64(MetricData::Gauge(gauge)) => gauge
            .data_points()
            .map(|p| (shard_of(p.attributes()), p.value() as f64))
            .collect(),
        AggregatedMetrics::F64(MetricData::Gauge(gauge)) => gauge
            .data_points()
            .map(|p| (shard_of(p.attributes()), p.value()))
            .collect(),
        other => panic!("{name} is a gauge: {other:?}"),
    }
}

/// Instruments on a meter provider of their own, whose exports `exporter` keeps.
fn exported_instruments() -> (InMemoryMetricExporter, SdkMeterProvider, super::Instruments) {
    let exporter = InMemoryMetricExporter::default();
    let provider = SdkMeterProvider::builder()
        .with_reader(PeriodicReader::builder(exporter.clone()).build())
        .build();
    let instruments = super::Instruments::on(&opentelemetry::metrics::MeterProvider::meter(
        &provider,
        "ruststream-kinesis",
    ));
    (exporter, provider, instruments)
}

/// A shard this instance stops reading leaves the lag gauges at the next collection: the lag
/// of a shard read elsewhere now is never reported from here.
#[test]
fn a_shard_no_longer_read_leaves_the_lag_gauges() {
    let (exporter, provider, instruments) = exported_instruments();
    for shard in ["shardId-0", "shardId-1"] {
        instruments.reader_started("orders", shard);
        instruments.behind("orders", shard, 1_500);
        instruments.checkpoint_lag("orders", shard, 3);
    }
    provider.force_flush().unwrap();
    let both = vec![("shardId-0".to_owned(), 1.5), ("shardId-1".to_owned(), 1.5)];
    let mut behind = gauge_points(&exporter, "aws.kinesis.shard.behind");
    behind.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(behind, both);

    instruments.reader_ended("orders", "shardId-0", "pod-a");
    provider.force_flush().unwrap();
    assert_eq!(
        gauge_points(&exporter, "aws.kinesis.shard.behind"),
        [("shardId-1".to_owned(), 1.5)]
    );
    assert_eq!(
        gauge_points(&exporter, "aws.kinesis.checkpoint.lag"),
        [("shardId-1".to_owned(), 3.0)]
    );
}

/// The instruments of a broker that is gone report nothing: the meter provider keeps each
/// gauge's callback for its own life, and the callback must not keep the figures of shards no
/// broker reads any more (nor their memory).
#[test]
fn the_lag_gauges_of_dropped_instruments_report_nothing() {
    let (exporter, provider, instruments) = exported_instruments();
    instruments.reader_started("orders", "shardId-0");
    instruments.behind("orders", "shardId-0", 1_500);
    instruments.checkpoint_lag("orders", "shardId-0", 3);
    provider.force_flush().unwrap();
    assert_eq!(
        gauge_points(&exporter, "aws.kinesis.shard.behind"),
        [("shardId-0".to_owned(), 1.5)]
    );

    // Dropped with a reader still counted: no reader ended it.
    drop(instruments);
    exporter.reset();
    provider.force_flush().unwrap();
    for name in ["aws.kinesis.shard.behind", "aws.kinesis.checkpoint.lag"] {
        assert_eq!(gauge_points(&exporter, name), [], "{name}");
    }
}

use std::time::Duration;

use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData};
use opentelemetry_sdk::metrics::{InMemoryMetricExporter, PeriodicReader, SdkMeterProvider};

use crate::telemetry::{CallOutcome, LeaseEvent, Meters, ReadRetry};

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
    meters.read("orders", "shardId-0", 3, 120, Some(1_500));
    meters.read_retry("orders", "shardId-0", ReadRetry::Throttled);
    meters.iterator_reset("orders", "shardId-0");
    meters.decode_failure("orders", "shardId-0");
    meters.checkpoint_lag("orders", "shardId-0", 3);
    meters.lease_event("orders", "pod-a", LeaseEvent::Taken);
    meters.store_call("renew", CallOutcome::Ok, Duration::from_millis(4));
    meters.published("orders", 2, 0);
    meters.publish_retry("orders", 1);
    provider.force_flush().unwrap();

    let exported = exporter.get_finished_metrics().unwrap();
    let metrics: Vec<_> = exported
        .iter()
        .flat_map(|resource| resource.scope_metrics())
        .filter(|scope| scope.scope().name() == "ruststream-kinesis")
        .flat_map(|scope| scope.metrics())
        .collect();
    let names: Vec<&str> = metrics.iter().map(|metric| metric.name()).collect();
    for name in [
        "messaging.kinesis.millis_behind_latest",
        "messaging.kinesis.records.read",
        "messaging.kinesis.bytes.read",
        "messaging.kinesis.read.retries",
        "messaging.kinesis.iterator.resets",
        "messaging.kinesis.decode.failures",
        "messaging.kinesis.checkpoint.lag",
        "messaging.kinesis.leases.held",
        "messaging.kinesis.lease.events",
        "messaging.kinesis.lease_table.call.duration",
        "messaging.kinesis.records.published",
        "messaging.kinesis.publish.retries",
    ] {
        assert!(names.contains(&name), "{name} missing from {names:?}");
    }
    let lag = metrics
        .iter()
        .find(|metric| metric.name() == "messaging.kinesis.millis_behind_latest")
        .unwrap();
    let AggregatedMetrics::I64(MetricData::Gauge(gauge)) = lag.data() else {
        panic!("the lag is an i64 gauge: {:?}", lag.data());
    };
    let point = gauge.data_points().next().unwrap();
    assert_eq!(point.value(), 1_500);
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
fn gauge_points(exporter: &InMemoryMetricExporter, name: &str) -> Vec<(String, i128)> {
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
            .map(|p| (shard_of(p.attributes()), i128::from(p.value())))
            .collect(),
        AggregatedMetrics::U64(MetricData::Gauge(gauge)) => gauge
            .data_points()
            .map(|p| (shard_of(p.attributes()), i128::from(p.value())))
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
        instruments.read("orders", shard, 1, 10, Some(1_500));
        instruments.checkpoint_lag("orders", shard, 3);
    }
    provider.force_flush().unwrap();
    let both = vec![
        ("shardId-0".to_owned(), 1_500),
        ("shardId-1".to_owned(), 1_500),
    ];
    let mut behind = gauge_points(&exporter, "messaging.kinesis.millis_behind_latest");
    behind.sort();
    assert_eq!(behind, both);

    instruments.reader_ended("orders", "shardId-0", "pod-a");
    provider.force_flush().unwrap();
    assert_eq!(
        gauge_points(&exporter, "messaging.kinesis.millis_behind_latest"),
        [("shardId-1".to_owned(), 1_500)]
    );
    assert_eq!(
        gauge_points(&exporter, "messaging.kinesis.checkpoint.lag"),
        [("shardId-1".to_owned(), 3)]
    );
}

/// The instruments of a broker that is gone report nothing: the meter provider keeps each
/// gauge's callback for its own life, and the callback must not keep the figures of shards no
/// broker reads any more (nor their memory).
#[test]
fn the_lag_gauges_of_dropped_instruments_report_nothing() {
    let (exporter, provider, instruments) = exported_instruments();
    instruments.reader_started("orders", "shardId-0");
    instruments.read("orders", "shardId-0", 1, 10, Some(1_500));
    instruments.checkpoint_lag("orders", "shardId-0", 3);
    provider.force_flush().unwrap();
    assert_eq!(
        gauge_points(&exporter, "messaging.kinesis.millis_behind_latest"),
        [("shardId-0".to_owned(), 1_500)]
    );

    // Dropped with a reader still counted: no reader ended it.
    drop(instruments);
    exporter.reset();
    provider.force_flush().unwrap();
    for name in [
        "messaging.kinesis.millis_behind_latest",
        "messaging.kinesis.checkpoint.lag",
    ] {
        assert_eq!(gauge_points(&exporter, name), [], "{name}");
    }
}

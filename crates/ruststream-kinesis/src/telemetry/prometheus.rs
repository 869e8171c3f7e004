//! The Prometheus backend (feature `metrics`): collectors registered in a registry of the
//! service's, usually the framework's own (`ruststream::metrics::Metrics::registry`), so one
//! `/metrics` route renders the framework's series and these together.

use std::sync::Arc;
use std::time::Duration;

use prometheus::{
    GaugeVec, HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Opts, Registry,
};

use super::series::ShardCount;
use super::{LeaseEvent, ReadRetry};

/// Call latencies, in seconds: a call answers in milliseconds, and one that nears its bound (a
/// lease-table call's is the renewal interval, 3 s by default; a Kinesis call's the lease and at
/// least 10 s) is a fault.
const CALL_BUCKETS: &[f64] = &[
    0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// The broker's Prometheus collectors. Register them once in a registry, and hand them to each
/// broker that is to count into it ([`KinesisBroker::metrics`](crate::KinesisBroker::metrics)).
///
/// Named after the OpenTelemetry messaging conventions where one exists (`messaging_client_*`,
/// as an OpenTelemetry exporter renders `messaging.client.*`), and under `aws_kinesis_*`
/// otherwise; base units (seconds, bytes), `_total` for counters.
///
/// | Series | Type | Labels | What it counts |
/// |---|---|---|---|
/// | `messaging_client_operation_duration_seconds` | histogram | `operation`, `error_type` | every Kinesis call (`operation` its API name: `GetRecords`, `ListShards`, `PutRecords`, ...) and every lease-table call (`lease_table.renew`, `lease_table.checkpoint`, ...); `error_type` empty when it answered, else the service's error code (`ProvisionedThroughputExceededException`, ...), `timeout`, `failed`, `throttled` (a lease-table call refused for want of capacity, tried again), or `refused` (a conditional write lost to another owner: a fence working) |
/// | `messaging_client_consumed_messages_total` | counter | `stream`, `shard` | messages read from the shard: user records, a KPL aggregate's each |
/// | `messaging_client_sent_messages_total` | counter | `stream`, `error_type` | publishes answered: `error_type` empty when written, `failed` when not (refused before any write too) |
/// | `aws_kinesis_shard_behind_seconds` | gauge | `stream`, `shard` | how far the last read of the shard was behind its newest record (`MillisBehindLatest`), while this instance reads it |
/// | `aws_kinesis_records_read_total` | counter | `stream`, `shard` | Kinesis records read (a KPL aggregate is one) |
/// | `aws_kinesis_read_bytes_total` | counter | `stream`, `shard` | their data, in bytes |
/// | `aws_kinesis_read_retries_total` | counter | `stream`, `shard`, `cause` | reads tried again after a backoff: `throttled`, `failed` |
/// | `aws_kinesis_iterator_resets_total` | counter | `stream`, `shard` | shard iterators that expired and were asked for again |
/// | `aws_kinesis_kpl_decode_failures_total` | counter | `stream`, `shard` | records with the KPL's magic that are no valid aggregate (delivered as they are) |
/// | `aws_kinesis_checkpoint_lag_records` | gauge | `stream`, `shard` | deliveries settled in order but not yet covered by a checkpoint written (what a crash now would deliver again), as of the last lease write |
/// | `aws_kinesis_leases_held` | gauge | `stream`, `owner` | the leases this instance holds |
/// | `aws_kinesis_lease_events_total` | counter | `stream`, `owner`, `event` | `taken`, `released`, `lost`, `expired`, `handed_over`, `finished` |
/// | `aws_kinesis_publish_retries_total` | counter | `stream` | publishes whose records Kinesis rejected in a `PutRecords` answer, sent again |
/// | `aws_kinesis_shard_stalled` | gauge | `stream`, `shard` | 1 while a shard this instance reads has records behind it and delivered nothing for longer than its stall bound (`KinesisStream::stall_after`), else 0 |
/// | `aws_kinesis_coordination_degraded` | gauge | `stream`, `call` | 1 while a call the coordinator makes of the lease table keeps failing (`notice`, `list`, `delete`, `ask_handoff`, `beat`, `announce`), else 0 |
///
/// # Examples
///
/// ```
/// use ruststream_kinesis::{KinesisBroker, KinesisMetrics};
///
/// # fn main() -> Result<(), prometheus::Error> {
/// // The framework's registry, or any other the service renders on its /metrics route.
/// let registry = prometheus::Registry::new();
/// let metrics = KinesisMetrics::register(&registry)?;
/// let broker = KinesisBroker::new().metrics(metrics);
/// # let _ = broker;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct KinesisMetrics {
    series: Arc<Series>,
}

impl std::fmt::Debug for KinesisMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KinesisMetrics").finish_non_exhaustive()
    }
}

struct Series {
    operations: HistogramVec,
    /// One per [`ShardCount`], at its index.
    shard_counts: Vec<IntCounterVec>,
    sent: IntCounterVec,
    behind: GaugeVec,
    read_retries: IntCounterVec,
    checkpoint_lag: IntGaugeVec,
    leases_held: IntGaugeVec,
    lease_events: IntCounterVec,
    publish_retries: IntCounterVec,
    shard_stalled: IntGaugeVec,
    coordination: IntGaugeVec,
}

/// The labels of a shard's series.
const SHARD: &[&str] = &["stream", "shard"];

fn counter(name: &str, help: &str, labels: &[&str]) -> Result<IntCounterVec, prometheus::Error> {
    IntCounterVec::new(Opts::new(name, help), labels)
}

fn gauge(name: &str, help: &str, labels: &[&str]) -> Result<IntGaugeVec, prometheus::Error> {
    IntGaugeVec::new(Opts::new(name, help), labels)
}

impl Series {
    fn new() -> Result<Self, prometheus::Error> {
        Ok(Self {
            operations: HistogramVec::new(
                HistogramOpts::new(
                    "messaging_client_operation_duration_seconds",
                    "Kinesis and lease-table calls, by operation and error type (empty: answered).",
                )
                .buckets(CALL_BUCKETS.to_vec()),
                &["operation", "error_type"],
            )?,
            shard_counts: ShardCount::ALL
                .iter()
                .map(|count| {
                    let named = count.named();
                    counter(named.prometheus, named.help, SHARD)
                })
                .collect::<Result<_, _>>()?,
            sent: counter(
                "messaging_client_sent_messages_total",
                "Publishes answered, by error type (empty: written).",
                &["stream", "error_type"],
            )?,
            behind: GaugeVec::new(
                Opts::new(
                    "aws_kinesis_shard_behind_seconds",
                    "How far the last read of the shard was behind its newest record.",
                ),
                SHARD,
            )?,
            read_retries: counter(
                "aws_kinesis_read_retries_total",
                "Reads tried again after a backoff, by cause (throttled, failed).",
                &["stream", "shard", "cause"],
            )?,
            checkpoint_lag: gauge(
                "aws_kinesis_checkpoint_lag_records",
                "Deliveries settled in order but not yet covered by a checkpoint written.",
                SHARD,
            )?,
            leases_held: gauge(
                "aws_kinesis_leases_held",
                "Leases this instance holds.",
                &["stream", "owner"],
            )?,
            lease_events: counter(
                "aws_kinesis_lease_events_total",
                "Lease events: taken, released, lost, expired, handed_over, finished.",
                &["stream", "owner", "event"],
            )?,
            publish_retries: counter(
                "aws_kinesis_publish_retries_total",
                "Publishes whose records were rejected in a PutRecords answer, sent again.",
                &["stream"],
            )?,
            shard_stalled: gauge(
                "aws_kinesis_shard_stalled",
                "1 while the shard has records behind it and delivered nothing for longer than its stall bound.",
                SHARD,
            )?,
            coordination: gauge(
                "aws_kinesis_coordination_degraded",
                "1 while a lease-table call of the coordinator keeps failing, by call.",
                &["stream", "call"],
            )?,
        })
    }

    /// Every collector, to register.
    fn collectors(&self) -> Vec<Box<dyn prometheus::core::Collector>> {
        let mut all: Vec<Box<dyn prometheus::core::Collector>> = vec![
            Box::new(self.operations.clone()),
            Box::new(self.sent.clone()),
            Box::new(self.behind.clone()),
            Box::new(self.read_retries.clone()),
            Box::new(self.checkpoint_lag.clone()),
            Box::new(self.leases_held.clone()),
            Box::new(self.lease_events.clone()),
            Box::new(self.publish_retries.clone()),
            Box::new(self.shard_stalled.clone()),
            Box::new(self.coordination.clone()),
        ];
        for count in &self.shard_counts {
            all.push(Box::new(count.clone()));
        }
        all
    }
}

impl KinesisMetrics {
    /// Makes the collectors and registers them in `registry`.
    ///
    /// # Errors
    ///
    /// When `registry` already has a series of one of these names: register once per registry,
    /// and clone the answer for every broker.
    pub fn register(registry: &Registry) -> Result<Self, prometheus::Error> {
        let series = Series::new()?;
        for collector in series.collectors() {
            registry.register(collector)?;
        }
        Ok(Self {
            series: Arc::new(series),
        })
    }

    pub(super) fn count(&self, stream: &str, shard: &str, count: ShardCount, by: u64) {
        self.series.shard_counts[count.index()]
            .with_label_values(&[stream, shard])
            .inc_by(by);
    }

    pub(super) fn behind(&self, stream: &str, shard: &str, millis: i64) {
        self.series
            .behind
            .with_label_values(&[stream, shard])
            .set(millis as f64 / 1000.0);
    }

    pub(super) fn read_retry(&self, stream: &str, shard: &str, cause: ReadRetry) {
        self.series
            .read_retries
            .with_label_values(&[stream, shard, cause.as_str()])
            .inc();
    }

    pub(super) fn lease_event(&self, stream: &str, owner: &str, event: LeaseEvent) {
        self.series
            .lease_events
            .with_label_values(&[stream, owner, event.as_str()])
            .inc();
        if event == LeaseEvent::Taken {
            self.series
                .leases_held
                .with_label_values(&[stream, owner])
                .inc();
        }
    }

    pub(super) fn checkpoint_lag(&self, stream: &str, shard: &str, records: u64) {
        self.series
            .checkpoint_lag
            .with_label_values(&[stream, shard])
            .set(i64::try_from(records).unwrap_or(i64::MAX));
    }

    pub(super) fn reader_started(&self, stream: &str, shard: &str) {
        let labels = &[stream, shard];
        for cause in [ReadRetry::Throttled, ReadRetry::Failed] {
            self.series
                .read_retries
                .with_label_values(&[stream, shard, cause.as_str()])
                .inc_by(0);
        }
        for count in &self.series.shard_counts {
            count.with_label_values(labels).inc_by(0);
        }
        self.series.checkpoint_lag.with_label_values(labels).set(0);
        self.series.shard_stalled.with_label_values(labels).set(0);
    }

    pub(super) fn reader_ended(&self, stream: &str, shard: &str, owner: &str) {
        self.series
            .leases_held
            .with_label_values(&[stream, owner])
            .dec();
        // Another instance reads the shard now, and says how far behind it is.
        let labels = &[stream, shard];
        let _ = self.series.behind.remove_label_values(labels);
        let _ = self.series.checkpoint_lag.remove_label_values(labels);
        let _ = self.series.shard_stalled.remove_label_values(labels);
    }

    pub(super) fn operation(&self, operation: &str, error: Option<&str>, took: Duration) {
        self.series
            .operations
            .with_label_values(&[operation, error.unwrap_or("")])
            .observe(took.as_secs_f64());
    }

    pub(super) fn sent(&self, stream: &str, error: Option<&str>, messages: u64) {
        self.series
            .sent
            .with_label_values(&[stream, error.unwrap_or("")])
            .inc_by(messages);
    }

    pub(super) fn publish_retry(&self, stream: &str, records: u64) {
        // Called with 0 at each call too, so the stream's series shows before its first retry.
        self.series
            .publish_retries
            .with_label_values(&[stream])
            .inc_by(records);
    }

    pub(super) fn shard_stalled(&self, stream: &str, shard: &str, stalled: bool) {
        self.series
            .shard_stalled
            .with_label_values(&[stream, shard])
            .set(i64::from(stalled));
    }

    pub(super) fn coordination(&self, stream: &str, call: &str, degraded: bool) {
        self.series
            .coordination
            .with_label_values(&[stream, call])
            .set(i64::from(degraded));
    }
}

/// `registry` as a `/metrics` route renders it, for the tests that read series back.
#[cfg(test)]
pub(crate) fn scrape(registry: &Registry) -> String {
    use prometheus::{Encoder, TextEncoder};

    let mut text = Vec::new();
    TextEncoder::new()
        .encode(&registry.gather(), &mut text)
        .unwrap();
    String::from_utf8(text).unwrap()
}

#[cfg(test)]
mod tests;

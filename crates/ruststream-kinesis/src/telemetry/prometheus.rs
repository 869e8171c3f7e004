//! The Prometheus backend (feature `metrics`): collectors registered in a registry of the
//! service's, usually the framework's own (`ruststream::metrics::Metrics::registry`), so one
//! `/metrics` route renders the framework's series and these together.

use std::sync::Arc;
use std::time::Duration;

use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Opts, Registry};

use super::{CallOutcome, LeaseEvent, Published, ReadRetry};

/// Lease-table call latencies, in seconds: a call answers in milliseconds, and one that nears
/// the bound (the renewal interval, 3 s by default) is a fault.
const CALL_BUCKETS: &[f64] = &[
    0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
];

/// The broker's Prometheus collectors. Register them once in a registry, and hand them to each
/// broker that is to count into it ([`KinesisBroker::metrics`](crate::KinesisBroker::metrics)).
///
/// | Series | Type | Labels | What it counts |
/// |---|---|---|---|
/// | `kinesis_millis_behind_latest` | gauge | `stream`, `shard` | how far the last read of the shard was behind its newest record (`MillisBehindLatest`), while this instance reads it |
/// | `kinesis_records_read_total` | counter | `stream`, `shard` | Kinesis records read (a KPL aggregate is one) |
/// | `kinesis_bytes_read_total` | counter | `stream`, `shard` | their data, in bytes |
/// | `kinesis_read_retries_total` | counter | `stream`, `shard`, `cause` | reads tried again after a backoff: `throttled`, `failed` |
/// | `kinesis_iterator_resets_total` | counter | `stream`, `shard` | shard iterators that expired and were asked for again |
/// | `kinesis_decode_failures_total` | counter | `stream`, `shard` | records with the KPL's magic that are no valid aggregate (delivered as they are) |
/// | `kinesis_checkpoint_lag_records` | gauge | `stream`, `shard` | deliveries settled in order but not yet covered by a checkpoint written (what a crash now would deliver again), as of the last lease write |
/// | `kinesis_leases_held` | gauge | `stream`, `owner` | the leases this instance holds |
/// | `kinesis_lease_events_total` | counter | `stream`, `owner`, `event` | `taken`, `released`, `lost`, `expired`, `handed_over`, `finished` |
/// | `kinesis_lease_table_call_duration_seconds` | histogram | `call`, `outcome` | each lease-table call's time; `outcome` is `ok`, `refused`, `failed` or `timed_out` |
/// | `kinesis_records_published_total` | counter | `stream`, `outcome` | publishes answered: `ok`, `failed` (refused before any write too) |
/// | `kinesis_publish_retries_total` | counter | `stream` | publishes whose records Kinesis rejected in a `PutRecords` answer, sent again |
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
    millis_behind: IntGaugeVec,
    records_read: IntCounterVec,
    bytes_read: IntCounterVec,
    read_retries: IntCounterVec,
    iterator_resets: IntCounterVec,
    decode_failures: IntCounterVec,
    checkpoint_lag: IntGaugeVec,
    leases_held: IntGaugeVec,
    lease_events: IntCounterVec,
    store_calls: HistogramVec,
    published: IntCounterVec,
    publish_retries: IntCounterVec,
    shard_stalled: IntGaugeVec,
    coordination: IntGaugeVec,
}

impl KinesisMetrics {
    /// Makes the collectors and registers them in `registry`.
    ///
    /// # Errors
    ///
    /// When `registry` already has a series of one of these names: register once per registry,
    /// and clone the answer for every broker.
    pub fn register(registry: &Registry) -> Result<Self, prometheus::Error> {
        let shard = &["stream", "shard"];
        let series = Series {
            millis_behind: IntGaugeVec::new(
                Opts::new(
                    "kinesis_millis_behind_latest",
                    "How far the last read of the shard was behind its newest record, in milliseconds.",
                ),
                shard,
            )?,
            records_read: IntCounterVec::new(
                Opts::new("kinesis_records_read_total", "Kinesis records read."),
                shard,
            )?,
            bytes_read: IntCounterVec::new(
                Opts::new(
                    "kinesis_bytes_read_total",
                    "Bytes of Kinesis record data read.",
                ),
                shard,
            )?,
            read_retries: IntCounterVec::new(
                Opts::new(
                    "kinesis_read_retries_total",
                    "Reads tried again after a backoff, by cause (throttled, failed).",
                ),
                &["stream", "shard", "cause"],
            )?,
            iterator_resets: IntCounterVec::new(
                Opts::new(
                    "kinesis_iterator_resets_total",
                    "Shard iterators that expired and were asked for again.",
                ),
                shard,
            )?,
            decode_failures: IntCounterVec::new(
                Opts::new(
                    "kinesis_decode_failures_total",
                    "Records with the KPL's magic that are no valid aggregate, delivered as they are.",
                ),
                shard,
            )?,
            checkpoint_lag: IntGaugeVec::new(
                Opts::new(
                    "kinesis_checkpoint_lag_records",
                    "Deliveries settled in order but not yet covered by a checkpoint written.",
                ),
                shard,
            )?,
            leases_held: IntGaugeVec::new(
                Opts::new("kinesis_leases_held", "Leases this instance holds."),
                &["stream", "owner"],
            )?,
            lease_events: IntCounterVec::new(
                Opts::new(
                    "kinesis_lease_events_total",
                    "Lease events: taken, released, lost, expired, handed_over, finished.",
                ),
                &["stream", "owner", "event"],
            )?,
            store_calls: HistogramVec::new(
                HistogramOpts::new(
                    "kinesis_lease_table_call_duration_seconds",
                    "Lease-table calls, by call and outcome (ok, refused, failed, timed_out).",
                )
                .buckets(CALL_BUCKETS.to_vec()),
                &["call", "outcome"],
            )?,
            published: IntCounterVec::new(
                Opts::new(
                    "kinesis_records_published_total",
                    "Publishes answered, by outcome (ok, failed).",
                ),
                &["stream", "outcome"],
            )?,
            publish_retries: IntCounterVec::new(
                Opts::new(
                    "kinesis_publish_retries_total",
                    "Publishes whose records were rejected in a PutRecords answer, sent again.",
                ),
                &["stream"],
            )?,
            shard_stalled: IntGaugeVec::new(
                Opts::new(
                    "aws_kinesis_shard_stalled",
                    "1 while the shard has records behind it and delivered nothing for longer than its stall bound.",
                ),
                shard,
            )?,
            coordination: IntGaugeVec::new(
                Opts::new(
                    "aws_kinesis_coordination_degraded",
                    "1 while a lease-table call of the coordinator keeps failing, by call.",
                ),
                &["stream", "call"],
            )?,
        };
        registry.register(Box::new(series.millis_behind.clone()))?;
        registry.register(Box::new(series.records_read.clone()))?;
        registry.register(Box::new(series.bytes_read.clone()))?;
        registry.register(Box::new(series.read_retries.clone()))?;
        registry.register(Box::new(series.iterator_resets.clone()))?;
        registry.register(Box::new(series.decode_failures.clone()))?;
        registry.register(Box::new(series.checkpoint_lag.clone()))?;
        registry.register(Box::new(series.leases_held.clone()))?;
        registry.register(Box::new(series.lease_events.clone()))?;
        registry.register(Box::new(series.store_calls.clone()))?;
        registry.register(Box::new(series.published.clone()))?;
        registry.register(Box::new(series.publish_retries.clone()))?;
        registry.register(Box::new(series.shard_stalled.clone()))?;
        registry.register(Box::new(series.coordination.clone()))?;
        Ok(Self {
            series: Arc::new(series),
        })
    }

    pub(super) fn read(
        &self,
        stream: &str,
        shard: &str,
        records: u64,
        bytes: u64,
        millis_behind: Option<i64>,
    ) {
        let labels = &[stream, shard];
        self.series
            .records_read
            .with_label_values(labels)
            .inc_by(records);
        self.series
            .bytes_read
            .with_label_values(labels)
            .inc_by(bytes);
        if let Some(behind) = millis_behind {
            self.series
                .millis_behind
                .with_label_values(labels)
                .set(behind);
        }
    }

    pub(super) fn read_retry(&self, stream: &str, shard: &str, cause: ReadRetry) {
        self.series
            .read_retries
            .with_label_values(&[stream, shard, cause.as_str()])
            .inc();
    }

    pub(super) fn iterator_reset(&self, stream: &str, shard: &str) {
        self.series
            .iterator_resets
            .with_label_values(&[stream, shard])
            .inc();
    }

    pub(super) fn decode_failure(&self, stream: &str, shard: &str) {
        self.series
            .decode_failures
            .with_label_values(&[stream, shard])
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
        self.series
            .iterator_resets
            .with_label_values(labels)
            .inc_by(0);
        self.series
            .decode_failures
            .with_label_values(labels)
            .inc_by(0);
        self.series.checkpoint_lag.with_label_values(labels).set(0);
        self.series.shard_stalled.with_label_values(labels).set(0);
    }

    pub(super) fn reader_ended(&self, stream: &str, shard: &str, owner: &str) {
        self.series
            .leases_held
            .with_label_values(&[stream, owner])
            .dec();
        // Another instance reads the shard now, and says how far behind it is.
        let _ = self
            .series
            .millis_behind
            .remove_label_values(&[stream, shard]);
        let _ = self
            .series
            .checkpoint_lag
            .remove_label_values(&[stream, shard]);
        let _ = self
            .series
            .shard_stalled
            .remove_label_values(&[stream, shard]);
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

    pub(super) fn store_call(&self, call: &str, outcome: CallOutcome, took: Duration) {
        self.series
            .store_calls
            .with_label_values(&[call, outcome.as_str()])
            .observe(took.as_secs_f64());
    }

    pub(super) fn published(&self, stream: &str, outcome: Published, records: u64) {
        self.series
            .published
            .with_label_values(&[stream, outcome.as_str()])
            .inc_by(records);
    }

    pub(super) fn publish_retry(&self, stream: &str, records: u64) {
        // Called with 0 at each call too, so the stream's series shows before its first retry.
        self.series
            .publish_retries
            .with_label_values(&[stream])
            .inc_by(records);
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

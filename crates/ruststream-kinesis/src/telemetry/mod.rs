//! What the broker measures of itself: how far behind each shard is, what it read, the leases it
//! holds and what happened to them, its lease-table calls, and its publishes. The drivers report
//! each event once to [`Meters`], which hands it to the backends compiled in: Prometheus
//! collectors in a registry of the service's (feature `metrics`, [`KinesisMetrics`]) and
//! OpenTelemetry instruments on the global meter (feature `otel`). With neither feature,
//! [`Meters`] is empty and every report compiles to nothing.

// With no backend compiled in, the label names go unread.
#![cfg_attr(not(any(feature = "metrics", feature = "otel")), allow(dead_code))]

#[cfg(feature = "otel")]
mod otel;
#[cfg(feature = "metrics")]
mod prometheus;

use std::sync::Arc;
use std::time::Duration;

#[cfg(feature = "metrics")]
pub use prometheus::KinesisMetrics;
#[cfg(all(test, feature = "metrics"))]
pub(crate) use prometheus::scrape;

/// What happened to a lease, as counted by `aws_kinesis_lease_events_total{event}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LeaseEvent {
    /// This instance took the shard's lease and started reading it.
    Taken,
    /// This instance wrote its final checkpoint and released the lease.
    Released,
    /// The store refused a write: another instance holds the shard, or its row was deleted.
    Lost,
    /// The lease ran out by this instance's clock before a renewal landed.
    Expired,
    /// This instance handed the lease to the instance that asked for it (a handoff).
    HandedOver,
    /// The shard was read to its end and checkpointed `SHARD_END`.
    Finished,
}

impl LeaseEvent {
    /// The label value.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Taken => "taken",
            Self::Released => "released",
            Self::Lost => "lost",
            Self::Expired => "expired",
            Self::HandedOver => "handed_over",
            Self::Finished => "finished",
        }
    }
}

pub(crate) use series::ShardCount;
pub(crate) use shard::ShardMeters;

mod series;

/// Why a read is tried again after a backoff, as counted by `aws_kinesis_read_retries_total{cause}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReadRetry {
    /// GetRecords answered that the shard's read limits were exceeded.
    Throttled,
    /// A GetRecords or GetShardIterator call failed otherwise (an error, a timeout).
    Failed,
}

impl ReadRetry {
    /// The label value.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Throttled => "throttled",
            Self::Failed => "failed",
        }
    }
}

/// How a lease-table call ended, as its `error_type` on `messaging_client_operation_duration_seconds`
/// says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CallOutcome {
    /// The store answered the call.
    Ok,
    /// The store refused a conditional write (another owner, a moved counter): a fence
    /// working, not a fault.
    Refused,
    /// The call failed: an error from the store.
    Failed,
    /// The store refused the call for want of capacity (throttling): tried again.
    Throttled,
    /// No answer within the bound (the renewal interval); the call may still land.
    TimedOut,
    /// An exactly-once commit certainly not applied, and sent again (a transaction conflict,
    /// throttling).
    #[cfg_attr(
        not(feature = "dynamodb-lease"),
        expect(dead_code, reason = "only a transaction answers it")
    )]
    NotApplied,
    /// An exactly-once commit refused by one of the handler's own writes (its condition, a
    /// validation): nothing applied, the record delivered again.
    #[cfg_attr(
        not(feature = "dynamodb-lease"),
        expect(dead_code, reason = "only a transaction answers it")
    )]
    UserRefused,
}

impl CallOutcome {
    /// The error type (`error.type`), none for a call that answered.
    pub(crate) fn error_type(self) -> Option<&'static str> {
        match self {
            Self::Ok => None,
            Self::Refused => Some("refused"),
            Self::Failed => Some("failed"),
            Self::Throttled => Some("throttled"),
            Self::TimedOut => Some("timeout"),
            Self::NotApplied => Some("not_applied"),
            Self::UserRefused => Some("user_refused"),
        }
    }
}

/// Where the broker's events are counted: the backends the service handed it. Cheap to clone;
/// with no backend every call does nothing.
#[derive(Debug, Clone, Default)]
pub(crate) struct Meters {
    #[cfg(feature = "metrics")]
    prometheus: Option<KinesisMetrics>,
    #[cfg(feature = "otel")]
    otel: Option<Arc<otel::Instruments>>,
}

/// Calls `$call` on each backend that is set.
macro_rules! each {
    ($meters:expr, |$backend:ident| $call:expr) => {{
        #[cfg(feature = "metrics")]
        if let Some($backend) = &$meters.prometheus {
            $call;
        }
        #[cfg(feature = "otel")]
        if let Some($backend) = &$meters.otel {
            $call;
        }
    }};
}

// With no backend compiled in, the reports' arguments go nowhere.
#[cfg_attr(
    not(any(feature = "metrics", feature = "otel")),
    allow(unused_variables)
)]
impl Meters {
    /// Counts into `metrics` from now on, besides the backends already set.
    #[cfg(feature = "metrics")]
    pub(crate) fn with_prometheus(mut self, metrics: KinesisMetrics) -> Self {
        self.prometheus = Some(metrics);
        self
    }

    /// Counts into instruments made on the global meter as it is now: the service installs its
    /// meter provider (`ruststream::otel::Otel::builder().init()`) before connecting.
    #[cfg(feature = "otel")]
    pub(crate) fn with_global_meter(mut self) -> Self {
        self.otel = Some(Arc::new(otel::Instruments::from_global()));
        self
    }

    /// Whether any backend counts: a caller skips the work a report needs (a sum over a batch,
    /// a look at each record) when none does. A constant `false` without the features.
    pub(crate) fn counting(&self) -> bool {
        #[cfg(feature = "metrics")]
        if self.prometheus.is_some() {
            return true;
        }
        #[cfg(feature = "otel")]
        if self.otel.is_some() {
            return true;
        }
        false
    }

    /// Where one shard's events are counted, its labels bound.
    pub(crate) fn shard(
        &self,
        stream: &Arc<str>,
        shard: &Arc<str>,
        owner: &Arc<str>,
    ) -> ShardMeters {
        ShardMeters::new(self.clone(), stream, shard, owner)
    }

    /// Something happened to a lease `owner` held (or took).
    pub(crate) fn lease_event(&self, stream: &str, owner: &str, event: LeaseEvent) {
        each!(self, |backend| backend.lease_event(stream, owner, event));
    }

    /// A call the coordinator makes of the lease table keeps failing (`degraded`: what it keeps
    /// working stops until it recovers), or works again.
    pub(crate) fn coordination(&self, stream: &str, call: &'static str, degraded: bool) {
        each!(self, |backend| backend.coordination(stream, call, degraded));
    }

    /// A lease-table call of kind `call` ended as `outcome` after `took`: an operation
    /// `lease_table.<call>`.
    pub(crate) fn store_call(&self, call: &'static str, outcome: CallOutcome, took: Duration) {
        if self.counting() {
            self.operation(&format!("lease_table.{call}"), outcome.error_type(), took);
        }
    }

    /// A call (`operation`: a Kinesis API name, or `lease_table.<call>`) ended after `took`,
    /// answered (`error` none) or with the error type `error`.
    pub(crate) fn operation(&self, operation: &str, error: Option<&str>, took: Duration) {
        each!(self, |backend| backend.operation(operation, error, took));
    }

    /// One `PutRecords` call to `stream` answered: `written` publishes written, `failed`
    /// answered with an error (both may be 0, which makes the stream's series show).
    pub(crate) fn published(&self, stream: &str, written: u64, failed: u64) {
        each!(self, |backend| {
            backend.sent(stream, None, written);
            backend.sent(stream, Some("failed"), failed);
        });
    }

    /// `records` publishes whose records Kinesis rejected inside a PutRecords answer go out
    /// again.
    pub(crate) fn publish_retry(&self, stream: &str, records: u64) {
        each!(self, |backend| backend.publish_retry(stream, records));
    }
}

// After `each!`, which it uses.
mod shard;

/// The meters of `shard` of the stream `orders` held by `pod-a`, for the backends' tests.
#[cfg(test)]
pub(crate) fn of_shard(meters: &Meters, shard: &str) -> ShardMeters {
    meters.shard(&Arc::from("orders"), &Arc::from(shard), &Arc::from("pod-a"))
}

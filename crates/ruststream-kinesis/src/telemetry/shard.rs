//! One shard's meters: its stream, shard and owner bound once, so a reader reports an event
//! with nothing but its figures, and a per-shard metric is one method here and one in each
//! backend.

use std::sync::Arc;

use super::{LeaseEvent, Meters, ReadRetry, ShardCount};

/// Where one shard's reader counts: [`Meters`] with the shard's labels bound. Cheap to clone.
#[derive(Debug, Clone)]
pub(crate) struct ShardMeters {
    meters: Meters,
    stream: Arc<str>,
    shard: Arc<str>,
    owner: Arc<str>,
}

// With no backend compiled in, the reports' arguments go nowhere.
#[cfg_attr(
    not(any(feature = "metrics", feature = "otel")),
    allow(unused_variables)
)]
impl ShardMeters {
    pub(super) fn new(
        meters: Meters,
        stream: &Arc<str>,
        shard: &Arc<str>,
        owner: &Arc<str>,
    ) -> Self {
        Self {
            meters,
            stream: Arc::clone(stream),
            shard: Arc::clone(shard),
            owner: Arc::clone(owner),
        }
    }

    /// Whether any backend counts (see [`Meters::counting`]).
    pub(crate) fn counting(&self) -> bool {
        self.meters.counting()
    }

    /// A GetRecords answer (or a fan-out event): `records` Kinesis records of `bytes` bytes, and
    /// how far behind the shard's newest record the answer was.
    pub(crate) fn read(&self, records: u64, bytes: u64, millis_behind: Option<i64>) {
        self.count(ShardCount::RecordsRead, records);
        self.count(ShardCount::BytesRead, bytes);
        if let Some(millis) = millis_behind {
            each!(self.meters, |backend| backend.behind(
                &self.stream,
                &self.shard,
                millis
            ));
        }
    }

    /// `by` more of the shard's `count`.
    pub(crate) fn count(&self, count: ShardCount, by: u64) {
        each!(self.meters, |backend| backend.count(
            &self.stream,
            &self.shard,
            count,
            by
        ));
    }

    /// A read of the shard that is tried again after a backoff.
    pub(crate) fn read_retry(&self, cause: ReadRetry) {
        each!(self.meters, |backend| backend.read_retry(
            &self.stream,
            &self.shard,
            cause
        ));
    }

    /// After a lease write's answer: `records` deliveries were settled in order and are not yet
    /// covered by a checkpoint written.
    pub(crate) fn checkpoint_lag(&self, records: u64) {
        each!(self.meters, |backend| backend.checkpoint_lag(
            &self.stream,
            &self.shard,
            records
        ));
    }

    /// The shard has records behind it and delivered nothing for longer than its stall bound
    /// (`stalled`), or moves again.
    pub(crate) fn stalled(&self, stalled: bool) {
        each!(self.meters, |backend| backend.shard_stalled(
            &self.stream,
            &self.shard,
            stalled
        ));
    }

    /// Something happened to the shard's lease.
    pub(crate) fn lease_event(&self, event: LeaseEvent) {
        self.meters.lease_event(&self.stream, &self.owner, event);
    }

    /// The shard's reader started: its counters show from now on, at 0 until something happens
    /// (a series that appears only with its first fault hides it from `rate()` and from a look
    /// at the scrape).
    pub(crate) fn reader_started(&self) {
        each!(self.meters, |backend| backend
            .reader_started(&self.stream, &self.shard));
    }

    /// The shard's reader ended: the owner holds one lease fewer, and the shard's lag is no
    /// longer this instance's to tell.
    pub(crate) fn reader_ended(&self) {
        each!(self.meters, |backend| backend.reader_ended(
            &self.stream,
            &self.shard,
            &self.owner
        ));
    }
}

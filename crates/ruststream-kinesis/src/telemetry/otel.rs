//! The OpenTelemetry backend (feature `otel`): instruments on the global meter, named after the
//! OpenTelemetry messaging conventions where one exists (`messaging.client.operation.duration`,
//! `messaging.client.consumed.messages`, `messaging.client.sent.messages`, with `error.type` on
//! failures; the stream as `messaging.destination.name`, as the framework's own instruments name
//! it, and the shard as `messaging.destination.partition.id`; seconds and bytes as units), with
//! Kinesis's own figures under `aws.kinesis.*`.

use std::time::Duration;

use opentelemetry::KeyValue;
use opentelemetry::metrics::{Counter, Gauge, Histogram, Meter, UpDownCounter};

use super::series::ShardCount;
use super::{LeaseEvent, ReadRetry};

mod observed;

use observed::Observed;

/// `messaging.system`: Kinesis has no value of its own in the conventions' list.
const SYSTEM: &str = "aws_kinesis";

pub(super) struct Instruments {
    operations: Histogram<f64>,
    /// One per [`ShardCount`], at its index.
    shard_counts: Vec<Counter<u64>>,
    sent: Counter<u64>,
    behind: Observed<f64>,
    read_retries: Counter<u64>,
    checkpoint_lag: Observed<u64>,
    leases_held: UpDownCounter<i64>,
    lease_events: Counter<u64>,
    publish_retries: Counter<u64>,
    shard_stalled: Observed<i64>,
    coordination: Gauge<i64>,
}

impl std::fmt::Debug for Instruments {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Instruments").finish_non_exhaustive()
    }
}

fn counter(
    meter: &Meter,
    name: &'static str,
    unit: &'static str,
    what: &'static str,
) -> Counter<u64> {
    meter
        .u64_counter(name)
        .with_unit(unit)
        .with_description(what)
        .build()
}

/// `messaging.client.operation.duration`: every Kinesis and lease-table call.
fn operations(meter: &Meter) -> Histogram<f64> {
    meter
        .f64_histogram("messaging.client.operation.duration")
        .with_unit("s")
        .with_description(
            "Kinesis calls (messaging.operation.name: the API's name) and lease-table calls \
             (lease_table.<call>); error.type on failures.",
        )
        .build()
}

fn shard(stream: &str, shard: &str) -> [KeyValue; 3] {
    [
        KeyValue::new("messaging.system", SYSTEM),
        KeyValue::new("messaging.destination.name", stream.to_owned()),
        KeyValue::new("messaging.destination.partition.id", shard.to_owned()),
    ]
}

impl Instruments {
    /// Instruments made on the global meter provider as installed now.
    pub(super) fn from_global() -> Self {
        Self::on(&opentelemetry::global::meter("ruststream-kinesis"))
    }

    /// Instruments made on `meter`.
    fn on(meter: &Meter) -> Self {
        Self {
            operations: operations(meter),
            shard_counts: ShardCount::ALL
                .iter()
                .map(|count| {
                    let named = count.named();
                    counter(meter, named.otel, named.unit, named.help)
                })
                .collect(),
            sent: counter(
                meter,
                "messaging.client.sent.messages",
                "{message}",
                "Publishes answered; error.type on failures.",
            ),
            behind: Observed::new(|callback| {
                meter
                    .f64_observable_gauge("aws.kinesis.shard.behind")
                    .with_unit("s")
                    .with_description(
                        "How far the last read of the shard was behind its newest record, while \
                         this instance reads it.",
                    )
                    .with_callback(callback)
                    .build()
            }),
            read_retries: counter(
                meter,
                "aws.kinesis.read.retries",
                "{read}",
                "Reads tried again after a backoff, by cause.",
            ),
            checkpoint_lag: Observed::new(|callback| {
                meter
                    .u64_observable_gauge("aws.kinesis.checkpoint.lag")
                    .with_unit("{record}")
                    .with_description(
                        "Deliveries settled in order but not yet covered by a checkpoint written, \
                         while this instance reads the shard.",
                    )
                    .with_callback(callback)
                    .build()
            }),
            leases_held: meter
                .i64_up_down_counter("aws.kinesis.leases.held")
                .with_unit("{lease}")
                .with_description("Leases this instance holds.")
                .build(),
            lease_events: counter(
                meter,
                "aws.kinesis.lease.events",
                "{event}",
                "Lease events.",
            ),
            publish_retries: counter(
                meter,
                "aws.kinesis.publish.retries",
                "{record}",
                "Publishes whose records were rejected in a PutRecords answer, sent again.",
            ),
            shard_stalled: Observed::new(|callback| {
                meter
                    .i64_observable_gauge("aws.kinesis.shard.stalled")
                    .with_unit("{shard}")
                    .with_description(
                        "1 while the shard has records behind it and delivered nothing for \
                         longer than its stall bound, while this instance reads it.",
                    )
                    .with_callback(callback)
                    .build()
            }),
            coordination: meter
                .i64_gauge("aws.kinesis.coordination.degraded")
                .with_unit("{call}")
                .with_description("1 while a lease-table call of the coordinator keeps failing.")
                .build(),
        }
    }

    pub(super) fn count(&self, stream: &str, shard_id: &str, count: ShardCount, by: u64) {
        self.shard_counts[count.index()].add(by, &shard(stream, shard_id));
    }

    pub(super) fn behind(&self, stream: &str, shard_id: &str, millis: i64) {
        self.behind.set(stream, shard_id, millis as f64 / 1000.0);
    }

    pub(super) fn read_retry(&self, stream: &str, shard_id: &str, cause: ReadRetry) {
        self.read_retry_by(stream, shard_id, cause, 1);
    }

    fn read_retry_by(&self, stream: &str, shard_id: &str, cause: ReadRetry, reads: u64) {
        let [system, name, partition] = shard(stream, shard_id);
        self.read_retries.add(
            reads,
            &[
                system,
                name,
                partition,
                KeyValue::new("aws.kinesis.retry.cause", cause.as_str()),
            ],
        );
    }

    pub(super) fn checkpoint_lag(&self, stream: &str, shard_id: &str, records: u64) {
        self.checkpoint_lag.set(stream, shard_id, records);
    }

    fn lease(stream: &str, owner: &str) -> [KeyValue; 3] {
        [
            KeyValue::new("messaging.system", SYSTEM),
            KeyValue::new("messaging.destination.name", stream.to_owned()),
            KeyValue::new("aws.kinesis.lease.owner", owner.to_owned()),
        ]
    }

    pub(super) fn lease_event(&self, stream: &str, owner: &str, event: LeaseEvent) {
        let [system, name, holder] = Self::lease(stream, owner);
        if event == LeaseEvent::Taken {
            self.leases_held
                .add(1, &[system.clone(), name.clone(), holder.clone()]);
        }
        self.lease_events.add(
            1,
            &[
                system,
                name,
                holder,
                KeyValue::new("aws.kinesis.lease.event", event.as_str()),
            ],
        );
    }

    pub(super) fn reader_started(&self, stream: &str, shard_id: &str) {
        let labels = shard(stream, shard_id);
        for cause in [ReadRetry::Throttled, ReadRetry::Failed] {
            self.read_retry_by(stream, shard_id, cause, 0);
        }
        for count in &self.shard_counts {
            count.add(0, &labels);
        }
        self.checkpoint_lag.set(stream, shard_id, 0);
        self.shard_stalled.set(stream, shard_id, 0);
    }

    pub(super) fn reader_ended(&self, stream: &str, shard_id: &str, owner: &str) {
        self.leases_held.add(-1, &Self::lease(stream, owner));
        self.behind.forget(stream, shard_id);
        self.checkpoint_lag.forget(stream, shard_id);
        self.shard_stalled.forget(stream, shard_id);
    }

    pub(super) fn operation(&self, operation: &str, error: Option<&str>, took: Duration) {
        let mut attributes = vec![
            KeyValue::new("messaging.system", SYSTEM),
            KeyValue::new("messaging.operation.name", operation.to_owned()),
        ];
        if let Some(error) = error {
            attributes.push(KeyValue::new("error.type", error.to_owned()));
        }
        self.operations.record(took.as_secs_f64(), &attributes);
    }

    pub(super) fn sent(&self, stream: &str, error: Option<&str>, messages: u64) {
        let mut attributes = vec![
            KeyValue::new("messaging.system", SYSTEM),
            KeyValue::new("messaging.destination.name", stream.to_owned()),
        ];
        if let Some(error) = error {
            attributes.push(KeyValue::new("error.type", error.to_owned()));
        }
        self.sent.add(messages, &attributes);
    }

    pub(super) fn publish_retry(&self, stream: &str, records: u64) {
        self.publish_retries.add(
            records,
            &[
                KeyValue::new("messaging.system", SYSTEM),
                KeyValue::new("messaging.destination.name", stream.to_owned()),
            ],
        );
    }

    pub(super) fn shard_stalled(&self, stream: &str, shard_id: &str, stalled: bool) {
        self.shard_stalled.set(stream, shard_id, i64::from(stalled));
    }

    pub(super) fn coordination(&self, stream: &str, call: &'static str, degraded: bool) {
        self.coordination.record(
            i64::from(degraded),
            &[
                KeyValue::new("messaging.system", SYSTEM),
                KeyValue::new("messaging.destination.name", stream.to_owned()),
                KeyValue::new("aws.kinesis.call", call),
            ],
        );
    }
}

#[cfg(test)]
mod tests;

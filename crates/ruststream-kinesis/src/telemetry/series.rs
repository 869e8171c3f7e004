//! The per-shard counts, declared once: each backend makes one counter per [`ShardCount`] from
//! this table, shows every one at 0 from a reader's start, and counts into it by the variant. A
//! new per-shard count is a variant and its row here; neither backend can forget to declare it
//! or to zero it.

/// A count kept per shard (labelled by stream and shard) while this instance reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ShardCount {
    /// Messages handed out: user records, a KPL aggregate's each.
    Consumed,
    /// Kinesis records read (a KPL aggregate is one).
    RecordsRead,
    /// Bytes of Kinesis record data read.
    BytesRead,
    /// Shard iterators that expired and were asked for again.
    IteratorResets,
    /// Records with the KPL's magic that are no valid aggregate (delivered as they are).
    DecodeFailures,
}

/// How a series is named in each backend, and what it says of itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Named {
    /// The Prometheus name: base units, `_total` for a counter.
    pub(crate) prometheus: &'static str,
    /// The OpenTelemetry name.
    pub(crate) otel: &'static str,
    /// The OpenTelemetry unit.
    pub(crate) unit: &'static str,
    /// The help text (Prometheus) and description (OpenTelemetry).
    pub(crate) help: &'static str,
}

impl ShardCount {
    /// Every count, in the order of their discriminants (a backend's index).
    pub(crate) const ALL: [Self; 5] = [
        Self::Consumed,
        Self::RecordsRead,
        Self::BytesRead,
        Self::IteratorResets,
        Self::DecodeFailures,
    ];

    /// Where a backend keeps this count among its [`ALL`](Self::ALL).
    pub(crate) fn index(self) -> usize {
        self as usize
    }

    /// Its names and help.
    pub(crate) fn named(self) -> Named {
        let (prometheus, otel, unit, help) = match self {
            Self::Consumed => (
                "messaging_client_consumed_messages_total",
                "messaging.client.consumed.messages",
                "{message}",
                "Messages read from the shard: user records, a KPL aggregate's each.",
            ),
            Self::RecordsRead => (
                "aws_kinesis_records_read_total",
                "aws.kinesis.records.read",
                "{record}",
                "Kinesis records read (a KPL aggregate is one).",
            ),
            Self::BytesRead => (
                "aws_kinesis_read_bytes_total",
                "aws.kinesis.read.size",
                "By",
                "Bytes of Kinesis record data read.",
            ),
            Self::IteratorResets => (
                "aws_kinesis_iterator_resets_total",
                "aws.kinesis.iterator.resets",
                "{iterator}",
                "Shard iterators that expired and were asked for again.",
            ),
            Self::DecodeFailures => (
                "aws_kinesis_kpl_decode_failures_total",
                "aws.kinesis.kpl.decode_failures",
                "{record}",
                "Records with the KPL's magic that are no valid aggregate, delivered as they are.",
            ),
        };
        Named {
            prometheus,
            otel,
            unit,
            help,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_count_is_listed_once_at_its_own_index() {
        for (at, count) in ShardCount::ALL.into_iter().enumerate() {
            assert_eq!(count.index(), at, "{count:?}");
        }
        let mut names: Vec<_> = ShardCount::ALL
            .iter()
            .flat_map(|count| [count.named().prometheus, count.named().otel])
            .collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), 2 * ShardCount::ALL.len(), "a name given twice");
    }
}

use std::sync::Arc;
use std::time::SystemTime;

/// Where a shard starts reading: the argument of `start_at(..)` and of a seek.
///
/// A delivery's own position ([`Positioned::position`](ruststream::Positioned::position)) is
/// [`AtSequence`](Self::AtSequence): seeking to it delivers that record again, and what follows
/// it in its shard.
///
/// # Examples
///
/// ```
/// use std::time::{Duration, SystemTime};
/// use ruststream_kinesis::KinesisPosition;
///
/// let replay = KinesisPosition::TrimHorizon;
/// let last_hour = KinesisPosition::AtTimestamp(SystemTime::now() - Duration::from_secs(3600));
/// let one = KinesisPosition::at_sequence("shardId-000000000000", "4959033827149025660855969");
/// assert_eq!(one.shard(), Some("shardId-000000000000"));
/// # let _ = (replay, last_hour);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KinesisPosition {
    /// The oldest record each shard still holds.
    TrimHorizon,
    /// The tip: only records written from now on.
    Latest,
    /// The first record of each shard written at or after this time.
    AtTimestamp(SystemTime),
    /// This record of this shard, and what follows it.
    AtSequence {
        /// The shard.
        shard: Arc<str>,
        /// The record's sequence number.
        sequence: Arc<str>,
    },
}

impl KinesisPosition {
    /// The position of one record: seeking to it delivers that record again.
    #[must_use]
    pub fn at_sequence(shard: impl Into<Arc<str>>, sequence: impl Into<Arc<str>>) -> Self {
        Self::AtSequence {
            shard: shard.into(),
            sequence: sequence.into(),
        }
    }

    /// The one shard this position is about, `None` for a position of every shard.
    #[must_use]
    pub fn shard(&self) -> Option<&str> {
        match self {
            Self::AtSequence { shard, .. } => Some(shard),
            _ => None,
        }
    }

    /// Whether this position applies to `shard`.
    pub(crate) fn applies_to(&self, shard: &str) -> bool {
        self.shard().is_none_or(|only| only == shard)
    }
}

/// Where a reader opens one shard: the resolved form of a stored checkpoint or a position.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ShardStart {
    /// After a checkpointed or already-delivered record.
    After(Arc<str>),
    /// At a position.
    At(KinesisPosition),
}

/// Compares two Kinesis sequence numbers (decimal strings of up to 128 bits).
#[cfg(any(test, feature = "testing"))]
pub(crate) fn sequence_cmp(a: &str, b: &str) -> std::cmp::Ordering {
    a.len().cmp(&b.len()).then_with(|| a.cmp(b))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cmp::Ordering;

    #[test]
    fn sequence_numbers_compare_as_numbers() {
        assert_eq!(sequence_cmp("9", "10"), Ordering::Less);
        assert_eq!(sequence_cmp("495903", "495903"), Ordering::Equal);
        assert_eq!(sequence_cmp("495904", "495903"), Ordering::Greater);
    }

    #[test]
    fn a_sequence_position_applies_to_its_shard_only() {
        let at = KinesisPosition::at_sequence("shardId-1", "5");
        assert!(at.applies_to("shardId-1"));
        assert!(!at.applies_to("shardId-2"));
        assert!(KinesisPosition::TrimHorizon.applies_to("shardId-2"));
    }
}

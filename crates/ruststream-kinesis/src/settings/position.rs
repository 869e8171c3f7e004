//! Where a subscription, a seek or a shard's reader starts, and how a start is recorded as a
//! checkpoint so a later owner starts no later.

use std::sync::Arc;
use std::time::SystemTime;

use crate::SharedStr;
use crate::lease::{millis, split_within, within_checkpoint};

/// Where a shard starts reading: the argument of `start_at(..)` and of a seek.
///
/// A shard taken without a checkpoint starts at the tip ([`Latest`](Self::Latest)) unless a start
/// position says otherwise, and a shard born from a split or a merge at its oldest record; a
/// shard with a checkpoint resumes after it. A
/// `start_at(..)` at the mount site is a seek made at every startup: it moves the shards this
/// instance holds at that moment (see [`KinesisSeeker`](crate::KinesisSeeker)).
///
/// A delivery's own position ([`Positioned::position`](ruststream::Positioned::position)) is
/// [`AtSequence`](Self::AtSequence), or [`AtSubSequence`](Self::AtSubSequence) for a user record
/// of a KPL aggregate: seeking to it delivers that record again, and what follows it in its
/// shard.
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
///
/// At the mount site:
///
/// ```
/// use ruststream_kinesis::prelude::*;
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Debug, PartialEq, Deserialize, Serialize, Outgoing)]
/// #[outgoing(name = "orders")]
/// struct Order {
///     id: u64,
/// }
///
/// #[subscriber(KinesisStream::new("orders"))]
/// async fn audit(order: &Order) -> HandlerOutcome {
///     tracing::info!(order.id, "audited");
///     HandlerOutcome::ack()
/// }
///
/// // At every startup, the shards this instance holds start again at their oldest records.
/// let app = RustStream::new(AppInfo::new("audit", "0.1.0")).with_broker(KinesisBroker::new(), |b| {
///     b.include(audit.start_at(KinesisPosition::TrimHorizon));
/// });
/// # let _ = app;
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KinesisPosition {
    /// The oldest record each shard still holds.
    TrimHorizon,
    /// The tip: only records written from now on.
    Latest,
    /// The first record of each shard written at or after this time.
    AtTimestamp(SystemTime),
    /// This record of this shard, and what follows it. A delivery's position shares its
    /// sequence number with the records of its fetch ([`SharedStr`]): one kept for long keeps
    /// [`SharedStr::detached`] of it.
    AtSequence {
        /// The shard.
        shard: Arc<str>,
        /// The record's sequence number.
        sequence: SharedStr,
    },
    /// This user record of a KPL aggregate (see the KPL records page), and what follows it: the
    /// aggregate is read again from this user record on.
    AtSubSequence {
        /// The shard.
        shard: Arc<str>,
        /// The aggregate's sequence number.
        sequence: SharedStr,
        /// The user record's index in the aggregate.
        sub_sequence: u64,
    },
}

impl KinesisPosition {
    /// The position of one record: seeking to it delivers that record again.
    #[must_use]
    pub fn at_sequence(shard: impl Into<Arc<str>>, sequence: impl Into<SharedStr>) -> Self {
        Self::AtSequence {
            shard: shard.into(),
            sequence: sequence.into(),
        }
    }

    /// The position of one user record of a KPL aggregate: seeking to it delivers that user
    /// record again, and what follows it.
    ///
    /// ```
    /// use ruststream_kinesis::KinesisPosition;
    ///
    /// let third = KinesisPosition::at_sub_sequence("shardId-000000000000", "4959033827", 2);
    /// assert_eq!(third.shard(), Some("shardId-000000000000"));
    /// ```
    #[must_use]
    pub fn at_sub_sequence(
        shard: impl Into<Arc<str>>,
        sequence: impl Into<SharedStr>,
        sub_sequence: u64,
    ) -> Self {
        Self::AtSubSequence {
            shard: shard.into(),
            sequence: sequence.into(),
            sub_sequence,
        }
    }

    /// The one shard this position is about, `None` for a position of every shard.
    #[must_use]
    pub fn shard(&self) -> Option<&str> {
        match self {
            Self::AtSequence { shard, .. } | Self::AtSubSequence { shard, .. } => Some(shard),
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
    After(SharedStr),
    /// Inside the KPL aggregate at `sequence`, after its user record `through`: the aggregate
    /// is read again (`AT_SEQUENCE_NUMBER`) and its user records up to `through` are dropped.
    Within { sequence: SharedStr, through: u64 },
    /// At a position.
    At(KinesisPosition),
}

/// Where a reader starts, as a log line says it.
impl std::fmt::Display for ShardStart {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::After(sequence) => write!(f, "after sequence number {sequence}"),
            Self::Within { sequence, through } => write!(
                f,
                "after user record {through} of the KPL aggregate at sequence number {sequence}"
            ),
            Self::At(position) => write!(f, "at {position:?}"),
        }
    }
}

impl ShardStart {
    /// The aggregate and the last settled user record a start inside an aggregate skips.
    pub(crate) fn within(&self) -> Option<(SharedStr, u64)> {
        match self {
            Self::Within { sequence, through } => Some((sequence.clone(), *through)),
            _ => None,
        }
    }

    /// Where later iterators of a shard sought to `to` at `now_ms` start until a record is
    /// delivered: the position as a checkpoint records it (the tip as the moment of the seek,
    /// not a later tip; a later user record of an aggregate as a start inside it).
    pub(crate) fn resuming_at(to: &KinesisPosition, now_ms: u64) -> Self {
        Self::from_checkpoint(
            to.shard().unwrap_or_default(),
            &Self::seek_checkpoint(to, now_ms),
        )
    }

    /// The checkpoint a seek to `to` at `now_ms` writes before any record of its position is
    /// settled, so that a handover meanwhile carries it: the next owner reads on from the
    /// seek's position, not from before it. A start position is marked `SEEK:` (`SEEK:TRIM_HORIZON`,
    /// `SEEK:AT_SEQUENCE:<n>`, `SEEK:AT_TIMESTAMP:<ms>`): a recorded start tells the coordinator
    /// that the shard has not moved past its beginning, and its parents may still matter, while a
    /// seek is the handler's own choice of place, made long after the parents were finished.
    pub(crate) fn seek_checkpoint(to: &KinesisPosition, now_ms: u64) -> String {
        let checkpoint = Self::At(to.clone()).to_checkpoint(now_ms);
        if Self::is_recorded_start(&checkpoint) {
            format!("{SEEK}{checkpoint}")
        } else {
            checkpoint
        }
    }

    /// Whether `checkpoint` is a start a first owner recorded (`TRIM_HORIZON`,
    /// `AT_TIMESTAMP:<ms>`, `AT_SEQUENCE:<n>`), not a seek's or a record's.
    fn is_recorded_start(checkpoint: &str) -> bool {
        checkpoint == TRIM_HORIZON
            || checkpoint.starts_with(AT_TIMESTAMP)
            || checkpoint.starts_with(AT_SEQUENCE)
    }

    /// Whether `checkpoint` is a seek's position ([`seek_checkpoint`](Self::seek_checkpoint)).
    pub(crate) fn is_seek_checkpoint(checkpoint: &str) -> bool {
        checkpoint.starts_with(SEEK)
    }

    /// Where a shard resumes from a stored checkpoint: after a sequence number, or at the start
    /// position its first owner recorded before reading (see [`ShardStart::to_checkpoint`]).
    pub(crate) fn from_checkpoint(shard: &str, checkpoint: &str) -> Self {
        let checkpoint = checkpoint.strip_prefix(SEEK).unwrap_or(checkpoint);
        if checkpoint == TRIM_HORIZON {
            return Self::At(KinesisPosition::TrimHorizon);
        }
        if let Some(ms) = checkpoint
            .strip_prefix(AT_TIMESTAMP)
            .and_then(|ms| ms.parse::<u64>().ok())
        {
            let at = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms);
            return Self::At(KinesisPosition::AtTimestamp(at));
        }
        if let Some(sequence) = checkpoint.strip_prefix(AT_SEQUENCE) {
            return Self::At(KinesisPosition::at_sequence(shard, sequence));
        }
        if let Some((sequence, through)) = split_within(checkpoint) {
            return Self::Within {
                sequence: SharedStr::from(sequence),
                through,
            };
        }
        Self::After(SharedStr::from(checkpoint))
    }

    /// The checkpoint a first owner writes before it reads a shard that has none, so an owner
    /// that takes over before the first acknowledgement starts no later than it did: the tip is
    /// recorded as the time it was opened, less the clock skew tolerance.
    pub(crate) fn to_checkpoint(&self, opened_ms: u64) -> String {
        match self {
            Self::After(sequence) => sequence.to_string(),
            Self::Within { sequence, through } => within_checkpoint(sequence, *through),
            Self::At(KinesisPosition::TrimHorizon) => TRIM_HORIZON.to_owned(),
            Self::At(KinesisPosition::Latest) => {
                let tolerance = millis(crate::SKEW_TOLERANCE);
                format!("{AT_TIMESTAMP}{}", opened_ms.saturating_sub(tolerance))
            }
            Self::At(KinesisPosition::AtTimestamp(at)) => {
                let ms = at.duration_since(std::time::UNIX_EPOCH).map_or(0, millis);
                format!("{AT_TIMESTAMP}{ms}")
            }
            Self::At(KinesisPosition::AtSequence { sequence, .. }) => {
                format!("{AT_SEQUENCE}{sequence}")
            }
            // From its first user record: at the aggregate; from a later one: inside it, after
            // the one before.
            Self::At(KinesisPosition::AtSubSequence {
                sequence,
                sub_sequence,
                ..
            }) => match sub_sequence.checked_sub(1) {
                None => format!("{AT_SEQUENCE}{sequence}"),
                Some(before) => within_checkpoint(sequence, before),
            },
        }
    }
}

/// The checkpoint of a shard whose first owner started at its oldest record.
const TRIM_HORIZON: &str = "TRIM_HORIZON";
/// The prefix of a checkpoint that records a start time, in epoch milliseconds.
const AT_TIMESTAMP: &str = "AT_TIMESTAMP:";
/// The prefix of a checkpoint that records a start at (not after) a sequence number.
const AT_SEQUENCE: &str = "AT_SEQUENCE:";
/// The prefix of a start a handler's seek wrote (before any record of its position settled).
const SEEK: &str = "SEEK:";

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
    fn a_start_recorded_as_a_checkpoint_reads_back_as_the_same_start() {
        let starts = [
            ShardStart::At(KinesisPosition::TrimHorizon),
            ShardStart::At(KinesisPosition::at_sequence("s-1", "42")),
            ShardStart::After(SharedStr::from("43")),
            ShardStart::Within {
                sequence: SharedStr::from(
                    "49590338271490256608559692538361571095921575989136588898",
                ),
                through: 7,
            },
            ShardStart::At(KinesisPosition::AtTimestamp(
                std::time::UNIX_EPOCH + std::time::Duration::from_millis(5_000),
            )),
        ];
        for start in starts {
            assert_eq!(
                ShardStart::from_checkpoint("s-1", &start.to_checkpoint(0)),
                start
            );
        }
        // A user record: from the first, the aggregate; from a later one, after the one before.
        let first = ShardStart::At(KinesisPosition::at_sub_sequence("s-1", "42", 0));
        assert_eq!(
            ShardStart::from_checkpoint("s-1", &first.to_checkpoint(0)),
            ShardStart::At(KinesisPosition::at_sequence("s-1", "42"))
        );
        let third = ShardStart::At(KinesisPosition::at_sub_sequence("s-1", "42", 2));
        assert_eq!(
            ShardStart::from_checkpoint("s-1", &third.to_checkpoint(0)),
            ShardStart::Within {
                sequence: SharedStr::from("42"),
                through: 1
            }
        );
        // The tip is recorded as the time it was opened, less the skew tolerance.
        let tip = ShardStart::At(KinesisPosition::Latest).to_checkpoint(10_000);
        assert_eq!(
            ShardStart::from_checkpoint("s-1", &tip),
            ShardStart::At(KinesisPosition::AtTimestamp(
                std::time::UNIX_EPOCH + std::time::Duration::from_millis(9_000)
            ))
        );
    }

    #[test]
    fn a_sequence_position_applies_to_its_shard_only() {
        let at = KinesisPosition::at_sequence("shardId-1", "5");
        assert!(at.applies_to("shardId-1"));
        assert!(!at.applies_to("shardId-2"));
        assert!(KinesisPosition::TrimHorizon.applies_to("shardId-2"));
    }
}

//! How soon a shard's reader calls `GetRecords` again. Pure decisions: the reader sleeps what
//! they say.
//!
//! A reader that is behind reads on at the service's limit of five calls per second per shard,
//! so a backlog drains fast. A reader that has caught up calls once per poll interval: under a
//! steady trickle that is one call (and at most one checkpoint move) per shard per interval
//! instead of five, which leaves the shard's read budget to the stream's other applications and
//! keeps lease-table writes down.
//!
//! The rules are the same wherever a shard is read; their durations are a [`Pace`], which the
//! Kinesis a reader talks to picks: the service's limits ([`Pace::service`]), or none where
//! records are pushed to the reader as they are written ([`Pace::pushed`], in process).

use std::time::Duration;

/// At most five `GetRecords` calls per second per shard.
pub(crate) const MIN_CALL_GAP: Duration = Duration::from_millis(200);
/// The longest wait after a throttled or failed call.
pub(crate) const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// At most one `SubscribeToShard` call per second per consumer and shard.
pub(crate) const SUBSCRIBE_GAP: Duration = Duration::from_secs(1);
/// How long the driver waits for a subscription's next event before it counts the subscription
/// as failed and subscribes again: the service pushes an event at least every few seconds, so
/// silence this long is a dead connection, which would otherwise leave the shard unread behind
/// a lease that is still renewed.
pub(crate) const EVENT_SILENCE_LIMIT: Duration = Duration::from_secs(30);

/// The durations of a shard's reading rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Pace {
    /// The least time between two `GetRecords` calls of a shard.
    pub(crate) call_gap: Duration,
    /// What a reader that reached the tip waits for before it reads again.
    pub(crate) tip: TipWait,
    /// The least time between two `SubscribeToShard` calls of a shard.
    pub(crate) subscribe_gap: Duration,
    /// How long a subscription may stay silent before it counts as dead; `None`: no limit.
    pub(crate) event_silence: Option<Duration>,
}

/// What a reader at the tip waits for before its next `GetRecords`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TipWait {
    /// This long after its last call (the stream's poll interval).
    Interval(Duration),
    /// News that records were written to the shard (`ShardMachine::news`): the rule fan-out
    /// follows ("pushed: read as soon as the window has room"), applied to polling.
    UntilNews,
}

impl Pace {
    /// The service's limits, and one call per `poll_interval` at the tip.
    pub(crate) fn service(poll_interval: Duration) -> Self {
        Self {
            call_gap: MIN_CALL_GAP,
            tip: TipWait::Interval(poll_interval),
            subscribe_gap: SUBSCRIBE_GAP,
            event_silence: Some(EVENT_SILENCE_LIMIT),
        }
    }

    /// No gaps, a tip that waits for news, and no silence limit: for a Kinesis that tells its
    /// readers when records arrive (in process, where a test's clock may be paused and a wait
    /// would only delay what the test waits for).
    pub(crate) fn pushed() -> Self {
        Self {
            call_gap: Duration::ZERO,
            tip: TipWait::UntilNews,
            subscribe_gap: Duration::ZERO,
            event_silence: None,
        }
    }
}

/// Whether the answer of a `GetRecords` call says the reader has reached the shard's tip.
///
/// A full batch means more may be waiting whatever `MillisBehindLatest` says; a `MillisBehindLatest`
/// above zero means records lie further on, even when this answer was empty (Kinesis can answer
/// empty while the iterator crosses a stretch of the shard with no records). An answer without
/// `MillisBehindLatest` counts as caught up unless the batch was full.
pub(crate) fn caught_up(returned: usize, limit: u32, millis_behind: Option<i64>) -> bool {
    let full = u32::try_from(returned).map_or(true, |n| n >= limit);
    !full && millis_behind.is_none_or(|ms| ms <= 0)
}

/// The longest wait after `failures` throttled or failed calls in a row: doubling from the
/// call gap, capped; the wait itself is drawn between the call gap and this (full jitter), so
/// readers of many shards do not retry in step.
pub(crate) fn backoff_ceiling(failures: u32) -> Duration {
    MIN_CALL_GAP
        .saturating_mul(1 << failures.min(5))
        .clamp(MIN_CALL_GAP, MAX_BACKOFF)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_batch_at_the_tip_is_caught_up() {
        assert!(caught_up(3, 1000, Some(0)));
        assert!(caught_up(0, 1000, Some(0)));
        assert!(caught_up(0, 1000, None));
        assert!(caught_up(999, 1000, None));
    }

    #[test]
    fn a_full_batch_is_behind_whatever_millis_behind_says() {
        assert!(!caught_up(1000, 1000, Some(0)));
        assert!(!caught_up(1000, 1000, None));
        assert!(!caught_up(10, 10, Some(0)));
    }

    #[test]
    fn millis_behind_above_zero_is_behind_even_when_empty() {
        assert!(!caught_up(0, 1000, Some(86_400_000)));
        assert!(!caught_up(5, 1000, Some(1)));
    }

    #[test]
    fn the_backoff_doubles_from_the_call_gap_up_to_its_cap() {
        assert_eq!(backoff_ceiling(0), MIN_CALL_GAP);
        assert_eq!(backoff_ceiling(1), MIN_CALL_GAP * 2);
        assert_eq!(backoff_ceiling(3), MIN_CALL_GAP * 8);
        assert_eq!(backoff_ceiling(5), MAX_BACKOFF);
        assert_eq!(backoff_ceiling(40), MAX_BACKOFF);
        for failures in 0..10 {
            assert!(backoff_ceiling(failures) <= backoff_ceiling(failures + 1));
        }
    }
}

//! The lease table's time: the clock-skew tolerance takes are judged with, and the wall clock
//! (epoch milliseconds) that expiries and beats carry.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How far apart the clocks of two instances may be without both holding one shard.
///
/// A taker treats a lease as expired only once its expiry lies this far in its own past, and a
/// holder stops reading a safety margin before its lease runs out by its own clocks (monotonic
/// and wall: either one ending the lease stops it, so a suspended host stops too). Together
/// they tolerate a skew of this value plus that margin (2 s with the defaults); keep instances
/// on NTP, which holds clocks within milliseconds.
pub const SKEW_TOLERANCE: Duration = Duration::from_secs(1);

/// Milliseconds since the Unix epoch by this machine's clock: the unit of
/// [`LeaseState::expiry_ms`](crate::LeaseState::expiry_ms).
///
/// # Examples
///
/// ```
/// assert!(ruststream_kinesis::epoch_millis() > 1_700_000_000_000);
/// ```
#[must_use]
pub fn epoch_millis() -> u64 {
    epoch_millis_of(SystemTime::now())
}

/// `at` in whole milliseconds since the Unix epoch (0 before it).
pub(crate) fn epoch_millis_of(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH).map_or(0, millis)
}

/// `duration` in whole milliseconds, the unit of the lease table; saturating.
pub(crate) fn millis(duration: Duration) -> u64 {
    // Not `as_millis`: its `u128` costs more than the two parts, and the clock is read so on
    // every record's lease check.
    duration
        .as_secs()
        .saturating_mul(1000)
        .saturating_add(u64::from(duration.subsec_millis()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_milliseconds_are_as_many_as_as_millis_counts_and_saturate() {
        for duration in [
            Duration::ZERO,
            Duration::from_nanos(999_999),
            Duration::from_nanos(1_000_000),
            Duration::new(1_765_000_000, 999_999_999),
            Duration::new(u64::MAX / 1000, 615_999_999),
        ] {
            assert_eq!(
                u128::from(millis(duration)),
                duration.as_millis(),
                "{duration:?}"
            );
        }
        assert_eq!(
            millis(Duration::new(u64::MAX / 1000, 616_000_000)),
            u64::MAX
        );
        assert_eq!(millis(Duration::MAX), u64::MAX);
    }
}

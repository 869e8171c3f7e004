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
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, millis)
}

/// `duration` in whole milliseconds, the unit of the lease table; saturating.
pub(crate) fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

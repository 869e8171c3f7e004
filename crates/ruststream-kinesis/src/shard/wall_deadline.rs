//! The lease's wall-clock deadline in the wall clock's own type, for the check at every
//! handler's start: a `SystemTime` reading compared as it is, where turning each reading into
//! epoch milliseconds (`duration_since`, then the millisecond count) cost more than the rest of
//! the check.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The last deadline asked about, as epoch milliseconds and as a `SystemTime` (renewals move
/// it every few seconds; records ask about it thousands of times in between).
#[derive(Debug, Clone, Copy)]
pub(crate) struct WallDeadline {
    millis: u64,
    /// `None`: past what a `SystemTime` holds, so never reached.
    at: Option<SystemTime>,
}

impl Default for WallDeadline {
    fn default() -> Self {
        Self {
            millis: 0,
            at: Some(UNIX_EPOCH),
        }
    }
}

impl WallDeadline {
    /// Whether `now` reads before the epoch millisecond `millis`: the same answer as
    /// `epoch_millis() < millis` would give for the same reading. A reading in whole
    /// milliseconds is below a whole deadline exactly when the reading itself is; a reading
    /// before the epoch counts as the epoch, below every deadline but 0.
    #[inline]
    pub(crate) fn before(&mut self, now: SystemTime, millis: u64) -> bool {
        if self.millis != millis {
            self.millis = millis;
            self.at = UNIX_EPOCH.checked_add(Duration::from_millis(millis));
        }
        millis > 0 && self.at.is_none_or(|at| now < at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lease::epoch_millis_of;

    /// What the check answered before: the reading in whole epoch milliseconds (0 before the
    /// epoch), below the deadline.
    fn by_millis(now: SystemTime, deadline: u64) -> bool {
        epoch_millis_of(now) < deadline
    }

    #[test]
    fn a_reading_is_before_the_deadline_exactly_when_its_epoch_milliseconds_are() {
        let mut cached = WallDeadline::default();
        let at = |nanos: u64| UNIX_EPOCH + Duration::from_nanos(nanos);
        let readings = [
            UNIX_EPOCH - Duration::from_secs(5),
            UNIX_EPOCH,
            at(999_999),
            at(1_000_000),
            at(1_765_000_000_999_999_999),
            at(1_765_000_001_000_000_000),
            SystemTime::now(),
        ];
        let deadlines = [0, 1, 2, 1_765_000_001_000, 1_765_000_000_999, u64::MAX];
        for deadline in deadlines {
            for now in readings {
                assert_eq!(
                    cached.before(now, deadline),
                    by_millis(now, deadline),
                    "{now:?} against {deadline} ms"
                );
            }
        }
    }
}

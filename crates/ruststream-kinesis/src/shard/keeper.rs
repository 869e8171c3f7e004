//! The lease keeper's decisions for one held shard, with no I/O and no real clock: when to renew,
//! how long the shard may still deliver, and what a refused or failed renewal means.
//!
//! The driver (`reader::keep_lease`) sends the renewals and sleeps; this state machine
//! only answers questions about moments it is given, so the coordinator's simulation drives it
//! with a virtual clock. The rules (DESIGN §3):
//!
//! - a lease granted by a call sent at `sent` may be used until `sent + lease - holder_margin` by
//!   this instance's monotonic clock: the holder's half of the skew tolerance, the taker's half
//!   being [`SKEW_TOLERANCE`](crate::SKEW_TOLERANCE) in
//!   [`LeaseState::is_expired_at`](crate::LeaseState::is_expired_at) (the driver's `ShardHandle`
//!   holds the same deadline by the wall clock too, for a host that was suspended);
//! - a renewal is sent every `renew`, counted from the moment the previous one was sent;
//! - a refused renewal stops the shard at once, without a checkpoint;
//! - a renewal that failed for transport reasons is retried while the lease is still valid by
//!   this instance's clock, and the shard stops when too little of it is left for another try.

use std::ops::Add;
use std::time::Duration;

use crate::clock::Instant;

use crate::LeaseTimings;

/// The shortest wait before retrying a failed renewal; with less than this left of the lease the
/// keeper gives up instead (a renewal sent that late could not save the lease).
pub(crate) const MIN_RETRY: Duration = Duration::from_millis(50);

/// A moment the keeper reasons about: [`Instant`] in the driver, a virtual time since the start
/// of a simulation (a [`Duration`]) in tests.
pub(crate) trait Moment: Copy + Ord + Add<Duration, Output = Self> {
    /// How long after `earlier` this moment is; zero when it is not after it.
    fn saturating_since(self, earlier: Self) -> Duration;
}

impl Moment for Instant {
    fn saturating_since(self, earlier: Self) -> Duration {
        self.saturating_duration_since(earlier)
    }
}

impl Moment for Duration {
    fn saturating_since(self, earlier: Self) -> Duration {
        self.saturating_sub(earlier)
    }
}

/// What the driver does after a renewal that did not succeed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KeeperAction<T> {
    /// Renew again at this moment, which lies before the lease runs out by this instance's clock.
    RetryAt(T),
    /// Deliver nothing more from the shard, and write no final checkpoint: after a refusal
    /// another owner holds the row, and after a lease that ran out while the store failed a
    /// taker may hold it by now.
    Stop,
}

/// The keeper of one shard's lease: its validity by this instance's clock and its next renewal.
#[derive(Debug, Clone)]
pub(crate) struct LeaseKeeper<T = Instant> {
    timings: LeaseTimings,
    valid_until: T,
    next_renewal: T,
    stopped: bool,
}

impl<T: Moment> LeaseKeeper<T> {
    /// Until when a lease granted (taken or renewed) by a call sent at `sent` may be used:
    /// `sent + lease - holder_margin`. The row's expiry is written from a clock read after
    /// `sent`, so the holder's deadline lies at least `holder_margin` before it.
    pub(crate) fn valid_after(timings: &LeaseTimings, sent: T) -> T {
        sent + timings.usable_lease()
    }

    /// The keeper of a lease the take granted until `valid_until` (see
    /// [`valid_after`](Self::valid_after)); the first renewal is due `renew` after `now`.
    pub(crate) fn new(timings: LeaseTimings, valid_until: T, now: T) -> Self {
        Self {
            timings,
            valid_until,
            next_renewal: now + timings.renew(),
            stopped: false,
        }
    }

    /// When to send the next renewal (after a failure: the retry).
    pub(crate) fn next_renewal(&self) -> T {
        self.next_renewal
    }

    /// Until when the shard may deliver by this instance's clock (exclusive).
    #[cfg_attr(
        not(test),
        allow(
            dead_code,
            reason = "the simulation asks the keeper; the driver's ShardHandle keeps both clocks' deadlines"
        )
    )]
    pub(crate) fn valid_until(&self) -> T {
        self.valid_until
    }

    /// A renewal sent at `sent_at` succeeded: the lease holds until
    /// [`valid_after(sent_at)`](Self::valid_after), and the next renewal is due `renew` after
    /// `sent_at`. An answer that arrives late never shortens the lease.
    pub(crate) fn on_renewed(&mut self, sent_at: T) {
        self.valid_until = self
            .valid_until
            .max(Self::valid_after(&self.timings, sent_at));
        self.next_renewal = sent_at + self.timings.renew();
    }

    /// The store refused a renewal: another owner took the row, or it was released. The shard
    /// stops at once and writes no checkpoint.
    pub(crate) fn on_refused(&mut self) -> KeeperAction<T> {
        self.stopped = true;
        KeeperAction::Stop
    }

    /// A renewal failed at `now` for transport reasons: retry after a third of the renewal
    /// interval, or half of what is left of the lease when that is sooner; stop when less than
    /// [`MIN_RETRY`] of the lease is left.
    pub(crate) fn on_failed(&mut self, now: T) -> KeeperAction<T> {
        let left = self.valid_until.saturating_since(now);
        if left <= MIN_RETRY {
            self.stopped = true;
            return KeeperAction::Stop;
        }
        let wait = (self.timings.renew() / 3).min(left / 2).max(MIN_RETRY / 2);
        self.next_renewal = now + wait;
        KeeperAction::RetryAt(self.next_renewal)
    }

    /// Stops the shard for good: a refusal seen elsewhere (a checkpoint write), or the reader
    /// ended.
    #[cfg_attr(
        not(test),
        allow(
            dead_code,
            reason = "the simulation's reader asks the keeper; the driver's ShardHandle keeps its own flag"
        )
    )]
    pub(crate) fn stop(&mut self) {
        self.stopped = true;
    }

    /// Whether the shard has been stopped.
    #[cfg_attr(
        not(test),
        allow(
            dead_code,
            reason = "the simulation's reader asks the keeper; the driver's ShardHandle keeps its own flag"
        )
    )]
    pub(crate) fn is_stopped(&self) -> bool {
        self.stopped
    }

    /// Whether the shard may hand out a record at `now`: it was not stopped, and its lease is
    /// valid by this instance's clock.
    #[cfg_attr(
        not(test),
        allow(
            dead_code,
            reason = "the simulation's reader asks the keeper; the driver's ShardHandle keeps its own flag"
        )
    )]
    pub(crate) fn may_deliver(&self, now: T) -> bool {
        !self.stopped && now < self.valid_until
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    fn timings() -> LeaseTimings {
        LeaseTimings::default()
    }

    fn keeper_taken_at(sent: Duration) -> LeaseKeeper<Duration> {
        let until = LeaseKeeper::valid_after(&timings(), sent);
        LeaseKeeper::new(timings(), until, sent)
    }

    #[test]
    fn a_taken_lease_delivers_until_lease_minus_the_holder_margin() {
        let keeper = keeper_taken_at(5 * S);
        // 10 s lease, 1 s margin: from 5 s the lease may be used until 14 s (exclusive).
        assert_eq!(keeper.valid_until(), 14 * S);
        assert!(keeper.may_deliver(5 * S));
        assert!(keeper.may_deliver(14 * S - Duration::from_millis(1)));
        assert!(!keeper.may_deliver(14 * S));
        assert_eq!(keeper.next_renewal(), 8 * S);
    }

    #[test]
    fn a_renewal_extends_from_the_moment_it_was_sent() {
        let mut keeper = keeper_taken_at(Duration::ZERO);
        // Sent at 3 s, answered much later: the lease counts from the send.
        keeper.on_renewed(3 * S);
        assert_eq!(keeper.valid_until(), 12 * S);
        assert_eq!(keeper.next_renewal(), 6 * S);
        assert!(keeper.may_deliver(11 * S));
        assert!(!keeper.may_deliver(12 * S));
    }

    #[test]
    fn an_earlier_renewal_answered_late_never_shortens_the_lease() {
        let mut keeper = keeper_taken_at(5 * S);
        keeper.on_renewed(Duration::ZERO);
        assert_eq!(keeper.valid_until(), 14 * S);
    }

    #[test]
    fn a_refused_renewal_stops_at_once_without_a_checkpoint() {
        let mut keeper = keeper_taken_at(Duration::ZERO);
        assert_eq!(keeper.on_refused(), KeeperAction::Stop);
        assert!(keeper.is_stopped());
        assert!(!keeper.may_deliver(S));
    }

    #[test]
    fn a_failed_renewal_is_retried_before_the_lease_runs_out() {
        let mut keeper = keeper_taken_at(Duration::ZERO);
        // 9 s valid, failed at 3 s: 6 s left, retry after renew / 3 = 1 s.
        assert_eq!(keeper.on_failed(3 * S), KeeperAction::RetryAt(4 * S));
        assert_eq!(keeper.next_renewal(), 4 * S);
        // Failed at 8.5 s: 0.5 s left, retry after half of it.
        let at = Duration::from_millis(8_500);
        assert_eq!(
            keeper.on_failed(at),
            KeeperAction::RetryAt(at + Duration::from_millis(250))
        );
        assert!(keeper.may_deliver(at));
        // With less than MIN_RETRY left the keeper gives up.
        let late = 9 * S - MIN_RETRY;
        assert_eq!(keeper.on_failed(late), KeeperAction::Stop);
        assert!(!keeper.may_deliver(late));
    }

    #[test]
    fn every_retry_lands_before_the_lease_runs_out() {
        let mut keeper = keeper_taken_at(Duration::ZERO);
        let mut now = 3 * S;
        loop {
            match keeper.on_failed(now) {
                KeeperAction::RetryAt(at) => {
                    assert!(at > now && at < keeper.valid_until(), "{at:?}");
                    now = at;
                }
                KeeperAction::Stop => {
                    assert!(keeper.valid_until().saturating_sub(now) <= MIN_RETRY);
                    break;
                }
            }
        }
    }

    #[test]
    fn a_success_after_failures_resumes_the_normal_cadence() {
        let mut keeper = keeper_taken_at(Duration::ZERO);
        assert!(matches!(keeper.on_failed(3 * S), KeeperAction::RetryAt(_)));
        keeper.on_renewed(4 * S);
        assert_eq!(keeper.valid_until(), 13 * S);
        assert_eq!(keeper.next_renewal(), 7 * S);
    }

    #[test]
    fn the_keeper_runs_on_real_instants() {
        let now = Instant::now();
        let until = LeaseKeeper::valid_after(&timings(), now);
        let mut keeper = LeaseKeeper::new(timings(), until, now);
        assert!(keeper.may_deliver(now));
        assert_eq!(keeper.next_renewal(), now + 3 * S);
        keeper.stop();
        assert!(!keeper.may_deliver(now));
    }

    #[test]
    fn short_leases_keep_their_margin() {
        let timings = LeaseTimings::new(3 * S, S).unwrap();
        let until = LeaseKeeper::valid_after(&timings, Duration::ZERO);
        // A tenth of the lease: 300 ms.
        assert_eq!(until, Duration::from_millis(2_700));
    }
}

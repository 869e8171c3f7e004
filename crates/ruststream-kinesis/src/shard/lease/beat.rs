//! Liveness by beat (issue 29, item 3): the leases an instance holds on a stream kept alive by
//! one write of its beat in the stream's notice per renewal interval, instead of one write per
//! lease. A state machine with no I/O and no clock of its own, as [`ShardLease`](super::ShardLease)
//! is: the driver asks it for the next beat at `now`, writes it, and hands back the answer.
//!
//! The rules, and why they keep one holder per shard:
//!
//! - A beat written at `sent` (`sent_ms` by the wall clock) says "alive until `sent_ms +
//!   lease`", and, once answered, lets the holder count on it until `sent + lease -
//!   holder_margin` by each clock: the holder's half of the skew tolerance, as a row's lease.
//!   The store keeps the latest beat of an owner and never moves it back (a late beat write
//!   lands on no newer one), so what a taker reads is never shorter than what the holder counts
//!   on.
//! - The beats answered form a **chain**: a beat answered while the last one still counted
//!   extends the chain; a beat answered after it lapsed starts a new chain at its answer. The
//!   chain's `since` is that answer: from then on the notice has shown this instance alive
//!   without a gap, since a beat answered was applied before its answer.
//! - A shard's lease follows the chain only if the chain began while the shard's own lease (its
//!   take, or a checkpoint that renewed it) still counted ([`BeatGrant::covers`]): then the
//!   shard has been covered without a gap since its take, by its row or by the beat, and no
//!   other instance could judge both lapsed. A chain that broke never revives a shard: another
//!   instance may have taken it in the gap, and the taker's write does not touch the beat.
//! - A taker judges a beat lapsed by the wall clock at which it *sent* the notice read (plus
//!   the skew tolerance), not by the moment it decides: a read sent after the lapse saw every
//!   beat answered before it.
//! - A beat whose answer is lost may still land: beats that land unanswered keep this instance
//!   alive in the notice while its chain counts for nothing, and no one would take its shards.
//!   So once beats whose fate is unknown have been tried for a whole lease with no chain
//!   counting, the beat falls quiet ([`BeatNews::Quiet`], [`BeatLease::quiet_for`]): its last
//!   beat lapses for every taker, its shards are taken over, and it tries again after. Beats
//!   refused unapplied (throttled) never land, hold nothing, and never make it quiet.

use std::time::Duration;

use super::{MIN_RETRY, Moment};
use crate::LeaseTimings;
use crate::lease::millis;

/// What an unbroken chain of answered beats lets the holder count on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BeatGrant<T> {
    /// When the chain's first beat was answered, by the monotonic clock.
    pub(crate) since: T,
    /// The same moment by the wall clock, in milliseconds since the epoch.
    pub(crate) since_ms: u64,
    /// Until when (exclusive) the chain counts, by the monotonic clock.
    pub(crate) valid_until: T,
    /// The same moment by the wall clock.
    pub(crate) valid_until_ms: u64,
}

impl<T: Moment> BeatGrant<T> {
    /// Whether the chain counts at `now` (`now_ms` by the wall clock), by both clocks.
    pub(crate) fn counts_at(&self, now: T, now_ms: u64) -> bool {
        now < self.valid_until && now_ms < self.valid_until_ms
    }

    /// Whether the chain may carry a shard lease that counts until `valid_until`
    /// (`valid_until_ms`): it began while that lease still counted, by both clocks.
    pub(crate) fn covers(&self, valid_until: T, valid_until_ms: u64) -> bool {
        self.since < valid_until && self.since_ms < valid_until_ms
    }
}

/// What the driver does next about the beat.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BeatNext<T> {
    /// Write the beat, alive until `until_ms` (epoch milliseconds), then hand its answer to
    /// [`BeatLease::on_answer`].
    Send { until_ms: u64 },
    /// Nothing to write before this moment (or before the beat in flight answers: `None`).
    Wait(Option<T>),
}

/// How the store answered the beat in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BeatAnswer {
    /// The beat (or a newer one of this owner) stands in the notice.
    Done,
    /// No answer the caller can trust: it may land later, or never.
    Failed,
    /// Refused before it was applied (throttled): it never lands.
    NotApplied,
}

/// What happened to the chain at an answer, for the driver to say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BeatNews {
    /// The first chain began.
    Began,
    /// The chain had lapsed and a new one began: the shards held on the old one stopped, and
    /// are taken again.
    Restarted,
    /// A beat failed (the chain still counts until its last answered beat runs out).
    Failed,
    /// Beats were tried for a whole lease with no chain counting: the beat falls quiet
    /// ([`BeatLease::quiet_for`]), so that its shards are taken over, before it tries again.
    Quiet,
}

#[derive(Debug, Clone, Copy)]
struct InFlight<T> {
    sent: T,
    sent_ms: u64,
}

/// One instance's beat on one stream, as a chain of grants.
#[derive(Debug, Clone)]
pub(crate) struct BeatLease<T> {
    timings: LeaseTimings,
    in_flight: Option<InFlight<T>>,
    /// When the next beat is due; `None` before the first.
    next_beat: Option<T>,
    grant: Option<BeatGrant<T>>,
    /// When the first beat was sent since a chain last counted (or since the start), while
    /// none counts: a whole lease of tries from there, and the beat falls quiet.
    trying_since: Option<T>,
}

impl<T: Moment> BeatLease<T> {
    /// A beat not yet written: the first is due at once.
    pub(crate) fn new(timings: LeaseTimings) -> Self {
        Self {
            timings,
            in_flight: None,
            next_beat: None,
            grant: None,
            trying_since: None,
        }
    }

    /// What to do at `now` (`now_ms` by the wall clock). A beat returned here is in flight from
    /// this moment until its answer.
    pub(crate) fn next(&mut self, now: T, now_ms: u64) -> BeatNext<T> {
        if self.in_flight.is_some() {
            return BeatNext::Wait(None);
        }
        if let Some(due) = self.next_beat
            && now < due
        {
            return BeatNext::Wait(Some(due));
        }
        if !self.counts_now(now, now_ms) {
            self.trying_since.get_or_insert(now);
        }
        self.in_flight = Some(InFlight {
            sent: now,
            sent_ms: now_ms,
        });
        BeatNext::Send {
            until_ms: now_ms.saturating_add(millis(self.timings.lease())),
        }
    }

    /// The store answered the beat in flight at `now` (`now_ms` by the wall clock).
    pub(crate) fn on_answer(
        &mut self,
        now: T,
        now_ms: u64,
        answer: BeatAnswer,
    ) -> Option<BeatNews> {
        let flight = self.in_flight.take()?;
        match answer {
            BeatAnswer::Done => {
                self.next_beat = Some(flight.sent + self.timings.renew());
                let valid_until = flight.sent + self.timings.usable_lease();
                let valid_until_ms = flight
                    .sent_ms
                    .saturating_add(millis(self.timings.usable_lease()));
                match &mut self.grant {
                    Some(grant) if grant.counts_at(now, now_ms) => {
                        grant.valid_until = grant.valid_until.max(valid_until);
                        grant.valid_until_ms = grant.valid_until_ms.max(valid_until_ms);
                        self.trying_since = None;
                        None
                    }
                    // Answered too late to count even from its send: no chain begins (the next beat
                    // is due at once).
                    _ if now >= valid_until || now_ms >= valid_until_ms => None,
                    lapsed => {
                        let news = if lapsed.is_some() {
                            BeatNews::Restarted
                        } else {
                            BeatNews::Began
                        };
                        *lapsed = Some(BeatGrant {
                            since: now,
                            since_ms: now_ms,
                            valid_until,
                            valid_until_ms,
                        });
                        self.trying_since = None;
                        Some(news)
                    }
                }
            }
            BeatAnswer::Failed => {
                if let Some(since) = self.trying_since
                    && now.saturating_since(since) >= self.timings.lease()
                    && !self.counts_now(now, now_ms)
                {
                    self.next_beat = Some(now + self.quiet_for());
                    self.trying_since = None;
                    return Some(BeatNews::Quiet);
                }
                self.next_beat = Some(now + self.retry_wait(now));
                Some(BeatNews::Failed)
            }
            BeatAnswer::NotApplied => {
                self.next_beat = Some(now + self.retry_wait(now));
                Some(BeatNews::Failed)
            }
        }
    }

    /// How long a quiet beat writes nothing: long enough that a beat of it which landed
    /// unanswered lapses for every taker (a lease and the skew tolerance after its send, the
    /// send up to a call's bound, the renewal interval, before the answer), and that each taker
    /// then looks at least once (a listing interval, or a handover poll when it is shorter),
    /// with a renewal interval to spare; two leases at least.
    pub(crate) fn quiet_for(&self) -> Duration {
        let timings = &self.timings;
        let look = match timings.handover_poll_interval() {
            poll if poll.is_zero() => timings.listing_interval(),
            poll => poll.min(timings.listing_interval()),
        };
        (timings.lease() + crate::SKEW_TOLERANCE + timings.renew() * 2 + look)
            .max(timings.lease() * 2)
    }

    /// Whether the chain counts at `now` (`now_ms` by the wall clock).
    fn counts_now(&self, now: T, now_ms: u64) -> bool {
        self.grant.is_some_and(|grant| grant.counts_at(now, now_ms))
    }

    /// How long after `now` a failed beat is written again: a third of the renewal interval,
    /// at most half of what is left of the chain, at least half of [`MIN_RETRY`]. Unlike a
    /// shard's renewal the beat never gives up: a beat that lands after the chain lapsed starts
    /// the next one.
    fn retry_wait(&self, now: T) -> Duration {
        let third = self.timings.renew() / 3;
        match &self.grant {
            Some(grant) if now < grant.valid_until => third
                .min(grant.valid_until.saturating_since(now) / 2)
                .max(MIN_RETRY / 2),
            _ => third,
        }
    }

    /// The chain as it stands, whether it still counts or not; `None` before a beat answered.
    pub(crate) fn grant(&self) -> Option<BeatGrant<T>> {
        self.grant
    }

    /// Whether the chain counts at `now` (`now_ms` by the wall clock): this instance may take
    /// shards, and hold those the chain carries.
    #[cfg(test)]
    pub(crate) fn counts_at(&self, now: T, now_ms: u64) -> bool {
        self.counts_now(now, now_ms)
    }
}

#[cfg(test)]
mod tests;

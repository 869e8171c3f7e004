//! How fast an instance takes shards, pure (`now` in, a count and a moment out): a token bucket
//! whose rate is this instance's share of the fleet's take budget, and a pause after the lease
//! table throttled a take. A fleet that starts together on a large stream
//! would otherwise write a take for every shard within a second or two (12,000 in the first 5 s
//! at 10,000 shards and 100 instances, the simulation found), beside the renewals of every lease
//! already taken: a fresh on-demand DynamoDB table accepts 4,000 writes a second.
//!
//! The budget is [`FLEET_TAKES_PER_SECOND`] for the whole fleet. An instance's share is its part
//! of what the fleet takes now ([`Share`]): the takes its last plan made out of the shards free
//! to anyone then (a balancing instance plans its share of them, so the parts add up to the
//! whole), never less than an even split among the instances it knows to be alive, nor more
//! than the budget; a second's worth may go at once. A stream of `S` shards is taken in about
//! `S / budget` seconds whatever the fleet's size (20 s at 10,000 shards): the instances that
//! still take at the end take at the whole budget between them, not at their even split. Small
//! streams (a few hundred shards) are taken at once. A throttled take
//! empties the bucket and pauses every take for a backoff that doubles with each throttled take
//! in a row (from 1 s up to the longer of the lease and the listing interval), jittered; a
//! granted take ends the row. Renewals are not paced: they keep leases alive, and a throttled one
//! is retried while the lease lasts, as any failed renewal is.

use std::time::Duration;

use crate::shard::lease::Moment;

/// The first wait after a take that failed once the lease was won (its iterator refused, a
/// legacy row in the way); it doubles with each failure in a row, up to the longer of the lease
/// and the listing interval (10 s by default): a shard whose takes failed during an outage is
/// taken again no later than a lapsed lease would be.
const TAKE_BACKOFF: Duration = Duration::from_secs(1);

/// The longest wait after `failures` failed takes of a shard in a row: doubling from
/// [`TAKE_BACKOFF`], capped at `longest` (the longer of the lease and the listing interval).
pub(crate) fn take_backoff_ceiling(failures: u32, longest: Duration) -> Duration {
    TAKE_BACKOFF
        .saturating_mul(1 << failures.saturating_sub(1).min(10))
        .min(longest.max(TAKE_BACKOFF))
}

/// The wait after `failures` failed (or throttled) takes in a row: between half the ceiling
/// ([`take_backoff_ceiling`]) and all of it, `coin` drawing where, so that instances failing
/// together do not try again in step.
pub(crate) fn take_backoff(failures: u32, longest: Duration, coin: u64) -> Duration {
    let ceiling = crate::lease::millis(take_backoff_ceiling(failures, longest));
    Duration::from_millis(ceiling / 2 + coin % (ceiling - ceiling / 2 + 1))
}

/// How many takes a second the instances of one stream's fleet write together: an eighth of
/// what a fresh on-demand table accepts (4,000 writes a second), which leaves room for the
/// renewals of 10,000 leases (3,333 a second) and the fleet's beats.
pub(crate) const FLEET_TAKES_PER_SECOND: u64 = 500;

/// How many instances an instance counts in its fleet before it knows its peers (a renewal
/// interval after a notice showed its own beat: `Coordinator::knows_peers`): it takes at a
/// fortieth of the budget (12 takes at once, 12.5 a second) until then. A fleet of 100 that
/// starts together thus writes about 1,250 takes a second, and as many first checkpoints, for
/// the four or five seconds it takes them to know each other, rather than 100 whole budgets,
/// each racing for the same first shards (5,002 writes in a second at 2,000 shards and 20
/// instances, the simulation found; at a twentieth, 100 instances by beat wrote 4,569 in a
/// second), while a lone instance on a small stream still takes a dozen shards at once, and one
/// on a large stream takes at the whole budget a few seconds later.
pub(crate) const PEERS_UNKNOWN: usize = 40;

/// A token is a million of these: refills are counted in microseconds.
const MICROS: u64 = 1_000_000;

/// What an instance's take rate is its part of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Share {
    /// The instances it knows to be alive (itself among them).
    pub(crate) live: usize,
    /// The takes its last plan made, and the shards free to anyone (or handed to it) then.
    pub(crate) planned: usize,
    pub(crate) free: usize,
}

impl Share {
    /// An even split among `live` instances: nothing planned yet, or an instance that does not
    /// balance (each plans every free shard, so its plan says nothing of its part).
    pub(crate) fn even(live: usize) -> Self {
        Self {
            live,
            planned: 0,
            free: 0,
        }
    }
}

/// One instance's pace of takes on one stream.
#[derive(Debug, Clone)]
pub(crate) struct TakePace<T> {
    /// Takes allowed now, in millionths.
    micros: u64,
    /// When the bucket was last filled, or when it fills from after a throttled take; `None`:
    /// never used (it starts full).
    at: Option<T>,
    /// Throttled takes in a row.
    throttles: u32,
    /// The fleet's takes a second ([`FLEET_TAKES_PER_SECOND`]; the simulation's schedules draw
    /// smaller ones, so that their few shards are paced too).
    budget: u64,
}

impl<T: Moment> Default for TakePace<T> {
    fn default() -> Self {
        Self {
            micros: 0,
            at: None,
            throttles: 0,
            budget: FLEET_TAKES_PER_SECOND,
        }
    }
}

impl<T: Moment> TakePace<T> {
    /// A pace whose fleet takes `budget` shards a second.
    #[cfg(test)]
    pub(crate) fn with_budget(budget: u64) -> Self {
        Self {
            budget,
            ..Self::default()
        }
    }

    /// The takes a second of an instance with `share` of the fleet's budget: one at least.
    fn rate(&self, share: Share) -> u64 {
        let even = self.budget / share.live.max(1) as u64;
        let pool = share.free.max(share.planned).max(1) as u64;
        let planned =
            u64::try_from(u128::from(self.budget) * share.planned as u128 / u128::from(pool))
                .unwrap_or(u64::MAX);
        even.max(planned).clamp(1, self.budget.max(1))
    }

    /// How long the fleet's budget takes to take `shards` shards.
    pub(crate) fn time_for(&self, shards: usize) -> Duration {
        let shards = u64::try_from(shards).unwrap_or(u64::MAX);
        Duration::from_millis(shards.saturating_mul(1_000) / self.budget.max(1))
    }

    /// How many takes may go out at `now`, at `share` of the fleet's budget.
    pub(crate) fn allowance(&mut self, now: T, share: Share) -> usize {
        let rate = self.rate(share);
        let capacity = rate.saturating_mul(MICROS);
        self.micros = match self.at {
            None => capacity,
            Some(at) => {
                let elapsed =
                    u64::try_from(now.saturating_since(at).as_micros()).unwrap_or(u64::MAX);
                self.micros
                    .saturating_add(elapsed.saturating_mul(rate))
                    .min(capacity)
            }
        };
        self.at = Some(self.at.map_or(now, |at| at.max(now)));
        usize::try_from(self.micros / MICROS).unwrap_or(usize::MAX)
    }

    /// `takes` went out.
    pub(crate) fn spend(&mut self, takes: usize) {
        let spent = u64::try_from(takes)
            .unwrap_or(u64::MAX)
            .saturating_mul(MICROS);
        self.micros = self.micros.saturating_sub(spent);
    }

    /// When the next take may go out, asked at `now` with no allowance left, at `share` of the
    /// fleet's budget.
    pub(crate) fn next_at(&self, now: T, share: Share) -> T {
        let missing = MICROS.saturating_sub(self.micros % MICROS);
        let wait = Duration::from_micros(missing.div_ceil(self.rate(share)));
        self.at.map_or(now, |at| at.max(now)) + wait
    }

    /// The lease table throttled a take at `now`: every take pauses for a backoff, doubling with
    /// each pause in a row up to `longest`; `coin` draws its jitter. Answers when takes go out
    /// again, if this began a pause: a take of the same batch answered during the pause (sent
    /// before it) neither lengthens it nor counts as another in a row.
    pub(crate) fn throttled(&mut self, now: T, longest: Duration, coin: u64) -> Option<T> {
        if self.at.is_some_and(|at| at > now) && self.throttles > 0 {
            return None;
        }
        self.throttles = self.throttles.saturating_add(1);
        let until = now + take_backoff(self.throttles, longest, coin);
        // Empty until then, and filling from then on: no burst when the pause ends.
        let paused = self.at.map_or(until, |at| at.max(until));
        self.at = Some(paused);
        self.micros = 0;
        Some(paused)
    }

    /// A take was granted: the throttled row is over.
    pub(crate) fn granted(&mut self) {
        self.throttles = 0;
    }

    /// Throttled takes in a row.
    #[cfg(test)]
    pub(crate) fn throttles(&self) -> u32 {
        self.throttles
    }
}

#[cfg(test)]
mod tests;

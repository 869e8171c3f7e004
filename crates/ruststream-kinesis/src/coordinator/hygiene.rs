//! Which rows of its stream a listing round deletes, so that the table does not grow with every
//! resharding: the row of a finished shard once every child moved past its start (a closed
//! shard without a row whose children all did counts as finished, `plan::verdict`), and the row
//! of a shard gone from the stream once no listed child still needs it to tell where it starts;
//! either only after it has been so for a grace period. A row with an unexpired lease is never
//! deleted, and a deletion is conditioned on the counter the round read, so a row written since
//! stays.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use super::full_read_turns::Turn;
use super::plan::{self, Rows};
use crate::LeaseTimings;
use crate::kinesis::shards::ShardInfo;
use crate::lease::{LeaseState, millis};
use crate::shard::lease::Moment;

/// How many listing intervals a row must have been one no reader needs before it is deleted:
/// 5 minutes with the default 10 s.
const GRACE_LISTINGS: u32 = 30;
/// The least grace, in leases: 100 s with the default 10 s lease.
const GRACE_LEASES: u32 = 10;
/// How many listing intervals apart the fleet reads every row of the stream whatever else it
/// knows (5 minutes by default): for their own sake, when it needs none to decide its takes (an
/// instance that reads every shard), and to catch what no signal tells a round that plans on the
/// rows it last read (`machine/steady.rs`: a row changed by hand, a bump that failed). The
/// instances alive by their beats take turns, one such interval each
/// ([`full_read_turns`](super::full_read_turns)): alone, an instance reads every row every
/// interval; one of `n` instances, every `n` intervals (`n` as its last notice read counted
/// them). A row is deleted at the first read a grace after it became one no reader
/// needs: 5 to 10 minutes after, by default, for a lone instance, or sooner when a change has the
/// rows read.
pub(crate) const FULL_READ_LISTINGS: u32 = 30;

/// A row to delete: the shard, and the counter it had when the round read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Deletion {
    pub(crate) shard: Arc<str>,
    pub(crate) counter: u64,
}

/// What the rounds remember between them to delete rows: since when each row has been one no
/// reader needs.
#[derive(Debug)]
pub(crate) struct Hygiene<T> {
    grace: Duration,
    every: Duration,
    /// Since when each row has been deletable, by this instance's rounds.
    since: HashMap<Arc<str>, T>,
    /// When a round last had every row of the stream.
    last_full: Option<T>,
    /// This instance's turn among the instances alive by their beats, as the last notice read
    /// showed ([`turn_read`](Self::turn_read)).
    turn: Turn,
    /// When that turn has the next full read due (`None`: reading alone, every interval).
    turn_at: Option<T>,
    /// From when (epoch ms) a full read is owed whatever the turn, until one is made: after a
    /// request for a handoff could have been answered last
    /// ([`read_owed_from`](Self::read_owed_from)); 0 for none.
    owed_from_ms: u64,
}

impl<T: Moment> Hygiene<T> {
    /// With the grace period `timings` give ([`GRACE_LISTINGS`] listing intervals, and at least
    /// [`GRACE_LEASES`] leases, however short the listing interval: a take on its way lives no
    /// longer than a few of its bounds, a third of a lease each), reading the rows for their own
    /// sake every [`FULL_READ_LISTINGS`] listing intervals.
    pub(crate) fn new(timings: &LeaseTimings) -> Self {
        let grace =
            (timings.listing_interval() * GRACE_LISTINGS).max(timings.lease() * GRACE_LEASES);
        Self::with_grace_every(grace, timings.listing_interval() * FULL_READ_LISTINGS)
    }

    /// The grace period: no deletion comes sooner after a row became one no reader needs.
    pub(crate) fn grace(&self) -> Duration {
        self.grace
    }

    /// With a grace period of `grace`, reading the rows for their own sake at every round.
    #[cfg(test)]
    pub(crate) fn with_grace(grace: Duration) -> Self {
        Self::with_grace_every(grace, Duration::ZERO)
    }

    /// With a grace period of `grace`, reading every row at least `every` apart.
    pub(crate) fn with_grace_every(grace: Duration, every: Duration) -> Self {
        Self {
            grace,
            every,
            since: HashMap::new(),
            last_full: None,
            turn: Turn::ALONE,
            turn_at: None,
            owed_from_ms: 0,
        }
    }

    /// Whether a round at `now` that needs no row to decide its takes reads them all anyway: at
    /// its turn, or, reading alone, an interval after the last full read.
    pub(crate) fn due(&self, now: T) -> bool {
        let Some(last) = self.last_full else {
            return true;
        };
        match self.turn_at {
            None => now.saturating_since(last) >= self.every,
            Some(at) => now >= at,
        }
    }

    /// A round at `now` (`now_ms` by the wall clock) read every row of the stream (one `list`);
    /// `sent_ms`: when the read was sent, by the wall clock; one sent before a full read owed
    /// ([`read_owed_from`](Self::read_owed_from)) does not pay it.
    pub(crate) fn read_all(&mut self, now: T, now_ms: u64, sent_ms: u64) {
        self.last_full = Some(now);
        if sent_ms >= self.owed_from_ms {
            self.owed_from_ms = 0;
        }
        self.schedule_turn(now, now_ms);
    }

    /// Whether a read sent at `now_ms` would pay a full read owed: it must then show the latest
    /// writes (no signal told of the write it is owed for).
    pub(crate) fn owes_read(&self, now_ms: u64) -> bool {
        self.owed_from_ms != 0 && now_ms >= self.owed_from_ms
    }

    /// A full read is owed from `from_ms` (epoch ms), whatever the turn: the moment after which
    /// a request for a handoff this instance made can no longer be answered. A hand-over that
    /// lands after the request ran out by the asker's clock (which then no longer reads the
    /// rows at each round) and whose bump of the notice failed names this instance in a row
    /// that every other instance takes for held, kept alive by its beat: only its own full read
    /// finds it, and its turn may be hours away.
    pub(crate) fn read_owed_from(&mut self, from_ms: u64) {
        self.owed_from_ms = self.owed_from_ms.max(from_ms);
    }

    /// A notice read at `now` (`now_ms`) showed this instance's `turn` among the live ones.
    pub(crate) fn turn_read(&mut self, turn: Turn, now: T, now_ms: u64) {
        self.turn = turn;
        self.schedule_turn(now, now_ms);
    }

    fn schedule_turn(&mut self, now: T, now_ms: u64) {
        self.turn_at = None;
        let Some(last) = self.last_full else {
            return;
        };
        if self.turn.instances() <= 1 || self.every.is_zero() {
            return;
        }
        // The last full read by the wall clock as it reads now, not as it read then: a clock
        // stepped back since would otherwise put every slot of this turn before that read, and
        // the turn off for as long as the step.
        let last_ms = now_ms.saturating_sub(millis(now.saturating_since(last)));
        let mut from_ms = self.turn.due_from_ms(millis(self.every), now_ms, last_ms);
        if self.owed_from_ms != 0 {
            from_ms = from_ms.min(self.owed_from_ms);
        }
        self.turn_at = Some(now + Duration::from_millis(from_ms.saturating_sub(now_ms)));
    }

    /// The rows of `rows` (as the store answered, nothing added) that the round at `now` deletes:
    /// those that have been deletable (below) for the whole grace period, by this instance's
    /// rounds. The grace also outlasts any take still on its way: one sent before the shard
    /// finished and landing after the deletion would create the row afresh, and the shard would
    /// be read again after its children.
    pub(crate) fn deletions(
        &mut self,
        listing: &[ShardInfo],
        rows: &Rows,
        now: T,
        now_ms: u64,
    ) -> Vec<Deletion> {
        let listed = plan::listed(listing);
        let mut deletions = Vec::new();
        for (shard, row) in rows {
            let Some(row) = row else {
                continue;
            };
            if !(row.is_expired_at(now_ms) && Self::deletable(shard, row, listing, &listed, rows)) {
                self.since.remove(shard);
                continue;
            }
            let since = *self.since.entry(Arc::clone(shard)).or_insert(now);
            if now.saturating_since(since) >= self.grace {
                deletions.push(Deletion {
                    shard: Arc::clone(shard),
                    counter: row.counter,
                });
            }
        }
        deletions.sort_by(|a, b| a.shard.cmp(&b.shard));
        deletions
    }

    /// Whether `shard`'s `row` is one no reader needs: finished, or gone from the listing, with
    /// every listed child moved past its start (and a finished shard that is still listed has at
    /// least one child, by which the verdict then knows it finished).
    fn deletable(
        shard: &Arc<str>,
        row: &LeaseState,
        listing: &[ShardInfo],
        listed: &plan::Listed<'_>,
        rows: &Rows,
    ) -> bool {
        match listed.get(shard.as_ref()) {
            Some(info) => row.is_finished() && plan::children_moved_on(info, listed, rows),
            None => {
                plan::children_in(listing, shard).all(|child| plan::moved_on(child, listed, rows))
            }
        }
    }

    /// `shard`'s row was deleted (or is gone): nothing more to remember of it.
    pub(crate) fn deleted(&mut self, shard: &str) {
        self.since.remove(shard);
    }
}

#[cfg(test)]
mod tests;

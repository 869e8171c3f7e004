//! When the handover poll may skip weighing the shards (design §1b, "the poll's weight"). Every
//! poll asks whether the rows as last read, each live holder's lease counted until its beat,
//! show a shard this instance could take now; the answer weighs every shard (each verdict, then
//! the balance's shares), so at 10,000 shards every instance would weigh 10,000 rows a second.
//!
//! The answer is a function of what this instance knows (the rows, the listing, its own sets of
//! finished, skipped and gone shards, its take backoffs, the free shards it left to others, its
//! pause: each change of those bumps [`Coordinator`]'s epoch), of the shards it reads, of the
//! instances alive by their beats, and of the time. A weighing that found nothing keeps the first
//! two and the earliest moment a time rule could change its answer:
//!
//! - a row whose lease is not kept alive by a live holder's beat: its expiry passed (with the
//!   skew tolerance), and a balancing instance's grace after it (`lapsed_for`);
//! - a handoff request in a row: it runs out;
//! - a take backoff ends; a free shard left to others reaches its grace.
//!
//! A row held by an instance alive by its beat is not expired, whatever the rows say, for as
//! long as that beat stays live; its lapse changes the set of live instances, which every poll
//! compares. A crashed holder's shards are thus found as fast as before (lease, skew tolerance
//! and one poll). The poll weighs again when any of it moved, when the wall clock stepped back
//! past the weighing, and at least every 6 listing intervals (a minute); a steady round whose
//! plan found nothing to take or ask for is kept alike, and the next steady round skips its
//! plan while it holds. A time rule added later and forgotten here costs up to that minute (and
//! every full read of the rows, this instance's turn among the live ones, weighs again), never a
//! wedge; the random
//! schedules check every skip against a weighing made anyway (`verifying_skips`).

use std::collections::HashSet;
use std::sync::Arc;

use super::Coordinator;
use crate::coordinator::plan::Rows;
use crate::lease::{HANDOFF_REQUEST_LIFETIME, Notice, millis};
use crate::shard::lease::Moment;

/// What the last weighing that found nothing takeable saw, and until when its answer holds.
#[derive(Debug)]
pub(super) struct Weighed<T> {
    /// The coordinator's epoch after it.
    epoch: u64,
    /// The instances alive by their beats, in order.
    live: Vec<String>,
    /// The shards read.
    reading: HashSet<Arc<str>>,
    /// The earliest moment a take backoff ends, a free shard left to others reaches its grace or
    /// the wait for the peers' beats ends, and at the latest [`TRUSTED_LISTINGS`] listing
    /// intervals after the weighing.
    until: T,
    /// When it weighed (epoch ms): a wall clock stepped back before it makes it stale.
    at_ms: u64,
    /// The earliest moment (epoch ms) a row's time rule changes.
    until_ms: Option<u64>,
    /// A round's plan found nothing to ask for either (a poll does not look for handoffs).
    asks_none: bool,
}

/// A weighing's answer is trusted at most this many listing intervals (a minute by default),
/// when nothing else it depends on moved.
const TRUSTED_LISTINGS: u32 = 6;

impl<T: Moment> Coordinator<T> {
    /// Something the poll's weighing depends on changed: the next poll weighs again.
    pub(super) fn changed(&mut self) {
        self.epoch = self.epoch.wrapping_add(1);
    }

    /// Whether the rows as last read, hinted by `notice`'s beats, show a shard this instance
    /// could take at `now` (`now_ms`): weighed again only when the last weighing's answer may
    /// have changed.
    pub(super) fn hinted_takeable(
        &mut self,
        notice: &Notice,
        reading: &HashSet<Arc<str>>,
        owner: &str,
        now: T,
        now_ms: u64,
    ) -> bool {
        if self.weighing_holds(reading, now, now_ms, false) {
            #[cfg(test)]
            {
                self.skipped_weighings += 1;
                if self.verify_skips {
                    self.verify_skip(notice, reading, owner, now, now_ms);
                }
            }
            return false;
        }
        let mut hinted = self.watch.hinted_rows(notice, owner, now_ms);
        if self.takeable_now(&mut hinted, reading, owner, now, now_ms, true) {
            self.weighed = None;
            return true;
        }
        // After the weighing: the moments of the shards it left to others count their pace (taken
        // before, a shard left for the first time had none, and a lapsed one's moment was missed:
        // the random schedules found it).
        let until_ms = self.rows_change_at(&hinted, reading, owner, now_ms);
        self.weighed_nothing(until_ms, reading, (now, now_ms), false);
        false
    }

    /// Whether the last weighing that found nothing to take still holds at `now` (`now_ms`),
    /// and found nothing to ask for either where `asks`.
    pub(super) fn weighing_holds(
        &self,
        reading: &HashSet<Arc<str>>,
        now: T,
        now_ms: u64,
        asks: bool,
    ) -> bool {
        self.weighed.as_ref().is_some_and(|weighed| {
            (weighed.asks_none || !asks)
                && weighed.holds(
                    self.epoch,
                    self.watch.live_beats(now_ms),
                    reading,
                    now,
                    now_ms,
                )
        })
    }

    /// A weighing at `now` (`now_ms`) of the rows as last read found nothing to take (nor, where
    /// `asks_none`, to ask for); `until_ms` is when their time rules change it
    /// ([`rows_change_at`](Self::rows_change_at), taken after it).
    pub(super) fn weighed_nothing(
        &mut self,
        until_ms: Option<u64>,
        reading: &HashSet<Arc<str>>,
        (now, now_ms): (T, u64),
        asks_none: bool,
    ) {
        let latest = now + self.timings.listing_interval() * TRUSTED_LISTINGS;
        self.weighed = Some(Weighed {
            epoch: self.epoch,
            live: self.watch.live_beats(now_ms).map(str::to_owned).collect(),
            reading: reading.clone(),
            until: self.own_change_at(now).map_or(latest, |at| at.min(latest)),
            at_ms: now_ms,
            until_ms,
            asks_none,
        });
    }

    /// The earliest moment after `now_ms` (epoch ms) that `rows` (hinted by the last notice's
    /// beats) change what a weighing answers: a row not kept alive by the beat of a live holder
    /// other than `owner` expires (past the skew tolerance), and has lapsed for the balance's
    /// grace; a handoff request runs out. The lease of a shard in `reading` is this instance's
    /// own business (only a request for it counts).
    pub(super) fn rows_change_at(
        &self,
        rows: &Rows,
        reading: &HashSet<Arc<str>>,
        owner: &str,
        now_ms: u64,
    ) -> Option<u64> {
        let skew = millis(crate::SKEW_TOLERANCE);
        let grace_ms = millis(self.free_grace());
        let notice = self.watch.notice();
        // A row kept by beat lapses with its holder's beat, as the plan judges it: its expiry a
        // thousand years ahead would put its balancing grace out of sight (found when beat
        // schedules began to balance).
        let rows = crate::coordinator::watch::judged_by_beats(rows, notice, now_ms);
        let mut moments = Vec::new();
        for (shard, row) in rows.iter() {
            let Some(row) = row else { continue };
            if let Some(handoff) = &row.handoff {
                moments.push(
                    handoff
                        .asked_ms
                        .saturating_add(millis(HANDOFF_REQUEST_LIFETIME)),
                );
            }
            let kept_alive = row.owner.as_deref().is_some_and(|holder| {
                holder == owner && reading.contains(shard)
                    || holder != owner && notice.is_alive(holder, now_ms)
            });
            if row.owner.is_some() && !kept_alive {
                // `is_expired_at` turns a millisecond past expiry and skew; `lapsed_for` counts
                // the grace from expiry and skew.
                // A shard left to others waits the pace's time too (a shard not left yet waits
                // less: an early moment, which only weighs sooner).
                let paced_ms = self
                    .left_free
                    .get(shard)
                    .map_or(0, |&(_, paced)| millis(paced));
                let free_ms = row.expiry_ms.saturating_add(skew);
                moments.extend([
                    free_ms.saturating_add(1),
                    free_ms.saturating_add(grace_ms + paced_ms),
                ]);
            }
        }
        moments.into_iter().filter(|&at| at > now_ms).min()
    }

    /// The earliest moment after `now` a take backoff ends, a free shard left to others reaches
    /// its grace, or a balancing instance stops waiting for its peers' beats.
    fn own_change_at(&self, now: T) -> Option<T> {
        let grace = self.free_grace();
        let backoffs = self.backoff.values().map(|backoff| backoff.until);
        let left = self
            .left_free
            .values()
            .map(|&(since, paced)| since + grace + paced);
        backoffs
            .chain(left)
            .chain(self.peers_wait_until())
            .filter(|&at| at > now)
            .min()
    }

    /// Weighs anyway at every poll that skips its weighing, and panics where the answer or
    /// anything the weighing keeps would have changed (the random schedules check every skip).
    #[cfg(test)]
    #[must_use]
    pub(crate) fn verifying_skips(mut self) -> Self {
        self.verify_skips = true;
        self
    }

    #[cfg(test)]
    fn verify_skip(
        &mut self,
        notice: &Notice,
        reading: &HashSet<Arc<str>>,
        owner: &str,
        now: T,
        now_ms: u64,
    ) {
        let epoch = self.epoch;
        let mut hinted = self.watch.hinted_rows(notice, owner, now_ms);
        let takeable = self.takeable_now(&mut hinted, reading, owner, now, now_ms, true);
        assert!(
            !takeable && self.epoch == epoch,
            "the poll at {now_ms} skipped a weighing whose answer changed (takeable {takeable}, \
             kept state changed {}): rows {hinted:?}",
            self.epoch != epoch
        );
    }

    /// How many polls skipped their weighing.
    #[cfg(test)]
    pub(crate) fn skipped_weighings(&self) -> u64 {
        self.skipped_weighings
    }

    /// How many steady rounds skipped their plan.
    #[cfg(test)]
    pub(crate) fn skipped_plans(&self) -> u64 {
        self.skipped_plans
    }
}

impl<T: Moment> Weighed<T> {
    /// Whether the answer still holds: nothing it depends on moved and no time rule changed.
    fn holds<'a>(
        &self,
        epoch: u64,
        mut live: impl Iterator<Item = &'a str>,
        reading: &HashSet<Arc<str>>,
        now: T,
        now_ms: u64,
    ) -> bool {
        epoch == self.epoch
            && now < self.until
            && self.at_ms <= now_ms
            && self.until_ms.is_none_or(|until| now_ms < until)
            && live.by_ref().eq(self.live.iter().map(String::as_str))
            && *reading == self.reading
    }
}

#[cfg(test)]
mod tests;

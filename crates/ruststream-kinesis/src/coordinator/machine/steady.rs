//! When a listing round plans on the rows it last read instead of reading them again (issue 29,
//! item 2: no whole-table read in steady state). A round reads every row of the stream (a Scan)
//! only when something may have moved since its last read:
//!
//! - the notice's counter moved (a release, a handover, a leave landed);
//! - the instances alive by their beats differ (one joined, stopped, or paused past its lease);
//! - the listing differs (a shard opened, closed or left the stream);
//! - this instance heard news of its own (a reader stopped or ended, a take failed, a seek, a
//!   request for a handoff, a pause, a deletion answered), or its last round took, asked for
//!   anything, was woken or was made due by the poll ([`Rounds`](super::super::rounds::Rounds)
//!   tells);
//! - a handoff this instance asked for still stands: the holder's hand-over bumps the notice,
//!   but a bump is a call of its own after it and may fail, and the shard would wait, unread,
//!   until the request runs out;
//! - its turn to read every row came (`Hygiene::due`: the instances alive by their beats take
//!   turns of 30 listing intervals, 5 minutes by default, so the fleet reads every row once such
//!   an interval; alone, every interval: [`full_read_turns`](super::super::full_read_turns)),
//!   which bounds what no signal covers (a row changed by hand, a bump that failed);
//! - the plan on the rows as last read, each live holder's lease counted as lasting until its
//!   beat ([`Watch::hinted_rows`](super::super::watch::Watch::hinted_rows)), would take or ask
//!   for anything: every renewal moves a held row's counter, so such a plan is made again on rows
//!   just read.
//!
//! The rows' conditions fence every write as before: a stale view can only leave a take
//! unmade until the next read, never make a second holder. A crashed holder's shards are taken
//! as fast as before: the handover poll reads the notice every second and sees its beat lapse.

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;

use super::{Coordinator, RoundPasses};
use crate::coordinator::plan;
use crate::kinesis::shards::ShardInfo;
use crate::lease::request_stands;
use crate::shard::lease::Moment;

/// What a round's read of every row saw besides the rows: a later round plans on those rows
/// while none of it moved.
#[derive(Debug)]
pub(super) struct RowsRead {
    /// The notice's counter as last read before the rows.
    counter: u64,
    /// The instances whose beat was live.
    instances: BTreeSet<String>,
    /// The listing the rows were read for.
    listing: Vec<ShardInfo>,
}

impl<T: Moment> Coordinator<T> {
    /// A round at `now` (`now_ms`) read every row of the stream for `listing` (one `list`).
    /// `sent_ms`: when the read was sent (epoch ms), which pays a full read owed from then on.
    pub(crate) fn read_all_rows(
        &mut self,
        listing: &[ShardInfo],
        now: T,
        now_ms: u64,
        sent_ms: u64,
    ) {
        self.hygiene.read_all(now, now_ms, sent_ms);
        self.news = false;
        self.changed();
        self.rows_read = self.notice_at.map(|_| RowsRead {
            counter: self.watch.notice().counter,
            instances: self.live_instances(now_ms),
            listing: listing.to_vec(),
        });
    }

    /// Something this instance did or heard may have moved the rows: the next round reads them.
    pub(crate) fn heard_news(&mut self) {
        self.news = true;
        self.changed();
    }

    /// The poll read the stream's notice at `now`.
    pub(super) fn notice_seen(&mut self, now: T) {
        self.notice_at = Some(now);
    }

    fn live_instances(&self, now_ms: u64) -> BTreeSet<String> {
        self.watch.live_beats(now_ms).map(str::to_owned).collect()
    }

    /// Whether a round at `now` of `listing`, which needs the rows of `wanted`, may plan on the
    /// rows as last read: nothing the module's list names moved since they were read, and the plan
    /// on them takes and asks for nothing (the round is then over). `reading`: the shards read.
    pub(crate) fn passes_on_rows_read(
        &mut self,
        listing: &[ShardInfo],
        wanted: &[Arc<str>],
        reading: &HashSet<Arc<str>>,
        owner: &str,
        (now, now_ms): (T, u64),
    ) -> bool {
        if !self.rows_unchanged(listing, wanted, now, now_ms) {
            return false;
        }
        // The last plan (or the poll's weighing) found nothing to take or ask for, and nothing
        // it depends on moved since (`weighed`): no need to plan again.
        if self.weighing_holds(reading, now, now_ms, true) {
            #[cfg(test)]
            {
                self.skipped_plans += 1;
            }
            #[cfg(test)]
            if self.verify_skips {
                let epoch = self.epoch;
                assert!(
                    self.plans_nothing(listing, reading, owner, (now, now_ms))
                        && self.epoch == epoch,
                    "the round at {now_ms} skipped a plan whose answer changed"
                );
            }
            return true;
        }
        let mut hinted = self.watch.hinted_rows(self.watch.notice(), owner, now_ms);
        if self.plans_nothing_on(&mut hinted, listing, reading, owner, (now, now_ms)) {
            // After the plan: the moments of the shards it left to others count their pace.
            let until_ms = self.rows_change_at(&hinted, reading, owner, now_ms);
            self.weighed_nothing(until_ms, reading, (now, now_ms), true);
            return true;
        }
        // Decided again on the rows the round now reads.
        self.asks.clear();
        false
    }

    /// Whether the plan on the rows as last read, hinted by the last notice's beats, takes and
    /// asks for nothing.
    #[cfg(test)]
    fn plans_nothing(
        &mut self,
        listing: &[ShardInfo],
        reading: &HashSet<Arc<str>>,
        owner: &str,
        at: (T, u64),
    ) -> bool {
        let mut hinted = self.watch.hinted_rows(self.watch.notice(), owner, at.1);
        self.plans_nothing_on(&mut hinted, listing, reading, owner, at)
    }

    /// Whether the plan on `rows` takes and asks for nothing.
    fn plans_nothing_on(
        &mut self,
        rows: &mut plan::Rows,
        listing: &[ShardInfo],
        reading: &HashSet<Arc<str>>,
        owner: &str,
        (now, now_ms): (T, u64),
    ) -> bool {
        plan::add_finished(rows, &self.finished);
        let mut passes = RoundPasses::new(listing.to_vec(), std::mem::take(rows), &HashSet::new());
        let takes = passes.plan(self, reading, owner, now, now_ms);
        // The rows go back to the caller, as planned on (finished shards added).
        *rows = passes.into_rows();
        takes.is_empty() && self.asks.is_empty()
    }

    /// Whether a round at `now` that does not plan on the rows as last read reads them for the
    /// full-read cadence alone (nothing told it that a row moved), from a store whose polls may
    /// read behind (`LeaseStore::polls_read_behind`). Rows a little behind the
    /// latest writes will do then (`LeaseStore::list_eventually`): what they miss was told by a
    /// signal this round saw too (the notice's counter, the beats, the listing, its own news),
    /// so the round that follows the signal reads them consistent; and every write the plan
    /// makes is conditioned on the row's counter as read.
    pub(crate) fn rows_read_for_cadence_alone(
        &self,
        listing: &[ShardInfo],
        wanted: &[Arc<str>],
        (now, now_ms): (T, u64),
    ) -> bool {
        self.polls_behind
            && self.hygiene.due(now)
            && !self.hygiene.owes_read(now_ms)
            && self.nothing_moved(listing, wanted, now, now_ms)
    }

    /// Whether nothing that tells of a moved row moved since the last read of every row, and that
    /// read is recent and covers `wanted`.
    fn rows_unchanged(
        &self,
        listing: &[ShardInfo],
        wanted: &[Arc<str>],
        now: T,
        now_ms: u64,
    ) -> bool {
        !self.hygiene.due(now) && self.nothing_moved(listing, wanted, now, now_ms)
    }

    /// [`rows_unchanged`](Self::rows_unchanged) but for the full-read cadence.
    fn nothing_moved(
        &self,
        listing: &[ShardInfo],
        wanted: &[Arc<str>],
        now: T,
        now_ms: u64,
    ) -> bool {
        let poll = self.timings.handover_poll_interval();
        // The notice must be recent: the poll reads it every second while it waits for a shard,
        // every renewal interval otherwise.
        let notice_recent = self
            .notice_at
            .is_some_and(|at| now.saturating_since(at) <= self.timings.renew().max(poll) * 2);
        let Some(read) = &self.rows_read else {
            return false;
        };
        let asking = self
            .requested
            .values()
            .any(|&asked_ms| request_stands(asked_ms, now_ms));
        !self.news
            && !asking
            && !self.paused
            && !poll.is_zero()
            && self.watch.uses_notices()
            && notice_recent
            && read.counter == self.watch.notice().counter
            && read.listing == listing
            && read.instances == self.live_instances(now_ms)
            && wanted
                .iter()
                .all(|shard| self.watch.rows().contains_key(shard))
    }
}

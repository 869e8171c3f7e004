//! What one subscription knows of its stream's shards, and every decision the coordinator makes
//! on it, with no I/O and no clock of its own: which rows a listing round or the handover poll
//! reads, which shards are takeable (and which are never taken: finished, skipped, gone, or in a
//! take backoff), the passes of a round (a pass that marked shards `SHARD_SKIPPED` decides their
//! children at once), what a take's answer means (read from where, or hand the shard back), and
//! how a failed take backs off. `live/coordinator` does the I/O around it; the simulation
//! drives the same type on a virtual clock. The verdict on each shard is [`plan`](super::plan)'s.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use super::balance::{self, Ask};
use super::full_read_turns::Turn;
use super::hygiene::{Deletion, Hygiene};
use super::modes::{self, SplitFleet};
use super::notice_reads::NoticeReads;
use super::plan::{self, Over, Rows, TakeFor, Verdict};
#[cfg(test)]
use super::take_pace::take_backoff_ceiling;
use super::take_pace::{PEERS_UNKNOWN, Share, TakePace, take_backoff};
use super::turns::Turns;
use super::twins::{Incarnation, TwinNews, Twins};
use super::watch::{self, Noticed, Watch};
use crate::kinesis::shards::ShardInfo;
use crate::lease::request_stands;
use crate::lease::{LeaseState, Notice};
use crate::settings::position::ShardStart;
use crate::shard::Stop;
use crate::shard::lease::Moment;
use crate::{KinesisPosition, LeaseTimings, SHARD_END, SHARD_SKIPPED};

/// How the poll read the notice it judges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NoticeRead {
    /// Whole, strongly consistent.
    Consistent,
    /// Whole, eventually consistent: it may miss the latest writes.
    Behind,
    /// Its head alone (a little behind, too).
    Head,
}

/// A shard whose takes keep failing after the lease was won: how often in a row, and when it
/// may be tried again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TakeBackoff<T> {
    pub(crate) failures: u32,
    pub(crate) until: T,
}

/// What the answer of a take means.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum AfterTake {
    /// Read it: the first iterator at `start`, later ones without a delivered record at `resume`.
    Read {
        start: ShardStart,
        resume: ShardStart,
    },
    /// It was read to its end: known finished, and handed back.
    Finished,
    /// Marked never to be read: known skipped, handed back, and its children decided at once.
    Skipped,
    /// A store that records no start cannot mark it: handed back, for a later round.
    Unmarked,
}

/// What one subscription knows of its stream's shards.
#[derive(Debug)]
pub(crate) struct Coordinator<T> {
    timings: LeaseTimings,
    /// Where shards without a checkpoint start; a seek of every shard sets it.
    initial: KinesisPosition,
    /// The shards it knows were read to their end.
    finished: HashSet<Arc<str>>,
    /// Closed shards never read that would start at the tip: never taken while the initial
    /// position stays the tip.
    skipped: HashSet<Arc<str>>,
    /// Shards that left the stream while this subscription read them: never taken again, but
    /// their rows still tell their children that they were read.
    gone: HashSet<Arc<str>>,
    /// Shards whose takes failed after the lease was won, and until when they are left alone.
    backoff: HashMap<Arc<str>, TakeBackoff<T>>,
    /// The shards the last round listed, for the handover poll between listings.
    last_listing: Vec<ShardInfo>,
    /// What the handover poll keeps between listings to read the rows only when they moved.
    watch: Watch,
    /// Which of the poll's notice reads are whole ([`notice_reads`](super::notice_reads)).
    notice_reads: NoticeReads,
    /// Which rows the rounds delete, and the deletions the last round's rows asked for.
    hygiene: Hygiene<T>,
    deletions: Vec<Deletion>,
    /// Whether this instance balances the shards with the others (`balance_shards`).
    balancing: bool,
    /// The handoffs the last round asks for.
    asks: Vec<Ask>,
    /// The requests this instance recorded, by shard, and when (epoch ms): it withdraws those
    /// still standing when it stops, whatever the rows it read last showed.
    requested: HashMap<Arc<str>, u64>,
    /// Free shards a balancing instance left to others for want of room (or one that does not
    /// balance left to the instance whose turn they are: [`turns`](super::turns)), since when, and how
    /// long the fleet's take budget needed then for the shards free: one still free a grace
    /// and that time later is taken anyway, so no miscount (a gone instance still counted)
    /// leaves a shard unread, and no instance takes the others' shares while they take them at
    /// the budget's pace (without that time, at 5,000 shards and 50 instances, every instance
    /// took the shards left to the others 8 s into a 10 s start: 10,770 takes in one second,
    /// the simulation found).
    left_free: HashMap<Arc<str>, (T, Duration)>,
    /// The check for another run under this owner id (`None`: this subscription's run has no
    /// incarnation to record).
    twins: Option<Twins>,
    /// The instance is paused (an earlier run under its owner id is alive, as this subscription
    /// or another of the instance found): it takes nothing.
    paused: bool,
    /// What the last read of every row saw besides the rows ([`steady`]).
    rows_read: Option<steady::RowsRead>,
    /// When the poll last read the stream's notice.
    notice_at: Option<T>,
    /// This instance did or heard something since the last read of every row that may have moved
    /// the rows: the next round reads them.
    news: bool,
    /// Counts the changes of what the poll's weighing depends on ([`weighed`]).
    epoch: u64,
    /// When this instance first planned its takes: a balancing instance waits for its peers'
    /// beats a lease from then at most.
    first_plan: Option<T>,
    /// The poll's last weighing that found nothing takeable, while its answer may hold.
    weighed: Option<weighed::Weighed<T>>,
    /// How fast this instance takes shards ([`take_pace`](super::take_pace)).
    pace: TakePace<T>,
    /// How many shards were free to anyone (or handed to it) at a balancing instance's last
    /// round: what the takes it still has planned are a part of ([`take_pace`](super::take_pace)).
    free_seen: Option<usize>,
    /// Takes planned before this instance knew its peers wait for the pace
    /// ([`RoundPasses::planned_blind`]): it beats until it knows them.
    blind_takes_wait: bool,
    /// When a notice first showed this instance's own beat: the instances that beat by then are
    /// known to it, and it to them ([`own_beat_shown`](Self::own_beat_shown)); it knows its
    /// peers a renewal interval later ([`knows_peers`](Self::knows_peers)).
    own_beat_seen: Option<T>,
    /// When the poll last read the whole notice.
    whole_read_at: Option<T>,
    /// The store's polls may read behind the latest writes (`LeaseStore::polls_read_behind`).
    polls_behind: bool,
    /// A read behind showed what only a consistent read tells apart: a record under this owner
    /// id that may be one this run's record replaced, or a counter or count of marks lower
    /// than known (behind, or a notice written afresh); or a head read showed the counter
    /// moved, which a leave may have done, and a whole read behind might still show its beat.
    /// The next poll reads the whole notice, consistent.
    doubt: bool,
    /// How often a seek moved where shards without a checkpoint start ([`start_at`](Self::start_at)).
    starts_moved: u64,
    /// Liveness by beat: whether this instance's chain of beats counts now (as its driver last
    /// said). While it does not, the instance takes nothing: a take's lease would last as the
    /// chain, which is over.
    beat_counts: bool,
    /// A row another live instance holds the other way (by beat, or per row), as last planned.
    split: Option<SplitFleet>,
    /// Whether the split as it stands was told to the driver.
    split_told: bool,
    /// Another layout of the stream's notice than this version's, as the last notice read said
    /// ([`Notice::other_layout`]).
    other_layout: Option<u64>,
    /// Whether that was told to the driver.
    layout_told: bool,
    /// By beat: the count of marks of handoffs asked of this run as of its last read of the
    /// rows for them ([`asked`]).
    asks_acted: u64,
    /// By beat: the holders asked for handoffs in the round under way, whose marks follow its
    /// requests ([`asked`]).
    marks: std::collections::BTreeSet<String>,
    /// How many polls skipped their weighing.
    #[cfg(test)]
    skipped_weighings: u64,
    /// How many steady rounds skipped their plan.
    #[cfg(test)]
    skipped_plans: u64,
    /// Every skipped weighing is checked ([`verifying_skips`](Self::verifying_skips)).
    #[cfg(test)]
    verify_skips: bool,
    /// [`without_waiting_for_peers`](Self::without_waiting_for_peers).
    #[cfg(test)]
    no_peers_wait: bool,
}

impl<T: Moment> Coordinator<T> {
    /// A subscription that starts shards without a checkpoint at `initial`.
    pub(crate) fn new(timings: LeaseTimings, initial: KinesisPosition) -> Self {
        Self {
            timings,
            initial,
            finished: HashSet::new(),
            skipped: HashSet::new(),
            gone: HashSet::new(),
            backoff: HashMap::new(),
            last_listing: Vec::new(),
            watch: Watch::default(),
            notice_reads: NoticeReads::default(),
            hygiene: Hygiene::new(&timings),
            deletions: Vec::new(),
            balancing: false,
            asks: Vec::new(),
            requested: HashMap::new(),
            left_free: HashMap::new(),
            twins: None,
            paused: false,
            rows_read: None,
            notice_at: None,
            news: false,
            epoch: 0,
            first_plan: None,
            weighed: None,
            pace: TakePace::default(),
            free_seen: None,
            blind_takes_wait: false,
            own_beat_seen: None,
            whole_read_at: None,
            polls_behind: false,
            doubt: false,
            starts_moved: 0,
            beat_counts: false,
            split: None,
            split_told: false,
            other_layout: None,
            layout_told: true,
            asks_acted: 0,
            marks: std::collections::BTreeSet::new(),
            #[cfg(test)]
            skipped_weighings: 0,
            #[cfg(test)]
            skipped_plans: 0,
            #[cfg(test)]
            verify_skips: false,
            #[cfg(test)]
            no_peers_wait: false,
        }
    }

    /// Whether the instance is paused ([`set_paused`](Self::set_paused)): it takes nothing.
    pub(crate) fn is_paused(&self) -> bool {
        self.paused
    }

    /// Records run `incarnation` in the stream's notice, and pauses while another run under
    /// this owner id is alive and earlier ([`twins`](super::twins)).
    #[must_use]
    pub(crate) fn with_incarnation(mut self, incarnation: Incarnation) -> Self {
        self.twins = Some(Twins::new(incarnation));
        self
    }

    /// Whether the poll reads the stream's notice even with the handover poll off: to find
    /// another run under this owner id, or, kept alive by beat, to hear of the handoffs asked of
    /// this run ([`asked`]: no renewing write's answer shows them).
    pub(crate) fn reads_notices_unpolled(&self) -> bool {
        (self.twins.is_some() || self.timings.is_kept_by_beat()) && self.watch.uses_notices()
    }

    /// The earlier run under this owner id this subscription found alive, while it is.
    #[cfg(test)]
    pub(crate) fn paused_for(&self) -> Option<Incarnation> {
        self.twins.as_ref().and_then(Twins::paused_for)
    }

    /// Whether the instance is paused (an earlier run under its owner id is alive): it takes
    /// nothing, and its readers stop. The driver says so before every step, for every
    /// subscription of the instance.
    /// Answers whether that changed.
    pub(crate) fn set_paused(&mut self, paused: bool) -> bool {
        let changed = std::mem::replace(&mut self.paused, paused) != paused;
        if changed {
            self.heard_news();
        }
        changed
    }

    /// This run's record is being written at `now_ms`: the text to write, and the gone
    /// instances the write removes.
    pub(crate) fn recording(&mut self, owner: &str, now_ms: u64) -> Option<(String, Vec<String>)> {
        let record = self.twins.as_mut()?.recording(now_ms);
        let gone = watch::gone_instances(self.watch.notice(), owner, now_ms);
        Some((record, gone))
    }

    /// The write of this run's record was answered at `now_ms` (`landed`, or it failed).
    pub(crate) fn recorded(&mut self, landed: bool, now_ms: u64) {
        if let Some(twins) = &mut self.twins {
            twins.recorded(landed, now_ms);
            // The check judges the next read that shows the runs' records.
            self.notice_reads.whole_next();
        }
    }

    /// The store keeps the notice's head apart from its beats and runs' records (`apart`): the
    /// poll reads the head alone while the beats it last read still say who is alive
    /// ([`notice_reads`](super::notice_reads)).
    #[must_use]
    pub(crate) fn with_notice_head_apart(mut self, apart: bool) -> Self {
        self.notice_reads = NoticeReads::new(apart);
        self
    }

    /// Whether the store's polls may read behind the latest writes
    /// (`LeaseStore::polls_read_behind`): else every whole read the poll asks for is
    /// consistent, and what every read shows is taken as the latest.
    pub(crate) fn with_polls_behind(mut self, behind: bool) -> Self {
        self.polls_behind = behind;
        self
    }

    /// This instance's beat until `until_ms` landed: the notice it knows shows it, as a read
    /// of the beats would (one never moves back).
    pub(crate) fn own_beat_landed(&mut self, owner: &str, until_ms: u64) {
        self.watch.own_beat_landed(owner, until_ms);
    }

    /// The layout of the notice this instance's store keeps: [`NOTICE_LAYOUT_APART`] where it
    /// keeps the head apart, else [`NOTICE_LAYOUT`].
    ///
    /// [`NOTICE_LAYOUT_APART`]: crate::NOTICE_LAYOUT_APART
    /// [`NOTICE_LAYOUT`]: crate::NOTICE_LAYOUT
    pub(crate) fn notice_layout(&self) -> u64 {
        if self.notice_reads.is_apart() {
            crate::NOTICE_LAYOUT_APART
        } else {
            crate::NOTICE_LAYOUT
        }
    }

    /// Whether `notice` is kept in this instance's layout (or names none): a notice of another
    /// layout judges no holder gone, since that layout may keep its beats where this one does
    /// not look.
    pub(crate) fn reads_layout_of(&self, notice: &Notice) -> bool {
        notice.other_layout_than(self.notice_layout()).is_none()
    }

    /// Whether the poll's notice read sent at `now` (`now_ms` by the wall clock) reads the whole
    /// notice, or its head alone: when the beats last read say so
    /// ([`notice_reads`](super::notice_reads)); until a whole read a renewal interval after this
    /// instance's own beat first showed, which shows the peers that started with it (it knows
    /// its peers by that read: [`knows_peers`](Self::knows_peers)); and at every poll while this
    /// run is paused for an earlier one under its owner id, whose answer it watches for.
    pub(crate) fn whole_notice_due(&self, now: T, now_ms: u64) -> bool {
        if self.notice_reads.whole_due(now_ms) {
            return true;
        }
        // What is in doubt is judged at the next poll, not at the next whole read the beats
        // call for (a lease later): an earlier run must answer a later one within its patience.
        self.doubt || self.paused_for_twin() || self.peers_unsettled(now)
    }

    /// Whether the poll's whole read of the notice is consistent (`LeaseStore::notice`) rather
    /// than a little behind the latest writes (`LeaseStore::notice_eventually`, half the read
    /// units), where the store reads behind at all: for the check for another run under the
    /// owner id, at the first read, the one after each record of this run landed, every read
    /// while paused, and the one after a read behind left a doubt (a record it cannot judge,
    /// [`Twins::judges_behind`], or a counter or own count of marks lower than known). Nothing else
    /// the poll decides needs the latest writes: a take-over reads the notice consistent for
    /// itself, and every write is conditioned on what it changes. The reads that settle which
    /// peers started with this instance are consistent too (a few, once): one behind might
    /// miss a peer, and this instance would take past its share and hand the rest over.
    pub(crate) fn consistent_notice_due(&self, now: T) -> bool {
        !self.polls_behind
            || self.notice_reads.pending()
            || self.doubt
            || self.paused_for_twin()
            || self.peers_unsettled(now)
    }

    fn paused_for_twin(&self) -> bool {
        self.twins
            .as_ref()
            .is_some_and(|twins| twins.paused_for().is_some())
    }

    /// Whether the whole reads have yet to show this instance's peers: its own beat showed in
    /// none yet (while it does not know its peers), or in none read a renewal interval after it.
    fn peers_unsettled(&self, now: T) -> bool {
        if !self.reads_notices_to_take() || !self.watch.uses_notices() {
            return false;
        }
        match self.own_beat_seen {
            None => !self.knows_peers(now),
            Some(seen) => self
                .whole_read_at
                .is_none_or(|at| at < seen + self.timings.renew()),
        }
    }

    /// How long this run, paused for an earlier one under its owner id, waits for that one's
    /// answer before it counts it gone: a lease, and where the whole notice is read only now and
    /// then, the longest gap between two of the earlier run's whole reads besides (it answers at
    /// one of them).
    fn twins_patience(&self) -> Duration {
        let lease = self.timings.lease();
        if self.notice_reads.is_apart() {
            lease + NoticeReads::longest_gap(lease, self.idle_poll_interval())
        } else {
            lease
        }
    }

    /// Balances the shards with the other instances ([`balance`]): takes free shards only up
    /// to its share, and asks the most loaded for handoffs.
    #[must_use]
    pub(crate) fn with_balancing(mut self, balancing: bool) -> Self {
        self.balancing = balancing;
        self
    }

    /// Whether this instance balances the shards.
    pub(crate) fn is_balancing(&self) -> bool {
        self.balancing
    }

    /// Whether a balancing instance leaves every free shard alone at `now` because it does not
    /// know yet who else reads the stream: no notice read has shown its own beat (so the beats of
    /// those that started with it are not known either), and its first plan is less than a lease
    /// old (a beat that keeps failing must not keep it from reading). Without it, the first
    /// instance of a fleet that starts together takes every shard, and hands nearly all of them
    /// over again (9,800 handoffs at 10,000 shards and 100 instances, the simulation found).
    fn waits_for_peers(&self, now: T) -> bool {
        self.peers_wait_until().is_some_and(|until| now < until)
    }

    /// Takes free shards from its first plan, as before it waited for its peers, at its whole
    /// share before a notice showed its beat ([`knows_peers`](Self::knows_peers)), and without
    /// turns, in the listing's order ([`leave_others_turns`](Self::leave_others_turns)): the
    /// simulation's schedules pinned before then replay so, and the tests of the pace count an
    /// instance alone.
    #[cfg(test)]
    #[must_use]
    pub(crate) fn without_waiting_for_peers(mut self) -> Self {
        self.no_peers_wait = true;
        self
    }

    /// Until when [`waits_for_peers`](Self::waits_for_peers) may hold, while it may.
    pub(super) fn peers_wait_until(&self) -> Option<T> {
        if !self.balancing || self.peers_seen() {
            return None;
        }
        self.first_plan.map(|at| at + self.timings.lease())
    }

    /// Whether this instance knows the other instances as well as it will at `now`: a notice
    /// showed its own beat a renewal interval ago or more, the store keeps no notices, or the
    /// handover poll is off (it reads no beats to know them by); or its first plan is a lease
    /// old, as a balancing instance stops waiting for its peers then (a beat that keeps failing
    /// must not hold its takes to a fortieth of the budget for good).
    ///
    /// Not as soon as its own beat shows: of the instances that start together, the first whose
    /// beat lands sees none of the others' yet, and took at the whole budget at once (at 10,000
    /// shards and 100 instances by beat, 4,569 writes in the start's second second, the
    /// simulation found). Each of them writes its first beat at its first handover poll (one
    /// kept alive by beat at its start), so a renewal interval after its own beat showed, those
    /// that started with it, within that interval, show theirs too.
    pub(crate) fn knows_peers(&self, now: T) -> bool {
        self.own_beat_counts(|seen| now >= seen + self.timings.renew())
            || self
                .first_plan
                .is_some_and(|at| now >= at + self.timings.lease())
    }

    /// Whether a notice showed this instance's own beat, the store keeps no notices, or the
    /// handover poll is off: [`knows_peers`](Self::knows_peers) without the time limit.
    fn peers_seen(&self) -> bool {
        self.own_beat_counts(|_| true)
    }

    /// Whether the notices tell this instance nothing of its peers (the store keeps none, or the
    /// handover poll is off), or its own beat showed at a moment `enough` accepts.
    fn own_beat_counts(&self, enough: impl FnOnce(T) -> bool) -> bool {
        #[cfg(test)]
        if self.no_peers_wait {
            return true;
        }
        !self.reads_notices_to_take()
            || !self.watch.uses_notices()
            || self.own_beat_seen.is_some_and(enough)
    }

    /// Whether a balancing instance knows the others well enough to ask for handoffs: a notice
    /// read showed its own beat (so those that joined with it show theirs), or the store keeps
    /// no notices (and the rows are all it can know).
    fn own_beat_shown(&self) -> bool {
        !self.watch.uses_notices() || self.own_beat_seen.is_some()
    }

    /// Whether the handover poll is on, so the notices it reads (the beats, the counter) count in
    /// what this instance takes; off, a notice is read for the twins alone.
    fn reads_notices_to_take(&self) -> bool {
        !self.timings.handover_poll_interval().is_zero()
    }

    /// How long a balancing instance leaves a free shard to the instances with room before it
    /// takes the shard itself: two handover polls, or with the poll off until its next round
    /// (half a listing interval, so that a round that starts a little early still counts: a
    /// whole one let a shard wait two rounds, the simulation found). The time the fleet's take
    /// budget needs for the shards free when it was left comes on top ([`Coordinator::left_free`]).
    fn free_grace(&self) -> Duration {
        let poll = self.timings.handover_poll_interval();
        if poll.is_zero() {
            self.timings.listing_interval() / 2
        } else {
            poll * 2
        }
    }

    /// The shards whose rows, as last read, hold a request of `owner`'s still standing at
    /// `now_ms`, and those it recorded a request for since that still stands, but for those in
    /// `reading`: a balancing instance that stops withdraws them, so no holder hands it a shard,
    /// and hands back at once a row a holder handed it before the withdrawal. A shard it reads
    /// (one handed off and taken) its reader hands back with its final checkpoint: a hand-back
    /// beside it would move the row's counter under that checkpoint.
    pub(crate) fn standing_asks(
        &self,
        owner: &str,
        now_ms: u64,
        reading: &HashSet<Arc<str>>,
    ) -> Vec<Arc<str>> {
        if !self.balancing {
            return Vec::new();
        }
        let in_rows = self.watch.rows().iter().filter(|(_, row)| {
            row.as_ref()
                .and_then(|row| row.handoff_at(now_ms))
                .is_some_and(|asked| asked.to == owner)
        });
        let recorded = self
            .requested
            .iter()
            .filter(|&(_, &asked_ms)| request_stands(asked_ms, now_ms));
        let mut asks: Vec<Arc<str>> = in_rows
            .map(|(shard, _)| shard)
            .chain(recorded.map(|(shard, _)| shard))
            .cloned()
            .collect();
        asks.retain(|shard| !reading.contains(shard));
        asks.sort();
        asks.dedup();
        asks
    }

    /// A request for a handoff of `shard`, held by `holder`, was recorded at `asked_ms`.
    pub(crate) fn requested(&mut self, shard: &Arc<str>, holder: &str, asked_ms: u64) {
        self.requested.insert(Arc::clone(shard), asked_ms);
        self.owe_read_after_ask(asked_ms);
        self.heard_news();
        self.mark_later(holder);
    }

    /// A request for a handoff sent at `asked_ms` went unanswered (the call failed or timed
    /// out): it may have landed all the same, and been handed over on.
    pub(crate) fn ask_unanswered(&mut self, asked_ms: u64) {
        self.owe_read_after_ask(asked_ms);
    }

    /// A request asked at `asked_ms` may be answered by a hand-over whose bump of the notice
    /// fails: this instance owes a full read of its own once no hand-over can land any more
    /// ([`Hygiene::read_owed_from`]). The holder sees the request standing until its lifetime
    /// ends (by its clock), drains, and its write takes up to two leases to land.
    fn owe_read_after_ask(&mut self, asked_ms: u64) {
        let answerable = last_hand_over_after_ask(&self.timings);
        self.hygiene
            .read_owed_from(asked_ms.saturating_add(crate::lease::millis(answerable)));
    }

    /// The handoffs the last round asks for (once: taken out).
    pub(crate) fn take_asks(&mut self) -> Vec<Ask> {
        std::mem::take(&mut self.asks)
    }

    /// The shards [`takeable`](Self::takeable) says to take, `reading` being read and `skip`
    /// aside; a balancing instance takes free shards only up to its share, and a round's first
    /// pass (`round`) also decides the handoffs to ask for.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn shards_to_take<'a>(
        &mut self,
        listing: &'a [ShardInfo],
        rows: &Rows,
        reading: &HashSet<Arc<str>>,
        skip: impl Fn(&ShardInfo) -> bool,
        owner: &str,
        (now, now_ms): (T, u64),
        round: bool,
    ) -> Vec<(&'a ShardInfo, TakeFor)> {
        // A fleet split between the two ways of keeping leases alive is told to the driver
        // (`modes`); it still keeps one holder a shard, so the plan goes on. Judged on a
        // round's rows (every row, as last read), not the poll's few.
        if round {
            let split = modes::split_fleet(
                rows,
                self.watch.notice(),
                owner,
                self.timings.is_kept_by_beat(),
                now_ms,
            );
            if split != self.split {
                self.split_told &= split.is_some() && self.split.is_some();
                self.split = split;
                self.changed();
            }
        }
        // Rows kept alive by beats are judged by their holders' beats as last read.
        let judged = watch::judged_by_beats(rows, self.watch.notice(), now_ms);
        let rows = judged.as_ref();
        // A request for a shard this instance now reads is over.
        self.requested.retain(|shard, _| !reading.contains(shard));
        self.first_plan.get_or_insert(now);
        let mut takeable = self.takeable(listing, rows, skip, owner, now, now_ms);
        if !self.balancing {
            self.leave_others_turns(&mut takeable, listing, rows, owner, (now, now_ms));
            return takeable;
        }
        let handed = |shard: &ShardInfo| {
            rows.get(&shard.id)
                .and_then(Option::as_ref)
                .is_some_and(|row| row.is_held_by(owner))
        };
        // The rows handed to this instance it takes in any case; the rest are free.
        let (handed_here, free): (Vec<&ShardInfo>, Vec<&ShardInfo>) = takeable
            .iter()
            .filter(|(_, purpose)| *purpose != TakeFor::Skipping)
            .map(|(shard, _)| *shard)
            .partition(|shard| handed(shard));
        let free: Vec<Arc<str>> = free.iter().map(|shard| Arc::clone(&shard.id)).collect();
        if self.waits_for_peers(now) {
            // Who else starts with it is not known yet: its share would be every free shard.
            takeable.retain(|(shard, purpose)| *purpose == TakeFor::Skipping || handed(shard));
            return takeable;
        }
        let shares = balance::shares(
            listing,
            rows,
            reading,
            free.len(),
            handed_here.len(),
            owner,
            self.watch.live_beats(now_ms),
            now_ms,
        );
        let mine: HashSet<Arc<str>> = shares.free_for(&free).into_iter().collect();
        self.leave_to_others(
            &mut takeable,
            |shard| handed(shard) || mine.contains(&shard.id),
            &free,
            rows,
            (now, now_ms),
        );
        if round {
            let skipping = takeable
                .iter()
                .filter(|(_, purpose)| *purpose == TakeFor::Skipping)
                .count();
            self.free_seen = Some(free.len() + handed_here.len() + skipping);
        }
        // With the handover poll off no notice is read: the rows are all this instance knows.
        if round && (self.own_beat_shown() || !self.reads_notices_to_take()) {
            // Paused, the instance takes nothing: a handoff asked for would only be handed back.
            self.asks = if self.paused {
                Vec::new()
            } else {
                shares.asks(mine.len())
            };
        }
        takeable
    }

    /// Leaves to the others the free shards of `takeable` that are not this instance's to
    /// take first (`keep` says which are, beside the marks, which any instance makes): each
    /// waits, counted from the round that first left it ([`left_free`](Self::left_free)), a
    /// grace and the time the fleet's take budget needs for the `free` shards, or as long
    /// after its lease lapsed, and is taken then if still free.
    fn leave_to_others(
        &mut self,
        takeable: &mut Vec<(&ShardInfo, TakeFor)>,
        keep: impl Fn(&ShardInfo) -> bool,
        free: &[Arc<str>],
        rows: &Rows,
        (now, now_ms): (T, u64),
    ) {
        let grace = self.free_grace();
        let paced = self.pace.time_for(free.len());
        let free_now: HashSet<&Arc<str>> = free.iter().collect();
        let left_before = self.left_free.len();
        self.left_free.retain(|shard, _| free_now.contains(shard));
        let mut left_changed = left_before != self.left_free.len();
        let left_free = &mut self.left_free;
        takeable.retain(|(shard, purpose)| {
            if *purpose == TakeFor::Skipping || keep(shard) {
                return true;
            }
            let (since, paced) = *left_free.entry(Arc::clone(&shard.id)).or_insert_with(|| {
                left_changed = true;
                (now, paced)
            });
            // Still free a grace (and the pace's time) after this instance first left it, or
            // after its lease lapsed: nobody with room took it. (The instances' shares shift as
            // they take: the one a round left a lapsed shard to may leave it to this one at its
            // own round, a listing interval later, the simulation found.)
            let waited = grace + paced;
            now.saturating_since(since) >= waited
                || lapsed_for(rows, &shard.id, now_ms).is_some_and(|lapsed| lapsed >= waited)
        });
        if left_changed {
            self.changed();
        }
    }

    /// An instance that does not balance takes first the shards never taken (no row) whose turn
    /// is its own among the instances alive by their beats ([`turns`](super::turns)), and leaves
    /// the others' turns to them ([`leave_to_others`](Self::leave_to_others)). A released or
    /// lapsed lease is taken by whoever comes first, as before, so no view of the beats delays a
    /// hand-over or a takeover (the instance that released a shard as it stopped still beats,
    /// and its turns would wait out the grace: the random schedules found it), and so is a
    /// child of a listed parent (a reshard's children: the instance whose turn it is may hear of
    /// them a listing later, review of the fourteenth session). Each instance tries the shards
    /// in the order of its own weights, so that instances that do not know each other yet do
    /// not all race for the same ones first. With the handover poll off no beat is read, and
    /// every shard is its turn.
    fn leave_others_turns(
        &mut self,
        takeable: &mut Vec<(&ShardInfo, TakeFor)>,
        listing: &[ShardInfo],
        rows: &Rows,
        owner: &str,
        (now, now_ms): (T, u64),
    ) {
        #[cfg(test)]
        if self.no_peers_wait {
            // As before the turns: schedules pinned before then replay so.
            return;
        }
        let turns = if self.reads_notices_to_take() {
            Turns::new(owner, self.watch.live_beats(now_ms))
        } else {
            Turns::new(owner, [])
        };
        takeable.sort_by_cached_key(|(shard, _)| std::cmp::Reverse(turns.weight(&shard.id)));
        if turns.alone() && self.left_free.is_empty() {
            return;
        }
        let listed: HashSet<&str> = listing.iter().map(|shard| shard.id.as_ref()).collect();
        let by_turn = |shard: &ShardInfo| {
            rows.get(&shard.id).and_then(Option::as_ref).is_none()
                && !shard
                    .parents
                    .iter()
                    .any(|parent| listed.contains(parent.as_ref()))
        };
        let free: Vec<Arc<str>> = takeable
            .iter()
            .filter(|(shard, purpose)| *purpose != TakeFor::Skipping && by_turn(shard))
            .map(|(shard, _)| Arc::clone(&shard.id))
            .collect();
        self.leave_to_others(
            takeable,
            |shard| turns.alone() || !by_turn(shard) || turns.is_mine(&shard.id),
            &free,
            rows,
            (now, now_ms),
        );
    }

    /// Sets where shards without a checkpoint start (a seek of every shard): the
    /// shards skipped for starting at the tip are judged again.
    pub(crate) fn start_at(&mut self, initial: KinesisPosition) {
        self.initial = initial;
        self.skipped.clear();
        self.starts_moved = self.starts_moved.wrapping_add(1);
        self.heard_news();
    }

    /// How often a seek moved where shards without a checkpoint start: takes planned before the
    /// last one would start at the old place.
    pub(crate) fn starts_moved(&self) -> u64 {
        self.starts_moved
    }

    /// The stream is gone: one created again under its name has shards of the same ids.
    pub(crate) fn stream_not_found(&mut self) {
        self.gone.clear();
        self.skipped.clear();
        self.finished.clear();
        self.heard_news();
    }

    /// A listing answered: the shards it no longer shows are forgotten (they cannot be taken,
    /// and a stream created again under the same name starts afresh).
    pub(crate) fn listed(&mut self, listing: &[ShardInfo]) {
        let listed: HashSet<&str> = listing.iter().map(|shard| shard.id.as_ref()).collect();
        let before = (self.skipped.len(), self.gone.len(), self.backoff.len());
        self.skipped.retain(|shard| listed.contains(shard.as_ref()));
        self.gone.retain(|shard| listed.contains(shard.as_ref()));
        self.backoff
            .retain(|shard, _| listed.contains(shard.as_ref()));
        if before != (self.skipped.len(), self.gone.len(), self.backoff.len()) {
            self.changed();
        }
    }

    /// The rows a decision on `listing` needs, `reading` aside: none when no shard waits.
    pub(crate) fn wanted(
        &self,
        listing: &[ShardInfo],
        reading: &HashSet<Arc<str>>,
    ) -> Vec<Arc<str>> {
        plan::rows_to_read(listing, reading, |id| self.is_settled(id), &self.finished)
            .into_iter()
            .cloned()
            .collect()
    }

    /// Whether this instance never reads `shard` again: finished, skipped or gone.
    fn is_settled(&self, shard: &Arc<str>) -> bool {
        self.finished.contains(shard) || self.skipped.contains(shard) || self.gone.contains(shard)
    }

    /// Deletes a row no reader needs after `grace` instead of the default, and reads every row
    /// at least `every` apart.
    #[cfg(test)]
    pub(crate) fn with_hygiene_grace(mut self, grace: Duration, every: Duration) -> Self {
        self.hygiene = Hygiene::with_grace_every(grace, every);
        self
    }

    /// The rows a round read for `listing` at `now`: the rows it deletes are decided on them as
    /// the store answered; then every shard known finished counts as such, and every row at
    /// `SHARD_END` becomes known finished. The listing is the handover poll's from now.
    pub(crate) fn round_rows(
        &mut self,
        listing: &[ShardInfo],
        rows: &mut Rows,
        now: T,
        now_ms: u64,
    ) {
        self.deletions = self.hygiene.deletions(listing, rows, now, now_ms);
        plan::add_finished(rows, &self.finished);
        for (shard, row) in rows.iter() {
            if row.as_ref().is_some_and(LeaseState::is_finished) {
                self.finished.insert(Arc::clone(shard));
            }
        }
        self.last_listing = listing.to_vec();
        self.watch.round_read(rows);
        self.changed();
    }

    /// Whether the handover poll waits for a shard of the last listing (its
    /// [`poll_wanted`](Self::poll_wanted) are not none), without building the list.
    pub(crate) fn poll_waits(&self, reading: &HashSet<Arc<str>>) -> bool {
        self.last_listing
            .iter()
            .any(|shard| !reading.contains(&shard.id) && !self.is_settled(&shard.id))
    }

    /// The shards of the last listing the handover poll reads the rows of, `reading` aside.
    pub(crate) fn poll_wanted(&self, reading: &HashSet<Arc<str>>) -> Vec<Arc<str>> {
        self.wanted(&self.last_listing, reading)
    }

    /// Whether the rows the handover poll read show a shard of the last listing that this
    /// instance could take now (released, expired, or its parents finished).
    pub(crate) fn poll_finds_takeable(
        &mut self,
        mut rows: Rows,
        reading: &HashSet<Arc<str>>,
        owner: &str,
        now: T,
        now_ms: u64,
    ) -> bool {
        self.watch.poll_read(&rows);
        self.changed();
        self.takeable_now(&mut rows, reading, owner, now, now_ms, false)
    }

    /// The poll's read of the rows failed; a round reads them in its place.
    pub(crate) fn poll_failed(&mut self) {
        self.watch.poll_failed();
    }

    /// Whether the handover poll reads the stream's notice first (else the rows at every poll,
    /// as for a store that keeps no notices).
    pub(crate) fn uses_notices(&self) -> bool {
        self.watch.uses_notices()
    }

    /// The store keeps no notices.
    pub(crate) fn notices_unsupported(&mut self) {
        self.watch.unsupported();
        self.heard_news();
    }

    /// Whether a take may go out now: always, unless the leases are kept alive by a beat that
    /// does not count (a take would hold nothing).
    pub(crate) fn beat_allows_takes(&self) -> bool {
        !self.timings.is_kept_by_beat() || self.beat_counts
    }

    /// A take-over read the stream's notice: the last notice known, by which the next plan
    /// judges the rows kept by beat (a holder it found alive is not chosen again on an older
    /// notice, nor every holder on none, with the handover poll off).
    pub(crate) fn take_notice_read(&mut self, notice: &Notice, now_ms: u64) {
        self.layout_read(notice);
        self.watch.notice_read(notice);
        self.notice_reads
            .whole_read(&notice.beats, self.timings.lease(), now_ms, false);
        self.changed();
    }

    /// A notice was read: another layout than this version's is news for the driver, once for
    /// each layout it names.
    fn layout_read(&mut self, notice: &Notice) {
        let other = notice.other_layout_than(self.notice_layout());
        if other != self.other_layout {
            self.other_layout = other;
            self.layout_told = other.is_none();
        }
    }

    /// Another layout of the stream's notice than this version's, once each time a notice
    /// names a new one: an instance of another version keeps the notice otherwise, and the two
    /// would miss each other's beats; the driver refuses to open, and says so later.
    pub(crate) fn layout_news(&mut self) -> Option<u64> {
        if self.layout_told {
            return None;
        }
        self.layout_told = true;
        self.other_layout
    }

    /// A fleet split between the two ways of keeping leases alive, once per episode: the row
    /// that shows it, for the driver to say (and, while the subscription opens, to refuse).
    pub(crate) fn split_news(&mut self) -> Option<SplitFleet> {
        if self.split_told {
            return None;
        }
        self.split_told = true;
        self.split.clone()
    }

    /// Liveness by beat: whether this instance's chain of beats counts now, as its driver says
    /// before each step. A change is a change of what the poll's weighing depends on.
    pub(crate) fn beat_counts(&mut self, counts: bool) {
        if self.beat_counts != counts {
            self.beat_counts = counts;
            self.changed();
        }
    }

    /// How often the poll reads the notice while it waits for no shard: the renewal interval, so
    /// that a holder learns in time that another instance waits on it, and beats.
    pub(crate) fn idle_poll_interval(&self) -> Duration {
        self.timings.renew()
    }

    /// What the stream's notice, read whole and consistent at `now`, asks of the poll: a beat
    /// of this instance's, and whether to read the rows it waits for ([`watch`] says when).
    pub(crate) fn noticed(
        &mut self,
        notice: &Notice,
        reading: &HashSet<Arc<str>>,
        owner: &str,
        now: T,
        now_ms: u64,
    ) -> Noticed {
        self.notice_answered(notice, NoticeRead::Consistent, reading, owner, now, now_ms)
    }

    /// As [`noticed`](Self::noticed), of a whole read a little behind the latest writes
    /// (`LeaseStore::notice_eventually`): the check for another run under the owner id judges
    /// it only where it can ([`Twins::judges_behind`]), and has the next read consistent
    /// otherwise.
    pub(crate) fn noticed_behind(
        &mut self,
        notice: &Notice,
        reading: &HashSet<Arc<str>>,
        owner: &str,
        now: T,
        now_ms: u64,
    ) -> Noticed {
        self.notice_answered(notice, NoticeRead::Behind, reading, owner, now, now_ms)
    }

    /// What a read of the notice's head alone asks of the poll, as [`noticed`](Self::noticed):
    /// the head is taken with the beats and runs' records of the last whole read
    /// ([`notice_reads`](super::notice_reads)), and the check for another run under the owner
    /// id waits for a whole read.
    pub(crate) fn head_noticed(
        &mut self,
        head: &Notice,
        reading: &HashSet<Arc<str>>,
        owner: &str,
        now: T,
        now_ms: u64,
    ) -> Noticed {
        self.notice_answered(head, NoticeRead::Head, reading, owner, now, now_ms)
    }

    fn notice_answered(
        &mut self,
        notice: &Notice,
        read: NoticeRead,
        reading: &HashSet<Arc<str>>,
        owner: &str,
        now: T,
        now_ms: u64,
    ) -> Noticed {
        // A store whose polls never read behind answers the latest writes to every read.
        let read = match read {
            NoticeRead::Behind if !self.polls_behind => NoticeRead::Consistent,
            read => read,
        };
        let whole = read != NoticeRead::Head;
        if !whole && notice.counter > self.watch.notice().counter {
            // A leave may be behind it: its beat is gone only from the beats a whole read shows,
            // and one read behind may show the beat still (a leave removes it before the bump).
            self.notice_reads.counter_moved();
            self.doubt |= self.polls_behind;
        }
        let merged;
        let mut went_back = false;
        let notice = match read {
            NoticeRead::Consistent => {
                self.watch.notice_read(notice);
                notice
            }
            NoticeRead::Head if !self.polls_behind => {
                merged = self.watch.head_read(notice);
                &merged
            }
            // What a read behind shows is merged with what is known: its counter, marks and this
            // instance's own beat never move back (`Watch::read_behind`).
            NoticeRead::Behind | NoticeRead::Head => {
                (merged, went_back) = self.watch.read_behind(notice, owner, whole);
                &merged
            }
        };
        if whole {
            self.notice_reads
                .whole_read(&notice.beats, self.timings.lease(), now_ms, true);
            self.whole_read_at = Some(now);
        }
        let patience = self.twins_patience();
        let theirs = notice.incarnations.get(owner).map(String::as_str);
        let judged = match read {
            NoticeRead::Head => false,
            NoticeRead::Consistent => true,
            NoticeRead::Behind => self
                .twins
                .as_ref()
                .is_none_or(|twins| twins.judges_behind(theirs)),
        };
        // A record it cannot judge on a read behind, or a counter or mark shown lower than
        // known, is judged on the next read, whole and consistent.
        if whole {
            self.doubt = (self.twins.is_some() && !judged) || went_back;
        } else {
            self.doubt |= went_back;
        }
        let seen = self.twins.as_mut().filter(|_| judged).map(|twins| {
            let beat_shown = notice.beats.contains_key(owner);
            twins.read_beside_beat(theirs, beat_shown, now_ms, patience)
        });
        let (twin, record) = seen.map_or((None, false), |seen| (seen.news, seen.record));
        self.layout_read(notice);
        self.notice_seen(now);
        let paused = self.paused || matches!(twin, Some(TwinNews::Earlier(_)));
        // A paused instance reads nothing: its readers stopped.
        let asked = if paused {
            None
        } else {
            self.asked_of(notice, owner)
        };
        if paused || !self.reads_notices_to_take() {
            // Paused (it takes nothing), or read for the twins alone (the handover poll is off).
            return Noticed {
                twin,
                record,
                asked,
                ..Noticed::default()
            };
        }
        let watching = self.poll_waits(reading);
        let peers_known = self.own_beat_shown();
        self.watch.beats_read(notice);
        let turn = Turn::among(owner, self.watch.live_beats(now_ms));
        self.hygiene.turn_read(turn, now, now_ms);
        // Only a whole read shows it with the beats of the instances that started with it: a
        // head read is taken with its own beat as it landed, and the beats of an older read.
        if whole && self.own_beat_seen.is_none() && notice.beats.contains_key(owner) {
            self.own_beat_seen = Some(now);
        }
        if peers_known != self.own_beat_shown() {
            // Its handoffs may be asked for from now.
            self.changed();
        }
        let moved = self.watch.counter_moved(notice, watching);
        // A balancing instance always beats: the others count the instances by their beats; and
        // so does one whose takes wait for the pace before it knows its peers, for it takes at a
        // fortieth of the budget until it knows them ([`PEERS_UNKNOWN`]): a lone
        // instance whose queued takes kept it from watching never beat, and took a large
        // stream at 25 shards a second (review of the fourteenth session). An instance kept
        // alive by its beat has a driver of its own that beats.
        let beat = if self.timings.is_kept_by_beat() {
            None
        } else {
            watch::beat_due(
                notice,
                owner,
                watching || self.balancing || self.blind_takes_wait && !self.knows_peers(now),
                !reading.is_empty(),
                &self.timings,
                now_ms,
            )
        };
        let read_rows =
            watching && (moved || self.hinted_takeable(notice, reading, owner, now, now_ms));
        Noticed {
            twin,
            record,
            beat,
            read_rows,
            asked,
        }
    }

    /// Whether `rows` show a shard of the last listing that this instance could take now
    /// (`only_known`: only among the shards `rows` has an entry for).
    fn takeable_now(
        &mut self,
        rows: &mut Rows,
        reading: &HashSet<Arc<str>>,
        owner: &str,
        now: T,
        now_ms: u64,
        only_known: bool,
    ) -> bool {
        let known: HashSet<Arc<str>> = rows.keys().cloned().collect();
        plan::add_finished(rows, &self.finished);
        let listing = std::mem::take(&mut self.last_listing);
        let finished = self.finished.clone();
        let takeable = !self
            .shards_to_take(
                &listing,
                rows,
                reading,
                |shard| {
                    reading.contains(&shard.id)
                        || finished.contains(&shard.id)
                        || (only_known && !known.contains(&shard.id))
                },
                owner,
                (now, now_ms),
                false,
            )
            .is_empty();
        self.last_listing = listing;
        takeable
    }

    /// The shards of `listing` that [`plan::verdict`] says to take, `skip` aside, and where each
    /// starts when its row has no checkpoint. Shards it says are skipped are remembered, and
    /// shards whose takes keep failing wait out their backoff.
    pub(crate) fn takeable<'a>(
        &mut self,
        listing: &'a [ShardInfo],
        rows: &Rows,
        skip: impl Fn(&ShardInfo) -> bool,
        owner: &str,
        now: T,
        now_ms: u64,
    ) -> Vec<(&'a ShardInfo, TakeFor)> {
        let listed = plan::listed(listing);
        let mut takeable = Vec::new();
        if self.paused {
            // An earlier run under this owner id is alive: it reads the stream.
            return takeable;
        }
        if !self.beat_allows_takes() {
            // Kept alive by a beat that does not count now: a take would hold nothing.
            return takeable;
        }
        for shard in listing {
            if skip(shard)
                || self.skipped.contains(&shard.id)
                || self.gone.contains(&shard.id)
                || self
                    .backoff
                    .get(&shard.id)
                    .is_some_and(|wait| wait.until > now)
            {
                continue;
            }
            match plan::verdict(shard, &listed, rows, owner, now_ms, &self.initial) {
                Verdict::Take { fresh } => takeable.push((shard, TakeFor::Reading(fresh))),
                Verdict::Skip => takeable.push((shard, TakeFor::Skipping)),
                Verdict::Skipped => {
                    if self.skipped.insert(Arc::clone(&shard.id)) {
                        self.changed();
                    }
                }
                // Finished: at `SHARD_END`, or closed without a row and its children moved on
                // (its row deleted); either way for good.
                Verdict::Finished => {
                    if self.finished.insert(Arc::clone(&shard.id)) {
                        self.changed();
                    }
                }
                Verdict::WaitForParents | Verdict::HeldElsewhere => {}
            }
        }
        takeable
    }

    /// The take-over a take of `shard` is, if any: the row as last read is kept alive by its
    /// holder's beat ([`LeaseState::is_kept_by_beat`]) at `now_ms`, and the take is conditioned
    /// on its holder and counter (`own` when `owner` holds it). Looked up when the take begins:
    /// its notice read goes out after this row was read, whichever read it was.
    pub(crate) fn take_over_of(&self, shard: &str, owner: &str, now_ms: u64) -> Option<Over> {
        let row = self.watch.rows().get(shard)?.as_ref()?;
        let holder = row.owner.as_deref()?;
        row.is_kept_by_beat(now_ms).then(|| Over {
            holder: Arc::from(holder),
            counter: row.counter,
            own: holder == owner,
        })
    }

    /// What the row a take of `shard` answered means, its checkpoint `checkpoint`: the take was
    /// for `purpose` and recorded `recorded` in a row without a checkpoint. Decided again on
    /// that row: it is the authoritative one.
    pub(crate) fn after_take(
        &mut self,
        shard: &Arc<str>,
        checkpoint: Option<&str>,
        purpose: &TakeFor,
        recorded: &str,
    ) -> AfterTake {
        self.changed();
        match checkpoint {
            Some(SHARD_END) => {
                self.finished.insert(Arc::clone(shard));
                AfterTake::Finished
            }
            None if *purpose == TakeFor::Skipping => AfterTake::Unmarked,
            // Never read (marked by this take, or by another instance's before it, whatever
            // this take was for).
            Some(SHARD_SKIPPED) => {
                self.skipped.insert(Arc::clone(shard));
                AfterTake::Skipped
            }
            // A start another owner recorded, or a checkpoint: later iterators start there too.
            Some(checkpoint) if checkpoint != recorded => {
                let start = ShardStart::from_checkpoint(shard, checkpoint);
                AfterTake::Read {
                    start: start.clone(),
                    resume: start,
                }
            }
            // The start this take recorded (or would have, for a store that keeps none): the
            // first iterator reads from the position itself (the tip stays the tip), and every
            // later one without a delivered record from the moment recorded for it.
            _ => {
                let fresh = match purpose {
                    TakeFor::Reading(fresh) => fresh.clone(),
                    // A marking take that found no mark and no start: not read (above).
                    TakeFor::Skipping => KinesisPosition::Latest,
                };
                AfterTake::Read {
                    start: ShardStart::At(fresh),
                    resume: ShardStart::from_checkpoint(shard, recorded),
                }
            }
        }
    }

    /// Whether a round at `now` that needs no row reads them all anyway, for [`Hygiene`].
    pub(crate) fn hygiene_due(&self, now: T) -> bool {
        self.hygiene.due(now)
    }

    /// The rows the last round asks to delete (once: taken out).
    pub(crate) fn take_deletions(&mut self) -> Vec<Deletion> {
        std::mem::take(&mut self.deletions)
    }

    /// A deletion the round asked for is over: `deleted` when the row is gone.
    pub(crate) fn deletion_answered(&mut self, shard: &str, deleted: bool) {
        self.heard_news();
        if deleted {
            self.hygiene.deleted(shard);
        }
    }

    /// Whether rows asked for `age` ago are too old to take shards on: older than a lease (any
    /// lease in them may have lapsed, any release been taken since), or than half the hygiene
    /// grace (a row they lack may have been deleted since, and a take would create it afresh).
    /// A process frozen between its read and the answer's handling reads the rows again.
    pub(crate) fn rows_too_old(&self, age: Duration) -> bool {
        age > self.timings.lease().min(self.hygiene.grace() / 2)
    }

    /// `shard` is read now: a backoff of its takes ends.
    pub(crate) fn took(&mut self, shard: &Arc<str>) {
        self.backoff.remove(shard);
        self.changed();
    }

    /// Leaves `shard` alone for a backoff that doubles with each failure in a row, from `now`;
    /// `coin` draws the jitter, so the instances that all fail on one shard do not retry in
    /// step. Answers the backoff.
    pub(crate) fn delay_take(&mut self, shard: &Arc<str>, now: T, coin: u64) -> TakeBackoff<T> {
        let longest = self.timings.lease().max(self.timings.listing_interval());
        let failures = self
            .backoff
            .get(shard)
            .map_or(1, |backoff| backoff.failures.saturating_add(1));
        let backoff = TakeBackoff {
            failures,
            until: now + take_backoff(failures, longest, coin),
        };
        self.backoff.insert(Arc::clone(shard), backoff);
        self.heard_news();
        backoff
    }

    /// How many takes may go out at `now` ([`take_pace`](super::take_pace)), `planned` by this
    /// instance's last plan: its share of the fleet's take budget at `now_ms`.
    pub(crate) fn take_allowance(&mut self, now: T, now_ms: u64, planned: usize) -> usize {
        let share = self.take_share(now, now_ms, planned);
        self.pace.allowance(now, share)
    }

    /// Paces takes at `budget` a second for the whole fleet (the simulation's schedules, whose
    /// few shards the default budget would never pace).
    #[cfg(test)]
    #[must_use]
    pub(crate) fn with_take_budget(mut self, budget: u64) -> Self {
        self.pace = TakePace::with_budget(budget);
        self
    }

    /// `takes` went out.
    pub(crate) fn spend_takes(&mut self, takes: usize) {
        self.pace.spend(takes);
    }

    /// When the next take may go out, asked at `now` with no allowance left, `planned` by this
    /// instance's last plan.
    pub(crate) fn next_take_at(&self, now: T, now_ms: u64, planned: usize) -> T {
        self.pace
            .next_at(now, self.take_share(now, now_ms, planned))
    }

    /// The lease table throttled a take at `now`: every take pauses for a backoff (`coin` draws
    /// its jitter). Answers until when, if this began the pause (`None`: a take sent before
    /// it, answered during it).
    pub(crate) fn take_throttled(&mut self, now: T, coin: u64) -> Option<T> {
        let longest = self.timings.lease().max(self.timings.listing_interval());
        self.pace.throttled(now, longest, coin)
    }

    /// A take's lease was granted: the throttled takes in a row are over.
    pub(crate) fn take_granted(&mut self) {
        self.pace.granted();
    }

    /// This instance's part of the fleet's take budget at `now_ms`, `wanted` takes planned: the
    /// live beats of the last notice read (itself at least), and for a balancing instance, those
    /// takes out of the shards free at its last round (an instance that does not balance plans
    /// every free shard, which says nothing of its part).
    fn take_share(&self, now: T, now_ms: u64, wanted: usize) -> Share {
        let live = self.watch.live_beats(now_ms).count().max(1);
        if !self.knows_peers(now) {
            // Who else starts with it is not known yet: it takes as one of many
            // ([`PEERS_UNKNOWN`]) until it knows them, balancing or not (a balancing instance
            // that sees only its own beat plans every free shard, and its plan's part of them
            // would be the whole budget: review of the fifteenth session).
            return Share::even(live.max(PEERS_UNKNOWN));
        }
        match self.free_seen {
            Some(free) if self.balancing => Share {
                live,
                planned: wanted,
                free,
            },
            _ => Share::even(live),
        }
    }

    /// Never takes `shard` again while it stays listed: it left the stream while read.
    pub(crate) fn gone(&mut self, shard: &Arc<str>) {
        self.gone.insert(Arc::clone(shard));
        self.heard_news();
    }

    /// The reader of `shard` stopped reading for `stop`, at `now`: a shard that left the stream
    /// is never taken again while listed, and one no iterator could be had for waits out a take
    /// backoff (`coin` draws its jitter) before this instance tries it again.
    pub(crate) fn reader_stopped(&mut self, shard: &Arc<str>, stop: Stop, now: T, coin: u64) {
        self.heard_news();
        match stop {
            Stop::Gone => self.gone(shard),
            Stop::Unreadable => {
                self.delay_take(shard, now, coin);
            }
            Stop::Ended | Stop::Cancelled | Stop::Lost | Stop::HandedOver => {}
        }
    }

    /// The reader of `shard` ended, `finished` when it read the shard to its end.
    pub(crate) fn reader_ended(&mut self, shard: &Arc<str>, finished: bool) {
        self.heard_news();
        if finished {
            self.finished.insert(Arc::clone(shard));
        }
    }

    /// Whether `shard` is known finished.
    #[cfg(test)]
    pub(crate) fn is_finished(&self, shard: &str) -> bool {
        self.finished.contains(shard)
    }

    /// Whether `shard` is known skipped.
    pub(crate) fn is_skipped(&self, shard: &str) -> bool {
        self.skipped.contains(shard)
    }
}

/// The passes of one listing round over its rows: each pass takes what is takeable, less the
/// shards being read, those whose row (or an ancestor's) could not be read and those an earlier
/// pass tried; a pass that marked shards `SHARD_SKIPPED` is followed by another, in which their
/// children are decided (a new subscription at the tip takes them in this round). Bounded by
/// the listing: each further pass follows one that marked at least one shard. A pass's takes go
/// out as the [`take_pace`](super::take_pace) allows: those it does not allow yet wait, planned,
/// for the next batch.
#[derive(Debug)]
pub(crate) struct RoundPasses {
    listing: Vec<ShardInfo>,
    rows: Rows,
    held_back: HashSet<Arc<str>>,
    tried: HashSet<Arc<str>>,
    marking: Vec<Arc<str>>,
    passes: usize,
    /// The takes a pass planned that the pace has not let out yet, in the plan's order.
    queued: std::collections::VecDeque<(ShardInfo, TakeFor)>,
    /// A batch marked shards: another pass is planned once the queued takes went out.
    replan: bool,
    /// How many takes the last pass planned: what the pace's share is taken from.
    planned: usize,
    /// Where shards without a checkpoint started when the last pass planned
    /// ([`Coordinator::starts_moved`]).
    starts: u64,
    /// The last pass planned before this instance knew its peers
    /// ([`Coordinator::knows_peers`]): alone by what it knew, every free shard was its turn.
    blind: bool,
}

impl RoundPasses {
    /// The passes over `rows` of `listing`, `unreadable` the shards whose row could not be read.
    pub(crate) fn new(listing: Vec<ShardInfo>, rows: Rows, unreadable: &HashSet<Arc<str>>) -> Self {
        let held_back = plan::held_back_by(&listing, &rows, unreadable);
        Self {
            listing,
            rows,
            held_back,
            tried: HashSet::new(),
            marking: Vec::new(),
            passes: 0,
            queued: std::collections::VecDeque::new(),
            replan: false,
            planned: 0,
            starts: 0,
            blind: false,
        }
    }

    /// The next takes: those of a pass queued before, else the next pass's; as many as the pace
    /// allows, the rest queued (none: the round's takes are over, unless some are queued).
    pub(crate) fn next<T: Moment>(
        &mut self,
        coordinator: &mut Coordinator<T>,
        reading: &HashSet<Arc<str>>,
        owner: &str,
        (now, now_ms): (T, u64),
    ) -> Vec<(ShardInfo, TakeFor)> {
        if self.queued.is_empty() && (self.passes == 0 || std::mem::take(&mut self.replan)) {
            let planned = self.plan(coordinator, reading, owner, now, now_ms);
            self.planned = planned.len();
            self.starts = coordinator.starts_moved();
            self.blind = !coordinator.knows_peers(now);
            self.queued = planned.into();
        }
        let allowance = coordinator
            .take_allowance(now, now_ms, self.planned)
            .min(self.queued.len());
        coordinator.spend_takes(allowance);
        let batch: Vec<(ShardInfo, TakeFor)> = self.queued.drain(..allowance).collect();
        coordinator.blind_takes_wait = self.blind && !self.queued.is_empty();
        self.marking = batch
            .iter()
            .filter(|(_, purpose)| *purpose == TakeFor::Skipping)
            .map(|(shard, _)| Arc::clone(&shard.id))
            .collect();
        batch
    }

    /// Whether planned takes wait for the pace.
    pub(crate) fn has_queued(&self) -> bool {
        !self.queued.is_empty()
    }

    /// The shards whose takes wait for the pace.
    pub(crate) fn queued(&self) -> impl Iterator<Item = &Arc<str>> {
        self.queued.iter().map(|(shard, _)| &shard.id)
    }

    /// The rows the passes planned on.
    pub(crate) fn into_rows(self) -> Rows {
        self.rows
    }

    /// How many takes the last pass planned.
    pub(crate) fn planned(&self) -> usize {
        self.planned
    }

    /// How often a seek had moved where shards without a checkpoint start when the last pass
    /// planned ([`Coordinator::starts_moved`]).
    pub(crate) fn starts(&self) -> u64 {
        self.starts
    }

    /// Whether a seek moved where shards without a checkpoint start since the last pass
    /// planned: its queued takes would start at the old place.
    pub(crate) fn planned_before_a_seek<T: Moment>(&self, coordinator: &Coordinator<T>) -> bool {
        self.starts != coordinator.starts_moved()
    }

    /// Whether the last pass planned before this instance knew its peers, and it knows them
    /// now: its queued takes include the others' turns, which they take themselves (kept, they
    /// raced the others for a listing interval: 25 shards a second at 2,000 shards and 20
    /// instances, the simulation found).
    pub(crate) fn planned_blind<T: Moment>(&self, coordinator: &Coordinator<T>, now: T) -> bool {
        self.blind && coordinator.knows_peers(now)
    }

    /// The takes of the next pass (none: the round is over).
    fn plan<T: Moment>(
        &mut self,
        coordinator: &mut Coordinator<T>,
        reading: &HashSet<Arc<str>>,
        owner: &str,
        now: T,
        now_ms: u64,
    ) -> Vec<(ShardInfo, TakeFor)> {
        let (held_back, tried) = (&self.held_back, &self.tried);
        let first_pass = self.passes == 0 && tried.is_empty();
        let to_take: Vec<(ShardInfo, TakeFor)> = coordinator
            .shards_to_take(
                &self.listing,
                &self.rows,
                reading,
                |shard| {
                    reading.contains(&shard.id)
                        || held_back.contains(&shard.id)
                        || tried.contains(&shard.id)
                },
                owner,
                (now, now_ms),
                first_pass,
            )
            .into_iter()
            .map(|(shard, purpose)| (shard.clone(), purpose))
            .collect();
        self.tried
            .extend(to_take.iter().map(|(shard, _)| Arc::clone(&shard.id)));
        to_take
    }

    /// The takes of a batch answered: whether another pass follows at once (the batch marked
    /// shards, whose rows now read `SHARD_SKIPPED`, and no takes are queued).
    pub(crate) fn passed<T: Moment>(&mut self, coordinator: &Coordinator<T>) -> bool {
        self.passes += 1;
        let marked: Vec<Arc<str>> = std::mem::take(&mut self.marking)
            .into_iter()
            .filter(|shard| coordinator.is_skipped(shard))
            .collect();
        if !marked.is_empty() && self.passes <= self.listing.len() {
            for shard in marked {
                self.rows.insert(shard, Some(LeaseState::skipped()));
            }
            self.replan = true;
        }
        self.replan && self.queued.is_empty()
    }
}

/// How long the lease of `shard`'s row has been lapsed at `now_ms` (past its expiry and the
/// skew tolerance); `None` for a row that is live, released, finished, or missing.
fn lapsed_for(rows: &Rows, shard: &Arc<str>, now_ms: u64) -> Option<Duration> {
    let row = rows.get(shard)?.as_ref()?;
    row.owner.as_ref()?;
    if row.is_finished() || row.is_skipped() || !row.is_expired_at(now_ms) {
        return None;
    }
    let free_ms = row
        .expiry_ms
        .saturating_add(crate::lease::millis(crate::SKEW_TOLERANCE));
    Some(Duration::from_millis(now_ms.saturating_sub(free_ms)))
}

/// How long after a request for a handoff a hand-over of it may still land, with `timings`:
/// the holder sees the request standing until its lifetime ends (by its clock, up to twice the
/// skew tolerance apart), drains, and its write takes up to two leases to land. 57 s by default.
pub(crate) fn last_hand_over_after_ask(timings: &LeaseTimings) -> Duration {
    crate::lease::HANDOFF_REQUEST_LIFETIME
        + timings.handoff_drain()
        + timings.lease() * 2
        + crate::SKEW_TOLERANCE * 2
}

mod asked;
mod steady;
#[cfg(test)]
mod tests;
mod weighed;

//! When a listing round or the handover poll runs, and the order of their calls, as a state
//! machine with no I/O and no clock of its own. Its driver (`coordinator::run`, and the first
//! round of a subscription) asks it what to do at `now`, makes the call it names, and hands back
//! the answer; the simulation does the same on a virtual clock. The decisions on the answers
//! are the [`Coordinator`]'s.
//!
//! - Between rounds it waits for the first of: the cancel (it ends), the listing deadline, a
//!   wake (a reader ended, a shard was marked skipped), the handover poll's deadline; when
//!   several are due they win in that order.
//! - A round lists the shards, reads the rows that matter (one `list` where the store can list
//!   and answers, else a read per row), and takes what is takeable, pass after pass while a pass
//!   marks shards skipped. In steady state it reads no row: it plans on the rows it last read
//!   while nothing says they moved, and reads them when the plan would take or ask for anything
//!   (`machine/steady.rs` says when). A round woken, or due because the poll found a shard to
//!   take, or after a round that took, asked for or deleted anything, reads them (each tells the
//!   coordinator, as its own news does). The next
//!   listing is due a listing interval after the round began; after the first round, both
//!   deadlines count from its end.
//! - A round's takes go out as the [`take_pace`](super::take_pace) allows; when it allows no
//!   more, the round's asks and deletions go ahead and it ends, its planned takes going out
//!   between rounds and polls as the pace refills (so the poll, and the beat it writes, keep
//!   running), until the next round plans again on the rows it reads. The poll counts them as
//!   in hand: it does not start a round for them.
//! - The poll reads the stream's notice (one small row) and, when [`watch`](super::watch) says
//!   the rows may have moved, the rows of the shards of the last listing that wait; it starts a
//!   round when one of them is takeable now, and writes this instance's beat when the notice
//!   asks for one. While no shard waits it reads the notice only every renewal interval. Every
//!   notice read also checks for another run under this owner id ([`twins`](super::twins)):
//!   this run's record is written when due, and the later of two live runs pauses until the
//!   earlier is gone (the notice is read every renewal interval for this alone when the
//!   handover poll is off). A
//!   store without notices has the rows read at every poll instead (nothing while no shard
//!   waits). A poll whose notice read fails does nothing; one whose `list` fails, or that cannot
//!   read every row, starts a round, which reads the rows one by one.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use super::balance::Ask;
use super::hygiene::Deletion;
use super::machine::{Coordinator, RoundPasses};
use super::plan::{Rows, TakeFor};
use super::twins::TwinNews;
use super::watch::{Beat, Noticed};
use crate::kinesis::shards::ShardInfo;
use crate::lease::{LeaseState, Notice};
use crate::shard::lease::Moment;

/// What the coordinator's driver does next.
#[derive(Debug)]
pub(crate) enum Step<T> {
    /// `ListShards`; answer with [`Rounds::listed`].
    ListShards,
    /// One `list` of the stream's rows (`eventual`: for the full-read cadence alone, where rows
    /// a little behind the latest writes will do: `LeaseStore::list_eventually`); answer with
    /// [`Rounds::rows_listed`].
    ListRows { eventual: bool },
    /// A read of each of these rows (in parallel); answer with [`Rounds::rows_read`].
    ReadRows(Vec<Arc<str>>),
    /// Take these shards (in parallel), each for its purpose; answer with [`Rounds::took`] once
    /// every take is over.
    Take(Vec<(ShardInfo, TakeFor)>),
    /// Delete these rows (in parallel), each conditioned on its counter; answer with
    /// [`Rounds::deleted`] once every deletion is over.
    Delete(Vec<Deletion>),
    /// Ask for these handoffs (in parallel); answer with [`Rounds::asked`] once every
    /// request is over, whatever each answered.
    Ask(Vec<Ask>),
    /// Read the stream's notice, whole or its head alone
    /// ([`notice_reads`](super::notice_reads)); a whole read `consistent`
    /// (`LeaseStore::notice`) or a little behind the latest writes
    /// (`LeaseStore::notice_eventually`; a head alone always may be); answer with
    /// [`Rounds::notice_read`].
    ReadNotice { whole: bool, consistent: bool },
    /// Write this instance's beat in the stream's notice; answer with [`Rounds::beaten`],
    /// whatever the write answered.
    Beat(Beat),
    /// Record this run under the owner id in the stream's notice, and remove the gone
    /// instances (`LeaseStore::announce`); answer with [`Rounds::announced`].
    Announce { record: String, forget: Vec<String> },
    /// What this run learned of another run under its owner id: say so. While an earlier one is
    /// alive the instance pauses (every reader stops, nothing is taken), and reads again once it
    /// is gone ([`twins`](super::twins)).
    Twin(TwinNews),
    /// By beat: mark the round's requests of these holders in the stream's notice
    /// (`LeaseStore::mark_asked`); answer with [`Rounds::marked`], whatever it answered.
    MarkAsked(Vec<String>),
    /// By beat: these rows, held by this run, show a handoff asked of it: each goes to its
    /// shard's reader, as a renewal's answer does per row (the reader starts the handoff).
    /// Nothing answers it.
    HandOver(Vec<(Arc<str>, LeaseState)>),
    /// Nothing to do until this moment (`None`: until an answer), or a wake.
    Wait(Option<T>),
    /// Cancelled: the coordinator ends.
    Exit,
}

/// What `ListShards` answered.
#[derive(Debug)]
pub(crate) enum Shards {
    Listed(Vec<ShardInfo>),
    /// The stream does not exist (any more).
    StreamNotFound,
    Failed,
}

/// What a `list` of the stream's rows answered.
#[derive(Debug)]
pub(crate) enum Listed {
    /// The rows of the stream, by shard.
    Rows(Vec<(Arc<str>, LeaseState)>),
    /// The store cannot list: the rows are read one by one.
    Unsupported,
    Failed,
}

/// What a read of the stream's notice answered.
#[derive(Debug)]
pub(crate) enum NoticeRead {
    /// The whole notice.
    Notice(Notice),
    /// Its head alone: the counter, the marks and the layout (the beats and runs' records are
    /// not read).
    Head(Notice),
    /// The store keeps no notices: the poll reads the rows from now on.
    Unsupported,
    Failed,
}

#[derive(Debug)]
enum Phase {
    Idle,
    /// A round is due: its `ListShards` goes out next.
    RoundDue,
    Listing,
    /// The rows `wanted` are to be listed (or being listed: `asked`), for a round of `listing`
    /// or for the poll; `eventual`: for the full-read cadence alone, a little behind the latest
    /// writes will do (`LeaseStore::list_eventually`).
    Rows {
        listing: Vec<ShardInfo>,
        wanted: Vec<Arc<str>>,
        poll: bool,
        asked: bool,
        eventual: bool,
    },
    /// A round of `listing` that needs the rows of `wanted` may plan on the rows as last read;
    /// else they are listed.
    Steady {
        listing: Vec<ShardInfo>,
        wanted: Vec<Arc<str>>,
    },
    /// The rows `wanted` are to be read one by one (or being read: `asked`).
    Each {
        listing: Vec<ShardInfo>,
        wanted: Vec<Arc<str>>,
        poll: bool,
        asked: bool,
    },
    /// The poll's read of the notice is under way.
    Notice,
    /// What the notice read asks for is under way, in order.
    Noticed(AfterNotice),
    /// The rows were read: the next pass's takes go out.
    Passing(RoundPasses),
    Taking(RoundPasses),
    /// The round's takes are over: its handoffs are asked for (or being asked: `None`).
    Asking(Option<Vec<Ask>>),
    /// The round's takes are over: its deletions go out (or are under way: `None`).
    Deleting(Option<Vec<Deletion>>),
    /// By beat: the round's requests are over; their holders are to be marked (or being
    /// marked: `None`).
    Marking(Option<Vec<String>>),
    /// By beat: a notice showed `marks` marks of handoffs asked of this run: the rows are to be
    /// listed (or being listed: `asked`); then the poll's rows, if the notice wanted them.
    OwnRows {
        marks: u64,
        asked: bool,
        read_rows: bool,
    },
    /// By beat: the rows listed for a request show these asked of this run; then the poll's
    /// rows, if the notice wanted them.
    HandingOver {
        rows: Vec<(Arc<str>, LeaseState)>,
        read_rows: bool,
    },
}

/// What a notice read asks for, in order: tell of another run under the owner id, write this
/// run's record, write the beat, read the rows. One write at a time.
#[derive(Debug)]
struct AfterNotice {
    noticed: Noticed,
    /// A write was asked for and is not answered yet.
    waiting: bool,
    /// The end of the beat asked for, until its write is answered.
    beat_until: Option<u64>,
}

/// What the phase under way answers.
enum InPhase<T> {
    /// This step.
    Step(Step<T>),
    /// The phase moved on: ask again.
    Again,
    /// No phase is under way.
    Over,
}

/// When rounds and polls run, and where one is.
#[derive(Debug)]
pub(crate) struct Rounds<T> {
    listing_interval: Duration,
    handover_poll: Duration,
    next_listing: T,
    next_poll: T,
    woken: bool,
    cancelled: bool,
    /// Whether the first round is over.
    looping: bool,
    phase: Phase,
    /// The shards being read when the round or the poll began.
    reading: HashSet<Arc<str>>,
    /// When the rows under way were asked for.
    rows_asked: T,
    /// Whether the notice read under way was asked for whole and consistent.
    notice_consistent: bool,
    /// A round whose planned takes wait for the pace ([`take_pace`](super::take_pace)): they go
    /// out between rounds and polls as it allows, until the next round plans again.
    paced: Option<RoundPasses>,
    /// How many rounds planned on the rows as last read, reading none (the simulation counts
    /// them).
    #[cfg(test)]
    steady_rounds: u64,
    /// How often a round's takes waited for the pace (the simulation counts them).
    #[cfg(test)]
    paced_waits: u64,
}

impl<T: Moment> Rounds<T> {
    /// A coordinator at `now`: its first round is due at once.
    pub(crate) fn new(listing_interval: Duration, handover_poll: Duration, now: T) -> Self {
        Self {
            listing_interval,
            handover_poll,
            next_listing: now,
            next_poll: now + handover_poll,
            woken: false,
            cancelled: false,
            looping: false,
            phase: Phase::RoundDue,
            reading: HashSet::new(),
            rows_asked: now,
            notice_consistent: false,
            paced: None,
            #[cfg(test)]
            steady_rounds: 0,
            #[cfg(test)]
            paced_waits: 0,
        }
    }

    /// Something changed that a round should see now (a reader ended, a shard was marked).
    pub(crate) fn wake(&mut self) {
        self.woken = true;
    }

    /// The subscription is dropped or the broker shuts down: the coordinator ends once the
    /// round under way is over.
    pub(crate) fn cancel(&mut self) {
        self.cancelled = true;
    }

    /// Whether a poll is under way.
    #[cfg(test)]
    pub(crate) fn is_polling(&self) -> bool {
        matches!(
            self.phase,
            Phase::Rows { poll: true, .. } | Phase::Each { poll: true, .. }
        )
    }

    /// Whether a round is due at once (a poll found a shard to take).
    #[cfg(test)]
    pub(crate) fn is_round_due(&self) -> bool {
        matches!(self.phase, Phase::RoundDue)
    }

    /// Whether the first round is over.
    pub(crate) fn first_round_over(&self) -> bool {
        self.looping
    }

    /// How many rounds planned on the rows as last read, reading none.
    #[cfg(test)]
    pub(crate) fn steady_rounds(&self) -> u64 {
        self.steady_rounds
    }

    /// How often a round's takes waited for the pace.
    #[cfg(test)]
    pub(crate) fn paced_waits(&self) -> u64 {
        self.paced_waits
    }

    /// While takes run: how often a seek had moved where shards without a checkpoint start when
    /// their pass planned them ([`Coordinator::starts_moved`]).
    pub(crate) fn takes_planned_at_starts(&self) -> Option<u64> {
        match &self.phase {
            Phase::Taking(passes) => Some(passes.starts()),
            _ => None,
        }
    }

    /// How many planned takes wait for the pace.
    #[cfg(test)]
    pub(crate) fn paced_takes(&self) -> usize {
        self.paced
            .as_ref()
            .map_or(0, |passes| passes.queued().count())
    }

    /// What to do at `now`, `reading` the shards being read now.
    pub(crate) fn next(
        &mut self,
        coordinator: &mut Coordinator<T>,
        reading: &HashSet<Arc<str>>,
        owner: &str,
        now: T,
        now_ms: u64,
    ) -> Step<T> {
        match self.in_phase(coordinator, reading, owner, now, now_ms) {
            InPhase::Step(step) => step,
            InPhase::Again => self.next(coordinator, reading, owner, now, now_ms),
            InPhase::Over => match self.between(coordinator, reading, now, now_ms) {
                Some(step) => step,
                // The paced takes resume.
                None => self.next(coordinator, reading, owner, now, now_ms),
            },
        }
    }

    /// The step of the phase under way, if it has one.
    fn in_phase(
        &mut self,
        coordinator: &mut Coordinator<T>,
        reading: &HashSet<Arc<str>>,
        owner: &str,
        now: T,
        now_ms: u64,
    ) -> InPhase<T> {
        match std::mem::replace(&mut self.phase, Phase::Idle) {
            Phase::Idle => InPhase::Over,
            Phase::RoundDue => {
                // Due because the poll found a shard to take, or its rows were too old: read them.
                coordinator.heard_news();
                InPhase::Step(self.round(reading, now))
            }
            Phase::Noticed(after) => self.after_notice(after, coordinator, owner, now_ms),
            Phase::Asking(Some(asks)) => {
                self.phase = Phase::Asking(None);
                InPhase::Step(Step::Ask(asks))
            }
            Phase::Deleting(Some(deletions)) => {
                self.phase = Phase::Deleting(None);
                InPhase::Step(Step::Delete(deletions))
            }
            Phase::Marking(Some(holders)) => {
                self.phase = Phase::Marking(None);
                InPhase::Step(Step::MarkAsked(holders))
            }
            Phase::OwnRows {
                marks,
                asked,
                read_rows,
            } => {
                let step = self.rows_once(asked, now, || Step::ListRows { eventual: false });
                self.phase = Phase::OwnRows {
                    marks,
                    asked: true,
                    read_rows,
                };
                InPhase::Step(step)
            }
            Phase::HandingOver { rows, read_rows } => {
                if read_rows {
                    self.read_poll_rows(coordinator);
                }
                InPhase::Step(Step::HandOver(rows))
            }
            phase @ (Phase::Listing
            | Phase::Notice
            | Phase::Taking(_)
            | Phase::Asking(None)
            | Phase::Marking(None)
            | Phase::Deleting(None)) => {
                self.phase = phase;
                InPhase::Step(Step::Wait(None))
            }
            Phase::Rows {
                listing,
                wanted,
                poll,
                asked,
                eventual,
            } => {
                let step = self.rows_once(asked, now, || Step::ListRows { eventual });
                self.phase = Phase::Rows {
                    listing,
                    wanted,
                    poll,
                    asked: true,
                    eventual,
                };
                InPhase::Step(step)
            }
            Phase::Each {
                listing,
                wanted,
                poll,
                asked,
            } => {
                let step = self.rows_once(asked, now, || Step::ReadRows(wanted.clone()));
                self.phase = Phase::Each {
                    listing,
                    wanted,
                    poll,
                    asked: true,
                };
                InPhase::Step(step)
            }
            Phase::Steady { listing, wanted } => {
                let at = (now, now_ms);
                if coordinator.passes_on_rows_read(&listing, &wanted, &self.reading, owner, at) {
                    #[cfg(test)]
                    {
                        self.steady_rounds += 1;
                    }
                    if self.takes_over(coordinator, now) {
                        return InPhase::Again;
                    }
                    return InPhase::Over;
                }
                let eventual = coordinator.rows_read_for_cadence_alone(&listing, &wanted, at);
                self.phase = Phase::Rows {
                    listing,
                    wanted,
                    poll: false,
                    asked: false,
                    eventual,
                };
                InPhase::Again
            }
            Phase::Passing(mut passes) => {
                let at = (now, now_ms);
                let to_take = passes.next(coordinator, &self.reading, owner, at);
                if !to_take.is_empty() {
                    self.phase = Phase::Taking(passes);
                    return InPhase::Step(Step::Take(to_take));
                }
                // The pace lets no take out now: the round's asks and deletions go ahead, and
                // its planned takes go out between rounds and polls as the pace allows (a round
                // that waited for them would keep the poll, and so the beat, from running: 20 s
                // at 10,000 shards).
                self.park(passes);
                if self.takes_over(coordinator, now) {
                    return InPhase::Again;
                }
                InPhase::Over
            }
        }
    }

    /// The rows' call, once: asked for now, or already under way.
    fn rows_once(&mut self, asked: bool, now: T, call: impl FnOnce() -> Step<T>) -> Step<T> {
        if asked {
            return Step::Wait(None);
        }
        self.rows_asked = now;
        call()
    }

    /// What a notice read asks for, in order, one write at a time: tell of another run under the
    /// owner id, write this run's record, write the beat, read the rows.
    fn after_notice(
        &mut self,
        mut after: AfterNotice,
        coordinator: &mut Coordinator<T>,
        owner: &str,
        now_ms: u64,
    ) -> InPhase<T> {
        let noticed = &mut after.noticed;
        let step = if let Some(twin) = noticed.twin.take() {
            Some(Step::Twin(twin))
        } else if after.waiting {
            Some(Step::Wait(None))
        } else if std::mem::take(&mut noticed.record)
            && let Some((record, forget)) = coordinator.recording(owner, now_ms)
        {
            after.waiting = true;
            Some(Step::Announce { record, forget })
        } else if let Some(beat) = noticed.beat.take() {
            after.waiting = true;
            after.beat_until = Some(beat.until_ms);
            Some(Step::Beat(beat))
        } else {
            None
        };
        if let Some(step) = step {
            self.phase = Phase::Noticed(after);
            return InPhase::Step(step);
        }
        if let Some(marks) = after.noticed.asked {
            self.phase = Phase::OwnRows {
                marks,
                asked: false,
                read_rows: after.noticed.read_rows,
            };
            return InPhase::Again;
        }
        if after.noticed.read_rows {
            self.read_poll_rows(coordinator);
            if !matches!(self.phase, Phase::Idle) {
                return InPhase::Again;
            }
        }
        InPhase::Over
    }

    /// The rows listed for the handoffs asked of this run (`marks` marks) answered `listed`.
    fn own_rows_listed(
        &mut self,
        coordinator: &mut Coordinator<T>,
        listed: Listed,
        (marks, read_rows): (u64, bool),
        owner: &str,
        now_ms: u64,
    ) {
        self.phase = Phase::Idle;
        if let Listed::Rows(rows) = listed {
            let rows = coordinator.asked_rows(marks, rows, owner, now_ms);
            if !rows.is_empty() {
                self.phase = Phase::HandingOver { rows, read_rows };
                return;
            }
        }
        // Not read: the mark is not acted on, and the next poll that sees it lists again.
        if read_rows {
            self.read_poll_rows(coordinator);
        }
    }

    /// Between phases: the next round or poll when one is due, else how long to wait for it;
    /// `None`: the paced takes resume (ask again).
    fn between(
        &mut self,
        coordinator: &mut Coordinator<T>,
        reading: &HashSet<Arc<str>>,
        now: T,
        now_ms: u64,
    ) -> Option<Step<T>> {
        if self.cancelled {
            return Some(Step::Exit);
        }
        if std::mem::take(&mut self.woken) {
            // A reader ended or a shard was marked: the round reads the rows.
            coordinator.heard_news();
            return Some(self.round(reading, now));
        }
        if now >= self.next_listing {
            return Some(self.round(reading, now));
        }
        let polling = !self.handover_poll.is_zero();
        // With the handover poll off, the notice is still read every renewal interval for
        // another run under this owner id, and by beat for the handoffs asked of this run.
        let checking = !polling && coordinator.reads_notices_unpolled();
        if checking && now >= self.next_poll {
            self.next_poll = now + coordinator.idle_poll_interval();
            self.reading = self.in_hand(reading);
            self.phase = Phase::Notice;
            return Some(self.notice_step(coordinator, now, now_ms));
        }
        if polling
            && now >= self.next_poll
            && let Some(step) = self.poll(coordinator, reading, now, now_ms)
        {
            return Some(step);
        }
        let mut until = if polling || checking {
            self.next_listing.min(self.next_poll)
        } else {
            self.next_listing
        };
        if let Some(passes) = self.paced.take() {
            if passes.planned_before_a_seek(coordinator) || passes.planned_blind(coordinator, now) {
                // Its takes would start where shards started before the seek, or take the
                // turns of peers it did not know then: plan again.
                return Some(self.round(reading, now));
            }
            if coordinator.is_paused() || !coordinator.beat_allows_takes() {
                // An earlier run under this owner id is alive, or the beat that would keep the
                // takes alive does not count: this one takes nothing (a new chain wakes a round).
            } else if coordinator.take_allowance(now, now_ms, passes.planned()) > 0 {
                self.reading = reading.clone();
                self.phase = Phase::Passing(passes);
                return None;
            } else {
                until = until.min(coordinator.next_take_at(now, now_ms, passes.planned()));
                self.paced = Some(passes);
            }
        }
        Some(Step::Wait(Some(until)))
    }

    /// The poll's read of the notice: whole or its head alone, and a whole read consistent or a
    /// little behind ([`Coordinator::consistent_notice_due`]).
    fn notice_step(&mut self, coordinator: &Coordinator<T>, now: T, now_ms: u64) -> Step<T> {
        let whole = coordinator.whole_notice_due(now, now_ms);
        self.notice_consistent = whole && coordinator.consistent_notice_due(now);
        Step::ReadNotice {
            whole,
            consistent: self.notice_consistent,
        }
    }

    /// Keeps `passes` for between the rounds if takes of theirs wait for the pace.
    fn park(&mut self, passes: RoundPasses) {
        if passes.has_queued() {
            self.paced = Some(passes);
            #[cfg(test)]
            {
                self.paced_waits += 1;
            }
        }
    }

    /// The shards being read, and those whose takes wait for the pace: the poll waits for
    /// neither (the paced takes go out without a round).
    fn in_hand(&self, reading: &HashSet<Arc<str>>) -> HashSet<Arc<str>> {
        let mut in_hand = reading.clone();
        if let Some(passes) = &self.paced {
            in_hand.extend(passes.queued().cloned());
        }
        in_hand
    }

    /// The handover poll, due now: the notice read (which tells whose rows to read), or the rows
    /// of the shards it waits for; nothing when it waits for none.
    fn poll(
        &mut self,
        coordinator: &mut Coordinator<T>,
        reading: &HashSet<Arc<str>>,
        now: T,
        now_ms: u64,
    ) -> Option<Step<T>> {
        let in_hand = self.in_hand(reading);
        if coordinator.uses_notices() {
            self.next_poll = now
                + if !coordinator.poll_waits(&in_hand) {
                    coordinator.idle_poll_interval().max(self.handover_poll)
                } else {
                    self.handover_poll
                };
            self.reading = in_hand;
            self.phase = Phase::Notice;
            return Some(self.notice_step(coordinator, now, now_ms));
        }
        self.next_poll = now + self.handover_poll;
        let wanted = coordinator.poll_wanted(&in_hand);
        if wanted.is_empty() {
            return None;
        }
        self.reading = in_hand;
        self.phase = Phase::Rows {
            listing: Vec::new(),
            wanted,
            poll: true,
            asked: true,
            eventual: false,
        };
        self.rows_asked = now;
        Some(Step::ListRows { eventual: false })
    }

    fn round(&mut self, reading: &HashSet<Arc<str>>, now: T) -> Step<T> {
        self.woken = false;
        // The round plans again on the rows it reads.
        self.paced = None;
        self.next_listing = now + self.listing_interval;
        self.reading = reading.clone();
        self.phase = Phase::Listing;
        Step::ListShards
    }

    /// The round's takes are over: its handoff requests, then its deletions follow (after the
    /// first round: that one hands the subscription out as soon as it can); whether they do.
    fn takes_over(&mut self, coordinator: &mut Coordinator<T>, now: T) -> bool {
        if !self.handover_poll.is_zero() && coordinator.poll_waits(&self.reading) {
            // It waits for a shard now: the next poll a poll interval away at most, not the
            // renewal interval of an instance that waited for none.
            self.next_poll = self.next_poll.min(now + self.handover_poll);
        }
        let asks = coordinator.take_asks();
        if !asks.is_empty() {
            self.phase = Phase::Asking(Some(asks));
            return true;
        }
        self.asks_over(coordinator, now)
    }

    /// Every handoff the round asked for is over.
    pub(crate) fn asked(&mut self, coordinator: &mut Coordinator<T>, now: T) {
        if !matches!(self.phase, Phase::Asking(None)) {
            // Not asked for: nothing changes.
            return;
        }
        self.phase = Phase::Idle;
        coordinator.heard_news();
        // By beat, the holders hear of the requests from their marks, which follow them.
        let marks = coordinator.take_marks();
        if !marks.is_empty() {
            self.phase = Phase::Marking(Some(marks));
            return;
        }
        self.asks_over(coordinator, now);
    }

    /// The marks of the round's requests were written (or not: a holder whose mark failed hears
    /// of nothing; its request lapses, and a later round asks again and marks it).
    pub(crate) fn marked(&mut self, coordinator: &mut Coordinator<T>, now: T) {
        if !matches!(self.phase, Phase::Marking(None)) {
            // Not asked for: nothing changes.
            return;
        }
        self.phase = Phase::Idle;
        self.asks_over(coordinator, now);
    }

    /// The round's deletions follow, after the first round; whether they do.
    fn asks_over(&mut self, coordinator: &mut Coordinator<T>, now: T) -> bool {
        let deletions = coordinator.take_deletions();
        if self.looping && !deletions.is_empty() {
            self.phase = Phase::Deleting(Some(deletions));
            return true;
        }
        self.round_over(now);
        false
    }

    /// Every deletion of the round is over.
    pub(crate) fn deleted(&mut self, now: T) {
        if !matches!(self.phase, Phase::Deleting(None)) {
            // Not asked for: nothing changes.
            return;
        }
        self.round_over(now);
    }

    fn round_over(&mut self, now: T) {
        self.phase = Phase::Idle;
        if !self.looping {
            self.looping = true;
            self.next_listing = now + self.listing_interval;
            self.next_poll = now + self.handover_poll;
        }
    }

    /// `ListShards` answered.
    pub(crate) fn listed(&mut self, coordinator: &mut Coordinator<T>, shards: Shards, now: T) {
        if !matches!(self.phase, Phase::Listing) {
            // Not asked for: nothing changes.
            return;
        }
        let listing = match shards {
            Shards::Listed(listing) => listing,
            Shards::StreamNotFound => {
                coordinator.stream_not_found();
                return self.round_over(now);
            }
            Shards::Failed => return self.round_over(now),
        };
        coordinator.listed(&listing);
        let wanted = coordinator.wanted(&listing, &self.reading);
        if wanted.is_empty() && !(self.looping && coordinator.hygiene_due(now)) {
            // Nothing to decide on, and no rows to tidy yet (no row is read, so none deleted).
            return self.rows_of_round(
                coordinator,
                listing,
                Rows::new(),
                &HashSet::new(),
                (now, 0),
            );
        }
        // The first round reads the rows; a later one may plan on them as last read.
        self.phase = if !self.looping {
            Phase::Rows {
                listing,
                wanted,
                poll: false,
                asked: false,
                eventual: false,
            }
        } else {
            Phase::Steady { listing, wanted }
        };
    }

    /// The `list` of the stream's rows answered.
    pub(crate) fn rows_listed(
        &mut self,
        coordinator: &mut Coordinator<T>,
        listed: Listed,
        owner: &str,
        now: T,
        now_ms: u64,
    ) {
        if let Phase::OwnRows {
            marks,
            asked: true,
            read_rows,
        } = self.phase
        {
            self.own_rows_listed(coordinator, listed, (marks, read_rows), owner, now_ms);
            return;
        }
        if !matches!(self.phase, Phase::Rows { asked: true, .. }) {
            // Not asked for: nothing changes.
            return;
        }
        let Phase::Rows {
            listing,
            wanted,
            poll,
            ..
        } = std::mem::replace(&mut self.phase, Phase::Idle)
        else {
            unreachable!("checked above");
        };
        if coordinator.rows_too_old(now.saturating_since(self.rows_asked)) {
            // Frozen between the read and its answer: a round reads them again.
            self.phase = Phase::RoundDue;
            return;
        }
        match listed {
            Listed::Rows(listed) => {
                let mut rows: Rows = wanted
                    .iter()
                    .map(|shard| (Arc::clone(shard), None))
                    .collect();
                for (shard, row) in listed {
                    rows.insert(shard, Some(row));
                }
                if poll {
                    self.poll_rows(coordinator, rows, owner, now, now_ms);
                } else {
                    let age = crate::lease::millis(now.saturating_since(self.rows_asked));
                    coordinator.read_all_rows(&listing, now, now_ms, now_ms.saturating_sub(age));
                    self.rows_of_round(coordinator, listing, rows, &HashSet::new(), (now, now_ms));
                }
            }
            // A failed poll has a round read the rows in its place (row by row, naming what is
            // wrong); a round reads row by row, unless it wanted no row (it listed them to tidy
            // them only).
            Listed::Failed if poll => {
                coordinator.poll_failed();
                self.phase = Phase::RoundDue;
            }
            _ if wanted.is_empty() => {
                self.rows_of_round(
                    coordinator,
                    listing,
                    Rows::new(),
                    &HashSet::new(),
                    (now, now_ms),
                );
            }
            Listed::Failed | Listed::Unsupported => {
                self.phase = Phase::Each {
                    listing,
                    wanted,
                    poll,
                    asked: false,
                };
            }
        }
    }

    /// The reads of each row answered: `rows`, and the shards whose row could not be read.
    pub(crate) fn rows_read(
        &mut self,
        coordinator: &mut Coordinator<T>,
        rows: Rows,
        unreadable: &HashSet<Arc<str>>,
        owner: &str,
        now: T,
        now_ms: u64,
    ) {
        if !matches!(self.phase, Phase::Each { asked: true, .. }) {
            // Not asked for: nothing changes.
            return;
        }
        let Phase::Each { listing, poll, .. } = std::mem::replace(&mut self.phase, Phase::Idle)
        else {
            unreachable!("checked above");
        };
        if coordinator.rows_too_old(now.saturating_since(self.rows_asked)) {
            self.phase = Phase::RoundDue;
            return;
        }
        if !poll {
            self.rows_of_round(coordinator, listing, rows, unreadable, (now, now_ms));
        } else if unreadable.is_empty() {
            self.poll_rows(coordinator, rows, owner, now, now_ms);
        } else {
            coordinator.poll_failed();
            self.phase = Phase::RoundDue;
        }
    }

    fn rows_of_round(
        &mut self,
        coordinator: &mut Coordinator<T>,
        listing: Vec<ShardInfo>,
        mut rows: Rows,
        unreadable: &HashSet<Arc<str>>,
        (now, now_ms): (T, u64),
    ) {
        coordinator.round_rows(&listing, &mut rows, now, now_ms);
        self.phase = Phase::Passing(RoundPasses::new(listing, rows, unreadable));
    }

    fn poll_rows(
        &mut self,
        coordinator: &mut Coordinator<T>,
        rows: Rows,
        owner: &str,
        now: T,
        now_ms: u64,
    ) {
        if coordinator.poll_finds_takeable(rows, &self.reading, owner, now, now_ms) {
            self.phase = Phase::RoundDue;
        }
    }

    /// The poll's read of the stream's notice answered.
    pub(crate) fn notice_read(
        &mut self,
        coordinator: &mut Coordinator<T>,
        read: NoticeRead,
        owner: &str,
        now: T,
        now_ms: u64,
    ) {
        if !matches!(self.phase, Phase::Notice) {
            // Not asked for: nothing changes.
            return;
        }
        self.phase = Phase::Idle;
        let noticed = match read {
            NoticeRead::Notice(notice) if self.notice_consistent => {
                coordinator.noticed(&notice, &self.reading, owner, now, now_ms)
            }
            NoticeRead::Notice(notice) => {
                coordinator.noticed_behind(&notice, &self.reading, owner, now, now_ms)
            }
            NoticeRead::Head(head) => {
                coordinator.head_noticed(&head, &self.reading, owner, now, now_ms)
            }
            NoticeRead::Unsupported => {
                coordinator.notices_unsupported();
                Noticed {
                    read_rows: !self.handover_poll.is_zero(),
                    ..Noticed::default()
                }
            }
            NoticeRead::Failed => Noticed::default(),
        };
        self.phase = Phase::Noticed(AfterNotice {
            noticed,
            waiting: false,
            beat_until: None,
        });
    }

    /// The write of this run's record was answered at `now_ms`: `landed`, or it failed.
    pub(crate) fn announced(
        &mut self,
        coordinator: &mut Coordinator<T>,
        landed: bool,
        now_ms: u64,
    ) {
        if let Phase::Noticed(after) = &mut self.phase
            && std::mem::take(&mut after.waiting)
        {
            coordinator.recorded(landed, now_ms);
        }
    }

    /// The poll's beat was written (`landed`), or not: a beat is a hint. One that landed is
    /// this instance's own beat from now, whether or not the next read of the notice reads the
    /// beats ([`notice_reads`](super::notice_reads)).
    pub(crate) fn beaten(&mut self, coordinator: &mut Coordinator<T>, owner: &str, landed: bool) {
        if let Phase::Noticed(after) = &mut self.phase {
            after.waiting = false;
            if let Some(until_ms) = after.beat_until.take().filter(|_| landed) {
                coordinator.own_beat_landed(owner, until_ms);
            }
        }
    }

    /// The poll reads the rows of the shards it waits for (none: nothing to read).
    fn read_poll_rows(&mut self, coordinator: &Coordinator<T>) {
        let wanted = coordinator.poll_wanted(&self.reading);
        if !wanted.is_empty() {
            self.phase = Phase::Rows {
                listing: Vec::new(),
                wanted,
                poll: true,
                asked: false,
                eventual: false,
            };
        }
    }

    /// Every take of the pass is over.
    pub(crate) fn took(&mut self, coordinator: &mut Coordinator<T>, now: T) {
        if !matches!(self.phase, Phase::Taking(_)) {
            // Not asked for: nothing changes.
            return;
        }
        let Phase::Taking(mut passes) = std::mem::replace(&mut self.phase, Phase::Idle) else {
            unreachable!("checked above");
        };
        coordinator.heard_news();
        if passes.passed(coordinator) {
            // Shards were marked never to be read: their children are decided at once.
            self.phase = Phase::Passing(passes);
        } else {
            // The next batch goes out from between the rounds, where a cancel, a pause and a
            // round or poll due come first: a batch that lasted long enough for the pace to
            // refill would otherwise chain into the next until the queue is empty.
            self.park(passes);
            self.takes_over(coordinator, now);
        }
    }
}

#[cfg(test)]
mod tests;

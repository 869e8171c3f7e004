//! The lease of one held shard and every store write it takes, as a state machine with no I/O
//! and no clock of its own: the driver (`reader::write_lease`) asks it for the next write at
//! `now`, sends that write, and hands back the answer; the simulation does the same with a
//! virtual clock. The rules:
//!
//! - a lease granted by a call sent at `sent` may be used until `sent + lease - holder_margin`
//!   by this instance's monotonic clock, and until the same moment by its wall clock (a host
//!   suspended for longer than the lease finds its wall clock past it): the holder's half of the
//!   skew tolerance, the taker's half being [`SKEW_TOLERANCE`](crate::SKEW_TOLERANCE) in
//!   [`LeaseState::is_expired_at`](crate::LeaseState::is_expired_at);
//! - one write is in flight at a time, so the store sees this shard's writes in the order they
//!   were sent: a renewal and a checkpoint that renews could otherwise land in the other order
//!   and move the expiry back behind the lease this instance counts on;
//! - a renewal is sent every `renew`, counted from the send of the previous write that renewed
//!   (a checkpoint write renews too);
//! - a settled prefix that grew becomes the pending checkpoint; it is written at most once per
//!   checkpoint interval, and the settlements meanwhile fold into one write;
//! - a refused write stops the shard at once, without a checkpoint; a renewal that failed for
//!   transport reasons is retried while the lease is valid, and the shard stops when too little
//!   of it is left for another try; a failed checkpoint write is retried after a third of the
//!   renewal interval, unless a newer one replaced it;
//! - closing, the shard delivers nothing more, and after the write in flight the final
//!   checkpoint (or `SHARD_END`, which covers every settled record and so drops what is
//!   pending) and the release go out, in that order, and nothing after the release;
//! - handed off (a handoff another instance asked for), the final checkpoint and the new
//!   owner go out in one write after the write in flight, and nothing after it; a refused one
//!   (the request was replaced) falls back to the final checkpoint and the release.

use std::ops::Add;
use std::sync::Arc;
use std::time::Duration;

use crate::SharedStr;
use crate::clock::Instant;
use crate::commit::UnitId;
use crate::lease::millis;
use crate::{LeaseTimings, SHARD_END};

pub(crate) mod beat;
mod commit;
#[cfg(any(test, feature = "dynamodb-lease"))]
mod joint;
mod news;

use beat::BeatGrant;
use commit::Committing;
pub(crate) use commit::{Commit, Covers, Folded, Outcome};
pub(crate) use news::LeaseNews;

/// The shortest wait before retrying a failed renewal; with less than this left of the lease the
/// shard stops instead (a renewal sent that late could not save the lease).
pub(crate) const MIN_RETRY: Duration = Duration::from_millis(50);

/// A moment the machine reasons about: [`Instant`] in the driver, a virtual time since the start
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

/// A store write the driver is to send now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Write {
    /// `renew`.
    Renew,
    /// `checkpoint_and_renew` with this checkpoint, and how far behind the shard's newest record
    /// the last read before it was (stored with it, for the lease-table view).
    Checkpoint {
        checkpoint: SharedStr,
        behind_ms: Option<u64>,
    },
    /// The final `checkpoint` (no renewal: the release follows): the pending checkpoint, or
    /// `SHARD_END`.
    Final(SharedStr),
    /// `release`.
    Release,
    /// `hand_over` to `to`, with the pending checkpoint if there is one: the final write.
    HandOver {
        to: Arc<str>,
        checkpoint: Option<SharedStr>,
    },
    /// Exactly once: the handlers' writes and the checkpoint in one transaction, conditioned on
    /// the lease; it renews.
    Commit(Commit),
}

/// How the store answered the write in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Answer {
    Done,
    /// The row's owner (or counter) is no longer this one's: another instance holds the shard.
    Refused,
    /// No answer the caller can trust (transport, throttling, a timeout): the write may have
    /// landed or not.
    Failed,
    /// Certainly not applied, and nothing refused for good (a transaction conflict, throttling
    /// reasons): sent again.
    NotApplied,
    /// A commit's unit's own write refused (its condition, or a validation): nothing applied.
    #[cfg_attr(
        not(any(test, feature = "dynamodb-lease")),
        expect(
            dead_code,
            reason = "only the DynamoDB store (feature dynamodb-lease) and the simulation answer it"
        )
    )]
    UserRefused(UnitId),
    /// A commit of several units refused as a whole, naming none (a request-level validation):
    /// nothing applied. Its units commit one at a time from now on, until one lands, so that
    /// the unit at fault is the one refused.
    #[cfg_attr(
        not(any(test, feature = "dynamodb-lease")),
        expect(
            dead_code,
            reason = "only the DynamoDB store (feature dynamodb-lease) answers it"
        )
    )]
    Split,
}

impl Answer {
    /// The answer as a write that is no commit takes it: a certain non-application is retried
    /// as a failure is, and a unit's refusal cannot concern it.
    fn of_plain_write(self) -> Self {
        match self {
            Self::NotApplied | Self::UserRefused(_) | Self::Split => Self::Failed,
            other => other,
        }
    }
}

/// How a shard this instance still holds is handed back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Close {
    /// Write the pending checkpoint, then release.
    Release,
    /// Read to its end, every delivery settled: write `SHARD_END`, then release.
    Finished,
    /// A handoff: hand the row, with the pending checkpoint, to the instance that asked
    /// ([`ShardLease::hand_to`]) in one write. Without one asked, a release.
    HandOver,
}

/// Why the machine ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ending {
    /// The lease is lost (refused), or ran out by this instance's clock: nothing was written
    /// at the end, and another instance may hold the shard by now.
    Lost(Lost),
    /// The closing writes went out; `written` whether the final checkpoint landed (of a shard
    /// read to its end: its `SHARD_END`, so not when a delivery of it went back while closing).
    Closed { written: bool },
}

/// How the lease was lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lost {
    /// The store refused a write.
    Refused,
    /// The lease ran out by this instance's clock (the store failed meanwhile, or a delivery
    /// check found it past).
    RanOut,
}

/// What the driver does next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Next<T> {
    /// Send this write, then hand its answer to [`ShardLease::on_answer`].
    Send(Write),
    /// Nothing to send before this moment (or before something wakes the driver: a settlement,
    /// the close); `None` for no timer at all.
    Wait(Option<T>),
    /// The machine ended: the driver stops.
    Ended(Ending),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Holding,
    /// Closing: the final writes go out once the write in flight answered.
    Closing(Close),
    /// The final checkpoint landed (or there was none to write): the release is next.
    Releasing {
        written: bool,
    },
    Ended(Ending),
}

#[derive(Debug, Clone)]
struct InFlight<T> {
    write: Write,
    sent: T,
    sent_ms: u64,
    /// Whether a checkpoint write that fails is sent again: not once a seek dropped what was
    /// pending (its position writes its own checkpoints).
    restore: bool,
}

/// The lease of one held shard and its store writes.
#[derive(Debug, Clone)]
pub(crate) struct ShardLease<T = Instant> {
    timings: LeaseTimings,
    /// Until when the shard may deliver (exclusive), by the monotonic clock.
    valid_until: T,
    /// The same moment by the wall clock, in milliseconds since the epoch.
    valid_until_ms: u64,
    next_renewal: T,
    /// The newest checkpoint not yet sent.
    pending: Option<SharedStr>,
    /// Not before this moment is the pending checkpoint sent: the cadence after a write, the
    /// retry wait after a failed one.
    checkpoint_due: T,
    in_flight: Option<InFlight<T>>,
    phase: Phase,
    /// No checkpoint will be written any more: a settlement now is refused.
    sealed: bool,
    /// The instance a handoff hands the shard to, once asked.
    hand_to: Option<Arc<str>>,
    /// How far behind the shard's newest record the last read was (`MillisBehindLatest`),
    /// written with each checkpoint.
    behind_ms: Option<u64>,
    /// Whether the final checkpoint in the works is `SHARD_END` (the shard was read to its end).
    finishing: bool,
    /// What happened to the lease that the driver has not said yet.
    news: Vec<LeaseNews>,
    /// Exactly once: the commits (`None`: at least once, checkpoints).
    committing: Option<Committing<T>>,
    /// A close of a shard read to its end became a release (a delivery of it went back): its
    /// `SHARD_END` was never written.
    finish_abandoned: bool,
    /// Kept alive by the instance's beat ([`beat`]): no renewal is written, and the lease lasts
    /// as long as a chain of beats that began while it counted.
    by_beat: bool,
}

impl<T: Moment> ShardLease<T> {
    /// Until when a lease granted (taken or renewed) by a call sent at `sent` may be used:
    /// `sent + lease - holder_margin`. The row's expiry is written from a clock read after
    /// `sent`, so the holder's deadline lies at least `holder_margin` before it.
    pub(crate) fn valid_after(timings: &LeaseTimings, sent: T) -> T {
        sent + timings.usable_lease()
    }

    /// The lease a take sent at `sent` (`sent_ms` by the wall clock) granted; the first renewal
    /// is due `renew` after the take was sent.
    pub(crate) fn taken(timings: LeaseTimings, sent: T, sent_ms: u64) -> Self {
        Self {
            timings,
            valid_until: Self::valid_after(&timings, sent),
            valid_until_ms: sent_ms.saturating_add(millis(timings.usable_lease())),
            next_renewal: sent + timings.renew(),
            pending: None,
            checkpoint_due: sent,
            in_flight: None,
            phase: Phase::Holding,
            sealed: false,
            hand_to: None,
            behind_ms: None,
            finishing: false,
            news: Vec::new(),
            committing: None,
            finish_abandoned: false,
            by_beat: false,
        }
    }

    /// A shard taken at `sent` by an instance whose chain of beats stood at `grant` then: kept
    /// alive by that chain ([`follow_beat`](Self::follow_beat)), not by renewals of its own.
    /// The take grants nothing by itself (the row's expiry lies a thousand years ahead and
    /// protects nothing from an instance that judges by beats): the lease lasts as long as the
    /// chain, and not at all if the chain did not count when the take was sent.
    pub(crate) fn taken_by_beat(
        timings: LeaseTimings,
        sent: T,
        sent_ms: u64,
        grant: Option<&BeatGrant<T>>,
    ) -> Self {
        let mut lease = Self {
            by_beat: true,
            ..Self::taken(timings, sent, sent_ms)
        };
        match grant {
            Some(grant) if grant.since <= sent && grant.counts_at(sent, sent_ms) => {
                lease.valid_until = grant.valid_until;
                lease.valid_until_ms = grant.valid_until_ms;
            }
            _ => {
                lease.valid_until = sent;
                lease.valid_until_ms = sent_ms;
            }
        }
        lease
    }

    /// The lease the row's writes give it (a checkpoint that renews, a commit, a hand-over): the
    /// lease of the timings, or for a lease kept alive by beats the thousand years of
    /// [`KEPT_BY_BEAT`](crate::lease::KEPT_BY_BEAT), so that its row stays one no instance
    /// judges by its expiry (a commit writing ten seconds would let any take through ten
    /// seconds later, while this instance still reads the shard).
    pub(crate) fn row_lease(&self) -> Duration {
        if self.by_beat {
            crate::lease::KEPT_BY_BEAT
        } else {
            self.timings.lease()
        }
    }

    /// The instance's chain of beats as it stands: the lease lasts as long as the chain if the
    /// chain began while the lease still counted ([`BeatGrant::covers`]); a chain that began
    /// later carries nothing (the shard may have been taken in the gap). A lease not kept alive
    /// by beats ignores it.
    pub(crate) fn follow_beat(&mut self, grant: &BeatGrant<T>) {
        if self.by_beat && grant.covers(self.valid_until, self.valid_until_ms) {
            self.valid_until = self.valid_until.max(grant.valid_until);
            self.valid_until_ms = self.valid_until_ms.max(grant.valid_until_ms);
        }
    }

    /// What to do at `now`. A write returned here is in flight from this moment (`now_ms` by
    /// the wall clock) until its answer.
    #[cfg(test)]
    pub(crate) fn next(&mut self, now: T, now_ms: u64) -> Next<T> {
        self.next_folding(now, now_ms, || None)
    }

    /// What to do at `now`, as [`next`](Self::next); exactly once, `fold` says what the next
    /// commit takes of the settled deliveries, asked only when one goes out.
    pub(crate) fn next_folding(
        &mut self,
        now: T,
        now_ms: u64,
        fold: impl FnOnce() -> Option<Folded>,
    ) -> Next<T> {
        if let Phase::Ended(ending) = self.phase {
            return Next::Ended(ending);
        }
        if self.in_flight.is_some() {
            return Next::Wait(None);
        }
        if self.by_beat && self.phase == Phase::Holding && !self.counts_at(now, now_ms) {
            // Nothing renews a lease kept alive by beats but the beat: once it ran out it is
            // lost, and stays lost (a later chain does not carry it).
            self.lose(Lost::RanOut);
            return Next::Ended(Ending::Lost(Lost::RanOut));
        }
        if self.committing.is_some() && matches!(self.phase, Phase::Holding | Phase::Closing(_)) {
            if let Phase::Closing(_) = self.phase {
                // Nothing settles from here on: what is settled commits, then the final writes.
                self.sealed = true;
            }
            match self.next_commit(now, now_ms, fold) {
                Some(Next::Send(write)) => return self.send(write, now, now_ms),
                Some(other) => return other,
                None => {}
            }
        }
        let write = match self.phase {
            Phase::Holding => {
                if now >= self.checkpoint_due
                    && let Some(checkpoint) = self.pending.take()
                {
                    Write::Checkpoint {
                        checkpoint,
                        behind_ms: self.behind_ms,
                    }
                } else if !self.by_beat && now >= self.next_renewal {
                    Write::Renew
                } else {
                    return Next::Wait(Some(self.next_timer()));
                }
            }
            Phase::Closing(how) => {
                // The final checkpoint is taken now: a settlement from here on is refused.
                self.sealed = true;
                let pending = self.pending.take();
                match (how, pending) {
                    // SHARD_END covers every settled record; a checkpoint still pending would
                    // land after it and move the shard back.
                    (Close::Finished, _) => {
                        self.finishing = true;
                        Write::Final(SharedStr::from(SHARD_END))
                    }
                    (Close::HandOver, checkpoint) if self.hand_to.is_some() => {
                        let to = self.hand_to.clone().expect("checked above");
                        // Nothing follows the handoff: its answer ends the machine.
                        self.phase = Phase::Releasing { written: false };
                        Write::HandOver { to, checkpoint }
                    }
                    (Close::HandOver, Some(checkpoint)) => Write::Final(checkpoint),
                    (Close::HandOver, None) => {
                        self.phase = Phase::Releasing { written: true };
                        Write::Release
                    }
                    (Close::Release, Some(checkpoint)) => Write::Final(checkpoint),
                    (Close::Release, None) => {
                        self.phase = Phase::Releasing { written: true };
                        Write::Release
                    }
                }
            }
            Phase::Releasing { .. } => Write::Release,
            Phase::Ended(_) => unreachable!("answered above"),
        };
        self.send(write, now, now_ms)
    }

    /// `write` goes out at `now`: it is in flight until its answer.
    fn send(&mut self, write: Write, now: T, now_ms: u64) -> Next<T> {
        self.in_flight = Some(InFlight {
            write: write.clone(),
            sent: now,
            sent_ms: now_ms,
            restore: true,
        });
        Next::Send(write)
    }

    fn next_timer(&self) -> T {
        let commit_waits = self
            .committing
            .as_ref()
            .is_some_and(|commits| commits.ready);
        // A lease kept alive by beats writes no renewal: its timer is the moment it runs out
        // unless the beat moves it, when the driver looks again.
        let renewal = if self.by_beat {
            self.valid_until
        } else {
            self.next_renewal
        };
        if self.pending.is_some() || commit_waits {
            renewal.min(self.checkpoint_due)
        } else {
            renewal
        }
    }

    /// The store answered the write in flight at `now`.
    pub(crate) fn on_answer(&mut self, now: T, answer: Answer) {
        let Some(flight) = self.in_flight.take() else {
            return;
        };
        if let Phase::Ended(_) = self.phase {
            // Lost while the write was on its way: its answer changes nothing.
            return;
        }
        if let Write::Commit(commit) = flight.write {
            self.commit_answered(now, commit, answer);
            return;
        }
        let answer = answer.of_plain_write();
        match (flight.write, answer) {
            (Write::Renew, Answer::Done) => self.renewed(flight.sent, flight.sent_ms),
            (Write::Checkpoint { .. }, Answer::Done) => {
                self.renewed(flight.sent, flight.sent_ms);
                self.checkpoint_due = now + self.timings.checkpoint_interval();
            }
            (Write::Renew | Write::Checkpoint { .. }, Answer::Refused) => self.lose(Lost::Refused),
            // Closing: the final writes go out next, conditioned on the row as every write is.
            (Write::Renew, Answer::Failed) if matches!(self.phase, Phase::Closing(_)) => {}
            (Write::Renew, Answer::Failed) => match self.retry_wait(now) {
                Some(wait) => self.next_renewal = now + wait,
                None => self.lose(Lost::RanOut),
            },
            (Write::Checkpoint { checkpoint, .. }, Answer::Failed) => {
                // Sent again, unless a newer one replaced it meanwhile or a seek dropped it.
                if flight.restore {
                    self.pending.get_or_insert(checkpoint);
                }
                self.checkpoint_due = now + self.timings.renew() / 3;
            }
            (closing, answer) => self.closing_answered(closing, answer),
        }
    }

    /// A closing write (the final checkpoint, the release, the handoff) was answered.
    fn closing_answered(&mut self, write: Write, answer: Answer) {
        match (write, answer) {
            (Write::Final(_), Answer::Done) => {
                if self.finishing {
                    self.news.push(LeaseNews::Finished);
                }
                self.phase = Phase::Releasing { written: true };
            }
            // Nothing more is written after a refused or failed final checkpoint: the lease is
            // left to lapse, and the next owner reads on from the last checkpoint that landed.
            (Write::Final(_), answer) => {
                if answer == Answer::Refused {
                    self.news.push(LeaseNews::RefusedClosing {
                        checkpoint_written: false,
                    });
                }
                self.phase = Phase::Ended(Ending::Closed { written: false });
            }
            (Write::Release, answer) => {
                let written = matches!(self.phase, Phase::Releasing { written: true })
                    && !self.finish_abandoned;
                match answer {
                    Answer::Done => self.news.push(LeaseNews::Released),
                    Answer::Refused => self.news.push(LeaseNews::RefusedClosing {
                        checkpoint_written: written,
                    }),
                    _ => {}
                }
                self.phase = Phase::Ended(Ending::Closed { written });
            }
            (Write::HandOver { to, .. }, Answer::Done) => {
                // The row is the other instance's now.
                self.news.push(LeaseNews::HandedOver { to });
                self.phase = Phase::Ended(Ending::Closed { written: true });
            }
            // Refused: the row is no longer held, or the request names another instance now (it
            // lapsed and was replaced). The final checkpoint and a release follow, conditioned
            // on the row as every write: a row still held keeps what was settled.
            (Write::HandOver { checkpoint, .. }, Answer::Refused) => {
                self.hand_to = None;
                self.pending = checkpoint;
                self.phase = Phase::Closing(Close::Release);
            }
            // No answer: it may have landed (the row is the asker's) or not (the row is still this
            // instance's, and its coordinator takes it again at its next look). Nothing more is
            // written by this reader: the next owner reads on from the last checkpoint that
            // landed.
            (Write::HandOver { .. }, _) => {
                self.phase = Phase::Ended(Ending::Closed { written: false });
            }
            (Write::Renew | Write::Checkpoint { .. } | Write::Commit(_), _) => {
                unreachable!("renewals, checkpoints and commits are answered in on_answer")
            }
        }
    }

    /// A write that renewed, sent at `sent`: the lease holds until
    /// [`valid_after(sent)`](Self::valid_after) by each clock (a late answer never shortens
    /// it), and the next renewal is due `renew` after `sent`.
    fn renewed(&mut self, sent: T, sent_ms: u64) {
        self.extended(sent, sent_ms);
        self.next_renewal = sent + self.timings.renew();
    }

    /// A write that renewed, sent at `sent`: the lease holds until
    /// [`valid_after(sent)`](Self::valid_after) by each clock, a late answer never shortening it.
    /// A lease kept alive by beats is not extended by a row's write: its row's expiry lies a
    /// thousand years ahead and protects nothing from an instance that judges by beats.
    fn extended(&mut self, sent: T, sent_ms: u64) {
        if self.by_beat {
            return;
        }
        self.valid_until = self.valid_until.max(Self::valid_after(&self.timings, sent));
        self.valid_until_ms = self
            .valid_until_ms
            .max(sent_ms.saturating_add(millis(self.timings.usable_lease())));
    }

    /// How long after `now` a renewing write that failed is sent again: a third of the renewal
    /// interval, at most half the lease left, at least half of [`MIN_RETRY`]; `None` when too
    /// little of the lease is left for another try.
    fn retry_wait(&self, now: T) -> Option<Duration> {
        let left = self.valid_until.saturating_since(now);
        (left > MIN_RETRY).then(|| (self.timings.renew() / 3).min(left / 2).max(MIN_RETRY / 2))
    }

    /// A shard read to its end closes as a release instead (a delivery of it went back): its
    /// `SHARD_END` is never written, and the ending says so.
    fn abandon_finish(&mut self) {
        self.phase = Phase::Closing(Close::Release);
        self.finish_abandoned = true;
    }

    fn lose(&mut self, how: Lost) {
        self.news.push(match how {
            Lost::Refused => LeaseNews::Refused,
            Lost::RanOut => LeaseNews::RanOut,
        });
        self.phase = Phase::Ended(Ending::Lost(how));
        self.sealed = true;
        self.pending = None;
    }

    /// A settled prefix grew to `checkpoint`: it is the one to write next. Answers `false` when
    /// no checkpoint of this shard will be written any more (the settlement is then refused:
    /// the shard's next owner delivers the record again).
    #[inline]
    pub(crate) fn checkpoint_ready(&mut self, checkpoint: SharedStr) -> bool {
        if self.sealed {
            return false;
        }
        self.pending = Some(checkpoint);
        true
    }

    /// A read answered that the shard's newest record is `millis_behind` ahead of it: the
    /// figure the next checkpoint is written with (a read that says nothing keeps the last).
    pub(crate) fn read_behind(&mut self, millis_behind: Option<i64>) {
        if let Some(behind) = millis_behind {
            self.behind_ms = Some(u64::try_from(behind).unwrap_or(0));
        }
    }

    /// How far behind the shard's newest record the last read that said so was.
    pub(crate) fn behind_ms(&self) -> Option<u64> {
        self.behind_ms
    }

    /// Whether a settlement still counts (no final checkpoint was taken, the lease is not lost).
    #[inline]
    pub(crate) fn takes_settlements(&self) -> bool {
        !self.sealed
    }

    /// Forgets the pending checkpoint, and the one in flight should it fail (a seek: the new
    /// position's records write their own).
    pub(crate) fn drop_pending(&mut self) {
        self.pending = None;
        if let Some(flight) = &mut self.in_flight {
            flight.restore = false;
        }
    }

    /// How long a handoff waits for the deliveries in flight to settle.
    pub(crate) fn handoff_drain(&self) -> Duration {
        self.timings.handoff_drain()
    }

    /// A handoff asked for the shard on behalf of `to`: a [`Close::HandOver`] hands it
    /// there.
    pub(crate) fn hand_to(&mut self, to: Arc<str>) {
        self.hand_to = Some(to);
    }

    /// Whether a handoff asked the shard for `to`.
    pub(crate) fn hands_to(&self, to: &str) -> bool {
        self.hand_to.as_deref() == Some(to)
    }

    /// The handoff is off: the request was withdrawn or replaced before its write.
    pub(crate) fn hand_off_cancelled(&mut self) {
        self.hand_to = None;
    }

    /// Hands the shard back `how`: it delivers nothing more, and its final writes follow the
    /// write in flight. A lost lease writes nothing.
    pub(crate) fn close(&mut self, how: Close) {
        if self.phase == Phase::Holding {
            self.phase = Phase::Closing(how);
        }
    }

    /// A shard the reader read to its end closes as a release: a delivery of it went back after
    /// the end was seen (exactly once, its commit refused), so it is not finished, and the
    /// ending says so.
    pub(crate) fn close_unfinished(&mut self) {
        if self.phase == Phase::Holding {
            self.abandon_finish();
        }
    }

    /// The lease ran out by this instance's clock (seen by a delivery check): the shard stops
    /// at once and writes nothing more. A shard already closing goes on closing: its final
    /// writes are conditioned on the row, which refuses them if another instance holds it.
    pub(crate) fn run_out(&mut self) {
        if self.phase == Phase::Holding {
            self.lose(Lost::RanOut);
        }
    }

    /// Whether the shard may hand out a record at `now` (`now_ms` by the wall clock): it is
    /// held, not closing, and its lease is valid by both clocks. The monotonic one ignores
    /// steps of the wall clock, but stands still while the host is suspended, and the lease in
    /// the table runs on in wall time meanwhile.
    #[inline]
    pub(crate) fn may_deliver(&self, now: T, now_ms: u64) -> bool {
        self.may_deliver_by(now, |valid_until_ms| now_ms < valid_until_ms)
    }

    /// [`may_deliver`](Self::may_deliver), with the wall clock asked by `wall_before`: whether
    /// it still reads before the given epoch millisecond. A driver that keeps the deadline in
    /// its clock's own type compares there, rather than turn every reading into milliseconds.
    #[inline]
    pub(crate) fn may_deliver_by(&self, now: T, wall_before: impl FnOnce(u64) -> bool) -> bool {
        self.phase == Phase::Holding && self.counts_by(now, wall_before)
    }

    /// Whether the lease counts at `now` by both clocks, whatever the phase.
    #[inline]
    fn counts_at(&self, now: T, now_ms: u64) -> bool {
        self.counts_by(now, |valid_until_ms| now_ms < valid_until_ms)
    }

    /// [`counts_at`](Self::counts_at), with the wall clock asked by `wall_before` (whether it
    /// reads before the given epoch millisecond), and only once the monotonic clock counts.
    #[inline]
    fn counts_by(&self, now: T, wall_before: impl FnOnce(u64) -> bool) -> bool {
        now < self.valid_until && wall_before(self.valid_until_ms)
    }

    /// Whether the shard delivers nothing more: closing, or ended.
    #[inline]
    pub(crate) fn is_halted(&self) -> bool {
        self.phase != Phase::Holding
    }

    /// Whether a shard read to its end closes as a release instead (a delivery of it went back).
    #[cfg(test)]
    pub(crate) fn finish_abandoned(&self) -> bool {
        self.finish_abandoned
    }

    /// What happened to the lease since the last call, for the driver to say.
    pub(crate) fn take_news(&mut self) -> Vec<LeaseNews> {
        std::mem::take(&mut self.news)
    }

    /// How the machine ended, once it did.
    pub(crate) fn ending(&self) -> Option<Ending> {
        match self.phase {
            Phase::Ended(ending) => Some(ending),
            _ => None,
        }
    }

    /// Whether the lease is lost (refused, or run out).
    pub(crate) fn is_lost(&self) -> bool {
        matches!(self.phase, Phase::Ended(Ending::Lost(_)))
    }

    /// Until when the shard may deliver by the monotonic clock (exclusive).
    #[cfg(test)]
    pub(crate) fn valid_until(&self) -> T {
        self.valid_until
    }

    /// The write in flight, if any.
    #[cfg(test)]
    pub(crate) fn in_flight(&self) -> Option<&Write> {
        self.in_flight.as_ref().map(|flight| &flight.write)
    }

    /// Whether a checkpoint waits to be sent: the driver, told of it when it came (by the settle
    /// or the seek that made it pending), has a timer for it ([`next_timer`](Self::next_timer)
    /// counts the cadence while one waits).
    #[inline]
    pub(crate) fn has_pending(&self) -> bool {
        self.pending.is_some()
    }

    /// The checkpoint waiting to be sent, if any.
    #[cfg(test)]
    pub(crate) fn pending(&self) -> Option<&SharedStr> {
        self.pending.as_ref()
    }
}

#[cfg(test)]
mod tests;

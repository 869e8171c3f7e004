//! One held shard as one state machine with no I/O and no clock of its own: its lease
//! ([`ShardLease`]: the deadline, renewals, checkpoint writes, the closing writes), its reading
//! ([`ReadState`]: calls, pacing, backoff, iterators, seeks), its watermark (the settled prefix
//! that becomes the checkpoint), the deliveries in flight and the records handed back. Every
//! input carries `now` (and the wall clock where the lease is checked); every output is a call,
//! a delivery, a store write or a wait. [`ShardHandle`](super::ShardHandle) holds it behind a
//! mutex for the reader's tasks and the deliveries; the simulation holds it on a virtual clock.

use std::sync::Arc;
use std::time::Duration;

use super::lease::{Answer, Close, Ending, LeaseNews, Moment, Next, ShardLease, Write};
use super::read::{Call, Fetch, ReadSettings, ReadState, Sequenced, Stop, Want};
use crate::delivery::settlement::Standing;
use crate::kinesis::iterator::ShardIterator;
use crate::settings::position::ShardStart;
use crate::watermark::{Ticket, Watermark};
use crate::{LeaseState, SharedStr};

mod commits;
#[cfg(any(test, feature = "dynamodb-lease"))]
mod joint;

#[cfg(any(test, feature = "dynamodb-lease"))]
pub(crate) use commits::Member;
pub(crate) use commits::{CommitNews, Staged};
#[cfg(any(test, feature = "dynamodb-lease"))]
pub(crate) use joint::Part;

/// A record a handler handed back (`nack(true)`, `nack_after`, or dropped unsettled), waiting to
/// be delivered again.
#[derive(Debug)]
pub(crate) struct Redelivery<R, T> {
    pub(crate) record: R,
    pub(crate) ticket: Ticket,
    /// How many times it was delivered so far.
    pub(crate) attempts: u64,
    /// Not before this moment.
    due: T,
}

/// A shard's stall, begun or over ([`ShardMachine::stall_check`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stall {
    /// Nothing handed out for `quiet` while records wait: `behind_ms` behind the shard's newest
    /// record by its last read (`None`: read records wait to be handed out).
    Began {
        quiet: Duration,
        behind_ms: Option<u64>,
    },
    /// A record was handed out since.
    Ended,
}

/// What the reader does next.
#[derive(Debug)]
pub(crate) enum ReadStep<R, T> {
    /// Make this Kinesis call and hand its answer to [`ShardMachine::read_answered`].
    Call(Call),
    /// Hand this record out: it is tracked under `ticket`, its lease was valid just now.
    Deliver(R, Ticket),
    /// Nothing to do until this moment, or until woken (a settlement, a seek, a stop).
    Wait(Option<T>),
    /// Reading is over: hand the shard back as [`Stop::close`] says.
    Finish(Stop),
}

/// What the redelivery of handed-back records does next.
#[derive(Debug)]
pub(crate) enum Redeliver<R, T> {
    Deliver(Redelivery<R, T>),
    /// The next one falls due at this moment (`None`: none waits).
    Wait(Option<T>),
    /// The lease ran out by this instance's clock: the shard delivers nothing more.
    Halted,
}

/// Why a settlement was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The broker shut down: the record is the next owner's, and the shard is never finished by
    /// this instance (`SHARD_END` would pass it).
    ShutDown,
    /// No checkpoint of the shard will be written any more (lost, or handed back).
    Handover,
}

/// What a settlement changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Settled {
    /// The settled prefix grew: its end is the pending checkpoint now (the tests and the
    /// simulation read it there, `pending_checkpoint`; not a copy of it here, an atomic count's
    /// increment and decrement at every record's settle).
    pub(crate) grew: bool,
    /// The prefix became the pending checkpoint where none was (or, exactly once, the prefix
    /// waiting for its commit grew): the lease's driver has a write it was not told of.
    pub(crate) checkpoint: bool,
    /// The reader waits for what this settlement gave (room in the window, a drained shard).
    pub(crate) wake_reader: bool,
}

/// How a hand-back went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HandedBack {
    /// Kept, to come back when due.
    Kept,
    /// Forgotten: the shard stopped, or a seek made the delivery stale (the next owner, or the
    /// seek, delivers it again); `wake_reader` as for a settlement.
    Forgotten { wake_reader: bool },
    /// The broker shut down.
    Refused,
}

/// What the reader waits for, so that a settlement wakes it only when it gives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Awaiting {
    Nothing,
    Room,
    Drained,
}

/// One held shard.
#[derive(Debug)]
pub(crate) struct ShardMachine<T, R> {
    lease: ShardLease<T>,
    read: ReadState<T, R>,
    watermark: Watermark<Staged<R>>,
    /// Deliveries handed out and neither settled nor dropped, of any seek generation: a closed
    /// shard is finished only once this is zero.
    in_flight: usize,
    /// Records handed back, in the order they are due.
    retries: Vec<Redelivery<R, T>>,
    /// When a record was last handed out (`None`: none yet, and no check of a stall yet).
    last_handed: Option<T>,
    /// Whether the shard counts as stalled now.
    stalled: bool,
    /// A settlement or hand-back was refused because the broker shut down.
    refused: bool,
    window: usize,
    awaiting: Awaiting,
    /// A handoff asked for the shard: until when the reader waits for the deliveries in
    /// flight to settle before it hands the shard over anyway.
    handing_over: Option<T>,
    /// The handoff went ahead with every delivery settled.
    handed_over_drained: bool,
    /// How much of the settled prefix (of this seek generation) the last checkpoint written
    /// covers, and the one in flight would: for the checkpoint lag, settled but not yet written.
    prefix_written: u64,
    prefix_sending: Option<u64>,
    /// Exactly once: how commits ended, not yet taken by the driver.
    commit_news: Vec<CommitNews>,
    /// Exactly once: a commit made room the reader waits for.
    commit_woke_reader: bool,
}

/// The records a delivery step handed out, in order, each with its ticket: the step's `first`
/// under `ticket`, then those [`ShardMachine::next_reads`] put in `more` (last first, so taken
/// from its back) under the tickets that follow.
pub(crate) fn handed_in_order<R>(
    first: R,
    ticket: Ticket,
    more: impl DoubleEndedIterator<Item = R>,
) -> impl Iterator<Item = (R, Ticket)> {
    std::iter::once(first)
        .chain(more.rev())
        .zip(ticket.onwards())
}

// The methods under `cfg(test)` are what the simulation's checks and the tests read of the
// machine; the drivers need none of them.
impl<T: Moment, R: Sequenced> ShardMachine<T, R> {
    /// The shard a take granted `lease` of, read from `iterator`; later iterators with no record
    /// handed out start at `resume`.
    pub(crate) fn new(
        lease: ShardLease<T>,
        settings: ReadSettings,
        iterator: ShardIterator,
        resume: ShardStart,
    ) -> Self {
        Self {
            lease,
            read: ReadState::new(settings, iterator, resume),
            watermark: Watermark::default(),
            in_flight: 0,
            retries: Vec::new(),
            last_handed: None,
            stalled: false,
            refused: false,
            window: settings.window,
            awaiting: Awaiting::Nothing,
            handing_over: None,
            handed_over_drained: false,
            prefix_written: 0,
            prefix_sending: None,
            commit_news: Vec::new(),
            commit_woke_reader: false,
        }
    }

    // ----- reading ---------------------------------------------------------------------------

    /// What the reader does next at `now` (`now_ms` reads the wall clock, only when a record is
    /// to be handed out).
    pub(crate) fn next_read(&mut self, now: T, now_ms: impl FnOnce() -> u64) -> ReadStep<R, T> {
        self.awaiting = Awaiting::Nothing;
        if self.read.is_stopped() {
            return ReadStep::Wait(None);
        }
        if self.lease.is_lost() {
            return self.finish(Stop::Lost);
        }
        if self.lease.is_halted() {
            // Closing already (handed back by someone else than the reader): nothing to read.
            return self.finish(Stop::Cancelled);
        }
        if let Some(stop) = self.read.take_stop() {
            return self.finish(stop);
        }
        if self.read.is_cancelled() {
            // A shard read to its end whose every delivery settled is finished even so, unless
            // a seek sent it back: then it is handed back, and the seek's position is the next
            // owner's to read.
            let ended = self.read.is_draining() && self.drained() && !self.read.seek_pending();
            return self.finish(if ended { Stop::Ended } else { Stop::Cancelled });
        }
        if let Some(until) = self.handing_over {
            // A handoff: nothing more is handed out; the shard goes once every delivery
            // settled (nothing is delivered twice), or when the drain ran out.
            if self.drained() || now >= until {
                self.handed_over_drained = self.drained();
                return self.finish(Stop::HandedOver);
            }
            self.awaiting = Awaiting::Drained;
            return ReadStep::Wait(Some(until));
        }
        self.read.apply_seek();
        let room = self.has_room();
        match self.read.want(now, room) {
            Want::Call(call) => ReadStep::Call(call),
            Want::Record(record) => {
                if !self.lease.may_deliver(now, now_ms()) {
                    // The lease ran out by our clock: deliver nothing more.
                    self.lease.run_out();
                    return self.finish(Stop::Lost);
                }
                let ticket = self.hand_out(now, &record);
                ReadStep::Deliver(record, ticket)
            }
            Want::Drain if self.drained() => self.finish(Stop::Ended),
            Want::Drain => {
                self.awaiting = Awaiting::Drained;
                ReadStep::Wait(None)
            }
            Want::Wait { until, room } => {
                if room {
                    self.awaiting = Awaiting::Room;
                }
                ReadStep::Wait(until)
            }
        }
    }

    /// What the reader does next at `now`, as [`next_read`](Self::next_read); when that is a
    /// delivery, the records read behind it are handed out with it into `more` (empty, as the
    /// caller took the last step's), up to `max` in all, **last first** (taken with `pop`, the
    /// next one first): what as many more `next_read`s at `now` would hand out (nothing else
    /// changed meanwhile, so the same checks pass, the lease's by the same clocks), one lock
    /// and one reading of the clocks for a batch rather than a record each. Each settles under
    /// the ticket following the one before it ([`Ticket::following`]), the first after the
    /// step's. It stops before any other step, which the next call decides.
    pub(crate) fn next_reads(
        &mut self,
        now: T,
        now_ms: impl FnOnce() -> u64,
        (max, more): (usize, &mut Vec<R>),
    ) -> ReadStep<R, T> {
        // Left there, they would stay in flight undelivered, and the checkpoint behind them.
        assert!(more.is_empty(), "the last step's records were taken");
        let step = self.next_read(now, now_ms);
        if matches!(step, ReadStep::Deliver(..)) {
            // As `hand_out` each: the batch's records taken together, and the read side
            // hears of the last one only (what it keeps of the others would be replaced at
            // once). Their tickets follow the step's, one after another ([`Ticket::following`]):
            // nothing else takes a ticket meanwhile.
            self.read.take_records(max.saturating_sub(1), more);
            self.watermark
                .push_run(more.iter().rev().map(Sequenced::checkpoint));
            if let Some(last) = more.first() {
                self.handed(now, more.len(), last);
            }
        }
        step
    }

    /// Tracks `record`, handed out at `now`, under the ticket its delivery settles with.
    fn hand_out(&mut self, now: T, record: &R) -> Ticket {
        let ticket = self.watermark.push(record.checkpoint());
        self.handed(now, 1, record);
        ticket
    }

    /// `count` records were handed out at `now`, `last` the last of them (their tickets taken):
    /// they are in flight, and the read side keeps the last one's sequence number.
    fn handed(&mut self, now: T, count: usize, last: &R) {
        self.last_handed = Some(now);
        self.in_flight += count;
        self.read.handed(last.sequence().clone());
    }

    /// Records were written to the shard: a reader that waits at the tip for news
    /// ([`TipWait::UntilNews`](crate::shard::pace::TipWait::UntilNews)) reads again.
    #[cfg_attr(
        not(any(test, feature = "testing")),
        expect(
            dead_code,
            reason = "only the in-process reader (feature `testing`) asks"
        )
    )]
    pub(crate) fn news(&mut self) {
        self.read.news();
    }

    /// Whether nothing happens on this shard at `now` but on news of a write or as time passes:
    /// reading waits at the tip or on the next event, no handoff drains, and no handed-back
    /// record is due.
    #[cfg_attr(
        not(any(test, feature = "testing")),
        expect(
            dead_code,
            reason = "only the in-process reader (feature `testing`) asks"
        )
    )]
    pub(crate) fn is_quiet(&self, now: T) -> bool {
        self.read.is_quiet()
            && self.handing_over.is_none()
            && !self.lease.is_halted()
            && self.retries.first().is_none_or(|first| now < first.due)
    }

    /// The iterator the next `GetRecords` reads from, when it has one.
    #[cfg(feature = "testing")]
    pub(crate) fn iterator(&self) -> Option<&ShardIterator> {
        self.read.iterator()
    }

    /// Whether the reader waits for the current subscription's next event (no seek since).
    #[cfg(feature = "testing")]
    pub(crate) fn awaits_current_event(&self) -> bool {
        self.read.awaits_current_event()
    }

    /// Whether the record handed back with `ticket` waits to come back at `due` (a record
    /// handed back again waits for a later moment under the same ticket).
    #[cfg_attr(
        not(any(test, feature = "testing")),
        expect(
            dead_code,
            reason = "only the in-process reader (feature `testing`) asks"
        )
    )]
    pub(crate) fn is_waiting(&self, ticket: Ticket, due: T) -> bool {
        self.retries
            .iter()
            .any(|waiting| waiting.ticket == ticket && waiting.due == due)
    }

    fn finish(&mut self, stop: Stop) -> ReadStep<R, T> {
        self.read.stopped();
        ReadStep::Finish(stop)
    }

    /// A renewal's answer at `now` showed a handoff asked for the shard on behalf of `to`:
    /// the reader hands out nothing more, waits up to the handoff drain for the deliveries in
    /// flight to settle, and hands the shard over. Whether the reader is to be woken (a shard
    /// already closing, lost or handing over ignores it).
    pub(crate) fn hand_over_asked(&mut self, to: Arc<str>, now: T) -> bool {
        // A shard read to its end finishes instead: its children wait for its SHARD_END, which
        // a new owner would have to take the shard to write.
        if self.handing_over.is_some()
            || self.lease.is_halted()
            || (self.read.is_stopped() || self.read.is_draining())
        {
            return false;
        }
        self.handing_over = Some(now + self.lease.handoff_drain());
        self.lease.hand_to(to);
        true
    }

    /// A renewing write of this shard was answered with `row` (exactly once, a row moved by a
    /// commit this lease took for refused loses the lease: `ShardLease::commit_token_seen`).
    /// Whether the lease ended.
    pub(crate) fn row_answered(&mut self, row: &LeaseState) -> bool {
        self.lease.commit_token_seen(row.commit_token.as_deref());
        self.lease.ending().is_some()
    }

    /// A renewing write of this shard answered `row` at `now` (`now_ms` by the wall clock): a
    /// handoff asked in it, still standing, on behalf of another instance than `owner`,
    /// starts the handoff ([`hand_over_asked`](Self::hand_over_asked)). Whether the reader is
    /// to be woken.
    pub(crate) fn row_seen(&mut self, row: &LeaseState, owner: &str, now: T, now_ms: u64) -> bool {
        if self.handing_over.is_some() {
            // Withdrawn (its asker stopped) or replaced while the deliveries drain: the move is
            // off, and reading goes on.
            let standing = row
                .handoff_at(now_ms)
                .is_some_and(|asked| self.lease.hands_to(&asked.to));
            if !standing && !self.lease.is_halted() {
                self.handing_over = None;
                self.lease.hand_off_cancelled();
                return true;
            }
            return false;
        }
        match row.handoff_at(now_ms) {
            Some(asked) if asked.to != owner => {
                self.hand_over_asked(Arc::from(asked.to.as_str()), now)
            }
            _ => false,
        }
    }

    /// Whether the handoff went ahead with every delivery settled (not for want of time).
    #[cfg(test)]
    pub(crate) fn handed_over_drained(&self) -> bool {
        self.handed_over_drained
    }

    /// Whether a handoff is under way.
    pub(crate) fn is_handing_over(&self) -> bool {
        self.handing_over.is_some()
    }

    /// The call [`next_read`](Self::next_read) asked for answered `fetch` at `now`; `coin`
    /// draws a backoff's jitter.
    pub(crate) fn read_answered(&mut self, now: T, fetch: Fetch<R>, coin: u64) {
        if let Fetch::Records { millis_behind, .. } | Fetch::Event { millis_behind, .. } = &fetch {
            self.lease.read_behind(*millis_behind);
        }
        self.read.answered(now, fetch, coin);
    }

    /// The batch's emptied buffer from before the last read (the records read stay in the
    /// `Vec` they came in), for the next read to fill.
    pub(crate) fn spare_records(&mut self) -> Vec<R> {
        self.read.take_spare()
    }

    /// Whether a subscription's next event, which the reader waits for, is no longer wanted: a
    /// seek is to be applied, a handoff or a close is under way, or the lease is lost. The
    /// reader then drops the subscription rather than wait for an event on a quiet shard.
    pub(crate) fn event_unwanted(&self) -> bool {
        self.read.awaits_event()
            && (self.read.seek_pending()
                || self.is_handing_over()
                || self.lease.is_halted()
                || self.read.is_cancelled())
    }

    /// The listing shows the shard closed: with enhanced fan-out, where no event names child
    /// shards, an empty event has the end confirmed by polling.
    pub(crate) fn shard_closed(&mut self) {
        self.read.shard_closed();
    }

    /// The reader was cancelled (shutdown, the subscription dropped); a call in flight was
    /// dropped with it.
    pub(crate) fn cancel_reading(&mut self) {
        self.read.cancel();
    }

    /// A seek resolved `iterator`: every delivery, handed-back record and pending checkpoint of
    /// the old position is forgotten, the reader restarts at `iterator` (a draining one
    /// included), later iterators with no record handed out start at `resume`, and `recorded`
    /// (the seek's position as a checkpoint) is the checkpoint to write until a record of the
    /// new position settles, so a handoff before then carries the seek. Whether the seek was
    /// applied: a shard being handed back (closing, lost, or handed to another instance in a
    /// handoff) refuses it, and the handler hears so.
    pub(crate) fn seek(
        &mut self,
        iterator: ShardIterator,
        resume: ShardStart,
        recorded: SharedStr,
    ) -> bool {
        if self.read.is_stopped() || self.lease.is_halted() || self.is_handing_over() {
            // Being handed back (or lost): its last checkpoint stands, and the next owner reads
            // on from it.
            return false;
        }
        if self.lease.is_committing() {
            self.drop_staged();
        }
        self.watermark.reset();
        // The new position's prefix starts at nothing; what the old one had is never written.
        self.prefix_written = 0;
        self.prefix_sending = None;
        self.lease.drop_pending();
        // Exactly once, the old position's settled units are dropped with it (a commit already
        // sent still goes, unchanged, and answers for its own), and the seek's position commits
        // without writes.
        self.ready_to_lease();
        self.lease.checkpoint_ready(recorded);
        // The seek's position delivers what follows it: records waiting to come back do not,
        // and a closed shard need not wait for their timers to finish.
        let dropped = self.retries.len();
        self.retries.clear();
        self.in_flight = self.in_flight.saturating_sub(dropped);
        self.read.seek(iterator, resume)
    }

    // ----- settling --------------------------------------------------------------------------

    /// The watermark's generation: a seek starts a new one.
    #[cfg(test)]
    pub(crate) fn generation(&self) -> u64 {
        self.watermark.generation()
    }

    /// Whether every delivery was settled (or dropped after a seek or a stop), none was refused
    /// by the broker's shutdown, and (exactly once) none waits for a joint commit with other
    /// shards: a handoff waits for those within its drain, and a shard read to its end for them
    /// to commit or come back, so that neither hands over a batch's records uncommitted.
    fn drained(&self) -> bool {
        self.in_flight == 0 && !self.refused && !self.watermark.holds_joint()
    }

    /// Whether the window has room for one more delivery: fewer deliveries than the window
    /// held, and (exactly once) less than [`STAGED_BYTES_CAP`](crate::commit::STAGED_BYTES_CAP)
    /// of staged writes waiting for their commit.
    fn has_room(&self) -> bool {
        self.watermark.unsettled() < self.window
            && self.watermark.staged_weight() < crate::commit::STAGED_BYTES_CAP
    }

    /// What a delivery leaving flight gives the reader.
    #[inline]
    fn wakes_reader(&self) -> bool {
        match self.awaiting {
            Awaiting::Nothing => false,
            Awaiting::Room => self.has_room(),
            Awaiting::Drained => self.drained(),
        }
    }

    /// Settles one delivery (`broker_closed`: the broker shut down meanwhile); a grown prefix
    /// becomes the pending checkpoint. Refused once no checkpoint of the shard will be written
    /// any more: the shard's next owner delivers the record again.
    // Inlined, with the watermark's settle, into the driver's settle of every record: each
    // call of its own cost its entry and exit.
    #[inline(always)]
    pub(crate) fn settle(
        &mut self,
        ticket: Ticket,
        broker_closed: bool,
    ) -> Result<Settled, Refusal> {
        if self.lease.is_committing() {
            // Exactly once, a settlement commits; with nothing staged it moves the checkpoint.
            return self.settle_staged(ticket, None, broker_closed);
        }
        self.leave_flight(broker_closed)?;
        let grown_to = self.watermark.settle(ticket);
        // The driver is told of a pending checkpoint where none was: one already pending was
        // told of (by the settle or the seek that made it pending; or the driver was sending
        // when it came, and looks again after the answer), and the driver's timer counts the
        // cadence for it; a newer one replaces it in place. Told at every settle, the lease's
        // driver woke for every record.
        let told = self.lease.has_pending();
        let grew = grown_to.is_some();
        let checkpoint =
            grown_to.is_some_and(|checkpoint| self.lease.checkpoint_ready(checkpoint)) && !told;
        Ok(Settled {
            grew,
            checkpoint,
            wake_reader: self.wakes_reader(),
        })
    }

    /// The checkpoint waiting to be sent, if any: where a settle that [grew](Settled::grew)
    /// the prefix put it.
    #[cfg(test)]
    pub(crate) fn pending_checkpoint(&self) -> Option<&SharedStr> {
        self.lease.pending()
    }

    /// A settled delivery leaves flight; refused when the broker shut down meanwhile
    /// (`broker_closed`) or no checkpoint of the shard will be written any more.
    #[inline]
    fn leave_flight(&mut self, broker_closed: bool) -> Result<(), Refusal> {
        self.in_flight = self.in_flight.saturating_sub(1);
        if broker_closed {
            self.refused = true;
            return Err(Refusal::ShutDown);
        }
        if !self.lease.takes_settlements() {
            return Err(Refusal::Handover);
        }
        Ok(())
    }

    /// Lets go of a delivery that never reached its handler: it moves no checkpoint, and the
    /// shard's next owner (or the seek that made it stale) delivers it again. Whether the
    /// reader is to be woken.
    pub(crate) fn forget(&mut self, ticket: Ticket) -> bool {
        let _ = ticket;
        self.in_flight = self.in_flight.saturating_sub(1);
        self.wakes_reader()
    }

    /// Takes back a delivery its handler did not settle, to deliver it again `delay` after
    /// `now`, still unsettled meanwhile. A delivery of a stopped shard, or one a seek made
    /// stale, is forgotten instead.
    pub(crate) fn hand_back(
        &mut self,
        now: T,
        record: R,
        ticket: Ticket,
        attempts: u64,
        delay: Duration,
        broker_closed: bool,
    ) -> HandedBack {
        if broker_closed
            || self.lease.is_halted()
            || ticket.generation != self.watermark.generation()
        {
            self.in_flight = self.in_flight.saturating_sub(1);
            if broker_closed {
                self.refused = true;
                return HandedBack::Refused;
            }
            return HandedBack::Forgotten {
                wake_reader: self.wakes_reader(),
            };
        }
        let due = now + delay;
        let at = self.retries.partition_point(|waiting| waiting.due <= due);
        self.retries.insert(
            at,
            Redelivery {
                record,
                ticket,
                attempts,
                due,
            },
        );
        HandedBack::Kept
    }

    /// The next handed-back record to deliver again at `now`, if one is due and the lease is
    /// valid; else when the next one falls due.
    pub(crate) fn next_redelivery(&mut self, now: T, now_ms: u64) -> Redeliver<R, T> {
        let Some(first) = self.retries.first() else {
            return Redeliver::Wait(None);
        };
        if first.due > now {
            return Redeliver::Wait(Some(first.due));
        }
        if !self.lease.may_deliver(now, now_ms) {
            self.lease.run_out();
            return Redeliver::Halted;
        }
        self.last_handed = Some(now);
        Redeliver::Deliver(self.retries.remove(0))
    }

    /// Whether, at `now`, the shard stalled (records wait behind it: its last read was behind the
    /// shard's newest record (`MillisBehindLatest`, or a full batch), or records read wait to be
    /// handed out, or its window is full while it reads, so records written since its last read
    /// go unseen; and it handed out nothing for `bound`), or a stall is over (it handed a record
    /// out since): the news, once each way.
    /// `bound` zero checks nothing.
    pub(crate) fn stall_check(&mut self, now: T, bound: Duration) -> Option<Stall> {
        if bound.is_zero() {
            return None;
        }
        let since = *self.last_handed.get_or_insert(now);
        let quiet = now.saturating_since(since);
        let behind = self.lease.behind_ms().filter(|&behind| behind > 0);
        let window_full = !self.has_room() && self.read.is_reading();
        let waiting = behind.is_some() || self.read.records_wait() || window_full;
        let stalled = waiting && quiet >= bound && !self.read.is_stopped();
        if stalled == std::mem::replace(&mut self.stalled, stalled) {
            return None;
        }
        Some(if stalled {
            Stall::Began {
                quiet,
                behind_ms: behind,
            }
        } else {
            Stall::Ended
        })
    }

    /// How many records wait to come back.
    #[cfg(test)]
    pub(crate) fn waiting_to_come_back(&self) -> usize {
        self.retries.len()
    }

    /// Whether the read-ahead window is full: the reader waits for a settle.
    #[cfg(test)]
    pub(crate) fn is_window_full(&self) -> bool {
        !self.has_room()
    }

    /// Whether every delivery of the shard settled (no handler holds one, none waits to come
    /// back), and none was refused by the broker's shutdown.
    #[cfg(test)]
    pub(crate) fn is_drained(&self) -> bool {
        self.drained()
    }

    /// How a delivery of `ticket` stands where its handler starts at `now`: a lapsed lease
    /// stops the shard then and there (another instance may hold it by now).
    ///
    /// The simulation's and the tests' form of [`standing_by`](Self::standing_by), which the
    /// live driver asks: the same rule, the wall clock's question answered the same way.
    #[cfg(test)]
    pub(crate) fn standing(&mut self, ticket: Ticket, now: T, now_ms: u64) -> Standing {
        // Answered as the live driver answers: by its cached deadline, on a reading of `now_ms`.
        let wall = std::time::UNIX_EPOCH + std::time::Duration::from_millis(now_ms);
        let mut deadline = crate::shard::WallDeadline::default();
        self.standing_by(ticket, now, |valid_until_ms| {
            deadline.before(wall, valid_until_ms)
        })
    }

    /// How a delivery of `ticket` stands where its handler starts at `now`, the wall clock asked
    /// by `wall_before` (whether it reads before the given epoch millisecond; the live driver
    /// compares in `SystemTime`, [`WallDeadline`](crate::shard::WallDeadline)).
    #[inline]
    pub(crate) fn standing_by(
        &mut self,
        ticket: Ticket,
        now: T,
        wall_before: impl FnOnce(u64) -> bool,
    ) -> Standing {
        // A halted shard stands stopped (`queued_standing`), whatever its clocks say.
        if !self.lease.is_halted() && !self.lease.may_deliver_by(now, wall_before) {
            self.lease.run_out();
            return Standing::RanOut;
        }
        self.queued_standing(ticket)
    }

    /// How a delivery of `ticket` stands as the subscription pulls it, before any handler:
    /// stopped, stale or current, by the shard alone. The lease's clocks are read where its
    /// handler starts ([`standing`](Self::standing)), which withholds it all the same: reading
    /// them here too cost two clock reads a record to catch, a moment earlier, a lease that
    /// ran out while the record waited in the channel.
    #[inline]
    pub(crate) fn queued_standing(&self, ticket: Ticket) -> Standing {
        if self.lease.is_halted() {
            Standing::Stopped
        } else if ticket.generation == self.watermark.generation() {
            Standing::Current
        } else {
            Standing::Stale
        }
    }

    // ----- the lease -------------------------------------------------------------------------

    /// The store write the lease's driver sends next at `now`, or how long it waits.
    pub(crate) fn next_write(&mut self, now: T, now_ms: u64) -> Next<T> {
        let watermark = &self.watermark;
        let solo = self.lease.folds_solo();
        let next = self
            .lease
            .next_folding(now, now_ms, || commits::fold_ready(watermark, solo));
        if let Next::Send(Write::Checkpoint { .. } | Write::Final(_) | Write::HandOver { .. }) =
            next
        {
            // The pending checkpoint is the settled prefix's end (every growth replaced it), and
            // a closing write covers the whole prefix (`SHARD_END`, or nothing was pending).
            self.prefix_sending = Some(self.watermark.settled_prefix());
        }
        next
    }

    /// The store answered the write in flight at `now`; whether the lease ended with it.
    pub(crate) fn write_answered(&mut self, now: T, answer: Answer) -> bool {
        if let Some(prefix) = self.prefix_sending.take()
            && answer == Answer::Done
        {
            self.prefix_written = prefix;
        }
        self.lease.on_answer(now, answer);
        if self.lease.is_committing() {
            self.apply_outcomes(now);
        }
        self.lease.ending().is_some()
    }

    /// How many deliveries were settled in order (so a checkpoint may record them) and are not
    /// yet covered by a checkpoint written: the checkpoint lag. A shard restarted after a crash
    /// here delivers them again.
    pub(crate) fn checkpoint_lag(&self) -> u64 {
        if self.lease.is_committing() {
            return self.watermark.ready().0 as u64;
        }
        self.watermark
            .settled_prefix()
            .saturating_sub(self.prefix_written)
    }

    /// Whether this instance may still deliver from the shard at `now`.
    #[cfg(test)]
    pub(crate) fn may_deliver(&self, now: T, now_ms: u64) -> bool {
        self.lease.may_deliver(now, now_ms)
    }

    /// The instance's chain of beats stands at `grant`: a lease kept alive by beats follows it
    /// ([`ShardLease::follow_beat`](crate::shard::lease::ShardLease::follow_beat)).
    pub(crate) fn follow_beat(&mut self, grant: &crate::shard::lease::beat::BeatGrant<T>) {
        self.lease.follow_beat(grant);
    }

    /// The lease ran out by this instance's clock (or its reader ended without handing the
    /// shard back): nothing more is delivered or checkpointed.
    pub(crate) fn run_out(&mut self) {
        self.lease.run_out();
    }

    /// Whether the shard delivers nothing more: its lease is lost, or it is being handed back.
    #[cfg(test)]
    pub(crate) fn is_halted(&self) -> bool {
        self.lease.is_halted()
    }

    /// Whether the lease is lost (refused, or run out).
    #[cfg(test)]
    pub(crate) fn is_lost(&self) -> bool {
        self.lease.is_lost()
    }

    /// Whether a shard read to its end closes as a release instead (a delivery of it went back).
    #[cfg(test)]
    pub(crate) fn finish_abandoned(&self) -> bool {
        self.lease.finish_abandoned()
    }

    /// Hands the shard back `how`: after the write in flight, the final writes.
    pub(crate) fn close(&mut self, how: Close) {
        let whole = self.watermark.all_settled()
            && self.retries.is_empty()
            && !self.watermark.holds_joint();
        if how == Close::Finished && !whole {
            // Exactly once, a unit's commit was refused between the reader's end and its close:
            // the delivery went back, so the shard is not read to its end by this instance. Its
            // next owner delivers it again; no SHARD_END passes it. A batch's records that wait
            // for a joint commit with other shards never commit once the shard closes: they are
            // the next owner's too.
            self.lease.close_unfinished();
            return;
        }
        self.lease.close(how);
    }

    /// How the lease ended, once it did.
    pub(crate) fn ending(&self) -> Option<Ending> {
        self.lease.ending()
    }

    /// What happened to the lease since the last call (a release, a loss, ...), for the driver
    /// to say.
    pub(crate) fn take_news(&mut self) -> Vec<LeaseNews> {
        self.lease.take_news()
    }
}

#[cfg(test)]
mod tests;

//! One held shard: its pure [`ShardMachine`] (the lease, the reading, the watermark, the
//! deliveries in flight and the records handed back) behind the mutex that the shard's tasks
//! (`reader/`) and its deliveries share, and the wake-ups between them. Every decision is the
//! machine's; this file reads the clocks and wakes whoever must act.

mod harness;
#[cfg(any(test, feature = "dynamodb-lease"))]
pub(crate) mod joint;
#[cfg(feature = "dynamodb-lease")]
mod joints;
pub(crate) mod lease;
pub(crate) mod machine;
pub(crate) mod pace;
pub(crate) mod read;
#[cfg(feature = "dynamodb-lease")]
mod units;
mod wall_deadline;

pub(crate) use wall_deadline::WallDeadline;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, SystemTime};

use parking_lot::{Mutex, MutexGuard};

use crate::SharedStr;
use crate::clock::Instant;

use tokio::sync::Notify;
use tokio::sync::futures::Notified;

use ruststream::AckError;

use crate::delivery::record::Record;
use crate::delivery::settlement::{Settlement, Standing};
use crate::kinesis::iterator::ShardIterator;
use crate::lease::LeaseKey;
use crate::settings::position::ShardStart;
use crate::watermark::Ticket;
use crate::{KinesisError, epoch_millis};
pub(crate) use harness::Harness;
#[cfg(feature = "dynamodb-lease")]
pub(crate) use joints::{Joints, Step as JointStep};
#[cfg(test)]
pub(crate) use lease::Lost;
pub(crate) use lease::{Answer, Close, Ending, LeaseNews, Next, ShardLease, Write};
#[cfg(any(test, feature = "dynamodb-lease"))]
pub(crate) use machine::CommitNews;
#[cfg(any(test, feature = "dynamodb-lease"))]
pub(crate) use machine::Member;
#[cfg(any(test, feature = "dynamodb-lease"))]
pub(crate) use machine::Staged;
pub(crate) use machine::{
    HandedBack, ReadStep, Redeliver, Refusal, Settled, ShardMachine, Stall, handed_in_order,
};
pub(crate) use read::{Call, Fetch, ReadSettings, Stop};

/// What the shard's lock guards: its machine, and what the driver keeps beside it to ask the
/// machine's questions cheaply.
#[derive(Debug)]
struct Locked {
    machine: ShardMachine<Instant, Record>,
    /// The lease's wall-clock deadline as a `SystemTime`, for the check at a handler's start.
    wall_deadline: WallDeadline,
}

impl std::ops::Deref for Locked {
    type Target = ShardMachine<Instant, Record>;

    fn deref(&self) -> &Self::Target {
        &self.machine
    }
}

impl std::ops::DerefMut for Locked {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.machine
    }
}

/// One shard this instance holds the lease of.
#[derive(Debug)]
pub(crate) struct ShardHandle {
    key: LeaseKey,
    machine: Mutex<Locked>,
    /// Wakes the lease writer: a checkpoint is pending, the shard is closing or stopped.
    wake: Notify,
    /// Wakes the reader: a seek, room in the window, a drained shard, a stop.
    read_wake: Notify,
    /// Wakes the redelivery task when a record was handed back.
    handed_back: Notify,
    /// Wakes whoever waits for the lease to end (the reader's `finish`).
    ended: Notify,
    /// Whether the broker was shut down: settlements then answer an error.
    broker_closed: Arc<AtomicBool>,
    /// How many seeks were applied to this reader: a take that read as planned before a seek
    /// of every shard is sought late only if none moved it since.
    seeks: AtomicU64,
    /// What the shard tells `TestApp`'s harness (in process; nothing from the service).
    harness: Harness,
    /// Exactly once: the writes of the units the machine holds, and the refusals its
    /// redeliveries carry. Locked after the machine when both are, never before.
    #[cfg(feature = "dynamodb-lease")]
    units: Mutex<units::Units>,
    /// Exactly once, the subscription's units that span shards, which a batch of this shard's
    /// and others' records joins.
    #[cfg(feature = "dynamodb-lease")]
    joints: std::sync::OnceLock<Arc<Joints>>,
    /// The handle itself, for a redelivery's timer on the harness.
    #[cfg_attr(
        not(feature = "testing"),
        expect(
            dead_code,
            reason = "only a harness's timer reaches the handle through it"
        )
    )]
    me: Weak<ShardHandle>,
}

/// What a lease write's answer left for the lease writer to say and count.
#[derive(Debug)]
pub(crate) struct Answered {
    /// What happened to the lease.
    pub(crate) news: Vec<LeaseNews>,
    /// Deliveries settled in order and not yet covered by a checkpoint written.
    pub(crate) lag: u64,
    /// Whether the shard stalled now, or a stall is over ([`ShardMachine::stall_check`]).
    pub(crate) stall: Option<Stall>,
}

impl ShardHandle {
    /// The shard's row in the lease table.
    pub(crate) fn key(&self) -> &LeaseKey {
        &self.key
    }

    /// The lease writer's next wake: a checkpoint is pending, the shard is closing or stopped.
    pub(crate) fn writer_wake(&self) -> Notified<'_> {
        self.wake.notified()
    }

    /// The reader's next wake: a seek, room in the window, a drained shard, a stop.
    pub(crate) fn reader_wake(&self) -> Notified<'_> {
        self.read_wake.notified()
    }

    /// The redelivery task's next wake: a record was handed back.
    pub(crate) fn redelivery_wake(&self) -> Notified<'_> {
        self.handed_back.notified()
    }

    /// The handle of a shard held as `machine` says, with no harness (the tests' handle).
    #[cfg(test)]
    pub(crate) fn new(
        key: LeaseKey,
        broker_closed: Arc<AtomicBool>,
        machine: ShardMachine<Instant, Record>,
    ) -> Self {
        Self::with_harness(key, broker_closed, machine, Harness::default(), Weak::new())
    }

    /// The handle of a shard held as `machine` says, read under `harness`.
    pub(crate) fn shared(
        key: LeaseKey,
        broker_closed: Arc<AtomicBool>,
        machine: ShardMachine<Instant, Record>,
        harness: Harness,
    ) -> Arc<Self> {
        Arc::new_cyclic(|me| Self::with_harness(key, broker_closed, machine, harness, me.clone()))
    }

    fn with_harness(
        key: LeaseKey,
        broker_closed: Arc<AtomicBool>,
        machine: ShardMachine<Instant, Record>,
        harness: Harness,
        me: Weak<Self>,
    ) -> Self {
        Self {
            key,
            machine: Mutex::new(Locked {
                machine,
                wall_deadline: WallDeadline::default(),
            }),
            wake: Notify::new(),
            read_wake: Notify::new(),
            handed_back: Notify::new(),
            ended: Notify::new(),
            broker_closed,
            seeks: AtomicU64::new(0),
            harness,
            #[cfg(feature = "dynamodb-lease")]
            units: Mutex::default(),
            #[cfg(feature = "dynamodb-lease")]
            joints: std::sync::OnceLock::new(),
            me,
        }
    }

    /// What the shard tells `TestApp`'s harness.
    #[cfg(feature = "testing")]
    pub(crate) fn harness(&self) -> &Harness {
        &self.harness
    }

    #[inline]
    fn lock(&self) -> MutexGuard<'_, Locked> {
        self.machine.lock()
    }

    #[inline]
    fn closed(&self) -> bool {
        self.broker_closed.load(Ordering::Acquire)
    }

    /// What the reader does next; when that is a delivery, up to `max` records in all are
    /// handed out at once, the first in the step and the rest into `more` (last first)
    /// ([`ShardMachine::next_reads`]: one lock and one reading of the clocks for them all).
    pub(crate) fn next_reads(
        &self,
        (max, more): (usize, &mut Vec<Record>),
    ) -> ReadStep<Record, Instant> {
        let step = {
            let mut machine = self.lock();
            let step = machine.next_reads(Instant::now(), epoch_millis, (max, more));
            self.delivering(&step, more);
            step
        };
        self.stepped(&step);
        step
    }

    /// The reader's call answered `fetch`; what the reader does next (a step dropped unexecuted
    /// would lose a delivery), decided at the same moment under the same lock as
    /// [`next_reads`](Self::next_reads) decides it, with the records handed out with it in
    /// `more` (as the simulation decides it); and the batch's emptied buffer from before (the
    /// records stay in the `Vec` they came in), for the next read to fill.
    #[must_use = "the step may be a delivery: dropped, its record never reaches a handler"]
    pub(crate) fn read_answered(
        &self,
        fetch: Fetch<Record>,
        (max, more): (usize, &mut Vec<Record>),
    ) -> (ReadStep<Record, Instant>, Vec<Record>) {
        let coin = rand::random::<u64>();
        let now = Instant::now();
        let (step, spare) = {
            let mut machine = self.lock();
            machine.read_answered(now, fetch, coin);
            let spare = machine.spare_records();
            let step = machine.next_reads(now, epoch_millis, (max, more));
            self.delivering(&step, more);
            (step, spare)
        };
        self.stepped(&step);
        (step, spare)
    }

    /// Tells the harness of the records `step` and `more` (last first) hand out, in order.
    fn delivering(&self, step: &ReadStep<Record, Instant>, more: &[Record]) {
        if let ReadStep::Deliver(record, _) = step {
            self.harness.delivering_read(record);
            for record in more.iter().rev() {
                self.harness.delivering_read(record);
            }
        }
    }

    /// Wakes whoever must see what `step` says, once the machine's lock is let go.
    fn stepped(&self, step: &ReadStep<Record, Instant>) {
        if matches!(step, ReadStep::Finish(Stop::Lost)) {
            self.halted();
        }
    }

    /// Whether the subscription's next event the reader waits for is no longer wanted.
    pub(crate) fn event_unwanted(&self) -> bool {
        self.lock().event_unwanted()
    }

    /// The listing shows the shard closed.
    pub(crate) fn shard_closed(&self) {
        self.lock().shard_closed();
        self.read_wake.notify_one();
    }

    /// The reader was cancelled.
    pub(crate) fn cancel_reading(&self) {
        self.lock().cancel_reading();
    }

    /// Settles one delivery; a grown prefix becomes the pending checkpoint. A settlement that can
    /// no longer be checkpointed (the lease is lost, the shard was handed back) is refused: the
    /// shard's next owner delivers the record again.
    #[inline]
    pub(crate) fn settle(&self, ticket: Ticket) -> Result<(), KinesisError> {
        // The machine's `settle` (which settles as its `settle_staged` does while the lease
        // commits), not `settle_staged` with nothing staged: an empty `Staged` passed by value
        // is copied whole, on every record's settle.
        let closed = self.closed();
        let settled = self.lock().settle(ticket, closed);
        self.settle_answered(settled, true)
    }

    /// Says what a settle came to: the harness is told (`harness`: here, else where the writes
    /// it kept are let go), whoever must act is woken, and a refusal becomes the error that
    /// names why.
    // Inlined into every record's settle (called, it cost a call's entry and exit and a move
    // of what the settle answered); a refusal's error is made out of line.
    #[inline(always)]
    fn settle_answered(
        &self,
        settled: Result<Settled, Refusal>,
        harness: bool,
    ) -> Result<(), KinesisError> {
        if harness {
            self.harness.settled();
        }
        match settled {
            Ok(settled) => {
                if settled.checkpoint {
                    self.wake.notify_one();
                }
                if settled.wake_reader {
                    self.read_wake.notify_one();
                }
                Ok(())
            }
            Err(refusal) => Err(self.refusal_error(refusal)),
        }
    }

    /// The error that names why a settle was refused.
    #[cold]
    fn refusal_error(&self, refusal: Refusal) -> KinesisError {
        match refusal {
            Refusal::ShutDown => KinesisError::ShutDown {
                what: "settling a delivery",
            },
            Refusal::Handover => KinesisError::SettledAfterHandover {
                stream: self.key.stream().to_owned(),
                shard: self.key.shard().to_owned(),
            },
        }
    }

    /// Lets go of a delivery that never reached its handler: it moves no checkpoint, and the
    /// shard's next owner (or the seek that made it stale) delivers it again.
    pub(crate) fn forget(&self, ticket: Ticket) {
        let wake = self.lock().forget(ticket);
        self.harness.settled();
        if wake {
            self.read_wake.notify_one();
        }
    }

    /// Takes back a delivery its handler did not settle, to deliver it again `delay` from now,
    /// still unsettled meanwhile. A delivery of a stopped shard, or one a seek made stale, is
    /// forgotten instead: the shard's next owner, or the seek, delivers it again.
    pub(crate) fn hand_back(
        &self,
        record: Record,
        ticket: Ticket,
        attempts: u64,
        delay: Duration,
    ) -> Result<(), KinesisError> {
        let closed = self.closed();
        let now = Instant::now();
        let handed = self
            .lock()
            .hand_back(now, record, ticket, attempts, delay, closed);
        if handed == HandedBack::Kept {
            self.coming_back(ticket, now, delay);
        }
        self.harness.settled();
        match handed {
            HandedBack::Kept => {
                self.handed_back.notify_one();
                Ok(())
            }
            HandedBack::Forgotten { wake_reader } => {
                if wake_reader {
                    self.read_wake.notify_one();
                }
                Ok(())
            }
            HandedBack::Refused => Err(KinesisError::ShutDown {
                what: "handing a delivery back",
            }),
        }
    }

    /// The next handed-back record to deliver again, or when one falls due.
    pub(crate) fn next_redelivery(&self) -> Redeliver<Record, Instant> {
        let next = {
            let mut machine = self.lock();
            let next = machine.next_redelivery(Instant::now(), epoch_millis());
            if matches!(next, Redeliver::Deliver(_)) {
                self.harness.delivering_again();
            }
            next
        };
        if matches!(next, Redeliver::Halted) {
            self.halted();
        }
        next
    }

    /// How many seeks were applied to this reader (counted under its machine's lock, which a
    /// seek holds while it applies).
    pub(crate) fn seeks(&self) -> u64 {
        self.seeks.load(Ordering::Relaxed)
    }

    /// A seek resolved `iterator`: the shard forgets every delivery of the old position, its
    /// reader restarts at `iterator`, and `recorded` is its checkpoint until a record of the new
    /// position settles. Whether it was applied (a shard being handed back refuses it).
    pub(crate) fn seek(
        &self,
        iterator: ShardIterator,
        resume: ShardStart,
        recorded: SharedStr,
    ) -> bool {
        let applied = {
            let mut machine = self.lock();
            let harness_iterator = iterator.clone();
            let applied = machine.seek(iterator, resume, recorded);
            if applied {
                self.harness.moved_to(&harness_iterator);
                self.seeks.fetch_add(1, Ordering::Relaxed);
            }
            applied
        };
        if applied {
            self.read_wake.notify_one();
            self.handed_back.notify_one();
            // The seek's position is the pending checkpoint now: the lease writer is told, as a
            // settle tells it of the first one pending (it is not told again of those after).
            self.wake.notify_one();
            self.poke_joints();
        }
        applied
    }

    /// Stops deliveries from this shard at once, and writes no checkpoint of it any more, as a
    /// lease that ran out by this instance's clock (its reader ended without handing it back: a
    /// panicking task). A shard already closing goes on closing.
    pub(crate) fn abandon(&self) {
        self.lock().run_out();
        self.halted();
    }

    /// The instance's chain of beats as it stands (leases kept alive by beat): the lease follows
    /// it if it may ([`ShardMachine::follow_beat`]), and the lease writer sets its timer again.
    pub(crate) fn follow_beat(&self, grant: &lease::beat::BeatGrant<Instant>) {
        self.lock().follow_beat(grant);
        self.wake.notify_one();
    }

    /// Wakes everyone who must see that the shard delivers nothing more.
    fn halted(&self) {
        self.wake.notify_one();
        self.read_wake.notify_one();
        self.ended.notify_waiters();
    }

    /// Whether the shard delivers nothing more: its lease is lost, or it is being handed back.
    #[cfg(test)]
    pub(crate) fn is_stopped(&self) -> bool {
        self.lock().is_halted()
    }

    /// What happened to the lease since the last call, for the lease writer to say.
    pub(crate) fn take_news(&self) -> Vec<LeaseNews> {
        self.lock().take_news()
    }

    /// What the lease writer does next (a write it sends now, or how long it waits).
    pub(crate) fn next_write(&self) -> Next<Instant> {
        self.lock().next_write(Instant::now(), epoch_millis())
    }

    /// The store answered the write in flight (`answer`; a renewing write answered with the row
    /// `row`, in which a handoff asked of `owner` starts the handoff and wakes the
    /// reader): what the lease writer says and counts after it, read under one lock.
    pub(crate) fn answer(
        &self,
        answer: Answer,
        row: Option<&crate::LeaseState>,
        owner: &str,
        stall_after: Duration,
    ) -> Answered {
        let now = Instant::now();
        let (ended, moving, answered) = {
            let mut machine = self.lock();
            let mut ended = machine.write_answered(now, answer);
            if let Some(row) = row {
                ended |= machine.row_answered(row);
            }
            let lag = machine.checkpoint_lag();
            let stall = machine.stall_check(now, stall_after);
            let moving = row.is_some_and(|row| machine.row_seen(row, owner, now, epoch_millis()));
            let news = machine.take_news();
            let room = machine.take_reader_wake();
            let commits = machine.take_commit_news();
            #[cfg(feature = "dynamodb-lease")]
            if self.units_answered(&machine, commits) {
                // A unit refused by its own write is due again, its refusal in place.
                self.handed_back.notify_one();
            }
            #[cfg(not(feature = "dynamodb-lease"))]
            debug_assert!(commits.is_empty(), "no lease commits without transactions");
            (ended, moving || room, Answered { news, lag, stall })
        };
        if ended {
            self.halted();
        }
        if moving {
            self.read_wake.notify_one();
        }
        self.poke_joints();
        answered
    }

    /// A read of the stream's rows (by beat, where no renewing write answers the row) showed
    /// `row`: a handoff asked in it of `owner` starts, as on a renewal's answer
    /// ([`answer`](Self::answer)), and the reader is woken.
    pub(crate) fn row_seen(&self, row: &crate::LeaseState, owner: &str) {
        let moving = self
            .lock()
            .row_seen(row, owner, Instant::now(), epoch_millis());
        if moving {
            self.read_wake.notify_one();
        }
    }

    /// Exactly once, this shard's batches that span shards commit through `joints`.
    #[cfg(feature = "dynamodb-lease")]
    pub(crate) fn join(&self, joints: Arc<Joints>) {
        let _ = self.joints.set(joints);
    }

    /// A unit that spans shards may be able to go on (this shard's write slot is free, its
    /// settled prefix moved, it closes or was sought): its committer looks again.
    fn poke_joints(&self) {
        #[cfg(feature = "dynamodb-lease")]
        if let Some(joints) = self.joints.get() {
            joints.poke();
        }
    }

    /// Hands the shard back `how` and waits until its lease writer sent the final writes (the
    /// pending checkpoint or `SHARD_END`, then the release) after the write in flight, and no
    /// write of the shard follows the release. Answers how the lease ended: a lost one writes
    /// nothing.
    pub(crate) async fn close(&self, how: Close) -> Ending {
        loop {
            let ended = self.ended.notified();
            let mut ended = std::pin::pin!(ended);
            ended.as_mut().enable();
            {
                let mut machine = self.lock();
                machine.close(how);
                if let Some(ending) = machine.ending() {
                    return ending;
                }
            }
            self.wake.notify_one();
            self.poke_joints();
            ended.await;
        }
    }
}

/// A live delivery settles against the shard that read it, by its place in the watermark.
impl Settlement for ShardHandle {
    #[inline]
    fn on_settle(&self, ticket: Ticket) -> Result<(), AckError> {
        self.settle(ticket)
            .map_err(|err| AckError::Broker(Box::new(err)))
    }

    #[cfg(feature = "dynamodb-lease")]
    fn on_commit(
        &self,
        ticket: Ticket,
        record: &Record,
        attempt: u64,
        writes: &crate::StagedWrites,
    ) -> Result<(), AckError> {
        self.settle_writes(ticket, record, attempt, writes)
            .map_err(|err| AckError::Broker(Box::new(err)))
    }

    #[cfg(feature = "dynamodb-lease")]
    fn on_commit_joint(
        &self,
        parts: crate::delivery::settlement::Parts,
        writes: &crate::StagedWrites,
    ) -> Result<(), AckError> {
        let members = |members: crate::delivery::settlement::Members| -> Vec<Member<Record>> {
            members
                .into_iter()
                .map(|(ticket, record, attempts)| Member {
                    ticket,
                    record,
                    attempts,
                })
                .collect()
        };
        let parts: Option<joints::Parts> = parts
            .into_iter()
            .map(|(shard, of)| Some((shard.as_any().downcast::<Self>().ok()?, members(of))))
            .collect();
        let Some(parts) = parts else {
            unreachable!("every delivery settles against a ShardHandle");
        };
        let Some(joints) = self.joints.get() else {
            // A batch of several shards with no committer to send it (the start refuses an
            // exactly-once subscription without transactions): it goes back, and commits
            // nothing.
            let _ = joints::hand_all_back(parts);
            return Err(AckError::Broker(Box::new(KinesisError::ShutDown {
                what: "committing a batch of several shards (no joint committer)",
            })));
        };
        joints
            .settle(parts, writes)
            .map_err(|err| AckError::Broker(Box::new(err)))
    }

    #[cfg(feature = "dynamodb-lease")]
    fn as_any(self: Arc<Self>) -> Arc<dyn std::any::Any + Send + Sync> {
        self
    }

    #[cfg(feature = "dynamodb-lease")]
    fn on_commit_batch(
        &self,
        members: Vec<(Ticket, Record, u64)>,
        writes: &crate::StagedWrites,
    ) -> Result<(), AckError> {
        let members = members
            .into_iter()
            .map(|(ticket, record, attempts)| Member {
                ticket,
                record,
                attempts,
            })
            .collect();
        self.settle_batch(members, writes)
            .map_err(|err| AckError::Broker(Box::new(err)))
    }

    fn on_forget(&self, ticket: Ticket) {
        self.forget(ticket);
    }

    fn on_hand_back(
        &self,
        ticket: Ticket,
        record: Record,
        attempt: u64,
        delay: Duration,
    ) -> Result<(), AckError> {
        self.hand_back(record, ticket, attempt, delay)
            .map_err(|err| AckError::Broker(Box::new(err)))
    }

    #[inline]
    fn standing(&self, ticket: Ticket) -> Standing {
        let standing = {
            let mut locked = self.lock();
            let Locked {
                machine,
                wall_deadline,
            } = &mut *locked;
            // The wall clock is read last (and only when the monotonic one still counts the
            // lease), as the machine asks: a suspend between the two readings is then seen.
            machine.standing_by(ticket, Instant::now(), |valid_until_ms| {
                wall_deadline.before(SystemTime::now(), valid_until_ms)
            })
        };
        if standing.stops_shard() {
            // Another instance may hold the shard by now; stopping it also ends its reader, so
            // nothing waits on this record.
            self.halted();
        }
        standing
    }

    #[inline]
    fn queued_standing(&self, ticket: Ticket) -> Standing {
        self.lock().queued_standing(ticket)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::LeaseTimings;

    fn record(sequence: &str) -> Record {
        Record::plain(sequence, b"")
    }

    /// The handle of a shard taken just now (`closed`: the broker's shutdown flag), and the
    /// tickets of `sequences`, read and handed out.
    fn taken(closed: &Arc<AtomicBool>, sequences: &[&str]) -> (ShardHandle, Vec<Ticket>) {
        leased(
            ShardLease::taken(LeaseTimings::default(), Instant::now(), epoch_millis()),
            closed,
            sequences,
        )
    }

    /// [`taken`], the shard held by `lease`.
    fn leased(
        lease: ShardLease<Instant>,
        closed: &Arc<AtomicBool>,
        sequences: &[&str],
    ) -> (ShardHandle, Vec<Ticket>) {
        let machine = ShardMachine::new(
            lease,
            ReadSettings {
                batch_size: 100,
                pace: crate::shard::pace::Pace::service(Duration::from_secs(1)),
                window: 1000,
                fan_out: false,
            },
            ShardIterator::service("iterator"),
            ShardStart::At(crate::KinesisPosition::TrimHorizon),
        );
        let handle = ShardHandle::new(
            LeaseKey::new("orders", "shardId-000000000000"),
            Arc::clone(closed),
            machine,
        );
        let mut more = Vec::new();
        assert!(matches!(
            handle.next_reads((2, &mut more)),
            ReadStep::Call(Call::GetRecords(_))
        ));
        let (mut step, _) = handle.read_answered(
            Fetch::Records {
                records: sequences.iter().map(|s| record(s)).collect(),
                next: Some(ShardIterator::service("next")),
                millis_behind: Some(0),
            },
            (2, &mut more),
        );
        let mut tickets = Vec::new();
        while let ReadStep::Deliver(_, ticket) = step {
            tickets.extend(ticket.onwards().take(1 + more.len()));
            more.clear();
            step = handle.next_reads((2, &mut more));
        }
        (handle, tickets)
    }

    #[test]
    fn the_lease_writer_is_told_of_a_checkpoint_pending_where_none_was_by_a_settle_or_a_seek() {
        use futures::FutureExt;
        let closed = Arc::new(AtomicBool::new(false));
        let (handle, tickets) = taken(&closed, &["1", "2"]);
        let told = || handle.writer_wake().now_or_never().is_some();
        assert!(!told(), "nothing woke the writer yet");
        handle.settle(tickets[0]).unwrap();
        assert!(told(), "the first pending checkpoint: the writer is told");
        handle.settle(tickets[1]).unwrap();
        assert!(
            !told(),
            "a checkpoint was pending: the writer, told of it, has its timer"
        );
        assert!(handle.seek(
            ShardIterator::service("at-7"),
            ShardStart::At(crate::KinesisPosition::TrimHorizon),
            SharedStr::from("7"),
        ));
        assert!(
            told(),
            "the seek's checkpoint replaces it: the writer is told"
        );
    }

    #[tokio::test]
    async fn a_run_makes_its_deliveries_itself_from_its_maker_s_plain_parts_and_they_settle_here() {
        use crate::delivery::run::{MakeDelivery, Plain, Run};
        use ruststream::IncomingMessage;

        /// A maker that gives its plain parts and nothing else.
        #[derive(Debug)]
        struct PlainOnly(Plain);

        impl MakeDelivery for PlainOnly {
            fn deliver(&self, _: Record, _: Ticket, _: u64) -> crate::KinesisMessage {
                panic!("a run makes a plain delivery itself, not through its maker")
            }

            fn plain(&self) -> Option<Plain> {
                Some(self.0.clone())
            }

            fn current(&self, _: Ticket) -> bool {
                true
            }

            fn give_back(&self, _: Vec<Record>) {}
        }

        let closed = Arc::new(AtomicBool::new(false));
        let (handle, tickets) = taken(&closed, &["1", "2", "3"]);
        let handle = Arc::new(handle);
        let origin = Arc::clone(&crate::delivery::message::tests::unheld(record("0")).origin);
        let maker = PlainOnly(Plain {
            origin: Arc::clone(&origin),
            target: Arc::clone(&handle) as Arc<dyn Settlement>,
        });
        let mut run = Run::new(
            record("1"),
            tickets[0],
            vec![record("3"), record("2")],
            Arc::new(maker),
        );
        let mut taken: Vec<_> = std::iter::from_fn(|| run.take()).collect();
        let sequences: Vec<_> = taken
            .iter()
            .map(|m| m.sequence_number().to_owned())
            .collect();
        assert_eq!(sequences, ["1", "2", "3"]);
        assert!(
            taken
                .iter()
                .all(|m| Arc::ptr_eq(&m.origin, &origin) && m.attempt == 1),
            "each comes from the maker's origin, its first delivery"
        );
        let first = taken.remove(0);
        for later in taken.into_iter().rev() {
            later.ack().await.unwrap();
        }
        assert_eq!(
            handle.lock().pending_checkpoint(),
            None,
            "the first record is not settled: the later ones, settled, move nothing"
        );
        first.ack().await.unwrap();
        assert_eq!(
            handle.lock().pending_checkpoint().map(|c| &**c),
            Some("3"),
            "settled under their own tickets, against this shard"
        );
    }

    /// A delivery that a seek made stale while it waited in the subscription's channel never
    /// reaches a handler: the receive lets it go as withheld, and the in-process journal of
    /// handlings (exactly once) shows no handling of it (it showed one, handed back, when the
    /// receive dropped it as a delivery dropped unsettled).
    #[cfg(all(feature = "testing", feature = "dynamodb-lease"))]
    #[tokio::test]
    async fn a_delivery_a_seek_made_stale_in_the_channel_is_let_go_with_no_handling_recorded() {
        use crate::delivery::outlet::{Items, channel};
        use crate::delivery::settlement::Hold;

        let closed = Arc::new(AtomicBool::new(false));
        let (handle, tickets) = taken(&closed, &["1"]);
        let handle = Arc::new(handle);
        let journal = crate::InProcessCommits::default();
        let mut message = crate::delivery::message::tests::unheld(record("1"));
        message.settle = Some(Hold::new(
            Arc::clone(&handle) as Arc<dyn Settlement>,
            tickets[0],
        ));
        message.writes = crate::StagedWrites::exactly_once(
            (&message.origin.shard, &message.record.sequence),
            None,
        )
        .logged(crate::lease::HandlingSeed {
            journal: journal.clone(),
            stream: Arc::from("orders"),
            records: vec![message.handled_record()],
            attempt: 1,
        });
        let (outlet, mut inlet) = channel(1);
        outlet.records.try_send(Items::one(message)).unwrap();
        drop(outlet);
        assert!(handle.seek(
            ShardIterator::service("at-7"),
            ShardStart::At(crate::KinesisPosition::TrimHorizon),
            SharedStr::from("7"),
        ));
        let received = std::future::poll_fn(|cx| inlet.poll_next(cx)).await;
        assert!(received.is_none(), "the stale delivery reaches no handler");
        assert_eq!(
            journal.handlings(),
            [],
            "no handler was given the record: no handling of it is recorded"
        );
    }

    #[test]
    fn settlements_the_shard_can_no_longer_take_are_refused_naming_why() {
        let closed = Arc::new(AtomicBool::new(false));
        let (handle, tickets) = taken(&closed, &["1", "2"]);
        handle.settle(tickets[0]).unwrap();
        handle.abandon();
        let err = handle.settle(tickets[1]).unwrap_err();
        assert!(
            matches!(err, KinesisError::SettledAfterHandover { ref shard, .. } if shard == "shardId-000000000000"),
            "{err}"
        );
        let (handle, tickets) = taken(&closed, &["1"]);
        closed.store(true, Ordering::Release);
        let err = handle.settle(tickets[0]).unwrap_err();
        assert!(matches!(err, KinesisError::ShutDown { .. }), "{err}");
        let err = handle
            .hand_back(record("1"), tickets[0], 1, Duration::ZERO)
            .unwrap_err();
        assert!(matches!(err, KinesisError::ShutDown { .. }), "{err}");
    }

    /// Exactly once: a handling's writes are kept while the machine holds its unit, and let go
    /// when it does not (a settle a seek made stale, units a seek dropped).
    #[cfg(feature = "dynamodb-lease")]
    #[test]
    fn writes_the_machine_no_longer_holds_are_let_go() {
        use aws_sdk_dynamodb::types::{AttributeValue, ConditionCheck, TransactWriteItem};

        let closed = Arc::new(AtomicBool::new(false));
        let lease = ShardLease::taken(LeaseTimings::default(), Instant::now(), epoch_millis())
            .committing(1);
        let (handle, tickets) = leased(lease, &closed, &["1", "2", "3"]);
        let staging = |sequence: &str| {
            let (shard, sequence): (Arc<str>, SharedStr) =
                ("shardId-000000000000".into(), sequence.into());
            let writes = crate::StagedWrites::exactly_once((&shard, &sequence), None);
            let check = ConditionCheck::builder()
                .table_name("counts")
                .key("id", AttributeValue::S(sequence.to_string()))
                .condition_expression("attribute_exists(id)")
                .build()
                .unwrap();
            writes
                .stage(TransactWriteItem::builder().condition_check(check).build())
                .unwrap();
            writes
        };
        // Settled out of order: held, waiting for the first delivery.
        handle
            .settle_writes(tickets[1], &record("2"), 1, &staging("2"))
            .unwrap();
        assert_eq!(handle.units_kept(), (1, 0));
        // A seek drops it; the next answer lets its writes go.
        assert!(handle.seek(
            ShardIterator::service("sought"),
            ShardStart::At(crate::KinesisPosition::TrimHorizon),
            SharedStr::from("0"),
        ));
        handle.answer(Answer::Done, None, "pod-a", Duration::ZERO);
        assert_eq!(handle.units_kept(), (0, 0));
        // A settle the seek made stale takes nothing.
        handle
            .settle_writes(tickets[2], &record("3"), 1, &staging("3"))
            .unwrap();
        assert_eq!(handle.units_kept(), (0, 0));
    }

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn a_close_waits_for_the_write_in_flight_then_its_final_writes() {
        let closed = Arc::new(AtomicBool::new(false));
        let (handle, tickets) = taken(&closed, &["1"]);
        let handle = Arc::new(handle);
        handle.settle(tickets[0]).unwrap();
        let Next::Send(Write::Checkpoint { .. }) = handle.next_write() else {
            panic!("the checkpoint goes out");
        };
        let closing = tokio::spawn({
            let handle = Arc::clone(&handle);
            async move { handle.close(Close::Release).await }
        });
        tokio::task::yield_now().await;
        assert!(handle.is_stopped(), "a closing shard delivers nothing");
        assert_eq!(
            handle.next_write(),
            Next::Wait(None),
            "after the write in flight"
        );
        assert!(!closing.is_finished());
        handle.answer(Answer::Done, None, "pod-a", Duration::ZERO);
        assert_eq!(handle.next_write(), Next::Send(Write::Release));
        handle.answer(Answer::Done, None, "pod-a", Duration::ZERO);
        assert_eq!(closing.await.unwrap(), Ending::Closed { written: true });
    }
}

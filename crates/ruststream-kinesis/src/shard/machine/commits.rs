//! Exactly once, the shard machine's side: deliveries settle with what their handling staged,
//! the settled prefix stays in the watermark until a commit covers it, the next commit folds
//! the longest run of it that fits one transaction, and a unit whose commit was refused is
//! delivered again under its own ticket, holding back every later delivery of the shard.

use std::collections::HashMap;
use std::sync::Arc;

use super::{Redelivery, Refusal, Settled, ShardMachine};
use crate::commit::{Limits, UnitId, UnitSize, fold::fold};
use crate::shard::lease::{Covers, Folded, Moment, Outcome};
use crate::shard::read::Sequenced;
use crate::watermark::{Ticket, Watermark};

/// What a delivery's handling staged, kept by the machine until its commit: the unit, what its
/// writes weigh, and the record with its attempts, to deliver it again should the commit be
/// refused by the unit's own write.
///
/// A batch's records of one shard make one unit of several deliveries: each holds the unit, and
/// the last of them its `size`; the others weigh nothing. A commit takes all of them or none.
#[derive(Debug)]
pub(crate) struct Staged<R> {
    pub(crate) unit: UnitId,
    pub(crate) size: UnitSize,
    pub(crate) record: R,
    pub(crate) attempts: u64,
    /// How many deliveries of this shard the unit holds (1: a single record's handling).
    pub(crate) members: usize,
    /// The unit spans shards: a joint commit with every shard's lease row commits it
    /// (`shard::joint`), never this shard's own commits.
    pub(crate) joint: bool,
}

/// One delivery of a unit of several: a batch's record, settled with the others at once.
#[cfg(any(test, feature = "dynamodb-lease"))]
#[derive(Debug)]
pub(crate) struct Member<R> {
    pub(crate) ticket: Ticket,
    pub(crate) record: R,
    pub(crate) attempts: u64,
}

impl<R> crate::watermark::Weighed for Staged<R> {
    fn weight(&self) -> usize {
        self.size.bytes
    }

    fn joint(&self) -> bool {
        self.joint
    }
}

/// How a unit's commit ended, for the driver (its writes, its handler's refusal).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CommitNews {
    /// These units' writes landed with the checkpoint.
    Committed(Arc<[UnitId]>),
    /// This unit's own write refused: nothing of it landed; it is delivered again (unless the
    /// shard is being handed back: then its next owner delivers it).
    Refused(UnitId),
    /// A seek dropped these settled units before any commit took them: their writes never
    /// commit.
    Dropped(Vec<UnitId>),
}

/// The next commit's share of the settled prefix: the longest run from its head that fits one
/// transaction with the shard's lease row, through its first unit with writes when `solo`
/// (`None`: nothing settled waits).
pub(super) fn fold_ready<R>(watermark: &Watermark<Staged<R>>, solo: bool) -> Option<Folded> {
    let empty = UnitSize::empty();
    // A unit that spans shards is committed by a joint commit: this shard's own stop before it.
    let (own, _) = watermark.ready_own();
    let sizes = watermark
        .ready_run()
        .take(own)
        .map(|(_, staged)| staged.map_or(&empty, |staged| &staged.size));
    let mut entries = fold(sizes, 1, Limits::DYNAMODB);
    if solo
        && let Some(first) = watermark
            .ready_run()
            .position(|(_, staged)| staged.is_some())
    {
        let unit = watermark.ready_run().nth(first)?.1?.unit;
        let last = watermark
            .ready_run()
            .enumerate()
            .filter(|(_, (_, staged))| staged.is_some_and(|staged| staged.unit == unit))
            .last()?
            .0;
        entries = entries.min(last + 1);
    }
    let entries = whole_units(watermark, entries);
    let (checkpoint, _) = watermark.ready_run().nth(entries.checked_sub(1)?)?;
    let mut units: Vec<UnitId> = Vec::new();
    for (_, staged) in watermark.ready_run().take(entries) {
        if let Some(staged) = staged
            && units.last() != Some(&staged.unit)
        {
            units.push(staged.unit);
        }
    }
    Some(Folded {
        checkpoint: checkpoint.clone(),
        units: units.into(),
        covers: Covers {
            generation: watermark.generation(),
            entries,
        },
    })
}

/// The longest run of at most `upto` entries of the settled prefix that splits no unit of
/// several deliveries: a commit that took some of a batch's records without its writes would
/// move the checkpoint past effects that never land.
fn whole_units<R>(watermark: &Watermark<Staged<R>>, upto: usize) -> usize {
    // Units of one delivery, the common case, allocate nothing here.
    let mut open: HashMap<UnitId, usize> = HashMap::new();
    let mut whole = 0;
    for (at, (_, staged)) in watermark.ready_run().take(upto).enumerate() {
        if let Some(staged) = staged.filter(|staged| staged.members > 1) {
            let left = open.entry(staged.unit).or_insert(staged.members);
            *left -= 1;
            if *left == 0 {
                open.remove(&staged.unit);
            }
        }
        if open.is_empty() {
            whole = at + 1;
        }
    }
    whole
}

impl<T: Moment, R: Sequenced> ShardMachine<T, R> {
    /// Exactly once: settles one delivery with what its handling staged (`None`: nothing); the
    /// settled prefix waits for its commit. Refused as [`settle`](Self::settle) is.
    pub(crate) fn settle_staged(
        &mut self,
        ticket: Ticket,
        staged: Option<Staged<R>>,
        broker_closed: bool,
    ) -> Result<Settled, Refusal> {
        if !self.lease.is_committing() {
            return self.settle(ticket, broker_closed);
        }
        self.leave_flight(broker_closed)?;
        let grew = self.watermark.settle_staged(ticket, staged);
        Ok(self.staged_settled(grew))
    }

    /// What a settle under exactly once gave: the lease hears that the prefix waiting for its
    /// commit `grew`.
    fn staged_settled(&mut self, grew: bool) -> Settled {
        if grew {
            self.ready_to_lease();
        }
        Settled {
            grew: false,
            checkpoint: grew,
            wake_reader: self.wakes_reader(),
        }
    }

    /// The units the machine still holds: staged in the watermark, or in the commit not yet
    /// answered for good. The driver keeps the writes of no other unit.
    #[cfg(any(test, feature = "dynamodb-lease"))]
    pub(crate) fn held_units(&self) -> std::collections::HashSet<UnitId> {
        self.watermark
            .staged()
            .map(|staged| staged.unit)
            .chain(self.lease.unresolved_units().iter().copied())
            .collect()
    }

    /// Whether every delivery under `tickets` is held (none was made stale by a seek): a
    /// batch's records settle as one unit only then ([`settle_unit`](Self::settle_unit)).
    #[cfg(any(test, feature = "dynamodb-lease"))]
    pub(crate) fn holds_all(&self, tickets: impl IntoIterator<Item = Ticket>) -> bool {
        tickets
            .into_iter()
            .all(|ticket| self.watermark.holds(ticket))
    }

    /// Exactly once: settles at once the deliveries of one unit (a batch's records of this
    /// shard, in order) with what the batch's handling staged, weighing `size`: no commit takes
    /// some of them without the others. The caller checked, under the same lock, that every one
    /// is held ([`holds_all`](Self::holds_all)); one that is not is left out of the unit, which
    /// then never waits for it. Refused as [`settle`](Self::settle) is.
    #[cfg(any(test, feature = "dynamodb-lease"))]
    pub(crate) fn settle_unit(
        &mut self,
        unit: UnitId,
        size: UnitSize,
        members: Vec<Member<R>>,
        broker_closed: bool,
    ) -> Result<Settled, Refusal> {
        self.settle_part(unit, size, members, false, broker_closed)
    }

    /// [`settle_unit`](Self::settle_unit), of a unit that spans shards when `joint`: its
    /// commit is then a joint one ([`crate::shard::joint`]), and `size` is what the whole unit
    /// weighs (its writes are held once, by the committer).
    #[cfg(any(test, feature = "dynamodb-lease"))]
    pub(crate) fn settle_part(
        &mut self,
        unit: UnitId,
        size: UnitSize,
        members: Vec<Member<R>>,
        joint: bool,
        broker_closed: bool,
    ) -> Result<Settled, Refusal> {
        // `whole_units` needs a unit's deliveries side by side: `KinesisSubscriber::batches`
        // makes them so (one shard, first deliveries only, in order).
        debug_assert!(
            self.watermark
                .consecutive(members.iter().map(|member| member.ticket)),
            "a unit's deliveries are consecutive"
        );
        let mut refusal = Ok(());
        for _ in &members {
            refusal = refusal.and(self.leave_flight(broker_closed));
        }
        refusal?;
        let members: Vec<Member<R>> = members
            .into_iter()
            .filter(|member| self.watermark.holds(member.ticket))
            .collect();
        let count = members.len();
        let mut size = Some(size);
        let mut grew = false;
        for (at, member) in members.into_iter().enumerate() {
            let staged = Staged {
                unit,
                size: if at + 1 == count {
                    size.take().unwrap_or_default()
                } else {
                    UnitSize::empty()
                },
                record: member.record,
                attempts: member.attempts,
                members: count,
                joint,
            };
            grew |= self.watermark.settle_staged(member.ticket, Some(staged));
        }
        Ok(self.staged_settled(grew))
    }

    /// Whether the delivery under `ticket` holds `unit` staged (its settle took it).
    #[cfg(any(test, feature = "dynamodb-lease"))]
    pub(crate) fn holds_staged(&self, ticket: Ticket, unit: UnitId) -> bool {
        self.watermark
            .staged_at(ticket)
            .is_some_and(|staged| staged.unit == unit)
    }

    /// Whether the delivery under `ticket` waits to be delivered again.
    #[cfg(any(test, feature = "dynamodb-lease"))]
    pub(crate) fn redelivers(&self, ticket: Ticket) -> bool {
        self.retries.iter().any(|waiting| waiting.ticket == ticket)
    }

    /// Whether the lease commits (exactly once).
    #[cfg(any(test, feature = "dynamodb-lease"))]
    pub(crate) fn is_committing(&self) -> bool {
        self.lease.is_committing()
    }

    /// A seek drops the settled units no commit took yet: the driver forgets their writes.
    pub(super) fn drop_staged(&mut self) {
        let sent = self.lease.unresolved_units();
        let mut dropped: Vec<UnitId> = Vec::new();
        for (_, staged) in self.watermark.ready_run() {
            if let Some(staged) = staged
                && !sent.contains(&staged.unit)
                && dropped.last() != Some(&staged.unit)
            {
                dropped.push(staged.unit);
            }
        }
        if !dropped.is_empty() {
            self.commit_news.push(CommitNews::Dropped(dropped));
        }
    }

    /// Tells the lease what waits for its own commit (not a joint one's).
    pub(super) fn ready_to_lease(&mut self) {
        let (ready, staged) = self.watermark.ready_own();
        self.lease.commit_ready(ready > 0, staged > 0);
    }

    /// Applies how the lease's commits ended at `now`: committed deliveries leave the watermark;
    /// a unit refused by its own write is unsettled and delivered again at once.
    pub(super) fn apply_outcomes(&mut self, now: T) {
        for outcome in self.lease.take_outcomes() {
            match outcome {
                Outcome::Committed { covers, units } => {
                    if covers.generation == self.watermark.generation() {
                        self.watermark.committed(covers.entries);
                        // Committed deliveries leave the window: a reader waiting for room
                        // has it now.
                        self.commit_woke_reader |= self.wakes_reader();
                    }
                    self.commit_news.push(super::CommitNews::Committed(units));
                }
                Outcome::Refused { covers, unit } => {
                    if covers.generation == self.watermark.generation() {
                        self.give_back(now, unit);
                    }
                    self.commit_news.push(super::CommitNews::Refused(unit));
                }
            }
        }
        self.ready_to_lease();
    }

    /// `unit`'s deliveries go back: unsettled under their tickets, to be delivered again now
    /// (each alone: a batch's records come back one at a time), or left to the shard's next
    /// owner when the shard is being handed back.
    pub(super) fn give_back(&mut self, now: T, unit: UnitId) {
        for ticket in self.watermark.settled_tickets(|staged| staged.unit == unit) {
            let Some(staged) = self.watermark.unsettle(ticket) else {
                continue;
            };
            if self.lease.is_halted() {
                // Its next owner delivers it again: a handoff no longer covers every delivery.
                self.handed_over_drained = false;
                continue;
            }
            self.in_flight += 1;
            let at = self.retries.partition_point(|waiting| waiting.due <= now);
            self.retries.insert(
                at,
                Redelivery {
                    record: staged.record,
                    ticket,
                    attempts: staged.attempts,
                    due: now,
                },
            );
        }
    }

    /// Whether a commit gave the reader what it waits for (room in the window) since the last
    /// call: the driver wakes it.
    pub(crate) fn take_reader_wake(&mut self) -> bool {
        std::mem::take(&mut self.commit_woke_reader)
    }

    /// How the commits ended since the last call, for the driver.
    pub(crate) fn take_commit_news(&mut self) -> Vec<CommitNews> {
        std::mem::take(&mut self.commit_news)
    }
}

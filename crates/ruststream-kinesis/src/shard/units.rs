//! Exactly once, the driver's side of a shard: the DynamoDB writes of each unit the machine
//! holds by its [`UnitId`] (the machine sees only their weight), from the settle that staged
//! them until their commit lands, is refused or is dropped by a seek; and the refusal a unit's
//! next delivery carries.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::types::TransactWriteItem;
use parking_lot::MutexGuard;

use super::{Member, ShardHandle, ShardMachine, Staged};
use crate::SharedStr;
use crate::commit::UnitId;
use crate::delivery::record::Record;
use crate::delivery::writes::Handling;
use crate::lease::HandlingOutcome;
use crate::shard::CommitNews;
use crate::watermark::Ticket;
use crate::{CommitRefused, KinesisError, StagedWrites};

/// One unit's writes, with the deliveries they came from (one, or a batch's records of this
/// shard).
#[derive(Debug)]
struct Kept {
    tickets: Vec<Ticket>,
    /// The sequence number of its (last) record.
    sequence: SharedStr,
    writes: Vec<TransactWriteItem>,
    /// Why its commit was refused, once the store said so.
    refused: Option<CommitRefused>,
    /// Its handling, in process, which hears how the unit ended.
    handling: Handling,
    /// In process, the harness counts the settles that kept it as work owed until its commit
    /// ends (`TestApp`'s publish returns once the effects committed, or the record comes back).
    owes_harness: usize,
}

/// What letting units go leaves the harness to hear.
#[derive(Debug, Default)]
pub(crate) struct LetGo {
    /// Settles whose harness unit is let go now.
    pub(crate) settled: usize,
    /// Tickets of units refused by their own writes: delivered again, if the machine says so.
    pub(crate) refused: Vec<Ticket>,
}

/// The writes of a shard's units, and the refusals its redeliveries carry.
#[derive(Debug, Default)]
pub(crate) struct Units {
    next: u64,
    kept: HashMap<UnitId, Kept>,
    /// By the ticket of the delivery to come again: why its last commit was refused.
    refusals: HashMap<Ticket, Arc<CommitRefused>>,
}

impl Units {
    /// Keeps `writes`, staged by the deliveries under `tickets` (the last of sequence number
    /// `sequence`), as a new unit.
    pub(crate) fn keep(
        &mut self,
        tickets: Vec<Ticket>,
        sequence: SharedStr,
        writes: Vec<TransactWriteItem>,
        handling: Handling,
    ) -> UnitId {
        let unit = UnitId(self.next);
        self.next += 1;
        self.kept.insert(
            unit,
            Kept {
                tickets,
                sequence,
                writes,
                refused: None,
                handling,
                owes_harness: 0,
            },
        );
        unit
    }

    /// The harness counts `unit`'s settles (one per delivery) as owed until the unit is let go.
    pub(crate) fn owe_harness(&mut self, unit: UnitId) {
        if let Some(kept) = self.kept.get_mut(&unit) {
            kept.owes_harness = kept.tickets.len();
        }
    }

    /// Forgets `unit` (its settle was refused).
    pub(crate) fn forget(&mut self, unit: UnitId) {
        if let Some(kept) = self.kept.remove(&unit) {
            kept.handling.ended(HandlingOutcome::Abandoned);
        }
    }

    /// The writes of `units`, in order, for a commit (a resend sends the same again); `None`
    /// when one of them is not kept.
    pub(crate) fn writes_of(
        &self,
        units: &[UnitId],
    ) -> Option<Vec<(UnitId, Vec<TransactWriteItem>)>> {
        units
            .iter()
            .map(|unit| Some((*unit, self.kept.get(unit)?.writes.clone())))
            .collect()
    }

    /// The sequence number of `unit`'s record.
    pub(crate) fn sequence_of(&self, unit: UnitId) -> Option<SharedStr> {
        self.kept.get(&unit).map(|kept| kept.sequence.clone())
    }

    /// Whether no unit's writes and no refusal are kept.
    fn is_empty(&self) -> bool {
        self.kept.is_empty() && self.refusals.is_empty()
    }

    /// The store refused `unit`'s commit for `why`.
    pub(crate) fn refused(&mut self, unit: UnitId, why: CommitRefused) {
        if let Some(kept) = self.kept.get_mut(&unit) {
            kept.refused = Some(why);
        }
    }

    /// Applies how the machine says commits ended: committed and dropped units' writes are let
    /// go; a refused unit's refusal waits for its next delivery.
    pub(crate) fn apply(&mut self, news: Vec<CommitNews>, let_go: &mut LetGo) {
        for one in news {
            match one {
                CommitNews::Committed(units) => {
                    for unit in units.iter() {
                        self.let_go(*unit, HandlingOutcome::Committed, let_go);
                    }
                }
                CommitNews::Dropped(units) => {
                    for unit in &units {
                        self.let_go(*unit, HandlingOutcome::Abandoned, let_go);
                    }
                }
                CommitNews::Refused(unit) => {
                    let refused = self.kept.get(&unit).and_then(|kept| kept.refused.clone());
                    let outcome = refused.map_or(HandlingOutcome::Abandoned, |why| {
                        HandlingOutcome::Refused(Box::new(why))
                    });
                    if let Some(kept) = self.let_go(unit, outcome, let_go) {
                        let why = kept.refused.map(Arc::new);
                        for ticket in kept.tickets {
                            let_go.refused.push(ticket);
                            if let Some(why) = &why {
                                self.refusals.insert(ticket, Arc::clone(why));
                            }
                        }
                    }
                }
            }
        }
    }

    /// Lets `unit` go, ended with `outcome`, counting its harness unit.
    fn let_go(
        &mut self,
        unit: UnitId,
        outcome: HandlingOutcome,
        let_go: &mut LetGo,
    ) -> Option<Kept> {
        let kept = self.kept.remove(&unit)?;
        kept.handling.ended(outcome);
        let_go.settled += kept.owes_harness;
        Some(kept)
    }

    /// Why the last commit of the delivery under `ticket` was refused, for its next delivery.
    pub(crate) fn take_refusal(&mut self, ticket: Ticket) -> Option<Arc<CommitRefused>> {
        self.refusals.remove(&ticket)
    }

    /// How many units' writes and refusals are kept.
    #[cfg(test)]
    pub(crate) fn kept(&self) -> (usize, usize) {
        (self.kept.len(), self.refusals.len())
    }

    /// Keeps only the units `held` says are held, and the refusals of deliveries that
    /// `redelivered` says come again.
    fn retain(
        &mut self,
        held: impl Fn(UnitId) -> bool,
        redelivered: impl Fn(Ticket) -> bool,
        let_go: &mut LetGo,
    ) {
        self.kept.retain(|unit, kept| {
            let keep = held(*unit);
            if !keep {
                kept.handling.ended(HandlingOutcome::Abandoned);
                let_go.settled += kept.owes_harness;
            }
            keep
        });
        self.refusals.retain(|ticket, _| redelivered(*ticket));
    }
}

/// Exactly once, what the shard's tasks and deliveries do with the units' writes. The units are
/// locked only under the machine's lock, so that the machine and the units agree on which units
/// are held.
impl ShardHandle {
    fn units(&self) -> MutexGuard<'_, Units> {
        self.units.lock()
    }

    /// Settles the delivery of `record` (its `attempts`th so far) under `ticket` with what its
    /// handling staged in `writes`, which staging can no longer add to; refused as
    /// [`settle`](Self::settle) is. Writes the machine did not take (a refused settle, a
    /// delivery a seek made stale) are let go at once.
    pub(crate) fn settle_writes(
        &self,
        ticket: Ticket,
        record: &Record,
        attempts: u64,
        writes: &StagedWrites,
    ) -> Result<(), KinesisError> {
        let (staged, size) = writes.seal();
        if staged.is_empty() {
            return self.settle_unstaged([ticket], writes);
        }
        let handling = writes.handled(&staged, HandlingOutcome::Pending);
        let closed = self.closed();
        let settled = {
            let mut machine = self.lock();
            let mut units = self.units();
            let unit = units.keep(vec![ticket], record.sequence.clone(), staged, handling);
            let staged = Staged {
                unit,
                size,
                record: record.clone(),
                attempts,
                members: 1,
                joint: false,
            };
            let settled = machine.settle_staged(ticket, Some(staged), closed);
            if machine.holds_staged(ticket, unit) {
                units.owe_harness(unit);
            } else {
                units.forget(unit);
                self.harness.settled();
            }
            settled
        };
        self.settle_answered(settled, false)
    }

    /// Settles at once the deliveries of a batch's records of this shard (`members`, in order)
    /// with what the batch's handling staged in `writes`: they commit together or not at all.
    /// Without writes each settles alone. When a seek made one of them stale, every one is
    /// handed back (the stale ones are forgotten, the others come again, each alone): the
    /// batch's writes never commit.
    pub(crate) fn settle_batch(
        &self,
        members: Vec<Member<Record>>,
        writes: &StagedWrites,
    ) -> Result<(), KinesisError> {
        let (staged, size) = writes.seal();
        if staged.is_empty() {
            return self.settle_unstaged(members.iter().map(|member| member.ticket), writes);
        }
        let closed = self.closed();
        let Some(sequence) = members.last().map(|last| last.record.sequence.clone()) else {
            return Ok(());
        };
        let tickets: Vec<Ticket> = members.iter().map(|member| member.ticket).collect();
        let settled = {
            let mut machine = self.lock();
            if machine.holds_all(tickets.iter().copied()) {
                let handling = writes.handled(&staged, HandlingOutcome::Pending);
                let mut units = self.units();
                let unit = units.keep(tickets.clone(), sequence, staged, handling);
                let settled = machine.settle_unit(unit, size, members, closed);
                if tickets
                    .iter()
                    .all(|ticket| machine.holds_staged(*ticket, unit))
                {
                    units.owe_harness(unit);
                } else {
                    units.forget(unit);
                    for _ in &tickets {
                        self.harness.settled();
                    }
                }
                Ok(settled)
            } else {
                writes.handled(&staged, HandlingOutcome::HandedBack);
                Err(members)
            }
        };
        match settled {
            Ok(settled) => self.settle_answered(settled, false),
            Err(members) => members
                .into_iter()
                .map(|member| {
                    self.hand_back(
                        member.record,
                        member.ticket,
                        member.attempts,
                        Duration::ZERO,
                    )
                })
                .fold(Ok(()), Result::and),
        }
    }

    /// Settles the deliveries under `tickets`, whose handling (`writes`) staged nothing: each
    /// alone, its checkpoint moving with the shard's next commit.
    fn settle_unstaged(
        &self,
        tickets: impl IntoIterator<Item = Ticket>,
        writes: &StagedWrites,
    ) -> Result<(), KinesisError> {
        settled_alone(
            tickets.into_iter().map(|ticket| self.settle(ticket)),
            writes,
        )
    }

    /// The writes of `units`, in order, for their commit; `None` when one is not kept (a bug:
    /// the commit must then not be sent, or it would move the checkpoint past writes that
    /// never landed).
    pub(crate) fn writes_of(
        &self,
        units: &[UnitId],
    ) -> Option<Vec<(UnitId, Vec<TransactWriteItem>)>> {
        let _machine = self.lock();
        self.units().writes_of(units)
    }

    /// The store refused `unit`'s commit: `why` (given the unit's record's sequence number)
    /// waits for the machine to hand the unit back, and goes with its next delivery.
    pub(crate) fn commit_refused(
        &self,
        unit: UnitId,
        why: impl FnOnce(Option<SharedStr>) -> CommitRefused,
    ) -> CommitRefused {
        let _machine = self.lock();
        let mut units = self.units();
        let why = why(units.sequence_of(unit));
        units.refused(unit, why.clone());
        why
    }

    /// Applies how commits ended (`news`, from a lease write's answer, under the machine's lock
    /// `machine`): committed and dropped units' writes are let go, a refused unit's refusal
    /// waits for its redelivery, and whatever the machine no longer holds is let go too (units
    /// a seek dropped, a refusal whose delivery is not coming again here). In process the
    /// harness hears of a refused record coming back before its settle is let go. Whether a
    /// unit comes back: its redelivery is due now.
    pub(super) fn units_answered(
        &self,
        machine: &ShardMachine<crate::clock::Instant, Record>,
        news: Vec<CommitNews>,
    ) -> bool {
        let mut units = self.units();
        if !machine.is_committing() || units.is_empty() {
            // No writes kept: nothing to let go (the news is of units with no writes).
            return false;
        }
        let mut let_go = LetGo::default();
        let held = machine.held_units();
        units.apply(news, &mut let_go);
        units.retain(
            |unit| held.contains(&unit),
            |ticket| machine.redelivers(ticket),
            &mut let_go,
        );
        drop(units);
        let mut back = false;
        for ticket in let_go.refused {
            if machine.redelivers(ticket) {
                self.harness.coming_back();
                back = true;
            }
        }
        for _ in 0..let_go.settled {
            self.harness.settled();
        }
        back
    }

    /// The shard's reader ended: every unit is let go, and in process the harness hears that
    /// their settles owe nothing more (a commit of theirs will not come). A unit that spans
    /// shards is its committer's to give back.
    pub(crate) fn units_ended(&self) {
        let mut let_go = LetGo::default();
        {
            let _machine = self.lock();
            self.units().retain(|_| false, |_| false, &mut let_go);
        }
        self.poke_joints();
        for _ in 0..let_go.settled {
            self.harness.settled();
        }
    }

    /// Why the last commit of the delivery under `ticket` was refused, for its next delivery.
    pub(crate) fn take_refusal(&self, ticket: Ticket) -> Option<Arc<CommitRefused>> {
        self.units().take_refusal(ticket)
    }

    /// The delivery under `ticket`, delivered again, carries `why` its unit's joint commit was
    /// refused (under the machine's lock).
    pub(super) fn carry_refusal(&self, ticket: Ticket, why: Arc<CommitRefused>) {
        self.units().refusals.insert(ticket, why);
    }
}

/// What settling deliveries each alone (`settles`), whose handling (`writes`) staged nothing,
/// came to: the handling is recorded acknowledged, or abandoned where a settle was refused.
pub(super) fn settled_alone(
    settles: impl Iterator<Item = Result<(), KinesisError>>,
    writes: &StagedWrites,
) -> Result<(), KinesisError> {
    let settled = settles.fold(Ok(()), Result::and);
    let outcome = if settled.is_ok() {
        HandlingOutcome::Acknowledged
    } else {
        HandlingOutcome::Abandoned
    };
    writes.handled(&[], outcome);
    settled
}

#[cfg(test)]
impl ShardHandle {
    /// How many units' writes and refusals the handle keeps.
    pub(crate) fn units_kept(&self) -> (usize, usize) {
        self.units().kept()
    }
}

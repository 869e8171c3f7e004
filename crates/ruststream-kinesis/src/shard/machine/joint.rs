//! Exactly once, a unit that spans shards (a batch of several shards' records), one shard's side:
//! its deliveries here wait at the head of the settled prefix until every shard of the unit can
//! send its part at once; then the joint committer ([`crate::shard::joint`]) takes each lease's
//! write slot for one transaction of the unit's writes and every shard's row. This shard's own
//! commits never take the unit (`fold_ready` stops before it), and send nothing while the
//! joint commit is unresolved.

use std::sync::Arc;

use super::{ShardMachine, Staged};
use crate::commit::{CommitToken, UnitId};
use crate::shard::lease::{Commit, Covers, Folded, Moment};
use crate::shard::read::Sequenced;

/// How a unit that spans shards stands in one of its shards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Part<T> {
    /// Its deliveries here head the settled prefix and the lease's write slot is free: the part
    /// may be sent now.
    Ready,
    /// Earlier deliveries of the shard wait for their commit, or a write is in flight.
    Waiting,
    /// Its joint commit was sent and is unresolved: its answer awaited (`None`), or due again at
    /// this moment.
    Sent(Option<T>),
    /// It can no longer commit here: the lease ended or closes, or the shard no longer holds the
    /// unit (a seek dropped it).
    Gone,
}

impl<T: Moment, R: Sequenced> ShardMachine<T, R> {
    /// How `unit`, a unit that spans shards, stands in this shard.
    pub(crate) fn joint_part(&self, unit: UnitId) -> Part<T> {
        if self.lease.ending().is_some() {
            return Part::Gone;
        }
        if let Some((commit, due)) = self.lease.joint_unresolved()
            && commit.units.contains(&unit)
        {
            return Part::Sent(due);
        }
        if self.lease.is_halted() || !self.watermark.staged().any(|staged| staged.unit == unit) {
            return Part::Gone;
        }
        if self.head_part(unit).is_some() && self.lease.joint_slot_free() {
            Part::Ready
        } else {
            Part::Waiting
        }
    }

    /// `unit`'s deliveries of this shard, when they head the settled prefix whole: what this
    /// shard's row commits of it.
    fn head_part(&self, unit: UnitId) -> Option<Folded> {
        let is_part = |staged: Option<&Staged<R>>| {
            staged.is_some_and(|staged| staged.joint && staged.unit == unit)
        };
        let (_, first) = self.watermark.ready_run().next()?;
        let members = first.filter(|_| is_part(first))?.members;
        let (checkpoint, last) = self.watermark.ready_run().nth(members.checked_sub(1)?)?;
        let whole = self
            .watermark
            .ready_run()
            .take(members)
            .all(|(_, staged)| is_part(staged));
        (whole && is_part(last)).then(|| Folded {
            checkpoint: checkpoint.clone(),
            units: Arc::from([unit]),
            covers: Covers {
                generation: self.watermark.generation(),
                entries: members,
            },
        })
    }

    /// Takes the lease's write slot at `now` for this shard's part of `unit`'s joint commit,
    /// under `token` (`None`: this lease's next token, for the first part; the others take the
    /// first's). `None` unless the part is [`Part::Ready`].
    pub(crate) fn reserve_part(
        &mut self,
        unit: UnitId,
        token: Option<CommitToken>,
        now: T,
        now_ms: u64,
    ) -> Option<Commit> {
        let folded = self.head_part(unit)?;
        self.lease.reserve_joint(folded, token, now, now_ms)
    }

    /// Sends this shard's part of the unresolved joint commit again at `now`, once its answer
    /// came (the committer sends it at the earliest part's moment).
    pub(crate) fn resend_part(&mut self, now: T, now_ms: u64) -> Option<Commit> {
        self.lease.resend_joint(now, now_ms)
    }

    /// `unit` can never commit (another of its shards cannot send its part): its deliveries
    /// here go back at `now`, each to come again alone (or to the shard's next owner, when it is
    /// being handed back). A part sent is left to its answer. Whether deliveries came back.
    pub(crate) fn abandon_part(&mut self, unit: UnitId, now: T) -> bool {
        if matches!(self.joint_part(unit), Part::Sent(_)) {
            return false;
        }
        let waiting = self.retries.len();
        self.give_back(now, unit);
        self.ready_to_lease();
        self.retries.len() > waiting
    }

    /// Another shard of `unit`'s joint commit, unresolved here, lost its lease: this one is
    /// lost too. Nothing happens where `unit` is not unresolved. Whether this lease was lost now.
    pub(crate) fn part_lost(&mut self, unit: UnitId) -> bool {
        self.lease.joint_part_lost(unit)
    }

    /// How long a handoff waits for deliveries: how long a unit that spans shards waits for all
    /// its parts before it is given back.
    pub(crate) fn handoff_drain(&self) -> std::time::Duration {
        self.lease.handoff_drain()
    }
}

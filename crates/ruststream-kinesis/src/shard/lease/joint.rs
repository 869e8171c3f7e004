//! Exactly once, the lease's side of a unit that spans shards: the joint committer
//! ([`crate::shard::joint`]) takes this lease's write slot for its part of a joint commit, and
//! sends it again; this lease's own driver sends nothing while the part is unresolved, and hears
//! its answer as any commit's.

use super::commit::{Commit, Folded};
use super::{Lost, Moment, Phase, ShardLease, Write};
use crate::commit::{CommitToken, UnitId};

impl<T: Moment> ShardLease<T> {
    /// Exactly once, a unit that spans shards: whether this lease may send its part of the
    /// joint commit now (held, not closing, nothing in flight or unresolved).
    pub(crate) fn joint_slot_free(&self) -> bool {
        self.phase == Phase::Holding
            && self.in_flight.is_none()
            && self
                .committing
                .as_ref()
                .is_some_and(|commits| commits.unresolved.is_none())
    }

    /// Takes the write slot at `now` for this lease's part of a joint commit of `folded` (the
    /// unit's deliveries of this shard, at the head of its settled prefix), under `token` (the
    /// joint commit's, `None`: this lease's next one, for the first part). Its answer comes
    /// through [`on_answer`](Self::on_answer) as any commit's. `None` when the slot is not free.
    pub(crate) fn reserve_joint(
        &mut self,
        folded: Folded,
        token: Option<CommitToken>,
        now: T,
        now_ms: u64,
    ) -> Option<Commit> {
        if !self.joint_slot_free() {
            return None;
        }
        // The unit's deliveries come after a seek's recorded position: they carry it.
        self.pending = None;
        let commit = self.open_commit(folded, token, now, now_ms, true)?;
        self.send(Write::Commit(commit.clone()), now, now_ms);
        Some(commit)
    }

    /// The joint commit this lease's part is unresolved in, and when it is due again (`None`:
    /// in flight); `None` when no joint commit is unresolved here.
    pub(crate) fn joint_unresolved(&self) -> Option<(&Commit, Option<T>)> {
        let unresolved = self.committing.as_ref()?.unresolved.as_ref()?;
        let due = if self.in_flight.is_some() {
            None
        } else {
            unresolved.due
        };
        unresolved.joint.then_some((&unresolved.commit, due))
    }

    /// Sends this lease's part of the unresolved joint commit again at `now` (unchanged, or a
    /// new attempt after a certain non-application, as its answer decided), whether or not its
    /// own wait is over: the committer sends at the earliest part's moment. `None` when none
    /// waits to be sent again.
    pub(crate) fn resend_joint(&mut self, now: T, now_ms: u64) -> Option<Commit> {
        if self.in_flight.is_some() || !matches!(self.phase, Phase::Holding | Phase::Closing(_)) {
            return None;
        }
        let unresolved = self.committing.as_mut()?.unresolved.as_mut()?;
        if !unresolved.joint || unresolved.due.is_none() {
            return None;
        }
        unresolved.due = None;
        let commit = unresolved.commit.clone();
        self.send(Write::Commit(commit.clone()), now, now_ms);
        Some(commit)
    }

    /// Another part of the joint commit of `unit` unresolved here lost its lease: the commit can
    /// never be resolved (it may have landed), so this lease is lost too, as one whose commit ran
    /// out of time is: nothing more is written, and the next owner starts at the row's
    /// checkpoint.
    pub(crate) fn joint_part_lost(&mut self, unit: UnitId) -> bool {
        let joint = self
            .committing
            .as_ref()
            .and_then(|commits| commits.unresolved.as_ref())
            .is_some_and(|unresolved| unresolved.joint && unresolved.commit.units.contains(&unit));
        if joint && !matches!(self.phase, Phase::Ended(_)) {
            self.in_flight = None;
            self.lose(Lost::RanOut);
            return true;
        }
        false
    }
}

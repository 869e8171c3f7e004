//! Exactly once, the lease's side: the commits that move the checkpoint together with the
//! handlers' writes, in the one-write-in-flight order of every other write of the row.
//!
//! - A commit renews the lease (the shard may deliver longer), but renewals keep their cadence:
//!   a transaction answers no row, and a renewal's answer is where a handoff asked of this holder
//!   shows. Its expiry is fixed at its first send, and a resend is the same request (the same
//!   token, the same expiry), so an attempt that landed is recognised and none is applied twice.
//! - Settled deliveries with staged writes commit at once (one write in flight already groups
//!   what settles during a round trip); settled deliveries without writes commit at the
//!   checkpoint interval, as checkpoints do.
//! - A commit without an answer is sent again unchanged, and nothing else is sent meanwhile; one
//!   refused by contention is sent again as a new attempt. Neither is folded anew: a new fold
//!   could apply the same writes under another token should the first attempt land late. When
//!   too little of the lease is left for another try, the lease is lost (run out).
//! - A unit's own write refused: nothing was applied; the unit goes back to its handler, and the
//!   units before it fold into the next commit.

use std::sync::Arc;

use super::{Answer, Close, Lost, Moment, Next, Phase, ShardLease, Write};
use crate::SharedStr;
use crate::commit::{CommitToken, UnitId};
use crate::lease::millis;

/// An exactly-once commit: the handler writes of `units` and the checkpoint, in one request
/// under `token`'s attempt `attempt`, conditioned on the lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Commit {
    pub(crate) token: CommitToken,
    pub(crate) attempt: u8,
    pub(crate) checkpoint: SharedStr,
    pub(crate) behind_ms: Option<u64>,
    /// The lease's expiry the commit writes, fixed at its first send.
    pub(crate) expiry_ms: u64,
    /// The units whose writes it carries, in order (none: it only moves the checkpoint).
    pub(crate) units: Arc<[UnitId]>,
    /// The settled deliveries it covers, of the watermark's generation `generation`.
    pub(crate) covers: Covers,
    /// The token of this lease's last commit that landed, which the row holds at the counter
    /// the commit is conditioned on (`None`: none landed yet, and the row's is not known): a
    /// refusal by a row still ours is retried only while the row holds it.
    pub(crate) prior: Option<Arc<str>>,
}

#[cfg(feature = "dynamodb-lease")]
impl Commit {
    /// This commit's update of the row of `key`, as a request to the store names it.
    pub(crate) fn row<'a>(
        &'a self,
        key: &'a crate::lease::LeaseKey,
    ) -> crate::lease::CommitRow<'a> {
        crate::lease::CommitRow {
            key,
            checkpoint: &self.checkpoint,
            behind_ms: self.behind_ms,
            expiry_ms: self.expiry_ms,
            prior: self.prior.as_deref(),
        }
    }
}

/// Which settled deliveries a commit covers: the first `entries` of the settled prefix of the
/// watermark's generation `generation` (none: a seek's recorded position).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Covers {
    pub(crate) generation: u64,
    pub(crate) entries: usize,
}

/// What a fold of the settled prefix took, for the next commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Folded {
    pub(crate) checkpoint: SharedStr,
    pub(crate) units: Arc<[UnitId]>,
    pub(crate) covers: Covers,
}

/// How a commit ended, for the shard machine to apply to its watermark.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// It landed: its deliveries leave the watermark, its units are done for good.
    Committed {
        covers: Covers,
        units: Arc<[UnitId]>,
    },
    /// Nothing of it was applied: `unit`'s own write refused. The unit goes back.
    Refused { covers: Covers, unit: UnitId },
}

/// A commit sent and not yet answered for good.
#[derive(Debug, Clone)]
pub(super) struct Unresolved<T> {
    pub(super) commit: Commit,
    /// When it is sent again (`None`: in flight).
    pub(super) due: Option<T>,
    /// Its first send, by each clock: the lease it grants counts from there.
    pub(super) first_sent: T,
    pub(super) first_sent_ms: u64,
    /// A part of a joint commit (a unit that spans shards): sent, and sent again, by the joint
    /// committer with every part's row, never by this lease's own driver.
    pub(super) joint: bool,
}

/// The lease's commits.
#[derive(Debug, Clone)]
pub(super) struct Committing<T> {
    /// The token of the next commit.
    pub(super) token: CommitToken,
    /// The token of the last commit that landed.
    pub(super) landed: Option<Arc<str>>,
    /// The token of the last commit its units' own write refused, since the last that landed:
    /// an earlier attempt of it, sent without an answer, may still land late.
    pub(super) refused: Option<Arc<str>>,
    /// Settled deliveries wait for a commit; some of them staged writes.
    pub(super) ready: bool,
    pub(super) ready_writes: bool,
    pub(super) unresolved: Option<Unresolved<T>>,
    pub(super) outcomes: Vec<Outcome>,
    /// A commit of several units was refused as a whole: each commit takes one unit with writes
    /// until one lands.
    pub(super) solo: bool,
}

impl<T> Committing<T> {
    /// The commits of a lease taken with `nonce`.
    pub(super) fn new(nonce: u64) -> Self {
        Self {
            token: CommitToken { nonce, number: 0 },
            landed: None,
            refused: None,
            ready: false,
            ready_writes: false,
            unresolved: None,
            outcomes: Vec::new(),
            solo: false,
        }
    }

    /// A commit ended for good: the next one is another request.
    pub(super) fn resolved(&mut self, outcome: Outcome) {
        self.unresolved = None;
        self.token = self.token.next();
        self.outcomes.push(outcome);
    }
}

impl<T: Moment> ShardLease<T> {
    /// Exactly once from now on: settled deliveries commit with their writes, under tokens of
    /// `nonce` (drawn when the lease was taken, so that no two leases share one).
    #[must_use]
    pub(crate) fn committing(mut self, nonce: u64) -> Self {
        self.committing = Some(Committing::new(nonce));
        self
    }

    /// A renewing write of this lease was answered with its row, whose commit token is `token`.
    /// A row of ours holding another token than the last commit this lease knows landed was
    /// moved by a commit of its own it took for refused: an earlier attempt of a commit whose
    /// resend its units' own write refused, landing late. Those units went back to be handled
    /// again, and their effects are in the row already; so the lease is lost here (nothing more
    /// commits or checkpoints), and the shard's next owner starts at that commit's checkpoint.
    /// No commit is in flight when a renewal is answered: nothing else is sent while one is
    /// unresolved. Before the lease's first commit landed, the row's token is not known: then
    /// only the token of the commit last refused tells.
    pub(crate) fn commit_token_seen(&mut self, token: Option<&str>) {
        let Some(commits) = &self.committing else {
            return;
        };
        let moved = match (&commits.landed, &commits.refused) {
            (_, Some(refused)) if token == Some(refused) => true,
            (Some(landed), _) => token != Some(landed),
            (None, _) => false,
        };
        if moved && !matches!(self.phase, Phase::Ended(_)) {
            self.lose(Lost::Refused);
        }
    }

    /// Whether the lease commits (exactly once).
    pub(crate) fn is_committing(&self) -> bool {
        self.committing.is_some()
    }

    /// Settled deliveries wait for a commit (`ready`), some of them with writes
    /// (`ready_writes`): what the machine's watermark holds now.
    pub(crate) fn commit_ready(&mut self, ready: bool, ready_writes: bool) {
        if let Some(commits) = &mut self.committing {
            commits.ready = ready;
            commits.ready_writes = ready_writes;
        }
    }

    /// Whether the next commit takes at most one unit with writes: one of several was refused
    /// as a whole, and which is at fault is found by committing them one at a time.
    pub(crate) fn folds_solo(&self) -> bool {
        self.committing.as_ref().is_some_and(|commits| commits.solo)
    }

    /// The units of the commit sent and not answered for good (none: no commit is).
    pub(crate) fn unresolved_units(&self) -> Arc<[UnitId]> {
        self.committing
            .as_ref()
            .and_then(|commits| commits.unresolved.as_ref())
            .map_or_else(
                || Arc::from([]),
                |unresolved| Arc::clone(&unresolved.commit.units),
            )
    }

    /// How the commits answered since the last call ended, for the machine to apply.
    pub(crate) fn take_outcomes(&mut self) -> Vec<Outcome> {
        self.committing
            .as_mut()
            .map(|commits| std::mem::take(&mut commits.outcomes))
            .unwrap_or_default()
    }

    /// The commit to send at `now`, or how long to wait for one: `None` when no commit is due
    /// (then a renewal or a closing write may be). An unresolved commit comes first and alone;
    /// then settled writes, at once; then a checkpoint without writes (settled deliveries that
    /// staged nothing, or a seek's position) at the checkpoint interval, or at once when closing.
    pub(super) fn next_commit(
        &mut self,
        now: T,
        now_ms: u64,
        fold: impl FnOnce() -> Option<Folded>,
    ) -> Option<Next<T>> {
        let closing = matches!(self.phase, Phase::Closing(_));
        let timer = self.next_timer();
        let commits = self.committing.as_mut()?;
        if let Some(unresolved) = &mut commits.unresolved {
            if unresolved.joint {
                // The joint committer sends it again, with the other shards' rows.
                return Some(Next::Wait(None));
            }
            let due = unresolved.due.unwrap_or(now);
            if now < due {
                return Some(Next::Wait(Some(due)));
            }
            unresolved.due = None;
            return Some(Next::Send(Write::Commit(unresolved.commit.clone())));
        }
        let due = commits.ready_writes
            || ((commits.ready || self.pending.is_some())
                && (closing || now >= self.checkpoint_due));
        if !due {
            return (closing && (commits.ready || self.pending.is_some()))
                .then_some(Next::Wait(Some(timer)));
        }
        let folded = match fold() {
            Some(folded) => {
                // The settled deliveries come after a seek's recorded position: they carry it.
                self.pending = None;
                folded
            }
            None => Folded {
                checkpoint: self.pending.take()?,
                units: Arc::from([]),
                covers: Covers {
                    generation: 0,
                    entries: 0,
                },
            },
        };
        let commit = self.open_commit(folded, None, now, now_ms, false)?;
        Some(Next::Send(Write::Commit(commit)))
    }

    /// The commit of `folded` first sent at `now` (`now_ms` by the wall clock), under `token`
    /// (`None`: this lease's next one), unresolved from now on (`joint`: a part of a joint
    /// commit, which the joint committer sends).
    pub(super) fn open_commit(
        &mut self,
        folded: Folded,
        token: Option<CommitToken>,
        now: T,
        now_ms: u64,
        joint: bool,
    ) -> Option<Commit> {
        let lease_ms = millis(self.row_lease());
        let behind_ms = self.behind_ms;
        let commits = self.committing.as_mut()?;
        let commit = Commit {
            token: token.unwrap_or(commits.token),
            attempt: 0,
            checkpoint: folded.checkpoint,
            behind_ms,
            expiry_ms: now_ms.saturating_add(lease_ms),
            units: folded.units,
            covers: folded.covers,
            prior: commits.landed.clone(),
        };
        commits.unresolved = Some(Unresolved {
            commit: commit.clone(),
            due: None,
            first_sent: now,
            first_sent_ms: now_ms,
            joint,
        });
        Some(commit)
    }

    /// The store answered `commit` at `now`.
    pub(super) fn commit_answered(&mut self, now: T, commit: Commit, answer: Answer) {
        let retry = self.retry_wait(now);
        let Some(commits) = &mut self.committing else {
            return;
        };
        let Some(unresolved) = commits.unresolved.clone() else {
            return;
        };
        match answer {
            Answer::Done => {
                commits.solo = false;
                commits.landed = Some(Arc::from(commit.token.base()));
                commits.refused = None;
                commits.resolved(Outcome::Committed {
                    covers: commit.covers,
                    units: commit.units,
                });
                // The row's expiry was written from the first send's clock. The renewals keep
                // their own cadence: a transaction answers no row, and a renewal's answer is
                // where a handoff asked of this holder shows.
                self.extended(unresolved.first_sent, unresolved.first_sent_ms);
                self.checkpoint_due = now + self.timings.checkpoint_interval();
            }
            Answer::Refused => self.lose(Lost::Refused),
            Answer::Split => {
                // Certainly not applied, so the same deliveries fold again, under a new token,
                // one unit at a time.
                commits.unresolved = None;
                commits.token = commits.token.next();
                commits.solo = true;
            }
            Answer::UserRefused(unit) => {
                commits.refused = Some(Arc::from(commit.token.base()));
                commits.resolved(Outcome::Refused {
                    covers: commit.covers,
                    unit,
                });
                // A shard read to its end no longer is: a delivery of it goes back, and only a
                // release may follow (the next owner delivers it again).
                if self.phase == Phase::Closing(Close::Finished) {
                    self.abandon_finish();
                }
            }
            Answer::Failed | Answer::NotApplied => {
                let Some(wait) = retry else {
                    self.lose(Lost::RanOut);
                    return;
                };
                let mut again = unresolved;
                // A certain non-application is a new attempt; a send without an answer is
                // repeated byte for byte.
                if answer == Answer::NotApplied {
                    again.commit.attempt = again.commit.attempt.wrapping_add(1);
                }
                again.due = Some(now + wait);
                commits.unresolved = Some(again);
            }
        }
    }
}

#[cfg(test)]
mod tests;

//! The lease store's rules, written once: which writes a row accepts and what each leaves in it,
//! and the fence a store object keeps of its own writes. Pure functions of a row and an input,
//! with no I/O and no clock of their own (every input carries its `now`).
//!
//! `MemoryLeaseStore` and the simulation's store apply them to their rows;
//! `DynamoLeaseStore` says them as condition and update expressions, and settles its fence with
//! them. `lease/dynamo/rules_cases.rs` holds those expressions against these functions case by
//! case on the local stack: a rule changed here changes for every store that applies it, and
//! the cases then tell where the DynamoDB expressions say otherwise.

#[cfg(any(test, feature = "dynamodb-lease"))]
use super::HANDOFF_REQUEST_LIFETIME;
use super::{Handoff, LeaseState, SKEW_TOLERANCE, millis};

/// A take of a row: by `owner` at `now_ms` (its clock), for a lease of `lease_ms`; `start`
/// becomes the checkpoint of a row without one. `seen_row`: the taker's store object saw the
/// row exist, so the take needs the row still there (a row deleted since, its shard done with,
/// is not created again by a take decided on an older view).
///
/// `over`: a take-over (`LeaseStore::take_over`) of a row kept alive by its holder's beat,
/// which the taker judged lapsed: accepted while the row still names that holder at that
/// counter, whatever its expiry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Take<'a> {
    pub(crate) owner: &'a str,
    pub(crate) now_ms: u64,
    pub(crate) lease_ms: u64,
    pub(crate) start: Option<&'a str>,
    pub(crate) seen_row: bool,
    pub(crate) over: Option<Over<'a>>,
}

/// The holder and the counter a take-over saw: the row must still hold both.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Over<'a> {
    pub(crate) holder: &'a str,
    pub(crate) counter: u64,
}

impl Take<'_> {
    /// The expiry the take writes.
    pub(crate) fn expiry_ms(&self) -> u64 {
        self.now_ms.saturating_add(self.lease_ms)
    }
}

/// Whether a take is accepted by `row` (`None`: there is no row): a missing row when the taker
/// never saw it exist; a row with no owner, or one this owner holds where the take does not move
/// its expiry back (a take of its own that lands late, after renewals went ahead, is refused
/// rather than shortening the lease), or one whose expiry lies more than [`SKEW_TOLERANCE`]
/// behind the taker's clock.
///
/// A take-over is accepted by the row it names as well (its holder, at its counter), and never
/// by a missing row: the shard's row was deleted since it was read.
pub(crate) fn take_accepted(row: Option<&LeaseState>, take: &Take<'_>) -> bool {
    match row {
        None => !take.seen_row && take.over.is_none(),
        Some(row) => {
            row.owner.is_none()
                || (row.is_held_by(take.owner) && row.expiry_ms <= take.expiry_ms())
                || row.is_expired_at(take.now_ms)
                || take
                    .over
                    .is_some_and(|over| row.is_held_by(over.holder) && row.counter == over.counter)
        }
    }
}

/// The row a take leaves, or `None` when `row` refuses it: this owner's, with a lease from now,
/// the counter bumped, any handoff's request removed (a take ends every handoff asked of the
/// earlier holder), and `start` as its checkpoint if it had none.
pub(crate) fn take(row: Option<&LeaseState>, take: &Take<'_>) -> Option<LeaseState> {
    take_accepted(row, take).then(|| taken(row, take))
}

/// The row an accepted take leaves ([`take`] without its condition).
pub(crate) fn taken(row: Option<&LeaseState>, take: &Take<'_>) -> LeaseState {
    let mut row = row.cloned().unwrap_or_default();
    row.owner = Some(take.owner.to_owned());
    row.expiry_ms = take.expiry_ms();
    row.counter += 1;
    row.handoff = None;
    if row.checkpoint.is_none() {
        row.checkpoint = take.start.map(str::to_owned);
    }
    row
}

/// A write of the row's holder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Held<'a> {
    /// A renewal: the lease runs to `expiry_ms`.
    Renew { expiry_ms: u64 },
    /// A checkpoint, with how far behind its shard the reader was (`None`: not known), and the
    /// lease renewed to `expiry_ms` when it is `Some`.
    Checkpoint {
        checkpoint: &'a str,
        behind_ms: Option<u64>,
        expiry_ms: Option<u64>,
    },
    /// A release: no owner, no lease.
    Release,
    /// The write of a handoff to `to`, whose request the row must hold: `to` owns
    /// the row with a lease to `expiry_ms`, the request removed, and `checkpoint` written when
    /// it is `Some`.
    HandOver {
        to: &'a str,
        checkpoint: Option<&'a str>,
        expiry_ms: u64,
    },
    #[cfg_attr(
        not(any(test, feature = "dynamodb-lease")),
        expect(dead_code, reason = "only a DynamoDB store commits")
    )]
    /// An exactly-once commit: the checkpoint (with how far behind the reader was) and the lease
    /// renewed to `expiry_ms`, written in the same transaction as the handler's writes, under
    /// `token`. Accepted only at the counter its writer saw: never on the owner alone, since two
    /// sends of one commit must never both land. `prior`: the token the writer knows the row
    /// holds at that counter (`None`: not known), by which a refusal is told from a landing of
    /// another commit of its own.
    Commit {
        checkpoint: &'a str,
        behind_ms: Option<u64>,
        expiry_ms: u64,
        token: &'a str,
        prior: Option<&'a str>,
    },
}

impl<'a> Held<'a> {
    /// A renewal at `now_ms` for a lease of `lease_ms`.
    pub(crate) fn renew(now_ms: u64, lease_ms: u64) -> Self {
        Self::Renew {
            expiry_ms: now_ms.saturating_add(lease_ms),
        }
    }

    /// The handoff to `to` at `now_ms`, for a lease of `lease_ms` short by the skew tolerance:
    /// the taker's take of its own row is conditioned on not moving the expiry back, and its
    /// clock may run that much behind.
    pub(crate) fn hand_over(
        to: &'a str,
        checkpoint: Option<&'a str>,
        now_ms: u64,
        lease_ms: u64,
    ) -> Self {
        Self::HandOver {
            to,
            checkpoint,
            expiry_ms: now_ms
                .saturating_add(lease_ms)
                .saturating_sub(millis(SKEW_TOLERANCE)),
        }
    }

    /// The expiry the write sets, if it sets one.
    #[cfg(any(test, feature = "dynamodb-lease"))]
    pub(crate) fn expiry_ms(&self) -> Option<u64> {
        self.effect("").expiry_ms
    }

    /// What the write leaves in the row, by which a refusal is recognised as this very write
    /// having landed before ([`landed`]).
    #[cfg(any(test, feature = "dynamodb-lease"))]
    pub(crate) fn effect(&self, owner: &'a str) -> Effect<'a> {
        match *self {
            Self::Renew { expiry_ms } => Effect {
                owner: Some(owner),
                expiry_ms: Some(expiry_ms),
                checkpoint: None,
                commit: None,
                prior: None,
            },
            Self::Checkpoint {
                checkpoint,
                expiry_ms,
                ..
            } => Effect {
                owner: Some(owner),
                expiry_ms,
                checkpoint: Some(checkpoint),
                commit: None,
                prior: None,
            },
            Self::Release => Effect {
                owner: None,
                expiry_ms: Some(0),
                checkpoint: None,
                commit: None,
                prior: None,
            },
            Self::HandOver {
                to,
                checkpoint,
                expiry_ms,
            } => Effect {
                owner: Some(to),
                expiry_ms: Some(expiry_ms),
                checkpoint,
                commit: None,
                prior: None,
            },
            Self::Commit {
                checkpoint,
                expiry_ms,
                token,
                prior,
                ..
            } => Effect {
                owner: Some(owner),
                expiry_ms: Some(expiry_ms),
                checkpoint: Some(checkpoint),
                commit: Some(token),
                prior,
            },
        }
    }
}

/// Whether `row` accepts `write` from `owner`, conditioned on the counter `seen` (`None`: on
/// the owner alone, as a store object that never wrote the row sends it): `owner` holds the row,
/// its counter is `seen`, and a handoff's request names its taker. A commit needs a `seen`.
pub(crate) fn held_accepted(
    row: Option<&LeaseState>,
    owner: &str,
    seen: Option<u64>,
    write: &Held<'_>,
) -> bool {
    row.is_some_and(|row| {
        row.is_held_by(owner)
            && seen.is_none_or(|seen| seen == row.counter)
            && match write {
                Held::HandOver { to, .. } => {
                    row.handoff.as_ref().is_some_and(|asked| asked.to == *to)
                }
                Held::Commit { .. } => seen.is_some(),
                _ => true,
            }
    })
}

/// The row a held write leaves, or `None` when `row` refuses it ([`held_accepted`]). Every
/// accepted write bumps the counter.
pub(crate) fn held(
    row: Option<&LeaseState>,
    owner: &str,
    seen: Option<u64>,
    write: &Held<'_>,
) -> Option<LeaseState> {
    let row = row.filter(|row| held_accepted(Some(row), owner, seen, write))?;
    Some(held_written(row, write))
}

/// The row an accepted held write leaves ([`held`] without its condition).
pub(crate) fn held_written(row: &LeaseState, write: &Held<'_>) -> LeaseState {
    let mut row = row.clone();
    row.counter += 1;
    match *write {
        Held::Renew { expiry_ms } => row.expiry_ms = expiry_ms,
        Held::Checkpoint {
            checkpoint,
            behind_ms,
            expiry_ms,
        } => {
            row.checkpoint = Some(checkpoint.to_owned());
            row.behind_ms = behind_ms;
            if let Some(expiry_ms) = expiry_ms {
                row.expiry_ms = expiry_ms;
            }
        }
        Held::Release => {
            row.owner = None;
            row.expiry_ms = 0;
        }
        Held::HandOver {
            to,
            checkpoint,
            expiry_ms,
        } => {
            row.owner = Some(to.to_owned());
            row.expiry_ms = expiry_ms;
            row.handoff = None;
            if let Some(checkpoint) = checkpoint {
                row.checkpoint = Some(checkpoint.to_owned());
                row.behind_ms = None;
            }
        }
        Held::Commit {
            checkpoint,
            behind_ms,
            expiry_ms,
            token,
            ..
        } => {
            row.checkpoint = Some(checkpoint.to_owned());
            row.behind_ms = behind_ms;
            row.expiry_ms = expiry_ms;
            row.commit_token = Some(token.to_owned());
        }
    }
    row
}

/// The row a request for a handoff leaves, or `None` when `row` refuses it: `to` asks
/// `holder`, whose row's counter it read as `counter`, at `asked_ms`. Accepted while `holder`
/// holds the row at that counter and no other instance's request stands (one older than
/// [`HANDOFF_REQUEST_LIFETIME`] no longer does). The counter does not move: the holder's writes
/// stay fenced as they were.
pub(crate) fn ask_handoff(
    row: Option<&LeaseState>,
    holder: &str,
    counter: u64,
    to: &str,
    asked_ms: u64,
) -> Option<LeaseState> {
    let row = row?;
    let free = row.handoff_at(asked_ms).is_none_or(|asked| asked.to == to);
    if !(row.is_held_by(holder) && row.counter == counter && free) {
        return None;
    }
    let mut row = row.clone();
    row.handoff = Some(Handoff {
        to: to.to_owned(),
        asked_ms,
    });
    Some(row)
}

/// The row without `to`'s request, or `None` when no request of `to`'s stands in it.
pub(crate) fn withdraw_handoff(row: Option<&LeaseState>, to: &str) -> Option<LeaseState> {
    let row = row?;
    if row.handoff.as_ref().is_none_or(|asked| asked.to != to) {
        return None;
    }
    let mut row = row.clone();
    row.handoff = None;
    Some(row)
}

/// Whether `row` may be deleted by a caller that read it at `counter`, at `now_ms`: nothing
/// wrote it since, and nobody holds it (no owner, or its lease lapsed more than
/// [`SKEW_TOLERANCE`] ago).
pub(crate) fn deletable(row: Option<&LeaseState>, counter: u64, now_ms: u64) -> bool {
    row.is_some_and(|row| row.counter == counter && row.is_expired_at(now_ms))
}

/// Whether a store that names the application `ours` (`None`: none) may take, read or claim a
/// row (or a stream's notice) that names `theirs`: a named store takes rows that name none or
/// its own, a store that names none only rows that name none.
#[cfg(any(test, feature = "dynamodb-lease"))]
pub(crate) fn application_admits(ours: Option<&str>, theirs: Option<&str>) -> bool {
    match ours {
        Some(ours) => theirs.is_none_or(|theirs| theirs == ours),
        None => theirs.is_none(),
    }
}

/// What a held write leaves in its row: the owner after it (`None` for a release), its expiry
/// where the write sets one, its checkpoint where it writes one, and a commit's token.
#[cfg(any(test, feature = "dynamodb-lease"))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Effect<'a> {
    owner: Option<&'a str>,
    expiry_ms: Option<u64>,
    checkpoint: Option<&'a str>,
    commit: Option<&'a str>,
    /// A commit's: the token its writer knows the row holds at the counter it saw.
    prior: Option<&'a str>,
}

#[cfg(any(test, feature = "dynamodb-lease"))]
impl Effect<'_> {
    /// Whether a refusal by `row`, still its writer's after one of its writes had no answer, may
    /// be retried under the row's counter: any write but a commit; a commit only when the row
    /// holds the token its writer knew, so that the counter moved by no commit of its own (a
    /// commit of its own whose answer was lost, landing before a restart's take or after a
    /// refusal of a later attempt, would be applied again).
    fn retriable_in(&self, row: &LeaseState) -> bool {
        self.commit.is_none()
            || self
                .prior
                .is_some_and(|prior| row.commit_token.as_deref() == Some(prior))
    }
}

/// Whether `row`, which refused a held write conditioned on the counter `seen` (`None`: on the
/// owner alone), is the row that very write leaves: an attempt of it landed and its answer was
/// lost, and the SDK's resend is what the row refused. The counter is one past `seen`, and the
/// owner, the expiry and the checkpoint are exactly as the write sets them. A commit's landing
/// also needs its token in the row: another write of the same values (a renewal to the same
/// expiry, a commit of the same checkpoint under another token) is not the commit's.
#[cfg(any(test, feature = "dynamodb-lease"))]
pub(crate) fn landed(row: &LeaseState, seen: Option<u64>, effect: &Effect<'_>) -> bool {
    let counted = match seen {
        Some(seen) => seen.checked_add(1) == Some(row.counter),
        None => effect.commit.is_none(),
    };
    counted
        && effect
            .commit
            .is_none_or(|token| row.commit_token.as_deref() == Some(token))
        && row.owner.as_deref() == effect.owner
        && effect
            .expiry_ms
            .is_none_or(|expiry| row.expiry_ms == expiry)
        && effect
            .checkpoint
            .is_none_or(|checkpoint| row.checkpoint.as_deref() == Some(checkpoint))
}

/// What a store object knows of its own writes to one row: its held writes are conditioned on
/// the counter it last saw there, so a write of its own that lands late (after its call timed
/// out, behind newer writes) is refused instead of moving the checkpoint or the expiry back, and
/// a process restarted under the same owner id fences out the old one's writes.
#[cfg(any(test, feature = "dynamodb-lease"))]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Fence {
    /// The counter its last answered write left (`None`: it never wrote the row).
    pub(crate) counter: Option<u64>,
    /// One of its writes had no answer: it may have landed, and moved the counter.
    pub(crate) uncertain: bool,
}

/// How a write of a store object's was answered.
#[cfg(any(test, feature = "dynamodb-lease"))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Answer {
    /// It landed, and left the row at this counter.
    Written { counter: u64 },
    /// Its condition refused it.
    Refused,
    /// No answer (a failed call, a timeout): it may land or have landed.
    Failed,
}

/// What a refusal of a held write means.
#[cfg(any(test, feature = "dynamodb-lease"))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// An earlier attempt of this very write landed: the write succeeded, and the fence is now
    /// this.
    Landed(Fence),
    /// One of the store object's own writes landed after all and the row is still its owner's:
    /// send the write once more under this fence.
    Retry(Fence),
    /// The lease is lost.
    Lost,
}

#[cfg(any(test, feature = "dynamodb-lease"))]
impl Fence {
    /// The fence once `answer` came back: the counter a write left, or the same counter marked
    /// uncertain after a call without an answer. A refusal keeps the counter it saw as the
    /// condition of later writes, so none of them lands on a row another instance (or a
    /// restart) wrote since.
    #[must_use]
    pub(crate) fn answered(self, answer: Answer) -> Self {
        match answer {
            Answer::Written { counter } => Self {
                counter: Some(counter),
                uncertain: false,
            },
            Answer::Refused => Self {
                uncertain: false,
                ..self
            },
            Answer::Failed => Self {
                uncertain: true,
                ..self
            },
        }
    }

    /// The fence that adopts `row`'s counter.
    #[must_use]
    pub(crate) fn adopting(row: &LeaseState) -> Self {
        Self {
            counter: Some(row.counter),
            uncertain: false,
        }
    }

    /// What the refusal by `row` of a held write of `owner`'s, sent under this fence, means:
    /// `effect` is what the write leaves (`None`: not to be recognised), `retried` whether it
    /// was already sent once more.
    pub(crate) fn refused_by(
        self,
        row: &LeaseState,
        owner: &str,
        effect: Option<&Effect<'_>>,
        retried: bool,
    ) -> Refusal {
        if effect.is_some_and(|effect| landed(row, self.counter, effect)) {
            return Refusal::Landed(Self::adopting(row));
        }
        if !retried
            && self.uncertain
            && row.is_held_by(owner)
            && effect.is_none_or(|effect| effect.retriable_in(row))
        {
            return Refusal::Retry(Self::adopting(row));
        }
        Refusal::Lost
    }
}

/// A request asked before this (for one asked at `asked_ms`) no longer stands: for the stores
/// that write its staleness into a condition.
#[cfg(any(test, feature = "dynamodb-lease"))]
pub(crate) fn stale_before(asked_ms: u64) -> u64 {
    asked_ms.saturating_sub(millis(HANDOFF_REQUEST_LIFETIME))
}

#[cfg(any(test, feature = "dynamodb-lease"))]
#[cfg_attr(
    not(any(test, feature = "testing")),
    allow(
        dead_code,
        reason = "a commit's rows are applied by the simulation and the in-process store only"
    )
)]
mod commit;
#[cfg(any(test, feature = "dynamodb-lease"))]
pub(crate) use commit::{CommitRefusal, RowAnswer, RowRefusal, commit_refused};
#[cfg(any(test, all(feature = "testing", feature = "dynamodb-lease")))]
pub(crate) use commit::{RowCommit, commit_rows};

#[cfg(test)]
mod tests;

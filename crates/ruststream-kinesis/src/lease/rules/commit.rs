//! The rules of an exactly-once commit: one transaction moves the rows of every shard it covers,
//! all of them or none, each conditioned on its owner and the counter its writer saw; and what
//! the rows a refused transaction returned mean.
//!
//! The handler's own writes are not these rules' concern: a store applies them in the same step
//! as the rows, or not at all.

use super::{Fence, Held, held_accepted, held_written};
use crate::lease::LeaseState;

/// One row of a commit: the row as the store holds it (`None`: missing), the writer, the
/// counter the writer saw, and the write ([`Held::Commit`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RowCommit<'a> {
    pub(crate) row: Option<&'a LeaseState>,
    pub(crate) owner: &'a str,
    pub(crate) seen: u64,
    pub(crate) write: Held<'a>,
}

/// The rows a commit leaves, in order, or the index of the first row that refuses it: nothing of
/// a refused commit is written.
pub(crate) fn commit_rows(rows: &[RowCommit<'_>]) -> Result<Vec<LeaseState>, usize> {
    rows.iter()
        .enumerate()
        .map(|(index, commit)| match commit.row {
            Some(row)
                if held_accepted(Some(row), commit.owner, Some(commit.seen), &commit.write) =>
            {
                Ok(held_written(row, &commit.write))
            }
            _ => Err(index),
        })
        .collect()
}

/// How one row of a refused transaction answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RowAnswer<'a> {
    /// Its condition held: another action refused the transaction.
    Accepted,
    /// Its condition failed, and the row stood so.
    Refused(&'a LeaseState),
    /// Its condition failed on a missing row.
    Missing,
}

/// What a refused commit means for its rows, read from the rows the refusal returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CommitRefusal {
    /// An earlier attempt of this very commit landed (a row shows its token one past the counter
    /// it was conditioned on, and the transaction is atomic): the commit succeeded. Each row's
    /// fence from now on; `None` for a row another writer moved since, lost from then on.
    Landed(Vec<Option<Fence>>),
    /// One of the writer's own writes landed after all, and every refusing row is still its own:
    /// send the commit once more under these fences (one per row, in order).
    Retry(Vec<Fence>),
    /// The lease of these rows (their indexes) is lost: nothing of the commit was applied.
    Lost { rows: Vec<usize> },
}

/// One row of a refused commit: its fence (the counter the commit was conditioned on, and
/// whether a write before had no answer), the token its writer knew the row held there (`None`:
/// not known), and how it answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RowRefusal<'a> {
    pub(crate) fence: Fence,
    pub(crate) prior: Option<&'a str>,
    pub(crate) answer: RowAnswer<'a>,
}

/// What a refused commit of `owner`'s under `token` means: `rows` in the commit's order;
/// `retried` whether the commit was already sent once more after a refusal.
///
/// One refusing row that shows the commit landed is enough: the transaction is all or nothing.
/// A retry needs every refusing row still ours after an uncertain write, holding the token its
/// writer knew: a counter moved by a commit of our own (one whose answer was lost, landing before
/// a restart's take or after a later attempt's refusal) would otherwise have its units applied
/// again.
pub(crate) fn commit_refused(
    rows: &[RowRefusal<'_>],
    owner: &str,
    token: &str,
    retried: bool,
) -> CommitRefusal {
    let shows_landing = |fence: &Fence, row: &LeaseState| {
        fence.counter.and_then(|seen| seen.checked_add(1)) == Some(row.counter)
            && row.is_held_by(owner)
            && row.commit_token.as_deref() == Some(token)
    };
    let landed = rows.iter().any(|one| match one.answer {
        RowAnswer::Refused(row) => shows_landing(&one.fence, row),
        _ => false,
    });
    if landed {
        return CommitRefusal::Landed(
            rows.iter()
                .map(|one| match one.answer {
                    RowAnswer::Refused(row) if shows_landing(&one.fence, row) => {
                        Some(Fence::adopting(row))
                    }
                    _ => None,
                })
                .collect(),
        );
    }
    let retry = rows.iter().all(|one| match one.answer {
        RowAnswer::Accepted => true,
        RowAnswer::Refused(row) => {
            one.fence.uncertain
                && row.is_held_by(owner)
                && one
                    .prior
                    .is_some_and(|prior| row.commit_token.as_deref() == Some(prior))
        }
        RowAnswer::Missing => false,
    });
    if retry && !retried {
        return CommitRefusal::Retry(
            rows.iter()
                .map(|one| match one.answer {
                    RowAnswer::Refused(row) => Fence::adopting(row),
                    _ => Fence {
                        uncertain: false,
                        ..one.fence
                    },
                })
                .collect(),
        );
    }
    CommitRefusal::Lost {
        rows: rows
            .iter()
            .enumerate()
            .filter(|(_, one)| !matches!(one.answer, RowAnswer::Accepted))
            .map(|(index, _)| index)
            .collect(),
    }
}

#[cfg(test)]
mod tests;

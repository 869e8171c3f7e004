//! Exactly once in process (`TestApp`): the commits of the connection's `MemoryLeaseStore`. Each
//! moves its lease rows under the store's rules, in the same critical section as it is recorded
//! here; the handler's staged writes are recorded, not applied (no DynamoDB runs in process), for
//! a test to read. A test may also have commits refused by their own writes
//! ([`InProcessCommits::refuse_when`]), to drive the refusal path.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use aws_sdk_dynamodb::types::TransactWriteItem;

use super::HandlingOutcome;
use super::rules::{self, RowCommit};
use super::transactions::{CommitAnswer, CommitFuture, CommitRequest, CommitStore, UserRefusal};
use super::{LeaseKey, LeaseState};

/// The rows of a `MemoryLeaseStore`.
pub(crate) type Rows = Arc<Mutex<std::collections::HashMap<LeaseKey, LeaseState>>>;

/// Decides whether a staged write refuses its commit: the code it is refused with (as
/// DynamoDB's `ConditionalCheckFailed`), or `None`.
type Refuse = dyn Fn(&TransactWriteItem) -> Option<String> + Send + Sync;

/// What exactly-once subscriptions committed in process, under `TestApp`: read it from the
/// broker the app was given ([`KinesisBroker::in_process_commits`](crate::KinesisBroker::in_process_commits)).
/// Clones share one journal.
#[derive(Clone, Default)]
pub struct InProcessCommits {
    journal: Arc<Mutex<Journal>>,
}

#[derive(Default)]
struct Journal {
    committed: Vec<InProcessCommit>,
    handlings: Vec<InProcessHandling>,
    refuse: Option<Arc<Refuse>>,
}

impl std::fmt::Debug for InProcessCommits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let journal = self.lock();
        f.debug_struct("InProcessCommits")
            .field("committed", &journal.committed.len())
            .field("handlings", &journal.handlings.len())
            .field("refusing", &journal.refuse.is_some())
            .finish()
    }
}

/// One commit in process: the handlings' writes, in order, and the checkpoint they committed
/// with.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct InProcessCommit {
    /// The stream.
    pub stream: String,
    /// The shard (of a commit of several shards, the first of them).
    pub shard: String,
    /// The checkpoint the commit moved the shard's row to.
    pub checkpoint: String,
    /// Every shard whose row the commit moved, with the checkpoint it moved it to: one, or one
    /// per shard of a batch that spans shards (committed in one transaction).
    pub checkpoints: Vec<(String, String)>,
    /// The commit's token, which the row keeps.
    pub token: String,
    /// The writes the handlings it covers staged, in order.
    pub writes: Vec<TransactWriteItem>,
}

/// One handling in process: the records its handler was given (one, or a batch's records, of
/// one shard or of several), what it staged, and how it ended.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct InProcessHandling {
    /// The stream.
    pub stream: String,
    /// The shard (of a batch of several shards, its last record's; each record names its own).
    pub shard: String,
    /// Its records, in order.
    pub records: Vec<HandledRecord>,
    /// How many times its record was delivered, this handling included (1 for a batch of
    /// several: a record delivered again comes alone).
    pub attempt: u64,
    /// What it staged, in order.
    pub staged: Vec<TransactWriteItem>,
    /// How it ended.
    pub outcome: HandlingOutcome,
}

/// A record a handling was given.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct HandledRecord {
    /// Its shard.
    pub shard: String,
    /// Its sequence number in its shard (a KPL aggregate's, for a user record in one).
    pub sequence: String,
    /// For a user record of a KPL aggregate, its index there; `None` for a plain record.
    pub sub_sequence: Option<u64>,
}

/// Who a delivery's handling is recorded with, until it ends: the journal, and what the entry
/// says of its records.
#[derive(Debug)]
pub(crate) struct HandlingSeed {
    pub(crate) journal: InProcessCommits,
    pub(crate) stream: Arc<str>,
    pub(crate) records: Vec<HandledRecord>,
    pub(crate) attempt: u64,
}

impl HandlingSeed {
    /// Records the handling, which staged `staged` and stands at `outcome`, in its journal.
    pub(crate) fn record(
        self,
        shard: &str,
        staged: &[TransactWriteItem],
        outcome: HandlingOutcome,
    ) -> HandlingEntry {
        let mut journal = self.journal.lock();
        journal.handlings.push(InProcessHandling {
            stream: self.stream.to_string(),
            shard: shard.to_owned(),
            records: self.records,
            attempt: self.attempt,
            staged: staged.to_vec(),
            outcome,
        });
        let at = journal.handlings.len() - 1;
        drop(journal);
        HandlingEntry {
            journal: self.journal,
            at,
        }
    }
}

/// A handling recorded in a journal, whose ending updates it.
#[derive(Debug, Clone)]
pub(crate) struct HandlingEntry {
    journal: InProcessCommits,
    at: usize,
}

impl HandlingEntry {
    /// The handling ended with `outcome`.
    pub(crate) fn ended(&self, outcome: HandlingOutcome) {
        if let Some(handling) = self.journal.lock().handlings.get_mut(self.at) {
            handling.outcome = outcome;
        }
    }
}

impl InProcessCommits {
    fn lock(&self) -> MutexGuard<'_, Journal> {
        self.journal.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Every commit so far, in the order they landed.
    #[must_use]
    pub fn committed(&self) -> Vec<InProcessCommit> {
        self.lock().committed.clone()
    }

    /// Every handling that settled or was handed back so far, in that order: what each staged
    /// and how it ended. A publish returns once its handling ended, so what a test reads after
    /// it is final (a record delivered again shows one handling per delivery).
    #[must_use]
    pub fn handlings(&self) -> Vec<InProcessHandling> {
        self.lock().handlings.clone()
    }

    /// Every write committed so far, in the order they landed.
    #[must_use]
    pub fn writes(&self) -> Vec<TransactWriteItem> {
        self.lock()
            .committed
            .iter()
            .flat_map(|commit| commit.writes.iter().cloned())
            .collect()
    }

    /// From now on, a commit one of whose staged writes `refuse` answers with a code is refused
    /// by that write, with that code, as DynamoDB refuses a commit whose condition check failed:
    /// nothing of it is applied, and its record comes again with
    /// [`StagedWrites::refused`](crate::StagedWrites::refused).
    pub fn refuse_when(
        &self,
        refuse: impl Fn(&TransactWriteItem) -> Option<String> + Send + Sync + 'static,
    ) {
        self.lock().refuse = Some(Arc::new(refuse));
    }

    /// The first staged write of `request` that the test's rule refuses, as the store's answer.
    fn refusal(&self, request: &CommitRequest<'_>) -> Option<UserRefusal> {
        let refuse = self.lock().refuse.clone()?;
        request.units.iter().find_map(|(unit, writes)| {
            writes.iter().enumerate().find_map(|(action, write)| {
                refuse(write).map(|code| UserRefusal {
                    unit: *unit,
                    action: Some(action),
                    code,
                    message: Some("refused by the test (InProcessCommits::refuse_when)".into()),
                    item: None,
                })
            })
        })
    }
}

/// The commits of a `MemoryLeaseStore` in process: on its rows, recorded in its journal.
#[derive(Debug)]
pub(crate) struct MemoryCommits {
    pub(crate) rows: Rows,
    pub(crate) journal: InProcessCommits,
}

impl CommitStore for MemoryCommits {
    fn commit<'a>(&'a self, request: &'a CommitRequest<'a>) -> CommitFuture<'a> {
        Box::pin(std::future::ready(self.commit_now(request)))
    }
}

impl MemoryCommits {
    fn commit_now(&self, request: &CommitRequest<'_>) -> CommitAnswer {
        if let Some(refusal) = self.journal.refusal(request) {
            return CommitAnswer::UserRefused(refusal);
        }
        let mut rows = self.rows.lock().unwrap_or_else(PoisonError::into_inner);
        {
            // On the owner alone, as the store's other writes: its brokers share this object,
            // and no write of theirs lands late, so the counter seen is the row's.
            let commits: Vec<RowCommit<'_>> = request
                .rows
                .iter()
                .map(|row| {
                    let held = rows.get(row.key);
                    RowCommit {
                        row: held,
                        owner: request.owner,
                        seen: held.map_or(0, |held| held.counter),
                        write: rules::Held::Commit {
                            checkpoint: row.checkpoint,
                            behind_ms: row.behind_ms,
                            expiry_ms: row.expiry_ms,
                            token: request.token,
                            prior: row.prior,
                        },
                    }
                })
                .collect();
            let written = match rules::commit_rows(&commits) {
                Ok(written) => written,
                Err(row) => return CommitAnswer::Lost { rows: vec![row] },
            };
            for (row, state) in request.rows.iter().zip(written) {
                rows.insert(row.key.clone(), state);
            }
            if let Some(row) = request.rows.first() {
                self.journal.lock().committed.push(InProcessCommit {
                    stream: row.key.stream().to_owned(),
                    shard: row.key.shard().to_owned(),
                    checkpoint: row.checkpoint.to_owned(),
                    checkpoints: request
                        .rows
                        .iter()
                        .map(|row| (row.key.shard().to_owned(), row.checkpoint.to_owned()))
                        .collect(),
                    token: request.token.to_owned(),
                    writes: request
                        .units
                        .iter()
                        .flat_map(|(_, writes)| writes.iter().cloned())
                        .collect(),
                });
            }
            CommitAnswer::Done
        }
    }
}

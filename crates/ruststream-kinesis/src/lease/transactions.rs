//! Exactly once: the seam through which a subscription reaches the transactions of its lease
//! store. A store that can commit a handler's DynamoDB writes with its lease rows answers
//! [`LeaseStore::transactions`](crate::LeaseStore::transactions) with [`Transactions`]; every
//! other store answers `None`, and an exactly-once subscription on it fails the start.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use aws_sdk_dynamodb::types::TransactWriteItem;

use super::{LeaseError, LeaseKey};
use crate::commit::UnitId;

/// An item as DynamoDB returns it.
type Item = std::collections::HashMap<String, aws_sdk_dynamodb::types::AttributeValue>;

/// What a commit's answer is awaited as.
pub(crate) type CommitFuture<'a> = Pin<Box<dyn Future<Output = CommitAnswer> + Send + 'a>>;

/// What a table's ARN is awaited as.
pub(crate) type ArnFuture<'a> = Pin<Box<dyn Future<Output = Option<String>> + Send + 'a>>;

/// A store that commits a unit's writes with its lease rows in one transaction.
pub(crate) trait CommitStore: Send + Sync + std::fmt::Debug {
    fn commit<'a>(&'a self, request: &'a CommitRequest<'a>) -> CommitFuture<'a>;

    /// The AWS region its transactions run in (`None`: not an AWS one, or not known): a handler's
    /// table named without an ARN is written there.
    fn region(&self) -> Option<String> {
        None
    }

    /// The key attributes of the tables its commits put items into, as far as it learnt them
    /// (`None`: it learns none, and puts count as touching every item of their table).
    fn commit_tables(&self) -> Option<super::CommitTables> {
        None
    }

    /// The ARN of the table its transactions condition the lease rows in (`None`: not known,
    /// as where `DescribeTable` is not allowed): it names the table's account.
    fn table_arn(&self) -> ArnFuture<'_> {
        Box::pin(std::future::ready(None))
    }
}

/// The transactions of a lease store that commits a handler's writes with its lease rows
/// (`DynamoLeaseStore`): what [`LeaseStore::transactions`](crate::LeaseStore::transactions)
/// answers. A store that wraps another forwards its answer.
#[derive(Debug, Clone)]
pub struct Transactions {
    store: Arc<dyn CommitStore>,
}

impl Transactions {
    pub(crate) fn new(store: Arc<dyn CommitStore>) -> Self {
        Self { store }
    }

    /// Commits `request` (see [`DynamoLeaseStore::commit`](crate::DynamoLeaseStore)).
    pub(crate) fn commit<'a>(&'a self, request: &'a CommitRequest<'a>) -> CommitFuture<'a> {
        self.store.commit(request)
    }

    /// The AWS region the transactions run in, where the store knows it.
    pub(crate) fn region(&self) -> Option<String> {
        self.store.region()
    }

    /// The key attributes of the tables commits put items into, where the store learns them.
    pub(crate) fn commit_tables(&self) -> Option<super::CommitTables> {
        self.store.commit_tables()
    }

    /// The lease table's ARN, where the store can tell it.
    pub(crate) async fn table_arn(&self) -> Option<String> {
        self.store.table_arn().await
    }
}

/// One lease row of a commit: the checkpoint it moves to (with how far behind the reader was),
/// the expiry it writes, and the commit token the row holds at the counter the commit is
/// conditioned on, as far as the writer knows (`None`: not known).
#[derive(Debug, Clone, Copy)]
pub(crate) struct CommitRow<'a> {
    pub(crate) key: &'a LeaseKey,
    pub(crate) checkpoint: &'a str,
    pub(crate) behind_ms: Option<u64>,
    pub(crate) expiry_ms: u64,
    pub(crate) prior: Option<&'a str>,
}

/// One commit: `owner`'s rows, the units' staged writes in order, the commit's token (the row
/// keeps it) and the request token of this attempt.
#[derive(Debug, Clone)]
pub(crate) struct CommitRequest<'a> {
    pub(crate) owner: &'a str,
    pub(crate) token: &'a str,
    pub(crate) request_token: &'a str,
    pub(crate) units: Vec<(UnitId, Vec<TransactWriteItem>)>,
    pub(crate) rows: Vec<CommitRow<'a>>,
}

/// A unit's own write refused the commit: which, and why.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct UserRefusal {
    pub(crate) unit: UnitId,
    /// The refusing write, among the unit's (`None`: the request as a whole was invalid).
    pub(crate) action: Option<usize>,
    pub(crate) code: String,
    pub(crate) message: Option<String>,
    /// The item as it stood, where the write asked for it.
    pub(crate) item: Option<Item>,
}

/// How a commit was answered.
#[derive(Debug)]
pub(crate) enum CommitAnswer {
    /// It landed (or an earlier attempt of it did): the writes and the rows, together.
    Done,
    /// A lease row is no longer this owner's: nothing was applied. `rows`: which of the
    /// request's rows (their places; every one when empty).
    Lost { rows: Vec<usize> },
    /// Nothing was applied, and nothing refused for good (a conflict, throttling).
    NotApplied,
    /// A unit's own write refused: nothing was applied.
    UserRefused(UserRefusal),
    /// The request of several units was refused as a whole, naming none (a request-level
    /// validation): nothing was applied; committed one at a time, the unit at fault shows.
    Split,
    /// No answer to trust (transport, a timeout, an error of DynamoDB's): it may have landed.
    Failed(LeaseError),
}

//! Exactly once: the seam through which a subscription reaches the transactions of its lease
//! store. A store that can commit a handler's DynamoDB writes with its lease rows answers
//! [`LeaseStore::transactions`](crate::LeaseStore::transactions) with [`Transactions`]; every
//! other store answers `None`, and an exactly-once subscription on it fails the start.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use super::dynamo::commit::{CommitAnswer, CommitRequest};

/// What a commit's answer is awaited as.
pub(crate) type CommitFuture<'a> = Pin<Box<dyn Future<Output = CommitAnswer> + Send + 'a>>;

/// A store that commits a unit's writes with its lease rows in one transaction.
pub(crate) trait CommitStore: Send + Sync + std::fmt::Debug {
    fn commit<'a>(&'a self, request: &'a CommitRequest<'a>) -> CommitFuture<'a>;
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
}

impl CommitStore for super::DynamoLeaseStore {
    fn commit<'a>(&'a self, request: &'a CommitRequest<'a>) -> CommitFuture<'a> {
        Box::pin(super::DynamoLeaseStore::commit(self, request))
    }
}

//! Exactly once into DynamoDB, its pure part: what a unit of work weighs in a transaction, which
//! settled units one commit takes ([`fold`]), the tokens a commit is sent under, and what the
//! reasons of a cancelled transaction mean ([`outcome`]).
//!
//! A *unit* commits as a whole: one delivery, or one batch of a batch handler. Its DynamoDB
//! writes stay with the driver; the machines see only their weight ([`UnitSize`]), so the
//! decisions here run the same in the simulation as live.
// The transaction's limits and answers are read by the DynamoDB store and the staging of
// writes, both of feature `dynamodb-lease`; the machines and the simulation use the rest.
#![cfg_attr(
    not(feature = "dynamodb-lease"),
    allow(
        dead_code,
        reason = "the DynamoDB side of exactly once is built with feature dynamodb-lease"
    )
)]

pub(crate) mod fold;
pub(crate) mod outcome;

use std::sync::Arc;

/// DynamoDB's limits on one `TransactWriteItems` request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Limits {
    /// Actions in one request (the handler's writes and one update per lease row).
    pub(crate) actions: usize,
    /// The request's items, all told, in bytes.
    pub(crate) bytes: usize,
}

impl Limits {
    /// DynamoDB's: 100 actions, 4 MB.
    pub(crate) const DYNAMODB: Self = Self {
        actions: 100,
        bytes: 4_000_000,
    };

    /// What a lease row's update adds to a request, in bytes: an upper bound of the key, the
    /// condition, the update expression and their values (a checkpoint, a token, the owner).
    pub(crate) const ROW_BYTES: usize = 1_024;
}

/// How much a shard holds of staged writes not yet committed before it reads no further (its
/// read-ahead window counts as full): what a slow or refused commit can make a shard hold.
pub(crate) const STAGED_BYTES_CAP: usize = 16 * 1024 * 1024;

/// A unit of work, by the number the driver gave it: unique within a subscription.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct UnitId(pub(crate) u64);

/// The item an action touches, by hashes the driver takes of its table's name and its key.
/// `key: None` stands for every item of the table: a put whose key the driver cannot tell (the
/// table's key schema unknown) counts as touching all of them, which splits more and never
/// joins two actions on one item into one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct ItemRef {
    pub(crate) table: u64,
    pub(crate) key: Option<u64>,
}

impl ItemRef {
    /// Whether two actions, on these items, may not be in one request.
    pub(crate) fn clashes(&self, other: &Self) -> bool {
        self.table == other.table
            && match (self.key, other.key) {
                (Some(mine), Some(theirs)) => mine == theirs,
                _ => true,
            }
    }
}

/// What a unit's staged writes weigh in a transaction: their number, their size (an upper
/// bound), and the items they touch.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct UnitSize {
    pub(crate) actions: usize,
    pub(crate) bytes: usize,
    pub(crate) items: Arc<[ItemRef]>,
}

impl UnitSize {
    /// A unit that stages nothing: its commit only moves the checkpoint.
    pub(crate) fn empty() -> Self {
        Self::default()
    }

    /// Whether any item of this unit clashes with one of `other`'s.
    pub(crate) fn clashes_with(&self, other: &Self) -> bool {
        self.items
            .iter()
            .any(|mine| other.items.iter().any(|theirs| mine.clashes(theirs)))
    }
}

/// The token of one commit of one lease: the lease's nonce (drawn when it was taken) and the
/// commit's number under it. The row keeps [`base`](Self::base); each request is sent as
/// [`request`](Self::request) of an attempt, which changes whenever the request does, so
/// DynamoDB never sees one token with two different requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct CommitToken {
    pub(crate) nonce: u64,
    pub(crate) number: u32,
}

impl CommitToken {
    /// What the row records: 24 hexadecimal digits.
    pub(crate) fn base(&self) -> String {
        format!("{:016x}{:08x}", self.nonce, self.number)
    }

    /// The `ClientRequestToken` of attempt `attempt`: 27 characters (DynamoDB allows 36).
    pub(crate) fn request(&self, attempt: u8) -> String {
        format!("{}-{attempt:02x}", self.base())
    }

    /// The token of the next commit under the same lease.
    #[must_use]
    pub(crate) fn next(&self) -> Self {
        Self {
            number: self.number.wrapping_add(1),
            ..*self
        }
    }
}

#[cfg(test)]
mod tests;

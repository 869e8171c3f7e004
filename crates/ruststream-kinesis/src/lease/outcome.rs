//! How an exactly-once commit ends for the handler: refused by one of its own writes
//! ([`CommitRefused`], which the record's next delivery carries), and, in process, how each
//! handling ended ([`HandlingOutcome`]).

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;

/// A commit refused by one of its own writes (a condition check that failed, an invalid
/// write): nothing of it was applied. The record is delivered again, and its handler reads this
/// off [`StagedWrites::refused`](crate::StagedWrites::refused); the registration's failure policy (retry, dead letter)
/// decides what follows.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
#[error(
    "stream {stream:?}, shard {shard}: the commit of sequence number {sequence} was refused by \
     {code}{}{}; nothing of it was applied",
    table.as_ref().map(|table| format!(" on table {table:?}")).unwrap_or_default(),
    message.as_ref().map(|message| format!(" ({message})")).unwrap_or_default()
)]
pub struct CommitRefused {
    /// The stream.
    pub stream: String,
    /// The shard.
    pub shard: String,
    /// The record's sequence number.
    pub sequence: String,
    /// The refusing write, by its place among the writes the handling staged (`None`: the
    /// request as a whole was invalid).
    pub action: Option<usize>,
    /// The table of the refusing write.
    pub table: Option<String>,
    /// DynamoDB's code (`ConditionalCheckFailed`, `ValidationError`, ...).
    pub code: String,
    /// DynamoDB's message.
    pub message: Option<String>,
    /// The item as it stood, where the write asked for it
    /// (`ReturnValuesOnConditionCheckFailure`).
    pub item: Option<HashMap<String, AttributeValue>>,
}

/// How one handling of an exactly-once subscription ended, in process
/// ([`InProcessHandling::outcome`](crate::InProcessHandling::outcome)).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum HandlingOutcome {
    /// Its writes wait for their commit's answer.
    Pending,
    /// Its writes committed with the checkpoint that passes its records: applied once, and its
    /// records are never handled again.
    Committed,
    /// Acknowledged with nothing staged: its checkpoint moves with the shard's next commit.
    Acknowledged,
    /// Its commit was refused by one of its own writes: nothing of it was applied, and its
    /// records come again carrying why ([`StagedWrites::refused`](crate::StagedWrites::refused)).
    Refused(Box<CommitRefused>),
    /// Handed back (`retry`, or a record of its batch handed back or withheld): nothing it
    /// staged commits, and its records come again.
    HandedBack,
    /// Dropped (`nack(false)`, a dead letter, a batch body's `Err`): the checkpoint passes its
    /// records, and nothing it staged commits.
    Dropped,
    /// Its shard stopped here before its commit (the lease was lost or handed over, the reader
    /// ended, a seek moved past its records): nothing of it was applied, and whoever reads the
    /// shard next delivers its records again.
    Abandoned,
}

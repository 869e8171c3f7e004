//! Where a `GetRecords` call reads from. A data type of its own so the shard machine, which is
//! pure, can hold one without importing the calls that hand it out ([`super::calls`]).

/// A shard iterator: where the next `GetRecords` of a shard reads from.
///
/// Today every iterator is the service's: an opaque string that Kinesis hands out
/// (`GetShardIterator`, or `NextShardIterator` in a `GetRecords` answer) and that expires after
/// five minutes. It is an enum so that a Kinesis of another kind (the in-process one planned in
/// `docs/design/in-process-on-the-real-reader.md`) can carry its own position without a string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ShardIterator {
    /// An iterator the Kinesis service handed out.
    Service(String),
}

impl ShardIterator {
    /// The service's iterator `text`.
    pub(crate) fn service(text: impl Into<String>) -> Self {
        Self::Service(text.into())
    }
}

impl std::fmt::Display for ShardIterator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Service(text) => f.write_str(text),
        }
    }
}

//! The key of a lease row: `stream:shard`, and the bare shard id of rows an earlier version wrote.

use std::fmt;
use std::sync::Arc;

/// Names one shard of one stream in a lease table.
///
/// Shard ids repeat across streams (every stream has a `shardId-000000000000`), so a row is keyed
/// by both: the key renders as `stream:shard`.
///
/// # Examples
///
/// ```
/// use ruststream_kinesis::LeaseKey;
///
/// let key = LeaseKey::new("orders", "shardId-000000000001");
/// assert_eq!(key.to_string(), "orders:shardId-000000000001");
/// assert_eq!(key.stream(), "orders");
/// assert_eq!(key.shard(), "shardId-000000000001");
/// ```
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LeaseKey {
    stream: Arc<str>,
    shard: Arc<str>,
}

impl LeaseKey {
    /// The key of `shard` of `stream`.
    #[must_use]
    pub fn new(stream: impl Into<Arc<str>>, shard: impl Into<Arc<str>>) -> Self {
        Self {
            stream: stream.into(),
            shard: shard.into(),
        }
    }

    /// The stream's name.
    #[must_use]
    pub fn stream(&self) -> &str {
        &self.stream
    }

    /// The shard's id.
    #[must_use]
    pub fn shard(&self) -> &str {
        &self.shard
    }

    /// The row key a table stores: `stream:shard`.
    #[must_use]
    pub fn row_key(&self) -> String {
        self.to_string()
    }
}

impl fmt::Display for LeaseKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.stream, self.shard)
    }
}

impl fmt::Debug for LeaseKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "LeaseKey({self})")
    }
}

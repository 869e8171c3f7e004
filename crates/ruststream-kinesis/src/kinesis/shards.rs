//! A stream's shards as a listing shows them: data the pure coordinator decides on and the
//! Kinesis boundary ([`api`](super::api)) fills, in a module of its own so the coordinator
//! imports nothing that does I/O.

use std::sync::Arc;

/// One shard as a listing shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ShardInfo {
    pub(crate) id: Arc<str>,
    pub(crate) parents: Vec<Arc<str>>,
    /// Whether the shard is closed (it has an ending sequence number).
    pub(crate) closed: bool,
}

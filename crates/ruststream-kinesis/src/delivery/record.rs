//! A record as a reader read and decoded it from a shard: what a delivery carries, and what a
//! retry hands out again.

use std::sync::Arc;

use bytes::Bytes;
use ruststream::HeaderMap;

/// What a delivery carries of its record: enough to hand it out again after a retry.
#[derive(Debug, Clone)]
pub(crate) struct Record {
    pub(crate) payload: Bytes,
    pub(crate) headers: HeaderMap,
    pub(crate) partition_key: String,
    pub(crate) sequence: Arc<str>,
    pub(crate) arrived_ms: Option<i64>,
}

//! The live subscription, on tokio: its state ([`subscription`]); the driver of its beat when its
//! leases are kept alive by beat ([`beat`]), and the chain it hands on ([`chain`]); the driver of
//! the pure [`coordinator`](crate::coordinator) machines ([`coordinator`]: the listing rounds,
//! the handover poll, the takes and the seeks); what the readers and the seeks tell that driver
//! ([`heard`]); what an exactly-once subscription needs to start ([`exactly_once`]); and the
//! tasks of each held shard ([`reader`]: they execute what the [`shard`](crate::shard) machine
//! asks).

pub(crate) mod beat;
pub(crate) mod chain;
pub(crate) mod coordinator;
pub(crate) mod exactly_once;
pub(crate) mod heard;
#[cfg(feature = "dynamodb-lease")]
pub(crate) mod joint;
pub(crate) mod pause;
pub(crate) mod reader;
pub(crate) mod subscription;
pub(crate) mod upkeep;

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Locks `mutex`, whatever a panicking holder left.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

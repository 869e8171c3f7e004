//! A reader's tap on one in-process shard: how it hears of writes, and how `TestApp`'s harness
//! counts the work a write gives it, so a test's publish returns once every handler it reached
//! settled.
//!
//! The harness counts deliveries (`Coordinator::enqueued` once each, `consumed` once when it
//! settles). A write is counted when it is made, for every reader of its shard (synchronously,
//! before the publish or inject returns), as a unit the reader owes; the delivery that reads the
//! record takes the unit over (one more is counted for each further user record of an
//! aggregate). A unit no delivery takes (a record a seek skipped, or one settled before a
//! resume) is let go once the reader has nothing left to do ([`Tap::release_if_read_to`]), and
//! every unit when the reader ends.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use ruststream::testing::Coordinator;
use tokio::sync::Notify;

use super::InProcessKinesis;

/// One reader's tap on its shard.
#[derive(Debug)]
pub(crate) struct Tap {
    pub(super) kinesis: Arc<InProcessKinesis>,
    pub(super) stream: u32,
    pub(super) shard: u32,
    /// Units counted in advance and not yet taken over by a delivery.
    owed: AtomicUsize,
    /// Wakes the reader: a record was written to its shard.
    pub(crate) news: Notify,
    /// The harness, when a `TestApp` runs: snapshotted when the reader started.
    coordinator: Option<Coordinator>,
    closed: AtomicBool,
}

impl Tap {
    pub(super) fn new(
        kinesis: Arc<InProcessKinesis>,
        (stream, shard): (u32, u32),
        harness: &OnceLock<Coordinator>,
    ) -> Self {
        Self {
            kinesis,
            stream,
            shard,
            owed: AtomicUsize::new(0),
            news: Notify::new(),
            coordinator: harness.get().cloned(),
            closed: AtomicBool::new(false),
        }
    }

    /// `n` more units owed, counted now (under the streams' lock, where the write is made).
    pub(super) fn owe(&self, n: usize) {
        if n == 0 || self.closed.load(Ordering::Acquire) {
            return;
        }
        if let Some(coordinator) = &self.coordinator {
            self.owed.fetch_add(n, Ordering::AcqRel);
            for _ in 0..n {
                coordinator.enqueued();
            }
        }
    }

    /// A record was written to the shard: one unit owed, and the reader woken (the wake is kept
    /// when it does not wait yet).
    pub(super) fn written(&self) {
        self.owe(1);
        self.news.notify_one();
    }

    /// A delivery is handed out: it takes an owed unit over, or is counted now.
    pub(crate) fn delivering(&self) {
        let Some(coordinator) = &self.coordinator else {
            return;
        };
        let took = self
            .owed
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
            .is_ok();
        if !took {
            coordinator.enqueued();
        }
    }

    /// A delivery settled, was forgotten or handed back: its unit is let go.
    pub(crate) fn settled(&self) {
        if let Some(coordinator) = &self.coordinator {
            coordinator.consumed();
        }
    }

    /// A record comes back now (handed back with no delay, or its delay ran out): one unit
    /// counted for its redelivery, before the delivery it was lets its own go.
    pub(crate) fn coming_back(&self) {
        self.owe(1);
    }

    /// The harness, for a redelivery's timer.
    pub(crate) fn coordinator(&self) -> Option<&Coordinator> {
        self.coordinator.as_ref()
    }

    /// A seek moved the reader to `position`: it owes exactly the records from there on.
    pub(crate) fn moved_to(&self, position: u64) {
        let Some(coordinator) = &self.coordinator else {
            return;
        };
        self.kinesis.len_locked(self, |len| {
            let owed = usize::try_from(len.saturating_sub(position)).unwrap_or(usize::MAX);
            let before = self.owed.swap(owed, Ordering::AcqRel);
            for _ in before..owed {
                coordinator.enqueued();
            }
            for _ in owed..before {
                coordinator.consumed();
            }
        });
    }

    /// The reader has nothing to do but wait for news, and read its shard to `position`: if no
    /// record lies past it (checked under the streams' lock, so a write is either seen here or
    /// counted after), every unit still owed is let go.
    pub(crate) fn release_if_read_to(&self, position: u64) {
        if self.coordinator.is_none() {
            return;
        }
        self.kinesis.len_locked(self, |len| {
            if len <= position {
                self.release();
            }
        });
    }

    fn release(&self) {
        let owed = self.owed.swap(0, Ordering::AcqRel);
        if let Some(coordinator) = &self.coordinator {
            for _ in 0..owed {
                coordinator.consumed();
            }
        }
    }

    /// The reader ended: nothing it owes is delivered any more.
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.kinesis.len_locked(self, |_| self.release());
    }
}

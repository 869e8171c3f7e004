//! A reader's tap on one in-process shard: how it hears of writes, and how `TestApp`'s harness
//! counts the work a write gives it, so a test's publish returns once every handler it reached
//! settled.
//!
//! The harness counts deliveries (`Coordinator::enqueued` once each, `consumed` once when it
//! settles). A write is counted when it is made, for every reader of its shard (synchronously,
//! before the publish or inject returns), as a unit the reader owes; the delivery of the
//! record's first user record takes the unit over (every other delivery is counted when it is
//! handed out). A record handed back is counted when it comes back (at once, or once its delay
//! ran out on the harness's timers), in a count of its own, which only its redelivery takes:
//! a redelivery never takes a written record's unit, nor a read a redelivery's. A unit no
//! delivery takes (a record a seek skipped, one settled before a resume) is let go once the
//! reader has nothing left to do ([`Tap::release_if_read_to`]), and every unit when the reader
//! ends or its tap is dropped.
//!
//! Every count is made before the unit is recorded and every unit is taken away before it is
//! let go, so the harness never counts less than the work there is, even for a moment; and a
//! unit is added or let go only under the streams' lock, so none is added to a closed tap.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use ruststream::testing::Coordinator;
use tokio::sync::Notify;

use super::InProcessKinesis;

/// One reader's tap on its shard.
#[derive(Debug)]
pub(crate) struct Tap {
    kinesis: Arc<InProcessKinesis>,
    pub(super) stream: u32,
    pub(super) shard: u32,
    /// Units counted for written records and not yet taken over by a delivery.
    owed: AtomicUsize,
    /// Units counted for records coming back and not yet taken over by their redelivery.
    owed_back: AtomicUsize,
    /// Wakes the reader: a record was written to its shard.
    news: Notify,
    /// The harness, when a `TestApp` runs: the reader's connection's, when it started.
    coordinator: Option<Coordinator>,
    closed: AtomicBool,
}

/// What a delivery handed out is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Delivering {
    /// The first user record of a record read (a plain record is its own first).
    FirstOfRecord,
    /// Another user record of an aggregate read.
    RestOfRecord,
    /// A record handed back, delivered again.
    Again,
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
            owed_back: AtomicUsize::new(0),
            news: Notify::new(),
            coordinator: harness.get().cloned(),
            closed: AtomicBool::new(false),
        }
    }

    /// `n` more units in `pool`, counted first. Called under the streams' lock.
    fn add(&self, pool: &AtomicUsize, n: usize) {
        if n == 0 || self.closed.load(Ordering::Acquire) {
            return;
        }
        if let Some(coordinator) = &self.coordinator {
            for _ in 0..n {
                coordinator.enqueued();
            }
            pool.fetch_add(n, Ordering::AcqRel);
        }
    }

    /// `n` units owed for records written. Called under the streams' lock.
    pub(super) fn owe(&self, n: usize) {
        self.add(&self.owed, n);
    }

    /// What wakes the reader: a record was written to its shard.
    pub(crate) fn news(&self) -> &Notify {
        &self.news
    }

    /// A record was written to the shard (under the streams' lock): one unit owed, and the
    /// reader woken (the wake is kept when it does not wait yet).
    pub(super) fn written(&self) {
        self.owe(1);
        self.news.notify_one();
    }

    /// A delivery is handed out: a first user record takes a written record's unit, a
    /// redelivery a unit of a record coming back, when there is one; else it is counted now.
    pub(crate) fn delivering(&self, what: Delivering) {
        let Some(coordinator) = &self.coordinator else {
            return;
        };
        let pool = match what {
            Delivering::FirstOfRecord => Some(&self.owed),
            Delivering::Again => Some(&self.owed_back),
            Delivering::RestOfRecord => None,
        };
        let took = pool.is_some_and(|pool| {
            pool.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
                .is_ok()
        });
        if !took {
            coordinator.enqueued();
        }
    }

    /// A delivery settled, was forgotten or was handed back: its unit is let go.
    pub(crate) fn settled(&self) {
        if let Some(coordinator) = &self.coordinator {
            coordinator.consumed();
        }
    }

    /// A record comes back now (handed back with no delay, or its delay ran out): one unit
    /// counted for its redelivery, before the delivery it was lets its own go.
    pub(crate) fn coming_back(&self) {
        self.kinesis
            .len_locked(self, |_| self.add(&self.owed_back, 1));
    }

    /// The harness, for a redelivery's timer.
    pub(crate) fn coordinator(&self) -> Option<&Coordinator> {
        self.coordinator.as_ref()
    }

    /// A seek moved the reader to `position`: it owes exactly the records from there on.
    pub(crate) fn moved_to(&self, position: u64) {
        if self.coordinator.is_none() {
            return;
        }
        self.kinesis.len_locked(self, |len| {
            let owed = usize::try_from(len.saturating_sub(position)).unwrap_or(usize::MAX);
            let before = self.owed.load(Ordering::Acquire);
            if owed > before {
                self.add(&self.owed, owed - before);
            } else {
                self.let_go(&self.owed, before - owed);
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

    /// Lets go of `n` units of `pool` (as many as it holds, at most): taken away first.
    fn let_go(&self, pool: &AtomicUsize, n: usize) {
        let mut taken = 0;
        let _ = pool.fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| {
            taken = n.min(held);
            Some(held - taken)
        });
        if let Some(coordinator) = &self.coordinator {
            for _ in 0..taken {
                coordinator.consumed();
            }
        }
    }

    /// Lets go of every unit.
    fn release(&self) {
        self.let_go(&self.owed, usize::MAX);
        self.let_go(&self.owed_back, usize::MAX);
    }

    /// The reader ended: nothing it owes is delivered any more, and nothing is added.
    pub(crate) fn close(&self) {
        self.kinesis.len_locked(self, |_| {
            self.closed.store(true, Ordering::Release);
            self.release();
        });
    }
}

/// A tap dropped without being closed (its reader's tasks were torn down) owes nothing.
impl Drop for Tap {
    fn drop(&mut self) {
        self.release();
    }
}

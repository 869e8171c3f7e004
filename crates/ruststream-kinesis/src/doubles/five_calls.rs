//! A lease store of the five required calls alone, around a [`MemoryLeaseStore`]: every
//! provided call runs as the trait writes it (no notices, no `take_over`, no listing), as a
//! store written against the five calls does.

use std::time::Duration;

use crate::{LeaseFuture, LeaseKey, LeaseState, LeaseStore, MemoryLeaseStore};

/// A store of the five required calls only: the provided ones run as the trait writes them.
#[derive(Debug)]
pub(crate) struct FiveCalls(pub(crate) MemoryLeaseStore);

impl LeaseStore for FiveCalls {
    fn acquire<'a>(
        &'a self,
        key: &'a LeaseKey,
        owner: &'a str,
        lease: Duration,
    ) -> LeaseFuture<'a, LeaseState> {
        self.0.acquire(key, owner, lease)
    }

    fn renew<'a>(
        &'a self,
        key: &'a LeaseKey,
        owner: &'a str,
        lease: Duration,
    ) -> LeaseFuture<'a, LeaseState> {
        self.0.renew(key, owner, lease)
    }

    fn checkpoint<'a>(
        &'a self,
        key: &'a LeaseKey,
        owner: &'a str,
        checkpoint: &'a str,
    ) -> LeaseFuture<'a, ()> {
        self.0.checkpoint(key, owner, checkpoint)
    }

    fn read<'a>(&'a self, key: &'a LeaseKey) -> LeaseFuture<'a, Option<LeaseState>> {
        self.0.read(key)
    }

    fn release<'a>(&'a self, key: &'a LeaseKey, owner: &'a str) -> LeaseFuture<'a, ()> {
        self.0.release(key, owner)
    }
}

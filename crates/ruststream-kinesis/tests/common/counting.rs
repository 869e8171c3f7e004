//! A lease store that counts the calls it forwards to a `DynamoLeaseStore`, by kind: what the
//! coordination costs, as the live lease tests measure it.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use ruststream_kinesis::{DynamoLeaseStore, LeaseFuture, LeaseKey, LeaseState, LeaseStore, Notice};

/// A store that counts the calls it forwards, by kind: what the handover poll costs.
#[derive(Debug)]
pub struct Counting {
    inner: DynamoLeaseStore,
    calls: std::sync::Mutex<HashMap<&'static str, u64>>,
}

impl Counting {
    pub fn new(inner: DynamoLeaseStore) -> Arc<Self> {
        Arc::new(Self {
            inner,
            calls: std::sync::Mutex::default(),
        })
    }

    fn count(&self, call: &'static str) {
        *self.calls.lock().unwrap().entry(call).or_default() += 1;
    }

    /// The calls so far, by kind.
    pub fn snapshot(&self) -> HashMap<&'static str, u64> {
        self.calls.lock().unwrap().clone()
    }
}

impl LeaseStore for Counting {
    fn acquire<'a>(
        &'a self,
        key: &'a LeaseKey,
        owner: &'a str,
        lease: Duration,
    ) -> LeaseFuture<'a, LeaseState> {
        self.count("acquire");
        self.inner.acquire(key, owner, lease)
    }

    fn acquire_from<'a>(
        &'a self,
        key: &'a LeaseKey,
        owner: &'a str,
        lease: Duration,
        start: &'a str,
    ) -> LeaseFuture<'a, LeaseState> {
        self.count("acquire");
        self.inner.acquire_from(key, owner, lease, start)
    }

    fn renew<'a>(
        &'a self,
        key: &'a LeaseKey,
        owner: &'a str,
        lease: Duration,
    ) -> LeaseFuture<'a, LeaseState> {
        self.count("renew");
        self.inner.renew(key, owner, lease)
    }

    fn checkpoint<'a>(
        &'a self,
        key: &'a LeaseKey,
        owner: &'a str,
        checkpoint: &'a str,
    ) -> LeaseFuture<'a, ()> {
        self.count("checkpoint");
        self.inner.checkpoint(key, owner, checkpoint)
    }

    fn checkpoint_and_renew<'a>(
        &'a self,
        key: &'a LeaseKey,
        owner: &'a str,
        checkpoint: &'a str,
        lease: Duration,
    ) -> LeaseFuture<'a, LeaseState> {
        self.count("checkpoint");
        self.inner
            .checkpoint_and_renew(key, owner, checkpoint, lease)
    }

    fn read<'a>(&'a self, key: &'a LeaseKey) -> LeaseFuture<'a, Option<LeaseState>> {
        self.count("read");
        self.inner.read(key)
    }

    fn release<'a>(&'a self, key: &'a LeaseKey, owner: &'a str) -> LeaseFuture<'a, ()> {
        self.count("release");
        self.inner.release(key, owner)
    }

    fn list<'a>(&'a self, stream: &'a str) -> LeaseFuture<'a, Option<Vec<(LeaseKey, LeaseState)>>> {
        self.count("list");
        self.inner.list(stream)
    }

    // Counted as a `list`: the same call, read behind.
    fn list_eventually<'a>(
        &'a self,
        stream: &'a str,
    ) -> LeaseFuture<'a, Option<Vec<(LeaseKey, LeaseState)>>> {
        self.count("list");
        self.inner.list_eventually(stream)
    }

    fn delete<'a>(&'a self, key: &'a LeaseKey, counter: u64) -> LeaseFuture<'a, bool> {
        self.count("delete");
        self.inner.delete(key, counter)
    }

    fn notice<'a>(&'a self, stream: &'a str) -> LeaseFuture<'a, Option<Notice>> {
        self.count("notice");
        self.inner.notice(stream)
    }

    // Counted as a `notice`: the same read, behind.
    fn notice_eventually<'a>(&'a self, stream: &'a str) -> LeaseFuture<'a, Option<Notice>> {
        self.count("notice");
        self.inner.notice_eventually(stream)
    }

    fn notice_head<'a>(&'a self, stream: &'a str) -> LeaseFuture<'a, Option<Notice>> {
        self.count("notice_head");
        self.inner.notice_head(stream)
    }

    fn keeps_notice_head_apart(&self) -> bool {
        self.inner.keeps_notice_head_apart()
    }

    fn polls_read_behind(&self) -> bool {
        self.inner.polls_read_behind()
    }

    fn keep_layout<'a>(&'a self, stream: &'a str) -> LeaseFuture<'a, ()> {
        self.count("keep_layout");
        self.inner.keep_layout(stream)
    }

    fn beat<'a>(
        &'a self,
        stream: &'a str,
        owner: &'a str,
        until_ms: u64,
        forget: &'a [String],
    ) -> LeaseFuture<'a, ()> {
        self.count("beat");
        self.inner.beat(stream, owner, until_ms, forget)
    }

    fn leave<'a>(&'a self, stream: &'a str, owner: &'a str) -> LeaseFuture<'a, ()> {
        self.count("leave");
        self.inner.leave(stream, owner)
    }

    fn leave_beat<'a>(
        &'a self,
        stream: &'a str,
        owner: &'a str,
        until_ms: u64,
    ) -> LeaseFuture<'a, ()> {
        self.count("leave");
        self.inner.leave_beat(stream, owner, until_ms)
    }

    fn ask_handoff<'a>(
        &'a self,
        key: &'a LeaseKey,
        holder: &'a str,
        counter: u64,
        to: &'a str,
        asked_ms: u64,
    ) -> LeaseFuture<'a, bool> {
        self.count("ask_handoff");
        self.inner.ask_handoff(key, holder, counter, to, asked_ms)
    }

    fn mark_asked<'a>(&'a self, stream: &'a str, holders: &'a [String]) -> LeaseFuture<'a, ()> {
        self.count("mark_asked");
        self.inner.mark_asked(stream, holders)
    }

    fn withdraw_handoff<'a>(&'a self, key: &'a LeaseKey, to: &'a str) -> LeaseFuture<'a, bool> {
        self.count("withdraw_handoff");
        self.inner.withdraw_handoff(key, to)
    }

    fn take_over<'a>(
        &'a self,
        key: &'a LeaseKey,
        owner: &'a str,
        lease: Duration,
        start: &'a str,
        holder: &'a str,
        counter: u64,
    ) -> LeaseFuture<'a, LeaseState> {
        self.count("take_over");
        self.inner
            .take_over(key, owner, lease, start, holder, counter)
    }

    fn announce<'a>(
        &'a self,
        stream: &'a str,
        owner: &'a str,
        record: &'a str,
        forget: &'a [String],
    ) -> LeaseFuture<'a, ()> {
        self.count("announce");
        self.inner.announce(stream, owner, record, forget)
    }

    fn keeps_leases_by_beat(&self) -> bool {
        self.inner.keeps_leases_by_beat()
    }

    fn table_name(&self) -> Option<&str> {
        self.inner.table_name()
    }

    fn claim<'a>(&'a self, stream: &'a str) -> LeaseFuture<'a, ()> {
        self.inner.claim(stream)
    }

    fn hand_over<'a>(
        &'a self,
        key: &'a LeaseKey,
        owner: &'a str,
        to: &'a str,
        checkpoint: Option<&'a str>,
        lease: Duration,
    ) -> LeaseFuture<'a, ()> {
        self.count("hand_over");
        self.inner.hand_over(key, owner, to, checkpoint, lease)
    }
}

/// How many calls of kind `call` were made between `before` and `after`.
pub fn delta(
    after: &HashMap<&'static str, u64>,
    before: &HashMap<&'static str, u64>,
    call: &str,
) -> u64 {
    after.get(call).copied().unwrap_or(0) - before.get(call).copied().unwrap_or(0)
}

//! A lease store for tests: a [`MemoryLeaseStore`] that records every call, can slow its writes
//! down, and can fail renewals as an unreachable store does.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::{LeaseKey, LeaseState, LeaseStore, MemoryLeaseStore};

/// One call a [`Recording`] store saw: which, by whom, when it started and ended.
#[derive(Debug, Clone)]
pub(crate) struct Call {
    pub(crate) operation: &'static str,
    pub(crate) owner: String,
    pub(crate) started: Instant,
    pub(crate) ended: Instant,
    /// Whether the call succeeded.
    pub(crate) ok: bool,
}

/// A [`MemoryLeaseStore`] that records every call, can slow its writes down, and can fail
/// renewals (and checkpoints that renew) as a store that cannot be reached does.
#[derive(Debug, Default)]
pub(crate) struct Recording {
    inner: MemoryLeaseStore,
    pub(crate) calls: Mutex<Vec<Call>>,
    pub(crate) write_delay: Mutex<Duration>,
    pub(crate) fail_renewals: std::sync::atomic::AtomicBool,
    /// Takes fail too, as a store that cannot be reached fails them.
    pub(crate) fail_takes: std::sync::atomic::AtomicBool,
    /// Before the next take, another instance marks the row `SHARD_SKIPPED` (it saw the shard
    /// closed and never read), as if its mark landed between this round's read and its take.
    pub(crate) mark_before_take: std::sync::atomic::AtomicBool,
    /// Says it keeps the notice's head apart (its reads are the memory store's, whole).
    pub(crate) head_apart: std::sync::atomic::AtomicBool,
    /// Whole reads of the notice fail, as a read IAM denies fails.
    pub(crate) fail_notice: std::sync::atomic::AtomicBool,
    /// Writes of the layout fail.
    pub(crate) fail_layout: std::sync::atomic::AtomicBool,
    /// The writes of the layout sent.
    pub(crate) layout_writes: std::sync::atomic::AtomicUsize,
}

impl Recording {
    pub(crate) fn calls_of(&self, owner: &str) -> Vec<Call> {
        self.calls
            .lock()
            .unwrap()
            .iter()
            .filter(|call| call.owner == owner)
            .cloned()
            .collect()
    }

    async fn timed<T>(
        &self,
        operation: &'static str,
        owner: &str,
        write: bool,
        call: impl std::future::Future<Output = Result<T, crate::LeaseError>>,
    ) -> Result<T, crate::LeaseError> {
        let started = Instant::now();
        let delay = *self.write_delay.lock().unwrap();
        if write && !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        let result = call.await;
        self.calls.lock().unwrap().push(Call {
            operation,
            owner: owner.to_owned(),
            started,
            ended: Instant::now(),
            ok: result.is_ok(),
        });
        result
    }

    fn unreachable(&self, key: &LeaseKey, operation: &'static str) -> Option<crate::LeaseError> {
        let failing = if operation == "acquire" {
            &self.fail_takes
        } else {
            &self.fail_renewals
        };
        failing
            .load(std::sync::atomic::Ordering::SeqCst)
            .then(|| crate::LeaseError::Store {
                key: key.clone(),
                operation,
                message: "unreachable (test)".to_owned(),
            })
    }
}

impl LeaseStore for Recording {
    fn acquire<'a>(
        &'a self,
        key: &'a LeaseKey,
        owner: &'a str,
        lease: Duration,
    ) -> crate::LeaseFuture<'a, LeaseState> {
        Box::pin(self.timed(
            "acquire",
            owner,
            true,
            self.inner.acquire(key, owner, lease),
        ))
    }

    fn acquire_from<'a>(
        &'a self,
        key: &'a LeaseKey,
        owner: &'a str,
        lease: Duration,
        start: &'a str,
    ) -> crate::LeaseFuture<'a, LeaseState> {
        Box::pin(self.timed("acquire", owner, true, async move {
            if self
                .mark_before_take
                .swap(false, std::sync::atomic::Ordering::AcqRel)
            {
                self.inner
                    .acquire_from(key, "another", lease, crate::SHARD_SKIPPED)
                    .await?;
                self.inner.release(key, "another").await?;
            }
            match self.unreachable(key, "acquire") {
                Some(err) => Err(err),
                None => self.inner.acquire_from(key, owner, lease, start).await,
            }
        }))
    }

    fn renew<'a>(
        &'a self,
        key: &'a LeaseKey,
        owner: &'a str,
        lease: Duration,
    ) -> crate::LeaseFuture<'a, LeaseState> {
        Box::pin(self.timed("renew", owner, true, async move {
            match self.unreachable(key, "renew") {
                Some(err) => Err(err),
                None => self.inner.renew(key, owner, lease).await,
            }
        }))
    }

    fn checkpoint<'a>(
        &'a self,
        key: &'a LeaseKey,
        owner: &'a str,
        checkpoint: &'a str,
    ) -> crate::LeaseFuture<'a, ()> {
        Box::pin(self.timed(
            "checkpoint",
            owner,
            true,
            self.inner.checkpoint(key, owner, checkpoint),
        ))
    }

    fn checkpoint_and_renew<'a>(
        &'a self,
        key: &'a LeaseKey,
        owner: &'a str,
        checkpoint: &'a str,
        lease: Duration,
    ) -> crate::LeaseFuture<'a, LeaseState> {
        Box::pin(self.timed("checkpoint_and_renew", owner, true, async move {
            match self.unreachable(key, "checkpoint") {
                Some(err) => Err(err),
                None => {
                    self.inner
                        .checkpoint_and_renew(key, owner, checkpoint, lease)
                        .await
                }
            }
        }))
    }

    fn checkpoint_and_renew_behind<'a>(
        &'a self,
        key: &'a LeaseKey,
        owner: &'a str,
        checkpoint: &'a str,
        behind_ms: Option<u64>,
        lease: Duration,
    ) -> crate::LeaseFuture<'a, LeaseState> {
        Box::pin(self.timed("checkpoint_and_renew", owner, true, async move {
            match self.unreachable(key, "checkpoint") {
                Some(err) => Err(err),
                None => {
                    self.inner
                        .checkpoint_and_renew_behind(key, owner, checkpoint, behind_ms, lease)
                        .await
                }
            }
        }))
    }

    fn read<'a>(&'a self, key: &'a LeaseKey) -> crate::LeaseFuture<'a, Option<LeaseState>> {
        Box::pin(self.inner.read(key))
    }

    fn release<'a>(&'a self, key: &'a LeaseKey, owner: &'a str) -> crate::LeaseFuture<'a, ()> {
        Box::pin(self.timed("release", owner, true, self.inner.release(key, owner)))
    }

    fn list<'a>(
        &'a self,
        stream: &'a str,
    ) -> crate::LeaseFuture<'a, Option<Vec<(LeaseKey, LeaseState)>>> {
        self.inner.list(stream)
    }

    fn delete<'a>(&'a self, key: &'a LeaseKey, counter: u64) -> crate::LeaseFuture<'a, bool> {
        self.inner.delete(key, counter)
    }

    fn notice<'a>(&'a self, stream: &'a str) -> crate::LeaseFuture<'a, Option<crate::Notice>> {
        if self.fail_notice.load(std::sync::atomic::Ordering::SeqCst) {
            return Box::pin(std::future::ready(Err(crate::LeaseError::Store {
                key: LeaseKey::new(stream, "*"),
                operation: "notice",
                message: "AccessDeniedException (test)".to_owned(),
            })));
        }
        self.inner.notice(stream)
    }

    fn notice_head<'a>(&'a self, stream: &'a str) -> crate::LeaseFuture<'a, Option<crate::Notice>> {
        self.inner.notice_head(stream)
    }

    fn polls_read_behind(&self) -> bool {
        self.inner.polls_read_behind()
    }

    fn keeps_notice_head_apart(&self) -> bool {
        self.head_apart.load(std::sync::atomic::Ordering::SeqCst)
            || self.inner.keeps_notice_head_apart()
    }

    fn keep_layout<'a>(&'a self, stream: &'a str) -> crate::LeaseFuture<'a, ()> {
        self.layout_writes
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        if self.fail_layout.load(std::sync::atomic::Ordering::SeqCst) {
            return Box::pin(std::future::ready(Err(crate::LeaseError::Store {
                key: LeaseKey::new(stream, "*"),
                operation: "keep_layout",
                message: "unreachable (test)".to_owned(),
            })));
        }
        self.inner.keep_layout(stream)
    }

    fn beat<'a>(
        &'a self,
        stream: &'a str,
        owner: &'a str,
        until_ms: u64,
        forget: &'a [String],
    ) -> crate::LeaseFuture<'a, ()> {
        Box::pin(self.timed(
            "beat",
            owner,
            false,
            self.inner.beat(stream, owner, until_ms, forget),
        ))
    }

    fn leave<'a>(&'a self, stream: &'a str, owner: &'a str) -> crate::LeaseFuture<'a, ()> {
        Box::pin(self.timed("leave", owner, false, self.inner.leave(stream, owner)))
    }

    fn leave_beat<'a>(
        &'a self,
        stream: &'a str,
        owner: &'a str,
        until_ms: u64,
    ) -> crate::LeaseFuture<'a, ()> {
        Box::pin(self.timed(
            "leave",
            owner,
            false,
            self.inner.leave_beat(stream, owner, until_ms),
        ))
    }

    fn announce<'a>(
        &'a self,
        stream: &'a str,
        owner: &'a str,
        record: &'a str,
        forget: &'a [String],
    ) -> crate::LeaseFuture<'a, ()> {
        self.inner.announce(stream, owner, record, forget)
    }

    fn ask_handoff<'a>(
        &'a self,
        key: &'a LeaseKey,
        holder: &'a str,
        counter: u64,
        to: &'a str,
        asked_ms: u64,
    ) -> crate::LeaseFuture<'a, bool> {
        Box::pin(self.timed(
            "ask_handoff",
            to,
            true,
            self.inner.ask_handoff(key, holder, counter, to, asked_ms),
        ))
    }

    fn mark_asked<'a>(
        &'a self,
        stream: &'a str,
        holders: &'a [String],
    ) -> crate::LeaseFuture<'a, ()> {
        self.inner.mark_asked(stream, holders)
    }

    fn withdraw_handoff<'a>(
        &'a self,
        key: &'a LeaseKey,
        to: &'a str,
    ) -> crate::LeaseFuture<'a, bool> {
        Box::pin(self.timed(
            "withdraw_handoff",
            to,
            true,
            self.inner.withdraw_handoff(key, to),
        ))
    }

    fn hand_over<'a>(
        &'a self,
        key: &'a LeaseKey,
        owner: &'a str,
        to: &'a str,
        checkpoint: Option<&'a str>,
        lease: Duration,
    ) -> crate::LeaseFuture<'a, ()> {
        Box::pin(self.timed(
            "hand_over",
            owner,
            true,
            self.inner.hand_over(key, owner, to, checkpoint, lease),
        ))
    }
}

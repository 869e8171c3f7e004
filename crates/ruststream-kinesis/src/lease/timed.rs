//! Every lease-store call a subscription makes ends within a bound sized to the lease: a store
//! that hangs fails the call, and the lease keeper retries it while the lease lasts, instead of
//! a shard staying leased and unread, or a release outlasting shutdown.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use super::{LeaseError, LeaseFuture, LeaseKey, LeaseState, LeaseStore, Notice};
use crate::telemetry::{CallOutcome, Meters};

/// A store whose every call fails with [`LeaseError::Store`] when it has not answered within
/// `bound`. A write cut off this way may still land; the stores' fences (the owner, and
/// `DynamoLeaseStore`'s counter) keep such a write from doing harm.
#[derive(Debug)]
pub(crate) struct Timed {
    inner: Arc<dyn LeaseStore>,
    bound: Duration,
    /// Where each call's kind, outcome and time are counted.
    meters: Meters,
}

impl Timed {
    pub(crate) fn new(inner: Arc<dyn LeaseStore>, bound: Duration, meters: Meters) -> Self {
        Self {
            inner,
            bound,
            meters,
        }
    }

    /// Runs `call` within the bound and counts how it ended; `timed_out` is the error a call
    /// cut off at the bound answers.
    async fn metered<T>(
        &self,
        operation: &'static str,
        call: impl Future<Output = Result<T, LeaseError>>,
        timed_out: impl FnOnce() -> LeaseError,
    ) -> Result<T, LeaseError> {
        let outcome = |answer: &Result<T, LeaseError>| match answer {
            Ok(_) => CallOutcome::Ok,
            Err(err) if err.is_fenced() => CallOutcome::Refused,
            Err(err) if err.is_throttled() => CallOutcome::Throttled,
            Err(_) => CallOutcome::Failed,
        };
        within(self.bound, &self.meters, operation, call, outcome, || {
            Err(timed_out())
        })
        .await
    }

    fn bounded<'a, T: Send + 'a>(
        &'a self,
        key: &'a LeaseKey,
        operation: &'static str,
        call: impl Future<Output = Result<T, LeaseError>> + Send + 'a,
    ) -> LeaseFuture<'a, T> {
        Box::pin(self.metered(operation, call, move || LeaseError::Store {
            key: key.clone(),
            operation,
            message: format!(
                "no answer within {:?} (the renewal interval); the call may still land",
                self.bound
            ),
        }))
    }
}

impl LeaseStore for Timed {
    fn acquire<'a>(
        &'a self,
        key: &'a LeaseKey,
        owner: &'a str,
        lease: Duration,
    ) -> LeaseFuture<'a, LeaseState> {
        self.bounded(key, "acquire", self.inner.acquire(key, owner, lease))
    }

    fn renew<'a>(
        &'a self,
        key: &'a LeaseKey,
        owner: &'a str,
        lease: Duration,
    ) -> LeaseFuture<'a, LeaseState> {
        self.bounded(key, "renew", self.inner.renew(key, owner, lease))
    }

    fn checkpoint<'a>(
        &'a self,
        key: &'a LeaseKey,
        owner: &'a str,
        checkpoint: &'a str,
    ) -> LeaseFuture<'a, ()> {
        self.bounded(
            key,
            "checkpoint",
            self.inner.checkpoint(key, owner, checkpoint),
        )
    }

    fn check(&self) -> LeaseFuture<'_, ()> {
        self.inner.check()
    }

    fn claim<'a>(&'a self, stream: &'a str) -> LeaseFuture<'a, ()> {
        self.bounded_stream(stream, "claim", self.inner.claim(stream))
    }

    fn read<'a>(&'a self, key: &'a LeaseKey) -> LeaseFuture<'a, Option<LeaseState>> {
        self.bounded(key, "read", self.inner.read(key))
    }

    fn release<'a>(&'a self, key: &'a LeaseKey, owner: &'a str) -> LeaseFuture<'a, ()> {
        self.bounded(key, "release", self.inner.release(key, owner))
    }

    fn checkpoint_and_renew<'a>(
        &'a self,
        key: &'a LeaseKey,
        owner: &'a str,
        checkpoint: &'a str,
        lease: Duration,
    ) -> LeaseFuture<'a, LeaseState> {
        self.bounded(
            key,
            "checkpoint",
            self.inner
                .checkpoint_and_renew(key, owner, checkpoint, lease),
        )
    }

    fn checkpoint_and_renew_behind<'a>(
        &'a self,
        key: &'a LeaseKey,
        owner: &'a str,
        checkpoint: &'a str,
        behind_ms: Option<u64>,
        lease: Duration,
    ) -> LeaseFuture<'a, LeaseState> {
        self.bounded(
            key,
            "checkpoint",
            self.inner
                .checkpoint_and_renew_behind(key, owner, checkpoint, behind_ms, lease),
        )
    }

    fn ask_handoff<'a>(
        &'a self,
        key: &'a LeaseKey,
        holder: &'a str,
        counter: u64,
        to: &'a str,
        asked_ms: u64,
    ) -> LeaseFuture<'a, bool> {
        self.bounded(
            key,
            "ask_handoff",
            self.inner.ask_handoff(key, holder, counter, to, asked_ms),
        )
    }

    fn mark_asked<'a>(&'a self, stream: &'a str, holders: &'a [String]) -> LeaseFuture<'a, ()> {
        self.bounded_stream(stream, "mark_asked", self.inner.mark_asked(stream, holders))
    }

    fn withdraw_handoff<'a>(&'a self, key: &'a LeaseKey, to: &'a str) -> LeaseFuture<'a, bool> {
        self.bounded(
            key,
            "withdraw_handoff",
            self.inner.withdraw_handoff(key, to),
        )
    }

    fn hand_over<'a>(
        &'a self,
        key: &'a LeaseKey,
        owner: &'a str,
        to: &'a str,
        checkpoint: Option<&'a str>,
        lease: Duration,
    ) -> LeaseFuture<'a, ()> {
        self.bounded(
            key,
            "hand_over",
            self.inner.hand_over(key, owner, to, checkpoint, lease),
        )
    }

    fn acquire_from<'a>(
        &'a self,
        key: &'a LeaseKey,
        owner: &'a str,
        lease: Duration,
        start: &'a str,
    ) -> LeaseFuture<'a, LeaseState> {
        self.bounded(
            key,
            "acquire",
            self.inner.acquire_from(key, owner, lease, start),
        )
    }

    /// Counted as an `acquire`: a take, of a row whose holder's beat lapsed.
    fn take_over<'a>(
        &'a self,
        key: &'a LeaseKey,
        owner: &'a str,
        lease: Duration,
        start: &'a str,
        holder: &'a str,
        counter: u64,
    ) -> LeaseFuture<'a, LeaseState> {
        self.bounded(
            key,
            "acquire",
            self.inner
                .take_over(key, owner, lease, start, holder, counter),
        )
    }

    fn list<'a>(&'a self, stream: &'a str) -> LeaseFuture<'a, Option<Vec<(LeaseKey, LeaseState)>>> {
        self.bounded_stream(stream, "rows", self.inner.list(stream))
    }

    fn list_eventually<'a>(
        &'a self,
        stream: &'a str,
    ) -> LeaseFuture<'a, Option<Vec<(LeaseKey, LeaseState)>>> {
        self.bounded_stream(stream, "rows", self.inner.list_eventually(stream))
    }

    fn delete<'a>(&'a self, key: &'a LeaseKey, counter: u64) -> LeaseFuture<'a, bool> {
        self.bounded(key, "delete", self.inner.delete(key, counter))
    }

    fn notice<'a>(&'a self, stream: &'a str) -> LeaseFuture<'a, Option<Notice>> {
        self.bounded_stream(stream, "notice", self.inner.notice(stream))
    }

    fn notice_eventually<'a>(&'a self, stream: &'a str) -> LeaseFuture<'a, Option<Notice>> {
        self.bounded_stream(stream, "notice", self.inner.notice_eventually(stream))
    }

    fn notice_head<'a>(&'a self, stream: &'a str) -> LeaseFuture<'a, Option<Notice>> {
        self.bounded_stream(stream, "notice_head", self.inner.notice_head(stream))
    }

    fn keeps_notice_head_apart(&self) -> bool {
        self.inner.keeps_notice_head_apart()
    }

    fn polls_read_behind(&self) -> bool {
        self.inner.polls_read_behind()
    }

    fn keep_layout<'a>(&'a self, stream: &'a str) -> LeaseFuture<'a, ()> {
        self.bounded_stream(stream, "keep_layout", self.inner.keep_layout(stream))
    }

    fn beat<'a>(
        &'a self,
        stream: &'a str,
        owner: &'a str,
        until_ms: u64,
        forget: &'a [String],
    ) -> LeaseFuture<'a, ()> {
        self.bounded_stream(
            stream,
            "beat",
            self.inner.beat(stream, owner, until_ms, forget),
        )
    }

    fn leave<'a>(&'a self, stream: &'a str, owner: &'a str) -> LeaseFuture<'a, ()> {
        self.bounded_stream(stream, "leave", self.inner.leave(stream, owner))
    }

    fn leave_beat<'a>(
        &'a self,
        stream: &'a str,
        owner: &'a str,
        until_ms: u64,
    ) -> LeaseFuture<'a, ()> {
        self.bounded_stream(
            stream,
            "leave",
            self.inner.leave_beat(stream, owner, until_ms),
        )
    }

    fn announce<'a>(
        &'a self,
        stream: &'a str,
        owner: &'a str,
        record: &'a str,
        forget: &'a [String],
    ) -> LeaseFuture<'a, ()> {
        self.bounded_stream(
            stream,
            "announce",
            self.inner.announce(stream, owner, record, forget),
        )
    }

    fn table_name(&self) -> Option<&str> {
        self.inner.table_name()
    }

    fn keeps_leases_by_beat(&self) -> bool {
        self.inner.keeps_leases_by_beat()
    }

    #[cfg(feature = "dynamodb-lease")]
    fn transactions(&self) -> Option<super::Transactions> {
        let inner = self.inner.transactions()?;
        Some(super::Transactions::new(Arc::new(TimedCommits {
            inner,
            bound: self.bound,
            meters: self.meters.clone(),
        })))
    }
}

/// The inner store's transactions, each commit bounded and counted as the store's other calls
/// are: one cut off at the bound may still land, and its resend is recognised by the row.
#[cfg(feature = "dynamodb-lease")]
#[derive(Debug)]
struct TimedCommits {
    inner: super::Transactions,
    bound: Duration,
    meters: Meters,
}

#[cfg(feature = "dynamodb-lease")]
impl super::transactions::CommitStore for TimedCommits {
    fn region(&self) -> Option<String> {
        self.inner.region()
    }

    fn commit_tables(&self) -> Option<super::CommitTables> {
        self.inner.commit_tables()
    }

    fn table_arn(&self) -> super::transactions::ArnFuture<'_> {
        Box::pin(self.inner.table_arn())
    }

    fn commit<'a>(
        &'a self,
        request: &'a super::transactions::CommitRequest<'a>,
    ) -> super::transactions::CommitFuture<'a> {
        use super::transactions::CommitAnswer;
        let outcome = |answer: &CommitAnswer| match answer {
            CommitAnswer::Done => CallOutcome::Ok,
            CommitAnswer::Lost { .. } => CallOutcome::Refused,
            CommitAnswer::NotApplied => CallOutcome::NotApplied,
            CommitAnswer::Split | CommitAnswer::UserRefused(_) => CallOutcome::UserRefused,
            CommitAnswer::Failed(_) => CallOutcome::Failed,
        };
        let timed_out = move || {
            CommitAnswer::Failed(LeaseError::Store {
                key: request
                    .rows
                    .first()
                    .map_or_else(|| LeaseKey::new("", ""), |row| row.key.clone()),
                operation: "commit",
                message: format!(
                    "no answer within {:?} (the renewal interval); the commit may still land, \
                     and its resend is recognised by the row's token",
                    self.bound
                ),
            })
        };
        Box::pin(within(
            self.bound,
            &self.meters,
            "commit",
            self.inner.commit(request),
            outcome,
            timed_out,
        ))
    }
}

/// Runs `call` within `bound` and counts how it ended (`outcome`) as the store call `operation`;
/// a call cut off at the bound answers `timed_out()`.
async fn within<T>(
    bound: Duration,
    meters: &Meters,
    operation: &'static str,
    call: impl Future<Output = T>,
    outcome: impl FnOnce(&T) -> CallOutcome,
    timed_out: impl FnOnce() -> T,
) -> T {
    let started = std::time::Instant::now();
    let (answer, outcome) = match tokio::time::timeout(bound, call).await {
        Ok(answer) => {
            let outcome = outcome(&answer);
            (answer, outcome)
        }
        Err(_) => (timed_out(), CallOutcome::TimedOut),
    };
    meters.store_call(operation, outcome, started.elapsed());
    answer
}

impl Timed {
    /// A call on a whole stream (its rows, its notice), bounded like the others; its error names
    /// the stream as `stream:*`.
    fn bounded_stream<'a, T: Send + 'a>(
        &'a self,
        stream: &'a str,
        operation: &'static str,
        call: impl Future<Output = Result<T, LeaseError>> + Send + 'a,
    ) -> LeaseFuture<'a, T> {
        Box::pin(self.metered(operation, call, move || LeaseError::Store {
            key: LeaseKey::new(stream, "*"),
            operation,
            message: format!("no answer within {:?}", self.bound),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemoryLeaseStore;

    /// A store that never answers.
    #[derive(Debug)]
    struct Hung;

    impl LeaseStore for Hung {
        fn acquire<'a>(
            &'a self,
            _: &'a LeaseKey,
            _: &'a str,
            _: Duration,
        ) -> LeaseFuture<'a, LeaseState> {
            Box::pin(std::future::pending())
        }
        fn renew<'a>(
            &'a self,
            _: &'a LeaseKey,
            _: &'a str,
            _: Duration,
        ) -> LeaseFuture<'a, LeaseState> {
            Box::pin(std::future::pending())
        }
        fn checkpoint<'a>(
            &'a self,
            _: &'a LeaseKey,
            _: &'a str,
            _: &'a str,
        ) -> LeaseFuture<'a, ()> {
            Box::pin(std::future::pending())
        }
        fn read<'a>(&'a self, _: &'a LeaseKey) -> LeaseFuture<'a, Option<LeaseState>> {
            Box::pin(std::future::pending())
        }
        fn release<'a>(&'a self, _: &'a LeaseKey, _: &'a str) -> LeaseFuture<'a, ()> {
            Box::pin(std::future::pending())
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_hung_call_fails_within_the_bound_naming_the_row_and_the_call() {
        let timed = Timed::new(Arc::new(Hung), Duration::from_secs(3), Meters::default());
        let key = LeaseKey::new("orders", "shardId-000000000000");
        let started = tokio::time::Instant::now();
        let err = timed
            .renew(&key, "me", Duration::from_secs(10))
            .await
            .unwrap_err();
        assert_eq!(started.elapsed(), Duration::from_secs(3));
        assert!(
            !err.is_fenced(),
            "a timeout is a store failure, not a refusal"
        );
        let message = err.to_string();
        assert!(
            message.contains("orders:shardId-000000000000") && message.contains("renew"),
            "{message}"
        );
        assert!(timed.release(&key, "me").await.is_err());
        assert!(timed.read(&key).await.is_err());
    }

    #[tokio::test]
    async fn an_answering_store_is_passed_through() {
        let timed = Timed::new(
            Arc::new(MemoryLeaseStore::new()),
            Duration::from_secs(3),
            Meters::default(),
        );
        crate::lease::suite::run(&timed, Duration::from_millis(300)).await;
    }
    /// Each call is counted by its kind and how it ended: a hung one as timed out, a refused
    /// write as refused (a fence working), an answer as ok.
    #[cfg(feature = "metrics")]
    #[tokio::test(start_paused = true)]
    async fn each_call_is_counted_by_kind_and_outcome() {
        let registry = prometheus::Registry::new();
        let meters =
            Meters::default().with_prometheus(crate::KinesisMetrics::register(&registry).unwrap());
        let key = LeaseKey::new("orders", "shardId-000000000000");
        let hung = Timed::new(Arc::new(Hung), Duration::from_secs(3), meters.clone());
        assert!(
            hung.renew(&key, "me", Duration::from_secs(10))
                .await
                .is_err()
        );
        let memory = Timed::new(
            Arc::new(MemoryLeaseStore::new()),
            Duration::from_secs(3),
            meters,
        );
        memory
            .acquire(&key, "me", Duration::from_secs(10))
            .await
            .unwrap();
        assert!(
            memory
                .acquire(&key, "other", Duration::from_secs(10))
                .await
                .unwrap_err()
                .is_fenced()
        );
        let text = crate::telemetry::scrape(&registry);
        for series in [
            r#"messaging_client_operation_duration_seconds_count{error_type="timeout",operation="lease_table.renew"} 1"#,
            r#"messaging_client_operation_duration_seconds_count{error_type="",operation="lease_table.acquire"} 1"#,
            r#"messaging_client_operation_duration_seconds_count{error_type="refused",operation="lease_table.acquire"} 1"#,
        ] {
            assert!(text.contains(series), "{series} missing:\n{text}");
        }
    }
}

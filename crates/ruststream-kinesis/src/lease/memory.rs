//! The lease store of a single process: rows in memory under the store's rules (`rules`), which
//! the DynamoDB store says as condition expressions.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use super::{
    LeaseError, LeaseFuture, LeaseKey, LeaseState, LeaseStore, Notice, epoch_millis, millis, rules,
};

/// The default [`LeaseStore`]: rows in the memory of the process.
///
/// Correct for one instance, and for several brokers in one process that share one `Arc` of it.
/// It is empty again after a restart, so a restarted service has no checkpoints and each shard
/// opens at the tip unless `start_at(..)` names another position. Clones share the rows.
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use ruststream_kinesis::{KinesisBroker, LeaseStore, MemoryLeaseStore};
///
/// // Two brokers in one process share the shards of a stream through one store.
/// let store: Arc<dyn LeaseStore> = Arc::new(MemoryLeaseStore::new());
/// let first = KinesisBroker::new().lease_store(Arc::clone(&store));
/// let second = KinesisBroker::new().lease_store(store);
/// # let _ = (first, second);
/// ```
#[derive(Debug, Clone, Default)]
pub struct MemoryLeaseStore {
    rows: Arc<Mutex<HashMap<LeaseKey, LeaseState>>>,
    /// Each stream's notice.
    notices: Arc<Mutex<HashMap<String, Notice>>>,
    /// In process (`TestApp`), the journal its exactly-once commits are recorded in; `None`: it
    /// commits nothing (a store given to a live broker).
    #[cfg(all(feature = "testing", feature = "dynamodb-lease"))]
    commits: Option<super::InProcessCommits>,
}

impl MemoryLeaseStore {
    /// An empty store.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Every row, sorted by key: what a lease-table view shows.
    #[must_use]
    pub fn rows(&self) -> Vec<(LeaseKey, LeaseState)> {
        let mut rows: Vec<_> = self
            .lock()
            .iter()
            .map(|(key, state)| (key.clone(), state.clone()))
            .collect();
        rows.sort_by(|a, b| a.0.cmp(&b.0));
        rows
    }

    /// The store of a connection in process, whose exactly-once commits go to `commits`.
    #[cfg(all(feature = "testing", feature = "dynamodb-lease"))]
    pub(crate) fn committing(commits: super::InProcessCommits) -> Self {
        Self {
            commits: Some(commits),
            ..Self::default()
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<LeaseKey, LeaseState>> {
        self.rows.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn notices(&self) -> std::sync::MutexGuard<'_, HashMap<String, Notice>> {
        self.notices.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Bumps `stream`'s notice counter: a release, a handoff or an instance leaving.
    fn bump(&self, stream: &str) {
        self.in_notice(stream, |notice| notice.counter += 1);
    }

    /// Changes `stream`'s notice by `change` (made empty if there is none yet).
    fn in_notice(&self, stream: &str, change: impl FnOnce(&mut Notice)) {
        change(self.notices().entry(stream.to_owned()).or_default());
    }

    /// Applies `write` of `owner`'s to the row of `key` by the store's rules (on the owner alone:
    /// the brokers of one process share this store object, and no write of theirs lands late).
    fn held_write(
        &self,
        key: &LeaseKey,
        owner: &str,
        write: &rules::Held<'_>,
    ) -> Result<LeaseState, LeaseError> {
        let mut rows = self.lock();
        let written =
            rules::held(rows.get(key), owner, None, write).ok_or_else(|| LeaseError::Lost {
                key: key.clone(),
                owner: owner.to_owned(),
            })?;
        rows.insert(key.clone(), written.clone());
        Ok(written)
    }
}

impl MemoryLeaseStore {
    /// The take of `acquire`, `acquire_from` and `take_over`: `start` becomes the checkpoint of
    /// a row without one, in the same step.
    fn take(
        &self,
        key: &LeaseKey,
        owner: &str,
        lease: Duration,
        start: Option<&str>,
        over: Option<rules::Over<'_>>,
    ) -> Result<LeaseState, LeaseError> {
        let now_ms = epoch_millis();
        let take = rules::Take {
            owner,
            now_ms,
            lease_ms: millis(lease),
            start,
            // Every take reads the rows as they are now: there is no older view to guard.
            seen_row: false,
            over,
        };
        let mut rows = self.lock();
        let row = rows.get(key);
        let Some(taken) = rules::take(row, &take) else {
            let Some(row) = row.cloned() else {
                // Only a take-over is refused by a missing row: it decided on one.
                return Err(LeaseError::Deleted { key: key.clone() });
            };
            return Err(LeaseError::Held {
                key: key.clone(),
                owner: row.owner.unwrap_or_default(),
                expires_in_ms: row.expiry_ms.saturating_sub(now_ms),
            });
        };
        rows.insert(key.clone(), taken.clone());
        Ok(taken)
    }
}

impl LeaseStore for MemoryLeaseStore {
    /// In process only (`TestApp`): commits move the rows and are recorded for the test. A
    /// store given to a live broker has none, and an exactly-once subscription on it fails the
    /// start.
    #[cfg(feature = "dynamodb-lease")]
    fn transactions(&self) -> Option<super::Transactions> {
        #[cfg(feature = "testing")]
        if let Some(journal) = &self.commits {
            return Some(super::Transactions::new(Arc::new(
                super::journal::MemoryCommits {
                    rows: Arc::clone(&self.rows),
                    journal: journal.clone(),
                },
            )));
        }
        None
    }

    fn keeps_leases_by_beat(&self) -> bool {
        true
    }

    fn acquire<'a>(
        &'a self,
        key: &'a LeaseKey,
        owner: &'a str,
        lease: Duration,
    ) -> LeaseFuture<'a, LeaseState> {
        Box::pin(std::future::ready(self.take(key, owner, lease, None, None)))
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
        let over = rules::Over { holder, counter };
        let taken = self.take(key, owner, lease, Some(start), Some(over));
        Box::pin(std::future::ready(taken))
    }

    fn acquire_from<'a>(
        &'a self,
        key: &'a LeaseKey,
        owner: &'a str,
        lease: Duration,
        start: &'a str,
    ) -> LeaseFuture<'a, LeaseState> {
        Box::pin(std::future::ready(self.take(
            key,
            owner,
            lease,
            Some(start),
            None,
        )))
    }

    fn renew<'a>(
        &'a self,
        key: &'a LeaseKey,
        owner: &'a str,
        lease: Duration,
    ) -> LeaseFuture<'a, LeaseState> {
        let renew = rules::Held::renew(epoch_millis(), millis(lease));
        Box::pin(std::future::ready(self.held_write(key, owner, &renew)))
    }

    fn checkpoint<'a>(
        &'a self,
        key: &'a LeaseKey,
        owner: &'a str,
        checkpoint: &'a str,
    ) -> LeaseFuture<'a, ()> {
        let write = rules::Held::Checkpoint {
            checkpoint,
            behind_ms: None,
            expiry_ms: None,
        };
        Box::pin(std::future::ready(
            self.held_write(key, owner, &write).map(drop),
        ))
    }

    fn read<'a>(&'a self, key: &'a LeaseKey) -> LeaseFuture<'a, Option<LeaseState>> {
        let row = self.lock().get(key).cloned();
        Box::pin(std::future::ready(Ok(row)))
    }

    fn release<'a>(&'a self, key: &'a LeaseKey, owner: &'a str) -> LeaseFuture<'a, ()> {
        let released = self.held_write(key, owner, &rules::Held::Release).map(drop);
        if released.is_ok() {
            self.bump(key.stream());
        }
        Box::pin(std::future::ready(released))
    }

    fn checkpoint_and_renew<'a>(
        &'a self,
        key: &'a LeaseKey,
        owner: &'a str,
        checkpoint: &'a str,
        lease: Duration,
    ) -> LeaseFuture<'a, LeaseState> {
        self.checkpoint_and_renew_behind(key, owner, checkpoint, None, lease)
    }

    fn checkpoint_and_renew_behind<'a>(
        &'a self,
        key: &'a LeaseKey,
        owner: &'a str,
        checkpoint: &'a str,
        behind_ms: Option<u64>,
        lease: Duration,
    ) -> LeaseFuture<'a, LeaseState> {
        let write = rules::Held::Checkpoint {
            checkpoint,
            behind_ms,
            expiry_ms: Some(epoch_millis().saturating_add(millis(lease))),
        };
        Box::pin(std::future::ready(self.held_write(key, owner, &write)))
    }

    fn list<'a>(&'a self, stream: &'a str) -> LeaseFuture<'a, Option<Vec<(LeaseKey, LeaseState)>>> {
        let rows = self
            .rows()
            .into_iter()
            .filter(|(key, _)| key.stream() == stream)
            .collect();
        Box::pin(std::future::ready(Ok(Some(rows))))
    }

    fn delete<'a>(&'a self, key: &'a LeaseKey, counter: u64) -> LeaseFuture<'a, bool> {
        let mut rows = self.lock();
        let deletable = rules::deletable(rows.get(key), counter, epoch_millis());
        if deletable {
            rows.remove(key);
        }
        Box::pin(std::future::ready(Ok(deletable)))
    }

    fn notice<'a>(&'a self, stream: &'a str) -> LeaseFuture<'a, Option<Notice>> {
        let notice = self.notices().get(stream).cloned().unwrap_or_default();
        Box::pin(std::future::ready(Ok(Some(notice))))
    }

    fn beat<'a>(
        &'a self,
        stream: &'a str,
        owner: &'a str,
        until_ms: u64,
        forget: &'a [String],
    ) -> LeaseFuture<'a, ()> {
        self.in_notice(stream, |notice| {
            notice.forget_gone(owner, forget, epoch_millis());
            // A beat never moves back: one written late lands on no newer one.
            let beat = notice.beats.entry(owner.to_owned()).or_insert(until_ms);
            *beat = (*beat).max(until_ms);
        });
        Box::pin(std::future::ready(Ok(())))
    }

    fn announce<'a>(
        &'a self,
        stream: &'a str,
        owner: &'a str,
        record: &'a str,
        forget: &'a [String],
    ) -> LeaseFuture<'a, ()> {
        self.in_notice(stream, |notice| {
            notice.forget_gone(owner, forget, epoch_millis());
            notice
                .incarnations
                .insert(owner.to_owned(), record.to_owned());
        });
        Box::pin(std::future::ready(Ok(())))
    }

    fn leave<'a>(&'a self, stream: &'a str, owner: &'a str) -> LeaseFuture<'a, ()> {
        // Whatever the beat's end.
        self.in_notice(stream, |notice| notice.leave_beat(owner, u64::MAX));
        Box::pin(std::future::ready(Ok(())))
    }

    fn leave_beat<'a>(
        &'a self,
        stream: &'a str,
        owner: &'a str,
        until_ms: u64,
    ) -> LeaseFuture<'a, ()> {
        self.in_notice(stream, |notice| notice.leave_beat(owner, until_ms));
        Box::pin(std::future::ready(Ok(())))
    }

    fn ask_handoff<'a>(
        &'a self,
        key: &'a LeaseKey,
        holder: &'a str,
        counter: u64,
        to: &'a str,
        asked_ms: u64,
    ) -> LeaseFuture<'a, bool> {
        let mut rows = self.lock();
        let asked = rules::ask_handoff(rows.get(key), holder, counter, to, asked_ms)
            .map(|asked| rows.insert(key.clone(), asked))
            .is_some();
        Box::pin(std::future::ready(Ok(asked)))
    }

    fn mark_asked<'a>(&'a self, stream: &'a str, holders: &'a [String]) -> LeaseFuture<'a, ()> {
        self.in_notice(stream, |notice| {
            for holder in holders {
                notice.mark_asked(holder);
            }
        });
        Box::pin(std::future::ready(Ok(())))
    }

    fn withdraw_handoff<'a>(&'a self, key: &'a LeaseKey, to: &'a str) -> LeaseFuture<'a, bool> {
        let mut rows = self.lock();
        let withdrawn = rules::withdraw_handoff(rows.get(key), to)
            .map(|withdrawn| rows.insert(key.clone(), withdrawn))
            .is_some();
        Box::pin(std::future::ready(Ok(withdrawn)))
    }

    fn hand_over<'a>(
        &'a self,
        key: &'a LeaseKey,
        owner: &'a str,
        to: &'a str,
        checkpoint: Option<&'a str>,
        lease: Duration,
    ) -> LeaseFuture<'a, ()> {
        let write = rules::Held::hand_over(to, checkpoint, epoch_millis(), millis(lease));
        let handed = self.held_write(key, owner, &write).map(drop);
        if handed.is_ok() {
            self.bump(key.stream());
        }
        Box::pin(std::future::ready(handed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doubles::five_calls::FiveCalls;

    #[tokio::test]
    async fn the_store_passes_the_lease_store_suite() {
        crate::lease::suite::run(&MemoryLeaseStore::new(), Duration::from_millis(300)).await;
    }

    /// The memory store keeps the figure: the suite's `checkpoint-lag` check runs in full.
    #[tokio::test]
    async fn the_lag_written_with_a_checkpoint_reads_back_with_it() {
        let store = MemoryLeaseStore::new();
        let key = LeaseKey::new("orders", "shardId-000000000000");
        let lease = Duration::from_secs(10);
        store.acquire(&key, "a", lease).await.unwrap();
        let written = store
            .checkpoint_and_renew_behind(&key, "a", "7", Some(2_500), lease)
            .await
            .unwrap();
        assert_eq!(written.behind_ms, Some(2_500));
        assert_eq!(
            store.read(&key).await.unwrap().unwrap().behind_ms,
            Some(2_500)
        );
    }

    #[tokio::test]
    async fn a_store_of_the_five_calls_passes_the_suite_with_the_provided_ones() {
        let store = FiveCalls(MemoryLeaseStore::new());
        crate::lease::suite::run(&store, Duration::from_millis(300)).await;
    }

    #[tokio::test]
    async fn a_take_from_a_start_is_one_write() {
        let store = MemoryLeaseStore::new();
        let key = LeaseKey::new("orders", "shardId-000000000000");
        let lease = Duration::from_secs(10);
        let taken = store
            .acquire_from(&key, "a", lease, "TRIM_HORIZON")
            .await
            .unwrap();
        assert_eq!(taken.checkpoint.as_deref(), Some("TRIM_HORIZON"));
        assert_eq!(taken.counter, 1, "one write");
    }

    #[tokio::test]
    async fn a_checkpoint_with_renewal_extends_the_lease_in_one_write() {
        let store = MemoryLeaseStore::new();
        let key = LeaseKey::new("orders", "shardId-000000000000");
        let taken = store
            .acquire(&key, "a", Duration::from_secs(1))
            .await
            .unwrap();
        store
            .checkpoint_and_renew(&key, "a", "42", Duration::from_secs(60))
            .await
            .unwrap();
        let row = store.read(&key).await.unwrap().unwrap();
        assert_eq!(row.checkpoint.as_deref(), Some("42"));
        assert!(row.expiry_ms >= taken.expiry_ms + 50_000);
        assert_eq!(row.counter, taken.counter + 1, "one write");
        assert!(
            store
                .checkpoint_and_renew(&key, "b", "43", Duration::from_secs(60))
                .await
                .unwrap_err()
                .is_fenced()
        );
        let other = LeaseKey::new("payments", "shardId-000000000000");
        store
            .acquire(&other, "a", Duration::from_secs(1))
            .await
            .unwrap();
        let listed = store.list("orders").await.unwrap().unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].0, key);
    }

    #[tokio::test]
    async fn clones_share_their_rows() {
        let store = MemoryLeaseStore::new();
        let clone = store.clone();
        let key = LeaseKey::new("orders", "shardId-000000000000");
        store
            .acquire(&key, "a", Duration::from_secs(10))
            .await
            .unwrap();
        assert!(clone.read(&key).await.unwrap().unwrap().is_held_by("a"));
        assert_eq!(clone.rows().len(), 1);
    }
}

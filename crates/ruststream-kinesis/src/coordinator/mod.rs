//! Which shards this instance reads: it lists the shards when a subscription opens and every
//! listing interval, takes every shard that is free or whose lease expired (in parallel), and
//! starts a reader for each. The decisions are [`plan`]; this module does the I/O around them.

pub(crate) mod keeper;
pub(crate) mod plan;
#[cfg(test)]
mod simulation;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use aws_sdk_kinesis::Client;
use futures::future::join_all;
use tokio::sync::{Notify, mpsc, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::api::{self, ShardInfo};
use crate::lease::{LeaseKey, LeaseStore, epoch_millis};
use crate::position::ShardStart;
use crate::reader::{self, Reader};
use crate::shard::ShardHandle;
use crate::{KinesisError, KinesisMessage, KinesisPosition, LeaseTimings};
use plan::{Rows, Verdict};

/// What the subscriber stream yields.
pub(crate) type Item = Result<KinesisMessage, KinesisError>;

/// A shard this subscription reads.
#[derive(Debug)]
pub(crate) struct Running {
    pub(crate) handle: Arc<ShardHandle>,
    pub(crate) restart: watch::Sender<Option<KinesisPosition>>,
}

/// One live subscription: its settings, its channel, and the shards it reads.
#[derive(Debug)]
pub(crate) struct Subscription {
    pub(crate) stream: Arc<str>,
    pub(crate) client: Client,
    pub(crate) store: Arc<dyn LeaseStore>,
    pub(crate) owner: Arc<str>,
    pub(crate) timings: LeaseTimings,
    pub(crate) poll_interval: Duration,
    pub(crate) batch_size: u32,
    pub(crate) tx: mpsc::Sender<Item>,
    pub(crate) cancel: CancellationToken,
    pub(crate) tasks: TaskTracker,
    pub(crate) runtime: tokio::runtime::Handle,
    pub(crate) broker_closed: Arc<AtomicBool>,
    pub(crate) running: Mutex<HashMap<Arc<str>, Running>>,
    pub(crate) finished: Mutex<HashSet<Arc<str>>>,
    /// Wakes the coordinator before its next listing (a shard ended or stopped).
    pub(crate) wake: Notify,
    /// Where shards without a checkpoint start; a seek made before any shard was taken sets it.
    pub(crate) initial: Mutex<KinesisPosition>,
}

impl Subscription {
    /// Sends a failure to the subscriber stream without waiting; a full channel drops it with a
    /// warning rather than stalling a reader.
    pub(crate) fn report(&self, err: KinesisError) {
        tracing::warn!(stream = %self.stream, error = %err, "kinesis subscription");
        let _ = self.tx.try_send(Err(err));
    }

    pub(crate) fn lease_error(&self, shard: &str, source: crate::LeaseError) -> KinesisError {
        KinesisError::Lease {
            stream: self.stream.to_string(),
            shard: shard.to_owned(),
            source: Box::new(source),
        }
    }

    fn reading(&self) -> HashSet<Arc<str>> {
        self.running
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .keys()
            .cloned()
            .collect()
    }

    /// One listing round: list, read the rows that matter, take what is free, start readers.
    pub(crate) async fn round(self: &Arc<Self>) -> Result<usize, KinesisError> {
        let listing = api::list_shards(&self.client, &self.stream).await?;
        let reading = self.reading();
        let finished = self
            .finished
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let wanted = plan::rows_to_read(&listing, &reading, &finished);
        let reads = join_all(wanted.iter().map(|shard| async move {
            let key = LeaseKey::new(Arc::clone(&self.stream), Arc::clone(shard));
            (Arc::clone(shard), self.store.read(&key).await)
        }))
        .await;
        let mut rows = Rows::new();
        let mut unreadable = HashSet::new();
        for (shard, row) in reads {
            match row {
                Ok(row) => {
                    rows.insert(shard, row);
                }
                Err(err) => {
                    self.report(self.lease_error(&shard, err));
                    unreadable.insert(shard);
                }
            }
        }
        // Shards known to be finished are not read again; their children still see them done.
        for shard in &finished {
            rows.entry(Arc::clone(shard)).or_insert_with(|| {
                Some(crate::LeaseState {
                    checkpoint: Some(crate::SHARD_END.to_owned()),
                    ..crate::LeaseState::default()
                })
            });
        }
        for (shard, row) in &rows {
            if row.as_ref().is_some_and(crate::LeaseState::is_finished) {
                self.finished
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert(Arc::clone(shard));
            }
        }
        let listed: HashSet<&str> = listing.iter().map(|s| s.id.as_ref()).collect();
        let initial = self
            .initial
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let now_ms = epoch_millis();
        let to_take: Vec<&ShardInfo> = listing
            .iter()
            .filter(|shard| !reading.contains(&shard.id) && !unreadable.contains(&shard.id))
            .filter(|shard| {
                matches!(
                    plan::verdict(shard, &listed, &rows, &self.owner, now_ms, &initial),
                    Verdict::Take { .. }
                )
            })
            .collect();
        let taken = join_all(to_take.into_iter().map(|shard| self.take(shard))).await;
        Ok(taken.into_iter().filter(|taken| *taken).count())
    }

    /// Takes the lease of `shard` and starts its reader; whether it now reads the shard.
    async fn take(self: &Arc<Self>, shard: &ShardInfo) -> bool {
        let key = LeaseKey::new(Arc::clone(&self.stream), Arc::clone(&shard.id));
        let sent = Instant::now();
        let state = match self
            .store
            .acquire(&key, &self.owner, self.timings.lease())
            .await
        {
            Ok(state) => state,
            // Another instance was faster: nothing to report.
            Err(err) if err.is_fenced() => return false,
            Err(err) => {
                self.report(self.lease_error(&shard.id, err));
                return false;
            }
        };
        let initial = self
            .initial
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        // Decided again on the row the take returned: it is the authoritative one.
        let start = match state.checkpoint.as_deref() {
            Some(crate::SHARD_END) => {
                self.finished
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert(Arc::clone(&shard.id));
                let _ = self.store.release(&key, &self.owner).await;
                return false;
            }
            Some(checkpoint) => ShardStart::from_checkpoint(&shard.id, checkpoint),
            None if !shard.parents.is_empty() => ShardStart::At(KinesisPosition::TrimHorizon),
            None if initial.applies_to(&shard.id) => ShardStart::At(initial),
            None => ShardStart::At(KinesisPosition::Latest),
        };
        if state.checkpoint.is_none() {
            // Recorded before the first read, so an instance that takes the shard over before
            // the first acknowledgement starts no later than this one did.
            let recorded = start.to_checkpoint(epoch_millis());
            if let Err(err) = self.store.checkpoint(&key, &self.owner, &recorded).await {
                if !err.is_fenced() {
                    self.report(self.lease_error(&shard.id, err));
                    let _ = self.store.release(&key, &self.owner).await;
                }
                return false;
            }
        }
        let iterator =
            match api::shard_iterator(&self.client, &self.stream, &shard.id, &start).await {
                Ok(iterator) => iterator,
                Err(err) => {
                    self.report(err);
                    let _ = self.store.release(&key, &self.owner).await;
                    return false;
                }
            };
        let handle = Arc::new(ShardHandle::new(key, Arc::clone(&self.broker_closed)));
        handle.extend(sent + self.timings.lease() - self.timings.holder_margin());
        let (restart, restart_rx) = watch::channel(None);
        let cancel = self.cancel.child_token();
        self.running
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(
                Arc::clone(&shard.id),
                Running {
                    handle: Arc::clone(&handle),
                    restart,
                },
            );
        tracing::debug!(stream = %self.stream, shard = %shard.id, ?start, "reading shard");
        let reader = Reader {
            sub: Arc::clone(self),
            handle,
            shard: shard.id.clone(),
            start,
            iterator,
            cancel,
            restart: restart_rx,
        };
        self.tasks.spawn_on(reader::run(reader), &self.runtime);
        true
    }

    /// Forgets a shard whose reader ended, and lists again soon.
    pub(crate) fn reader_ended(&self, shard: &Arc<str>, finished: bool) {
        self.running
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(shard);
        if finished {
            self.finished
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(Arc::clone(shard));
        }
        self.wake.notify_one();
    }
}

/// Lists and takes every listing interval, or sooner when a reader ended, until cancelled.
pub(crate) async fn run(sub: Arc<Subscription>) {
    loop {
        tokio::select! {
            () = sub.cancel.cancelled() => return,
            () = tokio::time::sleep(sub.timings.listing_interval()) => {}
            () = sub.wake.notified() => {}
        }
        if let Err(err) = sub.round().await {
            sub.report(err);
        }
    }
}

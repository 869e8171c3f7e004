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
use std::time::Duration;

use aws_sdk_kinesis::Client;
use futures::future::join_all;
use tokio::sync::{Notify, mpsc, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::api::{self, ShardInfo};
use crate::lease::{LeaseKey, LeaseStore, epoch_millis};
use crate::position::ShardStart;
use crate::reader::{self, Reader};
use crate::shard::{Sent, ShardHandle};
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
    /// This subscription's tasks, which a later subscription to the stream waits for.
    pub(crate) tasks: TaskTracker,
    /// The broker's tasks, which its shutdown waits for.
    pub(crate) broker_tasks: TaskTracker,
    pub(crate) runtime: tokio::runtime::Handle,
    pub(crate) broker_closed: Arc<AtomicBool>,
    pub(crate) running: Mutex<HashMap<Arc<str>, Running>>,
    pub(crate) finished: Mutex<HashSet<Arc<str>>>,
    /// Wakes the coordinator before its next listing (a shard ended or stopped).
    pub(crate) wake: Notify,
    /// Where shards without a checkpoint start; a seek made before any shard was taken sets it.
    pub(crate) initial: Mutex<KinesisPosition>,
    /// The shards the last listing found, for the handover poll between listings.
    pub(crate) last_listing: Mutex<Vec<ShardInfo>>,
}

impl Subscription {
    /// Runs `task` on the broker's runtime, tracked by this subscription and by the broker.
    pub(crate) fn spawn(&self, task: impl std::future::Future<Output = ()> + Send + 'static) {
        let held = self.broker_tasks.token();
        self.tasks.spawn_on(
            async move {
                let _held = held;
                task.await;
            },
            &self.runtime,
        );
    }

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
        let (reading, finished) = self.snapshot();
        let wanted = plan::rows_to_read(&listing, &reading, &finished);
        let (mut rows, unreadable) = self.read_rows(&wanted).await;
        plan::add_finished(&mut rows, &finished);
        for (shard, row) in &rows {
            if row.as_ref().is_some_and(crate::LeaseState::is_finished) {
                self.finished
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert(Arc::clone(shard));
            }
        }
        *self
            .last_listing
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = listing.clone();
        let skip =
            |shard: &ShardInfo| reading.contains(&shard.id) || unreadable.contains(&shard.id);
        let to_take = self.takeable(&listing, &rows, skip);
        let taken = join_all(to_take.into_iter().map(|shard| self.take(shard))).await;
        Ok(taken.into_iter().filter(|taken| *taken).count())
    }

    /// The rows of `wanted`: one `list` call where the store can list (and answers), a read per
    /// row otherwise; the shards whose row could not be read are reported and returned apart.
    async fn read_rows(&self, wanted: &[&Arc<str>]) -> (Rows, HashSet<Arc<str>>) {
        if wanted.is_empty() {
            return (Rows::new(), HashSet::new());
        }
        match self.store.list(&self.stream).await {
            Ok(Some(listed)) => return (listed_rows(wanted, listed), HashSet::new()),
            Ok(None) => {}
            // Reading row by row below reports what is wrong, naming each shard.
            Err(err) => {
                tracing::debug!(stream = %self.stream, error = %err, "listing the lease rows failed")
            }
        }
        self.read_each(wanted).await
    }

    /// The rows of `wanted`, a read each (in parallel); the shards whose row could not be read
    /// are reported and returned apart.
    async fn read_each(&self, wanted: &[&Arc<str>]) -> (Rows, HashSet<Arc<str>>) {
        let mut rows = Rows::new();
        let mut unreadable = HashSet::new();
        let reads = join_all(wanted.iter().map(|shard| async move {
            let key = LeaseKey::new(Arc::clone(&self.stream), Arc::clone(shard));
            (Arc::clone(shard), self.store.read(&key).await)
        }))
        .await;
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
        (rows, unreadable)
    }

    fn initial_position(&self) -> KinesisPosition {
        self.initial
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Between listings: whether the lease table shows a shard of the last listing that this
    /// instance could take now (released, expired, or its parents finished). One `list` call, or
    /// a read per waiting shard where the store cannot list; nothing while no shard waits.
    async fn takeable_between_listings(&self) -> bool {
        let listing = self
            .last_listing
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let (reading, finished) = self.snapshot();
        let wanted = plan::rows_to_read(&listing, &reading, &finished);
        if wanted.is_empty() {
            return false;
        }
        let mut rows = match self.store.list(&self.stream).await {
            Ok(Some(listed)) => listed_rows(&wanted, listed),
            Ok(None) => {
                let (rows, unreadable) = self.read_each(&wanted).await;
                if !unreadable.is_empty() {
                    return false;
                }
                rows
            }
            Err(err) => {
                tracing::debug!(stream = %self.stream, error = %err, "handover poll failed");
                return false;
            }
        };
        plan::add_finished(&mut rows, &finished);
        let skip = |shard: &ShardInfo| reading.contains(&shard.id) || finished.contains(&shard.id);
        !self.takeable(&listing, &rows, skip).is_empty()
    }

    /// What this instance reads and what it knows finished, as of now.
    fn snapshot(&self) -> (HashSet<Arc<str>>, HashSet<Arc<str>>) {
        let finished = self
            .finished
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        (self.reading(), finished)
    }

    /// The shards of `listing` that `plan::verdict` says to take, `skip` aside.
    fn takeable<'a>(
        &self,
        listing: &'a [ShardInfo],
        rows: &Rows,
        skip: impl Fn(&ShardInfo) -> bool,
    ) -> Vec<&'a ShardInfo> {
        let listed: HashSet<&str> = listing.iter().map(|s| s.id.as_ref()).collect();
        let initial = self.initial_position();
        let now_ms = epoch_millis();
        listing
            .iter()
            .filter(|shard| !skip(shard))
            .filter(|shard| {
                matches!(
                    plan::verdict(shard, &listed, rows, &self.owner, now_ms, &initial),
                    Verdict::Take { .. }
                )
            })
            .collect()
    }

    /// Takes the lease of `shard` and starts its reader; whether it now reads the shard.
    async fn take(self: &Arc<Self>, shard: &ShardInfo) -> bool {
        let key = LeaseKey::new(Arc::clone(&self.stream), Arc::clone(&shard.id));
        // Where a first owner starts: recorded by the take itself when the row has no
        // checkpoint, so an instance that takes the shard over before the first acknowledgement
        // starts no later than this one did.
        let initial = self.initial_position();
        let fresh = if !shard.parents.is_empty() {
            KinesisPosition::TrimHorizon
        } else if initial.applies_to(&shard.id) {
            initial
        } else {
            KinesisPosition::Latest
        };
        let recorded = ShardStart::At(fresh.clone()).to_checkpoint(epoch_millis());
        let sent = Sent::now();
        let state = match self
            .store
            .acquire_from(&key, &self.owner, self.timings.lease(), &recorded)
            .await
        {
            Ok(state) => state,
            // Another instance was faster: nothing to report.
            Err(err) if err.is_fenced() => return false,
            Err(err) => {
                self.report(self.lease_error(&shard.id, err));
                // The provided `acquire_from` may have taken the lease before failing.
                let _ = self.store.release(&key, &self.owner).await;
                return false;
            }
        };
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
            // The start this take recorded: read from the position itself (the tip stays the
            // tip, rather than the moment recorded for it).
            Some(checkpoint) if checkpoint == recorded => ShardStart::At(fresh),
            Some(checkpoint) => ShardStart::from_checkpoint(&shard.id, checkpoint),
            // A store whose take keeps no start: read from the position all the same.
            None => ShardStart::At(fresh),
        };
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
        handle.extend(sent, &self.timings);
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
        self.spawn(reader::run(reader));
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

/// Lists and takes every listing interval, sooner when a reader ended or the handover poll sees
/// a shard to take, until cancelled.
pub(crate) async fn run(sub: Arc<Subscription>) {
    let listing = sub.timings.listing_interval();
    let poll = sub.timings.handover_poll_interval();
    let mut next_listing = tokio::time::Instant::now() + listing;
    let mut next_poll = tokio::time::Instant::now() + poll;
    loop {
        let polling = !poll.is_zero();
        tokio::select! {
            biased;
            () = sub.cancel.cancelled() => return,
            () = tokio::time::sleep_until(next_listing) => {}
            () = sub.wake.notified() => {}
            () = tokio::time::sleep_until(next_poll), if polling => {
                next_poll = tokio::time::Instant::now() + poll;
                if !sub.takeable_between_listings().await {
                    continue;
                }
            }
        }
        if sub.cancel.is_cancelled() {
            return;
        }
        next_listing = tokio::time::Instant::now() + listing;
        if let Err(err) = sub.round().await {
            sub.report(err);
        }
    }
}

/// The rows a `list` call answered, with no row for each shard of `wanted` it did not show.
fn listed_rows(wanted: &[&Arc<str>], listed: Vec<(LeaseKey, crate::LeaseState)>) -> Rows {
    let mut rows: Rows = wanted
        .iter()
        .map(|shard| (Arc::clone(shard), None))
        .collect();
    for (key, row) in listed {
        rows.insert(Arc::from(key.shard()), Some(row));
    }
    rows
}

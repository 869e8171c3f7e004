//! Which shards this instance reads: it lists the shards when a subscription opens and every
//! listing interval, takes every shard that is free or whose lease expired (in parallel), and
//! starts a reader for each. The decisions are [`plan`]; this module does the I/O around them.

pub(crate) mod machine;
pub(crate) mod plan;
mod seek;

use std::collections::HashSet;
use std::sync::Arc;

use crate::clock::Instant;

use futures::future::join_all;

use crate::kinesis::api::{self, ShardInfo};
use crate::lease::{LeaseKey, epoch_millis};
use crate::live::reader::{self, Reader};
use crate::live::subscription::{Running, Subscription, lock};
use crate::shard::{ReadSettings, Sent, ShardHandle, ShardLease, ShardMachine};
use crate::{KinesisError, KinesisPosition};
use machine::{AfterTake, RoundPasses};
use plan::{Rows, TakeFor};

impl Subscription {
    fn reading(&self) -> HashSet<Arc<str>> {
        lock(&self.running).keys().cloned().collect()
    }

    /// One listing round: list, read the rows that matter, take what is free, start readers.
    pub(crate) async fn round(self: &Arc<Self>) -> Result<usize, KinesisError> {
        let listing = match api::list_shards(&self.client, &self.stream).await {
            Ok(listing) => listing,
            Err(err) => {
                if matches!(err, KinesisError::StreamNotFound { .. }) {
                    lock(&self.coordinator).stream_not_found();
                }
                return Err(err);
            }
        };
        let reading = self.reading();
        let wanted = {
            let mut coordinator = lock(&self.coordinator);
            coordinator.listed(&listing);
            coordinator.wanted(&listing, &reading)
        };
        let (mut rows, unreadable) = self.read_rows(&wanted).await;
        lock(&self.coordinator).round_rows(&listing, &mut rows);
        let mut passes = RoundPasses::new(listing, rows, &unreadable);
        let mut taken = 0;
        loop {
            let to_take = passes.next(
                &mut lock(&self.coordinator),
                &reading,
                &self.owner,
                Instant::now(),
                epoch_millis(),
            );
            if to_take.is_empty() {
                break;
            }
            let outcomes = join_all(
                to_take
                    .into_iter()
                    .map(|(shard, purpose)| async move { self.take(&shard, purpose).await }),
            )
            .await;
            taken += outcomes.into_iter().filter(|taken| *taken).count();
            if !passes.passed(&lock(&self.coordinator)) {
                break;
            }
        }
        Ok(taken)
    }

    /// The rows of `wanted`: one `list` call where the store can list (and answers), a read per
    /// row otherwise; the shards whose row could not be read are reported and returned apart.
    async fn read_rows(&self, wanted: &[Arc<str>]) -> (Rows, HashSet<Arc<str>>) {
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
    async fn read_each(&self, wanted: &[Arc<str>]) -> (Rows, HashSet<Arc<str>>) {
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

    /// Between listings: whether the lease table shows a shard of the last listing that this
    /// instance could take now (released, expired, or its parents finished). One `list` call, or
    /// a read per waiting shard where the store cannot list; nothing while no shard waits.
    async fn takeable_between_listings(&self) -> bool {
        let reading = self.reading();
        let wanted = lock(&self.coordinator).poll_wanted(&reading);
        if wanted.is_empty() {
            return false;
        }
        let rows = match self.store.list(&self.stream).await {
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
        lock(&self.coordinator).poll_finds_takeable(
            rows,
            &reading,
            &self.owner,
            Instant::now(),
            epoch_millis(),
        )
    }

    /// Sets where shards without a checkpoint start (a seek made while no shard is held): the
    /// shards skipped for starting at the tip are judged again.
    pub(crate) fn start_at(&self, initial: KinesisPosition) {
        lock(&self.coordinator).start_at(initial);
    }

    /// A take of `shard` failed after its lease was won (or may have been): reports it once, and
    /// leaves the shard alone for a backoff that doubles with each failure in a row.
    async fn take_failed(&self, shard: &Arc<str>, key: &LeaseKey, err: KinesisError) {
        let backoff = self.delay_take(shard);
        tracing::warn!(
            stream = %self.stream,
            shard = %shard,
            failures = backoff.failures,
            retry_in_ms = crate::lease::millis(backoff.until.saturating_duration_since(Instant::now())),
            error = %err,
            "taking the shard failed; it is tried again after a backoff"
        );
        let _ = self.tx.try_send(Err(err));
        // The take may have won the lease before failing: hand it back at once.
        let _ = self.store.release(key, &self.owner).await;
    }

    /// Takes the lease of `shard` and starts its reader; whether it now reads the shard. A row
    /// without a checkpoint starts where `purpose` says; a take for skipping marks it
    /// [`SHARD_SKIPPED`](crate::SHARD_SKIPPED) instead, and hands it back.
    async fn take(self: &Arc<Self>, shard: &ShardInfo, purpose: TakeFor) -> bool {
        let key = LeaseKey::new(Arc::clone(&self.stream), Arc::clone(&shard.id));
        // Where a first owner starts: recorded by the take itself when the row has no
        // checkpoint, so an instance that takes the shard over before the first acknowledgement
        // starts no later than this one did.
        let recorded = purpose.recorded(epoch_millis());
        let sent = Sent::now();
        let state = match self
            .store
            .acquire_from(&key, &self.owner, self.timings.lease(), &recorded)
            .await
        {
            Ok(state) => state,
            // Another instance was faster: nothing to report.
            Err(err) if err.is_fenced() => return false,
            // A row no take can use (an earlier version's, naming no stream) fails every take
            // the same way: back off.
            Err(err @ crate::LeaseError::LegacyRow { .. }) => {
                self.take_failed(&shard.id, &key, self.lease_error(&shard.id, err))
                    .await;
                return false;
            }
            // The store failed: the next listing (or a handover poll that reads the table again)
            // tries once more.
            Err(err) => {
                self.report(self.lease_error(&shard.id, err));
                // The provided `acquire_from` may have taken the lease before failing.
                let _ = self.store.release(&key, &self.owner).await;
                return false;
            }
        };
        let after = lock(&self.coordinator).after_take(
            &shard.id,
            state.checkpoint.as_deref(),
            &purpose,
            &recorded,
        );
        let (start, resume) = match after {
            AfterTake::Read { start, resume } => (start, resume),
            AfterTake::Finished | AfterTake::Unmarked => {
                let _ = self.store.release(&key, &self.owner).await;
                return false;
            }
            AfterTake::Skipped => {
                tracing::debug!(stream = %self.stream, shard = %shard.id, "closed shard never read and started at the tip: skipped");
                let _ = self.store.release(&key, &self.owner).await;
                // Its children were waiting for the mark: decide them now.
                self.wake.notify_one();
                return false;
            }
        };
        let iterator =
            match api::shard_iterator(&self.client, &self.stream, &shard.id, &start).await {
                Ok(iterator) => iterator,
                Err(err) => {
                    if matches!(err, KinesisError::ShardNotFound { .. }) {
                        self.forget(&shard.id);
                    }
                    self.take_failed(&shard.id, &key, err).await;
                    return false;
                }
            };
        lock(&self.coordinator).took(&shard.id);
        let machine = ShardMachine::new(
            ShardLease::taken(self.timings, sent.at, sent.at_ms),
            ReadSettings {
                batch_size: self.batch_size,
                poll_interval: self.poll_interval,
                window: self.window,
            },
            iterator,
            resume,
        );
        let handle = Arc::new(ShardHandle::new(
            key,
            Arc::clone(&self.broker_closed),
            machine,
        ));
        let cancel = self.cancel.child_token();
        lock(&self.running).insert(
            Arc::clone(&shard.id),
            Running {
                handle: Arc::clone(&handle),
            },
        );
        tracing::debug!(stream = %self.stream, shard = %shard.id, ?start, "reading shard");
        let reader = Reader {
            sub: Arc::clone(self),
            handle,
            shard: shard.id.clone(),
            cancel,
        };
        self.spawn(reader::run(reader));
        true
    }
}

/// Lists and takes every listing interval, sooner when a reader ended or the handover poll sees
/// a shard to take, until cancelled.
pub(crate) async fn run(sub: Arc<Subscription>) {
    let listing = sub.timings.listing_interval();
    let poll = sub.timings.handover_poll_interval();
    let mut next_listing = Instant::now() + listing;
    let mut next_poll = Instant::now() + poll;
    loop {
        let polling = !poll.is_zero();
        tokio::select! {
            biased;
            () = sub.cancel.cancelled() => return,
            () = tokio::time::sleep_until(next_listing) => {}
            () = sub.wake.notified() => {}
            () = tokio::time::sleep_until(next_poll), if polling => {
                next_poll = Instant::now() + poll;
                if !sub.takeable_between_listings().await {
                    continue;
                }
            }
        }
        if sub.cancel.is_cancelled() {
            return;
        }
        next_listing = Instant::now() + listing;
        if let Err(err) = sub.round().await {
            sub.report(err);
        }
    }
}

/// The rows a `list` call answered, with no row for each shard of `wanted` it did not show.
fn listed_rows(wanted: &[Arc<str>], listed: Vec<(LeaseKey, crate::LeaseState)>) -> Rows {
    let mut rows: Rows = wanted
        .iter()
        .map(|shard| (Arc::clone(shard), None))
        .collect();
    for (key, row) in listed {
        rows.insert(Arc::from(key.shard()), Some(row));
    }
    rows
}

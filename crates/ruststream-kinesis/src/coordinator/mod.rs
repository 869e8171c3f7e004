//! Which shards this instance reads: it lists the shards when a subscription opens and every
//! listing interval, takes every shard that is free or whose lease expired (in parallel), and
//! starts a reader for each. The decisions are [`plan`]; this module does the I/O around them.

pub(crate) mod plan;
mod seek;
#[cfg(test)]
mod simulation;

use std::collections::HashSet;
use std::sync::Arc;

use crate::clock::Instant;

use futures::future::join_all;

use crate::api::{self, ShardInfo};
use crate::lease::{LeaseKey, epoch_millis};
use crate::position::ShardStart;
use crate::reader::{self, Reader};
use crate::shard::{ReadSettings, Sent, ShardHandle, ShardLease, ShardMachine};
use crate::subscription::{Running, Subscription, lock};
use crate::{KinesisError, KinesisPosition};
use plan::{Rows, TakeFor, Verdict};

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
                    // A stream created again under this name has shards of the same ids.
                    lock(&self.gone).clear();
                    lock(&self.skipped).clear();
                    lock(&self.finished).clear();
                }
                return Err(err);
            }
        };
        self.forget_unlisted(&listing);
        let Snapshot {
            reading,
            settled,
            finished,
        } = self.snapshot();
        let wanted = plan::rows_to_read(&listing, &reading, &settled, &finished);
        let (mut rows, unreadable) = self.read_rows(&wanted).await;
        plan::add_finished(&mut rows, &finished);
        for (shard, row) in &rows {
            if row.as_ref().is_some_and(crate::LeaseState::is_finished) {
                lock(&self.finished).insert(Arc::clone(shard));
            }
        }
        *lock(&self.last_listing) = listing.clone();
        // A shard whose row, or an ancestor's, could not be read is left for a later round.
        let held_back = plan::held_back_by(&listing, &unreadable);
        let mut tried: HashSet<Arc<str>> = HashSet::new();
        let mut taken = 0;
        // Children wait for their never-read parents' marks: a pass that marks some decides
        // again at once, so a new subscription at the tip takes them in this round.
        // Bounded by the listing: each pass marks at least one shard.
        for _ in 0..=listing.len() {
            let skip = |shard: &ShardInfo| {
                reading.contains(&shard.id)
                    || held_back.contains(&shard.id)
                    || tried.contains(&shard.id)
            };
            let to_take = self.takeable(&listing, &rows, skip);
            if to_take.is_empty() {
                break;
            }
            let marking: Vec<Arc<str>> = to_take
                .iter()
                .filter(|(_, purpose)| *purpose == TakeFor::Skipping)
                .map(|(shard, _)| Arc::clone(&shard.id))
                .collect();
            tried.extend(to_take.iter().map(|(shard, _)| Arc::clone(&shard.id)));
            let outcomes = join_all(
                to_take
                    .into_iter()
                    .map(|(shard, purpose)| self.take(shard, purpose)),
            )
            .await;
            taken += outcomes.into_iter().filter(|taken| *taken).count();
            let skipped = lock(&self.skipped).clone();
            let marked: Vec<Arc<str>> = marking
                .into_iter()
                .filter(|shard| skipped.contains(shard))
                .collect();
            if marked.is_empty() {
                break;
            }
            for shard in marked {
                rows.insert(shard, Some(crate::LeaseState::skipped()));
            }
        }
        Ok(taken)
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
        lock(&self.initial).clone()
    }

    /// Between listings: whether the lease table shows a shard of the last listing that this
    /// instance could take now (released, expired, or its parents finished). One `list` call, or
    /// a read per waiting shard where the store cannot list; nothing while no shard waits.
    async fn takeable_between_listings(&self) -> bool {
        let listing = lock(&self.last_listing).clone();
        let Snapshot {
            reading,
            settled,
            finished,
        } = self.snapshot();
        let wanted = plan::rows_to_read(&listing, &reading, &settled, &finished);
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

    /// What this instance reads and knows of the shards, as of now.
    fn snapshot(&self) -> Snapshot {
        let finished = lock(&self.finished).clone();
        let mut settled = finished.clone();
        settled.extend(lock(&self.skipped).iter().cloned());
        settled.extend(lock(&self.gone).iter().cloned());
        Snapshot {
            reading: self.reading(),
            settled,
            finished,
        }
    }

    /// Forgets the shards a listing no longer shows: they cannot be taken, and a stream created
    /// again under the same name starts afresh.
    fn forget_unlisted(&self, listing: &[ShardInfo]) {
        let listed: HashSet<&str> = listing.iter().map(|shard| shard.id.as_ref()).collect();
        lock(&self.skipped).retain(|shard| listed.contains(shard.as_ref()));
        lock(&self.gone).retain(|shard| listed.contains(shard.as_ref()));
        lock(&self.take_backoff).retain(|shard, _| listed.contains(shard.as_ref()));
    }

    /// Sets where shards without a checkpoint start (a seek made while no shard is held): the
    /// shards skipped for starting at the tip are judged again.
    pub(crate) fn start_at(&self, initial: KinesisPosition) {
        *lock(&self.initial) = initial;
        lock(&self.skipped).clear();
    }

    /// The shards of `listing` that `plan::verdict` says to take, `skip` aside, and where each
    /// starts when its row has no checkpoint. Shards it says to skip are remembered, and shards
    /// whose takes keep failing wait out their backoff.
    fn takeable<'a>(
        &self,
        listing: &'a [ShardInfo],
        rows: &Rows,
        skip: impl Fn(&ShardInfo) -> bool,
    ) -> Vec<(&'a ShardInfo, TakeFor)> {
        let listed = plan::listed(listing);
        let initial = self.initial_position();
        let now_ms = epoch_millis();
        let now = Instant::now();
        let backoff = lock(&self.take_backoff).clone();
        let mut never = lock(&self.skipped).clone();
        never.extend(lock(&self.gone).iter().cloned());
        let mut takeable = Vec::new();
        for shard in listing {
            if skip(shard)
                || never.contains(&shard.id)
                || backoff.get(&shard.id).is_some_and(|wait| wait.until > now)
            {
                continue;
            }
            match plan::verdict(shard, &listed, rows, &self.owner, now_ms, &initial) {
                Verdict::Take { fresh } => takeable.push((shard, TakeFor::Reading(fresh))),
                Verdict::Skip => takeable.push((shard, TakeFor::Skipping)),
                Verdict::Skipped => {
                    lock(&self.skipped).insert(Arc::clone(&shard.id));
                }
                Verdict::Finished | Verdict::WaitForParents | Verdict::HeldElsewhere => {}
            }
        }
        takeable
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
        let skipping = purpose == TakeFor::Skipping;
        let recorded = purpose.recorded(epoch_millis());
        let fresh = match purpose {
            TakeFor::Reading(fresh) => fresh,
            // Unused: every answer to a marking take is handed back below, but one showing
            // another owner's recorded start, which the shard is then read from.
            TakeFor::Skipping => KinesisPosition::Latest,
        };
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
        // Decided again on the row the take returned: it is the authoritative one.
        let (start, resume) = match state.checkpoint.as_deref() {
            Some(crate::SHARD_END) => {
                lock(&self.finished).insert(Arc::clone(&shard.id));
                let _ = self.store.release(&key, &self.owner).await;
                return false;
            }
            // A store that records no start cannot mark it: left for a later round.
            None if skipping => {
                let _ = self.store.release(&key, &self.owner).await;
                return false;
            }
            // Never read (marked by this take, or by another instance's before it, whatever
            // this take was for).
            Some(crate::SHARD_SKIPPED) => {
                tracing::debug!(stream = %self.stream, shard = %shard.id, "closed shard never read and started at the tip: skipped");
                lock(&self.skipped).insert(Arc::clone(&shard.id));
                let _ = self.store.release(&key, &self.owner).await;
                // Its children were waiting for the mark: decide them now.
                self.wake.notify_one();
                return false;
            }
            // The start this take recorded (or would have, for a store that keeps none): the
            // first iterator reads from the position itself (the tip stays the tip), and every
            // later one without a delivered record from the moment recorded for it.
            Some(checkpoint) if checkpoint != recorded => {
                let start = ShardStart::from_checkpoint(&shard.id, checkpoint);
                (start.clone(), start)
            }
            _ => (
                ShardStart::At(fresh),
                ShardStart::from_checkpoint(&shard.id, &recorded),
            ),
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
        lock(&self.take_backoff).remove(&shard.id);
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

/// What a subscription reads and knows of its shards at one moment.
struct Snapshot {
    /// The shards it reads.
    reading: HashSet<Arc<str>>,
    /// The shards it never reads again: finished, skipped, or gone.
    settled: HashSet<Arc<str>>,
    /// The shards it knows were read to their end.
    finished: HashSet<Arc<str>>,
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

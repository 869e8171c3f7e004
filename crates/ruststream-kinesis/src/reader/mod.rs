//! One task per owned shard: it reads with `GetRecords` inside the service limits, renews the
//! lease, writes checkpoints as acknowledgements move the watermark, delivers again what handlers
//! hand back, and ends by handing the shard back (released, or `SHARD_END`).

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use crate::clock::Instant;

use rand::Rng;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::api::{self, Fetched};
use crate::message::{Hold, Settlement};
use crate::pace::{self, MIN_CALL_GAP, backoff_ceiling};
use crate::position::ShardStart;
use crate::record::Record;
use crate::seeker::Source;
use crate::shard::{Answer, Close, Ending, Lost, Next, Restart, ShardHandle, Write};
use crate::subscription::Subscription;
use crate::{KinesisError, KinesisMessage, KinesisSeeker, envelope};

/// Everything one shard's reader owns.
pub(crate) struct Reader {
    pub(crate) sub: Arc<Subscription>,
    pub(crate) handle: Arc<ShardHandle>,
    pub(crate) shard: Arc<str>,
    /// Where a fresh iterator starts while no record was delivered since the shard was taken or
    /// sought: its checkpoint, or the start its first owner recorded (a tip opened once stays
    /// that moment, never a later tip).
    pub(crate) resume: ShardStart,
    pub(crate) iterator: String,
    pub(crate) cancel: CancellationToken,
    pub(crate) restart: watch::Receiver<Option<Restart>>,
    /// A seek the reader's waits noticed and the read loop has still to apply.
    pub(crate) seek_seen: bool,
    /// The watermark generation of the current iterator's records: a seek resets the shard's
    /// generation before its restart reaches the reader, and until then the old iterator's
    /// records are not tracked.
    pub(crate) generation: u64,
}

/// Why a reader stopped reading.
#[derive(Debug, PartialEq, Eq)]
enum Stop {
    /// The shard is closed and read to its end: `GetRecords` answered without a next iterator.
    Ended,
    /// Shutdown, the subscription dropped, or the lease lost (then the handle is stopped).
    Cancelled,
    /// The shard left the stream (trimmed, or the stream deleted).
    Gone,
    /// No iterator could be had for a long while: the shard is handed back, and this instance
    /// leaves it alone for a backoff (another may fare better).
    Unreadable,
}

/// How many fresh iterators in a row Kinesis may refuse before the reader hands its shard back
/// (with the backoff between tries, about half a minute).
const ITERATOR_TRIES: u32 = 10;

/// Why a wait of the read loop ended early.
enum Interrupted {
    Stop(Stop),
    /// A seek arrived: the read loop applies it.
    Seek,
}

/// How waiting for a closed shard's deliveries to settle ended.
enum Drain {
    Done,
    Seek,
    Cancelled,
}

pub(crate) async fn run(mut reader: Reader) {
    let writer = write_lease(
        Arc::clone(&reader.sub),
        Arc::clone(&reader.handle),
        reader.cancel.clone(),
    );
    let redeliver = redeliver(
        Arc::clone(&reader.sub),
        Arc::clone(&reader.handle),
        Arc::clone(&reader.shard),
        reader.cancel.clone(),
    );
    let reading = async {
        let stop = loop {
            match reader.read().await {
                Stop::Ended => match reader.drain().await {
                    Drain::Seek => {}
                    Drain::Done => break Stop::Ended,
                    Drain::Cancelled => break Stop::Cancelled,
                },
                stop => break stop,
            }
        };
        reader.finish(stop).await
    };
    let ((), (), finished) = tokio::join!(writer, redeliver, reading);
    reader.sub.reader_ended(&reader.shard, finished);
}

/// Sends the store writes the shard's [`ShardLease`](crate::shard::ShardLease) asks for
/// (renewals, checkpoints, the closing writes), one at a time, and hands each answer back; sleeps
/// until the machine's next timer or until a settlement, the close or a stop wakes it. The
/// decisions are the machine's. Ends when the lease ended: lost (the shard's other tasks are
/// cancelled) or closed with its last writes.
async fn write_lease(sub: Arc<Subscription>, handle: Arc<ShardHandle>, cancel: CancellationToken) {
    let key = &handle.key;
    let lease = sub.timings.lease();
    loop {
        let wait = match handle.next_write() {
            Next::Send(write) => {
                let answered = match &write {
                    Write::Renew => sub.store.renew(key, &sub.owner, lease).await.map(|_| ()),
                    Write::Checkpoint(checkpoint) => {
                        sub.store
                            .checkpoint_and_renew(key, &sub.owner, checkpoint, lease)
                            .await
                    }
                    Write::Final(checkpoint) => {
                        sub.store.checkpoint(key, &sub.owner, checkpoint).await
                    }
                    Write::Release => sub.store.release(key, &sub.owner).await,
                };
                let answer = match answered {
                    Ok(()) => Answer::Done,
                    Err(err) if err.is_fenced() => Answer::Refused,
                    Err(err) => {
                        // Reported; what follows is the machine's (a retry, or after a final
                        // write that did not land, the lease left to lapse: the next owner reads
                        // on from the last checkpoint).
                        sub.report(sub.lease_error(key.shard(), err));
                        Answer::Failed
                    }
                };
                handle.answer(answer);
                continue;
            }
            Next::Wait(until) => until,
            Next::Ended(ending) => {
                match ending {
                    Ending::Lost(Lost::Refused) => {
                        tracing::info!(lease = %key, "lease lost; the shard stops without a checkpoint");
                    }
                    Ending::Lost(Lost::RanOut) => {
                        tracing::warn!(lease = %key, "lease ran out by this instance's clock; the shard stops without a checkpoint");
                    }
                    Ending::Closed { .. } => {}
                }
                // A lost lease ends the shard's other tasks; a closed one's already ended.
                cancel.cancel();
                return;
            }
        };
        let timer = async {
            match wait {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = handle.wake.notified() => {}
            () = timer => {}
        }
    }
}

/// Delivers again, when due, what handlers handed back (`nack(true)`, `nack_after`, a delivery
/// dropped unsettled), while the lease lasts.
async fn redeliver(
    sub: Arc<Subscription>,
    handle: Arc<ShardHandle>,
    shard: Arc<str>,
    cancel: CancellationToken,
) {
    loop {
        let (due, next) = handle.take_due(Instant::now());
        for waiting in due {
            if !handle.may_deliver() {
                handle.stop();
                cancel.cancel();
                return;
            }
            let message = deliver(
                &sub,
                &handle,
                &shard,
                waiting.record,
                waiting.ticket,
                waiting.attempts + 1,
            );
            tokio::select! {
                () = cancel.cancelled() => return,
                sent = sub.tx.send(Ok(message)) => {
                    if sent.is_err() {
                        return;
                    }
                }
            }
        }
        let wait = next.map_or(Duration::from_secs(3600), |at| {
            at.saturating_duration_since(Instant::now())
        });
        tokio::select! {
            () = cancel.cancelled() => return,
            () = handle.handed_back.notified() => {}
            () = tokio::time::sleep(wait) => {}
        }
    }
}

/// A delivery of `record` from `shard`, its `attempt`th.
fn deliver(
    sub: &Arc<Subscription>,
    handle: &Arc<ShardHandle>,
    shard: &Arc<str>,
    record: Record,
    ticket: crate::watermark::Ticket,
    attempt: u64,
) -> KinesisMessage {
    KinesisMessage {
        record,
        stream: Arc::clone(&sub.stream),
        shard: Arc::clone(shard),
        attempt,
        seeker: KinesisSeeker::new(Arc::clone(sub) as Arc<dyn Source>),
        refused: OnceLock::new(),
        settle: Some(Hold {
            target: Arc::clone(handle) as Arc<dyn Settlement>,
            ticket,
        }),
    }
}

impl Reader {
    /// The seek to apply, if one arrived.
    fn take_seek(&mut self) -> Option<Restart> {
        if std::mem::take(&mut self.seek_seen) || self.restart.has_changed().unwrap_or(false) {
            return self.restart.borrow_and_update().clone();
        }
        None
    }

    async fn read(&mut self) -> Stop {
        let mut iterator = Some(std::mem::take(&mut self.iterator)).filter(|it| !it.is_empty());
        let mut last_sequence: Option<Arc<str>> = None;
        let mut last_call = Instant::now() - MIN_CALL_GAP;
        let mut failures: u32 = 0;
        loop {
            if let Some(restart) = self.take_seek() {
                // The seeker reset the watermark and resolved the iterator before it returned.
                self.resume = restart.resume;
                self.generation = restart.generation;
                last_sequence = None;
                iterator = Some(restart.iterator);
            }
            let Some(current) = iterator.take() else {
                // Between a seek's reset and its restart: the restart follows at once.
                tokio::select! {
                    () = self.cancel.cancelled() => return Stop::Cancelled,
                    _ = self.restart.changed() => self.seek_seen = true,
                }
                continue;
            };
            // What a shard holds while a record stays unsettled is bounded: no reading ahead
            // past the window.
            while self.handle.unsettled() >= self.sub.window {
                tokio::select! {
                    () = self.cancel.cancelled() => return Stop::Cancelled,
                    () = self.handle.settled.notified() => {}
                    () = tokio::time::sleep(Duration::from_millis(200)) => {}
                    _ = self.restart.changed() => {
                        self.seek_seen = true;
                        break;
                    }
                }
            }
            if self.seek_seen {
                iterator = Some(current);
                continue;
            }
            let pace = tokio::time::sleep_until(last_call + MIN_CALL_GAP);
            tokio::select! {
                () = self.cancel.cancelled() => return Stop::Cancelled,
                () = pace => {}
            }
            last_call = Instant::now();
            let generation = self.generation;
            let fetched = tokio::select! {
                () = self.cancel.cancelled() => return Stop::Cancelled,
                fetched = api::get_records(&self.sub.client, &self.sub.stream, &self.shard, &current, self.sub.batch_size) => fetched,
            };
            match fetched {
                Ok(Fetched::Records {
                    records,
                    next,
                    millis_behind,
                }) => {
                    failures = 0;
                    let caught_up =
                        pace::caught_up(records.len(), self.sub.batch_size, millis_behind);
                    if let (Some(first), Some(last)) = (records.first(), records.last()) {
                        tracing::debug!(
                            lease = %self.handle.key,
                            records = records.len(),
                            first = %first.sequence,
                            last = %last.sequence,
                            "read"
                        );
                    }
                    for record in records {
                        if !self.handle.may_deliver() {
                            // The lease ran out by our clock (or was lost): deliver nothing more.
                            self.handle.stop();
                            return Stop::Cancelled;
                        }
                        let sequence = Arc::clone(&record.sequence);
                        let Some(ticket) = self.handle.track(Arc::clone(&sequence), generation)
                        else {
                            // A seek since the call: its position delivers what follows it.
                            break;
                        };
                        let (payload, headers) = envelope::decode(record.data);
                        let record = Record {
                            payload,
                            headers,
                            partition_key: record.partition_key,
                            sequence: Arc::clone(&sequence),
                            arrived_ms: record.arrived_ms,
                        };
                        let message =
                            deliver(&self.sub, &self.handle, &self.shard, record, ticket, 1);
                        tokio::select! {
                            () = self.cancel.cancelled() => return Stop::Cancelled,
                            sent = self.sub.tx.send(Ok(message)) => {
                                if sent.is_err() {
                                    return Stop::Cancelled;
                                }
                            }
                        }
                        last_sequence = Some(sequence);
                    }
                    match next {
                        Some(next) => iterator = Some(next),
                        // Closed, and read to its end: the only way a shard is finished.
                        None if !self.seek_seen => return Stop::Ended,
                        None => {}
                    }
                    if caught_up && iterator.is_some() {
                        // At the tip: one call per poll interval, counted from this one.
                        let due = last_call + self.sub.poll_interval;
                        tokio::select! {
                            () = self.cancel.cancelled() => return Stop::Cancelled,
                            () = tokio::time::sleep_until(due) => {}
                            _ = self.restart.changed() => self.seek_seen = true,
                        }
                    }
                }
                Ok(Fetched::Expired) => {
                    // Resume after the last record handed out, or where the shard started.
                    match self.fresh_iterator(last_sequence.clone()).await {
                        Ok(fresh) => iterator = Some(fresh),
                        Err(Interrupted::Stop(stop)) => return stop,
                        Err(Interrupted::Seek) => {}
                    }
                }
                Ok(Fetched::Throttled) => {
                    failures += 1;
                    iterator = Some(current);
                    if let Some(stop) = self.back_off(failures).await {
                        return stop;
                    }
                }
                Ok(Fetched::Gone) => return Stop::Gone,
                Err(err) => {
                    failures += 1;
                    self.sub.report(err);
                    iterator = Some(current);
                    if let Some(stop) = self.back_off(failures).await {
                        return stop;
                    }
                }
            }
        }
    }

    /// A new iterator after `after`, or where the shard resumes; retried with backoff while
    /// Kinesis fails it, up to [`ITERATOR_TRIES`] times (a shard whose iterator cannot be had is
    /// not finished: it is handed back unread). A seek meanwhile interrupts the tries.
    async fn fresh_iterator(&mut self, after: Option<Arc<str>>) -> Result<String, Interrupted> {
        let start = after.map_or_else(|| self.resume.clone(), ShardStart::After);
        let mut failures = 0;
        loop {
            match api::shard_iterator(&self.sub.client, &self.sub.stream, &self.shard, &start).await
            {
                Ok(iterator) => return Ok(iterator),
                Err(KinesisError::ShardNotFound { .. }) => {
                    return Err(Interrupted::Stop(Stop::Gone));
                }
                Err(err) => {
                    failures += 1;
                    self.sub.report(err);
                    if failures >= ITERATOR_TRIES {
                        return Err(Interrupted::Stop(Stop::Unreadable));
                    }
                    if let Some(stop) = self.back_off(failures).await {
                        return Err(Interrupted::Stop(stop));
                    }
                    if self.seek_seen {
                        return Err(Interrupted::Seek);
                    }
                }
            }
        }
    }

    /// Sleeps a jittered exponential backoff; the stop when cancelled meanwhile. A seek ends the
    /// wait early (and is left for the read loop to apply).
    async fn back_off(&mut self, failures: u32) -> Option<Stop> {
        let wait = rand::rng().random_range(MIN_CALL_GAP..=backoff_ceiling(failures));
        tokio::select! {
            () = self.cancel.cancelled() => Some(Stop::Cancelled),
            () = tokio::time::sleep(wait) => None,
            _ = self.restart.changed() => {
                self.seek_seen = true;
                None
            }
        }
    }

    /// Waits until every delivery of a shard read to its end is settled, so its children start
    /// after all of it; a seek meanwhile sends the reader back to reading.
    async fn drain(&mut self) -> Drain {
        loop {
            if self.handle.is_stopped() {
                return Drain::Cancelled;
            }
            if self.seek_seen || self.restart.has_changed().unwrap_or(false) {
                return Drain::Seek;
            }
            if self.handle.generation() != self.generation {
                // A seek reset the shard and its restart follows at once: read from it.
                tokio::select! {
                    () = self.cancel.cancelled() => return Drain::Cancelled,
                    _ = self.restart.changed() => {
                        self.seek_seen = true;
                        return Drain::Seek;
                    }
                }
            }
            if self.handle.is_drained() {
                return Drain::Done;
            }
            tokio::select! {
                () = self.cancel.cancelled() => return Drain::Cancelled,
                () = self.handle.settled.notified() => {}
                () = tokio::time::sleep(Duration::from_millis(200)) => {}
                _ = self.restart.changed() => {
                    self.seek_seen = true;
                    return Drain::Seek;
                }
            }
        }
    }

    /// Hands the shard back; whether it was read to its end.
    async fn finish(&self, stop: Stop) -> bool {
        let key = &self.handle.key;
        if self.handle.is_lost() {
            // Lost, or ran out by our clock: no checkpoint, no release.
            self.cancel.cancel();
            return false;
        }
        let how = match stop {
            Stop::Ended => Close::Finished,
            Stop::Gone => {
                tracing::info!(
                    lease = %key,
                    "the shard left the stream (trimmed, or the stream was deleted); its lease is \
                     released and it is not read again"
                );
                self.sub.forget(&self.shard);
                Close::Release
            }
            Stop::Unreadable => {
                tracing::warn!(
                    lease = %key,
                    "no iterator of the shard could be had; it is handed back and tried again after a backoff"
                );
                self.sub.delay_take(&self.shard);
                Close::Release
            }
            Stop::Cancelled => Close::Release,
        };
        self.cancel.cancel();
        let ending = self.handle.close(how).await;
        let finished = how == Close::Finished && ending == Ending::Closed { written: true };
        if finished {
            tracing::info!(lease = %key, "shard read to its end");
        }
        finished
    }
}

#[cfg(test)]
mod tests;

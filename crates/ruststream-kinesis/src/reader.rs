//! One task per owned shard: it reads with `GetRecords` inside the service limits, renews the
//! lease, writes checkpoints as acknowledgements move the watermark, and ends by handing the
//! shard back (released, or `SHARD_END`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::Rng;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::api::{self, Fetched};
use crate::coordinator::Subscription;
use crate::coordinator::keeper::{KeeperAction, LeaseKeeper};
use crate::message::Settle;
use crate::pace::{self, MIN_CALL_GAP, backoff_ceiling};
use crate::position::ShardStart;
use crate::shard::{Sent, ShardHandle};
use crate::{KinesisMessage, KinesisPosition, SHARD_END, envelope};

/// Everything one shard's reader owns.
pub(crate) struct Reader {
    pub(crate) sub: Arc<Subscription>,
    pub(crate) handle: Arc<ShardHandle>,
    pub(crate) shard: Arc<str>,
    pub(crate) start: ShardStart,
    pub(crate) iterator: String,
    pub(crate) cancel: CancellationToken,
    pub(crate) restart: watch::Receiver<Option<KinesisPosition>>,
}

/// Why a reader stopped.
#[derive(Debug, PartialEq, Eq)]
enum Stop {
    /// The shard is closed and read to its end.
    Ended,
    /// Shutdown, the subscription dropped, or the lease lost (then the handle is stopped).
    Cancelled,
}

pub(crate) async fn run(mut reader: Reader) {
    let keeper = keep_lease(
        Arc::clone(&reader.sub),
        Arc::clone(&reader.handle),
        reader.cancel.clone(),
    );
    let writer = write_checkpoints(
        Arc::clone(&reader.sub),
        Arc::clone(&reader.handle),
        reader.cancel.clone(),
    );
    let reading = async {
        let stop = reader.read().await;
        reader.finish(stop).await
    };
    let ((), (), finished) = tokio::join!(keeper, writer, reading);
    reader.sub.reader_ended(&reader.shard, finished);
}

/// Renews the lease every renewal interval. A refused renewal stops the shard at once; a failed
/// one is retried while the lease is valid by this instance's clock, and the shard stops before
/// that moment. The decisions are the [`LeaseKeeper`]'s; this function sends and sleeps.
async fn keep_lease(sub: Arc<Subscription>, handle: Arc<ShardHandle>, cancel: CancellationToken) {
    let timings = sub.timings;
    // The take set how long the lease it won may be used.
    let Some(valid_until) = handle.valid_until() else {
        return;
    };
    let mut keeper = LeaseKeeper::new(timings, valid_until, Instant::now());
    loop {
        let wait = keeper
            .next_renewal()
            .saturating_duration_since(Instant::now());
        tokio::select! {
            () = cancel.cancelled() => return,
            () = tokio::time::sleep(wait) => {}
        }
        // One write that sets the expiry in flight per shard: a renewal and a checkpoint (which
        // also renews) racing could land in the other order and move the expiry back while this
        // instance counts from the later one.
        let writing = tokio::select! {
            () = cancel.cancelled() => return,
            writing = handle.writing.lock() => writing,
        };
        if handle.is_stopped() {
            // Stopped elsewhere (a refused checkpoint, a lapsed lease seen by a delivery): end
            // the shard's tasks rather than keep a lease nobody reads under.
            cancel.cancel();
            return;
        }
        if let Some(sent) = handle.take_renewed() {
            // A checkpoint write renewed the lease meanwhile (and extended the handle): the next
            // renewal moves out.
            keeper.on_renewed(sent);
            if keeper.next_renewal() > Instant::now() {
                continue;
            }
        }
        let sent = Sent::now();
        let renewed = sub
            .store
            .renew(&handle.key, &sub.owner, timings.lease())
            .await;
        drop(writing);
        let action = match renewed {
            Ok(_) => {
                keeper.on_renewed(sent.at);
                handle.extend(sent, &timings);
                continue;
            }
            Err(err) if err.is_fenced() => {
                tracing::info!(lease = %handle.key, "lease lost; the shard stops without a checkpoint");
                keeper.on_refused()
            }
            Err(err) => {
                sub.report(sub.lease_error(handle.key.shard(), err));
                let action = keeper.on_failed(Instant::now());
                if matches!(action, KeeperAction::Stop { .. }) {
                    tracing::warn!(lease = %handle.key, "lease ran out while the store failed; the shard stops");
                }
                action
            }
        };
        if let KeeperAction::Stop { checkpoint } = action {
            // Neither stop allows a final checkpoint: a stopped handle writes none.
            debug_assert!(!checkpoint);
            handle.stop();
            cancel.cancel();
            return;
        }
    }
}

/// Writes each pending checkpoint; while one call is in flight later acknowledgements fold into
/// the next one.
async fn write_checkpoints(
    sub: Arc<Subscription>,
    handle: Arc<ShardHandle>,
    cancel: CancellationToken,
) {
    loop {
        tokio::select! {
            () = cancel.cancelled() => return,
            () = handle.wake.notified() => {}
        }
        if handle.is_stopped() {
            return;
        }
        match handle
            .write_pending(sub.store.as_ref(), &sub.owner, &sub.timings)
            .await
        {
            Ok(()) => {
                // The cadence: acknowledgements until then fold into the next write.
                let cadence = sub.timings.checkpoint_every();
                if !cadence.is_zero() {
                    tokio::select! {
                        () = cancel.cancelled() => return,
                        () = tokio::time::sleep(cadence) => {}
                    }
                }
            }
            Err(err) if err.is_fenced() => {
                handle.stop();
                cancel.cancel();
                return;
            }
            Err(err) => {
                sub.report(sub.lease_error(handle.key.shard(), err));
                tokio::select! {
                    () = cancel.cancelled() => return,
                    () = tokio::time::sleep(sub.timings.renew() / 3) => {}
                }
                handle.wake.notify_one();
            }
        }
    }
}

impl Reader {
    async fn read(&mut self) -> Stop {
        let mut iterator = Some(std::mem::take(&mut self.iterator));
        let mut last_sequence: Option<Arc<str>> = None;
        let mut last_call = Instant::now() - MIN_CALL_GAP;
        let mut failures: u32 = 0;
        let mut seek_seen = false;
        loop {
            // `changed()` in the idle wait below marks the seek seen, so it sets `seek_seen`.
            if std::mem::take(&mut seek_seen) || self.restart.has_changed().unwrap_or(false) {
                let position = self.restart.borrow_and_update().clone();
                if let Some(position) = position {
                    self.handle.reset();
                    self.start = ShardStart::At(position);
                    last_sequence = None;
                    iterator = self.fresh_iterator(None).await;
                }
            }
            let Some(current) = iterator.take() else {
                return Stop::Ended;
            };
            let pace = tokio::time::sleep_until((last_call + MIN_CALL_GAP).into());
            tokio::select! {
                () = self.cancel.cancelled() => return Stop::Cancelled,
                () = pace => {}
            }
            last_call = Instant::now();
            let generation = self.handle.generation();
            let fetched = tokio::select! {
                () = self.cancel.cancelled() => return Stop::Cancelled,
                fetched = api::get_records(&self.sub.client, &self.sub.stream, &current, self.sub.batch_size) => fetched,
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
                    for record in records {
                        if !self.handle.may_deliver() {
                            // The lease ran out by our clock (or was lost): deliver nothing more.
                            self.handle.stop();
                            return Stop::Cancelled;
                        }
                        let sequence = Arc::clone(&record.sequence);
                        let Some(ticket) = self.handle.track(Arc::clone(&sequence), generation)
                        else {
                            break;
                        };
                        let (payload, headers) = envelope::decode(record.data);
                        let message = KinesisMessage {
                            payload,
                            headers,
                            partition_key: record.partition_key,
                            stream: Arc::clone(&self.sub.stream),
                            shard: Arc::clone(&self.shard),
                            sequence: Arc::clone(&sequence),
                            arrived_ms: record.arrived_ms,
                            generation: ticket.generation,
                            settle: Some(Settle::Live {
                                shard: Arc::clone(&self.handle),
                                ticket,
                            }),
                        };
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
                    iterator = next;
                    if caught_up && iterator.is_some() {
                        // At the tip: one call per poll interval, counted from this one.
                        let due = last_call + self.sub.poll_interval;
                        tokio::select! {
                            () = self.cancel.cancelled() => return Stop::Cancelled,
                            () = tokio::time::sleep_until(due.into()) => {}
                            _ = self.restart.changed() => seek_seen = true,
                        }
                    }
                }
                Ok(Fetched::Expired) => {
                    // Resume after the last record handed out, or where the shard started.
                    iterator = self.fresh_iterator(last_sequence.clone()).await;
                }
                Ok(Fetched::Throttled) => {
                    failures += 1;
                    iterator = Some(current);
                    if self.back_off(failures).await {
                        return Stop::Cancelled;
                    }
                }
                Err(err) => {
                    failures += 1;
                    self.sub.report(err);
                    iterator = Some(current);
                    if self.back_off(failures).await {
                        return Stop::Cancelled;
                    }
                }
            }
        }
    }

    /// A new iterator after `after`, or at the shard's start; retried with backoff until the
    /// reader is cancelled.
    async fn fresh_iterator(&self, after: Option<Arc<str>>) -> Option<String> {
        let start = after.map_or_else(|| self.start.clone(), ShardStart::After);
        let mut failures = 0;
        loop {
            match api::shard_iterator(&self.sub.client, &self.sub.stream, &self.shard, &start).await
            {
                Ok(iterator) => return Some(iterator),
                Err(err) => {
                    failures += 1;
                    self.sub.report(err);
                    if self.back_off(failures).await {
                        return None;
                    }
                }
            }
        }
    }

    /// Sleeps a jittered exponential backoff; true when cancelled meanwhile.
    async fn back_off(&self, failures: u32) -> bool {
        let wait = rand::rng().random_range(MIN_CALL_GAP..=backoff_ceiling(failures));
        tokio::select! {
            () = self.cancel.cancelled() => true,
            () = tokio::time::sleep(wait) => false,
        }
    }

    /// Hands the shard back; whether it was read to its end.
    async fn finish(&self, stop: Stop) -> bool {
        let store = self.sub.store.as_ref();
        let owner = &self.sub.owner;
        let key = &self.handle.key;
        if self.handle.is_stopped() {
            // Lost, or ran out by our clock: no checkpoint, no release.
            self.handle.stop();
            self.cancel.cancel();
            return false;
        }
        match stop {
            Stop::Ended => {
                // Every delivery settled first, so the children start after all of this shard.
                while !self.handle.is_drained() {
                    let settled = self.handle.settled.notified();
                    tokio::select! {
                        () = self.cancel.cancelled() => break,
                        () = settled => {}
                        () = tokio::time::sleep(Duration::from_millis(200)) => {}
                    }
                    if self.handle.is_stopped() {
                        return false;
                    }
                }
                if !self.handle.is_drained() {
                    return self.release_graceful().await;
                }
                self.cancel.cancel();
                let writing = self.handle.writing.lock().await;
                // SHARD_END covers every settled record; a checkpoint still pending would land
                // after it and move the shard back.
                let _ = self.handle.take_pending();
                if let Err(err) = store.checkpoint(key, owner, SHARD_END).await {
                    // Not finished in the table: keep the lease until it lapses, and the next
                    // owner reads the shard's end again from the last checkpoint.
                    self.sub.report(self.sub.lease_error(key.shard(), err));
                    return false;
                }
                let released = store.release(key, owner).await;
                drop(writing);
                if let Err(err) = released
                    && !err.is_fenced()
                {
                    self.sub.report(self.sub.lease_error(key.shard(), err));
                }
                tracing::info!(lease = %key, "shard read to its end");
                true
            }
            Stop::Cancelled => self.release_graceful().await,
        }
    }

    /// A graceful stop: deliver nothing more, write the final checkpoint, release.
    async fn release_graceful(&self) -> bool {
        self.handle.stop();
        self.cancel.cancel();
        let store = self.sub.store.as_ref();
        if let Err(err) = self
            .handle
            .write_pending(store, &self.sub.owner, &self.sub.timings)
            .await
        {
            if !err.is_fenced() {
                self.sub
                    .report(self.sub.lease_error(self.handle.key.shard(), err));
            }
            return false;
        }
        if let Err(err) = store.release(&self.handle.key, &self.sub.owner).await
            && !err.is_fenced()
        {
            self.sub
                .report(self.sub.lease_error(self.handle.key.shard(), err));
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use std::future::{Future, ready};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::{Duration, Instant};

    use serde_json::{Value, json};

    use crate::fake_kinesis;
    use crate::prelude::*;

    /// Counts what it handles.
    struct Count(Arc<AtomicUsize>);

    impl Handle<u32> for Count {
        fn handle(
            &self,
            _n: &u32,
            _outs: &(),
            _ctx: &mut Context<'_>,
        ) -> impl Future<Output = Result<(), HandlerOutcome>> {
            self.0.fetch_add(1, Ordering::SeqCst);
            ready(Ok(()))
        }
    }

    /// A `GetRecords` answer of `records` JSON `1`s, `MillisBehindLatest` `behind`.
    fn records(first: u64, records: u64, behind: i64) -> Value {
        let records: Vec<Value> = (first..first + records)
            .map(|n| json!({ "Data": "MQ==", "PartitionKey": "k", "SequenceNumber": format!("{:056}", n) }))
            .collect();
        json!({ "Records": records, "NextShardIterator": "next", "MillisBehindLatest": behind })
    }

    /// One open shard of `orders`, and `GetRecords` answers in this order: a full batch (behind
    /// whatever `MillisBehindLatest` says), an empty answer far from the tip (behind), one record
    /// at the tip (caught up), then records at the tip for ever.
    fn one_shard(operation: &str, gets: &AtomicUsize) -> (u16, Value) {
        let answer = match operation {
            "DescribeStreamSummary" => json!({ "StreamDescriptionSummary": {
                "StreamName": "orders",
                "StreamARN": "arn:aws:kinesis:us-east-1:000000000000:stream/orders",
                "StreamStatus": "ACTIVE",
                "RetentionPeriodHours": 24,
                "StreamCreationTimestamp": 0,
                "EnhancedMonitoring": [],
                "OpenShardCount": 1,
            }}),
            "ListShards" => json!({ "Shards": [{
                "ShardId": "shardId-000000000000",
                "HashKeyRange": {
                    "StartingHashKey": "0",
                    "EndingHashKey": "340282366920938463463374607431768211455",
                },
                "SequenceNumberRange": { "StartingSequenceNumber": format!("{:056}", 0) },
            }]}),
            "GetShardIterator" => json!({ "ShardIterator": "first" }),
            "GetRecords" => match gets.fetch_add(1, Ordering::SeqCst) {
                0 => records(1, 2, 0),
                1 => records(3, 0, 60_000),
                2 => records(3, 1, 0),
                n => records(10 * n as u64, 1, 0),
            },
            other => return (400, fake_kinesis::error(&format!("Unexpected{other}"))),
        };
        (200, answer)
    }

    fn get_records_calls(seen: &fake_kinesis::Seen) -> usize {
        let seen = seen.lock().unwrap();
        seen.iter().filter(|(op, _)| op == "GetRecords").count()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_reader_reads_on_while_behind_and_once_per_poll_interval_at_the_tip() {
        let gets = Arc::new(AtomicUsize::new(0));
        let answers = Arc::clone(&gets);
        let (config, seen) = fake_kinesis::config(move |_, op, _| one_shard(op, &answers));
        let handled = Arc::new(AtomicUsize::new(0));
        let stream = KinesisStream::new("orders")
            .batch_size(2)
            .poll_interval(Duration::from_secs(60));
        let count = Count(Arc::clone(&handled));
        let app = RustStream::new(AppInfo::new("pace", "0.1.0")).with_broker(
            KinesisBroker::from_config(config),
            |b| {
                b.include(subscriber(stream, count).build());
            },
        );
        let running = app
            .start()
            .await
            .expect("the app starts on the fake Kinesis");

        // Behind (a full batch, then an empty answer 60 s from the tip): no poll interval
        // between the calls, so the third comes long before the 60 s one would allow.
        let deadline = Instant::now() + Duration::from_secs(30);
        while get_records_calls(&seen) < 3 {
            assert!(
                Instant::now() < deadline,
                "a reader behind the tip waited a poll interval: {} GetRecords calls",
                get_records_calls(&seen)
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // At the tip (one record, MillisBehindLatest 0): the next call waits the interval.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert_eq!(
            get_records_calls(&seen),
            3,
            "a caught-up reader called again before its poll interval"
        );
        assert_eq!(handled.load(Ordering::SeqCst), 3);
        running.shutdown().await.expect("shutdown");
    }
}

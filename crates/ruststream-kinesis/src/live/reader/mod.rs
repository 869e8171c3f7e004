//! One shard's tasks: the reader, the lease writer and the redelivery of handed-back records.
//! They execute what the shard's [`ShardMachine`](crate::shard::ShardMachine) asks (a Kinesis
//! call, a delivery, a store write, a wait) and hand it the answers; they decide nothing. The
//! shard ends by being handed back (released, or `SHARD_END`).

use std::sync::{Arc, OnceLock};

use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::clock::Instant;
use crate::clock::sleep_until;
use crate::delivery::message::{Hold, Settlement};
use crate::delivery::record::{self, Record};
use crate::delivery::seeker::Source;
use crate::kinesis::api::{self, Fetched, FetchedRecord};
use crate::kinesis::fan_out::{self, Event, Events, Refused};
use crate::kinesis::kpl;
use crate::lease::LeaseKey;
use crate::live::subscription::{Subscription, lock};
use crate::settings::position::ShardStart;
use crate::shard::read::EVENT_SILENCE_LIMIT;
use crate::shard::{
    Answer, Call, Close, Ending, Fetch, Lost, Next, ReadStep, Redeliver, ShardHandle, Stall, Stop,
    Write,
};
use crate::telemetry::{LeaseEvent, ReadRetry};
use crate::{KinesisError, KinesisMessage, KinesisSeeker};

/// Everything one shard's tasks own.
pub(crate) struct Reader {
    pub(crate) sub: Arc<Subscription>,
    pub(crate) handle: Arc<ShardHandle>,
    pub(crate) shard: Arc<str>,
    pub(crate) cancel: CancellationToken,
}

pub(crate) async fn run(reader: Reader) {
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
        let stop = reader.read().await;
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
                    Write::Renew => sub.store.renew(key, &sub.owner, lease).await.map(Some),
                    Write::Checkpoint {
                        checkpoint,
                        behind_ms,
                    } => sub
                        .store
                        .checkpoint_and_renew_behind(key, &sub.owner, checkpoint, *behind_ms, lease)
                        .await
                        .map(Some),
                    Write::Final(checkpoint) => sub
                        .store
                        .checkpoint(key, &sub.owner, checkpoint)
                        .instrument(
                            tracing::info_span!("lease_final_checkpoint", checkpoint = %checkpoint),
                        )
                        .await
                        .map(|()| None),
                    Write::Release => {
                        let released = sub
                            .store
                            .release(key, &sub.owner)
                            .instrument(tracing::info_span!("lease_release"))
                            .await;
                        if released.is_ok() {
                            sub.meters
                                .lease_event(key.stream(), &sub.owner, LeaseEvent::Released);
                            tracing::info!(
                                stream = %key.stream(),
                                shard = %key.shard(),
                                owner = %sub.owner,
                                "lease released"
                            );
                        }
                        released.map(|()| None)
                    }
                    Write::HandOver { to, checkpoint } => {
                        let handed = sub
                            .store
                            .hand_over(key, &sub.owner, to, checkpoint.as_deref(), lease)
                            .instrument(tracing::info_span!("lease_hand_over", to = %to))
                            .await;
                        if handed.is_ok() {
                            sub.meters.lease_event(
                                key.stream(),
                                &sub.owner,
                                LeaseEvent::HandedOver,
                            );
                            tracing::info!(
                                stream = %key.stream(),
                                shard = %key.shard(),
                                owner = %sub.owner,
                                to = %to,
                                "lease handed over (a planned move)"
                            );
                        }
                        handed.map(|()| None)
                    }
                };
                let (answer, row) = match answered {
                    Ok(row) => (Answer::Done, row),
                    Err(err) if err.is_fenced() => {
                        // A refused renewal or checkpoint ends the machine as lost (logged
                        // below); a refused closing write ends it as closed, so say it here.
                        if matches!(write, Write::Final(_) | Write::Release) {
                            sub.meters
                                .lease_event(key.stream(), &sub.owner, LeaseEvent::Lost);
                            tracing::info!(
                                stream = %key.stream(),
                                shard = %key.shard(),
                                owner = %sub.owner,
                                "lease lost while handing the shard back (the store refused the \
                                 write: another instance holds the shard, or its row was \
                                 deleted); the final checkpoint was not written"
                            );
                        }
                        (Answer::Refused, None)
                    }
                    Err(err) => {
                        // Reported; what follows is the machine's (a retry, or after a final
                        // write that did not land, the lease left to lapse: the next owner reads
                        // on from the last checkpoint).
                        sub.report(sub.lease_error(key.shard(), err));
                        (Answer::Failed, None)
                    }
                };
                let lag = handle.answer(answer);
                sub.meters.checkpoint_lag(key.stream(), key.shard(), lag);
                if let Some(stall) = handle.stall_check(sub.stall_after) {
                    stalled(&sub, key, stall);
                }
                if let Some(row) = row {
                    handle.row_seen(&row, &sub.owner);
                }
                continue;
            }
            Next::Wait(until) => until,
            Next::Ended(ending) => {
                match ending {
                    Ending::Lost(Lost::Refused) => {
                        sub.meters
                            .lease_event(key.stream(), &sub.owner, LeaseEvent::Lost);
                        tracing::info!(
                            stream = %key.stream(),
                            shard = %key.shard(),
                            owner = %sub.owner,
                            "lease lost (the store refused a renewal: another instance holds \
                             the shard, or its row was deleted); the shard stops without a \
                             checkpoint"
                        );
                    }
                    // Not the steady state: renewals kept failing, or the process stalled.
                    Ending::Lost(Lost::RanOut) => {
                        sub.meters
                            .lease_event(key.stream(), &sub.owner, LeaseEvent::Expired);
                        tracing::warn!(
                            stream = %key.stream(),
                            shard = %key.shard(),
                            owner = %sub.owner,
                            "lease lost (it ran out by this instance's clock); the shard stops \
                             without a checkpoint"
                        );
                    }
                    Ending::Closed { .. } => {}
                }
                // A lost lease ends the shard's other tasks; a closed one's already ended.
                cancel.cancel();
                return;
            }
        };
        let timer = sleep_until(wait);
        tokio::select! {
            () = handle.wake.notified() => {}
            () = timer => {}
        }
    }
}

/// Says that the shard of `key` stalled, or moves again: a WARN naming the stream, the shard and
/// the owner, and the gauge; an INFO when it is over.
fn stalled(sub: &Subscription, key: &LeaseKey, stall: Stall) {
    let (stream, shard) = (key.stream(), key.shard());
    match stall {
        Stall::Began { quiet, behind_ms } => {
            sub.meters.shard_stalled(stream, shard, true);
            tracing::warn!(
                stream,
                shard,
                owner = %sub.owner,
                quiet_ms = crate::lease::millis(quiet),
                behind_ms,
                "the shard stalled: records wait behind it and it delivered nothing for {quiet:?} \
                 (a handler that does not settle in a full window, reads that keep failing, no \
                 iterator); KinesisStream::stall_after sets the bound"
            );
        }
        Stall::Ended => {
            sub.meters.shard_stalled(stream, shard, false);
            tracing::info!(stream, shard, owner = %sub.owner, "the shard delivers again");
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
        let wait = match handle.next_redelivery() {
            Redeliver::Deliver(waiting) => {
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
                continue;
            }
            // The lease ran out by our clock: the shard's reader sees it and stops.
            Redeliver::Halted => return,
            Redeliver::Wait(until) => until,
        };
        let timer = sleep_until(wait);
        tokio::select! {
            () = cancel.cancelled() => return,
            () = handle.handed_back.notified() => {}
            () = timer => {}
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

/// How a call of the reader ended.
enum Answered {
    Fetch(Fetch<Record>),
    /// The reader was cancelled.
    Cancelled,
    /// The subscription's next event was no longer wanted.
    Unwanted,
}

impl Reader {
    /// Reads until the shard's machine says reading is over, and why.
    async fn read(&self) -> Stop {
        let handle = &self.handle;
        // The open enhanced fan-out subscription, if any: dropped (which closes it) by any other
        // call, and with the reader.
        let mut events = None;
        loop {
            match handle.next_read() {
                ReadStep::Call(call) => {
                    let awaits_event = call == Call::NextEvent;
                    let answered = {
                        let fetch = self.call(call, &mut events);
                        tokio::pin!(fetch);
                        loop {
                            tokio::select! {
                                () = self.cancel.cancelled() => break Answered::Cancelled,
                                fetch = &mut fetch => break Answered::Fetch(fetch),
                                // A quiet shard's next event may be seconds away: a seek, a
                                // planned move or a close drops the subscription instead.
                                () = handle.read_wake.notified(), if awaits_event => {
                                    if handle.event_unwanted() {
                                        break Answered::Unwanted;
                                    }
                                }
                            }
                        }
                    };
                    match answered {
                        Answered::Fetch(fetch) => handle.read_answered(fetch),
                        Answered::Cancelled => handle.cancel_reading(),
                        Answered::Unwanted => {
                            events = None;
                            handle.read_answered(Fetch::SubscriptionEnded);
                        }
                    }
                }
                ReadStep::Deliver(record, ticket) => {
                    let message = deliver(&self.sub, handle, &self.shard, record, ticket, 1);
                    // A delivery dropped unsent (a cancel) is handed back by its drop, and stays
                    // unsettled: the shard is handed back without it.
                    let sent = tokio::select! {
                        () = self.cancel.cancelled() => false,
                        sent = self.sub.tx.send(Ok(message)) => sent.is_ok(),
                    };
                    if !sent {
                        handle.cancel_reading();
                    }
                }
                ReadStep::Wait(until) => {
                    let timer = sleep_until(until);
                    tokio::select! {
                        () = self.cancel.cancelled() => handle.cancel_reading(),
                        () = handle.read_wake.notified() => {}
                        () = timer => {}
                    }
                }
                ReadStep::Finish(stop) => return stop,
            }
        }
    }

    /// Makes one Kinesis call; reports a failure, which the machine backs off from.
    async fn call(&self, call: Call, events: &mut Option<Events>) -> Fetch<Record> {
        let sub = &self.sub;
        if call != Call::NextEvent {
            *events = None;
        }
        match call {
            Call::Subscribe(start) => self.subscribe(&start, events).await,
            Call::NextEvent => self.next_event(events).await,
            Call::GetRecords(iterator) => {
                let fetched = api::get_records(
                    &sub.client,
                    &sub.stream,
                    &self.shard,
                    &iterator,
                    sub.batch_size,
                )
                .await;
                match fetched {
                    Ok(Fetched::Records {
                        records,
                        next,
                        millis_behind,
                    }) => {
                        if let (Some(first), Some(last)) = (records.first(), records.last()) {
                            tracing::debug!(
                                lease = %self.handle.key,
                                records = records.len(),
                                first = %first.sequence,
                                last = %last.sequence,
                                "read"
                            );
                        }
                        let records = self.decoded(records, millis_behind);
                        Fetch::Records {
                            records,
                            next,
                            millis_behind,
                        }
                    }
                    Ok(Fetched::Expired) => {
                        sub.meters.iterator_reset(&sub.stream, &self.shard);
                        Fetch::Expired
                    }
                    Ok(Fetched::Throttled) => {
                        sub.meters
                            .read_retry(&sub.stream, &self.shard, ReadRetry::Throttled);
                        Fetch::Failed
                    }
                    Ok(Fetched::Gone) => Fetch::Gone,
                    Err(err) => {
                        sub.meters
                            .read_retry(&sub.stream, &self.shard, ReadRetry::Failed);
                        sub.report(err);
                        Fetch::Failed
                    }
                }
            }
            Call::GetIterator(start) => {
                match api::shard_iterator(&sub.client, &sub.stream, &self.shard, &start).await {
                    Ok(iterator) => Fetch::Iterator(iterator),
                    Err(KinesisError::ShardNotFound { .. }) => Fetch::Gone,
                    Err(err) => {
                        sub.meters
                            .read_retry(&sub.stream, &self.shard, ReadRetry::Failed);
                        sub.report(err);
                        Fetch::IteratorFailed
                    }
                }
            }
        }
    }

    /// Counts what one answer or event read, and decodes its records (KPL aggregates into
    /// their user records).
    fn decoded(&self, records: Vec<FetchedRecord>, millis_behind: Option<i64>) -> Vec<Record> {
        let sub = &self.sub;
        // Nothing is looked at for the metrics unless something counts.
        let counting = sub.meters.counting();
        if counting {
            let bytes = records.iter().map(|r| r.data.len() as u64).sum();
            sub.meters.read(
                &sub.stream,
                &self.shard,
                records.len() as u64,
                bytes,
                millis_behind,
            );
        }
        let messages: Vec<Record> = records
            .into_iter()
            .flat_map(|fetched| {
                let aggregated = counting && kpl::has_magic(&fetched.data);
                let decoded = record::decoded(fetched);
                if aggregated && decoded.is_plain() {
                    sub.meters.decode_failure(&sub.stream, &self.shard);
                }
                decoded
            })
            .collect();
        if counting {
            sub.meters
                .consumed(&sub.stream, &self.shard, messages.len() as u64);
        }
        messages
    }

    /// `SubscribeToShard` at `start`; the subscription opened is kept in `events`.
    async fn subscribe(&self, start: &ShardStart, events: &mut Option<Events>) -> Fetch<Record> {
        let sub = &self.sub;
        let consumer = sub
            .fan_out
            .as_ref()
            .expect("a fan-out reader's subscription has a consumer");
        match fan_out::subscribe(&sub.client, &sub.stream, consumer, &self.shard, start).await {
            Ok(opened) => {
                tracing::debug!(lease = %self.handle.key, consumer = %consumer.name, %start, "subscribed");
                *events = Some(opened);
                Fetch::Subscribed
            }
            Err(refused) => self.refused(refused).await,
        }
    }

    /// What a refused or failed subscription answers the machine: reported unless it is only
    /// in use.
    async fn refused(&self, refused: Refused) -> Fetch<Record> {
        let sub = &self.sub;
        match refused {
            Refused::Gone => self.gone_or_consumer_missing().await,
            Refused::InUse => {
                // Another subscription of the consumer to the shard is still open (a previous
                // holder's, or ours of a moment ago): backed off and tried again.
                tracing::debug!(lease = %self.handle.key, "subscription in use; tried again after a backoff");
                sub.meters
                    .read_retry(&sub.stream, &self.shard, ReadRetry::Throttled);
                Fetch::Failed
            }
            Refused::Failed(err) => {
                sub.meters
                    .read_retry(&sub.stream, &self.shard, ReadRetry::Failed);
                sub.report(err);
                Fetch::Failed
            }
        }
    }

    /// What a subscription's `ResourceNotFoundException` means: the service says it of a shard
    /// that left the stream and of a consumer it does not know (deregistered since startup).
    /// Only a shard Kinesis no longer lists is gone; for a missing consumer the error is
    /// reported and the subscription backed off, and the shard stays this instance's.
    async fn gone_or_consumer_missing(&self) -> Fetch<Record> {
        let sub = &self.sub;
        let start = ShardStart::At(crate::KinesisPosition::TrimHorizon);
        match api::shard_iterator(&sub.client, &sub.stream, &self.shard, &start).await {
            Err(KinesisError::ShardNotFound { .. }) => Fetch::Gone,
            _ => {
                let consumer = sub
                    .fan_out
                    .as_ref()
                    .map_or("?", |consumer| consumer.name.as_ref());
                sub.meters
                    .read_retry(&sub.stream, &self.shard, ReadRetry::Failed);
                sub.report(KinesisError::Api {
                    stream: sub.stream.to_string(),
                    operation: "SubscribeToShard",
                    message: format!(
                        "shard {}, consumer {consumer}: the service does not know the consumer \
                         (deregistered since the subscription started?); the shard is tried \
                         again after a backoff, and a restart registers the consumer again",
                        self.shard
                    ),
                });
                Fetch::Failed
            }
        }
    }

    /// The open subscription's next event, waited for at most [`EVENT_SILENCE_LIMIT`].
    async fn next_event(&self, events: &mut Option<Events>) -> Fetch<Record> {
        let sub = &self.sub;
        let (Some(open), Some(consumer)) = (events.as_mut(), sub.fan_out.as_ref()) else {
            return Fetch::SubscriptionEnded;
        };
        let next = tokio::time::timeout(
            EVENT_SILENCE_LIMIT,
            fan_out::next_event(open, &sub.stream, consumer, &self.shard),
        )
        .await;
        match next {
            Ok(Ok(Event::Records {
                records,
                continuation,
                millis_behind,
                ended,
            })) => Fetch::Event {
                records: self.decoded(records, millis_behind),
                continuation,
                millis_behind,
                ended,
            },
            Ok(Ok(Event::Ended)) => {
                *events = None;
                tracing::info!(
                    stream = %sub.stream,
                    shard = %self.shard,
                    consumer = %consumer.name,
                    "the enhanced fan-out subscription ended (a subscription lasts five minutes); \
                     subscribing again from where it got to"
                );
                Fetch::SubscriptionEnded
            }
            Ok(Err(refused)) => {
                *events = None;
                self.refused(refused).await
            }
            Err(_) => {
                *events = None;
                sub.meters
                    .read_retry(&sub.stream, &self.shard, ReadRetry::Failed);
                tracing::warn!(
                    lease = %self.handle.key,
                    silent_s = EVENT_SILENCE_LIMIT.as_secs(),
                    "the enhanced fan-out subscription sent nothing for too long; subscribing again"
                );
                Fetch::Failed
            }
        }
    }

    /// Hands the shard back as `stop` says; whether it was read to its end.
    async fn finish(&self, stop: Stop) -> bool {
        let key = &self.handle.key;
        match stop {
            Stop::Gone => {
                tracing::info!(
                    stream = %key.stream(),
                    shard = %key.shard(),
                    owner = %self.sub.owner,
                    "the shard left the stream (trimmed, or the stream was deleted); its lease is \
                     released and it is not read again"
                );
            }
            Stop::Unreadable => {
                tracing::warn!(
                    stream = %key.stream(),
                    shard = %key.shard(),
                    owner = %self.sub.owner,
                    "no iterator of the shard could be had; it is handed back and tried again after a backoff"
                );
            }
            Stop::Ended | Stop::Cancelled | Stop::Lost | Stop::HandedOver => {}
        }
        lock(&self.sub.coordinator).reader_stopped(
            &self.shard,
            stop,
            Instant::now(),
            rand::random(),
        );
        self.cancel.cancel();
        // Lost, or ran out by our clock: no checkpoint, no release.
        let Some(how) = stop.close() else {
            return false;
        };
        let ending = self.handle.close(how).await;
        let finished = how == Close::Finished && ending == Ending::Closed { written: true };
        if finished {
            self.sub
                .meters
                .lease_event(key.stream(), &self.sub.owner, LeaseEvent::Finished);
            tracing::info!(
                stream = %key.stream(),
                shard = %key.shard(),
                owner = %self.sub.owner,
                "shard read to its end (checkpoint SHARD_END)"
            );
        }
        finished
    }
}

#[cfg(test)]
mod tests;

//! One shard's tasks: the reader, the lease writer and the redelivery of handed-back records.
//! They execute what the shard's [`ShardMachine`](crate::shard::ShardMachine) asks (a Kinesis
//! call, a delivery, a store write, a wait) and hand it the answers; they decide nothing. The
//! shard ends by being handed back (released, or `SHARD_END`).

use std::pin::{Pin, pin};
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use futures::stream::{FuturesUnordered, StreamExt};
use tokio::sync::futures::Notified;
use tokio::sync::{Notify, mpsc};
use tokio::time::Sleep;

use tokio_util::sync::{CancellationToken, WaitForCancellationFuture};
use tracing::Instrument;

use crate::KinesisError;
use crate::clock::{Instant, sleep_until};
use crate::delivery::message::Origin;
use crate::delivery::outlet::{HANDED_AT_ONCE, Items};
use crate::delivery::record::{self, Record};
use crate::delivery::run::{MakeDelivery, Run};
use crate::kinesis::api::{AnswerRecords, Fetched};
use crate::kinesis::calls::{Events, Kinesis};
use crate::kinesis::fan_out::{Consumer, Event, Refused};
use crate::kinesis::iterator::ShardIterator;
use crate::kinesis::kpl;
use crate::lease::{LeaseKey, LeaseState, LeaseStore};
use crate::live::subscription::Subscription;
use crate::settings::position::ShardStart;
use crate::shard::{
    Answer, Call, Close, Ending, Fetch, LeaseNews, Next, ReadStep, Redeliver, ShardHandle, Stall,
    Stop, Write,
};
use crate::telemetry::{ReadRetry, ShardCount, ShardMeters};
use crate::watermark::Ticket;

mod buffers;
mod commit;
mod deliverer;
mod env;
mod news;

use buffers::Buffers;
use deliverer::Deliverer;

/// One shard reader's world (made in `env.rs`).
#[derive(Debug)]
pub(crate) struct ShardEnv {
    owner: Arc<str>,
    store: Arc<dyn LeaseStore>,
    kinesis: Kinesis,
    meters: ShardMeters,
    /// How long a lease the store writes.
    lease: Duration,
    batch_size: u32,
    /// How long a subscription may send nothing before it counts as dead; `None`: no limit.
    event_silence: Option<Duration>,
    /// How long the shard may deliver nothing while records wait before it counts as stalled.
    stall_after: Duration,
    /// The enhanced fan-out consumer the shard is read through; `None`: polling.
    fan_out: Option<Consumer>,
    /// Whether handlers' staged writes commit with the checkpoint (exactly once).
    #[cfg(feature = "dynamodb-lease")]
    exactly_once: bool,
    /// The store's transactions, which commit them (exactly once only).
    #[cfg(feature = "dynamodb-lease")]
    transactions: Option<crate::lease::Transactions>,
    /// What the store knows of the tables commits write, which every delivery's staging reads
    /// (exactly once): asked of the store once, not at every delivery.
    #[cfg(feature = "dynamodb-lease")]
    commit_tables: Option<crate::lease::CommitTables>,
    tx: mpsc::Sender<Items>,
    /// Its stream and shard, and the subscription's seeker: what every delivery of the shard
    /// carries of where it comes from.
    origin: Arc<Origin>,
    /// The subscription the shard is read for.
    home: Arc<Subscription>,
}

/// Everything one shard's tasks own.
pub(crate) struct Reader {
    env: Arc<ShardEnv>,
    handle: Arc<ShardHandle>,
    /// Makes the shard's deliveries, here and where the subscriber takes a run of them.
    deliverer: Arc<Deliverer>,
    cancel: CancellationToken,
}

impl Reader {
    /// The reader of `handle`'s shard in `env`, stopped by `cancel`.
    pub(crate) fn new(
        env: Arc<ShardEnv>,
        handle: Arc<ShardHandle>,
        cancel: CancellationToken,
    ) -> Self {
        Self {
            deliverer: Arc::new(Deliverer::of(&env, &handle)),
            env,
            handle,
            cancel,
        }
    }
}

/// What every end of a shard's reader does, however it ended (a panicking task included): a
/// reader that did not end by itself stops delivering at once (the deliveries it handed out fail
/// their settlement); what was settled and never committed is the next owner's; the harness and
/// the meters hear of it; the coordinator forgets the shard, and the beat need not outlast it.
struct Ended {
    env: Arc<ShardEnv>,
    handle: Arc<ShardHandle>,
    /// Whether the reader finished the shard; `None` until its tasks ended by themselves.
    finished: Option<bool>,
}

impl Drop for Ended {
    fn drop(&mut self) {
        if self.finished.is_none() {
            self.handle.abandon();
        }
        // Exactly once: what was settled and never committed is the next owner's to deliver
        // again.
        #[cfg(feature = "dynamodb-lease")]
        self.handle.units_ended();
        // In process: what the reader still owes the harness is delivered by no one now.
        #[cfg(feature = "testing")]
        if let Some(tap) = self.handle.harness().tap() {
            tap.close();
        }
        self.env.meters.reader_ended();
        self.env
            .home
            .reader_ended(&self.env.origin.shard, self.finished.unwrap_or(false));
    }
}

pub(crate) async fn run(reader: Reader) {
    let mut ended = Ended {
        env: Arc::clone(&reader.env),
        handle: Arc::clone(&reader.handle),
        finished: None,
    };
    let writer = write_lease(
        Arc::clone(&reader.env),
        Arc::clone(&reader.handle),
        reader.cancel.clone(),
    );
    let redeliver = redeliver(
        Arc::clone(&reader.env),
        (Arc::clone(&reader.handle), Arc::clone(&reader.deliverer)),
        reader.cancel.clone(),
    );
    let reading = async {
        let stop = reader.read().await;
        reader.finish(stop).await
    };
    ended.finished = Some(together(writer, redeliver, reading).await);
}

/// Runs the shard's three tasks in one, each polled only when it was woken (`tokio::join!` polls
/// every branch on any wake, and the reader is woken for every record in process); answers the
/// reading's result once all three ended.
async fn together(
    writer: impl Future<Output = ()> + Send,
    redeliver: impl Future<Output = ()> + Send,
    reading: impl Future<Output = bool> + Send,
) -> bool {
    let mut tasks = FuturesUnordered::new();
    tasks.push(writer.map(|()| None).boxed());
    tasks.push(redeliver.map(|()| None).boxed());
    tasks.push(reading.map(Some).boxed());
    let mut finished = false;
    while let Some(ended) = tasks.next().await {
        finished |= ended.unwrap_or(false);
    }
    finished
}

/// Sends the store writes the shard's [`ShardLease`](crate::shard::ShardLease) asks for
/// (renewals, checkpoints, the closing writes), one at a time, and hands each answer back; says
/// what the machine tells happened to the lease; sleeps until the machine's next timer or until
/// a settlement, the close or a stop wakes it. The decisions are the machine's. Ends when the
/// lease ended: lost (the shard's other tasks are cancelled) or closed with its last writes.
async fn write_lease(env: Arc<ShardEnv>, handle: Arc<ShardHandle>, cancel: CancellationToken) {
    let key = handle.key();
    // Kept from one wait to the next while the machine's timer stays where it was (wakes come
    // often: a settlement that makes a checkpoint pending, a beat, and a new timer each time
    // cost more than the turn).
    let mut woken = pin!(handle.writer_wake());
    let mut timer: Option<(Instant, Pin<Box<Sleep>>)> = None;
    loop {
        let wait = match handle.next_write() {
            Next::Send(write) => {
                // No timer stays registered while the store answers (a paused clock would
                // jump to it).
                timer = None;
                let (answer, row) = send(&env, &handle, key, &write).await;
                let answered = handle.answer(answer, row.as_ref(), &env.owner, env.stall_after);
                say_news(&env, &answered.news);
                env.meters.checkpoint_lag(answered.lag);
                if let Some(stall) = answered.stall {
                    stalled(&env, stall);
                }
                continue;
            }
            Next::Wait(until) => until,
            Next::Ended(_) => {
                say_news(&env, &handle.take_news());
                // A lost lease ends the shard's other tasks; a closed one's already ended.
                cancel.cancel();
                return;
            }
        };
        let Some(until) = wait else {
            woken.as_mut().await;
            woken.set(handle.writer_wake());
            continue;
        };
        let sleep = match &mut timer {
            Some((at, sleep)) if *at == until => sleep,
            _ => {
                &mut timer
                    .insert((until, Box::pin(tokio::time::sleep_until(until))))
                    .1
            }
        };
        let fired = tokio::select! {
            biased;
            () = &mut woken => {
                woken.set(handle.writer_wake());
                false
            }
            () = sleep.as_mut() => true,
        };
        if fired {
            timer = None;
        }
    }
}

/// Sends `write` to the store: how it was answered, and the row a renewing write answered with.
async fn send(
    env: &ShardEnv,
    handle: &ShardHandle,
    key: &LeaseKey,
    write: &Write,
) -> (Answer, Option<LeaseState>) {
    let (store, owner, lease) = (&env.store, &env.owner, env.lease);
    let answered = match write {
        Write::Renew => store.renew(key, owner, lease).await.map(Some),
        Write::Checkpoint {
            checkpoint,
            behind_ms,
        } => store
            .checkpoint_and_renew_behind(key, owner, checkpoint, *behind_ms, lease)
            .await
            .map(Some),
        Write::Final(checkpoint) => store
            .checkpoint(key, owner, checkpoint)
            .instrument(tracing::info_span!("lease_final_checkpoint", checkpoint = %checkpoint))
            .await
            .map(|()| None),
        Write::Release => store
            .release(key, owner)
            .instrument(tracing::info_span!("lease_release"))
            .await
            .map(|()| None),
        Write::HandOver { to, checkpoint } => store
            .hand_over(key, owner, to, checkpoint.as_deref(), lease)
            .instrument(tracing::info_span!("lease_hand_over", to = %to))
            .await
            .map(|()| None),
        Write::Commit(commit) => return commit::send(env, handle, key, commit).await,
    };
    match answered {
        Ok(row) => (Answer::Done, row),
        // What a refusal means (lost, or lost while handing back) is the machine's to say.
        Err(err) if err.is_fenced() => (Answer::Refused, None),
        Err(err) => {
            // Reported; what follows is the machine's (a retry, or after a final write that did
            // not land, the lease left to lapse: the next owner reads on from the last
            // checkpoint).
            env.lease_failed(err);
            (Answer::Failed, None)
        }
    }
}

/// Says what the shard's machine tells happened to its lease.
fn say_news(env: &ShardEnv, news: &[LeaseNews]) {
    for one in news {
        news::say(env, one);
    }
}

/// Says that the shard of `key` stalled, or moves again: a WARN (inside the reader's span, which
/// names the stream, the shard and the owner) and the gauge; an INFO when it is over.
fn stalled(env: &ShardEnv, stall: Stall) {
    match stall {
        Stall::Began { quiet, behind_ms } => {
            env.meters.stalled(true);
            tracing::warn!(
                quiet_ms = crate::lease::millis(quiet),
                behind_ms,
                "the shard stalled: records wait behind it and it delivered nothing for {quiet:?} \
                 (a handler that does not settle in a full window, reads that keep failing, no \
                 iterator); KinesisStream::stall_after sets the bound"
            );
        }
        Stall::Ended => {
            env.meters.stalled(false);
            tracing::info!("the shard delivers again");
        }
    }
}

/// Delivers again, when due, what handlers handed back (`nack(true)`, `nack_after`, a delivery
/// dropped unsettled), while the lease lasts.
async fn redeliver(
    env: Arc<ShardEnv>,
    (handle, deliverer): (Arc<ShardHandle>, Arc<Deliverer>),
    cancel: CancellationToken,
) {
    loop {
        let wait = match handle.next_redelivery() {
            Redeliver::Deliver(waiting) => {
                let message =
                    deliverer.deliver(waiting.record, waiting.ticket, waiting.attempts + 1);
                tokio::select! {
                    () = cancel.cancelled() => return,
                    sent = env.tx.send(Items::one(message)) => {
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
        #[cfg(feature = "testing")]
        handle.release_if_quiet();
        let timer = sleep_until(wait);
        tokio::select! {
            () = cancel.cancelled() => return,
            () = handle.redelivery_wake() => {}
            () = timer => {}
        }
    }
}

/// What tells the reader of a write to its shard: the tap's news in process; from the
/// service, which tells nothing, `silent`.
fn news_source<'a>(handle: &'a ShardHandle, silent: &'a Notify) -> &'a Notify {
    #[cfg(feature = "testing")]
    if let Some(tap) = handle.harness().tap() {
        return tap.news();
    }
    let _ = handle;
    silent
}

/// A step of the reader, as the shard's machine decides it.
type Step = ReadStep<Record, Instant>;

/// The records handed out behind a delivery, taken together with it, under the tickets
/// following its own ([`Ticket::following`]): last first, as the shard hands them out.
type HandedOut = Vec<Record>;

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
        let mut buffers = Buffers::default();
        // What wakes the reader, kept from one turn to the next (in process a record takes
        // several turns, and building these anew each turn cost as much as the turn): a
        // notification is replaced once it fired.
        let silent = Notify::new();
        let news_of = news_source(handle, &silent);
        let mut cancelled = pin!(self.cancel.cancelled());
        let mut woken = pin!(handle.reader_wake());
        let mut news = pin!(news_of.notified());
        // The step an answer's handling already decided, if any.
        let mut decided = None;
        // The records handed out behind a delivery, taken together.
        // Room for a whole batch at once, as the machine hands one out: grown step by step, the
        // records would be copied at every step.
        let mut more = Vec::with_capacity(HANDED_AT_ONCE);
        loop {
            let step = decided
                .take()
                .unwrap_or_else(|| handle.next_reads((self.batch_room(), &mut more)));
            match step {
                ReadStep::Call(call) => {
                    decided = self
                        .call_until_stopped(
                            call,
                            (&mut events, &mut buffers, &mut more),
                            cancelled.as_mut(),
                            woken.as_mut(),
                        )
                        .await;
                }
                ReadStep::Deliver(record, ticket) => {
                    let messages = self.delivered(Items::default(), (record, ticket), &mut more);
                    // A delivery dropped unsent (a cancel) is handed back by its drop, and stays
                    // unsettled: the shard is handed back without it. The channel has room
                    // most of the time: the send goes then without a wait, so without polling
                    // the cancel's future (865 instructions a record in process, by callgrind).
                    let sent = if self.cancel.is_cancelled() {
                        false
                    } else {
                        match self.env.tx.try_send(messages) {
                            Ok(()) => {
                                // The awaited send counted against the task's budget, so
                                // batches handed out to a channel with room yield to the
                                // runtime now and then; this keeps that.
                                tokio::task::consume_budget().await;
                                true
                            }
                            Err(mpsc::error::TrySendError::Closed(_)) => false,
                            Err(mpsc::error::TrySendError::Full(messages)) => {
                                self.send_when_room(
                                    messages,
                                    cancelled.as_mut(),
                                    (&mut decided, &mut more),
                                )
                                .await
                            }
                        }
                    };
                    if !sent {
                        handle.cancel_reading();
                    }
                }
                ReadStep::Wait(until) => {
                    #[cfg(feature = "testing")]
                    handle.release_if_quiet();
                    if self.cancel.is_cancelled() {
                        handle.cancel_reading();
                        continue;
                    }
                    let timer = sleep_until(until);
                    // A stop comes first: checked by its flag above, and its future polled last
                    // (in process a wake or news is often there already, and polling the
                    // cancel's future costs more than the turn).
                    tokio::select! {
                        biased;
                        () = &mut woken => woken.set(handle.reader_wake()),
                        () = &mut news => {
                            news.set(news_of.notified());
                            #[cfg(feature = "testing")]
                            handle.news();
                        }
                        () = &mut cancelled => handle.cancel_reading(),
                        () = timer => {}
                    }
                }
                ReadStep::Finish(stop) => return stop,
            }
        }
    }

    /// How many records to hand out at once. With room in the channel, the records a fetch
    /// brought go out together; without, one is handed out and waits for room alone, and the
    /// room, when it comes, is filled ([`send_when_room`](Self::send_when_room)), as the
    /// simulation's reader does. (A reader whose room another shard's reader took first waits
    /// with its batch: a reservation made at every turn cost more than the batch saved in
    /// process.)
    fn batch_room(&self) -> usize {
        if self.env.tx.capacity() > 0 {
            HANDED_AT_ONCE
        } else {
            1
        }
    }

    /// What goes in one send: `before` (records handed out earlier that waited for room), then
    /// the delivery of the record handed out under `ticket` and those of the records handed
    /// out with it (taken from `more`). Records handed out together with nothing before them go
    /// as a run, made deliveries where the subscriber takes them ([`Run`]); `more` is then a new
    /// list.
    fn delivered(
        &self,
        before: Items,
        (record, ticket): (Record, Ticket),
        more: &mut HandedOut,
    ) -> Items {
        if before.is_empty() {
            if more.is_empty() {
                return Items::one(self.deliverer.deliver(record, ticket, 1));
            }
            let rest = std::mem::replace(more, self.deliverer.take_list());
            return Items::Run(Run::new(
                record,
                ticket,
                rest,
                Arc::clone(&self.deliverer) as Arc<dyn MakeDelivery>,
            ));
        }
        let mut messages = before.into_list(&self.env.home.tx.spares);
        messages.reserve(1 + more.len());
        messages.extend(
            crate::shard::handed_in_order(record, ticket, more.drain(..))
                .map(|(record, ticket)| self.deliverer.deliver(record, ticket, 1)),
        );
        Items::of(messages)
    }

    /// Sends `messages` once the channel has room, unless a cancel comes first; `false` when
    /// they were not sent. The room, when it comes, is filled: tokio hands a slot the receiver
    /// freed straight to a sender waiting for one, so a reader that waited never sees room
    /// again by [`Sender::capacity`](mpsc::Sender::capacity), and without this would go on
    /// sending a record at a time while handlers lag. What the machine hands out once the
    /// room came (asked again, through all its checks, since time passed) goes in the same
    /// send; a step that is not a delivery is the reader's next, in `decided`.
    async fn send_when_room<'a>(
        &'a self,
        messages: Items,
        cancelled: Pin<&mut WaitForCancellationFuture<'a>>,
        (decided, more): (&mut Option<Step>, &mut HandedOut),
    ) -> bool {
        let permit = tokio::select! {
            biased;
            () = cancelled => return false,
            permit = self.env.tx.reserve() => match permit {
                Ok(permit) => permit,
                Err(_) => return false,
            },
        };
        // A stop that came while the room did hands out nothing more: what waited goes, and
        // the next turn sees the stop.
        let room = if self.cancel.is_cancelled() {
            0
        } else {
            HANDED_AT_ONCE.saturating_sub(messages.len())
        };
        let messages = if room == 0 {
            messages
        } else {
            match self.handle.next_reads((room, more)) {
                ReadStep::Deliver(record, ticket) => {
                    self.delivered(messages, (record, ticket), more)
                }
                step => {
                    *decided = Some(step);
                    messages
                }
            }
        };
        permit.send(messages);
        true
    }

    /// Makes `call` unless a cancel comes first, or, waiting for a subscription's next event, a
    /// wake that leaves the event unwanted (a quiet shard's next event may be seconds away: a
    /// seek, a handoff or a close drops the subscription instead). Answers the step the answer
    /// decided (a delivery with the records handed out with it in `more`); `None` after a
    /// cancel.
    async fn call_until_stopped<'a>(
        &'a self,
        call: Call,
        (events, buffers, more): (&mut Option<Events>, &mut Buffers, &mut HandedOut),
        mut cancelled: Pin<&mut WaitForCancellationFuture<'a>>,
        mut woken: Pin<&mut Notified<'a>>,
    ) -> Option<Step> {
        let handle = &self.handle;
        let awaits_event = call == Call::NextEvent;
        // In process, a fan-out reader is quiet where its subscription brings its next event;
        // any other call drops the subscription, and a new one starts elsewhere. (A polling
        // reader never subscribes.)
        #[cfg(feature = "testing")]
        if events.is_some() || matches!(call, Call::Subscribe(_)) {
            handle.events_at(if awaits_event {
                events.as_ref().and_then(Events::in_process_position)
            } else {
                None
            });
        }
        let answered = {
            let mut fetch = pin!(self.call(call, events, buffers));
            // A call that answers at once (in process, always) answers without the select: the
            // cancel is checked by its flag, not by polling its future.
            let first = if self.cancel.is_cancelled() {
                Some(Answered::Cancelled)
            } else {
                match futures::poll!(fetch.as_mut()) {
                    std::task::Poll::Ready(fetch) => Some(Answered::Fetch(fetch)),
                    std::task::Poll::Pending => None,
                }
            };
            if let Some(answered) = first {
                answered
            } else {
                loop {
                    tokio::select! {
                        // In this order, and no random draw: a stop comes first.
                        biased;
                        () = &mut cancelled => break Answered::Cancelled,
                        fetch = &mut fetch => break Answered::Fetch(fetch),
                        () = &mut woken, if awaits_event => {
                            woken.set(handle.reader_wake());
                            if handle.event_unwanted() {
                                break Answered::Unwanted;
                            }
                        }
                    }
                }
            }
        };
        match answered {
            Answered::Fetch(fetch) => {
                let read = match &fetch {
                    Fetch::Records { records, .. } | Fetch::Event { records, .. } => records.len(),
                    _ => 0,
                };
                let (step, spare) = handle.read_answered(fetch, (self.batch_room(), more));
                buffers.keep_records(spare, read);
                Some(step)
            }
            Answered::Cancelled => {
                handle.cancel_reading();
                None
            }
            Answered::Unwanted => {
                *events = None;
                Some(
                    handle
                        .read_answered(Fetch::SubscriptionEnded, (self.batch_room(), more))
                        .0,
                )
            }
        }
    }

    /// Makes one Kinesis call; reports a failure, which the machine backs off from.
    async fn call(
        &self,
        call: Call,
        events: &mut Option<Events>,
        buffers: &mut Buffers,
    ) -> Fetch<Record> {
        let env = &self.env;
        if call != Call::NextEvent {
            *events = None;
        }
        match call {
            Call::Subscribe(start) => self.subscribe(&start, events).await,
            Call::NextEvent => self.next_event(events, buffers).await,
            Call::GetRecords(iterator) => self.get_records(&iterator, buffers).await,
            Call::GetIterator(start) => {
                match env
                    .kinesis
                    .shard_iterator(&env.origin.stream, &env.origin.shard, &start)
                    .await
                {
                    Ok(iterator) => Fetch::Iterator(iterator),
                    Err(KinesisError::ShardNotFound { .. }) => Fetch::Gone,
                    Err(err) => {
                        env.meters.read_retry(ReadRetry::Failed);
                        env.report(err);
                        Fetch::IteratorFailed
                    }
                }
            }
        }
    }

    /// One `GetRecords` call from `iterator`; reports a failure, and counts an expired iterator
    /// and a throttled or failed read.
    async fn get_records(&self, iterator: &ShardIterator, buffers: &mut Buffers) -> Fetch<Record> {
        let env = &self.env;
        let fetched = env
            .kinesis
            .get_records(
                &env.origin.stream,
                &env.origin.shard,
                iterator,
                env.batch_size,
            )
            .await;
        match fetched {
            Ok(Fetched::Records {
                records,
                next,
                millis_behind,
            }) => {
                if let Some((first, last)) = records.first_and_last() {
                    tracing::debug!(records = records.len(), first = %first, last = %last, "read");
                }
                let records = self.decoded(records, millis_behind, buffers);
                Fetch::Records {
                    records,
                    next,
                    millis_behind,
                }
            }
            Ok(Fetched::Expired) => {
                env.meters.count(ShardCount::IteratorResets, 1);
                Fetch::Expired
            }
            Ok(Fetched::Throttled) => {
                env.meters.read_retry(ReadRetry::Throttled);
                Fetch::Failed
            }
            Ok(Fetched::Gone) => Fetch::Gone,
            Err(err) => {
                env.meters.read_retry(ReadRetry::Failed);
                env.report(err);
                Fetch::Failed
            }
        }
    }

    /// Counts what one answer or event read, and decodes its records (KPL aggregates into
    /// their user records).
    fn decoded(
        &self,
        records: AnswerRecords,
        millis_behind: Option<i64>,
        buffers: &mut Buffers,
    ) -> Vec<Record> {
        let env = &self.env;
        // Nothing is looked at for the metrics unless something counts.
        let counting = env.meters.counting();
        if counting {
            env.meters
                .read(records.len() as u64, records.data_bytes(), millis_behind);
        }
        let mut messages = buffers.take_records();
        messages.reserve(records.len());
        // Each record decoded as it is taken apart.
        for fetched in records.taken_apart() {
            let aggregated = counting && kpl::has_magic(&fetched.data);
            if record::decode_into(fetched, &mut messages) && aggregated {
                env.meters.count(ShardCount::DecodeFailures, 1);
            }
        }
        if counting {
            env.meters
                .count(ShardCount::Consumed, messages.len() as u64);
        }
        messages
    }

    /// `SubscribeToShard` at `start`; the subscription opened is kept in `events`.
    async fn subscribe(&self, start: &ShardStart, events: &mut Option<Events>) -> Fetch<Record> {
        let env = &self.env;
        let consumer = env
            .fan_out
            .as_ref()
            .expect("a fan-out reader's subscription has a consumer");
        match env
            .kinesis
            .subscribe(&env.origin.stream, consumer, &env.origin.shard, start)
            .await
        {
            Ok(opened) => {
                tracing::debug!(consumer = %consumer.name, %start, "subscribed");
                *events = Some(opened);
                Fetch::Subscribed
            }
            Err(refused) => self.refused(refused).await,
        }
    }

    /// What a refused or failed subscription answers the machine: reported unless it is only
    /// in use.
    async fn refused(&self, refused: Refused) -> Fetch<Record> {
        let env = &self.env;
        match refused {
            Refused::Gone => self.gone_or_consumer_missing().await,
            Refused::InUse => {
                // Another subscription of the consumer to the shard is still open (a previous
                // holder's, or ours of a moment ago): backed off and tried again.
                tracing::debug!("subscription in use; tried again after a backoff");
                env.meters.read_retry(ReadRetry::Throttled);
                Fetch::Failed
            }
            Refused::Failed(err) => {
                env.meters.read_retry(ReadRetry::Failed);
                env.report(err);
                Fetch::Failed
            }
        }
    }

    /// What a subscription's `ResourceNotFoundException` means: the service says it of a shard
    /// that left the stream and of a consumer it does not know (deregistered since startup).
    /// Only a shard Kinesis no longer lists is gone; for a missing consumer the error is
    /// reported and the subscription backed off, and the shard stays this instance's.
    async fn gone_or_consumer_missing(&self) -> Fetch<Record> {
        let env = &self.env;
        let start = ShardStart::At(crate::KinesisPosition::TrimHorizon);
        match env
            .kinesis
            .shard_iterator(&env.origin.stream, &env.origin.shard, &start)
            .await
        {
            Err(KinesisError::ShardNotFound { .. }) => Fetch::Gone,
            _ => {
                let consumer = env
                    .fan_out
                    .as_ref()
                    .map_or("?", |consumer| consumer.name.as_ref());
                env.meters.read_retry(ReadRetry::Failed);
                env.report(KinesisError::Api {
                    stream: env.origin.stream.to_string(),
                    operation: "SubscribeToShard",
                    message: format!(
                        "shard {}, consumer {consumer}: the service does not know the consumer \
                         (deregistered since the subscription started?); the shard is tried \
                         again after a backoff, and a restart registers the consumer again",
                        env.origin.shard
                    ),
                });
                Fetch::Failed
            }
        }
    }

    /// The open subscription's next event, waited for at most the pace's silence limit
    /// ([`EVENT_SILENCE_LIMIT`](crate::shard::pace::EVENT_SILENCE_LIMIT) from the service).
    async fn next_event(
        &self,
        events: &mut Option<Events>,
        buffers: &mut Buffers,
    ) -> Fetch<Record> {
        let env = &self.env;
        let (Some(open), Some(consumer)) = (events.as_mut(), env.fan_out.as_ref()) else {
            return Fetch::SubscriptionEnded;
        };
        let event = open.next(&env.origin.stream, consumer, &env.origin.shard);
        let next = match env.event_silence {
            Some(limit) => tokio::time::timeout(limit, event).await,
            None => Ok(event.await),
        };
        match next {
            Ok(Ok(Event::Records {
                records,
                continuation,
                millis_behind,
                ended,
            })) => Fetch::Event {
                records: self.decoded(records, millis_behind, buffers),
                continuation,
                millis_behind,
                ended,
            },
            Ok(Ok(Event::Ended)) => {
                *events = None;
                tracing::info!(
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
                env.meters.read_retry(ReadRetry::Failed);
                tracing::warn!(
                    silent_s = env.event_silence.unwrap_or_default().as_secs(),
                    "the enhanced fan-out subscription sent nothing for too long; subscribing again"
                );
                Fetch::Failed
            }
        }
    }

    /// Hands the shard back as `stop` says; whether it was read to its end.
    async fn finish(&self, stop: Stop) -> bool {
        match stop {
            Stop::Gone => {
                tracing::info!(
                    "the shard left the stream (trimmed, or the stream was deleted); its lease is \
                     released and it is not read again"
                );
            }
            Stop::Unreadable => {
                tracing::warn!(
                    "no iterator of the shard could be had; it is handed back and tried again \
                     after a backoff"
                );
            }
            Stop::Ended | Stop::Cancelled | Stop::Lost | Stop::HandedOver => {}
        }
        self.env.home.reader_stopped(&self.env.origin.shard, stop);
        self.cancel.cancel();
        // Lost, or ran out by our clock: no checkpoint, no release.
        let Some(how) = stop.close() else {
            return false;
        };
        // The lease writer says how the closing went (`LeaseNews`).
        let ending = self.handle.close(how).await;
        how == Close::Finished && ending == Ending::Closed { written: true }
    }
}

#[cfg(test)]
mod tests;

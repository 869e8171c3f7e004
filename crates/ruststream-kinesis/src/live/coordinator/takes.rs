//! The takes of a pass, run in parallel as events: each [`Take`] asks for one call at a time,
//! its call runs as a future, and the driver hands each answer back to the take (and through it
//! to the coordinator, which it owns) as it comes, one at a time. No take touches the
//! coordinator itself.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use tracing::Instrument;

use crate::clock::Instant;
use crate::coordinator::plan::TakeFor;
use crate::coordinator::take::{AcquireRefused, IteratorRefused, Over, Take, TakeCall, TakeStep};
use crate::kinesis::api::ShardInfo;
use crate::kinesis::iterator::ShardIterator;
use crate::lease::{LeaseKey, LeaseState, Notice, epoch_millis};
use crate::live::coordinator::machines::Machines;
use crate::live::lock;
use crate::live::subscription::Subscription;
use crate::shard::ShardHandle;
use crate::{KinesisError, LeaseError};

/// One take under way.
struct Taking {
    shard: ShardInfo,
    key: LeaseKey,
    take: Take<Instant>,
    /// The first iterator, once `GetShardIterator` answered it.
    iterator: Option<ShardIterator>,
    /// Whether the row had no start but the one this take recorded.
    fresh: bool,
    /// Once it reads: how many seeks of every shard had been applied before its reader joined
    /// the shards read.
    seeks_before: Option<u64>,
    /// Its span: its calls' events and failures carry the shard.
    span: tracing::Span,
}

/// What one take's call answered.
enum Answered {
    Acquired(Result<LeaseState, LeaseError>),
    Positioned(Result<ShardIterator, KinesisError>),
    Released,
    /// A take-over's notice (`None`: the read failed, or the store keeps none), and the wall
    /// clock at which the read was sent.
    Noticed(Option<Notice>, u64),
}

/// A take's call in flight, in its take's span, and which take it is.
type Call<'a> =
    tracing::instrument::Instrumented<Pin<Box<dyn Future<Output = (usize, Answered)> + Send + 'a>>>;

impl Subscription {
    /// The takes of a pass, in parallel: each take's calls in order, every answer handed back
    /// by this driver as it comes. A take that reads starts the shard's reader.
    pub(super) async fn take_all(
        self: &Arc<Self>,
        machines: &mut Machines,
        takes: Vec<(ShardInfo, TakeFor)>,
    ) {
        let now_ms = epoch_millis();
        let planned_at_starts = machines.rounds().takes_planned_at_starts();
        let mut taking: Vec<Taking> = {
            let coordinator = machines.coordinator(self);
            takes
                .into_iter()
                .map(|(shard, purpose)| {
                    let over = coordinator.take_over_of(&shard.id, &self.owner, now_ms);
                    self.taking(shard, purpose, over)
                })
                .collect()
        };
        let mut calls: FuturesUnordered<Call<'_>> = FuturesUnordered::new();
        for (at, one) in taking.iter_mut().enumerate() {
            if let Some(call) = self.next_call(one, at) {
                calls.push(call);
            }
        }
        while let Some((at, answered)) = calls.next().await {
            let one = &mut taking[at];
            self.answered(one, answered, machines);
            if let Some(call) = self.next_call(one, at) {
                calls.push(call);
            }
        }
        drop(calls);
        self.seek_late_takes(&taking, planned_at_starts, machines)
            .await;
        let (rounds, coordinator) = machines.both(self);
        rounds.took(coordinator, Instant::now());
    }

    /// Seeks the shards of `taking` that started where they were planned though a seek of
    /// every shard came after the plan (`planned_at_starts`, the coordinator's count of moved
    /// starts when the pass planned them, has moved since) and committed before their readers
    /// joined the shards read, no seek moving them since: it would have moved them, and
    /// moved where later takes start only. Only the shards that start where their plan said (a
    /// child of a reshard is planned at the trim horizon whatever the seek, and after a seek it
    /// is not late). The last seek's position counts (an older one's was moved by it).
    async fn seek_late_takes(
        &self,
        taking: &[Taking],
        planned_at_starts: Option<u64>,
        machines: &mut Machines,
    ) {
        let moved = planned_at_starts
            .is_some_and(|planned| planned != machines.coordinator(self).starts_moved());
        if !moved {
            return;
        }
        let (to, seen, late) = {
            let running = lock(&self.running);
            let seeks = lock(&self.every_shard_seek);
            let Some(to) = seeks.to.clone() else {
                return;
            };
            let seen = seeks.count;
            let late: Vec<(Arc<str>, Arc<ShardHandle>)> = taking
                .iter()
                .filter(|one| {
                    one.fresh
                        && one.seeks_before == Some(seen)
                        && matches!(one.take.purpose(), TakeFor::Reading(planned) if *planned != to.0)
                })
                .filter_map(|one| {
                    let reader = running.get(&one.shard.id)?;
                    Some((Arc::clone(&one.shard.id), Arc::clone(&reader.handle)))
                })
                .collect();
            (to, seen, late)
        };
        if late.is_empty() {
            return;
        }
        let shards: Vec<&Arc<str>> = late.iter().map(|(shard, _)| shard).collect();
        tracing::debug!(
            stream = %self.stream,
            ?shards,
            position = ?to.0,
            "taken as planned before a seek of every shard: sought now"
        );
        super::seek::seek_late(self, late, (&to.0, to.1), seen).await;
    }

    fn taking(&self, shard: ShardInfo, purpose: TakeFor, over: Option<Over>) -> Taking {
        let now_ms = epoch_millis();
        let span = tracing::info_span!(
            "lease_take",
            stream = %self.stream,
            shard = %shard.id,
            owner = %self.owner
        );
        Taking {
            key: LeaseKey::new(Arc::clone(&self.stream), Arc::clone(&shard.id)),
            take: Take::new(Arc::clone(&shard.id), purpose, over, Instant::now(), now_ms),
            shard,
            iterator: None,
            fresh: false,
            seeks_before: None,
            span,
        }
    }

    /// The call `one` (the take at `at`) asks for next; `None` once it is over, having started
    /// the shard's reader when it reads. A row without a checkpoint starts where its purpose
    /// says; a take for skipping marks it [`SHARD_SKIPPED`](crate::SHARD_SKIPPED) instead, and
    /// hands it back.
    fn next_call<'a>(self: &'a Arc<Self>, one: &mut Taking, at: usize) -> Option<Call<'a>> {
        let _in_span = one.span.enter();
        let (key, shard) = (one.key.clone(), Arc::clone(&one.shard.id));
        let call: Pin<Box<dyn Future<Output = (usize, Answered)> + Send + 'a>> =
            match one.take.next() {
                TakeStep::Call(TakeCall::Acquire { start, over }) => Box::pin(async move {
                    let answer = match over {
                        // The row of a holder whose beat lapsed becomes this instance's, with
                        // this instance's lease: renewed per row (an instance kept alive by its
                        // beat will write `KEPT_BY_BEAT` here; a row kept by beat that its
                        // holder does not beat for would be taken over at once).
                        Some(Over {
                            holder, counter, ..
                        }) => {
                            self.store
                                .take_over(
                                    &key,
                                    &self.owner,
                                    self.timings.row_lease(),
                                    &start,
                                    &holder,
                                    counter,
                                )
                                .await
                        }
                        None => {
                            self.store
                                .acquire_from(&key, &self.owner, self.timings.row_lease(), &start)
                                .await
                        }
                    };
                    (at, Answered::Acquired(answer))
                }),
                TakeStep::Call(TakeCall::ReadNotice) => Box::pin(async move {
                    let sent_ms = epoch_millis();
                    let notice = self.store.notice(&self.stream).await;
                    (at, Answered::Noticed(notice.ok().flatten(), sent_ms))
                }),
                TakeStep::Call(TakeCall::Iterator { start }) => Box::pin(async move {
                    let answer = self
                        .kinesis
                        .shard_iterator(&self.stream, &shard, &start)
                        .await;
                    (at, Answered::Positioned(answer))
                }),
                TakeStep::Call(TakeCall::Release) => Box::pin(async move {
                    // Fenced by the counter the take left; a lease it does not free lapses.
                    let _ = self.store.release(&key, &self.owner).await;
                    (at, Answered::Released)
                }),
                TakeStep::Over { wake_coordinator } => {
                    if wake_coordinator {
                        tracing::debug!(
                            stream = %self.stream,
                            shard = %one.shard.id,
                            "closed shard never read and started at the tip: skipped"
                        );
                        self.wake.notify_one();
                    }
                    return None;
                }
                TakeStep::Read {
                    start,
                    resume,
                    sent,
                    sent_ms,
                } => {
                    let iterator = one
                        .iterator
                        .take()
                        .expect("a take reads once its iterator answered");
                    one.seeks_before = Some(self.start_reader(
                        &one.shard,
                        one.key.clone(),
                        iterator,
                        &start,
                        resume,
                        sent,
                        sent_ms,
                    ));
                    return None;
                }
            };
        Some(call.instrument(one.span.clone()))
    }

    /// Hands what `one`'s call answered back to its take, and through it to the coordinator;
    /// says what a refusal means.
    fn answered(&self, one: &mut Taking, answered: Answered, machines: &mut Machines) {
        let _in_span = one.span.enter();
        let shard = &one.shard.id;
        match answered {
            Answered::Acquired(answer) => {
                one.fresh = answer.as_ref().is_ok_and(|state| {
                    state
                        .checkpoint
                        .as_deref()
                        .is_none_or(|checkpoint| checkpoint == one.take.recorded())
                });
                let refused = answer.as_ref().err().map(|err| match err {
                    err if err.is_fenced() => AcquireRefused::Fenced,
                    err if err.is_throttled() => AcquireRefused::Throttled,
                    LeaseError::LegacyRow { .. } | LeaseError::OtherApplication { .. } => {
                        AcquireRefused::Unusable
                    }
                    _ => AcquireRefused::Failed,
                });
                let told = one.take.acquired(
                    machines.coordinator(self),
                    match (&answer, refused) {
                        (Ok(state), _) => Ok(state.checkpoint.as_deref()),
                        (Err(_), refused) => Err(refused.unwrap_or(AcquireRefused::Failed)),
                    },
                    Instant::now(),
                    rand::random(),
                );
                if let Err(err) = answer {
                    self.tell(shard, told, self.lease_error(shard, err));
                }
            }
            Answered::Positioned(answer) => {
                let told = one.take.positioned(
                    machines.coordinator(self),
                    match &answer {
                        Ok(_) => Ok(()),
                        Err(KinesisError::ShardNotFound { .. }) => Err(IteratorRefused::Gone),
                        Err(_) => Err(IteratorRefused::Failed),
                    },
                    Instant::now(),
                    rand::random(),
                );
                match answer {
                    Ok(iterator) => one.iterator = Some(iterator),
                    Err(err) => self.tell(shard, told, err),
                }
            }
            Answered::Released => one.take.released(),
            Answered::Noticed(notice, sent_ms) => {
                one.take
                    .judged(machines.coordinator(self), notice.as_ref(), sent_ms);
            }
        }
    }
}

//! One take of a shard, pure: its calls in order (the lease, recording where a first owner
//! starts; the first iterator; the hand-back of a shard it does not read) and what each answer
//! means, through the [`Coordinator`] that knows the stream's shards. `Subscription::take_all`
//! executes it; the simulation drives the same type on a virtual clock.
//!
//! ```text
//! (ReadNotice ─holder's beat lapsed─>) Acquire ─ok─> (Coordinator::after_take) ─read─> Iterator ─ok─> Read
//!      └─alive, or no answer─> Over       │                  └─finished/skipped/unmarked─> Release ─> Over
//!                                          └─refused─> Over (throttled: every take paused)
//!                                                        Iterator ─refused─> Release ─> Over (backoff)
//! ```
//!
//! A take-over (liveness by beat: the row is kept alive by its holder's beat) first reads the
//! stream's notice, and goes on only if the holder's beat lapsed by the wall clock at which
//! that read was sent: the read went out after the row the take-over names was read, so a
//! holder that took its row again (a new counter) before it shows alive, and one that takes it
//! again after it moves the counter the take-over is conditioned on.

use std::sync::Arc;

use super::machine::{AfterTake, Coordinator, TakeBackoff};
pub(crate) use super::plan::Over;
use super::plan::TakeFor;
use crate::lease::Notice;
use crate::settings::position::ShardStart;
use crate::shard::lease::Moment;

/// The call a take makes next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum TakeCall {
    /// Take the lease, recording `start` as the checkpoint of a row that has none
    /// (`LeaseStore::acquire_from`); of a row kept alive by its holder's beat, conditioned on
    /// the row as read, `over` its holder and counter (`LeaseStore::take_over`).
    Acquire { start: Arc<str>, over: Option<Over> },
    /// Read the stream's notice (`LeaseStore::notice`), for a take-over: answer with
    /// [`Take::judged`], with the wall clock at which the read was sent.
    ReadNotice,
    /// `GetShardIterator` at `start`, for the reader's first read.
    Iterator { start: ShardStart },
    /// Hand the lease back: the shard is not read by this take.
    Release,
}

/// What a take asks of its driver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum TakeStep<T> {
    /// Make this call, and hand its answer back.
    Call(TakeCall),
    /// Read the shard from the iterator the last call answered: the first read at `start`,
    /// later iterators without a delivered record at `resume`. The lease counts from the
    /// acquire's send, `sent` by the monotonic clock and `sent_ms` by the wall clock.
    Read {
        start: ShardStart,
        resume: ShardStart,
        sent: T,
        sent_ms: u64,
    },
    /// The take is over without a reader. `wake_coordinator`: it marked the shard never to be
    /// read, and the shard's children are decided at once.
    Over { wake_coordinator: bool },
}

/// Why the store did not grant a take's lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AcquireRefused {
    /// Another instance holds it, or took it first: nothing to report.
    Fenced,
    /// A row no take can use (an earlier version's, naming no stream; another application's):
    /// every take fails the same way, so the shard waits out a backoff.
    Unusable,
    /// The store failed; the next round tries again.
    Failed,
    /// The store refused for want of capacity (`ProvisionedThroughputExceededException`):
    /// every take of this instance pauses for a backoff, and the next round tries again.
    Throttled,
}

/// Why `GetShardIterator` gave a take no iterator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum IteratorRefused {
    /// The shard left the stream (`ShardNotFound`): never taken again while it stays listed.
    Gone,
    /// The call failed, or the position is not readable.
    Failed,
}

/// What the driver says about a refused answer, the error being its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Told<T> {
    /// Nothing to say.
    Nothing,
    /// Report the error to the subscription.
    Report,
    /// Report it, and that the shard is left alone until the backoff ends.
    Backoff(TakeBackoff<T>),
    /// Warn that the lease table throttled the take: every take pauses until then.
    Throttled(T),
}

#[derive(Debug)]
enum Phase {
    /// A take-over reads the notice to judge the holder's beat.
    Judge,
    Acquire,
    Iterator {
        start: ShardStart,
        resume: ShardStart,
    },
    Release {
        wake_coordinator: bool,
    },
    Read {
        start: ShardStart,
        resume: ShardStart,
    },
    Over {
        wake_coordinator: bool,
    },
}

/// One take of one shard.
#[derive(Debug)]
pub(crate) struct Take<T> {
    shard: Arc<str>,
    purpose: TakeFor,
    /// The checkpoint it records in a row without one: where a first owner starts, so an
    /// instance that takes the shard over before the first acknowledgement starts no later.
    recorded: Arc<str>,
    sent: T,
    sent_ms: u64,
    over: Option<Over>,
    phase: Phase,
}

impl<T: Moment> Take<T> {
    /// A take of `shard` for `purpose`, begun at `now` (`now_ms` by the wall clock); a
    /// take-over of the row `over` names when it is `Some`.
    pub(crate) fn new(
        shard: Arc<str>,
        purpose: TakeFor,
        over: Option<Over>,
        now: T,
        now_ms: u64,
    ) -> Self {
        let recorded = Arc::from(purpose.recorded(now_ms));
        let phase = match &over {
            Some(over) if !over.own => Phase::Judge,
            _ => Phase::Acquire,
        };
        Self {
            shard,
            purpose,
            recorded,
            sent: now,
            sent_ms: now_ms,
            over,
            phase,
        }
    }

    /// What the take asks now.
    pub(crate) fn next(&self) -> TakeStep<T> {
        match &self.phase {
            Phase::Judge => TakeStep::Call(TakeCall::ReadNotice),
            Phase::Acquire => TakeStep::Call(TakeCall::Acquire {
                start: Arc::clone(&self.recorded),
                over: self.over.clone(),
            }),
            Phase::Iterator { start, .. } => TakeStep::Call(TakeCall::Iterator {
                start: start.clone(),
            }),
            Phase::Release { .. } => TakeStep::Call(TakeCall::Release),
            Phase::Read { start, resume } => TakeStep::Read {
                start: start.clone(),
                resume: resume.clone(),
                sent: self.sent,
                sent_ms: self.sent_ms,
            },
            Phase::Over { wake_coordinator } => TakeStep::Over {
                wake_coordinator: *wake_coordinator,
            },
        }
    }

    /// The notice a take-over read answered (`None`: the read failed), the read sent at
    /// `sent_ms` by the wall clock: the take goes on if the holder's beat lapsed by then
    /// ([`Notice::is_alive`]: more than the skew tolerance before it); else it is over. A
    /// notice of another layout than this version's judges no holder gone: that version may
    /// keep its beats where this one does not look. The notice is the coordinator's from now:
    /// the next plan judges by it.
    pub(crate) fn judged(
        &mut self,
        coordinator: &mut Coordinator<T>,
        notice: Option<&Notice>,
        sent_ms: u64,
    ) {
        let (Phase::Judge, Some(over)) = (&self.phase, &self.over) else {
            return;
        };
        if let Some(notice) = notice {
            coordinator.take_notice_read(notice, sent_ms);
        }
        let lapsed = notice.is_some_and(|notice| {
            coordinator.reads_layout_of(notice) && !notice.is_alive(&over.holder, sent_ms)
        });
        self.phase = if lapsed {
            Phase::Acquire
        } else {
            Phase::Over {
                wake_coordinator: false,
            }
        };
    }

    /// The start this take records in a row that has none: a row answered with it had no
    /// other.
    pub(crate) fn recorded(&self) -> &str {
        &self.recorded
    }

    /// What it takes the shard for: reading (where a row without a checkpoint starts, as
    /// planned), or marking it skipped.
    pub(crate) fn purpose(&self) -> &TakeFor {
        &self.purpose
    }

    /// The acquire answered: the row's checkpoint as the take left it, or why it was refused.
    /// `coin` draws a backoff's jitter.
    pub(crate) fn acquired(
        &mut self,
        coordinator: &mut Coordinator<T>,
        answer: Result<Option<&str>, AcquireRefused>,
        now: T,
        coin: u64,
    ) -> Told<T> {
        if !matches!(self.phase, Phase::Acquire) {
            return Told::Nothing;
        }
        let checkpoint = match answer {
            Ok(checkpoint) => {
                coordinator.take_granted();
                checkpoint
            }
            Err(refused) => {
                // Nothing is handed back: an acquire whose answer failed may still land, after a
                // later take of this shard by this owner even, and a release sent now (which no
                // counter can fence, the answer being unknown) could land after that take and
                // free the row it reads. A take that landed leaves a lease that lapses, or that
                // this owner's next round takes again.
                self.phase = Phase::Over {
                    wake_coordinator: false,
                };
                return match refused {
                    AcquireRefused::Fenced => Told::Nothing,
                    AcquireRefused::Failed => Told::Report,
                    AcquireRefused::Throttled => coordinator
                        .take_throttled(now, coin)
                        .map_or(Told::Nothing, Told::Throttled),
                    AcquireRefused::Unusable => {
                        Told::Backoff(coordinator.delay_take(&self.shard, now, coin))
                    }
                };
            }
        };
        self.phase =
            match coordinator.after_take(&self.shard, checkpoint, &self.purpose, &self.recorded) {
                AfterTake::Read { start, resume } => Phase::Iterator { start, resume },
                AfterTake::Finished | AfterTake::Unmarked => Phase::Release {
                    wake_coordinator: false,
                },
                // Its children were waiting for the mark.
                AfterTake::Skipped => Phase::Release {
                    wake_coordinator: true,
                },
            };
        Told::Nothing
    }

    /// `GetShardIterator` answered. A refused one hands the lease back (a release fenced by the
    /// counter the take left) and leaves the shard alone for a backoff that doubles with each
    /// failure in a row; `coin` draws its jitter.
    pub(crate) fn positioned(
        &mut self,
        coordinator: &mut Coordinator<T>,
        answer: Result<(), IteratorRefused>,
        now: T,
        coin: u64,
    ) -> Told<T> {
        let Phase::Iterator { start, resume } = &self.phase else {
            return Told::Nothing;
        };
        match answer {
            Ok(()) => {
                coordinator.took(&self.shard);
                self.phase = Phase::Read {
                    start: start.clone(),
                    resume: resume.clone(),
                };
                Told::Nothing
            }
            Err(refused) => {
                if refused == IteratorRefused::Gone {
                    coordinator.gone(&self.shard);
                }
                self.phase = Phase::Release {
                    wake_coordinator: false,
                };
                Told::Backoff(coordinator.delay_take(&self.shard, now, coin))
            }
        }
    }

    /// The release answered (whatever it said: a lease it did not free lapses).
    pub(crate) fn released(&mut self) {
        if let Phase::Release { wake_coordinator } = self.phase {
            self.phase = Phase::Over { wake_coordinator };
        }
    }
}

#[cfg(test)]
mod tests;

//! A seek of a live subscription: the iterators first, then each shard's watermark and reader.

use std::sync::{Arc, PoisonError};

use crate::delivery::seeker::{Seeking, Source};
use crate::kinesis::iterator::ShardIterator;
use crate::live::subscription::Subscription;
use crate::settings::position::ShardStart;
use crate::shard::ShardHandle;
use crate::{KinesisError, KinesisPosition};

impl Source for Subscription {
    fn seek(&self, to: KinesisPosition) -> Seeking<'_> {
        Box::pin(seek_live(self, to))
    }

    fn close(&self) {
        self.cancel.cancel();
    }
}

/// Seeks the shards of a live subscription that `to` applies to. Every shard's iterator at `to`
/// is asked of Kinesis first: a position it refuses (a sequence number of another shard, a
/// trimmed one) fails the seek, naming the shard and the reason, and moves no shard. Then each
/// shard's watermark resets and its reader restarts at the new iterator; a delivery of the old
/// position still on its way never reaches a handler once this returns.
async fn seek_live(sub: &Subscription, to: KinesisPosition) -> Result<(), KinesisError> {
    still_open(sub)?;
    let targets: Vec<(Arc<str>, Arc<ShardHandle>)> = {
        let running = sub.running.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(shard) = to.shard()
            && !running.contains_key(shard)
        {
            return Err(KinesisError::Seek {
                stream: sub.stream.to_string(),
                reason: format!(
                    "shard {shard} is not read by this instance (it holds {:?}); seek where the \
                     delivery was handled",
                    running.keys().collect::<Vec<_>>()
                ),
            });
        }
        if running.is_empty() {
            sub.start_at(to);
            return Ok(());
        }
        if to.shard().is_none() {
            // The shards this instance takes after the seek without a checkpoint start at `to`
            // too: a lone instance takes a large stream at its pace, and the shards whose takes
            // waited started at the tip, their records skipped (28 of 40 at the start-up
            // benchmark). Takes still queued are planned again at `to`; a take already sent
            // when the coordinator hears this (one batch's calls) still starts where it was
            // planned: a window left open (fifteenth session's note).
            sub.start_at(to.clone());
        }
        running
            .iter()
            .filter(|(shard, _)| to.applies_to(shard))
            .map(|(shard, reader)| (Arc::clone(shard), Arc::clone(&reader.handle)))
            .collect()
    };
    let start = ShardStart::At(to.clone());
    let now_ms = crate::epoch_millis();
    let resume = ShardStart::resuming_at(&to, now_ms);
    let recorded: Arc<str> = Arc::from(ShardStart::seek_checkpoint(&to, now_ms));
    let mut iterators = Vec::with_capacity(targets.len());
    for (shard, _) in &targets {
        iterators.push(iterator_at(sub, shard, &to, &start).await?);
    }
    let mut applied = Vec::new();
    let mut refused = Vec::new();
    for ((shard, handle), iterator) in targets.into_iter().zip(iterators) {
        if handle.seek(iterator, resume.clone(), Arc::clone(&recorded)) {
            applied.push(shard);
        } else {
            refused.push(shard);
        }
    }
    if refused.is_empty() {
        return Ok(());
    }
    Err(KinesisError::Seek {
        stream: sub.stream.to_string(),
        reason: format!(
            "shard(s) {refused:?} are being handed back (a release, a handoff to \
             another instance, a shard read to its end, or a lost lease), so the seek to {to:?} \
             was not applied to them: their next owner reads on from their last checkpoint; \
             applied to {applied:?}. Seek again on the instance that holds them"
        ),
    })
}

/// Whether `sub` can still be sought: its broker runs, and its subscriber was not dropped.
fn still_open(sub: &Subscription) -> Result<(), KinesisError> {
    if sub.broker_closed.load(std::sync::atomic::Ordering::Acquire) {
        return Err(KinesisError::ShutDown { what: "seeking" });
    }
    if sub.cancel.is_cancelled() {
        // Its subscriber was dropped: nothing reads the stream for it any more, and a position
        // queued now would never be read.
        return Err(KinesisError::Seek {
            stream: sub.stream.to_string(),
            reason: "the subscription is closed (its subscriber was dropped); seek through a \
                     subscription that is still open"
                .to_owned(),
        });
    }
    Ok(())
}

/// The iterator of `shard` at `start` (the seek to `to`), or the seek's failure naming the shard
/// and what Kinesis said.
async fn iterator_at(
    sub: &Subscription,
    shard: &str,
    to: &KinesisPosition,
    start: &ShardStart,
) -> Result<ShardIterator, KinesisError> {
    sub.kinesis
        .shard_iterator(&sub.stream, shard, start)
        .await
        .map_err(|err| {
            // The reader's reading of a `ResourceNotFoundException` ("no longer exists, its
            // lease is released") is not this one's: a refused seek moves nothing, and the local
            // engine answers it for a record the shard never held too.
            let said = match err {
                KinesisError::ShardNotFound { .. } => "ResourceNotFoundException (on AWS the \
                     shard or its stream is gone; a local emulator also answers it for a record \
                     the shard never held)"
                    .to_owned(),
                other => other.to_string(),
            };
            KinesisError::Seek {
                stream: sub.stream.to_string(),
                reason: format!(
                    "Kinesis refused the position {to:?} for shard {shard}: {said}; every shard \
                     reads on where it was"
                ),
            }
        })
}

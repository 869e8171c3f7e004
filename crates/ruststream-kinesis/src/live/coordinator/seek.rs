//! A seek of a live subscription: the iterators first, then each shard's watermark and reader.

use std::collections::HashMap;
use std::sync::Arc;

use futures::StreamExt;

use crate::delivery::seeker::{Seeking, Source};
use crate::kinesis::iterator::ShardIterator;
use crate::live::lock;
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

/// How many iterators a seek asks Kinesis for at once (a shard takes five `GetShardIterator`
/// calls a second; the limit is per shard).
const ITERATORS_AT_ONCE: usize = 16;

/// Seeks the shards of a live subscription that `to` applies to. Every shard's iterator at `to`
/// is asked of Kinesis first: a position it refuses (a sequence number of another shard, a
/// trimmed one) fails the seek, naming the shard and the reason, and moves no shard, nor where
/// later takes start. Then, under the lock the readers register under, each shard read at that
/// moment has its watermark reset and its reader restarted at the new iterator (a shard that
/// joined them while the iterators were asked has its own asked first); a delivery of the old
/// position still on its way never reaches a handler once this returns.
///
/// A seek of every shard (not to one shard's record) also sets where the shards this instance
/// takes later without a checkpoint start: a lone instance takes a large stream at its pace,
/// and the shards whose takes waited started at the tip, their records skipped (28 of 40 at the
/// start-up benchmark, fifteenth session). Takes still queued are planned again at `to`; a take
/// already planned whose reader registers after the seek is sought once its pass is over
/// (`take_all`, by the count kept here under the same lock).
async fn seek_live(sub: &Subscription, to: KinesisPosition) -> Result<(), KinesisError> {
    still_open(sub)?;
    let start = ShardStart::At(to.clone());
    let mut iterators: HashMap<Arc<str>, ShardIterator> = HashMap::new();
    loop {
        let missing: Vec<Arc<str>> = {
            let running = lock(&sub.running);
            if let Some(shard) = to.shard()
                && !running.contains_key(shard)
            {
                return Err(KinesisError::Seek {
                    stream: sub.stream.to_string(),
                    reason: format!(
                        "shard {shard} is not read by this instance (it holds {:?}); seek where \
                         the delivery was handled",
                        running.keys().collect::<Vec<_>>()
                    ),
                });
            }
            let missing: Vec<Arc<str>> = running
                .keys()
                .filter(|shard| to.applies_to(shard) && !iterators.contains_key(*shard))
                .cloned()
                .collect();
            if missing.is_empty() {
                if to.shard().is_none() {
                    let mut seeks = lock(&sub.every_shard_seek);
                    seeks.count += 1;
                    seeks.to = Some((to.clone(), crate::epoch_millis()));
                    sub.start_at(to.clone());
                }
                let targets = running
                    .iter()
                    .filter(|(shard, _)| to.applies_to(shard))
                    .filter_map(|(shard, reader)| {
                        let iterator = iterators.remove(shard)?;
                        Some((Arc::clone(shard), Arc::clone(&reader.handle), iterator))
                    })
                    .collect();
                return applied(sub, targets, &to);
            }
            missing
        };
        let missing = missing.into_iter().map(|shard| (shard, ())).collect();
        let mut asked = iterators_at(sub, missing, (&to, &start));
        while let Some((shard, (), iterator)) = asked.next().await {
            iterators.insert(shard, iterator?);
        }
    }
}

/// Moves `targets` (each shard with its handle and its iterator at `to`): each shard's
/// watermark resets and its reader restarts there; one being handed back refuses it, and the
/// error names those it was not applied to.
fn applied(
    sub: &Subscription,
    targets: Vec<(Arc<str>, Arc<ShardHandle>, ShardIterator)>,
    to: &KinesisPosition,
) -> Result<(), KinesisError> {
    let now_ms = crate::epoch_millis();
    let resume = ShardStart::resuming_at(to, now_ms);
    let recorded = crate::SharedStr::from(ShardStart::seek_checkpoint(to, now_ms));
    let mut applied = Vec::new();
    let mut refused = Vec::new();
    for (shard, handle, iterator) in targets {
        if handle.seek(iterator, resume.clone(), recorded.clone()) {
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

/// Seeks `late` (shards taken as planned before the seek of every shard counted `count`, whose
/// readers joined after it) to `to`, as that seek would have (`Latest` as the moment `at_ms` it
/// was made, less the skew tolerance: the records written since are read, a few before it again
/// rather than any lost to a clock ahead of Kinesis'). Their iterators are asked first, a few
/// at once; then, under the lock the readers register under, each is moved unless another seek
/// of every shard came meanwhile (it moved the shard), a seek was applied to its reader since it
/// started (the handler moved it on purpose), or its reader is no longer the one taken. A shard
/// whose iterator Kinesis refused (after the SDK's retries) is named in a warning and reads on
/// where its take started; the others move all the same.
pub(super) async fn seek_late(
    sub: &Subscription,
    late: Vec<(Arc<str>, Arc<ShardHandle>)>,
    (to, at_ms): (&KinesisPosition, u64),
    count: u64,
) {
    let to = match to {
        KinesisPosition::Latest => KinesisPosition::AtTimestamp(
            std::time::UNIX_EPOCH
                + std::time::Duration::from_millis(
                    at_ms.saturating_sub(crate::lease::millis(crate::SKEW_TOLERANCE)),
                ),
        ),
        other => other.clone(),
    };
    let start = ShardStart::At(to.clone());
    let mut targets = Vec::with_capacity(late.len());
    let mut asked = iterators_at(sub, late, (&to, &start));
    while let Some((shard, handle, iterator)) = asked.next().await {
        match iterator {
            Ok(iterator) => targets.push((shard, handle, iterator)),
            Err(err) => tracing::warn!(
                stream = %sub.stream,
                shard = %shard,
                error = %err,
                "a shard taken as planned before a seek of every shard could not be sought: it \
                 reads on from where its take started"
            ),
        }
    }
    let running = lock(&sub.running);
    if lock(&sub.every_shard_seek).count != count {
        return;
    }
    let targets = targets
        .into_iter()
        .filter(|(shard, handle, _)| {
            handle.seeks() == 0
                && running
                    .get(shard)
                    .is_some_and(|reader| Arc::ptr_eq(&reader.handle, handle))
        })
        .collect();
    if let Err(err) = applied(sub, targets, &to) {
        tracing::warn!(
            stream = %sub.stream,
            error = %err,
            "a shard taken as planned before a seek of every shard was not sought"
        );
    }
}

/// The iterators of `shards` (each with what goes along with it) at `start` (the seek to
/// `to`), asked [`ITERATORS_AT_ONCE`] at a time, in the order they are answered: an instance
/// taking a large stream at its pace has shards join while a seek asks, and one at a time the
/// seek would catch up with them only once every shard was taken.
fn iterators_at<'a, T: 'a>(
    sub: &'a Subscription,
    shards: Vec<(Arc<str>, T)>,
    (to, start): (&'a KinesisPosition, &'a ShardStart),
) -> impl futures::Stream<Item = (Arc<str>, T, Result<ShardIterator, KinesisError>)> + 'a {
    futures::stream::iter(shards)
        .map(move |(shard, with)| async move {
            let iterator = iterator_at(sub, &shard, to, start).await;
            (shard, with, iterator)
        })
        .buffer_unordered(ITERATORS_AT_ONCE)
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

//! The subscriber the runtime reads deliveries from.

use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;

use futures::Stream;
#[cfg(feature = "dynamodb-lease")]
use futures::StreamExt;
use ruststream::{BatchSubscriber, BufferedSubscriber, Seekable, Subscriber};

#[cfg(feature = "dynamodb-lease")]
use crate::delivery::batch::InBatch;
use crate::delivery::outlet::Inlet;
use crate::delivery::seeker::Source;
use crate::registry::StreamRegistration;
use crate::{KinesisError, KinesisMessage, KinesisSeeker};

/// The subscription to one stream: a stream of [`KinesisMessage`]s from every shard this instance
/// holds the lease of, one at a time or in batches (`&[T]` handlers) of at most the mount's
/// batch size, closed after [`KinesisStream::max_wait`](crate::KinesisStream::max_wait).
///
/// A delivery still waiting in the subscription when its shard's lease has lapsed by this
/// instance's clock (a stalled process, renewals that kept failing) is dropped rather than
/// handed to a handler, and the shard stops without a checkpoint: another instance may hold it
/// by then. Whoever takes the shard next reads it again from its last checkpoint.
///
/// Dropping the subscription stops the readers: each writes its final checkpoint and releases
/// its lease. A new subscription to the same stream on the same broker waits until they have
/// (however slow the store is; a warning is logged after 10 s), so it cannot take a lease that
/// one of them then releases.
#[derive(Debug)]
pub struct KinesisSubscriber {
    buffered: BufferedSubscriber<Deliveries>,
    /// The sends of records received so far (see [`Inlet`]).
    #[cfg(test)]
    pub(crate) sends: Arc<std::sync::atomic::AtomicUsize>,
}

impl KinesisSubscriber {
    pub(crate) fn new(deliveries: Deliveries, max_wait: Duration) -> Self {
        Self {
            #[cfg(test)]
            sends: Arc::clone(&deliveries.inlet.sends),
            buffered: BufferedSubscriber::new(deliveries).max_wait(max_wait),
        }
    }
}

impl Subscriber for KinesisSubscriber {
    type Message = KinesisMessage;
    type Error = KinesisError;

    fn stream(&mut self) -> impl Stream<Item = Result<KinesisMessage, KinesisError>> + Send + '_ {
        self.buffered.stream()
    }
}

impl BatchSubscriber for KinesisSubscriber {
    type Batch = Vec<KinesisMessage>;

    fn batches(
        &mut self,
        size: NonZeroUsize,
    ) -> impl Stream<Item = Result<Vec<KinesisMessage>, KinesisError>> + Send + '_ {
        #[cfg(feature = "dynamodb-lease")]
        return self
            .buffered
            .batches(size)
            .flat_map(|batch| futures::stream::iter(units_of(batch)));
        #[cfg(not(feature = "dynamodb-lease"))]
        self.buffered.batches(size)
    }
}

/// A batch the runtime reads, or the error in its place.
#[cfg(feature = "dynamodb-lease")]
type Batch = Result<Vec<KinesisMessage>, KinesisError>;

/// Exactly once, the framework's batch as the batches a handler gets: its records delivered for
/// the first time in one batch, whose records make one unit (what the batch stages commits with
/// all of them, with the checkpoint of every shard among them, in one transaction, or with
/// none), and each record delivered again in a batch of its own, first. At least once, the batch
/// as it is.
///
/// A record delivered again comes alone so that a unit's records are consecutive in each of
/// its shards, and a unit never waits for records that a later unit holds: fresh records are
/// consecutive in each shard, and units commit in each shard's order.
#[cfg(feature = "dynamodb-lease")]
fn units_of(batch: Batch) -> Vec<Batch> {
    let batch = match batch {
        Ok(batch) if batch.iter().any(|msg| msg.writes.is_exactly_once()) => batch,
        other => return vec![other],
    };
    let mut out: Vec<Batch> = Vec::new();
    let mut fresh: Vec<KinesisMessage> = Vec::new();
    for msg in batch {
        if msg.settle.is_some() && msg.attempt == 1 {
            fresh.push(msg);
        } else {
            out.push(Ok(vec![msg]));
        }
    }
    if let [.., last] = fresh.as_slice()
        && fresh.len() > 1
    {
        let mut shards: Vec<&Arc<dyn crate::delivery::settlement::Settlement>> = Vec::new();
        for hold in fresh.iter().filter_map(|msg| msg.settle.as_ref()) {
            if !shards.iter().any(|shard| Arc::ptr_eq(shard, &hold.target)) {
                shards.push(&hold.target);
            }
        }
        let writes =
            crate::StagedWrites::exactly_once((&last.origin.shard, &last.record.sequence), None)
                .with_commit_tables(fresh[0].writes.commit_tables())
                .spanning(shards.len());
        #[cfg(feature = "testing")]
        let writes = match fresh[0].writes.journal() {
            Some(journal) => writes.logged(crate::lease::HandlingSeed {
                journal,
                stream: Arc::clone(&last.origin.stream),
                records: fresh.iter().map(KinesisMessage::handled_record).collect(),
                attempt: 1,
            }),
            None => writes,
        };
        let places = InBatch::unit_of(fresh.len());
        for (msg, place) in fresh.iter_mut().zip(places) {
            msg.writes = writes.clone();
            msg.batch = Some(place);
        }
    }
    if !fresh.is_empty() {
        out.push(Ok(fresh));
    }
    out
}

impl Seekable for KinesisSubscriber {
    type Seeker = KinesisSeeker;

    fn seeker(&self) -> KinesisSeeker {
        self.buffered.seeker()
    }
}

/// The deliveries of one subscription, before batching.
#[derive(Debug)]
pub(crate) struct Deliveries {
    /// Bounded: backpressure keeps memory per shard bounded, in process as live.
    inlet: Inlet,
    /// The subscription behind them, live or in process.
    source: Arc<dyn Source>,
    /// Frees the stream's name on the broker when the subscription goes.
    _registration: StreamRegistration,
}

impl Deliveries {
    /// What arrives at `inlet` from the subscription `source`, which holds the stream's name
    /// on the broker through `registration` while it lives.
    pub(crate) fn new(
        inlet: Inlet,
        source: Arc<dyn Source>,
        registration: StreamRegistration,
    ) -> Self {
        Self {
            inlet,
            source,
            _registration: registration,
        }
    }
}

impl Subscriber for Deliveries {
    type Message = KinesisMessage;
    type Error = KinesisError;

    fn stream(&mut self) -> impl Stream<Item = Result<KinesisMessage, KinesisError>> + Send + '_ {
        // Only deliveries that may still reach a handler come out (`Inlet::poll_next`).
        futures::stream::poll_fn(move |cx| self.inlet.poll_next(cx))
    }
}

impl Drop for Deliveries {
    fn drop(&mut self) {
        self.source.close();
    }
}

impl Seekable for Deliveries {
    type Seeker = KinesisSeeker;

    fn seeker(&self) -> KinesisSeeker {
        KinesisSeeker::new(Arc::clone(&self.source))
    }
}

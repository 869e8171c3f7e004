//! The subscriber the runtime reads deliveries from.

use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt};
use ruststream::{BatchSubscriber, BufferedSubscriber, Seekable, Subscriber};
use tokio::sync::mpsc;

use crate::delivery::message::Item;
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
}

impl KinesisSubscriber {
    pub(crate) fn new(deliveries: Deliveries, max_wait: Duration) -> Self {
        Self {
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
        self.buffered.batches(size)
    }
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
    rx: mpsc::Receiver<Item>,
    /// The subscription behind them, live or in process.
    source: Arc<dyn Source>,
    /// Frees the stream's name on the broker when the subscription goes.
    _registration: StreamRegistration,
}

impl Deliveries {
    /// What arrives on `rx` from the subscription `source`, which holds the stream's name on
    /// the broker through `registration` while it lives.
    pub(crate) fn new(
        rx: mpsc::Receiver<Item>,
        source: Arc<dyn Source>,
        registration: StreamRegistration,
    ) -> Self {
        Self {
            rx,
            source,
            _registration: registration,
        }
    }
}

impl Subscriber for Deliveries {
    type Message = KinesisMessage;
    type Error = KinesisError;

    fn stream(&mut self) -> impl Stream<Item = Result<KinesisMessage, KinesisError>> + Send + '_ {
        futures::stream::poll_fn(move |cx| self.rx.poll_recv(cx)).filter(|item| {
            // A delivery whose shard stopped, whose lease ran out while it waited in the
            // channel, or that a seek made stale never reaches a handler.
            std::future::ready(item.as_ref().map_or(true, KinesisMessage::is_current))
        })
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

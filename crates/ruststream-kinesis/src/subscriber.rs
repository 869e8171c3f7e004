//! The subscriber the runtime reads deliveries from, and the seeker that moves it.

use std::sync::{Arc, PoisonError};

use std::num::NonZeroUsize;
use std::time::Duration;

use futures::{Stream, StreamExt};
use ruststream::{BatchSubscriber, BufferedSubscriber, Seekable, Seeker, Subscriber};
use tokio::sync::mpsc;

use crate::api;
use crate::coordinator::{Item, Subscription};
use crate::message::Settle;
use crate::position::ShardStart;
use crate::reader::Restart;
use crate::{KinesisError, KinesisMessage, KinesisPosition};

/// Where a subscription's deliveries come from.
#[derive(Debug)]
pub(crate) enum Source {
    Live(Arc<Subscription>),
    #[cfg(feature = "testing")]
    InProcess(Arc<crate::in_process::InProcessSubscription>),
}

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
    pub(crate) rx: Inbox,
    pub(crate) source: Source,
    /// Frees the stream's name on the broker when the subscription goes.
    pub(crate) _registration: crate::broker::StreamRegistration,
}

/// The channel deliveries arrive on: bounded for the live readers (backpressure keeps memory
/// per shard bounded), unbounded in process (a publish hands over synchronously).
#[derive(Debug)]
pub(crate) enum Inbox {
    Live(mpsc::Receiver<Item>),
    #[cfg(feature = "testing")]
    InProcess(mpsc::UnboundedReceiver<Item>),
}

impl Inbox {
    fn poll_recv(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<Option<Item>> {
        match self {
            Self::Live(rx) => rx.poll_recv(cx),
            #[cfg(feature = "testing")]
            Self::InProcess(rx) => rx.poll_recv(cx),
        }
    }
}

/// Whether a delivery may still reach the handler: its shard still delivers and no seek made
/// it stale.
fn current(msg: &KinesisMessage) -> bool {
    match &msg.settle {
        Some(Settle::Live { shard, ticket }) => {
            // A record that waited in the channel while its lease lapsed (a stall, renewals
            // failing) must not reach a handler: another instance may hold the shard by now.
            // Stopping the shard also ends its reader, so nothing waits on the dropped record.
            if !shard.may_deliver() {
                shard.stop();
                return false;
            }
            shard.generation() == ticket.generation
        }
        #[cfg(feature = "testing")]
        Some(Settle::InProcess(settle)) => settle.is_current(&msg.shard),
        None => true,
    }
}

impl Subscriber for Deliveries {
    type Message = KinesisMessage;
    type Error = KinesisError;

    fn stream(&mut self) -> impl Stream<Item = Result<KinesisMessage, KinesisError>> + Send + '_ {
        futures::stream::poll_fn(move |cx| self.rx.poll_recv(cx)).filter(|item| {
            std::future::ready(match item {
                Ok(msg) => current(msg),
                Err(_) => true,
            })
        })
    }
}

impl Drop for Deliveries {
    fn drop(&mut self) {
        match &self.source {
            Source::Live(sub) => sub.cancel.cancel(),
            #[cfg(feature = "testing")]
            Source::InProcess(sub) => sub.close(),
        }
    }
}

/// Moves a subscription: every shard it reads (or the one shard of an
/// [`AtSequence`](KinesisPosition::AtSequence) position) restarts at the position, and the
/// acknowledgement watermark resets, so settlements of earlier deliveries move no checkpoint.
///
/// A seek made before the subscription took any shard (a `start_at(..)` at startup) sets where
/// the shards it takes without a checkpoint start. Shards taken over later from another instance
/// resume after their checkpoint. The seek covers this instance only.
///
/// # Examples
///
/// `start_at(..)` at the mount site seeks the subscription at every startup:
///
/// ```
/// # #[cfg(feature = "testing")]
/// # mod demo {
/// use ruststream_kinesis::prelude::*;
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Debug, PartialEq, Deserialize, Serialize, Outgoing)]
/// #[outgoing(name = "orders")]
/// struct Order {
///     id: u64,
/// }
///
/// #[subscriber(KinesisStream::new("orders").create_if_missing(2))]
/// async fn pick(order: &Order) -> HandlerOutcome {
///     tracing::info!(order.id, "order picked");
///     HandlerOutcome::ack()
/// }
///
/// fn app() -> RustStream {
///     RustStream::new(AppInfo::new("warehouse", "0.1.0")).with_broker(KinesisBroker::new(), |b| {
///         // At every startup, the shards this instance holds start again at their oldest
///         // records.
///         b.include(pick.start_at(KinesisPosition::TrimHorizon));
///     })
/// }
///
/// pub async fn test() -> Result<(), Box<dyn std::error::Error>> {
///     let tb = ruststream::testing::TestApp::start(app()).await?;
///     let orders = tb.broker::<KinesisBroker>();
///     orders.message(&Order { id: 1 }).publish().await?;
///     orders
///         .subscriber("orders")
///         .assert_called_once()
///         .with(&Order { id: 1 })
///         .settled(HandlerOutcome::ack());
///     Ok(())
/// }
/// # }
/// # #[cfg(feature = "testing")]
/// # tokio::runtime::Runtime::new().unwrap().block_on(demo::test()).unwrap();
/// ```
#[derive(Debug, Clone)]
pub struct KinesisSeeker {
    source: SeekSource,
}

#[derive(Debug, Clone)]
enum SeekSource {
    Live(Arc<Subscription>),
    #[cfg(feature = "testing")]
    InProcess(Arc<crate::in_process::InProcessSubscription>),
}

impl Seekable for Deliveries {
    type Seeker = KinesisSeeker;

    fn seeker(&self) -> KinesisSeeker {
        let source = match &self.source {
            Source::Live(sub) => SeekSource::Live(Arc::clone(sub)),
            #[cfg(feature = "testing")]
            Source::InProcess(sub) => SeekSource::InProcess(Arc::clone(sub)),
        };
        KinesisSeeker { source }
    }
}

impl Seeker for KinesisSeeker {
    type Position = KinesisPosition;
    type Error = KinesisError;

    async fn seek(&self, to: KinesisPosition) -> Result<(), KinesisError> {
        match &self.source {
            SeekSource::Live(sub) => seek_live(sub, to).await,
            #[cfg(feature = "testing")]
            SeekSource::InProcess(sub) => sub.seek(&to),
        }
    }
}

impl KinesisSeeker {
    /// The seeker of a live subscription.
    pub(crate) fn live(sub: Arc<Subscription>) -> Self {
        Self {
            source: SeekSource::Live(sub),
        }
    }

    /// The seeker of an in-process subscription.
    #[cfg(feature = "testing")]
    pub(crate) fn in_process(sub: Arc<crate::in_process::InProcessSubscription>) -> Self {
        Self {
            source: SeekSource::InProcess(sub),
        }
    }
}

/// Seeks the shards of a live subscription that `to` applies to. Every shard's iterator at `to`
/// is asked of Kinesis first: a position it refuses (a sequence number of another shard, a
/// trimmed one) fails the seek, naming the shard and the reason, and moves no shard. Then each
/// shard's watermark resets and its reader restarts at the new iterator; a delivery of the old
/// position still on its way never reaches a handler once this returns.
async fn seek_live(sub: &Arc<Subscription>, to: KinesisPosition) -> Result<(), KinesisError> {
    if sub.broker_closed.load(std::sync::atomic::Ordering::Acquire) {
        return Err(KinesisError::ShutDown { what: "seeking" });
    }
    let targets: Vec<(Arc<str>, Arc<crate::shard::ShardHandle>, Arc<RestartSender>)> = {
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
        running
            .iter()
            .filter(|(shard, _)| to.applies_to(shard))
            .map(|(shard, reader)| {
                (
                    Arc::clone(shard),
                    Arc::clone(&reader.handle),
                    Arc::clone(&reader.restart),
                )
            })
            .collect()
    };
    let start = ShardStart::At(to.clone());
    // Where later iterators start until a record is delivered: the tip is the moment of the
    // seek, not a later tip.
    let resume = ShardStart::from_checkpoint(
        to.shard().unwrap_or_default(),
        &start.to_checkpoint(crate::epoch_millis()),
    );
    let mut iterators = Vec::with_capacity(targets.len());
    for (shard, _, _) in &targets {
        match api::shard_iterator(&sub.client, &sub.stream, shard, &start).await {
            Ok(iterator) => iterators.push(iterator),
            Err(err) => {
                return Err(KinesisError::Seek {
                    stream: sub.stream.to_string(),
                    reason: format!(
                        "Kinesis refused the position {to:?} for shard {shard}: {err}; every \
                         shard reads on where it was"
                    ),
                });
            }
        }
    }
    for ((_, handle, restart), iterator) in targets.into_iter().zip(iterators) {
        let generation = handle.reset();
        let _ = restart.send(Some(Restart {
            iterator,
            resume: resume.clone(),
            generation,
        }));
    }
    Ok(())
}

type RestartSender = tokio::sync::watch::Sender<Option<Restart>>;

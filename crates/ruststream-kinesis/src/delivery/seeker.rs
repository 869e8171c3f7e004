//! The seeker that moves a subscription, and the one seam behind it: the subscription itself
//! (`live/coordinator/seek.rs`), a trait so the delivery side imports no driver.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use ruststream::Seeker;

use crate::{KinesisError, KinesisPosition};

/// A seek's answer, boxed for the trait object.
pub(crate) type Seeking<'a> = Pin<Box<dyn Future<Output = Result<(), KinesisError>> + Send + 'a>>;

/// The subscription behind a subscriber: what a seek moves and what
/// dropping the subscriber stops.
pub(crate) trait Source: Send + Sync + std::fmt::Debug {
    /// Moves the subscription to `to` (see [`KinesisSeeker`]).
    fn seek(&self, to: KinesisPosition) -> Seeking<'_>;

    /// The subscriber went: the subscription stops reading, and its shards are handed back.
    fn close(&self);
}

/// Moves a subscription: every shard it reads (or the one shard of an
/// [`AtSequence`](KinesisPosition::AtSequence) position) restarts at the position, and the
/// acknowledgement watermark resets, so settlements of earlier deliveries move no checkpoint.
///
/// A seek to a position of every shard (not [`AtSequence`](KinesisPosition::AtSequence)) also
/// sets where the shards this instance takes later without a checkpoint start: those it had no
/// turn or pace for yet at startup (an instance takes a large stream at its pace, a dozen shards
/// at once before it knows its peers), or every shard of an instance that took nothing at
/// startup, the others holding every shard. Shards taken over later from another instance resume
/// after their checkpoint. The seek covers this instance only.
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
    source: Arc<dyn Source>,
}

impl KinesisSeeker {
    /// The seeker of `source`.
    pub(crate) fn new(source: Arc<dyn Source>) -> Self {
        Self { source }
    }
}

impl Seeker for KinesisSeeker {
    type Position = KinesisPosition;
    type Error = KinesisError;

    async fn seek(&self, to: KinesisPosition) -> Result<(), KinesisError> {
        self.source.seek(to).await
    }
}

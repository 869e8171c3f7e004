//! What a delivery settles against ([`Settlement`]: its shard, live or in process), the
//! delivery's hold on it ([`Hold`]), and whether it may still reach a handler ([`Standing`]).

use std::sync::Arc;
use std::time::Duration;

use ruststream::AckError;

use crate::delivery::record::Record;
use crate::watermark::Ticket;

/// What a delivery settles against: the shard that read it, its
/// [`ShardHandle`](crate::shard) (its watermark and lease), live or in process. A trait so the
/// delivery side imports no driver. Each delivery holds it beside its [`Ticket`], and hands both
/// to exactly one of `on_settle`, `on_forget` and `on_hand_back`.
pub(crate) trait Settlement: Send + Sync + std::fmt::Debug {
    /// The handler is done with the record: the shard's checkpoint may pass it.
    fn on_settle(&self, ticket: Ticket) -> Result<(), AckError>;

    /// Exactly once: the handler is done with `record` (delivered `attempt` times so far), and
    /// what its handling staged in `writes` commits with the checkpoint that passes it.
    #[cfg(feature = "dynamodb-lease")]
    fn on_commit(
        &self,
        ticket: Ticket,
        record: &Record,
        attempt: u64,
        writes: &crate::StagedWrites,
    ) -> Result<(), AckError>;

    /// Exactly once: a batch's records of this shard (`members`: each ticket, record and
    /// attempts so far, in order) were all acknowledged or dropped: they settle at once, and
    /// what the batch staged in `writes` commits with the checkpoint that passes them all.
    #[cfg(feature = "dynamodb-lease")]
    fn on_commit_batch(
        &self,
        members: Members,
        writes: &crate::StagedWrites,
    ) -> Result<(), AckError>;

    /// Exactly once: a batch's records of several shards (`parts`: each shard, this one first,
    /// with its records as in [`on_commit_batch`](Self::on_commit_batch)) were all acknowledged
    /// or dropped: they settle at once in every shard, and what the batch staged in `writes`
    /// commits in one transaction with every shard's checkpoint that passes them.
    #[cfg(feature = "dynamodb-lease")]
    fn on_commit_joint(&self, parts: Parts, writes: &crate::StagedWrites) -> Result<(), AckError>;

    /// The shard itself, for the side that knows what it is (a joint commit's parts).
    #[cfg(feature = "dynamodb-lease")]
    fn as_any(self: Arc<Self>) -> Arc<dyn std::any::Any + Send + Sync>;

    /// The record never reached its handler: it moves nothing, and the shard's next owner (or
    /// the seek that made it stale) delivers it again.
    fn on_forget(&self, ticket: Ticket);

    /// Delivers `record` again after `delay`; it was delivered `attempt` times so far, and
    /// stays unsettled meanwhile.
    fn on_hand_back(
        &self,
        ticket: Ticket,
        record: Record,
        attempt: u64,
        delay: Duration,
    ) -> Result<(), AckError>;

    /// Whether the record may still reach a handler now. A shard whose lease ran out by this
    /// instance's clock stops here, which also ends its reader.
    fn standing(&self, ticket: Ticket) -> Standing;

    /// Whether the record may still reach a handler as the subscription pulls it: its shard
    /// stopped, or a seek made it stale. No clock is read: [`standing`](Self::standing) checks
    /// the lease where the handler starts.
    fn queued_standing(&self, ticket: Ticket) -> Standing;

    /// Whether the delivery of `ticket` may still reach a handler as the subscription pulls
    /// it, by [`queued_standing`](Self::queued_standing).
    fn current(&self, ticket: Ticket) -> bool {
        self.queued_standing(ticket).reaches_handler()
    }
}

/// A batch's records of one shard, as they settle together: each ticket, record and attempts so
/// far, in order.
#[cfg(feature = "dynamodb-lease")]
pub(crate) type Members = Vec<(Ticket, Record, u64)>;

/// A batch's records by shard, for a joint commit: each shard with its [`Members`].
#[cfg(feature = "dynamodb-lease")]
pub(crate) type Parts = Vec<(Arc<dyn Settlement>, Members)>;

/// A delivery's hold on what it settles against, released once.
#[derive(Debug)]
pub(crate) struct Hold {
    pub(crate) target: Arc<dyn Settlement>,
    pub(crate) ticket: Ticket,
}

impl Hold {
    /// A hold on `target` for the delivery with `ticket`.
    pub(crate) fn new(target: Arc<dyn Settlement>, ticket: Ticket) -> Self {
        Self { target, ticket }
    }
}

/// How a delivery stands where its handler starts: whether it may still reach it. The shard's
/// machine answers it ([`ShardMachine::standing`](crate::shard::ShardMachine::standing)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Standing {
    Current,
    /// Its shard stopped: its lease is lost, or its reader is handing it back.
    Stopped,
    /// Its shard's lease ran out by this instance's clock.
    RanOut,
    /// A seek moved its shard after it was read.
    Stale,
}

impl Standing {
    /// Whether a delivery of this standing may reach its handler, where the runtime pulls it
    /// (the subscription's receive, `Inlet::poll_next`) and again where its handler starts: only
    /// a current one. A delivery of a stopped shard, of a lease that ran out by this instance's
    /// clock, or of a position a seek left behind is withheld. The one rule both checks share, and the
    /// simulation with them.
    pub(crate) fn reaches_handler(self) -> bool {
        self == Self::Current
    }

    /// Whether finding a delivery of this standing stops its shard: its lease ran out by this
    /// instance's clock, and another instance may hold the shard by now.
    pub(crate) fn stops_shard(self) -> bool {
        self == Self::RanOut
    }
}

//! What happened to a lease, as the machine decides it from a write's answer or from how the
//! lease ended: the driver only says it (a log line and a metric).

use std::sync::Arc;

use crate::telemetry::LeaseEvent;

/// One thing that happened to a held shard's lease, with what its log line needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum LeaseNews {
    /// The release landed.
    Released,
    /// The handoff to the instance that asked for the shard landed.
    HandedOver { to: Arc<str> },
    /// The `SHARD_END` checkpoint landed: the shard's children may start.
    Finished,
    /// The store refused a renewal or a checkpoint: the shard stops without a checkpoint.
    Refused,
    /// The store refused a closing write (the final checkpoint or the release); whether the
    /// final checkpoint landed before.
    RefusedClosing { checkpoint_written: bool },
    /// The lease ran out by this instance's clock: the shard stops without a checkpoint.
    RanOut,
}

impl LeaseNews {
    /// The event it is counted as.
    pub(crate) fn event(&self) -> LeaseEvent {
        match self {
            Self::Released => LeaseEvent::Released,
            Self::HandedOver { .. } => LeaseEvent::HandedOver,
            Self::Finished => LeaseEvent::Finished,
            Self::Refused | Self::RefusedClosing { .. } => LeaseEvent::Lost,
            Self::RanOut => LeaseEvent::Expired,
        }
    }
}

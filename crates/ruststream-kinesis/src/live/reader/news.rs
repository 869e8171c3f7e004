//! Says what happened to a shard's lease: the metric and the log line of each event its machine
//! decided ([`LeaseNews`]). Logged inside the reader's `shard_reader` span, which names the
//! stream, the shard and the owner.

use super::ShardEnv;
use crate::shard::LeaseNews;

/// Counts `news` and logs it: INFO, but WARN for a lease that ran out (not the steady state:
/// renewals kept failing, or the process stalled).
pub(super) fn say(env: &ShardEnv, news: &LeaseNews) {
    env.meters.lease_event(news.event());
    match news {
        LeaseNews::Released => tracing::info!("lease released"),
        LeaseNews::HandedOver { to } => {
            tracing::info!(to = %to, "lease handed over (a handoff)");
        }
        LeaseNews::Finished => tracing::info!("shard read to its end (checkpoint SHARD_END)"),
        LeaseNews::Refused => tracing::info!(
            "lease lost (the store refused a renewal: another instance holds the shard, or its \
             row was deleted); the shard stops without a checkpoint"
        ),
        LeaseNews::RefusedClosing { checkpoint_written } => tracing::info!(
            checkpoint_written,
            "lease lost while handing the shard back (the store refused the write: another \
             instance holds the shard, or its row was deleted){}",
            if *checkpoint_written {
                "; the final checkpoint had landed"
            } else {
                "; the final checkpoint was not written"
            }
        ),
        LeaseNews::RanOut => tracing::warn!(
            "lease lost (it ran out by this instance's clock); the shard stops without a \
             checkpoint"
        ),
    }
}

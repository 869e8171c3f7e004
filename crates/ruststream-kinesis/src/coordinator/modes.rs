//! Whether the instances on one stream keep their leases alive the same way: by a write of each
//! row (the default) or by each instance's beat (`KinesisBroker::keep_leases_alive_by_beat`). A
//! fleet split between the two still keeps one holder per shard (every write is conditioned on
//! the row's owner and counter, and an instance of either way judges a row kept by beat by its
//! holder's beat), but it pays for both and its halves cannot balance with each other: a
//! subscription that finds another live instance holding rows the other way while it opens does
//! not open; one that finds it later says so (once each time the fleet splits) and goes on.

use std::sync::Arc;

use crate::coordinator::plan::Rows;
use crate::lease::Notice;

/// A row held by another live instance that keeps its leases the other way.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SplitFleet {
    /// The row's shard.
    pub(crate) shard: Arc<str>,
    /// The instance holding it.
    pub(crate) holder: String,
    /// Whether that instance keeps its leases alive by beat (this one, then, per row).
    pub(crate) theirs_by_beat: bool,
}

/// The first row of `rows` that another live instance holds the other way than `owner`
/// (`by_beat`: this instance keeps its leases alive by beat) at `now_ms`: a row kept by beat
/// whose holder's beat in `notice` is alive, for an instance renewing per row; a row whose
/// lease renewed per row has not lapsed, for an instance kept alive by beat. Rows of dead
/// instances, released rows and this instance's own rows split nothing.
pub(crate) fn split_fleet(
    rows: &Rows,
    notice: &Notice,
    owner: &str,
    by_beat: bool,
    now_ms: u64,
) -> Option<SplitFleet> {
    rows.iter()
        .filter_map(|(shard, row)| {
            let row = row.as_ref()?;
            let holder = row.owner.as_deref().filter(|holder| *holder != owner)?;
            let theirs_by_beat = row.is_kept_by_beat(now_ms);
            let live = if theirs_by_beat {
                notice.is_alive(holder, now_ms)
            } else {
                !row.is_expired_at(now_ms)
            };
            (live && theirs_by_beat != by_beat).then(|| SplitFleet {
                shard: Arc::clone(shard),
                holder: holder.to_owned(),
                theirs_by_beat,
            })
        })
        // The same row named each time, whatever the map's order.
        .min_by(|a, b| a.shard.cmp(&b.shard))
}

#[cfg(test)]
mod tests;

//! Which shards to take: the pure decisions of the coordinator, fed with a listing, the rows of
//! the lease table and a clock, so tests drive them without I/O.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use crate::KinesisPosition;
use crate::api::ShardInfo;
use crate::lease::LeaseState;
use crate::position::ShardStart;

/// What to do with one listed shard this instance does not read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Take its lease and read it from `start`.
    Take { start: ShardStart },
    /// It was read to its end.
    Finished,
    /// A parent still in the stream is not at `SHARD_END` yet.
    WaitForParents,
    /// Another instance holds an unexpired lease.
    HeldElsewhere,
}

/// The rows a decision reads, by shard id; `None` where the table has no row.
pub(crate) type Rows = HashMap<Arc<str>, Option<LeaseState>>;

/// Decides what to do with `shard`.
///
/// A child waits until each parent still listed is at `SHARD_END`, so per-key order survives a
/// split or a merge. A shard with a checkpoint resumes after it; one without starts where
/// `initial` says when it is a root shard, and at its beginning when it is a child (everything a
/// child holds was written after its parents ended, which this subscription read).
pub(crate) fn verdict(
    shard: &ShardInfo,
    listed: &HashSet<&str>,
    rows: &Rows,
    owner: &str,
    now_ms: u64,
    initial: &KinesisPosition,
) -> Verdict {
    let row = rows.get(&shard.id).cloned().flatten();
    if row.as_ref().is_some_and(LeaseState::is_finished) {
        return Verdict::Finished;
    }
    let parents_done = shard.parents.iter().all(|parent| {
        !listed.contains(parent.as_ref())
            || rows
                .get(parent)
                .and_then(Option::as_ref)
                .is_some_and(LeaseState::is_finished)
    });
    if !parents_done {
        return Verdict::WaitForParents;
    }
    if let Some(row) = &row
        && !row.is_held_by(owner)
        && !row.is_expired_at(now_ms)
    {
        return Verdict::HeldElsewhere;
    }
    let start = match row.and_then(|row| row.checkpoint) {
        Some(checkpoint) => ShardStart::from_checkpoint(&shard.id, &checkpoint),
        None if !shard.parents.is_empty() => ShardStart::At(KinesisPosition::TrimHorizon),
        None if initial.applies_to(&shard.id) => ShardStart::At(initial.clone()),
        None => ShardStart::At(KinesisPosition::Latest),
    };
    Verdict::Take { start }
}

/// Marks the shards known to be finished as finished in `rows`: they are not read again, and
/// their children must still see them done.
pub(crate) fn add_finished(rows: &mut Rows, finished: &HashSet<Arc<str>>) {
    for shard in finished {
        rows.entry(Arc::clone(shard)).or_insert_with(|| {
            Some(LeaseState {
                checkpoint: Some(crate::SHARD_END.to_owned()),
                ..LeaseState::default()
            })
        });
    }
}

/// The shard ids whose rows a round must read: every listed shard this instance does not read,
/// and their parents.
pub(crate) fn rows_to_read<'a>(
    listing: &'a [ShardInfo],
    reading: &HashSet<Arc<str>>,
    finished: &HashSet<Arc<str>>,
) -> Vec<&'a Arc<str>> {
    let listed: HashSet<&str> = listing.iter().map(|s| s.id.as_ref()).collect();
    let mut wanted: Vec<&Arc<str>> = Vec::new();
    for shard in listing {
        if reading.contains(&shard.id) || finished.contains(&shard.id) {
            continue;
        }
        wanted.push(&shard.id);
        for parent in &shard.parents {
            if listed.contains(parent.as_ref()) && !finished.contains(parent) {
                wanted.push(parent);
            }
        }
    }
    wanted.sort();
    wanted.dedup();
    wanted
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SHARD_END;

    fn shard(id: &str, parents: &[&str], closed: bool) -> ShardInfo {
        ShardInfo {
            id: Arc::from(id),
            parents: parents.iter().map(|p| Arc::from(*p)).collect(),
            closed,
        }
    }

    fn row(owner: Option<&str>, expiry_ms: u64, checkpoint: Option<&str>) -> Option<LeaseState> {
        Some(LeaseState {
            owner: owner.map(str::to_owned),
            expiry_ms,
            counter: 1,
            checkpoint: checkpoint.map(str::to_owned),
        })
    }

    fn decide(shard: &ShardInfo, listing: &[ShardInfo], rows: &Rows, now_ms: u64) -> Verdict {
        let listed = listing.iter().map(|s| s.id.as_ref()).collect();
        verdict(shard, &listed, rows, "me", now_ms, &KinesisPosition::Latest)
    }

    #[test]
    fn a_new_root_shard_starts_at_the_initial_position() {
        let root = shard("s0", &[], false);
        let verdict = decide(&root, std::slice::from_ref(&root), &Rows::new(), 0);
        assert_eq!(
            verdict,
            Verdict::Take {
                start: ShardStart::At(KinesisPosition::Latest)
            }
        );
    }

    #[test]
    fn a_checkpointed_shard_resumes_after_its_checkpoint() {
        let root = shard("s0", &[], false);
        let rows = Rows::from([(Arc::from("s0"), row(None, 0, Some("42")))]);
        assert_eq!(
            decide(&root, std::slice::from_ref(&root), &rows, 0),
            Verdict::Take {
                start: ShardStart::After(Arc::from("42"))
            }
        );
    }

    #[test]
    fn a_child_waits_for_every_listed_parent_to_reach_shard_end() {
        let (a, b) = (shard("a", &[], true), shard("b", &[], true));
        let child = shard("c", &["a", "b"], false);
        let listing = [a, b, child.clone()];
        let mut rows = Rows::from([
            (Arc::from("a"), row(None, 0, Some(SHARD_END))),
            (Arc::from("b"), row(Some("other"), u64::MAX, Some("7"))),
        ]);
        assert_eq!(decide(&child, &listing, &rows, 0), Verdict::WaitForParents);
        rows.insert(Arc::from("b"), row(None, 0, Some(SHARD_END)));
        assert_eq!(
            decide(&child, &listing, &rows, 0),
            Verdict::Take {
                start: ShardStart::At(KinesisPosition::TrimHorizon)
            }
        );
    }

    #[test]
    fn a_parent_trimmed_out_of_the_stream_does_not_hold_its_child() {
        let child = shard("c", &["gone"], false);
        assert!(matches!(
            decide(&child, std::slice::from_ref(&child), &Rows::new(), 0),
            Verdict::Take { .. }
        ));
    }

    #[test]
    fn a_live_lease_of_another_owner_is_left_alone_until_it_expires() {
        let root = shard("s0", &[], false);
        let rows = Rows::from([(Arc::from("s0"), row(Some("other"), 10_000, Some("5")))]);
        let listing = std::slice::from_ref(&root);
        assert_eq!(decide(&root, listing, &rows, 9_000), Verdict::HeldElsewhere);
        // Expired, but within the skew tolerance: still held.
        assert_eq!(
            decide(&root, listing, &rows, 10_500),
            Verdict::HeldElsewhere
        );
        assert!(matches!(
            decide(&root, listing, &rows, 11_001),
            Verdict::Take { .. }
        ));
    }

    #[test]
    fn a_finished_shard_is_not_taken_again() {
        let root = shard("s0", &[], true);
        let rows = Rows::from([(Arc::from("s0"), row(None, 0, Some(SHARD_END)))]);
        assert_eq!(
            decide(&root, std::slice::from_ref(&root), &rows, 0),
            Verdict::Finished
        );
    }

    #[test]
    fn a_child_of_a_parent_known_finished_is_taken_without_reading_the_parent() {
        let parent = shard("a", &[], true);
        let child = shard("c", &["a"], false);
        let listing = [parent, child.clone()];
        let mut rows = Rows::new();
        assert_eq!(decide(&child, &listing, &rows, 0), Verdict::WaitForParents);
        add_finished(&mut rows, &HashSet::from([Arc::from("a")]));
        assert!(matches!(
            decide(&child, &listing, &rows, 0),
            Verdict::Take { .. }
        ));
    }

    #[test]
    fn rows_to_read_covers_candidates_and_their_parents() {
        let listing = [shard("a", &[], true), shard("c", &["a"], false)];
        let reading = HashSet::from([Arc::from("a")]);
        let wanted = rows_to_read(&listing, &reading, &HashSet::new());
        let wanted: Vec<&str> = wanted.iter().map(|id| id.as_ref()).collect();
        assert_eq!(wanted, ["a", "c"]);
    }
}

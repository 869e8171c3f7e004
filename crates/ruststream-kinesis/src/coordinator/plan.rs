//! Which shards to take: the pure decisions of the coordinator, fed with a listing, the rows of
//! the lease table and a clock, so tests drive them without I/O.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use crate::KinesisPosition;
use crate::kinesis::shards::ShardInfo;
use crate::lease::LeaseState;
use crate::settings::position::ShardStart;

/// What to do with one listed shard this instance does not read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Take its lease; a row without a checkpoint starts at `fresh`.
    Take { fresh: KinesisPosition },
    /// It was read to its end.
    Finished,
    /// A parent still in the stream is not at `SHARD_END` yet.
    WaitForParents,
    /// Another instance holds an unexpired lease.
    HeldElsewhere,
    /// A closed shard this application never read and never will: it has no row, none of its
    /// parents was read, and the subscription starts at the tip, where a closed shard holds
    /// nothing. A take marks its row [`SHARD_SKIPPED`](crate::SHARD_SKIPPED), and its children
    /// wait for the mark.
    Skip,
    /// Marked [`SHARD_SKIPPED`](crate::SHARD_SKIPPED): never read.
    Skipped,
}

/// What a take of a shard is for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum TakeFor {
    /// Reading it; a row without a checkpoint starts at the position.
    Reading(KinesisPosition),
    /// Marking it [`SHARD_SKIPPED`](crate::SHARD_SKIPPED) (`Verdict::Skip`).
    Skipping,
}

impl TakeFor {
    /// The checkpoint the take records in a row that has none, taken at `now_ms` by the taker's
    /// wall clock: where a first reader starts (so a later owner starts no later), or the mark.
    pub(crate) fn recorded(&self, now_ms: u64) -> String {
        match self {
            Self::Reading(fresh) => ShardStart::At(fresh.clone()).to_checkpoint(now_ms),
            Self::Skipping => crate::SHARD_SKIPPED.to_owned(),
        }
    }
}

/// The row a take-over names: kept alive by `holder`'s beat, at `counter`; `own` when the
/// holder is this instance (its chain of beats broke, and it takes its rows again by counter,
/// which no step of its wall clock and no other run under its owner id can confuse).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Over {
    pub(crate) holder: Arc<str>,
    pub(crate) counter: u64,
    pub(crate) own: bool,
}

/// The rows a decision reads, by shard id; `None` where the table has no row.
pub(crate) type Rows = HashMap<Arc<str>, Option<LeaseState>>;

/// The shards of one listing, by id.
pub(crate) type Listed<'a> = HashMap<&'a str, &'a ShardInfo>;

/// The shards of `listing`, by id.
pub(crate) fn listed(listing: &[ShardInfo]) -> Listed<'_> {
    listing
        .iter()
        .map(|shard| (shard.id.as_ref(), shard))
        .collect()
}

/// How a shard without a checkpoint relates to what this application read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lineage {
    /// A parent was read (to its end, or it left the stream while its row says it was read):
    /// the shard holds what follows, from its beginning.
    ParentsRead,
    /// Some parent still has to be read to its end first.
    ParentsPending,
    /// Nothing this application read comes before it (no parents, or none of them was ever
    /// read): it starts where the subscription starts.
    Fresh,
}

/// Decides what to do with `shard`.
///
/// A child waits until each parent still listed is at `SHARD_END`, so per-key order survives a
/// split or a merge. A shard with a checkpoint resumes after it. One without starts at its
/// beginning when a parent was read (everything it holds was written after its parents ended,
/// which this subscription read), and where `initial` says when none was: a new subscription
/// at the tip, or at a timestamp after a split, does not replay the children's retention. A
/// closed shard that would start at the tip holds nothing there: it is marked skipped, and its
/// children wait for the mark, so no late take brings it back after them.
pub(crate) fn verdict(
    shard: &ShardInfo,
    listed: &Listed<'_>,
    rows: &Rows,
    owner: &str,
    now_ms: u64,
    initial: &KinesisPosition,
) -> Verdict {
    let row = rows.get(&shard.id).cloned().flatten();
    if row.as_ref().is_some_and(LeaseState::is_finished) {
        return Verdict::Finished;
    }
    // A closed shard without a row whose children all moved past their start was finished,
    // and its row deleted since (`hygiene`): a child starts only once its parents are done.
    if row.is_none() && shard.closed && children_moved_on(shard, listed, rows) {
        return Verdict::Finished;
    }
    if row.as_ref().is_some_and(LeaseState::is_skipped) {
        return Verdict::Skipped;
    }
    let has_checkpoint = row.as_ref().is_some_and(|row| row.checkpoint.is_some());
    // A shard with a checkpoint was taken once, when its parents were done: they hold it no
    // more, and where it starts is its checkpoint.
    let lineage = if has_checkpoint {
        Lineage::Fresh
    } else {
        lineage(shard, listed, rows)
    };
    if lineage == Lineage::ParentsPending {
        return Verdict::WaitForParents;
    }
    if let Some(row) = &row
        && !row.is_held_by(owner)
        && !row.is_expired_at(now_ms)
    {
        return Verdict::HeldElsewhere;
    }
    let fresh = match lineage {
        Lineage::ParentsRead => KinesisPosition::TrimHorizon,
        _ if initial.applies_to(&shard.id) => initial.clone(),
        _ => KinesisPosition::Latest,
    };
    // A row without a checkpoint was never read (a reader starts only once its take recorded
    // a start): marking it lets its children start, where reading it at the tip would make
    // them replay their retention.
    if shard.closed && !has_checkpoint && fresh == KinesisPosition::Latest {
        return Verdict::Skip;
    }
    Verdict::Take { fresh }
}

/// Whether a checkpoint lies past where its shard started: a sequence number (inside an
/// aggregate or not), a handler's seek (made while the shard was read, its parents long
/// finished) or `SHARD_END`, not a recorded start or `SHARD_SKIPPED`.
pub(crate) fn past_start(row: &LeaseState) -> bool {
    row.is_finished()
        || row.checkpoint.as_deref().is_some_and(|checkpoint| {
            crate::lease::split_within(checkpoint).is_some()
                || ShardStart::is_seek_checkpoint(checkpoint)
                || (!checkpoint.is_empty() && checkpoint.bytes().all(|b| b.is_ascii_digit()))
        })
}

/// The shards of `shards` that name `parent` as a parent.
pub(crate) fn children_in<'a>(
    shards: impl IntoIterator<Item = &'a ShardInfo>,
    parent: &'a str,
) -> impl Iterator<Item = &'a ShardInfo> {
    shards
        .into_iter()
        .filter(move |child| child.parents.iter().any(|p| p.as_ref() == parent))
}

/// Whether `shard` has children in the listing and every one of them moved on: its row's
/// checkpoint lies past its start, or it has no row (finished, and deleted) and is closed with
/// children that all moved on in turn. None of them consults `shard` any more.
pub(crate) fn children_moved_on(shard: &ShardInfo, listed: &Listed<'_>, rows: &Rows) -> bool {
    let mut children = children_in(listed.values().copied(), &shard.id).peekable();
    children.peek().is_some() && children.all(|child| moved_on(child, listed, rows))
}

/// Whether `shard` no longer needs its parents: its row's checkpoint lies past its start, or it
/// has no row and is closed with children that all moved on (it was finished, and its row
/// deleted).
pub(crate) fn moved_on(shard: &ShardInfo, listed: &Listed<'_>, rows: &Rows) -> bool {
    match rows.get(&shard.id).and_then(Option::as_ref) {
        Some(row) => past_start(row),
        None => shard.closed && children_moved_on(shard, listed, rows),
    }
}

fn lineage(shard: &ShardInfo, listed: &Listed<'_>, rows: &Rows) -> Lineage {
    let mut lineage = Lineage::Fresh;
    for parent in &shard.parents {
        let row = rows.get(parent).and_then(Option::as_ref);
        let parent_listed = listed.get(parent.as_ref());
        match (row, parent_listed) {
            // Never read, and never to be: nothing of it comes first.
            (Some(row), _) if row.is_skipped() => {}
            (Some(row), _) if row.is_finished() => lineage = Lineage::ParentsRead,
            // Read once, then trimmed out of the stream: it cannot hold its child.
            (Some(_), None) => lineage = Lineage::ParentsRead,
            // Being read, or about to be.
            (Some(_), Some(_)) => return Lineage::ParentsPending,
            // Never read, and gone: nothing of it comes first. (An application behind by more
            // than the retention lost the parent's records and starts the child where it
            // starts: the table cannot tell that parent from one that ended before it started.)
            (None, None) => {}
            // Never read yet: it holds its child until it is read, or marked as never to be.
            (None, Some(_)) => return Lineage::ParentsPending,
        }
    }
    lineage
}

/// The shards of `listing` a round leaves alone because the row of the shard itself, or of one
/// of its ancestors, could not be read: `verdict` would take the unknown row for a missing one,
/// and a missing row of a closed ancestor can make a descendant start at the tip and skip what
/// it holds. A closed shard without a row is also left alone while a descendant's row could not
/// be read: those rows tell whether it was finished (and its row deleted).
pub(crate) fn held_back_by(
    listing: &[ShardInfo],
    rows: &Rows,
    unreadable: &HashSet<Arc<str>>,
) -> HashSet<Arc<str>> {
    fn blocked<'a>(
        shard: &'a str,
        listed: &Listed<'a>,
        unreadable: &HashSet<Arc<str>>,
        known: &mut HashMap<&'a str, bool>,
    ) -> bool {
        if let Some(&answer) = known.get(shard) {
            return answer;
        }
        let answer = unreadable.contains(shard)
            || listed.get(shard).is_some_and(|info| {
                info.parents
                    .iter()
                    .any(|parent| blocked(parent, listed, unreadable, known))
            });
        known.insert(shard, answer);
        answer
    }
    /// Whether a listed descendant of `shard` has a row that could not be read: a closed shard
    /// without a row is judged by its descendants' rows (`children_moved_on`).
    fn below(shard: &str, listing: &[ShardInfo], unreadable: &HashSet<Arc<str>>) -> bool {
        children_in(listing, shard)
            .any(|child| unreadable.contains(&child.id) || below(&child.id, listing, unreadable))
    }
    if unreadable.is_empty() {
        return HashSet::new();
    }
    let listed = listed(listing);
    let mut known = HashMap::new();
    listing
        .iter()
        .filter(|shard| {
            blocked(&shard.id, &listed, unreadable, &mut known)
                || (shard.closed
                    && rows.get(&shard.id).is_none_or(Option::is_none)
                    && below(&shard.id, listing, unreadable))
        })
        .map(|shard| Arc::clone(&shard.id))
        .collect()
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

/// The shard ids whose rows a round must read: every listed shard this instance neither reads
/// nor never reads again (`settled`: finished, skipped, gone), their parents (listed or
/// not: a parent trimmed out of the stream still tells by its row whether this application read
/// it) unless they are known `finished`, and the descendants of those that are closed.
pub(crate) fn rows_to_read<'a>(
    listing: &'a [ShardInfo],
    reading: &HashSet<Arc<str>>,
    settled: impl Fn(&Arc<str>) -> bool,
    finished: &HashSet<Arc<str>>,
) -> Vec<&'a Arc<str>> {
    let mut wanted: Vec<&Arc<str>> = Vec::new();
    for shard in listing {
        if reading.contains(&shard.id) || settled(&shard.id) {
            continue;
        }
        wanted.push(&shard.id);
        for parent in &shard.parents {
            if !finished.contains(parent) {
                wanted.push(parent);
            }
        }
    }
    // A closed shard may have no row left (finished, then deleted): its descendants' rows tell
    // whether it was read.
    let mut closed: Vec<&Arc<str>> = listing
        .iter()
        .filter(|shard| shard.closed && wanted.contains(&&shard.id))
        .map(|shard| &shard.id)
        .collect();
    while let Some(parent) = closed.pop() {
        for child in children_in(listing, parent) {
            if !wanted.contains(&&child.id) {
                wanted.push(&child.id);
                if child.closed {
                    closed.push(&child.id);
                }
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
            behind_ms: None,
            handoff: None,
            commit_token: None,
        })
    }

    fn decide_from(
        shard: &ShardInfo,
        listing: &[ShardInfo],
        rows: &Rows,
        now_ms: u64,
        initial: &KinesisPosition,
    ) -> Verdict {
        verdict(shard, &listed(listing), rows, "me", now_ms, initial)
    }

    fn decide(shard: &ShardInfo, listing: &[ShardInfo], rows: &Rows, now_ms: u64) -> Verdict {
        decide_from(shard, listing, rows, now_ms, &KinesisPosition::Latest)
    }

    fn take(fresh: KinesisPosition) -> Verdict {
        Verdict::Take { fresh }
    }

    #[test]
    fn a_new_root_shard_starts_at_the_initial_position() {
        let root = shard("s0", &[], false);
        let verdict = decide(&root, std::slice::from_ref(&root), &Rows::new(), 0);
        assert_eq!(verdict, take(KinesisPosition::Latest));
        let horizon = decide_from(
            &root,
            std::slice::from_ref(&root),
            &Rows::new(),
            0,
            &KinesisPosition::TrimHorizon,
        );
        assert_eq!(horizon, take(KinesisPosition::TrimHorizon));
    }

    #[test]
    fn a_checkpointed_shard_is_taken_and_resumes_after_its_checkpoint() {
        let root = shard("s0", &[], false);
        let rows = Rows::from([(Arc::from("s0"), row(None, 0, Some("42")))]);
        assert!(matches!(
            decide(&root, std::slice::from_ref(&root), &rows, 0),
            Verdict::Take { .. }
        ));
        assert_eq!(
            ShardStart::from_checkpoint("s0", "42"),
            ShardStart::After(crate::SharedStr::from("42"))
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
            take(KinesisPosition::TrimHorizon)
        );
    }

    #[test]
    fn a_parent_trimmed_out_of_the_stream_does_not_hold_its_child() {
        let child = shard("c", &["gone"], false);
        // Never read by this application: the child starts where the subscription starts.
        assert_eq!(
            decide(&child, std::slice::from_ref(&child), &Rows::new(), 0),
            take(KinesisPosition::Latest)
        );
        // Read, then trimmed before its end was checkpointed: the child follows from its start.
        let rows = Rows::from([(Arc::from("gone"), row(None, 0, Some("7")))]);
        assert_eq!(
            decide(&child, std::slice::from_ref(&child), &rows, 0),
            take(KinesisPosition::TrimHorizon)
        );
    }

    #[test]
    fn children_of_parents_never_read_start_at_the_tip_and_the_parents_are_skipped() {
        // A new subscription at the tip of a stream that was split before it started.
        let parent = shard("p", &[], true);
        let (left, right) = (shard("l", &["p"], false), shard("r", &["p"], false));
        let listing = [parent.clone(), left.clone(), right.clone()];
        let mut rows = Rows::new();
        assert_eq!(decide(&parent, &listing, &rows, 0), Verdict::Skip);
        // The children wait for the parent's mark, so no late take brings it back after them.
        assert_eq!(decide(&left, &listing, &rows, 0), Verdict::WaitForParents);
        rows.insert(Arc::from("p"), row(None, 0, Some(crate::SHARD_SKIPPED)));
        assert_eq!(decide(&parent, &listing, &rows, 0), Verdict::Skipped);
        assert_eq!(
            decide(&left, &listing, &rows, 0),
            take(KinesisPosition::Latest)
        );
        assert_eq!(
            decide(&right, &listing, &rows, 0),
            take(KinesisPosition::Latest)
        );
        // Two generations of splits before the start: the grandchildren start at the tip too,
        // once the closed generations are marked one after the other.
        let child = shard("l", &["p"], true);
        let grandchild = shard("g", &["l"], false);
        let listing = [parent, child.clone(), grandchild.clone()];
        assert_eq!(decide(&child, &listing, &rows, 0), Verdict::Skip);
        assert_eq!(
            decide(&grandchild, &listing, &rows, 0),
            Verdict::WaitForParents
        );
        rows.insert(Arc::from("l"), row(None, 0, Some(crate::SHARD_SKIPPED)));
        assert_eq!(
            decide(&grandchild, &listing, &rows, 0),
            take(KinesisPosition::Latest)
        );
    }

    #[test]
    fn a_closed_shard_with_a_row_but_no_checkpoint_is_marked_and_its_child_waits_for_the_mark() {
        // A take at the tip whose start record failed left a row without a checkpoint, then the
        // shard closed: nothing of it was read, so it is marked, and its child waits meanwhile.
        let parent = shard("p", &[], true);
        let child = shard("c", &["p"], false);
        let listing = [parent.clone(), child.clone()];
        let mut rows = Rows::from([(Arc::from("p"), row(Some("gone"), 5, None))]);
        let now_ms = 60_000;
        assert_eq!(decide(&parent, &listing, &rows, now_ms), Verdict::Skip);
        assert_eq!(
            decide(&child, &listing, &rows, now_ms),
            Verdict::WaitForParents
        );
        rows.insert(Arc::from("p"), row(None, 0, Some(crate::SHARD_SKIPPED)));
        assert_eq!(
            decide(&child, &listing, &rows, now_ms),
            take(KinesisPosition::Latest)
        );
    }

    #[test]
    fn an_unreadable_row_holds_back_every_descendant_of_its_shard() {
        // The row of a parent trimmed out of the stream could not be read: taken for a missing
        // one, it would make the child start at the tip, past what followed the parent.
        let orphan = shard("o", &["trimmed"], false);
        assert_eq!(
            decide(&orphan, std::slice::from_ref(&orphan), &Rows::new(), 0),
            take(KinesisPosition::Latest),
            "without the rule the child would start at the tip"
        );
        let trimmed = HashSet::from([Arc::from("trimmed")]);
        let held = held_back_by(std::slice::from_ref(&orphan), &Rows::new(), &trimmed);
        assert!(held.contains("o"));
        // Every generation below an unreadable row waits, and nothing else does.
        let grandparent = shard("g", &[], true);
        let parent = shard("p", &["g"], true);
        let child = shard("c", &["p"], false);
        let other = shard("x", &[], false);
        let listing = [grandparent, parent, child, other];
        let unreadable = HashSet::from([Arc::from("g")]);
        let mut held: Vec<_> = held_back_by(&listing, &Rows::new(), &unreadable)
            .into_iter()
            .map(|id| id.to_string())
            .collect();
        held.sort();
        assert_eq!(held, ["c", "g", "p"]);
    }

    #[test]
    fn a_closed_shard_whose_parent_was_read_is_read_from_its_beginning() {
        // The application read the grandparent to its end, was down through two splits, and
        // comes back: the closed child must be read before the grandchild.
        let grandparent = shard("gp", &[], true);
        let child = shard("c", &["gp"], true);
        let grandchild = shard("g", &["c"], false);
        let listing = [grandparent, child.clone(), grandchild.clone()];
        let rows = Rows::from([(Arc::from("gp"), row(None, 0, Some(SHARD_END)))]);
        assert_eq!(
            decide(&child, &listing, &rows, 0),
            take(KinesisPosition::TrimHorizon)
        );
        assert_eq!(
            decide(&grandchild, &listing, &rows, 0),
            Verdict::WaitForParents
        );
    }

    #[test]
    fn at_a_timestamp_never_read_parents_are_read_from_it_and_children_start_there() {
        let at = KinesisPosition::AtTimestamp(std::time::UNIX_EPOCH);
        let parent = shard("p", &[], true);
        let child = shard("c", &["p"], false);
        let listing = [parent.clone(), child.clone()];
        // The parent may hold records after the timestamp: it is read first, from there.
        assert_eq!(
            decide_from(&parent, &listing, &Rows::new(), 0, &at),
            take(at.clone())
        );
        assert_eq!(
            decide_from(&child, &listing, &Rows::new(), 0, &at),
            Verdict::WaitForParents
        );
        // A parent trimmed away and never read: the child starts at the timestamp, not at its
        // oldest record.
        let orphan = shard("o", &["gone"], false);
        assert_eq!(
            decide_from(&orphan, std::slice::from_ref(&orphan), &Rows::new(), 0, &at),
            take(at)
        );
    }

    #[test]
    fn a_child_with_a_checkpoint_waits_for_no_parent() {
        // Taken once when its parent was done; the parent's row is gone from the table since.
        let parent = shard("p", &[], true);
        let child = shard("c", &["p"], false);
        let listing = [parent, child.clone()];
        let rows = Rows::from([(Arc::from("c"), row(None, 0, Some("42")))]);
        assert!(matches!(
            decide_from(&child, &listing, &rows, 0, &KinesisPosition::TrimHorizon),
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
        let mut rows = Rows::from([(Arc::from("a"), row(Some("other"), u64::MAX, Some("3")))]);
        assert_eq!(decide(&child, &listing, &rows, 0), Verdict::WaitForParents);
        rows.remove("a");
        add_finished(&mut rows, &HashSet::from([Arc::from("a")]));
        assert_eq!(
            decide(&child, &listing, &rows, 0),
            take(KinesisPosition::TrimHorizon)
        );
    }

    #[test]
    fn rows_to_read_covers_candidates_and_their_parents_listed_or_not() {
        let listing = [shard("a", &[], true), shard("c", &["a", "gone"], false)];
        let reading = HashSet::from([Arc::from("a")]);
        let wanted = rows_to_read(&listing, &reading, |_| false, &HashSet::new());
        let wanted: Vec<&str> = wanted.iter().map(|id| id.as_ref()).collect();
        assert_eq!(wanted, ["a", "c", "gone"]);
    }
}

//! When a round deletes a row: a finished shard's once every child moved past its start, a gone
//! shard's once it was missed for the grace period and no listed child needs it; never a row
//! with an unexpired lease; and a closed shard without a row whose children moved on counts as
//! finished.

use super::*;
use crate::kinesis::api::ShardInfo;
use crate::lease::LeaseState;
use crate::{KinesisPosition, SHARD_END};

const NOW_MS: u64 = 1_700_000_000_000;
const GRACE: Duration = Duration::from_secs(50);

fn shard(id: &str, parents: &[&str], closed: bool) -> ShardInfo {
    ShardInfo {
        id: Arc::from(id),
        parents: parents.iter().map(|p| Arc::from(*p)).collect(),
        closed,
    }
}

fn row(owner: Option<&str>, expiry_ms: u64, checkpoint: &str) -> Option<LeaseState> {
    Some(LeaseState {
        owner: owner.map(str::to_owned),
        expiry_ms,
        counter: 7,
        checkpoint: Some(checkpoint.to_owned()),
        behind_ms: None,
        handoff: None,
        commit_token: None,
    })
}

fn rows(entries: &[(&str, Option<LeaseState>)]) -> Rows {
    entries
        .iter()
        .map(|(shard, row)| (Arc::from(*shard), row.clone()))
        .collect()
}

fn deleted(deletions: &[Deletion]) -> Vec<&str> {
    deletions.iter().map(|d| d.shard.as_ref()).collect()
}

/// A split: `p` closed, its children `a` and `b` open.
fn split() -> Vec<ShardInfo> {
    vec![
        shard("p", &[], true),
        shard("a", &["p"], false),
        shard("b", &["p"], false),
    ]
}

#[test]
fn a_finished_row_goes_once_every_child_moved_past_its_start() {
    let mut hygiene = Hygiene::with_grace(GRACE);
    let listing = split();
    let now = Duration::ZERO;
    let finished = row(None, 0, SHARD_END);
    let moved = row(Some("pod-a"), NOW_MS + 5_000, "4959");
    let started = row(Some("pod-b"), NOW_MS + 5_000, "TRIM_HORIZON");
    // One child still at the start it recorded (it may need the parent again), or not taken
    // yet: kept, however long it stays so.
    let early = rows(&[
        ("p", finished.clone()),
        ("a", moved.clone()),
        ("b", started),
    ]);
    let untaken = rows(&[("p", finished.clone()), ("a", moved.clone()), ("b", None)]);
    for kept in [&early, &untaken] {
        assert!(hygiene.deletions(&listing, kept, now, NOW_MS).is_empty());
        assert!(
            hygiene
                .deletions(&listing, kept, now + GRACE * 2, NOW_MS)
                .is_empty()
        );
    }
    let inside = row(None, 0, "4960:3");
    let later = rows(&[("p", finished), ("a", moved), ("b", inside)]);
    assert!(
        hygiene.deletions(&listing, &later, now, NOW_MS).is_empty(),
        "not before it has been deletable for the grace: a take sent earlier may still land"
    );
    let deletions = hygiene.deletions(&listing, &later, now + GRACE, NOW_MS);
    assert_eq!(deleted(&deletions), ["p"]);
    assert_eq!(deletions[0].counter, 7, "conditioned on the counter read");
}

#[test]
fn a_row_with_an_unexpired_lease_is_never_deleted() {
    let mut hygiene = Hygiene::with_grace(GRACE);
    let listing = split();
    let moved = row(None, 0, "4959");
    let held = rows(&[
        ("p", row(Some("pod-a"), NOW_MS + 1_000, SHARD_END)),
        ("a", moved.clone()),
        ("b", moved),
    ]);
    assert!(
        hygiene
            .deletions(&listing, &held, Duration::ZERO, NOW_MS)
            .is_empty()
    );
    assert!(
        hygiene.deletions(&listing, &held, GRACE, NOW_MS).is_empty(),
        "held, past the grace"
    );
    // The same rows once the lease ran out (by more than the skew tolerance): deleted after the
    // grace, counted from then.
    let lapsed = NOW_MS + 2_001;
    assert!(hygiene.deletions(&listing, &held, GRACE, lapsed).is_empty());
    assert_eq!(
        deleted(&hygiene.deletions(&listing, &held, GRACE * 2, lapsed)),
        ["p"]
    );
}

#[test]
fn a_gone_shards_row_goes_once_deletable_for_the_grace_unless_a_listed_child_needs_it() {
    let mut hygiene = Hygiene::with_grace(GRACE);
    // `p` was trimmed out of the stream: only its children are listed.
    let listing = vec![shard("a", &["p"], false), shard("b", &["p"], false)];
    let read = row(None, 0, "4959");
    let waiting = rows(&[("p", read.clone()), ("a", read.clone()), ("b", None)]);
    let at = |secs| Duration::from_secs(secs);
    assert!(
        hygiene
            .deletions(&listing, &waiting, at(0), NOW_MS)
            .is_empty()
    );
    assert!(
        hygiene
            .deletions(&listing, &waiting, at(60), NOW_MS)
            .is_empty(),
        "b has no checkpoint: p's row says b starts at its beginning"
    );
    let moved = rows(&[
        ("p", read.clone()),
        ("a", read.clone()),
        ("b", read.clone()),
    ]);
    assert!(
        hygiene
            .deletions(&listing, &moved, at(10), NOW_MS)
            .is_empty(),
        "not before it has been deletable for the grace"
    );
    assert_eq!(
        deleted(&hygiene.deletions(&listing, &moved, at(60), NOW_MS)),
        ["p"]
    );
    // Listed again (a listing that missed it): forgotten, the grace starts over.
    let full = [listing.clone(), vec![shard("p", &[], true)]].concat();
    let _ = hygiene.deletions(&full, &moved, at(61), NOW_MS);
    assert!(
        hygiene
            .deletions(&listing, &moved, at(62), NOW_MS)
            .is_empty()
    );
}

#[test]
fn a_closed_shard_without_a_row_whose_children_moved_on_counts_as_finished() {
    let listing = split();
    let listed = plan::listed(&listing);
    let moved = row(None, 0, "4959");
    let after = rows(&[("p", None), ("a", moved.clone()), ("b", moved.clone())]);
    let verdict = |rows: &Rows| {
        plan::verdict(
            &listing[0],
            &listed,
            rows,
            "me",
            NOW_MS,
            &KinesisPosition::TrimHorizon,
        )
    };
    assert_eq!(verdict(&after), plan::Verdict::Finished);
    // A child not past its start: the parent is read (its row was never written, or lost).
    let before = rows(&[("p", None), ("a", moved), ("b", None)]);
    assert!(matches!(verdict(&before), plan::Verdict::Take { .. }));
}

/// The full read for the cadence alone comes by turns where instances share the stream: one of
/// three reads at its slot (each third interval), not an interval after its last read; alone it
/// reads every interval; and a wall clock stepped back keeps its turn within a round of them.
#[test]
fn the_full_read_comes_by_turns_among_the_live_instances() {
    use crate::coordinator::full_read_turns::Turn;
    let every = Duration::from_secs(300);
    let at = |secs: u64| (Duration::from_secs(secs), secs * 1_000);
    let mut alone: Hygiene<Duration> = Hygiene::with_grace_every(Duration::ZERO, every);
    assert!(alone.due(Duration::ZERO), "nothing read yet");
    let (now, now_ms) = at(3_000);
    alone.read_all(now, now_ms, now_ms);
    alone.turn_read(Turn::ALONE, now, now_ms);
    assert!(!alone.due(at(3_299).0));
    assert!(alone.due(at(3_300).0), "an interval after its last read");

    // "b" of a, b and c: slot 10 (3,000 s) is b's, 11 c's, 12 a's, 13 b's (slot k is the
    // turn of rank k modulo 3).
    let b = Turn::among("b", ["a", "b", "c"].into_iter());
    let mut hygiene: Hygiene<Duration> = Hygiene::with_grace_every(Duration::ZERO, every);
    hygiene.read_all(now, now_ms, now_ms);
    hygiene.turn_read(b, now, now_ms);
    assert!(
        !hygiene.due(at(3_300).0),
        "an interval later: c's turn, not b's"
    );
    assert!(!hygiene.due(at(3_899).0));
    assert!(
        hygiene.due(at(3_900).0),
        "its slot began, and it read nothing in it"
    );
    let (now, now_ms) = at(3_910);
    hygiene.read_all(now, now_ms, now_ms);
    assert!(
        !hygiene.due(at(4_799).0),
        "c and a read in the next two slots"
    );
    assert!(hygiene.due(at(4_800).0), "its next slot");

    // Its wall clock stepped back half an hour after its last read, and its notice reads go on
    // every second: its next turn still comes within a round of them.
    let step_back = 1_800_000;
    let mut due_at = None;
    for secs in 3_920..3_920 + 1_000 {
        let (now, now_ms) = at(secs);
        hygiene.turn_read(b, now, now_ms - step_back);
        if hygiene.due(now) {
            due_at = Some(secs);
            break;
        }
    }
    assert!(
        due_at.is_some_and(|secs| secs <= 3_910 + 900),
        "due at {due_at:?} s"
    );

    // A full read is owed once a request for a handoff can no longer be answered, whatever
    // the turn: a hand-over landing late whose bump failed names it in a row that only its own
    // full read finds.
    let mut asker: Hygiene<Duration> = Hygiene::with_grace_every(Duration::ZERO, every);
    let (now, now_ms) = at(3_000);
    asker.read_all(now, now_ms, now_ms);
    asker.read_owed_from(now_ms + 64_000);
    asker.turn_read(b, now, now_ms);
    assert!(!asker.due(at(3_063).0));
    assert!(
        asker.due(at(3_064).0),
        "owed, though slot 10 was b's and b read in it"
    );
    let (now, now_ms) = at(3_070);
    asker.read_all(now, now_ms, now_ms);
    assert!(!asker.due(at(3_899).0), "paid: by its turn again");
    assert!(asker.due(at(3_900).0), "its slot");
    // One sent before the owed moment does not pay it, though answered after.
    asker.read_owed_from(3_950_000);
    assert!(!asker.owes_read(3_949_999));
    assert!(
        asker.owes_read(3_950_000),
        "the read that pays it must show the latest writes"
    );
    let (now, now_ms) = at(3_951);
    asker.read_all(now, now_ms, 3_949_000);
    assert!(asker.due(at(3_952).0));
    asker.read_all(at(3_953).0, 3_953_000, 3_952_000);
    assert!(!asker.owes_read(3_953_000), "paid");
}

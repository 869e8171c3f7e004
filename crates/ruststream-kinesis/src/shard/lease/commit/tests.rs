//! The lease's commits on a virtual clock: before renewals, resent unchanged, in the closing
//! order, and a unit's refusal.

use std::time::Duration;

use super::*;
use crate::LeaseTimings;
use crate::shard::lease::{Ending, LeaseNews};

const S: Duration = Duration::from_secs(1);
const EPOCH_MS: u64 = 1_000_000;

fn ms(at: Duration) -> u64 {
    EPOCH_MS + millis(at)
}

fn committing_at(sent: Duration) -> ShardLease<Duration> {
    ShardLease::taken(LeaseTimings::default(), sent, ms(sent)).committing(0xab)
}

fn folded(checkpoint: &str, units: &[u64], entries: usize) -> Folded {
    Folded {
        checkpoint: SharedStr::from(checkpoint),
        units: units.iter().map(|&unit| UnitId(unit)).collect(),
        covers: Covers {
            generation: 0,
            entries,
        },
    }
}

/// The commit the lease sends at `now`, folding `fold`.
fn commit_at(lease: &mut ShardLease<Duration>, now: Duration, fold: Folded) -> Commit {
    match lease.next_folding(now, ms(now), || Some(fold)) {
        Next::Send(Write::Commit(commit)) => commit,
        other => panic!("no commit at {now:?}: {other:?}"),
    }
}

fn no_fold() -> Option<Folded> {
    None
}

#[test]
fn settled_writes_commit_at_once_before_a_renewal_and_the_commit_extends_the_lease() {
    let mut lease = committing_at(Duration::ZERO);
    lease.commit_ready(true, true);
    // At 1 s: no renewal is due (3 s), the commit goes at once, with its expiry fixed now.
    let commit = commit_at(&mut lease, S, folded("5", &[1, 2], 3));
    assert_eq!(
        (commit.attempt, commit.expiry_ms, &*commit.checkpoint),
        (0, ms(S) + 10_000, "5")
    );
    assert_eq!(commit.token.base(), format!("{:016x}{:08x}", 0xab, 0));
    lease.commit_ready(false, false);
    lease.on_answer(2 * S, Answer::Done);
    assert_eq!(
        lease.take_outcomes(),
        [Outcome::Committed {
            covers: commit.covers,
            units: commit.units.clone()
        }]
    );
    // The lease counts from the commit's send (1 s): valid to 10 s. The renewal stays due at
    // 3 s: its answer shows a handoff asked, which a transaction's does not.
    assert_eq!(lease.valid_until(), 10 * S);
    assert_eq!(
        lease.next_folding(2 * S, ms(2 * S), no_fold),
        Next::Wait(Some(3 * S))
    );
    assert_eq!(
        lease.next_folding(3 * S, ms(3 * S), no_fold),
        Next::Send(Write::Renew)
    );
    // The next commit is another request.
    lease.on_answer(4 * S, Answer::Done);
    lease.commit_ready(true, true);
    let second = commit_at(&mut lease, 5 * S, folded("9", &[3], 1));
    assert_eq!(second.token, commit.token.next());
}

#[test]
fn settled_deliveries_without_writes_commit_at_the_checkpoint_interval() {
    let mut lease = committing_at(Duration::ZERO);
    lease.commit_ready(true, false);
    // Due at once after the take (nothing was written yet), then a second apart.
    commit_at(&mut lease, Duration::ZERO, folded("1", &[], 1));
    lease.on_answer(Duration::ZERO, Answer::Done);
    lease.commit_ready(true, false);
    assert_eq!(
        lease.next_folding(S / 2, ms(S / 2), no_fold),
        Next::Wait(Some(S)),
        "the checkpoint interval"
    );
    commit_at(&mut lease, S, folded("2", &[], 1));
}

#[test]
fn an_unresolved_commit_is_sent_again_unchanged_and_nothing_else_meanwhile() {
    let mut lease = committing_at(Duration::ZERO);
    lease.commit_ready(true, true);
    let commit = commit_at(&mut lease, S, folded("5", &[1], 1));
    lease.on_answer(S, Answer::Failed);
    // A renewal falls due at 3 s; the commit's resend (at 2 s) comes first and alone.
    assert_eq!(
        lease.next_folding(S, ms(S), no_fold),
        Next::Wait(Some(2 * S))
    );
    let fold_asked = std::cell::Cell::new(false);
    let again = lease.next_folding(3 * S, ms(3 * S), || {
        fold_asked.set(true);
        Some(folded("7", &[1, 2], 2))
    });
    assert_eq!(
        again,
        Next::Send(Write::Commit(commit.clone())),
        "byte for byte"
    );
    assert!(!fold_asked.get(), "never folded anew while unresolved");
    // Certainly not applied: a new attempt of the same commit.
    lease.on_answer(3 * S, Answer::NotApplied);
    let Next::Send(Write::Commit(third)) = lease.next_folding(5 * S, ms(5 * S), no_fold) else {
        panic!("a resend");
    };
    assert_eq!(
        third,
        Commit {
            attempt: 1,
            ..commit.clone()
        }
    );
    // It lands: the lease counts from the first send, not the resend.
    lease.on_answer(5 * S, Answer::Done);
    assert_eq!(lease.valid_until(), 10 * S);
}

#[test]
fn a_commit_unresolved_until_the_lease_runs_out_writes_nothing_more() {
    let mut lease = committing_at(Duration::ZERO);
    lease.commit_ready(true, true);
    commit_at(&mut lease, Duration::ZERO, folded("5", &[1], 1));
    let mut now = Duration::ZERO;
    lease.on_answer(now, Answer::Failed);
    let ending = loop {
        match lease.next_folding(now, ms(now), no_fold) {
            Next::Wait(Some(due)) => now = due,
            Next::Send(Write::Commit(_)) => lease.on_answer(now, Answer::Failed),
            Next::Ended(ending) => break ending,
            other => panic!("only the commit goes out: {other:?} at {now:?}"),
        }
    };
    assert_eq!(ending, Ending::Lost(Lost::RanOut));
    assert!(now < 9 * S, "before the lease (9 s usable) ends: {now:?}");
    assert_eq!(lease.take_news(), [LeaseNews::RanOut]);
    assert!(lease.take_outcomes().is_empty(), "nothing committed");
}

#[test]
fn a_refused_commit_loses_the_lease_and_commits_nothing() {
    let mut lease = committing_at(Duration::ZERO);
    lease.commit_ready(true, true);
    commit_at(&mut lease, S, folded("5", &[1], 1));
    lease.on_answer(S, Answer::Refused);
    assert_eq!(
        lease.next_folding(S, ms(S), no_fold),
        Next::Ended(Ending::Lost(Lost::Refused))
    );
    assert!(lease.take_outcomes().is_empty());
    assert!(!lease.takes_settlements());
}

#[test]
fn a_shard_read_to_its_end_commits_what_settled_then_writes_shard_end() {
    let mut lease = committing_at(Duration::ZERO);
    lease.commit_ready(true, false);
    lease.close(Close::Finished);
    // Closing, even a commit without writes goes at once: no checkpoint interval.
    commit_at(&mut lease, Duration::ZERO, folded("9", &[], 2));
    assert!(!lease.takes_settlements(), "sealed once closing");
    lease.commit_ready(false, false);
    lease.on_answer(S, Answer::Done);
    assert_eq!(
        lease.next_folding(S, ms(S), no_fold),
        Next::Send(Write::Final(SharedStr::from(crate::SHARD_END)))
    );
    lease.on_answer(S, Answer::Done);
    assert_eq!(
        lease.next_folding(S, ms(S), no_fold),
        Next::Send(Write::Release)
    );
}

#[test]
fn a_unit_refused_while_finishing_leaves_the_shard_unfinished() {
    let mut lease = committing_at(Duration::ZERO);
    lease.commit_ready(true, true);
    lease.close(Close::Finished);
    commit_at(&mut lease, Duration::ZERO, folded("9", &[4], 1));
    lease.on_answer(S, Answer::UserRefused(UnitId(4)));
    assert_eq!(
        lease.take_outcomes(),
        [Outcome::Refused {
            covers: Covers {
                generation: 0,
                entries: 1
            },
            unit: UnitId(4)
        }]
    );
    lease.commit_ready(false, false);
    assert_eq!(
        lease.next_folding(S, ms(S), no_fold),
        Next::Send(Write::Release),
        "no SHARD_END past a delivery its next owner must deliver again"
    );
    // Found by the simulation (seed 1796406634641107277): the release then ended the lease as a
    // shard finished, and its children were taken before it reached SHARD_END.
    lease.on_answer(S, Answer::Done);
    assert_eq!(
        lease.next_folding(S, ms(S), no_fold),
        Next::Ended(Ending::Closed { written: false }),
        "not finished"
    );
}

#[test]
fn a_handoff_under_exactly_once_commits_first_and_hands_over_without_a_checkpoint() {
    let mut lease = committing_at(Duration::ZERO);
    lease.hand_to(Arc::from("pod-b"));
    lease.commit_ready(true, true);
    lease.close(Close::HandOver);
    commit_at(&mut lease, S, folded("3", &[1], 1));
    lease.commit_ready(false, false);
    lease.on_answer(S, Answer::Done);
    assert_eq!(
        lease.next_folding(S, ms(S), no_fold),
        Next::Send(Write::HandOver {
            to: Arc::from("pod-b"),
            checkpoint: None
        })
    );
}

#[test]
fn a_seeks_position_commits_without_writes() {
    let mut lease = committing_at(Duration::ZERO);
    assert!(lease.checkpoint_ready(SharedStr::from("AT_SEQUENCE:7")));
    let commit = commit_at_nothing_settled(&mut lease, Duration::ZERO);
    assert_eq!(
        (&*commit.checkpoint, commit.units.len()),
        ("AT_SEQUENCE:7", 0)
    );
    assert_eq!(commit.covers.entries, 0);
}

fn commit_at_nothing_settled(lease: &mut ShardLease<Duration>, now: Duration) -> Commit {
    match lease.next_folding(now, ms(now), no_fold) {
        Next::Send(Write::Commit(commit)) => commit,
        other => panic!("no commit: {other:?}"),
    }
}

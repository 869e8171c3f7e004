//! Exactly once, a unit that spans shards (`shard::joint`): it commits in one request with every
//! shard's row once each shard's part heads its settled prefix and no write of either lease is
//! in flight; the shards' own commits never take it; its answer is every part's.

use super::*;
use crate::shard::joint::{self, JointNext};

const JOINT: UnitId = UnitId(90);

/// A part of the joint unit: the deliveries under `tickets` of one shard settle as the unit's
/// records there.
fn part(machine: &mut ShardMachine<Duration, Rec>, tickets: &[(Ticket, &str)]) {
    machine
        .settle_part(
            JOINT,
            staged(90, 3, "-").size,
            members(tickets),
            true,
            false,
        )
        .unwrap();
}

/// Shard A handed out 1 and 2, shard B 10; A's 1 staged a unit of its own, and A's 2 with B's
/// 10 make the joint unit.
fn two_shards() -> (ShardMachine<Duration, Rec>, ShardMachine<Duration, Rec>) {
    let (mut a, mut b) = (committing(), committing());
    let ta = delivered(&mut a, &["1", "2"]);
    let tb = delivered(&mut b, &["10"]);
    a.settle_staged(ta[0], Some(staged(1, 1, "1")), false)
        .unwrap();
    part(&mut a, &[(ta[1], "2")]);
    part(&mut b, &[(tb[0], "10")]);
    (a, b)
}

fn next_joint(
    a: &mut ShardMachine<Duration, Rec>,
    b: &mut ShardMachine<Duration, Rec>,
    now: Duration,
) -> JointNext<Duration> {
    joint::next(JOINT, &mut [a, b], now, ms(now))
}

fn answer(
    a: &mut ShardMachine<Duration, Rec>,
    b: &mut ShardMachine<Duration, Rec>,
    now: Duration,
    answer: Answer,
) -> bool {
    joint::answered(JOINT, &mut [a, b], now, answer)
}

/// The rows of a joint commit sent at `now`.
fn sent(
    a: &mut ShardMachine<Duration, Rec>,
    b: &mut ShardMachine<Duration, Rec>,
    now: Duration,
) -> Vec<Commit> {
    match next_joint(a, b, now) {
        JointNext::Send(rows) => rows,
        other => panic!("no joint commit at {now:?}: {other:?}"),
    }
}

#[test]
fn a_unit_spanning_shards_commits_once_each_part_heads_its_shard() {
    let (mut a, mut b) = two_shards();
    assert_eq!(
        next_joint(&mut a, &mut b, S / 10),
        JointNext::Wait(None),
        "A's own unit comes first"
    );
    // A's own commit stops before the joint unit.
    let own = commit(&mut a, S / 10);
    assert_eq!(
        (&*own.checkpoint, own.units.clone(), own.covers.entries),
        ("1", units(&[1]), 1)
    );
    assert_eq!(next_joint(&mut a, &mut b, S / 10), JointNext::Wait(None));
    a.write_answered(S / 5, Answer::Done);
    assert_eq!(
        b.next_write(S / 5, ms(S / 5)),
        Next::Wait(Some(3 * S)),
        "B's own driver never commits the joint unit"
    );
    let rows = sent(&mut a, &mut b, S / 5);
    assert_eq!(
        rows.iter()
            .map(|row| (&*row.checkpoint, row.units.clone(), row.covers.entries))
            .collect::<Vec<_>>(),
        [("2", units(&[90]), 1), ("10", units(&[90]), 1)]
    );
    assert_eq!(rows[0].token, rows[1].token, "one commit, one token");
    // Each lease's slot is taken: neither sends a renewal beside it.
    assert_eq!(a.next_write(3 * S, ms(3 * S)), Next::Wait(None));
    assert_eq!(b.next_write(3 * S, ms(3 * S)), Next::Wait(None));
    assert!(answer(&mut a, &mut b, 3 * S, Answer::Done));
    for machine in [&mut a, &mut b] {
        assert!(
            machine
                .take_commit_news()
                .contains(&CommitNews::Committed(units(&[90])))
        );
        assert_eq!(machine.checkpoint_lag(), 0);
        assert!(machine.is_drained());
    }
    // The commit renewed both leases from its send.
    let old = LeaseTimings::default().usable_lease();
    for machine in [&a, &b] {
        assert!(machine.may_deliver(old + S / 10, ms(old + S / 10)));
    }
}

#[test]
fn a_write_in_flight_in_one_shard_holds_the_commit_back_and_takes_no_slot() {
    let (mut a, mut b) = two_shards();
    commit(&mut a, S / 10);
    a.write_answered(S / 10, Answer::Done);
    // B's renewal is in flight.
    assert_eq!(b.next_write(3 * S, ms(3 * S)), Next::Send(Write::Renew));
    assert_eq!(next_joint(&mut a, &mut b, 3 * S), JointNext::Wait(None));
    assert_eq!(
        a.next_write(3 * S, ms(3 * S)),
        Next::Send(Write::Renew),
        "A's slot was left free"
    );
    a.write_answered(3 * S, Answer::Done);
    b.write_answered(3 * S, Answer::Done);
    assert_eq!(sent(&mut a, &mut b, 3 * S).len(), 2);
}

#[test]
fn a_joint_commit_without_an_answer_is_sent_again_unchanged_by_the_committer_alone() {
    let (mut a, mut b) = two_shards();
    commit(&mut a, S / 10);
    a.write_answered(S / 10, Answer::Done);
    let first = sent(&mut a, &mut b, S / 5);
    assert!(!answer(&mut a, &mut b, S / 2, Answer::Failed));
    assert_eq!(
        a.next_write(S, ms(S)),
        Next::Wait(None),
        "the shard's own driver sends nothing"
    );
    let JointNext::Wait(Some(due)) = next_joint(&mut a, &mut b, S / 2) else {
        panic!("a resend is due later");
    };
    assert_eq!(sent(&mut a, &mut b, due), first, "byte for byte");
    // Certainly not applied: a new attempt of the same commit.
    assert!(!answer(&mut a, &mut b, due, Answer::NotApplied));
    let JointNext::Wait(Some(due)) = next_joint(&mut a, &mut b, due) else {
        panic!("a new attempt is due later");
    };
    let again = sent(&mut a, &mut b, due);
    assert_eq!(
        again.iter().map(|row| row.attempt).collect::<Vec<_>>(),
        [1, 1]
    );
    assert_eq!(again[0].token, first[0].token);
    assert!(answer(&mut a, &mut b, due, Answer::Done));
    assert!(
        a.take_commit_news()
            .contains(&CommitNews::Committed(units(&[90])))
    );
}

#[test]
fn a_joint_commit_refused_by_the_units_own_write_sends_it_back_in_every_shard() {
    let (mut a, mut b) = two_shards();
    commit(&mut a, S / 10);
    a.write_answered(S / 10, Answer::Done);
    sent(&mut a, &mut b, S / 5);
    assert!(answer(&mut a, &mut b, S / 2, Answer::UserRefused(JOINT)));
    for machine in [&mut a, &mut b] {
        assert!(
            machine
                .take_commit_news()
                .contains(&CommitNews::Refused(JOINT))
        );
        assert_eq!(machine.waiting_to_come_back(), 1, "its record comes again");
        assert!(!machine.is_lost());
    }
}

#[test]
fn a_row_refusing_the_joint_commit_loses_every_part() {
    let (mut a, mut b) = two_shards();
    commit(&mut a, S / 10);
    a.write_answered(S / 10, Answer::Done);
    sent(&mut a, &mut b, S / 5);
    assert!(answer(&mut a, &mut b, S / 2, Answer::Refused));
    assert!(a.is_lost() && b.is_lost());
}

#[test]
fn a_part_that_can_no_longer_send_gives_the_unit_back_in_every_shard() {
    let (mut a, mut b) = two_shards();
    commit(&mut a, S / 10);
    a.write_answered(S / 10, Answer::Done);
    // A seek drops B's part.
    assert!(b.seek(ShardIterator::service("sought"), recorded(), sought()));
    assert!(
        b.take_commit_news()
            .contains(&CommitNews::Dropped(vec![JOINT]))
    );
    assert_eq!(
        next_joint(&mut a, &mut b, S / 5),
        JointNext::Abandoned { back: true }
    );
    assert_eq!(a.waiting_to_come_back(), 1, "A's record comes again, alone");
    assert!(!a.is_lost() && !b.is_lost());
}

#[test]
fn a_part_whose_lease_ends_while_the_commit_is_unresolved_loses_every_part() {
    let (mut a, mut b) = two_shards();
    commit(&mut a, S / 10);
    a.write_answered(S / 10, Answer::Done);
    sent(&mut a, &mut b, S / 5);
    assert!(!answer(&mut a, &mut b, S / 2, Answer::Failed));
    // B's lease runs out by a delivery's check: the commit may have landed, and only both rows
    // together say where the shards stand.
    b.run_out();
    assert!(matches!(
        next_joint(&mut a, &mut b, S),
        JointNext::Abandoned { .. }
    ));
    assert!(a.is_lost(), "A cannot resolve the commit alone");
}

#[test]
fn a_shard_read_to_its_end_with_a_part_waiting_closes_as_a_release() {
    let (mut a, mut b) = two_shards();
    commit(&mut a, S / 10);
    a.write_answered(S / 10, Answer::Done);
    b.close(Close::Finished);
    assert_eq!(
        b.next_write(S / 5, ms(S / 5)),
        Next::Send(Write::Release),
        "no SHARD_END passes the unit"
    );
    assert_eq!(
        next_joint(&mut a, &mut b, S / 5),
        JointNext::Abandoned { back: true }
    );
    assert_eq!(a.waiting_to_come_back(), 1);
}

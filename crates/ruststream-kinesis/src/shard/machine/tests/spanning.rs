//! Exactly once, a unit that spans shards (`shard::joint`): it commits in one request with every
//! shard's row once each shard's part heads its settled prefix and no write of either lease is
//! in flight; the shards' own commits never take it; its answer is every part's.

use super::*;
use crate::shard::joint::{self, JointNext};

const JOINT: UnitId = UnitId(90);

/// How long a unit waits for its parts, from its settle at zero.
fn patience() -> Option<Duration> {
    Some(LeaseTimings::default().handoff_drain())
}

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

/// [`two_shards`], A's own unit committed at a tenth of a second: both parts head their shards.
fn parts_ready() -> (ShardMachine<Duration, Rec>, ShardMachine<Duration, Rec>) {
    let (mut a, b) = two_shards();
    commit(&mut a, S / 10);
    a.write_answered(S / 10, Answer::Done);
    (a, b)
}

/// The unit is given back at `now` in both shards: A's record comes again, alone, and neither
/// lease is lost.
fn given_back(
    a: &mut ShardMachine<Duration, Rec>,
    b: &mut ShardMachine<Duration, Rec>,
    now: Duration,
) {
    assert_eq!(
        next_joint(a, b, now),
        JointNext::Abandoned {
            back: true,
            lost: false
        }
    );
    assert_eq!(a.waiting_to_come_back(), 1, "A's record comes again, alone");
    assert!(!a.is_lost() && !b.is_lost());
}

fn next_joint(
    a: &mut ShardMachine<Duration, Rec>,
    b: &mut ShardMachine<Duration, Rec>,
    now: Duration,
) -> JointNext<Duration> {
    joint::next(JOINT, &mut [a, b], Duration::ZERO, now, ms(now))
}

fn answer(
    a: &mut ShardMachine<Duration, Rec>,
    b: &mut ShardMachine<Duration, Rec>,
    now: Duration,
    answer: Answer,
) -> bool {
    joint::answered(JOINT, &mut [a, b], now, answer, None)
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
        JointNext::Wait(patience()),
        "A's own unit comes first"
    );
    // A's own commit stops before the joint unit.
    let own = commit(&mut a, S / 10);
    assert_eq!(
        (&*own.checkpoint, own.units.clone(), own.covers.entries),
        ("1", units(&[1]), 1)
    );
    assert_eq!(
        next_joint(&mut a, &mut b, S / 10),
        JointNext::Wait(patience())
    );
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
    let (mut a, mut b) = parts_ready();
    // B's renewal is in flight.
    assert_eq!(b.next_write(3 * S, ms(3 * S)), Next::Send(Write::Renew));
    assert_eq!(
        next_joint(&mut a, &mut b, 3 * S),
        JointNext::Wait(patience())
    );
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
    let (mut a, mut b) = parts_ready();
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
    let (mut a, mut b) = parts_ready();
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
fn a_row_refusing_the_joint_commit_loses_every_part_when_the_answer_names_none() {
    let (mut a, mut b) = parts_ready();
    sent(&mut a, &mut b, S / 5);
    assert!(answer(&mut a, &mut b, S / 2, Answer::Refused));
    assert!(a.is_lost() && b.is_lost());
}

#[test]
fn a_row_refusing_the_joint_commit_loses_its_shard_and_the_others_give_the_unit_back() {
    let (mut a, mut b) = parts_ready();
    sent(&mut a, &mut b, S / 5);
    // B's row refused: another instance holds B. A's row held, and nothing was applied.
    assert!(joint::answered(
        JOINT,
        &mut [&mut a, &mut b],
        S / 2,
        Answer::Refused,
        Some(&[1])
    ));
    assert!(b.is_lost());
    assert!(!a.is_lost(), "A keeps its lease");
    assert_eq!(a.waiting_to_come_back(), 1, "A's record comes again, alone");
    // A commits on by itself: its record again, alone, then its own commits.
    assert_eq!(a.next_write(S / 2, ms(S / 2)), Next::Wait(Some(3 * S)));
}

#[test]
fn a_part_that_can_no_longer_send_gives_the_unit_back_in_every_shard() {
    let (mut a, mut b) = parts_ready();
    // A seek drops B's part.
    assert!(b.seek(ShardIterator::service("sought"), recorded(), sought()));
    assert!(
        b.take_commit_news()
            .contains(&CommitNews::Dropped(vec![JOINT]))
    );
    given_back(&mut a, &mut b, S / 5);
}

#[test]
fn a_part_whose_lease_ends_while_the_commit_is_unresolved_loses_every_part() {
    let (mut a, mut b) = parts_ready();
    sent(&mut a, &mut b, S / 5);
    assert!(!answer(&mut a, &mut b, S / 2, Answer::Failed));
    // B's lease runs out by a delivery's check: the commit may have landed, and only both rows
    // together say where the shards stand.
    b.run_out();
    assert!(matches!(
        next_joint(&mut a, &mut b, S),
        JointNext::Abandoned { lost: true, .. }
    ));
    assert!(a.is_lost(), "A cannot resolve the commit alone");
}

#[test]
fn a_shard_read_to_its_end_with_a_part_waiting_closes_as_a_release() {
    let (mut a, mut b) = parts_ready();
    b.close(Close::Finished);
    assert_eq!(
        b.next_write(S / 5, ms(S / 5)),
        Next::Send(Write::Release),
        "no SHARD_END passes the unit"
    );
    given_back(&mut a, &mut b, S / 5);
}

#[test]
fn a_unit_waiting_past_the_handoff_drain_goes_back_so_no_shard_waits_for_good() {
    let (mut a, mut b) = (committing(), committing());
    let ta = delivered(&mut a, &["1"]);
    let tb = delivered(&mut b, &["10", "11"]);
    part(&mut a, &[(ta[0], "1")]);
    // B's first record is handed back for a minute: B's part waits behind it.
    b.hand_back(Duration::ZERO, rec("10"), tb[0], 1, 60 * S, false);
    part(&mut b, &[(tb[1], "11")]);
    let drain = LeaseTimings::default().handoff_drain();
    assert_eq!(
        next_joint(&mut a, &mut b, S),
        JointNext::Wait(patience()),
        "it waits, up to the drain"
    );
    given_back(&mut a, &mut b, drain);
}

#[test]
fn a_joint_commit_is_sent_again_when_its_earliest_part_is_due() {
    let (mut a, mut b) = parts_ready();
    // B renews at 3 s: its lease lasts 3 s longer than A's.
    assert_eq!(b.next_write(3 * S, ms(3 * S)), Next::Send(Write::Renew));
    b.write_answered(3 * S, Answer::Done);
    let first = sent(&mut a, &mut b, 3 * S);
    // Answered late: A has 1.5 s of its lease left (it waits less for the resend) and B 4.5 s.
    let late = LeaseTimings::default().usable_lease() - 3 * S / 2;
    assert!(!answer(&mut a, &mut b, late, Answer::NotApplied));
    let JointNext::Wait(Some(due)) = next_joint(&mut a, &mut b, late) else {
        panic!("a resend is due later");
    };
    let again = sent(&mut a, &mut b, due);
    assert_eq!(
        again.iter().map(|row| row.token).collect::<Vec<_>>(),
        vec![first[0].token; 2],
        "both rows go again, B's before its own wait is over"
    );
    assert!(!a.is_lost() && !b.is_lost());
}

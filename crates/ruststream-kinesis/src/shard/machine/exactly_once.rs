//! Exactly once on the shard machine: the settled prefix commits in order with what it staged,
//! a unit refused by its own write is delivered again and holds back the units after it, a seek
//! drops what waited, and a shard read to its end commits before its `SHARD_END`.

use super::*;
use crate::commit::{ItemRef, UnitId, UnitSize};
use crate::shard::lease::{Commit, Covers};

fn committing() -> ShardMachine<Duration, Rec> {
    ShardMachine::new(
        ShardLease::taken(LeaseTimings::default(), Duration::ZERO, ms(Duration::ZERO))
            .committing(7),
        settings(1000),
        ShardIterator::service("it-0"),
        recorded(),
    )
}

/// A machine that handed out `sequences`: their tickets.
fn delivered(machine: &mut ShardMachine<Duration, Rec>, sequences: &[&str]) -> Vec<Ticket> {
    read(machine, Duration::ZERO, sequences, Some("it-1"), 0);
    let tickets = hand_out(machine, Duration::ZERO);
    assert_eq!(tickets.len(), sequences.len());
    tickets
}

/// What unit `unit` staged: `actions` writes on distinct items.
fn staged(unit: u64, actions: usize, record: &str) -> Staged<Rec> {
    Staged {
        unit: UnitId(unit),
        size: UnitSize {
            actions,
            bytes: 100 * actions,
            items: (0..actions)
                .map(|n| ItemRef {
                    table: 1,
                    key: Some(unit * 1_000 + n as u64),
                })
                .collect(),
        },
        record: rec(record),
        attempts: 1,
        members: 1,
        joint: false,
    }
}

/// The commit the machine sends at `now`.
fn commit(machine: &mut ShardMachine<Duration, Rec>, now: Duration) -> Commit {
    match machine.next_write(now, ms(now)) {
        Next::Send(Write::Commit(commit)) => commit,
        other => panic!("no commit at {now:?}: {other:?}"),
    }
}

fn units(ids: &[u64]) -> Arc<[UnitId]> {
    ids.iter().map(|&id| UnitId(id)).collect()
}

#[test]
fn out_of_order_settles_commit_in_order_and_leave_once_committed() {
    let mut machine = committing();
    let t = delivered(&mut machine, &["1", "2", "3"]);
    machine
        .settle_staged(t[2], Some(staged(3, 1, "3")), false)
        .unwrap();
    machine
        .settle_staged(t[1], Some(staged(2, 2, "2")), false)
        .unwrap();
    assert_eq!(
        machine.next_write(S / 10, ms(S / 10)),
        Next::Wait(Some(3 * S)),
        "nothing commits over the unsettled first delivery"
    );
    let settled = machine.settle_staged(t[0], None, false).unwrap();
    assert!(settled.checkpoint, "the lease has a write");
    let first = commit(&mut machine, S / 10);
    assert_eq!(
        (&*first.checkpoint, first.units.clone()),
        ("3", units(&[2, 3]))
    );
    assert_eq!(
        first.covers,
        Covers {
            generation: 0,
            entries: 3
        }
    );
    assert_eq!(machine.checkpoint_lag(), 3, "settled, not committed");
    machine.write_answered(S / 5, Answer::Done);
    assert_eq!(machine.checkpoint_lag(), 0);
    assert_eq!(
        machine.take_commit_news(),
        [CommitNews::Committed(units(&[2, 3]))]
    );
    assert!(machine.is_drained());
}

#[test]
fn a_commit_folds_no_more_than_one_transaction_holds() {
    let mut machine = committing();
    let t = delivered(&mut machine, &["1", "2", "3"]);
    machine
        .settle_staged(t[0], Some(staged(1, 60, "1")), false)
        .unwrap();
    machine
        .settle_staged(t[1], Some(staged(2, 39, "2")), false)
        .unwrap();
    machine
        .settle_staged(t[2], Some(staged(3, 1, "3")), false)
        .unwrap();
    // 60 + 39 + the row = 100: the third waits for the next commit.
    let first = commit(&mut machine, S / 10);
    assert_eq!(
        (&*first.checkpoint, first.units.clone()),
        ("2", units(&[1, 2]))
    );
    machine.write_answered(S / 10, Answer::Done);
    let second = commit(&mut machine, S / 10);
    assert_eq!(
        (&*second.checkpoint, second.units.clone()),
        ("3", units(&[3]))
    );
}

#[test]
fn a_unit_refused_by_its_own_write_comes_back_and_holds_back_the_units_after_it() {
    let mut machine = committing();
    let t = delivered(&mut machine, &["1", "2", "3"]);
    for (n, ticket) in t.iter().enumerate() {
        let id = n as u64 + 1;
        machine
            .settle_staged(*ticket, Some(staged(id, 1, &id.to_string())), false)
            .unwrap();
    }
    let refused = commit(&mut machine, S / 10);
    machine.write_answered(S / 5, Answer::UserRefused(UnitId(2)));
    assert_eq!(machine.take_commit_news(), [CommitNews::Refused(UnitId(2))]);
    // Unit 1 commits alone; 2 is delivered again under its ticket, 3 waits behind it.
    let alone = commit(&mut machine, S / 5);
    assert_eq!(
        (&*alone.checkpoint, alone.units.clone()),
        ("1", units(&[1]))
    );
    assert_eq!(alone.token, refused.token.next(), "a new request");
    machine.write_answered(S / 4, Answer::Done);
    let Redeliver::Deliver(again) = machine.next_redelivery(S / 4, ms(S / 4)) else {
        panic!("the refused unit's record comes back");
    };
    assert_eq!((again.record.clone(), again.ticket), (rec("2"), t[1]));
    assert!(
        matches!(machine.next_write(S / 4, ms(S / 4)), Next::Wait(_)),
        "3 never commits before 2, nor a checkpoint past 2"
    );
    // Handled again, staging other writes: 2 and 3 commit together.
    machine
        .settle_staged(again.ticket, Some(staged(20, 1, "2")), false)
        .unwrap();
    let rest = commit(&mut machine, S / 4);
    assert_eq!(
        (&*rest.checkpoint, rest.units.clone()),
        ("3", units(&[20, 3]))
    );
}

#[test]
fn a_seek_drops_what_waited_and_commits_its_position_without_writes() {
    let mut machine = committing();
    let t = delivered(&mut machine, &["1", "2"]);
    machine
        .settle_staged(t[1], Some(staged(2, 1, "2")), false)
        .unwrap();
    assert!(machine.seek(ShardIterator::service("it-5"), recorded(), sought()));
    // The old generation's settlements move nothing.
    assert!(
        !machine
            .settle_staged(t[0], Some(staged(1, 1, "1")), false)
            .unwrap()
            .checkpoint
    );
    let position = commit(&mut machine, Duration::ZERO);
    assert_eq!(
        (position.checkpoint.clone(), position.units.len()),
        (sought(), 0)
    );
}

#[test]
fn a_shard_read_to_its_end_commits_before_shard_end() {
    let mut machine = committing();
    let t = delivered(&mut machine, &["1"]);
    machine
        .settle_staged(t[0], Some(staged(1, 1, "1")), false)
        .unwrap();
    machine.close(Close::Finished);
    let last = commit(&mut machine, Duration::ZERO);
    assert_eq!(last.units, units(&[1]));
    machine.write_answered(S / 10, Answer::Done);
    assert_eq!(
        machine.next_write(S / 10, ms(S / 10)),
        Next::Send(Write::Final(SharedStr::from(crate::SHARD_END)))
    );
}

#[test]
fn a_settlement_without_staging_commits_too() {
    let mut machine = committing();
    let t = delivered(&mut machine, &["1"]);
    // The plain settle of a committing machine settles with nothing staged.
    let settled = machine.settle(t[0], false).unwrap();
    assert_eq!((settled.grew, settled.checkpoint), (false, true));
    let moved = commit(&mut machine, Duration::ZERO);
    assert_eq!((&*moved.checkpoint, moved.units.len()), ("1", 0));
}

#[test]
fn a_reader_waiting_for_room_is_woken_by_the_commit_that_makes_it() {
    // Found by the simulation (seed 1796406606117701419): a window of committed-to-be
    // deliveries emptied by a commit left its reader waiting for room for good.
    let mut machine = ShardMachine::new(
        ShardLease::taken(LeaseTimings::default(), Duration::ZERO, ms(Duration::ZERO))
            .committing(7),
        settings(1),
        ShardIterator::service("it-0"),
        recorded(),
    );
    // Behind the shard's newest record: it would read on, but the window is full.
    read(&mut machine, Duration::ZERO, &["1"], Some("it-1"), 5_000);
    let t = hand_out(&mut machine, Duration::ZERO);
    assert!(matches!(next(&mut machine, S), ReadStep::Wait(None)));
    let settled = machine
        .settle_staged(t[0], Some(staged(1, 1, "1")), false)
        .unwrap();
    assert!(
        !settled.wake_reader,
        "settled, but it holds the window until its commit"
    );
    commit(&mut machine, S);
    assert!(!machine.take_reader_wake());
    machine.write_answered(S, Answer::Done);
    assert!(machine.take_reader_wake(), "the commit made room");
    assert!(!machine.take_reader_wake(), "once");
    assert!(matches!(
        next(&mut machine, S),
        ReadStep::Call(Call::GetRecords(_))
    ));
}

#[test]
fn a_unit_refused_between_the_readers_end_and_its_close_leaves_the_shard_unfinished() {
    // Review: every record settled, the reader saw the end; the commit's answer refuses a unit
    // before the reader's close arrives.
    let mut machine = committing();
    let t = delivered(&mut machine, &["1", "2"]);
    machine
        .settle_staged(t[0], Some(staged(1, 1, "1")), false)
        .unwrap();
    machine
        .settle_staged(t[1], Some(staged(2, 1, "2")), false)
        .unwrap();
    commit(&mut machine, Duration::ZERO);
    machine.write_answered(S / 10, Answer::UserRefused(UnitId(2)));
    machine.close(Close::Finished);
    let alone = commit(&mut machine, S / 10);
    assert_eq!(alone.units, units(&[1]));
    machine.write_answered(S / 5, Answer::Done);
    assert_eq!(
        machine.next_write(S / 5, ms(S / 5)),
        Next::Send(Write::Release),
        "no SHARD_END past record 2, whose writes never landed"
    );
    machine.write_answered(S / 4, Answer::Done);
    assert_eq!(machine.ending(), Some(Ending::Closed { written: false }));
}

#[test]
fn a_commit_unresolved_across_a_seek_is_resent_and_touches_nothing_of_the_new_position() {
    let mut machine = committing();
    let t = delivered(&mut machine, &["1", "2"]);
    machine
        .settle_staged(t[0], Some(staged(1, 1, "1")), false)
        .unwrap();
    let sent = commit(&mut machine, Duration::ZERO);
    machine.write_answered(S / 10, Answer::Failed);
    machine
        .settle_staged(t[1], Some(staged(2, 1, "2")), false)
        .unwrap();
    assert!(machine.seek(ShardIterator::service("it-5"), recorded(), sought()));
    assert_eq!(
        machine.take_commit_news(),
        [CommitNews::Dropped(vec![UnitId(2)])],
        "unit 2 never commits; unit 1 rides on the commit already sent"
    );
    // The old commit may have landed: it goes again, byte for byte, before the seek's position.
    assert_eq!(commit(&mut machine, 2 * S), sent);
    machine.write_answered(2 * S, Answer::Done);
    assert_eq!(
        machine.take_commit_news(),
        [CommitNews::Committed(units(&[1]))]
    );
    // Then the seek's position, at the checkpoint interval: it carries no writes.
    let position = commit(&mut machine, 3 * S);
    assert_eq!(
        (position.checkpoint.clone(), position.units.len()),
        (sought(), 0)
    );
    assert_eq!(position.token, sent.token.next());
}

#[test]
fn staged_writes_past_the_cap_fill_the_window_until_their_commit() {
    let mut machine = committing();
    // Behind the shard's newest record: it would read on.
    read(&mut machine, Duration::ZERO, &["1"], Some("it-1"), 5_000);
    let t = hand_out(&mut machine, Duration::ZERO);
    let heavy = Staged {
        size: UnitSize {
            bytes: crate::commit::STAGED_BYTES_CAP,
            ..staged(1, 1, "1").size
        },
        ..staged(1, 1, "1")
    };
    machine.settle_staged(t[0], Some(heavy), false).unwrap();
    assert!(machine.is_window_full(), "16 MiB wait for their commit");
    assert!(matches!(next(&mut machine, S), ReadStep::Wait(None)));
    commit(&mut machine, S);
    machine.write_answered(S, Answer::Done);
    assert!(machine.take_reader_wake());
    assert!(!machine.is_window_full());
    assert!(matches!(
        next(&mut machine, S),
        ReadStep::Call(Call::GetRecords(_))
    ));
}

#[test]
fn a_commit_refused_as_a_whole_commits_its_units_one_at_a_time_until_one_lands() {
    let mut machine = committing();
    let t = delivered(&mut machine, &["1", "2", "3"]);
    machine.settle_staged(t[0], None, false).unwrap();
    machine
        .settle_staged(t[1], Some(staged(2, 1, "2")), false)
        .unwrap();
    machine
        .settle_staged(t[2], Some(staged(3, 1, "3")), false)
        .unwrap();
    let whole = commit(&mut machine, S / 10);
    assert_eq!(whole.units, units(&[2, 3]));
    machine.write_answered(S / 5, Answer::Split);
    assert!(
        machine.take_commit_news().is_empty(),
        "no unit is blamed, none handed back"
    );
    // Through the first unit with writes only, under a new token.
    let alone = commit(&mut machine, S / 5);
    assert_eq!(
        (
            &*alone.checkpoint,
            alone.units.clone(),
            alone.covers.entries
        ),
        ("2", units(&[2]), 2)
    );
    assert_ne!(alone.token, whole.token);
    machine.write_answered(S / 4, Answer::Done);
    assert_eq!(
        machine.take_commit_news(),
        [CommitNews::Committed(units(&[2]))]
    );
    // One landed: the next commit folds as many as fit again.
    let rest = commit(&mut machine, S / 4);
    assert_eq!((&*rest.checkpoint, rest.units.clone()), ("3", units(&[3])));
    machine.write_answered(S / 3, Answer::UserRefused(UnitId(3)));
    assert_eq!(machine.take_commit_news(), [CommitNews::Refused(UnitId(3))]);
    assert!(!machine.is_drained(), "the unit at fault comes again");
}

/// The deliveries under `tickets`, first delivered, as a unit's members.
fn members(tickets: &[(Ticket, &str)]) -> Vec<Member<Rec>> {
    tickets
        .iter()
        .map(|(ticket, record)| Member {
            ticket: *ticket,
            record: rec(record),
            attempts: 1,
        })
        .collect()
}

/// Unit `unit` of a batch: the records under `tickets`, staging `actions` writes together.
fn batch(
    machine: &mut ShardMachine<Duration, Rec>,
    unit: u64,
    actions: usize,
    tickets: &[(Ticket, &str)],
) -> Settled {
    machine
        .settle_unit(
            UnitId(unit),
            staged(unit, actions, "-").size,
            members(tickets),
            false,
        )
        .unwrap()
}

#[test]
fn a_batch_unit_commits_whole_and_the_limits_never_split_it() {
    let mut machine = committing();
    let t = delivered(&mut machine, &["1", "2", "3", "4"]);
    machine
        .settle_staged(t[0], Some(staged(1, 60, "1")), false)
        .unwrap();
    assert!(
        batch(
            &mut machine,
            2,
            40,
            &[(t[1], "2"), (t[2], "3"), (t[3], "4")]
        )
        .checkpoint
    );
    // 60 + 40 + the row is over 100: the batch's first records fit, its writes do not, so the
    // first commit stops before the batch rather than inside it.
    let first = commit(&mut machine, S / 10);
    assert_eq!(
        (
            &*first.checkpoint,
            first.units.clone(),
            first.covers.entries
        ),
        ("1", units(&[1]), 1)
    );
    machine.write_answered(S / 10, Answer::Done);
    let second = commit(&mut machine, S / 10);
    assert_eq!(
        (
            &*second.checkpoint,
            second.units.clone(),
            second.covers.entries
        ),
        ("4", units(&[2]), 3)
    );
    machine.write_answered(S / 5, Answer::Done);
    assert!(machine.is_drained());
}

#[test]
fn a_batch_refused_by_its_own_write_comes_back_record_by_record() {
    let mut machine = committing();
    let t = delivered(&mut machine, &["1", "2", "3"]);
    batch(&mut machine, 5, 2, &[(t[0], "1"), (t[1], "2"), (t[2], "3")]);
    let sent = commit(&mut machine, S / 10);
    assert_eq!((&*sent.checkpoint, sent.units.clone()), ("3", units(&[5])));
    machine.write_answered(S / 5, Answer::UserRefused(UnitId(5)));
    assert_eq!(machine.take_commit_news(), [CommitNews::Refused(UnitId(5))]);
    let mut again = Vec::new();
    while let Redeliver::Deliver(one) = machine.next_redelivery(S / 5, ms(S / 5)) {
        again.push((one.record.clone(), one.ticket));
    }
    assert_eq!(
        again,
        [(rec("1"), t[0]), (rec("2"), t[1]), (rec("3"), t[2])],
        "every record of the batch comes again, in order"
    );
    assert!(matches!(
        machine.next_write(S / 5, ms(S / 5)),
        Next::Wait(_)
    ));
    // Each handled again alone: they commit as the singletons they are now.
    for (n, ticket) in t.iter().enumerate() {
        let id = 10 + n as u64;
        machine
            .settle_staged(*ticket, Some(staged(id, 1, "x")), false)
            .unwrap();
    }
    let rest = commit(&mut machine, S / 4);
    assert_eq!(
        (&*rest.checkpoint, rest.units.clone()),
        ("3", units(&[10, 11, 12]))
    );
}

#[test]
fn a_solo_commit_takes_a_whole_batch() {
    let mut machine = committing();
    let t = delivered(&mut machine, &["1", "2", "3"]);
    batch(&mut machine, 1, 1, &[(t[0], "1"), (t[1], "2")]);
    machine
        .settle_staged(t[2], Some(staged(2, 1, "3")), false)
        .unwrap();
    commit(&mut machine, S / 10);
    // Refused as a whole: one unit with writes at a time, a batch being one.
    machine.write_answered(S / 10, Answer::Split);
    let solo = commit(&mut machine, S / 10);
    assert_eq!((&*solo.checkpoint, solo.units.clone()), ("2", units(&[1])));
}

/// The row a renewal answers, holding the commit token `token`.
fn row_with(token: Option<&str>) -> crate::LeaseState {
    crate::LeaseState {
        owner: Some("me".to_owned()),
        expiry_ms: 60_000,
        counter: 9,
        checkpoint: Some("1".to_owned()),
        behind_ms: None,
        handoff: None,
        commit_token: token.map(str::to_owned),
    }
}

#[test]
fn a_renewal_finding_a_commit_of_its_own_taken_for_refused_loses_the_lease() {
    let mut machine = committing();
    let t = delivered(&mut machine, &["1", "2"]);
    machine
        .settle_staged(t[0], Some(staged(1, 1, "1")), false)
        .unwrap();
    let landed = commit(&mut machine, S / 10);
    machine.write_answered(S / 10, Answer::Done);
    let ours = landed.token.base();
    assert!(
        !machine.row_answered(&row_with(Some(&ours))),
        "the row holds the last commit that landed: the lease goes on"
    );
    machine
        .settle_staged(t[1], Some(staged(2, 1, "2")), false)
        .unwrap();
    let refused = commit(&mut machine, S / 5);
    machine.write_answered(S / 5, Answer::UserRefused(UnitId(2)));
    // Unit 2 goes back to be handled again; then an earlier attempt of its commit lands late,
    // and the next renewal's row shows it.
    assert!(machine.row_answered(&row_with(Some(&refused.token.base()))));
    assert_eq!(machine.ending(), Some(Ending::Lost(Lost::Refused)));
    assert!(
        matches!(
            machine.next_write(S, ms(S)),
            Next::Wait(None) | Next::Ended(_)
        ),
        "nothing more is written"
    );
}

#[test]
fn a_renewal_finding_the_first_commit_taken_for_refused_loses_the_lease_too() {
    let mut machine = committing();
    let t = delivered(&mut machine, &["1"]);
    machine
        .settle_staged(t[0], Some(staged(1, 1, "1")), false)
        .unwrap();
    let refused = commit(&mut machine, S / 10);
    machine.write_answered(S / 10, Answer::UserRefused(UnitId(1)));
    assert!(
        !machine.row_answered(&row_with(Some("an earlier owner's"))),
        "no commit of this lease landed: another token tells nothing"
    );
    assert!(machine.row_answered(&row_with(Some(&refused.token.base()))));
    assert_eq!(machine.ending(), Some(Ending::Lost(Lost::Refused)));
}

#[path = "tests/spanning.rs"]
mod spanning;

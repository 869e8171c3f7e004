//! The shard machine on a virtual clock: reading (pacing, the tip, the window, backoff, fresh
//! iterators, the end of a shard, seeks, stops) and settling (the watermark, hand-backs, the
//! shutdown's refusals) beside the lease.

use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::kinesis::iterator::ShardIterator;
use crate::lease::millis;
use crate::shard::pace::{MAX_BACKOFF, MIN_CALL_GAP, Pace};
use crate::shard::read::ITERATOR_TRIES;
use crate::shard::{Lost, Write};
use crate::{KinesisPosition, LeaseTimings};

const S: Duration = Duration::from_secs(1);
const EPOCH_MS: u64 = 1_000_000;
const POLL: Duration = Duration::from_secs(1);

/// A record: its sequence number, and for a user record of a KPL aggregate its index there and
/// whether it is the aggregate's last. `rec("5.0")` is user record 0 of the aggregate at 5, which
/// others follow; `rec("5.2$")` the last of it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Rec(SharedStr, Option<(u64, bool)>);

fn rec(name: &str) -> Rec {
    match name.split_once('.') {
        None => Rec(SharedStr::from(name), None),
        Some((sequence, sub)) => {
            let last = sub.ends_with('$');
            let sub = sub.trim_end_matches('$').parse().expect("an index");
            Rec(SharedStr::from(sequence), Some((sub, last)))
        }
    }
}

impl Sequenced for Rec {
    fn sequence(&self) -> &SharedStr {
        &self.0
    }

    fn sub_sequence(&self) -> Option<u64> {
        self.1.map(|(sub, _)| sub)
    }

    fn ends_record(&self) -> bool {
        self.1.is_none_or(|(_, last)| last)
    }
}

fn ms(at: Duration) -> u64 {
    EPOCH_MS + millis(at)
}

fn settings(window: usize) -> ReadSettings {
    ReadSettings {
        batch_size: 10,
        pace: Pace::service(POLL),
        window,
        fan_out: false,
    }
}

/// Where the take recorded the shard's start: the tip as a moment.
fn recorded() -> ShardStart {
    ShardStart::At(KinesisPosition::Latest)
}

/// A seek's position as its checkpoint records it.
fn sought() -> SharedStr {
    SharedStr::from("AT_SEQUENCE:5")
}

fn taken_with(window: usize) -> ShardMachine<Duration, Rec> {
    ShardMachine::new(
        ShardLease::taken(LeaseTimings::default(), Duration::ZERO, ms(Duration::ZERO)),
        settings(window),
        ShardIterator::service("it-0"),
        recorded(),
    )
}

fn taken() -> ShardMachine<Duration, Rec> {
    taken_with(1000)
}

fn next(machine: &mut ShardMachine<Duration, Rec>, now: Duration) -> ReadStep<Rec, Duration> {
    machine.next_read(now, || ms(now))
}

fn records(sequences: &[&str]) -> Vec<Rec> {
    sequences.iter().map(|s| rec(s)).collect()
}

/// Expects a `GetRecords` call at `now` and answers it with `sequences`, `next` and
/// `millis_behind`.
fn read(
    machine: &mut ShardMachine<Duration, Rec>,
    now: Duration,
    sequences: &[&str],
    next_iterator: Option<&str>,
    millis_behind: i64,
) {
    let step = next(machine, now);
    assert!(
        matches!(step, ReadStep::Call(Call::GetRecords(_))),
        "a GetRecords call at {now:?}, not {step:?}"
    );
    machine.read_answered(
        now,
        Fetch::Records {
            records: records(sequences),
            next: next_iterator.map(ShardIterator::service),
            millis_behind: Some(millis_behind),
        },
        0,
    );
}

#[test]
fn a_checkpoint_inside_an_aggregate_names_the_last_settled_user_record() {
    let mut machine = taken();
    // Plain 4, the aggregate at 5 (three user records), plain 6.
    read(
        &mut machine,
        Duration::ZERO,
        &["4", "5.0", "5.1", "5.2$", "6"],
        Some("it-1"),
        0,
    );
    let tickets = hand_out(&mut machine, Duration::ZERO);
    assert_eq!(tickets.len(), 5, "each user record is a delivery");
    let grown = |machine: &mut ShardMachine<Duration, Rec>, ticket| {
        let grew = machine.settle(ticket, false).unwrap().grew;
        grew.then(|| machine.pending_checkpoint().cloned())
            .flatten()
    };
    assert_eq!(grown(&mut machine, tickets[0]).as_deref(), Some("4"));
    assert_eq!(
        grown(&mut machine, tickets[2]),
        None,
        "user record 0 is not settled"
    );
    assert_eq!(grown(&mut machine, tickets[1]).as_deref(), Some("5:1"));
    assert_eq!(grown(&mut machine, tickets[4]), None);
    assert_eq!(
        grown(&mut machine, tickets[3]).as_deref(),
        Some("6"),
        "its last, and what followed"
    );
}

#[test]
fn a_shard_resumed_inside_an_aggregate_drops_the_user_records_settled_before() {
    let resume = ShardStart::from_checkpoint("shardId-0", "5:1");
    assert_eq!(
        resume,
        ShardStart::Within {
            sequence: SharedStr::from("5"),
            through: 1
        }
    );
    let mut machine = ShardMachine::new(
        ShardLease::taken(LeaseTimings::default(), Duration::ZERO, ms(Duration::ZERO)),
        settings(1000),
        ShardIterator::service("at-5"),
        resume,
    );
    read(
        &mut machine,
        Duration::ZERO,
        &["5.0", "5.1", "5.2", "5.3$", "6"],
        Some("it-1"),
        0,
    );
    let mut handed = Vec::new();
    while let ReadStep::Deliver(record, _) = next(&mut machine, Duration::ZERO) {
        handed.push(record);
    }
    assert_eq!(handed, records(&["5.2", "5.3$", "6"]));
    // The next batch drops nothing: a record of sequence 5 would be a new aggregate's.
    read(&mut machine, S, &["7"], Some("it-2"), 0);
    assert_eq!(hand_out(&mut machine, S).len(), 1);
    // An expired iterator with nothing handed out since the start skips again.
    let mut machine = ShardMachine::new(
        ShardLease::taken(LeaseTimings::default(), Duration::ZERO, ms(Duration::ZERO)),
        settings(1000),
        ShardIterator::service("at-5"),
        ShardStart::from_checkpoint("shardId-0", "5:0"),
    );
    let step = next(&mut machine, Duration::ZERO);
    assert!(
        matches!(step, ReadStep::Call(Call::GetRecords(_))),
        "{step:?}"
    );
    machine.read_answered(Duration::ZERO, Fetch::Expired, 0);
    let step = next(&mut machine, S);
    assert!(
        matches!(
            &step,
            ReadStep::Call(Call::GetIterator(ShardStart::Within { through: 0, .. }))
        ),
        "{step:?}"
    );
    machine.read_answered(S, Fetch::Iterator(ShardIterator::service("at-5-again")), 0);
    read(&mut machine, S + S, &["5.0", "5.1$"], Some("it-1"), 0);
    let mut handed = Vec::new();
    while let ReadStep::Deliver(record, _) = next(&mut machine, S + S) {
        handed.push(record);
    }
    assert_eq!(handed, records(&["5.1$"]));
}

/// Hands out every record the machine holds at `now`, and answers their tickets.
fn hand_out(machine: &mut ShardMachine<Duration, Rec>, now: Duration) -> Vec<Ticket> {
    let mut tickets = Vec::new();
    while let ReadStep::Deliver(_, ticket) = next(machine, now) {
        tickets.push(ticket);
    }
    tickets
}

#[test]
fn records_handed_out_together_are_those_handed_out_one_by_one_and_the_step_after_waits() {
    let sequences = ["1", "2", "3", "4", "5"];
    let mut alone = taken();
    read(&mut alone, Duration::ZERO, &sequences, Some("it-1"), 0);
    let mut one_by_one = Vec::new();
    let after = loop {
        match next(&mut alone, Duration::ZERO) {
            ReadStep::Deliver(record, ticket) => one_by_one.push((record, ticket)),
            other => break other,
        }
    };
    let mut together = taken();
    read(&mut together, Duration::ZERO, &sequences, Some("it-1"), 0);
    let mut handed = Vec::new();
    let mut sizes = Vec::new();
    let mut more = Vec::new();
    let after_together = loop {
        match together.next_reads(Duration::ZERO, || ms(Duration::ZERO), (3, &mut more)) {
            ReadStep::Deliver(record, ticket) => {
                sizes.push(1 + more.len());
                handed.extend(crate::shard::handed_in_order(
                    record,
                    ticket,
                    more.drain(..),
                ));
            }
            other => break other,
        }
    };
    assert_eq!(handed, one_by_one);
    assert_eq!(sizes, [3, 2], "at most 3 at once, and what is left");
    assert!(
        more.is_empty(),
        "nothing rides along a step that is not a delivery"
    );
    assert!(
        matches!(
            (&after, &after_together),
            (ReadStep::Wait(Some(a)), ReadStep::Wait(Some(b))) if a == b && *a == POLL
        ),
        "the tip's wait after them both ways: {after:?}, {after_together:?}"
    );
    // Past the lease's end, nothing is handed out.
    let mut late = taken();
    read(&mut late, Duration::ZERO, &sequences, Some("it-1"), 0);
    let past = LeaseTimings::default().lease() + S;
    let step = late.next_reads(past, || ms(past), (3, &mut more));
    assert!(matches!(step, ReadStep::Finish(Stop::Lost)), "{step:?}");
    assert!(more.is_empty());
}

#[test]
fn calls_go_out_at_most_five_a_second_and_once_per_poll_interval_at_the_tip() {
    let mut machine = taken();
    read(
        &mut machine,
        Duration::ZERO,
        &["1", "2"],
        Some("it-1"),
        5_000,
    );
    assert_eq!(hand_out(&mut machine, Duration::ZERO).len(), 2);
    // Behind the tip: the next call 200 ms after this one.
    let ReadStep::Wait(Some(at)) = next(&mut machine, Duration::ZERO) else {
        panic!("a paced wait");
    };
    assert_eq!(at, MIN_CALL_GAP);
    read(&mut machine, at, &["3"], Some("it-2"), 0);
    hand_out(&mut machine, at);
    // Caught up: one call per poll interval, counted from the last call.
    let step = next(&mut machine, at + MIN_CALL_GAP);
    assert!(
        matches!(step, ReadStep::Wait(Some(until)) if until == at + POLL),
        "{step:?}"
    );
    let step = next(&mut machine, at + POLL);
    assert_eq!(
        step_call(step),
        Some(Call::GetRecords(ShardIterator::service("it-2")))
    );
}

#[test]
fn the_batch_limit_counts_an_aggregate_as_one_record() {
    let mut machine = taken();
    // Twelve user records of one aggregate: one Kinesis record of the ten the call may return.
    let names: Vec<String> = (0..12)
        .map(|n| format!("5.{n}{}", if n == 11 { "$" } else { "" }))
        .collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    read(&mut machine, Duration::ZERO, &names, Some("it-1"), 0);
    assert_eq!(hand_out(&mut machine, Duration::ZERO).len(), 12);
    let step = next(&mut machine, MIN_CALL_GAP);
    assert!(
        matches!(step, ReadStep::Wait(Some(until)) if until == POLL),
        "caught up at the tip: the poll interval, {step:?}"
    );
}

fn step_call(step: ReadStep<Rec, Duration>) -> Option<Call> {
    match step {
        ReadStep::Call(call) => Some(call),
        _ => None,
    }
}

#[test]
fn a_full_window_stops_reading_ahead_until_a_settlement_makes_room() {
    let mut machine = taken_with(2);
    read(
        &mut machine,
        Duration::ZERO,
        &["1", "2"],
        Some("it-1"),
        5_000,
    );
    let tickets = hand_out(&mut machine, Duration::ZERO);
    let step = next(&mut machine, S);
    assert!(
        matches!(step, ReadStep::Wait(None)),
        "the window is full: {step:?}"
    );
    // The second record settles first: the first still holds the window.
    let settled = machine.settle(tickets[1], false).unwrap();
    assert!(!settled.wake_reader && !settled.checkpoint);
    let settled = machine.settle(tickets[0], false).unwrap();
    assert!(settled.wake_reader, "the window has room again");
    assert!(settled.grew);
    assert_eq!(machine.pending_checkpoint().map(|c| &**c), Some("2"));
    assert!(settled.checkpoint);
    assert_eq!(
        step_call(next(&mut machine, S)),
        Some(Call::GetRecords(ShardIterator::service("it-1")))
    );
}

#[test]
fn a_failed_call_is_sent_again_after_a_jittered_backoff() {
    for coin in [0, 1, 1_000, u64::MAX] {
        let mut machine = taken();
        let mut now = Duration::ZERO;
        // Four in a row: at most 6 s, inside the lease (nothing renews it here).
        for failures in 1..=4u32 {
            let step = next(&mut machine, now);
            assert_eq!(
                step_call(step),
                Some(Call::GetRecords(ShardIterator::service("it-0")))
            );
            machine.read_answered(now, Fetch::Failed, coin);
            let ReadStep::Wait(Some(until)) = next(&mut machine, now) else {
                panic!("a backoff");
            };
            let wait = until - now;
            assert!(wait >= MIN_CALL_GAP, "{wait:?}");
            assert!(
                wait <= crate::shard::pace::backoff_ceiling(failures) && wait <= MAX_BACKOFF,
                "{wait:?} after {failures} failures"
            );
            now = until;
        }
        read(&mut machine, now, &["1"], Some("it-1"), 0);
        hand_out(&mut machine, now);
        let step = next(&mut machine, now);
        let ReadStep::Wait(Some(until)) = step else {
            panic!("a poll wait, not {step:?}");
        };
        assert_eq!(until, now + POLL, "a success resets the backoff");
    }
}

/// Pins item 3 of the review: with no record handed out since the take, a fresh iterator starts
/// where the take recorded the shard's start (the tip as that moment), never at a later tip.
#[test]
fn an_expired_iterator_resumes_after_the_last_record_handed_out_or_at_the_recorded_start() {
    let resume = ShardStart::from_checkpoint("shardId-0", "AT_TIMESTAMP:1000");
    let mut machine: ShardMachine<Duration, Rec> = ShardMachine::new(
        ShardLease::taken(LeaseTimings::default(), Duration::ZERO, ms(Duration::ZERO)),
        settings(1000),
        ShardIterator::service("it-0"),
        resume.clone(),
    );
    let _ = next(&mut machine, Duration::ZERO);
    machine.read_answered(Duration::ZERO, Fetch::Expired, 0);
    assert_eq!(
        step_call(next(&mut machine, Duration::ZERO)),
        Some(Call::GetIterator(resume)),
        "nothing handed out yet: the recorded start"
    );
    machine.read_answered(
        Duration::ZERO,
        Fetch::Iterator(ShardIterator::service("it-1")),
        0,
    );
    read(&mut machine, MIN_CALL_GAP, &["7", "8"], Some("it-2"), 0);
    hand_out(&mut machine, MIN_CALL_GAP);
    let now = MIN_CALL_GAP + POLL;
    let _ = next(&mut machine, now);
    machine.read_answered(now, Fetch::Expired, 0);
    assert_eq!(
        step_call(next(&mut machine, now)),
        Some(Call::GetIterator(ShardStart::After(SharedStr::from("8"))))
    );
}

/// Pins the loss the review found: a reader that could get no fresh iterator took the missing
/// iterator for the shard's end and wrote `SHARD_END` for an open shard. It now hands the shard
/// back unread, and only an answer without a next iterator ends a shard.
#[test]
fn a_shard_whose_fresh_iterators_keep_failing_is_handed_back_not_finished() {
    let mut machine = taken();
    let mut now = Duration::ZERO;
    let _ = next(&mut machine, now);
    machine.read_answered(now, Fetch::Expired, 0);
    for _ in 0..ITERATOR_TRIES {
        match next(&mut machine, now) {
            ReadStep::Call(Call::GetIterator(_)) => {
                machine.read_answered(now, Fetch::IteratorFailed, 7);
            }
            ReadStep::Wait(Some(until)) => {
                now = until;
                let step = next(&mut machine, now);
                assert!(
                    matches!(step, ReadStep::Call(Call::GetIterator(_))),
                    "{step:?}"
                );
                machine.read_answered(now, Fetch::IteratorFailed, 7);
            }
            other => panic!("{other:?}"),
        }
    }
    let step = next(&mut machine, now + MAX_BACKOFF);
    assert!(
        matches!(step, ReadStep::Finish(Stop::Unreadable)),
        "{step:?}"
    );
    assert_eq!(Stop::Unreadable.close(), Some(Close::Release));
}

#[test]
fn a_shard_read_to_its_end_finishes_once_every_delivery_settled() {
    let mut machine = taken();
    read(&mut machine, Duration::ZERO, &["1", "2"], None, 0);
    let tickets = hand_out(&mut machine, Duration::ZERO);
    assert_eq!(tickets.len(), 2, "the last batch is handed out first");
    assert!(
        matches!(next(&mut machine, S), ReadStep::Wait(None)),
        "draining"
    );
    assert!(!machine.settle(tickets[0], false).unwrap().wake_reader);
    assert!(machine.settle(tickets[1], false).unwrap().wake_reader);
    let step = next(&mut machine, S);
    assert!(matches!(step, ReadStep::Finish(Stop::Ended)), "{step:?}");
    assert_eq!(Stop::Ended.close(), Some(Close::Finished));
}

#[test]
fn a_cancelled_reader_hands_back_a_draining_shard_unless_it_is_drained() {
    let mut machine = taken();
    read(&mut machine, Duration::ZERO, &["1"], None, 0);
    let ticket = hand_out(&mut machine, Duration::ZERO)[0];
    machine.cancel_reading();
    assert!(matches!(
        next(&mut machine, S),
        ReadStep::Finish(Stop::Cancelled)
    ));

    let mut drained = taken();
    read(&mut drained, Duration::ZERO, &["1"], None, 0);
    let ticket_2 = hand_out(&mut drained, Duration::ZERO)[0];
    drained.settle(ticket_2, false).unwrap();
    drained.cancel_reading();
    assert!(matches!(
        next(&mut drained, S),
        ReadStep::Finish(Stop::Ended)
    ));
    let _ = ticket;
}

#[test]
fn a_seek_drops_the_answer_of_the_call_in_flight_and_restarts_a_draining_reader() {
    let mut machine = taken();
    let _ = next(&mut machine, Duration::ZERO);
    assert!(machine.seek(ShardIterator::service("it-seek"), recorded(), sought()));
    machine.read_answered(
        Duration::ZERO,
        Fetch::Records {
            records: records(&["1"]),
            next: None,
            millis_behind: Some(0),
        },
        0,
    );
    assert_eq!(
        step_call(next(&mut machine, MIN_CALL_GAP)),
        Some(Call::GetRecords(ShardIterator::service("it-seek"))),
        "the old position's answer is dropped"
    );
    machine.read_answered(
        MIN_CALL_GAP,
        Fetch::Records {
            records: records(&["5"]),
            next: None,
            millis_behind: Some(0),
        },
        0,
    );
    let old = hand_out(&mut machine, MIN_CALL_GAP);
    assert!(
        matches!(next(&mut machine, S), ReadStep::Wait(None)),
        "draining"
    );
    assert!(machine.seek(ShardIterator::service("it-back"), recorded(), sought()));
    assert_eq!(
        step_call(next(&mut machine, S)),
        Some(Call::GetRecords(ShardIterator::service("it-back"))),
        "a seek sends a draining reader back to reading"
    );
    assert_eq!(
        machine.standing(old[0], S, ms(S)),
        Standing::Stale,
        "a delivery read before the seek"
    );
}

#[test]
fn a_seek_drops_the_records_waiting_to_come_back() {
    let mut machine = taken();
    read(&mut machine, Duration::ZERO, &["1"], Some("it-1"), 0);
    let ticket = hand_out(&mut machine, Duration::ZERO)[0];
    let kept = machine.hand_back(
        Duration::ZERO,
        rec("1"),
        ticket,
        1,
        Duration::from_secs(3600),
        false,
    );
    assert_eq!(kept, HandedBack::Kept);
    assert!(
        !machine.is_drained(),
        "a record waits to come back in an hour"
    );
    machine.seek(ShardIterator::service("it-seek"), recorded(), sought());
    assert!(
        machine.is_drained(),
        "after a seek nothing waits: a closed shard need not wait out the retry's timer"
    );
    assert_eq!(machine.waiting_to_come_back(), 0);
    assert!(matches!(
        machine.next_redelivery(Duration::from_secs(7200), ms(Duration::from_secs(7200))),
        Redeliver::Wait(None)
    ));
}

#[test]
fn a_handed_back_record_comes_back_when_due_while_the_lease_lasts() {
    let mut machine = taken();
    read(&mut machine, Duration::ZERO, &["1", "2"], Some("it-1"), 0);
    let tickets = hand_out(&mut machine, Duration::ZERO);
    for (ticket, delay) in tickets.iter().zip([2 * S, S]) {
        machine.hand_back(Duration::ZERO, rec("x"), *ticket, 1, delay, false);
    }
    assert!(matches!(
        machine.next_redelivery(Duration::ZERO, ms(Duration::ZERO)),
        Redeliver::Wait(Some(at)) if at == S
    ));
    let Redeliver::Deliver(first) = machine.next_redelivery(S, ms(S)) else {
        panic!("due");
    };
    assert_eq!(first.ticket, tickets[1], "in the order they fall due");
    // Past the lease by the wall clock (a suspended host): nothing comes back.
    let late = 20 * S;
    assert!(matches!(
        machine.next_redelivery(late, ms(late)),
        Redeliver::Halted
    ));
    assert!(machine.is_lost());
}

#[test]
fn a_settlement_after_the_lease_was_lost_is_refused() {
    let mut machine = taken();
    read(&mut machine, Duration::ZERO, &["1"], Some("it-1"), 0);
    let ticket = hand_out(&mut machine, Duration::ZERO)[0];
    machine.run_out();
    assert_eq!(machine.settle(ticket, false), Err(Refusal::Handover));
    assert_eq!(
        machine.next_write(S, ms(S)),
        Next::Ended(Ending::Lost(Lost::RanOut)),
        "nothing to write"
    );
    assert!(matches!(
        next(&mut machine, S),
        ReadStep::Finish(Stop::Lost)
    ));
    assert_eq!(Stop::Lost.close(), None);
}

#[test]
fn a_settlement_that_grows_the_prefix_is_the_next_write() {
    let mut machine = taken();
    read(&mut machine, Duration::ZERO, &["1", "2"], Some("it-1"), 0);
    let tickets = hand_out(&mut machine, Duration::ZERO);
    machine.settle(tickets[1], false).unwrap();
    assert!(
        matches!(machine.next_write(S, ms(S)), Next::Wait(Some(_))),
        "nothing settled in order yet"
    );
    machine.settle(tickets[0], false).unwrap();
    assert_eq!(
        machine.next_write(S, ms(S)),
        Next::Send(Write::Checkpoint {
            checkpoint: SharedStr::from("2"),
            behind_ms: Some(0),
        })
    );
}

/// A machine that read records 1 to 4 and handed them out, and their tickets.
fn four_handed_out() -> (ShardMachine<Duration, Rec>, Vec<Ticket>) {
    let mut machine = taken();
    read(
        &mut machine,
        Duration::ZERO,
        &["1", "2", "3", "4"],
        Some("it-1"),
        0,
    );
    let tickets = hand_out(&mut machine, Duration::ZERO);
    (machine, tickets)
}

/// The lease's driver is woken for a checkpoint when one comes where none was pending: a newer
/// one replaces the pending one in place, written at the cadence the driver's timer already
/// counts (woken at every settle, the driver woke for every record).
#[test]
fn the_lease_driver_is_told_of_the_first_pending_checkpoint_and_not_of_those_replacing_it() {
    let (mut machine, tickets) = four_handed_out();
    // The first checkpoint goes out at once; the cadence counts from it.
    assert!(machine.settle(tickets[0], false).unwrap().checkpoint);
    let Next::Send(Write::Checkpoint { checkpoint, .. }) = machine.next_write(S, ms(S)) else {
        panic!("the first checkpoint is due");
    };
    assert_eq!(&*checkpoint, "1");
    machine.write_answered(S, Answer::Done);
    let Next::Wait(Some(renewal)) = machine.next_write(S, ms(S)) else {
        panic!("nothing pending: the driver waits for the renewal");
    };
    let settled = machine.settle(tickets[1], false).unwrap();
    assert!(settled.grew);
    assert_eq!(machine.pending_checkpoint().map(|c| &**c), Some("2"));
    assert!(settled.checkpoint, "none was pending: the driver is told");
    let Next::Wait(Some(due)) = machine.next_write(S, ms(S)) else {
        panic!("within the cadence, the driver waits");
    };
    assert!(due < renewal, "its timer is the checkpoint's cadence now");
    let settled = machine.settle(tickets[2], false).unwrap();
    assert!(settled.grew);
    assert_eq!(machine.pending_checkpoint().map(|c| &**c), Some("3"));
    assert!(
        !settled.checkpoint,
        "one was pending: its timer serves the newer"
    );
    assert_eq!(
        machine.next_write(S, ms(S)),
        Next::Wait(Some(due)),
        "the same timer"
    );
    let Next::Send(Write::Checkpoint { checkpoint, .. }) = machine.next_write(due, ms(due)) else {
        panic!("the checkpoint is due at the timer");
    };
    assert_eq!(&*checkpoint, "3", "the newest pending one goes");
    machine.write_answered(due, Answer::Done);
    assert!(
        machine.settle(tickets[3], false).unwrap().checkpoint,
        "written: the next one is told again"
    );
}

/// The checkpoint lag counts deliveries settled in order that no checkpoint written covers yet:
/// it grows with in-order settlements, ignores out-of-order ones, and falls to what settled
/// since once a checkpoint write lands (a failed one changes nothing).
#[test]
fn the_checkpoint_lag_is_what_settled_in_order_and_is_not_yet_written() {
    let (mut machine, tickets) = four_handed_out();
    machine.settle(tickets[0], false).unwrap();
    machine.settle(tickets[2], false).unwrap();
    assert_eq!(
        machine.checkpoint_lag(),
        1,
        "the third waits for the second"
    );
    machine.settle(tickets[1], false).unwrap();
    assert_eq!(machine.checkpoint_lag(), 3);
    let Next::Send(Write::Checkpoint { .. }) = machine.next_write(S, ms(S)) else {
        panic!("a checkpoint is due");
    };
    machine.settle(tickets[3], false).unwrap();
    machine.write_answered(S, Answer::Failed);
    assert_eq!(machine.checkpoint_lag(), 4, "a failed write covers nothing");
    let later = S * 2;
    let Next::Send(Write::Checkpoint { checkpoint, .. }) = machine.next_write(later, ms(later))
    else {
        panic!("the checkpoint is sent again");
    };
    assert_eq!(&*checkpoint, "4");
    machine.write_answered(later, Answer::Done);
    assert_eq!(machine.checkpoint_lag(), 0);
}

/// The final checkpoint of a shard handed back covers what settled since the last one.
#[test]
fn the_final_checkpoint_leaves_no_checkpoint_lag() {
    let mut machine = taken();
    read(&mut machine, Duration::ZERO, &["1", "2"], Some("it-1"), 0);
    let tickets = hand_out(&mut machine, Duration::ZERO);
    machine.settle(tickets[0], false).unwrap();
    machine.settle(tickets[1], false).unwrap();
    machine.close(Close::Release);
    let Next::Send(Write::Final(checkpoint)) = machine.next_write(Duration::ZERO, 0) else {
        panic!("the final checkpoint goes out first");
    };
    assert_eq!(&*checkpoint, "2");
    assert_eq!(machine.checkpoint_lag(), 2);
    machine.write_answered(Duration::ZERO, Answer::Done);
    assert_eq!(machine.checkpoint_lag(), 0);
}

/// Each checkpoint is written with how far behind the shard's newest record the last read
/// before it was: the lease-table view shows it per row, at no write of its own.
#[test]
fn a_checkpoint_carries_how_far_behind_the_last_read_was() {
    let mut machine = taken();
    read(
        &mut machine,
        Duration::ZERO,
        &["1", "2"],
        Some("it-1"),
        4_000,
    );
    let tickets = hand_out(&mut machine, Duration::ZERO);
    machine.settle(tickets[0], false).unwrap();
    machine.settle(tickets[1], false).unwrap();
    assert_eq!(
        machine.next_write(S, ms(S)),
        Next::Send(Write::Checkpoint {
            checkpoint: SharedStr::from("2"),
            behind_ms: Some(4_000),
        })
    );
    machine.write_answered(S, Answer::Done);
    // The reader caught up: the next checkpoint says so.
    read(&mut machine, S, &["3"], Some("it-2"), 0);
    let tickets = hand_out(&mut machine, S);
    machine.settle(tickets[0], false).unwrap();
    let later = S * 10;
    assert_eq!(
        machine.next_write(later, ms(later)),
        Next::Send(Write::Checkpoint {
            checkpoint: SharedStr::from("3"),
            behind_ms: Some(0),
        })
    );
}

#[test]
fn a_shard_whose_settlement_the_shutdown_refused_is_never_drained() {
    let mut machine = taken();
    read(&mut machine, Duration::ZERO, &["1", "2"], None, 0);
    let tickets = hand_out(&mut machine, Duration::ZERO);
    machine.settle(tickets[0], false).unwrap();
    assert_eq!(machine.settle(tickets[1], true), Err(Refusal::ShutDown));
    assert!(
        !machine.is_drained(),
        "record 2 was not settled: a closed shard must not be finished past it"
    );
    machine.cancel_reading();
    assert!(
        matches!(next(&mut machine, S), ReadStep::Finish(Stop::Cancelled)),
        "handed back, not finished"
    );
}

#[test]
fn after_a_suspension_longer_than_the_lease_the_shard_delivers_nothing() {
    // A take sent before a 60 s suspension: by the monotonic clock it was sent just now.
    let mut suspended: ShardMachine<Duration, Rec> = ShardMachine::new(
        ShardLease::taken(LeaseTimings::default(), Duration::ZERO, EPOCH_MS - 60_000),
        settings(1000),
        ShardIterator::service("it-0"),
        recorded(),
    );
    assert!(!suspended.may_deliver(Duration::ZERO, ms(Duration::ZERO)));
    read(&mut suspended, Duration::ZERO, &["1"], Some("it-1"), 0);
    let step = next(&mut suspended, Duration::ZERO);
    assert!(
        matches!(step, ReadStep::Finish(Stop::Lost)),
        "the record read is not handed out: {step:?}"
    );
}

/// A seek that returned sends a draining shard back to reading even when the cancel comes
/// before the reader applied it: the shard is then handed back, not finished past the seek.
#[test]
fn a_seek_back_on_a_draining_shard_is_not_lost_to_a_cancel() {
    let mut machine = taken();
    read(&mut machine, Duration::ZERO, &["1"], None, 0);
    let ticket = hand_out(&mut machine, Duration::ZERO)[0];
    assert!(
        matches!(next(&mut machine, S), ReadStep::Wait(None)),
        "draining"
    );
    assert!(machine.seek(ShardIterator::service("it-back"), recorded(), sought()));
    // The old position's record settles after the seek (moving nothing), then shutdown.
    let _ = machine.settle(ticket, false);
    machine.cancel_reading();
    let step = next(&mut machine, S);
    assert!(
        matches!(step, ReadStep::Finish(Stop::Cancelled)),
        "handed back, not SHARD_END: {step:?}"
    );
}

/// A seek of a shard being handed back moves nothing: its pending checkpoint still goes out
/// before the release.
#[test]
fn a_seek_of_a_shard_being_handed_back_keeps_its_pending_checkpoint() {
    let mut machine = taken();
    read(&mut machine, Duration::ZERO, &["1"], Some("it-1"), 0);
    let ticket = hand_out(&mut machine, Duration::ZERO)[0];
    machine.settle(ticket, false).unwrap();
    machine.cancel_reading();
    assert!(matches!(
        next(&mut machine, S),
        ReadStep::Finish(Stop::Cancelled)
    ));
    machine.close(Close::Release);
    assert!(!machine.seek(ShardIterator::service("it-seek"), recorded(), sought()));
    assert_eq!(
        machine.next_write(S, ms(S)),
        Next::Send(Write::Final(SharedStr::from("1"))),
        "the settled prefix is written before the release"
    );
}

/// A seek whose position settled nothing yet still moves the shard: its position is the
/// checkpoint to write, and a release or a handoff carries it to the next owner.
#[test]
fn a_seek_that_settled_nothing_survives_a_hand_over() {
    for close in [Close::Release, Close::HandOver] {
        let mut machine = taken();
        read(&mut machine, Duration::ZERO, &["1"], Some("it-1"), 0);
        let ticket = hand_out(&mut machine, Duration::ZERO)[0];
        machine.settle(ticket, false).unwrap();
        if close == Close::HandOver {
            assert!(machine.row_seen(&asked_row("me", "pod-b", ms(S)), "me", S, ms(S)));
        }
        let applied = machine.seek(ShardIterator::service("it-seek"), recorded(), sought());
        if close == Close::HandOver {
            // Handing over already: refused, and said so; the settled record goes with it.
            assert!(!applied, "a seek of a shard on its way to another instance");
            machine.close(close);
            assert_eq!(
                machine.next_write(S, ms(S)),
                Next::Send(Write::HandOver {
                    to: Arc::from("pod-b"),
                    checkpoint: Some(SharedStr::from("1")),
                })
            );
            continue;
        }
        assert!(applied);
        machine.cancel_reading();
        machine.close(close);
        assert_eq!(
            machine.next_write(S, ms(S)),
            Next::Send(Write::Final(sought())),
            "the seek's position, not the settled record before it"
        );
    }
    // Asked to move after the seek: the handoff carries the seek's position.
    let mut machine = taken();
    read(&mut machine, Duration::ZERO, &["1"], Some("it-1"), 0);
    let ticket = hand_out(&mut machine, Duration::ZERO)[0];
    machine.settle(ticket, false).unwrap();
    assert!(machine.seek(ShardIterator::service("it-seek"), recorded(), sought()));
    assert!(machine.row_seen(&asked_row("me", "pod-b", ms(S)), "me", S, ms(S)));
    machine.close(Close::HandOver);
    assert_eq!(
        machine.next_write(S, ms(S)),
        Next::Send(Write::HandOver {
            to: Arc::from("pod-b"),
            checkpoint: Some(sought()),
        })
    );
}

/// The row a renewal answers, held by `owner`, with a handoff asked for `to` at `asked_ms`.
fn asked_row(owner: &str, to: &str, asked_ms: u64) -> LeaseState {
    LeaseState {
        owner: Some(owner.to_owned()),
        expiry_ms: asked_ms + 10_000,
        counter: 3,
        checkpoint: Some("1".to_owned()),
        behind_ms: None,
        handoff: Some(crate::Handoff {
            to: to.to_owned(),
            asked_ms,
        }),
        commit_token: None,
    }
}

#[test]
fn a_handoff_waits_for_every_delivery_then_hands_over_with_the_last_checkpoint() {
    let mut machine = taken();
    read(
        &mut machine,
        Duration::ZERO,
        &["1", "2", "3"],
        Some("it-1"),
        0,
    );
    let first = next(&mut machine, Duration::ZERO);
    let ReadStep::Deliver(_, one) = first else {
        panic!("a delivery, not {first:?}");
    };
    let ReadStep::Deliver(_, two) = next(&mut machine, Duration::ZERO) else {
        panic!("a second delivery");
    };
    // Asked at the renewal: nothing more is handed out, though record 3 is read.
    assert!(machine.row_seen(&asked_row("me", "pod-b", ms(S)), "me", S, ms(S)));
    assert!(machine.is_handing_over());
    assert!(
        matches!(next(&mut machine, S), ReadStep::Wait(Some(_))),
        "waiting for the deliveries in flight, up to the drain"
    );
    assert!(!machine.settle(one, false).unwrap().wake_reader);
    assert!(machine.settle(two, false).unwrap().wake_reader, "drained");
    let step = next(&mut machine, S);
    assert!(
        matches!(step, ReadStep::Finish(Stop::HandedOver)),
        "{step:?}"
    );
    assert!(machine.handed_over_drained());
    machine.close(Stop::HandedOver.close().expect("written"));
    assert_eq!(
        machine.next_write(S, ms(S)),
        Next::Send(Write::HandOver {
            to: Arc::from("pod-b"),
            checkpoint: Some(SharedStr::from("2")),
        }),
        "one write: the checkpoint of everything delivered, and the new owner"
    );
    machine.write_answered(S, Answer::Done);
    assert_eq!(
        machine.ending(),
        Some(Ending::Closed { written: true }),
        "nothing follows the handoff"
    );
}

#[test]
fn a_handoff_whose_deliveries_outlast_the_drain_hands_over_the_settled_prefix() {
    let timings = LeaseTimings::default().with_handoff_drain(Duration::from_secs(2));
    let mut machine = ShardMachine::new(
        ShardLease::taken(timings, Duration::ZERO, ms(Duration::ZERO)),
        settings(1000),
        ShardIterator::service("it-0"),
        recorded(),
    );
    read(&mut machine, Duration::ZERO, &["1", "2"], Some("it-1"), 0);
    let tickets = hand_out(&mut machine, Duration::ZERO);
    machine.settle(tickets[0], false).unwrap();
    assert!(machine.row_seen(&asked_row("me", "pod-b", ms(S)), "me", S, ms(S)));
    let waiting = next(&mut machine, S);
    assert!(
        matches!(waiting, ReadStep::Wait(Some(until)) if until == S * 3),
        "the drain ends 2 s after the request was seen: {waiting:?}"
    );
    let step = next(&mut machine, S * 3);
    assert!(
        matches!(step, ReadStep::Finish(Stop::HandedOver)),
        "{step:?}"
    );
    assert!(!machine.handed_over_drained());
    machine.close(Close::HandOver);
    assert_eq!(
        machine.next_write(S * 3, ms(S * 3)),
        Next::Send(Write::HandOver {
            to: Arc::from("pod-b"),
            checkpoint: Some(SharedStr::from("1")),
        })
    );
    // Record 2 settles too late: the next owner delivers it again (at least once).
    assert_eq!(machine.settle(tickets[1], false), Err(Refusal::Handover));
}

#[test]
fn a_request_that_lapsed_or_names_this_instance_is_ignored() {
    let mut machine = taken();
    read(&mut machine, Duration::ZERO, &["1"], Some("it-1"), 0);
    let lifetime = millis(crate::HANDOFF_REQUEST_LIFETIME);
    let late = S * 40;
    assert!(!machine.row_seen(
        &asked_row("me", "pod-b", ms(late) - lifetime),
        "me",
        late,
        ms(late)
    ));
    assert!(!machine.row_seen(&asked_row("me", "me", ms(S)), "me", S, ms(S)));
    assert!(!machine.is_handing_over());
    assert!(matches!(next(&mut machine, S), ReadStep::Deliver(..)));
}

#[test]
fn a_shard_being_handed_over_ignores_a_seek_and_keeps_its_checkpoint() {
    let mut machine = taken();
    read(&mut machine, Duration::ZERO, &["1", "2"], Some("it-1"), 0);
    let tickets = hand_out(&mut machine, Duration::ZERO);
    machine.settle(tickets[0], false).unwrap();
    assert!(machine.row_seen(&asked_row("me", "pod-b", ms(S)), "me", S, ms(S)));
    let generation = machine.generation();
    assert!(!machine.seek(ShardIterator::service("it-9"), recorded(), sought()));
    assert_eq!(machine.generation(), generation, "the watermark stands");
}

#[test]
fn a_refused_hand_over_falls_back_to_the_final_checkpoint_and_the_release() {
    let mut machine = taken();
    read(&mut machine, Duration::ZERO, &["1"], Some("it-1"), 0);
    let tickets = hand_out(&mut machine, Duration::ZERO);
    machine.settle(tickets[0], false).unwrap();
    assert!(machine.row_seen(&asked_row("me", "pod-b", ms(S)), "me", S, ms(S)));
    assert!(matches!(
        next(&mut machine, S),
        ReadStep::Finish(Stop::HandedOver)
    ));
    machine.close(Close::HandOver);
    assert!(matches!(
        machine.next_write(S, ms(S)),
        Next::Send(Write::HandOver { .. })
    ));
    // The request was replaced meanwhile: the row is still held, and keeps what was settled.
    machine.write_answered(S, Answer::Refused);
    assert_eq!(
        machine.next_write(S, ms(S)),
        Next::Send(Write::Final(SharedStr::from("1")))
    );
    machine.write_answered(S, Answer::Done);
    assert_eq!(machine.next_write(S, ms(S)), Next::Send(Write::Release));
}

#[test]
fn a_shard_read_to_its_end_is_finished_rather_than_handed_over() {
    let mut machine = taken();
    read(&mut machine, Duration::ZERO, &["1"], None, 0);
    let tickets = hand_out(&mut machine, Duration::ZERO);
    assert!(
        matches!(next(&mut machine, S), ReadStep::Wait(None)),
        "draining"
    );
    assert!(!machine.row_seen(&asked_row("me", "pod-b", ms(S)), "me", S, ms(S)));
    machine.settle(tickets[0], false).unwrap();
    assert!(matches!(
        next(&mut machine, S),
        ReadStep::Finish(Stop::Ended)
    ));
}

#[path = "exactly_once.rs"]
mod exactly_once;
#[path = "fan_out.rs"]
mod fan_out;
#[path = "pushed.rs"]
mod pushed;

/// A shard that hands out nothing while records wait (here: a window of one, full of deliveries
/// never settled, the shard behind its newest record) stalls once the bound passed, says so
/// once, and is over when it hands a record out again. A shard at the tip with nothing to hand
/// out never stalls.
#[test]
fn a_shard_that_hands_out_nothing_while_records_wait_stalls_then_moves_again() {
    let bound = 2 * S;
    let mut machine = taken_with(1);
    read(
        &mut machine,
        Duration::ZERO,
        &["1", "2"],
        Some("it-1"),
        5_000,
    );
    let held = hand_out(&mut machine, Duration::ZERO);
    assert_eq!(held.len(), 2);
    assert!(machine.is_window_full(), "it reads no further");
    assert_eq!(
        machine.stall_check(S, bound),
        None,
        "quiet, but not for long"
    );
    let Some(Stall::Began { quiet, behind_ms }) = machine.stall_check(bound, bound) else {
        panic!("stalled");
    };
    assert_eq!((quiet, behind_ms), (bound, Some(5_000)));
    assert_eq!(machine.stall_check(3 * S, bound), None, "said once");
    assert_eq!(machine.stall_check(3 * S, Duration::ZERO), None, "off");
    for ticket in held {
        machine.settle(ticket, false).unwrap();
    }
    read(&mut machine, 4 * S, &["3"], Some("it-2"), 0);
    assert_eq!(hand_out(&mut machine, 4 * S).len(), 1);
    assert_eq!(machine.stall_check(4 * S, bound), Some(Stall::Ended));

    let mut idle = taken();
    read(&mut idle, Duration::ZERO, &[], Some("it-1"), 0);
    assert_eq!(idle.stall_check(Duration::ZERO, bound), None);
    assert_eq!(
        idle.stall_check(60 * S, bound),
        None,
        "nothing waits at the tip"
    );
    // Behind the tip by its last read, and nothing handed out: a reader that cannot read on.
    let mut behind = taken();
    read(&mut behind, Duration::ZERO, &[], Some("it-1"), 5_000);
    assert_eq!(behind.stall_check(Duration::ZERO, bound), None);
    assert!(matches!(
        behind.stall_check(bound, bound),
        Some(Stall::Began {
            behind_ms: Some(5_000),
            ..
        })
    ));
}

/// A shard whose window is full of deliveries its handlers never settle reads no further, so
/// records written to it meanwhile go unseen even when its last read was at the tip: it stalls
/// once the bound passed (the handler's own stall), and is over once it hands a record out again.
#[test]
fn a_full_window_after_a_read_at_the_tip_stalls_once_the_bound_passed() {
    let bound = 2 * S;
    let mut machine = taken_with(1);
    read(&mut machine, Duration::ZERO, &["1", "2"], Some("it-1"), 0);
    let held = hand_out(&mut machine, Duration::ZERO);
    assert!(machine.is_window_full(), "it reads no further");
    assert_eq!(machine.stall_check(S, bound), None, "not for long yet");
    assert_eq!(
        machine.stall_check(bound, bound),
        Some(Stall::Began {
            quiet: bound,
            behind_ms: None
        }),
        "no handler settles, and nothing more is read"
    );
    for ticket in held {
        machine.settle(ticket, false).unwrap();
    }
    read(&mut machine, 3 * S, &["3"], Some("it-2"), 0);
    assert_eq!(hand_out(&mut machine, 3 * S).len(), 1);
    assert_eq!(machine.stall_check(3 * S, bound), Some(Stall::Ended));
}

#[test]
fn a_read_keeps_its_records_in_the_vec_they_came_in_and_hands_back_the_one_emptied_before() {
    let mut machine = taken();
    assert_eq!(machine.spare_records().capacity(), 0, "nothing read yet");
    read(
        &mut machine,
        Duration::ZERO,
        &["1", "2", "3"],
        Some("it-1"),
        0,
    );
    assert_eq!(
        machine.spare_records().capacity(),
        0,
        "the records stay in the Vec they came in (not copied out of it), and the batch had \
         no buffer to hand back"
    );
    assert_eq!(hand_out(&mut machine, Duration::ZERO).len(), 3);
    read(&mut machine, S, &["4"], Some("it-2"), 0);
    let spare = machine.spare_records();
    assert!(
        spare.is_empty() && spare.capacity() >= 3,
        "the first read's Vec, emptied, for the next read to fill: {spare:?}"
    );
    assert_eq!(machine.spare_records().capacity(), 0, "handed back once");
    // The records themselves are queued, not lost with a Vec.
    assert_eq!(hand_out(&mut machine, S).len(), 1);
}

#[test]
fn a_delivery_whose_lease_ran_out_in_the_channel_passes_the_pull_and_is_withheld_at_its_handler() {
    let mut machine = taken();
    read(&mut machine, Duration::ZERO, &["1"], Some("it-1"), 0);
    let ticket = hand_out(&mut machine, Duration::ZERO)[0];
    let late = LeaseTimings::default().lease() * 2;
    // The pull reads no clock: the shard still holds, and no seek moved it.
    assert_eq!(machine.queued_standing(ticket), Standing::Current);
    // Its handler's start reads both, and stops the shard.
    assert_eq!(machine.standing(ticket, late, ms(late)), Standing::RanOut);
    assert!(machine.is_lost());
    assert_eq!(
        machine.queued_standing(ticket),
        Standing::Stopped,
        "the next pull of the shard's deliveries finds it stopped"
    );
}

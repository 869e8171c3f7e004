//! The pushed pace (a Kinesis that tells its readers of writes, in process): no call gap, a tip
//! that waits for news rather than for time, and the queries a reader in process answers its
//! test harness with (`is_quiet`, `is_waiting`).

use super::*;
use crate::shard::pace::Pace;

const ZERO: Duration = Duration::ZERO;
/// Longer than the poll interval, inside the lease the machine was given.
const LATER: Duration = Duration::from_secs(5);

fn pushed() -> ShardMachine<Duration, Rec> {
    ShardMachine::new(
        ShardLease::taken(LeaseTimings::default(), ZERO, ms(ZERO)),
        ReadSettings {
            pace: Pace::pushed(),
            ..settings(1000)
        },
        ShardIterator::service("it-0"),
        recorded(),
    )
}

#[test]
fn at_the_tip_a_pushed_reader_waits_for_news_and_then_reads_at_once() {
    let mut machine = pushed();
    read(&mut machine, ZERO, &["1"], Some("it-1"), 0);
    assert_eq!(hand_out(&mut machine, ZERO).len(), 1);
    for now in [ZERO, POLL, LATER] {
        let step = next(&mut machine, now);
        assert!(
            matches!(step, ReadStep::Wait(None)),
            "no call at {now:?} without news: {step:?}"
        );
    }
    machine.news();
    // No call gap: the call goes out the moment the news came, whenever the last one went.
    read(&mut machine, LATER, &["2"], Some("it-2"), 0);
    assert_eq!(hand_out(&mut machine, LATER).len(), 1);
    assert!(matches!(next(&mut machine, LATER), ReadStep::Wait(None)));
}

#[test]
fn news_while_a_call_is_out_leaves_no_wait_for_the_next_news() {
    let mut machine = pushed();
    read(&mut machine, ZERO, &["1"], Some("it-1"), 0);
    hand_out(&mut machine, ZERO);
    machine.news();
    let step = next(&mut machine, ZERO);
    assert!(
        matches!(step, ReadStep::Call(Call::GetRecords(_))),
        "{step:?}"
    );
    // A write lands while the call is out, and the call misses it: the answer at the tip
    // waits again, so the news of that write must come after the answer (the reader's wake
    // keeps a permit for it).
    machine.news();
    machine.read_answered(
        ZERO,
        Fetch::Records {
            records: Vec::new(),
            next: Some(ShardIterator::service("it-2")),
            millis_behind: Some(0),
        },
        0,
    );
    assert!(matches!(next(&mut machine, ZERO), ReadStep::Wait(None)));
    machine.news();
    assert!(matches!(
        next(&mut machine, ZERO),
        ReadStep::Call(Call::GetRecords(_))
    ));
}

#[test]
fn a_pushed_reader_behind_the_tip_calls_again_with_no_gap() {
    let mut machine = pushed();
    let full: Vec<String> = (1..=10).map(|n| n.to_string()).collect();
    let full: Vec<&str> = full.iter().map(String::as_str).collect();
    read(&mut machine, ZERO, &full, Some("it-1"), 0);
    for _ in 0..10 {
        assert!(matches!(next(&mut machine, ZERO), ReadStep::Deliver(..)));
    }
    assert!(!machine.is_quiet(ZERO), "a full batch: more may wait");
    let step = next(&mut machine, ZERO);
    assert!(
        matches!(step, ReadStep::Call(Call::GetRecords(_))),
        "the next call at once: {step:?}"
    );
}

#[test]
fn the_service_pace_at_the_tip_waits_its_poll_interval_whatever_the_news() {
    let mut machine = taken();
    read(&mut machine, ZERO, &["1"], Some("it-1"), 0);
    hand_out(&mut machine, ZERO);
    machine.news();
    assert!(matches!(next(&mut machine, ZERO), ReadStep::Wait(Some(at)) if at == POLL));
    assert!(!machine.is_quiet(ZERO), "a timed wait is not quiet");
}

#[test]
fn a_shard_is_quiet_only_at_the_tip_with_nothing_to_do() {
    let mut machine = pushed();
    assert!(!machine.is_quiet(ZERO), "the first call is still to go out");
    let step = next(&mut machine, ZERO);
    assert!(
        matches!(step, ReadStep::Call(Call::GetRecords(_))),
        "{step:?}"
    );
    assert!(!machine.is_quiet(ZERO), "a call is out");
    machine.read_answered(
        ZERO,
        Fetch::Records {
            records: records(&["1", "2"]),
            next: Some(ShardIterator::service("it-1")),
            millis_behind: Some(0),
        },
        0,
    );
    assert!(!machine.is_quiet(ZERO), "records wait to be handed out");
    let tickets = hand_out(&mut machine, ZERO);
    assert!(machine.is_quiet(ZERO), "at the tip, waiting for news");
    // A seek to apply is work.
    assert!(machine.seek(
        ShardIterator::service("at-1"),
        ShardStart::At(KinesisPosition::TrimHorizon),
        sought()
    ));
    assert!(!machine.is_quiet(ZERO));
    let _ = tickets;
}

#[test]
fn a_handed_back_record_waits_and_is_due_by_the_machines_clock() {
    let mut machine = pushed();
    read(&mut machine, ZERO, &["1"], Some("it-1"), 0);
    let ReadStep::Deliver(record, ticket) = next(&mut machine, ZERO) else {
        panic!("a delivery");
    };
    assert!(!machine.is_waiting(ticket, 5 * S));
    let kept = machine.hand_back(ZERO, record, ticket, 1, 5 * S, false);
    assert_eq!(kept, HandedBack::Kept);
    assert!(machine.is_waiting(ticket, 5 * S));
    assert!(!machine.is_waiting(ticket, 6 * S), "not for another moment");
    assert!(matches!(next(&mut machine, ZERO), ReadStep::Wait(None)));
    assert!(machine.is_quiet(4 * S), "not due yet");
    assert!(!machine.is_quiet(5 * S), "due");
    let Redeliver::Deliver(again) = machine.next_redelivery(5 * S, ms(5 * S)) else {
        panic!("due at 5 s");
    };
    assert_eq!(again.ticket, ticket);
    assert!(!machine.is_waiting(ticket, 5 * S), "delivered again");
    assert!(machine.is_quiet(5 * S));
}

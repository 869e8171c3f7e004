//! Enhanced fan-out on the shard machine: a subscription, its events (read only with room in
//! the window), its renewal from where it got to, failures and refusals backed off, seeks, and
//! the end of a shard from child shards or, where no event names them, confirmed by polling.

use super::*;
use crate::kinesis::iterator::ShardIterator;
use crate::shard::pace::SUBSCRIBE_GAP;

const ZERO: Duration = Duration::ZERO;

fn fan_out_taken(window: usize, resume: ShardStart) -> ShardMachine<Duration, Rec> {
    ShardMachine::new(
        ShardLease::taken(LeaseTimings::default(), ZERO, ms(ZERO)),
        ReadSettings {
            fan_out: true,
            ..settings(window)
        },
        ShardIterator::service("it-0"),
        resume,
    )
}

fn call(machine: &mut ShardMachine<Duration, Rec>, now: Duration) -> Call {
    match next(machine, now) {
        ReadStep::Call(call) => call,
        other => panic!("a call at {now:?}, not {other:?}"),
    }
}

/// The first call at or after `now`, past the waits before it: when, and what.
fn first_call(machine: &mut ShardMachine<Duration, Rec>, mut now: Duration) -> (Duration, Call) {
    loop {
        match next(machine, now) {
            ReadStep::Call(call) => return (now, call),
            ReadStep::Wait(Some(at)) if at > now => now = at,
            other => panic!("a call or a timed wait at {now:?}, not {other:?}"),
        }
    }
}

/// Expects a subscription at `start`, and opens it.
fn subscribed(machine: &mut ShardMachine<Duration, Rec>, now: Duration, start: ShardStart) {
    assert_eq!(call(machine, now), Call::Subscribe(start));
    machine.read_answered(now, Fetch::Subscribed, 0);
}

/// Answers the event call in flight with `sequences`, then hands them out: the tickets, and the
/// step after them.
fn event(
    machine: &mut ShardMachine<Duration, Rec>,
    now: Duration,
    sequences: &[&str],
    continuation: Option<&str>,
    ended: bool,
) -> (Vec<Ticket>, ReadStep<Rec, Duration>) {
    machine.read_answered(
        now,
        Fetch::Event {
            records: records(sequences),
            continuation: continuation.map(str::to_owned),
            millis_behind: Some(0),
            ended,
        },
        0,
    );
    let mut tickets = Vec::new();
    loop {
        match next(machine, now) {
            ReadStep::Deliver(_, ticket) => tickets.push(ticket),
            step => return (tickets, step),
        }
    }
}

fn is_next_event(step: &ReadStep<Rec, Duration>) -> bool {
    matches!(step, ReadStep::Call(Call::NextEvent))
}

#[test]
fn a_subscription_that_ends_is_renewed_after_its_last_event_with_no_gap_and_no_duplicate() {
    let mut machine = fan_out_taken(1000, recorded());
    subscribed(&mut machine, ZERO, recorded());
    assert_eq!(call(&mut machine, ZERO), Call::NextEvent);
    let (tickets, step) = event(&mut machine, ZERO, &["1", "2"], Some("2"), false);
    assert_eq!(tickets.len(), 2);
    assert!(is_next_event(&step), "{step:?}");
    // Nothing new: the continuation moves on past records of other consumers' interest.
    let (tickets, step) = event(&mut machine, S, &[], Some("7"), false);
    assert!(tickets.is_empty() && is_next_event(&step), "{step:?}");
    machine.read_answered(S * 3, Fetch::SubscriptionEnded, 0);
    subscribed(&mut machine, S * 3, ShardStart::After(SharedStr::from("7")));
    // A record handed out after the continuation counts: it lies further on.
    assert_eq!(call(&mut machine, S * 3), Call::NextEvent);
    let (_, step) = event(&mut machine, S * 3, &["9"], None, false);
    assert!(is_next_event(&step), "{step:?}");
    machine.read_answered(S * 4, Fetch::SubscriptionEnded, 0);
    assert_eq!(
        call(&mut machine, S * 5),
        Call::Subscribe(ShardStart::After(SharedStr::from("9")))
    );
}

#[test]
fn failed_and_refused_subscriptions_back_off_and_stay_a_second_apart() {
    let mut machine = fan_out_taken(1000, recorded());
    assert_eq!(call(&mut machine, ZERO), Call::Subscribe(recorded()));
    // Refused (ResourceInUseException, reported by the driver as failed).
    machine.read_answered(ZERO, Fetch::Failed, 0);
    let ReadStep::Wait(Some(backoff)) = next(&mut machine, ZERO) else {
        panic!("a backoff")
    };
    assert_eq!(backoff, MIN_CALL_GAP, "the least backoff, with this coin");
    let step = next(&mut machine, backoff);
    assert!(
        matches!(step, ReadStep::Wait(Some(at)) if at == SUBSCRIBE_GAP),
        "the service's limit of one a second: {step:?}"
    );
    subscribed(&mut machine, SUBSCRIBE_GAP, recorded());
    assert_eq!(call(&mut machine, SUBSCRIBE_GAP), Call::NextEvent);
    // The open subscription fails: subscribed again after a backoff, where it got to.
    let (_, step) = event(&mut machine, S * 2, &["3"], Some("3"), false);
    assert!(is_next_event(&step));
    machine.read_answered(S * 2, Fetch::Failed, u64::MAX);
    let ReadStep::Wait(Some(at)) = next(&mut machine, S * 2) else {
        panic!("a backoff")
    };
    assert!(at > S * 2 && at <= S * 2 + MAX_BACKOFF, "{at:?}");
    assert_eq!(
        call(&mut machine, at),
        Call::Subscribe(ShardStart::After(SharedStr::from("3")))
    );
}

#[test]
fn an_event_is_read_only_with_room_in_the_window() {
    let mut machine = fan_out_taken(1, recorded());
    subscribed(&mut machine, ZERO, recorded());
    assert_eq!(call(&mut machine, ZERO), Call::NextEvent);
    let (tickets, step) = event(&mut machine, ZERO, &["1"], Some("1"), false);
    assert!(
        matches!(step, ReadStep::Wait(None)),
        "the window is full: {step:?}"
    );
    assert!(machine.settle(tickets[0], false).unwrap().wake_reader);
    assert_eq!(call(&mut machine, ZERO), Call::NextEvent);
}

#[test]
fn an_event_naming_child_shards_ends_the_shard() {
    let mut machine = fan_out_taken(1000, recorded());
    subscribed(&mut machine, ZERO, recorded());
    assert_eq!(call(&mut machine, ZERO), Call::NextEvent);
    let (tickets, step) = event(&mut machine, ZERO, &["1"], None, true);
    assert!(matches!(step, ReadStep::Wait(None)), "draining: {step:?}");
    machine.settle(tickets[0], false).unwrap();
    assert!(matches!(
        next(&mut machine, S),
        ReadStep::Finish(Stop::Ended)
    ));
}

#[test]
fn a_closed_shard_without_child_shards_has_its_end_confirmed_by_polling() {
    let mut machine = fan_out_taken(1000, recorded());
    subscribed(&mut machine, ZERO, recorded());
    assert_eq!(call(&mut machine, ZERO), Call::NextEvent);
    let (tickets, step) = event(&mut machine, ZERO, &["1"], Some("1"), false);
    assert!(is_next_event(&step));
    // An empty event of an open shard is the tip; the listing then shows it closed.
    let (_, step) = event(&mut machine, S, &[], Some("1"), false);
    assert!(is_next_event(&step), "an open shard reads on: {step:?}");
    machine.shard_closed();
    let (_, step) = event(&mut machine, S * 2, &[], Some("1"), false);
    assert!(
        matches!(&step, ReadStep::Call(Call::GetIterator(ShardStart::After(after))) if after.as_ref() == "1"),
        "{step:?}"
    );
    machine.read_answered(S * 2, Fetch::Iterator(ShardIterator::service("it-9")), 0);
    read(&mut machine, S * 2, &[], None, 0);
    assert!(matches!(next(&mut machine, S * 2), ReadStep::Wait(None)));
    machine.settle(tickets[0], false).unwrap();
    assert!(matches!(
        next(&mut machine, S * 3),
        ReadStep::Finish(Stop::Ended)
    ));
}

#[test]
fn a_seek_subscribes_again_at_its_position() {
    let mut machine = fan_out_taken(1000, recorded());
    subscribed(&mut machine, ZERO, recorded());
    assert_eq!(call(&mut machine, ZERO), Call::NextEvent);
    let (_, step) = event(&mut machine, ZERO, &["1", "2"], Some("2"), false);
    assert!(is_next_event(&step));
    let target = ShardStart::At(KinesisPosition::TrimHorizon);
    assert!(machine.seek(
        ShardIterator::service("it-seek"),
        target.clone(),
        SharedStr::from("TRIM_HORIZON")
    ));
    // The event in flight was for the old position: dropped.
    machine.read_answered(
        S,
        Fetch::Event {
            records: records(&["3"]),
            continuation: Some("3".to_owned()),
            millis_behind: Some(0),
            ended: false,
        },
        0,
    );
    assert_eq!(call(&mut machine, S * 2), Call::Subscribe(target));
}

#[test]
fn a_subscription_that_ends_before_its_first_event_is_backed_off() {
    let mut machine = fan_out_taken(1000, recorded());
    subscribed(&mut machine, ZERO, recorded());
    assert_eq!(call(&mut machine, ZERO), Call::NextEvent);
    machine.read_answered(S * 2, Fetch::SubscriptionEnded, u64::MAX);
    let (at, again) = first_call(&mut machine, S * 2);
    assert!(
        at > S * 2 + MIN_CALL_GAP,
        "a backoff, not a subscription at once: {at:?}"
    );
    assert_eq!(again, Call::Subscribe(recorded()));
}

#[test]
fn a_closed_shard_whose_subscription_fails_is_read_to_its_end_by_polling() {
    let mut machine = fan_out_taken(1000, recorded());
    machine.shard_closed();
    subscribed(&mut machine, ZERO, recorded());
    assert_eq!(call(&mut machine, ZERO), Call::NextEvent);
    let (tickets, step) = event(&mut machine, ZERO, &["1"], Some("1"), false);
    assert!(is_next_event(&step));
    machine.read_answered(ZERO, Fetch::Failed, 0);
    let (at, polled) = first_call(&mut machine, ZERO);
    assert_eq!(
        polled,
        Call::GetIterator(ShardStart::After(SharedStr::from("1")))
    );
    machine.read_answered(at, Fetch::Iterator(ShardIterator::service("it-9")), 0);
    read(&mut machine, at, &[], None, 0);
    machine.settle(tickets[0], false).unwrap();
    assert!(matches!(
        next(&mut machine, at),
        ReadStep::Finish(Stop::Ended)
    ));
}

#[test]
fn an_event_waited_for_is_unwanted_once_a_seek_arrives() {
    let mut machine = fan_out_taken(1000, recorded());
    subscribed(&mut machine, ZERO, recorded());
    assert_eq!(call(&mut machine, ZERO), Call::NextEvent);
    assert!(!machine.event_unwanted(), "a reader waits for its events");
    assert!(machine.seek(
        ShardIterator::service("it-seek"),
        ShardStart::At(KinesisPosition::TrimHorizon),
        SharedStr::from("TRIM_HORIZON")
    ));
    assert!(machine.event_unwanted());
    // The driver drops the subscription and says so; the seek's subscription follows.
    machine.read_answered(S, Fetch::SubscriptionEnded, 0);
    assert_eq!(
        call(&mut machine, S),
        Call::Subscribe(ShardStart::At(KinesisPosition::TrimHorizon))
    );
}

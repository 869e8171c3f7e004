//! A take's calls on a virtual clock: what it asks after each answer, what it hands back and
//! what it reports.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use super::*;
use crate::coordinator::plan::Rows;
use crate::kinesis::api::ShardInfo;
use crate::lease::LeaseState;
use crate::{KinesisPosition, LeaseTimings, SHARD_END, SHARD_SKIPPED};

const NOW_MS: u64 = 1_700_000_000_000;
const NOW: Duration = Duration::from_secs(100);

fn coordinator() -> Coordinator<Duration> {
    Coordinator::new(LeaseTimings::default(), KinesisPosition::Latest).without_waiting_for_peers()
}

fn take(purpose: TakeFor) -> Take<Duration> {
    Take::new(Arc::from("shardId-0"), purpose, None, NOW, NOW_MS)
}

fn reading() -> TakeFor {
    TakeFor::Reading(KinesisPosition::Latest)
}

/// Whether a round that finds `shardId-0`'s row free would read the row and take it now.
fn takeable_now(coordinator: &mut Coordinator<Duration>, now: Duration) -> bool {
    let listing = [ShardInfo {
        id: Arc::from("shardId-0"),
        parents: Vec::new(),
        closed: false,
    }];
    let rows = HashMap::from([(Arc::from("shardId-0"), None)]);
    !coordinator.wanted(&listing, &HashSet::new()).is_empty()
        && !coordinator
            .takeable(&listing, &rows, |_| false, "pod-a", now, NOW_MS)
            .is_empty()
}

fn recorded(take: &Take<Duration>) -> Arc<str> {
    match take.next() {
        TakeStep::Call(TakeCall::Acquire { start, over: None }) => start,
        other => panic!("a take begins with its acquire, not {other:?}"),
    }
}

#[test]
fn a_won_take_records_its_start_and_reads_from_the_iterator() {
    let mut coordinator = coordinator();
    let mut take = take(reading());
    let start = recorded(&take);
    assert_eq!(*start, *reading().recorded(NOW_MS));
    let told = take.acquired(&mut coordinator, Ok(Some(&start)), NOW, 0);
    assert_eq!(told, Told::Nothing);
    assert_eq!(
        take.next(),
        TakeStep::Call(TakeCall::Iterator {
            start: ShardStart::At(KinesisPosition::Latest)
        }),
        "its own recorded start: the first iterator at the tip itself"
    );
    assert_eq!(
        take.positioned(&mut coordinator, Ok(()), NOW, 0),
        Told::Nothing
    );
    assert_eq!(
        take.next(),
        TakeStep::Read {
            start: ShardStart::At(KinesisPosition::Latest),
            resume: ShardStart::from_checkpoint("shardId-0", &start),
            sent: NOW,
            sent_ms: NOW_MS,
        },
        "the lease counts from the acquire's send"
    );
}

#[test]
fn a_refused_acquire_hands_nothing_back() {
    for (refused, told) in [
        (AcquireRefused::Fenced, Told::Nothing),
        (AcquireRefused::Failed, Told::Report),
    ] {
        let mut coordinator = coordinator();
        let mut take = take(reading());
        assert_eq!(take.acquired(&mut coordinator, Err(refused), NOW, 0), told);
        assert_eq!(
            take.next(),
            TakeStep::Over {
                wake_coordinator: false
            },
            "{refused:?}: no release (it could land after a later take by this owner)"
        );
        assert!(
            takeable_now(&mut coordinator, NOW),
            "{refused:?}: the next round may try again"
        );
    }
    let mut coordinator = coordinator();
    let mut take = take(reading());
    let Told::Backoff(backoff) =
        take.acquired(&mut coordinator, Err(AcquireRefused::Unusable), NOW, 0)
    else {
        panic!("an unusable row backs off");
    };
    assert_eq!(backoff.failures, 1);
    assert!(backoff.until > NOW);
    assert_eq!(
        take.next(),
        TakeStep::Over {
            wake_coordinator: false
        }
    );
    assert!(!takeable_now(&mut coordinator, NOW));
    assert!(takeable_now(&mut coordinator, backoff.until));
}

#[test]
fn a_refused_iterator_hands_the_lease_back_and_backs_off_longer_each_time() {
    let mut coordinator = coordinator();
    let mut until = NOW;
    for failures in 1..=3 {
        let mut take = Take::new(Arc::from("shardId-0"), reading(), None, until, NOW_MS);
        let start = recorded(&take);
        take.acquired(&mut coordinator, Ok(Some(&start)), until, 0);
        let Told::Backoff(backoff) =
            take.positioned(&mut coordinator, Err(IteratorRefused::Failed), until, 0)
        else {
            panic!("a refused iterator backs off");
        };
        assert_eq!(backoff.failures, failures);
        assert_eq!(take.next(), TakeStep::Call(TakeCall::Release));
        take.released();
        assert_eq!(
            take.next(),
            TakeStep::Over {
                wake_coordinator: false
            }
        );
        assert!(!takeable_now(&mut coordinator, until));
        until = backoff.until;
    }
    // A take that reads ends the backoff.
    let mut take = Take::new(Arc::from("shardId-0"), reading(), None, until, NOW_MS);
    let start = recorded(&take);
    take.acquired(&mut coordinator, Ok(Some(&start)), until, 0);
    take.positioned(&mut coordinator, Ok(()), until, 0);
    assert!(takeable_now(&mut coordinator, until));
}

#[test]
fn a_shard_gone_from_the_stream_is_never_taken_again() {
    let mut coordinator = coordinator();
    let mut take = take(reading());
    let start = recorded(&take);
    take.acquired(&mut coordinator, Ok(Some(&start)), NOW, 0);
    let Told::Backoff(backoff) =
        take.positioned(&mut coordinator, Err(IteratorRefused::Gone), NOW, 0)
    else {
        panic!("a shard not found backs off too");
    };
    assert_eq!(take.next(), TakeStep::Call(TakeCall::Release));
    assert!(
        !takeable_now(&mut coordinator, backoff.until + Duration::from_secs(3600)),
        "gone while listed: not even after the backoff"
    );
}

#[test]
fn a_row_read_to_its_end_or_marked_is_handed_back_and_a_mark_wakes_the_coordinator() {
    for (checkpoint, wake_coordinator) in [(SHARD_END, false), (SHARD_SKIPPED, true)] {
        let mut coordinator = coordinator();
        let mut take = take(reading());
        take.acquired(&mut coordinator, Ok(Some(checkpoint)), NOW, 0);
        assert_eq!(
            take.next(),
            TakeStep::Call(TakeCall::Release),
            "{checkpoint}"
        );
        take.released();
        assert_eq!(take.next(), TakeStep::Over { wake_coordinator });
        assert!(!takeable_now(&mut coordinator, NOW));
    }
    // A marking take on a store that records no start: handed back, unmarked, for later.
    let mut coordinator = coordinator();
    let mut take = take(TakeFor::Skipping);
    assert_eq!(*recorded(&take), *SHARD_SKIPPED);
    take.acquired(&mut coordinator, Ok(None), NOW, 0);
    assert_eq!(take.next(), TakeStep::Call(TakeCall::Release));
    take.released();
    assert_eq!(
        take.next(),
        TakeStep::Over {
            wake_coordinator: false
        }
    );
}

#[test]
fn an_answer_to_a_call_not_made_changes_nothing() {
    let mut coordinator = coordinator();
    let mut take = take(reading());
    assert_eq!(
        take.positioned(&mut coordinator, Err(IteratorRefused::Gone), NOW, 0),
        Told::Nothing
    );
    take.released();
    assert!(matches!(
        take.next(),
        TakeStep::Call(TakeCall::Acquire { .. })
    ));
    let start = recorded(&take);
    take.acquired(&mut coordinator, Ok(Some(&start)), NOW, 0);
    assert_eq!(
        take.acquired(&mut coordinator, Err(AcquireRefused::Unusable), NOW, 0),
        Told::Nothing,
        "a second acquire answer"
    );
    assert!(matches!(
        take.next(),
        TakeStep::Call(TakeCall::Iterator { .. })
    ));
    assert!(takeable_now(&mut coordinator, NOW));
}

#[test]
fn a_throttled_acquire_hands_nothing_back_and_pauses_every_take_until_a_backoff_ends() {
    let mut coordinator = coordinator();
    assert!(coordinator.take_allowance(NOW, NOW_MS, 1) > 0);
    let mut take = take(reading());
    let told = take.acquired(&mut coordinator, Err(AcquireRefused::Throttled), NOW, 0);
    let Told::Throttled(until) = told else {
        panic!("a throttled take is told as such: {told:?}");
    };
    assert_eq!(
        take.next(),
        TakeStep::Over {
            wake_coordinator: false
        }
    );
    // Half the first backoff's ceiling (1 s) with this coin.
    assert_eq!(until, NOW + Duration::from_millis(500));
    // Another take sent before the pause, throttled during it: no second pause (nor WARN).
    assert_eq!(
        take_at(NOW).acquired(
            &mut coordinator,
            Err(AcquireRefused::Throttled),
            NOW + Duration::from_millis(10),
            u64::MAX
        ),
        Told::Nothing
    );
    assert_eq!(
        coordinator.take_allowance(until - Duration::from_millis(1), NOW_MS, 1),
        0
    );
    assert_eq!(
        coordinator.next_take_at(NOW, NOW_MS, 1),
        until + Duration::from_millis(2),
        "one take's refill after the pause (500 a second, alone)"
    );
    // The shard is not left alone for a backoff of its own: the next round tries it.
    assert!(takeable_now(&mut coordinator, until));
    // Throttled again at once: the pause doubles; a granted take ends the row.
    let mut again = take_at(until);
    let Told::Throttled(longer) =
        again.acquired(&mut coordinator, Err(AcquireRefused::Throttled), until, 0)
    else {
        panic!("throttled");
    };
    assert_eq!(longer, until + Duration::from_secs(1));
    let mut granted = take_at(longer);
    granted.acquired(&mut coordinator, Ok(Some("7")), longer, 0);
    let mut after = take_at(longer);
    let Told::Throttled(reset) =
        after.acquired(&mut coordinator, Err(AcquireRefused::Throttled), longer, 0)
    else {
        panic!("throttled");
    };
    assert_eq!(reset, longer + Duration::from_millis(500), "the row ended");
}

fn take_at(now: Duration) -> Take<Duration> {
    Take::new(Arc::from("shardId-0"), reading(), None, now, NOW_MS)
}

fn over(holder: &str, own: bool) -> Over {
    Over {
        holder: Arc::from(holder),
        counter: 7,
        own,
    }
}

/// A take-over of `shardId-0` from `holder` (`own`: this instance) at counter 7.
fn taking_over(holder: &str, own: bool) -> Take<Duration> {
    Take::new(
        Arc::from("shardId-0"),
        reading(),
        Some(over(holder, own)),
        NOW,
        NOW_MS,
    )
}

fn notice_with_beat(holder: &str, until_ms: u64) -> Notice {
    let mut notice = Notice::default();
    notice.beats.insert(holder.to_owned(), until_ms);
    notice
}

#[test]
fn a_take_over_reads_the_notice_and_takes_only_if_the_holder_lapsed_when_it_was_sent() {
    let mut coordinator = coordinator();
    let mut take = taking_over("pod-b", false);
    assert_eq!(take.next(), TakeStep::Call(TakeCall::ReadNotice));
    // Pod B's beat ran until NOW_MS - 1,001: lapsed beyond the skew when the read was sent.
    take.judged(
        &mut coordinator,
        Some(&notice_with_beat("pod-b", NOW_MS - 1_001)),
        NOW_MS,
    );
    let TakeStep::Call(TakeCall::Acquire { over, .. }) = take.next() else {
        panic!("the take-over goes on, not {:?}", take.next());
    };
    assert_eq!(
        over,
        Some(self::over("pod-b", false)),
        "conditioned on the row as read"
    );
}

#[test]
fn a_take_over_of_a_holder_alive_when_the_notice_was_read_is_over() {
    // A notice of another layout: that version may keep its beats where this one does not
    // look, so a beat missing here says nothing of the holder.
    let mut other_layout = notice_with_beat("pod-c", NOW_MS);
    other_layout.layout = Some(2);
    for notice in [
        // Within the skew of the read's send.
        Some(notice_with_beat("pod-b", NOW_MS - 1_000)),
        // No answer: nothing is known of the holder.
        None,
        Some(other_layout),
    ] {
        let mut coordinator = coordinator();
        let mut take = taking_over("pod-b", false);
        take.judged(&mut coordinator, notice.as_ref(), NOW_MS);
        assert_eq!(
            take.next(),
            TakeStep::Over {
                wake_coordinator: false
            },
            "with {notice:?}"
        );
    }
}

#[test]
fn a_retake_of_ones_own_row_kept_by_beat_is_by_counter_without_a_notice() {
    let take = taking_over("pod-a", true);
    let TakeStep::Call(TakeCall::Acquire { over, .. }) = take.next() else {
        panic!("an own row is taken again at once, not {:?}", take.next());
    };
    assert_eq!(over, Some(self::over("pod-a", true)));
}

#[test]
fn a_take_is_a_take_over_when_the_row_as_last_read_is_kept_by_beat() {
    let mut coordinator = coordinator();
    let row = |owner: &str, expiry_ms: u64| LeaseState {
        owner: Some(owner.to_owned()),
        expiry_ms,
        counter: 7,
        ..LeaseState::default()
    };
    let kept = NOW_MS + crate::lease::millis(crate::lease::KEPT_BY_BEAT);
    let mut rows: Rows = HashMap::from([
        (Arc::from("kept-b"), Some(row("pod-b", kept))),
        (Arc::from("kept-a"), Some(row("pod-a", kept))),
        (Arc::from("renewed-b"), Some(row("pod-b", NOW_MS + 10_000))),
        (Arc::from("free"), None),
    ]);
    coordinator.round_rows(&[], &mut rows, NOW, NOW_MS);
    assert_eq!(
        coordinator.take_over_of("kept-b", "pod-a", NOW_MS),
        Some(over("pod-b", false))
    );
    assert_eq!(
        coordinator.take_over_of("kept-a", "pod-a", NOW_MS),
        Some(over("pod-a", true))
    );
    assert_eq!(coordinator.take_over_of("renewed-b", "pod-a", NOW_MS), None);
    assert_eq!(coordinator.take_over_of("free", "pod-a", NOW_MS), None);
    assert_eq!(coordinator.take_over_of("unknown", "pod-a", NOW_MS), None);
}

#[test]
fn a_take_over_found_alive_gives_the_coordinator_its_notice() {
    let mut coordinator = coordinator();
    let listing = [ShardInfo {
        id: Arc::from("shardId-0"),
        parents: Vec::new(),
        closed: false,
    }];
    let kept = NOW_MS + crate::lease::millis(crate::lease::KEPT_BY_BEAT);
    let mut rows: Rows = HashMap::from([(
        Arc::from("shardId-0"),
        Some(LeaseState {
            owner: Some("pod-b".to_owned()),
            expiry_ms: kept,
            counter: 7,
            checkpoint: Some("42".to_owned()),
            ..LeaseState::default()
        }),
    )]);
    coordinator.round_rows(&listing, &mut rows, NOW, NOW_MS);
    let nominated = |coordinator: &mut Coordinator<Duration>| {
        coordinator
            .shards_to_take(
                &listing,
                &rows,
                &HashSet::new(),
                |_| false,
                "pod-a",
                (NOW, NOW_MS),
                true,
            )
            .len()
    };
    // No notice read yet: pod B's row is nominated.
    assert_eq!(nominated(&mut coordinator), 1);
    let mut take = taking_over("pod-b", false);
    take.judged(
        &mut coordinator,
        Some(&notice_with_beat("pod-b", NOW_MS + 5_000)),
        NOW_MS,
    );
    // Found alive: the take is over, and the next plan judges by the notice it read, so it does
    // not nominate the live holder's row again (each nomination a notice read and, before, a
    // new round that dropped the paced takes behind it).
    assert_eq!(nominated(&mut coordinator), 0);
}

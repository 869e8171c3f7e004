//! The poll weighs the shards again only when its last answer may have changed: a beat lapsed,
//! a lease read ran out, this instance did something, the shards it reads changed, or a minute
//! passed.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use crate::coordinator::machine::Coordinator;
use crate::coordinator::plan::Rows;
use crate::kinesis::shards::ShardInfo;
use crate::lease::{LeaseState, Notice};
use crate::shard::Stop;
use crate::{KinesisPosition, LeaseTimings, SKEW_TOLERANCE};

const OWNER: &str = "pod-a";
const HOLDER: &str = "pod-b";
const START_MS: u64 = 1_700_000_000_000;

fn listing() -> Vec<ShardInfo> {
    (0..3)
        .map(|n| ShardInfo {
            id: Arc::from(format!("shardId-{n}")),
            parents: Vec::new(),
            closed: false,
        })
        .collect()
}

fn held(expiry_ms: u64) -> Option<LeaseState> {
    Some(LeaseState {
        owner: Some(HOLDER.to_owned()),
        expiry_ms,
        counter: 3,
        checkpoint: Some("42".to_owned()),
        ..LeaseState::default()
    })
}

fn notice(beat_until_ms: Option<u64>) -> Notice {
    Notice {
        counter: 5,
        beats: beat_until_ms
            .map(|until| (HOLDER.to_owned(), until))
            .into_iter()
            .collect(),
        ..Notice::default()
    }
}

/// A coordinator that read, at `START_MS`, every shard of [`listing`] held by pod-b until
/// `expiry_ms`, and has had the poll read those rows once.
fn watching(expiry_ms: u64) -> Coordinator<Duration> {
    let mut coordinator = Coordinator::new(LeaseTimings::default(), KinesisPosition::TrimHorizon);
    let listing = listing();
    let rows = || -> Rows {
        listing
            .iter()
            .map(|shard| (Arc::clone(&shard.id), held(expiry_ms)))
            .collect()
    };
    coordinator.round_rows(&listing, &mut rows(), Duration::ZERO, START_MS);
    let first = coordinator.noticed(
        &notice(Some(START_MS + 9_000)),
        &HashSet::new(),
        OWNER,
        Duration::ZERO,
        START_MS,
    );
    assert!(first.read_rows, "the first notice has the rows read");
    assert!(!coordinator.poll_finds_takeable(
        rows(),
        &HashSet::new(),
        OWNER,
        Duration::ZERO,
        START_MS
    ));
    coordinator
}

/// One poll `elapsed` after the start, with `notice` and `reading`: whether it reads the rows,
/// and whether it weighed the shards.
fn poll(
    coordinator: &mut Coordinator<Duration>,
    elapsed: Duration,
    notice: &Notice,
    reading: &HashSet<Arc<str>>,
) -> (bool, bool) {
    let skipped = coordinator.skipped_weighings();
    let now_ms = START_MS + crate::lease::millis(elapsed);
    let read_rows = coordinator
        .noticed(notice, reading, OWNER, elapsed, now_ms)
        .read_rows;
    (read_rows, coordinator.skipped_weighings() == skipped)
}

#[test]
fn while_a_live_beat_keeps_the_leases_the_poll_weighs_once_then_not_until_the_beat_lapses() {
    // The leases as read ran out long ago; only pod-b's beat keeps them.
    let mut coordinator = watching(START_MS + 7_000);
    let none = HashSet::new();
    let mut weighings = 0;
    let mut read_at = None;
    for second in 1..=60 {
        let elapsed = Duration::from_secs(second);
        // pod-b renews its beat as a live instance does until it crashed, its last beat running
        // until 30 s.
        let beat = START_MS + (second.min(25) + 5) * 1_000;
        let (read_rows, weighed) = poll(&mut coordinator, elapsed, &notice(Some(beat)), &none);
        weighings += usize::from(weighed);
        if read_rows {
            read_at = Some(second);
            break;
        }
    }
    // The beat ran until 30 s; past it and the skew tolerance, the first poll weighs and reads.
    let lapsed = 30 + SKEW_TOLERANCE.as_secs() + 1;
    assert_eq!(
        read_at,
        Some(lapsed),
        "the crashed holder's shards are found at once"
    );
    // The first since the read, one each time the answer is trusted no longer while nothing
    // moved (a minute), and the one that found it.
    let trusted = (LeaseTimings::default().listing_interval() * super::TRUSTED_LISTINGS).as_secs();
    assert!(
        weighings <= (lapsed / trusted + 2) as usize,
        "{weighings} weighings in {lapsed} polls"
    );
}

#[test]
fn a_lease_read_that_runs_out_is_weighed_again_at_its_expiry_and_not_before() {
    // pod-b keeps no beat: its leases hold until their expiry as read, 4 s from the start.
    let expiry_ms = START_MS + 4_000;
    let mut coordinator = watching(expiry_ms);
    let none = HashSet::new();
    let quiet = notice(None);
    let (read_rows, weighed) = poll(&mut coordinator, Duration::from_secs(1), &quiet, &none);
    assert!(
        !read_rows && weighed,
        "the first poll since the read weighs"
    );
    let expired = Duration::from_millis(4_000 + crate::lease::millis(SKEW_TOLERANCE) + 1);
    let just_before = expired - Duration::from_millis(1);
    assert_eq!(
        poll(&mut coordinator, just_before, &quiet, &none),
        (false, false),
        "the leases still run: no weighing"
    );
    assert_eq!(
        poll(&mut coordinator, expired, &quiet, &none),
        (true, true),
        "the leases ran out: weighed, and the rows are read"
    );
}

#[test]
fn what_this_instance_does_or_reads_has_the_next_poll_weigh_again() {
    let mut coordinator = watching(START_MS + 7_000);
    let live = notice(Some(START_MS + 100_000));
    let none = HashSet::new();
    let second = |n| Duration::from_secs(n);
    assert_eq!(
        poll(&mut coordinator, second(1), &live, &none),
        (false, true)
    );
    assert_eq!(
        poll(&mut coordinator, second(2), &live, &none),
        (false, false)
    );
    // A reader of this instance stopped: news.
    let shard: Arc<str> = Arc::from("shardId-0");
    coordinator.reader_stopped(&shard, Stop::Lost, second(2), 0);
    assert_eq!(
        poll(&mut coordinator, second(3), &live, &none),
        (false, true)
    );
    assert_eq!(
        poll(&mut coordinator, second(4), &live, &none),
        (false, false)
    );
    // The shards it reads changed.
    let reading: HashSet<Arc<str>> = [shard].into();
    assert_eq!(
        poll(&mut coordinator, second(5), &live, &reading),
        (false, true)
    );
    assert_eq!(
        poll(&mut coordinator, second(6), &live, &reading),
        (false, false)
    );
    // Another instance began to beat.
    let mut joined = live.clone();
    joined.beats.insert("pod-c".to_owned(), START_MS + 100_000);
    assert_eq!(
        poll(&mut coordinator, second(7), &joined, &reading),
        (false, true)
    );
    // A minute after the last weighing, with nothing moved, it weighs anyway.
    let interval = LeaseTimings::default().listing_interval() * super::TRUSTED_LISTINGS;
    let quiet_until = second(7) + interval - Duration::from_millis(1);
    assert_eq!(
        poll(&mut coordinator, quiet_until, &joined, &reading),
        (false, false)
    );
    assert_eq!(
        poll(&mut coordinator, second(7) + interval, &joined, &reading),
        (false, true)
    );
}

#[test]
fn a_steady_round_plans_once_and_again_when_its_answer_may_have_changed() {
    let mut coordinator = watching(START_MS + 7_000);
    let listing = listing();
    let none = HashSet::new();
    coordinator.read_all_rows(&listing, Duration::ZERO, START_MS, START_MS);
    let wanted = coordinator.poll_wanted(&none);
    let round = |coordinator: &mut Coordinator<Duration>, second: u64| {
        let skipped = coordinator.skipped_plans();
        let at = (Duration::from_secs(second), START_MS + second * 1_000);
        let passes = coordinator.passes_on_rows_read(&listing, &wanted, &none, OWNER, at);
        (passes, coordinator.skipped_plans() > skipped)
    };
    assert_eq!(
        round(&mut coordinator, 1),
        (true, false),
        "planned: nothing"
    );
    assert_eq!(round(&mut coordinator, 2), (true, true), "nothing moved");
    // The poll weighed (a minute passed for it), finding nothing: it looks for no handoffs, so
    // the next round plans again.
    let later = Duration::from_secs(2)
        + LeaseTimings::default().listing_interval() * super::TRUSTED_LISTINGS;
    let (read_rows, weighed) = poll(
        &mut coordinator,
        later,
        &notice(Some(START_MS + 100_000)),
        &none,
    );
    assert!(!read_rows && weighed);
    let again = later.as_secs() + 1;
    assert_eq!(round(&mut coordinator, again), (true, false));
    assert_eq!(round(&mut coordinator, again + 1), (true, true));
}

#[test]
fn the_moments_kept_are_those_at_which_the_rules_turn() {
    // pod-b's beat lapsed (at 9 s), and its lease as read ran out: the balance's grace after it
    // is the moment that counts (a review found it kept a millisecond late).
    let expiry_ms = START_MS + 20_000;
    let coordinator = watching(expiry_ms).with_balancing(true);
    let shard: Arc<str> = Arc::from("shardId-0");
    let rows: Rows = [(Arc::clone(&shard), held(expiry_ms))].into();
    let free_ms = expiry_ms + crate::lease::millis(SKEW_TOLERANCE);
    let grace = coordinator.free_grace();
    let now_ms = free_ms + 1;
    let moment = coordinator
        .rows_change_at(&rows, &HashSet::new(), OWNER, now_ms)
        .expect("the grace is still to come");
    let lapsed = |at_ms| super::super::lapsed_for(&rows, &shard, at_ms);
    assert!(lapsed(moment).is_some_and(|lapsed| lapsed >= grace));
    assert!(lapsed(moment - 1).is_some_and(|lapsed| lapsed < grace));
    // Before the expiry, the expiry is the moment: `is_expired_at` turns then.
    let before = coordinator
        .rows_change_at(&rows, &HashSet::new(), OWNER, START_MS + 15_000)
        .expect("the expiry is to come");
    assert!(rows[&shard].as_ref().unwrap().is_expired_at(before));
    assert!(!rows[&shard].as_ref().unwrap().is_expired_at(before - 1));
}

#[test]
fn a_wall_clock_stepped_back_past_the_weighing_has_the_poll_weigh_again() {
    let mut coordinator = watching(START_MS + 7_000);
    let live = notice(Some(START_MS + 100_000));
    let none = HashSet::new();
    assert_eq!(
        poll(&mut coordinator, Duration::from_secs(5), &live, &none),
        (false, true)
    );
    let skipped = coordinator.skipped_weighings();
    // A second later by the monotonic clock, two seconds earlier by the wall clock.
    coordinator.noticed(
        &live,
        &none,
        OWNER,
        Duration::from_secs(6),
        START_MS + 3_000,
    );
    assert_eq!(coordinator.skipped_weighings(), skipped, "weighed again");
}

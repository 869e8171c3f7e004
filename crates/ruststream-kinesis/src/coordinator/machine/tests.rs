//! The coordinator's decisions on a virtual clock: what a take's answer means, the take
//! backoff, a round's passes over marked parents, the handover poll, and what a listing forgets.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use super::*;

const OWNER: &str = "pod-a";
const NOW_MS: u64 = 1_700_000_000_000;

fn shard(id: &str, parents: &[&str], closed: bool) -> ShardInfo {
    ShardInfo {
        id: Arc::from(id),
        parents: parents.iter().map(|p| Arc::from(*p)).collect(),
        closed,
    }
}

fn coordinator(initial: KinesisPosition) -> Coordinator<Duration> {
    Coordinator::new(LeaseTimings::default(), initial)
}

/// The shards `coordinator` plans to take of `listing` by a round's first pass at `elapsed` past
/// `NOW_MS`, reading none.
fn plan_at(
    coordinator: &mut Coordinator<Duration>,
    listing: &[ShardInfo],
    rows: &Rows,
    elapsed: Duration,
) -> Vec<String> {
    let now_ms = NOW_MS + crate::lease::millis(elapsed);
    coordinator
        .shards_to_take(
            listing,
            rows,
            &HashSet::new(),
            |_| false,
            OWNER,
            (elapsed, now_ms),
            true,
        )
        .into_iter()
        .map(|(shard, _)| shard.id.to_string())
        .collect()
}

/// A row pod-b holds until `expiry_ms`, at counter 3, checkpointed at 42.
fn held_by_pod_b(expiry_ms: u64) -> Option<LeaseState> {
    Some(LeaseState {
        owner: Some("pod-b".to_owned()),
        expiry_ms,
        counter: 3,
        checkpoint: Some("42".to_owned()),
        behind_ms: None,
        handoff: None,
        commit_token: None,
    })
}

/// A notice at `counter` with this instance's beat ending at `mine` and pod-b's at `pod_b`.
fn beside_pod_b(counter: u64, mine: u64, pod_b: u64) -> Notice {
    Notice {
        counter,
        beats: [(OWNER.to_owned(), mine), ("pod-b".to_owned(), pod_b)].into(),
        ..Notice::default()
    }
}

fn no_rows(listing: &[ShardInfo]) -> Rows {
    listing.iter().map(|s| (Arc::clone(&s.id), None)).collect()
}

#[test]
fn a_take_answer_reads_from_its_checkpoint_or_the_start_it_recorded() {
    let mut coordinator = coordinator(KinesisPosition::Latest);
    let id: Arc<str> = Arc::from("shardId-0");
    let reading = TakeFor::Reading(KinesisPosition::Latest);
    let recorded = reading.recorded(NOW_MS);
    assert_eq!(
        coordinator.after_take(&id, Some(&recorded), &reading, &recorded),
        AfterTake::Read {
            start: ShardStart::At(KinesisPosition::Latest),
            resume: ShardStart::from_checkpoint(&id, &recorded),
        },
        "its own recorded start: the tip itself first, the recorded moment after"
    );
    let checkpoint = ShardStart::from_checkpoint(&id, "4711");
    assert_eq!(
        coordinator.after_take(&id, Some("4711"), &reading, &recorded),
        AfterTake::Read {
            start: checkpoint.clone(),
            resume: checkpoint,
        }
    );
    assert_eq!(
        coordinator.after_take(&id, Some(SHARD_END), &reading, &recorded),
        AfterTake::Finished
    );
    assert!(coordinator.is_finished(&id));
    let other: Arc<str> = Arc::from("shardId-1");
    assert_eq!(
        coordinator.after_take(&other, Some(SHARD_SKIPPED), &reading, &recorded),
        AfterTake::Skipped,
        "marked by another instance, whatever this take was for"
    );
    assert!(coordinator.is_skipped(&other));
    assert_eq!(
        coordinator.after_take(&other, None, &TakeFor::Skipping, SHARD_SKIPPED),
        AfterTake::Unmarked,
        "a store that records no start cannot mark"
    );
}

#[test]
fn a_failed_take_backs_off_doubling_with_jitter_and_a_take_ends_it() {
    let mut coordinator = coordinator(KinesisPosition::TrimHorizon);
    let listing = vec![shard("shardId-0", &[], false)];
    let id = Arc::clone(&listing[0].id);
    let now = Duration::from_secs(100);
    for failures in 1..=5 {
        // The jitter's two ends, in turn.
        let coin = if failures % 2 == 0 { 0 } else { u64::MAX };
        let backoff = coordinator.delay_take(&id, now, coin);
        assert_eq!(backoff.failures, failures);
        let ceiling = take_backoff_ceiling(failures, Duration::from_secs(10));
        let wait = backoff.until - now;
        assert!(
            wait >= ceiling / 2 && wait <= ceiling,
            "{wait:?} of {ceiling:?}"
        );
        assert_eq!(
            ceiling,
            Duration::from_secs(1 << (failures - 1)).min(Duration::from_secs(10)),
            "doubling from a second, capped at the lease"
        );
    }
    let rows = no_rows(&listing);
    assert!(
        coordinator
            .takeable(&listing, &rows, |_| false, OWNER, now, NOW_MS)
            .is_empty(),
        "in its backoff"
    );
    let later = now + Duration::from_secs(60);
    assert_eq!(
        coordinator
            .takeable(&listing, &rows, |_| false, OWNER, later, NOW_MS)
            .len(),
        1,
        "after it"
    );
    coordinator.took(&id);
    assert_eq!(
        coordinator.delay_take(&id, now, 0).failures,
        1,
        "counted afresh"
    );
}

#[test]
fn a_round_that_marks_never_read_parents_takes_their_children_in_another_pass() {
    // A new subscription at the tip: a closed parent nobody read is marked, and its child is
    // taken in the same round.
    let mut coordinator = coordinator(KinesisPosition::Latest);
    let listing = vec![
        shard("shardId-0", &[], true),
        shard("shardId-1", &["shardId-0"], false),
    ];
    let reading = HashSet::new();
    let mut rows = no_rows(&listing);
    coordinator.round_rows(&listing, &mut rows, Duration::ZERO, NOW_MS);
    let mut passes = RoundPasses::new(listing, rows, &HashSet::new());
    let first = passes.next(&mut coordinator, &reading, OWNER, (Duration::ZERO, NOW_MS));
    assert_eq!(first.len(), 1);
    assert_eq!(
        (&*first[0].0.id, &first[0].1),
        ("shardId-0", &TakeFor::Skipping)
    );
    // The marking take answered the mark.
    let parent = Arc::clone(&first[0].0.id);
    assert_eq!(
        coordinator.after_take(
            &parent,
            Some(SHARD_SKIPPED),
            &TakeFor::Skipping,
            SHARD_SKIPPED
        ),
        AfterTake::Skipped
    );
    assert!(
        passes.passed(&coordinator),
        "a pass that marked is followed by another"
    );
    let second = passes.next(&mut coordinator, &reading, OWNER, (Duration::ZERO, NOW_MS));
    assert_eq!(second.len(), 1);
    assert_eq!(&*second[0].0.id, "shardId-1");
    assert!(matches!(second[0].1, TakeFor::Reading(_)));
    assert!(
        !passes.passed(&coordinator),
        "nothing marked: the round is over"
    );
}

#[test]
fn the_handover_poll_sees_a_released_row_of_the_last_listing() {
    let mut coordinator = coordinator(KinesisPosition::TrimHorizon);
    let listing = vec![shard("shardId-0", &[], false)];
    let held = held_by_pod_b(NOW_MS + 10_000);
    let mut rows: Rows = [(Arc::clone(&listing[0].id), held.clone())].into();
    coordinator.round_rows(&listing, &mut rows, Duration::ZERO, NOW_MS);
    let reading = HashSet::new();
    assert_eq!(coordinator.poll_wanted(&reading).len(), 1);
    let rows: Rows = [(Arc::clone(&listing[0].id), held)].into();
    assert!(!coordinator.poll_finds_takeable(rows, &reading, OWNER, Duration::ZERO, NOW_MS));
    let released = Some(LeaseState {
        owner: None,
        expiry_ms: NOW_MS,
        counter: 4,
        checkpoint: Some("42".to_owned()),
        behind_ms: None,
        handoff: None,
        commit_token: None,
    });
    let rows: Rows = [(Arc::clone(&listing[0].id), released)].into();
    assert!(coordinator.poll_finds_takeable(rows, &reading, OWNER, Duration::ZERO, NOW_MS));
    let reading: HashSet<Arc<str>> = [Arc::clone(&listing[0].id)].into();
    assert!(
        coordinator.poll_wanted(&reading).is_empty(),
        "nothing waits while this instance reads it"
    );
}

#[test]
fn a_listing_forgets_what_left_the_stream_and_a_deleted_stream_forgets_everything() {
    let mut coordinator = coordinator(KinesisPosition::TrimHorizon);
    let gone: Arc<str> = Arc::from("shardId-0");
    coordinator.gone(&gone);
    coordinator.reader_ended(&Arc::from("shardId-1"), true);
    let listing = vec![shard("shardId-0", &[], true), shard("shardId-1", &[], true)];
    let rows = no_rows(&listing);
    let mut takes = coordinator.takeable(&listing, &rows, |_| false, OWNER, Duration::ZERO, NOW_MS);
    takes.retain(|(shard, _)| shard.id == gone);
    assert!(takes.is_empty(), "gone: never taken while listed");
    coordinator.listed(&listing[1..]);
    let takes = coordinator.takeable(&listing, &rows, |_| false, OWNER, Duration::ZERO, NOW_MS);
    assert!(
        takes.iter().any(|(shard, _)| shard.id == gone),
        "listed again after it left the listing: taken afresh"
    );
    assert!(coordinator.is_finished("shardId-1"));
    coordinator.stream_not_found();
    assert!(!coordinator.is_finished("shardId-1"));
}

#[test]
fn the_notice_has_the_rows_read_only_when_they_may_have_moved() {
    let mut coordinator = coordinator(KinesisPosition::TrimHorizon);
    let listing = vec![shard("shardId-0", &[], false)];
    let held = held_by_pod_b;
    let mut rows: Rows = [(Arc::clone(&listing[0].id), held(NOW_MS + 7_000))].into();
    coordinator.round_rows(&listing, &mut rows, Duration::ZERO, NOW_MS);
    let reading = HashSet::new();
    let notice = |counter, beat: u64| Notice {
        counter,
        beats: [("pod-b".to_owned(), beat)].into(),
        ..Notice::default()
    };
    let now = Duration::ZERO;
    // The first notice: the rows are read once; this instance waits, so it beats.
    let first = coordinator.noticed(&notice(5, NOW_MS + 9_000), &reading, OWNER, now, NOW_MS);
    assert!(first.read_rows);
    assert_eq!(first.beat.map(|beat| beat.until_ms), Some(NOW_MS + 10_000));
    let read: Rows = [(Arc::clone(&listing[0].id), held(NOW_MS + 7_000))].into();
    assert!(!coordinator.poll_finds_takeable(read, &reading, OWNER, now, NOW_MS));
    // Nothing moved: one read of the notice is the whole poll.
    let quiet = coordinator.noticed(&notice(5, NOW_MS + 9_000), &reading, OWNER, now, NOW_MS);
    assert!(!quiet.read_rows);
    // Later, past the expiry read in the round: pod-b's live beat says it renewed since.
    let later = NOW_MS + 9_000;
    let renewed = coordinator.noticed(&notice(5, later + 8_000), &reading, OWNER, now, later);
    assert!(!renewed.read_rows, "a live beat spares the read");
    // pod-b's beat lapsed and the lease read may have run out: the rows are read.
    let lapsed = coordinator.noticed(&notice(5, later - 2_000), &reading, OWNER, now, later);
    assert!(lapsed.read_rows);
    // pod-b's beat lapsed, but the lease it was last seen with still runs: nothing to read yet.
    let mut rows: Rows = [(Arc::clone(&listing[0].id), held(later + 5_000))].into();
    assert!(!coordinator.poll_finds_takeable(rows.clone(), &reading, OWNER, now, later));
    let early = coordinator.noticed(&notice(5, later - 2_000), &reading, OWNER, now, later);
    assert!(!early.read_rows);
    // A release bumped the counter: the rows are read.
    let bumped = coordinator.noticed(&notice(6, later + 8_000), &reading, OWNER, now, later);
    assert!(bumped.read_rows);
    // A shard whose row a round could not read is left to the rounds: not taken for one without a
    // row, which would have the rows read at every poll.
    let mut unknown = Coordinator::new(LeaseTimings::default(), KinesisPosition::TrimHorizon);
    unknown.round_rows(&listing, &mut Rows::new(), now, NOW_MS);
    let first = unknown.noticed(&notice(5, NOW_MS + 9_000), &reading, OWNER, now, NOW_MS);
    assert!(first.read_rows, "the first notice");
    unknown.poll_failed();
    let quiet = unknown.noticed(&notice(5, NOW_MS + 9_000), &reading, OWNER, now, NOW_MS);
    assert!(!quiet.read_rows);
    // Reading the shard, this instance waits for nothing: no rows, whatever the counter.
    coordinator.round_rows(&listing, &mut rows, Duration::ZERO, NOW_MS);
    let reading: HashSet<Arc<str>> = [Arc::clone(&listing[0].id)].into();
    let holding = coordinator.noticed(&notice(7, later + 8_000), &reading, OWNER, now, later);
    assert!(!holding.read_rows);
    assert!(holding.beat.is_some(), "it holds a shard and pod-b beats");
}

#[test]
fn a_stopping_instance_withdraws_its_standing_requests_but_for_the_shards_it_reads() {
    let mut coordinator = coordinator(KinesisPosition::Latest).with_balancing(true);
    let (handed, asked): (Arc<str>, Arc<str>) = (Arc::from("shardId-0"), Arc::from("shardId-1"));
    coordinator.requested(&handed, "pod-b", NOW_MS);
    coordinator.requested(&asked, "pod-b", NOW_MS);
    // shardId-0 was handed off and is read: its reader hands it back with its final
    // checkpoint, and a hand-back beside it would move the row's counter under that checkpoint.
    let reading: HashSet<Arc<str>> = [Arc::clone(&handed)].into();
    assert_eq!(
        coordinator.standing_asks(OWNER, NOW_MS + 1_000, &reading),
        vec![Arc::clone(&asked)]
    );
    assert_eq!(
        coordinator.standing_asks(OWNER, NOW_MS + 1_000, &HashSet::new()),
        vec![handed, asked]
    );
}

#[test]
fn a_balancing_instance_takes_free_shards_once_it_knows_who_else_started_or_a_lease_later() {
    let listing: Vec<ShardInfo> = (0..4)
        .map(|n| shard(&format!("shardId-{n}"), &[], false))
        .collect();
    let rows = no_rows(&listing);
    let none = HashSet::new();
    let take = |coordinator: &mut Coordinator<Duration>, elapsed: Duration| {
        let now_ms = NOW_MS + crate::lease::millis(elapsed);
        coordinator
            .shards_to_take(
                &listing,
                &rows,
                &none,
                |_| false,
                OWNER,
                (elapsed, now_ms),
                true,
            )
            .len()
    };
    let mut coordinator = coordinator(KinesisPosition::TrimHorizon).with_balancing(true);
    assert_eq!(
        take(&mut coordinator, Duration::ZERO),
        0,
        "nobody's beat known yet"
    );
    // A notice shows its own beat, and pod-b's beside it: half the shards are its share.
    let beats = beside_pod_b(1, NOW_MS + 11_000, NOW_MS + 11_000);
    let second = Duration::from_secs(1);
    coordinator.noticed(&beats, &none, OWNER, second, NOW_MS + 1_000);
    assert_eq!(take(&mut coordinator, second), 2);
    // An instance whose beat never shows waits a lease at most, then takes as one alone.
    let mut unseen = self::coordinator(KinesisPosition::TrimHorizon).with_balancing(true);
    let lease = LeaseTimings::default().lease();
    assert_eq!(take(&mut unseen, Duration::ZERO), 0);
    assert_eq!(take(&mut unseen, lease - Duration::from_millis(1)), 0);
    assert_eq!(take(&mut unseen, lease), 4);
    // Without balancing nothing waits.
    let mut alone = self::coordinator(KinesisPosition::TrimHorizon);
    assert_eq!(take(&mut alone, Duration::ZERO), 4);
}

#[test]
fn a_row_kept_by_a_beat_is_taken_once_the_last_notice_shows_its_holder_lapsed() {
    let listing = vec![
        shard("shardId-0", &[], false),
        shard("shardId-1", &[], false),
    ];
    let kept = NOW_MS + crate::lease::millis(crate::lease::KEPT_BY_BEAT);
    let row = |holder: &str| {
        Some(LeaseState {
            owner: Some(holder.to_owned()),
            expiry_ms: kept,
            counter: 3,
            checkpoint: Some("42".to_owned()),
            ..LeaseState::default()
        })
    };
    let rows: Rows = [
        (Arc::from("shardId-0"), row("pod-b")),
        (Arc::from("shardId-1"), row("pod-c")),
    ]
    .into();
    let none = HashSet::new();
    let mut coordinator = Coordinator::new(
        LeaseTimings::default().kept_by_beat(),
        KinesisPosition::Latest,
    );
    coordinator.beat_counts(true);
    let planned = |coordinator: &mut Coordinator<Duration>| {
        coordinator
            .shards_to_take(
                &listing,
                &rows,
                &none,
                |_| false,
                OWNER,
                (Duration::ZERO, NOW_MS),
                true,
            )
            .into_iter()
            .map(|(shard, _)| shard.id.to_string())
            .collect::<Vec<_>>()
    };
    // No notice read yet: neither holder's beat is known, so both count as lapsed.
    assert_eq!(planned(&mut coordinator).len(), 2);
    // Pod B beats; pod C's beat lapsed beyond the skew.
    let notice = Notice {
        counter: 1,
        beats: [
            ("pod-b".to_owned(), NOW_MS + 5_000),
            ("pod-c".to_owned(), NOW_MS - 1_001),
        ]
        .into(),
        ..Notice::default()
    };
    coordinator.noticed(&notice, &none, OWNER, Duration::ZERO, NOW_MS);
    assert_eq!(planned(&mut coordinator), vec!["shardId-1".to_owned()]);
    assert_eq!(coordinator.split_news(), None, "one fleet, kept by beat");
}

#[test]
fn a_fleet_split_between_the_two_ways_is_told_once_and_still_takes_what_is_free() {
    let listing = vec![
        shard("shardId-0", &[], false),
        shard("shardId-1", &[], false),
    ];
    let kept = NOW_MS + crate::lease::millis(crate::lease::KEPT_BY_BEAT);
    let rows: Rows = [
        (
            Arc::from("shardId-0"),
            Some(LeaseState {
                owner: Some("pod-b".to_owned()),
                expiry_ms: kept,
                counter: 3,
                ..LeaseState::default()
            }),
        ),
        // Released (a shard never taken would be pod B's turn or this one's: `turns`).
        (Arc::from("shardId-1"), Some(LeaseState::default())),
    ]
    .into();
    let none = HashSet::new();
    // This instance renews per row; pod B keeps its row alive by a beat that runs.
    let mut coordinator = coordinator(KinesisPosition::Latest);
    let planned = |coordinator: &mut Coordinator<Duration>, now_ms: u64| {
        coordinator
            .shards_to_take(
                &listing,
                &rows,
                &none,
                |_| false,
                OWNER,
                (Duration::ZERO, now_ms),
                true,
            )
            .len()
    };
    let notice = Notice {
        counter: 1,
        beats: [("pod-b".to_owned(), NOW_MS + 5_000)].into(),
        ..Notice::default()
    };
    coordinator.noticed(&notice, &none, OWNER, Duration::ZERO, NOW_MS);
    // The free shard, not pod B's: the plan goes on, and the split is told.
    assert_eq!(planned(&mut coordinator, NOW_MS), 1);
    let split = coordinator.split_news().expect("the split is told");
    assert_eq!(
        (&*split.shard, split.holder.as_str(), split.theirs_by_beat),
        ("shardId-0", "pod-b", true)
    );
    assert_eq!(planned(&mut coordinator, NOW_MS + 1), 1);
    assert_eq!(coordinator.split_news(), None, "told once an episode");
    // Pod B's beat lapsed: one fleet again, both shards taken (B's is judged by its beat).
    let later = NOW_MS + 5_000 + 1_001;
    assert_eq!(planned(&mut coordinator, later), 2);
    assert_eq!(coordinator.split_news(), None);
}

/// Issue 29, item 4: instances that do not balance and start together split the shards never
/// taken by turn rather than racing for the same ones (`turns`), leave the others' turns a
/// grace and the pace's time, and take a released shard at once, in an order of their own.
#[test]
fn an_instance_that_does_not_balance_takes_its_turns_of_new_shards_and_any_released_one() {
    let listing: Vec<ShardInfo> = (0..40)
        .map(|n| shard(&format!("shardId-{n}"), &[], false))
        .collect();
    let mut rows = no_rows(&listing);
    let none = HashSet::new();
    let planned = |coordinator: &mut Coordinator<Duration>, rows: &Rows, elapsed: Duration| {
        plan_at(coordinator, &listing, rows, elapsed)
    };
    let mut coordinator = coordinator(KinesisPosition::TrimHorizon);
    // Alone as far as it knows: every shard, heaviest first by its own weights (instances that
    // do not know each other yet start at different shards).
    let alone = planned(&mut coordinator, &rows, Duration::ZERO);
    assert_eq!(alone.len(), 40);
    let own = super::super::turns::Turns::new(OWNER, []);
    assert!(
        alone
            .windows(2)
            .all(|pair| own.weight(&pair[0]) >= own.weight(&pair[1])),
        "{alone:?}"
    );
    // A notice shows its beat and pod-b's: its turns only, the others' left to pod-b.
    let notice = Notice::beating(&[OWNER, "pod-b"], NOW_MS + 10_000);
    coordinator.noticed(&notice, &none, OWNER, Duration::ZERO, NOW_MS);
    let turns = super::super::turns::Turns::new(OWNER, ["pod-b"]);
    let mine = planned(&mut coordinator, &rows, Duration::ZERO);
    assert!(
        !mine.is_empty() && mine.len() < 40,
        "some turns each: {mine:?}"
    );
    assert!(mine.iter().all(|id| turns.is_mine(id)), "{mine:?}");
    assert_eq!(
        mine.len(),
        listing.iter().filter(|s| turns.is_mine(&s.id)).count()
    );
    // Still free after two handover polls and the pace's time: pod-b did not take them.
    let later = Duration::from_secs(2) + coordinator.pace.time_for(40);
    assert_eq!(planned(&mut coordinator, &rows, later).len(), 40);
    // A released row goes by no turn: taken at once, in this instance's own order.
    let released: Arc<str> = Arc::from("shardId-0");
    let other: Arc<str> = Arc::from("shardId-1");
    rows.insert(Arc::clone(&released), Some(LeaseState::default()));
    rows.insert(Arc::clone(&other), Some(LeaseState::default()));
    let mut fresh = self::coordinator(KinesisPosition::TrimHorizon);
    fresh.noticed(&notice, &none, OWNER, Duration::ZERO, NOW_MS);
    let plan = planned(&mut fresh, &rows, Duration::ZERO);
    assert!(plan.contains(&released.to_string()) && plan.contains(&other.to_string()));
    let by_weight: Vec<u64> = plan.iter().map(|id| turns.weight(id)).collect();
    assert!(
        by_weight.windows(2).all(|pair| pair[0] >= pair[1]),
        "heaviest first: {plan:?}"
    );
}

/// Until it knows its peers, an instance takes as one of forty (`PEERS_UNKNOWN`): a fleet
/// starting together does not write a whole budget each in its first seconds. It knows them a
/// renewal interval after a notice first showed its own beat (the first of a fleet to see its
/// beat sees nobody else's yet), or a lease after its first plan.
#[test]
fn an_instance_takes_at_a_fortieth_of_the_budget_until_it_knows_its_peers() {
    let mut coordinator = coordinator(KinesisPosition::TrimHorizon);
    let budget = crate::coordinator::take_pace::FLEET_TAKES_PER_SECOND;
    let unknown = coordinator.take_allowance(Duration::ZERO, NOW_MS, 1_000);
    assert_eq!(unknown as u64, budget / 40);
    assert!(!coordinator.knows_peers(Duration::ZERO));
    // Its first plan: a lease later it knows all it will, even with no beat of its own seen.
    let listing = vec![shard("shardId-0", &[], false)];
    let planned = plan_at(
        &mut coordinator,
        &listing,
        &no_rows(&listing),
        Duration::ZERO,
    );
    assert_eq!(planned.len(), 1);
    let lease = LeaseTimings::default().lease();
    assert!(!coordinator.knows_peers(lease - Duration::from_millis(1)));
    assert!(coordinator.knows_peers(lease));
    // Its own beat shown, alone so far: a renewal interval later it knows its peers.
    let notice = Notice::beating(&[OWNER], NOW_MS + 10_000);
    coordinator.noticed(&notice, &HashSet::new(), OWNER, Duration::ZERO, NOW_MS);
    let renew = LeaseTimings::default().renew();
    assert!(!coordinator.knows_peers(renew - Duration::from_millis(1)));
    assert!(coordinator.knows_peers(renew));
    let blind = coordinator.take_allowance(renew - Duration::from_millis(1), NOW_MS, 1_000);
    assert_eq!(
        blind as u64,
        budget / 40,
        "still one of forty, its bucket full"
    );
    coordinator.spend_takes(blind);
    let second = renew + Duration::from_secs(1);
    assert_eq!(
        coordinator.take_allowance(second, NOW_MS + 1_000, 1_000) as u64,
        budget,
        "alone, the whole budget a second once it knows"
    );
    // With the handover poll off no beat is read: it knows all it will, at once.
    let mut frugal = Coordinator::<Duration>::new(
        LeaseTimings::default().with_handover_poll_interval(Duration::ZERO),
        KinesisPosition::TrimHorizon,
    );
    assert!(frugal.knows_peers(Duration::ZERO));
    assert_eq!(
        frugal.take_allowance(Duration::ZERO, NOW_MS, 1_000) as u64,
        budget
    );
}

/// A balancing instance that sees only its own beat plans every free shard: until it knows its
/// peers, it takes as one of forty all the same, not at its plan's part of the budget (the
/// whole of it: review of the fifteenth session).
#[test]
fn a_balancing_instance_takes_as_one_of_forty_until_it_knows_its_peers() {
    let listing: Vec<ShardInfo> = (0..1_000)
        .map(|n| shard(&format!("shardId-{n}"), &[], false))
        .collect();
    let budget = crate::coordinator::take_pace::FLEET_TAKES_PER_SECOND;
    let mut coordinator = coordinator(KinesisPosition::TrimHorizon).with_balancing(true);
    let notice = Notice::beating(&[OWNER], NOW_MS + 10_000);
    coordinator.noticed(&notice, &HashSet::new(), OWNER, Duration::ZERO, NOW_MS);
    let planned = plan_at(
        &mut coordinator,
        &listing,
        &no_rows(&listing),
        Duration::ZERO,
    );
    assert_eq!(planned.len(), 1_000, "alone by what it sees: every shard");
    let wanted = planned.len();
    assert_eq!(
        coordinator.take_allowance(Duration::ZERO, NOW_MS, wanted) as u64,
        budget / 40
    );
    // Once it knows them (alone still), its plan's part: the whole budget.
    let renew = LeaseTimings::default().renew();
    let known = plan_at(&mut coordinator, &listing, &no_rows(&listing), renew);
    assert_eq!(
        coordinator.take_allowance(renew, NOW_MS + crate::lease::millis(renew), known.len()) as u64,
        budget
    );
}

/// A reshard's children have no row, but go by no turn: the instance whose turn a child would
/// be may hear of it only a listing later, so each is taken by whoever comes first once its
/// parent is read to its end (review of the fourteenth session).
#[test]
fn the_children_of_a_listed_parent_go_by_no_turn() {
    let mut listing = vec![shard("shardId-0", &[], true)];
    listing.extend((1..=10).map(|n| shard(&format!("shardId-{n}"), &["shardId-0"], false)));
    let mut rows = no_rows(&listing);
    rows.insert(
        Arc::from("shardId-0"),
        Some(LeaseState {
            checkpoint: Some(SHARD_END.to_owned()),
            counter: 4,
            ..LeaseState::default()
        }),
    );
    let none = HashSet::new();
    let mut coordinator = coordinator(KinesisPosition::TrimHorizon);
    let notice = Notice::beating(&[OWNER, "pod-b"], NOW_MS + 10_000);
    coordinator.noticed(&notice, &none, OWNER, Duration::ZERO, NOW_MS);
    let planned = plan_at(&mut coordinator, &listing, &rows, Duration::ZERO);
    assert_eq!(planned.len(), 10, "every child, pod-b's turns too");
}

/// A notice of another layout than this version's is news for the driver once for each layout
/// it names, whichever read brought it (the poll's, a take-over's); this version's is none.
#[test]
fn a_notice_of_another_layout_is_told_once_for_each_layout() {
    let mut coordinator = coordinator(KinesisPosition::Latest);
    let reading = HashSet::new();
    let mut notice = Notice::default();
    coordinator.noticed(&notice, &reading, OWNER, Duration::ZERO, NOW_MS);
    assert_eq!(coordinator.layout_news(), None);
    notice.layout = Some(crate::NOTICE_LAYOUT);
    coordinator.noticed(&notice, &reading, OWNER, Duration::ZERO, NOW_MS);
    assert_eq!(
        coordinator.layout_news(),
        None,
        "this version's own, written"
    );
    notice.layout = Some(2);
    coordinator.take_notice_read(&notice, NOW_MS);
    assert_eq!(coordinator.layout_news(), Some(2));
    coordinator.noticed(&notice, &reading, OWNER, Duration::ZERO, NOW_MS);
    assert_eq!(coordinator.layout_news(), None, "told once");
    notice.layout = Some(3);
    coordinator.noticed(&notice, &reading, OWNER, Duration::ZERO, NOW_MS);
    assert_eq!(coordinator.layout_news(), Some(3));
}

/// Where the store keeps the notice's head apart: the poll reads the whole notice until one read
/// a renewal interval after its own beat first showed (it knows its peers by then), and then the
/// head alone while the beats of the last whole read are live, taken with them: a holder whose
/// beat was live is not counted gone on a head read, and a head's counter still has the rows
/// read.
#[test]
fn a_read_of_the_notices_head_is_taken_with_the_beats_of_the_last_whole_read() {
    let mut coordinator = coordinator(KinesisPosition::TrimHorizon).with_notice_head_apart(true);
    let listing = vec![shard("shardId-0", &[], false)];
    let held = held_by_pod_b(NOW_MS + 7_000);
    let mut rows: Rows = [(Arc::clone(&listing[0].id), held.clone())].into();
    coordinator.round_rows(&listing, &mut rows, Duration::ZERO, NOW_MS);
    let reading = HashSet::new();
    let at = |secs: u64| (Duration::from_secs(secs), NOW_MS + secs * 1_000);
    let whole = |pod_b_until: u64, mine: Option<u64>| Notice {
        counter: 5,
        beats: [("pod-b".to_owned(), pod_b_until)]
            .into_iter()
            .chain(mine.map(|until| (OWNER.to_owned(), until)))
            .collect(),
        ..Notice::default()
    };
    let (now, now_ms) = at(0);
    assert!(
        coordinator.whole_notice_due(now, now_ms),
        "the first read is whole"
    );
    let first = coordinator.noticed(&whole(NOW_MS + 9_000, None), &reading, OWNER, now, now_ms);
    assert!(first.read_rows);
    let read: Rows = [(Arc::clone(&listing[0].id), held)].into();
    assert!(!coordinator.poll_finds_takeable(read, &reading, OWNER, now, now_ms));
    // Its own beat landed: the beats it knows show it, but only a whole read shows it beside
    // the peers that started with it.
    let until = first.beat.expect("it waits, so it beats").until_ms;
    coordinator.own_beat_landed(OWNER, until);
    let (now, now_ms) = at(1);
    assert!(
        coordinator.whole_notice_due(now, now_ms),
        "its beat showed in no whole read"
    );
    coordinator.noticed(
        &whole(NOW_MS + 9_000, Some(until)),
        &reading,
        OWNER,
        now,
        now_ms,
    );
    let (now, now_ms) = at(3);
    assert!(
        coordinator.whole_notice_due(now, now_ms),
        "not yet a renewal interval after its beat showed"
    );
    let (now, now_ms) = at(4);
    coordinator.noticed(
        &whole(NOW_MS + 12_000, Some(until)),
        &reading,
        OWNER,
        now,
        now_ms,
    );
    assert!(coordinator.knows_peers(now));
    let head = |counter| Notice {
        counter,
        ..Notice::default()
    };
    let (now, now_ms) = at(5);
    assert!(
        !coordinator.whole_notice_due(now, now_ms),
        "the head alone now"
    );
    let known = coordinator.head_noticed(&head(5), &reading, OWNER, now, now_ms);
    assert_eq!(
        known.beat, None,
        "its own beat is known, and runs for half a lease more"
    );
    // Past the row's expiry, before pod-b's beat ends: the head alone, and pod-b's beat as read
    // last counts it alive.
    let (now, now_ms) = at(8);
    assert!(!coordinator.whole_notice_due(now, now_ms));
    let quiet = coordinator.head_noticed(&head(5), &reading, OWNER, now, now_ms);
    assert!(
        !quiet.read_rows,
        "pod-b's beat as last read spares the rows"
    );
    // A release moved the counter: the head alone has the rows read.
    let moved = coordinator.head_noticed(&head(6), &reading, OWNER, now, now_ms);
    assert!(moved.read_rows);
    // A leave may have moved it: the next poll reads whole, before any beat known ends.
    let (now, now_ms) = at(9);
    assert!(
        coordinator.whole_notice_due(now, now_ms),
        "a leave's beat is gone only from a whole read"
    );
    coordinator.noticed(
        &whole(NOW_MS + 12_000, Some(until)),
        &reading,
        OWNER,
        now,
        now_ms,
    );
    assert!(!coordinator.whole_notice_due(now, now_ms + 1));
    // Its own beat as last read ends (the first to end): the next read is whole.
    let (now, now_ms) = at(10);
    assert!(coordinator.whole_notice_due(now, now_ms));
}

/// The check for another run under the owner id judges only whole reads: the head holds no
/// run's record, and a head read taken for "no record" would have the run write its own again at
/// every poll. Once its record landed, the next read is whole; and a paused run, which waits for
/// the earlier one's answer, reads the whole notice at every poll, and waits for it a lease and
/// the longest gap between the earlier run's whole reads.
#[test]
fn the_twins_check_waits_for_a_whole_read_of_the_notice() {
    use super::super::twins::Incarnation;
    let run = Incarnation::new(NOW_MS - 1_000, 7);
    let mut earliest = coordinator(KinesisPosition::TrimHorizon)
        .with_notice_head_apart(true)
        .without_waiting_for_peers()
        .with_incarnation(run);
    let none = HashSet::new();
    let zero = Duration::ZERO;
    let first = earliest.noticed(&Notice::default(), &none, OWNER, zero, NOW_MS);
    assert!(first.record, "its record is due");
    earliest.recorded(true, NOW_MS);
    assert!(earliest.whole_notice_due(zero, NOW_MS + 1));
    let mine = Notice {
        incarnations: [(OWNER.to_owned(), run.record(NOW_MS))].into(),
        ..Notice::default()
    };
    let judged = earliest.noticed(&mine, &none, OWNER, zero, NOW_MS + 1_000);
    assert!(!judged.record, "its own record stands");
    assert!(!earliest.whole_notice_due(zero, NOW_MS + 2_000));
    let head = earliest.head_noticed(&Notice::default(), &none, OWNER, zero, NOW_MS + 2_000);
    assert!(!head.record, "a head shows no record, and means none");
    assert_eq!(head.twin, None);
    // A later run under the owner id: this one found an earlier one's answer, and pauses.
    let later = Incarnation::new(NOW_MS + 60_000, 1);
    let mut paused = coordinator(KinesisPosition::TrimHorizon)
        .with_notice_head_apart(true)
        .without_waiting_for_peers()
        .with_incarnation(later);
    let landed = NOW_MS + 61_000;
    paused.noticed(&Notice::default(), &none, OWNER, zero, landed);
    paused.recorded(true, landed);
    let earlier = Notice {
        incarnations: [(OWNER.to_owned(), run.record(landed + 500))].into(),
        ..Notice::default()
    };
    let found = paused.noticed(&earlier, &none, OWNER, zero, landed + 1_000);
    assert!(matches!(found.twin, Some(TwinNews::Earlier(_))));
    paused.recorded(true, landed + 1_200);
    paused.noticed(
        &mine_of(later, landed + 1_200),
        &none,
        OWNER,
        zero,
        landed + 2_000,
    );
    assert!(
        paused.whole_notice_due(zero, landed + 3_000),
        "paused: every poll reads whole"
    );
    // A lease after its record, no answer yet: the earlier run may still be between two of its
    // whole reads, so it is not counted gone.
    let waited = paused.noticed(
        &mine_of(later, landed + 1_200),
        &none,
        OWNER,
        zero,
        landed + 12_000,
    );
    assert_eq!(waited.twin, None, "not gone after a lease alone");
    let gone = paused.noticed(
        &mine_of(later, landed + 1_200),
        &none,
        OWNER,
        zero,
        landed + 25_000,
    );
    assert!(matches!(gone.twin, Some(TwinNews::Gone(_))));
}

/// The notice holding only `run`'s record, written at `written_ms`.
fn mine_of(run: super::super::twins::Incarnation, written_ms: u64) -> Notice {
    Notice {
        incarnations: [(OWNER.to_owned(), run.record(written_ms))].into(),
        ..Notice::default()
    }
}

/// A whole read behind the latest writes that shows another run's record under this owner id
/// judges nothing (it may be the record this run's replaced a moment ago), and has the next poll
/// read the whole notice, consistent, however long the beats would let the head alone do: an
/// earlier run answers a later one within the later one's patience.
#[test]
fn a_record_in_doubt_is_judged_at_the_next_poll_on_a_consistent_whole_read() {
    use super::super::twins::Incarnation;
    let run = Incarnation::new(NOW_MS - 1_000, 7);
    let mut earliest = coordinator(KinesisPosition::TrimHorizon)
        .with_notice_head_apart(true)
        .with_polls_behind(true)
        .without_waiting_for_peers()
        .with_incarnation(run);
    let none = HashSet::new();
    let zero = Duration::ZERO;
    earliest.noticed(&Notice::default(), &none, OWNER, zero, NOW_MS);
    earliest.recorded(true, NOW_MS);
    // Beats that run for a minute: the head alone would do for that long.
    let beats = |record: String| Notice {
        beats: [("pod-b".to_owned(), NOW_MS + 60_000)].into(),
        incarnations: [(OWNER.to_owned(), record)].into(),
        ..Notice::default()
    };
    earliest.noticed(
        &beats(run.record(NOW_MS)),
        &none,
        OWNER,
        zero,
        NOW_MS + 1_000,
    );
    assert!(!earliest.whole_notice_due(zero, NOW_MS + 2_000));
    assert!(!earliest.consistent_notice_due(zero));
    // A later run recorded itself: a read behind shows its record.
    let later = Incarnation::new(NOW_MS + 1_500, 9);
    let behind = earliest.noticed_behind(
        &beats(later.record(NOW_MS + 1_600)),
        &none,
        OWNER,
        zero,
        NOW_MS + 2_000,
    );
    assert_eq!(behind.twin, None, "nothing judged on a read behind");
    assert!(
        earliest.whole_notice_due(zero, NOW_MS + 3_000),
        "the next poll reads the whole notice"
    );
    assert!(
        earliest.consistent_notice_due(zero),
        "and reads it consistent"
    );
    let judged = earliest.noticed(
        &beats(later.record(NOW_MS + 1_600)),
        &none,
        OWNER,
        zero,
        NOW_MS + 3_000,
    );
    assert!(
        matches!(judged.twin, Some(TwinNews::Later(_))) && judged.record,
        "the later run is told of, and this run's record written again: {:?}",
        judged.twin
    );
    assert!(!earliest.consistent_notice_due(zero));
}

/// Where polls read behind, a head read that shows the counter moved has the next poll read
/// the whole notice consistent: a leave removes its beat before it bumps the counter, and a
/// whole read behind might still show the beat, a balancing instance then leaving the leaver's
/// released shard to it until the beat ends (the review of seed 1796613900746723232's fix).
#[test]
fn a_counter_moved_on_a_head_read_has_the_next_whole_read_consistent_where_polls_read_behind() {
    let mut coordinator = coordinator(KinesisPosition::TrimHorizon)
        .with_notice_head_apart(true)
        .with_polls_behind(true)
        .without_waiting_for_peers();
    let none = HashSet::new();
    let whole = beside_pod_b(4, NOW_MS + 9_000, NOW_MS + 9_000);
    let later = Duration::from_secs(5);
    coordinator.noticed(&whole, &none, OWNER, Duration::ZERO, NOW_MS);
    // A renewal interval after its own beat showed: it knows its peers.
    coordinator.noticed(&whole, &none, OWNER, later, NOW_MS + 500);
    let quiet = Notice {
        counter: 4,
        ..Notice::default()
    };
    coordinator.head_noticed(&quiet, &none, OWNER, later, NOW_MS + 1_000);
    assert!(
        !coordinator.whole_notice_due(later, NOW_MS + 2_000),
        "the head alone"
    );
    let moved = Notice {
        counter: 5,
        ..Notice::default()
    };
    coordinator.head_noticed(&moved, &none, OWNER, later, NOW_MS + 2_000);
    assert!(coordinator.whole_notice_due(later, NOW_MS + 3_000));
    assert!(
        coordinator.consistent_notice_due(later),
        "a read behind might still show the leaver's beat"
    );
}
/// What a read behind shows never moves the counter, the marks or this instance's own beat back
/// from what a newer read showed: an old counter would be taken for a moved one (every row read
/// again), an old own beat for one running out (a beat written again).
#[test]
fn a_read_behind_moves_no_counter_mark_or_own_beat_back() {
    let mut coordinator = coordinator(KinesisPosition::TrimHorizon)
        .with_notice_head_apart(true)
        .with_polls_behind(true)
        .without_waiting_for_peers();
    let none = HashSet::new();
    let zero = Duration::ZERO;
    let newer = Notice {
        counter: 9,
        asks: [(OWNER.to_owned(), 3)].into(),
        beats: [
            (OWNER.to_owned(), NOW_MS + 9_000),
            ("pod-b".to_owned(), NOW_MS + 9_000),
        ]
        .into(),
        ..Notice::default()
    };
    coordinator.noticed(&newer, &none, OWNER, zero, NOW_MS);
    let older = Notice {
        counter: 8,
        asks: [(OWNER.to_owned(), 2)].into(),
        beats: [
            (OWNER.to_owned(), NOW_MS + 4_000),
            ("pod-b".to_owned(), NOW_MS + 4_000),
        ]
        .into(),
        ..Notice::default()
    };
    coordinator.noticed_behind(&older, &none, OWNER, zero, NOW_MS + 500);
    let known = coordinator.watch.notice();
    assert_eq!(known.counter, 9);
    assert_eq!(known.asks.get(OWNER), Some(&3));
    assert_eq!(known.beats.get(OWNER), Some(&(NOW_MS + 9_000)));
    assert_eq!(
        known.beats.get("pod-b"),
        Some(&(NOW_MS + 4_000)),
        "another's beat as read"
    );
    // Lower than known: a read behind, or a notice written afresh; the next poll reads the
    // whole notice consistent to tell.
    assert!(coordinator.whole_notice_due(zero, NOW_MS + 600));
    assert!(coordinator.consistent_notice_due(zero));
    coordinator.head_noticed(
        &Notice {
            counter: 7,
            ..Notice::default()
        },
        &none,
        OWNER,
        zero,
        NOW_MS + 600,
    );
    assert_eq!(coordinator.watch.notice().counter, 9, "nor a head behind");
    // A consistent read is the truth, whatever came before (a notice written afresh counts
    // from zero again), and ends the doubt (a renewal interval after its own beat showed, so
    // the reads that settle the peers are over too).
    let later = Duration::from_secs(10);
    coordinator.noticed(&older, &none, OWNER, later, NOW_MS + 10_000);
    assert_eq!(coordinator.watch.notice().counter, 8);
    assert!(!coordinator.consistent_notice_due(later));
}

/// A coordinator whose store reads every poll consistent (`LeaseStore::polls_read_behind`
/// false, the default) asks for every whole read consistent and takes what a head shows as the
/// latest, as before reads behind: a counter lower than known is a notice written afresh.
#[test]
fn without_reads_behind_every_whole_read_is_consistent_and_a_head_is_the_latest() {
    let mut coordinator = coordinator(KinesisPosition::TrimHorizon)
        .with_notice_head_apart(true)
        .without_waiting_for_peers();
    let none = HashSet::new();
    let zero = Duration::ZERO;
    assert!(coordinator.consistent_notice_due(zero));
    let notice = Notice {
        counter: 9,
        beats: [("pod-b".to_owned(), NOW_MS + 60_000)].into(),
        ..Notice::default()
    };
    coordinator.noticed(&notice, &none, OWNER, zero, NOW_MS);
    assert!(coordinator.consistent_notice_due(zero));
    coordinator.head_noticed(
        &Notice {
            counter: 2,
            ..Notice::default()
        },
        &none,
        OWNER,
        zero,
        NOW_MS + 500,
    );
    assert_eq!(coordinator.watch.notice().counter, 2);
    assert!(
        !coordinator.whole_notice_due(zero, NOW_MS + 1_000),
        "no doubt: the head read is the latest"
    );
}

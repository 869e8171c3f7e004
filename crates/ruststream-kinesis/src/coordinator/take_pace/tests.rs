use std::time::Duration;

use super::*;

fn at(ms: u64) -> Duration {
    Duration::from_millis(ms)
}

#[test]
fn a_fresh_pace_allows_a_seconds_share_of_the_fleets_budget_at_once() {
    assert_eq!(TakePace::default().allowance(at(0), Share::even(1)), 500);
    assert_eq!(TakePace::default().allowance(at(0), Share::even(100)), 5);
    // More instances than the budget has takes: one a second each still.
    assert_eq!(TakePace::default().allowance(at(0), Share::even(2_000)), 1);
    // No instance known (no beat read yet): this one alone.
    assert_eq!(TakePace::default().allowance(at(0), Share::even(0)), 500);
}

#[test]
fn takes_spent_come_back_at_the_rate_and_no_faster() {
    let mut pace = TakePace::default();
    assert_eq!(pace.allowance(at(0), Share::even(100)), 5);
    pace.spend(5);
    assert_eq!(pace.allowance(at(0), Share::even(100)), 0);
    // Five a second: one every 200 ms.
    let next = pace.next_at(at(0), Share::even(100));
    assert_eq!(next, at(200));
    assert_eq!(pace.allowance(at(199), Share::even(100)), 0);
    assert_eq!(pace.allowance(next, Share::even(100)), 1);
    pace.spend(1);
    // A long quiet refills a second's worth, not more.
    assert_eq!(pace.allowance(at(60_000), Share::even(100)), 5);
}

#[test]
fn a_fleet_of_instances_takes_no_faster_together_than_the_budget() {
    // A hundred instances each taking whatever their pace allows, every 10 ms for 10 s.
    let mut paces: Vec<TakePace<Duration>> = (0..100).map(|_| TakePace::default()).collect();
    let mut taken = 0;
    for tick in 0..=1_000 {
        for pace in &mut paces {
            let allowed = pace.allowance(at(tick * 10), Share::even(100));
            pace.spend(allowed);
            taken += allowed;
        }
    }
    // A second's worth at once, then the budget a second.
    let most = FLEET_TAKES_PER_SECOND as usize * 11;
    assert!(
        (most - 100..=most).contains(&taken),
        "{taken} takes in 10 s, budget {most}"
    );
}

#[test]
fn a_throttled_take_pauses_every_take_for_a_backoff_that_doubles_in_a_row() {
    let longest = Duration::from_secs(10);
    let mut pace = TakePace::default();
    assert_eq!(pace.allowance(at(0), Share::even(1)), 500);
    // The coin at its ends: half the ceiling, and the ceiling.
    let until = pace.throttled(at(0), longest, 0);
    assert_eq!(until, Some(at(500)));
    // Another take of the same batch, answered during the pause: one pause, one in the row.
    assert_eq!(pace.throttled(at(10), longest, u64::MAX), None);
    assert_eq!(pace.throttles(), 1);
    assert_eq!(pace.allowance(at(499), Share::even(1)), 0);
    // The bucket was emptied, and fills from the pause's end: no burst then (500 a second, one
    // every 2 ms).
    assert_eq!(pace.next_at(at(499), Share::even(1)), at(502));
    assert_eq!(pace.allowance(at(500), Share::even(1)), 0);
    assert_eq!(pace.allowance(at(502), Share::even(1)), 1);
    let until = pace.throttled(at(1_000), longest, u64::MAX).unwrap();
    assert!(
        until >= at(1_000 + 1_000) && until <= at(1_000 + 2_000),
        "{until:?}"
    );
    assert_eq!(pace.throttles(), 2);
    let mut now = until;
    for _ in 0..10 {
        now = pace.throttled(now, longest, u64::MAX).unwrap();
    }
    assert_eq!(pace.throttles(), 12);
    // Up to the longest wait (and a take's refill), no more.
    let last = pace.throttled(now, longest, u64::MAX).unwrap();
    assert!(
        last >= now + longest / 2 && last <= now + longest,
        "{last:?}"
    );
    pace.granted();
    assert_eq!(pace.throttles(), 0);
    let until = pace.throttled(last, longest, 0);
    assert_eq!(
        until,
        Some(last + Duration::from_millis(500)),
        "a granted take ends the row"
    );
}

#[test]
fn an_instance_takes_at_its_part_of_what_the_fleet_takes_never_below_an_even_split() {
    let rate = |share: Share| TakePace::<Duration>::default().allowance(at(0), share);
    // At the start: a hundredth of the free shards planned, a hundredth of the budget.
    let start = Share {
        live: 100,
        planned: 100,
        free: 10_000,
    };
    assert_eq!(rate(start), 5);
    // At the end: the last instance still taking plans every shard left free, and takes at the
    // whole budget.
    let end = Share {
        live: 100,
        planned: 40,
        free: 40,
    };
    assert_eq!(rate(end), 500);
    let half = Share {
        live: 100,
        planned: 20,
        free: 40,
    };
    assert_eq!(rate(half), 250);
    // A plan of less than its even split (shards handed to others) still takes at the split.
    let little = Share {
        live: 10,
        planned: 1,
        free: 10_000,
    };
    assert_eq!(rate(little), 50);
    // A plan counting more than the free shards (handed to it) at most the budget.
    let handed = Share {
        live: 2,
        planned: 30,
        free: 10,
    };
    assert_eq!(rate(handed), 500);
}

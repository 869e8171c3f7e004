use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use super::*;
use crate::LeaseState;
use crate::lease::Handoff;

const NOW_MS: u64 = 1_000_000;

fn listing(shards: usize) -> Vec<ShardInfo> {
    (0..shards)
        .map(|n| ShardInfo {
            id: Arc::from(format!("shardId-{n:012}")),
            parents: Vec::new(),
            closed: false,
        })
        .collect()
}

fn held(owner: &str) -> Option<LeaseState> {
    Some(LeaseState {
        owner: Some(owner.to_owned()),
        expiry_ms: NOW_MS + 10_000,
        counter: 1,
        checkpoint: Some("7".to_owned()),
        behind_ms: None,
        handoff: None,
        commit_token: None,
    })
}

/// The rows of `listing` held as `owners` says, shard by shard (`None`: no row).
fn rows(listing: &[ShardInfo], owners: &[Option<&str>]) -> Rows {
    listing
        .iter()
        .zip(owners)
        .map(|(shard, owner)| (Arc::clone(&shard.id), owner.and_then(held)))
        .collect()
}

fn shares_of(
    listing: &[ShardInfo],
    rows: &Rows,
    me: &str,
    reading: &HashSet<Arc<str>>,
    free: usize,
    beats: &[&str],
) -> Shares {
    shares(
        listing,
        rows,
        reading,
        free,
        0,
        me,
        beats.iter().copied(),
        NOW_MS,
    )
}

#[test]
fn a_joining_instance_asks_the_one_that_holds_every_shard_for_half_of_them() {
    let listing = listing(8);
    let rows = rows(&listing, &[Some("a"); 8]);
    let shares = shares_of(&listing, &rows, "b", &HashSet::new(), 0, &[]);
    assert_eq!((shares.open, shares.instances, shares.mine), (8, 2, 0));
    assert_eq!(shares.ceiling(), 4);
    let asks = shares.asks(0);
    assert_eq!(asks.len(), 4);
    assert!(asks.iter().all(|ask| ask.holder == "a"));
    let distinct: HashSet<_> = asks.iter().map(|ask| Arc::clone(&ask.shard)).collect();
    assert_eq!(distinct.len(), 4, "four different shards: {asks:?}");
}

#[test]
fn a_third_instance_takes_one_from_each_and_stops_within_one_of_the_others() {
    let listing = listing(8);
    let owners: Vec<Option<&str>> = (0..8)
        .map(|n| Some(if n < 4 { "a" } else { "b" }))
        .collect();
    let rows = rows(&listing, &owners);
    let shares = shares_of(&listing, &rows, "c", &HashSet::new(), 0, &[]);
    assert_eq!(shares.ceiling(), 3);
    let asks = shares.asks(0);
    let holders: Vec<&str> = asks.iter().map(|ask| ask.holder.as_str()).collect();
    assert_eq!(holders, ["a", "b"], "4, 4, 0 becomes 3, 3, 2");
}

#[test]
fn an_even_split_asks_for_nothing_and_a_difference_of_one_is_even() {
    let listing = listing(5);
    let rows = rows(&listing, &[Some("a"), Some("a"), Some("a"), None, None]);
    let reading: HashSet<Arc<str>> = [3, 4].iter().map(|&n| Arc::clone(&listing[n].id)).collect();
    let shares = shares_of(&listing, &rows, "b", &reading, 0, &[]);
    assert_eq!((shares.mine, shares.ceiling()), (2, 3));
    assert!(
        shares.asks(0).is_empty(),
        "3 against 2 is as even as 5 goes"
    );
}

#[test]
fn free_shards_are_taken_only_up_to_the_share_counting_instances_that_beat() {
    let listing = listing(6);
    let rows = rows(&listing, &[None; 6]);
    // Alone, every free shard is this one's.
    let alone = shares_of(&listing, &rows, "a", &HashSet::new(), 6, &[]);
    assert_eq!(alone.room(), 6);
    // Two other instances beat: a third each, and nothing to ask of anyone.
    let three = shares_of(&listing, &rows, "a", &HashSet::new(), 6, &["a", "b", "c"]);
    assert_eq!((three.instances, three.room()), (3, 2));
    assert!(three.asks(2).is_empty());
}

#[test]
fn a_standing_request_counts_for_its_asker_and_is_not_asked_again() {
    let listing = listing(4);
    let mut rows = rows(&listing, &[Some("a"); 4]);
    let asked = |to: &str, asked_ms: u64| Handoff {
        to: to.to_owned(),
        asked_ms,
    };
    for (n, to) in [(0, "b"), (1, "b")] {
        let row = rows.get_mut(&listing[n].id).unwrap().as_mut().unwrap();
        row.handoff = Some(asked(to, NOW_MS - 1_000));
    }
    let of_b = shares_of(&listing, &rows, "b", &HashSet::new(), 0, &[]);
    assert_eq!(of_b.mine, 2, "the two shards b asked for count as b's");
    assert!(of_b.asks(0).is_empty(), "2 and 2: nothing more to ask");
    // Another instance sees them as b's too, and asks nothing of a for them.
    let other = shares_of(&listing, &rows, "c", &HashSet::new(), 0, &[]);
    assert_eq!(other.instances, 3);
    let asks = other.asks(0);
    assert_eq!(asks.len(), 1);
    assert!(asks[0].shard == listing[2].id || asks[0].shard == listing[3].id);
    // A request older than its lifetime counts for nobody.
    let late = NOW_MS + crate::lease::millis(crate::HANDOFF_REQUEST_LIFETIME);
    let lapsed = shares(
        &listing,
        &rows,
        &HashSet::new(),
        0,
        0,
        "b",
        std::iter::empty(),
        late,
    );
    assert_eq!(lapsed.mine, 0);
}

#[test]
fn expired_and_finished_rows_are_not_held_by_anyone() {
    let listing = listing(3);
    let mut rows = rows(&listing, &[Some("a"), Some("a"), Some("a")]);
    rows.get_mut(&listing[0].id)
        .unwrap()
        .as_mut()
        .unwrap()
        .expiry_ms = 0;
    rows.get_mut(&listing[1].id)
        .unwrap()
        .as_mut()
        .unwrap()
        .checkpoint = Some(crate::SHARD_END.to_owned());
    // a beats, so it still counts (with its live row) though one of its leases lapsed.
    let shares = shares_of(&listing, &rows, "b", &HashSet::new(), 1, &["a"]);
    assert_eq!(shares.held, BTreeMap::from([("a".to_owned(), 1)]));
    assert_eq!(
        shares.open, 2,
        "the lapsed one is free, the finished one is not open"
    );
}

/// The schedule CI found (`simulation::tests`): b asked for two shards and crashed; the holder
/// handed it one, which lapsed, and then the other. Still counted for that live row, b kept a
/// share of the free shards, the lapsed one was left to it, and it waited a lease more.
#[test]
fn an_instance_without_a_beat_that_let_a_lease_lapse_stops_counting() {
    let listing = listing(4);
    let mut rows = rows(&listing, &[Some("a"), Some("a"), Some("b"), Some("b")]);
    rows.get_mut(&listing[3].id)
        .unwrap()
        .as_mut()
        .unwrap()
        .expiry_ms = NOW_MS - 5_000;
    let reading: HashSet<Arc<str>> = [0, 1].iter().map(|&n| Arc::clone(&listing[n].id)).collect();
    let free = [Arc::clone(&listing[3].id)];
    let alone = shares_of(&listing, &rows, "a", &reading, 1, &[]);
    assert_eq!((alone.instances, alone.open, alone.mine), (1, 3, 2));
    assert_eq!(
        alone.free_for(&free),
        free,
        "the lapsed shard is a's to take"
    );
    assert!(alone.asks(1).is_empty(), "nothing is asked of b");
    // With a live beat b is alive and keeps its share: the free shard is left to it.
    let beating = shares_of(&listing, &rows, "a", &reading, 1, &["a", "b"]);
    assert_eq!((beating.instances, beating.open), (2, 4));
    assert!(beating.free_for(&free).is_empty());
    // A request of b's standing on a row a reads counts as a's, not b's.
    rows.get_mut(&listing[1].id)
        .unwrap()
        .as_mut()
        .unwrap()
        .handoff = Some(Handoff {
        to: "b".to_owned(),
        asked_ms: NOW_MS - 1_000,
    });
    let asked = shares_of(&listing, &rows, "a", &reading, 1, &[]);
    assert_eq!((asked.instances, asked.mine), (1, 2));
    // A request of a's standing on b's live row is a's still: b may be alive and honour it.
    rows.get_mut(&listing[2].id)
        .unwrap()
        .as_mut()
        .unwrap()
        .handoff = Some(Handoff {
        to: "a".to_owned(),
        asked_ms: NOW_MS - 1_000,
    });
    let mine = shares_of(&listing, &rows, "a", &reading, 1, &[]);
    assert_eq!((mine.mine, mine.open), (3, 4));
}

/// Instances that each, in turn and with a fresh view, take what their share allows and ask
/// for what the rule asks, end within one shard of each other, each at most the ceiling, and
/// no shard moves twice: the sum of squares falls with each move.
#[test]
fn instances_acting_in_turn_converge_without_moving_a_shard_twice() {
    for shards in 1..=12usize {
        for instances in 1..=5usize {
            let listing = listing(shards);
            let names: Vec<String> = (0..instances).map(|n| format!("i{n}")).collect();
            // Everything starts with the first instance, as the first to list takes it all.
            let mut owner: Vec<String> = vec![names[0].clone(); shards];
            let mut moves = vec![0u32; shards];
            for _ in 0..instances * shards + 2 {
                let mut moved = false;
                for me in &names {
                    let rows = rows(
                        &listing,
                        &owner.iter().map(|o| Some(o.as_str())).collect::<Vec<_>>(),
                    );
                    let reading: HashSet<Arc<str>> = listing
                        .iter()
                        .zip(&owner)
                        .filter(|(_, o)| *o == me)
                        .map(|(shard, _)| Arc::clone(&shard.id))
                        .collect();
                    let beats: Vec<&str> = names.iter().map(String::as_str).collect();
                    let shares = shares_of(&listing, &rows, me, &reading, 0, &beats);
                    for ask in shares.asks(0) {
                        let n = listing.iter().position(|s| s.id == ask.shard).unwrap();
                        assert_eq!(owner[n], ask.holder);
                        owner[n] = me.clone();
                        moves[n] += 1;
                        moved = true;
                    }
                }
                if !moved {
                    break;
                }
            }
            let counts: Vec<usize> = names
                .iter()
                .map(|name| owner.iter().filter(|o| *o == name).count())
                .collect();
            let ceiling = shards.div_ceil(instances);
            let (least, most) = (*counts.iter().min().unwrap(), *counts.iter().max().unwrap());
            assert!(
                most <= ceiling && most - least <= 1,
                "{shards} shards over {instances}: {counts:?}"
            );
            assert!(
                moves.iter().all(|&m| m <= 1),
                "{shards} shards over {instances}: moves {moves:?}"
            );
        }
    }
}

//! The split fleet, judged from the rows and the notice alone.

use super::*;
use crate::LeaseState;
use crate::lease::{KEPT_BY_BEAT, millis};

const NOW_MS: u64 = 1_700_000_000_000;

fn held(owner: &str, expiry_ms: u64) -> Option<LeaseState> {
    Some(LeaseState {
        owner: Some(owner.to_owned()),
        expiry_ms,
        counter: 4,
        checkpoint: None,
        behind_ms: None,
        handoff: None,
        commit_token: None,
    })
}

fn rows(rows: &[(&str, Option<LeaseState>)]) -> Rows {
    rows.iter()
        .map(|(shard, row)| (Arc::from(*shard), row.clone()))
        .collect()
}

fn beats(beats: &[(&str, u64)]) -> Notice {
    Notice {
        beats: beats
            .iter()
            .map(|&(owner, until)| (owner.to_owned(), until))
            .collect(),
        ..Notice::default()
    }
}

/// The expiry of a row kept alive by its holder's beat.
fn kept() -> u64 {
    NOW_MS + millis(KEPT_BY_BEAT)
}

#[test]
fn an_instance_kept_alive_by_beat_finds_a_live_lease_renewed_per_row() {
    let table = rows(&[
        ("shard-1", held("pod-a", kept())),
        ("shard-2", held("pod-b", NOW_MS + 5_000)),
    ]);
    let notice = beats(&[("pod-a", NOW_MS + 5_000)]);
    assert_eq!(
        split_fleet(&table, &notice, "pod-c", true, NOW_MS),
        Some(SplitFleet {
            shard: Arc::from("shard-2"),
            holder: "pod-b".to_owned(),
            theirs_by_beat: false,
        })
    );
    // Renewing per row itself, the same table splits at the other row.
    assert_eq!(
        split_fleet(&table, &notice, "pod-c", false, NOW_MS),
        Some(SplitFleet {
            shard: Arc::from("shard-1"),
            holder: "pod-a".to_owned(),
            theirs_by_beat: true,
        })
    );
}

#[test]
fn dead_holders_released_rows_and_ones_own_split_nothing() {
    let table = rows(&[
        // Kept by beat, its holder's beat lapsed past the skew tolerance.
        ("shard-1", held("pod-a", kept())),
        // Renewed per row, lapsed.
        ("shard-2", held("pod-b", NOW_MS - 60_000)),
        ("shard-3", None),
        ("shard-4", held("pod-c", NOW_MS + 5_000)),
    ]);
    let notice = beats(&[("pod-a", NOW_MS - 60_000)]);
    assert_eq!(split_fleet(&table, &notice, "pod-c", true, NOW_MS), None);
    assert_eq!(split_fleet(&table, &notice, "pod-c", false, NOW_MS), None);
}

#[test]
fn a_fleet_of_one_way_is_not_split() {
    let by_beat = rows(&[("shard-1", held("pod-a", kept()))]);
    let notice = beats(&[("pod-a", NOW_MS + 5_000)]);
    assert_eq!(split_fleet(&by_beat, &notice, "pod-c", true, NOW_MS), None);
    let per_row = rows(&[("shard-1", held("pod-a", NOW_MS + 5_000))]);
    assert_eq!(split_fleet(&per_row, &notice, "pod-c", false, NOW_MS), None);
}

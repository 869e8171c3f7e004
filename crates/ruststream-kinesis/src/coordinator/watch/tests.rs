//! The notice rules on their own: when a beat is written, when the counter asks for the rows,
//! and what a live beat lets the poll assume of its holder's rows.

use super::*;
use crate::LeaseState;

const NOW_MS: u64 = 1_700_000_000_000;
const LEASE_MS: u64 = 10_000;

fn notice(counter: u64, beats: &[(&str, u64)]) -> Notice {
    Notice {
        counter,
        beats: beats
            .iter()
            .map(|&(owner, until)| (owner.to_owned(), until))
            .collect(),
        ..Notice::default()
    }
}

fn held(owner: &str, expiry_ms: u64) -> Option<LeaseState> {
    Some(LeaseState {
        owner: Some(owner.to_owned()),
        expiry_ms,
        counter: 4,
        checkpoint: Some("9".to_owned()),
        behind_ms: None,
        handoff: None,
        commit_token: None,
    })
}

#[test]
fn a_lone_instance_writes_no_beat() {
    let timings = LeaseTimings::default();
    let alone = notice(0, &[]);
    assert_eq!(
        beat_due(&alone, "pod-a", false, true, &timings, NOW_MS),
        None
    );
    // Another instance's beat that lapsed long ago does not count as another instance.
    let lapsed = notice(0, &[("pod-b", NOW_MS - 5_000)]);
    assert_eq!(
        beat_due(&lapsed, "pod-a", false, true, &timings, NOW_MS),
        None
    );
}

#[test]
fn a_holder_beats_once_another_instance_beats_and_a_waiting_instance_always() {
    let timings = LeaseTimings::default();
    let other = notice(0, &[("pod-b", NOW_MS + 8_000)]);
    let beat = beat_due(&other, "pod-a", false, true, &timings, NOW_MS).expect("a beat");
    assert_eq!(beat.until_ms, NOW_MS + LEASE_MS);
    assert!(beat.forget.is_empty());
    // Holding nothing and waiting for nothing: no beat, whoever else beats.
    assert_eq!(
        beat_due(&other, "pod-a", false, false, &timings, NOW_MS),
        None
    );
    // Waiting for a shard: a beat, so that its holder beats too.
    let alone = notice(0, &[]);
    assert!(beat_due(&alone, "pod-a", true, false, &timings, NOW_MS).is_some());
}

#[test]
fn a_beat_is_written_again_only_once_it_runs_out_within_half_a_lease() {
    let timings = LeaseTimings::default();
    let fresh = notice(0, &[("pod-a", NOW_MS + LEASE_MS / 2)]);
    assert_eq!(
        beat_due(&fresh, "pod-a", true, false, &timings, NOW_MS),
        None
    );
    let ageing = notice(0, &[("pod-a", NOW_MS + LEASE_MS / 2 - 1)]);
    assert!(beat_due(&ageing, "pod-a", true, false, &timings, NOW_MS).is_some());
}

#[test]
fn a_beat_removes_the_beats_of_instances_gone_for_minutes() {
    let timings = LeaseTimings::default();
    let forget = millis(FORGET_AFTER);
    let old = notice(
        0,
        &[
            ("gone", NOW_MS - forget - 1),
            ("paused", NOW_MS - forget + 1),
            ("pod-a", NOW_MS - forget - 1),
        ],
    );
    let beat = beat_due(&old, "pod-a", true, false, &timings, NOW_MS).expect("a beat");
    assert_eq!(beat.forget, vec!["gone".to_owned()]);
}

#[test]
fn the_rows_are_read_at_the_first_notice_and_when_the_counter_moves() {
    let mut watch = Watch::default();
    assert!(
        watch.counter_moved(&notice(3, &[]), true),
        "the first notice"
    );
    watch.poll_read(&Rows::new());
    assert!(!watch.counter_moved(&notice(3, &[]), true));
    assert!(
        watch.counter_moved(&notice(4, &[]), true),
        "a release bumped it"
    );
    // Not read yet: the counter still counts as moved at the next poll.
    assert!(
        watch.counter_moved(&notice(4, &[]), true),
        "until the rows were read"
    );
    // The read failed, and a round read them instead: seen.
    watch.poll_failed();
    assert!(!watch.counter_moved(&notice(4, &[]), true));
    // Waiting for nothing: no rows, and the counter is seen.
    assert!(!watch.counter_moved(&notice(5, &[]), false));
    assert!(!watch.counter_moved(&notice(5, &[]), true));
}

#[test]
fn a_live_beat_counts_as_its_holders_renewals() {
    let mut watch = Watch::default();
    let shard: Arc<str> = Arc::from("shardId-0");
    let other: Arc<str> = Arc::from("shardId-1");
    let mine: Arc<str> = Arc::from("shardId-2");
    watch.round_read(&Rows::from([
        (Arc::clone(&shard), held("pod-b", NOW_MS - 3_000)),
        (Arc::clone(&other), held("pod-c", NOW_MS - 3_000)),
        (Arc::clone(&mine), held("pod-a", NOW_MS - 3_000)),
    ]));
    let beats = notice(
        0,
        &[
            ("pod-b", NOW_MS + 6_000),
            ("pod-c", NOW_MS - 2_000),
            ("pod-a", NOW_MS + 6_000),
        ],
    );
    let hinted = watch.hinted_rows(&beats, "pod-a", NOW_MS);
    let expiry = |id: &Arc<str>| hinted[id].as_ref().map(|row| row.expiry_ms);
    assert_eq!(expiry(&shard), Some(NOW_MS + 6_000), "pod-b beats");
    assert_eq!(expiry(&other), Some(NOW_MS - 3_000), "pod-c's beat lapsed");
    assert_eq!(
        expiry(&mine),
        Some(NOW_MS - 3_000),
        "its own rows are as read"
    );
    // A poll's rows replace what was known of them.
    watch.poll_read(&Rows::from([(
        Arc::clone(&other),
        held("pod-c", NOW_MS + 9_000),
    )]));
    let hinted = watch.hinted_rows(&beats, "pod-a", NOW_MS);
    assert_eq!(
        hinted[&other].as_ref().map(|row| row.expiry_ms),
        Some(NOW_MS + 9_000)
    );
    assert_eq!(hinted.len(), 3);
}

#[test]
fn rows_kept_by_beat_are_judged_by_their_holders_beats_as_last_read() {
    let kept = NOW_MS + crate::lease::millis(crate::lease::KEPT_BY_BEAT);
    let rows: Rows = [
        ("alive", held("pod-b", kept)),
        ("lapsed", held("pod-c", kept)),
        ("no-beat", held("pod-d", kept)),
        ("renewed", held("pod-b", NOW_MS + LEASE_MS)),
        ("free", None),
    ]
    .into_iter()
    .map(|(shard, row)| (Arc::from(shard), row))
    .collect();
    let read = notice(1, &[("pod-b", NOW_MS + 5_000), ("pod-c", NOW_MS - 2_000)]);
    let judged = judged_by_beats(&rows, &read, NOW_MS);
    let expiry = |shard: &str| judged[shard].as_ref().map(|row| row.expiry_ms);
    assert_eq!(expiry("alive"), Some(NOW_MS + 5_000));
    assert_eq!(expiry("lapsed"), Some(NOW_MS - 2_000));
    assert_eq!(expiry("no-beat"), Some(0), "no beat: lapsed");
    assert_eq!(
        expiry("renewed"),
        Some(NOW_MS + LEASE_MS),
        "renewed rows as they are"
    );
    assert_eq!(judged["free"], None);
    assert!(judged["lapsed"].as_ref().unwrap().is_expired_at(NOW_MS));
    assert!(!judged["alive"].as_ref().unwrap().is_expired_at(NOW_MS));
    // Counter and owner stay: a take-over is conditioned on them.
    assert_eq!(judged["lapsed"], {
        let mut row = rows["lapsed"].clone();
        row.as_mut().unwrap().expiry_ms = NOW_MS - 2_000;
        row
    });
    // Without a row kept by beat, nothing is copied.
    let plain: Rows = [(Arc::from("renewed"), held("pod-b", NOW_MS + LEASE_MS))].into();
    assert!(matches!(
        judged_by_beats(&plain, &read, NOW_MS),
        Cow::Borrowed(_)
    ));
}

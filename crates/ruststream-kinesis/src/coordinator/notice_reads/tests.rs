use super::*;

const LEASE: Duration = Duration::from_secs(10);
const NOW: u64 = 1_700_000_000_000;

fn beats(ends: &[(&str, u64)]) -> BTreeMap<String, u64> {
    ends.iter()
        .map(|(owner, end)| ((*owner).to_owned(), *end))
        .collect()
}

#[test]
fn a_store_that_keeps_the_notice_whole_reads_it_whole_every_time() {
    let mut reads = NoticeReads::new(false);
    reads.whole_read(&beats(&[("a", NOW + 9_000)]), LEASE, NOW, true);
    assert!(reads.whole_due(NOW + 1));
}

#[test]
fn the_first_read_is_whole_and_the_next_when_the_first_live_beat_ends() {
    let mut reads = NoticeReads::new(true);
    assert!(reads.whole_due(NOW), "nothing known yet");
    reads.whole_read(
        // `gone`'s beat ended beyond the skew before the read: no read revives it.
        &beats(&[
            ("a", NOW + 9_000),
            ("b", NOW + 7_000),
            ("gone", NOW - 2_001),
        ]),
        LEASE,
        NOW,
        true,
    );
    assert!(!reads.whole_due(NOW + 1_000), "the head alone in between");
    assert!(!reads.whole_due(NOW + 6_999));
    assert!(
        reads.whole_due(NOW + 7_000),
        "b's beat ends: is there a later one?"
    );
}

#[test]
fn a_beat_that_ended_within_the_skew_has_the_next_read_whole() {
    let mut reads = NoticeReads::new(true);
    // Still counted alive for a second: a whole read tells whether it beat again.
    reads.whole_read(&beats(&[("late", NOW - 1_000)]), LEASE, NOW, true);
    assert!(reads.whole_due(NOW + 1));
}

#[test]
fn with_no_live_beat_the_whole_notice_is_read_a_lease_apart() {
    let mut reads = NoticeReads::new(true);
    reads.whole_read(&beats(&[("gone", NOW - 60_000)]), LEASE, NOW, true);
    assert!(!reads.whole_due(NOW + 9_999));
    assert!(
        reads.whole_due(NOW + 10_000),
        "an instance that joined is seen a lease later at most"
    );
    reads.whole_read(&beats(&[("far", NOW + 60_000)]), LEASE, NOW, true);
    assert!(reads.whole_due(NOW + 10_000), "a lease at the latest");
}

#[test]
fn a_wall_clock_stepped_back_reads_whole() {
    let mut reads = NoticeReads::new(true);
    reads.whole_read(&beats(&[("a", NOW + 9_000)]), LEASE, NOW, true);
    assert!(
        reads.whole_due(NOW - 60_000),
        "no head alone for the minute the clock went back"
    );
}

#[test]
fn after_this_runs_record_was_answered_the_next_poll_reads_whole_whatever_reads_come_between() {
    let mut reads = NoticeReads::new(true);
    reads.whole_read(&beats(&[("a", NOW + 9_000)]), LEASE, NOW, true);
    reads.whole_next();
    // A take-over's whole read, which the check for another run does not judge.
    reads.whole_read(&beats(&[("a", NOW + 9_000)]), LEASE, NOW + 500, false);
    assert!(reads.whole_due(NOW + 1_000));
    reads.whole_read(&beats(&[("a", NOW + 9_000)]), LEASE, NOW + 1_000, true);
    assert!(!reads.whole_due(NOW + 2_000));
}

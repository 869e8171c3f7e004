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
    reads.whole_read(&beats(&[("a", NOW + 9_000)]), LEASE, NOW);
    assert!(reads.whole_due(NOW + 1));
}

#[test]
fn the_first_read_is_whole_and_the_next_when_the_first_live_beat_ends() {
    let mut reads = NoticeReads::new(true);
    assert!(reads.whole_due(NOW), "nothing known yet");
    reads.whole_read(
        // `gone`'s beat had ended before the read: it ends no later, and no read revives it.
        &beats(&[("a", NOW + 9_000), ("b", NOW + 7_000), ("gone", NOW - 1)]),
        LEASE,
        NOW,
    );
    assert!(!reads.whole_due(NOW + 1_000), "the head alone in between");
    assert!(!reads.whole_due(NOW + 6_999));
    assert!(
        reads.whole_due(NOW + 7_000),
        "b's beat ends: is there a later one?"
    );
}

#[test]
fn with_no_live_beat_the_whole_notice_is_read_a_lease_apart() {
    let mut reads = NoticeReads::new(true);
    reads.whole_read(&beats(&[("gone", NOW - 60_000)]), LEASE, NOW);
    assert!(!reads.whole_due(NOW + 9_999));
    assert!(
        reads.whole_due(NOW + 10_000),
        "an instance that joined is seen a lease later at most"
    );
    reads.whole_read(&beats(&[("far", NOW + 60_000)]), LEASE, NOW);
    assert!(reads.whole_due(NOW + 10_000), "a lease at the latest");
}

#[test]
fn after_this_runs_record_was_answered_the_next_read_is_whole() {
    let mut reads = NoticeReads::new(true);
    reads.whole_read(&beats(&[("a", NOW + 9_000)]), LEASE, NOW);
    reads.whole_next();
    assert!(reads.whole_due(NOW + 1));
}

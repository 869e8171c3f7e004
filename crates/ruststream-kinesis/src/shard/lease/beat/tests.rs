//! The beat chain on a virtual clock: its cadence, the chain's grants, a lapse and a new chain,
//! and the shard leases a chain may carry.

use super::*;

const S: Duration = Duration::from_secs(1);

/// Milliseconds of the wall clock at virtual time zero.
const EPOCH_MS: u64 = 1_000_000;

fn ms(at: Duration) -> u64 {
    EPOCH_MS + millis(at)
}

fn beat() -> BeatLease<Duration> {
    BeatLease::new(LeaseTimings::default())
}

/// Writes the beat due at `sent` and answers it at `answered`.
fn exchange(
    beat: &mut BeatLease<Duration>,
    sent: Duration,
    answered: Duration,
    answer: BeatAnswer,
) -> Option<BeatNews> {
    assert_eq!(
        beat.next(sent, ms(sent)),
        BeatNext::Send {
            until_ms: ms(sent + 10 * S)
        },
        "a beat is due at {sent:?}"
    );
    beat.on_answer(answered, ms(answered), answer)
}

#[test]
fn the_first_beat_is_due_at_once_and_one_is_in_flight_at_a_time() {
    let mut beat = beat();
    assert!(matches!(
        beat.next(Duration::ZERO, ms(Duration::ZERO)),
        BeatNext::Send { .. }
    ));
    assert_eq!(beat.next(S, ms(S)), BeatNext::Wait(None));
    assert!(!beat.counts_at(S, ms(S)), "nothing counts before an answer");
}

#[test]
fn an_answered_beat_counts_until_lease_minus_the_holder_margin_from_its_send() {
    let mut beat = beat();
    assert_eq!(
        exchange(&mut beat, 2 * S, 3 * S, BeatAnswer::Done),
        Some(BeatNews::Began)
    );
    let grant = beat.grant().expect("a chain began");
    // 10 s lease, 1 s margin, sent at 2 s: it counts until 11 s; the chain since its answer.
    assert_eq!(grant.valid_until, 11 * S);
    assert_eq!(grant.valid_until_ms, ms(11 * S));
    assert_eq!((grant.since, grant.since_ms), (3 * S, ms(3 * S)));
    assert!(beat.counts_at(11 * S - Duration::from_millis(1), ms(11 * S) - 1));
    assert!(!beat.counts_at(11 * S, ms(11 * S)));
    // By the wall clock too: a host suspended past it finds the chain lapsed.
    assert!(!beat.counts_at(4 * S, ms(11 * S)));
    // The next beat is due a renewal interval after the last was sent.
    assert_eq!(beat.next(4 * S, ms(4 * S)), BeatNext::Wait(Some(5 * S)));
}

#[test]
fn beats_answered_while_the_chain_counts_extend_it_and_keep_its_start() {
    let mut beat = beat();
    exchange(&mut beat, Duration::ZERO, S, BeatAnswer::Done);
    assert_eq!(exchange(&mut beat, 3 * S, 4 * S, BeatAnswer::Done), None);
    assert_eq!(exchange(&mut beat, 6 * S, 7 * S, BeatAnswer::Done), None);
    let grant = beat.grant().expect("a chain");
    assert_eq!(grant.since, S, "one chain since the first answer");
    assert_eq!(grant.valid_until, 15 * S);
}

#[test]
fn a_late_answer_never_shortens_the_chain() {
    let mut beat = beat();
    exchange(&mut beat, Duration::ZERO, S, BeatAnswer::Done);
    // Sent at 3 s, answered only at 8 s: it counts from its send, and the chain still counted.
    exchange(&mut beat, 3 * S, 8 * S, BeatAnswer::Done);
    assert_eq!(beat.grant().expect("a chain").valid_until, 12 * S);
    assert_eq!(beat.grant().expect("a chain").since, S);
}

#[test]
fn a_beat_answered_after_the_chain_lapsed_starts_a_new_chain_at_its_answer() {
    let mut beat = beat();
    exchange(&mut beat, Duration::ZERO, S, BeatAnswer::Done);
    // Every beat fails until the chain (valid until 9 s) lapsed.
    assert_eq!(
        exchange(&mut beat, 3 * S, 4 * S, BeatAnswer::Failed),
        Some(BeatNews::Failed)
    );
    let mut at = 4 * S;
    while at < 9 * S {
        let BeatNext::Wait(Some(due)) = beat.next(at, ms(at)) else {
            panic!("a retry is timed at {at:?}");
        };
        assert!(due > at, "the retry waits");
        exchange(&mut beat, due, due, BeatAnswer::Failed);
        at = due;
    }
    assert!(!beat.counts_at(9 * S, ms(9 * S)));
    // Sent before the lapse, answered after it: a new chain, from the answer.
    let BeatNext::Wait(Some(due)) = beat.next(at, ms(at)) else {
        panic!("a retry is timed");
    };
    assert_eq!(
        exchange(&mut beat, due, due + S, BeatAnswer::Done),
        Some(BeatNews::Restarted)
    );
    let grant = beat.grant().expect("a new chain");
    assert_eq!(grant.since, due + S);
    assert_eq!(grant.valid_until, due + 9 * S);
}

#[test]
fn failed_beats_are_retried_within_what_is_left_of_the_chain() {
    let mut beat = beat();
    exchange(&mut beat, Duration::ZERO, S, BeatAnswer::Done);
    // The chain counts until 9 s; a failure at 8 s leaves 1 s: retried within half of it.
    exchange(&mut beat, 3 * S, 8 * S, BeatAnswer::Failed);
    assert_eq!(
        beat.next(8 * S, ms(8 * S)),
        BeatNext::Wait(Some(8 * S + Duration::from_millis(500)))
    );
}

#[test]
fn a_chain_carries_a_shard_lease_only_if_it_began_while_the_lease_counted() {
    let mut beat = beat();
    exchange(&mut beat, Duration::ZERO, S, BeatAnswer::Done);
    let grant = beat.grant().expect("a chain");
    // A shard taken at 0.5 s counts until 9.5 s by its row: the chain began at 1 s, within.
    assert!(grant.covers(9 * S + S / 2, ms(9 * S + S / 2)));
    // A shard whose lease ran out at 1 s, before the chain began: another instance may have
    // taken it in between, and the chain does not revive it.
    assert!(!grant.covers(S, ms(S)));
    // By the wall clock too.
    assert!(!grant.covers(9 * S, ms(Duration::ZERO)));
}

#[test]
fn a_beat_answered_after_its_own_end_begins_no_chain() {
    let mut beat = beat();
    // Sent at 0 s, it could count until 9 s; answered at 9 s it counts for nothing.
    assert_eq!(
        exchange(&mut beat, Duration::ZERO, 9 * S, BeatAnswer::Done),
        None
    );
    assert_eq!(beat.grant(), None);
    assert!(!beat.counts_at(9 * S, ms(9 * S)));
    // The next beat is due at once (a renewal interval after the late one's send).
    assert!(matches!(beat.next(9 * S, ms(9 * S)), BeatNext::Send { .. }));
}

#[test]
fn beats_tried_for_a_lease_with_no_chain_fall_quiet_for_two_leases() {
    let mut beat = beat();
    // Every beat fails from the start (its answer lost, though it may land).
    let mut now = Duration::ZERO;
    let mut news = None;
    while now < 20 * S {
        match beat.next(now, ms(now)) {
            BeatNext::Send { .. } => {
                news = beat.on_answer(now + S, ms(now + S), BeatAnswer::Failed);
                if news == Some(BeatNews::Quiet) {
                    break;
                }
                now += S;
            }
            BeatNext::Wait(Some(at)) => now = at,
            BeatNext::Wait(None) => panic!("nothing in flight"),
        }
    }
    assert_eq!(news, Some(BeatNews::Quiet), "quiet within a lease of tries");
    let quiet_from = now + S;
    assert!(
        quiet_from >= 10 * S,
        "not before a lease of tries: {quiet_from:?}"
    );
    // Nothing is written for two leases (the defaults' lease, skew, two renewals and a poll
    // are less), then the beat tries again.
    assert_eq!(beat.quiet_for(), 20 * S);
    assert_eq!(
        beat.next(quiet_from + 19 * S, ms(quiet_from + 19 * S)),
        BeatNext::Wait(Some(quiet_from + 20 * S))
    );
    assert!(matches!(
        beat.next(quiet_from + 20 * S, ms(quiet_from + 20 * S)),
        BeatNext::Send { .. }
    ));
}

#[test]
fn a_quiet_beat_outlasts_a_lapse_and_the_takers_next_look() {
    // With the handover poll off, the takers look at each listing (30 s here).
    let timings = LeaseTimings::default()
        .with_handover_poll_interval(Duration::ZERO)
        .with_listing_interval(30 * S);
    let beat = BeatLease::<Duration>::new(timings);
    // 10 s lease + 1 s skew + two 3 s renewals + a 30 s listing.
    assert_eq!(beat.quiet_for(), 47 * S);
}

#[test]
fn beats_refused_unapplied_never_fall_quiet() {
    let mut beat = beat();
    let mut now = Duration::ZERO;
    while now < 60 * S {
        match beat.next(now, ms(now)) {
            BeatNext::Send { .. } => {
                let news = beat.on_answer(now, ms(now), BeatAnswer::NotApplied);
                assert_eq!(news, Some(BeatNews::Failed), "at {now:?}");
            }
            BeatNext::Wait(Some(at)) => now = at,
            BeatNext::Wait(None) => panic!("nothing in flight"),
        }
    }
}

#[test]
fn failed_beats_while_the_chain_counts_never_fall_quiet() {
    let mut beat = beat();
    assert_eq!(
        exchange(&mut beat, Duration::ZERO, S, BeatAnswer::Done),
        Some(BeatNews::Began)
    );
    // The chain counts until 9 s; beats fail meanwhile and after, yet only a lease of tries
    // after it lapsed is the beat quiet.
    let mut now = 3 * S;
    let mut quiet_at = None;
    while now < 40 * S {
        match beat.next(now, ms(now)) {
            BeatNext::Send { .. } => {
                let answered = now + Duration::from_millis(100);
                if beat.on_answer(answered, ms(answered), BeatAnswer::Failed)
                    == Some(BeatNews::Quiet)
                {
                    quiet_at = Some(answered);
                    break;
                }
            }
            BeatNext::Wait(Some(at)) => now = at,
            BeatNext::Wait(None) => panic!("nothing in flight"),
        }
    }
    let quiet_at = quiet_at.expect("quiet at last");
    assert!(
        quiet_at >= 9 * S + 10 * S,
        "a lease of tries after the chain lapsed at 9 s: {quiet_at:?}"
    );
}

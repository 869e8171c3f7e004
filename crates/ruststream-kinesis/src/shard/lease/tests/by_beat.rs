//! A shard's lease kept alive by the instance's beat: no renewal written, as long as the chain
//! of beats that counted at its take, lost for good once it ran out.

use super::*;
use crate::shard::lease::beat::{BeatAnswer, BeatLease, BeatNext};

/// A chain of beats answered at once, every renewal interval from `first` up to `last`.
fn beats(first: Duration, last: Duration) -> BeatLease<Duration> {
    let mut beat = BeatLease::new(timings());
    let mut at = first;
    while at <= last {
        match beat.next(at, ms(at)) {
            BeatNext::Send { .. } => {
                beat.on_answer(at, ms(at), BeatAnswer::Done);
            }
            BeatNext::Wait(Some(due)) => at = due,
            BeatNext::Wait(None) => unreachable!("every beat is answered at once"),
        }
    }
    beat
}

/// A shard taken at `sent` by an instance whose chain stood as `beat`'s.
fn taken_by_beat_at(sent: Duration, beat: &BeatLease<Duration>) -> ShardLease<Duration> {
    ShardLease::taken_by_beat(timings(), sent, ms(sent), beat.grant().as_ref())
}

#[test]
fn a_lease_kept_alive_by_beats_lasts_as_the_chain_and_writes_no_renewal() {
    // Beats at 0 and 3 s: the chain counts until 12 s.
    let beat = beats(Duration::ZERO, 3 * S);
    let mut lease = taken_by_beat_at(4 * S, &beat);
    assert_eq!(
        lease.valid_until(),
        12 * S,
        "the chain's end, not the take's lease"
    );
    // Nothing to write: the timer is the moment the chain runs out.
    assert_eq!(lease.next(7 * S, ms(7 * S)), Next::Wait(Some(12 * S)));
    // A checkpoint still goes out, conditioned on the row as always.
    assert!(lease.checkpoint_ready(SharedStr::from("5")));
    assert_eq!(lease.next(7 * S, ms(7 * S)), Next::Send(checkpoint("5")));
}

#[test]
fn a_take_while_the_chain_does_not_count_grants_nothing() {
    assert!(!taken_by_beat_at(S, &BeatLease::new(timings())).may_deliver(S, ms(S)));
    // The chain of a beat at 0 s ran out at 9 s.
    let lapsed = beats(Duration::ZERO, Duration::ZERO);
    let mut lease = taken_by_beat_at(10 * S, &lapsed);
    assert!(!lease.may_deliver(10 * S, ms(10 * S)));
    assert_eq!(
        lease.next(10 * S, ms(10 * S)),
        Next::Ended(Ending::Lost(Lost::RanOut))
    );
}

#[test]
fn the_chain_that_counted_at_the_take_carries_the_lease_on() {
    let mut lease = taken_by_beat_at(S, &beats(Duration::ZERO, Duration::ZERO));
    let beat = beats(Duration::ZERO, 30 * S);
    lease.follow_beat(&beat.grant().expect("a chain"));
    // The last beat (30 s) counts until 39 s, and so does the lease.
    assert!(lease.may_deliver(38 * S, ms(38 * S)));
    assert!(!lease.may_deliver(39 * S, ms(39 * S)));
    assert_eq!(lease.next(38 * S, ms(38 * S)), Next::Wait(Some(39 * S)));
}

#[test]
fn a_chain_begun_after_the_lease_ran_out_never_revives_it() {
    let mut lease = taken_by_beat_at(S, &beats(Duration::ZERO, Duration::ZERO));
    // The lease ran out at 9 s with its chain; a new chain begins at 10 s: another instance may
    // have taken the shard at 9 s, when no beat kept it.
    let beat = beats(10 * S, 12 * S);
    lease.follow_beat(&beat.grant().expect("a chain"));
    assert!(!lease.may_deliver(11 * S, ms(11 * S)));
    assert_eq!(
        lease.next(11 * S, ms(11 * S)),
        Next::Ended(Ending::Lost(Lost::RanOut))
    );
    assert_eq!(lease.take_news(), vec![LeaseNews::RanOut]);
}

#[test]
fn a_checkpoint_does_not_extend_a_lease_kept_alive_by_beats() {
    let mut lease = taken_by_beat_at(S, &beats(Duration::ZERO, Duration::ZERO));
    assert!(lease.checkpoint_ready(SharedStr::from("5")));
    exchange(&mut lease, 8 * S, &checkpoint("5"), 8 * S, Answer::Done);
    // The row's expiry protects nothing from an instance that judges by beats: the lease still
    // ends with its chain, at 9 s.
    assert!(!lease.may_deliver(9 * S, ms(9 * S)));
}

#[test]
fn a_lease_not_kept_by_beats_ignores_the_chain() {
    let mut lease = taken_at(Duration::ZERO);
    lease.follow_beat(&beats(S, 30 * S).grant().expect("a chain"));
    assert!(
        !lease.may_deliver(9 * S, ms(9 * S)),
        "only its renewals keep it"
    );
}

#[test]
fn a_suspended_host_finds_its_beat_carried_lease_run_out_by_the_wall_clock() {
    let mut lease = taken_by_beat_at(S, &beats(Duration::ZERO, Duration::ZERO));
    lease.follow_beat(&beats(Duration::ZERO, 6 * S).grant().expect("a chain"));
    // The monotonic clock stood still while the host slept; the wall clock ran on past 15 s.
    assert!(!lease.may_deliver(7 * S, ms(20 * S)));
    assert_eq!(
        lease.next(7 * S, ms(20 * S)),
        Next::Ended(Ending::Lost(Lost::RanOut))
    );
}

#[test]
fn the_rows_writes_of_a_lease_kept_alive_by_beats_keep_it_kept_by_beat() {
    let lease = taken_by_beat_at(S, &beats(Duration::ZERO, Duration::ZERO));
    assert_eq!(lease.row_lease(), crate::lease::KEPT_BY_BEAT);
    assert_eq!(taken_at(S).row_lease(), timings().lease());
}

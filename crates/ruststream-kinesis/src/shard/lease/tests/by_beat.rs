//! A shard's lease kept alive by the instance's beat: no renewal written, carried by a chain of
//! beats that began while it counted, lost for good once it ran out.

use super::*;
use crate::shard::lease::beat::{BeatAnswer, BeatLease, BeatNext};

fn taken_by_beat_at(sent: Duration) -> ShardLease<Duration> {
    ShardLease::taken_by_beat(timings(), sent, ms(sent))
}

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

#[test]
fn a_lease_kept_alive_by_beats_writes_no_renewal() {
    let mut lease = taken_by_beat_at(Duration::ZERO);
    // Nothing to write: the timer is the moment the take's grant runs out (9 s).
    assert_eq!(lease.next(3 * S, ms(3 * S)), Next::Wait(Some(9 * S)));
    // A checkpoint still goes out, conditioned on the row as always.
    assert!(lease.checkpoint_ready(Arc::from("5")));
    assert_eq!(lease.next(3 * S, ms(3 * S)), Next::Send(checkpoint("5")));
}

#[test]
fn a_chain_that_began_while_the_lease_counted_carries_it() {
    let mut lease = taken_by_beat_at(Duration::ZERO);
    let beat = beats(Duration::ZERO, 30 * S);
    lease.follow_beat(&beat.grant().expect("a chain"));
    // The last beat (30 s) counts until 39 s, and so does the lease.
    assert!(lease.may_deliver(38 * S, ms(38 * S)));
    assert!(!lease.may_deliver(39 * S, ms(39 * S)));
    assert_eq!(lease.next(38 * S, ms(38 * S)), Next::Wait(Some(39 * S)));
}

#[test]
fn a_lease_that_ran_out_before_the_chain_began_is_lost_for_good() {
    let mut lease = taken_by_beat_at(Duration::ZERO);
    // The take counts until 9 s; the chain begins at 10 s: another instance may have taken the
    // shard at 9 s, when neither its row nor a beat kept it.
    let beat = beats(10 * S, 12 * S);
    lease.follow_beat(&beat.grant().expect("a chain"));
    assert!(!lease.may_deliver(11 * S, ms(11 * S)));
    assert_eq!(
        lease.next(11 * S, ms(11 * S)),
        Next::Ended(Ending::Lost(Lost::RanOut))
    );
    assert_eq!(lease.take_news(), vec![LeaseNews::RanOut]);
    // A later chain changes nothing: the lease is ended.
    lease.follow_beat(&beats(12 * S, 20 * S).grant().expect("a chain"));
    assert!(!lease.may_deliver(13 * S, ms(13 * S)));
}

#[test]
fn a_lease_renewed_by_a_checkpoint_is_carried_by_a_chain_begun_within_it() {
    let mut lease = taken_by_beat_at(Duration::ZERO);
    // A checkpoint sent at 8 s renews the row until 17 s.
    assert!(lease.checkpoint_ready(Arc::from("5")));
    exchange(&mut lease, 8 * S, &checkpoint("5"), 8 * S, Answer::Done);
    // A chain begun at 12 s (after the take's grant, within the checkpoint's) carries it: its
    // last beat (18 s) counts until 27 s.
    lease.follow_beat(&beats(12 * S, 20 * S).grant().expect("a chain"));
    assert!(lease.may_deliver(26 * S, ms(26 * S)));
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
    let mut lease = taken_by_beat_at(Duration::ZERO);
    lease.follow_beat(&beats(S, 6 * S).grant().expect("a chain"));
    // The monotonic clock stood still while the host slept; the wall clock ran on past 15 s.
    assert!(!lease.may_deliver(7 * S, ms(20 * S)));
    assert_eq!(
        lease.next(7 * S, ms(20 * S)),
        Next::Ended(Ending::Lost(Lost::RanOut))
    );
}

//! The lease machine on a virtual clock: deadlines, renewals, retries, the one write in flight,
//! folded checkpoints and the closing writes.

use super::*;
use crate::telemetry::LeaseEvent;

const S: Duration = Duration::from_secs(1);

/// Milliseconds of the wall clock at virtual time zero.
const EPOCH_MS: u64 = 1_000_000;

fn ms(at: Duration) -> u64 {
    EPOCH_MS + millis(at)
}

/// The default timings, but a checkpoint write per move (cadence zero), so each test sees the
/// writes its settlements ask for; the cadence has tests of its own.
fn timings() -> LeaseTimings {
    LeaseTimings::default().with_checkpoint_interval(Duration::ZERO)
}

fn taken_at(sent: Duration) -> ShardLease<Duration> {
    ShardLease::taken(timings(), sent, ms(sent))
}

/// Sends what the machine asks for at `now`, which must be `write`, and answers it at `answered`.
fn exchange(
    lease: &mut ShardLease<Duration>,
    now: Duration,
    write: &Write,
    answered: Duration,
    answer: Answer,
) {
    assert_eq!(
        lease.next(now, ms(now)),
        Next::Send(write.clone()),
        "at {now:?}"
    );
    lease.on_answer(answered, answer);
}

fn checkpoint(value: &str) -> Write {
    Write::Checkpoint {
        checkpoint: SharedStr::from(value),
        behind_ms: None,
    }
}

#[test]
fn a_taken_lease_delivers_until_lease_minus_the_holder_margin() {
    let mut lease = taken_at(5 * S);
    // 10 s lease, 1 s margin: from 5 s the lease may be used until 14 s (exclusive).
    assert_eq!(lease.valid_until(), 14 * S);
    assert!(lease.may_deliver(5 * S, ms(5 * S)));
    let just_before = 14 * S - Duration::from_millis(1);
    assert!(lease.may_deliver(just_before, ms(just_before)));
    assert!(!lease.may_deliver(14 * S, ms(14 * S)));
    // The first renewal is due `renew` after the take was sent.
    assert_eq!(lease.next(5 * S, ms(5 * S)), Next::Wait(Some(8 * S)));
    assert_eq!(lease.next(8 * S, ms(8 * S)), Next::Send(Write::Renew));
}

#[test]
fn a_renewal_extends_from_the_moment_it_was_sent_however_late_its_answer() {
    let mut lease = taken_at(Duration::ZERO);
    // Sent at 3 s, answered at 8 s: the lease counts from the send.
    exchange(&mut lease, 3 * S, &Write::Renew, 8 * S, Answer::Done);
    assert_eq!(lease.valid_until(), 12 * S);
    assert!(lease.may_deliver(11 * S, ms(11 * S)));
    assert!(!lease.may_deliver(12 * S, ms(12 * S)));
    // The next renewal was due `renew` after the send, at 6 s: by 8 s it is overdue.
    assert_eq!(lease.next(8 * S, ms(8 * S)), Next::Send(Write::Renew));
}

#[test]
fn a_renewal_answered_late_never_shortens_the_lease() {
    // A take sent at 5 s, then a renewal the driver sent at once, whose send is stamped with an
    // earlier wall clock (stepped back): neither deadline moves back.
    let mut lease = taken_at(5 * S);
    assert_eq!(lease.next(8 * S, ms(2 * S)), Next::Send(Write::Renew));
    lease.on_answer(9 * S, Answer::Done);
    assert_eq!(lease.valid_until(), 17 * S);
    assert!(
        lease.may_deliver(13 * S, ms(13 * S)),
        "the take's wall deadline holds"
    );
}

#[test]
fn a_refused_write_stops_at_once_and_writes_nothing_more() {
    for refused in [Write::Renew, checkpoint("7")] {
        let mut lease = taken_at(Duration::ZERO);
        if refused != Write::Renew {
            assert!(lease.checkpoint_ready(SharedStr::from("7")));
        }
        let at = 3 * S;
        exchange(&mut lease, at, &refused, at, Answer::Refused);
        assert_eq!(
            lease.ending(),
            Some(Ending::Lost(Lost::Refused)),
            "{refused:?}"
        );
        assert!(!lease.may_deliver(at, ms(at)));
        assert!(
            !lease.checkpoint_ready(SharedStr::from("9")),
            "a settlement now is refused"
        );
        lease.close(Close::Release);
        assert_eq!(
            lease.next(at, ms(at)),
            Next::Ended(Ending::Lost(Lost::Refused)),
            "a lost lease writes no final checkpoint and no release"
        );
    }
}

#[test]
fn a_failed_renewal_is_retried_before_the_lease_runs_out() {
    let mut lease = taken_at(Duration::ZERO);
    // 9 s valid, failed at 3 s: 6 s left, retry after renew / 3 = 1 s.
    exchange(&mut lease, 3 * S, &Write::Renew, 3 * S, Answer::Failed);
    assert_eq!(lease.next(3 * S, ms(3 * S)), Next::Wait(Some(4 * S)));
    // Failed at 8.5 s: 0.5 s left, retry after half of it.
    let at = Duration::from_millis(8_500);
    exchange(&mut lease, at, &Write::Renew, at, Answer::Failed);
    assert_eq!(
        lease.next(at, ms(at)),
        Next::Wait(Some(at + Duration::from_millis(250)))
    );
    assert!(lease.may_deliver(at, ms(at)));
    // With less than MIN_RETRY left the shard stops.
    let late = 9 * S - MIN_RETRY;
    exchange(&mut lease, late, &Write::Renew, late, Answer::Failed);
    assert_eq!(lease.ending(), Some(Ending::Lost(Lost::RanOut)));
    assert!(!lease.may_deliver(late, ms(late)));
}

#[test]
fn every_retry_lands_before_the_lease_runs_out() {
    let mut lease = taken_at(Duration::ZERO);
    let mut now = 3 * S;
    loop {
        exchange(&mut lease, now, &Write::Renew, now, Answer::Failed);
        match lease.next(now, ms(now)) {
            Next::Wait(Some(at)) => {
                assert!(at > now && at < lease.valid_until(), "{at:?}");
                now = at;
            }
            Next::Ended(Ending::Lost(Lost::RanOut)) => {
                assert!(lease.valid_until().saturating_sub(now) <= MIN_RETRY);
                break;
            }
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn a_success_after_failures_resumes_the_normal_cadence() {
    let mut lease = taken_at(Duration::ZERO);
    exchange(&mut lease, 3 * S, &Write::Renew, 3 * S, Answer::Failed);
    exchange(&mut lease, 4 * S, &Write::Renew, 4 * S, Answer::Done);
    assert_eq!(lease.valid_until(), 13 * S);
    assert_eq!(lease.next(4 * S, ms(4 * S)), Next::Wait(Some(7 * S)));
}

#[test]
fn the_machine_runs_on_real_instants() {
    let now = Instant::now();
    let mut lease = ShardLease::taken(timings(), now, EPOCH_MS);
    assert!(lease.may_deliver(now, EPOCH_MS));
    assert_eq!(lease.next(now, EPOCH_MS), Next::Wait(Some(now + 3 * S)));
    lease.run_out();
    assert!(!lease.may_deliver(now, EPOCH_MS));
}

#[test]
fn short_leases_keep_their_margin() {
    let timings = LeaseTimings::new(3 * S, S).unwrap();
    let until = ShardLease::valid_after(&timings, Duration::ZERO);
    // A tenth of the lease: 300 ms.
    assert_eq!(until, Duration::from_millis(2_700));
}

#[test]
fn after_a_suspension_longer_than_the_lease_the_shard_delivers_nothing() {
    // A take sent before a 60 s suspension: by the monotonic clock it was sent just now, by the
    // wall clock a minute ago.
    let suspended = ShardLease::taken(timings(), 60 * S, ms(Duration::ZERO));
    assert!(
        suspended.valid_until() > 61 * S,
        "the monotonic clock alone would still deliver"
    );
    assert!(!suspended.may_deliver(61 * S, ms(61 * S)));
    // The monotonic deadline passed; a wall clock stepped back does not revive the lease.
    let lease = taken_at(Duration::ZERO);
    assert!(!lease.may_deliver(10 * S, ms(Duration::ZERO)));
}

#[test]
fn one_write_is_in_flight_at_a_time_and_a_checkpoint_renews() {
    let mut lease = taken_at(Duration::ZERO);
    assert!(lease.checkpoint_ready(SharedStr::from("5")));
    // Sent at 2.9 s, answered at 4 s: the renewal due at 3 s waits for it.
    let sent = Duration::from_millis(2_900);
    assert_eq!(lease.next(sent, ms(sent)), Next::Send(checkpoint("5")));
    assert!(lease.checkpoint_ready(SharedStr::from("7")));
    for now in [3 * S, 3 * S + S / 2] {
        assert_eq!(
            lease.next(now, ms(now)),
            Next::Wait(None),
            "one write in flight"
        );
    }
    lease.on_answer(4 * S, Answer::Done);
    // The checkpoint renewed: the next renewal counts from its send.
    assert_eq!(lease.valid_until(), sent + 9 * S);
    assert_eq!(lease.next(4 * S, ms(4 * S)), Next::Send(checkpoint("7")));
    lease.on_answer(4 * S, Answer::Done);
    assert_eq!(lease.next(4 * S, ms(4 * S)), Next::Wait(Some(7 * S)));
}

#[test]
fn settlements_during_a_write_fold_into_the_next_one() {
    let mut lease = taken_at(Duration::ZERO);
    assert!(lease.checkpoint_ready(SharedStr::from("1")));
    assert_eq!(lease.next(S, ms(S)), Next::Send(checkpoint("1")));
    for newer in ["2", "3", "4"] {
        assert!(lease.checkpoint_ready(SharedStr::from(newer)));
    }
    lease.on_answer(S, Answer::Done);
    exchange(&mut lease, S, &checkpoint("4"), S, Answer::Done);
    assert_eq!(lease.pending(), None);
}

#[test]
fn checkpoints_are_written_at_most_once_per_checkpoint_interval() {
    let timings = timings().with_checkpoint_interval(2 * S);
    let mut lease = ShardLease::taken(timings, Duration::ZERO, ms(Duration::ZERO));
    assert!(lease.checkpoint_ready(SharedStr::from("1")));
    exchange(&mut lease, S, &checkpoint("1"), S, Answer::Done);
    assert!(lease.checkpoint_ready(SharedStr::from("2")));
    assert_eq!(lease.next(2 * S, ms(2 * S)), Next::Wait(Some(3 * S)));
    assert!(lease.checkpoint_ready(SharedStr::from("3")));
    assert_eq!(lease.next(3 * S, ms(3 * S)), Next::Send(checkpoint("3")));
}

#[test]
fn by_default_a_checkpoint_is_written_at_most_once_a_second() {
    let mut lease = ShardLease::taken(LeaseTimings::default(), Duration::ZERO, ms(Duration::ZERO));
    assert!(lease.checkpoint_ready(SharedStr::from("1")));
    exchange(&mut lease, S / 10, &checkpoint("1"), S / 5, Answer::Done);
    // Settled 0.1 s after the write landed: it waits until a second after that.
    assert!(lease.checkpoint_ready(SharedStr::from("2")));
    let due = S / 5 + S;
    assert_eq!(lease.next(S / 2, ms(S / 2)), Next::Wait(Some(due)));
    assert!(lease.checkpoint_ready(SharedStr::from("3")));
    assert_eq!(lease.next(due, ms(due)), Next::Send(checkpoint("3")));
}

#[test]
fn a_failed_checkpoint_is_sent_again_unless_a_newer_one_replaced_it() {
    let mut lease = taken_at(Duration::ZERO);
    assert!(lease.checkpoint_ready(SharedStr::from("1")));
    exchange(&mut lease, S, &checkpoint("1"), S, Answer::Failed);
    // Retried a third of the renewal interval later.
    assert_eq!(lease.next(S, ms(S)), Next::Wait(Some(2 * S)));
    exchange(&mut lease, 2 * S, &checkpoint("1"), 2 * S, Answer::Done);

    assert!(lease.checkpoint_ready(SharedStr::from("2")));
    assert_eq!(lease.next(3 * S, ms(3 * S)), Next::Send(checkpoint("2")));
    assert!(lease.checkpoint_ready(SharedStr::from("3")));
    lease.on_answer(3 * S, Answer::Failed);
    assert_eq!(lease.pending().map(AsRef::as_ref), Some("3"));
}

#[test]
fn a_release_follows_the_write_in_flight_and_the_final_checkpoint_and_nothing_follows_it() {
    let mut lease = taken_at(Duration::ZERO);
    assert!(lease.checkpoint_ready(SharedStr::from("5")));
    assert_eq!(lease.next(S, ms(S)), Next::Send(checkpoint("5")));
    lease.close(Close::Release);
    assert!(!lease.may_deliver(S, ms(S)), "closing delivers nothing");
    assert_eq!(
        lease.next(S, ms(S)),
        Next::Wait(None),
        "after the write in flight"
    );
    // A settlement before the final checkpoint is taken still counts.
    assert!(lease.checkpoint_ready(SharedStr::from("7")));
    lease.on_answer(2 * S, Answer::Done);
    exchange(
        &mut lease,
        2 * S,
        &Write::Final(SharedStr::from("7")),
        2 * S,
        Answer::Done,
    );
    assert!(
        !lease.checkpoint_ready(SharedStr::from("8")),
        "the final checkpoint was taken"
    );
    exchange(&mut lease, 2 * S, &Write::Release, 2 * S, Answer::Done);
    for now in [2 * S, 30 * S] {
        assert_eq!(
            lease.next(now, ms(now)),
            Next::Ended(Ending::Closed { written: true })
        );
    }
}

#[test]
fn shard_end_covers_what_is_pending_and_is_followed_by_the_release() {
    let mut lease = taken_at(Duration::ZERO);
    assert!(lease.checkpoint_ready(SharedStr::from("5")));
    lease.close(Close::Finished);
    exchange(
        &mut lease,
        S,
        &Write::Final(SharedStr::from(SHARD_END)),
        S,
        Answer::Done,
    );
    exchange(&mut lease, S, &Write::Release, S, Answer::Failed);
    assert_eq!(lease.ending(), Some(Ending::Closed { written: true }));
}

#[test]
fn a_close_with_nothing_pending_releases_at_once() {
    let mut lease = taken_at(Duration::ZERO);
    lease.close(Close::Release);
    exchange(&mut lease, S, &Write::Release, S, Answer::Done);
    assert_eq!(lease.ending(), Some(Ending::Closed { written: true }));
}

#[test]
fn a_final_checkpoint_that_did_not_land_is_not_followed_by_a_release() {
    for answer in [Answer::Refused, Answer::Failed] {
        let mut lease = taken_at(Duration::ZERO);
        lease.close(Close::Finished);
        exchange(
            &mut lease,
            S,
            &Write::Final(SharedStr::from(SHARD_END)),
            S,
            answer,
        );
        assert_eq!(
            lease.next(S, ms(S)),
            Next::Ended(Ending::Closed { written: false }),
            "{answer:?}"
        );
    }
}

#[test]
fn a_lease_that_ran_out_while_closing_still_closes() {
    let mut lease = taken_at(Duration::ZERO);
    assert!(lease.checkpoint_ready(SharedStr::from("5")));
    lease.close(Close::Release);
    lease.run_out();
    assert_eq!(
        lease.next(S, ms(S)),
        Next::Send(Write::Final(SharedStr::from("5")))
    );
}

#[test]
fn a_lease_that_ran_out_before_the_close_writes_nothing() {
    let mut lease = taken_at(Duration::ZERO);
    assert!(lease.checkpoint_ready(SharedStr::from("5")));
    assert_eq!(lease.next(S, ms(S)), Next::Send(checkpoint("5")));
    lease.run_out();
    // The answer of the write that was on its way changes nothing.
    lease.on_answer(2 * S, Answer::Done);
    lease.close(Close::Release);
    assert_eq!(
        lease.next(2 * S, ms(2 * S)),
        Next::Ended(Ending::Lost(Lost::RanOut))
    );
    assert!(lease.in_flight().is_none());
}

#[test]
fn a_failed_checkpoint_a_seek_dropped_is_not_sent_again() {
    let mut lease = taken_at(Duration::ZERO);
    assert!(lease.checkpoint_ready(SharedStr::from("9")));
    assert_eq!(lease.next(S, ms(S)), Next::Send(checkpoint("9")));
    // A seek back to record 3 while the write is on its way: its failure must not bring 9 back.
    lease.drop_pending();
    lease.on_answer(S, Answer::Failed);
    assert_eq!(lease.pending(), None);
    lease.close(Close::Release);
    assert_eq!(lease.next(2 * S, ms(2 * S)), Next::Send(Write::Release));
}

#[test]
fn a_renewal_that_fails_while_closing_leaves_the_final_writes_to_go_out() {
    let mut lease = taken_at(Duration::ZERO);
    assert!(lease.checkpoint_ready(SharedStr::from("5")));
    // The store failed the renewals until too little of the lease is left for another.
    let late = 9 * S - MIN_RETRY;
    assert_eq!(lease.next(late, ms(late)), Next::Send(checkpoint("5")));
    lease.on_answer(late, Answer::Failed);
    assert_eq!(lease.next(late, ms(late)), Next::Send(Write::Renew));
    lease.close(Close::Release);
    lease.on_answer(late, Answer::Failed);
    assert_eq!(
        lease.next(late, ms(late)),
        Next::Send(Write::Final(SharedStr::from("5"))),
        "the final checkpoint still goes out; the row refuses it if another holds the shard"
    );
}

/// What the machine tells happened to the lease: each event once, from the answer that made it,
/// and nothing from a write that changed nothing.
mod news {
    use super::*;

    fn hand_over_to(to: &str) -> Write {
        Write::HandOver {
            to: Arc::from(to),
            checkpoint: Some(SharedStr::from("5")),
        }
    }

    #[test]
    fn a_release_is_told_once() {
        let mut lease = taken_at(Duration::ZERO);
        exchange(&mut lease, 3 * S, &Write::Renew, 3 * S, Answer::Done);
        assert_eq!(lease.take_news(), [], "a renewal is no news");
        assert!(lease.checkpoint_ready(SharedStr::from("5")));
        lease.close(Close::Release);
        exchange(
            &mut lease,
            4 * S,
            &Write::Final(SharedStr::from("5")),
            4 * S,
            Answer::Done,
        );
        assert_eq!(
            lease.take_news(),
            [],
            "a final checkpoint other than SHARD_END"
        );
        exchange(&mut lease, 4 * S, &Write::Release, 4 * S, Answer::Done);
        assert_eq!(lease.take_news(), [LeaseNews::Released]);
        assert_eq!(lease.take_news(), [], "told once");
    }

    #[test]
    fn a_shard_read_to_its_end_tells_so_when_shard_end_lands_whatever_its_release_answers() {
        for (release, then) in [
            (Answer::Done, vec![LeaseNews::Released]),
            (Answer::Failed, vec![]),
        ] {
            let mut lease = taken_at(Duration::ZERO);
            lease.close(Close::Finished);
            exchange(
                &mut lease,
                S,
                &Write::Final(SharedStr::from(SHARD_END)),
                S,
                Answer::Done,
            );
            assert_eq!(lease.take_news(), [LeaseNews::Finished]);
            exchange(&mut lease, S, &Write::Release, S, release);
            assert_eq!(lease.take_news(), then, "{release:?}");
        }
        let mut lease = taken_at(Duration::ZERO);
        lease.close(Close::Finished);
        exchange(
            &mut lease,
            S,
            &Write::Final(SharedStr::from(SHARD_END)),
            S,
            Answer::Failed,
        );
        assert_eq!(
            lease.take_news(),
            [],
            "SHARD_END that did not land finishes nothing"
        );
    }

    #[test]
    fn a_refused_renewal_or_checkpoint_is_a_loss_and_a_lease_that_ran_out_expired() {
        let mut lease = taken_at(Duration::ZERO);
        exchange(&mut lease, 3 * S, &Write::Renew, 3 * S, Answer::Refused);
        assert_eq!(lease.take_news(), [LeaseNews::Refused]);
        assert_eq!(LeaseNews::Refused.event(), LeaseEvent::Lost);

        let mut lease = taken_at(Duration::ZERO);
        assert!(lease.checkpoint_ready(SharedStr::from("5")));
        exchange(&mut lease, S, &checkpoint("5"), S, Answer::Refused);
        assert_eq!(lease.take_news(), [LeaseNews::Refused]);

        let mut lease = taken_at(Duration::ZERO);
        lease.run_out();
        lease.run_out();
        assert_eq!(lease.take_news(), [LeaseNews::RanOut], "once");
        assert_eq!(LeaseNews::RanOut.event(), LeaseEvent::Expired);

        // Renewals that keep failing until too little is left: the lease ran out.
        let mut lease = taken_at(Duration::ZERO);
        let late = 9 * S - MIN_RETRY;
        exchange(&mut lease, late, &Write::Renew, late, Answer::Failed);
        assert_eq!(lease.take_news(), [LeaseNews::RanOut]);
    }

    #[test]
    fn a_refused_closing_write_is_a_loss_that_says_whether_the_final_checkpoint_landed() {
        let mut lease = taken_at(Duration::ZERO);
        assert!(lease.checkpoint_ready(SharedStr::from("5")));
        lease.close(Close::Release);
        exchange(
            &mut lease,
            S,
            &Write::Final(SharedStr::from("5")),
            S,
            Answer::Refused,
        );
        let refused = LeaseNews::RefusedClosing {
            checkpoint_written: false,
        };
        assert_eq!(lease.take_news(), std::slice::from_ref(&refused));
        assert_eq!(refused.event(), LeaseEvent::Lost);

        let mut lease = taken_at(Duration::ZERO);
        assert!(lease.checkpoint_ready(SharedStr::from("5")));
        lease.close(Close::Release);
        exchange(
            &mut lease,
            S,
            &Write::Final(SharedStr::from("5")),
            S,
            Answer::Done,
        );
        exchange(&mut lease, S, &Write::Release, S, Answer::Refused);
        assert_eq!(
            lease.take_news(),
            [LeaseNews::RefusedClosing {
                checkpoint_written: true
            }]
        );
    }

    #[test]
    fn a_hand_over_that_lands_names_the_new_owner_and_a_refused_one_falls_back_to_a_release() {
        let mut lease = taken_at(Duration::ZERO);
        assert!(lease.checkpoint_ready(SharedStr::from("5")));
        lease.hand_to(Arc::from("pod-b"));
        lease.close(Close::HandOver);
        exchange(&mut lease, S, &hand_over_to("pod-b"), S, Answer::Done);
        let told = lease.take_news();
        assert_eq!(
            told,
            [LeaseNews::HandedOver {
                to: Arc::from("pod-b")
            }]
        );
        assert_eq!(told[0].event(), LeaseEvent::HandedOver);

        let mut lease = taken_at(Duration::ZERO);
        assert!(lease.checkpoint_ready(SharedStr::from("5")));
        lease.hand_to(Arc::from("pod-b"));
        lease.close(Close::HandOver);
        exchange(&mut lease, S, &hand_over_to("pod-b"), S, Answer::Refused);
        assert_eq!(
            lease.take_news(),
            [],
            "the request was replaced: the release follows"
        );
        exchange(
            &mut lease,
            S,
            &Write::Final(SharedStr::from("5")),
            S,
            Answer::Done,
        );
        exchange(&mut lease, S, &Write::Release, S, Answer::Done);
        assert_eq!(lease.take_news(), [LeaseNews::Released]);
    }
}

mod by_beat;

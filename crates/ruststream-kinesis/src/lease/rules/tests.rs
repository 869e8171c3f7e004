//! The rules on rows built by hand: each condition's edges.

use super::*;

const NOW: u64 = 1_700_000_000_000;
const LEASE: u64 = 10_000;
const SKEW: u64 = 1_000;

fn row(owner: Option<&str>, expiry_ms: u64, counter: u64) -> LeaseState {
    LeaseState {
        owner: owner.map(str::to_owned),
        expiry_ms,
        counter,
        checkpoint: Some("100".to_owned()),
        behind_ms: Some(5),
        handoff: None,
        commit_token: None,
    }
}

fn by(owner: &str) -> Take<'_> {
    Take {
        owner,
        now_ms: NOW,
        lease_ms: LEASE,
        start: Some("TRIM_HORIZON"),
        seen_row: false,
        over: None,
    }
}

#[test]
fn a_take_is_accepted_by_a_new_free_own_or_lapsed_row_and_refused_by_a_live_one() {
    assert_eq!(SKEW, millis(SKEW_TOLERANCE));
    let new = take(None, &by("a")).expect("a new row");
    assert_eq!(
        (new.owner.as_deref(), new.expiry_ms, new.counter),
        (Some("a"), NOW + LEASE, 1)
    );
    assert_eq!(new.checkpoint.as_deref(), Some("TRIM_HORIZON"));
    let free = take(Some(&row(None, 0, 4)), &by("a")).expect("a free row");
    assert_eq!(
        free.checkpoint.as_deref(),
        Some("100"),
        "a checkpoint stays"
    );
    assert_eq!(free.counter, 5);
    assert!(take(Some(&row(Some("a"), NOW + 5_000, 4)), &by("a")).is_some());
    assert!(take(Some(&row(Some("b"), NOW + 5_000, 4)), &by("a")).is_none());
    // Lapsed by the taker's clock only beyond the skew tolerance.
    assert!(take(Some(&row(Some("b"), NOW - SKEW, 4)), &by("a")).is_none());
    assert!(take(Some(&row(Some("b"), NOW - SKEW - 1, 4)), &by("a")).is_some());
}

#[test]
fn a_take_by_a_store_that_saw_the_row_needs_the_row_still_there() {
    let seen = Take {
        seen_row: true,
        ..by("a")
    };
    assert!(
        take(None, &seen).is_none(),
        "a deleted row is not created again"
    );
    assert!(take(None, &by("a")).is_some());
    assert!(take(Some(&row(None, 0, 4)), &seen).is_some());
}

#[test]
fn a_take_of_ones_own_row_never_moves_its_expiry_back() {
    let ahead = row(Some("a"), NOW + LEASE + 1, 4);
    assert!(take(Some(&ahead), &by("a")).is_none());
    let even = row(Some("a"), NOW + LEASE, 4);
    assert!(take(Some(&even), &by("a")).is_some());
}

#[test]
fn a_take_ends_every_handoff_asked_of_the_earlier_holder() {
    let mut asked = row(None, 0, 4);
    asked.handoff = Some(Handoff {
        to: "c".to_owned(),
        asked_ms: NOW,
    });
    assert_eq!(take(Some(&asked), &by("a")).unwrap().handoff, None);
}

#[test]
fn a_held_write_needs_the_owner_and_the_counter_it_saw() {
    let held_by_a = row(Some("a"), NOW + 5_000, 4);
    let renew = Held::renew(NOW, LEASE);
    assert_eq!(renew.expiry_ms(), Some(NOW + LEASE));
    let renewed = held(Some(&held_by_a), "a", Some(4), &renew).expect("held at 4");
    assert_eq!((renewed.expiry_ms, renewed.counter), (NOW + LEASE, 5));
    assert!(
        held(Some(&held_by_a), "a", None, &renew).is_some(),
        "owner alone"
    );
    assert!(held(Some(&held_by_a), "a", Some(3), &renew).is_none());
    assert!(held(Some(&held_by_a), "b", None, &renew).is_none());
    assert!(held(None, "a", None, &renew).is_none());
    let checkpoint = Held::Checkpoint {
        checkpoint: "200",
        behind_ms: None,
        expiry_ms: None,
    };
    let written = held(Some(&held_by_a), "a", Some(4), &checkpoint).unwrap();
    assert_eq!(written.checkpoint.as_deref(), Some("200"));
    assert_eq!(
        written.behind_ms, None,
        "a checkpoint says how far behind, or nothing"
    );
    assert_eq!(written.expiry_ms, held_by_a.expiry_ms);
    let released = held(Some(&held_by_a), "a", Some(4), &Held::Release).unwrap();
    assert_eq!((released.owner, released.expiry_ms), (None, 0));
}

#[test]
fn a_hand_over_needs_a_request_naming_its_taker_and_leases_short_of_the_skew() {
    let mut asked = row(Some("a"), NOW + 5_000, 4);
    let to_b = Held::hand_over("b", Some("300"), NOW, LEASE);
    assert!(
        held(Some(&asked), "a", Some(4), &to_b).is_none(),
        "no request"
    );
    asked.handoff = Some(Handoff {
        to: "c".to_owned(),
        asked_ms: NOW,
    });
    assert!(
        held(Some(&asked), "a", Some(4), &to_b).is_none(),
        "c's request"
    );
    asked.handoff = Some(Handoff {
        to: "b".to_owned(),
        asked_ms: NOW,
    });
    let handed = held(Some(&asked), "a", Some(4), &to_b).unwrap();
    assert_eq!(handed.owner.as_deref(), Some("b"));
    assert_eq!(handed.expiry_ms, NOW + LEASE - SKEW);
    assert_eq!(
        (
            handed.checkpoint.as_deref(),
            handed.behind_ms,
            handed.handoff.as_ref()
        ),
        (Some("300"), None, None)
    );
    // The taker's own take right after it, by a clock that far behind, is accepted.
    let late_clock = Take {
        now_ms: NOW - SKEW,
        ..by("b")
    };
    assert!(take(Some(&handed), &late_clock).is_some());
}

#[test]
fn a_request_stands_until_it_lapses_and_a_withdrawal_takes_only_its_own() {
    let held_by_a = row(Some("a"), NOW + 5_000, 4);
    let asked = ask_handoff(Some(&held_by_a), "a", 4, "b", NOW).unwrap();
    assert_eq!(asked.counter, 4, "a request moves no counter");
    assert!(ask_handoff(Some(&held_by_a), "a", 3, "b", NOW).is_none());
    assert!(ask_handoff(Some(&held_by_a), "x", 4, "b", NOW).is_none());
    assert!(ask_handoff(Some(&asked), "a", 4, "c", NOW + 1).is_none());
    assert!(ask_handoff(Some(&asked), "a", 4, "b", NOW + 1).is_some());
    let lapsed = NOW + millis(HANDOFF_REQUEST_LIFETIME);
    assert!(ask_handoff(Some(&asked), "a", 4, "c", lapsed).is_some());
    assert_eq!(stale_before(lapsed), NOW);
    assert!(withdraw_handoff(Some(&asked), "c").is_none());
    assert_eq!(withdraw_handoff(Some(&asked), "b").unwrap().handoff, None);
}

#[test]
fn a_row_is_deleted_only_unwritten_since_and_unheld() {
    let free = row(None, 0, 4);
    assert!(deletable(Some(&free), 4, NOW));
    assert!(!deletable(Some(&free), 3, NOW));
    assert!(!deletable(None, 4, NOW));
    assert!(!deletable(Some(&row(Some("a"), NOW, 4)), 4, NOW));
    assert!(deletable(Some(&row(Some("a"), NOW - SKEW - 1, 4)), 4, NOW));
}

#[test]
fn an_application_admits_rows_of_its_own_or_of_none() {
    assert!(application_admits(Some("w"), None));
    assert!(application_admits(Some("w"), Some("w")));
    assert!(!application_admits(Some("w"), Some("v")));
    assert!(application_admits(None, None));
    assert!(!application_admits(None, Some("w")));
}

#[test]
fn a_refusal_is_the_writes_own_landing_a_retry_or_a_lost_lease() {
    let sent = Fence {
        counter: Some(4),
        uncertain: false,
    };
    let renew = Held::renew(NOW, LEASE);
    let effect = renew.effect("a");
    // The first attempt landed: the row is what the write leaves, one past what it saw.
    let landed_row = held(Some(&row(Some("a"), NOW, 4)), "a", Some(4), &renew).unwrap();
    assert_eq!(
        sent.refused_by(&landed_row, "a", Some(&effect), false),
        Refusal::Landed(Fence::adopting(&landed_row))
    );
    assert_eq!(
        sent.refused_by(&landed_row, "a", None, false),
        Refusal::Lost,
        "not recognised, and nothing of the fence was uncertain"
    );
    // Another write moved it: lost, unless one of this store's own writes had no answer.
    let moved = row(Some("a"), NOW + 1, 6);
    assert_eq!(
        sent.refused_by(&moved, "a", Some(&effect), false),
        Refusal::Lost
    );
    let uncertain = sent.answered(Answer::Failed);
    assert_eq!(
        uncertain,
        Fence {
            counter: Some(4),
            uncertain: true
        }
    );
    assert_eq!(
        uncertain.refused_by(&moved, "a", Some(&effect), false),
        Refusal::Retry(Fence::adopting(&moved))
    );
    assert_eq!(
        uncertain.refused_by(&moved, "a", Some(&effect), true),
        Refusal::Lost
    );
    let taken = row(Some("b"), NOW + 1, 6);
    assert_eq!(
        uncertain.refused_by(&taken, "a", Some(&effect), false),
        Refusal::Lost
    );
    // A refusal keeps the counter seen; a written answer records the row's.
    assert_eq!(uncertain.answered(Answer::Refused), sent);
    assert_eq!(
        uncertain.answered(Answer::Written { counter: 9 }),
        Fence {
            counter: Some(9),
            uncertain: false
        }
    );
}

#[test]
fn a_take_over_is_accepted_by_the_row_as_read_whatever_its_expiry() {
    let over = |holder, counter| Take {
        over: Some(Over { holder, counter }),
        ..by("a")
    };
    // B's row, kept alive by its beat: its expiry lies past any lease.
    let kept = row(Some("b"), NOW + 1_000_000_000, 4);
    assert!(
        take(Some(&kept), &by("a")).is_none(),
        "a plain take waits for the expiry"
    );
    let taken = take(Some(&kept), &over("b", 4)).expect("the row as read");
    assert_eq!((taken.owner.as_deref(), taken.counter), (Some("a"), 5));
    assert_eq!(taken.expiry_ms, NOW + LEASE);
    assert_eq!(
        taken.checkpoint.as_deref(),
        Some("100"),
        "the checkpoint stays"
    );
    // Written since it was read (the holder took it again), or someone else's: refused.
    assert!(take(Some(&kept), &over("b", 3)).is_none());
    assert!(take(Some(&kept), &over("c", 4)).is_none());
    // A second take-over, by another instance, decided on the same row finds the first one's
    // counter.
    let second = Take {
        over: Some(Over {
            holder: "b",
            counter: 4,
        }),
        ..by("c")
    };
    assert!(take(Some(&taken), &second).is_none());
    // A missing row was deleted since it was read: not created again.
    assert!(take(None, &over("b", 4)).is_none());
    // A free row is taken as by any take.
    assert!(take(Some(&row(None, 0, 7)), &over("b", 4)).is_some());
}

#[test]
fn a_row_is_kept_by_beat_when_its_expiry_lies_past_any_renewed_lease() {
    let kept = row(Some("b"), NOW + millis(crate::lease::KEPT_BY_BEAT), 4);
    assert!(kept.is_kept_by_beat(NOW));
    assert!(!kept.is_expired_at(NOW), "never expired by its expiry");
    // A reader in process renews ten-year leases: those are not kept by beat.
    let in_process = row(Some("b"), NOW + 10 * 365 * 24 * 3_600_000, 4);
    assert!(!in_process.is_kept_by_beat(NOW));
    // A released row is nobody's.
    assert!(!row(None, NOW + millis(crate::lease::KEPT_BY_BEAT), 4).is_kept_by_beat(NOW));
}

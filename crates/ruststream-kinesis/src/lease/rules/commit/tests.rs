//! The commit's rules on rows built by hand: the fence, the landing by token, all or nothing.

use super::*;
use crate::lease::rules::{Answer, Held, Refusal, held, landed};

const NOW: u64 = 1_700_000_000_000;
const LEASE: u64 = 10_000;

fn row(owner: &str, counter: u64) -> LeaseState {
    LeaseState {
        owner: Some(owner.to_owned()),
        expiry_ms: NOW + 5_000,
        counter,
        checkpoint: Some("100".to_owned()),
        ..LeaseState::default()
    }
}

fn commit(checkpoint: &str, token: &str) -> Held<'static> {
    let (checkpoint, token) = (leak(checkpoint), leak(token));
    Held::Commit {
        checkpoint,
        behind_ms: Some(7),
        expiry_ms: NOW + LEASE,
        token,
        prior: None,
    }
}

fn leak(text: &str) -> &'static str {
    Box::leak(text.to_owned().into_boxed_str())
}

fn fence(counter: u64, uncertain: bool) -> Fence {
    Fence {
        counter: Some(counter),
        uncertain,
    }
}

#[test]
fn a_commit_is_accepted_only_at_the_counter_its_writer_saw_never_on_the_owner_alone() {
    let held_by_a = row("a", 4);
    let write = commit("200", "t1");
    let written = held(Some(&held_by_a), "a", Some(4), &write).expect("held at 4");
    assert_eq!(
        (
            written.counter,
            written.checkpoint.as_deref(),
            written.behind_ms,
            written.expiry_ms,
            written.commit_token.as_deref()
        ),
        (5, Some("200"), Some(7), NOW + LEASE, Some("t1"))
    );
    assert!(held(Some(&held_by_a), "a", Some(3), &write).is_none());
    assert!(
        held(Some(&held_by_a), "a", None, &write).is_none(),
        "a commit conditioned on the owner alone could land twice"
    );
    assert!(held(Some(&row("b", 4)), "a", Some(4), &write).is_none());
    assert!(held(None, "a", Some(4), &write).is_none());
    // A later write of another kind keeps the token: the counter moved past it anyway.
    let renewed = held(Some(&written), "a", Some(5), &Held::renew(NOW, LEASE)).unwrap();
    assert_eq!(renewed.commit_token.as_deref(), Some("t1"));
}

#[test]
fn a_landed_resend_is_recognised_by_its_token_and_nothing_else_is() {
    let write = commit("200", "t1");
    let landed_row = held(Some(&row("a", 4)), "a", Some(4), &write).unwrap();
    assert!(landed(&landed_row, Some(4), &write.effect("a")));
    assert_eq!(
        fence(4, false).refused_by(&landed_row, "a", Some(&write.effect("a")), false),
        Refusal::Landed(Fence::adopting(&landed_row))
    );
    // The same values under another token: another commit's landing, not this one's.
    let other = commit("200", "t2");
    assert!(!landed(&landed_row, Some(4), &other.effect("a")));
    // A checkpoint (a write with no token) that left the same values is not the commit's.
    let plain = Held::Checkpoint {
        checkpoint: "200",
        behind_ms: Some(7),
        expiry_ms: Some(NOW + LEASE),
    };
    let checkpointed = held(Some(&row("a", 4)), "a", Some(4), &plain).unwrap();
    assert!(landed(&checkpointed, Some(4), &plain.effect("a")));
    assert!(
        !landed(&checkpointed, Some(4), &write.effect("a")),
        "a renewal's or a checkpoint's landing is not taken for a commit's"
    );
    // Not recognised without the counter it was conditioned on, nor a counter further on.
    assert!(!landed(&landed_row, None, &write.effect("a")));
    assert!(!landed(&landed_row, Some(3), &write.effect("a")));
}

#[test]
fn a_commit_of_several_rows_writes_all_of_them_or_none() {
    let (first, second) = (row("a", 4), row("a", 9));
    let rows = |second_seen| {
        [
            RowCommit {
                row: Some(&first),
                owner: "a",
                seen: 4,
                write: commit("200", "t1"),
            },
            RowCommit {
                row: Some(&second),
                owner: "a",
                seen: second_seen,
                write: commit("900", "t1"),
            },
        ]
    };
    let written = commit_rows(&rows(9)).expect("both held at what was seen");
    assert_eq!(
        written
            .iter()
            .map(|row| (row.counter, row.checkpoint.as_deref().unwrap()))
            .collect::<Vec<_>>(),
        [(5, "200"), (10, "900")]
    );
    assert_eq!(commit_rows(&rows(8)), Err(1), "the second row refuses");
    let missing = [RowCommit {
        row: None,
        owner: "a",
        seen: 0,
        write: commit("200", "t1"),
    }];
    assert_eq!(commit_rows(&missing), Err(0));
}

/// A row of a refused commit whose writer knew the row held `prior`.
fn refusal<'a>(fence: Fence, prior: Option<&'a str>, answer: RowAnswer<'a>) -> RowRefusal<'a> {
    RowRefusal {
        fence,
        prior,
        answer,
    }
}

#[test]
fn one_row_that_shows_the_landing_wins_over_a_row_taken_since() {
    let landed_row = held(Some(&row("a", 4)), "a", Some(4), &commit("200", "t1")).unwrap();
    let taken = row("b", 12);
    let answers = [
        refusal(fence(4, true), None, RowAnswer::Refused(&landed_row)),
        refusal(fence(9, true), None, RowAnswer::Refused(&taken)),
    ];
    assert_eq!(
        commit_refused(&answers, "a", "t1", false),
        CommitRefusal::Landed(vec![Some(Fence::adopting(&landed_row)), None])
    );
    assert_eq!(
        commit_refused(&answers, "a", "t2", false),
        CommitRefusal::Lost { rows: vec![0, 1] },
        "under another token the same rows are a lost lease"
    );
}

#[test]
fn a_refusal_by_rows_still_ours_after_an_uncertain_write_is_retried_once() {
    // A renewal without an answer landed after all: the row is ours, one further on, and holds
    // the token its writer knew.
    let moved = LeaseState {
        commit_token: Some("t0".to_owned()),
        ..row("a", 5)
    };
    let passed = fence(9, true);
    let answers = [
        refusal(fence(4, true), Some("t0"), RowAnswer::Refused(&moved)),
        refusal(passed, Some("u0"), RowAnswer::Accepted),
    ];
    assert_eq!(
        commit_refused(&answers, "a", "t1", false),
        CommitRefusal::Retry(vec![
            Fence::adopting(&moved),
            passed.answered(Answer::Refused)
        ])
    );
    assert_eq!(
        commit_refused(&answers, "a", "t1", true),
        CommitRefusal::Lost { rows: vec![0] },
        "once retried, a second refusal is a lost lease"
    );
    let certain = [refusal(
        fence(4, false),
        Some("t0"),
        RowAnswer::Refused(&moved),
    )];
    assert_eq!(
        commit_refused(&certain, "a", "t1", false),
        CommitRefusal::Lost { rows: vec![0] },
        "nothing of ours was uncertain: another writer moved it"
    );
    let gone = [
        refusal(fence(4, true), Some("t0"), RowAnswer::Refused(&moved)),
        refusal(fence(2, true), Some("t0"), RowAnswer::Missing),
    ];
    assert_eq!(
        commit_refused(&gone, "a", "t1", false),
        CommitRefusal::Lost { rows: vec![0, 1] }
    );
    let unknown = [refusal(fence(4, true), None, RowAnswer::Refused(&moved))];
    assert_eq!(
        commit_refused(&unknown, "a", "t1", false),
        CommitRefusal::Lost { rows: vec![0] },
        "without the token it knew, the writer cannot tell its own commit landed"
    );
}

#[test]
fn a_counter_moved_by_a_commit_of_our_own_is_never_retried() {
    // Commit t1 (seen 4) landed and its answer was lost; a restart under the same owner id took
    // the row (counter 6, token t1 still). The resend, evaluated again, is refused by the
    // counter and shows no landing (6, not 5): a retry would apply t1's units a second time.
    let landed = held(Some(&row("a", 4)), "a", Some(4), &commit("200", "t1")).unwrap();
    let retaken = LeaseState {
        counter: 6,
        ..landed.clone()
    };
    let answers = [refusal(
        fence(4, true),
        Some("t0"),
        RowAnswer::Refused(&retaken),
    )];
    assert_eq!(
        commit_refused(&answers, "a", "t1", false),
        CommitRefusal::Lost { rows: vec![0] }
    );
    // The same through the fence of a single row, as a store's held write judges it.
    let write = Held::Commit {
        checkpoint: "200",
        behind_ms: Some(7),
        expiry_ms: NOW + LEASE,
        token: "t2",
        prior: Some("t0"),
    };
    assert_eq!(
        fence(4, true).refused_by(&landed, "a", Some(&write.effect("a")), false),
        Refusal::Lost,
        "t1 (answered as refused by its unit) landed late: t2's units are never applied again"
    );
    let renewed = LeaseState {
        counter: 5,
        commit_token: Some("t0".to_owned()),
        ..row("a", 5)
    };
    assert_eq!(
        fence(4, true).refused_by(&renewed, "a", Some(&write.effect("a")), false),
        Refusal::Retry(Fence::adopting(&renewed)),
        "a renewal of our own moved it: the commit goes again"
    );
}

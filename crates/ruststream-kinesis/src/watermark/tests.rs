//! The settled prefix, at least once and exactly once.

use super::*;

fn seq(n: u32) -> SharedStr {
    SharedStr::from(n.to_string())
}

#[test]
fn in_order_acks_move_the_checkpoint_one_by_one() {
    let mut mark = Watermark::<()>::default();
    let a = mark.push(seq(1));
    let b = mark.push(seq(2));
    assert_eq!(mark.settle(a).as_deref(), Some("1"));
    assert_eq!(mark.settle(b).as_deref(), Some("2"));
    assert!(mark.all_settled());
}

#[test]
fn an_out_of_order_ack_waits_for_the_gap() {
    let mut mark = Watermark::<()>::default();
    let a = mark.push(seq(1));
    let b = mark.push(seq(2));
    let c = mark.push(seq(3));
    assert_eq!(mark.settle(c), None);
    assert_eq!(mark.settle(b), None);
    assert_eq!(mark.unsettled(), 3);
    assert_eq!(mark.settle(a).as_deref(), Some("3"));
    assert!(mark.all_settled());
}

#[test]
fn a_run_pushed_at_once_takes_the_tickets_as_many_pushes_would() {
    let mut one_by_one = Watermark::<()>::default();
    let mut run = Watermark::<()>::default();
    let first = one_by_one.push(seq(1));
    assert_eq!(run.push(seq(1)), first);
    let pushed: Vec<_> = (2..=4).map(|n| one_by_one.push(seq(n))).collect();
    run.push_run((2..5).map(seq));
    assert_eq!(
        pushed,
        first.onwards().skip(1).take(3).collect::<Vec<_>>(),
        "the tickets a run takes follow the one before it"
    );
    assert_eq!(
        run.push(seq(5)),
        one_by_one.push(seq(5)),
        "and so on after it"
    );
    // Settled out of order, each checkpoint is its own record's, as one by one.
    for ticket in [pushed[1], first, pushed[0], pushed[2]] {
        assert_eq!(run.settle(ticket), one_by_one.settle(ticket));
    }
    assert_eq!(run.unsettled(), 1, "the fifth is still out");
}

#[test]
fn a_reset_ignores_settlements_of_the_old_generation() {
    let mut mark = Watermark::<()>::default();
    let old = mark.push(seq(1));
    mark.reset();
    let new = mark.push(seq(7));
    assert_eq!(mark.settle(old), None);
    assert_eq!(mark.settle(new).as_deref(), Some("7"));
}

#[test]
fn a_double_settlement_moves_nothing() {
    let mut mark = Watermark::<()>::default();
    let a = mark.push(seq(1));
    assert!(mark.settle(a).is_some());
    assert_eq!(mark.settle(a), None);
}

/// A stand-in for what a handling staged.
type Staged = &'static str;

impl Weighed for Staged {
    fn weight(&self) -> usize {
        self.len()
    }
}

fn staged_mark(n: u32) -> (Watermark<Staged>, Vec<Ticket>) {
    let mut mark = Watermark::default();
    let tickets = (1..=n).map(|n| mark.push(seq(n))).collect();
    (mark, tickets)
}

fn run(mark: &Watermark<Staged>) -> Vec<(String, Option<Staged>)> {
    mark.ready_run()
        .map(|(sequence, staged)| (sequence.to_string(), staged.copied()))
        .collect()
}

#[test]
fn exactly_once_the_settled_prefix_stays_until_its_commit() {
    let (mut mark, t) = staged_mark(3);
    assert!(!mark.settle_staged(t[1], Some("b")), "a gap: nothing ready");
    assert!(mark.settle_staged(t[0], None));
    assert_eq!(
        run(&mark),
        [("1".to_owned(), None), ("2".to_owned(), Some("b"))]
    );
    assert_eq!(mark.ready(), (2, 1));
    assert_eq!(
        mark.unsettled(),
        3,
        "a window counts what waits for its commit"
    );
    assert_eq!(mark.settled_prefix(), 2);
    mark.committed(1);
    assert_eq!(run(&mark), [("2".to_owned(), Some("b"))]);
    assert_eq!((mark.ready(), mark.settled_prefix()), ((1, 1), 2));
    mark.committed(5);
    assert_eq!((mark.ready(), mark.unsettled()), ((0, 0), 1));
    assert!(mark.settle_staged(t[2], Some("c")));
    assert_eq!(mark.ready(), (1, 1));
}

#[test]
fn exactly_once_a_refused_delivery_holds_back_every_later_one_until_settled_again() {
    let (mut mark, t) = staged_mark(4);
    for (ticket, staged) in t.iter().zip(["a", "b", "c", "d"]) {
        mark.settle_staged(*ticket, Some(staged));
    }
    assert_eq!(mark.ready(), (4, 4));
    assert_eq!(mark.settled_tickets(|staged| *staged == "c"), [t[2]]);
    assert_eq!(mark.unsettle(t[2]), Some("c"));
    assert_eq!(
        run(&mark),
        [("1".to_owned(), Some("a")), ("2".to_owned(), Some("b"))]
    );
    assert_eq!(mark.ready(), (2, 2), "d waits behind c");
    assert!(mark.holds(t[3]) && mark.settled_tickets(|staged| *staged == "c").is_empty());
    // Its redelivery settles the same ticket, with what it staged this time.
    assert!(mark.settle_staged(t[2], Some("c2")));
    assert_eq!(mark.ready(), (4, 4));
    assert_eq!(run(&mark)[2], ("3".to_owned(), Some("c2")));
    assert_eq!(mark.staged_weight(), 5, "a, b, c2, d");
    mark.committed(2);
    assert_eq!(mark.staged_weight(), 3, "c2, d");
    mark.reset();
    assert_eq!((mark.ready(), mark.unsettled()), ((0, 0), 0));
    assert_eq!(mark.staged_weight(), 0);
    assert_eq!(mark.unsettle(t[0]), None, "a ticket of the old generation");
}

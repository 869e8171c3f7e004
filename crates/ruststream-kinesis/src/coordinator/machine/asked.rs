//! Balancing by beat: how a holder kept alive by its beat hears of a handoff asked of it. Per
//! row, a holder learns of a request from the answer of its next renewing write; a holder kept
//! alive by its beat writes nothing while idle. So an instance that asked for handoffs marks
//! them in the stream's notice once its round's requests are over, adding one to each holder's
//! count ([`Notice::asks`], one write a round however many it asked for); a holder's poll that
//! sees its count changed from the one it last acted on reads the stream's rows once, and hands
//! each of its rows that a request stands in to its reader, which hands the shard over as it
//! would on a renewal's answer. The mark follows the requests' writes, so a request that landed
//! after the holder's read of the rows moves the count again. Cost: a notice write per round
//! that asked, and a `list` per mark at the holder; nothing while the fleet is balanced.

use std::sync::Arc;

use super::Coordinator;
use crate::lease::{LeaseState, Notice};
use crate::shard::lease::Moment;

impl<T: Moment> Coordinator<T> {
    /// The count of marks of handoffs asked of `owner` (this run) in `notice`, if it differs
    /// from the one it last acted on and it holds by beat (per row, a renewal's answer shows a
    /// request). Any change is news, a lower count too: the count of an instance whose beat
    /// lapsed for minutes is forgotten with it, and starts again from one if it beats again.
    pub(crate) fn asked_of(&self, notice: &Notice, owner: &str) -> Option<u64> {
        if !self.timings.is_kept_by_beat() {
            return None;
        }
        let marks = notice.asks.get(owner).copied().unwrap_or(0);
        (marks != self.asks_acted).then_some(marks)
    }

    /// The rows read after the notice showed `marks` marks: those marks are acted on, and the
    /// rows of `rows` that `owner` holds with a request of another instance standing at `now_ms`
    /// go to their readers.
    pub(crate) fn asked_rows(
        &mut self,
        marks: u64,
        rows: Vec<(Arc<str>, LeaseState)>,
        owner: &str,
        now_ms: u64,
    ) -> Vec<(Arc<str>, LeaseState)> {
        self.asks_acted = marks;
        rows.into_iter()
            .filter(|(_, row)| {
                row.is_held_by(owner)
                    && row
                        .handoff_at(now_ms)
                        .is_some_and(|asked| asked.to != owner)
            })
            .collect()
    }

    /// By beat, a request of this round landed in a row `holder` holds: its mark follows the
    /// round's requests.
    pub(super) fn mark_later(&mut self, holder: &str) {
        if self.timings.is_kept_by_beat() {
            self.marks.insert(holder.to_owned());
        }
    }

    /// The holders whose requests of the round are to be marked (once: taken out).
    pub(crate) fn take_marks(&mut self) -> Vec<String> {
        std::mem::take(&mut self.marks).into_iter().collect()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::lease::Handoff;
    use crate::{KinesisPosition, LeaseTimings};

    fn coordinator(timings: LeaseTimings) -> Coordinator<Duration> {
        Coordinator::new(timings, KinesisPosition::Latest)
    }

    fn row(owner: &str, asked_by: Option<(&str, u64)>) -> LeaseState {
        LeaseState {
            owner: Some(owner.to_owned()),
            counter: 3,
            handoff: asked_by.map(|(to, asked_ms)| Handoff {
                to: to.to_owned(),
                asked_ms,
            }),
            ..LeaseState::default()
        }
    }

    #[test]
    fn a_holder_by_beat_acts_once_on_each_newer_mark_and_hands_on_only_its_rows_asked_by_others() {
        let mut notice = Notice::default();
        notice.mark_asked("me");
        notice.mark_asked("other");
        // Per row, a renewal's answer shows the request: the mark asks nothing.
        assert_eq!(
            coordinator(LeaseTimings::default()).asked_of(&notice, "me"),
            None
        );
        let mut by_beat = coordinator(LeaseTimings::default().kept_by_beat());
        assert_eq!(by_beat.asked_of(&notice, "me"), Some(1));
        let now_ms = 1_011_000;
        let rows = vec![
            (Arc::from("asked"), row("me", Some(("pod-b", 1_010_000)))),
            (Arc::from("quiet"), row("me", None)),
            (Arc::from("theirs"), row("other", Some(("me", 1_010_500)))),
            (Arc::from("mine-to-me"), row("me", Some(("me", 1_010_000)))),
            // A request past its lifetime stands no more.
            (Arc::from("stale"), row("me", Some(("pod-b", 1)))),
        ];
        let asked = by_beat.asked_rows(1, rows, "me", now_ms);
        let shards: Vec<&str> = asked.iter().map(|(shard, _)| &**shard).collect();
        assert_eq!(shards, ["asked"]);
        // Acted on: the same count asks nothing more; a mark of a later round does.
        assert_eq!(by_beat.asked_of(&notice, "me"), None);
        notice.mark_asked("me");
        assert_eq!(by_beat.asked_of(&notice, "me"), Some(2));
        by_beat.asked_rows(2, Vec::new(), "me", now_ms);
        // Forgotten while its beat lapsed for minutes, the count starts again: news too.
        notice.asks.remove("me");
        assert_eq!(by_beat.asked_of(&notice, "me"), Some(0));
        by_beat.asked_rows(0, Vec::new(), "me", now_ms);
        notice.mark_asked("me");
        assert_eq!(by_beat.asked_of(&notice, "me"), Some(1));
    }

    #[test]
    fn a_round_marks_each_holder_it_asked_once_and_only_by_beat() {
        let shard: Arc<str> = Arc::from("shard-1");
        let mut per_row = coordinator(LeaseTimings::default());
        per_row.requested(&shard, "pod-a", 1);
        assert!(per_row.take_marks().is_empty(), "per row nothing is marked");
        let mut by_beat = coordinator(LeaseTimings::default().kept_by_beat());
        for holder in ["pod-b", "pod-a", "pod-b"] {
            by_beat.requested(&shard, holder, 1);
        }
        assert_eq!(by_beat.take_marks(), ["pod-a", "pod-b"]);
        assert!(by_beat.take_marks().is_empty(), "taken out once");
    }
}

//! Balancing by beat: how a holder kept alive by its beat hears of a handoff asked of it. Per
//! row, a holder learns of a request from the answer of its next renewing write; a holder kept
//! alive by its beat writes nothing while idle. So the store marks each request in the stream's
//! notice under the holder ([`Notice::asks`]), the holder's poll sees a mark newer than the last
//! it acted on, reads the stream's rows once, and hands each of its rows that a request stands
//! in to its reader, which hands the shard over as it would on a renewal's answer. Cost: a
//! notice write per request and a `list` per request at the holder; nothing while the fleet is
//! balanced.

use std::sync::Arc;

use super::Coordinator;
use crate::lease::{LeaseState, Notice};
use crate::shard::lease::Moment;

impl<T: Moment> Coordinator<T> {
    /// When the newest handoff asked of `owner` (this run) was asked, if the notice shows one
    /// it has not acted on and it holds by beat (per row, a renewal's answer shows it).
    pub(crate) fn asked_of(&self, notice: &Notice, owner: &str) -> Option<u64> {
        if !self.timings.is_kept_by_beat() {
            return None;
        }
        notice
            .asks
            .get(owner)
            .copied()
            .filter(|&asked| asked > self.asks_acted)
    }

    /// The rows read after a mark of `asked_ms` was seen: the marks up to it are acted on, and
    /// the rows of `rows` that `owner` holds with a request of another instance standing at
    /// `now_ms` go to their readers.
    pub(crate) fn asked_rows(
        &mut self,
        asked_ms: u64,
        rows: Vec<(Arc<str>, LeaseState)>,
        owner: &str,
        now_ms: u64,
    ) -> Vec<(Arc<str>, LeaseState)> {
        self.asks_acted = self.asks_acted.max(asked_ms);
        rows.into_iter()
            .filter(|(_, row)| {
                row.is_held_by(owner)
                    && row
                        .handoff_at(now_ms)
                        .is_some_and(|asked| asked.to != owner)
            })
            .collect()
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
        notice.asked("me", 1_010_000);
        notice.asked("other", 12_000);
        // Per row, a renewal's answer shows the request: the mark asks nothing.
        assert_eq!(
            coordinator(LeaseTimings::default()).asked_of(&notice, "me"),
            None
        );
        let mut by_beat = coordinator(LeaseTimings::default().kept_by_beat());
        assert_eq!(by_beat.asked_of(&notice, "me"), Some(1_010_000));
        let now_ms = 1_011_000;
        let rows = vec![
            (Arc::from("asked"), row("me", Some(("pod-b", 1_010_000)))),
            (Arc::from("quiet"), row("me", None)),
            (Arc::from("theirs"), row("other", Some(("me", 1_010_500)))),
            (Arc::from("mine-to-me"), row("me", Some(("me", 1_010_000)))),
            // A request past its lifetime stands no more.
            (Arc::from("stale"), row("me", Some(("pod-b", 1)))),
        ];
        let asked = by_beat.asked_rows(1_010_000, rows, "me", now_ms);
        let shards: Vec<&str> = asked.iter().map(|(shard, _)| &**shard).collect();
        assert_eq!(shards, ["asked"]);
        // Acted on: the same mark asks nothing more; a newer one does, and an older write that
        // lands late moves nothing back.
        assert_eq!(by_beat.asked_of(&notice, "me"), None);
        notice.asked("me", 1_015_000);
        notice.asked("me", 1_014_000);
        assert_eq!(notice.asks["me"], 1_015_000);
        assert_eq!(by_beat.asked_of(&notice, "me"), Some(1_015_000));
    }
}

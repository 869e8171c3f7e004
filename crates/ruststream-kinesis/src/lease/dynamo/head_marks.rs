//! What this store last learnt of each stream's notice head: whether it says layout 2, and when
//! the call that told it was sent. A store that keeps the head apart writes its layout again
//! before a beat unless a fresh mark says it stands; a store of either layout forgets a fleet's
//! gone instances from every row while the head says 2.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use crate::clock::Instant;

/// How long, at most, a mark that the head says layout 2 spares a beat the write of the layout,
/// by both clocks: longer than the idle poll's head read at the default timings (every renewal
/// interval, 3 s), so that a beat after a read rarely pays the write. A beat also bounds it by
/// half the lease it writes (the store knows no timings; the beat's end does): an instance
/// paused until its beat lapsed last read the head at least a lease less a renewal interval
/// before, and writes the layout before its next beat. It does not make a removal by hand safe
/// while the instance runs (a removal landing between that write and the beat goes unseen for
/// up to this long, and for up to the replication lag more where the head is read eventually
/// consistent, `eventually_consistent_polls`, whose marks show the head as it was that much
/// earlier): the guide asks for every process of layout 2 to have exited first.
pub(super) const MARK_FRESH: Duration = Duration::from_secs(4);

/// One stream's mark.
#[derive(Debug, Clone, Copy)]
struct Mark {
    /// When the call that told it was sent, by the monotonic clock and by the wall clock (which
    /// also moves while the machine sleeps).
    sent: Instant,
    sent_ms: u64,
    /// Whether the head said layout 2.
    apart: bool,
}

/// The marks of every stream.
#[derive(Debug, Default)]
pub(super) struct HeadMarks {
    marks: HashMap<String, Mark>,
    /// The streams where a beat failed since this store last wrote the layout, with when the
    /// doubt began: no read spares the next beat the write (the layout may have been removed
    /// while the beats failed), and only a write of the layout sent after it ends it.
    doubted: HashMap<String, Instant>,
    /// The streams whose last whole read found beats running in both layouts' rows.
    mixed: HashSet<String>,
}

impl HeadMarks {
    /// What a call sent at `sent` (`sent_ms` by the wall clock) found (a read) or made (a
    /// `written` layout) the head say: `apart`. An answer to a call sent before the one the
    /// mark holds changes nothing: answers may arrive out of order. A written layout ends a
    /// doubt.
    pub(super) fn noted(
        &mut self,
        stream: &str,
        (sent, sent_ms): (Instant, u64),
        apart: bool,
        written: bool,
    ) {
        if written && self.doubted.get(stream).is_some_and(|since| sent >= *since) {
            self.doubted.remove(stream);
        }
        let mark = Mark {
            sent,
            sent_ms,
            apart,
        };
        match self.marks.get_mut(stream) {
            Some(held) if held.sent > sent => {}
            Some(held) => *held = mark,
            None => {
                self.marks.insert(stream.to_owned(), mark);
            }
        }
    }

    /// Whether a mark younger than `within` by both clocks at `now` (`now_ms`) says the head
    /// holds layout 2, with no beat failed since the layout was last written.
    pub(super) fn fresh_apart(
        &self,
        stream: &str,
        (now, now_ms): (Instant, u64),
        within: Duration,
    ) -> bool {
        let within_ms = u64::try_from(within.as_millis()).unwrap_or(u64::MAX);
        !self.doubted.contains_key(stream)
            && self.marks.get(stream).is_some_and(|mark| {
                mark.apart
                    && now.saturating_duration_since(mark.sent) < within
                    && now_ms.saturating_sub(mark.sent_ms) < within_ms
                    && now_ms >= mark.sent_ms
            })
    }

    /// Whether the last mark says the head holds layout 2, however old.
    pub(super) fn apart(&self, stream: &str) -> bool {
        self.marks.get(stream).is_some_and(|mark| mark.apart)
    }

    /// Whether a whole read that found beats running in both layouts' rows (`mixed`) is news:
    /// the first such read since the last that found none, told once.
    pub(super) fn mixed_news(&mut self, stream: &str, mixed: bool) -> bool {
        if mixed {
            self.mixed.insert(stream.to_owned())
        } else {
            self.mixed.remove(stream);
            false
        }
    }

    /// A beat on `stream` failed at `now`: until this store writes the layout again (a write
    /// sent after `now`), no mark spares a beat the write.
    pub(super) fn doubt(&mut self, stream: &str, now: Instant) {
        self.doubted.entry(stream.to_owned()).or_insert(now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mark_spares_a_beat_the_layout_only_while_fresh_and_only_the_latest_call_counts() {
        let start = Instant::now();
        let ms = 1_700_000_000_000;
        let at = |secs: f64| {
            (
                start + Duration::from_secs_f64(secs),
                ms + (secs * 1_000.0) as u64,
            )
        };
        let fresh =
            |marks: &HeadMarks, secs: f64| marks.fresh_apart("orders", at(secs), MARK_FRESH);
        let mut marks = HeadMarks::default();
        assert!(!fresh(&marks, 0.0));
        marks.noted("orders", at(0.0), true, true);
        assert!(fresh(&marks, 3.5), "past the idle poll");
        assert!(!fresh(&marks, 4.0));
        assert!(marks.apart("orders"), "forgetting does not ask freshness");
        // The machine slept: the monotonic clock stood, the wall clock moved.
        let slept = (start + Duration::from_secs(1), ms + 60_000);
        assert!(!marks.fresh_apart("orders", slept, MARK_FRESH));
        // A short lease bounds it closer.
        assert!(!marks.fresh_apart("orders", at(1.5), Duration::from_secs(1)));
        // A read sent later found the layout gone; a write's answer sent before it arrives
        // after and changes nothing.
        marks.noted("orders", at(0.5), false, false);
        marks.noted("orders", at(0.1), true, true);
        assert!(!fresh(&marks, 0.6));
        assert!(!marks.apart("orders"));
        marks.noted("orders", at(0.7), true, false);
        assert!(fresh(&marks, 0.8));
        // A failed beat: reads that find the layout spare no beat until it is written again,
        // by a write sent after the failure (one sent before, answered after, does not count).
        marks.doubt("orders", at(0.85).0);
        marks.noted("orders", at(0.9), true, false);
        assert!(!fresh(&marks, 1.0));
        marks.noted("orders", at(0.8), true, true);
        assert!(!fresh(&marks, 1.0));
        marks.noted("orders", at(1.1), true, true);
        assert!(fresh(&marks, 1.2));
        assert!(
            !marks.fresh_apart("payments", at(0.0), MARK_FRESH),
            "marks are per stream"
        );
    }

    #[test]
    fn a_mixed_fleet_is_news_once_an_episode() {
        let mut marks = HeadMarks::default();
        assert!(marks.mixed_news("orders", true));
        assert!(!marks.mixed_news("orders", true));
        assert!(!marks.mixed_news("orders", false));
        assert!(marks.mixed_news("orders", true));
    }
}

//! What this store last learnt of each stream's notice head: whether it says layout 2, and when
//! the call that told it was sent. A store that keeps the head apart writes its layout again
//! before a beat unless a fresh mark says it stands; a store of either layout forgets a fleet's
//! gone instances from every row while the head says 2.

use std::collections::HashMap;
use std::time::Duration;

use crate::clock::Instant;

/// How long a mark that the head says layout 2 spares a beat the write of the layout: about two
/// polls. Past it (an instance cut off, paused, or whose coordinator stopped reading), the next
/// beat writes the layout first, so a layout removed by hand meanwhile is back before the beat.
pub(super) const MARK_FRESH: Duration = Duration::from_secs(2);

/// One stream's mark.
#[derive(Debug, Clone, Copy)]
struct Mark {
    /// When the call that told it was sent.
    sent: Instant,
    /// Whether the head said layout 2.
    apart: bool,
}

/// The marks of every stream.
#[derive(Debug, Default)]
pub(super) struct HeadMarks {
    marks: HashMap<String, Mark>,
    /// The streams whose last whole read found beats running in both layouts' rows.
    mixed: std::collections::HashSet<String>,
}

impl HeadMarks {
    /// What a call sent at `sent` found (a read) or made (a write) the head say: `apart`.
    /// An answer to a call sent before the one the mark holds changes nothing: answers may
    /// arrive out of order.
    pub(super) fn noted(&mut self, stream: &str, sent: Instant, apart: bool) {
        match self.marks.get_mut(stream) {
            Some(mark) if mark.sent > sent => {}
            Some(mark) => *mark = Mark { sent, apart },
            None => {
                self.marks.insert(stream.to_owned(), Mark { sent, apart });
            }
        }
    }

    /// Whether a mark younger than [`MARK_FRESH`] at `now` says the head holds layout 2.
    pub(super) fn fresh_apart(&self, stream: &str, now: Instant) -> bool {
        self.marks
            .get(stream)
            .is_some_and(|mark| mark.apart && now.saturating_duration_since(mark.sent) < MARK_FRESH)
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

    /// Forgets `stream`'s mark (a beat failed): the next beat writes the layout first.
    pub(super) fn forget(&mut self, stream: &str) {
        self.marks.remove(stream);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mark_spares_a_beat_the_layout_only_while_fresh_and_only_the_latest_call_counts() {
        let start = Instant::now();
        let mut marks = HeadMarks::default();
        assert!(!marks.fresh_apart("orders", start));
        marks.noted("orders", start, true);
        assert!(marks.fresh_apart("orders", start + Duration::from_secs(1)));
        assert!(!marks.fresh_apart("orders", start + MARK_FRESH));
        assert!(marks.apart("orders"), "forgetting does not ask freshness");
        // A read sent later found the layout gone; a write's answer sent before it arrives
        // after and changes nothing.
        marks.noted("orders", start + Duration::from_millis(500), false);
        marks.noted("orders", start + Duration::from_millis(100), true);
        assert!(!marks.fresh_apart("orders", start + Duration::from_millis(600)));
        assert!(!marks.apart("orders"));
        marks.noted("orders", start + Duration::from_millis(700), true);
        assert!(marks.fresh_apart("orders", start + Duration::from_millis(800)));
        marks.forget("orders");
        assert!(!marks.fresh_apart("orders", start + Duration::from_millis(800)));
        assert!(
            !marks.fresh_apart("payments", start),
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

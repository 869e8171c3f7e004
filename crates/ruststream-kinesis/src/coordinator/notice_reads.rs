//! Which of the poll's reads of the stream's notice read it whole, and which its head alone,
//! where the store keeps the two apart: the head (the releases' counter, the marks of handoffs
//! asked, the layout) is small and read at every poll; the beats and the runs' records grow with
//! the instances, and are read only when the poll could learn something from them that it does
//! not know. With no I/O and no clock of its own.
//!
//! A beat never moves back, and one instance's beat is removed only when it left (a release,
//! which moves the counter) or was gone for minutes. So between two whole reads the beats last
//! read still say who is alive, each until its end: what a whole read could add before the first
//! of them ends is a later end (which changes no judgement yet) or an instance that joined (which
//! a balancing instance learns a lease later at most). The next whole read is due when the first
//! beat that was live at the last one ends, so no instance is judged lapsed on an old read, and
//! a lease after the last at the latest. A take-over judges its holder on a whole read of its
//! own, sent after its row read was answered ([`take`](super::take)), whatever this says.
//!
//! The check for another run under the owner id ([`twins`](super::twins)) judges only whole
//! reads (the head holds no run's record): once its record's write was answered, the next read
//! is whole.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::lease::millis;

/// When the poll next reads the whole notice.
#[derive(Debug, Clone, Default)]
pub(crate) struct NoticeReads {
    /// The store keeps the head apart: off, every read is whole.
    apart: bool,
    /// The wall-clock moment (epoch ms) from which the next read is whole; `None`: the next one
    /// is, whenever it comes.
    next_whole_ms: Option<u64>,
}

impl NoticeReads {
    /// For a store that keeps the notice's head apart from its beats and runs' records
    /// (`apart`), or one that reads it whole every time.
    pub(crate) fn new(apart: bool) -> Self {
        Self {
            apart,
            next_whole_ms: None,
        }
    }

    /// Whether a read sent at `now_ms` (epoch ms) reads the whole notice.
    pub(crate) fn whole_due(&self, now_ms: u64) -> bool {
        !self.apart || self.next_whole_ms.is_none_or(|due| now_ms >= due)
    }

    /// A whole read showing `beats` was answered at `now_ms`: the next is due when the first of
    /// them still live then ends, and `lease` later at the latest (an instance that joined
    /// beats into no read of the head).
    pub(crate) fn whole_read(
        &mut self,
        beats: &BTreeMap<String, u64>,
        lease: Duration,
        now_ms: u64,
    ) {
        let latest = now_ms.saturating_add(millis(lease));
        let first_end = beats.values().copied().filter(|&end| end >= now_ms).min();
        self.next_whole_ms = Some(first_end.map_or(latest, |end| end.min(latest)));
    }

    /// The next read is whole, whenever it comes: this run's record was answered, and the check
    /// for another run under its owner id judges the next whole read.
    pub(crate) fn whole_next(&mut self) {
        self.next_whole_ms = None;
    }
}

#[cfg(test)]
mod tests;

//! Which of the poll's reads of the stream's notice read it whole, and which its head alone,
//! where the store keeps the two apart: the head (the releases' counter, the marks of handoffs
//! asked, the layout) is small and read at every poll; the beats and the runs' records grow with
//! the instances, and are read only when the poll could learn something from them that it does
//! not know. With no I/O and no clock of its own.
//!
//! A beat never moves back, and one instance's beat is removed only when it left or was gone for
//! minutes. So between two whole reads the beats last read still say who is alive, each until its
//! end: what a whole read could add before the first of them ends is a later end (which changes
//! no judgement yet), an instance that joined, or one that left. A leave moves the counter in the
//! head, as a leaver's releases do: a head read that shows the counter moved has the next poll
//! read whole ([`counter_moved`](NoticeReads::counter_moved)), or a balancing instance would
//! count the leaver's beat in the shares until its end and leave a released shard to it (the
//! stopping instance's shard waited 4 s for a taker: simulation seed 1796613900746723232).
//! The next whole read is due when the first beat still live at the last one ends (within the
//! skew tolerance), and a lease after the last at the latest (so, with the poll's interval, a
//! lease and a poll apart at most: [`longest_gap`](NoticeReads::longest_gap)); and while the
//! wall clock reads earlier than it did at the last whole read (a step back). No holder is
//! judged gone on an old read for long: a take-over judges its holder on a whole read of its
//! own, sent after its row read was answered ([`take`](super::take)), whatever this says.
//!
//! The coordinator asks for whole reads besides ([`Coordinator::whole_notice_due`]): until a
//! whole read a renewal interval after its own beat first showed (which shows the peers that
//! started with it), and for the check for another run under the owner id
//! ([`twins`](super::twins)), which judges only whole reads: the first poll's read, the one after
//! each write of the run's record, and every read while the run is paused.
//!
//! [`Coordinator::whole_notice_due`]: super::machine::Coordinator::whole_notice_due

use std::collections::BTreeMap;
use std::time::Duration;

use crate::lease::{SKEW_TOLERANCE, millis};

/// When the poll next reads the whole notice.
#[derive(Debug, Clone, Default)]
pub(crate) struct NoticeReads {
    /// The store keeps the head apart: off, every read is whole.
    apart: bool,
    /// The next poll's read is whole, whatever the beats say: none was yet, or this run's record
    /// was answered since. Only a poll's whole read clears it (a take-over's read is whole too,
    /// but the check for another run under the owner id does not judge it).
    pending: bool,
    /// The wall-clock moment (epoch ms) of the last whole read, and the one from which the next
    /// read is whole.
    last_whole_ms: u64,
    next_whole_ms: u64,
}

impl NoticeReads {
    /// For a store that keeps the notice's head apart from its beats and runs' records
    /// (`apart`), or one that reads it whole every time.
    pub(crate) fn new(apart: bool) -> Self {
        Self {
            apart,
            pending: true,
            last_whole_ms: 0,
            next_whole_ms: 0,
        }
    }

    /// Whether the next poll's read is whole whatever the beats say, for the check for another
    /// run under the owner id: that read must show the latest writes.
    pub(crate) fn pending(&self) -> bool {
        self.pending
    }

    /// Whether the store keeps the head apart.
    pub(crate) fn is_apart(&self) -> bool {
        self.apart
    }

    /// The longest time between two whole reads by the beats alone, with polls `poll` apart: a
    /// lease, and the poll that comes after it.
    pub(crate) fn longest_gap(lease: Duration, poll: Duration) -> Duration {
        lease + poll
    }

    /// Whether a read sent at `now_ms` (epoch ms) reads the whole notice.
    pub(crate) fn whole_due(&self, now_ms: u64) -> bool {
        !self.apart || self.pending || now_ms >= self.next_whole_ms || now_ms < self.last_whole_ms
    }

    /// A whole read showing `beats` was answered at `now_ms` (`by_poll`: the poll's, which the
    /// check for another run judges): the next is due when the first of them still live then
    /// ends, and `lease` later at the latest.
    pub(crate) fn whole_read(
        &mut self,
        beats: &BTreeMap<String, u64>,
        lease: Duration,
        now_ms: u64,
        by_poll: bool,
    ) {
        let latest = now_ms.saturating_add(millis(lease));
        let skew = millis(SKEW_TOLERANCE);
        let first_end = beats
            .values()
            .copied()
            .filter(|&end| end.saturating_add(skew) >= now_ms)
            .min();
        self.last_whole_ms = now_ms;
        self.next_whole_ms = first_end.map_or(latest, |end| end.min(latest));
        if by_poll {
            self.pending = false;
        }
    }

    /// A read of the head alone showed the counter moved: a release, a handover or a leave landed,
    /// and a leave changes the beats. The next poll reads whole (consistent where polls read
    /// behind: the coordinator's `doubt`, since a read behind may still show the leaver's beat).
    pub(crate) fn counter_moved(&mut self) {
        self.next_whole_ms = 0;
    }

    /// The next poll's read is whole, whenever it comes: this run's record was answered, and the
    /// check for another run under its owner id judges the next whole read.
    pub(crate) fn whole_next(&mut self) {
        self.pending = true;
    }
}

#[cfg(test)]
mod tests;

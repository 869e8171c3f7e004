//! One owner id on two running instances (a copied manifest, a fixed name in two pods): found
//! through the stream's notice, with no I/O and no clock of its own.
//!
//! Each run of an instance is an [`Incarnation`]: when it connected, and a nonce of its own. The
//! coordinator records its incarnation under its owner id in the notice it reads anyway
//! (`LeaseStore::announce`), and judges only notices read after that record landed:
//!
//! - the notice shows its own incarnation: nothing to say;
//! - it shows none (the record was removed with a beat long lapsed): it records it again;
//! - it shows another one: that one was written after its own record landed, so another run
//!   under this owner id is alive now, not a crashed one's leftover. The later of the two stops
//!   reading; the earlier keeps its shards and records its incarnation again, so the later reads
//!   it (the later one needs to see the earlier's record written after its own to know).
//!
//! A run restarted under its owner id after a crash or a graceful stop overwrites the old run's
//! record and never sees it again: it takes its leases back at once, as before.

use std::fmt;

/// Which run of an instance this is: when it connected (epoch milliseconds, by its clock) and a
/// nonce of its own. Runs compare by that order: the later start is the later run, and two that
/// started in the same millisecond are told apart by their nonces, the same way on every
/// instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Incarnation {
    started_ms: u64,
    nonce: u64,
}

impl Incarnation {
    /// The run that started at `started_ms` with `nonce`.
    pub(crate) fn new(started_ms: u64, nonce: u64) -> Self {
        Self { started_ms, nonce }
    }

    /// When the run started, in epoch milliseconds by its clock.
    pub(crate) fn started_ms(self) -> u64 {
        self.started_ms
    }

    /// An incarnation as the notice holds it (`<started ms>-<nonce in hex>`); `None` for any
    /// other text.
    pub(crate) fn parse(text: &str) -> Option<Self> {
        let (started, nonce) = text.split_once('-')?;
        Some(Self {
            started_ms: started.parse().ok()?,
            nonce: u64::from_str_radix(nonce, 16).ok()?,
        })
    }
}

/// As the notice holds it: `<started ms>-<nonce in hex>`.
impl fmt::Display for Incarnation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{:016x}", self.started_ms, self.nonce)
    }
}

/// Two runs alive under one owner id, as one of them found it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Twin {
    /// The run that found it.
    pub(crate) mine: Incarnation,
    /// The other run.
    pub(crate) theirs: Incarnation,
}

impl Twin {
    /// Whether the run that found it is the later of the two, which stops reading.
    pub(crate) fn stops_here(&self) -> bool {
        self.theirs < self.mine
    }
}

/// Where this run's record in the notice stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Record {
    /// To be written at the next notice read.
    Due,
    /// Written, not answered yet.
    Sent,
    /// Written and answered: a later notice that shows another run's was written after it.
    Landed,
}

/// What a notice read says of this owner id's runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Seen {
    /// Nothing new: this run's own record, or a write of it still to be answered.
    #[default]
    Nothing,
    /// Write this run's record (first, again after it was removed, or after a write failed).
    Record,
    /// Another run started later and is alive: this one keeps its shards, and writes its record
    /// again so that the other reads it and stops.
    Later(Incarnation),
    /// Another run started earlier and is alive: this one stops reading.
    Earlier(Incarnation),
}

/// What this run knows of the other runs under its owner id.
#[derive(Debug, Clone)]
pub(crate) struct Twins {
    mine: Incarnation,
    record: Record,
}

impl Twins {
    /// The check of run `mine`, whose record is still to be written.
    pub(crate) fn new(mine: Incarnation) -> Self {
        Self {
            mine,
            record: Record::Due,
        }
    }

    /// This run.
    pub(crate) fn mine(&self) -> Incarnation {
        self.mine
    }

    /// A notice was read whose record under this owner id is `theirs` (`None`: none, or text
    /// that is no incarnation).
    pub(crate) fn read(&mut self, theirs: Option<&str>) -> Seen {
        match self.record {
            Record::Due => Seen::Record,
            Record::Sent => Seen::Nothing,
            Record::Landed => match theirs.and_then(Incarnation::parse) {
                Some(theirs) if theirs == self.mine => Seen::Nothing,
                Some(theirs) if theirs > self.mine => {
                    self.record = Record::Due;
                    Seen::Later(theirs)
                }
                Some(theirs) => Seen::Earlier(theirs),
                None => {
                    self.record = Record::Due;
                    Seen::Record
                }
            },
        }
    }

    /// This run's record is being written.
    pub(crate) fn recording(&mut self) {
        self.record = Record::Sent;
    }

    /// The write of this run's record was answered: `landed`, or failed (it may land or not:
    /// it is written again, and no notice is judged until one write was answered).
    pub(crate) fn recorded(&mut self, landed: bool) {
        self.record = if landed { Record::Landed } else { Record::Due };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EARLY: Incarnation = Incarnation {
        started_ms: 1_000,
        nonce: 9,
    };
    const LATE: Incarnation = Incarnation {
        started_ms: 2_000,
        nonce: 1,
    };

    fn landed(mine: Incarnation) -> Twins {
        let mut twins = Twins::new(mine);
        assert_eq!(twins.read(None), Seen::Record);
        twins.recording();
        twins.recorded(true);
        twins
    }

    #[test]
    fn an_incarnation_reads_back_as_written_and_orders_by_start_then_nonce() {
        assert_eq!(EARLY.to_string(), "1000-0000000000000009");
        assert_eq!(Incarnation::parse(&LATE.to_string()), Some(LATE));
        assert!(EARLY < LATE);
        assert!(Incarnation::new(1_000, 1) < Incarnation::new(1_000, 2));
        for text in ["", "1000", "x-1", "1000-zz", "-1"] {
            assert_eq!(Incarnation::parse(text), None, "{text:?}");
        }
    }

    #[test]
    fn a_crashed_runs_record_read_before_this_ones_landed_is_never_judged() {
        // The restart reads the old run's record first: it writes its own and goes on.
        let mut twins = Twins::new(LATE);
        assert_eq!(twins.read(Some(&EARLY.to_string())), Seen::Record);
        twins.recording();
        assert_eq!(twins.read(Some(&EARLY.to_string())), Seen::Nothing);
        // A write that failed may not have landed: written again before anything is judged.
        twins.recorded(false);
        assert_eq!(twins.read(Some(&EARLY.to_string())), Seen::Record);
        twins.recording();
        twins.recorded(true);
        // From then on the old run never writes again: only its own record shows.
        assert_eq!(twins.read(Some(&LATE.to_string())), Seen::Nothing);
    }

    #[test]
    fn the_later_of_two_live_runs_stops_and_the_earlier_records_itself_again() {
        let mut early = landed(EARLY);
        let mut late = landed(LATE);
        // The later wrote last: the earlier sees it, says so and writes its record again.
        assert_eq!(early.read(Some(&LATE.to_string())), Seen::Later(LATE));
        early.recording();
        early.recorded(true);
        // The later reads the earlier's record, written after its own: it stops.
        assert_eq!(late.read(Some(&EARLY.to_string())), Seen::Earlier(EARLY));
        assert_eq!(early.read(Some(&EARLY.to_string())), Seen::Nothing);
    }

    #[test]
    fn a_record_removed_or_unreadable_is_written_again() {
        let mut twins = landed(EARLY);
        assert_eq!(twins.read(None), Seen::Record);
        let mut twins = landed(EARLY);
        assert_eq!(twins.read(Some("written by hand")), Seen::Record);
    }
}

//! One owner id on two running instances (a copied manifest, a fixed name in two pods): found
//! through the stream's notice, with no I/O and no clock of its own.
//!
//! Each run of an instance is an [`Incarnation`]: when it connected, and a nonce of its own. The
//! coordinator records its incarnation under its owner id in the notice it reads anyway
//! (`LeaseStore::announce`), and judges only notices read after that record landed:
//!
//! - the notice shows its own record: nothing to say (it writes it again every
//!   [`REFRESH`], so that the others, who forget records not written for a while, keep it;
//!   not while the notice shows its beat, beside which nobody forgets a record);
//! - it shows none (removed as stale): it records itself again;
//! - it shows another run's: that one was written after its own record landed, so another run
//!   under this owner id is alive now, not a crashed one's leftover. Unless it is an earlier
//!   run's written before this run started (by the record's time, beyond the skew the leases
//!   tolerate): that is a stopped run's write that landed late, and it records itself again.
//!   Otherwise the later of the two pauses (the instance stops reading and takes nothing)
//!   and writes its record again a lease after its last; the earlier keeps its shards and writes its own again whenever it sees a later
//!   run's, so the later keeps seeing it. A paused run answers no later run (two paused runs
//!   answering each other would keep each other paused for good): once a whole lease passes
//!   after its record landed with no earlier run's record seen, the earlier is gone (stopped, or
//!   it never was alive: a dead run's write that landed late), and the paused run reads again.
//!   Of any number of runs under one owner id, the earliest alive reads and the others pause.
//!
//! A run restarted under its owner id after a crash or a release overwrites the old run's
//! record and never sees it again: it takes its leases back at once, as before. In a rollout that
//! starts the new run before the old one stops, the new one waits until the old one is gone.

use std::fmt;
use std::time::Duration;

use crate::lease::{SKEW_TOLERANCE, millis};

/// How often a run writes its record again while nothing else asks for it: well inside the age
/// (`watch::FORGET_AFTER`, five minutes) at which the others forget a record, so a live run's
/// record stays, and a dead run's goes.
pub(crate) const REFRESH: Duration = Duration::from_secs(150);

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

    /// A run's record as the notice holds it: `<started ms>-<nonce in hex>@<written ms>`.
    pub(crate) fn record(self, written_ms: u64) -> String {
        format!("{self}@{written_ms}")
    }

    /// A record as the notice holds it: the run, and when the record was written; `None` for any
    /// other text.
    pub(crate) fn parse_record(text: &str) -> Option<(Self, u64)> {
        let (run, written) = text.split_once('@')?;
        let (started, nonce) = run.split_once('-')?;
        let run = Self {
            started_ms: started.parse().ok()?,
            nonce: u64::from_str_radix(nonce, 16).ok()?,
        };
        Some((run, written.parse().ok()?))
    }
}

/// As a log line says it: `<started ms>-<nonce in hex>`.
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

/// What a run learned of the other runs under its owner id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TwinNews {
    /// A later run is alive: it pauses once it reads this run's record, written again now.
    Later(Twin),
    /// An earlier run is alive: this instance pauses (reads nothing, takes nothing).
    Earlier(Twin),
    /// The earlier run is gone: this instance reads again.
    Gone(Twin),
}

/// Where this run's record in the notice stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Record {
    /// To be written at the next notice read.
    Due,
    /// Written, not answered yet.
    Sent,
    /// Written and answered at `at_ms`: a later notice that shows another run's was written
    /// after it.
    Landed { at_ms: u64 },
}

/// What a notice read says of this owner id's runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Seen {
    /// Something to tell of.
    pub(crate) news: Option<TwinNews>,
    /// Write this run's record.
    pub(crate) record: bool,
}

/// What this run knows of the other runs under its owner id.
#[derive(Debug, Clone)]
pub(crate) struct Twins {
    mine: Incarnation,
    record: Record,
    /// The earlier run this one paused for, while it is alive.
    paused_for: Option<Incarnation>,
    /// The later run already told of: each is told of once.
    told: Option<Incarnation>,
    /// A notice read since this run's record last landed showed an earlier run's: one was
    /// alive then.
    answered: bool,
}

impl Twins {
    /// The check of run `mine`, whose record is still to be written.
    pub(crate) fn new(mine: Incarnation) -> Self {
        Self {
            mine,
            record: Record::Due,
            paused_for: None,
            told: None,
            answered: false,
        }
    }

    /// The earlier run this one paused for, while it is alive.
    pub(crate) fn paused_for(&self) -> Option<Incarnation> {
        self.paused_for
    }

    /// [`read_beside_beat`](Self::read_beside_beat) of a notice that does not show this run's
    /// beat.
    #[cfg(test)]
    pub(crate) fn read(&mut self, theirs: Option<&str>, now_ms: u64, lease: Duration) -> Seen {
        self.read_beside_beat(theirs, false, now_ms, lease)
    }

    /// A notice read at `now_ms` holds `theirs` under this owner id (`None`: nothing, or text
    /// that is no record); `lease` is how long a record of this run stands unanswered before the
    /// run it paused for counts as gone. Where the notice shows this run's beat (`beat_shown`), no
    /// instance forgets the record of an owner whose beat it shows (`watch::gone_instances`), so
    /// an unpaused run whose beat shows writes its own record again only when it is missing or
    /// another's, never for [`REFRESH`] alone (issue 29: a hundred instances kept alive by beat
    /// wrote 40 records a minute, each a write of every run's record, about $9 a month).
    pub(crate) fn read_beside_beat(
        &mut self,
        theirs: Option<&str>,
        beat_shown: bool,
        now_ms: u64,
        lease: Duration,
    ) -> Seen {
        let Record::Landed { at_ms } = self.record else {
            return Seen {
                news: None,
                record: self.record == Record::Due,
            };
        };
        let since = now_ms.saturating_sub(at_ms);
        let lease = millis(lease);
        let seen = match theirs.and_then(Incarnation::parse_record) {
            None => Seen {
                news: None,
                record: true,
            },
            // An earlier run's record written before this run started (beyond the skew two
            // clocks may have): no answer to it, which is written after this run's record
            // landed, but a write of a run that stopped before this one started, landed late
            // (DynamoDB applied it after its caller had given up on it). This run writes its own
            // again.
            Some((run, written)) if run < self.mine && self.written_before_start(written) => Seen {
                news: None,
                record: true,
            },
            // An earlier run wrote after this one's record landed: it is alive.
            Some((run, _)) if run < self.mine => self.earlier_alive(run, since, lease),
            Some((run, _)) => self.own_or_later(run, since, lease, beat_shown),
        };
        if seen.record {
            self.record = Record::Due;
        }
        seen
    }

    /// What an answer of the earlier run `run` means, `since` ms after this run's record landed:
    /// paused, this run asks again a lease after its last record.
    fn earlier_alive(&mut self, run: Incarnation, since: u64, lease: u64) -> Seen {
        self.answered = true;
        match self.paused_for {
            None => {
                self.paused_for = Some(run);
                Seen {
                    news: Some(TwinNews::Earlier(self.twin(run))),
                    record: true,
                }
            }
            Some(_) => Seen {
                news: None,
                record: since >= lease,
            },
        }
    }

    /// What its own record, or a later run's (`run`), means `since` ms after this run's record
    /// landed.
    fn own_or_later(&mut self, run: Incarnation, since: u64, lease: u64, beat_shown: bool) -> Seen {
        match self.paused_for {
            // Paused a whole lease since its record landed, and no earlier run answered it:
            // the earlier run is gone.
            Some(earlier) if since >= lease && !self.answered => {
                self.paused_for = None;
                Seen {
                    news: Some(TwinNews::Gone(self.twin(earlier))),
                    record: true,
                }
            }
            // Paused, this run answers no later run: two paused runs answering each other
            // would keep each other paused for good, with nothing read. It asks the earlier
            // runs again a lease after its last record, and watches for their answer.
            Some(_) => Seen {
                news: None,
                record: since >= lease,
            },
            None if run == self.mine => Seen {
                news: None,
                record: !beat_shown && since >= millis(REFRESH),
            },
            None => Seen {
                news: (self.told != Some(run)).then(|| {
                    self.told = Some(run);
                    TwinNews::Later(self.twin(run))
                }),
                record: true,
            },
        }
    }

    /// Whether a notice read a little behind the latest writes (eventually consistent) that
    /// holds `theirs` under this owner id can be judged: this run's record has not landed yet
    /// (nothing is judged), or it shows this run's own record while this run runs unpaused (so
    /// it shows what a consistent read would, or an older own record: either means no news).
    /// Any other record, or none, may be one that this run's record replaced a moment ago: it
    /// is judged on a consistent read.
    pub(crate) fn judges_behind(&self, theirs: Option<&str>) -> bool {
        if !matches!(self.record, Record::Landed { .. }) {
            return true;
        }
        self.paused_for.is_none()
            && theirs
                .and_then(Incarnation::parse_record)
                .is_some_and(|(run, _)| run == self.mine)
    }

    /// This run and `theirs`, for the news.
    fn twin(&self, theirs: Incarnation) -> Twin {
        Twin {
            mine: self.mine,
            theirs,
        }
    }

    /// Whether a record written at `written_ms` (by its writer's clock) was written before this
    /// run started, even with the writer's clock as far behind this run's as the leases
    /// tolerate: [`SKEW_TOLERANCE`] plus the holder's margin, which is at most as much again.
    fn written_before_start(&self, written_ms: u64) -> bool {
        written_ms.saturating_add(2 * millis(SKEW_TOLERANCE)) < self.mine.started_ms
    }

    /// This run's record is being written: its text, written at `now_ms`.
    pub(crate) fn recording(&mut self, now_ms: u64) -> String {
        self.record = Record::Sent;
        self.mine.record(now_ms)
    }

    /// The write of this run's record was answered at `now_ms`: `landed`, or failed (it may land
    /// or not: it is written again, and no notice is judged until one write was answered).
    pub(crate) fn recorded(&mut self, landed: bool, now_ms: u64) {
        self.record = if landed {
            self.answered = false;
            Record::Landed { at_ms: now_ms }
        } else {
            Record::Due
        };
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
    const LEASE: Duration = Duration::from_secs(10);
    const NOW: u64 = 1_000_000;

    fn landed(mine: Incarnation, at_ms: u64) -> Twins {
        let mut twins = Twins::new(mine);
        assert!(twins.read(None, at_ms, LEASE).record);
        twins.recording(at_ms);
        twins.recorded(true, at_ms);
        twins
    }

    fn record(run: Incarnation) -> String {
        run.record(NOW)
    }

    #[test]
    fn a_record_reads_back_as_written_and_runs_order_by_start_then_nonce() {
        assert_eq!(EARLY.record(5), "1000-0000000000000009@5");
        assert_eq!(Incarnation::parse_record(&LATE.record(7)), Some((LATE, 7)));
        assert!(EARLY < LATE);
        assert!(Incarnation::new(1_000, 1) < Incarnation::new(1_000, 2));
        for text in [
            "",
            "1000",
            "x-1@1",
            "1000-zz@1",
            "-1@1",
            "1000-1",
            "1000-1@x",
        ] {
            assert_eq!(Incarnation::parse_record(text), None, "{text:?}");
        }
    }

    #[test]
    fn a_crashed_runs_record_read_before_this_ones_landed_is_never_judged() {
        let mut twins = Twins::new(LATE);
        assert_eq!(
            twins.read(Some(&record(EARLY)), NOW, LEASE),
            Seen {
                news: None,
                record: true
            }
        );
        twins.recording(NOW);
        assert_eq!(
            twins.read(Some(&record(EARLY)), NOW, LEASE),
            Seen::default(),
            "a write on its way"
        );
        // A write that failed may not have landed: written again before anything is judged.
        twins.recorded(false, NOW);
        assert!(twins.read(Some(&record(EARLY)), NOW, LEASE).record);
        twins.recording(NOW);
        twins.recorded(true, NOW);
        // From then on the old run never writes again: only its own record shows.
        assert_eq!(
            twins.read(Some(&record(LATE)), NOW + 1_000, LEASE),
            Seen::default()
        );
        assert_eq!(twins.paused_for(), None);
    }

    /// Found by the simulation (seed 1796360688860776434): a run stopped and released its
    /// leases while its record's write was on its way; the write timed out, and landed 13.6 s
    /// after it was sent, after the restarted run's record. The restarted run took it for an
    /// earlier run alive and paused the instance for a lease, with an ERROR.
    #[test]
    fn a_stopped_runs_record_that_lands_after_this_ones_is_no_twin() {
        // The restarted run started 10 s after the stopped one's write was sent.
        let restarted = Incarnation::new(NOW - 1_000, 1);
        let mut late = landed(restarted, NOW);
        assert_eq!(
            late.read(Some(&EARLY.record(NOW - 11_000)), NOW + 3_000, LEASE),
            Seen {
                news: None,
                record: true
            },
            "written again, no pause"
        );
        assert_eq!(late.paused_for(), None);
    }

    /// An earlier run's answer is written after this run's record landed, so after this run
    /// started: however far behind its clock is within what the leases tolerate
    /// (`SKEW_TOLERANCE` plus the holder's margin, 2 s with the defaults), it pauses this run.
    #[test]
    fn an_earlier_runs_answer_from_a_clock_up_to_the_tolerated_skew_behind_pauses_this_run() {
        let skew = 2 * millis(SKEW_TOLERANCE);
        for written in [LATE.started_ms, LATE.started_ms - skew] {
            let mut late = landed(LATE, NOW);
            assert!(
                matches!(
                    late.read(Some(&EARLY.record(written)), NOW + 300, LEASE)
                        .news,
                    Some(TwinNews::Earlier(_))
                ),
                "an answer written at {written} ms"
            );
        }
    }

    #[test]
    fn the_later_of_two_live_runs_pauses_until_the_earlier_is_gone() {
        let mut early = landed(EARLY, NOW);
        let mut late = landed(LATE, NOW);
        // The later wrote last: the earlier says so once, and writes its record again.
        let seen = early.read(Some(&record(LATE)), NOW + 500, LEASE);
        assert_eq!(
            seen.news,
            Some(TwinNews::Later(Twin {
                mine: EARLY,
                theirs: LATE
            }))
        );
        assert!(seen.record);
        early.recording(NOW + 600);
        early.recorded(true, NOW + 600);
        // The later reads it: the earlier is alive, and the later pauses and asks again.
        let seen = late.read(Some(&record(EARLY)), NOW + 1_000, LEASE);
        assert!(matches!(seen.news, Some(TwinNews::Earlier(twin)) if twin.theirs == EARLY));
        assert!(seen.record);
        assert_eq!(late.paused_for(), Some(EARLY));
        late.recording(NOW + 1_000);
        late.recorded(true, NOW + 1_000);
        // The earlier answers again, without saying it twice.
        let seen = early.read(Some(&record(LATE)), NOW + 2_000, LEASE);
        assert_eq!((seen.news, seen.record), (None, true));
        early.recording(NOW + 2_000);
        early.recorded(true, NOW + 2_000);
        // Still alive: the later stays paused, and asks again a lease after its last record.
        assert_eq!(
            late.read(Some(&record(EARLY)), NOW + 3_000, LEASE),
            Seen::default()
        );
        assert!(late.read(Some(&record(EARLY)), NOW + 11_000, LEASE).record);
        late.recording(NOW + 11_000);
        late.recorded(true, NOW + 11_000);
        // The earlier stopped: the later's record stands a lease, and it reads again.
        assert_eq!(
            late.read(Some(&record(LATE)), NOW + 20_000, LEASE),
            Seen::default()
        );
        let seen = late.read(Some(&record(LATE)), NOW + 21_000, LEASE);
        assert!(matches!(seen.news, Some(TwinNews::Gone(twin)) if twin.theirs == EARLY));
        assert_eq!(late.paused_for(), None);
    }

    #[test]
    fn a_record_removed_or_unreadable_is_written_again_and_a_stale_one_refreshed() {
        let mut twins = landed(EARLY, NOW);
        assert!(twins.read(None, NOW + 1, LEASE).record);
        let mut twins = landed(EARLY, NOW);
        assert!(twins.read(Some("written by hand"), NOW + 1, LEASE).record);
        let mut twins = landed(EARLY, NOW);
        let refresh = millis(REFRESH);
        assert!(
            !twins
                .read(Some(&record(EARLY)), NOW + refresh - 1, LEASE)
                .record
        );
        assert!(
            twins
                .read(Some(&record(EARLY)), NOW + refresh, LEASE)
                .record
        );
        // Beside its beat nobody forgets it: no refresh, but a missing record is written again.
        let mut beating = landed(EARLY, NOW);
        let own = record(EARLY);
        let later = NOW + 10 * refresh;
        assert!(
            !beating
                .read_beside_beat(Some(&own), true, later, LEASE)
                .record
        );
        assert!(beating.read_beside_beat(None, true, later, LEASE).record);
    }

    /// Runs under one owner id sharing one notice slot: each alive run reads it in turn and
    /// writes its record when told to (the write lands at once).
    struct Notice {
        slot: Option<String>,
        runs: Vec<(Twins, bool)>,
    }

    impl Notice {
        fn start(runs: &[Incarnation]) -> Self {
            Self {
                slot: None,
                runs: runs.iter().map(|run| (Twins::new(*run), true)).collect(),
            }
        }

        fn read(&mut self, index: usize, now_ms: u64) {
            let (twins, alive) = &mut self.runs[index];
            if !*alive {
                return;
            }
            if twins.read(self.slot.as_deref(), now_ms, LEASE).record {
                self.slot = Some(twins.recording(now_ms));
                twins.recorded(true, now_ms);
            }
        }

        /// Every alive run reads once a second, in order, from `from_ms` for `secs` seconds.
        fn run(&mut self, from_ms: u64, secs: u64) -> u64 {
            for second in 0..secs {
                for index in 0..self.runs.len() {
                    self.read(index, from_ms + second * 1_000 + index as u64);
                }
            }
            from_ms + secs * 1_000
        }

        /// Which alive runs read (are not paused).
        fn reading(&self) -> Vec<usize> {
            (0..self.runs.len())
                .filter(|i| self.runs[*i].1 && self.runs[*i].0.paused_for().is_none())
                .collect()
        }
    }

    const LATEST: Incarnation = Incarnation {
        started_ms: 3_000,
        nonce: 4,
    };

    #[test]
    fn of_three_runs_the_earliest_reads_and_once_it_stops_the_next_one_reads() {
        let mut notice = Notice::start(&[EARLY, LATE, LATEST]);
        let now = notice.run(NOW, 40);
        assert_eq!(notice.reading(), vec![0]);
        notice.runs[0].1 = false;
        notice.run(now, 60);
        assert_eq!(
            notice.reading(),
            vec![1],
            "the two paused runs must not keep each other paused"
        );
        assert!(notice.runs[2].0.paused_for().is_some());
    }

    #[test]
    fn a_crashed_earliest_run_restarted_while_a_later_one_waits_leaves_one_reading() {
        let mut notice = Notice::start(&[EARLY, LATE]);
        let now = notice.run(NOW, 30);
        assert_eq!(notice.reading(), vec![0]);
        // The earliest crashes, and its restart (a run later than both) starts.
        notice.runs[0].1 = false;
        let restarted = Incarnation::new(NOW + 30_000, 7);
        notice.runs.push((Twins::new(restarted), true));
        notice.run(now, 60);
        assert_eq!(notice.reading().len(), 1, "exactly one run reads");
    }

    #[test]
    fn in_random_schedules_of_runs_starting_and_stopping_one_alive_run_ends_up_reading() {
        use rand::rngs::StdRng;
        use rand::{Rng, SeedableRng};
        for seed in 0..300_u64 {
            let mut rng = StdRng::seed_from_u64(seed);
            let mut notice = Notice::start(&[]);
            let mut now = NOW;
            for _ in 0..rng.random_range(1..40) {
                now += rng.random_range(0..3_000);
                match rng.random_range(0..10) {
                    0 => notice
                        .runs
                        .push((Twins::new(Incarnation::new(now, rng.random())), true)),
                    1 if !notice.runs.is_empty() => {
                        let index = rng.random_range(0..notice.runs.len());
                        notice.runs[index].1 = false;
                    }
                    _ if !notice.runs.is_empty() => {
                        let index = rng.random_range(0..notice.runs.len());
                        notice.read(index, now);
                    }
                    _ => {}
                }
            }
            if !notice.runs.iter().any(|(_, alive)| *alive) {
                continue;
            }
            // Then nothing starts or stops: a few leases of reads settle it.
            notice.run(now, 60);
            let earliest = (0..notice.runs.len())
                .filter(|i| notice.runs[*i].1)
                .min_by_key(|i| notice.runs[*i].0.mine)
                .unwrap();
            assert_eq!(notice.reading(), vec![earliest], "seed {seed}");
        }
    }
}

//! Rounds in steady state plan on the rows as last read (`machine/steady.rs`), and every signal
//! of a change has the next round read them.

use super::*;
use crate::shard::Stop;

/// A fleet's table and notice as this instance sees them, and a driver that answers every call
/// of the poll and the rounds from them, counting the rounds that read the rows.
struct Fleet {
    rig: Rig,
    at: Duration,
    listing: Vec<ShardInfo>,
    rows: Vec<(Arc<str>, LeaseState)>,
    notice: Notice,
    rounds_reading: usize,
    rounds: usize,
    /// Whether the last round that read the rows read them behind (`list_eventually`).
    last_read_behind: Option<bool>,
    /// Whether the wall clock moves with `at` (from `NOW_MS`), or stays at `NOW_MS`.
    clock_runs: bool,
}

impl Fleet {
    /// One shard, held by pod-b (beating) for the next hour; this instance balances, on a
    /// store whose polls may read behind (`LeaseStore::polls_read_behind`).
    fn steady() -> Self {
        Self::steady_reading(true)
    }

    /// [`steady`](Self::steady), on a store whose polls read `behind` or not.
    fn steady_reading(behind: bool) -> Self {
        let mut rig = Rig::new();
        rig.coordinator = Coordinator::new(LeaseTimings::default(), KinesisPosition::TrimHorizon)
            .with_balancing(true)
            .with_polls_behind(behind);
        let mut fleet = Self {
            rig,
            at: Duration::ZERO,
            listing: vec![shard("shardId-0")],
            rows: vec![(
                Arc::from("shardId-0"),
                Rig::row(Some("pod-b"), NOW_MS + 3_600_000),
            )],
            notice: Notice {
                counter: 2,
                beats: [
                    ("pod-b".to_owned(), NOW_MS + 3_600_000),
                    (OWNER.to_owned(), NOW_MS + 3_600_000),
                ]
                .into(),
                ..Notice::default()
            },
            rounds_reading: 0,
            rounds: 0,
            last_read_behind: None,
            clock_runs: false,
        };
        // The first round reads the rows, and so does the one after it (no notice was read
        // before the first): then the rounds read none.
        fleet.rounds(2);
        assert_eq!(fleet.rounds_reading, 2);
        assert_eq!(
            fleet.last_read_behind,
            Some(false),
            "the first rounds read consistent"
        );
        fleet.rounds(3);
        assert_eq!(
            fleet.rounds_reading, 2,
            "three rounds in steady state read no row"
        );
        fleet
    }

    /// Runs `count` rounds, answering the polls in between.
    fn rounds(&mut self, count: usize) {
        for _ in 0..count {
            self.round();
        }
    }

    /// Answers the poll until the next round, then runs it: whether it read the rows.
    fn round(&mut self) -> bool {
        loop {
            match self.next() {
                Step::ListShards => break,
                step => self.answer_poll(step),
            }
        }
        self.rounds += 1;
        self.rig.rounds.listed(
            &mut self.rig.coordinator,
            Shards::Listed(self.listing.clone()),
            self.at,
        );
        let mut read = false;
        loop {
            match self.next() {
                Step::ListRows { eventual } => {
                    read = true;
                    self.last_read_behind = Some(eventual);
                    self.list_rows();
                }
                Step::Take(_) => self.rig.rounds.took(&mut self.rig.coordinator, self.at),
                Step::Ask(_) => self.rig.rounds.asked(&mut self.rig.coordinator, self.at),
                // The round is over: the poll's step, or the wait for it.
                step => {
                    self.answer_poll(step);
                    break;
                }
            }
        }
        self.rounds_reading += usize::from(read);
        read
    }

    /// Answers a step of the poll (a wait moves the clock to its end).
    fn answer_poll(&mut self, step: Step<Duration>) {
        let wall_ms = self.wall_ms();
        match step {
            Step::ReadNotice { .. } => self.rig.rounds.notice_read(
                &mut self.rig.coordinator,
                NoticeRead::Notice(self.notice.clone()),
                OWNER,
                self.at,
                wall_ms,
            ),
            Step::Beat(_) => self
                .rig
                .rounds
                .beaten(&mut self.rig.coordinator, OWNER, true),
            Step::ListRows { .. } => self.list_rows(),
            Step::Wait(Some(until)) => self.at = until,
            step => panic!("between rounds: {step:?}"),
        }
    }

    fn next(&mut self) -> Step<Duration> {
        self.rig.next(self.at)
    }

    /// The wall clock (epoch ms) at `at`.
    fn wall_ms(&self) -> u64 {
        if self.clock_runs {
            NOW_MS + crate::lease::millis(self.at)
        } else {
            NOW_MS
        }
    }

    fn list_rows(&mut self) {
        let wall_ms = self.wall_ms();
        self.rig.rounds.rows_listed(
            &mut self.rig.coordinator,
            Listed::Rows(self.rows.clone()),
            OWNER,
            self.at,
            wall_ms,
        );
    }
}

#[test]
fn rounds_in_steady_state_read_no_row_and_every_row_is_read_again_by_turns() {
    // On a store whose polls read every row consistent, the cadence's read is consistent too.
    // Two instances alive by their beats take turns of five minutes: each reads every row once
    // in ten.
    let mut consistent = Fleet::steady_reading(false);
    consistent.clock_runs = true;
    let (start, before) = (consistent.at, consistent.rounds_reading);
    while consistent.at < start + Duration::from_secs(600) {
        consistent.round();
    }
    assert_eq!(consistent.rounds_reading - before, 1, "one cadence read");
    assert_eq!(consistent.last_read_behind, Some(false));
    // Alone (pod-b stopped beating, its lease kept alive an hour by its row), every five
    // minutes.
    let mut alone = Fleet::steady_reading(false);
    alone.clock_runs = true;
    alone.notice.beats.remove("pod-b");
    alone.notice.counter += 1;
    alone.round();
    let (start, before) = (alone.at, alone.rounds_reading);
    while alone.at < start + Duration::from_secs(600) {
        alone.round();
    }
    assert_eq!(
        alone.rounds_reading - before,
        2,
        "alone, every five minutes"
    );
    let mut fleet = Fleet::steady();
    fleet.clock_runs = true;
    let start = fleet.at;
    let (before, rounds) = (fleet.rounds_reading, fleet.rounds);
    // Ten minutes of rounds 10 s apart: one of them reads every row, for what no signal tells.
    while fleet.at < start + Duration::from_secs(600) {
        fleet.round();
    }
    assert!(
        fleet.rounds - rounds >= 59,
        "{} rounds",
        fleet.rounds - rounds
    );
    assert_eq!(
        fleet.rounds_reading - before,
        1,
        "one round of {} in ten minutes reads the rows",
        fleet.rounds - rounds
    );
    assert_eq!(
        fleet.rig.rounds.steady_rounds() as usize,
        fleet.rounds - fleet.rounds_reading
    );
    assert_eq!(
        fleet.last_read_behind,
        Some(true),
        "a read for the cadence alone may be behind the latest writes (half the read units)"
    );
}

#[test]
fn each_sign_of_a_change_has_the_next_round_read_the_rows() {
    type Change = fn(&mut Fleet);
    let changes: [(&str, Change); 6] = [
        ("a release bumped the notice", |fleet| {
            fleet.notice.counter += 1
        }),
        ("an instance joined", |fleet| {
            fleet
                .notice
                .beats
                .insert("pod-c".to_owned(), NOW_MS + 3_600_000);
        }),
        ("pod-b's beat lapsed", |fleet| {
            fleet
                .notice
                .beats
                .insert("pod-b".to_owned(), NOW_MS - 60_000);
        }),
        ("a shard opened (this instance reads it)", |fleet| {
            fleet.listing.push(shard("shardId-1"));
            fleet.rig.reading.insert(Arc::from("shardId-1"));
        }),
        ("a reader of this instance stopped", |fleet| {
            let at = fleet.at;
            fleet
                .rig
                .coordinator
                .reader_stopped(&Arc::from("shardId-9"), Stop::Lost, at, 0);
        }),
        ("a reader ended (a wake)", |fleet| fleet.rig.rounds.wake()),
    ];
    for (change, apply) in changes {
        let mut fleet = Fleet::steady();
        apply(&mut fleet);
        assert!(fleet.round(), "{change}: the next round reads the rows");
        assert_eq!(
            fleet.last_read_behind,
            Some(false),
            "{change}: the rows read after a sign of a change show the latest writes"
        );
        fleet.rounds(2);
        let (read, rounds) = (fleet.rounds_reading, fleet.rounds);
        fleet.rounds(2);
        assert_eq!(
            fleet.rounds_reading, read,
            "{change}: once read, the rounds read none again ({rounds} rounds)"
        );
    }
}

#[test]
fn a_plan_on_the_rows_as_last_read_that_would_take_reads_them_first() {
    let mut fleet = Fleet::steady();
    // A holder that does not beat: its row as last read runs out.
    fleet.rows.push((
        Arc::from("shardId-1"),
        Rig::row(Some("pod-c"), NOW_MS + 20_000),
    ));
    fleet.listing.push(shard("shardId-1"));
    fleet.rounds(3);
    let listing = fleet.listing.clone();
    let wanted: Vec<Arc<str>> = listing.iter().map(|shard| Arc::clone(&shard.id)).collect();
    let at = (fleet.at, NOW_MS);
    let reading = HashSet::new();
    let coordinator = &mut fleet.rig.coordinator;
    assert!(
        coordinator.passes_on_rows_read(&listing, &wanted, &reading, OWNER, at),
        "pod-c's lease as last read runs"
    );
    let later = (fleet.at, NOW_MS + 60_000);
    assert!(
        !coordinator.passes_on_rows_read(&listing, &wanted, &reading, OWNER, later),
        "pod-c's lease as last read ran out: the round reads the rows before it takes"
    );
    assert!(
        coordinator.take_asks().is_empty(),
        "and asks for nothing on rows it did not read"
    );
}

#[test]
fn a_round_reads_the_rows_when_the_notice_was_not_read_lately() {
    let mut fleet = Fleet::steady();
    let listing = fleet.listing.clone();
    let wanted: Vec<Arc<str>> = vec![Arc::from("shardId-0")];
    let reading = HashSet::new();
    let stale = fleet.at + Duration::from_secs(30);
    assert!(
        !fleet.rig.coordinator.passes_on_rows_read(
            &listing,
            &wanted,
            &reading,
            OWNER,
            (stale, NOW_MS)
        ),
        "the notice, last read 30 s ago, says nothing of now"
    );
}

#[test]
fn while_a_handoff_this_instance_asked_for_stands_every_round_reads_the_rows() {
    let mut fleet = Fleet::steady();
    // The holder's hand-over bumps the notice, in a call of its own that may fail: the rounds
    // read the rows until the request is over, not only the round after it.
    fleet
        .rig
        .coordinator
        .requested(&Arc::from("shardId-0"), "pod-b", NOW_MS);
    let read = fleet.rounds_reading;
    fleet.rounds(4);
    assert_eq!(fleet.rounds_reading, read + 4);
}

//! A fleet in steady state, for what coordination costs (issue 29): instances on a stream with
//! the default timings, no faults and no records after the first lease, run for some virtual
//! minutes while every store call is counted by kind. The same machines run live, so the counts
//! per minute are the live fleet's (`kinesis-bench cost`): the test holds them to the live
//! figures where both exist.

use super::*;

impl Sim {
    /// Counts the store calls sent from now on, by kind.
    pub(super) fn count_calls_from(&mut self) {
        self.calls = Some(BTreeMap::new());
    }

    /// Counts `kind`, if counting.
    pub(super) fn count_call(&mut self, kind: &OpKind) {
        let Some(calls) = &mut self.calls else {
            return;
        };
        let name = match kind {
            OpKind::Renew => "renew",
            OpKind::CheckpointRenew(_) => "checkpoint+renew",
            OpKind::Checkpoint(_) => "checkpoint",
            OpKind::List { eventual: false } => "list",
            OpKind::List { eventual: true } => "list behind",
            OpKind::Read => "read",
            OpKind::Notice { eventual: false } => "notice",
            OpKind::Notice { eventual: true } => "notice behind",
            OpKind::NoticeHead => "notice head",
            OpKind::Beat { .. } => "beat",
            OpKind::Announce { .. } => "announce",
            OpKind::Acquire => "acquire",
            OpKind::TakeOver { .. } => "take_over",
            OpKind::Release { .. } => "release",
            OpKind::Leave { .. } => "leave",
            OpKind::Withdraw => "withdraw",
            OpKind::AskHandoff { .. } => "ask_handoff",
            OpKind::MarkAsked { .. } => "mark_asked",
            OpKind::HandOver { .. } => "hand_over",
            OpKind::Delete { .. } => "delete",
            OpKind::Commit { .. } | OpKind::Joint { .. } => "commit",
        };
        *calls.entry(name).or_default() += 1;
    }

    /// Runs the schedule until `end` of virtual time, or its first failure.
    pub(super) fn run_until(&mut self, end: Time) -> Result<(), Failure> {
        while self
            .queue
            .peek()
            .is_some_and(|Reverse(queued)| queued.at <= end)
        {
            let Some(Reverse(queued)) = self.queue.pop() else {
                break;
            };
            self.now = queued.at;
            self.stats.events += 1;
            self.step(queued.ev);
            if let Some(failure) = self.failure.take() {
                return Err(failure);
            }
        }
        Ok(())
    }
}

/// How a quiet fleet keeps its leases alive, and whether it balances the shards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Liveness {
    /// Each row renewed, the instances balancing the shards.
    PerRow,
    /// Each row renewed, without balancing (the crate's defaults).
    PerRowUnbalanced,
    /// By each instance's beat, the instances balancing the shards.
    ByBeat,
}

/// A quiet fleet of `instances` on `shards` shards with the default timings, balancing them
/// (but as the crate's defaults, `PerRowUnbalanced`): no fault, no reshard, no crash, records
/// written during the first lease only.
fn quiet_fleet(
    shards: usize,
    instances: usize,
    take_budget: Option<u64>,
    liveness: Liveness,
) -> impl Fn(&mut Config, &mut StdRng) {
    move |cfg: &mut Config, _: &mut StdRng| {
        cfg.take_budget = take_budget;
        cfg.timings = match liveness {
            Liveness::PerRow | Liveness::PerRowUnbalanced => LeaseTimings::default(),
            Liveness::ByBeat => LeaseTimings::default().kept_by_beat(),
        };
        cfg.instances = instances;
        cfg.initial_shards = shards;
        cfg.chaos = Duration::ZERO;
        cfg.p_fail = 0.0;
        cfg.p_timeout = 0.0;
        cfg.p_slow = 0.0;
        cfg.p_kinesis = 0.0;
        cfg.p_resend = 0.0;
        cfg.p_expire = 0.0;
        cfg.p_iterator_fails = 0.0;
        cfg.p_retry = 0.0;
        cfg.p_seek = 0.0;
        cfg.seeks = 0;
        cfg.reshards = 0;
        cfg.early_reshards = 0;
        cfg.crashes = 0;
        cfg.stalls = 0;
        cfg.shutdowns = 0;
        cfg.partitions = 0;
        cfg.clock_steps = 0;
        cfg.resubscribes = 0;
        cfg.quiet_fault = false;
        cfg.malformed = 0;
        cfg.retention = None;
        cfg.notices = true;
        cfg.twin_check = true;
        cfg.balance = liveness != Liveness::PerRowUnbalanced;
        cfg.fan_out = false;
        cfg.exactly_once = false;
        cfg.initial = KinesisPosition::TrimHorizon;
        // A store whose polls read behind (`eventually_consistent_polls`), though they show the
        // latest writes here: those reads are counted apart, to be priced half.
        cfg.read_lag = Duration::ZERO;
        cfg.polls_behind = true;
        cfg.live_hygiene = true;
        // A few records, handled at once: the fleet is idle long before it is counted.
        cfg.write_gap_ms = (5_000, 5_000);
        cfg.p_hold = 0.0;
        cfg.workers = 4;
        // One process's clock, as the live bench's fleet shares.
        cfg.skew = Duration::ZERO;
    }
}

/// The store calls of a quiet fleet of `instances` on `shards` shards per minute, counted from
/// its second minute to its seventh.
fn calls_per_minute(shards: usize, instances: usize) -> BTreeMap<&'static str, f64> {
    fleet_calls(shards, instances, None, Liveness::PerRow).calls
}

/// What a quiet fleet's run shows.
struct FleetRun {
    /// Store calls a minute once steady, by kind.
    calls: BTreeMap<&'static str, f64>,
    /// How many shards each instance reads at the end.
    read: Vec<usize>,
    /// Takes and hand-overs in the first two minutes (the start).
    start_takes: u64,
    start_hand_overs: u64,
    /// The first whole second of virtual time at which every shard was read.
    all_read_at: Option<Duration>,
    /// The most writes the table took within one second of the start, and the takes the
    /// instances paced.
    start_peak_writes: u64,
    start_paced: u64,
    /// How many shards were read at each whole second of the start.
    read_by_second: Vec<usize>,
    /// The calls sent in the start's busiest second for writes, by kind.
    busiest_second: BTreeMap<&'static str, u64>,
}

/// [`calls_per_minute`], how many shards each instance reads at the end, and what the start
/// cost.
fn fleet_calls(
    shards: usize,
    instances: usize,
    take_budget: Option<u64>,
    liveness: Liveness,
) -> FleetRun {
    let fleet = quiet_fleet(shards, instances, take_budget, liveness);
    let mut sim = Sim::new(7, &fleet);
    let from = Duration::from_secs(120);
    let minutes = 5;
    let mut all_read_at = None;
    let mut read_by_second = Vec::new();
    let mut busiest_second = BTreeMap::new();
    let writes = |calls: &BTreeMap<&'static str, u64>| -> u64 {
        calls
            .iter()
            .filter(|(kind, _)| {
                !matches!(
                    **kind,
                    "list" | "list behind" | "read" | "notice" | "notice behind" | "notice head"
                )
            })
            .map(|(_, count)| count)
            .sum()
    };
    for second in 1..=from.as_secs() {
        let at = Duration::from_secs(second);
        sim.count_calls_from();
        sim.run_until(at)
            .unwrap_or_else(|failure| panic!("the fleet settles: {}", failure.message));
        let calls = sim.calls.take().unwrap_or_default();
        if writes(&calls) > writes(&busiest_second) {
            busiest_second = calls;
        }
        if all_read_at.is_none() {
            let read: HashSet<usize> = sim
                .insts
                .iter()
                .flat_map(|inst| inst.running.keys().copied())
                .collect();
            read_by_second.push(read.len());
            all_read_at = (read.len() == shards).then_some(at);
        }
    }
    let (start_takes, start_hand_overs) = (sim.stats.takes, sim.stats.hand_overs);
    let (start_peak_writes, start_paced) =
        (sim.stats.peak_writes_per_second, sim.stats.paced_waits);
    sim.count_calls_from();
    sim.run_until(from + Duration::from_secs(60 * minutes))
        .unwrap_or_else(|failure| panic!("the fleet stays: {}", failure.message));
    let read = sim.insts.iter().map(|inst| inst.running.len()).collect();
    let calls = sim
        .calls
        .unwrap_or_default()
        .into_iter()
        .map(|(kind, count)| (kind, count as f64 / minutes as f64))
        .collect();
    FleetRun {
        calls,
        read,
        start_takes,
        start_hand_overs,
        all_read_at,
        start_peak_writes,
        start_paced,
        read_by_second,
        busiest_second,
    }
}

/// The calls of `kind` a minute in `calls`, whether consistent or read behind (`list` and
/// `list behind`, `notice` and `notice behind`).
fn calls_of(calls: &BTreeMap<&'static str, f64>, kind: &str) -> f64 {
    let behind = format!("{kind} behind");
    calls
        .iter()
        .filter(|(name, _)| **name == kind || **name == behind)
        .map(|(_, count)| count)
        .sum()
}

/// How many writes a second a fresh on-demand DynamoDB table accepts (its initial throughput).
const FRESH_TABLE_WRITES_PER_SECOND: u64 = 4_000;

/// Runs the quiet fleet of `shards` and `instances` and holds it to what any size costs: every
/// shard read within a minute of the start, never more writes a second than a fresh on-demand
/// table accepts (issue 29, item 4), each instance the floor or the ceiling of its share at the
/// end; 20 renewals a shard a minute
/// (one every 3 s), 60 notice reads an instance (one a second), and every row read once or twice
/// in five minutes by the fleet, its instances taking turns (0.2 to 0.4 list calls a minute
/// between them): no rate grows with the size. Prints the calls a minute, and how long the run took.
///
/// Kept alive by beat (no balancing), the fleet writes no renewal and one beat an instance every
/// renewal interval (20 a minute) whatever its size, and each shard is read by one instance.
fn holds_any_size(shards: usize, instances: usize, take_budget: Option<u64>, liveness: Liveness) {
    let started = std::time::Instant::now();
    let FleetRun {
        calls,
        read,
        start_takes,
        start_hand_overs,
        all_read_at,
        start_peak_writes,
        start_paced,
        read_by_second,
        busiest_second,
    } = fleet_calls(shards, instances, take_budget, liveness);
    let per = |kind: &str| calls_of(&calls, kind);
    // The fleet's full reads: the instances take turns (`coordinator::full_read_turns`).
    let (renewals, notices, lists) = (
        per("renew") / shards as f64,
        per("notice") / instances as f64,
        per("list"),
    );
    eprintln!(
        "{shards} shards, {instances} instances, a minute: {calls:?}; renewals a shard \
         {renewals:.1}, notice reads an instance {notices:.1}, list Scans of the fleet {lists:.2}; \
         the start: every shard read after {all_read_at:?}, {start_takes} takes, \
         {start_hand_overs} hand-overs, at most {start_peak_writes} writes a second, \
         {start_paced} paced waits ({:.1} s to run); shards read at each second from the \
         first: {read_by_second:?}; the busiest second's calls: {busiest_second:?}",
        started.elapsed().as_secs_f64()
    );
    assert!(
        all_read_at.is_some_and(|at| at <= Duration::from_secs(60)),
        "every shard read within a minute of the start: {all_read_at:?}"
    );
    assert!(
        start_peak_writes <= FRESH_TABLE_WRITES_PER_SECOND,
        "{start_peak_writes} writes in one second of the start"
    );
    let (floor, ceiling) = (shards / instances, shards.div_ceil(instances));
    assert!(
        read.iter().sum::<usize>() == shards
            && (liveness == Liveness::PerRowUnbalanced
                || read.iter().all(|&n| (floor..=ceiling).contains(&n))),
        "{shards} shards over {instances} instances: each reads {read:?}"
    );
    if liveness == Liveness::ByBeat {
        let beats = per("beat") / instances as f64;
        assert!(per("renew") == 0.0, "none renewed: {calls:?}");
        assert!(
            (beats - 20.0).abs() < 0.5,
            "{beats} beats an instance: {calls:?}"
        );
        assert!(
            notices <= 60.6 && lists <= 0.4,
            "{notices} notice reads an instance and {lists} list calls: {calls:?}"
        );
        return;
    }
    assert!(
        (renewals - 20.0).abs() < 0.2,
        "{renewals} renewals a shard: {calls:?}"
    );
    assert!(
        (notices - 60.0).abs() < 0.6,
        "{notices} notice reads an instance: {calls:?}"
    );
    assert!(
        (0.2..=0.4).contains(&lists),
        "{lists} list calls of the fleet: {calls:?}"
    );
}

/// The simulated fleet's calls per minute agree with the live fleet's where both exist:
/// `kinesis-bench cost --idle --window 300` at 8 shards with 1 and 4 instances and at 64 with 4
/// (the benchmarks page, "Coordination cost", over five minutes: renew 160, list 0.2, notice 20,
/// beat 10; renew 160, list 0.8, notice 239.4, beat 47.8; and renew 1,280, list 0.8, notice
/// 239.6, beat 46.8 a minute, measured before the instances took turns at the full read: 0.2
/// list calls a minute between them since). The fleet reads every row once in five minutes
/// (`FULL_READ_LISTINGS`), its instances by turns: their rounds in between plan on the rows as
/// last read.
/// Within 15 %, or one call a minute: a beat is written at the first notice read that finds it
/// running out within half a lease, 5 s after the last live and 5 to 6 s in the simulation,
/// whose calls take 2 to 50 ms (42.6 beats a minute against 48 at 4 instances).
#[test]
fn a_quiet_fleet_calls_the_store_as_the_live_fleet_does() {
    let agree = |simulated: f64, live: f64| (simulated - live).abs() <= (live * 0.15).max(1.0);
    for (shards, instances, live) in [
        (
            8,
            1,
            [
                ("renew", 160.0),
                ("list", 0.2),
                ("notice", 20.0),
                ("beat", 10.0),
            ],
        ),
        (
            8,
            4,
            [
                ("renew", 160.0),
                ("list", 0.8),
                ("notice", 239.4),
                ("beat", 47.8),
            ],
        ),
        (
            64,
            4,
            [
                ("renew", 1280.0),
                ("list", 0.8),
                ("notice", 239.6),
                ("beat", 46.8),
            ],
        ),
    ] {
        let simulated = calls_per_minute(shards, instances);
        for (kind, live) in live {
            let count = calls_of(&simulated, kind);
            assert!(
                agree(count, live),
                "{shards} shards, {instances} instances: {kind} {count} a minute simulated, \
                 {live} live; every call: {simulated:?}"
            );
        }
        // The fleet reads every row once or twice in the five minutes counted, by turns, not
        // each instance at each of its 30 rounds.
        let lists = calls_of(&simulated, "list") * 5.0;
        assert!(
            (1.0..=2.0).contains(&lists),
            "{shards} shards, {instances} instances: {lists} list calls in five minutes; every \
             call: {simulated:?}"
        );
    }
}

/// A thousand shards and ten instances cost per shard and per instance what the small fleets
/// do: the simulation's fleet at a size the local stack cannot serve, in the test command (about
/// 6 s in debug); [`a_fleet_of_any_size`] runs 10,000 x 100 on demand.
#[test]
fn a_thousand_shards_cost_per_shard_and_instance_what_eight_do() {
    holds_any_size(1_000, 10, None, Liveness::PerRow);
}

/// The same fleet with its leases kept alive by beat, balancing: every instance reads its share,
/// no renewal, twenty beats an instance a minute.
#[test]
fn a_thousand_shards_kept_alive_by_beat_write_twenty_beats_an_instance_a_minute() {
    holds_any_size(1_000, 10, None, Liveness::ByBeat);
}

/// A fleet renewing per row without balancing, as the crate's defaults run, twice as large (a
/// thousand shards and ten instances never wrote past a fresh table's 4,000 a second even
/// racing): a fleet that starts together takes the shards never taken by turn rather than
/// racing for the same ones (`coordinator::turns`), and as one of forty until it knows its
/// peers, so its start writes no faster than a fresh table accepts (before: 3,001 takes for
/// 2,000 shards, 5,002 writes in the first second). About 18 s in debug.
#[test]
fn two_thousand_shards_without_balancing_start_within_a_fresh_tables_writes() {
    holds_any_size(2_000, 20, None, Liveness::PerRowUnbalanced);
}

/// A fleet of any size, on demand: `SIM_FLEET=10000x100 cargo test -p ruststream-kinesis
/// --all-features --lib simulation::fleet::a_fleet_of_any_size -- --ignored --nocapture` prints
/// its store calls a minute, all its instances together, and the calls an instance and a shard
/// cost (issue 29, item 1: the simulation's half at sizes the local stack cannot serve), and
/// holds them to what any size costs.
#[test]
#[ignore = "on demand: SIM_FLEET=<shards>x<instances>"]
fn a_fleet_of_any_size() {
    let size = std::env::var("SIM_FLEET").unwrap_or_else(|_| "10000x100".to_owned());
    let (shards, instances) = size
        .split_once('x')
        .and_then(|(shards, instances)| Some((shards.parse().ok()?, instances.parse().ok()?)))
        .unwrap_or_else(|| panic!("SIM_FLEET={size}: <shards>x<instances>, e.g. 10000x100"));
    // `SIM_TAKE_BUDGET=<takes a second>` paces the fleet's takes at another budget than the
    // crate's (a large one: unpaced, for a comparison).
    let budget = std::env::var("SIM_TAKE_BUDGET")
        .ok()
        .map(|budget| budget.parse().expect("SIM_TAKE_BUDGET: takes a second"));
    // `SIM_BEAT=1`: the fleet keeps its leases alive by beat; `SIM_UNBALANCED=1`: per row,
    // without balancing (the crate's defaults).
    let liveness = if super::config::beat_forced() {
        Liveness::ByBeat
    } else if std::env::var_os("SIM_UNBALANCED").is_some() {
        Liveness::PerRowUnbalanced
    } else {
        Liveness::PerRow
    };
    holds_any_size(shards, instances, budget, liveness);
}

//! The settings of one schedule, drawn at random, and the marks a checkpoint is compared by.

use super::*;

/// A checkpoint's place in a shard: none, the start its first owner recorded before reading
/// (below every sequence number), through a user record of a KPL aggregate or through a whole
/// record (`WHOLE`), or the end.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Mark {
    None,
    Start,
    Seq(u64, u64),
    End,
}

/// The sub-sequence of a [`Mark`] through a whole record: past every user record of it.
pub(super) const WHOLE: u64 = u64::MAX;

impl Mark {
    pub(super) fn of(checkpoint: Option<&str>) -> Self {
        match checkpoint {
            None => Self::None,
            Some(SHARD_END) => Self::End,
            Some(checkpoint) => match crate::lease::split_within(checkpoint) {
                Some((sequence, sub)) => {
                    Self::Seq(sequence.parse().expect("a sequence number"), sub)
                }
                // A seek's position, at a record: through every record before it.
                None if checkpoint.starts_with("SEEK:AT_SEQUENCE:") => checkpoint
                    ["SEEK:AT_SEQUENCE:".len()..]
                    .parse::<u64>()
                    .ok()
                    .and_then(|sequence| sequence.checked_sub(1))
                    .map_or(Self::Start, |before| Self::Seq(before, WHOLE)),
                // A start a first owner recorded (`ShardStart::to_checkpoint`): `TRIM_HORIZON`,
                // or the moment it opened the shard at the tip or at a timestamp.
                None => checkpoint
                    .parse()
                    .map_or(Self::Start, |sequence| Self::Seq(sequence, WHOLE)),
            },
        }
    }
}

/// As a failure report says it: `Seq(42)` through a whole record, `Seq(42:1)` through user
/// record 1 of the aggregate at 42.
impl std::fmt::Debug for Mark {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::None => f.write_str("None"),
            Self::Start => f.write_str("Start"),
            Self::Seq(sequence, WHOLE) => write!(f, "Seq({sequence})"),
            Self::Seq(sequence, sub) => write!(f, "Seq({sequence}:{sub})"),
            Self::End => f.write_str("End"),
        }
    }
}

/// The settings of one schedule.
#[derive(Debug, Clone)]
pub(super) struct Config {
    pub(super) timings: LeaseTimings,
    pub(super) instances: usize,
    pub(super) initial_shards: usize,
    /// How long faults happen; the quiet phase follows.
    pub(super) chaos: Time,
    /// The pairwise bound of the wall-clock offsets.
    pub(super) skew: Duration,
    pub(super) p_fail: f64,
    pub(super) p_timeout: f64,
    pub(super) p_slow: f64,
    /// The store client's timeout: the longest a store call is in flight.
    pub(super) timeout: Duration,
    pub(super) p_kinesis: f64,
    pub(super) write_gap_ms: (u64, u64),
    pub(super) channel: usize,
    pub(super) workers: usize,
    pub(super) batch: usize,
    pub(super) poll: Duration,
    pub(super) reshards: usize,
    pub(super) crashes: usize,
    pub(super) stalls: usize,
    pub(super) shutdowns: usize,
    pub(super) partitions: usize,
    pub(super) clock_steps: usize,
    pub(super) quiet_fault: bool,
    /// Subscriptions dropped and opened again in the same process (same owner id).
    pub(super) resubscribes: usize,
    /// Whether a timed-out call may land after its caller gave up (up to three timeouts after
    /// it was sent), behind the caller's later calls, which the counter fence keeps out (see
    /// `a_write_landing_after_its_timeout_never_moves_a_checkpoint_back`).
    pub(super) late_landing: bool,
    /// Whether late landing includes takes. A take of a row its owner holds never moves its
    /// expiry back (`rules::take`), so one of an instance's own takes that lands after a later
    /// take of the same owner id is refused: see
    /// `a_late_take_of_ones_own_row_never_moves_its_expiry_back`. On in the main run.
    pub(super) late_takes: bool,
    /// The chance that a handler hands its delivery back (`nack(true)`, a `retry_after`, a
    /// delivery dropped unsettled): it comes back on the same session, unsettled meanwhile.
    pub(super) p_retry: f64,
    /// How long a handed-back delivery waits before it comes back (`nack_after`; zero for
    /// `nack(true)`), the redelivery task sleeping until it is due.
    pub(super) retry_delay: Duration,
    /// The read-ahead window (`max_unsettled`): how many deliveries past the oldest unsettled
    /// record the reader reads before it waits for a settle.
    pub(super) window: usize,
    /// Whether the store keeps the stream's notice (`LeaseStore::notice`), as both stores of
    /// the crate do, or answers `None` (a store written against the five calls), so the poll
    /// reads the rows at every poll.
    pub(super) notices: bool,
    /// Whether the store keeps the notice's head apart from its beats and runs' records, so the
    /// poll reads the head alone while the beats it last read still say who is alive
    /// (`coordinator/notice_reads.rs`, `Coordinator::with_notice_head_apart`). No store of the
    /// crate does yet: the layout that will (the cost plan's step 1) is simulated first.
    pub(super) notice_apart: bool,
    /// How far behind the latest writes a read that may be (`LeaseStore::list_eventually`,
    /// `notice_eventually`, `notice_head`) answers at most, each item on its own: zero (every
    /// read consistent) in half the schedules; DynamoDB's usually within a second, and here up
    /// to a few.
    pub(super) read_lag: Duration,
    /// The mistake reads behind invite, set back: a take-over judges its holder's beat on a
    /// notice read behind (`notice_eventually`) rather than consistent.
    pub(super) take_reads_behind: bool,
    /// Seeds the generator that draws each read's lag.
    pub(super) behind_seed: u64,
    /// Whether the coordinators are told the store's polls may read behind
    /// (`LeaseStore::polls_read_behind`): in the schedules that draw a lag, and in the fleet
    /// that prices them (whose reads show the latest writes all the same).
    pub(super) polls_behind: bool,
    /// Whether each run records itself under its owner id in the notice and judges the notices
    /// it reads after that (`Coordinator::with_incarnation`), as every live subscription does.
    /// No two runs of one owner id are alive at once here (a restart follows every request of
    /// the dead run), so a run that stops for another one is a false alarm, and fails the
    /// schedule.
    pub(super) twin_check: bool,
    /// Whether a seek tells the lease's driver of its checkpoint (`ShardHandle::seek`, since
    /// settles tell it of the first pending checkpoint only). Not drawn; off in the schedules
    /// pinned before it (their replays would take other turns).
    pub(super) seek_wakes_writer: bool,
    /// How much longer than a request lives a row must have been one no reader needs before a
    /// round deletes it (`hygiene`): short, so that deletions happen within a schedule.
    pub(super) gone_grace: Duration,
    /// Whether the instances balance the shards (`balance_shards`): they take free shards only
    /// up to their share, and ask the most loaded for handoffs.
    pub(super) balance: bool,
    /// Whether the shards are read with enhanced fan-out (`SubscribeToShard`) rather than
    /// `GetRecords`.
    pub(super) fan_out: bool,
    /// The share of writes that put a KPL aggregate (one to four user records under one
    /// sequence number) rather than a plain record.
    pub(super) aggregates: f64,
    /// How often a `GetRecords` call or a subscription's event answers no record where records
    /// follow (as Kinesis may), in the schedules drawn with aggregates.
    pub(super) p_empty: f64,
    /// With fan-out: whether a closed shard's last event names its children (AWS), or none
    /// does and the end is confirmed by polling (the local engine).
    pub(super) fan_out_children: bool,
    /// The chance that the runtime holds a pulled delivery in a worker lane for a while before
    /// its handler starts (a slow handler ahead of it, a batch gathering).
    pub(super) p_hold: f64,
    /// The chance that a `GetRecords` call finds its iterator expired, and the chance that each
    /// try of the fresh iterator then fails (during the chaos phase).
    pub(super) p_expire: f64,
    pub(super) p_iterator_fails: f64,
    /// The chance that a held write lands and its answer is lost (a 5xx, a reset), and the SDK
    /// sends it again at once: the resend is refused by the counter the first attempt moved, and
    /// the refusal recognised as the write's own success (`rules::Fence::refused_by`).
    pub(super) p_resend: f64,
    /// Where shards this application never read start (`KinesisStream::initial_position`):
    /// the oldest record, the tip, or a timestamp.
    pub(super) initial: KinesisPosition,
    /// How long after it closed a shard is trimmed out of the stream (retention), if at all.
    pub(super) retention: Option<Duration>,
    /// Reshards before any instance starts: closed shards the application never read (skipped
    /// at the tip, read from a timestamp).
    pub(super) early_reshards: usize,
    /// Rows made malformed for a while (an operator's edit, another tool), then repaired.
    pub(super) malformed: usize,
    /// How many seeks handlers may make, and the chance that a finishing handler makes one.
    pub(super) seeks: usize,
    pub(super) p_seek: f64,
    /// Exactly once: sessions commit what their handlers staged with the checkpoint
    /// (`ShardLease::committing`), and the store applies the effects with the row.
    pub(super) exactly_once: bool,
    /// Every `stage_every`-th record (by shard and index) stages nothing (`usize::MAX`: every
    /// record stages its effect).
    pub(super) stage_every: usize,
    /// The chance that a commit with effects is refused by a unit's own condition.
    pub(super) p_user_refuse: f64,
    /// Whether the store answers a resent commit token with success without applying it again
    /// (DynamoDB), or evaluates it again (moto): the row's `commit_token` then tells it landed.
    pub(super) token_honoured: bool,
    /// Exactly once, the handler takes batches of at most this many records (1: one at a time):
    /// a batch's first deliveries of one shard settle as one unit.
    pub(super) handler_batch: usize,
    /// Exactly once, the chance that a handling drops its record (`nack(false)`: the checkpoint
    /// passes it with nothing it staged), or a batch's body fails as a whole (every record
    /// dropped); drawn from a generator of its own (`drop_seed`), so the schedule's other
    /// draws stay what they were.
    pub(super) p_drop: f64,
    pub(super) drop_seed: u64,
    /// Exactly once, a batch holds records of several shards, committed in one joint commit
    /// with every shard's row (`shard::joint`); else one shard's.
    pub(super) joint_batches: bool,
    /// The coordinators delete rows after the live grace and read every row at the live
    /// cadence (a fleet scenario, `simulation/fleet.rs`); else after a short grace.
    pub(super) live_hygiene: bool,
    /// With the short grace, how many listing intervals apart every row is read at least: in
    /// between, rounds plan on the rows as last read while nothing says they moved
    /// (`coordinator/machine/steady.rs`); 0: every round reads them, as every schedule did
    /// before rounds planned on the rows as last read.
    pub(super) full_read_listings: u32,
    /// A balancing instance takes no free shard before a notice shows its own beat (else from
    /// its first plan, as schedules pinned before the wait were drawn).
    pub(super) wait_for_peers: bool,
    /// How many writes a second the table accepts during the chaos phase (counted by whole
    /// seconds of virtual time); those past it are refused as throttled, not applied. `None`:
    /// no limit.
    pub(super) table_write_rate: Option<u64>,
    /// The fleet's takes a second (`coordinator/take_pace.rs`); `None`: the crate's.
    pub(super) take_budget: Option<u64>,
}

impl Config {
    /// How long after it was sent a store call may still land.
    /// The grace before a round deletes a row no reader needs: longer than any request lives,
    /// so no take sent before the shard finished lands after the deletion.
    pub(super) fn hygiene_grace(&self) -> Duration {
        self.request_lifetime() + self.gone_grace
    }

    /// Whether the instances balance the shards, as drawn. (Kept alive by beats, a holder hears
    /// of a handoff asked of it from the notice's mark, not from a renewing write's answer: it
    /// writes none while idle. Before the mark, beat schedules did not balance: 7 shards on one
    /// of two instances for a minute.)
    pub(super) fn balances(&self) -> bool {
        self.balance
    }

    /// Whether the store keeps notices: as drawn, and always in beat mode, which needs them (a
    /// take-over judges the holder by its beat there; `connect` is to refuse beat mode on a
    /// store without them).
    pub(super) fn keeps_notices(&self) -> bool {
        self.notices || self.timings.is_kept_by_beat()
    }

    pub(super) fn request_lifetime(&self) -> Duration {
        if self.late_landing {
            self.timeout * 3
        } else {
            self.timeout
        }
    }

    /// How long a new incarnation waits after the old one died: until every take of the old one
    /// landed or timed out (the counter fence keeps its later writes out).
    pub(super) fn restart_wait(&self) -> Duration {
        self.timeout + ms(1)
    }

    pub(super) fn random(rng: &mut StdRng) -> Self {
        let timings = match rng.random_range(0..4) {
            0 => LeaseTimings::default(),
            1 => LeaseTimings::default().with_listing_interval(Duration::from_secs(2)),
            2 => LeaseTimings::new(Duration::from_secs(3), Duration::from_secs(1))
                .expect("valid timings")
                .with_listing_interval(Duration::from_secs(1)),
            _ => LeaseTimings::new(Duration::from_secs(6), Duration::from_secs(2))
                .expect("valid timings")
                .with_listing_interval(Duration::from_secs(3)),
        };
        let poll = [Duration::ZERO, ms(500), Duration::from_secs(1)][rng.random_range(0..3)];
        let cadence = [Duration::ZERO, Duration::from_secs(1), ms(2_500)][rng.random_range(0..3)];
        let timings = timings
            .with_handover_poll_interval(poll)
            .with_checkpoint_interval(cadence);
        let lease = timings.lease();
        let renew = timings.renew();
        let pick = |rng: &mut StdRng, options: &[f64]| options[rng.random_range(0..options.len())];
        Self {
            timings,
            instances: rng.random_range(2..=5),
            initial_shards: rng.random_range(1..=4),
            chaos: lease * rng.random_range(4..=8),
            skew: tolerated_skew(&timings),
            p_fail: pick(rng, &[0.0, 0.01, 0.05, 0.2]),
            p_timeout: pick(rng, &[0.0, 0.01, 0.05, 0.1]),
            p_slow: pick(rng, &[0.0, 0.02, 0.1]),
            timeout: ms(rng.random_range(millis(renew) / 2..=millis(renew) * 2)),
            p_kinesis: pick(rng, &[0.0, 0.02, 0.1]),
            write_gap_ms: (rng.random_range(20..=100), rng.random_range(150..=600)),
            channel: rng.random_range(1..=6),
            workers: rng.random_range(1..=4),
            batch: rng.random_range(1..=5),
            poll: ms(rng.random_range(millis(lease) / 10..=millis(lease) / 5)),
            reshards: rng.random_range(0..=4),
            crashes: rng.random_range(0..=2),
            stalls: rng.random_range(0..=2),
            shutdowns: rng.random_range(0..=2),
            partitions: rng.random_range(0..=2),
            clock_steps: rng.random_range(0..=2),
            resubscribes: rng.random_range(0..=2),
            quiet_fault: rng.random_bool(0.7),
            late_landing: true,
            late_takes: true,
            p_retry: pick(rng, &[0.0, 0.05, 0.2]),
            p_hold: pick(rng, &[0.0, 0.2, 0.5]),
            p_expire: pick(rng, &[0.0, 0.01, 0.05]),
            p_iterator_fails: pick(rng, &[0.0, 0.3, 0.8]),
            p_resend: pick(rng, &[0.0, 0.02, 0.1]),
            initial: match rng.random_range(0..4) {
                0 => KinesisPosition::Latest,
                1 => {
                    let after = rng.random_range(0..=millis(lease) * 4);
                    KinesisPosition::AtTimestamp(wall_time(after))
                }
                _ => KinesisPosition::TrimHorizon,
            },
            retention: rng
                .random_bool(0.3)
                .then(|| lease * rng.random_range(15..=30)),
            early_reshards: if rng.random_bool(0.3) {
                rng.random_range(1..=2)
            } else {
                0
            },
            malformed: rng.random_range(0..=1),
            seeks: rng.random_range(0..=3),
            p_seek: pick(rng, &[0.0, 0.01, 0.03]),
            // Drawn last, so the draws above stay those of the schedules before them.
            retry_delay: [Duration::ZERO, ms(200), Duration::from_secs(2)][rng.random_range(0..3)],
            window: if rng.random_bool(0.5) {
                rng.random_range(1..=8)
            } else {
                usize::MAX
            },
            notices: rng.random_bool(0.8),
            gone_grace: timings.listing_interval() * rng.random_range(0..=2),
            balance: false,
            fan_out: false,
            fan_out_children: false,
            aggregates: 0.0,
            p_empty: 0.0,
            twin_check: false,
            seek_wakes_writer: true,
            exactly_once: false,
            stage_every: usize::MAX,
            p_user_refuse: 0.0,
            token_honoured: false,
            handler_batch: 1,
            p_drop: 0.0,
            drop_seed: 0,
            joint_batches: false,
            live_hygiene: false,
            full_read_listings: 0,
            wait_for_peers: true,
            table_write_rate: None,
            take_budget: None,
            notice_apart: false,
            read_lag: Duration::ZERO,
            behind_seed: 0,
            polls_behind: false,
            take_reads_behind: false,
        }
        .with_exactly_once(rng)
        .with_balancing(rng)
        .with_fan_out(rng)
        .with_aggregates(rng)
        .with_twin_check(rng)
        .with_steady_rounds(rng)
        .with_pace(rng)
        .with_beat_mode(rng)
        .with_notice_apart(rng)
        .with_reads_behind(rng)
    }

    /// How far behind a read that may be answers, from a generator of its own (as
    /// [`with_balancing`](Self::with_balancing) draws): none in half the schedules, up to
    /// 300 ms, 1 s or 3 s in the others (`SIM_BEHIND=<ms>` sets it in every one).
    fn with_reads_behind(mut self, rng: &StdRng) -> Self {
        let mut side = StdRng::seed_from_u64(rng.clone().random::<u64>() ^ 0xbe41_d000);
        self.read_lag = if side.random_bool(0.5) {
            [ms(300), ms(1_000), ms(3_000)][side.random_range(0..3)]
        } else {
            Duration::ZERO
        };
        if let Some(lag) = behind_forced() {
            self.read_lag = lag;
        }
        self.polls_behind = !self.read_lag.is_zero();
        self.behind_seed = side.random();
        self
    }

    /// Whether the store keeps the notice's head apart, from a generator of its own (as
    /// [`with_balancing`](Self::with_balancing) draws): in half the schedules (`SIM_APART=1`
    /// draws it in every one, to replay a seed found so).
    fn with_notice_apart(mut self, rng: &StdRng) -> Self {
        let mut side = StdRng::seed_from_u64(rng.clone().random::<u64>() ^ 0x0a9a_47ed);
        self.notice_apart = side.random_bool(0.5) || apart_forced();
        self
    }

    /// Whether the instances keep their leases alive by their beats
    /// (`LeaseTimings::kept_by_beat`, their rows kept a thousand years ahead), from a generator
    /// of its own (as [`with_balancing`](Self::with_balancing) draws): a third of the schedules
    /// (`SIM_BEAT=1` draws it in every one, to replay a seed found in beat mode).
    fn with_beat_mode(mut self, rng: &StdRng) -> Self {
        let mut side = StdRng::seed_from_u64(rng.clone().random::<u64>() ^ 0xbea7_0b0e);
        if side.random_bool(1.0 / 3.0) || beat_forced() {
            self.timings = self.timings.kept_by_beat();
        }
        self
    }

    /// How fast the fleet takes and the table writes, from a generator of its own (as
    /// [`with_balancing`](Self::with_balancing) draws): in half the schedules the takes are
    /// paced at a few a second (the crate's budget never paces a handful of shards), and in a
    /// quarter the table throttles past a few writes a second while faults happen.
    fn with_pace(mut self, rng: &StdRng) -> Self {
        let mut side = StdRng::seed_from_u64(rng.clone().random::<u64>() ^ 0x9ace_0f7a);
        if side.random_bool(0.5) {
            self.take_budget = Some(side.random_range(1..=6));
        }
        if side.random_bool(0.25) {
            self.table_write_rate = Some(side.random_range(3..=20));
        }
        self
    }

    /// How often every row is read, from a generator of its own (as
    /// [`with_balancing`](Self::with_balancing) draws): in a third of the schedules every round
    /// reads them, as before rounds planned on the rows as last read.
    fn with_steady_rounds(mut self, rng: &StdRng) -> Self {
        let mut side = StdRng::seed_from_u64(rng.clone().random::<u64>() ^ 0x57ea_d700);
        self.full_read_listings = [0, 4, 30][side.random_range(0..3)];
        self
    }

    /// Whether the sessions commit exactly once, and how, from a generator of its own (as
    /// [`with_balancing`](Self::with_balancing) draws), so the schedules stay those they were.
    fn with_exactly_once(mut self, rng: &StdRng) -> Self {
        let mut side = StdRng::seed_from_u64(rng.clone().random::<u64>() ^ 0xe0_0c0e);
        self.exactly_once = side.random_bool(0.4);
        self.stage_every = [2, 5, usize::MAX][side.random_range(0..3)];
        self.p_user_refuse = [0.0, 0.02, 0.1][side.random_range(0..3)];
        self.token_honoured = side.random_bool(0.5);
        self.handler_batch = [1, 1, 4, 16][side.random_range(0..4)];
        if self.exactly_once {
            self.p_drop = [0.0, 0.0, 0.05][side.random_range(0..3)];
            self.drop_seed = side.random();
            self.joint_batches = self.handler_batch > 1 && side.random_bool(0.5);
        }
        self
    }

    /// Whether the runs record themselves under their owner ids, from a generator of its own (as
    /// [`with_balancing`](Self::with_balancing) draws), so the schedules stay those they were.
    fn with_twin_check(mut self, rng: &StdRng) -> Self {
        let mut side = StdRng::seed_from_u64(rng.clone().random::<u64>() ^ 0x7717_0a11);
        self.twin_check = side.random_bool(0.7);
        self
    }

    /// How many writes put KPL aggregates, from a generator of its own (as
    /// [`with_balancing`](Self::with_balancing) draws): half the schedules write plain records
    /// only, as every schedule did before aggregates were modelled.
    fn with_aggregates(mut self, rng: &StdRng) -> Self {
        let mut side = StdRng::seed_from_u64(rng.clone().random::<u64>() ^ 0x6b70_6c00);
        if side.random_bool(0.5) {
            self.aggregates = [0.3, 0.8][side.random_range(0..2)];
            self.p_empty = [0.0, 0.1][side.random_range(0..2)];
        }
        self
    }

    /// Whether the shards are read with enhanced fan-out, from a generator of its own (as
    /// [`with_balancing`](Self::with_balancing) draws), so the schedules stay those they were.
    fn with_fan_out(mut self, rng: &StdRng) -> Self {
        let mut side = StdRng::seed_from_u64(rng.clone().random::<u64>() ^ 0xfa0f_fa0f);
        self.fan_out = side.random_bool(0.3);
        self.fan_out_children = side.random_bool(0.5);
        self
    }

    /// Whether the instances balance, and the holder's drain of a handoff (short, the
    /// default, or longer than a lease), drawn from a generator of their own: the schedule's
    /// generator is left where it was, so a seed still draws the schedule it drew before
    /// balancing existed, and the tests pinned on seeds keep finding what they pin.
    fn with_balancing(mut self, rng: &StdRng) -> Self {
        let mut side = StdRng::seed_from_u64(rng.clone().random());
        self.balance = side.random_bool(0.5);
        let drain =
            [ms(300), Duration::from_secs(5), self.timings.lease() * 2][side.random_range(0..3)];
        self.timings = self.timings.with_handoff_drain(drain);
        self
    }
}

/// Whether `SIM_BEAT=1` asks for every schedule (and the fleet) to keep its leases alive by
/// beat.
pub(super) fn beat_forced() -> bool {
    std::env::var("SIM_BEAT").is_ok_and(|value| value == "1")
}

/// `SIM_APART=1`: every schedule's store keeps the notice's head apart
/// ([`Config::notice_apart`]).
pub(super) fn apart_forced() -> bool {
    std::env::var("SIM_APART").is_ok_and(|value| value == "1")
}

/// `SIM_BEHIND=<ms>`: every schedule's reads that may be behind are, up to that lag
/// ([`Config::read_lag`]; `0`: none).
pub(super) fn behind_forced() -> Option<Duration> {
    std::env::var("SIM_BEHIND")
        .ok()
        .map(|lag| ms(lag.parse().expect("SIM_BEHIND: milliseconds")))
}

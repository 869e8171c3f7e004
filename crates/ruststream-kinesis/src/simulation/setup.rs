//! A schedule's start: the simulation's plumbing (events, tokens, clocks, the trace) and the
//! world it sets up.

use super::*;

impl Sim {
    /// A schedule from `seed`, its settings drawn and then `tweak`ed.
    pub(super) fn new(seed: u64, tweak: &dyn Fn(&mut Config, &mut StdRng)) -> Self {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut cfg = Config::random(&mut rng);
        tweak(&mut cfg, &mut rng);
        let quiet_at = cfg.chaos;
        let live_from = quiet_at + cfg.request_lifetime() + ms(1);
        let mut sim = Self {
            rng,
            drops: StdRng::seed_from_u64(cfg.drop_seed),
            behind: StdRng::seed_from_u64(cfg.behind_seed),
            versions: super::behind::Versions::default(),
            dropped: HashSet::new(),
            now: Time::ZERO,
            seq: 0,
            token: 0,
            queue: BinaryHeap::new(),
            stream: Stream {
                next_seq: 1_000,
                ..Stream::default()
            },
            rows: Vec::new(),
            notice: Notice::default(),
            fences: HashMap::new(),
            seek_floors: HashMap::new(),
            unit_effects: HashMap::new(),
            next_batch: 0,
            applied: HashMap::new(),
            applied_records: HashSet::new(),
            effects_let_go: HashMap::new(),
            honoured: HashSet::new(),
            seek_epochs: HashMap::new(),
            next_unit: 0,
            landed_pairs: HashSet::new(),
            known_rows: HashSet::new(),
            insts: Vec::new(),
            sid_inst: HashMap::new(),
            next_sid: 1,
            ghost: Vec::new(),
            written: 0,
            acked: 0,
            quiet_at,
            live_from,
            writes_until: quiet_at + cfg.timings.lease(),
            last_live_check: Time::ZERO,
            last_full_read: Time::ZERO,
            reshaped_at: Time::ZERO,
            last_progress: Time::ZERO,
            seeks_left: cfg.seeks,
            failure: None,
            trace: None,
            full_trace: false,
            stats: Stats::default(),
            calls: None,
            write_second: (0, 0),
            throttled_at: None,
            crashed_at: None,
            cfg,
        };
        sim.setup();
        sim
    }

    // ----- plumbing -------------------------------------------------------------------------

    pub(super) fn push(&mut self, at: Time, ev: Ev) {
        self.seq += 1;
        self.queue.push(Reverse(Queued {
            at,
            seq: self.seq,
            ev,
        }));
    }

    pub(super) fn token(&mut self) -> u64 {
        self.token += 1;
        self.token
    }

    /// A few milliseconds: tasks woken together run in a random order.
    pub(super) fn jitter(&mut self) -> Duration {
        ms(self.rng.random_range(0..=2))
    }

    pub(super) fn chaos(&self) -> bool {
        self.now < self.quiet_at
    }

    pub(super) fn wall(&self, i: usize) -> u64 {
        self.wall_at(i, self.now)
    }

    /// Instance `i`'s wall clock at true time `at`, by its offset now.
    pub(super) fn wall_at(&self, i: usize, at: Time) -> u64 {
        let at = i64::try_from(at.as_millis()).unwrap_or(i64::MAX);
        u64::try_from(BASE_MS + at + self.insts[i].offset_ms).unwrap_or(0)
    }

    pub(super) fn fail(&mut self, message: String) {
        if self.failure.is_none() {
            self.failure = Some(Failure {
                at: self.now,
                message,
            });
        }
    }

    pub(super) fn log(&mut self, line: impl FnOnce() -> String) {
        if let Some(trace) = &mut self.trace {
            let line = format!("{} {}", secs(self.now), line());
            if self.full_trace {
                println!("{line}");
            }
            trace.push_back(line);
            if trace.len() > TRACE_LINES {
                trace.pop_front();
            }
        }
    }

    pub(super) fn id(&self, shard: usize) -> Arc<str> {
        Arc::clone(&self.stream.shards[shard].info.id)
    }

    pub(super) fn session(&mut self, i: usize, sid: u64) -> Option<&mut Session> {
        self.insts[i].sessions.get_mut(&sid)
    }

    pub(super) fn offset(&mut self) -> i64 {
        let half = i64::try_from(millis(self.cfg.skew) / 2).unwrap_or(0);
        match self.rng.random_range(0..3) {
            0 => -half,
            1 => half,
            _ => self.rng.random_range(-half..=half),
        }
    }

    pub(super) fn alive(&self) -> Vec<usize> {
        (0..self.insts.len())
            .filter(|&i| self.insts[i].alive && !self.insts[i].shutting_down)
            .collect()
    }

    /// A random live process, by one of its live subscriptions: stalls, partitions and clock
    /// steps hit every subscription of a process, a stopping one included.
    pub(super) fn some_process(&mut self) -> Option<usize> {
        let live: Vec<usize> = (0..self.insts.len())
            .filter(|&i| self.insts[i].alive)
            .collect();
        (!live.is_empty()).then(|| live[self.rng.random_range(0..live.len())])
    }

    /// Applies `f` to every subscription slot of `i`'s process that runs or waits to run.
    pub(super) fn each_slot(&mut self, i: usize, f: impl Fn(&mut Inst)) {
        let process = self.insts[i].process;
        for inst in &mut self.insts {
            if inst.process == process && (inst.alive || inst.pending_start) {
                f(inst);
            }
        }
    }

    // ----- setup ----------------------------------------------------------------------------

    pub(super) fn setup(&mut self) {
        for _ in 0..self.cfg.initial_shards {
            let idx = self.stream.add(Vec::new());
            self.stream.open.push(idx);
            self.rows.push(Row::default());
            self.ghost.push(GhostShard {
                reached: self.cfg.initial == KinesisPosition::TrimHorizon,
                ..GhostShard::default()
            });
        }
        for i in 0..self.cfg.instances {
            let offset_ms = self.offset();
            self.insts.push(Inst {
                owner: Arc::from(format!("i{i}")),
                process: i,
                pending_start: false,
                successor: None,
                retired: false,
                inc: 0,
                run: Incarnation::new(0, 0),
                alive: false,
                offset_ms,
                stalled_until: Time::ZERO,
                partitioned_until: Time::ZERO,
                shutting_down: false,
                dropped: false,
                restart_after_exit: None,
                died_at: Time::ZERO,
                coord: Coord::new(&self.cfg, self.now, Incarnation::new(0, 0)),
                sessions: BTreeMap::new(),
                running: BTreeMap::new(),
                channel: VecDeque::new(),
                in_flight: 0,
                dispatch_pending: false,
                batches: BTreeMap::new(),
                batch_of: BTreeMap::new(),
                joints: BTreeMap::new(),
            });
            // Instances open one after another, after the early reshards.
            let early = if self.cfg.early_reshards > 0 {
                1_000
            } else {
                0
            };
            let at = ms(early + self.rng.random_range(0..=2_000));
            self.push(
                at,
                Ev::Start {
                    inst: i,
                    same_id: true,
                },
            );
        }
        self.push(ms(1), Ev::Write);
        for k in 0..self.cfg.early_reshards {
            self.push(ms(300 * (k as u64 + 1)), Ev::Reshard);
        }
        let chaos = millis(self.cfg.chaos);
        let lease = millis(self.cfg.timings.lease());
        for _ in 0..self.cfg.reshards {
            let at = ms(self.rng.random_range(chaos / 10..chaos));
            self.push(at, Ev::Reshard);
        }
        for _ in 0..self.cfg.crashes {
            let at = ms(self.rng.random_range(chaos / 10..chaos * 9 / 10));
            let restart = self.rng.random_bool(0.6);
            self.push(
                at,
                Ev::Crash {
                    restart,
                    quiet: false,
                },
            );
        }
        for _ in 0..self.cfg.shutdowns {
            let at = ms(self.rng.random_range(chaos / 10..chaos * 9 / 10));
            let restart = self.rng.random_bool(0.5);
            self.push(
                at,
                Ev::Shutdown {
                    restart,
                    quiet: false,
                },
            );
        }
        for _ in 0..self.cfg.stalls {
            let dur = if self.rng.random_bool(0.6) {
                ms(self.rng.random_range(lease..=lease * 5 / 2))
            } else {
                ms(self.rng.random_range(200..=lease / 2))
            };
            let latest = chaos.saturating_sub(millis(dur) + 1).max(1);
            let at = ms(self.rng.random_range(0..latest));
            self.push(at, Ev::Stall { dur });
        }
        for _ in 0..self.cfg.partitions {
            let dur = ms(self.rng.random_range(lease / 5..=lease * 2));
            let latest = chaos.saturating_sub(millis(dur) + 1).max(1);
            let at = ms(self.rng.random_range(0..latest));
            self.push(at, Ev::Partition { dur });
        }
        for _ in 0..self.cfg.clock_steps {
            let at = ms(self.rng.random_range(0..chaos));
            self.push(at, Ev::ClockStep);
        }
        for _ in 0..self.cfg.resubscribes {
            let at = ms(self.rng.random_range(chaos / 10..chaos * 9 / 10));
            self.push(at, Ev::Resubscribe);
        }
        for _ in 0..self.cfg.malformed {
            // Repaired before the quiet phase.
            let dur = ms(self.rng.random_range(lease / 2..=lease * 2));
            let latest = chaos.saturating_sub(millis(dur) + 1).max(2);
            let at = ms(self.rng.random_range(1..latest));
            self.push(at, Ev::Malform { dur });
        }
        self.push(self.quiet_at, Ev::Quiet);
    }
}

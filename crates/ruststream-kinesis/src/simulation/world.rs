//! The stream and its producer (writes, reshards, retention, malformed rows), and the
//! instances: start, crash, stall, partitions, releases and resubscribes.

use super::*;

impl Sim {
    // ----- the stream and its producer ------------------------------------------------------

    pub(super) fn write(&mut self) {
        if self.now >= self.writes_until {
            return;
        }
        let open = &self.stream.open;
        let shard = open[self.rng.random_range(0..open.len())];
        let seq = self.stream.next_seq;
        self.stream.next_seq += self.rng.random_range(1..=3);
        // A KPL aggregate: its user records share the sequence number, and arrive together.
        let subs: Vec<Option<u64>> =
            if self.cfg.aggregates > 0.0 && self.rng.random_bool(self.cfg.aggregates) {
                self.stats.aggregates += 1;
                (0..self.rng.random_range(1..=4)).map(Some).collect()
            } else {
                vec![None]
            };
        let owed = match &self.cfg.initial {
            KinesisPosition::AtTimestamp(at) => wall_time(millis(self.now)) >= *at,
            _ => self.ghost[shard].reached,
        };
        for sub in subs {
            let sim = &mut self.stream.shards[shard];
            sim.records.push(seq);
            sim.subs.push(sub);
            sim.arrived.push(self.now);
            let g = &mut self.ghost[shard];
            g.acked.push(false);
            g.owed.push(false);
            let idx = g.acked.len() - 1;
            if owed {
                self.owe(shard, idx);
            }
        }
        let (lo, hi) = self.cfg.write_gap_ms;
        let next = self.now + ms(self.rng.random_range(lo..=hi));
        self.push(next, Ev::Write);
    }

    pub(super) fn reshard(&mut self) {
        let open = self.stream.open.len();
        let split = open == 1 || (open < MAX_OPEN && self.rng.random_bool(0.5));
        let pos = self
            .rng
            .random_range(0..if split { open } else { open - 1 });
        let parents: Vec<usize> = if split {
            vec![self.stream.open[pos]]
        } else {
            vec![self.stream.open[pos], self.stream.open[pos + 1]]
        };
        for &p in &parents {
            self.stream.shards[p].info.closed = true;
            if let Some(retention) = self.cfg.retention {
                self.push(self.now + retention, Ev::Trim { shard: p });
            }
        }
        // A child of a shard the application reached holds what follows it: owed from its
        // beginning (under an initial position at a timestamp, by its arrival time instead).
        let reached = parents.iter().any(|&p| self.ghost[p].reached);
        let children: Vec<usize> = (0..if split { 2 } else { 1 })
            .map(|_| {
                self.rows.push(Row::default());
                self.ghost.push(GhostShard {
                    created_at: self.now,
                    reached,
                    ..GhostShard::default()
                });
                self.stream.add(parents.clone())
            })
            .collect();
        self.stream
            .open
            .splice(pos..pos + parents.len(), children.iter().copied());
        self.stats.reshards += 1;
        self.log(|| format!("reshard: {parents:?} -> {children:?}"));
    }

    /// Record `idx` of `shard` is owed from now on.
    pub(super) fn owe(&mut self, shard: usize, idx: usize) {
        let g = &mut self.ghost[shard];
        if !g.owed[idx] {
            g.owed[idx] = true;
            self.written += 1;
            if g.acked[idx] {
                self.acked += 1;
            }
        }
    }

    /// Record `idx` of `shard` is owed no more (a seek skipped it, retention trimmed it).
    pub(super) fn waive(&mut self, shard: usize, idx: usize) -> bool {
        let g = &mut self.ghost[shard];
        if !g.owed[idx] || g.acked[idx] {
            return false;
        }
        g.owed[idx] = false;
        self.written -= 1;
        true
    }

    /// A handler finished record `idx` of `shard`.
    pub(super) fn mark_acked(&mut self, shard: usize, idx: usize) {
        let g = &mut self.ghost[shard];
        if !g.acked[idx] {
            g.acked[idx] = true;
            if g.owed[idx] {
                self.acked += 1;
            }
            self.last_progress = self.now;
        }
    }

    /// The application reached `shard` (under an initial position at the tip): its records from
    /// `from` on are owed, and so is everything of its children, which hold what follows it.
    pub(super) fn reach(&mut self, shard: usize, from: usize) {
        if !matches!(self.cfg.initial, KinesisPosition::Latest) || self.ghost[shard].reached {
            return;
        }
        self.ghost[shard].reached = true;
        for idx in from..self.ghost[shard].owed.len() {
            self.owe(shard, idx);
        }
        for child in self.stream.children(shard) {
            self.reach(child, 0);
        }
    }

    /// Whether the application never reads `shard` by design: a closed shard it never reached,
    /// starting at the tip (`plan::Verdict::Skip`).
    pub(super) fn skippable(&self, shard: usize) -> bool {
        self.cfg.initial == KinesisPosition::Latest
            && self.stream.shards[shard].info.closed
            && !self.ghost[shard].reached
    }

    /// Retention trims a closed shard: it leaves the listing, its reads answer
    /// `ResourceNotFoundException`, and what nobody read of it is lost to the application.
    pub(super) fn trim(&mut self, shard: usize) {
        self.stream.shards[shard].trimmed = true;
        self.stats.trimmed += 1;
        for idx in 0..self.ghost[shard].owed.len() {
            if self.waive(shard, idx) {
                self.stats.trimmed_unread += 1;
            }
        }
        if self.cfg.initial == KinesisPosition::Latest && self.rows[shard].seen().is_none() {
            // Trimmed before the application took it: to the table it is a parent that ended
            // before the application started, so its children start at the tip when first
            // taken (`plan`'s lineage rule), and what they held before is lost with it.
            self.ghost[shard].reached = false;
            self.unreach(shard);
        }
        self.log(|| format!("shard {shard} trimmed out of the stream"));
    }

    /// A row of a shard not trimmed becomes malformed (its reads, the stream's `list` and its
    /// writes fail) for `dur`.
    pub(super) fn malform(&mut self, dur: Duration) {
        let candidates: Vec<usize> = (0..self.rows.len())
            .filter(|&shard| self.rows[shard].state.is_some() && !self.stream.shards[shard].trimmed)
            .collect();
        if candidates.is_empty() {
            return;
        }
        let shard = candidates[self.rng.random_range(0..candidates.len())];
        self.rows[shard].malformed = true;
        self.stats.malformed += 1;
        self.push(self.now + dur, Ev::Repair { shard });
        self.log(|| format!("row of shard {shard} malformed for {dur:?}"));
    }

    // ----- instances: start, crash, stall, release ------------------------------------

    pub(super) fn start(&mut self, i: usize, same_id: bool) {
        if self.insts[i].alive {
            return;
        }
        let offset = self.offset();
        let inst = &mut self.insts[i];
        if inst.inc > 0 {
            self.stats.restarts += 1;
        }
        if !same_id {
            inst.owner = Arc::from(format!("i{i}.{}", inst.inc));
        }
        // A new run of the process: when it starts by its clock, and a nonce of its own.
        let nonce = (u64::try_from(i).unwrap_or(0) << 32) | u64::from(inst.inc);
        inst.offset_ms = offset;
        let started_ms = self.wall(i);
        self.insts[i].run = Incarnation::new(started_ms, nonce);
        self.open_subscription(i, offset);
    }

    /// `open`: the subscription's first round, then `run`.
    pub(super) fn open_subscription(&mut self, i: usize, offset: i64) {
        let inst = &mut self.insts[i];
        inst.alive = true;
        inst.offset_ms = offset;
        inst.stalled_until = Time::ZERO;
        inst.shutting_down = false;
        inst.dropped = false;
        inst.coord = Coord::new(&self.cfg, self.now, inst.run);
        let owner = Arc::clone(&inst.owner);
        self.log(|| format!("i{i} starts as {owner}, clock offset {offset} ms"));
        self.coord_drive(i);
        // Liveness by beat: the beat's driver starts with the subscription.
        self.beat_drive(i);
    }

    /// Kills instance `i`: nothing of it runs again; its requests in flight still land.
    pub(super) fn kill(&mut self, i: usize) {
        let inst = &mut self.insts[i];
        inst.alive = false;
        inst.died_at = self.now;
        inst.inc += 1;
        inst.sessions.clear();
        inst.running.clear();
        inst.channel.clear();
        inst.batches.clear();
        inst.batch_of.clear();
        inst.joints.clear();
        inst.in_flight = 0;
        inst.dispatch_pending = false;
        inst.coord = Coord::new(&self.cfg, self.now, inst.run);
    }

    pub(super) fn restart_later(&mut self, i: usize, same_id: bool) {
        // After every request the dead incarnation sent has landed or timed out.
        let delay = self.cfg.restart_wait()
            + ms(self.rng.random_range(0..=millis(self.cfg.timings.lease())));
        self.push(self.now + delay, Ev::Start { inst: i, same_id });
    }

    /// Kills every other subscription of `i`'s process: the process ends.
    pub(super) fn kill_process_but(&mut self, i: usize) {
        let process = self.insts[i].process;
        for j in 0..self.insts.len() {
            if j == i || self.insts[j].process != process {
                continue;
            }
            if self.insts[j].alive {
                self.kill(j);
            }
            if self.insts[j].pending_start {
                self.insts[j].pending_start = false;
                self.insts[j].retired = true;
            }
        }
    }

    pub(super) fn crash_some(&mut self, restart: bool, quiet: bool) {
        let alive = self.alive();
        if alive.is_empty() || ((!restart || quiet) && alive.len() < 2) {
            return;
        }
        let i = alive[self.rng.random_range(0..alive.len())];
        self.kill_process_but(i);
        self.kill(i);
        self.crashed_at = Some(self.now);
        self.stats.crashes += 1;
        self.log(|| format!("i{i} crashes (restart: {restart})"));
        if restart && !quiet {
            let same_id = self.rng.random_bool(0.5);
            self.restart_later(i, same_id);
        }
    }

    pub(super) fn shutdown_some(&mut self, restart: bool, quiet: bool) {
        let alive = self.alive();
        if alive.is_empty() || ((!restart || quiet) && alive.len() < 2) {
            return;
        }
        let i = alive[self.rng.random_range(0..alive.len())];
        let inst = &mut self.insts[i];
        inst.shutting_down = true;
        inst.restart_after_exit = (restart && !quiet).then_some(true);
        self.stats.shutdowns += 1;
        self.log(|| format!("i{i} shuts down, releasing its leases"));
        if self.insts[i].in_flight == 0 {
            self.drop_subscriber(i);
        }
    }

    /// A subscription is dropped (the runtime drains its handlers first) and opened again in
    /// the same process, under the same owner id, as a new subscription slot.
    pub(super) fn resubscribe_some(&mut self) {
        let alive = self.alive();
        if alive.is_empty() {
            return;
        }
        let i = alive[self.rng.random_range(0..alive.len())];
        let j = self.insts.len();
        let old = &self.insts[i];
        let slot = Inst {
            owner: Arc::clone(&old.owner),
            process: old.process,
            pending_start: true,
            successor: None,
            retired: false,
            inc: 0,
            run: old.run,
            alive: false,
            offset_ms: old.offset_ms,
            stalled_until: old.stalled_until,
            partitioned_until: old.partitioned_until,
            shutting_down: false,
            dropped: false,
            restart_after_exit: None,
            died_at: Time::ZERO,
            coord: Coord::new(&self.cfg, self.now, old.run),
            sessions: BTreeMap::new(),
            running: BTreeMap::new(),
            channel: VecDeque::new(),
            in_flight: 0,
            dispatch_pending: false,
            batches: BTreeMap::new(),
            batch_of: BTreeMap::new(),
            joints: BTreeMap::new(),
        };
        self.insts.push(slot);
        let inst = &mut self.insts[i];
        inst.shutting_down = true;
        inst.restart_after_exit = None;
        inst.successor = Some(j);
        inst.retired = true;
        self.stats.resubscribes += 1;
        self.log(|| format!("i{i} resubscribes as slot {j}"));
        if self.insts[i].in_flight == 0 {
            self.drop_subscriber(i);
        }
    }

    /// `Registry::register`: the new subscription opens once the old one's tasks ended, however
    /// long they take (`registry::tests` shows the real wait has no bound).
    pub(super) fn resubscribed(&mut self, j: usize) {
        let inst = &self.insts[j];
        if !inst.pending_start {
            return;
        }
        if self.now < inst.stalled_until {
            let resume = inst.stalled_until + self.jitter();
            self.push(resume, Ev::Resubscribed { inst: j });
            return;
        }
        self.insts[j].pending_start = false;
        let offset = self.insts[j].offset_ms;
        self.open_subscription(j, offset);
    }

    /// The runtime drained its handlers and drops the subscription: every reader stops.
    pub(super) fn drop_subscriber(&mut self, i: usize) {
        self.reshaped_at = self.reshaped_at.max(self.now);
        let inst = &mut self.insts[i];
        inst.dropped = true;
        let sids: Vec<u64> = self.insts[i].sessions.keys().copied().collect();
        for sid in sids {
            if let Some(s) = self.session(i, sid) {
                // What the final checkpoint covers: the settled prefix (a record handed back
                // for a retry, and what follows it, is read again by the next owner).
                s.cover = s.settled_upto;
            }
            self.cancel(i, sid);
        }
        self.coord_cancel(i);
        self.maybe_exit(i);
    }

    /// The subscription's tasks all ended: a dropped one is gone (with its process, unless a
    /// resubscribe replaced it).
    pub(super) fn maybe_exit(&mut self, i: usize) {
        let inst = &self.insts[i];
        if !inst.alive || !inst.dropped || !inst.sessions.is_empty() || !inst.coord.exited {
            return;
        }
        let restart = self.insts[i].restart_after_exit.take();
        if let Some(j) = self.insts[i].successor {
            self.kill(i);
            self.log(|| format!("i{i}'s old subscription ended"));
            if self.insts[j].pending_start {
                let at = self.now + self.jitter();
                self.push(at, Ev::Resubscribed { inst: j });
            }
            return;
        }
        // `live/beat.rs`: the beat, whose task the subscription's end waits for, is removed once
        // the readers all ended. (A subscription followed by another of the same run keeps it:
        // live, the next one starts only after the removal, and beats at once.)
        if self.insts[i].coord.beat.take().is_some() {
            let until_ms = Some(self.insts[i].coord.beat_until);
            self.send(i, 0, 0, OpKind::Leave { until_ms }, Cont::Leave);
        }
        self.kill_process_but(i);
        self.kill(i);
        self.log(|| format!("i{i} stopped"));
        if restart.is_some() {
            let delay = self.cfg.restart_wait() + ms(self.rng.random_range(1..=5_000));
            self.push(
                self.now + delay,
                Ev::Start {
                    inst: i,
                    same_id: true,
                },
            );
        }
    }

    pub(super) fn quiet(&mut self) {
        self.log(|| "quiet phase: no more faults".to_owned());
        // At least one healthy instance from here on.
        let pending = self.insts.iter().any(|inst| inst.pending_start);
        if self.alive().is_empty() && !pending {
            let dead =
                (0..self.insts.len()).find(|&i| !self.insts[i].alive && !self.insts[i].retired);
            match dead {
                Some(dead) => {
                    // Not before the requests of its last incarnation landed.
                    let at = self.insts[dead].died_at + self.cfg.restart_wait();
                    self.push(
                        at.max(self.now),
                        Ev::Start {
                            inst: dead,
                            same_id: true,
                        },
                    );
                }
                // Every instance is stopping: one comes back once it stopped.
                None => {
                    if let Some(i) = (0..self.insts.len()).find(|&i| !self.insts[i].retired) {
                        self.insts[i].restart_after_exit = Some(true);
                    }
                }
            }
        }
        if self.cfg.quiet_fault {
            // Early in the quiet phase, or once every instance listed since it began, so that
            // the handover poll (the notice, a holder's lapsed beat) must find the dead or
            // stopped instance's shards within its tighter bound.
            let t = &self.cfg.timings;
            let settled = if self.rng.random_bool(0.5) {
                Duration::ZERO
            } else {
                t.listing_interval() + Duration::from_secs(1)
            };
            let at = self.live_from + settled + ms(self.rng.random_range(0..=millis(t.lease())));
            let ev = if self.rng.random_bool(0.5) {
                Ev::Crash {
                    restart: false,
                    quiet: true,
                }
            } else {
                Ev::Shutdown {
                    restart: false,
                    quiet: true,
                }
            };
            self.push(at, ev);
        }
    }
}

//! The end-of-schedule and liveness checks: no wedge, and every shard held again in time.

use super::*;

impl Sim {
    // ----- liveness -------------------------------------------------------------------------

    /// Session `sid` of another owner than the one that released `shard` as it stopped made its
    /// next step: counted once per step, under this schedule's poll setting.
    pub(super) fn handover_step(&mut self, shard: usize, sid: u64, step: Step) {
        let Some(mut handover) = self.ghost[shard].handover else {
            return;
        };
        if handover.from == sid {
            return;
        }
        let done = match step {
            Step::Take => std::mem::replace(&mut handover.taken, true),
            Step::Read => std::mem::replace(&mut handover.read, true),
            Step::Delivery => false,
        };
        if done {
            return;
        }
        self.ghost[shard].handover = (step != Step::Delivery).then_some(handover);
        let took = millis(self.now.saturating_sub(handover.at));
        // Faults after the release: a throttled write pauses the takes for a backoff; a crashed
        // instance's beat still counts it among those with room, which a balancing instance
        // leaves the shard to for a grace (seed 1796486208142483111: the crash 0.5 s after the
        // release, of the one instance with room, and the taker's start wait made it 4.2 s).
        let faulted = |at: Option<Time>| at.is_some_and(|at| at >= handover.at);
        let quiet = handover.at >= self.live_from
            && handover.taker_ready
            && !faulted(self.throttled_at)
            && !faulted(self.crashed_at);

        let poll = self.cfg.timings.handover_poll_interval();
        // Balancing, the released shard may wait for the instance below its target, or for a
        // leaver's beat to go; one that nobody with room took is taken two polls later anyway.
        let polls = if self.cfg.balances() { 3 } else { 1 };
        // Reads behind (`Config::read_lag`) may show the bumped notice, and the leaver's beat
        // gone, each up to the lag later.
        let behind = 2 * millis(self.cfg.read_lag);
        let bound = millis(poll) * polls + 1_000 + self.pace_slack_ms() + behind;
        if quiet && step == Step::Take && !poll.is_zero() && took > bound {
            // With no fault, the next poll of an instance ready to take sees the release (through
            // the bumped notice, or the rows of a store without notices).
            self.fail(format!(
                "handover: shard {shard} was released as its session stopped at {} with an instance ready to \
                 take it and no fault, but taken only {took} ms later (poll {poll:?}, {polls} \
                 allowed)",
                secs(handover.at)
            ));
        }
        let handovers = if poll.is_zero() {
            &mut self.stats.handovers_unpolled
        } else {
            &mut self.stats.handovers_polled
        };
        handovers.record(step, took, quiet);
    }

    /// How much later than unpaced a take may go out when the schedule paces its takes
    /// (`Config::take_budget`): every shard of the stream taken ahead of it, at the slowest
    /// instance's rate (the budget shared by every instance, one a second at least).
    pub(super) fn pace_slack_ms(&self) -> u64 {
        self.cfg.take_budget.map_or(0, |budget| {
            let rate = (budget / self.cfg.instances as u64).max(1);
            self.stream.shards.len() as u64 * 1_000 / rate
        })
    }

    /// Whether `shard` no longer holds its children back: read to its end, trimmed out of the
    /// stream, or never to be read (`plan`'s lineage rule).
    pub(super) fn parent_done(&self, shard: usize) -> bool {
        let row = self.rows[shard].seen();
        row.is_some_and(|row| row.is_finished() || row.is_skipped())
            || self.stream.shards[shard].trimmed
    }

    /// Retention trimmed `shard`'s lineage unread: its children not taken yet are owed again only
    /// from their first take on.
    pub(super) fn unreach(&mut self, shard: usize) {
        for child in self.stream.children(shard) {
            let opened = self.rows[child].seen().is_some();
            // A merge child of a parent the application read starts at its beginning; a parent
            // marked never to be read (`SHARD_SKIPPED`) was not read (`plan`'s lineage rule).
            let read_parent = self.stream.shards[child].parents.iter().any(|&p| {
                p != shard
                    && (self.ghost[p].reached
                        || self.rows[p].seen().is_some_and(|row| !row.is_skipped()))
            });
            if opened || read_parent || !self.ghost[child].reached {
                continue;
            }
            self.ghost[child].reached = false;
            for idx in 0..self.ghost[child].owed.len() {
                if self.waive(child, idx) {
                    self.stats.trimmed_unread += 1;
                }
            }
            self.unreach(child);
        }
    }

    /// Whether the application never reads `shard`, by the rules: trimmed, marked skipped, or
    /// closed before the application reached it (and not yet marked).
    pub(super) fn never_read(&self, shard: usize) -> bool {
        let row = self.rows[shard].seen();
        self.stream.shards[shard].trimmed
            || row.is_some_and(LeaseState::is_skipped)
            || (row.is_none() && self.skippable(shard))
    }

    /// Invariant 7, no wedge, once every owed record was acked and the checkpoints had time to
    /// catch up: every open shard's checkpoint is at its last owed record, and every closed
    /// shard the application reads is at `SHARD_END` (its children may start).
    pub(super) fn check_no_wedge(&self) -> Option<Failure> {
        for (shard, sim) in self.stream.shards.iter().enumerate() {
            let row = self.rows[shard].seen();
            let mark = Mark::of(row.and_then(|row| row.checkpoint.as_deref()));
            let never_read = self.never_read(shard);
            let last_owed = (0..sim.records.len())
                .rev()
                .find(|&idx| self.ghost[shard].owed[idx])
                .map(|idx| self.stream.mark_through(shard, idx));
            let wedged = if never_read {
                false
            } else if sim.info.closed {
                mark != Mark::End
            } else {
                last_owed.is_some_and(|last| mark < last)
            };
            if wedged {
                return Some(Failure {
                    at: self.now,
                    message: format!(
                        "no wedge: every record is acked, but shard {shard} ({}, {} records) has \
                         its checkpoint at {mark:?}",
                        if sim.info.closed { "closed" } else { "open" },
                        sim.records.len()
                    ),
                });
            }
        }
        None
    }

    pub(super) fn liveness_bound(&self) -> Duration {
        let t = &self.cfg.timings;
        t.lease()
            + SKEW_TOLERANCE
            + self.cfg.skew
            + t.listing_interval()
            + Duration::from_secs(1)
            + ms(self.pace_slack_ms())
    }

    /// The bound for a shard that lost its reader at `since`: with the handover poll on, one poll
    /// interval instead of a listing interval (`LeaseTimings` says so) once every instance listed
    /// the shard, that is a listing interval after it was made or the quiet phase began; paced
    /// takes add the time the pace needs for every shard (seed 1796492747205710741: a lone
    /// instance paced at one take a second took four lapsed shards one a round).
    pub(super) fn liveness_bound_for(&self, shard: usize, since: Time) -> Duration {
        let t = &self.cfg.timings;
        let poll = t.handover_poll_interval();
        let listed_by_all = self.ghost[shard].created_at.max(self.live_from)
            + t.listing_interval()
            + Duration::from_secs(1);
        if poll.is_zero() || since < listed_by_all {
            return self.liveness_bound();
        }
        t.lease()
            + SKEW_TOLERANCE
            + self.cfg.skew
            + poll
            + Duration::from_secs(1)
            + ms(self.pace_slack_ms())
    }

    /// The fleet reads every row at least every full-read interval between its instances, by
    /// turns (`coordinator::full_read_turns`): in the quiet phase, while an instance runs, no
    /// two reads of every row are further apart than two intervals (a slot whose instance
    /// stopped or crashed goes unread until its beat lapses), a listing interval, a lease and
    /// the skews. Schedules that read every row at every round (`full_read_listings` 0) have
    /// nothing to check.
    fn check_fleet_full_reads(&mut self) {
        let t = self.cfg.timings;
        let every = t.listing_interval() * self.cfg.full_read_listings;
        let running = self
            .insts
            .iter()
            .any(|inst| inst.alive && !inst.shutting_down);
        if every.is_zero() || !running {
            self.last_full_read = self.now;
            return;
        }
        let bound = every * 2 + t.listing_interval() + t.lease() + SKEW_TOLERANCE + self.cfg.skew;
        let since = self.last_full_read.max(self.live_from);
        let waited = self.now.saturating_sub(since);
        let permille =
            u64::try_from(waited.as_micros() * 1000 / bound.as_micros()).unwrap_or(u64::MAX);
        self.stats.worst_full_read_permille = self.stats.worst_full_read_permille.max(permille);
        if waited > bound {
            self.fail(format!(
                "full read by turns: no instance read every row since {} (bound {bound:?}, \
                 every {every:?})",
                secs(since)
            ));
        }
    }

    pub(super) fn check_liveness(&mut self) {
        if self.now < self.live_from || self.now < self.last_live_check + ms(100) {
            return;
        }
        self.last_live_check = self.now;
        self.check_fleet_full_reads();
        for shard in 0..self.stream.shards.len() {
            let finished =
                |rows: &[Row], s: usize| rows[s].seen().is_some_and(LeaseState::is_finished);
            let never_read = self.never_read(shard);
            let eligible = !finished(&self.rows, shard)
                && !never_read
                && self.stream.shards[shard]
                    .parents
                    .iter()
                    .all(|&p| self.parent_done(p));
            let served = self.insts.iter().any(|inst| {
                inst.alive
                    && inst
                        .running
                        .get(&shard)
                        .and_then(|sid| inst.sessions.get(sid))
                        .is_some_and(|s| !s.machine.is_halted() && !s.cancelled)
            });
            if eligible && !served {
                let since = *self.ghost[shard].unserved_since.get_or_insert(self.now);
                let bound = self.liveness_bound_for(shard, since);
                let waited = self.now.saturating_sub(since);
                let permille = u64::try_from(waited.as_micros() * 1000 / bound.as_micros())
                    .unwrap_or(u64::MAX);
                self.stats.worst_recovery_permille =
                    self.stats.worst_recovery_permille.max(permille);
                if waited > bound {
                    self.fail(format!(
                        "liveness: shard {shard} has had no reader since {} (bound {bound:?})",
                        secs(since)
                    ));
                    return;
                }
            } else {
                self.ghost[shard].unserved_since = None;
            }
        }
    }

    /// "Instances converge": with balancing, once the instances and the open shards stayed the
    /// same long enough for two listing rounds, a renewal, a drain and a lapsed lease, each live
    /// instance holds the floor or the ceiling of open shards over instances.
    pub(super) fn check_converged(&mut self) -> Option<Failure> {
        let t = self.cfg.timings;
        let settle = t.lease()
            + SKEW_TOLERANCE
            + self.cfg.skew
            + t.listing_interval() * 3
            + t.renew()
            + t.handoff_drain()
            + t.handover_poll_interval() * 2
            + self.cfg.request_lifetime()
            + Duration::from_secs(2);
        if !self.cfg.balances() || self.now < self.reshaped_at + settle {
            return None;
        }
        let mut held: BTreeMap<Arc<str>, usize> = BTreeMap::new();
        for inst in &self.insts {
            if !inst.alive || inst.dropped || inst.shutting_down || inst.coord.exited {
                continue;
            }
            let served = inst
                .sessions
                .values()
                .filter(|s| !s.machine.is_halted() && !s.cancelled)
                .count();
            *held.entry(Arc::clone(&inst.owner)).or_default() += served;
        }
        let open: usize = held.values().sum();
        if held.is_empty() || open == 0 {
            return None;
        }
        let ceiling = open.div_ceil(held.len());
        let (least, most) = (
            held.values().copied().min().unwrap_or(0),
            held.values().copied().max().unwrap_or(0),
        );
        if most > ceiling || most - least > 1 {
            return Some(Failure {
                at: self.now,
                message: format!(
                    "converge: {open} open shards over {} instances, {:?} since {} (nothing \
                     changed for {settle:?}), not within one of each other",
                    held.len(),
                    held,
                    secs(self.reshaped_at)
                ),
            });
        }
        self.stats.converged += 1;
        None
    }
}

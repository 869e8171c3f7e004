//! The event loop: what each event does, and the end of a schedule.

use super::*;

impl Sim {
    // ----- the loop -------------------------------------------------------------------------

    pub(super) fn run(&mut self) -> Result<Stats, Failure> {
        let min_end = self.live_from + self.cfg.timings.lease() + self.liveness_bound() * 2;
        // A backlog may take long to work off (one slow handler, a full channel); what must
        // not happen is a quiet phase in which nothing is acked any more.
        let stuck_after = self.liveness_bound() * 3 + Duration::from_secs(60);
        let cap = self.quiet_at + Duration::from_secs(4 * 3600);
        // Once every record is acked: how long the checkpoints may take to catch up (invariant
        // 7, no wedge), a takeover after the quiet phase's one late fault included.
        let t = self.cfg.timings;
        let catch_up = self.liveness_bound()
            + t.renew()
            + t.checkpoint_interval()
            + self.cfg.request_lifetime() * 2;
        let mut caught_up_by: Option<Time> = None;
        while let Some(Reverse(queued)) = self.queue.pop() {
            self.now = queued.at;
            self.stats.events += 1;
            self.step(queued.ev);
            if self.failure.is_none() {
                self.check_liveness();
            }
            if let Some(failure) = self.failure.take() {
                return Err(failure);
            }
            if self.now >= min_end && self.now >= self.writes_until && self.acked == self.written {
                // Counted from when no handler holds a delivery any more: a seek back (or a
                // takeover) may have records handled again after every one was acked once.
                let quiescent = self
                    .insts
                    .iter()
                    .all(|inst| !inst.alive || (inst.in_flight == 0 && inst.channel.is_empty()));
                if !quiescent {
                    caught_up_by = None;
                } else if self.now >= *caught_up_by.get_or_insert(self.now + catch_up) {
                    break;
                }
            } else {
                // Records owed anew (a shard reached late, under an initial position at the
                // tip) restart the catch-up: their checkpoints get the whole bound once acked.
                caught_up_by = None;
            }
            let idle = self
                .now
                .saturating_sub(self.last_progress.max(self.live_from));
            if self.now > cap || (self.now >= self.writes_until && idle > stuck_after) {
                break;
            }
        }
        if self.acked != self.written {
            // The sessions still open, for a schedule that ended with records unacked.
            let open: Vec<String> = self
                .insts
                .iter()
                .enumerate()
                .filter(|(_, inst)| inst.alive)
                .flat_map(|(i, inst)| {
                    inst.sessions.iter().map(move |(sid, s)| {
                        format!(
                            "i{i} session {sid} shard {}: reader {:?}, finish {:?}, lease {:?} \
                             ({:?}), cancelled {}",
                            s.shard, s.reader, s.finish, s.lease_task, s.machine, s.cancelled
                        )
                    })
                })
                .collect();
            let missing: Vec<String> = self
                .ghost
                .iter()
                .enumerate()
                .flat_map(|(shard, g)| {
                    g.acked
                        .iter()
                        .zip(&g.owed)
                        .enumerate()
                        .filter(|(_, (acked, owed))| **owed && !**acked)
                        .map(move |(idx, _)| format!("{shard}#{idx}"))
                })
                .take(10)
                .collect();
            return Err(Failure {
                at: self.now,
                message: format!(
                    "at least once: {} of {} records were never acked, and no record was acked \
                     nor settled prefix grew for {:?} (shard#index: {}); in flight: {:?}; \
                     batches: {:?}; open sessions: [{}]",
                    self.written - self.acked,
                    self.written,
                    self.now.saturating_sub(self.last_progress),
                    missing.join(", "),
                    self.insts
                        .iter()
                        .map(|inst| (inst.in_flight, inst.channel.len()))
                        .collect::<Vec<_>>(),
                    self.insts
                        .iter()
                        .map(|inst| &inst.batches)
                        .collect::<Vec<_>>(),
                    open.join("; ")
                ),
            });
        }
        if let Some(failure) = self.check_no_wedge() {
            return Err(failure);
        }
        if let Some(failure) = self.check_converged() {
            return Err(failure);
        }
        self.stats.schedules = 1;
        self.stats.beat_schedules = u64::from(self.cfg.timings.is_kept_by_beat());
        self.stats.records = self.written as u64;
        self.stats.virtual_secs = self.now.as_secs();
        Ok(self.stats)
    }

    pub(super) fn step(&mut self, ev: Ev) {
        if let Some((i, inc)) = ev.target() {
            let inst = &self.insts[i];
            if !inst.alive || inst.inc != inc {
                return;
            }
            if self.now < inst.stalled_until {
                let resume = inst.stalled_until + self.jitter();
                self.push(resume, ev);
                return;
            }
        }
        if self.trace.is_some() && !matches!(ev, Ev::Write | Ev::Dispatch { .. }) {
            let line = format!("{ev:?}");
            self.log(|| line);
        }
        // What changes the instances or the open shards: balancing converges anew after it.
        let reshapes = match &ev {
            Ev::Stall { dur } | Ev::Partition { dur } | Ev::Malform { dur } => Some(*dur),
            Ev::Reshard
            | Ev::Trim { .. }
            | Ev::Crash { .. }
            | Ev::Start { .. }
            | Ev::Resubscribed { .. }
            | Ev::Resubscribe
            | Ev::ClockStep
            | Ev::Shutdown { .. }
            | Ev::Quiet => Some(Duration::ZERO),
            _ => None,
        };
        if let Some(lasting) = reshapes {
            self.reshaped_at = self.reshaped_at.max(self.now + lasting);
        }
        match ev {
            Ev::Apply { op, reply } => {
                // No answer reaches a caller that gave up (a timeout), nor the first attempt of
                // a resend pair; only the former leaves a take with no reader behind it.
                let unanswered = reply.is_none() && op.pair.is_none();
                let res = self.apply(&op, unanswered);
                self.note_versions(&op);
                if let (Some(pair), false, Res::Ok) = (op.pair, op.resend, &res) {
                    self.landed_pairs.insert(pair);
                }
                if let Some((delay, cont)) = reply {
                    let fence = self.fenced(&op).then(|| {
                        let row = self.rows[op.shard].state.clone();
                        Box::new(FenceNote {
                            op: op.clone(),
                            row,
                        })
                    });
                    self.push(
                        self.now + delay,
                        Ev::Reply {
                            inst: op.inst,
                            inc: op.inc,
                            cont,
                            res,
                            fence,
                        },
                    );
                }
            }
            Ev::Reply {
                inst,
                cont,
                res,
                fence,
                ..
            } => {
                let answer = match fence {
                    Some(note) => self.settle_fence(inst, *note, res, cont),
                    None => Some((cont, res)),
                };
                if let Some((cont, res)) = answer {
                    self.on_reply(inst, cont, res);
                }
            }
            Ev::Round { inst, token, .. } => {
                if self.insts[inst].coord.timer == token {
                    self.coord_fire(inst);
                }
            }
            Ev::Lease {
                inst, sid, token, ..
            } => self.lease_woken(inst, sid, token),
            Ev::Beat { inst, token, .. } => self.beat_woken(inst, token),
            Ev::Reader {
                inst, sid, token, ..
            } => {
                if self
                    .session(inst, sid)
                    .is_some_and(|s| s.reader_token == token)
                {
                    self.reader_woken(inst, sid);
                }
            }
            Ev::Redeliver {
                inst, sid, token, ..
            } => {
                if self
                    .session(inst, sid)
                    .is_some_and(|s| s.redeliver_token == token)
                {
                    self.stats.timed_redeliveries += 1;
                    self.redeliver_drive(inst, sid);
                }
            }
            Ev::Joint {
                inst, unit, token, ..
            } => {
                if self.insts[inst]
                    .joints
                    .get(&unit)
                    .is_some_and(|pending| pending.timer == token)
                {
                    self.joint_drive(inst, unit);
                }
            }
            Ev::HandlerStart { inst, msg, .. } => self.handler_start(inst, msg),
            Ev::Handler { inst, msg, .. } => self.handler_done(inst, msg),
            Ev::Dispatch { inst, .. } => self.dispatch(inst),
            Ev::Write => self.write(),
            Ev::Reshard => self.reshard(),
            Ev::Trim { shard } => self.trim(shard),
            Ev::Malform { dur } => self.malform(dur),
            Ev::Repair { shard } => {
                self.rows[shard].malformed = false;
                self.log(|| format!("row of shard {shard} repaired"));
            }
            Ev::Crash { restart, quiet } => self.crash_some(restart, quiet),
            Ev::Start { inst, same_id } => self.start(inst, same_id),
            Ev::Resubscribed { inst } => self.resubscribed(inst),
            Ev::Resubscribe => self.resubscribe_some(),
            Ev::Stall { dur } => {
                if let Some(i) = self.some_process() {
                    let until = self.now + dur;
                    self.each_slot(i, |inst| inst.stalled_until = until);
                    self.stats.stalls += 1;
                    self.log(|| format!("i{i} stalls for {dur:?}"));
                }
            }
            Ev::Partition { dur } => {
                if let Some(i) = self.some_process() {
                    let until = self.now + dur;
                    self.each_slot(i, |inst| inst.partitioned_until = until);
                    self.stats.partitions += 1;
                    self.log(|| format!("i{i} cut off from the store for {dur:?}"));
                }
            }
            Ev::ClockStep => {
                if let Some(i) = self.some_process() {
                    let offset = self.offset();
                    self.each_slot(i, |inst| inst.offset_ms = offset);
                    self.log(|| format!("i{i}'s wall clock steps to offset {offset} ms"));
                }
            }
            Ev::Shutdown { restart, quiet } => self.shutdown_some(restart, quiet),
            Ev::Quiet => self.quiet(),
        }
    }
}

//! The runtime around the handlers: the channel, its receive's check, lanes that hold
//! deliveries, handlers that ack out of order, hand back and seek; the checks where a record is
//! delivered.

use super::*;

/// How long a batch of several shards stays open to records pulled later.
const JOINT_GATHER: Duration = Duration::from_millis(200);

impl Sim {
    // ----- the runtime: channel, receive's check, handlers ----------------------------------

    pub(super) fn dispatch_soon(&mut self, i: usize) {
        let inst = &mut self.insts[i];
        if !inst.dispatch_pending {
            inst.dispatch_pending = true;
            let inc = inst.inc;
            self.push(self.now, Ev::Dispatch { inst: i, inc });
        }
    }

    pub(super) fn dispatch(&mut self, i: usize) {
        self.insts[i].dispatch_pending = false;
        if self.insts[i].shutting_down {
            return;
        }
        let mut popped = false;
        while self.insts[i].in_flight < self.cfg.workers {
            let Some(msg) = self.insts[i].channel.pop_front() else {
                break;
            };
            popped = true;
            if !self.current(i, msg) {
                self.stats.filtered += 1;
                // Let go by the receive as one withheld is (`KinesisMessage::let_go_unreached`):
                // the shard forgets it.
                self.forget(i, msg);
                continue;
            }
            self.pulled(i, msg);
            if self.failure.is_some() {
                return;
            }
            self.insts[i].in_flight += 1;
            if self.batch_pulls(i, msg) {
                // It joined a batch, which holds one slot for all its records.
                self.insts[i].in_flight -= 1;
            }
            if self.rng.random_bool(self.cfg.p_hold) {
                // The runtime holds it in a lane behind a slow handler.
                let held = ms(self
                    .rng
                    .random_range(1..=millis(self.cfg.timings.lease()) * 3 / 2));
                let inc = self.insts[i].inc;
                self.push(self.now + held, Ev::HandlerStart { inst: i, inc, msg });
            } else {
                self.handler_start(i, msg);
            }
            if self.failure.is_some() {
                return;
            }
        }
        // A batch holds what one pull gave it; one of several shards gathers a little longer
        // (`KinesisStream::max_wait`), so that other shards' records join it.
        let (now, joint) = (self.now, self.cfg.joint_batches);
        for batch in self.insts[i].batches.values_mut() {
            batch.open = joint && now < batch.opened + JOINT_GATHER;
        }
        if popped {
            // A sender blocked on the full channel gets its room.
            let blocked: Vec<u64> = self.insts[i]
                .sessions
                .iter()
                .filter(|(_, s)| s.reader == ReaderTask::Blocked)
                .map(|(&sid, _)| sid)
                .collect();
            let inc = self.insts[i].inc;
            for sid in blocked {
                let token = self.token();
                if let Some(s) = self.session(i, sid) {
                    s.reader_token = token;
                }
                let jitter = self.jitter();
                self.push(
                    self.now + jitter,
                    Ev::Reader {
                        inst: i,
                        inc,
                        sid,
                        token,
                    },
                );
            }
        }
    }

    /// A delivery reaches the runtime's call of its handler: `KinesisMessage::decode_error`
    /// withholds it unless it stands current (`Standing::reaches_handler`, the rule production's
    /// check applies): its shard stopped, its lease ran out by this instance's clock (which
    /// stops the shard), or a seek left its position behind; that settlement moves no
    /// checkpoint. Otherwise the handler runs.
    pub(super) fn handler_start(&mut self, i: usize, msg: Msg) {
        let now = self.now;
        let wall = self.wall(i);
        // `ShardHandle::standing`, the machine's `standing`; a session gone stands stopped.
        let standing = self.insts[i]
            .sessions
            .get_mut(&msg.sid)
            .map_or(Standing::Stopped, |s| {
                s.machine.standing(msg.ticket, now, wall)
            });
        if !standing.reaches_handler() {
            self.stats.withheld += 1;
            if standing.stops_shard() {
                self.stop(i, msg.sid);
            }
            if self.batch_member_done(i, msg, true) {
                return;
            }
            self.forget(i, msg);
            self.insts[i].in_flight -= 1;
            self.after_handler(i);
            return;
        }
        self.deliver(i, msg);
        if self.failure.is_some() {
            return;
        }
        let took = match self.rng.random_range(0..20) {
            0 => ms(self.rng.random_range(3_000..=15_000)),
            1..=5 => ms(self.rng.random_range(200..=3_000)),
            _ => ms(self.rng.random_range(1..=200)),
        };
        let inc = self.insts[i].inc;
        self.push(self.now + took, Ev::Handler { inst: i, inc, msg });
    }

    /// `ShardHandle::forget`: a delivery that never reached its handler (or came back to a
    /// stopped shard) moves nothing, and no longer counts as in flight.
    pub(super) fn forget(&mut self, i: usize, msg: Msg) {
        let wake = self
            .session(i, msg.sid)
            .is_some_and(|s| s.machine.forget(msg.ticket));
        if wake {
            self.reader_wake(i, msg.sid, false);
        }
    }

    /// What a handler slot does once free: the release drops the subscription once its
    /// handlers are done, else the next delivery is dispatched.
    pub(super) fn after_handler(&mut self, i: usize) {
        let inst = &self.insts[i];
        if inst.shutting_down {
            if inst.in_flight == 0 && !inst.dropped {
                self.drop_subscriber(i);
            }
        } else {
            self.dispatch_soon(i);
        }
    }

    /// The receive's check (`Inlet::poll_next`, `KinesisMessage::is_current`): whether a
    /// delivery may still reach a handler, as the shard's machine answers it without a clock
    /// (`ShardMachine::queued_standing`, `ShardHandle::queued_standing` live) and production's
    /// rule reads the answer (`Standing::reaches_handler`). A lease that ran out is found where
    /// the handler starts (`handler_start`).
    pub(super) fn current(&mut self, i: usize, msg: Msg) -> bool {
        self.session(i, msg.sid)
            .is_some_and(|s| s.machine.queued_standing(msg.ticket).reaches_handler())
    }

    /// The runtime pulled a delivery from the subscription: the checks of invariant 4 (the
    /// broker hands a shard's records out in order, a child's after its parents ended). Those of
    /// invariant 5 (none a release or handoff covered reaches a handler) are made where the
    /// handler starts (`deliver`): a delivery whose lease ran out while it waited passes the
    /// pull, which reads no clock, and is withheld there.
    pub(super) fn pulled(&mut self, i: usize, msg: Msg) {
        let parents_done = self.stream.shards[msg.shard]
            .parents
            .iter()
            .all(|&p| self.parent_done(p));
        let Some(s) = self.insts[i].sessions.get_mut(&msg.sid) else {
            return;
        };
        let expected = s.last_idx.map_or(s.start_idx, |last| last + 1);
        if !msg.redelivery {
            s.last_idx = Some(msg.idx);
        }
        let shard = msg.shard;
        let idx = msg.idx;
        if idx != expected && !msg.redelivery {
            self.fail(format!(
                "order: session {} delivered shard {shard} #{idx} where #{expected} was next",
                msg.sid
            ));
        } else if !parents_done {
            self.fail(format!(
                "order: shard {shard} #{idx} delivered before every parent reached SHARD_END"
            ));
        }
        let g = &mut self.ghost[shard];
        let first_upto = g.first_upto;
        match idx.cmp(&first_upto) {
            Ordering::Equal => g.first_upto += 1,
            Ordering::Less => self.stats.redeliveries += 1,
            // Passing over records never delivered: only where none is owed (before where the
            // application starts the shard, or skipped by a seek).
            Ordering::Greater => match (first_upto..idx).find(|&k| g.owed[k]) {
                None => g.first_upto = idx + 1,
                Some(skipped) => self.fail(format!(
                    "order: the first delivery of shard {shard} #{idx} (session {}) came \
                     before that of #{skipped}, which is owed",
                    msg.sid
                )),
            },
        }
    }

    /// A record reaches a handler: the checks of invariant 1c, where the handler starts.
    pub(super) fn deliver(&mut self, i: usize, msg: Msg) {
        let now = self.now;
        let holder = self.rows[msg.shard].holder;
        let owner = Arc::clone(&self.insts[i].owner);
        let Some(s) = self.insts[i].sessions.get(&msg.sid) else {
            return;
        };
        let (deadline, lost) = (s.deadline, s.lost);
        let stale = s.machine.generation() != msg.ticket.generation;
        // A seek back delivers again on purpose what a release had covered (and lowers the
        // cover for the owners after it).
        let seeked = s.seek_floor.is_some();
        let shard = msg.shard;
        let idx = msg.idx;
        let covered = self.ghost[shard].covered_upto;
        if idx < covered && !seeked {
            self.fail(format!(
                "release: shard {shard} #{idx} delivered again after a release had \
                 checkpointed it (covered below #{covered})"
            ));
        }
        let planned = self.ghost[shard].planned_upto;
        if idx < planned && !seeked {
            self.fail(format!(
                "handoff: shard {shard} #{idx} delivered again after a handoff in \
                 which every delivery had settled (handed over below #{planned})"
            ));
        }
        if stale {
            self.fail(format!(
                "seek: shard {shard} #{idx}, read before a seek of session {}, reached a handler \
                 after the seek returned",
                msg.sid
            ));
            return;
        }
        self.stats.deliveries += 1;
        self.log(|| format!("{owner} delivers shard {shard} #{idx}"));
        if let Some(s) = self.insts[i].sessions.get_mut(&msg.sid) {
            s.handled_upto = s.handled_upto.max(Some(idx));
        }
        if holder != Some(msg.sid) {
            self.fail(format!(
                "fencing: {owner} (session {}) delivered shard {shard} #{idx} while session \
                 {holder:?} holds the row",
                msg.sid
            ));
        } else if now >= deadline || lost {
            self.fail(format!(
                "fencing: {owner} (session {}) delivered shard {shard} #{idx} after its lease \
                 ran out by its own clock at {} (or was refused: {lost})",
                msg.sid,
                secs(deadline)
            ));
        }
        self.handover_step(shard, msg.sid, Step::Delivery);
    }

    pub(super) fn handler_done(&mut self, i: usize, msg: Msg) {
        self.insts[i].in_flight -= 1;
        if self.seeks_left > 0 && self.rng.random_bool(self.cfg.p_seek) {
            self.seeks_left -= 1;
            self.handler_seeks(i, msg);
        }
        if self.batch_member_done(i, msg, false) {
            // A batch's record: the batch settles it, with the others, or hands it back.
            return;
        }
        if self.rng.random_bool(self.cfg.p_retry) {
            // `nack(true)` (or dropped unsettled): `ShardHandle::hand_back` keeps it unsettled,
            // and the redelivery task sends it again on its session, unless the shard stopped.
            self.stats.handed_back += 1;
            // `hand_back`: a delivery of a stopped shard, or one a seek made stale, is forgotten;
            // the redelivery task sends a kept one again once due.
            if self.hand_back(i, msg, self.cfg.retry_delay) {
                // `handle.handed_back.notify_one()`: the redelivery task asks again.
                self.redeliver_drive(i, msg.sid);
            }
            self.after_handler(i);
            return;
        }
        self.mark_acked(msg.shard, msg.idx);
        // `nack(false)` (`KinesisMessage::nack`): what it staged is let go, and it settles with
        // nothing staged (`ShardHandle::settle_writes`).
        let staged = if self.drops_now() {
            self.dropped.insert((msg.shard, msg.idx));
            None
        } else {
            self.staged(&msg)
        };
        // `ShardHandle::settle`.
        let stream = &self.stream;
        if let Some(s) = self.insts[i].sessions.get_mut(&msg.sid) {
            // Refused once no checkpoint of the shard will be written any more.
            if let Ok(settled) = s.machine.settle_staged(msg.ticket, staged, false) {
                if settled.grew
                    && let Some(upto) = s.machine.pending_checkpoint()
                {
                    s.settled_upto = stream.index_through(msg.shard, Mark::of(Some(upto)));
                    // A settled prefix that grows is progress, also where a seek back made the
                    // shard deliver again what was acked before.
                    self.last_progress = self.now;
                }
                if settled.checkpoint {
                    self.lease_wake(i, msg.sid);
                }
                if settled.wake_reader {
                    self.reader_wake(i, msg.sid, false);
                }
            }
        }
        self.after_handler(i);
    }

    /// Exactly once: what the handling of `msg` staged, if its record stages an effect: one write
    /// on its own item, the effect of the record in its shard's current seek epoch.
    fn staged(&mut self, msg: &Msg) -> Option<Staged<SimRecord>> {
        let (unit, size) = self.unit_of(std::slice::from_ref(msg), 1)?;
        Some(Staged {
            unit,
            size,
            record: self.stream.record(msg.shard, msg.idx),
            attempts: 1,
            members: 1,
            joint: false,
        })
    }

    /// Exactly once: the unit the handling of `msgs` (one record, or a batch's of `shards`
    /// shards) stages, if any of them stages an effect: one write on each one's own item, the
    /// effects of the records in their shard's current seek epoch.
    fn unit_of(&mut self, msgs: &[Msg], shards: usize) -> Option<(UnitId, UnitSize)> {
        let staging: Vec<&Msg> = msgs
            .iter()
            .filter(|msg| self.stages(msg.shard, msg.idx))
            .collect();
        if staging.is_empty() {
            return None;
        }
        let unit = UnitId(self.next_unit);
        self.next_unit += 1;
        let effects = staging
            .iter()
            .map(|msg| EffectId {
                shard: msg.shard,
                idx: msg.idx,
                epoch: self.seek_epochs.get(&msg.shard).copied().unwrap_or(0),
            })
            .collect();
        self.unit_effects.insert(unit, effects);
        // A batch's records stage one to forty writes each (at most 99 all told, as staging
        // allows), so that a commit's fold meets the limits of a transaction at a batch, not
        // only between units of one record.
        let writes = |msg: &Msg| {
            if msgs.len() > 1 {
                1 + (msg.shard * 31 + msg.idx) % 40
            } else {
                1
            }
        };
        let items: Arc<[ItemRef]> = staging
            .iter()
            .flat_map(|msg| {
                let key = (msg.shard * 1_000_003 + msg.idx) as u64;
                (0..writes(msg)).map(move |n| ItemRef {
                    table: 1,
                    key: Some(key * 64 + n as u64),
                })
            })
            .take(Limits::DYNAMODB.actions - shards)
            .collect();
        let size = UnitSize {
            actions: items.len(),
            bytes: 100 * items.len(),
            items,
        };
        Some((unit, size))
    }

    /// Exactly once, the runtime pulls `msg` for a batch handler: a first delivery joins the
    /// batch this pull is filling for its session when it follows that batch's last record,
    /// else it starts a batch of its own (`KinesisSubscriber::batches`: a batch holds one
    /// shard's records, and a record delivered again comes alone). Whether it joined one.
    fn batch_pulls(&mut self, i: usize, msg: Msg) -> bool {
        if !self.cfg.exactly_once || self.cfg.handler_batch < 2 || msg.redelivery {
            return false;
        }
        let inst = &mut self.insts[i];
        let limit = self.cfg.handler_batch;
        let joint = self.cfg.joint_batches;
        let joins = inst.batches.iter_mut().find(|(_, batch)| {
            let follows = match batch.lasts.iter().find(|last| last.sid == msg.sid) {
                Some(last) => {
                    last.idx + 1 == msg.idx && last.ticket.generation == msg.ticket.generation
                }
                // `KinesisSubscriber::batches`: a batch of several shards under joint commits.
                None => joint,
            };
            batch.open && batch.size < limit && follows
        });
        let joined = joins.is_some();
        let id = match joins {
            Some((&id, batch)) => {
                batch.size += 1;
                batch.lasts.retain(|last| last.sid != msg.sid);
                batch.lasts.push(msg);
                id
            }
            None => {
                let id = self.next_batch;
                self.next_batch += 1;
                inst.batches.insert(
                    id,
                    Batch {
                        lasts: vec![msg],
                        opened: self.now,
                        size: 1,
                        done: Vec::new(),
                        open: true,
                    },
                );
                id
            }
        };
        inst.batch_of
            .insert((msg.sid, msg.ticket.generation, msg.idx as u64), id);
        joined
    }

    /// Exactly once, `msg` of a batch was handled (or `withheld` from its handler): it stays in
    /// flight until the last record of its batch is done, which settles the batch. Whether
    /// `msg` belongs to a batch.
    fn batch_member_done(&mut self, i: usize, msg: Msg, withheld: bool) -> bool {
        let key = (msg.sid, msg.ticket.generation, msg.idx as u64);
        let Some(id) = self.insts[i].batch_of.remove(&key) else {
            return false;
        };
        if !withheld {
            // `handler_done` let its slot go: the batch holds it until it settles.
            self.insts[i].in_flight += 1;
        }
        let Some(batch) = self.insts[i].batches.get_mut(&id) else {
            return false;
        };
        let verdict = if withheld {
            Verdict::Forget
        } else {
            Verdict::Ack
        };
        batch.done.push((msg, verdict));
        if batch.done.len() < batch.size {
            return true;
        }
        let Some(batch) = self.insts[i].batches.remove(&id) else {
            return true;
        };
        self.batch_done(i, batch);
        true
    }

    /// `ShardHandle::hand_back`: `msg` goes back to its session's machine, to come again after
    /// `delay`; a delivery of a stopped shard, or one a seek made stale, is forgotten (waking
    /// the reader where that gave it room). Whether it was kept, so the redelivery task asks.
    fn hand_back(&mut self, i: usize, msg: Msg, delay: Duration) -> bool {
        let now = self.now;
        let record = self.stream.record(msg.shard, msg.idx);
        let Some(s) = self.insts[i].sessions.get_mut(&msg.sid) else {
            return false;
        };
        match s
            .machine
            .hand_back(now, record, msg.ticket, 1, delay, false)
        {
            HandedBack::Kept => true,
            HandedBack::Forgotten { wake_reader } => {
                if wake_reader {
                    self.reader_wake(i, msg.sid, false);
                }
                false
            }
            HandedBack::Refused => unreachable!("the simulated broker does not shut down"),
        }
    }

    /// Exactly once, a batch's records go back, each to come again alone
    /// (`delivery/batch.rs`'s `back`): its handler retried one of them, a record was withheld
    /// from it, or a seek made one stale.
    fn batch_back(&mut self, i: usize, held: &[(Msg, Verdict)]) {
        self.stats.handed_back += held.len() as u64;
        let mut kept: BTreeSet<u64> = BTreeSet::new();
        for &(msg, verdict) in held {
            match back(verdict) {
                Some(delay) => {
                    if self.hand_back(i, msg, delay) {
                        kept.insert(msg.sid);
                    }
                }
                None => self.forget(i, msg),
            }
        }
        for sid in kept {
            self.redeliver_drive(i, sid);
        }
        self.after_handler(i);
    }

    /// Exactly once, a batch settles the records it holds as one unit
    /// (`delivery/batch.rs`, `ShardHandle::settle_batch`): handed back whole when its handler
    /// retries one of them (`p_retry`), or when a seek made one stale; else settled at once with
    /// what they staged (`ShardMachine::settle_unit`; a unit of several shards waits for its
    /// joint commit, `shard::joint`), or each alone when none staged.
    fn batch_done(&mut self, i: usize, batch: Batch) {
        let mut settled = batch.done;
        settled.sort_by_key(|(msg, _)| (msg.sid, msg.idx));
        // The batch's one slot.
        self.insts[i].in_flight -= 1;
        if self.rng.random_bool(self.cfg.p_retry)
            && let Some((_, last)) = settled.last_mut()
            && *last == Verdict::Ack
        {
            // Its handler retries its last record.
            *last = Verdict::Back(self.cfg.retry_delay);
        }
        if self.drops_now() {
            // Its body failed as a whole (`Err`, dead letters): every record it was given is
            // dropped.
            for (_, verdict) in &mut settled {
                if *verdict == Verdict::Ack {
                    *verdict = Verdict::Drop;
                }
            }
        }
        let dropped = match BatchEnd::of(settled.iter().map(|&(_, verdict)| verdict)) {
            BatchEnd::Commit => false,
            BatchEnd::Back => return self.batch_back(i, &settled),
            // What it staged is let go: each record settles alone with nothing staged.
            BatchEnd::Drop => true,
        };
        let held: Vec<Msg> = settled.iter().map(|&(msg, _)| msg).collect();
        if dropped {
            self.dropped
                .extend(held.iter().map(|msg| (msg.shard, msg.idx)));
        }
        let sids: BTreeSet<u64> = held.iter().map(|msg| msg.sid).collect();
        let unit = if dropped {
            None
        } else {
            self.unit_of(&held, sids.len())
        };
        let whole = unit.is_none()
            || sids.iter().all(|&sid| {
                self.insts[i].sessions.get(&sid).is_some_and(|s| {
                    s.machine.holds_all(
                        held.iter()
                            .filter(|msg| msg.sid == sid)
                            .map(|msg| msg.ticket),
                    )
                })
            });
        if !whole {
            // `ShardHandle::settle_batch`: a seek made one stale; every one goes back at once.
            let back: Vec<(Msg, Verdict)> = held.iter().map(|&msg| (msg, Verdict::Ack)).collect();
            return self.batch_back(i, &back);
        }
        for msg in &held {
            self.mark_acked(msg.shard, msg.idx);
        }
        if unit.is_some() {
            self.stats.batches += 1;
        }
        let joint = sids.len() > 1;
        for &sid in &sids {
            let mine: Vec<Msg> = held.iter().filter(|msg| msg.sid == sid).copied().collect();
            let stream = &self.stream;
            let Some(s) = self.insts[i].sessions.get_mut(&sid) else {
                continue;
            };
            let settled = match &unit {
                Some((unit, size)) => {
                    let members = mine
                        .iter()
                        .map(|msg| Member {
                            ticket: msg.ticket,
                            record: stream.record(msg.shard, msg.idx),
                            attempts: 1,
                        })
                        .collect();
                    s.machine
                        .settle_part(*unit, size.clone(), members, joint, false)
                        .ok()
                }
                // Nothing staged: each settles alone (`ShardHandle::settle_batch`).
                None => mine.iter().fold(None, |all: Option<Settled>, msg| {
                    match (all, s.machine.settle_staged(msg.ticket, None, false).ok()) {
                        (Some(all), Some(one)) => Some(Settled {
                            grew: false,
                            checkpoint: all.checkpoint || one.checkpoint,
                            wake_reader: all.wake_reader || one.wake_reader,
                        }),
                        (all, one) => one.or(all),
                    }
                }),
            };
            if let Some(settled) = settled {
                self.last_progress = self.now;
                if settled.checkpoint {
                    self.lease_wake(i, sid);
                }
                if settled.wake_reader {
                    self.reader_wake(i, sid, false);
                }
            }
        }
        if joint && let Some((unit, _)) = unit {
            self.stats.joint_units += 1;
            self.insts[i].joints.insert(
                unit,
                JointUnit {
                    sids: sids.into_iter().collect(),
                    since: self.now,
                    in_flight: false,
                    first_sent: None,
                    epochs: Vec::new(),
                    timer: 0,
                },
            );
            self.joint_drive(i, unit);
        }
        self.after_handler(i);
    }

    /// Whether the handling that ends now drops its record (or its batch), by `Config::p_drop`.
    fn drops_now(&mut self) -> bool {
        let drops = self.cfg.p_drop > 0.0 && self.drops.random_bool(self.cfg.p_drop);
        if drops {
            self.stats.drops += 1;
        }
        drops
    }

    /// Whether a handling of record `idx` of `shard` stages an effect (exactly once).
    pub(super) fn stages(&self, shard: usize, idx: usize) -> bool {
        let key = shard * 1_000_003 + idx;
        self.cfg.exactly_once && !key.is_multiple_of(self.cfg.stage_every)
    }

    /// `reader::redeliver`: sends the records handed back that are due, then sleeps until the
    /// next falls due (or a hand-back wakes it); ends with the session's cancel.
    pub(super) fn redeliver_drive(&mut self, i: usize, sid: u64) {
        loop {
            let now = self.now;
            let wall = self.wall(i);
            let token = self.token();
            let inc = self.insts[i].inc;
            let Some(s) = self.insts[i].sessions.get_mut(&sid) else {
                return;
            };
            if s.cancelled {
                return;
            }
            let shard = s.shard;
            match s.machine.next_redelivery(now, wall) {
                Redeliver::Deliver(again) => {
                    self.insts[i].channel.push_back(Msg {
                        sid,
                        shard,
                        idx: again.record.idx,
                        ticket: again.ticket,
                        redelivery: true,
                    });
                    self.dispatch_soon(i);
                }
                Redeliver::Halted => return self.stop(i, sid),
                Redeliver::Wait(None) => return,
                Redeliver::Wait(Some(at)) => {
                    s.redeliver_token = token;
                    let ev = Ev::Redeliver {
                        inst: i,
                        inc,
                        sid,
                        token,
                    };
                    return self.push(at.max(now), ev);
                }
            }
        }
    }

    /// The handler of `msg` seeks its shard (`KinesisSeeker::seek` to a record a few before or
    /// after its own, through the `SeekHandle` of its context), then finishes. `seek_live`
    /// resolves the iterator first (a failure moves nothing), then resets the shard's watermark
    /// (its pending checkpoint and the records waiting to come back go) and restarts its reader
    /// at the target, a draining one included.
    pub(super) fn handler_seeks(&mut self, i: usize, msg: Msg) {
        let shard = msg.shard;
        let Some(&sid) = self.insts[i].running.get(&shard) else {
            // Not read by this instance any more: the seek is refused.
            return;
        };
        if self.chaos() && self.rng.random_bool(self.cfg.p_kinesis) {
            self.stats.seeks_failed += 1;
            return;
        }
        let len = self.stream.shards[shard].records.len();
        let target = self
            .rng
            .random_range(msg.idx.saturating_sub(4)..=(msg.idx + 4).min(len - 1));
        let seq = self.stream.shards[shard].records[target];
        let id = self.id(shard);
        // A user record of an aggregate as its delivery's context names it.
        let to = match self.stream.shards[shard].subs[target] {
            Some(sub) => KinesisPosition::at_sub_sequence(Arc::clone(&id), seq.to_string(), sub),
            None => KinesisPosition::at_sequence(Arc::clone(&id), seq.to_string()),
        };
        // `seek_live`: the iterator at the target (Kinesis serves its aggregate whole), and
        // where later iterators start until a record is delivered.
        let iterator = self.stream.aggregate_start(shard, target);
        let wall = self.wall_at(i, self.now);
        let resume = ShardStart::resuming_at(&to, wall);
        let recorded = ShardStart::seek_checkpoint(&to, wall);
        // Its checkpoints may go back to the seek's own (just before the target), no further.
        let floor = Mark::of(Some(&recorded));
        let Some(s) = self.session(i, sid) else {
            return;
        };
        if s.cancelled || s.machine.is_halted() || s.machine.is_handing_over() {
            // Handed back, or on its way to another instance: its checkpoint stands.
            return;
        }
        // `seek_live` resolved the iterator (here: the target's index); `ShardHandle::seek`.
        let restarts = s.machine.seek(
            ShardIterator::service(iterator.to_string()),
            resume,
            crate::SharedStr::from(recorded),
        );
        s.settled_upto = None;
        s.seek_floor = Some(s.seek_floor.map_or(floor, |known| known.min(floor)));
        if let Some(floor) = s.seek_floor {
            self.seek_floors.insert(sid, floor);
        }
        self.stats.seeks += 1;
        self.log(|| format!("i{i} seeks shard {shard} (session {sid}) to #{target}"));
        if !restarts {
            return;
        }
        // The seek's position is the pending checkpoint: the lease's driver is told of it.
        if self.cfg.seek_wakes_writer {
            self.lease_wake(i, sid);
        }
        // Exactly once: the records after the target are asked for again, effects included;
        // those before it are let go, the seeking handling's own included (its settle comes
        // after the seek: what it staged is dropped with the old position).
        let epoch = self.seek_epochs.entry(shard).or_default();
        let before = *epoch;
        *epoch += 1;
        let after = *epoch;
        let mut let_go: HashSet<usize> = self
            .effects_let_go
            .get(&(shard, before))
            .map(|set| set.iter().copied().filter(|&idx| idx < target).collect())
            .unwrap_or_default();
        let_go.extend(0..target);
        self.effects_let_go.insert((shard, after), Arc::new(let_go));
        // What the seek skips forward is not owed any more; what it goes back over is read again.
        for idx in 0..target {
            if self.waive(shard, idx) {
                self.stats.waived += 1;
            }
        }
        let g = &mut self.ghost[shard];
        // What a release covered is read again from the target, by this owner and, once
        // its checkpoint moved back, by the next one.
        g.covered_upto = g.covered_upto.min(target);
        g.planned_upto = g.planned_upto.min(target);
        let Some(s) = self.session(i, sid) else {
            return;
        };
        s.start_idx = target;
        s.last_idx = None;
        s.handled_upto = None;
        self.reader_wake(i, sid, false);
        // The seek dropped its units: one that spans shards goes back everywhere.
        self.joints_drive(i);
    }
}

//! The coordinator's drivers, as `live/coordinator/mod.rs` runs them: `drive` executes what the
//! real [`Rounds`] asks (`ListShards`, a `list` of the rows or a read of each, the takes of a
//! pass, a wait in `run`'s `select!` for the deadline, a wake or the cancel), and `take_step`
//! makes the calls the real [`Take`] asks (the acquire, the start it records, the iterator, a
//! hand-back). Every decision is the real [`Coordinator`]'s: which rows to read, what is
//! takeable, a round's passes, what a take's answer means and how a failed take backs off.

use super::*;

impl Sim {
    // ----- `coordinator::drive`: what `Rounds` asks ---------------------------------------

    /// Executes what the subscription's `Rounds` asks until it waits for an answer or a wake.
    pub(super) fn coord_drive(&mut self, i: usize) {
        loop {
            let now = self.now;
            let now_ms = self.wall(i);
            let reading = self.reading(i);
            let token = self.token();
            let inst = &mut self.insts[i];
            let owner = Arc::clone(&inst.owner);
            let coord = &mut inst.coord;
            if coord.exited {
                return;
            }
            let polling = coord.rounds.is_polling();
            let steady = coord.rounds.steady_rounds();
            let paced = coord.rounds.paced_waits();
            let skipped = coord.knows.skipped_plans();
            // `live/beat.rs`'s chain, as the coordinator's driver asks it before each step.
            let counts = coord
                .beat
                .as_ref()
                .is_none_or(|beat| beat.counts_at(now, now_ms));
            coord.knows.beat_counts(counts);
            let step = coord
                .rounds
                .next(&mut coord.knows, &reading, &owner, now, now_ms);
            self.stats.steady_rounds += coord.rounds.steady_rounds() - steady;
            self.stats.paced_waits += coord.rounds.paced_waits() - paced;
            self.stats.skipped_plans += coord.knows.skipped_plans() - skipped;
            match step {
                RoundStep::ListShards => {
                    self.stats.rounds += 1;
                    // Answered at once: the listing is the stream's now.
                    let shards = if self.chaos() && self.rng.random_bool(self.cfg.p_kinesis) {
                        self.log(|| format!("i{i} ListShards failed"));
                        Shards::Failed
                    } else {
                        // `tell_closed`: the readers of shards the listing shows closed.
                        for session in self.insts[i].sessions.values_mut() {
                            if self.stream.shards[session.shard].info.closed {
                                session.machine.shard_closed();
                            }
                        }
                        Shards::Listed(self.stream.listing())
                    };
                    let coord = &mut self.insts[i].coord;
                    coord.rounds.listed(&mut coord.knows, shards, now);
                }
                RoundStep::ListRows { eventual } => {
                    if !polling && coord.rounds.is_polling() {
                        self.stats.polls += 1;
                    }
                    self.send(i, 0, 0, OpKind::List { eventual }, Cont::RoundList);
                    return;
                }
                RoundStep::Delete(deletions) => {
                    coord.round.deletions_left = deletions.len();
                    for deletion in deletions {
                        let shard = self.stream.ids[&deletion.shard];
                        let kind = OpKind::Delete {
                            counter: deletion.counter,
                        };
                        self.send(i, 0, shard, kind, Cont::Delete { shard });
                    }
                    return;
                }
                RoundStep::ReadNotice { .. } if !self.cfg.keeps_notices() => {
                    // A store written against the five calls answers at once, with no call.
                    let coord = &mut self.insts[i].coord;
                    coord.rounds.notice_read(
                        &mut coord.knows,
                        NoticeRead::Unsupported,
                        &owner,
                        now,
                        now_ms,
                    );
                }
                RoundStep::ReadNotice { whole, consistent } => {
                    let kind = if whole {
                        self.stats.notice_reads += 1;
                        OpKind::Notice {
                            eventual: !consistent,
                        }
                    } else {
                        self.stats.notice_head_reads += 1;
                        OpKind::NoticeHead
                    };
                    self.send(i, 0, 0, kind, Cont::Notice { whole });
                    return;
                }
                RoundStep::Beat(beat) => {
                    self.stats.beats += 1;
                    let kind = OpKind::Beat {
                        until_ms: beat.until_ms,
                        forget: beat.forget,
                    };
                    self.send(i, 0, 0, kind, Cont::Beat);
                    return;
                }
                RoundStep::Announce { record, forget } => {
                    self.stats.announces += 1;
                    let kind = OpKind::Announce { record, forget };
                    self.send(i, 0, 0, kind, Cont::Announce);
                    return;
                }
                RoundStep::Twin(news) => {
                    // No two runs of one owner id are alive at once here. An earlier run's record
                    // can still show after this run's: a write of a run that stopped, landed
                    // late, within the skews of this run's start (so `twins` cannot tell it
                    // from a live run's, by design). This run then pauses, takes nothing, and
                    // reads again a lease after its record landed with no answer (`Gone`); a
                    // paused live instance also stops its readers, which this model leaves be.
                    let run = self.insts[i].run;
                    match news {
                        TwinNews::Earlier(twin) if twin.mine == run && twin.theirs < run => {
                            self.log(|| format!("i{i} pauses for a stopped run's late record"));
                            self.stats.late_twin_pauses += 1;
                            self.insts[i].coord.knows.set_paused(true);
                        }
                        TwinNews::Gone(twin) if twin.mine == run => {
                            self.log(|| format!("i{i} reads again"));
                            self.insts[i].coord.knows.set_paused(false);
                        }
                        _ => {
                            self.fail(format!(
                                "false twin: i{i} ({owner}) was told {news:?}, and no other run \
                                 under its owner id is alive"
                            ));
                            return;
                        }
                    }
                }
                RoundStep::HandOver(rows) => {
                    // `hand_over_asked`: each row goes to its shard's reader, if it still reads.
                    let wall = self.wall(i);
                    for (id, row) in rows {
                        let shard = self.stream.ids[&id];
                        let asked: Vec<u64> = self.insts[i]
                            .sessions
                            .iter_mut()
                            .filter(|(_, s)| s.shard == shard)
                            .filter_map(|(sid, s)| {
                                s.machine.row_seen(&row, &owner, now, wall).then_some(*sid)
                            })
                            .collect();
                        for sid in asked {
                            self.stats.asks_heard_by_beat += 1;
                            self.log(|| format!("i{i} session {sid} hears of a handoff by beat"));
                            self.reader_wake(i, sid, false);
                        }
                    }
                }
                RoundStep::Ask(asks) => {
                    coord.round.asks_left = asks.len();
                    for ask in asks {
                        let shard = self.stream.ids[&ask.shard];
                        let cont = Cont::Ask {
                            shard,
                            holder: ask.holder.clone(),
                        };
                        let kind = OpKind::AskHandoff {
                            holder: ask.holder,
                            counter: ask.counter,
                        };
                        self.send(i, 0, shard, kind, cont);
                    }
                    return;
                }
                RoundStep::MarkAsked(holders) => {
                    self.send(i, 0, 0, OpKind::MarkAsked { holders }, Cont::Marked);
                    return;
                }
                RoundStep::ReadRows(wanted) => {
                    self.stats.list_fallbacks += 1;
                    coord.round = Round {
                        reads_left: wanted.len(),
                        ..Round::default()
                    };
                    for id in wanted {
                        let shard = self.stream.ids[&id];
                        self.send(i, 0, shard, OpKind::Read, Cont::Read { shard });
                    }
                    return;
                }
                RoundStep::Take(takes) => {
                    coord.round.takes_left = takes.len();
                    self.take_all(i, takes);
                    return;
                }
                RoundStep::Wait(until) => {
                    coord.waiting = true;
                    coord.timer = token;
                    if let Some(at) = until {
                        let inc = inst.inc;
                        self.push(
                            at.max(now),
                            Ev::Round {
                                inst: i,
                                inc,
                                token,
                            },
                        );
                    }
                    return;
                }
                RoundStep::Exit => {
                    coord.exited = true;
                    // `coordinator::run`: its standing requests withdrawn, so no holder hands it a
                    // shard, and its beat removed, so the others count one instance fewer.
                    let standing = coord.knows.standing_asks(&owner, now_ms, &reading);
                    let balancing = coord.knows.is_balancing();
                    // Kept alive by its beat, the instance does not remove it here: its readers may
                    // still count on it (its end removes it once they ended, `maybe_exit`).
                    let by_beat = coord.beat.is_some();
                    for id in standing {
                        let shard = self.stream.ids[&id];
                        self.send(i, 0, shard, OpKind::Withdraw, Cont::Leave);
                    }
                    if balancing && !by_beat {
                        let kind = OpKind::Leave { until_ms: None };
                        self.send(i, 0, 0, kind, Cont::Leave);
                    }
                    self.maybe_exit(i);
                    return;
                }
            }
        }
    }

    /// The shards instance `i` reads.
    pub(super) fn reading(&self, i: usize) -> HashSet<Arc<str>> {
        self.insts[i].running.keys().map(|&s| self.id(s)).collect()
    }

    /// `run`'s `select!` wakes: its timer.
    pub(super) fn coord_fire(&mut self, i: usize) {
        let coord = &mut self.insts[i].coord;
        if coord.waiting {
            coord.waiting = false;
            self.coord_drive(i);
        }
    }

    /// `sub.wake.notify_one()`: the next `select!` wakes at once (a waiting one now).
    pub(super) fn coord_wake(&mut self, i: usize) {
        self.insts[i].coord.rounds.wake();
        self.coord_interrupt(i);
    }

    /// The subscription's cancel: `run`'s `select!` ends the coordinator.
    pub(super) fn coord_cancel(&mut self, i: usize) {
        let coord = &mut self.insts[i].coord;
        coord.cancelled = true;
        coord.rounds.cancel();
        self.coord_interrupt(i);
    }

    fn coord_interrupt(&mut self, i: usize) {
        let token = self.token();
        let jitter = self.jitter();
        let inst = &mut self.insts[i];
        if inst.coord.waiting {
            inst.coord.timer = token;
            let inc = inst.inc;
            self.push(
                self.now + jitter,
                Ev::Round {
                    inst: i,
                    inc,
                    token,
                },
            );
        }
    }

    /// The `list` of the rows answered.
    pub(super) fn round_listed(&mut self, i: usize, res: Res) {
        let now = self.now;
        let now_ms = self.wall(i);
        let ids: Vec<Arc<str>> = (0..self.stream.shards.len()).map(|s| self.id(s)).collect();
        let owner = Arc::clone(&self.insts[i].owner);
        if let Res::Rows(listed) = &res {
            // As `DynamoLeaseStore::scan`: what it saw exists; nothing is forgotten.
            let inc = self.insts[i].inc;
            for (shard, _) in listed {
                self.known_rows.insert((i, inc, *shard));
            }
        }
        let inst = &mut self.insts[i];
        let coord = &mut inst.coord;
        let listed = match res {
            Res::Rows(listed) => Listed::Rows(
                listed
                    .into_iter()
                    .map(|(shard, row)| (Arc::clone(&ids[shard]), row))
                    .collect(),
            ),
            _ => Listed::Failed,
        };
        let polling = coord.rounds.is_polling();
        coord
            .rounds
            .rows_listed(&mut coord.knows, listed, &owner, now, now_ms);
        if polling && coord.rounds.is_round_due() {
            self.stats.poll_rounds += 1;
        }
        self.coord_drive(i);
    }

    /// The poll's read of the notice answered.
    pub(super) fn notice_answered(&mut self, i: usize, res: Res, whole: bool) {
        let now = self.now;
        let now_ms = self.wall(i);
        let inst = &mut self.insts[i];
        let owner = Arc::clone(&inst.owner);
        let coord = &mut inst.coord;
        let read = match res {
            Res::Notice(notice) if whole => NoticeRead::Notice(notice),
            Res::Notice(head) => NoticeRead::Head(head),
            _ => NoticeRead::Failed,
        };
        let skipped = coord.knows.skipped_weighings();
        coord
            .rounds
            .notice_read(&mut coord.knows, read, &owner, now, now_ms);
        self.stats.skipped_weighings += coord.knows.skipped_weighings() - skipped;
        self.stats.notices_answered += 1;
        self.coord_drive(i);
    }

    /// One of the round's deletions answered; once every one did, `Rounds` hears it.
    pub(super) fn round_deleted(&mut self, i: usize, shard: usize, res: Res) {
        let now = self.now;
        let id = self.id(shard);
        if matches!(res, Res::Ok) {
            let inc = self.insts[i].inc;
            self.known_rows.remove(&(i, inc, shard));
        }
        let coord = &mut self.insts[i].coord;
        coord.knows.deletion_answered(&id, matches!(res, Res::Ok));
        coord.round.deletions_left -= 1;
        if coord.round.deletions_left > 0 {
            return;
        }
        coord.rounds.deleted(now);
        self.coord_drive(i);
    }

    /// One of the round's requests for a handoff answered (whatever it said); once every
    /// one did, `Rounds` hears it. The live driver applies the answers together once every call
    /// answered; `Coordinator::requested` is read only after `Rounds::asked`, so the two orders
    /// decide alike.
    pub(super) fn ask_answered(&mut self, i: usize, shard: usize, holder: &str, res: &Res) {
        let now = self.now;
        if matches!(res, Res::Ok) {
            let (id, asked_ms) = (self.id(shard), self.wall(i));
            self.insts[i].coord.knows.requested(&id, holder, asked_ms);
        } else if matches!(res, Res::Failed | Res::Throttled) {
            // Unanswered: it may have landed all the same.
            let asked_ms = self.wall(i);
            self.insts[i].coord.knows.ask_unanswered(asked_ms);
        }
        let coord = &mut self.insts[i].coord;
        coord.round.asks_left -= 1;
        if coord.round.asks_left > 0 {
            return;
        }
        coord.rounds.asked(&mut coord.knows, now);
        self.coord_drive(i);
    }

    /// The round's marks of its requests answered (whatever they said).
    pub(super) fn marks_answered(&mut self, i: usize) {
        let now = self.now;
        let coord = &mut self.insts[i].coord;
        coord.rounds.marked(&mut coord.knows, now);
        self.coord_drive(i);
    }

    /// The poll's record of this run answered.
    pub(super) fn announce_answered(&mut self, i: usize, res: &Res) {
        let now_ms = self.wall(i);
        let coord = &mut self.insts[i].coord;
        coord
            .rounds
            .announced(&mut coord.knows, matches!(res, Res::Ok), now_ms);
        self.coord_drive(i);
    }

    /// The poll's beat answered (whatever it said).
    pub(super) fn beat_answered(&mut self, i: usize, res: &Res) {
        let owner = Arc::clone(&self.insts[i].owner);
        let coord = &mut self.insts[i].coord;
        coord
            .rounds
            .beaten(&mut coord.knows, &owner, matches!(res, Res::Ok));
        self.coord_drive(i);
    }

    /// A read of one row answered; once every read did, `Rounds` has them.
    pub(super) fn round_read(&mut self, i: usize, shard: usize, res: Res) {
        let now = self.now;
        let now_ms = self.wall(i);
        let id = self.id(shard);
        let inc = self.insts[i].inc;
        if let Res::Row(Some(_)) = &res {
            self.known_rows.insert((i, inc, shard));
        }
        let inst = &mut self.insts[i];
        let owner = Arc::clone(&inst.owner);
        let coord = &mut inst.coord;
        match res {
            Res::Row(row) => {
                coord.round.rows.insert(id, row);
            }
            _ => {
                coord.round.unreadable.insert(id);
            }
        }
        coord.round.reads_left -= 1;
        if coord.round.reads_left > 0 {
            return;
        }
        let rows = std::mem::take(&mut coord.round.rows);
        let unreadable = std::mem::take(&mut coord.round.unreadable);
        let polling = coord.rounds.is_polling();
        coord
            .rounds
            .rows_read(&mut coord.knows, rows, &unreadable, &owner, now, now_ms);
        if polling && coord.rounds.is_round_due() {
            self.stats.poll_rounds += 1;
        }
        self.coord_drive(i);
    }

    // ----- `Subscription::take_all`: what `Take` asks ---------------------------------------

    /// The takes of one pass, in parallel.
    pub(super) fn take_all(&mut self, i: usize, takes: Vec<(ShardInfo, TakeFor)>) {
        for (info, purpose) in takes {
            let shard = self.stream.ids[&info.id];
            let sid = self.next_sid;
            self.next_sid += 1;
            self.sid_inst.insert(sid, (i, self.insts[i].inc));
            let owner = self.insts[i].owner.clone();
            let over = self.insts[i]
                .coord
                .knows
                .take_over_of(&info.id, &owner, self.wall(i));
            let take = Take::new(Arc::clone(&info.id), purpose, over, self.now, self.wall(i));
            self.insts[i].coord.takes.insert(sid, take);
            self.take_step(i, sid, shard);
        }
    }

    /// Executes what take `sid` of `shard` asks until it waits for an answer or is over.
    fn take_step(&mut self, i: usize, sid: u64, shard: usize) {
        loop {
            let Some(take) = self.insts[i].coord.takes.get(&sid) else {
                return;
            };
            match take.next() {
                TakeStep::Call(TakeCall::ReadNotice) => {
                    let cont = Cont::TakeNotice {
                        shard,
                        sid,
                        sent_ms: self.wall(i),
                    };
                    // A take-over judges the holder's beat on a consistent read.
                    let kind = OpKind::Notice {
                        eventual: self.cfg.take_reads_behind,
                    };
                    return self.send(i, sid, shard, kind, cont);
                }
                TakeStep::Call(TakeCall::Acquire {
                    start,
                    over:
                        Some(crate::coordinator::plan::Over {
                            holder, counter, ..
                        }),
                }) => {
                    // `take_over`: one conditional write, the start recorded with it.
                    let kind = OpKind::TakeOver {
                        holder,
                        counter,
                        start: Arc::clone(&start),
                    };
                    let cont = Cont::Acquire { shard, sid, start };
                    return self.send(i, sid, shard, kind, cont);
                }
                TakeStep::Call(TakeCall::Acquire { start, over: None }) => {
                    let cont = Cont::Acquire { shard, sid, start };
                    return self.send(i, sid, shard, OpKind::Acquire, cont);
                }
                TakeStep::Call(TakeCall::Iterator { .. }) => {
                    // Answered at once, from the stream as it is now.
                    let answer = if self.stream.shards[shard].trimmed {
                        self.log(|| format!("i{i} GetShardIterator: shard {shard} not found"));
                        Err(IteratorRefused::Gone)
                    } else if self.chaos() && self.rng.random_bool(self.cfg.p_kinesis) {
                        self.log(|| format!("i{i} GetShardIterator failed for shard {shard}"));
                        Err(IteratorRefused::Failed)
                    } else {
                        Ok(())
                    };
                    let (now, coin) = (self.now, self.rng.random_range(0..=u64::MAX));
                    let coord = &mut self.insts[i].coord;
                    let take = coord.takes.get_mut(&sid).expect("the take asked");
                    if let Told::Backoff(_) = take.positioned(&mut coord.knows, answer, now, coin) {
                        self.stats.take_backoffs += 1;
                    }
                }
                TakeStep::Call(TakeCall::Release) => return self.take_release(i, sid, shard),
                TakeStep::Read {
                    start,
                    resume,
                    sent,
                    sent_ms,
                } => {
                    self.insts[i].coord.takes.remove(&sid);
                    self.open_session(i, sid, shard, (&start, resume), (sent, sent_ms));
                    return self.take_done(i);
                }
                TakeStep::Over { wake_coordinator } => {
                    self.insts[i].coord.takes.remove(&sid);
                    if wake_coordinator {
                        self.stats.skipped += 1;
                        self.coord_wake(i);
                    }
                    return self.take_done(i);
                }
            }
        }
    }

    /// The store's `acquire` answered take `sid`; `start` is what its `acquire_from` records in
    /// a row without a checkpoint (the trait's default: a checkpoint write after the acquire).
    pub(super) fn round_acquired(
        &mut self,
        i: usize,
        shard: usize,
        sid: u64,
        start: Arc<str>,
        res: Res,
    ) {
        let inc = self.insts[i].inc;
        match &res {
            // A take's answer with the row (granted, or refused by a holder) shows it exists.
            Res::Granted(_) | Res::Fenced => {
                self.known_rows.insert((i, inc, shard));
            }
            Res::Deleted => {
                self.known_rows.remove(&(i, inc, shard));
            }
            _ => {}
        }
        let answer = match res {
            Res::Granted(state) if state.checkpoint.is_none() => {
                let op = OpKind::Checkpoint(Arc::clone(&start));
                let cont = Cont::StartCheckpoint { shard, sid, start };
                return self.send(i, sid, shard, op, cont);
            }
            Res::Granted(state) => return self.acquired(i, sid, shard, Ok(state.checkpoint)),
            Res::Fenced | Res::Deleted => Err(AcquireRefused::Fenced),
            Res::Throttled => Err(AcquireRefused::Throttled),
            _ => Err(AcquireRefused::Failed),
        };
        self.acquired(i, sid, shard, answer.map(|()| None));
    }

    /// `acquire_from`'s start checkpoint answered: its answer is the take's.
    pub(super) fn start_checkpointed(
        &mut self,
        i: usize,
        shard: usize,
        sid: u64,
        start: Arc<str>,
        res: Res,
    ) {
        let answer = match res {
            Res::Ok => Ok(Some(start.to_string())),
            Res::Fenced => Err(AcquireRefused::Fenced),
            Res::Throttled => Err(AcquireRefused::Throttled),
            _ => Err(AcquireRefused::Failed),
        };
        self.acquired(i, sid, shard, answer);
    }

    /// Hands take `sid` the answer of its acquire: the row's checkpoint, or the refusal.
    fn acquired(
        &mut self,
        i: usize,
        sid: u64,
        shard: usize,
        answer: Result<Option<String>, AcquireRefused>,
    ) {
        let (now, coin) = (self.now, self.rng.random_range(0..=u64::MAX));
        let coord = &mut self.insts[i].coord;
        let Some(take) = coord.takes.get_mut(&sid) else {
            return;
        };
        let answer = answer
            .as_ref()
            .map(Option::as_deref)
            .map_err(|refused| *refused);
        take.acquired(&mut coord.knows, answer, now, coin);
        self.take_step(i, sid, shard);
    }

    /// A take-over's read of the notice answered, the read sent at `sent_ms`.
    pub(super) fn take_noticed(
        &mut self,
        i: usize,
        shard: usize,
        sid: u64,
        sent_ms: u64,
        res: Res,
    ) {
        let coord = &mut self.insts[i].coord;
        let Some(take) = coord.takes.get_mut(&sid) else {
            return;
        };
        let notice = match &res {
            Res::Notice(notice) => Some(notice),
            _ => None,
        };
        take.judged(&mut coord.knows, notice, sent_ms);
        self.take_step(i, sid, shard);
    }

    /// `take` gives the shard back.
    fn take_release(&mut self, i: usize, sid: u64, shard: usize) {
        self.send(
            i,
            sid,
            shard,
            OpKind::Release {
                cover: None,
                stopping: false,
            },
            Cont::TakeRelease { shard, sid },
        );
    }

    /// A take's release answered (whatever it said).
    pub(super) fn take_released(&mut self, i: usize, sid: u64, shard: usize) {
        if let Some(take) = self.insts[i].coord.takes.get_mut(&sid) {
            take.released();
            self.take_step(i, sid, shard);
        }
    }

    /// One take of the pass is over; once every one is, `Rounds` hears it.
    pub(super) fn take_done(&mut self, i: usize) {
        let now = self.now;
        let coord = &mut self.insts[i].coord;
        coord.round.takes_left -= 1;
        if coord.round.takes_left > 0 {
            return;
        }
        coord.rounds.took(&mut coord.knows, now);
        self.coord_drive(i);
    }

    pub(super) fn reader_ended(&mut self, i: usize, shard: usize, finished: bool) {
        let id = self.id(shard);
        let inst = &mut self.insts[i];
        inst.running.remove(&shard);
        inst.coord.knows.reader_ended(&id, finished);
        self.coord_wake(i);
        self.maybe_exit(i);
    }
}

//! The coordinator's drivers, as `live/coordinator/mod.rs` runs them: `drive` executes what the
//! real [`Rounds`] asks (`ListShards`, a `list` of the rows or a read of each, the takes of a
//! pass, a wait in `run`'s `select!` for the deadline, a wake or the cancel), and `take` makes a
//! take's calls (the acquire, the start it records, the iterator) around the real
//! [`Coordinator`]'s decisions: which rows to read, what is takeable, a round's passes, what a
//! take's answer means and how a failed take backs off.

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
            let step = coord
                .rounds
                .next(&mut coord.knows, &reading, &owner, now, now_ms);
            match step {
                RoundStep::ListShards => {
                    // Answered at once: the listing is the stream's now.
                    let shards = if self.chaos() && self.rng.random_bool(self.cfg.p_kinesis) {
                        self.log(|| format!("i{i} ListShards failed"));
                        Shards::Failed
                    } else {
                        Shards::Listed(self.stream.listing())
                    };
                    let coord = &mut self.insts[i].coord;
                    coord.rounds.listed(&mut coord.knows, shards, now);
                }
                RoundStep::ListRows => {
                    if !polling && coord.rounds.is_polling() {
                        self.stats.polls += 1;
                    }
                    self.send(i, 0, 0, OpKind::List, Cont::RoundList);
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
        let inst = &mut self.insts[i];
        let owner = Arc::clone(&inst.owner);
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

    /// A read of one row answered; once every read did, `Rounds` has them.
    pub(super) fn round_read(&mut self, i: usize, shard: usize, res: Res) {
        let now = self.now;
        let now_ms = self.wall(i);
        let id = self.id(shard);
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

    // ----- `Subscription::take` -------------------------------------------------------------

    /// The takes of one pass, in parallel.
    pub(super) fn take_all(&mut self, i: usize, takes: Vec<(ShardInfo, TakeFor)>) {
        for (info, purpose) in takes {
            let shard = self.stream.ids[&info.id];
            let sid = self.next_sid;
            self.next_sid += 1;
            self.sid_inst.insert(sid, (i, self.insts[i].inc));
            let sent = self.now;
            // `take`: where a first owner starts, recorded by the take.
            let recorded = Arc::from(purpose.recorded(self.wall(i)));
            self.send(
                i,
                sid,
                shard,
                OpKind::Acquire,
                Cont::Acquire {
                    shard,
                    sid,
                    sent,
                    take: Take { purpose, recorded },
                },
            );
        }
    }

    /// `Subscription::take` after its acquire answered.
    pub(super) fn round_acquired(
        &mut self,
        i: usize,
        shard: usize,
        sid: u64,
        sent: Time,
        take: Take,
        res: Res,
    ) {
        let state = match res {
            Res::Granted(state) => state,
            // The store failed: nothing is handed back (the take may land later still).
            _ if self.cfg.release_after_failed_take => return self.take_release(i, sid, shard),
            // Another instance was faster, or the store failed.
            _ => return self.take_done(i),
        };
        match state.checkpoint.as_deref() {
            None => {
                // Recorded before the first read, so an instance that takes the shard over
                // before the first acknowledgement starts no later than this one did.
                let recorded = Arc::clone(&take.recorded);
                self.send(
                    i,
                    sid,
                    shard,
                    OpKind::Checkpoint(recorded),
                    Cont::StartCheckpoint {
                        shard,
                        sid,
                        sent,
                        take,
                    },
                );
            }
            Some(checkpoint) => {
                let checkpoint = checkpoint.to_owned();
                self.after_take(i, shard, sid, sent, &take, Some(&checkpoint));
            }
        }
    }

    /// `take` decides on the row its acquire left (`Coordinator::after_take`).
    pub(super) fn after_take(
        &mut self,
        i: usize,
        shard: usize,
        sid: u64,
        sent: Time,
        take: &Take,
        checkpoint: Option<&str>,
    ) {
        let id = self.id(shard);
        let after =
            self.insts[i]
                .coord
                .knows
                .after_take(&id, checkpoint, &take.purpose, &take.recorded);
        match after {
            AfterTake::Read { start, resume } => {
                self.take_positioned(i, shard, sid, sent, start, resume);
            }
            AfterTake::Finished | AfterTake::Unmarked => self.take_release(i, sid, shard),
            AfterTake::Skipped => self.skipped(i, sid, shard),
        }
    }

    /// `take`: the start checkpoint answered.
    pub(super) fn start_checkpointed(
        &mut self,
        i: usize,
        shard: usize,
        sid: u64,
        sent: Time,
        take: Take,
        res: Res,
    ) {
        match res {
            // The row holds the start (or the mark) the take recorded.
            Res::Ok => {
                let recorded = Arc::clone(&take.recorded);
                self.after_take(i, shard, sid, sent, &take, Some(&recorded));
            }
            // Another instance was faster, or a same-id session's release landed: nothing to
            // hand back.
            Res::Fenced => self.take_done(i),
            _ => self.take_release(i, sid, shard),
        }
    }

    /// `take` after the row is positioned: `GetShardIterator`, then the reader.
    pub(super) fn take_positioned(
        &mut self,
        i: usize,
        shard: usize,
        sid: u64,
        sent: Time,
        start: ShardStart,
        resume: ShardStart,
    ) {
        let trimmed = self.stream.shards[shard].trimmed;
        if trimmed || (self.chaos() && self.rng.random_bool(self.cfg.p_kinesis)) {
            self.log(|| format!("i{i} GetShardIterator failed for shard {shard}"));
            if trimmed {
                // `ShardNotFound`: never taken again while it stays out of the listing.
                let id = self.id(shard);
                self.insts[i].coord.knows.gone(&id);
            }
            // `take_failed`: the shard waits out a backoff before this instance tries it again.
            self.delay_take(i, shard);
            self.stats.take_backoffs += 1;
            self.take_release(i, sid, shard);
            return;
        }
        let id = self.id(shard);
        self.insts[i].coord.knows.took(&id);
        self.open_session(i, sid, shard, &start, resume, sent);
        self.take_done(i);
    }

    /// `Subscription::delay_take`: `shard` waits out a backoff that doubles with each failure in
    /// a row before this instance tries it again.
    pub(super) fn delay_take(&mut self, i: usize, shard: usize) {
        let id = self.id(shard);
        let coin: u64 = self.rng.random_range(0..=u64::MAX);
        let now = self.now;
        self.insts[i].coord.knows.delay_take(&id, now, coin);
    }

    /// `take` found the shard marked never to be read: handed back, and its children decided
    /// at once.
    pub(super) fn skipped(&mut self, i: usize, sid: u64, shard: usize) {
        self.stats.skipped += 1;
        self.coord_wake(i);
        self.take_release(i, sid, shard);
    }

    /// `take` gives the shard back and reports that it does not read it.
    pub(super) fn take_release(&mut self, i: usize, sid: u64, shard: usize) {
        self.send(
            i,
            sid,
            shard,
            OpKind::Release {
                cover: None,
                graceful: false,
            },
            Cont::TakeRelease,
        );
    }

    /// One take of the pass is over; once every one is, `Rounds` hears it.
    pub(super) fn take_done(&mut self, i: usize) {
        let now = self.now;
        let coord = &mut self.insts[i].coord;
        coord.round.takes_left -= 1;
        if coord.round.takes_left > 0 {
            return;
        }
        coord.rounds.took(&coord.knows, now);
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

//! The coordinator's I/O, modelled step by step after `coordinator/mod.rs` (listing rounds,
//! takes, the handover poll, `reader_ended` and `run`'s `select!`) around the real
//! `Coordinator`, which makes every decision: which rows to read, what is takeable, the passes
//! of a round, what a take's answer means and how a failed take backs off.

use super::*;

impl Sim {
    // ----- the coordinator: `Subscription::round`, `take`, `reader_ended`, `run` -----------

    pub(super) fn start_round(&mut self, i: usize) {
        let coord = &mut self.insts[i].coord;
        if coord.round.is_some() {
            return;
        }
        if self.chaos() && self.rng.random_bool(self.cfg.p_kinesis) {
            self.log(|| format!("i{i} ListShards failed"));
            self.insts[i].coord.round = Some(Round::default());
            self.round_over(i);
            return;
        }
        let listing = self.stream.listing();
        let reading = self.reading(i);
        let knows = &mut self.insts[i].coord.knows;
        knows.listed(&listing);
        let wanted = knows.wanted(&listing, &reading);
        self.insts[i].coord.round = Some(Round {
            listing,
            reading,
            wanted: wanted.clone(),
            ..Round::default()
        });
        if wanted.is_empty() {
            self.decide(i);
            return;
        }
        // `read_rows`: one `list`, and a read per row when it fails.
        self.send(i, 0, 0, OpKind::List, Cont::RoundList);
    }

    /// The shards instance `i` reads.
    pub(super) fn reading(&self, i: usize) -> HashSet<Arc<str>> {
        self.insts[i].running.keys().map(|&s| self.id(s)).collect()
    }

    /// A round's `list` answered: the rows it wants, or a read per row when it failed.
    pub(super) fn round_listed(&mut self, i: usize, res: Res) {
        let ids: Vec<Arc<str>> = (0..self.stream.shards.len()).map(|s| self.id(s)).collect();
        let Some(round) = self.insts[i].coord.round.as_mut() else {
            return;
        };
        if let Res::Rows(listed) = res {
            for shard in &round.wanted {
                round.rows.insert(Arc::clone(shard), None);
            }
            for (shard, row) in listed {
                round.rows.insert(Arc::clone(&ids[shard]), Some(row));
            }
            self.decide(i);
            return;
        }
        self.stats.list_fallbacks += 1;
        round.reads_left = round.wanted.len();
        let wanted = round.wanted.clone();
        for id in wanted {
            let shard = self.stream.ids[&id];
            self.send(i, 0, shard, OpKind::Read, Cont::Read { shard });
        }
    }

    pub(super) fn round_read(&mut self, i: usize, shard: usize, res: Res) {
        let id = self.id(shard);
        let Some(round) = self.insts[i].coord.round.as_mut() else {
            return;
        };
        match res {
            Res::Row(row) => {
                round.rows.insert(id, row);
            }
            _ => {
                round.unreadable.insert(id);
            }
        }
        round.reads_left -= 1;
        if round.reads_left == 0 {
            self.decide(i);
        }
    }

    pub(super) fn decide(&mut self, i: usize) {
        let inst = &mut self.insts[i];
        let Some(round) = inst.coord.round.as_mut() else {
            return;
        };
        let mut rows = std::mem::take(&mut round.rows);
        inst.coord.knows.round_rows(&round.listing, &mut rows);
        let listing = std::mem::take(&mut round.listing);
        round.passes = Some(RoundPasses::new(listing, rows, &round.unreadable));
        self.take_pass(i);
    }

    /// One pass of a round's takes (`round`'s loop, until a pass marks nothing).
    pub(super) fn take_pass(&mut self, i: usize) {
        let now = self.now;
        let now_ms = self.wall(i);
        let inst = &mut self.insts[i];
        let owner = Arc::clone(&inst.owner);
        let Some(round) = inst.coord.round.as_mut() else {
            return;
        };
        let passes = round.passes.as_mut().expect("the rows were read");
        let to_take = passes.next(&mut inst.coord.knows, &round.reading, &owner, now, now_ms);
        round.takes_left = to_take.len();
        if to_take.is_empty() {
            self.round_over(i);
            return;
        }
        for (info, purpose) in to_take {
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
        let Res::Granted(state) = res else {
            self.take_done(i);
            return;
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
        self.insts[i].coord.wake = true;
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

    pub(super) fn take_done(&mut self, i: usize) {
        let inst = &mut self.insts[i];
        let Some(round) = inst.coord.round.as_mut() else {
            return;
        };
        round.takes_left -= 1;
        if round.takes_left > 0 {
            return;
        }
        let passes = round.passes.as_mut().expect("the rows were read");
        if passes.passed(&inst.coord.knows) {
            // Shards were marked never to be read: their children are decided at once.
            self.take_pass(i);
        } else {
            self.round_over(i);
        }
    }

    /// A round ended: the first one starts `run`, every one goes back to its `select!`.
    pub(super) fn round_over(&mut self, i: usize) {
        let now = self.now;
        let timings = self.cfg.timings;
        let coord = &mut self.insts[i].coord;
        coord.round = None;
        if !coord.looping {
            coord.looping = true;
            coord.next_listing = now + timings.listing_interval();
            coord.next_poll = now + timings.handover_poll_interval();
        }
        self.coord_select(i);
    }

    /// `run` waits in its `select!`: the wake-up is due when a branch is ready.
    pub(super) fn coord_select(&mut self, i: usize) {
        let polling = !self.cfg.timings.handover_poll_interval().is_zero();
        let token = self.token();
        let jitter = self.jitter();
        let inst = &mut self.insts[i];
        let coord = &mut inst.coord;
        if !coord.looping || coord.exited || coord.round.is_some() || coord.poll.is_some() {
            return;
        }
        let at = if coord.cancelled || coord.wake {
            self.now + jitter
        } else if polling {
            coord.next_listing.min(coord.next_poll)
        } else {
            coord.next_listing
        };
        coord.timer = token;
        let inc = inst.inc;
        self.push(
            at.max(self.now),
            Ev::Round {
                inst: i,
                inc,
                token,
            },
        );
    }

    /// `run`'s `select!` wakes: tokio polls the branches from a random one on, and the first
    /// ready one wins.
    pub(super) fn coord_fire(&mut self, i: usize) {
        let timings = self.cfg.timings;
        let poll = timings.handover_poll_interval();
        let start = self.rng.random_range(0..4);
        let now = self.now;
        let coord = &mut self.insts[i].coord;
        let ready = [
            coord.cancelled,
            now >= coord.next_listing,
            coord.wake,
            !poll.is_zero() && now >= coord.next_poll,
        ];
        let Some(branch) = (0..4).map(|k| (start + k) % 4).find(|&b| ready[b]) else {
            self.coord_select(i);
            return;
        };
        match branch {
            0 => {
                coord.exited = true;
                self.maybe_exit(i);
            }
            3 => {
                coord.next_poll = now + poll;
                self.start_poll(i);
            }
            _ => {
                if branch == 2 {
                    coord.wake = false;
                }
                coord.next_listing = now + timings.listing_interval();
                self.start_round(i);
            }
        }
    }

    /// `takeable_between_listings`: one `list` while some shard of the last listing waits.
    pub(super) fn start_poll(&mut self, i: usize) {
        let reading = self.reading(i);
        let wanted = self.insts[i].coord.knows.poll_wanted(&reading);
        if wanted.is_empty() {
            self.coord_select(i);
            return;
        }
        self.stats.polls += 1;
        self.insts[i].coord.poll = Some(Poll { reading, wanted });
        self.send(i, 0, 0, OpKind::List, Cont::Poll);
    }

    /// The poll's `list` answered: a full round when some waiting shard may be taken now; a
    /// failed poll does nothing.
    pub(super) fn polled(&mut self, i: usize, res: Res) {
        let now = self.now;
        let now_ms = self.wall(i);
        let owner = Arc::clone(&self.insts[i].owner);
        let Some(poll) = self.insts[i].coord.poll.take() else {
            return;
        };
        let Res::Rows(listed_rows) = res else {
            self.coord_select(i);
            return;
        };
        let mut rows = Rows::new();
        for shard in &poll.wanted {
            rows.insert(Arc::clone(shard), None);
        }
        for (shard, row) in listed_rows {
            rows.insert(self.id(shard), Some(row));
        }
        let takeable =
            self.insts[i]
                .coord
                .knows
                .poll_finds_takeable(rows, &poll.reading, &owner, now, now_ms);
        if !takeable {
            self.coord_select(i);
            return;
        }
        self.stats.poll_rounds += 1;
        let listing = self.cfg.timings.listing_interval();
        self.insts[i].coord.next_listing = self.now + listing;
        self.start_round(i);
    }

    pub(super) fn reader_ended(&mut self, i: usize, shard: usize, finished: bool) {
        let id = self.id(shard);
        let inst = &mut self.insts[i];
        inst.running.remove(&shard);
        inst.coord.knows.reader_ended(&id, finished);
        inst.coord.wake = true;
        self.coord_select(i);
        self.maybe_exit(i);
    }
}

//! One held shard's session: the real `ShardMachine`, driven the way `reader::run`'s tasks
//! drive it (the read loop, the lease writer, `finish`).

use super::*;

impl Sim {
    // ----- one shard's reader: `reader::run` -----------------------------------------------

    pub(super) fn open_session(
        &mut self,
        i: usize,
        sid: u64,
        shard: usize,
        (start, resume): (&ShardStart, ShardStart),
        (sent, take_sent_ms): (Time, u64),
    ) {
        let start_idx = self.stream.index_of(shard, start);
        let iterator = self.stream.iterator_index(shard, start);
        if start.within().is_some() {
            self.stats.within_starts += 1;
        }
        self.reach(shard, start_idx);
        let timings = self.cfg.timings;
        // `take`: the handle's lease counts from the take's send by both clocks, and so does
        // the first renewal.
        // Kept alive by beats: the lease lasts as the chain that counted at the take's send
        // (the chain as it stands now, which began before the send if it is the same chain).
        let grant = self.insts[i].coord.beat.as_ref().and_then(BeatLease::grant);
        // Kept alive by beats, the lease counts from the take's own wall clock, as `start_reader`
        // hands it on (per row, the clock read again, as the schedules pinned were drawn).
        let sent_ms = if timings.is_kept_by_beat() {
            take_sent_ms
        } else {
            self.wall_at(i, sent)
        };
        let lease = if timings.is_kept_by_beat() {
            ShardLease::taken_by_beat(timings, sent, sent_ms, grant.as_ref())
        } else {
            ShardLease::taken(timings, sent, sent_ms)
        };
        // The ghost's deadline, by the same rules stated apart: the take's lease, or the chain's
        // end if the chain counted when the take was sent.
        let deadline = match grant {
            _ if !timings.is_kept_by_beat() => sent + timings.lease() - timings.holder_margin(),
            Some(grant) if grant.since <= sent && sent < grant.valid_until => grant.valid_until,
            _ => sent,
        };
        // Exactly once: the lease's nonce, drawn as the driver draws it at the take.
        let lease = if self.cfg.exactly_once {
            lease.committing(self.rng.random())
        } else {
            lease
        };
        let cancelled = self.insts[i].coord.cancelled;
        let reader_token = self.token();
        let settings = ReadSettings {
            batch_size: u32::try_from(self.cfg.batch).expect("a small batch"),
            pace: crate::shard::pace::Pace::service(self.cfg.poll),
            window: self.cfg.window,
            fan_out: self.cfg.fan_out,
        };
        let mut machine = ShardMachine::new(
            lease,
            settings,
            ShardIterator::service(iterator.to_string()),
            resume,
        );
        // `start_reader`: the listing the take came from shows the shard closed.
        if self.stream.shards[shard].info.closed {
            machine.shard_closed();
        }
        let session = Session {
            shard,
            // `take`: the first iterator at the start it decided; later ones without a record
            // handed out at `resume`.
            machine,
            // `lease_drive` below asks the machine first.
            lease_task: LeaseTask::InFlight,
            reader: ReaderTask::Waiting,
            reader_token,
            redeliver_token: 0,
            answer: None,
            blocked: None,
            cancelled,
            finish: FinishState::NotYet,
            settled_upto: None,
            start_idx,
            seek_floor: None,
            last_idx: None,
            handled_upto: None,
            // A holder stops at `sent + lease - holder_margin` by its own clock.
            deadline,
            take_sent: sent,
            lost: false,
            cover: None,
            subscription: None,
            commit_sent: None,
        };
        self.log(|| format!("i{i} reads shard {shard} from #{start_idx} as session {sid}"));
        let inst = &mut self.insts[i];
        inst.sessions.insert(sid, session);
        inst.running.insert(shard, sid);
        let jitter = self.jitter();
        self.push_reader(i, sid, self.now + jitter, reader_token);
        self.lease_drive(i, sid);
    }

    /// `ShardHandle::stop`: the lease ran out by this instance's clock; no more deliveries;
    /// wakes the lease's driver and the reader.
    pub(super) fn stop(&mut self, i: usize, sid: u64) {
        let Some(s) = self.session(i, sid) else {
            return;
        };
        s.machine.run_out();
        self.lease_wake(i, sid);
        self.reader_wake(i, sid, false);
    }

    /// The reader's cancellation token fires: the reader's `select!` wakes, and drops the call
    /// in flight (the lease's driver does not wait on it: it ends with the lease).
    pub(super) fn cancel(&mut self, i: usize, sid: u64) {
        let Some(s) = self.session(i, sid) else {
            return;
        };
        if s.cancelled {
            return;
        }
        s.cancelled = true;
        self.reader_wake(i, sid, true);
        self.maybe_end(i, sid);
    }

    /// `reader::run` joins the lease's driver and the reader; then `reader_ended`.
    pub(super) fn maybe_end(&mut self, i: usize, sid: u64) {
        let Some(s) = self.insts[i].sessions.get(&sid) else {
            return;
        };
        let FinishState::Done { finished } = s.finish else {
            return;
        };
        if s.lease_task != LeaseTask::Done || s.reader != ReaderTask::Done {
            return;
        }
        let shard = s.shard;
        self.insts[i].sessions.remove(&sid);
        self.sid_inst.remove(&sid);
        self.log(|| format!("i{i} session {sid} of shard {shard} ended (finished: {finished})"));
        self.reader_ended(i, shard, finished);
        self.joints_drive(i);
    }

    // `reader::write_lease`: it asks the session's `ShardLease` what to do, sends the write the
    // machine names, hands back its answer, sleeps until the machine's timer or a wake.

    pub(super) fn lease_drive(&mut self, i: usize, sid: u64) {
        let now = self.now;
        let wall = self.wall(i);
        let token = self.token();
        let inc = self.insts[i].inc;
        // The shard's seek epoch, which a commit folded now is judged by.
        let epoch = self.insts[i]
            .sessions
            .get(&sid)
            .and_then(|s| self.seek_epochs.get(&s.shard))
            .copied()
            .unwrap_or(0);
        let Some(s) = self.session(i, sid) else {
            return;
        };
        match s.machine.next_write(now, wall) {
            Next::Send(write) => {
                s.lease_task = LeaseTask::InFlight;
                let kind = match &write {
                    Write::Renew => OpKind::Renew,
                    // The lag written with it is for people to read; nothing decides on it.
                    Write::Checkpoint { checkpoint, .. } => {
                        OpKind::CheckpointRenew(Arc::from(checkpoint.as_str()))
                    }
                    Write::Final(checkpoint) => OpKind::Checkpoint(Arc::from(checkpoint.as_str())),
                    Write::Release => {
                        let stopping = s.finish == (FinishState::Closing { end: false });
                        OpKind::Release {
                            cover: if stopping { s.cover } else { None },
                            stopping,
                        }
                    }
                    Write::HandOver { to, checkpoint } => OpKind::HandOver {
                        to: Arc::clone(to),
                        checkpoint: checkpoint.as_deref().map(Arc::from),
                        cover: s.settled_upto,
                        last: s.handled_upto,
                        drained: s.machine.handed_over_drained(),
                    },
                    Write::Commit(commit) => {
                        let token: Arc<str> = Arc::from(commit.token.base());
                        // A resend keeps the first send's moment: the expiry is from its clock.
                        let (first_sent, epoch) = match &s.commit_sent {
                            Some((sent_token, at, folded)) if *sent_token == token => {
                                (*at, *folded)
                            }
                            _ => (now, epoch),
                        };
                        s.commit_sent = Some((Arc::clone(&token), first_sent, epoch));
                        OpKind::Commit {
                            checkpoint: Arc::from(commit.checkpoint.as_str()),
                            expiry_ms: commit.expiry_ms,
                            request: Arc::from(commit.token.request(commit.attempt)),
                            token,
                            units: Arc::clone(&commit.units),
                            first_sent,
                            prior: commit.prior.clone(),
                            epoch,
                        }
                    }
                };
                let shard = s.shard;
                self.send(
                    i,
                    sid,
                    shard,
                    kind,
                    Cont::Lease {
                        sid,
                        write,
                        sent: now,
                    },
                );
            }
            Next::Wait(until) => {
                s.lease_task = LeaseTask::Waiting(token);
                if let Some(at) = until {
                    self.push(
                        at.max(now),
                        Ev::Lease {
                            inst: i,
                            inc,
                            sid,
                            token,
                        },
                    );
                }
            }
            Next::Ended(ending) => {
                s.lease_task = LeaseTask::Done;
                if let FinishState::Closing { end } = s.finish {
                    // `ShardHandle::close` returns with the ending.
                    let finished = end && ending == (Ending::Closed { written: true });
                    s.finish = FinishState::Done { finished };
                }
                if matches!(ending, Ending::Lost(_)) {
                    // The lost lease ends the shard's other tasks (`halted` wakes the reader).
                    self.reader_wake(i, sid, false);
                    self.cancel(i, sid);
                }
                self.maybe_end(i, sid);
            }
        }
    }

    /// `handle.wake.notify_one()`: a waiting driver's `select!` wakes; a busy one asks the
    /// machine again anyway once its write answered.
    pub(super) fn lease_wake(&mut self, i: usize, sid: u64) {
        let token = self.token();
        let jitter = self.jitter();
        let inc = self.insts[i].inc;
        let Some(s) = self.session(i, sid) else {
            return;
        };
        if let LeaseTask::Waiting(_) = s.lease_task {
            s.lease_task = LeaseTask::Woken(token);
            self.push(
                self.now + jitter,
                Ev::Lease {
                    inst: i,
                    inc,
                    sid,
                    token,
                },
            );
        }
    }

    pub(super) fn lease_woken(&mut self, i: usize, sid: u64, token: u64) {
        let Some(s) = self.session(i, sid) else {
            return;
        };
        if matches!(s.lease_task, LeaseTask::Waiting(t) | LeaseTask::Woken(t) if t == token) {
            self.lease_drive(i, sid);
        }
    }

    /// The store answered a write of the lease's driver, sent at `sent`.
    pub(super) fn lease_answered(
        &mut self,
        i: usize,
        sid: u64,
        write: &Write,
        sent: Time,
        res: &Res,
    ) {
        let timings = self.cfg.timings;
        let now = self.now;
        let Some(s) = self.insts[i].sessions.get_mut(&sid) else {
            return;
        };
        let answer = match res {
            Res::Ok | Res::Row(_) => Answer::Done,
            Res::Fenced => Answer::Refused,
            Res::UserRefused(unit) => Answer::UserRefused(*unit),
            _ => Answer::Failed,
        };
        // A commit's grant counts from its first send, whose clock its expiry is from.
        let sent = match (write, &s.commit_sent) {
            (Write::Commit(_), Some((_, first_sent, _))) => *first_sent,
            _ => sent,
        };
        if let (Write::Commit(commit), Answer::Done) = (write, answer) {
            // What this session's commits made durable: what a release covers. A commit folded
            // before a seek back, landing after it, covers nothing of what follows the seek:
            // the seek let go of what was acked before it (found by a fan-out schedule, seed
            // 1796492726499192165: its release was held to the record the old commit named).
            let shard = s.shard;
            let epoch_now = self.seek_epochs.get(&shard).copied().unwrap_or(0);
            if s.commit_sent
                .as_ref()
                .is_none_or(|(_, _, epoch)| *epoch == epoch_now)
            {
                s.settled_upto = self
                    .stream
                    .index_through(shard, Mark::of(Some(&commit.checkpoint)));
            }
            self.stats.commits += 1;
            self.last_progress = now;
        }
        if matches!(
            write,
            Write::Renew | Write::Checkpoint { .. } | Write::Commit(_)
        ) {
            match answer {
                // The ghost: the grant this session heard of (none, for a lease kept alive by
                // beats: the beat grants it).
                Answer::Done if !timings.is_kept_by_beat() => {
                    s.deadline = s
                        .deadline
                        .max(sent + timings.lease() - timings.holder_margin());
                }
                Answer::Done => {}
                Answer::Refused => {
                    s.lost = true;
                    if *write == Write::Renew {
                        self.stats.refused_renewals += 1;
                    }
                }
                _ => {}
            }
        }
        let held = !s.machine.is_lost();
        let finishing = !s.machine.finish_abandoned();
        s.machine.write_answered(now, answer);
        if let Res::Row(Some(row)) = res
            && held
            && s.machine.row_answered(row)
            && s.machine.ending() == Some(Ending::Lost(Lost::Refused))
        {
            // A row moved by a commit of its own it took for refused: lost, as a refusal.
            s.lost = true;
            self.stats.late_commit_losses += 1;
        }
        if finishing && s.machine.finish_abandoned() {
            self.stats.finishes_abandoned += 1;
        }
        if held && s.machine.ending() == Some(Ending::Lost(Lost::RanOut)) {
            self.stats.lapsed_by_clock += 1;
        }
        self.commit_news_heard(i, sid);
        // `write_lease`: the row a renewing write answered shows a handoff asked of it.
        let asked = match res {
            Res::Row(Some(row)) => {
                let owner = Arc::clone(&self.insts[i].owner);
                let wall = self.wall(i);
                self.insts[i]
                    .sessions
                    .get_mut(&sid)
                    .is_some_and(|s| s.machine.row_seen(row, &owner, now, wall))
            }
            _ => false,
        };
        if asked {
            self.log(|| format!("i{i} session {sid} is asked for a handoff"));
            self.reader_wake(i, sid, false);
        }
        self.lease_drive(i, sid);
        // The shard's write slot is free again, or its settled prefix moved on: a unit that
        // spans shards may commit now.
        self.joints_drive(i);
    }

    /// Exactly once, what the commits of session `sid` came to since the last answer: a unit
    /// refused by its own condition comes back on its session, and a reader waiting for room
    /// is woken.
    pub(super) fn commit_news_heard(&mut self, i: usize, sid: u64) {
        let Some(s) = self.session(i, sid) else {
            return;
        };
        let refused = s
            .machine
            .take_commit_news()
            .iter()
            .any(|news| matches!(news, CommitNews::Refused(_)));
        let wake_reader = s.machine.take_reader_wake();
        if refused {
            self.stats.user_refusals += 1;
            self.redeliver_drive(i, sid);
        }
        if wake_reader {
            self.stats.commit_reader_wakes += 1;
            self.reader_wake(i, sid, false);
        }
    }

    // `Reader::read`: it asks the session's machine what to do, makes the Kinesis call it names
    // (answered by the simulated stream a moment later), hands out the record it names (waiting
    // for room in the channel), or sleeps until the machine's timer or a wake.

    /// Schedules the reader's wake-up at `at` under `token`.
    fn push_reader(&mut self, i: usize, sid: u64, at: Time, token: u64) {
        let inc = self.insts[i].inc;
        self.push(
            at,
            Ev::Reader {
                inst: i,
                inc,
                sid,
                token,
            },
        );
    }

    /// `handle.read_wake.notify_one()` (or the cancel, `cancel`): a waiting reader's `select!`
    /// wakes; a blocked one's too on the cancel, and a calling one drops its call.
    pub(super) fn reader_wake(&mut self, i: usize, sid: u64, cancel: bool) {
        let token = self.token();
        let jitter = self.jitter();
        let Some(s) = self.session(i, sid) else {
            return;
        };
        let wakes = match s.reader {
            ReaderTask::Waiting => true,
            ReaderTask::Calling | ReaderTask::Blocked => cancel,
            ReaderTask::Done => false,
        };
        if wakes {
            s.reader_token = token;
            self.push_reader(i, sid, self.now + jitter, token);
        }
    }

    /// The reader's pending wake-up fired: its timer, a wake, the answer of its call, or room in
    /// the channel.
    pub(super) fn reader_woken(&mut self, i: usize, sid: u64) {
        let capacity = self.cfg.channel;
        let cancelled = self.session(i, sid).is_some_and(|s| s.cancelled);
        let coin: u64 = self.rng.random_range(0..=u64::MAX);
        let now = self.now;
        let inst = &mut self.insts[i];
        let Some(s) = inst.sessions.get_mut(&sid) else {
            return;
        };
        match s.reader {
            ReaderTask::Done => return,
            ReaderTask::Calling => {
                let answer = s.answer.take().expect("a call in flight has its answer");
                if cancelled {
                    // The cancel won the `select!`: the call is dropped.
                    s.machine.cancel_reading();
                } else {
                    s.machine.read_answered(now, answer, coin);
                }
            }
            ReaderTask::Blocked => {
                if cancelled {
                    // Dropped unsent: the message's drop hands it back (`KinesisMessage`'s
                    // `Drop`), where it stays unsettled: the redelivery task ends with the cancel.
                    let msg = s
                        .blocked
                        .take()
                        .expect("a blocked reader holds its delivery");
                    let record = self.stream.record(msg.shard, msg.idx);
                    s.machine
                        .hand_back(now, record, msg.ticket, 1, Duration::ZERO, false);
                    s.machine.cancel_reading();
                } else if inst.channel.len() < capacity {
                    let msg = s
                        .blocked
                        .take()
                        .expect("a blocked reader holds its delivery");
                    inst.channel.push_back(msg);
                    self.dispatch_soon(i);
                } else {
                    return;
                }
            }
            ReaderTask::Waiting => {
                if cancelled {
                    s.machine.cancel_reading();
                }
            }
        }
        self.reader_drive(i, sid);
    }

    /// Executes what the machine asks until it waits, calls, blocks or finishes.
    pub(super) fn reader_drive(&mut self, i: usize, sid: u64) {
        loop {
            let now = self.now;
            let wall = self.wall(i);
            let capacity = self.cfg.channel;
            // As the live reader, records go out together (`next_reads`) while the channel has
            // room (here counted in records, live in sends of up to 64), and one alone waits
            // for room when it has none.
            let room = capacity.saturating_sub(self.insts[i].channel.len()).max(1);
            let token = self.token();
            let Some(s) = self.insts[i].sessions.get_mut(&sid) else {
                return;
            };
            let was_halted = s.machine.is_halted();
            let mut more = Vec::new();
            let step = s.machine.next_reads(now, || wall, (room, &mut more));
            match step {
                ReadStep::Call(call) => {
                    let shard = s.shard;
                    if call != Call::NextEvent {
                        // Any other call drops the open subscription (`Reader::call`).
                        s.subscription = None;
                    }
                    let answer = self.kinesis_answer(i, sid, shard, &call);
                    // Events at the tip are pushed about once a second; the rest answer at once.
                    let pushed = matches!(
                        &answer,
                        Fetch::Event {
                            millis_behind: Some(0),
                            ..
                        }
                    );
                    let latency = if pushed {
                        ms(self.rng.random_range(200..=1_000))
                    } else {
                        ms(self.rng.random_range(1..=30))
                    };
                    let Some(s) = self.session(i, sid) else {
                        return;
                    };
                    s.answer = Some(answer);
                    s.reader = ReaderTask::Calling;
                    s.reader_token = token;
                    self.push_reader(i, sid, now + latency, token);
                    return;
                }
                ReadStep::Deliver(record, ticket) => {
                    let shard = s.shard;
                    for (record, ticket) in
                        crate::shard::handed_in_order(record, ticket, more.into_iter())
                    {
                        let msg = Msg {
                            sid,
                            shard,
                            idx: record.idx,
                            ticket,
                            redelivery: false,
                        };
                        self.handover_step(shard, sid, Step::Read);
                        let inst = &mut self.insts[i];
                        let Some(s) = inst.sessions.get_mut(&sid) else {
                            return;
                        };
                        if inst.channel.len() >= capacity {
                            // Only a record handed out alone finds no room (`room` above), so
                            // nothing of `more` is left behind.
                            s.blocked = Some(msg);
                            s.reader = ReaderTask::Blocked;
                            return;
                        }
                        inst.channel.push_back(msg);
                        self.dispatch_soon(i);
                    }
                }
                ReadStep::Wait(until) => {
                    if until.is_none() && s.machine.is_window_full() {
                        self.stats.window_waits += 1;
                    }
                    s.reader = ReaderTask::Waiting;
                    s.reader_token = token;
                    if let Some(at) = until {
                        self.push_reader(i, sid, at.max(now), token);
                    }
                    return;
                }
                ReadStep::Finish(stop) => {
                    s.reader = ReaderTask::Done;
                    if stop == Stop::Lost && !was_halted {
                        self.stats.lapsed_by_clock += 1;
                    }
                    self.reader_finish(i, sid, stop);
                    return;
                }
            }
        }
    }

    /// The simulated stream's answer to `call` of session `sid` on `shard`: faults during the
    /// chaos phase, an expired iterator now and then, `ResourceNotFoundException` once retention
    /// trimmed the shard. An iterator is the index of the record it reads next.
    pub(super) fn kinesis_answer(
        &mut self,
        i: usize,
        sid: u64,
        shard: usize,
        call: &Call,
    ) -> Fetch<SimRecord> {
        let chaos = self.chaos();
        if self.stream.shards[shard].trimmed {
            self.stats.gone += 1;
            return Fetch::Gone;
        }
        match call {
            Call::GetRecords(iterator) => {
                if chaos && self.rng.random_bool(self.cfg.p_kinesis) {
                    return Fetch::Failed;
                }
                if self.rng.random_bool(self.cfg.p_expire) {
                    self.stats.expired += 1;
                    return Fetch::Expired;
                }
                let from: usize = iterator.to_string().parse().expect("a simulated iterator");
                let len = self.stream.shards[shard].records.len();
                if self.answers_empty(from, len) {
                    // Kinesis may answer no record with records further on: the same place.
                    return Fetch::Records {
                        records: Vec::new(),
                        next: Some(ShardIterator::service(from.to_string())),
                        millis_behind: Some(1_000),
                    };
                }
                let sim = &self.stream.shards[shard];
                let end = self.stream.batch_end(shard, from, self.cfg.batch);
                let records = (from..end)
                    .map(|idx| self.stream.record(shard, idx))
                    .collect();
                Fetch::Records {
                    records,
                    next: (!(sim.info.closed && end == len))
                        .then(|| ShardIterator::service(end.to_string())),
                    millis_behind: Some(if end < len { 1_000 } else { 0 }),
                }
            }
            Call::Subscribe(start) => {
                // A failure, or `ResourceInUseException` (the driver reports both as failed):
                // a previous holder still subscribed, or a subscription a moment ago.
                if (chaos && self.rng.random_bool(self.cfg.p_kinesis)) || self.rng.random_bool(0.05)
                {
                    return Fetch::Failed;
                }
                let idx = self.stream.iterator_index(shard, start);
                let first = self.stream.index_of(shard, start);
                let events = self.rng.random_range(0..=20);
                let Some(s) = self.session(i, sid) else {
                    return Fetch::Failed;
                };
                if !matches!(start, ShardStart::After(_)) {
                    s.start_idx = first;
                }
                s.subscription = Some((idx, events));
                Fetch::Subscribed
            }
            Call::NextEvent => {
                let failed = chaos && self.rng.random_bool(self.cfg.p_kinesis);
                let Some(s) = self.session(i, sid) else {
                    return Fetch::Failed;
                };
                let Some((from, events)) = s.subscription.take() else {
                    return Fetch::SubscriptionEnded;
                };
                if failed {
                    return Fetch::Failed;
                }
                if events == 0 {
                    return Fetch::SubscriptionEnded;
                }
                let len = self.stream.shards[shard].records.len();
                if self.answers_empty(from, len) {
                    // An event with no record (the service sends one every few seconds): its
                    // continuation is the last record before where the subscription stands.
                    let continuation = from
                        .checked_sub(1)
                        .map(|last| self.stream.shards[shard].records[last].to_string());
                    if let Some(s) = self.session(i, sid) {
                        s.subscription = Some((from, events - 1));
                    }
                    return Fetch::Event {
                        records: Vec::new(),
                        continuation,
                        millis_behind: Some(1_000),
                        ended: false,
                    };
                }
                let sim = &self.stream.shards[shard];
                let end = self.stream.batch_end(shard, from, self.cfg.batch);
                let ended = self.cfg.fan_out_children && sim.info.closed && end == len;
                let records: Vec<SimRecord> = (from..end)
                    .map(|idx| self.stream.record(shard, idx))
                    .collect();
                // The continuation: the last record the event reached, read or not.
                let continuation = end
                    .checked_sub(1)
                    .map(|last| self.stream.shards[shard].records[last].to_string());
                if let Some(s) = self.session(i, sid) {
                    s.subscription = (!ended).then_some((end, events - 1));
                }
                Fetch::Event {
                    records,
                    continuation,
                    millis_behind: Some(if end < len { 1_000 } else { 0 }),
                    ended,
                }
            }
            Call::GetIterator(start) => {
                if chaos && self.rng.random_bool(self.cfg.p_iterator_fails) {
                    return Fetch::IteratorFailed;
                }
                let idx = self.stream.iterator_index(shard, start);
                let first = self.stream.index_of(shard, start);
                if !matches!(start, ShardStart::After(_))
                    && let Some(s) = self.session(i, sid)
                {
                    // The ghost: where the session starts again, past the user records a start
                    // inside an aggregate drops.
                    s.start_idx = first;
                }
                Fetch::Iterator(ShardIterator::service(idx.to_string()))
            }
        }
    }

    /// Whether a call or an event served from record `from` of a shard holding `len` answers no
    /// record though records follow (`Config::p_empty`).
    fn answers_empty(&mut self, from: usize, len: usize) -> bool {
        let empty = self.cfg.p_empty > 0.0 && from < len && self.rng.random_bool(self.cfg.p_empty);
        if empty {
            self.stats.empty_answers += 1;
        }
        empty
    }

    /// `Reader::finish`: hands the shard back as the stop says.
    pub(super) fn reader_finish(&mut self, i: usize, sid: u64, stop: Stop) {
        let Some(s) = self.session(i, sid) else {
            return;
        };
        let shard = s.shard;
        if stop == Stop::Unreadable {
            self.stats.unreadable += 1;
        }
        let id = self.id(shard);
        let coin: u64 = self.rng.random_range(0..=u64::MAX);
        let now = self.now;
        self.insts[i]
            .coord
            .knows
            .reader_stopped(&id, stop, now, coin);
        match stop.close() {
            None => {
                let Some(s) = self.session(i, sid) else {
                    return;
                };
                s.finish = FinishState::Done { finished: false };
                self.cancel(i, sid);
                self.maybe_end(i, sid);
            }
            Some(how) => self.close(i, sid, how),
        }
    }

    /// Both ends of `finish`: cancel, then `ShardHandle::close`, whose writes the lease's
    /// driver sends after the one in flight.
    pub(super) fn close(&mut self, i: usize, sid: u64, how: Close) {
        let Some(s) = self.session(i, sid) else {
            return;
        };
        s.finish = FinishState::Closing {
            end: how == Close::Finished,
        };
        self.cancel(i, sid);
        let Some(s) = self.session(i, sid) else {
            return;
        };
        s.machine.close(how);
        if s.machine.ending().is_some() {
            // Lost before the close: nothing is written.
            s.finish = FinishState::Done { finished: false };
            self.maybe_end(i, sid);
            return;
        }
        self.lease_wake(i, sid);
        // A closing shard sends no part of a joint commit: its units go back everywhere.
        self.joints_drive(i);
    }
}

//! The lease store: requests in flight, late and lost, applied under the real conditions, and
//! the fence each store object keeps.

use super::*;

impl Sim {
    // ----- the store ------------------------------------------------------------------------

    /// Sends a store call: it lands (or not) and answers (or times out) later.
    pub(super) fn send(&mut self, i: usize, sid: u64, shard: usize, kind: OpKind, cont: Cont) {
        self.count_call(&kind);
        let mut op = Op {
            inst: i,
            inc: self.insts[i].inc,
            sid,
            shard,
            owner: Arc::clone(&self.insts[i].owner),
            kind,
            wall_ms: self.wall(i),
            sent: self.now,
            seen: None,
            uncertain: false,
            retried: false,
            resend: false,
            pair: None,
            row_known: false,
        };
        // `DynamoLeaseStore::existing`: a take of a row its store object saw exist is
        // conditioned on the row still existing.
        op.row_known =
            matches!(op.kind, OpKind::Acquire) && self.known_rows.contains(&(i, op.inc, shard));
        if self.fenced(&op) && !op.kind.is_take() {
            let fence = self.fence(i, op.inc, shard);
            op.seen = fence.counter;
            op.uncertain = fence.uncertain;
        }
        self.transmit(op, cont);
    }

    /// Whether the call is a write whose answer settles its store object's fence: a take, or a
    /// held write.
    pub(super) fn fenced(&self, op: &Op) -> bool {
        op.kind.is_take() || self.held_write_of(op).is_some()
    }

    pub(super) fn fence(&self, i: usize, inc: u32, shard: usize) -> Fence {
        self.fences
            .get(&(i, inc, shard))
            .copied()
            .unwrap_or_default()
    }

    /// `settle_fence` and the retry of `held_update` in `lease/dynamo/writes.rs`, when a write's
    /// answer reaches its caller, by the same rules (`rules::Fence`): records the counter a
    /// successful write left, marks the row uncertain after a failed call, keeps the recorded
    /// counter after a refusal. A held write refused by a row this owner still holds while one
    /// of this store object's writes was uncertain adopts the row's counter and is sent once
    /// more (its answer then goes to the caller): `None`.
    pub(super) fn settle_fence(
        &mut self,
        i: usize,
        note: FenceNote,
        res: Res,
        cont: Cont,
    ) -> Option<(Cont, Res)> {
        let FenceNote { op, row } = note;
        let key = (i, op.inc, op.shard);
        let current = self.fence(i, op.inc, op.shard);
        let settled = match (&res, &row) {
            (Res::Failed | Res::Throttled, _) => current.answered(rules::Answer::Failed),
            (Res::Fenced, _) => current.answered(rules::Answer::Refused),
            (_, Some(row)) => current.answered(rules::Answer::Written {
                counter: row.counter,
            }),
            (_, None) => Fence::default(),
        };
        let refusal = match (&res, &row, self.held_write_of(&op)) {
            (Res::Fenced, Some(row), Some(write)) => {
                let sent = Fence {
                    counter: op.seen,
                    uncertain: op.uncertain,
                };
                let effect = write.effect(&op.owner);
                sent.refused_by(row, &op.owner, Some(&effect), op.retried)
            }
            _ => rules::Refusal::Lost,
        };
        if let rules::Refusal::Landed(fence) = refusal {
            // `held_update`: the refusal shows this very write landed; it succeeded.
            if op.resend {
                self.stats.resends_recognised += 1;
            }
            if matches!(op.kind, OpKind::Commit { .. }) {
                // The SDK's resend, or the lease's of a commit whose answer was lost.
                self.stats.commit_resends_recognised += 1;
            }
            self.fences.insert(key, fence);
            return Some((cont, Res::Ok));
        }
        if op.resend
            && matches!(res, Res::Fenced)
            && op
                .pair
                .is_some_and(|pair| self.landed_pairs.contains(&pair))
        {
            self.stats.resends_lost += 1;
        }
        self.fences.insert(key, settled);
        if let rules::Refusal::Retry(fence) = refusal {
            self.stats.fence_retries += 1;
            self.fences.insert(key, fence);
            let op = Op {
                seen: fence.counter,
                uncertain: false,
                retried: true,
                ..op
            };
            self.log(|| {
                format!(
                    "i{i} adopts counter {:?} and retries {:?}",
                    fence.counter, op.kind
                )
            });
            self.transmit(op, cont);
            return None;
        }
        Some((cont, res))
    }

    /// The held write `op` makes, as the store's rules know it; `None` for any other call.
    pub(super) fn held_write_of<'a>(&self, op: &'a Op) -> Option<rules::Held<'a>> {
        let lease_ms = millis(self.cfg.timings.row_lease());
        Some(match &op.kind {
            OpKind::Renew => rules::Held::renew(op.wall_ms, lease_ms),
            OpKind::Checkpoint(checkpoint) => rules::Held::Checkpoint {
                checkpoint,
                behind_ms: None,
                expiry_ms: None,
            },
            OpKind::CheckpointRenew(checkpoint) => rules::Held::Checkpoint {
                checkpoint,
                behind_ms: None,
                expiry_ms: Some(op.wall_ms + lease_ms),
            },
            OpKind::Release { .. } => rules::Held::Release,
            OpKind::HandOver { to, checkpoint, .. } => {
                rules::Held::hand_over(to, checkpoint.as_deref(), op.wall_ms, lease_ms)
            }
            OpKind::Commit {
                checkpoint,
                expiry_ms,
                token,
                prior,
                ..
            } => rules::Held::Commit {
                checkpoint,
                behind_ms: None,
                expiry_ms: *expiry_ms,
                token,
                prior: prior.as_deref(),
            },
            OpKind::Read
            | OpKind::List { .. }
            | OpKind::Acquire
            | OpKind::TakeOver { .. }
            | OpKind::Notice { .. }
            | OpKind::NoticeHead
            | OpKind::Beat { .. }
            | OpKind::Leave { .. }
            | OpKind::Announce { .. }
            | OpKind::Withdraw
            | OpKind::AskHandoff { .. }
            | OpKind::MarkAsked { .. }
            | OpKind::Delete { .. }
            | OpKind::Joint { .. } => return None,
        })
    }

    /// Sends a built call: a retry keeps the values (expiry, wall clock) of the first.
    pub(super) fn transmit(&mut self, op: Op, cont: Cont) {
        let i = op.inst;
        let note = |op: &Op| {
            self.fenced(op).then(|| {
                Box::new(FenceNote {
                    op: op.clone(),
                    row: None,
                })
            })
        };
        let fence = note(&op);
        let chaos = self.chaos();
        let timeout = self.cfg.timeout;
        let timeout_ms = millis(timeout);
        let quick = |rng: &mut StdRng| ms(rng.random_range(1..=25));
        // Refused without being applied: throttled (at once), or failed (at once, or never
        // answered).
        let refused = if self.throttles(&op) {
            Some((Res::Throttled, quick(&mut self.rng)))
        } else if self.now < self.insts[i].partitioned_until
            || (chaos && self.rng.random_bool(self.cfg.p_fail))
        {
            self.stats.store_failures += 1;
            let after = if self.rng.random_bool(0.5) {
                quick(&mut self.rng)
            } else {
                timeout
            };
            Some((Res::Failed, after))
        } else {
            None
        };
        if let Some((res, after)) = refused {
            self.push(
                self.now + after,
                Ev::Reply {
                    inst: i,
                    inc: op.inc,
                    cont,
                    res,
                    fence,
                },
            );
            return;
        }
        let (there, back) = if chaos && self.rng.random_bool(self.cfg.p_slow) {
            (
                ms(self.rng.random_range(1..timeout_ms)),
                ms(self.rng.random_range(1..timeout_ms)),
            )
        } else {
            (quick(&mut self.rng), quick(&mut self.rng))
        };
        let held = matches!(
            op.kind,
            OpKind::Renew
                | OpKind::Checkpoint(_)
                | OpKind::CheckpointRenew(_)
                | OpKind::Release { .. }
                | OpKind::HandOver { .. }
        );
        if held && fence.is_some() && chaos && self.rng.random_bool(self.cfg.p_resend) {
            // The first attempt lands and its answer is lost; the SDK sends the same request
            // again, which the counter the first attempt moved refuses.
            let pair = Some(self.token());
            let resend = Op {
                resend: true,
                pair,
                ..op.clone()
            };
            let op = Op { pair, ..op };
            self.push(self.now + there, Ev::Apply { op, reply: None });
            self.push(
                self.now + there + ms(1),
                Ev::Apply {
                    op: resend,
                    reply: Some((back, cont)),
                },
            );
            return;
        }
        let lost_answer = chaos && self.rng.random_bool(self.cfg.p_timeout);
        if lost_answer || there + back >= timeout {
            // Timed out: the caller cannot tell whether the write landed.
            self.stats.store_failures += 1;
            let lands = if lost_answer {
                self.rng.random_bool(0.5)
            } else {
                there < timeout
            };
            let inc = op.inc;
            if lands {
                let late = self.cfg.late_landing && (self.cfg.late_takes || !op.kind.is_take());
                let land = if lost_answer && late {
                    ms(self.rng.random_range(1..timeout_ms * 3))
                } else {
                    there.min(timeout - ms(1))
                };
                if land >= timeout {
                    self.stats.late_landings += 1;
                }
                self.push(self.now + land, Ev::Apply { op, reply: None });
            }
            self.push(
                self.now + timeout,
                Ev::Reply {
                    inst: i,
                    inc,
                    cont,
                    res: Res::Failed,
                    fence,
                },
            );
            return;
        }
        self.push(
            self.now + there,
            Ev::Apply {
                op,
                reply: Some((back, cont)),
            },
        );
    }

    /// Counts a write sent now in its second, and answers whether the table refuses it for want
    /// of capacity (`Config::table_write_rate`): not applied, answered at once.
    fn throttles(&mut self, op: &Op) -> bool {
        if matches!(
            op.kind,
            OpKind::Read | OpKind::List { .. } | OpKind::Notice { .. } | OpKind::NoticeHead
        ) {
            return false;
        }
        let second = self.now.as_secs();
        if self.write_second.0 != second {
            self.write_second = (second, 0);
        }
        let sent = self.write_second.1;
        // A fault of the chaos phase: the quiet phase shows the fleet recovers.
        let throttled = self.chaos() && self.cfg.table_write_rate.is_some_and(|rate| sent >= rate);
        if throttled {
            self.throttled_at = Some(self.now);
            self.stats.throttled_writes += 1;
            if op.kind.is_take() {
                self.stats.throttled_takes += 1;
            }
            return true;
        }
        self.write_second.1 = sent + 1;
        self.stats.peak_writes_per_second = self.stats.peak_writes_per_second.max(sent + 1);
        false
    }

    /// The store's conditional writes, as `MemoryLeaseStore` and `DynamoLeaseStore` make them,
    /// with the expiry judged by the caller's clock.
    /// Applies `op` to the store; `unanswered`: its caller gave up on it (timed out) and hears
    /// nothing of it.
    pub(super) fn apply(&mut self, op: &Op, unanswered: bool) -> Res {
        let lease_ms = millis(self.cfg.timings.row_lease());
        let shard = op.shard;
        let malformed = match op.kind {
            // `DynamoLeaseStore::list`: a bad row of the listed stream fails the listing.
            OpKind::List { .. } => self.rows.iter().any(|row| row.malformed),
            OpKind::Notice { .. }
            | OpKind::NoticeHead
            | OpKind::Beat { .. }
            | OpKind::Leave { .. }
            | OpKind::Announce { .. }
            | OpKind::MarkAsked { .. } => false,
            _ => self.rows[shard].malformed,
        };
        if malformed {
            // Not applied: the store cannot read the row, nor its condition check hold.
            return Res::Failed;
        }
        match &op.kind {
            OpKind::Joint { .. } => self.apply_joint(op),
            OpKind::Delete { counter } => {
                let row = &mut self.rows[shard];
                let deletable = row.state.as_ref().is_some_and(|state| {
                    state.counter == *counter && state.is_expired_at(op.wall_ms)
                });
                if !deletable {
                    return Res::Fenced;
                }
                row.deleted = row.state.take();
                row.holder = None;
                self.stats.deletions += 1;
                self.log(|| format!("shard {shard}'s row deleted"));
                Res::Ok
            }
            OpKind::Notice { eventual: false } => Res::Notice(self.notice.clone()),
            OpKind::Notice { eventual: true } => {
                let notice = self.notice_behind();
                self.stats.reads_behind += 1;
                self.stats.reads_missed += u64::from(notice != self.notice);
                Res::Notice(notice)
            }
            OpKind::NoticeHead => {
                let notice = self.notice_behind();
                self.stats.reads_behind += 1;
                self.stats.reads_missed += u64::from(
                    (notice.counter, &notice.asks, notice.layout)
                        != (self.notice.counter, &self.notice.asks, self.notice.layout),
                );
                Res::Notice(Notice {
                    counter: notice.counter,
                    asks: notice.asks,
                    layout: notice.layout,
                    ..Notice::default()
                })
            }
            OpKind::Beat { until_ms, forget } => {
                self.notice.forget_gone(&op.owner, forget, op.wall_ms);
                // As the crate's stores: a beat never moves back.
                let beat = self
                    .notice
                    .beats
                    .entry(op.owner.to_string())
                    .or_insert(*until_ms);
                *beat = (*beat).max(*until_ms);
                Res::Ok
            }
            OpKind::Announce { record, forget } => {
                self.notice.forget_gone(&op.owner, forget, op.wall_ms);
                self.notice
                    .incarnations
                    .insert(op.owner.to_string(), record.clone());
                Res::Ok
            }
            OpKind::Leave { until_ms } => {
                // `leave` removes the beat whatever its end.
                self.notice
                    .leave_beat(&op.owner, until_ms.unwrap_or(u64::MAX));
                Res::Ok
            }
            OpKind::MarkAsked { holders } => {
                for holder in holders {
                    self.notice.mark_asked(holder);
                }
                Res::Ok
            }
            OpKind::Withdraw => {
                if let Some(state) = self.rows[shard].state.as_mut()
                    && state
                        .handoff
                        .as_ref()
                        .is_some_and(|asked| *asked.to == *op.owner)
                {
                    state.handoff = None;
                }
                Res::Ok
            }
            OpKind::AskHandoff { holder, counter } => {
                let Some(state) = self.rows[shard].state.as_mut() else {
                    return Res::Fenced;
                };
                let free = state
                    .handoff_at(op.wall_ms)
                    .is_none_or(|standing| standing.to == *op.owner);
                if !(state.is_held_by(holder) && state.counter == *counter && free) {
                    return Res::Fenced;
                }
                state.handoff = Some(crate::Handoff {
                    to: op.owner.to_string(),
                    asked_ms: op.wall_ms,
                });
                self.stats.asks += 1;
                self.log(|| format!("{} asks {holder} for shard {shard}", op.owner));
                Res::Ok
            }
            OpKind::Read => Res::Row(self.rows[shard].state.clone()),
            OpKind::List { eventual: false } => {
                self.last_full_read = self.now;
                Res::Rows(
                    self.rows
                        .iter()
                        .enumerate()
                        .filter_map(|(shard, row)| row.state.clone().map(|state| (shard, state)))
                        .collect(),
                )
            }
            OpKind::List { eventual: true } => {
                self.last_full_read = self.now;
                let rows: Vec<_> = (0..self.rows.len())
                    .filter_map(|shard| self.row_behind(shard).map(|state| (shard, state)))
                    .collect();
                self.stats.reads_behind += 1;
                let missed = rows.len()
                    != self.rows.iter().filter(|row| row.state.is_some()).count()
                    || rows
                        .iter()
                        .any(|(shard, state)| self.rows[*shard].state.as_ref() != Some(state));
                self.stats.reads_missed += u64::from(missed);
                Res::Rows(rows)
            }
            OpKind::Acquire | OpKind::TakeOver { .. } => {
                // `acquire` (the trait's default `acquire_from` checkpoints the start after
                // it), or `take_over`, which records the start in the same write.
                let (over, start) = match &op.kind {
                    OpKind::TakeOver {
                        holder,
                        counter,
                        start,
                    } => (
                        Some(rules::Over {
                            holder,
                            counter: *counter,
                        }),
                        Some(&**start),
                    ),
                    _ => (None, None),
                };
                let take = rules::Take {
                    owner: &op.owner,
                    now_ms: op.wall_ms,
                    lease_ms,
                    start,
                    seen_row: op.row_known,
                    over,
                };
                if self.rows[shard].state.is_none() && !rules::take_accepted(None, &take) {
                    // Its store object saw the row: deleted since, and not created again.
                    return Res::Deleted;
                }
                if self.rows[shard].state.is_none() && self.rows[shard].deleted.is_some() {
                    // Its children moved on (or it left the stream): nothing of it is read again.
                    self.fail(format!(
                        "hygiene: shard {shard}'s row was deleted ({:?}), and {} took the shard again",
                        self.rows[shard].deleted, op.owner
                    ));
                    return Res::Fenced;
                }
                let row = &mut self.rows[shard];
                if !rules::take_accepted(row.state.as_ref(), &take) {
                    return Res::Fenced;
                }
                let state = row.state.get_or_insert_with(LeaseState::default);
                let previous = row.holder.filter(|&prev| prev != op.sid);
                let stolen = state.owner.is_some() && !state.is_held_by(&op.owner);
                // A take of this owner's own row whose caller gave up on it, landing after a later
                // take of the same instance (its wall clock stepped back in between, so the
                // condition let it through): no reader stands behind it, the expiry did not move
                // back, and the row stays this owner's. The live session keeps the row; its next
                // write meets the bumped counter (or adopts it, if that write's answer was lost).
                // Sent before the live session's own take: a take sent while that session
                // already held the shard would be the coordinator taking a shard twice. The same
                // instance: the same subscription's run, or another subscription of the same
                // process run (a resubscribe's, which shares the store and the owner id).
                let phantom = unanswered
                    && !stolen
                    && state.expiry_ms <= op.wall_ms + lease_ms
                    && previous.is_some_and(|prev| {
                        self.sid_inst.get(&prev).is_some_and(|&(held_by, inc)| {
                            let (theirs, mine) = (&self.insts[held_by], &self.insts[op.inst]);
                            let same = (held_by, inc) == (op.inst, op.inc)
                                || (theirs.process == mine.process && theirs.run == mine.run);
                            same && theirs
                                .sessions
                                .get(&prev)
                                .is_none_or(|held| op.sent < held.take_sent)
                        })
                    });
                let taken = rules::taken(Some(&*state), &take);
                *state = taken;
                let granted = state.clone();
                row.expiry_sent = op.sent;
                row.expiry_moved_back = false;
                if phantom {
                    self.stats.phantom_takes += 1;
                    self.log(|| {
                        format!(
                            "a take of session {} landed unanswered on shard {shard}, held by \
                             {previous:?} of the same instance",
                            op.sid
                        )
                    });
                    return Res::Granted(granted);
                }
                row.holder = Some(op.sid);
                self.stats.takes += 1;
                if stolen {
                    self.stats.takeovers += 1;
                }
                if over.is_some() {
                    self.stats.take_overs += 1;
                }
                if let Some(prev) = previous {
                    self.check_no_live_holder(prev, op);
                }
                self.handover_step(shard, op.sid, Step::Take);
                Res::Granted(granted)
            }
            OpKind::Renew
            | OpKind::Checkpoint(_)
            | OpKind::CheckpointRenew(_)
            | OpKind::Release { .. }
            | OpKind::HandOver { .. }
            | OpKind::Commit { .. } => {
                if let OpKind::Commit { request, .. } = &op.kind
                    && self.cfg.token_honoured
                    && self.honoured.contains(request)
                {
                    // DynamoDB: a request token it saw succeed answers success again, and
                    // nothing is applied twice.
                    self.stats.tokens_honoured += 1;
                    return Res::Ok;
                }
                // `DynamoLeaseStore` bumps the notice after a release in a call of its own,
                // which may fail.
                let bump_lost = matches!(op.kind, OpKind::Release { .. } | OpKind::HandOver { .. })
                    && self.chaos()
                    && self.rng.random_bool(self.cfg.p_fail);
                let write = self.held_write_of(op).expect("a held write");
                let row = &mut self.rows[shard];
                let Some(state) = row
                    .state
                    .as_mut()
                    .filter(|s| rules::held_accepted(Some(s), &op.owner, op.seen, &write))
                else {
                    self.stats.fenced_writes += 1;
                    return Res::Fenced;
                };
                if row.holder != Some(op.sid) {
                    let holder = row.holder;
                    self.fail(format!(
                        "fencing: the store accepted {:?} on shard {shard} from session {} of \
                         {} (incarnation {}), but session {holder:?} holds the row",
                        op.kind, op.sid, op.owner, op.inc
                    ));
                    return Res::Fenced;
                }
                if let OpKind::Commit { units, .. } = &op.kind
                    && !units.is_empty()
                    && self.rng.random_bool(self.cfg.p_user_refuse)
                {
                    // A unit's own condition fails: the transaction is cancelled whole.
                    let unit = units[self.rng.random_range(0..units.len())];
                    return Res::UserRefused(unit);
                }
                // The store's rule: the row as the write leaves it. The checks below read the row
                // as it was before.
                let after = rules::held_written(state, &write);
                let before = std::mem::replace(state, after);
                let expiry_sent = match &op.kind {
                    OpKind::Renew | OpKind::CheckpointRenew(_) | OpKind::HandOver { .. } => {
                        Some(op.sent)
                    }
                    OpKind::Commit { first_sent, .. } => Some(*first_sent),
                    _ => None,
                };
                if let Some(sent) = expiry_sent {
                    if sent < row.expiry_sent {
                        row.expiry_moved_back = true;
                    }
                    row.expiry_sent = sent;
                }
                let renews = matches!(op.kind, OpKind::Renew | OpKind::CheckpointRenew(_));
                match &op.kind {
                    OpKind::Renew => {}
                    OpKind::HandOver {
                        to,
                        checkpoint,
                        cover,
                        last,
                        drained,
                    } => {
                        if let Some(checkpoint) = checkpoint {
                            let old = Mark::of(before.checkpoint.as_deref());
                            let new = Mark::of(Some(checkpoint));
                            // As for a checkpoint: a seek of the session may take it back.
                            let floor = self.seek_floors.get(&op.sid).copied();
                            if new < old && floor.is_none_or(|floor| new < floor) {
                                self.fail(format!(
                                    "monotonic: shard {shard}'s handoff moved its checkpoint \
                                     back from {old:?} to {checkpoint} (session {})",
                                    op.sid
                                ));
                                return Res::Ok;
                            }
                        }
                        let mark = Mark::of(state.checkpoint.as_deref());
                        row.holder = None;
                        if bump_lost {
                            self.stats.lost_bumps += 1;
                        } else {
                            self.notice.counter += 1;
                        }
                        self.stats.hand_overs += 1;
                        self.log(|| format!("shard {shard} handed over to {to} at {mark:?}"));
                        if let Some(idx) = *cover
                            && mark < self.stream.mark_through(shard, idx)
                        {
                            self.fail(format!(
                                "handoff: session {} handed shard {shard} over at \
                                 checkpoint {mark:?}, behind record #{idx} it had settled",
                                op.sid
                            ));
                            return Res::Ok;
                        }
                        let covered = cover.map_or(0, |idx| idx + 1);
                        let g = &mut self.ghost[shard];
                        g.covered_upto = g.covered_upto.max(covered);
                        if *drained {
                            self.stats.clean_hand_overs += 1;
                            if *last > *cover {
                                self.fail(format!(
                                    "handoff: every delivery of session {} had settled, \
                                     yet it handed shard {shard} over covering #{cover:?} of \
                                     #{last:?}, the last it handed to a handler: the next owner delivers again",
                                    op.sid
                                ));
                                return Res::Ok;
                            }
                            let g = &mut self.ghost[shard];
                            g.planned_upto = g.planned_upto.max(covered);
                        }
                    }
                    OpKind::Checkpoint(checkpoint)
                    | OpKind::CheckpointRenew(checkpoint)
                    | OpKind::Commit { checkpoint, .. } => {
                        let (old, new) = (
                            Mark::of(before.checkpoint.as_deref()),
                            Mark::of(Some(checkpoint)),
                        );
                        let finished = state.is_finished();
                        if !self.checkpoint_moves(shard, op.sid, &before, checkpoint, finished) {
                            return Res::Ok;
                        }
                        if let OpKind::Commit { units, request, .. } = &op.kind {
                            self.commit_applied(units, request);
                        }
                        let finishes = checkpoint.as_ref() == SHARD_END;
                        if self.cfg.exactly_once
                            && (matches!(op.kind, OpKind::Commit { .. }) || finishes)
                        {
                            let epoch = match &op.kind {
                                OpKind::Commit { epoch, .. } => *epoch,
                                _ => self.seek_epochs.get(&shard).copied().unwrap_or(0),
                            };
                            self.check_effects_covered(shard, old, new, epoch);
                        }
                    }
                    OpKind::Release { cover, stopping } => {
                        let mark = Mark::of(state.checkpoint.as_deref());
                        row.holder = None;
                        if bump_lost {
                            self.stats.lost_bumps += 1;
                        } else {
                            self.notice.counter += 1;
                        }
                        let next = self.stream.next_after(shard, mark);
                        let len = self.stream.shards[shard].records.len();
                        let process = self.insts[op.inst].process;
                        let taker_ready = self.insts.iter().any(|inst| {
                            inst.alive
                                && !inst.shutting_down
                                && inst.coord.rounds.first_round_over()
                                && inst.process != process
                        });
                        self.ghost[shard].handover =
                            (*stopping && next < len).then_some(Handover {
                                at: self.now,
                                from: op.sid,
                                taker_ready,
                                taken: false,
                                read: false,
                            });
                        if let Some(idx) = *cover {
                            if mark < self.stream.mark_through(shard, idx) {
                                let seq = self.stream.shards[shard].records[idx];
                                self.fail(format!(
                                    "release: session {} released shard {shard} at checkpoint \
                                     {mark:?}, behind record #{idx} ({seq}) it delivered and \
                                     had acked",
                                    op.sid
                                ));
                            }
                            let g = &mut self.ghost[shard];
                            g.covered_upto = g.covered_upto.max(idx + 1);
                            self.stats.release_covers += 1;
                        }
                    }
                    OpKind::Read
                    | OpKind::List { .. }
                    | OpKind::Acquire
                    | OpKind::TakeOver { .. }
                    | OpKind::Notice { .. }
                    | OpKind::NoticeHead
                    | OpKind::Beat { .. }
                    | OpKind::Leave { .. }
                    | OpKind::Announce { .. }
                    | OpKind::Withdraw
                    | OpKind::AskHandoff { .. }
                    | OpKind::MarkAsked { .. }
                    | OpKind::Delete { .. }
                    | OpKind::Joint { .. } => unreachable!(),
                }
                // A renewing write answers the row as written, where its holder sees a handoff
                // asked.
                if renews {
                    Res::Row(self.rows[shard].state.clone())
                } else {
                    Res::Ok
                }
            }
        }
    }

    /// A checkpoint write of session `sid` moved shard `shard`'s row from `before` to
    /// `checkpoint` (`finished`: the row now says `SHARD_END`): the checks of a row never marked
    /// skipped and of a checkpoint that moves back only as far as the session's seeks allow.
    /// Whether they held.
    pub(super) fn checkpoint_moves(
        &mut self,
        shard: usize,
        sid: u64,
        before: &LeaseState,
        checkpoint: &str,
        finished: bool,
    ) -> bool {
        let old = Mark::of(before.checkpoint.as_deref());
        let new = Mark::of(Some(checkpoint));
        // A seek of the session that writes may take its checkpoint back, no further than the
        // record before its target.
        let floor = self.seek_floors.get(&sid).copied();
        if before.is_skipped() {
            self.fail(format!(
                "skipped: shard {shard} was marked never to be read, and session {sid} \
                 checkpointed {checkpoint} over the mark"
            ));
            return false;
        }
        if new < old && floor.is_none_or(|floor| new < floor) {
            let was = before.checkpoint.clone();
            self.fail(format!(
                "monotonic: shard {shard}'s checkpoint moved back from {was:?} to {checkpoint} \
                 (session {sid})"
            ));
            return false;
        }
        if finished {
            // Its children open: balancing converges anew.
            self.reshaped_at = self.reshaped_at.max(self.now);
        }
        true
    }

    /// A commit landed: its units' effects are applied with it, in the same step. Invariant 8:
    /// no effect is applied twice (in one seek epoch of its shard).
    pub(super) fn commit_applied(&mut self, units: &[UnitId], request: &Arc<str>) {
        if self.cfg.token_honoured {
            self.honoured.insert(Arc::clone(request));
        }
        for unit in units {
            let Some(effects) = self.unit_effects.get(unit).cloned() else {
                self.fail(format!(
                    "exactly once: commit {request} names unit {unit:?}, never staged"
                ));
                return;
            };
            for effect in effects {
                let applied = {
                    let applied = self.applied.entry(effect).or_default();
                    *applied += 1;
                    *applied
                };
                self.stats.effects += 1;
                self.applied_records.insert((effect.shard, effect.idx));
                if applied > 1 {
                    self.fail(format!(
                    "exactly once: the effect of record #{} of shard {} (seek epoch {}) was applied \
                     {applied} times, the last by commit {request} (unit {unit:?})",
                    effect.idx, effect.shard, effect.epoch
                ));
                    return;
                }
            }
        }
    }

    /// Invariant 8b: a checkpoint that moves from `old` to `new` (a commit, or `SHARD_END`)
    /// passes no owed record that stages an effect whose effect was never applied, unless a
    /// handling dropped it: the effects and the checkpoint move together.
    pub(super) fn check_effects_covered(&mut self, shard: usize, old: Mark, new: Mark, epoch: u32) {
        if new <= old {
            return;
        }
        let let_go = self
            .effects_let_go
            .get(&(shard, epoch))
            .cloned()
            .unwrap_or_default();
        let (from, to) = (
            self.stream.next_after(shard, old),
            self.stream.next_after(shard, new),
        );
        let missing = (from..to).find(|&idx| {
            self.ghost[shard].owed.get(idx).copied().unwrap_or(false)
                && self.stages(shard, idx)
                && !self.applied_records.contains(&(shard, idx))
                && !self.dropped.contains(&(shard, idx))
                && !let_go.contains(&idx)
        });
        if let Some(idx) = missing {
            self.fail(format!(
                "exactly once: shard {shard}'s checkpoint moved from {old:?} to {new:?} past \
                 record #{idx}, whose effect was never applied"
            ));
        }
    }

    /// Invariant 1b: a take lands only when the session it replaces may no longer deliver.
    /// Session `sid`'s deadline and owner while it may still deliver by its own clock: its last
    /// grant's deadline is ahead, it heard of no refusal, and it did not stop.
    fn live_holder(&self, sid: u64) -> Option<(Time, Arc<str>)> {
        let &(i, inc) = self.sid_inst.get(&sid)?;
        let inst = &self.insts[i];
        if !inst.alive || inst.inc != inc {
            return None;
        }
        let s = inst.sessions.get(&sid)?;
        (!s.machine.is_halted() && !s.lost && s.deadline > self.now)
            .then(|| (s.deadline, Arc::clone(&inst.owner)))
    }

    pub(super) fn check_no_live_holder(&mut self, prev: u64, op: &Op) {
        if let Some((deadline, owner)) = self.live_holder(prev) {
            let moved_back = if self.rows[op.shard].expiry_moved_back {
                " (an earlier write of that session landed after a later one and moved the \
                 row's expiry back)"
            } else {
                ""
            };
            self.fail(format!(
                "fencing: {} (session {}) took shard {} while session {prev} of {owner} may \
                 still deliver until {} by its own clock{moved_back}",
                op.owner,
                op.sid,
                op.shard,
                secs(deadline)
            ));
        }
    }

    pub(super) fn on_reply(&mut self, i: usize, cont: Cont, res: Res) {
        match cont {
            Cont::Read { shard } => self.round_read(i, shard, res),
            Cont::RoundList => self.round_listed(i, res),
            Cont::Notice { whole } => self.notice_answered(i, res, whole),
            Cont::Delete { shard } => self.round_deleted(i, shard, res),
            Cont::Beat => self.beat_answered(i, &res),
            Cont::BeatLease => self.beat_lease_answered(i, &res),
            Cont::TakeNotice {
                shard,
                sid,
                sent_ms,
            } => self.take_noticed(i, shard, sid, sent_ms, res),
            Cont::Announce => self.announce_answered(i, &res),
            Cont::Ask { shard, holder } => self.ask_answered(i, shard, &holder, &res),
            Cont::Marked => self.marks_answered(i),
            Cont::Leave => {}
            Cont::Acquire { shard, sid, start } => self.round_acquired(i, shard, sid, start, res),
            Cont::StartCheckpoint { shard, sid, start } => {
                self.start_checkpointed(i, shard, sid, start, res);
            }
            Cont::TakeRelease { shard, sid } => self.take_released(i, sid, shard),
            Cont::Lease { sid, write, sent } => self.lease_answered(i, sid, &write, sent, &res),
            Cont::Joint { unit, token, rows } => self.joint_answered(i, unit, &token, &rows, res),
        }
    }
}

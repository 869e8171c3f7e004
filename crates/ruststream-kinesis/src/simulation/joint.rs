//! Exactly once, units that span shards: the joint committer (`shard::joint`, as the live
//! committer drives it), and the store's joint commit, all or nothing over its rows.

use super::*;
use crate::shard::joint::{self, JointNext};
use crate::shard::lease::Commit;

impl Sim {
    /// The joint committer of instance `i` looks at every unit waiting for its commit: after a
    /// write of a shard answered, a seek, a close.
    pub(super) fn joints_drive(&mut self, i: usize) {
        let units: Vec<UnitId> = self.insts[i].joints.keys().copied().collect();
        for unit in units {
            self.joint_drive(i, unit);
        }
    }

    /// What the joint committer does for `unit` now (`shard::joint::next`, over the machines of
    /// its parts, locked together): sends its commit, waits, or gives it back everywhere.
    pub(super) fn joint_drive(&mut self, i: usize, unit: UnitId) {
        let Some(pending) = self.insts[i].joints.get(&unit) else {
            return;
        };
        if pending.in_flight {
            return;
        }
        let (sids, since) = (pending.sids.clone(), pending.since);
        let (now, wall) = (self.now, self.wall(i));
        let inst = &mut self.insts[i];
        // A part whose shard's reader ended: the unit can never commit.
        let missing = sids.iter().any(|sid| !inst.sessions.contains_key(sid));
        let mut parts = parts_of(inst, &sids);
        let next = if missing {
            joint::abandon(unit, &mut parts, now)
        } else {
            joint::next(unit, &mut parts, since, now, wall)
        };
        match next {
            JointNext::Send(rows) => self.joint_send(i, unit, &sids, &rows),
            JointNext::Wait(Some(at)) => {
                let token = self.token();
                let inc = self.insts[i].inc;
                if let Some(pending) = self.insts[i].joints.get_mut(&unit) {
                    pending.timer = token;
                }
                self.push(
                    at.max(now),
                    Ev::Joint {
                        inst: i,
                        inc,
                        unit,
                        token,
                    },
                );
            }
            JointNext::Wait(None) => {}
            JointNext::Abandoned { back, .. } => {
                self.insts[i].joints.remove(&unit);
                self.stats.joints_abandoned += 1;
                self.log(|| format!("i{i} gives joint unit {unit:?} back"));
                for sid in sids {
                    if back {
                        self.redeliver_drive(i, sid);
                    }
                    // A part lost with it ends; one that gave its records back commits on.
                    self.lease_wake(i, sid);
                }
            }
        }
    }

    /// Sends the joint commit of `unit`: one request of its effects and `rows` (one per session
    /// of `sids`), each row conditioned on the fence its store object knows.
    fn joint_send(&mut self, i: usize, unit: UnitId, sids: &[u64], rows: &[Commit]) {
        let now = self.now;
        let inc = self.insts[i].inc;
        let mut shards = Vec::with_capacity(sids.len());
        for sid in sids {
            let Some(s) = self.insts[i].sessions.get(sid) else {
                return;
            };
            shards.push(s.shard);
        }
        let Some(pending) = self.insts[i].joints.get_mut(&unit) else {
            return;
        };
        pending.in_flight = true;
        let first_sent = *pending.first_sent.get_or_insert(now);
        if pending.epochs.is_empty() {
            pending.epochs = shards
                .iter()
                .map(|shard| self.seek_epochs.get(shard).copied().unwrap_or(0))
                .collect();
        }
        let epochs = pending.epochs.clone();
        let joint_rows: Arc<[JointRow]> = rows
            .iter()
            .zip(sids.iter().zip(&shards))
            .zip(epochs)
            .map(|((commit, (&sid, &shard)), epoch)| JointRow {
                shard,
                sid,
                checkpoint: Arc::from(commit.checkpoint.as_str()),
                expiry_ms: commit.expiry_ms,
                prior: commit.prior.clone(),
                epoch,
                fence: self.fence(i, inc, shard),
            })
            .collect();
        let Some(first) = rows.first() else {
            return;
        };
        let kind = OpKind::Joint {
            rows: Arc::clone(&joint_rows),
            token: Arc::from(first.token.base()),
            request: Arc::from(first.token.request(first.attempt)),
            unit,
            first_sent,
        };
        self.log(|| format!("i{i} sends the joint commit of {unit:?} over shards {shards:?}"));
        self.send(
            i,
            sids[0],
            shards[0],
            kind,
            Cont::Joint {
                unit,
                token: Arc::from(first.token.base()),
                rows: joint_rows,
            },
        );
    }

    /// The store's joint commit (`DynamoLeaseStore::commit` of several rows): every row's
    /// condition holds and every row moves with the unit's effects, or nothing is applied.
    pub(super) fn apply_joint(&mut self, op: &Op) -> Res {
        let OpKind::Joint {
            rows,
            token,
            request,
            unit,
            first_sent,
        } = &op.kind
        else {
            unreachable!("a joint commit");
        };
        if self.cfg.token_honoured && self.honoured.contains(request) {
            self.stats.tokens_honoured += 1;
            return Res::Ok;
        }
        if rows.iter().any(|row| self.rows[row.shard].malformed) {
            return Res::Failed;
        }
        let write = |row| row_write(row, token);
        let accepted = rows.iter().all(|row| {
            rules::held_accepted(
                self.rows[row.shard].state.as_ref(),
                &op.owner,
                row.fence.counter,
                &write(row),
            )
        });
        if !accepted {
            self.stats.fenced_writes += 1;
            return Res::JointFenced(
                rows.iter()
                    .map(|row| self.rows[row.shard].state.clone())
                    .collect(),
            );
        }
        if let Some(row) = rows
            .iter()
            .find(|row| self.rows[row.shard].holder != Some(row.sid))
        {
            let holder = self.rows[row.shard].holder;
            self.fail(format!(
                "fencing: the store accepted the joint commit of {unit:?} on shard {} from \
                 session {} of {}, but session {holder:?} holds the row",
                row.shard, row.sid, op.owner
            ));
            return Res::Ok;
        }
        if self.rng.random_bool(self.cfg.p_user_refuse) {
            // The unit's own condition fails: the transaction is cancelled whole.
            return Res::UserRefused(*unit);
        }
        let mut moved = Vec::with_capacity(rows.len());
        for row in rows.iter() {
            let stored = &mut self.rows[row.shard];
            let Some(state) = stored.state.as_mut() else {
                return Res::Failed;
            };
            let after = rules::held_written(state, &write(row));
            let before = std::mem::replace(state, after);
            let finished = state.is_finished();
            if *first_sent < stored.expiry_sent {
                stored.expiry_moved_back = true;
            }
            stored.expiry_sent = *first_sent;
            moved.push((row, before, finished));
        }
        for (row, before, finished) in &moved {
            if !self.checkpoint_moves(row.shard, row.sid, before, &row.checkpoint, *finished) {
                return Res::Ok;
            }
        }
        self.commit_applied(&[*unit], request);
        for (row, before, _) in &moved {
            let old = Mark::of(before.checkpoint.as_deref());
            let new = Mark::of(Some(&row.checkpoint));
            self.check_effects_covered(row.shard, old, new, row.epoch);
        }
        self.stats.joint_commits += 1;
        Res::Ok
    }

    /// The joint commit of `unit` over `rows` was answered `res`: each row's fence settles as
    /// `DynamoLeaseStore::commit` settles it (a refusal judged by `rules::commit_refused` over the
    /// rows as they stood), and every part hears the answer (`shard::joint::answered`).
    pub(super) fn joint_answered(
        &mut self,
        i: usize,
        unit: UnitId,
        token: &str,
        rows: &[JointRow],
        res: Res,
    ) {
        let inc = self.insts[i].inc;
        let owner = Arc::clone(&self.insts[i].owner);
        let mut lost = Vec::new();
        let answer = match res {
            Res::Ok => {
                for row in rows {
                    let counter = row.fence.counter.map(|seen| seen + 1);
                    self.fences.insert(
                        (i, inc, row.shard),
                        Fence {
                            counter,
                            uncertain: false,
                        },
                    );
                }
                Answer::Done
            }
            // The rows' conditions held: each fence stays.
            Res::UserRefused(refused) => Answer::UserRefused(refused),
            Res::JointFenced(states) => {
                let (answer, refusing) = self.joint_refused(i, &owner, token, rows, &states);
                lost = refusing;
                answer
            }
            _ => {
                for row in rows {
                    let fence = self
                        .fence(i, inc, row.shard)
                        .answered(rules::Answer::Failed);
                    self.fences.insert((i, inc, row.shard), fence);
                }
                Answer::Failed
            }
        };
        let Some(pending) = self.insts[i].joints.get_mut(&unit) else {
            return;
        };
        pending.in_flight = false;
        let first_sent = pending.first_sent.unwrap_or(self.now);
        let sids = pending.sids.clone();
        let now = self.now;
        // The rows the store names, by their place among the parts still running.
        let present: Vec<u64> = sids
            .iter()
            .copied()
            .filter(|sid| self.insts[i].sessions.contains_key(sid))
            .collect();
        let lost_parts: Option<Vec<usize>> = (!lost.is_empty()).then(|| {
            lost.iter()
                .filter_map(|&at| rows.get(at))
                .filter_map(|row| present.iter().position(|&sid| sid == row.sid))
                .collect()
        });
        let lost_sids: Vec<u64> = lost
            .iter()
            .filter_map(|&at| rows.get(at))
            .map(|row| row.sid)
            .collect();
        let mut parts = parts_of(&mut self.insts[i], &sids);
        let resolved = joint::answered(unit, &mut parts, now, answer, lost_parts.as_deref());
        drop(parts);
        if resolved {
            self.insts[i].joints.remove(&unit);
        }
        // A row's write grants a lease kept alive by beats nothing: the beat does.
        let grant = if self.cfg.timings.is_kept_by_beat() {
            Time::ZERO
        } else {
            first_sent + self.cfg.timings.lease() - self.cfg.timings.holder_margin()
        };
        for sid in sids {
            let stream = &self.stream;
            let Some(s) = self.insts[i].sessions.get_mut(&sid) else {
                continue;
            };
            // The ghost: what the session heard.
            match answer {
                Answer::Done => {
                    s.deadline = s.deadline.max(grant);
                    if let Some(row) = rows.iter().find(|row| row.sid == sid) {
                        s.settled_upto =
                            stream.index_through(s.shard, Mark::of(Some(&row.checkpoint)));
                    }
                    self.last_progress = now;
                }
                Answer::Refused if lost_sids.is_empty() || lost_sids.contains(&sid) => {
                    s.lost = true;
                }
                _ => {}
            }
            self.commit_news_heard(i, sid);
            // Its own writer waited for the joint commit's answer.
            self.lease_wake(i, sid);
        }
        if !resolved {
            self.joint_drive(i, unit);
        }
    }

    /// A joint commit under `token` refused by a row: `rules::commit_refused` over the rows as
    /// they stood (`states`), the fences moved as `DynamoLeaseStore::rows_refused` moves them;
    /// with the places of the rows whose lease is lost.
    fn joint_refused(
        &mut self,
        i: usize,
        owner: &str,
        token: &str,
        rows: &[JointRow],
        states: &[Option<LeaseState>],
    ) -> (Answer, Vec<usize>) {
        let inc = self.insts[i].inc;
        let refusals: Vec<rules::RowRefusal<'_>> = rows
            .iter()
            .zip(states)
            .map(|(row, state)| {
                let write = row_write(row, token);
                rules::RowRefusal {
                    fence: row.fence,
                    prior: row.prior.as_deref(),
                    answer: match state {
                        Some(state)
                            if rules::held_accepted(
                                Some(state),
                                owner,
                                row.fence.counter,
                                &write,
                            ) =>
                        {
                            rules::RowAnswer::Accepted
                        }
                        Some(state) => rules::RowAnswer::Refused(state),
                        None => rules::RowAnswer::Missing,
                    },
                }
            })
            .collect();
        let judged = rules::commit_refused(&refusals, owner, token, false);
        drop(refusals);
        match judged {
            rules::CommitRefusal::Landed(fences) => {
                for (row, fence) in rows.iter().zip(fences) {
                    let fence = fence.unwrap_or_else(|| {
                        self.fence(i, inc, row.shard)
                            .answered(rules::Answer::Failed)
                    });
                    self.fences.insert((i, inc, row.shard), fence);
                }
                self.stats.commit_resends_recognised += 1;
                (Answer::Done, Vec::new())
            }
            rules::CommitRefusal::Retry(fences) => {
                for (row, fence) in rows.iter().zip(fences) {
                    self.fences.insert((i, inc, row.shard), fence);
                }
                self.stats.fence_retries += 1;
                (Answer::NotApplied, Vec::new())
            }
            rules::CommitRefusal::Lost { rows } => (Answer::Refused, rows),
        }
    }
}

/// A joint commit's update of `row` under `token`, as the store's rules know it.
fn row_write<'a>(row: &'a JointRow, token: &'a str) -> rules::Held<'a> {
    rules::Held::Commit {
        checkpoint: &row.checkpoint,
        behind_ms: None,
        expiry_ms: row.expiry_ms,
        token,
        prior: row.prior.as_deref(),
    }
}

/// The machines of `inst`'s sessions `sids` that still run, in the order of their sessions.
fn parts_of<'a>(inst: &'a mut Inst, sids: &[u64]) -> Vec<&'a mut ShardMachine<Time, SimRecord>> {
    inst.sessions
        .iter_mut()
        .filter(|(sid, _)| sids.contains(sid))
        .map(|(_, s)| &mut s.machine)
        .collect()
}

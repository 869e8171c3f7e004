//! Liveness by beat: the beat's driver as `live/beat.rs` will run it, on the real
//! [`BeatLease`]. It writes a beat when the machine says, hands back the answer, and gives each
//! answered chain to every session of the instance (`ShardMachine::follow_beat`) and to the
//! ghost, which extends a session's deadline by the same rule, stated here on its own: a chain
//! carries a session only if it began before the session's deadline.

use super::*;

impl Sim {
    /// Asks the subscription's beat what to do now: write a beat, or wait. It stops once the
    /// coordinator exited and every session of the instance ended (`live`: after the readers);
    /// the instance's end then removes its beat from the notice (`leave`), so that the others
    /// count one instance fewer at once: a balancing instance would otherwise leave the stopped
    /// one's shards to it until its beat lapsed (found when beat schedules began to balance).
    pub(super) fn beat_drive(&mut self, i: usize) {
        let (now, wall) = (self.now, self.wall(i));
        let token = self.token();
        let inst = &mut self.insts[i];
        let inc = inst.inc;
        if inst.coord.exited && inst.sessions.is_empty() {
            // Its end (`maybe_exit`) removes the beat from the notice.
            return;
        }
        let Some(beat) = inst.coord.beat.as_mut() else {
            return;
        };
        match beat.next(now, wall) {
            BeatNext::Send { until_ms } => {
                inst.coord.beat_until = inst.coord.beat_until.max(until_ms);
                let kind = OpKind::Beat {
                    until_ms,
                    forget: Vec::new(),
                };
                self.send(i, 0, 0, kind, Cont::BeatLease);
            }
            BeatNext::Wait(Some(at)) => {
                inst.coord.beat_token = token;
                self.push(
                    at.max(now),
                    Ev::Beat {
                        inst: i,
                        inc,
                        token,
                    },
                );
            }
            BeatNext::Wait(None) => {}
        }
    }

    /// The beat's timer fired.
    pub(super) fn beat_woken(&mut self, i: usize, token: u64) {
        if self.insts[i].coord.beat_token == token {
            self.beat_drive(i);
        }
    }

    /// The store answered a beat: the chain as it stands goes to every session, and the
    /// coordinator looks again once a chain began (it takes nothing while none counts).
    pub(super) fn beat_lease_answered(&mut self, i: usize, res: &Res) {
        let (now, wall) = (self.now, self.wall(i));
        let answer = match res {
            Res::Ok => BeatAnswer::Done,
            // Refused unapplied, as the live driver tells a throttled beat.
            Res::Throttled => BeatAnswer::NotApplied,
            _ => BeatAnswer::Failed,
        };
        let Some(beat) = self.insts[i].coord.beat.as_mut() else {
            return;
        };
        let news = beat.on_answer(now, wall, answer);
        let grant = beat.grant();
        if answer == BeatAnswer::Done {
            self.stats.lease_beats += 1;
        }
        if let Some(grant) = grant {
            for s in self.insts[i].sessions.values_mut() {
                s.machine.follow_beat(&grant);
                // The ghost: a chain that began before the session's deadline carries it.
                if grant.since < s.deadline {
                    s.deadline = s.deadline.max(grant.valid_until);
                }
            }
            // `ShardHandle::follow_beat`: each lease's driver sets its timer again.
            let sids: Vec<u64> = self.insts[i].sessions.keys().copied().collect();
            for sid in sids {
                self.lease_wake(i, sid);
            }
        }
        match news {
            Some(BeatNews::Restarted) => {
                self.stats.beat_restarts += 1;
                self.log(|| format!("i{i}'s beat had lapsed: a new chain begins"));
            }
            Some(BeatNews::Failed) => self.log(|| format!("i{i}'s beat failed")),
            Some(BeatNews::Quiet) => {
                self.log(|| format!("i{i}'s beats failed for a lease: quiet for two leases"));
            }
            Some(BeatNews::Began) | None => {}
        }
        self.beat_drive(i);
        if matches!(news, Some(BeatNews::Began | BeatNews::Restarted)) {
            self.coord_wake(i);
        }
    }
}

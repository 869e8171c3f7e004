//! Exactly once, a unit that spans shards (a batch handler's batch of several shards' records)
//! commits in one transaction: its writes and one update of each shard's lease row, each
//! conditioned on that shard's lease. The rules, over the unit's shard machines (the live
//! committer holds their locks together, in shard order; the simulation holds them at once):
//!
//! - the commit goes out when every shard's part is ready at once: the unit's deliveries head
//!   that shard's settled prefix (every earlier one committed) and its lease has no write in
//!   flight. Each part then takes its lease's write slot, so no renewal of a row moves the
//!   counter the commit is conditioned on; a part not ready leaves every slot free;
//! - its answer is every part's: landed, each row's checkpoint passes the unit; refused by the
//!   unit's own write, the unit goes back in every shard; refused by a row, that shard's lease is
//!   lost, and the unit goes back in the others (whose rows held: nothing was applied);
//!   without an answer, every part sends it again, unchanged, when the earliest part is due
//!   (the one whose lease has least left);
//! - a part that can no longer send (its lease ended or closes, a seek dropped the unit), or a
//!   unit not sent within the handoff drain of its settle (a record of one of its shards handed
//!   back for long, a handler that hangs), means the unit never commits: its deliveries go back
//!   in every shard, each to come again alone, so no shard's checkpoint waits on another's for
//!   good;
//!   once sent, a part whose lease ended leaves the commit unresolvable, so every other part's
//!   lease is lost too (the next owners start at the rows' checkpoints, which agree).

use super::lease::{Answer, Commit, Moment};
use super::machine::{Part, ShardMachine};
use super::read::Sequenced;
use crate::commit::UnitId;

/// What the joint committer does next for a unit that spans shards.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum JointNext<T> {
    /// Send one transaction of the unit's writes and these rows: each part's commit, in the
    /// order of the parts.
    Send(Vec<Commit>),
    /// Nothing to do before this moment, or (`None`) before a part's lease answers a write or
    /// the unit's deliveries settle in every shard.
    Wait(Option<T>),
    /// The unit never commits: its deliveries went back wherever they were held (`back`: some
    /// come again now, to be delivered again), or (`lost`) its commit was sent and can no longer
    /// be resolved, so every part's lease is lost.
    Abandoned { back: bool, lost: bool },
}

/// What to do next at `now` (`now_ms` by the wall clock) for `unit`, whose deliveries every
/// machine of `parts` holds (settled, in each) since `since`. A unit not sent by the time its
/// first part's handoff drain has passed since then is given back everywhere: a record of one
/// shard handed back for long, or a handler that hangs, must not hold back another shard's
/// checkpoint for good.
pub(crate) fn next<T: Moment, R: Sequenced>(
    unit: UnitId,
    parts: &mut [&mut ShardMachine<T, R>],
    since: T,
    now: T,
    now_ms: u64,
) -> JointNext<T> {
    let states: Vec<Part<T>> = parts.iter().map(|part| part.joint_part(unit)).collect();
    let sent = states
        .iter()
        .filter(|state| matches!(state, Part::Sent(_)))
        .count();
    if sent > 0 {
        if sent < parts.len() {
            // A part's lease ended while the commit was unresolved: it may have landed.
            return abandon(unit, parts, now);
        }
        let mut due = None;
        for state in &states {
            match *state {
                Part::Sent(None) => return JointNext::Wait(None),
                Part::Sent(Some(at)) => due = Some(due.map_or(at, |due: T| due.min(at))),
                _ => {}
            }
        }
        let Some(due) = due else {
            return JointNext::Wait(None);
        };
        if now < due {
            return JointNext::Wait(Some(due));
        }
        // Due at the earliest part's moment: each part's own wait is shorter the less of its
        // lease is left, and the request is the same for all.
        let rows: Option<Vec<Commit>> = parts
            .iter_mut()
            .map(|part| part.resend_part(now, now_ms))
            .collect();
        return match rows {
            Some(rows) => JointNext::Send(rows),
            // Not every part could send it again (none is in flight, each waits: a bug):
            // nothing is sent, and the commit is unresolvable.
            None => abandon(unit, parts, now),
        };
    }
    if states.contains(&Part::Gone) {
        return abandon(unit, parts, now);
    }
    if states.iter().any(|state| *state != Part::Ready) {
        let Some(patience) = parts.first().map(|part| part.handoff_drain()) else {
            return JointNext::Wait(None);
        };
        let deadline = since + patience;
        if now >= deadline {
            return abandon(unit, parts, now);
        }
        return JointNext::Wait(Some(deadline));
    }
    let mut rows: Vec<Commit> = Vec::with_capacity(parts.len());
    for part in parts.iter_mut() {
        let token = rows.first().map(|first| first.token);
        match part.reserve_part(unit, token, now, now_ms) {
            Some(row) => rows.push(row),
            None => unreachable!("every part was ready, under the same locks"),
        }
    }
    JointNext::Send(rows)
}

/// The store answered the joint commit of `unit` at `now`: every part hears `answer`, but a
/// row's refusal: the parts in `lost` (their places among `parts`; every part when `None`) lose
/// their lease, and the others, whose rows held, give the unit back (nothing was applied).
/// Whether the commit is resolved: landed, refused, or unresolvable (a part's lease ran out
/// waiting to send it again, and every other part's with it).
pub(crate) fn answered<T: Moment, R: Sequenced>(
    unit: UnitId,
    parts: &mut [&mut ShardMachine<T, R>],
    now: T,
    answer: Answer,
    lost: Option<&[usize]>,
) -> bool {
    for (at, part) in parts.iter_mut().enumerate() {
        if matches!(part.joint_part(unit), Part::Sent(None)) {
            let heard = match (answer, lost) {
                (Answer::Refused, Some(lost)) if !lost.contains(&at) => Answer::UserRefused(unit),
                (answer, _) => answer,
            };
            part.write_answered(now, heard);
        }
    }
    if !matches!(answer, Answer::Failed | Answer::NotApplied) {
        return true;
    }
    if parts.iter().any(|part| part.ending().is_some()) {
        for part in parts.iter_mut() {
            part.part_lost(unit);
        }
        return true;
    }
    false
}

/// `unit` never commits (a part can no longer send, or its shard's reader ended): every part
/// not sent gives its deliveries back, and a part sent is lost (the commit is unresolvable
/// without the others).
pub(crate) fn abandon<T: Moment, R: Sequenced>(
    unit: UnitId,
    parts: &mut [&mut ShardMachine<T, R>],
    now: T,
) -> JointNext<T> {
    let (mut back, mut lost) = (false, false);
    for part in parts.iter_mut() {
        lost |= part.part_lost(unit);
        back |= part.abandon_part(unit, now);
    }
    JointNext::Abandoned { back, lost }
}

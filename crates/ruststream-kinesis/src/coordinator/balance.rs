//! Balancing the shards among the instances of a stream (`KinesisBroker::balance_shards`), with
//! no leader: each instance counts, from the rows a listing round read and the beats of the
//! stream's notice, how many shards each instance holds, and
//!
//! - gives each instance a target: the open shards over the instances, rounded down, and one
//!   more for as many instances as the division leaves over, those that hold the most now (ties
//!   to the most shards on their way to them, then to the first owner id in order), so each
//!   target is the floor or the ceiling of the share;
//! - takes free shards (released, lapsed, new) only up to its own target, each instance below
//!   its target its turn of them;
//! - while below its target, asks for handoffs, one shard at a time, from the instance
//!   furthest above its target.
//!
//! What it counts: an open shard is one that is read or could be read now (held, free, or asked
//! for; not finished, not skipped, not waiting for its parents); an instance is this one, every
//! live beat in the stream's notice (a balancing instance always beats), every owner of a live
//! lease (one whose beats are late keeps its share) and every asker of a standing handoff,
//! but for one without a live beat that let a lease lapse: it is gone or cut off, and stops
//! counting as soon as one of its leases lapses, not once the last one does. A shard asked for counts as its
//! asker's from the request on.
//!
//! Why it converges without flapping: a shard moves only from an instance above its target to
//! one below its own, and an instance that receives never passes its target, so no shard that
//! moved is asked for again while the instances stay the same; the targets add up to the open
//! shards, so once nobody is below its target nobody is above it either, and each holds the floor
//! or the ceiling of open shards over instances.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use super::plan::Rows;
use crate::kinesis::shards::ShardInfo;

/// A handoff to ask for: `holder`'s shard `shard`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Ask {
    pub(crate) shard: Arc<str>,
    pub(crate) holder: String,
    /// The row's counter as read: the request lands only on that very lease.
    pub(crate) counter: u64,
}

/// Who holds how many of a stream's open shards, as one instance counts them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Shares {
    /// The open shards.
    open: usize,
    /// The instances.
    instances: usize,
    /// This instance's: read, handed to it, or asked for by it.
    mine: usize,
    /// This instance's owner id.
    owner: String,
    /// The shards each other live holder holds that no standing handoff asks for, by
    /// holder, in listing order, with the counter of each row.
    movable: BTreeMap<String, Vec<(Arc<str>, u64)>>,
    /// How many shards each other instance counts (movable or not): a live holder, a live
    /// beat (none perhaps), or the asker of a standing request.
    held: BTreeMap<String, usize>,
    /// How many shards each instance is to end with, this one included.
    targets: BTreeMap<String, usize>,
}

/// The shares of `listing`'s shards by `rows`: `reading` what this instance (`owner`) reads
/// (those listed count), `free` how many free shards it could take now (beside `own`, the rows
/// handed to it that it takes in any case), `beats` the instances whose beat is live, all at
/// `now_ms`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn shares<'a>(
    listing: &[ShardInfo],
    rows: &Rows,
    reading: &HashSet<Arc<str>>,
    free: usize,
    own: usize,
    owner: &str,
    beats: impl Iterator<Item = &'a str>,
    now_ms: u64,
) -> Shares {
    let beats: Vec<&str> = beats.filter(|beat| *beat != owner).collect();
    let lapsed = lapsed_holders(listing, rows, owner, &beats, now_ms);
    let mut tally = Tally {
        owner,
        lapsed: &lapsed,
        now_ms,
        movable: BTreeMap::new(),
        held: BTreeMap::new(),
        asked_by_me: 0,
        read: 0,
    };
    // Only the listed shards count: one that left the stream while read is on its way out.
    for shard in listing {
        let row = rows.get(&shard.id).and_then(Option::as_ref);
        // The row is the authority: a shard still read here whose row another instance holds
        // (a reader on its way out) is that instance's.
        let held_elsewhere = row.is_some_and(|row| {
            !row.is_held_by(owner) && row.owner.is_some() && !row.is_expired_at(now_ms)
        });
        if reading.contains(&shard.id) && !held_elsewhere {
            tally.read_here(row);
        } else if let Some(row) = row {
            tally.elsewhere(&shard.id, row, reading.contains(&shard.id));
        }
    }
    let Tally {
        movable,
        mut held,
        asked_by_me,
        read,
        ..
    } = tally;
    // Every live holder counts, beat or not: one whose beats are late (a write or two that
    // failed) keeps its share rather than being emptied, and one that is gone stops counting
    // once one of its leases lapses (`lapsed_holders`).
    for beat in beats {
        held.entry(beat.to_owned()).or_default();
    }
    let mine = read + own + asked_by_me;
    let open = mine + free + held.values().sum::<usize>();
    let targets = targets(open, owner, mine, &held, &movable);
    Shares {
        open,
        instances: held.len() + 1,
        mine,
        owner: owner.to_owned(),
        movable,
        held,
        targets,
    }
}

/// What [`shares`] counts shard by shard.
struct Tally<'a> {
    owner: &'a str,
    lapsed: &'a HashSet<&'a str>,
    now_ms: u64,
    movable: BTreeMap<String, Vec<(Arc<str>, u64)>>,
    held: BTreeMap<String, usize>,
    asked_by_me: usize,
    read: usize,
}

impl Tally<'_> {
    /// A listed shard this instance reads, whose row (`None`: not read) no other instance
    /// holds: counted as the others count it, from its row where it was read. A reader whose
    /// row is finished, released or lapsed is on its way out, and one asked for is the asker's.
    fn read_here(&mut self, row: Option<&crate::LeaseState>) {
        match row {
            Some(row) if !row.is_held_by(self.owner) || row.is_finished() || row.is_skipped() => {}
            Some(row) => match row.handoff_at(self.now_ms) {
                Some(asked)
                    if asked.to != self.owner && !self.lapsed.contains(asked.to.as_str()) =>
                {
                    *self.held.entry(asked.to.clone()).or_default() += 1;
                }
                _ => self.read += 1,
            },
            None => self.read += 1,
        }
    }

    /// A listed shard whose row is `row` and which this instance does not read, or reads on its
    /// way out (`reading_it`): whose it counts as, and whether a handoff may ask for it.
    fn elsewhere(&mut self, shard: &Arc<str>, row: &crate::LeaseState, reading_it: bool) {
        let Some(holder) = row.owner.as_deref() else {
            return;
        };
        let now_ms = self.now_ms;
        if holder == self.owner
            || row.is_expired_at(now_ms)
            || row.is_finished()
            || row.is_skipped()
        {
            return;
        }
        match row.handoff_at(now_ms) {
            Some(asked) if asked.to == self.owner => self.asked_by_me += 1,
            // A request counts for its asker, unless the asker let a lease lapse; one on a live
            // row of a holder that did still does, since a holder alive after all may honour it.
            Some(asked) if !self.lapsed.contains(asked.to.as_str()) => {
                *self.held.entry(asked.to.clone()).or_default() += 1;
            }
            // The live rows of a holder that let a lease lapse count for nobody.
            _ if self.lapsed.contains(holder) => {}
            // Asked for by an instance that let a lease lapse: the holder's until it moves.
            Some(_) => *self.held.entry(holder.to_owned()).or_default() += 1,
            // Never asked for while a reader of this instance is still on it: a row handed to
            // this owner id could take a late write of that reader for its own.
            None if reading_it => *self.held.entry(holder.to_owned()).or_default() += 1,
            None => {
                *self.held.entry(holder.to_owned()).or_default() += 1;
                self.movable
                    .entry(holder.to_owned())
                    .or_default()
                    .push((Arc::clone(shard), row.counter));
            }
        }
    }
}

/// The other instances that let a lease of `listing` lapse (its row still names them, past its
/// expiry and the skew tolerance, unfinished) and have no live beat in `beats`. A live instance
/// renews every lease it holds and takes back at its next round one whose renewal failed, so one
/// whose lease lapsed is gone or cut off: it stops counting at once, with its live rows and its
/// standing requests, rather than once its last lease lapses. Counted, it kept a share of the
/// free shards that nobody else would take; a live row handed to it after it crashed (its
/// request stands for [`HANDOFF_REQUEST_LIFETIME`](crate::HANDOFF_REQUEST_LIFETIME)) kept it
/// counted a lease longer, and a lapsed shard waited that long too, the simulation found.
fn lapsed_holders<'a>(
    listing: &[ShardInfo],
    rows: &'a Rows,
    owner: &str,
    beats: &[&str],
    now_ms: u64,
) -> HashSet<&'a str> {
    listing
        .iter()
        .filter_map(|shard| rows.get(&shard.id).and_then(Option::as_ref))
        .filter(|row| row.is_expired_at(now_ms) && !row.is_finished() && !row.is_skipped())
        .filter_map(|row| row.owner.as_deref())
        .filter(|holder| *holder != owner && !beats.contains(holder))
        .collect()
}

/// How many shards each instance is to end with: the `open` shards over the instances (`owner`,
/// holding `mine`, and those of `held`), the remainder going one each to the instances that hold
/// the most now (ties first to those with the fewest shards they could give, that is the most on
/// their way to them, then to the first by name), so every instance that counts alike picks the
/// same ones, the fewest shards move, and a shard on its way is not asked for again.
fn targets(
    open: usize,
    owner: &str,
    mine: usize,
    held: &BTreeMap<String, usize>,
    movable: &BTreeMap<String, Vec<(Arc<str>, u64)>>,
) -> BTreeMap<String, usize> {
    let instances = held.len() + 1;
    let floor = open / instances;
    let remainder = open % instances;
    let mut ranked: Vec<(&str, usize, usize)> = held
        .iter()
        .map(|(name, count)| (name.as_str(), *count, movable.get(name).map_or(0, Vec::len)))
        .chain(std::iter::once((owner, mine, 0)))
        .collect();
    ranked.sort_by(|a, b| {
        b.1.cmp(&a.1)
            .then_with(|| a.2.cmp(&b.2))
            .then_with(|| a.0.cmp(b.0))
    });
    ranked
        .iter()
        .enumerate()
        .map(|(rank, (name, _, _))| ((*name).to_owned(), floor + usize::from(rank < remainder)))
        .collect()
}

impl Shares {
    /// The most any instance should hold: open shards over instances, rounded up.
    #[cfg(test)]
    pub(crate) fn ceiling(&self) -> usize {
        self.open.div_ceil(self.instances.max(1))
    }

    /// This instance's target.
    fn target(&self) -> usize {
        self.targets[&self.owner]
    }

    /// How many free shards this instance may take: up to its target.
    pub(crate) fn room(&self) -> usize {
        self.target().saturating_sub(self.mine)
    }

    /// Which of the free shards `free` (in any order) are this instance's to take: sorted by
    /// id, they go in turn to the instances below their targets (sorted by owner id, each as
    /// many as it lacks), so instances that count alike take different shards rather than race
    /// for the same one and leave the others to a later round.
    pub(crate) fn free_for(&self, free: &[Arc<str>]) -> Vec<Arc<str>> {
        let owner = self.owner.as_str();
        let count = |name: &str| {
            if name == owner {
                self.mine
            } else {
                self.held.get(name).copied().unwrap_or(0)
            }
        };
        let mut slots: Vec<&str> = Vec::new();
        for (name, target) in &self.targets {
            slots.extend(std::iter::repeat_n(
                name.as_str(),
                target.saturating_sub(count(name)),
            ));
        }
        let mut free = free.to_vec();
        free.sort();
        free.into_iter()
            .zip(slots.into_iter().chain(std::iter::repeat(owner)))
            .filter(|(_, slot)| *slot == owner)
            .map(|(shard, _)| shard)
            .take(self.room())
            .collect()
    }

    /// The handoffs this instance asks for once it took `taking` free shards: while it is
    /// below its target, one shard at a time from the instance furthest above its own target.
    pub(crate) fn asks(&self, taking: usize) -> Vec<Ask> {
        let targets = &self.targets;
        let mut mine = self.mine + taking;
        let mut held = self.held.clone();
        let mut movable = self.movable.clone();
        let mut asks = Vec::new();
        while mine < self.target() {
            let Some(holder) = held
                .iter()
                .filter(|(holder, count)| {
                    **count > targets[holder.as_str()]
                        && movable
                            .get(*holder)
                            .is_some_and(|shards| !shards.is_empty())
                })
                .max_by(|a, b| {
                    let over =
                        |(holder, count): &(&String, &usize)| **count - targets[holder.as_str()];
                    over(a).cmp(&over(b)).then_with(|| b.0.cmp(a.0))
                })
                .map(|(holder, _)| holder.clone())
            else {
                break;
            };
            let (shard, counter) = movable
                .get_mut(&holder)
                .and_then(|shards| shards.pop())
                .expect("chosen for a shard to move");
            *held.get_mut(&holder).expect("counted") -= 1;
            mine += 1;
            asks.push(Ask {
                shard,
                holder,
                counter,
            });
        }
        asks
    }
}

#[cfg(test)]
mod tests;

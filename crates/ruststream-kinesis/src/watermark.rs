//! Contiguous-acknowledgement tracking for one shard: the checkpoint follows the longest settled
//! prefix of what was delivered, so an out-of-order ack never checkpoints past an unsettled record.

use std::collections::VecDeque;

use crate::SharedStr;

/// Which delivery of which generation a settlement is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Ticket {
    pub(crate) generation: u64,
    index: u64,
}

impl Ticket {
    /// The ticket of the delivery pushed right after this one's, with no seek between: the
    /// records a shard hands out at once take consecutive tickets, so they travel as a list of
    /// records and the first one's ticket rather than a ticket beside each.
    #[must_use]
    pub(crate) fn following(self) -> Self {
        Self {
            generation: self.generation,
            index: self.index + 1,
        }
    }

    /// This ticket and those following it, one after another: the tickets of a list of records
    /// handed out at once, this one the first's.
    pub(crate) fn onwards(self) -> impl Iterator<Item = Self> {
        std::iter::successors(Some(self), |ticket| Some(ticket.following()))
    }
}

#[derive(Debug)]
struct Pending<S> {
    /// What a checkpoint through this delivery records.
    sequence: SharedStr,
    settled: bool,
    /// Exactly once: what the delivery's handling staged, to commit with the checkpoint.
    staged: Option<Box<S>>,
}

/// What a delivery's staged part weighs in memory (exactly once: the bytes of its writes), so a
/// shard bounds what it holds uncommitted.
pub(crate) trait Weighed {
    fn weight(&self) -> usize;

    /// Whether the part belongs to a unit that spans shards: a joint commit of every shard's
    /// lease row commits it, never this shard's own.
    fn joint(&self) -> bool {
        false
    }
}

impl<S> Pending<S> {
    /// A delivery just handed out, whose settling lets the checkpoint record `sequence`.
    fn unsettled(sequence: SharedStr) -> Self {
        Self {
            sequence,
            settled: false,
            staged: None,
        }
    }
}

impl Weighed for () {
    fn weight(&self) -> usize {
        0
    }
}

/// The settled prefix of one shard's deliveries.
///
/// At least once, the prefix leaves the watermark as it grows, and its end is the checkpoint to
/// write. Exactly once, it stays until a commit covers it ([`committed`](Self::committed)): the
/// prefix is what the next commit folds ([`ready_run`](Self::ready_run)), and a delivery whose
/// commit was refused becomes unsettled again ([`unsettle`](Self::unsettle)), holding back every
/// later one.
#[derive(Debug)]
pub(crate) struct Watermark<S = ()> {
    generation: u64,
    /// Index of the first entry of `pending`.
    base: u64,
    pending: VecDeque<Pending<S>>,
    /// Exactly once: how many entries from the front are settled, waiting for their commit.
    ready: usize,
    /// How many of those staged writes.
    ready_staged: usize,
    /// What every delivery's staged part held here weighs, all told.
    staged_weight: usize,
    /// How many deliveries held here staged a part of a unit that spans shards.
    joint: usize,
}

impl<S> Default for Watermark<S> {
    fn default() -> Self {
        Self {
            generation: 0,
            base: 0,
            pending: VecDeque::new(),
            ready: 0,
            ready_staged: 0,
            staged_weight: 0,
            joint: 0,
        }
    }
}

impl<S: Weighed> Watermark<S> {
    /// Records a delivery whose settling lets the checkpoint record `sequence`, and returns its
    /// ticket.
    pub(crate) fn push(&mut self, sequence: SharedStr) -> Ticket {
        let index = self.base + self.pending.len() as u64;
        self.pending.push_back(Pending::unsettled(sequence));
        Ticket {
            generation: self.generation,
            index,
        }
    }

    /// Records the deliveries of a run handed out at once, in order, whose settling lets the
    /// checkpoint record each of `sequences`: as many [`push`](Self::push)es, their tickets
    /// following one another ([`Ticket::following`]) after the ticket a `push` would take now.
    /// Added together, with room made once, not checked for at each.
    pub(crate) fn push_run(&mut self, sequences: impl Iterator<Item = SharedStr>) {
        self.pending.extend(sequences.map(Pending::unsettled));
    }

    /// Where `ticket`'s delivery sits in `pending`, if it is of this generation and still there.
    #[inline]
    fn offset(&self, ticket: Ticket) -> Option<usize> {
        if ticket.generation != self.generation || ticket.index < self.base {
            return None;
        }
        let offset = usize::try_from(ticket.index - self.base).ok()?;
        (offset < self.pending.len()).then_some(offset)
    }

    /// Settles `ticket`; returns the new checkpoint when the settled prefix grew.
    #[inline(always)]
    pub(crate) fn settle(&mut self, ticket: Ticket) -> Option<SharedStr> {
        let offset = self.offset(ticket)?;
        self.pending[offset].settled = true;
        let mut checkpoint = None;
        while self.pending.front().is_some_and(|p| p.settled) {
            let done = self.pending.pop_front()?;
            self.base += 1;
            checkpoint = Some(done.sequence);
        }
        checkpoint
    }

    /// Exactly once: settles `ticket` with what its handling staged; whether the settled prefix
    /// waiting for its commit grew. The prefix stays until [`committed`](Self::committed).
    pub(crate) fn settle_staged(&mut self, ticket: Ticket, staged: Option<S>) -> bool {
        let Some(offset) = self.offset(ticket) else {
            return false;
        };
        let entry = &mut self.pending[offset];
        entry.settled = true;
        let weight = staged.as_ref().map_or(0, Weighed::weight);
        let before = entry.staged.as_deref().map_or(0, Weighed::weight);
        let joint = staged.as_ref().is_some_and(Weighed::joint);
        let was_joint = entry.staged.as_deref().is_some_and(Weighed::joint);
        entry.staged = staged.map(Box::new);
        self.staged_weight = self.staged_weight - before + weight;
        self.joint = self.joint - usize::from(was_joint) + usize::from(joint);
        let before = self.ready;
        while let Some(entry) = self.pending.get(self.ready).filter(|entry| entry.settled) {
            self.ready_staged += usize::from(entry.staged.is_some());
            self.ready += 1;
        }
        self.ready > before
    }

    /// Exactly once: the settled prefix waiting for its commit, in order: each delivery's
    /// checkpoint and what it staged.
    pub(crate) fn ready_run(&self) -> impl Iterator<Item = (&SharedStr, Option<&S>)> {
        self.pending
            .iter()
            .take(self.ready)
            .map(|entry| (&entry.sequence, entry.staged.as_deref()))
    }

    /// Exactly once: how many deliveries wait for their commit, and how many of them staged
    /// writes.
    pub(crate) fn ready(&self) -> (usize, usize) {
        (self.ready, self.ready_staged)
    }

    /// Exactly once: how many deliveries from the front of the settled prefix this shard's own
    /// commits may take (those before the first part of a unit that spans shards), and how many
    /// of them staged writes.
    pub(crate) fn ready_own(&self) -> (usize, usize) {
        if self.joint == 0 {
            return self.ready();
        }
        let mut own = (0, 0);
        for (_, staged) in self.ready_run() {
            if staged.is_some_and(Weighed::joint) {
                break;
            }
            own.0 += 1;
            own.1 += usize::from(staged.is_some());
        }
        own
    }

    /// Exactly once: a commit covered the first `entries` of the settled prefix; they leave.
    pub(crate) fn committed(&mut self, entries: usize) {
        for _ in 0..entries.min(self.ready) {
            if let Some(entry) = self.pending.pop_front() {
                self.ready_staged -= usize::from(entry.staged.is_some());
                self.staged_weight -= entry.staged.as_deref().map_or(0, Weighed::weight);
                self.joint -= usize::from(entry.staged.as_deref().is_some_and(Weighed::joint));
                self.ready -= 1;
                self.base += 1;
            }
        }
    }

    /// Exactly once: `ticket`'s commit was refused, so its delivery is unsettled again (to be
    /// delivered again under the same ticket) and what it staged is dropped; the settled prefix
    /// ends before it. What the delivery staged, if it was still there.
    pub(crate) fn unsettle(&mut self, ticket: Ticket) -> Option<S> {
        let offset = self.offset(ticket)?;
        let entry = &mut self.pending[offset];
        entry.settled = false;
        let staged = entry.staged.take().map(|staged| *staged);
        self.staged_weight -= staged.as_ref().map_or(0, Weighed::weight);
        self.joint -= usize::from(staged.as_ref().is_some_and(Weighed::joint));
        if offset < self.ready {
            self.ready = offset;
            self.ready_staged = self
                .pending
                .iter()
                .take(offset)
                .filter(|entry| entry.staged.is_some())
                .count();
        }
        staged
    }

    /// Exactly once: the tickets of the settled deliveries whose staged part `find` picks, in
    /// order (a batch's records of this shard stage one unit together).
    pub(crate) fn settled_tickets(&self, mut find: impl FnMut(&S) -> bool) -> Vec<Ticket> {
        self.pending
            .iter()
            .enumerate()
            .filter(|(_, entry)| entry.settled && entry.staged.as_deref().is_some_and(&mut find))
            .map(|(offset, _)| Ticket {
                generation: self.generation,
                index: self.base + offset as u64,
            })
            .collect()
    }

    /// Whether `tickets` are consecutive deliveries of this generation, in order: a batch's
    /// records of one shard, as its unit holds them.
    #[cfg(any(test, feature = "dynamodb-lease"))]
    pub(crate) fn consecutive(&self, tickets: impl IntoIterator<Item = Ticket>) -> bool {
        let mut next: Option<u64> = None;
        tickets.into_iter().all(|ticket| {
            let follows = ticket.generation == self.generation
                && next.is_none_or(|index| index == ticket.index);
            next = Some(ticket.index + 1);
            follows
        })
    }

    /// Whether the delivery under `ticket` is held here (of this generation, not yet settled
    /// for good).
    #[cfg(any(test, feature = "dynamodb-lease"))]
    pub(crate) fn holds(&self, ticket: Ticket) -> bool {
        self.offset(ticket).is_some()
    }

    /// The current generation.
    #[inline]
    pub(crate) fn generation(&self) -> u64 {
        self.generation
    }

    /// How many deliveries of this generation the settled prefix holds (exactly once, those
    /// waiting for their commit included).
    pub(crate) fn settled_prefix(&self) -> u64 {
        self.base + self.ready as u64
    }

    /// Whether every delivery was settled (exactly once: none went back after a refusal).
    pub(crate) fn all_settled(&self) -> bool {
        self.pending.iter().all(|entry| entry.settled)
    }

    /// How many deliveries the watermark holds: the oldest unsettled one and every one after it,
    /// and exactly once, every one not yet committed.
    pub(crate) fn unsettled(&self) -> usize {
        self.pending.len()
    }

    /// Forgets every delivery (a seek): settlements of the old generation move nothing.
    pub(crate) fn reset(&mut self) {
        self.generation += 1;
        self.base = 0;
        self.pending.clear();
        self.ready = 0;
        self.ready_staged = 0;
        self.staged_weight = 0;
        self.joint = 0;
    }

    /// Exactly once: every staged part held here, settled in order or not.
    #[cfg(any(test, feature = "dynamodb-lease"))]
    pub(crate) fn staged(&self) -> impl Iterator<Item = &S> {
        self.pending
            .iter()
            .filter_map(|entry| entry.staged.as_deref())
    }

    /// Exactly once: what the delivery under `ticket` staged, if it is held here.
    #[cfg(any(test, feature = "dynamodb-lease"))]
    pub(crate) fn staged_at(&self, ticket: Ticket) -> Option<&S> {
        self.pending[self.offset(ticket)?].staged.as_deref()
    }

    /// Exactly once: whether a delivery held here staged a part of a unit that spans shards.
    pub(crate) fn holds_joint(&self) -> bool {
        self.joint > 0
    }

    /// Exactly once: what the staged parts held here weigh, all told.
    pub(crate) fn staged_weight(&self) -> usize {
        self.staged_weight
    }
}

#[cfg(test)]
mod tests;

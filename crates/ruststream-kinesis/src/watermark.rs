//! Contiguous-acknowledgement tracking for one shard: the checkpoint follows the longest settled
//! prefix of what was delivered, so an out-of-order ack never checkpoints past an unsettled record.

use std::collections::VecDeque;
use std::sync::Arc;

/// Which delivery of which generation a settlement is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ticket {
    pub(crate) generation: u64,
    index: u64,
}

#[derive(Debug)]
struct Pending {
    /// What a checkpoint through this delivery records.
    sequence: Arc<str>,
    settled: bool,
}

/// The settled prefix of one shard's deliveries.
#[derive(Debug, Default)]
pub(crate) struct Watermark {
    generation: u64,
    /// Index of the first entry of `pending`.
    base: u64,
    pending: VecDeque<Pending>,
}

impl Watermark {
    /// Records a delivery whose settling lets the checkpoint record `sequence`, and returns its
    /// ticket.
    pub(crate) fn push(&mut self, sequence: Arc<str>) -> Ticket {
        let index = self.base + self.pending.len() as u64;
        self.pending.push_back(Pending {
            sequence,
            settled: false,
        });
        Ticket {
            generation: self.generation,
            index,
        }
    }

    /// Settles `ticket`; returns the new checkpoint when the settled prefix grew.
    pub(crate) fn settle(&mut self, ticket: Ticket) -> Option<Arc<str>> {
        if ticket.generation != self.generation || ticket.index < self.base {
            return None;
        }
        let offset = usize::try_from(ticket.index - self.base).ok()?;
        self.pending.get_mut(offset)?.settled = true;
        let mut checkpoint = None;
        while self.pending.front().is_some_and(|p| p.settled) {
            let done = self.pending.pop_front()?;
            self.base += 1;
            checkpoint = Some(done.sequence);
        }
        checkpoint
    }

    /// The current generation.
    pub(crate) fn generation(&self) -> u64 {
        self.generation
    }

    /// How many deliveries of this generation the settled prefix holds.
    pub(crate) fn settled_prefix(&self) -> u64 {
        self.base
    }

    /// Whether every delivery was settled.
    #[cfg(test)]
    pub(crate) fn is_drained(&self) -> bool {
        self.pending.is_empty()
    }

    /// How many deliveries the watermark holds: the oldest unsettled one and every one after it.
    pub(crate) fn unsettled(&self) -> usize {
        self.pending.len()
    }

    /// Forgets every delivery (a seek): settlements of the old generation move nothing.
    pub(crate) fn reset(&mut self) {
        self.generation += 1;
        self.base = 0;
        self.pending.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seq(n: u32) -> Arc<str> {
        Arc::from(n.to_string())
    }

    #[test]
    fn in_order_acks_move_the_checkpoint_one_by_one() {
        let mut mark = Watermark::default();
        let a = mark.push(seq(1));
        let b = mark.push(seq(2));
        assert_eq!(mark.settle(a).as_deref(), Some("1"));
        assert_eq!(mark.settle(b).as_deref(), Some("2"));
        assert!(mark.is_drained());
    }

    #[test]
    fn an_out_of_order_ack_waits_for_the_gap() {
        let mut mark = Watermark::default();
        let a = mark.push(seq(1));
        let b = mark.push(seq(2));
        let c = mark.push(seq(3));
        assert_eq!(mark.settle(c), None);
        assert_eq!(mark.settle(b), None);
        assert_eq!(mark.unsettled(), 3);
        assert_eq!(mark.settle(a).as_deref(), Some("3"));
        assert!(mark.is_drained());
    }

    #[test]
    fn a_reset_ignores_settlements_of_the_old_generation() {
        let mut mark = Watermark::default();
        let old = mark.push(seq(1));
        mark.reset();
        let new = mark.push(seq(7));
        assert_eq!(mark.settle(old), None);
        assert_eq!(mark.settle(new).as_deref(), Some("7"));
    }

    #[test]
    fn a_double_settlement_moves_nothing() {
        let mut mark = Watermark::default();
        let a = mark.push(seq(1));
        assert!(mark.settle(a).is_some());
        assert_eq!(mark.settle(a), None);
    }
}

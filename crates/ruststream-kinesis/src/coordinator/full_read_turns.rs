//! Whose turn it is to read every row of the stream for the full-read cadence, where several
//! instances share it (issue 29): the instances alive by their beats take turns, one full-read
//! interval each, in the order of their owner ids, so that the fleet reads every row once an
//! interval between them, and each instance at least every (instances + 1) intervals. With no
//! I/O and no clock of its own.
//!
//! Why turns: the full read is a Scan of the stream's rows, about 600 read units at 10,000 rows;
//! a hundred instances each reading them every 5 minutes cost about $33 a month, by turns about
//! 33 cents. What the full read is for is the fleet's, not each instance's: it catches what no
//! signal tells (`machine/steady.rs`), and what it catches is a row anyone may act on. A release
//! whose bump of the notice failed leaves a free row, which the instance whose turn it is takes
//! at once (a row free that long is taken by whoever lists it, whatever its share), and the
//! balance moves it on as it moves any shard. Its hygiene (the deletions) is anyone's too. What
//! only an instance's own read would see is a row that names it as the holder of a shard it does
//! not read: changed by hand, or handed over to it after its request ran out, the hand-over's
//! bump failed. For the second, an instance that asked for a handoff reads every row once more
//! when the request can no longer be answered (`Hygiene::read_owed_from`: its lifetime, the
//! drain, two leases and twice the skew tolerance after the ask, 57 s by default, and it reads
//! them consistent); the first
//! waits for its turn.
//!
//! The slots are cut from the wall clock (epoch milliseconds), so that instances with the same
//! listing interval agree on them within their skew (with different intervals, slots overlap
//! or go unread: only the cost and the fleet's bound differ, each instance still reads at its
//! own turn); an instance that does not see its own beat among the live ones (it does
//! not beat, or no whole read showed it yet) reads alone, every interval, as without turns.

/// This instance's place among the instances alive by their beats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Turn {
    /// How many owner ids sort before this instance's among the live ones.
    rank: u64,
    /// How many are live, this instance's among them.
    of: u64,
}

impl Turn {
    /// Reading alone: every interval.
    pub(crate) const ALONE: Self = Self { rank: 0, of: 1 };

    /// `owner`'s turn among `live` (the owner ids alive by their beats, each once, in any order):
    /// alone when `owner` is not among them.
    pub(crate) fn among<'a>(owner: &str, live: impl Iterator<Item = &'a str>) -> Self {
        let (mut rank, mut of, mut mine) = (0, 0, false);
        for other in live {
            of += 1;
            if other == owner {
                mine = true;
            } else if other < owner {
                rank += 1;
            }
        }
        if mine { Self { rank, of } } else { Self::ALONE }
    }

    /// How many instances take turns (one when alone).
    pub(crate) fn instances(self) -> u64 {
        self.of
    }

    /// The wall-clock moment (epoch ms) from which this instance's next full read is due by its
    /// turn, with slots of `every_ms` and its last full read at `last_ms`: the start of its
    /// latest slot begun by `now_ms` if it has not read every row since (due now), else the start
    /// of its next one.
    pub(crate) fn due_from_ms(self, every_ms: u64, now_ms: u64, last_ms: u64) -> u64 {
        let every_ms = every_ms.max(1);
        let slot = now_ms / every_ms;
        // How many slots back this turn's latest slot began: (slot - rank) modulo the instances.
        let back = (slot % self.of + self.of - self.rank % self.of) % self.of;
        let latest = slot.saturating_sub(back).saturating_mul(every_ms);
        if last_ms < latest {
            latest
        } else {
            latest.saturating_add(self.of.saturating_mul(every_ms))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EVERY: u64 = 300_000;

    #[test]
    fn an_instance_reads_alone_until_it_sees_its_own_beat_among_the_live_ones() {
        assert_eq!(Turn::among("b", ["a", "c"].into_iter()), Turn::ALONE);
        let turn = Turn::among("b", ["c", "b", "a"].into_iter());
        assert_eq!(turn, Turn { rank: 1, of: 3 });
        assert_eq!(turn.instances(), 3);
    }

    #[test]
    fn alone_the_next_read_is_due_at_the_next_slot() {
        let now = 10 * EVERY + 5;
        assert_eq!(Turn::ALONE.due_from_ms(EVERY, now, now - 1), 11 * EVERY);
        assert_eq!(
            Turn::ALONE.due_from_ms(EVERY, now, 10 * EVERY - 1),
            10 * EVERY,
            "not read since its slot began: due now"
        );
    }

    #[test]
    fn three_instances_read_one_slot_each_in_the_order_of_their_owner_ids() {
        let live = ["a", "b", "c"];
        let turns = live.map(|owner| Turn::among(owner, live.into_iter()));
        // Slot 30 begins; each read every row just before it.
        let now = 30 * EVERY + 1;
        let due = turns.map(|turn| turn.due_from_ms(EVERY, now, 30 * EVERY - 10));
        assert_eq!(due, [30 * EVERY, 31 * EVERY, 32 * EVERY]);
        // Between them every slot is someone's, and each instance's every third.
        let mut slots: Vec<u64> = due.iter().map(|due| due / EVERY).collect();
        slots.sort_unstable();
        assert_eq!(slots, [30, 31, 32]);
        let a_after = turns[0].due_from_ms(EVERY, now, now);
        assert_eq!(
            a_after,
            33 * EVERY,
            "a's next turn, having read in its slot"
        );
    }

    #[test]
    fn a_wall_clock_near_zero_does_not_underflow() {
        let turn = Turn { rank: 2, of: 3 };
        assert!(turn.due_from_ms(EVERY, 5, 0) <= 3 * EVERY);
        assert_eq!(
            turn.due_from_ms(0, 5, 0),
            5,
            "a zero interval is taken as 1 ms"
        );
    }
}

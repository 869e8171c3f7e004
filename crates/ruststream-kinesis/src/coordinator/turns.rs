//! Whose turn a free shard is among instances that do not balance the shards, pure: each shard
//! never taken (no row, and no parent listed) is one live instance's to take first, the one whose
//! weight for it is highest (rendezvous hashing), and the others leave it alone for a grace
//! and the time the fleet's take budget needs (as a balancing instance leaves the shards it has
//! no room for). Without it, every instance of a fleet that starts together plans every free
//! shard in the same order and they race for the same ones: at 2,000 shards and 20 instances,
//! 3,001 takes for 2,000 shards and 5,002 writes in the first second, and by beat at 5,000 x 50
//! about 10 shards a second once the first 2,200 were read (the simulation found).
//!
//! Why rendezvous: each instance judges a shard by the shard's id and the instances it knows
//! alive, never by the other free shards, so instances that read the rows at different moments
//! still agree, and one that joins or leaves moves only the shards whose turn it wins or had.
//! The weight hashes the owner id and the shard id with a fixed function (FNV-1a, then the
//! SplitMix64 finisher), the same on every build, so instances of different builds agree too.

/// The turns of the free shards, as one instance knows the live instances.
#[derive(Debug, Clone)]
pub(crate) struct Turns {
    /// This instance's key.
    mine: u64,
    /// The other live instances' keys.
    others: Vec<u64>,
}

impl Turns {
    /// The turns of `owner` among itself and `others` (the other instances alive by their
    /// beats).
    pub(crate) fn new<'a>(owner: &str, others: impl IntoIterator<Item = &'a str>) -> Self {
        Self {
            mine: key(owner),
            others: others
                .into_iter()
                .filter(|other| *other != owner)
                .map(key)
                .collect(),
        }
    }

    /// Whether no other instance is known: every free shard is this one's turn.
    pub(crate) fn alone(&self) -> bool {
        self.others.is_empty()
    }

    /// Whether free `shard` is this instance's turn: no other live instance weighs it more (a
    /// tie, one chance in 2^64, makes it both's, and their takes' conditions decide).
    pub(crate) fn is_mine(&self, shard: &str) -> bool {
        let shard = key(shard);
        let mine = weight(self.mine, shard);
        self.others
            .iter()
            .all(|&other| weight(other, shard) <= mine)
    }

    /// This instance's weight for `shard`: the order in which it tries shards that go by no
    /// turn, so that instances start at different ones.
    pub(crate) fn weight(&self, shard: &str) -> u64 {
        weight(self.mine, key(shard))
    }
}

/// An instance's weight for a shard.
fn weight(instance: u64, shard: u64) -> u64 {
    finish(instance ^ finish(shard))
}

/// FNV-1a, 64 bits.
fn key(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// SplitMix64's finisher: every bit of the input moves about half the output's.
fn finish(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

#[cfg(test)]
mod tests;

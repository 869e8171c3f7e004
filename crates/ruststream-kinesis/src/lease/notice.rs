//! The stream's notice: one small row per stream, apart from its shards' rows, that tells the
//! instances waiting for a shard when the shards' rows are worth reading. A release bumps its
//! counter; each instance that shares the stream's shards keeps a beat in it (how long it is
//! alive, by its own clock). An instance waiting for a shard reads this one row each handover
//! poll and reads the shards' rows only when the counter moved, or when a holder's beat lapsed
//! and that holder's lease may have run out: its steady cost does not grow with the table.

use std::collections::BTreeMap;

use super::SKEW_TOLERANCE;

/// What a stream's notice row holds, as [`LeaseStore::notice`](crate::LeaseStore::notice)
/// reads it.
///
/// The row is a hint, never the authority: the shards' rows decide who may take what. A bump
/// that is lost, or a beat that is not written, only means the waiting instances find the shard
/// later than their next poll: at the next listing round that reads the rows (another sign of
/// a change, such as the releaser's own next round or its beat lapsing, or the read of every
/// row that comes at least every 30 listing intervals).
///
/// # Examples
///
/// ```
/// use ruststream_kinesis::Notice;
///
/// let mut notice = Notice::default();
/// notice.beats.insert("pod-a".to_owned(), 10_000);
/// assert!(notice.is_alive("pod-a", 10_500));
/// // A beat counts as lapsed once it lies more than the skew tolerance (1 s) in the past.
/// assert!(!notice.is_alive("pod-a", 11_001));
/// assert!(!notice.is_alive("pod-b", 0));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Notice {
    /// Bumped by every release of a shard of the stream (a stop, a shard read to its end, a
    /// take handing a shard back).
    pub counter: u64,
    /// Each instance's beat: until when (epoch milliseconds, by its own clock) it is alive.
    pub beats: BTreeMap<String, u64>,
    /// Under each owner id, the run that recorded itself last
    /// ([`LeaseStore::announce`](crate::LeaseStore::announce)): `<started ms>-<nonce>@<written
    /// ms>`. A run that finds another one here after its own record landed knows a second
    /// instance runs under its owner id, and the later of the two pauses until the earlier is
    /// gone.
    pub incarnations: BTreeMap<String, String>,
    /// Under each holder, how many times handoffs were marked as asked of it
    /// ([`LeaseStore::mark_asked`](crate::LeaseStore::mark_asked), after the requests landed in
    /// the rows): a holder kept alive by its beat writes nothing while idle, so it learns of a
    /// request here, at its poll (the count changed since it last looked), and then reads its
    /// rows. Forgotten with its holder, as its beat is.
    pub asks: BTreeMap<String, u64>,
    /// The layout of the notice that the instances on the stream write, where one wrote it:
    /// `None` is this version's ([`NOTICE_LAYOUT`]), which writes none. A version that keeps
    /// the notice otherwise (its beats in items of their own, say) writes its layout here, and
    /// an instance of this version refuses to share the stream with it: each would miss the
    /// other's beats. `Some(0)`: one that cannot be read (not a whole number), refused as
    /// another.
    pub layout: Option<u64>,
}

/// The layout of the stream's notice this version reads and writes: one row holding the
/// counter, every instance's beat, run record and count of marks.
pub const NOTICE_LAYOUT: u64 = 1;

/// The layout of a notice kept in several rows, its head (the counter, the marks, the layout)
/// apart from the beats and the runs' records, so that the handover poll reads the head alone
/// while the beats it last read say who is alive
/// ([`LeaseStore::keeps_notice_head_apart`](crate::LeaseStore::keeps_notice_head_apart);
/// `DynamoLeaseStore::keep_notice_head_apart`). A store of one layout and a store of the other
/// refuse to share a stream.
pub const NOTICE_LAYOUT_APART: u64 = 2;

#[cfg(test)]
impl Notice {
    /// A notice at counter 1 with a beat of each of `owners` until `until_ms`.
    pub(crate) fn beating(owners: &[&str], until_ms: u64) -> Self {
        Self {
            counter: 1,
            beats: owners
                .iter()
                .map(|owner| ((*owner).to_owned(), until_ms))
                .collect(),
            ..Self::default()
        }
    }
}

impl Notice {
    /// The layout this notice says its instances write, when it is another than this
    /// version's ([`NOTICE_LAYOUT`]).
    ///
    /// ```
    /// use ruststream_kinesis::Notice;
    ///
    /// let mut notice = Notice::default();
    /// assert_eq!(notice.other_layout(), None);
    /// notice.layout = Some(2);
    /// assert_eq!(notice.other_layout(), Some(2));
    /// ```
    #[must_use]
    pub fn other_layout(&self) -> Option<u64> {
        self.other_layout_than(NOTICE_LAYOUT)
    }

    /// The layout this notice says its instances write, when it is another than `mine`: what
    /// [`other_layout`](Self::other_layout) says for a store of layout `mine`.
    ///
    /// ```
    /// use ruststream_kinesis::{NOTICE_LAYOUT, NOTICE_LAYOUT_APART, Notice};
    ///
    /// let mut notice = Notice::default();
    /// notice.layout = Some(NOTICE_LAYOUT_APART);
    /// assert_eq!(notice.other_layout_than(NOTICE_LAYOUT_APART), None);
    /// notice.layout = Some(NOTICE_LAYOUT);
    /// assert_eq!(notice.other_layout_than(NOTICE_LAYOUT_APART), Some(NOTICE_LAYOUT));
    /// ```
    #[must_use]
    pub fn other_layout_than(&self, mine: u64) -> Option<u64> {
        self.layout.filter(|&layout| layout != mine)
    }

    /// The layout the head of a notice kept apart says at `now_ms`: the one-row layout
    /// ([`NOTICE_LAYOUT`]) while a beat in the head itself runs, whatever layout the head
    /// names (an instance of that layout keeps its beats there, and the two cannot share the
    /// stream; the layout written may be a stopped fleet's), else the one written there, if
    /// any.
    #[cfg(any(test, feature = "dynamodb-lease"))]
    pub(crate) fn head_layout(&self, now_ms: u64) -> Option<u64> {
        if self.any_alive(now_ms) {
            return Some(NOTICE_LAYOUT);
        }
        self.layout
    }

    /// Whether any beat of this notice runs at `now_ms` ([`is_alive`](Self::is_alive)).
    #[cfg(any(test, feature = "dynamodb-lease"))]
    pub(crate) fn any_alive(&self, now_ms: u64) -> bool {
        self.beats.keys().any(|owner| self.is_alive(owner, now_ms))
    }

    /// Whether `owner`'s beat still runs at `now_ms`, judged as lease expiries are: it lapses once
    /// it lies more than [`SKEW_TOLERANCE`] in the past.
    #[must_use]
    pub fn is_alive(&self, owner: &str, now_ms: u64) -> bool {
        self.beats
            .get(owner)
            .is_some_and(|&until| until.saturating_add(super::millis(SKEW_TOLERANCE)) >= now_ms)
    }
}

impl Notice {
    /// Removes `owner`'s beat and bumps the counter, as a store's `leave_beat` does: unless the
    /// beat stands later than `until_ms`.
    pub(crate) fn leave_beat(&mut self, owner: &str, until_ms: u64) {
        if self.beats.get(owner).is_some_and(|&beat| beat > until_ms) {
            return;
        }
        self.beats.remove(owner);
        self.counter += 1;
    }

    /// Marks handoffs asked of `holder`, as a store does after the requests landed in the rows.
    pub(crate) fn mark_asked(&mut self, holder: &str) {
        *self.asks.entry(holder.to_owned()).or_insert(0) += 1;
    }

    /// Removes the beats, the records and the asks of `forget` (but `owner`, the writer) as a
    /// store does with a beat or a record written at `now_ms` by its clock: all of them, only if
    /// every one of their beats lapsed more than [`SKEW_TOLERANCE`] ago (or there is none); else
    /// nothing.
    /// An instance judged gone on an older read that has beaten since keeps its beat: an
    /// instance kept alive by its beat counts on it, and a removal would show it lapsed.
    pub(crate) fn forget_gone(&mut self, owner: &str, forget: &[String], now_ms: u64) {
        let cutoff = now_ms.saturating_sub(super::millis(SKEW_TOLERANCE));
        let gone = || forget.iter().filter(|gone| *gone != owner);
        if gone().any(|gone| self.beats.get(gone).is_some_and(|&until| until >= cutoff)) {
            return;
        }
        for gone in gone() {
            self.beats.remove(gone);
            self.incarnations.remove(gone);
            self.asks.remove(gone);
        }
    }
}

/// Between a stream's name and the suffix of its notice row's key. Neither a stream name nor a
/// shard id holds it, so no shard's row is ever mistaken for a notice, nor a notice for a row.
#[cfg(any(test, feature = "dynamodb-lease"))]
pub(crate) const NOTICE_SUFFIX: &str = "#notice";

/// The key (`lease_key`) of `stream`'s notice row: the whole notice in the one-row layout, its
/// head in [`NOTICE_LAYOUT_APART`].
#[cfg(any(test, feature = "dynamodb-lease"))]
pub(crate) fn notice_key(stream: &str) -> String {
    format!("{stream}{NOTICE_SUFFIX}")
}

/// How many rows hold a stream's beats in [`NOTICE_LAYOUT_APART`]: each instance beats into the
/// row of its group ([`beat_group`]), so that a row stays under 1 KB (one write unit a beat)
/// with about 20 instances in it, 160 in all, and a whole read reads each once.
#[cfg(any(test, feature = "dynamodb-lease"))]
pub(crate) const BEAT_GROUPS: u32 = 8;

/// The group of `owner`'s beat: FNV-1a of its bytes, mixed by MurmurHash3's finalizer (FNV's
/// low bits follow only the low bits of each byte, so `pod-a` and `pod-q` would share a group),
/// modulo [`BEAT_GROUPS`]; the same in every build and on every platform, since every instance
/// must find every other's beat there.
#[cfg(any(test, feature = "dynamodb-lease"))]
pub(crate) fn beat_group(owner: &str) -> u32 {
    let mut hash = owner.bytes().fold(0x811c_9dc5_u32, |hash, byte| {
        (hash ^ u32::from(byte)).wrapping_mul(0x0100_0193)
    });
    hash ^= hash >> 16;
    hash = hash.wrapping_mul(0x85eb_ca6b);
    hash ^= hash >> 13;
    hash = hash.wrapping_mul(0xc2b2_ae35);
    hash ^= hash >> 16;
    hash % BEAT_GROUPS
}

/// The key of the row of `stream`'s beats of `group` in [`NOTICE_LAYOUT_APART`]. It ends as
/// every notice row does, so that the Scans of every version since the notice skip it.
#[cfg(any(test, feature = "dynamodb-lease"))]
pub(crate) fn beats_key(stream: &str, group: u32) -> String {
    format!("{stream}#beats{group}{NOTICE_SUFFIX}")
}

/// The key of the row of `stream`'s runs' records in [`NOTICE_LAYOUT_APART`].
#[cfg(any(test, feature = "dynamodb-lease"))]
pub(crate) fn runs_key(stream: &str) -> String {
    format!("{stream}#runs{NOTICE_SUFFIX}")
}

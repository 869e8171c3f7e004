//! What the handover poll keeps between listings so that its steady cost is one read of the
//! stream's [`Notice`], whatever the size of the table: the notice's counter as of the rows it
//! last read, those rows, and the rules on a notice just read. The shards' rows are read again
//! only when the counter moved (a release landed since), or when the rows as last read, with
//! each live holder's lease counted as lasting at least as long as its beat, show a shard this
//! instance could take now (a holder whose beat lapsed may have let its lease run out too; a
//! shard of a failed take is out of its backoff). Its own beat it writes while another instance
//! may be waiting on it.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use super::plan::Rows;
use super::twins::{Incarnation, TwinNews};
use crate::LeaseTimings;
use crate::lease::{Notice, millis};

/// A beat lapsed this long ago, or a run's record (of an instance without a beat) not written
/// for this long, belongs to an instance that is gone: the next beat or record written removes
/// it, so the notice row stays small.
pub(crate) const FORGET_AFTER: Duration = Duration::from_secs(300);

/// At most this many gone instances are removed by one write: the expression stays small.
const FORGET_AT_ONCE: usize = 20;

/// The beat to write: alive until `until_ms`, and the lapsed beats to remove.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Beat {
    pub(crate) until_ms: u64,
    pub(crate) forget: Vec<String>,
}

/// What a notice just read asks for, in this order.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Noticed {
    /// What this run learned of another run under its owner id ([`twins`](super::twins)).
    pub(crate) twin: Option<TwinNews>,
    /// Write this run's record ([`LeaseStore::announce`](crate::LeaseStore::announce)).
    pub(crate) record: bool,
    /// Write this instance's beat.
    pub(crate) beat: Option<Beat>,
    /// Read the rows of the shards the poll waits for.
    pub(crate) read_rows: bool,
    /// By beat: the notice counts this many marks of handoffs asked of this run, another count
    /// than the one it acted on: read the rows and hand those asked of it to their readers.
    pub(crate) asked: Option<u64>,
}

/// The handover poll's memory between listings.
#[derive(Debug, Default)]
pub(crate) struct Watch {
    /// The store keeps no notices: every poll reads the rows.
    unsupported: bool,
    /// The notice's counter when the poll last read the rows, or found nothing to wait for;
    /// `None` before the first notice.
    seen: Option<u64>,
    /// The counter of the notice whose rows are being read: seen once they were.
    reading: Option<u64>,
    /// The rows of the shards waited for, as the last round or poll read them.
    rows: Rows,
    /// The beats of the last notice read.
    beats: BTreeMap<String, u64>,
    /// The last notice read, whose gone instances a record written removes.
    last: Notice,
}

impl Watch {
    /// Whether the store keeps notices (as far as the poll knows).
    pub(crate) fn uses_notices(&self) -> bool {
        !self.unsupported
    }

    /// The rows of the shards waited for, as last read.
    pub(crate) fn rows(&self) -> &Rows {
        &self.rows
    }

    /// A notice was read: the last one known.
    pub(crate) fn notice_read(&mut self, notice: &Notice) {
        self.last.clone_from(notice);
    }

    /// A read of the notice's head alone that shows the latest writes: its counter, marks and
    /// layout replace those of the last notice known, whose beats and runs' records stay;
    /// answers that notice.
    pub(crate) fn head_read(&mut self, head: &Notice) -> Notice {
        self.last.counter = head.counter;
        self.last.asks.clone_from(&head.asks);
        self.last.layout = head.layout;
        self.last.clone()
    }

    /// A read that may be behind the latest writes (`LeaseStore::notice_eventually`, or a head
    /// alone: `whole` false, whose beats and runs' records are those of the last notice known):
    /// merged with the last notice known and answered. Its counter, its marks and `owner`'s own
    /// beat never move back: a read behind that showed them older after a newer one would have
    /// the poll take an old counter for a moved one (and read every row), or its own beat for
    /// one running out (and beat again). A consistent read replaces all
    /// ([`notice_read`](Self::notice_read)). Also answers whether the read showed the counter,
    /// or `owner`'s count of marks, lower than known: a read behind, or a notice written
    /// afresh (a row removed and written again starts from zero), which only a consistent read
    /// tells apart.
    pub(crate) fn read_behind(
        &mut self,
        notice: &Notice,
        owner: &str,
        whole: bool,
    ) -> (Notice, bool) {
        let marks = |of: &Notice| of.asks.get(owner).copied().unwrap_or(0);
        let went_back = notice.counter < self.last.counter || marks(notice) < marks(&self.last);
        let mut merged = if whole {
            notice.clone()
        } else {
            Notice {
                counter: notice.counter,
                asks: notice.asks.clone(),
                layout: notice.layout,
                ..self.last.clone()
            }
        };
        merged.counter = merged.counter.max(self.last.counter);
        for (holder, &marks) in &self.last.asks {
            let count = merged.asks.entry(holder.clone()).or_insert(marks);
            *count = (*count).max(marks);
        }
        if let Some(&mine) = self.last.beats.get(owner) {
            let beat = merged.beats.entry(owner.to_owned()).or_insert(mine);
            *beat = (*beat).max(mine);
        }
        self.last.clone_from(&merged);
        (merged, went_back)
    }

    /// `owner`'s own beat until `until_ms` landed: the last notice known shows it (unless it
    /// shows a later one: a beat never moves back).
    pub(crate) fn own_beat_landed(&mut self, owner: &str, until_ms: u64) {
        let beat = self.last.beats.entry(owner.to_owned()).or_insert(until_ms);
        *beat = (*beat).max(until_ms);
    }

    /// The last notice read (an empty one before the first).
    pub(crate) fn notice(&self) -> &Notice {
        &self.last
    }

    /// A notice was read: its beats are the instances known alive, for balancing.
    pub(crate) fn beats_read(&mut self, notice: &Notice) {
        self.beats.clone_from(&notice.beats);
    }

    /// The instances whose beat in the last notice read is live at `now_ms`.
    pub(crate) fn live_beats(&self, now_ms: u64) -> impl Iterator<Item = &str> {
        let notice_skew = millis(crate::SKEW_TOLERANCE);
        self.beats
            .iter()
            .filter(move |&(_, &until)| until.saturating_add(notice_skew) >= now_ms)
            .map(|(owner, _)| owner.as_str())
    }

    /// The store answered that it keeps no notices.
    pub(crate) fn unsupported(&mut self) {
        self.unsupported = true;
    }

    /// A round read `rows`: every row it waits for, in place of what was known.
    pub(crate) fn round_read(&mut self, rows: &Rows) {
        self.rows.clone_from(rows);
    }

    /// A poll read `rows`: newer than what was known of them, and the counter of the notice
    /// that asked for them is seen.
    pub(crate) fn poll_read(&mut self, rows: &Rows) {
        for (shard, row) in rows {
            self.rows.insert(Arc::clone(shard), row.clone());
        }
        if let Some(counter) = self.reading.take() {
            self.seen = Some(counter);
        }
    }

    /// The rows as last read, each held by a live instance other than `owner` counted as
    /// lasting at least until that instance's beat: what `notice` lets the poll assume without
    /// reading them.
    pub(crate) fn hinted_rows(&self, notice: &Notice, owner: &str, now_ms: u64) -> Rows {
        let mut rows = self.rows.clone();
        for row in rows.values_mut().flatten() {
            let Some(holder) = row.owner.as_deref() else {
                continue;
            };
            if holder != owner && notice.is_alive(holder, now_ms) {
                row.expiry_ms = row.expiry_ms.max(notice.beats[holder]);
            }
        }
        rows
    }

    /// The poll's read of the rows failed, and a round reads them in its place (row by row where
    /// a `list` fails): the counter that asked for them is seen.
    pub(crate) fn poll_failed(&mut self) {
        if let Some(counter) = self.reading.take() {
            self.seen = Some(counter);
        }
    }

    /// Whether the rows must be read because of `notice`'s counter: it moved since the rows were
    /// last read (a release landed), or this is the first notice. The counter is seen once the
    /// rows were read ([`poll_read`](Self::poll_read)) or a round took over the read
    /// ([`poll_failed`](Self::poll_failed)). While the poll waits for nothing (`watching` false)
    /// no rows are needed, and it is seen at once.
    pub(crate) fn counter_moved(&mut self, notice: &Notice, watching: bool) -> bool {
        if !watching {
            self.seen = Some(notice.counter);
            return false;
        }
        self.reading = Some(notice.counter);
        self.seen != Some(notice.counter)
    }
}

/// `rows` as the plan judges the rows kept alive by their holders' beats
/// ([`LeaseState::is_kept_by_beat`](crate::LeaseState::is_kept_by_beat)): each lasts until its
/// holder's beat in `notice`, or has lapsed when the notice has none, so that `plan::verdict`,
/// the balance and the weighing judge it as any row by its expiry. Only a nomination: a
/// take-over reads the notice again before it writes (`Take::judged`). Borrowed as they are when
/// no row is kept by beat.
pub(crate) fn judged_by_beats<'r>(rows: &'r Rows, notice: &Notice, now_ms: u64) -> Cow<'r, Rows> {
    let kept = |row: &Option<crate::LeaseState>| {
        row.as_ref().is_some_and(|row| row.is_kept_by_beat(now_ms))
    };
    if !rows.values().any(kept) {
        return Cow::Borrowed(rows);
    }
    let mut judged = rows.clone();
    for row in judged.values_mut().flatten() {
        if !row.is_kept_by_beat(now_ms) {
            continue;
        }
        let beat = row
            .owner
            .as_deref()
            .and_then(|holder| notice.beats.get(holder));
        row.expiry_ms = beat.copied().unwrap_or(0);
    }
    Cow::Owned(judged)
}

/// The beat `owner` writes on reading `notice` at `now_ms`, if any: while it waits for a shard
/// another instance holds (`watching`: so the holders beat), or reads shards (`holding`) while
/// another instance's beat runs; when its own beat is missing or runs out within half a lease.
/// A lone instance writes none.
pub(crate) fn beat_due(
    notice: &Notice,
    owner: &str,
    watching: bool,
    holding: bool,
    timings: &LeaseTimings,
    now_ms: u64,
) -> Option<Beat> {
    let others = notice
        .beats
        .keys()
        .any(|other| other != owner && notice.is_alive(other, now_ms));
    if !(watching || holding && others) {
        return None;
    }
    let lease = millis(timings.lease());
    let fresh = notice
        .beats
        .get(owner)
        .is_some_and(|&until| until >= now_ms.saturating_add(lease / 2));
    if fresh {
        return None;
    }
    Some(Beat {
        until_ms: now_ms.saturating_add(lease),
        forget: gone_instances(notice, owner, now_ms),
    })
}

/// The instances other than `owner` that `notice` still names and that are gone by `now_ms`:
/// a beat lapsed [`FORGET_AFTER`] ago, or, for one without a beat, a run's record not written
/// for as long (a live run writes its again well before: `twins::REFRESH`). At most
/// [`FORGET_AT_ONCE`]: a write removes them, and the next write the rest.
pub(crate) fn gone_instances(notice: &Notice, owner: &str, now_ms: u64) -> Vec<String> {
    let before = now_ms.saturating_sub(millis(FORGET_AFTER));
    let lapsed = notice
        .beats
        .iter()
        .filter(|&(_, &until)| until < before)
        .map(|(other, _)| other);
    let unwritten = notice.incarnations.iter().filter_map(|(other, record)| {
        let stale = Incarnation::parse_record(record).is_none_or(|(_, written)| written < before);
        (stale && !notice.beats.contains_key(other)).then_some(other)
    });
    lapsed
        .chain(unwritten)
        .filter(|&other| other != owner)
        .take(FORGET_AT_ONCE)
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests;

//! A [`LeaseStore`] that counts the calls it forwards, by kind: what the lease-table figures read.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use ruststream_kinesis::{DynamoLeaseStore, LeaseFuture, LeaseKey, LeaseState, LeaseStore, Notice};

/// The kinds of call a store receives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Call {
    Acquire,
    Renew,
    Checkpoint,
    CheckpointAndRenew,
    Release,
    Read,
    List,
    /// A read of the stream's notice row.
    Notice,
    /// A write of this instance's beat in the stream's notice row (unconditional).
    Beat,
    /// An instance's leave: its beat removed, the notice bumped.
    Leave,
    /// A request for a handoff (a conditional write that bumps no counter).
    AskHandoff,
    /// A handoff's write: the final checkpoint and the new owner in one write.
    HandOver,
    /// A run's record under its owner id in the stream's notice row (unconditional): at start,
    /// every two and a half minutes, and in answer to another run under the same owner id.
    Announce,
    /// The marks of a round's requests for handoffs in the stream's notice row (by beat).
    MarkAsked,
}

/// How many kinds of call there are.
const KINDS: usize = 14;

impl Call {
    pub const ALL: [Self; KINDS] = [
        Self::Acquire,
        Self::Renew,
        Self::Checkpoint,
        Self::CheckpointAndRenew,
        Self::Release,
        Self::Read,
        Self::List,
        Self::Notice,
        Self::Beat,
        Self::Leave,
        Self::AskHandoff,
        Self::HandOver,
        Self::Announce,
        Self::MarkAsked,
    ];

    /// Whether the call writes to the table (a beat is the one unconditional write).
    pub fn is_write(self) -> bool {
        !matches!(self, Self::Read | Self::List | Self::Notice)
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Acquire => "acquire",
            Self::Renew => "renew",
            Self::Checkpoint => "checkpoint",
            Self::CheckpointAndRenew => "checkpoint+renew",
            Self::Release => "release",
            Self::Read => "read",
            Self::List => "list",
            Self::Notice => "notice",
            Self::Beat => "beat",
            Self::Leave => "leave",
            Self::AskHandoff => "ask_handoff",
            Self::HandOver => "hand_over",
            Self::Announce => "announce",
            Self::MarkAsked => "mark_asked",
        }
    }
}

/// An item's size by DynamoDB's rules: each attribute's name plus its value (a string's bytes;
/// a number's significant digits halved, plus one).
pub fn item_bytes(key: &str, row: &LeaseState) -> usize {
    let number = |n: u64| n.to_string().len().div_ceil(2) + 1;
    let mut bytes = "lease_key".len() + key.len();
    if let Some(owner) = &row.owner {
        bytes += "lease_owner".len() + owner.len();
    }
    bytes += "lease_expiry".len() + number(row.expiry_ms);
    bytes += "lease_counter".len() + number(row.counter);
    if let Some(checkpoint) = &row.checkpoint {
        bytes += "checkpoint".len() + checkpoint.len();
    }
    bytes
}

/// A read unit of a strongly consistent read: 4 KB of items.
pub const READ_UNIT_BYTES: usize = 4_096;

/// Read units of one consistent read of `bytes` of items (at least one).
pub fn read_units(bytes: usize) -> u64 {
    bytes.div_ceil(READ_UNIT_BYTES).max(1) as u64
}

/// Half read units of one read of `bytes` of items: two a read unit consistent, one eventually
/// consistent (DynamoDB bills such a read half).
fn half_read_units(bytes: usize, consistent: bool) -> u64 {
    read_units(bytes) * if consistent { 2 } else { 1 }
}

/// Whole read units of `half` half units, a half rounded up.
fn whole(half: u64) -> u64 {
    half.div_ceil(2)
}

/// A write unit: 1 KB of the item written (the larger of before and after).
pub const WRITE_UNIT_BYTES: usize = 1_024;

/// Write units of one write of an item of `bytes` (at least one).
pub fn write_units(bytes: usize) -> u64 {
    bytes.div_ceil(WRITE_UNIT_BYTES).max(1) as u64
}

/// How many calls of each kind, in [`Call::ALL`] order.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts(pub [u64; KINDS]);

impl Counts {
    pub fn get(&self, call: Call) -> u64 {
        self.0[call as usize]
    }

    pub fn writes(&self) -> u64 {
        Call::ALL
            .iter()
            .filter(|c| c.is_write())
            .map(|c| self.get(*c))
            .sum()
    }

    /// The writes of shard rows alone (every write but the notice's: beats, leaves, records),
    /// one write unit each (a lease row stays under 1 KB).
    pub fn row_writes(&self) -> u64 {
        self.writes()
            - self.get(Call::Beat)
            - self.get(Call::Leave)
            - self.get(Call::Announce)
            - self.get(Call::MarkAsked)
    }

    /// What happened between `earlier` and this snapshot.
    pub fn since(&self, earlier: &Self) -> Self {
        let mut out = [0; KINDS];
        for (i, slot) in out.iter_mut().enumerate() {
            *slot = self.0[i].saturating_sub(earlier.0[i]);
        }
        Self(out)
    }

    /// `kind count` pairs of the kinds that happened, for a details line.
    pub fn describe(&self) -> String {
        let parts: Vec<String> = Call::ALL
            .iter()
            .filter(|c| self.get(**c) > 0)
            .map(|c| format!("{} {}", c.name(), self.get(*c)))
            .collect();
        if parts.is_empty() {
            "no calls".to_owned()
        } else {
            parts.join(", ")
        }
    }
}

/// Forwards every call to `inner` and counts it; writes are also logged with their moment, by
/// row.
#[derive(Debug)]
pub struct CountingStore {
    inner: Arc<dyn LeaseStore>,
    calls: [AtomicU64; KINDS],
    /// The bytes of the rows every `list` answered, by DynamoDB's item-size rules, and the half
    /// read units each answer cost (a consistent Scan: a read unit per 4 KB of items, at least
    /// one; an eventually consistent one, `list_eventually`, half that).
    listed_bytes: AtomicU64,
    listed_half_units: AtomicU64,
    /// The size of the stream's notice row as last read ([`DynamoLeaseStore::notice_item_bytes`]),
    /// the half read units its reads cost (eventually consistent ones half), and the write
    /// units of the writes to it (a beat, a leave, a run's record, a release's bump), each by
    /// the size last read: a notice grows with the instances on the stream.
    notice_bytes: AtomicU64,
    notice_read_half_units: AtomicU64,
    notice_write_units: AtomicU64,
    writes: Mutex<HashMap<String, Vec<Instant>>>,
    /// Kept apart (`DynamoLeaseStore::keep_notice_head_apart`): the size of each row of the
    /// notice as last read whole (`DynamoLeaseStore::notice_rows_bytes`), so a write is priced
    /// by the row it writes and a whole read by every row it reads.
    notice_rows: Mutex<std::collections::BTreeMap<String, usize>>,
    /// Answers that it keeps no notices (a store written against the five calls), so the
    /// handover poll reads the rows at every poll: the cost before the notice, for comparison.
    hide_notices: bool,
}

/// The row of the stream's notice a write goes to, kept apart.
#[derive(Debug, Clone, Copy)]
enum NoticeRow<'a> {
    /// The head: a release's bump, the marks of handoffs asked.
    Head(&'a str),
    /// The owner's group of beats.
    Beat(&'a str, &'a str),
    /// The owner's group of beats, then the head's counter.
    Leave(&'a str, &'a str),
    /// The runs' records.
    Runs(&'a str),
}

impl CountingStore {
    pub fn new(inner: Arc<dyn LeaseStore>) -> Self {
        Self {
            inner,
            calls: Default::default(),
            listed_bytes: AtomicU64::new(0),
            listed_half_units: AtomicU64::new(0),
            notice_bytes: AtomicU64::new(0),
            notice_read_half_units: AtomicU64::new(0),
            notice_write_units: AtomicU64::new(0),
            writes: Mutex::default(),
            notice_rows: Mutex::default(),
            hide_notices: false,
        }
    }

    /// Whether the inner store reads `list_eventually`, `notice_eventually` and `notice_head`
    /// eventually consistent (`DynamoLeaseStore::eventually_consistent_polls`): those reads
    /// are priced half.
    fn behind(&self) -> bool {
        self.inner.polls_read_behind()
    }

    /// A store that counts like [`new`](Self::new)'s but keeps no notices, as a store written
    /// against the five calls: its instance's handover poll reads the rows at every poll.
    pub fn without_notices(inner: Arc<dyn LeaseStore>) -> Self {
        Self {
            hide_notices: true,
            ..Self::new(inner)
        }
    }

    fn count(&self, call: Call) {
        self.calls[call as usize].fetch_add(1, Ordering::Relaxed);
    }

    fn write(&self, call: Call, key: &LeaseKey) {
        self.count(call);
        self.writes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(key.row_key())
            .or_default()
            .push(Instant::now());
    }

    /// Writes per row per minute between `from` and `to`, averaged over the rows that had at
    /// least two: (writes - 1) / (last - first) for each row, which a periodic write measures
    /// exactly whatever the window's phase. `None` when no row had two writes.
    pub fn writes_per_row_minute(&self, from: Instant, to: Instant) -> Option<f64> {
        let rows = self.writes.lock().unwrap_or_else(PoisonError::into_inner);
        let rates: Vec<f64> = rows
            .values()
            .filter_map(|moments| {
                let inside: Vec<&Instant> = moments
                    .iter()
                    .filter(|m| **m >= from && **m <= to)
                    .collect();
                let (first, last) = (inside.first()?, inside.last()?);
                let span = last.duration_since(**first).as_secs_f64();
                (inside.len() >= 2 && span > 0.0).then(|| (inside.len() - 1) as f64 / span * 60.0)
            })
            .collect();
        (!rates.is_empty()).then(|| rates.iter().sum::<f64>() / rates.len() as f64)
    }

    /// A write to the stream's notice: in one row, the row as big as it was last read; kept
    /// apart, the row that holds what `row` writes, as big as it was last read whole.
    fn notice_written(&self, row: NoticeRow<'_>) {
        let units = if self.inner.keeps_notice_head_apart() {
            let rows = self
                .notice_rows
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let of = |key: &str| write_units(rows.get(key).copied().unwrap_or(0));
            let head = |stream: &str| of(&format!("{stream}#notice"));
            match row {
                NoticeRow::Head(stream) => head(stream),
                NoticeRow::Beat(stream, owner) => {
                    of(&DynamoLeaseStore::notice_beats_key(stream, owner))
                }
                // The beat's removal, then the bump of the counter in the head.
                NoticeRow::Leave(stream, owner) => {
                    of(&DynamoLeaseStore::notice_beats_key(stream, owner)) + head(stream)
                }
                NoticeRow::Runs(stream) => of(&format!("{stream}#runs#notice")),
            }
        } else {
            let bytes = self.notice_bytes.load(Ordering::Relaxed);
            write_units(usize::try_from(bytes).unwrap_or(usize::MAX))
        };
        self.notice_write_units.fetch_add(units, Ordering::Relaxed);
    }

    /// The read units the notice's reads cost so far, the write units of the writes to it, and
    /// its size as last read.
    pub fn notice_units(&self) -> (u64, u64, u64) {
        (
            whole(self.notice_read_half_units.load(Ordering::Relaxed)),
            self.notice_write_units.load(Ordering::Relaxed),
            self.notice_bytes.load(Ordering::Relaxed),
        )
    }

    /// The read units the `list` calls cost so far, and the bytes of rows they read.
    pub fn listed(&self) -> (u64, u64) {
        (
            whole(self.listed_half_units.load(Ordering::Relaxed)),
            self.listed_bytes.load(Ordering::Relaxed),
        )
    }

    /// A `list` (`eventually`: `list_eventually`), counted with its read units (half of them
    /// where the inner store reads it behind).
    async fn counted_list(
        &self,
        stream: &str,
        eventually: bool,
    ) -> Result<Option<Vec<(LeaseKey, LeaseState)>>, ruststream_kinesis::LeaseError> {
        self.count(Call::List);
        let listed = if eventually {
            self.inner.list_eventually(stream).await?
        } else {
            self.inner.list(stream).await?
        };
        let consistent = !(eventually && self.behind());
        let bytes: usize = listed
            .iter()
            .flatten()
            .map(|(key, row)| item_bytes(&key.row_key(), row))
            .sum();
        self.listed_bytes.fetch_add(bytes as u64, Ordering::Relaxed);
        self.listed_half_units
            .fetch_add(half_read_units(bytes, consistent), Ordering::Relaxed);
        Ok(listed)
    }

    /// A whole read of the notice (`eventually`: `notice_eventually`), counted with its read
    /// units (half of them where the inner store reads it behind).
    async fn counted_notice(
        &self,
        stream: &str,
        eventually: bool,
    ) -> Result<Option<Notice>, ruststream_kinesis::LeaseError> {
        if self.hide_notices {
            return Ok(None);
        }
        self.count(Call::Notice);
        let notice = if eventually {
            self.inner.notice_eventually(stream).await?
        } else {
            self.inner.notice(stream).await?
        };
        let consistent = !(eventually && self.behind());
        if let Some(notice) = &notice {
            let bytes = DynamoLeaseStore::notice_item_bytes(stream, notice);
            self.notice_bytes.store(bytes as u64, Ordering::Relaxed);
            let half = if self.inner.keeps_notice_head_apart() {
                // Kept apart, a whole read reads every row, each billed on its own.
                let rows = DynamoLeaseStore::notice_rows_bytes(stream, notice);
                let half = rows
                    .values()
                    .map(|bytes| half_read_units(*bytes, consistent))
                    .sum();
                *self
                    .notice_rows
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner) = rows;
                half
            } else {
                half_read_units(bytes, consistent)
            };
            self.notice_read_half_units
                .fetch_add(half, Ordering::Relaxed);
        }
        Ok(notice)
    }

    pub fn snapshot(&self) -> Counts {
        let mut out = [0; KINDS];
        for (slot, count) in out.iter_mut().zip(&self.calls) {
            *slot = count.load(Ordering::Relaxed);
        }
        Counts(out)
    }
}

impl LeaseStore for CountingStore {
    fn acquire<'a>(
        &'a self,
        key: &'a LeaseKey,
        owner: &'a str,
        lease: Duration,
    ) -> LeaseFuture<'a, LeaseState> {
        self.write(Call::Acquire, key);
        self.inner.acquire(key, owner, lease)
    }

    /// A take that records the start is one acquire: both stores do it in one write.
    fn acquire_from<'a>(
        &'a self,
        key: &'a LeaseKey,
        owner: &'a str,
        lease: Duration,
        start: &'a str,
    ) -> LeaseFuture<'a, LeaseState> {
        self.write(Call::Acquire, key);
        self.inner.acquire_from(key, owner, lease, start)
    }

    /// A take-over is one acquire too, conditioned on the holder and counter read.
    fn take_over<'a>(
        &'a self,
        key: &'a LeaseKey,
        owner: &'a str,
        lease: Duration,
        start: &'a str,
        holder: &'a str,
        counter: u64,
    ) -> LeaseFuture<'a, LeaseState> {
        self.write(Call::Acquire, key);
        self.inner
            .take_over(key, owner, lease, start, holder, counter)
    }

    fn renew<'a>(
        &'a self,
        key: &'a LeaseKey,
        owner: &'a str,
        lease: Duration,
    ) -> LeaseFuture<'a, LeaseState> {
        self.write(Call::Renew, key);
        self.inner.renew(key, owner, lease)
    }

    fn checkpoint<'a>(
        &'a self,
        key: &'a LeaseKey,
        owner: &'a str,
        checkpoint: &'a str,
    ) -> LeaseFuture<'a, ()> {
        self.write(Call::Checkpoint, key);
        self.inner.checkpoint(key, owner, checkpoint)
    }

    fn checkpoint_and_renew<'a>(
        &'a self,
        key: &'a LeaseKey,
        owner: &'a str,
        checkpoint: &'a str,
        lease: Duration,
    ) -> LeaseFuture<'a, LeaseState> {
        self.write(Call::CheckpointAndRenew, key);
        self.inner
            .checkpoint_and_renew(key, owner, checkpoint, lease)
    }

    fn checkpoint_and_renew_behind<'a>(
        &'a self,
        key: &'a LeaseKey,
        owner: &'a str,
        checkpoint: &'a str,
        behind_ms: Option<u64>,
        lease: Duration,
    ) -> LeaseFuture<'a, LeaseState> {
        self.write(Call::CheckpointAndRenew, key);
        self.inner
            .checkpoint_and_renew_behind(key, owner, checkpoint, behind_ms, lease)
    }

    fn read<'a>(&'a self, key: &'a LeaseKey) -> LeaseFuture<'a, Option<LeaseState>> {
        self.count(Call::Read);
        self.inner.read(key)
    }

    fn release<'a>(&'a self, key: &'a LeaseKey, owner: &'a str) -> LeaseFuture<'a, ()> {
        self.write(Call::Release, key);
        if !self.hide_notices {
            // The release's bump of the stream's notice, a write of its own.
            self.notice_written(NoticeRow::Head(key.stream()));
        }
        self.inner.release(key, owner)
    }

    fn list<'a>(&'a self, stream: &'a str) -> LeaseFuture<'a, Option<Vec<(LeaseKey, LeaseState)>>> {
        Box::pin(self.counted_list(stream, false))
    }

    /// Counted as a `list`, at half the read units where the inner store reads it behind.
    fn list_eventually<'a>(
        &'a self,
        stream: &'a str,
    ) -> LeaseFuture<'a, Option<Vec<(LeaseKey, LeaseState)>>> {
        Box::pin(self.counted_list(stream, true))
    }

    fn delete<'a>(&'a self, key: &'a LeaseKey, counter: u64) -> LeaseFuture<'a, bool> {
        self.inner.delete(key, counter)
    }

    fn notice<'a>(&'a self, stream: &'a str) -> LeaseFuture<'a, Option<Notice>> {
        Box::pin(self.counted_notice(stream, false))
    }

    /// Counted as a notice read, at half the read units where the inner store reads it behind.
    fn notice_eventually<'a>(&'a self, stream: &'a str) -> LeaseFuture<'a, Option<Notice>> {
        Box::pin(self.counted_notice(stream, true))
    }

    // The head alone (a store that keeps it apart): counted as a notice read, at its own size,
    // half of it where the inner store reads it behind.
    fn notice_head<'a>(&'a self, stream: &'a str) -> LeaseFuture<'a, Option<Notice>> {
        if self.hide_notices {
            return Box::pin(std::future::ready(Ok(None)));
        }
        self.count(Call::Notice);
        Box::pin(async move {
            let head = self.inner.notice_head(stream).await?;
            if let Some(head) = &head {
                let bytes = DynamoLeaseStore::notice_item_bytes(stream, head);
                self.notice_read_half_units
                    .fetch_add(half_read_units(bytes, !self.behind()), Ordering::Relaxed);
            }
            Ok(head)
        })
    }

    fn keeps_notice_head_apart(&self) -> bool {
        !self.hide_notices && self.inner.keeps_notice_head_apart()
    }

    fn polls_read_behind(&self) -> bool {
        self.inner.polls_read_behind()
    }

    fn keep_layout<'a>(&'a self, stream: &'a str) -> LeaseFuture<'a, ()> {
        self.inner.keep_layout(stream)
    }

    fn beat<'a>(
        &'a self,
        stream: &'a str,
        owner: &'a str,
        until_ms: u64,
        forget: &'a [String],
    ) -> LeaseFuture<'a, ()> {
        if self.hide_notices {
            return Box::pin(std::future::ready(Ok(())));
        }
        self.count(Call::Beat);
        self.notice_written(NoticeRow::Beat(stream, owner));
        self.inner.beat(stream, owner, until_ms, forget)
    }

    fn leave<'a>(&'a self, stream: &'a str, owner: &'a str) -> LeaseFuture<'a, ()> {
        if self.hide_notices {
            return Box::pin(std::future::ready(Ok(())));
        }
        self.count(Call::Leave);
        self.notice_written(NoticeRow::Leave(stream, owner));
        self.inner.leave(stream, owner)
    }

    fn leave_beat<'a>(
        &'a self,
        stream: &'a str,
        owner: &'a str,
        until_ms: u64,
    ) -> LeaseFuture<'a, ()> {
        if self.hide_notices {
            return Box::pin(std::future::ready(Ok(())));
        }
        self.count(Call::Leave);
        self.notice_written(NoticeRow::Leave(stream, owner));
        self.inner.leave_beat(stream, owner, until_ms)
    }

    fn announce<'a>(
        &'a self,
        stream: &'a str,
        owner: &'a str,
        record: &'a str,
        forget: &'a [String],
    ) -> LeaseFuture<'a, ()> {
        if self.hide_notices {
            return Box::pin(std::future::ready(Ok(())));
        }
        self.count(Call::Announce);
        self.notice_written(NoticeRow::Runs(stream));
        self.inner.announce(stream, owner, record, forget)
    }

    // Once per start, not counted: the check of the table and the claim of a stream.
    fn check(&self) -> LeaseFuture<'_, ()> {
        self.inner.check()
    }

    fn claim<'a>(&'a self, stream: &'a str) -> LeaseFuture<'a, ()> {
        self.inner.claim(stream)
    }

    fn table_name(&self) -> Option<&str> {
        self.inner.table_name()
    }

    fn keeps_leases_by_beat(&self) -> bool {
        self.inner.keeps_leases_by_beat()
    }

    // Exactly once commits through the inner store's transactions (not counted here: the
    // broker's `lease_table.commit` metric counts them).
    fn transactions(&self) -> Option<ruststream_kinesis::lease::Transactions> {
        self.inner.transactions()
    }

    fn ask_handoff<'a>(
        &'a self,
        key: &'a LeaseKey,
        holder: &'a str,
        counter: u64,
        to: &'a str,
        asked_ms: u64,
    ) -> LeaseFuture<'a, bool> {
        self.write(Call::AskHandoff, key);
        self.inner.ask_handoff(key, holder, counter, to, asked_ms)
    }

    fn mark_asked<'a>(&'a self, stream: &'a str, holders: &'a [String]) -> LeaseFuture<'a, ()> {
        if self.hide_notices {
            return Box::pin(std::future::ready(Ok(())));
        }
        self.count(Call::MarkAsked);
        self.notice_written(NoticeRow::Head(stream));
        self.inner.mark_asked(stream, holders)
    }

    fn withdraw_handoff<'a>(&'a self, key: &'a LeaseKey, to: &'a str) -> LeaseFuture<'a, bool> {
        self.write(Call::AskHandoff, key);
        self.inner.withdraw_handoff(key, to)
    }

    fn hand_over<'a>(
        &'a self,
        key: &'a LeaseKey,
        owner: &'a str,
        to: &'a str,
        checkpoint: Option<&'a str>,
        lease: Duration,
    ) -> LeaseFuture<'a, ()> {
        self.write(Call::HandOver, key);
        self.inner.hand_over(key, owner, to, checkpoint, lease)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ruststream_kinesis::MemoryLeaseStore;

    #[tokio::test]
    async fn every_call_is_counted_by_kind_and_forwarded() {
        let store = CountingStore::new(Arc::new(MemoryLeaseStore::new()));
        let key = LeaseKey::new("s", "shardId-000000000000");
        let lease = Duration::from_secs(10);
        store.acquire(&key, "a", lease).await.unwrap();
        store.renew(&key, "a", lease).await.unwrap();
        store.checkpoint(&key, "a", "1").await.unwrap();
        store
            .checkpoint_and_renew(&key, "a", "2", lease)
            .await
            .unwrap();
        let row = store.read(&key).await.unwrap().unwrap();
        assert_eq!(row.checkpoint.as_deref(), Some("2"));
        store.release(&key, "a").await.unwrap();
        let _ = store.list("s").await.unwrap();
        let notice = store.notice("s").await.unwrap().unwrap();
        assert_eq!(notice.counter, 1, "the release bumped it");
        store.beat("s", "a", 5, &[]).await.unwrap();
        let other = LeaseKey::new("s", "shardId-000000000001");
        let taken = store.acquire_from(&other, "a", lease, "TRIM_HORIZON").await;
        assert_eq!(taken.unwrap().checkpoint.as_deref(), Some("TRIM_HORIZON"));
        let counter = store.read(&other).await.unwrap().unwrap().counter;
        let asked = store.ask_handoff(
            &other,
            "a",
            counter,
            "b",
            ruststream_kinesis::epoch_millis(),
        );
        assert!(
            asked.await.unwrap(),
            "a holds the row: the request is recorded"
        );
        store
            .hand_over(&other, "a", "b", None, lease)
            .await
            .unwrap();
        assert!(store.read(&other).await.unwrap().unwrap().is_held_by("b"));
        store.mark_asked("s", &["a".to_owned()]).await.unwrap();
        store.leave("s", "a").await.unwrap();
        store.announce("s", "a", "1-1@1", &[]).await.unwrap();
        let notice = store.notice("s").await.unwrap().unwrap();
        assert_eq!(notice.incarnations["a"], "1-1@1");
        assert_eq!(notice.asks["a"], 1);
        let counts = store.snapshot();
        assert_eq!(counts, Counts([2, 1, 1, 1, 1, 3, 1, 2, 1, 1, 1, 1, 1, 1]));
        assert_eq!(counts.writes(), 12);
        assert_eq!(
            counts
                .since(&Counts([1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]))
                .writes(),
            11
        );
        let rate = store
            .writes_per_row_minute(Instant::now() - Duration::from_secs(60), Instant::now())
            .unwrap();
        assert!(rate > 0.0);
    }
}

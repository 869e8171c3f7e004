//! One row of the lease table as the stores return it, and the checkpoint values with a meaning
//! of their own (`SHARD_END`, `SHARD_SKIPPED`).

/// The checkpoint of a shard that was read to its end; its children may start.
///
/// A reader writes it once every delivery from the shard is settled (a checkpoint still waiting
/// to be written is dropped first: `SHARD_END` covers it), and then releases the lease.
///
/// # Examples
///
/// ```
/// use ruststream_kinesis::{LeaseState, SHARD_END};
///
/// let state = LeaseState { checkpoint: Some(SHARD_END.to_owned()), ..LeaseState::default() };
/// assert!(state.is_finished());
/// ```
pub const SHARD_END: &str = "SHARD_END";

/// The checkpoint of a closed shard this application never read and never will: it started at
/// the tip after the shard had closed, so nothing of the shard is to be read, and its children
/// start where the application starts rather than at their oldest records.
///
/// The instance that decides so writes it with a take (only into a row that has no checkpoint),
/// then releases the row. A later take of the shard finds it and reads nothing: a take that was
/// still on its way, or an instance that saw the shard open, cannot bring the shard back and
/// deliver its records after its children's.
///
/// # Examples
///
/// ```
/// use ruststream_kinesis::{LeaseState, SHARD_SKIPPED};
///
/// let state = LeaseState { checkpoint: Some(SHARD_SKIPPED.to_owned()), ..LeaseState::default() };
/// assert!(state.is_skipped() && !state.is_finished());
/// ```
pub const SHARD_SKIPPED: &str = "SHARD_SKIPPED";

/// The lease a row kept alive by its holder's beat is written with (a take, a checkpoint, a
/// hand-over): a thousand years, so that no instance judges it by its expiry.
pub(crate) const KEPT_BY_BEAT: std::time::Duration =
    std::time::Duration::from_secs(1000 * 365 * 24 * 3600);

/// A row whose expiry lies further ahead than this (a hundred years) is kept alive by its
/// holder's beat ([`LeaseState::is_kept_by_beat`]): past any lease renewed per row, the ten years
/// of a reader in process included.
pub(crate) const BEAT_KEPT_AFTER: std::time::Duration =
    std::time::Duration::from_secs(100 * 365 * 24 * 3600);

/// Between the sequence number and the user record's index of a checkpoint inside a KPL
/// aggregate.
const SUB_SEQUENCE_SEPARATOR: char = ':';

/// The checkpoint through user record `sub` of the KPL aggregate at `sequence`, others of it
/// following: `<sequence>:<sub>`. `DynamoLeaseStore` keeps it as the KCL does, the sequence
/// number in `checkpoint` and the index in `checkpoint_sub_sequence`; a store written against
/// the five calls keeps the string.
pub(crate) fn within_checkpoint(sequence: &str, sub: u64) -> String {
    format!("{sequence}{SUB_SEQUENCE_SEPARATOR}{sub}")
}

/// A checkpoint inside an aggregate, split: its sequence number and user record index.
pub(crate) fn split_within(checkpoint: &str) -> Option<(&str, u64)> {
    let (sequence, sub) = checkpoint.split_once(SUB_SEQUENCE_SEPARATOR)?;
    let digits = |text: &str| !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit());
    if !(digits(sequence) && digits(sub)) {
        return None;
    }
    Some((sequence, sub.parse().ok()?))
}

/// One row of a lease table, as [`LeaseStore::read`](crate::LeaseStore::read) and
/// [`LeaseStore::list`](crate::LeaseStore::list) return it.
///
/// # Examples
///
/// ```
/// use ruststream_kinesis::LeaseState;
///
/// let state = LeaseState {
///     owner: Some("pod-a".to_owned()),
///     expiry_ms: 1_000,
///     counter: 3,
///     checkpoint: None,
///     behind_ms: None,
///     handoff: None,
///     commit_token: None,
/// };
/// assert!(state.is_held_by("pod-a"));
/// assert!(state.is_expired_at(12_000));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LeaseState {
    /// The owner id holding the lease, `None` once released.
    pub owner: Option<String>,
    /// When the lease lapses, in milliseconds since the Unix epoch by the writer's clock.
    pub expiry_ms: u64,
    /// Bumped by every write to the row.
    pub counter: u64,
    /// The last checkpoint: a sequence number, [`SHARD_END`], [`SHARD_SKIPPED`], a recorded
    /// start (below), or `None` until the shard's first owner recorded its start. Inside a KPL
    /// aggregate it is `<sequence number>:<index>`: through the user record at that index of the
    /// aggregate at that sequence number, the next owner reading the aggregate again and
    /// skipping the user records up to it.
    ///
    /// A first owner that takes a shard without a checkpoint records where it starts before it
    /// reads: `TRIM_HORIZON`, `AT_TIMESTAMP:<epoch ms>` (a start at a time; the tip is recorded
    /// as the time the shard was opened less [`SKEW_TOLERANCE`](crate::SKEW_TOLERANCE)) or
    /// `AT_SEQUENCE:<n>`. An owner that takes the shard over before the first acknowledgement
    /// then starts there, no later than the first one did; the first checkpoint written after an
    /// acknowledgement replaces the value with a sequence number.
    pub checkpoint: Option<String>,
    /// How far behind its shard's newest record the reader was when it wrote
    /// [`checkpoint`](Self::checkpoint), in milliseconds: the `MillisBehindLatest` of its last
    /// `GetRecords` answer before the write. `None` when not known (a final checkpoint, a
    /// recorded start, a store that does not keep it). For people reading the table (the
    /// `lease-table` view shows it); nothing decides on it.
    pub behind_ms: Option<u64>,
    /// A handoff asked of the holder: another instance that balances the shards
    /// (`KinesisBroker::balance_shards`) wants the shard handed to it. `None` in a row without
    /// one, rows written before handoffs existed included.
    pub handoff: Option<Handoff>,
    /// The token of the exactly-once commit that last moved [`checkpoint`](Self::checkpoint):
    /// the handler's DynamoDB writes and the checkpoint landed together in one transaction
    /// under it. A resend of that transaction whose answer was lost is recognised by it as
    /// landed (the row's counter then stands one past the one the commit was conditioned on).
    /// `None` in a row no commit wrote; a store of your own that does not commit leaves it
    /// `None` (a store written against 0.8 gains `commit_token: None` in its literals).
    /// `DynamoLeaseStore` keeps it in the string attribute `commit_token`.
    pub commit_token: Option<String>,
}

/// A request, recorded in a held row, that its holder hand the shard off to another instance (a
/// handoff): the holder sees it in the answer of its next renewal, stops handing out records,
/// waits for its deliveries to settle (up to a bound), and hands the row off with its final
/// checkpoint in one conditional write
/// ([`LeaseStore::hand_over`](crate::LeaseStore::hand_over)).
///
/// A request older than [`HANDOFF_REQUEST_LIFETIME`] is ignored (its asker may be gone), and
/// another instance may replace it; every take of the row removes it.
///
/// # Examples
///
/// ```
/// use ruststream_kinesis::Handoff;
///
/// let asked = Handoff { to: "pod-b".to_owned(), asked_ms: 10_000 };
/// assert!(asked.is_live_at(15_000));
/// assert!(!asked.is_live_at(10_000 + 60_000));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Handoff {
    /// The owner id of the instance that asked for the shard.
    pub to: String,
    /// When it asked, in milliseconds since the Unix epoch by its clock.
    pub asked_ms: u64,
}

/// How long a handoff's request stands: a holder ignores an older one, another instance may
/// replace it, and it counts for nobody in the shares; its asker asks again at a later round if
/// it still wants a shard.
pub const HANDOFF_REQUEST_LIFETIME: std::time::Duration = std::time::Duration::from_secs(30);

impl Handoff {
    /// Whether the request still stands at `now_ms` (epoch milliseconds, by the reader's clock):
    /// asked less than [`HANDOFF_REQUEST_LIFETIME`] ago by the asker's.
    #[must_use]
    pub fn is_live_at(&self, now_ms: u64) -> bool {
        request_stands(self.asked_ms, now_ms)
    }
}

/// Whether a request for a handoff asked at `asked_ms` still stands at `now_ms`.
pub(crate) fn request_stands(asked_ms: u64, now_ms: u64) -> bool {
    now_ms < asked_ms.saturating_add(super::millis(HANDOFF_REQUEST_LIFETIME))
}

impl LeaseState {
    /// The handoff asked of this row's holder that still stands at `now_ms`, if any.
    #[must_use]
    pub fn handoff_at(&self, now_ms: u64) -> Option<&Handoff> {
        self.handoff
            .as_ref()
            .filter(|handoff| handoff.is_live_at(now_ms))
    }

    /// Whether `owner` holds this row.
    #[must_use]
    pub fn is_held_by(&self, owner: &str) -> bool {
        self.owner.as_deref() == Some(owner)
    }

    /// Whether the shard was read to its end.
    #[must_use]
    pub fn is_finished(&self) -> bool {
        self.checkpoint.as_deref() == Some(SHARD_END)
    }

    /// A row marked [`SHARD_SKIPPED`], as a round knows it once its take marked it.
    pub(crate) fn skipped() -> Self {
        Self {
            checkpoint: Some(SHARD_SKIPPED.to_owned()),
            ..Self::default()
        }
    }

    /// Whether the shard is one this application never reads ([`SHARD_SKIPPED`]).
    #[must_use]
    pub fn is_skipped(&self) -> bool {
        self.checkpoint.as_deref() == Some(SHARD_SKIPPED)
    }

    /// Whether this row's holder keeps its lease alive by its beat rather than by renewing the
    /// row (liveness by beat): the row's expiry lies more than a hundred years ahead of `now_ms`,
    /// where no lease a holder renews reaches. Such a row is never expired
    /// by its expiry: an instance that renews leases per row never takes it, and one kept alive
    /// by beats takes it over once its holder's beat lapsed.
    #[must_use]
    pub fn is_kept_by_beat(&self, now_ms: u64) -> bool {
        self.owner.is_some()
            && self.expiry_ms > now_ms.saturating_add(super::millis(BEAT_KEPT_AFTER))
    }

    /// Whether another instance may take this row at `now_ms` (epoch milliseconds): it has no
    /// owner, or its expiry lies more than [`SKEW_TOLERANCE`](crate::SKEW_TOLERANCE) in the past.
    #[must_use]
    pub fn is_expired_at(&self, now_ms: u64) -> bool {
        self.owner.is_none()
            || self
                .expiry_ms
                .saturating_add(crate::SKEW_TOLERANCE.as_millis() as u64)
                < now_ms
    }
}

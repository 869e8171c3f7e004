//! The lease's timings (lease, renewal, listing, handover poll, checkpoint cadence) and the call
//! timeouts derived from them.

use std::time::Duration;

use crate::KinesisError;

/// How long a lease lasts, how often it is renewed, how often a subscription lists shards and
/// looks at the lease table between listings, and how often a shard's checkpoint is written.
///
/// The defaults are the ones the lease table's documentation names: a 10 s lease renewed every
/// 3 s, shards listed when a subscription opens and every 10 s. Between listings a subscription
/// looks at the lease table every second while some shard waits
/// ([`with_handover_poll_interval`](Self::with_handover_poll_interval)), and a shard's checkpoint
/// is written at most once a second ([`with_checkpoint_interval`](Self::with_checkpoint_interval)).
///
/// Tests shorten them; renewal must stay well inside the lease (at most a third of it), so a
/// renewal can fail twice and still land before the lease lapses.
///
/// How long a shard goes unread after its owner stops, with one healthy instance left:
///
/// - a stopping instance writes the last checkpoints and releases the leases, and another instance
///   takes the shards at its next look at the table: within one handover poll (about a second
///   by default), or one listing interval when the poll is off;
/// - after a crash the lease must lapse first: every open shard is read again within `lease` +
///   [`SKEW_TOLERANCE`] + the actual skew between the clocks + one handover poll (one listing
///   interval when the poll is off) after its owner died, plus the time of the calls.
///
/// [`SKEW_TOLERANCE`]: crate::SKEW_TOLERANCE
///
/// The timings also bound every call: each lease-store call a subscription makes fails when it
/// has not answered within the renewal interval (so a hung renewal fails in time for its retry
/// to land while the lease lasts, and a hung final checkpoint or release does not hold up
/// shutdown), and each Kinesis call has an SDK operation timeout of the lease and at least 10 s
/// (an attempt timeout of half of it) where the AWS configuration sets none.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use ruststream_kinesis::LeaseTimings;
///
/// let fast = LeaseTimings::new(Duration::from_secs(3), Duration::from_secs(1)).unwrap();
/// assert_eq!(fast.lease(), Duration::from_secs(3));
/// // Renewing every 2 s of a 3 s lease leaves no room for a failed renewal.
/// assert!(LeaseTimings::new(Duration::from_secs(3), Duration::from_secs(2)).is_err());
///
/// let defaults = LeaseTimings::default();
/// assert_eq!(defaults.listing_interval(), Duration::from_secs(10));
/// assert_eq!(defaults.handover_poll_interval(), Duration::from_secs(1));
/// assert_eq!(defaults.checkpoint_interval(), Duration::from_secs(1));
///
/// // Fewer calls to the lease table: no handover poll (a released shard then waits for the next
/// // listing), and at most one checkpoint write per shard every 5 s.
/// let frugal = LeaseTimings::default()
///     .with_handover_poll_interval(Duration::ZERO)
///     .with_checkpoint_interval(Duration::from_secs(5));
/// assert_eq!(frugal.handover_poll_interval(), Duration::ZERO);
/// assert_eq!(frugal.checkpoint_interval(), Duration::from_secs(5));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseTimings {
    lease: Duration,
    renew: Duration,
    listing: Duration,
    handover_poll: Duration,
    checkpoint_interval: Duration,
    handoff_drain: Duration,
    /// Liveness by beat: the leases are kept alive by the instance's beat, not renewed per row
    /// (issue 29, item 3; built in steps, not yet a public setting).
    by_beat: bool,
}

/// The default least time between two checkpoint writes of one shard: a shard under load writes
/// about 60 times a minute whatever its rate, where a write per move of the checkpoint grows with
/// the rate (74 a minute at 10 records/s, `kinesis-bench writes`).
const DEFAULT_CHECKPOINT_INTERVAL: Duration = Duration::from_secs(1);

impl Default for LeaseTimings {
    fn default() -> Self {
        Self {
            lease: Duration::from_secs(10),
            renew: Duration::from_secs(3),
            listing: Duration::from_secs(10),
            handover_poll: Duration::from_secs(1),
            checkpoint_interval: DEFAULT_CHECKPOINT_INTERVAL,
            handoff_drain: Duration::from_secs(5),
            by_beat: false,
        }
    }
}

impl LeaseTimings {
    /// A lease of `lease`, renewed every `renew`; the listing (10 s), the handover poll (1 s)
    /// and the checkpoint interval (1 s) keep their defaults.
    ///
    /// # Errors
    ///
    /// [`KinesisError::Config`] when `renew` is zero or more than a third of `lease`.
    pub fn new(lease: Duration, renew: Duration) -> Result<Self, KinesisError> {
        if renew.is_zero() || renew.saturating_mul(3) > lease {
            return Err(KinesisError::Config {
                message: format!(
                    "lease timings: renewing every {renew:?} a lease of {lease:?} leaves no room \
                     for a failed renewal; renew at most every lease / 3"
                ),
            });
        }
        Ok(Self {
            lease,
            renew,
            ..Self::default()
        })
    }

    /// Lists shards every `listing` instead of every 10 s.
    #[must_use]
    pub fn with_listing_interval(mut self, listing: Duration) -> Self {
        self.listing = listing.max(Duration::from_millis(100));
        self
    }

    /// Between listings, looks at the lease table every `poll` for a lease another instance
    /// released or let lapse, or a shard whose parents finished (default 1 s), so a handover
    /// after a release takes about a second rather than up to a listing interval. Shards are still
    /// listed every listing interval.
    ///
    /// A look is made only while some shard of the last listing is neither read by this
    /// subscription nor finished (held by another instance, or waiting for its parents);
    /// nothing while no shard waits. With a store that keeps notices (both stores of this crate)
    /// a look reads the stream's notice row ([`LeaseStore::notice`](crate::LeaseStore::notice),
    /// one strongly consistent `GetItem` with `DynamoLeaseStore`, whatever the size of the table)
    /// and reads the waiting shards' rows only when a release moved the notice or a holder's beat
    /// lapsed; by default that is about 60 read units a minute for each instance that leaves
    /// some shard of the stream to another. A store without notices is read with
    /// [`LeaseStore::list`](crate::LeaseStore::list) (or row by row without `list`) at every
    /// look. A look that fails changes nothing: a later look or listing takes the shard.
    /// `Duration::ZERO` turns the poll off.
    #[must_use]
    pub fn with_handover_poll_interval(mut self, poll: Duration) -> Self {
        self.handover_poll = poll;
        self
    }

    /// Writes a shard's checkpoint at most once every `interval` (default 1 s; zero writes every
    /// move of the checkpoint, folded while one is in flight, so a busy shard writes as often as
    /// the store answers). Acknowledgements in between fold into the next write. A checkpoint
    /// write also renews the lease
    /// ([`LeaseStore::checkpoint_and_renew`](crate::LeaseStore::checkpoint_and_renew)), so a shard
    /// under load needs no separate renewals. A stopping reader writes the last checkpoint at
    /// once, before its release.
    ///
    /// The cost of a longer interval: after a crash or a lost lease, the next owner delivers
    /// again up to that much more of what was acknowledged. Keep it shorter than the renewal
    /// interval (3 s by default): a renewal that falls due while a checkpoint waits for its
    /// interval goes out on its own, a second write beside the checkpoint's.
    #[must_use]
    pub fn with_checkpoint_interval(mut self, interval: Duration) -> Self {
        self.checkpoint_interval = interval;
        self
    }

    /// How long a holder asked for a handoff waits for its deliveries in flight to settle
    /// before it hands the shard off anyway (default 5 s). It hands out no record meanwhile,
    /// and keeps its lease. A handoff whose every delivery settled within it redelivers nothing;
    /// after it, the deliveries still unsettled are the next owner's to deliver again. See
    /// `KinesisBroker::balance_shards`.
    #[must_use]
    pub fn with_handoff_drain(mut self, drain: Duration) -> Self {
        self.handoff_drain = drain;
        self
    }

    /// Keeps every lease alive by the instance's beat, one write per renewal interval, instead
    /// of renewing each row (liveness by beat; `KinesisBroker::keep_leases_alive_by_beat`).
    pub(crate) fn kept_by_beat(mut self) -> Self {
        self.by_beat = true;
        self
    }

    /// Leases renewed per row, as by default (a schedule pinned before beat mode existed).
    #[cfg(test)]
    pub(crate) fn renewed_per_row(mut self) -> Self {
        self.by_beat = false;
        self
    }

    /// Whether the leases are kept alive by the instance's beat.
    pub(crate) fn is_kept_by_beat(&self) -> bool {
        self.by_beat
    }

    /// The lease the rows' writes give (a take, a renewing checkpoint, a hand-over): the
    /// lease, or the thousand years of a row kept alive by its holder's beat
    /// ([`KEPT_BY_BEAT`](crate::lease::KEPT_BY_BEAT)), which no instance judges by its expiry.
    pub(crate) fn row_lease(&self) -> Duration {
        if self.by_beat {
            crate::lease::KEPT_BY_BEAT
        } else {
            self.lease
        }
    }

    /// How long a holder asked for a handoff waits for its deliveries to settle.
    #[must_use]
    pub fn handoff_drain(&self) -> Duration {
        self.handoff_drain
    }

    /// How often the lease table is looked at between listings; zero when never.
    #[must_use]
    pub fn handover_poll_interval(&self) -> Duration {
        self.handover_poll
    }

    /// The least time between two checkpoint writes of one shard.
    #[must_use]
    pub fn checkpoint_interval(&self) -> Duration {
        self.checkpoint_interval
    }

    /// How long a lease lasts.
    #[must_use]
    pub fn lease(&self) -> Duration {
        self.lease
    }

    /// How often a held lease is renewed.
    #[must_use]
    pub fn renew(&self) -> Duration {
        self.renew
    }

    /// How often a subscription lists shards.
    #[must_use]
    pub fn listing_interval(&self) -> Duration {
        self.listing
    }

    /// The timings of a reader in process, where a test's clock may be paused and jump ahead
    /// (`TestApp::advance`): a lease, its renewal and the listing no jump outlives (ten years,
    /// three, ten), no handover poll (one instance alone), the checkpoint cadence and the
    /// handoff drain as set.
    #[cfg(feature = "testing")]
    pub(crate) fn in_process(self) -> Self {
        const YEAR: Duration = Duration::from_secs(365 * 24 * 3600);
        Self {
            lease: YEAR * 10,
            renew: YEAR * 3,
            listing: YEAR * 10,
            handover_poll: Duration::ZERO,
            ..self
        }
    }

    /// How long a lease-store call may take before it counts as failed: the renewal interval, so
    /// a renewal that hangs fails in time for its retry to land while the lease lasts.
    pub(crate) fn store_call_timeout(&self) -> Duration {
        self.renew
    }

    /// How long one Kinesis call may take, retries of the SDK's own included, before it counts
    /// as failed: the lease, and at least 10 s (an attempt half of it), so a hung `GetRecords`
    /// leaves its shard unread for at most that long before the reader asks again, while a slow
    /// `PutRecords` of 5 MiB is not cut off (and sent twice) by a short test lease.
    pub(crate) fn kinesis_call_timeout(&self) -> Duration {
        self.lease.max(Duration::from_secs(10))
    }

    /// How long before its lease runs out (by this instance's own clock) a reader stops: the
    /// holder's half of the skew tolerance.
    pub(crate) fn holder_margin(&self) -> Duration {
        (self.lease / 10).min(Duration::from_secs(1))
    }

    /// How long after the call that granted it a lease may be used: the lease less the holder's
    /// margin.
    pub(crate) fn usable_lease(&self) -> Duration {
        self.lease.saturating_sub(self.holder_margin())
    }
}

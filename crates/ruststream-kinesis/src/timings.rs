use std::time::Duration;

use crate::KinesisError;

/// How long a lease lasts, how often it is renewed and how often a subscription lists shards.
///
/// The defaults are the ones the lease table's documentation names: a 10 s lease renewed every
/// 3 s, shards listed when a subscription opens and every 10 s. Tests shorten them; renewal must
/// stay well inside the lease (at most a third of it), so a renewal can fail twice and still land
/// before the lease lapses.
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
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseTimings {
    lease: Duration,
    renew: Duration,
    listing: Duration,
    handover_poll: Duration,
    checkpoint_interval: Duration,
}

impl Default for LeaseTimings {
    fn default() -> Self {
        Self {
            lease: Duration::from_secs(10),
            renew: Duration::from_secs(3),
            listing: Duration::from_secs(10),
            handover_poll: Duration::from_secs(1),
            checkpoint_interval: Duration::ZERO,
        }
    }
}

impl LeaseTimings {
    /// A lease of `lease`, renewed every `renew`; listing keeps its 10 s default.
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
    pub fn listing(mut self, listing: Duration) -> Self {
        self.listing = listing.max(Duration::from_millis(100));
        self
    }

    /// Between listings, looks at the lease table every `poll` for a lease another instance
    /// released or let expire (default 1 s), so a graceful handover takes about a second rather
    /// than a listing interval. It costs one `LeaseStore::list` call (one Scan of a DynamoDB
    /// table) per poll, made only while some shard of the stream is held by another instance:
    /// 60 calls per instance per minute by default. `Duration::ZERO` turns it off.
    #[must_use]
    pub fn handover_poll(mut self, poll: Duration) -> Self {
        self.handover_poll = poll;
        self
    }

    /// Writes a shard's checkpoint at most once every `interval` (default zero: one write per
    /// move of the checkpoint, folded while one is in flight). Acknowledgements in between fold
    /// into the next write, and a checkpoint write also renews the lease, so a shard under load
    /// needs no separate renewals. A graceful stop writes the last checkpoint at once.
    #[must_use]
    pub fn checkpoint_interval(mut self, interval: Duration) -> Self {
        self.checkpoint_interval = interval;
        self
    }

    /// How often the lease table is looked at between listings; zero when never.
    #[must_use]
    pub fn handover_poll_interval(&self) -> Duration {
        self.handover_poll
    }

    /// The least time between two checkpoint writes of one shard.
    #[must_use]
    pub fn checkpoint_every(&self) -> Duration {
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

    /// How long before its lease runs out (by this instance's own clock) a reader stops: the
    /// holder's half of the skew tolerance.
    pub(crate) fn holder_margin(&self) -> Duration {
        (self.lease / 10).min(Duration::from_secs(1))
    }
}

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
}

impl Default for LeaseTimings {
    fn default() -> Self {
        Self {
            lease: Duration::from_secs(10),
            renew: Duration::from_secs(3),
            listing: Duration::from_secs(10),
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

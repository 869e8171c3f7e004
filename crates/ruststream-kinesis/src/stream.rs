use std::borrow::Cow;
use std::time::Duration;

use ruststream::FromName;

/// A subscription to one Kinesis stream: the descriptor `#[subscriber(KinesisStream::new(..))]`
/// takes.
///
/// Each shard is read by one reader that holds the shard's lease; see the crate docs for how the
/// shards are shared between instances.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use ruststream_kinesis::KinesisStream;
///
/// let orders = KinesisStream::new("orders")
///     .create_if_missing(2)
///     .poll_interval(Duration::from_millis(500))
///     .batch_size(500);
/// assert_eq!(orders.stream_name(), "orders");
/// ```
#[derive(Debug, Clone)]
pub struct KinesisStream {
    pub(crate) name: Cow<'static, str>,
    pub(crate) create_if_missing: Option<u32>,
    pub(crate) poll_interval: Duration,
    pub(crate) batch_size: u32,
    pub(crate) max_wait: Duration,
}

impl KinesisStream {
    /// Reads the stream `name`.
    #[must_use]
    pub fn new(name: impl Into<Cow<'static, str>>) -> Self {
        Self {
            name: name.into(),
            create_if_missing: None,
            poll_interval: Duration::from_millis(1000),
            batch_size: 1000,
            max_wait: Duration::from_millis(50),
        }
    }

    /// Creates the stream with `shards` shards when it does not exist, and waits until it is
    /// active. Without it, a missing stream fails startup with an error naming the stream.
    #[must_use]
    pub fn create_if_missing(mut self, shards: u32) -> Self {
        self.create_if_missing = Some(shards.max(1));
        self
    }

    /// How long a reader waits after a `GetRecords` call that returned nothing (default 1 s).
    /// Calls are never closer than 200 ms apart, the service's limit of five per second per shard.
    #[must_use]
    pub fn poll_interval(mut self, interval: Duration) -> Self {
        self.poll_interval = interval;
        self
    }

    /// The `Limit` of each `GetRecords` call (default 1,000, at most 10,000).
    #[must_use]
    pub fn batch_size(mut self, size: u32) -> Self {
        self.batch_size = size.clamp(1, crate::validate::MAX_GET_RECORDS_LIMIT);
        self
    }

    /// How long a batch handler (`&[T]`) waits to fill a batch before it takes what arrived
    /// (default 50 ms).
    #[must_use]
    pub fn max_wait(mut self, wait: Duration) -> Self {
        self.max_wait = wait;
        self
    }

    /// The stream's name.
    #[must_use]
    pub fn stream_name(&self) -> &str {
        &self.name
    }
}

impl FromName for KinesisStream {
    fn from_name(name: impl Into<Cow<'static, str>>) -> Self {
        Self::new(name)
    }
}

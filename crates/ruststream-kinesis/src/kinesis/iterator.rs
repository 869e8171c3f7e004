//! Where a `GetRecords` call reads from. A data type of its own so the shard machine, which is
//! pure, can hold one without importing the calls that hand it out ([`super::calls`]).

/// A shard iterator: where the next `GetRecords` of a shard reads from.
///
/// The service's is an opaque string that Kinesis hands out
/// (`GetShardIterator`, or `NextShardIterator` in a `GetRecords` answer) and that expires after
/// five minutes. In process (feature `testing`) it is a position in a shard, with no string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ShardIterator {
    /// An iterator the Kinesis service handed out.
    Service(String),
    /// A position in a shard of the in-process Kinesis: the indices of its stream and shard,
    /// and of the next record to read.
    #[cfg(feature = "testing")]
    InProcess {
        stream: u32,
        shard: u32,
        position: u64,
    },
}

impl ShardIterator {
    /// The service's iterator `text`.
    pub(crate) fn service(text: impl Into<String>) -> Self {
        Self::Service(text.into())
    }

    /// An in-process iterator's stream, shard and position (`None` for the service's).
    #[cfg(feature = "testing")]
    pub(crate) fn in_process(&self) -> Option<(u32, u32, u64)> {
        match *self {
            Self::InProcess {
                stream,
                shard,
                position,
            } => Some((stream, shard, position)),
            Self::Service(_) => None,
        }
    }
}

impl std::fmt::Display for ShardIterator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Service(text) => f.write_str(text),
            #[cfg(feature = "testing")]
            Self::InProcess {
                stream,
                shard,
                position,
            } => write!(f, "in-process:{stream}:{shard}:{position}"),
        }
    }
}

//! What the coordinator hears from outside its driver: a reader that stopped or ended, a seek
//! that moved where new shards start. Queued by the readers and the seeks, and applied to the
//! coordinator, in the order queued, each time its driver next uses it, so nothing
//! outside the driver touches the coordinator, and everything sent before the driver reads an
//! answer (a reader's stop is sent before its release is written) counts when it applies it.

use std::sync::Arc;

use crate::KinesisPosition;
use crate::clock::Instant;
use crate::coordinator::machine::Coordinator;
use crate::shard::Stop;

/// One thing the coordinator hears.
#[derive(Debug)]
pub(crate) enum Heard {
    /// The reader of `shard` stopped reading for `stop`, at `at`; `coin` draws a backoff's
    /// jitter.
    ReaderStopped {
        shard: Arc<str>,
        stop: Stop,
        at: Instant,
        coin: u64,
    },
    /// The reader of `shard` ended, `finished` when it read the shard to its end.
    ReaderEnded { shard: Arc<str>, finished: bool },
    /// A seek of every shard: where the shards taken after it without a checkpoint start.
    StartAt(KinesisPosition),
}

impl Heard {
    /// Hands it to the coordinator.
    pub(crate) fn apply(self, coordinator: &mut Coordinator<Instant>) {
        match self {
            Self::ReaderStopped {
                shard,
                stop,
                at,
                coin,
            } => coordinator.reader_stopped(&shard, stop, at, coin),
            Self::ReaderEnded { shard, finished } => coordinator.reader_ended(&shard, finished),
            Self::StartAt(initial) => coordinator.start_at(initial),
        }
    }
}

//! What one shard's reader works with, and nothing more: its stream, shard and owner, the store
//! and the Kinesis it calls, its meters with the shard's labels bound, the settings it
//! reads by, the channel its deliveries go out on, and the subscription it belongs to (which
//! resolves a handler's seek and hears how the reader ended).

use std::sync::Arc;

use super::ShardEnv;
use crate::delivery::message::Origin;
use crate::delivery::seeker::Source;
use crate::live::subscription::Subscription;
use crate::telemetry::LeaseEvent;
use crate::{KinesisError, KinesisSeeker};

impl ShardEnv {
    /// The world of the reader of `shard` of `home`'s stream.
    pub(crate) fn of(home: &Arc<Subscription>, shard: &Arc<str>) -> Self {
        Self {
            owner: Arc::clone(&home.owner),
            store: Arc::clone(&home.store),
            kinesis: home.kinesis.clone(),
            meters: home.meters.shard(&home.stream, shard, &home.owner_label),
            lease: home.timings.row_lease(),
            batch_size: home.read.batch_size,
            event_silence: home.read.pace.event_silence,
            stall_after: home.stall_after,
            fan_out: home.fan_out.clone(),
            #[cfg(feature = "dynamodb-lease")]
            exactly_once: home.exactly_once,
            #[cfg(feature = "dynamodb-lease")]
            transactions: home.transactions.clone(),
            #[cfg(feature = "dynamodb-lease")]
            commit_tables: home
                .transactions
                .as_ref()
                .and_then(crate::lease::Transactions::commit_tables),
            tx: home.tx.records.clone(),
            origin: Arc::new(Origin {
                stream: Arc::clone(&home.stream),
                shard: Arc::clone(shard),
                seeker: KinesisSeeker::new(Arc::clone(home) as Arc<dyn Source>),
            }),
            home: Arc::clone(home),
        }
    }

    /// The shard's lease was taken and its reader starts: counted, and its per-shard series show
    /// from now on.
    pub(crate) fn taken(&self) {
        self.meters.lease_event(LeaseEvent::Taken);
        self.meters.reader_started();
    }

    /// Reports a failure to the subscriber stream (see [`Subscription::report`]).
    pub(super) fn report(&self, err: KinesisError) {
        self.home.report(err);
    }

    /// Reports a failed lease write.
    pub(super) fn lease_failed(&self, source: crate::LeaseError) {
        self.home
            .report(self.home.lease_error(&self.origin.shard, source));
    }
}

//! What makes the deliveries of one shard's records: the reader's, shared with its redeliveries
//! and with the runs of records it sends, which are made deliveries where the subscriber takes
//! them.

use std::sync::Arc;

use super::ShardEnv;
use crate::KinesisMessage;
use crate::delivery::message::Origin;
use crate::delivery::record::Record;
use crate::delivery::run::MakeDelivery;
use crate::delivery::settlement::{Hold, Settlement};
use crate::shard::ShardHandle;
use crate::watermark::Ticket;

/// Makes a shard's deliveries: where they come from, what they settle against, and, exactly
/// once, what their handlings stage with.
#[derive(Debug)]
pub(super) struct Deliverer {
    origin: Arc<Origin>,
    handle: Arc<ShardHandle>,
    /// Whether handlers' staged writes commit with the checkpoint (exactly once).
    #[cfg(feature = "dynamodb-lease")]
    exactly_once: bool,
    /// What the store knows of the tables commits write (exactly once).
    #[cfg(feature = "dynamodb-lease")]
    commit_tables: Option<crate::lease::CommitTables>,
    /// In process, where exactly-once handlings are recorded.
    #[cfg(all(feature = "testing", feature = "dynamodb-lease"))]
    journal: Option<crate::InProcessCommits>,
}

impl Deliverer {
    /// The maker of the deliveries of `handle`'s shard in `env`.
    pub(super) fn of(env: &ShardEnv, handle: &Arc<ShardHandle>) -> Self {
        Self {
            origin: Arc::clone(&env.origin),
            handle: Arc::clone(handle),
            #[cfg(feature = "dynamodb-lease")]
            exactly_once: env.exactly_once,
            #[cfg(feature = "dynamodb-lease")]
            commit_tables: env.commit_tables.clone(),
            #[cfg(all(feature = "testing", feature = "dynamodb-lease"))]
            journal: env.home.journal.clone(),
        }
    }
}

impl MakeDelivery for Deliverer {
    // Inlined into the loops that build a send's deliveries and into a run's take: the record
    // and the delivery are built where they go rather than copied there.
    #[inline]
    fn deliver(&self, record: Record, ticket: Ticket, attempt: u64) -> KinesisMessage {
        #[cfg(feature = "dynamodb-lease")]
        let writes = self.exactly_once.then(|| {
            crate::StagedWrites::exactly_once(
                (&self.origin.shard, &record.sequence),
                self.handle.take_refusal(ticket),
            )
            .with_commit_tables(self.commit_tables.clone())
        });
        let message = KinesisMessage::new(
            record,
            Arc::clone(&self.origin),
            attempt,
            Hold::new(Arc::clone(&self.handle) as Arc<dyn Settlement>, ticket),
        );
        #[cfg(feature = "dynamodb-lease")]
        if let Some(writes) = writes {
            #[cfg(feature = "testing")]
            let writes = match self.journal.clone() {
                Some(journal) => writes.logged(crate::lease::HandlingSeed {
                    journal,
                    stream: Arc::clone(&self.origin.stream),
                    records: vec![message.handled_record()],
                    attempt,
                }),
                None => writes,
            };
            return message.with_writes(writes);
        }
        message
    }

    fn current(&self, ticket: Ticket) -> bool {
        self.handle.queued_standing(ticket).reaches_handler()
    }
}

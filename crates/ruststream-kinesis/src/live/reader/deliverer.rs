//! What makes the deliveries of one shard's records: the reader's, shared with its redeliveries
//! and with the runs of records it sends, which are made deliveries where the subscriber takes
//! them.

use std::sync::{Arc, Mutex, PoisonError};

use super::ShardEnv;
use crate::KinesisMessage;
use crate::delivery::outlet::HANDED_AT_ONCE;
use crate::delivery::record::Record;
use crate::delivery::run::{MakeDelivery, Plain};
use crate::delivery::settlement::Settlement;
use crate::shard::ShardHandle;
use crate::watermark::Ticket;

/// Makes a shard's deliveries: where they come from, what they settle against, and, exactly
/// once, what their handlings stage with.
#[derive(Debug)]
pub(super) struct Deliverer {
    /// Where its deliveries come from, and the shard they settle against.
    plain: Plain,
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
    /// The lists of runs the subscriber emptied, for the reader's next runs (up to
    /// [`RUN_SPARES_KEPT`]).
    spares: Mutex<Vec<Vec<Record>>>,
}

/// Emptied lists of runs kept for a shard's next runs (each with room for
/// [`HANDED_AT_ONCE`] records, 8 KiB): a reader's runs in the channel at once are few, and a
/// list let go past these is allocated again when needed.
const RUN_SPARES_KEPT: usize = 4;

impl Deliverer {
    /// The maker of the deliveries of `handle`'s shard in `env`.
    pub(super) fn of(env: &ShardEnv, handle: &Arc<ShardHandle>) -> Self {
        Self {
            plain: Plain {
                origin: Arc::clone(&env.origin),
                target: Arc::clone(handle) as Arc<dyn Settlement>,
            },
            handle: Arc::clone(handle),
            #[cfg(feature = "dynamodb-lease")]
            exactly_once: env.exactly_once,
            #[cfg(feature = "dynamodb-lease")]
            commit_tables: env.commit_tables.clone(),
            #[cfg(all(feature = "testing", feature = "dynamodb-lease"))]
            journal: env.home.journal.clone(),
            spares: Mutex::default(),
        }
    }

    /// An empty list for the records of a run, with room for [`HANDED_AT_ONCE`]: one a run
    /// gave back, or a new one.
    pub(super) fn take_list(&self) -> Vec<Record> {
        self.spares
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop()
            .unwrap_or_else(|| Vec::with_capacity(HANDED_AT_ONCE))
    }
}

impl MakeDelivery for Deliverer {
    // Inlined into the reader's loops that build a send's deliveries (a run calls it through
    // its maker under exactly once; otherwise it makes them itself, `plain`): the record and
    // the delivery are built where they go, not copied there.
    #[inline]
    fn deliver(&self, record: Record, ticket: Ticket, attempt: u64) -> KinesisMessage {
        #[cfg(feature = "dynamodb-lease")]
        let writes = self.exactly_once.then(|| {
            crate::StagedWrites::exactly_once(
                (&self.plain.origin.shard, &record.sequence),
                self.handle.take_refusal(ticket),
            )
            .with_commit_tables(self.commit_tables.clone())
        });
        let message = self.plain.deliver(record, ticket, attempt);
        #[cfg(feature = "dynamodb-lease")]
        if let Some(writes) = writes {
            #[cfg(feature = "testing")]
            let writes = match self.journal.clone() {
                Some(journal) => writes.logged(crate::lease::HandlingSeed {
                    journal,
                    stream: Arc::clone(&self.plain.origin.stream),
                    records: vec![message.handled_record()],
                    attempt,
                }),
                None => writes,
            };
            return message.with_writes(writes);
        }
        message
    }

    fn plain(&self) -> Option<Plain> {
        #[cfg(feature = "dynamodb-lease")]
        if self.exactly_once {
            return None;
        }
        Some(self.plain.clone())
    }

    fn current(&self, ticket: Ticket) -> bool {
        Settlement::current(&*self.handle, ticket)
    }

    fn give_back(&self, emptied: Vec<Record>) {
        let mut kept = self.spares.lock().unwrap_or_else(PoisonError::into_inner);
        if kept.len() < RUN_SPARES_KEPT && emptied.capacity() >= HANDED_AT_ONCE {
            kept.push(emptied);
        }
    }
}

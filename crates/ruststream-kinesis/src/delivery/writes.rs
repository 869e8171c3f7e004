//! Exactly once into DynamoDB, the handler's side: the writes a handling stages
//! ([`StagedWrites`], read through the context key [`DynamoWrites`]), checked against the limits
//! of one transaction as they are staged, and what a refused commit tells the record's next
//! delivery ([`CommitRefused`]).

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::{Arc, Mutex, PoisonError};

use aws_sdk_dynamodb::types::{AttributeValue, TransactWriteItem};
use ruststream::{ContextField, Field};

use crate::SharedStr;
use crate::commit::fold::{Exceeded, fits};
use crate::commit::{ItemRef, Limits, UnitSize};
use crate::lease::CommitTables;
use crate::{KinesisBatchContext, KinesisContext};

mod handling;

use crate::lease::{CommitRefused, HandlingOutcome};
pub(crate) use handling::Handling;

/// `Ctx<DynamoWrites>` in a handler binds the delivery's [`StagedWrites`]; without macros,
/// `ctx.context(DynamoWrites)`. Under [`KinesisStream::exactly_once`](crate::KinesisStream::exactly_once)
/// what a handling stages commits with the checkpoint that covers its record, in one
/// DynamoDB transaction conditioned on this instance's lease.
///
/// # Examples
///
/// ```
/// use aws_sdk_dynamodb::types::{AttributeValue, TransactWriteItem, Update};
/// use ruststream_kinesis::prelude::*;
/// use ruststream_kinesis::DynamoWrites;
/// use serde::Deserialize;
///
/// #[derive(Debug, Deserialize)]
/// struct Order {
///     id: u64,
/// }
///
/// /// Counts each order once in the table `order-counts`, whatever crashes in between.
/// #[subscriber(KinesisStream::new("orders").exactly_once())]
/// async fn count(order: &Order, Ctx(writes): Ctx<DynamoWrites>) -> HandlerOutcome {
///     let update = Update::builder()
///         .table_name("order-counts")
///         .key("id", AttributeValue::S(order.id.to_string()))
///         .update_expression("ADD applied :one")
///         .expression_attribute_values(":one", AttributeValue::N("1".into()))
///         .build()
///         .expect("table, key and expression are set");
///     match writes.stage(TransactWriteItem::builder().update(update).build()) {
///         Ok(()) => HandlerOutcome::ack(),
///         // A limit of one transaction: the error names it.
///         Err(_) => HandlerOutcome::retry(),
///     }
/// }
/// # let _ = count;
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct DynamoWrites;

impl ContextField for DynamoWrites {
    type Context = KinesisContext;
    type Value = StagedWrites;
    fn read(self, src: &KinesisContext) -> StagedWrites {
        src.writes.clone()
    }
}

impl Field<KinesisContext> for DynamoWrites {
    type Value<'a> = &'a StagedWrites;
    fn get(self, src: &KinesisContext) -> &StagedWrites {
        &src.writes
    }
}

/// A batch body reads the batch's writes with `ctx.context(DynamoWrites)`.
impl Field<KinesisBatchContext> for DynamoWrites {
    type Value<'a> = &'a StagedWrites;
    fn get(self, src: &KinesisBatchContext) -> &StagedWrites {
        &src.writes
    }
}

/// The DynamoDB writes one handling stages. They commit when the handler acknowledges the
/// record, together with the checkpoint that covers it, in one `TransactWriteItems` whose
/// lease-row update is conditioned on this instance's lease: both land or neither does. A
/// handler that hands the record back (`retry`, a drop unsettled) commits nothing of it, and
/// `nack(false)` (a drop) lets the checkpoint pass it with nothing staged.
#[derive(Debug, Clone, Default)]
pub struct StagedWrites {
    /// `None` in a subscription read at least once (nothing to clone per delivery there).
    staging: Option<Arc<Staging>>,
}

#[derive(Debug)]
struct Staging {
    shard: Arc<str>,
    sequence: SharedStr,
    /// `None` once the delivery settled: what was staged went to its commit.
    open: Mutex<Option<Open>>,
    /// Why this record's previous commit was refused, if it was.
    refused: Option<Arc<CommitRefused>>,
    /// In process, where the handling is recorded once it ends (taken then).
    #[cfg(feature = "testing")]
    log: Mutex<Option<crate::lease::HandlingSeed>>,
    /// What the lease store knows of the tables a commit writes (their keys, the lease table's
    /// region).
    tables: Option<CommitTables>,
    /// How many lease rows the commit updates with the writes: one, or one per shard of a
    /// batch that spans shards. Each takes one of the transaction's actions.
    rows: usize,
}

#[derive(Debug, Default)]
struct Open {
    writes: Vec<TransactWriteItem>,
    /// About what the writes weigh.
    bytes: usize,
    /// The items the writes touch, as the fold compares them across units: a put into a table
    /// whose key is not known here clashes with every item of its table.
    items: Vec<ItemRef>,
    /// Each keyed write's table and key, as text: a second write on one of them is refused.
    keyed: Vec<(String, String)>,
}

/// Why a write could not be staged. Nothing of it was staged, and what was staged before stays.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StageError {
    /// The subscription does not commit exactly once.
    #[error(
        "the handler's subscription is not exactly once, so a staged write would never commit; \
         mount it with KinesisStream::new(..).exactly_once()"
    )]
    NotExactlyOnce,
    /// The delivery was settled (its commit is under way) or handed back (its writes were let
    /// go).
    #[error(
        "the delivery of sequence number {sequence} in shard {shard} was settled or handed \
         back; stage its writes before acknowledging it"
    )]
    Sealed {
        /// The shard.
        shard: String,
        /// The record's sequence number.
        sequence: String,
    },
    /// The write names no action, or more than one (put, update, delete, condition check).
    #[error(
        "a TransactWriteItem carries exactly one of put, update, delete and condition_check; \
         this one carries {found}"
    )]
    NotOneAction {
        /// How many it carries.
        found: usize,
    },
    /// More writes than one transaction holds beside the lease rows.
    #[error(
        "a handling stages at most {limit} writes (DynamoDB's 100 actions per transaction, one \
         of them per shard's lease row: one, or one per shard of a batch that spans shards); \
         this one would stage {staged}: split the work over records, or write the rest outside \
         the transaction"
    )]
    TooManyActions {
        /// The most writes one handling stages.
        limit: usize,
        /// How many it would have staged with this one.
        staged: usize,
    },
    /// More bytes than one transaction holds beside the lease rows.
    #[error(
        "a handling stages at most {limit_bytes} bytes (DynamoDB's 4 MB per transaction, less \
         the lease rows); this one would stage about {bytes}"
    )]
    TooLarge {
        /// The most bytes one handling stages.
        limit_bytes: usize,
        /// About how many it would have staged with this one.
        bytes: usize,
    },
    /// A write names its table by an ARN in another region than the lease table: a commit runs
    /// in the lease table's region, and a DynamoDB transaction never spans regions.
    #[error(
        "table {table:?} is in region {region}, and a commit runs in the lease table's region \
         {lease_region} (a DynamoDB transaction never spans regions): keep the lease table in the \
         region of the tables the handler writes, or write this one outside the transaction"
    )]
    OtherRegion {
        /// The table, as the write names it.
        table: String,
        /// Its region.
        region: String,
        /// The lease table's region.
        lease_region: String,
    },
    /// Two writes of one handling on one item: DynamoDB refuses such a transaction.
    #[error(
        "table {table:?}: two writes on the item with key {key}; a transaction writes an item \
         once (merge them into one update)"
    )]
    TwoActionsOnOneItem {
        /// The table.
        table: String,
        /// The item's key.
        key: String,
    },
}

impl StagedWrites {
    /// Stages `item`, to commit with the checkpoint that covers this record. Fails, staging
    /// nothing, when the subscription is not exactly once, the delivery was settled, or the
    /// writes would exceed what one transaction holds.
    ///
    /// # Errors
    ///
    /// A [`StageError`] naming the limit or the mistake.
    pub fn stage(&self, item: TransactWriteItem) -> Result<(), StageError> {
        let Some(staging) = &self.staging else {
            return Err(StageError::NotExactlyOnce);
        };
        let mut open = staging.open.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(open) = open.as_mut() else {
            return Err(StageError::Sealed {
                shard: staging.shard.to_string(),
                sequence: staging.sequence.to_string(),
            });
        };
        let action = Action::of(&item)?;
        if let Some((region, lease_region)) = staging
            .tables
            .as_ref()
            .and_then(|tables| tables.other_region(action.table))
        {
            return Err(StageError::OtherRegion {
                table: action.table.to_owned(),
                region,
                lease_region,
            });
        }
        let key = action.key_text(staging.tables.as_ref());
        if let Some(key) = &key
            && open
                .keyed
                .iter()
                .any(|(table, staged)| table == action.table && staged == key)
        {
            return Err(StageError::TwoActionsOnOneItem {
                table: action.table.to_owned(),
                key: key.clone(),
            });
        }
        let size = UnitSize {
            actions: open.writes.len() + 1,
            bytes: open.bytes + action.bytes,
            items: Arc::default(),
        };
        fits(&size, staging.rows, Limits::DYNAMODB).map_err(|exceeded| match exceeded {
            Exceeded::Actions { limit, staged } => StageError::TooManyActions { limit, staged },
            Exceeded::Bytes { limit, staged } => StageError::TooLarge {
                limit_bytes: limit,
                bytes: staged,
            },
        })?;
        open.bytes = size.bytes;
        open.items.push(ItemRef {
            table: hash_of(action.table),
            key: key.as_ref().map(hash_of),
        });
        if let Some(key) = key {
            open.keyed.push((action.table.to_owned(), key));
        }
        open.writes.push(item);
        Ok(())
    }

    /// Why this record's previous commit was refused by one of its writes, if it was: the
    /// record comes again after such a refusal.
    #[must_use]
    pub fn refused(&self) -> Option<&CommitRefused> {
        self.staging.as_ref()?.refused.as_deref()
    }

    /// How many writes are staged.
    #[must_use]
    pub fn len(&self) -> usize {
        self.staging.as_ref().map_or(0, |staging| {
            staging
                .open
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .as_ref()
                .map_or(0, |open| open.writes.len())
        })
    }

    /// Whether nothing is staged.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The writes of the delivery of `sequence` from `shard`, read by an exactly-once
    /// subscription; `refused`: why its previous commit was refused.
    pub(crate) fn exactly_once(
        (shard, sequence): (&Arc<str>, &SharedStr),
        refused: Option<Arc<CommitRefused>>,
    ) -> Self {
        Self {
            staging: Some(Arc::new(Staging {
                shard: Arc::clone(shard),
                sequence: sequence.clone(),
                open: Mutex::new(Some(Open::default())),
                refused,
                #[cfg(feature = "testing")]
                log: Mutex::default(),
                tables: None,
                rows: 1,
            })),
        }
    }

    /// The writes, staged knowing what `tables` knows (a put into a table whose key it knows
    /// touches one item; a table named by an ARN in another region is refused).
    pub(crate) fn with_commit_tables(mut self, tables: Option<CommitTables>) -> Self {
        if let Some(staging) = self.staging.as_mut().and_then(Arc::get_mut) {
            staging.tables = tables;
        }
        self
    }

    /// The writes of a batch of `shards` shards: its commit updates as many lease rows, each of
    /// which takes one action of the transaction.
    #[cfg(feature = "dynamodb-lease")]
    pub(crate) fn spanning(mut self, shards: usize) -> Self {
        if let Some(staging) = self.staging.as_mut().and_then(Arc::get_mut) {
            staging.rows = shards.max(1);
        }
        self
    }

    /// What these writes are staged knowing of the tables a commit writes.
    pub(crate) fn commit_tables(&self) -> Option<CommitTables> {
        self.staging.as_ref()?.tables.clone()
    }

    /// In process: the handling is recorded with `seed` once it ends.
    #[cfg(feature = "testing")]
    pub(crate) fn logged(self, seed: crate::lease::HandlingSeed) -> Self {
        if let Some(staging) = &self.staging {
            *staging.log.lock().unwrap_or_else(PoisonError::into_inner) = Some(seed);
        }
        self
    }

    /// In process, the journal the handling is to be recorded in.
    #[cfg(feature = "testing")]
    pub(crate) fn journal(&self) -> Option<crate::InProcessCommits> {
        let staging = self.staging.as_ref()?;
        let log = staging.log.lock().unwrap_or_else(PoisonError::into_inner);
        log.as_ref().map(|seed| seed.journal.clone())
    }

    /// The handling, which staged `staged` (what [`seal`](Self::seal) answered), stands at
    /// `outcome`: recorded in process, and its entry answered for its ending to update.
    pub(crate) fn handled(
        &self,
        staged: &[TransactWriteItem],
        outcome: HandlingOutcome,
    ) -> Handling {
        #[cfg(feature = "testing")]
        if let Some(staging) = &self.staging {
            let seed = staging
                .log
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take();
            return Handling {
                entry: seed.map(|seed| seed.record(&staging.shard, staged, outcome)),
            };
        }
        let _ = (staged, outcome);
        Handling::default()
    }

    /// Ends the staging of a handling that commits nothing (`outcome`: handed back or
    /// dropped): what was staged is let go.
    pub(crate) fn let_go(&self, outcome: HandlingOutcome) {
        let (staged, _) = self.seal();
        self.handled(&staged, outcome);
    }

    /// Whether the delivery commits what it staged.
    pub(crate) fn is_exactly_once(&self) -> bool {
        self.staging.is_some()
    }

    /// Ends the staging (its delivery settled): what was staged, and what it weighs. Staging
    /// after this fails.
    pub(crate) fn seal(&self) -> (Vec<TransactWriteItem>, UnitSize) {
        let open = self.staging.as_ref().and_then(|staging| {
            staging
                .open
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take()
        });
        open.map(|open| {
            let size = UnitSize {
                actions: open.writes.len(),
                bytes: open.bytes,
                items: open.items.into(),
            };
            (open.writes, size)
        })
        .unwrap_or_default()
    }
}

/// One staged write as the limits see it: its table, its key (where the write names it), a
/// put's item, and about how many bytes it weighs.
struct Action<'a> {
    table: &'a str,
    key: Option<&'a HashMap<String, AttributeValue>>,
    put: Option<&'a HashMap<String, AttributeValue>>,
    bytes: usize,
}

impl<'a> Action<'a> {
    fn of(item: &'a TransactWriteItem) -> Result<Self, StageError> {
        let mut found = Vec::new();
        if let Some(put) = item.put() {
            found.push(Self {
                table: put.table_name(),
                key: None,
                put: Some(put.item()),
                bytes: map_bytes(put.item())
                    + expression_bytes(
                        put.condition_expression(),
                        put.expression_attribute_values(),
                    ),
            });
        }
        if let Some(update) = item.update() {
            found.push(Self {
                table: update.table_name(),
                key: Some(update.key()),
                put: None,
                bytes: map_bytes(update.key())
                    + update.update_expression().len()
                    + expression_bytes(
                        update.condition_expression(),
                        update.expression_attribute_values(),
                    ),
            });
        }
        if let Some(delete) = item.delete() {
            found.push(Self {
                table: delete.table_name(),
                key: Some(delete.key()),
                put: None,
                bytes: map_bytes(delete.key())
                    + expression_bytes(
                        delete.condition_expression(),
                        delete.expression_attribute_values(),
                    ),
            });
        }
        if let Some(check) = item.condition_check() {
            found.push(Self {
                table: check.table_name(),
                key: Some(check.key()),
                put: None,
                bytes: map_bytes(check.key())
                    + expression_bytes(
                        Some(check.condition_expression()),
                        check.expression_attribute_values(),
                    ),
            });
        }
        match found.len() {
            1 => Ok(found.remove(0)),
            found => Err(StageError::NotOneAction { found }),
        }
    }

    /// The key as text, its attributes in order: the one the write names, or a put's item's
    /// attributes that `tables` says make its table's key (`None`: not known).
    fn key_text(&self, tables: Option<&CommitTables>) -> Option<String> {
        let mut parts: Vec<String> = match (self.key, self.put) {
            (Some(key), _) => key
                .iter()
                .map(|(name, value)| format!("{name}={value:?}"))
                .collect(),
            (None, Some(item)) => {
                let names = tables?.key_of(self.table)?;
                names
                    .iter()
                    .map(|name| Some(format!("{name}={:?}", item.get(name)?)))
                    .collect::<Option<_>>()?
            }
            (None, None) => return None,
        };
        parts.sort();
        Some(parts.join(", "))
    }
}

fn hash_of(value: impl Hash) -> u64 {
    let mut hasher = DefaultHasher::new();
    value.hash(&mut hasher);
    hasher.finish()
}

/// A fixed allowance per write for its table name and the request's framing.
const ACTION_OVERHEAD_BYTES: usize = 300;

fn expression_bytes(
    condition: Option<&str>,
    values: Option<&HashMap<String, AttributeValue>>,
) -> usize {
    ACTION_OVERHEAD_BYTES + condition.map_or(0, str::len) + values.map_or(0, map_bytes)
}

fn map_bytes(map: &HashMap<String, AttributeValue>) -> usize {
    map.iter()
        .map(|(name, value)| name.len() + value_bytes(value))
        .sum()
}

/// About what DynamoDB counts a value as (its item size rules), rounded up.
fn value_bytes(value: &AttributeValue) -> usize {
    match value {
        AttributeValue::S(text) | AttributeValue::N(text) => text.len(),
        AttributeValue::B(blob) => blob.as_ref().len(),
        AttributeValue::Ss(texts) | AttributeValue::Ns(texts) => {
            texts.iter().map(String::len).sum()
        }
        AttributeValue::Bs(blobs) => blobs.iter().map(|blob| blob.as_ref().len()).sum(),
        AttributeValue::M(map) => 3 + map_bytes(map),
        AttributeValue::L(list) => 3 + list.iter().map(|v| 1 + value_bytes(v)).sum::<usize>(),
        _ => 1,
    }
}

#[cfg(test)]
mod tests;

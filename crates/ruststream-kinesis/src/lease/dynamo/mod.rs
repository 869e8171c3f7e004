//! The lease table in DynamoDB, shared by every instance of a service.

use std::collections::{HashMap, HashSet};
use std::fmt::Debug;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use crate::clock::Instant;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, KeySchemaElement, KeyType, ReturnValue,
    ReturnValuesOnConditionCheckFailure, ScalarAttributeType, TableStatus,
};

use super::{
    HeldEffect, LeaseError, LeaseFuture, LeaseKey, LeaseState, LeaseStore, SKEW_TOLERANCE,
    epoch_millis, landed, millis,
};

/// The table's only key attribute: `stream:shard`, a string.
const KEY: &str = "lease_key";
/// The owner id holding the lease; removed by a release.
const OWNER: &str = "lease_owner";
/// When the lease lapses, in epoch milliseconds by the writer's clock.
const EXPIRY: &str = "lease_expiry";
/// Bumped by every write.
const COUNTER: &str = "lease_counter";
/// The last checkpoint: a sequence number or `SHARD_END`.
const CHECKPOINT: &str = "checkpoint";

/// A take succeeds when the row is new, has no owner, has this owner, or expired more than
/// [`SKEW_TOLERANCE`] ago by the taker's clock (`:cutoff` is now minus the tolerance). A take
/// of a row this owner holds never moves its expiry back: a take of ours that lands late, after
/// its call timed out and renewals went ahead, is refused rather than shortening the lease.
const TAKE_CONDITION: &str = "attribute_not_exists(lease_key) OR attribute_not_exists(lease_owner) \
     OR (lease_owner = :me AND lease_expiry <= :expiry) OR lease_expiry < :cutoff";
/// Renewals, checkpoints and releases need the lease.
const HELD_CONDITION: &str = "lease_owner = :me";
const HELD_AT_CONDITION: &str = "lease_owner = :me AND lease_counter = :seen";
/// The copy of a legacy row creates the new row, and never overwrites one.
const NEW_ROW_CONDITION: &str = "attribute_not_exists(lease_key)";

/// How long [`DynamoLeaseStore::create_table`] waits for a new table to become active.
const TABLE_ACTIVE_TIMEOUT: Duration = Duration::from_secs(120);

type Item = HashMap<String, AttributeValue>;

/// A [`LeaseStore`] on a DynamoDB table, which lets the instances of a service share the shards
/// of a stream: each shard is read by the one instance that holds its row.
///
/// # The table
///
/// One string hash key, `lease_key`, and nothing else; on-demand billing fits it. The table is
/// infrastructure like the stream: create it once, with Terraform, CloudFormation or the AWS CLI
/// (the command is [`create_command`](Self::create_command)). One table serves every stream of a
/// service. A row holds one shard of one stream:
///
/// | attribute | type | holds |
/// |---|---|---|
/// | `lease_key` | S | `stream:shard` (see [`LeaseKey`]) |
/// | `lease_owner` | S | the owner id holding the lease; removed by a release |
/// | `lease_expiry` | N | when the lease lapses, epoch milliseconds by the writer's clock |
/// | `lease_counter` | N | bumped by every write |
/// | `checkpoint` | S | the last checkpoint: a sequence number or [`SHARD_END`](crate::SHARD_END) |
///
/// # The protocol
///
/// Every write is a conditional `UpdateItem`, and every read a strongly consistent `GetItem`.
/// A take succeeds when the row does not exist, has no owner, has this owner, or expired more
/// than [`SKEW_TOLERANCE`] ago by the taker's clock; the answer of a refused take (read from the
/// same request, `ReturnValuesOnConditionCheckFailure`) names the holder in
/// [`LeaseError::Held`]. Renewals, checkpoints and releases succeed only while the row names
/// this owner, and answer [`LeaseError::Lost`] otherwise, so a checkpoint never lands from an
/// instance that lost the shard. Once this store has written a row, they are also conditioned on
/// the `lease_counter` its last write left there: a write of its own that lands late (its call
/// timed out while newer ones went ahead) is refused rather than moving the checkpoint or the
/// expiry back, and a process restarted under the same owner id fences out the old one's writes
/// (a refusal that finds the row still ours after one of our writes had an unknown outcome
/// adopts the row's counter and tries once more). A missing table answers [`LeaseError::TableMissing`] with the
/// command that creates it; any other error of DynamoDB answers [`LeaseError::Store`] with its
/// code and message.
///
/// A write DynamoDB applied whose answer was lost (a 5xx, a reset connection), which the SDK then
/// sent again and DynamoDB refused by the counter the first attempt had moved, is recognised as
/// this write's own success: the refused row shows this owner, the counter one past the one the
/// write was conditioned on, and exactly the values the write set. Any other refusal is a lost
/// lease.
///
/// Every call has an operation timeout of 3 s (an attempt timeout of 1.5 s) where the AWS
/// configuration sets none, and a subscription bounds each call by its renewal interval too. A
/// row that cannot be read (an attribute of the wrong type) is skipped with a warning naming its
/// key: a bad row of another stream never stops a stream's listing.
///
/// The calls the store makes need the IAM actions `dynamodb:GetItem` and `dynamodb:UpdateItem`
/// on the table; [`rows`](Self::rows) and the coordinator's handover poll (`list`, once a second
/// while a shard of the stream is held by another instance) need `dynamodb:Scan`, and
/// [`create_table`](Self::create_table) `dynamodb:CreateTable` and `dynamodb:DescribeTable`.
///
/// # Tables of earlier versions
///
/// An earlier version of the crate keyed rows by the bare shard id. When a shard's
/// `stream:shard` row does not exist yet, a take first reads the bare row of that shard id:
///
/// - with [`legacy_stream`](Self::legacy_stream) naming the shard's stream, a bare row with a
///   checkpoint is copied into a new `stream:shard` row, which the take then holds, so the
///   upgraded service resumes where the old one stopped (the bare row stays, and is not read
///   again);
/// - with `legacy_stream` naming another stream, bare rows are ignored for this stream;
/// - without `legacy_stream`, a bare row with a checkpoint makes the take fail with
///   [`LeaseError::LegacyRow`], so the shard neither starts from another stream's progress nor
///   from the tip by accident: name the stream, or delete the row.
///
/// Stop every instance of the earlier version before starting the upgraded one: the two
/// versions do not see each other's leases.
///
/// Once a store has seen a shard's row exist, it skips the look-up of the bare row (the fact is
/// kept per store, and shared by its clones).
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use aws_config::{BehaviorVersion, Region, SdkConfig};
/// use ruststream_kinesis::{DynamoLeaseStore, KinesisBroker};
///
/// // In a service: `aws_config::defaults(BehaviorVersion::latest()).load().await`.
/// let config = SdkConfig::builder()
///     .behavior_version(BehaviorVersion::latest())
///     .region(Region::new("us-east-1"))
///     .build();
/// let leases = Arc::new(DynamoLeaseStore::new(&config, "warehouse-leases"));
/// let broker = KinesisBroker::from_config(config.clone()).lease_store(leases);
/// # let _ = broker;
/// ```
#[derive(Debug, Clone)]
pub struct DynamoLeaseStore {
    client: Client,
    table: Arc<str>,
    legacy_stream: Option<Arc<str>>,
    /// The keys whose `stream:shard` row this store has seen exist.
    existing: Arc<Mutex<HashSet<LeaseKey>>>,
    /// The shard ids of the bare rows of an earlier version that this store's newest whole-table
    /// Scan saw; `None` before the first. A first take looks a bare row up only when the Scan
    /// saw one for its shard (or there was no Scan yet).
    bare_rows: Arc<Mutex<Option<HashSet<String>>>>,
    /// Per held row, the counter this store's last write left there, and whether a write of
    /// this store since then has an unknown outcome (it failed in transport, so it may still land).
    fences: Arc<Mutex<HashMap<LeaseKey, Fence>>>,
}

/// What this store knows of its own writes to one row: held writes are conditioned on the
/// counter it last saw, so a write of its own that lands late (after its call timed out, behind
/// newer writes) is refused instead of moving the checkpoint or the expiry back, and a process
/// restarted under the same owner id fences out the old one's writes.
#[derive(Debug, Clone, Copy, Default)]
struct Fence {
    counter: Option<u64>,
    uncertain: bool,
}

/// What a Scan of the table read.
struct Scanned {
    rows: Vec<(LeaseKey, LeaseState)>,
    /// The rows it could not read, and what is wrong with each.
    malformed: Vec<(LeaseKey, String)>,
}

/// One renewal, checkpoint or release, as [`DynamoLeaseStore::held_update`] sends it.
struct HeldWrite<'a> {
    /// The call, for errors.
    operation: &'static str,
    /// The update expression.
    update: &'a str,
    /// Its values; `:seen` is added when the store knows the row's counter.
    values: Item,
    /// What the answer holds.
    returns: ReturnValue,
    /// What the write leaves in the row, by which a refusal is recognised as this very write
    /// having landed before.
    effect: HeldEffect<'a>,
}

/// A conditional write that did not happen.
enum WriteError {
    /// The condition failed; the row as it was, when it exists.
    Refused(Option<Item>),
    /// The call failed.
    Failed(LeaseError),
}

impl DynamoLeaseStore {
    /// A store on `table`, reached with `config` (account, region, credentials, endpoint). Does
    /// no I/O: a missing table shows at the first call, as [`LeaseError::TableMissing`].
    ///
    /// # Examples
    ///
    /// ```
    /// use aws_config::{BehaviorVersion, Region, SdkConfig};
    /// use ruststream_kinesis::DynamoLeaseStore;
    ///
    /// let config = SdkConfig::builder()
    ///     .behavior_version(BehaviorVersion::latest())
    ///     .region(Region::new("us-east-1"))
    ///     .build();
    /// let store = DynamoLeaseStore::new(&config, "warehouse-leases");
    /// assert_eq!(store.table(), "warehouse-leases");
    /// ```
    #[must_use]
    pub fn new(config: &aws_config::SdkConfig, table: impl Into<String>) -> Self {
        // No call hangs for good: a renewal that does not answer fails within the default
        // renewal interval, so its retry lands while the lease lasts (the subscription bounds
        // every call it makes by its own lease timings too).
        let timeouts = crate::sdk_timeouts::call_timeouts(
            config.timeout_config(),
            crate::sdk_timeouts::STORE_CALL_BOUND,
        );
        let client = Client::from_conf(
            aws_sdk_dynamodb::config::Builder::from(config)
                .timeout_config(timeouts)
                .build(),
        );
        Self {
            client,
            table: table.into().into(),
            legacy_stream: None,
            existing: Arc::default(),
            bare_rows: Arc::default(),
            fences: Arc::default(),
        }
    }

    /// Names the stream that the rows of an earlier version belong to: rows keyed by the bare
    /// shard id, without the stream. A shard of `stream` that has no `stream:shard` row yet
    /// resumes from the checkpoint of its bare row, which is copied into a new row; other
    /// streams ignore bare rows. See [Tables of earlier versions](Self#tables-of-earlier-versions).
    ///
    /// # Examples
    ///
    /// ```
    /// use aws_config::{BehaviorVersion, Region, SdkConfig};
    /// use ruststream_kinesis::DynamoLeaseStore;
    ///
    /// let config = SdkConfig::builder()
    ///     .behavior_version(BehaviorVersion::latest())
    ///     .region(Region::new("us-east-1"))
    ///     .build();
    /// // The table was written by an earlier version reading `warehouse-orders`.
    /// let store = DynamoLeaseStore::new(&config, "warehouse-leases").legacy_stream("warehouse-orders");
    /// # let _ = store;
    /// ```
    #[must_use]
    pub fn legacy_stream(mut self, stream: impl Into<String>) -> Self {
        self.legacy_stream = Some(stream.into().into());
        self
    }

    /// The table's name.
    ///
    /// # Examples
    ///
    /// ```
    /// # use aws_config::{BehaviorVersion, Region, SdkConfig};
    /// # use ruststream_kinesis::DynamoLeaseStore;
    /// # let config = SdkConfig::builder().behavior_version(BehaviorVersion::latest()).build();
    /// let store = DynamoLeaseStore::new(&config, "warehouse-leases");
    /// assert_eq!(store.table(), "warehouse-leases");
    /// ```
    #[must_use]
    pub fn table(&self) -> &str {
        &self.table
    }

    /// The AWS CLI command that creates this store's table: one string hash key, `lease_key`,
    /// on-demand billing. [`LeaseError::TableMissing`] carries it.
    ///
    /// # Examples
    ///
    /// ```
    /// # use aws_config::{BehaviorVersion, Region, SdkConfig};
    /// # use ruststream_kinesis::DynamoLeaseStore;
    /// # let config = SdkConfig::builder().behavior_version(BehaviorVersion::latest()).build();
    /// let store = DynamoLeaseStore::new(&config, "warehouse-leases");
    /// assert_eq!(
    ///     store.create_command(),
    ///     "aws dynamodb create-table --table-name warehouse-leases \
    ///      --attribute-definitions AttributeName=lease_key,AttributeType=S \
    ///      --key-schema AttributeName=lease_key,KeyType=HASH --billing-mode PAY_PER_REQUEST",
    /// );
    /// ```
    #[must_use]
    pub fn create_command(&self) -> String {
        format!(
            "aws dynamodb create-table --table-name {} \
             --attribute-definitions AttributeName={KEY},AttributeType=S \
             --key-schema AttributeName={KEY},KeyType=HASH --billing-mode PAY_PER_REQUEST",
            self.table
        )
    }

    /// Every row of the table, sorted by key: what an operator's view of the lease table shows.
    ///
    /// Reads the whole table (a strongly consistent `Scan`, page by page), so it costs a read of
    /// every row; call it to inspect, not on a hot path. A row of an earlier version, keyed by
    /// the bare shard id (a key without `:`), comes back with an empty stream name: its
    /// [`LeaseKey::stream`] is `""` and its [`LeaseKey::shard`] the key.
    ///
    /// # Errors
    ///
    /// [`LeaseError::TableMissing`] when the table does not exist, [`LeaseError::Store`] (naming
    /// the key `*:*` and the operation `rows`) when the scan fails. A malformed row (an attribute
    /// of the wrong type, no string `lease_key`) is left out with a warning naming its key, and
    /// the rest are read.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use aws_config::BehaviorVersion;
    /// use ruststream_kinesis::DynamoLeaseStore;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), ruststream_kinesis::LeaseError> {
    /// let config = aws_config::defaults(BehaviorVersion::latest()).load().await;
    /// let store = DynamoLeaseStore::new(&config, "warehouse-leases");
    /// for (key, row) in store.rows().await? {
    ///     println!("{key}: owner {:?}, checkpoint {:?}", row.owner, row.checkpoint);
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn rows(&self) -> Result<Vec<(LeaseKey, LeaseState)>, LeaseError> {
        self.scan().await.map(|scanned| scanned.rows)
    }

    /// Every row of the table, and the keys of the rows it could not read (with what is wrong
    /// with each), each skipped with a warning.
    async fn scan(&self) -> Result<Scanned, LeaseError> {
        let whole = LeaseKey::new("*", "*");
        let mut rows = Vec::new();
        let mut malformed = Vec::new();
        let mut start: Option<Item> = None;
        loop {
            let page = self
                .client
                .scan()
                .table_name(self.table())
                .consistent_read(true)
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .map_err(|error| self.failure(&whole, "rows", &error))?;
            for item in page.items() {
                // One bad row (written by hand, or by another tool) must not hide the others:
                // every listing and handover poll of every stream reads through here.
                let Some(AttributeValue::S(row_key)) = item.get(KEY) else {
                    tracing::warn!(
                        table = %self.table,
                        key = ?item.get(KEY),
                        "skipping a lease row without a string lease_key; delete it"
                    );
                    continue;
                };
                let key = match row_key.split_once(':') {
                    Some((stream, shard)) => LeaseKey::new(stream, shard),
                    None => LeaseKey::new("", row_key.as_str()),
                };
                match state_of(item) {
                    Ok(state) => rows.push((key, state)),
                    Err(problem) => {
                        tracing::warn!(
                            table = %self.table,
                            key = %row_key,
                            problem = %problem,
                            "skipping a malformed lease row; fix the attribute or delete the row \
                             (its shard is not taken until then)"
                        );
                        malformed.push((key, problem));
                    }
                }
            }
            match page.last_evaluated_key {
                Some(last) if !last.is_empty() => start = Some(last),
                _ => break,
            }
        }
        rows.sort_by(|a, b| a.0.cmp(&b.0));
        // What the Scan saw spares later takes a read each: every `stream:shard` row exists, and
        // no other shard id has a bare row.
        let mut bare = HashSet::new();
        for (key, _) in &rows {
            if key.stream().is_empty() {
                bare.insert(key.shard().to_owned());
            } else {
                self.remember(key);
            }
        }
        *self
            .bare_rows
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(bare);
        Ok(Scanned { rows, malformed })
    }

    /// Whether the newest whole-table Scan showed that `shard` has no bare row.
    fn scanned_without_bare_row(&self, shard: &str) -> bool {
        self.bare_rows
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .is_some_and(|bare| !bare.contains(shard))
    }

    /// Creates the table (one string hash key `lease_key`, on-demand billing) and waits until it
    /// is active; a table that already exists is left as it is. Meant for tests and demos:
    /// production tables belong with the rest of the infrastructure.
    ///
    /// # Errors
    ///
    /// [`LeaseError::Store`] (naming the key `*:*` and the operation `create_table`) when
    /// DynamoDB refuses, or when the table is not active within two minutes.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use aws_config::BehaviorVersion;
    /// use ruststream_kinesis::DynamoLeaseStore;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), ruststream_kinesis::LeaseError> {
    /// let config = aws_config::defaults(BehaviorVersion::latest()).load().await;
    /// let store = DynamoLeaseStore::new(&config, "demo-leases");
    /// store.create_table().await?;
    /// store.create_table().await?; // idempotent
    /// # Ok(())
    /// # }
    /// ```
    pub async fn create_table(&self) -> Result<(), LeaseError> {
        let whole = LeaseKey::new("*", "*");
        let operation = "create_table";
        let attribute = AttributeDefinition::builder()
            .attribute_name(KEY)
            .attribute_type(ScalarAttributeType::S)
            .build()
            .map_err(|error| self.malformed(&whole, operation, &error.to_string()))?;
        let hash = KeySchemaElement::builder()
            .attribute_name(KEY)
            .key_type(KeyType::Hash)
            .build()
            .map_err(|error| self.malformed(&whole, operation, &error.to_string()))?;
        let created = self
            .client
            .create_table()
            .table_name(self.table())
            .attribute_definitions(attribute)
            .key_schema(hash)
            .billing_mode(BillingMode::PayPerRequest)
            .send()
            .await;
        match created {
            Ok(_) => {}
            Err(error) if error.code() == Some("ResourceInUseException") => {}
            Err(error) => return Err(self.failure(&whole, operation, &error)),
        }
        let deadline = Instant::now() + TABLE_ACTIVE_TIMEOUT;
        loop {
            let described = self
                .client
                .describe_table()
                .table_name(self.table())
                .send()
                .await;
            match described {
                Ok(out) => {
                    let status = out.table().and_then(|table| table.table_status());
                    if status == Some(&TableStatus::Active) {
                        return Ok(());
                    }
                }
                // Just created: not visible everywhere yet.
                Err(error) if error.code() == Some("ResourceNotFoundException") => {}
                Err(error) => return Err(self.failure(&whole, operation, &error)),
            }
            if Instant::now() >= deadline {
                return Err(self.malformed(
                    &whole,
                    operation,
                    &format!(
                        "table {:?} is not active {} s after its creation",
                        self.table,
                        TABLE_ACTIVE_TIMEOUT.as_secs()
                    ),
                ));
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    fn known(&self, key: &LeaseKey) -> bool {
        self.existing
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(key)
    }

    fn remember(&self, key: &LeaseKey) {
        self.existing
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key.clone());
    }

    fn fence(&self, key: &LeaseKey) -> Fence {
        self.fences
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(key)
            .copied()
            .unwrap_or_default()
    }

    fn set_fence(&self, key: &LeaseKey, fence: Fence) {
        self.fences
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key.clone(), fence);
    }

    /// Records the row a write of this store left, or, for a write with an unknown outcome, that
    /// the counter may have moved.
    fn settle_fence(&self, key: &LeaseKey, written: Result<&Item, &WriteError>) {
        let fence = match written {
            Ok(item) => Fence {
                counter: number_attribute(item, COUNTER).ok().flatten(),
                uncertain: false,
            },
            Err(WriteError::Failed(_)) => Fence {
                uncertain: true,
                ..self.fence(key)
            },
            // Refused: the counter this store saw stays the condition of its later writes, so
            // none of them lands on a row another instance (or a restart) wrote since.
            Err(WriteError::Refused(_)) => Fence {
                uncertain: false,
                ..self.fence(key)
            },
        };
        self.set_fence(key, fence);
    }

    /// A renewal, checkpoint or release: conditioned on this owner holding the row and, once this
    /// store has written it, on the counter it left there.
    ///
    /// A refusal is not always a lost lease. When the SDK sent the write again after an attempt
    /// whose answer was lost (a 5xx, a reset connection) and that attempt had landed, the resent
    /// write is refused by the very counter it moved: the row then shows this owner, the counter
    /// one past the one the write was conditioned on, and the attributes this write set, exactly
    /// (`effect`). That refusal is the write's success. A refusal
    /// that finds the row still held by this owner after one of this store's own writes had an
    /// unknown outcome adopts the row's counter and tries once more; any other refusal is
    /// [`LeaseError::Lost`].
    async fn held_update(
        &self,
        key: &LeaseKey,
        owner: &str,
        write: HeldWrite<'_>,
    ) -> Result<Item, LeaseError> {
        let HeldWrite {
            operation,
            update,
            values,
            returns,
            effect,
        } = write;
        let mut retried = false;
        loop {
            let fence = self.fence(key);
            let mut values = values.clone();
            let condition = match fence.counter {
                Some(counter) => {
                    values.insert(":seen".to_owned(), number(counter));
                    HELD_AT_CONDITION
                }
                None => HELD_CONDITION,
            };
            let unanswered = Unanswered::arm(self, key);
            let written = self
                .update(key, operation, update, condition, values, returns.clone())
                .await;
            unanswered.disarm();
            self.settle_fence(key, written.as_ref());
            match written {
                Ok(item) => return Ok(item),
                Err(WriteError::Refused(Some(row)))
                    if state_of(&row).is_ok_and(|state| landed(&state, fence.counter, &effect)) =>
                {
                    // Our own earlier attempt of this very write landed.
                    self.set_fence(
                        key,
                        Fence {
                            counter: number_attribute(&row, COUNTER).ok().flatten(),
                            uncertain: false,
                        },
                    );
                    return Ok(row);
                }
                Err(WriteError::Refused(Some(row)))
                    if !retried
                        && fence.uncertain
                        && string_attribute(&row, OWNER).ok().flatten().as_deref()
                            == Some(owner) =>
                {
                    // One of this store's own writes landed after all: the row is still ours.
                    self.set_fence(
                        key,
                        Fence {
                            counter: number_attribute(&row, COUNTER).ok().flatten(),
                            uncertain: false,
                        },
                    );
                    retried = true;
                }
                Err(error) => return Err(self.held_failure(key, owner, error)),
            }
        }
    }

    /// The error of a failed call: the table is missing, or DynamoDB said something else.
    fn failure<E, R>(
        &self,
        key: &LeaseKey,
        operation: &'static str,
        error: &SdkError<E, R>,
    ) -> LeaseError
    where
        E: ProvideErrorMetadata + std::error::Error + 'static,
        R: Debug,
    {
        if error.code() == Some("ResourceNotFoundException") {
            return LeaseError::TableMissing {
                table: self.table.to_string(),
                create_command: self.create_command(),
            };
        }
        let message = match (error.code(), error.message()) {
            (Some(code), Some(message)) => format!("{code}: {message}"),
            (Some(code), None) => code.to_owned(),
            _ => DisplayErrorContext(error).to_string(),
        };
        LeaseError::Store {
            key: key.clone(),
            operation,
            message: format!("table {:?}: {message}", self.table),
        }
    }

    /// The error of an answer this store cannot read.
    fn malformed(&self, key: &LeaseKey, operation: &'static str, message: &str) -> LeaseError {
        LeaseError::Store {
            key: key.clone(),
            operation,
            message: format!("table {:?}: {message}", self.table),
        }
    }

    /// Reads the row keyed `row_key`, strongly consistent.
    async fn get(
        &self,
        key: &LeaseKey,
        row_key: String,
        operation: &'static str,
    ) -> Result<Option<Item>, LeaseError> {
        self.client
            .get_item()
            .table_name(self.table())
            .key(KEY, AttributeValue::S(row_key))
            .consistent_read(true)
            .send()
            .await
            .map(|out| out.item)
            .map_err(|error| self.failure(key, operation, &error))
    }

    /// A conditional `UpdateItem` of the row keyed `row_key`; answers the row as written.
    ///
    /// `values` must define every `:name` that `update` and `condition` use, and no other:
    /// DynamoDB refuses unused values, and moto answers HTTP 500 to undefined ones.
    ///
    /// `returns` says what the answer holds: `AllNew` where the caller answers the whole row,
    /// `UpdatedNew` where the counter (which every write updates) is all it needs; the smaller
    /// answer is cheaper to build and to read.
    async fn update(
        &self,
        key: &LeaseKey,
        operation: &'static str,
        update: &str,
        condition: &str,
        values: Item,
        returns: ReturnValue,
    ) -> Result<Item, WriteError> {
        let written = self
            .client
            .update_item()
            .table_name(self.table())
            .key(KEY, AttributeValue::S(key.row_key()))
            .update_expression(update)
            .condition_expression(condition)
            .set_expression_attribute_values(Some(values))
            .return_values(returns)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        match written {
            Ok(out) => Ok(out.attributes.unwrap_or_default()),
            Err(error) => match error.as_service_error() {
                Some(UpdateItemError::ConditionalCheckFailedException(refused)) => {
                    Err(WriteError::Refused(refused.item.clone()))
                }
                _ => Err(WriteError::Failed(self.failure(key, operation, &error))),
            },
        }
    }

    /// The state of a row as written, or a [`LeaseError::Store`] naming what is wrong with it.
    fn written(
        &self,
        key: &LeaseKey,
        operation: &'static str,
        item: &Item,
    ) -> Result<LeaseState, LeaseError> {
        state_of(item).map_err(|message| self.malformed(key, operation, &message))
    }

    /// The error of a renewal, checkpoint or release that did not happen.
    fn held_failure(&self, key: &LeaseKey, owner: &str, error: WriteError) -> LeaseError {
        match error {
            WriteError::Refused(_) => LeaseError::Lost {
                key: key.clone(),
                owner: owner.to_owned(),
            },
            WriteError::Failed(error) => error,
        }
    }

    /// The take of `acquire` and `acquire_from`: one conditional write, which sets `start` as
    /// the checkpoint of a row without one.
    async fn take(
        &self,
        key: &LeaseKey,
        owner: &str,
        lease: Duration,
        start: Option<&str>,
    ) -> Result<LeaseState, LeaseError> {
        if !self.known(key)
            && let Some(adopted) = self.adopt_legacy(key, owner, lease).await?
        {
            return Ok(adopted);
        }
        let now = epoch_millis();
        let cutoff = now.saturating_sub(millis(SKEW_TOLERANCE));
        let mut values = HashMap::from([
            (":me".to_owned(), string(owner)),
            (
                ":expiry".to_owned(),
                number(now.saturating_add(millis(lease))),
            ),
            (":one".to_owned(), number(1)),
            (":cutoff".to_owned(), number(cutoff)),
        ]);
        let update = match start {
            Some(start) => {
                values.insert(":start".to_owned(), string(start));
                "SET lease_owner = :me, lease_expiry = :expiry, \
                 checkpoint = if_not_exists(checkpoint, :start) ADD lease_counter :one"
            }
            None => "SET lease_owner = :me, lease_expiry = :expiry ADD lease_counter :one",
        };
        let taken = self
            .update(
                key,
                "acquire",
                update,
                TAKE_CONDITION,
                values,
                ReturnValue::AllNew,
            )
            .await;
        self.settle_fence(key, taken.as_ref());
        match taken {
            Ok(item) => {
                self.remember(key);
                self.written(key, "acquire", &item)
            }
            Err(WriteError::Refused(Some(item))) => {
                self.remember(key);
                let held = self.written(key, "acquire", &item)?;
                Err(LeaseError::Held {
                    key: key.clone(),
                    owner: held.owner.unwrap_or_default(),
                    expires_in_ms: held.expiry_ms.saturating_sub(epoch_millis()),
                })
            }
            Err(WriteError::Refused(None)) => Err(self.malformed(
                key,
                "acquire",
                "the take was refused, and DynamoDB did not return the row that refused it",
            )),
            Err(WriteError::Failed(error)) => Err(error),
        }
    }

    /// Before this instance's first take of a shard whose `stream:shard` row it has not seen:
    /// looks for the bare row of an earlier version, and takes the shard from its checkpoint
    /// when `legacy_stream` names this stream. `None` when the ordinary take should go on.
    async fn adopt_legacy(
        &self,
        key: &LeaseKey,
        owner: &str,
        lease: Duration,
    ) -> Result<Option<LeaseState>, LeaseError> {
        // The common case (no earlier version ever wrote this table) costs this one read, or
        // none after a Scan of the table (a listing) saw no bare row for the shard. An earlier
        // version writing the table at the same time is not supported (see the docs).
        if self.scanned_without_bare_row(key.shard()) {
            return Ok(None);
        }
        let Some(bare) = self.get(key, key.shard().to_owned(), "acquire").await? else {
            return Ok(None);
        };
        let checkpoint = match bare.get(CHECKPOINT) {
            Some(AttributeValue::S(checkpoint)) => checkpoint.clone(),
            None => return Ok(None),
            Some(other) => {
                return Err(self.malformed(
                    key,
                    "acquire",
                    &format!(
                        "the earlier version's row {:?} has checkpoint {other:?}, not a string",
                        key.shard()
                    ),
                ));
            }
        };
        match self.legacy_stream.as_deref() {
            Some(stream) if stream == key.stream() => {}
            Some(_) => return Ok(None),
            None => {
                // Without `legacy_stream` the bare row is an error only while this version has
                // no row of its own: once one exists, another instance has moved on from it.
                if self.get(key, key.row_key(), "acquire").await?.is_some() {
                    self.remember(key);
                    return Ok(None);
                }
                return Err(LeaseError::LegacyRow {
                    table: self.table.to_string(),
                    stream: key.stream().to_owned(),
                    shard: key.shard().to_owned(),
                    checkpoint,
                });
            }
        }
        let now = epoch_millis();
        let values = HashMap::from([
            (":me".to_owned(), string(owner)),
            (
                ":expiry".to_owned(),
                number(now.saturating_add(millis(lease))),
            ),
            (":checkpoint".to_owned(), string(&checkpoint)),
            (":one".to_owned(), number(1)),
        ]);
        let copied = self
            .update(
                key,
                "acquire",
                "SET lease_owner = :me, lease_expiry = :expiry, checkpoint = :checkpoint \
                 ADD lease_counter :one",
                NEW_ROW_CONDITION,
                values,
                ReturnValue::AllNew,
            )
            .await;
        if let Ok(item) = &copied {
            self.settle_fence(key, Ok(item));
        }
        match copied {
            Ok(item) => {
                self.remember(key);
                tracing::info!(
                    table = %self.table,
                    stream = key.stream(),
                    shard = key.shard(),
                    checkpoint,
                    "resuming from the row of an earlier version, keyed by the bare shard id"
                );
                self.written(key, "acquire", &item).map(Some)
            }
            // Another instance created the row first: take it the ordinary way.
            Err(WriteError::Refused(_)) => {
                self.remember(key);
                Ok(None)
            }
            Err(WriteError::Failed(error)) => Err(error),
        }
    }

    async fn renew_held(
        &self,
        key: &LeaseKey,
        owner: &str,
        lease: Duration,
    ) -> Result<LeaseState, LeaseError> {
        let expiry = epoch_millis().saturating_add(millis(lease));
        let values = HashMap::from([
            (":me".to_owned(), string(owner)),
            (":expiry".to_owned(), number(expiry)),
            (":one".to_owned(), number(1)),
        ]);
        let item = self
            .held_update(
                key,
                owner,
                HeldWrite {
                    operation: "renew",
                    update: "SET lease_expiry = :expiry ADD lease_counter :one",
                    values,
                    returns: ReturnValue::AllNew,
                    effect: HeldEffect {
                        owner: Some(owner),
                        expiry_ms: Some(expiry),
                        checkpoint: None,
                    },
                },
            )
            .await?;
        self.written(key, "renew", &item)
    }

    async fn checkpoint_held(
        &self,
        key: &LeaseKey,
        owner: &str,
        checkpoint: &str,
    ) -> Result<(), LeaseError> {
        let values = HashMap::from([
            (":me".to_owned(), string(owner)),
            (":checkpoint".to_owned(), string(checkpoint)),
            (":one".to_owned(), number(1)),
        ]);
        self.held_update(
            key,
            owner,
            HeldWrite {
                operation: "checkpoint",
                update: "SET checkpoint = :checkpoint ADD lease_counter :one",
                values,
                returns: ReturnValue::UpdatedNew,
                effect: HeldEffect {
                    owner: Some(owner),
                    expiry_ms: None,
                    checkpoint: Some(checkpoint),
                },
            },
        )
        .await
        .map(drop)
    }

    async fn checkpoint_renewing(
        &self,
        key: &LeaseKey,
        owner: &str,
        checkpoint: &str,
        lease: Duration,
    ) -> Result<(), LeaseError> {
        let expiry = epoch_millis().saturating_add(millis(lease));
        let values = HashMap::from([
            (":me".to_owned(), string(owner)),
            (":checkpoint".to_owned(), string(checkpoint)),
            (":expiry".to_owned(), number(expiry)),
            (":one".to_owned(), number(1)),
        ]);
        self.held_update(
            key,
            owner,
            HeldWrite {
                operation: "checkpoint",
                update: "SET checkpoint = :checkpoint, lease_expiry = :expiry ADD lease_counter :one",
                values,
                returns: ReturnValue::UpdatedNew,
                effect: HeldEffect {
                    owner: Some(owner),
                    expiry_ms: Some(expiry),
                    checkpoint: Some(checkpoint),
                },
            },
        )
        .await
        .map(drop)
    }

    async fn read_row(&self, key: &LeaseKey) -> Result<Option<LeaseState>, LeaseError> {
        let Some(item) = self.get(key, key.row_key(), "read").await? else {
            return Ok(None);
        };
        self.remember(key);
        self.written(key, "read", &item).map(Some)
    }

    async fn release_held(&self, key: &LeaseKey, owner: &str) -> Result<(), LeaseError> {
        let values = HashMap::from([
            (":me".to_owned(), string(owner)),
            (":zero".to_owned(), number(0)),
            (":one".to_owned(), number(1)),
        ]);
        self.held_update(
            key,
            owner,
            HeldWrite {
                operation: "release",
                update: "REMOVE lease_owner SET lease_expiry = :zero ADD lease_counter :one",
                values,
                returns: ReturnValue::UpdatedNew,
                effect: HeldEffect {
                    owner: None,
                    expiry_ms: Some(0),
                    checkpoint: None,
                },
            },
        )
        .await
        .map(drop)
    }
}

impl LeaseStore for DynamoLeaseStore {
    fn acquire<'a>(
        &'a self,
        key: &'a LeaseKey,
        owner: &'a str,
        lease: Duration,
    ) -> LeaseFuture<'a, LeaseState> {
        Box::pin(self.take(key, owner, lease, None))
    }

    fn acquire_from<'a>(
        &'a self,
        key: &'a LeaseKey,
        owner: &'a str,
        lease: Duration,
        start: &'a str,
    ) -> LeaseFuture<'a, LeaseState> {
        Box::pin(self.take(key, owner, lease, Some(start)))
    }

    fn renew<'a>(
        &'a self,
        key: &'a LeaseKey,
        owner: &'a str,
        lease: Duration,
    ) -> LeaseFuture<'a, LeaseState> {
        Box::pin(self.renew_held(key, owner, lease))
    }

    fn checkpoint<'a>(
        &'a self,
        key: &'a LeaseKey,
        owner: &'a str,
        checkpoint: &'a str,
    ) -> LeaseFuture<'a, ()> {
        Box::pin(self.checkpoint_held(key, owner, checkpoint))
    }

    fn read<'a>(&'a self, key: &'a LeaseKey) -> LeaseFuture<'a, Option<LeaseState>> {
        Box::pin(self.read_row(key))
    }

    fn release<'a>(&'a self, key: &'a LeaseKey, owner: &'a str) -> LeaseFuture<'a, ()> {
        Box::pin(self.release_held(key, owner))
    }

    fn checkpoint_and_renew<'a>(
        &'a self,
        key: &'a LeaseKey,
        owner: &'a str,
        checkpoint: &'a str,
        lease: Duration,
    ) -> LeaseFuture<'a, ()> {
        Box::pin(self.checkpoint_renewing(key, owner, checkpoint, lease))
    }

    /// One consistent Scan of the table (paginated), filtered to `stream`: it costs the table's
    /// size in read capacity, whatever the stream. A malformed row of another stream is left out
    /// (with a warning); one of `stream` fails the call, naming it, so the coordinator reads the
    /// rows it needs one by one and leaves that shard (and its children) alone rather than take
    /// it for a shard without a row.
    fn list<'a>(&'a self, stream: &'a str) -> LeaseFuture<'a, Option<Vec<(LeaseKey, LeaseState)>>> {
        Box::pin(async move {
            let Scanned { rows, malformed } = self.scan().await?;
            if let Some((key, problem)) = malformed
                .into_iter()
                .find(|(key, _)| key.stream() == stream)
            {
                return Err(self.malformed(&key, "rows", &problem));
            }
            Ok(Some(
                rows.into_iter()
                    .filter(|(key, _)| key.stream() == stream)
                    .collect(),
            ))
        })
    }
}

/// Marks a row's fence uncertain when a write to it is dropped before its answer (a call bound
/// cut it off): the write may still land, and a later refusal by a row this owner holds is then
/// that write's doing.
struct Unanswered<'a> {
    store: &'a DynamoLeaseStore,
    key: &'a LeaseKey,
    armed: bool,
}

impl<'a> Unanswered<'a> {
    fn arm(store: &'a DynamoLeaseStore, key: &'a LeaseKey) -> Self {
        Self {
            store,
            key,
            armed: true,
        }
    }

    fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for Unanswered<'_> {
    fn drop(&mut self) {
        if self.armed {
            let fence = Fence {
                uncertain: true,
                ..self.store.fence(self.key)
            };
            self.store.set_fence(self.key, fence);
        }
    }
}

fn string(value: &str) -> AttributeValue {
    AttributeValue::S(value.to_owned())
}

fn number(value: u64) -> AttributeValue {
    AttributeValue::N(value.to_string())
}

/// The [`LeaseState`] a row holds; a message naming the attribute that is malformed.
fn state_of(item: &Item) -> Result<LeaseState, String> {
    Ok(LeaseState {
        owner: string_attribute(item, OWNER)?,
        expiry_ms: number_attribute(item, EXPIRY)?.unwrap_or(0),
        counter: number_attribute(item, COUNTER)?.unwrap_or(0),
        checkpoint: string_attribute(item, CHECKPOINT)?,
    })
}

fn string_attribute(item: &Item, name: &str) -> Result<Option<String>, String> {
    match item.get(name) {
        None => Ok(None),
        Some(AttributeValue::S(value)) => Ok(Some(value.clone())),
        Some(other) => Err(format!("{name} is {other:?}, not a string")),
    }
}

fn number_attribute(item: &Item, name: &str) -> Result<Option<u64>, String> {
    match item.get(name) {
        None => Ok(None),
        Some(AttributeValue::N(value)) => value.parse().map(Some).map_err(|_| {
            format!("{name} is {value:?}, not a whole number of milliseconds or writes")
        }),
        Some(other) => Err(format!("{name} is {other:?}, not a number")),
    }
}

#[cfg(test)]
mod tests;

//! The lease table in DynamoDB, shared by every instance of a service.

use std::collections::{HashMap, HashSet};
use std::fmt::Debug;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use crate::clock::Instant;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, KeySchemaElement, KeyType, ReturnValue,
    ReturnValuesOnConditionCheckFailure, ScalarAttributeType, TableStatus,
};

mod check;
pub(crate) mod commit;
mod head_marks;
mod item;
mod notice;
mod notice_apart;
mod refused;
mod writes;

use crate::sdk::endpoint::Service;
use item::{checkpoint_update, number, number_attribute, state_of, string};
use refused::Refused;

use super::{
    LeaseError, LeaseFuture, LeaseKey, LeaseState, LeaseStore, NOTICE_SUFFIX, Notice,
    SKEW_TOLERANCE, epoch_millis, millis, rules,
};
use rules::Fence;

/// The table's only key attribute: `stream:shard`, a string.
const KEY: &str = "lease_key";
/// The owner id holding the lease; removed by a release.
const OWNER: &str = "lease_owner";
/// When the lease lapses, in epoch milliseconds by the writer's clock.
const EXPIRY: &str = "lease_expiry";
/// Bumped by every write.
const COUNTER: &str = "lease_counter";
/// The last checkpoint: a sequence number, `SHARD_END`, `SHARD_SKIPPED` or a recorded start.
const CHECKPOINT: &str = "checkpoint";
/// With a checkpoint inside a KPL aggregate, the index of the last settled user record of the
/// aggregate whose sequence number `checkpoint` holds (the model of the KCL's
/// `checkpointSubSequenceNumber`); absent otherwise.
const CHECKPOINT_SUB_SEQUENCE: &str = "checkpoint_sub_sequence";
/// How far behind its shard's newest record the reader was when it wrote the checkpoint, in
/// milliseconds (N; absent when not known): for people, nothing decides on it.
const CHECKPOINT_BEHIND: &str = "checkpoint_behind_ms";
/// A handoff asked of the holder: the owner id of the instance that asked for the shard
/// (see [`Handoff`](crate::Handoff)); absent otherwise. Written without a counter bump, removed
/// by every take and by the handoff's write.
const HANDOFF_TO: &str = "handoff_to";
/// When the handoff was asked, in epoch milliseconds by the asker's clock.
const HANDOFF_ASKED: &str = "handoff_asked";
/// The token of the exactly-once commit that last moved the checkpoint (S; absent in rows no
/// commit wrote): a resend of a landed commit is recognised by it.
const COMMIT_TOKEN: &str = "commit_token";

/// A take succeeds when the row is new, has no owner, has this owner, or expired more than
/// [`SKEW_TOLERANCE`] ago by the taker's clock (`:cutoff` is now minus the tolerance). A take
/// of a row this owner holds never moves its expiry back: a take of ours that lands late, after
/// its call timed out and renewals went ahead, is refused rather than shortening the lease.
const TAKE_CONDITION: &str = "(attribute_not_exists(lease_key) OR attribute_not_exists(lease_owner) \
     OR (lease_owner = :me AND lease_expiry <= :expiry) OR lease_expiry < :cutoff)";
/// A take-over (`LeaseStore::take_over`) is accepted by the row as the taker read it, too.
const TAKE_OVER_CONDITION: &str = "(lease_owner = :holder AND lease_counter = :counter)";
/// A take by a store that names an application: the row names none yet, or this one.
const OWN_APPLICATION_CONDITION: &str =
    " AND (attribute_not_exists(application) OR application = :app)";
/// A take by a store that names no application: the row names none either.
const NO_APPLICATION_CONDITION: &str = " AND attribute_not_exists(application)";
/// The application that took the row first (written by a store that names one).
const APPLICATION: &str = "application";
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
/// | `commit_token` | S | the exactly-once commit that last moved the checkpoint, if one did |
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
/// The calls the store makes need the IAM actions `dynamodb:GetItem`, `dynamodb:UpdateItem`
/// and `dynamodb:DeleteItem` (a listing round deletes the rows no reader needs) on the table;
/// [`rows`](Self::rows) and the coordinator's listing rounds (`list`) need `dynamodb:Scan`, and
/// [`create_table`](Self::create_table) `dynamodb:CreateTable` and `dynamodb:DescribeTable`. The
/// handover poll reads the stream's notice row (`<stream>#notice`) with `GetItem`, and writes
/// beats into it with `UpdateItem`.
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
    /// The application this store takes rows for, written into each row it takes; `None`: it
    /// names none, and takes only rows that name none.
    application: Option<Arc<str>>,
    /// The keys whose `stream:shard` row this store has seen exist (in a Scan, a read or a
    /// write), until a take finds one deleted or this store deletes it. A take of such a row
    /// never creates one: a row a round deleted after this store saw it (its shard finished long
    /// ago) stays deleted, however stale the view a take was decided on. A stream deleted and
    /// created again under its name costs one refused take per shard before its rows are made.
    existing: Arc<Mutex<HashSet<LeaseKey>>>,
    /// The shard ids of the bare rows of an earlier version that this store's newest whole-table
    /// Scan saw; `None` before the first. A first take looks a bare row up only when the Scan
    /// saw one for its shard (or there was no Scan yet).
    bare_rows: Arc<Mutex<Option<HashSet<String>>>>,
    /// Per held row, the counter this store's last write left there, and whether a write of
    /// this store since then has an unknown outcome (it failed in transport, so it may still land).
    fences: Arc<Mutex<HashMap<LeaseKey, Fence>>>,
    /// Exactly once: the key attributes of the tables handlers put items into, and this table's
    /// region once it was described.
    commit_tables: crate::lease::CommitTables,
    /// Each stream's notice kept in several rows, its head apart
    /// ([`keep_notice_head_apart`](Self::keep_notice_head_apart)).
    notice_apart: bool,
    /// The handover poll's reads of the notice and the full-read cadence's Scans are eventually
    /// consistent ([`eventually_consistent_polls`](Self::eventually_consistent_polls)).
    polls_behind: bool,
    /// What this store last learnt of each stream's notice head (`head_marks.rs`): kept apart,
    /// a beat into the beats' rows is written only after a fresh mark says the head holds
    /// layout 2, else after the store wrote it; either way, gone instances are forgotten from
    /// every row while the head says 2.
    head_marks: Arc<Mutex<head_marks::HeadMarks>>,
    /// The writes of the layout this store (and its clones) sent: for cost accounting.
    layout_writes: Arc<std::sync::atomic::AtomicU64>,
}

/// How a read is made: strongly consistent (every write answered before it was sent shows), or
/// eventually consistent (half the read units; DynamoDB's usually shows every write older than
/// about a second, but may miss later ones), where the trait's caller says a view a little
/// behind will do (`LeaseStore::list_eventually`, `notice_eventually`, `notice_head`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Reading {
    Consistent,
    Eventual,
}

/// What a Scan of the table read.
#[derive(Default)]
struct Scanned {
    rows: Vec<(LeaseKey, LeaseState)>,
    /// The rows it could not read, and what is wrong with each.
    malformed: Vec<(LeaseKey, String)>,
    /// The rows that name another application than this store's, and the name.
    foreign: Vec<(LeaseKey, String)>,
    /// The application each row names, where it names one.
    applications: HashMap<LeaseKey, String>,
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
    effect: rules::Effect<'a>,
    /// A condition of this write's own, after the holder's (`""` for none): ` AND ...`.
    also: &'a str,
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
    /// no I/O: a missing table shows at the first call, as [`LeaseError::TableMissing`]. Its
    /// calls keep `config`'s retries; its timeouts where `config` sets none are the default
    /// renewal interval (half of it an attempt). A call throttled on each of its attempts answers
    /// [`LeaseError::Throttled`] when they fit that bound: with the SDK's default backoffs (1 s,
    /// doubling) they often do not, and it answers as a timeout; a configuration whose retries
    /// back off for less (`RetryConfig::standard().with_initial_backoff(..)`) has throttling
    /// answer as itself. [`from_client`](Self::from_client) keeps a client as it is.
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
        let table: String = table.into();
        // No call hangs for good: a renewal that does not answer fails within the default
        // renewal interval, so its retry lands while the lease lasts (the subscription bounds
        // every call it makes by its own lease timings too).
        let timeouts = crate::sdk::timeouts::call_timeouts(
            config.timeout_config(),
            crate::sdk::timeouts::STORE_CALL_BOUND,
        );
        let mut builder = aws_sdk_dynamodb::config::Builder::from(config).timeout_config(timeouts);
        match crate::sdk::endpoint::for_service(None, config, Service::DynamoDb) {
            Ok(Some(endpoint)) => builder = builder.endpoint_url(endpoint),
            Ok(None) => {}
            Err(refused) => {
                // `new` cannot fail: every call fails instead, saying why, and the SDK never
                // holds the endpoint's text (it logs its endpoint parameters).
                tracing::error!(table = %table, "{refused}");
                builder.set_endpoint_url(None);
                builder = builder.endpoint_resolver(Refused(refused));
            }
        }
        Self::from_client(Client::from_conf(builder.build()), table)
    }

    /// A store on `table`, reached through `client` as it is configured (its interceptors,
    /// retries and timeouts; a subscription bounds each of its calls by the lease timings all
    /// the same). Does no I/O.
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
    /// let client = aws_sdk_dynamodb::Client::new(&config);
    /// let store = DynamoLeaseStore::from_client(client, "warehouse-leases");
    /// assert_eq!(store.table(), "warehouse-leases");
    /// ```
    #[must_use]
    pub fn from_client(client: Client, table: impl Into<String>) -> Self {
        let table: String = table.into();
        Self {
            client,
            table: table.into(),
            legacy_stream: None,
            application: None,
            existing: Arc::default(),
            bare_rows: Arc::default(),
            fences: Arc::default(),
            commit_tables: crate::lease::CommitTables::default(),
            notice_apart: false,
            polls_behind: false,
            head_marks: Arc::default(),
            layout_writes: Arc::default(),
        }
    }

    /// Names the application this store takes rows for: each row it takes records the name (in
    /// the attribute `application`, once), and a row that names another application is never
    /// taken: the take fails with [`LeaseError::OtherApplication`], naming both. So two
    /// applications pointed at one table by mistake do not split a stream's shards between
    /// them, each silently missing the other's part: the first keeps every shard, the second
    /// reads none and reports why. A store that names no application takes only rows that name
    /// none, and a store that names one also takes (and claims) rows that name none, the rows
    /// of an earlier version or of the same application before it was named: name every
    /// application that shares a table. The name stays in the rows, so renaming an application
    /// makes its rows foreign to it until their `application` attribute is removed.
    ///
    /// Every instance of one application must use the same name.
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
    /// let store = DynamoLeaseStore::new(&config, "warehouse-leases").application("warehouse");
    /// assert_eq!(store.application_name(), Some("warehouse"));
    /// ```
    #[must_use]
    pub fn application(mut self, name: impl Into<String>) -> Self {
        self.application = Some(name.into().into());
        self
    }

    /// The application this store takes rows for, if it names one.
    #[must_use]
    pub fn application_name(&self) -> Option<&str> {
        self.application.as_deref()
    }

    /// Keeps each stream's notice apart ([`NOTICE_LAYOUT_APART`](crate::NOTICE_LAYOUT_APART)):
    /// its head (`<stream>#notice`: the releases' counter, the marks of handoffs asked, the
    /// layout), its beats in the rows of eight groups (`<stream>#beats<group>#notice`:
    /// [`notice_beats_key`](Self::notice_beats_key)) and its runs' records
    /// (`<stream>#runs#notice`). The handover poll then reads the head alone (one read unit)
    /// while the beats it last read still say who is alive, and a beat rewrites its group's row
    /// alone (one write unit while the row holds about 20 instances' beats): what the notice
    /// costs grows with the instances once, not twice. A whole read reads the ten rows. Opt-in:
    /// every instance on a stream must keep its notice the same way (a subscription refuses to
    /// open beside one of the other layout), so switch a fleet after stopping it.
    ///
    /// ```
    /// use aws_config::{BehaviorVersion, Region, SdkConfig};
    /// use ruststream_kinesis::{DynamoLeaseStore, LeaseStore};
    ///
    /// let config = SdkConfig::builder()
    ///     .behavior_version(BehaviorVersion::latest())
    ///     .region(Region::new("us-east-1"))
    ///     .build();
    /// let store = DynamoLeaseStore::new(&config, "warehouse-leases").keep_notice_head_apart();
    /// assert!(store.keeps_notice_head_apart());
    /// ```
    #[must_use]
    pub fn keep_notice_head_apart(mut self) -> Self {
        self.notice_apart = true;
        self
    }

    /// Reads eventually consistent (half the read units) where the coordinator says a view a
    /// little behind the latest writes will do: the handover poll's reads of the stream's
    /// notice ([`LeaseStore::notice_eventually`], [`LeaseStore::notice_head`]) and the Scan a
    /// listing round makes for the full-read cadence alone ([`LeaseStore::list_eventually`]).
    /// What a decision rests on stays strongly consistent: a take-over's read of the holder's
    /// beat, the check for another run under the owner id wherever a read shows a record other
    /// than its own run's, the reads that settle an instance's peers as it starts, the rows read
    /// after a sign that they moved, and every conditional write; a read that shows a counter,
    /// or this instance's own count of marks, lower than one read before has the next poll read
    /// consistent. Such a read usually shows every write older than a second (DynamoDB promises
    /// no bound); one that misses a write has the poll learn of it that much later. Opt-in
    /// ([`LeaseStore::polls_read_behind`] tells the coordinator), as the lease protocol reads
    /// strongly consistent by default; instances of one stream may differ in it.
    ///
    /// ```
    /// use aws_config::{BehaviorVersion, Region, SdkConfig};
    /// use ruststream_kinesis::{DynamoLeaseStore, LeaseStore};
    ///
    /// let config = SdkConfig::builder()
    ///     .behavior_version(BehaviorVersion::latest())
    ///     .region(Region::new("us-east-1"))
    ///     .build();
    /// let store = DynamoLeaseStore::new(&config, "warehouse-leases")
    ///     .keep_notice_head_apart()
    ///     .eventually_consistent_polls();
    /// assert!(store.polls_read_behind());
    /// ```
    #[must_use]
    pub fn eventually_consistent_polls(mut self) -> Self {
        self.polls_behind = true;
        self
    }

    /// How the reads a view behind will do are made: eventually consistent where the store was
    /// asked to ([`eventually_consistent_polls`](Self::eventually_consistent_polls)).
    fn poll_reading(&self) -> Reading {
        if self.polls_behind {
            Reading::Eventual
        } else {
            Reading::Consistent
        }
    }

    /// How many writes of its layout into a notice head this store and its clones sent, one
    /// write unit each (the head stays under 1 KB): a store that keeps the head apart writes it
    /// as each subscription opens and before a beat that no fresh read of the head spares it.
    /// For cost accounting (`kinesis-bench cost --apart`), where a wrapper sees only the beat.
    ///
    /// ```
    /// use aws_config::{BehaviorVersion, Region, SdkConfig};
    /// use ruststream_kinesis::DynamoLeaseStore;
    ///
    /// let config = SdkConfig::builder()
    ///     .behavior_version(BehaviorVersion::latest())
    ///     .region(Region::new("us-east-1"))
    ///     .build();
    /// let store = DynamoLeaseStore::new(&config, "warehouse-leases").keep_notice_head_apart();
    /// assert_eq!(store.notice_layout_writes(), 0);
    /// ```
    #[must_use]
    pub fn notice_layout_writes(&self) -> u64 {
        self.layout_writes
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The key (`lease_key`) of the row that holds `owner`'s beat on `stream` where the notice's
    /// head is kept apart ([`keep_notice_head_apart`](Self::keep_notice_head_apart)): the row
    /// of its group, one of eight, the same in every build.
    ///
    /// ```
    /// use ruststream_kinesis::DynamoLeaseStore;
    ///
    /// let key = DynamoLeaseStore::notice_beats_key("orders", "pod-7");
    /// assert!(key.starts_with("orders#beats") && key.ends_with("#notice"));
    /// assert_eq!(key, DynamoLeaseStore::notice_beats_key("orders", "pod-7"));
    /// ```
    #[must_use]
    pub fn notice_beats_key(stream: &str, owner: &str) -> String {
        crate::lease::beats_key(stream, crate::lease::beat_group(owner))
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
        self.scan(Reading::Consistent)
            .await
            .map(|scanned| scanned.rows)
    }

    /// [`rows`](Self::rows), each with the application it names
    /// ([`application`](Self::application)), if it names one: what the `lease-table` view shows.
    ///
    /// # Errors
    ///
    /// As [`rows`](Self::rows).
    pub async fn rows_with_applications(
        &self,
    ) -> Result<Vec<(LeaseKey, LeaseState, Option<String>)>, LeaseError> {
        let Scanned {
            rows,
            mut applications,
            ..
        } = self.scan(Reading::Consistent).await?;
        Ok(rows
            .into_iter()
            .map(|(key, state)| {
                let application = applications.remove(&key);
                (key, state, application)
            })
            .collect())
    }

    /// The whole notice of `stream`, read as `reading` says: `notice` and `notice_eventually`.
    async fn notice_read(
        &self,
        stream: &str,
        reading: Reading,
    ) -> Result<Option<Notice>, LeaseError> {
        if self.notice_apart {
            self.read_notice_apart(stream, reading).await.map(Some)
        } else {
            self.read_notice(stream, reading).await.map(Some)
        }
    }

    /// The rows of `stream`, by one Scan read as `reading` says: `list` and `list_eventually`.
    async fn rows_of(
        &self,
        stream: &str,
        reading: Reading,
    ) -> Result<Option<Vec<(LeaseKey, LeaseState)>>, LeaseError> {
        let Scanned {
            rows,
            malformed,
            foreign,
            ..
        } = self.scan(reading).await?;
        if let Some((key, theirs)) = foreign.into_iter().find(|(key, _)| key.stream() == stream) {
            return Err(self.other_application_error(&key, theirs));
        }
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
    }

    /// Every row of the table, and the keys of the rows it could not read (with what is wrong
    /// with each), each skipped with a warning; read as `reading` says.
    async fn scan(&self, reading: Reading) -> Result<Scanned, LeaseError> {
        let whole = LeaseKey::new("*", "*");
        let mut scanned = Scanned::default();
        let mut start: Option<Item> = None;
        loop {
            let page = self
                .client
                .scan()
                .table_name(self.table())
                .consistent_read(reading == Reading::Consistent)
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .map_err(|error| self.failure(&whole, "rows", &error))?;
            for item in page.items() {
                self.scanned_item(item, &mut scanned);
            }
            match page.last_evaluated_key {
                Some(last) if !last.is_empty() => start = Some(last),
                _ => break,
            }
        }
        scanned.rows.sort_by(|a, b| a.0.cmp(&b.0));
        // What the Scan saw spares later takes a read each: every `stream:shard` row exists, and
        // no other shard id has a bare row.
        // What the Scan saw exists. A key it no longer sees is not forgotten here: every
        // subscription of a broker shares this store, and another one's take may be deciding on
        // an older view in which the row existed (only a take refused for it, or this store's
        // own deletion, forgets a key).
        if reading == Reading::Eventual {
            // A view a little behind may miss a bare row written a moment ago (by an earlier
            // version beside this one): only a consistent Scan says which shards have none.
            return Ok(scanned);
        }
        let mut bare = HashSet::new();
        for key in scanned
            .rows
            .iter()
            .map(|(key, _)| key)
            .chain(scanned.malformed.iter().map(|(key, _)| key))
        {
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
        Ok(scanned)
    }

    /// Adds one item of a Scan's page to `scanned`. One bad row (written by hand, or by another
    /// tool) must not hide the others: every listing and handover poll of every stream reads
    /// through here, so a row without a string key, or one that does not parse, is skipped with
    /// a WARN.
    fn scanned_item(&self, item: &Item, scanned: &mut Scanned) {
        let Some(AttributeValue::S(row_key)) = item.get(KEY) else {
            tracing::warn!(
                table = %self.table,
                key = ?item.get(KEY),
                "skipping a lease row without a string lease_key; delete it"
            );
            return;
        };
        if row_key.ends_with(NOTICE_SUFFIX) {
            // A stream's notice: no shard's row.
            return;
        }
        let key = match row_key.split_once(':') {
            Some((stream, shard)) => LeaseKey::new(stream, shard),
            None => LeaseKey::new("", row_key.as_str()),
        };
        if let Some(theirs) = self.other_application(item) {
            scanned.foreign.push((key.clone(), theirs));
        }
        if let Some(AttributeValue::S(name)) = item.get(APPLICATION) {
            scanned.applications.insert(key.clone(), name.clone());
        }
        match state_of(item) {
            Ok(state) => scanned.rows.push((key, state)),
            Err(problem) => {
                tracing::warn!(
                    table = %self.table,
                    key = %row_key,
                    problem = %problem,
                    "skipping a malformed lease row; fix the attribute or delete the row (its \
                     shard is not taken until then)"
                );
                scanned.malformed.push((key, problem));
            }
        }
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
}

impl LeaseStore for DynamoLeaseStore {
    fn transactions(&self) -> Option<crate::lease::Transactions> {
        Some(crate::lease::Transactions::new(Arc::new(self.clone())))
    }

    fn acquire<'a>(
        &'a self,
        key: &'a LeaseKey,
        owner: &'a str,
        lease: Duration,
    ) -> LeaseFuture<'a, LeaseState> {
        Box::pin(self.take(key, owner, lease, None, None))
    }

    fn acquire_from<'a>(
        &'a self,
        key: &'a LeaseKey,
        owner: &'a str,
        lease: Duration,
        start: &'a str,
    ) -> LeaseFuture<'a, LeaseState> {
        Box::pin(self.take(key, owner, lease, Some(start), None))
    }

    /// The take of `acquire_from`, its condition widened to the row as the caller read it
    /// (`lease_owner = holder AND lease_counter = counter`), and the row required to exist.
    fn take_over<'a>(
        &'a self,
        key: &'a LeaseKey,
        owner: &'a str,
        lease: Duration,
        start: &'a str,
        holder: &'a str,
        counter: u64,
    ) -> LeaseFuture<'a, LeaseState> {
        Box::pin(self.take(key, owner, lease, Some(start), Some((holder, counter))))
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

    /// One consistent `GetItem` of a key no row has: answers whether the table exists and is
    /// keyed by the string `lease_key` alone.
    fn check(&self) -> LeaseFuture<'_, ()> {
        Box::pin(self.check_table())
    }

    /// With an [`application`](Self::application): a Scan (a row of `stream` that names another
    /// application refuses), then one conditional `UpdateItem` that writes the name into the
    /// stream's notice row unless another one is there. Without one: a `GetItem` of the notice
    /// row, which must name no application.
    fn claim<'a>(&'a self, stream: &'a str) -> LeaseFuture<'a, ()> {
        Box::pin(self.claim_stream(stream))
    }

    /// One conditional `DeleteItem`: the counter as read, and no unexpired lease.
    fn delete<'a>(&'a self, key: &'a LeaseKey, counter: u64) -> LeaseFuture<'a, bool> {
        Box::pin(self.delete_row(key, counter))
    }

    fn read<'a>(&'a self, key: &'a LeaseKey) -> LeaseFuture<'a, Option<LeaseState>> {
        Box::pin(self.read_row(key))
    }

    /// The conditional release, then a bump of the stream's notice (a second call, whose
    /// failure is logged and not the release's).
    fn release<'a>(&'a self, key: &'a LeaseKey, owner: &'a str) -> LeaseFuture<'a, ()> {
        Box::pin(async move {
            self.release_held(key, owner).await?;
            self.bump_notice(key.stream()).await;
            Ok(())
        })
    }

    fn checkpoint_and_renew<'a>(
        &'a self,
        key: &'a LeaseKey,
        owner: &'a str,
        checkpoint: &'a str,
        lease: Duration,
    ) -> LeaseFuture<'a, LeaseState> {
        Box::pin(self.checkpoint_renewing(key, owner, checkpoint, None, lease))
    }

    /// The checkpoint and how far behind the reader was, in the one conditional write.
    fn checkpoint_and_renew_behind<'a>(
        &'a self,
        key: &'a LeaseKey,
        owner: &'a str,
        checkpoint: &'a str,
        behind_ms: Option<u64>,
        lease: Duration,
    ) -> LeaseFuture<'a, LeaseState> {
        Box::pin(self.checkpoint_renewing(key, owner, checkpoint, behind_ms, lease))
    }

    /// One consistent Scan of the table (paginated), filtered to `stream`: it costs the table's
    /// size in read capacity, whatever the stream. A malformed row of another stream is left out
    /// (with a warning); one of `stream` fails the call, naming it, so the coordinator reads the
    /// rows it needs one by one and leaves that shard (and its children) alone rather than take
    /// it for a shard without a row. So does a row of `stream` that names another application
    /// ([`application`](Self::application)): each read of such a row fails with
    /// [`LeaseError::OtherApplication`], which the subscription reports at every listing.
    fn list<'a>(&'a self, stream: &'a str) -> LeaseFuture<'a, Option<Vec<(LeaseKey, LeaseState)>>> {
        Box::pin(self.rows_of(stream, Reading::Consistent))
    }

    /// [`list`](Self::list)'s Scan; eventually consistent (half the read units) where asked
    /// ([`eventually_consistent_polls`](Self::eventually_consistent_polls)).
    fn list_eventually<'a>(
        &'a self,
        stream: &'a str,
    ) -> LeaseFuture<'a, Option<Vec<(LeaseKey, LeaseState)>>> {
        Box::pin(self.rows_of(stream, self.poll_reading()))
    }

    /// One consistent `GetItem` of the stream's notice row (`<stream>#notice`); kept apart,
    /// one of each of its rows, sent together.
    fn notice<'a>(&'a self, stream: &'a str) -> LeaseFuture<'a, Option<Notice>> {
        Box::pin(self.notice_read(stream, Reading::Consistent))
    }

    /// [`notice`](Self::notice)'s reads; eventually consistent (half the read units) where
    /// asked ([`eventually_consistent_polls`](Self::eventually_consistent_polls)).
    fn notice_eventually<'a>(&'a self, stream: &'a str) -> LeaseFuture<'a, Option<Notice>> {
        Box::pin(self.notice_read(stream, self.poll_reading()))
    }

    /// Kept apart: one `GetItem` of the head. Else the whole notice. Eventually consistent
    /// where asked ([`eventually_consistent_polls`](Self::eventually_consistent_polls)).
    fn notice_head<'a>(&'a self, stream: &'a str) -> LeaseFuture<'a, Option<Notice>> {
        Box::pin(async move {
            if self.notice_apart {
                self.read_notice_head(stream).await.map(Some)
            } else {
                self.read_notice(stream, self.poll_reading())
                    .await
                    .map(Some)
            }
        })
    }

    fn keeps_notice_head_apart(&self) -> bool {
        self.notice_apart
    }

    fn polls_read_behind(&self) -> bool {
        self.polls_behind
    }

    /// Kept apart: `notice_layout` written in the head, unless another is there.
    fn keep_layout<'a>(&'a self, stream: &'a str) -> LeaseFuture<'a, ()> {
        Box::pin(async move {
            if self.notice_apart {
                self.write_layout(stream).await
            } else {
                Ok(())
            }
        })
    }

    /// One unconditional `UpdateItem` of the stream's notice row.
    fn beat<'a>(
        &'a self,
        stream: &'a str,
        owner: &'a str,
        until_ms: u64,
        forget: &'a [String],
    ) -> LeaseFuture<'a, ()> {
        Box::pin(self.write_beat(stream, owner, until_ms, forget))
    }

    /// One unconditional `UpdateItem` of the stream's notice row.
    fn announce<'a>(
        &'a self,
        stream: &'a str,
        owner: &'a str,
        record: &'a str,
        forget: &'a [String],
    ) -> LeaseFuture<'a, ()> {
        Box::pin(self.write_incarnation(stream, owner, record, forget))
    }

    fn table_name(&self) -> Option<&str> {
        Some(&self.table)
    }

    fn keeps_leases_by_beat(&self) -> bool {
        true
    }

    /// One unconditional `UpdateItem` of the stream's notice row: the beat removed, the
    /// counter bumped.
    fn leave<'a>(&'a self, stream: &'a str, owner: &'a str) -> LeaseFuture<'a, ()> {
        Box::pin(self.write_leave(stream, owner, None))
    }

    /// One `UpdateItem` of the stream's notice row: the beat removed, the counter bumped, on
    /// condition that the beat stands no later than `until_ms`.
    fn leave_beat<'a>(
        &'a self,
        stream: &'a str,
        owner: &'a str,
        until_ms: u64,
    ) -> LeaseFuture<'a, ()> {
        Box::pin(self.write_leave(stream, owner, Some(until_ms)))
    }

    /// One conditional `UpdateItem` that sets `handoff_to` and `handoff_asked`, and no counter.
    fn ask_handoff<'a>(
        &'a self,
        key: &'a LeaseKey,
        holder: &'a str,
        counter: u64,
        to: &'a str,
        asked_ms: u64,
    ) -> LeaseFuture<'a, bool> {
        Box::pin(self.write_handoff_request(key, holder, counter, to, asked_ms))
    }

    /// One unconditional `UpdateItem` of the stream's notice row: `ADD` one to each holder's
    /// `ask_<holder>`.
    fn mark_asked<'a>(&'a self, stream: &'a str, holders: &'a [String]) -> LeaseFuture<'a, ()> {
        Box::pin(self.write_marks(stream, holders))
    }

    /// One conditional `UpdateItem` that removes `handoff_to` and `handoff_asked` if the request
    /// names `to`.
    fn withdraw_handoff<'a>(&'a self, key: &'a LeaseKey, to: &'a str) -> LeaseFuture<'a, bool> {
        Box::pin(self.remove_handoff_request(key, to))
    }

    /// One conditional `UpdateItem` (held, fenced, the request naming `to`), then a bump of the
    /// stream's notice (a second call, whose failure is logged and not the handoff's).
    fn hand_over<'a>(
        &'a self,
        key: &'a LeaseKey,
        owner: &'a str,
        to: &'a str,
        checkpoint: Option<&'a str>,
        lease: Duration,
    ) -> LeaseFuture<'a, ()> {
        Box::pin(async move {
            self.hand_over_held(key, owner, to, checkpoint, lease)
                .await?;
            self.bump_notice(key.stream()).await;
            Ok(())
        })
    }
}

#[cfg(test)]
mod rules_cases;
#[cfg(test)]
mod tests;

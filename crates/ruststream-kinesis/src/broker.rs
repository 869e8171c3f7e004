//! The broker: its builder, `connect` and `shutdown`, and the connected form that opens
//! subscriptions and pairs publishers.

use std::sync::Arc;
use std::time::Duration;

use crate::local_stack::test_credentials;
use crate::sdk::endpoint::Service;
use aws_config::{BehaviorVersion, Region, SdkConfig};
use aws_sdk_kinesis::Client;
use ruststream::{
    AddressedCopies, Broker, ConnectedBroker, RedeliveryAddress, RedeliveryAddressed, Subscribe,
    SubscriptionSource,
};
use tokio::runtime::Handle;

use crate::delivery::subscriber::Deliveries;
use crate::kinesis::calls::Kinesis;
#[cfg(feature = "testing")]
use crate::kinesis::in_process::InProcessKinesis;
use crate::live::coordinator;
use crate::live::subscription::Instance;
use crate::registry::{Registry, StreamRegistration};
use crate::settings::validate;
use crate::telemetry::Meters;
use crate::{
    KinesisError, KinesisStream, KinesisSubscriber, LeaseStore, LeaseTimings, MemoryLeaseStore,
};

/// How long `shutdown` waits for readers to write their final checkpoints and release.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// The Amazon Kinesis Data Streams broker.
///
/// Constructors and builders do no I/O: the AWS configuration is resolved and the client built
/// in `connect`.
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use ruststream_kinesis::{KinesisBroker, MemoryLeaseStore};
///
/// // The local stack: one endpoint for Kinesis (and DynamoDB), static test credentials.
/// let local = KinesisBroker::new()
///     .endpoint("http://127.0.0.1:4566")
///     .region("us-east-1")
///     .test_credentials()
///     .owner_id("pod-a")
///     .lease_store(Arc::new(MemoryLeaseStore::new()));
/// assert_eq!(local.owner(), "pod-a");
/// ```
#[derive(Clone)]
pub struct KinesisBroker {
    config: Option<SdkConfig>,
    endpoint: Option<String>,
    region: Option<String>,
    test_credentials: bool,
    store: Arc<dyn LeaseStore>,
    owner: Arc<str>,
    timings: LeaseTimings,
    create_streams: Option<u32>,
    balance: bool,
    /// Whether the leases are kept alive by the instance's beat instead of renewed per row.
    by_beat: bool,
    meters: Meters,
    /// The streams `TestApp` runs on, shared by every connection of this broker and its clones.
    #[cfg(feature = "testing")]
    in_process: Arc<InProcessKinesis>,
    /// What exactly-once subscriptions commit under `TestApp`, shared like `in_process`.
    #[cfg(all(feature = "testing", feature = "dynamodb-lease"))]
    in_process_commits: crate::lease::InProcessCommits,
}

/// Says what the broker reaches and how it shares leases, never a credential: the endpoint
/// without its user-info and query, and of a configuration only that one was given.
impl std::fmt::Debug for KinesisBroker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let endpoint = self.endpoint.as_deref().map(|url| {
            crate::sdk::endpoint::clean(url).map_or_else(
                |_| "(an endpoint that does not parse)".to_owned(),
                |c| c.url,
            )
        });
        f.debug_struct("KinesisBroker")
            .field("config", &self.config.as_ref().map(|_| "SdkConfig { .. }"))
            .field("endpoint", &endpoint)
            .field("region", &self.region)
            .field("test_credentials", &self.test_credentials)
            .field("owner", &self.owner)
            .field("timings", &self.timings)
            .field("create_streams", &self.create_streams)
            .field("balance", &self.balance)
            .field("by_beat", &self.by_beat)
            .finish_non_exhaustive()
    }
}

impl Default for KinesisBroker {
    fn default() -> Self {
        Self::new()
    }
}

fn unique_owner() -> Arc<str> {
    let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "ruststream".to_owned());
    let nonce: u32 = rand::random();
    Arc::from(format!("{host}-{}-{nonce:08x}", std::process::id()))
}

impl KinesisBroker {
    /// A broker configured from the environment (region, credentials, `AWS_ENDPOINT_URL*`),
    /// resolved at `connect`.
    #[must_use]
    pub fn new() -> Self {
        Self {
            config: None,
            endpoint: None,
            region: None,
            test_credentials: false,
            store: Arc::new(MemoryLeaseStore::new()),
            owner: unique_owner(),
            timings: LeaseTimings::default(),
            create_streams: None,
            balance: false,
            by_beat: false,
            meters: Meters::default(),
            #[cfg(feature = "testing")]
            in_process: Arc::default(),
            #[cfg(all(feature = "testing", feature = "dynamodb-lease"))]
            in_process_commits: crate::lease::InProcessCommits::default(),
        }
    }

    /// A broker on an AWS configuration loaded by the caller (the one a `DynamoLeaseStore` takes
    /// too, so both reach one account and region).
    #[must_use]
    pub fn from_config(config: SdkConfig) -> Self {
        Self {
            config: Some(config),
            ..Self::new()
        }
    }

    /// Sends every Kinesis call to `url` (a local stack such as `http://127.0.0.1:4566`).
    #[must_use]
    pub fn endpoint(mut self, url: impl Into<String>) -> Self {
        self.endpoint = Some(url.into());
        self
    }

    /// The AWS region.
    #[must_use]
    pub fn region(mut self, region: impl Into<String>) -> Self {
        self.region = Some(region.into());
        self
    }

    /// Static test credentials, which local stacks accept; never for a real account.
    #[must_use]
    pub fn test_credentials(mut self) -> Self {
        self.test_credentials = true;
        self
    }

    /// The store every subscription of this broker keeps its leases and checkpoints in (default:
    /// a [`MemoryLeaseStore`] of its own). Instances that share one store share the shards.
    #[must_use]
    pub fn lease_store(mut self, store: Arc<dyn LeaseStore>) -> Self {
        self.store = store;
        self
    }

    /// Names this instance in the lease table (default: unique per broker). An instance
    /// restarted under the same name gets its leases back at once; two instances running at the
    /// same time must never share a name.
    ///
    /// Two that do are found: each run records itself under its owner id in the stream's notice
    /// row, and a run that reads another live run's record there (within a few renewal
    /// intervals, well inside two leases and a listing interval) tells which started first. The
    /// later one pauses reading every stream (its readers hand their shards back), logs an
    /// ERROR and reports [`KinesisError::OwnerIdInUse`] naming the owner id and the table, until
    /// the earlier one is gone; the earlier keeps its shards. A run restarted after a crash or a
    /// release overwrites its predecessor's record and is never mistaken for a second
    /// instance. Until it is found, each takes the other's shards and records are handled twice:
    /// name instances after something unique to each, such as the pod's name, and never fall
    /// back to a fixed one.
    ///
    /// With leases kept alive by beat ([`keep_leases_alive_by_beat`](Self::keep_leases_alive_by_beat))
    /// each run holds its rows under this name and a suffix of its own: a restart takes its
    /// predecessor's shards over once that run's beat lapsed (a lease and the skew tolerance),
    /// not at once, and two instances under one name run as two (the check above does not
    /// apply).
    ///
    /// # Examples
    ///
    /// ```
    /// use ruststream_kinesis::KinesisBroker;
    ///
    /// // One name per pod: a restarted pod takes its shards back without waiting for its leases
    /// // to lapse. Without a pod name the broker keeps its unique default; a fixed fallback
    /// // would be shared by every pod that misses the variable.
    /// let broker = match std::env::var("POD_NAME") {
    ///     Ok(pod) => KinesisBroker::new().owner_id(pod),
    ///     Err(_) => KinesisBroker::new(),
    /// };
    /// # let _ = broker;
    ///
    /// // Without a name of its own each broker is unique.
    /// assert_ne!(KinesisBroker::new().owner(), KinesisBroker::new().owner());
    /// assert_eq!(KinesisBroker::new().owner_id("pod-7").owner(), "pod-7");
    /// ```
    #[must_use]
    pub fn owner_id(mut self, owner: impl Into<String>) -> Self {
        self.owner = Arc::from(owner.into());
        self
    }

    /// The lease timings of every subscription of this broker (default: a 10 s lease renewed
    /// every 3 s, shards listed every 10 s, the lease table looked at every second between
    /// listings, a shard's checkpoint written at most once a second). See [`LeaseTimings`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use ruststream_kinesis::{KinesisBroker, LeaseTimings};
    ///
    /// # fn main() -> Result<(), ruststream_kinesis::KinesisError> {
    /// // A test that cannot wait ten seconds for a crashed instance's lease to lapse.
    /// let fast = LeaseTimings::new(Duration::from_secs(3), Duration::from_secs(1))?
    ///     .with_listing_interval(Duration::from_secs(1));
    /// let broker = KinesisBroker::new().lease_timings(fast);
    /// # let _ = broker;
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn lease_timings(mut self, timings: LeaseTimings) -> Self {
        self.timings = timings;
        self
    }

    /// Balances the shards of each stream with the other instances on the lease table (off by
    /// default: the instance that lists first takes every free shard and keeps it).
    ///
    /// Balancing, an instance takes free shards only up to its target (the floor or the ceiling
    /// of the open shards over the instances it counts), and while below it asks the instance
    /// furthest above its own target for handoffs. Just started, it takes no free shard until a
    /// notice it reads shows its own beat (about a second; a lease at most), so a fleet started
    /// together shares the shards rather than hand them over. The holder sees
    /// the request at its next renewal, hands out no more records of the shard, waits up to
    /// [`LeaseTimings::with_handoff_drain`] for its deliveries to settle, and hands the row over
    /// with its final checkpoint in one conditional write: a move whose every delivery settled
    /// in time redelivers nothing. A crash on either side, or a request the holder never sees,
    /// falls back to the lease's expiry. No leader: every instance decides from the rows and the
    /// beats of the stream's notice. Instances converge within about one listing interval of a
    /// join (11 s measured with the defaults, `kinesis-bench balance`) and about a handover poll
    /// of a leave; every instance sharing the table must run a version with handoffs
    /// for them to be honoured (any version's free shards are shared as before).
    ///
    /// With the handover poll off (`LeaseTimings::with_handover_poll_interval(Duration::ZERO)`)
    /// a moved shard is found by its new owner at its next listing, so `connect` refuses a
    /// listing interval longer than the lease ([`KinesisError::Config`]): the handed lease
    /// would lapse first.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use ruststream_kinesis::{KinesisBroker, MemoryLeaseStore};
    ///
    /// let store = Arc::new(MemoryLeaseStore::new());
    /// let broker = KinesisBroker::new().lease_store(store).balance_shards(true);
    /// # let _ = broker;
    /// ```
    #[must_use]
    pub fn balance_shards(mut self, balance: bool) -> Self {
        self.balance = balance;
        self
    }

    /// Keeps the leases this instance holds alive by one beat of the instance per stream, written
    /// to the stream's notice every renewal interval, instead of renewing each lease's row (off
    /// by default: every held lease is renewed every 3 s). Idle, the lease table then takes one
    /// write per instance and renewal interval however many shards the instance holds.
    ///
    /// Fencing stays per row: every checkpoint, hand-over and release is conditioned on the
    /// row's owner and counter as before. A row held this way carries an expiry a thousand
    /// years ahead ([`LeaseState::is_kept_by_beat`](crate::LeaseState::is_kept_by_beat)), so no
    /// instance judges it by its expiry: another instance takes it over only once the holder's
    /// beat lapsed by its own clock (lease + [`SKEW_TOLERANCE`](crate::SKEW_TOLERANCE) after
    /// the last beat that landed), in one write conditioned on the holder and the counter it
    /// read ([`LeaseStore::take_over`]). An instance whose beats stop landing stops delivering
    /// from every shard once its last beat runs out, as a holder whose renewals fail does, and
    /// takes nothing until a beat lands again.
    ///
    /// Each run holds its rows as `<owner id>#<run>` (a random suffix of its own, which
    /// [`ConnectedKinesisBroker::owner`] answers): a restart under the same owner id takes the
    /// earlier run's shards over once that run's beat lapsed (a lease and the skew tolerance
    /// after its last beat), not at once as its own, so a paused earlier run that wakes up
    /// again never reads beside it.
    ///
    /// With [`balance_shards`](Self::balance_shards), a holder that writes nothing while idle
    /// hears of a handoff asked of it from the stream's notice, where the request is marked
    /// under it ([`Notice::asks`](crate::Notice::asks)): its poll (every renewal interval while
    /// it waits for no shard, the handover poll off or not) sees the mark, reads the stream's
    /// rows once, and hands each shard asked of it over, as a holder renewing per row does at
    /// its next renewal.
    ///
    /// `connect` refuses it ([`KinesisError::Config`]) with a lease store that cannot take a
    /// shard over or keeps no beats ([`LeaseStore::keeps_leases_by_beat`]). A subscription refuses to open on a
    /// stream whose rows another live instance holds the other way (a fleet split between the
    /// two ways), and one already open reports such a split once each time it appears: stop the
    /// fleet, or let its leases lapse, to change. `TestApp` runs leases per
    /// row whatever this says: what a handler sees does not change.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use ruststream_kinesis::{KinesisBroker, MemoryLeaseStore};
    ///
    /// let broker = KinesisBroker::new()
    ///     .lease_store(Arc::new(MemoryLeaseStore::new()))
    ///     .keep_leases_alive_by_beat(true);
    /// # let _ = broker;
    /// ```
    #[must_use]
    pub fn keep_leases_alive_by_beat(mut self, by_beat: bool) -> Self {
        self.by_beat = by_beat;
        self
    }

    /// Counts what this broker does into `metrics` (feature `metrics`): each shard's lag, the
    /// records and bytes read, the leases held and what happened to them, the lease-table calls
    /// and their latency, retries, and publishes. [`KinesisMetrics`](crate::KinesisMetrics) lists
    /// the series; the Operating page says what to watch and alert on.
    ///
    /// With the `otel` feature the same figures go to OpenTelemetry instruments on the global
    /// meter, whether or not this is called: install the meter provider before connecting.
    ///
    /// # Examples
    ///
    /// ```
    /// use ruststream_kinesis::{KinesisBroker, KinesisMetrics};
    ///
    /// # fn main() -> Result<(), prometheus::Error> {
    /// // The framework's registry, so one /metrics route renders its series and these.
    /// let framework = ruststream::metrics::Metrics::with_registry(prometheus::Registry::new())?;
    /// let broker = KinesisBroker::new().metrics(KinesisMetrics::register(framework.registry())?);
    /// # let _ = broker;
    /// # Ok(())
    /// # }
    /// ```
    #[cfg(feature = "metrics")]
    #[must_use]
    pub fn metrics(mut self, metrics: crate::KinesisMetrics) -> Self {
        self.meters = self.meters.with_prometheus(metrics);
        self
    }

    /// Creates a stream with `shards` shards when a subscription by bare name
    /// (`#[subscriber("orders")]`) finds it missing. Off by default: a missing stream fails startup.
    ///
    /// A subscription through [`KinesisStream`] says it on its own, with
    /// [`KinesisStream::create_if_missing`].
    ///
    /// # Examples
    ///
    /// ```
    /// # #[cfg(feature = "testing")]
    /// # mod demo {
    /// use ruststream_kinesis::prelude::*;
    /// use serde::{Deserialize, Serialize};
    ///
    /// #[derive(Debug, PartialEq, Deserialize, Serialize, Outgoing)]
    /// #[outgoing(name = "orders")]
    /// struct Order {
    ///     id: u64,
    /// }
    ///
    /// /// Subscribed by the stream's name alone.
    /// #[subscriber("orders")]
    /// async fn pick(order: &Order) -> HandlerOutcome {
    ///     tracing::info!(order.id, "order picked");
    ///     HandlerOutcome::ack()
    /// }
    ///
    /// fn app() -> RustStream {
    ///     // `orders` is created with two shards when it does not exist.
    ///     let broker = KinesisBroker::new().create_streams_if_missing(2);
    ///     RustStream::new(AppInfo::new("warehouse", "0.1.0")).with_broker(broker, |b| {
    ///         b.include(pick);
    ///     })
    /// }
    ///
    /// pub async fn test() -> Result<(), Box<dyn std::error::Error>> {
    ///     let tb = ruststream::testing::TestApp::start(app()).await?;
    ///     let orders = tb.broker::<KinesisBroker>();
    ///     orders.message(&Order { id: 1 }).publish().await?;
    ///     orders.subscriber("orders").assert_called_once().with(&Order { id: 1 });
    ///     Ok(())
    /// }
    /// # }
    /// # #[cfg(feature = "testing")]
    /// # tokio::runtime::Runtime::new().unwrap().block_on(demo::test()).unwrap();
    /// ```
    #[must_use]
    pub fn create_streams_if_missing(mut self, shards: u32) -> Self {
        self.create_streams = Some(shards.max(1));
        self
    }

    /// This instance's owner id.
    #[must_use]
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// In process (`TestApp`): what the exactly-once subscriptions of this broker and its clones
    /// committed. No DynamoDB runs in process: a commit moves the in-process lease row and
    /// records the handlings' staged writes here, for the test to read, with each handling and
    /// how it ended ([`InProcessCommits::handlings`](crate::InProcessCommits::handlings)); a test may have commits
    /// refused ([`InProcessCommits::refuse_when`](crate::InProcessCommits::refuse_when)).
    ///
    /// # Examples
    ///
    /// ```
    /// use aws_sdk_dynamodb::types::{AttributeValue, TransactWriteItem, Update};
    /// use ruststream::testing::TestApp;
    /// use ruststream_kinesis::prelude::*;
    /// use ruststream_kinesis::{DynamoWrites, HandlingOutcome};
    /// use serde::{Deserialize, Serialize};
    ///
    /// #[derive(Debug, Deserialize, Serialize, Outgoing)]
    /// #[outgoing(name = "orders")]
    /// struct Order {
    ///     id: u64,
    /// }
    ///
    /// #[subscriber(KinesisStream::new("orders").create_if_missing(1).exactly_once())]
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
    ///         Err(_) => HandlerOutcome::retry(),
    ///     }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let broker = KinesisBroker::new();
    /// let app = RustStream::new(AppInfo::new("warehouse", "0.1.0"))
    ///     .with_broker(broker.clone(), |b| {
    ///         b.include(count);
    ///     });
    /// let tb = TestApp::start(app).await?;
    /// tb.broker::<KinesisBroker>().message(&Order { id: 7 }).publish().await?;
    /// // The publish returns once the handling's commit landed.
    /// let writes = broker.in_process_commits().writes();
    /// assert_eq!(writes.len(), 1);
    /// assert_eq!(writes[0].update().unwrap().table_name(), "order-counts");
    /// // Each handling: what it staged, and how it ended.
    /// let handlings = broker.in_process_commits().handlings();
    /// assert_eq!(handlings.len(), 1);
    /// assert_eq!(handlings[0].outcome, HandlingOutcome::Committed);
    /// assert_eq!(handlings[0].staged, writes);
    /// # Ok(())
    /// # }
    /// ```
    #[cfg(all(feature = "testing", feature = "dynamodb-lease"))]
    #[must_use]
    pub fn in_process_commits(&self) -> crate::lease::InProcessCommits {
        self.in_process_commits.clone()
    }

    /// Balancing with the handover poll off, a handed-off shard is found by
    /// its new owner at its next listing only, and the row the holder wrote for it lasts one
    /// lease: a listing interval longer than the lease lets it lapse first, and the move undoes
    /// itself and is asked again, over and over.
    fn timings_fit_balancing(&self) -> Result<(), KinesisError> {
        let timings = &self.timings;
        if self.balance
            && timings.handover_poll_interval().is_zero()
            && timings.listing_interval() > timings.lease()
        {
            return Err(KinesisError::Config {
                message: format!(
                    "balance_shards(true) with the handover poll off lists every {:?}, longer \
                     than the {:?} lease: a handed-off shard lapses before \
                     its new owner lists again; turn the poll on \
                     (LeaseTimings::with_handover_poll_interval), list at most once a lease \
                     (with_listing_interval), or lengthen the lease",
                    timings.listing_interval(),
                    timings.lease()
                ),
            });
        }
        Ok(())
    }

    /// Refuses liveness by beat where it cannot work: on a lease store that cannot take a shard
    /// over or keeps no beats.
    fn beat_fits(&self) -> Result<(), KinesisError> {
        if !self.by_beat {
            return Ok(());
        }
        if !self.store.keeps_leases_by_beat() {
            let store = self.store.table_name().map_or_else(
                || "this lease store".to_owned(),
                |table| format!("the lease store on table {table:?}"),
            );
            return Err(KinesisError::Config {
                message: format!(
                    "keep_leases_alive_by_beat(true): {store} cannot keep leases alive by beat \
                     (LeaseStore::keeps_leases_by_beat is false: it needs take_over, notices \
                     that keep beats, leave_beat and mark_asked); use the DynamoDB or the \
                     in-memory lease store, implement those calls, or keep leases renewed per row"
                ),
            });
        }
        Ok(())
    }

    /// The lease store's [`check`](LeaseStore::check), within the bound of a store call: a
    /// store that does not answer in time is left to the calls that follow, as one that failed
    /// for a reason a retry may cure.
    async fn check_store(&self) -> Result<(), KinesisError> {
        let bound = self.timings.store_call_timeout();
        match tokio::time::timeout(bound, self.store.check()).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(source)) => Err(KinesisError::LeaseStore {
                source: Box::new(source),
            }),
            Err(_) => {
                tracing::warn!(
                    "the lease store did not answer its check within {bound:?}; starting anyway"
                );
                Ok(())
            }
        }
    }

    async fn client(&self) -> Result<Client, KinesisError> {
        let config = match &self.config {
            Some(config) => config.clone(),
            None => {
                let mut loader = aws_config::defaults(BehaviorVersion::latest());
                if let Some(region) = &self.region {
                    loader = loader.region(Region::new(region.clone()));
                }
                if self.test_credentials {
                    loader = loader.credentials_provider(test_credentials());
                }
                loader.load().await
            }
        };
        let mut builder = aws_sdk_kinesis::config::Builder::from(&config);
        if let Some(region) = &self.region {
            builder = builder.region(Region::new(region.clone()));
        }
        if self.test_credentials {
            builder = builder.credentials_provider(test_credentials());
        }
        match crate::sdk::endpoint::for_service(self.endpoint.as_deref(), &config, Service::Kinesis)
        {
            Ok(Some(endpoint)) => builder = builder.endpoint_url(endpoint),
            Ok(None) => {}
            Err(message) => return Err(KinesisError::Config { message }),
        }
        builder = builder.http_client(crate::sdk::http::on_runtime(
            config.http_client(),
            Handle::current(),
        ));
        builder = builder.timeout_config(crate::sdk::timeouts::call_timeouts(
            config.timeout_config(),
            self.timings.kinesis_call_timeout(),
        ));
        if self.meters.counting() {
            builder = builder.interceptor(crate::sdk::metering::Metering::new(self.meters.clone()));
        }
        let conf = builder.build();
        if conf.region().is_none() {
            return Err(KinesisError::Config {
                message: "no AWS region: set AWS_REGION, or call KinesisBroker::region(..)"
                    .to_owned(),
            });
        }
        Ok(Client::from_conf(conf))
    }

    /// The broker with every backend it counts into: with the `otel` feature, instruments on
    /// the global meter as installed now.
    fn metered(self) -> Self {
        #[cfg(feature = "otel")]
        let meters = self.meters.clone().with_global_meter();
        #[cfg(not(feature = "otel"))]
        let meters = self.meters.clone();
        Self { meters, ..self }
    }

    fn connected(self, kinesis: Kinesis) -> ConnectedKinesisBroker {
        // Kept alive by beat, each run holds its rows under an owner of its own: a run that
        // restarts under the same owner id, while an earlier one is paused, must not retake
        // the earlier run's rows at once (by counter, as its own), since nothing the paused run
        // writes on a schedule would be refused and stop it. It takes them over once the
        // earlier run's beat lapsed, as any other instance's.
        let run_owner = self
            .by_beat
            .then(|| Arc::from(format!("{}#{:08x}", self.owner, rand::random::<u32>())));
        let instance = Instance::new(
            kinesis,
            self.store,
            self.owner,
            if self.by_beat {
                self.timings.kept_by_beat()
            } else {
                self.timings
            },
            self.balance,
            self.meters,
        );
        ConnectedKinesisBroker {
            instance: match run_owner {
                Some(owner) => instance.holding_as(owner),
                None => instance,
            },
            create_streams: self.create_streams,
            streams: Registry::default(),
            record_limits: Arc::default(),
        }
    }
}

#[cfg(all(test, feature = "testing"))]
impl KinesisBroker {
    /// The in-process Kinesis a `TestApp` on this broker runs on, for a test that writes to it
    /// what only the crate can (a KPL aggregate of several user records).
    pub(crate) fn in_process_kinesis(&self) -> Arc<InProcessKinesis> {
        Arc::clone(&self.in_process)
    }
}

impl Broker for KinesisBroker {
    type Error = KinesisError;
    type Connected = ConnectedKinesisBroker;

    /// Builds the Kinesis client and checks the lease store before any subscription reads: a
    /// store that can never serve (a lease table that does not exist, or is keyed otherwise than
    /// by `lease_key`) fails the start with [`KinesisError::LeaseStore`].
    async fn connect(self) -> Result<ConnectedKinesisBroker, KinesisError> {
        self.timings_fit_balancing()?;
        self.beat_fits()?;
        let broker = self.metered();
        let client = broker.client().await?;
        broker.check_store().await?;
        Ok(broker.connected(Kinesis::Sdk(client)))
    }
}

#[cfg(feature = "testing")]
impl ruststream::testing::InProcess for KinesisBroker {
    async fn connect_in_process(self) -> Result<ConnectedKinesisBroker, KinesisError> {
        let kinesis = Kinesis::InProcess(Arc::clone(&self.in_process), Arc::default());
        // The reader runs on a lease store of the connection's own, never the one configured
        // (a test consults no lease store), with leases no paused clock's jump outlives.
        self.timings_fit_balancing()?;
        let mut broker = self.metered();
        #[cfg(feature = "dynamodb-lease")]
        let store = MemoryLeaseStore::committing(broker.in_process_commits.clone());
        #[cfg(not(feature = "dynamodb-lease"))]
        let store = MemoryLeaseStore::new();
        broker.store = Arc::new(store);
        broker.timings = broker.timings.in_process();
        // One instance on a store of its own: leases per row, which a handler cannot tell apart.
        broker.by_beat = false;
        #[cfg(feature = "dynamodb-lease")]
        let journal = broker.in_process_commits.clone();
        let connected = broker.connected(kinesis);
        #[cfg(feature = "dynamodb-lease")]
        let connected = ConnectedKinesisBroker {
            instance: connected.instance.with_journal(journal),
            ..connected
        };
        Ok(connected)
    }
}

/// The connected broker: opens subscriptions and pairs publishers.
#[derive(Debug)]
pub struct ConnectedKinesisBroker {
    /// What every subscription of the connection shares, the Kinesis it reads among it.
    instance: Instance,
    /// Creates a missing stream with this many shards where a subscription or a test's input
    /// names it.
    create_streams: Option<u32>,
    streams: Registry,
    /// The largest record of each stream its publishers wrote to.
    record_limits: crate::publisher::RecordLimits,
}

impl ConnectedKinesisBroker {
    /// A publisher with the default policy.
    ///
    /// # Errors
    ///
    /// Never in practice; the signature matches the policy's `pair`.
    pub async fn publisher(&self) -> Result<crate::KinesisPublisher, ruststream::PairError> {
        ruststream::PublishPolicy::pair(crate::KinesisPublish::default(), self).await
    }

    /// This instance's owner id in the lease table: the broker's, or with leases kept alive by
    /// beat the broker's and this run's suffix (`<owner id>#<run>`).
    #[must_use]
    pub fn owner(&self) -> &str {
        self.instance.owner()
    }

    async fn register(&self, name: &str) -> Result<StreamRegistration, KinesisError> {
        if self.instance.is_closed() {
            return Err(KinesisError::ShutDown {
                what: "subscribing",
            });
        }
        self.streams.register(name).await
    }

    pub(crate) async fn open(
        &self,
        source: KinesisStream,
    ) -> Result<KinesisSubscriber, KinesisError> {
        let name = source.name.as_ref();
        validate::stream_name(name)?;
        if let Some(shard) = source.initial.shard() {
            return Err(KinesisError::Config {
                message: format!(
                    "KinesisStream::new({name:?}).initial_position(..) names a record of shard \
                     {shard}; the initial position of a stream is TrimHorizon, Latest or \
                     AtTimestamp (seek one shard with start_at(..) or a Seeker instead)"
                ),
            });
        }
        crate::live::exactly_once::refusal(&self.instance, &source)?;
        let registration = self.register(name).await?;
        let capacity = usize::try_from(source.batch_size).unwrap_or(1000).max(64);
        self.read(source, registration, capacity).await
    }
}

impl ConnectedKinesisBroker {
    /// Opens `source`: its shards read under leases by the coordinator's readers.
    async fn read(
        &self,
        source: KinesisStream,
        mut registration: StreamRegistration,
        capacity: usize,
    ) -> Result<KinesisSubscriber, KinesisError> {
        let name = source.name.as_ref();
        let kinesis = self.instance.kinesis();
        let stream_arn = kinesis
            .ensure_stream(name, source.create_if_missing)
            .await?;
        #[cfg(feature = "dynamodb-lease")]
        crate::live::exactly_once::account_refusal(&self.instance, &source, &stream_arn).await?;
        let fan_out = match &source.fan_out {
            Some(fan_out) => Some(
                kinesis
                    .ensure_consumer((name, &stream_arn), &fan_out.consumer, fan_out.register)
                    .await?,
            ),
            None => None,
        };
        let (outlet, inlet) = crate::delivery::outlet::channel(capacity);
        let sub = coordinator::start(
            self.instance.clone(),
            &source,
            (fan_out, outlet),
            &mut registration,
        )
        .await?;
        let deliveries = Deliveries::new(inlet, sub, registration);
        Ok(KinesisSubscriber::new(deliveries, source.max_wait))
    }
}

/// The server a service's `AsyncAPI` document names: the endpoint's host and port where one is
/// set (`endpoint(..)`, the configuration's, or `AWS_ENDPOINT_URL_KINESIS` / `AWS_ENDPOINT_URL`),
/// else the regional Kinesis host, else Kinesis's global name; protocol `kinesis`. Never a
/// credential: the endpoint's scheme, user-info, path and query are dropped.
///
/// # Examples
///
/// ```
/// use ruststream::DescribeServer;
/// use ruststream_kinesis::KinesisBroker;
///
/// let broker = KinesisBroker::new().endpoint("http://user:secret@localhost:4566/?token=secret");
/// let server = broker.describe_server();
/// assert_eq!(server.host.as_deref(), Some("localhost:4566"));
/// assert_eq!(server.protocol, "kinesis");
/// ```
///
/// Without an endpoint, `KinesisBroker::new().region("eu-west-1")` is described as
/// `kinesis.eu-west-1.amazonaws.com`.
impl ruststream::DescribeServer for KinesisBroker {
    fn describe_server(&self) -> ruststream::ServerSpec {
        let env = |name: &str| std::env::var(name).ok().filter(|value| !value.is_empty());
        // As `client` picks it: the broker's own, else the configuration's as the SDK resolves
        // it, else (a configuration loaded at `connect`) the environment's.
        let endpoint = self.endpoint.clone().or_else(|| match &self.config {
            Some(config) => crate::sdk::endpoint::resolved(config, Service::Kinesis),
            None => env("AWS_ENDPOINT_URL_KINESIS").or_else(|| env("AWS_ENDPOINT_URL")),
        });
        let region = || {
            self.region
                .clone()
                .or_else(|| {
                    self.config
                        .as_ref()
                        .and_then(|config| config.region().map(ToString::to_string))
                })
                .or_else(|| env("AWS_REGION"))
                .or_else(|| env("AWS_DEFAULT_REGION"))
        };
        crate::describe::server(endpoint, region)
    }
}

impl ConnectedBroker for ConnectedKinesisBroker {
    type Error = KinesisError;
    type Closed = ();

    async fn shutdown(self) -> Result<(), KinesisError> {
        if !self.instance.shut_down(SHUTDOWN_GRACE).await {
            tracing::warn!(
                "kinesis shutdown: readers did not finish their final checkpoints within {SHUTDOWN_GRACE:?}"
            );
        }
        Ok(())
    }
}

impl Subscribe for ConnectedKinesisBroker {
    type Subscriber = KinesisSubscriber;
    /// A publish to a stream reaches the subscription reading it, so the name is the address.
    type Copies = AddressedCopies;

    async fn subscribe(&self, name: &str) -> Result<KinesisSubscriber, KinesisError> {
        let mut source = KinesisStream::new(name.to_owned());
        source.create_if_missing = self.create_streams;
        self.open(source).await
    }
}

impl SubscriptionSource<ConnectedKinesisBroker> for KinesisStream {
    type Subscriber = KinesisSubscriber;
    type Copies = AddressedCopies;

    fn name(&self) -> &str {
        &self.name
    }

    /// The stream, and its shard count where the subscription creates it (`x-kinesis`).
    #[cfg(feature = "asyncapi")]
    fn channel_bindings(&self) -> ruststream::asyncapi::Bindings {
        crate::describe::stream_channel(self)
    }

    /// Where a new application starts, how the shards are read (polling, or enhanced fan-out
    /// through a named consumer) and the unsettled window (`x-kinesis`).
    #[cfg(feature = "asyncapi")]
    fn operation_bindings(&self) -> ruststream::asyncapi::Bindings {
        crate::describe::stream_operation(self)
    }

    async fn subscribe(
        self,
        connected: &ConnectedKinesisBroker,
    ) -> Result<KinesisSubscriber, KinesisError> {
        connected.open(self).await
    }
}

/// Lets the manual mount take the descriptor: `subscriber(KinesisStream::new("orders"), Pick)`.
impl ruststream::runtime::IntoSource for KinesisStream {
    type Source = Self;

    fn into_source(self) -> Self {
        self
    }
}

impl RedeliveryAddressed<ConnectedKinesisBroker> for KinesisStream {
    async fn redelivery_address(
        &self,
        _connected: &ConnectedKinesisBroker,
    ) -> Result<RedeliveryAddress, KinesisError> {
        Ok(RedeliveryAddress::new(self.name.to_string()))
    }
}

#[cfg(feature = "testing")]
impl ruststream::testing::TestableBroker for ConnectedKinesisBroker {
    fn install_coordinator(&self, coordinator: ruststream::testing::Coordinator) {
        // Each connection counts on its own harness, so two `TestApp`s on clones of one broker
        // each count their own work.
        if let Kinesis::InProcess(_, harness) = self.instance.kinesis() {
            let _ = harness.set(coordinator);
        }
    }

    fn inject(&self, message: ruststream::OutgoingMessage<'_>) {
        // A test's input goes to a stream the service reads; a broker told to create missing
        // streams creates it here as the subscription would have. Kinesis refuses a record for
        // a stream it does not have; so does the test stream, with a warning.
        if let Kinesis::InProcess(kinesis, _) = self.instance.kinesis()
            && let Err(err) = kinesis.inject(message, self.create_streams)
        {
            tracing::warn!(error = %err, "in-process kinesis refused an injected record");
        }
    }

    fn published(&self, name: &str) -> Vec<ruststream::RawMessage> {
        match self.instance.kinesis() {
            Kinesis::InProcess(kinesis, _) => kinesis.published(name),
            Kinesis::Sdk(_) => Vec::new(),
        }
    }

    fn backlog(&self) -> ruststream::testing::Backlog {
        // A subscription opens at the tip unless a checkpoint or `start_at` says otherwise (an
        // enhanced fan-out one a second before it opened, as live): what was published before
        // it is missed.
        ruststream::testing::Backlog::Missed
    }
}

impl ruststream::PublishPolicy<ConnectedKinesisBroker> for crate::KinesisPublish {
    type Live = crate::KinesisPublisher;

    /// How each record's partition key is chosen, and whether records go out as KPL aggregates
    /// (`x-kinesis`).
    #[cfg(feature = "asyncapi")]
    fn message_bindings(&self, _channel: &str) -> ruststream::asyncapi::Bindings {
        crate::describe::published_message(self)
    }

    async fn pair(
        self,
        connected: &ConnectedKinesisBroker,
    ) -> Result<crate::KinesisPublisher, ruststream::PairError> {
        let instance = &connected.instance;
        Ok(match instance.kinesis() {
            Kinesis::Sdk(client) => self.live(
                client,
                instance.runtime(),
                instance.closed(),
                &connected.record_limits,
                instance.meters(),
            ),
            #[cfg(feature = "testing")]
            Kinesis::InProcess(kinesis, _) => {
                self.in_process(kinesis, instance.closed(), &connected.record_limits)
            }
        })
    }
}

impl ruststream::DefaultPublish for ConnectedKinesisBroker {
    type Policy = crate::KinesisPublish;
}

#[cfg(feature = "testing")]
ruststream::register_testable_broker!(crate::KinesisBroker);

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::doubles::five_calls::FiveCalls;

    fn poll_off(listing: Duration) -> LeaseTimings {
        LeaseTimings::default()
            .with_handover_poll_interval(Duration::ZERO)
            .with_listing_interval(listing)
    }

    #[tokio::test]
    async fn balancing_with_the_poll_off_refuses_a_listing_longer_than_the_lease() {
        let broker = KinesisBroker::new()
            .region("us-east-1")
            .balance_shards(true)
            .lease_timings(poll_off(Duration::from_secs(11)));
        let Err(KinesisError::Config { message }) = broker.connect().await else {
            panic!("a listing past the lease with the poll off is refused");
        };
        assert!(
            message.contains("with_handover_poll_interval") && message.contains("11s"),
            "{message}"
        );
        // A listing within the lease, the poll on, or no balancing: connected.
        for fits in [
            KinesisBroker::new()
                .balance_shards(true)
                .lease_timings(poll_off(Duration::from_secs(10))),
            KinesisBroker::new().balance_shards(true).lease_timings(
                LeaseTimings::default().with_listing_interval(Duration::from_secs(30)),
            ),
            KinesisBroker::new().lease_timings(poll_off(Duration::from_secs(30))),
        ] {
            let fits = fits.region("us-east-1").test_credentials();
            assert!(fits.timings_fit_balancing().is_ok(), "{fits:?}");
        }
    }

    #[tokio::test]
    async fn leases_kept_alive_by_beat_balance_and_are_refused_on_a_store_without_beats() {
        let by_beat = || {
            KinesisBroker::new()
                .region("us-east-1")
                .test_credentials()
                .keep_leases_alive_by_beat(true)
        };
        // Balancing by beat: the holders hear of handoffs from the notice's marks.
        by_beat()
            .balance_shards(true)
            .connect()
            .await
            .expect("balancing with leases kept alive by beat connects");
        let rows_only = by_beat().lease_store(Arc::new(FiveCalls(MemoryLeaseStore::new())));
        let Err(KinesisError::Config { message }) = rows_only.connect().await else {
            panic!("a store that cannot take a shard over is refused");
        };
        assert!(
            message.contains("keeps_leases_by_beat") && message.contains("take_over"),
            "{message}"
        );
        // The in-memory store can, and so can the same store renewing per row.
        assert!(by_beat().beat_fits().is_ok());
        let per_row =
            KinesisBroker::new().lease_store(Arc::new(FiveCalls(MemoryLeaseStore::new())));
        assert!(per_row.beat_fits().is_ok());
    }
}

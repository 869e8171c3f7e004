//! The reader's behaviour at the SDK boundary: a whole broker on the fake stream, its
//! subscription read directly so each test settles deliveries itself.

mod ends;
mod faults;
mod layout;
mod lease;
mod pace;
mod retry;
mod room;
mod seek;
mod takes;
mod twins;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use ruststream::{Broker, Subscriber, SubscriptionSource};
use serde_json::Value;

use crate::doubles::fake_kinesis::{Reply, Seen};
use crate::doubles::fake_stream::{self, FakeStreamState};
use crate::{
    ConnectedKinesisBroker, KinesisBroker, KinesisMessage, KinesisStream, KinesisSubscriber,
    LeaseKey, LeaseStore, LeaseTimings, MemoryLeaseStore,
};

/// How long a test waits for something that should happen at once: a generous bound.
pub(super) const PATIENCE: Duration = Duration::from_secs(20);

/// Short leases, so the tests see renewals and expiries in seconds.
pub(super) fn timings() -> LeaseTimings {
    LeaseTimings::new(Duration::from_secs(3), Duration::from_secs(1))
        .unwrap()
        .with_listing_interval(Duration::from_secs(1))
}

/// A broker on the fake stream, subscribed to it.
pub(super) struct Rig {
    pub(super) state: Arc<Mutex<FakeStreamState>>,
    pub(super) seen: Seen,
    pub(super) store: Arc<dyn LeaseStore>,
    pub(super) connected: ConnectedKinesisBroker,
    pub(super) sub: KinesisSubscriber,
}

/// The settings of a rig.
pub(super) struct RigSettings {
    pub(super) shards: usize,
    pub(super) records: usize,
    pub(super) closed: bool,
    pub(super) stream: KinesisStream,
    pub(super) store: Arc<dyn LeaseStore>,
    pub(super) timings: LeaseTimings,
    /// Whether each shard's row is seeded with the trim horizon as its recorded start (else the
    /// shards start at the tip, as a new application's do).
    pub(super) seeded: bool,
    /// Shard 1 is a child of shard 0 (a split), with these records.
    pub(super) child_records: Option<usize>,
}

impl Default for RigSettings {
    fn default() -> Self {
        Self {
            shards: 1,
            records: 0,
            closed: false,
            stream: KinesisStream::new("orders").batch_size(100),
            store: Arc::new(MemoryLeaseStore::new()),
            timings: timings(),
            seeded: true,
            child_records: None,
        }
    }
}

impl RigSettings {
    /// Shard 0 closed with two records, shard 1 its child with one, and no row: a new
    /// application starting at `initial`.
    pub(super) fn parent_and_child(initial: crate::KinesisPosition) -> Self {
        Self {
            shards: 2,
            records: 2,
            closed: true,
            child_records: Some(1),
            seeded: false,
            stream: KinesisStream::new("orders")
                .batch_size(100)
                .initial_position(initial),
            ..Self::default()
        }
    }
}

impl Rig {
    /// A rig on one open shard holding `records` records, answered by the fake stream alone.
    pub(super) async fn with_records(records: usize) -> Self {
        Self::start(
            RigSettings {
                records,
                ..RigSettings::default()
            },
            |_, _, _| None,
        )
        .await
    }

    /// A rig on one open shard holding `records` records, its lease store recording every call.
    pub(super) async fn recorded(records: usize) -> (Self, Arc<Recording>) {
        let store = Arc::new(Recording::default());
        let rig = Self::start(
            RigSettings {
                records,
                store: store.clone(),
                ..RigSettings::default()
            },
            |_, _, _| None,
        )
        .await;
        (rig, store)
    }

    /// A rig whose requests meet `hook` first.
    pub(super) async fn start(
        settings: RigSettings,
        hook: impl Fn(usize, &str, &Value) -> Option<Reply> + Send + Sync + 'static,
    ) -> Self {
        let state = fake_stream::stream(settings.shards);
        {
            let mut state = state.lock().unwrap();
            for n in 0..settings.records {
                state.append(0, format!("{n}").as_bytes());
            }
            state.shards[0].closed = settings.closed;
            if let Some(records) = settings.child_records {
                state.shards[1].parents = vec![state.shards[0].id.clone()];
                for n in 0..records {
                    state.append(1, format!("child {n}").as_bytes());
                }
            }
        }
        // Every shard starts at its oldest record, so the records appended before are read: a
        // row whose recorded start is the trim horizon, as a first owner leaves it.
        for index in (0..settings.shards).filter(|_| settings.seeded) {
            let key = LeaseKey::new("orders", format!("shardId-{index:012}"));
            settings
                .store
                .acquire_from(&key, "seed", Duration::from_secs(1), "TRIM_HORIZON")
                .await
                .expect("the seed takes the row");
            settings
                .store
                .release(&key, "seed")
                .await
                .expect("the seed releases the row");
        }
        let (config, seen) = fake_stream::config(&state, hook);
        let connected = KinesisBroker::from_config(config)
            .lease_store(Arc::clone(&settings.store))
            .owner_id("rig")
            .lease_timings(settings.timings)
            .connect()
            .await
            .expect("the broker connects");
        let sub = settings
            .stream
            .subscribe(&connected)
            .await
            .expect("the subscription opens on the fake stream");
        Self {
            state,
            seen,
            store: settings.store,
            connected,
            sub,
        }
    }
}

/// Drops the subscription (its readers write their final checkpoints and release) and shuts the
/// broker down.
pub(super) async fn stop(sub: KinesisSubscriber, connected: ConnectedKinesisBroker) {
    drop(sub);
    ruststream::ConnectedBroker::shutdown(connected)
        .await
        .expect("shutdown");
}

/// The next delivery, within [`PATIENCE`].
pub(super) async fn next(sub: &mut KinesisSubscriber) -> KinesisMessage {
    let mut stream = std::pin::pin!(sub.stream());
    tokio::time::timeout(PATIENCE, stream.next())
        .await
        .expect("a delivery within the patience")
        .expect("the subscription is open")
        .expect("a delivery, not an error")
}

/// The next delivery within `wait`, skipping reported errors; `None` when there is none.
pub(super) async fn next_within(
    sub: &mut KinesisSubscriber,
    wait: Duration,
) -> Option<KinesisMessage> {
    let mut stream = std::pin::pin!(sub.stream());
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        match tokio::time::timeout_at(deadline, stream.next()).await {
            Ok(Some(Ok(message))) => return Some(message),
            Ok(Some(Err(_))) => {}
            Ok(None) | Err(_) => return None,
        }
    }
}

/// Waits until `check` holds, within [`PATIENCE`]; panics with `what` otherwise.
pub(super) async fn eventually<F: std::future::Future<Output = bool>>(
    what: &str,
    mut check: impl FnMut() -> F,
) {
    let deadline = Instant::now() + PATIENCE;
    while !check().await {
        assert!(Instant::now() < deadline, "never happened: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The payload of a delivery as text.
pub(super) fn text(message: &KinesisMessage) -> String {
    String::from_utf8_lossy(&message.record.payload).into_owned()
}

pub(super) use crate::doubles::recording_store::Recording;

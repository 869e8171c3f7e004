//! Instances of a subscription for the live lease tests: each reads a stream with its own
//! broker on a shared lease store, acknowledges every delivery and reports it, and stops
//! gracefully on request.

use std::collections::{HashMap, HashSet};
use std::pin::pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use ruststream::{
    Broker, ConnectedBroker, IncomingMessage, OutgoingMessage, Publisher, Subscriber,
    SubscriptionSource,
};
use ruststream_kinesis::{
    DynamoLeaseStore, KinesisBroker, KinesisOptions, KinesisStream, LeaseStore, LeaseTimings,
};
use tokio::sync::mpsc;

/// Short timings so the suite runs in seconds: a 3 s lease renewed every second, listing every
/// second. The defaults are measured by the benchmarks.
pub fn timings() -> LeaseTimings {
    LeaseTimings::new(Duration::from_secs(3), Duration::from_secs(1))
        .unwrap()
        .with_listing_interval(Duration::from_secs(1))
}

pub fn stream_of(name: &str, shards: u32) -> KinesisStream {
    KinesisStream::new(name.to_owned())
        .create_if_missing(shards)
        .poll_interval(Duration::from_millis(200))
}

/// What an instance handled.
#[derive(Debug, Clone)]
pub struct Handled {
    pub instance: String,
    pub shard: String,
    pub payload: String,
    pub at: Instant,
}

/// One instance reading `stream`, acknowledging every delivery and reporting it.
pub struct Instance {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl Instance {
    pub async fn start(
        url: &str,
        store: Arc<dyn LeaseStore>,
        owner: &str,
        stream: &str,
        shards: u32,
        seen: mpsc::UnboundedSender<Handled>,
        errors: Option<mpsc::UnboundedSender<String>>,
    ) -> Self {
        Self::start_timed(url, store, owner, (stream, shards), seen, errors, timings()).await
    }

    pub async fn start_timed(
        url: &str,
        store: Arc<dyn LeaseStore>,
        owner: &str,
        (stream, shards): (&str, u32),
        seen: mpsc::UnboundedSender<Handled>,
        errors: Option<mpsc::UnboundedSender<String>>,
        timings: LeaseTimings,
    ) -> Self {
        let broker = super::broker_with(url, store)
            .owner_id(owner)
            .lease_timings(timings);
        Self::start_with(broker, owner, (stream, shards), seen, errors).await
    }

    /// An instance of `broker` (its owner id `owner`) reading `stream`.
    pub async fn start_with(
        broker: KinesisBroker,
        owner: &str,
        (stream, shards): (&str, u32),
        seen: mpsc::UnboundedSender<Handled>,
        errors: Option<mpsc::UnboundedSender<String>>,
    ) -> Self {
        Self::reading(broker, owner, stream_of(stream, shards), seen, errors).await
    }

    /// An instance of `broker` (its owner id `owner`) subscribed to `source`.
    pub async fn reading(
        broker: KinesisBroker,
        owner: &str,
        source: KinesisStream,
        seen: mpsc::UnboundedSender<Handled>,
        errors: Option<mpsc::UnboundedSender<String>>,
    ) -> Self {
        let connected = broker.connect().await.unwrap();
        let mut subscriber = source.subscribe(&connected).await.unwrap();
        let (stop, mut stopped) = tokio::sync::oneshot::channel();
        let instance = owner.to_owned();
        let task = tokio::spawn(async move {
            {
                let mut deliveries = pin!(subscriber.stream());
                loop {
                    tokio::select! {
                        _ = &mut stopped => break,
                        item = deliveries.next() => match item {
                            Some(Ok(msg)) => {
                                let _ = seen.send(Handled {
                                    instance: instance.clone(),
                                    shard: msg.shard_id().to_owned(),
                                    payload: String::from_utf8_lossy(msg.payload()).into_owned(),
                                    at: Instant::now(),
                                });
                                msg.ack().await.unwrap();
                            }
                            Some(Err(err)) => match &errors {
                                Some(errors) => {
                                    let _ = errors.send(err.to_string());
                                }
                                None => eprintln!("{instance}: subscription reported: {err}"),
                            },
                            None => break,
                        }
                    }
                }
            }
            drop(subscriber);
            connected.shutdown().await.unwrap();
        });
        Self {
            stop: Some(stop),
            task,
        }
    }

    /// `pod-a`, then `pod-b`, on one store: the first lists first and takes every free shard.
    pub async fn pair(
        url: &str,
        store: &Arc<dyn LeaseStore>,
        stream: &str,
        shards: u32,
        seen: &mpsc::UnboundedSender<Handled>,
    ) -> (Self, Self) {
        let a = Self::start(
            url,
            Arc::clone(store),
            "pod-a",
            stream,
            shards,
            seen.clone(),
            None,
        )
        .await;
        let b = Self::start(
            url,
            Arc::clone(store),
            "pod-b",
            stream,
            shards,
            seen.clone(),
            None,
        )
        .await;
        (a, b)
    }

    /// A release: final checkpoints and releases are written before this returns.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.task.await.unwrap();
    }
}

pub async fn table(url: &str) -> (aws_config::SdkConfig, DynamoLeaseStore) {
    let config = super::sdk_config(url);
    let store = DynamoLeaseStore::new(&config, super::unique("leases"));
    store.create_table().await.unwrap();
    (config, store)
}

pub async fn publish_all(url: &str, stream: &str, bodies: impl IntoIterator<Item = String>) {
    let connected = super::broker(url).connect().await.unwrap();
    let publisher = connected.publisher().await.unwrap();
    for (i, body) in bodies.into_iter().enumerate() {
        let key = KinesisOptions::default().with_partition_key(format!("key-{}", i % 16));
        publisher
            .publish(OutgoingMessage::new(stream, body.as_bytes()), Some(&key))
            .await
            .unwrap();
    }
    connected.shutdown().await.unwrap();
}

/// Receives until `done` says so or `within` passes.
pub async fn collect_until(
    rx: &mut mpsc::UnboundedReceiver<Handled>,
    into: &mut Vec<Handled>,
    within: Duration,
    done: impl Fn(&[Handled]) -> bool,
) {
    let deadline = tokio::time::Instant::now() + within;
    while !done(into) {
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Some(handled)) => into.push(handled),
            _ => break,
        }
    }
}

pub fn payloads(handled: &[Handled]) -> HashSet<String> {
    handled.iter().map(|h| h.payload.clone()).collect()
}

/// Publishes `count` records named `<prefix><n>` to `stream` and waits (a minute at most) until
/// the instances reporting to `rx` handled every one of them; what they handled, each record
/// there at least once and nothing else.
pub async fn publish_and_handle(
    url: &str,
    stream: &str,
    (prefix, count): (&str, usize),
    rx: &mut mpsc::UnboundedReceiver<Handled>,
) -> Vec<Handled> {
    let bodies: Vec<String> = (0..count).map(|i| format!("{prefix}{i}")).collect();
    publish_all(url, stream, bodies.clone()).await;
    let mut handled = Vec::new();
    collect_until(rx, &mut handled, Duration::from_secs(60), |h| {
        payloads(h).len() == bodies.len()
    })
    .await;
    assert_eq!(payloads(&handled), bodies.into_iter().collect());
    handled
}

pub async fn holders(store: &DynamoLeaseStore, stream: &str) -> HashMap<String, Option<String>> {
    store
        .rows()
        .await
        .unwrap()
        .into_iter()
        .filter(|(key, _)| key.stream() == stream)
        .map(|(key, row)| (key.shard().to_owned(), row.owner))
        .collect()
}

/// How many shards of `stream` each instance holds, by owner id (a run holds its rows as
/// `<owner id>#<run>` when its leases are kept alive by beat).
pub async fn shares(store: &DynamoLeaseStore, stream: &str) -> HashMap<String, usize> {
    let mut shares = HashMap::new();
    for owner in holders(store, stream).await.into_values().flatten() {
        let id = owner.split_once('#').map_or(owner.as_str(), |(id, _)| id);
        *shares.entry(id.to_owned()).or_default() += 1;
    }
    shares
}

/// Waits until each owner id holds its count of `want`; how long it took.
pub async fn until_shares(
    store: &DynamoLeaseStore,
    stream: &str,
    want: &[(&str, usize)],
    within: Duration,
) -> Duration {
    let started = Instant::now();
    let want: HashMap<String, usize> = want
        .iter()
        .map(|(owner, count)| ((*owner).to_owned(), *count))
        .collect();
    loop {
        let now = shares(store, stream).await;
        if now == want {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < within,
            "the shares of {stream} are {now:?} after {within:?}, not {want:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

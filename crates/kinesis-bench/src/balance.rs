//! Balancing with the default timings: an 8-shard stream under a steady producer, instances with
//! `balance_shards(true)` joining one at a time up to four, then leaving (each releasing its
//! leases) down to two;
//! after each change, the seconds until every instance holds its even share (by the lease table's
//! rows), and over the whole run the records handled twice (a handoff in which every
//! delivery settled redelivers nothing) and the records never handled.

use std::collections::HashMap;
use std::pin::pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use futures::StreamExt;
use ruststream::{Broker, ConnectedBroker, IncomingMessage, Subscriber, SubscriptionSource};
use ruststream_kinesis::{
    DynamoLeaseStore, KinesisPosition, KinesisStream, LeaseStore, LeaseTimings,
};
use tokio_util::sync::CancellationToken;

use crate::report::Figure;
use crate::service::BenchRecord;
use crate::stack::{self, Stack, unique};
use crate::{Error, Options};

const SHARDS: u32 = 8;
/// Records per second the producer writes.
const RATE: u64 = 40;
/// The most instances at once.
const MOST: usize = 4;
/// How long a change may take to converge before the figure fails.
const LIMIT: Duration = Duration::from_secs(60);

/// How often each record id was handled, by any instance, and which instance handled each
/// shard's last record.
#[derive(Debug, Default)]
struct Seen {
    counts: HashMap<u64, u32>,
    last_reader: HashMap<String, String>,
}

type Handled = Arc<Mutex<Seen>>;

/// One balancing instance reading the stream until stopped.
struct Running {
    stop: CancellationToken,
    task: tokio::task::JoinHandle<Result<(), Error>>,
}

async fn start(
    stack: &Stack,
    store: &Arc<dyn LeaseStore>,
    stream: &str,
    owner: &str,
    handled: &Handled,
) -> Result<Running, Error> {
    let broker = stack
        .broker(Arc::clone(store), owner)
        .lease_timings(LeaseTimings::default())
        .balance_shards(true);
    let connected = broker.connect().await?;
    let mut subscriber = KinesisStream::new(stream.to_owned())
        .initial_position(KinesisPosition::TrimHorizon)
        .subscribe(&connected)
        .await?;
    let stop = CancellationToken::new();
    let (stopping, handled) = (stop.clone(), Arc::clone(handled));
    let owner = owner.to_owned();
    let task = tokio::spawn(async move {
        {
            let mut deliveries = pin!(subscriber.stream());
            loop {
                tokio::select! {
                    () = stopping.cancelled() => break,
                    item = deliveries.next() => match item {
                        Some(Ok(msg)) => {
                            if let Ok(record) = serde_json::from_slice::<BenchRecord>(msg.payload()) {
                                let mut seen = handled.lock().unwrap_or_else(PoisonError::into_inner);
                                *seen.counts.entry(record.id).or_default() += 1;
                                seen.last_reader.insert(msg.shard_id().to_owned(), owner.clone());
                            }
                            msg.ack().await?;
                        }
                        Some(Err(err)) => eprintln!("balance: subscription reported: {err}"),
                        None => break,
                    }
                }
            }
        }
        drop(subscriber);
        connected.shutdown().await?;
        Ok(())
    });
    Ok(Running { stop, task })
}

impl Running {
    async fn stop(self) -> Result<(), Error> {
        self.stop.cancel();
        self.task.await?
    }
}

/// Waits until `owners` each hold the floor or the ceiling of the shards over them, every shard
/// is held, and each holder handled its shards' latest records (a row handed to an instance is
/// its once it reads it); the time it took.
async fn converged(
    table: &DynamoLeaseStore,
    owners: &[String],
    handled: &Handled,
) -> Result<Duration, Error> {
    let started = Instant::now();
    let floor = SHARDS as usize / owners.len();
    loop {
        let mut held: HashMap<String, usize> = HashMap::new();
        let mut read_by_holders = true;
        for (key, row) in table.rows().await? {
            if row.is_expired_at(ruststream_kinesis::epoch_millis()) {
                continue;
            }
            if let Some(owner) = row.owner {
                let seen = handled.lock().unwrap_or_else(PoisonError::into_inner);
                read_by_holders &= seen.last_reader.get(key.shard()) == Some(&owner);
                *held.entry(owner).or_default() += 1;
            }
        }
        let even = read_by_holders
            && held.values().sum::<usize>() == SHARDS as usize
            && owners.iter().all(|owner| {
                let count = held.get(owner).copied().unwrap_or(0);
                count == floor || count == floor + 1
            })
            && held.keys().all(|owner| owners.contains(owner));
        if even {
            return Ok(started.elapsed());
        }
        if started.elapsed() > LIMIT {
            return Err(format!("no even share after {LIMIT:?}: {held:?} over {owners:?}").into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The balance figure.
pub async fn run(stack: &Stack, opts: &Options) -> Result<Vec<Figure>, Error> {
    let _ = opts;
    let stream = unique("bench-balance");
    stack.create_stream(&stream, SHARDS).await?;
    let table = stack.table("bench-balance").await?;
    let store: Arc<dyn LeaseStore> = Arc::new(table.clone());
    let handled: Handled = Arc::default();
    let stop = CancellationToken::new();
    let producer = tokio::spawn(stack::produce(
        stack.clone(),
        stream.clone(),
        RATE,
        stop.clone(),
    ));
    let result = async {
        let mut running: Vec<(String, Running)> = Vec::new();
        let mut joins = Vec::new();
        for n in 0..MOST {
            let owner = format!("bench-{}", (b'a' + n as u8) as char);
            let instance = start(stack, &store, &stream, &owner, &handled).await?;
            running.push((owner, instance));
            let owners: Vec<String> = running.iter().map(|(owner, _)| owner.clone()).collect();
            let took = converged(&table, &owners, &handled).await?;
            eprintln!(
                "balance: {} instances even {:.1} s after the join",
                owners.len(),
                took.as_secs_f64()
            );
            if n > 0 {
                joins.push(took.as_secs_f64());
            }
        }
        let mut leaves = Vec::new();
        while running.len() > 2 {
            let (owner, instance) = running.pop().expect("more than two");
            let began = Instant::now();
            instance.stop().await?;
            let owners: Vec<String> = running.iter().map(|(owner, _)| owner.clone()).collect();
            let took = converged(&table, &owners, &handled).await? + began.elapsed();
            eprintln!(
                "balance: {owner} left; {} instances even {:.1} s after it began to stop",
                owners.len(),
                took.as_secs_f64()
            );
            leaves.push(took.as_secs_f64());
        }
        // Let the last records through before counting.
        tokio::time::sleep(Duration::from_secs(3)).await;
        stop.cancel();
        let written = producer.await??;
        tokio::time::sleep(Duration::from_secs(5)).await;
        for (_, instance) in running {
            instance.stop().await?;
        }
        Ok::<_, Error>((joins, leaves, written))
    }
    .await;
    stop.cancel();
    stack.delete_stream(&stream).await;
    stack.drop_table(table.table()).await;
    let (joins, leaves, written) = result?;
    let counts = handled
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .counts
        .clone();
    let twice = counts.values().filter(|&&count| count > 1).count();
    let lost = (0..written).filter(|id| !counts.contains_key(id)).count();
    let listing = LeaseTimings::default().listing_interval().as_secs_f64();
    let worst = joins.iter().chain(&leaves).copied().fold(0.0, f64::max);
    let mut figure = Figure::new("balance", "balance");
    figure.measured = format!(
        "joins: {} s; leaves: {} s; {twice} records redelivered, {lost} lost of {written}",
        list(&joins),
        list(&leaves)
    );
    figure.target = format!(
        "≤ {:.0} s (2 listing intervals); 0 redelivered; 0 lost",
        listing * 2.0
    );
    figure.pass = Some(worst <= listing * 2.0 && twice == 0 && lost == 0);
    figure.detail(format!(
        "a new {SHARDS}-shard stream and a new DynamoDB table, default `LeaseTimings` (10 s lease, \
         3 s renewal, 10 s listing, 1 s handover poll, 5 s drain), `balance_shards(true)`; a \
         producer writes {RATE} records/s throughout; instances join one at a time up to {MOST} \
         (each join timed from its start until every instance holds 8 / n shards, rounded down \
         or up, by the table's rows, and has handled each of its shards' latest records), then leave one at a time, releasing their leases, down to two (timed from \
         the start of the stop); handlers acknowledge at once, so every handoff drains"
    ));
    Ok(vec![figure])
}

fn list(values: &[f64]) -> String {
    values
        .iter()
        .map(|value| format!("{value:.1}"))
        .collect::<Vec<_>>()
        .join(", ")
}

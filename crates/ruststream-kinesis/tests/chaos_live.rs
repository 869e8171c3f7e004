//! The live chaos test: three instances as child processes on one DynamoDB lease table and a
//! 4-shard stream under a steady producer, for about two minutes (`CHAOS_SECONDS` for longer):
//! random SIGKILL and restart, SIGSTOP for longer than a lease then SIGCONT, SIGTERM (a
//! release) and restart, a split, and lease-table faults through the router's injector. Every
//! handled record is logged (instance, shard, sequence number, time). The checker then asserts:
//!
//! - no record written is lost;
//! - a record is handled twice only after a crash, a freeze or a store fault of the instance
//!   that handled it first (the duplicates are counted and printed);
//! - no two instances handle records of one shard in overlapping tenures;
//! - after an instance is killed or frozen, every shard it was reading is read again by
//!   another instance within lease + skew tolerance + listing interval (plus slack for calls).
//!
//! The same chaos runs again with every lease kept alive by its instance's beat
//! (`KinesisBroker::keep_leases_alive_by_beat`), under the same checks, and by beat again with
//! every store keeping the notice's head apart (`DynamoLeaseStore::keep_notice_head_apart`). It
//! runs once more with the subscription exactly once
//! (`KinesisStream::exactly_once()`): each handling stages `ADD applied :one` on the record's
//! item of a counts table, and the checker also asserts that every record written is counted
//! exactly once, while deliveries may repeat. A last run does the same with a batch handler,
//! whose batches gather several shards' records and commit each in one joint transaction; its
//! body cannot name each record's shard, so the checker finds the records in the stream after
//! the run.
//!
//! A failing run prints its seed (`CHAOS_SEED` replays the same chaos) and where its log is.
#![cfg(feature = "dynamodb-lease")]

mod common;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use ruststream::prelude::*;
use ruststream::{Broker, ConnectedBroker, OutgoingMessage, Publisher};
use ruststream_kinesis::{
    DynamoLeaseStore, DynamoWrites, KinesisBatchContext, KinesisBroker, KinesisContext,
    KinesisOptions, KinesisStream, LeaseTimings, SequenceNumber, ShardId,
};
use serde_json::json;

use common::injector::Injector;
use common::now_ms;

/// The lease the instances run with, and how often they list: short, so the run sees many
/// handovers. A takeover is due within lease + `SKEW_TOLERANCE` + listing, plus the calls.
const LEASE: Duration = Duration::from_secs(3);
const RENEW: Duration = Duration::from_secs(1);
const LISTING: Duration = Duration::from_secs(1);
/// Slack on the takeover bound for the calls and a loaded 2-core machine.
const TAKEOVER_SLACK: Duration = Duration::from_secs(3);
const INSTANCES: usize = 3;
const SHARDS: u32 = 4;
/// Records per second the producer writes.
const RATE: u64 = 20;

fn timings() -> LeaseTimings {
    LeaseTimings::new(LEASE, RENEW)
        .unwrap()
        .with_listing_interval(LISTING)
}

// ---------------------------------------------------------------------------------------------
// The instance, in a child process

/// How many tables the counts are spread over. moto copies every table a transaction writes to
/// before applying it (its rollback), so one table of thousands of counts makes each commit
/// slower as the run goes, until the instances' lease calls time out.
const COUNT_TABLES: u64 = 16;

/// The table of the tables named `prefix` that counts `record` (`r<n>`).
fn counts_table_of(prefix: &str, record: &str) -> String {
    let n: u64 = record.trim_start_matches('r').parse().unwrap_or(0);
    format!("{prefix}-{}", n % COUNT_TABLES)
}

/// Prints a line for every record it handles, then acknowledges it; exactly once, it first
/// stages the record's count into its table of the counts tables named `counts`.
struct Logger {
    counts: Option<String>,
}

impl Handle<String, (), (), KinesisContext> for Logger {
    async fn handle(
        &self,
        body: &String,
        _outs: &(),
        ctx: &mut Context<'_, KinesisContext>,
    ) -> Result<(), HandlerOutcome> {
        let shard = ctx.context(ShardId).to_owned();
        let sequence = ctx.context(SequenceNumber).to_owned();
        if let Some(counts) = &self.counts {
            ctx.context(DynamoWrites)
                .stage(common::counts::count(&counts_table_of(counts, body), body))
                .unwrap();
        }
        println!("H {shard} {sequence} {body} {}", now_ms());
        Ok(())
    }
}

/// Exactly once with batches: prints a line for every record of a batch (its shard and sequence
/// number unknown to a batch body: `-`), after staging each record's count.
struct BatchLogger {
    counts: String,
}

impl Handle<[String], (), (), KinesisBatchContext> for BatchLogger {
    async fn handle(
        &self,
        batch: &[String],
        _outs: &(),
        ctx: &mut Context<'_, KinesisBatchContext>,
    ) -> Result<(), Vec<HandlerOutcome>> {
        let writes = ctx.context(DynamoWrites);
        for body in batch {
            writes
                .stage(common::counts::count(
                    &counts_table_of(&self.counts, body),
                    body,
                ))
                .unwrap();
        }
        for body in batch {
            println!("H - - {body} {}", now_ms());
        }
        Ok(())
    }
}

/// How a chaos run's instances handle records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    AtLeastOnce,
    /// At least once, every instance keeping its leases alive by its beat
    /// (`KinesisBroker::keep_leases_alive_by_beat`).
    AtLeastOnceByBeat,
    /// At least once by beat, every instance's store keeping the notice's head apart
    /// (`DynamoLeaseStore::keep_notice_head_apart`): beats in a row of their own, and polls
    /// that read the head alone while the beats last read say who is alive.
    AtLeastOnceByBeatApart,
    ExactlyOnce,
    /// Exactly once, with a batch handler of at most 16 records.
    ExactlyOnceBatches,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Self::AtLeastOnce => "at-least-once",
            Self::AtLeastOnceByBeat => "at-least-once-by-beat",
            Self::AtLeastOnceByBeatApart => "at-least-once-by-beat-apart",
            Self::ExactlyOnce => "exactly-once",
            Self::ExactlyOnceBatches => "exactly-once-batches",
        }
    }
}

/// One instance of the chaos test, run by the parent in a child process; idle unless
/// `CHAOS_CHILD` is set.
#[test]
fn chaos_child() {
    let Ok(spec) = std::env::var("CHAOS_CHILD") else {
        return;
    };
    let parts: Vec<&str> = spec.split('|').collect();
    let [url, table, stream, owner, client, counts] = parts[..] else {
        panic!("bad CHAOS_CHILD {spec}")
    };
    // `-`: at least once; else the table each record is counted into, exactly once, by a
    // batch handler when it says `batch:` first.
    let (batches, counts) = match counts.strip_prefix("batch:") {
        Some(counts) => (true, Some(counts.to_owned())),
        None => (false, (counts != "-").then(|| counts.to_owned())),
    };
    // libtest has printed `test chaos_child ... ` without a newline: end that line, so the
    // first record's line stands on its own.
    println!();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(tracing_subscriber::EnvFilter::new(
            "info,ruststream_kinesis=debug",
        ))
        .init();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        // The client's app name lets the parent fault this instance's lease-table calls alone.
        let config = Injector::new(url, client).sdk_config();
        let mut store = DynamoLeaseStore::new(&config, table);
        if std::env::var("CHAOS_APART").as_deref() == Ok("1") {
            // With the polls read eventually consistent, as the guide's configuration at scale
            // (moto answers every read consistent: the simulation draws reads behind).
            store = store.keep_notice_head_apart().eventually_consistent_polls();
        }
        let store = Arc::new(store);
        let broker = KinesisBroker::from_config(config)
            .lease_store(store)
            .owner_id(owner)
            .lease_timings(timings())
            .keep_leases_alive_by_beat(std::env::var("CHAOS_BEAT").as_deref() == Ok("1"));
        let mut source =
            KinesisStream::new(stream.to_owned()).poll_interval(Duration::from_millis(200));
        if counts.is_some() {
            source = source.exactly_once();
        }
        let app = RustStream::new(AppInfo::new("chaos", "0.1.0")).with_broker(broker, move |b| {
            match counts {
                Some(counts) if batches => {
                    b.include(
                        subscriber(source, BatchLogger { counts })
                            .batch(std::num::NonZeroUsize::new(16).unwrap())
                            .build(),
                    );
                }
                counts => {
                    b.include(subscriber(source, Logger { counts }).build());
                }
            }
        });
        // Until SIGTERM: then the stop, which releases the leases.
        app.run().await.unwrap();
    });
}

// ---------------------------------------------------------------------------------------------
// The parent: instances, producer, chaos

/// One handled record, as an instance logged it.
#[derive(Debug, Clone)]
struct Handled {
    incarnation: String,
    shard: String,
    sequence: String,
    record: String,
    at_ms: u64,
}

/// What the chaos did to an incarnation, from when until when (a kill lasts an instant; a
/// freeze until the thaw; store faults until they are removed).
#[derive(Debug, Clone)]
struct Disruption {
    incarnation: String,
    kind: &'static str,
    at_ms: u64,
    until_ms: u64,
}

/// The run's shared log: what was handled and what happened.
#[derive(Default, Clone)]
struct Log {
    handled: Vec<Handled>,
    disruptions: Vec<Disruption>,
    lines: Vec<String>,
}

type SharedLog = Arc<Mutex<Log>>;

fn note(log: &SharedLog, line: String) {
    log.lock().unwrap().lines.push(line);
}

/// A running instance: its child process and who it is.
struct Instance {
    slot: usize,
    incarnation: String,
    client: String,
    child: Child,
}

struct Setup {
    url: String,
    table: String,
    stream: String,
    dir: std::path::PathBuf,
    /// Exactly once: the table each record is counted into.
    counts: Option<String>,
    mode: Mode,
}

fn spawn(
    setup: &Setup,
    slot: usize,
    generation: u32,
    reuse_owner: bool,
    log: &SharedLog,
) -> Instance {
    let incarnation = format!("pod-{slot}#{generation}");
    let owner = if reuse_owner {
        format!("pod-{slot}")
    } else {
        format!("pod-{slot}-{generation}")
    };
    let client = format!("chaos-{}-pod-{slot}-{generation}", setup.table);
    let stderr =
        std::fs::File::create(setup.dir.join(format!("pod-{slot}-{generation}.stderr"))).unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "chaos_child", "--nocapture", "--test-threads=1"])
        .env(
            "CHAOS_CHILD",
            format!(
                "{}|{}|{}|{owner}|{client}|{}",
                setup.url,
                setup.table,
                setup.stream,
                match (&setup.counts, setup.mode) {
                    (Some(counts), Mode::ExactlyOnceBatches) => format!("batch:{counts}"),
                    (Some(counts), _) => counts.clone(),
                    (None, _) => "-".to_owned(),
                }
            ),
        )
        .env("RUST_LOG", "info")
        .env(
            "CHAOS_BEAT",
            if matches!(
                setup.mode,
                Mode::AtLeastOnceByBeat | Mode::AtLeastOnceByBeatApart
            ) {
                "1"
            } else {
                "0"
            },
        )
        .env(
            "CHAOS_APART",
            if setup.mode == Mode::AtLeastOnceByBeatApart {
                "1"
            } else {
                "0"
            },
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::from(stderr))
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let reading = Arc::clone(log);
    let name = incarnation.clone();
    std::thread::spawn(move || {
        let log = reading;
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            // A record's line, wherever the harness's own output left it on the line.
            let line = line
                .find("H shardId")
                .or_else(|| line.find("H - - "))
                .map_or(line.as_str(), |at| &line[at..]);
            let fields: Vec<&str> = line.split_whitespace().collect();
            if let ["H", shard, sequence, record, at_ms] = fields[..] {
                let handled = Handled {
                    incarnation: name.clone(),
                    shard: shard.to_owned(),
                    sequence: sequence.to_owned(),
                    record: record.trim_matches('"').to_owned(),
                    at_ms: at_ms.parse().unwrap_or_default(),
                };
                let mut log = log.lock().unwrap();
                log.lines.push(format!(
                    "{} {name} handled {} shard {} sequence {}",
                    handled.at_ms, handled.record, handled.shard, handled.sequence
                ));
                log.handled.push(handled);
            }
        }
    });
    note(
        log,
        format!("{} started {incarnation} as {owner}", now_ms()),
    );
    Instance {
        slot,
        incarnation,
        client,
        child,
    }
}

fn signal(child: &Child, signal: &str) {
    let status = Command::new("kill")
        .args([&format!("-{signal}"), &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill -{signal} {}", child.id());
}

fn disrupted(log: &SharedLog, instance: &Instance, kind: &'static str) {
    let at_ms = now_ms();
    let mut log = log.lock().unwrap();
    log.lines
        .push(format!("{at_ms} {} {kind}", instance.incarnation));
    log.disruptions.push(Disruption {
        incarnation: instance.incarnation.clone(),
        kind,
        at_ms,
        until_ms: at_ms,
    });
}

/// The newest disruption is over.
fn disruption_over(log: &SharedLog) {
    if let Some(last) = log.lock().unwrap().disruptions.last_mut() {
        last.until_ms = now_ms();
    }
}

/// Writes `r<n>` records at a steady rate, each under a random key, until stopped; answers the
/// records written.
async fn produce(
    url: String,
    stream: String,
    stop: tokio::sync::watch::Receiver<bool>,
) -> Vec<String> {
    let producer = common::broker(&url).connect().await.unwrap();
    let publisher = producer.publisher().await.unwrap();
    let mut written = Vec::new();
    let mut tick = tokio::time::interval(Duration::from_millis(1000 / RATE));
    let mut n = 0u64;
    while !*stop.borrow() {
        tick.tick().await;
        let record = format!("r{n}");
        let body = serde_json::to_vec(&record).unwrap();
        let key =
            KinesisOptions::default().with_partition_key(format!("{:016x}", rand::random::<u64>()));
        // A write that fails is tried again under the same name: it counts once it is written.
        loop {
            match publisher
                .publish(
                    OutgoingMessage::new(stream.as_str(), body.as_slice()),
                    Some(&key),
                )
                .await
            {
                Ok(()) => break,
                Err(err) => {
                    eprintln!("producer: {err}");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        }
        written.push(record);
        n += 1;
    }
    producer.shutdown().await.unwrap();
    written
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_loses_nothing_and_never_overlaps_tenures() {
    chaos(Mode::AtLeastOnce).await;
}

/// The same chaos with every lease kept alive by its instance's beat: a frozen or killed
/// instance's shards are taken over once its beat lapsed, and a thawed one delivers nothing
/// until a new chain of beats began and it took its shards again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_with_leases_kept_alive_by_beat_loses_nothing_and_never_overlaps_tenures() {
    chaos(Mode::AtLeastOnceByBeat).await;
}

/// The same chaos by beat with the notice's head kept apart: the beats every take-over judges
/// are in a row of their own, and the polls between whole reads read the head alone; the
/// stores read their polls eventually consistent (`eventually_consistent_polls`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_by_beat_with_the_notice_head_apart_loses_nothing_and_never_overlaps_tenures() {
    chaos(Mode::AtLeastOnceByBeatApart).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_exactly_once_counts_each_record_once() {
    chaos(Mode::ExactlyOnce).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_exactly_once_batches_of_several_shards_count_each_record_once() {
    chaos(Mode::ExactlyOnceBatches).await;
}

/// One chaos run at a time: two would share the machine's two cores, and the takeover bound.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Runs the chaos (exactly once: with each record counted into a table through the
/// subscription's commits) and checks it.
async fn chaos(mode: Mode) {
    let exactly_once = matches!(mode, Mode::ExactlyOnce | Mode::ExactlyOnceBatches);
    let Some(url) = common::endpoint() else {
        return;
    };
    let _alone = ONE_AT_A_TIME.lock().await;
    let seed: u64 = std::env::var("CHAOS_SEED")
        .ok()
        .and_then(|seed| seed.parse().ok())
        .unwrap_or_else(rand::random);
    let seconds: u64 = std::env::var("CHAOS_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(120);
    let mut rng = StdRng::seed_from_u64(seed);
    let table = common::unique("chaos");
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("chaos-{}-{seed}", mode.name()));
    std::fs::create_dir_all(&dir).unwrap();
    let log_path = dir.join("run.log");
    println!(
        "chaos ({}): seed {seed}, {seconds} s, log {}",
        mode.name(),
        log_path.display()
    );

    let config = common::sdk_config(&url);
    DynamoLeaseStore::new(&config, &table)
        .create_table()
        .await
        .unwrap();
    let counts = if exactly_once {
        Some(counts_tables(&config, &format!("{table}-counts")).await)
    } else {
        None
    };
    let stream = table.clone();
    let raw = common::raw_kinesis(&url);
    common::create_stream(&raw, &stream, i32::try_from(SHARDS).unwrap()).await;
    let setup = Setup {
        url: url.clone(),
        table: table.clone(),
        stream: stream.clone(),
        dir: dir.clone(),
        counts: counts.clone(),
        mode,
    };
    let log: SharedLog = Arc::default();
    let mut generation = 0u32;
    let mut instances: Vec<Instance> = (0..INSTANCES)
        .map(|slot| spawn(&setup, slot, 0, true, &log))
        .collect();
    tokio::time::sleep(Duration::from_secs(3)).await;

    let (stop_producing, stopped) = tokio::sync::watch::channel(false);
    let producing = tokio::spawn(produce(url.clone(), stream.clone(), stopped));

    // The chaos: one disruption at a time, to one instance, so two stay healthy.
    let started = tokio::time::Instant::now();
    let until = started + Duration::from_secs(seconds);
    let mut split_done = false;
    while tokio::time::Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(rng.random_range(3_000..6_000))).await;
        if !split_done && started.elapsed() > Duration::from_secs(seconds * 2 / 5) {
            note(&log, format!("{} split the first open shard", now_ms()));
            common::split_first(&raw, &stream).await;
            split_done = true;
            continue;
        }
        // Mostly an instance that is reading: disrupting an idle one shows little.
        let victim = {
            let recent = now_ms().saturating_sub(2_000);
            let log = log.lock().unwrap();
            let busy: Vec<usize> = instances
                .iter()
                .enumerate()
                .filter(|(_, instance)| {
                    log.handled
                        .iter()
                        .rev()
                        .take_while(|h| h.at_ms >= recent)
                        .any(|h| h.incarnation == instance.incarnation)
                })
                .map(|(i, _)| i)
                .collect();
            if busy.is_empty() || rng.random_bool(0.2) {
                rng.random_range(0..instances.len())
            } else {
                busy[rng.random_range(0..busy.len())]
            }
        };
        match rng.random_range(0..5) {
            0 => {
                // SIGKILL, and a restart a moment later, under its owner id or a new one.
                disrupted(&log, &instances[victim], "killed");
                let mut old = instances.remove(victim);
                old.child.kill().unwrap();
                let _ = old.child.wait();
                tokio::time::sleep(Duration::from_millis(rng.random_range(500..3_000))).await;
                generation += 1;
                let reuse = rng.random_bool(0.5);
                instances.insert(victim, spawn(&setup, old.slot, generation, reuse, &log));
            }
            1 => {
                // Frozen for longer than a lease, then thawed.
                disrupted(&log, &instances[victim], "frozen");
                signal(&instances[victim].child, "STOP");
                tokio::time::sleep(LEASE + Duration::from_millis(rng.random_range(500..2_500)))
                    .await;
                signal(&instances[victim].child, "CONT");
                disruption_over(&log);
                note(
                    &log,
                    format!("{} {} thawed", now_ms(), instances[victim].incarnation),
                );
            }
            2 => {
                // A restart after a release: the runtime drains its handlers, writes its final
                // checkpoints and releases its leases.
                note(
                    &log,
                    format!(
                        "{} {} stopping gracefully",
                        now_ms(),
                        instances[victim].incarnation
                    ),
                );
                let mut old = instances.remove(victim);
                let stopping = now_ms();
                signal(&old.child, "TERM");
                let _ = old.child.wait();
                note(&log, format!("{} {} stopped", now_ms(), old.incarnation));
                if mode == Mode::ExactlyOnceBatches {
                    // A stopping shard commits no batch of several shards: one handled and not
                    // yet committed goes to the next owner, to be handled again (its effects
                    // still apply once). A documented repeat, so it explains one.
                    log.lock().unwrap().disruptions.push(Disruption {
                        incarnation: old.incarnation.clone(),
                        kind: "stopped",
                        at_ms: stopping,
                        until_ms: now_ms(),
                    });
                }
                generation += 1;
                let reuse = rng.random_bool(0.5);
                instances.insert(victim, spawn(&setup, old.slot, generation, reuse, &log));
            }
            3 => {
                // The instance's lease-table calls fail, hang or lose their answers for a while.
                disrupted(&log, &instances[victim], "store faults");
                let mut faults = Injector::new(&url, &instances[victim].client);
                let action = match rng.random_range(0..5) {
                    0 => json!({ "throttle": true }),
                    1 => json!({ "status": 500 }),
                    2 => json!({ "apply_then_status": 500 }),
                    3 => json!({ "latency_ms": 700 }),
                    _ => json!({ "blackhole": true }),
                };
                note(
                    &log,
                    format!(
                        "{} {} faults {action}",
                        now_ms(),
                        instances[victim].incarnation
                    ),
                );
                faults.add("dynamodb", "*", action, None);
                tokio::time::sleep(Duration::from_millis(rng.random_range(1_000..4_000))).await;
                drop(faults);
                disruption_over(&log);
                note(
                    &log,
                    format!(
                        "{} {} faults removed",
                        now_ms(),
                        instances[victim].incarnation
                    ),
                );
            }
            _ => {}
        }
    }

    // Quiet: every instance healthy, the producer on for a while, then everything read.
    tokio::time::sleep(Duration::from_secs(10)).await;
    let _ = stop_producing.send(true);
    let written = producing.await.unwrap();
    let handled_all = tokio::time::Instant::now() + Duration::from_secs(90);
    loop {
        let handled: HashSet<String> = log
            .lock()
            .unwrap()
            .handled
            .iter()
            .map(|h| h.record.clone())
            .collect();
        // Exactly once, until every record is also counted: a handling's commit follows it.
        let committed = match &counts {
            Some(counts) => counted(&config, counts).await.len() >= written.len(),
            None => true,
        };
        if (committed && written.iter().all(|record| handled.contains(record)))
            || tokio::time::Instant::now() > handled_all
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    for instance in &instances {
        signal(&instance.child, "TERM");
    }
    for instance in &mut instances {
        let _ = instance.child.wait();
    }
    tokio::time::sleep(Duration::from_millis(500)).await;

    let mut log = log.lock().unwrap().clone();
    if mode == Mode::ExactlyOnceBatches {
        // A batch body names no record's shard: the stream does.
        let places = places(&url, &stream).await;
        for handled in &mut log.handled {
            if let Some((shard, sequence, _)) = places.get(&handled.record) {
                handled.shard.clone_from(shard);
                handled.sequence.clone_from(sequence);
            }
        }
    }
    let mut file = std::fs::File::create(&log_path).unwrap();
    let mut lines = log.lines.clone();
    lines.sort();
    for line in &lines {
        writeln!(file, "{line}").unwrap();
    }
    let mut verdict = check(&written, &log);
    if mode == Mode::ExactlyOnceBatches {
        // The instances' logs say how many batches of several shards committed jointly.
        let joint = joint_commits(&dir);
        println!("chaos (exactly-once-batches): {joint} joint commits landed");
        if joint == 0 {
            verdict
                .failures
                .push("no batch of several shards committed jointly".to_owned());
        }
    }
    if let Some(counts) = &counts {
        let counted = counted(&config, counts).await;
        verdict.failures.extend(counted_once(&written, &counted));
    }
    if !verdict.lost.is_empty() {
        for line in locate(&url, &stream, &verdict.lost).await {
            verdict.failures.push(format!("  {line}"));
        }
    }
    println!(
        "chaos ({}): seed {seed}: {} records written, {} handlings, {} duplicates ({} explained), {} disruptions; \
         takeovers after a kill or freeze: worst {} ms; log {}",
        mode.name(),
        written.len(),
        log.handled.len(),
        verdict.duplicates,
        verdict.explained,
        log.disruptions.len(),
        verdict.worst_takeover_ms,
        log_path.display()
    );
    for failure in verdict.failures.iter().take(20) {
        println!("chaos failure: {failure}");
    }
    assert!(
        verdict.failures.is_empty(),
        "chaos seed {seed} (replay with CHAOS_SEED={seed}), log {}:\n{}",
        log_path.display(),
        verdict.failures.join("\n")
    );
}

/// How many joint commits (batches of several shards) landed, by the instances' logs in `dir`.
fn joint_commits(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(Result::ok)
        .filter(|entry| entry.path().extension().is_some_and(|ext| ext == "stderr"))
        .filter_map(|entry| std::fs::read_to_string(entry.path()).ok())
        .map(|text| text.matches("a joint commit landed").count())
        .sum()
}

/// The tables of counts named `prefix` ([`COUNT_TABLES`] of them): their prefix.
async fn counts_tables(config: &aws_config::SdkConfig, prefix: &str) -> String {
    let client = aws_sdk_dynamodb::Client::new(config);
    for n in 0..COUNT_TABLES {
        common::counts::create(&client, &format!("{prefix}-{n}")).await;
    }
    prefix.to_owned()
}

/// Every count in the tables named `counts`, by record.
async fn counted(config: &aws_config::SdkConfig, counts: &str) -> HashMap<String, u64> {
    let client = aws_sdk_dynamodb::Client::new(config);
    let mut counted = HashMap::new();
    for n in 0..COUNT_TABLES {
        counted.extend(common::counts::read(&client, &format!("{counts}-{n}")).await);
    }
    counted
}

/// Exactly once: every record written counted once, and nothing else counted.
fn counted_once(written: &[String], counted: &HashMap<String, u64>) -> Vec<String> {
    let mut failures = Vec::new();
    let wrong: Vec<String> = written
        .iter()
        .filter_map(|record| match counted.get(record) {
            Some(1) => None,
            other => Some(format!("{record}: {other:?}")),
        })
        .collect();
    if !wrong.is_empty() {
        failures.push(format!(
            "{} records not counted exactly once (record: count): {:?}",
            wrong.len(),
            &wrong[..wrong.len().min(20)]
        ));
    }
    let strays = counted.keys().filter(|id| !written.contains(id)).count();
    if strays > 0 {
        failures.push(format!("{strays} counted records were never written"));
    }
    println!(
        "chaos (exactly-once): {} records counted, {} not exactly once",
        counted.len(),
        wrong.len()
    );
    failures
}

/// Where `records` lie in `stream`: for each, its shard and sequence number, read from every
/// shard's oldest record on; what a failing run prints beside the log.
async fn locate(url: &str, stream: &str, records: &[String]) -> Vec<String> {
    let places = places(url, stream).await;
    records
        .iter()
        .filter_map(|record| {
            let (shard, sequence, arrived) = places.get(record)?;
            Some(format!(
                "{record} is in {shard} at {sequence} (arrived {arrived:?})"
            ))
        })
        .collect()
}

/// Every record of `stream`, by its body: its shard, sequence number and arrival, read from
/// every shard's oldest record on.
async fn places(url: &str, stream: &str) -> HashMap<String, (String, String, Option<i64>)> {
    let raw = common::raw_kinesis(url);
    let mut found = HashMap::new();
    let listed = raw.list_shards().stream_name(stream).send().await.unwrap();
    for shard in listed.shards() {
        let mut iterator = raw
            .get_shard_iterator()
            .stream_name(stream)
            .shard_id(shard.shard_id())
            .shard_iterator_type(aws_sdk_kinesis::types::ShardIteratorType::TrimHorizon)
            .send()
            .await
            .unwrap()
            .shard_iterator()
            .map(str::to_owned);
        while let Some(current) = iterator.take() {
            let out = raw
                .get_records()
                .shard_iterator(current)
                .send()
                .await
                .unwrap();
            for record in out.records() {
                let body: String =
                    serde_json::from_slice(record.data().as_ref()).unwrap_or_default();
                found.insert(
                    body,
                    (
                        shard.shard_id().to_owned(),
                        record.sequence_number().to_owned(),
                        record
                            .approximate_arrival_timestamp()
                            .and_then(|t| t.to_millis().ok()),
                    ),
                );
            }
            if out.records().is_empty() && out.millis_behind_latest() == Some(0) {
                break;
            }
            iterator = out.next_shard_iterator().map(str::to_owned);
        }
    }
    found
}

/// Replays `locate` for a stream of an earlier run: `CHAOS_LOCATE=stream|r1,r2`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_locate() {
    let (Ok(spec), Ok(url)) = (
        std::env::var("CHAOS_LOCATE"),
        std::env::var("KINESIS_TEST_ENDPOINT"),
    ) else {
        return;
    };
    let (stream, records) = spec.split_once('|').expect("stream|records");
    let records: Vec<String> = records.split(',').map(str::to_owned).collect();
    for line in locate(&url, stream, &records).await {
        println!("{line}");
    }
}

/// What the checker found.
#[derive(Default)]
struct Verdict {
    failures: Vec<String>,
    lost: Vec<String>,
    duplicates: usize,
    explained: usize,
    worst_takeover_ms: u64,
}

fn check(written: &[String], log: &Log) -> Verdict {
    let mut verdict = Verdict::default();
    let lease_ms = u64::try_from(LEASE.as_millis()).unwrap();

    // 1. Nothing lost.
    let handled: HashSet<&str> = log.handled.iter().map(|h| h.record.as_str()).collect();
    let lost: Vec<&String> = written
        .iter()
        .filter(|r| !handled.contains(r.as_str()))
        .collect();
    if !lost.is_empty() {
        verdict.failures.push(format!(
            "{} written records were never handled: {:?}",
            lost.len(),
            &lost[..lost.len().min(20)]
        ));
        verdict.lost = lost.iter().take(20).map(|r| (*r).clone()).collect();
    }

    // 2. Duplicates only after a disruption of the instance that handled the record first.
    let mut by_record: HashMap<&str, Vec<&Handled>> = HashMap::new();
    for h in &log.handled {
        by_record.entry(h.record.as_str()).or_default().push(h);
    }
    for handlings in by_record.values_mut() {
        if handlings.len() < 2 {
            continue;
        }
        handlings.sort_by_key(|h| h.at_ms);
        verdict.duplicates += handlings.len() - 1;
        let first = handlings[0];
        let again = handlings[1];
        // The first handler was disrupted while it handled the record, or before its checkpoint
        // of it could land (a second's slack), and before the record came again.
        let explained = log.disruptions.iter().any(|d| {
            d.incarnation == first.incarnation
                && d.until_ms + 1_000 >= first.at_ms
                && d.at_ms <= again.at_ms
        });
        if explained {
            verdict.explained += handlings.len() - 1;
        } else {
            verdict.failures.push(format!(
                "record {} handled by {} at {} and again by {} at {} with no crash, freeze or store \
                 fault of {} between",
                first.record, first.incarnation, first.at_ms, again.incarnation, again.at_ms,
                first.incarnation
            ));
        }
    }

    // 3. No overlapping tenures: between two records of one shard that one incarnation handled
    // less than a lease apart, no other incarnation handled a record of that shard.
    let mut by_shard: BTreeMap<&str, Vec<&Handled>> = BTreeMap::new();
    for h in &log.handled {
        by_shard.entry(h.shard.as_str()).or_default().push(h);
    }
    for (shard, handlings) in &mut by_shard {
        handlings.sort_by_key(|h| h.at_ms);
        let mut last_of: HashMap<&str, u64> = HashMap::new();
        for (i, h) in handlings.iter().enumerate() {
            if let Some(&previous) = last_of.get(h.incarnation.as_str())
                && h.at_ms.saturating_sub(previous) < lease_ms
                && let Some(other) = handlings[..i]
                    .iter()
                    .rev()
                    .take_while(|o| o.at_ms >= previous)
                    .find(|o| o.incarnation != h.incarnation)
            {
                verdict.failures.push(format!(
                    "shard {shard}: {} handled records at {previous} and {}, and {} handled one at {} \
                     in between: overlapping tenures",
                    h.incarnation, h.at_ms, other.incarnation, other.at_ms
                ));
            }
            last_of.insert(h.incarnation.as_str(), h.at_ms);
        }
    }

    // 4. Every shard a killed or frozen instance was reading is read again by another instance
    // within lease + skew tolerance + listing interval (plus slack for the calls).
    let bound_ms = u64::try_from(
        (LEASE + ruststream_kinesis::SKEW_TOLERANCE + LISTING + TAKEOVER_SLACK).as_millis(),
    )
    .unwrap();
    for d in log
        .disruptions
        .iter()
        .filter(|d| d.kind == "killed" || d.kind == "frozen")
    {
        let reading: HashSet<&str> = log
            .handled
            .iter()
            .filter(|h| {
                h.incarnation == d.incarnation && h.at_ms + 1_500 >= d.at_ms && h.at_ms <= d.at_ms
            })
            .map(|h| h.shard.as_str())
            .collect();
        for shard in reading {
            // By another instance; or, after a freeze shorter than a takeover, by the thawed one
            // itself (its lease was still its own when nobody could take it yet).
            let resumed = log
                .handled
                .iter()
                .filter(|h| {
                    h.shard == shard
                        && h.at_ms > d.at_ms
                        && (h.incarnation != d.incarnation || h.at_ms >= d.until_ms)
                })
                .map(|h| h.at_ms)
                .min();
            // A shard closed by the split may have nothing left to read.
            let Some(resumed) = resumed else { continue };
            let took = resumed - d.at_ms;
            verdict.worst_takeover_ms = verdict.worst_takeover_ms.max(took);
            if took > bound_ms {
                verdict.failures.push(format!(
                    "shard {shard} of {} ({}) was read again only {took} ms later (bound {bound_ms} ms)",
                    d.incarnation, d.kind
                ));
            }
        }
    }
    verdict
}

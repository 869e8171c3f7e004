//! The `handover after a release` and `crash takeover` figures, with the
//! default timings: two instances on one
//! DynamoDB lease table, the first holding every shard under a steady producer; the time from
//! the first one's shutdown (or SIGKILL) to the first record the second one handles.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ruststream_kinesis::prelude::App;
use ruststream_kinesis::{DynamoLeaseStore, LeaseStore, LeaseTimings};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::report::{Figure, median, secs_list};
use crate::service::{self, Mount, Probe};
use crate::stack::{self, Stack, unique};
use crate::{Error, Options, pause};

/// Shards of each handover stream.
const SHARDS: u32 = 2;
/// Records per second the producer writes while an instance hands over.
const RATE: u64 = 20;

fn repetitions(opts: &Options) -> usize {
    if opts.quick { 1 } else { 5 }
}

/// What one repetition leaves: a stream, a table and a producer, cleaned up by [`Rig::close`].
struct Rig {
    stream: String,
    table: DynamoLeaseStore,
    producer: tokio::task::JoinHandle<Result<u64, Error>>,
    stop: CancellationToken,
}

impl Rig {
    async fn new(stack: &Stack, prefix: &str) -> Result<Self, Error> {
        let stream = unique(prefix);
        stack.create_stream(&stream, SHARDS).await?;
        let table = stack.table(prefix).await?;
        Ok(Self {
            stream,
            table,
            producer: tokio::spawn(async { Ok(0) }),
            stop: CancellationToken::new(),
        })
    }

    fn produce(&mut self, stack: &Stack) {
        self.producer = tokio::spawn(stack::produce(
            stack.clone(),
            self.stream.clone(),
            RATE,
            self.stop.clone(),
        ));
    }

    fn store(&self) -> Arc<dyn LeaseStore> {
        Arc::new(self.table.clone())
    }

    async fn close(self, stack: &Stack) -> Result<u64, Error> {
        self.stop.cancel();
        let written = self.producer.await?;
        stack.delete_stream(&self.stream).await;
        stack.drop_table(self.table.table()).await;
        written
    }
}

/// Starts an instance of the service in this process, its leases kept alive `by_beat` or
/// renewed row by row.
async fn instance(
    stack: &Stack,
    rig: &Rig,
    (owner, by_beat): (&str, bool),
    probe: &Probe,
) -> Result<ruststream_kinesis::prelude::RunningApp, Error> {
    let mut mount = Mount::new(&rig.stream);
    mount.by_beat = by_beat;
    let app = service::app(
        stack,
        rig.store(),
        owner,
        LeaseTimings::default(),
        mount,
        probe.clone(),
    )
    .await;
    Ok(app.start().await?)
}

/// The child's argument that keeps its leases alive by its beat.
const BY_BEAT: &str = "by-beat";

/// Up to a second at random: the stop or kill lands at an arbitrary phase of the other
/// instance's 1 s handover poll (and of the renewal cycle), not at a fixed offset from its start.
fn jitter() -> Duration {
    Duration::from_millis(u64::try_from(stack::random_u128() % 1000).unwrap_or(0))
}

/// The `handover after a release` figure.
pub async fn after_release(stack: &Stack, opts: &Options) -> Result<Vec<Figure>, Error> {
    let mut handovers = Vec::new();
    let mut shutdowns = Vec::new();
    for rep in 0..repetitions(opts) {
        let (handover, shutdown) = after_release_once(stack).await?;
        eprintln!(
            "handover: repetition {}: first record on the other instance {:.2} s after the \
             shutdown began (the shutdown took {:.2} s)",
            rep + 1,
            handover.as_secs_f64(),
            shutdown.as_secs_f64()
        );
        handovers.push(handover.as_secs_f64());
        shutdowns.push(shutdown.as_secs_f64());
    }
    let value = median(&handovers);
    let mut figure = Figure::new("handover after a release", "handover");
    figure.measured = format!("{value:.2} s (median of {})", handovers.len());
    figure.target = "≤ 2 s".to_owned();
    figure.pass = Some(value <= 2.0);
    figure.detail(format!("each repetition (s): {}", secs_list(&handovers)));
    figure.detail(format!(
        "the stopping instance's `RunningApp::shutdown` took (s): {} (it returns after the \
         final checkpoints and releases)",
        secs_list(&shutdowns)
    ));
    figure.detail(format!(
        "two instances on a new {SHARDS}-shard stream and a new DynamoDB table, default \
         `LeaseTimings` (10 s lease, 3 s renewal, 10 s listing, 1 s handover poll); the first \
         instance holds every shard; a producer writes {RATE} records/s; the clock starts when \
         `shutdown()` of the first instance is called and stops at the first record the second \
         one handles; the shutdown comes 2-3 s (at random) after the first instance handled its first \
         record, so it lands at an arbitrary phase of the second one's poll"
    ));
    Ok(vec![figure])
}

async fn after_release_once(stack: &Stack) -> Result<(Duration, Duration), Error> {
    let mut rig = Rig::new(stack, "bench-handover").await?;
    let result = async {
        let (a, b) = (Probe::default(), Probe::default());
        let running_a = instance(stack, &rig, ("bench-a", false), &a).await?;
        let running_b = instance(stack, &rig, ("bench-b", false), &b).await?;
        rig.produce(stack);
        a.wait_first(Duration::from_secs(30))
            .await
            .ok_or("the first instance handled nothing")?;
        pause(Duration::from_secs(2) + jitter()).await;
        if b.first().is_some() {
            return Err::<_, Error>("the second instance read before the handover".into());
        }
        let began = Instant::now();
        running_a.shutdown().await?;
        let shutdown = began.elapsed();
        let first = b.wait_first(Duration::from_secs(60)).await;
        running_b.shutdown().await?;
        let first = first.ok_or("the second instance handled nothing within 60 s")?;
        Ok((first - began, shutdown))
    }
    .await;
    let closed = rig.close(stack).await;
    let result = result?;
    closed?;
    Ok(result)
}

/// The crash takeover figures: leases renewed row by row (the default), and kept alive by the
/// instances' beats.
pub async fn crash(stack: &Stack, opts: &Options) -> Result<Vec<Figure>, Error> {
    let mut figures = Vec::new();
    for by_beat in [false, true] {
        figures.push(crash_figure(stack, opts, by_beat).await?);
    }
    Ok(figures)
}

async fn crash_figure(stack: &Stack, opts: &Options, by_beat: bool) -> Result<Figure, Error> {
    let mode = if by_beat { ", by beat" } else { "" };
    let mut takeovers = Vec::new();
    for rep in 0..repetitions(opts) {
        let takeover = crash_once(stack, by_beat).await?;
        eprintln!(
            "takeover{mode}: repetition {}: first record on the other instance {:.2} s after \
             SIGKILL",
            rep + 1,
            takeover.as_secs_f64()
        );
        takeovers.push(takeover.as_secs_f64());
    }
    let lease = LeaseTimings::default().lease().as_secs_f64();
    let value = median(&takeovers);
    let mut figure = Figure::new(
        if by_beat {
            "crash takeover, by beat"
        } else {
            "crash takeover"
        },
        "takeover",
    );
    figure.measured = format!("{value:.2} s (median of {})", takeovers.len());
    figure.target = format!("≤ lease + 2 s = {:.0} s", lease + 2.0);
    figure.pass = Some(value <= lease + 2.0);
    figure.detail(format!("each repetition (s): {}", secs_list(&takeovers)));
    figure.detail(format!(
        "the first instance runs in a child process (`kinesis-bench child`) and holds every \
         shard of a new {SHARDS}-shard stream; the second runs in this process on the same new \
         DynamoDB table; default `LeaseTimings`; a producer writes {RATE} records/s; the child \
         is killed with SIGKILL 2-3 s (at random) after it handled its first record{}",
        if by_beat {
            "; both keep their leases alive by their beats \
             (`KinesisBroker::keep_leases_alive_by_beat(true)`)"
        } else {
            ""
        }
    ));
    figure.detail(if by_beat {
        "what the figure is made of: the dead instance's beat (written every renewal interval, \
         3 s) counts 10 s from the last one sent before the kill, so it lapses 7-10 s after \
         it; a taker judges it lapsed once a notice read sent after the skew tolerance \
         (`SKEW_TOLERANCE`, 1 s) past its end shows it (a handover poll a second), then takes \
         each shard over by its row's counter, gets an iterator and reads"
    } else {
        "what the figure is made of: under load a checkpoint write renews the lease about once \
         a second (each time the caught-up reader's answer is acknowledged), so the dead \
         instance's lease runs 9-10 s after the kill; a taker waits out the 1 s skew tolerance \
         (`SKEW_TOLERANCE`) on top, notices within a handover poll (1 s), then takes, gets an \
         iterator and reads"
    });
    Ok(figure)
}

async fn crash_once(stack: &Stack, by_beat: bool) -> Result<Duration, Error> {
    let mut rig = Rig::new(stack, "bench-takeover").await?;
    let result = async {
        let mut args = vec!["child", rig.table.table(), &rig.stream, "bench-child"];
        if by_beat {
            args.push(BY_BEAT);
        }
        let (mut child, mut lines) = crate::child::spawn(&stack.url, &args)?;
        wait_line(&mut lines, "READY", Duration::from_secs(60)).await?;
        let b = Probe::default();
        let running_b = instance(stack, &rig, ("bench-b", by_beat), &b).await?;
        rig.produce(stack);
        wait_line(&mut lines, "HANDLED", Duration::from_secs(30)).await?;
        pause(Duration::from_secs(2) + jitter()).await;
        if b.first().is_some() {
            return Err::<_, Error>("the second instance read before the kill".into());
        }
        let killed = Instant::now();
        child.start_kill()?;
        child.wait().await?;
        let first = b.wait_first(Duration::from_secs(60)).await;
        running_b.shutdown().await?;
        let first = first.ok_or("the second instance handled nothing within 60 s of the kill")?;
        Ok(first - killed)
    }
    .await;
    let closed = rig.close(stack).await;
    let result = result?;
    closed?;
    Ok(result)
}

async fn wait_line(
    lines: &mut mpsc::UnboundedReceiver<String>,
    prefix: &str,
    limit: Duration,
) -> Result<(), Error> {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        match tokio::time::timeout_at(deadline, lines.recv()).await {
            Ok(Some(line)) if line.starts_with(prefix) => return Ok(()),
            Ok(Some(_)) => {}
            Ok(None) => return Err(format!("the child ended before printing {prefix}").into()),
            Err(_) => return Err(format!("the child printed no {prefix} within {limit:?}").into()),
        }
    }
}

/// `kinesis-bench child TABLE STREAM OWNER [by-beat]`: one instance with default timings on
/// the lease table (its leases kept alive by its beat with `by-beat`), printing `READY` once
/// started and `HANDLED` lines as it handles records, until it is killed (or five minutes pass).
pub async fn child_command(opts: Options) -> Result<(), Error> {
    let (table, stream, owner, by_beat) = match &opts.rest[..] {
        [table, stream, owner] => (table, stream, owner, false),
        [table, stream, owner, mode] if mode == BY_BEAT => (table, stream, owner, true),
        _ => return Err("usage: kinesis-bench child TABLE STREAM OWNER [by-beat]".into()),
    };
    let stack = Stack::new(&stack::endpoint());
    let store: Arc<dyn LeaseStore> = Arc::new(DynamoLeaseStore::new(&stack.config, table.as_str()));
    let mut mount = Mount::new(stream);
    mount.by_beat = by_beat;
    let app = service::app(
        &stack,
        store,
        owner,
        LeaseTimings::default(),
        mount,
        Probe::new(Duration::ZERO, true),
    )
    .await;
    let running = app.start().await?;
    println!("READY");
    pause(Duration::from_secs(300)).await;
    running.shutdown().await?;
    Ok(())
}

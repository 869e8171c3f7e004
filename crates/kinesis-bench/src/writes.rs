//! Lease-table calls per shard per minute, counted by a [`CountingStore`] around a
//! `DynamoLeaseStore`: an idle subscription, one under a steady load with the default checkpoint
//! cadence (1 s), with a write per move of the checkpoint (cadence zero) and with a 1.5 s cadence,
//! and a standby instance whose handover poll watches the shards another instance holds. The five
//! run side by side, each on its own stream and table.

use std::sync::Arc;
use std::time::Duration;

use ruststream_kinesis::LeaseTimings;
use ruststream_kinesis::prelude::{App, RunningApp};
use tokio_util::sync::CancellationToken;

use crate::counting::{Call, CountingStore, Counts};
use crate::report::Figure;
use crate::service::{self, Mount, Probe};
use crate::stack::{self, Stack, unique};
use crate::{Error, Options, pause};

/// Shards of each stream.
const SHARDS: u32 = 4;
/// Records per second per shard under load.
const PER_SHARD: u64 = 10;

/// One scenario's instance, its counting store and what it writes to.
struct Scenario {
    stream: String,
    table: String,
    counted: Arc<CountingStore>,
    probe: Probe,
    running: RunningApp,
    /// The standby instance of the poll scenario.
    standby: Option<(Arc<CountingStore>, RunningApp)>,
    producer: Option<tokio::task::JoinHandle<Result<u64, Error>>>,
}

async fn scenario(
    stack: &Stack,
    timings: LeaseTimings,
    load: bool,
    standby: bool,
    stop: &CancellationToken,
) -> Result<Scenario, Error> {
    let stream = unique("bench-writes");
    stack.create_stream(&stream, SHARDS).await?;
    let table = stack.table("bench-writes").await?;
    let counted = Arc::new(CountingStore::new(Arc::new(table.clone())));
    let probe = Probe::default();
    let running = service::app(
        stack,
        counted.clone(),
        &unique("bench-holder"),
        timings,
        Mount::new(&stream),
        probe.clone(),
    )
    .await
    .start()
    .await?;
    let standby = if standby {
        let counted = Arc::new(CountingStore::new(Arc::new(table.clone())));
        let running = service::app(
            stack,
            counted.clone(),
            &unique("bench-standby"),
            timings,
            Mount::new(&stream),
            Probe::default(),
        )
        .await
        .start()
        .await?;
        Some((counted, running))
    } else {
        None
    };
    let producer = load.then(|| {
        tokio::spawn(stack::produce(
            stack.clone(),
            stream.clone(),
            PER_SHARD * u64::from(SHARDS),
            stop.clone(),
        ))
    });
    Ok(Scenario {
        stream,
        table: table.table().to_owned(),
        counted,
        probe,
        running,
        standby,
        producer,
    })
}

impl Scenario {
    async fn close(self, stack: &Stack) -> Result<(), Error> {
        self.running.shutdown().await?;
        if let Some((_, running)) = self.standby {
            running.shutdown().await?;
        }
        if let Some(producer) = self.producer {
            producer.await??;
        }
        stack.delete_stream(&self.stream).await;
        stack.drop_table(&self.table).await;
        Ok(())
    }
}

/// Per shard per minute.
fn rate(count: u64, window: Duration) -> f64 {
    count as f64 / f64::from(SHARDS) / (window.as_secs_f64() / 60.0)
}

pub async fn run(stack: &Stack, opts: &Options) -> Result<Vec<Figure>, Error> {
    let window = if opts.quick {
        Duration::from_secs(20)
    } else {
        Duration::from_secs(60)
    };
    let warmup = Duration::from_secs(5);
    let stop = CancellationToken::new();
    let slower = Duration::from_millis(1500);
    let defaults = LeaseTimings::default();
    let idle = scenario(stack, defaults, false, false, &stop).await?;
    let loaded = scenario(stack, defaults, true, false, &stop).await?;
    let every_move = scenario(
        stack,
        defaults.with_checkpoint_interval(Duration::ZERO),
        true,
        false,
        &stop,
    )
    .await?;
    let polled = scenario(stack, defaults, false, true, &stop).await?;
    let paced_slower = scenario(
        stack,
        defaults.with_checkpoint_interval(slower),
        true,
        false,
        &stop,
    )
    .await?;
    pause(warmup).await;
    let all = [&idle, &loaded, &every_move, &polled, &paced_slower];
    let before: Vec<Counts> = all.iter().map(|s| s.counted.snapshot()).collect();
    let standby_before = polled.standby.as_ref().map(|(c, _)| c.snapshot());
    let handled_before: Vec<u64> = all.iter().map(|s| s.probe.count()).collect();
    eprintln!("writes: counting for {} s", window.as_secs());
    let from = std::time::Instant::now();
    pause(window).await;
    let to = std::time::Instant::now();
    let per_row: Vec<Option<f64>> = all
        .iter()
        .map(|s| s.counted.writes_per_row_minute(from, to))
        .collect();
    let counts: Vec<Counts> = all
        .iter()
        .zip(&before)
        .map(|(s, b)| s.counted.snapshot().since(b))
        .collect();
    let handled: Vec<u64> = all
        .iter()
        .zip(&handled_before)
        .map(|(s, b)| s.probe.count() - b)
        .collect();
    let standby = polled
        .standby
        .as_ref()
        .zip(standby_before)
        .map(|((c, _), b)| c.snapshot().since(&b))
        .unwrap_or_default();
    stop.cancel();
    for s in [idle, loaded, every_move, polled, paced_slower] {
        s.close(stack).await?;
    }

    let setup = format!(
        "each scenario on its own {SHARDS}-shard stream and DynamoDB table, all five at once; \
         counted over {} s after a {} s warm-up by a `CountingStore` wrapping the \
         `DynamoLeaseStore`; writes are acquire, renew, checkpoint, checkpoint+renew and release \
         (every one a conditional write); per shard per minute = (writes - 1) / (last - first) \
         for each shard within the window, averaged over the shards (a write every 3 s reads 20 \
         whatever the window's phase); loaded: a producer writes {PER_SHARD} records/s per shard",
        window.as_secs(),
        warmup.as_secs()
    );
    let line = |label: &str, i: usize| {
        format!(
            "{label}: {} over the window ({} records handled); {:.1} writes per shard per minute \
             counted over the window",
            counts[i].describe(),
            handled[i],
            rate(counts[i].writes(), window)
        )
    };
    let mut figures = Vec::new();
    // Per shard: (writes - 1) / (last - first) within the window, so a write every 3 s reads as
    // 20 per minute whether the window caught 20 or 21 of them; the count over the window
    // (which can) is in the details.
    let writes = |i: usize| per_row[i].unwrap_or_else(|| rate(counts[i].writes(), window));

    let mut f = Figure::new("lease-table writes, idle", "writes");
    f.measured = format!("{:.1} per shard per minute", writes(0));
    f.target = "≤ 20".to_owned();
    f.pass = Some(writes(0) <= 20.0);
    f.detail(setup.clone());
    f.detail(line("idle, default timings", 0));
    figures.push(f);

    let mut f = Figure::new(
        "lease-table writes, loaded, default (1 s cadence)",
        "writes",
    );
    f.measured = format!("{:.1} per shard per minute", writes(1));
    f.target = "≤ 60".to_owned();
    f.pass = Some(writes(1) <= 60.0);
    f.detail(line(
        "loaded, default timings (a checkpoint written at most once a second: \
         `LeaseTimings::with_checkpoint_interval`, default 1 s)",
        1,
    ));
    f.detail(
        "a cadence of c seconds bounds a shard's checkpoint writes at 60 / c per minute (60 for \
         the default 1 s) whatever the load; a checkpoint write also renews the lease, so \
         renewals stop while checkpoints move",
    );
    figures.push(f);

    let mut f = Figure::new("lease-table writes, loaded, a write per move", "writes");
    f.measured = format!("{:.1} per shard per minute", writes(2));
    f.detail(line(
        "loaded, `LeaseTimings::with_checkpoint_interval(Duration::ZERO)` (a call per move of \
         the checkpoint, folded while one is in flight; the default before the 1 s cadence)",
        2,
    ));
    f.detail(
        "no bound but the store's answer time: the count grows with the load, since a caught-up \
         reader's every GetRecords answer and every settle may move the checkpoint",
    );
    figures.push(f);

    let mut f = Figure::new("lease-table writes, loaded, 1.5 s cadence", "writes");
    f.measured = format!("{:.1} per shard per minute", writes(4));
    f.detail(line(
        "loaded, `LeaseTimings::with_checkpoint_interval(1.5 s)`",
        4,
    ));
    f.detail("a cadence for at most 40 writes per shard per minute: 60 / 1.5 = 40");
    figures.push(f);

    let per_minute = |call| standby.get(call) as f64 / (window.as_secs_f64() / 60.0);
    let mut f = Figure::new("handover poll, per standby instance", "writes");
    f.measured = format!(
        "{:.0} notice reads + {:.0} list calls (DynamoDB Scans) + {:.0} row reads per minute",
        per_minute(Call::Notice),
        per_minute(Call::List),
        per_minute(Call::Read)
    );
    f.detail(format!(
        "two instances on one {SHARDS}-shard stream and table, idle: the first holds every \
         shard, the second polls the table every second (`LeaseTimings::with_handover_poll_interval`, default \
         1 s) while another instance holds a shard it lists; standby instance's calls: {}; \
         holder's: {}",
        standby.describe(),
        counts[3].describe()
    ));
    figures.push(f);
    Ok(figures)
}

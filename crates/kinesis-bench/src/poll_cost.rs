//! What the handover poll reads per standby instance per minute, at 10, 100 and 1,000 rows in
//! the lease table: with the stream's notice (the default) and, side by side in the same run,
//! with a store that keeps no notices (the rows at every poll, the cost before the notice).
//! Read units follow DynamoDB's rules for strongly consistent reads: a `GetItem` costs one unit
//! per 4 KB of its item, a `Scan` one per 4 KB of every item it reads (the whole table).

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use ruststream_kinesis::prelude::{App, RunningApp};
use ruststream_kinesis::{DynamoLeaseStore, LeaseKey, LeaseStore, LeaseTimings};

use crate::counting::{Call, CountingStore, Counts, item_bytes, read_units as units};
use crate::report::Figure;
use crate::service::{self, Mount, Probe};
use crate::stack::{Stack, unique};
use crate::{Error, Options, pause};

/// Shards of the stream the three instances share.
const SHARDS: u32 = 4;
/// Rows in the table, the stream's own included.
const SIZES: [usize; 3] = [10, 100, 1_000];

/// Fills `table` with rows of other streams until it holds `rows` with the stream's own.
async fn fill(table: &DynamoLeaseStore, rows: usize) -> Result<(), Error> {
    let fillers = rows.saturating_sub(SHARDS as usize);
    let results: Vec<_> = futures::stream::iter(0..fillers)
        .map(|k| async move {
            let key = LeaseKey::new(
                format!("bench-filler-{}", k / 100),
                format!("shardId-{k:012}"),
            );
            table
                .acquire_from(
                    &key,
                    "bench-filler",
                    Duration::from_millis(1),
                    "49590338271490256608559692538361571095921575989136588898",
                )
                .await
        })
        .buffer_unordered(16)
        .collect()
        .await;
    for result in results {
        result?;
    }
    Ok(())
}

/// The read units of a standby's calls: the notice's `GetItem`s, the row reads, and the Scans.
fn read_units(counts: &Counts, notice_units: u64, scan_units: u64) -> u64 {
    counts.get(Call::Notice) * notice_units
        + counts.get(Call::Read)
        + counts.get(Call::List) * scan_units
}

struct Measured {
    rows: usize,
    /// Per minute: the standby with notices, and the one without.
    with: Counts,
    without: Counts,
    with_units: f64,
    without_units: f64,
    scan_units: u64,
    holder: Counts,
}

async fn start(
    stack: &Stack,
    store: Arc<CountingStore>,
    owner: &str,
    timings: LeaseTimings,
    stream: &str,
) -> Result<RunningApp, Error> {
    Ok(service::app(
        stack,
        store,
        &unique(owner),
        timings,
        Mount::new(stream),
        Probe::default(),
    )
    .await
    .start()
    .await?)
}

async fn measure(
    stack: &Stack,
    rows: usize,
    window: Duration,
    timings: LeaseTimings,
) -> Result<Measured, Error> {
    let stream = unique("bench-poll");
    stack.create_stream(&stream, SHARDS).await?;
    let table = stack.table("bench-poll").await?;
    fill(&table, rows).await?;
    let store = || Arc::new(table.clone()) as Arc<dyn LeaseStore>;
    let holder = Arc::new(CountingStore::new(store()));
    let with = Arc::new(CountingStore::new(store()));
    let without = Arc::new(CountingStore::without_notices(store()));
    let holding = start(stack, holder.clone(), "bench-holder", timings, &stream).await?;
    pause(Duration::from_secs(2)).await;
    let standby = start(stack, with.clone(), "bench-standby", timings, &stream).await?;
    let old_standby = start(stack, without.clone(), "bench-rows", timings, &stream).await?;
    // Settled: each standby read the rows once, and the holder beats.
    pause(Duration::from_secs(8)).await;
    let before = [with.snapshot(), without.snapshot(), holder.snapshot()];
    pause(window).await;
    let per_minute = |counts: Counts| {
        let minutes = window.as_secs_f64() / 60.0;
        Counts(counts.0.map(|n| (n as f64 / minutes).round() as u64))
    };
    let [with_counts, without_counts, holder_counts] =
        [&with, &without, &holder].map(|store| store.snapshot());
    let with_counts = per_minute(with_counts.since(&before[0]));
    let without_counts = per_minute(without_counts.since(&before[1]));
    let holder_counts = per_minute(holder_counts.since(&before[2]));
    let listed = table.rows().await?;
    let table_bytes: usize = listed
        .iter()
        .map(|(key, row)| item_bytes(&key.row_key(), row))
        .sum();
    let notice = table.notice(&stream).await?.unwrap_or_default();
    let notice_bytes = "lease_key".len()
        + stream.len()
        + "#notice".len()
        + "notice_counter".len()
        + 8
        + notice
            .beats
            .keys()
            .map(|owner| "beat_".len() + owner.len() + 8)
            .sum::<usize>();
    let (notice_units, scan_units) = (units(notice_bytes), units(table_bytes + notice_bytes));
    for running in [standby, old_standby, holding] {
        running.shutdown().await?;
    }
    stack.delete_stream(&stream).await;
    stack.drop_table(table.table()).await;
    Ok(Measured {
        rows: listed.len(),
        with_units: read_units(&with_counts, notice_units, scan_units) as f64,
        without_units: read_units(&without_counts, notice_units, scan_units) as f64,
        with: with_counts,
        without: without_counts,
        scan_units,
        holder: holder_counts,
    })
}

pub async fn run(stack: &Stack, opts: &Options) -> Result<Vec<Figure>, Error> {
    let window = if opts.quick {
        Duration::from_secs(15)
    } else {
        Duration::from_secs(30)
    };
    // A listing interval far past the window: every call in it is the poll's.
    let timings = LeaseTimings::default().with_listing_interval(Duration::from_secs(600));
    let mut measured = Vec::new();
    for rows in SIZES {
        eprintln!(
            "poll-cost: {rows} rows, counting for {} s",
            window.as_secs()
        );
        measured.push(measure(stack, rows, window, timings).await?);
    }
    let names = [
        "handover poll, 10 rows",
        "handover poll, 100 rows",
        "handover poll, 1,000 rows",
    ];
    let mut figures = Vec::new();
    for (m, name) in measured.iter().zip(names) {
        let mut f = Figure::new(name, "poll-cost");
        f.measured = format!(
            "{:.0} read units per minute ({}); without the notice {:.0} ({:.0}x)",
            m.with_units,
            m.with.describe(),
            m.without_units,
            m.without_units / m.with_units.max(1.0)
        );
        if m.rows >= 1_000 {
            f.target = "≤ 60".to_owned();
            f.pass = Some(m.with_units <= 60.0);
        }
        f.detail(format!(
            "{} rows in the table ({} of the {SHARDS}-shard stream, the others of other streams); \
             a Scan of it costs {} read units; per minute over {} s, default `LeaseTimings` but \
             listings 10 min apart (so that every call counted is the poll's): standby with the \
             notice {}; standby without (a store that keeps no notices) {}; holder {}",
            m.rows,
            SHARDS,
            m.scan_units,
            window.as_secs(),
            m.with.describe(),
            m.without.describe(),
            m.holder.describe()
        ));
        figures.push(f);
    }
    let costs: Vec<f64> = measured.iter().map(|m| m.with_units).collect();
    let (low, high) = costs
        .iter()
        .fold((f64::MAX, 0.0_f64), |(lo, hi), &c| (lo.min(c), hi.max(c)));
    let mut f = Figure::new("handover poll, growth 10 -> 1,000 rows", "poll-cost");
    f.measured = format!(
        "{:.2} (largest ÷ smallest of {costs:?} read units per minute)",
        high / low.max(1.0)
    );
    f.target = "≤ 1.10".to_owned();
    f.pass = Some(high <= low * 1.10);
    f.detail(
        "the poll reads the stream's notice (one consistent GetItem of a row under 4 KB) every \
         second, and the shards' rows only when a release bumped it or a holder's beat lapsed; \
         listing rounds (every 10 s by default) Scan the table only when something changed, and \
         at least every 5 minutes, which this figure leaves out (see `kinesis-bench cost`)",
    );
    figures.push(f);
    Ok(figures)
}

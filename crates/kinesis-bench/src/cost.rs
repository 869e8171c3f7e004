//! What coordination costs as a fleet grows: every lease-table call and every Kinesis
//! control-plane call per instance per minute in steady state, idle and loaded, at 8, 64 and 256
//! shards with 1, 4 and 16 instances; the read and write units they cost and the dollars a month
//! at on-demand prices, beside the Java KCL's figure computed from its defaults.
//!
//! Each fleet reads a stream of its own with its own lease table, its instances balancing the
//! shards (`balance_shards(true)`, as several instances are run). Steady state: every shard
//! held, by instances whose counts differ by one at most, the same twice a second apart; then
//! the calls are counted over a window. Lease-table calls come from a [`CountingStore`] per
//! instance (the `list` Scans with the bytes of the rows they read), Kinesis calls from the
//! crate's own metrics (`messaging_client_operation_duration_seconds`, by operation).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ruststream_kinesis::prelude::{App, RunningApp};
use ruststream_kinesis::{DynamoLeaseStore, LeaseStore, LeaseTimings};
use tokio_util::sync::CancellationToken;

use crate::counting::{Call, CountingStore, Counts};
use crate::report::Figure;
use crate::service::{self, Mount, Probe};
use crate::stack::{self, Stack, unique};
use crate::{Error, Options, pause};

/// Records per second per shard under load.
const PER_SHARD: u64 = 2;
/// On-demand prices (us-east-1): dollars per million write and read request units.
const WRITE_PRICE: f64 = 0.625;
const READ_PRICE: f64 = 0.125;
/// Minutes in a month of 30 days.
const MONTH_MINUTES: f64 = 43_200.0;
/// The Java KCL 2.x defaults the computed figure takes: a lease renewed every third of
/// `failoverTimeMillis` (10 s): 18 writes a lease a minute; every worker's lease taker lists the
/// table with a consistent Scan every 20 s; a lease row of about 400 bytes.
const KCL_RENEWALS_PER_MINUTE: f64 = 18.0;
const KCL_SCANS_PER_MINUTE: f64 = 3.0;
const KCL_ROW_BYTES: usize = 400;
/// The Kinesis calls that are data, not control: not counted as coordination.
const DATA_CALLS: [&str; 4] = ["GetRecords", "SubscribeToShard", "PutRecords", "PutRecord"];

/// One instance of a fleet.
struct Member {
    counted: Arc<CountingStore>,
    /// The store the counting one wraps: its writes of the layout, made inside its beats,
    /// which the wrapper cannot see.
    store: ruststream_kinesis::DynamoLeaseStore,
    registry: prometheus::Registry,
    running: RunningApp,
}

/// A fleet on a stream and table of its own.
struct Fleet {
    stream: String,
    table: DynamoLeaseStore,
    members: Vec<Member>,
    producer: Option<tokio::task::JoinHandle<Result<u64, Error>>>,
}

/// What a fleet called, all its instances together, at one moment.
#[derive(Debug, Clone, Default)]
struct Tally {
    lease: Counts,
    /// The read units and the bytes of rows of the `list` Scans.
    listed_units: u64,
    listed_bytes: u64,
    /// The read units of the notice's reads and the write units of the writes to it, by its
    /// size; and the largest size it was read at.
    notice_read_units: u64,
    notice_write_units: u64,
    notice_bytes: u64,
    /// Kinesis calls by operation.
    kinesis: BTreeMap<String, u64>,
}

impl Tally {
    fn since(&self, earlier: &Self) -> Self {
        let mut kinesis = self.kinesis.clone();
        for (operation, count) in &mut kinesis {
            *count -= earlier.kinesis.get(operation).copied().unwrap_or(0);
        }
        kinesis.retain(|_, count| *count > 0);
        Self {
            lease: self.lease.since(&earlier.lease),
            listed_units: self.listed_units - earlier.listed_units,
            listed_bytes: self.listed_bytes - earlier.listed_bytes,
            notice_read_units: self.notice_read_units - earlier.notice_read_units,
            notice_write_units: self.notice_write_units - earlier.notice_write_units,
            notice_bytes: self.notice_bytes,
            kinesis,
        }
    }

    /// Write units: a conditional write of a lease row (under 1 KB) is one; a write to the
    /// notice row (a beat, a run's record, a leave, a release's bump) one per KB of the notice.
    fn write_units(&self) -> u64 {
        self.lease.row_writes() + self.notice_write_units
    }

    /// Read units: a consistent read of one row is one, of the notice one per 4 KB of it; a
    /// `list` Scan one per 4 KB of the rows it read.
    fn read_units(&self) -> u64 {
        self.lease.get(Call::Read) + self.notice_read_units + self.listed_units
    }

    /// Kinesis control-plane calls.
    fn control(&self) -> u64 {
        self.kinesis
            .iter()
            .filter(|(operation, _)| !DATA_CALLS.contains(&operation.as_str()))
            .map(|(_, count)| count)
            .sum()
    }
}

/// How many Kinesis calls of each operation `registry` counted (lease-table calls left out: the
/// counting store has them).
fn kinesis_calls(registry: &prometheus::Registry) -> BTreeMap<String, u64> {
    let mut calls = BTreeMap::new();
    for family in registry.gather() {
        if family.name() != "messaging_client_operation_duration_seconds" {
            continue;
        }
        for metric in family.get_metric() {
            let operation = metric
                .get_label()
                .iter()
                .find(|label| label.name() == "operation")
                .map(|label| label.value().to_owned())
                .unwrap_or_default();
            if operation.starts_with("lease_table.") {
                continue;
            }
            *calls.entry(operation).or_insert(0) += metric.get_histogram().get_sample_count();
        }
    }
    calls
}

impl Fleet {
    async fn start(
        stack: &Stack,
        (shards, instances, loaded, by_beat): (u32, usize, bool, bool),
        (apart, behind): (bool, bool),
        stop: &CancellationToken,
    ) -> Result<Self, Error> {
        let stream = unique("bench-cost");
        stack.create_stream(&stream, shards).await?;
        let table = stack.table("bench-cost").await?;
        let mut members = Vec::with_capacity(instances);
        for n in 0..instances {
            // Kept apart, each instance has a store of its own, as separate processes do: what
            // one store learnt of the head spares its own beats the layout's write, not others'.
            let store = if apart {
                DynamoLeaseStore::new(&stack.config, table.table()).keep_notice_head_apart()
            } else {
                table.clone()
            };
            let store = if behind {
                store.eventually_consistent_polls()
            } else {
                store
            };
            let counted = Arc::new(CountingStore::new(Arc::new(store.clone())));
            let registry = prometheus::Registry::new();
            let running = service::app(
                stack,
                counted.clone() as Arc<dyn LeaseStore>,
                &format!("cost-{n}-{}", stack::random_u128() % 10_000),
                LeaseTimings::default(),
                Mount {
                    registry: Some(registry.clone()),
                    balance: true,
                    by_beat,
                    from_start: false,
                    ..Mount::new(&stream)
                },
                Probe::default(),
            )
            .await
            .start()
            .await?;
            members.push(Member {
                counted,
                store,
                registry,
                running,
            });
        }
        let producer = loaded.then(|| {
            tokio::spawn(stack::produce(
                stack.clone(),
                stream.clone(),
                PER_SHARD * u64::from(shards),
                stop.clone(),
            ))
        });
        Ok(Self {
            stream,
            table,
            members,
            producer,
        })
    }

    fn tally(&self) -> Tally {
        let mut tally = Tally::default();
        for member in &self.members {
            let counts = member.counted.snapshot();
            for (slot, count) in tally.lease.0.iter_mut().zip(counts.0) {
                *slot += count;
            }
            let (units, bytes) = member.counted.listed();
            tally.listed_units += units;
            tally.listed_bytes += bytes;
            let (read, written, notice_bytes) = member.counted.notice_units();
            tally.notice_read_units += read;
            tally.notice_write_units += written;
            tally.notice_bytes = tally.notice_bytes.max(notice_bytes);
            for (operation, count) in kinesis_calls(&member.registry) {
                *tally.kinesis.entry(operation).or_insert(0) += count;
            }
        }
        // Kept apart, each member's store is its own; else they are clones of one that writes
        // no layout.
        tally.notice_write_units += self
            .members
            .iter()
            .map(|member| member.store.notice_layout_writes())
            .sum::<u64>();
        tally
    }

    /// Waits until every shard's row is held and the instances hold as many each, give or take
    /// one, the same at two reads a second apart; how long that took, or `None` past `limit`.
    async fn steady(&self, shards: u32, limit: Duration) -> Option<Duration> {
        let started = Instant::now();
        let mut last: Option<Vec<usize>> = None;
        while started.elapsed() < limit {
            pause(Duration::from_secs(1)).await;
            let Ok(rows) = self.table.rows().await else {
                continue;
            };
            let now = ruststream_kinesis::epoch_millis();
            let mut held: BTreeMap<String, usize> = BTreeMap::new();
            let mut open = 0;
            for (_, row) in rows.iter().filter(|(key, _)| key.stream() == self.stream) {
                if row.checkpoint.as_deref() == Some(ruststream_kinesis::SHARD_END) {
                    continue;
                }
                open += 1;
                if let Some(owner) = row.owner.as_ref().filter(|_| row.expiry_ms > now) {
                    *held.entry(owner.clone()).or_insert(0) += 1;
                }
            }
            let mut per: Vec<usize> = held.values().copied().collect();
            per.resize(self.members.len().max(per.len()), 0);
            per.sort_unstable();
            let all_held = open == shards as usize && per.iter().sum::<usize>() == open;
            let even = per.last().copied().unwrap_or(0) - per.first().copied().unwrap_or(0) <= 1;
            if all_held && even && last.as_ref() == Some(&per) {
                return Some(started.elapsed());
            }
            if started.elapsed() + Duration::from_secs(1) >= limit {
                eprintln!(
                    "cost: not steady: {open} open rows of {shards}, held per instance {per:?}"
                );
            }
            last = Some(per);
        }
        None
    }

    async fn close(self, stack: &Stack) -> Result<(), Error> {
        for member in self.members {
            member.running.shutdown().await?;
        }
        if let Some(producer) = self.producer {
            producer.await??;
        }
        stack.delete_stream(&self.stream).await;
        stack.drop_table(self.table.table()).await;
        Ok(())
    }
}

/// One fleet's figures.
struct Measured {
    shards: u32,
    instances: usize,
    loaded: bool,
    by_beat: bool,
    window: Duration,
    settled_in: Duration,
    tally: Tally,
}

impl Measured {
    fn minutes(&self) -> f64 {
        self.window.as_secs_f64() / 60.0
    }

    /// Dollars a month for the fleet at on-demand prices.
    fn dollars(&self) -> f64 {
        let per_minute = |units: u64| units as f64 / self.minutes();
        (per_minute(self.tally.write_units()) * WRITE_PRICE
            + per_minute(self.tally.read_units()) * READ_PRICE)
            * MONTH_MINUTES
            / 1e6
    }

    fn line(&self) -> String {
        let per_instance = |count: u64| count as f64 / self.instances as f64 / self.minutes();
        let kinesis: Vec<String> = self
            .tally
            .kinesis
            .iter()
            .filter(|(operation, _)| !DATA_CALLS.contains(&operation.as_str()))
            .map(|(operation, count)| format!("{operation} {:.1}", per_instance(*count)))
            .collect();
        format!(
            "{} shards, {} instance{}, {}{}: per instance per minute {:.1} lease write units, \
             {:.1} row and notice reads, {:.1} list Scans ({:.1} read units), Kinesis control \
             calls {:.1} ({}); the fleet {:.0} write + {:.0} read units a minute (the notice \
             {} bytes), ${:.2} a month (steady after {:.0} s; lease calls: {})",
            self.shards,
            self.instances,
            if self.instances == 1 { "" } else { "s" },
            if self.loaded { "loaded" } else { "idle" },
            if self.by_beat { ", by beat" } else { "" },
            per_instance(self.tally.write_units()),
            per_instance(self.tally.lease.get(Call::Read) + self.tally.lease.get(Call::Notice)),
            per_instance(self.tally.lease.get(Call::List)),
            per_instance(self.tally.listed_units),
            per_instance(self.tally.control()),
            if kinesis.is_empty() {
                "none".to_owned()
            } else {
                kinesis.join(", ")
            },
            self.tally.write_units() as f64 / self.minutes(),
            self.tally.read_units() as f64 / self.minutes(),
            self.tally.notice_bytes,
            self.dollars(),
            self.settled_in.as_secs_f64(),
            self.tally.lease.describe(),
        )
    }
}

/// The Java KCL's dollars a month for `shards` leases and `workers` workers, idle, from its
/// defaults (renewals and the lease taker's Scans; checkpoints are the application's).
fn kcl_dollars(shards: u32, workers: usize) -> f64 {
    let writes = KCL_RENEWALS_PER_MINUTE * f64::from(shards);
    let scan_units = (shards as usize * KCL_ROW_BYTES).div_ceil(4_096).max(1) as f64;
    let reads = KCL_SCANS_PER_MINUTE * workers as f64 * scan_units;
    (writes * WRITE_PRICE + reads * READ_PRICE) * MONTH_MINUTES / 1e6
}

pub async fn run(stack: &Stack, opts: &Options) -> Result<Vec<Figure>, Error> {
    let (shard_counts, instance_counts, window): (&[u32], &[usize], Duration) = if opts.quick {
        (&[8, 64], &[1, 4], Duration::from_secs(20))
    } else {
        (&[8, 64, 256], &[1, 4, 16], Duration::from_secs(60))
    };
    let window = opts.window.map_or(window, Duration::from_secs);
    let loads: &[bool] = if opts.idle { &[false] } else { &[false, true] };
    let mut measured = Vec::new();
    let mut failed = Vec::new();
    for &shards in shard_counts
        .iter()
        .filter(|&&shards| opts.shards.is_none_or(|only| only == shards))
    {
        for &instances in instance_counts
            .iter()
            .filter(|&&instances| opts.instances.is_none_or(|only| only == instances))
        {
            for &loaded in loads {
                let what = format!(
                    "{shards} shards, {instances} instances, {}",
                    if loaded { "loaded" } else { "idle" }
                );
                // One fleet that fails is a line of the figure; the others are still measured.
                let fleet = (shards, instances, loaded, opts.by_beat);
                match measure(stack, fleet, (opts.apart, opts.behind), window).await {
                    Ok(m) => {
                        eprintln!("cost: {}", m.line());
                        measured.push(m);
                    }
                    Err(err) => {
                        eprintln!("cost: {what}: not measured: {err}");
                        failed.push((shards, format!("{what}: not measured: {err}")));
                    }
                }
            }
        }
    }
    Ok(figures(
        &measured,
        &failed,
        window,
        (opts.by_beat, opts.apart, opts.behind),
    ))
}

/// One fleet of `instances` on `shards` shards, idle or `loaded`, counted over `window` once
/// steady.
async fn measure(
    stack: &Stack,
    (shards, instances, loaded, by_beat): (u32, usize, bool, bool),
    reads: (bool, bool),
    window: Duration,
) -> Result<Measured, Error> {
    let stop = CancellationToken::new();
    let fleet = Fleet::start(stack, (shards, instances, loaded, by_beat), reads, &stop).await?;
    let Some(settled_in) = fleet.steady(shards, Duration::from_secs(180)).await else {
        stop.cancel();
        fleet.close(stack).await?;
        return Err("did not settle within 180 s".into());
    };
    let before = fleet.tally();
    pause(window).await;
    let tally = fleet.tally().since(&before);
    stop.cancel();
    fleet.close(stack).await?;
    Ok(Measured {
        shards,
        instances,
        loaded,
        by_beat,
        window,
        settled_in,
        tally,
    })
}

fn figures(
    measured: &[Measured],
    failed: &[(u32, String)],
    window: Duration,
    (by_beat, apart, behind): (bool, bool, bool),
) -> Vec<Figure> {
    let setup = format!(
        "each fleet on a stream and lease table of its own, default lease timings, {}; steady \
         state (every shard held, the instances' counts within one, twice a second apart), then counted over {} s; loaded: \
         {PER_SHARD} records/s per shard; units: a lease-row write is one write unit, a write \
         to the notice row one per KB of it, a row read one read unit, a notice read one per 4 \
         KB of it, a list Scan one per 4 KB of rows read; dollars at on-demand prices \
         (${WRITE_PRICE} per million writes, ${READ_PRICE} per million reads), 30 days{}",
        match (by_beat, apart) {
            (true, true) => {
                "keep_leases_alive_by_beat(true), balance_shards(true), \
                 keep_notice_head_apart() (each notice row priced by its size)"
            }
            (true, false) => "keep_leases_alive_by_beat(true), balance_shards(true)",
            (false, true) => {
                "balance_shards(true), keep_notice_head_apart() (each notice row priced by its \
                 size)"
            }
            (false, false) => "balance_shards(true)",
        },
        window.as_secs(),
        if behind {
            "; eventually_consistent_polls(): the poll's notice reads and the full-read \
             cadence's Scans at half a read unit per 4 KB"
        } else {
            ""
        }
    );
    let mut figures = Vec::new();
    for shards in measured
        .iter()
        .map(|m| m.shards)
        .chain(failed.iter().map(|(shards, _)| *shards))
        .collect::<std::collections::BTreeSet<_>>()
    {
        let of: Vec<&Measured> = measured.iter().filter(|m| m.shards == shards).collect();
        let idle: Vec<&&Measured> = of.iter().filter(|m| !m.loaded).collect();
        let name: &'static str = match (by_beat, apart, shards) {
            (false, false, 8) => "coordination cost, 8 shards",
            (false, false, 64) => "coordination cost, 64 shards",
            (false, false, 256) => "coordination cost, 256 shards",
            (false, false, _) => "coordination cost",
            (false, true, _) => "coordination cost, head apart",
            (true, false, 8) => "coordination cost by beat, 8 shards",
            (true, false, 64) => "coordination cost by beat, 64 shards",
            (true, false, 256) => "coordination cost by beat, 256 shards",
            (true, false, _) => "coordination cost by beat",
            (true, true, 8) => "coordination cost by beat, head apart, 8 shards",
            (true, true, 64) => "coordination cost by beat, head apart, 64 shards",
            (true, true, 256) => "coordination cost by beat, head apart, 256 shards",
            (true, true, _) => "coordination cost by beat, head apart",
        };
        let mut f = Figure::new(name, "cost");
        f.measured = idle
            .iter()
            .map(|m| {
                format!(
                    "{} instance{}: ${:.2} a month idle (KCL ${:.2})",
                    m.instances,
                    if m.instances == 1 { "" } else { "s" },
                    m.dollars(),
                    kcl_dollars(shards, m.instances)
                )
            })
            .collect::<Vec<_>>()
            .join("; ");
        f.detail(setup.clone());
        for m in &of {
            f.detail(m.line());
        }
        for (_, why) in failed.iter().filter(|(of, _)| *of == shards) {
            f.detail(why.clone());
        }
        f.detail(
            "KCL (computed, not measured): 18 renewals a lease a minute (a third of \
             failoverTimeMillis 10 s) and a consistent Scan of the table every 20 s per worker \
             (rows of about 400 bytes); checkpoints are the application's and left out",
        );
        figures.push(f);
    }
    figures
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kcl_figure_follows_its_defaults() {
        // 10,000 leases: 180,000 writes a minute; 100 workers, 977 read units a Scan, 3 a minute.
        let dollars = kcl_dollars(10_000, 100);
        let writes = 180_000.0 * WRITE_PRICE * MONTH_MINUTES / 1e6;
        let reads = 3.0 * 100.0 * 977.0 * READ_PRICE * MONTH_MINUTES / 1e6;
        assert!((dollars - (writes + reads)).abs() < 0.01, "{dollars}");
        assert!(
            dollars > 4_000.0,
            "the issue's order of magnitude: {dollars}"
        );
    }

    #[test]
    fn a_fleet_costs_its_units_a_month() {
        let mut tally = Tally::default();
        tally.lease.0[Call::Renew as usize] = 40;
        tally.listed_units = 6;
        // Ten beats to a notice of 2 KB, and two reads of it: counted by its size, not the call.
        tally.lease.0[Call::Beat as usize] = 10;
        tally.notice_write_units = 20;
        tally.lease.0[Call::Notice as usize] = 2;
        tally.notice_read_units = 4;
        let m = Measured {
            shards: 8,
            instances: 1,
            loaded: false,
            by_beat: false,
            window: Duration::from_secs(120),
            settled_in: Duration::ZERO,
            tally,
        };
        // 30 write units (20 renewals, 10 for the beats) and 5 read units a minute.
        let expected = (30.0 * WRITE_PRICE + 5.0 * READ_PRICE) * MONTH_MINUTES / 1e6;
        assert!((m.dollars() - expected).abs() < 1e-9);
    }
}

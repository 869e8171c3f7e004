//! Consuming aggregated: user records per second read by the `#[subscriber]` service (with
//! `MemoryLeaseStore`) from a backlog of KPL aggregates ÷ the same records written plain, and
//! the CPU this process spends per user record on each side.

use crate::consume::{Took, cpu_seconds, processes, through_service};
use crate::report::{Figure, median, thousands, thousands_list};
use crate::service;
use crate::stack::{Stack, unique};
use crate::{Error, Options};

const SHARDS: u32 = 8;

pub async fn run(stack: &Stack, opts: &Options) -> Result<Vec<Figure>, Error> {
    let records: u64 = if opts.quick { 8_000 } else { 20_000 };
    let rounds = if opts.quick { 1 } else { 5 };
    let plain = unique("bench-consume-plain");
    let packed = unique("bench-consume-packed");
    stack.create_stream(&plain, SHARDS).await?;
    stack.create_stream(&packed, SHARDS).await?;
    let result = read_both(stack, &plain, &packed, records, rounds).await;
    let stored = stack.count_records(&packed).await.unwrap_or(0);
    stack.delete_stream(&plain).await;
    stack.delete_stream(&packed).await;
    let took = result?;

    let rate = |t: &Took| records as f64 / t.steady.as_secs_f64().max(1e-6);
    let ratios: Vec<f64> = took.iter().map(|(p, a)| rate(a) / rate(p)).collect();
    let cpu_ratios: Vec<f64> = took
        .iter()
        .map(|(p, a)| a.cpu[0] / p.cpu[0].max(1e-6))
        .collect();
    let value = median(&ratios);
    let cpu = median(&cpu_ratios);
    let plain_rates: Vec<f64> = took.iter().map(|(p, _)| rate(p)).collect();
    let packed_rates: Vec<f64> = took.iter().map(|(_, a)| rate(a)).collect();
    let mut f = Figure::new("consuming aggregated", "consume-aggregated");
    f.measured = format!(
        "{value:.2} (aggregated {} user rec/s ÷ plain {} rec/s); CPU per user record {cpu:.2}× \
         a plain record's",
        thousands(median(&packed_rates)),
        thousands(median(&plain_rates))
    );
    f.target = "≥ 1.0; CPU ≤ 1.5×".to_owned();
    f.pass = Some(value >= 1.0 && cpu <= 1.5);
    f.detail(format!(
        "{records} records of ~60 B JSON on {SHARDS} shards per stream: one stream written plain \
         (`PutRecords` of 500), the other through the crate's publisher with \
         `KinesisPublish::default().aggregate(true)` ({stored} Kinesis records); {rounds} \
         round(s), each reading both backlogs from TRIM_HORIZON with the service (the order \
         alternating); rates between the first and the last record handled; CPU of this process \
         from start to shutdown"
    ));
    f.detail(format!(
        "per round: plain {} records/s; aggregated {} user records/s; CPU ratios {}",
        thousands_list(&plain_rates),
        thousands_list(&packed_rates),
        cpu_ratios
            .iter()
            .map(|r| format!("{r:.2}"))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    Ok(vec![f])
}

/// Fills both streams, then reads each once per round; each round's `(plain, aggregated)`.
async fn read_both(
    stack: &Stack,
    plain: &str,
    packed: &str,
    records: u64,
    rounds: usize,
) -> Result<Vec<(Took, Took)>, Error> {
    stack.fill(plain, records, service::body).await?;
    crate::publish_aggregated::publish_packed(stack, packed, records, service::body).await?;
    let mut out = Vec::new();
    for round in 0..rounds {
        let read = |stream: &str| {
            let stream = stream.to_owned();
            async move {
                let pids = processes();
                let before = cpu_seconds(&pids);
                let mut took = through_service(stack, &stream, records, false).await?;
                let after = cpu_seconds(&pids);
                for (slot, (a, b)) in took.cpu.iter_mut().zip(after.iter().zip(before)) {
                    *slot = a - b;
                }
                Ok::<Took, Error>(took)
            }
        };
        let (p, a) = if round % 2 == 0 {
            let p = read(plain).await?;
            (p, read(packed).await?)
        } else {
            let a = read(packed).await?;
            (read(plain).await?, a)
        };
        eprintln!(
            "consume-aggregated: round {}: plain {:.2} s, aggregated {:.2} s first to last",
            round + 1,
            p.steady.as_secs_f64(),
            a.steady.as_secs_f64()
        );
        out.push((p, a));
    }
    Ok(out)
}

//! Per-message cost in process: allocations (and, when valgrind is installed, instructions) per
//! message published and handled through `TestApp` on the in-process Kinesis, as a baseline.
//!
//! Everything runs on one current-thread runtime, so this thread's counts hold every task the
//! runtime polls. A run over `M` messages and one over `2M` each start a fresh service (not
//! counted); per message = (total(2M) - total(M)) / M, so what happens once (the first delivery,
//! buffers growing) cancels out.

use std::hint::black_box;
use std::path::PathBuf;
use std::process::{Command, ExitCode};

use ruststream::testing::{BrokerHandle, TestApp};
use ruststream_kinesis::prelude::*;
use serde::Serialize;

use crate::report::{Figure, thousands};
use crate::service::BenchRecord;
use crate::{Error, Options};

const STREAM: &str = "bench-in-process";

#[derive(Debug, Serialize, Outgoing)]
#[outgoing(name = "bench-in-process")]
struct InRecord {
    id: u64,
    sku: &'static str,
    quantity: u32,
}

/// Decodes and acknowledges: the framework's and the crate's path, and nothing else.
#[subscriber(KinesisStream::new(STREAM).create_if_missing(1))]
async fn tally(record: &BenchRecord) -> HandlerOutcome {
    black_box(record.id);
    HandlerOutcome::ack()
}

fn app() -> impl App<State = ()> {
    RustStream::new(AppInfo::new("kinesis-bench-in-process", "0.1.0")).with_broker(
        KinesisBroker::new(),
        |b| {
            b.include(tally);
        },
    )
}

/// Publishes one message through the harness's handle on the broker, which a test takes once
/// and publishes many through (taking it costs the harness an allocation of its own).
async fn publish(broker: &BrokerHandle<'_>, id: u64) -> Result<(), Error> {
    let record = InRecord {
        id,
        sku: "sku-07",
        quantity: 3,
    };
    broker
        .message(&record)
        .publish()
        .await
        .map_err(|err| format!("publish: {err}"))?;
    Ok(())
}

/// The measured region: `count` publishes, each handled before it returns. Its name is what
/// callgrind toggles collection on, so it must stay a plain, non-generic, never-inlined function.
#[inline(never)]
fn publishes(runtime: &tokio::runtime::Runtime, tb: &TestApp<()>, count: u64) -> Result<(), Error> {
    runtime.block_on(async {
        let broker = tb.broker::<KinesisBroker>();
        for id in 0..count {
            publish(&broker, id).await?;
        }
        Ok(())
    })
}

/// Runs `count` messages through a fresh service and returns this thread's allocations and
/// bytes allocated during them (the start and the shutdown are not counted).
fn counted(count: u64) -> Result<(u64, u64), Error> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let tb = runtime.block_on(TestApp::start(app()))?;
    // The first delivery touches what every later one finds ready.
    runtime.block_on(publish(&tb.broker::<KinesisBroker>(), u64::MAX))?;
    let mut result = Ok(());
    let info = allocation_counter::measure(|| result = publishes(&runtime, &tb, count));
    result?;
    let handled = tb
        .broker::<KinesisBroker>()
        .subscriber(STREAM)
        .received::<BenchRecord>()
        .len() as u64;
    runtime.block_on(tb.shutdown())?;
    if handled != count + 1 {
        return Err(format!("handled {handled} of {} messages", count + 1).into());
    }
    Ok((info.count_total, info.bytes_total))
}

/// `kinesis-bench in-process-region COUNT`: one counted region, for callgrind.
pub fn region_command(opts: &Options) -> ExitCode {
    let Some(count) = opts.rest.first().and_then(|c| c.parse::<u64>().ok()) else {
        eprintln!("usage: kinesis-bench in-process-region COUNT");
        return ExitCode::from(64);
    };
    match counted(count) {
        Ok((allocations, _)) => {
            println!("ALLOCATIONS {allocations}");
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("kinesis-bench: {err}");
            ExitCode::FAILURE
        }
    }
}

/// Instructions of the region over `count` messages, by callgrind; `None` without valgrind.
fn instructions(count: u64) -> Result<Option<u64>, Error> {
    if Command::new("valgrind").arg("--version").output().is_err() {
        return Ok(None);
    }
    let dir =
        PathBuf::from(std::env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| "target".to_owned()))
            .join("kinesis-bench");
    std::fs::create_dir_all(&dir)?;
    let out = dir.join(format!("callgrind.{count}.out"));
    let status = Command::new("valgrind")
        .arg("--tool=callgrind")
        .arg(format!("--callgrind-out-file={}", out.display()))
        .arg("--collect-atstart=no")
        .arg("--toggle-collect=kinesis_bench::in_process::publishes")
        .arg(std::env::current_exe()?)
        .args(["in-process-region", &count.to_string()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()?;
    if !status.success() {
        return Err(format!("valgrind exited with {status}").into());
    }
    let text = std::fs::read_to_string(&out)?;
    let total = text
        .lines()
        .find_map(|l| {
            l.strip_prefix("summary:")
                .or_else(|| l.strip_prefix("totals:"))
        })
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse::<u64>().ok())
        .ok_or("no instruction total in the callgrind output")?;
    Ok(Some(total))
}

pub async fn run(opts: &Options) -> Result<Vec<Figure>, Error> {
    let m: u64 = if opts.quick { 500 } else { 2000 };
    // The counts run on a thread of their own: they need a current-thread runtime.
    let (allocs, instr) = tokio::task::spawn_blocking(move || {
        let once = counted(m)?;
        let twice = counted(2 * m)?;
        let calls = match (instructions(m)?, instructions(2 * m)?) {
            (Some(a), Some(b)) => Some((a, b)),
            _ => None,
        };
        Ok::<_, Error>(((once, twice), calls))
    })
    .await??;
    let ((a1, b1), (a2, b2)) = allocs;
    let per = |x1: u64, x2: u64| x2.saturating_sub(x1) as f64 / m as f64;
    let mut f = Figure::new("per-message cost in process", "in-process");
    let allocations = per(a1, a2);
    let bytes = per(b1, b2);
    f.measured = match instr {
        Some((i1, i2)) => format!(
            "{} instructions, {allocations:.1} allocations ({} B) per message",
            thousands(per(i1, i2)),
            thousands(bytes)
        ),
        None => format!(
            "{allocations:.1} allocations ({} B) per message (valgrind not installed: no instruction count)",
            thousands(bytes)
        ),
    };
    // Since `TestApp` runs the real shard reader (2026-12-04): three machine steps, a read, a
    // send and a wake per record, where the push engine it replaced (14,608) did none of them.
    f.target = "≤ 23,000 instructions, ≤ 12 allocations".to_owned();
    f.pass = Some(allocations <= 12.0 && instr.is_none_or(|(i1, i2)| per(i1, i2) <= 23_000.0));
    f.detail(format!(
        "`TestApp::start` on the in-process Kinesis, a `#[subscriber]` that decodes ~40 B of \
         JSON and acks, `broker.message(&value).publish()` (which returns once the handler \
         settled) on the handle `tb.broker::<KinesisBroker>()` taken once; one current-thread \
         runtime; per message = (total({}) - total({m})) / {m}",
        2 * m
    ));
    f.detail(format!(
        "allocations: {a1} over {m} messages, {a2} over {}; allocation counter: the \
         `allocation-counter` crate (this thread's allocations)",
        2 * m
    ));
    if let Some((i1, i2)) = instr {
        f.detail(format!(
            "instructions: {i1} over {m}, {i2} over {} (valgrind --tool=callgrind, collection \
             toggled on `kinesis_bench::in_process::publishes`)",
            2 * m
        ));
    }
    Ok(vec![f])
}

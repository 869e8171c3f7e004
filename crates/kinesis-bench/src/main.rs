//! `kinesis-bench`: what ruststream-kinesis costs and how fast it hands shards over, measured
//! against the local stack, each figure a ratio or a median taken within one run.
//!
//! ```text
//! kinesis-bench all [--quick] [--out FILE]     every figure, one Markdown report
//! kinesis-bench consume | checkpoints | metrics-cost | fan-out | handover | takeover | balance | growth | writes | poll-cost | cost | startup | publish | publish-aggregated
//!               | consume-aggregated
//!               | in-process | memory | record-path [--quick]
//! ```
//!
//! The stack is `KINESIS_TEST_ENDPOINT` (else `AWS_ENDPOINT_URL`, else
//! `http://127.0.0.1:4566`); `scripts/bench.sh` starts it, runs `all` in release mode and stops
//! what it started. The method behind each figure is in `docs/src/benchmarks.md`.
// The binary holds no unsafe code of its own; the allocation counter it links brings its own
// global allocator.
#![deny(unsafe_code)]

mod balance;
mod child;
mod consume;
mod consume_aggregated;
mod cost;
mod counting;
mod exactly_once;
mod fan_out;
mod growth;
mod handover;
mod in_process;
mod memory;
mod poll_cost;
mod publish;
mod publish_aggregated;
mod record_path;
mod report;
mod service;
mod stack;
mod startup;
mod writes;

use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{CommandFactory, Parser, ValueEnum};
use report::Figure;
use stack::Stack;

/// Every error of a figure, boxed: a benchmark reports it and goes on with the next figure.
pub type Error = Box<dyn std::error::Error + Send + Sync>;

/// Speed and cost of ruststream-kinesis against the local stack, each figure a ratio or a median
/// taken within one run; each command prints a Markdown table of its figures.
///
/// The stack: KINESIS_TEST_ENDPOINT, else AWS_ENDPOINT_URL, else http://127.0.0.1:4566
/// (scripts/local-stack.sh start).
#[derive(Debug, Parser)]
#[command(name = "kinesis-bench", version)]
struct Cli {
    /// What to measure.
    command: Command,
    /// One repetition and shorter windows: a smoke run, not figures to publish.
    #[arg(long)]
    quick: bool,
    /// Also write the report to FILE.
    #[arg(long, value_name = "FILE")]
    out: Option<String>,
    /// `cost` only: the fleets on this many shards alone (8, 64 or 256).
    #[arg(long, value_name = "N")]
    shards: Option<u32>,
    /// `cost` only: the fleets of this many instances alone (1, 4 or 16).
    #[arg(long, value_name = "N")]
    instances: Option<usize>,
    /// `cost` only: idle fleets alone.
    #[arg(long)]
    idle: bool,
    /// `cost` only: fleets that keep their leases alive by beat
    /// (`keep_leases_alive_by_beat(true)`, balancing as the others) instead of renewing each row.
    #[arg(long)]
    by_beat: bool,
    /// `cost` only: fleets whose stores keep each notice's head apart
    /// (`DynamoLeaseStore::keep_notice_head_apart()`), each notice row priced by its size.
    #[arg(long)]
    apart: bool,
    /// `cost` only: fleets whose stores read the polls eventually consistent
    /// (`DynamoLeaseStore::eventually_consistent_polls()`), those reads priced at half a unit.
    #[arg(long)]
    behind: bool,
    /// `cost` only: count over windows of this many seconds (default 60; 300 spans the
    /// five-minute cadence at which every row is read).
    #[arg(long, value_name = "SECS")]
    window: Option<u64>,
    /// `consume` only: the records of each round (default 20,000; --quick: 8,000).
    #[arg(long, value_name = "N")]
    records: Option<u64>,
    /// The arguments of the internal commands (the child processes of some figures).
    #[arg(hide = true, trailing_var_arg = true, allow_hyphen_values = true)]
    rest: Vec<String>,
}

/// The figures, and the internal commands some of them run in child processes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Command {
    /// Every figure below in one run (several minutes; --quick: one repetition each).
    All,
    /// Service with MemoryLeaseStore ÷ a hand-written GetRecords loop (records/s).
    Consume,
    /// Service with DynamoLeaseStore ÷ with MemoryLeaseStore (records/s).
    Checkpoints,
    /// Consume and checkpoints in one run, as `all` measures them.
    #[value(name = "consume+checkpoints")]
    ConsumeCheckpoints,
    /// CPU per record consumed with the crate's metrics on ÷ off.
    MetricsCost,
    /// Enhanced fan-out ÷ polling on one stream: records/s catching up a backlog, and
    /// publish-to-handler latency at a steady trickle (median, p99).
    FanOut,
    /// Stop of one instance (a release) -> first record handled by the other (median of 5).
    Handover,
    /// SIGKILL of one instance -> first record handled by the other (median of 5), with leases
    /// renewed row by row and kept alive by beat.
    Takeover,
    /// 8 shards, balancing instances joining up to 4 then leaving to 2: seconds until even after
    /// each change, records redelivered and lost.
    Balance,
    /// One instance reading 4, 16 and 48 shards under the same load per shard: CPU s per million
    /// records, lease-table writes per shard per minute, memory per shard.
    Growth,
    /// Exactly once into DynamoDB ÷ at least once: records/s on one shard, a count per record
    /// staged and committed with the checkpoint, against an UpdateItem per record.
    ExactlyOnce,
    /// What coordination costs as a fleet grows: lease-table and Kinesis control-plane calls
    /// per instance per minute, idle and loaded, at 8, 64 and 256 shards with 1, 4 and 16
    /// instances; units and dollars a month beside the KCL's computed figure (not in `all`:
    /// about half an hour; --quick: 8 and 64 shards, 1 and 4 instances).
    Cost,
    /// Lease-table writes per shard per minute: idle, loaded (default 1 s cadence), a write per
    /// move, a 1.5 s cadence; the handover poll's calls per standby instance.
    Writes,
    /// The handover poll's read units per standby instance per minute at 10, 100 and 1,000 rows
    /// in the table, with the stream's notice and without.
    PollCost,
    /// start() -> every one of 40 shards read, one instance.
    Startup,
    /// Messages/s published through the crate ÷ a hand-written PutRecords loop.
    Publish,
    /// User records/s per shard published aggregated (KPL) ÷ the plain PutRecords loop.
    PublishAggregated,
    /// User records/s read by the service from KPL aggregates ÷ the same records written plain,
    /// and CPU per user record.
    ConsumeAggregated,
    /// Instructions (callgrind, when valgrind is installed) and allocations per message through
    /// TestApp.
    InProcess,
    /// Resident memory per owned shard with a backlog, and that it stays bounded.
    Memory,
    /// The crate's own instructions per record consumed: `consume --quick` under callgrind with
    /// one worker thread, the functions of a record's path (not in `all`: needs valgrind).
    RecordPath,
    /// Internal: one region of `in-process`, measured under callgrind (COUNT).
    #[value(hide = true)]
    InProcessRegion,
    /// Internal: an instance of `handover` and `takeover` (TABLE STREAM OWNER [by-beat]).
    #[value(hide = true)]
    Child,
    /// Internal: an instance of `memory` (STREAM SECONDS).
    #[value(hide = true)]
    MemoryChild,
    /// Internal: an instance of `growth` (STREAM SHARDS BACKLOG WARMUP WINDOW).
    #[value(hide = true)]
    GrowthChild,
    /// Internal: the killed instance of `exactly-once` (TABLE STREAM PREFIX OWNER).
    #[value(hide = true)]
    ExactlyOnceChild,
}

impl Command {
    /// The command's name on the command line.
    fn name(self) -> String {
        self.to_possible_value()
            .map(|value| value.get_name().to_owned())
            .unwrap_or_default()
    }

    /// Whether it is one of the child processes' commands, which take arguments of their own.
    fn internal(self) -> bool {
        matches!(
            self,
            Self::InProcessRegion
                | Self::Child
                | Self::MemoryChild
                | Self::GrowthChild
                | Self::ExactlyOnceChild
        )
    }
}

/// The command line's options.
#[derive(Debug, Clone, Default)]
pub struct Options {
    pub quick: bool,
    pub out: Option<String>,
    /// Arguments after the command (the internal child commands take theirs here).
    pub rest: Vec<String>,
    /// `cost`: the fleets on this many shards alone.
    pub shards: Option<u32>,
    /// `cost`: the fleets of this many instances alone.
    pub instances: Option<usize>,
    /// `cost`: idle fleets alone.
    pub idle: bool,
    /// `cost`: fleets keeping their leases alive by beat, not balancing.
    pub by_beat: bool,
    /// `cost`: fleets whose stores keep each notice's head apart.
    pub apart: bool,
    /// `cost`: fleets whose stores read the polls eventually consistent.
    pub behind: bool,
    /// `cost`: the counting window, in seconds.
    pub window: Option<u64>,
    /// `consume`: the records of each round.
    pub records: Option<u64>,
}

/// Reads the command line: the command and its options; `Err` a clap error to print (for
/// `--help` and `--version` too, printed on stdout).
fn parse<I, T>(args: I) -> Result<(Command, Options), clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let cli = Cli::try_parse_from(args)?;
    if !cli.command.internal() && !cli.rest.is_empty() {
        return Err(Cli::command().error(
            clap::error::ErrorKind::UnknownArgument,
            format!("unexpected argument(s) {:?}", cli.rest),
        ));
    }
    Ok((
        cli.command,
        Options {
            quick: cli.quick,
            out: cli.out,
            rest: cli.rest,
            shards: cli.shards,
            instances: cli.instances,
            idle: cli.idle,
            by_beat: cli.by_beat,
            apart: cli.apart,
            behind: cli.behind,
            window: cli.window,
            records: cli.records,
        },
    ))
}

fn main() -> ExitCode {
    if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .init();
    }
    let (command, opts) = match parse(std::env::args_os()) {
        Ok(parsed) => parsed,
        Err(err) => {
            let _ = err.print();
            return if err.use_stderr() {
                ExitCode::from(64)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    // Internal commands: a region measured under callgrind, and the child processes of the
    // takeover and memory figures.
    match command {
        Command::InProcessRegion => return in_process::region_command(&opts),
        Command::Child => return run_async(handover::child_command(opts)),
        Command::MemoryChild => return run_async(memory::child_command(opts)),
        Command::GrowthChild => return run_async(growth::child_command(opts)),
        Command::ExactlyOnceChild => return run_async(exactly_once::child_command(opts)),
        _ => {}
    }
    let command = command.name();
    let started = Instant::now();
    let figures = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime.block_on(figures(&command, &opts)),
        Err(err) => {
            eprintln!("kinesis-bench: no runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    let figures = match figures {
        Ok(figures) => figures,
        Err(err) => {
            eprintln!("kinesis-bench: {err}");
            return ExitCode::FAILURE;
        }
    };
    let mut title = format!("kinesis-bench {command}");
    if opts.quick {
        title.push_str(" --quick");
    }
    let text = report::markdown(&figures, &title, started.elapsed());
    println!("{text}");
    if let Some(path) = &opts.out
        && let Err(err) = std::fs::write(path, &text)
    {
        eprintln!("kinesis-bench: cannot write {path}: {err}");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

fn run_async(work: impl Future<Output = Result<(), Error>>) -> ExitCode {
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("kinesis-bench: no runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(work) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("kinesis-bench: {err}");
            ExitCode::FAILURE
        }
    }
}

/// Runs the figures `command` names; one that fails becomes a row saying why.
async fn figures(command: &str, opts: &Options) -> Result<Vec<Figure>, Error> {
    let needs_stack = command != "in-process";
    let stack = Stack::new(&stack::endpoint());
    if needs_stack {
        stack.check().await?;
    }
    let mut out = Vec::new();
    let steps: &[&str] = match command {
        "all" => &[
            "in-process",
            "publish",
            "publish-aggregated",
            "consume+checkpoints",
            "metrics-cost",
            "fan-out",
            "consume-aggregated",
            "startup",
            "memory",
            "writes",
            "poll-cost",
            "handover",
            "takeover",
            "balance",
            "growth",
            "exactly-once",
        ],
        "consume" => &["consume"],
        "checkpoints" => &["checkpoints"],
        _ => std::slice::from_ref(&command),
    };
    for step in steps {
        eprintln!("kinesis-bench: {step}");
        let taken = Instant::now();
        let result = match *step {
            "in-process" => in_process::run(opts).await,
            "record-path" => record_path::run(),
            "publish" => publish::run(&stack, opts).await,
            "publish-aggregated" => publish_aggregated::run(&stack, opts).await,
            "consume-aggregated" => consume_aggregated::run(&stack, opts).await,
            "consume" => {
                consume::run(
                    &stack,
                    opts,
                    &[
                        consume::Side::Sdk,
                        consume::Side::Memory,
                        consume::Side::Batches,
                    ],
                )
                .await
            }
            "checkpoints" => {
                consume::run(
                    &stack,
                    opts,
                    &[consume::Side::Memory, consume::Side::Dynamo],
                )
                .await
            }
            "consume+checkpoints" => {
                consume::run(
                    &stack,
                    opts,
                    &[
                        consume::Side::Sdk,
                        consume::Side::Memory,
                        consume::Side::Batches,
                        consume::Side::Dynamo,
                    ],
                )
                .await
            }
            "metrics-cost" => {
                consume::run(
                    &stack,
                    opts,
                    &[consume::Side::Memory, consume::Side::Metered],
                )
                .await
            }
            "fan-out" => {
                let mut figures = consume::run(
                    &stack,
                    opts,
                    &[consume::Side::Memory, consume::Side::FanOut],
                )
                .await?;
                figures.extend(fan_out::run(&stack, opts).await?);
                Ok(figures)
            }
            "startup" => startup::run(&stack, opts).await,
            "memory" => memory::run(&stack, opts).await,
            "writes" => writes::run(&stack, opts).await,
            "poll-cost" => poll_cost::run(&stack, opts).await,
            "handover" => handover::after_release(&stack, opts).await,
            "takeover" => handover::crash(&stack, opts).await,
            "balance" => balance::run(&stack, opts).await,
            "growth" => growth::run(&stack, opts).await,
            "exactly-once" => exactly_once::run(&stack, opts).await,
            "cost" => cost::run(&stack, opts).await,
            _ => unreachable!("every step is known"),
        };
        eprintln!(
            "kinesis-bench: {step} done in {:.0} s",
            taken.elapsed().as_secs_f64()
        );
        match result {
            Ok(figures) => out.extend(figures),
            Err(err) => {
                eprintln!("kinesis-bench: {step} failed: {err}");
                out.push(Figure::failed(
                    "(failed)",
                    step,
                    "-",
                    &err.to_string().replace('|', "/"),
                ));
            }
        }
    }
    Ok(out)
}

/// Waits `d`, for the figures that let time pass.
pub async fn pause(d: Duration) {
    tokio::time::sleep(d).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_reads_command_flags_and_rest() {
        let line =
            |args: &[&str]| parse(std::iter::once("kinesis-bench").chain(args.iter().copied()));
        let (command, opts) = line(&["child", "--quick", "a", "b"]).unwrap();
        assert_eq!(command, Command::Child);
        assert!(opts.quick);
        assert_eq!(opts.rest, ["a", "b"]);
        let (command, opts) = line(&["consume+checkpoints", "--out", "r.md"]).unwrap();
        assert_eq!(command.name(), "consume+checkpoints");
        assert_eq!(opts.out.as_deref(), Some("r.md"));
        assert_eq!(line(&["poll-cost"]).unwrap().0.name(), "poll-cost");
        // Wrong lines are refused on stderr; --help and --version are answered on stdout.
        for wrong in [
            &[][..],
            &["--out"],
            &["nothing"],
            &["all", "--bogus"],
            &["all", "extra"],
        ] {
            assert!(line(wrong).unwrap_err().use_stderr(), "{wrong:?}");
        }
        for asked in ["--help", "--version"] {
            assert!(!line(&[asked]).unwrap_err().use_stderr(), "{asked}");
        }
        let help = Cli::command().render_long_help().to_string();
        assert!(
            help.contains("metrics-cost") && !help.contains("growth-child"),
            "{help}"
        );
        Cli::command().debug_assert();
    }
}

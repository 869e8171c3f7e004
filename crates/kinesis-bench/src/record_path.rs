//! The crate's own path of a record consumed, in instructions a record: `consume --quick` run
//! again under callgrind with one worker thread, and the inclusive cost of the functions a record
//! passes through between the SDK's answer and the framework's dispatch (and back, to its
//! settle and drop), divided by the records the service sides handled.

use std::path::PathBuf;
use std::process::Command;

use crate::Error;
use crate::report::{Figure, thousands};

/// The crate's record path, in the order a record takes it: a name for the report, and the
/// function as `callgrind_annotate` names it (none calls another of the list on this path, so
/// their inclusive costs add up).
const PATH: &[(&str, &str)] = &[
    (
        "the SDK's records taken apart",
        "ruststream_kinesis::kinesis::api::fetched_records",
    ),
    (
        "decoded (KPL, envelope)",
        "ruststream_kinesis::live::reader::Reader::decoded",
    ),
    (
        "handed out under the shard's lock",
        "ruststream_kinesis::shard::ShardHandle::next_reads",
    ),
    (
        "the delivery built",
        "ruststream_kinesis::live::reader::deliver",
    ),
    (
        "the channel's send",
        "tokio::sync::mpsc::bounded::Sender<T>::try_send",
    ),
    (
        "the channel's receive",
        "tokio::sync::mpsc::chan::Rx<T,S>::recv",
    ),
    (
        "the pull's check",
        "<ruststream_kinesis::shard::ShardHandle as ruststream_kinesis::delivery::settlement::Settlement>::queued_standing",
    ),
    (
        "the lease check at the handler",
        "<ruststream_kinesis::shard::ShardHandle as ruststream_kinesis::delivery::settlement::Settlement>::standing",
    ),
    (
        "the settle",
        "ruststream_kinesis::delivery::message::KinesisMessage::settle_now",
    ),
    (
        "the delivery dropped",
        "core::ptr::drop_in_place<ruststream_kinesis::delivery::message::KinesisMessage>",
    ),
];

/// The target of issue 29, item 5.
const TARGET: f64 = 1_200.0;

pub fn run() -> Result<Vec<Figure>, Error> {
    let mut f = Figure::new("crate's own path per record consumed", "record-path");
    f.target = format!("≤ {} instructions", thousands(TARGET));
    if Command::new("valgrind").arg("--version").output().is_err() {
        f.measured = "not measured: valgrind is not installed".to_owned();
        return Ok(vec![f]);
    }
    let dir =
        PathBuf::from(std::env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| "target".to_owned()))
            .join("kinesis-bench");
    std::fs::create_dir_all(&dir)?;
    let out = dir.join("callgrind.record-path.out");
    let run = Command::new("valgrind")
        .arg("--tool=callgrind")
        .arg(format!("--callgrind-out-file={}", out.display()))
        .arg(std::env::current_exe()?)
        .args(["consume", "--quick"])
        .env("TOKIO_WORKER_THREADS", "1")
        .output()?;
    if !run.status.success() {
        return Err(format!(
            "consume --quick under valgrind exited with {}: {}",
            run.status,
            String::from_utf8_lossy(&run.stderr)
        )
        .into());
    }
    let log = String::from_utf8_lossy(&run.stderr);
    let records = service_records(&log);
    if records == 0 {
        return Err("consume --quick under valgrind: no service side handled a record".into());
    }
    let annotated = Command::new("callgrind_annotate")
        .args(["--inclusive=yes", "--threshold=100"])
        .arg(&out)
        .output()?;
    if !annotated.status.success() {
        return Err(format!("callgrind_annotate exited with {}", annotated.status).into());
    }
    let costs = inclusive_costs(&String::from_utf8_lossy(&annotated.stdout));
    let mut total = 0.0;
    let mut parts = Vec::new();
    for (label, function) in PATH {
        // A function renamed or inlined away would count as nothing, and the sum would look
        // better than the path is: the run fails instead, naming it.
        let Some(cost) = costs
            .iter()
            .find(|(name, _)| name == function)
            .map(|(_, cost)| *cost)
        else {
            return Err(format!(
                "record-path: `{function}` ({label}) is not in the profile; it was renamed or \
                 inlined: name what the record's path calls now in record_path.rs's PATH"
            )
            .into());
        };
        let per = cost as f64 / records as f64;
        total += per;
        parts.push(format!("{label} {}", thousands(per)));
    }
    f.measured = format!("{} instructions a record", thousands(total));
    f.pass = Some(total <= TARGET);
    f.detail(format!(
        "`valgrind --tool=callgrind kinesis-bench consume --quick` with TOKIO_WORKER_THREADS=1; \
         the inclusive instructions of the crate's functions on a record's path (the allocator \
         included), divided by the {records} records the two service sides handled"
    ));
    f.detail(format!("per record: {}", parts.join(", ")));
    Ok(vec![f])
}

/// The records the service sides of a `consume` run handled, from its progress lines
/// (`consume: round 1 service + MemoryLeaseStore: 8000 records, ...`).
fn service_records(log: &str) -> u64 {
    log.lines()
        .filter(|line| line.starts_with("consume: round") && line.contains(" service "))
        .filter_map(|line| {
            let (_, after) = line.rsplit_once("LeaseStore")?;
            let after = after.split_once(": ")?.1;
            after.split_whitespace().next()?.parse::<u64>().ok()
        })
        .sum()
}

/// Each function's inclusive instructions, from `callgrind_annotate --inclusive=yes` lines
/// (`14,228,662 ( 2.45%)  ???:name [/path/to/binary]`).
fn inclusive_costs(annotated: &str) -> Vec<(String, u64)> {
    annotated
        .lines()
        .filter_map(|line| {
            let line = line.trim_start();
            let (count, rest) = line.split_once(' ')?;
            let count = count.replace(',', "").parse::<u64>().ok()?;
            let (_, named) = rest.split_once("???:")?;
            let name = named.rsplit_once(" [").map_or(named, |(name, _)| name);
            Some((name.trim().to_owned(), count))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_service_sides_records_and_the_functions_costs_are_read_off_their_lines() {
        let log = "consume: round 1 SDK loop: 8000 records, 0.69 s from start\n\
                   consume: round 1 service + MemoryLeaseStore: 8000 records, 1.28 s\n\
                   consume: round 1 service + MemoryLeaseStore, batch handler: 7999 records, 1 s\n";
        assert_eq!(service_records(log), 15_999);
        let annotated = " 14,228,662 ( 2.45%)  ???:ruststream_kinesis::live::reader::deliver [/x/kinesis-bench]\n\
                         605,509,585 (100.0%)  PROGRAM TOTALS\n";
        assert_eq!(
            inclusive_costs(annotated),
            [(
                "ruststream_kinesis::live::reader::deliver".to_owned(),
                14_228_662
            )]
        );
    }
}

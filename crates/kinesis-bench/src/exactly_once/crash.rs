//! What a crash costs exactly once: a child process reads one pre-filled shard with the batch
//! handler that stages each record's count (A) and is killed with SIGKILL once it handled about
//! half of the records; an instance in this process takes the shard when the dead one's lease
//! runs out and reads on. Records handled again (the child's handlings whose commit never landed,
//! and the batches in flight) against effects applied twice (each count must be 1).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use ruststream_kinesis::{DynamoLeaseStore, LeaseKey, LeaseStore};

use super::{app, committed_through, count_tables, counts, set_side, tally};
use crate::report::Figure;
use crate::service::body;
use crate::stack::{self, Stack, unique};
use crate::{Error, Options};

/// How often the child says how many records it handled.
const REPORT_EVERY: Duration = Duration::from_millis(20);

pub(super) async fn run(stack: &Stack, records: u64) -> Result<Figure, Error> {
    let stream = unique("bench-eo-crash");
    stack.create_stream(&stream, 1).await?;
    stack.fill(&stream, records, body).await?;
    let (shard, _) = stack
        .shards(&stream)
        .await?
        .into_iter()
        .next()
        .ok_or("no shard")?;
    let last_sequence = stack
        .read_shard(&stream, &shard)
        .await?
        .1
        .ok_or("the filled shard reads empty")?;
    let prefix = unique("bench-counts");
    count_tables(stack, &prefix).await?;
    let store = stack.table("bench-eo-leases").await?;
    let table = store
        .table_name()
        .ok_or("the store names no table")?
        .to_owned();

    let (mut child, mut lines) = crate::child::spawn(
        &stack.url,
        &["exactly-once-child", &table, &stream, &prefix, "bench-eo-a"],
    )?;
    let half = records / 2;
    let mut child_handled = 0;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    while child_handled < half {
        match tokio::time::timeout_at(deadline, lines.recv()).await {
            Ok(Some(line)) => child_handled = handled_in(&line).unwrap_or(child_handled),
            Ok(None) => return Err("the child ended before handling half of the records".into()),
            Err(_) => {
                return Err("the child handled fewer than half of the records in 120 s".into());
            }
        }
    }
    child.start_kill()?;
    child.wait().await?;
    // What it said it handled before it died.
    while let Ok(line) = lines.try_recv() {
        child_handled = handled_in(&line).unwrap_or(child_handled);
    }

    let side = set_side(stack, &prefix);
    let leases: Arc<dyn LeaseStore> = Arc::new(store.clone());
    let killed = Instant::now();
    let running = app(stack.broker(leases, "bench-eo-b"), &stream, true, true)
        .start()
        .await?;
    let key = LeaseKey::new(stream.as_str(), shard.as_str());
    let deadline = killed + Duration::from_secs(180);
    let finished = loop {
        if committed_through(&store, &key, &last_sequence).await? {
            break killed.elapsed();
        }
        if Instant::now() > deadline {
            return Err("the taker did not finish the shard within 3 minutes of the kill".into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    running.shutdown().await?;
    let taker_handled = side.handled.load(Ordering::Relaxed);
    let (once, twice) = tally(&counts(stack, &prefix).await?);
    let again = (child_handled + taker_handled).saturating_sub(records);

    let mut figure = Figure::new("a crash, exactly once", "exactly-once");
    figure.measured = format!(
        "{again} records handled again, {twice} effects applied twice ({once} of {records} \
         counted once)"
    );
    figure.target = "0 effects applied twice".to_owned();
    figure.pass = Some(twice == 0 && once as u64 == records);
    figure.detail(format!(
        "{records} records pre-filled in one shard, read by A's batch handler (at most {} \
         records a batch) in a child process, killed with SIGKILL once it had handled {half}; \
         the child handled {child_handled} records by its own count, the instance that took the \
         shard over handled {taker_handled} and finished {:.1} s after the kill (the dead \
         instance's lease runs out first)",
        super::BATCH,
        finished.as_secs_f64()
    ));
    figure.detail(
        "the records handled again are those the child had handled whose commit had not landed \
         when it died: a handler runs ahead of its shard's commits by up to the shard's window \
         (`max_unsettled`, 10,000 by default), one transaction in flight at a time; each of them \
         is counted once all the same",
    );
    Ok(figure)
}

/// The count a `HANDLED n` line of the child gives.
fn handled_in(line: &str) -> Option<u64> {
    line.strip_prefix("HANDLED ")?.trim().parse().ok()
}

/// `kinesis-bench exactly-once-child TABLE STREAM PREFIX OWNER`: A's batch handler on `STREAM`,
/// its leases in `TABLE` and its counts in the tables of `PREFIX`, printing `HANDLED n` as the
/// records it handled grow, until it is killed (or five minutes pass).
pub async fn child_command(opts: Options) -> Result<(), Error> {
    let [table, stream, prefix, owner] = &opts.rest[..] else {
        return Err("usage: kinesis-bench exactly-once-child TABLE STREAM PREFIX OWNER".into());
    };
    let stack = Stack::new(&stack::endpoint());
    let side = set_side(&stack, prefix);
    let store: Arc<dyn LeaseStore> = Arc::new(DynamoLeaseStore::new(&stack.config, table.as_str()));
    let running = app(stack.broker(store, owner), stream, true, true)
        .start()
        .await?;
    let mut said = 0;
    let until = Instant::now() + Duration::from_secs(300);
    while Instant::now() < until {
        let handled = side.handled.load(Ordering::Relaxed);
        if handled != said {
            println!("HANDLED {handled}");
            said = handled;
        }
        tokio::time::sleep(REPORT_EVERY).await;
    }
    running.shutdown().await?;
    Ok(())
}

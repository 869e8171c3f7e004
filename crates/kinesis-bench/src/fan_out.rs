//! Enhanced fan-out against polling on one stream in one run: publish-to-handler latency at a
//! steady trickle, the two services reading the same records at once (each with a lease store
//! of its own, so each reads every record). The catch-up figure is `consume`'s, with the
//! fan-out side.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_sdk_kinesis::primitives::Blob;
use ruststream_kinesis::prelude::App;
use ruststream_kinesis::{LeaseTimings, MemoryLeaseStore};

use crate::consume::FAN_OUT_CONSUMER;
use crate::report::{Figure, median};
use crate::service::{self, Mount, Probe};
use crate::stack::{Stack, sdk, unique};
use crate::{Error, Options};

/// One record every 100 ms.
const GAP: Duration = Duration::from_millis(100);

pub async fn run(stack: &Stack, opts: &Options) -> Result<Vec<Figure>, Error> {
    let count: u64 = if opts.quick { 100 } else { 600 };
    let stream = unique("bench-fan-out");
    stack.create_stream(&stream, 2).await?;
    let result = trickle(stack, &stream, count).await;
    stack.delete_stream(&stream).await;
    let (polling, fan_out) = result?;
    let (p50, p99) = (percentile(&polling, 0.5), percentile(&polling, 0.99));
    let (f50, f99) = (percentile(&fan_out, 0.5), percentile(&fan_out, 0.99));
    let mut figure = Figure::new("publish-to-handler latency, fan-out ÷ polling", "fan-out");
    figure.measured = format!(
        "median {:.2} (fan-out {f50:.0} ms ÷ polling {p50:.0} ms); p99 {:.2} ({f99:.0} ms ÷ \
         {p99:.0} ms)",
        f50 / p50,
        f99 / p99
    );
    figure.target = "recorded".to_owned();
    figure.detail(format!(
        "{count} records, one every {} ms over a 2-shard stream, each a PutRecord call; the \
         latency of a record runs from just before its PutRecord to its handler; both services \
         run at once on the same records, each with a MemoryLeaseStore of its own, the polling \
         one at the default poll interval (1 s), the fan-out one through consumer \
         `{FAN_OUT_CONSUMER}`",
        GAP.as_millis()
    ));
    figure.detail(format!(
        "polling: {} records, median {p50:.0} ms, p99 {p99:.0} ms, max {:.0} ms; fan-out: {} \
         records, median {f50:.0} ms, p99 {f99:.0} ms, max {:.0} ms",
        polling.len(),
        percentile(&polling, 1.0),
        fan_out.len(),
        percentile(&fan_out, 1.0)
    ));
    figure.detail(
        "the local engine pushes a subscription's events about once a second, so on it fan-out \
         waits for the next push much as polling waits for the next call; on AWS events are \
         pushed as records arrive (about 70 ms from write to read), where polling waits up to \
         its poll interval",
    );
    Ok(vec![figure])
}

/// Runs both services on `stream`, publishes `count` records at the trickle, and returns each
/// side's latencies in milliseconds.
async fn trickle(stack: &Stack, stream: &str, count: u64) -> Result<(Vec<f64>, Vec<f64>), Error> {
    let polling_probe = Probe::recording();
    let fan_out_probe = Probe::recording();
    let polling = service::app(
        stack,
        Arc::new(MemoryLeaseStore::new()),
        &unique("bench-polling"),
        LeaseTimings::default(),
        Mount::new(stream),
        polling_probe.clone(),
    )
    .await
    .start()
    .await?;
    let fan_out = service::app(
        stack,
        Arc::new(MemoryLeaseStore::new()),
        &unique("bench-fan-out"),
        LeaseTimings::default(),
        Mount {
            fan_out: Some(FAN_OUT_CONSUMER.to_owned()),
            ..Mount::new(stream)
        },
        fan_out_probe.clone(),
    )
    .await
    .start()
    .await?;
    // Both read the shards before the first record is sent.
    crate::pause(Duration::from_secs(3)).await;
    let mut sent = HashMap::new();
    let started = tokio::time::Instant::now();
    for id in 0..count {
        tokio::time::sleep_until(started + GAP * u32::try_from(id)?).await;
        sent.insert(id, Instant::now());
        stack
            .kinesis
            .put_record()
            .stream_name(stream)
            .partition_key(format!("k{id}"))
            .data(Blob::new(service::body(id)))
            .send()
            .await
            .map_err(|err| format!("PutRecord {stream}: {}", sdk(err)))?;
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while (polling_probe.count() < count || fan_out_probe.count() < count)
        && Instant::now() < deadline
    {
        crate::pause(Duration::from_millis(50)).await;
    }
    polling.shutdown().await?;
    fan_out.shutdown().await?;
    let latencies = |probe: &Probe| -> Result<Vec<f64>, Error> {
        let arrivals = probe.arrivals();
        if (arrivals.len() as u64) < count {
            return Err(format!("a service handled {} of {count} records", arrivals.len()).into());
        }
        Ok(arrivals
            .iter()
            .filter_map(|(id, at)| Some(at.duration_since(*sent.get(id)?).as_secs_f64() * 1e3))
            .collect())
    };
    Ok((latencies(&polling_probe)?, latencies(&fan_out_probe)?))
}

/// The `q` quantile of `values` (nearest rank).
fn percentile(values: &[f64], q: f64) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    if q == 0.5 {
        return median(values);
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

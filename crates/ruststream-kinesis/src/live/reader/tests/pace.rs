//! Pacing: a reader behind the tip reads on; one at the tip calls once per poll interval.
use std::future::{Future, ready};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::doubles::fake_kinesis;
use crate::prelude::*;

/// Counts what it handles.
struct Count(Arc<AtomicUsize>);

impl Handle<u32> for Count {
    fn handle(
        &self,
        _n: &u32,
        _outs: &(),
        _ctx: &mut Context<'_>,
    ) -> impl Future<Output = Result<(), HandlerOutcome>> {
        self.0.fetch_add(1, Ordering::SeqCst);
        ready(Ok(()))
    }
}

/// A `GetRecords` answer of `records` JSON `1`s, `MillisBehindLatest` `behind`.
fn records(first: u64, records: u64, behind: i64) -> Value {
    let records: Vec<Value> = (first..first + records)
        .map(|n| json!({ "Data": "MQ==", "PartitionKey": "k", "SequenceNumber": format!("{:056}", n) }))
        .collect();
    json!({ "Records": records, "NextShardIterator": "next", "MillisBehindLatest": behind })
}

/// One open shard of `orders`, and `GetRecords` answers in this order: a full batch (behind
/// whatever `MillisBehindLatest` says), an empty answer far from the tip (behind), one record
/// at the tip (caught up), then records at the tip for ever.
fn one_shard(operation: &str, gets: &AtomicUsize) -> (u16, Value) {
    let answer = match operation {
        "DescribeStreamSummary" => json!({ "StreamDescriptionSummary": {
            "StreamName": "orders",
            "StreamARN": "arn:aws:kinesis:us-east-1:000000000000:stream/orders",
            "StreamStatus": "ACTIVE",
            "RetentionPeriodHours": 24,
            "StreamCreationTimestamp": 0,
            "EnhancedMonitoring": [],
            "OpenShardCount": 1,
        }}),
        "ListShards" => json!({ "Shards": [{
            "ShardId": "shardId-000000000000",
            "HashKeyRange": {
                "StartingHashKey": "0",
                "EndingHashKey": "340282366920938463463374607431768211455",
            },
            "SequenceNumberRange": { "StartingSequenceNumber": format!("{:056}", 0) },
        }]}),
        "GetShardIterator" => json!({ "ShardIterator": "first" }),
        "GetRecords" => match gets.fetch_add(1, Ordering::SeqCst) {
            0 => records(1, 2, 0),
            1 => records(3, 0, 60_000),
            2 => records(3, 1, 0),
            n => records(10 * n as u64, 1, 0),
        },
        other => return (400, fake_kinesis::error(&format!("Unexpected{other}"))),
    };
    (200, answer)
}

fn get_records_calls(seen: &fake_kinesis::Seen) -> usize {
    let seen = seen.lock().unwrap();
    seen.iter().filter(|(op, _)| op == "GetRecords").count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_reads_on_while_behind_and_once_per_poll_interval_at_the_tip() {
    let gets = Arc::new(AtomicUsize::new(0));
    let answers = Arc::clone(&gets);
    let (config, seen) = fake_kinesis::config(move |_, op, _| one_shard(op, &answers));
    let handled = Arc::new(AtomicUsize::new(0));
    let stream = KinesisStream::new("orders")
        .batch_size(2)
        .poll_interval(Duration::from_secs(60));
    let count = Count(Arc::clone(&handled));
    let app = RustStream::new(AppInfo::new("pace", "0.1.0")).with_broker(
        KinesisBroker::from_config(config),
        |b| {
            b.include(subscriber(stream, count).build());
        },
    );
    let running = app
        .start()
        .await
        .expect("the app starts on the fake Kinesis");

    // Behind (a full batch, then an empty answer 60 s from the tip): no poll interval
    // between the calls, so the third comes long before the 60 s one would allow.
    let deadline = Instant::now() + Duration::from_secs(30);
    while get_records_calls(&seen) < 3 {
        assert!(
            Instant::now() < deadline,
            "a reader behind the tip waited a poll interval: {} GetRecords calls",
            get_records_calls(&seen)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // At the tip (one record, MillisBehindLatest 0): the next call waits the interval.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        get_records_calls(&seen),
        3,
        "a caught-up reader called again before its poll interval"
    );
    assert_eq!(handled.load(Ordering::SeqCst), 3);
    running.shutdown().await.expect("shutdown");
}

//! A one-stream Kinesis behind the fake HTTP layer: shards of records the test appends to,
//! iterators that point into them, and a hook that lets a test answer any request its own way
//! first (a throttle, a refusal, a hang). Enough of the service for a whole broker to run on,
//! so the reader's own code meets the faults the local stack never produces.

use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use crate::doubles::fake_kinesis::{self, Reply, Seen};

/// One record of a fake shard.
#[derive(Debug, Clone)]
pub(crate) struct FakeRecord {
    pub(crate) sequence: u64,
    pub(crate) data: Vec<u8>,
    pub(crate) key: String,
    pub(crate) arrived_ms: u64,
}

/// One fake shard.
#[derive(Debug, Clone, Default)]
pub(crate) struct FakeShard {
    pub(crate) id: String,
    pub(crate) parents: Vec<String>,
    pub(crate) records: Vec<FakeRecord>,
    pub(crate) closed: bool,
}

/// The stream's state, shared with the test.
#[derive(Debug, Default)]
pub(crate) struct FakeStreamState {
    pub(crate) shards: Vec<FakeShard>,
    next_sequence: u64,
}

impl FakeStreamState {
    /// Appends `data` to shard `index`; answers its sequence number.
    pub(crate) fn append(&mut self, index: usize, data: &[u8]) -> String {
        self.next_sequence += 1;
        let sequence = self.next_sequence;
        self.shards[index].records.push(FakeRecord {
            sequence,
            data: data.to_vec(),
            key: format!("key-{sequence}"),
            arrived_ms: crate::epoch_millis(),
        });
        sequence_string(sequence)
    }
}

/// A Kinesis sequence number of the fake: 56 digits, like the service's.
pub(crate) fn sequence_string(n: u64) -> String {
    format!("{n:056}")
}

/// The stream `orders` with `shards` open shards, no records yet.
pub(crate) fn stream(shards: usize) -> Arc<Mutex<FakeStreamState>> {
    Arc::new(Mutex::new(FakeStreamState {
        shards: (0..shards)
            .map(|i| FakeShard {
                id: format!("shardId-{i:012}"),
                ..FakeShard::default()
            })
            .collect(),
        next_sequence: 0,
    }))
}

/// An AWS configuration answering from `state`, after `hook`: a test's first say on each
/// request (`Some` answers it, `None` lets the fake stream answer).
pub(crate) fn config(
    state: &Arc<Mutex<FakeStreamState>>,
    hook: impl Fn(usize, &str, &Value) -> Option<Reply> + Send + Sync + 'static,
) -> (aws_config::SdkConfig, Seen) {
    let state = Arc::clone(state);
    fake_kinesis::replying(move |n, operation, body| match hook(n, operation, body) {
        Some(Reply::Stream(delay)) => answer(&state.lock().unwrap(), operation, body).after(delay),
        Some(reply) => reply,
        None => answer(&state.lock().unwrap(), operation, body),
    })
}

fn answer(state: &FakeStreamState, operation: &str, body: &Value) -> Reply {
    match operation {
        "DescribeStreamSummary" => Reply::ok(json!({ "StreamDescriptionSummary": {
            "StreamName": "orders",
            "StreamARN": "arn:aws:kinesis:us-east-1:000000000000:stream/orders",
            "StreamStatus": "ACTIVE",
            "RetentionPeriodHours": 24,
            "StreamCreationTimestamp": 0,
            "EnhancedMonitoring": [],
            "OpenShardCount": state.shards.iter().filter(|s| !s.closed).count(),
        }})),
        "ListShards" => {
            let shards: Vec<Value> = state
                .shards
                .iter()
                .map(|shard| {
                    let mut range = json!({ "StartingSequenceNumber": sequence_string(0) });
                    if shard.closed {
                        range["EndingSequenceNumber"] = json!(sequence_string(u64::MAX >> 8));
                    }
                    let mut info = json!({
                        "ShardId": shard.id,
                        "HashKeyRange": { "StartingHashKey": "0", "EndingHashKey": "1" },
                        "SequenceNumberRange": range,
                    });
                    if let Some(parent) = shard.parents.first() {
                        info["ParentShardId"] = json!(parent);
                    }
                    if let Some(adjacent) = shard.parents.get(1) {
                        info["AdjacentParentShardId"] = json!(adjacent);
                    }
                    info
                })
                .collect();
            Reply::ok(json!({ "Shards": shards }))
        }
        "GetShardIterator" => {
            let Some((index, shard)) = state
                .shards
                .iter()
                .enumerate()
                .find(|(_, shard)| body["ShardId"] == json!(shard.id))
            else {
                return Reply::error(400, "ResourceNotFoundException");
            };
            let at = |sequence: &Value| -> Option<usize> {
                let sequence: u64 = sequence.as_str()?.parse().ok()?;
                shard.records.iter().position(|r| r.sequence >= sequence)
            };
            let position = match body["ShardIteratorType"].as_str().unwrap_or_default() {
                "TRIM_HORIZON" => 0,
                "LATEST" => shard.records.len(),
                "AT_SEQUENCE_NUMBER" => match at(&body["StartingSequenceNumber"]) {
                    Some(position) => position,
                    None => return Reply::error(400, "InvalidArgumentException"),
                },
                "AFTER_SEQUENCE_NUMBER" => {
                    let sequence: u64 = body["StartingSequenceNumber"]
                        .as_str()
                        .and_then(|s| s.parse().ok())
                        .unwrap_or(0);
                    shard
                        .records
                        .iter()
                        .position(|r| r.sequence > sequence)
                        .unwrap_or(shard.records.len())
                }
                "AT_TIMESTAMP" => {
                    let at_ms = (body["Timestamp"].as_f64().unwrap_or(0.0) * 1000.0) as u64;
                    shard
                        .records
                        .iter()
                        .position(|r| r.arrived_ms >= at_ms)
                        .unwrap_or(shard.records.len())
                }
                _ => return Reply::error(400, "InvalidArgumentException"),
            };
            Reply::ok(json!({ "ShardIterator": format!("{index}:{position}") }))
        }
        "GetRecords" => {
            let iterator = body["ShardIterator"].as_str().unwrap_or_default();
            let Some((index, position)) = iterator
                .split_once(':')
                .and_then(|(i, p)| Some((i.parse::<usize>().ok()?, p.parse::<usize>().ok()?)))
            else {
                return Reply::error(400, "InvalidArgumentException");
            };
            let shard = &state.shards[index];
            let limit = body["Limit"].as_u64().unwrap_or(10_000) as usize;
            let end = (position + limit).min(shard.records.len());
            let records: Vec<Value> = shard.records[position..end]
                .iter()
                .map(|record| {
                    json!({
                        "Data": aws_smithy_types::base64::encode(&record.data),
                        "PartitionKey": record.key,
                        "SequenceNumber": sequence_string(record.sequence),
                        "ApproximateArrivalTimestamp": record.arrived_ms as f64 / 1000.0,
                    })
                })
                .collect();
            let behind = if end < shard.records.len() { 1000 } else { 0 };
            let mut answer = json!({ "Records": records, "MillisBehindLatest": behind });
            if !(shard.closed && end == shard.records.len()) {
                answer["NextShardIterator"] = json!(format!("{index}:{end}"));
            } else {
                answer["ChildShards"] = json!([]);
            }
            Reply::ok(answer)
        }
        other => Reply::error(400, &format!("Unexpected{other}")),
    }
}

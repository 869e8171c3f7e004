//! What the live tests share: the endpoint gate and builders for the local stack.
#![allow(dead_code)]

pub mod captured;
#[cfg(feature = "dynamodb-lease")]
pub mod counting;
#[cfg(feature = "dynamodb-lease")]
pub mod counts;
pub mod faults;
pub mod injector;
#[cfg(all(feature = "dynamodb-lease", feature = "testing"))]
pub mod instances;
pub mod kpl;
pub mod secrets;

use std::sync::Arc;

use ruststream_kinesis::{KinesisBroker, LeaseStore};

/// The wall clock in epoch milliseconds, as beats and lease expiries are written.
pub fn now_ms() -> u64 {
    u64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap()
}

/// The local stack's endpoint, or `None` to skip a live test. With `KINESIS_TEST_STRICT=1` a
/// missing endpoint fails the test instead, so CI cannot pass by skipping.
pub fn endpoint() -> Option<String> {
    match std::env::var("KINESIS_TEST_ENDPOINT") {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            assert!(
                std::env::var("KINESIS_TEST_STRICT").as_deref() != Ok("1"),
                "KINESIS_TEST_ENDPOINT is not set and KINESIS_TEST_STRICT=1: live tests may not be skipped"
            );
            eprintln!("skipped: set KINESIS_TEST_ENDPOINT to run the live tests");
            None
        }
    }
}

/// The next delivery of a subscription within 30 s, past the errors it reports (printed).
pub async fn next_delivery<S>(stream: &mut S) -> ruststream_kinesis::KinesisMessage
where
    S: futures::Stream<
            Item = Result<ruststream_kinesis::KinesisMessage, ruststream_kinesis::KinesisError>,
        > + Unpin,
{
    next_delivery_past(stream, |err| eprintln!("subscription reported: {err}")).await
}

/// The next delivery of a subscription within 30 s, each error it reports before it handed to
/// `reported`.
pub async fn next_delivery_past<S>(
    stream: &mut S,
    mut reported: impl FnMut(ruststream_kinesis::KinesisError),
) -> ruststream_kinesis::KinesisMessage
where
    S: futures::Stream<
            Item = Result<ruststream_kinesis::KinesisMessage, ruststream_kinesis::KinesisError>,
        > + Unpin,
{
    use futures::StreamExt as _;
    loop {
        let item = tokio::time::timeout(std::time::Duration::from_secs(30), stream.next())
            .await
            .expect("a delivery within 30 s")
            .expect("the stream is open");
        match item {
            Ok(msg) => return msg,
            Err(err) => reported(err),
        }
    }
}

/// A broker on the local stack.
pub fn broker(url: &str) -> KinesisBroker {
    KinesisBroker::new()
        .endpoint(url)
        .region("us-east-1")
        .test_credentials()
}

/// A broker on the local stack sharing `store`.
pub fn broker_with(url: &str, store: Arc<dyn LeaseStore>) -> KinesisBroker {
    broker(url).lease_store(store)
}

/// A stream name no earlier run used.
pub fn unique(prefix: &str) -> String {
    format!("{prefix}-{:016x}", rand_u64())
}

fn rand_u64() -> u64 {
    use std::hash::{BuildHasher, RandomState};
    RandomState::new().hash_one(std::time::SystemTime::now())
}

/// The local stack's AWS configuration, built without I/O.
pub fn sdk_config(url: &str) -> aws_config::SdkConfig {
    ruststream_kinesis::local_stack_config(url)
}

/// A Kinesis client on the local stack, for what the tests do behind the broker's back.
pub fn raw_kinesis(url: &str) -> aws_sdk_kinesis::Client {
    aws_sdk_kinesis::Client::new(&sdk_config(url))
}

/// The open shards of `stream`, ordered by their hash key ranges.
pub async fn open_shards(
    raw: &aws_sdk_kinesis::Client,
    stream: &str,
) -> Vec<aws_sdk_kinesis::types::Shard> {
    let listed = raw.list_shards().stream_name(stream).send().await.unwrap();
    let mut open: Vec<_> = listed
        .shards()
        .iter()
        .filter(|s| {
            s.sequence_number_range()
                .unwrap()
                .ending_sequence_number()
                .is_none()
        })
        .cloned()
        .collect();
    open.sort_by_key(|s| {
        s.hash_key_range()
            .unwrap()
            .starting_hash_key()
            .parse::<u128>()
            .unwrap()
    });
    open
}

/// Splits the first open shard of `stream` in the middle of its hash key range.
pub async fn split_first(raw: &aws_sdk_kinesis::Client, stream: &str) {
    let shard = open_shards(raw, stream).await.remove(0);
    let range = shard.hash_key_range().unwrap();
    let start: u128 = range.starting_hash_key().parse().unwrap();
    let end: u128 = range.ending_hash_key().parse().unwrap();
    raw.split_shard()
        .stream_name(stream)
        .shard_to_split(shard.shard_id())
        .new_starting_hash_key((start + (end - start) / 2).to_string())
        .send()
        .await
        .unwrap();
    wait_active(raw, stream).await;
}

/// Merges the first two open shards of `stream`, which are adjacent.
pub async fn merge_first_two(raw: &aws_sdk_kinesis::Client, stream: &str) {
    let open = open_shards(raw, stream).await;
    raw.merge_shards()
        .stream_name(stream)
        .shard_to_merge(open[0].shard_id())
        .adjacent_shard_to_merge(open[1].shard_id())
        .send()
        .await
        .unwrap();
    wait_active(raw, stream).await;
}

/// Creates `stream` with `shards` shards through `raw`, and waits until it is active.
pub async fn create_stream(raw: &aws_sdk_kinesis::Client, stream: &str, shards: i32) {
    raw.create_stream()
        .stream_name(stream)
        .shard_count(shards)
        .send()
        .await
        .unwrap();
    wait_active(raw, stream).await;
}

/// Waits until a resharded stream is active again.
pub async fn wait_active(raw: &aws_sdk_kinesis::Client, stream: &str) {
    for _ in 0..100 {
        let summary = raw
            .describe_stream_summary()
            .stream_name(stream)
            .send()
            .await
            .unwrap();
        if summary
            .stream_description_summary()
            .unwrap()
            .stream_status()
            == &aws_sdk_kinesis::types::StreamStatus::Active
        {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("stream {stream} did not become active");
}

/// The ARN of `stream`.
pub async fn stream_arn(raw: &aws_sdk_kinesis::Client, stream: &str) -> String {
    raw.describe_stream_summary()
        .stream_name(stream)
        .send()
        .await
        .unwrap()
        .stream_description_summary()
        .unwrap()
        .stream_arn()
        .to_owned()
}

/// Registers consumers of `stream_arn` until it has as many as it may (20), asking again when
/// too many are being created at once (the engine, like AWS, allows 5).
pub async fn fill_consumers(raw: &aws_sdk_kinesis::Client, stream_arn: &str) {
    use aws_sdk_kinesis::error::ProvideErrorMetadata as _;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    loop {
        let registered = raw
            .list_stream_consumers()
            .stream_arn(stream_arn)
            .send()
            .await
            .unwrap()
            .consumers()
            .len();
        if registered >= 20 {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the engine took {registered} consumers in 120 s"
        );
        let answer = raw
            .register_stream_consumer()
            .stream_arn(stream_arn)
            .consumer_name(format!("filler-{registered}"))
            .send()
            .await;
        if let Err(err) = answer {
            let said = err.message().unwrap_or_default().to_owned();
            assert!(
                said.contains("at the same time") || err.code() == Some("ResourceInUseException"),
                "the engine refused consumer {registered}: {said}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        }
    }
}

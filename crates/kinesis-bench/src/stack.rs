//! The local stack as the benchmarks use it: one endpoint for Kinesis and DynamoDB, clients on
//! it, fresh stream and table names, streams filled with the raw SDK (so filling is never what a
//! figure measures), and clean-up.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use aws_config::SdkConfig;
use aws_sdk_kinesis::primitives::Blob;
use aws_sdk_kinesis::types::{PutRecordsRequestEntry, StreamStatus};
use ruststream_kinesis::{DynamoLeaseStore, KinesisBroker, LeaseStore, MemoryLeaseStore};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

use crate::Error;

/// The endpoint: `KINESIS_TEST_ENDPOINT`, else `AWS_ENDPOINT_URL`, else the local stack's.
pub fn endpoint() -> String {
    ["KINESIS_TEST_ENDPOINT", "AWS_ENDPOINT_URL"]
        .iter()
        .find_map(|name| std::env::var(name).ok().filter(|url| !url.is_empty()))
        .unwrap_or_else(|| "http://127.0.0.1:4566".to_owned())
}

/// What every figure talks to.
#[derive(Debug, Clone)]
pub struct Stack {
    pub url: String,
    pub config: SdkConfig,
    pub kinesis: aws_sdk_kinesis::Client,
    pub dynamo: aws_sdk_dynamodb::Client,
}

impl Stack {
    pub fn new(url: &str) -> Self {
        let config = ruststream_kinesis::local_stack_config(url);
        Self {
            url: url.to_owned(),
            kinesis: aws_sdk_kinesis::Client::new(&config),
            dynamo: aws_sdk_dynamodb::Client::new(&config),
            config,
        }
    }

    /// Fails with a hint when the endpoint does not answer.
    pub async fn check(&self) -> Result<(), Error> {
        match tokio::time::timeout(
            Duration::from_secs(5),
            self.kinesis.list_streams().limit(1).send(),
        )
        .await
        {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(err)) => Err(format!(
                "the stack at {} does not answer ListStreams ({}); start it with \
                 scripts/local-stack.sh start",
                self.url,
                aws_sdk_kinesis::error::DisplayErrorContext(err)
            )
            .into()),
            Err(_) => Err(format!(
                "the stack at {} did not answer within 5 s; start it with scripts/local-stack.sh start",
                self.url
            )
            .into()),
        }
    }

    /// A broker on the stack with `store` and the default lease timings.
    pub fn broker(&self, store: Arc<dyn LeaseStore>, owner: &str) -> KinesisBroker {
        KinesisBroker::from_config(self.config.clone())
            .lease_store(store)
            .owner_id(owner)
    }

    /// A new, empty lease table.
    pub async fn table(&self, prefix: &str) -> Result<DynamoLeaseStore, Error> {
        let store = DynamoLeaseStore::new(&self.config, unique(prefix));
        store.create_table().await?;
        Ok(store)
    }

    /// Deletes a table, ignoring failures (clean-up).
    pub async fn drop_table(&self, table: &str) {
        let _ = self.dynamo.delete_table().table_name(table).send().await;
    }

    /// Creates `name` with `shards` shards and waits until it is active.
    pub async fn create_stream(&self, name: &str, shards: u32) -> Result<(), Error> {
        self.kinesis
            .create_stream()
            .stream_name(name)
            .shard_count(i32::try_from(shards)?)
            .send()
            .await
            .map_err(|err| format!("CreateStream {name}: {}", sdk(err)))?;
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let out = self
                .kinesis
                .describe_stream_summary()
                .stream_name(name)
                .send()
                .await
                .map_err(|err| format!("DescribeStreamSummary {name}: {}", sdk(err)))?;
            if out
                .stream_description_summary()
                .is_some_and(|s| *s.stream_status() == StreamStatus::Active)
            {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!("stream {name} not active after 60 s").into());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Deletes a stream, ignoring failures (clean-up; frees its shards under the stack's limit).
    pub async fn delete_stream(&self, name: &str) {
        let _ = self
            .kinesis
            .delete_stream()
            .stream_name(name)
            .enforce_consumer_deletion(true)
            .send()
            .await;
    }

    /// How many Kinesis records `name` holds, read from the oldest in every shard.
    pub async fn count_records(&self, name: &str) -> Result<usize, Error> {
        let mut count = 0;
        for (shard, _) in self.shards(name).await? {
            count += self.read_shard(name, &shard).await?.0;
        }
        Ok(count)
    }

    /// How many records `shard` of `name` holds, and the sequence number of its newest.
    pub async fn read_shard(
        &self,
        name: &str,
        shard: &str,
    ) -> Result<(usize, Option<String>), Error> {
        use aws_sdk_kinesis::types::ShardIteratorType;
        let (mut count, mut last) = (0, None);
        {
            let out = self
                .kinesis
                .get_shard_iterator()
                .stream_name(name)
                .shard_id(shard)
                .shard_iterator_type(ShardIteratorType::TrimHorizon)
                .send()
                .await
                .map_err(|err| format!("GetShardIterator {name}: {}", sdk(err)))?;
            let mut iterator = out.shard_iterator().map(str::to_owned);
            while let Some(current) = iterator.take() {
                let out = self
                    .kinesis
                    .get_records()
                    .shard_iterator(current)
                    .send()
                    .await
                    .map_err(|err| format!("GetRecords {name}: {}", sdk(err)))?;
                if let Some(newest) = out.records().last() {
                    count += out.records().len();
                    last = Some(newest.sequence_number().to_owned());
                    iterator = out.next_shard_iterator().map(str::to_owned);
                }
            }
        }
        Ok((count, last))
    }

    /// The open shards of `name`, each with the lowest hash key that lands in it.
    pub async fn shards(&self, name: &str) -> Result<Vec<(String, String)>, Error> {
        let out = self
            .kinesis
            .list_shards()
            .stream_name(name)
            .send()
            .await
            .map_err(|err| format!("ListShards {name}: {}", sdk(err)))?;
        Ok(out
            .shards()
            .iter()
            .map(|s| {
                let start = s
                    .hash_key_range()
                    .map(|r| r.starting_hash_key().to_owned())
                    .unwrap_or_default();
                (s.shard_id().to_owned(), start)
            })
            .collect())
    }

    /// Writes `count` records spread evenly over the shards (explicit hash keys, round robin),
    /// each `body(i)`, with `PutRecords` calls of up to 500 records. Returns how long it took.
    pub async fn fill(
        &self,
        stream: &str,
        count: u64,
        body: impl Fn(u64) -> Vec<u8>,
    ) -> Result<Duration, Error> {
        let started = Instant::now();
        let shards = self.shards(stream).await?;
        let mut next = 0u64;
        while next < count {
            let end = (next + 500).min(count);
            let entries = (next..end)
                .map(|i| entry(&shards, i, body(i)))
                .collect::<Result<Vec<_>, _>>()?;
            self.put_all(stream, entries).await?;
            next = end;
        }
        Ok(started.elapsed())
    }

    /// One `PutRecords` call per attempt, resending what the answer rejected.
    pub async fn put_all(
        &self,
        stream: &str,
        mut entries: Vec<PutRecordsRequestEntry>,
    ) -> Result<(), Error> {
        for _attempt in 0..10 {
            let out = self
                .kinesis
                .put_records()
                .stream_name(stream)
                .set_records(Some(entries.clone()))
                .send()
                .await
                .map_err(|err| format!("PutRecords {stream}: {}", sdk(err)))?;
            if out.failed_record_count().unwrap_or(0) == 0 {
                return Ok(());
            }
            entries = entries
                .into_iter()
                .zip(out.records())
                .filter(|(_, result)| result.error_code().is_some())
                .map(|(entry, _)| entry)
                .collect();
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Err(format!("PutRecords {stream}: records still rejected after 10 attempts").into())
    }
}

/// The request entry of record `i`, aimed at shard `i % shards` by an explicit hash key.
pub fn entry(
    shards: &[(String, String)],
    i: u64,
    body: Vec<u8>,
) -> Result<PutRecordsRequestEntry, Error> {
    let (_, hash) = &shards[usize::try_from(i)? % shards.len()];
    Ok(PutRecordsRequestEntry::builder()
        .data(Blob::new(body))
        .partition_key(format!("k{i}"))
        .explicit_hash_key(hash)
        .build()?)
}

/// A fresh lease store of the kind `durable` names: a new DynamoDB table, or memory.
pub async fn store(
    stack: &Stack,
    durable: bool,
) -> Result<(Arc<dyn LeaseStore>, Option<String>), Error> {
    if durable {
        let table = stack.table("bench-leases").await?;
        let name = table.table().to_owned();
        Ok((Arc::new(table), Some(name)))
    } else {
        Ok((Arc::new(MemoryLeaseStore::new()), None))
    }
}

/// A name no other run or figure uses: the prefix, this process, a counter and the clock.
pub fn unique(prefix: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!(
        "{prefix}-{}-{}-{nanos:08x}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// An SDK error with its causes, on one line.
pub fn sdk<E: std::error::Error>(err: E) -> String {
    aws_sdk_kinesis::error::DisplayErrorContext(err).to_string()
}

/// A steady writer: `per_second` records per second spread over the shards of `stream`, in
/// calls every 100 ms, until `stop` is cancelled. Returns how many it wrote.
pub async fn produce(
    stack: Stack,
    stream: String,
    per_second: u64,
    stop: CancellationToken,
) -> Result<u64, Error> {
    let shards = stack.shards(&stream).await?;
    let mut written = 0u64;
    let tick = Duration::from_millis(100);
    let started = tokio::time::Instant::now();
    let mut ticks = 0u64;
    while !stop.is_cancelled() {
        ticks += 1;
        let due = per_second * ticks / 10;
        let entries = (written..due)
            .map(|i| entry(&shards, i, crate::service::body(i)))
            .collect::<Result<Vec<_>, _>>()?;
        if !entries.is_empty() {
            stack.put_all(&stream, entries).await?;
            written = due;
        }
        tokio::select! {
            () = stop.cancelled() => break,
            () = tokio::time::sleep_until(started + tick * u32::try_from(ticks)?) => {}
        }
    }
    Ok(written)
}

/// A random 128-bit number (partition keys), from the standard library's hasher seeds.
pub fn random_u128() -> u128 {
    use std::hash::{BuildHasher, RandomState};
    let state = RandomState::new();
    let high = state.hash_one(1u8);
    let low = state.hash_one(2u8);
    (u128::from(high) << 64) | u128::from(low)
}

//! Exactly once into DynamoDB, live on the local stack: what a handling stages commits with the
//! checkpoint in one transaction (each record counted once, across a restart); a commit refused
//! by the handling's own condition applies nothing and comes again with why; a commit after the
//! lease was taken applies nothing; and the start refuses what cannot hold the promise.
#![cfg(all(feature = "dynamodb-lease", feature = "testing", feature = "metrics"))]

mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::types::{AttributeValue, ConditionCheck, TransactWriteItem};
use futures::StreamExt as _;
use ruststream::{
    BatchSubscriber, Broker, BuildBatchContext, BuildContext, ConnectedBroker, Field,
    IncomingMessage, Subscriber, SubscriptionSource,
};
use ruststream_kinesis::{
    ConnectedKinesisBroker, DynamoLeaseStore, DynamoWrites, ExactlyOnceRefusal,
    KinesisBatchContext, KinesisContext, KinesisError, KinesisMessage, KinesisStream,
    KinesisSubscriber, LeaseStore, LeaseTimings, StagedWrites,
};

use common::counts::{count, read as counts};
use common::instances::{publish_all, table, timings};

/// A new table of counts, and a client of the stack's DynamoDB.
async fn counts_table(config: &aws_config::SdkConfig) -> (aws_sdk_dynamodb::Client, String) {
    let client = aws_sdk_dynamodb::Client::new(config);
    let name = common::unique("counts");
    common::counts::create(&client, &name).await;
    (client, name)
}

/// Waits until `table` counts `ids` ids, within a minute; the counts.
async fn counted(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    ids: usize,
) -> HashMap<String, u64> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let now = counts(client, table).await;
        if now.len() >= ids || tokio::time::Instant::now() > deadline {
            return now;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// What a handler stages, read off its delivery as `Ctx<DynamoWrites>` binds it.
fn writes_of(msg: &KinesisMessage) -> StagedWrites {
    let ctx = KinesisContext::build(msg);
    DynamoWrites.get(&ctx).clone()
}

fn exactly_once(stream: &str, shards: u32) -> KinesisStream {
    common::instances::stream_of(stream, shards)
        .initial_position(ruststream_kinesis::KinesisPosition::TrimHorizon)
        .exactly_once()
}

/// One instance (`pod-a`) reading a new stream of one shard exactly once, its leases in a new
/// table, beside a new table of counts.
struct Reading {
    client: aws_sdk_dynamodb::Client,
    counts: String,
    store: DynamoLeaseStore,
    stream: String,
    connected: ConnectedKinesisBroker,
    subscriber: KinesisSubscriber,
    /// What the instance counts (`lease_table.commit` by how each commit ended).
    metrics: prometheus::Registry,
}

async fn reading(url: &str, prefix: &str, shards: u32) -> Reading {
    let (config, store) = table(url).await;
    let (client, counts) = counts_table(&config).await;
    let stream = common::unique(prefix);
    let metrics = prometheus::Registry::new();
    let connected = common::broker_with(url, Arc::new(store.clone()))
        .owner_id("pod-a")
        .lease_timings(timings())
        .metrics(ruststream_kinesis::KinesisMetrics::register(&metrics).unwrap())
        .connect()
        .await
        .unwrap();
    let subscriber = exactly_once(&stream, shards)
        .subscribe(&connected)
        .await
        .unwrap();
    Reading {
        client,
        counts,
        store,
        stream,
        connected,
        subscriber,
        metrics,
    }
}

/// How many commits ended with `error_type` (empty: landed), as `/metrics` shows them.
fn commits_ended(metrics: &prometheus::Registry, error_type: &str) -> u64 {
    metrics
        .gather()
        .iter()
        .filter(|family| family.name() == "messaging_client_operation_duration_seconds")
        .flat_map(|family| family.get_metric())
        .filter(|metric| {
            let label = |name: &str| {
                metric
                    .get_label()
                    .iter()
                    .find(|label| label.name() == name)
                    .map(|label| label.value().to_owned())
                    .unwrap_or_default()
            };
            label("operation") == "lease_table.commit" && label("error_type") == error_type
        })
        .map(|metric| metric.get_histogram().get_sample_count())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_record_is_counted_once_with_its_checkpoint_across_a_restart() {
    let Some(url) = common::endpoint() else {
        return;
    };
    let (config, store) = table(&url).await;
    let (client, counts_name) = counts_table(&config).await;
    let stream = common::unique("exactly-once");
    let shared: Arc<dyn LeaseStore> = Arc::new(store.clone());
    let first: Vec<String> = (0..30).map(|i| format!("first-{i}")).collect();
    let second: Vec<String> = (0..20).map(|i| format!("second-{i}")).collect();
    let mut deliveries = Vec::new();
    for (run, bodies) in [&first, &second].into_iter().enumerate() {
        let broker = common::broker_with(&url, Arc::clone(&shared))
            .owner_id(format!("pod-{run}"))
            .lease_timings(timings());
        let connected = broker.connect().await.unwrap();
        let mut subscriber = exactly_once(&stream, 2)
            .subscribe(&connected)
            .await
            .unwrap();
        publish_all(&url, &stream, bodies.clone()).await;
        let mut stream_of = Box::pin(subscriber.stream());
        let mut seen = 0;
        while seen < bodies.len() {
            let msg = common::next_delivery(&mut stream_of).await;
            let id = String::from_utf8_lossy(msg.payload()).into_owned();
            writes_of(&msg).stage(count(&counts_name, &id)).unwrap();
            deliveries.push(id);
            msg.ack().await.unwrap();
            seen += 1;
        }
        let total = first.len() + if run == 0 { 0 } else { second.len() };
        let now = counted(&client, &counts_name, total).await;
        assert_eq!(now.len(), total, "every record handled so far is counted");
        drop(stream_of);
        drop(subscriber);
        connected.shutdown().await.unwrap();
    }
    let now = counts(&client, &counts_name).await;
    for id in first.iter().chain(&second) {
        assert_eq!(
            now.get(id),
            Some(&1),
            "{id} is counted exactly once: {now:?}"
        );
    }
    assert_eq!(
        deliveries.len(),
        first.len() + second.len(),
        "the restarted instance handles none of what the first committed"
    );
    let rows = store.rows().await.unwrap();
    let committed = rows
        .iter()
        .filter(|(key, row)| key.stream() == stream && row.commit_token.is_some())
        .count();
    assert!(
        committed >= 1,
        "the rows' checkpoints moved by commits: {rows:?}"
    );
}

/// A put of the count of `id` (1) into `table`.
fn put_count(table: &str, id: &str) -> TransactWriteItem {
    let put = aws_sdk_dynamodb::types::Put::builder()
        .table_name(table)
        .item("id", AttributeValue::S(id.to_owned()))
        .item("applied", AttributeValue::N("1".to_owned()))
        .build()
        .unwrap();
    TransactWriteItem::builder().put(put).build()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handlings_that_put_into_one_table_commit_together_once_its_key_is_known() {
    let Some(url) = common::endpoint() else {
        return;
    };
    let Reading {
        client,
        counts: counts_name,
        stream,
        connected,
        mut subscriber,
        metrics,
        ..
    } = reading(&url, "exactly-once-puts", 1).await;
    let mut deliveries = Box::pin(subscriber.stream());
    // The first commit that puts into the table asks DynamoDB for its key.
    publish_all(&url, &stream, ["warm-up".to_owned()]).await;
    let msg = common::next_delivery(&mut deliveries).await;
    // The start learnt the lease table's region: a table named elsewhere by its ARN is refused
    // where it is staged, since a transaction never spans regions.
    let elsewhere = format!("arn:aws:dynamodb:eu-west-1:123456789012:table/{counts_name}");
    assert!(matches!(
        writes_of(&msg).stage(put_count(&elsewhere, "warm-up")),
        Err(ruststream_kinesis::StageError::OtherRegion { .. })
    ));
    writes_of(&msg)
        .stage(put_count(&counts_name, "warm-up"))
        .unwrap();
    msg.ack().await.unwrap();
    assert_eq!(counted(&client, &counts_name, 1).await.len(), 1);
    let before = commits_ended(&metrics, "");
    let bodies: Vec<String> = (0..60).map(|i| format!("put-{i}")).collect();
    publish_all(&url, &stream, bodies.clone()).await;
    for _ in &bodies {
        let msg = common::next_delivery(&mut deliveries).await;
        let id = String::from_utf8_lossy(msg.payload()).into_owned();
        writes_of(&msg).stage(put_count(&counts_name, &id)).unwrap();
        msg.ack().await.unwrap();
    }
    let now = counted(&client, &counts_name, bodies.len() + 1).await;
    for id in &bodies {
        assert_eq!(now.get(id), Some(&1), "{id} put once: {now:?}");
    }
    // Each put touches one item: the handlings acknowledged while a commit was in flight fold
    // into the next one. A put counted as touching every item of its table would take one
    // commit a record.
    let commits = commits_ended(&metrics, "") - before;
    assert!(
        commits <= 30,
        "{} records put in {commits} commits",
        bodies.len()
    );
    drop(deliveries);
    drop(subscriber);
    connected.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_refused_by_its_own_condition_applies_nothing_and_comes_again_with_why() {
    let Some(url) = common::endpoint() else {
        return;
    };
    let Reading {
        client,
        counts: counts_name,
        stream,
        connected,
        mut subscriber,
        metrics,
        ..
    } = reading(&url, "exactly-once-refused", 1).await;
    publish_all(&url, &stream, ["gated".to_owned(), "after".to_owned()]).await;
    let mut deliveries = Box::pin(subscriber.stream());

    // The first handling stages a condition that fails (the gate item does not exist).
    let msg = common::next_delivery(&mut deliveries).await;
    assert_eq!(msg.payload(), b"gated");
    let writes = writes_of(&msg);
    assert!(writes.refused().is_none());
    let gate = ConditionCheck::builder()
        .table_name(&counts_name)
        .key("id", AttributeValue::S("gate".into()))
        .condition_expression("attribute_exists(id)")
        .build()
        .unwrap();
    writes
        .stage(TransactWriteItem::builder().condition_check(gate).build())
        .unwrap();
    writes.stage(count(&counts_name, "gated")).unwrap();
    msg.ack().await.unwrap();

    // The next record may be delivered meanwhile: it waits behind the refused one, and is
    // acked with its count.
    let mut after_acked = false;
    let again = loop {
        let msg = common::next_delivery(&mut deliveries).await;
        if msg.payload() == b"after" {
            assert!(!after_acked, "the later record is delivered once");
            writes_of(&msg).stage(count(&counts_name, "after")).unwrap();
            msg.ack().await.unwrap();
            after_acked = true;
            continue;
        }
        break msg;
    };
    assert_eq!(again.payload(), b"gated");
    assert_eq!(again.redelivery_count(), Some(2));
    let writes = writes_of(&again);
    let why = writes.refused().expect("the redelivery says why").clone();
    assert_eq!(why.code, "ConditionalCheckFailed", "{why}");
    assert_eq!(why.action, Some(0), "{why}");
    assert_eq!(why.table.as_deref(), Some(counts_name.as_str()), "{why}");
    assert_eq!(why.shard, again.shard_id());
    assert_eq!(
        commits_ended(&metrics, "user_refused"),
        1,
        "counted by how it ended"
    );
    assert!(
        counts(&client, &counts_name).await.is_empty(),
        "nothing of the refused commit, nor of the record behind it, was applied"
    );
    writes.stage(count(&counts_name, "gated")).unwrap();
    again.ack().await.unwrap();
    if !after_acked {
        let msg = common::next_delivery(&mut deliveries).await;
        assert_eq!(msg.payload(), b"after");
        writes_of(&msg).stage(count(&counts_name, "after")).unwrap();
        msg.ack().await.unwrap();
    }
    let now = counted(&client, &counts_name, 2).await;
    assert_eq!(now.get("gated"), Some(&1), "{now:?}");
    assert_eq!(now.get("after"), Some(&1), "{now:?}");
    drop(deliveries);
    drop(subscriber);
    connected.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_after_the_lease_was_taken_applies_nothing() {
    let Some(url) = common::endpoint() else {
        return;
    };
    let Reading {
        client,
        counts: counts_name,
        store,
        stream,
        connected,
        mut subscriber,
        metrics,
    } = reading(&url, "exactly-once-stolen", 1).await;
    publish_all(&url, &stream, ["kept".to_owned(), "stolen".to_owned()]).await;
    let mut deliveries = Box::pin(subscriber.stream());
    // While the lease is ours, a commit lands.
    let msg = common::next_delivery(&mut deliveries).await;
    assert_eq!(msg.payload(), b"kept");
    writes_of(&msg).stage(count(&counts_name, "kept")).unwrap();
    msg.ack().await.unwrap();
    assert_eq!(
        counted(&client, &counts_name, 1).await.get("kept"),
        Some(&1)
    );
    let msg = common::next_delivery(&mut deliveries).await;
    assert_eq!(msg.payload(), b"stolen");
    // Another instance takes the row while the handler works (as a take after a pause would).
    let key = format!("{stream}:{}", msg.shard_id());
    client
        .update_item()
        .table_name(store.table_name().unwrap())
        .key("lease_key", AttributeValue::S(key.clone()))
        .update_expression("SET lease_owner = :thief, lease_expiry = :later ADD lease_counter :one")
        .expression_attribute_values(":thief", AttributeValue::S("pod-b".into()))
        .expression_attribute_values(
            ":later",
            AttributeValue::N((ruststream_kinesis::epoch_millis() + 600_000).to_string()),
        )
        .expression_attribute_values(":one", AttributeValue::N("1".into()))
        .send()
        .await
        .unwrap();
    writes_of(&msg)
        .stage(count(&counts_name, "stolen"))
        .unwrap();
    let _ = msg.ack().await;
    // The commit goes out at once; give it several renewal intervals.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let now = counts(&client, &counts_name).await;
    assert_eq!(
        now,
        HashMap::from([("kept".to_owned(), 1)]),
        "a commit the row refused applied nothing"
    );
    let rows = store.rows().await.unwrap();
    let (_, row) = rows
        .iter()
        .find(|(row_key, _)| row_key.to_string() == key)
        .expect("the row");
    assert_eq!(row.owner.as_deref(), Some("pod-b"), "{row:?}");
    assert!(
        row.checkpoint.is_some() && row.commit_token.is_some(),
        "the row holds the first commit only: {row:?}"
    );
    assert!(commits_ended(&metrics, "") >= 1, "the first commit landed");
    assert_eq!(
        commits_ended(&metrics, "refused"),
        1,
        "the commit after the theft was sent, and the row refused it"
    );
    drop(deliveries);
    drop(subscriber);
    connected.shutdown().await.unwrap();
}

/// A batch of two shards' records commits in one transaction with both rows: its writes
/// land once and each shard's checkpoint passes its records (the design's §5, joint commits).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_commits_whole_with_every_shards_checkpoint_and_a_retried_record_sends_it_all_back()
{
    let Some(url) = common::endpoint() else {
        return;
    };
    let Reading {
        client,
        counts: counts_name,
        store,
        stream,
        connected,
        mut subscriber,
        ..
    } = reading(&url, "exactly-once-batches", 2).await;
    let bodies: Vec<String> = (0..40).map(|i| format!("batched-{i}")).collect();
    publish_all(&url, &stream, bodies.clone()).await;
    let mut batches = Box::pin(subscriber.batches(std::num::NonZeroUsize::new(16).unwrap()));
    let mut done: HashMap<String, u64> = HashMap::new();
    let mut sent_back: Vec<String> = Vec::new();
    let mut several = 0;
    let mut spanning = 0;
    // Each shard's last record handled: where its checkpoint ends.
    let mut last: HashMap<String, String> = HashMap::new();
    while done.len() < bodies.len() {
        let batch = match tokio::time::timeout(Duration::from_secs(30), batches.next()).await {
            Ok(Some(Ok(batch))) => batch,
            Ok(Some(Err(err))) => {
                eprintln!("subscription reported: {err}");
                continue;
            }
            other => panic!(
                "no batch within 30 s ({} of 40 done): {other:?}",
                done.len()
            ),
        };
        let again = batch.iter().any(|msg| msg.redelivery_count() > Some(1));
        assert!(
            !again || batch.len() == 1,
            "a record delivered again comes alone"
        );
        several += usize::from(batch.len() > 1);
        spanning += usize::from(
            batch
                .iter()
                .any(|msg| msg.shard_id() != batch[0].shard_id()),
        );
        let ids: Vec<String> = batch
            .iter()
            .map(|msg| String::from_utf8_lossy(msg.payload()).into_owned())
            .collect();
        let ctx = KinesisBatchContext::build(&batch[0]);
        let writes = DynamoWrites.get(&ctx);
        for id in &ids {
            writes.stage(count(&counts_name, id)).unwrap();
        }
        if sent_back.is_empty() && batch.len() > 1 {
            // The handler retries its last record: nothing of the batch commits, and every
            // record of it comes again, the acknowledged ones too.
            sent_back.clone_from(&ids);
            let mut members = batch.into_iter();
            let last = members.next_back().unwrap();
            for msg in members {
                msg.ack().await.unwrap();
            }
            last.nack(true).await.unwrap();
            continue;
        }
        for (msg, id) in batch.into_iter().zip(ids) {
            *done.entry(id).or_default() += msg.redelivery_count().unwrap();
            let shard = msg.shard_id().to_owned();
            let sequence = msg.sequence_number().to_owned();
            let at = last.entry(shard).or_default();
            if at.len() < sequence.len() || (at.len() == sequence.len() && *at < sequence) {
                *at = sequence;
            }
            msg.ack().await.unwrap();
        }
    }
    assert!(several >= 1, "some batch held several records");
    assert!(spanning >= 1, "some batch held records of both shards");
    assert!(sent_back.len() > 1, "a batch of several was sent back");
    for id in &sent_back {
        assert_eq!(
            done.get(id),
            Some(&2),
            "{id} came again and was handled alone"
        );
    }
    let now = counted(&client, &counts_name, bodies.len()).await;
    for id in &bodies {
        assert_eq!(
            now.get(id),
            Some(&1),
            "{id} is counted exactly once: {now:?}"
        );
    }
    // Every shard's checkpoint passes its last record: the joint commits moved both rows.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let rows = store.list(&stream).await.unwrap().unwrap_or_default();
        let behind: Vec<String> = last
            .iter()
            .filter(|(shard, sequence)| {
                !rows.iter().any(|(key, row)| {
                    key.shard() == shard.as_str()
                        && row.checkpoint.as_deref() == Some(sequence.as_str())
                })
            })
            .map(|(shard, sequence)| format!("{shard} short of {sequence}"))
            .collect();
        if behind.is_empty() {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "checkpoints behind after 30 s: {behind:?}; rows: {rows:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    drop(batches);
    drop(subscriber);
    connected.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_start_refuses_what_cannot_hold_exactly_once() {
    let Some(url) = common::endpoint() else {
        return;
    };
    let stream = common::unique("exactly-once-refusals");
    // The default store keeps its rows in this process: no DynamoDB write commits with them.
    let connected = common::broker(&url).connect().await.unwrap();
    let refused = exactly_once(&stream, 1).subscribe(&connected).await;
    match refused {
        Err(KinesisError::ExactlyOnce {
            stream: named,
            refusal: ExactlyOnceRefusal::StoreCannotCommit { store },
        }) => {
            assert_eq!(named, stream);
            assert_eq!(store, "MemoryLeaseStore");
        }
        other => panic!("refused for the store: {other:?}"),
    }
    connected.shutdown().await.unwrap();

    // A lease longer than DynamoDB keeps a request token.
    let (_, store) = table(&url).await;
    let store: Arc<dyn LeaseStore> = Arc::new(store);
    let long = LeaseTimings::new(Duration::from_secs(600), Duration::from_secs(3)).unwrap();
    let connected = common::broker_with(&url, store)
        .lease_timings(long)
        .connect()
        .await
        .unwrap();
    let refused = exactly_once(&stream, 1).subscribe(&connected).await;
    let Err(err) = refused else {
        panic!("refused for the lease");
    };
    assert!(
        matches!(
            err,
            KinesisError::ExactlyOnce {
                refusal: ExactlyOnceRefusal::LeaseTooLong { .. },
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("LeaseTimings"), "{err}");
    connected.shutdown().await.unwrap();

    // A lease table in another region than the broker: a commit would write the handler's
    // tables there.
    let elsewhere = common::sdk_config(&url)
        .to_builder()
        .region(aws_config::Region::new("eu-west-1"))
        .build();
    let store = DynamoLeaseStore::new(&elsewhere, common::unique("leases-elsewhere"));
    match start_refusal(&url, &stream, store).await {
        (
            table_name,
            Some(ExactlyOnceRefusal::OtherRegion {
                table,
                lease_region,
                region,
            }),
        ) => {
            assert_eq!(table, table_name);
            assert_eq!(lease_region, "eu-west-1");
            assert_ne!(region, "eu-west-1");
        }
        other => panic!("refused for the region: {other:?}"),
    }

    // A lease table in another account than the stream (moto's x-moto-account-id): a commit
    // would write the handler's tables there.
    let config = aws_sdk_dynamodb::config::Builder::from(&common::sdk_config(&url))
        .interceptor(OtherAccount)
        .build();
    let store = DynamoLeaseStore::from_client(
        aws_sdk_dynamodb::Client::from_conf(config),
        common::unique("leases-other-account"),
    );
    match start_refusal(&url, &stream, store).await {
        (
            table_name,
            Some(ExactlyOnceRefusal::OtherAccount {
                table,
                lease_account,
                stream: named,
                stream_account,
            }),
        ) => {
            assert_eq!(table, table_name);
            assert_eq!(lease_account, OTHER_ACCOUNT);
            assert_eq!(named, stream);
            assert_ne!(stream_account, OTHER_ACCOUNT);
        }
        other => panic!("refused for the account: {other:?}"),
    }
}

/// How an exactly-once subscription to `stream` starts on a broker whose leases are in `store`
/// (its table created here): its table's name, and why the start was refused (`None`: it
/// started).
async fn start_refusal(
    url: &str,
    stream: &str,
    store: DynamoLeaseStore,
) -> (String, Option<ExactlyOnceRefusal>) {
    store.create_table().await.unwrap();
    let table_name = store.table_name().unwrap().to_owned();
    let connected = common::broker_with(url, Arc::new(store))
        .connect()
        .await
        .unwrap();
    let refusal = match exactly_once(stream, 1).subscribe(&connected).await {
        Ok(_) => None,
        Err(KinesisError::ExactlyOnce { refusal, .. }) => Some(refusal),
        Err(other) => panic!("refused for exactly once: {other}"),
    };
    connected.shutdown().await.unwrap();
    (table_name, refusal)
}

/// An account of moto's other than the local stack's.
const OTHER_ACCOUNT: &str = "111122223333";

/// Sends every DynamoDB request to [`OTHER_ACCOUNT`] in moto.
#[derive(Debug)]
struct OtherAccount;

impl aws_sdk_dynamodb::config::Intercept for OtherAccount {
    fn name(&self) -> &'static str {
        "OtherAccount"
    }

    fn modify_before_signing(
        &self,
        context: &mut aws_sdk_dynamodb::config::interceptors::BeforeTransmitInterceptorContextMut<
            '_,
        >,
        _components: &aws_sdk_dynamodb::config::RuntimeComponents,
        _cfg: &mut aws_sdk_dynamodb::config::ConfigBag,
    ) -> Result<(), aws_sdk_dynamodb::error::BoxError> {
        context
            .request_mut()
            .headers_mut()
            .insert("x-moto-account-id", OTHER_ACCOUNT);
        Ok(())
    }
}

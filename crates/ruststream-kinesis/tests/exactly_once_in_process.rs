//! Exactly once under `TestApp`: no DynamoDB runs, and the in-process store commits what each
//! handling staged with its checkpoint, recorded for the test (`KinesisBroker::in_process_commits`).
//! A publish returns once its handling committed; a retried handling commits once; a commit
//! refused by its own write applies nothing and comes again with why.
#![cfg(all(feature = "testing", feature = "dynamodb-lease"))]

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use ruststream::prelude::*;
use ruststream::testing::TestApp;
use ruststream_kinesis::{
    DynamoWrites, HandlingOutcome, InProcessHandling, KinesisBroker, KinesisContext, KinesisStream,
};

/// The ids the committed writes count, in order.
fn counted(broker: &KinesisBroker) -> Vec<String> {
    broker
        .in_process_commits()
        .writes()
        .iter()
        .map(|write| write.update().unwrap().key()["id"].as_s().unwrap().clone())
        .collect()
}

/// The ids a handling staged the count of.
fn staged_ids(handling: &InProcessHandling) -> Vec<String> {
    handling
        .staged
        .iter()
        .map(|write| write.update().unwrap().key()["id"].as_s().unwrap().clone())
        .collect()
}

/// Each handling as its attempt, the ids it staged and how it ended.
fn handlings(broker: &KinesisBroker) -> Vec<(u64, Vec<String>, HandlingOutcome)> {
    broker
        .in_process_commits()
        .handlings()
        .iter()
        .map(|handling| {
            (
                handling.attempt,
                staged_ids(handling),
                handling.outcome.clone(),
            )
        })
        .collect()
}

/// Stages the count of each body; what `outcome` says of each call (numbered from 0) after it;
/// every refusal it was shown.
#[derive(Clone)]
struct Counter {
    calls: Arc<AtomicUsize>,
    refusals: Arc<Mutex<Vec<String>>>,
    outcome: fn(usize) -> HandlerOutcome,
}

impl Handle<String, (), (), KinesisContext> for Counter {
    async fn handle(
        &self,
        body: &String,
        _outs: &(),
        ctx: &mut Context<'_, KinesisContext>,
    ) -> Result<(), HandlerOutcome> {
        let call = self.calls.fetch_add(1, Ordering::SeqCst);
        let writes = ctx.context(DynamoWrites);
        if let Some(refused) = writes.refused() {
            self.refusals.lock().unwrap().push(refused.code.clone());
        }
        writes.stage(common::counts::count("counts", body)).unwrap();
        let outcome = (self.outcome)(call);
        if outcome.is_ack() {
            Ok(())
        } else {
            Err(outcome)
        }
    }
}

async fn started(broker: &KinesisBroker, counter: &Counter) -> TestApp<()> {
    let source = KinesisStream::new("counts-in-process")
        .create_if_missing(2)
        .exactly_once();
    let handler = counter.clone();
    let app =
        RustStream::new(AppInfo::new("counter", "0.1.0")).with_broker(broker.clone(), move |b| {
            b.include(subscriber(source, handler).build());
        });
    TestApp::start(app).await.unwrap()
}

fn counter(outcome: fn(usize) -> HandlerOutcome) -> Counter {
    Counter {
        calls: Arc::default(),
        refusals: Arc::default(),
        outcome,
    }
}

async fn publish(tb: &TestApp<()>, body: &str) {
    tb.broker::<KinesisBroker>()
        .message(&body.to_owned())
        .to("counts-in-process")
        .publish()
        .await
        .unwrap();
}

#[tokio::test]
async fn each_publish_returns_once_its_handling_committed_what_it_staged() {
    let broker = KinesisBroker::new();
    let counter = counter(|_| HandlerOutcome::ack());
    let tb = started(&broker, &counter).await;
    for (n, id) in ["a", "b", "c"].into_iter().enumerate() {
        publish(&tb, id).await;
        assert_eq!(
            counted(&broker).len(),
            n + 1,
            "{id} committed before its publish returned"
        );
    }
    let mut ids = counted(&broker);
    ids.sort();
    assert_eq!(ids, ["a", "b", "c"]);
    for commit in broker.in_process_commits().committed() {
        assert_eq!(commit.stream, "counts-in-process");
        assert!(!commit.checkpoint.is_empty() && !commit.token.is_empty());
    }
    let seen = broker.in_process_commits().handlings();
    assert_eq!(seen.len(), 3, "one handling a record: {seen:?}");
    for (handling, id) in seen.iter().zip(["a", "b", "c"]) {
        assert_eq!(staged_ids(handling), [id]);
        assert_eq!(
            (handling.attempt, handling.records.len(), &handling.outcome),
            (1, 1, &HandlingOutcome::Committed)
        );
        assert_eq!(handling.stream, "counts-in-process");
    }
}

#[tokio::test]
async fn a_retried_handling_commits_only_what_its_last_attempt_staged() {
    let broker = KinesisBroker::new();
    let counter = counter(|call| {
        if call == 0 {
            HandlerOutcome::retry()
        } else {
            HandlerOutcome::ack()
        }
    });
    let tb = started(&broker, &counter).await;
    publish(&tb, "once").await;
    assert_eq!(counter.calls.load(Ordering::SeqCst), 2, "handled twice");
    assert_eq!(counted(&broker), ["once"], "committed once");
    let once = vec!["once".to_owned()];
    assert_eq!(
        handlings(&broker),
        [
            (1, once.clone(), HandlingOutcome::HandedBack),
            (2, once, HandlingOutcome::Committed),
        ],
        "each handling, what it staged, and that only the second committed"
    );
}

#[tokio::test]
async fn a_commit_refused_by_its_own_write_applies_nothing_and_comes_again_with_why() {
    let broker = KinesisBroker::new();
    let refused_once = Arc::new(AtomicUsize::new(0));
    let refusing = Arc::clone(&refused_once);
    broker.in_process_commits().refuse_when(move |_| {
        (refusing.fetch_add(1, Ordering::SeqCst) == 0).then(|| "ConditionalCheckFailed".to_owned())
    });
    let counter = counter(|_| HandlerOutcome::ack());
    let tb = started(&broker, &counter).await;
    publish(&tb, "gated").await;
    assert_eq!(
        counter.calls.load(Ordering::SeqCst),
        2,
        "delivered again after the refusal, before the publish returned"
    );
    assert_eq!(
        *counter.refusals.lock().unwrap(),
        ["ConditionalCheckFailed"],
        "the redelivery says why"
    );
    assert_eq!(
        counted(&broker),
        ["gated"],
        "the refused commit applied nothing"
    );
    let seen = handlings(&broker);
    assert_eq!(seen.len(), 2, "two handlings: {seen:?}");
    match &seen[0] {
        (1, staged, HandlingOutcome::Refused(why)) => {
            assert_eq!(staged, &["gated"]);
            assert_eq!(why.code, "ConditionalCheckFailed");
            assert_eq!(why.action, Some(0), "the refusing write, by its place");
        }
        other => panic!("the first handling's commit was refused: {other:?}"),
    }
    assert_eq!(
        seen[1],
        (2, vec!["gated".to_owned()], HandlingOutcome::Committed)
    );
}

/// Stages the count of each body of a batch; records each batch's bodies.
#[derive(Clone, Default)]
struct BatchCounter {
    batches: Arc<Mutex<Vec<Vec<String>>>>,
    /// Retries the last record of the first batch of several.
    retry_first: bool,
    /// Fails every batch as a whole after staging (every record dropped).
    fail_all: bool,
}

impl Handle<[String], (), (), ruststream_kinesis::KinesisBatchContext> for BatchCounter {
    async fn handle(
        &self,
        batch: &[String],
        _outs: &(),
        ctx: &mut Context<'_, ruststream_kinesis::KinesisBatchContext>,
    ) -> Result<(), Vec<HandlerOutcome>> {
        let writes = ctx.context(DynamoWrites);
        for body in batch {
            writes.stage(common::counts::count("counts", body)).unwrap();
        }
        let first_of_several = {
            let mut batches = self.batches.lock().unwrap();
            let first = batch.len() > 1 && batches.iter().all(|seen| seen.len() == 1);
            batches.push(batch.to_vec());
            first
        };
        if self.fail_all {
            return Err(batch.iter().map(|_| HandlerOutcome::drop()).collect());
        }
        if self.retry_first && first_of_several {
            let mut outcomes: Vec<HandlerOutcome> =
                batch.iter().map(|_| HandlerOutcome::ack()).collect();
            outcomes.pop();
            outcomes.push(HandlerOutcome::retry());
            return Err(outcomes);
        }
        Ok(())
    }
}

async fn started_batches(broker: &KinesisBroker, counter: &BatchCounter) -> TestApp<()> {
    started_batches_on(broker, counter, 1).await
}

/// [`started_batches`] on a stream of `shards` shards.
async fn started_batches_on(
    broker: &KinesisBroker,
    counter: &BatchCounter,
    shards: u32,
) -> TestApp<()> {
    let source = KinesisStream::new("counts-in-process")
        .create_if_missing(shards)
        .max_wait(std::time::Duration::from_millis(500))
        .exactly_once();
    let handler = counter.clone();
    let app =
        RustStream::new(AppInfo::new("counter", "0.1.0")).with_broker(broker.clone(), move |b| {
            b.include(
                subscriber(source, handler)
                    .batch(std::num::NonZeroUsize::new(8).unwrap())
                    .build(),
            );
        });
    TestApp::start(app).await.unwrap()
}

#[tokio::test]
async fn a_batch_commits_what_it_staged_and_one_retried_record_sends_it_all_back() {
    let broker = KinesisBroker::new();
    let counter = BatchCounter {
        retry_first: true,
        ..BatchCounter::default()
    };
    let tb = started_batches(&broker, &counter).await;
    let bodies = ["a", "b", "c", "d"];
    futures::future::join_all(bodies.iter().map(|body| publish(&tb, body))).await;
    let batches = counter.batches.lock().unwrap().clone();
    let first = batches
        .iter()
        .find(|batch| batch.len() > 1)
        .unwrap_or_else(|| panic!("the publishes gathered into a batch of several: {batches:?}"));
    let at = batches.iter().position(|batch| batch == first).unwrap();
    for body in first {
        assert!(
            batches[at + 1..]
                .iter()
                .any(|later| later == &vec![body.clone()]),
            "{body} came again alone after its batch went back: {batches:?}"
        );
    }
    let mut ids = counted(&broker);
    ids.sort();
    assert_eq!(
        ids, bodies,
        "each counted once: the batch sent back applied nothing"
    );
    // The view shows the batch's one handling with all its records, sent back, then each
    // record's handling alone, committed.
    let seen = broker.in_process_commits().handlings();
    let sent_back = seen
        .iter()
        .find(|handling| handling.records.len() > 1)
        .unwrap_or_else(|| panic!("the batch of several is one handling: {seen:?}"));
    assert_eq!(sent_back.outcome, HandlingOutcome::HandedBack);
    assert_eq!(
        staged_ids(sent_back),
        *first,
        "it staged one count a record"
    );
    let mut committed: Vec<String> = seen
        .iter()
        .filter(|handling| handling.outcome == HandlingOutcome::Committed)
        .flat_map(staged_ids)
        .collect();
    committed.sort();
    assert_eq!(committed, bodies, "each record's count committed once");
}

/// A batch of both shards' records is one handling, committed in one transaction that moves
/// both shards' rows.
#[tokio::test]
async fn a_batch_of_two_shards_commits_once_in_one_transaction_with_both_rows() {
    let broker = KinesisBroker::new();
    let counter = BatchCounter::default();
    let tb = started_batches_on(&broker, &counter, 2).await;
    let mut bodies: Vec<String> = (0..24).map(|n| format!("spread-{n}")).collect();
    futures::future::join_all(bodies.iter().map(|body| publish(&tb, body))).await;
    let mut ids = counted(&broker);
    ids.sort();
    bodies.sort();
    assert_eq!(ids, bodies, "each counted once");
    let seen = broker.in_process_commits().handlings();
    let spanning = seen
        .iter()
        .find(|handling| {
            handling
                .records
                .iter()
                .any(|record| record.shard != handling.records[0].shard)
        })
        .unwrap_or_else(|| panic!("a batch held both shards' records: {seen:?}"));
    assert_eq!(spanning.outcome, HandlingOutcome::Committed);
    let commits = broker.in_process_commits().committed();
    let joint = commits
        .iter()
        .find(|commit| commit.writes == spanning.staged)
        .unwrap_or_else(|| panic!("the batch's writes committed in one commit: {commits:?}"));
    let mut shards: Vec<&str> = joint
        .checkpoints
        .iter()
        .map(|(shard, _)| shard.as_str())
        .collect();
    shards.dedup();
    assert_eq!(shards.len(), 2, "both rows moved with them: {joint:?}");
}

#[tokio::test]
async fn a_batch_that_fails_as_a_whole_commits_nothing_it_staged() {
    let broker = KinesisBroker::new();
    let counter = BatchCounter {
        fail_all: true,
        ..BatchCounter::default()
    };
    let tb = started_batches(&broker, &counter).await;
    futures::future::join_all(["x", "y", "z"].iter().map(|body| publish(&tb, body))).await;
    let handled: usize = counter.batches.lock().unwrap().iter().map(Vec::len).sum();
    assert_eq!(handled, 3, "each record handled once, then dropped");
    assert!(
        counted(&broker).is_empty(),
        "a batch whose every record was dropped applies nothing it staged"
    );
    assert!(
        !broker.in_process_commits().committed().is_empty(),
        "its records' checkpoint moved all the same"
    );
    let seen = handlings(&broker);
    assert!(
        !seen.is_empty()
            && seen
                .iter()
                .all(|(_, staged, outcome)| !staged.is_empty()
                    && *outcome == HandlingOutcome::Dropped),
        "each batch staged, and was dropped: {seen:?}"
    );
}

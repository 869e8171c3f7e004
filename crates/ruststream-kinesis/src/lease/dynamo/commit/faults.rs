//! Commits on the local stack meeting the faults moto never produces, from the stack router's
//! fault injector (docs/src/fault-injector.md): a transaction cancelled by a conflict, a renewal
//! and a checkpoint refused by a transaction in progress on their row, and a commit applied whose
//! answer was lost. Runs when `KINESIS_TEST_ENDPOINT` names the local stack.

use serde_json::{Value, json};

use super::tests::{A, LEASE, applied, count, request, row, stack};
use super::*;
use crate::commit::UnitId;

/// One rule of the injector, for the requests of one client (SDK app name); removed on drop.
struct Fault {
    url: String,
}

impl Fault {
    /// Acts with `action` on the next `times` requests of `operation` from `client`.
    fn add(client: &str, operation: &str, action: Value, times: u64) -> Self {
        let endpoint = std::env::var("KINESIS_TEST_ENDPOINT").expect("the local stack");
        let endpoint = endpoint.trim_end_matches('/');
        let rule = json!({
            "service": "dynamodb",
            "operation": operation,
            "client": client,
            "count": times,
            "action": action,
        });
        let answer: Value = ureq::post(&format!("{endpoint}/_faults"))
            .send_json(rule)
            .expect("the router takes the rule")
            .into_json()
            .expect("the router answers JSON");
        let id = answer["id"].as_str().expect("an id");
        Self {
            url: format!("{endpoint}/_faults/{id}"),
        }
    }

    /// How many requests it acted on.
    fn hits(&self) -> u64 {
        let rule: Value = ureq::get(&self.url)
            .call()
            .expect("the rule is listed")
            .into_json()
            .expect("the router answers JSON");
        rule["hits"].as_u64().unwrap_or_default()
    }
}

impl Drop for Fault {
    fn drop(&mut self) {
        let _ = ureq::delete(&self.url).call();
    }
}

/// The stack's tables for the client `name` (see [`stack`]), a shard's row taken by [`A`], and
/// the counter the take left; `None` without the stack.
async fn held(name: &str) -> Option<(DynamoLeaseStore, String, LeaseKey, u64)> {
    let (store, counts) = stack(name).await?;
    let key = LeaseKey::new("orders", "shardId-000000000000");
    store.acquire(&key, A, LEASE).await.expect("taken");
    let seen = store.fence(&key).counter.expect("the take's counter");
    Some((store, counts, key, seen))
}

/// A commit of the count of `id` with `key`'s row moved to checkpoint 100, sent under
/// `request_token`.
fn one_count<'a>(
    key: &'a LeaseKey,
    counts: &str,
    id: &str,
    request_token: &'a str,
) -> CommitRequest<'a> {
    request(
        "t1",
        request_token,
        vec![(UnitId(1), vec![count(counts, id)])],
        vec![row(key, "100")],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_cancelled_by_a_conflict_applies_nothing_and_its_next_attempt_lands_once() {
    let name = "commit-conflict";
    let Some((store, counts, key, seen)) = held(name).await else {
        return;
    };
    // A renewal of the row was in progress: DynamoDB cancels the transaction, blaming the row.
    let fault = Fault::add(
        name,
        "TransactWriteItems",
        json!({
            "status": 400,
            "error_type": "TransactionCanceledException",
            "cancellation_reasons": [
                { "Code": "None" },
                { "Code": "TransactionConflict", "Message": "Transaction is ongoing for the item" },
            ],
        }),
        1,
    );
    let answer = store.commit(&one_count(&key, &counts, "r1", "t1-00")).await;
    assert!(matches!(answer, CommitAnswer::NotApplied), "{answer:?}");
    assert_eq!(fault.hits(), 1, "the injector cancelled it");
    assert_eq!(applied(&store, &counts, "r1").await, 0, "nothing applied");
    let held = store.read(&key).await.unwrap().expect("the row");
    assert_eq!(
        (held.owner.as_deref(), held.counter, held.commit_token),
        (Some(A), seen, None),
        "the row is still ours, unmoved: a conflict is never a lost lease"
    );
    // The lease's next attempt, under a new request token, lands once.
    let answer = store.commit(&one_count(&key, &counts, "r1", "t1-01")).await;
    assert!(matches!(answer, CommitAnswer::Done), "{answer:?}");
    assert_eq!(applied(&store, &counts, "r1").await, 1, "applied once");
    assert_eq!(store.fence(&key).counter, Some(seen + 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_and_a_checkpoint_meeting_a_commit_in_progress_never_lose_the_lease() {
    let name = "commit-renewal-conflict";
    let Some((store, _, key, _)) = held(name).await else {
        return;
    };
    // A commit of the row is in progress: every attempt of the SDK's is refused by it.
    let fault = Fault::add(
        name,
        "UpdateItem",
        json!({ "status": 400, "error_type": "TransactionConflictException" }),
        20,
    );
    let err = store
        .renew(&key, A, LEASE)
        .await
        .expect_err("refused while the commit is in progress");
    assert!(!err.is_fenced(), "never a lost lease: {err}");
    assert!(err.to_string().contains("TransactionConflict"), "{err}");
    let err = store
        .checkpoint(&key, A, "50")
        .await
        .expect_err("refused while the commit is in progress");
    assert!(!err.is_fenced(), "never a lost lease: {err}");
    assert!(fault.hits() >= 2, "the injector refused both");
    drop(fault);
    let renewed = store
        .renew(&key, A, LEASE)
        .await
        .expect("the next renewal lands");
    assert_eq!(renewed.owner.as_deref(), Some(A));
    store
        .checkpoint(&key, A, "50")
        .await
        .expect("the next checkpoint lands");
    let held = store.read(&key).await.unwrap().expect("the row");
    assert_eq!(
        (held.owner.as_deref(), held.checkpoint.as_deref()),
        (Some(A), Some("50"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_applied_whose_answer_was_lost_is_recognised_and_applied_once() {
    let name = "commit-answer-lost";
    let Some((store, counts, key, seen)) = held(name).await else {
        return;
    };
    // DynamoDB applied it and the answer was lost (a 500): the SDK sends it again, with the same
    // request token, and meets the row its first attempt moved.
    let fault = Fault::add(
        name,
        "TransactWriteItems",
        json!({ "apply_then_status": 500 }),
        1,
    );
    let answer = store.commit(&one_count(&key, &counts, "r1", "t1-00")).await;
    assert!(matches!(answer, CommitAnswer::Done), "{answer:?}");
    assert_eq!(fault.hits(), 1, "the first attempt's answer was lost");
    assert_eq!(applied(&store, &counts, "r1").await, 1, "applied once");
    let held = store.read(&key).await.unwrap().expect("the row");
    assert_eq!(
        (
            held.counter,
            held.commit_token.as_deref(),
            held.checkpoint.as_deref()
        ),
        (seen + 1, Some("t1"), Some("100"))
    );
    assert_eq!(store.fence(&key).counter, Some(seen + 1));
}

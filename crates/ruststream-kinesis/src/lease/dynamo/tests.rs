//! The DynamoDB store at the SDK boundary: exchanges the local stack never produces, replayed
//! through the SDK's connector with its own retries on.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use aws_sdk_dynamodb::config::retry::RetryConfig;
use serde_json::{Value, json};

use super::DynamoLeaseStore;
use crate::doubles::fake_kinesis::{Reply, Seen, bodies, replying};
use crate::{LeaseKey, LeaseStore};

/// The row as DynamoDB's JSON carries it.
fn row(owner: Option<&str>, expiry: &Value, counter: u64, checkpoint: &str) -> Value {
    let mut item = json!({
        "lease_key": { "S": "orders:shardId-000000000000" },
        "lease_expiry": expiry,
        "lease_counter": { "N": counter.to_string() },
        "checkpoint": { "S": checkpoint },
    });
    if let Some(owner) = owner {
        item["lease_owner"] = json!({ "S": owner });
    }
    item
}

fn refused(item: Value) -> Reply {
    Reply::status(
        400,
        json!({
            "__type": "com.amazonaws.dynamodb.v20120810#ConditionalCheckFailedException",
            "message": "The conditional request failed",
            "Item": item,
        }),
    )
}

/// A store on a fake DynamoDB whose `UpdateItem` number `n` (from 0) is answered by
/// `answer(n, body)`; the SDK retries as it does by default, without waiting.
fn store(
    answer: impl Fn(usize, &Value) -> Reply + Send + Sync + 'static,
) -> (DynamoLeaseStore, Seen) {
    let updates = AtomicUsize::new(0);
    let (config, seen) = replying(move |_, operation, body| match operation {
        "UpdateItem" => answer(updates.fetch_add(1, Ordering::SeqCst), body),
        // No bare row of an earlier version.
        "GetItem" => Reply::ok(json!({})),
        other => Reply::error(400, &format!("Unexpected{other}")),
    });
    let config = config
        .into_builder()
        .retry_config(
            RetryConfig::standard()
                .with_max_attempts(3)
                .with_initial_backoff(Duration::from_millis(1)),
        )
        .build();
    (DynamoLeaseStore::new(&config, "leases"), seen)
}

/// Takes shard 0 of `orders` as `me` through `store`: its key.
async fn held_by_me(store: &DynamoLeaseStore) -> LeaseKey {
    let key = LeaseKey::new("orders", "shardId-000000000000");
    store
        .acquire(&key, "me", Duration::from_secs(10))
        .await
        .unwrap();
    key
}

fn taken(body: &Value) -> Reply {
    let values = &body["ExpressionAttributeValues"];
    Reply::ok(json!({ "Attributes": row(Some("me"), &values[":expiry"], 1, "TRIM_HORIZON") }))
}

#[tokio::test]
async fn a_renewal_whose_lost_answer_was_applied_is_a_renewal_not_a_lost_lease() {
    // [the take, a 500 whose write was applied, the SDK's resend refused by its own counter]
    let (store, seen) = store(|n, body| match n {
        0 => taken(body),
        1 => Reply::error(500, "com.amazonaws.dynamodb.v20120810#InternalServerError"),
        _ => refused(row(
            Some("me"),
            &body["ExpressionAttributeValues"][":expiry"],
            2,
            "TRIM_HORIZON",
        )),
    });
    let key = held_by_me(&store).await;
    let renewed = store
        .renew(&key, "me", Duration::from_secs(10))
        .await
        .expect("the write this owner sent landed: the lease is renewed, not lost");
    assert_eq!(renewed.counter, 2);
    let updates = bodies(&seen, "UpdateItem");
    assert_eq!(
        updates.len(),
        3,
        "the SDK sent the renewal again after the 500"
    );
    assert_eq!(updates[1], updates[2], "the resend is the same request");
    assert_eq!(
        updates[2]["ExpressionAttributeValues"][":seen"],
        json!({ "N": "1" })
    );
}

#[tokio::test]
async fn a_checkpoint_whose_connection_broke_after_it_landed_is_written() {
    let (store, seen) = store(|n, body| {
        let values = &body["ExpressionAttributeValues"];
        match n {
            0 => taken(body),
            1 => Reply::Reset,
            2 => refused(row(
                Some("me"),
                &values[":expiry"],
                2,
                values[":checkpoint"]["S"].as_str().unwrap(),
            )),
            // The next write is conditioned on the counter the landed one left.
            _ => {
                assert_eq!(values[":seen"], json!({ "N": "2" }));
                Reply::ok(json!({ "Attributes": { "lease_counter": { "N": "3" } } }))
            }
        }
    });
    let key = held_by_me(&store).await;
    store
        .checkpoint_and_renew(&key, "me", "42", Duration::from_secs(10))
        .await
        .expect("the checkpoint landed");
    store.checkpoint(&key, "me", "43").await.unwrap();
    assert_eq!(bodies(&seen, "UpdateItem").len(), 4);
}

#[tokio::test]
async fn a_refusal_by_a_row_another_owner_wrote_is_a_lost_lease() {
    let (store, _) = store(|n, body| match n {
        0 => taken(body),
        1 => Reply::error(500, "com.amazonaws.dynamodb.v20120810#InternalServerError"),
        // Another instance took the row meanwhile: same counter step, another owner.
        _ => refused(row(Some("other"), &json!({ "N": "1" }), 2, "TRIM_HORIZON")),
    });
    let key = held_by_me(&store).await;
    let err = store
        .renew(&key, "me", Duration::from_secs(10))
        .await
        .expect_err("another owner holds the row");
    assert!(err.is_fenced(), "{err}");
}

#[tokio::test]
async fn a_refusal_by_our_own_row_that_moved_twice_is_a_lost_lease() {
    // Owner and values match, but the counter moved by two: another write (a restart of this
    // owner id, say) came between; the row is not this write's.
    let (store, _) = store(|n, body| match n {
        0 => taken(body),
        1 => Reply::error(500, "com.amazonaws.dynamodb.v20120810#InternalServerError"),
        _ => refused(row(
            Some("me"),
            &body["ExpressionAttributeValues"][":expiry"],
            3,
            "TRIM_HORIZON",
        )),
    });
    let key = held_by_me(&store).await;
    assert!(
        store
            .renew(&key, "me", Duration::from_secs(10))
            .await
            .is_err()
    );
}

#[tokio::test]
async fn a_malformed_row_is_skipped_and_the_rest_are_listed() {
    let (config, _) = replying(|_, operation, _| match operation {
        "Scan" => Reply::ok(json!({
            "Items": [
                row(Some("a"), &json!({ "N": "5" }), 1, "7"),
                {
                    "lease_key": { "S": "orders:shardId-000000000001" },
                    "lease_expiry": { "S": "soon" },
                },
                { "lease_key": { "N": "3" } },
                {
                    "lease_key": { "S": "orders:shardId-000000000002" },
                    "lease_counter": { "N": "4" },
                    "checkpoint": { "S": "SHARD_END" },
                },
            ],
            "Count": 4,
        })),
        other => Reply::error(400, &format!("Unexpected{other}")),
    });
    let store = DynamoLeaseStore::new(&config, "leases");
    let listed = store
        .list("payments")
        .await
        .expect("a bad row of another stream does not fail the listing")
        .expect("the store lists");
    assert!(listed.is_empty());
    let rows = store
        .rows()
        .await
        .expect("the operator's view reads the rest");
    let shards: Vec<&str> = rows.iter().map(|(key, _)| key.shard()).collect();
    assert_eq!(shards, ["shardId-000000000000", "shardId-000000000002"]);
    // For its own stream the listing fails naming the bad row: the coordinator then reads row
    // by row and leaves that shard alone instead of taking it for one without a row.
    let err = store
        .list("orders")
        .await
        .expect_err("a bad row of this stream");
    assert!(
        err.to_string().contains("orders:shardId-000000000001")
            && err.to_string().contains("lease_expiry"),
        "{err}"
    );
}

#[tokio::test]
async fn a_rows_commit_token_reads_back_and_a_malformed_one_is_named() {
    let reply = |token: Value| {
        move |_: usize, operation: &str, _: &Value| match operation {
            "GetItem" => {
                let mut item = row(Some("a"), &json!({ "N": "5" }), 3, "7");
                item["commit_token"] = token.clone();
                Reply::ok(json!({ "Item": item }))
            }
            other => Reply::error(400, &format!("Unexpected{other}")),
        }
    };
    let key = LeaseKey::new("orders", "shardId-000000000000");
    let (config, _) = replying(reply(json!({ "S": "00000000000000a100000002" })));
    let read = DynamoLeaseStore::new(&config, "leases")
        .read(&key)
        .await
        .expect("a row")
        .expect("there is one");
    assert_eq!(
        read.commit_token.as_deref(),
        Some("00000000000000a100000002")
    );
    let (config, _) = replying(reply(json!({ "N": "2" })));
    let err = DynamoLeaseStore::new(&config, "leases")
        .read(&key)
        .await
        .expect_err("a token that is no string");
    assert!(err.to_string().contains("commit_token"), "{err}");
}

#[tokio::test]
async fn a_renewal_meeting_a_commit_in_progress_fails_and_is_never_a_lost_lease() {
    // [the take, a TransactionConflictException on each attempt while a commit is in progress,
    // then the next renewal lands]
    let busy = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let in_progress = std::sync::Arc::clone(&busy);
    let (store, _) = store(move |n, body| match n {
        0 => taken(body),
        _ if in_progress.load(Ordering::SeqCst) => Reply::error(
            400,
            "com.amazonaws.dynamodb.v20120810#TransactionConflictException",
        ),
        _ => Reply::ok(
            json!({ "Attributes": row(Some("me"), &body["ExpressionAttributeValues"][":expiry"], 2, "TRIM_HORIZON") }),
        ),
    });
    let key = held_by_me(&store).await;
    let err = store
        .renew(&key, "me", Duration::from_secs(10))
        .await
        .expect_err("rejected whole");
    assert!(!err.is_fenced(), "never a lost lease: {err}");
    assert!(err.to_string().contains("TransactionConflict"), "{err}");
    // An earlier attempt of the SDK's may have landed: the fence says so, and the next write's
    // refusal by a row still ours would be retried, not taken for a lost lease.
    assert!(store.fence(&key).uncertain);
    busy.store(false, Ordering::SeqCst);
    let renewed = store
        .renew(&key, "me", Duration::from_secs(10))
        .await
        .expect("the next renewal lands");
    assert_eq!(renewed.counter, 2);
}

mod commits;

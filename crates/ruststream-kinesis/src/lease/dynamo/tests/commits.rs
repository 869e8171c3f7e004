//! Commits at the SDK boundary: the answers of `TransactWriteItems` the local stack never gives
//! (contention, a lost item, reasons short of the actions, a request-level refusal) and what the
//! store makes of them, with the fences they leave.

use aws_sdk_dynamodb::types::{AttributeValue, Put, TransactWriteItem};

use super::*;
use crate::commit::UnitId;
use crate::lease::dynamo::commit::{CommitAnswer, CommitRequest, CommitRow};
use crate::lease::rules::Fence;

/// A store on a fake DynamoDB: takes answer as a take does, `GetItem` with `get`, and
/// `TransactWriteItems` number `n` (from 0) with `transact(n, body)`.
fn commit_store(
    get: Value,
    transact: impl Fn(usize, &Value) -> Reply + Send + Sync + 'static,
) -> (DynamoLeaseStore, Seen) {
    let sent = AtomicUsize::new(0);
    let (config, seen) = replying(move |_, operation, body| match operation {
        "UpdateItem" => taken(body),
        "GetItem" => Reply::ok(get.clone()),
        "TransactWriteItems" => transact(sent.fetch_add(1, Ordering::SeqCst), body),
        other => Reply::error(400, &format!("Unexpected{other}")),
    });
    (DynamoLeaseStore::new(&config, "leases"), seen)
}

/// A `TransactionCanceledException` with these reasons.
fn cancelled(reasons: Value) -> Reply {
    Reply::status(
        400,
        json!({
            "__type": "com.amazonaws.dynamodb.v20120810#TransactionCanceledException",
            "message": "Transaction cancelled",
            "CancellationReasons": reasons,
        }),
    )
}

/// One unit with one put, and the row of `key`, under `token` sent as `request_token`.
fn one_unit<'a>(key: &'a LeaseKey, token: &'a str, request_token: &'a str) -> CommitRequest<'a> {
    let put = Put::builder()
        .table_name("counts")
        .item("id", AttributeValue::S("r1".to_owned()))
        .build()
        .unwrap();
    CommitRequest {
        owner: "me",
        token,
        request_token,
        units: vec![(
            UnitId(1),
            vec![TransactWriteItem::builder().put(put).build()],
        )],
        rows: vec![CommitRow {
            key,
            checkpoint: "100",
            behind_ms: None,
            expiry_ms: 1,
            prior: Some("t0"),
        }],
    }
}

/// The row as DynamoDB returns it, ours at `counter` with commit token `token`.
fn ours(counter: u64, token: &str) -> Value {
    let mut item = row(Some("me"), &json!({ "N": "9" }), counter, "100");
    item["commit_token"] = json!({ "S": token });
    item
}

fn uncertain_at(store: &DynamoLeaseStore, key: &LeaseKey, counter: u64) {
    store.set_fence(
        key,
        Fence {
            counter: Some(counter),
            uncertain: true,
        },
    );
}

#[tokio::test]
async fn a_commit_meeting_a_write_in_progress_is_not_applied_and_leaves_the_fence() {
    let (store, seen) = commit_store(json!({}), |_, _| {
        cancelled(json!([
            { "Code": "None" },
            { "Code": "TransactionConflict", "Message": "Transaction is ongoing for the item" },
        ]))
    });
    let key = held_by_me(&store).await;
    uncertain_at(&store, &key, 1);
    let before = store.fence(&key);
    let answer = store.commit(&one_unit(&key, "t1", "t1-00")).await;
    assert!(matches!(answer, CommitAnswer::NotApplied), "{answer:?}");
    assert_eq!(
        store.fence(&key),
        before,
        "the row's condition was not judged: still uncertain"
    );
    let sent = bodies(&seen, "TransactWriteItems");
    assert_eq!(sent[0]["ClientRequestToken"], json!("t1-00"));
    assert_eq!(
        sent[0]["TransactItems"][1]["Update"]["ExpressionAttributeValues"][":seen"],
        json!({ "N": "1" }),
        "conditioned on the counter the take left"
    );
}

#[tokio::test]
async fn a_refusal_by_our_own_landed_renewal_adopts_the_counter_for_a_new_attempt() {
    // A renewal without an answer landed (counter 2, the token t0 the writer knew): the commit
    // at 1 is refused. Nothing is sent again under its request token: the lease sends a new
    // attempt, conditioned on the adopted counter.
    let (store, seen) = commit_store(json!({}), |n, _| match n {
        0 => cancelled(json!([
            { "Code": "None" },
            { "Code": "ConditionalCheckFailed", "Item": ours(2, "t0") },
        ])),
        _ => Reply::ok(json!({})),
    });
    let key = held_by_me(&store).await;
    uncertain_at(&store, &key, 1);
    let answer = store.commit(&one_unit(&key, "t1", "t1-00")).await;
    assert!(matches!(answer, CommitAnswer::NotApplied), "{answer:?}");
    assert_eq!(
        store.fence(&key),
        Fence {
            counter: Some(2),
            uncertain: false
        }
    );
    assert_eq!(
        bodies(&seen, "TransactWriteItems").len(),
        1,
        "one send per call"
    );
    let again = store.commit(&one_unit(&key, "t1", "t1-01")).await;
    assert!(matches!(again, CommitAnswer::Done), "{again:?}");
    let sent = bodies(&seen, "TransactWriteItems");
    assert_eq!(sent[1]["ClientRequestToken"], json!("t1-01"));
    assert_eq!(
        sent[1]["TransactItems"][1]["Update"]["ExpressionAttributeValues"][":seen"],
        json!({ "N": "2" })
    );
    assert_eq!(store.fence(&key).counter, Some(3));
}

#[tokio::test]
async fn a_refused_row_returned_without_its_item_is_read_again_before_judging() {
    // The resend of a commit that landed, refused by the counter it moved; the reason carries no
    // item. A consistent read shows the commit's token one past the counter it saw.
    let (store, seen) = commit_store(json!({ "Item": ours(2, "t1") }), |_, _| {
        cancelled(json!([
            { "Code": "None" },
            { "Code": "ConditionalCheckFailed" },
        ]))
    });
    let key = held_by_me(&store).await;
    uncertain_at(&store, &key, 1);
    let reads = bodies(&seen, "GetItem").len();
    let answer = store.commit(&one_unit(&key, "t1", "t1-00")).await;
    assert!(matches!(answer, CommitAnswer::Done), "{answer:?}");
    let read = bodies(&seen, "GetItem");
    assert_eq!(read.len(), reads + 1, "the row read once");
    assert_eq!(read[reads]["ConsistentRead"], json!(true));
    assert_eq!(store.fence(&key).counter, Some(2));
}

#[tokio::test]
async fn reasons_short_of_the_actions_are_no_answer_to_trust() {
    let (store, _) = commit_store(json!({}), |_, _| {
        cancelled(json!([{ "Code": "ConditionalCheckFailed" }]))
    });
    let key = held_by_me(&store).await;
    let answer = store.commit(&one_unit(&key, "t1", "t1-00")).await;
    assert!(matches!(answer, CommitAnswer::Failed(_)), "{answer:?}");
    assert!(store.fence(&key).uncertain, "it may have landed");
}

#[tokio::test]
async fn a_request_invalid_as_a_whole_hands_its_first_unit_back() {
    let (store, _) = commit_store(json!({}), |_, _| {
        Reply::error(400, "com.amazon.coral.validate#ValidationException")
    });
    let key = held_by_me(&store).await;
    let before = store.fence(&key);
    let CommitAnswer::UserRefused(refusal) = store.commit(&one_unit(&key, "t1", "t1-00")).await
    else {
        panic!("the unit goes back to its handler");
    };
    assert_eq!(
        (refusal.unit, refusal.action, refusal.code.as_str()),
        (UnitId(1), None, "ValidationException")
    );
    assert_eq!(store.fence(&key), before);
}

#[tokio::test]
async fn a_request_of_several_units_invalid_as_a_whole_blames_none_of_them() {
    let (store, _) = commit_store(json!({}), |_, _| {
        Reply::error(400, "com.amazon.coral.validate#ValidationException")
    });
    let key = held_by_me(&store).await;
    let before = store.fence(&key);
    let mut request = one_unit(&key, "t1", "t1-00");
    let second = request.units[0].1.clone();
    request.units.push((UnitId(2), second));
    let answer = store.commit(&request).await;
    assert!(matches!(answer, CommitAnswer::Split), "{answer:?}");
    assert_eq!(
        store.fence(&key),
        before,
        "nothing applied: the fence stands"
    );
}

#[tokio::test]
async fn a_commit_naming_no_row_is_never_sent() {
    let (store, seen) = commit_store(json!({}), |_, _| Reply::ok(json!({})));
    let key = LeaseKey::new("orders", "shardId-000000000000");
    let request = CommitRequest {
        rows: Vec::new(),
        ..one_unit(&key, "t1", "t1-00")
    };
    let answer = store.commit(&request).await;
    assert!(matches!(answer, CommitAnswer::Failed(_)), "{answer:?}");
    assert!(bodies(&seen, "TransactWriteItems").is_empty());
}

#[tokio::test]
async fn a_commit_without_writes_is_one_conditional_update_that_keeps_its_token() {
    let (store, seen) = store(|n, body| match n {
        0 => taken(body),
        _ => Reply::ok(json!({ "Attributes": { "lease_counter": { "N": "2" } } })),
    });
    let key = held_by_me(&store).await;
    let request = CommitRequest {
        owner: "me",
        token: "t1",
        request_token: "t1-00",
        units: Vec::new(),
        rows: vec![CommitRow {
            key: &key,
            checkpoint: "100",
            behind_ms: None,
            expiry_ms: 5,
            prior: None,
        }],
    };
    assert!(matches!(store.commit(&request).await, CommitAnswer::Done));
    assert!(
        bodies(&seen, "TransactWriteItems").is_empty(),
        "half the cost"
    );
    let update = &bodies(&seen, "UpdateItem")[1];
    assert!(
        update["ConditionExpression"]
            .as_str()
            .is_some_and(|condition| condition.contains(":seen")),
        "{update}"
    );
    assert_eq!(
        update["ExpressionAttributeValues"][":token"],
        json!({ "S": "t1" })
    );
    assert_eq!(store.fence(&key).counter, Some(2));
}

#[tokio::test]
async fn a_write_the_role_may_not_make_refuses_its_handling_naming_the_table() {
    let denied = |table: &str| {
        Reply::status(
            400,
            json!({
                "__type": "com.amazonaws.dynamodb.v20120810#AccessDeniedException",
                "message": format!(
                    "User: arn:aws:sts::123456789012:assumed-role/reader/i-1 is not authorized \
                     to perform: dynamodb:PutItem on resource: \
                     arn:aws:dynamodb:us-east-1:123456789012:table/{table} because no \
                     identity-based policy allows the dynamodb:PutItem action"
                ),
            }),
        )
    };
    let (store, _) = commit_store(json!({}), move |n, _| match n {
        0 => denied("counts"),
        _ => denied("leases"),
    });
    let key = held_by_me(&store).await;
    let CommitAnswer::UserRefused(refusal) = store.commit(&one_unit(&key, "t1", "t1-00")).await
    else {
        panic!("the handling that named the table is refused");
    };
    assert_eq!(
        (refusal.unit, refusal.action, refusal.code.as_str()),
        (UnitId(1), Some(0), "AccessDeniedException")
    );
    assert!(
        refusal.message.unwrap_or_default().contains("\"counts\""),
        "names the table"
    );
    // The lease table denied is no handling's fault: the commit fails, and may be sent again.
    let answer = store.commit(&one_unit(&key, "t1", "t1-01")).await;
    assert!(matches!(answer, CommitAnswer::Failed(_)), "{answer:?}");
}

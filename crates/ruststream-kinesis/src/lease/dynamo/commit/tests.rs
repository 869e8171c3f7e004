//! Commits on the local stack (moto): the cases of the store suite for transactions,
//! made with the store's own calls and read back from the tables. Runs when
//! `KINESIS_TEST_ENDPOINT` names the local stack.

use aws_sdk_dynamodb::types::{ConditionCheck, Put};

use super::*;
use crate::commit::UnitId;

pub(super) const A: &str = "commit-owner-a";
pub(super) const LEASE: Duration = Duration::from_secs(10);

/// A lease table and a table of counts (key `id`) on the local stack, reached as the client
/// (SDK app name) `name`, which the fault injector's rules of a test name; `None` without it.
pub(super) async fn stack(name: &str) -> Option<(DynamoLeaseStore, String)> {
    let endpoint = std::env::var("KINESIS_TEST_ENDPOINT").ok()?;
    let config = crate::local_stack_config(&endpoint)
        .into_builder()
        .app_name(aws_config::AppName::new(name.to_owned()).expect("a valid app name"))
        .build();
    let store = DynamoLeaseStore::new(&config, format!("{name}-{}", epoch_millis()));
    store
        .create_table()
        .await
        .expect("the lease table is created");
    let counts = format!("{name}-counts-{}", epoch_millis());
    store
        .client
        .create_table()
        .table_name(&counts)
        .attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name("id")
                .attribute_type(ScalarAttributeType::S)
                .build()
                .expect("a definition"),
        )
        .key_schema(
            KeySchemaElement::builder()
                .attribute_name("id")
                .key_type(KeyType::Hash)
                .build()
                .expect("a key"),
        )
        .billing_mode(BillingMode::PayPerRequest)
        .send()
        .await
        .expect("the counts table is created");
    Some((store, counts))
}

/// `ADD applied :one` on the count of `id`.
pub(super) fn count(counts: &str, id: &str) -> TransactWriteItem {
    let update = Update::builder()
        .table_name(counts)
        .key("id", AttributeValue::S(id.to_owned()))
        .update_expression("ADD applied :one")
        .expression_attribute_values(":one", AttributeValue::N("1".to_owned()))
        .build()
        .expect("an update");
    TransactWriteItem::builder().update(update).build()
}

/// How often the count of `id` was applied (0: never).
pub(super) async fn applied(store: &DynamoLeaseStore, counts: &str, id: &str) -> u64 {
    let item = store
        .client
        .get_item()
        .table_name(counts)
        .key("id", AttributeValue::S(id.to_owned()))
        .consistent_read(true)
        .send()
        .await
        .expect("a read")
        .item
        .unwrap_or_default();
    number_attribute(&item, "applied")
        .expect("a number")
        .unwrap_or(0)
}

/// Another instance takes `key`'s row: its owner and counter move.
async fn taken_away(store: &DynamoLeaseStore, key: &LeaseKey) {
    store
        .client
        .update_item()
        .table_name(store.table())
        .key(KEY, AttributeValue::S(key.row_key()))
        .update_expression("SET lease_owner = :b ADD lease_counter :one")
        .expression_attribute_values(":b", string("commit-owner-b"))
        .expression_attribute_values(":one", number(1))
        .send()
        .await
        .expect("moved");
}

pub(super) fn row<'a>(key: &'a LeaseKey, checkpoint: &'a str) -> CommitRow<'a> {
    CommitRow {
        key,
        checkpoint,
        behind_ms: Some(3),
        expiry_ms: epoch_millis() + 10_000,
        prior: None,
    }
}

pub(super) fn request<'a>(
    token: &'a str,
    request_token: &'a str,
    units: Vec<(UnitId, Vec<TransactWriteItem>)>,
    rows: Vec<CommitRow<'a>>,
) -> CommitRequest<'a> {
    CommitRequest {
        owner: A,
        token,
        request_token,
        units,
        rows,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_lands_whole_and_its_resend_after_a_lost_answer_lands_once() {
    let Some((store, counts)) = stack("commit-lands").await else {
        return;
    };
    let key = LeaseKey::new("orders", "shardId-000000000000");
    store.acquire(&key, A, LEASE).await.expect("taken");
    let seen = store.fence(&key).counter.expect("the take's counter");
    let commit = request(
        "t1",
        "t1-00",
        vec![(UnitId(1), vec![count(&counts, "r1")])],
        vec![row(&key, "100")],
    );
    assert!(matches!(store.commit(&commit).await, CommitAnswer::Done));
    let written = store.read(&key).await.unwrap().expect("the row");
    assert_eq!(
        (
            written.counter,
            written.checkpoint.as_deref(),
            written.commit_token.as_deref()
        ),
        (seen + 1, Some("100"), Some("t1"))
    );
    assert_eq!(written.behind_ms, Some(3));
    assert_eq!(applied(&store, &counts, "r1").await, 1);
    // Its answer was lost: the store object knows only that a write had no answer. The resend
    // (moto evaluates it again) is refused by the counter it moved, and the row's token shows it
    // landed: a success, and nothing applied twice.
    store.set_fence(
        &key,
        Fence {
            counter: Some(seen),
            uncertain: true,
        },
    );
    assert!(matches!(store.commit(&commit).await, CommitAnswer::Done));
    assert_eq!(applied(&store, &counts, "r1").await, 1, "counted once");
    assert_eq!(store.fence(&key).counter, Some(seen + 1));
    // A commit without writes (a seek's position, records that staged nothing): one update.
    let alone = request("t2", "t2-00", Vec::new(), vec![row(&key, "101")]);
    assert!(matches!(store.commit(&alone).await, CommitAnswer::Done));
    let written = store.read(&key).await.unwrap().expect("the row");
    assert_eq!(
        (
            written.counter,
            written.checkpoint.as_deref(),
            written.commit_token.as_deref()
        ),
        (seen + 2, Some("101"), Some("t2"))
    );
    // Its answer lost too: the resend is one update, refused by its own landing and known by
    // its token.
    store.set_fence(
        &key,
        Fence {
            counter: Some(seen + 1),
            uncertain: true,
        },
    );
    assert!(matches!(store.commit(&alone).await, CommitAnswer::Done));
    let again = store.read(&key).await.unwrap().expect("the row");
    assert_eq!(again.counter, seen + 2, "not written twice");
    assert_eq!(store.fence(&key).counter, Some(seen + 2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_on_a_lease_that_moved_applies_nothing() {
    let Some((store, counts)) = stack("commit-moved").await else {
        return;
    };
    let key = LeaseKey::new("orders", "shardId-000000000000");
    store.acquire(&key, A, LEASE).await.expect("taken");
    // Another instance took the shard (its lease lapsed by their clock): owner and counter moved.
    taken_away(&store, &key).await;
    let commit = request(
        "t1",
        "t1-00",
        vec![(UnitId(1), vec![count(&counts, "r2")])],
        vec![row(&key, "100")],
    );
    assert!(matches!(
        store.commit(&commit).await,
        CommitAnswer::Lost { .. }
    ));
    assert_eq!(applied(&store, &counts, "r2").await, 0, "nothing applied");
    let row = store.read(&key).await.unwrap().expect("the row");
    assert_ne!(
        row.checkpoint.as_deref(),
        Some("100"),
        "the row did not move"
    );
    assert_eq!(row.commit_token, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_units_own_condition_refuses_the_whole_commit_naming_its_write() {
    let Some((store, counts)) = stack("commit-user").await else {
        return;
    };
    let key = LeaseKey::new("orders", "shardId-000000000000");
    store.acquire(&key, A, LEASE).await.expect("taken");
    let seen = store.fence(&key).counter;
    let first = request(
        "t1",
        "t1-00",
        vec![(UnitId(1), vec![count(&counts, "r3")])],
        vec![row(&key, "100")],
    );
    assert!(matches!(store.commit(&first).await, CommitAnswer::Done));
    // Unit 2 counts r4 and checks that r3 was never counted: it was.
    let check = ConditionCheck::builder()
        .table_name(&counts)
        .key("id", AttributeValue::S("r3".to_owned()))
        .condition_expression("attribute_not_exists(applied)")
        .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
        .build()
        .expect("a check");
    let second = request(
        "t2",
        "t2-00",
        vec![(
            UnitId(2),
            vec![
                count(&counts, "r4"),
                TransactWriteItem::builder().condition_check(check).build(),
            ],
        )],
        vec![row(&key, "200")],
    );
    // A write of ours before had no answer: the row's reason (None) settles it.
    store.set_fence(
        &key,
        Fence {
            counter: seen.map(|seen| seen + 1),
            uncertain: true,
        },
    );
    let CommitAnswer::UserRefused(refusal) = store.commit(&second).await else {
        panic!("a unit's condition refuses it");
    };
    assert_eq!(
        (refusal.unit, refusal.action, refusal.code.as_str()),
        (UnitId(2), Some(1), "ConditionalCheckFailed")
    );
    assert_eq!(applied(&store, &counts, "r4").await, 0, "nothing applied");
    let row = store.read(&key).await.unwrap().expect("the row");
    assert_eq!(
        (row.checkpoint.as_deref(), row.commit_token.as_deref()),
        (Some("100"), Some("t1")),
        "the row did not move"
    );
    assert_eq!(store.fence(&key).counter, seen.map(|seen| seen + 1));
    assert!(
        !store.fence(&key).uncertain,
        "every row's condition held: the counter is known again"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_over_two_shards_moves_both_rows_in_one_request() {
    let Some((store, counts)) = stack("commit-two").await else {
        return;
    };
    let (first, second) = (
        LeaseKey::new("orders", "shardId-000000000000"),
        LeaseKey::new("orders", "shardId-000000000001"),
    );
    store.acquire(&first, A, LEASE).await.expect("taken");
    store.acquire(&second, A, LEASE).await.expect("taken");
    let commit = request(
        "t1",
        "t1-00",
        vec![
            (UnitId(1), vec![count(&counts, "r5")]),
            (UnitId(2), vec![count(&counts, "r6")]),
        ],
        vec![row(&first, "100"), row(&second, "700")],
    );
    assert!(matches!(store.commit(&commit).await, CommitAnswer::Done));
    for (key, checkpoint) in [(&first, "100"), (&second, "700")] {
        let row = store.read(key).await.unwrap().expect("the row");
        assert_eq!(
            (row.checkpoint.as_deref(), row.commit_token.as_deref()),
            (Some(checkpoint), Some("t1"))
        );
    }
    assert_eq!(applied(&store, &counts, "r5").await, 1);
    assert_eq!(applied(&store, &counts, "r6").await, 1);
    // The second row moved meanwhile (another owner): the next commit over both applies nothing.
    taken_away(&store, &second).await;
    let next = request(
        "t2",
        "t2-00",
        vec![(UnitId(3), vec![count(&counts, "r7")])],
        vec![row(&first, "101"), row(&second, "701")],
    );
    match store.commit(&next).await {
        CommitAnswer::Lost { rows } => assert_eq!(rows, [1], "the answer names the second row"),
        other => panic!("the second row's lease is lost: {other:?}"),
    }
    assert_eq!(applied(&store, &counts, "r7").await, 0);
    let row = store.read(&first).await.unwrap().expect("the row");
    assert_eq!(
        row.checkpoint.as_deref(),
        Some("100"),
        "the first row did not move either"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_never_wrote_the_row_commits_nothing_and_says_why() {
    let Some((store, counts)) = stack("commit-unknown").await else {
        return;
    };
    let key = LeaseKey::new("orders", "shardId-000000000000");
    store.acquire(&key, A, LEASE).await.expect("taken");
    // Another store object of the same owner (another process) knows no counter of the row: a
    // commit conditioned on the owner alone could land twice, so none is sent.
    let stranger = DynamoLeaseStore {
        fences: Arc::default(),
        ..store.clone()
    };
    let commit = request(
        "t1",
        "t1-00",
        vec![(UnitId(1), vec![count(&counts, "r8")])],
        vec![row(&key, "100")],
    );
    let CommitAnswer::Failed(error) = stranger.commit(&commit).await else {
        panic!("no commit without the counter");
    };
    let said = error.to_string();
    assert!(
        said.contains(&key.to_string()) && said.contains("never wrote this row"),
        "{said}"
    );
    assert_eq!(applied(&store, &counts, "r8").await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_to_a_missing_table_refuses_its_handling_naming_the_table() {
    let Some((store, counts)) = stack("commit-missing-table").await else {
        return;
    };
    let key = LeaseKey::new("orders", "shardId-000000000000");
    store.acquire(&key, A, LEASE).await.expect("taken");
    let seen = store.fence(&key).counter;
    let missing = format!("{counts}-never-created");
    // DynamoDB rejects the request as a whole (ResourceNotFoundException), naming no table.
    let commit = request(
        "t1",
        "t1-00",
        vec![
            (UnitId(1), vec![count(&counts, "r7")]),
            (UnitId(2), vec![count(&counts, "r8"), count(&missing, "r8")]),
        ],
        vec![row(&key, "100")],
    );
    let CommitAnswer::UserRefused(refusal) = store.commit(&commit).await else {
        panic!("the handling that named the missing table is refused");
    };
    assert_eq!(
        (refusal.unit, refusal.action, refusal.code.as_str()),
        (UnitId(2), Some(1), "ResourceNotFoundException")
    );
    let message = refusal.message.unwrap_or_default();
    assert!(
        message.contains(&missing) && message.contains("create it"),
        "{message}"
    );
    assert_eq!(applied(&store, &counts, "r7").await, 0, "nothing applied");
    let held = store.read(&key).await.unwrap().expect("the row");
    assert_eq!((held.counter, held.commit_token), (seen.unwrap(), None));
    // The lease table itself missing is no handling's fault: the commit fails as before.
    store
        .client
        .delete_table()
        .table_name(store.table())
        .send()
        .await
        .expect("deleted");
    let alone = request(
        "t2",
        "t2-00",
        vec![(UnitId(3), vec![count(&counts, "r9")])],
        vec![row(&key, "100")],
    );
    let answer = store.commit(&alone).await;
    assert!(matches!(answer, CommitAnswer::Failed(_)), "{answer:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_that_puts_into_a_table_learns_its_key_once() {
    let Some((store, counts)) = stack("commit-learns-key").await else {
        return;
    };
    let key = LeaseKey::new("orders", "shardId-000000000000");
    store.acquire(&key, A, LEASE).await.expect("taken");
    let put = Put::builder()
        .table_name(&counts)
        .item("id", AttributeValue::S("r10".to_owned()))
        .item("applied", AttributeValue::N("1".to_owned()))
        .build()
        .expect("a put");
    assert!(store.commit_tables.unasked(&counts));
    let commit = request(
        "t1",
        "t1-00",
        vec![(
            UnitId(1),
            vec![TransactWriteItem::builder().put(put).build()],
        )],
        vec![row(&key, "100")],
    );
    assert!(matches!(store.commit(&commit).await, CommitAnswer::Done));
    assert_eq!(applied(&store, &counts, "r10").await, 1);
    assert_eq!(
        store.commit_tables.key_of(&counts).as_deref(),
        Some(&["id".to_owned()][..]),
        "the handlings that stage puts after it know the key"
    );
    // The lease table is never asked about: nothing puts into it.
    assert!(store.commit_tables.unasked(store.table()));
}

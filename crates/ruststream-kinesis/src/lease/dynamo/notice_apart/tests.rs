//! The notice kept apart at the SDK boundary: a `BatchGetItem` answer as DynamoDB shapes it,
//! merged into one notice, and the keys it leaves unprocessed.

use serde_json::{Value, json};

use super::*;
use crate::doubles::fake_kinesis::{Reply, replying};
use crate::{NOTICE_LAYOUT, NOTICE_LAYOUT_APART};

/// A store that keeps the notice apart, on a fake DynamoDB answering every `BatchGetItem` with
/// `answer` and every `GetItem` with `head`.
fn apart(answer: Value, head: Value) -> DynamoLeaseStore {
    let (config, _) = replying(move |_, operation, _| match operation {
        "BatchGetItem" => Reply::ok(answer.clone()),
        "GetItem" => Reply::ok(json!({ "Item": head.clone() })),
        other => Reply::error(400, &format!("Unexpected{other}")),
    });
    DynamoLeaseStore::new(&config, "leases").keep_notice_head_apart()
}

fn number(n: u64) -> Value {
    json!({ "N": n.to_string() })
}

#[tokio::test]
async fn the_three_rows_read_as_one_notice() {
    let far = epoch_millis() + 60_000;
    let head = json!({
        "lease_key": { "S": "orders#notice" },
        "notice_counter": number(7),
        "notice_layout": number(NOTICE_LAYOUT_APART),
        "ask_pod-b": number(2),
        // A one-row fleet's leftover, lapsed long ago.
        "beat_old": number(1_000),
    });
    let answer = json!({
        "Responses": { "leases": [
            head.clone(),
            {
                "lease_key": { "S": "orders#beats#notice" },
                "beat_pod-a": number(far),
                "beat_pod-b": number(far + 1),
            },
            {
                "lease_key": { "S": "orders#runs#notice" },
                "incarnation_pod-a": { "S": "1-00000000000000ff@2" },
            },
        ] },
        "UnprocessedKeys": {},
    });
    let store = apart(answer, head);
    let notice = store.notice("orders").await.unwrap().unwrap();
    assert_eq!(notice.counter, 7);
    assert_eq!(notice.layout, Some(NOTICE_LAYOUT_APART));
    assert_eq!(notice.asks.get("pod-b"), Some(&2));
    assert_eq!(notice.beats.get("pod-a"), Some(&far));
    assert_eq!(notice.beats.get("pod-b"), Some(&(far + 1)));
    assert_eq!(
        notice.beats.get("old"),
        Some(&1_000),
        "lapsed, for the forgetting"
    );
    assert!(notice.incarnations.contains_key("pod-a"));
    let head = store.notice_head("orders").await.unwrap().unwrap();
    assert_eq!((head.counter, head.layout), (7, Some(NOTICE_LAYOUT_APART)));
    assert!(head.beats.is_empty() && head.incarnations.is_empty());
}

#[tokio::test]
async fn a_live_beat_in_the_head_is_a_one_row_fleets() {
    let head = json!({
        "lease_key": { "S": "orders#notice" },
        "notice_counter": number(3),
        "beat_pod-z": number(epoch_millis() + 60_000),
    });
    let answer = json!({ "Responses": { "leases": [head.clone()] } });
    let store = apart(answer, head);
    let notice = store.notice("orders").await.unwrap().unwrap();
    assert_eq!(
        notice.layout,
        Some(NOTICE_LAYOUT),
        "refused as another layout"
    );
    let head = store.notice_head("orders").await.unwrap().unwrap();
    assert_eq!(
        head.other_layout_than(NOTICE_LAYOUT_APART),
        Some(NOTICE_LAYOUT)
    );
}

#[tokio::test]
async fn keys_left_unprocessed_fail_the_read_as_throttled() {
    let answer = json!({
        "Responses": { "leases": [] },
        "UnprocessedKeys": { "leases": {
            "Keys": [{ "lease_key": { "S": "orders#beats#notice" } }],
            "ConsistentRead": true,
        } },
    });
    let store = apart(answer, json!({}));
    let error = store.notice("orders").await.unwrap_err();
    assert!(error.is_throttled(), "{error}");
}

#[tokio::test]
async fn a_one_row_store_reads_a_notice_kept_apart_whole() {
    let far = epoch_millis() + 60_000;
    let head = json!({
        "lease_key": { "S": "orders#notice" },
        "notice_counter": number(4),
        "notice_layout": number(NOTICE_LAYOUT_APART),
    });
    let answer = json!({ "Responses": { "leases": [
        head.clone(),
        { "lease_key": { "S": "orders#beats#notice" }, "beat_pod-a": number(far) },
    ] } });
    let (config, _) = replying(move |_, operation, _| match operation {
        "BatchGetItem" => Reply::ok(answer.clone()),
        "GetItem" => Reply::ok(json!({ "Item": head.clone() })),
        other => Reply::error(400, &format!("Unexpected{other}")),
    });
    // As `lease-table` reads it: its store keeps no notice apart.
    let store = DynamoLeaseStore::new(&config, "leases");
    let notice = store.notice("orders").await.unwrap().unwrap();
    assert_eq!(notice.beats.get("pod-a"), Some(&far), "{notice:?}");
    assert_eq!(notice.other_layout(), Some(NOTICE_LAYOUT_APART));
}

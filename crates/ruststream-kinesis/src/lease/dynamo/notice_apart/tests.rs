//! The notice kept apart at the SDK boundary: its rows read by `GetItem` as DynamoDB
//! answers them and merged into one notice, the layouts each read tells, a read IAM denies,
//! the layout written before the first beat, and forgetting row by row.

use std::collections::HashMap;

use serde_json::{Value, json};

use super::*;
use crate::doubles::fake_kinesis::{Reply, Seen, replying};
use crate::{NOTICE_LAYOUT, NOTICE_LAYOUT_APART};

/// A fake DynamoDB holding `rows` (by `lease_key`): `GetItem` answers the row asked for (or
/// none), `UpdateItem` answers `update`, and `BatchGetItem`, outside the guide's IAM policy,
/// is denied.
fn table(rows: &[Value], update: Reply) -> (aws_config::SdkConfig, Seen) {
    let rows: HashMap<String, Value> = rows
        .iter()
        .map(|row| {
            (
                row["lease_key"]["S"].as_str().unwrap().to_owned(),
                row.clone(),
            )
        })
        .collect();
    replying(move |_, operation, body| match operation {
        "GetItem" => {
            let key = body["Key"]["lease_key"]["S"].as_str().unwrap_or_default();
            match rows.get(key) {
                Some(row) if row.get("denied").is_some() => {
                    Reply::error(400, "AccessDeniedException")
                }
                Some(row) => Reply::ok(json!({ "Item": row })),
                None => Reply::ok(json!({})),
            }
        }
        "UpdateItem" => update.clone(),
        other => Reply::error(400, &format!("AccessDeniedException{other}")),
    })
}

/// A store that keeps the notice apart, on [`table`].
fn apart(rows: &[Value]) -> DynamoLeaseStore {
    let (config, _) = table(rows, Reply::ok(json!({})));
    DynamoLeaseStore::new(&config, "leases").keep_notice_head_apart()
}

/// The key of the beats' row of `owner`'s group.
fn beats_of(owner: &str) -> String {
    DynamoLeaseStore::notice_beats_key("orders", owner)
}

fn number(n: u64) -> Value {
    json!({ "N": n.to_string() })
}

fn far() -> u64 {
    epoch_millis() + 60_000
}

/// The keys and update expressions of the `UpdateItem`s `seen`, in order.
fn updates(seen: &Seen) -> Vec<(String, String)> {
    seen.lock()
        .unwrap()
        .iter()
        .filter(|(operation, _)| operation == "UpdateItem")
        .map(|(_, body)| {
            (
                body["Key"]["lease_key"]["S"].as_str().unwrap().to_owned(),
                body["UpdateExpression"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// The keys of the `UpdateItem`s `seen`, in order.
fn update_keys(seen: &Seen) -> Vec<String> {
    updates(seen).into_iter().map(|(key, _)| key).collect()
}

#[tokio::test]
async fn the_rows_read_as_one_notice_by_get_item() {
    let far = far();
    let head = json!({
        "lease_key": { "S": "orders#notice" },
        "notice_counter": number(7),
        "notice_layout": number(NOTICE_LAYOUT_APART),
        "ask_pod-b": number(2),
        // A one-row fleet's leftover, lapsed long ago.
        "beat_old": number(1_000),
    });
    let (config, seen) = table(
        &[
            head,
            // Two groups: pod-a's and pod-7's beats are in rows of their own.
            json!({ "lease_key": { "S": beats_of("pod-a") }, "beat_pod-a": number(far) }),
            json!({ "lease_key": { "S": beats_of("pod-7") }, "beat_pod-7": number(far + 1) }),
            json!({
                "lease_key": { "S": "orders#runs#notice" },
                "incarnation_pod-a": { "S": "1-00000000000000ff@2" },
            }),
        ],
        Reply::ok(json!({})),
    );
    let store = DynamoLeaseStore::new(&config, "leases").keep_notice_head_apart();
    let notice = store.notice("orders").await.unwrap().unwrap();
    let read: std::collections::BTreeSet<String> = seen
        .lock()
        .unwrap()
        .iter()
        .filter(|(operation, _)| operation == "GetItem")
        .map(|(_, body)| body["Key"]["lease_key"]["S"].as_str().unwrap().to_owned())
        .collect();
    let mut every: std::collections::BTreeSet<String> = (0..crate::lease::BEAT_GROUPS)
        .map(|group| crate::lease::beats_key("orders", group))
        .collect();
    every.extend(["orders#notice".to_owned(), "orders#runs#notice".to_owned()]);
    assert_eq!(read, every, "a whole read reads every group");
    assert_eq!(notice.counter, 7);
    assert_eq!(notice.layout, Some(NOTICE_LAYOUT_APART));
    assert_eq!(notice.asks.get("pod-b"), Some(&2));
    assert_eq!(notice.beats.get("pod-a"), Some(&far));
    assert_eq!(notice.beats.get("pod-7"), Some(&(far + 1)));
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
async fn a_whole_read_that_iam_denies_fails_naming_the_table() {
    let store = apart(&[
        json!({ "lease_key": { "S": "orders#notice" }, "notice_counter": number(1) }),
        json!({ "lease_key": { "S": "orders#beats5#notice" }, "denied": true }),
    ]);
    let error = store.notice("orders").await.unwrap_err();
    assert!(!error.is_throttled(), "{error}");
    let told = error.to_string();
    assert!(
        told.contains("leases") && told.contains("AccessDenied"),
        "{told}"
    );
}

#[tokio::test]
async fn a_live_beat_in_the_head_is_a_one_row_fleets_whatever_layout_the_head_names() {
    // A one-row fleet started after a fleet of layout 2 stopped: the layout it left stays.
    let head = json!({
        "lease_key": { "S": "orders#notice" },
        "notice_counter": number(3),
        "notice_layout": number(NOTICE_LAYOUT_APART),
        "beat_pod-z": number(far()),
    });
    let store = apart(&[head]);
    let notice = store.notice("orders").await.unwrap().unwrap();
    assert_eq!(
        notice.layout,
        Some(NOTICE_LAYOUT),
        "refused as the one-row layout"
    );
    let head = store.notice_head("orders").await.unwrap().unwrap();
    assert_eq!(
        head.other_layout_than(NOTICE_LAYOUT_APART),
        Some(NOTICE_LAYOUT)
    );
}

#[tokio::test]
async fn a_one_row_store_is_refused_by_a_running_fleet_of_layout_2_and_not_by_a_stopped_one() {
    let head = json!({
        "lease_key": { "S": "orders#notice" },
        "notice_counter": number(4),
        "notice_layout": number(NOTICE_LAYOUT_APART),
    });
    let beats = |until: u64| json!({ "lease_key": { "S": beats_of("pod-a") }, "beat_pod-a": number(until) });
    // As `lease-table` and a one-row fleet read it: their store keeps no notice apart.
    let one_row = |rows: &[Value]| {
        let (config, _) = table(rows, Reply::ok(json!({})));
        DynamoLeaseStore::new(&config, "leases")
    };
    let running = one_row(&[head.clone(), beats(far())]);
    let notice = running.notice("orders").await.unwrap().unwrap();
    assert!(notice.beats.contains_key("pod-a"), "{notice:?}");
    assert_eq!(notice.other_layout(), Some(NOTICE_LAYOUT_APART));
    let stopped = one_row(&[head, beats(1_000)]);
    let notice = stopped.notice("orders").await.unwrap().unwrap();
    assert_eq!(
        notice.other_layout(),
        None,
        "a stopped fleet of layout 2 leaves the stream to either layout: {notice:?}"
    );
}

#[tokio::test]
async fn the_layout_is_refused_where_another_is_written() {
    let refused = Reply::error(
        400,
        "com.amazonaws.dynamodb.v20120810#ConditionalCheckFailedException",
    );
    let (config, seen) = table(&[], refused);
    let store = DynamoLeaseStore::new(&config, "leases").keep_notice_head_apart();
    let error = store.keep_layout("orders").await.unwrap_err();
    let condition = seen.lock().unwrap()[0].1["ConditionExpression"].clone();
    assert_eq!(
        condition, "attribute_not_exists(#layout) OR #layout = :mine",
        "the layout is written only where none or the same stands"
    );
    let told = error.to_string();
    assert!(
        told.contains("orders#notice") && told.contains("another layout than 2"),
        "{told}"
    );
    let error = store.beat("orders", "pod-a", far(), &[]).await.unwrap_err();
    assert!(error.to_string().contains("another layout"), "{error}");
}

#[tokio::test]
async fn the_first_beat_writes_the_layout_before_it_and_later_beats_do_not() {
    let (config, seen) = table(&[], Reply::ok(json!({})));
    let store = DynamoLeaseStore::new(&config, "leases").keep_notice_head_apart();
    store.beat("orders", "pod-a", far(), &[]).await.unwrap();
    store.beat("orders", "pod-a", far() + 1, &[]).await.unwrap();
    assert_eq!(
        update_keys(&seen),
        [
            "orders#notice",
            "orders#beats4#notice",
            "orders#beats4#notice"
        ]
    );
}

#[tokio::test]
async fn forgetting_removes_beats_then_records_as_read_then_the_heads_leftovers() {
    let runs = json!({
        "lease_key": { "S": "orders#runs#notice" },
        "incarnation_gone": { "S": "5-00000000000000aa@6" },
    });
    let (config, seen) = table(&[runs], Reply::ok(json!({})));
    let store = DynamoLeaseStore::new(&config, "leases").keep_notice_head_apart();
    store.keep_layout("orders").await.unwrap();
    store
        .beat("orders", "pod-a", far(), &["gone".to_owned()])
        .await
        .unwrap();
    let writes = updates(&seen);
    let keys: Vec<&str> = writes.iter().map(|(key, _)| key.as_str()).collect();
    assert_eq!(
        keys,
        [
            "orders#notice",
            "orders#beats4#notice",
            "orders#beats6#notice",
            "orders#runs#notice",
            "orders#notice"
        ],
        "{writes:?}"
    );
    let records = seen
        .lock()
        .unwrap()
        .iter()
        .filter(|(operation, body)| {
            operation == "UpdateItem" && body["Key"]["lease_key"]["S"] == "orders#runs#notice"
        })
        .map(|(_, body)| body.clone())
        .next()
        .unwrap();
    assert_eq!(
        records["ExpressionAttributeValues"][":r0"]["S"], "5-00000000000000aa@6",
        "the record is removed only while it is the one read: {records}"
    );
}

#[tokio::test]
async fn a_layout_found_gone_is_written_again_before_the_next_beat() {
    // The head as an operator left it, `notice_layout` removed by hand.
    let head = json!({ "lease_key": { "S": "orders#notice" }, "notice_counter": number(1) });
    let (config, seen) = table(&[head], Reply::ok(json!({})));
    let store = DynamoLeaseStore::new(&config, "leases").keep_notice_head_apart();
    store.keep_layout("orders").await.unwrap();
    store.beat("orders", "pod-a", far(), &[]).await.unwrap();
    store.notice_head("orders").await.unwrap();
    store.beat("orders", "pod-a", far() + 1, &[]).await.unwrap();
    // A whole read tells the same.
    store.notice("orders").await.unwrap();
    store.beat("orders", "pod-a", far() + 2, &[]).await.unwrap();
    assert_eq!(
        update_keys(&seen),
        [
            "orders#notice",
            "orders#beats4#notice",
            "orders#notice",
            "orders#beats4#notice",
            "orders#notice",
            "orders#beats4#notice"
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn after_a_gap_or_a_failed_beat_the_layout_is_written_again_first() {
    let failed_once = std::sync::atomic::AtomicBool::new(false);
    let (config, seen) = replying(move |_, operation, body| {
        let beats = body["Key"]["lease_key"]["S"] == "orders#beats4#notice";
        match operation {
            "UpdateItem"
                if beats && !failed_once.swap(true, std::sync::atomic::Ordering::SeqCst) =>
            {
                Reply::error(400, "AccessDeniedException")
            }
            _ => Reply::ok(json!({})),
        }
    });
    let store = DynamoLeaseStore::new(&config, "leases").keep_notice_head_apart();
    store.keep_layout("orders").await.unwrap();
    assert!(store.beat("orders", "pod-a", far(), &[]).await.is_err());
    store.beat("orders", "pod-a", far(), &[]).await.unwrap();
    // Fresh, the mark spares the next beat the layout; past it (a pause), it does not.
    store.beat("orders", "pod-a", far() + 1, &[]).await.unwrap();
    tokio::time::advance(std::time::Duration::from_secs(5)).await;
    store.beat("orders", "pod-a", far() + 2, &[]).await.unwrap();
    assert_eq!(
        update_keys(&seen),
        [
            "orders#notice",
            "orders#beats4#notice",
            "orders#notice",
            "orders#beats4#notice",
            "orders#beats4#notice",
            "orders#notice",
            "orders#beats4#notice"
        ]
    );
}

#[tokio::test]
async fn a_one_row_store_forgets_a_stopped_fleet_of_layout_2_from_its_rows() {
    let head = json!({
        "lease_key": { "S": "orders#notice" },
        "notice_counter": number(4),
        "notice_layout": number(NOTICE_LAYOUT_APART),
    });
    let (config, seen) = table(&[head], Reply::ok(json!({})));
    let store = DynamoLeaseStore::new(&config, "leases");
    store.notice("orders").await.unwrap();
    let head_reads = seen
        .lock()
        .unwrap()
        .iter()
        .filter(|(operation, body)| {
            operation == "GetItem" && body["Key"]["lease_key"]["S"] == "orders#notice"
        })
        .count();
    assert_eq!(
        head_reads, 1,
        "the head it read once is taken for the whole read"
    );
    store
        .beat("orders", "pod-z", far(), &["gone".to_owned()])
        .await
        .unwrap();
    assert_eq!(
        update_keys(&seen),
        ["orders#notice", "orders#beats6#notice", "orders#notice"],
        "its beat in the head, then the leftovers from the beats' row and the head"
    );
}

/// Every instance must find every other's beat in the same row, whatever build it runs: the
/// groups are pinned here, and a change to the hash fails this test.
#[test]
fn the_group_of_a_beat_is_the_same_in_every_build() {
    let groups: Vec<u32> = ["pod-a", "pod-b", "gone", "pod-7", ""]
        .into_iter()
        .map(crate::lease::beat_group)
        .collect();
    assert_eq!(groups, [4, 4, 6, 2, 3]);
    assert_eq!(beats_of("pod-a"), "orders#beats4#notice");
    // Ids that differ in one character spread over the groups.
    let spread: std::collections::BTreeSet<u32> = (0..40)
        .map(|n| crate::lease::beat_group(&format!("pod-{n}")))
        .collect();
    assert_eq!(spread.len(), 8, "{spread:?}");
}

/// A hundred instances with owner ids of 30 characters: each group's row stays under 1 KB (a
/// beat is one write unit), and a whole read reads ten rows.
#[test]
fn a_hundred_instances_beat_into_rows_under_a_kilobyte() {
    let mut notice = crate::Notice::default();
    for n in 0..100 {
        let owner = format!("orders-consumer-{n:04}-abcdefghi");
        notice.beats.insert(owner.clone(), 1_700_000_010_000);
        notice.incarnations.insert(
            owner,
            "1700000000000-00000000000000ff@1700000000001".to_owned(),
        );
    }
    let rows = DynamoLeaseStore::notice_rows_bytes("orders", &notice);
    assert_eq!(rows.len(), 10);
    let groups: Vec<usize> = rows
        .iter()
        .filter(|(key, _)| key.starts_with("orders#beats"))
        .map(|(_, bytes)| *bytes)
        .collect();
    assert_eq!(groups.len(), 8);
    assert!(groups.iter().all(|bytes| *bytes < 1_024), "{groups:?}");
    let whole = DynamoLeaseStore::notice_item_bytes("orders", &notice);
    assert!(
        whole > 10_000,
        "in one row a beat would write {whole} bytes"
    );
}

/// Whether each request `seen` of `operation` asked for a consistent read (`ConsistentRead`
/// absent is DynamoDB's default: eventually consistent).
fn consistency(seen: &Seen, operation: &str) -> Vec<bool> {
    seen.lock()
        .unwrap()
        .iter()
        .filter(|(op, _)| op == operation)
        .map(|(_, body)| body["ConsistentRead"].as_bool().unwrap_or(false))
        .collect()
}

/// The reads a take-over or the check for another run judges are consistent; those the poll
/// and the full-read cadence make (`notice_eventually`, `notice_head`, `list_eventually`) are
/// eventually consistent, at half the read units, in either layout, where the store was asked
/// to (`eventually_consistent_polls`), and consistent by default.
#[tokio::test]
async fn the_reads_a_view_behind_will_do_are_eventually_consistent_where_asked() {
    for (apart, behind) in [(false, false), (true, false), (false, true), (true, true)] {
        let (config, seen) = replying(|_, operation, _| match operation {
            "GetItem" => Reply::ok(json!({})),
            "Scan" => Reply::ok(json!({ "Items": [], "Count": 0 })),
            other => Reply::error(400, &format!("AccessDeniedException{other}")),
        });
        let store = DynamoLeaseStore::new(&config, "leases");
        let store = if apart {
            store.keep_notice_head_apart()
        } else {
            store
        };
        let store = if behind {
            store.eventually_consistent_polls()
        } else {
            store
        };
        let expect = |seen: &Seen, operation: &str, consistent: bool, what: &str| {
            let asked = consistency(seen, operation);
            assert!(
                !asked.is_empty() && asked.iter().all(|&asked| asked == consistent),
                "apart {apart}, behind {behind}: {what} reads consistent {consistent}: {asked:?}"
            );
            seen.lock().unwrap().clear();
        };
        store.notice("orders").await.unwrap();
        expect(&seen, "GetItem", true, "notice");
        store.notice_eventually("orders").await.unwrap();
        expect(&seen, "GetItem", !behind, "notice_eventually");
        store.notice_head("orders").await.unwrap();
        expect(&seen, "GetItem", !behind, "notice_head");
        store.list("orders").await.unwrap();
        expect(&seen, "Scan", true, "list");
        store.list_eventually("orders").await.unwrap();
        expect(&seen, "Scan", !behind, "list_eventually");
    }
}

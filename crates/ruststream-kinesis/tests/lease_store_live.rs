//! Live tests of `DynamoLeaseStore` against a DynamoDB endpoint (the local stack, LocalStack, or
//! AWS): the lease store suite, a missing table, tables of an earlier version, and the row's
//! attributes.
//!
//! They run when `KINESIS_TEST_ENDPOINT` names the endpoint (region `us-east-1`, test
//! credentials), each on a table of its own with a random name. Without it they print a skip
//! line and pass, unless `KINESIS_TEST_STRICT=1`, which makes them fail instead.
#![cfg(all(feature = "dynamodb-lease", feature = "store-suite"))]

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use aws_config::SdkConfig;
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::AttributeValue;
use ruststream_kinesis::lease::{DynamoLeaseStore, LeaseError, LeaseKey, LeaseStore, suite};
use ruststream_kinesis::local_stack_config;

mod common;

const SHARD: &str = "shardId-000000000001";
const LEASE: Duration = Duration::from_secs(1);

/// The endpoint's configuration, or `None` (after a skip line) when no endpoint is set.
fn live_config(test: &str) -> Option<SdkConfig> {
    match std::env::var("KINESIS_TEST_ENDPOINT") {
        Ok(endpoint) if !endpoint.is_empty() => Some(local_stack_config(endpoint)),
        _ => {
            assert!(
                std::env::var("KINESIS_TEST_STRICT").as_deref() != Ok("1"),
                "KINESIS_TEST_ENDPOINT is not set and KINESIS_TEST_STRICT=1: live tests may not \
                 be skipped"
            );
            println!("skipping {test}: KINESIS_TEST_ENDPOINT is not set");
            None
        }
    }
}

fn unique_table() -> String {
    format!("lease-test-{:016x}", rand::random::<u64>())
}

/// A store on a new table of its own.
async fn fresh_store(config: &SdkConfig) -> DynamoLeaseStore {
    let store = DynamoLeaseStore::new(config, unique_table());
    store.create_table().await.expect("create the lease table");
    store
}

/// Writes a row the way an earlier version did: keyed by the bare shard id.
async fn put_bare_row(config: &SdkConfig, table: &str, shard: &str, checkpoint: &str) {
    Client::new(config)
        .put_item()
        .table_name(table)
        .item("lease_key", AttributeValue::S(shard.to_owned()))
        .item("lease_owner", AttributeValue::S("old-version".to_owned()))
        .item("lease_expiry", AttributeValue::N("1000".to_owned()))
        .item("lease_counter", AttributeValue::N("41".to_owned()))
        .item("checkpoint", AttributeValue::S(checkpoint.to_owned()))
        .send()
        .await
        .expect("put the bare row");
}

/// The raw row keyed `row_key`, read past the store.
async fn raw_row(
    config: &SdkConfig,
    table: &str,
    row_key: &str,
) -> Option<HashMap<String, AttributeValue>> {
    Client::new(config)
        .get_item()
        .table_name(table)
        .key("lease_key", AttributeValue::S(row_key.to_owned()))
        .consistent_read(true)
        .send()
        .await
        .expect("get the row")
        .item
}

#[tokio::test]
async fn the_store_passes_the_lease_store_suite() {
    let Some(config) = live_config("the_store_passes_the_lease_store_suite") else {
        return;
    };
    let store = fresh_store(&config).await;
    suite::run(&store, LEASE).await;
    // Again on the same table: the suite's keys are unique per run.
    suite::run(&store, LEASE).await;
    // And as a store that names its application.
    suite::run(&store.application("suite-app"), LEASE).await;
}

/// The suite against a store that keeps each notice in three rows, its head apart: the notices
/// behave as one row's do.
#[tokio::test]
async fn a_store_that_keeps_the_notice_head_apart_passes_the_lease_store_suite() {
    let Some(config) =
        live_config("a_store_that_keeps_the_notice_head_apart_passes_the_lease_store_suite")
    else {
        return;
    };
    let store = fresh_store(&config).await.keep_notice_head_apart();
    suite::run(&store, LEASE).await;
}

#[tokio::test]
async fn a_row_of_another_application_is_never_taken_and_the_refusal_names_both() {
    let Some(config) = live_config("a_row_of_another_application_is_never_taken") else {
        return;
    };
    let warehouse = fresh_store(&config).await.application("warehouse");
    let table = warehouse.table().to_owned();
    let billing = DynamoLeaseStore::new(&config, table.as_str()).application("billing");
    let unnamed = DynamoLeaseStore::new(&config, table.as_str());
    let key = LeaseKey::new("orders", SHARD);
    warehouse.acquire(&key, "pod-a", LEASE).await.unwrap();
    warehouse.checkpoint(&key, "pod-a", "7").await.unwrap();
    warehouse.release(&key, "pod-a").await.unwrap();
    let row = raw_row(&config, &table, &key.row_key()).await.unwrap();
    assert_eq!(
        row.get("application"),
        Some(&AttributeValue::S("warehouse".to_owned()))
    );
    // Released, and later expired: free for any owner of warehouse, for nobody else.
    tokio::time::sleep(LEASE + Duration::from_secs(2)).await;
    for (store, ours) in [(&billing, Some("billing")), (&unnamed, None)] {
        let refused = store.acquire(&key, "pod-b", LEASE).await.unwrap_err();
        let message = refused.to_string();
        match &refused {
            LeaseError::OtherApplication {
                table: named,
                ours: said,
                theirs,
                ..
            } => {
                assert_eq!(named, &table);
                assert_eq!(said.as_deref(), ours);
                assert_eq!(theirs, "warehouse");
            }
            other => panic!("expected OtherApplication, got {other:?}"),
        }
        assert!(
            message.contains("\"warehouse\"") && message.contains("orders:"),
            "{message}"
        );
        assert!(message.contains("lease table of their own"), "{message}");
        assert!(
            !refused.is_fenced(),
            "a refusal to report, not another instance's lease"
        );
    }
    let row = raw_row(&config, &table, &key.row_key()).await.unwrap();
    assert!(
        !row.contains_key("lease_owner"),
        "the refused takes wrote nothing"
    );
    let taken = warehouse.acquire(&key, "pod-c", LEASE).await.unwrap();
    assert_eq!(taken.checkpoint.as_deref(), Some("7"));
}

#[tokio::test]
async fn a_named_store_claims_a_row_that_names_none() {
    let Some(config) = live_config("a_named_store_claims_a_row_that_names_none") else {
        return;
    };
    let unnamed = fresh_store(&config).await;
    let table = unnamed.table().to_owned();
    let key = LeaseKey::new("orders", SHARD);
    unnamed.acquire(&key, "pod-a", LEASE).await.unwrap();
    unnamed.release(&key, "pod-a").await.unwrap();
    assert!(
        !raw_row(&config, &table, &key.row_key())
            .await
            .unwrap()
            .contains_key("application")
    );
    // An earlier version's row, or this application's before it was named: claimed by the take.
    let named = DynamoLeaseStore::new(&config, table.as_str()).application("warehouse");
    named.acquire(&key, "pod-b", LEASE).await.unwrap();
    named.release(&key, "pod-b").await.unwrap();
    let row = raw_row(&config, &table, &key.row_key()).await.unwrap();
    assert_eq!(
        row.get("application"),
        Some(&AttributeValue::S("warehouse".to_owned()))
    );
    assert!(matches!(
        unnamed.acquire(&key, "pod-a", LEASE).await,
        Err(LeaseError::OtherApplication { .. })
    ));
}

#[tokio::test]
async fn a_missing_table_is_named_with_the_command_that_creates_it() {
    let Some(config) = live_config("a_missing_table_is_named_with_the_command_that_creates_it")
    else {
        return;
    };
    let table = unique_table();
    let store = DynamoLeaseStore::new(&config, table.clone());
    let key = LeaseKey::new("orders-x", SHARD);
    let expected = format!(
        "aws dynamodb create-table --table-name {table} --attribute-definitions \
         AttributeName=lease_key,AttributeType=S --key-schema AttributeName=lease_key,KeyType=HASH \
         --billing-mode PAY_PER_REQUEST"
    );
    let results = [
        ("acquire", store.acquire(&key, "a", LEASE).await.err()),
        ("renew", store.renew(&key, "a", LEASE).await.err()),
        ("checkpoint", store.checkpoint(&key, "a", "1").await.err()),
        ("read", store.read(&key).await.err()),
        ("release", store.release(&key, "a").await.err()),
        ("rows", store.rows().await.err()),
    ];
    for (call, error) in results {
        match error {
            Some(LeaseError::TableMissing {
                table: named,
                create_command,
            }) => {
                assert_eq!(named, table, "{call}: TableMissing names the table");
                assert_eq!(create_command, expected, "{call}: the create command");
            }
            other => panic!("{call} on a missing table: expected TableMissing, got {other:?}"),
        }
    }
    let message = store.read(&key).await.unwrap_err().to_string();
    assert!(
        message.contains(&table) && message.contains(&expected),
        "the message names the table and the command: {message}"
    );
}

#[tokio::test]
async fn with_legacy_stream_a_bare_row_is_resumed_and_moved_to_the_new_key() {
    let Some(config) =
        live_config("with_legacy_stream_a_bare_row_is_resumed_and_moved_to_the_new_key")
    else {
        return;
    };
    let plain = fresh_store(&config).await;
    let table = plain.table().to_owned();
    put_bare_row(&config, &table, SHARD, "4242").await;
    let store = DynamoLeaseStore::new(&config, table.clone()).legacy_stream("orders-x");
    let key = LeaseKey::new("orders-x", SHARD);

    let taken = store.acquire(&key, "new-a", LEASE).await.expect("take");
    assert!(taken.is_held_by("new-a"), "{taken:?}");
    assert_eq!(
        taken.checkpoint.as_deref(),
        Some("4242"),
        "resumes from the bare row"
    );
    let row = store.read(&key).await.unwrap().expect("the new row exists");
    assert_eq!(row, taken);
    assert!(
        raw_row(&config, &table, "orders-x:shardId-000000000001")
            .await
            .is_some(),
        "the new row is keyed stream:shard"
    );

    // The new row now holds the progress: later takes, even by a store that never saw the bare
    // row, resume from it and not from the bare row.
    store.checkpoint(&key, "new-a", "4343").await.unwrap();
    store.release(&key, "new-a").await.unwrap();
    let other = DynamoLeaseStore::new(&config, table.clone()).legacy_stream("orders-x");
    let again = other
        .acquire(&key, "new-b", LEASE)
        .await
        .expect("take again");
    assert_eq!(again.checkpoint.as_deref(), Some("4343"));
    // Once the new row exists, even a store without legacy_stream takes it.
    other.release(&key, "new-b").await.unwrap();
    let unaware = DynamoLeaseStore::new(&config, table.clone());
    let third = unaware.acquire(&key, "new-c", LEASE).await.expect("take");
    assert_eq!(third.checkpoint.as_deref(), Some("4343"));

    // The bare row is left as the earlier version wrote it.
    let bare = raw_row(&config, &table, SHARD).await.expect("the bare row");
    assert_eq!(bare["checkpoint"], AttributeValue::S("4242".to_owned()));
    assert_eq!(bare["lease_counter"], AttributeValue::N("41".to_owned()));
}

#[tokio::test]
async fn without_legacy_stream_a_bare_row_stops_the_shard() {
    let Some(config) = live_config("without_legacy_stream_a_bare_row_stops_the_shard") else {
        return;
    };
    let store = fresh_store(&config).await;
    let table = store.table().to_owned();
    put_bare_row(&config, &table, SHARD, "4242").await;
    let key = LeaseKey::new("orders-x", SHARD);

    for attempt in 0..2 {
        if attempt == 1 {
            // A Scan of the table (a listing) that saw the bare row leaves the check in place;
            // only one that saw none lets a first take skip it.
            store.list("orders-x").await.expect("list");
        }
        match store.acquire(&key, "new-a", LEASE).await {
            Err(LeaseError::LegacyRow {
                table: named,
                stream,
                shard,
                checkpoint,
            }) => {
                assert_eq!(named, table);
                assert_eq!(stream, "orders-x");
                assert_eq!(shard, SHARD);
                assert_eq!(checkpoint, "4242");
            }
            other => panic!("take {attempt}: expected LegacyRow, got {other:?}"),
        }
    }
    let message = store
        .acquire(&key, "new-a", LEASE)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        message.contains(&table) && message.contains(SHARD) && message.contains("orders-x"),
        "the message names the table, the shard and the stream: {message}"
    );
    assert!(
        raw_row(&config, &table, "orders-x:shardId-000000000001")
            .await
            .is_none(),
        "a refused take creates no row"
    );
    assert_eq!(store.read(&key).await.unwrap(), None);

    // Another shard id, with no bare row, is taken as usual.
    let fresh = LeaseKey::new("orders-x", "shardId-000000000002");
    store.acquire(&fresh, "new-a", LEASE).await.expect("take");
}

#[tokio::test]
async fn a_legacy_stream_naming_another_stream_ignores_bare_rows() {
    let Some(config) = live_config("a_legacy_stream_naming_another_stream_ignores_bare_rows")
    else {
        return;
    };
    let plain = fresh_store(&config).await;
    let table = plain.table().to_owned();
    put_bare_row(&config, &table, SHARD, "4242").await;
    let store = DynamoLeaseStore::new(&config, table.clone()).legacy_stream("payments");
    let key = LeaseKey::new("orders-x", SHARD);

    let taken = store.acquire(&key, "new-a", LEASE).await.expect("take");
    assert!(taken.is_held_by("new-a"));
    assert_eq!(taken.checkpoint, None, "the bare row is not this stream's");

    // The named stream still resumes from the bare row.
    let payments = LeaseKey::new("payments", SHARD);
    let resumed = store
        .acquire(&payments, "new-a", LEASE)
        .await
        .expect("take");
    assert_eq!(resumed.checkpoint.as_deref(), Some("4242"));
}

#[tokio::test]
async fn a_row_holds_exactly_the_lease_attributes() {
    let Some(config) = live_config("a_row_holds_exactly_the_lease_attributes") else {
        return;
    };
    let store = fresh_store(&config).await;
    let table = store.table().to_owned();
    let key = LeaseKey::new("orders-x", SHARD);
    store.acquire(&key, "pod-a", LEASE).await.unwrap();
    store.checkpoint(&key, "pod-a", "777").await.unwrap();
    store.renew(&key, "pod-a", LEASE).await.unwrap();
    let state = store.read(&key).await.unwrap().unwrap();

    let row = raw_row(&config, &table, "orders-x:shardId-000000000001")
        .await
        .expect("the row");
    let kinds: BTreeMap<&str, &str> = row
        .iter()
        .map(|(name, value)| {
            let kind = match value {
                AttributeValue::S(_) => "S",
                AttributeValue::N(_) => "N",
                _ => "other",
            };
            (name.as_str(), kind)
        })
        .collect();
    assert_eq!(
        kinds,
        BTreeMap::from([
            ("checkpoint", "S"),
            ("lease_counter", "N"),
            ("lease_expiry", "N"),
            ("lease_key", "S"),
            ("lease_owner", "S"),
        ])
    );
    assert_eq!(
        row["lease_key"],
        AttributeValue::S("orders-x:shardId-000000000001".to_owned())
    );
    assert_eq!(row["lease_owner"], AttributeValue::S("pod-a".to_owned()));
    assert_eq!(row["checkpoint"], AttributeValue::S("777".to_owned()));
    assert_eq!(row["lease_counter"], AttributeValue::N("3".to_owned()));
    assert_eq!(
        row["lease_expiry"],
        AttributeValue::N(state.expiry_ms.to_string())
    );

    // A release removes the owner and keeps the rest.
    store.release(&key, "pod-a").await.unwrap();
    let row = raw_row(&config, &table, "orders-x:shardId-000000000001")
        .await
        .expect("the row");
    let mut names: Vec<&str> = row.keys().map(String::as_str).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        ["checkpoint", "lease_counter", "lease_expiry", "lease_key"]
    );
}

#[tokio::test]
async fn a_checkpoint_inside_a_kpl_aggregate_keeps_its_index_as_the_kcl_does() {
    let Some(config) =
        live_config("a_checkpoint_inside_a_kpl_aggregate_keeps_its_index_as_the_kcl_does")
    else {
        return;
    };
    let store = fresh_store(&config).await;
    let table = store.table().to_owned();
    let key = LeaseKey::new("orders-kpl", SHARD);
    let row_key = "orders-kpl:shardId-000000000001";
    store.acquire(&key, "pod-a", LEASE).await.unwrap();
    // Through user record 3 of the aggregate at 4711: two attributes in the row, one checkpoint
    // read back; both calls that write a checkpoint.
    store.checkpoint(&key, "pod-a", "4711:3").await.unwrap();
    let row = raw_row(&config, &table, row_key).await.expect("the row");
    assert_eq!(row["checkpoint"], AttributeValue::S("4711".to_owned()));
    assert_eq!(
        row["checkpoint_sub_sequence"],
        AttributeValue::N("3".to_owned())
    );
    let state = store.read(&key).await.unwrap().unwrap();
    assert_eq!(state.checkpoint.as_deref(), Some("4711:3"));
    store
        .checkpoint_and_renew(&key, "pod-a", "4711:5", LEASE)
        .await
        .unwrap();
    let row = raw_row(&config, &table, row_key).await.expect("the row");
    assert_eq!(
        row["checkpoint_sub_sequence"],
        AttributeValue::N("5".to_owned())
    );
    // A checkpoint past the aggregate removes the index.
    store.checkpoint(&key, "pod-a", "4712").await.unwrap();
    let row = raw_row(&config, &table, row_key).await.expect("the row");
    assert_eq!(row["checkpoint"], AttributeValue::S("4712".to_owned()));
    assert!(!row.contains_key("checkpoint_sub_sequence"), "{row:?}");
    assert_eq!(
        store
            .read(&key)
            .await
            .unwrap()
            .unwrap()
            .checkpoint
            .as_deref(),
        Some("4712")
    );
    // Both attributes written past the store read as one checkpoint; an index left beside
    // `SHARD_END` (a version that did not know it rewrote the checkpoint) is not read.
    for (checkpoint, read) in [("4800", "4800:0"), ("SHARD_END", "SHARD_END")] {
        Client::new(&config)
            .update_item()
            .table_name(&table)
            .key("lease_key", AttributeValue::S(row_key.to_owned()))
            .update_expression("SET checkpoint = :c, checkpoint_sub_sequence = :s")
            .expression_attribute_values(":c", AttributeValue::S(checkpoint.to_owned()))
            .expression_attribute_values(":s", AttributeValue::N("0".to_owned()))
            .send()
            .await
            .unwrap();
        let state = store.read(&key).await.unwrap().unwrap();
        assert_eq!(state.checkpoint.as_deref(), Some(read), "{checkpoint}");
    }
    assert!(store.read(&key).await.unwrap().unwrap().is_finished());
}

/// How far behind the reader was rides in the checkpoint's own write, as one number
/// attribute, and goes with the next checkpoint that does not carry it.
#[tokio::test]
async fn the_lag_is_written_with_the_checkpoint_in_the_same_write() {
    let Some(config) = live_config("the_lag_is_written_with_the_checkpoint_in_the_same_write")
    else {
        return;
    };
    let store = fresh_store(&config).await;
    let table = store.table().to_owned();
    let key = LeaseKey::new("orders-lag", SHARD);
    let row_key = "orders-lag:shardId-000000000001";
    let taken = store.acquire(&key, "pod-a", LEASE).await.unwrap();
    let written = store
        .checkpoint_and_renew_behind(&key, "pod-a", "4711", Some(2_500), LEASE)
        .await
        .unwrap();
    assert_eq!(written.behind_ms, Some(2_500));
    assert_eq!(
        written.counter,
        taken.counter + 1,
        "one write: the checkpoint, the renewal and the figure"
    );
    let row = raw_row(&config, &table, row_key).await.expect("the row");
    assert_eq!(
        row["checkpoint_behind_ms"],
        AttributeValue::N("2500".to_owned())
    );
    assert_eq!(
        store.read(&key).await.unwrap().unwrap().behind_ms,
        Some(2_500)
    );
    store.checkpoint(&key, "pod-a", "4712").await.unwrap();
    let row = raw_row(&config, &table, row_key).await.expect("the row");
    assert!(!row.contains_key("checkpoint_behind_ms"), "{row:?}");
}

#[tokio::test]
async fn rows_lists_every_row_with_legacy_rows_under_an_empty_stream() {
    let Some(config) = live_config("rows_lists_every_row_with_legacy_rows_under_an_empty_stream")
    else {
        return;
    };
    let store = fresh_store(&config).await;
    let table = store.table().to_owned();
    assert!(store.rows().await.unwrap().is_empty());
    put_bare_row(&config, &table, "shardId-000000000009", "99").await;
    let orders = LeaseKey::new("orders-x", SHARD);
    let payments = LeaseKey::new("payments", SHARD);
    store.acquire(&orders, "pod-a", LEASE).await.unwrap();
    store.acquire(&payments, "pod-b", LEASE).await.unwrap();
    store.checkpoint(&payments, "pod-b", "5").await.unwrap();

    let rows = store.rows().await.unwrap();
    let keys: Vec<String> = rows.iter().map(|(key, _)| key.to_string()).collect();
    assert_eq!(
        keys,
        [
            ":shardId-000000000009",
            "orders-x:shardId-000000000001",
            "payments:shardId-000000000001",
        ]
    );
    let (legacy, bare) = &rows[0];
    assert_eq!(legacy.stream(), "");
    assert_eq!(legacy.shard(), "shardId-000000000009");
    assert_eq!(bare.checkpoint.as_deref(), Some("99"));
    assert_eq!(rows[1].1, store.read(&orders).await.unwrap().unwrap());
    assert_eq!(rows[2].1, store.read(&payments).await.unwrap().unwrap());
}

#[tokio::test]
async fn a_restart_under_the_same_owner_fences_out_the_old_instances_writes() {
    let Some(config) =
        live_config("a_restart_under_the_same_owner_fences_out_the_old_instances_writes")
    else {
        return;
    };
    let old = fresh_store(&config).await;
    // A second store object on the same table: the same service restarted under the same name
    // while the old process still has writes to send.
    let restarted = DynamoLeaseStore::new(&config, old.table());
    let key = LeaseKey::new("orders-restart", SHARD);
    old.acquire(&key, "pod-a", Duration::from_secs(30))
        .await
        .unwrap();
    old.checkpoint(&key, "pod-a", "1").await.unwrap();
    restarted
        .acquire(&key, "pod-a", Duration::from_secs(30))
        .await
        .unwrap();
    for refused in [
        old.checkpoint(&key, "pod-a", "2").await.err(),
        old.renew(&key, "pod-a", Duration::from_secs(30))
            .await
            .err(),
        old.release(&key, "pod-a").await.err(),
    ] {
        assert!(
            matches!(refused, Some(LeaseError::Lost { .. })),
            "the old instance's write was accepted: {refused:?}"
        );
    }
    restarted.checkpoint(&key, "pod-a", "3").await.unwrap();
    let row = restarted.read(&key).await.unwrap().unwrap();
    assert_eq!(row.checkpoint.as_deref(), Some("3"));
    assert!(row.is_held_by("pod-a"));
}

#[tokio::test]
async fn a_take_never_moves_its_own_lease_back() {
    let Some(config) = live_config("a_take_never_moves_its_own_lease_back") else {
        return;
    };
    let store = fresh_store(&config).await;
    let key = LeaseKey::new("orders-late-take", SHARD);
    store
        .acquire(&key, "pod-a", Duration::from_secs(10))
        .await
        .unwrap();
    // Renewals went ahead of a take of ours still on its way: the row runs further than the
    // late take would set it.
    let later = ruststream_kinesis::epoch_millis() + 600_000;
    Client::new(&config)
        .update_item()
        .table_name(store.table())
        .key("lease_key", AttributeValue::S(key.to_string()))
        .update_expression("SET lease_expiry = :later")
        .expression_attribute_values(":later", AttributeValue::N(later.to_string()))
        .send()
        .await
        .unwrap();
    let late = store.acquire(&key, "pod-a", Duration::from_secs(10)).await;
    assert!(
        matches!(&late, Err(LeaseError::Held { owner, .. }) if owner == "pod-a"),
        "a take that would shorten this owner's lease was accepted: {late:?}"
    );
    let row = store.read(&key).await.unwrap().unwrap();
    assert_eq!(row.expiry_ms, later, "the expiry did not move back");
}

#[tokio::test]
async fn a_take_of_a_row_deleted_since_the_store_saw_it_creates_none() {
    let Some(config) = live_config("a_take_of_a_row_deleted_since_the_store_saw_it_creates_none")
    else {
        return;
    };
    let tidier = fresh_store(&config).await;
    let table = tidier.table().to_owned();
    let stale = DynamoLeaseStore::new(&config, table.as_str());
    let key = LeaseKey::new("orders", SHARD);
    tidier.acquire(&key, "pod-a", LEASE).await.unwrap();
    tidier.checkpoint(&key, "pod-a", "SHARD_END").await.unwrap();
    tidier.release(&key, "pod-a").await.unwrap();
    // The stale instance reads the rows, then (frozen, say) takes long after another deleted it.
    let seen = stale.read(&key).await.unwrap().expect("the row");
    let counter = tidier.read(&key).await.unwrap().unwrap().counter;
    assert!(tidier.delete(&key, counter).await.unwrap());
    // Another subscription of the same broker (the same store object) scans the table meanwhile:
    // the row it no longer sees is not forgotten, since this take was decided on the older view.
    assert!(
        stale
            .rows()
            .await
            .unwrap()
            .iter()
            .all(|(row, _)| *row != key)
    );
    let refused = stale
        .acquire_from(&key, "pod-b", LEASE, "TRIM_HORIZON")
        .await
        .unwrap_err();
    assert!(matches!(refused, LeaseError::Deleted { .. }), "{refused:?}");
    assert!(refused.is_fenced());
    assert!(
        raw_row(&config, &table, &key.row_key()).await.is_none(),
        "no row created"
    );
    assert!(seen.is_finished());
    // Once it read the rows again (the row is gone), a take creates a row, as for a new shard.
    assert!(stale.read(&key).await.unwrap().is_none());
    let fresh = stale.acquire(&key, "pod-b", LEASE).await.unwrap();
    assert_eq!(fresh.checkpoint, None);
}

/// A handoff's request is two attributes of the held row, written without a counter bump;
/// the handoff's write removes them with the new owner and the final checkpoint in one write; a
/// row written before handoffs existed (no such attributes) reads as one without a request.
#[tokio::test]
async fn a_handoff_is_recorded_in_two_attributes_that_the_hand_over_removes() {
    let Some(config) = live_config("a_handoff_is_recorded_in_two_attributes") else {
        return;
    };
    let store = fresh_store(&config).await;
    let table = store.table().to_owned();
    let key = LeaseKey::new("orders-h", SHARD);
    let row_key = "orders-h:shardId-000000000001";
    let taken = store.acquire(&key, "pod-a", LEASE).await.unwrap();
    assert_eq!(
        taken.handoff, None,
        "a row without the attributes has no request"
    );
    let asked_ms = ruststream_kinesis::epoch_millis();
    assert!(
        store
            .ask_handoff(&key, "pod-a", taken.counter, "pod-b", asked_ms)
            .await
            .unwrap()
    );
    let row = raw_row(&config, &table, row_key).await.expect("the row");
    assert_eq!(row["handoff_to"], AttributeValue::S("pod-b".to_owned()));
    assert_eq!(
        row["handoff_asked"],
        AttributeValue::N(asked_ms.to_string())
    );
    assert_eq!(
        row["lease_counter"],
        AttributeValue::N(taken.counter.to_string()),
        "no counter bump: the holder's fenced writes still land"
    );
    // The holder's checkpoint, fenced on the counter it left, lands and answers the request.
    let answered = store
        .checkpoint_and_renew(&key, "pod-a", "55", LEASE)
        .await
        .unwrap();
    assert_eq!(
        answered.handoff.map(|asked| asked.to).as_deref(),
        Some("pod-b")
    );
    store
        .hand_over(&key, "pod-a", "pod-b", Some("56"), LEASE)
        .await
        .unwrap();
    let row = raw_row(&config, &table, row_key).await.expect("the row");
    let mut names: Vec<&str> = row.keys().map(String::as_str).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "checkpoint",
            "lease_counter",
            "lease_expiry",
            "lease_key",
            "lease_owner"
        ]
    );
    assert_eq!(row["lease_owner"], AttributeValue::S("pod-b".to_owned()));
    assert_eq!(row["checkpoint"], AttributeValue::S("56".to_owned()));
    // The taker's own store takes the handed row, reading on after the final checkpoint.
    let taker = DynamoLeaseStore::new(&config, table.clone());
    let took = taker.acquire(&key, "pod-b", LEASE).await.unwrap();
    assert_eq!(took.checkpoint.as_deref(), Some("56"));
    // The stream's notice moved with the handoff, as with a release: the taker's poll sees it.
    let notice = taker.notice("orders-h").await.unwrap().unwrap();
    assert_eq!(notice.counter, 1);
}

/// Whether the raw row `row_key` holds an attribute named with `prefix`.
async fn holds(config: &SdkConfig, table: &str, row_key: &str, prefix: &str) -> bool {
    raw_row(config, table, row_key)
        .await
        .unwrap_or_default()
        .keys()
        .any(|name| name.starts_with(prefix))
}

/// Kept apart, each part of the notice lands in its own row (the head holds no beat and no
/// record, read past the store), the layout before the first beat; a one-row store is refused
/// while the fleet of layout 2 beats, and not once it left, and a running one-row beat in the
/// head refuses layout 2 in turn, whatever layout the head names.
#[tokio::test]
async fn a_notice_kept_apart_writes_each_part_in_its_row_and_a_stopped_fleet_leaves_the_stream() {
    let Some(config) = live_config("a_notice_kept_apart_writes_each_part_in_its_row") else {
        return;
    };
    let apart = fresh_store(&config).await.keep_notice_head_apart();
    let table = apart.table().to_owned();
    let one_row = DynamoLeaseStore::new(&config, table.clone());
    let until = || common::now_ms() + 60_000;
    apart.beat("orders", "pod-a", until(), &[]).await.unwrap();
    apart
        .announce("orders", "pod-a", "1-00000000000000ff@2", &[])
        .await
        .unwrap();
    let head = raw_row(&config, &table, "orders#notice").await.unwrap();
    assert_eq!(
        head.get("notice_layout"),
        Some(&AttributeValue::N("2".to_owned())),
        "{head:?}"
    );
    assert!(!holds(&config, &table, "orders#notice", "beat_").await);
    assert!(!holds(&config, &table, "orders#notice", "incarnation_").await);
    let beats = DynamoLeaseStore::notice_beats_key("orders", "pod-a");
    assert!(holds(&config, &table, &beats, "beat_pod-a").await);
    assert!(holds(&config, &table, "orders#runs#notice", "incarnation_pod-a").await);

    let seen = one_row.notice("orders").await.unwrap().unwrap();
    assert_eq!(
        seen.other_layout(),
        Some(ruststream_kinesis::NOTICE_LAYOUT_APART)
    );
    assert!(seen.beats.contains_key("pod-a"), "{seen:?}");

    apart.leave("orders", "pod-a").await.unwrap();
    assert!(!holds(&config, &table, &beats, "beat_").await);
    let seen = one_row.notice("orders").await.unwrap().unwrap();
    assert_eq!(
        seen.other_layout(),
        None,
        "a stopped fleet of layout 2: {seen:?}"
    );

    one_row.beat("orders", "pod-z", until(), &[]).await.unwrap();
    assert!(holds(&config, &table, "orders#notice", "beat_pod-z").await);
    let seen = apart.notice("orders").await.unwrap().unwrap();
    assert_eq!(
        seen.other_layout_than(ruststream_kinesis::NOTICE_LAYOUT_APART),
        Some(ruststream_kinesis::NOTICE_LAYOUT),
        "{seen:?}"
    );
}

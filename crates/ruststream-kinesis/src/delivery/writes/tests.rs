use std::sync::Arc;

use aws_sdk_dynamodb::types::{AttributeValue, ConditionCheck, Put, TransactWriteItem, Update};

use super::{StageError, StagedWrites};

fn staging() -> StagedWrites {
    let (shard, sequence): (Arc<str>, crate::SharedStr) =
        ("shardId-000000000000".into(), "49".into());
    StagedWrites::exactly_once((&shard, &sequence), None)
}

fn count(id: usize) -> TransactWriteItem {
    let update = Update::builder()
        .table_name("counts")
        .key("id", AttributeValue::S(format!("r{id}")))
        .update_expression("ADD applied :one")
        .expression_attribute_values(":one", AttributeValue::N("1".into()))
        .build()
        .unwrap();
    TransactWriteItem::builder().update(update).build()
}

#[test]
fn a_handling_stages_up_to_the_actions_a_transaction_holds_beside_the_lease_row() {
    let writes = staging();
    for id in 0..99 {
        writes.stage(count(id)).unwrap();
    }
    assert_eq!(
        writes.stage(count(99)),
        Err(StageError::TooManyActions {
            limit: 99,
            staged: 100
        })
    );
    assert_eq!(writes.len(), 99, "the refused write staged nothing");
    let (items, size) = writes.seal();
    assert_eq!((items.len(), size.actions), (99, 99));
}

#[test]
fn two_writes_on_one_item_are_refused_naming_the_table_and_key() {
    let writes = staging();
    writes.stage(count(1)).unwrap();
    let check = ConditionCheck::builder()
        .table_name("counts")
        .key("id", AttributeValue::S("r1".into()))
        .condition_expression("attribute_exists(id)")
        .build()
        .unwrap();
    let err = writes
        .stage(TransactWriteItem::builder().condition_check(check).build())
        .unwrap_err();
    assert!(
        matches!(&err, StageError::TwoActionsOnOneItem { table, key } if table == "counts" && key.contains("r1")),
        "{err}"
    );
    writes.stage(count(2)).unwrap();
    assert_eq!(writes.len(), 2);
}

#[test]
fn a_write_too_large_for_one_transaction_is_refused_naming_the_limit() {
    let writes = staging();
    let put = |id: usize| {
        let put = Put::builder()
            .table_name("blobs")
            .item("id", AttributeValue::S(format!("b{id}")))
            .item("body", AttributeValue::S("x".repeat(390_000)))
            .build()
            .unwrap();
        TransactWriteItem::builder().put(put).build()
    };
    for id in 0..10 {
        writes.stage(put(id)).unwrap();
    }
    let err = writes.stage(put(10)).unwrap_err();
    assert!(
        matches!(err, StageError::TooLarge { limit_bytes, bytes } if limit_bytes == 4_000_000 - 1_024 && bytes > limit_bytes),
        "{err}"
    );
    assert!(err.to_string().contains("4 MB"), "{err}");
    assert_eq!(writes.len(), 10);
}

#[test]
fn a_write_without_exactly_one_action_is_refused() {
    let writes = staging();
    assert_eq!(
        writes.stage(TransactWriteItem::builder().build()),
        Err(StageError::NotOneAction { found: 0 })
    );
    assert!(writes.is_empty());
}

#[test]
fn staging_after_the_settle_or_outside_exactly_once_fails_naming_why() {
    let writes = staging();
    writes.stage(count(1)).unwrap();
    let (items, _) = writes.seal();
    assert_eq!(items.len(), 1);
    let err = writes.stage(count(2)).unwrap_err();
    assert!(
        matches!(&err, StageError::Sealed { shard, sequence } if shard == "shardId-000000000000" && sequence == "49"),
        "{err}"
    );
    let err = StagedWrites::default().stage(count(1)).unwrap_err();
    assert_eq!(err, StageError::NotExactlyOnce);
    assert!(err.to_string().contains("exactly_once()"), "{err}");
}

/// A put of item `id` into `counts`.
fn put_count(id: &str) -> TransactWriteItem {
    let put = Put::builder()
        .table_name("counts")
        .item("id", AttributeValue::S(id.to_owned()))
        .item("applied", AttributeValue::N("1".into()))
        .build()
        .unwrap();
    TransactWriteItem::builder().put(put).build()
}

#[test]
fn a_put_into_a_table_whose_key_is_known_touches_one_item() {
    let schemas = crate::lease::CommitTables::default();
    // Not known yet: the put touches every item of its table.
    let unknown = staging().with_commit_tables(Some(schemas.clone()));
    unknown.stage(put_count("r1")).unwrap();
    let (_, size) = unknown.seal();
    assert_eq!(size.items[0].key, None);
    // Known (a commit asked DescribeTable): the item its key attributes name.
    schemas.learn("counts", Some(vec!["id".to_owned()]));
    let known = staging().with_commit_tables(Some(schemas.clone()));
    known.stage(put_count("r1")).unwrap();
    known.stage(put_count("r2")).unwrap();
    let (_, size) = known.seal();
    assert!(size.items.iter().all(|item| item.key.is_some()));
    assert!(
        !size.items[0].clashes(&size.items[1]),
        "two items of one table fold together"
    );
    // Its key is the one an update of the item names: the two clash, and one handling may not
    // stage both.
    let twice = staging().with_commit_tables(Some(schemas));
    twice.stage(put_count("r3")).unwrap();
    let update = Update::builder()
        .table_name("counts")
        .key("id", AttributeValue::S("r3".to_owned()))
        .update_expression("ADD applied :one")
        .expression_attribute_values(":one", AttributeValue::N("1".into()))
        .build()
        .unwrap();
    assert!(matches!(
        twice.stage(TransactWriteItem::builder().update(update).build()),
        Err(StageError::TwoActionsOnOneItem { .. })
    ));
}

#[test]
fn a_table_named_by_its_arn_in_another_region_than_the_lease_table_is_refused() {
    let tables = crate::lease::CommitTables::default();
    tables.lease_table_is("arn:aws:dynamodb:us-east-1:123456789012:table/leases");
    let writes = staging().with_commit_tables(Some(tables));
    let put = |table: &str| {
        let put = Put::builder()
            .table_name(table)
            .item("id", AttributeValue::S("r1".to_owned()))
            .build()
            .unwrap();
        TransactWriteItem::builder().put(put).build()
    };
    let elsewhere = "arn:aws:dynamodb:eu-west-1:123456789012:table/counts";
    let err = writes.stage(put(elsewhere)).unwrap_err();
    assert_eq!(
        err,
        StageError::OtherRegion {
            table: elsewhere.to_owned(),
            region: "eu-west-1".to_owned(),
            lease_region: "us-east-1".to_owned(),
        }
    );
    assert!(err.to_string().contains("never spans regions"), "{err}");
    writes
        .stage(put("arn:aws:dynamodb:us-east-1:123456789012:table/counts"))
        .unwrap();
    writes.stage(put("counts-by-name")).unwrap();
    assert_eq!(writes.len(), 2, "the refused write staged nothing");
}

//! Tables of counts for the exactly-once tests: keyed `id` (S), on demand; a handling counts its
//! record with `ADD applied :one` on the record's item.

use std::collections::HashMap;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, KeySchemaElement, KeyType,
    ScalarAttributeType, TransactWriteItem, Update,
};

/// Creates the table of counts `name`.
pub async fn create(client: &Client, name: &str) {
    client
        .create_table()
        .table_name(name)
        .billing_mode(BillingMode::PayPerRequest)
        .key_schema(
            KeySchemaElement::builder()
                .attribute_name("id")
                .key_type(KeyType::Hash)
                .build()
                .unwrap(),
        )
        .attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name("id")
                .attribute_type(ScalarAttributeType::S)
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
}

/// Counts `id` once in `table`: `ADD applied :one`.
pub fn count(table: &str, id: &str) -> TransactWriteItem {
    let update = Update::builder()
        .table_name(table)
        .key("id", AttributeValue::S(id.to_owned()))
        .update_expression("ADD applied :one")
        .expression_attribute_values(":one", AttributeValue::N("1".into()))
        .build()
        .unwrap();
    TransactWriteItem::builder().update(update).build()
}

/// Every count in `table`, by id (every page of a consistent Scan).
pub async fn read(client: &Client, table: &str) -> HashMap<String, u64> {
    let mut counts = HashMap::new();
    let mut start = None;
    loop {
        let page = client
            .scan()
            .table_name(table)
            .consistent_read(true)
            .set_exclusive_start_key(start)
            .send()
            .await
            .unwrap();
        for item in page.items() {
            let id = item["id"].as_s().unwrap().clone();
            let applied = item["applied"].as_n().unwrap().parse().unwrap();
            counts.insert(id, applied);
        }
        start = page.last_evaluated_key().cloned();
        if start.is_none() {
            return counts;
        }
    }
}

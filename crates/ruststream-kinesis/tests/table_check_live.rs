//! A lease table that cannot be one fails the start, live: `connect` of a broker whose
//! `DynamoLeaseStore` names a table that does not exist, one keyed the way the Java KCL keys its
//! table (`leaseKey`), or one with a sort key beside `lease_key`, fails with
//! `KinesisError::LeaseStore` naming the table, what is wrong with it and the command that creates
//! a right one; no subscription opens and nothing is written.
//!
//! They run when `KINESIS_TEST_ENDPOINT` names the local stack.
#![cfg(feature = "dynamodb-lease")]

mod common;

use std::sync::Arc;

use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType,
};
use ruststream::Broker;
use ruststream_kinesis::{DynamoLeaseStore, KinesisError, LeaseError};

/// Creates `table` keyed by `keys` (name, hash or range), every key a string.
async fn create_keyed(config: &aws_config::SdkConfig, table: &str, keys: &[(&str, KeyType)]) {
    let client = aws_sdk_dynamodb::Client::new(config);
    let mut create = client
        .create_table()
        .table_name(table)
        .billing_mode(BillingMode::PayPerRequest);
    for (name, kind) in keys {
        create = create
            .attribute_definitions(
                AttributeDefinition::builder()
                    .attribute_name(*name)
                    .attribute_type(ScalarAttributeType::S)
                    .build()
                    .unwrap(),
            )
            .key_schema(
                KeySchemaElement::builder()
                    .attribute_name(*name)
                    .key_type(kind.clone())
                    .build()
                    .unwrap(),
            );
    }
    create.send().await.expect("create the table");
}

/// What `connect` of a broker on `table` answers.
async fn connect_on(url: &str, table: &str) -> Result<(), KinesisError> {
    let config = common::sdk_config(url);
    let store = Arc::new(DynamoLeaseStore::new(&config, table));
    let connected = common::broker_with(url, store).connect().await?;
    ruststream::ConnectedBroker::shutdown(connected).await?;
    Ok(())
}

/// The error of a start refused for `table`, which must name it and the command that creates a
/// right one.
fn refused(answer: Result<(), KinesisError>, table: &str) -> (LeaseError, String) {
    let Err(KinesisError::LeaseStore { source }) = answer else {
        panic!("the start on {table} must be refused, got {answer:?}");
    };
    let message = source.to_string();
    println!("{table}: {message}");
    assert!(message.contains(&format!("{table:?}")), "{message}");
    assert!(
        message.contains(&format!(
            "aws dynamodb create-table --table-name {table} --attribute-definitions \
             AttributeName=lease_key,AttributeType=S"
        )),
        "the fix is the create-table command: {message}"
    );
    (*source, message)
}

#[tokio::test]
async fn a_missing_table_fails_the_start() {
    let Some(url) = common::endpoint() else {
        return;
    };
    let table = common::unique("missing");
    let (source, _) = refused(connect_on(&url, &table).await, &table);
    assert!(
        matches!(source, LeaseError::TableMissing { .. }),
        "{source:?}"
    );
}

#[tokio::test]
async fn a_table_keyed_like_the_java_kcl_fails_the_start() {
    let Some(url) = common::endpoint() else {
        return;
    };
    let config = common::sdk_config(&url);
    let table = common::unique("kcl");
    create_keyed(&config, &table, &[("leaseKey", KeyType::Hash)]).await;
    let (source, message) = refused(connect_on(&url, &table).await, &table);
    assert!(
        matches!(source, LeaseError::TableMismatch { .. }),
        "{source:?}"
    );
    assert!(
        message.contains("leaseKey") && message.contains("Java KCL"),
        "says what the table is keyed by and whose layout that is: {message}"
    );
    assert!(message.contains("lease_key"), "{message}");
    // Nothing was written into it.
    let scanned = aws_sdk_dynamodb::Client::new(&config)
        .scan()
        .table_name(&table)
        .send()
        .await
        .unwrap();
    assert_eq!(scanned.count(), 0);
}

#[tokio::test]
async fn a_table_with_a_sort_key_fails_the_start() {
    let Some(url) = common::endpoint() else {
        return;
    };
    let config = common::sdk_config(&url);
    let table = common::unique("sorted");
    create_keyed(
        &config,
        &table,
        &[("lease_key", KeyType::Hash), ("shard", KeyType::Range)],
    )
    .await;
    let (source, message) = refused(connect_on(&url, &table).await, &table);
    assert!(
        matches!(source, LeaseError::TableMismatch { .. }),
        "{source:?}"
    );
    assert!(message.contains("shard"), "names the sort key: {message}");
}

#[tokio::test]
async fn a_right_table_starts() {
    let Some(url) = common::endpoint() else {
        return;
    };
    let config = common::sdk_config(&url);
    let store = DynamoLeaseStore::new(&config, common::unique("right"));
    store.create_table().await.unwrap();
    connect_on(&url, store.table()).await.unwrap();
}

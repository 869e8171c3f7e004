//! The `lease-table` binary against a DynamoDB endpoint (the local stack): a missing table, a
//! table created empty, and rows held, released and finished.
//!
//! They run when `KINESIS_TEST_ENDPOINT` names the endpoint; without it they print a skip line
//! and pass, unless `KINESIS_TEST_STRICT=1`, which makes them fail instead.

use std::process::{Command, Output};
use std::time::Duration;

use aws_config::SdkConfig;
use ruststream_kinesis::{DynamoLeaseStore, LeaseKey, LeaseStore, SHARD_END};

const SEQUENCE: &str = "49680672754139884217042819293168615594233462764991414274";

fn endpoint() -> Option<String> {
    match std::env::var("KINESIS_TEST_ENDPOINT") {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            assert!(
                std::env::var("KINESIS_TEST_STRICT").as_deref() != Ok("1"),
                "KINESIS_TEST_ENDPOINT is not set and KINESIS_TEST_STRICT=1: live tests may not \
                 be skipped"
            );
            eprintln!("skipped: set KINESIS_TEST_ENDPOINT to run the live lease-table tests");
            None
        }
    }
}

/// Runs `lease-table` with the stack's configuration in its environment.
fn lease_table(endpoint: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lease-table"))
        .args(args)
        .env("AWS_ENDPOINT_URL", endpoint)
        .env("AWS_REGION", "us-east-1")
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env_remove("AWS_PROFILE")
        .output()
        .expect("run lease-table")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn config(endpoint: &str) -> SdkConfig {
    ruststream_kinesis::local_stack_config(endpoint)
}

#[test]
fn a_missing_table_is_named_with_the_command_that_creates_it() {
    let Some(endpoint) = endpoint() else {
        return;
    };
    let table = format!("lease-table-missing-{:08x}", rand::random::<u32>());
    let out = lease_table(&endpoint, &[&table]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = text(&out.stderr);
    assert!(stderr.contains("does not exist"), "{stderr}");
    assert!(
        stderr.contains(&format!("aws dynamodb create-table --table-name {table} ")),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("lease-table {table} --create")),
        "{stderr}"
    );
}

#[tokio::test]
async fn a_table_keyed_like_the_java_kcl_is_no_lease_table() {
    let Some(endpoint) = endpoint() else {
        return;
    };
    use aws_sdk_dynamodb::types::{
        AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType,
    };
    let table = format!("lease-table-kcl-{:08x}", rand::random::<u32>());
    aws_sdk_dynamodb::Client::new(&config(&endpoint))
        .create_table()
        .table_name(&table)
        .billing_mode(BillingMode::PayPerRequest)
        .attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name("leaseKey")
                .attribute_type(ScalarAttributeType::S)
                .build()
                .unwrap(),
        )
        .key_schema(
            KeySchemaElement::builder()
                .attribute_name("leaseKey")
                .key_type(KeyType::Hash)
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
    let out = lease_table(&endpoint, &[&table]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        out.stdout.is_empty(),
        "no view of a table that is none: {out:?}"
    );
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("leaseKey") && stderr.contains("Java KCL"),
        "{stderr}"
    );
    assert!(
        stderr.contains("--attribute-definitions AttributeName=lease_key,AttributeType=S"),
        "{stderr}"
    );
}

#[tokio::test]
async fn the_rows_show_who_holds_what_and_how_far_it_got() {
    let Some(endpoint) = endpoint() else {
        return;
    };
    let table = format!("lease-table-view-{:08x}", rand::random::<u32>());
    let out = lease_table(&endpoint, &[&table, "--create"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(
        text(&out.stdout).starts_with(&format!("no leases yet in table {table}")),
        "{out:?}"
    );

    let store = DynamoLeaseStore::new(&config(&endpoint), table.as_str()).application("warehouse");
    let held = LeaseKey::new("orders", "shardId-000000000000");
    let done = LeaseKey::new("orders", "shardId-000000000001");
    let lease = Duration::from_secs(30);
    store.acquire(&held, "pod-a", lease).await.unwrap();
    // Written as a reader writes it: with how far behind it was.
    store
        .checkpoint_and_renew_behind(&held, "pod-a", SEQUENCE, Some(3_400), lease)
        .await
        .unwrap();
    // A handoff asked of pod-a (no counter bump).
    assert!(
        store
            .ask_handoff(
                &held,
                "pod-a",
                2,
                "pod-b",
                ruststream_kinesis::epoch_millis()
            )
            .await
            .unwrap()
    );
    store.acquire(&done, "pod-b", lease).await.unwrap();
    store.checkpoint(&done, "pod-b", SHARD_END).await.unwrap();
    store.release(&done, "pod-b").await.unwrap();

    let out = lease_table(&endpoint, &[&table]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let stdout = text(&out.stdout);
    let lines: Vec<Vec<&str>> = stdout
        .lines()
        .skip(2)
        .take_while(|line| !line.is_empty())
        .map(|line| {
            line.split("  ")
                .filter(|cell| !cell.is_empty())
                .map(str::trim)
                .collect()
        })
        .collect();
    assert_eq!(lines.len(), 2, "{stdout}");
    assert_eq!(
        lines[0][..3],
        ["orders", "shardId-000000000000", "pod-a"],
        "{stdout}"
    );
    assert!(lines[0][3].ends_with(" s"), "the lease runs: {stdout}");
    assert_eq!(
        lines[0][4..],
        ["2", "…764991414274", "3.4 s", "to pod-b", "warehouse"],
        "{stdout}"
    );
    assert_eq!(
        lines[1],
        [
            "orders",
            "shardId-000000000001",
            "-",
            "-",
            "3",
            "SHARD_END",
            "-",
            "-",
            "warehouse"
        ],
        "{stdout}"
    );
    let summary: Vec<&str> = stdout.lines().skip_while(|line| !line.is_empty()).collect();
    assert_eq!(
        summary,
        [
            "",
            "OWNER  HELD  LAPSED",
            "pod-a  1     0",
            "held by nobody: 1 row (1 finished)"
        ],
        "{stdout}"
    );

    let out = lease_table(&endpoint, &[&table, "--json"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let view: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    assert_eq!(view["table"], table.as_str());
    let rows = view["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 2, "{view}");
    assert_eq!(rows[0]["owner"], "pod-a");
    assert_eq!(rows[0]["checkpoint"], SEQUENCE, "the checkpoint in full");
    assert_eq!(rows[0]["behind_ms"], 3_400);
    assert_eq!(rows[0]["handoff"]["to"], "pod-b");
    assert_eq!(rows[0]["application"], "warehouse");
    assert!(
        rows[0]["expires_in_ms"]
            .as_i64()
            .is_some_and(|left| left > 0),
        "{view}"
    );
    assert_eq!(rows[1]["checkpoint"], SHARD_END);
    assert!(rows[1]["owner"].is_null(), "{view}");
    assert_eq!(
        view["owners"],
        serde_json::json!([{ "owner": "pod-a", "held": 1, "lapsed": 0 }])
    );
}

#[test]
fn help_and_version_exit_0_and_a_wrong_line_64() {
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_lease-table"))
            .args(args)
            .output()
            .expect("run lease-table")
    };
    let help = run(&["--help"]);
    assert_eq!(help.status.code(), Some(0), "{help:?}");
    let said = text(&help.stdout);
    assert!(
        said.contains("--endpoint-url") && said.contains("--region") && said.contains("--json"),
        "{said}"
    );
    assert_eq!(run(&["--version"]).status.code(), Some(0));
    for wrong in [&["t", "--bogus"][..], &[][..], &["t", "--region"][..]] {
        let out = run(wrong);
        assert_eq!(out.status.code(), Some(64), "{wrong:?}: {out:?}");
        assert!(!out.stderr.is_empty(), "{wrong:?} says why");
    }
}

#[tokio::test]
async fn the_endpoint_and_the_region_may_come_from_the_flags() {
    let Some(endpoint) = endpoint() else {
        return;
    };
    let table = format!("lease-table-flags-{:08x}", rand::random::<u32>());
    let out = Command::new(env!("CARGO_BIN_EXE_lease-table"))
        .args([
            &table,
            "--create",
            "--endpoint-url",
            &endpoint,
            "--region",
            "us-east-1",
        ])
        .env_remove("AWS_ENDPOINT_URL")
        .env_remove("AWS_REGION")
        .env_remove("AWS_PROFILE")
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .output()
        .expect("run lease-table");
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(
        text(&out.stdout).starts_with(&format!("no leases yet in table {table}")),
        "{out:?}"
    );
}

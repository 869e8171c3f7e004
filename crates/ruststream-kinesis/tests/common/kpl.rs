//! AWS's own KPL aggregation library (`aws-kinesis-agg` from PyPI, in the local stack's
//! virtualenv), through `scripts/kpl-agg.py`: aggregates written the way the KPL writes them.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::{Command, Stdio};

/// One Kinesis record the library packed: its partition key, explicit hash key and data.
pub struct Packed {
    pub partition_key: String,
    pub explicit_hash_key: Option<String>,
    pub data: Vec<u8>,
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The Python that has `aws-kinesis-agg` (`KPL_AGG_PYTHON`, else the local stack's
/// virtualenv); `None` when it is missing, which fails the test under `KINESIS_TEST_STRICT=1`.
pub fn python() -> Option<PathBuf> {
    let python = std::env::var_os("KPL_AGG_PYTHON").map_or_else(
        || root().join(".local-stack/venv/bin/python"),
        PathBuf::from,
    );
    let usable = Command::new(&python)
        .args(["-c", "import aws_kinesis_agg"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success());
    if usable {
        return Some(python);
    }
    assert!(
        std::env::var("KINESIS_TEST_STRICT").as_deref() != Ok("1"),
        "aws-kinesis-agg is not importable by {}: run scripts/local-stack.sh install",
        python.display()
    );
    eprintln!("skipped: aws-kinesis-agg is not installed (scripts/local-stack.sh install)");
    None
}

/// One user record as the library reads it back: keys, data and sub-sequence number.
pub struct Unpacked {
    pub partition_key: String,
    pub explicit_hash_key: Option<String>,
    pub data: Vec<u8>,
    pub sub_sequence: u64,
}

/// Runs `scripts/kpl-agg.py mode` on `items`, answering its JSON list.
fn run(python: &PathBuf, mode: &str, items: Vec<serde_json::Value>) -> Vec<serde_json::Value> {
    let mut child = Command::new(python)
        .arg(root().join("scripts/kpl-agg.py"))
        .arg(mode)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python starts");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(serde_json::Value::Array(items).to_string().as_bytes())
        .expect("written");
    let out = child.wait_with_output().expect("python ends");
    assert!(out.status.success(), "kpl-agg.py {mode} failed");
    serde_json::from_slice(&out.stdout).expect("a JSON list")
}

fn item(partition_key: &str, explicit_hash_key: Option<&str>, data: &[u8]) -> serde_json::Value {
    serde_json::json!({
        "pk": partition_key,
        "ehk": explicit_hash_key,
        "data": aws_smithy_types::base64::encode(data),
    })
}

fn data_of(item: &serde_json::Value) -> Vec<u8> {
    aws_smithy_types::base64::decode(item["data"].as_str().expect("data")).expect("base64")
}

/// Packs `(partition key, explicit hash key, data)` user records in order, as the library does
/// (a new Kinesis record whenever one is full).
pub fn aggregate(python: &PathBuf, records: &[(String, Option<String>, Vec<u8>)]) -> Vec<Packed> {
    let items = records
        .iter()
        .map(|(key, hash, data)| item(key, hash.as_deref(), data))
        .collect();
    run(python, "aggregate", items)
        .into_iter()
        .map(|record| Packed {
            partition_key: record["pk"].as_str().expect("pk").to_owned(),
            explicit_hash_key: record["ehk"].as_str().map(str::to_owned),
            data: data_of(&record),
        })
        .collect()
}

/// The user records the library reads from one Kinesis record's `data` (its partition key
/// `partition_key`), as a Lambda consumer would.
pub fn deaggregate(python: &PathBuf, partition_key: &str, data: &[u8]) -> Vec<Unpacked> {
    run(python, "deaggregate", vec![item(partition_key, None, data)])
        .into_iter()
        .map(|record| Unpacked {
            partition_key: record["pk"].as_str().expect("pk").to_owned(),
            explicit_hash_key: record["ehk"].as_str().map(str::to_owned),
            data: data_of(&record),
            sub_sequence: record["sub"].as_u64().expect("sub"),
        })
        .collect()
}

//! What the live tests share: the endpoint gate and builders for the local stack.
#![allow(dead_code)]

use std::sync::Arc;

use ruststream_kinesis::{KinesisBroker, LeaseStore};

/// The local stack's endpoint, or `None` to skip a live test. With `KINESIS_TEST_STRICT=1` a
/// missing endpoint fails the test instead, so CI cannot pass by skipping.
pub fn endpoint() -> Option<String> {
    match std::env::var("KINESIS_TEST_ENDPOINT") {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            assert!(
                std::env::var("KINESIS_TEST_STRICT").as_deref() != Ok("1"),
                "KINESIS_TEST_ENDPOINT is not set and KINESIS_TEST_STRICT=1: live tests may not be skipped"
            );
            eprintln!("skipped: set KINESIS_TEST_ENDPOINT to run the live tests");
            None
        }
    }
}

/// A broker on the local stack.
pub fn broker(url: &str) -> KinesisBroker {
    KinesisBroker::new()
        .endpoint(url)
        .region("us-east-1")
        .test_credentials()
}

/// A broker on the local stack sharing `store`.
pub fn broker_with(url: &str, store: Arc<dyn LeaseStore>) -> KinesisBroker {
    broker(url).lease_store(store)
}

/// A stream name no earlier run used.
pub fn unique(prefix: &str) -> String {
    format!("{prefix}-{:016x}", rand_u64())
}

fn rand_u64() -> u64 {
    use std::hash::{BuildHasher, RandomState};
    RandomState::new().hash_one(std::time::SystemTime::now())
}

/// The local stack's AWS configuration, built without I/O.
pub fn sdk_config(url: &str) -> aws_config::SdkConfig {
    aws_config::SdkConfig::builder()
        .behavior_version(aws_config::BehaviorVersion::latest())
        .region(aws_config::Region::new("us-east-1"))
        .endpoint_url(url)
        .credentials_provider(aws_sdk_kinesis::config::SharedCredentialsProvider::new(
            aws_sdk_kinesis::config::Credentials::new("test", "test", None, None, "test"),
        ))
        .build()
}

/// A Kinesis client on the local stack, for what the tests do behind the broker's back.
pub fn raw_kinesis(url: &str) -> aws_sdk_kinesis::Client {
    aws_sdk_kinesis::Client::new(&sdk_config(url))
}

//! A Kinesis client whose HTTP layer is a function of the test's: the SDK's own test utility at
//! the SDK boundary, for the paths the local stack cannot show (it never throttles, and it
//! rejects no record inside a `PutRecords` answer).

use std::sync::{Arc, Mutex};

use aws_config::SdkConfig;
use aws_sdk_kinesis::config::retry::RetryConfig;
use aws_smithy_http_client::test_util::infallible_client_fn;
use aws_smithy_types::body::SdkBody;

/// What the fake saw: the `X-Amz-Target` operation and the JSON body of every request.
pub(crate) type Seen = Arc<Mutex<Vec<(String, serde_json::Value)>>>;

/// A client that answers request `n` (from 0) with `answer(n, operation, body)`: an HTTP status
/// and a JSON body. The SDK's own retries are off, so each answer reaches the crate's code.
pub(crate) fn client(
    answer: impl Fn(usize, &str, &serde_json::Value) -> (u16, serde_json::Value) + Send + Sync + 'static,
) -> (aws_sdk_kinesis::Client, Seen) {
    let (config, seen) = config(answer);
    (aws_sdk_kinesis::Client::new(&config), seen)
}

/// The AWS configuration behind [`client`], for a whole broker (`KinesisBroker::from_config`).
pub(crate) fn config(
    answer: impl Fn(usize, &str, &serde_json::Value) -> (u16, serde_json::Value) + Send + Sync + 'static,
) -> (SdkConfig, Seen) {
    let seen: Seen = Arc::default();
    let log = Arc::clone(&seen);
    let http = infallible_client_fn(move |request: http::Request<SdkBody>| {
        let operation = request
            .headers()
            .get("x-amz-target")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .trim_start_matches("Kinesis_20131202.")
            .to_owned();
        let body: serde_json::Value =
            serde_json::from_slice(request.body().bytes().unwrap_or_default()).unwrap_or_default();
        let n = {
            let mut log = log.lock().unwrap();
            log.push((operation.clone(), body.clone()));
            log.len() - 1
        };
        let (status, reply) = answer(n, &operation, &body);
        http::Response::builder()
            .status(status)
            .header("content-type", "application/x-amz-json-1.1")
            .body(SdkBody::from(reply.to_string()))
            .unwrap()
    });
    // The endpoint is never reached: the HTTP client answers every request.
    let config = crate::local_stack_config("http://127.0.0.1:9")
        .into_builder()
        .retry_config(RetryConfig::disabled())
        .http_client(http)
        .build();
    (config, seen)
}

/// The JSON error body Kinesis answers with.
pub(crate) fn error(kind: &str) -> serde_json::Value {
    serde_json::json!({ "__type": kind, "message": format!("{kind} (fake)") })
}

//! Kinesis and DynamoDB clients whose HTTP layer is a function of the test's, plugged into the
//! SDK's own connector interface: the SDK boundary, for the paths the local stack cannot show
//! (it never throttles, rejects no record inside a `PutRecords` answer, never hangs).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_config::SdkConfig;
use aws_sdk_kinesis::config::retry::RetryConfig;
use aws_smithy_runtime_api::client::connector_metadata::ConnectorMetadata;
use aws_smithy_runtime_api::client::http::{
    HttpClient, HttpConnector, HttpConnectorFuture, HttpConnectorSettings, SharedHttpClient,
    SharedHttpConnector,
};
use aws_smithy_runtime_api::client::orchestrator::{HttpRequest, HttpResponse};
use aws_smithy_runtime_api::client::result::ConnectorError;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_runtime_api::shared::IntoShared;
use aws_smithy_types::body::SdkBody;

use super::aws_json::Service;

/// What the fake saw: the operation (the `X-Amz-Target` after its service prefix) and the JSON
/// body of every request.
pub(crate) type Seen = Arc<Mutex<Vec<(String, serde_json::Value)>>>;

/// How the fake answers one request.
#[derive(Debug, Clone)]
pub(crate) enum Reply {
    /// An HTTP status and a JSON body, after `delay`.
    Json {
        status: u16,
        body: serde_json::Value,
        delay: Duration,
    },
    /// Never answers: a hung call.
    Hang,
    /// The connection breaks before an answer.
    Reset,
    /// The fake stream's own answer, after this delay (only a hook of `fake_stream` gives it).
    Stream(Duration),
}

impl Reply {
    pub(crate) fn ok(body: serde_json::Value) -> Self {
        Self::status(200, body)
    }

    pub(crate) fn status(status: u16, body: serde_json::Value) -> Self {
        Self::Json {
            status,
            body,
            delay: Duration::ZERO,
        }
    }

    /// An error answer in the AWS JSON shape.
    pub(crate) fn error(status: u16, kind: &str) -> Self {
        Self::status(status, error(kind))
    }

    pub(crate) fn after(self, wait: Duration) -> Self {
        match self {
            Self::Json { status, body, .. } => Self::Json {
                status,
                body,
                delay: wait,
            },
            other => other,
        }
    }
}

type Answer = dyn Fn(usize, &str, &serde_json::Value) -> Reply + Send + Sync;

#[derive(Clone)]
struct FakeHttp {
    answer: Arc<Answer>,
    seen: Seen,
}

impl std::fmt::Debug for FakeHttp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeHttp").finish_non_exhaustive()
    }
}

impl HttpConnector for FakeHttp {
    fn call(&self, request: HttpRequest) -> HttpConnectorFuture {
        let target = request
            .headers()
            .get("x-amz-target")
            .unwrap_or_default()
            .to_owned();
        let (operation, content_type) = match Service::of_target(&target) {
            Some((service, operation)) => (operation.to_owned(), service.content_type()),
            None => (target, Service::Kinesis.content_type()),
        };
        let body: serde_json::Value =
            serde_json::from_slice(request.body().bytes().unwrap_or_default()).unwrap_or_default();
        let n = {
            let mut log = self.seen.lock().unwrap();
            log.push((operation.clone(), body.clone()));
            log.len() - 1
        };
        let reply = (self.answer)(n, &operation, &body);
        HttpConnectorFuture::new(async move {
            match reply {
                Reply::Json {
                    status,
                    body,
                    delay,
                } => {
                    if !delay.is_zero() {
                        tokio::time::sleep(delay).await;
                    }
                    let response = http::Response::builder()
                        .status(status)
                        .header("content-type", content_type)
                        .body(SdkBody::from(body.to_string()))
                        .unwrap();
                    Ok(HttpResponse::try_from(response).unwrap())
                }
                Reply::Hang => std::future::pending().await,
                Reply::Stream(_) => unreachable!("a fake stream answers Reply::Stream itself"),
                Reply::Reset => Err(ConnectorError::io(
                    std::io::Error::from(std::io::ErrorKind::ConnectionReset).into(),
                )),
            }
        })
    }
}

impl HttpClient for FakeHttp {
    fn http_connector(
        &self,
        _: &HttpConnectorSettings,
        _: &RuntimeComponents,
    ) -> SharedHttpConnector {
        self.clone().into_shared()
    }

    fn connector_metadata(&self) -> Option<ConnectorMetadata> {
        Some(ConnectorMetadata::new("fake-aws", None))
    }
}

/// An AWS configuration whose every request is answered by `answer(n, operation, body)`, for
/// request `n` (from 0); the SDK's own retries are off, so each answer reaches the crate's code.
pub(crate) fn replying(
    answer: impl Fn(usize, &str, &serde_json::Value) -> Reply + Send + Sync + 'static,
) -> (SdkConfig, Seen) {
    let seen: Seen = Arc::default();
    let http: SharedHttpClient = FakeHttp {
        answer: Arc::new(answer),
        seen: Arc::clone(&seen),
    }
    .into_shared();
    // The endpoint is never reached: the HTTP client answers every request.
    let config = crate::local_stack_config("http://127.0.0.1:9")
        .into_builder()
        .retry_config(RetryConfig::disabled())
        .http_client(http)
        .build();
    (config, seen)
}

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
    replying(move |n, operation, body| {
        let (status, body) = answer(n, operation, body);
        Reply::status(status, body)
    })
}

/// The JSON error body Kinesis and DynamoDB answer with.
pub(crate) fn error(kind: &str) -> serde_json::Value {
    serde_json::json!({ "__type": kind, "message": format!("{kind} (fake)") })
}

/// How many requests of `operation` the fake saw.
pub(crate) fn calls(seen: &Seen, operation: &str) -> usize {
    seen.lock()
        .unwrap()
        .iter()
        .filter(|(op, _)| op == operation)
        .count()
}

/// The bodies of the requests of `operation` the fake saw, in order.
pub(crate) fn bodies(seen: &Seen, operation: &str) -> Vec<serde_json::Value> {
    seen.lock()
        .unwrap()
        .iter()
        .filter(|(op, _)| op == operation)
        .map(|(_, body)| body.clone())
        .collect()
}

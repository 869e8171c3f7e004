//! The fault injector of the in-process live tests, in Rust, at the SDK's connector seam: the
//! AWS configuration it hands out ([`Faults::sdk_config`]) sends every request through its HTTP
//! client, which acts on a request a typed [`Rule`] matches (a throttle, an error status, a delay,
//! a hang, a write applied whose answer is lost) and passes every other request through to the
//! local stack unchanged. The faults the emulators never produce, without a process of their own:
//! only the clients made from this configuration see its rules, so tests that run at once never
//! meet. Faults that must reach other processes (the chaos run's children) still come from the
//! stack's router (`common::injector`, docs/src/fault-injector.md).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use aws_smithy_http_client::Builder;
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
use tokio::sync::watch;

#[path = "../../src/doubles/aws_json.rs"]
mod aws_json;

pub use aws_json::Service;

/// How the injector answers in the service's protocol.
trait Answering {
    fn error(self, status: u16, error_type: &str, message: &str) -> HttpResponse;
}

impl Answering for Service {
    /// The error body of the service's JSON protocol: Kinesis speaks awsJson1_1 (a bare
    /// `__type`), DynamoDB awsJson1_0 (a `__type` with its namespace).
    fn error(self, status: u16, error_type: &str, message: &str) -> HttpResponse {
        let error_type = match self {
            Self::Kinesis => error_type.to_owned(),
            Self::DynamoDb => format!("com.amazonaws.dynamodb.v20120810#{error_type}"),
        };
        let body = serde_json::json!({ "__type": error_type, "message": message });
        let response = http::Response::builder()
            .status(status)
            .header("content-type", self.content_type())
            .body(SdkBody::from(body.to_string()))
            .expect("a valid response");
        HttpResponse::try_from(response).expect("a valid response")
    }
}

/// What a rule does to a request it acts on.
#[derive(Debug, Clone)]
pub enum Action {
    /// Answers the service's throttling error at once (Kinesis
    /// `ProvisionedThroughputExceededException`, DynamoDB `ThrottlingException`), HTTP 400.
    Throttle,
    /// Answers `status` with the service's error `error_type` and `message` at once; the request
    /// is not applied.
    Status {
        status: u16,
        error_type: &'static str,
        message: &'static str,
    },
    /// Passes the request on after `delay`.
    Latency(Duration),
    /// Holds the request until the rule is removed, then passes it on (a client that gave up
    /// meanwhile never sees the answer).
    Blackhole,
    /// Passes the request on (the service applies it), then answers `status` instead of the
    /// service's answer: a write applied whose answer was lost.
    ApplyThenStatus(u16),
    /// Passes the request on (the service applies it), then fails as a reset connection would.
    ApplyThenReset,
}

/// Which requests a rule acts on, and how often.
#[derive(Debug, Clone)]
pub struct Rule {
    pub service: Service,
    /// The operation (`GetRecords`, `UpdateItem`), or `"*"` for any.
    pub operation: &'static str,
    pub action: Action,
    /// Acts on the next `count` requests it matches, then lets them pass; `None`: on every one.
    pub count: Option<u64>,
}

impl Rule {
    /// A rule acting on every request of `service`'s `operation`.
    pub fn on(service: Service, operation: &'static str, action: Action) -> Self {
        Self {
            service,
            operation,
            action,
            count: None,
        }
    }

    /// The same rule, acting on the next `count` requests it matches only.
    pub fn times(self, count: u64) -> Self {
        Self {
            count: Some(count),
            ..self
        }
    }

    fn matches(&self, service: Service, operation: &str) -> bool {
        self.service == service && (self.operation == "*" || self.operation == operation)
    }
}

/// A rule added to an injector: `Faults::hits` and `Faults::remove` take it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RuleId(u64);

#[derive(Debug)]
struct Armed {
    id: RuleId,
    rule: Rule,
    hits: u64,
    /// Set once the rule is removed: the requests a blackhole holds go on.
    removed: watch::Sender<bool>,
}

#[derive(Debug, Default)]
struct Rules {
    armed: Mutex<Vec<Armed>>,
    next: AtomicU64,
}

impl Rules {
    /// The action of the first rule that matches and still acts, counted as a hit; and for a
    /// blackhole, what tells it the rule was removed.
    fn acting(&self, service: Service, operation: &str) -> Option<(Action, watch::Receiver<bool>)> {
        let mut armed = self.armed.lock().unwrap_or_else(PoisonError::into_inner);
        let rule = armed.iter_mut().find(|armed| {
            armed.rule.matches(service, operation)
                && armed.rule.count.is_none_or(|count| armed.hits < count)
        })?;
        rule.hits += 1;
        Some((rule.rule.action.clone(), rule.removed.subscribe()))
    }
}

/// The injector: its rules, and the HTTP client that applies them.
#[derive(Debug, Clone)]
pub struct Faults {
    endpoint: String,
    rules: Arc<Rules>,
}

impl Faults {
    /// An injector in front of the local stack at `endpoint`, with no rule yet.
    pub fn new(endpoint: &str) -> Self {
        Self {
            endpoint: endpoint.to_owned(),
            rules: Arc::default(),
        }
    }

    /// The local stack's AWS configuration, its requests going through this injector.
    pub fn sdk_config(&self) -> aws_config::SdkConfig {
        self.around(ruststream_kinesis::local_stack_config(&self.endpoint))
    }

    /// `config` as it is (its credentials, endpoint and app name), its requests going through
    /// this injector.
    pub fn around(&self, config: aws_config::SdkConfig) -> aws_config::SdkConfig {
        let http: SharedHttpClient = FaultyClient {
            inner: Builder::new().build_http(),
            rules: Arc::clone(&self.rules),
        }
        .into_shared();
        config.into_builder().http_client(http).build()
    }

    /// Adds `rule`, after the rules added before it (the first that matches a request acts).
    pub fn add(&self, rule: Rule) -> RuleId {
        let id = RuleId(self.rules.next.fetch_add(1, Ordering::Relaxed));
        let (removed, _) = watch::channel(false);
        self.rules
            .armed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Armed {
                id,
                rule,
                hits: 0,
                removed,
            });
        id
    }

    /// How many requests rule `id` acted on.
    pub fn hits(&self, id: RuleId) -> u64 {
        self.rules
            .armed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .find(|armed| armed.id == id)
            .map_or(0, |armed| armed.hits)
    }

    /// Removes rule `id`; the requests a blackhole holds go on.
    pub fn remove(&self, id: RuleId) {
        let mut armed = self
            .rules
            .armed
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(at) = armed.iter().position(|armed| armed.id == id) {
            let _ = armed.remove(at).removed.send(true);
        }
    }
}

#[derive(Debug)]
struct FaultyClient {
    inner: SharedHttpClient,
    rules: Arc<Rules>,
}

impl HttpClient for FaultyClient {
    fn http_connector(
        &self,
        settings: &HttpConnectorSettings,
        components: &RuntimeComponents,
    ) -> SharedHttpConnector {
        FaultyConnector {
            inner: self.inner.http_connector(settings, components),
            rules: Arc::clone(&self.rules),
        }
        .into_shared()
    }

    fn connector_metadata(&self) -> Option<ConnectorMetadata> {
        Some(ConnectorMetadata::new("fault-injector", None))
    }
}

#[derive(Debug)]
struct FaultyConnector {
    inner: SharedHttpConnector,
    rules: Arc<Rules>,
}

impl HttpConnector for FaultyConnector {
    fn call(&self, request: HttpRequest) -> HttpConnectorFuture {
        let target = request
            .headers()
            .get("x-amz-target")
            .unwrap_or_default()
            .to_owned();
        let acting = Service::of_target(&target).and_then(|(service, operation)| {
            self.rules
                .acting(service, operation)
                .map(|(action, removed)| (service, action, removed))
        });
        let Some((service, action, mut removed)) = acting else {
            return self.inner.call(request);
        };
        let inner = self.inner.clone();
        HttpConnectorFuture::new(async move {
            match action {
                Action::Throttle => Ok(match service {
                    Service::Kinesis => service.error(
                        400,
                        "ProvisionedThroughputExceededException",
                        "Rate exceeded for shard (fault injector)",
                    ),
                    Service::DynamoDb => service.error(
                        400,
                        "ThrottlingException",
                        "Rate of requests exceeds the allowed throughput (fault injector)",
                    ),
                }),
                Action::Status {
                    status,
                    error_type,
                    message,
                } => Ok(service.error(status, error_type, message)),
                Action::Latency(delay) => {
                    tokio::time::sleep(delay).await;
                    inner.call(request).await
                }
                Action::Blackhole => {
                    let _ = removed.wait_for(|removed| *removed).await;
                    inner.call(request).await
                }
                Action::ApplyThenStatus(status) => {
                    let _ = inner.call(request).await;
                    let error_type = if status == 503 {
                        "ServiceUnavailable"
                    } else {
                        "InternalFailure"
                    };
                    Ok(service.error(
                        status,
                        error_type,
                        "the request was applied; its answer was lost (fault injector)",
                    ))
                }
                Action::ApplyThenReset => {
                    let _ = inner.call(request).await;
                    Err(ConnectorError::io(
                        std::io::Error::new(
                            std::io::ErrorKind::ConnectionReset,
                            "the request was applied; the connection was reset (fault injector)",
                        )
                        .into(),
                    ))
                }
            }
        })
    }
}

//! The HTTP client under the broker's Kinesis client: the SDK's own (the configuration's, or
//! the default one), with every call made on the broker's runtime.
//!
//! Why: hyper keeps each pooled connection alive with a task spawned on the runtime of the call
//! that opened it. A handler on a runtime of its own looks up a stream's record limit on its first
//! publish, and seeks from there; the connection such a call leaves in the pool dies with that
//! runtime, and the broker's next call on it (a reader's `GetRecords`, the publisher's
//! `PutRecords`) fails with "dispatch task is gone", an error the SDK does not retry. Made on the
//! broker's runtime, every connection lives as long as the broker.

use aws_smithy_http_client::proxy::ProxyConfig;
use aws_smithy_http_client::tls::{self, rustls_provider::CryptoMode};
use aws_smithy_http_client::{Builder, ConnectorBuilder};
use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::connector_metadata::ConnectorMetadata;
use aws_smithy_runtime_api::client::http::{
    HttpClient, HttpConnector, HttpConnectorFuture, HttpConnectorSettings, SharedHttpClient,
    SharedHttpConnector,
};
use aws_smithy_runtime_api::client::orchestrator::HttpRequest;
use aws_smithy_runtime_api::client::result::ConnectorError;
use aws_smithy_runtime_api::client::runtime_components::{
    RuntimeComponents, RuntimeComponentsBuilder,
};
use aws_smithy_runtime_api::shared::IntoShared;
use aws_smithy_types::config_bag::ConfigBag;
use tokio::runtime::Handle;
use tokio_util::task::AbortOnDropHandle;

/// `inner` (or, when the configuration names none, the SDK's default HTTPS client) making every
/// call on `runtime`.
pub(crate) fn on_runtime(inner: Option<SharedHttpClient>, runtime: Handle) -> SharedHttpClient {
    OnRuntime {
        inner: inner.unwrap_or_else(default_https_client),
        runtime,
    }
    .into_shared()
}

/// The client the SDK builds when a configuration names none: rustls with aws-lc, proxies from
/// the environment, the SDK's sleep for its timeouts.
fn default_https_client() -> SharedHttpClient {
    Builder::new().build_with_connector_fn(|settings, components| {
        let mut connector = ConnectorBuilder::default()
            .tls_provider(tls::Provider::Rustls(CryptoMode::AwsLc))
            .proxy_config(ProxyConfig::from_env());
        connector.set_connector_settings(settings.cloned());
        if let Some(components) = components {
            connector.set_sleep_impl(components.sleep_impl());
        }
        connector.build()
    })
}

#[derive(Debug)]
struct OnRuntime {
    inner: SharedHttpClient,
    runtime: Handle,
}

impl HttpClient for OnRuntime {
    fn http_connector(
        &self,
        settings: &HttpConnectorSettings,
        components: &RuntimeComponents,
    ) -> SharedHttpConnector {
        // The inner client caches its connector (and with it the pool) per settings.
        SharedHttpConnector::new(OnRuntimeConnector {
            inner: self.inner.http_connector(settings, components),
            runtime: self.runtime.clone(),
        })
    }

    fn validate_base_client_config(
        &self,
        components: &RuntimeComponentsBuilder,
        cfg: &ConfigBag,
    ) -> Result<(), BoxError> {
        self.inner.validate_base_client_config(components, cfg)
    }

    fn validate_final_config(
        &self,
        components: &RuntimeComponents,
        cfg: &ConfigBag,
    ) -> Result<(), BoxError> {
        self.inner.validate_final_config(components, cfg)
    }

    fn connector_metadata(&self) -> Option<ConnectorMetadata> {
        self.inner.connector_metadata()
    }
}

#[derive(Debug)]
struct OnRuntimeConnector {
    inner: SharedHttpConnector,
    runtime: Handle,
}

impl HttpConnector for OnRuntimeConnector {
    fn call(&self, request: HttpRequest) -> HttpConnectorFuture {
        let inner = self.inner.clone();
        // The call is made inside the task, so a connection it opens is driven by this runtime.
        // Dropped (a timeout, a caller that gave up), the call ends with it.
        let call =
            AbortOnDropHandle::new(self.runtime.spawn(async move { inner.call(request).await }));
        HttpConnectorFuture::new(async move {
            call.await.unwrap_or_else(|stopped| {
                Err(ConnectorError::other(
                    format!("the broker's runtime stopped before the call ended: {stopped}").into(),
                    None,
                ))
            })
        })
    }
}

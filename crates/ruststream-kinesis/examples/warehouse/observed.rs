//! The warehouse service with its metrics served (feature `metrics`): the framework's registry
//! holds its own consume series and the broker's (`KinesisMetrics`), and a `/metrics` route on
//! `WAREHOUSE_METRICS_ADDR` (such as `127.0.0.1:9464`) renders them for Prometheus.

use std::convert::Infallible;
use std::error::Error;

use aws_config::BehaviorVersion;
use bytes::Bytes;
use http_body_util::Full;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Response, StatusCode};
use hyper_util::rt::TokioIo;
use ruststream::metrics::Metrics;
use ruststream_kinesis::KinesisMetrics;
use ruststream_kinesis::prelude::*;
use tokio::net::TcpListener;

// ANCHOR: observed
/// The warehouse service counting into `metrics`: the framework's consume layer and the
/// broker's own series share its registry.
fn observed_service(
    config: &SdkConfig,
    table: &str,
    owner: &str,
    metrics: &Metrics,
) -> Result<impl App + use<>, Box<dyn Error>> {
    let leases = Arc::new(DynamoLeaseStore::new(config, table));
    let broker = KinesisBroker::from_config(config.clone())
        .lease_store(leases)
        .owner_id(owner)
        .metrics(KinesisMetrics::register(metrics.registry())?);
    Ok(RustStream::new(AppInfo::new("warehouse", "0.1.0"))
        .layer(metrics.consume_layer())
        .with_broker(broker, |b| {
            b.include(super::pick);
        }))
}
// ANCHOR_END: observed

/// Runs the service as `owner` on `table`, with `/metrics` served on `addr`, until SIGINT or
/// SIGTERM.
pub async fn run(table: &str, owner: &str, addr: &str) -> Result<(), Box<dyn Error>> {
    let config = aws_config::defaults(BehaviorVersion::latest()).load().await;
    let metrics = Metrics::with_registry(prometheus::Registry::new())?;
    let app = observed_service(&config, table, owner, &metrics)?;
    let listener = TcpListener::bind(addr).await?;
    tracing::info!(addr = %listener.local_addr()?, "serving /metrics");
    tokio::spawn(serve(listener, metrics));
    app.run().await?;
    Ok(())
}

/// Answers every request with the registry rendered in Prometheus' text format.
async fn serve(listener: TcpListener, metrics: Metrics) {
    loop {
        let Ok((connection, _)) = listener.accept().await else {
            continue;
        };
        let metrics = metrics.clone();
        tokio::spawn(async move {
            let scrape = service_fn(move |_request| {
                let answer = match metrics.export() {
                    Ok(text) => Response::new(Full::new(Bytes::from(text))),
                    Err(err) => {
                        let mut failed = Response::new(Full::new(Bytes::from(err.to_string())));
                        *failed.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
                        failed
                    }
                };
                async move { Ok::<_, Infallible>(answer) }
            });
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(connection), scrape)
                .await;
        });
    }
}

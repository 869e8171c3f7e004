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

#[cfg(all(test, feature = "testing"))]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;

    /// `GET /metrics` of the service at `addr`.
    fn scrape(addr: std::net::SocketAddr) -> String {
        ureq::get(&format!("http://{addr}/metrics"))
            .call()
            .expect("the /metrics route answers")
            .into_string()
            .unwrap()
    }

    /// Scrapes `addr` until `holds` is true of a scrape (within 30 s); the last scrape.
    async fn until(addr: std::net::SocketAddr, what: &str, holds: impl Fn(&str) -> bool) -> String {
        let started = Instant::now();
        loop {
            let text = tokio::task::spawn_blocking(move || scrape(addr))
                .await
                .unwrap();
            if holds(&text) {
                return text;
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "{what} did not happen within 30 s; the last scrape of {addr}:\n{text}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The observed service on the local stack, as `owner` on `table`, serving /metrics on a
    /// port of loopback.
    async fn start(
        config: &SdkConfig,
        table: &str,
        owner: &str,
    ) -> (ruststream::runtime::RunningApp, std::net::SocketAddr) {
        let metrics = Metrics::with_registry(prometheus::Registry::new()).unwrap();
        let app = observed_service(config, table, owner, &metrics).unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(serve(listener, metrics));
        (app.start().await.unwrap(), addr)
    }

    /// Two running services scraped over HTTP: the leases move from the first to the second
    /// across its release, and each shows its lag per shard.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_leases_held_move_across_a_handover_in_the_scrapes() {
        let Ok(endpoint) = std::env::var("KINESIS_TEST_ENDPOINT") else {
            assert!(
                std::env::var("KINESIS_TEST_STRICT").as_deref() != Ok("1"),
                "KINESIS_TEST_ENDPOINT is not set and KINESIS_TEST_STRICT=1"
            );
            return;
        };
        let config = ruststream_kinesis::local_stack_config(endpoint);
        let table = format!("warehouse-observed-{:08x}", rand::random::<u32>());
        DynamoLeaseStore::new(&config, table.as_str())
            .create_table()
            .await
            .unwrap();
        let held = |owner: &str, n: u32| {
            let series = format!(
                "aws_kinesis_leases_held{{owner=\"{owner}\",stream=\"warehouse-orders\"}} {n}\n"
            );
            move |text: &str| text.contains(&series)
        };
        let lags = |text: &str| {
            text.lines()
                .filter(|line| line.starts_with("aws_kinesis_shard_behind_seconds{"))
                .count()
        };
        let (a, at_a) = start(&config, &table, "observed-a").await;
        let holds_both = held("observed-a", 2);
        until(at_a, "observed-a reading both shards", |text| {
            holds_both(text) && lags(text) == 2
        })
        .await;
        let (b, at_b) = start(&config, &table, "observed-b").await;
        let standing_by = until(at_b, "observed-b serving", |_| true).await;
        assert!(
            !standing_by.contains("aws_kinesis_leases_held{owner=\"observed-b\""),
            "observed-b holds nothing while observed-a reads:\n{standing_by}"
        );
        a.shutdown().await.unwrap();
        until(at_a, "observed-a holding none", held("observed-a", 0)).await;
        until(
            at_b,
            "observed-b holding both leases",
            held("observed-b", 2),
        )
        .await;
        b.shutdown().await.unwrap();
    }
}

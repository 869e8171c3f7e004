//! No credential in a log line or an error (the local stack): two instances configured with
//! recognisable static keys, a session token and an endpoint whose user-info carries a password
//! run at TRACE through start, a handover and shutdown, and no line either writes, nor any
//! error's `Display` or `Debug`, carries the secret key, the token or the password. The test
//! owns its binary: it installs the process's global `tracing` subscriber.
#![cfg(all(feature = "dynamodb-lease", feature = "testing"))]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::captured::Captured;
use common::instances::{Instance, collect_until, payloads, publish_all, table};
use common::secrets;
use ruststream_kinesis::{KinesisBroker, LeaseStore};
use tokio::sync::mpsc;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_log_line_and_no_error_carries_a_credential_through_start_handover_and_shutdown() {
    let Some(url) = common::endpoint() else {
        return;
    };
    let captured = Captured::everything();
    let config = secrets::config(&url, "credentials-live");
    let endpoint = secrets::with_password(&url);
    let stream = common::unique("credentials");
    let (_, table) = table(&url).await;
    let store: Arc<dyn LeaseStore> = Arc::new(table);
    let (tx, mut rx) = mpsc::unbounded_channel();
    let (errors_tx, mut errors_rx) = mpsc::unbounded_channel();
    let broker = |owner: &str| {
        KinesisBroker::from_config(config.clone())
            .lease_store(Arc::clone(&store))
            .owner_id(owner)
            .lease_timings(common::instances::timings())
    };
    let a = Instance::start_with(
        broker("pod-a"),
        "pod-a",
        (&stream, 2),
        tx.clone(),
        Some(errors_tx.clone()),
    )
    .await;
    let b = Instance::start_with(broker("pod-b"), "pod-b", (&stream, 2), tx, Some(errors_tx)).await;
    let first: Vec<String> = (0..10).map(|n| format!("before-{n}")).collect();
    publish_all(&url, &stream, first.clone()).await;
    let mut seen = Vec::new();
    let want: std::collections::HashSet<String> = first.into_iter().collect();
    collect_until(&mut rx, &mut seen, Duration::from_secs(30), |s| {
        payloads(s) == want
    })
    .await;
    assert_eq!(
        payloads(&seen),
        want,
        "the service read through the configuration"
    );
    // The handover: pod-a stops and releases its leases, and pod-b takes them and reads on.
    a.stop().await;
    let later: Vec<String> = (0..10).map(|n| format!("after-{n}")).collect();
    publish_all(&url, &stream, later.clone()).await;
    let want: std::collections::HashSet<String> = want.into_iter().chain(later).collect();
    collect_until(&mut rx, &mut seen, Duration::from_secs(30), |s| {
        payloads(s) == want
    })
    .await;
    assert_eq!(payloads(&seen), want, "pod-b read on after the handover");
    assert!(
        seen.iter()
            .filter(|h| h.payload.starts_with("after-"))
            .all(|h| h.instance == "pod-b")
    );
    b.stop().await;
    // A failing configuration's errors, shown every way.
    let mut shown = Vec::new();
    while let Ok(err) = errors_rx.try_recv() {
        shown.push(err);
    }
    let no_region = KinesisBroker::new().endpoint(endpoint.clone());
    shown.push(format!("{no_region:?}"));
    for line in captured.lines().iter().chain(&shown) {
        secrets::assert_none_in(line, "a log line or an error");
    }
    let lines = captured.lines().len();
    assert!(lines > 100, "the run logged at TRACE ({lines} lines)");
}

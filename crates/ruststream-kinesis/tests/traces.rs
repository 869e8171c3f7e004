//! A delivery's span follows the producer's trace: a record published with a W3C
//! `traceparent` header carries it through Kinesis (in this crate's envelope), and the
//! framework's OpenTelemetry consume layer opens the delivery's span in that trace, as the
//! producer's child. In process (`TestApp`): the envelope is the one the live path writes and
//! reads (`kinesis_live` checks the headers round trip through the local stack).
#![cfg(all(
    feature = "otel",
    feature = "testing",
    feature = "macros",
    feature = "json"
))]

use std::sync::Mutex;

use ruststream::otel::OpenTelemetry;
use ruststream::testing::TestApp;
use ruststream_kinesis::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Debug, PartialEq, Deserialize, Serialize, Outgoing)]
#[outgoing(name = "orders")]
struct Order {
    id: u64,
}

/// The `traceparent` each delivery's handler ran under, by order id.
static SEEN: Mutex<Vec<(u64, Option<String>)>> = Mutex::new(Vec::new());

#[subscriber(KinesisStream::new("orders").create_if_missing(1))]
async fn pick(order: &Order, ctx: &mut Context<'_>) -> HandlerOutcome {
    let traceparent = ctx.headers().get_str("traceparent").map(str::to_owned);
    SEEN.lock().unwrap().push((order.id, traceparent));
    HandlerOutcome::ack()
}

/// `version-trace-span-flags` of a W3C `traceparent`.
fn parts(traceparent: &str) -> (String, String) {
    let fields: Vec<&str> = traceparent.split('-').collect();
    assert_eq!(fields.len(), 4, "{traceparent}");
    (fields[1].to_owned(), fields[2].to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deliverys_span_continues_the_producers_trace() {
    let otel = OpenTelemetry::new();
    let app = RustStream::new(AppInfo::new("warehouse", "0.1.0"))
        .layer(otel.consume_layer())
        .with_broker(KinesisBroker::new(), |b| {
            b.include(pick);
        });
    let tb = TestApp::start(app).await.unwrap();
    let producer = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let mut headers = HeaderMap::new();
    headers.insert("traceparent", producer);
    let orders = tb.broker::<KinesisBroker>();
    orders
        .message(&Order { id: 1 })
        .with_headers(headers)
        .publish()
        .await
        .unwrap();
    orders.message(&Order { id: 2 }).publish().await.unwrap();
    orders.subscriber("orders").assert_called(2);

    let seen = SEEN.lock().unwrap().clone();
    let span_of = |id: u64| {
        seen.iter()
            .find(|(order, _)| *order == id)
            .and_then(|(_, traceparent)| traceparent.clone())
            .unwrap_or_else(|| panic!("order {id} ran with no traceparent: {seen:?}"))
    };
    let (producer_trace, producer_span) = parts(producer);
    let (trace, span) = parts(&span_of(1));
    assert_eq!(
        trace, producer_trace,
        "the delivery stays in the producer's trace"
    );
    assert_ne!(span, producer_span, "the delivery has a span of its own");
    // A record with no trace starts one.
    let (fresh, _) = parts(&span_of(2));
    assert_ne!(fresh, producer_trace);
}

//! `TestApp` on the shard reader over the in-process Kinesis: what in-process mode promises
//! (no lease store consulted, a stream that does not exist refused, delayed redeliveries on the
//! test's clock, the initial position honoured).
#![cfg(feature = "testing")]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use ruststream::prelude::*;
use ruststream::testing::TestApp;
use ruststream_kinesis::lease::{LeaseFuture, LeaseKey, LeaseState, LeaseStore};
use ruststream_kinesis::{KinesisBroker, KinesisContext, KinesisPosition, KinesisStream};

/// A lease store no call may reach: each one panics, naming it.
#[derive(Debug)]
struct Untouchable;

impl LeaseStore for Untouchable {
    fn acquire<'a>(
        &'a self,
        _: &'a LeaseKey,
        _: &'a str,
        _: Duration,
    ) -> LeaseFuture<'a, LeaseState> {
        panic!("in process, the configured lease store was asked to acquire")
    }

    fn renew<'a>(
        &'a self,
        _: &'a LeaseKey,
        _: &'a str,
        _: Duration,
    ) -> LeaseFuture<'a, LeaseState> {
        panic!("in process, the configured lease store was asked to renew")
    }

    fn checkpoint<'a>(&'a self, _: &'a LeaseKey, _: &'a str, _: &'a str) -> LeaseFuture<'a, ()> {
        panic!("in process, the configured lease store was asked to checkpoint")
    }

    fn read<'a>(&'a self, _: &'a LeaseKey) -> LeaseFuture<'a, Option<LeaseState>> {
        panic!("in process, the configured lease store was asked to read")
    }

    fn release<'a>(&'a self, _: &'a LeaseKey, _: &'a str) -> LeaseFuture<'a, ()> {
        panic!("in process, the configured lease store was asked to release")
    }

    fn check(&self) -> LeaseFuture<'_, ()> {
        panic!("in process, the configured lease store was checked")
    }
}

/// Counts its calls and answers what `outcome` says of each (numbered from 0).
#[derive(Clone)]
struct Counting {
    calls: Arc<AtomicUsize>,
    outcome: fn(usize) -> HandlerOutcome,
}

impl Handle<String, (), (), KinesisContext> for Counting {
    async fn handle(
        &self,
        _body: &String,
        _outs: &(),
        _ctx: &mut Context<'_, KinesisContext>,
    ) -> Result<(), HandlerOutcome> {
        let outcome = (self.outcome)(self.calls.fetch_add(1, Ordering::SeqCst));
        if outcome.is_ack() {
            Ok(())
        } else {
            Err(outcome)
        }
    }
}

/// A service of one subscriber to `source` that counts its calls and answers `outcome`.
fn app(
    broker: KinesisBroker,
    source: KinesisStream,
    calls: &Arc<AtomicUsize>,
    outcome: fn(usize) -> HandlerOutcome,
) -> RustStream {
    let handler = Counting {
        calls: Arc::clone(calls),
        outcome,
    };
    RustStream::new(AppInfo::new("reader", "0.1.0")).with_broker(broker, move |b| {
        b.include(subscriber(source, handler).build());
    })
}

/// Starts a service of `broker` reading `source` (of `stream`) and publishes five messages to
/// it, each handled before its publish returns.
async fn each_handled_before_its_publish_returns(
    broker: KinesisBroker,
    stream: &str,
    source: KinesisStream,
) {
    let calls = Arc::new(AtomicUsize::new(0));
    let tb = TestApp::start(app(broker, source, &calls, |_| HandlerOutcome::ack()))
        .await
        .unwrap();
    let orders = tb.broker::<KinesisBroker>();
    for n in 0..5 {
        orders
            .message(&format!("order-{n}"))
            .to(stream)
            .publish()
            .await
            .unwrap();
        assert_eq!(
            calls.load(Ordering::SeqCst),
            n + 1,
            "handled before its publish returned"
        );
    }
    tb.shutdown().await.unwrap();
}

#[tokio::test]
async fn the_configured_lease_store_is_never_called() {
    let broker = KinesisBroker::new().lease_store(Arc::new(Untouchable));
    let source = KinesisStream::new("reader-untouched").create_if_missing(2);
    each_handled_before_its_publish_returns(broker, "reader-untouched", source).await;
}

#[tokio::test]
async fn a_fan_out_subscription_handles_each_publish_before_it_returns() {
    let source = KinesisStream::new("reader-fan-out")
        .create_if_missing(2)
        .enhanced_fan_out("warehouse");
    each_handled_before_its_publish_returns(KinesisBroker::new(), "reader-fan-out", source).await;
}

#[tokio::test(start_paused = true)]
async fn a_delayed_redelivery_comes_on_the_tests_clock_and_the_shard_reads_on_after_a_day() {
    let calls = Arc::new(AtomicUsize::new(0));
    let source = KinesisStream::new("reader-delayed").create_if_missing(1);
    let first_later = |call| {
        if call == 0 {
            HandlerOutcome::retry_after(Duration::from_secs(5))
        } else {
            HandlerOutcome::ack()
        }
    };
    let tb = TestApp::start(app(KinesisBroker::new(), source, &calls, first_later))
        .await
        .unwrap();
    let orders = tb.broker::<KinesisBroker>();
    orders
        .message(&"first".to_owned())
        .to("reader-delayed")
        .publish()
        .await
        .unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    tb.advance(Duration::from_secs(4)).await.unwrap();
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "not before its delay ran out"
    );
    tb.advance(Duration::from_secs(1)).await.unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 2, "once it ran out");
    // A day in one jump, and the shard reads on. (In process a lease lasts ten years, so the
    // jump loses none; with the service's timings the shard would be taken again after the
    // jump, which this does not tell apart.)
    tb.advance(Duration::from_secs(24 * 3600)).await.unwrap();
    orders
        .message(&"after a day".to_owned())
        .to("reader-delayed")
        .publish()
        .await
        .unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 3);
    tb.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_subscription_to_a_stream_that_does_not_exist_fails_the_start() {
    let calls = Arc::new(AtomicUsize::new(0));
    let source = KinesisStream::new("reader-undeclared");
    let started = TestApp::start(app(KinesisBroker::new(), source, &calls, |_| {
        HandlerOutcome::ack()
    }))
    .await;
    let err = started.expect_err("the start fails").to_string();
    assert!(err.contains("reader-undeclared"), "{err}");
}

/// The push engine delivered from the moment a subscription opened whatever its initial
/// position; the reader starts where the position says, as it does live.
#[tokio::test]
async fn a_subscription_from_the_oldest_record_reads_what_was_written_before_it() {
    let shared = KinesisBroker::new();
    let earlier = Arc::new(AtomicUsize::new(0));
    let at_tip = KinesisStream::new("reader-backlog").create_if_missing(1);
    let tb = TestApp::start(app(shared.clone(), at_tip, &earlier, |_| {
        HandlerOutcome::ack()
    }))
    .await
    .unwrap();
    tb.broker::<KinesisBroker>()
        .message(&"before".to_owned())
        .to("reader-backlog")
        .publish()
        .await
        .unwrap();
    assert_eq!(earlier.load(Ordering::SeqCst), 1);
    tb.shutdown().await.unwrap();

    // The same in-process Kinesis (a clone of the broker), a connection of its own and so a
    // lease store with no checkpoint: the oldest record is where it starts.
    let later = Arc::new(AtomicUsize::new(0));
    let oldest = KinesisStream::new("reader-backlog")
        .create_if_missing(1)
        .initial_position(KinesisPosition::TrimHorizon);
    let tb = TestApp::start(app(shared, oldest, &later, |_| HandlerOutcome::ack()))
        .await
        .unwrap();
    tb.settle().await.unwrap();
    assert_eq!(
        later.load(Ordering::SeqCst),
        1,
        "the record written before it"
    );
    tb.shutdown().await.unwrap();
}

/// Two `TestApp`s at once on clones of one broker share its streams, and each counts its own
/// work: a publish through one returns once its own handler settled, and the other's readers
/// owe their harness what they read of it, handled by the time a publish through the other
/// returns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_test_apps_on_clones_of_one_broker_each_count_their_own_work() {
    let shared = KinesisBroker::new();
    let source = || KinesisStream::new("reader-clones").create_if_missing(2);
    let (first_calls, second_calls) =
        (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let ack = |_| HandlerOutcome::ack();
    let first = TestApp::start(app(shared.clone(), source(), &first_calls, ack))
        .await
        .unwrap();
    let second = TestApp::start(app(shared, source(), &second_calls, ack))
        .await
        .unwrap();
    for n in 0..3 {
        first
            .broker::<KinesisBroker>()
            .message(&format!("order-{n}"))
            .to("reader-clones")
            .publish()
            .await
            .unwrap();
        assert_eq!(first_calls.load(Ordering::SeqCst), n + 1);
    }
    second
        .broker::<KinesisBroker>()
        .message(&"order-3".to_owned())
        .to("reader-clones")
        .publish()
        .await
        .unwrap();
    assert_eq!(
        second_calls.load(Ordering::SeqCst),
        4,
        "the second service read every record of the shared stream"
    );
    first.shutdown().await.unwrap();
    second.shutdown().await.unwrap();
}

/// A test's input to a stream nobody declared is refused, as Kinesis refuses it (with a
/// warning): the publish returns, nothing is handled, nothing is recorded as published, and
/// the harness is owed nothing for it.
#[tokio::test]
async fn an_input_to_a_stream_nobody_declared_is_refused_and_owes_nothing() {
    let calls = Arc::new(AtomicUsize::new(0));
    let source = KinesisStream::new("reader-declared").create_if_missing(1);
    let tb = TestApp::start(app(KinesisBroker::new(), source, &calls, |_| {
        HandlerOutcome::ack()
    }))
    .await
    .unwrap();
    let orders = tb.broker::<KinesisBroker>();
    orders
        .message(&"lost".to_owned())
        .to("reader-undeclared")
        .publish()
        .await
        .unwrap();
    orders
        .published::<String>("reader-undeclared")
        .assert_not_called();
    orders
        .message(&"kept".to_owned())
        .to("reader-declared")
        .publish()
        .await
        .unwrap();
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "only the declared stream's input"
    );
    tb.shutdown().await.unwrap();
}

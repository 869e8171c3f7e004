//! A handler seeks its own subscription through its context (`Ctx<Position>`,
//! `Ctx<SeekHandle>`): in process, and live against the local stack, where a position Kinesis
//! refuses fails the handler's seek naming the shard and moves nothing.

mod common;

use ruststream_kinesis::SharedStr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ruststream::prelude::*;
use ruststream::{Broker, ConnectedBroker, OutgoingMessage, Publisher, Seeker};
use ruststream_kinesis::{
    KinesisBroker, KinesisContext, KinesisOptions, KinesisPosition, KinesisStream, Position,
    SeekHandle,
};

/// What the handler saw: each payload, and what each seek it made answered.
#[derive(Debug, Default)]
struct Seen {
    handled: Vec<String>,
    seeks: Vec<Result<(), String>>,
}

/// Handles `rewind` once by seeking its shard back to itself, and `elsewhere` once by seeking
/// to a sequence number the shard does not hold.
#[derive(Clone)]
struct Rewinder(Arc<Mutex<Seen>>);

impl Handle<String, (), (), KinesisContext> for Rewinder {
    async fn handle(
        &self,
        body: &String,
        _outs: &(),
        ctx: &mut Context<'_, KinesisContext>,
    ) -> Result<(), HandlerOutcome> {
        let first = {
            let mut seen = self.0.lock().unwrap();
            seen.handled.push(body.clone());
            seen.handled.iter().filter(|b| *b == body).count() == 1
        };
        let target = match body.as_str() {
            "rewind" if first => Some(ctx.context(Position).clone()),
            "elsewhere" if first => {
                let KinesisPosition::AtSequence { shard, .. } = ctx.context(Position).clone()
                else {
                    unreachable!("a delivery's position names its record")
                };
                Some(KinesisPosition::AtSequence {
                    shard,
                    sequence: SharedStr::from(
                        "49999999999999999999999999999999999999999999999999999999",
                    ),
                })
            }
            _ => None,
        };
        if let Some(target) = target {
            let answered = ctx.context(SeekHandle).seek(target).await;
            self.0
                .lock()
                .unwrap()
                .seeks
                .push(answered.map_err(|err| err.to_string()));
        }
        Ok(())
    }
}

/// The service; `fan_out` reads with enhanced fan-out through that consumer.
fn app(
    broker: KinesisBroker,
    stream: &str,
    seen: &Arc<Mutex<Seen>>,
    fan_out: Option<&str>,
) -> RustStream {
    let source = KinesisStream::new(stream.to_owned())
        .create_if_missing(1)
        .poll_interval(Duration::from_millis(200));
    let source = match fan_out {
        Some(consumer) => source.enhanced_fan_out(consumer.to_owned()),
        None => source,
    };
    let handler = Rewinder(Arc::clone(seen));
    RustStream::new(AppInfo::new("rewinder", "0.1.0")).with_broker(broker, move |b| {
        b.include(subscriber(source, handler).build());
    })
}

async fn wait_for(seen: &Arc<Mutex<Seen>>, handled: usize) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while seen.lock().unwrap().handled.len() < handled {
        assert!(
            Instant::now() < deadline,
            "handled only {:?}",
            seen.lock().unwrap()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // A little longer, so that a delivery too many would show.
    tokio::time::sleep(Duration::from_millis(700)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_process_a_handler_rewinds_its_shard_to_its_own_record() {
    in_process_rewinds(None).await;
}

/// `TestApp` runs a fan-out subscription as it runs a polling one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_process_a_fan_out_subscription_runs_like_a_polling_one() {
    in_process_rewinds(Some("warehouse")).await;
}

/// The seek goes through the reader's machine, as live; a fan-out subscription's events come
/// from the in-process Kinesis.
async fn in_process_rewinds(fan_out: Option<&str>) {
    let broker = KinesisBroker::new();
    let seen = Arc::new(Mutex::new(Seen::default()));
    let tb = ruststream::testing::TestApp::start(app(broker, "rewinds", &seen, fan_out))
        .await
        .unwrap();
    let orders = tb.broker::<KinesisBroker>();
    for body in ["first", "rewind", "last"] {
        orders
            .message(&body.to_owned())
            .to("rewinds")
            .publish()
            .await
            .unwrap();
    }
    // The seek replays the rewound record (the last one is not published yet).
    wait_for(&seen, 4).await;
    let seen = seen.lock().unwrap();
    assert_eq!(seen.handled, ["first", "rewind", "rewind", "last"]);
    assert_eq!(seen.seeks, [Ok(())]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_a_handler_rewinds_its_shard_and_a_refused_seek_moves_nothing() {
    live_rewinds(None).await;
}

/// With enhanced fan-out a seek subscribes again at its position.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_fan_out_a_handler_rewinds_its_shard_and_a_refused_seek_moves_nothing() {
    live_rewinds(Some("rewinder")).await;
}

async fn live_rewinds(fan_out: Option<&str>) {
    let Some(url) = common::endpoint() else {
        return;
    };
    let stream = common::unique("rewinds");
    let seen = Arc::new(Mutex::new(Seen::default()));
    let running = app(common::broker(&url), &stream, &seen, fan_out)
        .start()
        .await
        .unwrap();
    let producer = common::broker(&url).connect().await.unwrap();
    let publisher = producer.publisher().await.unwrap();
    let one_key = KinesisOptions::default().with_partition_key("k");
    for body in ["first", "elsewhere", "rewind", "last"] {
        let payload = serde_json::to_vec(body).unwrap();
        publisher
            .publish(
                OutgoingMessage::new(stream.as_str(), payload.as_slice()),
                Some(&one_key),
            )
            .await
            .unwrap();
    }
    // first, elsewhere (its seek refused: reading goes on), rewind (sought back to itself),
    // then rewind again and last.
    wait_for(&seen, 5).await;
    {
        let seen = seen.lock().unwrap();
        assert_eq!(
            seen.handled,
            ["first", "elsewhere", "rewind", "rewind", "last"]
        );
        let refused = seen.seeks[0]
            .as_ref()
            .expect_err("Kinesis refused the position");
        assert!(
            refused.contains(&stream) && refused.contains("shardId-000000000000"),
            "{refused}"
        );
        assert!(
            !refused.contains("no longer exists") && refused.contains("reads on where it was"),
            "the shard is read on, and the refusal says so: {refused}"
        );
        assert_eq!(seen.seeks[1], Ok(()));
    }
    running.shutdown().await.unwrap();
    producer.shutdown().await.unwrap();
}

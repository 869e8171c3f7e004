//! `TestApp` on the in-process Kinesis with records only the crate writes (a KPL aggregate of
//! several user records): the harness's count holds when a reader resumes inside one.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use ruststream::Seeker;
use ruststream::prelude::*;
use ruststream::testing::TestApp;

use crate::kinesis::api::OutRecord;
use crate::kinesis::kpl::Aggregate;
use crate::{KinesisBroker, KinesisContext, KinesisStream, Position, SeekHandle};

/// Records each payload it handles, and seeks its shard back to `user-1` the first time it
/// handles it.
#[derive(Clone, Default)]
struct Rewinder(Arc<Mutex<Vec<String>>>);

impl Handle<String, (), (), KinesisContext> for Rewinder {
    async fn handle(
        &self,
        body: &String,
        _outs: &(),
        ctx: &mut Context<'_, KinesisContext>,
    ) -> Result<(), HandlerOutcome> {
        let first = {
            let mut handled = self.0.lock().unwrap();
            handled.push(body.clone());
            handled.iter().filter(|b| *b == body).count() == 1
        };
        if body == "user-1" && first {
            let to = ctx.context(Position).clone();
            ctx.context(SeekHandle)
                .seek(to)
                .await
                .map_err(|_| HandlerOutcome::retry())?;
        }
        Ok(())
    }
}

/// The aggregate at the start of the stream's only shard holds `user-0` to `user-2`; the
/// handler of `user-1` seeks to it, so the reader resumes inside the aggregate (past `user-0`)
/// and the aggregate's own unit is taken by no delivery. The harness's next publish must still
/// come back, for a polling reader (it lets the unit go at the shard's tip) and for a fan-out one
/// (at its next event, which no record follows).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_resumed_inside_an_aggregate_owes_the_harness_none_of_it() {
    for fan_out in [false, true] {
        let broker = KinesisBroker::new();
        let kinesis = broker.in_process_kinesis();
        let handled = Rewinder::default();
        let source = KinesisStream::new("aggregates").create_if_missing(1);
        let source = if fan_out {
            source.enhanced_fan_out("warehouse")
        } else {
            source
        };
        let handler = handled.clone();
        let app = RustStream::new(AppInfo::new("rewinder", "0.1.0")).with_broker(broker, |b| {
            b.include(subscriber(source, handler).build());
        });
        let tb = TestApp::start(app).await.unwrap();
        let mut aggregate = Aggregate::new();
        for n in 0..3 {
            aggregate.push(
                &format!("key-{n}"),
                None,
                format!("\"user-{n}\"").into_bytes(),
            );
        }
        let record = OutRecord {
            data: Bytes::from(aggregate.encode()),
            partition_key: "outer".to_owned(),
            explicit_hash_key: None,
        };
        kinesis.put("aggregates", record).unwrap();
        let after = "after".to_owned();
        let orders = tb.broker::<KinesisBroker>();
        let publish = orders.message(&after).to("aggregates").publish();
        let driven = tokio::time::timeout(Duration::from_secs(30), publish).await;
        assert!(
            matches!(driven, Ok(Ok(()))),
            "fan-out {fan_out}: the harness still waits ({driven:?}), having handled {:?}",
            handled.0.lock().unwrap()
        );
        assert_eq!(
            *handled.0.lock().unwrap(),
            ["user-0", "user-1", "user-1", "user-2", "after"],
            "fan-out {fan_out}"
        );
        tb.shutdown().await.unwrap();
    }
}

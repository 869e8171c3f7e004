//! The lease around the reading: the first renewal counts from the take, a delivery whose lease
//! ran out before its handler started never reaches it, and nothing of a shard is written after
//! its release.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use ruststream::{ConnectedBroker, IncomingMessage};

use super::{Recording, Rig, RigSettings, next, stop};
use crate::LeaseStore;
use crate::doubles::fake_kinesis::Reply;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_renewal_counts_from_the_take() {
    let store = Arc::new(Recording::default());
    let iterators = AtomicUsize::new(0);
    let rig = Rig::start(
        RigSettings {
            store: store.clone(),
            ..RigSettings::default()
        },
        // The take's iterator takes 1.5 s to come: longer than the renewal interval.
        move |_, operation, _| {
            (operation == "GetShardIterator" && iterators.fetch_add(1, Ordering::SeqCst) == 0)
                .then_some(Reply::Stream(Duration::from_millis(1500)))
        },
    )
    .await;
    tokio::time::sleep(Duration::from_millis(3000)).await;
    let calls = store.calls_of("rig");
    let take = calls
        .iter()
        .find(|call| call.operation == "acquire")
        .expect("the take");
    assert!(
        calls.iter().all(|call| call.operation != "release"),
        "the take failed: {calls:#?}"
    );
    let renewal = calls
        .iter()
        .find(|call| call.operation == "renew")
        .expect("a renewal within 3 s of the take");
    let after = renewal.started.duration_since(take.started);
    // Due a renewal interval (1 s) after the take, sent as soon as the reader runs (1.5 s);
    // counted from the reader's start it would come at 2.5 s.
    assert!(
        after < Duration::from_millis(2000),
        "the first renewal came {after:?} after the take: {calls:#?}"
    );
    drop(rig.sub);
    rig.connected.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_whose_lease_ran_out_before_its_handler_started_never_reaches_it() {
    let (rig, store) = Rig::recorded(2).await;
    let mut sub = rig.sub;
    // Pulled by the runtime and waiting in a lane behind a slow handler, while the store is
    // unreachable and the 3 s lease runs out.
    let waiting = next(&mut sub).await;
    store.fail_renewals.store(true, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(3500)).await;
    let withheld = waiting
        .decode_error()
        .expect("a delivery whose lease ran out is withheld from its handler");
    // Whichever saw it first, the keeper (its retries ran out) or the delivery (its lease ran
    // out by the clock), the shard stopped.
    let why = withheld.to_string();
    assert!(why.contains("ran out") || why.contains("stopped"), "{why}");
    drop(waiting);
    stop(sub, rig.connected).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_of_a_shard_is_written_after_its_release() {
    let store = Arc::new(Recording::default());
    *store.write_delay.lock().unwrap() = Duration::from_millis(100);
    let rig = Rig::start(
        RigSettings {
            records: 60,
            store: store.clone(),
            ..RigSettings::default()
        },
        |_, _, _| None,
    )
    .await;
    let mut sub = rig.sub;
    let mut pulled = Vec::new();
    for _ in 0..60 {
        pulled.push(next(&mut sub).await);
    }
    // Handlers go on settling while the subscription stops: its final checkpoint and release
    // race the checkpoint writer.
    let settling = tokio::spawn(async move {
        for message in pulled {
            // Once the shard was handed back an acknowledgement is refused, not lost silently.
            if let Err(ruststream::AckError::Broker(err)) = message.ack().await {
                assert!(
                    err.to_string()
                        .contains("after this instance stopped reading"),
                    "{err}"
                );
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    });
    tokio::time::sleep(Duration::from_millis(150)).await;
    drop(sub);
    settling.await.unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let calls = store.calls_of("rig");
    let release = calls
        .iter()
        .find(|call| call.operation == "release")
        .expect("the stopping reader released the shard");
    for call in &calls {
        assert!(
            call.operation == "release" || call.ended <= release.started,
            "a {} of the shard ran past its release: {calls:#?}",
            call.operation
        );
    }
    // One write of the shard in flight at a time: the store sees them in the order they were
    // sent, so no renewal lands behind a later checkpoint and moves the expiry back.
    let mut writes: Vec<_> = calls
        .iter()
        .filter(|call| call.operation != "acquire")
        .collect();
    writes.sort_by_key(|call| call.started);
    for pair in writes.windows(2) {
        assert!(
            pair[0].ended <= pair[1].started,
            "a {} was sent while a {} was in flight: {writes:#?}",
            pair[1].operation,
            pair[0].operation
        );
    }
    rig.connected.shutdown().await.unwrap();
}

/// Notes when each delivery reached it, and takes its time.
struct Slow(Arc<std::sync::Mutex<Vec<std::time::Instant>>>);

impl ruststream::prelude::Handle<String> for Slow {
    async fn handle(
        &self,
        _body: &String,
        _outs: &(),
        _ctx: &mut ruststream::prelude::Context<'_>,
    ) -> Result<(), ruststream::prelude::HandlerOutcome> {
        self.0.lock().unwrap().push(std::time::Instant::now());
        tokio::time::sleep(Duration::from_millis(1200)).await;
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_handler_starts_after_the_lease_ran_out_behind_keyed_worker_lanes() {
    use ruststream::prelude::*;
    let store = Arc::new(Recording::default());
    // Every renewal (and checkpoint, which renews) fails from the start: the 3 s lease taken at
    // the start may be used for 2.7 s.
    store.fail_renewals.store(true, Ordering::SeqCst);
    let state = crate::doubles::fake_stream::stream(1);
    for n in 0..10 {
        state.lock().unwrap().append(
            0,
            serde_json::to_vec(&format!("order {n}"))
                .unwrap()
                .as_slice(),
        );
    }
    let key = crate::LeaseKey::new("orders", "shardId-000000000000");
    store
        .acquire_from(&key, "seed", Duration::from_secs(1), "TRIM_HORIZON")
        .await
        .unwrap();
    store.release(&key, "seed").await.unwrap();
    let (config, _) = crate::doubles::fake_stream::config(&state, |_, _, _| None);
    let starts = Arc::new(std::sync::Mutex::new(Vec::new()));
    let handler = Slow(Arc::clone(&starts));
    let broker = crate::KinesisBroker::from_config(config)
        .lease_store(store.clone())
        .owner_id("rig")
        .lease_timings(super::timings());
    let app = RustStream::new(AppInfo::new("lanes", "0.1.0")).with_broker(broker, move |b| {
        b.include_router(
            Router::new()
                .include(subscriber(crate::KinesisStream::new("orders"), handler).build())
                .workers(ruststream::runtime::Workers::keyed(
                    std::num::NonZeroUsize::new(2).unwrap(),
                )),
        );
    });
    let running = app.start().await.unwrap();
    // Taken; from now on the store cannot be reached at all, so the shard is not taken again
    // when its lease runs out.
    store.fail_takes.store(true, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(6)).await;
    running.shutdown().await.unwrap();
    let takes: Vec<std::time::Instant> = store
        .calls_of("rig")
        .into_iter()
        .filter(|call| call.operation == "acquire" && call.ok)
        .map(|call| call.started)
        .collect();
    let starts = starts.lock().unwrap();
    assert!(
        starts.len() >= 2,
        "the lanes handled {} deliveries",
        starts.len()
    );
    let usable = super::timings().lease() - Duration::from_millis(300);
    for start in starts.iter() {
        let take = takes
            .iter()
            .rev()
            .find(|take| *take <= start)
            .expect("a take before every delivery");
        assert!(
            start.duration_since(*take) < usable,
            "a handler started {:?} after its take, past the lease's {usable:?}",
            start.duration_since(*take)
        );
    }
}

/// The real drivers on a paused clock (tokio's, which every driver reads through
/// `crate::clock`): a held shard with nothing to read renews once per renewal interval counted
/// from its take, no more and no less, over ten virtual minutes that pass in moments.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn on_a_paused_clock_the_real_drivers_renew_once_per_interval() {
    let store = Arc::new(Recording::default());
    let rig = Rig::start(
        RigSettings {
            store: store.clone(),
            timings: crate::LeaseTimings::default(),
            ..RigSettings::default()
        },
        |_, _, _| None,
    )
    .await;
    // Renewals fall due at 3 s, 6 s, ... after the take: 200 of them within 600.5 s.
    tokio::time::sleep(Duration::from_millis(600_500)).await;
    let renewals = store
        .calls_of("rig")
        .iter()
        .filter(|call| call.operation == "renew")
        .count();
    assert_eq!(renewals, 200, "{:#?}", store.calls_of("rig"));
    stop(rig.sub, rig.connected).await;
}

//! The instance's pause for an earlier run under its owner id is held by the subscription that
//! found it, and ends with it.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use ruststream::{IncomingMessage, Subscriber, SubscriptionSource};

use super::{PATIENCE, Rig, next, next_within, stop};
use crate::coordinator::twins::Incarnation;
use crate::{KinesisError, KinesisPosition, KinesisStream, epoch_millis};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscription_dropped_while_it_holds_the_instance_paused_lets_the_others_read() {
    let rig = Rig::with_records(0).await;
    let mut refunds = KinesisStream::new("refunds")
        .initial_position(KinesisPosition::TrimHorizon)
        .subscribe(&rig.connected)
        .await
        .expect("the refunds subscription opens");
    // An earlier run under the owner id, alive, on the orders stream alone: it writes its record
    // in the orders notice again and again.
    let store = Arc::clone(&rig.store);
    let earlier = tokio::spawn(async move {
        let run = Incarnation::new(1, 1);
        loop {
            store
                .announce("orders", "rig", &run.record(epoch_millis()), &[])
                .await
                .expect("the memory store records it");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    });
    let mut orders = rig.sub;
    let said = {
        let mut stream = std::pin::pin!(orders.stream());
        tokio::time::timeout(PATIENCE, async {
            loop {
                match stream.next().await {
                    Some(Err(err @ KinesisError::OwnerIdInUse { .. })) => return err,
                    Some(_) => {}
                    None => panic!("the orders subscription ended"),
                }
            }
        })
        .await
        .expect("the orders subscription finds the earlier run")
    };
    assert!(said.to_string().contains("\"rig\""), "{said}");
    // The whole instance is paused: the refunds subscription reads nothing.
    tokio::time::sleep(Duration::from_secs(1)).await;
    rig.state.lock().unwrap().append(0, b"kept for later");
    assert!(
        next_within(&mut refunds, Duration::from_secs(3))
            .await
            .is_none(),
        "a paused instance reads nothing"
    );
    // The subscription that held the pause ends: the one left judges its own stream, where no
    // other run writes, and reads.
    drop(orders);
    let message = next(&mut refunds).await;
    assert_eq!(message.payload(), b"kept for later");
    earlier.abort();
    stop(refunds, rig.connected).await;
}

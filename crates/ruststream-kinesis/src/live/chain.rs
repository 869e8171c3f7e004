//! One subscription's chain of beats as its driver (`live/beat.rs`) last heard it, shared with
//! the coordinator's driver (which takes nothing while the chain does not count) and with the
//! readers' start (a shard just taken follows the chain from there).

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::clock::Instant;
use crate::lease::epoch_millis;
use crate::live::lock;
use crate::shard::lease::beat::BeatGrant;

/// One subscription's chain of beats as its driver last heard it, shared with the coordinator's
/// driver and the readers' start.
#[derive(Debug, Default)]
pub(crate) struct Beats {
    grant: Mutex<Option<BeatGrant<Instant>>>,
    /// Set once the coordinator's driver returned: no shard is taken any more.
    coordinator_exited: AtomicBool,
    /// Woken when a chain begins.
    began: Notify,
}

impl Beats {
    /// Whether the chain counts now: the coordinator may take shards.
    pub(crate) fn counts_now(&self) -> bool {
        lock(&self.grant).is_some_and(|grant| grant.counts_at(Instant::now(), epoch_millis()))
    }

    /// The chain as it stands; `None` before a beat answered.
    pub(crate) fn grant(&self) -> Option<BeatGrant<Instant>> {
        *lock(&self.grant)
    }

    /// A beat answered: the chain stands at `grant` (the beat's driver, under the lock of the
    /// running shards it hands it to).
    pub(crate) fn stand(&self, grant: BeatGrant<Instant>) {
        *lock(&self.grant) = Some(grant);
    }

    /// A chain began: whoever waits for one looks again.
    pub(crate) fn began(&self) {
        self.began.notify_waiters();
    }

    /// Whether the coordinator's driver returned.
    pub(crate) fn has_coordinator_exited(&self) -> bool {
        self.coordinator_exited.load(Ordering::Acquire)
    }

    /// The coordinator's driver returned: once every reader ended, the beat stops.
    pub(crate) fn coordinator_exited(&self) {
        self.coordinator_exited.store(true, Ordering::Release);
        self.began.notify_waiters();
    }

    /// Waits until a chain counts, at most `bound`, or until `cancel`: the first round takes
    /// shards only once this instance's beat stands, so that a subscription opened at the tip
    /// holds its shards before it is handed out. Past the bound it opens holding none, and
    /// takes them once a beat lands (a shard starting at the tip then starts at its take).
    pub(crate) async fn first_chain(&self, bound: Duration, cancel: &CancellationToken) {
        let waited = tokio::time::timeout(bound, async {
            loop {
                let began = self.began.notified();
                if self.counts_now() || self.has_coordinator_exited() || cancel.is_cancelled() {
                    return;
                }
                tokio::select! {
                    () = began => {}
                    () = cancel.cancelled() => return,
                }
            }
        })
        .await;
        if waited.is_err() {
            tracing::warn!(
                "no beat of this instance landed within {bound:?}: the subscription opens holding \
                 no shard, and takes them once a beat lands"
            );
        }
    }
}

//! Liveness by beat, live: the driver of one subscription's [`BeatLease`]. It writes the beat
//! when the machine says, hands back the answer, and gives the chain as it stands to every
//! shard the subscription holds ([`ShardHandle::follow_beat`](crate::shard::ShardHandle)) and
//! to the coordinator, which takes nothing while the chain does not count. The decisions are the
//! machine's, and the simulation runs the same machine (`simulation/beat.rs`).
//!
//! The beat goes on after the subscription is cancelled, until its coordinator exited and every
//! reader ended: a reader's final checkpoint and release are conditioned on its row alone, but
//! the shard delivers only while the chain counts.

use std::sync::Arc;
use std::time::Duration;

use crate::clock::Instant;
use crate::lease::epoch_millis;
use crate::live::chain::Beats;
use crate::live::lock;
use crate::live::subscription::Subscription;
use crate::live::upkeep::Upkeep;
use crate::shard::ShardHandle;
use crate::shard::lease::beat::{BeatAnswer, BeatGrant, BeatLease, BeatNews, BeatNext};

/// How often a cancelled subscription's beat looks whether its readers all ended.
const EXIT_CHECK: Duration = Duration::from_millis(50);

impl Subscription {
    /// A shard just taken follows the chain from here, as every held shard does: under the same
    /// lock as the driver's handing on, so no answer falls between.
    pub(super) fn follow_beats(&self, handle: &ShardHandle) {
        if let Some(beats) = &self.beats
            && let Some(grant) = beats.grant()
        {
            handle.follow_beat(&grant);
        }
    }

    /// The chain as it stands now goes to every held shard, then to the coordinator.
    fn hand_on(&self, beats: &Beats, grant: BeatGrant<Instant>) {
        let running = lock(&self.running);
        beats.stand(grant);
        for one in running.values() {
            one.handle.follow_beat(&grant);
        }
    }

    /// Whether the beat may stop: the coordinator exited and every reader ended.
    fn beat_done(&self, beats: &Beats) -> bool {
        beats.has_coordinator_exited() && lock(&self.running).is_empty()
    }
}

/// Runs `sub`'s beat until its coordinator exited and every reader ended; then removes it from
/// the notice (every row of this run was released or lost by then, and each run beats under an
/// owner of its own, so a beat left behind would only make the notice bigger, and each later
/// beat and read of it dearer, until the others forget it).
pub(crate) async fn run(sub: Arc<Subscription>) {
    let Some(beats) = sub.beats.as_ref() else {
        return;
    };
    let mut machine = BeatLease::new(sub.timings);
    // The end of the last beat written: the removal at the end takes no later one (a
    // subscription opened again in this run beats under the same owner).
    let mut last_until = 0;
    loop {
        if sub.beat_done(beats) {
            let left = sub
                .store
                .leave_beat(&sub.stream, &sub.owner, last_until)
                .await;
            if let Err(err) = left {
                tracing::debug!(stream = %sub.stream, owner = %sub.owner, error = %err, "removing this run's beat as it stops failed; the others forget it minutes after it lapsed");
            }
            return;
        }
        match machine.next(Instant::now(), epoch_millis()) {
            BeatNext::Send { until_ms } => {
                last_until = last_until.max(until_ms);
                let answered = sub.store.beat(&sub.stream, &sub.owner, until_ms, &[]).await;
                sub.upkeep(Upkeep::Beat, &answered);
                let answer = match &answered {
                    Ok(()) => BeatAnswer::Done,
                    // Refused before it was applied: it never lands.
                    Err(err) if err.is_throttled() => BeatAnswer::NotApplied,
                    Err(_) => BeatAnswer::Failed,
                };
                let news = machine.on_answer(Instant::now(), epoch_millis(), answer);
                if let Some(grant) = machine.grant() {
                    sub.hand_on(beats, grant);
                }
                match news {
                    Some(BeatNews::Began) => {
                        beats.began();
                        sub.wake.notify_one();
                    }
                    Some(BeatNews::Restarted) => {
                        tracing::warn!(
                            stream = %sub.stream,
                            owner = %sub.owner,
                            "this instance's beat had lapsed: every shard it held stopped \
                             delivering, and the other instances may have taken them; a new \
                             chain of beats begins and the shards are taken again (each stopped \
                             shard counts as an expired lease)"
                        );
                        beats.began();
                        sub.wake.notify_one();
                    }
                    Some(BeatNews::Quiet) => tracing::warn!(
                        stream = %sub.stream,
                        owner = %sub.owner,
                        "this instance's beats have failed for a whole lease with none counting \
                         (beats that land unanswered would keep it alive to the others while it \
                         reads nothing): it writes no beat for two leases, so that the others \
                         take its shards over, then tries again"
                    ),
                    Some(BeatNews::Failed) | None => {}
                }
            }
            BeatNext::Wait(until) => {
                let until = until.unwrap_or_else(|| Instant::now() + EXIT_CHECK);
                if sub.cancel.is_cancelled() {
                    // Stopping: look often whether the readers all ended.
                    tokio::time::sleep_until(until.min(Instant::now() + EXIT_CHECK)).await;
                } else {
                    tokio::select! {
                        () = tokio::time::sleep_until(until) => {}
                        () = sub.cancel.cancelled() => {}
                    }
                }
            }
        }
    }
}

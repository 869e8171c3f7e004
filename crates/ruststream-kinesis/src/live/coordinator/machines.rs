//! The coordinator's two machines, [`Rounds`] and [`Coordinator`], owned by its driver alone:
//! nothing else holds them, so no lock guards them. What the readers and the seeks tell the
//! coordinator reaches it as events ([`Heard`](crate::live::heard::Heard)), queued on the
//! subscription and applied, in the order told, each time the driver next uses it.

use std::sync::Arc;

use crate::clock::Instant;
use crate::coordinator::machine::Coordinator;
use crate::coordinator::rounds::Rounds;
use crate::live::subscription::Subscription;

/// The machines one subscription's coordinator driver runs.
#[derive(Debug)]
pub(crate) struct Machines {
    rounds: Rounds<Instant>,
    coordinator: Coordinator<Instant>,
    _exit: Exit,
}

/// Dropped with the machines, however their driver ended (it returned, its first round failed,
/// the caller that opened the subscription went away, or a task panicked): the subscription is
/// cancelled, so the readers it started stop and release, and its beat stops once they ended.
#[derive(Debug)]
pub(crate) struct Exit(Arc<Subscription>);

impl Exit {
    /// The end of `sub`'s coordinator, whenever it is dropped.
    pub(super) fn new(sub: &Arc<Subscription>) -> Self {
        Self(Arc::clone(sub))
    }
}

impl Drop for Exit {
    fn drop(&mut self) {
        self.0.cancel.cancel();
        if let Some(beats) = &self.0.beats {
            beats.coordinator_exited();
        }
    }
}

impl Machines {
    /// The machines of a coordinator that ends when `exit` is dropped, with them.
    pub(super) fn new(
        rounds: Rounds<Instant>,
        coordinator: Coordinator<Instant>,
        exit: Exit,
    ) -> Self {
        Self {
            rounds,
            coordinator,
            _exit: exit,
        }
    }

    /// Both machines, the coordinator with everything `sub`'s readers and seeks told it so far
    /// applied first: a reader's stop, told before its release is written, counts before any
    /// answer that shows the release.
    pub(super) fn both(
        &mut self,
        sub: &Subscription,
    ) -> (&mut Rounds<Instant>, &mut Coordinator<Instant>) {
        for heard in sub.told() {
            heard.apply(&mut self.coordinator);
        }
        (&mut self.rounds, &mut self.coordinator)
    }

    /// The coordinator, with what `sub`'s readers and seeks told it applied first.
    pub(super) fn coordinator(&mut self, sub: &Subscription) -> &mut Coordinator<Instant> {
        self.both(sub).1
    }

    /// The rounds, which hear nothing from outside.
    pub(super) fn rounds(&mut self) -> &mut Rounds<Instant> {
        &mut self.rounds
    }
}

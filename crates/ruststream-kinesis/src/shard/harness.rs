//! What a held shard tells `TestApp`'s harness in process (feature `testing`): each delivery it
//! hands out, settles, forgets or hands back, and when it has nothing left to do. From the
//! service a shard has no harness, and every call here does nothing.

#[cfg(feature = "testing")]
use std::sync::Arc;
#[cfg(feature = "testing")]
use std::sync::atomic::{AtomicU64, Ordering};

#[cfg(feature = "testing")]
use crate::kinesis::in_process::{Delivering, Tap};
#[cfg(feature = "testing")]
use crate::kinesis::iterator::ShardIterator;

/// A shard's link to the harness: its reader's tap on the in-process Kinesis, if any.
#[derive(Debug, Default)]
pub(crate) struct Harness {
    #[cfg(feature = "testing")]
    tap: Option<Arc<Tap>>,
    /// One past where the reader's enhanced fan-out subscription brings its next event from,
    /// once it waits for one; [`NO_EVENTS`] before, and after a seek or any other call (a
    /// fan-out reader holds no iterator to be quiet at). Set under the machine's lock; cleared
    /// at any moment, since forgetting a position only puts a release off.
    #[cfg(feature = "testing")]
    events_at: AtomicU64,
}

/// No fan-out subscription's position is known (the default).
#[cfg(feature = "testing")]
const NO_EVENTS: u64 = 0;

impl Harness {
    /// The harness of a reader with `tap`.
    #[cfg(feature = "testing")]
    pub(crate) fn of(tap: Option<Arc<Tap>>) -> Self {
        Self {
            tap,
            events_at: AtomicU64::new(NO_EVENTS),
        }
    }

    /// The reader's tap.
    #[cfg(feature = "testing")]
    pub(crate) fn tap(&self) -> Option<&Arc<Tap>> {
        self.tap.as_ref()
    }

    /// A delivery of `record`, read, is handed out (under the machine's lock).
    pub(crate) fn delivering_read(&self, record: &crate::delivery::record::Record) {
        #[cfg(feature = "testing")]
        if let Some(tap) = &self.tap {
            tap.delivering(if record.sub_sequence().is_none_or(|sub| sub == 0) {
                Delivering::FirstOfRecord
            } else {
                Delivering::RestOfRecord
            });
        }
        #[cfg(not(feature = "testing"))]
        let _ = record;
    }

    /// A record handed back is delivered again (under the machine's lock).
    pub(crate) fn delivering_again(&self) {
        #[cfg(feature = "testing")]
        if let Some(tap) = &self.tap {
            tap.delivering(Delivering::Again);
        }
    }

    /// A delivery settled, was forgotten or was handed back.
    pub(crate) fn settled(&self) {
        #[cfg(feature = "testing")]
        if let Some(tap) = &self.tap {
            tap.settled();
        }
    }

    /// A record handed back comes back now.
    pub(crate) fn coming_back(&self) {
        #[cfg(feature = "testing")]
        if let Some(tap) = &self.tap {
            tap.coming_back();
        }
    }

    /// A seek moved the shard's reading to `iterator` (under the machine's lock).
    #[cfg_attr(not(feature = "testing"), expect(clippy::unused_self))]
    pub(crate) fn moved_to(&self, iterator: &crate::kinesis::iterator::ShardIterator) {
        #[cfg(feature = "testing")]
        if let (Some(tap), Some((_, _, position))) = (&self.tap, iterator.in_process()) {
            // A subscription of the old position brings no more events.
            self.events_at.store(NO_EVENTS, Ordering::Relaxed);
            tap.moved_to(position);
        }
        #[cfg(not(feature = "testing"))]
        let _ = iterator;
    }

    /// The reader's fan-out subscription waits for its next event, from `position`; `None`:
    /// the reader has no subscription.
    #[cfg(feature = "testing")]
    pub(crate) fn events_at(&self, position: Option<u64>) {
        let stored = position.map_or(NO_EVENTS, |at| at.saturating_add(1));
        self.events_at.store(stored, Ordering::Relaxed);
    }

    /// The shard has nothing to do but wait for news, and reads on from `iterator`, or without
    /// one from where its fan-out subscription brings its next event (under the machine's
    /// lock): units no delivery took are let go if nothing lies past it.
    #[cfg(feature = "testing")]
    pub(crate) fn quiet_at(&self, iterator: Option<&ShardIterator>) {
        let Some(tap) = &self.tap else {
            return;
        };
        let position = match iterator {
            Some(iterator) => iterator.in_process().map(|(_, _, position)| position),
            None => self.events_at.load(Ordering::Relaxed).checked_sub(1),
        };
        if let Some(position) = position {
            tap.release_if_read_to(position);
        }
    }
}

impl super::ShardHandle {
    /// A record handed back with `ticket` at `now` comes back after `delay`: counted for the
    /// harness now when it comes back at once, else when its delay ran out on the harness's
    /// timers (a test advances the clock to see it), if it still waits for that moment then.
    pub(super) fn coming_back(
        &self,
        ticket: crate::watermark::Ticket,
        now: crate::clock::Instant,
        delay: std::time::Duration,
    ) {
        if delay.is_zero() {
            self.harness.coming_back();
            return;
        }
        #[cfg(feature = "testing")]
        if let Some(coordinator) = self.harness.tap().and_then(|tap| tap.coordinator()) {
            let me = self.me.clone();
            coordinator.schedule_redelivery(delay, move || {
                if let Some(handle) = me.upgrade() {
                    handle.count_due(ticket, now + delay);
                }
            });
        }
        #[cfg(not(feature = "testing"))]
        let _ = (ticket, now);
    }

    /// A handed-back record's delay ran out: counted if it still waits to come back at `due`
    /// (its own timer may have delivered it first, counted then; handed back again, it waits
    /// for a later moment, which a timer of its own counts).
    #[cfg(feature = "testing")]
    fn count_due(&self, ticket: crate::watermark::Ticket, due: crate::clock::Instant) {
        {
            let machine = self.lock();
            if machine.is_waiting(ticket, due) {
                self.harness.coming_back();
            }
        }
        self.handed_back.notify_one();
    }

    /// Records were written to the shard: a reader waiting at the tip for news reads again.
    #[cfg(feature = "testing")]
    pub(crate) fn news(&self) {
        self.lock().news();
    }

    /// The reader or the redelivery is about to wait: when the shard has nothing to do but wait
    /// for news, the harness lets go of what it counted for records no delivery will take.
    #[cfg(feature = "testing")]
    pub(crate) fn release_if_quiet(&self) {
        if self.harness.tap().is_none() {
            return;
        }
        self.let_go_if_quiet(&self.lock());
    }

    /// Under the machine's lock: when the shard has nothing to do but wait for news, the
    /// harness lets go of what it counted for records no delivery will take.
    #[cfg(feature = "testing")]
    fn let_go_if_quiet(
        &self,
        machine: &super::ShardMachine<crate::clock::Instant, crate::delivery::record::Record>,
    ) {
        if machine.is_quiet(crate::clock::Instant::now()) {
            self.harness.quiet_at(machine.iterator());
        }
    }

    /// The reader's fan-out subscription is about to wait for its next event, which it brings
    /// from `position` of the in-process shard: from there on, a quiet shard is quiet at it.
    /// `None`: the reader makes another call, which drops its subscription (so no later check
    /// takes a subscription's position that no longer holds).
    #[cfg(feature = "testing")]
    pub(crate) fn events_at(&self, position: Option<u64>) {
        if self.harness.tap().is_none() {
            return;
        }
        let Some(position) = position else {
            // Forgetting a position is safe at any moment: no lock.
            self.harness.events_at(None);
            return;
        };
        // One locked section: a seek (under the lock too) that came since the reader asked for
        // the event leaves the subscription's position unrecorded, so its reset stands.
        let machine = self.lock();
        if !machine.awaits_current_event() {
            return;
        }
        self.harness.events_at(Some(position));
        self.let_go_if_quiet(&machine);
    }
}

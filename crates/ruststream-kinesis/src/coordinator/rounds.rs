//! When a listing round or the handover poll runs, and the order of their calls, as a state
//! machine with no I/O and no clock of its own. Its driver (`coordinator::run`, and the first
//! round of a subscription) asks it what to do at `now`, makes the call it names, and hands back
//! the answer; the simulation does the same on a virtual clock. The decisions on the answers
//! are the [`Coordinator`]'s.
//!
//! - Between rounds it waits for the first of: the cancel (it ends), the listing deadline, a
//!   wake (a reader ended, a shard was marked skipped), the handover poll's deadline; when
//!   several are due they win in that order.
//! - A round lists the shards, reads the rows that matter (one `list` where the store can list
//!   and answers, else a read per row), and takes what is takeable, pass after pass while a pass
//!   marks shards skipped. The next listing is due a listing interval after the round began;
//!   after the first round, both deadlines count from its end.
//! - The poll reads the rows of the shards of the last listing that wait (nothing while none
//!   does) and starts a round when one of them is takeable now; a poll whose `list` fails, or
//!   that cannot read every row, does nothing.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use super::machine::{Coordinator, RoundPasses};
use super::plan::{Rows, TakeFor};
use crate::kinesis::api::ShardInfo;
use crate::lease::LeaseState;
use crate::shard::lease::Moment;

/// What the coordinator's driver does next.
#[derive(Debug)]
pub(crate) enum Step<T> {
    /// `ListShards`; answer with [`Rounds::listed`].
    ListShards,
    /// One `list` of the stream's rows; answer with [`Rounds::rows_listed`].
    ListRows,
    /// A read of each of these rows (in parallel); answer with [`Rounds::rows_read`].
    ReadRows(Vec<Arc<str>>),
    /// Take these shards (in parallel), each for its purpose; answer with [`Rounds::took`] once
    /// every take is over.
    Take(Vec<(ShardInfo, TakeFor)>),
    /// Nothing to do until this moment (`None`: until an answer), or a wake.
    Wait(Option<T>),
    /// Cancelled: the coordinator ends.
    Exit,
}

/// What `ListShards` answered.
#[derive(Debug)]
pub(crate) enum Shards {
    Listed(Vec<ShardInfo>),
    /// The stream does not exist (any more).
    StreamNotFound,
    Failed,
}

/// What a `list` of the stream's rows answered.
#[derive(Debug)]
pub(crate) enum Listed {
    /// The rows of the stream, by shard.
    Rows(Vec<(Arc<str>, LeaseState)>),
    /// The store cannot list: the rows are read one by one.
    Unsupported,
    Failed,
}

#[derive(Debug)]
enum Phase {
    Idle,
    /// A round is due: its `ListShards` goes out next.
    RoundDue,
    Listing,
    /// The rows `wanted` are to be listed (or being listed: `asked`), for a round of `listing`
    /// or for the poll.
    Rows {
        listing: Vec<ShardInfo>,
        wanted: Vec<Arc<str>>,
        poll: bool,
        asked: bool,
    },
    /// The rows `wanted` are to be read one by one (or being read: `asked`).
    Each {
        listing: Vec<ShardInfo>,
        wanted: Vec<Arc<str>>,
        poll: bool,
        asked: bool,
    },
    /// The rows were read: the next pass's takes go out.
    Passing(RoundPasses),
    Taking(RoundPasses),
}

/// When rounds and polls run, and where one is.
#[derive(Debug)]
pub(crate) struct Rounds<T> {
    listing_interval: Duration,
    poll_interval: Duration,
    next_listing: T,
    next_poll: T,
    woken: bool,
    cancelled: bool,
    /// Whether the first round is over.
    looping: bool,
    phase: Phase,
    /// The shards being read when the round or the poll began.
    reading: HashSet<Arc<str>>,
}

impl<T: Moment> Rounds<T> {
    /// A coordinator at `now`: its first round is due at once.
    pub(crate) fn new(listing_interval: Duration, poll_interval: Duration, now: T) -> Self {
        Self {
            listing_interval,
            poll_interval,
            next_listing: now,
            next_poll: now + poll_interval,
            woken: false,
            cancelled: false,
            looping: false,
            phase: Phase::RoundDue,
            reading: HashSet::new(),
        }
    }

    /// Something changed that a round should see now (a reader ended, a shard was marked).
    pub(crate) fn wake(&mut self) {
        self.woken = true;
    }

    /// The subscription is dropped or the broker shuts down: the coordinator ends once the
    /// round under way is over.
    pub(crate) fn cancel(&mut self) {
        self.cancelled = true;
    }

    /// Whether a poll is under way.
    #[cfg(test)]
    pub(crate) fn is_polling(&self) -> bool {
        matches!(
            self.phase,
            Phase::Rows { poll: true, .. } | Phase::Each { poll: true, .. }
        )
    }

    /// Whether a round is due at once (a poll found a shard to take).
    #[cfg(test)]
    pub(crate) fn is_round_due(&self) -> bool {
        matches!(self.phase, Phase::RoundDue)
    }

    /// Whether the first round is over.
    pub(crate) fn first_round_over(&self) -> bool {
        self.looping
    }

    /// What to do at `now`, `reading` the shards being read now.
    pub(crate) fn next(
        &mut self,
        coordinator: &mut Coordinator<T>,
        reading: &HashSet<Arc<str>>,
        owner: &str,
        now: T,
        now_ms: u64,
    ) -> Step<T> {
        match std::mem::replace(&mut self.phase, Phase::Idle) {
            Phase::Idle => {}
            Phase::RoundDue => return self.round(reading, now),
            phase @ (Phase::Listing | Phase::Taking(_)) => {
                self.phase = phase;
                return Step::Wait(None);
            }
            Phase::Rows {
                listing,
                wanted,
                poll,
                asked,
            } => {
                self.phase = Phase::Rows {
                    listing,
                    wanted,
                    poll,
                    asked: true,
                };
                return if asked {
                    Step::Wait(None)
                } else {
                    Step::ListRows
                };
            }
            Phase::Each {
                listing,
                wanted,
                poll,
                asked,
            } => {
                let step = if asked {
                    Step::Wait(None)
                } else {
                    Step::ReadRows(wanted.clone())
                };
                self.phase = Phase::Each {
                    listing,
                    wanted,
                    poll,
                    asked: true,
                };
                return step;
            }
            Phase::Passing(mut passes) => {
                let to_take = passes.next(coordinator, &self.reading, owner, now, now_ms);
                if !to_take.is_empty() {
                    self.phase = Phase::Taking(passes);
                    return Step::Take(to_take);
                }
                self.round_over(now);
            }
        }
        if self.cancelled {
            return Step::Exit;
        }
        if now >= self.next_listing || std::mem::take(&mut self.woken) {
            return self.round(reading, now);
        }
        let polling = !self.poll_interval.is_zero();
        if polling && now >= self.next_poll {
            self.next_poll = now + self.poll_interval;
            let wanted = coordinator.poll_wanted(reading);
            if !wanted.is_empty() {
                self.reading = reading.clone();
                self.phase = Phase::Rows {
                    listing: Vec::new(),
                    wanted,
                    poll: true,
                    asked: true,
                };
                return Step::ListRows;
            }
        }
        Step::Wait(Some(if polling {
            self.next_listing.min(self.next_poll)
        } else {
            self.next_listing
        }))
    }

    fn round(&mut self, reading: &HashSet<Arc<str>>, now: T) -> Step<T> {
        self.woken = false;
        self.next_listing = now + self.listing_interval;
        self.reading = reading.clone();
        self.phase = Phase::Listing;
        Step::ListShards
    }

    fn round_over(&mut self, now: T) {
        self.phase = Phase::Idle;
        if !self.looping {
            self.looping = true;
            self.next_listing = now + self.listing_interval;
            self.next_poll = now + self.poll_interval;
        }
    }

    /// `ListShards` answered.
    pub(crate) fn listed(&mut self, coordinator: &mut Coordinator<T>, shards: Shards, now: T) {
        if !matches!(self.phase, Phase::Listing) {
            // Not asked for: nothing changes.
            return;
        }
        let listing = match shards {
            Shards::Listed(listing) => listing,
            Shards::StreamNotFound => {
                coordinator.stream_not_found();
                return self.round_over(now);
            }
            Shards::Failed => return self.round_over(now),
        };
        coordinator.listed(&listing);
        let wanted = coordinator.wanted(&listing, &self.reading);
        if wanted.is_empty() {
            return self.rows_of_round(coordinator, listing, Rows::new(), &HashSet::new());
        }
        self.phase = Phase::Rows {
            listing,
            wanted,
            poll: false,
            asked: false,
        };
    }

    /// The `list` of the stream's rows answered.
    pub(crate) fn rows_listed(
        &mut self,
        coordinator: &mut Coordinator<T>,
        listed: Listed,
        owner: &str,
        now: T,
        now_ms: u64,
    ) {
        if !matches!(self.phase, Phase::Rows { asked: true, .. }) {
            // Not asked for: nothing changes.
            return;
        }
        let Phase::Rows {
            listing,
            wanted,
            poll,
            ..
        } = std::mem::replace(&mut self.phase, Phase::Idle)
        else {
            unreachable!("checked above");
        };
        match listed {
            Listed::Rows(listed) => {
                let mut rows: Rows = wanted
                    .iter()
                    .map(|shard| (Arc::clone(shard), None))
                    .collect();
                for (shard, row) in listed {
                    rows.insert(shard, Some(row));
                }
                if poll {
                    self.poll_rows(coordinator, rows, owner, now, now_ms);
                } else {
                    self.rows_of_round(coordinator, listing, rows, &HashSet::new());
                }
            }
            // A failed poll does nothing; a round reads row by row (which names what is wrong).
            Listed::Failed if poll => {}
            Listed::Failed | Listed::Unsupported => {
                self.phase = Phase::Each {
                    listing,
                    wanted,
                    poll,
                    asked: false,
                };
            }
        }
    }

    /// The reads of each row answered: `rows`, and the shards whose row could not be read.
    pub(crate) fn rows_read(
        &mut self,
        coordinator: &mut Coordinator<T>,
        rows: Rows,
        unreadable: &HashSet<Arc<str>>,
        owner: &str,
        now: T,
        now_ms: u64,
    ) {
        if !matches!(self.phase, Phase::Each { asked: true, .. }) {
            // Not asked for: nothing changes.
            return;
        }
        let Phase::Each { listing, poll, .. } = std::mem::replace(&mut self.phase, Phase::Idle)
        else {
            unreachable!("checked above");
        };
        if !poll {
            self.rows_of_round(coordinator, listing, rows, unreadable);
        } else if unreadable.is_empty() {
            self.poll_rows(coordinator, rows, owner, now, now_ms);
        }
    }

    fn rows_of_round(
        &mut self,
        coordinator: &mut Coordinator<T>,
        listing: Vec<ShardInfo>,
        mut rows: Rows,
        unreadable: &HashSet<Arc<str>>,
    ) {
        coordinator.round_rows(&listing, &mut rows);
        self.phase = Phase::Passing(RoundPasses::new(listing, rows, unreadable));
    }

    fn poll_rows(
        &mut self,
        coordinator: &mut Coordinator<T>,
        rows: Rows,
        owner: &str,
        now: T,
        now_ms: u64,
    ) {
        if coordinator.poll_finds_takeable(rows, &self.reading, owner, now, now_ms) {
            self.phase = Phase::RoundDue;
        }
    }

    /// Every take of the pass is over.
    pub(crate) fn took(&mut self, coordinator: &Coordinator<T>, now: T) {
        if !matches!(self.phase, Phase::Taking(_)) {
            // Not asked for: nothing changes.
            return;
        }
        let Phase::Taking(mut passes) = std::mem::replace(&mut self.phase, Phase::Idle) else {
            unreachable!("checked above");
        };
        if passes.passed(coordinator) {
            // Shards were marked never to be read: their children are decided at once.
            self.phase = Phase::Passing(passes);
        } else {
            self.round_over(now);
        }
    }
}

#[cfg(test)]
mod tests;

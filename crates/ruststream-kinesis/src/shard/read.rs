//! How one held shard is read, as state with no I/O and no clock of its own: which call comes
//! next (`GetRecords` with the current iterator, or `GetShardIterator` for a fresh one), when it
//! may go out (five calls per second per shard; once per poll interval at the tip; a jittered
//! backoff after a throttled or failed call), the batch a call answered waiting to be handed
//! out, a seek to apply, and why reading stops. [`ShardMachine`](super::ShardMachine) holds it
//! beside the shard's lease and watermark, which decide whether a record may be handed out, and
//! feeds it the answers; the reader task and the simulation execute what it asks.
//!
//! The rules:
//!
//! - a shard is finished only when `GetRecords` answers without a next iterator (closed, and
//!   read to its end); a missing iterator is not an end: after [`ITERATOR_TRIES`] refused fresh
//!   iterators in a row the shard is handed back unread ([`Stop::Unreadable`]);
//! - a fresh iterator starts after the last record handed out, or, when none was since the take
//!   or the last seek, where the shard resumes: its checkpoint, or the start its first owner
//!   recorded (a tip opened once stays that moment, never a later tip);
//! - a seek replaces the iterator, the batch and the resume position at once; an answer to a
//!   call sent before it is dropped.
//!
//! With enhanced fan-out ([`ReadSettings::fan_out`]) the shard is read from a subscription
//! (`SubscribeToShard`) instead, whose events the driver hands in one at a time, as it would
//! answers of `GetRecords`, when the window has room:
//!
//! - a subscription starts after the last record handed out or the last event's continuation
//!   sequence number, whichever lies further on, or where the shard resumes; so one that ends
//!   (after five minutes, or on an error) is renewed with no gap and no duplicate;
//! - a refused or failed subscription (`ResourceInUseException` among them: a new one within
//!   seconds of the last, or a previous holder still subscribed) is tried again after a jittered
//!   backoff, and subscriptions are at least [`Pace::subscribe_gap`] apart (the service's
//!   limit);
//! - the end of a shard comes from an event that names child shards; where none does (the local
//!   engine), an empty event of a shard the listing shows closed has the end confirmed by
//!   `GetRecords`, which reads the rest of the shard.

use std::time::Duration;

use super::lease::{Close, Moment};
use crate::SharedStr;
use crate::kinesis::iterator::ShardIterator;
use crate::settings::position::ShardStart;
use crate::shard::pace::{self, MIN_CALL_GAP, Pace, TipWait, backoff_ceiling};

/// How many fresh iterators in a row Kinesis may refuse before the reader hands its shard back
/// (with the backoff between tries, about half a minute).
pub(crate) const ITERATOR_TRIES: u32 = 10;

/// A record as the shard machine holds it: the reader's decoded [`Record`](crate::delivery::record::Record)
/// in the driver, a place in a simulated shard in tests.
pub(crate) trait Sequenced {
    /// Its sequence number: what a checkpoint of it records.
    fn sequence(&self) -> &SharedStr;

    /// For a user record of a KPL aggregate, its index there.
    fn sub_sequence(&self) -> Option<u64> {
        None
    }

    /// Whether no user record of its aggregate follows it (a plain record ends its own).
    fn ends_record(&self) -> bool {
        true
    }

    /// What a checkpoint through it records: its sequence number, which covers a whole KPL
    /// aggregate, or for a user record that others of its aggregate follow the sequence number
    /// and its index ([`ShardStart::Within`]).
    // Inlined where a run's records are tracked, one call a record: a plain record's is a
    // clone of its sequence number, and its aggregate's text is made out of line.
    #[inline]
    fn checkpoint(&self) -> SharedStr {
        match self.sub_sequence() {
            Some(sub) if !self.ends_record() => {
                SharedStr::from(crate::lease::within_checkpoint(self.sequence(), sub))
            }
            _ => self.sequence().clone(),
        }
    }
}

impl Sequenced for crate::delivery::record::Record {
    #[inline]
    fn sequence(&self) -> &SharedStr {
        &self.sequence
    }

    #[inline]
    fn sub_sequence(&self) -> Option<u64> {
        crate::delivery::record::Record::sub_sequence(self)
    }

    #[inline]
    fn ends_record(&self) -> bool {
        self.ends_record
    }
}

/// How a shard's reading is set up.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ReadSettings {
    /// The most records one `GetRecords` call asks for.
    pub(crate) batch_size: u32,
    /// How soon calls follow one another.
    pub(crate) pace: Pace,
    /// How many deliveries the shard holds at most behind its oldest unsettled one before it
    /// stops reading ahead.
    pub(crate) window: usize,
    /// Read with enhanced fan-out (`SubscribeToShard`) rather than `GetRecords`.
    pub(crate) fan_out: bool,
}

impl ReadSettings {
    /// How the shards of the subscription `stream` describes are read; `fan_out` whether
    /// through an enhanced fan-out consumer; `pace` the service's, or pushed in process. A knob
    /// of how shards are read is a field of [`KinesisStream`](crate::KinesisStream) carried
    /// here, and read by this module.
    pub(crate) fn of(stream: &crate::KinesisStream, fan_out: bool, pushed: bool) -> Self {
        Self {
            batch_size: stream.batch_size,
            pace: if pushed {
                Pace::pushed()
            } else {
                Pace::service(stream.poll_interval)
            },
            window: stream.max_unsettled,
            fan_out,
        }
    }
}

/// A Kinesis call the reader is to make now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Call {
    /// `GetRecords` with this iterator.
    GetRecords(ShardIterator),
    /// `GetShardIterator` at this start.
    GetIterator(ShardStart),
    /// `SubscribeToShard` at this start (enhanced fan-out); it replaces the open subscription.
    Subscribe(ShardStart),
    /// The next event of the open subscription.
    NextEvent,
}

/// What a [`Call`] answered.
#[derive(Debug)]
pub(crate) enum Fetch<R> {
    /// `GetRecords` answered records (maybe none).
    Records {
        records: Vec<R>,
        /// `None` when the shard is closed and read to its end.
        next: Option<ShardIterator>,
        /// `MillisBehindLatest`, when told.
        millis_behind: Option<i64>,
    },
    /// `GetRecords` found its iterator expired.
    Expired,
    /// `GetRecords` was throttled, or failed (reported by the driver): backed off and sent again.
    Failed,
    /// The shard left the stream (trimmed, or the stream deleted).
    Gone,
    /// `GetShardIterator` answered this iterator.
    Iterator(ShardIterator),
    /// `GetShardIterator` failed (reported by the driver).
    IteratorFailed,
    /// `SubscribeToShard` opened a subscription.
    Subscribed,
    /// An event of the open subscription.
    Event {
        records: Vec<R>,
        /// Where a later subscription continues (after it), when told.
        continuation: Option<String>,
        /// `MillisBehindLatest`, when told.
        millis_behind: Option<i64>,
        /// The event names child shards: the shard is closed and this was its last event.
        ended: bool,
    },
    /// The subscription ended without an error (its five minutes ran out): subscribed again at
    /// once from where it got to.
    SubscriptionEnded,
}

/// Why a shard's reader stopped reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stop {
    /// Closed, read to its end, and every delivery settled.
    Ended,
    /// Shutdown, or the subscription dropped.
    Cancelled,
    /// The shard left the stream.
    Gone,
    /// No iterator could be had for a long while: handed back, and left alone for a backoff.
    Unreadable,
    /// The lease was lost, or ran out by this instance's clock: nothing more is written.
    Lost,
    /// A handoff: another instance asked for the shard, and the deliveries settled (or the
    /// drain ran out); the row is handed to it with the final checkpoint.
    HandedOver,
}

impl Stop {
    /// How the shard is handed back after this stop; `None` for a lost lease, which writes
    /// nothing.
    pub(crate) fn close(self) -> Option<Close> {
        match self {
            Stop::Ended => Some(Close::Finished),
            Stop::Lost => None,
            Stop::Cancelled | Stop::Gone | Stop::Unreadable => Some(Close::Release),
            Stop::HandedOver => Some(Close::HandOver),
        }
    }
}

/// Where the next call reads from.
#[derive(Debug)]
enum Cursor {
    Iterator(ShardIterator),
    /// A fresh iterator is wanted; `tries` of them failed in a row so far.
    Fresh {
        tries: u32,
    },
    /// Enhanced fan-out: a subscription is wanted.
    Subscribe,
    /// Enhanced fan-out: a subscription is open, and its events are read.
    Subscribed,
}

impl Cursor {
    /// Where reading starts from a position `iterator` was had at (a take's, or a seek's): the
    /// iterator, or with enhanced fan-out a subscription at that position (the iterator showed
    /// it readable).
    fn first(settings: &ReadSettings, iterator: ShardIterator) -> Self {
        if settings.fan_out {
            Self::Subscribe
        } else {
            Self::Iterator(iterator)
        }
    }
}

/// The call in flight, if any.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum InFlight {
    None,
    Sent,
    /// Sent before a seek: its answer is dropped.
    Stale,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
    Reading,
    /// Read to its end: waiting for every delivery to settle.
    Draining,
    Stopped,
}

/// What the last answer said beyond its records, applied once they are handed out.
#[derive(Debug)]
enum AfterBatch {
    /// `GetRecords`: the next iterator (`None`: read to its end), and whether at the tip.
    Records {
        next: Option<ShardIterator>,
        caught_up: bool,
    },
    /// A subscription's event.
    Event {
        continuation: Option<String>,
        /// It named child shards: the shard is read to its end.
        ended: bool,
        /// An empty event of a shard known closed: its end is confirmed by `GetRecords`.
        confirm_end: bool,
    },
}

/// The read side of one held shard.
#[derive(Debug)]
pub(crate) struct ReadState<T, R> {
    settings: ReadSettings,
    cursor: Cursor,
    resume: ShardStart,
    last_sequence: Option<SharedStr>,
    /// The last event's continuation sequence number (enhanced fan-out).
    continuation: Option<SharedStr>,
    /// The listing shows the shard closed (enhanced fan-out: its end is confirmed by polling).
    closed: bool,
    last_call: Option<T>,
    /// When the last subscription was asked for.
    last_subscribe: Option<T>,
    /// The open subscription sent an event.
    evented: bool,
    /// No call before this moment (a backoff, or the poll interval at the tip).
    not_before: Option<T>,
    /// At the tip under [`TipWait::UntilNews`]: no call until news of a write.
    quiet_tip: bool,
    failures: u32,
    /// The records read and not handed out yet, **last first**: the next one is at the back,
    /// where a `Vec` gives it up cheapest, and a run of the next ones leaves from the back in
    /// the order a run is taken in ([`take_records`](Self::take_records)). Reversed once, as
    /// an answer lands, rather than a run at a time as a run was taken; and not taken from a
    /// `VecDeque`'s front through its wrapping index.
    batch: Vec<R>,
    /// The batch's emptied buffer from before the last read (the records read stay in the
    /// `Vec` they came in, which became the batch), for the reader's next read to fill (a read
    /// of a few records then allocates nothing).
    spare: Vec<R>,
    /// Whether the last answer said records follow it (a full batch, or `MillisBehindLatest`
    /// above zero): the shard is behind its newest record.
    behind: bool,
    after: Option<AfterBatch>,
    phase: Phase,
    in_flight: InFlight,
    seek: Option<(ShardIterator, ShardStart)>,
    /// The user records already settled at the start, inside the aggregate it names (its
    /// sequence number, the last settled index): the first records read drop them.
    skip: Option<(SharedStr, u64)>,
    cancelled: bool,
    stop: Option<Stop>,
}

/// What the read side asks of the machine around it.
#[derive(Debug)]
pub(super) enum Want<R, T> {
    Call(Call),
    /// The next record of the batch, to hand out if the lease allows.
    Record(R),
    /// Read to its end: finished once every delivery settled.
    Drain,
    /// Nothing before `until` (or a wake); `room`: the window is full.
    Wait {
        until: Option<T>,
        room: bool,
    },
}

impl<T: Moment, R: Sequenced> ReadState<T, R> {
    /// A shard taken with its first `iterator`; later iterators with no record handed out start
    /// at `resume`.
    pub(super) fn new(settings: ReadSettings, iterator: ShardIterator, resume: ShardStart) -> Self {
        Self {
            settings,
            cursor: Cursor::first(&settings, iterator),
            skip: resume.within(),
            resume,
            last_sequence: None,
            continuation: None,
            closed: false,
            last_call: None,
            last_subscribe: None,
            evented: false,
            not_before: None,
            quiet_tip: false,
            failures: 0,
            batch: Vec::new(),
            spare: Vec::new(),
            behind: false,
            after: None,
            phase: Phase::Reading,
            in_flight: InFlight::None,
            seek: None,
            cancelled: false,
            stop: None,
        }
    }

    /// A seek resolved `iterator`; later iterators with no record handed out start at `resume`.
    /// Applied before the next call; the batch of the old position is dropped now. Whether the
    /// shard reads again from it (it did not stop).
    pub(super) fn seek(&mut self, iterator: ShardIterator, resume: ShardStart) -> bool {
        if self.phase == Phase::Stopped {
            return false;
        }
        self.batch.clear();
        self.after = None;
        if self.in_flight == InFlight::Sent {
            self.in_flight = InFlight::Stale;
        }
        self.seek = Some((iterator, resume));
        true
    }

    /// Whether reading stopped for good.
    pub(super) fn is_stopped(&self) -> bool {
        self.phase == Phase::Stopped
    }

    /// Whether reading drains: nothing more is read, what was read is handed out.
    pub(super) fn is_draining(&self) -> bool {
        self.phase == Phase::Draining
    }

    /// Whether the shard is read on.
    pub(super) fn is_reading(&self) -> bool {
        self.phase == Phase::Reading
    }

    /// Whether the reader was cancelled.
    pub(super) fn is_cancelled(&self) -> bool {
        self.cancelled
    }

    /// Why reading is to stop, once: taken by the machine that finishes it.
    pub(super) fn take_stop(&mut self) -> Option<Stop> {
        self.stop.take()
    }

    /// Reading stops for good: what was read and not handed out is dropped.
    pub(super) fn stopped(&mut self) {
        self.phase = Phase::Stopped;
        self.batch.clear();
    }

    /// Whether the call in flight waits for a subscription's next event.
    pub(super) fn awaits_event(&self) -> bool {
        self.in_flight != InFlight::None && matches!(self.cursor, Cursor::Subscribed)
    }

    /// Whether the call in flight waits for the current subscription's next event: sent since
    /// the last seek, and no seek waits to be applied.
    #[cfg(feature = "testing")]
    pub(super) fn awaits_current_event(&self) -> bool {
        self.in_flight == InFlight::Sent
            && matches!(self.cursor, Cursor::Subscribed)
            && self.seek.is_none()
    }

    /// Whether records wait: read and not handed out yet, or behind the last answer.
    pub(super) fn records_wait(&self) -> bool {
        !self.batch.is_empty() || self.behind
    }

    /// Whether a seek arrived that reading has not applied yet.
    pub(super) fn seek_pending(&self) -> bool {
        self.seek.is_some()
    }

    /// Applies a seek that arrived, if one did.
    pub(super) fn apply_seek(&mut self) {
        let Some((iterator, resume)) = self.seek.take() else {
            return;
        };
        self.cursor = Cursor::first(&self.settings, iterator);
        self.skip = resume.within();
        self.resume = resume;
        self.last_sequence = None;
        self.continuation = None;
        self.not_before = None;
        self.quiet_tip = false;
        self.failures = 0;
        self.phase = Phase::Reading;
    }

    /// The iterator the next `GetRecords` reads from, when it has one.
    #[cfg(feature = "testing")]
    pub(super) fn iterator(&self) -> Option<&ShardIterator> {
        match &self.cursor {
            Cursor::Iterator(iterator) => Some(iterator),
            _ => None,
        }
    }

    /// Records were written to the shard: a reader waiting at the tip for news reads again.
    pub(super) fn news(&mut self) {
        self.quiet_tip = false;
    }

    /// Whether reading waits on nothing but news or the next event: no call in flight but a
    /// subscription's next event, no seek to apply, nothing read and not handed out, no answer
    /// left to apply, not behind the shard's newest record, and not waiting for a moment to
    /// call again (a pace, a backoff). What a reader in process counts as done for now.
    pub(super) fn is_quiet(&self) -> bool {
        let idle = match self.in_flight {
            InFlight::None => self.quiet_tip,
            InFlight::Sent | InFlight::Stale => self.awaits_event(),
        };
        idle && self.phase == Phase::Reading
            && self.seek.is_none()
            && self.batch.is_empty()
            && self.after.is_none()
            && !self.behind
            && self.stop.is_none()
    }

    /// The reader was cancelled (shutdown, the subscription dropped): a call in flight was
    /// dropped with it.
    pub(super) fn cancel(&mut self) {
        self.cancelled = true;
        self.in_flight = InFlight::None;
    }

    /// The listing shows the shard closed.
    pub(super) fn shard_closed(&mut self) {
        self.closed = true;
    }

    /// Where a fresh iterator or a subscription starts: after the last record handed out or the
    /// last event's continuation, whichever lies further on, or where the shard resumes (which
    /// may drop the user records settled before it again).
    fn position(&mut self) -> ShardStart {
        let last = match (&self.last_sequence, &self.continuation) {
            (Some(a), Some(b)) => Some(if sequence_order(a, b).is_ge() { a } else { b }),
            (a, b) => a.as_ref().or(b.as_ref()),
        };
        match last {
            Some(last) => ShardStart::After(last.clone()),
            None => {
                self.skip = self.resume.within();
                self.resume.clone()
            }
        }
    }

    /// A record of the batch was handed out. The last of a batch is kept as a text kept for
    /// long is ([`SharedStr::to_keep`]): it may stay for long (a shard idle after a burst),
    /// and would keep a large fetch's whole string.
    pub(super) fn handed(&mut self, sequence: SharedStr) {
        self.last_sequence = Some(if self.batch.is_empty() {
            sequence.to_keep()
        } else {
            sequence
        });
    }

    /// The next record of the batch read when [`want`](Self::want) would hand it out now:
    /// nothing is in flight, and reading is not draining.
    #[inline]
    pub(super) fn next_record(&mut self) -> Option<R> {
        if self.in_flight != InFlight::None || self.phase == Phase::Draining {
            return None;
        }
        self.batch.pop()
    }

    /// The next records of the batch read, up to `most`, when [`want`](Self::want) would hand
    /// them out now one after another (none while a call is in flight or reading drains), into
    /// `into`, **last first** (taken from the back with `pop`, the next one first): the back of
    /// the batch, as it is kept.
    pub(super) fn take_records(&mut self, most: usize, into: &mut Vec<R>) {
        let ready = self.in_flight == InFlight::None && self.phase != Phase::Draining;
        let count = if ready { most.min(self.batch.len()) } else { 0 };
        into.extend(self.batch.drain(self.batch.len() - count..));
    }

    /// What reading wants next at `now`, with `room` for one more delivery in the window.
    pub(super) fn want(&mut self, now: T, room: bool) -> Want<R, T> {
        loop {
            if let Some(record) = self.next_record() {
                return Want::Record(record);
            }
            if self.in_flight != InFlight::None {
                return Want::Wait {
                    until: None,
                    room: false,
                };
            }
            if self.phase == Phase::Draining {
                return Want::Drain;
            }
            if let Some(after) = self.after.take() {
                self.batch_read(after);
                continue;
            }
            if let Some(at) = self.not_before
                && now < at
            {
                return Want::Wait {
                    until: Some(at),
                    room: false,
                };
            }
            if self.quiet_tip {
                return Want::Wait {
                    until: None,
                    room: false,
                };
            }
            return match self.next_call(now, room) {
                Ok(call) => {
                    self.in_flight = InFlight::Sent;
                    Want::Call(call)
                }
                Err(wait) => wait,
            };
        }
    }

    /// Every record of a batch was handed out: where the next read comes from.
    fn batch_read(&mut self, after: AfterBatch) {
        match after {
            // Closed, and read to its end: the only way a shard is finished.
            AfterBatch::Records { next: None, .. } | AfterBatch::Event { ended: true, .. } => {
                self.phase = Phase::Draining;
            }
            AfterBatch::Records {
                next: Some(next),
                caught_up,
            } => {
                self.cursor = Cursor::Iterator(next);
                if caught_up {
                    match self.settings.pace.tip {
                        // At the tip: one call per poll interval, counted from the last.
                        TipWait::Interval(interval) => {
                            self.not_before = self.last_call.map(|last| last + interval);
                        }
                        TipWait::UntilNews => self.quiet_tip = true,
                    }
                }
            }
            AfterBatch::Event {
                continuation,
                confirm_end,
                ..
            } => {
                if let Some(continuation) = continuation {
                    self.continuation = Some(SharedStr::from(continuation));
                }
                if confirm_end {
                    // The rest of a closed shard is read by polling, to its end.
                    self.cursor = Cursor::Fresh { tries: 0 };
                }
            }
        }
    }

    /// The call to make at `now` from where the cursor is, or how long to wait for it: the
    /// window's `room`, and the pacing of calls and subscriptions.
    fn next_call(&mut self, now: T, room: bool) -> Result<Call, Want<R, T>> {
        let wait_for = |until: Option<T>, room: bool| Err(Want::Wait { until, room });
        match &self.cursor {
            // Resume after the last record handed out (the last of its batch, so the last user
            // record of its aggregate), or where the shard resumes.
            Cursor::Fresh { .. } => Ok(Call::GetIterator(self.position())),
            Cursor::Subscribe => {
                if let Some(paced) = self
                    .last_subscribe
                    .map(|last| last + self.settings.pace.subscribe_gap)
                    && now < paced
                {
                    return wait_for(Some(paced), false);
                }
                self.last_subscribe = Some(now);
                Ok(Call::Subscribe(self.position()))
            }
            // Events are pushed: the next is read as soon as the window has room.
            Cursor::Subscribed if !room => wait_for(None, true),
            Cursor::Subscribed => Ok(Call::NextEvent),
            // What a shard holds while a record stays unsettled is bounded: no reading ahead
            // past the window.
            Cursor::Iterator(_) if !room => wait_for(None, true),
            Cursor::Iterator(iterator) => {
                if let Some(paced) = self
                    .last_call
                    .map(|last| last + self.settings.pace.call_gap)
                    && now < paced
                {
                    return wait_for(Some(paced), false);
                }
                let call = Call::GetRecords(iterator.clone());
                self.last_call = Some(now);
                Ok(call)
            }
        }
    }

    /// The call in flight answered `fetch` at `now`; `coin` draws the backoff's jitter.
    pub(super) fn answered(&mut self, now: T, fetch: Fetch<R>, coin: u64) {
        let sent = std::mem::replace(&mut self.in_flight, InFlight::None);
        if sent != InFlight::Sent {
            // Sent before a seek, or dropped by a cancel: the seek's position reads what
            // follows it.
            return;
        }
        match fetch {
            Fetch::Records {
                records,
                next,
                millis_behind,
            } => self.records_read(records, next, millis_behind),
            Fetch::Event {
                records,
                continuation,
                millis_behind,
                ended,
            } => self.event_read(records, continuation, millis_behind, ended),
            Fetch::Subscribed => {
                if matches!(self.cursor, Cursor::Subscribe) {
                    self.cursor = Cursor::Subscribed;
                    self.evented = false;
                }
            }
            // Five minutes of events: subscribed again at once. One that ended before its first
            // event is a failure like any other (a server that ends them at once is not
            // subscribed to again and again without a pause).
            Fetch::SubscriptionEnded if self.evented => {
                if matches!(self.cursor, Cursor::Subscribed) {
                    self.cursor = Cursor::Subscribe;
                }
            }
            Fetch::SubscriptionEnded | Fetch::Failed => {
                if matches!(self.cursor, Cursor::Subscribed | Cursor::Subscribe) && self.closed {
                    // A closed shard needs no subscription: the rest of it is read by polling,
                    // so one the service keeps refusing cannot keep its children waiting.
                    self.cursor = Cursor::Fresh { tries: 0 };
                } else if matches!(self.cursor, Cursor::Subscribed) {
                    self.cursor = Cursor::Subscribe;
                }
                self.failures += 1;
                self.not_before = Some(now + jittered(self.failures, coin));
            }
            Fetch::Expired => self.cursor = Cursor::Fresh { tries: 0 },
            Fetch::Gone => self.stop = Some(Stop::Gone),
            Fetch::Iterator(iterator) => self.cursor = Cursor::Iterator(iterator),
            Fetch::IteratorFailed => {
                let tries = match self.cursor {
                    Cursor::Fresh { tries } => tries + 1,
                    _ => 1,
                };
                if tries >= ITERATOR_TRIES {
                    self.stop = Some(Stop::Unreadable);
                } else {
                    self.cursor = Cursor::Fresh { tries };
                    self.not_before = Some(now + jittered(tries, coin));
                }
            }
        }
    }
}

impl<T, R: Sequenced> ReadState<T, R> {
    /// `GetRecords` answered `records`, the iterator `next` (none: the shard was read to its
    /// end) and how far behind the tip they are.
    fn records_read(
        &mut self,
        records: Vec<R>,
        next: Option<ShardIterator>,
        millis_behind: Option<i64>,
    ) {
        self.failures = 0;
        self.not_before = None;
        // The call's limit counts Kinesis records: an aggregate's user records are one.
        let returned = records
            .iter()
            .filter(|record| record.sub_sequence().is_none_or(|sub| sub == 0))
            .count();
        let caught_up = pace::caught_up(returned, self.settings.batch_size, millis_behind);
        self.behind = !caught_up;
        self.extend_batch(records);
        self.after = Some(AfterBatch::Records { next, caught_up });
    }

    /// A subscription's event brought `records`, the continuation to resubscribe from, how far
    /// behind the tip they are, and whether the shard ended.
    fn event_read(
        &mut self,
        records: Vec<R>,
        continuation: Option<String>,
        millis_behind: Option<i64>,
        ended: bool,
    ) {
        self.behind = millis_behind.is_some_and(|ms| ms > 0);
        self.evented = true;
        self.failures = 0;
        self.not_before = None;
        let confirm_end = self.closed && records.is_empty() && !ended;
        self.extend_batch(records);
        self.after = Some(AfterBatch::Event {
            continuation,
            ended,
            confirm_end,
        });
    }

    /// Queues `records` to be handed out, less the user records settled before the start.
    fn extend_batch(&mut self, mut records: Vec<R>) {
        if !records.is_empty()
            && let Some((sequence, through)) = self.skip.take()
        {
            records.retain(|record| {
                record.sequence().as_str() != &*sequence
                    || record.sub_sequence().is_none_or(|sub| sub > through)
            });
        }
        // Last first, as the batch keeps them.
        records.reverse();
        if self.batch.is_empty() {
            // Always so when an answer lands (a call goes out only once the batch is drained,
            // and a seek or a stop clears it): the records stay in the buffer they were decoded
            // into, and the batch's emptied buffer is the spare. Moved one by one, each record
            // (128 bytes) cost a copy more.
            self.spare = std::mem::replace(&mut self.batch, records);
            return;
        }
        // The new records go behind those waiting: in front of them, last first.
        records.append(&mut self.batch);
        self.spare = std::mem::replace(&mut self.batch, records);
    }

    /// The batch's emptied buffer from before the last read (an unallocated one when there was
    /// none, or when it was taken since).
    pub(super) fn take_spare(&mut self) -> Vec<R> {
        std::mem::take(&mut self.spare)
    }
}

/// The order of two sequence numbers of one shard: decimal numbers of up to 128 bits, longer
/// ones larger.
fn sequence_order(a: &str, b: &str) -> std::cmp::Ordering {
    a.len().cmp(&b.len()).then_with(|| a.cmp(b))
}

/// A wait after `failures` failed calls in a row: between the call gap and the backoff's
/// ceiling, where `coin` falls (full jitter, so readers of many shards do not retry in step).
fn jittered(failures: u32, coin: u64) -> Duration {
    let gap = u64::try_from(MIN_CALL_GAP.as_millis()).unwrap_or(u64::MAX);
    let ceiling = u64::try_from(backoff_ceiling(failures).as_millis()).unwrap_or(u64::MAX);
    Duration::from_millis(gap + coin % (ceiling - gap + 1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::delivery::record::Record;

    fn sequences(records: &[Record]) -> Vec<&str> {
        records.iter().map(|record| &*record.sequence).collect()
    }

    fn plain(sequences: &[&str]) -> Vec<Record> {
        sequences
            .iter()
            .map(|sequence| Record::plain(sequence, b""))
            .collect()
    }

    #[test]
    fn records_leave_in_the_order_read_and_an_answer_behind_waiting_ones_comes_after_them() {
        let mut read = ReadState::<Duration, Record>::new(
            ReadSettings {
                batch_size: 100,
                pace: Pace::service(Duration::from_secs(1)),
                window: 1000,
                fan_out: false,
            },
            ShardIterator::service("it-1"),
            ShardStart::At(crate::KinesisPosition::TrimHorizon),
        );
        read.extend_batch(plain(&["1", "2", "3"]));
        read.extend_batch(plain(&["4", "5"]));
        let first = read.next_record().expect("the first record read");
        assert_eq!(&*first.sequence, "1");
        let mut run = Vec::new();
        read.take_records(3, &mut run);
        assert_eq!(sequences(&run), ["4", "3", "2"], "a run, last first");
        run.clear();
        read.take_records(10, &mut run);
        assert_eq!(
            sequences(&run),
            ["5"],
            "what is left, however many are asked"
        );
        assert!(read.next_record().is_none() && !read.records_wait());
    }
}

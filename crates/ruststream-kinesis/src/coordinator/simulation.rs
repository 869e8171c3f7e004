//! A deterministic simulation of the coordinator and the lease protocol: thousands of
//! random schedules on a virtual clock, each checked against the protocol's invariants after
//! every event.
//!
//! # What runs for real, and what is modelled
//!
//! The decisions are the crate's own pure code: [`plan::rows_to_read`] and [`plan::verdict`]
//! choose what a listing round reads and takes and whether the handover poll between listings
//! starts a round; each session holds the real [`ShardMachine`], the machine the running
//! `ShardHandle` holds, which decides everything about a held shard: its reading (which
//! Kinesis call next, pacing, the poll interval at the tip, backoff, a fresh iterator after an
//! expired one, `ITERATOR_TRIES`, a seek applied, draining a shard read to its end, why reading
//! stops), every store write (renewals, retries, checkpoints folded at their cadence, one write
//! in flight, the final checkpoint or `SHARD_END` and the release), whether a record may still
//! be handed out, the watermark and the records handed back. The simulation drives it the way
//! the tokio drivers do: as `Reader::read` (asks it at `now`, answers the call it names from the
//! simulated stream a moment later, where an iterator is the index of the next record, hands
//! out the record it names or waits for room in the channel, sleeps until its timer or a wake,
//! drops the call in flight when cancelled), as `reader::write_lease` (sends the write it names,
//! hands back the answer) and as `reader::redeliver`. [`ShardStart::from_checkpoint`] /
//! [`ShardStart::to_checkpoint`] read and record where a shard starts, and
//! [`LeaseState::is_expired_at`] / [`LeaseState::is_held_by`] are the store's conditions. The
//! rest of the I/O is a model that follows `coordinator/mod.rs` (`round`,
//! `takeable_between_listings`, `take` with its start checkpoint, `reader_ended`, and the
//! `select!` of `run` over the cancel, the listing deadline, the wake and the poll, a random
//! ready branch winning as in tokio), `subscriber.rs` (the filter in front of the handlers) and
//! `broker.rs` (`register`: a new subscription to a stream waits for the previous one's tasks)
//! step by step, including the races between them (a write in flight while the reader
//! finishes, a reader blocked on a full channel, a coordinator whose `select!` picks a round
//! over its ready cancel).
//!
//! The world: 2 to 5 instances sharing one stream of 1 to 8 open shards that split and merge
//! (closed shards keep a finite record list, open ones grow as a producer writes), one lease
//! store, and per instance a bounded delivery channel and a pool of handlers that ack out of
//! order. Faults, during a chaos phase: store calls that fail (not applied), time out (applied or
//! not, the caller cannot tell) or answer late; an instance cut off from the store for a while;
//! Kinesis calls that fail (`ListShards`, `GetShardIterator`, `GetRecords`); crashes (for good, or
//! a restart under the same owner id or a fresh one); stalls (the whole process frozen, often for
//! longer than a lease, then resumed with its timers and answers arriving in random order);
//! graceful stops (the runtime drains its handlers, then drops the subscription), with or without
//! a restart; a subscription dropped and opened again in the same process under the same owner
//! id (a new subscription slot of the process, which shares its clock, stalls and partitions);
//! skewed wall clocks that may also step (NTP) within the bound. Lease timings
//! vary between the default (10 s / 3 s / 10 s listing) and shortened ones, the handover poll
//! between off, 0.5 s and 1 s, and the checkpoint cadence between 0, 1 s and 2.5 s. A quiet phase
//! follows: no more faults except at most one crash or graceful stop, with at least one instance
//! left, until every record is acked.
//!
//! A fix the simulation found is now the real code, behind a [`Config`] flag that a test turns
//! off to show that the checker still catches the old behaviour: the filter in front of the
//! handlers checks the lease by the clock (`filter_checks_lease`). Two others are now the
//! machine's by construction, and its own tests show them (`shard::lease::tests`): one write in
//! flight per shard (a renewal beside a renewing checkpoint could land first and move the
//! expiry back), and `SHARD_END` covering what is pending (a pending checkpoint written after
//! it moved the shard back). Two more are the read side's by construction
//! (`shard::machine::tests`): a shard whose fresh iterators keep failing is handed back, not
//! finished (taking the missing iterator for the end wrote `SHARD_END` for an open shard), and
//! a fresh iterator with no record handed out starts at the recorded start (resolving the tip
//! again skipped what arrived meanwhile).
//!
//! A fix the simulation led to in the I/O code is modelled in the main run, behind a
//! [`Config`] flag that a test sets back to the old code to show the violation it allowed:
//! `register` waits for the previous subscription's tasks until they ended
//! (`resubscribe_grace` off), as the real code now does. It used to stop waiting after
//! `SHUTDOWN_GRACE` (10 s), which a checkpoint write, the final checkpoint and the release can
//! each take a store timeout of, and the two subscriptions then share one owner id, which the
//! store's conditions cannot tell apart
//! (`a_resubscribe_that_stops_waiting_after_the_grace_breaks_fencing`).
//!
//! The runtime around the handlers is modelled too: it may hold a pulled delivery in a worker
//! lane for up to one and a half leases before the handler starts (`p_hold`), where the delivery
//! is checked against its lease again (`KinesisMessage::decode_error`, `handler_checks_lease`)
//! and a withheld one is forgotten, settling nothing; and a handler may hand its delivery back
//! (`nack(true)`, `retry_after`, dropped unsettled: `p_retry`), which comes back on the same
//! session unsettled meanwhile (through the machine's `hand_back` and `next_redelivery`), or is
//! forgotten by a stopped one. A `GetRecords` may fail (`p_kinesis`) or find its iterator
//! expired (`p_expire`), and a fresh iterator may fail (`p_iterator_fails`). A take whose `GetShardIterator` fails leaves its shard to a backoff of its own
//! (`take_backoff_ceiling`, the coordinator's own rule). A held write may land and lose its
//! answer while the SDK sends it again (`p_resend`): the counter the first attempt moved refuses
//! the resend, and the store recognises the refusal as the write's own success
//! (`lease::landed`, the rule `DynamoLeaseStore` uses).
//!
//! Where shards start and end is modelled too. The subscription's initial position is the
//! oldest record, the tip or a timestamp (`Config::initial`); records carry arrival times, and a
//! take records its start as `take` does (`ShardStart::to_checkpoint`: the tip as the moment
//! less the skew tolerance), which a fresh iterator with no record handed out starts from
//! (`Reader::resume`). The stream may be resharded before any instance starts, so closed shards
//! nobody read are marked `SHARD_SKIPPED` by a take (`plan::Verdict::Skip`, `TakeFor::Skipping`)
//! and their children wait for the mark, a round deciding again after a pass that marked some
//! until a pass marks nothing. Retention trims a closed shard some time after it closed
//! (`Config::retention`): it leaves the listing, its reads answer `ResourceNotFoundException`
//! (the reader releases it and the coordinator never takes it again, `Stop::Gone`); a child of
//! a parent trimmed without a row starts at the initial position, so under the tip what the
//! application owed of it before its first take is lost with the parent (counted as trimmed
//! unread). A row may be malformed for a while (`Config::malformed`): its
//! reads, its writes and the stream's `list` fail, a round then reads row by row (`read_rows`)
//! and leaves the shard and every descendant alone (`plan::held_back_by`). A handler may seek
//! its shard to a record a few before or after its own (`KinesisSeeker::seek`): the watermark
//! resets, records waiting to come back are dropped, deliveries of the old position are dropped
//! in front of their handlers, and the reader restarts at the target, a draining one included.
//!
//! Abstracted away: time inside a handler or the runtime other than the handler's own duration
//! and a lane's hold; rate drift of clocks (a 10 s lease at 100 ppm drifts by 1 ms) and a
//! monotonic clock that stops while the host is suspended (a stall here lets it run on, as a
//! frozen process's does); `ListShards` being stale; retention of the records of open shards
//! (only closed shards are trimmed, whole); throttling beyond a failed call; the bytes of
//! records; a store without `list` (the poll then reads row by row); malformed rows of other
//! streams (`DynamoLeaseStore` skips them: `lease::dynamo::tests`); seeks to a position Kinesis
//! refuses (nothing moves: `reader::tests::seek`) and to positions of every shard; the
//! read-ahead window (`max_unsettled`, unbounded here; `shard::machine::tests` and
//! `reader::tests` show it). Those paths are tested at the SDK boundary
//! (`reader::tests`) and live (`tests/faults_live.rs`, `tests/chaos.rs`).
//!
//! # The store model
//!
//! A take is conditioned on a new or unowned row, this owner id, or an expiry past by the
//! caller's clock; renewals, checkpoints and releases on this owner id and, with the counter
//! fence (`counter_fence`, on in the main run), on the `lease_counter` that this store object's
//! own last write left in the row, as `DynamoLeaseStore` does (`Fence`, `held_update`,
//! `settle_fence`): when an answer reaches the caller, a success records the counter the write
//! left (a granted take too), a failed call marks the row uncertain, a refusal keeps the
//! recorded counter; a held write refused by a row this owner still holds while it was
//! uncertain adopts the row's counter and is sent once more with the same values. Each
//! incarnation of each subscription slot has its own store object, so a restarted process (or
//! a new subscription) starts with no recorded counters.
//!
//! In the main run a held write whose call timed out may land any time up to three timeouts
//! after it was sent (`late_landing`), behind its caller's later writes or after a same-id
//! restart, which no longer waits for the old incarnation's held writes, only for its takes
//! (`Config::restart_wait`). Without the fence such a write moves a checkpoint or an expiry back
//! (`a_write_landing_after_its_timeout_moves_a_checkpoint_back`); with it no invariant breaks
//! (`late_writes_behind_the_counter_fence_keep_the_invariants`). A take is not
//! counter-conditioned; instead a take of a row the taker's owner holds must not move its expiry
//! back (`take_keeps_expiry`, as `TAKE_CONDITION` in `lease/dynamo.rs` now says), so takes land
//! late in the main run too (`late_takes_that_keep_the_expiry_keep_the_invariants`). With the
//! plain `lease_owner = :me` a take of the same owner id landing after a later one was granted
//! set the expiry back to its own send time and let another instance take the shard while the
//! holder still delivered (`a_take_landing_after_its_timeout_breaks_fencing_despite_the_counter_fence`).
//!
//! # Clock skew
//!
//! Each incarnation of an instance gets a wall-clock offset in `[-B/2, +B/2]`, so any two clocks
//! differ by at most `B = SKEW_TOLERANCE + holder_margin` (2 s with the default timings): the
//! documented tolerance. A holder whose renewal was sent at `s` stops at `s + lease - margin` by
//! its monotonic clock (true time here, no drift); a taker's condition `expiry + SKEW_TOLERANCE <
//! now` with `expiry = wall_holder(s) + lease` holds only after true time `s + lease +
//! SKEW_TOLERANCE - (off_taker - off_holder) >= s + lease - margin`. Offsets are drawn at the two
//! extremes a third of the time each, so the boundary is exercised; a test runs clocks skewed
//! beyond `B` and expects a fencing violation, showing the bound is tight and the check bites.
//!
//! # Invariants, checked after every event
//!
//! 1. Fencing. (a) The store accepts a renewal, checkpoint or release only from the session
//!    (instance incarnation and take) that holds the row: the owner-id condition is the real one,
//!    and the ghost check behind it also catches a same-id restart or an old session's write.
//!    (b) A take never succeeds while another live session may still deliver by its own clock
//!    (its last granted `sent + lease - margin` is in the future and it was not stopped); a
//!    grant is a take, a renewal or a checkpoint write (`checkpoint_and_renew`) the session
//!    heard succeed.
//!    (c) Every delivery (a record handed to a handler) is made by the session that holds the
//!    row at that instant, before `sent + lease - margin` of its last grant it heard of, and not
//!    after it heard of a refusal. So no two instances ever deliver from one shard in
//!    overlapping lease intervals, and none delivers after it learned, or should have learned by
//!    its own clock, that its lease is gone.
//! 2. Monotonic checkpoints: every accepted checkpoint is at or after the row's previous one
//!    (a recorded start below every sequence number, `SHARD_END` last), except that a session's
//!    seek may take it back, no further than its target; nothing is checkpointed over
//!    `SHARD_SKIPPED`.
//! 3. At least once: when the schedule ends (quiet phase, every instance healthy) every owed
//!    record was acked at least once. Owed, by the world's own bookkeeping: under `TRIM_HORIZON`
//!    every record; under a timestamp every record that arrived at or after it; under the tip
//!    every record of a shard from the moment the application reached it (first opened it, or a
//!    parent of it: then the whole shard, as its parent's reader hands it over); less the records
//!    a forward seek skipped and those retention trimmed unread (both counted).
//! 4. Order: each session delivers the records after its start position one by one with no gap;
//!    the first delivery of each record of a shard follows sequence order and passes over no
//!    owed record; a child's record is delivered only while every parent is at `SHARD_END`,
//!    marked `SHARD_SKIPPED` or trimmed; and no record read before a seek reaches a handler
//!    after the seek returned.
//! 5. Graceful: when a graceful stop's release lands, the row's checkpoint covers every record
//!    of the session's settled prefix (the runtime drained its handlers; a record handed back
//!    for a retry, and what follows it, is the next owner's to read again), and no record
//!    covered that way is ever delivered again, but after a seek back over it.
//! 6. Liveness (quiet phase, once the last faulty request could have landed): every shard that
//!    is not finished (nor skipped, nor trimmed) and whose parents are done (finished, marked
//!    skipped or trimmed) is held by a live, unstopped session again
//!    within `lease + SKEW_TOLERANCE + B + listing + 1 s` of losing its reader (the second is
//!    for round trips). With the handover poll on, the listing interval in that bound becomes
//!    one poll interval once every instance has listed the shard (a listing interval after it
//!    was made or the quiet phase began), as `LeaseTimings` documents. A plain `lease +
//!    listing` cannot hold exactly: a taker waits `SKEW_TOLERANCE` beyond the expiry, plus the
//!    skew between the clocks.
//! 7. No wedge: once every owed record is acked and no handler holds a delivery, and the
//!    checkpoints had a liveness bound plus a renewal period and a cadence to catch up, every
//!    open shard's checkpoint is at its last owed record and every closed shard the application
//!    reads is at `SHARD_END` (skipped and trimmed ones aside).
//!
//! Not an invariant but printed by the main test: how long graceful handovers take, from the
//! release landing to the next owner's take, its first record read and its first delivery (the
//! last includes the records ahead of it in the taker's channel and slow handlers), with the
//! handover poll on and off, worst over all and over quiet ones where another instance is up.
//!
//! # Running
//!
//! `cargo test -p ruststream-kinesis --lib coordinator::simulation` runs 1,000 schedules from a
//! random base seed on every core (`-- --nocapture` prints the counts and the handover times).
//! `SIM_SCHEDULES=n` runs `n`; `SIM_BASE_SEED=b` fixes the base; `SIM_SEED=s` replays one
//! schedule, and `SIM_TRACE=1` with it prints its whole trace (with `-- --nocapture`). A failure
//! panics with `seed=<s>`, the invariant, the schedule's settings and its last events.

use std::cmp::{Ordering, Reverse};
use std::collections::{BTreeMap, BinaryHeap, HashMap, HashSet, VecDeque};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering as Atomic};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::plan::{self, Rows, TakeFor, Verdict};
use crate::api::ShardInfo;
use crate::lease::LeaseState;
use crate::position::ShardStart;
use crate::shard::read::Sequenced;
use crate::shard::{
    Answer, Call, Close, Ending, Fetch, HandedBack, Lost, Next, ReadSettings, ReadStep, Redeliver,
    ShardLease, ShardMachine, Standing, Stop, Write,
};
use crate::watermark::Ticket;
use crate::{KinesisPosition, LeaseTimings, SHARD_END, SHARD_SKIPPED, SKEW_TOLERANCE};

/// Virtual true time since the start of a schedule; also every instance's monotonic clock.
type Time = Duration;

/// The wall clock's origin, in epoch milliseconds.
const BASE_MS: i64 = 1_700_000_000_000;
/// Open shards at most.
const MAX_OPEN: usize = 8;
/// Lines of trace a failure prints.
const TRACE_LINES: usize = 60;
/// Schedules per `cargo test` run unless `SIM_SCHEDULES` says otherwise.
const DEFAULT_SCHEDULES: u64 = 1_000;
/// `broker.rs`: how long a new subscription waits for the previous one's tasks.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// The wall-clock moment `after_ms` virtual milliseconds into a schedule, by a clock without skew
/// (Kinesis's arrival timestamps).
fn wall_time(after_ms: u64) -> std::time::SystemTime {
    std::time::UNIX_EPOCH + Duration::from_millis(BASE_MS.unsigned_abs() + after_ms)
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn secs(t: Time) -> String {
    format!("{:>8.3}", t.as_secs_f64())
}

/// The pairwise clock skew the protocol tolerates: the taker's `SKEW_TOLERANCE` plus the
/// holder's margin.
fn tolerated_skew(timings: &LeaseTimings) -> Duration {
    SKEW_TOLERANCE + timings.holder_margin()
}

/// A checkpoint's place in a shard: none, the start its first owner recorded before reading
/// (below every sequence number), after a sequence number, or the end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Mark {
    None,
    Start,
    Seq(u64),
    End,
}

impl Mark {
    fn of(checkpoint: Option<&str>) -> Self {
        match checkpoint {
            None => Self::None,
            Some(SHARD_END) => Self::End,
            // A start a first owner recorded (`ShardStart::to_checkpoint`): `TRIM_HORIZON`, or
            // the moment it opened the shard at the tip or at a timestamp.
            Some(checkpoint) => checkpoint.parse().map_or(Self::Start, Self::Seq),
        }
    }
}

/// The settings of one schedule.
#[derive(Debug, Clone)]
struct Config {
    timings: LeaseTimings,
    instances: usize,
    initial_shards: usize,
    /// How long faults happen; the quiet phase follows.
    chaos: Time,
    /// The pairwise bound of the wall-clock offsets.
    skew: Duration,
    p_fail: f64,
    p_timeout: f64,
    p_slow: f64,
    /// The store client's timeout: the longest a store call is in flight.
    timeout: Duration,
    p_kinesis: f64,
    write_gap_ms: (u64, u64),
    channel: usize,
    workers: usize,
    batch: usize,
    poll: Duration,
    reshards: usize,
    crashes: usize,
    stalls: usize,
    shutdowns: usize,
    partitions: usize,
    clock_steps: usize,
    quiet_fault: bool,
    /// Whether the filter in front of the handlers also checks the lease by the clock
    /// (`subscriber.rs`), or only the stopped flag (the bug it had, which a test pins).
    filter_checks_lease: bool,
    /// Subscriptions dropped and opened again in the same process (same owner id).
    resubscribes: usize,
    /// Whether a new subscription stops waiting for the previous one's tasks after
    /// `SHUTDOWN_GRACE` (`register` today), or waits until they ended (the fix proposed). Off in
    /// the main run: see `a_resubscribe_that_stops_waiting_after_the_grace_breaks_fencing`.
    resubscribe_grace: bool,
    /// Whether a timed-out call may land after its caller gave up (up to three timeouts after
    /// it was sent), behind the caller's later calls. Off in the main run: see
    /// `a_write_landing_after_its_timeout_moves_a_checkpoint_back`. On in the main run, where
    /// the counter fence keeps late writes out.
    late_landing: bool,
    /// Whether each incarnation's store object conditions its held writes on the counter its own
    /// last write left in the row (`Fence` in `lease/dynamo.rs`), or on the owner alone. On in
    /// the main run; a process restart gets a fresh store object, so it may start while the old
    /// incarnation's writes are still in flight.
    counter_fence: bool,
    /// Whether late landing includes takes. Without `take_keeps_expiry` one of an instance's own
    /// takes that lands after a later take of the same owner id (the same store object or a
    /// restarted process) is accepted and sets the expiry back to its own send time: see
    /// `a_take_landing_after_its_timeout_breaks_fencing_despite_the_counter_fence`. On in the main
    /// run, with `take_keeps_expiry`.
    late_takes: bool,
    /// Whether a take of a row the taker's owner holds must not move its expiry back
    /// (`lease_owner = :me AND lease_expiry <= :expiry` in `TAKE_CONDITION` of
    /// `lease/dynamo.rs`), so a late take of one's own is refused. On in the main run, which then
    /// lets takes land late too.
    take_keeps_expiry: bool,
    /// The chance that a handler hands its delivery back (`nack(true)`, a `retry_after`, a
    /// delivery dropped unsettled): it comes back on the same session, unsettled meanwhile.
    p_retry: f64,
    /// The chance that the runtime holds a pulled delivery in a worker lane for a while before
    /// its handler starts (a slow handler ahead of it, a batch gathering).
    p_hold: f64,
    /// Whether a delivery is checked against its shard's lease where its handler starts
    /// (`KinesisMessage::decode_error`), or only where the runtime pulled it (the gap the
    /// review found, which a test pins).
    handler_checks_lease: bool,
    /// The chance that a `GetRecords` call finds its iterator expired, and the chance that each
    /// try of the fresh iterator then fails (during the chaos phase).
    p_expire: f64,
    p_iterator_fails: f64,
    /// The chance that a held write lands and its answer is lost (a 5xx, a reset), and the SDK
    /// sends it again at once: the resend is refused by the counter the first attempt moved.
    p_resend: f64,
    /// Whether such a refusal is recognised as the write's own success (`lease::landed`), or
    /// taken for a lost lease (what `held_update` did before): a test pins it.
    recognise_landed: bool,
    /// Whether a handed-back delivery comes back to its session (`ShardHandle::hand_back`), or
    /// stays unsettled for good while the runtime publishes a copy of it that is handled
    /// elsewhere (what `nack(true)` answering `Unsupported` did before), which freezes the
    /// checkpoint: a test pins it.
    handed_back_comes_back: bool,
    /// Where shards this application never read start (`KinesisStream::initial_position`):
    /// the oldest record, the tip, or a timestamp.
    initial: KinesisPosition,
    /// How long after it closed a shard is trimmed out of the stream (retention), if at all.
    retention: Option<Duration>,
    /// Reshards before any instance starts: closed shards the application never read (skipped
    /// at the tip, read from a timestamp).
    early_reshards: usize,
    /// Rows made malformed for a while (an operator's edit, another tool), then repaired.
    malformed: usize,
    /// How many seeks handlers may make, and the chance that a finishing handler makes one.
    seeks: usize,
    p_seek: f64,
    /// Whether a delivery read before a seek is dropped in front of its handler (the filter's
    /// and `decode_error`'s generation check), or reaches it after the seek returned (item 13 of
    /// the review): a test pins it.
    seek_drops_stale: bool,
}

impl Config {
    /// How long after it was sent a store call may still land.
    fn request_lifetime(&self) -> Duration {
        if self.late_landing {
            self.timeout * 3
        } else {
            self.timeout
        }
    }

    /// How long a new incarnation waits after the old one died: until every take of the old one
    /// landed or timed out, and with neither the counter fence nor in-time takes, every request.
    fn restart_wait(&self) -> Duration {
        if self.counter_fence && (self.take_keeps_expiry || !self.late_takes) {
            self.timeout + ms(1)
        } else {
            self.request_lifetime() + ms(1)
        }
    }

    fn random(rng: &mut StdRng) -> Self {
        let timings = match rng.random_range(0..4) {
            0 => LeaseTimings::default(),
            1 => LeaseTimings::default().with_listing_interval(Duration::from_secs(2)),
            2 => LeaseTimings::new(Duration::from_secs(3), Duration::from_secs(1))
                .expect("valid timings")
                .with_listing_interval(Duration::from_secs(1)),
            _ => LeaseTimings::new(Duration::from_secs(6), Duration::from_secs(2))
                .expect("valid timings")
                .with_listing_interval(Duration::from_secs(3)),
        };
        let poll = [Duration::ZERO, ms(500), Duration::from_secs(1)][rng.random_range(0..3)];
        let cadence = [Duration::ZERO, Duration::from_secs(1), ms(2_500)][rng.random_range(0..3)];
        let timings = timings
            .with_handover_poll_interval(poll)
            .with_checkpoint_interval(cadence);
        let lease = timings.lease();
        let renew = timings.renew();
        let pick = |rng: &mut StdRng, options: &[f64]| options[rng.random_range(0..options.len())];
        Self {
            timings,
            instances: rng.random_range(2..=5),
            initial_shards: rng.random_range(1..=4),
            chaos: lease * rng.random_range(4..=8),
            skew: tolerated_skew(&timings),
            p_fail: pick(rng, &[0.0, 0.01, 0.05, 0.2]),
            p_timeout: pick(rng, &[0.0, 0.01, 0.05, 0.1]),
            p_slow: pick(rng, &[0.0, 0.02, 0.1]),
            timeout: ms(rng.random_range(millis(renew) / 2..=millis(renew) * 2)),
            p_kinesis: pick(rng, &[0.0, 0.02, 0.1]),
            write_gap_ms: (rng.random_range(20..=100), rng.random_range(150..=600)),
            channel: rng.random_range(1..=6),
            workers: rng.random_range(1..=4),
            batch: rng.random_range(1..=5),
            poll: ms(rng.random_range(millis(lease) / 10..=millis(lease) / 5)),
            reshards: rng.random_range(0..=4),
            crashes: rng.random_range(0..=2),
            stalls: rng.random_range(0..=2),
            shutdowns: rng.random_range(0..=2),
            partitions: rng.random_range(0..=2),
            clock_steps: rng.random_range(0..=2),
            resubscribes: rng.random_range(0..=2),
            quiet_fault: rng.random_bool(0.7),
            filter_checks_lease: true,
            resubscribe_grace: false,
            late_landing: true,
            counter_fence: true,
            late_takes: true,
            take_keeps_expiry: true,
            p_retry: pick(rng, &[0.0, 0.05, 0.2]),
            p_hold: pick(rng, &[0.0, 0.2, 0.5]),
            handler_checks_lease: true,
            handed_back_comes_back: true,
            p_expire: pick(rng, &[0.0, 0.01, 0.05]),
            p_iterator_fails: pick(rng, &[0.0, 0.3, 0.8]),
            p_resend: pick(rng, &[0.0, 0.02, 0.1]),
            recognise_landed: true,
            initial: match rng.random_range(0..4) {
                0 => KinesisPosition::Latest,
                1 => {
                    let after = rng.random_range(0..=millis(lease) * 4);
                    KinesisPosition::AtTimestamp(wall_time(after))
                }
                _ => KinesisPosition::TrimHorizon,
            },
            retention: rng
                .random_bool(0.3)
                .then(|| lease * rng.random_range(15..=30)),
            early_reshards: if rng.random_bool(0.3) {
                rng.random_range(1..=2)
            } else {
                0
            },
            malformed: rng.random_range(0..=1),
            seeks: rng.random_range(0..=3),
            p_seek: pick(rng, &[0.0, 0.01, 0.03]),
            seek_drops_stale: true,
        }
    }
}

/// One shard of the simulated stream.
#[derive(Debug)]
struct SimShard {
    info: ShardInfo,
    parents: Vec<usize>,
    /// Sequence numbers, ascending.
    records: Vec<u64>,
    /// When each record arrived (true time, Kinesis's clock).
    arrived: Vec<Time>,
    /// Trimmed out of the stream (retention): not listed, and its reads answer
    /// `ResourceNotFoundException`.
    trimmed: bool,
}

#[derive(Debug, Default)]
struct Stream {
    shards: Vec<SimShard>,
    /// Open shards in hash-key order: splits replace one, merges two neighbours.
    open: Vec<usize>,
    ids: HashMap<Arc<str>, usize>,
    next_seq: u64,
}

impl Stream {
    fn add(&mut self, parents: Vec<usize>) -> usize {
        let idx = self.shards.len();
        let id: Arc<str> = Arc::from(format!("shardId-{idx:012}"));
        let info = ShardInfo {
            id: Arc::clone(&id),
            parents: parents
                .iter()
                .map(|&p| Arc::clone(&self.shards[p].info.id))
                .collect(),
            closed: false,
        };
        self.shards.push(SimShard {
            info,
            parents,
            records: Vec::new(),
            arrived: Vec::new(),
            trimmed: false,
        });
        self.ids.insert(id, idx);
        idx
    }

    fn listing(&self) -> Vec<ShardInfo> {
        self.shards
            .iter()
            .filter(|s| !s.trimmed)
            .map(|s| s.info.clone())
            .collect()
    }

    /// The shards `shard` is a parent of.
    fn children(&self, shard: usize) -> Vec<usize> {
        (0..self.shards.len())
            .filter(|&c| self.shards[c].parents.contains(&shard))
            .collect()
    }

    /// The index of the first record of `shard` a reader opened at `start` reads.
    fn index_of(&self, shard: usize, start: &ShardStart) -> usize {
        let sim = &self.shards[shard];
        match start {
            ShardStart::After(checkpoint) => {
                let after: u64 = checkpoint.parse().expect("a sequence number");
                sim.records.partition_point(|&seq| seq <= after)
            }
            ShardStart::At(KinesisPosition::TrimHorizon) => 0,
            ShardStart::At(KinesisPosition::Latest) => sim.records.len(),
            ShardStart::At(KinesisPosition::AtTimestamp(at)) => {
                let at_ms = at.duration_since(std::time::UNIX_EPOCH).map_or(0, millis);
                let from = at_ms.saturating_sub(BASE_MS.unsigned_abs());
                sim.arrived.partition_point(|&t| millis(t) < from)
            }
            ShardStart::At(KinesisPosition::AtSequence { sequence, .. }) => {
                let at: u64 = sequence.parse().expect("a sequence number");
                sim.records.partition_point(|&seq| seq < at)
            }
        }
    }
}

/// A row of the store, and the session that holds it (the ghost behind the owner id).
#[derive(Debug, Default)]
struct Row {
    state: Option<LeaseState>,
    holder: Option<u64>,
    /// When the write that set the row's expiry was sent (true time), and whether a write of
    /// the holder sent earlier than the one before it set it: the expiry moved back.
    expiry_sent: Time,
    expiry_moved_back: bool,
    /// Unreadable for a while: reads, `list` and writes of it fail until it is repaired.
    malformed: bool,
}

#[derive(Debug, Clone)]
enum OpKind {
    Read,
    /// `LeaseStore::list`: every row of the stream, read consistently.
    List,
    Acquire,
    Renew,
    /// `LeaseStore::checkpoint`: the start checkpoint of a take, and a closing shard's final
    /// checkpoint or `SHARD_END` (`Write::Final`).
    Checkpoint(Arc<str>),
    /// `LeaseStore::checkpoint_and_renew`: the checkpoints of a held shard
    /// (`Write::Checkpoint`).
    CheckpointRenew(Arc<str>),
    /// `cover`: the last record index a gracefully stopping session delivered; `graceful`: the
    /// release of `release_graceful` (not of a failed take or of `SHARD_END`).
    Release {
        cover: Option<usize>,
        graceful: bool,
    },
}

/// One store call as it travels to the store.
#[derive(Debug, Clone)]
struct Op {
    inst: usize,
    inc: u32,
    sid: u64,
    shard: usize,
    owner: Arc<str>,
    kind: OpKind,
    /// The caller's wall clock when it built the call (DynamoDB conditions carry it).
    wall_ms: u64,
    /// The true time it was sent, for the checks.
    sent: Time,
    /// With the counter fence, a held write's condition on the row's counter: the one this
    /// store object's last write left there (`:seen`).
    seen: Option<u64>,
    /// Whether a write of this store object to the row had an unknown outcome when this one was
    /// sent (`Fence::uncertain`).
    uncertain: bool,
    /// The one retry of `held_update` after it adopted the row's counter.
    retried: bool,
    /// The SDK's resend of a held write whose first attempt landed and whose answer was lost.
    resend: bool,
    /// Both attempts of such a pair carry the same token.
    pair: Option<u64>,
}

/// What a store object knows of its own writes to one row (`Fence` in `lease/dynamo.rs`).
#[derive(Debug, Clone, Copy, Default)]
struct Fence {
    counter: Option<u64>,
    uncertain: bool,
}

/// A write whose answer settles its store object's fence: the call, and the row as the write
/// left it or found it (`None` when it did not land before its answer).
#[derive(Debug)]
struct FenceNote {
    op: Op,
    row: Option<LeaseState>,
}

#[derive(Debug, Clone)]
enum Res {
    Row(Option<LeaseState>),
    Rows(Vec<(usize, LeaseState)>),
    Granted(LeaseState),
    Ok,
    Fenced,
    Failed,
}

/// Where a store answer goes.
#[derive(Debug, Clone)]
enum Cont {
    Read {
        shard: usize,
    },
    /// A round's `list`.
    RoundList,
    Acquire {
        shard: usize,
        sid: u64,
        sent: Time,
        take: Take,
    },
    /// `take`: the start checkpoint of a shard that had none.
    StartCheckpoint {
        shard: usize,
        sid: u64,
        sent: Time,
        take: Take,
    },
    TakeRelease,
    /// The handover poll's `list`.
    Poll,
    /// A write of `write_lease`, sent at `sent`.
    Lease {
        sid: u64,
        write: Write,
        sent: Time,
    },
}

/// Where a take starts a shard whose row has no checkpoint (`plan::verdict`'s `fresh`), and the
/// start checkpoint it records for it (`ShardStart::to_checkpoint` at the take's send).
#[derive(Debug, Clone)]
struct Take {
    purpose: TakeFor,
    recorded: Arc<str>,
}

/// A delivery in the channel or in a handler.
#[derive(Debug, Clone, Copy)]
struct Msg {
    sid: u64,
    shard: usize,
    idx: usize,
    ticket: Ticket,
    /// Handed back by a handler and delivered again.
    redelivery: bool,
}

#[derive(Debug)]
enum Ev {
    Apply {
        op: Op,
        reply: Option<(Duration, Cont)>,
    },
    Reply {
        inst: usize,
        inc: u32,
        cont: Cont,
        res: Res,
        fence: Option<Box<FenceNote>>,
    },
    Round {
        inst: usize,
        inc: u32,
        token: u64,
    },
    /// `write_lease`'s `select!` wakes (its timer, or `handle.wake`).
    Lease {
        inst: usize,
        inc: u32,
        sid: u64,
        token: u64,
    },
    Reader {
        inst: usize,
        inc: u32,
        sid: u64,
        token: u64,
    },
    Handler {
        inst: usize,
        inc: u32,
        msg: Msg,
    },
    /// A delivery the runtime held in a worker lane reaches its handler.
    HandlerStart {
        inst: usize,
        inc: u32,
        msg: Msg,
    },
    Dispatch {
        inst: usize,
        inc: u32,
    },
    Write,
    Reshard,
    /// Retention trims a closed shard out of the stream.
    Trim {
        shard: usize,
    },
    /// A row becomes malformed for `dur`, then is repaired.
    Malform {
        dur: Duration,
    },
    Repair {
        shard: usize,
    },
    Crash {
        restart: bool,
        quiet: bool,
    },
    Start {
        inst: usize,
        same_id: bool,
    },
    /// The new subscription of a resubscribe opens: the previous one's tasks ended, or the
    /// grace ran out.
    Resubscribed {
        inst: usize,
    },
    /// A subscription is dropped and opened again in the same process.
    Resubscribe,
    Stall {
        dur: Duration,
    },
    Partition {
        dur: Duration,
    },
    /// An instance's wall clock steps (NTP) to another offset within the bound.
    ClockStep,
    Shutdown {
        restart: bool,
        quiet: bool,
    },
    Quiet,
}

impl Ev {
    /// The instance incarnation an event belongs to: dropped when it died, deferred while it is
    /// stalled.
    fn target(&self) -> Option<(usize, u32)> {
        match *self {
            Self::Reply { inst, inc, .. }
            | Self::Round { inst, inc, .. }
            | Self::Lease { inst, inc, .. }
            | Self::Reader { inst, inc, .. }
            | Self::Handler { inst, inc, .. }
            | Self::HandlerStart { inst, inc, .. }
            | Self::Dispatch { inst, inc } => Some((inst, inc)),
            _ => None,
        }
    }
}

struct Queued {
    at: Time,
    seq: u64,
    ev: Ev,
}

impl PartialEq for Queued {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl Eq for Queued {}
impl PartialOrd for Queued {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Queued {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.at, self.seq).cmp(&(other.at, other.seq))
    }
}

/// `reader::write_lease`, the driver of the session's [`ShardLease`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LeaseTask {
    /// Asleep until the machine's timer, or until something wakes it (`handle.wake`).
    Waiting(u64),
    /// Its `select!` woke: it asks the machine again.
    Woken(u64),
    /// A write is in flight: the driver asks again once it answered.
    InFlight,
    Done,
}

/// What the reader task (`Reader::read`) is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ReaderTask {
    /// In its `select!` until the machine's timer or a wake (`handle.read_wake`, the cancel).
    Waiting,
    /// A Kinesis call is in flight: its answer arrives with the reader's token, unless the
    /// cancel drops it.
    Calling,
    /// A delivery waits for room in the channel (`Msg` in `Session::blocked`).
    Blocked,
    Done,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FinishState {
    NotYet,
    /// `ShardHandle::close`: waiting for the lease's closing writes (`end`: `SHARD_END`).
    Closing {
        end: bool,
    },
    Done {
        finished: bool,
    },
}

/// A record as the shard machine holds it here: its place in the simulated shard.
#[derive(Debug, Clone)]
struct SimRecord {
    idx: usize,
    sequence: Arc<str>,
}

impl Sequenced for SimRecord {
    fn sequence(&self) -> &Arc<str> {
        &self.sequence
    }
}

/// One reader of one shard: its `ShardHandle`, its three tasks and `finish`.
#[derive(Debug)]
struct Session {
    shard: usize,
    /// The shard's machine, the one the real `ShardHandle` holds: its lease and writes, its
    /// reading, its watermark, its deliveries in flight and its records handed back.
    machine: ShardMachine<Time, SimRecord>,
    /// The driver of its lease, `reader::write_lease`.
    lease_task: LeaseTask,
    /// The driver of its reading, `Reader::read`, and the token of its pending wake-up.
    reader: ReaderTask,
    reader_token: u64,
    /// The answer of the call in flight, delivered with the reader's token.
    answer: Option<Fetch<SimRecord>>,
    blocked: Option<Msg>,
    /// The reader's cancellation token.
    cancelled: bool,
    finish: FinishState,
    /// The index of the last record of the watermark's settled prefix: what a final checkpoint
    /// covers.
    settled_upto: Option<usize>,
    // The ghost: what the checks know about this session, independent of the code under test.
    start_idx: usize,
    /// Below which a checkpoint of this session may go after a seek of it: the place of the
    /// record before the oldest seek target (`None`: it made no seek).
    seek_floor: Option<Mark>,
    last_idx: Option<usize>,
    deadline: Time,
    lost: bool,
    cover: Option<usize>,
}

#[derive(Debug, Default)]
struct Round {
    listing: Vec<ShardInfo>,
    reading: HashSet<Arc<str>>,
    finished: HashSet<Arc<str>>,
    wanted: Vec<Arc<str>>,
    /// Shards this round's passes tried to take, the ones its last pass marked skipped, and
    /// how many passes it made.
    tried: HashSet<Arc<str>>,
    marked: Vec<Arc<str>>,
    passes: usize,
    reads_left: usize,
    rows: Rows,
    unreadable: HashSet<Arc<str>>,
    takes_left: usize,
}

/// The handover poll in flight: what `takeable_between_listings` read before its `list`.
#[derive(Debug, Default)]
struct Poll {
    listing: Vec<ShardInfo>,
    reading: HashSet<Arc<str>>,
    finished: HashSet<Arc<str>>,
    wanted: Vec<Arc<str>>,
}

/// One subscription's coordinator: the first round of `open`, then `run`'s loop.
#[derive(Debug, Default)]
struct Coord {
    round: Option<Round>,
    poll: Option<Poll>,
    /// The token of the pending wake-up of `run`'s `select!`.
    timer: u64,
    /// The `Notify` permit `reader_ended` leaves.
    wake: bool,
    finished: HashSet<Arc<str>>,
    cancelled: bool,
    /// `run` started (the first round of `open` is over).
    looping: bool,
    /// `run` returned.
    exited: bool,
    next_listing: Time,
    next_poll: Time,
    /// `Subscription::last_listing`.
    last_listing: Vec<ShardInfo>,
    /// `Subscription::take_backoff`: per shard, failed takes in a row and until when it waits.
    backoff: HashMap<usize, (u32, Time)>,
    /// `Subscription::skipped`: closed shards never read that would start at the tip.
    skipped: HashSet<Arc<str>>,
    /// `Subscription::gone`: shards that left the stream while this subscription read them.
    gone: HashSet<Arc<str>>,
}

#[derive(Debug)]
struct Inst {
    owner: Arc<str>,
    /// The process this subscription lives in: a resubscribe opens a new slot in the same one.
    process: usize,
    /// A new subscription waiting for its predecessor's tasks (`register`).
    pending_start: bool,
    /// The new subscription that waits for this one to end.
    successor: Option<usize>,
    /// A subscription dropped by a resubscribe: it never starts again.
    retired: bool,
    inc: u32,
    alive: bool,
    offset_ms: i64,
    stalled_until: Time,
    partitioned_until: Time,
    shutting_down: bool,
    dropped: bool,
    restart_after_exit: Option<bool>,
    died_at: Time,
    coord: Coord,
    sessions: BTreeMap<u64, Session>,
    running: BTreeMap<usize, u64>,
    channel: VecDeque<Msg>,
    in_flight: usize,
    dispatch_pending: bool,
}

#[derive(Debug, Default)]
struct GhostShard {
    first_upto: usize,
    acked: Vec<bool>,
    /// The records the application must handle: those at or after where it starts the shard
    /// (its initial position, or the beginning when a parent was read), less the ones a seek
    /// skipped on purpose or retention trimmed unread.
    owed: Vec<bool>,
    /// Under an initial position at the tip: whether the application reached the shard (opened
    /// it, or a parent of it), so that every record written to it from then on is owed.
    reached: bool,
    covered_upto: usize,
    unserved_since: Option<Time>,
    /// When a reshard made the shard: instances see it only from their next listing on.
    created_at: Time,
    /// A graceful release that left records to read, until the next owner delivers.
    handover: Option<Handover>,
}

/// A graceful release that left records to read: when it landed, by which session, and which
/// steps of the next owner were counted already.
#[derive(Debug, Clone, Copy)]
struct Handover {
    at: Time,
    from: u64,
    /// Whether a subscription of another process was up and past its first round, ready to
    /// take the shard.
    taker_ready: bool,
    taken: bool,
    read: bool,
}

/// What the next owner did how long after a graceful release landed, in virtual milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// Its acquire landed.
    Take,
    /// Its reader fetched the first record (before it waits for room in its channel).
    Read,
    /// The first record reached a handler: after the records ahead of it in the channel.
    Delivery,
}

/// Graceful handovers: the worst time from a release that leaves records to read to each step
/// of the next owner, over every handover, and over the quiet ones: released after the quiet
/// phase's last faulty call could have landed, with a subscription of another process up to take
/// the shard (no fault slows the next owner down, none has to start first), in virtual
/// milliseconds.
#[derive(Debug, Default, Clone, Copy)]
struct Handovers {
    count: u64,
    delivery_sum_ms: u64,
    take_max_ms: u64,
    read_max_ms: u64,
    delivery_max_ms: u64,
    quiet_take_max_ms: u64,
    quiet_read_max_ms: u64,
    quiet_delivery_max_ms: u64,
}

impl Handovers {
    fn add(&mut self, o: &Self) {
        self.count += o.count;
        self.delivery_sum_ms += o.delivery_sum_ms;
        self.take_max_ms = self.take_max_ms.max(o.take_max_ms);
        self.read_max_ms = self.read_max_ms.max(o.read_max_ms);
        self.delivery_max_ms = self.delivery_max_ms.max(o.delivery_max_ms);
        self.quiet_take_max_ms = self.quiet_take_max_ms.max(o.quiet_take_max_ms);
        self.quiet_read_max_ms = self.quiet_read_max_ms.max(o.quiet_read_max_ms);
        self.quiet_delivery_max_ms = self.quiet_delivery_max_ms.max(o.quiet_delivery_max_ms);
    }

    fn record(&mut self, step: Step, took_ms: u64, quiet: bool) {
        let (all, calm) = match step {
            Step::Take => (&mut self.take_max_ms, &mut self.quiet_take_max_ms),
            Step::Read => (&mut self.read_max_ms, &mut self.quiet_read_max_ms),
            Step::Delivery => {
                self.count += 1;
                self.delivery_sum_ms += took_ms;
                (&mut self.delivery_max_ms, &mut self.quiet_delivery_max_ms)
            }
        };
        *all = (*all).max(took_ms);
        if quiet {
            *calm = (*calm).max(took_ms);
        }
    }
}

/// Counts over schedules, to see that the faults were exercised.
#[derive(Debug, Default, Clone, Copy)]
struct Stats {
    schedules: u64,
    events: u64,
    records: u64,
    deliveries: u64,
    redeliveries: u64,
    takes: u64,
    takeovers: u64,
    refused_renewals: u64,
    lapsed_by_clock: u64,
    fenced_writes: u64,
    /// Held writes `held_update` sent again after adopting the row's counter.
    fence_retries: u64,
    /// Store calls that landed after their caller timed out.
    late_landings: u64,
    store_failures: u64,
    crashes: u64,
    restarts: u64,
    stalls: u64,
    shutdowns: u64,
    graceful_covers: u64,
    partitions: u64,
    reshards: u64,
    filtered: u64,
    /// Deliveries handed back by their handlers, and deliveries withheld where their handler
    /// was about to start.
    handed_back: u64,
    withheld: u64,
    /// Expired iterators, and readers that handed their shard back for want of a fresh one.
    expired: u64,
    unreadable: u64,
    /// Takes that failed after the lease was won and left their shard to a backoff.
    take_backoffs: u64,
    /// SDK resends of held writes that had landed: recognised as their write's success, or
    /// taken for a lost lease.
    resends_recognised: u64,
    resends_lost: u64,
    polls: u64,
    poll_rounds: u64,
    resubscribes: u64,
    /// Closed shards a round skipped (never read, starting at the tip); shards trimmed by
    /// retention, and their owed records still unread then; readers that found their shard gone.
    skipped: u64,
    trimmed: u64,
    trimmed_unread: u64,
    gone: u64,
    /// Seeks made by handlers, seeks Kinesis failed, and records a forward seek skipped unread.
    seeks: u64,
    seeks_failed: u64,
    waived: u64,
    /// Rows made malformed, and rounds whose `list` failed and read row by row instead.
    malformed: u64,
    list_fallbacks: u64,
    virtual_secs: u64,
    /// The longest a shard went without a reader in a quiet phase, as a share of the bound, in
    /// per mille.
    worst_recovery_permille: u64,
    /// Graceful handovers with the handover poll on, and with it off.
    handovers_polled: Handovers,
    handovers_unpolled: Handovers,
}

impl Stats {
    fn add(&mut self, o: &Self) {
        self.schedules += o.schedules;
        self.events += o.events;
        self.records += o.records;
        self.deliveries += o.deliveries;
        self.redeliveries += o.redeliveries;
        self.takes += o.takes;
        self.takeovers += o.takeovers;
        self.refused_renewals += o.refused_renewals;
        self.lapsed_by_clock += o.lapsed_by_clock;
        self.fenced_writes += o.fenced_writes;
        self.fence_retries += o.fence_retries;
        self.late_landings += o.late_landings;
        self.store_failures += o.store_failures;
        self.crashes += o.crashes;
        self.restarts += o.restarts;
        self.stalls += o.stalls;
        self.shutdowns += o.shutdowns;
        self.graceful_covers += o.graceful_covers;
        self.partitions += o.partitions;
        self.reshards += o.reshards;
        self.filtered += o.filtered;
        self.handed_back += o.handed_back;
        self.withheld += o.withheld;
        self.expired += o.expired;
        self.unreadable += o.unreadable;
        self.take_backoffs += o.take_backoffs;
        self.resends_recognised += o.resends_recognised;
        self.resends_lost += o.resends_lost;
        self.polls += o.polls;
        self.poll_rounds += o.poll_rounds;
        self.resubscribes += o.resubscribes;
        self.skipped += o.skipped;
        self.trimmed += o.trimmed;
        self.trimmed_unread += o.trimmed_unread;
        self.gone += o.gone;
        self.seeks += o.seeks;
        self.seeks_failed += o.seeks_failed;
        self.waived += o.waived;
        self.malformed += o.malformed;
        self.list_fallbacks += o.list_fallbacks;
        self.virtual_secs += o.virtual_secs;
        self.worst_recovery_permille = self.worst_recovery_permille.max(o.worst_recovery_permille);
        self.handovers_polled.add(&o.handovers_polled);
        self.handovers_unpolled.add(&o.handovers_unpolled);
    }
}

/// Why a schedule failed.
#[derive(Debug)]
struct Failure {
    at: Time,
    message: String,
}

struct Sim {
    cfg: Config,
    rng: StdRng,
    now: Time,
    seq: u64,
    token: u64,
    queue: BinaryHeap<Reverse<Queued>>,
    stream: Stream,
    rows: Vec<Row>,
    /// Per (instance, incarnation, shard): its store object's fence.
    fences: HashMap<(usize, u32, usize), Fence>,
    /// The resend pairs whose first attempt landed.
    landed_pairs: HashSet<u64>,
    insts: Vec<Inst>,
    sid_inst: HashMap<u64, (usize, u32)>,
    next_sid: u64,
    ghost: Vec<GhostShard>,
    written: usize,
    acked: usize,
    quiet_at: Time,
    live_from: Time,
    writes_until: Time,
    last_live_check: Time,
    /// When a record was last acked for the first time.
    last_progress: Time,
    /// How many more seeks handlers may make.
    seeks_left: usize,
    failure: Option<Failure>,
    trace: Option<VecDeque<String>>,
    full_trace: bool,
    stats: Stats,
}

impl Sim {
    fn new(seed: u64, tweak: &dyn Fn(&mut Config, &mut StdRng)) -> Self {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut cfg = Config::random(&mut rng);
        tweak(&mut cfg, &mut rng);
        let quiet_at = cfg.chaos;
        let live_from = quiet_at + cfg.request_lifetime() + ms(1);
        let mut sim = Self {
            rng,
            now: Time::ZERO,
            seq: 0,
            token: 0,
            queue: BinaryHeap::new(),
            stream: Stream {
                next_seq: 1_000,
                ..Stream::default()
            },
            rows: Vec::new(),
            fences: HashMap::new(),
            landed_pairs: HashSet::new(),
            insts: Vec::new(),
            sid_inst: HashMap::new(),
            next_sid: 1,
            ghost: Vec::new(),
            written: 0,
            acked: 0,
            quiet_at,
            live_from,
            writes_until: quiet_at + cfg.timings.lease(),
            last_live_check: Time::ZERO,
            last_progress: Time::ZERO,
            seeks_left: cfg.seeks,
            failure: None,
            trace: None,
            full_trace: false,
            stats: Stats::default(),
            cfg,
        };
        sim.setup();
        sim
    }

    // ----- plumbing -------------------------------------------------------------------------

    fn push(&mut self, at: Time, ev: Ev) {
        self.seq += 1;
        self.queue.push(Reverse(Queued {
            at,
            seq: self.seq,
            ev,
        }));
    }

    fn token(&mut self) -> u64 {
        self.token += 1;
        self.token
    }

    /// A few milliseconds: tasks woken together run in a random order.
    fn jitter(&mut self) -> Duration {
        ms(self.rng.random_range(0..=2))
    }

    fn chaos(&self) -> bool {
        self.now < self.quiet_at
    }

    fn wall(&self, i: usize) -> u64 {
        self.wall_at(i, self.now)
    }

    /// Instance `i`'s wall clock at true time `at`, by its offset now.
    fn wall_at(&self, i: usize, at: Time) -> u64 {
        let at = i64::try_from(at.as_millis()).unwrap_or(i64::MAX);
        u64::try_from(BASE_MS + at + self.insts[i].offset_ms).unwrap_or(0)
    }

    fn fail(&mut self, message: String) {
        if self.failure.is_none() {
            self.failure = Some(Failure {
                at: self.now,
                message,
            });
        }
    }

    fn log(&mut self, line: impl FnOnce() -> String) {
        if let Some(trace) = &mut self.trace {
            let line = format!("{} {}", secs(self.now), line());
            if self.full_trace {
                println!("{line}");
            }
            trace.push_back(line);
            if trace.len() > TRACE_LINES {
                trace.pop_front();
            }
        }
    }

    fn id(&self, shard: usize) -> Arc<str> {
        Arc::clone(&self.stream.shards[shard].info.id)
    }

    fn session(&mut self, i: usize, sid: u64) -> Option<&mut Session> {
        self.insts[i].sessions.get_mut(&sid)
    }

    fn offset(&mut self) -> i64 {
        let half = i64::try_from(millis(self.cfg.skew) / 2).unwrap_or(0);
        match self.rng.random_range(0..3) {
            0 => -half,
            1 => half,
            _ => self.rng.random_range(-half..=half),
        }
    }

    fn alive(&self) -> Vec<usize> {
        (0..self.insts.len())
            .filter(|&i| self.insts[i].alive && !self.insts[i].shutting_down)
            .collect()
    }

    /// A random live process, by one of its live subscriptions: stalls, partitions and clock
    /// steps hit every subscription of a process, a stopping one included.
    fn some_process(&mut self) -> Option<usize> {
        let live: Vec<usize> = (0..self.insts.len())
            .filter(|&i| self.insts[i].alive)
            .collect();
        (!live.is_empty()).then(|| live[self.rng.random_range(0..live.len())])
    }

    /// Applies `f` to every subscription slot of `i`'s process that runs or waits to run.
    fn each_slot(&mut self, i: usize, f: impl Fn(&mut Inst)) {
        let process = self.insts[i].process;
        for inst in &mut self.insts {
            if inst.process == process && (inst.alive || inst.pending_start) {
                f(inst);
            }
        }
    }

    // ----- setup ----------------------------------------------------------------------------

    fn setup(&mut self) {
        for _ in 0..self.cfg.initial_shards {
            let idx = self.stream.add(Vec::new());
            self.stream.open.push(idx);
            self.rows.push(Row::default());
            self.ghost.push(GhostShard {
                reached: self.cfg.initial == KinesisPosition::TrimHorizon,
                ..GhostShard::default()
            });
        }
        for i in 0..self.cfg.instances {
            let offset_ms = self.offset();
            self.insts.push(Inst {
                owner: Arc::from(format!("i{i}")),
                process: i,
                pending_start: false,
                successor: None,
                retired: false,
                inc: 0,
                alive: false,
                offset_ms,
                stalled_until: Time::ZERO,
                partitioned_until: Time::ZERO,
                shutting_down: false,
                dropped: false,
                restart_after_exit: None,
                died_at: Time::ZERO,
                coord: Coord::default(),
                sessions: BTreeMap::new(),
                running: BTreeMap::new(),
                channel: VecDeque::new(),
                in_flight: 0,
                dispatch_pending: false,
            });
            // Instances open one after another, after the early reshards.
            let early = if self.cfg.early_reshards > 0 {
                1_000
            } else {
                0
            };
            let at = ms(early + self.rng.random_range(0..=2_000));
            self.push(
                at,
                Ev::Start {
                    inst: i,
                    same_id: true,
                },
            );
        }
        self.push(ms(1), Ev::Write);
        for k in 0..self.cfg.early_reshards {
            self.push(ms(300 * (k as u64 + 1)), Ev::Reshard);
        }
        let chaos = millis(self.cfg.chaos);
        let lease = millis(self.cfg.timings.lease());
        for _ in 0..self.cfg.reshards {
            let at = ms(self.rng.random_range(chaos / 10..chaos));
            self.push(at, Ev::Reshard);
        }
        for _ in 0..self.cfg.crashes {
            let at = ms(self.rng.random_range(chaos / 10..chaos * 9 / 10));
            let restart = self.rng.random_bool(0.6);
            self.push(
                at,
                Ev::Crash {
                    restart,
                    quiet: false,
                },
            );
        }
        for _ in 0..self.cfg.shutdowns {
            let at = ms(self.rng.random_range(chaos / 10..chaos * 9 / 10));
            let restart = self.rng.random_bool(0.5);
            self.push(
                at,
                Ev::Shutdown {
                    restart,
                    quiet: false,
                },
            );
        }
        for _ in 0..self.cfg.stalls {
            let dur = if self.rng.random_bool(0.6) {
                ms(self.rng.random_range(lease..=lease * 5 / 2))
            } else {
                ms(self.rng.random_range(200..=lease / 2))
            };
            let latest = chaos.saturating_sub(millis(dur) + 1).max(1);
            let at = ms(self.rng.random_range(0..latest));
            self.push(at, Ev::Stall { dur });
        }
        for _ in 0..self.cfg.partitions {
            let dur = ms(self.rng.random_range(lease / 5..=lease * 2));
            let latest = chaos.saturating_sub(millis(dur) + 1).max(1);
            let at = ms(self.rng.random_range(0..latest));
            self.push(at, Ev::Partition { dur });
        }
        for _ in 0..self.cfg.clock_steps {
            let at = ms(self.rng.random_range(0..chaos));
            self.push(at, Ev::ClockStep);
        }
        for _ in 0..self.cfg.resubscribes {
            let at = ms(self.rng.random_range(chaos / 10..chaos * 9 / 10));
            self.push(at, Ev::Resubscribe);
        }
        for _ in 0..self.cfg.malformed {
            // Repaired before the quiet phase.
            let dur = ms(self.rng.random_range(lease / 2..=lease * 2));
            let latest = chaos.saturating_sub(millis(dur) + 1).max(2);
            let at = ms(self.rng.random_range(1..latest));
            self.push(at, Ev::Malform { dur });
        }
        self.push(self.quiet_at, Ev::Quiet);
    }

    // ----- the loop -------------------------------------------------------------------------

    fn run(&mut self) -> Result<Stats, Failure> {
        let min_end = self.live_from + self.cfg.timings.lease() + self.liveness_bound() * 2;
        // A backlog may take long to work off (one slow handler, a full channel); what must
        // not happen is a quiet phase in which nothing is acked any more.
        let stuck_after = self.liveness_bound() * 3 + Duration::from_secs(60);
        let cap = self.quiet_at + Duration::from_secs(4 * 3600);
        // Once every record is acked: how long the checkpoints may take to catch up (invariant
        // 7, no wedge), a takeover after the quiet phase's one late fault included.
        let t = self.cfg.timings;
        let catch_up = self.liveness_bound()
            + t.renew()
            + t.checkpoint_interval()
            + self.cfg.request_lifetime() * 2;
        let mut caught_up_by: Option<Time> = None;
        while let Some(Reverse(queued)) = self.queue.pop() {
            self.now = queued.at;
            self.stats.events += 1;
            self.step(queued.ev);
            if self.failure.is_none() {
                self.check_liveness();
            }
            if let Some(failure) = self.failure.take() {
                return Err(failure);
            }
            if self.now >= min_end && self.now >= self.writes_until && self.acked == self.written {
                // Counted from when no handler holds a delivery any more: a seek back (or a
                // takeover) may have records handled again after every one was acked once.
                let quiescent = self
                    .insts
                    .iter()
                    .all(|inst| !inst.alive || (inst.in_flight == 0 && inst.channel.is_empty()));
                if !quiescent {
                    caught_up_by = None;
                } else if self.now >= *caught_up_by.get_or_insert(self.now + catch_up) {
                    break;
                }
            }
            let idle = self
                .now
                .saturating_sub(self.last_progress.max(self.live_from));
            if self.now > cap || (self.now >= self.writes_until && idle > stuck_after) {
                break;
            }
        }
        if self.acked != self.written {
            // The sessions still open, for a schedule that ended with records unacked.
            let open: Vec<String> = self
                .insts
                .iter()
                .enumerate()
                .filter(|(_, inst)| inst.alive)
                .flat_map(|(i, inst)| {
                    inst.sessions.iter().map(move |(sid, s)| {
                        format!(
                            "i{i} session {sid} shard {}: reader {:?}, finish {:?}, lease {:?} \
                             ({:?}), cancelled {}",
                            s.shard, s.reader, s.finish, s.lease_task, s.machine, s.cancelled
                        )
                    })
                })
                .collect();
            let missing: Vec<String> = self
                .ghost
                .iter()
                .enumerate()
                .flat_map(|(shard, g)| {
                    g.acked
                        .iter()
                        .zip(&g.owed)
                        .enumerate()
                        .filter(|(_, (acked, owed))| **owed && !**acked)
                        .map(move |(idx, _)| format!("{shard}#{idx}"))
                })
                .take(10)
                .collect();
            return Err(Failure {
                at: self.now,
                message: format!(
                    "at least once: {} of {} records were never acked, and none was for {:?} \
                     (shard#index: {}); open sessions: [{}]",
                    self.written - self.acked,
                    self.written,
                    self.now.saturating_sub(self.last_progress),
                    missing.join(", "),
                    open.join("; ")
                ),
            });
        }
        if let Some(failure) = self.check_no_wedge() {
            return Err(failure);
        }
        self.stats.schedules = 1;
        self.stats.records = self.written as u64;
        self.stats.virtual_secs = self.now.as_secs();
        Ok(self.stats)
    }

    fn step(&mut self, ev: Ev) {
        if let Some((i, inc)) = ev.target() {
            let inst = &self.insts[i];
            if !inst.alive || inst.inc != inc {
                return;
            }
            if self.now < inst.stalled_until {
                let resume = inst.stalled_until + self.jitter();
                self.push(resume, ev);
                return;
            }
        }
        if self.trace.is_some() && !matches!(ev, Ev::Write | Ev::Dispatch { .. }) {
            let line = format!("{ev:?}");
            self.log(|| line);
        }
        match ev {
            Ev::Apply { op, reply } => {
                let res = self.apply(&op);
                if let (Some(pair), false, Res::Ok) = (op.pair, op.resend, &res) {
                    self.landed_pairs.insert(pair);
                }
                if let Some((delay, cont)) = reply {
                    let fence = self.fenced(&op).then(|| {
                        let row = self.rows[op.shard].state.clone();
                        Box::new(FenceNote {
                            op: op.clone(),
                            row,
                        })
                    });
                    self.push(
                        self.now + delay,
                        Ev::Reply {
                            inst: op.inst,
                            inc: op.inc,
                            cont,
                            res,
                            fence,
                        },
                    );
                }
            }
            Ev::Reply {
                inst,
                cont,
                res,
                fence,
                ..
            } => {
                let answer = match fence {
                    Some(note) => self.settle_fence(inst, *note, res, cont),
                    None => Some((cont, res)),
                };
                if let Some((cont, res)) = answer {
                    self.on_reply(inst, cont, res);
                }
            }
            Ev::Round { inst, token, .. } => {
                if self.insts[inst].coord.timer == token {
                    self.coord_fire(inst);
                }
            }
            Ev::Lease {
                inst, sid, token, ..
            } => self.lease_woken(inst, sid, token),
            Ev::Reader {
                inst, sid, token, ..
            } => {
                if self
                    .session(inst, sid)
                    .is_some_and(|s| s.reader_token == token)
                {
                    self.reader_woken(inst, sid);
                }
            }
            Ev::HandlerStart { inst, msg, .. } => self.handler_start(inst, msg),
            Ev::Handler { inst, msg, .. } => self.handler_done(inst, msg),
            Ev::Dispatch { inst, .. } => self.dispatch(inst),
            Ev::Write => self.write(),
            Ev::Reshard => self.reshard(),
            Ev::Trim { shard } => self.trim(shard),
            Ev::Malform { dur } => self.malform(dur),
            Ev::Repair { shard } => {
                self.rows[shard].malformed = false;
                self.log(|| format!("row of shard {shard} repaired"));
            }
            Ev::Crash { restart, quiet } => self.crash_some(restart, quiet),
            Ev::Start { inst, same_id } => self.start(inst, same_id),
            Ev::Resubscribed { inst } => self.resubscribed(inst),
            Ev::Resubscribe => self.resubscribe_some(),
            Ev::Stall { dur } => {
                if let Some(i) = self.some_process() {
                    let until = self.now + dur;
                    self.each_slot(i, |inst| inst.stalled_until = until);
                    self.stats.stalls += 1;
                    self.log(|| format!("i{i} stalls for {dur:?}"));
                }
            }
            Ev::Partition { dur } => {
                if let Some(i) = self.some_process() {
                    let until = self.now + dur;
                    self.each_slot(i, |inst| inst.partitioned_until = until);
                    self.stats.partitions += 1;
                    self.log(|| format!("i{i} cut off from the store for {dur:?}"));
                }
            }
            Ev::ClockStep => {
                if let Some(i) = self.some_process() {
                    let offset = self.offset();
                    self.each_slot(i, |inst| inst.offset_ms = offset);
                    self.log(|| format!("i{i}'s wall clock steps to offset {offset} ms"));
                }
            }
            Ev::Shutdown { restart, quiet } => self.shutdown_some(restart, quiet),
            Ev::Quiet => self.quiet(),
        }
    }

    // ----- the store ------------------------------------------------------------------------

    /// Sends a store call: it lands (or not) and answers (or times out) later.
    fn send(&mut self, i: usize, sid: u64, shard: usize, kind: OpKind, cont: Cont) {
        let mut op = Op {
            inst: i,
            inc: self.insts[i].inc,
            sid,
            shard,
            owner: Arc::clone(&self.insts[i].owner),
            kind,
            wall_ms: self.wall(i),
            sent: self.now,
            seen: None,
            uncertain: false,
            retried: false,
            resend: false,
            pair: None,
        };
        if self.fenced(&op) && !matches!(op.kind, OpKind::Acquire) {
            let fence = self.fence(i, op.inc, shard);
            op.seen = fence.counter;
            op.uncertain = fence.uncertain;
        }
        self.transmit(op, cont);
    }

    /// Whether the call is a write whose answer settles its store object's fence: a take, or a
    /// held write, with the counter fence on.
    fn fenced(&self, op: &Op) -> bool {
        self.cfg.counter_fence && !matches!(op.kind, OpKind::Read | OpKind::List)
    }

    fn fence(&self, i: usize, inc: u32, shard: usize) -> Fence {
        self.fences
            .get(&(i, inc, shard))
            .copied()
            .unwrap_or_default()
    }

    /// `settle_fence` and the retry of `held_update` in `lease/dynamo.rs`, when a write's answer
    /// reaches its caller: records the counter a successful write left, marks the row uncertain
    /// after a failed call, keeps the recorded counter after a refusal. A held write refused by
    /// a row this owner still holds while one of this store object's writes was uncertain adopts
    /// the row's counter and is sent once more (its answer then goes to the caller): `None`.
    fn settle_fence(
        &mut self,
        i: usize,
        note: FenceNote,
        res: Res,
        cont: Cont,
    ) -> Option<(Cont, Res)> {
        let FenceNote { op, row } = note;
        let key = (i, op.inc, op.shard);
        let fence = self.fence(i, op.inc, op.shard);
        if let (Res::Fenced, Some(row)) = (&res, &row)
            && self.cfg.recognise_landed
            && self.landed(&op, row)
        {
            // `held_update`: the refusal shows this very write landed; it succeeded.
            if op.resend {
                self.stats.resends_recognised += 1;
            }
            self.fences.insert(
                key,
                Fence {
                    counter: Some(row.counter),
                    uncertain: false,
                },
            );
            return Some((cont, Res::Ok));
        }
        if op.resend
            && matches!(res, Res::Fenced)
            && op
                .pair
                .is_some_and(|pair| self.landed_pairs.contains(&pair))
        {
            self.stats.resends_lost += 1;
        }
        let res_ref = &res;
        let settled = match res_ref {
            Res::Failed => Fence {
                uncertain: true,
                ..fence
            },
            Res::Fenced => Fence {
                uncertain: false,
                ..fence
            },
            _ => Fence {
                counter: row.as_ref().map(|row| row.counter),
                uncertain: false,
            },
        };
        self.fences.insert(key, settled);
        if let (Res::Fenced, Some(row)) = (res_ref, &row)
            && !matches!(op.kind, OpKind::Acquire)
            && !op.retried
            && op.uncertain
            && row.is_held_by(&op.owner)
        {
            self.stats.fence_retries += 1;
            self.fences.insert(
                key,
                Fence {
                    counter: Some(row.counter),
                    uncertain: false,
                },
            );
            let op = Op {
                seen: Some(row.counter),
                uncertain: false,
                retried: true,
                ..op
            };
            self.log(|| {
                format!(
                    "i{i} adopts counter {} and retries {:?}",
                    row.counter, op.kind
                )
            });
            self.transmit(op, cont);
            return None;
        }
        Some((cont, res))
    }

    /// `lease::landed` on the row that refused `op`: what the write sets, as the store's
    /// `HeldEffect`.
    fn landed(&self, op: &Op, row: &LeaseState) -> bool {
        let expiry = op.wall_ms + millis(self.cfg.timings.lease());
        let effect = match &op.kind {
            OpKind::Renew => crate::lease::HeldEffect {
                owner: Some(&op.owner),
                expiry_ms: Some(expiry),
                checkpoint: None,
            },
            OpKind::Checkpoint(checkpoint) => crate::lease::HeldEffect {
                owner: Some(&op.owner),
                expiry_ms: None,
                checkpoint: Some(checkpoint),
            },
            OpKind::CheckpointRenew(checkpoint) => crate::lease::HeldEffect {
                owner: Some(&op.owner),
                expiry_ms: Some(expiry),
                checkpoint: Some(checkpoint),
            },
            OpKind::Release { .. } => crate::lease::HeldEffect {
                owner: None,
                expiry_ms: Some(0),
                checkpoint: None,
            },
            OpKind::Read | OpKind::List | OpKind::Acquire => return false,
        };
        crate::lease::landed(row, op.seen, &effect)
    }

    /// Sends a built call: a retry keeps the values (expiry, wall clock) of the first.
    fn transmit(&mut self, op: Op, cont: Cont) {
        let i = op.inst;
        let note = |op: &Op| {
            self.fenced(op).then(|| {
                Box::new(FenceNote {
                    op: op.clone(),
                    row: None,
                })
            })
        };
        let fence = note(&op);
        let chaos = self.chaos();
        let timeout = self.cfg.timeout;
        let timeout_ms = millis(timeout);
        let quick = |rng: &mut StdRng| ms(rng.random_range(1..=25));
        let partitioned = self.now < self.insts[i].partitioned_until;
        if partitioned || (chaos && self.rng.random_bool(self.cfg.p_fail)) {
            // Not applied: refused at once, or never answered.
            self.stats.store_failures += 1;
            let after = if self.rng.random_bool(0.5) {
                quick(&mut self.rng)
            } else {
                timeout
            };
            self.push(
                self.now + after,
                Ev::Reply {
                    inst: i,
                    inc: op.inc,
                    cont,
                    res: Res::Failed,
                    fence,
                },
            );
            return;
        }
        let (there, back) = if chaos && self.rng.random_bool(self.cfg.p_slow) {
            (
                ms(self.rng.random_range(1..timeout_ms)),
                ms(self.rng.random_range(1..timeout_ms)),
            )
        } else {
            (quick(&mut self.rng), quick(&mut self.rng))
        };
        let held = matches!(
            op.kind,
            OpKind::Renew
                | OpKind::Checkpoint(_)
                | OpKind::CheckpointRenew(_)
                | OpKind::Release { .. }
        );
        if held && fence.is_some() && chaos && self.rng.random_bool(self.cfg.p_resend) {
            // The first attempt lands and its answer is lost; the SDK sends the same request
            // again, which the counter the first attempt moved refuses.
            let pair = Some(self.token());
            let resend = Op {
                resend: true,
                pair,
                ..op.clone()
            };
            let op = Op { pair, ..op };
            self.push(self.now + there, Ev::Apply { op, reply: None });
            self.push(
                self.now + there + ms(1),
                Ev::Apply {
                    op: resend,
                    reply: Some((back, cont)),
                },
            );
            return;
        }
        let lost_answer = chaos && self.rng.random_bool(self.cfg.p_timeout);
        if lost_answer || there + back >= timeout {
            // Timed out: the caller cannot tell whether the write landed.
            self.stats.store_failures += 1;
            let lands = if lost_answer {
                self.rng.random_bool(0.5)
            } else {
                there < timeout
            };
            let inc = op.inc;
            if lands {
                let late = self.cfg.late_landing
                    && (self.cfg.late_takes || !matches!(op.kind, OpKind::Acquire));
                let land = if lost_answer && late {
                    ms(self.rng.random_range(1..timeout_ms * 3))
                } else {
                    there.min(timeout - ms(1))
                };
                if land >= timeout {
                    self.stats.late_landings += 1;
                }
                self.push(self.now + land, Ev::Apply { op, reply: None });
            }
            self.push(
                self.now + timeout,
                Ev::Reply {
                    inst: i,
                    inc,
                    cont,
                    res: Res::Failed,
                    fence,
                },
            );
            return;
        }
        self.push(
            self.now + there,
            Ev::Apply {
                op,
                reply: Some((back, cont)),
            },
        );
    }

    /// The store's conditional writes, as `MemoryLeaseStore` and `DynamoLeaseStore` make them,
    /// with the expiry judged by the caller's clock.
    fn apply(&mut self, op: &Op) -> Res {
        let lease_ms = millis(self.cfg.timings.lease());
        let shard = op.shard;
        let malformed = match op.kind {
            // `DynamoLeaseStore::list`: a bad row of the listed stream fails the listing.
            OpKind::List => self.rows.iter().any(|row| row.malformed),
            _ => self.rows[shard].malformed,
        };
        if malformed {
            // Not applied: the store cannot read the row, nor its condition check hold.
            return Res::Failed;
        }
        match &op.kind {
            OpKind::Read => Res::Row(self.rows[shard].state.clone()),
            OpKind::List => Res::Rows(
                self.rows
                    .iter()
                    .enumerate()
                    .filter_map(|(shard, row)| row.state.clone().map(|state| (shard, state)))
                    .collect(),
            ),
            OpKind::Acquire => {
                let row = &mut self.rows[shard];
                let state = row.state.get_or_insert_with(LeaseState::default);
                let own = state.is_held_by(&op.owner)
                    && (!self.cfg.take_keeps_expiry || state.expiry_ms <= op.wall_ms + lease_ms);
                if !(own || state.is_expired_at(op.wall_ms)) {
                    return Res::Fenced;
                }
                let previous = row.holder.filter(|&prev| prev != op.sid);
                let stolen = state.owner.is_some() && !state.is_held_by(&op.owner);
                state.owner = Some(op.owner.to_string());
                state.expiry_ms = op.wall_ms + lease_ms;
                state.counter += 1;
                let granted = state.clone();
                row.holder = Some(op.sid);
                self.stats.takes += 1;
                if stolen {
                    self.stats.takeovers += 1;
                }
                if let Some(prev) = previous {
                    self.check_no_live_holder(prev, op);
                }
                let row = &mut self.rows[shard];
                row.expiry_sent = op.sent;
                row.expiry_moved_back = false;
                self.handover_step(shard, op.sid, Step::Take);
                Res::Granted(granted)
            }
            OpKind::Renew
            | OpKind::Checkpoint(_)
            | OpKind::CheckpointRenew(_)
            | OpKind::Release { .. } => {
                let row = &mut self.rows[shard];
                let Some(state) = row.state.as_mut().filter(|s| {
                    s.is_held_by(&op.owner) && op.seen.is_none_or(|seen| seen == s.counter)
                }) else {
                    self.stats.fenced_writes += 1;
                    return Res::Fenced;
                };
                if row.holder != Some(op.sid) {
                    let holder = row.holder;
                    self.fail(format!(
                        "fencing: the store accepted {:?} on shard {shard} from session {} of \
                         {} (incarnation {}), but session {holder:?} holds the row",
                        op.kind, op.sid, op.owner, op.inc
                    ));
                    return Res::Fenced;
                }
                state.counter += 1;
                if matches!(op.kind, OpKind::Renew | OpKind::CheckpointRenew(_)) {
                    state.expiry_ms = op.wall_ms + lease_ms;
                    if op.sent < row.expiry_sent {
                        row.expiry_moved_back = true;
                    }
                    row.expiry_sent = op.sent;
                }
                match &op.kind {
                    OpKind::Renew => {}
                    OpKind::Checkpoint(checkpoint) | OpKind::CheckpointRenew(checkpoint) => {
                        let old = Mark::of(state.checkpoint.as_deref());
                        let new = Mark::of(Some(checkpoint));
                        // A seek of the session that writes may take its checkpoint back, no
                        // further than the record before its target.
                        let floor = self
                            .sid_inst
                            .get(&op.sid)
                            .and_then(|&(i, _)| self.insts[i].sessions.get(&op.sid))
                            .and_then(|s| s.seek_floor);
                        if state.is_skipped() {
                            self.fail(format!(
                                "skipped: shard {shard} was marked never to be read, and session \
                                 {} checkpointed {checkpoint} over the mark",
                                op.sid
                            ));
                            return Res::Ok;
                        }
                        if new < old && floor.is_none_or(|floor| new < floor) {
                            let was = state.checkpoint.clone();
                            self.fail(format!(
                                "monotonic: shard {shard}'s checkpoint moved back from {was:?} \
                                 to {checkpoint} (session {})",
                                op.sid
                            ));
                            return Res::Ok;
                        }
                        state.checkpoint = Some(checkpoint.to_string());
                    }
                    OpKind::Release { cover, graceful } => {
                        let mark = Mark::of(state.checkpoint.as_deref());
                        state.owner = None;
                        state.expiry_ms = 0;
                        row.holder = None;
                        let records = &self.stream.shards[shard].records;
                        let next = match mark {
                            Mark::None | Mark::Start => 0,
                            Mark::Seq(seq) => records.partition_point(|&s| s <= seq),
                            Mark::End => records.len(),
                        };
                        let process = self.insts[op.inst].process;
                        let taker_ready = self.insts.iter().any(|inst| {
                            inst.alive
                                && !inst.shutting_down
                                && inst.coord.looping
                                && inst.process != process
                        });
                        self.ghost[shard].handover =
                            (*graceful && next < records.len()).then_some(Handover {
                                at: self.now,
                                from: op.sid,
                                taker_ready,
                                taken: false,
                                read: false,
                            });
                        if let Some(idx) = *cover {
                            let seq = self.stream.shards[shard].records[idx];
                            if mark < Mark::Seq(seq) {
                                self.fail(format!(
                                    "graceful: session {} released shard {shard} at checkpoint \
                                     {mark:?}, behind record #{idx} ({seq}) it delivered and \
                                     had acked",
                                    op.sid
                                ));
                            }
                            let g = &mut self.ghost[shard];
                            g.covered_upto = g.covered_upto.max(idx + 1);
                            self.stats.graceful_covers += 1;
                        }
                    }
                    OpKind::Read | OpKind::List | OpKind::Acquire => unreachable!(),
                }
                Res::Ok
            }
        }
    }

    /// Invariant 1b: a take lands only when the session it replaces may no longer deliver.
    fn check_no_live_holder(&mut self, prev: u64, op: &Op) {
        let Some(&(i, inc)) = self.sid_inst.get(&prev) else {
            return;
        };
        let inst = &self.insts[i];
        if !inst.alive || inst.inc != inc {
            return;
        }
        let Some(s) = inst.sessions.get(&prev) else {
            return;
        };
        if !s.machine.is_halted() && !s.lost && s.deadline > self.now {
            let (deadline, owner) = (s.deadline, Arc::clone(&inst.owner));
            let moved_back = if self.rows[op.shard].expiry_moved_back {
                " (an earlier write of that session landed after a later one and moved the \
                 row's expiry back)"
            } else {
                ""
            };
            self.fail(format!(
                "fencing: {} (session {}) took shard {} while session {prev} of {owner} may \
                 still deliver until {} by its own clock{moved_back}",
                op.owner,
                op.sid,
                op.shard,
                secs(deadline)
            ));
        }
    }

    fn on_reply(&mut self, i: usize, cont: Cont, res: Res) {
        match cont {
            Cont::Read { shard } => self.round_read(i, shard, res),
            Cont::RoundList => self.round_listed(i, res),
            Cont::Acquire {
                shard,
                sid,
                sent,
                take,
            } => self.round_acquired(i, shard, sid, sent, take, res),
            Cont::StartCheckpoint {
                shard,
                sid,
                sent,
                take,
            } => {
                self.start_checkpointed(i, shard, sid, sent, take, res);
            }
            Cont::TakeRelease => self.take_done(i),
            Cont::Poll => self.polled(i, res),
            Cont::Lease { sid, write, sent } => self.lease_answered(i, sid, &write, sent, &res),
        }
    }

    // ----- the stream and its producer ------------------------------------------------------

    fn write(&mut self) {
        if self.now >= self.writes_until {
            return;
        }
        let open = &self.stream.open;
        let shard = open[self.rng.random_range(0..open.len())];
        let seq = self.stream.next_seq;
        self.stream.next_seq += self.rng.random_range(1..=3);
        self.stream.shards[shard].records.push(seq);
        self.stream.shards[shard].arrived.push(self.now);
        let owed = match &self.cfg.initial {
            KinesisPosition::AtTimestamp(at) => wall_time(millis(self.now)) >= *at,
            _ => self.ghost[shard].reached,
        };
        let g = &mut self.ghost[shard];
        g.acked.push(false);
        g.owed.push(false);
        let idx = g.acked.len() - 1;
        if owed {
            self.owe(shard, idx);
        }
        let (lo, hi) = self.cfg.write_gap_ms;
        let next = self.now + ms(self.rng.random_range(lo..=hi));
        self.push(next, Ev::Write);
    }

    fn reshard(&mut self) {
        let open = self.stream.open.len();
        let split = open == 1 || (open < MAX_OPEN && self.rng.random_bool(0.5));
        let pos = self
            .rng
            .random_range(0..if split { open } else { open - 1 });
        let parents: Vec<usize> = if split {
            vec![self.stream.open[pos]]
        } else {
            vec![self.stream.open[pos], self.stream.open[pos + 1]]
        };
        for &p in &parents {
            self.stream.shards[p].info.closed = true;
            if let Some(retention) = self.cfg.retention {
                self.push(self.now + retention, Ev::Trim { shard: p });
            }
        }
        // A child of a shard the application reached holds what follows it: owed from its
        // beginning (under an initial position at a timestamp, by its arrival time instead).
        let reached = parents.iter().any(|&p| self.ghost[p].reached);
        let children: Vec<usize> = (0..if split { 2 } else { 1 })
            .map(|_| {
                self.rows.push(Row::default());
                self.ghost.push(GhostShard {
                    created_at: self.now,
                    reached,
                    ..GhostShard::default()
                });
                self.stream.add(parents.clone())
            })
            .collect();
        self.stream
            .open
            .splice(pos..pos + parents.len(), children.iter().copied());
        self.stats.reshards += 1;
        self.log(|| format!("reshard: {parents:?} -> {children:?}"));
    }

    /// Record `idx` of `shard` is owed from now on.
    fn owe(&mut self, shard: usize, idx: usize) {
        let g = &mut self.ghost[shard];
        if !g.owed[idx] {
            g.owed[idx] = true;
            self.written += 1;
            if g.acked[idx] {
                self.acked += 1;
            }
        }
    }

    /// Record `idx` of `shard` is owed no more (a seek skipped it, retention trimmed it).
    fn waive(&mut self, shard: usize, idx: usize) -> bool {
        let g = &mut self.ghost[shard];
        if !g.owed[idx] || g.acked[idx] {
            return false;
        }
        g.owed[idx] = false;
        self.written -= 1;
        true
    }

    /// A handler finished record `idx` of `shard`.
    fn mark_acked(&mut self, shard: usize, idx: usize) {
        let g = &mut self.ghost[shard];
        if !g.acked[idx] {
            g.acked[idx] = true;
            if g.owed[idx] {
                self.acked += 1;
            }
            self.last_progress = self.now;
        }
    }

    /// The application reached `shard` (under an initial position at the tip): its records from
    /// `from` on are owed, and so is everything of its children, which hold what follows it.
    fn reach(&mut self, shard: usize, from: usize) {
        if !matches!(self.cfg.initial, KinesisPosition::Latest) || self.ghost[shard].reached {
            return;
        }
        self.ghost[shard].reached = true;
        for idx in from..self.ghost[shard].owed.len() {
            self.owe(shard, idx);
        }
        for child in self.stream.children(shard) {
            self.reach(child, 0);
        }
    }

    /// Whether the application never reads `shard` by design: a closed shard it never reached,
    /// starting at the tip (`plan::Verdict::Skip`).
    fn skippable(&self, shard: usize) -> bool {
        self.cfg.initial == KinesisPosition::Latest
            && self.stream.shards[shard].info.closed
            && !self.ghost[shard].reached
    }

    /// Retention trims a closed shard: it leaves the listing, its reads answer
    /// `ResourceNotFoundException`, and what nobody read of it is lost to the application.
    fn trim(&mut self, shard: usize) {
        self.stream.shards[shard].trimmed = true;
        self.stats.trimmed += 1;
        for idx in 0..self.ghost[shard].owed.len() {
            if self.waive(shard, idx) {
                self.stats.trimmed_unread += 1;
            }
        }
        if self.cfg.initial == KinesisPosition::Latest && self.rows[shard].state.is_none() {
            // Trimmed before the application took it: to the table it is a parent that ended
            // before the application started, so its children start at the tip when first
            // taken (`plan`'s lineage rule), and what they held before is lost with it.
            self.ghost[shard].reached = false;
            self.unreach(shard);
        }
        self.log(|| format!("shard {shard} trimmed out of the stream"));
    }

    /// A row of a shard not trimmed becomes malformed (its reads, the stream's `list` and its
    /// writes fail) for `dur`.
    fn malform(&mut self, dur: Duration) {
        let candidates: Vec<usize> = (0..self.rows.len())
            .filter(|&shard| self.rows[shard].state.is_some() && !self.stream.shards[shard].trimmed)
            .collect();
        if candidates.is_empty() {
            return;
        }
        let shard = candidates[self.rng.random_range(0..candidates.len())];
        self.rows[shard].malformed = true;
        self.stats.malformed += 1;
        self.push(self.now + dur, Ev::Repair { shard });
        self.log(|| format!("row of shard {shard} malformed for {dur:?}"));
    }

    // ----- instances: start, crash, stall, graceful stop ------------------------------------

    fn start(&mut self, i: usize, same_id: bool) {
        if self.insts[i].alive {
            return;
        }
        let offset = self.offset();
        let inst = &mut self.insts[i];
        if inst.inc > 0 {
            self.stats.restarts += 1;
        }
        if !same_id {
            inst.owner = Arc::from(format!("i{i}.{}", inst.inc));
        }
        self.open_subscription(i, offset);
    }

    /// `open`: the subscription's first round, then `run`.
    fn open_subscription(&mut self, i: usize, offset: i64) {
        let inst = &mut self.insts[i];
        inst.alive = true;
        inst.offset_ms = offset;
        inst.stalled_until = Time::ZERO;
        inst.shutting_down = false;
        inst.dropped = false;
        inst.coord = Coord::default();
        let owner = Arc::clone(&inst.owner);
        self.log(|| format!("i{i} starts as {owner}, clock offset {offset} ms"));
        self.start_round(i);
    }

    /// Kills instance `i`: nothing of it runs again; its requests in flight still land.
    fn kill(&mut self, i: usize) {
        let inst = &mut self.insts[i];
        inst.alive = false;
        inst.died_at = self.now;
        inst.inc += 1;
        inst.sessions.clear();
        inst.running.clear();
        inst.channel.clear();
        inst.in_flight = 0;
        inst.dispatch_pending = false;
        inst.coord = Coord::default();
    }

    fn restart_later(&mut self, i: usize, same_id: bool) {
        // After every request the dead incarnation sent has landed or timed out.
        let delay = self.cfg.restart_wait()
            + ms(self.rng.random_range(0..=millis(self.cfg.timings.lease())));
        self.push(self.now + delay, Ev::Start { inst: i, same_id });
    }

    /// Kills every other subscription of `i`'s process: the process ends.
    fn kill_process_but(&mut self, i: usize) {
        let process = self.insts[i].process;
        for j in 0..self.insts.len() {
            if j == i || self.insts[j].process != process {
                continue;
            }
            if self.insts[j].alive {
                self.kill(j);
            }
            if self.insts[j].pending_start {
                self.insts[j].pending_start = false;
                self.insts[j].retired = true;
            }
        }
    }

    fn crash_some(&mut self, restart: bool, quiet: bool) {
        let alive = self.alive();
        if alive.is_empty() || ((!restart || quiet) && alive.len() < 2) {
            return;
        }
        let i = alive[self.rng.random_range(0..alive.len())];
        self.kill_process_but(i);
        self.kill(i);
        self.stats.crashes += 1;
        self.log(|| format!("i{i} crashes (restart: {restart})"));
        if restart && !quiet {
            let same_id = self.rng.random_bool(0.5);
            self.restart_later(i, same_id);
        }
    }

    fn shutdown_some(&mut self, restart: bool, quiet: bool) {
        let alive = self.alive();
        if alive.is_empty() || ((!restart || quiet) && alive.len() < 2) {
            return;
        }
        let i = alive[self.rng.random_range(0..alive.len())];
        let inst = &mut self.insts[i];
        inst.shutting_down = true;
        inst.restart_after_exit = (restart && !quiet).then_some(true);
        self.stats.shutdowns += 1;
        self.log(|| format!("i{i} shuts down gracefully"));
        if self.insts[i].in_flight == 0 {
            self.drop_subscriber(i);
        }
    }

    /// A subscription is dropped (the runtime drains its handlers first) and opened again in
    /// the same process, under the same owner id, as a new subscription slot.
    fn resubscribe_some(&mut self) {
        let alive = self.alive();
        if alive.is_empty() {
            return;
        }
        let i = alive[self.rng.random_range(0..alive.len())];
        let j = self.insts.len();
        let old = &self.insts[i];
        let slot = Inst {
            owner: Arc::clone(&old.owner),
            process: old.process,
            pending_start: true,
            successor: None,
            retired: false,
            inc: 0,
            alive: false,
            offset_ms: old.offset_ms,
            stalled_until: old.stalled_until,
            partitioned_until: old.partitioned_until,
            shutting_down: false,
            dropped: false,
            restart_after_exit: None,
            died_at: Time::ZERO,
            coord: Coord::default(),
            sessions: BTreeMap::new(),
            running: BTreeMap::new(),
            channel: VecDeque::new(),
            in_flight: 0,
            dispatch_pending: false,
        };
        self.insts.push(slot);
        let inst = &mut self.insts[i];
        inst.shutting_down = true;
        inst.restart_after_exit = None;
        inst.successor = Some(j);
        inst.retired = true;
        self.stats.resubscribes += 1;
        self.log(|| format!("i{i} resubscribes as slot {j}"));
        if self.insts[i].in_flight == 0 {
            self.drop_subscriber(i);
        }
    }

    /// `register`: the new subscription opens once the old one's tasks ended, or after
    /// `SHUTDOWN_GRACE` of waiting.
    fn resubscribed(&mut self, j: usize) {
        let inst = &self.insts[j];
        if !inst.pending_start {
            return;
        }
        if self.now < inst.stalled_until {
            let resume = inst.stalled_until + self.jitter();
            self.push(resume, Ev::Resubscribed { inst: j });
            return;
        }
        self.insts[j].pending_start = false;
        let offset = self.insts[j].offset_ms;
        self.open_subscription(j, offset);
    }

    /// The runtime drained its handlers and drops the subscription: every reader stops.
    fn drop_subscriber(&mut self, i: usize) {
        let inst = &mut self.insts[i];
        inst.dropped = true;
        inst.coord.cancelled = true;
        if let Some(j) = inst.successor
            && self.cfg.resubscribe_grace
        {
            self.push(self.now + SHUTDOWN_GRACE, Ev::Resubscribed { inst: j });
        }
        let sids: Vec<u64> = self.insts[i].sessions.keys().copied().collect();
        for sid in sids {
            if let Some(s) = self.session(i, sid) {
                // What the final checkpoint covers: the settled prefix (a record handed back
                // for a retry, and what follows it, is read again by the next owner).
                s.cover = s.settled_upto;
            }
            self.cancel(i, sid);
        }
        self.coord_select(i);
        self.maybe_exit(i);
    }

    /// The subscription's tasks all ended: a dropped one is gone (with its process, unless a
    /// resubscribe replaced it).
    fn maybe_exit(&mut self, i: usize) {
        let inst = &self.insts[i];
        if !inst.alive || !inst.dropped || !inst.sessions.is_empty() || !inst.coord.exited {
            return;
        }
        let restart = self.insts[i].restart_after_exit.take();
        if let Some(j) = self.insts[i].successor {
            self.kill(i);
            self.log(|| format!("i{i}'s old subscription ended"));
            if self.insts[j].pending_start {
                let at = self.now + self.jitter();
                self.push(at, Ev::Resubscribed { inst: j });
            }
            return;
        }
        self.kill_process_but(i);
        self.kill(i);
        self.log(|| format!("i{i} stopped"));
        if restart.is_some() {
            let delay = self.cfg.restart_wait() + ms(self.rng.random_range(1..=5_000));
            self.push(
                self.now + delay,
                Ev::Start {
                    inst: i,
                    same_id: true,
                },
            );
        }
    }

    fn quiet(&mut self) {
        self.log(|| "quiet phase: no more faults".to_owned());
        // At least one healthy instance from here on.
        let pending = self.insts.iter().any(|inst| inst.pending_start);
        if self.alive().is_empty() && !pending {
            let dead =
                (0..self.insts.len()).find(|&i| !self.insts[i].alive && !self.insts[i].retired);
            match dead {
                Some(dead) => {
                    // Not before the requests of its last incarnation landed.
                    let at = self.insts[dead].died_at + self.cfg.restart_wait();
                    self.push(
                        at.max(self.now),
                        Ev::Start {
                            inst: dead,
                            same_id: true,
                        },
                    );
                }
                // Every instance is stopping: one comes back once it stopped.
                None => {
                    if let Some(i) = (0..self.insts.len()).find(|&i| !self.insts[i].retired) {
                        self.insts[i].restart_after_exit = Some(true);
                    }
                }
            }
        }
        if self.cfg.quiet_fault {
            let at =
                self.live_from + ms(self.rng.random_range(0..=millis(self.cfg.timings.lease())));
            let ev = if self.rng.random_bool(0.5) {
                Ev::Crash {
                    restart: false,
                    quiet: true,
                }
            } else {
                Ev::Shutdown {
                    restart: false,
                    quiet: true,
                }
            };
            self.push(at, ev);
        }
    }

    // ----- the coordinator: `Subscription::round`, `take`, `reader_ended`, `run` -----------

    fn start_round(&mut self, i: usize) {
        let coord = &mut self.insts[i].coord;
        if coord.round.is_some() {
            return;
        }
        if self.chaos() && self.rng.random_bool(self.cfg.p_kinesis) {
            self.log(|| format!("i{i} ListShards failed"));
            self.insts[i].coord.round = Some(Round::default());
            self.round_over(i);
            return;
        }
        let listing = self.stream.listing();
        self.forget_unlisted(i, &listing);
        let inst = &self.insts[i];
        let reading: HashSet<Arc<str>> = inst.running.keys().map(|&s| self.id(s)).collect();
        let finished = inst.coord.finished.clone();
        let settled = self.settled(i);
        let wanted: Vec<Arc<str>> = plan::rows_to_read(&listing, &reading, &settled, &finished)
            .into_iter()
            .cloned()
            .collect();
        self.insts[i].coord.round = Some(Round {
            listing,
            reading,
            finished,
            wanted: wanted.clone(),
            ..Round::default()
        });
        if wanted.is_empty() {
            self.decide(i);
            return;
        }
        // `read_rows`: one `list`, and a read per row when it fails.
        self.send(i, 0, 0, OpKind::List, Cont::RoundList);
    }

    /// `Subscription::forget_unlisted`.
    fn forget_unlisted(&mut self, i: usize, listing: &[ShardInfo]) {
        let listed: HashSet<Arc<str>> = listing.iter().map(|s| Arc::clone(&s.id)).collect();
        let ids: HashMap<usize, Arc<str>> = self.insts[i]
            .coord
            .backoff
            .keys()
            .map(|&shard| (shard, self.id(shard)))
            .collect();
        let coord = &mut self.insts[i].coord;
        coord.skipped.retain(|shard| listed.contains(shard));
        coord.gone.retain(|shard| listed.contains(shard));
        coord
            .backoff
            .retain(|shard, _| listed.contains(&ids[shard]));
    }

    /// `Snapshot::settled`: the shards this subscription never reads again.
    fn settled(&self, i: usize) -> HashSet<Arc<str>> {
        let coord = &self.insts[i].coord;
        let mut settled = coord.finished.clone();
        settled.extend(coord.skipped.iter().cloned());
        settled.extend(coord.gone.iter().cloned());
        settled
    }

    /// A round's `list` answered: the rows it wants, or a read per row when it failed.
    fn round_listed(&mut self, i: usize, res: Res) {
        let ids: Vec<Arc<str>> = (0..self.stream.shards.len()).map(|s| self.id(s)).collect();
        let Some(round) = self.insts[i].coord.round.as_mut() else {
            return;
        };
        if let Res::Rows(listed) = res {
            for shard in &round.wanted {
                round.rows.insert(Arc::clone(shard), None);
            }
            for (shard, row) in listed {
                round.rows.insert(Arc::clone(&ids[shard]), Some(row));
            }
            self.decide(i);
            return;
        }
        self.stats.list_fallbacks += 1;
        round.reads_left = round.wanted.len();
        let wanted = round.wanted.clone();
        for id in wanted {
            let shard = self.stream.ids[&id];
            self.send(i, 0, shard, OpKind::Read, Cont::Read { shard });
        }
    }

    fn round_read(&mut self, i: usize, shard: usize, res: Res) {
        let id = self.id(shard);
        let Some(round) = self.insts[i].coord.round.as_mut() else {
            return;
        };
        match res {
            Res::Row(row) => {
                round.rows.insert(id, row);
            }
            _ => {
                round.unreadable.insert(id);
            }
        }
        round.reads_left -= 1;
        if round.reads_left == 0 {
            self.decide(i);
        }
    }

    fn decide(&mut self, i: usize) {
        let now_ms = self.wall(i);
        let owner = Arc::clone(&self.insts[i].owner);
        let inst = &mut self.insts[i];
        let Some(round) = inst.coord.round.as_mut() else {
            return;
        };
        plan::add_finished(&mut round.rows, &round.finished);
        for (shard, row) in &round.rows {
            if row.as_ref().is_some_and(LeaseState::is_finished) {
                inst.coord.finished.insert(Arc::clone(shard));
            }
        }
        inst.coord.last_listing.clone_from(&round.listing);
        self.take_pass(i, owner, now_ms);
    }

    /// One pass of a round's takes (`round`'s loop, until a pass marks nothing): what
    /// `takeable` says, less what an earlier pass tried.
    fn take_pass(&mut self, i: usize, owner: Arc<str>, now_ms: u64) {
        let Some(round) = self.insts[i].coord.round.as_mut() else {
            return;
        };
        let listing = round.listing.clone();
        let rows = round.rows.clone();
        // A shard whose row, or an ancestor's, could not be read is left for a later round.
        let mut skip = plan::held_back_by(&listing, &round.unreadable);
        skip.extend(round.reading.iter().cloned());
        skip.extend(round.tried.iter().cloned());
        let to_take = self.takeable(i, &listing, &rows, &skip, &owner, now_ms);
        if let Some(round) = self.insts[i].coord.round.as_mut() {
            round.takes_left = to_take.len();
            round
                .tried
                .extend(to_take.iter().map(|(id, _)| Arc::clone(id)));
        }
        if to_take.is_empty() {
            self.round_over(i);
            return;
        }
        for (id, purpose) in to_take {
            let shard = self.stream.ids[&id];
            let sid = self.next_sid;
            self.next_sid += 1;
            self.sid_inst.insert(sid, (i, self.insts[i].inc));
            let sent = self.now;
            // `take`: where a first owner starts, recorded by the take.
            let recorded = Arc::from(purpose.recorded(self.wall(i)));
            self.send(
                i,
                sid,
                shard,
                OpKind::Acquire,
                Cont::Acquire {
                    shard,
                    sid,
                    sent,
                    take: Take { purpose, recorded },
                },
            );
        }
    }

    /// `Subscription::takeable`: the shards of `listing` that `plan::verdict` says to take,
    /// `skip`, the skipped, the gone and those in a backoff aside, with where each starts; the
    /// shards it says to skip are remembered.
    fn takeable(
        &mut self,
        i: usize,
        listing: &[ShardInfo],
        rows: &Rows,
        skip: &HashSet<Arc<str>>,
        owner: &str,
        now_ms: u64,
    ) -> Vec<(Arc<str>, TakeFor)> {
        let listed = plan::listed(listing);
        let initial = self.cfg.initial.clone();
        let mut takeable = Vec::new();
        for shard in listing {
            let index = self.stream.ids[&shard.id];
            let coord = &mut self.insts[i].coord;
            if skip.contains(&shard.id)
                || coord.skipped.contains(&shard.id)
                || coord.gone.contains(&shard.id)
                || coord
                    .backoff
                    .get(&index)
                    .is_some_and(|&(_, until)| until > self.now)
            {
                continue;
            }
            match plan::verdict(shard, &listed, rows, owner, now_ms, &initial) {
                Verdict::Take { fresh } => {
                    takeable.push((Arc::clone(&shard.id), TakeFor::Reading(fresh)));
                }
                Verdict::Skip => takeable.push((Arc::clone(&shard.id), TakeFor::Skipping)),
                Verdict::Skipped => {
                    coord.skipped.insert(Arc::clone(&shard.id));
                }
                Verdict::Finished | Verdict::WaitForParents | Verdict::HeldElsewhere => {}
            }
        }
        takeable
    }

    /// `Subscription::take` after its acquire answered.
    fn round_acquired(
        &mut self,
        i: usize,
        shard: usize,
        sid: u64,
        sent: Time,
        take: Take,
        res: Res,
    ) {
        let Res::Granted(state) = res else {
            self.take_done(i);
            return;
        };
        let id = self.id(shard);
        // Decided again on the row the take returned: it is the authoritative one.
        match state.checkpoint.as_deref() {
            Some(SHARD_END) => {
                self.insts[i].coord.finished.insert(id);
                self.take_release(i, sid, shard);
            }
            Some(SHARD_SKIPPED) => self.skipped(i, sid, shard),
            // A start another owner recorded, or a checkpoint: later iterators start there too.
            Some(checkpoint) if *checkpoint != *take.recorded => {
                let start = ShardStart::from_checkpoint(&id, checkpoint);
                self.take_positioned(i, shard, sid, sent, start.clone(), start);
            }
            _ => {
                // Recorded before the first read, so an instance that takes the shard over
                // before the first acknowledgement starts no later than this one did.
                let recorded = Arc::clone(&take.recorded);
                self.send(
                    i,
                    sid,
                    shard,
                    OpKind::Checkpoint(recorded),
                    Cont::StartCheckpoint {
                        shard,
                        sid,
                        sent,
                        take,
                    },
                );
            }
        }
    }

    /// `take`: the start checkpoint answered.
    fn start_checkpointed(
        &mut self,
        i: usize,
        shard: usize,
        sid: u64,
        sent: Time,
        take: Take,
        res: Res,
    ) {
        let id = self.id(shard);
        match (res, take.purpose) {
            (Res::Ok, TakeFor::Skipping) => self.skipped(i, sid, shard),
            // The first iterator reads from the position itself (the tip stays the tip), and
            // every later one without a delivered record from the moment recorded for it.
            (Res::Ok, TakeFor::Reading(fresh)) => self.take_positioned(
                i,
                shard,
                sid,
                sent,
                ShardStart::At(fresh),
                ShardStart::from_checkpoint(&id, &take.recorded),
            ),
            // Another instance was faster, or a same-id session's release landed: nothing to
            // hand back.
            (Res::Fenced, _) => self.take_done(i),
            _ => self.take_release(i, sid, shard),
        }
    }

    /// `take` after the row is positioned: `GetShardIterator`, then the reader.
    fn take_positioned(
        &mut self,
        i: usize,
        shard: usize,
        sid: u64,
        sent: Time,
        start: ShardStart,
        resume: ShardStart,
    ) {
        let trimmed = self.stream.shards[shard].trimmed;
        if trimmed || (self.chaos() && self.rng.random_bool(self.cfg.p_kinesis)) {
            self.log(|| format!("i{i} GetShardIterator failed for shard {shard}"));
            if trimmed {
                // `ShardNotFound`: never taken again while it stays out of the listing.
                let id = self.id(shard);
                self.insts[i].coord.gone.insert(id);
            }
            // `take_failed`: the shard waits out a backoff before this instance tries it again.
            self.delay_take(i, shard);
            self.stats.take_backoffs += 1;
            self.take_release(i, sid, shard);
            return;
        }
        self.insts[i].coord.backoff.remove(&shard);
        self.open_session(i, sid, shard, &start, resume, sent);
        self.take_done(i);
    }

    /// `Subscription::delay_take`: `shard` waits out a backoff that doubles with each failure in
    /// a row before this instance tries it again.
    fn delay_take(&mut self, i: usize, shard: usize) {
        let timings = self.cfg.timings;
        let longest = timings.lease().max(timings.listing_interval());
        let failures = self.insts[i]
            .coord
            .backoff
            .get(&shard)
            .map_or(1, |&(failures, _)| failures + 1);
        let ceiling = millis(crate::subscription::take_backoff_ceiling(failures, longest));
        let wait = ms(self.rng.random_range(ceiling / 2..=ceiling));
        self.insts[i]
            .coord
            .backoff
            .insert(shard, (failures, self.now + wait));
    }

    /// `take` found the shard marked never to be read: remembered, handed back, and its children
    /// decided at once.
    fn skipped(&mut self, i: usize, sid: u64, shard: usize) {
        let id = self.id(shard);
        self.stats.skipped += 1;
        let coord = &mut self.insts[i].coord;
        coord.skipped.insert(Arc::clone(&id));
        coord.wake = true;
        if let Some(round) = coord.round.as_mut() {
            round.marked.push(id);
        }
        self.take_release(i, sid, shard);
    }

    /// `take` gives the shard back and reports that it does not read it.
    fn take_release(&mut self, i: usize, sid: u64, shard: usize) {
        self.send(
            i,
            sid,
            shard,
            OpKind::Release {
                cover: None,
                graceful: false,
            },
            Cont::TakeRelease,
        );
    }

    fn take_done(&mut self, i: usize) {
        let Some(round) = self.insts[i].coord.round.as_mut() else {
            return;
        };
        round.takes_left -= 1;
        if round.takes_left > 0 {
            return;
        }
        round.passes += 1;
        if round.marked.is_empty() || round.passes > round.listing.len() {
            self.round_over(i);
            return;
        }
        // Shards were marked never to be read: their children are decided at once.
        for shard in std::mem::take(&mut round.marked) {
            round.rows.insert(shard, Some(LeaseState::skipped()));
        }
        let owner = Arc::clone(&self.insts[i].owner);
        let now_ms = self.wall(i);
        self.take_pass(i, owner, now_ms);
    }

    /// A round ended: the first one starts `run`, every one goes back to its `select!`.
    fn round_over(&mut self, i: usize) {
        let now = self.now;
        let timings = self.cfg.timings;
        let coord = &mut self.insts[i].coord;
        coord.round = None;
        if !coord.looping {
            coord.looping = true;
            coord.next_listing = now + timings.listing_interval();
            coord.next_poll = now + timings.handover_poll_interval();
        }
        self.coord_select(i);
    }

    /// `run` waits in its `select!`: the wake-up is due when a branch is ready.
    fn coord_select(&mut self, i: usize) {
        let polling = !self.cfg.timings.handover_poll_interval().is_zero();
        let token = self.token();
        let jitter = self.jitter();
        let inst = &mut self.insts[i];
        let coord = &mut inst.coord;
        if !coord.looping || coord.exited || coord.round.is_some() || coord.poll.is_some() {
            return;
        }
        let at = if coord.cancelled || coord.wake {
            self.now + jitter
        } else if polling {
            coord.next_listing.min(coord.next_poll)
        } else {
            coord.next_listing
        };
        coord.timer = token;
        let inc = inst.inc;
        self.push(
            at.max(self.now),
            Ev::Round {
                inst: i,
                inc,
                token,
            },
        );
    }

    /// `run`'s `select!` wakes: tokio polls the branches from a random one on, and the first
    /// ready one wins.
    fn coord_fire(&mut self, i: usize) {
        let timings = self.cfg.timings;
        let poll = timings.handover_poll_interval();
        let start = self.rng.random_range(0..4);
        let now = self.now;
        let coord = &mut self.insts[i].coord;
        let ready = [
            coord.cancelled,
            now >= coord.next_listing,
            coord.wake,
            !poll.is_zero() && now >= coord.next_poll,
        ];
        let Some(branch) = (0..4).map(|k| (start + k) % 4).find(|&b| ready[b]) else {
            self.coord_select(i);
            return;
        };
        match branch {
            0 => {
                coord.exited = true;
                self.maybe_exit(i);
            }
            3 => {
                coord.next_poll = now + poll;
                self.start_poll(i);
            }
            _ => {
                if branch == 2 {
                    coord.wake = false;
                }
                coord.next_listing = now + timings.listing_interval();
                self.start_round(i);
            }
        }
    }

    /// `takeable_between_listings`: one `list` while some shard of the last listing waits.
    fn start_poll(&mut self, i: usize) {
        let inst = &self.insts[i];
        let listing = inst.coord.last_listing.clone();
        let reading: HashSet<Arc<str>> = inst.running.keys().map(|&s| self.id(s)).collect();
        let finished = inst.coord.finished.clone();
        let settled = self.settled(i);
        let wanted: Vec<Arc<str>> = plan::rows_to_read(&listing, &reading, &settled, &finished)
            .into_iter()
            .cloned()
            .collect();
        if wanted.is_empty() {
            self.coord_select(i);
            return;
        }
        self.stats.polls += 1;
        self.insts[i].coord.poll = Some(Poll {
            listing,
            reading,
            finished,
            wanted,
        });
        self.send(i, 0, 0, OpKind::List, Cont::Poll);
    }

    /// The poll's `list` answered: a full round when some waiting shard may be taken now; a
    /// failed poll does nothing.
    fn polled(&mut self, i: usize, res: Res) {
        let now_ms = self.wall(i);
        let owner = Arc::clone(&self.insts[i].owner);
        let Some(poll) = self.insts[i].coord.poll.take() else {
            return;
        };
        let Res::Rows(listed_rows) = res else {
            self.coord_select(i);
            return;
        };
        let mut rows = Rows::new();
        for shard in &poll.wanted {
            rows.insert(Arc::clone(shard), None);
        }
        for (shard, row) in listed_rows {
            rows.insert(self.id(shard), Some(row));
        }
        plan::add_finished(&mut rows, &poll.finished);
        let skip: HashSet<Arc<str>> = poll
            .listing
            .iter()
            .filter(|shard| poll.reading.contains(&shard.id) || poll.finished.contains(&shard.id))
            .map(|shard| Arc::clone(&shard.id))
            .collect();
        let takeable = !self
            .takeable(i, &poll.listing, &rows, &skip, &owner, now_ms)
            .is_empty();
        if !takeable {
            self.coord_select(i);
            return;
        }
        self.stats.poll_rounds += 1;
        let listing = self.cfg.timings.listing_interval();
        self.insts[i].coord.next_listing = self.now + listing;
        self.start_round(i);
    }

    fn reader_ended(&mut self, i: usize, shard: usize, finished: bool) {
        let id = self.id(shard);
        let inst = &mut self.insts[i];
        inst.running.remove(&shard);
        if finished {
            inst.coord.finished.insert(id);
        }
        inst.coord.wake = true;
        self.coord_select(i);
        self.maybe_exit(i);
    }

    // ----- one shard's reader: `reader::run` -----------------------------------------------

    fn open_session(
        &mut self,
        i: usize,
        sid: u64,
        shard: usize,
        start: &ShardStart,
        resume: ShardStart,
        sent: Time,
    ) {
        let start_idx = self.stream.index_of(shard, start);
        self.reach(shard, start_idx);
        let timings = self.cfg.timings;
        // `take`: the handle's lease counts from the take's send by both clocks, and so does
        // the first renewal.
        let lease = ShardLease::taken(timings, sent, self.wall_at(i, sent));
        let cancelled = self.insts[i].coord.cancelled;
        let reader_token = self.token();
        let settings = ReadSettings {
            batch_size: u32::try_from(self.cfg.batch).expect("a small batch"),
            poll_interval: self.cfg.poll,
            window: usize::MAX,
        };
        let session = Session {
            shard,
            // `take`: the first iterator at the start it decided; later ones without a record
            // handed out at `resume`.
            machine: ShardMachine::new(lease, settings, start_idx.to_string(), resume),
            // `lease_drive` below asks the machine first.
            lease_task: LeaseTask::InFlight,
            reader: ReaderTask::Waiting,
            reader_token,
            answer: None,
            blocked: None,
            cancelled,
            finish: FinishState::NotYet,
            settled_upto: None,
            start_idx,
            seek_floor: None,
            last_idx: None,
            // A holder stops at `sent + lease - holder_margin` by its own clock.
            deadline: sent + timings.lease() - timings.holder_margin(),
            lost: false,
            cover: None,
        };
        self.log(|| format!("i{i} reads shard {shard} from #{start_idx} as session {sid}"));
        let inst = &mut self.insts[i];
        let inc = inst.inc;
        inst.sessions.insert(sid, session);
        inst.running.insert(shard, sid);
        let jitter = self.jitter();
        self.push(
            self.now + jitter,
            Ev::Reader {
                inst: i,
                inc,
                sid,
                token: reader_token,
            },
        );
        self.lease_drive(i, sid);
    }

    /// `ShardHandle::stop`: the lease ran out by this instance's clock; no more deliveries;
    /// wakes the lease's driver and the reader.
    fn stop(&mut self, i: usize, sid: u64) {
        let Some(s) = self.session(i, sid) else {
            return;
        };
        s.machine.run_out();
        self.lease_wake(i, sid);
        self.reader_wake(i, sid, false);
    }

    /// The reader's cancellation token fires: the reader's `select!` wakes, and drops the call
    /// in flight (the lease's driver does not wait on it: it ends with the lease).
    fn cancel(&mut self, i: usize, sid: u64) {
        let Some(s) = self.session(i, sid) else {
            return;
        };
        if s.cancelled {
            return;
        }
        s.cancelled = true;
        self.reader_wake(i, sid, true);
        self.maybe_end(i, sid);
    }

    /// `reader::run` joins the lease's driver and the reader; then `reader_ended`.
    fn maybe_end(&mut self, i: usize, sid: u64) {
        let Some(s) = self.insts[i].sessions.get(&sid) else {
            return;
        };
        let FinishState::Done { finished } = s.finish else {
            return;
        };
        if s.lease_task != LeaseTask::Done || s.reader != ReaderTask::Done {
            return;
        }
        let shard = s.shard;
        self.insts[i].sessions.remove(&sid);
        self.sid_inst.remove(&sid);
        self.log(|| format!("i{i} session {sid} of shard {shard} ended (finished: {finished})"));
        self.reader_ended(i, shard, finished);
    }

    // `reader::write_lease`: it asks the session's `ShardLease` what to do, sends the write the
    // machine names, hands back its answer, sleeps until the machine's timer or a wake.

    fn lease_drive(&mut self, i: usize, sid: u64) {
        let now = self.now;
        let wall = self.wall(i);
        let token = self.token();
        let inc = self.insts[i].inc;
        let Some(s) = self.session(i, sid) else {
            return;
        };
        match s.machine.next_write(now, wall) {
            Next::Send(write) => {
                s.lease_task = LeaseTask::InFlight;
                let kind = match &write {
                    Write::Renew => OpKind::Renew,
                    Write::Checkpoint(checkpoint) => {
                        OpKind::CheckpointRenew(Arc::clone(checkpoint))
                    }
                    Write::Final(checkpoint) => OpKind::Checkpoint(Arc::clone(checkpoint)),
                    Write::Release => {
                        let graceful = s.finish == (FinishState::Closing { end: false });
                        OpKind::Release {
                            cover: if graceful { s.cover } else { None },
                            graceful,
                        }
                    }
                };
                let shard = s.shard;
                self.send(
                    i,
                    sid,
                    shard,
                    kind,
                    Cont::Lease {
                        sid,
                        write,
                        sent: now,
                    },
                );
            }
            Next::Wait(until) => {
                s.lease_task = LeaseTask::Waiting(token);
                if let Some(at) = until {
                    self.push(
                        at.max(now),
                        Ev::Lease {
                            inst: i,
                            inc,
                            sid,
                            token,
                        },
                    );
                }
            }
            Next::Ended(ending) => {
                s.lease_task = LeaseTask::Done;
                if let FinishState::Closing { end } = s.finish {
                    // `ShardHandle::close` returns with the ending.
                    let finished = end && ending == (Ending::Closed { written: true });
                    s.finish = FinishState::Done { finished };
                }
                if matches!(ending, Ending::Lost(_)) {
                    // The lost lease ends the shard's other tasks (`halted` wakes the reader).
                    self.reader_wake(i, sid, false);
                    self.cancel(i, sid);
                }
                self.maybe_end(i, sid);
            }
        }
    }

    /// `handle.wake.notify_one()`: a waiting driver's `select!` wakes; a busy one asks the
    /// machine again anyway once its write answered.
    fn lease_wake(&mut self, i: usize, sid: u64) {
        let token = self.token();
        let jitter = self.jitter();
        let inc = self.insts[i].inc;
        let Some(s) = self.session(i, sid) else {
            return;
        };
        if let LeaseTask::Waiting(_) = s.lease_task {
            s.lease_task = LeaseTask::Woken(token);
            self.push(
                self.now + jitter,
                Ev::Lease {
                    inst: i,
                    inc,
                    sid,
                    token,
                },
            );
        }
    }

    fn lease_woken(&mut self, i: usize, sid: u64, token: u64) {
        let Some(s) = self.session(i, sid) else {
            return;
        };
        if matches!(s.lease_task, LeaseTask::Waiting(t) | LeaseTask::Woken(t) if t == token) {
            self.lease_drive(i, sid);
        }
    }

    /// The store answered a write of the lease's driver, sent at `sent`.
    fn lease_answered(&mut self, i: usize, sid: u64, write: &Write, sent: Time, res: &Res) {
        let timings = self.cfg.timings;
        let now = self.now;
        let Some(s) = self.insts[i].sessions.get_mut(&sid) else {
            return;
        };
        let answer = match res {
            Res::Ok => Answer::Done,
            Res::Fenced => Answer::Refused,
            _ => Answer::Failed,
        };
        if matches!(write, Write::Renew | Write::Checkpoint(_)) {
            match answer {
                // The ghost: the grant this session heard of.
                Answer::Done => {
                    s.deadline = s
                        .deadline
                        .max(sent + timings.lease() - timings.holder_margin());
                }
                Answer::Refused => {
                    s.lost = true;
                    if *write == Write::Renew {
                        self.stats.refused_renewals += 1;
                    }
                }
                Answer::Failed => {}
            }
        }
        let held = !s.machine.is_lost();
        s.machine.write_answered(now, answer);
        if held && s.machine.ending() == Some(Ending::Lost(Lost::RanOut)) {
            self.stats.lapsed_by_clock += 1;
        }
        self.lease_drive(i, sid);
    }

    // `Reader::read`: it asks the session's machine what to do, makes the Kinesis call it names
    // (answered by the simulated stream a moment later), hands out the record it names (waiting
    // for room in the channel), or sleeps until the machine's timer or a wake.

    /// `handle.read_wake.notify_one()` (or the cancel, `cancel`): a waiting reader's `select!`
    /// wakes; a blocked one's too on the cancel, and a calling one drops its call.
    fn reader_wake(&mut self, i: usize, sid: u64, cancel: bool) {
        let token = self.token();
        let jitter = self.jitter();
        let inc = self.insts[i].inc;
        let Some(s) = self.session(i, sid) else {
            return;
        };
        let wakes = match s.reader {
            ReaderTask::Waiting => true,
            ReaderTask::Calling | ReaderTask::Blocked => cancel,
            ReaderTask::Done => false,
        };
        if wakes {
            s.reader_token = token;
            self.push(
                self.now + jitter,
                Ev::Reader {
                    inst: i,
                    inc,
                    sid,
                    token,
                },
            );
        }
    }

    /// The reader's pending wake-up fired: its timer, a wake, the answer of its call, or room in
    /// the channel.
    fn reader_woken(&mut self, i: usize, sid: u64) {
        let capacity = self.cfg.channel;
        let cancelled = self.session(i, sid).is_some_and(|s| s.cancelled);
        let coin: u64 = self.rng.random_range(0..=u64::MAX);
        let now = self.now;
        let inst = &mut self.insts[i];
        let Some(s) = inst.sessions.get_mut(&sid) else {
            return;
        };
        match s.reader {
            ReaderTask::Done => return,
            ReaderTask::Calling => {
                let answer = s.answer.take().expect("a call in flight has its answer");
                if cancelled {
                    // The cancel won the `select!`: the call is dropped.
                    s.machine.cancel_reading();
                } else {
                    s.machine.read_answered(now, answer, coin);
                }
            }
            ReaderTask::Blocked => {
                if cancelled {
                    // Dropped unsent: the message's drop hands it back (`KinesisMessage`'s
                    // `Drop`), where it stays unsettled: the redelivery task ends with the cancel.
                    let msg = s
                        .blocked
                        .take()
                        .expect("a blocked reader holds its delivery");
                    let record = SimRecord {
                        idx: msg.idx,
                        sequence: Arc::from(
                            self.stream.shards[msg.shard].records[msg.idx].to_string(),
                        ),
                    };
                    s.machine
                        .hand_back(now, record, msg.ticket, 1, Duration::ZERO, false);
                    s.machine.cancel_reading();
                } else if inst.channel.len() < capacity {
                    let msg = s
                        .blocked
                        .take()
                        .expect("a blocked reader holds its delivery");
                    inst.channel.push_back(msg);
                    self.dispatch_soon(i);
                } else {
                    return;
                }
            }
            ReaderTask::Waiting => {
                if cancelled {
                    s.machine.cancel_reading();
                }
            }
        }
        self.reader_drive(i, sid);
    }

    /// Executes what the machine asks until it waits, calls, blocks or finishes.
    fn reader_drive(&mut self, i: usize, sid: u64) {
        loop {
            let now = self.now;
            let wall = self.wall(i);
            let capacity = self.cfg.channel;
            let token = self.token();
            let inc = self.insts[i].inc;
            let Some(s) = self.insts[i].sessions.get_mut(&sid) else {
                return;
            };
            let was_halted = s.machine.is_halted();
            let step = s.machine.next_read(now, wall);
            match step {
                ReadStep::Call(call) => {
                    let shard = s.shard;
                    let answer = self.kinesis_answer(i, sid, shard, &call);
                    let latency = ms(self.rng.random_range(1..=30));
                    let Some(s) = self.session(i, sid) else {
                        return;
                    };
                    s.answer = Some(answer);
                    s.reader = ReaderTask::Calling;
                    s.reader_token = token;
                    self.push(
                        now + latency,
                        Ev::Reader {
                            inst: i,
                            inc,
                            sid,
                            token,
                        },
                    );
                    return;
                }
                ReadStep::Deliver(record, ticket) => {
                    let shard = s.shard;
                    let msg = Msg {
                        sid,
                        shard,
                        idx: record.idx,
                        ticket,
                        redelivery: false,
                    };
                    self.handover_step(shard, sid, Step::Read);
                    let inst = &mut self.insts[i];
                    let Some(s) = inst.sessions.get_mut(&sid) else {
                        return;
                    };
                    if inst.channel.len() >= capacity {
                        s.blocked = Some(msg);
                        s.reader = ReaderTask::Blocked;
                        return;
                    }
                    inst.channel.push_back(msg);
                    self.dispatch_soon(i);
                }
                ReadStep::Wait(until) => {
                    s.reader = ReaderTask::Waiting;
                    s.reader_token = token;
                    if let Some(at) = until {
                        self.push(
                            at.max(now),
                            Ev::Reader {
                                inst: i,
                                inc,
                                sid,
                                token,
                            },
                        );
                    }
                    return;
                }
                ReadStep::Finish(stop) => {
                    s.reader = ReaderTask::Done;
                    if stop == Stop::Lost && !was_halted {
                        self.stats.lapsed_by_clock += 1;
                    }
                    self.reader_finish(i, sid, stop);
                    return;
                }
            }
        }
    }

    /// The simulated stream's answer to `call` of session `sid` on `shard`: faults during the
    /// chaos phase, an expired iterator now and then, `ResourceNotFoundException` once retention
    /// trimmed the shard. An iterator is the index of the record it reads next.
    fn kinesis_answer(
        &mut self,
        i: usize,
        sid: u64,
        shard: usize,
        call: &Call,
    ) -> Fetch<SimRecord> {
        let chaos = self.chaos();
        if self.stream.shards[shard].trimmed {
            self.stats.gone += 1;
            return Fetch::Gone;
        }
        match call {
            Call::GetRecords(iterator) => {
                if chaos && self.rng.random_bool(self.cfg.p_kinesis) {
                    return Fetch::Failed;
                }
                if self.rng.random_bool(self.cfg.p_expire) {
                    self.stats.expired += 1;
                    return Fetch::Expired;
                }
                let from: usize = iterator.parse().expect("a simulated iterator");
                let sim = &self.stream.shards[shard];
                let len = sim.records.len();
                let end = (from + self.cfg.batch).min(len);
                let records = (from..end)
                    .map(|idx| SimRecord {
                        idx,
                        sequence: Arc::from(sim.records[idx].to_string()),
                    })
                    .collect();
                Fetch::Records {
                    records,
                    next: (!(sim.info.closed && end == len)).then(|| end.to_string()),
                    millis_behind: Some(if end < len { 1_000 } else { 0 }),
                }
            }
            Call::GetIterator(start) => {
                if chaos && self.rng.random_bool(self.cfg.p_iterator_fails) {
                    return Fetch::IteratorFailed;
                }
                let idx = self.stream.index_of(shard, start);
                if !matches!(start, ShardStart::After(_))
                    && let Some(s) = self.session(i, sid)
                {
                    // The ghost: where the session starts again.
                    s.start_idx = idx;
                }
                Fetch::Iterator(idx.to_string())
            }
        }
    }

    /// `Reader::finish`: hands the shard back as the stop says.
    fn reader_finish(&mut self, i: usize, sid: u64, stop: Stop) {
        let Some(s) = self.session(i, sid) else {
            return;
        };
        let shard = s.shard;
        match stop {
            // No iterator could be had: handed back unread, not finished, and left to a backoff.
            Stop::Unreadable => {
                self.stats.unreadable += 1;
                self.delay_take(i, shard);
            }
            // Left the stream: released, and never taken again while it stays out of it.
            Stop::Gone => {
                let id = self.id(shard);
                self.insts[i].coord.gone.insert(id);
            }
            Stop::Ended | Stop::Cancelled | Stop::Lost => {}
        }
        match stop.close() {
            None => {
                let Some(s) = self.session(i, sid) else {
                    return;
                };
                s.finish = FinishState::Done { finished: false };
                self.cancel(i, sid);
                self.maybe_end(i, sid);
            }
            Some(how) => self.close(i, sid, how == Close::Finished),
        }
    }

    /// Both ends of `finish`: cancel, then `ShardHandle::close`, whose writes the lease's
    /// driver sends after the one in flight.
    fn close(&mut self, i: usize, sid: u64, end: bool) {
        let Some(s) = self.session(i, sid) else {
            return;
        };
        s.finish = FinishState::Closing { end };
        self.cancel(i, sid);
        let Some(s) = self.session(i, sid) else {
            return;
        };
        s.machine
            .close(if end { Close::Finished } else { Close::Release });
        if s.machine.ending().is_some() {
            // Lost before the close: nothing is written.
            s.finish = FinishState::Done { finished: false };
            self.maybe_end(i, sid);
            return;
        }
        self.lease_wake(i, sid);
    }

    // ----- the runtime: channel, filter, handlers -------------------------------------------

    fn dispatch_soon(&mut self, i: usize) {
        let inst = &mut self.insts[i];
        if !inst.dispatch_pending {
            inst.dispatch_pending = true;
            let inc = inst.inc;
            self.push(self.now, Ev::Dispatch { inst: i, inc });
        }
    }

    fn dispatch(&mut self, i: usize) {
        self.insts[i].dispatch_pending = false;
        if self.insts[i].shutting_down {
            return;
        }
        let mut popped = false;
        while self.insts[i].in_flight < self.cfg.workers {
            let Some(msg) = self.insts[i].channel.pop_front() else {
                break;
            };
            popped = true;
            if !self.current(i, msg) {
                self.stats.filtered += 1;
                // Dropped by the filter: handed back to a stopped shard, which forgets it.
                self.forget(i, msg);
                continue;
            }
            self.pulled(i, msg);
            if self.failure.is_some() {
                return;
            }
            self.insts[i].in_flight += 1;
            if self.rng.random_bool(self.cfg.p_hold) {
                // The runtime holds it in a lane behind a slow handler.
                let held = ms(self
                    .rng
                    .random_range(1..=millis(self.cfg.timings.lease()) * 3 / 2));
                let inc = self.insts[i].inc;
                self.push(self.now + held, Ev::HandlerStart { inst: i, inc, msg });
            } else {
                self.handler_start(i, msg);
            }
            if self.failure.is_some() {
                return;
            }
        }
        if popped {
            // A sender blocked on the full channel gets its room.
            let blocked: Vec<u64> = self.insts[i]
                .sessions
                .iter()
                .filter(|(_, s)| s.reader == ReaderTask::Blocked)
                .map(|(&sid, _)| sid)
                .collect();
            let inc = self.insts[i].inc;
            for sid in blocked {
                let token = self.token();
                if let Some(s) = self.session(i, sid) {
                    s.reader_token = token;
                }
                let jitter = self.jitter();
                self.push(
                    self.now + jitter,
                    Ev::Reader {
                        inst: i,
                        inc,
                        sid,
                        token,
                    },
                );
            }
        }
    }

    /// A delivery reaches the runtime's call of its handler: `KinesisMessage::decode_error`
    /// withholds it when its shard stopped or its lease ran out by this instance's clock (and
    /// that settlement moves no checkpoint); otherwise the handler runs.
    fn handler_start(&mut self, i: usize, msg: Msg) {
        let now = self.now;
        let wall = self.wall(i);
        if self.cfg.handler_checks_lease {
            let drops_stale = self.cfg.seek_drops_stale;
            // `ShardHandle::check`, the machine's `standing`.
            let withheld = match self.insts[i].sessions.get_mut(&msg.sid) {
                None => Some(false),
                Some(s) => match s.machine.standing(msg.ticket, now, wall) {
                    Standing::Stopped => Some(false),
                    Standing::RanOut => Some(true),
                    // A seek since it was read: its position delivers what follows it.
                    Standing::Stale if drops_stale => Some(false),
                    Standing::Stale | Standing::Current => None,
                },
            };
            if let Some(lapsed) = withheld {
                self.stats.withheld += 1;
                if lapsed {
                    self.stop(i, msg.sid);
                }
                self.forget(i, msg);
                self.insts[i].in_flight -= 1;
                self.after_handler(i);
                return;
            }
        }
        self.deliver(i, msg);
        if self.failure.is_some() {
            return;
        }
        let took = match self.rng.random_range(0..20) {
            0 => ms(self.rng.random_range(3_000..=15_000)),
            1..=5 => ms(self.rng.random_range(200..=3_000)),
            _ => ms(self.rng.random_range(1..=200)),
        };
        let inc = self.insts[i].inc;
        self.push(self.now + took, Ev::Handler { inst: i, inc, msg });
    }

    /// `ShardHandle::forget`: a delivery that never reached its handler (or came back to a
    /// stopped shard) moves nothing, and no longer counts as in flight.
    fn forget(&mut self, i: usize, msg: Msg) {
        let wake = self
            .session(i, msg.sid)
            .is_some_and(|s| s.machine.forget(msg.ticket));
        if wake {
            self.reader_wake(i, msg.sid, false);
        }
    }

    /// What a handler slot does once free: the graceful stop drops the subscription once its
    /// handlers are done, else the next delivery is dispatched.
    fn after_handler(&mut self, i: usize) {
        let inst = &self.insts[i];
        if inst.shutting_down {
            if inst.in_flight == 0 && !inst.dropped {
                self.drop_subscriber(i);
            }
        } else {
            self.dispatch_soon(i);
        }
    }

    /// `subscriber.rs`'s `current()`: whether a delivery may still reach a handler.
    fn current(&mut self, i: usize, msg: Msg) -> bool {
        let now = self.now;
        let wall = self.wall(i);
        let checks_lease = self.cfg.filter_checks_lease;
        let drops_stale = self.cfg.seek_drops_stale;
        let Some(s) = self.session(i, msg.sid) else {
            return false;
        };
        let stale = s.machine.generation() != msg.ticket.generation;
        if s.machine.is_halted() || (stale && drops_stale) {
            return false;
        }
        if checks_lease && !s.machine.may_deliver(now, wall) {
            // `may_deliver`: the lease ran out by our clock; stop the shard for good.
            self.stop(i, msg.sid);
            return false;
        }
        true
    }

    /// The runtime pulled a delivery from the subscription: the checks of invariants 4 and 5
    /// (the broker hands a shard's records out in order, a child's after its parents ended, and
    /// none a graceful stop covered).
    fn pulled(&mut self, i: usize, msg: Msg) {
        let parents_done = self.stream.shards[msg.shard]
            .parents
            .iter()
            .all(|&p| self.parent_done(p));
        let Some(s) = self.insts[i].sessions.get_mut(&msg.sid) else {
            return;
        };
        let expected = s.last_idx.map_or(s.start_idx, |last| last + 1);
        if !msg.redelivery {
            s.last_idx = Some(msg.idx);
        }
        // A seek back delivers again on purpose what a graceful stop had covered (and lowers
        // the cover for the owners after it).
        let seeked = s.seek_floor.is_some();
        let shard = msg.shard;
        let idx = msg.idx;
        if idx != expected && !msg.redelivery {
            self.fail(format!(
                "order: session {} delivered shard {shard} #{idx} where #{expected} was next",
                msg.sid
            ));
        } else if !parents_done {
            self.fail(format!(
                "order: shard {shard} #{idx} delivered before every parent reached SHARD_END"
            ));
        }
        let g = &mut self.ghost[shard];
        let first_upto = g.first_upto;
        let covered = g.covered_upto;
        match idx.cmp(&first_upto) {
            Ordering::Equal => g.first_upto += 1,
            Ordering::Less => self.stats.redeliveries += 1,
            // Passing over records never delivered: only where none is owed (before where the
            // application starts the shard, or skipped by a seek).
            Ordering::Greater => match (first_upto..idx).find(|&k| g.owed[k]) {
                None => g.first_upto = idx + 1,
                Some(skipped) => self.fail(format!(
                    "order: the first delivery of shard {shard} #{idx} (session {}) came \
                     before that of #{skipped}, which is owed",
                    msg.sid
                )),
            },
        }
        if idx < covered && !seeked {
            self.fail(format!(
                "graceful: shard {shard} #{idx} delivered again after a graceful stop had \
                 checkpointed it (covered below #{covered})"
            ));
        }
    }

    /// A record reaches a handler: the checks of invariant 1c, where the handler starts.
    fn deliver(&mut self, i: usize, msg: Msg) {
        let now = self.now;
        let holder = self.rows[msg.shard].holder;
        let owner = Arc::clone(&self.insts[i].owner);
        let Some(s) = self.insts[i].sessions.get(&msg.sid) else {
            return;
        };
        let (deadline, lost) = (s.deadline, s.lost);
        let stale = s.machine.generation() != msg.ticket.generation;
        let shard = msg.shard;
        let idx = msg.idx;
        if stale {
            self.fail(format!(
                "seek: shard {shard} #{idx}, read before a seek of session {}, reached a handler \
                 after the seek returned",
                msg.sid
            ));
            return;
        }
        self.stats.deliveries += 1;
        self.log(|| format!("{owner} delivers shard {shard} #{idx}"));
        if holder != Some(msg.sid) {
            self.fail(format!(
                "fencing: {owner} (session {}) delivered shard {shard} #{idx} while session \
                 {holder:?} holds the row",
                msg.sid
            ));
        } else if now >= deadline || lost {
            self.fail(format!(
                "fencing: {owner} (session {}) delivered shard {shard} #{idx} after its lease \
                 ran out by its own clock at {} (or was refused: {lost})",
                msg.sid,
                secs(deadline)
            ));
        }
        self.handover_step(shard, msg.sid, Step::Delivery);
    }

    fn handler_done(&mut self, i: usize, msg: Msg) {
        self.insts[i].in_flight -= 1;
        if self.seeks_left > 0 && self.rng.random_bool(self.cfg.p_seek) {
            self.seeks_left -= 1;
            self.handler_seeks(i, msg);
        }
        if self.rng.random_bool(self.cfg.p_retry) {
            // `nack(true)` (or dropped unsettled): `ShardHandle::hand_back` keeps it unsettled,
            // and the redelivery task sends it again on its session, unless the shard stopped.
            self.stats.handed_back += 1;
            if !self.cfg.handed_back_comes_back {
                // The copy is handled somewhere; the delivery itself is never settled.
                self.mark_acked(msg.shard, msg.idx);
                self.after_handler(i);
                return;
            }
            // `hand_back`: a delivery of a stopped shard, or one a seek made stale, is forgotten;
            // the redelivery task sends a kept one again once due (at once here).
            let now = self.now;
            let wall = self.wall(i);
            let sequence = Arc::from(self.stream.shards[msg.shard].records[msg.idx].to_string());
            let record = SimRecord {
                idx: msg.idx,
                sequence,
            };
            let Some(s) = self.insts[i].sessions.get_mut(&msg.sid) else {
                self.after_handler(i);
                return;
            };
            match s
                .machine
                .hand_back(now, record, msg.ticket, 1, Duration::ZERO, false)
            {
                HandedBack::Kept => match s.machine.next_redelivery(now, wall) {
                    Redeliver::Deliver(again) => {
                        self.insts[i].channel.push_back(Msg {
                            idx: again.record.idx,
                            ticket: again.ticket,
                            redelivery: true,
                            ..msg
                        });
                    }
                    Redeliver::Halted => self.stop(i, msg.sid),
                    Redeliver::Wait(_) => unreachable!("handed back due at once"),
                },
                HandedBack::Forgotten { wake_reader } => {
                    if wake_reader {
                        self.reader_wake(i, msg.sid, false);
                    }
                }
                HandedBack::Refused => unreachable!("the simulated broker does not shut down"),
            }
            self.after_handler(i);
            return;
        }
        self.mark_acked(msg.shard, msg.idx);
        // `ShardHandle::settle`.
        let records = &self.stream.shards[msg.shard].records;
        if let Some(s) = self.insts[i].sessions.get_mut(&msg.sid) {
            // Refused once no checkpoint of the shard will be written any more.
            if let Ok(settled) = s.machine.settle(msg.ticket, false) {
                if let Some(upto) = &settled.grown_to {
                    let seq: u64 = upto.parse().expect("a sequence number");
                    s.settled_upto = records.binary_search(&seq).ok();
                }
                if settled.checkpoint {
                    self.lease_wake(i, msg.sid);
                }
                if settled.wake_reader {
                    self.reader_wake(i, msg.sid, false);
                }
            }
        }
        self.after_handler(i);
    }

    /// The handler of `msg` seeks its shard (`KinesisSeeker::seek` to a record a few before or
    /// after its own, through the `SeekHandle` of its context), then finishes. `seek_live`
    /// resolves the iterator first (a failure moves nothing), then resets the shard's watermark
    /// (its pending checkpoint and the records waiting to come back go) and restarts its reader
    /// at the target, a draining one included.
    fn handler_seeks(&mut self, i: usize, msg: Msg) {
        let shard = msg.shard;
        let Some(&sid) = self.insts[i].running.get(&shard) else {
            // Not read by this instance any more: the seek is refused.
            return;
        };
        if self.chaos() && self.rng.random_bool(self.cfg.p_kinesis) {
            self.stats.seeks_failed += 1;
            return;
        }
        let len = self.stream.shards[shard].records.len();
        let target = self
            .rng
            .random_range(msg.idx.saturating_sub(4)..=(msg.idx + 4).min(len - 1));
        let seq = self.stream.shards[shard].records[target];
        let id = self.id(shard);
        let start = ShardStart::At(KinesisPosition::at_sequence(
            Arc::clone(&id),
            seq.to_string(),
        ));
        let Some(s) = self.session(i, sid) else {
            return;
        };
        if s.cancelled || s.machine.is_halted() {
            return;
        }
        // `seek_live` resolved the iterator (here: the target's index); `ShardHandle::seek`.
        let restarts = s.machine.seek(target.to_string(), start);
        s.settled_upto = None;
        let floor = Mark::Seq(seq);
        s.seek_floor = Some(s.seek_floor.map_or(floor, |known| known.min(floor)));
        self.stats.seeks += 1;
        self.log(|| format!("i{i} seeks shard {shard} (session {sid}) to #{target}"));
        if !restarts {
            return;
        }
        // What the seek skips forward is not owed any more; what it goes back over is read again.
        for idx in 0..target {
            if self.waive(shard, idx) {
                self.stats.waived += 1;
            }
        }
        let g = &mut self.ghost[shard];
        // What a graceful stop covered is read again from the target, by this owner and, once
        // its checkpoint moved back, by the next one.
        g.covered_upto = g.covered_upto.min(target);
        let Some(s) = self.session(i, sid) else {
            return;
        };
        s.start_idx = target;
        s.last_idx = None;
        self.reader_wake(i, sid, false);
    }

    // ----- liveness -------------------------------------------------------------------------

    /// Session `sid` of another owner than the one that released `shard` gracefully made its
    /// next step: counted once per step, under this schedule's poll setting.
    fn handover_step(&mut self, shard: usize, sid: u64, step: Step) {
        let Some(mut handover) = self.ghost[shard].handover else {
            return;
        };
        if handover.from == sid {
            return;
        }
        let done = match step {
            Step::Take => std::mem::replace(&mut handover.taken, true),
            Step::Read => std::mem::replace(&mut handover.read, true),
            Step::Delivery => false,
        };
        if done {
            return;
        }
        self.ghost[shard].handover = (step != Step::Delivery).then_some(handover);
        let took = millis(self.now.saturating_sub(handover.at));
        let quiet = handover.at >= self.live_from && handover.taker_ready;

        let handovers = if self.cfg.timings.handover_poll_interval().is_zero() {
            &mut self.stats.handovers_unpolled
        } else {
            &mut self.stats.handovers_polled
        };
        handovers.record(step, took, quiet);
    }

    /// Whether `shard` no longer holds its children back: read to its end, trimmed out of the
    /// stream, or never to be read (`plan`'s lineage rule).
    fn parent_done(&self, shard: usize) -> bool {
        let row = self.rows[shard].state.as_ref();
        row.is_some_and(|row| row.is_finished() || row.is_skipped())
            || self.stream.shards[shard].trimmed
    }

    /// Retention trimmed `shard`'s lineage unread: its children not taken yet are owed again only
    /// from their first take on.
    fn unreach(&mut self, shard: usize) {
        for child in self.stream.children(shard) {
            let opened = self.rows[child].state.is_some();
            // A merge child of a parent the application read starts at its beginning.
            let read_parent = self.stream.shards[child]
                .parents
                .iter()
                .any(|&p| p != shard && (self.ghost[p].reached || self.rows[p].state.is_some()));
            if opened || read_parent || !self.ghost[child].reached {
                continue;
            }
            self.ghost[child].reached = false;
            for idx in 0..self.ghost[child].owed.len() {
                if self.waive(child, idx) {
                    self.stats.trimmed_unread += 1;
                }
            }
            self.unreach(child);
        }
    }

    /// Whether the application never reads `shard`, by the rules: trimmed, marked skipped, or
    /// closed before the application reached it (and not yet marked).
    fn never_read(&self, shard: usize) -> bool {
        let row = self.rows[shard].state.as_ref();
        self.stream.shards[shard].trimmed
            || row.is_some_and(LeaseState::is_skipped)
            || (row.is_none() && self.skippable(shard))
    }

    /// Invariant 7, no wedge, once every owed record was acked and the checkpoints had time to
    /// catch up: every open shard's checkpoint is at its last owed record, and every closed
    /// shard the application reads is at `SHARD_END` (its children may start).
    fn check_no_wedge(&self) -> Option<Failure> {
        for (shard, sim) in self.stream.shards.iter().enumerate() {
            let row = self.rows[shard].state.as_ref();
            let mark = Mark::of(row.and_then(|row| row.checkpoint.as_deref()));
            let never_read = self.never_read(shard);
            let last_owed = (0..sim.records.len())
                .rev()
                .find(|&idx| self.ghost[shard].owed[idx])
                .map(|idx| sim.records[idx]);
            let wedged = if never_read {
                false
            } else if sim.info.closed {
                mark != Mark::End
            } else {
                last_owed.is_some_and(|last| mark < Mark::Seq(last))
            };
            if wedged {
                return Some(Failure {
                    at: self.now,
                    message: format!(
                        "no wedge: every record is acked, but shard {shard} ({}, {} records) has \
                         its checkpoint at {mark:?}",
                        if sim.info.closed { "closed" } else { "open" },
                        sim.records.len()
                    ),
                });
            }
        }
        None
    }

    fn liveness_bound(&self) -> Duration {
        let t = &self.cfg.timings;
        t.lease() + SKEW_TOLERANCE + self.cfg.skew + t.listing_interval() + Duration::from_secs(1)
    }

    /// The bound for a shard that lost its reader at `since`: with the handover poll on, one poll
    /// interval instead of a listing interval (`LeaseTimings` says so) once every instance listed
    /// the shard, that is a listing interval after it was made or the quiet phase began.
    fn liveness_bound_for(&self, shard: usize, since: Time) -> Duration {
        let t = &self.cfg.timings;
        let poll = t.handover_poll_interval();
        let listed_by_all = self.ghost[shard].created_at.max(self.live_from)
            + t.listing_interval()
            + Duration::from_secs(1);
        if poll.is_zero() || since < listed_by_all {
            return self.liveness_bound();
        }
        t.lease() + SKEW_TOLERANCE + self.cfg.skew + poll + Duration::from_secs(1)
    }

    fn check_liveness(&mut self) {
        if self.now < self.live_from || self.now < self.last_live_check + ms(100) {
            return;
        }
        self.last_live_check = self.now;
        for shard in 0..self.stream.shards.len() {
            let finished = |rows: &[Row], s: usize| {
                rows[s].state.as_ref().is_some_and(LeaseState::is_finished)
            };
            let never_read = self.never_read(shard);
            let eligible = !finished(&self.rows, shard)
                && !never_read
                && self.stream.shards[shard]
                    .parents
                    .iter()
                    .all(|&p| self.parent_done(p));
            let served = self.insts.iter().any(|inst| {
                inst.alive
                    && inst
                        .running
                        .get(&shard)
                        .and_then(|sid| inst.sessions.get(sid))
                        .is_some_and(|s| !s.machine.is_halted() && !s.cancelled)
            });
            if eligible && !served {
                let since = *self.ghost[shard].unserved_since.get_or_insert(self.now);
                let bound = self.liveness_bound_for(shard, since);
                let waited = self.now.saturating_sub(since);
                let permille = u64::try_from(waited.as_micros() * 1000 / bound.as_micros())
                    .unwrap_or(u64::MAX);
                self.stats.worst_recovery_permille =
                    self.stats.worst_recovery_permille.max(permille);
                if waited > bound {
                    self.fail(format!(
                        "liveness: shard {shard} has had no reader since {} (bound {bound:?})",
                        secs(since)
                    ));
                    return;
                }
            } else {
                self.ghost[shard].unserved_since = None;
            }
        }
    }
}

// ----- the runner ---------------------------------------------------------------------------

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

type Tweak = dyn Fn(&mut Config, &mut StdRng) + Sync;

fn no_tweak(_: &mut Config, _: &mut StdRng) {}

/// Runs one schedule; on failure runs it again with a trace and returns the report.
fn run_seed(seed: u64, tweak: &Tweak) -> Result<Stats, String> {
    let mut sim = Sim::new(seed, tweak);
    match sim.run() {
        Ok(stats) => Ok(stats),
        Err(_) => {
            let mut sim = Sim::new(seed, tweak);
            sim.trace = Some(VecDeque::new());
            let failure = sim
                .run()
                .expect_err("a replay fails the same way: the simulation is deterministic");
            let mut report = format!(
                "seed={seed}: {}\n  at {} s of virtual time\n  config: {:?}\n  last events:\n",
                failure.message,
                failure.at.as_secs_f64(),
                sim.cfg
            );
            for line in sim.trace.iter().flatten() {
                let _ = writeln!(report, "    {line}");
            }
            let _ = write!(
                report,
                "  replay: SIM_SEED={seed} cargo test -p ruststream-kinesis --all-features --lib \
                 coordinator::simulation"
            );
            Err(report)
        }
    }
}

/// Runs `count` schedules from `base` on every core; the first failure, if any.
fn run_many(base: u64, count: u64, tweak: &Tweak) -> (Stats, Option<String>) {
    let next = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let total = Mutex::new(Stats::default());
    let failure: Mutex<Option<(u64, String)>> = Mutex::new(None);
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get().min(8));
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                let mut mine = Stats::default();
                while !stop.load(Atomic::Relaxed) {
                    let n = next.fetch_add(1, Atomic::Relaxed);
                    if n >= count {
                        break;
                    }
                    let seed = base.wrapping_add(n);
                    match run_seed(seed, tweak) {
                        Ok(stats) => mine.add(&stats),
                        Err(report) => {
                            stop.store(true, Atomic::Relaxed);
                            let mut slot = failure.lock().unwrap_or_else(PoisonError::into_inner);
                            if slot.as_ref().is_none_or(|(s, _)| seed < *s) {
                                *slot = Some((seed, report));
                            }
                        }
                    }
                }
                total
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .add(&mine);
            });
        }
    });
    let total = total.into_inner().unwrap_or_else(PoisonError::into_inner);
    let failure = failure
        .into_inner()
        .unwrap_or_else(PoisonError::into_inner)
        .map(|(_, report)| report);
    (total, failure)
}

fn base_seed() -> u64 {
    env_u64("SIM_BASE_SEED").unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
    })
}

#[test]
fn random_schedules_keep_the_lease_invariants() {
    if let Some(seed) = env_u64("SIM_SEED") {
        if std::env::var_os("SIM_TRACE").is_some() {
            let mut sim = Sim::new(seed, &no_tweak);
            sim.trace = Some(VecDeque::new());
            sim.full_trace = true;
            let outcome = sim.run();
            println!("seed={seed}: {:?}", outcome.map_err(|f| f.message));
        }
        match run_seed(seed, &no_tweak) {
            Ok(stats) => println!("seed={seed}: ok, {stats:?}"),
            Err(report) => panic!("{report}"),
        }
        return;
    }
    let count = env_u64("SIM_SCHEDULES").unwrap_or(DEFAULT_SCHEDULES);
    let base = base_seed();
    let started = std::time::Instant::now();
    let (stats, failure) = run_many(base, count, &no_tweak);
    if let Some(report) = failure {
        panic!("{report}");
    }
    println!(
        "{} schedules from base seed {base} in {:.1?}: {stats:?}",
        stats.schedules,
        started.elapsed()
    );
    for (poll, h) in [
        ("on", &stats.handovers_polled),
        ("off", &stats.handovers_unpolled),
    ] {
        println!(
            "graceful handovers, poll {poll}: {} (release landed -> next owner's take / first \
             record read / first delivery): worst {} / {} / {} ms, mean delivery {} ms; in quiet \
             phases with a taker up: worst {} / {} / {} ms",
            h.count,
            h.take_max_ms,
            h.read_max_ms,
            h.delivery_max_ms,
            h.delivery_sum_ms / h.count.max(1),
            h.quiet_take_max_ms,
            h.quiet_read_max_ms,
            h.quiet_delivery_max_ms,
        );
    }
    assert_eq!(stats.schedules, count);
    // The faults were exercised, not only scheduled.
    assert!(stats.takeovers > 0 && stats.refused_renewals > 0 && stats.graceful_covers > 0);
}

/// Asserts that one of `count` seeds of a tweaked world fails with a report that mentions
/// `expect`: the checker catches the old code the tweak sets back; `missing` says what no
/// schedule did otherwise.
fn assert_caught(count: u64, tweak: &Tweak, expect: &str, missing: &str) {
    let found = (0..count).find_map(|n| {
        run_seed(0x5eed_0000 + n, tweak)
            .err()
            .filter(|report| report.contains(expect))
    });
    // The first two lines (the seed and the broken invariant) show in the test's output.
    let head: Vec<&str> = found.as_deref().unwrap_or("").lines().take(2).collect();
    println!("{}", head.join("\n"));
    assert!(found.is_some(), "{missing}");
}

#[test]
fn a_schedule_replays_identically() {
    let first = Sim::new(42, &no_tweak).run().expect("seed 42 passes");
    let second = Sim::new(42, &no_tweak).run().expect("seed 42 passes");
    assert_eq!(format!("{first:?}"), format!("{second:?}"));
}

/// The checks bite: clocks skewed beyond the documented tolerance let a taker in while the
/// holder still delivers.
#[test]
fn clocks_skewed_beyond_the_tolerance_break_fencing() {
    let tweak = |cfg: &mut Config, rng: &mut StdRng| {
        // Two instances, clocks as far apart as allowed plus 600 ms, renewals failing for
        // seconds at a time so leases lapse while their holders still read.
        cfg.instances = 2;
        cfg.timings = LeaseTimings::default().with_listing_interval(Duration::from_secs(1));
        cfg.skew = tolerated_skew(&cfg.timings) + ms(600);
        cfg.partitions = 4;
        cfg.write_gap_ms = (20, 60);
        cfg.crashes = 0;
        cfg.shutdowns = 0;
        let _ = rng;
    };
    assert_caught(
        300,
        &tweak,
        "fencing",
        "no schedule with clocks skewed beyond the tolerance broke fencing",
    );
}

/// Pins the regression of a fixed bug: `subscriber.rs` filtered deliveries by the stopped flag
/// only, so a record waiting in the channel while its lease ran out (a stall, a store outage)
/// still reached a handler. The filter now asks `may_deliver`; this shows the checker catches the
/// old filter.
#[test]
fn a_filter_blind_to_the_lease_delivers_after_it_ran_out() {
    let tweak = |cfg: &mut Config, _: &mut StdRng| {
        cfg.filter_checks_lease = false;
        cfg.handler_checks_lease = false;
        cfg.p_hold = 0.0;
        cfg.stalls = 3;
        cfg.workers = 1;
        cfg.channel = 6;
        cfg.write_gap_ms = (20, 60);
    };
    assert_caught(
        300,
        &tweak,
        "fencing",
        "no schedule delivered after the lease ran out",
    );
}

/// The SDK sends a held write again after an attempt that landed and whose answer was lost; the
/// counter the first attempt moved refuses the resend. `held_update` recognises the refusal as
/// the write's own success (`lease::landed`); taken for a lost lease, as it was before, every such
/// resend stopped its shard and redelivered what followed its checkpoint.
#[test]
fn a_resend_refused_by_its_own_landed_write_is_a_success() {
    let resends = |recognise: bool| {
        move |cfg: &mut Config, _: &mut StdRng| {
            cfg.recognise_landed = recognise;
            cfg.p_resend = 0.2;
        }
    };
    let (stats, failure) = run_many(7_000, 100, &resends(true));
    assert!(failure.is_none(), "{failure:?}");
    assert!(stats.resends_recognised > 0, "{stats:?}");
    assert_eq!(
        stats.resends_lost, 0,
        "a resend of a landed write was taken for a lost lease"
    );
    let (stats, _) = run_many(7_000, 100, &resends(false));
    assert!(
        stats.resends_lost > 0,
        "without the recognition no resend was taken for a lost lease: {stats:?}"
    );
}

/// Pins item 13 of the review: a delivery read before a seek is dropped in front of its
/// handler; without the generation check it reaches one after the seek returned.
#[test]
fn a_delivery_read_before_a_seek_reaches_its_handler_after_it_without_the_generation_check() {
    let tweak = |cfg: &mut Config, _: &mut StdRng| {
        cfg.seek_drops_stale = false;
        cfg.seeks = 20;
        cfg.p_seek = 0.2;
        cfg.channel = 6;
        cfg.p_hold = 0.5;
    };
    assert_caught(
        200,
        &tweak,
        "seek:",
        "no delivery of a position left behind by a seek reached a handler",
    );
}

/// Pins the wedge `nack(true)` answering `Unsupported` caused: the delivery stayed unsettled
/// for good (the runtime's copy of it was handled elsewhere), so its shard's checkpoint froze
/// behind it and a closed shard never reached `SHARD_END`. A handed-back delivery now comes
/// back to its session; without that the no-wedge check fails.
#[test]
fn a_retried_record_that_never_comes_back_wedges_its_shard() {
    let tweak = |cfg: &mut Config, _: &mut StdRng| {
        cfg.handed_back_comes_back = false;
        cfg.p_retry = 0.05;
    };
    assert_caught(
        200,
        &tweak,
        "no wedge",
        "no schedule wedged a shard behind a lost retry",
    );
}

/// Pins the gap the review found: the runtime holds pulled deliveries in worker lanes (a slow
/// handler ahead, a batch gathering), so a check where the runtime pulls is not enough. A
/// delivery is now checked where its handler starts (`KinesisMessage::decode_error`); without
/// that check a record pulled inside the lease reaches a handler after it ran out.
#[test]
fn a_check_only_where_the_runtime_pulls_lets_a_held_record_reach_its_handler_late() {
    let tweak = |cfg: &mut Config, _: &mut StdRng| {
        cfg.handler_checks_lease = false;
        cfg.p_hold = 0.6;
        cfg.workers = 4;
        cfg.partitions = 2;
        cfg.write_gap_ms = (20, 60);
    };
    assert_caught(
        300,
        &tweak,
        "fencing",
        "no schedule ran a held record's handler after the lease ran out",
    );
}

/// A store call that lands after its caller timed out, behind the caller's later calls, is
/// accepted by the owner-only condition: a stale checkpoint moves the row back (and a stale
/// renewal moves its expiry back). The main run assumes calls land before their timeout.
#[test]
fn a_write_landing_after_its_timeout_moves_a_checkpoint_back() {
    let tweak = |cfg: &mut Config, _: &mut StdRng| {
        cfg.late_landing = true;
        cfg.late_takes = true;
        cfg.counter_fence = false;
        cfg.p_timeout = 0.1;
    };
    assert_caught(
        300,
        &tweak,
        "moved back",
        "no late write moved a checkpoint back",
    );
}

/// With the counter fence of `DynamoLeaseStore`, renewals, checkpoints and releases that land
/// long after their caller timed out (behind its later writes, or after a same-id restart) are
/// refused, and a write of the caller's own that did land is recognised by the one retry: no
/// invariant breaks.
#[test]
fn late_writes_behind_the_counter_fence_keep_the_invariants() {
    let tweak = |cfg: &mut Config, _: &mut StdRng| {
        cfg.late_landing = true;
        cfg.counter_fence = true;
        cfg.p_timeout = 0.1;
    };
    let (stats, failure) = run_many(0x0fe2_ce00, 200, &tweak);
    if let Some(report) = failure {
        panic!("{report}");
    }
    println!("{stats:?}");
    assert!(stats.late_landings > 0 && stats.fenced_writes > 0 && stats.fence_retries > 0);
}

/// A take is conditioned on the owner (or an expired row), not on the counter: one of an
/// instance's own takes that timed out and lands after a later take of the same owner id was
/// granted (by the same store object, or after a same-id restart) is accepted, sets the expiry
/// back to its own send time, and another instance takes the shard while the holder still
/// delivers. The counter fence then only makes the holder's next write refused.
#[test]
fn a_take_landing_after_its_timeout_breaks_fencing_despite_the_counter_fence() {
    // The take condition before it kept the expiry from moving back.
    let tweak = |cfg: &mut Config, _: &mut StdRng| {
        cfg.late_landing = true;
        cfg.late_takes = true;
        cfg.counter_fence = true;
        cfg.take_keeps_expiry = false;
        cfg.p_timeout = 0.1;
    };
    assert_caught(
        300,
        &tweak,
        "may still deliver",
        "no late take broke fencing",
    );
}

/// With the take condition of `DynamoLeaseStore` (a take of one's own row never moves its expiry
/// back) and the counter fence, takes, renewals, checkpoints and releases that land long after
/// their caller timed out break no invariant.
#[test]
fn late_takes_that_keep_the_expiry_keep_the_invariants() {
    let tweak = |cfg: &mut Config, _: &mut StdRng| {
        cfg.late_landing = true;
        cfg.late_takes = true;
        cfg.counter_fence = true;
        cfg.take_keeps_expiry = true;
        cfg.p_timeout = 0.1;
    };
    let (stats, failure) = run_many(0x7a4e_0000, 200, &tweak);
    if let Some(report) = failure {
        panic!("{report}");
    }
    assert!(stats.late_landings > 0);
}

/// `broker.rs` today: a new subscription to a stream waits for the previous subscription's tasks
/// for at most `SHUTDOWN_GRACE`, then opens anyway. Those tasks can take longer (a checkpoint
/// write in flight, the final checkpoint and the release, each up to a store timeout, or a round
/// the old coordinator runs after its cancel), and they run under the same owner id, so the
/// store's conditions cannot tell the two apart: the new subscription takes a row the old one
/// still holds, and the old one's release or take lands on it. Waiting until the tasks ended
/// (the main run) keeps them apart.
#[test]
fn a_resubscribe_that_stops_waiting_after_the_grace_breaks_fencing() {
    let tweak = |cfg: &mut Config, _: &mut StdRng| {
        cfg.resubscribe_grace = true;
        cfg.counter_fence = false;
        cfg.late_landing = false;
        cfg.resubscribes = 4;
        cfg.stalls = 0;
        cfg.p_slow = 0.2;
        cfg.p_timeout = 0.1;
        cfg.timeout = cfg.timings.renew() * 2;
    };
    assert_caught(
        300,
        &tweak,
        "fencing",
        "no resubscribe that stopped waiting broke fencing",
    );
}

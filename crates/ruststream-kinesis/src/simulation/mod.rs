//! A deterministic simulation of the coordinator and the lease protocol: thousands of
//! random schedules on a virtual clock, each checked against the protocol's invariants after
//! every event.
//!
//! # What runs for real, and what is modelled
//!
//! The decisions are the crate's own pure code. Each subscription holds the real [`Rounds`]
//! (when a listing round or the handover poll runs, and the order of their calls: `ListShards`,
//! a `list` of the rows or a read of each, the takes of each pass; the wait for the listing
//! deadline, a wake or the cancel, which win in that order) and the real [`Coordinator`] (what
//! the subscription knows of the shards, which rows to read, what is takeable through
//! `plan::verdict`, a round's passes, what a take's answer means, how a failed take backs off);
//! each take is the real [`Take`] (its calls in order, what each answer means, what it hands
//! back). Each session holds the real [`ShardMachine`], the machine the running `ShardHandle` holds,
//! which decides everything about a held shard: its reading (which Kinesis call next, pacing,
//! the poll interval at the tip, backoff, a fresh iterator after an expired one,
//! `ITERATOR_TRIES`, a seek applied, draining a shard read to its end, why reading stops), every
//! store write (renewals, retries, checkpoints folded at their cadence, one write in flight, the
//! final checkpoint or `SHARD_END` and the release), whether a record may still be handed out,
//! the watermark and the records handed back. The simulation drives them the way the tokio
//! drivers do: as `coordinator::drive` (asks `Rounds` at `now`, makes the call it names, hands
//! back the answer, waits for its timer, a wake or the cancel), as `Subscription::take_all` (makes
//! the calls a `Take` asks: `acquire_from`, which the simulated store answers as the trait's
//! default does, an acquire then the start checkpoint; `GetShardIterator`; a release), as
//! `Reader::read` (asks the
//! shard machine at `now`, answers the call it names from the simulated stream a moment later,
//! where an iterator is the index of the next record, hands out the record it names or waits
//! for room in the channel, sleeps until its timer or a wake, drops the call in flight when
//! cancelled), as `reader::write_lease` (sends the write it names, hands back the answer) and
//! as `reader::redeliver`. [`ShardStart::from_checkpoint`] / [`ShardStart::to_checkpoint`] read
//! and record where a shard starts, and [`LeaseState::is_expired_at`] /
//! [`LeaseState::is_held_by`] are the store's conditions. The rest of the I/O is a model:
//! `delivery/outlet.rs` (the receive, which lets only current deliveries through) and
//! `broker.rs` (`register`: a new subscription to a stream waits for the previous one's tasks),
//! including the races between them (a write in flight while the reader finishes, a reader
//! blocked on a full channel, a cancel that comes while a round runs).
//!
//! The world: 2 to 5 instances sharing one stream of 1 to 8 open shards that split and merge
//! (closed shards keep a finite record list, open ones grow as a producer writes plain records
//! and, in half the schedules, KPL aggregates of one to four user records, which Kinesis serves
//! whole and a checkpoint may stop inside: `Config::aggregates`; in some of those, calls and
//! events answer no record where records follow, as Kinesis may: `Config::p_empty`), one lease
//! store, and per instance a bounded delivery channel and a pool of handlers that ack out of
//! order. Faults, during a chaos phase: store calls that fail (not applied), time out (applied or
//! not, the caller cannot tell) or answer late; an instance cut off from the store for a while;
//! Kinesis calls that fail (`ListShards`, `GetShardIterator`, `GetRecords`); crashes (for good, or
//! a restart under the same owner id or a fresh one); stalls (the whole process frozen, often for
//! longer than a lease, then resumed with its timers and answers arriving in random order);
//! releases (the runtime drains its handlers, then drops the subscription), with or without
//! a restart; a subscription dropped and opened again in the same process under the same owner
//! id (a new subscription slot of the process, which shares its clock, stalls and partitions);
//! skewed wall clocks that may also step (NTP) within the bound. Lease timings
//! vary between the default (10 s / 3 s / 10 s listing) and shortened ones, the handover poll
//! between off, 0.5 s and 1 s, and the checkpoint cadence between 0, 1 s and 2.5 s. A quiet phase
//! follows: no more faults except at most one crash or release, with at least one instance
//! left, until every record is acked.
//!
//! What the simulation found, and the [`Config`] flags that set a fixed mistake back so a test
//! shows the checker still catches it, is told in the Testing guide (`docs/src/testing.md`,
//! "What the simulation found").
//!
//! The runtime around the handlers is modelled too: it may hold a pulled delivery in a worker
//! lane for up to one and a half leases before the handler starts (`p_hold`), where the delivery
//! is checked against its lease again (`KinesisMessage::decode_error`, through `Standing::reaches_handler` as production)
//! and a withheld one is forgotten, settling nothing; and a handler may hand its delivery back
//! (`nack(true)`, `retry_after`, dropped unsettled: `p_retry`), which comes back on the same
//! session unsettled meanwhile once its delay is over (`retry_delay`; through the machine's
//! `hand_back` and `next_redelivery`, the redelivery task sleeping until the first is due), or
//! is forgotten by a stopped one. The read-ahead window (`window`) is a few deliveries in half
//! the schedules, so readers wait for settles. A `GetRecords` may fail (`p_kinesis`) or find its iterator
//! expired (`p_expire`), and a fresh iterator may fail (`p_iterator_fails`). A take whose `GetShardIterator` fails leaves its shard to a backoff of its own
//! (`Coordinator::delay_take`, the coordinator's own rule). A held write may land and lose its
//! answer while the SDK sends it again (`p_resend`): the counter the first attempt moved refuses
//! the resend, and the store recognises the refusal as the write's own success
//! (`rules::landed`, the rule `DynamoLeaseStore` uses).
//!
//! Liveness by beat is drawn in a third of the schedules (`Config::with_beat_mode`): each
//! subscription runs the real [`BeatLease`] as its own driver (`simulation/beat.rs`), every
//! answered chain goes to its sessions (`ShardMachine::follow_beat`) and to the ghost (which
//! extends a session's deadline only by a chain that began before it), sessions are taken by
//! beat (`ShardLease::taken_by_beat`), the rows are written a thousand years ahead, a
//! coordinator takes nothing while its chain does not count, and a take of a row kept by beat is
//! a take-over that reads the notice first (`Take::judged`, `LeaseStore::take_over`, one write
//! with its start). Balancing is drawn in beat mode as in the other (a holder that writes nothing
//! while idle hears of a handoff asked of it from the notice's mark: `Config::balances`).
//!
//! In half the schedules the store keeps the notice's head apart from its beats and runs'
//! records (`Config::notice_apart`): the polls read the head alone while the beats of the last
//! whole read are live (`coordinator/notice_reads.rs`), as a store of that layout will.
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
//! its shard to a record a few before or after its own (`KinesisSeeker::seek`; a user record of
//! an aggregate by its sub-sequence, as its delivery names it): the watermark
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
//! refuses (nothing moves: `reader::tests::seek`) and to positions of every shard. Those paths are tested at the SDK boundary
//! (`reader::tests`) and live (`tests/faults_live.rs`, `tests/chaos_live.rs`).
//!
//! # The store model
//!
//! A take is conditioned on a new or unowned row, this owner id, or an expiry past by the
//! caller's clock; renewals, checkpoints and releases on this owner id and on the
//! `lease_counter` (the counter fence, `lease/rules.rs`) that this store object's
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
//! (`Config::restart_wait`); takes land late too. A take is not counter-conditioned; a take of a
//! row the taker's owner holds must not move its expiry back (`rules::take_accepted`). One such
//! take still lands: the instance's own, after a later take of the same shard by the same
//! instance whose wall clock stepped back in between. It moves the expiry forward and bumps the
//! counter, but no reader stands behind it (its caller gave up), so the live session keeps the
//! row in the checks and learns of the bump at its next write (`Stats::phantom_takes`).
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
//! 5. Release: when a stopping session's release lands, the row's checkpoint covers every record
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
//! Not an invariant but printed by the main test: how long handovers after a release take, from the
//! release landing to the next owner's take, its first record read and its first delivery (the
//! last includes the records ahead of it in the taker's channel and slow handlers), with the
//! handover poll on and off, worst over all and over quiet ones where another instance is up.
//!
//! # Running
//!
//! `cargo test -p ruststream-kinesis --lib simulation::` runs 1,000 schedules from a
//! random base seed on every core (`-- --nocapture` prints the counts and the handover times).
//! `SIM_SCHEDULES=n` runs `n`; `SIM_BASE_SEED=b` fixes the base; `SIM_SEED=s` replays one
//! schedule, and `SIM_TRACE=1` with it prints its whole trace (with `-- --nocapture`);
//! `SIM_FAN_OUT=1` with it replays a seed of the fan-out schedules (`SIM_BEAT=1` puts every
//! schedule in beat mode; `SIM_APART=1` has every schedule's store keep the notice's head apart,
//! so the polls read the head alone while the beats last read are live:
//! `coordinator/notice_reads.rs`). A failure panics with
//! `seed=<s>`, the invariant, the schedule's settings and its last events.

use std::cmp::{Ordering, Reverse};
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, HashMap, HashSet, VecDeque};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering as Atomic};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::commit::{ItemRef, Limits, UnitId, UnitSize};
use crate::coordinator::machine::Coordinator;
use crate::coordinator::plan::{Rows, TakeFor};
use crate::coordinator::rounds::{Listed, NoticeRead, Rounds, Shards, Step as RoundStep};
use crate::coordinator::take::{AcquireRefused, IteratorRefused, Take, TakeCall, TakeStep, Told};
use crate::coordinator::twins::{Incarnation, TwinNews};
use crate::delivery::batch::{BatchEnd, Verdict, back};
use crate::delivery::settlement::Standing;
use crate::kinesis::iterator::ShardIterator;
use crate::kinesis::shards::ShardInfo;
use crate::lease::{LeaseState, Notice, rules};
use crate::settings::position::ShardStart;
use crate::shard::lease::beat::{BeatAnswer, BeatLease, BeatNews, BeatNext};
use crate::shard::read::Sequenced;
use crate::shard::{
    Answer, Call, Close, CommitNews, Ending, Fetch, HandedBack, Lost, Member, Next, ReadSettings,
    ReadStep, Redeliver, Settled, ShardLease, ShardMachine, Staged, Stop, Write,
};
use crate::watermark::Ticket;
use crate::{KinesisPosition, LeaseTimings, SHARD_END, SKEW_TOLERANCE};

mod beat;
mod behind;
mod checks;
mod config;
mod coordinator;
mod fleet;
mod joint;
mod runner_loop;
mod runtime;
mod session;
mod setup;
mod store;
mod tests;
mod types;
mod world;

use config::*;
use types::*;

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

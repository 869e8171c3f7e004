//! The simulated world's state: the stream, the store's rows and requests, the events, the
//! sessions and instances, the ghost the checks keep, the counts, and the simulation itself.

use super::*;
use crate::SharedStr;

/// One shard of the simulated stream.
#[derive(Debug)]
pub(super) struct SimShard {
    pub(super) info: ShardInfo,
    pub(super) parents: Vec<usize>,
    /// Sequence numbers, ascending: one per user record, so the user records of one KPL
    /// aggregate share theirs.
    pub(super) records: Vec<u64>,
    /// Each user record's index in its aggregate (`None` for a plain record).
    pub(super) subs: Vec<Option<u64>>,
    /// When each record arrived (true time, Kinesis's clock).
    pub(super) arrived: Vec<Time>,
    /// Trimmed out of the stream (retention): not listed, and its reads answer
    /// `ResourceNotFoundException`.
    pub(super) trimmed: bool,
}

#[derive(Debug, Default)]
pub(super) struct Stream {
    pub(super) shards: Vec<SimShard>,
    /// Open shards in hash-key order: splits replace one, merges two neighbours.
    pub(super) open: Vec<usize>,
    pub(super) ids: HashMap<Arc<str>, usize>,
    pub(super) next_seq: u64,
}

impl Stream {
    /// Record `idx` of `shard`, as the shard machine holds it.
    pub(super) fn record(&self, shard: usize, idx: usize) -> SimRecord {
        SimRecord {
            idx,
            sequence: SharedStr::from(self.shards[shard].records[idx].to_string()),
            sub: self.shards[shard].subs[idx],
            ends: self.ends_record(shard, idx),
        }
    }

    /// Whether no user record of its aggregate follows record `idx` of `shard`.
    fn ends_record(&self, shard: usize, idx: usize) -> bool {
        let records = &self.shards[shard].records;
        records.get(idx + 1) != Some(&records[idx])
    }

    /// Where a checkpoint through record `idx` of `shard` stands.
    pub(super) fn mark_through(&self, shard: usize, idx: usize) -> Mark {
        let sequence = self.shards[shard].records[idx];
        match self.shards[shard].subs[idx] {
            Some(sub) if !self.ends_record(shard, idx) => Mark::Seq(sequence, sub),
            _ => Mark::Seq(sequence, WHOLE),
        }
    }

    /// The first record of `shard` a checkpoint at `mark` does not cover.
    pub(super) fn next_after(&self, shard: usize, mark: Mark) -> usize {
        let len = self.shards[shard].records.len();
        match mark {
            Mark::None | Mark::Start => 0,
            Mark::End => len,
            Mark::Seq(sequence, _) => {
                // Past the records before its sequence number, then through its aggregate.
                let records = &self.shards[shard].records;
                let from = records.partition_point(|&seq| seq < sequence);
                let to = records.partition_point(|&seq| seq <= sequence);
                (from..to)
                    .find(|&idx| self.mark_through(shard, idx) > mark)
                    .unwrap_or(to)
            }
        }
    }

    /// The record of `shard` a checkpoint at `mark` was written through, if it names one.
    pub(super) fn index_through(&self, shard: usize, mark: Mark) -> Option<usize> {
        let next = self.next_after(shard, mark);
        next.checked_sub(1)
            .filter(|&idx| self.mark_through(shard, idx) == mark)
    }

    /// Where a call that serves `shard` from record `from` and returns at most `limit` Kinesis
    /// records ends: an aggregate counts one, and comes whole.
    pub(super) fn batch_end(&self, shard: usize, from: usize, limit: usize) -> usize {
        let records = &self.shards[shard].records;
        let mut end = from;
        for _ in 0..limit {
            let Some(&sequence) = records.get(end) else {
                break;
            };
            end += records[end..].partition_point(|&seq| seq == sequence);
        }
        end
    }

    /// The first user record of the aggregate record `idx` of `shard` belongs to: where Kinesis
    /// serves it from, since a call returns an aggregate whole.
    pub(super) fn aggregate_start(&self, shard: usize, idx: usize) -> usize {
        let records = &self.shards[shard].records;
        records.partition_point(|&seq| seq < records[idx])
    }

    pub(super) fn add(&mut self, parents: Vec<usize>) -> usize {
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
            subs: Vec::new(),
            arrived: Vec::new(),
            trimmed: false,
        });
        self.ids.insert(id, idx);
        idx
    }

    pub(super) fn listing(&self) -> Vec<ShardInfo> {
        self.shards
            .iter()
            .filter(|s| !s.trimmed)
            .map(|s| s.info.clone())
            .collect()
    }

    /// The shards `shard` is a parent of.
    pub(super) fn children(&self, shard: usize) -> Vec<usize> {
        (0..self.shards.len())
            .filter(|&c| self.shards[c].parents.contains(&shard))
            .collect()
    }

    /// The index of the first record Kinesis serves to a reader of `shard` opened at `start`:
    /// always the first user record of an aggregate.
    pub(super) fn iterator_index(&self, shard: usize, start: &ShardStart) -> usize {
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
            // At (or inside) an aggregate: Kinesis serves it from its first user record.
            ShardStart::At(
                KinesisPosition::AtSequence { sequence, .. }
                | KinesisPosition::AtSubSequence { sequence, .. },
            )
            | ShardStart::Within { sequence, .. } => {
                let at: u64 = sequence.parse().expect("a sequence number");
                sim.records.partition_point(|&seq| seq < at)
            }
        }
    }

    /// The index of the first record a reader of `shard` opened at `start` hands out: where
    /// Kinesis serves from, less the user records a start inside an aggregate drops (a start at
    /// a later user record is read with the start inside the aggregate as its resume, as
    /// `ShardStart::to_checkpoint` records it).
    pub(super) fn index_of(&self, shard: usize, start: &ShardStart) -> usize {
        let dropped = match start {
            ShardStart::Within { sequence, through } => Some((sequence, *through)),
            ShardStart::At(KinesisPosition::AtSubSequence {
                sequence,
                sub_sequence: sub @ 1..,
                ..
            }) => Some((sequence, sub - 1)),
            _ => None,
        };
        match dropped {
            Some((sequence, through)) => {
                let at: u64 = sequence.parse().expect("a sequence number");
                self.next_after(shard, Mark::Seq(at, through))
            }
            None => self.iterator_index(shard, start),
        }
    }
}

/// A row of the store, and the session that holds it (the ghost behind the owner id).
#[derive(Debug, Default)]
pub(super) struct Row {
    pub(super) state: Option<LeaseState>,
    pub(super) holder: Option<u64>,
    /// When the write that set the row's expiry was sent (true time), and whether a write of
    /// the holder sent earlier than the one before it set it: the expiry moved back.
    pub(super) expiry_sent: Time,
    pub(super) expiry_moved_back: bool,
    /// Unreadable for a while: reads, `list` and writes of it fail until it is repaired.
    pub(super) malformed: bool,
    /// The row as it was when a round deleted it (`hygiene`): what the checks judge the shard
    /// by from then on.
    pub(super) deleted: Option<LeaseState>,
}

impl Row {
    /// The row as the checks judge it: as it is, or as it was when deleted.
    pub(super) fn seen(&self) -> Option<&LeaseState> {
        self.state.as_ref().or(self.deleted.as_ref())
    }
}

#[derive(Debug, Clone)]
pub(super) enum OpKind {
    Read,
    /// `LeaseStore::list`: every row of the stream, read consistently; `eventual`:
    /// `list_eventually`, each row a little behind (`Config::read_lag`).
    List {
        eventual: bool,
    },
    Acquire,
    Renew,
    /// `LeaseStore::checkpoint`: the start checkpoint of a take, and a closing shard's final
    /// checkpoint or `SHARD_END` (`Write::Final`).
    Checkpoint(Arc<str>),
    /// `LeaseStore::checkpoint_and_renew`: the checkpoints of a held shard
    /// (`Write::Checkpoint`).
    CheckpointRenew(Arc<str>),
    /// `cover`: the last record index a stopping session delivered before its release;
    /// `stopping`: the release of a session that stops (not of a failed take or of `SHARD_END`).
    Release {
        cover: Option<usize>,
        stopping: bool,
    },
    /// `LeaseStore::delete`: the row, if its counter is still `counter` and no lease runs.
    Delete {
        counter: u64,
    },
    /// `LeaseStore::notice`: the stream's notice, read consistently; `eventual`:
    /// `notice_eventually`, a little behind (`Config::read_lag`).
    Notice {
        eventual: bool,
    },
    /// The notice's head alone (the counter, the marks, the layout), where the store keeps it
    /// apart from the beats and runs' records (`Config::notice_apart`): read a little behind,
    /// as `DynamoLeaseStore` reads it.
    NoticeHead,
    /// `LeaseStore::beat`: this instance alive until `until_ms`, the beats of `forget` removed.
    Beat {
        until_ms: u64,
        forget: Vec<String>,
    },
    /// `LeaseStore::leave`: this instance's beat removed, the notice bumped; by beat
    /// (`leave_beat`), only while the beat stands no later than `until_ms`.
    Leave {
        until_ms: Option<u64>,
    },
    /// `LeaseStore::announce`: this run recorded under its owner id in the notice, the beats
    /// and records of `forget` removed.
    Announce {
        record: String,
        forget: Vec<String>,
    },
    /// `LeaseStore::withdraw_handoff`: the caller's request removed from the row.
    Withdraw,
    /// `LeaseStore::take_over`: a take conditioned on the row naming `holder` at `counter`
    /// (whatever its expiry), `start` recorded in a row without a checkpoint, in one write.
    TakeOver {
        holder: Arc<str>,
        counter: u64,
        start: Arc<str>,
    },
    /// `LeaseStore::ask_handoff`: a handoff of `holder`'s shard to the caller.
    AskHandoff {
        holder: String,
        counter: u64,
    },
    /// `LeaseStore::mark_asked`: the round's requests of `holders` marked in the notice.
    MarkAsked {
        holders: Vec<String>,
    },
    /// `LeaseStore::hand_over`: the row to `to`, with `checkpoint`; `cover` the last record
    /// index of the handing session's settled prefix, `last` the last one that reached a
    /// handler, and
    /// `drained` whether every delivery of it had settled.
    HandOver {
        to: Arc<str>,
        checkpoint: Option<Arc<str>>,
        cover: Option<usize>,
        last: Option<usize>,
        drained: bool,
    },
    /// `TransactWriteItems` of an exactly-once commit: the effects of `units` and the row's
    /// checkpoint and expiry under `token` (the row's), sent as `request` (the token of this
    /// attempt); `first_sent` when the commit was first sent, whose clock its expiry is from.
    Commit {
        checkpoint: Arc<str>,
        expiry_ms: u64,
        token: Arc<str>,
        request: Arc<str>,
        units: Arc<[UnitId]>,
        first_sent: Time,
        prior: Option<Arc<str>>,
        /// The shard's seek epoch when the commit was folded.
        epoch: u32,
    },
    /// `TransactWriteItems` of a joint commit (a unit that spans shards, `shard::joint`): the
    /// effects of `unit` and every row's checkpoint and expiry under `token`, sent as `request`.
    /// Each row carries the fence its store object knew when it was sent.
    Joint {
        rows: Arc<[JointRow]>,
        token: Arc<str>,
        request: Arc<str>,
        unit: UnitId,
        first_sent: Time,
    },
}

impl OpKind {
    /// Whether it is a take (`acquire`, or a take-over): a write that needs no holder, and whose
    /// answer settles its store object's fence.
    pub(super) fn is_take(&self) -> bool {
        matches!(self, Self::Acquire | Self::TakeOver { .. })
    }
}

/// One lease row of a joint commit.
#[derive(Debug, Clone)]
pub(super) struct JointRow {
    pub(super) shard: usize,
    pub(super) sid: u64,
    pub(super) checkpoint: Arc<str>,
    pub(super) expiry_ms: u64,
    pub(super) prior: Option<Arc<str>>,
    /// The shard's seek epoch when the part was reserved.
    pub(super) epoch: u32,
    /// The commit's condition on the row: the counter the store object's last write left, and
    /// whether one of its writes had no answer.
    pub(super) fence: Fence,
}

/// Exactly once, a unit that spans shards, waiting for (or in) its joint commit: the sessions
/// of its parts (ascending), and its request in flight.
#[derive(Debug, Clone)]
pub(super) struct JointUnit {
    pub(super) sids: Vec<u64>,
    /// When it settled in every shard.
    pub(super) since: Time,
    /// Whether its request is in flight, and when the commit was first sent (the rows' expiry
    /// is from that moment's clock).
    pub(super) in_flight: bool,
    pub(super) first_sent: Option<Time>,
    /// Each part's shard's seek epoch when the commit was first sent.
    pub(super) epochs: Vec<u32>,
    /// The token of the committer's pending wake-up for a resend.
    pub(super) timer: u64,
}

/// One store call as it travels to the store.
#[derive(Debug, Clone)]
pub(super) struct Op {
    pub(super) inst: usize,
    pub(super) inc: u32,
    pub(super) sid: u64,
    pub(super) shard: usize,
    pub(super) owner: Arc<str>,
    pub(super) kind: OpKind,
    /// The caller's wall clock when it built the call (DynamoDB conditions carry it).
    pub(super) wall_ms: u64,
    /// The true time it was sent, for the checks.
    pub(super) sent: Time,
    /// With the counter fence, a held write's condition on the row's counter: the one this
    /// store object's last write left there (`:seen`).
    pub(super) seen: Option<u64>,
    /// Whether a write of this store object to the row had an unknown outcome when this one was
    /// sent (`Fence::uncertain`).
    pub(super) uncertain: bool,
    /// The one retry of `held_update` after it adopted the row's counter.
    pub(super) retried: bool,
    /// The SDK's resend of a held write whose first attempt landed and whose answer was lost.
    pub(super) resend: bool,
    /// Both attempts of such a pair carry the same token.
    pub(super) pair: Option<u64>,
    /// A take of a row its store object has seen exist: it never creates one
    /// (`DynamoLeaseStore::existing`).
    pub(super) row_known: bool,
}

/// What a store object knows of its own writes to one row: the store's rule.
pub(super) use crate::lease::rules::Fence;

/// A write whose answer settles its store object's fence: the call, and the row as the write
/// left it or found it (`None` when it did not land before its answer).
#[derive(Debug)]
pub(super) struct FenceNote {
    pub(super) op: Op,
    pub(super) row: Option<LeaseState>,
}

#[derive(Debug, Clone)]
pub(super) enum Res {
    Row(Option<LeaseState>),
    Rows(Vec<(usize, LeaseState)>),
    Granted(LeaseState),
    /// A take of a row its store object had seen, found deleted: nothing created.
    Deleted,
    Notice(Notice),
    Ok,
    Fenced,
    Failed,
    /// A commit refused by this unit's own condition: nothing applied.
    UserRefused(UnitId),
    /// A joint commit refused by a row: every row of it as it stood (`None`: missing).
    JointFenced(Vec<Option<LeaseState>>),
    /// Refused for want of capacity (`ProvisionedThroughputExceededException`): not applied.
    Throttled,
}

/// One handling's effect: its record, and the shard's seek epoch (a seek back asks for the
/// records after its target again, effects included).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) struct EffectId {
    pub(super) shard: usize,
    pub(super) idx: usize,
    pub(super) epoch: u32,
}

/// Where a store answer goes.
#[derive(Debug, Clone)]
pub(super) enum Cont {
    Read {
        shard: usize,
    },
    /// A round's `list`.
    RoundList,
    /// One of a round's deletions.
    Delete {
        shard: usize,
    },
    /// The poll's read of the notice: whole, or its head alone.
    Notice {
        whole: bool,
    },
    /// The poll's beat.
    Beat,
    /// A beat of the beat's driver (liveness by beat).
    BeatLease,
    /// Take `sid`'s read of the notice (a take-over), sent at `sent_ms` by its wall clock.
    TakeNotice {
        shard: usize,
        sid: u64,
        sent_ms: u64,
    },
    /// The poll's record of this run.
    Announce,
    /// One of a round's requests for a handoff of `shard`.
    Ask {
        shard: usize,
        holder: String,
    },
    /// The round's marks of its requests answered.
    Marked,
    /// The instance's leave at its coordinator's end: nothing follows.
    Leave,
    /// Take `sid`'s acquire, recording `start` in a row without a checkpoint.
    Acquire {
        shard: usize,
        sid: u64,
        start: Arc<str>,
    },
    /// `acquire_from`'s start checkpoint of a row that had none.
    StartCheckpoint {
        shard: usize,
        sid: u64,
        start: Arc<str>,
    },
    /// Take `sid`'s hand-back of a shard it does not read.
    TakeRelease {
        shard: usize,
        sid: u64,
    },
    /// A write of `write_lease`, sent at `sent`.
    Lease {
        sid: u64,
        write: Write,
        sent: Time,
    },
    /// The joint commit of `unit`, of these rows.
    Joint {
        unit: UnitId,
        token: Arc<str>,
        rows: Arc<[JointRow]>,
    },
}

/// A delivery in the channel or in a handler.
#[derive(Debug, Clone, Copy)]
pub(super) struct Msg {
    pub(super) sid: u64,
    pub(super) shard: usize,
    pub(super) idx: usize,
    pub(super) ticket: Ticket,
    /// Handed back by a handler and delivered again.
    pub(super) redelivery: bool,
}

#[derive(Debug)]
pub(super) enum Ev {
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
    /// The beat's driver wakes (liveness by beat): the next beat is due.
    Beat {
        inst: usize,
        inc: u32,
        token: u64,
    },
    /// The joint committer's timer: a joint commit of `unit` is due again.
    Joint {
        inst: usize,
        inc: u32,
        unit: UnitId,
        token: u64,
    },
    /// `reader::redeliver`'s timer: the first record handed back falls due.
    Redeliver {
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
    pub(super) fn target(&self) -> Option<(usize, u32)> {
        match *self {
            Self::Reply { inst, inc, .. }
            | Self::Round { inst, inc, .. }
            | Self::Lease { inst, inc, .. }
            | Self::Beat { inst, inc, .. }
            | Self::Reader { inst, inc, .. }
            | Self::Redeliver { inst, inc, .. }
            | Self::Joint { inst, inc, .. }
            | Self::Handler { inst, inc, .. }
            | Self::HandlerStart { inst, inc, .. }
            | Self::Dispatch { inst, inc } => Some((inst, inc)),
            _ => None,
        }
    }
}

pub(super) struct Queued {
    pub(super) at: Time,
    pub(super) seq: u64,
    pub(super) ev: Ev,
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
pub(super) enum LeaseTask {
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
pub(super) enum ReaderTask {
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
pub(super) enum FinishState {
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
pub(super) struct SimRecord {
    pub(super) idx: usize,
    pub(super) sequence: SharedStr,
    pub(super) sub: Option<u64>,
    pub(super) ends: bool,
}

impl Sequenced for SimRecord {
    fn sequence(&self) -> &SharedStr {
        &self.sequence
    }

    fn sub_sequence(&self) -> Option<u64> {
        self.sub
    }

    fn ends_record(&self) -> bool {
        self.ends
    }
}

/// One reader of one shard: its `ShardHandle`, its three tasks and `finish`.
#[derive(Debug)]
pub(super) struct Session {
    pub(super) shard: usize,
    /// The shard's machine, the one the real `ShardHandle` holds: its lease and writes, its
    /// reading, its watermark, its deliveries in flight and its records handed back.
    pub(super) machine: ShardMachine<Time, SimRecord>,
    /// The driver of its lease, `reader::write_lease`.
    pub(super) lease_task: LeaseTask,
    /// The driver of its reading, `Reader::read`, and the token of its pending wake-up.
    pub(super) reader: ReaderTask,
    pub(super) reader_token: u64,
    /// The token of the redelivery task's pending wake-up (`reader::redeliver`'s timer).
    pub(super) redeliver_token: u64,
    /// The answer of the call in flight, delivered with the reader's token.
    pub(super) answer: Option<Fetch<SimRecord>>,
    pub(super) blocked: Option<Msg>,
    /// The reader's cancellation token.
    pub(super) cancelled: bool,
    pub(super) finish: FinishState,
    /// The index of the last record of the watermark's settled prefix: what a final checkpoint
    /// covers.
    pub(super) settled_upto: Option<usize>,
    // The ghost: what the checks know about this session, independent of the code under test.
    pub(super) start_idx: usize,
    /// Below which a checkpoint of this session may go after a seek of it: the place of the
    /// record before the oldest seek target (`None`: it made no seek).
    pub(super) seek_floor: Option<Mark>,
    /// When the take that granted the session its lease was sent (true time).
    pub(super) take_sent: Time,
    pub(super) last_idx: Option<usize>,
    /// The last record index of the session that reached a handler.
    pub(super) handled_upto: Option<usize>,
    pub(super) deadline: Time,
    pub(super) lost: bool,
    pub(super) cover: Option<usize>,
    /// The open fan-out subscription: the index of the record its next event starts at, and
    /// how many events it sends before it ends (its five minutes).
    pub(super) subscription: Option<(usize, u32)>,
    /// Exactly once: the token of the commit last sent, and when it was first sent.
    /// Exactly once: the token of the commit last sent, when it was first sent, and its shard's
    /// seek epoch then (what the fold took was settled under it).
    pub(super) commit_sent: Option<(Arc<str>, Time, u32)>,
}

/// What the coordinator's driver gathers for `Rounds` while its calls are in flight: the rows
/// read one by one, and the takes of a pass still to answer.
#[derive(Debug, Default)]
pub(super) struct Round {
    pub(super) reads_left: usize,
    pub(super) rows: Rows,
    pub(super) unreadable: HashSet<Arc<str>>,
    pub(super) takes_left: usize,
    pub(super) deletions_left: usize,
    pub(super) asks_left: usize,
}

/// One subscription's coordinator: the real `Coordinator` and `Rounds`, and their driver.
#[derive(Debug)]
pub(super) struct Coord {
    /// What it knows of the stream's shards and its decisions.
    pub(super) knows: Coordinator<Time>,
    /// When rounds and polls run, and the order of their calls.
    pub(super) rounds: Rounds<Time>,
    pub(super) round: Round,
    /// The takes under way, by the session id a take that reads gives its session.
    pub(super) takes: HashMap<u64, Take<Time>>,
    /// The driver waits in `run`'s `select!` (for `timer`, a wake or the cancel).
    pub(super) waiting: bool,
    /// The token of the pending wake-up of that `select!`.
    pub(super) timer: u64,
    /// The subscription's cancellation token fired.
    pub(super) cancelled: bool,
    /// `run` returned.
    pub(super) exited: bool,
    /// Liveness by beat: the subscription's beat (`None`: its leases are renewed per row).
    pub(super) beat: Option<BeatLease<Time>>,
    /// The token of the beat driver's pending wake-up.
    pub(super) beat_token: u64,
    /// The end of the last beat the driver wrote (`live/beat.rs`'s `last_until`).
    pub(super) beat_until: u64,
}

impl Coord {
    /// A new subscription's coordinator at `now`: its first round is due at once.
    pub(super) fn new(cfg: &Config, now: Time, run: Incarnation) -> Self {
        Self {
            knows: {
                let mut knows = Coordinator::new(cfg.timings, cfg.initial.clone())
                    .with_balancing(cfg.balances())
                    .with_notice_head_apart(cfg.notice_apart)
                    .with_polls_behind(cfg.polls_behind);
                if cfg.twin_check {
                    knows = knows.with_incarnation(run);
                }
                if !cfg.wait_for_peers {
                    knows = knows.without_waiting_for_peers();
                }
                if let Some(budget) = cfg.take_budget {
                    knows = knows.with_take_budget(budget);
                }
                // The live grace and cadence (`Hygiene::new`) in a fleet scenario; else a short
                // grace, so that deletions happen within a schedule.
                if !cfg.live_hygiene {
                    // Every poll that skips its weighing is checked against one made anyway.
                    knows = knows.verifying_skips().with_hygiene_grace(
                        cfg.hygiene_grace(),
                        cfg.timings.listing_interval() * cfg.full_read_listings,
                    );
                }
                knows
            },
            rounds: Rounds::new(
                cfg.timings.listing_interval(),
                cfg.timings.handover_poll_interval(),
                now,
            ),
            round: Round::default(),
            takes: HashMap::new(),
            waiting: false,
            timer: 0,
            cancelled: false,
            exited: false,
            beat: cfg
                .timings
                .is_kept_by_beat()
                .then(|| BeatLease::new(cfg.timings)),
            beat_token: 0,
            beat_until: 0,
        }
    }
}

#[derive(Debug)]
pub(super) struct Inst {
    pub(super) owner: Arc<str>,
    /// The process this subscription lives in: a resubscribe opens a new slot in the same one.
    pub(super) process: usize,
    /// A new subscription waiting for its predecessor's tasks (`register`).
    pub(super) pending_start: bool,
    /// The new subscription that waits for this one to end.
    pub(super) successor: Option<usize>,
    /// A subscription dropped by a resubscribe: it never starts again.
    pub(super) retired: bool,
    pub(super) inc: u32,
    /// The process's run, which its subscriptions record under the owner id: new at every
    /// start of the process, the same for a subscription opened again in it.
    pub(super) run: Incarnation,
    pub(super) alive: bool,
    pub(super) offset_ms: i64,
    pub(super) stalled_until: Time,
    pub(super) partitioned_until: Time,
    pub(super) shutting_down: bool,
    pub(super) dropped: bool,
    pub(super) restart_after_exit: Option<bool>,
    pub(super) died_at: Time,
    pub(super) coord: Coord,
    pub(super) sessions: BTreeMap<u64, Session>,
    pub(super) running: BTreeMap<usize, u64>,
    pub(super) channel: VecDeque<Msg>,
    pub(super) in_flight: usize,
    pub(super) dispatch_pending: bool,
    /// Exactly once, the batches handlers hold, by number: consecutive first deliveries of one
    /// session the runtime pulled together, settled as one unit once all were handled.
    pub(super) batches: BTreeMap<u64, Batch>,
    /// The batch each delivery belongs to, by session and ticket.
    pub(super) batch_of: BTreeMap<(u64, u64, u64), u64>,
    /// Exactly once, the units that span shards, waiting for their joint commit.
    pub(super) joints: BTreeMap<UnitId, JointUnit>,
}

/// Exactly once, a batch handler's batch: its records of one session, pulled together. It holds
/// one handler slot, however many records it holds.
#[derive(Debug)]
pub(super) struct Batch {
    /// Its last record of each session, which the next one of that session pulled joins if it
    /// follows (of one session, unless batches span shards: `Config::joint_batches`).
    pub(super) lasts: Vec<Msg>,
    /// When its first record was pulled.
    pub(super) opened: Time,
    /// How many records it holds.
    pub(super) size: usize,
    /// The records settled so far, each with how (`delivery/batch.rs`'s verdicts).
    pub(super) done: Vec<(Msg, Verdict)>,
    /// Whether records pulled later may still join it (only within one dispatch).
    pub(super) open: bool,
}

#[derive(Debug, Default)]
pub(super) struct GhostShard {
    pub(super) first_upto: usize,
    pub(super) acked: Vec<bool>,
    /// The records the application must handle: those at or after where it starts the shard
    /// (its initial position, or the beginning when a parent was read), less the ones a seek
    /// skipped on purpose or retention trimmed unread.
    pub(super) owed: Vec<bool>,
    /// Under an initial position at the tip: whether the application reached the shard (opened
    /// it, or a parent of it), so that every record written to it from then on is owed.
    pub(super) reached: bool,
    pub(super) covered_upto: usize,
    /// Below this index no record is delivered again: a handoff in which every delivery
    /// of the handing session had settled covered them.
    pub(super) planned_upto: usize,
    pub(super) unserved_since: Option<Time>,
    /// When a reshard made the shard: instances see it only from their next listing on.
    pub(super) created_at: Time,
    /// A stopping session's release that left records to read, until the next owner delivers.
    pub(super) handover: Option<Handover>,
}

/// A stopping session's release that left records to read: when it landed, by which session,
/// and which steps of the next owner were counted already.
#[derive(Debug, Clone, Copy)]
pub(super) struct Handover {
    pub(super) at: Time,
    pub(super) from: u64,
    /// Whether a subscription of another process was up and past its first round, ready to
    /// take the shard.
    pub(super) taker_ready: bool,
    pub(super) taken: bool,
    pub(super) read: bool,
}

/// What the next owner did how long after a stopping session's release landed, in virtual
/// milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Step {
    /// Its acquire landed.
    Take,
    /// Its reader fetched the first record (before it waits for room in its channel).
    Read,
    /// The first record reached a handler: after the records ahead of it in the channel.
    Delivery,
}

/// Handovers after a release: the worst time from a release that leaves records to read to each
/// step of the next owner, over every handover, and over the quiet ones: released after the
/// quiet phase's last faulty call could have landed, with a subscription of another process up
/// to take the shard (no fault slows the next owner down, none has to start first), in virtual
/// milliseconds.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Handovers {
    pub(super) count: u64,
    pub(super) delivery_sum_ms: u64,
    pub(super) take_max_ms: u64,
    pub(super) read_max_ms: u64,
    pub(super) delivery_max_ms: u64,
    pub(super) quiet_take_max_ms: u64,
    pub(super) quiet_read_max_ms: u64,
    pub(super) quiet_delivery_max_ms: u64,
}

impl Handovers {
    pub(super) fn add(&mut self, o: &Self) {
        self.count += o.count;
        self.delivery_sum_ms += o.delivery_sum_ms;
        self.take_max_ms = self.take_max_ms.max(o.take_max_ms);
        self.read_max_ms = self.read_max_ms.max(o.read_max_ms);
        self.delivery_max_ms = self.delivery_max_ms.max(o.delivery_max_ms);
        self.quiet_take_max_ms = self.quiet_take_max_ms.max(o.quiet_take_max_ms);
        self.quiet_read_max_ms = self.quiet_read_max_ms.max(o.quiet_read_max_ms);
        self.quiet_delivery_max_ms = self.quiet_delivery_max_ms.max(o.quiet_delivery_max_ms);
    }

    pub(super) fn record(&mut self, step: Step, took_ms: u64, quiet: bool) {
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
pub(super) struct Stats {
    pub(super) schedules: u64,
    pub(super) events: u64,
    pub(super) records: u64,
    pub(super) deliveries: u64,
    pub(super) redeliveries: u64,
    pub(super) takes: u64,
    pub(super) takeovers: u64,
    pub(super) refused_renewals: u64,
    pub(super) lapsed_by_clock: u64,
    pub(super) fenced_writes: u64,
    /// Held writes `held_update` sent again after adopting the row's counter.
    pub(super) fence_retries: u64,
    /// Store calls that landed after their caller timed out.
    pub(super) late_landings: u64,
    pub(super) store_failures: u64,
    pub(super) crashes: u64,
    pub(super) restarts: u64,
    pub(super) stalls: u64,
    pub(super) shutdowns: u64,
    pub(super) release_covers: u64,
    pub(super) partitions: u64,
    pub(super) reshards: u64,
    /// KPL aggregates written, and readers that took a shard over from a checkpoint inside one.
    pub(super) aggregates: u64,
    pub(super) within_starts: u64,
    /// Calls and events that answered no record where records followed.
    pub(super) empty_answers: u64,
    /// Takes of an instance's own row that landed after their caller gave up, behind a later
    /// take of the same instance (a wall clock stepped back between the two).
    pub(super) phantom_takes: u64,
    /// Liveness by beat: schedules in beat mode, beats of the beat's driver answered, chains
    /// begun again after a lapse, and take-overs that landed.
    pub(super) beat_schedules: u64,
    pub(super) lease_beats: u64,
    pub(super) beat_restarts: u64,
    pub(super) take_overs: u64,
    pub(super) filtered: u64,
    /// Deliveries handed back by their handlers, and deliveries withheld where their handler
    /// was about to start.
    pub(super) handed_back: u64,
    /// Records handed back with a delay that the redelivery task's timer sent again.
    pub(super) timed_redeliveries: u64,
    /// Times a reader waited for a settle with its read-ahead window full.
    pub(super) window_waits: u64,
    pub(super) withheld: u64,
    /// Expired iterators, and readers that handed their shard back for want of a fresh one.
    pub(super) expired: u64,
    pub(super) unreadable: u64,
    /// Takes that failed after the lease was won and left their shard to a backoff.
    pub(super) take_backoffs: u64,
    /// SDK resends of held writes that had landed: recognised as their write's success, or
    /// taken for a lost lease.
    pub(super) resends_recognised: u64,
    pub(super) resends_lost: u64,
    pub(super) polls: u64,
    pub(super) poll_rounds: u64,
    /// Reads of the notice, beats written, and releases whose bump of the notice failed.
    pub(super) notice_reads: u64,
    /// The polls' reads of the notice's head alone (`Config::notice_apart`).
    pub(super) notice_head_reads: u64,
    /// Reads answered behind the latest writes (`Config::read_lag`): `list`s and whole
    /// notices, and those of them that missed a write (answered an older version).
    pub(super) reads_behind: u64,
    pub(super) reads_missed: u64,
    /// Rows a round deleted.
    pub(super) deletions: u64,
    /// Handoffs asked for and recorded, handoffs whose write landed, those in which every
    /// delivery had settled, and schedules whose end checked that the instances converged.
    pub(super) asks: u64,
    pub(super) hand_overs: u64,
    pub(super) clean_hand_overs: u64,
    pub(super) converged: u64,
    /// Handoffs a holder kept alive by its beat heard of from the notice's mark (a read of the
    /// rows), which its reader then started.
    pub(super) asks_heard_by_beat: u64,
    pub(super) beats: u64,
    /// Records of a run under its owner id written (`LeaseStore::announce`).
    pub(super) announces: u64,
    pub(super) lost_bumps: u64,
    /// The longest gap between two reads of every row in the quiet phase, in thousandths of
    /// its bound (`Sim::check_fleet_full_reads`).
    pub(super) worst_full_read_permille: u64,
    pub(super) resubscribes: u64,
    /// Closed shards a round skipped (never read, starting at the tip); shards trimmed by
    /// retention, and their owed records still unread then; readers that found their shard gone.
    pub(super) skipped: u64,
    pub(super) trimmed: u64,
    pub(super) trimmed_unread: u64,
    pub(super) gone: u64,
    /// Seeks made by handlers, seeks Kinesis failed, and records a forward seek skipped unread.
    pub(super) seeks: u64,
    pub(super) seeks_failed: u64,
    pub(super) waived: u64,
    /// Rows made malformed, and rounds whose `list` failed and read row by row instead.
    pub(super) malformed: u64,
    pub(super) list_fallbacks: u64,
    pub(super) virtual_secs: u64,
    /// The longest a shard went without a reader in a quiet phase, as a share of the bound, in
    /// per mille.
    pub(super) worst_recovery_permille: u64,
    /// Handovers after a release, with the handover poll on, and with it off.
    pub(super) handovers_polled: Handovers,
    pub(super) handovers_unpolled: Handovers,
    /// Exactly once: commits that landed, effects they applied, units refused by their own
    /// condition, and resent commits the store answered by their token.
    pub(super) commits: u64,
    pub(super) effects: u64,
    pub(super) user_refusals: u64,
    pub(super) tokens_honoured: u64,
    /// Resent commits the store refused by the counter their first attempt moved, recognised as
    /// landed by the row's token.
    pub(super) commit_resends_recognised: u64,
    /// Commits whose answer gave a waiting reader room (committed deliveries leave the window).
    pub(super) commit_reader_wakes: u64,
    /// Shards read to their end that closed as a release instead, a delivery of theirs having
    /// gone back (a unit refused while finishing, or a refusal before the close).
    pub(super) finishes_abandoned: u64,
    /// Batches of several records that settled as one unit with what they staged.
    pub(super) batches: u64,
    /// Handlings that dropped their record, and batches whose body failed as a whole.
    pub(super) drops: u64,
    /// Leases lost to a renewal's row moved by a commit of their own they took for refused.
    pub(super) late_commit_losses: u64,
    /// Units of batches that spanned shards, the joint commits of them that landed, and the
    /// units abandoned because a shard could no longer send its part.
    pub(super) joint_units: u64,
    pub(super) joint_commits: u64,
    pub(super) joints_abandoned: u64,
    /// Listing rounds, and those that planned on the rows as last read, reading none.
    pub(super) rounds: u64,
    pub(super) steady_rounds: u64,
    /// Runs that paused for a stopped run's record under their owner id that landed late.
    pub(super) late_twin_pauses: u64,
    /// Steady rounds that skipped their plan (the last one's answer held).
    pub(super) skipped_plans: u64,
    /// Notices the polls read, and the polls among them that skipped weighing the shards (their
    /// last answer held, `coordinator/machine/weighed.rs`).
    pub(super) notices_answered: u64,
    pub(super) skipped_weighings: u64,
    /// Writes the table refused for want of capacity (`Config::table_write_rate`), and the takes
    /// among them.
    pub(super) throttled_writes: u64,
    pub(super) throttled_takes: u64,
    /// The most writes sent to the table within one whole second of virtual time.
    pub(super) peak_writes_per_second: u64,
    /// How often a round's takes waited for the pace (`coordinator/take_pace.rs`).
    pub(super) paced_waits: u64,
}

impl Stats {
    pub(super) fn add(&mut self, o: &Self) {
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
        self.release_covers += o.release_covers;
        self.partitions += o.partitions;
        self.reshards += o.reshards;
        self.aggregates += o.aggregates;
        self.within_starts += o.within_starts;
        self.phantom_takes += o.phantom_takes;
        self.beat_schedules += o.beat_schedules;
        self.lease_beats += o.lease_beats;
        self.beat_restarts += o.beat_restarts;
        self.take_overs += o.take_overs;
        self.empty_answers += o.empty_answers;
        self.filtered += o.filtered;
        self.handed_back += o.handed_back;
        self.timed_redeliveries += o.timed_redeliveries;
        self.window_waits += o.window_waits;
        self.withheld += o.withheld;
        self.expired += o.expired;
        self.unreadable += o.unreadable;
        self.take_backoffs += o.take_backoffs;
        self.resends_recognised += o.resends_recognised;
        self.resends_lost += o.resends_lost;
        self.polls += o.polls;
        self.poll_rounds += o.poll_rounds;
        self.notice_reads += o.notice_reads;
        self.notice_head_reads += o.notice_head_reads;
        self.deletions += o.deletions;
        self.asks += o.asks;
        self.hand_overs += o.hand_overs;
        self.clean_hand_overs += o.clean_hand_overs;
        self.converged += o.converged;
        self.asks_heard_by_beat += o.asks_heard_by_beat;
        self.beats += o.beats;
        self.announces += o.announces;
        self.lost_bumps += o.lost_bumps;
        self.worst_full_read_permille = self
            .worst_full_read_permille
            .max(o.worst_full_read_permille);
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
        self.commits += o.commits;
        self.effects += o.effects;
        self.user_refusals += o.user_refusals;
        self.commit_reader_wakes += o.commit_reader_wakes;
        self.finishes_abandoned += o.finishes_abandoned;
        self.batches += o.batches;
        self.late_commit_losses += o.late_commit_losses;
        self.drops += o.drops;
        self.tokens_honoured += o.tokens_honoured;
        self.commit_resends_recognised += o.commit_resends_recognised;
        self.joint_units += o.joint_units;
        self.joint_commits += o.joint_commits;
        self.joints_abandoned += o.joints_abandoned;
        self.rounds += o.rounds;
        self.steady_rounds += o.steady_rounds;
        self.skipped_plans += o.skipped_plans;
        self.late_twin_pauses += o.late_twin_pauses;
        self.notices_answered += o.notices_answered;
        self.skipped_weighings += o.skipped_weighings;
        self.throttled_writes += o.throttled_writes;
        self.throttled_takes += o.throttled_takes;
        self.paced_waits += o.paced_waits;
        self.peak_writes_per_second = self.peak_writes_per_second.max(o.peak_writes_per_second);
    }
}

/// Why a schedule failed.
#[derive(Debug)]
pub(super) struct Failure {
    pub(super) at: Time,
    pub(super) message: String,
}

pub(super) struct Sim {
    pub(super) cfg: Config,
    /// The store calls sent since [`Sim::count_calls_from`], by kind (`simulation/fleet.rs`).
    pub(super) calls: Option<BTreeMap<&'static str, u64>>,
    /// The whole second of virtual time the table's writes are counted in, and how many were
    /// sent in it (`Config::table_write_rate`).
    pub(super) write_second: (u64, u64),
    /// When the table last refused a write as throttled.
    pub(super) throttled_at: Option<Time>,
    /// When an instance last crashed.
    pub(super) crashed_at: Option<Time>,
    pub(super) rng: StdRng,
    /// Decides which handlings drop their records (`Config::p_drop`).
    pub(super) drops: StdRng,
    /// Decides how far behind each read behind answers (`Config::read_lag`), apart from the
    /// schedule's generator, which a schedule without reads behind draws from as it did.
    pub(super) behind: StdRng,
    /// What reads behind may still answer.
    pub(super) versions: super::behind::Versions,
    /// Exactly once: the records a handling dropped (`nack(false)`): the checkpoint may pass them
    /// with no effect applied.
    pub(super) dropped: HashSet<(usize, usize)>,
    pub(super) now: Time,
    pub(super) seq: u64,
    pub(super) token: u64,
    pub(super) queue: BinaryHeap<Reverse<Queued>>,
    pub(super) stream: Stream,
    pub(super) rows: Vec<Row>,
    /// The stream's notice row: bumped by releases (unless the bump, a call of its own after the
    /// release, fails), and the instances' beats.
    pub(super) notice: Notice,
    /// Per (instance, incarnation, shard): its store object's fence.
    pub(super) fences: HashMap<(usize, u32, usize), Fence>,
    /// The resend pairs whose first attempt landed.
    pub(super) landed_pairs: HashSet<u64>,
    /// Per (instance, incarnation, shard): its store object saw the row exist, as of its newest
    /// listing and the reads and takes since.
    pub(super) known_rows: HashSet<(usize, u32, usize)>,
    /// Per session, below which its checkpoints may go after its seeks (its `seek_floor`): kept
    /// past the session's end, since its writes may land after a crash.
    pub(super) seek_floors: HashMap<u64, Mark>,
    /// Exactly once: each staged unit's effect, the effects the store applied (how often), the
    /// request tokens it remembers (when it honours them), each shard's seek epoch, and the
    /// next unit's number.
    pub(super) unit_effects: HashMap<UnitId, Vec<EffectId>>,
    /// The number of the next batch a handler takes.
    pub(super) next_batch: u64,
    pub(super) applied: HashMap<EffectId, u32>,
    /// The records with an effect applied, in any seek epoch.
    pub(super) applied_records: HashSet<(usize, usize)>,
    /// Per shard and seek epoch, the records a seek let go before its target (until a later
    /// seek goes back over them): a commit folded in an epoch is judged by that epoch's.
    pub(super) effects_let_go: HashMap<(usize, u32), Arc<HashSet<usize>>>,
    pub(super) honoured: HashSet<Arc<str>>,
    pub(super) seek_epochs: HashMap<usize, u32>,
    pub(super) next_unit: u64,
    pub(super) insts: Vec<Inst>,
    pub(super) sid_inst: HashMap<u64, (usize, u32)>,
    pub(super) next_sid: u64,
    pub(super) ghost: Vec<GhostShard>,
    pub(super) written: usize,
    pub(super) acked: usize,
    pub(super) quiet_at: Time,
    pub(super) live_from: Time,
    pub(super) writes_until: Time,
    pub(super) last_live_check: Time,
    /// When the store last answered a read of every row (a `list`, any instance's).
    pub(super) last_full_read: Time,
    /// When the instances or the open shards last changed (a start, a stop, a crash, a stall
    /// or partition ending, a reshard, a shard read to its end): balancing converges from there.
    pub(super) reshaped_at: Time,
    /// When a record was last acked for the first time, or a shard's settled prefix last grew
    /// (a seek back delivers again what was acked, which moves the prefix and acks nothing new).
    pub(super) last_progress: Time,
    /// How many more seeks handlers may make.
    pub(super) seeks_left: usize,
    pub(super) failure: Option<Failure>,
    pub(super) trace: Option<VecDeque<String>>,
    pub(super) full_trace: bool,
    pub(super) stats: Stats,
}

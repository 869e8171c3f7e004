//! Exactly once, a subscription's units that span shards (a batch handler's batch of several
//! shards' records), from their settle until their joint commit lands, is refused, or can never
//! be sent: their writes, their parts (each shard's handle and deliveries), and the wake of the
//! committer that sends them (`live/joint.rs`). What goes out and what an answer means is
//! [`joint`](super::joint)'s, over the parts' machines locked together in shard order; the
//! committer holds no lock while a request is on its way.
//!
//! Locks: this book's, then the machines' (in shard order). A shard's own tasks never hold a
//! machine's lock while they take the book's: they only wake the committer.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use aws_sdk_dynamodb::types::TransactWriteItem;
use tokio::sync::Notify;
use tokio::sync::futures::Notified;

use super::joint::{self, JointNext};
use super::lease::Commit;
use super::{Answer, Member, ShardHandle, ShardMachine};
use crate::SharedStr;
use crate::clock::Instant;
use crate::commit::UnitId;
use crate::delivery::record::Record;
use crate::delivery::writes::Handling;
use crate::lease::{HandlingOutcome, LeaseKey, UserRefusal};
use crate::watermark::Ticket;
use crate::{CommitRefused, KinesisError, StagedWrites, epoch_millis};

/// A joint unit's number sets this bit: apart from every shard's own units, which each shard
/// numbers from zero.
const JOINT: u64 = 1 << 63;

/// The units of one subscription that span shards, and their committer's wake.
#[derive(Debug, Default)]
pub(crate) struct Joints {
    next: AtomicU64,
    pending: Mutex<Book>,
    /// How many units wait: a shard's write answered wakes the committer only then.
    waiting: AtomicUsize,
    wake: Notify,
}

/// The units waiting, and whether the committer ended (a unit settled later is given back at
/// once: nothing would send it).
#[derive(Debug, Default)]
struct Book {
    units: BTreeMap<UnitId, Pending>,
    closed: bool,
}

#[derive(Debug)]
struct Pending {
    /// In shard order.
    parts: Vec<Part>,
    writes: Vec<TransactWriteItem>,
    handling: Handling,
    /// The batch's last record, which a refusal names.
    shard: Arc<str>,
    sequence: SharedStr,
    /// When it settled in every shard: it waits for its parts at most a handoff drain.
    since: Instant,
    in_flight: bool,
}

#[derive(Debug)]
struct Part {
    handle: Arc<ShardHandle>,
    tickets: Vec<Ticket>,
}

/// A batch's records by shard: each shard's handle, and its records in order.
pub(crate) type Parts = Vec<(Arc<ShardHandle>, Vec<Member<Record>>)>;

/// What the committer does next.
#[derive(Debug)]
pub(crate) enum Step {
    /// Send the joint commit of `unit`: its writes and one update per row, each shard's commit.
    Send {
        unit: UnitId,
        rows: Vec<(LeaseKey, Commit)>,
        writes: Vec<TransactWriteItem>,
    },
    /// Nothing before this moment (`None`: before a wake).
    Wait(Option<Instant>),
}

impl Joints {
    fn lock(&self) -> MutexGuard<'_, Book> {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Wakes the committer: a joint commit was answered.
    pub(crate) fn wake(&self) {
        self.wake.notify_one();
    }

    /// The committer ends, if no unit waits: a unit settled from now on is given back at once.
    /// Whether it ended.
    pub(crate) fn close(&self) -> bool {
        let mut book = self.lock();
        book.closed = book.units.is_empty();
        book.closed
    }

    /// The committer's next wake.
    pub(crate) fn woken(&self) -> Notified<'_> {
        self.wake.notified()
    }

    /// Something a unit may wait for happened in a shard (a write answered, a close, a seek, a
    /// reader's end): the committer looks again, if a unit waits.
    pub(crate) fn poke(&self) {
        if self.waiting.load(Ordering::Acquire) > 0 {
            self.wake.notify_one();
        }
    }

    /// Settles a batch's records of several shards (`parts`: each shard's handle and its
    /// records, in order) with what the batch staged in `writes`: in every shard at once, as
    /// one unit that commits jointly. Without writes each settles alone; when a seek made one of
    /// them stale, every one is handed back (the batch's writes never commit). A shard that
    /// refuses its part (handed back meanwhile) answers for the settle, and the unit then never
    /// commits: the committer gives it back in the other shards.
    pub(crate) fn settle(
        &self,
        mut parts: Parts,
        writes: &StagedWrites,
    ) -> Result<(), KinesisError> {
        parts.sort_by(|(one, _), (other, _)| one.key().cmp(other.key()));
        let (staged, size) = writes.seal();
        if staged.is_empty() {
            let settles = parts.iter().flat_map(|(handle, members)| {
                members.iter().map(|member| handle.settle(member.ticket))
            });
            return super::units::settled_alone(settles, writes);
        }
        let (Some(first), Some(last)) = (
            parts.first().map(|(handle, _)| Arc::clone(handle)),
            parts.last().and_then(|(handle, members)| {
                let last = members.last()?;
                Some((
                    Arc::from(handle.key().shard()),
                    last.record.sequence.clone(),
                ))
            }),
        ) else {
            return Ok(());
        };
        let closed = first.closed();
        let handles: Vec<Arc<ShardHandle>> =
            parts.iter().map(|(handle, _)| Arc::clone(handle)).collect();
        let mut machines: Vec<_> = handles.iter().map(|handle| handle.lock()).collect();
        let whole = machines.iter().zip(&parts).all(|(machine, (_, members))| {
            machine.holds_all(members.iter().map(|member| member.ticket))
        });
        if !whole {
            drop(machines);
            writes.handled(&staged, HandlingOutcome::HandedBack);
            return hand_all_back(parts);
        }
        let unit = UnitId(JOINT | self.next.fetch_add(1, Ordering::Relaxed));
        let mut settled = Vec::with_capacity(parts.len());
        let mut kept = Vec::with_capacity(parts.len());
        for ((handle, members), machine) in parts.into_iter().zip(machines.iter_mut()) {
            let tickets = members.iter().map(|member| member.ticket).collect();
            settled.push(machine.settle_part(unit, size.clone(), members, true, closed));
            kept.push(Part { handle, tickets });
        }
        drop(machines);
        let handling = writes.handled(&staged, HandlingOutcome::Pending);
        let answers: Vec<_> = kept
            .iter()
            .map(|part| Arc::clone(&part.handle))
            .zip(settled)
            .collect();
        let entry = Pending {
            parts: kept,
            writes: staged,
            handling,
            shard: last.0,
            sequence: last.1,
            since: Instant::now(),
            in_flight: false,
        };
        let mut book = self.lock();
        if book.closed {
            // The committer ended (the subscription is closing): nothing would send it.
            let abandoned = entry.with_machines(|machines, parts| {
                let abandoned = joint::abandon(unit, machines, Instant::now());
                coming_back(machines, parts);
                abandoned
            });
            drop(book);
            entry.given_back(abandoned);
        } else {
            book.units.insert(unit, entry);
            self.waiting.fetch_add(1, Ordering::AcqRel);
            drop(book);
            self.wake.notify_one();
        }
        // The unit owes each settle's harness unit until it ends.
        answers
            .into_iter()
            .map(|(handle, settled)| handle.settle_answered(settled, false))
            .fold(Ok(()), Result::and)
    }

    /// What the committer does next: the first unit whose commit goes out now, or when the
    /// earliest is due again. A unit that can never commit is given back in every shard here.
    pub(crate) fn step(&self) -> Step {
        let mut book = self.lock();
        let mut earliest: Option<Instant> = None;
        let units: Vec<UnitId> = book.units.keys().copied().collect();
        for unit in units {
            let Some(entry) = book.units.get_mut(&unit).filter(|entry| !entry.in_flight) else {
                continue;
            };
            let since = entry.since;
            let next = entry.with_machines(|machines, parts| {
                let next = joint::next(unit, machines, since, Instant::now(), epoch_millis());
                if matches!(next, JointNext::Abandoned { .. }) {
                    coming_back(machines, parts);
                }
                next
            });
            match next {
                JointNext::Send(rows) => {
                    entry.in_flight = true;
                    let rows = entry
                        .parts
                        .iter()
                        .map(|part| part.handle.key().clone())
                        .zip(rows)
                        .collect();
                    return Step::Send {
                        unit,
                        rows,
                        writes: entry.writes.clone(),
                    };
                }
                JointNext::Wait(Some(at)) => {
                    earliest = Some(earliest.map_or(at, |earliest| earliest.min(at)));
                }
                JointNext::Wait(None) => {}
                abandoned @ JointNext::Abandoned { .. } => {
                    if let Some(entry) = book.units.remove(&unit) {
                        self.waiting.fetch_sub(1, Ordering::AcqRel);
                        entry.given_back(abandoned);
                    }
                }
            }
        }
        Step::Wait(earliest)
    }

    /// The store answered the joint commit of `unit` of `stream` with `answer` (with the places
    /// of the rows whose lease is lost, when a row refused it; `refusal`: the unit's own write
    /// that refused it): every part hears it (`joint::answered`). Answers the refusal as the
    /// handler reads it, for the committer to say.
    pub(crate) fn answered(
        &self,
        stream: &str,
        unit: UnitId,
        answer: Answer,
        lost: &[usize],
        refusal: Option<UserRefusal>,
    ) -> Option<CommitRefused> {
        let mut book = self.lock();
        let entry = book.units.get_mut(&unit)?;
        entry.in_flight = false;
        let why = refusal.map(|refusal| CommitRefused {
            stream: stream.to_owned(),
            shard: entry.shard.to_string(),
            sequence: entry.sequence.to_string(),
            action: refusal.action,
            table: refusal
                .action
                .and_then(|action| entry.writes.get(action))
                .and_then(crate::lease::table_of)
                .map(str::to_owned),
            code: refusal.code,
            message: refusal.message,
            item: refusal.item,
        });
        let carried = why.clone().map(Arc::new);
        let (resolved, back) = entry.with_machines(|machines, parts| {
            // The store names the rows by their place in the request: the parts' order.
            let lost = (!lost.is_empty()).then_some(lost);
            let resolved = joint::answered(unit, machines, Instant::now(), answer, lost);
            for (machine, part) in machines.iter_mut().zip(parts) {
                // The shard's own units hear nothing of a joint commit; its news is taken here.
                let news = machine.take_commit_news();
                part.handle.units_answered(machine, news);
                if let Some(why) = &carried {
                    for ticket in part
                        .tickets
                        .iter()
                        .filter(|ticket| machine.redelivers(**ticket))
                    {
                        part.handle.carry_refusal(*ticket, Arc::clone(why));
                    }
                }
                if machine.take_reader_wake() {
                    part.handle.read_wake.notify_one();
                }
            }
            (resolved, coming_back(machines, parts))
        });
        if resolved && let Some(entry) = book.units.remove(&unit) {
            self.waiting.fetch_sub(1, Ordering::AcqRel);
            entry.handling.ended(match (&why, answer) {
                (_, Answer::Done) => HandlingOutcome::Committed,
                (Some(why), _) => HandlingOutcome::Refused(Box::new(why.clone())),
                _ => HandlingOutcome::Abandoned,
            });
            entry.ended(back);
        } else if let Some(entry) = book.units.get(&unit) {
            entry.wake_parts(false);
        }
        why
    }
}

impl Pending {
    /// Runs `decide` over the parts' machines, locked together in shard order, beside the
    /// parts.
    fn with_machines<A>(
        &self,
        decide: impl FnOnce(&mut [&mut ShardMachine<Instant, Record>], &[Part]) -> A,
    ) -> A {
        let mut guards: Vec<_> = self.parts.iter().map(|part| part.handle.lock()).collect();
        let mut machines: Vec<&mut ShardMachine<Instant, Record>> =
            guards.iter_mut().map(|guard| &mut guard.machine).collect();
        decide(&mut machines, &self.parts)
    }

    /// The unit was given back everywhere (`abandoned`, as `joint::abandon` or `joint::next`
    /// answered it): its handling ends handed back, or abandoned where its commit was sent (it
    /// may have landed: the rows say, to whoever takes the shards).
    fn given_back(self, abandoned: JointNext<Instant>) {
        let JointNext::Abandoned { back, lost } = abandoned else {
            return;
        };
        self.handling.ended(if lost {
            HandlingOutcome::Abandoned
        } else {
            HandlingOutcome::HandedBack
        });
        self.ended(back);
    }

    /// The unit ended (committed, refused, or given back; `back`: some of its deliveries come
    /// again): each settle's harness unit is let go, and every part's tasks look again.
    fn ended(&self, back: bool) {
        for part in &self.parts {
            for _ in &part.tickets {
                part.handle.harness.settled();
            }
        }
        self.wake_parts(back);
    }

    /// Wakes every part's writer (its slot is free, or its own commits may go on), its
    /// redelivery task when `redeliver`, and whoever waits for a part whose lease ended.
    fn wake_parts(&self, redeliver: bool) {
        for part in &self.parts {
            part.handle.wake.notify_one();
            if redeliver {
                part.handle.handed_back.notify_one();
            }
            if part.handle.lock().ending().is_some() {
                part.handle.halted();
            }
        }
    }
}

/// Hands every record of `parts` back, to come again at once, each alone: a batch of several
/// shards that commits nothing.
pub(crate) fn hand_all_back(parts: Parts) -> Result<(), KinesisError> {
    parts
        .into_iter()
        .flat_map(|(handle, members)| members.into_iter().map(move |m| (Arc::clone(&handle), m)))
        .map(|(handle, member)| {
            handle.hand_back(
                member.record,
                member.ticket,
                member.attempts,
                Duration::ZERO,
            )
        })
        .fold(Ok(()), Result::and)
}

/// Of each part's deliveries, those given back to come again: the harness hears each now,
/// under the machines' locks, before their redelivery can go out. Whether there was one.
fn coming_back(machines: &[&mut ShardMachine<Instant, Record>], parts: &[Part]) -> bool {
    let mut back = false;
    for (machine, part) in machines.iter().zip(parts) {
        for _ in part
            .tickets
            .iter()
            .filter(|ticket| machine.redelivers(**ticket))
        {
            part.handle.harness.coming_back();
            back = true;
        }
    }
    back
}

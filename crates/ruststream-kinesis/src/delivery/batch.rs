//! Exactly once, a batch handler's records make one unit: what the batch stages commits with all
//! of them or with none (of one shard, with its checkpoint; of several, in one joint commit with
//! every shard's). Their settlements are gathered here until the last
//! one; then the unit settles whole ([`BatchEnd`]). Every record acknowledged or dropped, one at
//! least acknowledged: they settle at once with the batch's writes. Every record dropped: they
//! settle, and nothing the batch staged commits. One handed back or withheld from the handler:
//! nothing of the batch commits, and every record goes back (the acknowledged ones too, since
//! their effects were in the batch's writes), to come again each in a batch of its own.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use ruststream::AckError;

use crate::StagedWrites;
use crate::delivery::record::Record;
use crate::delivery::settlement::{Hold, Parts};
use crate::lease::HandlingOutcome;

/// How the runtime settled one record of a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Acknowledged: the checkpoint may pass it with what the batch staged.
    Ack,
    /// Dropped (`nack(false)`: a handler's `drop()`, a batch body's `Err`, a dead letter): the
    /// checkpoint may pass it.
    Drop,
    /// Handed back, to come again after the delay.
    Back(Duration),
    /// Withheld from the handler (its lease ran out, a seek made it stale).
    Forget,
}

/// How a batch ends, once every record of it was settled: the one rule the driver and the
/// simulation share.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BatchEnd {
    /// Every record acknowledged or dropped, one at least acknowledged: what the batch staged
    /// commits with them all.
    Commit,
    /// Every record dropped (a batch body that failed as a whole, records dead-lettered): they
    /// settle, and nothing the batch staged commits, as for a single record dropped.
    Drop,
    /// A record handed back or withheld: nothing of the batch commits, and every record goes
    /// back ([`back`]).
    Back,
}

impl BatchEnd {
    /// How a batch whose records were settled by `verdicts` ends.
    pub(crate) fn of(verdicts: impl IntoIterator<Item = Verdict>) -> Self {
        let mut acked = false;
        for verdict in verdicts {
            match verdict {
                Verdict::Ack => acked = true,
                Verdict::Drop => {}
                Verdict::Back(_) | Verdict::Forget => return Self::Back,
            }
        }
        if acked { Self::Commit } else { Self::Drop }
    }
}

/// Where a record of a batch that goes back goes, by its `verdict`: handed back after the delay
/// (`Some`: an acknowledged or dropped one at once, since its effects were in the batch's
/// writes), or forgotten (`None`: withheld from its handler, its shard's next owner or the seek
/// delivers it).
pub(crate) fn back(verdict: Verdict) -> Option<Duration> {
    match verdict {
        Verdict::Ack | Verdict::Drop => Some(Duration::ZERO),
        Verdict::Back(delay) => Some(delay),
        Verdict::Forget => None,
    }
}

/// A delivery's place in its batch's unit.
#[derive(Debug, Clone)]
pub(crate) struct InBatch {
    unit: Arc<BatchUnit>,
    /// Its place in the batch: the unit settles its records in this order.
    at: usize,
}

#[derive(Debug)]
struct BatchUnit {
    gathered: Mutex<Gathered>,
}

#[derive(Debug)]
struct Gathered {
    /// How many records are still to settle.
    left: usize,
    settled: Vec<Settling>,
}

#[derive(Debug)]
struct Settling {
    at: usize,
    hold: Hold,
    record: Record,
    attempt: u64,
    verdict: Verdict,
}

impl InBatch {
    /// The places of `members` records in one new unit.
    pub(crate) fn unit_of(members: usize) -> impl Iterator<Item = Self> {
        let unit = Arc::new(BatchUnit {
            gathered: Mutex::new(Gathered {
                left: members,
                settled: Vec::with_capacity(members),
            }),
        });
        (0..members).map(move |at| Self {
            unit: Arc::clone(&unit),
            at,
        })
    }

    /// This record (delivered `attempt` times so far) settled by `verdict`; its `hold` waits
    /// with the others until the last of them, which settles the unit with what the batch
    /// staged in `writes`.
    ///
    /// # Errors
    ///
    /// The last record's settlement answers for the unit: its shard refused the settle (the
    /// lease was lost, the broker shut down).
    pub(crate) fn settled(
        &self,
        hold: Hold,
        record: &Record,
        attempt: u64,
        verdict: Verdict,
        writes: &StagedWrites,
    ) -> Result<(), AckError> {
        let mut all = {
            let mut gathered = self
                .unit
                .gathered
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            gathered.settled.push(Settling {
                at: self.at,
                hold,
                record: record.clone(),
                attempt,
                verdict,
            });
            gathered.left -= 1;
            if gathered.left > 0 {
                return Ok(());
            }
            std::mem::take(&mut gathered.settled)
        };
        all.sort_by_key(|settling| settling.at);
        let Some(target) = all.first().map(|first| Arc::clone(&first.hold.target)) else {
            return Ok(());
        };
        match BatchEnd::of(all.iter().map(|settling| settling.verdict)) {
            BatchEnd::Commit => {}
            // Sealed, the writes are let go: the records settle with nothing staged.
            BatchEnd::Drop => writes.let_go(HandlingOutcome::Dropped),
            BatchEnd::Back => {
                writes.let_go(HandlingOutcome::HandedBack);
                let mut answer = Ok(());
                for settling in all {
                    let Settling {
                        hold,
                        record,
                        attempt,
                        verdict,
                        ..
                    } = settling;
                    let settled = match back(verdict) {
                        Some(delay) => {
                            hold.target
                                .on_hand_back(hold.ticket, record, attempt, delay)
                        }
                        None => {
                            hold.target.on_forget(hold.ticket);
                            Ok(())
                        }
                    };
                    answer = answer.and(settled);
                }
                return answer;
            }
        }
        // By shard, in the batch's order: a batch of several shards commits jointly.
        let mut parts: Parts = Vec::new();
        for settling in all {
            let member = (settling.hold.ticket, settling.record, settling.attempt);
            match parts
                .iter_mut()
                .find(|(shard, _)| Arc::ptr_eq(shard, &settling.hold.target))
            {
                Some((_, members)) => members.push(member),
                None => parts.push((settling.hold.target, vec![member])),
            }
        }
        if let [(_, members)] = parts.as_mut_slice() {
            return target.on_commit_batch(std::mem::take(members), writes);
        }
        target.on_commit_joint(parts, writes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WAIT: Duration = Duration::from_millis(200);

    #[test]
    fn a_batch_commits_when_one_record_at_least_was_acknowledged() {
        assert_eq!(
            BatchEnd::of([Verdict::Ack, Verdict::Drop, Verdict::Ack]),
            BatchEnd::Commit
        );
        assert_eq!(BatchEnd::of([Verdict::Ack]), BatchEnd::Commit);
    }

    #[test]
    fn a_batch_every_record_of_which_was_dropped_commits_nothing_it_staged() {
        assert_eq!(BatchEnd::of([Verdict::Drop, Verdict::Drop]), BatchEnd::Drop);
    }

    #[test]
    fn one_record_handed_back_or_withheld_sends_the_batch_back() {
        assert_eq!(
            BatchEnd::of([Verdict::Ack, Verdict::Back(WAIT), Verdict::Ack]),
            BatchEnd::Back
        );
        assert_eq!(
            BatchEnd::of([Verdict::Drop, Verdict::Forget]),
            BatchEnd::Back
        );
        // The acknowledged and dropped records come again at once, the handed-back one after
        // its delay, and the withheld one is left to whoever delivers it next.
        assert_eq!(back(Verdict::Ack), Some(Duration::ZERO));
        assert_eq!(back(Verdict::Drop), Some(Duration::ZERO));
        assert_eq!(back(Verdict::Back(WAIT)), Some(WAIT));
        assert_eq!(back(Verdict::Forget), None);
    }
}

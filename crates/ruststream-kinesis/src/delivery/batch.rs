//! Exactly once, a batch handler's records of one shard make one unit: what the batch stages
//! commits with all of them or with none. Their settlements are gathered here until the last
//! one; then the unit settles whole. Every record acknowledged (or dropped): they settle at
//! once with the batch's writes. One handed back or withheld from the handler: nothing of the
//! batch commits, and every record goes back (the acknowledged ones too, since their effects
//! were in the batch's writes), to come again each in a batch of its own.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use ruststream::AckError;

use crate::StagedWrites;
use crate::delivery::record::Record;
use crate::delivery::settlement::Hold;

/// How the runtime settled one record of a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Acknowledged, or dropped (`nack(false)`): the checkpoint may pass it with the batch.
    Settle,
    /// Handed back, to come again after the delay.
    Back(Duration),
    /// Withheld from the handler (its lease ran out, a seek made it stale).
    Forget,
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
        if all
            .iter()
            .all(|settling| settling.verdict == Verdict::Settle)
        {
            let members = all
                .into_iter()
                .map(|settling| (settling.hold.ticket, settling.record, settling.attempt))
                .collect();
            return target.on_commit_batch(members, writes);
        }
        // Nothing of the batch commits; every record goes back.
        drop(writes.seal());
        let mut answer = Ok(());
        for settling in all {
            let Settling {
                hold,
                record,
                attempt,
                verdict,
                ..
            } = settling;
            let settled = match verdict {
                Verdict::Settle => {
                    hold.target
                        .on_hand_back(hold.ticket, record, attempt, Duration::ZERO)
                }
                Verdict::Back(delay) => {
                    hold.target
                        .on_hand_back(hold.ticket, record, attempt, delay)
                }
                Verdict::Forget => {
                    hold.target.on_forget(hold.ticket);
                    Ok(())
                }
            };
            answer = answer.and(settled);
        }
        answer
    }
}

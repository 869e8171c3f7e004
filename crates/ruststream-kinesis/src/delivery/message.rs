//! The delivery a handler settles: one Kinesis record.

use std::sync::Arc;
use std::time::Duration;

use once_cell::race::OnceBox;
use ruststream::codec::CodecError;
use ruststream::{AckError, HeaderMap, IncomingMessage, Positioned};

#[cfg(feature = "dynamodb-lease")]
use crate::delivery::batch::{InBatch, Verdict};
use crate::delivery::record::Record;
use crate::delivery::settlement::{Hold, Standing};
use crate::{KinesisPosition, KinesisSeeker};

/// One record delivered from a shard.
///
/// `ack` and `nack(false)` settle it: the shard's checkpoint follows the contiguous prefix of
/// settled records. `nack(true)` (a handler's `HandlerOutcome::retry()`) hands the record back
/// to its shard on this instance, which delivers it again at once; `nack_after(delay)`
/// (`retry_after(delay)`) delivers it again after `delay`. Either way the record stays unsettled
/// meanwhile, so the checkpoint stays behind it and a crash or a handover reads it again; the
/// records after it are not delivered twice. [`redelivery_count`](IncomingMessage::redelivery_count)
/// counts this instance's deliveries of the record (1 the first time), so a registration's
/// `max_attempts(..)` and dead-letter destination apply. A delivery dropped without being settled
/// is handed back the same way.
///
/// A delivery whose shard's lease ran out by this instance's clock before its handler started
/// (a slow handler ahead of it in a worker lane, renewals that kept failing), or that a seek made
/// stale, never reaches its handler: it reports itself undecodable
/// ([`decode_error`](IncomingMessage::decode_error)), the runtime settles it by the
/// subscription's decode policy and logs why, and the next owner of the shard (or the seek)
/// delivers it again.
#[derive(Debug)]
pub struct KinesisMessage {
    pub(crate) record: Record,
    /// Its stream, shard and the subscription's seeker.
    pub(crate) origin: Arc<Origin>,
    /// How many times this subscription delivered the record, this delivery included.
    pub(crate) attempt: u64,
    /// Why the delivery may no longer reach a handler, once that was found.
    pub(crate) refused: Refused,
    pub(crate) settle: Option<Hold>,
    /// What the handling stages to commit with the checkpoint (exactly once).
    #[cfg(feature = "dynamodb-lease")]
    pub(crate) writes: crate::StagedWrites,
    /// Exactly once, in a batch of several records of its shard: the unit they settle as.
    #[cfg(feature = "dynamodb-lease")]
    pub(crate) batch: Option<InBatch>,
}

/// Why a delivery may no longer reach a handler, set once where that is found. Boxed: rarely
/// set, and the delivery is moved several times on its way. A `OnceBox` (one pointer, dropped
/// inline by a test of it) rather than a `OnceLock` (24 bytes with its box, and a drop that was
/// a call of its own on every delivery's drop); shown by its reason, not its address.
#[derive(Default)]
pub(crate) struct Refused(OnceBox<CodecError>);

impl Refused {
    /// The reason, once set.
    #[inline]
    pub(crate) fn get(&self) -> Option<&CodecError> {
        self.0.get()
    }

    /// The reason, set by `reason` unless it was set already.
    fn get_or_init(&self, reason: impl FnOnce() -> Box<CodecError>) -> &CodecError {
        self.0.get_or_init(reason)
    }
}

impl std::fmt::Debug for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.get() {
            Some(reason) => f.debug_tuple("Refused").field(reason).finish(),
            None => f.write_str("<not refused>"),
        }
    }
}

/// Where a delivery comes from: its stream and shard, and the subscription's seeker for the
/// handler's context. The same for every record a shard's reader delivers, so shared: a
/// delivery counts one reference rather than three, and is 40 bytes smaller (it is moved
/// several times on its way to its handler).
#[derive(Debug)]
pub(crate) struct Origin {
    pub(crate) stream: Arc<str>,
    pub(crate) shard: Arc<str>,
    pub(crate) seeker: KinesisSeeker,
}

/// Why a delivery's staged writes are let go without a commit.
#[derive(Debug, Clone, Copy)]
enum LetGo {
    /// It never reached its handler.
    Withheld,
    HandedBack,
    Dropped,
}

/// Why a delivery was kept from its handler: a lapsed lease or a seek, never the payload.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct Withheld(String);

impl KinesisMessage {
    /// The `attempt`th delivery of `record`, read from `origin`, settled through `settle`.
    #[inline]
    pub(crate) fn new(record: Record, origin: Arc<Origin>, attempt: u64, settle: Hold) -> Self {
        Self {
            #[cfg(feature = "dynamodb-lease")]
            writes: crate::StagedWrites::default(),
            #[cfg(feature = "dynamodb-lease")]
            batch: None,
            record,
            origin,
            attempt,
            refused: Refused::default(),
            settle: Some(settle),
        }
    }

    /// The delivery with what its handling stages committed exactly once: `writes`.
    #[cfg(feature = "dynamodb-lease")]
    pub(crate) fn with_writes(mut self, writes: crate::StagedWrites) -> Self {
        self.writes = writes;
        self
    }

    /// The stream the record was read from.
    #[must_use]
    pub fn stream(&self) -> &str {
        &self.origin.stream
    }

    /// The shard the record was read from.
    #[must_use]
    pub fn shard_id(&self) -> &str {
        &self.origin.shard
    }

    /// The record's sequence number in its shard: for a user record of a KPL aggregate, the
    /// aggregate's (shared by every user record in it).
    #[must_use]
    pub fn sequence_number(&self) -> &str {
        &self.record.sequence
    }

    /// For a user record of a KPL aggregate, its index there (the KCL's sub-sequence number);
    /// `None` for a plain record.
    #[must_use]
    pub fn sub_sequence_number(&self) -> Option<u64> {
        self.record.sub_sequence()
    }

    /// The record's partition key as a string: a user record's own, inside a KPL aggregate.
    #[must_use]
    pub fn partition_key_str(&self) -> &str {
        &self.record.partition_key
    }

    /// The explicit hash key a producer set on a user record inside a KPL aggregate; `None`
    /// otherwise (Kinesis does not return a plain record's).
    #[must_use]
    pub fn explicit_hash_key(&self) -> Option<&str> {
        self.record.explicit_hash_key.as_deref()
    }

    /// The record as the in-process view of handlings names it.
    #[cfg(all(feature = "testing", feature = "dynamodb-lease"))]
    pub(crate) fn handled_record(&self) -> crate::HandledRecord {
        crate::HandledRecord {
            shard: self.origin.shard.to_string(),
            sequence: self.record.sequence.to_string(),
            sub_sequence: self.record.sub_sequence(),
        }
    }

    /// When Kinesis received the record, in milliseconds since the Unix epoch.
    #[must_use]
    pub fn arrived_ms(&self) -> Option<i64> {
        self.record.arrived_ms()
    }

    /// Settles the delivery: acknowledged, or dropped (`dropped`: `nack(false)`).
    // Inlined into `ack` and `nack`: a call of its own cost its entry and exit on every record.
    #[inline(always)]
    fn settle_now(
        &mut self,
        #[cfg_attr(
            not(feature = "dynamodb-lease"),
            allow(unused_variables, reason = "only a batch's unit tells the two apart")
        )]
        dropped: bool,
    ) -> Result<(), AckError> {
        if self.refused.get().is_some() {
            // Withheld from its handler (its lease ran out, its shard is closing, a seek made it
            // stale): whatever the decode policy says of it, the record was not handled, so it
            // moves no checkpoint. The shard's next owner, or the seek, delivers it.
            return self.forget();
        }
        let Some(hold) = self.settle.take() else {
            return Ok(());
        };
        #[cfg(feature = "dynamodb-lease")]
        let hold = match self.to_batch(hold, if dropped { Verdict::Drop } else { Verdict::Ack }) {
            Ok(settled) => return settled,
            Err(hold) => hold,
        };
        #[cfg(feature = "dynamodb-lease")]
        if self.writes.is_exactly_once() {
            return hold
                .target
                .on_commit(hold.ticket, &self.record, self.attempt, &self.writes);
        }
        hold.target.on_settle(hold.ticket)
    }

    /// Exactly once, a record of a batch: its settlement by `verdict` goes to its batch's unit,
    /// which settles the batch with its last record (`Err`: not in a batch, the hold back).
    #[cfg(feature = "dynamodb-lease")]
    #[inline(always)]
    fn to_batch(&self, hold: Hold, verdict: Verdict) -> Result<Result<(), AckError>, Hold> {
        match &self.batch {
            Some(batch) => {
                Ok(batch.settled(hold, &self.record, self.attempt, verdict, &self.writes))
            }
            None => Err(hold),
        }
    }

    /// Lets go of what the handling staged: it never commits (`why`: the record was withheld
    /// from its handler, handed back or dropped), and staging more fails. A batch's writes are
    /// its unit's to let go.
    fn drop_writes(&self, why: LetGo) {
        #[cfg(feature = "dynamodb-lease")]
        if self.batch.is_none() {
            match why {
                // No handler saw it: there was no handling.
                LetGo::Withheld => drop(self.writes.seal()),
                LetGo::HandedBack => self
                    .writes
                    .let_go(crate::lease::HandlingOutcome::HandedBack),
                LetGo::Dropped => self.writes.let_go(crate::lease::HandlingOutcome::Dropped),
            }
        }
        #[cfg(not(feature = "dynamodb-lease"))]
        let _ = why;
    }

    /// Lets go of a delivery the subscription's receive found no longer current (its shard
    /// stopped, or a seek made it stale): no handler was given it, so it is let go as one
    /// withheld where its handler starts is (nothing it could have staged is a handling), not
    /// handed back as a delivery dropped unsettled is. The shard's next owner, or the seek,
    /// delivers it again.
    pub(crate) fn let_go_unreached(mut self) {
        let _ = self.forget();
    }

    /// Lets go of a delivery that was withheld from its handler, settling nothing.
    fn forget(&mut self) -> Result<(), AckError> {
        self.drop_writes(LetGo::Withheld);
        if let Some(hold) = self.settle.take() {
            #[cfg(feature = "dynamodb-lease")]
            let hold = match self.to_batch(hold, Verdict::Forget) {
                Ok(settled) => return settled,
                Err(hold) => hold,
            };
            hold.target.on_forget(hold.ticket);
        }
        Ok(())
    }

    /// Hands the record back to its shard, to be delivered again after `delay`.
    fn hand_back(&mut self, delay: Duration) -> Result<(), AckError> {
        if self.refused.get().is_some() {
            return self.forget();
        }
        self.drop_writes(LetGo::HandedBack);
        let Some(hold) = self.settle.take() else {
            return Ok(());
        };
        #[cfg(feature = "dynamodb-lease")]
        let hold = match self.to_batch(hold, Verdict::Back(delay)) {
            Ok(settled) => return settled,
            Err(hold) => hold,
        };
        hold.target
            .on_hand_back(hold.ticket, self.record.clone(), self.attempt, delay)
    }

    /// Whether this delivery may still reach its handler (the subscription's receive asks,
    /// `Inlet::poll_next`): its shard has not stopped, and no seek made it stale. Its lease is
    /// checked where its handler starts ([`decode_error`](IncomingMessage::decode_error)).
    pub(crate) fn is_current(&self) -> bool {
        self.settle
            .as_ref()
            .is_none_or(|hold| hold.target.current(hold.ticket))
    }

    /// Withholds this delivery from its handler, found of standing `check` (one that may not
    /// reach it): the error its handler's start reports, kept. Out of line: rare, and its
    /// formatting inlined into [`decode_error`](IncomingMessage::decode_error) made every
    /// record's check save and restore more registers.
    #[cold]
    #[inline(never)]
    fn withhold(&self, check: Standing) -> &CodecError {
        let why = self.withheld_because(check);
        self.refused
            .get_or_init(|| Box::new(CodecError::Decode(Box::new(Withheld(why)))))
    }

    /// Why a delivery of standing `check` is withheld from its handler.
    fn withheld_because(&self, check: Standing) -> String {
        match check {
            // Not asked of a current delivery; said as it is should it ever be.
            Standing::Current => String::from("the delivery is current"),
            Standing::Stopped => format!(
                "shard {} of stream {:?} stopped before the handler started (its lease was lost, \
                 or its reader is handing it back); the record ({}) is left to the shard's next \
                 owner",
                self.origin.shard,
                self.origin.stream,
                self.record_name()
            ),
            Standing::RanOut => format!(
                "the lease of shard {} of stream {:?} ran out by this instance's clock before \
                 the handler started; the record ({}) is left to the shard's next owner",
                self.origin.shard,
                self.origin.stream,
                self.record_name()
            ),
            Standing::Stale => self.stale(),
        }
    }

    fn stale(&self) -> String {
        format!(
            "a seek of stream {:?} moved shard {} after this record ({}) was read; the seek's \
             position delivers what follows it",
            self.origin.stream,
            self.origin.shard,
            self.record_name()
        )
    }

    /// The record in a log line: its sequence number, and its index for a user record of a KPL
    /// aggregate.
    fn record_name(&self) -> String {
        match self.record.sub_sequence() {
            Some(sub) => format!(
                "sequence number {}, user record {sub} of its KPL aggregate",
                self.record.sequence
            ),
            None => format!("sequence number {}", self.record.sequence),
        }
    }
}

impl Drop for KinesisMessage {
    fn drop(&mut self) {
        // Dropped without a settlement (a runtime that gave up on it, a panicking lane): the
        // record goes back to its shard, or its checkpoint would stay behind it for good.
        if self.settle.is_some() {
            let _ = self.hand_back(Duration::ZERO);
        }
    }
}

impl IncomingMessage for KinesisMessage {
    fn payload(&self) -> &[u8] {
        &self.record.payload
    }

    fn headers(&self) -> &HeaderMap {
        &self.record.headers
    }

    fn partition_key(&self) -> Option<&[u8]> {
        Some(self.record.partition_key.as_bytes())
    }

    fn redelivery_count(&self) -> Option<u64> {
        Some(self.attempt)
    }

    fn decode_error(&self) -> Option<&CodecError> {
        if let Some(refused) = self.refused.get() {
            return Some(refused);
        }
        let hold = self.settle.as_ref()?;
        let check = hold.target.standing(hold.ticket);
        if check.reaches_handler() {
            return None;
        }
        Some(self.withhold(check))
    }

    // Settled when called, not when the future is first polled: a settle waits for nothing
    // (the shard's lock is held for a moment), and a delivery moved into an `async fn`'s future
    // was copied whole for every record (over 200 bytes, a `memcpy`).
    fn ack(mut self) -> impl Future<Output = Result<(), AckError>> + Send {
        std::future::ready(self.settle_now(false))
    }

    // Settled when called, as `ack`.
    fn nack(mut self, requeue: bool) -> impl Future<Output = Result<(), AckError>> + Send {
        std::future::ready(if requeue {
            self.hand_back(Duration::ZERO)
        } else {
            // Dropped: the checkpoint passes the record, and nothing it staged commits (in a
            // batch, its unit decides: the batch's writes commit when another record of it was
            // acknowledged, and are let go when every one was dropped).
            self.drop_writes(LetGo::Dropped);
            self.settle_now(true)
        })
    }

    fn supports_nack_after(&self) -> bool {
        true
    }

    async fn nack_after(mut self, delay: Duration) -> Result<(), AckError> {
        self.hand_back(delay)
    }
}

impl Positioned for KinesisMessage {
    type Position = KinesisPosition;

    fn position(&self) -> KinesisPosition {
        let (shard, sequence) = (Arc::clone(&self.origin.shard), self.record.sequence.clone());
        match self.record.sub_sequence() {
            Some(sub_sequence) => KinesisPosition::AtSubSequence {
                shard,
                sequence,
                sub_sequence,
            },
            None => KinesisPosition::AtSequence { shard, sequence },
        }
    }
}

impl ruststream::Partitioned for KinesisMessage {
    fn partition_key(&self) -> Option<&[u8]> {
        Some(self.record.partition_key.as_bytes())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::delivery::seeker::{Seeking, Source};

    /// A subscription that seeks nothing: the source of a delivery made in a test.
    #[derive(Debug)]
    struct NoSource;

    impl Source for NoSource {
        fn seek(&self, _: crate::KinesisPosition) -> Seeking<'_> {
            Box::pin(async { Ok(()) })
        }

        fn close(&self) {}
    }

    #[test]
    fn a_refusal_shows_its_reason_not_its_address() {
        let refused = Refused::default();
        assert_eq!(format!("{refused:?}"), "<not refused>");
        refused.get_or_init(|| {
            Box::new(CodecError::Decode(Box::new(Withheld(
                "the lease ran out".to_owned(),
            ))))
        });
        let shown = format!("{refused:?}");
        assert!(shown.contains("the lease ran out"), "{shown}");
    }

    /// A delivery of `record` that settles against nothing (of stream `orders`, shard
    /// `shardId-0`).
    pub(crate) fn unheld(record: Record) -> KinesisMessage {
        KinesisMessage {
            #[cfg(feature = "dynamodb-lease")]
            writes: crate::StagedWrites::default(),
            #[cfg(feature = "dynamodb-lease")]
            batch: None,
            record,
            origin: Arc::new(Origin {
                stream: Arc::from("orders"),
                shard: Arc::from("shardId-0"),
                seeker: KinesisSeeker::new(Arc::new(NoSource)),
            }),
            attempt: 1,
            refused: Refused::default(),
            settle: None,
        }
    }
}

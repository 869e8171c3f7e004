//! The delivery a handler settles: one Kinesis record.

use std::sync::Arc;

use bytes::Bytes;
use ruststream::{AckError, HeaderMap, IncomingMessage, Positioned};

use crate::KinesisPosition;
use crate::shard::ShardHandle;
use crate::watermark::Ticket;

/// How a delivery reaches what it settles.
#[derive(Debug)]
pub(crate) enum Settle {
    /// A live shard: the watermark of the reader that delivered it.
    Live {
        shard: Arc<ShardHandle>,
        ticket: Ticket,
    },
    /// The in-process transport: the harness's count of deliveries in flight.
    #[cfg(feature = "testing")]
    InProcess(crate::in_process::InProcessSettle),
}

/// One record delivered from a shard.
///
/// `ack` and `nack(false)` settle it: the shard's checkpoint follows the contiguous prefix of
/// settled records. `nack(true)` answers [`AckError::Unsupported`]: Kinesis cannot hand one
/// record back, and the runtime's retry publishes a copy to the stream instead. A delivery
/// dropped unsettled keeps the checkpoint behind it, so the next owner of the shard reads it
/// again.
#[derive(Debug)]
pub struct KinesisMessage {
    pub(crate) payload: Bytes,
    pub(crate) headers: HeaderMap,
    pub(crate) partition_key: String,
    pub(crate) stream: Arc<str>,
    pub(crate) shard: Arc<str>,
    pub(crate) sequence: Arc<str>,
    pub(crate) arrived_ms: Option<i64>,
    /// The in-process subscription's seek generation the delivery belongs to.
    #[cfg_attr(not(feature = "testing"), allow(dead_code))]
    pub(crate) generation: u64,
    pub(crate) settle: Option<Settle>,
}

impl KinesisMessage {
    /// The stream the record was read from.
    #[must_use]
    pub fn stream(&self) -> &str {
        &self.stream
    }

    /// The shard the record was read from.
    #[must_use]
    pub fn shard_id(&self) -> &str {
        &self.shard
    }

    /// The record's sequence number in its shard.
    #[must_use]
    pub fn sequence_number(&self) -> &str {
        &self.sequence
    }

    /// The record's partition key as a string.
    #[must_use]
    pub fn partition_key_str(&self) -> &str {
        &self.partition_key
    }

    /// When Kinesis received the record, in milliseconds since the Unix epoch.
    #[must_use]
    pub fn arrived_ms(&self) -> Option<i64> {
        self.arrived_ms
    }

    fn settle_now(&mut self) -> Result<(), AckError> {
        match self.settle.take() {
            Some(Settle::Live { shard, ticket }) => shard
                .settle(ticket)
                .map_err(|err| AckError::Broker(Box::new(err))),
            #[cfg(feature = "testing")]
            Some(Settle::InProcess(settle)) => settle.settle(),
            None => Ok(()),
        }
    }
}

impl IncomingMessage for KinesisMessage {
    fn payload(&self) -> &[u8] {
        &self.payload
    }

    fn headers(&self) -> &HeaderMap {
        &self.headers
    }

    fn partition_key(&self) -> Option<&[u8]> {
        Some(self.partition_key.as_bytes())
    }

    async fn ack(mut self) -> Result<(), AckError> {
        self.settle_now()
    }

    async fn nack(mut self, requeue: bool) -> Result<(), AckError> {
        if requeue {
            // Kinesis cannot hand one record back; the record stays unsettled, so the checkpoint
            // stays behind it. The same answer in process and live.
            #[cfg(feature = "testing")]
            if let Some(Settle::InProcess(settle)) = &self.settle
                && settle.is_closed()
            {
                return Err(AckError::Broker(Box::new(crate::KinesisError::ShutDown {
                    what: "settling a delivery",
                })));
            }
            return Err(AckError::Unsupported);
        }
        self.settle_now()
    }
}

impl Positioned for KinesisMessage {
    type Position = KinesisPosition;

    fn position(&self) -> KinesisPosition {
        KinesisPosition::AtSequence {
            shard: Arc::clone(&self.shard),
            sequence: Arc::clone(&self.sequence),
        }
    }
}

impl ruststream::Partitioned for KinesisMessage {
    fn partition_key(&self) -> Option<&[u8]> {
        Some(self.partition_key.as_bytes())
    }
}

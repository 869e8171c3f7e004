//! An enhanced fan-out subscription to an in-process shard: each event brings what was written
//! past the subscription's position, at once if anything was, else as soon as something is.

use std::sync::Arc;

use tokio::sync::Notify;

use super::InProcessKinesis;
use crate::kinesis::fan_out::Event;

/// The most records one event brings (the service's events bring what a second wrote).
const EVENT_RECORDS: u32 = 10_000;

/// One open subscription's events.
#[derive(Debug)]
pub(crate) struct InProcessEvents {
    pub(super) kinesis: Arc<InProcessKinesis>,
    pub(super) stream: u32,
    pub(super) shard: u32,
    /// The next record the subscription brings.
    pub(super) position: u64,
    /// Wakes the subscription: a record was written to its shard.
    pub(super) news: Arc<Notify>,
}

impl InProcessEvents {
    /// Where the next event brings records from.
    pub(crate) fn position(&self) -> u64 {
        self.position
    }

    /// The next event: the records past the subscription's position (the wait for them enabled
    /// before they are looked for, so a write between the two is not missed).
    pub(crate) async fn next(&mut self) -> Event {
        loop {
            let written = self.news.notified();
            let mut written = std::pin::pin!(written);
            written.as_mut().enable();
            let (records, next) =
                self.kinesis
                    .read_from(self.stream, self.shard, self.position, EVENT_RECORDS);
            if !records.is_empty() {
                self.position = next;
                let continuation = records.last().map(|last| last.sequence.to_string());
                return Event::Records {
                    records: crate::kinesis::api::AnswerRecords::Made(records),
                    continuation,
                    millis_behind: Some(0),
                    ended: false,
                };
            }
            written.await;
        }
    }
}

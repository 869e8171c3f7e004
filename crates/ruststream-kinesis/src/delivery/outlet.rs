//! The channel between a subscription's tasks and its subscriber: records, in sends of up to
//! [`HANDED_AT_ONCE`] each, and failures to report, on a channel of their own so that records
//! waiting never crowd a report out.

use std::task::{Context, Poll, ready};

use tokio::sync::mpsc;

use crate::{KinesisError, KinesisMessage};

/// The most records a reader hands out at once, in one send: a batch shares the shard's lock,
/// the clocks' reading and the channel's send, which cost about as much as the rest of a
/// record's own path; past a few dozen the saving is spent.
pub(crate) const HANDED_AT_ONCE: usize = 64;

/// Failures waiting unread before more are dropped (each is logged where it is reported).
const REPORTS_WAITING: usize = 64;

/// Sends waiting at least, whatever the batch size: room for a few shards at their tip, whose
/// sends carry a record or two each.
const MIN_SENDS_WAITING: usize = 16;

/// What one send carries, in order: the records a reader handed out at once, or one record,
/// which needs no list of its own (a record at the tip, in process, a redelivery).
#[derive(Debug)]
#[expect(
    clippy::large_enum_variant,
    reason = "one record goes unboxed: a box would be the allocation a list is spared for"
)]
pub(crate) enum Items {
    One(Option<KinesisMessage>),
    Many(std::vec::IntoIter<KinesisMessage>),
}

impl Items {
    /// One record alone.
    pub(crate) fn one(message: KinesisMessage) -> Self {
        Self::One(Some(message))
    }

    /// `messages`, in order; one alone goes as [`one`](Self::one) does.
    pub(crate) fn of(mut messages: Vec<KinesisMessage>) -> Self {
        match messages.len() {
            1 => Self::One(messages.pop()),
            _ => Self::Many(messages.into_iter()),
        }
    }

    /// How many records are left to take.
    pub(crate) fn len(&self) -> usize {
        match self {
            Self::One(message) => usize::from(message.is_some()),
            Self::Many(messages) => messages.len(),
        }
    }

    /// Whether no record is left to take.
    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Default for Items {
    fn default() -> Self {
        Self::One(None)
    }
}

impl Iterator for Items {
    type Item = KinesisMessage;

    fn next(&mut self) -> Option<KinesisMessage> {
        match self {
            Self::One(message) => message.take(),
            Self::Many(messages) => messages.next(),
        }
    }
}

/// The sending side: the readers send records on `records`, the coordinator reports failures.
#[derive(Debug, Clone)]
pub(crate) struct Outlet {
    pub(crate) records: mpsc::Sender<Items>,
    reports: mpsc::Sender<KinesisError>,
}

impl Outlet {
    /// Reports `err` to the subscriber without waiting; dropped when many reports wait unread.
    pub(crate) fn report(&self, err: KinesisError) {
        let _ = self.reports.try_send(err);
    }

    /// Reports `err` to the subscriber, waiting for room.
    pub(crate) async fn report_waiting(&self, err: KinesisError) {
        let _ = self.reports.send(err).await;
    }
}

/// The receiving side, which the subscriber reads one delivery or report at a time.
#[derive(Debug)]
pub(crate) struct Inlet {
    records: mpsc::Receiver<Items>,
    reports: mpsc::Receiver<KinesisError>,
    /// What the last receive brought that the subscriber has not taken yet.
    received: Items,
    /// The sends of records received so far (the tests' view of how records were batched).
    #[cfg(test)]
    pub(crate) sends: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl Inlet {
    /// The next delivery, or a report (one waiting goes ahead of the records of the next send);
    /// `None` once every sender went and nothing waits.
    pub(crate) fn poll_next(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<KinesisMessage, KinesisError>>> {
        loop {
            if let Some(message) = self.received.next() {
                return Poll::Ready(Some(Ok(message)));
            }
            // A report waiting is taken at once; otherwise the reports are polled (a waker
            // registered) only when no record waits either, which spares the poll a record.
            if !self.reports.is_empty()
                && let Poll::Ready(Some(err)) = self.reports.poll_recv(cx)
            {
                return Poll::Ready(Some(Err(err)));
            }
            match self.records.poll_recv(cx) {
                Poll::Ready(Some(items)) => {
                    #[cfg(test)]
                    self.sends
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    self.received = items;
                }
                Poll::Ready(None) => return self.reports.poll_recv(cx).map(|err| err.map(Err)),
                Poll::Pending => {
                    return match ready!(self.reports.poll_recv(cx)) {
                        Some(err) => Poll::Ready(Some(Err(err))),
                        // The reports' senders went (a reader still holds the records'):
                        // the records' end, whose waker is set, is the stream's end.
                        None => Poll::Pending,
                    };
                }
            }
        }
    }
}

/// A subscription's channel, with room for about `records` records waiting (at least
/// [`MIN_SENDS_WAITING`] sends of up to [`HANDED_AT_ONCE`] each: up to 1,024 records for small
/// batch sizes), and for [`REPORTS_WAITING`] reports beside them.
pub(crate) fn channel(records: usize) -> (Outlet, Inlet) {
    let sends = records.div_ceil(HANDED_AT_ONCE).max(MIN_SENDS_WAITING);
    let (records_tx, records_rx) = mpsc::channel(sends);
    let (reports_tx, reports_rx) = mpsc::channel(REPORTS_WAITING);
    (
        Outlet {
            records: records_tx,
            reports: reports_tx,
        },
        Inlet {
            records: records_rx,
            reports: reports_rx,
            received: Items::default(),
            #[cfg(test)]
            sends: std::sync::Arc::default(),
        },
    )
}

#[cfg(test)]
mod tests {
    use std::future::poll_fn;

    use super::*;

    fn report(name: &str) -> KinesisError {
        KinesisError::Config {
            message: name.to_owned(),
        }
    }

    fn named(item: Option<Result<KinesisMessage, KinesisError>>) -> String {
        match item {
            Some(Err(KinesisError::Config { message })) => message,
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn reports_never_wait_behind_a_full_channel_of_records_and_the_end_is_seen() {
        let (outlet, mut inlet) = channel(1);
        // Fill the records' side to the brim: a report still has room.
        for _ in 0..MIN_SENDS_WAITING {
            outlet.records.try_send(Items::default()).unwrap();
        }
        assert!(outlet.records.try_send(Items::default()).is_err());
        outlet.report(report("a"));
        outlet.report_waiting(report("b")).await;
        assert_eq!(named(poll_fn(|cx| inlet.poll_next(cx)).await), "a");
        assert_eq!(named(poll_fn(|cx| inlet.poll_next(cx)).await), "b");
        drop(outlet);
        // The empty sends are read through, and the end follows them.
        assert!(poll_fn(|cx| inlet.poll_next(cx)).await.is_none());
    }

    #[test]
    fn one_record_goes_without_a_list_and_an_empty_send_yields_nothing() {
        assert!(matches!(Items::of(Vec::new()), Items::Many(_)));
        assert_eq!(Items::of(Vec::new()).count(), 0);
        assert_eq!(Items::default().count(), 0);
    }
}

//! The channel between a subscription's tasks and its subscriber: records, in sends of up to
//! [`HANDED_AT_ONCE`] each, and failures to report, on a channel of their own so that records
//! waiting never crowd a report out.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, ready};

use tokio::sync::mpsc;

use crate::delivery::run::Run;
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

/// Emptied lists of deliveries kept for the readers' next such sends (each with room for
/// [`HANDED_AT_ONCE`] deliveries, about 14 KiB: up to about 220 KiB a subscription kept while
/// it idles): as many as the channel holds sends at the least, so a channel that filled and
/// drained allocates nothing when it fills again (fewer were let go and allocated again at
/// every such turn); past that, a large batch size's channel lets the rest go. Only a send that
/// waited for room and was joined by more records is such a list; a run's list of records goes
/// back to its own reader ([`MakeDelivery::give_back`](crate::delivery::run::MakeDelivery)).
const SPARES_KEPT: usize = MIN_SENDS_WAITING;

/// What one send carries, in order: the records a reader handed out at once, or one record,
/// which needs no list of its own (a record at the tip, in process, a redelivery).
#[derive(Debug)]
pub(crate) enum Items {
    One(Option<KinesisMessage>),
    /// The records a reader handed out at once, made deliveries as they are taken.
    Run(Run),
    /// Deliveries taken from the front (a `VecDeque` made of the readers' `Vec`, which it takes
    /// as it is); the emptied list goes back to the readers ([`Spares`]). A send that waited
    /// for room and was joined by more records.
    Many(VecDeque<KinesisMessage>),
}

impl Items {
    /// One record alone.
    pub(crate) fn one(message: KinesisMessage) -> Self {
        Self::One(Some(message))
    }

    /// `messages`, in order.
    pub(crate) fn of(messages: Vec<KinesisMessage>) -> Self {
        Self::Many(VecDeque::from(messages))
    }

    /// The list to add more deliveries to: this one's (none was taken from it yet, so it is
    /// taken as it is), or an emptied one from `spares` with this one's delivery in it.
    pub(crate) fn into_list(self, spares: &Spares) -> Vec<KinesisMessage> {
        match self {
            Self::Many(messages) => Vec::from(messages),
            Self::One(message) => {
                let mut messages = spares.take();
                messages.extend(message);
                messages
            }
            Self::Run(mut run) => {
                let mut messages = spares.take();
                messages.extend(std::iter::from_fn(|| run.take()));
                messages
            }
        }
    }

    /// How many records are left to take.
    pub(crate) fn len(&self) -> usize {
        match self {
            Self::One(message) => usize::from(message.is_some()),
            Self::Run(run) => run.len(),
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

    // Inlined into the subscriber's poll, so a delivery is copied once into what the poll
    // answers, not once more on the way. (The poll takes a run's records itself.)
    #[inline]
    fn next(&mut self) -> Option<KinesisMessage> {
        match self {
            Self::One(message) => message.take(),
            Self::Run(run) => run.take(),
            Self::Many(messages) => messages.pop_front(),
        }
    }
}

/// The emptied lists of deliveries of a subscription's sends (those that waited for room and
/// were joined by more), which the subscriber hands back as it takes their last delivery and
/// the readers fill again: such a list is allocated once, not at every send (an allocation and
/// its release cost about 50 instructions a record, at a few dozen records a send).
#[derive(Debug, Clone, Default)]
pub(crate) struct Spares(Arc<Mutex<Vec<Vec<KinesisMessage>>>>);

impl Spares {
    /// An empty list, with room for [`HANDED_AT_ONCE`] deliveries when none was kept.
    pub(crate) fn take(&self) -> Vec<KinesisMessage> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop()
            .unwrap_or_else(|| Vec::with_capacity(HANDED_AT_ONCE))
    }

    /// Keeps the list `items` came in, once emptied, unless [`SPARES_KEPT`] are kept already.
    fn give(&self, items: Items) {
        let Items::Many(list) = items else {
            return;
        };
        if !list.is_empty() || list.capacity() == 0 {
            return;
        }
        let mut kept = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if kept.len() < SPARES_KEPT {
            kept.push(Vec::from(list));
        }
    }
}

/// The sending side: the readers send records on `records`, the coordinator reports failures.
#[derive(Debug, Clone)]
pub(crate) struct Outlet {
    pub(crate) records: mpsc::Sender<Items>,
    /// The lists the subscriber emptied, for the next sends.
    pub(crate) spares: Spares,
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
    /// Where its list goes once emptied.
    spares: Spares,
    /// The sends of records received so far (the tests' view of how records were batched).
    #[cfg(test)]
    pub(crate) sends: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl Inlet {
    /// The next delivery that may still reach a handler, or a report (one waiting goes ahead of
    /// the records of the next send); `None` once every sender went and nothing waits.
    ///
    /// A delivery whose shard stopped or that a seek made stale never reaches a handler: it is
    /// let go here ([`KinesisMessage::is_current`], or for a run's record
    /// [`MakeDelivery::current`](crate::delivery::run::MakeDelivery::current) by its ticket), as
    /// one withheld is ([`KinesisMessage::let_go_unreached`]). One whose lease ran out while it
    /// waited is withheld where its handler starts
    /// ([`decode_error`](ruststream::IncomingMessage::decode_error)): the clocks are read there,
    /// not twice a record. (Checked here rather than by a stream combinator, which moved every
    /// delivery in and out of its own slot: two copies of over 200 bytes a record.)
    pub(crate) fn poll_next(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<KinesisMessage, KinesisError>>> {
        loop {
            // A run's record is looked at by its ticket, and made a delivery right where the
            // answer is: made first, the delivery was copied twice more on its way (over 200
            // bytes).
            if let Items::Run(run) = &mut self.received {
                if let Some((record, ticket)) = run.next_record() {
                    if run.current(ticket) {
                        return Poll::Ready(Some(Ok(run.deliver(record, ticket))));
                    }
                    run.deliver(record, ticket).let_go_unreached();
                    continue;
                }
                // Taken whole: let go now (its list goes back to its reader), not held with its
                // shard until the next send comes.
                self.received = Items::default();
            } else if let Some(message) = self.received.next() {
                if message.is_current() {
                    return Poll::Ready(Some(Ok(message)));
                }
                message.let_go_unreached();
                continue;
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
                    let emptied = std::mem::replace(&mut self.received, items);
                    self.spares.give(emptied);
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
    let spares = Spares::default();
    (
        Outlet {
            records: records_tx,
            spares: spares.clone(),
            reports: reports_tx,
        },
        Inlet {
            records: records_rx,
            reports: reports_rx,
            received: Items::default(),
            spares,
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

    #[tokio::test]
    async fn a_run_taken_whole_is_let_go_at_once_and_its_list_goes_back_to_its_reader() {
        use crate::delivery::record::Record;
        use crate::delivery::run::tests::{Asked, ticket};
        use crate::delivery::run::{MakeDelivery, Run};
        let (outlet, mut inlet) = channel(HANDED_AT_ONCE);
        let maker = std::sync::Arc::new(Asked::default());
        let run = Run::new(
            Record::plain("1", b"a"),
            ticket(),
            vec![Record::plain("2", b"b")],
            std::sync::Arc::clone(&maker) as std::sync::Arc<dyn MakeDelivery>,
        );
        outlet.records.try_send(Items::Run(run)).unwrap();
        for sequence in ["1", "2"] {
            let taken = poll_fn(|cx| inlet.poll_next(cx)).await;
            assert!(matches!(taken, Some(Ok(m)) if m.sequence_number() == sequence));
        }
        let mut cx = Context::from_waker(std::task::Waker::noop());
        assert!(inlet.poll_next(&mut cx).is_pending(), "nothing more waits");
        assert_eq!(
            std::sync::Arc::strong_count(&maker),
            1,
            "the run, taken whole, no longer holds its shard's maker"
        );
        assert_eq!(maker.1.lock().unwrap().len(), 1, "its list went back");
    }

    #[tokio::test]
    async fn the_lists_the_subscriber_empties_go_back_to_the_readers_and_few_are_kept() {
        let (outlet, mut inlet) = channel(HANDED_AT_ONCE * (SPARES_KEPT + 2));
        let spares = outlet.spares.clone();
        for _ in 0..SPARES_KEPT + 2 {
            outlet
                .records
                .try_send(Items::of(Vec::with_capacity(8)))
                .unwrap();
        }
        drop(outlet);
        assert!(poll_fn(|cx| inlet.poll_next(cx)).await.is_none());
        // Each list but the last was emptied and replaced by the next: as many as are kept
        // come back, as they were sent.
        for kept in 0..SPARES_KEPT {
            let list = spares.take();
            assert!(list.is_empty());
            assert!(
                (8..HANDED_AT_ONCE).contains(&list.capacity()),
                "list {kept} is one that was sent: {}",
                list.capacity()
            );
        }
        assert!(
            spares.take().capacity() >= HANDED_AT_ONCE,
            "past those kept, a new list"
        );
        // A single delivery's send has no list to give back.
        spares.give(Items::default());
        assert!(spares.take().capacity() >= HANDED_AT_ONCE);
    }
}

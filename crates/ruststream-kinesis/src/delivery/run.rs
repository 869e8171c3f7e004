//! Records a shard handed out at once, sent to the subscriber as they are and made deliveries
//! there, one at a time as it takes them: a delivery is built once, where it is taken, rather
//! than built into a list and copied out of it (over 200 bytes a record, twice).

use std::sync::Arc;

use crate::KinesisMessage;
use crate::delivery::message::Origin;
use crate::delivery::record::Record;
use crate::delivery::settlement::{Hold, Settlement};
use crate::watermark::Ticket;

/// What makes a shard's deliveries: its reader's, which a run of its records carries to the
/// subscriber.
pub(crate) trait MakeDelivery: Send + Sync + std::fmt::Debug {
    /// The delivery of `record`, handed out under `ticket`, its `attempt`th.
    fn deliver(&self, record: Record, ticket: Ticket, attempt: u64) -> KinesisMessage;

    /// Where its deliveries come from and what they settle against, when a delivery is no more
    /// than that ([`Plain`]: nothing staged with it), so that a run makes them itself, inlined
    /// where the subscriber takes them rather than by a call to [`deliver`](Self::deliver);
    /// `None` when the maker adds more (exactly once).
    fn plain(&self) -> Option<Plain>;

    /// Whether the delivery handed out under `ticket` may still reach its handler, as its
    /// delivery would say ([`KinesisMessage::is_current`]).
    fn current(&self, ticket: Ticket) -> bool;

    /// A run's list of records, emptied, for the reader's next run: a run's list is allocated
    /// once, not at every send.
    fn give_back(&self, emptied: Vec<Record>);
}

/// What a delivery made of a record and its ticket alone comes from and settles against.
#[derive(Debug, Clone)]
pub(crate) struct Plain {
    pub(crate) origin: Arc<Origin>,
    pub(crate) target: Arc<dyn Settlement>,
}

impl Plain {
    /// The delivery of `record`, handed out under `ticket`, its `attempt`th.
    #[inline]
    pub(crate) fn deliver(&self, record: Record, ticket: Ticket, attempt: u64) -> KinesisMessage {
        KinesisMessage::new(
            record,
            Arc::clone(&self.origin),
            attempt,
            Hold::new(Arc::clone(&self.target), ticket),
        )
    }
}

/// Records a shard handed out at once, in order, under consecutive tickets (the first one's
/// `next`: [`Ticket::following`]), each made a delivery as it is taken. Dropped with records
/// left (a subscription that went, a send that failed), each is made a delivery and dropped,
/// which lets it go as a delivery dropped unsettled is; dropped, it gives its emptied list back
/// to its maker ([`MakeDelivery::give_back`]).
#[derive(Debug)]
pub(crate) struct Run {
    first: Option<Record>,
    /// The rest, last first: taken from the back, a `Vec`'s cheapest end (the shard hands a
    /// run's records out so: [`ShardMachine::next_reads`]), and given back as it is once
    /// emptied.
    ///
    /// [`ShardMachine::next_reads`]: crate::shard::ShardMachine::next_reads
    rest: Vec<Record>,
    next: Ticket,
    maker: Arc<dyn MakeDelivery>,
    /// The maker's [`plain`](MakeDelivery::plain) parts, asked once: a delivery is made here.
    plain: Option<Plain>,
}

impl Run {
    /// `first` handed out under `ticket`, then `rest` (last first) under the tickets that
    /// follow it.
    pub(crate) fn new(
        first: Record,
        ticket: Ticket,
        rest: Vec<Record>,
        maker: Arc<dyn MakeDelivery>,
    ) -> Self {
        Self {
            first: Some(first),
            rest,
            next: ticket,
            plain: maker.plain(),
            maker,
        }
    }

    /// The next record's delivery, if any is left.
    pub(crate) fn take(&mut self) -> Option<KinesisMessage> {
        let (record, ticket) = self.next_record()?;
        Some(self.deliver(record, ticket))
    }

    /// The next record and its ticket, if any is left, for [`deliver`](Self::deliver).
    #[inline]
    pub(crate) fn next_record(&mut self) -> Option<(Record, Ticket)> {
        let record = match self.first.take() {
            Some(first) => first,
            None => self.rest.pop()?,
        };
        let ticket = self.next;
        self.next = ticket.following();
        Some((record, ticket))
    }

    /// Whether the delivery of the record under `ticket` may still reach its handler.
    #[inline]
    pub(crate) fn current(&self, ticket: Ticket) -> bool {
        self.maker.current(ticket)
    }

    /// The delivery of a record [`next_record`](Self::next_record) took.
    #[inline]
    pub(crate) fn deliver(&self, record: Record, ticket: Ticket) -> KinesisMessage {
        match &self.plain {
            Some(plain) => plain.deliver(record, ticket, 1),
            None => self.maker.deliver(record, ticket, 1),
        }
    }

    /// How many records are left to take.
    pub(crate) fn len(&self) -> usize {
        usize::from(self.first.is_some()) + self.rest.len()
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        while let Some(message) = self.take() {
            drop(message);
        }
        let emptied = std::mem::take(&mut self.rest);
        if emptied.capacity() > 0 {
            self.maker.give_back(emptied);
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::sync::Mutex;

    use super::*;

    /// Makes no real delivery: says which (sequence, ticket) it was asked for, and keeps the
    /// lists given back.
    #[derive(Debug, Default)]
    pub(crate) struct Asked(
        Mutex<Vec<(String, Ticket)>>,
        pub(crate) Mutex<Vec<Vec<Record>>>,
    );

    impl MakeDelivery for Asked {
        fn deliver(&self, record: Record, ticket: Ticket, attempt: u64) -> KinesisMessage {
            assert_eq!(
                attempt, 1,
                "a run's records are delivered for the first time"
            );
            self.0
                .lock()
                .unwrap()
                .push((record.sequence.to_string(), ticket));
            crate::delivery::message::tests::unheld(record)
        }

        fn plain(&self) -> Option<Plain> {
            None
        }

        fn current(&self, _: Ticket) -> bool {
            true
        }

        fn give_back(&self, emptied: Vec<Record>) {
            self.1.lock().unwrap().push(emptied);
        }
    }

    pub(crate) fn ticket() -> Ticket {
        crate::watermark::Watermark::<()>::default().push(crate::SharedStr::from("0"))
    }

    #[test]
    fn a_run_delivers_its_records_in_order_under_consecutive_tickets_and_a_drop_lets_the_rest_go() {
        let asked = Arc::new(Asked::default());
        let first = ticket();
        let mut run = Run::new(
            Record::plain("1", b"a"),
            first,
            // Last first, as the shard hands them out.
            vec![Record::plain("3", b"c"), Record::plain("2", b"b")],
            Arc::clone(&asked) as Arc<dyn MakeDelivery>,
        );
        assert_eq!(run.len(), 3);
        let taken = run.take().expect("the first");
        assert_eq!(taken.sequence_number(), "1");
        assert_eq!(run.len(), 2);
        drop(run);
        let given = asked.1.lock().unwrap();
        assert!(
            given.len() == 1 && given[0].is_empty() && given[0].capacity() >= 2,
            "its list, emptied, is given back"
        );
        let asked = asked.0.lock().unwrap().clone();
        assert_eq!(
            asked,
            [
                ("1".to_owned(), first),
                ("2".to_owned(), first.following()),
                ("3".to_owned(), first.following().following()),
            ],
            "every record is made a delivery once, the rest as the run is dropped"
        );
    }
}

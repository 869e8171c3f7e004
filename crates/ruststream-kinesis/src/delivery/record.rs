//! A record as a reader read and decoded it from a shard: what a delivery carries, and what a
//! retry hands out again. A Kinesis record the KPL aggregated is its user records, one delivery
//! each ([`decoded`]).

use bytes::Bytes;
use ruststream::HeaderMap;

use crate::SharedStr;
use crate::kinesis::api::FetchedRecord;
use crate::kinesis::{envelope, kpl};

/// What a delivery carries of its record: enough to hand it out again after a retry.
///
/// At most 128 bytes ([`RECORD_SIZE_MOST`]): a record is moved several times on its way to its
/// handler, and a move of up to 128 bytes is a few register copies where a larger one is a call
/// of `memcpy` (about 30 instructions, four times a record when it was 144 bytes). So its
/// rarely read figures are stored small: the index in an aggregate as a `u32` (an aggregate
/// fits in a 1 MiB record, so it never holds 2^32 user records), the arrival as an `i64` with
/// [`NO_ARRIVAL`] for none.
#[derive(Debug, Clone)]
pub(crate) struct Record {
    pub(crate) payload: Bytes,
    pub(crate) headers: HeaderMap,
    /// The user record's own partition key (the Kinesis record's, for a plain record).
    pub(crate) partition_key: SharedStr,
    /// The user record's explicit hash key, where the producer set one inside an aggregate.
    /// (A `Box<str>`, not a `String`: 8 bytes less.)
    pub(crate) explicit_hash_key: Option<Box<str>>,
    /// The Kinesis record's sequence number.
    pub(crate) sequence: SharedStr,
    /// Its index in the aggregate it was packed in; `None` for a plain record.
    sub_sequence: Option<u32>,
    /// Whether it is the last of its Kinesis record (a plain record always is): a checkpoint
    /// through it records the Kinesis record's sequence number, which covers every user record
    /// in it; one through an earlier user record records the index too.
    pub(crate) ends_record: bool,
    /// When Kinesis received it, in milliseconds since the epoch; [`NO_ARRIVAL`]: not known.
    arrived_ms: i64,
}

/// The most bytes a [`Record`] takes, so that moving one copies registers, not calls `memcpy`.
pub(crate) const RECORD_SIZE_MOST: usize = 128;

const _: () = assert!(
    std::mem::size_of::<Record>() <= RECORD_SIZE_MOST,
    "a record grew past 128 bytes: every move of it becomes a call of memcpy"
);

/// A record's arrival when none is known (no Kinesis answer dates a record so).
const NO_ARRIVAL: i64 = i64::MIN;

impl Record {
    /// A plain record: `payload` as it is, no headers.
    #[cfg(test)]
    pub(crate) fn plain(sequence: &str, payload: &'static [u8]) -> Self {
        Self {
            payload: Bytes::from_static(payload),
            headers: HeaderMap::new(),
            partition_key: SharedStr::from("k"),
            explicit_hash_key: None,
            sequence: SharedStr::from(sequence),
            sub_sequence: None,
            ends_record: true,
            arrived_ms: NO_ARRIVAL,
        }
    }

    /// For a user record of a KPL aggregate, its index there; `None` for a plain record.
    pub(crate) fn sub_sequence(&self) -> Option<u64> {
        self.sub_sequence.map(u64::from)
    }

    /// When Kinesis received the record, in milliseconds since the epoch, when known.
    pub(crate) fn arrived_ms(&self) -> Option<i64> {
        (self.arrived_ms != NO_ARRIVAL).then_some(self.arrived_ms)
    }
}

/// Pushes the deliveries of one Kinesis record onto `out`: its user records in order when it is
/// a KPL aggregate (magic, digest and protobuf all check out), else the record itself; each with
/// the headers of our envelope read from its data. Whether it went as it is (not as an
/// aggregate's user records). Pushed where they go, not returned: a record is moved once less,
/// on every record read.
// Inlined into the reader's loop over an answer's records, with the envelope's check: a plain
// record, the usual one, is pushed without a call; an aggregate's user records are pushed out of
// line.
#[inline]
pub(crate) fn decode_into(record: FetchedRecord, out: &mut Vec<Record>) -> bool {
    if kpl::has_magic(&record.data)
        && let Some(users) = kpl::deaggregate(&record.data)
    {
        push_user_records(record, users, out);
        return false;
    }
    let (payload, headers) = envelope::decode(record.data);
    out.push(Record {
        payload,
        headers,
        partition_key: record.partition_key,
        explicit_hash_key: None,
        sequence: record.sequence,
        sub_sequence: None,
        ends_record: true,
        arrived_ms: record.arrived_ms.unwrap_or(NO_ARRIVAL),
    });
    true
}

/// Pushes the user records of `record`, a KPL aggregate, in order: `users`.
#[inline(never)]
fn push_user_records(record: FetchedRecord, users: Vec<kpl::UserRecord>, out: &mut Vec<Record>) {
    let last = users.len().saturating_sub(1);
    out.extend(users.into_iter().enumerate().map(|(index, user)| {
        let (payload, headers) = envelope::decode(Bytes::from(user.data));
        Record {
            payload,
            headers,
            // A part of the one string the aggregate's partition keys share.
            partition_key: user.partition_key,
            explicit_hash_key: user.explicit_hash_key.map(String::into_boxed_str),
            sequence: record.sequence.clone(),
            // Below 2^32: the aggregate fits in one record of at most 1 MiB.
            sub_sequence: Some(u32::try_from(index).unwrap_or(u32::MAX)),
            ends_record: index == last,
            arrived_ms: record.arrived_ms.unwrap_or(NO_ARRIVAL),
        }
    }));
}

/// The deliveries of one Kinesis record, in order ([`decode_into`]).
#[cfg(test)]
pub(crate) fn decoded(record: FetchedRecord) -> Vec<Record> {
    let mut out = Vec::new();
    decode_into(record, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shard::read::Sequenced;

    fn fetched(data: Vec<u8>) -> FetchedRecord {
        FetchedRecord {
            data: Bytes::from(data),
            partition_key: SharedStr::from("outer"),
            sequence: SharedStr::from("4711"),
            arrived_ms: Some(1_700_000_000_000),
        }
    }

    #[test]
    fn an_aggregate_is_its_user_records_each_with_its_keys_and_headers() {
        let mut headers = HeaderMap::new();
        headers.insert("trace", "t-1");
        let mut aggregate = kpl::Aggregate::new();
        aggregate.push("order-1", None, envelope::encode(b"one", &headers).to_vec());
        aggregate.push("order-2", Some("42"), b"two".to_vec());
        aggregate.push("order-1", None, b"three".to_vec());
        let records = decoded(fetched(aggregate.encode()));
        let seen: Vec<_> = records
            .iter()
            .map(|r| {
                (
                    &r.payload[..],
                    &*r.partition_key,
                    r.explicit_hash_key.as_deref(),
                    r.sub_sequence,
                    r.ends_record,
                )
            })
            .collect();
        assert_eq!(
            seen,
            [
                (&b"one"[..], "order-1", None, Some(0), false),
                (&b"two"[..], "order-2", Some("42"), Some(1), false),
                (&b"three"[..], "order-1", None, Some(2), true),
            ]
        );
        assert_eq!(records[0].headers, headers);
        assert!(records[1].headers.is_empty());
        assert!(records.iter().all(|r| &*r.sequence == "4711"));
        let checkpoints: Vec<_> = records.iter().map(Sequenced::checkpoint).collect();
        assert_eq!(
            checkpoints.iter().map(|c| &**c).collect::<Vec<_>>(),
            ["4711:0", "4711:1", "4711"],
            "inside the aggregate the index; its last covers all of it"
        );
        assert!(
            records
                .iter()
                .all(|r| r.arrived_ms() == Some(1_700_000_000_000))
        );
    }

    #[test]
    fn a_plain_record_and_one_that_only_looks_aggregated_are_one_delivery() {
        let mut looks = kpl::MAGIC.to_vec();
        looks.extend_from_slice(b"not a protobuf, and no digest of it either");
        for data in [b"{\"id\":1}".to_vec(), looks] {
            let records = decoded(fetched(data.clone()));
            assert_eq!(records.len(), 1);
            assert_eq!(&records[0].payload[..], &data[..]);
            assert_eq!(&*records[0].partition_key, "outer");
            assert_eq!(records[0].sub_sequence(), None);
            assert!(records[0].ends_record);
        }
    }

    #[test]
    fn an_arrival_kinesis_did_not_give_reads_as_none_and_one_it_gave_as_it_was() {
        for arrived in [
            None,
            Some(0),
            Some(-1),
            Some(1_700_000_000_000),
            Some(i64::MAX),
        ] {
            let records = decoded(FetchedRecord {
                arrived_ms: arrived,
                ..fetched(b"{}".to_vec())
            });
            assert_eq!(records[0].arrived_ms(), arrived);
        }
    }
}

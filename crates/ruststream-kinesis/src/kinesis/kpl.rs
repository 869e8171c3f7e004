//! The KPL aggregation format: many user records packed into one Kinesis record, as the Kinesis
//! Producer Library and AWS's aggregation libraries write them. The record's data is the magic
//! bytes `F3 89 9A C2`, a protobuf `AggregatedRecord` (a table of partition keys, a table of
//! explicit hash keys, and records that point into them, each with its data), then the MD5 of
//! the protobuf bytes.
//!
//! [`deaggregate`] reads one: data counts as an aggregate only when the magic, the MD5 and the
//! protobuf (every index inside it included) all check out, as the Java KCL decides; anything
//! else is a plain record. [`Aggregate`] packs user records bound for one shard, knowing the
//! exact size of what it will write, so a publisher fills a record up to the stream's limit.
//!
//! Our header envelope ([`envelope`](super::envelope)) goes inside each user record's data: the
//! two never share bytes, and a record is first de-aggregated, then each user record's headers
//! are read.

use std::collections::HashMap;

use md5::{Digest, Md5};
use prost::Message;
use prost::encoding::encoded_len_varint;

use crate::SharedStr;
use crate::shared_str::Gathered;

/// The first four bytes of an aggregated record's data.
pub(crate) const MAGIC: [u8; 4] = [0xF3, 0x89, 0x9A, 0xC2];

/// The length of the MD5 digest after the protobuf.
const DIGEST_LEN: usize = 16;

/// The bytes an aggregate adds around its protobuf: the magic and the digest.
pub(crate) const FRAME_LEN: usize = MAGIC.len() + DIGEST_LEN;

/// `AggregatedRecord` (proto2), the protobuf inside an aggregate.
#[derive(Clone, PartialEq, Message)]
struct AggregatedRecord {
    #[prost(string, repeated, tag = "1")]
    partition_key_table: Vec<String>,
    #[prost(string, repeated, tag = "2")]
    explicit_hash_key_table: Vec<String>,
    #[prost(message, repeated, tag = "3")]
    records: Vec<PackedRecord>,
}

/// `Record`: one user record, its keys as indexes into the tables.
#[derive(Clone, PartialEq, Message)]
struct PackedRecord {
    #[prost(uint64, required, tag = "1")]
    partition_key_index: u64,
    #[prost(uint64, optional, tag = "2")]
    explicit_hash_key_index: Option<u64>,
    #[prost(bytes = "vec", required, tag = "3")]
    data: Vec<u8>,
    /// Read and dropped: the KPL writes none, and neither the KCL nor we hand them out.
    #[prost(message, repeated, tag = "4")]
    tags: Vec<Tag>,
}

/// `Tag`: a key and an optional value.
#[derive(Clone, PartialEq, Message)]
struct Tag {
    #[prost(string, required, tag = "1")]
    key: String,
    #[prost(string, optional, tag = "2")]
    value: Option<String>,
}

/// One user record of an aggregate, in its order there (its sub-sequence number is its index).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct UserRecord {
    /// A part of one string that the aggregate's partition keys share: each key of the table
    /// once, however many user records name it.
    pub(crate) partition_key: SharedStr,
    pub(crate) explicit_hash_key: Option<String>,
    pub(crate) data: Vec<u8>,
}

/// The number a partition key hashes to, which picks its shard: the MD5 of the key as a
/// 128-bit big-endian number, as Kinesis maps keys to hash key ranges.
pub(crate) fn hash_of(partition_key: &str) -> u128 {
    u128::from_be_bytes(Md5::digest(partition_key.as_bytes()).into())
}

/// Whether `data` starts as a KPL aggregate does; one whose [`deaggregate`] answers `None`
/// is a broken aggregate (or a plain record that happens to start with the magic).
#[inline]
pub(crate) fn has_magic(data: &[u8]) -> bool {
    data.starts_with(&MAGIC)
}

/// The user records of `data`, in order, when it is an aggregate; `None` for a plain record
/// (no magic, or magic with a digest or a protobuf that does not check out).
pub(crate) fn deaggregate(data: &[u8]) -> Option<Vec<UserRecord>> {
    let body = data.strip_prefix(MAGIC.as_slice())?;
    let split = body.len().checked_sub(DIGEST_LEN)?;
    let (message, digest) = body.split_at(split);
    if Md5::digest(message).as_slice() != digest {
        return None;
    }
    let aggregated = AggregatedRecord::decode(message).ok()?;
    let at = |index: u64| usize::try_from(index).ok();
    let key = |table: &[String], index: u64| at(index).and_then(|index| table.get(index)).cloned();
    let mut gathered =
        Gathered::with_capacity(aggregated.partition_key_table.iter().map(String::len).sum());
    let spans: Vec<_> = aggregated
        .partition_key_table
        .iter()
        .map(|key| gathered.push(key))
        .collect();
    let keys = gathered.share();
    aggregated
        .records
        .into_iter()
        .map(|record| {
            let span = at(record.partition_key_index).and_then(|index| spans.get(index))?;
            Some(UserRecord {
                partition_key: keys.part(*span),
                explicit_hash_key: match record.explicit_hash_key_index {
                    Some(index) => Some(key(&aggregated.explicit_hash_key_table, index)?),
                    None => None,
                },
                data: record.data,
            })
        })
        .collect()
}

/// User records bound for one shard, packed into one aggregate (the publisher's
/// `aggregate(true)`).
///
/// Each partition key (and explicit hash key) is written once, in a table; [`Aggregate::len_with`]
/// is the exact length the encoded record would have with one more user record.
#[derive(Debug, Default)]
pub(crate) struct Aggregate {
    message: AggregatedRecord,
    /// Where each key is in its table.
    partition_keys: HashMap<String, u64>,
    explicit_hash_keys: HashMap<String, u64>,
    /// The encoded length of `message`, kept as records are pushed.
    encoded: usize,
}

impl Aggregate {
    /// An empty aggregate.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// How many user records it holds.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.message.records.len()
    }

    /// The length of the Kinesis record's data it encodes to now.
    pub(crate) fn encoded_len(&self) -> usize {
        FRAME_LEN + self.encoded
    }

    /// The length of the Kinesis record's data with one more user record.
    pub(crate) fn len_with(
        &self,
        partition_key: &str,
        explicit_hash_key: Option<&str>,
        data_len: usize,
    ) -> usize {
        FRAME_LEN + self.encoded + self.growth(partition_key, explicit_hash_key, data_len).0
    }

    /// Adds a user record at the end.
    pub(crate) fn push(
        &mut self,
        partition_key: &str,
        explicit_hash_key: Option<&str>,
        data: Vec<u8>,
    ) {
        let (growth, partition_key_index, explicit_hash_key_index) =
            self.growth(partition_key, explicit_hash_key, data.len());
        if partition_key_index == self.message.partition_key_table.len() as u64 {
            self.message
                .partition_key_table
                .push(partition_key.to_owned());
            self.partition_keys
                .insert(partition_key.to_owned(), partition_key_index);
        }
        if let (Some(index), Some(key)) = (explicit_hash_key_index, explicit_hash_key)
            && index == self.message.explicit_hash_key_table.len() as u64
        {
            self.message.explicit_hash_key_table.push(key.to_owned());
            self.explicit_hash_keys.insert(key.to_owned(), index);
        }
        self.message.records.push(PackedRecord {
            partition_key_index,
            explicit_hash_key_index,
            data,
            tags: Vec::new(),
        });
        self.encoded += growth;
    }

    /// The Kinesis record's data: magic, protobuf, digest.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.encoded_len());
        out.extend_from_slice(&MAGIC);
        self.message
            .encode(&mut out)
            .expect("a Vec grows to what the message needs");
        let digest = Md5::digest(&out[MAGIC.len()..]);
        out.extend_from_slice(&digest);
        out
    }

    /// What one more user record adds to the protobuf's length, and the indexes of its keys.
    fn growth(
        &self,
        partition_key: &str,
        explicit_hash_key: Option<&str>,
        data_len: usize,
    ) -> (usize, u64, Option<u64>) {
        // A new table entry is one length-delimited string (tag 1 or 2, one byte).
        let entry = |text: &str| 1 + encoded_len_varint(text.len() as u64) + text.len();
        let mut growth = 0;
        let partition_key_index = match self.partition_keys.get(partition_key) {
            Some(&index) => index,
            None => {
                growth += entry(partition_key);
                self.message.partition_key_table.len() as u64
            }
        };
        let explicit_hash_key_index =
            explicit_hash_key.map(|wanted| match self.explicit_hash_keys.get(wanted) {
                Some(&index) => index,
                None => {
                    growth += entry(wanted);
                    self.message.explicit_hash_key_table.len() as u64
                }
            });
        // The record: its fields (one tag byte each), inside one length-delimited entry (tag 3).
        let mut record = 1 + encoded_len_varint(partition_key_index);
        if let Some(index) = explicit_hash_key_index {
            record += 1 + encoded_len_varint(index);
        }
        record += 1 + encoded_len_varint(data_len as u64) + data_len;
        growth += 1 + encoded_len_varint(record as u64) + record;
        (growth, partition_key_index, explicit_hash_key_index)
    }
}

#[cfg(test)]
mod tests;

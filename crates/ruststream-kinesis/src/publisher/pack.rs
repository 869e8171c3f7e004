//! Publishing aggregated (`KinesisPublish::aggregate(true)`): the records of one write are packed
//! into KPL aggregates, one destination shard each, as the KPL does. A record's shard is the one
//! whose hash key range holds the MD5 of its partition key; an aggregate goes there by its
//! explicit hash key (the shard's lowest), whatever its own partition key. Each aggregate is as
//! large as the stream's record limit allows. The records of a key keep their order: they all
//! go to one shard, in publish order, and `write_stream` sends one aggregate of a shard per call.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;

use super::Pending;
use crate::clock::Instant;
use crate::kinesis::api::{HashRange, OutRecord};
use crate::kinesis::kpl::{self, Aggregate};

/// How long a stream's shard map is used before it is listed again: after a split, records
/// packed by the old map still arrive (each aggregate is stored whole in one shard, and read
/// there), but keys of the sibling shard may then be read out of order across the two shards.
const SHARD_MAP_AGE: std::time::Duration = std::time::Duration::from_secs(30);

/// The open shards of each stream a writer aggregates for, as last listed (`None`: the listing
/// failed, and the stream's records go out plain until it is tried again).
#[derive(Debug, Default)]
pub(super) struct ShardMaps {
    maps: HashMap<String, (Instant, Option<Vec<HashRange>>)>,
}

impl ShardMaps {
    /// The shard map of `stream`, listed again when older than [`SHARD_MAP_AGE`]; `None` when it
    /// cannot be listed (the records then go out plain).
    pub(super) async fn of(
        &mut self,
        client: &aws_sdk_kinesis::Client,
        stream: &str,
    ) -> Option<&[HashRange]> {
        let fresh = self
            .maps
            .get(stream)
            .is_some_and(|(listed, _)| listed.elapsed() < SHARD_MAP_AGE);
        if !fresh {
            let ranges = match crate::kinesis::api::open_hash_ranges(client, stream).await {
                Ok(ranges) if !ranges.is_empty() => Some(ranges),
                Ok(_) => None,
                Err(err) => {
                    tracing::debug!(stream, error = %err, "the stream's shards could not be listed; its records go out without aggregation for a while");
                    None
                }
            };
            self.maps
                .insert(stream.to_owned(), (Instant::now(), ranges));
        }
        self.maps
            .get(stream)
            .and_then(|(_, ranges)| ranges.as_deref())
    }

    /// Lists `stream`'s shards again before its next write: a record landed elsewhere.
    pub(super) fn forget(&mut self, stream: &str) {
        self.maps.remove(stream);
    }
}

/// Which of `ranges` takes `partition_key`.
fn shard_of(ranges: &[HashRange], partition_key: &str) -> usize {
    let hash = kpl::hash_of(partition_key);
    ranges
        .iter()
        .position(|range| range.start <= hash && hash <= range.end)
        .unwrap_or(0)
}

/// One aggregate being filled, and the publishes it answers.
struct Filling {
    aggregate: Aggregate,
    partition_key: String,
    done: Vec<super::Done>,
}

/// Packs `pending` (plain records of one stream, in publish order) into aggregates of at most
/// `limit` bytes (the data and the partition key, as Kinesis counts a record), one destination
/// shard of `ranges` each; a record too large for an aggregate of its own goes out plain. The
/// answer keeps publish order per shard: a shard's aggregates come in the order they filled.
pub(super) fn pack(pending: Vec<Pending>, ranges: &[HashRange], limit: usize) -> Vec<Pending> {
    let Some(stream) = pending.first().map(|p| p.stream.clone()) else {
        return pending;
    };
    let mut filling: HashMap<usize, Filling> = HashMap::new();
    let mut out = Vec::new();
    let close = |shard: usize, full: Filling, out: &mut Vec<Pending>| {
        out.push(Pending {
            stream: stream.clone(),
            record: OutRecord {
                data: Bytes::from(full.aggregate.encode()),
                partition_key: full.partition_key,
                explicit_hash_key: Some(ranges[shard].start.to_string()),
            },
            done: full.done,
            shard: Some(Arc::clone(&ranges[shard].shard)),
        });
    };
    for record in pending {
        let shard = shard_of(ranges, &record.record.partition_key);
        let key = &record.record.partition_key;
        let data_len = record.record.data.len();
        let fits = |aggregate: &Aggregate, outer_key: &str| {
            aggregate.len_with(key, None, data_len) + outer_key.len() <= limit
        };
        let alone = fits(&Aggregate::new(), key);
        if filling
            .get(&shard)
            .is_some_and(|current| !alone || !fits(&current.aggregate, &current.partition_key))
            && let Some(full) = filling.remove(&shard)
        {
            // Full, or the record must go out on its own: what filled goes first, in order.
            close(shard, full, &mut out);
        }
        if !alone {
            // Too large to aggregate even alone: as it was published, but routed as its shard's
            // aggregates are, so no call carries it beside one of them (and its key's order
            // holds, whichever lands first).
            let mut record = record;
            record.record.explicit_hash_key = Some(ranges[shard].start.to_string());
            record.shard = Some(Arc::clone(&ranges[shard].shard));
            out.push(record);
            continue;
        }
        let current = filling.entry(shard).or_insert_with(|| Filling {
            aggregate: Aggregate::new(),
            partition_key: key.clone(),
            done: Vec::new(),
        });
        current
            .aggregate
            .push(key, None, record.record.data.to_vec());
        current.done.extend(record.done);
    }
    let mut rest: Vec<(usize, Filling)> = filling.into_iter().collect();
    rest.sort_by_key(|(shard, _)| *shard);
    for (shard, full) in rest {
        close(shard, full, &mut out);
    }
    out
}

/// `record` as an aggregate of one user record, under its own partition key (the in-process
/// publisher, which writes each publish at once); as it is when it would not fit.
#[cfg(feature = "testing")]
pub(super) fn alone(record: OutRecord) -> OutRecord {
    let mut aggregate = Aggregate::new();
    aggregate.push(&record.partition_key, None, record.data.to_vec());
    if aggregate.encoded_len() + record.partition_key.len()
        > crate::settings::validate::MAX_RECORD_BYTES
    {
        return record;
    }
    OutRecord {
        data: Bytes::from(aggregate.encode()),
        ..record
    }
}

#[cfg(test)]
mod tests;

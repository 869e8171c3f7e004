//! Packing a write into aggregates: one destination shard each, within the record limit, in
//! publish order per shard, and every publish answered by its aggregate.

use std::sync::Arc;

use tokio::sync::oneshot;

use super::*;
use crate::KinesisError;

/// Two shards, split in the middle of the hash key space.
fn two_shards() -> Vec<HashRange> {
    vec![
        HashRange {
            shard: Arc::from("shardId-000000000000"),
            start: 0,
            end: u128::MAX / 2,
        },
        HashRange {
            shard: Arc::from("shardId-000000000001"),
            start: u128::MAX / 2 + 1,
            end: u128::MAX,
        },
    ]
}

type Answer = oneshot::Receiver<Result<(), KinesisError>>;

fn pending(records: &[(&str, Vec<u8>)]) -> (Vec<Pending>, Vec<Answer>) {
    records
        .iter()
        .map(|(key, data)| {
            let (done, answer) = oneshot::channel();
            let pending = Pending {
                stream: "orders".to_owned(),
                record: OutRecord {
                    data: Bytes::from(data.clone()),
                    partition_key: (*key).to_owned(),
                    explicit_hash_key: None,
                },
                done: vec![done],
                shard: None,
            };
            (pending, answer)
        })
        .unzip()
}

/// Keys that hash into each of the two shards.
fn keys_of(shard: usize, count: usize) -> Vec<String> {
    let ranges = two_shards();
    (0..)
        .map(|n| format!("key-{n}"))
        .filter(|key| shard_of(&ranges, key) == shard)
        .take(count)
        .collect()
}

#[test]
fn each_aggregate_holds_one_shards_records_in_publish_order_and_goes_there() {
    let ranges = two_shards();
    let (low, high) = (keys_of(0, 3), keys_of(1, 3));
    let order = [
        &low[0], &high[0], &low[1], &high[1], &low[2], &high[2], &low[0],
    ];
    let records: Vec<(&str, Vec<u8>)> = order
        .iter()
        .enumerate()
        .map(|(n, key)| (key.as_str(), format!("record-{n}").into_bytes()))
        .collect();
    let (pending, _answers) = pending(&records);
    let packed = pack(pending, &ranges, 1 << 20);
    assert_eq!(packed.len(), 2, "one aggregate per shard");
    for (shard, aggregate) in packed.iter().enumerate() {
        assert_eq!(
            aggregate.record.explicit_hash_key.as_deref(),
            Some(ranges[shard].start.to_string().as_str()),
            "routed to its shard by its lowest hash key"
        );
        let users = kpl::deaggregate(&aggregate.record.data).expect("an aggregate");
        let want: Vec<(String, Vec<u8>)> = records
            .iter()
            .filter(|(key, _)| shard_of(&ranges, key) == shard)
            .map(|(key, data)| ((*key).to_owned(), data.clone()))
            .collect();
        let got: Vec<(String, Vec<u8>)> = users
            .into_iter()
            .map(|user| (user.partition_key.to_string(), user.data))
            .collect();
        assert_eq!(got, want, "shard {shard}: its records, in publish order");
        assert_eq!(aggregate.done.len(), want.len(), "it answers each of them");
        assert_eq!(aggregate.record.partition_key, want[0].0);
        assert_eq!(aggregate.shard.as_deref(), Some(&*ranges[shard].shard));
    }
}

#[test]
fn an_aggregate_stays_within_the_record_limit_and_a_full_one_is_followed_by_the_next() {
    let ranges = two_shards();
    let key = &keys_of(0, 1)[0];
    let records: Vec<(&str, Vec<u8>)> = (0..50).map(|n| (key.as_str(), vec![n; 1_000])).collect();
    let (pending, _answers) = pending(&records);
    let limit = 10_000;
    let packed = pack(pending, &ranges, limit);
    assert!(
        packed.len() >= 5,
        "50 KB in aggregates of 10 KB: {}",
        packed.len()
    );
    let mut read = Vec::new();
    for aggregate in &packed {
        let size = aggregate.record.data.len() + aggregate.record.partition_key.len();
        assert!(size <= limit, "{size} bytes");
        read.extend(kpl::deaggregate(&aggregate.record.data).expect("an aggregate"));
    }
    let data: Vec<Vec<u8>> = read.into_iter().map(|user| user.data).collect();
    let want: Vec<Vec<u8>> = records.into_iter().map(|(_, data)| data).collect();
    assert_eq!(data, want, "in publish order across the aggregates");
}

#[test]
fn a_record_too_large_to_aggregate_goes_plain_after_what_filled_before_it() {
    let ranges = two_shards();
    let key = &keys_of(0, 1)[0];
    let limit = 1_000;
    let records = vec![
        (key.as_str(), b"small".to_vec()),
        (key.as_str(), vec![7; limit - key.len()]),
        (key.as_str(), b"after".to_vec()),
    ];
    let (pending, _answers) = pending(&records);
    let packed = pack(pending, &ranges, limit);
    assert_eq!(packed.len(), 3);
    assert_eq!(
        kpl::deaggregate(&packed[0].record.data).map(|users| users.len()),
        Some(1)
    );
    assert_eq!(
        packed[1].record.data.len(),
        limit - key.len(),
        "as published"
    );
    assert_eq!(
        packed[1].record.explicit_hash_key, packed[0].record.explicit_hash_key,
        "routed as its shard's aggregates, so never in one call beside them"
    );
    let after = kpl::deaggregate(&packed[2].record.data).expect("an aggregate");
    assert_eq!(after[0].data, b"after");
}

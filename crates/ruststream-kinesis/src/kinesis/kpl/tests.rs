//! The KPL format: what counts as an aggregate, exact sizes, and interoperation with AWS's own
//! aggregation library (`scripts/kpl-agg.py`, on `aws-kinesis-agg` from PyPI).

use super::*;

fn user(partition_key: &str, explicit_hash_key: Option<&str>, data: &[u8]) -> UserRecord {
    UserRecord {
        partition_key: SharedStr::from(partition_key),
        explicit_hash_key: explicit_hash_key.map(str::to_owned),
        data: data.to_vec(),
    }
}

fn packed(records: &[UserRecord]) -> Vec<u8> {
    let mut aggregate = Aggregate::new();
    for record in records {
        aggregate.push(
            &record.partition_key,
            record.explicit_hash_key.as_deref(),
            record.data.clone(),
        );
    }
    aggregate.encode()
}

/// Magic, then `message` as it is, then its digest: an aggregate whatever `message` holds.
fn framed(message: &[u8]) -> Vec<u8> {
    let mut out = MAGIC.to_vec();
    out.extend_from_slice(message);
    out.extend_from_slice(&Md5::digest(message));
    out
}

#[test]
fn an_aggregate_reads_back_as_its_user_records_in_order() {
    let records = vec![
        user("order-1", None, b"first"),
        user(
            "order-2",
            Some("170141183460469231731687303715884105728"),
            b"second",
        ),
        user("order-1", None, b""),
        user(
            "order-3",
            Some("170141183460469231731687303715884105728"),
            &[0xF3; 300],
        ),
    ];
    let data = packed(&records);
    assert_eq!(deaggregate(&data), Some(records));
    // Each key is written once: two partition keys repeat, one explicit hash key repeats.
    let message = AggregatedRecord::decode(&data[MAGIC.len()..data.len() - 16]).expect("decodes");
    assert_eq!(
        message.partition_key_table,
        ["order-1", "order-2", "order-3"]
    );
    assert_eq!(message.explicit_hash_key_table.len(), 1);
}

#[test]
fn the_length_it_predicts_is_the_length_it_writes() {
    let mut aggregate = Aggregate::new();
    assert_eq!(aggregate.encode().len(), aggregate.encoded_len());
    // Lengths across the varint boundaries (127/128, 16383/16384), keys new and repeated.
    let sizes = [0, 1, 126, 127, 128, 129, 16_383, 16_384, 16_385, 70_000, 5];
    for (n, size) in sizes.into_iter().enumerate() {
        let key = format!("key-{}", n % 4);
        let hash = (n % 3 == 0).then(|| format!("{}", n * 1_000_003));
        let predicted = aggregate.len_with(&key, hash.as_deref(), size);
        aggregate.push(&key, hash.as_deref(), vec![7; size]);
        assert_eq!(
            aggregate.encoded_len(),
            predicted,
            "record {n} of {size} bytes"
        );
        assert_eq!(
            aggregate.encode().len(),
            predicted,
            "record {n} of {size} bytes"
        );
    }
    assert_eq!(aggregate.len(), sizes.len());
    // Many keys: indexes past one varint byte.
    for n in 0..300 {
        let key = format!("many-{n}");
        let predicted = aggregate.len_with(&key, None, 10);
        aggregate.push(&key, None, vec![1; 10]);
        assert_eq!(aggregate.encode().len(), predicted);
    }
}

#[test]
fn data_that_only_looks_aggregated_is_a_plain_record() {
    let good = packed(&[user("k", None, b"payload")]);
    assert!(deaggregate(&good).is_some());
    assert_eq!(deaggregate(b"plain JSON {}"), None, "no magic");
    assert_eq!(deaggregate(&MAGIC), None, "magic and nothing else");
    assert_eq!(
        deaggregate(&good[..good.len() - 1]),
        None,
        "digest cut short"
    );
    let mut bad_digest = good.clone();
    *bad_digest.last_mut().expect("bytes") ^= 1;
    assert_eq!(deaggregate(&bad_digest), None, "digest does not match");
    let mut bad_body = good.clone();
    bad_body[6] ^= 0x40;
    assert_eq!(deaggregate(&bad_body), None, "body changed, digest kept");
    assert_eq!(
        deaggregate(&framed(&[0xFF, 0xFF, 0xFF])),
        None,
        "digest matches, protobuf does not decode"
    );
    // A record whose key index points past the table: not an aggregate either.
    let broken = AggregatedRecord {
        partition_key_table: vec!["k".to_owned()],
        explicit_hash_key_table: Vec::new(),
        records: vec![PackedRecord {
            partition_key_index: 1,
            explicit_hash_key_index: None,
            data: b"x".to_vec(),
            tags: Vec::new(),
        }],
    };
    assert_eq!(deaggregate(&framed(&broken.encode_to_vec())), None);
    let broken_hash = AggregatedRecord {
        records: vec![PackedRecord {
            partition_key_index: 0,
            explicit_hash_key_index: Some(0),
            ..broken.records[0].clone()
        }],
        ..broken
    };
    assert_eq!(deaggregate(&framed(&broken_hash.encode_to_vec())), None);
}

#[test]
fn our_header_envelope_is_never_taken_for_an_aggregate() {
    let mut headers = ruststream::HeaderMap::new();
    headers.insert("trace", "abc");
    let enveloped = super::super::envelope::encode(b"payload", &headers);
    assert_eq!(deaggregate(&enveloped), None);
    // Inside a user record, the envelope comes back whole.
    let data = packed(&[user("k", None, &enveloped)]);
    let records = deaggregate(&data).expect("an aggregate");
    let (payload, read) = super::super::envelope::decode(records[0].data.clone().into());
    assert_eq!(&payload[..], b"payload");
    assert_eq!(read, headers);
}

#[test]
fn tags_are_read_and_dropped() {
    let tagged = AggregatedRecord {
        partition_key_table: vec!["k".to_owned()],
        explicit_hash_key_table: Vec::new(),
        records: vec![PackedRecord {
            partition_key_index: 0,
            explicit_hash_key_index: None,
            data: b"x".to_vec(),
            tags: vec![Tag {
                key: "t".to_owned(),
                value: Some("v".to_owned()),
            }],
        }],
    };
    assert_eq!(
        deaggregate(&framed(&tagged.encode_to_vec())),
        Some(vec![user("k", None, b"x")])
    );
}

// ----- interoperation with aws-kinesis-agg -------------------------------------------------

/// The live tests' driver of `scripts/kpl-agg.py` (they read the fields these tests do not).
#[allow(dead_code)]
#[path = "../../../tests/common/kpl.rs"]
mod agg_lib;

fn user_records(count: usize, with_hash_keys: bool) -> Vec<UserRecord> {
    (0..count)
        .map(|n| {
            let hash = with_hash_keys.then(|| format!("{}", 1_000_000_007u64 * (n as u64 % 5)));
            let data: Vec<u8> = (0..(n * 37) % 500).map(|b| (b * 31 + n) as u8).collect();
            user(&format!("key-{}", n % 7), hash.as_deref(), &data)
        })
        .collect()
}

#[test]
fn records_aws_aggregates_read_back_as_their_user_records() {
    let Some(python) = agg_lib::python() else {
        return;
    };
    for with_hash_keys in [false, true] {
        let records = user_records(120, with_hash_keys);
        let items: Vec<_> = records
            .iter()
            .map(|r| {
                let hash = r.explicit_hash_key.clone();
                (r.partition_key.to_string(), hash, r.data.clone())
            })
            .collect();
        let mut read = Vec::new();
        for record in agg_lib::aggregate(&python, &items) {
            read.extend(deaggregate(&record.data).expect("aws-kinesis-agg writes aggregates"));
        }
        assert_eq!(read, records, "explicit hash keys: {with_hash_keys}");
    }
}

#[test]
fn records_we_aggregate_are_read_back_by_aws_kinesis_agg() {
    let Some(python) = agg_lib::python() else {
        return;
    };
    // aws-kinesis-agg 1.2.3 reads an aggregate whose hash-key table is not empty as if every
    // user record had a hash key (it does not look at the index's presence), so each aggregate
    // here is all with or all without.
    for with_hash_keys in [false, true] {
        let records = user_records(120, with_hash_keys);
        let read = agg_lib::deaggregate(&python, "key-0", &packed(&records));
        assert_eq!(read.len(), records.len());
        for (n, (got, want)) in read.iter().zip(&records).enumerate() {
            assert_eq!(got.partition_key, *want.partition_key, "user record {n}");
            assert_eq!(
                got.explicit_hash_key, want.explicit_hash_key,
                "user record {n}"
            );
            assert_eq!(got.data, want.data, "user record {n}");
            assert_eq!(
                got.sub_sequence, n as u64,
                "its sub-sequence number is its index"
            );
        }
    }
}

/// The partition keys of an aggregate's user records are read from its table once: each user
/// record's key is a part of one string, a key named by several user records there once.
#[test]
fn the_user_records_keys_are_parts_of_one_string_read_from_the_table() {
    let users = deaggregate(&packed(&[
        user("order-1", None, b"one"),
        user("order-ü", None, b"two"),
        user("order-1", None, b"three"),
    ]))
    .expect("an aggregate");
    let keys: Vec<&str> = users.iter().map(|u| u.partition_key.as_str()).collect();
    assert_eq!(keys, ["order-1", "order-ü", "order-1"]);
    assert!(users[0].partition_key.shares_with(&users[1].partition_key));
    assert!(users[0].partition_key.shares_with(&users[2].partition_key));
}

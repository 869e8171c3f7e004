//! The in-process Kinesis's calls: streams refused or created, iterators at every kind of
//! start, reads in pages, and what was published read back in write order.

mod test_app;

use std::time::{Duration, SystemTime};

use super::*;
use crate::kinesis::in_process::tap::Delivering;

fn record(key: &str, data: &'static [u8]) -> OutRecord {
    OutRecord {
        data: Bytes::from_static(data),
        partition_key: key.to_owned(),
        explicit_hash_key: None,
    }
}

/// Reads `shard` of `stream` from `start` to its tip, a page of `limit` at a time: the data of
/// each record, and the `MillisBehindLatest` of each page.
fn read_all(
    kinesis: &InProcessKinesis,
    stream: &str,
    start: &ShardStart,
    limit: u32,
) -> (Vec<Bytes>, Vec<i64>) {
    let (read, behind) = read_records(kinesis, stream, start, limit);
    (read.into_iter().map(|r| r.data).collect(), behind)
}

/// Every record of shard 0 of `stream` from `start`, `limit` a call, and how far behind the tip
/// each call answered it was.
fn read_records(
    kinesis: &InProcessKinesis,
    stream: &str,
    start: &ShardStart,
    limit: u32,
) -> (Vec<FetchedRecord>, Vec<i64>) {
    let mut iterator = kinesis
        .shard_iterator(stream, &shard_id(0), start)
        .expect("an iterator");
    let (mut read, mut behind) = (Vec::new(), Vec::new());
    loop {
        let Fetched::Records {
            records,
            next,
            millis_behind,
        } = kinesis.get_records(&iterator, limit).expect("a read")
        else {
            panic!("records");
        };
        behind.push(millis_behind.expect("told"));
        let empty = records.is_empty();
        read.extend(records.into_vec());
        iterator = next.expect("an open shard");
        if empty {
            return (read, behind);
        }
    }
}

#[test]
fn a_missing_stream_is_refused_unless_it_is_to_be_created() {
    let kinesis = InProcessKinesis::default();
    assert!(matches!(
        kinesis.ensure_stream("orders", None),
        Err(KinesisError::StreamNotFound { stream }) if stream == "orders"
    ));
    assert!(matches!(
        kinesis.put("orders", record("k", b"x")),
        Err(KinesisError::StreamNotFound { .. })
    ));
    let arn = kinesis.ensure_stream("orders", Some(3)).expect("created");
    assert!(arn.ends_with(":stream/orders"), "{arn}");
    // Created once: a second ask with another count changes nothing.
    kinesis.ensure_stream("orders", Some(5)).expect("exists");
    let shards = kinesis.list_shards("orders").expect("listed");
    let ids: Vec<&str> = shards.iter().map(|s| &*s.id).collect();
    assert_eq!(
        ids,
        [
            "shardId-000000000000",
            "shardId-000000000001",
            "shardId-000000000002"
        ]
    );
    assert!(shards.iter().all(|s| !s.closed && s.parents.is_empty()));
    assert!(matches!(
        kinesis.shard_iterator(
            "orders",
            "shardId-000000000009",
            &ShardStart::At(KinesisPosition::TrimHorizon)
        ),
        Err(KinesisError::ShardNotFound { shard, .. }) if shard == "shardId-000000000009"
    ));
}

#[test]
fn iterators_start_where_the_service_would_start_them() {
    let kinesis = InProcessKinesis::default();
    kinesis.ensure_stream("orders", Some(1)).expect("created");
    let latest = kinesis
        .shard_iterator(
            "orders",
            &shard_id(0),
            &ShardStart::At(KinesisPosition::Latest),
        )
        .expect("the tip");
    for data in [b"a", b"b", b"c"] {
        kinesis.put("orders", record("k", data)).expect("written");
    }
    let (written, _) = read_records(
        &kinesis,
        "orders",
        &ShardStart::At(KinesisPosition::TrimHorizon),
        10,
    );
    let sequences: Vec<crate::SharedStr> = written.into_iter().map(|r| r.sequence).collect();
    let (all, _) = read_all(
        &kinesis,
        "orders",
        &ShardStart::At(KinesisPosition::TrimHorizon),
        10,
    );
    assert_eq!(all, ["a", "b", "c"].map(|d| Bytes::from(d.as_bytes())));
    // The tip taken before the writes reads them all.
    let Fetched::Records { records, .. } = kinesis.get_records(&latest, 10).expect("a read") else {
        panic!("records");
    };
    assert_eq!(records.len(), 3);
    let after = read_all(
        &kinesis,
        "orders",
        &ShardStart::After(sequences[0].clone()),
        10,
    );
    assert_eq!(after.0.len(), 2, "after the first");
    let at = ShardStart::At(KinesisPosition::at_sequence(
        shard_id(0),
        sequences[1].clone(),
    ));
    assert_eq!(
        read_all(&kinesis, "orders", &at, 10).0.len(),
        2,
        "at the second"
    );
    let future = SystemTime::now() + Duration::from_secs(3600);
    let later = ShardStart::At(KinesisPosition::AtTimestamp(future));
    assert!(read_all(&kinesis, "orders", &later, 10).0.is_empty());
    // A sequence number the shard does not hold is refused at, as the service refuses it.
    let unheld = ShardStart::At(KinesisPosition::at_sequence(shard_id(0), Arc::from("7")));
    assert!(matches!(
        kinesis.shard_iterator("orders", &shard_id(0), &unheld),
        Err(KinesisError::Api { operation: "GetShardIterator", message, .. })
            if message.contains("InvalidArgumentException")
    ));
}

#[test]
fn a_read_answers_a_page_and_says_how_far_behind_the_tip_it_is() {
    let kinesis = InProcessKinesis::default();
    kinesis.ensure_stream("orders", Some(1)).expect("created");
    for _ in 0..5 {
        kinesis.put("orders", record("k", b"x")).expect("written");
    }
    let (data, behind) = read_all(
        &kinesis,
        "orders",
        &ShardStart::At(KinesisPosition::TrimHorizon),
        2,
    );
    assert_eq!(data.len(), 5);
    // Pages of 2, 2 and 1 (that last one reaches the tip), then an empty one at the tip.
    assert_eq!(behind.len(), 4, "{behind:?}");
    assert!(behind[..2].iter().all(|ms| *ms >= 1), "{behind:?}");
    assert_eq!(&behind[2..], [0, 0]);
}

#[test]
fn what_was_published_reads_back_in_write_order_over_every_shard() {
    let kinesis = InProcessKinesis::default();
    kinesis.ensure_stream("orders", Some(4)).expect("created");
    let mut shards = std::collections::HashSet::new();
    for n in 0..40u8 {
        let partition_key = format!("key-{n}");
        shards.insert(shard_of(&partition_key, 4));
        kinesis
            .put(
                "orders",
                OutRecord {
                    data: Bytes::from(vec![n]),
                    partition_key,
                    explicit_hash_key: None,
                },
            )
            .expect("written");
    }
    assert!(shards.len() > 1, "the keys spread");
    let published: Vec<u8> = kinesis
        .published("orders")
        .iter()
        .map(|message| message.payload()[0])
        .collect();
    assert_eq!(published, (0..40).collect::<Vec<u8>>());
    assert!(kinesis.published("missing").is_empty());
}

#[tokio::test]
async fn a_subscription_brings_what_was_written_past_its_start_and_waits_for_more() {
    let kinesis = Arc::new(InProcessKinesis::default());
    kinesis.ensure_stream("orders", Some(1)).expect("created");
    assert!(matches!(
        kinesis.ensure_consumer("orders", "warehouse", false),
        Err(KinesisError::ConsumerNotFound { consumer, .. }) if consumer == "warehouse"
    ));
    let consumer = kinesis
        .ensure_consumer("orders", "warehouse", true)
        .expect("registered");
    assert!(
        consumer.arn.ends_with("/consumer/warehouse"),
        "{}",
        consumer.arn
    );
    kinesis
        .ensure_consumer("orders", "warehouse", false)
        .expect("it exists now");
    kinesis.put("orders", record("k", b"a")).expect("written");
    let mut events = kinesis
        .subscribe(
            "orders",
            &shard_id(0),
            &ShardStart::At(KinesisPosition::TrimHorizon),
        )
        .expect("subscribed");
    let crate::kinesis::fan_out::Event::Records {
        records,
        continuation,
        ..
    } = events.next().await
    else {
        panic!("records");
    };
    let records = records.into_vec();
    assert_eq!(records.len(), 1);
    assert_eq!(continuation.as_deref(), Some(&*records[0].sequence));
    // Nothing more yet: the next event waits for a write.
    let mut next = Box::pin(events.next());
    assert!(futures::poll!(next.as_mut()).is_pending());
    kinesis.put("orders", record("k", b"b")).expect("written");
    let crate::kinesis::fan_out::Event::Records { records, .. } = next.await else {
        panic!("records");
    };
    assert_eq!(
        records.taken_apart().map(|r| r.data).collect::<Vec<_>>(),
        [Bytes::from_static(b"b")]
    );
}

/// A tap on the one shard of a new stream `orders`, counting for a harness of its own.
fn tapped() -> (Arc<InProcessKinesis>, Arc<Tap>, Coordinator) {
    let kinesis = Arc::new(InProcessKinesis::default());
    kinesis.ensure_stream("orders", Some(1)).expect("created");
    let harness = OnceLock::new();
    let coordinator = Coordinator::new(usize::MAX);
    harness.set(coordinator.clone()).expect("unset");
    let start = ShardStart::At(KinesisPosition::TrimHorizon);
    let iterator = kinesis
        .shard_iterator("orders", &shard_id(0), &start)
        .expect("an iterator");
    let tap = kinesis.tap(&iterator, &harness).expect("in process");
    (kinesis, tap, coordinator)
}

/// Whether the harness counts nothing in flight now.
fn quiet(coordinator: &Coordinator) -> bool {
    futures::FutureExt::now_or_never(coordinator.drive()).is_some()
}

#[test]
fn a_written_records_unit_is_taken_by_its_first_user_record_alone() {
    let (kinesis, tap, coordinator) = tapped();
    let mut aggregate = crate::kinesis::kpl::Aggregate::new();
    for n in 0..3 {
        aggregate.push(&format!("key-{n}"), None, vec![n]);
    }
    let aggregate = OutRecord {
        data: Bytes::from(aggregate.encode()),
        partition_key: "outer".to_owned(),
        explicit_hash_key: None,
    };
    kinesis.put("orders", aggregate).expect("written");
    kinesis.put("orders", record("k", b"b")).expect("written");
    assert!(!quiet(&coordinator), "counted when written");
    // The aggregate's first two user records are handled and settled; its third and the plain
    // record after it are read and not handed out yet.
    tap.delivering(Delivering::FirstOfRecord);
    tap.delivering(Delivering::RestOfRecord);
    tap.settled();
    tap.settled();
    assert!(!quiet(&coordinator), "two deliveries are still to come");
    tap.delivering(Delivering::RestOfRecord);
    tap.delivering(Delivering::FirstOfRecord);
    tap.settled();
    tap.settled();
    assert!(quiet(&coordinator));
}

#[test]
fn a_redelivery_never_takes_a_written_records_unit() {
    let (kinesis, tap, coordinator) = tapped();
    // A record handed back is delivered again by its own timer before the harness's timer
    // counted it, while a record just written waits to be read.
    kinesis.put("orders", record("k", b"y")).expect("written");
    tap.delivering(Delivering::Again);
    tap.settled();
    assert!(!quiet(&coordinator), "the written record is still to come");
    tap.delivering(Delivering::FirstOfRecord);
    tap.settled();
    assert!(quiet(&coordinator));
}

#[test]
fn a_closed_or_dropped_tap_owes_nothing_and_counts_nothing_more() {
    let (kinesis, tap, coordinator) = tapped();
    kinesis.put("orders", record("k", b"a")).expect("written");
    tap.coming_back();
    assert!(!quiet(&coordinator));
    tap.close();
    assert!(quiet(&coordinator), "released when its reader ended");
    tap.coming_back();
    kinesis.put("orders", record("k", b"b")).expect("written");
    assert!(quiet(&coordinator), "a closed tap counts nothing");

    let (kinesis, tap, coordinator) = tapped();
    kinesis.put("orders", record("k", b"a")).expect("written");
    assert!(!quiet(&coordinator));
    drop(tap);
    assert!(quiet(&coordinator), "released when dropped unclosed");
}

#[test]
fn a_reader_quiet_at_its_shards_end_lets_go_of_what_no_delivery_took() {
    let (kinesis, tap, coordinator) = tapped();
    kinesis.put("orders", record("k", b"a")).expect("written");
    kinesis.put("orders", record("k", b"b")).expect("written");
    tap.release_if_read_to(1);
    assert!(!quiet(&coordinator), "a record lies past the position");
    tap.release_if_read_to(2);
    assert!(quiet(&coordinator), "the records a seek skipped are let go");
    // A seek back owes the records from its position on again.
    tap.moved_to(0);
    assert!(!quiet(&coordinator));
    tap.moved_to(2);
    assert!(quiet(&coordinator));
}

//! The framework's conformance suites against the in-process transport: the shard reader over
//! the in-process Kinesis, as `TestApp` runs it. The reader orders deliveries per shard only, as
//! it does live, so the suites that check publish order over every message run on one shard.
#![cfg(feature = "conformance")]

use ruststream::conformance::harness::{self, InProcessBroker};
use ruststream::conformance::helpers::unique_subject;
use ruststream::conformance::message_shape::OptionCases;
use ruststream::conformance::{capabilities, lifecycle, message_shape, retry};
use ruststream::testing::Backlog;
use ruststream::{IncomingMessage, Name};
use ruststream_kinesis::{KinesisBroker, KinesisOptions, KinesisPublish, KinesisStream};

fn broker() -> KinesisBroker {
    KinesisBroker::new().create_streams_if_missing(1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routing_suite() {
    harness::run_suite(broker).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lifecycle_ladder() {
    harness::lifecycle(
        || InProcessBroker::new(broker()),
        |name| KinesisStream::new(name.to_owned()).create_if_missing(1),
        |connected| futures::executor::block_on(connected.publisher()).unwrap(),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_flushes() {
    let shared = broker();
    lifecycle::shutdown_flushes(
        move || InProcessBroker::new(shared.clone()),
        |name| KinesisStream::new(name.to_owned()).create_if_missing(1),
        |connected| futures::executor::block_on(connected.publisher()).unwrap(),
        Backlog::Missed,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_copies_reach_the_stream() {
    retry::redelivery_address(
        || InProcessBroker::new(broker()),
        |name| KinesisStream::new(name.to_owned()).create_if_missing(1),
        |connected| futures::executor::block_on(connected.publisher()).unwrap(),
    )
    .await;
    retry::redelivery_address(
        || InProcessBroker::new(broker()),
        |name| Name::new(name.to_owned()),
        |connected| futures::executor::block_on(connected.publisher()).unwrap(),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyed_order() {
    message_shape::keyed_order(
        || InProcessBroker::new(broker()),
        &unique_subject("conformance.keyed"),
        |name| KinesisStream::new(name.to_owned()).create_if_missing(4),
        |connected| futures::executor::block_on(connected.publisher()).unwrap(),
        |key, _headers| {
            Some(KinesisOptions::default().with_partition_key(String::from_utf8_lossy(key)))
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publish_options() {
    let too_long = "k".repeat(257);
    message_shape::publish_options(
        || InProcessBroker::new(broker()),
        &unique_subject("conformance.options"),
        |name| KinesisStream::new(name.to_owned()).create_if_missing(2),
        KinesisPublish::default().partition_key("policy-key"),
        OptionCases::new(Some(b"policy-key".to_vec()))
            .overrides(
                KinesisOptions::default().with_partition_key("call-key"),
                Some(b"call-key".to_vec()),
            )
            .refuses(KinesisOptions::default().with_partition_key(too_long))
            .refuses(KinesisOptions::default().with_partition_key("")),
        |delivery| delivery.partition_key().map(<[u8]>::to_vec),
    )
    .await;
}

/// One shard, so publish order is delivery order across every message of the check.
fn one_shard(name: &str) -> KinesisStream {
    KinesisStream::new(name.to_owned()).create_if_missing(1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches() {
    capabilities::batches(
        || InProcessBroker::new(broker()),
        one_shard,
        |connected| futures::executor::block_on(connected.publisher()).unwrap(),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seeking() {
    let shared = broker();
    capabilities::seeking(
        move || InProcessBroker::new(shared.clone()),
        one_shard,
        |connected| futures::executor::block_on(connected.publisher()).unwrap(),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_seeking() {
    let shared = broker();
    capabilities::batch_seeking(
        move || InProcessBroker::new(shared.clone()),
        one_shard,
        |connected| futures::executor::block_on(connected.publisher()).unwrap(),
    )
    .await;
}

//! The framework's conformance suites against the local stack (`KINESIS_TEST_ENDPOINT`).
#![cfg(feature = "conformance")]

mod common;

use std::sync::Arc;
use std::time::Duration;

use ruststream::conformance::in_process::{self, Refusal};
use ruststream::conformance::{capabilities, harness, lifecycle, settlement};
use ruststream::testing::Backlog;
use ruststream_kinesis::{KinesisStream, LeaseStore, MAX_RECORD_BYTES, MemoryLeaseStore};

fn source(name: &str) -> KinesisStream {
    KinesisStream::new(name.to_owned())
        .create_if_missing(1)
        .poll_interval(Duration::from_millis(200))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lifecycle_ladder_live() {
    let Some(url) = common::endpoint() else {
        return;
    };
    harness::lifecycle(
        move || common::broker(&url).create_streams_if_missing(1),
        source,
        |connected| futures::executor::block_on(connected.publisher()).unwrap(),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_flushes_live() {
    let Some(url) = common::endpoint() else {
        return;
    };
    lifecycle::shutdown_flushes(
        move || common::broker(&url),
        source,
        |connected| futures::executor::block_on(connected.publisher()).unwrap(),
        Backlog::Missed,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settlement_matches_in_process() {
    let Some(url) = common::endpoint() else {
        return;
    };
    // Every connection of one run reaches the same checkpoints, as instances sharing a table do.
    let store: Arc<dyn LeaseStore> = Arc::new(MemoryLeaseStore::new());
    let answers_from = common::broker_with(&url, Arc::clone(&store));
    settlement::matches_in_process(
        move || answers_from.clone(),
        source,
        |connected| futures::executor::block_on(connected.publisher()).unwrap(),
        Duration::ZERO,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backlog_matches_server() {
    let Some(url) = common::endpoint() else {
        return;
    };
    in_process::backlog_matches_server(
        move || common::broker(&url).create_streams_if_missing(1),
        |connected| futures::executor::block_on(connected.publisher()).unwrap(),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refuses_like_the_server() {
    let Some(url) = common::endpoint() else {
        return;
    };
    let accepted = common::unique("conformance-refusals");
    in_process::refuses_like_the_server(
        move || common::broker(&url).create_streams_if_missing(1),
        |connected| futures::executor::block_on(connected.publisher()).unwrap(),
        [
            // Kinesis counts the partition key in a record's size, and a publish without a key
            // of its own gets a random one of 32 characters.
            Refusal::PayloadOver {
                name: accepted,
                limit: MAX_RECORD_BYTES - 32,
            },
            Refusal::Publish {
                name: "not a stream name!".to_owned(),
            },
            Refusal::Publish {
                name: common::unique("conformance-missing"),
            },
            Refusal::Subscription {
                source: KinesisStream::new("bad/name"),
            },
            Refusal::Subscription {
                source: KinesisStream::new(common::unique("conformance-absent")),
            },
        ],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_live() {
    let Some(url) = common::endpoint() else {
        return;
    };
    capabilities::batches(
        move || common::broker(&url),
        source,
        |connected| futures::executor::block_on(connected.publisher()).unwrap(),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seeking_live() {
    let Some(url) = common::endpoint() else {
        return;
    };
    let store: Arc<dyn LeaseStore> = Arc::new(MemoryLeaseStore::new());
    let shared = common::broker_with(&url, store);
    capabilities::seeking(
        move || shared.clone(),
        source,
        |connected| futures::executor::block_on(connected.publisher()).unwrap(),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_seeking_live() {
    let Some(url) = common::endpoint() else {
        return;
    };
    let store: Arc<dyn LeaseStore> = Arc::new(MemoryLeaseStore::new());
    let shared = common::broker_with(&url, store);
    capabilities::batch_seeking(
        move || shared.clone(),
        source,
        |connected| futures::executor::block_on(connected.publisher()).unwrap(),
    )
    .await;
}

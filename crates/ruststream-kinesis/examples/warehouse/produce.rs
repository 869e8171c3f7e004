//! The demo's producer of orders: `warehouse produce [--count N] [--every MS]` publishes orders
//! 1, 2, 3, .. to `warehouse-orders`, one every `MS` milliseconds (default 250), until it has
//! published `N` (default: no limit) or receives SIGINT or SIGTERM. Each order's SKU is its
//! partition key, so the orders of one SKU stay in order in one shard. It prints one line per
//! order published.

use std::error::Error;
use std::time::Duration;

use aws_config::BehaviorVersion;
use ruststream::runtime::PublishError;
use ruststream::{Broker, ConnectedBroker};
use ruststream_kinesis::KinesisError;
use ruststream_kinesis::prelude::*;
use tokio::signal::unix::{SignalKind, signal};

use super::Order;

const SKUS: [&str; 6] = ["bolts", "screws", "hinges", "washers", "nails", "nuts"];

pub async fn run(args: &[String]) -> Result<(), Box<dyn Error>> {
    let mut count = u64::MAX;
    let mut every = Duration::from_millis(250);
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        let value = rest.next().ok_or_else(|| format!("{arg} needs a value"))?;
        match arg.as_str() {
            "--count" => count = value.parse()?,
            "--every" => every = Duration::from_millis(value.parse()?),
            other => {
                return Err(format!("unknown option {other}; use --count N, --every MS").into());
            }
        }
    }
    let config = aws_config::defaults(BehaviorVersion::latest()).load().await;
    let connected = KinesisBroker::from_config(config).connect().await?;
    let publisher = connected.publisher().await?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut terminate = signal(SignalKind::terminate())?;
    let mut published = 0;
    for id in 1..=count {
        let sku = SKUS[(id % SKUS.len() as u64) as usize];
        let order = Order {
            id,
            sku: sku.to_owned(),
        };
        // The instances create the stream; until one has, wait for it.
        let mut waited = Duration::ZERO;
        loop {
            match publisher.message(&order).partition_key(sku).publish().await {
                Ok(()) => break,
                Err(PublishError::Publish(KinesisError::StreamNotFound { .. }))
                    if waited < Duration::from_secs(60) =>
                {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    waited += Duration::from_millis(200);
                }
                Err(err) => return Err(err.into()),
            }
        }
        published += 1;
        println!("published order {id} sku {sku}");
        tokio::select! {
            _ = interrupt.recv() => break,
            _ = terminate.recv() => break,
            () = tokio::time::sleep(every) => {}
        }
    }
    println!("producer stopped after {published} orders");
    connected.shutdown().await?;
    Ok(())
}

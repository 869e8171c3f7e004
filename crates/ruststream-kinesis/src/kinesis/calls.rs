//! The Kinesis a subscription reads from, as one value its drivers call: [`Kinesis`]. Either the
//! service, through the official SDK ([`super::api`], [`super::fan_out`]), or the in-process
//! Kinesis `TestApp` runs on (feature `testing`, `super::in_process`), under the same readers
//! and coordinator. Dispatch is a `match`: no boxed future and no allocation per call.

#[cfg(feature = "testing")]
use std::sync::Arc;

use aws_sdk_kinesis::Client;

use super::api::{self, Fetched, ShardInfo};
use super::fan_out::{self, Consumer, Event, Refused, SdkEvents};
use super::iterator::ShardIterator;
use crate::KinesisError;
use crate::settings::position::ShardStart;

/// The Kinesis the subscriptions of a connected broker read from.
#[derive(Debug, Clone)]
pub(crate) enum Kinesis {
    /// The service (or a local stack speaking its protocol), through the SDK's client.
    Sdk(Client),
    /// The in-process Kinesis `TestApp` runs on (feature `testing`), with the harness of the
    /// connection that reads it (each `TestApp` counts its own work).
    #[cfg(feature = "testing")]
    InProcess(
        Arc<super::in_process::InProcessKinesis>,
        Arc<std::sync::OnceLock<ruststream::testing::Coordinator>>,
    ),
}

impl Kinesis {
    /// Whether `stream` exists, created with `create_shards` shards when asked and missing, and
    /// waited for until it is active; answers its ARN.
    pub(crate) async fn ensure_stream(
        &self,
        stream: &str,
        create_shards: Option<u32>,
    ) -> Result<String, KinesisError> {
        match self {
            Self::Sdk(client) => api::ensure_stream(client, stream, create_shards).await,
            #[cfg(feature = "testing")]
            Self::InProcess(kinesis, _) => kinesis.ensure_stream(stream, create_shards),
        }
    }

    /// The enhanced fan-out consumer `name` of `stream` (its name and ARN), registered when
    /// missing and `register` allows, once it is active.
    pub(crate) async fn ensure_consumer(
        &self,
        stream: (&str, &str),
        name: &str,
        register: bool,
    ) -> Result<Consumer, KinesisError> {
        match self {
            Self::Sdk(client) => fan_out::ensure_consumer(client, stream, name, register).await,
            #[cfg(feature = "testing")]
            Self::InProcess(kinesis, _) => kinesis.ensure_consumer(stream.0, name, register),
        }
    }

    /// Every shard of `stream`.
    pub(crate) async fn list_shards(&self, stream: &str) -> Result<Vec<ShardInfo>, KinesisError> {
        match self {
            Self::Sdk(client) => api::list_shards(client, stream).await,
            #[cfg(feature = "testing")]
            Self::InProcess(kinesis, _) => kinesis.list_shards(stream),
        }
    }

    /// An iterator for `shard` of `stream` at `start`.
    pub(crate) async fn shard_iterator(
        &self,
        stream: &str,
        shard: &str,
        start: &ShardStart,
    ) -> Result<ShardIterator, KinesisError> {
        match self {
            Self::Sdk(client) => api::shard_iterator(client, stream, shard, start).await,
            #[cfg(feature = "testing")]
            Self::InProcess(kinesis, _) => kinesis.shard_iterator(stream, shard, start),
        }
    }

    /// One `GetRecords` call on `shard` from `iterator`, for at most `limit` records.
    pub(crate) async fn get_records(
        &self,
        stream: &str,
        shard: &str,
        iterator: &ShardIterator,
        limit: u32,
    ) -> Result<Fetched, KinesisError> {
        match (self, iterator) {
            (Self::Sdk(client), ShardIterator::Service(text)) => {
                api::get_records(client, stream, shard, text, limit).await
            }
            #[cfg(feature = "testing")]
            (Self::InProcess(kinesis, _), ShardIterator::InProcess { .. }) => {
                kinesis.get_records(iterator, limit)
            }
            #[cfg(feature = "testing")]
            (Self::Sdk(_), ShardIterator::InProcess { .. })
            | (Self::InProcess(..), ShardIterator::Service(_)) => Err(KinesisError::Api {
                stream: stream.to_owned(),
                operation: "GetRecords",
                message: format!(
                    "shard {shard}: an in-process iterator ({iterator}) sent to the service"
                ),
            }),
        }
    }

    /// `SubscribeToShard` of `consumer` to `shard` at `start`.
    pub(crate) async fn subscribe(
        &self,
        stream: &str,
        consumer: &Consumer,
        shard: &str,
        start: &ShardStart,
    ) -> Result<Events, Refused> {
        match self {
            Self::Sdk(client) => fan_out::subscribe(client, stream, consumer, shard, start)
                .await
                .map(Events::Sdk),
            #[cfg(feature = "testing")]
            Self::InProcess(kinesis, _) => {
                let _ = consumer;
                kinesis
                    .subscribe(stream, shard, start)
                    .map(Events::InProcess)
            }
        }
    }

    /// The AWS region the service is read in (`None` in process).
    #[cfg(feature = "dynamodb-lease")]
    pub(crate) fn region(&self) -> Option<String> {
        match self {
            Self::Sdk(client) => client.config().region().map(ToString::to_string),
            #[cfg(feature = "testing")]
            Self::InProcess(..) => None,
        }
    }

    /// Whether records are pushed to readers as they are written (in process), so they read at
    /// [`Pace::pushed`](crate::shard::pace::Pace::pushed) rather than the service's pace.
    pub(crate) fn pushes(&self) -> bool {
        match self {
            Self::Sdk(_) => false,
            #[cfg(feature = "testing")]
            Self::InProcess(..) => true,
        }
    }

    /// A tap for the reader that starts at `iterator`, in process; `None` from the service.
    #[cfg(feature = "testing")]
    pub(crate) fn tap(&self, iterator: &ShardIterator) -> Option<Arc<super::in_process::Tap>> {
        match self {
            Self::Sdk(_) => None,
            Self::InProcess(kinesis, harness) => kinesis.tap(iterator, harness),
        }
    }
}

/// An open enhanced fan-out subscription's events.
#[cfg_attr(
    feature = "testing",
    expect(
        clippy::large_enum_variant,
        reason = "one value per open subscription; boxing the service's would cost live an \
                  allocation per subscription for the tests' sake"
    )
)]
pub(crate) enum Events {
    /// The SDK's event stream of `SubscribeToShard`.
    Sdk(SdkEvents),
    /// An in-process subscription (feature `testing`).
    #[cfg(feature = "testing")]
    InProcess(super::in_process::InProcessEvents),
}

impl Events {
    /// The next event, skipping kinds the SDK does not know; `stream`, `consumer` and `shard`
    /// name a failure.
    pub(crate) async fn next(
        &mut self,
        stream: &str,
        consumer: &Consumer,
        shard: &str,
    ) -> Result<Event, Refused> {
        match self {
            Self::Sdk(events) => fan_out::next_event(events, stream, consumer, shard).await,
            #[cfg(feature = "testing")]
            Self::InProcess(events) => Ok(events.next().await),
        }
    }

    /// Where an in-process subscription brings its next event from; `None` from the service.
    #[cfg(feature = "testing")]
    pub(crate) fn in_process_position(&self) -> Option<u64> {
        match self {
            Self::Sdk(_) => None,
            Self::InProcess(events) => Some(events.position()),
        }
    }
}

impl std::fmt::Debug for Events {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Sdk(_) => f.write_str("Events::Sdk"),
            #[cfg(feature = "testing")]
            Self::InProcess(events) => events.fmt(f),
        }
    }
}

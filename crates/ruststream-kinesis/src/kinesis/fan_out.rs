//! The enhanced fan-out calls: the consumer (found, registered when missing and allowed, waited
//! for until `ACTIVE`) and `SubscribeToShard`'s event stream. Everything here is I/O; what to do
//! with an event is the shard machine's.

use std::sync::Arc;
use std::time::Duration;

use aws_sdk_kinesis::Client;
use aws_sdk_kinesis::config::StalledStreamProtectionConfig;
use aws_sdk_kinesis::error::SdkError;
use aws_sdk_kinesis::operation::describe_stream_consumer::DescribeStreamConsumerError;
use aws_sdk_kinesis::operation::register_stream_consumer::RegisterStreamConsumerError;
use aws_sdk_kinesis::operation::subscribe_to_shard::SubscribeToShardError;
use aws_sdk_kinesis::primitives::event_stream::EventReceiver;
use aws_sdk_kinesis::types::error::SubscribeToShardEventStreamError;
use aws_sdk_kinesis::types::{ConsumerStatus, StartingPosition, SubscribeToShardEventStream};

use super::api::{AnswerRecords, starting_at};
use crate::KinesisError;
use crate::clock::Instant;
use crate::settings::position::ShardStart;

/// How long a consumer may take to become `ACTIVE` (AWS: seconds; the local engine: at once).
const ACTIVE_WITHIN: Duration = Duration::from_secs(120);

/// How often a consumer that is `CREATING` is described again (the service allows 20 calls a
/// second per stream).
const DESCRIBE_GAP: Duration = Duration::from_millis(250);

/// How many enhanced fan-out consumers a stream may have (AWS and the local engine).
const CONSUMERS_PER_STREAM: usize = 20;

/// How long a registration refused for now waits before it is asked again: AWS allows 5
/// registrations a second per account, and 5 consumers being created at once.
const REGISTER_AGAIN_AFTER: Duration = Duration::from_secs(1);

/// The registered consumer a subscription reads through.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Consumer {
    /// Its name, as the service and the errors say it.
    pub(crate) name: Arc<str>,
    /// Its ARN, which `SubscribeToShard` takes.
    pub(crate) arn: Arc<str>,
}

/// A subscription's open event stream, as the SDK hands it out.
pub(crate) type SdkEvents =
    EventReceiver<SubscribeToShardEventStream, SubscribeToShardEventStreamError>;

/// What the next event of a subscription was.
#[derive(Debug)]
pub(crate) enum Event {
    /// Records (maybe none) and where a later subscription continues.
    Records {
        records: AnswerRecords,
        continuation: Option<String>,
        millis_behind: Option<i64>,
        /// The event names child shards: the shard is read to its end.
        ended: bool,
    },
    /// The subscription ended without an error.
    Ended,
}

/// Why a subscription could not be opened, or ended with an error.
#[derive(Debug)]
pub(crate) enum Refused {
    /// The shard is not in the stream (trimmed, or the stream deleted).
    Gone,
    /// Another subscription of the consumer to the shard is open, or one was opened within the
    /// last five seconds: tried again after a backoff, not reported.
    InUse,
    /// Anything else: reported, then tried again after a backoff.
    Failed(KinesisError),
}

/// The consumer `name` of `stream` (its name and its ARN): found, or registered when missing
/// and `register` allows, and waited for until it is `ACTIVE`.
pub(crate) async fn ensure_consumer(
    client: &Client,
    (stream, stream_arn): (&str, &str),
    name: &str,
    register: bool,
) -> Result<Consumer, KinesisError> {
    let deadline = Instant::now() + ACTIVE_WITHIN;
    let mut registered = false;
    let mut status = String::from("missing");
    loop {
        let described = client
            .describe_stream_consumer()
            .stream_arn(stream_arn)
            .consumer_name(name)
            .send()
            .await;
        match described {
            Ok(out) => {
                if let Some(consumer) = out.consumer_description() {
                    match consumer.consumer_status() {
                        ConsumerStatus::Active => {
                            return Ok(Consumer {
                                name: Arc::from(name),
                                arn: Arc::from(consumer.consumer_arn()),
                            });
                        }
                        ConsumerStatus::Deleting => {
                            return Err(not_active(stream, name, "DELETING"));
                        }
                        other => status = other.as_str().to_owned(),
                    }
                }
            }
            Err(SdkError::ServiceError(err))
                if matches!(
                    err.err(),
                    DescribeStreamConsumerError::ResourceNotFoundException(_)
                ) =>
            {
                if !register {
                    return Err(KinesisError::ConsumerNotFound {
                        stream: stream.to_owned(),
                        consumer: name.to_owned(),
                    });
                }
                if !registered {
                    match register_consumer(client, stream, stream_arn, name).await? {
                        Registration::Asked => registered = true,
                        Registration::NotNow(said) => {
                            status = format!("not registered yet ({said})");
                            tokio::time::sleep(REGISTER_AGAIN_AFTER).await;
                        }
                    }
                }
            }
            Err(err) => {
                return Err(consumer_call_failed(
                    stream,
                    name,
                    "DescribeStreamConsumer",
                    err,
                ));
            }
        }
        if Instant::now() > deadline {
            return Err(not_active(stream, name, &status));
        }
        tokio::time::sleep(DESCRIBE_GAP).await;
    }
}

fn not_active(stream: &str, consumer: &str, status: &str) -> KinesisError {
    KinesisError::ConsumerNotActive {
        stream: stream.to_owned(),
        consumer: consumer.to_owned(),
        status: status.to_owned(),
    }
}

fn consumer_call_failed(
    stream: &str,
    consumer: &str,
    operation: &'static str,
    err: impl std::error::Error + 'static,
) -> KinesisError {
    KinesisError::Api {
        stream: stream.to_owned(),
        operation,
        message: format!(
            "consumer {consumer}: {}",
            crate::sdk::failure::described(&err)
        ),
    }
}

/// What became of a registration.
enum Registration {
    /// Registered, or another instance registered the same name at once.
    Asked,
    /// Refused for now (what the service said): the stream has room for the consumer, but too
    /// many are being created at the same time, or registrations come too fast.
    NotNow(String),
}

/// `RegisterStreamConsumer`. A `LimitExceededException` is the stream's limit of consumers
/// only when the stream has that many; otherwise it is AWS's limit of consumers being created
/// at once (5) or of registrations per second, and the registration is tried again.
async fn register_consumer(
    client: &Client,
    stream: &str,
    stream_arn: &str,
    name: &str,
) -> Result<Registration, KinesisError> {
    let answer = client
        .register_stream_consumer()
        .stream_arn(stream_arn)
        .consumer_name(name)
        .send()
        .await;
    match answer {
        Ok(_) => {
            tracing::info!(
                stream,
                consumer = name,
                "enhanced fan-out consumer registered"
            );
            Ok(Registration::Asked)
        }
        Err(SdkError::ServiceError(err)) => match err.err() {
            RegisterStreamConsumerError::ResourceInUseException(_) => Ok(Registration::Asked),
            RegisterStreamConsumerError::LimitExceededException(limit) => {
                let said = limit
                    .message()
                    .unwrap_or("LimitExceededException")
                    .to_owned();
                let room = consumers_of(client, stream_arn).await;
                if room.is_some_and(|consumers| consumers < CONSUMERS_PER_STREAM) {
                    tracing::info!(
                        stream,
                        consumer = name,
                        refusal = %said,
                        "registering the enhanced fan-out consumer was refused for now; trying \
                         again"
                    );
                    return Ok(Registration::NotNow(said));
                }
                Err(KinesisError::ConsumerLimit {
                    stream: stream.to_owned(),
                    consumer: name.to_owned(),
                    message: said,
                })
            }
            _ => Err(consumer_call_failed(
                stream,
                name,
                "RegisterStreamConsumer",
                SdkError::ServiceError(err),
            )),
        },
        Err(err) => Err(consumer_call_failed(
            stream,
            name,
            "RegisterStreamConsumer",
            err,
        )),
    }
}

/// How many consumers `stream_arn` has (the first page: more than the limit); `None` when it
/// cannot be learnt, which counts as full.
async fn consumers_of(client: &Client, stream_arn: &str) -> Option<usize> {
    let listed = client
        .list_stream_consumers()
        .stream_arn(stream_arn)
        .send()
        .await;
    listed.ok().map(|out| out.consumers().len())
}

/// `SubscribeToShard` of `consumer` to `shard` at `start`. The SDK's stalled-stream protection
/// is off for this call only: a shard with nothing new is quiet between events, and the
/// driver's own bound ([`EVENT_SILENCE_LIMIT`](crate::shard::pace::EVENT_SILENCE_LIMIT)) ends a
/// subscription that is silent too long.
pub(crate) async fn subscribe(
    client: &Client,
    stream: &str,
    consumer: &Consumer,
    shard: &str,
    start: &ShardStart,
) -> Result<SdkEvents, Refused> {
    let (kind, sequence, timestamp) = starting_at(start);
    let position = StartingPosition::builder()
        .r#type(kind)
        .set_sequence_number(sequence)
        .set_timestamp(timestamp)
        .build()
        .map_err(|err| Refused::Failed(subscribe_failed(stream, consumer, shard, err)))?;
    let answer = client
        .subscribe_to_shard()
        .consumer_arn(consumer.arn.as_ref())
        .shard_id(shard)
        .starting_position(position)
        .customize()
        .config_override(
            aws_sdk_kinesis::config::Builder::default()
                .stalled_stream_protection(StalledStreamProtectionConfig::disabled()),
        )
        .send()
        .await;
    match answer {
        Ok(out) => Ok(out.event_stream),
        Err(SdkError::ServiceError(err)) => Err(match err.err() {
            SubscribeToShardError::ResourceInUseException(_) => Refused::InUse,
            SubscribeToShardError::ResourceNotFoundException(_) => Refused::Gone,
            _ => Refused::Failed(subscribe_failed(
                stream,
                consumer,
                shard,
                SdkError::ServiceError(err),
            )),
        }),
        Err(err) => Err(Refused::Failed(subscribe_failed(
            stream, consumer, shard, err,
        ))),
    }
}

fn subscribe_failed(
    stream: &str,
    consumer: &Consumer,
    shard: &str,
    err: impl std::error::Error + 'static,
) -> KinesisError {
    KinesisError::Api {
        stream: stream.to_owned(),
        operation: "SubscribeToShard",
        message: format!(
            "shard {shard}, consumer {}: {}",
            consumer.name,
            crate::sdk::failure::described(&err)
        ),
    }
}

/// The next event of `events`, skipping kinds this SDK does not know. A subscription can be
/// refused in its event stream as well as in the call's answer (the local engine says
/// `ResourceInUseException` there).
pub(crate) async fn next_event(
    events: &mut SdkEvents,
    stream: &str,
    consumer: &Consumer,
    shard: &str,
) -> Result<Event, Refused> {
    loop {
        let event = events.recv().await.map_err(|err| match err {
            SdkError::ServiceError(err) => match err.err() {
                SubscribeToShardEventStreamError::ResourceInUseException(_) => Refused::InUse,
                SubscribeToShardEventStreamError::ResourceNotFoundException(_) => Refused::Gone,
                _ => Refused::Failed(subscribe_failed(
                    stream,
                    consumer,
                    shard,
                    SdkError::ServiceError(err),
                )),
            },
            err => Refused::Failed(subscribe_failed(stream, consumer, shard, err)),
        })?;
        let Some(event) = event else {
            return Ok(Event::Ended);
        };
        let SubscribeToShardEventStream::SubscribeToShardEvent(event) = event else {
            continue;
        };
        let ended = !event.child_shards().is_empty();
        return Ok(Event::Records {
            continuation: Some(event.continuation_sequence_number)
                .filter(|continuation| !continuation.is_empty()),
            millis_behind: Some(event.millis_behind_latest),
            ended,
            records: AnswerRecords::Sdk(event.records),
        });
    }
}

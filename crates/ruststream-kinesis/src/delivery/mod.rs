//! What a handler sees: a delivery ([`message`]) and the record it carries ([`record`]), what it
//! settles against ([`message::Settlement`]), the handler's context ([`context`]), the subscriber
//! in front of the handlers ([`subscriber`]), and the seeker a handler moves a subscription with
//! ([`seeker`]); under exactly once, the DynamoDB writes a handling stages ([`writes`]).

pub(crate) mod context;
pub(crate) mod message;
pub(crate) mod record;
pub(crate) mod seeker;
pub(crate) mod subscriber;
#[cfg(feature = "dynamodb-lease")]
pub(crate) mod writes;

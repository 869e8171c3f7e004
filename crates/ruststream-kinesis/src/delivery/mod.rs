//! What a handler sees: a delivery ([`message`]) and the record it carries ([`record`]), what it
//! settles against ([`settlement`]), the handler's context ([`context`]), the subscriber in
//! front of the handlers ([`subscriber`]) and the channel to it ([`outlet`]), which carries a
//! shard's records handed out at once as they are ([`run`]), and the seeker a handler moves a
//! subscription with ([`seeker`]); under exactly once, the DynamoDB writes a handling stages
//! ([`writes`]) and the batch whose records settle as one unit ([`batch`]).

#[cfg(feature = "dynamodb-lease")]
pub(crate) mod batch;
pub(crate) mod context;
pub(crate) mod message;
pub(crate) mod outlet;
pub(crate) mod record;
pub(crate) mod run;
pub(crate) mod seeker;
pub(crate) mod settlement;
pub(crate) mod subscriber;
#[cfg(feature = "dynamodb-lease")]
pub(crate) mod writes;

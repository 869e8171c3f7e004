//! What a service configures: the stream a subscriber reads and how ([`stream`]), where a shard
//! starts ([`position`]), the lease's timings ([`timings`]), and the service limits every name
//! and record is checked against ([`validate`]).

pub(crate) mod position;
pub(crate) mod stream;
pub(crate) mod timings;
pub(crate) mod validate;

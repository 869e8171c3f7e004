//! How the AWS SDK's clients are set up: every call on the broker's runtime ([`http`]), and each
//! call bounded by the configuration's timeouts ([`timeouts`]), endpoints without user-info
//! ([`endpoint`]), and a failed call said in one line ([`failure`]).

pub(crate) mod endpoint;
pub(crate) mod failure;
pub(crate) mod http;
pub(crate) mod timeouts;

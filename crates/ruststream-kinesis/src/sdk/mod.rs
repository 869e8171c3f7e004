//! How the AWS SDK's clients are set up: every call on the broker's runtime ([`http`]), and each
//! call bounded by the configuration's timeouts ([`timeouts`]), endpoints without user-info
//! ([`endpoint`]), a failed call said in one line ([`failure`]), and every Kinesis call timed
//! into the metrics ([`metering`]).

pub(crate) mod endpoint;
pub(crate) mod failure;
pub(crate) mod http;
pub(crate) mod metering;
pub(crate) mod timeouts;

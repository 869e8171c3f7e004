//! How the AWS SDK's clients are set up: every call on the broker's runtime ([`http`]), and each
//! call bounded by the configuration's timeouts ([`timeouts`]).

pub(crate) mod endpoint;
pub(crate) mod http;
pub(crate) mod timeouts;

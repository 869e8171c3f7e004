//! The Kinesis boundary: every call the crate makes to Kinesis ([`api`]), and how a record carries
//! its headers inside its data ([`envelope`]).

pub(crate) mod api;
pub(crate) mod envelope;

//! The Kinesis boundary: every call the crate makes to Kinesis ([`api`], and [`fan_out`] for
//! enhanced fan-out), a listing's shards as the coordinator decides on them ([`shards`]), how a
//! record carries its headers inside its data ([`envelope`]), and the KPL's aggregated records
//! ([`kpl`]).

pub(crate) mod api;
pub(crate) mod envelope;
pub(crate) mod fan_out;
pub(crate) mod kpl;
pub(crate) mod shards;

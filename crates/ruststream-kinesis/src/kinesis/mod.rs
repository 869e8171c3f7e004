//! The Kinesis boundary: the Kinesis a subscription reads from ([`calls`]: one value its
//! drivers call), every call the crate makes to the service ([`api`], and [`fan_out`] for
//! enhanced fan-out), where a read goes on from ([`iterator`]), a listing's shards as the
//! coordinator decides on them ([`shards`]), how a record carries its headers inside its data
//! ([`envelope`]), and the KPL's aggregated records ([`kpl`]).

pub(crate) mod api;
pub(crate) mod calls;
pub(crate) mod envelope;
pub(crate) mod fan_out;
#[cfg(feature = "testing")]
pub(crate) mod in_process;
pub(crate) mod iterator;
pub(crate) mod kpl;
pub(crate) mod shards;

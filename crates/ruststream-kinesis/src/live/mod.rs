//! The live subscription: its state and what its readers tell it ([`subscription`]), the
//! coordinator that decides which shards it reads ([`coordinator`]: the pure
//! [`Coordinator`](coordinator::machine::Coordinator) and [`plan`](coordinator::plan), and the
//! listing rounds, takes, handover poll and seeks that drive them), and the tasks of each held
//! shard ([`reader`]: they execute what the shard's machine asks).

pub(crate) mod coordinator;
pub(crate) mod reader;
pub(crate) mod subscription;

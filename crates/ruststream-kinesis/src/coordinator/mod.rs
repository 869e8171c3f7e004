//! Which shards this instance reads, decided with no I/O and no clock of its own: what the
//! subscription knows of its stream's shards and every decision on it ([`machine`]), the verdict
//! on each shard ([`plan`]), when a listing round or the handover poll runs and the order of
//! their calls ([`rounds`]), which rows a round deletes ([`hygiene`]), whose turn it is to read
//! every row ([`full_read_turns`]), whether another instance
//! runs under this one's owner id ([`twins`]), whether the fleet keeps its leases alive one way
//! ([`modes`]), what the handover poll keeps between listings so
//! that it reads the rows only when they moved ([`watch`]), which of its notice reads are whole
//! ([`notice_reads`]), how fast it takes shards
//! ([`take_pace`]), whose turn a free shard is among instances that do not balance ([`turns`]),
//! and one take's calls ([`take`]). `live/coordinator` executes them on tokio;
//! the simulation drives the same types on a virtual clock.

pub(crate) mod balance;
pub(crate) mod full_read_turns;
pub(crate) mod hygiene;
pub(crate) mod machine;
pub(crate) mod modes;
pub(crate) mod notice_reads;
pub(crate) mod plan;
pub(crate) mod rounds;
pub(crate) mod take;
pub(crate) mod take_pace;
pub(crate) mod turns;
pub(crate) mod twins;
pub(crate) mod watch;

//! The drivers' one clock: tokio's `Instant`, which a test with a paused clock drives, so the
//! real drivers run on virtual time too. The pure machines take `now` as an input instead.

pub(crate) use tokio::time::Instant;

//! The drivers' one clock: tokio's `Instant`, which a test with a paused clock drives, so the
//! real drivers run on virtual time too. The pure machines take `now` as an input instead.

pub(crate) use tokio::time::Instant;

/// Sleeps until `at`, or for ever: a driver's wait for a machine's timer (`None`: it has none,
/// and only a wake ends the wait).
pub(crate) async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

//! Timeouts for the AWS SDK clients the broker builds, so that no call hangs for good.

use std::time::Duration;

use aws_sdk_kinesis::config::timeout::TimeoutConfig;

/// The bound of a lease-store call where the store cannot know the subscription's timings: the
/// default renewal interval, so a renewal that does not answer fails while the lease lasts.
#[cfg(any(feature = "dynamodb-lease", test))]
pub(crate) const STORE_CALL_BOUND: Duration = Duration::from_secs(3);

/// The longest a lease-store call's retry waits before its first and its later attempts: a
/// throttled call's attempts all fit its bound (the renewal interval), so throttling answers as
/// itself rather than as a timeout; the lease's own retry wait and the coordinator's backoff do
/// the backing off between calls.
#[cfg(feature = "dynamodb-lease")]
const STORE_INITIAL_BACKOFF: Duration = Duration::from_millis(50);
#[cfg(feature = "dynamodb-lease")]
const STORE_MAX_BACKOFF: Duration = Duration::from_millis(500);

/// The configuration's retries for lease-store calls (its mode and attempts; the SDK's standard
/// ones where it sets none), with backoffs no longer than [`STORE_INITIAL_BACKOFF`] and
/// [`STORE_MAX_BACKOFF`].
#[cfg(feature = "dynamodb-lease")]
pub(crate) fn store_retries(
    configured: Option<&aws_sdk_dynamodb::config::retry::RetryConfig>,
) -> aws_sdk_dynamodb::config::retry::RetryConfig {
    let base = configured
        .cloned()
        .unwrap_or_else(aws_sdk_dynamodb::config::retry::RetryConfig::standard);
    let initial = base.initial_backoff().min(STORE_INITIAL_BACKOFF);
    let max = base.max_backoff().min(STORE_MAX_BACKOFF);
    base.with_initial_backoff(initial).with_max_backoff(max)
}

/// The configuration's timeouts, with an operation timeout of `bound` and an attempt timeout of
/// half of it where the configuration sets none.
pub(crate) fn call_timeouts(configured: Option<&TimeoutConfig>, bound: Duration) -> TimeoutConfig {
    let ours = TimeoutConfig::builder()
        .operation_timeout(bound)
        .operation_attempt_timeout(bound / 2);
    match configured {
        Some(configured) => configured.to_builder().take_unset_from(ours).build(),
        None => ours.build(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_store_call_bound_is_the_default_renewal_interval() {
        assert_eq!(STORE_CALL_BOUND, crate::LeaseTimings::default().renew());
    }

    #[cfg(feature = "dynamodb-lease")]
    #[test]
    fn store_retries_keep_the_attempts_and_shorten_the_backoffs() {
        use aws_sdk_dynamodb::config::retry::RetryConfig;
        let retries = store_retries(Some(&RetryConfig::standard().with_max_attempts(5)));
        assert_eq!(retries.max_attempts(), 5);
        assert_eq!(retries.initial_backoff(), STORE_INITIAL_BACKOFF);
        assert_eq!(retries.max_backoff(), STORE_MAX_BACKOFF);
        let quick = RetryConfig::standard().with_initial_backoff(Duration::from_millis(10));
        assert_eq!(
            store_retries(Some(&quick)).initial_backoff(),
            Duration::from_millis(10),
            "a shorter configured backoff stays"
        );
        assert_eq!(store_retries(None).max_attempts(), 3);
    }

    #[test]
    fn configured_timeouts_win_and_ours_fill_the_rest() {
        let configured = TimeoutConfig::builder()
            .operation_timeout(Duration::from_secs(30))
            .build();
        let merged = call_timeouts(Some(&configured), Duration::from_secs(10));
        assert_eq!(merged.operation_timeout(), Some(Duration::from_secs(30)));
        assert_eq!(
            merged.operation_attempt_timeout(),
            Some(Duration::from_secs(5))
        );
    }
}

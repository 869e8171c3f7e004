//! Timeouts for the AWS SDK clients the broker builds, so that no call hangs for good.

use std::time::Duration;

use aws_sdk_kinesis::config::timeout::TimeoutConfig;

/// The bound of a lease-store call where the store cannot know the subscription's timings: the
/// default renewal interval, so a renewal that does not answer fails while the lease lasts.
#[cfg(any(feature = "dynamodb-lease", test))]
pub(crate) const STORE_CALL_BOUND: Duration = Duration::from_secs(3);

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

//! The AWS configuration of a local stack: what tests, examples and benchmarks against
//! LocalStack (or `scripts/local-stack.sh`) build their clients and lease stores from.

use aws_config::{BehaviorVersion, Region, SdkConfig};
use aws_sdk_kinesis::config::{Credentials, SharedCredentialsProvider};

/// The static credentials local stacks accept; never those of a real account.
pub(crate) fn test_credentials() -> Credentials {
    Credentials::new("test", "test", None, None, "ruststream-kinesis-test")
}

/// An AWS configuration for a local stack serving Kinesis and DynamoDB at `endpoint`, such as
/// LocalStack's `http://127.0.0.1:4566`: region `us-east-1` and static test credentials, built
/// without I/O. One configuration serves the broker ([`KinesisBroker::from_config`]) and a
/// `DynamoLeaseStore` alike. Never for a real account: there, load the configuration from the
/// environment with `aws_config`.
///
/// [`KinesisBroker::from_config`]: crate::KinesisBroker::from_config
///
/// # Examples
///
/// ```
/// use ruststream_kinesis::{KinesisBroker, local_stack_config};
///
/// let config = local_stack_config("http://127.0.0.1:4566");
/// assert_eq!(config.endpoint_url(), Some("http://127.0.0.1:4566"));
/// assert_eq!(config.region().map(|r| r.as_ref()), Some("us-east-1"));
/// let broker = KinesisBroker::from_config(config);
/// # let _ = broker;
/// ```
#[must_use]
pub fn local_stack_config(endpoint: impl Into<String>) -> SdkConfig {
    SdkConfig::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .endpoint_url(endpoint)
        .credentials_provider(SharedCredentialsProvider::new(test_credentials()))
        .build()
}

//! A configuration that carries recognisable credentials, for the tests that show none of them
//! reaches a log line or an error: a secret key, a session token, and an endpoint whose user-info
//! carries a password and whose query carries a token.

use aws_config::{AppName, BehaviorVersion, Region, SdkConfig};
use aws_sdk_kinesis::config::{Credentials, SharedCredentialsProvider};

pub const SECRET_KEY: &str = "secret-key-9c41d7";
pub const TOKEN: &str = "session-token-4be20a";
pub const PASSWORD: &str = "endpoint-password-77f1";
pub const QUERY_TOKEN: &str = "query-token-51d0";
/// A password with an unencoded '/', which a URL parser reads as the end of the host: each half
/// is a secret of its own.
pub const SLASHED: [&str; 2] = ["p4ss-8d2e", "tail-5c0f"];

/// What no log line and no error may carry.
pub fn secrets() -> [&'static str; 6] {
    [
        SECRET_KEY,
        TOKEN,
        PASSWORD,
        QUERY_TOKEN,
        SLASHED[0],
        SLASHED[1],
    ]
}

/// `url` with the password in its user-info and the token in its query.
pub fn with_password(url: &str) -> String {
    let with_user = url.replacen("://", &format!("://svc:{PASSWORD}@"), 1);
    format!("{}/?token={QUERY_TOKEN}", with_user.trim_end_matches('/'))
}

/// `url` with the slashed password in its user-info: an endpoint that does not parse.
pub fn with_slashed_password(url: &str) -> String {
    url.replacen("://", &format!("://svc:{}/{}@", SLASHED[0], SLASHED[1]), 1)
}

/// The configuration of `url` with the recognisable keys and token, the endpoint with the
/// password in its user-info, and `app` as the SDK's app name (the fault injector's client).
pub fn config(url: &str, app: &str) -> SdkConfig {
    SdkConfig::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .endpoint_url(with_password(url))
        .app_name(AppName::new(app.to_owned()).expect("a valid app name"))
        .credentials_provider(SharedCredentialsProvider::new(Credentials::new(
            "AKIDKINESISTEST",
            SECRET_KEY,
            Some(TOKEN.to_owned()),
            None,
            "credentials-test",
        )))
        .build()
}

/// Fails naming the text (with the secret masked) when `text` carries a credential.
pub fn assert_none_in(text: &str, what: &str) {
    for secret in secrets() {
        assert!(
            !text.contains(secret),
            "{what} carries a credential ({} chars): {}",
            secret.len(),
            text.replace(secret, "<SECRET>")
        );
    }
}

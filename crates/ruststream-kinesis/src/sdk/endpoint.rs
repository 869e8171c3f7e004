//! Endpoints without user-info. Kinesis and DynamoDB authenticate every call with SigV4, so a
//! user name or password in an endpoint URL means nothing to them, and the SDK writes the
//! endpoint it resolves into its DEBUG log lines: an endpoint's user-info is dropped before the
//! SDK sees it, so no password reaches a log.

/// `url` without the user-info of its authority (`scheme://user:password@host:port/..` becomes
/// `scheme://host:port/..`); `None` when it has none.
pub(crate) fn without_userinfo(url: &str) -> Option<String> {
    let (scheme, rest) = url.split_once("://")?;
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let (_, host) = authority.rsplit_once('@')?;
    Some(format!("{scheme}://{host}{tail}"))
}

/// The endpoint `configured` (or, where none is, the configuration's) without its user-info,
/// when it has any: what the SDK is to be given instead.
pub(crate) fn cleaned(configured: Option<&str>, config: &aws_config::SdkConfig) -> Option<String> {
    let endpoint = configured.or_else(|| config.endpoint_url())?;
    let cleaned = without_userinfo(endpoint)?;
    tracing::warn!(
        endpoint = %cleaned,
        "the endpoint's user-info was dropped: AWS services authenticate with SigV4, and the SDK \
         would write it into its log lines"
    );
    Some(cleaned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_user_info_goes_and_the_rest_stays() {
        assert_eq!(
            without_userinfo("https://svc:p@ss@kinesis.internal:8443/base?x=1").as_deref(),
            Some("https://kinesis.internal:8443/base?x=1")
        );
        assert_eq!(
            without_userinfo("http://user@127.0.0.1:4566").as_deref(),
            Some("http://127.0.0.1:4566")
        );
        assert_eq!(without_userinfo("http://127.0.0.1:4566/a@b"), None);
        assert_eq!(without_userinfo("http://127.0.0.1:4566"), None);
        assert_eq!(without_userinfo("not a url"), None);
    }
}

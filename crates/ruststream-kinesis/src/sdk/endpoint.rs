//! Endpoints with nothing secret in them. Kinesis and DynamoDB authenticate every call with
//! SigV4, so a user name or password in an endpoint URL means nothing to them, and neither does
//! a query string (their calls are POSTs to `/`); but the SDK writes the endpoint it resolves into
//! its DEBUG log lines and into some of its errors. So an endpoint's user-info, query and fragment
//! are dropped before the SDK sees it, and an endpoint that is not `scheme://host[:port][/path]`
//! is refused without being repeated: a password with an unencoded `/` or `?` in it would
//! otherwise be read as the host and port, and said back in every error.

use aws_config::SdkConfig;
use aws_types::service_config::ServiceConfigKey;

/// An AWS service the crate calls, as the SDK names it in its per-service endpoint settings
/// (`AWS_ENDPOINT_URL_<SERVICE>`, a profile's `[services]` section).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Service {
    Kinesis,
    #[cfg(feature = "dynamodb-lease")]
    DynamoDb,
}

impl Service {
    fn key(self) -> ServiceConfigKey<'static> {
        let service_id = match self {
            Self::Kinesis => "Kinesis",
            #[cfg(feature = "dynamodb-lease")]
            Self::DynamoDb => "DynamoDB",
        };
        // As the SDK's client builders ask: the loader adds the service to the variable's name
        // (`AWS_ENDPOINT_URL_KINESIS`) and reads the profile's `[services]` section.
        ServiceConfigKey::builder()
            .service_id(service_id)
            .env("AWS_ENDPOINT_URL")
            .profile("endpoint_url")
            .build()
            .expect("every field is set")
    }
}

/// The endpoint the SDK would use for `service` with `config`, picked as its client builder
/// picks it: an endpoint set on the configuration in code, else the service's own
/// (`AWS_ENDPOINT_URL_KINESIS`, a profile's `[services]`), else the shared one (`AWS_ENDPOINT_URL`).
pub(crate) fn resolved(config: &SdkConfig, service: Service) -> Option<String> {
    if config.get_origin("endpoint_url").is_client_config() {
        return config.endpoint_url().map(str::to_owned);
    }
    config
        .service_config()
        .and_then(|services| services.load_config(service.key()))
        .or_else(|| config.endpoint_url().map(str::to_owned))
}

/// An endpoint taken apart: what the SDK may be given, and whether anything was dropped.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Cleaned {
    /// `scheme://host[:port][/path]`.
    pub(crate) url: String,
    /// `host[:port]`, what a log line or a description may say.
    pub(crate) authority: String,
    /// Whether user-info, a query or a fragment was dropped.
    dropped: bool,
}

/// `url` without its user-info, query and fragment; an error saying what is wrong (never the
/// URL, which may hold a password) when it is not `scheme://host[:port][/path]`.
pub(crate) fn clean(url: &str) -> Result<Cleaned, String> {
    const FORM: &str = "it must read scheme://host[:port][/path]; a user name or password in it \
                        (which AWS does not use) must have its '/', '?', '#' and '@' \
                        percent-encoded, or better be left out";
    let Some((scheme, rest)) = url.split_once("://") else {
        return Err(format!("the endpoint has no scheme://; {FORM}"));
    };
    if scheme.is_empty()
        || !scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '+')
    {
        return Err(format!("the endpoint's scheme is not one; {FORM}"));
    }
    let before_query = rest.split(['?', '#']).next().unwrap_or_default();
    let authority_end = before_query.find('/').unwrap_or(before_query.len());
    let (authority, path) = before_query.split_at(authority_end);
    let (userinfo, host_port) = match authority.rsplit_once('@') {
        Some((userinfo, host_port)) => (Some(userinfo), host_port),
        None => (None, authority),
    };
    if !valid_host_port(host_port) {
        return Err(format!("the endpoint's host and port do not parse; {FORM}"));
    }
    Ok(Cleaned {
        url: format!("{scheme}://{host_port}{path}"),
        authority: host_port.to_owned(),
        dropped: userinfo.is_some() || before_query.len() < rest.len(),
    })
}

/// `host`, `host:port` or `[v6]:port`, with a decimal port.
fn valid_host_port(host_port: &str) -> bool {
    let (host, port) = if let Some(v6) = host_port.strip_prefix('[') {
        match v6.split_once(']') {
            Some((address, after)) => (address, after.strip_prefix(':')),
            None => return false,
        }
    } else {
        match host_port.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (host_port, None),
        }
    };
    let host_ok = !host.is_empty()
        && host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | ':' | '%'));
    let port_ok =
        port.is_none_or(|p| !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()));
    host_ok && port_ok
}

/// The endpoint the SDK is to be given for `service`: `configured` (set on the broker), else the
/// configuration's as the SDK resolves it, cleaned. `Ok(None)` when there is none (the SDK then
/// resolves AWS's own); an error, naming where the endpoint came from and never its text, when
/// it does not parse.
pub(crate) fn for_service(
    configured: Option<&str>,
    config: &SdkConfig,
    service: Service,
) -> Result<Option<String>, String> {
    let (endpoint, origin) = match configured {
        Some(url) => (url.to_owned(), "KinesisBroker::endpoint(..)"),
        None => match resolved(config, service) {
            Some(url) => (
                url,
                "the AWS configuration (endpoint_url, AWS_ENDPOINT_URL_<SERVICE>, AWS_ENDPOINT_URL \
                 or a profile's endpoint_url)",
            ),
            None => return Ok(None),
        },
    };
    let cleaned = clean(&endpoint)
        .map_err(|reason| format!("the {service:?} endpoint from {origin} is refused: {reason}"))?;
    if cleaned.dropped {
        tracing::warn!(
            endpoint = %cleaned.authority,
            "the endpoint's user-info and query were dropped: AWS services authenticate with \
             SigV4 and take no query on their endpoint, and the SDK would write them into its \
             log lines"
        );
    }
    Ok(Some(cleaned.url))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_info_query_and_fragment_go_and_the_rest_stays() {
        let cleaned = clean("https://svc:p@ss@kinesis.internal:8443/base?x=1#top").unwrap();
        assert_eq!(cleaned.url, "https://kinesis.internal:8443/base");
        assert_eq!(cleaned.authority, "kinesis.internal:8443");
        assert!(cleaned.dropped);
        let plain = clean("http://127.0.0.1:4566").unwrap();
        assert_eq!(plain.url, "http://127.0.0.1:4566");
        assert!(!plain.dropped);
        assert_eq!(clean("http://[::1]:4566/").unwrap().authority, "[::1]:4566");
    }

    #[test]
    fn an_endpoint_that_does_not_parse_is_refused_without_being_repeated() {
        for url in [
            "not a url",
            "http://svc:pa/ss-7c1e@127.0.0.1:4566",
            "http://svc:pa?ss-7c1e@127.0.0.1:4566",
            "http://host:port-7c1e",
            "://127.0.0.1:4566",
        ] {
            let refused = clean(url).expect_err(url);
            assert!(
                !refused.contains("7c1e") && !refused.contains("svc"),
                "{refused}"
            );
        }
    }

    #[test]
    fn a_service_endpoint_set_in_code_wins_else_the_services_own_else_the_shared_one() {
        #[derive(Debug)]
        struct Own;
        impl aws_types::service_config::LoadServiceConfig for Own {
            fn load_config(&self, key: ServiceConfigKey<'_>) -> Option<String> {
                (key.service_id() == "Kinesis").then(|| "http://kinesis.own:1".to_owned())
            }
        }
        let shared = |builder: aws_types::sdk_config::Builder| builder.service_config(Own).build();
        // As `aws_config::defaults(..).endpoint_url(..)` marks an endpoint set in code.
        let mut in_code = SdkConfig::builder().endpoint_url("http://in.code:2");
        in_code.insert_origin("endpoint_url", aws_types::origin::Origin::shared_config());
        let in_code = shared(in_code);
        assert_eq!(
            resolved(&in_code, Service::Kinesis).as_deref(),
            Some("http://in.code:2")
        );
        let from_env = shared(SdkConfig::builder());
        assert_eq!(
            resolved(&from_env, Service::Kinesis).as_deref(),
            Some("http://kinesis.own:1")
        );
        #[cfg(feature = "dynamodb-lease")]
        assert_eq!(resolved(&from_env, Service::DynamoDb), None);
    }
}

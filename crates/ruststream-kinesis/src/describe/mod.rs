//! What a Kinesis service says of itself in its `AsyncAPI` document: the server it reaches
//! (always: a broker registered with `with_broker_labeled` describes itself), and with the
//! `asyncapi` feature the `x-kinesis` bindings of each stream ([`bindings`]).
//!
//! Nothing here reads a credential. The server is the endpoint's host and port (its scheme,
//! user-info, path and query are dropped; one that does not parse is not described), else the
//! regional host.

#[cfg(feature = "asyncapi")]
mod bindings;

use ruststream::ServerSpec;

#[cfg(feature = "asyncapi")]
pub(crate) use bindings::{published_message, stream_channel, stream_operation};

/// The protocol the document names for a Kinesis server.
pub const PROTOCOL: &str = "kinesis";

/// The server at `endpoint`'s host and port, else Kinesis's host in the `region` it asks for,
/// else Kinesis's global name.
pub(crate) fn server(
    endpoint: Option<String>,
    region: impl FnOnce() -> Option<String>,
) -> ServerSpec {
    // An endpoint that does not parse is not described (its text may hold a password): the
    // service fails to connect to it, naming the fix.
    let host = endpoint.and_then(|url| crate::sdk::endpoint::clean(&url).ok());
    let spec = match host {
        Some(cleaned) => ServerSpec::new(cleaned.authority, PROTOCOL),
        None => match region() {
            Some(region) => ServerSpec::new(format!("kinesis.{region}.amazonaws.com"), PROTOCOL),
            None => ServerSpec::new("kinesis.amazonaws.com", PROTOCOL),
        },
    };
    spec.description("Amazon Kinesis Data Streams")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_server_is_the_endpoints_host_else_the_regional_one_else_the_global_one() {
        let endpoint = "https://key:secret@kinesis.internal:8443/path?X-Amz-Security-Token=secret";
        let spec = server(Some(endpoint.to_owned()), || Some("eu-west-1".to_owned()));
        assert_eq!(spec.host.as_deref(), Some("kinesis.internal:8443"));
        assert_eq!(spec.protocol, PROTOCOL);
        let regional = server(None, || Some("eu-west-1".to_owned()));
        assert_eq!(
            regional.host.as_deref(),
            Some("kinesis.eu-west-1.amazonaws.com")
        );
        let global = server(None, || None);
        assert_eq!(global.host.as_deref(), Some("kinesis.amazonaws.com"));
        // A password with an unencoded '/' would read as the host and port: not described.
        let unparsed = server(
            Some("https://svc:pa/ss-7c1e@kinesis.internal".to_owned()),
            || Some("eu-west-1".to_owned()),
        );
        assert_eq!(
            unparsed.host.as_deref(),
            Some("kinesis.eu-west-1.amazonaws.com")
        );
    }
}

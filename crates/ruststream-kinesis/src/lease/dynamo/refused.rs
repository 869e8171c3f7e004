//! The endpoint resolver of a store whose configured endpoint does not parse: `new` cannot fail,
//! so every call fails instead, saying why (never the endpoint's text, which may hold a password).

use aws_sdk_dynamodb::config::endpoint::{EndpointFuture, Params, ResolveEndpoint};

/// Refuses every call with the reason the endpoint was refused.
#[derive(Debug)]
pub(super) struct Refused(pub(super) String);

impl ResolveEndpoint for Refused {
    fn resolve_endpoint<'a>(&'a self, _params: &'a Params) -> EndpointFuture<'a> {
        EndpointFuture::ready(Err(self.0.clone().into()))
    }
}

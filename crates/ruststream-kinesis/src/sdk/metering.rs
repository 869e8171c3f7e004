//! Every Kinesis call the broker's client makes, timed: an interceptor of the SDK's, so no call
//! site can forget one. It records the operation (the API's name), how long it took with the
//! SDK's retries, and how it ended: answered, or its error type (the service's error code, as
//! `x-amzn-ErrorType` names it, `timeout`, or `failed`).

use std::time::Instant;

use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::Intercept;
use aws_smithy_runtime_api::client::interceptors::context::{
    BeforeSerializationInterceptorContextRef, FinalizerInterceptorContextRef,
};
use aws_smithy_runtime_api::client::orchestrator::Metadata;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::config_bag::{ConfigBag, Storable, StoreReplace};

use crate::telemetry::Meters;

/// When the call began.
#[derive(Debug, Clone, Copy)]
struct Started(Instant);

impl Storable for Started {
    type Storer = StoreReplace<Self>;
}

/// Times each call of a client into `meters`.
#[derive(Debug, Clone)]
pub(crate) struct Metering {
    meters: Meters,
}

impl Metering {
    /// An interceptor that counts into `meters`.
    pub(crate) fn new(meters: Meters) -> Self {
        Self { meters }
    }
}

impl Intercept for Metering {
    fn name(&self) -> &'static str {
        "ruststream-kinesis metering"
    }

    fn read_before_execution(
        &self,
        _context: &BeforeSerializationInterceptorContextRef<'_>,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        cfg.interceptor_state().store_put(Started(Instant::now()));
        Ok(())
    }

    fn read_after_execution(
        &self,
        context: &FinalizerInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let (Some(started), Some(metadata)) = (cfg.load::<Started>(), cfg.load::<Metadata>())
        else {
            return Ok(());
        };
        let error = match context.output_or_error() {
            None | Some(Ok(_)) => None,
            Some(Err(error)) if error.is_timeout_error() => Some("timeout".to_owned()),
            Some(Err(_)) => Some(error_code(context).unwrap_or_else(|| "failed".to_owned())),
        };
        self.meters
            .operation(metadata.name(), error.as_deref(), started.0.elapsed());
        Ok(())
    }
}

/// The service's error code of the call's answer (`x-amzn-ErrorType`, or the body's `__type`, up
/// to a `:` and after a `#`), when it answered one.
fn error_code(context: &FinalizerInterceptorContextRef<'_>) -> Option<String> {
    let response = context.response()?;
    let said = match response.headers().get("x-amzn-ErrorType") {
        Some(header) => header.to_owned(),
        None => {
            let body = std::str::from_utf8(response.body().bytes()?).ok()?;
            let (_, after) = body.split_once("\"__type\"")?;
            let (_, value) = after.split_once('"')?;
            value.split('"').next()?.to_owned()
        }
    };
    let code = said.split(':').next().unwrap_or(&said).trim();
    let code = code.rsplit('#').next().unwrap_or(code);
    // A bounded set of names: anything else is not one.
    let plain = !code.is_empty()
        && code.len() <= 64
        && code.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.');
    plain.then(|| code.to_owned())
}

//! What a failed SDK call said, for an error message: the error and each of its sources, joined
//! with `": "`. The SDK's own `DisplayErrorContext` appends the error's `Debug` as well (the raw
//! HTTP answer, headers and body), which buries the service's one line in a screenful; a message
//! this crate reports says the line.

/// `err` and its sources, each said once (a source whose text the message already holds adds
/// nothing).
pub(crate) fn described(err: &(dyn std::error::Error + 'static)) -> String {
    let mut said = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !said.contains(&text) {
            said.push_str(": ");
            said.push_str(&text);
        }
        source = cause.source();
    }
    said
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("{text}")]
    struct Layer {
        text: &'static str,
        #[source]
        cause: Option<Box<Layer>>,
    }

    fn chain(texts: &[&'static str]) -> Layer {
        texts
            .iter()
            .rev()
            .fold(None, |cause, text| {
                Some(Layer {
                    text,
                    cause: cause.map(Box::new),
                })
            })
            .expect("at least one layer")
    }

    #[test]
    fn every_source_is_said_once_and_no_debug_is() {
        let err = chain(&[
            "service error",
            "unhandled error (ValidationException)",
            "ValidationException: refused",
        ]);
        assert_eq!(
            described(&err),
            "service error: unhandled error (ValidationException): ValidationException: refused"
        );
        let repeated = chain(&["dispatch failure: timeout", "timeout"]);
        assert_eq!(described(&repeated), "dispatch failure: timeout");
        assert!(!described(&err).contains("Layer"), "no Debug of the error");
    }
}

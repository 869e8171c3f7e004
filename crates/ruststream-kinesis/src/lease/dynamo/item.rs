//! A row's attributes: the values written, and the [`LeaseState`] read back from an item, naming
//! the attribute that is malformed.

use super::*;

pub(super) fn string(value: &str) -> AttributeValue {
    AttributeValue::S(value.to_owned())
}

pub(super) fn number(value: u64) -> AttributeValue {
    AttributeValue::N(value.to_string())
}

/// The [`LeaseState`] a row holds; a message naming the attribute that is malformed.
pub(super) fn state_of(item: &Item) -> Result<LeaseState, String> {
    Ok(LeaseState {
        owner: string_attribute(item, OWNER)?,
        expiry_ms: number_attribute(item, EXPIRY)?.unwrap_or(0),
        counter: number_attribute(item, COUNTER)?.unwrap_or(0),
        checkpoint: string_attribute(item, CHECKPOINT)?,
    })
}

pub(super) fn string_attribute(item: &Item, name: &str) -> Result<Option<String>, String> {
    match item.get(name) {
        None => Ok(None),
        Some(AttributeValue::S(value)) => Ok(Some(value.clone())),
        Some(other) => Err(format!("{name} is {other:?}, not a string")),
    }
}

pub(super) fn number_attribute(item: &Item, name: &str) -> Result<Option<u64>, String> {
    match item.get(name) {
        None => Ok(None),
        Some(AttributeValue::N(value)) => value.parse().map(Some).map_err(|_| {
            format!("{name} is {value:?}, not a whole number of milliseconds or writes")
        }),
        Some(other) => Err(format!("{name} is {other:?}, not a number")),
    }
}

//! A row's attributes: the values written, and the [`LeaseState`] read back from an item, naming
//! the attribute that is malformed.

use super::*;
use crate::lease::{split_within, within_checkpoint};

pub(super) fn string(value: &str) -> AttributeValue {
    AttributeValue::S(value.to_owned())
}

pub(super) fn number(value: u64) -> AttributeValue {
    AttributeValue::N(value.to_string())
}

/// The [`LeaseState`] a row holds; a message naming the attribute that is malformed.
pub(super) fn state_of(item: &Item) -> Result<LeaseState, String> {
    let checkpoint = string_attribute(item, CHECKPOINT)?;
    // A checkpoint inside a KPL aggregate: the KCL's two attributes, one checkpoint here.
    let checkpoint = match (checkpoint, number_attribute(item, CHECKPOINT_SUB_SEQUENCE)?) {
        (Some(sequence), Some(sub)) => Some(within_checkpoint(&sequence, sub)),
        (checkpoint, _) => checkpoint,
    };
    Ok(LeaseState {
        owner: string_attribute(item, OWNER)?,
        expiry_ms: number_attribute(item, EXPIRY)?.unwrap_or(0),
        counter: number_attribute(item, COUNTER)?.unwrap_or(0),
        checkpoint,
    })
}

/// How a checkpoint write sets the row: `checkpoint = :checkpoint`, with the user record's index
/// of a checkpoint inside an aggregate in `checkpoint_sub_sequence` (removed otherwise), and
/// the values it names.
pub(super) fn checkpoint_update(checkpoint: &str) -> (&'static str, &'static str, Item) {
    match split_within(checkpoint) {
        Some((sequence, sub)) => (
            "checkpoint = :checkpoint, checkpoint_sub_sequence = :sub",
            "",
            HashMap::from([
                (":checkpoint".to_owned(), string(sequence)),
                (":sub".to_owned(), number(sub)),
            ]),
        ),
        None => (
            "checkpoint = :checkpoint",
            " REMOVE checkpoint_sub_sequence",
            HashMap::from([(":checkpoint".to_owned(), string(checkpoint))]),
        ),
    }
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

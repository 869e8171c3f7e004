//! A row's attributes: the values written, and the [`LeaseState`] read back from an item, naming
//! the attribute that is malformed.

use super::*;
use crate::lease::{Handoff, split_within, within_checkpoint};

pub(super) fn string(value: &str) -> AttributeValue {
    AttributeValue::S(value.to_owned())
}

pub(super) fn number(value: u64) -> AttributeValue {
    AttributeValue::N(value.to_string())
}

/// The [`LeaseState`] a row holds; a message naming the attribute that is malformed.
pub(super) fn state_of(item: &Item) -> Result<LeaseState, String> {
    let checkpoint = string_attribute(item, CHECKPOINT)?;
    // A checkpoint inside a KPL aggregate: two attributes in the row, one checkpoint here. Only
    // beside a sequence number: a version before this one rewrote `checkpoint` without removing
    // the index, and `SHARD_END` or a recorded start must not read as inside an aggregate.
    let sub = number_attribute(item, CHECKPOINT_SUB_SEQUENCE)?;
    let checkpoint = match (checkpoint, sub) {
        (Some(sequence), Some(sub)) if is_sequence_number(&sequence) => {
            Some(within_checkpoint(&sequence, sub))
        }
        (checkpoint, _) => checkpoint,
    };
    Ok(LeaseState {
        owner: string_attribute(item, OWNER)?,
        expiry_ms: number_attribute(item, EXPIRY)?.unwrap_or(0),
        counter: number_attribute(item, COUNTER)?.unwrap_or(0),
        checkpoint,
        behind_ms: number_attribute(item, CHECKPOINT_BEHIND)?,
        // A request without its time counts as lapsed (and the store's condition lets another
        // replace it); a time that is no number is malformed, as any other attribute.
        handoff: match string_attribute(item, HANDOFF_TO)? {
            Some(to) => Some(Handoff {
                to,
                asked_ms: number_attribute(item, HANDOFF_ASKED)?.unwrap_or(0),
            }),
            None => None,
        },
        commit_token: string_attribute(item, COMMIT_TOKEN)?,
    })
}

/// Whether `text` is a sequence number (digits only).
fn is_sequence_number(text: &str) -> bool {
    !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit())
}

/// How a checkpoint write sets the row: `checkpoint = :checkpoint`, with the user record's index
/// of a checkpoint inside an aggregate in `checkpoint_sub_sequence` and how far behind the reader
/// was in `checkpoint_behind_ms` (each removed when there is none); the `SET` part, the
/// ` REMOVE ...` part (empty when nothing is removed), and the values they name.
pub(super) fn checkpoint_update(
    checkpoint: &str,
    behind_ms: Option<u64>,
) -> (String, String, Item) {
    let mut set = vec!["checkpoint = :checkpoint"];
    let mut remove = Vec::new();
    let mut values = Item::new();
    match split_within(checkpoint) {
        Some((sequence, sub)) => {
            set.push("checkpoint_sub_sequence = :sub");
            values.insert(":checkpoint".to_owned(), string(sequence));
            values.insert(":sub".to_owned(), number(sub));
        }
        None => {
            remove.push(CHECKPOINT_SUB_SEQUENCE);
            values.insert(":checkpoint".to_owned(), string(checkpoint));
        }
    }
    match behind_ms {
        Some(behind) => {
            set.push("checkpoint_behind_ms = :behind");
            values.insert(":behind".to_owned(), number(behind));
        }
        None => remove.push(CHECKPOINT_BEHIND),
    }
    let remove = if remove.is_empty() {
        String::new()
    } else {
        format!(" REMOVE {}", remove.join(", "))
    };
    (set.join(", "), remove, values)
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

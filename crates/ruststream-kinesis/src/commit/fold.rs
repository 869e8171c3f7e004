//! Which settled units one commit takes: the longest run from the head of a shard's queue that
//! fits in one transaction with its lease rows, and never two actions on one item.

use super::{Limits, UnitSize};

/// Whether a unit's writes, with `rows` lease-row updates, fit in one transaction: the check a
/// handler's staging meets, so that a unit never needs more than one request.
pub(crate) fn fits(size: &UnitSize, rows: usize, limits: Limits) -> Result<(), Exceeded> {
    let actions = size.actions.saturating_add(rows);
    if actions > limits.actions {
        return Err(Exceeded::Actions {
            limit: limits.actions.saturating_sub(rows),
            staged: size.actions,
        });
    }
    let bytes = size
        .bytes
        .saturating_add(rows.saturating_mul(Limits::ROW_BYTES));
    if bytes > limits.bytes {
        return Err(Exceeded::Bytes {
            limit: limits
                .bytes
                .saturating_sub(rows.saturating_mul(Limits::ROW_BYTES)),
            staged: size.bytes,
        });
    }
    Ok(())
}

/// Which limit a unit's writes exceed, and by how much.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Exceeded {
    /// More actions than a transaction holds beside the unit's lease rows.
    Actions { limit: usize, staged: usize },
    /// More bytes than a transaction holds beside the unit's lease rows.
    Bytes { limit: usize, staged: usize },
}

/// How many units from the head of `queue` (settled units of one shard, in sequence order) the
/// next commit takes, with `rows` lease-row updates: consecutive units while the actions, the
/// bytes and the items allow; at least the head, which its staging checked fits alone. Order is
/// kept: a unit that does not fit ends the fold, so nothing behind it commits before it.
pub(crate) fn fold<'a>(
    queue: impl IntoIterator<Item = &'a UnitSize>,
    rows: usize,
    limits: Limits,
) -> usize {
    let mut taken: Vec<&UnitSize> = Vec::new();
    let (mut actions, mut bytes) = (rows, rows.saturating_mul(Limits::ROW_BYTES));
    for unit in queue {
        let (more_actions, more_bytes) = (actions + unit.actions, bytes + unit.bytes);
        let fits = more_actions <= limits.actions
            && more_bytes <= limits.bytes
            && !taken.iter().any(|earlier| earlier.clashes_with(unit));
        if !fits && !taken.is_empty() {
            break;
        }
        (actions, bytes) = (more_actions, more_bytes);
        taken.push(unit);
    }
    taken.len()
}

#[cfg(test)]
mod tests;

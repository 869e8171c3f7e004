//! What a cancelled commit means, from DynamoDB's cancellation reasons: one per action of the
//! request, in its order (the units' writes first, then one update per lease row).
//!
//! Nothing of a cancelled transaction is applied. Which part refused decides what follows: a
//! lease row (the lease moved, or an earlier attempt of this very commit landed: the rows tell,
//! [`commit_refused`](crate::lease::rules)), a unit's own condition (the unit goes back to its
//! handler's policy, the units before it commit without it), or contention (sent again).

use super::UnitId;

/// The code of one action's cancellation reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Reason {
    /// The action was not the cause (`None`).
    Passed,
    /// Its condition failed (`ConditionalCheckFailed`).
    ConditionFailed,
    /// Another request on the item was in progress (`TransactionConflict`).
    Conflict,
    /// Throttled (`ThrottlingError`, `ProvisionedThroughputExceeded`,
    /// `RequestLimitExceeded`).
    Throttled,
    /// Anything else: `ValidationError`, `ItemCollectionSizeLimitExceeded`, a code this version
    /// does not know. The action itself is at fault.
    Invalid(String),
}

impl Reason {
    /// The reason DynamoDB's code names (`None` when the reason has no code).
    pub(crate) fn from_code(code: Option<&str>) -> Self {
        match code {
            None | Some("None") => Self::Passed,
            Some("ConditionalCheckFailed") => Self::ConditionFailed,
            Some("TransactionConflict") => Self::Conflict,
            Some("ThrottlingError" | "ProvisionedThroughputExceeded" | "RequestLimitExceeded") => {
                Self::Throttled
            }
            Some(other) => Self::Invalid(other.to_owned()),
        }
    }
}

/// Which action of a request belongs to what: each unit's writes in order, then `rows` updates
/// of lease rows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Layout {
    /// The units whose writes the request holds, each with its number of actions, in order.
    pub(crate) units: Vec<(UnitId, usize)>,
    /// The lease rows' updates, after every unit's writes.
    pub(crate) rows: usize,
}

impl Layout {
    /// What action `index` is: a unit's (and its index among that unit's writes), or a row's.
    fn place(&self, index: usize) -> Option<Place> {
        let mut first = 0;
        for &(unit, actions) in &self.units {
            if index < first + actions {
                return Some(Place::Unit {
                    unit,
                    action: index - first,
                });
            }
            first += actions;
        }
        (index < first + self.rows).then(|| Place::Row(index - first))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    Unit { unit: UnitId, action: usize },
    Row(usize),
}

/// What a cancelled commit means.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// These lease rows (their indexes among the request's rows) refused: the rows they returned
    /// say whether the lease moved or an earlier attempt landed.
    Rows(Vec<usize>),
    /// A unit's own write refused: its action (among the unit's) and the reason's code. The
    /// unit goes back to its handler; the units before it commit without it.
    UserRefused {
        unit: UnitId,
        action: usize,
        code: String,
    },
    /// A lease row's update was invalid (`ValidationError` or worse on our own row): a bug of
    /// this crate's, which no resend mends; the reader stops as with a lost lease.
    RowInvalid { row: usize, code: String },
    /// Nothing refused for good (a conflict, throttling): send it again.
    NotApplied,
}

/// The verdict on a cancelled commit of `layout` whose actions answered `reasons`. A refusing
/// row wins (the lease decides everything else); then the first action at fault (a unit's own
/// write, or an invalid row); then contention. Reasons that name no cause at all (every one `None`, or fewer than the
/// actions) are contention: nothing was applied, and sending again tells more.
pub(crate) fn judge(reasons: &[Reason], layout: &Layout) -> Verdict {
    let placed = || {
        reasons
            .iter()
            .enumerate()
            .filter_map(|(index, reason)| Some((layout.place(index)?, reason)))
    };
    let rows: Vec<usize> = placed()
        .filter_map(|(place, reason)| match (place, reason) {
            (Place::Row(row), Reason::ConditionFailed) => Some(row),
            _ => None,
        })
        .collect();
    if !rows.is_empty() {
        return Verdict::Rows(rows);
    }
    let refused = placed().find_map(|(place, reason)| {
        let code = match reason {
            Reason::ConditionFailed => "ConditionalCheckFailed".to_owned(),
            Reason::Invalid(code) => code.clone(),
            _ => return None,
        };
        Some(match place {
            Place::Unit { unit, action } => Verdict::UserRefused { unit, action, code },
            Place::Row(row) => Verdict::RowInvalid { row, code },
        })
    });
    refused.unwrap_or(Verdict::NotApplied)
}

#[cfg(test)]
mod tests;

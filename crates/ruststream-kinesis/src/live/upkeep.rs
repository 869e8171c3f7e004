//! The calls the coordinator makes besides takes, to keep its view of the table fresh and the
//! table tidy: reading the stream's notice and the rows, deleting rows no reader needs, asking for
//! handoffs, beating, recording its run. None of them fails a subscription, but each that
//! keeps failing turns something off (an IAM policy without `dynamodb:DeleteItem` turns hygiene
//! off for good), so a failure is a WARN once per episode, saying what stops working, an INFO
//! when it works again, and a gauge (`aws_kinesis_coordination_degraded`) that is 1 meanwhile.

use std::collections::HashMap;
use std::fmt::Display;
use std::sync::{Mutex, PoisonError};

use crate::telemetry::Meters;

/// One kind of the coordinator's upkeep calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Upkeep {
    /// The read of the stream's notice row (the handover poll).
    Notice,
    /// The `list` of the stream's rows (a listing round, the handover poll).
    List,
    /// The deletion of a row no reader needs any more (hygiene).
    Delete,
    /// A request for a handoff (balancing).
    AskHandoff,
    /// This instance's beat in the notice.
    Beat,
    /// This run's record under its owner id in the notice.
    Announce,
    /// The marks of a round's requests for handoffs in the notice (balancing by beat).
    MarkAsked,
}

impl Upkeep {
    /// Every kind, for the series that show from the start.
    pub(crate) const ALL: [Self; 7] = [
        Self::Notice,
        Self::List,
        Self::Delete,
        Self::AskHandoff,
        Self::Beat,
        Self::Announce,
        Self::MarkAsked,
    ];

    /// The `LeaseStore` call, as the gauge's `call` label and the log line name it.
    pub(crate) fn call(self) -> &'static str {
        match self {
            Self::Notice => "notice",
            Self::List => "list",
            Self::Delete => "delete",
            Self::AskHandoff => "ask_handoff",
            Self::Beat => "beat",
            Self::Announce => "announce",
            Self::MarkAsked => "mark_asked",
        }
    }

    /// What stops working while the call keeps failing.
    fn stops(self) -> &'static str {
        match self {
            Self::Notice => {
                "the handover poll sees nothing: a released or lapsed lease is found at the next \
                 listing round instead of within a poll, and another instance under this owner id \
                 is not found"
            }
            Self::List => {
                "the rows are read one by one instead of in one call, and a round that cannot read \
                 a row leaves its shard alone"
            }
            Self::Delete => {
                "rows no reader needs any more stay in the table (hygiene is off), which grows with \
                 every resharding; the service's IAM policy needs dynamodb:DeleteItem"
            }
            Self::AskHandoff => {
                "handoffs are not asked for: balancing moves no shard to this instance"
            }
            Self::Beat => {
                "the other instances do not see this one alive: balancing may count it out, and \
                 they read the rows of its shards at every poll; with leases kept alive by beat, \
                 every shard of this instance stops delivering once its last beat that landed \
                 runs out, and the others take them over"
            }
            Self::Announce => {
                "this run is not recorded under its owner id, so another instance running under \
                 the same one is not found"
            }
            Self::MarkAsked => {
                "holders kept alive by beat do not hear of the handoffs this instance asks for: \
                 each request lapses unheard and is asked again a round later, so balancing \
                 moves shards late"
            }
        }
    }
}

/// Which upkeep calls of one subscription are failing now, and how often in a row.
#[derive(Debug, Default)]
pub(crate) struct Upkeeps {
    failing: Mutex<HashMap<Upkeep, u64>>,
}

impl Upkeeps {
    /// Shows every kind's gauge for `stream` at 0: a series that appears only with its first
    /// fault hides it from a look at the scrape.
    pub(crate) fn start(stream: &str, meters: &Meters) -> Self {
        for upkeep in Upkeep::ALL {
            meters.coordination(stream, upkeep.call(), false);
        }
        Self::default()
    }

    /// `what` failed with `err`: the first failure of an episode is a WARN saying what stops
    /// working; the rest are DEBUG.
    pub(crate) fn failed(&self, stream: &str, what: Upkeep, err: &dyn Display, meters: &Meters) {
        let mut failing = self.failing.lock().unwrap_or_else(PoisonError::into_inner);
        let failures = failing.entry(what).or_default();
        *failures += 1;
        if *failures > 1 {
            tracing::debug!(stream, call = what.call(), failures = *failures, error = %err, "lease-table call failed again");
            return;
        }
        meters.coordination(stream, what.call(), true);
        tracing::warn!(
            stream,
            call = what.call(),
            error = %err,
            "lease-table call {} failed; until it works again {} (said once; its recovery is \
             logged)",
            what.call(),
            what.stops()
        );
    }

    /// `what` answered: an episode of failures, if one was on, is over.
    pub(crate) fn worked(&self, stream: &str, what: Upkeep, meters: &Meters) {
        let mut failing = self.failing.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(failures) = failing.remove(&what) else {
            return;
        };
        meters.coordination(stream, what.call(), false);
        tracing::info!(
            stream,
            call = what.call(),
            failures,
            "lease-table call {} works again after {failures} failure(s) in a row",
            what.call()
        );
    }

    /// How `what` answered: [`worked`](Self::worked) or [`failed`](Self::failed).
    pub(crate) fn answered<T, E: Display>(
        &self,
        stream: &str,
        what: Upkeep,
        answer: &Result<T, E>,
        meters: &Meters,
    ) {
        match answer {
            Ok(_) => self.worked(stream, what, meters),
            Err(err) => self.failed(stream, what, err, meters),
        }
    }
}

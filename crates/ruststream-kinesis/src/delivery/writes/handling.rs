//! Exactly once in process (`TestApp`): the view of each handling, what it staged and how it
//! ended ([`InProcessCommits::handlings`](crate::InProcessCommits::handlings)). Outside
//! `TestApp` a [`Handling`] records nothing.

use super::HandlingOutcome;

/// A handling's entry in the in-process view, which its ending updates; outside `TestApp`,
/// nothing.
#[derive(Debug, Clone, Default)]
pub(crate) struct Handling {
    #[cfg(feature = "testing")]
    pub(crate) entry: Option<crate::lease::HandlingEntry>,
}

impl Handling {
    /// The handling ended with `outcome`.
    pub(crate) fn ended(&self, outcome: HandlingOutcome) {
        #[cfg(feature = "testing")]
        if let Some(entry) = &self.entry {
            entry.ended(outcome);
        }
        #[cfg(not(feature = "testing"))]
        drop(outcome);
    }
}

//! An instance paused because an earlier run under its owner id is alive
//! ([`twins`](crate::coordinator::twins)): shared by every subscription of a broker, since the
//! owner id is the instance's. A subscription that finds the earlier run pauses the instance,
//! and resumes it once that run is gone; while any subscription holds it paused, every one of
//! them stops its readers and takes nothing.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::watch;

use crate::coordinator::twins::Twin;

/// Which subscriptions (by stream) hold the instance paused, the runs the last one found, and a
/// signal each coordinator waits on.
#[derive(Debug)]
pub(crate) struct Pause {
    by: Mutex<(BTreeSet<Arc<str>>, Option<Twin>)>,
    paused: watch::Sender<bool>,
}

impl Default for Pause {
    fn default() -> Self {
        Self {
            by: Mutex::default(),
            paused: watch::Sender::new(false),
        }
    }
}

impl Pause {
    /// Whether the instance is paused.
    pub(crate) fn is_paused(&self) -> bool {
        *self.paused.borrow()
    }

    /// The two runs the last pause was for: this one, and the earlier one alive.
    pub(crate) fn twin(&self) -> Option<Twin> {
        self.by.lock().unwrap_or_else(PoisonError::into_inner).1
    }

    /// The subscription of `stream` holds the instance paused for `twin` (`Some`), or no longer
    /// does (`None`).
    pub(crate) fn hold(&self, stream: &Arc<str>, twin: Option<Twin>) {
        let mut guard = self.by.lock().unwrap_or_else(PoisonError::into_inner);
        let (by, last) = &mut *guard;
        match twin {
            Some(twin) => {
                by.insert(Arc::clone(stream));
                *last = Some(twin);
            }
            None => {
                by.remove(stream);
            }
        }
        let now = !by.is_empty();
        self.paused
            .send_if_modified(|was| std::mem::replace(was, now) != now);
    }

    /// A receiver whose `changed()` fires when the instance pauses or resumes.
    pub(crate) fn watch(&self) -> watch::Receiver<bool> {
        self.paused.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coordinator::twins::Incarnation;

    #[test]
    fn the_instance_stays_paused_while_any_subscription_holds_it() {
        let pause = Pause::default();
        let mut changes = pause.watch();
        let (orders, refunds) = (Arc::from("orders"), Arc::from("refunds"));
        let twin = Twin {
            mine: Incarnation::new(2, 2),
            theirs: Incarnation::new(1, 1),
        };
        pause.hold(&orders, Some(twin));
        pause.hold(&refunds, Some(twin));
        assert_eq!(pause.twin(), Some(twin));
        assert!(pause.is_paused());
        assert!(changes.has_changed().unwrap());
        changes.mark_unchanged();
        pause.hold(&orders, None);
        assert!(pause.is_paused(), "refunds still holds it");
        assert!(!changes.has_changed().unwrap(), "no change to signal");
        pause.hold(&refunds, None);
        assert!(!pause.is_paused());
        assert!(changes.has_changed().unwrap());
    }
}

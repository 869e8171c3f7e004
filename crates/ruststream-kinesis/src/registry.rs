//! Which streams a connected broker subscribes to: one subscription per stream, and a new one
//! waits for the previous one's readers to hand their shards back.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio_util::task::TaskTracker;

use crate::KinesisError;

/// How long a new subscription to a stream waits for the previous one's tasks before it warns
/// (it waits on until they end).
const PREVIOUS_SUBSCRIPTION_WARN_AFTER: Duration = Duration::from_secs(10);

/// What a broker knows of a stream it subscribed to.
#[derive(Debug)]
enum StreamSlot {
    /// A subscription reads it.
    Open,
    /// Its subscription was dropped and its readers are writing their final checkpoints and
    /// releasing; a new subscription waits for them, or it would take a lease they then release.
    Closing(Option<TaskTracker>),
}

/// The streams of one connected broker.
#[derive(Debug, Default)]
pub(crate) struct Registry {
    streams: Arc<Mutex<HashMap<String, StreamSlot>>>,
}

impl Registry {
    /// Holds `name` for a new subscription: refused while another subscription reads it, and
    /// once the previous one's readers have handed their shards back.
    pub(crate) async fn register(&self, name: &str) -> Result<StreamRegistration, KinesisError> {
        let draining = {
            let mut streams = self.streams.lock().unwrap_or_else(PoisonError::into_inner);
            match streams.insert(name.to_owned(), StreamSlot::Open) {
                Some(StreamSlot::Open) => {
                    return Err(KinesisError::DuplicateSubscription {
                        stream: name.to_owned(),
                    });
                }
                Some(StreamSlot::Closing(tasks)) => tasks,
                None => None,
            }
        };
        let registration = StreamRegistration {
            streams: Arc::clone(&self.streams),
            name: name.to_owned(),
            tasks: None,
        };
        if let Some(tasks) = draining
            && tokio::time::timeout(PREVIOUS_SUBSCRIPTION_WARN_AFTER, tasks.wait())
                .await
                .is_err()
        {
            // Opening anyway would take, under the same owner id, leases whose release or last
            // writes are still on their way: wait for them, however slow the store is.
            tracing::warn!(
                stream = name,
                "the previous subscription did not finish within {PREVIOUS_SUBSCRIPTION_WARN_AFTER:?}; still waiting"
            );
            tasks.wait().await;
        }
        Ok(registration)
    }
}

/// Holds a stream's name on its broker while a subscription reads it.
#[derive(Debug)]
pub(crate) struct StreamRegistration {
    streams: Arc<Mutex<HashMap<String, StreamSlot>>>,
    name: String,
    tasks: Option<TaskTracker>,
}

impl StreamRegistration {
    /// The subscription's tasks, which a later subscription to the stream waits for.
    pub(crate) fn closes_with(&mut self, tasks: TaskTracker) {
        self.tasks = Some(tasks);
    }
}

impl Drop for StreamRegistration {
    fn drop(&mut self) {
        let closing = self.tasks.take();
        if let Some(tasks) = &closing {
            tasks.close();
        }
        self.streams
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(self.name.clone(), StreamSlot::Closing(closing));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Opening a subscription while the previous one's readers still write their final
    /// checkpoints and releases would take, under the same owner id, leases whose last writes
    /// are on their way, which the store's conditions cannot tell apart. The wait has no bound
    /// (it used to end after 10 s; a store timeout or three are longer).
    #[tokio::test(start_paused = true)]
    async fn a_new_subscription_waits_for_the_previous_ones_tasks_however_long_they_take() {
        let registry = Registry::default();
        let mut first = registry.register("orders").await.expect("nothing reads it");
        assert!(matches!(
            registry.register("orders").await,
            Err(KinesisError::DuplicateSubscription { stream }) if stream == "orders"
        ));
        let tasks = TaskTracker::new();
        let (finish, finished) = tokio::sync::oneshot::channel::<()>();
        tasks.spawn(async move {
            let _ = finished.await;
        });
        first.closes_with(tasks);
        drop(first);
        let second = tokio::spawn(async move { registry.register("orders").await.is_ok() });
        tokio::time::sleep(PREVIOUS_SUBSCRIPTION_WARN_AFTER * 6).await;
        assert!(
            !second.is_finished(),
            "the new subscription opened while the previous one's tasks ran"
        );
        finish.send(()).expect("the task waits");
        assert!(second.await.expect("the task ends"), "then it opens");
    }
}

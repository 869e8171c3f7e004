//! Per-shard figures an observable gauge reads at each collection. The SDK reports an observable
//! gauge's series only as observed at the last collection, so a shard this instance stops reading
//! leaves the gauge with its reader; a synchronous gauge would report its last value for as long
//! as the process lives, and a dashboard would show the lag of a shard read elsewhere for good.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use opentelemetry::metrics::{AsyncInstrument, ObservableGauge};

/// The figure of each shard, by stream and shard.
type Values<T> = Arc<Mutex<HashMap<String, HashMap<String, T>>>>;

/// What a gauge's callback observes.
pub(super) type Callback<T> = Box<dyn Fn(&dyn AsyncInstrument<T>) + Send + Sync>;

/// A gauge of the shards this instance reads.
pub(super) struct Observed<T> {
    values: Values<T>,
    /// Kept so the instrument lives as long as the figures it reports.
    _gauge: ObservableGauge<T>,
}

impl<T: Copy + Send + 'static> Observed<T> {
    /// A gauge `build` makes with the callback that reports every shard's figure.
    pub(super) fn new(build: impl FnOnce(Callback<T>) -> ObservableGauge<T>) -> Self {
        let values: Values<T> = Arc::default();
        // The meter provider keeps the callback for its own life, past this gauge's: once the
        // gauge is dropped (its broker gone) the callback observes nothing and holds no figure.
        let read = Arc::downgrade(&values);
        let gauge = build(Box::new(move |observer| {
            let Some(values) = read.upgrade() else {
                return;
            };
            let values = values.lock().unwrap_or_else(PoisonError::into_inner);
            for (stream, shards) in values.iter() {
                for (shard_id, value) in shards {
                    observer.observe(*value, &super::shard(stream, shard_id));
                }
            }
        }));
        Self {
            values,
            _gauge: gauge,
        }
    }

    /// The figure of `shard_id` of `stream` is now `value`.
    pub(super) fn set(&self, stream: &str, shard_id: &str, value: T) {
        let mut values = self.values.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(slot) = values
            .get_mut(stream)
            .and_then(|shards| shards.get_mut(shard_id))
        {
            *slot = value;
            return;
        }
        values
            .entry(stream.to_owned())
            .or_default()
            .insert(shard_id.to_owned(), value);
    }

    /// `shard_id` of `stream` is no longer read here: the gauge stops reporting it.
    pub(super) fn forget(&self, stream: &str, shard_id: &str) {
        let mut values = self.values.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(shards) = values.get_mut(stream) {
            shards.remove(shard_id);
            if shards.is_empty() {
                values.remove(stream);
            }
        }
    }
}

//! Reads a little behind the latest writes: DynamoDB's eventually consistent reads, which the
//! crate makes where the caller says a view behind will do (`LeaseStore::list_eventually`,
//! `notice_eventually`, `notice_head`). Such a read may miss any write applied within the
//! schedule's lag (`Config::read_lag`) before it, each item on its own (a Scan's rows and a
//! notice's rows come from replicas that need not agree), and two reads may go back and forth
//! between older and newer versions. The store keeps each item's versions for as long as a read
//! may still see them.

use std::collections::VecDeque;

use super::*;

/// The versions of the rows and of the notice that a read behind may still answer.
#[derive(Default)]
pub(super) struct Versions {
    /// Per shard: from when each version of its row stood (the first one from the row's
    /// first write; a row never written reads as none).
    rows: HashMap<usize, VecDeque<(Time, Option<LeaseState>)>>,
    /// From when each version of the notice stood.
    notice: VecDeque<(Time, Notice)>,
}

/// Drops the versions no read can see any more: those that a later one replaced before
/// `horizon` (the oldest moment a read may answer as of).
fn prune<V>(versions: &mut VecDeque<(Time, V)>, horizon: Time) {
    while versions.len() > 1 && versions.get(1).is_some_and(|(from, _)| *from <= horizon) {
        versions.pop_front();
    }
}

/// The version that stood at `at`: the latest one from before it, or the oldest kept.
fn as_of<V: Clone>(versions: &VecDeque<(Time, V)>, at: Time) -> Option<V> {
    versions
        .iter()
        .rev()
        .find(|(from, _)| *from <= at)
        .or_else(|| versions.front())
        .map(|(_, version)| version.clone())
}

impl Sim {
    /// `op` was applied now: keeps the versions of the rows it names and of the notice that
    /// changed, for reads behind, in schedules that make them.
    pub(super) fn note_versions(&mut self, op: &Op) {
        if self.cfg.read_lag.is_zero() {
            return;
        }
        let (now, horizon) = (self.now, self.now.saturating_sub(self.cfg.read_lag));
        let shards: Vec<usize> = match &op.kind {
            OpKind::Joint { rows, .. } => rows.iter().map(|row| row.shard).collect(),
            _ => vec![op.shard],
        };
        for shard in shards.into_iter().filter(|&shard| shard < self.rows.len()) {
            let state = &self.rows[shard].state;
            // Before its first write a row is none: a read behind may miss its creation.
            let versions = self
                .versions
                .rows
                .entry(shard)
                .or_insert_with(|| VecDeque::from([(Time::ZERO, None)]));
            if versions.back().is_none_or(|(_, last)| last != state) {
                versions.push_back((now, state.clone()));
            }
            prune(versions, horizon);
        }
        let versions = &mut self.versions.notice;
        if versions.is_empty() {
            versions.push_back((Time::ZERO, Notice::default()));
        }
        if versions.back().is_none_or(|(_, last)| *last != self.notice) {
            versions.push_back((now, self.notice.clone()));
        }
        prune(versions, horizon);
    }

    /// How far behind the latest writes a read of one item answers: anywhere within the lag.
    fn lag(&mut self) -> Duration {
        let lag_ms = millis(self.cfg.read_lag);
        ms(self.behind.random_range(0..=lag_ms))
    }

    /// The row of `shard` as a read behind answers it now.
    pub(super) fn row_behind(&mut self, shard: usize) -> Option<LeaseState> {
        if self.cfg.read_lag.is_zero() {
            return self.rows[shard].state.clone();
        }
        let at = self.now.saturating_sub(self.lag());
        match self.versions.rows.get(&shard) {
            Some(versions) => as_of(versions, at).flatten(),
            None => self.rows[shard].state.clone(),
        }
    }

    /// The notice as a read behind answers it now. Kept apart (`Config::notice_apart`), its
    /// head, its runs' records and each group's beats (`lease::beat_group`) are items of their
    /// own, each read as of its own moment.
    pub(super) fn notice_behind(&mut self) -> Notice {
        if self.cfg.read_lag.is_zero() {
            return self.notice.clone();
        }
        let as_of_lag = |sim: &mut Self| {
            let at = sim.now.saturating_sub(sim.lag());
            as_of(&sim.versions.notice, at).unwrap_or_else(|| sim.notice.clone())
        };
        let head = as_of_lag(self);
        if !self.cfg.notice_apart {
            return head;
        }
        let runs = as_of_lag(self);
        let mut beats = BTreeMap::new();
        for group in 0..crate::lease::BEAT_GROUPS {
            let read = as_of_lag(self);
            beats.extend(
                read.beats
                    .into_iter()
                    .filter(|(owner, _)| crate::lease::beat_group(owner) == group),
            );
        }
        Notice {
            beats,
            incarnations: runs.incarnations,
            ..head
        }
    }
}

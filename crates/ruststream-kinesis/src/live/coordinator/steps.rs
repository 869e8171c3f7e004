//! The calls of each step [`Rounds`] asks of `drive`, made for a subscription, and their answers
//! handed back to the machines: what `drive` executes, one method per step.

use std::sync::Arc;

use futures::future::join_all;

use crate::KinesisError;
use crate::clock::Instant;
use crate::coordinator::balance::Ask;
use crate::coordinator::hygiene::Deletion;
use crate::coordinator::rounds::{Listed, NoticeRead, Shards};
use crate::coordinator::watch::Beat;
use crate::lease::{LeaseKey, epoch_millis};
use crate::live::coordinator::machines::Machines;
use crate::live::subscription::Subscription;
use crate::live::upkeep::Upkeep;

impl Subscription {
    /// `ListShards`: the listing, or what failed. A failure of the first round's listing is the
    /// subscription's (`first`): a stream that cannot be listed fails `subscribe`; later ones
    /// are reported.
    pub(super) async fn list_shards(
        &self,
        machines: &mut Machines,
        first: bool,
    ) -> Result<(), KinesisError> {
        let (shards, failure) = match self.kinesis.list_shards(&self.stream).await {
            Ok(listing) => {
                self.tell_closed(&listing);
                (Shards::Listed(listing), None)
            }
            Err(err) if matches!(err, KinesisError::StreamNotFound { .. }) => {
                (Shards::StreamNotFound, Some(err))
            }
            Err(err) => (Shards::Failed, Some(err)),
        };
        let (rounds, coordinator) = machines.both(self);
        rounds.listed(coordinator, shards, Instant::now());
        match failure {
            Some(err) if first => return Err(err),
            Some(err) => self.report(err),
            None => {}
        }
        Ok(())
    }

    /// A `list` of the stream's rows.
    pub(super) async fn list_rows(&self, machines: &mut Machines, eventual: bool) {
        let answer = if eventual {
            self.store.list_eventually(&self.stream).await
        } else {
            self.store.list(&self.stream).await
        };
        self.upkeep(Upkeep::List, &answer);
        let listed = match answer {
            Ok(Some(rows)) => Listed::Rows(
                rows.into_iter()
                    .map(|(key, row)| (Arc::from(key.shard()), row))
                    .collect(),
            ),
            Ok(None) => Listed::Unsupported,
            // Reading row by row reports what is wrong, naming each shard.
            Err(_) => Listed::Failed,
        };
        let (rounds, coordinator) = machines.both(self);
        rounds.rows_listed(
            coordinator,
            listed,
            &self.owner,
            Instant::now(),
            epoch_millis(),
        );
    }

    /// A read of each row `wanted`, in parallel.
    pub(super) async fn read_rows(&self, machines: &mut Machines, wanted: &[Arc<str>]) {
        let (rows, unreadable) = self.read_each(wanted).await;
        let (rounds, coordinator) = machines.both(self);
        rounds.rows_read(
            coordinator,
            rows,
            &unreadable,
            &self.owner,
            Instant::now(),
            epoch_millis(),
        );
    }

    /// The deletions of rows no reader needs any more, in parallel.
    pub(super) async fn delete_rows(&self, machines: &mut Machines, deletions: &[Deletion]) {
        let answers = join_all(deletions.iter().map(|deletion| async move {
            let key = LeaseKey::new(Arc::clone(&self.stream), Arc::clone(&deletion.shard));
            let answer = self.store.delete(&key, deletion.counter).await;
            (deletion, answer)
        }))
        .await;
        let coordinator = machines.coordinator(self);
        for (deletion, answer) in answers {
            self.upkeep(Upkeep::Delete, &answer);
            let deleted = answer.unwrap_or(false);
            if deleted {
                tracing::debug!(stream = %self.stream, shard = %deletion.shard, "deleted the row of a shard no reader needs any more");
            }
            coordinator.deletion_answered(&deletion.shard, deleted);
        }
        machines.rounds().deleted(Instant::now());
    }

    /// A read of the stream's notice: `whole` (`consistent`, or a little behind the latest
    /// writes), or its head alone (a store that keeps the head apart,
    /// `LeaseStore::keeps_notice_head_apart`).
    pub(super) async fn read_notice(&self, machines: &mut Machines, whole: bool, consistent: bool) {
        let answer = if whole && consistent {
            self.store.notice(&self.stream).await
        } else if whole {
            self.store.notice_eventually(&self.stream).await
        } else {
            self.store.notice_head(&self.stream).await
        };
        self.upkeep(Upkeep::Notice, &answer);
        let read = match answer {
            Ok(Some(notice)) if whole => NoticeRead::Notice(notice),
            Ok(Some(head)) => NoticeRead::Head(head),
            Ok(None) => NoticeRead::Unsupported,
            Err(_) => NoticeRead::Failed,
        };
        let (rounds, coordinator) = machines.both(self);
        rounds.notice_read(
            coordinator,
            read,
            &self.owner,
            Instant::now(),
            epoch_millis(),
        );
    }

    /// This instance's beat in the notice.
    pub(super) async fn write_beat(&self, machines: &mut Machines, beat: &Beat) {
        let answer = self
            .store
            .beat(&self.stream, &self.owner, beat.until_ms, &beat.forget)
            .await;
        self.upkeep(Upkeep::Beat, &answer);
        let (rounds, coordinator) = machines.both(self);
        rounds.beaten(coordinator, &self.owner, answer.is_ok());
    }

    /// This run's record under its owner id in the notice.
    pub(super) async fn announce(&self, machines: &mut Machines, record: &str, forget: &[String]) {
        let answer = self
            .store
            .announce(&self.stream, &self.owner, record, forget)
            .await;
        self.upkeep(Upkeep::Announce, &answer);
        let (rounds, coordinator) = machines.both(self);
        rounds.announced(coordinator, answer.is_ok(), epoch_millis());
    }

    /// The requests for handoffs, in parallel.
    pub(super) async fn ask_handoffs(&self, machines: &mut Machines, asks: &[Ask]) {
        let answers = join_all(asks.iter().map(|ask| async move {
            let key = LeaseKey::new(Arc::clone(&self.stream), Arc::clone(&ask.shard));
            let asked_ms = epoch_millis();
            let answer = self
                .store
                .ask_handoff(&key, &ask.holder, ask.counter, &self.owner, asked_ms)
                .await;
            (ask, key, asked_ms, answer)
        }))
        .await;
        let (rounds, coordinator) = machines.both(self);
        for (ask, key, asked_ms, answer) in answers {
            self.upkeep(Upkeep::AskHandoff, &answer);
            match answer {
                Ok(true) => {
                    tracing::debug!(lease = %key, holder = %ask.holder, "asked for a handoff");
                    coordinator.requested(&ask.shard, &ask.holder, asked_ms);
                }
                Ok(false) => {}
                // Unanswered: it may have landed all the same, and been handed over on.
                Err(_) => coordinator.ask_unanswered(asked_ms),
            }
        }
        rounds.asked(coordinator, Instant::now());
    }

    /// The marks of a round's requests for handoffs (by beat), in one write.
    pub(super) async fn mark_asked(&self, machines: &mut Machines, holders: &[String]) {
        let answer = self.store.mark_asked(&self.stream, holders).await;
        self.upkeep(Upkeep::MarkAsked, &answer);
        let (rounds, coordinator) = machines.both(self);
        rounds.marked(coordinator, Instant::now());
    }
}

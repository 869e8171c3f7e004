//! The calls of each step [`Rounds`] asks of `drive`, made for a subscription, and their answers
//! handed back to the machines: what `drive` executes, one method per step.

use std::sync::Arc;

use futures::future::join_all;

use crate::KinesisError;
use crate::clock::Instant;
use crate::coordinator::balance::Ask;
use crate::coordinator::hygiene::Deletion;
use crate::coordinator::plan::TakeFor;
use crate::coordinator::rounds::{Listed, NoticeRead, Rounds, Shards};
use crate::coordinator::watch::Beat;
use crate::kinesis::api::ShardInfo;
use crate::lease::{LeaseKey, epoch_millis};
use crate::live::subscription::Subscription;
use crate::live::upkeep::Upkeep;

impl Subscription {
    /// `ListShards`: the listing, or what failed. A failure of the first round's listing is the
    /// subscription's (`first`): a stream that cannot be listed fails `subscribe`; later ones
    /// are reported.
    pub(super) async fn list_shards(
        &self,
        rounds: &mut Rounds<Instant>,
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
        rounds.listed(&mut self.coordinator(), shards, Instant::now());
        match failure {
            Some(err) if first => return Err(err),
            Some(err) => self.report(err),
            None => {}
        }
        Ok(())
    }

    /// A `list` of the stream's rows.
    pub(super) async fn list_rows(&self, rounds: &mut Rounds<Instant>) {
        let answer = self.store.list(&self.stream).await;
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
        rounds.rows_listed(
            &mut self.coordinator(),
            listed,
            &self.owner,
            Instant::now(),
            epoch_millis(),
        );
    }

    /// A read of each row `wanted`, in parallel.
    pub(super) async fn read_rows(&self, rounds: &mut Rounds<Instant>, wanted: &[Arc<str>]) {
        let (rows, unreadable) = self.read_each(wanted).await;
        rounds.rows_read(
            &mut self.coordinator(),
            rows,
            &unreadable,
            &self.owner,
            Instant::now(),
            epoch_millis(),
        );
    }

    /// The deletions of rows no reader needs any more, in parallel.
    pub(super) async fn delete_rows(&self, rounds: &mut Rounds<Instant>, deletions: &[Deletion]) {
        let answers = join_all(deletions.iter().map(|deletion| async move {
            let key = LeaseKey::new(Arc::clone(&self.stream), Arc::clone(&deletion.shard));
            let answer = self.store.delete(&key, deletion.counter).await;
            (deletion, answer)
        }))
        .await;
        let mut coordinator = self.coordinator();
        for (deletion, answer) in answers {
            self.upkeep(Upkeep::Delete, &answer);
            let deleted = answer.unwrap_or(false);
            if deleted {
                tracing::debug!(stream = %self.stream, shard = %deletion.shard, "deleted the row of a shard no reader needs any more");
            }
            coordinator.deletion_answered(&deletion.shard, deleted);
        }
        drop(coordinator);
        rounds.deleted(Instant::now());
    }

    /// A read of the stream's notice.
    pub(super) async fn read_notice(&self, rounds: &mut Rounds<Instant>) {
        let answer = self.store.notice(&self.stream).await;
        self.upkeep(Upkeep::Notice, &answer);
        let read = match answer {
            Ok(Some(notice)) => NoticeRead::Notice(notice),
            Ok(None) => NoticeRead::Unsupported,
            Err(_) => NoticeRead::Failed,
        };
        rounds.notice_read(
            &mut self.coordinator(),
            read,
            &self.owner,
            Instant::now(),
            epoch_millis(),
        );
    }

    /// This instance's beat in the notice.
    pub(super) async fn write_beat(&self, rounds: &mut Rounds<Instant>, beat: &Beat) {
        let answer = self
            .store
            .beat(&self.stream, &self.owner, beat.until_ms, &beat.forget)
            .await;
        self.upkeep(Upkeep::Beat, &answer);
        rounds.beaten();
    }

    /// This run's record under its owner id in the notice.
    pub(super) async fn announce(
        &self,
        rounds: &mut Rounds<Instant>,
        record: &str,
        forget: &[String],
    ) {
        let answer = self
            .store
            .announce(&self.stream, &self.owner, record, forget)
            .await;
        self.upkeep(Upkeep::Announce, &answer);
        rounds.announced(&mut self.coordinator(), answer.is_ok(), epoch_millis());
    }

    /// The requests for handoffs, in parallel.
    pub(super) async fn ask_handoffs(&self, rounds: &mut Rounds<Instant>, asks: &[Ask]) {
        join_all(asks.iter().map(|ask| async move {
            let key = LeaseKey::new(Arc::clone(&self.stream), Arc::clone(&ask.shard));
            let asked_ms = epoch_millis();
            let answer = self
                .store
                .ask_handoff(&key, &ask.holder, ask.counter, &self.owner, asked_ms)
                .await;
            self.upkeep(Upkeep::AskHandoff, &answer);
            if let Ok(true) = answer {
                tracing::debug!(lease = %key, holder = %ask.holder, "asked for a handoff");
                self.coordinator().requested(&ask.shard, asked_ms);
            }
        }))
        .await;
        rounds.asked(&mut self.coordinator(), Instant::now());
    }

    /// The takes of a pass, in parallel.
    pub(super) async fn take_all(
        self: &Arc<Self>,
        rounds: &mut Rounds<Instant>,
        takes: Vec<(ShardInfo, TakeFor)>,
    ) {
        join_all(takes.into_iter().map(|(shard, purpose)| {
            // A span per take: its calls' events and failures carry the shard.
            let span = tracing::info_span!(
                "lease_take",
                stream = %self.stream,
                shard = %shard.id,
                owner = %self.owner
            );
            tracing::Instrument::instrument(async move { self.take(&shard, purpose).await }, span)
        }))
        .await;
        rounds.took(&mut self.coordinator(), Instant::now());
    }
}

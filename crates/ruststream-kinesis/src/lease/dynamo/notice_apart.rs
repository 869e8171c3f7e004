//! The stream's notice kept apart ([`NOTICE_LAYOUT_APART`]): its head (`<stream>#notice`: the
//! counter, the marks, the layout), its beats in rows of eight groups
//! (`<stream>#beats<group>#notice`, `crate::lease::beat_group`) and its runs' records
//! (`<stream>#runs#notice`). The handover poll reads the head alone while the beats it
//! last read say who is alive (`coordinator/notice_reads.rs`), and a beat rewrites its
//! group's row alone. The writes to each row are `notice.rs`'s, on the row that holds what
//! they write.

use super::notice::{NOTICE_LAYOUT_ATTRIBUTE, condition_refused};
use super::*;
use crate::NOTICE_LAYOUT_APART;
use crate::lease::{BEAT_GROUPS, beats_key, notice_key, runs_key};

impl DynamoLeaseStore {
    /// `GetItem`s of the notice's rows, read as `reading` says and sent together: the head, the
    /// runs' records and
    /// the beats' row of each group (each billed on its own, a read unit per 4 KB, at least one;
    /// the permission they need is the `dynamodb:GetItem` every store needs), as one notice:
    /// the head's counter and marks, its layout as [`Self::whole_layout`] tells it, the beats of
    /// the beats' rows and of the head (a one-row layout's leftovers), the runs' records of
    /// both. Any read failing fails the whole read: the next poll reads again, and a
    /// subscription that opens refuses to.
    pub(super) async fn read_notice_apart(
        &self,
        stream: &str,
        reading: Reading,
    ) -> Result<Notice, LeaseError> {
        self.read_notice_apart_after(stream, None, reading).await
    }

    /// [`read_notice_apart`](Self::read_notice_apart), the head taken as `head` where the
    /// caller read it already (a one-row store's read of a head that says layout 2, sent at
    /// the time it carries), so that it is not read twice.
    pub(super) async fn read_notice_apart_after(
        &self,
        stream: &str,
        head: Option<((Instant, u64), Notice)>,
        reading: Reading,
    ) -> Result<Notice, LeaseError> {
        let key = LeaseKey::new(stream, "*");
        let part = |item: Option<Item>| -> Result<Notice, LeaseError> {
            item.map_or_else(
                || Ok(Notice::default()),
                |item| self.notice_from_item(&key, &item),
            )
        };
        let head = async {
            match head {
                Some(read) => Ok(read),
                None => {
                    let sent = (Instant::now(), epoch_millis());
                    let item = self
                        .get_read(&key, notice_key(stream), "notice", reading)
                        .await?;
                    Ok((sent, part(item)?))
                }
            }
        };
        let groups = futures::future::try_join_all(
            (0..BEAT_GROUPS)
                .map(|group| self.get_read(&key, beats_key(stream, group), "notice", reading)),
        );
        let runs = self.get_read(&key, runs_key(stream), "notice", reading);
        let ((sent, head), runs, groups) = tokio::try_join!(head, runs, groups)?;
        let runs = part(runs)?;
        self.head_says(stream, sent, head.layout);
        let mut beats = Notice::default();
        for group in groups {
            beats.beats.extend(part(group)?.beats);
        }
        let now_ms = epoch_millis();
        let mixed = head.any_alive(now_ms) && beats.any_alive(now_ms);
        if self.marks().mixed_news(stream, mixed) {
            tracing::warn!(
                table = %self.table,
                stream,
                "beats run both in the stream's notice row and in its beats' rows: instances that \
                 keep the notice in one row and instances that keep its head apart \
                 (`DynamoLeaseStore::keep_notice_head_apart`) run on it at once; run one layout"
            );
        }
        let mut notice = Notice {
            layout: Self::whole_layout(&head, &beats, now_ms),
            counter: head.counter,
            asks: head.asks,
            beats: head.beats,
            incarnations: head.incarnations,
        };
        for (owner, until) in beats.beats {
            let beat = notice.beats.entry(owner).or_insert(until);
            *beat = (*beat).max(until);
        }
        notice.incarnations.extend(runs.incarnations);
        Ok(notice)
    }

    /// The layout a notice kept apart says at `now_ms`, read whole: the one-row layout while a
    /// beat in the head runs ([`Notice::head_layout`]); layout 2 only while a beat in the beats'
    /// row runs, since nothing removes the layout once written, and a fleet of it that stopped
    /// must not refuse a one-row fleet that follows; any other layout written, as written.
    fn whole_layout(head: &Notice, beats: &Notice, now_ms: u64) -> Option<u64> {
        match head.head_layout(now_ms) {
            Some(NOTICE_LAYOUT_APART) if !beats.any_alive(now_ms) => None,
            layout => layout,
        }
    }

    /// One `GetItem` of the notice's head: its counter, marks and layout, the beats and runs'
    /// records left out; eventually consistent (half a read unit) where the store was asked to
    /// (`eventually_consistent_polls`). Only the poll reads it, and a head a moment behind only
    /// tells it of a change a moment later; what a take decides on is read whole and
    /// consistent.
    pub(super) async fn read_notice_head(&self, stream: &str) -> Result<Notice, LeaseError> {
        let sent = (Instant::now(), epoch_millis());
        let head = self.read_notice(stream, self.poll_reading()).await?;
        self.head_says(stream, sent, head.layout);
        Ok(Self::head_alone(head))
    }

    /// The head's part of `head`, read from the head's row: its layout as
    /// [`Notice::head_layout`] tells it by this clock.
    fn head_alone(head: Notice) -> Notice {
        Notice {
            layout: head.head_layout(epoch_millis()),
            counter: head.counter,
            asks: head.asks,
            ..Notice::default()
        }
    }

    /// Writes this layout in `stream`'s notice head, unless the head names another already
    /// (written meanwhile by an instance of another layout): then nothing changes, and the call
    /// is refused, naming both layouts.
    pub(super) async fn write_layout(&self, stream: &str) -> Result<(), LeaseError> {
        let key = LeaseKey::new(stream, "*");
        let sent_at = (Instant::now(), epoch_millis());
        self.layout_writes
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let sent = self
            .client
            .update_item()
            .table_name(self.table())
            .key(KEY, string(&notice_key(stream)))
            .update_expression("SET #layout = :mine")
            .condition_expression("attribute_not_exists(#layout) OR #layout = :mine")
            .expression_attribute_names("#layout", NOTICE_LAYOUT_ATTRIBUTE)
            .expression_attribute_values(":mine", number(NOTICE_LAYOUT_APART))
            .send()
            .await;
        match sent {
            Ok(_) => {
                self.marks().noted(stream, sent_at, true, true);
                Ok(())
            }
            Err(error) if condition_refused(&error) => Err(LeaseError::Store {
                key,
                operation: "keep_layout",
                message: format!(
                    "the notice row {:?} names another layout than {NOTICE_LAYOUT_APART} in \
                     {NOTICE_LAYOUT_ATTRIBUTE}, written by an instance of another version; run \
                     one version and one layout on the stream",
                    notice_key(stream)
                ),
            }),
            Err(error) => Err(self.failure(&key, "keep_layout", &error)),
        }
    }

    /// Writes the layout in `stream`'s head unless a fresh mark says it stands there
    /// (`head_marks.rs`; fresh: within `MARK_FRESH` and within half the lease of the beat about
    /// to be written, which ends at `until_ms`): a beat into the beats' rows only follows it,
    /// even where the subscription's own write of it ([`LeaseStore::keep_layout`]) was not
    /// forwarded by a wrapper, or where it was removed by hand while this instance was cut off
    /// or paused.
    pub(super) async fn layout_before_beat(
        &self,
        stream: &str,
        until_ms: u64,
    ) -> Result<(), LeaseError> {
        let now_ms = epoch_millis();
        let within = super::head_marks::MARK_FRESH
            .min(Duration::from_millis(until_ms.saturating_sub(now_ms) / 2));
        if self
            .marks()
            .fresh_apart(stream, (Instant::now(), now_ms), within)
        {
            return Ok(());
        }
        self.write_layout(stream).await
    }

    /// Whether `stream`'s head said layout 2 as this store last learnt, however long ago.
    pub(super) fn head_apart(&self, stream: &str) -> bool {
        self.marks().apart(stream)
    }

    /// Notes the layout `stream`'s head was read with by a call sent at `sent` (both clocks).
    pub(super) fn head_says(&self, stream: &str, sent: (Instant, u64), layout: Option<u64>) {
        self.marks()
            .noted(stream, sent, layout == Some(NOTICE_LAYOUT_APART), false);
    }

    /// A beat on `stream` failed: the next one writes the layout first, whatever reads say.
    pub(super) fn head_unknown(&self, stream: &str) {
        self.marks().doubt(stream, Instant::now());
    }

    fn marks(&self) -> std::sync::MutexGuard<'_, super::head_marks::HeadMarks> {
        self.head_marks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests;

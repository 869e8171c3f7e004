//! The stream's notice kept in three rows ([`NOTICE_LAYOUT_APART`]): its head (`<stream>#notice`:
//! the counter, the marks, the layout), its beats (`<stream>#beats#notice`) and its runs'
//! records (`<stream>#runs#notice`). The handover poll reads the head alone while the beats it
//! last read say who is alive (`coordinator/notice_reads.rs`), and a beat rewrites the beats'
//! row alone. The writes to each row are `notice.rs`'s, on the row that holds what they write.

use super::notice::{NOTICE_LAYOUT_ATTRIBUTE, condition_refused};
use super::*;
use crate::NOTICE_LAYOUT_APART;
use crate::lease::{beats_key, notice_key, runs_key};

impl DynamoLeaseStore {
    /// Three consistent `GetItem`s of the notice's rows, sent together (each billed on its own:
    /// the head a read unit, the beats' and the runs' rows a unit per 4 KB; the permission
    /// they need is the `dynamodb:GetItem` every store needs), as one notice: the head's
    /// counter and marks, its layout as [`Self::whole_layout`] tells it, the beats of the
    /// beats' row and of the head (a one-row layout's leftovers), the runs' records of both.
    /// Any of the three failing fails the read: the next poll reads again, and a subscription
    /// that opens refuses to.
    pub(super) async fn read_notice_apart(&self, stream: &str) -> Result<Notice, LeaseError> {
        let key = LeaseKey::new(stream, "*");
        let (head, beats, runs) = tokio::try_join!(
            self.get(&key, notice_key(stream), "notice"),
            self.get(&key, beats_key(stream), "notice"),
            self.get(&key, runs_key(stream), "notice"),
        )?;
        let part = |item: Option<Item>| -> Result<Notice, LeaseError> {
            item.map_or_else(
                || Ok(Notice::default()),
                |item| self.notice_from_item(&key, &item),
            )
        };
        let (head, beats, runs) = (part(head)?, part(beats)?, part(runs)?);
        self.head_says(stream, head.layout);
        let now_ms = epoch_millis();
        if head.any_alive(now_ms) && beats.any_alive(now_ms) {
            tracing::warn!(
                table = %self.table,
                stream,
                "beats run both in the stream's notice row and in its beats' row: instances that \
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

    /// One consistent `GetItem` of the notice's head: its counter, marks and layout, the beats
    /// and runs' records left out.
    pub(super) async fn read_notice_head(&self, stream: &str) -> Result<Notice, LeaseError> {
        let head = self.read_notice(stream).await?;
        self.head_says(stream, head.layout);
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
                self.head_says(stream, Some(NOTICE_LAYOUT_APART));
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

    /// Writes the layout in `stream`'s head unless this store wrote or read it there last: a
    /// beat into the beats' row only follows it, even where the subscription's own write of it
    /// ([`LeaseStore::keep_layout`]) was not forwarded by a wrapper, or where it was removed
    /// by hand while this instance still beats.
    pub(super) async fn layout_before_beat(&self, stream: &str) -> Result<(), LeaseError> {
        if self.head_apart(stream) {
            return Ok(());
        }
        self.write_layout(stream).await
    }

    /// Whether `stream`'s head said layout 2 as this store last wrote or read it.
    pub(super) fn head_apart(&self, stream: &str) -> bool {
        self.apart_heads
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(stream)
    }

    /// Notes the layout `stream`'s head was just read or written with.
    pub(super) fn head_says(&self, stream: &str, layout: Option<u64>) {
        let mut heads = self
            .apart_heads
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if layout == Some(NOTICE_LAYOUT_APART) {
            heads.insert(stream.to_owned());
        } else {
            heads.remove(stream);
        }
    }
}

#[cfg(test)]
mod tests;

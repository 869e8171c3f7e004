//! The stream's notice kept in three rows ([`NOTICE_LAYOUT_APART`]): its head (`<stream>#notice`:
//! the counter, the marks, the layout), its beats (`<stream>#beats#notice`) and its runs'
//! records (`<stream>#runs#notice`). The handover poll reads the head alone while the beats it
//! last read say who is alive (`coordinator/notice_reads.rs`), and a beat rewrites the beats'
//! row alone. The writes to each row are `notice.rs`'s, on the row that holds what they write.

use aws_sdk_dynamodb::types::KeysAndAttributes;

use super::notice::{NOTICE_LAYOUT_ATTRIBUTE, condition_refused};
use super::*;
use crate::NOTICE_LAYOUT_APART;
use crate::lease::{beats_key, notice_key, runs_key};

impl DynamoLeaseStore {
    /// One consistent `BatchGetItem` of the notice's three rows (each billed on its own: the
    /// head a read unit, the beats' and the runs' rows a unit per 4 KB), as one notice: the
    /// head's counter, marks and layout ([`Notice::head_layout`]: a live one-row fleet's beats in
    /// the head say it keeps that layout), the beats of the beats' row and of the head (a
    /// one-row layout's leftovers, lapsed), the runs' records of both. A key the table left
    /// unprocessed (throttled) fails the read: the next poll reads again.
    pub(super) async fn read_notice_apart(&self, stream: &str) -> Result<Notice, LeaseError> {
        let key = LeaseKey::new(stream, "*");
        let rows = [notice_key(stream), beats_key(stream), runs_key(stream)];
        let keys = rows
            .iter()
            .map(|row| HashMap::from([(KEY.to_owned(), string(row))]))
            .collect();
        let wanted = KeysAndAttributes::builder()
            .set_keys(Some(keys))
            .consistent_read(true)
            .build()
            .map_err(|error| LeaseError::Store {
                key: key.clone(),
                operation: "notice",
                message: error.to_string(),
            })?;
        let answer = self
            .client
            .batch_get_item()
            .request_items(self.table(), wanted)
            .send()
            .await
            .map_err(|error| self.failure(&key, "notice", &error))?;
        if answer
            .unprocessed_keys
            .as_ref()
            .is_some_and(|left| !left.is_empty())
        {
            return Err(LeaseError::Throttled {
                key,
                operation: "notice",
                code: "UnprocessedKeys".to_owned(),
            });
        }
        let mut found: HashMap<String, Item> = HashMap::new();
        for item in answer
            .responses
            .and_then(|mut tables| tables.remove(self.table()))
            .unwrap_or_default()
        {
            if let Some(AttributeValue::S(row)) = item.get(KEY) {
                found.insert(row.clone(), item);
            }
        }
        let mut part = |row: &String| -> Result<Notice, LeaseError> {
            found.remove(row).map_or_else(
                || Ok(Notice::default()),
                |item| self.notice_from_item(&key, &item),
            )
        };
        let head = part(&rows[0])?;
        let beats = part(&rows[1])?;
        let runs = part(&rows[2])?;
        let mut notice = Self::head_alone(head.clone());
        notice.beats = head.beats;
        for (owner, until) in beats.beats {
            let beat = notice.beats.entry(owner).or_insert(until);
            *beat = (*beat).max(until);
        }
        notice.incarnations = head.incarnations;
        notice.incarnations.extend(runs.incarnations);
        Ok(notice)
    }

    /// One consistent `GetItem` of the notice's head: its counter, marks and layout, the beats
    /// and runs' records left out.
    pub(super) async fn read_notice_head(&self, stream: &str) -> Result<Notice, LeaseError> {
        self.read_notice(stream).await.map(Self::head_alone)
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
    /// (written meanwhile by an instance of another layout): then nothing changes, and the next
    /// read of the notice tells of the other layout.
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
            Ok(_) => Ok(()),
            Err(error) if condition_refused(&error) => Ok(()),
            Err(error) => Err(self.failure(&key, "keep_layout", &error)),
        }
    }
}

#[cfg(test)]
mod tests;

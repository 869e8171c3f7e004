//! The stream's notice row (`<stream>#notice`): its counter, which every release bumps, the
//! instances' beats, one attribute each, so a beat is one unconditional `SET` whether or not the
//! row exists yet, and each holder's count of marks of the handoffs asked of it.

use super::*;
use crate::lease::{BEAT_GROUPS, Notice, beat_group, beats_key, notice_key, runs_key};

/// Bumped by every release of one of the stream's shards.
const NOTICE_COUNTER: &str = "notice_counter";
/// The layout of the notice its instances write, where a version that keeps it otherwise wrote
/// it (`Notice::layout`); this version writes none.
pub(super) const NOTICE_LAYOUT_ATTRIBUTE: &str = "notice_layout";
/// The prefix of a beat's attribute: `beat_<owner>`, until when (epoch milliseconds by the
/// owner's clock) the owner is alive.
const BEAT_PREFIX: &str = "beat_";
/// The prefix of a run's record: `incarnation_<owner>`, the run (`<started ms>-<nonce>`, S) that
/// recorded itself last under the owner id.
const INCARNATION_PREFIX: &str = "incarnation_";
/// The prefix of the requests' mark: `ask_<holder>`, how many times handoffs were marked as
/// asked of the holder.
const ASK_PREFIX: &str = "ask_";

impl DynamoLeaseStore {
    /// The size DynamoDB bills for `stream`'s notice row holding `notice`, by its item-size
    /// rules (each attribute's name and value: a string's bytes, a number's significant digits
    /// halved plus one): a consistent read of it costs one read unit per 4 KB, and every write
    /// of it (a beat, a run's record, the bump of a release) one write unit per KB of the larger
    /// of the item before and after. Every instance on the stream adds a beat and a run's
    /// record: about 115 bytes with owner ids of 30 characters. The application's claim on the
    /// stream (`application`, when the store names one) is left out: a few dozen bytes.
    ///
    /// # Examples
    ///
    /// ```
    /// use ruststream_kinesis::{DynamoLeaseStore, Notice};
    ///
    /// let mut notice = Notice::default();
    /// let empty = DynamoLeaseStore::notice_item_bytes("orders", &notice);
    /// notice.beats.insert("pod-7".to_owned(), 1_700_000_010_000);
    /// assert!(DynamoLeaseStore::notice_item_bytes("orders", &notice) > empty);
    /// ```
    #[must_use]
    pub fn notice_item_bytes(stream: &str, notice: &Notice) -> usize {
        let mut bytes = KEY.len() + notice_key(stream).len() + Self::head_bytes(notice);
        bytes += Self::beats_bytes(notice.beats.iter());
        bytes += Self::runs_bytes(notice);
        bytes
    }

    /// The rows of `stream`'s notice holding `notice` where its head is kept apart
    /// ([`keep_notice_head_apart`](Self::keep_notice_head_apart)), each by its key with the
    /// size DynamoDB bills for it, as [`notice_item_bytes`](Self::notice_item_bytes) sizes the
    /// one row: the head, the beats' row of every group (an empty one is its key alone, and its
    /// consistent read costs a read unit all the same) and the runs' records. A beat writes its
    /// group's row ([`notice_beats_key`](Self::notice_beats_key)).
    ///
    /// ```
    /// use ruststream_kinesis::{DynamoLeaseStore, Notice};
    ///
    /// let mut notice = Notice::default();
    /// notice.beats.insert("pod-7".to_owned(), 1_700_000_010_000);
    /// let rows = DynamoLeaseStore::notice_rows_bytes("orders", &notice);
    /// assert_eq!(rows.len(), 10);
    /// let group = &rows[&DynamoLeaseStore::notice_beats_key("orders", "pod-7")];
    /// assert!(rows.values().all(|bytes| bytes <= group));
    /// ```
    #[must_use]
    pub fn notice_rows_bytes(
        stream: &str,
        notice: &Notice,
    ) -> std::collections::BTreeMap<String, usize> {
        let key_bytes = |row: &String| KEY.len() + row.len();
        let mut rows = std::collections::BTreeMap::new();
        let head = notice_key(stream);
        rows.insert(head.clone(), key_bytes(&head) + Self::head_bytes(notice));
        for group in 0..BEAT_GROUPS {
            let row = beats_key(stream, group);
            let beats = notice
                .beats
                .iter()
                .filter(|(owner, _)| beat_group(owner) == group);
            rows.insert(row.clone(), key_bytes(&row) + Self::beats_bytes(beats));
        }
        let runs = runs_key(stream);
        rows.insert(runs.clone(), key_bytes(&runs) + Self::runs_bytes(notice));
        rows
    }

    /// The bytes of a number attribute's value: its significant digits halved, plus one.
    fn number_bytes(n: u64) -> usize {
        n.to_string().len().div_ceil(2) + 1
    }

    /// The bytes of the head's attributes: the counter, the marks, the layout.
    fn head_bytes(notice: &Notice) -> usize {
        let mut bytes = NOTICE_COUNTER.len() + Self::number_bytes(notice.counter);
        for (holder, asked) in &notice.asks {
            bytes += ASK_PREFIX.len() + holder.len() + Self::number_bytes(*asked);
        }
        if let Some(layout) = notice.layout {
            bytes += NOTICE_LAYOUT_ATTRIBUTE.len() + Self::number_bytes(layout);
        }
        bytes
    }

    /// The bytes of `beats`' attributes.
    fn beats_bytes<'b>(beats: impl Iterator<Item = (&'b String, &'b u64)>) -> usize {
        beats
            .map(|(owner, until)| BEAT_PREFIX.len() + owner.len() + Self::number_bytes(*until))
            .sum()
    }

    /// The bytes of the runs' records.
    fn runs_bytes(notice: &Notice) -> usize {
        notice
            .incarnations
            .iter()
            .map(|(owner, run)| INCARNATION_PREFIX.len() + owner.len() + run.len())
            .sum()
    }

    /// One `GetItem` of `stream`'s notice row, read as `reading` says: one read unit while the
    /// row stays under 4 KB (about 80 instances' beats) consistent, half of one eventually.
    ///
    /// A row that says its stream keeps the notice apart ([`crate::NOTICE_LAYOUT_APART`]) is
    /// that notice's head: the whole notice is read as such a store reads it, so that a store
    /// of either layout (`lease-table`'s, say) shows that stream's beats.
    pub(super) async fn read_notice(
        &self,
        stream: &str,
        reading: Reading,
    ) -> Result<Notice, LeaseError> {
        let key = LeaseKey::new(stream, "*");
        let sent = (Instant::now(), epoch_millis());
        let notice = match self
            .get_read(&key, notice_key(stream), "notice", reading)
            .await?
        {
            Some(item) => self.notice_from_item(&key, &item)?,
            None => return Ok(Notice::default()),
        };
        if !self.notice_apart {
            self.head_says(stream, sent, notice.layout);
            if notice.layout == Some(crate::NOTICE_LAYOUT_APART) {
                return self
                    .read_notice_apart_after(stream, Some((sent, notice)), reading)
                    .await;
            }
        }
        Ok(notice)
    }

    /// What one row of `key`'s stream's notice holds, as a notice: every attribute of either
    /// layout it finds (each row of [`crate::NOTICE_LAYOUT_APART`] holds some of them).
    pub(super) fn notice_from_item(
        &self,
        key: &LeaseKey,
        item: &Item,
    ) -> Result<Notice, LeaseError> {
        let counter = number_attribute(item, NOTICE_COUNTER)
            .map_err(|problem| self.malformed(key, "notice", &problem))?
            .unwrap_or(0);
        // A layout that cannot be read (written by hand) is another layout than this one's,
        // and refused as one (`Notice::layout`'s 0), rather than failing every notice read.
        let layout = number_attribute(item, NOTICE_LAYOUT_ATTRIBUTE).unwrap_or(Some(0));
        let mut notice = Notice {
            counter,
            layout,
            ..Notice::default()
        };
        for (name, value) in item {
            if let (Some(owner), AttributeValue::S(run)) =
                (name.strip_prefix(INCARNATION_PREFIX), value)
            {
                notice.incarnations.insert(owner.to_owned(), run.clone());
                continue;
            }
            let count = match value {
                AttributeValue::N(text) => text.parse().ok(),
                _ => None,
            };
            if let Some(holder) = name.strip_prefix(ASK_PREFIX) {
                // A count that cannot be read (written by hand) marks nothing: the requests
                // lapse and are asked again.
                if let Some(marks) = count {
                    notice.asks.insert(holder.to_owned(), marks);
                }
                continue;
            }
            let Some(owner) = name.strip_prefix(BEAT_PREFIX) else {
                continue;
            };
            let until = count;
            // A beat that cannot be read counts as lapsed: the rows of its owner are read.
            if let Some(until) = until {
                notice.beats.insert(owner.to_owned(), until);
            }
        }
        Ok(notice)
    }

    /// Bumps `stream`'s notice counter after a release; a failure is logged and left: the
    /// waiting instances find the released shard at a later listing round that reads the rows
    /// instead (`Notice`'s docs say when).
    pub(super) async fn bump_notice(&self, stream: &str) {
        let sent = self
            .client
            .update_item()
            .table_name(self.table())
            .key(KEY, string(&notice_key(stream)))
            .update_expression("ADD #counter :one")
            .expression_attribute_names("#counter", NOTICE_COUNTER)
            .expression_attribute_values(":one", number(1))
            .send()
            .await;
        if let Err(error) = sent {
            tracing::warn!(
                table = %self.table,
                stream,
                error = %crate::sdk::failure::described(&error),
                "bumping the stream's notice after a release failed; other instances see the \
                 release at a later listing that reads the rows"
            );
        }
    }

    /// Writes `owner`'s beat in `stream`'s notice and removes the beats and records of `forget`,
    /// unless a later beat of `owner` stands (a beat written late, after its answer was lost,
    /// lands on no newer one): then nothing changes, and the call answers `Ok`.
    pub(super) async fn write_beat(
        &self,
        stream: &str,
        owner: &str,
        until_ms: u64,
        forget: &[String],
    ) -> Result<(), LeaseError> {
        if self.notice_apart {
            self.layout_before_beat(stream, until_ms).await?;
        }
        let written = self
            .write_notice(
                (stream, self.beats_row(stream, owner)),
                "beat",
                (BEAT_PREFIX, owner),
                number(until_ms),
                // A beat that is not a number (written by hand) is replaced, not compared.
                Some((
                    "attribute_not_exists(#me) OR NOT attribute_type(#me, :number) OR #me < :value",
                    string("N"),
                )),
            )
            .await;
        if written.is_err() {
            // Its chain starts again from the next beat, which writes the layout first.
            self.head_unknown(stream);
        }
        let later_stands = written?;
        if later_stands {
            tracing::debug!(
                table = %self.table,
                stream,
                owner,
                until_ms,
                "a later beat of this owner stands in the notice: this one changed nothing"
            );
        }
        self.forget_gone(stream, owner, forget).await;
        Ok(())
    }

    /// Adds one to the mark of each of `holders` in `stream`'s notice, in one `UpdateItem`: a
    /// holder kept alive by its beat reads its rows when it sees its mark moved.
    pub(super) async fn write_marks(
        &self,
        stream: &str,
        holders: &[String],
    ) -> Result<(), LeaseError> {
        if holders.is_empty() {
            return Ok(());
        }
        let key = LeaseKey::new(stream, "*");
        let mut names = HashMap::new();
        let mut adds = Vec::new();
        for (n, holder) in holders.iter().enumerate() {
            names.insert(format!("#ask{n}"), format!("{ASK_PREFIX}{holder}"));
            adds.push(format!("#ask{n} :one"));
        }
        self.client
            .update_item()
            .table_name(self.table())
            .key(KEY, string(&notice_key(stream)))
            .update_expression(format!("ADD {}", adds.join(", ")))
            .set_expression_attribute_names(Some(names))
            .expression_attribute_values(":one", number(1))
            .send()
            .await
            .map(drop)
            .map_err(|error| self.failure(&key, "mark_asked", &error))
    }

    /// Records `record` under `owner` in `stream`'s notice and removes the beats and records of
    /// `forget`.
    pub(super) async fn write_incarnation(
        &self,
        stream: &str,
        owner: &str,
        record: &str,
        forget: &[String],
    ) -> Result<(), LeaseError> {
        self.write_notice(
            (stream, self.runs_row(stream)),
            "announce",
            (INCARNATION_PREFIX, owner),
            string(record),
            None,
        )
        .await?;
        self.forget_gone(stream, owner, forget).await;
        Ok(())
    }

    /// Removes the beats and records of `forget` (but `owner`), in one `UpdateItem` of
    /// `stream`'s notice conditioned on every one of those beats being lapsed still (or absent,
    /// or not a number): an instance judged gone on an older read that has beaten since keeps
    /// its beat, since an instance kept alive by its beat counts on it. Refused, or failed,
    /// nothing is removed, and a later write tries again (a failure is not the write's). Kept
    /// apart, the beats' row first, under that condition, and the runs' records and the head's
    /// marks (with a one-row layout's leftovers in the head, under the same condition) only once
    /// it was applied.
    async fn forget_gone(&self, stream: &str, owner: &str, forget: &[String]) {
        let gone: Vec<&String> = forget.iter().filter(|gone| *gone != owner).collect();
        if gone.is_empty() {
            return;
        }
        let whole = [BEAT_PREFIX, INCARNATION_PREFIX, ASK_PREFIX];
        // A one-row store on a stream whose head still says layout 2 (a fleet of it stopped)
        // forgets that fleet's leftovers from its other rows too.
        if !self.notice_apart && !self.head_apart(stream) {
            self.remove_gone(stream, notice_key(stream), &gone, &whole)
                .await;
            return;
        }
        // The runs' records as they stand before the beats go: a gone owner whose new run
        // records itself after this read keeps that record. (One that recorded itself before
        // this read and beats only after the beats' removal loses it, as in one row: its twin
        // check then waits for its next record.)
        let key = LeaseKey::new(stream, "*");
        let records = match self.get(&key, runs_key(stream), "notice").await {
            Ok(item) => item.unwrap_or_default(),
            Err(error) => {
                tracing::debug!(
                    table = %self.table,
                    stream,
                    error = %error,
                    "reading the runs' records before forgetting gone instances failed; a later \
                     write tries again"
                );
                return;
            }
        };
        // Group by group, the beats first under their condition; the records and the head's
        // leftovers of those whose beats' removal was applied.
        let mut forgotten: Vec<&String> = Vec::new();
        for group in 0..BEAT_GROUPS {
            let members: Vec<&String> = gone
                .iter()
                .copied()
                .filter(|gone| beat_group(gone) == group)
                .collect();
            if !members.is_empty()
                && self
                    .remove_gone(stream, beats_key(stream, group), &members, &[BEAT_PREFIX])
                    .await
            {
                forgotten.extend(members);
            }
        }
        if !forgotten.is_empty() {
            self.remove_records(stream, &forgotten, &records).await;
            self.remove_gone(stream, notice_key(stream), &forgotten, &whole)
                .await;
        }
    }

    /// Removes from the runs' row the record of each of `gone` that `records` (the row as read
    /// before) holds, in one `UpdateItem` conditioned on each being the one read still.
    async fn remove_records(&self, stream: &str, gone: &[&String], records: &Item) {
        let mut removed = Vec::new();
        let mut conditions = Vec::new();
        let mut names = HashMap::new();
        let mut values = HashMap::new();
        for (n, gone) in gone.iter().enumerate() {
            let attribute = format!("{INCARNATION_PREFIX}{gone}");
            let Some(record) = records.get(&attribute) else {
                continue;
            };
            removed.push(format!("#r{n}"));
            conditions.push(format!("#r{n} = :r{n}"));
            names.insert(format!("#r{n}"), attribute);
            values.insert(format!(":r{n}"), record.clone());
        }
        if removed.is_empty() {
            return;
        }
        let sent = self
            .client
            .update_item()
            .table_name(self.table())
            .key(KEY, string(&runs_key(stream)))
            .update_expression(format!("REMOVE {}", removed.join(", ")))
            .condition_expression(conditions.join(" AND "))
            .set_expression_attribute_names(Some(names))
            .set_expression_attribute_values(Some(values))
            .send()
            .await;
        if let Err(error) = sent {
            tracing::debug!(
                table = %self.table,
                stream,
                forget = ?gone,
                error = %crate::sdk::failure::described(&error),
                "removing gone instances' records changed nothing (one recorded a new run, or \
                 the call failed); a later write tries again"
            );
        }
    }

    /// Removes the attributes of `prefixes` of each of `gone` from the notice's `row`, in one
    /// `UpdateItem`, conditioned, where the beats are among them, on each of those beats being
    /// lapsed beyond the skew tolerance by this clock (or absent, or not a number). Whether it
    /// was applied.
    async fn remove_gone(
        &self,
        stream: &str,
        row: String,
        gone: &[&String],
        prefixes: &[&str],
    ) -> bool {
        let mut removed = Vec::new();
        let mut conditions = Vec::new();
        let mut names = HashMap::new();
        for (n, gone) in gone.iter().enumerate() {
            for (p, prefix) in prefixes.iter().enumerate() {
                let name = format!("#g{n}p{p}");
                if *prefix == BEAT_PREFIX {
                    conditions.push(format!(
                        "(attribute_not_exists({name}) OR NOT attribute_type({name}, :number) \
                         OR {name} < :cutoff)"
                    ));
                }
                removed.push(name.clone());
                names.insert(name, format!("{prefix}{gone}"));
            }
        }
        let mut request = self
            .client
            .update_item()
            .table_name(self.table())
            .key(KEY, string(&row))
            .update_expression(format!("REMOVE {}", removed.join(", ")))
            .set_expression_attribute_names(Some(names));
        if !conditions.is_empty() {
            // Lapsed beyond the skew tolerance by this clock: no holder counts on it any more.
            let cutoff = epoch_millis().saturating_sub(millis(SKEW_TOLERANCE));
            request = request
                .condition_expression(conditions.join(" AND "))
                .expression_attribute_values(":cutoff", number(cutoff))
                .expression_attribute_values(":number", string("N"));
        }
        match request.send().await {
            Ok(_) => true,
            Err(error) => {
                tracing::debug!(
                    table = %self.table,
                    stream,
                    row,
                    forget = ?gone,
                    error = %crate::sdk::failure::described(&error),
                    "removing gone instances from the stream's notice changed nothing (one beat \
                     again, or the call failed); a later write tries again"
                );
                false
            }
        }
    }

    /// The row of `stream`'s notice that holds `owner`'s beat: the notice's own, or, kept apart,
    /// the beats' row of its group.
    pub(super) fn beats_row(&self, stream: &str, owner: &str) -> String {
        if self.notice_apart {
            beats_key(stream, beat_group(owner))
        } else {
            notice_key(stream)
        }
    }

    /// The row of `stream`'s notice that holds the runs' records.
    pub(super) fn runs_row(&self, stream: &str) -> String {
        if self.notice_apart {
            runs_key(stream)
        } else {
            notice_key(stream)
        }
    }

    /// One `UpdateItem` of the notice's `row`: `<prefix><owner>` (`#me`) set to `value`
    /// (`:value`); unconditional, or under `condition` (an expression and its `:number` value).
    /// Answers whether the condition refused the write (nothing changed).
    async fn write_notice(
        &self,
        (stream, row): (&str, String),
        operation: &'static str,
        (prefix, owner): (&str, &str),
        value: AttributeValue,
        condition: Option<(&str, AttributeValue)>,
    ) -> Result<bool, LeaseError> {
        let key = LeaseKey::new(stream, "*");
        let mut request = self
            .client
            .update_item()
            .table_name(self.table())
            .key(KEY, string(&row))
            .update_expression("SET #me = :value")
            .expression_attribute_names("#me", format!("{prefix}{owner}"))
            .expression_attribute_values(":value", value);
        if let Some((expression, number_type)) = condition {
            request = request
                .condition_expression(expression)
                .expression_attribute_values(":number", number_type);
        }
        match request.send().await {
            Ok(_) => Ok(false),
            Err(error) if condition_refused(&error) => Ok(true),
            Err(error) => Err(self.failure(&key, operation, &error)),
        }
    }

    /// Claims `stream` for this store's application: refused when one of its rows, or its notice,
    /// names another.
    pub(super) async fn claim_stream(&self, stream: &str) -> Result<(), LeaseError> {
        let key = LeaseKey::new(stream, "*");
        let Some(application) = self.application.as_deref() else {
            // A store that names none takes only rows that name none: a stream claimed by a
            // named application is not its to read.
            let notice = self.get(&key, notice_key(stream), "claim").await?;
            if let Some(theirs) = notice
                .as_ref()
                .and_then(|item| self.other_application(item))
            {
                return Err(self.other_application_error(&key, theirs));
            }
            return Ok(());
        };
        // Rows another application took before streams were claimed: the claim would hand the
        // stream to the wrong one.
        if let Some((row, theirs)) = self
            .scan(Reading::Consistent)
            .await?
            .foreign
            .into_iter()
            .find(|(row, _)| row.stream() == stream)
        {
            return Err(self.other_application_error(&row, theirs));
        }
        let claimed = self
            .client
            .update_item()
            .table_name(self.table())
            .key(KEY, string(&notice_key(stream)))
            .update_expression("SET #app = :app")
            .condition_expression("attribute_not_exists(#app) OR #app = :app")
            .expression_attribute_names("#app", APPLICATION)
            .expression_attribute_values(":app", string(application))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        match claimed {
            Ok(_) => Ok(()),
            Err(error) => match error.as_service_error() {
                Some(UpdateItemError::ConditionalCheckFailedException(refused)) => {
                    let theirs = refused
                        .item
                        .as_ref()
                        .and_then(|item| self.other_application(item))
                        .unwrap_or_else(|| "another application".to_owned());
                    Err(self.other_application_error(&key, theirs))
                }
                _ => Err(self.failure(&key, "claim", &error)),
            },
        }
    }

    /// Removes `owner`'s beat from `stream`'s notice and bumps its counter: an instance stops.
    /// With `until_ms`, only while the beat stands no later than it (a later subscription under
    /// the same owner beats): otherwise nothing changes, and the call answers `Ok`.
    pub(super) async fn write_leave(
        &self,
        stream: &str,
        owner: &str,
        until_ms: Option<u64>,
    ) -> Result<(), LeaseError> {
        let key = LeaseKey::new(stream, "*");
        let mut request = self
            .client
            .update_item()
            .table_name(self.table())
            .key(KEY, string(&self.beats_row(stream, owner)))
            .expression_attribute_names("#me", format!("{BEAT_PREFIX}{owner}"));
        request = if self.notice_apart {
            // The beats' row: the counter, in the head, is bumped once the beat is gone.
            request.update_expression("REMOVE #me")
        } else {
            request
                .update_expression("REMOVE #me ADD #counter :one")
                .expression_attribute_names("#counter", NOTICE_COUNTER)
                .expression_attribute_values(":one", number(1))
        };
        if let Some(until_ms) = until_ms {
            request = request
                .condition_expression(
                    "attribute_not_exists(#me) OR NOT attribute_type(#me, :number) \
                     OR #me <= :until",
                )
                .expression_attribute_values(":until", number(until_ms))
                .expression_attribute_values(":number", string("N"));
        }
        match request.send().await {
            Ok(_) => {
                if self.notice_apart {
                    self.bump_notice(stream).await;
                }
                Ok(())
            }
            Err(error) if condition_refused(&error) => Ok(()),
            Err(error) => Err(self.failure(&key, "leave", &error)),
        }
    }
}

/// Whether an `UpdateItem` of the notice failed on its condition only: nothing changed, which
/// the notice's writes answer as `Ok` (a later beat stands, another layout is written, ...).
pub(super) fn condition_refused<R>(error: &SdkError<UpdateItemError, R>) -> bool {
    matches!(
        error.as_service_error(),
        Some(UpdateItemError::ConditionalCheckFailedException(_))
    )
}

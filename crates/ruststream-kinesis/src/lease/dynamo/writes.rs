//! The table's writes: the conditional updates of a take, a renewal, a checkpoint and a release,
//! each under the fence (`lease_counter`) this store object's own last write left in the row,
//! and how a refusal, a failure or an unanswered write moves that fence.

use super::*;

impl DynamoLeaseStore {
    pub(super) fn known(&self, key: &LeaseKey) -> bool {
        self.existing
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(key)
    }

    pub(super) fn forget(&self, key: &LeaseKey) {
        self.existing
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(key);
    }

    pub(super) fn remember(&self, key: &LeaseKey) {
        self.existing
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key.clone());
    }

    pub(super) fn fence(&self, key: &LeaseKey) -> Fence {
        self.fences
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(key)
            .copied()
            .unwrap_or_default()
    }

    pub(super) fn set_fence(&self, key: &LeaseKey, fence: Fence) {
        self.fences
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key.clone(), fence);
    }

    /// Records the row a write of this store left, or, for a write with an unknown outcome, that
    /// the counter may have moved (`rules::Fence::answered`).
    pub(super) fn settle_fence(&self, key: &LeaseKey, written: Result<&Item, &WriteError>) {
        let answer = match written {
            Ok(item) => match number_attribute(item, COUNTER).ok().flatten() {
                Some(counter) => rules::Answer::Written { counter },
                // An answer without the counter (none of this store's writes asks for one):
                // nothing is known of it.
                None => {
                    self.set_fence(key, Fence::default());
                    return;
                }
            },
            Err(WriteError::Failed(_)) => rules::Answer::Failed,
            Err(WriteError::Refused(_)) => rules::Answer::Refused,
        };
        self.set_fence(key, self.fence(key).answered(answer));
    }

    /// A renewal, checkpoint or release: conditioned on this owner holding the row and, once this
    /// store has written it, on the counter it left there.
    ///
    /// A refusal is not always a lost lease (`rules::Fence::refused_by`). When the SDK sent the
    /// write again after an attempt whose answer was lost (a 5xx, a reset connection) and that
    /// attempt had landed, the resent write is refused by the very counter it moved: that
    /// refusal is the write's success. A refusal that finds the row still held by this owner
    /// after one of this store's own writes had an unknown outcome adopts the row's counter and
    /// tries once more; any other refusal is [`LeaseError::Lost`].
    pub(super) async fn held_update(
        &self,
        key: &LeaseKey,
        owner: &str,
        write: HeldWrite<'_>,
    ) -> Result<Item, LeaseError> {
        let HeldWrite {
            operation,
            update,
            values,
            returns,
            effect,
            also,
        } = write;
        let mut retried = false;
        loop {
            let fence = self.fence(key);
            let mut values = values.clone();
            let held = match fence.counter {
                Some(counter) => {
                    values.insert(":seen".to_owned(), number(counter));
                    HELD_AT_CONDITION
                }
                None => HELD_CONDITION,
            };
            let condition = format!("{held}{also}");
            let unanswered = Unanswered::arm(self, key);
            let written = self
                .update(key, operation, update, &condition, values, returns.clone())
                .await;
            unanswered.disarm();
            self.settle_fence(key, written.as_ref());
            let (row, state) = match written {
                Ok(item) => return Ok(item),
                Err(WriteError::Refused(Some(row))) => match state_of(&row) {
                    Ok(state) => (row, state),
                    Err(_) => {
                        return Err(self.held_failure(key, owner, WriteError::Refused(Some(row))));
                    }
                },
                Err(error) => return Err(self.held_failure(key, owner, error)),
            };
            match fence.refused_by(&state, owner, Some(&effect), retried) {
                // Our own earlier attempt of this very write landed.
                rules::Refusal::Landed(fence) => {
                    self.set_fence(key, fence);
                    return Ok(row);
                }
                // One of this store's own writes landed after all: the row is still ours.
                rules::Refusal::Retry(fence) => {
                    self.set_fence(key, fence);
                    retried = true;
                }
                rules::Refusal::Lost => {
                    return Err(self.held_failure(key, owner, WriteError::Refused(Some(row))));
                }
            }
        }
    }

    /// The error of a failed call: the table is missing, or DynamoDB said something else.
    pub(super) fn failure<E, R>(
        &self,
        key: &LeaseKey,
        operation: &'static str,
        error: &SdkError<E, R>,
    ) -> LeaseError
    where
        E: ProvideErrorMetadata + std::error::Error + 'static,
        R: Debug + 'static,
    {
        if error.code() == Some("ResourceNotFoundException") {
            return LeaseError::TableMissing {
                table: self.table.to_string(),
                create_command: self.create_command(),
            };
        }
        if check::is_key_mismatch(error.code(), error.message()) {
            return self.mismatch(format!(
                "DynamoDB refused a call keyed by the string lease_key ({})",
                error.message().unwrap_or_default()
            ));
        }
        if let Some(code) = error.code().filter(|code| is_throttling(code)) {
            return LeaseError::Throttled {
                key: key.clone(),
                operation,
                code: code.to_owned(),
            };
        }
        let message = match (error.code(), error.message()) {
            (Some(code), Some(message)) => format!("{code}: {message}"),
            (Some(code), None) => code.to_owned(),
            _ => crate::sdk::failure::described(error),
        };
        LeaseError::Store {
            key: key.clone(),
            operation,
            message: format!("table {:?}: {message}", self.table),
        }
    }

    /// The error of an answer this store cannot read.
    pub(super) fn malformed(
        &self,
        key: &LeaseKey,
        operation: &'static str,
        message: &str,
    ) -> LeaseError {
        LeaseError::Store {
            key: key.clone(),
            operation,
            message: format!("table {:?}: {message}", self.table),
        }
    }

    /// Reads the row keyed `row_key`, strongly consistent.
    pub(super) async fn get(
        &self,
        key: &LeaseKey,
        row_key: String,
        operation: &'static str,
    ) -> Result<Option<Item>, LeaseError> {
        self.get_read(key, row_key, operation, Reading::Consistent)
            .await
    }

    /// Reads the row keyed `row_key`, as `reading` says: an eventually consistent read costs
    /// half a consistent one, and may miss the latest writes.
    pub(super) async fn get_read(
        &self,
        key: &LeaseKey,
        row_key: String,
        operation: &'static str,
        reading: Reading,
    ) -> Result<Option<Item>, LeaseError> {
        self.client
            .get_item()
            .table_name(self.table())
            .key(KEY, AttributeValue::S(row_key))
            .consistent_read(reading == Reading::Consistent)
            .send()
            .await
            .map(|out| out.item)
            .map_err(|error| self.failure(key, operation, &error))
    }

    /// A conditional `UpdateItem` of the row keyed `row_key`; answers the row as written.
    ///
    /// `values` must define every `:name` that `update` and `condition` use, and no other:
    /// DynamoDB refuses unused values, and moto answers HTTP 500 to undefined ones.
    ///
    /// `returns` says what the answer holds: `AllNew` where the caller answers the whole row,
    /// `UpdatedNew` where the counter (which every write updates) is all it needs; the smaller
    /// answer is cheaper to build and to read.
    pub(super) async fn update(
        &self,
        key: &LeaseKey,
        operation: &'static str,
        update: &str,
        condition: &str,
        values: Item,
        returns: ReturnValue,
    ) -> Result<Item, WriteError> {
        let written = self
            .client
            .update_item()
            .table_name(self.table())
            .key(KEY, AttributeValue::S(key.row_key()))
            .update_expression(update)
            .condition_expression(condition)
            .set_expression_attribute_values(Some(values))
            .return_values(returns)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        match written {
            Ok(out) => Ok(out.attributes.unwrap_or_default()),
            Err(error) => match error.as_service_error() {
                Some(UpdateItemError::ConditionalCheckFailedException(refused)) => {
                    Err(WriteError::Refused(refused.item.clone()))
                }
                // Another request on the row in progress (a transaction of this store's,
                // committing) rejects this attempt whole; an earlier attempt of the SDK's may
                // still have landed, so it is a failure like any other: retried, and never
                // taken for a lost lease.
                _ => Err(WriteError::Failed(self.failure(key, operation, &error))),
            },
        }
    }

    /// The state of a row as written, or a [`LeaseError::Store`] naming what is wrong with it.
    pub(super) fn written(
        &self,
        key: &LeaseKey,
        operation: &'static str,
        item: &Item,
    ) -> Result<LeaseState, LeaseError> {
        state_of(item).map_err(|message| self.malformed(key, operation, &message))
    }

    /// The error of a renewal, checkpoint or release that did not happen.
    pub(super) fn held_failure(
        &self,
        key: &LeaseKey,
        owner: &str,
        error: WriteError,
    ) -> LeaseError {
        match error {
            WriteError::Refused(_) => LeaseError::Lost {
                key: key.clone(),
                owner: owner.to_owned(),
            },
            WriteError::Failed(error) => error,
        }
    }

    /// The take of `acquire`, `acquire_from` and `take_over`: one conditional write, which sets
    /// `start` as the checkpoint of a row without one. `over`: the holder and counter of a
    /// take-over, which the row may hold instead of being free.
    pub(super) async fn take(
        &self,
        key: &LeaseKey,
        owner: &str,
        lease: Duration,
        start: Option<&str>,
        over: Option<(&str, u64)>,
    ) -> Result<LeaseState, LeaseError> {
        if over.is_none()
            && !self.known(key)
            && let Some(adopted) = self.adopt_legacy(key, owner, lease).await?
        {
            return Ok(adopted);
        }
        let now = epoch_millis();
        let cutoff = now.saturating_sub(millis(SKEW_TOLERANCE));
        let mut values = HashMap::from([
            (":me".to_owned(), string(owner)),
            (
                ":expiry".to_owned(),
                number(now.saturating_add(millis(lease))),
            ),
            (":one".to_owned(), number(1)),
            (":cutoff".to_owned(), number(cutoff)),
        ]);
        let mut update = "SET lease_owner = :me, lease_expiry = :expiry".to_owned();
        if let Some(start) = start {
            values.insert(":start".to_owned(), string(start));
            update.push_str(", checkpoint = if_not_exists(checkpoint, :start)");
        }
        let mut condition = TAKE_CONDITION.to_owned();
        if let Some((holder, counter)) = over {
            // (free OR as the taker read it): the row as read, its holder's beat lapsed.
            condition = format!("({condition} OR {TAKE_OVER_CONDITION})");
            values.insert(":holder".to_owned(), string(holder));
            values.insert(":counter".to_owned(), number(counter));
        }
        // A take-over decided on a row: a row deleted since is not created again.
        let seen = self.known(key) || over.is_some();
        if seen {
            condition.push_str(" AND attribute_exists(lease_key)");
        }
        match &self.application {
            Some(application) => {
                values.insert(":app".to_owned(), string(application));
                update.push_str(", application = if_not_exists(application, :app)");
                condition.push_str(OWN_APPLICATION_CONDITION);
            }
            None => condition.push_str(NO_APPLICATION_CONDITION),
        }
        // A take ends every handoff asked of the row's earlier holder.
        update.push_str(" REMOVE handoff_to, handoff_asked ADD lease_counter :one");
        let taken = self
            .update(
                key,
                "acquire",
                &update,
                &condition,
                values,
                ReturnValue::AllNew,
            )
            .await;
        self.settle_fence(key, taken.as_ref());
        self.take_answered(key, taken, seen)
    }

    /// What a take's answer means: the row taken, or why not (held by another owner, another
    /// application's, deleted since `seen`, or a failure).
    fn take_answered(
        &self,
        key: &LeaseKey,
        taken: Result<Item, WriteError>,
        seen: bool,
    ) -> Result<LeaseState, LeaseError> {
        match taken {
            Ok(item) => {
                self.remember(key);
                self.written(key, "acquire", &item)
            }
            Err(WriteError::Refused(Some(item))) => {
                self.remember(key);
                if let Some(theirs) = self.other_application(&item) {
                    return Err(self.other_application_error(key, theirs));
                }
                let held = self.written(key, "acquire", &item)?;
                Err(LeaseError::Held {
                    key: key.clone(),
                    owner: held.owner.unwrap_or_default(),
                    expires_in_ms: held.expiry_ms.saturating_sub(epoch_millis()),
                })
            }
            Err(WriteError::Refused(None)) if seen => {
                self.forget(key);
                Err(LeaseError::Deleted { key: key.clone() })
            }
            Err(WriteError::Refused(None)) => Err(self.malformed(
                key,
                "acquire",
                "the take was refused, and DynamoDB did not return the row that refused it",
            )),
            Err(WriteError::Failed(error)) => Err(error),
        }
    }

    /// The refusal of `key`'s row, which names the application `theirs`.
    pub(super) fn other_application_error(&self, key: &LeaseKey, theirs: String) -> LeaseError {
        LeaseError::OtherApplication {
            table: self.table.to_string(),
            key: key.clone(),
            ours: self.application.as_deref().map(str::to_owned),
            theirs,
        }
    }

    /// The application `item` names when it is not this store's: the reason a take was refused.
    pub(super) fn other_application(&self, item: &Item) -> Option<String> {
        let theirs = match item.get(APPLICATION)? {
            AttributeValue::S(name) => name.clone(),
            other => format!("{other:?}"),
        };
        (!rules::application_admits(self.application.as_deref(), Some(&theirs))).then_some(theirs)
    }

    /// The checkpoint of an earlier version's row of `key` (keyed by the bare shard id) to
    /// resume from: none when there is no such row, or it names no checkpoint, or it belongs to
    /// another stream than `legacy_stream`, or this version has a row of its own already.
    async fn legacy_checkpoint(&self, key: &LeaseKey) -> Result<Option<String>, LeaseError> {
        // The common case (no earlier version ever wrote this table) costs this one read, or
        // none after a Scan of the table (a listing) saw no bare row for the shard. An earlier
        // version writing the table at the same time is not supported (see the docs).
        if self.scanned_without_bare_row(key.shard()) {
            return Ok(None);
        }
        let Some(bare) = self.get(key, key.shard().to_owned(), "acquire").await? else {
            return Ok(None);
        };
        let checkpoint = match bare.get(CHECKPOINT) {
            Some(AttributeValue::S(checkpoint)) => checkpoint.clone(),
            None => return Ok(None),
            Some(other) => {
                return Err(self.malformed(
                    key,
                    "acquire",
                    &format!(
                        "the earlier version's row {:?} has checkpoint {other:?}, not a string",
                        key.shard()
                    ),
                ));
            }
        };
        match self.legacy_stream.as_deref() {
            Some(stream) if stream == key.stream() => Ok(Some(checkpoint)),
            Some(_) => Ok(None),
            None => {
                // Without `legacy_stream` the bare row is an error only while this version has
                // no row of its own: once one exists, another instance has moved on from it.
                if self.get(key, key.row_key(), "acquire").await?.is_some() {
                    self.remember(key);
                    return Ok(None);
                }
                Err(LeaseError::LegacyRow {
                    table: self.table.to_string(),
                    stream: key.stream().to_owned(),
                    shard: key.shard().to_owned(),
                    checkpoint,
                })
            }
        }
    }

    /// Before this instance's first take of a shard whose `stream:shard` row it has not seen:
    /// looks for the bare row of an earlier version, and takes the shard from its checkpoint
    /// when `legacy_stream` names this stream. `None` when the ordinary take should go on.
    pub(super) async fn adopt_legacy(
        &self,
        key: &LeaseKey,
        owner: &str,
        lease: Duration,
    ) -> Result<Option<LeaseState>, LeaseError> {
        let Some(checkpoint) = self.legacy_checkpoint(key).await? else {
            return Ok(None);
        };
        let now = epoch_millis();
        let values = HashMap::from([
            (":me".to_owned(), string(owner)),
            (
                ":expiry".to_owned(),
                number(now.saturating_add(millis(lease))),
            ),
            (":checkpoint".to_owned(), string(&checkpoint)),
            (":one".to_owned(), number(1)),
        ]);
        let copied = self
            .update(
                key,
                "acquire",
                "SET lease_owner = :me, lease_expiry = :expiry, checkpoint = :checkpoint \
                 ADD lease_counter :one",
                NEW_ROW_CONDITION,
                values,
                ReturnValue::AllNew,
            )
            .await;
        if let Ok(item) = &copied {
            self.settle_fence(key, Ok(item));
        }
        match copied {
            Ok(item) => {
                self.remember(key);
                tracing::info!(
                    table = %self.table,
                    stream = key.stream(),
                    shard = key.shard(),
                    checkpoint,
                    "resuming from the row of an earlier version, keyed by the bare shard id"
                );
                self.written(key, "acquire", &item).map(Some)
            }
            // Another instance created the row first: take it the ordinary way.
            Err(WriteError::Refused(_)) => {
                self.remember(key);
                Ok(None)
            }
            Err(WriteError::Failed(error)) => Err(error),
        }
    }

    pub(super) async fn renew_held(
        &self,
        key: &LeaseKey,
        owner: &str,
        lease: Duration,
    ) -> Result<LeaseState, LeaseError> {
        let write = rules::Held::renew(epoch_millis(), millis(lease));
        let values = HashMap::from([
            (":me".to_owned(), string(owner)),
            (
                ":expiry".to_owned(),
                number(write.expiry_ms().unwrap_or_default()),
            ),
            (":one".to_owned(), number(1)),
        ]);
        let item = self
            .held_update(
                key,
                owner,
                HeldWrite {
                    operation: "renew",
                    update: "SET lease_expiry = :expiry ADD lease_counter :one",
                    values,
                    returns: ReturnValue::AllNew,
                    effect: write.effect(owner),
                    also: "",
                },
            )
            .await?;
        self.written(key, "renew", &item)
    }

    pub(super) async fn checkpoint_held(
        &self,
        key: &LeaseKey,
        owner: &str,
        checkpoint: &str,
    ) -> Result<(), LeaseError> {
        let write = rules::Held::Checkpoint {
            checkpoint,
            behind_ms: None,
            expiry_ms: None,
        };
        let (set, remove, mut values) = checkpoint_update(checkpoint, None);
        values.insert(":me".to_owned(), string(owner));
        values.insert(":one".to_owned(), number(1));
        let update = format!("SET {set} ADD lease_counter :one{remove}");
        self.held_update(
            key,
            owner,
            HeldWrite {
                operation: "checkpoint",
                update: &update,
                values,
                returns: ReturnValue::UpdatedNew,
                effect: write.effect(owner),
                also: "",
            },
        )
        .await
        .map(drop)
    }

    pub(super) async fn checkpoint_renewing(
        &self,
        key: &LeaseKey,
        owner: &str,
        checkpoint: &str,
        behind_ms: Option<u64>,
        lease: Duration,
    ) -> Result<LeaseState, LeaseError> {
        let write = rules::Held::Checkpoint {
            checkpoint,
            behind_ms,
            expiry_ms: Some(epoch_millis().saturating_add(millis(lease))),
        };
        let (set, remove, mut values) = checkpoint_update(checkpoint, behind_ms);
        values.insert(":me".to_owned(), string(owner));
        values.insert(
            ":expiry".to_owned(),
            number(write.expiry_ms().unwrap_or_default()),
        );
        values.insert(":one".to_owned(), number(1));
        let update = format!("SET {set}, lease_expiry = :expiry ADD lease_counter :one{remove}");
        let item = self
            .held_update(
                key,
                owner,
                HeldWrite {
                    operation: "checkpoint",
                    update: &update,
                    values,
                    returns: ReturnValue::AllNew,
                    effect: write.effect(owner),
                    also: "",
                },
            )
            .await?;
        self.written(key, "checkpoint", &item)
    }

    /// The write of a handoff: the final checkpoint, `to` as the owner with a lease
    /// from now, the request removed; held, fenced, and the request naming `to`.
    pub(super) async fn hand_over_held(
        &self,
        key: &LeaseKey,
        owner: &str,
        to: &str,
        checkpoint: Option<&str>,
        lease: Duration,
    ) -> Result<(), LeaseError> {
        let write = rules::Held::hand_over(to, checkpoint, epoch_millis(), millis(lease));
        let (set, remove, mut values) = match checkpoint {
            Some(checkpoint) => {
                let (set, remove, values) = checkpoint_update(checkpoint, None);
                (format!(", {set}"), remove.replace(" REMOVE ", ", "), values)
            }
            None => (String::new(), String::new(), Item::new()),
        };
        values.insert(":me".to_owned(), string(owner));
        values.insert(":to".to_owned(), string(to));
        values.insert(
            ":expiry".to_owned(),
            number(write.expiry_ms().unwrap_or_default()),
        );
        values.insert(":one".to_owned(), number(1));
        let update = format!(
            "SET lease_owner = :to, lease_expiry = :expiry{set} \
             REMOVE handoff_to, handoff_asked{remove} ADD lease_counter :one"
        );
        self.held_update(
            key,
            owner,
            HeldWrite {
                operation: "hand_over",
                update: &update,
                values,
                returns: ReturnValue::UpdatedNew,
                effect: write.effect(owner),
                also: " AND handoff_to = :to",
            },
        )
        .await
        .map(drop)
    }

    /// Removes `to`'s request from the row, if it still stands there.
    pub(super) async fn remove_handoff_request(
        &self,
        key: &LeaseKey,
        to: &str,
    ) -> Result<bool, LeaseError> {
        let values = HashMap::from([(":to".to_owned(), string(to))]);
        let written = self
            .update(
                key,
                "withdraw_handoff",
                "REMOVE handoff_to, handoff_asked",
                "handoff_to = :to",
                values,
                ReturnValue::None,
            )
            .await;
        recorded(written)
    }

    /// Records a handoff asked of `holder`, unless another live one stands.
    pub(super) async fn write_handoff_request(
        &self,
        key: &LeaseKey,
        holder: &str,
        counter: u64,
        to: &str,
        asked_ms: u64,
    ) -> Result<bool, LeaseError> {
        let stale = rules::stale_before(asked_ms);
        let values = HashMap::from([
            (":holder".to_owned(), string(holder)),
            (":to".to_owned(), string(to)),
            (":asked".to_owned(), number(asked_ms)),
            (":stale".to_owned(), number(stale)),
            (":seen".to_owned(), number(counter)),
        ]);
        let written = self
            .update(
                key,
                "ask_handoff",
                "SET handoff_to = :to, handoff_asked = :asked",
                "lease_owner = :holder AND lease_counter = :seen AND (attribute_not_exists(handoff_to) \
                 OR attribute_not_exists(handoff_asked) OR handoff_to = :to OR handoff_asked <= :stale)",
                values,
                ReturnValue::None,
            )
            .await;
        recorded(written)
    }

    pub(super) async fn read_row(&self, key: &LeaseKey) -> Result<Option<LeaseState>, LeaseError> {
        let Some(item) = self.get(key, key.row_key(), "read").await? else {
            return Ok(None);
        };
        self.remember(key);
        if let Some(theirs) = self.other_application(&item) {
            return Err(self.other_application_error(key, theirs));
        }
        self.written(key, "read", &item).map(Some)
    }

    pub(super) async fn delete_row(
        &self,
        key: &LeaseKey,
        counter: u64,
    ) -> Result<bool, LeaseError> {
        let cutoff = epoch_millis().saturating_sub(millis(SKEW_TOLERANCE));
        let deleted = self
            .client
            .delete_item()
            .table_name(self.table())
            .key(KEY, string(&key.row_key()))
            .condition_expression(
                "lease_counter = :seen AND (attribute_not_exists(lease_owner) OR lease_expiry < :cutoff)",
            )
            .expression_attribute_values(":seen", number(counter))
            .expression_attribute_values(":cutoff", number(cutoff))
            .send()
            .await;
        match deleted {
            Ok(_) => {
                self.forget(key);
                self.fences
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .remove(key);
                Ok(true)
            }
            Err(error) if error.code() == Some("ConditionalCheckFailedException") => Ok(false),
            Err(error) => Err(self.failure(key, "delete", &error)),
        }
    }

    pub(super) async fn release_held(&self, key: &LeaseKey, owner: &str) -> Result<(), LeaseError> {
        let values = HashMap::from([
            (":me".to_owned(), string(owner)),
            (":zero".to_owned(), number(0)),
            (":one".to_owned(), number(1)),
        ]);
        self.held_update(
            key,
            owner,
            HeldWrite {
                operation: "release",
                update: "REMOVE lease_owner SET lease_expiry = :zero ADD lease_counter :one",
                values,
                returns: ReturnValue::UpdatedNew,
                effect: rules::Held::Release.effect(owner),
                also: "",
            },
        )
        .await
        .map(drop)
    }
}

/// Marks a row's fence uncertain when a write to it is dropped before its answer (a call bound
/// cut it off): the write may still land, and a later refusal by a row this owner holds is then
/// that write's doing.
pub(super) struct Unanswered<'a> {
    store: &'a DynamoLeaseStore,
    key: &'a LeaseKey,
    armed: bool,
}

impl<'a> Unanswered<'a> {
    pub(super) fn arm(store: &'a DynamoLeaseStore, key: &'a LeaseKey) -> Self {
        Self {
            store,
            key,
            armed: true,
        }
    }

    pub(super) fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for Unanswered<'_> {
    fn drop(&mut self) {
        if self.armed {
            let fence = Fence {
                uncertain: true,
                ..self.store.fence(self.key)
            };
            self.store.set_fence(self.key, fence);
        }
    }
}

/// Whether a conditional write that needs no row back landed (`false`: its condition refused it).
fn recorded(written: Result<Item, WriteError>) -> Result<bool, LeaseError> {
    match written {
        Ok(_) => Ok(true),
        Err(WriteError::Refused(_)) => Ok(false),
        Err(WriteError::Failed(error)) => Err(error),
    }
}

/// Whether DynamoDB's error `code` says it refused a call for want of capacity.
fn is_throttling(code: &str) -> bool {
    matches!(
        code,
        "ProvisionedThroughputExceededException" | "ThrottlingException" | "RequestLimitExceeded"
    )
}

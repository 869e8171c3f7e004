//! Exactly once: a handler's DynamoDB writes and the checkpoint of every shard they cover, in one
//! `TransactWriteItems`, each lease row's update conditioned on this owner and the counter this
//! store object's own last write left there (never on the owner alone: two sends of one commit
//! must never both land).
//!
//! What a cancelled transaction means is read from its reasons (`commit::outcome::judge`) and,
//! where a lease row refused, from the row it returned (`rules::commit_refused`): a resend of a
//! commit that landed is recognised by the row's `commit_token`, whether DynamoDB honoured the
//! request token (it answers success) or not (moto evaluates the resend again).

use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{TransactWriteItem, Update};

use super::writes::Unanswered;
use super::*;
use crate::commit::outcome::{Layout, Reason, Verdict, judge};
use crate::lease::rules::{CommitRefusal, RowAnswer, RowRefusal, commit_refused};
pub(crate) use crate::lease::transactions::{CommitAnswer, CommitRequest, CommitRow, UserRefusal};

impl DynamoLeaseStore {
    /// Commits `request`: one `TransactWriteItems` of the units' writes and one update per lease
    /// row, sent once. A refusal by rows still ours after one of this store's writes had no
    /// answer (and holding the token the writer knew) adopts their counters and answers
    /// [`CommitAnswer::NotApplied`]: the lease sends the commit again as a new attempt, under a
    /// new request token (a request token is never sent twice with different conditions).
    pub(crate) async fn commit(&self, request: &CommitRequest<'_>) -> CommitAnswer {
        let Some(first) = request.rows.first() else {
            // Writes with no lease row would be conditioned on nothing: never sent.
            return CommitAnswer::Failed(LeaseError::Store {
                key: LeaseKey::new("", ""),
                operation: "commit",
                message: "a commit names no lease row; nothing was sent".to_owned(),
            });
        };
        if let [row] = request.rows.as_slice()
            && request.units.iter().all(|(_, items)| items.is_empty())
        {
            return self.commit_alone(request, row).await;
        }
        let fences: Vec<Fence> = request.rows.iter().map(|row| self.fence(row.key)).collect();
        if let Some(row) = request
            .rows
            .iter()
            .zip(&fences)
            .find_map(|(row, fence)| fence.counter.is_none().then_some(row))
        {
            return CommitAnswer::Failed(self.no_counter(row.key));
        }
        self.learn_key_schemas(request).await;
        let actions = self.commit_actions(request, &fences);
        let count = actions.len();
        let unanswered: Vec<Unanswered<'_>> = request
            .rows
            .iter()
            .map(|row| Unanswered::arm(self, row.key))
            .collect();
        let sent = self
            .client
            .transact_write_items()
            .set_transact_items(Some(actions))
            .client_request_token(request.request_token)
            .send()
            .await;
        unanswered.into_iter().for_each(Unanswered::disarm);
        let error = match sent {
            Ok(_) => {
                // Each row's condition was its counter: the commit left it one further on.
                for (row, fence) in request.rows.iter().zip(&fences) {
                    self.set_fence(
                        row.key,
                        Fence {
                            counter: fence.counter.map(|seen| seen + 1),
                            uncertain: false,
                        },
                    );
                }
                return CommitAnswer::Done;
            }
            Err(error) => error,
        };
        match error.as_service_error() {
            Some(TransactWriteItemsError::TransactionCanceledException(cancelled))
                if cancelled.cancellation_reasons().len() == count =>
            {
                self.cancelled(request, &fences, cancelled.cancellation_reasons())
                    .await
            }
            Some(TransactWriteItemsError::IdempotentParameterMismatchException(_)) => {
                // This token went with another request before: a bug of ours. That request
                // may have landed; the rows tell after the next attempt, under a new token.
                tracing::error!(
                    token = request.request_token,
                    "commit token sent twice with different requests; sending a new attempt"
                );
                self.rows_answered(request, rules::Answer::Failed);
                CommitAnswer::NotApplied
            }
            Some(invalid) if invalid.code() == Some("ValidationException") => {
                // The request as a whole is invalid (an expression, a size): nothing applied.
                // Of several units none is blamed: they commit one at a time, and the one at
                // fault is refused alone.
                match request.units.as_slice() {
                    [] => CommitAnswer::Failed(self.failure(first.key, "commit", &error)),
                    [_, _, ..] => CommitAnswer::Split,
                    [(unit, _)] => CommitAnswer::UserRefused(UserRefusal {
                        unit: *unit,
                        action: None,
                        code: "ValidationException".to_owned(),
                        message: invalid.message().map(str::to_owned),
                        item: None,
                    }),
                }
            }
            // A table missing, or one the role may not write: a handler's is blamed (its
            // handling is refused, naming it); the lease table's fails as any other failure.
            Some(rejected)
                if matches!(
                    rejected.code(),
                    Some("ResourceNotFoundException" | "AccessDeniedException")
                ) =>
            {
                let code = rejected.code().unwrap_or_default();
                match self.blamed(request, code, rejected.message()).await {
                    Some(refusal) => CommitAnswer::UserRefused(refusal),
                    None => {
                        self.rows_answered(request, rules::Answer::Failed);
                        CommitAnswer::Failed(self.failure(first.key, "commit", &error))
                    }
                }
            }
            // No answer to trust (a transport failure, a timeout, a cancellation whose reasons
            // do not name every action): it may have landed.
            _ => {
                self.rows_answered(request, rules::Answer::Failed);
                CommitAnswer::Failed(self.failure(first.key, "commit", &error))
            }
        }
    }

    /// Each row's fence after a commit answered so (`Failed`: no answer to trust, it may have
    /// landed; `Refused`: the rows' conditions held and nothing was written).
    fn rows_answered(&self, request: &CommitRequest<'_>, answer: rules::Answer) {
        for row in &request.rows {
            self.set_fence(row.key, self.fence(row.key).answered(answer));
        }
    }

    /// A commit of one row and no writes: the same conditional update as one `UpdateItem`, at
    /// half a transaction's write units. It is still a commit: conditioned on the counter, and
    /// the row keeps its token.
    async fn commit_alone(&self, request: &CommitRequest<'_>, row: &CommitRow<'_>) -> CommitAnswer {
        if self.fence(row.key).counter.is_none() {
            return CommitAnswer::Failed(self.no_counter(row.key));
        }
        let write = rules::Held::Commit {
            checkpoint: row.checkpoint,
            behind_ms: row.behind_ms,
            expiry_ms: row.expiry_ms,
            token: request.token,
            prior: row.prior,
        };
        let (update, values) = Self::row_update(request, row);
        let written = self
            .held_update(
                row.key,
                request.owner,
                HeldWrite {
                    operation: "commit",
                    update: &update,
                    values,
                    returns: ReturnValue::UpdatedNew,
                    effect: write.effect(request.owner),
                    also: "",
                },
            )
            .await;
        match written {
            Ok(_) => CommitAnswer::Done,
            Err(error) if error.is_fenced() => CommitAnswer::Lost { rows: vec![0] },
            Err(error) => CommitAnswer::Failed(error),
        }
    }

    /// A row's update expression and its values, but `:seen` (the fence's).
    fn row_update(request: &CommitRequest<'_>, row: &CommitRow<'_>) -> (String, Item) {
        let (set, remove, mut values) = checkpoint_update(row.checkpoint, row.behind_ms);
        values.insert(":me".to_owned(), string(request.owner));
        values.insert(":expiry".to_owned(), number(row.expiry_ms));
        values.insert(":token".to_owned(), string(request.token));
        values.insert(":one".to_owned(), number(1));
        let update = format!(
            "SET {set}, {EXPIRY} = :expiry, {COMMIT_TOKEN} = :token ADD {COUNTER} :one{remove}"
        );
        (update, values)
    }

    /// The error of a commit of a row this store object never wrote.
    fn no_counter(&self, key: &LeaseKey) -> LeaseError {
        LeaseError::Store {
            key: key.clone(),
            operation: "commit",
            message: "a commit is conditioned on the counter this store object's own last write \
                      left in the row, and it never wrote this row: take the shard through the \
                      store that commits"
                .to_owned(),
        }
    }

    /// The request's actions: the units' writes in order, then one conditional update per row.
    fn commit_actions(
        &self,
        request: &CommitRequest<'_>,
        fences: &[Fence],
    ) -> Vec<TransactWriteItem> {
        let mut actions: Vec<TransactWriteItem> = request
            .units
            .iter()
            .flat_map(|(_, items)| items.iter().cloned())
            .collect();
        for (row, fence) in request.rows.iter().zip(fences) {
            let (update, mut values) = Self::row_update(request, row);
            values.insert(
                ":seen".to_owned(),
                number(fence.counter.unwrap_or_default()),
            );
            let update = Update::builder()
                .table_name(self.table())
                .key(KEY, AttributeValue::S(row.key.row_key()))
                .update_expression(update)
                .condition_expression(HELD_AT_CONDITION)
                .set_expression_attribute_values(Some(values))
                .return_values_on_condition_check_failure(
                    ReturnValuesOnConditionCheckFailure::AllOld,
                )
                .build()
                .expect("table, key and update expression are set");
            actions.push(TransactWriteItem::builder().update(update).build());
        }
        actions
    }

    /// What a cancelled commit means, from its reasons (one per action); the fences moved
    /// accordingly.
    async fn cancelled(
        &self,
        request: &CommitRequest<'_>,
        fences: &[Fence],
        reasons: &[aws_sdk_dynamodb::types::CancellationReason],
    ) -> CommitAnswer {
        let codes: Vec<Reason> = reasons
            .iter()
            .map(|reason| Reason::from_code(reason.code()))
            .collect();
        let layout = Layout {
            units: request
                .units
                .iter()
                .map(|(unit, items)| (*unit, items.len()))
                .collect(),
            rows: request.rows.len(),
        };
        let first_row = layout
            .units
            .iter()
            .map(|(_, actions)| actions)
            .sum::<usize>();
        let rows_passed = codes[first_row..]
            .iter()
            .all(|code| *code == Reason::Passed);
        match judge(&codes, &layout) {
            Verdict::Rows(refusing) => {
                self.rows_refused(request, fences, reasons, first_row, &refusing)
                    .await
            }
            Verdict::UserRefused { unit, action, code } => {
                let at = layout
                    .units
                    .iter()
                    .take_while(|(of, _)| *of != unit)
                    .map(|(_, actions)| actions)
                    .sum::<usize>()
                    + action;
                let reason = reasons.get(at);
                if rows_passed {
                    self.rows_answered(request, rules::Answer::Refused);
                }
                CommitAnswer::UserRefused(UserRefusal {
                    unit,
                    action: Some(action),
                    code,
                    message: reason.and_then(|r| r.message()).map(str::to_owned),
                    item: reason.and_then(|r| r.item()).cloned(),
                })
            }
            // Our own row's update is invalid: a bug of this crate's, which no resend mends.
            // The shard stops as with a lost lease; nothing was applied.
            Verdict::RowInvalid { row, code } => {
                tracing::error!(
                    key = %request.rows[row].key,
                    code,
                    "DynamoDB found a lease row's commit update invalid; the shard stops"
                );
                CommitAnswer::Lost { rows: vec![row] }
            }
            // Nothing was applied, and the rows' conditions may not have been evaluated: each
            // fence stays as it was.
            Verdict::NotApplied => CommitAnswer::NotApplied,
        }
    }

    /// A commit some of whose rows refused (`refusing`, among the request's rows): the rows they
    /// returned (read again, consistently, where the reason carries none or one unreadable)
    /// say whether an earlier attempt landed, the lease moved, or one of our own writes landed.
    async fn rows_refused(
        &self,
        request: &CommitRequest<'_>,
        fences: &[Fence],
        reasons: &[aws_sdk_dynamodb::types::CancellationReason],
        first_row: usize,
        refusing: &[usize],
    ) -> CommitAnswer {
        let mut states: Vec<Option<LeaseState>> = Vec::with_capacity(request.rows.len());
        for (n, row) in request.rows.iter().enumerate() {
            if !refusing.contains(&n) {
                states.push(None);
                continue;
            }
            let returned = reasons
                .get(first_row + n)
                .and_then(|reason| reason.item())
                .and_then(|item| state_of(item).ok());
            let state = match returned {
                Some(state) => Some(state),
                None => match self.read_row(row.key).await {
                    Ok(state) => state,
                    Err(error) => {
                        self.rows_answered(request, rules::Answer::Failed);
                        return CommitAnswer::Failed(error);
                    }
                },
            };
            states.push(state);
        }
        let rows: Vec<RowRefusal<'_>> = request
            .rows
            .iter()
            .enumerate()
            .map(|(n, row)| RowRefusal {
                fence: fences[n],
                prior: row.prior,
                answer: match (&states[n], refusing.contains(&n)) {
                    (_, false) => RowAnswer::Accepted,
                    (Some(state), true) => RowAnswer::Refused(state),
                    (None, true) => RowAnswer::Missing,
                },
            })
            .collect();
        match commit_refused(&rows, request.owner, request.token, false) {
            CommitRefusal::Landed(landed) => {
                for (row, fence) in request.rows.iter().zip(landed) {
                    match fence {
                        Some(fence) => self.set_fence(row.key, fence),
                        // Moved by the commit and since: its next write tells.
                        None => self.set_fence(
                            row.key,
                            self.fence(row.key).answered(rules::Answer::Failed),
                        ),
                    }
                }
                CommitAnswer::Done
            }
            CommitRefusal::Retry(adopted) => {
                for (row, fence) in request.rows.iter().zip(adopted) {
                    self.set_fence(row.key, fence);
                }
                CommitAnswer::NotApplied
            }
            CommitRefusal::Lost { rows } => CommitAnswer::Lost { rows },
        }
    }
}

mod blame;
#[cfg(test)]
mod faults;
mod schemas;
#[cfg(test)]
mod tests;

impl crate::lease::transactions::CommitStore for DynamoLeaseStore {
    fn commit<'a>(
        &'a self,
        request: &'a CommitRequest<'a>,
    ) -> crate::lease::transactions::CommitFuture<'a> {
        Box::pin(DynamoLeaseStore::commit(self, request))
    }

    fn region(&self) -> Option<String> {
        self.client.config().region().map(ToString::to_string)
    }

    fn commit_tables(&self) -> Option<crate::lease::CommitTables> {
        Some(self.commit_tables.clone())
    }

    fn table_arn(&self) -> crate::lease::transactions::ArnFuture<'_> {
        Box::pin(async move {
            let arn = self.describe().await?.table_arn()?.to_owned();
            self.commit_tables.lease_table_is(&arn);
            Some(arn)
        })
    }
}

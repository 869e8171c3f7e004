//! Exactly once, the lease writer's side: a commit the shard's machine asks for goes to the
//! store's transactions with its units' writes, and its answer goes back to the machine; a unit
//! refused by one of its own writes is said (a WARN naming the record, the write and DynamoDB's
//! reason) and carried by the record's next delivery.

use crate::lease::{LeaseKey, LeaseState};
use crate::shard::lease::Commit;
use crate::shard::{Answer, ShardHandle};

use super::ShardEnv;

/// Sends `commit` of the shard of `key`: one transaction of its units' writes and the row's
/// update, conditioned on this owner and the counter its last write left. A commit answers no
/// row.
#[cfg(feature = "dynamodb-lease")]
pub(super) async fn send(
    env: &ShardEnv,
    handle: &ShardHandle,
    key: &LeaseKey,
    commit: &Commit,
) -> (Answer, Option<LeaseState>) {
    use crate::lease::{CommitAnswer, CommitRequest};

    let (Some(transactions), Some(units)) = (&env.transactions, handle.writes_of(&commit.units))
    else {
        return not_sent(env, key, commit);
    };
    let (token, request_token) = (commit.token.base(), commit.token.request(commit.attempt));
    let request = CommitRequest {
        owner: &env.owner,
        token: &token,
        request_token: &request_token,
        units,
        rows: vec![commit.row(key)],
    };
    let answer = match transactions.commit(&request).await {
        CommitAnswer::Done => Answer::Done,
        CommitAnswer::Lost { .. } => {
            tracing::info!(
                token = %token,
                "the lease row refused the commit: another instance holds the shard, and nothing \
                 of the commit was applied; the outcome of any earlier attempt is the row's"
            );
            Answer::Refused
        }
        CommitAnswer::NotApplied => Answer::NotApplied,
        CommitAnswer::Split => {
            tracing::warn!(
                token = %token,
                units = commit.units.len(),
                "a commit of several handlings was refused as a whole (ValidationException); \
                 they commit one at a time until the one at fault is refused alone"
            );
            Answer::Split
        }
        CommitAnswer::UserRefused(refusal) => {
            let unit = refusal.unit;
            let table = refusal.action.and_then(|action| {
                request
                    .units
                    .iter()
                    .find(|(staged, _)| *staged == unit)
                    .and_then(|(_, writes)| writes.get(action))
                    .and_then(crate::lease::table_of)
                    .map(str::to_owned)
            });
            let why = handle.commit_refused(unit, |sequence| crate::CommitRefused {
                stream: env.origin.stream.to_string(),
                shard: env.origin.shard.to_string(),
                sequence: sequence.map(|s| s.to_string()).unwrap_or_default(),
                action: refusal.action,
                table,
                code: refusal.code,
                message: refusal.message,
                item: refusal.item,
            });
            tracing::warn!(
                error = %why,
                "a commit was refused by one of the handling's own writes; the record is \
                 delivered again, and its handler reads why off StagedWrites::refused"
            );
            Answer::UserRefused(unit)
        }
        CommitAnswer::Failed(err) => {
            env.lease_failed(err);
            Answer::Failed
        }
    };
    (answer, None)
}

/// Without transactions in the build, no lease commits (exactly once needs feature
/// `dynamodb-lease`).
#[cfg(not(feature = "dynamodb-lease"))]
pub(super) async fn send(
    env: &ShardEnv,
    _handle: &ShardHandle,
    key: &LeaseKey,
    commit: &Commit,
) -> (Answer, Option<LeaseState>) {
    not_sent(env, key, commit)
}

/// A commit with no transactions to send it through (the start refuses an exactly-once
/// subscription on such a store), or whose writes are no longer kept: a bug of ours. Nothing is
/// written, the failure is reported, and the shard stops as if its lease were lost, so nothing
/// commits in part and no checkpoint passes writes that never landed.
fn not_sent(env: &ShardEnv, key: &LeaseKey, commit: &Commit) -> (Answer, Option<LeaseState>) {
    env.lease_failed(crate::LeaseError::Store {
        key: key.clone(),
        operation: "commit",
        message: format!(
            "commit {} found no transactions of the lease store, or not all of its writes (a \
             bug); nothing was written and the shard stops",
            commit.token.base()
        ),
    });
    (Answer::Refused, None)
}

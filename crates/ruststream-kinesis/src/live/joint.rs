//! Exactly once, the committer of a subscription's units that span shards: it sends each joint
//! commit the book ([`Joints`]) says goes out, one transaction of the unit's writes and every
//! shard's row, in a task of its own (a slow answer holds back no other unit), and hands the
//! answer back; it sleeps until a resend or a deadline is due or a shard wakes it. It decides
//! nothing (`shard::joint` does), and it runs until the subscription ends with no unit left
//! waiting.

use std::sync::Arc;

use crate::clock::sleep_until;
use crate::commit::UnitId;
use crate::lease::{CommitAnswer, CommitRequest, LeaseKey, Transactions};
use crate::live::subscription::Subscription;
use crate::shard::lease::Commit;
use crate::shard::{Answer, JointStep, Joints};

/// Runs the committer of `home`'s joint commits, sent through `transactions`.
pub(crate) async fn commit_joints(
    home: Arc<Subscription>,
    joints: Arc<Joints>,
    transactions: Transactions,
) {
    loop {
        let woken = joints.woken();
        let mut woken = std::pin::pin!(woken);
        woken.as_mut().enable();
        match joints.step() {
            JointStep::Send { unit, rows, writes } => {
                let (sending, book, through) =
                    (Arc::clone(&home), Arc::clone(&joints), transactions.clone());
                home.spawn(async move {
                    let joint = Joint { unit, rows, writes };
                    send(&sending, &book, &through, joint).await;
                    book.wake();
                });
            }
            JointStep::Wait(until) => {
                if home.cancel.is_cancelled() && joints.close() {
                    return;
                }
                let cancelled = home.cancel.cancelled();
                tokio::select! {
                    () = woken => {}
                    () = sleep_until(until) => {}
                    // Once the subscription ends, its shards close: look again at once, and
                    // stop when no unit waits.
                    () = cancelled, if !home.cancel.is_cancelled() => {}
                }
            }
        }
    }
}

/// One joint commit to send: the unit, each row's key and commit, the unit's writes.
struct Joint {
    unit: UnitId,
    rows: Vec<(LeaseKey, Commit)>,
    writes: Vec<aws_sdk_dynamodb::types::TransactWriteItem>,
}

/// Sends `joint` through `transactions` and hands its answer to `joints`.
async fn send(home: &Subscription, joints: &Joints, transactions: &Transactions, joint: Joint) {
    let Joint { unit, rows, writes } = joint;
    let Some((first_key, first)) = rows.first() else {
        return;
    };
    let (token, request_token) = (first.token.base(), first.token.request(first.attempt));
    let request = CommitRequest {
        owner: &home.owner,
        token: &token,
        request_token: &request_token,
        units: vec![(unit, writes)],
        rows: rows.iter().map(|(key, commit)| commit.row(key)).collect(),
    };
    let mut lost = Vec::new();
    let (answer, refusal) = match transactions.commit(&request).await {
        CommitAnswer::Done => {
            tracing::debug!(
                stream = %home.stream,
                token = %token,
                shards = rows.len(),
                "a joint commit landed"
            );
            (Answer::Done, None)
        }
        CommitAnswer::Lost { rows: refusing } => {
            let shards: Vec<&str> = refusing
                .iter()
                .filter_map(|at| rows.get(*at))
                .map(|(key, _)| key.shard())
                .collect();
            tracing::info!(
                stream = %home.stream,
                token = %token,
                shards = ?shards,
                "a lease row refused a joint commit: another instance holds those shards, nothing \
                 of the commit was applied, and its records come again in the others"
            );
            lost = refusing;
            (Answer::Refused, None)
        }
        CommitAnswer::NotApplied => (Answer::NotApplied, None),
        // Of one unit, a request refused as a whole is refused by it (`UserRefused`): this
        // answer does not come, and is taken for no answer.
        CommitAnswer::Split => (Answer::Failed, None),
        CommitAnswer::UserRefused(refusal) => (Answer::UserRefused(unit), Some(refusal)),
        CommitAnswer::Failed(error) => {
            home.report(home.lease_error(first_key.shard(), error));
            (Answer::Failed, None)
        }
    };
    if let Some(why) = joints.answered(&home.stream, unit, answer, &lost, refusal) {
        tracing::warn!(
            error = %why,
            "a joint commit of a batch of several shards was refused by one of its own writes; \
             its records are delivered again, each alone, and their handler reads why off \
             StagedWrites::refused"
        );
    }
}

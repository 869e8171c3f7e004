//! The DynamoDB store's condition and update expressions held against the store's rules
//! (`lease::rules`), case by case, on the local stack: each row is put as it stands, each call
//! made as an instance makes it, and the row read back must be the one the rules leave (or the
//! row unchanged, where they refuse). A rule changed in `rules.rs` and not in the expressions
//! fails here, naming the case. Runs when `KINESIS_TEST_ENDPOINT` names the local stack.

use aws_sdk_dynamodb::types::TransactWriteItem;

use super::commit::{CommitAnswer, CommitRequest, CommitRow};
use super::*;
use crate::lease::{Handoff, rules};

const A: &str = "rules-owner-a";
const B: &str = "rules-owner-b";
const C: &str = "rules-owner-c";
const LEASE: Duration = Duration::from_secs(10);
/// How far apart the test's clock and the store's call may read the time: the expiries a call
/// writes are compared within it. Every case row keeps its edges at least half a second from
/// the moment of its call (taken per case).
const SLACK_MS: u64 = 1_500;

/// The rows every call meets, at `now_ms`.
fn rows(now_ms: u64) -> Vec<(&'static str, Option<LeaseState>)> {
    let row = |owner: Option<&str>, expiry_ms: u64| LeaseState {
        owner: owner.map(str::to_owned),
        expiry_ms,
        counter: 4,
        checkpoint: Some("100".to_owned()),
        behind_ms: Some(9),
        handoff: None,
        commit_token: None,
    };
    let asked = |to: &str, asked_ms: u64| Handoff {
        to: to.to_owned(),
        asked_ms,
    };
    vec![
        ("no row", None),
        ("released", Some(row(None, 0))),
        ("A's, live", Some(row(Some(A), now_ms + 5_000))),
        ("A's, a minute ahead", Some(row(Some(A), now_ms + 60_000))),
        ("B's, live", Some(row(Some(B), now_ms + 5_000))),
        (
            "B's, kept by its beat",
            Some(row(Some(B), now_ms + millis(crate::lease::KEPT_BY_BEAT))),
        ),
        (
            "B's, lapsed within the skew",
            Some(row(Some(B), now_ms - 300)),
        ),
        (
            "B's, lapsed beyond the skew",
            Some(row(Some(B), now_ms - 10_000)),
        ),
        (
            "A's, C asked",
            Some(LeaseState {
                handoff: Some(asked(C, now_ms)),
                ..row(Some(A), now_ms + 5_000)
            }),
        ),
        (
            "A's, C's request lapsed",
            Some(LeaseState {
                handoff: Some(asked(C, now_ms - 60_000)),
                ..row(Some(A), now_ms + 5_000)
            }),
        ),
        (
            "A's, B asked",
            Some(LeaseState {
                handoff: Some(asked(B, now_ms)),
                ..row(Some(A), now_ms + 5_000)
            }),
        ),
    ]
}

/// The calls an instance makes, each as the rules know it.
#[derive(Debug, Clone, Copy)]
enum Call {
    Take,
    /// A take by a store object that saw the row exist (in a listing, a read or a write).
    TakeSeen,
    /// A take-over from B, whose beat lapsed, of the row read at `counter`.
    TakeOver {
        counter: u64,
    },
    Renew {
        seen: Option<u64>,
    },
    Checkpoint,
    CheckpointRenewing,
    Release,
    HandOver,
    Ask,
    Withdraw,
    Delete {
        counter: u64,
    },
    /// An exactly-once commit at the counter `seen`: with a staged write (a transaction), or
    /// none (one update).
    Commit {
        seen: u64,
        writes: bool,
    },
}

/// The token the commits of the cases write.
const TOKEN: &str = "rules-commit-token";

const CALLS: [Call; 18] = [
    Call::Take,
    Call::TakeSeen,
    Call::TakeOver { counter: 4 },
    Call::TakeOver { counter: 3 },
    Call::Renew { seen: None },
    Call::Renew { seen: Some(4) },
    Call::Renew { seen: Some(3) },
    Call::Checkpoint,
    Call::CheckpointRenewing,
    Call::Release,
    Call::HandOver,
    Call::Ask,
    Call::Withdraw,
    Call::Delete { counter: 4 },
    Call::Commit {
        seen: 4,
        writes: true,
    },
    Call::Commit {
        seen: 3,
        writes: true,
    },
    Call::Commit {
        seen: 4,
        writes: false,
    },
    Call::Commit {
        seen: 3,
        writes: false,
    },
];

impl Call {
    /// A held write's fence counter and the write, as the rules know them; `None` for the
    /// other calls.
    fn held_write(self, now_ms: u64) -> Option<(Option<u64>, rules::Held<'static>)> {
        let lease_ms = millis(LEASE);
        Some(match self {
            Self::Renew { seen } => (seen, rules::Held::renew(now_ms, lease_ms)),
            Self::Checkpoint => (
                None,
                rules::Held::Checkpoint {
                    checkpoint: "200",
                    behind_ms: None,
                    expiry_ms: None,
                },
            ),
            Self::CheckpointRenewing => (
                None,
                rules::Held::Checkpoint {
                    checkpoint: "200",
                    behind_ms: Some(7),
                    expiry_ms: Some(now_ms + lease_ms),
                },
            ),
            Self::Release => (None, rules::Held::Release),
            Self::Commit { seen, .. } => (
                Some(seen),
                rules::Held::Commit {
                    checkpoint: "500",
                    behind_ms: Some(7),
                    expiry_ms: now_ms + lease_ms,
                    token: TOKEN,
                    prior: None,
                },
            ),
            Self::HandOver => (
                None,
                rules::Held::hand_over(C, Some("300"), now_ms, lease_ms),
            ),
            Self::Take
            | Self::TakeSeen
            | Self::TakeOver { .. }
            | Self::Ask
            | Self::Withdraw
            | Self::Delete { .. } => {
                return None;
            }
        })
    }

    /// The row the rules leave, or `None` where they refuse.
    fn ruled(self, row: Option<&LeaseState>, now_ms: u64) -> Option<LeaseState> {
        if let Some((seen, write)) = self.held_write(now_ms) {
            return rules::held(row, A, seen, &write);
        }
        match self {
            Self::Take | Self::TakeSeen | Self::TakeOver { .. } => rules::take(
                row,
                &rules::Take {
                    owner: A,
                    now_ms,
                    lease_ms: millis(LEASE),
                    start: Some("TRIM_HORIZON"),
                    seen_row: matches!(self, Self::TakeSeen),
                    over: match self {
                        Self::TakeOver { counter } => Some(rules::Over { holder: B, counter }),
                        _ => None,
                    },
                },
            ),
            Self::Ask => rules::ask_handoff(row, A, 4, C, now_ms),
            Self::Withdraw => rules::withdraw_handoff(row, C),
            Self::Delete { counter } => {
                rules::deletable(row, counter, now_ms).then(LeaseState::default)
            }
            Self::Renew { .. }
            | Self::Checkpoint
            | Self::CheckpointRenewing
            | Self::Release
            | Self::HandOver
            | Self::Commit { .. } => unreachable!("a held write"),
        }
    }

    /// Whether the rules take a refusal of this held write by `row` for the write's own
    /// earlier attempt having landed (a store answers that as a success, leaving the row).
    fn refusal_landed(self, row: Option<&LeaseState>, now_ms: u64) -> bool {
        let (Some((seen, write)), Some(row)) = (self.held_write(now_ms), row) else {
            return false;
        };
        let sent = Fence {
            counter: seen,
            uncertain: false,
        };
        matches!(
            sent.refused_by(row, A, Some(&write.effect(A)), false),
            rules::Refusal::Landed(_)
        )
    }

    /// Makes the call through `store`: whether the store accepted it.
    async fn make(self, store: &DynamoLeaseStore, key: &LeaseKey, now_ms: u64) -> bool {
        match self {
            Self::Take => store
                .acquire_from(key, A, LEASE, "TRIM_HORIZON")
                .await
                .is_ok(),
            Self::TakeOver { counter } => store
                .take_over(key, A, LEASE, "TRIM_HORIZON", B, counter)
                .await
                .is_ok(),
            Self::TakeSeen => {
                store.remember(key);
                store
                    .acquire_from(key, A, LEASE, "TRIM_HORIZON")
                    .await
                    .is_ok()
            }
            Self::Renew { seen } => {
                if let Some(counter) = seen {
                    store.set_fence(
                        key,
                        Fence {
                            counter: Some(counter),
                            uncertain: false,
                        },
                    );
                }
                store.renew(key, A, LEASE).await.is_ok()
            }
            Self::Checkpoint => store.checkpoint(key, A, "200").await.is_ok(),
            Self::CheckpointRenewing => store
                .checkpoint_and_renew_behind(key, A, "200", Some(7), LEASE)
                .await
                .is_ok(),
            Self::Release => store.release(key, A).await.is_ok(),
            Self::HandOver => store.hand_over(key, A, C, Some("300"), LEASE).await.is_ok(),
            Self::Ask => store
                .ask_handoff(key, A, 4, C, now_ms)
                .await
                .expect("the local stack answers"),
            Self::Withdraw => store
                .withdraw_handoff(key, C)
                .await
                .expect("the local stack answers"),
            Self::Delete { counter } => store
                .delete(key, counter)
                .await
                .expect("the local stack answers"),
            Self::Commit { seen, writes } => {
                store.set_fence(
                    key,
                    Fence {
                        counter: Some(seen),
                        uncertain: false,
                    },
                );
                let staged = writes.then(|| effect_write(store, key));
                let request = CommitRequest {
                    owner: A,
                    token: TOKEN,
                    request_token: "rules-commit-token-00",
                    units: staged
                        .map(|item| (crate::commit::UnitId(1), vec![item]))
                        .into_iter()
                        .collect(),
                    rows: vec![CommitRow {
                        key,
                        checkpoint: "500",
                        behind_ms: Some(7),
                        expiry_ms: now_ms + millis(LEASE),
                        prior: None,
                    }],
                };
                matches!(store.commit(&request).await, CommitAnswer::Done)
            }
        }
    }
}

/// The key of the item a case's commit writes beside its row (in the same table).
fn effect_key(key: &LeaseKey) -> String {
    format!("effect-of-{}", key.row_key())
}

/// A commit's staged write: puts the item of [`effect_key`].
fn effect_write(store: &DynamoLeaseStore, key: &LeaseKey) -> TransactWriteItem {
    let put = aws_sdk_dynamodb::types::Put::builder()
        .table_name(store.table())
        .item(KEY, string(&effect_key(key)))
        .build()
        .expect("a put");
    TransactWriteItem::builder().put(put).build()
}

/// Whether the item of [`effect_key`] was written.
async fn effect_written(store: &DynamoLeaseStore, key: &LeaseKey) -> bool {
    store
        .client
        .get_item()
        .table_name(store.table())
        .key(KEY, string(&effect_key(key)))
        .consistent_read(true)
        .send()
        .await
        .expect("a read")
        .item
        .is_some()
}

impl Call {
    /// Checks what a call leaves beside its row: a commit's staged write landed exactly when
    /// the row moved. `Some` says what differs.
    async fn beside(self, store: &DynamoLeaseStore, key: &LeaseKey, moved: bool) -> Option<String> {
        let Self::Commit { writes: true, .. } = self else {
            return None;
        };
        let written = effect_written(store, key).await;
        (written != moved).then(|| {
            format!(
                "its staged write {} while the row {}",
                if written { "landed" } else { "did not land" },
                if moved { "moved" } else { "did not move" },
            )
        })
    }
}

/// The item that holds `row` under `key`.
fn item_of(key: &LeaseKey, row: &LeaseState) -> Item {
    let mut item = Item::from([
        (KEY.to_owned(), string(&key.row_key())),
        (EXPIRY.to_owned(), number(row.expiry_ms)),
        (COUNTER.to_owned(), number(row.counter)),
    ]);
    if let Some(owner) = &row.owner {
        item.insert(OWNER.to_owned(), string(owner));
    }
    if let Some(checkpoint) = &row.checkpoint {
        item.insert(CHECKPOINT.to_owned(), string(checkpoint));
    }
    if let Some(behind) = row.behind_ms {
        item.insert(CHECKPOINT_BEHIND.to_owned(), number(behind));
    }
    if let Some(token) = &row.commit_token {
        item.insert(COMMIT_TOKEN.to_owned(), string(token));
    }
    if let Some(asked) = &row.handoff {
        item.insert(HANDOFF_TO.to_owned(), string(&asked.to));
        item.insert(HANDOFF_ASKED.to_owned(), number(asked.asked_ms));
    }
    item
}

/// Whether `actual` is `expected`, the expiries within [`SLACK_MS`] of each other.
fn alike(actual: &LeaseState, expected: &LeaseState) -> bool {
    actual.expiry_ms.abs_diff(expected.expiry_ms) <= SLACK_MS
        && LeaseState {
            expiry_ms: expected.expiry_ms,
            ..actual.clone()
        } == *expected
}

/// A new table named after `name` on the local stack `KINESIS_TEST_ENDPOINT` names: the
/// configuration, the table's name and a store on it; `None` without the local stack.
async fn new_table(name: &str) -> Option<(aws_config::SdkConfig, String, DynamoLeaseStore)> {
    let endpoint = std::env::var("KINESIS_TEST_ENDPOINT").ok()?;
    let config = crate::local_stack_config(endpoint);
    let table = format!("{name}-{}", epoch_millis());
    let admin = DynamoLeaseStore::new(&config, table.clone());
    admin.create_table().await.expect("the table is created");
    Some((config, table, admin))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_call_on_every_row_leaves_what_the_rules_say() {
    let Some((config, table, admin)) = new_table("rules-cases").await else {
        return;
    };
    let mut failures = Vec::new();
    let mut cases = 0;
    for (n, call) in CALLS.into_iter().enumerate() {
        let count = rows(epoch_millis()).len();
        for m in 0..count {
            let now_ms = epoch_millis();
            let (name, row) = rows(now_ms).swap_remove(m);
            cases += 1;
            // A store object of its own per case: no fence but the one the case sets.
            let store = DynamoLeaseStore::new(&config, table.clone());
            let key = LeaseKey::new(format!("rules-{n}-{m}"), "shardId-000000000000");
            if let Some(row) = &row {
                admin
                    .client
                    .put_item()
                    .table_name(&table)
                    .set_item(Some(item_of(&key, row)))
                    .send()
                    .await
                    .expect("the row is put");
            }
            let expected = call.ruled(row.as_ref(), now_ms);
            let landed = expected.is_none() && call.refusal_landed(row.as_ref(), now_ms);
            let accepted = call.make(&store, &key, now_ms).await;
            let after = store.read(&key).await.expect("the row reads back");
            let case = format!("{call:?} on {name}");
            if accepted != (expected.is_some() || landed) {
                failures.push(format!(
                    "{case}: the store {} it, the rules {} it",
                    if accepted { "accepted" } else { "refused" },
                    if expected.is_some() {
                        "accept"
                    } else if landed {
                        "take the refusal for its own landing of"
                    } else {
                        "refuse"
                    },
                ));
                continue;
            }
            let left = match (&expected, call) {
                // A deletion leaves no row.
                (Some(_), Call::Delete { .. }) => None,
                (Some(expected), _) => Some(expected.clone()),
                (None, _) => row.clone(),
            };
            let same = match (&after, &left) {
                (Some(after), Some(left)) => alike(after, left),
                (None, None) => true,
                _ => false,
            };
            if !same {
                failures.push(format!(
                    "{case}: the row is {after:?}, the rules leave {left:?}"
                ));
            }
            if let Some(differs) = call.beside(&store, &key, expected.is_some()).await {
                failures.push(format!("{case}: {differs}"));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {cases} cases differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_take_admits_the_applications_the_rules_admit() {
    let Some((config, table, admin)) = new_table("rules-apps").await else {
        return;
    };
    let mut failures = Vec::new();
    for (n, ours) in [None, Some("w")].into_iter().enumerate() {
        for (m, theirs) in [None, Some("w"), Some("v")].into_iter().enumerate() {
            let key = LeaseKey::new(format!("apps-{n}-{m}"), "shardId-000000000000");
            let mut item = item_of(&key, &LeaseState::default());
            if let Some(theirs) = theirs {
                item.insert(APPLICATION.to_owned(), string(theirs));
            }
            admin
                .client
                .put_item()
                .table_name(&table)
                .set_item(Some(item))
                .send()
                .await
                .expect("the row is put");
            let store = DynamoLeaseStore::new(&config, table.clone());
            let store = match ours {
                Some(ours) => store.application(ours),
                None => store,
            };
            let taken = store.acquire(&key, A, LEASE).await.is_ok();
            if taken != rules::application_admits(ours, theirs) {
                failures.push(format!(
                    "a store of {ours:?} {} a released row of {theirs:?}",
                    if taken { "took" } else { "did not take" }
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

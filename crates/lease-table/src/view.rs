//! How a lease table looks on a terminal: pure functions of the rows and a clock, so the
//! formatting is tested without DynamoDB.

use std::collections::HashMap;

use ruststream_kinesis::{LeaseKey, LeaseState, Notice, SHARD_END, SHARD_SKIPPED};

/// One row of the table: its key, its state, and the application it names, if any.
pub type Row = (LeaseKey, LeaseState, Option<String>);

/// The notices of the streams whose rows are kept alive by their holders' beats
/// (`keep_leases_alive_by_beat`), by stream: such a row's expiry lies a thousand years ahead,
/// and it lasts as long as its holder's beat.
pub type Notices = HashMap<String, Notice>;

/// A held row's expiry as the takers judge it at `now_ms`: its own, or for a row kept alive by
/// beat its holder's beat in its stream's notice (0 when the notice shows none; `None` when the
/// notice could not be read); and whether it is kept by beat.
fn judged_expiry(
    key: &LeaseKey,
    row: &LeaseState,
    notices: &Notices,
    now_ms: u64,
) -> (Option<u64>, bool) {
    if !row.is_kept_by_beat(now_ms) {
        return (Some(row.expiry_ms), false);
    }
    let Some(notice) = notices.get(key.stream()) else {
        return (None, true);
    };
    let beat = row
        .owner
        .as_deref()
        .and_then(|holder| notice.beats.get(holder));
    (Some(beat.copied().unwrap_or(0)), true)
}

/// The column headers, in order.
pub const HEADERS: [&str; 9] = [
    "STREAM",
    "SHARD",
    "OWNER",
    "EXPIRES IN",
    "COUNTER",
    "CHECKPOINT",
    "BEHIND",
    "MOVE",
    "APPLICATION",
];

/// How many trailing digits of a long sequence number stay visible.
const KEPT_DIGITS: usize = 12;

/// What the lease of `key`'s row has left at `now_ms` (epoch milliseconds): `-` for a released
/// row, `expired` once its expiry has passed, else the time left in seconds with one decimal;
/// for a row kept alive by its holder's beat, the beat's (`4.2 s by beat`, `beat lapsed`, or
/// `beat unknown` when the stream's notice could not be read).
///
/// The expiry is written by the holder's clock and compared with this machine's, so it is as
/// exact as the two clocks agree.
#[must_use]
pub fn expires_in(key: &LeaseKey, row: &LeaseState, notices: &Notices, now_ms: u64) -> String {
    if row.owner.is_none() {
        return "-".to_owned();
    }
    let (Some(expiry_ms), by_beat) = judged_expiry(key, row, notices, now_ms) else {
        return "beat unknown".to_owned();
    };
    if expiry_ms <= now_ms {
        return if by_beat { "beat lapsed" } else { "expired" }.to_owned();
    }
    let left = expiry_ms - now_ms;
    format!(
        "{}.{} s{}",
        left / 1000,
        (left % 1000) / 100,
        if by_beat { " by beat" } else { "" }
    )
}

/// Whether a held row's lease (or its holder's beat) has expired at `now_ms` by this machine's
/// clock, without the takers' skew tolerance: what the EXPIRES IN column and the summary's
/// LAPSED count say. A beat that could not be read counts as held.
fn lapsed(key: &LeaseKey, row: &LeaseState, notices: &Notices, now_ms: u64) -> bool {
    judged_expiry(key, row, notices, now_ms)
        .0
        .is_some_and(|expiry_ms| expiry_ms <= now_ms)
}

/// A checkpoint that fits a column: `-` before the first one, `SHARD_END` and `SHARD_SKIPPED` as
/// they are, and a long
/// sequence number (Kinesis writes 56 digits) cut to its last digits after an ellipsis, which is
/// where consecutive checkpoints of one shard differ.
#[must_use]
pub fn checkpoint(row: &LeaseState) -> String {
    match row.checkpoint.as_deref() {
        None => "-".to_owned(),
        Some(mark @ (SHARD_END | SHARD_SKIPPED)) => mark.to_owned(),
        Some(sequence) if sequence.len() > KEPT_DIGITS + 4 => {
            format!("…{}", &sequence[sequence.len() - KEPT_DIGITS..])
        }
        Some(other) => other.to_owned(),
    }
}

/// How far behind its shard's newest record the reader was when it wrote the row's checkpoint:
/// `-` when the row does not say (a final checkpoint, a recorded start, a store that does not
/// keep it), milliseconds under a second, else seconds with one decimal.
#[must_use]
pub fn behind(row: &LeaseState) -> String {
    match row.behind_ms {
        None => "-".to_owned(),
        Some(ms) if ms < 1000 => format!("{ms} ms"),
        Some(ms) => format!("{}.{} s", ms / 1000, (ms % 1000) / 100),
    }
}

/// A handoff asked of the row's holder that still stands at `now_ms`: `to <instance>`;
/// `-` without one.
#[must_use]
pub fn handoff(row: &LeaseState, now_ms: u64) -> String {
    row.handoff_at(now_ms)
        .map_or_else(|| "-".to_owned(), |asked| format!("to {}", asked.to))
}

/// The cells of one row, in the order of [`HEADERS`]. A row of an earlier version of the crate,
/// keyed by the bare shard id, has no stream: it shows as `(legacy)`.
#[must_use]
pub fn cells(
    key: &LeaseKey,
    row: &LeaseState,
    application: Option<&str>,
    notices: &Notices,
    now_ms: u64,
) -> [String; 9] {
    let stream = if key.stream().is_empty() {
        "(legacy)"
    } else {
        key.stream()
    };
    [
        stream.to_owned(),
        key.shard().to_owned(),
        row.owner.clone().unwrap_or_else(|| "-".to_owned()),
        expires_in(key, row, notices, now_ms),
        row.counter.to_string(),
        checkpoint(row),
        behind(row),
        handoff(row, now_ms),
        application.unwrap_or("-").to_owned(),
    ]
}

/// What one owner holds, as the summary below the rows counts it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnerShare {
    pub owner: String,
    /// Rows whose lease still runs at the time of the look.
    pub held: usize,
    /// Rows still naming it whose lease has expired (it stopped renewing them: gone, stalled,
    /// or cut off from the table); another instance takes them.
    pub lapsed: usize,
}

/// Who holds how many rows at `now_ms`, by owner id in order; and how many rows no instance
/// holds, of which how many are finished (`SHARD_END` or `SHARD_SKIPPED`).
#[must_use]
pub fn shares(rows: &[Row], notices: &Notices, now_ms: u64) -> (Vec<OwnerShare>, usize, usize) {
    let mut by_owner: std::collections::BTreeMap<&str, OwnerShare> = Default::default();
    let (mut free, mut finished) = (0, 0);
    for (key, row, _) in rows {
        match &row.owner {
            Some(owner) => {
                let share = by_owner.entry(owner).or_insert_with(|| OwnerShare {
                    owner: owner.clone(),
                    held: 0,
                    lapsed: 0,
                });
                if lapsed(key, row, notices, now_ms) {
                    share.lapsed += 1;
                } else {
                    share.held += 1;
                }
            }
            None => {
                free += 1;
                if row.is_finished() || row.is_skipped() {
                    finished += 1;
                }
            }
        }
    }
    (by_owner.into_values().collect(), free, finished)
}

/// The view as one JSON document, for scripts: the table, the time of the look, every row (its
/// expiry and time left in milliseconds, its checkpoint in full and how far behind it was
/// written, a handoff asked of it) and
/// the summary per owner.
#[must_use]
pub fn json(table: &str, rows: &[Row], notices: &Notices, now_ms: u64) -> serde_json::Value {
    let rows_json: Vec<serde_json::Value> = rows
        .iter()
        .map(|(key, row, application)| {
            let (expiry_ms, by_beat) = judged_expiry(key, row, notices, now_ms);
            let expiry_ms = expiry_ms.filter(|_| row.owner.is_some());
            serde_json::json!({
                "stream": key.stream(),
                "shard": key.shard(),
                "owner": row.owner,
                "expiry_ms": expiry_ms,
                "expires_in_ms": expiry_ms.map(|expiry_ms| i128::from(expiry_ms) - i128::from(now_ms)),
                "kept_by_beat": by_beat,
                "counter": row.counter,
                "checkpoint": row.checkpoint,
                "behind_ms": row.behind_ms,
                "handoff": row.handoff.as_ref().map(|handoff| serde_json::json!({
                    "to": handoff.to,
                    "asked_ms": handoff.asked_ms,
                })),
                "application": application,
            })
        })
        .collect();
    let (owners, free, finished) = shares(rows, notices, now_ms);
    let owners: Vec<serde_json::Value> = owners
        .iter()
        .map(|share| {
            serde_json::json!({ "owner": share.owner, "held": share.held, "lapsed": share.lapsed })
        })
        .collect();
    serde_json::json!({
        "table": table,
        "now_ms": now_ms,
        "rows": rows_json,
        "owners": owners,
        "free": free,
        "finished": finished,
    })
}

/// The summary below the rows: per owner the rows it holds and those that lapsed, aligned, and
/// the rows nobody holds.
fn render_shares(rows: &[Row], notices: &Notices, now_ms: u64) -> String {
    let (owners, free, finished) = shares(rows, notices, now_ms);
    let mut out = String::new();
    if !owners.is_empty() {
        let width = owners
            .iter()
            .map(|share| share.owner.chars().count())
            .max()
            .unwrap_or(0)
            .max("OWNER".len());
        out.push_str(&format!("{:<width$}  HELD  LAPSED\n", "OWNER"));
        for share in &owners {
            out.push_str(&format!(
                "{:<width$}  {:<4}  {}\n",
                share.owner, share.held, share.lapsed
            ));
        }
    }
    out.push_str(&format!(
        "held by nobody: {free} row{} ({finished} finished)\n",
        if free == 1 { "" } else { "s" }
    ));
    out
}

/// The whole view: a line naming the table and its row count, then aligned columns, then after
/// a blank line the summary per owner; or a line saying the table has no rows yet.
#[must_use]
pub fn render(table: &str, rows: &[Row], notices: &Notices, now_ms: u64) -> String {
    if rows.is_empty() {
        return format!(
            "no leases yet in table {table}: no instance has taken a shard (start one, or check \
             that it uses this table)\n"
        );
    }
    let body: Vec<[String; 9]> = rows
        .iter()
        .map(|(key, row, application)| cells(key, row, application.as_deref(), notices, now_ms))
        .collect();
    let mut widths = HEADERS.map(|header| header.chars().count());
    for line in &body {
        for (width, cell) in widths.iter_mut().zip(line) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = format!(
        "lease table {table}: {} row{}\n",
        rows.len(),
        if rows.len() == 1 { "" } else { "s" }
    );
    let header = HEADERS.map(str::to_owned);
    for line in std::iter::once(&header).chain(&body) {
        let mut text = String::new();
        for (i, (cell, width)) in line.iter().zip(widths).enumerate() {
            if i + 1 == line.len() {
                text.push_str(cell);
            } else {
                let pad = width - cell.chars().count();
                text.push_str(cell);
                text.push_str(&" ".repeat(pad + 2));
            }
        }
        out.push_str(text.trim_end());
        out.push('\n');
    }
    out.push('\n');
    out.push_str(&render_shares(rows, notices, now_ms));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_800_000_000_000;
    const SEQUENCE: &str = "49680672754139884217042819293168615594233462764991414274";

    fn row(owner: Option<&str>, expiry_ms: u64, counter: u64, cp: Option<&str>) -> LeaseState {
        LeaseState {
            owner: owner.map(str::to_owned),
            expiry_ms,
            counter,
            checkpoint: cp.map(str::to_owned),
            behind_ms: None,
            handoff: None,
            commit_token: None,
        }
    }

    fn key() -> LeaseKey {
        LeaseKey::new("orders", "shardId-000000000000")
    }

    #[test]
    fn a_row_kept_alive_by_beat_shows_its_holders_beat() {
        let kept = NOW + 1_000 * 60 * 60 * 24 * 365 * 1000;
        let notices: Notices = [(
            "orders".to_owned(),
            Notice {
                beats: [("pod-a#1".to_owned(), NOW + 4_200)].into(),
                ..Notice::default()
            },
        )]
        .into();
        let held = row(Some("pod-a#1"), kept, 3, None);
        assert_eq!(expires_in(&key(), &held, &notices, NOW), "4.2 s by beat");
        // Its holder's beat lapsed, or the notice shows none: lapsed, whatever the row's expiry.
        assert_eq!(
            expires_in(&key(), &held, &notices, NOW + 5_000),
            "beat lapsed"
        );
        let stranger = row(Some("pod-z"), kept, 3, None);
        assert_eq!(expires_in(&key(), &stranger, &notices, NOW), "beat lapsed");
        // A notice that could not be read says nothing of the beat.
        assert_eq!(
            expires_in(&key(), &held, &Notices::new(), NOW),
            "beat unknown"
        );
        let rows = vec![(key(), held, None), (key(), stranger, None)];
        let (owners, _, _) = shares(&rows, &notices, NOW);
        assert_eq!(
            owners
                .iter()
                .map(|share| (share.owner.as_str(), share.held, share.lapsed))
                .collect::<Vec<_>>(),
            vec![("pod-a#1", 1, 0), ("pod-z", 0, 1)]
        );
        let view = json("t", &rows, &notices, NOW);
        assert_eq!(view["rows"][0]["expires_in_ms"], 4_200);
        assert_eq!(view["rows"][0]["kept_by_beat"], true);
    }

    #[test]
    fn the_time_left_is_shown_in_seconds_until_the_lease_expires() {
        assert_eq!(
            expires_in(
                &key(),
                &row(Some("a"), NOW + 7_250, 1, None),
                &Notices::new(),
                NOW
            ),
            "7.2 s"
        );
        assert_eq!(
            expires_in(
                &key(),
                &row(Some("a"), NOW + 10_000, 1, None),
                &Notices::new(),
                NOW
            ),
            "10.0 s"
        );
        assert_eq!(
            expires_in(
                &key(),
                &row(Some("a"), NOW + 40, 1, None),
                &Notices::new(),
                NOW
            ),
            "0.0 s"
        );
        assert_eq!(
            expires_in(&key(), &row(Some("a"), NOW, 1, None), &Notices::new(), NOW),
            "expired"
        );
        assert_eq!(
            expires_in(
                &key(),
                &row(Some("a"), NOW - 3_000, 1, None),
                &Notices::new(),
                NOW
            ),
            "expired"
        );
        // A released row has no lease to run out.
        assert_eq!(
            expires_in(&key(), &row(None, 0, 4, None), &Notices::new(), NOW),
            "-"
        );
    }

    #[test]
    fn long_sequence_numbers_keep_their_last_digits() {
        assert_eq!(
            checkpoint(&row(None, 0, 1, Some(SEQUENCE))),
            "…764991414274"
        );
        assert_eq!(checkpoint(&row(None, 0, 1, Some(SHARD_END))), "SHARD_END");
        assert_eq!(
            checkpoint(&row(None, 0, 1, Some(SHARD_SKIPPED))),
            "SHARD_SKIPPED"
        );
        assert_eq!(checkpoint(&row(None, 0, 1, Some("12345"))), "12345");
        assert_eq!(checkpoint(&row(None, 0, 1, None)), "-");
    }

    #[test]
    fn how_far_behind_shows_in_milliseconds_then_seconds() {
        let mut row = row(Some("pod-a"), NOW, 1, Some("12345"));
        assert_eq!(behind(&row), "-");
        row.behind_ms = Some(0);
        assert_eq!(behind(&row), "0 ms");
        row.behind_ms = Some(999);
        assert_eq!(behind(&row), "999 ms");
        row.behind_ms = Some(61_250);
        assert_eq!(behind(&row), "61.2 s");
    }

    #[test]
    fn the_table_is_aligned_in_columns() {
        let mut reading = row(Some("pod-a"), NOW + 7_200, 14, Some(SEQUENCE));
        reading.behind_ms = Some(2_540);
        reading.handoff = Some(ruststream_kinesis::Handoff {
            to: "pod-b".to_owned(),
            asked_ms: NOW - 500,
        });
        let rows = vec![
            (
                LeaseKey::new("warehouse-orders", "shardId-000000000000"),
                reading,
                Some("warehouse".to_owned()),
            ),
            (
                LeaseKey::new("warehouse-orders", "shardId-000000000001"),
                row(None, 0, 9, Some(SHARD_END)),
                Some("warehouse".to_owned()),
            ),
            (
                LeaseKey::new("", "shardId-000000000002"),
                row(Some("old-version"), NOW - 1, 41, None),
                None,
            ),
        ];
        let expected = "\
lease table warehouse-leases: 3 rows
STREAM            SHARD                 OWNER        EXPIRES IN  COUNTER  CHECKPOINT     BEHIND  MOVE      APPLICATION
warehouse-orders  shardId-000000000000  pod-a        7.2 s       14       …764991414274  2.5 s   to pod-b  warehouse
warehouse-orders  shardId-000000000001  -            -           9        SHARD_END      -       -         warehouse
(legacy)          shardId-000000000002  old-version  expired     41       -              -       -         -

OWNER        HELD  LAPSED
old-version  0     1
pod-a        1     0
held by nobody: 1 row (1 finished)
";
        assert_eq!(
            render("warehouse-leases", &rows, &Notices::new(), NOW),
            expected
        );
    }

    #[test]
    fn the_summary_counts_each_owners_live_and_lapsed_rows() {
        let key = |n: u32| LeaseKey::new("orders", format!("shardId-{n:012}"));
        let rows = vec![
            (
                key(0),
                row(Some("pod-a"), NOW + 5_000, 3, Some(SEQUENCE)),
                None,
            ),
            (key(1), row(Some("pod-a"), NOW + 1, 3, None), None),
            (key(2), row(Some("pod-b"), NOW + 9_000, 7, None), None),
            // Expired by this clock: lapsed, though within the takers' skew tolerance.
            (key(3), row(Some("pod-b"), NOW, 7, None), None),
            (key(4), row(None, 0, 2, Some(SEQUENCE)), None),
            (key(5), row(None, 0, 2, Some(SHARD_SKIPPED)), None),
        ];
        let (owners, free, finished) = shares(&rows, &Notices::new(), NOW);
        assert_eq!(
            owners,
            vec![
                OwnerShare {
                    owner: "pod-a".to_owned(),
                    held: 2,
                    lapsed: 0
                },
                OwnerShare {
                    owner: "pod-b".to_owned(),
                    held: 1,
                    lapsed: 1
                },
            ]
        );
        assert_eq!((free, finished), (2, 1));
    }

    #[test]
    fn the_json_view_carries_every_field_and_the_summary() {
        let mut asked = row(Some("pod-a"), NOW + 7_200, 14, Some(SEQUENCE));
        asked.behind_ms = Some(730);
        asked.handoff = Some(ruststream_kinesis::Handoff {
            to: "pod-b".to_owned(),
            asked_ms: NOW - 500,
        });
        let rows = vec![
            (
                LeaseKey::new("orders", "shardId-000000000000"),
                asked,
                Some("warehouse".to_owned()),
            ),
            (
                LeaseKey::new("orders", "shardId-000000000001"),
                row(None, 0, 9, Some(SHARD_END)),
                None,
            ),
        ];
        let view = json("warehouse-leases", &rows, &Notices::new(), NOW);
        assert_eq!(view["table"], "warehouse-leases");
        assert_eq!(view["now_ms"], NOW);
        let first = &view["rows"][0];
        assert_eq!(first["stream"], "orders");
        assert_eq!(first["shard"], "shardId-000000000000");
        assert_eq!(first["owner"], "pod-a");
        assert_eq!(first["expiry_ms"], NOW + 7_200);
        assert_eq!(first["expires_in_ms"], 7_200);
        assert_eq!(first["counter"], 14);
        assert_eq!(first["checkpoint"], SEQUENCE, "the checkpoint in full");
        assert_eq!(first["behind_ms"], 730);
        assert_eq!(first["handoff"]["to"], "pod-b");
        assert_eq!(first["handoff"]["asked_ms"], NOW - 500);
        assert_eq!(first["application"], "warehouse");
        let second = &view["rows"][1];
        assert!(second["owner"].is_null() && second["expires_in_ms"].is_null());
        assert_eq!(second["checkpoint"], SHARD_END);
        assert!(second["behind_ms"].is_null() && second["application"].is_null());
        assert_eq!(
            view["owners"],
            serde_json::json!([{ "owner": "pod-a", "held": 1, "lapsed": 0 }])
        );
        assert_eq!((&view["free"], &view["finished"]), (&1.into(), &1.into()));
    }

    #[test]
    fn an_empty_table_says_so() {
        let text = render("warehouse-leases", &[], &Notices::new(), NOW);
        assert!(
            text.starts_with("no leases yet in table warehouse-leases"),
            "{text}"
        );
    }
}

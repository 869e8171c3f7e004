//! How a lease table looks on a terminal: pure functions of the rows and a clock, so the
//! formatting is tested without DynamoDB.

use ruststream_kinesis::{LeaseKey, LeaseState, SHARD_END, SHARD_SKIPPED};

/// The column headers, in order.
pub const HEADERS: [&str; 6] = [
    "STREAM",
    "SHARD",
    "OWNER",
    "EXPIRES IN",
    "COUNTER",
    "CHECKPOINT",
];

/// How many trailing digits of a long sequence number stay visible.
const KEPT_DIGITS: usize = 12;

/// What the lease has left at `now_ms` (epoch milliseconds): `-` for a released row, `expired`
/// once its expiry has passed, else the time left in seconds with one decimal.
///
/// The expiry is written by the holder's clock and compared with this machine's, so it is as
/// exact as the two clocks agree.
#[must_use]
pub fn expires_in(row: &LeaseState, now_ms: u64) -> String {
    if row.owner.is_none() {
        return "-".to_owned();
    }
    if row.expiry_ms <= now_ms {
        return "expired".to_owned();
    }
    let left = row.expiry_ms - now_ms;
    format!("{}.{} s", left / 1000, (left % 1000) / 100)
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

/// The cells of one row, in the order of [`HEADERS`]. A row of an earlier version of the crate,
/// keyed by the bare shard id, has no stream: it shows as `(legacy)`.
#[must_use]
pub fn cells(key: &LeaseKey, row: &LeaseState, now_ms: u64) -> [String; 6] {
    let stream = if key.stream().is_empty() {
        "(legacy)"
    } else {
        key.stream()
    };
    [
        stream.to_owned(),
        key.shard().to_owned(),
        row.owner.clone().unwrap_or_else(|| "-".to_owned()),
        expires_in(row, now_ms),
        row.counter.to_string(),
        checkpoint(row),
    ]
}

/// The whole view: a line naming the table and its row count, then aligned columns, or a line
/// saying the table has no rows yet.
#[must_use]
pub fn render(table: &str, rows: &[(LeaseKey, LeaseState)], now_ms: u64) -> String {
    if rows.is_empty() {
        return format!(
            "no leases yet in table {table}: no instance has taken a shard (start one, or check \
             that it uses this table)\n"
        );
    }
    let body: Vec<[String; 6]> = rows
        .iter()
        .map(|(key, row)| cells(key, row, now_ms))
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
            handoff: None,
        }
    }

    #[test]
    fn the_time_left_is_shown_in_seconds_until_the_lease_expires() {
        assert_eq!(
            expires_in(&row(Some("a"), NOW + 7_250, 1, None), NOW),
            "7.2 s"
        );
        assert_eq!(
            expires_in(&row(Some("a"), NOW + 10_000, 1, None), NOW),
            "10.0 s"
        );
        assert_eq!(expires_in(&row(Some("a"), NOW + 40, 1, None), NOW), "0.0 s");
        assert_eq!(expires_in(&row(Some("a"), NOW, 1, None), NOW), "expired");
        assert_eq!(
            expires_in(&row(Some("a"), NOW - 3_000, 1, None), NOW),
            "expired"
        );
        // A released row has no lease to run out.
        assert_eq!(expires_in(&row(None, 0, 4, None), NOW), "-");
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
    fn the_table_is_aligned_in_columns() {
        let rows = vec![
            (
                LeaseKey::new("warehouse-orders", "shardId-000000000000"),
                row(Some("pod-a"), NOW + 7_200, 14, Some(SEQUENCE)),
            ),
            (
                LeaseKey::new("warehouse-orders", "shardId-000000000001"),
                row(None, 0, 9, Some(SHARD_END)),
            ),
            (
                LeaseKey::new("", "shardId-000000000002"),
                row(Some("old-version"), NOW - 1, 41, None),
            ),
        ];
        let expected = "\
lease table warehouse-leases: 3 rows
STREAM            SHARD                 OWNER        EXPIRES IN  COUNTER  CHECKPOINT
warehouse-orders  shardId-000000000000  pod-a        7.2 s       14       …764991414274
warehouse-orders  shardId-000000000001  -            -           9        SHARD_END
(legacy)          shardId-000000000002  old-version  expired     41       -
";
        assert_eq!(render("warehouse-leases", &rows, NOW), expected);
    }

    #[test]
    fn an_empty_table_says_so() {
        let text = render("warehouse-leases", &[], NOW);
        assert!(
            text.starts_with("no leases yet in table warehouse-leases"),
            "{text}"
        );
    }
}

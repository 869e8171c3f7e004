//! The key attributes of the tables a commit puts items into, asked of `DescribeTable` once per
//! table and kept for the handlings that stage puts after it (see `lease::CommitTables`).

use super::*;

impl DynamoLeaseStore {
    /// Asks `DescribeTable` for the key of each table `request` puts items into that was never
    /// asked about: once per table for this store, bounded; one that does not answer is not
    /// asked again, and its puts keep counting as touching every item of the table.
    pub(super) async fn learn_key_schemas(&self, request: &CommitRequest<'_>) {
        for write in request.units.iter().flat_map(|(_, writes)| writes) {
            let Some(table) = write.put().map(|put| put.table_name()) else {
                continue;
            };
            if !self.commit_tables.unasked(table) {
                continue;
            }
            let key = self
                .describe_table(table)
                .await
                .and_then(Result::ok)
                .and_then(|answer| answer.table)
                .map(|table| {
                    table
                        .key_schema()
                        .iter()
                        .map(|key| key.attribute_name().to_owned())
                        .collect()
                });
            if key.is_none() {
                tracing::warn!(
                    table,
                    "exactly once: the key of table {table:?} is not known (DescribeTable did \
                     not answer; allow dynamodb:DescribeTable on it), so handlings that put \
                     items into it commit one at a time"
                );
            }
            self.commit_tables.learn(table, key);
        }
    }
}

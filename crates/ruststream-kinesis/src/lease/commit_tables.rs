//! Exactly once: what the lease store knows of the tables a commit writes, shared with the
//! handlings that stage writes. A put names its item whole, not its key: the key attributes of
//! each table handlers put into are asked of `DescribeTable` once per table, and with the key
//! known a staged put touches one item, so the puts of several handlings into one table fold
//! into one commit; without it (not asked yet, not allowed, in process), a put counts as touching
//! every item of its table, which folds less and never wrongly. And the lease table's region:
//! a transaction runs in one region, so a write naming a table elsewhere by its ARN is refused
//! where it is staged.

use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};

use aws_sdk_dynamodb::types::TransactWriteItem;

/// A table's key attribute names.
type Key = Arc<[String]>;

/// The key attribute names of each table asked about (`None`: not to be known), and the lease
/// table's region once its ARN is known. Clones share one cache.
#[derive(Debug, Clone, Default)]
pub(crate) struct CommitTables {
    known: Arc<Known>,
}

#[derive(Debug, Default)]
struct Known {
    keys: RwLock<HashMap<String, Option<Key>>>,
    lease_region: RwLock<Option<String>>,
}

impl CommitTables {
    /// The names of `table`'s key attributes, once known.
    pub(crate) fn key_of(&self, table: &str) -> Option<Key> {
        let keys = self
            .known
            .keys
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        keys.get(table).cloned().flatten()
    }

    /// Whether `table` was never asked about.
    pub(crate) fn unasked(&self, table: &str) -> bool {
        let keys = self
            .known
            .keys
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        !keys.contains_key(table)
    }

    /// What asking about `table` answered: its key attributes' names, or `None` for good.
    pub(crate) fn learn(&self, table: &str, key: Option<Vec<String>>) {
        let mut keys = self
            .known
            .keys
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        keys.insert(table.to_owned(), key.map(Into::into));
    }

    /// The lease table's ARN is `arn`: commits run in its region.
    pub(crate) fn lease_table_is(&self, arn: &str) {
        if let Some(region) = arn_part(arn, 3) {
            *self
                .known
                .lease_region
                .write()
                .unwrap_or_else(PoisonError::into_inner) = Some(region.to_owned());
        }
    }

    /// Where `table` (as a write names it) is in another region than the lease table: that
    /// region and the lease table's. A table named without an ARN is in the lease table's.
    pub(crate) fn other_region(&self, table: &str) -> Option<(String, String)> {
        let region = arn_part(table, 3)?;
        let lease_region = self
            .known
            .lease_region
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()?;
        (region != lease_region).then(|| (region.to_owned(), lease_region))
    }
}

/// The table `write` writes to, as it names it (`None`: it carries no action, or several).
pub(crate) fn table_of(write: &TransactWriteItem) -> Option<&str> {
    let tables = [
        write.put().map(|put| put.table_name()),
        write.update().map(|update| update.table_name()),
        write.delete().map(|delete| delete.table_name()),
        write.condition_check().map(|check| check.table_name()),
    ];
    let mut named = tables.into_iter().flatten();
    match (named.next(), named.next()) {
        (Some(table), None) => Some(table),
        _ => None,
    }
}

/// Part `n` of an ARN (`arn:partition:service:region:account:resource`: 3 is the region, 4 the
/// account); `None` for text that is not an ARN, or an empty part.
pub(crate) fn arn_part(arn: &str, n: usize) -> Option<&str> {
    let mut parts = arn.splitn(6, ':');
    (parts.next()? == "arn").then_some(())?;
    let part = parts.nth(n - 1)?;
    let resource = parts.nth(4 - n)?;
    (!part.is_empty() && !resource.is_empty()).then_some(part)
}

#[cfg(test)]
mod tests {
    use aws_sdk_dynamodb::types::{AttributeValue, Delete, TransactWriteItem};

    use super::{CommitTables, arn_part, table_of};

    #[test]
    fn a_write_names_the_table_of_its_one_action() {
        let delete = Delete::builder()
            .table_name("counts")
            .key("id", AttributeValue::S("r1".to_owned()))
            .build()
            .unwrap();
        let write = TransactWriteItem::builder().delete(delete).build();
        assert_eq!(table_of(&write), Some("counts"));
        assert_eq!(table_of(&TransactWriteItem::builder().build()), None);
    }

    #[test]
    fn a_table_is_asked_about_once_and_its_key_shared_by_clones() {
        let tables = CommitTables::default();
        let clone = tables.clone();
        assert!(tables.unasked("counts") && tables.key_of("counts").is_none());
        clone.learn("counts", Some(vec!["id".to_owned()]));
        assert_eq!(
            tables.key_of("counts").as_deref(),
            Some(&["id".to_owned()][..])
        );
        tables.learn("denied", None);
        assert!(!tables.unasked("denied") && tables.key_of("denied").is_none());
    }

    #[test]
    fn a_table_named_by_its_arn_in_another_region_is_told_apart() {
        let tables = CommitTables::default();
        let elsewhere = "arn:aws:dynamodb:eu-west-1:123456789012:table/counts";
        assert_eq!(
            tables.other_region(elsewhere),
            None,
            "the lease table's not known yet"
        );
        tables.lease_table_is("arn:aws:dynamodb:us-east-1:123456789012:table/leases");
        assert_eq!(
            tables.other_region(elsewhere),
            Some(("eu-west-1".to_owned(), "us-east-1".to_owned()))
        );
        assert_eq!(
            tables.other_region("arn:aws:dynamodb:us-east-1:123456789012:table/counts"),
            None
        );
        assert_eq!(
            tables.other_region("counts"),
            None,
            "a name is the lease table's region"
        );
    }

    #[test]
    fn an_arn_names_its_region_and_account() {
        let arn = "arn:aws:dynamodb:us-east-1:123456789012:table/leases";
        assert_eq!(arn_part(arn, 3), Some("us-east-1"));
        assert_eq!(arn_part(arn, 4), Some("123456789012"));
        assert_eq!(arn_part("arn:aws:s3:::bucket", 4), None, "no account");
        assert_eq!(arn_part("leases", 3), None, "not an ARN");
        assert_eq!(
            arn_part("arn:aws:dynamodb:us-east-1:1", 4),
            None,
            "no resource"
        );
    }
}

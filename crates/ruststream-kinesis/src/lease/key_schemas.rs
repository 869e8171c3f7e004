//! Exactly once: the key attributes of the tables handlers put items into, as `DescribeTable`
//! answered them, once per table. A put names its item whole, not its key: with the table's key
//! known, a staged put touches one item, and the puts of several handlings into one table fold
//! into one commit; without it (not asked yet, not allowed, in process), a put counts as
//! touching every item of its table, which folds less and never wrongly.

use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};

/// A table's key attribute names.
type Key = Arc<[String]>;

/// The key attribute names of each table asked about (`None`: not to be known). Clones share
/// one cache.
#[derive(Debug, Clone, Default)]
pub(crate) struct KeySchemas {
    tables: Arc<RwLock<HashMap<String, Option<Key>>>>,
}

impl KeySchemas {
    /// The names of `table`'s key attributes, once known.
    pub(crate) fn key_of(&self, table: &str) -> Option<Key> {
        let tables = self.tables.read().unwrap_or_else(PoisonError::into_inner);
        tables.get(table).cloned().flatten()
    }

    /// Whether `table` was never asked about.
    pub(crate) fn unasked(&self, table: &str) -> bool {
        let tables = self.tables.read().unwrap_or_else(PoisonError::into_inner);
        !tables.contains_key(table)
    }

    /// What asking about `table` answered: its key attributes' names, or `None` for good.
    pub(crate) fn learn(&self, table: &str, key: Option<Vec<String>>) {
        let mut tables = self.tables.write().unwrap_or_else(PoisonError::into_inner);
        tables.insert(table.to_owned(), key.map(Into::into));
    }
}

#[cfg(test)]
mod tests {
    use super::KeySchemas;

    #[test]
    fn a_table_is_asked_about_once_and_its_key_shared_by_clones() {
        let schemas = KeySchemas::default();
        let clone = schemas.clone();
        assert!(schemas.unasked("counts") && schemas.key_of("counts").is_none());
        clone.learn("counts", Some(vec!["id".to_owned()]));
        assert_eq!(
            schemas.key_of("counts").as_deref(),
            Some(&["id".to_owned()][..])
        );
        schemas.learn("denied", None);
        assert!(!schemas.unasked("denied") && schemas.key_of("denied").is_none());
    }
}

//! The check `connect` makes before anything is read: one consistent `GetItem` keyed by
//! `lease_key`, the call every reader makes anyway, answers whether the table exists and whether
//! it is keyed that way. Only when it is not does the store describe the table, to say how it is
//! keyed instead (a policy without `dynamodb:DescribeTable` gets DynamoDB's own words), or that
//! a table not found is still being created.

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::describe_table::{DescribeTableError, DescribeTableOutput};
use aws_sdk_dynamodb::types::{AttributeDefinition, KeySchemaElement};

use super::*;

/// The key the check reads: no shard's row, no notice (a `#` is in no stream name), and never
/// written.
const CHECK_KEY: &str = "#lease-table-check";

/// The words DynamoDB answers a key that does not fit the table's schema with: another key
/// attribute (`leaseKey`), a sort key beside it, or another type.
const KEY_MISMATCH: [&str; 2] = [
    "key element does not match the schema",
    "Type mismatch for key",
];

/// Whether DynamoDB's answer says the table is keyed otherwise than the store's key.
pub(super) fn is_key_mismatch(code: Option<&str>, message: Option<&str>) -> bool {
    code == Some("ValidationException")
        && message.is_some_and(|said| KEY_MISMATCH.iter().any(|words| said.contains(words)))
}

/// How long the check waits for the `DescribeTable` that says what is wrong with a table.
const DESCRIBE_BOUND: Duration = Duration::from_secs(2);

impl DynamoLeaseStore {
    /// One consistent `GetItem` of a key no row has: a table that does not exist or is keyed
    /// otherwise fails with what is wrong and the fix; anything that may pass (a table still
    /// being created, throttling, a 5xx, no answer, a policy that allows the application's own
    /// keys only) is a warning, and the start goes on.
    pub(super) async fn check_table(&self) -> Result<(), LeaseError> {
        let whole = LeaseKey::new("*", "*");
        let read = self
            .client
            .get_item()
            .table_name(self.table())
            .key(KEY, AttributeValue::S(CHECK_KEY.to_owned()))
            .consistent_read(true)
            .send()
            .await;
        let Err(error) = read else {
            return Ok(());
        };
        let said = || self.failure(&whole, "check", &error);
        match error.code() {
            Some("ValidationException") => Err(self.refused_key(error.message()).await),
            Some("ResourceNotFoundException") => match self.describe().await {
                // Just created, and not active yet: the calls that follow find it.
                Some(table) if table.table_status() == Some(&TableStatus::Creating) => {
                    tracing::warn!(table = %self.table, "the lease table is still being created; starting anyway");
                    Ok(())
                }
                _ => Err(said()),
            },
            _ => {
                tracing::warn!(
                    table = %self.table,
                    error = %said(),
                    "the lease table could not be checked at startup; starting anyway, and the \
                     lease calls that follow report what is wrong"
                );
                Ok(())
            }
        }
    }

    /// [`LeaseError::TableMismatch`] for this table.
    pub(super) fn mismatch(&self, problem: String) -> LeaseError {
        LeaseError::TableMismatch {
            table: self.table.to_string(),
            problem,
            create_command: self.create_command(),
        }
    }

    /// The error of a read keyed by `lease_key` that DynamoDB refused as invalid (`said`): the
    /// table keyed otherwise, as `DescribeTable` shows it (DynamoDB's words where it cannot be
    /// described); any other refusal (a table name DynamoDB rejects) in DynamoDB's words.
    async fn refused_key(&self, said: Option<&str>) -> LeaseError {
        let said = said.unwrap_or("ValidationException");
        let Some(table) = self.describe().await else {
            return if is_key_mismatch(Some("ValidationException"), Some(said)) {
                self.mismatch(format!(
                    "DynamoDB refused a read keyed by the string lease_key ({said})"
                ))
            } else {
                self.malformed(
                    &LeaseKey::new("*", "*"),
                    "check",
                    &format!("ValidationException: {said}"),
                )
            };
        };
        let (schema, attributes) = (table.key_schema(), table.attribute_definitions());
        let right = schema.len() == 1
            && schema[0].attribute_name() == KEY
            && attributes.iter().any(|attribute| {
                attribute.attribute_name() == KEY
                    && attribute.attribute_type() == &ScalarAttributeType::S
            });
        if right {
            return self.malformed(
                &LeaseKey::new("*", "*"),
                "check",
                &format!("ValidationException: {said}"),
            );
        }
        self.mismatch(keyed_by(schema, attributes))
    }

    /// The lease table as `DescribeTable` answers within [`DESCRIBE_BOUND`]; `None` when it
    /// does not (a policy without `dynamodb:DescribeTable`, a table that does not exist, no
    /// answer).
    pub(super) async fn describe(&self) -> Option<aws_sdk_dynamodb::types::TableDescription> {
        self.describe_table(self.table()).await?.ok()?.table
    }

    /// `DescribeTable` of `table` (a name or an ARN), bounded by [`DESCRIBE_BOUND`]: its answer,
    /// or `None` when none came within it.
    pub(super) async fn describe_table(
        &self,
        table: &str,
    ) -> Option<Result<DescribeTableOutput, SdkError<DescribeTableError>>> {
        let described = self.client.describe_table().table_name(table).send();
        tokio::time::timeout(DESCRIBE_BOUND, described).await.ok()
    }
}

/// What `schema` keys a table by, in words, naming the Java KCL's layout when it is that.
fn keyed_by(schema: &[KeySchemaElement], attributes: &[AttributeDefinition]) -> String {
    let kind = |name: &str| {
        attributes
            .iter()
            .find(|attribute| attribute.attribute_name() == name)
            .map_or("?", |attribute| attribute.attribute_type().as_str())
    };
    let keys: Vec<String> = schema
        .iter()
        .map(|key| {
            let name = key.attribute_name();
            let role = match key.key_type() {
                KeyType::Hash => "partition key",
                KeyType::Range => "sort key",
                _ => "key",
            };
            format!("{role} {name} ({})", kind(name))
        })
        .collect();
    let kcl = schema
        .iter()
        .any(|key| key.attribute_name() == "leaseKey" && key.key_type() == &KeyType::Hash);
    let whose = if kcl {
        ", the layout of the Java KCL's lease table"
    } else {
        ""
    };
    format!("it is keyed by {}{whose}", keys.join(" and "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str, kind: KeyType) -> KeySchemaElement {
        KeySchemaElement::builder()
            .attribute_name(name)
            .key_type(kind)
            .build()
            .unwrap()
    }

    fn attribute(name: &str, kind: ScalarAttributeType) -> AttributeDefinition {
        AttributeDefinition::builder()
            .attribute_name(name)
            .attribute_type(kind)
            .build()
            .unwrap()
    }

    #[test]
    fn the_problem_names_each_key_and_the_java_kcl_layout() {
        assert_eq!(
            keyed_by(
                &[key("leaseKey", KeyType::Hash)],
                &[attribute("leaseKey", ScalarAttributeType::S)]
            ),
            "it is keyed by partition key leaseKey (S), the layout of the Java KCL's lease table"
        );
        assert_eq!(
            keyed_by(
                &[
                    key("lease_key", KeyType::Hash),
                    key("shard", KeyType::Range)
                ],
                &[
                    attribute("lease_key", ScalarAttributeType::S),
                    attribute("shard", ScalarAttributeType::S)
                ]
            ),
            "it is keyed by partition key lease_key (S) and sort key shard (S)"
        );
        assert_eq!(
            keyed_by(
                &[key("lease_key", KeyType::Hash)],
                &[attribute("lease_key", ScalarAttributeType::N)]
            ),
            "it is keyed by partition key lease_key (N)"
        );
    }

    #[test]
    fn only_the_schema_words_of_a_validation_exception_are_a_mismatch() {
        let said = "The provided key element does not match the schema";
        assert!(is_key_mismatch(Some("ValidationException"), Some(said)));
        assert!(is_key_mismatch(
            Some("ValidationException"),
            Some("One or more parameter values were invalid: Type mismatch for key lease_key")
        ));
        assert!(!is_key_mismatch(
            Some("ValidationException"),
            Some("Invalid UpdateExpression")
        ));
        assert!(!is_key_mismatch(Some("ThrottlingException"), Some(said)));
    }
}

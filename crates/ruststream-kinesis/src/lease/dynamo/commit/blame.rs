//! A commit rejected as a whole because of a table, naming no action: DynamoDB answers
//! `ResourceNotFoundException` when a table of the request does not exist, and
//! `AccessDeniedException` when the role may not write one. Where the table is a handler's, the
//! handling that staged the write is refused, naming the table and the fix, and its failure
//! policy decides (retry, dead letter); sent again as it was, the commit would fail the same way
//! until the lease ran out, and then at every next owner's. Where it is the lease table, or
//! cannot be told, the commit fails as before.

use aws_sdk_dynamodb::operation::describe_table::DescribeTableError;

use super::*;

impl DynamoLeaseStore {
    /// The handling at fault for a commit rejected with `code` and `message`: the first staged
    /// write on a table that does not exist (`ResourceNotFoundException`: `DescribeTable` says
    /// so) or on the table the message names (`AccessDeniedException`); `None` when no
    /// handler's table is to blame.
    pub(super) async fn blamed(
        &self,
        request: &CommitRequest<'_>,
        code: &str,
        message: Option<&str>,
    ) -> Option<UserRefusal> {
        let (table, why) = match code {
            "ResourceNotFoundException" => {
                let missing = self.missing_table(request).await?;
                let why = format!(
                    "table {missing:?} does not exist in the lease table's account and region; \
                     create it, or stage writes to a table that exists"
                );
                (missing, why)
            }
            "AccessDeniedException" => {
                let denied = denied_table(message?)?;
                let why = format!(
                    "the role may not write table {denied:?} ({}); allow the actions the \
                     handler stages on it",
                    message.unwrap_or_default()
                );
                (denied, why)
            }
            _ => return None,
        };
        if self.is_lease_table(&table) {
            return None;
        }
        request.units.iter().find_map(|(unit, writes)| {
            let action = writes.iter().position(|write| {
                crate::lease::table_of(write).is_some_and(|named| names(named, &table))
            })?;
            Some(UserRefusal {
                unit: *unit,
                action: Some(action),
                code: code.to_owned(),
                message: Some(why.clone()),
                item: None,
            })
        })
    }

    /// The first table the request's writes name that `DescribeTable` says does not exist
    /// (`None`: each exists, or could not be described).
    async fn missing_table(&self, request: &CommitRequest<'_>) -> Option<String> {
        let mut asked: Vec<&str> = Vec::new();
        for write in request.units.iter().flat_map(|(_, writes)| writes) {
            let Some(table) = crate::lease::table_of(write) else {
                continue;
            };
            if asked.contains(&table) || self.is_lease_table(table) {
                continue;
            }
            asked.push(table);
            let Some(answer) = self.describe_table(table).await else {
                continue;
            };
            let missing = answer
                .as_ref()
                .err()
                .and_then(|err| err.as_service_error())
                .is_some_and(DescribeTableError::is_resource_not_found_exception);
            if missing {
                return Some(table.to_owned());
            }
        }
        None
    }

    /// Whether `table` (a name or an ARN) is this store's lease table.
    fn is_lease_table(&self, table: &str) -> bool {
        names(table, self.table())
    }
}

/// Whether the table `named` in a request (a name or an ARN) is `table` (a name or an ARN).
fn names(named: &str, table: &str) -> bool {
    let bare = |name: &str| {
        name.rsplit_once(":table/")
            .map_or(name, |(_, bare)| bare)
            .to_owned()
    };
    named == table || bare(named) == bare(table)
}

/// The table an `AccessDeniedException`'s message names ("... on resource:
/// arn:aws:dynamodb:REGION:ACCOUNT:table/NAME ..."), by its name.
fn denied_table(message: &str) -> Option<String> {
    let (_, after) = message.split_once(":table/")?;
    let name: String = after
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
        .collect();
    (!name.is_empty()).then_some(name)
}

#[cfg(test)]
mod tests {
    use super::{denied_table, names};

    #[test]
    fn the_denied_table_is_read_off_the_message() {
        assert_eq!(
            denied_table(
                "User: arn:aws:sts::123456789012:assumed-role/reader/i-1 is not authorized to \
                 perform: dynamodb:UpdateItem on resource: \
                 arn:aws:dynamodb:us-east-1:123456789012:table/order-counts because no \
                 identity-based policy allows the dynamodb:UpdateItem action"
            )
            .as_deref(),
            Some("order-counts")
        );
        assert_eq!(denied_table("not authorized"), None);
    }

    #[test]
    fn a_table_is_named_by_its_name_or_its_arn() {
        assert!(names("counts", "counts"));
        assert!(names(
            "arn:aws:dynamodb:us-east-1:123456789012:table/counts",
            "counts"
        ));
        assert!(!names("counts", "leases"));
    }
}

//! What an exactly-once subscription needs before it starts: a lease store that commits a
//! handler's DynamoDB writes with its rows, in the broker's region and the stream's account, and
//! a lease short enough for a resent commit to be recognised by its request token.

use std::time::Duration;

#[cfg(feature = "dynamodb-lease")]
use crate::lease::arn_part;
use crate::live::subscription::Instance;
use crate::{ExactlyOnceRefusal, KinesisError, KinesisStream};

/// The longest lease exactly once allows: DynamoDB keeps a transaction's `ClientRequestToken`
/// for ten minutes, and a commit is resent only while its lease lasts.
pub(crate) const MAX_EXACTLY_ONCE_LEASE: Duration = Duration::from_secs(9 * 60);

/// Why `source` cannot start exactly once on `instance`, if it cannot.
pub(crate) fn refusal(instance: &Instance, source: &KinesisStream) -> Result<(), KinesisError> {
    if !source.exactly_once {
        return Ok(());
    }
    let refused = |refusal| {
        Err(KinesisError::ExactlyOnce {
            stream: source.name.to_string(),
            refusal,
        })
    };
    let store = instance.store();
    #[cfg(feature = "dynamodb-lease")]
    let transactions = store.transactions();
    #[cfg(feature = "dynamodb-lease")]
    let commits = transactions.is_some();
    #[cfg(not(feature = "dynamodb-lease"))]
    let commits = false;
    if !commits {
        // The store as it names itself: its type (a Debug of its rows would be the whole table).
        let described = format!("{store:?}");
        let name = described
            .split([' ', '{', '('])
            .next()
            .unwrap_or("a store of your own");
        return refused(ExactlyOnceRefusal::StoreCannotCommit {
            store: name.to_owned(),
        });
    }
    // In process no request token is kept anywhere, and leases outlast any paused clock's jump.
    let lease = instance.timings().lease();
    if lease > MAX_EXACTLY_ONCE_LEASE && !instance.kinesis().pushes() {
        return refused(ExactlyOnceRefusal::LeaseTooLong { lease });
    }
    #[cfg(feature = "dynamodb-lease")]
    if let (Some(lease_region), Some(region)) = (
        transactions.and_then(|transactions| transactions.region()),
        instance.kinesis().region(),
    ) && lease_region != region
    {
        return refused(ExactlyOnceRefusal::OtherRegion {
            table: store.table_name().unwrap_or("the lease table").to_owned(),
            lease_region,
            region,
        });
    }
    Ok(())
}

/// Why `source` cannot start exactly once on `instance` reading the stream `stream_arn`: a lease
/// table in another account than the stream. Not known (the store cannot say, `DescribeTable`
/// is not allowed), nothing is compared, and a WARN says so.
#[cfg(feature = "dynamodb-lease")]
pub(crate) async fn account_refusal(
    instance: &Instance,
    source: &KinesisStream,
    stream_arn: &str,
) -> Result<(), KinesisError> {
    if !source.exactly_once {
        return Ok(());
    }
    let store = instance.store();
    let Some(transactions) = store.transactions() else {
        return Ok(());
    };
    let table = store.table_name().unwrap_or("the lease table").to_owned();
    let Some(table_arn) = transactions.table_arn().await else {
        if !instance.kinesis().pushes() {
            tracing::warn!(
                stream = %source.name,
                table = %table,
                "exactly once: the lease table's account is not known (DescribeTable did not \
                 answer; allow dynamodb:DescribeTable on it), so it is not compared with the \
                 stream's; a commit writes the handler's tables in the lease table's account"
            );
        }
        return Ok(());
    };
    match (arn_part(&table_arn, 4), arn_part(stream_arn, 4)) {
        (Some(lease_account), Some(stream_account)) if lease_account != stream_account => {
            Err(KinesisError::ExactlyOnce {
                stream: source.name.to_string(),
                refusal: ExactlyOnceRefusal::OtherAccount {
                    table,
                    lease_account: lease_account.to_owned(),
                    stream: source.name.to_string(),
                    stream_account: stream_account.to_owned(),
                },
            })
        }
        _ => Ok(()),
    }
}

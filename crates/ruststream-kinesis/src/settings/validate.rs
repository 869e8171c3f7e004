//! What Kinesis refuses, checked before any call so the error names the limit.

use crate::KinesisError;

/// The largest record a stream accepts by default: 1 MiB of data and partition key together. A
/// stream's own limit (`MaxRecordSizeInKiB`, raised up to 10 MiB with `UpdateMaxRecordSize`) is
/// read from the stream when a publisher first writes to it.
pub const MAX_RECORD_BYTES: usize = 1024 * 1024;
/// The most records one `PutRecords` call carries.
pub const MAX_PUT_RECORDS: usize = 500;
/// The most bytes one `PutRecords` call carries, partition keys included.
pub const MAX_PUT_RECORDS_BYTES: usize = 5 * 1024 * 1024;
/// The most records one `GetRecords` call returns.
pub const MAX_GET_RECORDS_LIMIT: u32 = 10_000;

/// Checks a stream name against the Kinesis grammar.
pub(crate) fn stream_name(name: &str) -> Result<(), KinesisError> {
    let reason = if name.is_empty() {
        Some("it is empty")
    } else if name.len() > 128 {
        Some("it is longer than 128 characters")
    } else if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
    {
        Some("it has a character outside a-z, A-Z, 0-9, '_', '-' and '.'")
    } else {
        None
    };
    match reason {
        Some(reason) => Err(KinesisError::InvalidStreamName {
            name: name.to_owned(),
            reason,
        }),
        None => Ok(()),
    }
}

/// Checks a partition key: 1 to 256 Unicode characters.
pub(crate) fn partition_key(stream: &str, key: &str) -> Result<(), KinesisError> {
    let chars = key.chars().count();
    if chars == 0 || chars > 256 {
        return Err(KinesisError::InvalidPartitionKey {
            stream: stream.to_owned(),
            reason: format!("it has {chars} characters"),
        });
    }
    Ok(())
}

/// Checks a record's size, its data and partition key together, against its stream's limit.
pub(crate) fn record_size(stream: &str, size: usize, limit: usize) -> Result<(), KinesisError> {
    if size > limit {
        return Err(KinesisError::RecordTooLarge {
            stream: stream.to_owned(),
            size,
            limit,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_names_follow_the_kinesis_grammar() {
        assert!(stream_name("orders.eu-1_a").is_ok());
        for bad in ["", "has space", "slash/", &"x".repeat(129)] {
            let err = stream_name(bad).unwrap_err().to_string();
            assert!(err.contains("1 to 128 characters"), "{err}");
        }
        assert!(stream_name(&"x".repeat(128)).is_ok());
    }

    #[test]
    fn partition_keys_have_one_to_256_characters() {
        assert!(partition_key("s", "k").is_ok());
        assert!(partition_key("s", &"é".repeat(256)).is_ok());
        assert!(partition_key("s", "").is_err());
        let err = partition_key("orders", &"k".repeat(257))
            .unwrap_err()
            .to_string();
        assert!(err.contains("orders") && err.contains("257"), "{err}");
    }

    #[test]
    fn a_record_over_its_streams_limit_is_refused_naming_the_limit() {
        assert!(record_size("s", MAX_RECORD_BYTES, MAX_RECORD_BYTES).is_ok());
        let err = record_size("orders", MAX_RECORD_BYTES + 1, MAX_RECORD_BYTES)
            .unwrap_err()
            .to_string();
        assert!(err.contains("1048576") && err.contains("orders"), "{err}");
        assert!(record_size("big", 3 << 20, 10 << 20).is_ok());
    }
}

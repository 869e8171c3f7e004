//! What Kinesis refuses, checked before any call so the error names the limit.

use crate::KinesisError;

/// The largest record Kinesis accepts: 1 MiB of data.
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

/// Checks a record's data size.
pub(crate) fn record_size(stream: &str, size: usize) -> Result<(), KinesisError> {
    if size > MAX_RECORD_BYTES {
        return Err(KinesisError::RecordTooLarge {
            stream: stream.to_owned(),
            size,
            limit: MAX_RECORD_BYTES,
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
    fn a_record_over_one_mebibyte_is_refused_naming_the_limit() {
        assert!(record_size("s", MAX_RECORD_BYTES).is_ok());
        let err = record_size("orders", MAX_RECORD_BYTES + 1)
            .unwrap_err()
            .to_string();
        assert!(err.contains("1048576") && err.contains("orders"), "{err}");
    }
}

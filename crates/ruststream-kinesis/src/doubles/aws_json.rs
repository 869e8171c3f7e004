//! What a test double reads of a request in the AWS JSON protocols, and the content type it
//! answers with. One copy for the crate's doubles and the live tests' fault injector
//! (`tests/common/faults.rs` includes this file by its path).

/// The AWS service a request is for, by its `X-Amz-Target`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Service {
    Kinesis,
    DynamoDb,
}

impl Service {
    /// The service and the operation a request's `X-Amz-Target` names
    /// (`Kinesis_20131202.GetRecords`, `DynamoDB_20120810.UpdateItem`); `None` for any other.
    pub fn of_target(target: &str) -> Option<(Self, &str)> {
        let (prefix, operation) = target.split_once('.')?;
        let service = if prefix.starts_with("Kinesis_") {
            Self::Kinesis
        } else if prefix.starts_with("DynamoDB_") {
            Self::DynamoDb
        } else {
            return None;
        };
        Some((service, operation))
    }

    /// The content type of the service's JSON protocol: Kinesis speaks awsJson1_1, DynamoDB
    /// awsJson1_0.
    pub fn content_type(self) -> &'static str {
        match self {
            Self::Kinesis => "application/x-amz-json-1.1",
            Self::DynamoDb => "application/x-amz-json-1.0",
        }
    }
}

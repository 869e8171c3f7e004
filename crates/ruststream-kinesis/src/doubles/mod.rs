//! The test doubles, in one place. Each stands in for one real part at its own seam, and the
//! code under test is the production code: a double answers, it decides nothing of ours.
//!
//! | Double | Stands in for | Seam | Used by |
//! |---|---|---|---|
//! | [`aws_json`] | nothing: what a double reads of a request (its service and operation) and the content type it answers with | the `X-Amz-Target` header | `fake_kinesis`, and `tests/common/faults.rs`, which includes the file by its path |
//! | [`fake_kinesis`] | Kinesis and DynamoDB answering request by request (a status and a JSON body, a hang, a reset) | the SDK's HTTP connector | the publisher's, the API's and the Dynamo store's unit tests |
//! | [`fake_stream`] | one Kinesis stream (shards, records, iterators) with a hook that answers any request first | the SDK's HTTP connector | `live/reader/tests`: a whole broker on it |
//! | [`recording_store`] | a lease store that records every call, slows writes, fails renewals | the `LeaseStore` trait, around `MemoryLeaseStore` | `live/reader/tests` |
//! | [`five_calls`] | a lease store written against the five required calls alone (the provided ones as the trait writes them) | the `LeaseStore` trait, around `MemoryLeaseStore` | the memory store's tests, the broker's refusal of beat mode |
//!
//! Elsewhere, on purpose:
//! - `simulation/` is not a double but a model: the real machines driven by a seeded schedule,
//!   against a store and a stream of its own (see its module doc);
//! - a store that must misbehave in one way for one test only is written beside that test (a
//!   store that hangs in `lease/timed.rs`); the live tests' store that counts its calls is in
//!   `tests/common/counting.rs`;
//! - the live tests' tools are in `tests/common/`: the endpoint gate, the fault injectors (`faults.rs`:
//!   typed rules at the SDK's connector seam, passing through to the stack; `injector.rs`: the
//!   router's JSON rules, for faults that must reach other processes), instances on a shared table (`instances.rs`), captured logs, AWS's KPL
//!   library (`kpl.rs`) and credentials to look for in logs (`secrets.rs`).

pub(crate) mod aws_json;
pub(crate) mod fake_kinesis;
pub(crate) mod fake_stream;
pub(crate) mod five_calls;
pub(crate) mod recording_store;

#[cfg(test)]
mod tests {
    use super::aws_json::Service;

    #[test]
    fn a_target_names_its_service_and_operation() {
        assert_eq!(
            Service::of_target("Kinesis_20131202.GetRecords"),
            Some((Service::Kinesis, "GetRecords"))
        );
        assert_eq!(
            Service::of_target("DynamoDB_20120810.UpdateItem"),
            Some((Service::DynamoDb, "UpdateItem"))
        );
        assert_eq!(Service::of_target("Other_1.Call"), None);
        assert_eq!(Service::of_target("GetRecords"), None);
    }
}

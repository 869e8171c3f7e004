//! `warehouse asyncapi gen [-o FILE] [--yaml]`: prints the service's `AsyncAPI` document (or
//! writes it to `FILE`), the command a service with the framework's generated `main` answers to.
//! It needs the `asyncapi` feature; without it, it says so and fails. The server is the one the
//! instance would reach with the same environment: the endpoint's host, else the regional host.

use std::process::ExitCode;

use aws_config::BehaviorVersion;

/// Builds the service with the environment's configuration and hands the command line to the
/// framework's own `asyncapi gen`, so its options and messages are the framework's.
pub fn print(table: &str) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("warehouse: no runtime to load the AWS configuration on: {err}");
            return ExitCode::FAILURE;
        }
    };
    let config = runtime.block_on(aws_config::defaults(BehaviorVersion::latest()).load());
    let _entered = runtime.enter();
    ruststream::runtime::cli::run_main(|| super::service(&config, table))
}

#[cfg(all(test, feature = "asyncapi"))]
mod tests {
    use aws_config::{BehaviorVersion, Region, SdkConfig};
    use ruststream::asyncapi::build_spec;
    use serde_json::{Value, json};

    /// The document as `warehouse asyncapi gen` prints it, kept in the docs.
    const SNAPSHOT: &str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/asyncapi/warehouse.json"
    );

    /// The document of the service in `eu-west-1`. The regional endpoint is spelled out, so no
    /// `AWS_ENDPOINT_URL` of the machine running the test changes the server.
    fn document() -> (String, Value) {
        let config = SdkConfig::builder()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new("eu-west-1"))
            .endpoint_url("https://kinesis.eu-west-1.amazonaws.com")
            .build();
        let text = build_spec(&super::super::service(&config, "warehouse-leases"))
            .to_json()
            .expect("the document serializes");
        let value = serde_json::from_str(&text).expect("the document is JSON");
        (text, value)
    }

    #[test]
    fn the_document_names_the_server_the_stream_and_the_order() {
        let (_, spec) = document();
        assert_eq!(
            spec["servers"]["kinesis"]["host"],
            "kinesis.eu-west-1.amazonaws.com"
        );
        assert_eq!(spec["servers"]["kinesis"]["protocol"], "kinesis");
        let channel = &spec["channels"]["warehouse-orders"];
        assert_eq!(
            channel["bindings"]["x-kinesis"],
            json!({ "stream": "warehouse-orders", "shardsIfCreated": 2 })
        );
        assert_eq!(channel["servers"], json!([{ "$ref": "#/servers/kinesis" }]));
        let receive = spec["operations"]
            .as_object()
            .expect("operations")
            .values()
            .find(|op| op["action"] == "receive")
            .expect("the handler's receive operation");
        assert_eq!(
            receive["bindings"]["x-kinesis"]["read"]["polling"]["intervalMs"],
            1000
        );
        let text = spec.to_string();
        assert!(
            text.contains("\"sku\"") && text.contains("\"id\""),
            "the order's schema is in the document"
        );
    }

    #[test]
    fn the_document_matches_its_snapshot() {
        let (text, spec) = document();
        if std::env::var_os("UPDATE_SNAPSHOTS").is_some() {
            std::fs::write(SNAPSHOT, format!("{text}\n")).expect("write the snapshot");
            return;
        }
        let kept = std::fs::read_to_string(SNAPSHOT)
            .expect("docs/asyncapi/warehouse.json (UPDATE_SNAPSHOTS=1 writes it)");
        let kept: Value = serde_json::from_str(&kept).expect("the snapshot is JSON");
        assert!(
            spec == kept,
            "the warehouse service's AsyncAPI document changed; if the change is meant, run \
             UPDATE_SNAPSHOTS=1 cargo test -p ruststream-kinesis --all-features --example \
             warehouse, and review the difference in docs/asyncapi/warehouse.json:\n{text}"
        );
    }
}

//! The Grafana dashboard (`docs/grafana/ruststream-kinesis.json`) charts only series the broker
//! renders: each series an expression names is in the Operating page's metrics table, which a
//! unit test holds to the collectors. Every panel reads the dashboard's Prometheus data source.

use std::collections::BTreeSet;

const DASHBOARD: &str = include_str!("../../../docs/grafana/ruststream-kinesis.json");
const OPERATING: &str = include_str!("../../../docs/src/operating.md");

/// The prefixes of the broker's series: the messaging conventions' and Kinesis's own.
const PREFIXES: [&str; 2] = ["messaging_client_", "aws_kinesis_"];

/// Where the next of the broker's series starts in `text`.
fn next_series(text: &str) -> Option<usize> {
    PREFIXES.iter().filter_map(|prefix| text.find(prefix)).min()
}

/// The broker's series `expr` names, a histogram's `_bucket`, `_count` and `_sum` as the
/// histogram.
fn series(expr: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = expr;
    while let Some(at) = next_series(rest) {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        let name = &tail[..end];
        let name = ["_bucket", "_count", "_sum"]
            .iter()
            .find_map(|suffix| name.strip_suffix(suffix))
            .unwrap_or(name);
        names.insert(name.to_owned());
        rest = &tail[end..];
    }
    names
}

#[test]
fn every_panel_charts_series_the_broker_renders() {
    let listed: BTreeSet<String> = OPERATING
        .lines()
        .filter_map(|line| line.strip_prefix("| `"))
        .filter_map(|rest| rest.split_once('`'))
        .map(|(name, _)| name.to_owned())
        .filter(|name| next_series(name) == Some(0))
        .collect();
    assert!(
        listed.len() >= 10,
        "the Operating page lists the series: {listed:?}"
    );
    let dashboard: serde_json::Value = serde_json::from_str(DASHBOARD).unwrap();
    for variable in dashboard["templating"]["list"].as_array().unwrap() {
        if let Some(query) = variable["query"]["query"].as_str() {
            for name in series(query) {
                assert!(
                    listed.contains(&name),
                    "variable {} reads {name}, which the broker does not render",
                    variable["name"]
                );
            }
        }
    }
    let panels = dashboard["panels"].as_array().unwrap();
    let mut charted = BTreeSet::new();
    for panel in panels {
        let title = panel["title"].as_str().unwrap();
        assert_eq!(
            panel["datasource"]["uid"], "${datasource}",
            "panel {title:?} reads the dashboard's data source"
        );
        let targets = panel["targets"].as_array().unwrap();
        assert!(!targets.is_empty(), "panel {title:?} has a query");
        for target in targets {
            let expr = target["expr"].as_str().unwrap();
            let named = series(expr);
            assert!(!named.is_empty(), "panel {title:?}: {expr} names no series");
            for name in named {
                assert!(
                    listed.contains(&name),
                    "panel {title:?} charts {name}, which the broker does not render"
                );
                charted.insert(name);
            }
        }
    }
    // Lag per shard, leases per instance, the calls' errors and latency, stalls and upkeep.
    for wanted in [
        "aws_kinesis_shard_behind_seconds",
        "aws_kinesis_leases_held",
        "messaging_client_operation_duration_seconds",
        "aws_kinesis_shard_stalled",
        "aws_kinesis_coordination_degraded",
    ] {
        assert!(charted.contains(wanted), "no panel charts {wanted}");
    }
}

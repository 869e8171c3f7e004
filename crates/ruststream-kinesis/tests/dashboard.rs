//! The Grafana dashboard (`docs/grafana/ruststream-kinesis.json`) charts only series the broker
//! renders: each series an expression names is in the Operating page's metrics table, which a
//! unit test holds to the collectors. Every panel reads the dashboard's Prometheus data source.

use std::collections::BTreeSet;

const DASHBOARD: &str = include_str!("../../../docs/grafana/ruststream-kinesis.json");
const OPERATING: &str = include_str!("../../../docs/src/operating.md");

/// The `kinesis_*` series `expr` names, a histogram's `_bucket`, `_count` and `_sum` as the
/// histogram.
fn series(expr: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = expr;
    while let Some(at) = rest.find("kinesis_") {
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
        .filter_map(|line| line.strip_prefix("| `kinesis_"))
        .filter_map(|rest| rest.split_once('`'))
        .map(|(name, _)| format!("kinesis_{name}"))
        .collect();
    assert!(
        listed.len() >= 10,
        "the Operating page lists the series: {listed:?}"
    );
    let dashboard: serde_json::Value = serde_json::from_str(DASHBOARD).unwrap();
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
    // What the issue asks the dashboard to show: lag per shard, leases per instance, and the
    // lease table's errors and latency.
    for wanted in [
        "kinesis_millis_behind_latest",
        "kinesis_leases_held",
        "kinesis_lease_table_call_duration_seconds",
    ] {
        assert!(charted.contains(wanted), "no panel charts {wanted}");
    }
}

//! The facts of the user guide that a program can hold against the code, checked on every test
//! run so that they cannot drift: the features table against the manifest, the tables of
//! defaults against the defaults themselves, the table of the lease store's calls against the
//! trait, how often every row is read (several instances, EN and RU), and the code blocks of
//! the guide (each says its language; every Rust block is compiled, as a doctest of `guide` in
//! `lib.rs` or as an example it includes).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::{KinesisPosition, KinesisStream, LeaseTimings};

const MANIFEST: &str = include_str!("../Cargo.toml");
const STORE_TRAIT: &str = include_str!("lease/store.rs");
const OVERVIEW: &str = include_str!("../../../docs/src/overview.md");
const LEASES: &str = include_str!("../../../docs/src/leases.md");
const LEASES_RU: &str = include_str!("../../../docs/src/ru/leases.md");
const LEASE_STORE: &str = include_str!("../../../docs/src/lease-store.md");
const GETTING_STARTED: &str = include_str!("../../../docs/src/getting-started.md");
const SEVERAL: &str = include_str!("../../../docs/src/several-instances.md");
const SEVERAL_RU: &str = include_str!("../../../docs/src/ru/several-instances.md");

/// The cells of the rows of the table whose header row starts with `header` (its first cell),
/// the header and the rule left out.
fn table(page: &str, header: &str) -> Vec<Vec<String>> {
    let mut lines = page
        .lines()
        .skip_while(|line| !line.trim_start().starts_with(&format!("| {header} |")));
    assert!(lines.next().is_some(), "no table headed {header:?}");
    lines
        .skip(1)
        .take_while(|line| line.trim_start().starts_with('|'))
        .map(|line| {
            line.trim()
                .trim_matches('|')
                .split(" | ")
                .map(|cell| cell.trim().to_owned())
                .collect()
        })
        .collect()
}

/// The text between backticks at the start of `cell`, up to a `(`: the name it shows.
fn name(cell: &str) -> String {
    cell.trim_matches('`')
        .split('(')
        .next()
        .unwrap_or_default()
        .trim_start_matches('.')
        .to_owned()
}

/// A duration as the tables write it: `10 s`, `500 ms`, `2 min` (`с`, `мс`, `мин` in Russian).
fn duration(text: &str) -> Duration {
    let (number, unit) = text
        .trim()
        .split_once(' ')
        .unwrap_or_else(|| panic!("a duration with its unit, not {text:?}"));
    let number: u64 = number
        .parse()
        .unwrap_or_else(|_| panic!("a whole number in {text:?}"));
    match unit {
        "ms" | "мс" => Duration::from_millis(number),
        "s" | "с" => Duration::from_secs(number),
        "min" | "мин" => Duration::from_secs(number * 60),
        other => panic!("unknown unit {other:?} in {text:?}"),
    }
}

#[test]
fn the_features_table_lists_every_feature_of_the_manifest() {
    let section = MANIFEST
        .split("[features]")
        .nth(1)
        .expect("a [features] section")
        .split("\n[")
        .next()
        .unwrap_or_default();
    let mut features = BTreeSet::new();
    let mut default = BTreeSet::new();
    for line in section.lines().map(str::trim) {
        let Some((key, value)) = line.split_once(" = ") else {
            continue;
        };
        if key == "default" {
            default = value
                .trim_matches(['[', ']'])
                .split(',')
                .map(|feature| feature.trim().trim_matches('"').to_owned())
                .filter(|feature| !feature.is_empty())
                .collect();
        } else {
            features.insert(key.to_owned());
        }
    }
    let rows = table(OVERVIEW, "feature");
    let listed: BTreeSet<String> = rows.iter().map(|row| name(&row[0])).collect();
    assert_eq!(
        listed, features,
        "docs/src/overview.md's features table against Cargo.toml"
    );
    for row in &rows {
        let on = default.contains(&name(&row[0]));
        assert_eq!(
            row[1],
            if on { "yes" } else { "no" },
            "the default of {}",
            row[0]
        );
    }
}

/// Each row of a timings table (English or Russian) against `LeaseTimings::default()`.
fn timings_table_holds(page: &str, header: &str) {
    let timings = LeaseTimings::default();
    let rows = table(page, header);
    let mut seen = BTreeSet::new();
    for row in &rows {
        let setting = name(&row[0]);
        let want: Vec<Duration> = match setting.as_str() {
            "LeaseTimings::new" => vec![timings.lease(), timings.renew()],
            "with_listing_interval" => vec![timings.listing_interval()],
            "with_handover_poll_interval" => vec![timings.handover_poll_interval()],
            "with_checkpoint_interval" => vec![timings.checkpoint_interval()],
            "with_handoff_drain" => vec![timings.handoff_drain()],
            other => panic!("a timings row the check does not know: {other:?}"),
        };
        let said: Vec<Duration> = row[1].split(", ").map(duration).collect();
        assert_eq!(said, want, "the default of {setting} in the table");
        seen.insert(setting);
    }
    assert_eq!(seen.len(), 5, "every setting has its row: {seen:?}");
}

#[test]
fn the_timings_tables_say_the_defaults() {
    timings_table_holds(LEASES, "setting");
    timings_table_holds(LEASES_RU, "настройка");
}

#[test]
fn the_stream_settings_table_says_the_defaults() {
    let stream = KinesisStream::new("orders");
    let mut seen = BTreeSet::new();
    for row in table(GETTING_STARTED, "`KinesisStream` setting") {
        let setting = name(&row[0]);
        let said = row[1].as_str();
        match setting.as_str() {
            "poll_interval" => assert_eq!(duration(said), stream.poll_interval),
            "max_wait" => assert_eq!(duration(said), stream.max_wait),
            "stall_after" => assert_eq!(duration(said), stream.stall_after),
            "batch_size" => assert_eq!(said.replace(',', ""), stream.batch_size.to_string()),
            "max_unsettled" => {
                assert_eq!(said.replace(',', ""), stream.max_unsettled.to_string());
            }
            "initial_position" => {
                assert_eq!(stream.initial, KinesisPosition::Latest);
                assert_eq!(said, "`Latest`");
            }
            "create_if_missing" => {
                assert_eq!(stream.create_if_missing, None);
                assert_eq!(said, "off");
            }
            "enhanced_fan_out" => {
                assert!(stream.fan_out.is_none());
                assert_eq!(said, "off (polling)");
            }
            "exactly_once" => {
                assert!(!stream.is_exactly_once());
                assert_eq!(said, "off (at least once)");
            }
            other => panic!("a stream setting the check does not know: {other:?}"),
        }
        seen.insert(setting);
    }
    assert_eq!(seen.len(), 9, "every setting has its row: {seen:?}");
}

#[test]
fn the_lease_store_page_has_a_row_for_every_call_of_the_trait() {
    let body = STORE_TRAIT
        .split("pub trait LeaseStore")
        .nth(1)
        .expect("the trait");
    let calls: BTreeSet<String> = body
        .lines()
        .filter_map(|line| line.trim().strip_prefix("fn "))
        .map(|rest| rest.split(['<', '(']).next().unwrap_or_default().to_owned())
        .collect();
    let rows: BTreeSet<String> = table(LEASE_STORE, "call")
        .iter()
        .map(|row| name(&row[0]))
        .collect();
    assert_eq!(
        rows, calls,
        "docs/src/lease-store.md's table of calls against the trait"
    );
}

/// Every page of the guide, and the README.
fn pages() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut pages = vec![root.join("README.md")];
    let mut folders = vec![root.join("docs/src")];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder).expect("the docs folder") {
            let path = entry.expect("an entry").path();
            if path.is_dir() {
                folders.push(path);
            } else if path.extension().is_some_and(|ext| ext == "md") {
                pages.push(path);
            }
        }
    }
    pages.sort();
    pages
}

/// The pages whose Rust blocks `guide` in `lib.rs` compiles as doctests.
const COMPILED: &str = include_str!("lib.rs");

#[test]
fn every_code_block_says_its_language_and_every_rust_block_is_compiled() {
    let mut problems = Vec::new();
    for page in pages() {
        let text = std::fs::read_to_string(&page).expect("a page");
        let shown = page
            .strip_prefix(Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."))
            .unwrap_or(&page)
            .display()
            .to_string();
        let mut rust_blocks = 0;
        let mut lines = text.lines().enumerate();
        while let Some((at, line)) = lines.next() {
            let Some(info) = line.trim_start().strip_prefix("```") else {
                continue;
            };
            let body: Vec<&str> = lines
                .by_ref()
                .map(|(_, line)| line)
                .take_while(|line| !line.trim_start().starts_with("```"))
                .collect();
            let at = at + 1;
            if info.is_empty() {
                problems.push(format!(
                    "{shown}:{at}: a code block without a language (rustdoc would compile it as Rust)"
                ));
                continue;
            }
            let mut words = info.split(',');
            if words.next() != Some("rust") {
                continue;
            }
            let attributes: Vec<&str> = words.collect();
            let include = body.iter().all(|line| {
                let line = line.trim();
                line.is_empty() || line.starts_with("{{#include")
            });
            match (include, attributes.as_slice()) {
                // An example's lines: compiled (and run) as the example.
                (true, ["ignore"]) => {}
                (true, _) => problems.push(format!(
                    "{shown}:{at}: an included block is `rust,ignore` (the example compiles it)"
                )),
                (false, [] | ["no_run"]) => rust_blocks += 1,
                (false, _) => problems.push(format!(
                    "{shown}:{at}: a Rust block is compiled: `rust` or `rust,no_run`, not \
                     {attributes:?}"
                )),
            }
        }
        if rust_blocks > 0 && !COMPILED.contains(&format!("{shown}\")")) {
            problems.push(format!(
                "{shown}: has Rust blocks, and `guide` in lib.rs does not compile it"
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn every_dependency_line_names_the_crates_own_version() {
    let version = MANIFEST
        .lines()
        .find_map(|line| line.strip_prefix("version = \""))
        .and_then(|rest| rest.split('"').next())
        .expect("the manifest's version");
    let minor: Vec<&str> = version.split('.').take(2).collect();
    let wanted = format!("ruststream-kinesis = {{ version = \"{}\"", minor.join("."));
    let mut stale = Vec::new();
    for page in pages() {
        let text = std::fs::read_to_string(&page).expect("a page");
        for (at, line) in text.lines().enumerate() {
            if line.contains("ruststream-kinesis = { version") && !line.contains(&wanted) {
                stale.push(format!("{}:{}: {line}", page.display(), at + 1));
            }
        }
    }
    assert!(
        stale.is_empty(),
        "pages that depend on another version than the manifest's {version} (write `{wanted}`):\n{}",
        stale.join("\n")
    );
}

/// `text` with every run of white space one space: a phrase the page wraps still reads whole.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[test]
fn the_several_instances_pages_say_how_often_every_row_is_read() {
    let listings = crate::coordinator::hygiene::FULL_READ_LISTINGS;
    let minutes = (LeaseTimings::default().listing_interval() * listings).as_secs() / 60;
    for (page, said) in [
        (
            SEVERAL,
            format!(
                "Every row is read at least every {listings} listing intervals ({minutes} minutes)"
            ),
        ),
        (
            SEVERAL,
            format!("at the latest every {listings} listing intervals ({minutes} minutes)"),
        ),
        (
            SEVERAL_RU,
            format!("не реже чем раз в {listings} интервалов запроса списка ({minutes} минут)"),
        ),
        (
            SEVERAL_RU,
            format!("самое позднее раз в {listings} интервалов запроса списка ({minutes} минут)"),
        ),
    ] {
        assert!(one_line(page).contains(&said), "the page says: {said}");
    }
}

#[test]
fn the_several_instances_pages_say_when_an_asker_reads_every_row_again() {
    let timings = LeaseTimings::default();
    let secs = crate::coordinator::machine::last_hand_over_after_ask(&timings).as_secs();
    for (page, said) in [
        (SEVERAL, format!("{secs} s after it by default")),
        (SEVERAL_RU, format!("по умолчанию через {secs} с после неё")),
    ] {
        assert!(one_line(page).contains(&said), "the page says: {said}");
    }
}

#[test]
fn the_several_instances_pages_say_the_fleets_take_budget() {
    let budget = crate::coordinator::take_pace::FLEET_TAKES_PER_SECOND;
    for (page, said) in [
        (SEVERAL, format!("write at most {budget} takes a second")),
        (
            SEVERAL_RU,
            format!("пишут не больше {budget} захватов в секунду"),
        ),
    ] {
        assert!(one_line(page).contains(&said), "the page says: {said}");
    }
}

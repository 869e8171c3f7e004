//! Figures, medians, and the Markdown report with the machine, date and commit it was taken on.

use std::fmt::Write as _;
use std::process::Command;
use std::time::Duration;

/// One row of the report.
#[derive(Debug, Clone)]
pub struct Figure {
    /// What is measured, as the table names it.
    pub name: &'static str,
    /// The figure, with the two sides it divides where it is a ratio.
    pub measured: String,
    pub target: String,
    /// `None` for a figure recorded as a baseline, without a target.
    pub pass: Option<bool>,
    /// The sub-command that produced it.
    pub command: String,
    /// How it was taken and what else the run saw.
    pub details: Vec<String>,
}

impl Figure {
    pub fn new(name: &'static str, command: &str) -> Self {
        Self {
            name,
            measured: String::new(),
            target: String::new(),
            pass: None,
            command: format!("kinesis-bench {command}"),
            details: Vec::new(),
        }
    }

    pub fn detail(&mut self, line: impl Into<String>) {
        self.details.push(line.into());
    }

    /// A figure that could not be taken: the row says why, and fails its target.
    pub fn failed(name: &'static str, command: &str, target: &str, why: &str) -> Self {
        let mut figure = Self::new(name, command);
        figure.measured = format!("not measured: {why}");
        figure.target = target.to_owned();
        figure.pass = Some(false);
        figure
    }
}

/// The median of `values` (the mean of the middle two for an even count); 0 when empty.
pub fn median(values: &[f64]) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let mid = sorted.len() / 2;
    if sorted.len().is_multiple_of(2) {
        f64::midpoint(sorted[mid - 1], sorted[mid])
    } else {
        sorted[mid]
    }
}

/// A list of durations in seconds, for a details line.
pub fn secs_list(values: &[f64]) -> String {
    values
        .iter()
        .map(|v| format!("{v:.2}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Counts with thousands separators, comma-separated.
pub fn thousands_list(values: &[f64]) -> String {
    values
        .iter()
        .map(|v| thousands(*v))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A count with thousands separators.
pub fn thousands(n: f64) -> String {
    let rounded = n.round();
    let digits = format!("{:.0}", rounded.abs());
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if rounded < 0.0 {
        format!("-{out}")
    } else {
        out
    }
}

fn run(program: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(program).args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// The machine, date, commit and toolchain, as the report's header lines.
pub fn environment() -> Vec<String> {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".to_owned());
    let cores = std::thread::available_parallelism().map_or(0, std::num::NonZero::get);
    let memory = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|l| l.starts_with("MemTotal"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map_or_else(
            || "?".to_owned(),
            |kb| format!("{:.0} GiB", kb / 1_048_576.0),
        );
    let kernel = run("uname", &["-sr"]).unwrap_or_default();
    let date = run("date", &["-u", "+%Y-%m-%d %H:%M UTC"]).unwrap_or_default();
    let commit = run("git", &["rev-parse", "--short", "HEAD"]).unwrap_or_else(|| "?".to_owned());
    let dirty = run("git", &["status", "--porcelain", "--untracked-files=no"])
        .is_some_and(|s| !s.is_empty());
    let rustc = run("rustc", &["-V"]).unwrap_or_default();
    vec![
        format!("- date: {date}"),
        format!(
            "- commit: {commit}{}",
            if dirty { " with uncommitted changes" } else { "" }
        ),
        format!("- machine: {cpu}, {cores} cores, {memory}, {kernel}"),
        format!(
            "- toolchain: {rustc}, {} build",
            // The bench's own profile: a debug build's figures are not a release build's.
            if cfg!(debug_assertions) {
                "debug"
            } else {
                "release"
            }
        ),
        "- stack: scripts/local-stack.sh (kinesis-mock 0.6.2 via kinesis-local, moto 5.2.1), on the same machine".to_owned(),
    ]
}

/// The whole report: the header, the table, and each figure's details.
pub fn markdown(figures: &[Figure], command: &str, took: Duration) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "### `{command}`\n");
    for line in environment() {
        let _ = writeln!(out, "{line}");
    }
    let _ = writeln!(out, "- run time: {:.0} s\n", took.as_secs_f64());
    let _ = writeln!(out, "| figure | measured | target | result | command |");
    let _ = writeln!(out, "|---|---|---|---|---|");
    for f in figures {
        let result = match f.pass {
            Some(true) => "pass",
            Some(false) => "**miss**",
            None => "recorded",
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | `{}` |",
            f.name,
            f.measured,
            if f.target.is_empty() { "-" } else { &f.target },
            result,
            f.command
        );
    }
    let _ = writeln!(out);
    for f in figures.iter().filter(|f| !f.details.is_empty()) {
        let _ = writeln!(out, "**{}**\n", f.name);
        for line in &f.details {
            let _ = writeln!(out, "- {line}");
        }
        let _ = writeln!(out);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_of_odd_and_even_counts() {
        assert!((median(&[3.0, 1.0, 2.0]) - 2.0).abs() < f64::EPSILON);
        assert!((median(&[4.0, 1.0, 2.0, 3.0]) - 2.5).abs() < f64::EPSILON);
        assert!(median(&[]).abs() < f64::EPSILON);
    }

    #[test]
    fn thousands_are_separated() {
        assert_eq!(thousands(1_234_567.4), "1,234,567");
        assert_eq!(thousands(999.0), "999");
        assert_eq!(thousands(-1000.0), "-1,000");
    }

    #[test]
    fn the_table_marks_each_result() {
        let mut pass = Figure::new("a", "x");
        pass.pass = Some(true);
        let recorded = Figure::new("b", "y");
        let failed = Figure::failed("c", "z", "≤ 1", "stack down");
        let text = markdown(
            &[pass, recorded, failed],
            "kinesis-bench all",
            Duration::ZERO,
        );
        assert!(text.contains("| a |  | - | pass | `kinesis-bench x` |"));
        assert!(text.contains("| recorded |"));
        assert!(text.contains("**miss**"));
    }
}

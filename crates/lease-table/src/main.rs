//! `lease-table`: an operator's view of a ruststream-kinesis lease table in DynamoDB.
//!
//! ```text
//! lease-table <TABLE> [--watch] [--json] [--create] [--endpoint-url URL] [--region REGION]
//! ```
//!
//! Prints one line per row of the table: the stream and the shard, the instance holding the
//! lease, how long the lease still runs, the row's write counter, its checkpoint, how far behind
//! it was written, a handoff asked of the holder and the application the row names; then per
//! owner the rows it holds and those that lapsed, and the rows nobody holds. `--watch` refreshes
//! the view every second until Ctrl-C; `--json` prints the view as one JSON document (one per
//! line with `--watch`), for scripts; `--create` creates the table first (one string key,
//! `lease_key`, on-demand billing), leaving an existing one as it is.
//!
//! The AWS configuration comes from the environment, as for the services (`AWS_REGION`,
//! credentials, `AWS_ENDPOINT_URL` for a local stack); `--endpoint-url` and `--region` override
//! it.
//!
//! Exit status: 0 when the table was shown (even empty) and for `--help` and `--version`, 2 when
//! the table does not exist or is not keyed as a lease table (by the string `lease_key` alone: a
//! Java KCL table is not), 1 when DynamoDB could not be read, 64 for a wrong command line.

mod view;

use std::process::ExitCode;
use std::time::Duration;

use aws_config::{BehaviorVersion, Region};
use clap::Parser;
use ruststream_kinesis::{DynamoLeaseStore, LeaseError, LeaseStore, epoch_millis};

/// Shows the rows of a ruststream-kinesis lease table in DynamoDB: stream, shard, owner, expires
/// in, counter, checkpoint, how far behind, a handoff asked, the application; then per owner the
/// rows it holds and those that lapsed.
///
/// The AWS configuration comes from the environment (AWS_REGION, credentials, and
/// AWS_ENDPOINT_URL for a local stack such as http://127.0.0.1:4566); --endpoint-url and
/// --region override it.
#[derive(Debug, PartialEq, Eq, Parser)]
#[command(name = "lease-table", version)]
struct Args {
    /// The lease table's name.
    table: String,
    /// Refresh every second until Ctrl-C.
    #[arg(short, long)]
    watch: bool,
    /// Print the view as one JSON document (one per line with --watch).
    #[arg(long)]
    json: bool,
    /// Create the table first (an existing table is left as it is).
    #[arg(long)]
    create: bool,
    /// The DynamoDB endpoint, such as a local stack's http://127.0.0.1:4566.
    #[arg(long, value_name = "URL")]
    endpoint_url: Option<String>,
    /// The AWS region.
    #[arg(long, value_name = "REGION")]
    region: Option<String>,
}

/// What one look at the table shows (as text, or as one line of JSON), and the exit status it
/// stands for.
async fn look(store: &DynamoLeaseStore, json: bool) -> (String, ExitCode) {
    // A table that does not exist, or is keyed otherwise (a Java KCL table), is no lease table:
    // said as the services say it, not shown as an empty one.
    if let Err(err) = store.check().await {
        return refused(store, err);
    }
    let rows = match store.rows_with_applications().await {
        Ok(rows) => rows,
        Err(err) => return refused(store, err),
    };
    let now_ms = epoch_millis();
    let notices = notices_for(store, &rows, now_ms).await;
    if json {
        let view = view::json(store.table(), &rows, &notices, now_ms);
        (format!("{view}\n"), ExitCode::SUCCESS)
    } else {
        let view = view::render(store.table(), &rows, &notices, now_ms);
        (view, ExitCode::SUCCESS)
    }
}

/// The notices of the streams that have rows kept alive by beat, which those rows are judged
/// by; a notice that cannot be read is left out (its rows show their holders' beats lapsed).
async fn notices_for(store: &DynamoLeaseStore, rows: &[view::Row], now_ms: u64) -> view::Notices {
    let streams: std::collections::BTreeSet<&str> = rows
        .iter()
        .filter(|(_, row, _)| row.owner.is_some() && row.is_kept_by_beat(now_ms))
        .map(|(key, _, _)| key.stream())
        .collect();
    let mut notices = view::Notices::new();
    for stream in streams {
        if let Ok(Some(notice)) = store.notice(stream).await {
            notices.insert(stream.to_owned(), notice);
        }
    }
    notices
}

/// What a failed look says, and its exit status: 2 for a table that does not exist or cannot be
/// a lease table, 1 for one that could not be read.
fn refused(store: &DynamoLeaseStore, err: LeaseError) -> (String, ExitCode) {
    match err {
        LeaseError::TableMissing { .. } => (
            format!(
                "{err}\n(or create it with: lease-table {} --create)\n",
                store.table()
            ),
            ExitCode::from(2),
        ),
        LeaseError::TableMismatch { .. } => (format!("{err}\n"), ExitCode::from(2)),
        err => (
            format!("cannot read lease table {}: {err}\n", store.table()),
            ExitCode::FAILURE,
        ),
    }
}

/// Prints a look: the view on stdout, a failure on stderr (so stdout holds only views, JSON
/// ones included).
fn show(text: &str, code: ExitCode) {
    if code == ExitCode::SUCCESS {
        print!("{text}");
    } else {
        eprint!("{text}");
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let args = match Args::try_parse() {
        Ok(args) => args,
        Err(err) => {
            let code = if err.use_stderr() {
                ExitCode::from(64)
            } else {
                ExitCode::SUCCESS
            };
            let _ = err.print();
            return code;
        }
    };
    let mut loader = aws_config::defaults(BehaviorVersion::latest());
    if let Some(url) = &args.endpoint_url {
        loader = loader.endpoint_url(url);
    }
    if let Some(region) = &args.region {
        loader = loader.region(Region::new(region.clone()));
    }
    let config = loader.load().await;
    let store = DynamoLeaseStore::new(&config, args.table.as_str());
    if args.create {
        if let Err(err) = store.create_table().await {
            eprintln!("cannot create lease table {}: {err}", args.table);
            return ExitCode::FAILURE;
        }
        eprintln!("lease table {} is ready", args.table);
    }
    if !args.watch {
        let (text, code) = look(&store, args.json).await;
        show(&text, code);
        return code;
    }
    loop {
        let (text, code) = look(&store, args.json).await;
        if args.json {
            // One document per line, for a script to read as they come.
            show(&text, code);
        } else {
            // Home the cursor and clear the screen, then draw the view again.
            print!(
                "\x1b[H\x1b[2J{}: refreshed every second, Ctrl-C to stop\n\n{text}",
                args.table
            );
        }
        tokio::select! {
            _ = tokio::signal::ctrl_c() => return ExitCode::SUCCESS,
            () = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    fn args(line: &[&str]) -> Result<Args, clap::Error> {
        Args::try_parse_from(std::iter::once("lease-table").chain(line.iter().copied()))
    }

    #[test]
    fn the_command_line_names_a_table_flags_and_where_dynamodb_is() {
        let parsed = args(&[
            "warehouse-leases",
            "--watch",
            "--endpoint-url",
            "http://127.0.0.1:4566",
            "--region",
            "eu-west-1",
        ])
        .unwrap();
        assert_eq!(
            parsed,
            Args {
                table: "warehouse-leases".to_owned(),
                watch: true,
                json: false,
                create: false,
                endpoint_url: Some("http://127.0.0.1:4566".to_owned()),
                region: Some("eu-west-1".to_owned()),
            }
        );
        assert!(args(&["--create", "t", "--json", "-w"]).is_ok());
        // A wrong line is an error printed on stderr; --help and --version are not.
        for wrong in [&[][..], &["t", "--bogus"], &["t", "u"], &["t", "--region"]] {
            let err = args(wrong).unwrap_err();
            assert!(err.use_stderr(), "{wrong:?}: {err}");
        }
        for asked in ["--help", "--version"] {
            assert!(!args(&[asked]).unwrap_err().use_stderr(), "{asked}");
        }
        Args::command().debug_assert();
    }
}

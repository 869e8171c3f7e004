//! `lease-table`: an operator's view of a ruststream-kinesis lease table in DynamoDB.
//!
//! ```text
//! lease-table <TABLE> [--watch] [--json] [--create]
//! ```
//!
//! Prints one line per row of the table: the stream and the shard, the instance holding the
//! lease, how long the lease still runs, the row's write counter and its checkpoint; then per
//! owner the rows it holds and those that lapsed, and the rows nobody holds. `--watch`
//! refreshes the view every second until Ctrl-C; `--json` prints the view as one JSON document
//! (one per line with `--watch`), for scripts; `--create` creates the table first (one string
//! key, `lease_key`, on-demand billing), leaving an existing one as it is.
//!
//! The AWS configuration comes from the environment, as for the services: `AWS_REGION`,
//! credentials, and `AWS_ENDPOINT_URL` for a local stack.
//!
//! Exit status: 0 when the table was shown (even empty), 2 when the table does not exist or is
//! not keyed as a lease table (by the string `lease_key` alone: a Java KCL table is not),
//! 1 when DynamoDB could not be read, 64 for a wrong command line.

mod view;

use std::process::ExitCode;
use std::time::Duration;

use aws_config::BehaviorVersion;
use ruststream_kinesis::{DynamoLeaseStore, LeaseError, LeaseStore, epoch_millis};

const USAGE: &str = "\
usage: lease-table <TABLE> [--watch] [--json] [--create]

Shows the rows of a ruststream-kinesis lease table in DynamoDB: stream, shard, owner,
expires in, counter, checkpoint; then per owner the rows it holds and those that lapsed.

  --watch   refresh every second until Ctrl-C
  --json    print the view as one JSON document (one per line with --watch)
  --create  create the table first (an existing table is left as it is)

The AWS configuration comes from the environment (AWS_REGION, credentials, and
AWS_ENDPOINT_URL for a local stack such as http://127.0.0.1:4566).";

/// The command line.
#[derive(Debug, PartialEq, Eq)]
struct Args {
    table: String,
    watch: bool,
    json: bool,
    create: bool,
}

/// Reads the command line; `Err` holds what to print, and whether it is the help asked for.
fn parse(args: impl IntoIterator<Item = String>) -> Result<Args, (String, bool)> {
    let mut table = None;
    let (mut watch, mut json, mut create) = (false, false, false);
    for arg in args {
        match arg.as_str() {
            "-h" | "--help" => return Err((USAGE.to_owned(), true)),
            "--watch" | "-w" => watch = true,
            "--json" => json = true,
            "--create" => create = true,
            flag if flag.starts_with('-') => {
                return Err((format!("unknown option {flag}\n\n{USAGE}"), false));
            }
            name if table.is_none() => table = Some(name.to_owned()),
            extra => return Err((format!("unexpected argument {extra}\n\n{USAGE}"), false)),
        }
    }
    match table {
        Some(table) => Ok(Args {
            table,
            watch,
            json,
            create,
        }),
        None => Err((format!("the table name is missing\n\n{USAGE}"), false)),
    }
}

/// What one look at the table shows (as text, or as one line of JSON), and the exit status it
/// stands for.
async fn look(store: &DynamoLeaseStore, json: bool) -> (String, ExitCode) {
    // A table that does not exist, or is keyed otherwise (a Java KCL table), is no lease table:
    // said as the services say it, not shown as an empty one.
    if let Err(err) = store.check().await {
        return refused(store, err);
    }
    match store.rows().await {
        Ok(rows) if json => (
            format!("{}\n", view::json(store.table(), &rows, epoch_millis())),
            ExitCode::SUCCESS,
        ),
        Ok(rows) => (
            view::render(store.table(), &rows, epoch_millis()),
            ExitCode::SUCCESS,
        ),
        Err(err) => refused(store, err),
    }
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
    let args = match parse(std::env::args().skip(1)) {
        Ok(args) => args,
        Err((text, true)) => {
            println!("{text}");
            return ExitCode::SUCCESS;
        }
        Err((text, false)) => {
            eprintln!("{text}");
            return ExitCode::from(64);
        }
    };
    let config = aws_config::defaults(BehaviorVersion::latest()).load().await;
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
    use super::*;

    fn args(line: &[&str]) -> Result<Args, (String, bool)> {
        parse(line.iter().map(|arg| (*arg).to_owned()))
    }

    #[test]
    fn the_command_line_names_a_table_and_flags() {
        assert_eq!(
            args(&["warehouse-leases", "--watch"]),
            Ok(Args {
                table: "warehouse-leases".to_owned(),
                watch: true,
                json: false,
                create: false
            })
        );
        assert_eq!(
            args(&["--create", "t"]),
            Ok(Args {
                table: "t".to_owned(),
                watch: false,
                json: false,
                create: true
            })
        );
        assert_eq!(
            args(&["t", "--json"]),
            Ok(Args {
                table: "t".to_owned(),
                watch: false,
                json: true,
                create: false
            })
        );
        assert!(matches!(args(&[]), Err((_, false))));
        assert!(matches!(args(&["t", "--bogus"]), Err((_, false))));
        assert!(matches!(args(&["t", "u"]), Err((_, false))));
        assert!(matches!(args(&["--help"]), Err((_, true))));
    }
}

//! A child process of a figure: this binary run again with an internal command, on the local
//! stack, its stdout read line by line while it lives.

use std::process::Stdio;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Child;
use tokio::sync::mpsc;

use crate::Error;

/// This binary run with `args` (an internal command and its arguments) against the local stack
/// at `url`, killed when dropped: the child, and the lines it prints, as it prints them.
pub fn spawn(url: &str, args: &[&str]) -> Result<(Child, mpsc::UnboundedReceiver<String>), Error> {
    let mut child = tokio::process::Command::new(std::env::current_exe()?)
        .args(args)
        .env("KINESIS_TEST_ENDPOINT", url)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()?;
    let stdout = child.stdout.take().ok_or("no stdout of the child")?;
    let (lines_tx, lines) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut reader = BufReader::new(stdout).lines();
        while let Ok(Some(line)) = reader.next_line().await {
            if lines_tx.send(line).is_err() {
                break;
            }
        }
    });
    Ok((child, lines))
}

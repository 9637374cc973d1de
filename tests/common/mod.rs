//! Helpers shared by the integration tests: what to do when a prerequisite is missing,
//! polling with a deadline, and (in [`container`]) a throwaway systemd host.
//!
//! Each test binary includes this module with `mod common;` and uses only part of it.
#![allow(dead_code)]

pub mod conformance;
pub mod container;
pub mod helper;
pub mod host;
pub mod memory;
#[cfg(all(
    feature = "store-postgres",
    feature = "store-mysql",
    feature = "store-redis"
))]
pub mod remote;
pub mod tls;

use std::io::Write;
use std::time::{Duration, Instant};

/// True when running in CI (`CI` set to anything but empty, `0` or `false`), where a
/// missing prerequisite must fail a test instead of skipping it.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "0" && v != "false")
}

/// Decides whether `test` can go on: `Ok` when `why_not` is `None`. Otherwise, in CI
/// ([`in_ci`]) the test panics with the reason; elsewhere it prints a `SKIPPED` line
/// straight to the process's stderr (past the test harness's capture, so it shows in
/// `cargo test` output) and returns false: the caller returns at once.
pub fn go_on(test: &str, why_not: Option<String>) -> bool {
    go_on_as("SKIPPED", test, why_not)
}

/// [`go_on`] with another word than `SKIPPED` in the printed line (e.g. `PENDING`).
pub fn go_on_as(label: &str, test: &str, why_not: Option<String>) -> bool {
    let Some(why) = why_not else {
        return true;
    };
    if in_ci() {
        panic!("{test}: cannot run in CI: {why}");
    }
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "\n{label} {test}: {why}");
    false
}

/// Calls `probe` every `every` until it returns `Some`, and returns that value; an error
/// naming `what` after `timeout` (with the last probe error, if any).
pub fn wait_for<T>(
    what: &str,
    timeout: Duration,
    every: Duration,
    mut probe: impl FnMut() -> Result<Option<T>, String>,
) -> Result<T, String> {
    let deadline = Instant::now() + timeout;
    let mut last_err = None;
    loop {
        match probe() {
            Ok(Some(v)) => return Ok(v),
            Ok(None) => {}
            Err(e) => last_err = Some(e),
        }
        if Instant::now() >= deadline {
            return Err(match last_err {
                Some(e) => {
                    format!("timed out after {timeout:?} waiting for {what} (last error: {e})")
                }
                None => format!("timed out after {timeout:?} waiting for {what}"),
            });
        }
        std::thread::sleep(every);
    }
}

/// Runs one SQL statement with `psql` on the PostgreSQL server at 127.0.0.1 as user
/// `postgres` in database `db`; returns its unaligned, tuples-only output, trimmed, or
/// its error output.
pub fn psql(db: &str, sql: &str) -> Result<String, String> {
    client_output(std::process::Command::new("psql").args([
        "-h",
        "127.0.0.1",
        "-U",
        "postgres",
        "-d",
        db,
        "-XAtqc",
        sql,
    ]))
}

/// Runs SQL with the `mariadb` client on the MariaDB server at 127.0.0.1 as `root`; returns
/// its tab-separated output without column names, trimmed, or its error output.
pub fn mariadb(sql: &str) -> Result<String, String> {
    client_output(std::process::Command::new("mariadb").args([
        "-uroot",
        "-h127.0.0.1",
        "-N",
        "-B",
        "-e",
        sql,
    ]))
}

/// Runs a database client: its output, trimmed, or its error output.
fn client_output(cmd: &mut std::process::Command) -> Result<String, String> {
    let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
    }
}

//! Issue 3's clock rule with a real skew: this host's clock is moved with libfaketime
//! (`faketime`, Debian's package) for the jobguard process only, while PostgreSQL keeps
//! the real time. Ten minutes apart is refused (exit 76, both times logged); the real
//! clock runs.
//!
//! Needs `faketime` and PostgreSQL on 127.0.0.1 (trust auth, database `test`); skipped
//! with a `SKIPPED` line otherwise, failed in CI.
#![cfg(feature = "store-postgres")]

mod common;
mod support;

use std::process::Command;

use support::{Sandbox, stderr};

fn prerequisites() -> Option<String> {
    let faketime = Command::new("sh")
        .args(["-c", "command -v faketime"])
        .output();
    if !faketime.is_ok_and(|o| o.status.success()) {
        return Some("faketime is not installed (apt-get install faketime)".into());
    }
    let pg = Command::new("psql")
        .args(["-h", "127.0.0.1", "-d", "test", "-XAtqc", "SELECT 1"])
        .output();
    if !pg.is_ok_and(|o| o.status.success()) {
        return Some("no PostgreSQL on 127.0.0.1:5432".into());
    }
    None
}

#[test]
fn a_host_clock_ten_minutes_ahead_of_the_store_is_refused_and_logged() {
    let test = "a_host_clock_ten_minutes_ahead_of_the_store_is_refused_and_logged";
    if !common::go_on(test, prerequisites()) {
        return;
    }
    let schema = format!("jg_skew_{}", std::process::id());
    let sb = Sandbox::new(&format!(
        "[jobs.skew]\nschedule = \"daily\"\ncommand = [\"/bin/sh\", \"-c\", \"echo ran >> @DIR@/out\"]\n\
         store = \"postgres://postgres@127.0.0.1/test?schema={schema}\"\n"
    ));
    let mut cmd = sb.cmd(&["run", "skew"]);
    let program = cmd.get_program().to_owned();
    let args: Vec<_> = cmd.get_args().map(|a| a.to_owned()).collect();
    let mut faked = Command::new("faketime");
    faked.arg("-f").arg("+10m").arg(&program).args(&args);
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => faked.env(k, v),
            None => faked.env_remove(k),
        };
    }
    // Only the wall clock moves; the shim's lease timing uses the monotonic clock.
    let out = faked
        .env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
        .output()
        .expect("faketime");
    assert_eq!(out.status.code(), Some(76), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("ahead of the store's") && err.contains("tolerance 60s"),
        "{err}"
    );
    assert_eq!(sb.lines("out"), 0, "nothing ran");

    let real = cmd.output().expect("run");
    assert!(real.status.success(), "{}", stderr(&real));
    assert_eq!(sb.lines("out"), 1);
    let _ = Command::new("psql")
        .args([
            "-h",
            "127.0.0.1",
            "-d",
            "test",
            "-XAtqc",
            &format!("DROP SCHEMA {schema} CASCADE"),
        ])
        .output();
}

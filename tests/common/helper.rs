//! Running this test binary again as a helper process.
//!
//! A test file declares one ignored test, `helper_entry`, that does nothing unless
//! `JOBGUARD_TEST_HELPER` names a role; [`spawn`] starts the current test binary with only
//! that test selected, so a test can have real, separate processes to race or to kill.
//! Helpers report on stdout with lines starting `HELPER `.

use std::io::{BufRead, BufReader};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

/// Environment variable naming the helper's role.
pub const ROLE_VAR: &str = "JOBGUARD_TEST_HELPER";

/// Starts the current test binary as a helper in `role`, with extra environment.
pub fn spawn(role: &str, env: &[(&str, String)]) -> Child {
    let exe = std::env::current_exe().expect("current test binary");
    let mut cmd = Command::new(exe);
    cmd.args([
        "--exact",
        "helper_entry",
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(ROLE_VAR, role)
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::inherit());
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.spawn().expect("spawn helper")
}

/// Prints a report line for the parent.
pub fn report(line: &str) {
    println!("HELPER {line}");
}

/// Reads the next `HELPER ` report of a helper's stdout (without the prefix); `None` at end
/// of output.
pub fn next_report(out: &mut BufReader<ChildStdout>) -> Option<String> {
    let mut line = String::new();
    loop {
        line.clear();
        if out.read_line(&mut line).expect("read helper output") == 0 {
            return None;
        }
        // libtest prints "test helper_entry ... " without a newline before the test's
        // own output, so the marker can be in the middle of a line.
        if let Some(at) = line.find("HELPER ") {
            return Some(line[at + 7..].trim_end().to_string());
        }
    }
}

/// Waits for a helper to exit, killing it and failing the test if it has not after
/// `limit` (a guard against a hang, not a timing assertion).
pub fn wait_or_kill(child: &mut Child, limit: Duration, what: &str) -> std::process::ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().expect("wait helper") {
            return status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what}: helper still running after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Kills a process on drop (for processes a test leaves behind when it fails).
pub struct KillOnDrop(pub i32);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.0),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

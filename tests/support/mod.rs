//! Shared helpers for the binary tests: a temporary job list, runtime directory and
//! store per test, and the real `jobguard` binary.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A sandbox: a directory with `jobs.toml`, a runtime dir and a SQLite store inside.
pub struct Sandbox {
    pub dir: tempfile::TempDir,
}

impl Sandbox {
    /// A sandbox whose job list is `jobs` (TOML text), with `@DIR@` replaced by the
    /// sandbox's directory. The store defaults to `sqlite://state/jobguard.db` relative to
    /// the job list.
    pub fn new(jobs: &str) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let jobs = jobs.replace("@DIR@", &dir.path().display().to_string());
        let text = format!("[defaults]\nstore = \"sqlite://state/jobguard.db\"\n\n{jobs}");
        std::fs::write(dir.path().join("jobs.toml"), text).expect("write jobs.toml");
        Sandbox { dir }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn file(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// `jobguard ARGS... --config jobs.toml` with a private runtime dir.
    pub fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_jobguard"));
        c.args(args)
            .arg("--config")
            .arg(self.file("jobs.toml"))
            .env("JOBGUARD_RUNTIME_DIR", self.file("run"))
            .env("JOBGUARD_STATE_DIR", self.file("state-dir"))
            .env_remove("JOBGUARD_CONFIG")
            .env_remove("TRIGGER_TIMER_REALTIME_USEC")
            .env_remove("TRIGGER_UNIT")
            .env_remove("INVOCATION_ID")
            .env_remove("NOTIFY_SOCKET")
            .env_remove("JOURNAL_STREAM");
        c
    }

    /// [`Sandbox::cmd`] as if on another machine: run in a mount namespace of its own
    /// (unshare(1), as root) where `/etc/machine-id` reads `machine_id`, so the store sees
    /// another machine's holder and records. Nothing in `jobguard` is told.
    pub fn cmd_on_machine(&self, machine_id: &str, args: &[&str]) -> Command {
        let file = self.file("machine-id");
        std::fs::write(&file, format!("{machine_id}\n")).expect("write machine-id");
        let mut prefix: Vec<std::ffi::OsString> = [
            "--mount",
            "--propagation",
            "private",
            "--",
            "/bin/sh",
            "-c",
            "mount --bind \"$0\" /etc/machine-id && exec \"$@\"",
        ]
        .iter()
        .map(Into::into)
        .collect();
        prefix.push(file.into());
        self.cmd_under("unshare", &prefix, args)
    }

    /// [`Sandbox::cmd`] run by `wrapper` (e.g. `faketime`, `unshare`): `wrapper PREFIX...
    /// jobguard ARGS...`, with the sandbox's environment.
    pub fn cmd_under<S: AsRef<std::ffi::OsStr>>(
        &self,
        wrapper: &str,
        prefix: &[S],
        args: &[&str],
    ) -> Command {
        let inner = self.cmd(args);
        let mut c = Command::new(wrapper);
        c.args(prefix)
            .arg(inner.get_program())
            .args(inner.get_args());
        for (key, value) in inner.get_envs() {
            match value {
                Some(v) => c.env(key, v),
                None => c.env_remove(key),
            };
        }
        c
    }

    pub fn run(&self, args: &[&str]) -> Output {
        self.cmd(args).output().expect("run jobguard")
    }

    /// `jobguard history JOB --json` parsed.
    pub fn history(&self, job: &str) -> Vec<serde_json::Value> {
        let out = self.run(&["history", job, "--json", "--limit", "1000000"]);
        assert!(
            out.status.success(),
            "history failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("history json");
        v.as_array().expect("array").clone()
    }

    pub fn read(&self, name: &str) -> String {
        std::fs::read_to_string(self.file(name)).unwrap_or_default()
    }

    pub fn lines(&self, name: &str) -> usize {
        self.read(name).lines().count()
    }
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Polls `cond` every 20 ms until it holds or `secs` seconds pass; returns whether it held.
pub fn wait_until(secs: u64, mut cond: impl FnMut() -> bool) -> bool {
    let t0 = std::time::Instant::now();
    while !cond() {
        if t0.elapsed() > std::time::Duration::from_secs(secs) {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    true
}

/// Whether a Redis answers at 127.0.0.1:6379.
pub fn redis_up() -> bool {
    std::net::TcpStream::connect_timeout(
        &std::net::SocketAddr::from(([127, 0, 0, 1], 6379)),
        std::time::Duration::from_secs(1),
    )
    .is_ok()
}

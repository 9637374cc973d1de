//! Where jobguard keeps its files: system locations when running as root, per-user
//! locations otherwise, so that a trial run by a normal user works without /run or /var/lib.
//!
//! | what | root | other users |
//! |---|---|---|
//! | locks | `/run/jobguard/lock` | `$XDG_RUNTIME_DIR/jobguard/lock`, else `/tmp/jobguard-UID/lock` |
//! | report files | `/run/jobguard/report` | same base as locks |
//! | store | `sqlite:///var/lib/jobguard/jobguard.db` | `$XDG_STATE_HOME/jobguard/jobguard.db`, else `~/.local/state/jobguard/jobguard.db` |
//! | kept outcomes | `/run/jobguard/pending`, `/var/lib/jobguard/pending` | below the same bases |
//! | first sightings of another host's lapsed lease | `/run/jobguard/suspect` | same base as locks |
//! | runs of another machine with this machine id, once reported | `/run/jobguard/shared` | same base as locks |
//! | the boots this installation ran under | `/var/lib/jobguard/boots` | in the state directory |
//!
//! `JOBGUARD_RUNTIME_DIR` overrides the runtime base (locks and reports) for tests, and
//! `JOBGUARD_STATE_DIR` the state directory.

use std::path::{Path, PathBuf};

/// System runtime directory (`RuntimeDirectory=jobguard`, kept by tmpfiles.d).
pub const SYSTEM_RUNTIME_DIR: &str = "/run/jobguard";
/// System state directory (`StateDirectory=jobguard`).
pub const SYSTEM_STATE_DIR: &str = "/var/lib/jobguard";

/// The stamp the generator leaves in the system manager's output directory at every run
/// (systemd.generator(7): `/run/systemd/generator`), [`crate::systemd::render::RELOAD_STAMP`]
/// there. `units/jobguard-recover.path` starts a recover pass while it exists; the pass
/// removes it.
pub const RELOAD_STAMP: &str = "/run/systemd/generator/jobguard-reloaded";

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// Base of the runtime files: locks and report files live below it.
pub fn runtime_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("JOBGUARD_RUNTIME_DIR").filter(|v| !v.is_empty()) {
        return PathBuf::from(d);
    }
    if is_root() {
        return PathBuf::from(SYSTEM_RUNTIME_DIR);
    }
    match std::env::var_os("XDG_RUNTIME_DIR").filter(|v| !v.is_empty()) {
        Some(d) => PathBuf::from(d).join("jobguard"),
        None => PathBuf::from(format!("/tmp/jobguard-{}", nix::unistd::geteuid())),
    }
}

/// Directory of the per-job lock files.
pub fn lock_dir() -> PathBuf {
    runtime_dir().join("lock")
}

/// Directory of the per-run report files the jobs write to.
pub fn report_dir() -> PathBuf {
    runtime_dir().join("report")
}

/// Directory of the embedded store when the job list names none.
pub fn state_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("JOBGUARD_STATE_DIR").filter(|v| !v.is_empty()) {
        return PathBuf::from(d);
    }
    if is_root() {
        return PathBuf::from(SYSTEM_STATE_DIR);
    }
    if let Some(d) = std::env::var_os("XDG_STATE_HOME").filter(|v| !v.is_empty()) {
        return PathBuf::from(d).join("jobguard");
    }
    match std::env::var_os("HOME").filter(|v| !v.is_empty()) {
        Some(h) => PathBuf::from(h).join(".local/state/jobguard"),
        None => PathBuf::from(format!("/tmp/jobguard-{}/state", nix::unistd::geteuid())),
    }
}

/// The store address used when the job list names none: SQLite in [`state_dir`].
pub fn default_store_url() -> String {
    format!("sqlite://{}", state_dir().join("jobguard.db").display())
}

/// Writes `usec` (µs since the epoch) to `path`, a mark file of the runtime or state
/// directory, through a temporary file and a rename.
///
/// # Errors
/// The file system's.
pub fn write_mark(path: &Path, usec: i64) -> std::io::Result<()> {
    write_marks(path, &[usec])
}

/// Writes `usecs` to `path`, one per line (through `<path>.tmp` and a rename), making its
/// directory (0700) when missing.
///
/// # Errors
/// The file system's.
pub fn write_marks(path: &Path, usecs: &[i64]) -> std::io::Result<()> {
    use std::fmt::Write as _;
    use std::os::unix::fs::DirBuilderExt;
    if let Some(dir) = path.parent() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
    }
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let mut text = String::new();
    for u in usecs {
        let _ = writeln!(text, "{u}");
    }
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, path)
}

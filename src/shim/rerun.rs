//! Re-runs asked for with `jobguard rerun JOB [SLOT]` under systemd: the request is a
//! file, then a start of the job's own unit, so that the forced run gets the unit's user,
//! limits, journal stream and `OnFailure=` like any timer run.
//!
//! A request is `RUNTIME/rerun/JOB@SLOT` (`SLOT` in µs since the epoch; the directory is
//! 0700 and owned by the shim's user, checked as the lock directory is), holding who
//! asked. The shim takes the job's requests after its lock, runs each slot forced (trigger
//! `rerun`, report key `jobguard.forced_by`), oldest first, before its own slot, and
//! looks again at the end of its run, for requests made while it ran (a start of an
//! active unit does nothing). A request is removed before its slot runs, so a shim that
//! dies does not run it twice.

use std::fs;
use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;

/// The report key naming who forced a run.
pub const FORCED_BY: &str = "jobguard.forced_by";

/// Directory of the requests.
pub fn dir() -> PathBuf {
    crate::paths::runtime_dir().join("rerun")
}

/// Records a request to re-run `job`'s slot `slot_usec` (µs since the epoch), asked by
/// `by` (free text: the user, and the sudo user behind it).
///
/// # Errors
/// The path and the I/O error when the file cannot be written.
pub fn request(job: &str, slot_usec: i64, by: &str) -> Result<(), String> {
    let dir = dir();
    std::os::unix::fs::DirBuilderExt::mode(fs::DirBuilder::new().recursive(true), 0o700)
        .create(&dir)
        .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let path = dir.join(format!("{job}@{slot_usec}"));
    let tmp = dir.join(format!(".{job}@{slot_usec}.{}", std::process::id()));
    let write = || -> std::io::Result<()> {
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(by.as_bytes())?;
        f.sync_all()?;
        fs::rename(&tmp, &path)
    };
    write().map_err(|e| {
        let _ = fs::remove_file(&tmp);
        format!("cannot write {}: {e}", path.display())
    })
}

/// Takes (reads and removes) `job`'s requests: (slot in µs since the epoch, who asked),
/// oldest slot first. Unreadable entries are skipped.
pub fn take(job: &str) -> Vec<(i64, String)> {
    let prefix = format!("{job}@");
    let Ok(entries) = fs::read_dir(dir()) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(slot) = name
            .to_str()
            .and_then(|n| n.strip_prefix(&prefix))
            .and_then(|s| s.parse::<i64>().ok())
        else {
            continue;
        };
        let by = fs::read_to_string(e.path()).unwrap_or_default();
        if fs::remove_file(e.path()).is_ok() {
            out.push((slot, by.trim().to_string()));
        }
    }
    out.sort();
    out.dedup_by_key(|r| r.0);
    out
}

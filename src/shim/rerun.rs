//! Re-runs asked for under systemd, with `jobguard rerun JOB [SLOT]` (forced) or with
//! `jobguard resolve JOB SLOT --rerun` (not forced: the slot's queued re-run): the request
//! is a file, then a start of the job's own unit, so that the run gets the unit's user,
//! limits, journal stream and `OnFailure=` like any timer run.
//!
//! A request is `RUNTIME/rerun/JOB@SLOT` (`SLOT` in µs since the epoch; the directory is
//! 0700 and owned by the shim's user, checked as the lock directory is): its first line is
//! who asked, a second line `queued` makes it not forced. The shim takes the job's
//! requests after its lock and runs each slot (trigger `rerun`; report key
//! `jobguard.forced_by` or `jobguard.requested_by` naming who asked), oldest first,
//! before its own slot, and looks again at the end of its run, for requests made while it
//! ran (a start of an active unit does nothing). A request is removed before its slot
//! runs, so a shim that dies does not run it twice. A request that is not forced claims
//! the slot as any trigger does: done meanwhile (on another host, by `recover`), it is a
//! skip.

use std::fs;
use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;

/// The report key naming who forced a run (`jobguard rerun`).
pub const FORCED_BY: &str = "jobguard.forced_by";

/// The report key naming who asked for a queued re-run (`jobguard resolve --rerun`).
pub const REQUESTED_BY: &str = "jobguard.requested_by";

/// A request as [`take`] reads it back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The slot, µs since the epoch.
    pub slot_usec: i64,
    /// Who asked (free text).
    pub by: String,
    /// Run even if the slot is done (`jobguard rerun`); else only if it is not.
    pub forced: bool,
}

/// Directory of the requests.
pub fn dir() -> PathBuf {
    crate::paths::runtime_dir().join("rerun")
}

/// Records a request to re-run `job`'s slot `slot_usec` (µs since the epoch), asked by
/// `by` (free text: the user, and the sudo user behind it); `forced` runs it even if the
/// slot is done. A request for the same slot replaces an earlier one.
///
/// # Errors
/// The path and the I/O error when the file cannot be written.
pub fn request(job: &str, slot_usec: i64, by: &str, forced: bool) -> Result<(), String> {
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
        let by = by.replace('\n', " ");
        let mode = if forced { "" } else { "queued\n" };
        f.write_all(format!("{by}\n{mode}").as_bytes())?;
        f.sync_all()?;
        fs::rename(&tmp, &path)
    };
    write().map_err(|e| {
        let _ = fs::remove_file(&tmp);
        format!("cannot write {}: {e}", path.display())
    })
}

/// Whether a request for `job`'s slot `slot_usec` waits to be taken ([`take`]).
pub fn waiting(job: &str, slot_usec: i64) -> bool {
    dir().join(format!("{job}@{slot_usec}")).exists()
}

/// Takes (reads and removes) `job`'s requests, oldest slot first, one per slot (forced
/// if any request for it was). Unreadable entries are skipped.
pub fn take(job: &str) -> Vec<Request> {
    let prefix = format!("{job}@");
    let Ok(entries) = fs::read_dir(dir()) else {
        return Vec::new();
    };
    let mut out: Vec<Request> = Vec::new();
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(slot_usec) = name
            .to_str()
            .and_then(|n| n.strip_prefix(&prefix))
            .and_then(|s| s.parse::<i64>().ok())
        else {
            continue;
        };
        let text = fs::read_to_string(e.path()).unwrap_or_default();
        let mut lines = text.lines();
        let by = lines.next().unwrap_or_default().trim().to_string();
        let forced = lines.next().map(str::trim) != Some("queued");
        if fs::remove_file(e.path()).is_ok() {
            out.push(Request {
                slot_usec,
                by,
                forced,
            });
        }
    }
    out.sort_by_key(|r| (r.slot_usec, !r.forced));
    out.dedup_by_key(|r| r.slot_usec);
    out
}

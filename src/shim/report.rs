//! The report file a job may append `key=value` lines to (`JOBGUARD_REPORT`): counters
//! such as records read, written and skipped, or a batch label.
//!
//! The shim creates the file before the command starts, owned by the job's user with
//! mode 0600 in a directory only the shim can list, and reads it after the command ends.

use std::collections::BTreeMap;
use std::fs::{self, OpenOptions};
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use nix::unistd::{Gid, Uid};

/// Reports larger than this (bytes) are cut; the rest is ignored.
pub const MAX_REPORT_BYTES: u64 = 64 * 1024;
/// Keys longer than this (bytes) are ignored.
const MAX_KEY_BYTES: usize = 64;

/// Creates an empty report file `<dir>/<run_id>.report`, owned by `owner` if given.
///
/// # Errors
/// The I/O error of creating or chowning the file.
pub fn create(dir: &Path, run_id: &str, owner: Option<(Uid, Gid)>) -> std::io::Result<PathBuf> {
    let path = dir.join(format!("{run_id}.report"));
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)?;
    if let Some((uid, gid)) = owner {
        nix::unistd::chown(&path, Some(uid), Some(gid)).map_err(std::io::Error::from)?;
    }
    Ok(path)
}

/// Reads and removes the report file. Lines are `key=value`; keys are letters, digits,
/// `_`, `-` and `.`; blank lines and lines starting with `#` are ignored; a later value
/// for a key replaces an earlier one. Returns the pairs and the lines that were not
/// understood (for a warning).
pub fn collect(path: &Path) -> (BTreeMap<String, String>, Vec<String>) {
    let mut text = String::new();
    if let Ok(f) = fs::File::open(path) {
        let _ = f.take(MAX_REPORT_BYTES).read_to_string(&mut text);
    }
    let _ = fs::remove_file(path);
    parse(&text)
}

/// Parses report text; see [`collect`].
pub fn parse(text: &str) -> (BTreeMap<String, String>, Vec<String>) {
    let mut pairs = BTreeMap::new();
    let mut bad = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        match line.split_once('=') {
            Some((k, v)) if valid_key(k.trim()) => {
                pairs.insert(k.trim().to_string(), v.trim().to_string());
            }
            _ => bad.push(line.to_string()),
        }
    }
    (pairs, bad)
}

fn valid_key(k: &str) -> bool {
    !k.is_empty()
        && k.len() <= MAX_KEY_BYTES
        && k.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

/// The pairs as one line, `k=v k=v`, for the journal and logs.
pub fn one_line(pairs: &BTreeMap<String, String>) -> String {
    pairs
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_pairs_and_keeps_bad_lines_apart() {
        let (p, bad) = parse(
            "rows_read=3000\n# note\n\nrows_inserted = 2000\nbatch=2026-11-29\nnonsense\nrows_read=3001\n=x\n",
        );
        assert_eq!(p.get("rows_read").map(String::as_str), Some("3001"));
        assert_eq!(p.get("rows_inserted").map(String::as_str), Some("2000"));
        assert_eq!(p.get("batch").map(String::as_str), Some("2026-11-29"));
        assert_eq!(bad, vec!["nonsense".to_string(), "=x".to_string()]);
        assert_eq!(
            one_line(&p),
            "batch=2026-11-29 rows_inserted=2000 rows_read=3001"
        );
    }

    #[test]
    fn file_is_read_once_and_removed() {
        let dir = tempfile::tempdir().unwrap();
        let path = create(dir.path(), "abc", None).unwrap();
        fs::write(&path, "k=v\n").unwrap();
        let (p, _) = collect(&path);
        assert_eq!(p.len(), 1);
        assert!(!path.exists());
    }
}

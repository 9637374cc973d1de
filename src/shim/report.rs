//! The report file a job may append `key=value` lines to (`JOBGUARD_REPORT`): counters
//! such as records read, written and skipped, or a batch label.
//!
//! The shim creates the file before the command starts, owned by the job's user with
//! mode 0600 in a directory only the shim can list, and reads it after the command ends.
//! Keys of the `jobguard.` namespace are the ledger's own (the shim and the recovery pass
//! record `jobguard.forced_by`, `jobguard.passed_over`, ... there): a job's are dropped.

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
/// A line that is not understood is shown (in the warning) cut to about this many bytes.
const MAX_SHOWN_BYTES: usize = 120;

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

/// What a job's report holds, once parsed.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// The pairs kept.
    pub pairs: BTreeMap<String, String>,
    /// The lines that were not understood, shortened, for a warning.
    pub bad: Vec<String>,
    /// The keys dropped because they are in the ledger's own namespace ([`RESERVED`]).
    pub reserved: Vec<String>,
}

/// The prefix of the keys that jobguard itself records in a run's report; compared
/// without regard to the case of letters.
pub const RESERVED: &str = "jobguard.";

/// Reads (at most [`MAX_REPORT_BYTES`]) and removes the report file. Lines are
/// `key=value`; keys are letters, digits, `_`, `-` and `.`; values are text without
/// control characters (tab allowed); bytes that are not UTF-8 spoil only their line; blank
/// lines and lines starting with `#` are ignored; a later value for a key replaces an
/// earlier one; keys starting with [`RESERVED`] are dropped.
pub fn collect(path: &Path) -> Report {
    let mut bytes = Vec::new();
    if let Ok(f) = fs::File::open(path) {
        let _ = f.take(MAX_REPORT_BYTES).read_to_end(&mut bytes);
    }
    let _ = fs::remove_file(path);
    // The job may write anything: bytes that are not UTF-8 spoil their own line only.
    parse(&String::from_utf8_lossy(&bytes))
}

/// Parses report text; see [`collect`].
pub fn parse(text: &str) -> Report {
    let mut report = Report::default();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        match line.split_once('=') {
            Some((k, v)) if valid_key(k.trim()) && printable(v) => {
                let k = k.trim();
                let reserved = k
                    .get(..RESERVED.len())
                    .is_some_and(|p| p.eq_ignore_ascii_case(RESERVED));
                if reserved {
                    report.reserved.push(k.to_string());
                } else {
                    report.pairs.insert(k.to_string(), v.trim().to_string());
                }
            }
            _ => report.bad.push(shorten(line)),
        }
    }
    report
}

/// Values are shown on terminals (`history`, `status`, stderr): no control characters
/// but tab, so a job cannot send escape sequences to an operator's terminal.
fn printable(v: &str) -> bool {
    !v.chars().any(|c| c.is_control() && c != '\t')
}

/// `line` cut to at most [`MAX_SHOWN_BYTES`] (at a character boundary), with `…` if cut.
fn shorten(line: &str) -> String {
    if line.len() <= MAX_SHOWN_BYTES {
        return line.to_string();
    }
    let mut end = MAX_SHOWN_BYTES;
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &line[..end])
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
        let Report { pairs: p, bad, .. } = parse(
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
    fn binary_garbage_in_a_report_keeps_the_good_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = create(dir.path(), "bin", None).unwrap();
        fs::write(&path, b"rows=5\n\xffgarbage\x00\nbatch=b1\n").unwrap();
        let Report { pairs: p, bad, .. } = collect(&path);
        assert_eq!(p.get("rows").map(String::as_str), Some("5"));
        assert_eq!(p.get("batch").map(String::as_str), Some("b1"));
        assert_eq!(bad.len(), 1, "{bad:?}");
    }

    #[test]
    fn control_characters_in_a_report_never_reach_a_terminal() {
        let Report { pairs: p, bad, .. } = parse("k=a\x1b[31mred\x07\nok=tab\there\n");
        assert_eq!(p.get("k"), None, "an escape sequence is not stored");
        assert_eq!(p.get("ok").map(String::as_str), Some("tab\there"));
        assert_eq!(bad.len(), 1);
    }

    #[test]
    fn a_huge_report_line_is_shortened_in_the_warning() {
        let long = "x".repeat(100_000);
        let bad = parse(&long).bad;
        assert_eq!(bad.len(), 1);
        assert!(bad[0].len() <= MAX_SHOWN_BYTES + 4, "{}", bad[0].len());
    }

    #[test]
    fn the_ledgers_own_keys_are_dropped_in_any_case() {
        let r = parse("jobguard.forced_by=x\nJOBGUARD.passed_over=2\njobguardx=1\nrows=3\n");
        assert_eq!(
            r.reserved,
            vec!["jobguard.forced_by", "JOBGUARD.passed_over"]
        );
        assert_eq!(
            r.pairs.keys().collect::<Vec<_>>(),
            vec!["jobguardx", "rows"]
        );
        assert!(r.bad.is_empty());
    }

    #[test]
    fn file_is_read_once_and_removed() {
        let dir = tempfile::tempdir().unwrap();
        let path = create(dir.path(), "abc", None).unwrap();
        fs::write(&path, "k=v\n").unwrap();
        let p = collect(&path).pairs;
        assert_eq!(p.len(), 1);
        assert!(!path.exists());
    }
}

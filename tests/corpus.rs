//! The corpus of malformed job lists (`tests/corpus/bad-jobs/NNN-NAME.toml`, written by
//! `tests/corpus/make-bad-jobs.py`): each holds one realistic mistake beside a good job,
//! and says on its second line which jobs must get a unit (`# good: good-NNN`, or
//! `# good: -` when the mistake costs the whole file).
//!
//! For every file, the real `jobguard-generator` (into a fresh directory) must exit 0,
//! write units for exactly the good jobs and warn about the mistake with
//! FILE:LINE:COLUMN and "skipping"; `jobguard check` must exit 1 and name
//! FILE:LINE:COLUMN on every line it prints to stderr. Every failure is reported at once.

use std::path::{Path, PathBuf};
use std::process::Command;

fn corpus() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus/bad-jobs");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("tests/corpus/bad-jobs")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    files.sort();
    files
}

/// The jobs the file says must get a unit.
fn expected_good(file: &Path) -> Vec<String> {
    let bytes = std::fs::read(file).expect("read");
    let text = String::from_utf8_lossy(&bytes);
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("# good: "))
        .unwrap_or_else(|| panic!("{}: no '# good:' line", file.display()));
    line.split_whitespace()
        .filter(|n| *n != "-")
        .map(str::to_string)
        .collect()
}

/// The jobs whose timers the generator enabled in `out`.
fn written(out: &Path) -> Vec<String> {
    let Ok(rd) = std::fs::read_dir(out.join("timers.target.wants")) else {
        return Vec::new();
    };
    let mut names: Vec<String> = rd
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter_map(|n| {
            n.strip_prefix("jobguard@")
                .and_then(|n| n.strip_suffix(".timer"))
                .map(str::to_string)
        })
        .collect();
    names.sort();
    names
}

/// `FILE:LINE:COLUMN: ` at the start of `line`.
fn placed(line: &str, file: &Path) -> bool {
    let Some(rest) = line.strip_prefix(&format!("{}:", file.display())) else {
        return false;
    };
    let mut parts = rest.splitn(3, ':');
    let (Some(l), Some(c), Some(tail)) = (parts.next(), parts.next(), parts.next()) else {
        return false;
    };
    l.parse::<usize>().is_ok_and(|l| l >= 1)
        && c.parse::<usize>().is_ok_and(|c| c >= 1)
        && tail.starts_with(' ')
}

#[test]
fn every_malformed_job_list_is_skipped_job_by_job_and_placed_by_check() {
    let files = corpus();
    assert!(files.len() >= 100, "only {} corpus files", files.len());
    let mut failures = Vec::new();
    for file in &files {
        let name = file
            .file_name()
            .expect("name")
            .to_string_lossy()
            .into_owned();
        let good = expected_good(file);
        let out = tempfile::tempdir().expect("tempdir");
        let g = Command::new(env!("CARGO_BIN_EXE_jobguard-generator"))
            .arg(out.path())
            .env("JOBGUARD_CONFIG", file)
            .env_remove("SYSTEMD_SCOPE")
            .env_remove("JOBGUARD_UNIT_DIR")
            .output()
            .expect("run jobguard-generator");
        let gerr = String::from_utf8_lossy(&g.stderr);
        if g.status.code() != Some(0) {
            failures.push(format!(
                "{name}: generator exited {:?}: {gerr}",
                g.status.code()
            ));
        }
        let got = written(out.path());
        if got != good {
            failures.push(format!(
                "{name}: units for {got:?}, expected {good:?}\n{gerr}"
            ));
        }
        let prefix = format!("jobguard-generator: {}", file.display());
        let warned = gerr.lines().any(|l| {
            l.strip_prefix("jobguard-generator: ")
                .is_some_and(|l| placed(l, file))
                && l.contains("skipping")
        });
        if !warned || !gerr.contains(&prefix) {
            failures.push(format!("{name}: no placed 'skipping' warning:\n{gerr}"));
        }

        let c = Command::new(env!("CARGO_BIN_EXE_jobguard"))
            .args(["check", "--config"])
            .arg(file)
            .env_remove("JOBGUARD_CONFIG")
            .output()
            .expect("run jobguard check");
        let cerr = String::from_utf8_lossy(&c.stderr);
        if c.status.code() != Some(1) {
            failures.push(format!(
                "{name}: check exited {:?}: {cerr}",
                c.status.code()
            ));
        }
        if cerr.trim().is_empty() {
            failures.push(format!("{name}: check printed no error"));
        }
        for line in cerr.lines() {
            if !placed(line, file) {
                failures.push(format!(
                    "{name}: check line without FILE:LINE:COLUMN: {line}"
                ));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} problems over {} files:\n{}",
        failures.len(),
        files.len(),
        failures.join("\n")
    );
}

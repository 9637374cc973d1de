//! A host with jobguard installed, as the container tests use it: the built binaries,
//! the units under units/ and a job list put into a throwaway systemd container, plus
//! readers of the host's state (`systemctl show`, `jobguard history`).
#![allow(dead_code)]

use std::process::Output;
use std::time::Duration;

use serde_json::Value;

use super::container::{Container, Options};

pub const JOBGUARD: &str = env!("CARGO_BIN_EXE_jobguard");
pub const GENERATOR: &str = env!("CARGO_BIN_EXE_jobguard-generator");

/// The binaries a host gets: `jobguard` and `jobguard-generator` from the directory
/// `JOBGUARD_BIN_DIR` names when it is set (`scripts/test` sets it to the release build
/// the packages ship for the soak), else this test build's ([`JOBGUARD`], [`GENERATOR`]).
pub fn binaries() -> (std::path::PathBuf, std::path::PathBuf) {
    match std::env::var_os("JOBGUARD_BIN_DIR") {
        Some(dir) => {
            let dir = std::path::PathBuf::from(dir);
            (dir.join("jobguard"), dir.join("jobguard-generator"))
        }
        None => (JOBGUARD.into(), GENERATOR.into()),
    }
}
pub const UNITS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/units");
pub const EXAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/store-sync");

// ---------------------------------------------------------------------------------------
// Setting up a host with jobguard installed.
// ---------------------------------------------------------------------------------------

pub fn unit_files() -> Vec<(String, std::path::PathBuf)> {
    let mut files = Vec::new();
    if let Ok(entries) = std::fs::read_dir(UNITS) {
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let is_unit = [".service", ".timer", ".target", ".path", ".socket"]
                .iter()
                .any(|s| name.ends_with(s));
            if is_unit && e.path().is_file() {
                files.push((name, e.path()));
            }
        }
    }
    files.sort();
    files
}

/// jobguard installed as a package would install it ([`binaries`]), with `jobs_toml` as
/// /etc/jobguard/jobs.toml.
pub fn jobguard_options(jobs_toml: &str) -> Options {
    let (jobguard, generator) = binaries();
    let mut opts = Options::new()
        .copy(jobguard, "/usr/local/bin/jobguard")
        .copy(generator, "/usr/local/bin/jobguard-generator")
        .symlink(
            "/etc/systemd/system-generators/jobguard-generator",
            "/usr/local/bin/jobguard-generator",
        )
        .file("/etc/jobguard/jobs.toml", jobs_toml);
    for (name, path) in unit_files() {
        opts = opts.copy(path, &format!("/usr/lib/systemd/system/{name}"));
    }
    opts
}

/// Boots a host with `opts`, then enables the recover units that units/ ships.
pub fn boot(tag: &str, opts: &Options) -> Container {
    let c = Container::boot(tag, opts).expect("boot");
    let recover: Vec<String> = unit_files()
        .into_iter()
        .map(|(name, _)| name)
        .filter(|n| n.starts_with("jobguard-recover."))
        .collect();
    let mut argv = vec!["systemctl", "enable"];
    argv.extend(recover.iter().map(String::as_str));
    c.exec_ok(&argv)
        .expect("systemctl enable the recover units");
    c
}

// ---------------------------------------------------------------------------------------
// Reading the host's state.
// ---------------------------------------------------------------------------------------

pub fn text(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `systemctl show -p ...` of `unit` as (key, value) pairs.
pub fn show(c: &Container, unit: &str, props: &[&str]) -> Vec<(String, String)> {
    let mut argv = vec!["systemctl", "show", unit];
    for p in props {
        argv.extend(["-p", p]);
    }
    c.exec_ok(&argv)
        .expect("systemctl show")
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

pub fn prop(c: &Container, unit: &str, name: &str) -> String {
    show(c, unit, &[name])
        .into_iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v)
        .unwrap_or_default()
}

/// Waits until `unit` is no longer starting or running; returns its `Result=`.
pub fn wait_unit_done(c: &Container, unit: &str, timeout: Duration) -> String {
    super::wait_for(
        &format!("{unit} to finish"),
        timeout,
        Duration::from_millis(200),
        || {
            let p = show(c, unit, &["ActiveState", "SubState", "Result"]);
            let get = |k: &str| {
                p.iter()
                    .find(|(key, _)| key == k)
                    .map(|(_, v)| v.clone())
                    .unwrap_or_default()
            };
            let (active, sub) = (get("ActiveState"), get("SubState"));
            let done = active == "inactive"
                || active == "failed"
                || (active == "active" && sub == "exited");
            Ok(done.then(|| get("Result")))
        },
    )
    .expect("unit finished")
}

/// `jobguard history JOB --json` inside, all rows, newest first.
pub fn history(c: &Container, job: &str) -> Result<Vec<Value>, String> {
    let out = c
        .exec(&["jobguard", "history", job, "--json", "--limit", "1000000"])
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!(
            "jobguard history: {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    match serde_json::from_slice::<Value>(&out.stdout) {
        Ok(Value::Array(rows)) => Ok(rows),
        Ok(other) => Err(format!(
            "jobguard history --json printed {other}, not an array"
        )),
        Err(e) => Err(format!("jobguard history --json: {e}: {}", text(&out))),
    }
}

/// A JSON value as text (run ids may be strings or numbers).
pub fn field(row: &Value, key: &str) -> String {
    match row.get(key) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Null) | None => String::new(),
        Some(v) => v.to_string(),
    }
}

pub fn outcome_rows<'a>(rows: &'a [Value], outcome: &str) -> Vec<&'a Value> {
    rows.iter()
        .filter(|r| field(r, "outcome") == outcome)
        .collect()
}

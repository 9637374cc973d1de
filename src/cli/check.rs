//! `jobguard check`: validates the whole job list. Prints every error to stderr as
//! `FILE:LINE:COLUMN: KEY: MESSAGE`, a one-line summary to stdout, and exits
//! [`crate::exit::FAILURE`] when there is any error.
//!
//! Then it checks each valid job against this host, as its run would meet it: the `user`
//! exists, the `working_directory` is a directory, the command is an executable file
//! (looked up in `PATH` when it has no `/`, as the run does) and the store address can
//! be read (`store_file`, `store_credential`) and is one this build can open (parameters,
//! TLS files; nothing is connected to), and, as root, that the SQLite store, `store_file`,
//! credential and TLS files are root's alone ([`crate::safe_path`]). Those problems are
//! printed as `FILE:LINE:COLUMN: KEY: MESSAGE (on this host)`, at the value that is
//! wrong, and also make the exit status 1; the generator does not check them, since a
//! user or file may appear after boot.
//!
//! Last, warnings that do not change the exit status (`FILE: KEY: warning: MESSAGE`):
//! a `store_file` others may read, `#insecure` TLS, and a Redis store without
//! persistence or with an eviction policy (the one check that connects to a store).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::cli::ConfigArgs;
use crate::config::{self, ConfigSource, JobSet};
use crate::job::Job;

/// The `PATH` a run looks commands up in when the shim has none (systemd's default for
/// system services, systemd.exec(5)).
const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin";

/// Runs `jobguard check`; returns the exit status.
pub fn run(args: &ConfigArgs) -> u8 {
    let source = ConfigSource::resolve(args.config.clone());
    let set = config::load(&source);
    for e in &set.errors {
        eprintln!("{e}");
    }
    let path = std::env::var("PATH").unwrap_or_else(|_| DEFAULT_PATH.to_string());
    let mut on_host = 0;
    for job in set.jobs.values() {
        for (key, message) in host_problems(job, &path) {
            let at = job
                .position(key)
                .map_or_else(|| job.source.display().to_string(), ToString::to_string);
            eprintln!("{at}: jobs.{}.{key}: {message} (on this host)", job.name);
            on_host += 1;
        }
        for (key, message) in host_warnings(job) {
            eprintln!(
                "{}: jobs.{}.{key}: warning: {message}",
                job.source.display(),
                job.name
            );
        }
    }
    let mut line = summary(&set);
    if on_host > 0 {
        line.push_str(&format!(
            "; {on_host} problem{} on this host",
            if on_host == 1 { "" } else { "s" }
        ));
    }
    println!("{line}");
    if set.errors.is_empty() && on_host == 0 {
        crate::exit::OK
    } else {
        crate::exit::FAILURE
    }
}

/// `N valid jobs in M files: a, b, c` (plus `; K errors` when there are errors).
pub fn summary(set: &JobSet) -> String {
    let n = set.jobs.len();
    let files = set.files.len();
    let mut s = format!(
        "{n} valid job{} in {files} file{}",
        if n == 1 { "" } else { "s" },
        if files == 1 { "" } else { "s" }
    );
    if n > 0 {
        let names: Vec<&str> = set.jobs.keys().map(String::as_str).collect();
        s.push_str(": ");
        s.push_str(&names.join(", "));
    }
    let k = set.errors.len();
    if k > 0 {
        s.push_str(&format!("; {k} error{}", if k == 1 { "" } else { "s" }));
    }
    s
}

/// What would make `job` fail on this host before its command does anything, as
/// `(key, message)`. `path` is the `PATH` to look the command up in.
pub fn host_problems(job: &Job, path: &str) -> Vec<(&'static str, String)> {
    let mut problems = Vec::new();
    let account = match job.user.as_deref().map(crate::shim::child::lookup_account) {
        Some(Ok(a)) => Some(a),
        Some(Err(e)) => {
            problems.push(("user", e));
            None
        }
        None => None,
    };
    if let Some(dir) = &job.working_directory
        && !dir.is_dir()
    {
        problems.push((
            "working_directory",
            format!("{} is not a directory", dir.display()),
        ));
    }
    // A relative command with a `/` starts from the directory the command starts in:
    // `working_directory`, else the user's home (if it exists), else `/` (systemd's).
    let start = job.working_directory.clone().unwrap_or_else(|| {
        account
            .map(|a| a.home)
            .filter(|h| h.is_dir())
            .unwrap_or_else(|| PathBuf::from("/"))
    });
    if let Some(program) = job.command.first()
        && let Err(e) = find_program(program, &start, path)
    {
        problems.push(("command", e));
    }
    let key = if job.store_credential.is_some() {
        "store_credential"
    } else if job.store_file.is_some() {
        "store_file"
    } else {
        "store"
    };
    match job.store_address() {
        Err(e) => problems.push((key, e.to_string())),
        // What the run would refuse before connecting: parameters, TLS files, a kind this
        // build does not contain. Opening a shared store does not connect; a SQLite store
        // is not opened, since that would create its file.
        Ok(address) if crate::store::registry::kind_of(&address).is_none_or(|k| k.shared) => {
            if let Err(e) = crate::store::open(&address) {
                problems.push((key, e.to_string()));
            }
        }
        // As root, the SQLite file and every directory above it must be root's alone
        // (the run refuses them otherwise); not opened, since that would create it.
        Ok(address) => {
            if let Ok(crate::store::address::StoreAddress::SqliteFile(p)) =
                crate::store::address::StoreAddress::parse(&address)
                && let Err(e) = crate::safe_path::check_store(&p)
            {
                problems.push((key, format!("store refused: {e}")));
            }
        }
    }
    problems
}

/// Settings that work but are weak, as `(key, message)`: a `store_file` others may read
/// (its password is out), TLS that checks no certificate (`#insecure`), a Redis that can
/// forget a lease (no persistence, or an eviction policy: asks the server, with the
/// store's time limits). Warnings do not change the exit status.
pub fn host_warnings(job: &Job) -> Vec<(&'static str, String)> {
    let mut warnings = Vec::new();
    if let Some(path) = &job.store_file
        && let Some(mode) = crate::safe_path::readable_by_others(path)
    {
        warnings.push((
            "store_file",
            format!(
                "{} is readable by others (mode {mode:04o}): its password is theirs; chmod 0600",
                path.display()
            ),
        ));
    }
    let key = if job.store_credential.is_some() {
        "store_credential"
    } else if job.store_file.is_some() {
        "store_file"
    } else {
        "store"
    };
    let Ok(address) = job.store_address() else {
        return warnings;
    };
    if address.ends_with("#insecure") {
        warnings.push((
            key,
            "#insecure: the server's certificate is not checked, so whoever sits on the \
             network path can pose as the store and read its password"
                .to_string(),
        ));
    }
    #[cfg(feature = "store-redis")]
    if let Ok(crate::store::address::StoreAddress::Redis(a)) =
        crate::store::address::StoreAddress::parse(&address)
    {
        // An address that cannot be opened is already a problem of its own.
        if let Ok(mut store) = crate::store::redis::RedisStore::open(&a) {
            match store.weak_settings() {
                Ok(found) => warnings.extend(found.into_iter().map(|w| (key, w))),
                Err(e) => warnings.push((key, format!("cannot ask Redis about persistence: {e}"))),
            }
        }
    }
    warnings
}

/// Finds `program` as execvp(3) would: as given (relative to `start`) when it contains a
/// `/`, else in each directory of `path`. It must be a regular file with an execute bit.
fn find_program(program: &str, start: &Path, path: &str) -> Result<PathBuf, String> {
    let executable = |p: &Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if program.contains('/') {
        let p = start.join(program);
        return if executable(&p) {
            Ok(p)
        } else {
            Err(format!("{program} is not an executable file"))
        };
    }
    path.split(':')
        .filter(|d| !d.is_empty())
        .map(|d| Path::new(d).join(program))
        .find(|p| executable(p))
        .ok_or_else(|| format!("{program} is not found in PATH ({path})"))
}

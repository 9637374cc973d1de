//! `jobguard import-crontab [--user NAME | --system] [FILE…|-]`: reads crontab(5)
//! tables and prints a job list on stdout, warnings on stderr as `FILE:LINE: warning: …`
//! (the translation itself is [`crate::ops::crontab`]).
//!
//! Which tables have a user field: `/etc/crontab` and files under `/etc/cron.d/` (as
//! cron reads them), or every file with `--system`. A file under a user-table directory
//! (`/var/spool/cron/crontabs/USER`, `/var/spool/cron/USER`, `/var/spool/cron/tabs/USER`)
//! is USER's unless `--user` says otherwise.

use std::io::Read;
use std::path::Path;

use jiff::Timestamp;

use crate::cli::ImportCrontabArgs;
use crate::exit::{self, Error, Finished};
use crate::ops::crontab::{self, Table};

/// Runs `jobguard import-crontab`: ends with 0, or 1 when a file could not be read or a
/// line could not be translated (the rest is still printed).
///
/// # Errors
/// 2 for a user name that is not one.
pub fn run(args: &ImportCrontabArgs) -> exit::Result {
    let mut finished = Finished::OK;
    let now = Timestamp::now();
    let local = crate::calendar::local_zone();
    let mut tables = Vec::new();
    let stdin = [std::path::PathBuf::from("-")];
    let files = if args.files.is_empty() {
        &stdin[..]
    } else {
        &args.files[..]
    };
    for path in files {
        let (origin, text) = if path.as_os_str() == "-" {
            let mut b = Vec::new();
            if let Err(e) = std::io::stdin().read_to_end(&mut b) {
                finished.report(&Error::new(exit::FAILURE, e).context("standard input"));
                continue;
            }
            ("(standard input)".to_string(), b)
        } else {
            match std::fs::read(path) {
                Ok(b) => (path.display().to_string(), b),
                Err(e) => {
                    finished.report(&Error::new(exit::FAILURE, e).context(path.display()));
                    continue;
                }
            }
        };
        let spool_user = spool_owner(path);
        let system =
            args.system || (args.user.is_none() && spool_user.is_none() && is_system_table(path));
        let user = args.user.as_deref().or(spool_user.as_deref());
        if let Some(u) = user.filter(|u| !crontab::valid_user(u)) {
            return Err(Error::new(
                exit::USAGE,
                format!("{origin}: `{u}` is not a user name"),
            ));
        }
        if !system && user.is_none() {
            eprintln!(
                "jobguard: {origin}: read as a user's table with no --user: the jobs run as root \
                 (give --user NAME, or --system for a table with a user field)"
            );
        }
        let table = Table {
            system,
            user,
            local: local.clone(),
            now,
        };
        let import = crontab::import(&text, &table);
        for w in &import.warnings {
            eprintln!("{origin}:{}: warning: {}", w.line, w.text);
        }
        if import.errors > 0 {
            finished.add(exit::FAILURE);
        }
        tables.push((origin, import));
    }
    crontab::name_jobs(&mut tables);
    print!("{}", crontab::render(&tables));
    Ok(finished)
}

/// `/etc/crontab` and `/etc/cron.d/*`: cron's system tables.
fn is_system_table(path: &Path) -> bool {
    path == Path::new("/etc/crontab") || path.parent() == Some(Path::new("/etc/cron.d"))
}

/// USER of a file in a cron daemon's per-user spool directory.
fn spool_owner(path: &Path) -> Option<String> {
    let dir = path.parent()?;
    let spools = [
        "/var/spool/cron/crontabs",
        "/var/spool/cron",
        "/var/spool/cron/tabs",
    ];
    if spools.iter().any(|s| dir == Path::new(s)) {
        return path.file_name()?.to_str().map(str::to_string);
    }
    None
}

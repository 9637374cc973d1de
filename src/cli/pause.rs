//! `jobguard pause JOB [--until TIME] [--reason TEXT]` and `jobguard resume JOB`: pause a
//! job on every host that shares its store, and end the pause ([`crate::pause`]).
//!
//! The window starts now and ends at TIME (systemd timestamp syntax, RFC 3339, or
//! relative: `+4h`), or at `resume`; both moments are the store's clock. Pausing a job
//! that is paused changes the end and the reason of its window. Exit 0; 2 for a TIME that
//! cannot be read or has passed; 69, 70 or 78 when the store or the job list cannot be
//! used.

use crate::cli::{PauseArgs, ResumeArgs, find_job_and_store};
use crate::exit;
use crate::ledger::format_usec;
use crate::pause::{self, PauseError};

/// Who pauses or resumes: the user (and the one behind sudo) at this host.
fn by() -> String {
    format!(
        "{}@{}",
        crate::cli::rerun::who(),
        crate::lease::Holder::current().host
    )
}

/// Runs `jobguard pause`; returns the exit status.
pub fn pause(args: &PauseArgs) -> u8 {
    let until = match &args.until {
        None => None,
        Some(text) => match crate::calendar::parse_timestamp(text, jiff::Timestamp::now()) {
            Ok(t) => Some(t.as_microsecond()),
            Err(e) => {
                eprintln!("jobguard: {}: --until {text:?}: {e}", args.job);
                return exit::USAGE;
            }
        },
    };
    let (job, mut store) = match find_job_and_store(&args.config, &args.job) {
        Ok(x) => x,
        Err(code) => return code,
    };
    match pause::pause(store.as_mut(), &job, until, &by(), args.reason.as_deref()) {
        Ok(w) => {
            let until = w.until.map_or_else(
                || format!("until `jobguard resume {}`", job.name),
                |u| format!("until {}", format_usec(u)),
            );
            println!(
                "{}: paused on every host that shares its store {until}: no slot in between runs, and none is missed",
                job.name
            );
            exit::OK
        }
        Err(PauseError::Store(e)) => {
            eprintln!("jobguard: {}: {e}", job.name);
            e.exit_status()
        }
        Err(e) => {
            eprintln!("jobguard: {}: {e}", job.name);
            exit::USAGE
        }
    }
}

/// Runs `jobguard resume`; returns the exit status.
pub fn resume(args: &ResumeArgs) -> u8 {
    let (job, mut store) = match find_job_and_store(&args.config, &args.job) {
        Ok(x) => x,
        Err(code) => return code,
    };
    match pause::resume(store.as_mut(), &job, &by()) {
        Ok(Some(w)) => {
            println!(
                "{}: resumed on every host that shares its store ({}); its next elapse runs",
                job.name,
                w.describe()
            );
            exit::OK
        }
        Ok(None) => {
            println!("{}: not paused", job.name);
            exit::OK
        }
        Err(e) => {
            eprintln!("jobguard: {}: {e}", job.name);
            e.exit_status()
        }
    }
}

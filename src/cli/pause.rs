//! `jobguard pause JOB [--until TIME] [--reason TEXT]` and `jobguard resume JOB`: pause a
//! job on every host that shares its store, and end the pause ([`crate::ops::pause`]).
//!
//! The window starts now and ends at TIME (systemd timestamp syntax, RFC 3339, or
//! relative: `+4h`), or at `resume`; both moments are the store's clock. Pausing a job
//! that is paused changes the end and the reason of its window. Exit 0; 2 for a TIME that
//! cannot be read or has passed; 69, 70 or 78 when the store or the job list cannot be
//! used.

use crate::cli::{PauseArgs, ResumeArgs, find_job_and_store};
use crate::exit::{self, Error, Finished};
use crate::guard::ledger::format_usec;
use crate::ops::pause;

/// Who pauses or resumes: the user (and the one behind sudo) at this host.
fn by() -> String {
    format!(
        "{}@{}",
        crate::cli::rerun::who(),
        crate::guard::lease::Holder::current().host
    )
}

/// Runs `jobguard pause`.
///
/// # Errors
/// 2 for a TIME that cannot be read or has passed; the job list's or the store's.
pub fn pause(args: &PauseArgs) -> exit::Result {
    let until = match &args.until {
        None => None,
        Some(text) => Some(
            crate::calendar::parse_timestamp(text, jiff::Timestamp::now())
                .map_err(|e| {
                    Error::new(exit::USAGE, format!("--until {text:?}: {e}")).context(&args.job)
                })?
                .as_microsecond(),
        ),
    };
    let (job, mut store) = find_job_and_store(&args.config, &args.job)?;
    let w = pause::pause(store.as_mut(), &job, until, &by(), args.reason.as_deref())
        .map_err(|e| Error::from(e).context(&job.name))?;
    let until = w.until.map_or_else(
        || format!("until `jobguard resume {}`", job.name),
        |u| format!("until {}", format_usec(u)),
    );
    println!(
        "{}: paused on every host that shares its store {until}: no slot in between runs, and none is missed",
        job.name
    );
    Ok(Finished::OK)
}

/// Runs `jobguard resume`.
///
/// # Errors
/// The job list's or the store's.
pub fn resume(args: &ResumeArgs) -> exit::Result {
    let (job, mut store) = find_job_and_store(&args.config, &args.job)?;
    match pause::resume(store.as_mut(), &job, &by())
        .map_err(|e| Error::from(e).context(&job.name))?
    {
        Some(w) => println!(
            "{}: resumed on every host that shares its store ({}); its next elapse runs",
            job.name,
            w.describe()
        ),
        None => println!("{}: not paused", job.name),
    }
    Ok(Finished::OK)
}

//! `jobguard resolve JOB SLOT --rerun|--done`: decide what happens to a held, interrupted
//! or failed slot.

use crate::cli::{ResolveArgs, find_job, open_job_store};
use crate::exit;
use crate::ledger::{Resolution, format_usec};

/// Runs `jobguard resolve`; returns the exit status.
pub fn run(args: &ResolveArgs) -> u8 {
    let job = match find_job(&args.config, &args.job) {
        Ok(j) => j,
        Err(code) => return code,
    };
    let now = jiff::Timestamp::now();
    let slot = match crate::calendar::parse_timestamp(&args.slot, now) {
        Ok(t) => t.as_microsecond(),
        Err(e) => {
            eprintln!("jobguard: bad slot: {e}");
            return exit::USAGE;
        }
    };
    let mut store = match open_job_store(&job) {
        Ok(s) => s,
        Err(code) => return code,
    };
    let resolution = if args.done {
        Resolution::Done
    } else {
        Resolution::Queued
    };
    match store.resolve(&job.name, slot, resolution) {
        Ok(0) => {
            eprintln!(
                "jobguard: {}: slot {} has no interrupted, lease_lost or failed run waiting for a decision (see `jobguard history {}`)",
                job.name,
                format_usec(slot),
                job.name
            );
            exit::FAILURE
        }
        Ok(n) => {
            let what = if args.done {
                "marked done: later triggers skip it".to_string()
            } else if crate::recover::under_systemd() {
                match crate::recover::start_unit(&job.name) {
                    Ok(()) => format!("queued; started jobguard@{}.service", job.name),
                    Err(e) => format!("queued; {e}; it runs at the next `jobguard recover`"),
                }
            } else {
                format!(
                    "queued; it runs at the next `jobguard run {}` or `jobguard recover`",
                    job.name
                )
            };
            println!(
                "{} slot {}: {n} record(s) {what}",
                job.name,
                format_usec(slot)
            );
            exit::OK
        }
        Err(e) => {
            eprintln!("jobguard: {e}");
            exit::STORE_UNAVAILABLE
        }
    }
}

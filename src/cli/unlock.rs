//! `jobguard unlock JOB`: end the job's lease now, whoever holds it. For a holder that is
//! known to be dead (a host that will not come back) when waiting for expiry is not
//! wanted. Does not touch the ledger: `jobguard recover` then marks its run interrupted.

use crate::cli::{UnlockArgs, find_job, open_job_store};
use crate::exit;
use crate::ledger::format_usec;

/// Runs `jobguard unlock`; returns the exit status.
pub fn run(args: &UnlockArgs) -> u8 {
    let job = match find_job(&args.config, &args.job) {
        Ok(j) => j,
        Err(code) => return code,
    };
    let mut store = match open_job_store(&job) {
        Ok(s) => s,
        Err(code) => return code,
    };
    match store.unlock(&job.name) {
        Ok(Some(l)) => {
            println!(
                "{}: ended the lease of host {} (holder {}, token {}, due to expire {})",
                job.name,
                l.host,
                l.holder,
                l.token,
                format_usec(l.expire_at)
            );
            exit::OK
        }
        Ok(None) => {
            println!("{}: no unexpired lease", job.name);
            exit::OK
        }
        Err(e) => {
            eprintln!("jobguard: {e}");
            exit::STORE_UNAVAILABLE
        }
    }
}

//! `jobguard store init [JOB]`: create or migrate the schema of the job list's stores.
//!
//! Every store also does this on first use; running it once at install time makes the
//! first run of a job on a shared store no slower than the others, and shows early that
//! the address and credentials work.

use std::collections::BTreeSet;

use crate::cli::{StoreInitArgs, job_store_address, open_store};
use crate::config::{self, ConfigSource};
use crate::exit;

/// Runs `jobguard store init`; returns the exit status: [`exit::CONFIG`] for an unknown
/// job or a job list with errors (each printed; the valid jobs' stores are still made
/// ready), or the status of a store that could not be made ready (the last one).
pub fn init(args: &StoreInitArgs) -> u8 {
    let set = config::load(&ConfigSource::resolve(args.config.config.clone()));
    let mut status = exit::OK;
    for e in &set.errors {
        eprintln!("jobguard: {e}");
        status = exit::worst(status, exit::CONFIG);
    }
    if let Some(name) = &args.job
        && !set.jobs.contains_key(name)
    {
        eprintln!("jobguard: no job named {name:?}");
        return exit::CONFIG;
    }
    let mut addresses = BTreeSet::new();
    for job in set
        .jobs
        .values()
        .filter(|j| args.job.as_ref().is_none_or(|n| *n == j.name))
    {
        match job_store_address(job) {
            Ok(a) => {
                addresses.insert(a);
            }
            Err(code) => status = exit::worst(status, code),
        }
    }
    if addresses.is_empty() && status == exit::OK {
        println!("no jobs, so no store to initialise");
    }
    for address in addresses {
        match open_store(&address) {
            Ok(store) => println!("schema ready: {}", store.describe()),
            Err(code) => status = exit::worst(status, code),
        }
    }
    status
}

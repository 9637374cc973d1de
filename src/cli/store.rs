//! `jobguard store init [JOB]`: create or migrate the schema of the job list's stores.
//!
//! Every store also does this on first use; running it once at install time makes the
//! first run of a job on a shared store no slower than the others, and shows early that
//! the address and credentials work.

use std::collections::BTreeSet;

use crate::cli::{StoreInitArgs, job_store_address, open_store};
use crate::exit::{self, Error, Finished};
use crate::joblist::config::{self, ConfigSource};

/// Runs `jobguard store init`: ends with [`exit::CONFIG`] for a job list with errors
/// (each printed; the valid jobs' stores are still made ready), or the worst status of
/// the stores that could not be made ready.
///
/// # Errors
/// [`exit::CONFIG`] for an unknown job.
pub fn init(args: &StoreInitArgs) -> exit::Result {
    let set = config::load(&ConfigSource::resolve(args.config.config.clone()));
    let mut finished = Finished::OK;
    for e in &set.errors {
        finished.report(&e.clone().into());
    }
    if let Some(name) = &args.job
        && !set.jobs.contains_key(name)
    {
        return Err(Error::new(exit::CONFIG, format!("no job named {name:?}")));
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
            Err(e) => finished.report(&e),
        }
    }
    if addresses.is_empty() && finished == Finished::OK {
        println!("no jobs, so no store to initialise");
    }
    for address in addresses {
        match open_store(&address) {
            Ok(store) => println!("schema ready: {}", store.describe()),
            Err(e) => finished.report(&e),
        }
    }
    Ok(finished)
}

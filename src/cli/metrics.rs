//! `jobguard metrics`: every job's metrics in Prometheus text format on stdout (see
//! [`crate::ops::metrics`] for what is read and how it is written).

use crate::cli::MetricsArgs;
use crate::exit::{self, Finished};
use crate::joblist::config::{self, ConfigSource};
use crate::ops::metrics;

/// Runs `jobguard metrics`: ends with 0, or the worst status of the stores that could not
/// be read (69, 70 or 78); the text is printed all the same. The job list's errors are
/// printed and exported (`jobguard_job_list_errors`), and leave the status alone.
///
/// # Errors
/// None of its own: every problem is reported on the way.
pub fn run(args: &MetricsArgs) -> exit::Result {
    let set = config::load(&ConfigSource::resolve(args.config.config.clone()));
    let now = jiff::Timestamp::now().as_microsecond();
    let collected = metrics::collect(&set, now, crate::guard::identity::boot_time_usec());
    print!("{}", metrics::render(&collected));
    let mut finished = Finished::OK;
    for e in &set.errors {
        crate::exit::Error::from(e.clone()).print();
    }
    for e in &collected.problems {
        finished.report(e);
    }
    Ok(finished)
}

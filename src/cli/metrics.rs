//! `jobguard metrics`: every job's metrics in Prometheus text format on stdout (see
//! [`crate::metrics`] for what is read and how it is written).

use crate::cli::MetricsArgs;
use crate::config::{self, ConfigSource};
use crate::metrics;

/// Runs `jobguard metrics`; returns 0, or the status of the last store error
/// ([`crate::store::StoreError::exit_status`]: 69, 70 or 78) when a job's store could
/// not be read (the text is printed all the same).
pub fn run(args: &MetricsArgs) -> u8 {
    let set = config::load(&ConfigSource::resolve(args.config.config.clone()));
    let now = jiff::Timestamp::now().as_microsecond();
    let collected = metrics::collect(&set, now, crate::identity::boot_time_usec());
    print!("{}", metrics::render(&collected));
    for e in &set.errors {
        eprintln!("jobguard: {e}");
    }
    for p in &collected.problems {
        eprintln!("jobguard: {p}");
    }
    collected.status
}

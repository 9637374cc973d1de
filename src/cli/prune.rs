//! `jobguard prune [JOB] [--dry-run]`: deletes the records that each job's `retention`
//! lets go, now ([`crate::ops::retention`] says which; `jobguard recover` does the same once a
//! day per job). Prints, per job, how many records it deleted (or would) of how many.

use std::collections::BTreeMap;

use crate::cli::{PruneArgs, job_store_address, open_store};
use crate::exit::{self, Error, Finished};
use crate::joblist::config::{self, ConfigSource};
use crate::ops::retention;

/// Runs `jobguard prune`: ends with 0, [`exit::CONFIG`] for a job list with errors, or
/// the worst status of the stores that could not be pruned.
///
/// # Errors
/// [`exit::CONFIG`] for an unknown job.
pub fn run(args: &PruneArgs) -> exit::Result {
    let set = config::load(&ConfigSource::resolve(args.config.config.clone()));
    let mut finished = Finished::OK;
    for e in &set.errors {
        finished.report(&e.clone().into());
    }
    if let Some(name) = &args.job
        && !set.jobs.contains_key(name)
    {
        return Err(Error::new(
            exit::CONFIG,
            format!("no job named {name:?} in the job list"),
        ));
    }
    let mut by_store: BTreeMap<String, Vec<&crate::joblist::job::Job>> = BTreeMap::new();
    for job in set.jobs.values() {
        if args.job.as_ref().is_some_and(|n| *n != job.name) {
            continue;
        }
        match job_store_address(job) {
            Ok(address) => by_store.entry(address).or_default().push(job),
            Err(e) => finished.report(&e),
        }
    }
    let verb = if args.dry_run {
        "would delete"
    } else {
        "deleted"
    };
    for (address, jobs) in by_store {
        let mut store = match open_store(&address) {
            Ok(s) => s,
            Err(e) => {
                finished.report(&e);
                continue;
            }
        };
        for job in jobs {
            let Some(keep) = job.retention else {
                println!("{}: retention infinity: every record is kept", job.name);
                continue;
            };
            match retention::prune_job(store.as_mut(), job, args.dry_run) {
                Ok(p) => println!(
                    "{}: {verb} {} of {} records{}{} (retention {})",
                    job.name,
                    p.deleted,
                    p.total,
                    if p.probes > 0 {
                        format!(", {} drill probe records", p.probes)
                    } else {
                        String::new()
                    },
                    if p.marks > 0 {
                        format!(" and {} marks", p.marks)
                    } else {
                        String::new()
                    },
                    retention_text(keep)
                ),
                Err(e) => finished.report(&Error::from(e).context(&job.name)),
            }
        }
    }
    Ok(finished)
}

/// A retention as people write one: whole days as days (`90d`, where systemd's format
/// would say `2month 4w 1d 3h 21min 36s`), anything else in systemd's format
/// ([`crate::joblist::timespan::TimeSpan`]: `3month`, `12h`).
fn retention_text(keep: std::time::Duration) -> String {
    const DAY: u64 = 86_400;
    if keep.subsec_nanos() == 0 && keep.as_secs() > 0 && keep.as_secs().is_multiple_of(DAY) {
        format!("{}d", keep.as_secs() / DAY)
    } else {
        crate::joblist::timespan::TimeSpan::from_duration(keep).to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::retention_text;
    use std::time::Duration;

    #[test]
    fn a_retention_of_whole_days_is_printed_in_days() {
        let day = 86_400;
        assert_eq!(retention_text(Duration::from_secs(90 * day)), "90d");
        assert_eq!(retention_text(Duration::from_secs(14 * day)), "14d");
        assert_eq!(retention_text(Duration::from_secs(12 * 3600)), "12h");
        assert_eq!(retention_text(Duration::from_secs(3 * 2_629_800)), "3month");
    }
}

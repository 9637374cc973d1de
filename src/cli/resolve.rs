//! `jobguard resolve JOB SLOT --rerun|--done`: decide what happens to a held, interrupted
//! or failed slot.
//!
//! `--rerun` of a slot that is done (it has since succeeded, or a person marked it done)
//! changes nothing and says so, exiting 0: the slot needs nothing more. The store makes
//! that decision in the same step as the change ([`crate::store::Store::resolve`]).
//!
//! A job no longer in the job list keeps its ledger, and its held slots (a run cut off
//! after its removal, see [`crate::ops::recover::recover_removed`]) can be declared done with
//! `--done` in every store the list names ([`crate::cli::list_store_addresses`]);
//! `--rerun` is refused (exit 78): there is no job left to run it.

use crate::cli::{ResolveArgs, find_job, open_job_store, open_store, report_store_addresses};
use crate::exit::{self, Error, Finished};
use crate::guard::ledger::{Outcome, Resolution, format_usec};
use crate::joblist::config::{self, ConfigSource};
use crate::store::{RunQuery, Store, StoreError};

/// Runs `jobguard resolve`.
///
/// # Errors
/// 1 when no record of the slot waits for a decision; 2 for a slot that cannot be read;
/// the job list's or the store's.
pub fn run(args: &ResolveArgs) -> exit::Result {
    let set = config::load(&ConfigSource::resolve(args.config.config.clone()));
    let in_list = set.jobs.contains_key(&args.job)
        || set
            .errors
            .iter()
            .any(|e| e.job.as_deref() == Some(&args.job));
    if !in_list {
        return removed(args, &set);
    }
    let job = find_job(&args.config, &args.job)?;
    let slot = slot(args)?;
    let mut store = open_job_store(&job)?;
    let resolution = if args.done {
        Resolution::Done
    } else {
        Resolution::Queued
    };
    match store.resolve(&job.name, slot, resolution)? {
        0 if !args.done => match done_by(store.as_mut(), &job.name, slot)? {
            // Nothing is left to re-run: the store queues nothing in a done slot.
            Some(by) => {
                println!(
                    "{} slot {} is done ({}): nothing to re-run; `jobguard rerun {} {}` runs it again",
                    job.name,
                    format_usec(slot),
                    by,
                    job.name,
                    format_usec(slot)
                );
                Ok(Finished::OK)
            }
            None => Err(nothing_waiting(&job.name, slot)),
        },
        0 => Err(nothing_waiting(&job.name, slot)),
        n => {
            let what = if args.done {
                "marked done: later triggers skip it".to_string()
            } else if crate::ops::recover::under_systemd() {
                // As `jobguard rerun`: a request to the job's unit, so that its run names
                // who asked; not forced, so a host that runs the queued slot first makes
                // it a skip. Only root writes the system unit's requests; without one the
                // unit still takes the queued slot first.
                let default_list =
                    ConfigSource::resolve(args.config.config.clone()) == ConfigSource::Default;
                if default_list && nix::unistd::geteuid().is_root() {
                    let by = crate::cli::rerun::who();
                    if let Err(e) = crate::shim::rerun::request(&job.name, slot, &by, false) {
                        eprintln!(
                            "jobguard: {}: {e}; the re-run will not name who asked",
                            job.name
                        );
                    }
                }
                match crate::ops::recover::start_unit(&job.name) {
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
            Ok(Finished::OK)
        }
    }
}

/// The slot asked for, µs since the epoch.
///
/// # Errors
/// [`exit::USAGE`] for a time that cannot be read.
fn slot(args: &ResolveArgs) -> Result<i64, Error> {
    crate::calendar::parse_timestamp(&args.slot, jiff::Timestamp::now())
        .map(|t| t.as_microsecond())
        .map_err(|e| Error::new(exit::USAGE, format!("bad slot: {e}")))
}

/// `resolve` of a job no longer in the job list: `--done` in every store the list names.
fn removed(args: &ResolveArgs, set: &config::JobSet) -> exit::Result {
    if !args.done {
        return Err(Error::new(
            exit::CONFIG,
            format!(
                "no job named {:?} in the job list: nothing can re-run its slots; `--done` declares a slot of it done",
                args.job
            ),
        ));
    }
    let slot = slot(args)?;
    let mut finished = Finished::OK;
    let addresses = report_store_addresses(set, &mut finished);
    let mut marked = 0;
    for address in &addresses {
        let mut store = match open_store(address) {
            Ok(s) => s,
            Err(e) => {
                finished.report(&e);
                continue;
            }
        };
        match store.resolve(&args.job, slot, Resolution::Done) {
            Ok(n) => marked += n,
            Err(e) => finished.report(&e.into()),
        }
    }
    if marked == 0 {
        return if finished == Finished::OK {
            Err(nothing_waiting(&args.job, slot))
        } else {
            Ok(finished)
        };
    }
    println!(
        "{} slot {}: {marked} record(s) marked done (the job is no longer in the job list)",
        args.job,
        format_usec(slot)
    );
    Ok(finished)
}

/// That no record of the slot waits for a decision: [`exit::FAILURE`].
fn nothing_waiting(job: &str, slot: i64) -> Error {
    Error::new(
        exit::FAILURE,
        format!(
            "{job}: slot {} has no interrupted, lease_lost or failed run waiting for a decision (see `jobguard history {job}`)",
            format_usec(slot),
        ),
    )
}

/// What made the slot (µs since the epoch) done, for people: `run ID succeeded on host H
/// at T` or `resolved as done`; `None` when it is not done.
///
/// # Errors
/// The store's, while reading the slot's records.
fn done_by(store: &mut dyn Store, job: &str, slot: i64) -> Result<Option<String>, StoreError> {
    let runs = store.runs(&RunQuery {
        job: Some(job.to_string()),
        slot: Some(slot),
        ..RunQuery::default()
    })?;
    if let Some(r) = runs.iter().find(|r| r.outcome == Outcome::Succeeded) {
        return Ok(Some(format!(
            "run {} succeeded on host {} at {}",
            r.run_id,
            r.host,
            format_usec(r.finished_at.unwrap_or(r.started_at))
        )));
    }
    Ok(runs
        .iter()
        .find(|r| r.resolution == Some(Resolution::Done))
        .map(|r| format!("run {} was resolved as done", r.run_id)))
}

//! `jobguard history JOB [--json] [--limit N]`: the job's ledger, newest first, at most
//! N records (`--limit 0`: none).
//!
//! A job in the job list (paused or not) is read from its store. A job no longer in the
//! list keeps its ledger: it is read from every store the list names
//! ([`crate::cli::list_store_addresses`]), and only when none holds a record of it does
//! `history` exit [`exit::CONFIG`] (78), "no job named".

use crate::cli::{HistoryArgs, find_job, open_job_store, open_store, report_store_addresses, view};
use crate::exit::{self, Error, Finished};
use crate::guard::ledger::Run;
use crate::joblist::config::{self, ConfigSource};
use crate::store::RunQuery;

/// Runs `jobguard history`.
///
/// # Errors
/// The job list's or the store's; [`exit::CONFIG`] for a job no store holds records of.
pub fn run(args: &HistoryArgs) -> exit::Result {
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
    let mut store = open_job_store(&job)?;
    let q = RunQuery {
        job: Some(job.name.clone()),
        limit: args.limit,
        ..RunQuery::default()
    };
    // `--limit 0` asks for at most no record, as `head -n 0` does: the store is still
    // opened (so a wrong job or store is reported), but no row is printed. The store's
    // own limit 0 would mean "all".
    let runs = match args.limit {
        0 => Vec::new(),
        _ => store.runs(&q)?,
    };
    print(args, &runs, &store.describe());
    Ok(Finished::OK)
}

/// The history of a job no longer in the job list, from every store the list names.
fn removed(args: &HistoryArgs, set: &config::JobSet) -> exit::Result {
    let mut finished = Finished::OK;
    let addresses = report_store_addresses(set, &mut finished);
    let mut runs: Vec<Run> = Vec::new();
    let mut described = Vec::new();
    for address in &addresses {
        let mut store = match open_store(address) {
            Ok(s) => s,
            Err(e) => {
                finished.report(&e);
                continue;
            }
        };
        described.push(store.describe());
        match store.runs(&RunQuery {
            job: Some(args.job.clone()),
            ..RunQuery::default()
        }) {
            Ok(r) => runs.extend(r),
            Err(e) => finished.report(&e.into()),
        }
    }
    if runs.is_empty() {
        if finished != Finished::OK {
            return Ok(finished);
        }
        let files: Vec<String> = set.files.iter().map(|f| f.display().to_string()).collect();
        return Err(Error::new(
            exit::CONFIG,
            format!(
                "no job named {:?} in {}, and no store it names holds records of it",
                args.job,
                if files.is_empty() {
                    "the job list (no file found)".to_string()
                } else {
                    files.join(", ")
                }
            ),
        ));
    }
    // Newest first, as one store returns them (the sort is stable).
    runs.sort_by_key(|r| std::cmp::Reverse(r.started_at));
    if args.limit > 0 {
        runs.truncate(args.limit);
    } else {
        runs.clear();
    }
    if !args.json {
        eprintln!(
            "jobguard: note: {} is no longer in the job list; its records were read from {}",
            args.job,
            described.join(", ")
        );
    }
    print(args, &runs, &described.join(", "));
    Ok(finished)
}

fn print(args: &HistoryArgs, runs: &[Run], store: &str) {
    if args.json {
        let arr: Vec<_> = runs.iter().map(view::run_json).collect();
        println!("{}", serde_json::Value::Array(arr));
    } else if args.limit == 0 {
        // No record asked for: nothing to print.
    } else if runs.is_empty() {
        println!("no runs of {} recorded in {store}", args.job);
    } else {
        let rows: Vec<_> = runs.iter().map(view::run_row).collect();
        print!("{}", view::table(&view::RUN_HEADER, &rows));
    }
}

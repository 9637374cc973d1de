//! `jobguard history JOB [--json] [--limit N]`: the job's ledger, newest first, at most
//! N records (`--limit 0`: none).

use crate::cli::{HistoryArgs, find_job, open_job_store, view};
use crate::exit;
use crate::store::RunQuery;

/// Runs `jobguard history`; returns the exit status.
pub fn run(args: &HistoryArgs) -> u8 {
    let job = match find_job(&args.config, &args.job) {
        Ok(j) => j,
        Err(code) => return code,
    };
    let mut store = match open_job_store(&job) {
        Ok(s) => s,
        Err(code) => return code,
    };
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
        _ => match store.runs(&q) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("jobguard: {e}");
                return exit::STORE_UNAVAILABLE;
            }
        },
    };
    if args.json {
        let arr: Vec<_> = runs.iter().map(view::run_json).collect();
        println!("{}", serde_json::Value::Array(arr));
    } else if args.limit == 0 {
        // No record asked for: nothing to print.
    } else if runs.is_empty() {
        println!("no runs of {} recorded in {}", job.name, store.describe());
    } else {
        let rows: Vec<_> = runs.iter().map(view::run_row).collect();
        print!("{}", view::table(&view::RUN_HEADER, &rows));
    }
    exit::OK
}

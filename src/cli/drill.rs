//! `jobguard drill JOB [--json]`: [`crate::ops::drill`], printed. Exit 0 when every layer
//! held; 1 when one did not; the store's status (69, 70, 78) when a store error kept a
//! layer from being tried, as when the store cannot be opened ([`crate::ops::drill::status`]).

use crate::cli::{DrillArgs, find_job_and_store};
use crate::exit::{self, Finished};

/// Runs `jobguard drill`.
///
/// # Errors
/// The job list's or the store's, when the store cannot be opened.
pub fn run(args: &DrillArgs) -> exit::Result {
    let (job, mut store) = find_job_and_store(&args.config, &args.job)?;
    let verdicts = crate::ops::drill::run(&job, store.as_mut(), &crate::paths::lock_dir());
    let all = verdicts.iter().all(|v| v.held);
    if args.json {
        let rows: Vec<serde_json::Value> = verdicts
            .iter()
            .map(|v| serde_json::json!({"layer": v.layer, "held": v.held, "detail": v.detail}))
            .collect();
        println!("{}", serde_json::Value::Array(rows));
    } else {
        for v in &verdicts {
            println!(
                "{:<7} {:<6} {}",
                v.layer,
                if v.held { "held" } else { "FAILED" },
                v.detail
            );
        }
        println!(
            "{}: {}",
            job.name,
            if all {
                "every layer held"
            } else {
                "a layer did not hold"
            }
        );
    }
    Ok(Finished::with(crate::ops::drill::status(&verdicts)))
}

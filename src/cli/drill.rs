//! `jobguard drill JOB [--json]`: [`crate::drill`], printed.

use crate::cli::{DrillArgs, find_job, open_job_store};
use crate::exit;

/// Runs `jobguard drill`; returns the exit status.
pub fn run(args: &DrillArgs) -> u8 {
    let job = match find_job(&args.config, &args.job) {
        Ok(j) => j,
        Err(code) => return code,
    };
    let mut store = match open_job_store(&job) {
        Ok(s) => s,
        Err(code) => return code,
    };
    let verdicts = crate::drill::run(&job, store.as_mut(), &crate::paths::lock_dir());
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
    if all { exit::OK } else { exit::FAILURE }
}

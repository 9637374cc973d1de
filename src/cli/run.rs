//! `jobguard run JOB [--slot TIME] [--force]`: the ExecStart of `jobguard@JOB.service`.

use crate::cli::{RunArgs, find_job};
use crate::shim;

/// Runs `jobguard run`; returns the exit status (the command's own, or see [`crate::exit`]).
pub fn run(args: &RunArgs) -> u8 {
    let job = match find_job(&args.config, &args.job) {
        Ok(j) => j,
        Err(code) => return code,
    };
    let code = shim::run(
        &job,
        &shim::Request {
            slot: args.slot.clone(),
            force: args.force,
            queued_only: false,
            forced_by: None,
        },
    );
    // The last STATUS= (a skip's reason, a run's outcome) must reach systemd before the
    // process is gone, or `systemctl status` may not show it.
    crate::journal::notify_barrier(std::time::Duration::from_secs(1));
    code
}

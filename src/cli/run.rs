//! `jobguard run JOB [--slot TIME] [--force]`: the ExecStart of `jobguard@JOB.service`.

use crate::cli::{RunArgs, find_job};
use crate::exit::{self, Finished};
use crate::shim;

/// Runs `jobguard run`: ends with the command's own status, or jobguard's ([`crate::exit`]).
///
/// # Errors
/// The job list's.
pub fn run(args: &RunArgs) -> exit::Result {
    let job = find_job(&args.config, &args.job)?;
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
    crate::systemd::journal::notify_barrier(std::time::Duration::from_secs(1));
    Ok(Finished::with(code))
}

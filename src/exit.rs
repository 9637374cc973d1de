//! Exit statuses of the `jobguard` binary: one table, documented in the README.
//!
//! `jobguard run` passes the command's own status through (a death by signal N becomes
//! 128+N, as in a shell); its own failures use the BSD `sysexits.h` numbers, which jobs
//! rarely use, so an operator can tell "the job failed" from "jobguard could not run it".
//! A skip (slot done, lock held, lease held elsewhere) is a success: 0.

use std::process::ExitStatus;

/// Success, or a run that was skipped.
pub const OK: u8 = 0;
/// `jobguard check` found errors; other commands: a generic failure.
pub const FAILURE: u8 = 1;
/// `jobguard status` and `jobguard audit`: something needs attention (a held, failed,
/// missed or queued slot, a run whose holder is gone, a timer that is not waiting, ...).
pub const ATTENTION: u8 = 1;
/// The command line was wrong (clap's status).
pub const USAGE: u8 = 2;
/// The store could not be reached (`EX_UNAVAILABLE`).
pub const STORE_UNAVAILABLE: u8 = 69;
/// An internal error (`EX_SOFTWARE`).
pub const SOFTWARE: u8 = 70;
/// A system call failed: lock or runtime directory, fork (`EX_OSERR`).
pub const OS_ERROR: u8 = 71;
/// The lease was lost while the command ran; the command was stopped (`EX_TEMPFAIL`).
pub const LEASE_LOST: u8 = 75;
/// This host's clock and the store's differ by more than `clock_tolerance`; nothing ran
/// (`EX_PROTOCOL`).
pub const CLOCK_SKEW: u8 = 76;
/// Not allowed: e.g. `user =` needs root (`EX_NOPERM`).
pub const NO_PERMISSION: u8 = 77;
/// The job is unknown or its configuration is invalid (`EX_CONFIG`).
pub const CONFIG: u8 = 78;
/// The command ran past its `timeout` and was stopped (as `timeout(1)`).
pub const TIMEOUT: u8 = 124;
/// The command exists but could not be executed (as a shell).
pub const CANNOT_EXECUTE: u8 = 126;
/// The command was not found (as a shell).
pub const NOT_FOUND: u8 = 127;

/// The status to exit with for a child's status: its code, or 128+N for signal N.
pub fn from_child(status: ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    if let Some(code) = status.code() {
        return u8::try_from(code & 0xff).unwrap_or(FAILURE);
    }
    match status.signal() {
        Some(sig) => u8::try_from((128 + sig) & 0xff).unwrap_or(FAILURE),
        None => FAILURE,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    #[test]
    fn child_codes_pass_through_and_signals_become_128_plus_n() {
        assert_eq!(from_child(ExitStatus::from_raw(0)), 0);
        assert_eq!(from_child(ExitStatus::from_raw(3 << 8)), 3);
        assert_eq!(from_child(ExitStatus::from_raw(9)), 137);
        assert_eq!(from_child(ExitStatus::from_raw(15)), 143);
    }
}

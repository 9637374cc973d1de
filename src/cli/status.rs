//! `jobguard status` (being written).

use crate::cli::StatusArgs;

/// Runs `jobguard status`; returns the exit status.
pub fn run(args: &StatusArgs) -> u8 {
    let _ = args;
    eprintln!("jobguard: status: not built yet");
    crate::exit::SOFTWARE
}

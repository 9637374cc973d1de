//! `jobguard run` (being written).

use crate::cli::RunArgs;

/// Runs `jobguard run`; returns the exit status.
pub fn run(args: &RunArgs) -> u8 {
    let _ = args;
    eprintln!("jobguard: run: not built yet");
    crate::exit::SOFTWARE
}

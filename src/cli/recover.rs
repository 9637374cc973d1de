//! `jobguard recover` (being written).

use crate::cli::RecoverArgs;

/// Runs `jobguard recover`; returns the exit status.
pub fn run(args: &RecoverArgs) -> u8 {
    let _ = args;
    eprintln!("jobguard: recover: not built yet");
    crate::exit::SOFTWARE
}

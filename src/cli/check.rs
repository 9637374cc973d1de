//! `jobguard check` (being written).

use crate::cli::ConfigArgs;

/// Runs `jobguard check`; returns the exit status.
pub fn run(args: &ConfigArgs) -> u8 {
    let _ = args;
    eprintln!("jobguard: check: not built yet");
    crate::exit::SOFTWARE
}

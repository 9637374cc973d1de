//! `jobguard generate` (being written).

use crate::cli::GenerateArgs;

/// Runs `jobguard generate`; returns the exit status.
pub fn run(args: &GenerateArgs) -> u8 {
    let _ = args;
    eprintln!("jobguard: generate: not built yet");
    crate::exit::SOFTWARE
}

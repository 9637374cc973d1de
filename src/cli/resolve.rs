//! `jobguard resolve` (being written).

use crate::cli::ResolveArgs;

/// Runs `jobguard resolve`; returns the exit status.
pub fn run(args: &ResolveArgs) -> u8 {
    let _ = args;
    eprintln!("jobguard: resolve: not built yet");
    crate::exit::SOFTWARE
}

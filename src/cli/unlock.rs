//! `jobguard unlock` (being written).

use crate::cli::UnlockArgs;

/// Runs `jobguard unlock`; returns the exit status.
pub fn run(args: &UnlockArgs) -> u8 {
    let _ = args;
    eprintln!("jobguard: unlock: not built yet");
    crate::exit::SOFTWARE
}

//! `jobguard history` (being written).

use crate::cli::HistoryArgs;

/// Runs `jobguard history`; returns the exit status.
pub fn run(args: &HistoryArgs) -> u8 {
    let _ = args;
    eprintln!("jobguard: history: not built yet");
    crate::exit::SOFTWARE
}

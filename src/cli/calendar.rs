//! `jobguard calendar` (being written).

use crate::cli::CalendarArgs;

/// Runs `jobguard calendar`; returns the exit status.
pub fn run(args: &CalendarArgs) -> u8 {
    let _ = args;
    eprintln!("jobguard: calendar: not built yet");
    crate::exit::SOFTWARE
}

//! `jobguard check`: validates the whole job list. Prints every error to stderr as
//! `FILE:LINE:COLUMN: KEY: MESSAGE`, a one-line summary to stdout, and exits
//! [`crate::exit::FAILURE`] when there is any error.

use crate::cli::ConfigArgs;
use crate::config::{self, ConfigSource, JobSet};

/// Runs `jobguard check`; returns the exit status.
pub fn run(args: &ConfigArgs) -> u8 {
    let source = ConfigSource::resolve(args.config.clone());
    let set = config::load(&source);
    for e in &set.errors {
        eprintln!("{e}");
    }
    println!("{}", summary(&set));
    if set.errors.is_empty() {
        crate::exit::OK
    } else {
        crate::exit::FAILURE
    }
}

/// `N valid jobs in M files: a, b, c` (plus `; K errors` when there are errors).
pub fn summary(set: &JobSet) -> String {
    let n = set.jobs.len();
    let files = set.files.len();
    let mut s = format!(
        "{n} valid job{} in {files} file{}",
        if n == 1 { "" } else { "s" },
        if files == 1 { "" } else { "s" }
    );
    if n > 0 {
        let names: Vec<&str> = set.jobs.keys().map(String::as_str).collect();
        s.push_str(": ");
        s.push_str(&names.join(", "));
    }
    let k = set.errors.len();
    if k > 0 {
        s.push_str(&format!("; {k} error{}", if k == 1 { "" } else { "s" }));
    }
    s
}

//! One validated job from the job list, with every default applied.
//!
//! Parsing and validation of the TOML lives in [`crate::config`]; this type is what the
//! generator, the shim and the operator commands work with.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use crate::calendar::CalendarSpec;

/// What `jobguard recover` does with a run that was cut off (key `on_interrupted`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnInterrupted {
    /// Run the slot again once, through the same lock, lease and ledger.
    #[default]
    Rerun,
    /// Leave the slot for `jobguard resolve JOB SLOT --rerun|--done`.
    Hold,
}

/// What the shim does when the store cannot be reached within `store_wait`
/// (key `on_store_unavailable`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnStoreUnavailable {
    /// Nothing runs; the unit fails and the journal says why.
    #[default]
    Fail,
    /// Nothing runs; the run is logged as skipped and exits 0.
    Skip,
}

/// A job from the job list.
#[derive(Debug, Clone)]
pub struct Job {
    /// Lower-case letters, digits, `-`, `_`, `.`; starts with a letter or digit; at most 64 bytes.
    pub name: String,
    /// Free text for the unit's `Description=`.
    pub description: Option<String>,
    /// The `OnCalendar=` expression as written.
    pub schedule: String,
    /// The parsed schedule.
    pub calendar: CalendarSpec,
    /// argv of the command; `command[0]` without a `/` is looked up in `PATH`.
    pub command: Vec<String>,
    /// User the command runs as (the shim stays privileged).
    pub user: Option<String>,
    /// Working directory of the command (absolute after loading).
    pub working_directory: Option<PathBuf>,
    /// Extra environment of the command.
    pub environment: BTreeMap<String, String>,
    /// The run is stopped (SIGTERM, then SIGKILL) after this long.
    pub timeout: Option<Duration>,
    /// `RandomizedDelaySec=` of the timer.
    pub randomized_delay: Option<Duration>,
    /// Store address, e.g. `sqlite:///var/lib/jobguard/jobguard.db` (relative sqlite paths
    /// already resolved against the directory of the file that named them).
    pub store: String,
    /// Lease time to live; the shim renews every third of it.
    pub lease_ttl: Duration,
    /// Policy for runs cut off by a crash or reboot.
    pub on_interrupted: OnInterrupted,
    /// How long the shim retries an unreachable store at start (default 2 min).
    pub store_wait: Duration,
    /// What to do when the store stays unreachable.
    pub on_store_unavailable: OnStoreUnavailable,
    /// Grace between SIGTERM and SIGKILL when the shim stops the command (default 10 s).
    pub kill_grace: Duration,
    /// The file the job was defined in.
    pub source: PathBuf,
}

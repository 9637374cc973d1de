//! One validated job from the job list, with every default applied.
//!
//! Parsing and validation of the TOML lives in [`crate::joblist::config`]; this type is what the
//! generator, the shim and the operator commands work with. Every field here has been
//! checked: names follow [`is_valid_job_name`], spans are finite where the key requires
//! it, relative paths are already resolved against the file that named them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::calendar::Schedule;

/// Longest job name, in bytes.
pub const MAX_JOB_NAME_LEN: usize = 64;

/// Default `lease_ttl`: 2 minutes.
pub const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(120);
/// Default `store_wait`: 2 minutes.
pub const DEFAULT_STORE_WAIT: Duration = Duration::from_secs(120);
/// Default `clock_tolerance`: 60 seconds.
pub const DEFAULT_CLOCK_TOLERANCE: Duration = Duration::from_secs(60);
/// Default `kill_grace`: 10 seconds between SIGTERM and SIGKILL.
pub const DEFAULT_KILL_GRACE: Duration = Duration::from_secs(10);

/// Whether `name` is a valid job name: 1 to 64 bytes of lower-case ASCII letters, digits,
/// `-`, `_` and `.`, starting with a letter or a digit. Every such name is a valid
/// systemd unit instance as it is, so `jobguard@NAME.timer` needs no escaping.
pub fn is_valid_job_name(name: &str) -> bool {
    let b = name.as_bytes();
    !b.is_empty()
        && b.len() <= MAX_JOB_NAME_LEN
        && (b[0].is_ascii_lowercase() || b[0].is_ascii_digit())
        && b.iter().all(|&c| {
            c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, b'-' | b'_' | b'.')
        })
}

/// The job name of the probes of `jobguard drill JOB` ([`crate::ops::drill`]): `JOB@drill`, a
/// name no job can have ([`is_valid_job_name`] refuses `@`), safe as a lock file name and
/// in every store's keys.
pub fn drill_probe_name(job: &str) -> String {
    format!("{job}@drill")
}

/// Whether `name` is a drill probe's job name ([`drill_probe_name`]).
pub fn is_drill_probe_name(name: &str) -> bool {
    name.strip_suffix("@drill").is_some_and(is_valid_job_name)
}

/// What `jobguard recover` does with a run that was cut off (key `on_interrupted`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnInterrupted {
    /// Run the slot again once, through the same lock, lease and ledger.
    #[default]
    Rerun,
    /// Leave the slot for `jobguard resolve JOB SLOT --rerun|--done`.
    Hold,
}

/// Whether a success settles the job's earlier failed slots (key `settle_failures`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SettleFailures {
    /// Each failed slot waits for a person (`jobguard resolve`, `rerun`) or its own
    /// success.
    #[default]
    Never,
    /// A success of a later slot settles the earlier slots whose latest attempt failed:
    /// they are resolved `done`, and the run's report names them
    /// ([`crate::shim::SETTLED`]). For a job whose next run makes up for a failed one (a
    /// health ping, an idempotent sync).
    NextSuccess,
}

/// Which slots run when a firing finds that earlier elapses never ran: after downtime, or
/// after a run that outlasted the next elapse (systemd starts no second instance of an
/// active service, so that elapse passes without a start). Key `catch_up`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CatchUp {
    /// One run, for the latest elapse that is due (systemd's `Persistent=` behaviour); the
    /// elapses it passes over are recorded with that run and listed by `jobguard audit`.
    #[default]
    Latest,
    /// Every elapse since the job's newest recorded slot runs once, oldest first, each as
    /// its own attempt; at most `catch_up_limit` of them, the older ones passed over.
    All,
    /// Only the slot whose firing started the run; the timer gets `Persistent=false`, and
    /// elapses that passed while the job was down or running are passed over.
    None,
}

impl CatchUp {
    /// The key's value as written in the job list.
    pub fn as_str(self) -> &'static str {
        match self {
            CatchUp::Latest => "latest",
            CatchUp::All => "all",
            CatchUp::None => "none",
        }
    }
}

/// Default `retention`: 90 days.
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(90 * 86_400);

/// Default `catch_up_limit`: the most slots one catch-up runs.
pub const DEFAULT_CATCH_UP_LIMIT: u32 = 100;

/// What the shim does when the store cannot be reached within `store_wait`
/// (key `on_store_unavailable`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnStoreUnavailable {
    /// Nothing runs; the unit fails and the journal says why.
    #[default]
    Fail,
    /// Nothing runs; the run is logged as skipped and the unit succeeds.
    Skip,
}

/// Which logind inhibitor lock the shim holds while the command runs (key `inhibit`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Inhibit {
    /// Shutdown and sleep wait up to logind's `InhibitDelayMaxSec`.
    #[default]
    Delay,
    /// Shutdown and sleep that honour inhibitors are refused while the job runs.
    Block,
    /// No inhibitor lock.
    None,
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
    pub calendar: Schedule,
    /// argv of the command; `command[0]` without a `/` is looked up in `PATH`.
    pub command: Vec<String>,
    /// User the command runs as (the shim stays privileged).
    pub user: Option<String>,
    /// Working directory of the command (absolute after loading).
    pub working_directory: Option<PathBuf>,
    /// Extra environment of the command.
    pub environment: BTreeMap<String, String>,
    /// The run is stopped (SIGTERM, then SIGKILL after `kill_grace`) after this long;
    /// `None`: no limit.
    pub timeout: Option<Duration>,
    /// `RandomizedDelaySec=` of the timer; `None` when not set or zero.
    pub randomized_delay: Option<Duration>,
    /// Store address, e.g. `sqlite:///var/lib/jobguard/jobguard.db` (relative sqlite paths
    /// already resolved against the directory of the file that named them). Empty when
    /// [`Job::store_file`] or [`Job::store_credential`] is set: the address is read at
    /// run time ([`Job::store_address`]).
    pub store: String,
    /// A root-only file holding the store address (absolute after loading), so that
    /// secrets stay out of the world-readable job list and unit files.
    pub store_file: Option<PathBuf>,
    /// The ID of a systemd credential holding the store address (systemd.exec(5),
    /// `LoadCredential=`), valid by [`crate::systemd::credential::invalid_id`]; the generator
    /// passes it to the job's service and to `jobguard-recover.service`.
    pub store_credential: Option<String>,
    /// How long the shim retries an unreachable store before `on_store_unavailable`.
    pub store_wait: Duration,
    /// Policy when the store stays unreachable.
    pub on_store_unavailable: OnStoreUnavailable,
    /// Largest accepted difference between host time and store time.
    pub clock_tolerance: Duration,
    /// Lease time to live; the shim renews every third of it.
    pub lease_ttl: Duration,
    /// Policy for runs cut off by a crash or reboot.
    pub on_interrupted: OnInterrupted,
    /// Whether a success settles earlier failed slots.
    pub settle_failures: SettleFailures,
    /// Inhibitor lock held while the command runs.
    pub inhibit: Inhibit,
    /// Unit started when the job's service fails (`OnFailure=`); may use specifiers
    /// such as `%n`.
    pub on_failure: Option<String>,
    /// Unit started when the job's service succeeds (`OnSuccess=`, systemd.unit(5),
    /// systemd 249 or later); may use specifiers such as `%n`.
    pub on_success: Option<String>,
    /// Whether the job runs on its schedule (key `enabled`, default true). A paused job
    /// (`false`) keeps its units and its ledger, but its timer is not enabled by the
    /// generator, `jobguard recover` neither starts nor re-arms it (and stops it when it
    /// is still active), and no slot of it is expected (none is reported missed).
    pub enabled: bool,
    /// Time between SIGTERM and SIGKILL when the command is stopped.
    pub kill_grace: Duration,
    /// `Persistent=` of the timer: catch up a slot missed while the machine was off.
    /// Defaults to true unless `catch_up` is `none`.
    pub persistent: bool,
    /// Which missed elapses run (key `catch_up`).
    pub catch_up: CatchUp,
    /// The most elapses one catch-up runs with [`CatchUp::All`], 1 to 10000 (key
    /// `catch_up_limit`).
    pub catch_up_limit: u32,
    /// How long records are kept (key `retention`): a record that started longer ago,
    /// of a slot that is done, is deleted by `jobguard recover` and `jobguard prune`
    /// ([`crate::ops::retention`]); `None` (`0` or `infinity`): kept forever.
    pub retention: Option<Duration>,
    /// The file the job was defined in.
    pub source: PathBuf,
    /// Where the job and its keys were written, for messages: by key (`user`, `store` for
    /// any of `store`, `store_file` and `store_credential`), the value's position (in the
    /// `[defaults]` that gave it, when it was inherited); `""` is the job's own
    /// `[jobs.NAME]` key. Empty for a job not read from a job list. See
    /// [`Job::position`].
    pub positions: BTreeMap<&'static str, SourcePos>,
}

/// A place in a job-list file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourcePos {
    /// The file.
    pub file: PathBuf,
    /// 1-based line.
    pub line: usize,
    /// 1-based column, in characters.
    pub column: usize,
}

impl std::fmt::Display for SourcePos {
    /// `FILE:LINE:COLUMN`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}:{}", self.file.display(), self.line, self.column)
    }
}

/// Why [`Job::store_address`] could not produce an address.
#[derive(Debug, thiserror::Error)]
pub enum StoreAddressError {
    /// The store file could not be read.
    #[error("job {job}: cannot read store_file {path}: {source}")]
    Read {
        /// The job.
        job: String,
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The store file, or a directory above it, could be changed by someone other than
    /// root while jobguard runs as root ([`crate::safe_path`]); it was not read.
    #[error("job {job}: store_file refused: {source}")]
    Unsafe {
        /// The job.
        job: String,
        /// Which path, and why.
        source: crate::safe_path::UnsafePath,
    },
    /// The store file holds no address.
    #[error("job {job}: store_file {path} holds no address")]
    Empty {
        /// The job.
        job: String,
        /// The file.
        path: PathBuf,
    },
    /// The store credential was not found or could not be read.
    #[error("job {job}: store_credential: {source}")]
    Credential {
        /// The job.
        job: String,
        /// What was looked for, and where.
        source: crate::systemd::credential::FindError,
    },
    /// The address read from `store_file` or `store_credential` is a relative
    /// `sqlite://` path: the shim (started in `/`) and a shell would open different files.
    #[error(
        "job {job}: {from} holds a relative SQLite path ({address}); write it absolute (sqlite:///…)"
    )]
    RelativeSqlite {
        /// The job.
        job: String,
        /// Where the address came from (`store_file PATH`, `store_credential ID`).
        from: String,
        /// The address.
        address: String,
    },
    /// The store credential holds no address.
    #[error("job {job}: store_credential {id} ({path}) holds no address")]
    CredentialEmpty {
        /// The job.
        job: String,
        /// The credential ID.
        id: String,
        /// The file it was read from.
        path: PathBuf,
    },
}

impl crate::exit::Status for StoreAddressError {
    /// 78 (`EX_CONFIG`): the job's store address cannot be read.
    fn exit_status(&self) -> u8 {
        crate::exit::CONFIG
    }
}

impl Job {
    /// A job with every optional key at its default: the store is
    /// [`crate::paths::default_store_url`]. Meant for tests and tools that build jobs
    /// without a job list.
    pub fn new(
        name: &str,
        calendar: impl Into<Schedule>,
        command: Vec<String>,
        source: &Path,
    ) -> Self {
        let calendar = calendar.into();
        Job {
            name: name.to_string(),
            description: None,
            schedule: calendar.to_string(),
            calendar,
            command,
            user: None,
            working_directory: None,
            environment: BTreeMap::new(),
            timeout: None,
            randomized_delay: None,
            store: crate::paths::default_store_url(),
            store_file: None,
            store_credential: None,
            store_wait: DEFAULT_STORE_WAIT,
            on_store_unavailable: OnStoreUnavailable::Fail,
            clock_tolerance: DEFAULT_CLOCK_TOLERANCE,
            lease_ttl: DEFAULT_LEASE_TTL,
            on_interrupted: OnInterrupted::Rerun,
            settle_failures: SettleFailures::Never,
            inhibit: Inhibit::Delay,
            on_failure: None,
            on_success: None,
            enabled: true,
            kill_grace: DEFAULT_KILL_GRACE,
            persistent: true,
            catch_up: CatchUp::Latest,
            catch_up_limit: DEFAULT_CATCH_UP_LIMIT,
            retention: Some(DEFAULT_RETENTION),
            source: source.to_path_buf(),
            positions: BTreeMap::new(),
        }
    }

    /// Where `key` of the job was written (`store_file` and `store_credential` are found
    /// as `store`), else where the job's table begins; `None` for a job not read from a
    /// job list.
    pub fn position(&self, key: &str) -> Option<&SourcePos> {
        let key = if key.starts_with("store") && key != "store_wait" {
            "store"
        } else {
            key
        };
        self.positions.get(key).or_else(|| self.positions.get(""))
    }

    /// What decides the job's slots, as hosts that share a store compare it
    /// ([`crate::store::ScheduleDecl`]): the schedule's normalized form (as
    /// `systemd-analyze calendar` prints it, so `daily` and `*-*-* 00:00:00` agree) and the
    /// zone its times are in (the host's own zone when the schedule names none).
    pub fn schedule_fingerprint(&self) -> String {
        let normal = self.calendar.to_string();
        let zone = self.calendar.zone_name();
        if normal.ends_with(&format!(" {zone}")) {
            normal
        } else {
            format!("{normal} {zone}")
        }
    }

    /// When the job's schedule was defined on this host: the modification time of the
    /// file that states it (its `schedule` key, or the job's table), µs since the epoch;
    /// 0 when it cannot be read (a job not read from a file).
    pub fn schedule_defined_at(&self) -> i64 {
        let file = self
            .position("schedule")
            .map_or(self.source.as_path(), |p| p.file.as_path());
        std::fs::metadata(file)
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
    }

    /// How long, µs, a host's declaration of this schedule holds without a refresh
    /// ([`crate::store::ScheduleDecl::horizon`]): twice the longest gap between the
    /// schedule's elapses around `now_usec` (the previous one and the next eight, so a
    /// weekday schedule counts its weekend), and at least 10 minutes, so that clocks a
    /// little apart and a firing delayed by `RandomizedDelaySec=` do not end it early.
    pub fn schedule_horizon(&self, now_usec: i64) -> i64 {
        const LEAST: i64 = 600_000_000;
        let Ok(mut at) = jiff::Timestamp::from_microsecond(now_usec) else {
            return LEAST;
        };
        let mut previous = self.calendar.previous_elapse(at);
        let mut longest = 0i64;
        for _ in 0..8 {
            let Some(next) = self.calendar.next_elapse(at) else {
                break;
            };
            if let Some(p) = previous {
                longest = longest.max(next.as_microsecond() - p.as_microsecond());
            }
            previous = Some(next);
            at = next;
        }
        let delay = self
            .randomized_delay
            .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX));
        longest.saturating_mul(2).saturating_add(delay).max(LEAST)
    }

    /// The store address: [`Job::store`]; or the first line of [`Job::store_file`] that
    /// is neither empty nor a `#` comment, trimmed; or, by the same rule, the text of
    /// credential [`Job::store_credential`], read from the first place of
    /// [`crate::systemd::credential::places`] that has it (`$CREDENTIALS_DIRECTORY` inside the
    /// service, else where systemd looks: `/run/credentials/@system`, `/etc/credstore`,
    /// `/run/credstore`, `/usr/lib/credstore`).
    ///
    /// # Errors
    /// [`StoreAddressError`] when the file or credential cannot be found or read, holds
    /// no address, or holds a relative `sqlite://` path (which would depend on the
    /// current directory).
    pub fn store_address(&self) -> Result<String, StoreAddressError> {
        resolve_store_address(
            &self.name,
            &self.store,
            self.store_file.as_deref(),
            self.store_credential.as_deref(),
        )
    }

    /// Whether the job's store may live on another host, so its service should wait for
    /// the network: any store of a shared kind ([`crate::store::registry::StoreKind::shared`],
    /// every kind but SQLite), and any store named through
    /// `store_file` or `store_credential` (its address is a secret the generator does not
    /// read).
    pub fn needs_network(&self) -> bool {
        self.store_file.is_some()
            || self.store_credential.is_some()
            || crate::store::registry::kind_of(&self.store).is_none_or(|k| k.shared)
    }
}

/// A store named by a `[defaults]` table (`store`, `store_file` or `store_credential`):
/// the commands that read every ledger of the job list (`history` and `audit` of a job
/// no longer in it, `recover`'s look for cut-off runs of such jobs) read it too, so a
/// job removed from the list keeps its ledger.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DefaultStore {
    /// The file whose `[defaults]` named it.
    pub file: PathBuf,
    /// The address, empty when `store_file` or `store_credential` is set.
    pub store: String,
    /// As [`Job::store_file`].
    pub store_file: Option<PathBuf>,
    /// As [`Job::store_credential`].
    pub store_credential: Option<String>,
}

impl DefaultStore {
    /// The address, read as [`Job::store_address`] reads a job's.
    ///
    /// # Errors
    /// As [`Job::store_address`]; messages name `[defaults] of FILE` for the job.
    pub fn address(&self) -> Result<String, StoreAddressError> {
        resolve_store_address(
            &format!("[defaults] of {}", self.file.display()),
            &self.store,
            self.store_file.as_deref(),
            self.store_credential.as_deref(),
        )
    }
}

/// The store address from `store`, `store_file` or `store_credential`: see
/// [`Job::store_address`]; `name` is the job named in errors.
fn resolve_store_address(
    name: &str,
    store: &str,
    store_file: Option<&Path>,
    store_credential: Option<&str>,
) -> Result<String, StoreAddressError> {
    let (address, from) = if let Some(id) = store_credential {
        let (path, text) = crate::systemd::credential::find(id).map_err(|source| {
            StoreAddressError::Credential {
                job: name.to_string(),
                source,
            }
        })?;
        let address =
            first_address_line(&text).ok_or_else(|| StoreAddressError::CredentialEmpty {
                job: name.to_string(),
                id: id.to_string(),
                path,
            })?;
        (address, format!("store_credential {id}"))
    } else if let Some(path) = store_file {
        let real =
            crate::safe_path::check_file(path).map_err(|source| StoreAddressError::Unsafe {
                job: name.to_string(),
                source,
            })?;
        let text = std::fs::read_to_string(real).map_err(|source| StoreAddressError::Read {
            job: name.to_string(),
            path: path.to_path_buf(),
            source,
        })?;
        let address = first_address_line(&text).ok_or_else(|| StoreAddressError::Empty {
            job: name.to_string(),
            path: path.to_path_buf(),
        })?;
        (address, format!("store_file {}", path.display()))
    } else {
        return Ok(store.to_string());
    };
    if let Ok(crate::store::address::StoreAddress::SqliteFile(p)) =
        crate::store::address::StoreAddress::parse(&address)
        && p.is_relative()
    {
        return Err(StoreAddressError::RelativeSqlite {
            job: name.to_string(),
            from,
            address,
        });
    }
    Ok(address)
}

/// The first line of `text` that is neither empty nor a `#` comment, trimmed.
fn first_address_line(text: &str) -> Option<String> {
    text.lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_names_follow_the_rules() {
        for good in ["a", "store-sync", "0day", "a.b_c-d", &"x".repeat(64)] {
            assert!(is_valid_job_name(good), "{good:?}");
        }
        for bad in [
            "",
            "-a",
            ".a",
            "_a",
            "A",
            "a b",
            "a/b",
            "a@b",
            "ä",
            "a\\b",
            &"x".repeat(65),
        ] {
            assert!(!is_valid_job_name(bad), "{bad:?}");
        }
    }
}

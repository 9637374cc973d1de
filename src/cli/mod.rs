//! The `jobguard` command line: argument definitions (clap derive) and one file per
//! subcommand. Parsing is pure; each subcommand's `run` does the I/O, prints its own
//! errors once to stderr as `jobguard: ...`, and returns the exit status of [`crate::exit`].

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, CommandFactory, Parser, Subcommand};
use clap_complete::{ArgValueCompleter, CompletionCandidate};

use crate::exit::{Error, Finished};

pub mod audit;
pub mod calendar;
pub mod check;
pub mod drill;
pub mod fleet;
pub mod generate;
pub mod history;
pub mod import_crontab;
pub mod mark;
pub mod metrics;
pub mod pause;
pub mod prune;
pub mod recover;
pub mod rerun;
pub mod resolve;
pub mod run;
pub mod status;
pub mod store;
pub mod unlock;
pub mod view;

/// Run scheduled jobs exactly once per scheduled slot.
#[derive(Debug, Parser)]
#[command(name = "jobguard", version, about, propagate_version = true)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run one job for its current slot (the ExecStart of jobguard@JOB.service).
    Run(RunArgs),
    /// Validate the job list and check each job against this host (user, working
    /// directory, command, store address, as root that the store and its files are
    /// root's alone, and under systemd that the job's service still has KillMode=mixed
    /// and SendSIGKILL=yes); print every problem; exit 1 if there is one. Also warns about weak
    /// settings (#insecure TLS, a store_file others may read, a Redis that can forget
    /// leases), which do not change the exit status.
    Check(ConfigArgs),
    /// Write the units the generator would write into a directory, for inspection.
    Generate(GenerateArgs),
    /// Show the elapses of OnCalendar= expressions, like `systemd-analyze calendar`.
    Calendar(CalendarArgs),
    /// Show a job's ledger, newest first.
    History(HistoryArgs),
    /// List every job with its last slot and outcome, and what needs attention; exit 1
    /// when anything does.
    ///
    /// Needs attention: a slot not done whose latest attempt failed, is held, or waits for
    /// its queued re-run; a running record whose holder is gone; a missed slot (elapsed
    /// more than the job's grace ago with no record, after the newest record or between the
    /// newest 200); a timer that
    /// is not waiting (unless masked). Exit 69 or 78 when a store or the job list cannot
    /// be read.
    Status(StatusArgs),
    /// Find runs cut off by a crash or reboot; mark them interrupted; re-run or hold them.
    ///
    /// Also reports each missed slot once (journal event `missed`), starts a job's
    /// on_failure unit for a slot it holds after a cut no failing service announced,
    /// starts timers loaded but never started and restarts timers active without a next
    /// elapse. With `[metrics] textfile` in the job list, writes what `jobguard metrics`
    /// prints to that file atomically on every pass (a failure is the journal event
    /// `metrics`, not a failed pass).
    Recover(RecoverArgs),
    /// Decide what happens to a held or failed slot.
    Resolve(ResolveArgs),
    /// Check every layer of a job's guard without running its command or touching its
    /// slots: trigger twice in one window, the second must be refused or do nothing.
    ///
    /// Uses a probe job JOB@drill (a name no job can have) in the job's lock directory
    /// and store, and settles its records so that audit finds nothing: the lock refuses
    /// a second taker at once; the store answers, its clock within clock_tolerance; the
    /// lease refuses a second holder, passes only after expiry by the store's clock with
    /// a higher fencing token, and the first holder's late finish is refused; a done probe
    /// slot is skipped. Prints each layer's verdict with numbers; exit 0 only when every
    /// layer held, 1 otherwise (69/78 when the store or job list cannot be used).
    Drill(DrillArgs),
    /// Translate crontab(5) tables into a job list (TOML on stdout, warnings on stderr).
    ///
    /// Reads each FILE (`-` or none: standard input). `/etc/crontab` and `/etc/cron.d/*`
    /// are system tables (a user field after the time fields), as is any file with
    /// `--system`; others are a user's table, run as `--user` (or, for
    /// `/var/spool/cron/crontabs/USER`, that USER). Keeps cron's meaning: either day when
    /// both day fields are restricted (two OnCalendar= expressions), CRON_TZ, RANDOM_DELAY,
    /// MAILTO, `%`, shell syntax; drops a `flock -n` wrapper; writes what the jobs share
    /// once in `[defaults]`, with `catch_up = "none"` (cron never runs a missed slot).
    /// Names each job from its own line (command and next telling word), never from its
    /// place, since the name is its ledger key. Warns per line where
    /// OnCalendar= cannot keep it (daylight-saving gaps and repeated hours, @reboot,
    /// L/W/#/H); such lines stay as comments. Exit 0, or 1 when a line could not be read
    /// or a file could not be opened.
    ImportCrontab(ImportCrontabArgs),
    /// Run a slot again (done, failed or held), forced, as the job's own unit.
    ///
    /// Under systemd, with the default job list: asks the job's shim to run the slot
    /// (a request file in /run/jobguard/rerun) and starts jobguard@JOB.service, so the run
    /// gets the unit's user, limits, journal and OnFailure= like a timer run; a unit that
    /// is running takes the request when its run ends (root only: exit 77 for another
    /// user). Otherwise runs it here, like
    /// `jobguard run JOB --slot SLOT --force`. The record is forced, with trigger rerun
    /// and the report key jobguard.forced_by naming who asked. SLOT defaults to the
    /// latest elapse. Exit 0 when started (under systemd) or the run's status.
    Rerun(RerunArgs),
    /// Check ledgers against the schedule; exit 1 when something needs attention.
    ///
    /// Reads the ledger of one job, or of every job a store holds (also jobs no longer in
    /// the job list), and lists: two successes of one slot, the later not forced
    /// (duplicate_success); attempts at one slot whose [started, finished] intervals
    /// overlap (overlap); running records whose holder is gone (orphan_running); slots that
    /// elapsed with no record and no catch-up decision (missed) or that a catch-up run
    /// passed over (passed_over); held, failed and queued slots; fencing tokens that go
    /// backwards by start time (token_backwards). Reads only; works on every store. Exit 0
    /// when nothing needs attention, 1 when something does (passed_over does not count),
    /// 69 or 78 when a store or the job list cannot be read.
    Audit(AuditArgs),
    /// Print every job's metrics in Prometheus text format (0.0.4).
    ///
    /// Per job: store_up, schedule interval, last success, last outcome, slot and
    /// duration, attempts and runs by outcome (counted over the whole ledger), missed,
    /// held, failed and queued slots and orphaned runs (as status judges them: the newest 200
    /// records and every slot not done), running runs and the lease holder by host, needs_attention (the rule of
    /// status and audit, without systemd's timers). `jobguard recover` writes the same
    /// text to `[metrics] textfile` of the job list on every pass (Debian's node_exporter
    /// reads /var/lib/prometheus/node-exporter/*.prom). Exit 0; 69, 70 or 78 when a job's
    /// store cannot be used (the job is still listed, with jobguard_store_up 0).
    Metrics(MetricsArgs),
    /// Record KEY in NAMESPACE once, in the job's store (a fenced dedupe record).
    ///
    /// For "already pushed" records: `jobguard mark shipping "$ORDER" && push "$ORDER"`
    /// pushes each order once, whichever host or attempt gets there first. Inside a run
    /// (the job's command, JOBGUARD_JOB and JOBGUARD_FENCING_TOKEN set) the mark carries
    /// the run's fencing token and is refused when the run's lease has been taken over,
    /// released or has expired. Outside a run, --job names the job whose store holds the
    /// mark. NAMESPACE is the job's own: two jobs marking one key mark it once each;
    /// with --shared it is one namespace for every job of the store (a shared mark counts
    /// in every job's own namespace too; marks recorded before namespaces were a job's own
    /// are shared ones).
    /// Marks are kept as long as the job's records (retention). Exit 0 when marked
    /// now; 1 when KEY was marked already (printing by which run, host and when); 75 when
    /// fenced out; 2 for a bad namespace or key; 69, 70 or 78 when the store or the job
    /// list cannot be used.
    Mark(MarkArgs),
    /// Whether KEY is marked in NAMESPACE: exit 0 when it is (printing by which run, host
    /// and when), 1 when it is not; 2, 69, 70 or 78 as for mark.
    Marked(MarkArgs),
    /// End a job's lease now (for a holder known to be dead); a holder alive on this host
    /// needs --force.
    Unlock(UnlockArgs),
    /// Delete the records each job's retention lets go (also done by `jobguard recover`
    /// once a day per job).
    ///
    /// A slot that is done goes whole once all its records started more than `retention`
    /// ago (default 90 days; `0` or `infinity` keeps every record); the job's newest success, its
    /// newest slot and every attempt at a slot that is not done (failed, held, queued, cut
    /// off, running) stay. Prints per job how many records it deleted of how many. Exit 0;
    /// 69, 70 or 78 when a store or the job list cannot be used.
    Prune(PruneArgs),
    /// Pause a job on every host that shares its store, from now until TIME or `jobguard
    /// resume`.
    ///
    /// The pause window is kept in the job's store. No host runs a slot that elapses in
    /// it (journal event `skipped`, reason `paused`), nor catches one up after it; status,
    /// audit, recover and metrics list such slots as paused, never as missed, and status
    /// shows `paused until TIME` on every host. `jobguard rerun` and `jobguard run --slot
    /// TIME --force` still run a slot. Pausing a paused job changes its window's end and
    /// reason. (`enabled = false` in the job list pauses the job on that host alone.)
    /// Exit 0; 2 for a TIME that cannot be read or has passed; 69, 70 or 78 when the store
    /// or the job list cannot be used.
    Pause(PauseArgs),
    /// End a job's pause now, on every host that shares its store; its next elapse runs.
    /// Exit 0 (also when it was not paused); 69, 70 or 78 as for pause.
    Resume(ResumeArgs),
    /// Manage the stores of the job list.
    #[command(subcommand)]
    Store(StoreCommand),
}

/// `jobguard store ...`.
#[derive(Debug, Subcommand)]
pub enum StoreCommand {
    /// Create or migrate the schema of every store the job list names (or one job's).
    /// Also done on first use; run it once when installing with a shared store.
    Init(StoreInitArgs),
}

/// Arguments of `jobguard store init`.
#[derive(Debug, Clone, Args)]
pub struct StoreInitArgs {
    /// Only this job's store (default: every store of the job list).
    #[arg(add = ArgValueCompleter::new(complete_job))]
    pub job: Option<String>,
    #[command(flatten)]
    pub config: ConfigArgs,
}

/// Where the job list is.
#[derive(Debug, Clone, Args)]
pub struct ConfigArgs {
    /// A job list file, or a directory of *.toml files (default: /etc/jobguard/jobs.toml
    /// and /etc/jobguard/jobs.d/*.toml; env JOBGUARD_CONFIG).
    #[arg(long, value_name = "PATH", global = true)]
    pub config: Option<PathBuf>,
}

/// Arguments of `jobguard run`.
#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    /// The job's name.
    #[arg(add = ArgValueCompleter::new(complete_job))]
    pub job: String,
    /// Run this slot instead of the current one (systemd timestamp syntax, e.g.
    /// "2026-11-29 02:00:00 UTC", RFC 3339, or relative: "-2h").
    #[arg(long, value_name = "TIME", allow_hyphen_values = true)]
    pub slot: Option<String>,
    /// Run even if the slot already succeeded or is held; recorded as forced.
    #[arg(long)]
    pub force: bool,
    #[command(flatten)]
    pub config: ConfigArgs,
}

/// Arguments of `jobguard drill`.
#[derive(Debug, Clone, Args)]
pub struct DrillArgs {
    /// The job's name.
    #[arg(add = ArgValueCompleter::new(complete_job))]
    pub job: String,
    /// Print the verdicts as JSON: [{"layer", "held", "detail"}].
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub config: ConfigArgs,
}

/// Arguments of `jobguard import-crontab`.
#[derive(Debug, Clone, Args)]
pub struct ImportCrontabArgs {
    /// crontab(5) files; `-` or none reads standard input.
    #[arg(value_name = "FILE")]
    pub files: Vec<std::path::PathBuf>,
    /// The tables are a user's (no user field): the jobs run as USER.
    #[arg(long, value_name = "USER", conflicts_with = "system")]
    pub user: Option<String>,
    /// The tables have a user field after the time fields, as /etc/crontab.
    #[arg(long)]
    pub system: bool,
}

/// Arguments of `jobguard rerun`.
#[derive(Debug, Clone, Args)]
pub struct RerunArgs {
    /// The job's name.
    #[arg(add = ArgValueCompleter::new(complete_job))]
    pub job: String,
    /// The slot (systemd timestamp syntax, RFC 3339 or relative, e.g. "-1d"); it must be
    /// an elapse of the schedule. Default: the latest elapse.
    #[arg(allow_hyphen_values = true)]
    pub slot: Option<String>,
    /// Under systemd, wait for the re-run to end and exit with its outcome: 0 when it
    /// succeeded, else the status it was recorded with (the command's own, 128+N for
    /// signal N).
    #[arg(long)]
    pub wait: bool,
    #[command(flatten)]
    pub config: ConfigArgs,
}

/// Arguments of `jobguard generate`.
#[derive(Debug, Clone, Args)]
pub struct GenerateArgs {
    /// Directory to write the units into (created if missing).
    #[arg(long, value_name = "DIR")]
    pub output: PathBuf,
    #[command(flatten)]
    pub config: ConfigArgs,
}

/// Arguments of `jobguard calendar`: those of `systemd-analyze calendar`, plus `--previous`.
#[derive(Debug, Clone, Args)]
pub struct CalendarArgs {
    /// One or more OnCalendar= expressions.
    #[arg(required = true, value_name = "EXPR")]
    pub exprs: Vec<String>,
    /// How many elapses to show.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub iterations: u32,
    /// Compute from this time instead of now (systemd timestamp syntax; "-2h" is two
    /// hours ago).
    #[arg(long, value_name = "TIME", allow_hyphen_values = true)]
    pub base_time: Option<String>,
    /// Show the previous elapses at or before the base time instead of the next ones.
    #[arg(long)]
    pub previous: bool,
}

/// Arguments of `jobguard history`.
#[derive(Debug, Clone, Args)]
pub struct HistoryArgs {
    /// The job's name.
    #[arg(add = ArgValueCompleter::new(complete_job))]
    pub job: String,
    /// Print one JSON array.
    #[arg(long)]
    pub json: bool,
    /// Show at most N records (0: none, only check that the ledger can be read).
    #[arg(long, default_value_t = 50, value_name = "N")]
    pub limit: usize,
    #[command(flatten)]
    pub config: ConfigArgs,
}

/// Arguments of `jobguard status`.
#[derive(Debug, Clone, Args)]
pub struct StatusArgs {
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
    /// The table with every detail: full times, the last run's host, systemd's state of
    /// the service and the timer, and a running run's holder (the default table fits 100
    /// columns).
    #[arg(long, short = 'w', conflicts_with = "json")]
    pub wide: bool,
    /// Every host that shares a store of the job list, from their heartbeats: the jobs
    /// each arms, hosts whose heartbeat stopped, and jobs that differ between hosts.
    #[arg(long)]
    pub fleet: bool,
    /// With --fleet: delete the heartbeats of this host (its name), taken out of service.
    #[arg(long, value_name = "HOST", requires = "fleet")]
    pub forget: Option<String>,
    #[command(flatten)]
    pub config: ConfigArgs,
}

/// Arguments of `jobguard metrics`.
#[derive(Debug, Clone, Args)]
pub struct MetricsArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
}

/// Arguments of `jobguard recover`.
#[derive(Debug, Clone, Args)]
pub struct RecoverArgs {
    /// Only this job (default: all).
    #[arg(add = ArgValueCompleter::new(complete_job))]
    pub job: Option<String>,
    #[command(flatten)]
    pub config: ConfigArgs,
}

/// Arguments of `jobguard audit`.
#[derive(Debug, Clone, Args)]
pub struct AuditArgs {
    /// Only this job (it may be one removed from the job list; its records are looked
    /// for in every store of the job list). Default: every job of every store.
    #[arg(add = ArgValueCompleter::new(complete_job))]
    pub job: Option<String>,
    /// Only slots at or after this time (systemd timestamp syntax or RFC 3339, e.g.
    /// "-7d" or "2026-11-01"); default: each job's first record. Only the records of
    /// those slots are read, with the few older ones the check needs.
    #[arg(long, value_name = "TIME", allow_hyphen_values = true)]
    pub since: Option<String>,
    /// Only slots at or before this time; default: now.
    #[arg(long, value_name = "TIME", allow_hyphen_values = true)]
    pub until: Option<String>,
    /// Print one JSON object: {"since", "until", "jobs": [{"job", "findings": [{"kind",
    /// "slot", "slot_usec", "runs", "detail"}]}], "findings"}.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub config: ConfigArgs,
}

/// Arguments of `jobguard resolve`.
#[derive(Debug, Clone, Args)]
#[command(group(clap::ArgGroup::new("action").required(true).args(["rerun", "done"])))]
pub struct ResolveArgs {
    /// The job's name.
    #[arg(add = ArgValueCompleter::new(complete_job))]
    pub job: String,
    /// The slot (systemd timestamp syntax or RFC 3339, as history prints it).
    pub slot: String,
    /// Queue the slot to run again.
    #[arg(long)]
    pub rerun: bool,
    /// Declare the slot done: later triggers skip it.
    #[arg(long)]
    pub done: bool,
    #[command(flatten)]
    pub config: ConfigArgs,
}

/// Arguments of `jobguard prune`.
#[derive(Debug, Clone, Args)]
pub struct PruneArgs {
    /// Only this job (default: every job of the job list).
    #[arg(add = ArgValueCompleter::new(complete_job))]
    pub job: Option<String>,
    /// Count what would be deleted; delete nothing.
    #[arg(long)]
    pub dry_run: bool,
    #[command(flatten)]
    pub config: ConfigArgs,
}

/// Arguments of `jobguard pause`.
#[derive(Debug, Clone, Args)]
pub struct PauseArgs {
    /// The job's name.
    #[arg(add = ArgValueCompleter::new(complete_job))]
    pub job: String,
    /// The end of the pause (systemd timestamp syntax, RFC 3339, or relative: "+4h");
    /// default: until `jobguard resume`.
    #[arg(long, value_name = "TIME", allow_hyphen_values = true)]
    pub until: Option<String>,
    /// Why, for the people who see the pause in status and the journal.
    #[arg(long, value_name = "TEXT")]
    pub reason: Option<String>,
    #[command(flatten)]
    pub config: ConfigArgs,
}

/// Arguments of `jobguard resume`.
#[derive(Debug, Clone, Args)]
pub struct ResumeArgs {
    /// The job's name.
    #[arg(add = ArgValueCompleter::new(complete_job))]
    pub job: String,
    #[command(flatten)]
    pub config: ConfigArgs,
}

/// Arguments of `jobguard mark` and `jobguard marked`.
#[derive(Debug, Clone, Args)]
pub struct MarkArgs {
    /// What kind of key, e.g. shipping: 1 to 64 letters, digits, '-', '_' or '.'.
    pub namespace: String,
    /// The key, e.g. an order id: 1 to 512 bytes, no control characters (one starting
    /// with '-' is a key too).
    #[arg(allow_hyphen_values = true)]
    pub key: String,
    /// The job whose store holds the mark (default: the run's, JOBGUARD_JOB).
    #[arg(add = ArgValueCompleter::new(complete_job), long, value_name = "JOB")]
    pub job: Option<String>,
    /// One namespace for every job of the store, not the job's own: a key marked by one
    /// job is marked for all of them.
    #[arg(long)]
    pub shared: bool,
    #[command(flatten)]
    pub config: ConfigArgs,
}

/// Arguments of `jobguard unlock`.
#[derive(Debug, Clone, Args)]
pub struct UnlockArgs {
    /// The job's name.
    #[arg(add = ArgValueCompleter::new(complete_job))]
    pub job: String,
    /// End the lease even when its holder is a process alive on this host (it then stops
    /// its command at its next renewal).
    #[arg(long)]
    pub force: bool,
    #[command(flatten)]
    pub config: ConfigArgs,
}

/// Loads the job named `name` ([`crate::joblist::config::load_one`]: the other jobs' tables are not
/// read).
///
/// # Errors
/// [`crate::exit::CONFIG`], saying why: the job's own configuration errors, or that no
/// such job exists, with every error of the whole list.
pub fn find_job(config: &ConfigArgs, name: &str) -> Result<crate::joblist::job::Job, Error> {
    let source = crate::joblist::config::ConfigSource::resolve(config.config.clone());
    let mut set = crate::joblist::config::load_one(&source, name);
    if let Some(job) = set.jobs.remove(name) {
        return Ok(job);
    }
    let is_own = |e: &&crate::joblist::config::ConfigError| e.job.as_deref() == Some(name);
    if !set.errors.iter().any(|e| is_own(&e)) {
        // Not there: the whole list's errors may say why (a misspelt or invalid name).
        set = crate::joblist::config::load(&source);
    }
    let own: Vec<String> = set
        .errors
        .iter()
        .filter(is_own)
        .map(|e| e.to_string())
        .collect();
    if !own.is_empty() {
        return Err(Error::lines(crate::exit::CONFIG, own));
    }
    let files: Vec<String> = set.files.iter().map(|f| f.display().to_string()).collect();
    let mut lines = vec![format!(
        "no job named {name:?} in {}",
        if files.is_empty() {
            "the job list (no file found)".to_string()
        } else {
            files.join(", ")
        }
    )];
    lines.extend(set.errors.iter().map(|e| e.to_string()));
    Err(Error::lines(crate::exit::CONFIG, lines))
}

/// Opens and initialises the job's store (from `store`, `store_file` or
/// `store_credential`).
///
/// # Errors
/// The address's ([`job_store_address`]) or the store's.
pub fn open_job_store(
    job: &crate::joblist::job::Job,
) -> Result<Box<dyn crate::store::Store>, Error> {
    open_store(&job_store_address(job)?)
}

/// The job named `name` ([`find_job`]) and its open store ([`open_job_store`]).
///
/// # Errors
/// The first that failed.
pub fn find_job_and_store(
    config: &ConfigArgs,
    name: &str,
) -> Result<(crate::joblist::job::Job, Box<dyn crate::store::Store>), Error> {
    let job = find_job(config, name)?;
    let store = open_job_store(&job)?;
    Ok((job, store))
}

/// The job's store address (reading `store_file` or `store_credential` if set).
///
/// # Errors
/// [`crate::exit::CONFIG`] when the file or credential cannot be read.
pub fn job_store_address(job: &crate::joblist::job::Job) -> Result<String, Error> {
    Ok(job.store_address()?)
}

/// Every store the job list names: each job's, each `[defaults]` table's
/// ([`crate::joblist::config::JobSet::default_stores`]), and the built-in default
/// ([`crate::paths::default_store_url`]) when its file exists. This is where the ledger of
/// a job removed from the list is looked for. An address that cannot be read is left
/// out, and its error is returned beside the others for the caller to report (or not:
/// `recover` has reported its jobs' already).
pub fn list_store_addresses(
    set: &crate::joblist::config::JobSet,
) -> (std::collections::BTreeSet<String>, Vec<Error>) {
    let mut out = std::collections::BTreeSet::new();
    let mut errors = Vec::new();
    for job in set.jobs.values() {
        match job_store_address(job) {
            Ok(a) => {
                out.insert(a);
            }
            Err(e) => errors.push(e),
        }
    }
    for d in &set.default_stores {
        match d.address() {
            Ok(a) => {
                out.insert(a);
            }
            Err(e) => errors.push(e.into()),
        }
    }
    if crate::paths::state_dir().join("jobguard.db").exists() {
        out.insert(crate::paths::default_store_url());
    }
    (out, errors)
}

/// [`list_store_addresses`], each error reported into `finished` ([`Finished::report`]).
pub fn report_store_addresses(
    set: &crate::joblist::config::JobSet,
    finished: &mut Finished,
) -> std::collections::BTreeSet<String> {
    let (addresses, errors) = list_store_addresses(set);
    for e in &errors {
        finished.report(e);
    }
    addresses
}

/// Opens and initialises the store at `url`.
///
/// # Errors
/// The store's ([`crate::store::StoreError`]'s status).
pub fn open_store(url: &str) -> Result<Box<dyn crate::store::Store>, Error> {
    let mut store = crate::store::open(url)?;
    store.init()?;
    Ok(store)
}

/// The environment variable that asks `jobguard` for shell completions (clap_complete's
/// `CompleteEnv::var`); the registration scripts of `packaging/gen-docs.rs` set it.
pub const COMPLETE_VAR: &str = "JOBGUARD_COMPLETE";

/// Shell completion of a job name (`jobguard history <TAB>`): the jobs of the job list
/// (`JOBGUARD_CONFIG`, else `/etc/jobguard/jobs.toml` and `jobs.d`) whose names start with
/// the word typed so far; none when the list cannot be read. A `--config` on the line
/// being completed is not seen (a completer gets only its word).
fn complete_job(current: &std::ffi::OsStr) -> Vec<CompletionCandidate> {
    let Some(typed) = current.to_str() else {
        return Vec::new();
    };
    crate::joblist::config::load(&crate::joblist::config::ConfigSource::resolve(None))
        .jobs
        .keys()
        .filter(|name| name.starts_with(typed))
        .map(CompletionCandidate::new)
        .collect()
}

/// Entry point of the `jobguard` binary.
pub fn main() -> ExitCode {
    // `JOBGUARD_COMPLETE=bash jobguard` prints the shell's registration, and the shell's
    // calls of it (`JOBGUARD_COMPLETE=bash jobguard -- WORDS`) the completions
    // (clap_complete's protocol); without the variable this returns at once. A name of
    // jobguard's own, not clap's `COMPLETE`: a `COMPLETE` that reached a job's service or
    // a `jobguard run` would turn the run into printing a script.
    clap_complete::CompleteEnv::with_factory(Cli::command)
        .var(COMPLETE_VAR)
        .complete();
    let cli = Cli::parse();
    let outcome = match cli.command {
        Command::Run(a) => run::run(&a),
        Command::Check(a) => check::run(&a),
        Command::Generate(a) => generate::run(&a),
        Command::Calendar(a) => calendar::run(&a),
        Command::History(a) => history::run(&a),
        Command::ImportCrontab(a) => import_crontab::run(&a),
        Command::Status(a) => status::run(&a),
        Command::Recover(a) => recover::run(&a),
        Command::Resolve(a) => resolve::run(&a),
        Command::Rerun(a) => rerun::run(&a),
        Command::Drill(a) => drill::run(&a),
        Command::Audit(a) => audit::run(&a),
        Command::Metrics(a) => metrics::run(&a),
        Command::Mark(a) => mark::mark(&a),
        Command::Marked(a) => mark::marked(&a),
        Command::Unlock(a) => unlock::run(&a),
        Command::Prune(a) => prune::run(&a),
        Command::Pause(a) => pause::pause(&a),
        Command::Resume(a) => pause::resume(&a),
        Command::Store(StoreCommand::Init(a)) => store::init(&a),
    };
    ExitCode::from(crate::exit::code(outcome))
}

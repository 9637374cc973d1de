//! `jobguard rerun JOB [SLOT] [--wait]`: run a slot again, forced, as the job's own unit
//! under systemd ([`crate::shim::rerun`]; root only: exit 77 for another user), else in
//! this process. With `--wait`, a re-run under systemd is waited for, and its outcome is
//! the exit status, as it is in this process.

use crate::cli::{RerunArgs, find_job};
use crate::exit::{self, Error, Finished};
use crate::guard::ledger::format_usec;
use crate::shim;

/// Runs `jobguard rerun`: ends with the re-run's status (in this process, or with
/// `--wait`), else 0 once the unit is started.
///
/// # Errors
/// 2 for a slot that cannot be read or is in the future; 77 for a user other than root
/// under systemd; 71 when the request cannot be written or the unit started; the job
/// list's or the store's.
pub fn run(args: &RerunArgs) -> exit::Result {
    let job = find_job(&args.config, &args.job)?;
    let now = crate::guard::clock::Clock::now_usec(&crate::guard::clock::SystemClock);
    let slot = shim::slot::for_request(&job, args.slot.as_deref(), now)
        .map_err(|e| Error::new(exit::USAGE, e).context(&job.name))?
        .slot;
    if slot.usec > now {
        return Err(Error::new(
            exit::USAGE,
            format!(
                "{}: slot {} is in the future; its own firing will run it",
                job.name,
                slot.rfc3339()
            ),
        ));
    }
    let by = who();
    // The unit runs the default job list: another list (`--config`, `JOBGUARD_CONFIG`)
    // runs here.
    let default_list = crate::joblist::config::ConfigSource::resolve(args.config.config.clone())
        == crate::joblist::config::ConfigSource::Default;
    if crate::ops::recover::under_systemd() && default_list {
        // The system unit takes root's requests (/run/jobguard/rerun) only, and only root
        // (or whom polkit allows) starts it: another user's request would wait unseen.
        if !nix::unistd::geteuid().is_root() {
            return Err(Error::new(
                exit::NO_PERMISSION,
                format!(
                    "{}: a re-run under systemd is a request to the system unit jobguard@{}.service, which needs root: sudo jobguard rerun {} {}",
                    job.name,
                    job.name,
                    job.name,
                    slot.rfc3339()
                ),
            ));
        }
        // The slot's records before the request: the re-run's is the one that is not.
        let before = if args.wait {
            Some(
                slot_runs(&job, slot.usec)?
                    .into_iter()
                    .map(|r| r.run_id)
                    .collect(),
            )
        } else {
            None
        };
        shim::rerun::request(&job.name, slot.usec, &by, true)
            .map_err(|e| Error::new(exit::OS_ERROR, e).context(&job.name))?;
        let unit = format!("jobguard@{}.service", job.name);
        let active = std::process::Command::new("systemctl")
            .args(["is-active", "--quiet", &unit])
            .status()
            .is_ok_and(|s| s.success());
        crate::ops::recover::start_unit(&job.name).map_err(|e| {
            Error::new(
                exit::OS_ERROR,
                format!(
                    "{}: {e}; the re-run of slot {} waits for the unit's next start",
                    job.name,
                    format_usec(slot.usec)
                ),
            )
        })?;
        if active {
            println!(
                "{} slot {}: {unit} is running; it re-runs the slot when its run ends (journalctl -u {unit})",
                job.name,
                slot.rfc3339()
            );
        } else {
            println!(
                "{} slot {}: re-run started as {unit} (journalctl -u {unit})",
                job.name,
                slot.rfc3339()
            );
        }
        return match before {
            Some(before) => wait_for(&job, slot.usec, &before, &unit),
            None => Ok(Finished::OK),
        };
    }
    let code = shim::run(
        &job,
        &shim::Request {
            slot: Some(slot.rfc3339()),
            force: true,
            queued_only: false,
            forced_by: Some(by),
        },
    );
    crate::systemd::journal::notify_barrier(std::time::Duration::from_secs(1));
    Ok(Finished::with(code))
}

/// The records of `job`'s slot `slot_usec`, from its store.
///
/// # Errors
/// The store address's or the store's.
fn slot_runs(
    job: &crate::joblist::job::Job,
    slot_usec: i64,
) -> Result<Vec<crate::guard::ledger::Run>, Error> {
    let address = crate::cli::job_store_address(job)?;
    let mut store = crate::cli::open_store(&address)?;
    store
        .runs(&crate::store::RunQuery {
            job: Some(job.name.clone()),
            slot: Some(slot_usec),
            ..crate::store::RunQuery::default()
        })
        .map_err(|e| Error::from(e).context(&job.name))
}

/// `--wait`: waits, reading the slot's records every half second, until the re-run's
/// record (a `rerun` record not among `before`) has ended, and returns its outcome: 0
/// when it succeeded, else the status it was recorded with (1 when it has none: cut
/// off). When the unit has taken the request and ended without such a record (it
/// skipped: another host holds the job's lease, say), the unit's exit status, or 1. A
/// request the unit leaves waiting while it is idle (its start failed or came too early)
/// is started once more after [`UNTAKEN`], and given up after twice that
/// ([`exit::OS_ERROR`]). A store that fails [`STORE_TRIES`] reads in a row ends the wait
/// with its error.
fn wait_for(
    job: &crate::joblist::job::Job,
    slot_usec: i64,
    before: &std::collections::BTreeSet<String>,
    unit: &str,
) -> exit::Result {
    use crate::guard::ledger::Outcome;
    let mut idle_since: Option<std::time::Instant> = None;
    let mut started_again = false;
    let mut failures = 0;
    loop {
        // Read whether the unit is done before the records: a record written just before
        // it ended is then seen.
        let waiting = shim::rerun::waiting(&job.name, slot_usec);
        let busy = unit_busy(unit);
        let runs = match slot_runs(job, slot_usec) {
            Ok(r) => {
                failures = 0;
                r
            }
            Err(e) => {
                failures += 1;
                if failures == STORE_TRIES {
                    return Err(e);
                }
                // Said as it happens: the wait goes on.
                e.print();
                std::thread::sleep(std::time::Duration::from_millis(500));
                continue;
            }
        };
        let ours = runs
            .iter()
            .find(|r| !before.contains(&r.run_id) && r.trigger == "rerun");
        match ours {
            Some(r) if r.outcome != Outcome::Running => {
                println!(
                    "{} slot {}: re-run {} (run {}, exit status {})",
                    job.name,
                    format_usec(slot_usec),
                    r.outcome,
                    r.run_id,
                    r.exit_status.map_or("none".into(), |s| s.to_string())
                );
                return Ok(Finished::with(match (r.outcome, r.exit_status) {
                    (Outcome::Succeeded, _) => exit::OK,
                    (_, Some(s)) => u8::try_from(s)
                        .ok()
                        .filter(|s| *s != 0)
                        .unwrap_or(exit::FAILURE),
                    (_, None) => exit::FAILURE,
                }));
            }
            None if !waiting && !busy => {
                let status = std::process::Command::new("systemctl")
                    .args(["show", "-p", "ExecMainStatus", "--value", unit])
                    .output()
                    .ok()
                    .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse::<u8>().ok())
                    .filter(|s| *s != 0)
                    .unwrap_or(exit::FAILURE);
                return Err(Error::new(
                    status,
                    format!(
                        "{}: {unit} ended without re-running slot {} (journalctl -u {unit})",
                        job.name,
                        format_usec(slot_usec)
                    ),
                ));
            }
            None if waiting && !busy => {
                let since = *idle_since.get_or_insert_with(std::time::Instant::now);
                if since.elapsed() >= 2 * UNTAKEN {
                    return Err(Error::new(
                        exit::OS_ERROR,
                        format!(
                            "{}: {unit} did not take the re-run of slot {} (journalctl -u {unit}); the request waits for its next start",
                            job.name,
                            format_usec(slot_usec)
                        ),
                    ));
                }
                if since.elapsed() >= UNTAKEN && !started_again {
                    started_again = true;
                    if let Err(e) = crate::ops::recover::start_unit(&job.name) {
                        // Not the end: the wait goes on, and gives up after 2 × UNTAKEN.
                        Error::new(exit::OS_ERROR, e).context(&job.name).print();
                    }
                }
            }
            _ => idle_since = None,
        }
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
}

/// How long `--wait` lets a re-run request wait while the unit is idle before it starts
/// the unit once more.
const UNTAKEN: std::time::Duration = std::time::Duration::from_secs(15);

/// How many failed store reads in a row end `--wait`.
const STORE_TRIES: u32 = 10;

/// Whether `unit` is starting, running or stopping (`ActiveState`, systemd.unit(5)).
fn unit_busy(unit: &str) -> bool {
    std::process::Command::new("systemctl")
        .args(["show", "-p", "ActiveState", "--value", unit])
        .output()
        .is_ok_and(|o| {
            matches!(
                String::from_utf8_lossy(&o.stdout).trim(),
                "active" | "activating" | "deactivating" | "reloading"
            )
        })
}

/// Who asks: the user, and the one behind sudo.
pub fn who() -> String {
    let uid = nix::unistd::getuid();
    let name = nix::unistd::User::from_uid(uid)
        .ok()
        .flatten()
        .map_or_else(|| uid.to_string(), |u| u.name);
    match std::env::var("SUDO_USER").ok().filter(|s| !s.is_empty()) {
        Some(sudo) if sudo != name => format!("{name} (sudo from {sudo})"),
        _ => name,
    }
}

//! Finding runs that were cut off, and getting their slots run again.
//!
//! A `running` record whose holder is gone is *interrupted*: a record from an earlier
//! boot of this machine, from a process of this boot that no longer exists (pid and
//! start time), or from another machine whose lease has expired by the store's clock.
//! systemd's `Persistent=` does not cover this: the timer's stamp is written when it
//! fires, so a run cut at 02:10 by a reboot is never fired again.
//!
//! Each such record is marked `interrupted` with the job's `on_interrupted` policy:
//! `rerun` queues the slot, `hold` leaves it for `jobguard resolve`. Queued slots are then
//! run by starting the job's own unit (`systemctl start --no-block jobguard@JOB.service`,
//! so the re-run has the same user, limits and journal as any run), or, without systemd,
//! in this process through the same shim, which then runs only the queued slots: the
//! current slot belongs to its timer (or to a person), not to recover.

use std::path::Path;

use crate::identity;
use crate::job::{Job, OnInterrupted};
use crate::journal::{self, Event, Kind};
use crate::ledger::{Outcome, Resolution, Run, format_usec};
use crate::store::{RunQuery, Store, StoreError};

/// What [`recover_job`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Recovered {
    /// Records newly marked interrupted.
    pub interrupted: Vec<Run>,
    /// Slots (µs since the epoch) queued for a re-run after this pass.
    pub queued: Vec<i64>,
}

/// Why a `running` record's holder is gone, or `None` if it may still be alive.
///
/// # Errors
/// Store errors while reading the lease or the store's clock.
pub fn holder_gone(store: &mut dyn Store, run: &Run) -> Result<Option<&'static str>, StoreError> {
    if run.machine_id == identity::machine_id() && !run.machine_id.is_empty() {
        if run.boot_id != identity::boot_id() {
            return Ok(Some("boot"));
        }
        if !identity::process_alive(run.pid, run.pid_start) {
            // The shim is gone; its command's children may not be. The slot runs again
            // only once none of them is left.
            if !identity::end_run_survivors(&run.run_id) {
                return Ok(None);
            }
            return Ok(Some("process-gone"));
        }
        return Ok(None);
    }
    // Another machine: only the lease can tell, by the store's clock.
    let now = store.now()?;
    match store.lease(&run.job)? {
        Some(l) if l.token == run.fencing_token && l.expire_at > now => Ok(None),
        _ => Ok(Some("lease-expired")),
    }
}

/// What happens to the slot of `run`, an attempt that was cut off (a crash, a reboot, a
/// shutdown, a lost lease): the job's `on_interrupted`, except that a slot is re-run only
/// once: when an earlier attempt at the same slot was already cut off, it is held for a
/// person (a job that takes the host down with it is not re-run after every boot).
///
/// # Errors
/// Store errors while reading the slot's attempts.
pub fn cut_resolution(
    store: &mut dyn Store,
    job: &Job,
    run: &Run,
) -> Result<Resolution, StoreError> {
    if job.on_interrupted == OnInterrupted::Hold {
        return Ok(Resolution::Held);
    }
    let earlier = store.runs(&RunQuery {
        job: Some(job.name.clone()),
        slot: Some(run.slot.usec),
        outcomes: vec![Outcome::Interrupted, Outcome::LeaseLost],
        ..RunQuery::default()
    })?;
    if earlier.iter().any(|r| r.run_id != run.run_id) {
        Ok(Resolution::Held)
    } else {
        Ok(Resolution::Queued)
    }
}

/// Records the outcomes this host kept for the job ([`crate::shim::pending::replay`]),
/// then marks the job's cut-off runs interrupted (logging each) and returns what is queued.
///
/// # Errors
/// Store errors.
pub fn recover_job(store: &mut dyn Store, job: &Job) -> Result<Recovered, StoreError> {
    let mut out = Recovered::default();
    // An outcome this host kept because the store could not take it ends its record
    // before anything here calls that record cut off.
    crate::shim::pending::replay(store, job)?;
    let running = store.runs(&RunQuery {
        job: Some(job.name.clone()),
        outcomes: vec![Outcome::Running],
        ..RunQuery::default()
    })?;
    for run in running {
        let Some(reason) = holder_gone(store, &run)? else {
            continue;
        };
        let resolution = cut_resolution(store, job, &run)?;
        if !store.interrupt(&run, reason, resolution)? {
            continue;
        }
        let next = match resolution {
            Resolution::Queued => "a re-run is queued".to_string(),
            _ => format!(
                "held for a person: decide with `jobguard resolve {} {} --rerun|--done`",
                job.name,
                run.slot.rfc3339()
            ),
        };
        let mut ev = Event::new(
            Kind::Interrupted,
            &job.name,
            format!(
                "interrupted: slot {} was cut off: run {} (attempt {}) started {} on host {} ({}); {next}",
                run.slot.rfc3339(),
                run.run_id,
                run.attempt,
                format_usec(run.started_at),
                run.host,
                reason
            ),
        );
        ev.slot = Some(run.slot.rfc3339());
        ev.run_id = Some(run.run_id.clone());
        ev.reason = Some(reason.to_string());
        ev.outcome = Some(Outcome::Interrupted);
        ev.attempt = Some(run.attempt);
        ev.fencing_token = Some(run.fencing_token);
        journal::emit(&ev);
        out.interrupted.push(run);
    }
    let queued = store.runs(&RunQuery {
        job: Some(job.name.clone()),
        resolutions: vec![Resolution::Queued],
        ..RunQuery::default()
    })?;
    out.queued = queued.iter().map(|r| r.slot.usec).collect();
    out.queued.sort_unstable();
    out.queued.dedup();
    Ok(out)
}

/// Whether the job's lease is unexpired by the store's clock (someone runs it now). A
/// store error counts as alive: nothing is started on a store that does not answer.
pub fn lease_alive(store: &mut dyn Store, job: &str) -> bool {
    match (store.now(), store.lease(job)) {
        (Ok(now), Ok(Some(l))) => l.expire_at > now,
        (Ok(_), Ok(None)) => false,
        _ => true,
    }
}

/// Whether systemd is the service manager here (sd_booted(3)).
pub fn under_systemd() -> bool {
    Path::new("/run/systemd/system").is_dir()
}

/// Starts the timers of jobs that systemd has loaded but never started.
///
/// `systemctl daemon-reload` loads the timers the generator wrote for new jobs but does not
/// start them (only a start of `timers.target` or a boot does). A timer that is inactive
/// and was never active since it was loaded (`InactiveExitTimestampMonotonic=0`) is
/// started here, so a new job fires without a reboot; a timer that an operator stopped
/// was active once and is left alone. Returns the timers started.
///
/// # Errors
/// A message with systemctl's output when it fails.
pub fn start_new_timers<'a>(
    jobs: impl IntoIterator<Item = &'a str>,
) -> Result<Vec<String>, String> {
    let units: Vec<String> = jobs
        .into_iter()
        .map(|j| format!("jobguard@{j}.timer"))
        .collect();
    if units.is_empty() {
        return Ok(Vec::new());
    }
    let out = std::process::Command::new("systemctl")
        .args([
            "show",
            "-p",
            "Id,LoadState,ActiveState,InactiveExitTimestampMonotonic",
        ])
        .args(&units)
        .output()
        .map_err(|e| format!("cannot run systemctl: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "systemctl show: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let never_started: Vec<String> = text
        .split("\n\n")
        .filter_map(|block| {
            let prop = |k: &str| {
                block
                    .lines()
                    .find_map(|l| l.strip_prefix(k)?.strip_prefix('='))
            };
            let fresh = prop("LoadState") == Some("loaded")
                && prop("ActiveState") == Some("inactive")
                && prop("InactiveExitTimestampMonotonic") == Some("0");
            fresh.then(|| prop("Id").map(str::to_string)).flatten()
        })
        .collect();
    if never_started.is_empty() {
        return Ok(never_started);
    }
    let out = std::process::Command::new("systemctl")
        .args(["start", "--no-block"])
        .args(&never_started)
        .output()
        .map_err(|e| format!("cannot run systemctl: {e}"))?;
    if out.status.success() {
        Ok(never_started)
    } else {
        Err(format!(
            "systemctl start: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Starts the job's unit without waiting, so it runs its queued slots.
///
/// # Errors
/// A message with systemctl's output when it fails.
pub fn start_unit(job: &str) -> Result<(), String> {
    let unit = format!("jobguard@{job}.service");
    let out = std::process::Command::new("systemctl")
        .args(["start", "--no-block", &unit])
        .output()
        .map_err(|e| format!("cannot run systemctl: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "systemctl start {unit}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

//! Finding runs that were cut off, and getting their slots run again.
//!
//! A `running` record whose holder is gone is *interrupted*. No record is while its lease
//! is unexpired by the store's clock. After that: a record this installation wrote
//! ([`identity::Installation::wrote`]) from an earlier boot, or from a process of this boot
//! that no longer exists (pid and start time); or a record of another machine (or of
//! another machine with this machine id) whose lease has expired and
//! has stayed so for [`SIGHTING_GRACE_USEC`] since this host first saw it: long enough for
//! that machine, back within 90 s, to record at its own next pass an outcome its shim kept
//! because the store could not be reached as the run ended ([`crate::shim::pending`]).
//! systemd's `Persistent=` does not cover this: the timer's stamp is written when it
//! fires, so a run cut at 02:10 by a reboot is never fired again.
//!
//! Each such record is marked `interrupted` with the job's `on_interrupted` policy:
//! `rerun` queues the slot, `hold` leaves it for `jobguard resolve`. Queued slots are then
//! run by starting the job's own unit (`systemctl start --no-block jobguard@JOB.service`,
//! so the re-run has the same user, limits and journal as any run), or, without systemd,
//! in this process through the same shim, which then runs only the queued slots: the
//! current slot belongs to its timer (or to a person), not to recover.
//!
//! The same pass reports slots that were *missed* ([`crate::ops::audit`]) after each job's
//! newest record, once per slot and boot ([`report_missed`]); starts a job's `on_failure`
//! unit for a slot it holds when no failing service announced the cut
//! ([`start_on_failure`]); and arms timers: those systemd loaded but never started, and
//! those left active without a next elapse ([`arm_timers`]).
//!
//! A paused job (`enabled = false`) has its cut-off runs marked like any other, but no
//! slot of it is reported missed, its queued slots wait until it is enabled again, and its
//! timer is neither started nor re-armed: a timer of a paused job, or of a job no longer
//! in the job list, that is still active is stopped ([`stop_timers`]; its service, if
//! running, is left alone). The `running` records of jobs no longer in the job list
//! whose holder on this machine is gone are marked interrupted and held: no timer is
//! left to run them ([`recover_removed`]). Reading the job list and the order of these
//! steps are `src/cli/recover.rs`'s.

use std::collections::BTreeSet;
use std::path::Path;

use crate::guard::identity;
use crate::guard::ledger::{Outcome, Resolution, Run, format_usec};
use crate::joblist::job::{Job, OnInterrupted};
use crate::ops::audit::{self, FindingKind};
use crate::store::{RunQuery, Store, StoreError};
use crate::systemd::journal::{self, Event, Kind};

/// What [`recover_job`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Recovered {
    /// Records newly marked interrupted.
    pub interrupted: Vec<Run>,
    /// Of those, the ones whose slot is now held for a person and whose cut no failing
    /// service announced (a reboot, another host's expired lease, a run from a shell):
    /// the job's `on_failure` unit is started for them ([`start_on_failure`]).
    pub held: Vec<Run>,
    /// Slots (µs since the epoch) queued for a re-run after this pass.
    pub queued: Vec<i64>,
}

/// The claim's grace ([`crate::store::rules::FOREIGN_GRACE_USEC`], 90 s): how long a
/// holder cut off from the store may take to come back and still record what it kept.
pub use crate::store::rules::FOREIGN_GRACE_USEC;

/// The interval of the recovery passes, µs: `jobguard-recover.timer` runs one every
/// minute, on the minute, on every host.
pub const PASS_INTERVAL_USEC: i64 = 60_000_000;

/// How long, in µs by the store's clock, another machine's `running` record must have
/// been seen without its lease (expired, or granted to a later attempt) before this host
/// calls its holder gone, counted from this host's first sighting: 150 s, the claim's
/// grace ([`FOREIGN_GRACE_USEC`], 90 s) for the holder to come back, plus one
/// [`PASS_INTERVAL_USEC`] for its next pass to record what its shim kept (a holder does
/// not record the moment it is back, but at its next pass). Passes run on the minute on
/// every host, so a holder back within 90 s of the first sighting has a pass of its own
/// at least one minute before the pass at which another host may call it gone. With
/// 90 s, a holder back 70 s after the sighting recorded only at the very pass where the
/// others took it for gone, and when theirs won the slot ran twice. A holder cut off for
/// longer is taken for gone: the job's `on_interrupted` decides, as after a power cut.
pub const SIGHTING_GRACE_USEC: i64 = FOREIGN_GRACE_USEC + PASS_INTERVAL_USEC;

/// Why a `running` record's holder is gone, or `None` if it may still be alive.
///
/// A holder whose lease is unexpired by the store's clock is never gone, whatever this
/// host sees. A record this installation did not write ([`identity::Installation::wrote`]:
/// another machine, or another with this machine id) is gone once its lease has been
/// seen lapsed for [`SIGHTING_GRACE_USEC`]: the first sighting (store time, µs) is kept in
/// `<runtime dir>/suspect/<run id>`; without that directory the lease's expiry counts as
/// the first sighting. One this installation wrote is gone, once its lease lapsed, by
/// what this host sees: another boot, or a shim process that no longer runs.
///
/// # Errors
/// Store errors while reading the lease or the store's clock.
pub fn holder_gone(store: &mut dyn Store, run: &Run) -> Result<Option<&'static str>, StoreError> {
    if !is_local(run) {
        let Some(lapsed) = lease_lapsed(store, run)? else {
            forget_sighting(&run.run_id);
            return Ok(None);
        };
        let first = first_sighting(&run.run_id, lapsed.now).unwrap_or(lapsed.since);
        if lapsed.now.saturating_sub(first) < SIGHTING_GRACE_USEC {
            return Ok(None);
        }
        forget_sighting(&run.run_id);
        return Ok(Some("lease-expired"));
    }
    let gone = holder_gone_observed(store, run)?;
    if gone == Some("process-gone") && !identity::end_run_survivors(&run.run_id) {
        // The shim is gone; its command's children may not be. The slot runs again only
        // once none of them is left.
        return Ok(None);
    }
    Ok(gone)
}

/// Why a `running` record's holder (the shim, or another machine's lease) is gone, or
/// `None` if it may still be alive; like [`holder_gone`] but only looks: processes the
/// command left behind are neither ended nor counted, and the lease of a record this
/// installation did not write counts as gone [`FOREIGN_GRACE_USEC`] after it expired, or
/// at once when a later attempt holds it (for `status` and `audit`). An unexpired lease
/// is never gone.
///
/// # Errors
/// Store errors while reading the lease or the store's clock.
pub fn holder_gone_observed(
    store: &mut dyn Store,
    run: &Run,
) -> Result<Option<&'static str>, StoreError> {
    let lapsed = lease_lapsed(store, run)?;
    if is_local(run) {
        // Local evidence counts only for a lease that no longer holds: a copy of this
        // machine resumed from one snapshot has this boot id and pids too.
        if lapsed.is_none() {
            return Ok(None);
        }
        if run.boot_id != identity::boot_id() {
            return Ok(Some("boot"));
        }
        if !identity::process_alive(run.pid, run.pid_start) {
            return Ok(Some("process-gone"));
        }
        return Ok(None);
    }
    Ok(lapsed
        .filter(|l| l.now.saturating_sub(l.since) >= FOREIGN_GRACE_USEC)
        .map(|_| "lease-expired"))
}

/// The run ids of `running` records whose holder is gone (looked at, never ended).
///
/// # Errors
/// Store errors reading the lease or the store's clock.
pub fn orphans(store: &mut dyn Store, runs: &[Run]) -> Result<BTreeSet<String>, StoreError> {
    let mut out = BTreeSet::new();
    for r in runs.iter().filter(|r| r.outcome == Outcome::Running) {
        if holder_gone_observed(store, r)?.is_some() {
            out.insert(r.run_id.clone());
        }
    }
    Ok(out)
}

/// Whether `run` was written by this installation: this machine id and one of the boots
/// this installation ran under ([`identity::Installation`]). A record of another machine
/// with this machine id (an image copied without `systemd-machine-id-setup`) is not.
fn is_local(run: &Run) -> bool {
    identity::Installation::here().wrote(run)
}

/// Another machine's run whose lease no longer holds, by the store's clock (µs since the
/// epoch): `since` is the lease's expiry, or `i64::MIN` when a later grant holds it.
struct Lapsed {
    now: i64,
    since: i64,
}

/// Only the lease can tell whether another machine's holder lives, by the store's clock.
fn lease_lapsed(store: &mut dyn Store, run: &Run) -> Result<Option<Lapsed>, StoreError> {
    let now = store.now()?;
    Ok(match store.lease(&run.job)? {
        Some(l) if l.token == run.fencing_token && l.expire_at > now => None,
        Some(l) if l.token == run.fencing_token => Some(Lapsed {
            now,
            since: l.expire_at,
        }),
        _ => Some(Lapsed {
            now,
            since: i64::MIN,
        }),
    })
}

/// Where the first sighting of run `run_id`'s lapsed lease is kept; `None` for a run id
/// that is not a plain file name (run ids are 32 hex digits).
fn sighting_path(run_id: &str) -> Option<std::path::PathBuf> {
    (!run_id.is_empty() && run_id.bytes().all(|b| b.is_ascii_alphanumeric()))
        .then(|| crate::paths::runtime_dir().join("suspect").join(run_id))
}

/// The store time (µs) this host first saw the lease of run `run_id` lapsed; records
/// `now` when it had not (and then drops sightings older than a day). `None` when the
/// runtime directory cannot keep it.
fn first_sighting(run_id: &str, now: i64) -> Option<i64> {
    let path = sighting_path(run_id)?;
    if let Some(seen) = std::fs::read_to_string(&path)
        .ok()
        .and_then(|t| t.trim().parse::<i64>().ok())
    {
        return Some(seen);
    }
    crate::paths::write_mark(&path, now).ok()?;
    let day = std::time::Duration::from_secs(86_400);
    for entry in std::fs::read_dir(path.parent()?).ok()?.flatten() {
        let old = entry
            .metadata()
            .and_then(|m| m.modified())
            .is_ok_and(|t| t.elapsed().is_ok_and(|age| age > day));
        if old {
            let _ = std::fs::remove_file(entry.path());
        }
    }
    Some(now)
}

/// Drops the sighting of run `run_id`, if any.
fn forget_sighting(run_id: &str) {
    if let Some(path) = sighting_path(run_id) {
        let _ = std::fs::remove_file(path);
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
    crate::shim::pending::replay(store, &job.name)?;
    let running = store.runs(&RunQuery {
        job: Some(job.name.clone()),
        outcomes: vec![Outcome::Running],
        ..RunQuery::default()
    })?;
    for twin in identity::Installation::here().twins(&running) {
        report_twin(&job.name, twin);
    }
    for run in running {
        let Some(reason) = holder_gone(store, &run)? else {
            continue;
        };
        let Some(resolution) = interrupt_cut(store, job, &run, reason)? else {
            continue;
        };
        // A cut that systemd saw as the service failing (this boot, a unit's run) already
        // started its OnFailure=; a reboot, another host's lost lease or a run from a
        // shell did not.
        let systemd_saw_it = reason == "process-gone" && run.invocation_id.is_some();
        if resolution == Resolution::Held && !systemd_saw_it {
            out.held.push(run.clone());
        }
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

/// Marks `run`, a `running` record whose holder is gone for `reason` (see
/// [`holder_gone`]), `interrupted` with its [`cut_resolution`], which also ends its lease
/// when that is still the run's grant, and logs the `interrupted` event. Returns the
/// resolution, or `None` when the record was no longer `running` (someone else ended it).
/// This is the step [`recover_job`] takes for each record; the shim takes it too for a
/// holder on this host that it finds gone.
///
/// # Errors
/// Store errors.
pub fn interrupt_cut(
    store: &mut dyn Store,
    job: &Job,
    run: &Run,
    reason: &str,
) -> Result<Option<Resolution>, StoreError> {
    let resolution = cut_resolution(store, job, run)?;
    if !store.interrupt(run, reason, resolution)? {
        return Ok(None);
    }
    let next = match resolution {
        Resolution::Queued => "a re-run is queued".to_string(),
        _ => format!(
            "held for a person: decide with `jobguard resolve {} {} --rerun|--done`",
            job.name,
            run.slot.rfc3339()
        ),
    };
    emit_interrupted(&job.name, run, reason, &next);
    Ok(Some(resolution))
}

/// Logs the `recovered` event of a removed job's slot that was queued for a re-run and is
/// now held for a person.
fn emit_removed_held(run: &Run) {
    let mut ev = Event::new(
        Kind::Recovered,
        &run.job,
        format!(
            "held: slot {} was queued for a re-run, but the job is no longer in the job list and no timer is left to run it; `jobguard resolve {} {} --done` settles it",
            run.slot.rfc3339(),
            run.job,
            run.slot.rfc3339()
        ),
    );
    ev.slot = Some(run.slot.rfc3339());
    ev.run_id = Some(run.run_id.clone());
    ev.outcome = Some(run.outcome);
    ev.attempt = Some(run.attempt);
    journal::emit(&ev);
}

/// Logs the `interrupted` event of `run` (of job `job`), cut for `reason`; `next` says what
/// happens to its slot.
fn emit_interrupted(job: &str, run: &Run, reason: &str, next: &str) {
    let mut ev = Event::new(
        Kind::Interrupted,
        job,
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
}

/// Logs the `machine-id-shared` event for `run`, a record of another machine with this
/// machine id ([`identity::Installation::twin`]), once per run and boot: a mark in
/// `<runtime dir>/shared/<run id>` remembers it.
fn report_twin(job: &str, run: &Run) {
    if run.run_id.is_empty() || !run.run_id.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return;
    }
    let path = crate::paths::runtime_dir().join("shared").join(&run.run_id);
    if path.exists() {
        return;
    }
    let _ = crate::paths::write_mark(&path, run.started_at);
    let mut ev = Event::new(
        Kind::MachineIdShared,
        job,
        format!(
            "machine id {} is shared: host {} (boot {}) runs slot {} as run {} since {}, under a boot this installation never had; {}",
            run.machine_id,
            run.host,
            run.boot_id,
            run.slot.rfc3339(),
            run.run_id,
            format_usec(run.started_at),
            identity::SHARED_MACHINE_ID_FIX
        ),
    );
    ev.slot = Some(run.slot.rfc3339());
    ev.run_id = Some(run.run_id.clone());
    journal::emit(&ev);
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

/// What [`arm_timers`] did: timer units started for the first time, and timers re-armed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Armed {
    /// Loaded but never started since loaded: started.
    pub started: Vec<String>,
    /// Active but without a next elapse: restarted.
    pub restarted: Vec<String>,
}

/// From `systemctl show -p Id,LoadState,ActiveState,InactiveExitTimestampMonotonic,
/// NextElapseUSecRealtime` of timer units: the timers never started since they were
/// loaded, and the timers that are active but not waiting (no next elapse).
///
/// `systemctl daemon-reload` loads the timers the generator wrote for new jobs but does
/// not start them (only a start of `timers.target` or a boot does): such a timer is
/// inactive with `InactiveExitTimestampMonotonic=0`. A timer whose job was skipped by the
/// generator at one reload (a typo) and back at the next stays `active` with no next
/// elapse (systemd 252): it never fires again until restarted. A timer an operator
/// stopped (inactive, once active) or masked (`LoadState=masked`) was stopped on purpose
/// and is in neither list. Neither is a timer that waits for its service
/// ([`crate::systemd::dbus::timer_waits_for_its_service`]). `show` may hold the services'
/// blocks as well.
pub fn timers_to_arm(show: &str) -> (Vec<String>, Vec<String>) {
    let blocks: Vec<&str> = show.split("\n\n").collect();
    let prop = |block: &str, k: &str| -> Option<String> {
        block
            .lines()
            .find_map(|l| l.strip_prefix(k)?.strip_prefix('='))
            .map(str::to_string)
    };
    // The state of each service in the same output: a timer whose service is starting,
    // running or stopping has no next elapse until the service ends, and restarting the
    // timer then would cut the start of that very run.
    let waits_for_service = |timer_block: &str, timer_id: &str| {
        let service = timer_id.replace(".timer", ".service");
        let service_state = blocks
            .iter()
            .find(|b| prop(b, "Id").as_deref() == Some(service.as_str()))
            .and_then(|b| prop(b, "ActiveState"))
            .unwrap_or_default();
        crate::systemd::dbus::timer_waits_for_its_service(
            &prop(timer_block, "SubState").unwrap_or_default(),
            &service_state,
        )
    };
    let (mut fresh, mut idle) = (Vec::new(), Vec::new());
    for block in &blocks {
        let Some(id) = prop(block, "Id") else {
            continue;
        };
        if !id.ends_with(".timer") || prop(block, "LoadState").as_deref() != Some("loaded") {
            continue;
        }
        match prop(block, "ActiveState").as_deref() {
            Some("inactive")
                if prop(block, "InactiveExitTimestampMonotonic").as_deref() == Some("0") =>
            {
                fresh.push(id)
            }
            Some("active")
                if matches!(
                    prop(block, "NextElapseUSecRealtime")
                        .as_deref()
                        .map(str::trim),
                    None | Some("" | "0" | "n/a" | "infinity")
                ) && !waits_for_service(block, &id) =>
            {
                idle.push(id)
            }
            _ => {}
        }
    }
    (fresh, idle)
}

/// Starts the timers of `jobs` (the enabled jobs of the job list) that systemd loaded but
/// never started, or that [`stop_timers`] stopped while their job was paused or removed,
/// and restarts those that are active without a next elapse ([`timers_to_arm`]).
///
/// # Errors
/// A message with systemctl's output when it fails.
pub fn arm_timers<'a>(jobs: impl IntoIterator<Item = &'a str>) -> Result<Armed, String> {
    let units: Vec<String> = jobs
        .into_iter()
        .map(|j| format!("jobguard@{j}.timer"))
        .collect();
    if units.is_empty() {
        return Ok(Armed::default());
    }
    let out = std::process::Command::new("systemctl")
        .args([
            "show",
            "-p",
            "Id,LoadState,ActiveState,SubState,InactiveExitTimestampMonotonic,NextElapseUSecRealtime",
        ])
        .args(&units)
        .args(units.iter().map(|t| t.replace(".timer", ".service")))
        .output()
        .map_err(|e| format!("cannot run systemctl: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "systemctl show: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let show = String::from_utf8_lossy(&out.stdout);
    let (mut started, restarted) = timers_to_arm(&show);
    // Timers recover stopped while their job was paused or removed, now enabled again.
    for id in resumed_timers(&show) {
        if !started.contains(&id) {
            started.push(id);
        }
    }
    for (verb, list) in [("start", &started), ("restart", &restarted)] {
        if list.is_empty() {
            continue;
        }
        let out = std::process::Command::new("systemctl")
            .args([verb, "--no-block"])
            .args(list)
            .output()
            .map_err(|e| format!("cannot run systemctl: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "systemctl {verb}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
    }
    for id in &started {
        let job = id
            .trim_start_matches("jobguard@")
            .trim_end_matches(".timer");
        let _ = std::fs::remove_file(stopped_mark(job));
    }
    Ok(Armed { started, restarted })
}

/// The inactive loaded timers in `show` (as [`timers_to_arm`] reads it) that
/// [`stop_timers`] stopped: their job was paused or removed and is enabled again.
fn resumed_timers(show: &str) -> Vec<String> {
    let mut out = Vec::new();
    for block in show.split("\n\n") {
        let prop = |k: &str| -> Option<&str> {
            block
                .lines()
                .find_map(|l| l.strip_prefix(k)?.strip_prefix('='))
        };
        let (Some(id), Some("loaded"), Some("inactive")) =
            (prop("Id"), prop("LoadState"), prop("ActiveState"))
        else {
            continue;
        };
        let Some(job) = id
            .strip_prefix("jobguard@")
            .and_then(|r| r.strip_suffix(".timer"))
        else {
            continue;
        };
        if stopped_mark(job).exists() {
            out.push(id.to_string());
        }
    }
    out
}

/// The marks of the timers [`stop_timers`] stopped: `<runtime dir>/stopped/<job>`. In
/// `/run`, as a stopped timer is not started at the next boot unless its job is enabled.
fn stopped_mark(job: &str) -> std::path::PathBuf {
    crate::paths::runtime_dir().join("stopped").join(job)
}

/// From `systemctl show -p Id,LoadState,ActiveState` of `jobguard@*.timer`: the timers
/// that are active (or activating, or failed) and not masked whose job is not in `keep`
/// (the enabled jobs of the job list, and the jobs named by one of its errors). A timer
/// of a paused job (`enabled = false`) stays active across a daemon-reload, and one of a
/// removed job does too, without its drop-in: `bad-setting` (no `OnCalendar=`) in
/// `systemctl list-timers`.
pub fn timers_to_stop(show: &str, keep: &BTreeSet<String>) -> Vec<String> {
    let mut out = Vec::new();
    for block in show.split("\n\n") {
        let prop = |k: &str| -> Option<&str> {
            block
                .lines()
                .find_map(|l| l.strip_prefix(k)?.strip_prefix('='))
        };
        let Some(id) = prop("Id") else {
            continue;
        };
        let Some(job) = id
            .strip_prefix("jobguard@")
            .and_then(|r| r.strip_suffix(".timer"))
        else {
            continue;
        };
        if keep.contains(job) || prop("LoadState") == Some("masked") {
            continue;
        }
        if matches!(
            prop("ActiveState"),
            Some("active" | "activating" | "failed")
        ) {
            out.push(id.to_string());
        }
    }
    out
}

/// Stops the loaded `jobguard@*.timer` units whose job is paused or no longer in the job
/// list ([`timers_to_stop`]); the services are not touched (stopping a timer does not stop
/// the unit it triggers, systemd.timer(5)), so a run in progress goes on. Each timer
/// stopped is remembered (`stopped_mark`) so that [`arm_timers`] starts it again once
/// its job is enabled. Returns the timers stopped.
///
/// # Errors
/// A message with systemctl's output when it fails.
pub fn stop_timers(keep: &BTreeSet<String>) -> Result<Vec<String>, String> {
    let out = std::process::Command::new("systemctl")
        .args(["show", "-p", "Id,LoadState,ActiveState", "jobguard@*.timer"])
        .output()
        .map_err(|e| format!("cannot run systemctl: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "systemctl show: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let stop = timers_to_stop(&String::from_utf8_lossy(&out.stdout), keep);
    if stop.is_empty() {
        return Ok(stop);
    }
    let out = std::process::Command::new("systemctl")
        .args(["stop", "--no-block"])
        .args(&stop)
        .output()
        .map_err(|e| format!("cannot run systemctl: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "systemctl stop: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    for id in &stop {
        let job = id
            .trim_start_matches("jobguard@")
            .trim_end_matches(".timer");
        if let Err(e) = crate::paths::write_mark(&stopped_mark(job), 0) {
            eprintln!(
                "jobguard: {job}: cannot remember that its timer was stopped ({}): {e}",
                stopped_mark(job).display()
            );
        }
    }
    Ok(stop)
}

/// Marks `run`, a `running` record of a job no longer in the job list whose holder is
/// gone for `reason` ([`holder_gone`]), `interrupted` and held (no timer is left to run
/// the slot again; `jobguard resolve` decides), and logs the `interrupted` event.
/// Returns false when the record was no longer `running`.
///
/// # Errors
/// Store errors.
pub fn interrupt_removed(
    store: &mut dyn Store,
    run: &Run,
    reason: &str,
) -> Result<bool, StoreError> {
    if !store.interrupt(run, reason, Resolution::Held)? {
        return Ok(false);
    }
    emit_interrupted(
        &run.job,
        run,
        reason,
        "the job is no longer in the job list, so the slot is not run again",
    );
    Ok(true)
}

/// Recovers the records in `store` of jobs not in `known` (the job list's jobs and the
/// jobs its errors name) written by this installation (this machine id, not
/// [`identity::Installation::twin`]); records of other machines, or of other
/// installations with this machine id, are theirs to judge.
///
/// First the outcomes this host kept for those jobs are recorded
/// ([`crate::shim::pending::replay`]; a record one of them ends is not cut). Then a slot
/// queued for a re-run is held for a person, as no timer is left here to run it, unless
/// the schedule the store holds for the job ([`Store::read_schedule`]) is another
/// host's and within its horizon: that host still runs the job and re-runs the slot.
/// Last, a
/// `running` record whose holder is gone ([`holder_gone`]: its lease lapsed, and for this
/// installation's own records an earlier boot, or a process of this boot that no longer
/// exists and left no process behind) is marked interrupted by [`interrupt_removed`].
/// Returns the records marked interrupted.
///
/// # Errors
/// Store errors.
pub fn recover_removed(
    store: &mut dyn Store,
    known: &BTreeSet<String>,
) -> Result<Vec<Run>, StoreError> {
    let running = store.runs(&RunQuery {
        outcomes: vec![Outcome::Running],
        ..RunQuery::default()
    })?;
    // Records with this machine id, but not another installation's of this boot's time
    // (theirs to judge): holder_gone believes local evidence only for this installation's
    // own, and judges an earlier boot it does not list (before an upgrade, a lost state
    // directory) by its lease, so no such record stays `running` for ever.
    let me = identity::Installation::here();
    let mine = |run: &Run| {
        !known.contains(&run.job)
            && !me.machine_id.is_empty()
            && run.machine_id == me.machine_id
            && !me.twin(run)
    };
    // Outcomes this host kept for those runs (the store could not take them as the runs
    // ended) end their records first, as for jobs still in the list.
    let removed: BTreeSet<String> = running
        .iter()
        .filter(|r| mine(r))
        .map(|r| r.job.clone())
        .collect();
    for job in &removed {
        crate::shim::pending::replay(store, job)?;
    }
    // A slot of a removed job queued for a re-run (its run was cut with the policy it
    // started with, `on_interrupted = "rerun"`: by a shutdown, or ended above) has no
    // timer left here to run it: it is held for a person, unless another host still runs
    // the job (its schedule, declared in the store as it fires, is another host's and
    // within its horizon): that host's recover pass re-runs the slot.
    let queued = store.runs(&RunQuery {
        resolutions: vec![Resolution::Queued],
        ..RunQuery::default()
    })?;
    let me_host = format!("{} {}", identity::host_name(), me.machine_id);
    let now = crate::guard::clock::Clock::now_usec(&crate::guard::clock::SystemClock);
    let mut seen: BTreeSet<(String, i64)> = BTreeSet::new();
    for run in queued.iter().filter(|r| mine(r)) {
        if crate::joblist::job::is_drill_probe_name(&run.job)
            || !seen.insert((run.job.clone(), run.slot.usec))
        {
            continue;
        }
        let run_elsewhere = store
            .read_schedule(&run.job)?
            .is_some_and(|d| d.host != me_host && d.seen_at.saturating_add(d.horizon) > now);
        if !run_elsewhere && store.resolve(&run.job, run.slot.usec, Resolution::Held)? > 0 {
            emit_removed_held(run);
        }
    }
    if removed.is_empty() {
        return Ok(Vec::new());
    }
    let running = store.runs(&RunQuery {
        outcomes: vec![Outcome::Running],
        ..RunQuery::default()
    })?;
    let mut out = Vec::new();
    for run in running {
        if !mine(&run) {
            continue;
        }
        let Some(reason) = holder_gone(store, &run)? else {
            continue;
        };
        // A drill's probe cut off with its drill: no probe slot is ever run again, so it is
        // settled, not held for a person (crate::ops::drill).
        let ended = if crate::joblist::job::is_drill_probe_name(&run.job) {
            store.interrupt(&run, reason, Resolution::Done)?
        } else {
            interrupt_removed(store, &run, reason)?
        };
        if ended {
            out.push(run);
        }
    }
    Ok(out)
}

/// Settles the `running` records of `job`'s drill probe ([`crate::joblist::job::drill_probe_name`])
/// whose holder is gone ([`holder_gone`]: a drill cut off in its lease layer):
/// `interrupted`, resolution `done`, as no probe slot is ever run again. Returns how many.
///
/// # Errors
/// Store errors.
pub fn settle_probes(store: &mut dyn Store, job: &str) -> Result<usize, StoreError> {
    let running = store.runs(&RunQuery {
        job: Some(crate::joblist::job::drill_probe_name(job)),
        outcomes: vec![Outcome::Running],
        ..RunQuery::default()
    })?;
    let mut settled = 0;
    for run in running {
        if let Some(reason) = holder_gone(store, &run)?
            && store.interrupt(&run, reason, Resolution::Done)?
        {
            settled += 1;
        }
    }
    Ok(settled)
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

/// How many records [`missed_slots`] reads: the newest slot is among them.
const RECENT: usize = 200;
/// At most this many missed-slot events per job and pass; the rest are summed up in one.
const MAX_MISSED_EVENTS: usize = 100;

/// The job's slots that are *missed* ([`crate::ops::audit`]) in the span its newest `RECENT`
/// records cover and after them: elapsed before `now` − the job's grace (and this host's
/// `boot` + grace), µs since the epoch, oldest first. A job with no record has none.
///
/// # Errors
/// Store errors reading the records.
pub fn missed_slots(
    store: &mut dyn Store,
    job: &Job,
    now: i64,
    boot: i64,
) -> Result<Vec<i64>, StoreError> {
    let recent = store.runs(&RunQuery {
        job: Some(job.name.clone()),
        limit: RECENT,
        ..RunQuery::default()
    })?;
    let back = audit::read_back_to(
        &recent,
        RECENT,
        crate::store::rules::duration_usec(job.clock_tolerance),
    );
    let mut scope = audit::recent_scope(job, now, boot, back);
    scope.paused = crate::ops::pause::of_job(store, job)?.spans();
    let mut findings = audit::audit_job(&recent, Some(&job.calendar), &BTreeSet::new(), &scope);
    crate::ops::audit::confirm_missed(store, &job.name, &mut findings)?;
    Ok(findings
        .into_iter()
        .filter(|f| f.kind == FindingKind::Missed && f.runs.is_empty())
        .map(|f| f.slot)
        .collect())
}

/// The file that keeps the missed slots of `job` already reported (µs since the epoch,
/// one per line): `<runtime dir>/missed/<job>`. In `/run`, so each boot reports a slot
/// that is still missed once more.
fn missed_mark(job: &str) -> std::path::PathBuf {
    crate::paths::runtime_dir().join("missed").join(job)
}

/// Emits one `missed` journal event ([`Kind::Missed`]) for each of `slots` (the job's
/// missed slots now, oldest first) not reported before on this host since boot, and
/// remembers them all: a slot that is no longer missed (it ran) is forgotten, and a gap
/// found behind slots reported earlier is reported too. Returns the slots newly reported.
pub fn report_missed(job: &Job, slots: &[i64]) -> Vec<i64> {
    let mark = missed_mark(&job.name);
    let reported: BTreeSet<i64> = std::fs::read_to_string(&mark)
        .map(|t| t.lines().filter_map(|l| l.trim().parse().ok()).collect())
        .unwrap_or_default();
    let new: Vec<i64> = slots
        .iter()
        .copied()
        .filter(|s| !reported.contains(s))
        .collect();
    if new.is_empty() {
        if slots.len() != reported.len() {
            // Some ran since: only the slots still missed are kept.
            let _ = crate::paths::write_marks(&mark, slots);
        }
        return new;
    }
    let newest = new[new.len() - 1];
    for &slot in new.iter().take(MAX_MISSED_EVENTS) {
        let mut ev = Event::new(
            Kind::Missed,
            &job.name,
            format!(
                "missed: slot {} elapsed with no record and no catch-up decision; run it with `jobguard run {} --slot {}` if it is wanted",
                format_usec(slot),
                job.name,
                format_usec(slot)
            ),
        );
        ev.slot = Some(format_usec(slot));
        ev.reason = Some("missed".into());
        journal::emit(&ev);
    }
    if new.len() > MAX_MISSED_EVENTS {
        let rest = &new[MAX_MISSED_EVENTS..];
        let mut ev = Event::new(
            Kind::Missed,
            &job.name,
            format!(
                "missed: {} more slots from {} to {} elapsed with no record and no catch-up decision",
                rest.len(),
                format_usec(rest[0]),
                format_usec(newest)
            ),
        );
        ev.slot = Some(format_usec(newest));
        ev.reason = Some("missed".into());
        journal::emit(&ev);
    }
    if let Err(e) = crate::paths::write_marks(&mark, slots) {
        eprintln!(
            "jobguard: {}: cannot remember the missed slots reported ({}): {e}",
            job.name,
            mark.display()
        );
    }
    new
}

/// Expands the specifiers systemd would expand in `OnFailure=` of the job's service
/// (systemd.unit(5), "SPECIFIERS") for the ones a unit name can use here: `%n %N %p %P %j
/// %J %i %I %H %l %m %b %%`.
///
/// # Errors
/// The specifier that is not supported here.
pub fn expand_on_failure(unit: &str, job: &str) -> Result<String, String> {
    let service = format!("jobguard@{job}.service");
    let host = identity::host_name();
    let mut out = String::new();
    let mut chars = unit.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push_str(&service),
            Some('N') => out.push_str(&format!("jobguard@{job}")),
            Some('p' | 'P' | 'j' | 'J') => out.push_str("jobguard"),
            Some('i' | 'I') => out.push_str(job),
            Some('H') => out.push_str(&host),
            Some('l') => out.push_str(host.split('.').next().unwrap_or_default()),
            Some('m') => out.push_str(&identity::machine_id()),
            Some('b') => out.push_str(&identity::boot_id()),
            Some('%') => out.push('%'),
            Some(o) => {
                return Err(format!(
                    "specifier %{o} in on_failure {unit:?} is not supported by recover"
                ));
            }
            None => return Err(format!("on_failure {unit:?} ends with %")),
        }
    }
    Ok(out)
}

/// Starts the job's `on_failure` unit (if it has one) without waiting, as systemd's
/// `OnFailure=` would: for a slot that `recover` held for a person, which no failing
/// service announces. Returns the unit started.
///
/// # Errors
/// A message when the name cannot be expanded or systemctl fails.
pub fn start_on_failure(job: &Job) -> Result<Option<String>, String> {
    let Some(unit) = &job.on_failure else {
        return Ok(None);
    };
    let unit = expand_on_failure(unit, &job.name)?;
    let out = std::process::Command::new("systemctl")
        .args(["start", "--no-block", &unit])
        .output()
        .map_err(|e| format!("cannot run systemctl: {e}"))?;
    if out.status.success() {
        Ok(Some(unit))
    } else {
        Err(format!(
            "systemctl start {unit}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timers_to_arm_starts_new_ones_and_restarts_idle_ones_only() {
        let show = "Id=jobguard@new.timer\nLoadState=loaded\nActiveState=inactive\nInactiveExitTimestampMonotonic=0\nNextElapseUSecRealtime=\n\n\
                    Id=jobguard@stopped.timer\nLoadState=loaded\nActiveState=inactive\nInactiveExitTimestampMonotonic=123456\nNextElapseUSecRealtime=\n\n\
                    Id=jobguard@idle.timer\nLoadState=loaded\nActiveState=active\nInactiveExitTimestampMonotonic=123456\nNextElapseUSecRealtime=\n\n\
                    Id=jobguard@fine.timer\nLoadState=loaded\nActiveState=active\nInactiveExitTimestampMonotonic=123456\nNextElapseUSecRealtime=Tue 2026-12-01 18:00:00 UTC\n\n\
                    Id=jobguard@masked.timer\nLoadState=masked\nActiveState=active\nInactiveExitTimestampMonotonic=1\nNextElapseUSecRealtime=\n\n\
                    Id=jobguard@busy.timer\nLoadState=loaded\nActiveState=active\nSubState=running\nInactiveExitTimestampMonotonic=1\nNextElapseUSecRealtime=\n\n\
                    Id=jobguard@starting.timer\nLoadState=loaded\nActiveState=active\nSubState=elapsed\nInactiveExitTimestampMonotonic=1\nNextElapseUSecRealtime=\n\n\
                    Id=jobguard@idle.service\nLoadState=loaded\nActiveState=failed\n\n\
                    Id=jobguard@starting.service\nLoadState=loaded\nActiveState=activating\n";
        let (fresh, idle) = timers_to_arm(show);
        assert_eq!(fresh, vec!["jobguard@new.timer".to_string()]);
        assert_eq!(idle, vec!["jobguard@idle.timer".to_string()]);
    }

    #[test]
    fn timers_to_stop_are_active_timers_of_jobs_not_kept() {
        let show = "Id=jobguard@kept.timer\nLoadState=loaded\nActiveState=active\n\n\
                    Id=jobguard@paused.timer\nLoadState=loaded\nActiveState=active\n\n\
                    Id=jobguard@removed.timer\nLoadState=bad-setting\nActiveState=active\n\n\
                    Id=jobguard@stopped.timer\nLoadState=loaded\nActiveState=inactive\n\n\
                    Id=jobguard@masked.timer\nLoadState=masked\nActiveState=active\n\n\
                    Id=jobguard-recover.timer\nLoadState=loaded\nActiveState=active\n";
        let keep = BTreeSet::from(["kept".to_string()]);
        assert_eq!(
            timers_to_stop(show, &keep),
            vec![
                "jobguard@paused.timer".to_string(),
                "jobguard@removed.timer".to_string()
            ]
        );
    }

    #[test]
    fn on_failure_specifiers_are_those_of_the_jobs_service() {
        assert_eq!(
            expand_on_failure("alert@%n.service", "sync").unwrap(),
            "alert@jobguard@sync.service.service"
        );
        assert_eq!(
            expand_on_failure("mail-%i.service", "a-b").unwrap(),
            "mail-a-b.service"
        );
        assert_eq!(expand_on_failure("x%%.service", "j").unwrap(), "x%.service");
        assert!(expand_on_failure("x@%u.service", "j").is_err());
    }
}

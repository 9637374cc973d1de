//! `jobguard recover [JOB]`: report missed slots (one `missed` journal event per slot),
//! mark cut-off runs interrupted, start a job's `on_failure` unit for a slot newly held
//! for a person, start new timers and re-arm timers left without a next elapse, and get
//! queued slots run (see [`crate::recover`]). Run at boot by `jobguard-recover.service`,
//! every minute by `jobguard-recover.timer`, and after every daemon-reload by
//! `jobguard-recover.path` (the generator's stamp, [`crate::paths::RELOAD_STAMP`]).
//! Without JOB and `--config` (so with the
//! job list the generator reads), it also stops the timers of paused jobs and of jobs no
//! longer in the list, and marks the cut-off runs of the latter interrupted (see
//! [`crate::recover`]). When the job list sets
//! `[metrics] textfile`, each pass ends by writing every job's metrics there atomically
//! ([`crate::metrics::write_textfile`]); a failure to write is a journal warning
//! ([`Kind::MetricsNotWritten`]), not a failed pass. A store the pass cannot reach while
//! this host keeps an outcome of one of its jobs ([`pending::waiting`]) is tried again
//! every second until [`KEPT_RETRY_FOR`] into the pass.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use crate::cli::{RecoverArgs, job_store_address, list_store_addresses, open_store};
use crate::config::{self, ConfigSource};
use crate::exit;
use crate::journal::{self, Event, Kind};
use crate::recover;
use crate::shim;
use crate::shim::pending;

/// Removes the stamp the generator leaves at every run ([`crate::paths::RELOAD_STAMP`]),
/// which made `jobguard-recover.path` start this pass: while it exists the path unit
/// starts the pass again. Nothing to remove, or no right to (a user's pass), is not an
/// error.
fn take_reload_stamp() {
    match std::fs::remove_file(crate::paths::RELOAD_STAMP) {
        Ok(()) => {}
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::NotFound
                    | std::io::ErrorKind::PermissionDenied
                    | std::io::ErrorKind::ReadOnlyFilesystem
            ) => {}
        Err(e) => eprintln!(
            "jobguard: cannot remove {}: {e}; jobguard-recover.path starts passes until it is gone",
            crate::paths::RELOAD_STAMP
        ),
    }
}

/// Runs `jobguard recover`; returns the exit status (non-zero if any store failed).
pub fn run(args: &RecoverArgs) -> u8 {
    journal::init();
    // First, before the job list is read: a reload during this pass leaves a new stamp,
    // and so another pass.
    take_reload_stamp();
    let set = config::load(&ConfigSource::resolve(args.config.config.clone()));
    if let Some(name) = &args.job
        && !set.jobs.contains_key(name)
    {
        eprintln!("jobguard: no job named {name:?}");
        return exit::CONFIG;
    }
    let started = Instant::now();
    let mut status = exit::OK;
    let mut by_store: BTreeMap<String, Vec<&crate::job::Job>> = BTreeMap::new();
    for job in set
        .jobs
        .values()
        .filter(|j| args.job.as_ref().is_none_or(|n| *n == j.name))
    {
        match job_store_address(job) {
            Ok(address) => by_store.entry(address).or_default().push(job),
            Err(code) => status = code,
        }
    }
    let systemd = recover::under_systemd();
    // Missed slots are judged before any timer is armed: a re-armed timer's catch-up run
    // passes them over, and they are reported first.
    let now = jiff::Timestamp::now().as_microsecond();
    let boot = crate::identity::boot_time_usec();
    let mut to_run = Vec::new();
    // Jobs whose store could not be reached while this host keeps an outcome of theirs
    // that the store could not take: tried again below.
    let mut again: BTreeMap<String, Vec<&crate::job::Job>> = BTreeMap::new();
    for (url, jobs) in by_store {
        let mut store = match open_store(&url) {
            Ok(s) => s,
            Err(code) => {
                if code == exit::STORE_UNAVAILABLE && jobs.iter().any(|j| pending::waiting(&j.name))
                {
                    again.insert(url, jobs);
                } else {
                    status = code;
                }
                continue;
            }
        };
        for job in jobs {
            let s = job_pass(store.as_mut(), job, now, boot, systemd, &mut to_run);
            if s == exit::STORE_UNAVAILABLE && pending::waiting(&job.name) {
                again.entry(url.clone()).or_default().push(job);
            } else if s != exit::OK {
                status = s;
            }
        }
    }
    if !again.is_empty() {
        let s = pass_again(again, started, now, boot, systemd, &mut to_run);
        if s != exit::OK {
            status = s;
        }
    }
    if systemd && args.job.is_none() {
        // A schedule with no elapse left (a date in the past) leaves its timer idle on
        // purpose.
        let now_ts = jiff::Timestamp::now();
        let due = set
            .jobs
            .values()
            .filter(|j| j.enabled && j.calendar.next_elapse(now_ts).is_some())
            .map(|j| j.name.as_str());
        match recover::arm_timers(due) {
            Ok(armed) => {
                if !armed.started.is_empty() {
                    println!("started new timers: {}", armed.started.join(" "));
                }
                if !armed.restarted.is_empty() {
                    println!(
                        "re-armed timers without a next elapse: {}",
                        armed.restarted.join(" ")
                    );
                }
            }
            Err(e) => eprintln!("jobguard: {e}"),
        }
    }
    // What is removed is judged only against the job list the generator reads: another
    // list given with --config would make every job of the real one look removed.
    if args.job.is_none() && args.config.config.is_none() {
        let s = removed_and_paused(&set, systemd);
        if status == exit::OK {
            status = s;
        }
    }
    if let Some(path) = &set.metrics_textfile {
        write_metrics(&set, path);
    }
    for (job, r) in to_run {
        let slots: Vec<String> = r
            .queued
            .iter()
            .map(|u| crate::ledger::format_usec(*u))
            .collect();
        let how = if systemd {
            format!("starting jobguard@{}.service", job.name)
        } else {
            "running it now".into()
        };
        let mut ev = Event::new(
            Kind::Recovered,
            &job.name,
            format!("re-run queued for slot(s) {}: {how}", slots.join(", ")),
        );
        ev.slot = slots.first().cloned();
        ev.reason = Some("queued-rerun".into());
        if !r.interrupted.is_empty() || !systemd {
            journal::emit(&ev);
        }
        if systemd {
            if let Err(e) = recover::start_unit(&job.name) {
                eprintln!("jobguard: {}: {e}", job.name);
                status = exit::FAILURE;
            }
        } else {
            // Only the queued slots: the current one is its timer's (or a person's).
            let queued_only = shim::Request {
                queued_only: true,
                ..shim::Request::default()
            };
            let s = shim::run(job, &queued_only);
            if status == exit::OK {
                status = s;
            }
        }
    }
    status
}

/// How long after its start a pass tries again, every [`KEPT_RETRY_EVERY`], a store it
/// could not reach while this host keeps an outcome the store could not take (a shim cut
/// off from a shared store as its command ended, [`pending`]): once the store is back,
/// the outcome is recorded within seconds, not at the next pass a minute later. Other
/// hosts call a holder gone only 90 s after they first saw its lease expired
/// ([`recover::FOREIGN_GRACE_USEC`]), at their passes, on the minute; a holder back
/// inside that grace must have recorded by then, and waiting for its own next pass can
/// lose that race. 45 s leaves the rest of the minute to the pass, so the recover
/// timer's next elapse finds it ended.
const KEPT_RETRY_FOR: Duration = Duration::from_secs(45);

/// The pause between two tries of [`KEPT_RETRY_FOR`].
const KEPT_RETRY_EVERY: Duration = Duration::from_secs(1);

/// One job's share of a pass in `store`: its missed slots reported, its kept outcomes
/// recorded and cut-off runs marked ([`recover::recover_job`]), its `on_failure` unit
/// started for a slot newly held, its queued slots added to `to_run`, and retention
/// applied when due. Returns the exit status of this share (a store error's, or
/// [`exit::FAILURE`]).
fn job_pass<'a>(
    store: &mut dyn crate::store::Store,
    job: &'a crate::job::Job,
    now: i64,
    boot: i64,
    systemd: bool,
    to_run: &mut Vec<(&'a crate::job::Job, recover::Recovered)>,
) -> u8 {
    let mut status = exit::OK;
    // A paused job expects no slot: none is missed.
    match recover::missed_slots(store, job, now, boot) {
        Ok(slots) if job.enabled => {
            recover::report_missed(job, &slots);
        }
        Ok(_) => {}
        Err(e) => {
            eprintln!("jobguard: {}: {e}", job.name);
            status = e.exit_status();
        }
    }
    match recover::recover_job(store, job) {
        Ok(r) => {
            if systemd && !r.held.is_empty() {
                match recover::start_on_failure(job) {
                    Ok(Some(unit)) => println!(
                        "{}: slot {} held for a person: started {unit}",
                        job.name,
                        r.held[0].slot.rfc3339()
                    ),
                    Ok(None) => {}
                    Err(e) => {
                        eprintln!("jobguard: {}: on_failure: {e}", job.name);
                        status = exit::FAILURE;
                    }
                }
            }
            // A paused job's queued slots wait until it is enabled again.
            // Once, when a pass tried again ([`pass_again`]).
            if job.enabled
                && !r.queued.is_empty()
                && !to_run.iter().any(|(j, _)| j.name == job.name)
                && !recover::lease_alive(store, &job.name)
            {
                to_run.push((job, r))
            }
        }
        Err(e) => {
            eprintln!("jobguard: {}: {e}", job.name);
            status = e.exit_status();
        }
    }
    // Retention, once a day per job on this host (`crate::retention`).
    if crate::retention::due(job, now) {
        match crate::retention::prune_job(store, job, false) {
            Ok(p) => {
                if p.deleted > 0 {
                    println!(
                        "{}: deleted {} of {} records older than its retention",
                        job.name, p.deleted, p.total
                    );
                }
                if let Err(e) = crate::retention::pruned(&job.name, now) {
                    eprintln!("jobguard: {}: cannot note the prune: {e}", job.name);
                }
            }
            Err(e) => {
                eprintln!("jobguard: {}: retention: {e}", job.name);
                status = e.exit_status();
            }
        }
    }
    status
}

/// Tries `again` (jobs by store address: stores that could not be reached while this
/// host keeps an outcome of those jobs) every [`KEPT_RETRY_EVERY`] until
/// [`KEPT_RETRY_FOR`] after `started`, doing each job's share of the pass ([`job_pass`])
/// once its store answers. Returns [`exit::OK`] when every job's share was done, else the
/// last failure's status.
fn pass_again<'a>(
    mut again: BTreeMap<String, Vec<&'a crate::job::Job>>,
    started: Instant,
    now: i64,
    boot: i64,
    systemd: bool,
    to_run: &mut Vec<(&'a crate::job::Job, recover::Recovered)>,
) -> u8 {
    let until = started + KEPT_RETRY_FOR;
    let names: Vec<&str> = again.values().flatten().map(|j| j.name.as_str()).collect();
    eprintln!(
        "jobguard: {}: this host keeps an outcome the store could not take; trying the store again until {} s into this pass",
        names.join(", "),
        KEPT_RETRY_FOR.as_secs()
    );
    // The status of shares done (or failed for good); a store still not reached at the
    // end makes it its error's.
    let mut status = exit::OK;
    let mut unreached = exit::STORE_UNAVAILABLE;
    while !again.is_empty() {
        if Instant::now() + KEPT_RETRY_EVERY >= until {
            return unreached;
        }
        std::thread::sleep(KEPT_RETRY_EVERY);
        let mut left = BTreeMap::new();
        for (url, jobs) in std::mem::take(&mut again) {
            // Quietly: each try's failure would say the same thing every second.
            let opened = crate::store::open(&url).and_then(|mut s| s.init().map(|()| s));
            let mut store = match opened {
                Ok(s) => s,
                Err(e) => {
                    if Instant::now() + KEPT_RETRY_EVERY >= until {
                        eprintln!("jobguard: {e}");
                    }
                    unreached = e.exit_status();
                    left.insert(url, jobs);
                    continue;
                }
            };
            for job in jobs {
                let s = job_pass(store.as_mut(), job, now, boot, systemd, to_run);
                if s == exit::STORE_UNAVAILABLE && pending::waiting(&job.name) {
                    left.entry(url.clone()).or_default().push(job);
                } else if s != exit::OK {
                    status = s;
                }
            }
        }
        again = left;
    }
    status
}

/// Stops the timers of paused jobs and of jobs no longer in the job list, and marks the
/// cut-off `running` records of the latter interrupted ([`recover::stop_timers`],
/// [`recover::recover_removed`]). Skipped when a file of the job list could not be read:
/// its jobs would look removed. A job the list names in an error (a typo) is not
/// removed either. Returns the exit status of this step.
fn removed_and_paused(set: &config::JobSet, systemd: bool) -> u8 {
    if set
        .errors
        .iter()
        .any(|e| e.scope == config::ErrorScope::File)
    {
        return exit::OK;
    }
    let mut known: BTreeSet<String> = set.jobs.keys().cloned().collect();
    known.extend(set.errors.iter().filter_map(|e| e.job.clone()));
    let mut status = exit::OK;
    if systemd {
        let keep: BTreeSet<String> = known
            .iter()
            .filter(|n| set.jobs.get(*n).is_none_or(|j| j.enabled))
            .cloned()
            .collect();
        match recover::stop_timers(&keep) {
            Ok(stopped) if !stopped.is_empty() => println!(
                "stopped timers of paused or removed jobs: {}",
                stopped.join(" ")
            ),
            Ok(_) => {}
            Err(e) => eprintln!("jobguard: {e}"),
        }
    }
    let (addresses, s) = list_store_addresses(set);
    if s != exit::OK {
        status = s;
    }
    for address in addresses {
        let mut store = match open_store(&address) {
            Ok(s) => s,
            Err(code) => {
                status = code;
                continue;
            }
        };
        if let Err(e) = recover::recover_removed(store.as_mut(), &known) {
            eprintln!("jobguard: {}: {e}", store.describe());
            status = e.exit_status();
        }
    }
    status
}

/// Writes every job's metrics to `path` (after this pass's recovery, before queued re-runs
/// start); a failure is a journal warning.
fn write_metrics(set: &config::JobSet, path: &std::path::Path) {
    let now = jiff::Timestamp::now().as_microsecond();
    let collected = crate::metrics::collect(set, now, crate::identity::boot_time_usec());
    let text = crate::metrics::render(&collected.jobs);
    if let Err(e) = crate::metrics::write_textfile(path, &text) {
        let ev = Event::new(
            Kind::MetricsNotWritten,
            "",
            format!("metrics textfile {} not written: {e}", path.display()),
        );
        journal::emit(&ev);
    }
}

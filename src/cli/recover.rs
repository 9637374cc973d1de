//! `jobguard recover [JOB]`: report missed slots (one `missed` journal event per slot),
//! mark cut-off runs interrupted, start a job's `on_failure` unit for a slot newly held
//! for a person, start new timers and re-arm timers left without a next elapse, and get
//! queued slots run (see [`crate::ops::recover`]). Run at boot by `jobguard-recover.service`,
//! every minute by `jobguard-recover.timer`, and after every daemon-reload by
//! `jobguard-recover.path` (the generator's stamp, [`crate::paths::RELOAD_STAMP`]).
//! Without JOB and `--config` (so with the
//! job list the generator reads), it also stops the timers of paused jobs and of jobs no
//! longer in the list, and marks the cut-off runs of the latter interrupted (see
//! [`crate::ops::recover`]). A whole pass writes this host's heartbeat to each store
//! ([`crate::ops::fleet`]). When the job list sets
//! `[metrics] textfile`, each pass ends by writing every job's metrics there atomically
//! ([`crate::ops::metrics::write_textfile`]); a failure to write is a journal warning
//! ([`Kind::MetricsNotWritten`]), not a failed pass.

use std::collections::{BTreeMap, BTreeSet};

use crate::cli::{RecoverArgs, job_store_address, list_store_addresses, open_store};
use crate::exit::{self, Error, Finished};
use crate::joblist::config::{self, ConfigSource};
use crate::ops::recover;
use crate::shim;
use crate::systemd::journal::{self, Event, Kind};

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

/// Runs `jobguard recover`: ends with 0, or the worst status of what failed on the way
/// (a store, a unit systemd would not start, a queued re-run run here).
///
/// # Errors
/// [`exit::CONFIG`] for an unknown job.
pub fn run(args: &RecoverArgs) -> exit::Result {
    journal::init();
    // First, before the job list is read: a reload during this pass leaves a new stamp,
    // and so another pass.
    take_reload_stamp();
    let set = config::load(&ConfigSource::resolve(args.config.config.clone()));
    if let Some(name) = &args.job
        && !set.jobs.contains_key(name)
    {
        return Err(Error::new(exit::CONFIG, format!("no job named {name:?}")));
    }
    let mut finished = Finished::OK;
    let mut by_store: BTreeMap<String, Vec<&crate::joblist::job::Job>> = BTreeMap::new();
    for job in set
        .jobs
        .values()
        .filter(|j| args.job.as_ref().is_none_or(|n| *n == j.name))
    {
        match job_store_address(job) {
            Ok(address) => by_store.entry(address).or_default().push(job),
            Err(e) => finished.report(&e),
        }
    }
    let systemd = recover::under_systemd();
    // Missed slots are judged before any timer is armed: a re-armed timer's catch-up run
    // passes them over, and they are reported first.
    let now = jiff::Timestamp::now().as_microsecond();
    let boot = crate::guard::identity::boot_time_usec();
    let mut to_run = Vec::new();
    for (url, jobs) in by_store {
        let mut store = match open_store(&url) {
            Ok(s) => s,
            Err(e) => {
                finished.report(&e);
                continue;
            }
        };
        for job in jobs {
            // A paused job expects no slot: none is missed.
            match recover::missed_slots(store.as_mut(), job, now, boot) {
                Ok(slots) if job.enabled => {
                    recover::report_missed(job, &slots);
                }
                Ok(_) => {}
                Err(e) => finished.report(&Error::from(e).context(&job.name)),
            }
            match recover::recover_job(store.as_mut(), job) {
                Ok(r) => {
                    if systemd && !r.held.is_empty() {
                        match recover::start_on_failure(job) {
                            Ok(Some(unit)) => println!(
                                "{}: slot {} held for a person: started {unit}",
                                job.name,
                                r.held[0].slot.rfc3339()
                            ),
                            Ok(None) => {}
                            Err(e) => finished.report(
                                &Error::new(exit::OS_ERROR, e)
                                    .context(format!("{}: on_failure", job.name)),
                            ),
                        }
                    }
                    // A paused job's queued slots wait until it is enabled again, or
                    // resumed across the fleet.
                    if job.enabled
                        && !r.queued.is_empty()
                        && !recover::lease_alive(store.as_mut(), &job.name)
                        && !paused_now(store.as_mut(), job, now, &mut finished)
                    {
                        to_run.push((job, r))
                    }
                }
                Err(e) => finished.report(&Error::from(e).context(&job.name)),
            }
            // The probes of a drill of this job that was cut off (crate::ops::drill).
            if let Err(e) = recover::settle_probes(store.as_mut(), &job.name) {
                finished.report(&Error::from(e).context(&job.name));
            }
            // Retention, once a day per job on this host (`crate::ops::retention`).
            if crate::ops::retention::due(job, now) {
                match crate::ops::retention::prune_job(store.as_mut(), job, false) {
                    Ok(p) => {
                        if p.deleted > 0 {
                            println!(
                                "{}: deleted {} of {} records older than its retention",
                                job.name, p.deleted, p.total
                            );
                        }
                        if let Err(e) = crate::ops::retention::pruned(&job.name, now) {
                            eprintln!("jobguard: {}: cannot note the prune: {e}", job.name);
                        }
                    }
                    Err(e) => {
                        finished.report(&Error::from(e).context(format!("{}: retention", job.name)))
                    }
                }
            }
        }
        // The heartbeat of a whole pass, for the fleet view (`crate::ops::fleet`). Not
        // written is a warning, not a failed pass: the runs are recovered either way (a
        // user with data rights only cannot make its table in a store made before it).
        if args.job.is_none()
            && let Err(e) = crate::ops::fleet::beat(store.as_mut(), &set, &url)
        {
            eprintln!(
                "jobguard: warning: {}: heartbeat not written: {e}",
                store.describe()
            );
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
        removed_and_paused(&set, systemd, &mut finished);
    }
    if let Some(path) = &set.metrics_textfile {
        write_metrics(&set, path);
    }
    for (job, r) in to_run {
        let slots: Vec<String> = r
            .queued
            .iter()
            .map(|u| crate::guard::ledger::format_usec(*u))
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
            // As `jobguard rerun`: a unit that systemd would not start is the system's
            // failure.
            if let Err(e) = recover::start_unit(&job.name) {
                finished.report(&Error::new(exit::OS_ERROR, e).context(&job.name));
            }
        } else {
            // Only the queued slots: the current one is its timer's (or a person's).
            let queued_only = shim::Request {
                queued_only: true,
                ..shim::Request::default()
            };
            finished.add(shim::run(job, &queued_only));
        }
    }
    Ok(finished)
}

/// Stops the timers of paused jobs and of jobs no longer in the job list, and marks the
/// cut-off `running` records of the latter interrupted ([`recover::stop_timers`],
/// [`recover::recover_removed`]). Skipped when a file of the job list could not be read:
/// its jobs would look removed. A job the list names in an error (a typo) is not
/// removed either. What fails is reported into `finished`.
fn removed_and_paused(set: &config::JobSet, systemd: bool, finished: &mut Finished) {
    if set
        .errors
        .iter()
        .any(|e| e.scope == config::ErrorScope::File)
    {
        return;
    }
    let mut known: BTreeSet<String> = set.jobs.keys().cloned().collect();
    known.extend(set.errors.iter().filter_map(|e| e.job.clone()));
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
    // The jobs' addresses that cannot be read were reported with the jobs; the
    // `[defaults]` tables' are reported here.
    for d in &set.default_stores {
        if let Err(e) = d.address() {
            finished.report(&e.into());
        }
    }
    for address in list_store_addresses(set).0 {
        let mut store = match open_store(&address) {
            Ok(s) => s,
            Err(e) => {
                finished.report(&e);
                continue;
            }
        };
        if let Err(e) = recover::recover_removed(store.as_mut(), &known) {
            finished.report(&Error::from(e).context(store.describe()));
        }
    }
}

/// Writes every job's metrics to `path` (after this pass's recovery, before queued re-runs
/// start); a failure is a journal warning.
fn write_metrics(set: &config::JobSet, path: &std::path::Path) {
    let now = jiff::Timestamp::now().as_microsecond();
    let collected =
        crate::ops::metrics::collect(set, now, crate::guard::identity::boot_time_usec());
    let text = crate::ops::metrics::render(&collected);
    if let Err(e) = crate::ops::metrics::write_textfile(path, &text) {
        let ev = Event::new(
            Kind::MetricsNotWritten,
            "",
            format!("metrics textfile {} not written: {e}", path.display()),
        );
        journal::emit(&ev);
    }
}

/// Whether `job` is paused across the fleet at `now` (µs since the epoch,
/// [`crate::ops::pause`]). A record that cannot be read counts as a pause (nothing is started
/// that a person may have paused), and its error is reported into `finished`.
fn paused_now(
    store: &mut dyn crate::store::Store,
    job: &crate::joblist::job::Job,
    now: i64,
    finished: &mut Finished,
) -> bool {
    match crate::ops::pause::read(store, &job.name) {
        Ok(p) => p.covering(now).is_some(),
        Err(e) => {
            finished.report(&Error::from(e).context(&job.name));
            true
        }
    }
}

//! `jobguard status [--json | --wide]`: every job with its schedule, next elapse, last
//! slot and outcome, the last run's DURATION (its own time: a run found cut is not charged the
//! downtime until it was found, see [`crate::store::rules::cut_end`]), a running run's
//! holder, and the runs that need attention. The table fits 100 columns ([`NARROW`]);
//! `--wide` has every detail ([`WIDE`]).
//!
//! What systemd knows is joined in when it can be read ([`crate::systemd::dbus`]): each
//! timer's next elapse (`NextElapseUSecRealtime`, which then is the NEXT column) and last
//! trigger (`LastTriggerUSec`), and the service's `ActiveState`/`SubState`. Without
//! systemd (a container without it, a plain shell) the ledger part is still shown, with a
//! note of what could not be read; NEXT then comes from jobguard's own calendar engine.
//!
//! A job needs attention ([`crate::ops::audit::needs_attention`], the rule `audit` uses) when a
//! slot that is not done has its latest attempt `failed`, held for a person, or cut off and
//! waiting for its queued re-run; when a `running` record's holder is gone; when a slot
//! elapsed past the job's grace with no record (*missed*), after the newest record or
//! between the newest `RECENT` ones; when systemd was read and the job's timer is not
//! waiting for a next elapse (unless it is masked, or waits for the service it started:
//! systemd gives a timer no next elapse while its service runs, and NEXT then comes from
//! jobguard's calendar engine); or when a recent record proves
//! another machine with this machine id ([`crate::guard::identity::Installation::twin`], listed
//! as `machine_id_shared`, with the fix). `status` then exits [`exit::ATTENTION`] (1), so it serves as a monitoring
//! check; a store or job list it cannot read gives its own status (69, 78) instead. A
//! job the job list left out (an error in its definition: it has no timer) is listed as
//! refused, with the error, and the job list's status is 78.
//!
//! A paused job (`enabled = false`) is listed with STATE `paused; …`, no NEXT and
//! `"paused": true` in the JSON. Its timer not waiting and its slots passing are not
//! attention items (no slot of it is expected); its held, failed and queued slots and its
//! cut-off runs still are.
//!
//! A job paused across the fleet (`jobguard pause`, [`crate::ops::pause`]) is listed with STATE
//! `paused until TIME` (`paused` while its window waits for `resume`), NEXT the first
//! elapse after its window, and `fleet_pause` (since, until, by, reason) in the JSON; its
//! slots in a window are not missed.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::cli::{StatusArgs, job_store_address, view};
use crate::exit::{self, Error, Finished};
use crate::guard::ledger::{Outcome, Resolution, Run, format_usec};
use crate::joblist::config::{self, ConfigSource};
use crate::joblist::job::Job;
use crate::ops::audit::{self, Finding, FindingKind};
use crate::store::Store;
use crate::systemd::dbus::{self, JobUnits, UnitState};

/// How many recent records per job `status` looks at (the last run, the one running);
/// older slots are read only where an attempt failed or was cut off.
const RECENT: usize = 200;

struct JobStatus {
    json: Value,
    /// The row of the narrow table ([`NARROW`]).
    row: Vec<String>,
    /// The row of `--wide` ([`WIDE`]).
    wide: Vec<String>,
    attention: Vec<Run>,
    /// Missed slots and running records whose holder is gone, for the attention list.
    findings: Vec<Finding>,
    /// The timer is not waiting (systemd was read, the timer is not masked).
    timer_idle: bool,
    /// [`audit::job_needs_attention`], or records of another installation with this
    /// machine id.
    needs_attention: bool,
    /// Records of another installation with this machine id
    /// ([`crate::guard::identity::Installation::twin`]).
    twins: Vec<Run>,
}

/// Whether systemd's view says the job's timer will not fire: not loaded (not found, bad
/// setting), inactive or failed, or active without a next elapse and not waiting for the
/// service it started ([`crate::systemd::dbus::timer_waits_for_its_service`]). A masked
/// timer was stopped on purpose and does not count. `None` when systemd was not read.
pub fn timer_idle(units: Option<&JobUnits>) -> Option<bool> {
    let u = units?;
    let t = &u.timer;
    if t.unit.load_state == "masked" {
        return Some(false);
    }
    Some(
        !(t.unit.load_state == "loaded"
            && t.unit.active_state == "active"
            && (t.next_elapse_usec.is_some() || waits_for_service(u))),
    )
}

/// Whether the job's timer has no next elapse because its service runs.
fn waits_for_service(u: &JobUnits) -> bool {
    u.timer.next_elapse_usec.is_none()
        && crate::systemd::dbus::timer_waits_for_its_service(
            &u.timer.unit.sub_state,
            &u.service.active_state,
        )
}

/// The job's next elapse after `now_usec` by jobguard's calendar engine (systemd.time(7)),
/// µs since the epoch; `None` when its schedule has none left.
fn calendar_next(job: &Job, now_usec: i64) -> Option<i64> {
    jiff::Timestamp::from_microsecond(now_usec)
        .ok()
        .and_then(|t| job.calendar.next_elapse(t))
        .map(|t| t.as_microsecond())
}

/// A time from systemd (µs since the epoch) as JSON: the µs and RFC 3339.
fn usec_json(usec: Option<u64>) -> (Value, Value) {
    match usec.and_then(|u| i64::try_from(u).ok()) {
        Some(u) => (json!(u), json!(format_usec(u))),
        None => (Value::Null, Value::Null),
    }
}

fn unit_json(u: &UnitState) -> Value {
    json!({
        "unit": u.name,
        "load_state": u.load_state,
        "active_state": u.active_state,
        "sub_state": u.sub_state,
    })
}

/// systemd's view of a job's units as JSON.
fn systemd_json(units: &JobUnits) -> Value {
    let (next_us, next) = usec_json(units.timer.next_elapse_usec);
    let (last_us, last) = usec_json(units.timer.last_trigger_usec);
    let mut timer = unit_json(&units.timer.unit);
    if let Value::Object(m) = &mut timer {
        m.insert("next_elapse_usec".into(), next_us);
        m.insert("next_elapse".into(), next);
        m.insert("last_trigger_usec".into(), last_us);
        m.insert("last_trigger".into(), last);
    }
    json!({ "timer": timer, "service": unit_json(&units.service) })
}

/// The columns of the default table, which fits 100 columns for jobs of names and
/// schedules up to 16 characters: times in UTC without the year, a few words of state,
/// no hosts and no DURATION (`--wide` has them).
const NARROW: [&str; 6] = ["JOB", "SCHEDULE", "NEXT", "STATE", "LAST", "ATTENTION"];

/// The columns of `status --wide`: full times, the last run's host, systemd's view of
/// both units, a running run's holder.
const WIDE: [&str; 8] = [
    "JOB",
    "SCHEDULE",
    "NEXT",
    "STATE",
    "LAST",
    "DURATION",
    "RUNNING",
    "ATTENTION",
];

/// A `--wide` row as a narrow one, for the rows that have no more to say than `?`: the
/// DURATION and RUNNING columns left out.
fn narrow_of(mut wide: Vec<String>) -> Vec<String> {
    wide.drain(5..7);
    wide
}

/// The STATE column of the narrow table, in a few words: `running 12m` while a run of
/// the job runs (on any host; `holder gone` when its holder is), else the timer's state
/// when systemd was read: `waiting`, `not waiting` (active without a next elapse and not
/// running its service), `timer STATE` when it is not active, or its load state
/// (`not-found`, `bad-setting`, `masked`); `?` without systemd. A paused job's is
/// `paused`, `paused, running` or `paused, holder gone`. (A job whose store cannot be
/// read is `store unreadable`, a refused one `refused`.)
fn short_state(
    job: &Job,
    units: Option<&JobUnits>,
    running: Option<&Run>,
    orphan: bool,
    now_usec: i64,
) -> String {
    let state = match (running, units) {
        (Some(_), _) if orphan => "holder gone".to_string(),
        (Some(r), _) => format!("running {}", view::short_span(now_usec - r.started_at)),
        (None, None) => "?".to_string(),
        (None, Some(u)) => {
            let t = &u.timer;
            if t.unit.load_state != "loaded" {
                t.unit.load_state.clone()
            } else if t.unit.active_state != "active" {
                format!("timer {}", t.unit.active_state)
            } else if waits_for_service(u) {
                "running".to_string()
            } else if t.next_elapse_usec.is_none() {
                "not waiting".to_string()
            } else {
                "waiting".to_string()
            }
        }
    };
    if job.enabled {
        state
    } else if state.starts_with("running") {
        "paused, running".to_string()
    } else if state == "holder gone" {
        "paused, holder gone".to_string()
    } else {
        "paused".to_string()
    }
}

/// The STATE column: the service's state as systemd has it, and whether the timer waits.
fn state_text(units: Option<&JobUnits>) -> String {
    let Some(u) = units else {
        return "?".into();
    };
    let timer = match u.timer.unit.load_state.as_str() {
        "loaded" if u.timer.unit.active_state == "active" && waits_for_service(u) => {
            "running its service".to_string()
        }
        "loaded" if u.timer.unit.active_state == "active" && u.timer.next_elapse_usec.is_none() => {
            "active, not waiting".to_string()
        }
        "loaded" => u.timer.unit.active_state.clone(),
        other => other.to_string(),
    };
    format!(
        "{}/{} (timer {timer})",
        u.service.active_state, u.service.sub_state
    )
}

fn job_status(
    store: &mut dyn Store,
    job: &Job,
    now_usec: i64,
    units: Option<&JobUnits>,
) -> Result<JobStatus, crate::store::StoreError> {
    let (recent, read_back_to) = crate::ops::audit::judged_records(store, job, RECENT)?;
    // The store's clock judges a lease; a job with none (released, the usual state between
    // runs) costs no second round trip.
    let live_lease = match store.lease(&job.name)? {
        Some(lease) => {
            let store_now = store.now()?;
            (lease.expire_at > store_now).then_some(lease)
        }
        None => None,
    };
    // Paused across the fleet (crate::ops::pause): its slots until the window's end are
    // skipped on every host; none of them is missed.
    let pauses = crate::ops::pause::of_job(store, job)?;
    let fleet_pause = pauses.covering(now_usec).cloned();
    // systemd's next elapse when it could be read (it is what will fire), else our own
    // (also while the timer waits for its service, when systemd has none); none for a
    // paused job. Paused across the fleet: the first elapse after the window, the next
    // slot that runs (none while the window waits for `resume`).
    let next = match units {
        _ if !job.enabled => None,
        Some(u) if waits_for_service(u) => calendar_next(job, now_usec),
        Some(u) => u.timer.next_elapse_usec.and_then(|n| i64::try_from(n).ok()),
        None => calendar_next(job, now_usec),
    };
    let next = match &fleet_pause {
        Some(w) => w
            .until
            .and_then(|u| calendar_next(job, u - 1))
            .filter(|_| next.is_some()),
        None => next,
    };
    let last = recent
        .iter()
        .filter(|r| r.outcome != Outcome::Running)
        .max_by_key(|r| (r.slot.usec, r.started_at));
    let running = recent.iter().find(|r| r.outcome == Outcome::Running);
    let orphans = crate::ops::recover::orphans(store, &recent)?;
    let mut scope = audit::recent_scope(
        job,
        now_usec,
        crate::guard::identity::boot_time_usec(),
        read_back_to,
    );
    scope.paused = pauses.spans();
    // A paused job expects no slot: none of its slots is missed.
    let calendar = job.enabled.then_some(&job.calendar);
    let mut all = audit::status_findings(&recent, calendar, &orphans, &scope);
    crate::ops::audit::confirm_missed(store, &job.name, &mut all)?;
    // Held, failed and queued slots are shown as their latest attempt.
    let mut attention: Vec<Run> = all
        .iter()
        .filter(|f| {
            matches!(
                f.kind,
                FindingKind::Held | FindingKind::Failed | FindingKind::Queued
            )
        })
        .filter_map(|f| recent.iter().find(|r| f.runs.first() == Some(&r.run_id)))
        .cloned()
        .collect();
    attention.sort_by_key(|r| std::cmp::Reverse(r.started_at));
    let findings: Vec<Finding> = all
        .iter()
        .filter(|f| matches!(f.kind, FindingKind::Missed | FindingKind::OrphanRunning))
        .cloned()
        .collect();
    let missed: Vec<&Finding> = findings
        .iter()
        .filter(|f| f.kind == FindingKind::Missed)
        .collect();
    let orphaned: Vec<&Run> = recent
        .iter()
        .filter(|r| orphans.contains(&r.run_id))
        .collect();
    // A schedule with no elapse left leaves its timer idle on purpose.
    let has_next = calendar_next(job, now_usec).is_some();
    let waiting = timer_idle(units).map(|i| !(i && has_next));
    // A paused job's timer is not meant to wait: not something to attend to.
    let idle = timer_idle(units).map(|i| i && has_next && job.enabled);
    let twins: Vec<Run> = crate::guard::identity::Installation::here()
        .twins(&recent)
        .into_iter()
        .cloned()
        .collect();
    let needs_attention = audit::job_needs_attention(&all, idle) || !twins.is_empty();
    let json = json!({
        "job": job.name,
        "schedule": job.schedule,
        "store": store.describe(),
        "next_elapse": next.map(format_usec),
        "next_elapse_usec": next,
        "last": last.map(view::run_json),
        "running": running.map(view::run_json),
        "lease": live_lease.as_ref().map(view::lease_json),
        "attention": attention.iter().map(view::run_json).collect::<Vec<_>>(),
        "missed": missed.iter().map(|f| f.json()).collect::<Vec<_>>(),
        "orphans": orphaned.iter().map(|r| view::run_json(r)).collect::<Vec<_>>(),
        "timer_waiting": waiting,
        "paused": !job.enabled,
        "fleet_pause": fleet_pause.as_ref().map(|w| json!({
            "since": format_usec(w.since),
            "since_usec": w.since,
            "until": w.until.map(format_usec),
            "until_usec": w.until,
            "by": w.by,
            "reason": w.reason,
        })),
        "needs_attention": needs_attention,
        "machine_id_shared": twins.iter().map(view::run_json).collect::<Vec<_>>(),
        "systemd": units.map(systemd_json),
    });
    let last_text = last
        .map(|r| format!("{} {} on {}", r.slot.rfc3339(), r.outcome, r.host))
        .unwrap_or_else(|| "never ran".into());
    let running_text = running
        .map(|r| {
            format!(
                "since {} on {} ({})",
                format_usec(r.started_at),
                r.host,
                crate::guard::ledger::format_span(now_usec - r.started_at)
            )
        })
        .unwrap_or_else(|| "-".into());
    let attention_count =
        (attention.len() + findings.len() + usize::from(idle == Some(true)) + twins.len())
            .to_string();
    let wide = vec![
        job.name.clone(),
        job.schedule.clone(),
        next.map(format_usec).unwrap_or_else(|| "-".into()),
        fleet_paused_text(
            fleet_pause.as_ref(),
            paused_text(job, state_text(units)),
            None,
        ),
        last_text,
        last.and_then(view::duration_usec)
            .map_or_else(|| "-".into(), crate::guard::ledger::format_span),
        running_text,
        attention_count.clone(),
    ];
    let row = vec![
        job.name.clone(),
        job.schedule.clone(),
        next.map_or_else(|| "-".into(), |n| view::short_time(n, now_usec)),
        fleet_paused_text(
            fleet_pause.as_ref(),
            short_state(
                job,
                units,
                running,
                running.is_some_and(|r| orphans.contains(&r.run_id)),
                now_usec,
            ),
            Some(now_usec),
        ),
        last.map_or_else(
            || "never ran".into(),
            |r| format!("{} {}", view::short_time(r.slot.usec, now_usec), r.outcome),
        ),
        attention_count,
    ];
    Ok(JobStatus {
        json,
        row,
        wide,
        attention,
        findings,
        timer_idle: idle == Some(true),
        needs_attention,
        twins,
    })
}

/// The STATE column of a job paused across the fleet (`jobguard pause`, `window`):
/// `paused until TIME` (short with `short_now`, the narrow table's now; else with who and
/// why), `paused` while it waits for `resume`, and `paused, STATE` while a run goes on.
fn fleet_paused_text(
    window: Option<&crate::ops::pause::Window>,
    state: String,
    short_now: Option<i64>,
) -> String {
    let Some(w) = window else {
        return state;
    };
    if state.starts_with("running") || state.starts_with("holder gone") {
        return format!("paused, {state}");
    }
    let until = w.until.map_or(String::new(), |u| match short_now {
        Some(now) => format!(" until {}", view::short_time(u, now)),
        None => format!(" until {}", format_usec(u)),
    });
    match short_now {
        Some(_) => format!("paused{until}"),
        None => format!("paused{until} by {}; {state}", w.by),
    }
}

/// The STATE column of a paused job (`enabled = false`) starts with `paused`.
fn paused_text(job: &Job, state: String) -> String {
    if job.enabled {
        state
    } else {
        format!("paused; {state}")
    }
}

/// The table rows (narrow, wide) of a job whose store could not be read: the job is
/// still listed.
fn unreadable_rows(job: &Job, now_usec: i64) -> (Vec<String>, Vec<String>) {
    let next = calendar_next(job, now_usec);
    let wide = unreadable_row(job, next.map(format_usec));
    let mut narrow = narrow_of(wide.clone());
    narrow[2] = next.map_or_else(|| "-".into(), |n| view::short_time(n, now_usec));
    narrow[3] = if job.enabled {
        "store unreadable"
    } else {
        "paused, store unreadable"
    }
    .into();
    (narrow, wide)
}

fn unreadable_row(job: &Job, next: Option<String>) -> Vec<String> {
    vec![
        job.name.clone(),
        job.schedule.clone(),
        next.unwrap_or_else(|| "-".into()),
        paused_text(job, "? (store unreadable)".into()),
        "?".into(),
        "?".into(),
        "?".into(),
        "?".into(),
    ]
}

/// The records in `store` of jobs no longer in the job list (nor left out of it by an
/// error, `refused`) whose slot is held for a person. (A removed job's queued slot is
/// held by `jobguard recover`, [`crate::ops::recover::recover_removed`], since no timer is
/// left to run it.) A drill's probe is not a job.
///
/// # Errors
/// The store's.
fn removed_waiting(
    store: &mut dyn Store,
    set: &config::JobSet,
    refused: &[String],
) -> Result<Vec<Run>, crate::store::StoreError> {
    let runs = store.runs(&crate::store::RunQuery {
        resolutions: vec![Resolution::Held],
        ..crate::store::RunQuery::default()
    })?;
    Ok(runs
        .into_iter()
        .filter(|r| {
            !set.jobs.contains_key(&r.job)
                && !refused.contains(&r.job)
                && !crate::joblist::job::is_drill_probe_name(&r.job)
        })
        .collect())
}

/// The row of a job left out by an error in the job list (printed below the table).
fn refused_row(name: &str) -> Vec<String> {
    vec![
        name.to_string(),
        "?".into(),
        "-".into(),
        "refused: no timer (see below)".into(),
        "?".into(),
        "?".into(),
        "?".into(),
        "1".into(),
    ]
}

/// The narrow row of a refused job: why is below the table.
fn refused_narrow(name: &str) -> Vec<String> {
    let mut row = narrow_of(refused_row(name));
    row[3] = "refused".into();
    row
}

/// The JSON of a job whose store could not be read: listed as in the table, with what
/// went wrong in `error` and nothing from the ledger.
fn unreadable_json(job: &Job, now_usec: i64, units: Option<&JobUnits>, error: &str) -> Value {
    let next = calendar_next(job, now_usec);
    json!({
        "job": job.name,
        "schedule": job.schedule,
        "store": Value::Null,
        "next_elapse": next.map(format_usec),
        "next_elapse_usec": next,
        "last": Value::Null,
        "running": Value::Null,
        "lease": Value::Null,
        "attention": [],
        "systemd": units.map(systemd_json),
        "paused": !job.enabled,
        "error": error,
    })
}

/// Runs `jobguard status`: ends with 0, [`exit::ATTENTION`] when something needs
/// attention, or the worst status of a store or job list that could not be read
/// ([`exit::CONFIG`] for a job list with any error: a job it left out is listed as
/// refused). The problems are printed after the table; with `--json` they are in its
/// `problems` and `config_errors` instead.
///
/// # Errors
/// None of its own (`--fleet`'s: [`crate::cli::fleet::run`]).
pub fn run(args: &StatusArgs) -> exit::Result {
    if args.fleet {
        return crate::cli::fleet::run(args);
    }
    let set = config::load(&ConfigSource::resolve(args.config.config.clone()));
    let now = jiff::Timestamp::now().as_microsecond();
    let mut stores: BTreeMap<String, Result<Box<dyn Store>, crate::store::StoreError>> =
        BTreeMap::new();
    let mut jobs_json = Vec::new();
    let mut rows = Vec::new();
    let mut attention_all = Vec::new();
    let mut findings_all: Vec<(String, Finding)> = Vec::new();
    let mut idle_timers: Vec<String> = Vec::new();
    let mut twins: Vec<Run> = Vec::new();
    let mut any_attention = false;
    let mut problems: Vec<Error> = Vec::new();
    let names: Vec<&str> = set.jobs.values().map(|j| j.name.as_str()).collect();
    let (systemd, systemd_note) = read_systemd(&names);
    for (i, job) in set.jobs.values().enumerate() {
        let units = systemd.as_ref().and_then(|v| v.get(i));
        let address = match job_store_address(job) {
            Ok(a) => a,
            Err(e) => {
                rows.push(unreadable_rows(job, now));
                jobs_json.push(unreadable_json(job, now, units, &e.to_string()));
                problems.push(e);
                continue;
            }
        };
        let store = stores
            .entry(address.clone())
            .or_insert_with(|| crate::store::open(&address).and_then(|mut s| s.init().map(|()| s)));
        let store = match store {
            Ok(s) => s,
            Err(e) => {
                let e = Error::from(e.clone()).context(format!(
                    "store {} could not be opened",
                    crate::store::address::mask(&address)
                ));
                rows.push(unreadable_rows(job, now));
                jobs_json.push(unreadable_json(job, now, units, &e.to_string()));
                problems.push(e.context(&job.name));
                continue;
            }
        };
        match job_status(store.as_mut(), job, now, units) {
            Ok(s) => {
                jobs_json.push(s.json);
                rows.push((s.row, s.wide));
                attention_all.extend(s.attention);
                any_attention |= s.needs_attention;
                findings_all.extend(s.findings.into_iter().map(|f| (job.name.clone(), f)));
                if s.timer_idle {
                    idle_timers.push(job.name.clone());
                }
                twins.extend(s.twins);
            }
            Err(e) => {
                rows.push(unreadable_rows(job, now));
                jobs_json.push(unreadable_json(job, now, units, &e.to_string()));
                problems.push(Error::from(e).context(&job.name));
            }
        }
    }
    // Jobs no longer in the job list, in the stores it names: their held slots wait for
    // a person (`audit` reads the rest of their ledgers).
    let refused = set.refused_jobs();
    for store in stores.values_mut() {
        let Ok(store) = store else { continue };
        match removed_waiting(store.as_mut(), &set, &refused) {
            Ok(runs) => {
                any_attention |= !runs.is_empty();
                attention_all.extend(runs);
            }
            Err(e) => problems.push(Error::from(e).context(store.describe())),
        }
    }
    // A job whose schedule is live in a store but that no live host arms any more.
    let mut unarmed: Vec<(String, String)> = Vec::new();
    for store in stores.values_mut() {
        let Ok(store) = store else { continue };
        match crate::ops::fleet::unarmed_jobs(store.as_mut()) {
            Ok(jobs) => {
                any_attention |= !jobs.is_empty();
                unarmed.extend(jobs.into_iter().map(|j| (j, store.describe())));
            }
            Err(e) => {
                problems.push(Error::from(e).context(format!("{}: fleet", store.describe())));
            }
        }
    }
    // A job left out by an error in its definition has no timer: listed, never silent.
    for name in refused {
        let why: Vec<String> = set
            .errors
            .iter()
            .filter(|e| e.job.as_ref() == Some(&name))
            .map(|e| e.to_string())
            .collect();
        rows.push((refused_narrow(&name), refused_row(&name)));
        jobs_json.push(json!({
            "job": name,
            "refused": why.join("; "),
            "needs_attention": true,
        }));
    }
    // A job list with errors is a job list not read whole: its status, as a store's.
    let errors: Vec<Error> = set.errors.iter().cloned().map(Error::from).collect();
    let mut finished = Finished::OK;
    if any_attention {
        finished.add(exit::ATTENTION);
    }
    if args.json {
        for e in errors.iter().chain(&problems) {
            finished.add(e.status());
        }
        let out = json!({
            "jobs": jobs_json,
            "attention": attention_all.iter().map(view::run_json).collect::<Vec<_>>(),
            "config_errors": errors.iter().map(Error::to_string).collect::<Vec<_>>(),
            "problems": problems.iter().map(Error::to_string).collect::<Vec<_>>(),
            "unarmed": unarmed
                .iter()
                .map(|(job, store)| json!({ "job": job, "store": store }))
                .collect::<Vec<_>>(),
            "systemd": {
                "read": systemd.is_some(),
                "note": systemd_note,
            },
        });
        println!("{out}");
        return Ok(finished);
    }
    if rows.is_empty() {
        println!("no jobs in the job list");
    } else {
        print!(
            "{}",
            if args.wide {
                view::table(&WIDE, &rows.into_iter().map(|(_, w)| w).collect::<Vec<_>>())
            } else {
                view::table(
                    &NARROW,
                    &rows.into_iter().map(|(n, _)| n).collect::<Vec<_>>(),
                )
            }
        );
    }
    if !attention_all.is_empty()
        || !findings_all.is_empty()
        || !idle_timers.is_empty()
        || !twins.is_empty()
        || !unarmed.is_empty()
    {
        println!("\nneeds attention:");
    }
    for (job, store) in &unarmed {
        println!(
            "  {job}: its schedule is live in {store}, but no live host arms it any more\n    \
             jobguard status --fleet"
        );
    }
    for r in &twins {
        println!(
            "  {} slot {}: another machine has this machine id {}: host {} (boot {}) ran it at {}, under a boot this installation never had; {}",
            r.job,
            r.slot.rfc3339(),
            r.machine_id,
            r.host,
            r.boot_id,
            format_usec(r.started_at),
            crate::guard::identity::SHARED_MACHINE_ID_FIX
        );
    }
    for job in &idle_timers {
        println!(
            "  {job}: timer jobguard@{job}.timer is not waiting for a next elapse\n    \
             `jobguard recover` re-arms it, or `systemctl restart jobguard@{job}.timer`"
        );
    }
    print_findings(&findings_all);
    if !attention_all.is_empty() {
        for r in &attention_all {
            let next = match r.resolution {
                Some(Resolution::Queued) => "re-run queued".to_string(),
                Some(Resolution::Held) => format!(
                    "held: jobguard resolve {} {} --rerun|--done",
                    r.job,
                    r.slot.rfc3339()
                ),
                _ => format!(
                    "jobguard resolve {} {} --rerun|--done",
                    r.job,
                    r.slot.rfc3339()
                ),
            };
            println!(
                "  {} slot {}: {} ({}) on {} at {}\n    {next}",
                r.job,
                r.slot.rfc3339(),
                r.outcome,
                r.reason.as_deref().unwrap_or("-"),
                r.host,
                view::short_time(r.finished_at.unwrap_or(r.started_at), now)
            );
        }
    }
    for e in errors.iter().chain(&problems) {
        finished.report(e);
    }
    if let Some(note) = systemd_note {
        eprintln!("jobguard: note: {note}");
    }
    Ok(finished)
}

/// Prints missed slots (a run of consecutive ones per job as one line) and running
/// records whose holder is gone.
fn print_findings(findings: &[(String, Finding)]) {
    let mut missed: BTreeMap<&str, Vec<i64>> = BTreeMap::new();
    for (job, f) in findings {
        match f.kind {
            FindingKind::Missed => missed.entry(job).or_default().push(f.slot),
            _ => println!("  {job} slot {}: {}", format_usec(f.slot), f.detail),
        }
    }
    for (job, slots) in missed {
        let (Some(first), Some(last)) = (slots.first(), slots.last()) else {
            continue;
        };
        if slots.len() == 1 {
            println!(
                "  {job} slot {}: missed: elapsed with no record",
                format_usec(*first)
            );
        } else {
            println!(
                "  {job}: {} slots missed: elapsed with no record\n    from {} to {}",
                slots.len(),
                format_usec(*first),
                format_usec(*last)
            );
        }
    }
}

/// systemd's view of the jobs' units, or why it could not be read (the note says what
/// is missing from the output).
fn read_systemd(names: &[&str]) -> (Option<Vec<JobUnits>>, Option<String>) {
    if names.is_empty() {
        return (None, None);
    }
    // sd_booted(3): systemd is the service manager when this directory exists.
    if !std::path::Path::new("/run/systemd/system").is_dir() {
        return (
            None,
            Some(
                "systemd is not running here: timers and unit states not read; NEXT is computed by jobguard"
                    .into(),
            ),
        );
    }
    match dbus::read_jobs(names) {
        Ok(v) => (Some(v), None),
        Err(e) => (
            None,
            Some(format!(
                "{e}: timers and unit states not read; NEXT is computed by jobguard"
            )),
        ),
    }
}

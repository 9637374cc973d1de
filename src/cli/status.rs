//! `jobguard status [--json]`: every job with its schedule, next elapse, last slot and
//! outcome, a running run's holder, and the runs that need attention.
//!
//! What systemd knows is joined in when it can be read ([`crate::systemd_dbus`]): each
//! timer's next elapse (`NextElapseUSecRealtime`, which then is the NEXT column) and last
//! trigger (`LastTriggerUSec`), and the service's `ActiveState`/`SubState`. Without
//! systemd (a container without it, a plain shell) the ledger part is still shown, with a
//! note of what could not be read; NEXT then comes from jobguard's own calendar engine.
//!
//! A run needs attention when its slot is not done and its latest attempt ended
//! `failed`, `interrupted` or `lease_lost` (with what happens next: a queued re-run, or
//! held for `jobguard resolve`).

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::cli::{StatusArgs, job_store_address, view};
use crate::config::{self, ConfigSource};
use crate::exit;
use crate::job::Job;
use crate::ledger::{Outcome, Resolution, Run, format_usec};
use crate::store::{RunQuery, Store};
use crate::systemd_dbus::{self, JobUnits, UnitState};

/// How many recent records per job `status` looks at.
const RECENT: usize = 200;

/// The runs among `recent` (newest first) that need attention: per slot that is not
/// done, its latest attempt if that ended failed, interrupted or lease_lost.
pub fn attention(recent: &[Run]) -> Vec<Run> {
    let mut by_slot: BTreeMap<i64, Vec<&Run>> = BTreeMap::new();
    for r in recent {
        by_slot.entry(r.slot.usec).or_default().push(r);
    }
    let mut out = Vec::new();
    for runs in by_slot.values() {
        let done = runs
            .iter()
            .any(|r| r.outcome == Outcome::Succeeded || r.resolution == Some(Resolution::Done));
        if done {
            continue;
        }
        // `recent` is newest first, so the first of the slot is its latest attempt.
        if let Some(latest) = runs.first()
            && matches!(
                latest.outcome,
                Outcome::Failed | Outcome::Interrupted | Outcome::LeaseLost
            )
        {
            out.push((*latest).clone());
        }
    }
    out.sort_by_key(|r| std::cmp::Reverse(r.started_at));
    out
}

struct JobStatus {
    json: Value,
    row: Vec<String>,
    attention: Vec<Run>,
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

/// The STATE column: the service's state as systemd has it, and whether the timer waits.
fn state_text(units: Option<&JobUnits>) -> String {
    let Some(u) = units else {
        return "?".into();
    };
    let timer = match u.timer.unit.load_state.as_str() {
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
) -> Result<JobStatus, String> {
    let recent = store
        .runs(&RunQuery {
            job: Some(job.name.clone()),
            limit: RECENT,
            ..RunQuery::default()
        })
        .map_err(|e| e.to_string())?;
    let lease = store.lease(&job.name).map_err(|e| e.to_string())?;
    let store_now = store.now().map_err(|e| e.to_string())?;
    let live_lease = lease.filter(|l| l.expire_at > store_now);
    // systemd's next elapse when it could be read (it is what will fire), else our own.
    let next = match units {
        Some(u) => u.timer.next_elapse_usec.and_then(|n| i64::try_from(n).ok()),
        None => jiff::Timestamp::from_microsecond(now_usec)
            .ok()
            .and_then(|t| job.calendar.next_elapse(t))
            .map(|t| t.as_microsecond()),
    };
    let last = recent
        .iter()
        .filter(|r| r.outcome != Outcome::Running)
        .max_by_key(|r| (r.slot.usec, r.started_at));
    let running = recent.iter().find(|r| r.outcome == Outcome::Running);
    let attention = attention(&recent);
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
                view::span(now_usec - r.started_at)
            )
        })
        .unwrap_or_else(|| "-".into());
    let row = vec![
        job.name.clone(),
        job.schedule.clone(),
        next.map(format_usec).unwrap_or_else(|| "-".into()),
        state_text(units),
        last_text,
        running_text,
        attention.len().to_string(),
    ];
    Ok(JobStatus {
        json,
        row,
        attention,
    })
}

/// The table row of a job whose store could not be read: the job is still listed.
fn unreadable_row(job: &Job, now_usec: i64) -> Vec<String> {
    let next = jiff::Timestamp::from_microsecond(now_usec)
        .ok()
        .and_then(|t| job.calendar.next_elapse(t))
        .map(|t| format_usec(t.as_microsecond()));
    vec![
        job.name.clone(),
        job.schedule.clone(),
        next.unwrap_or_else(|| "-".into()),
        "? (store unreadable)".into(),
        "?".into(),
        "?".into(),
    ]
}

/// The JSON of a job whose store could not be read: listed as in the table, with what
/// went wrong in `error` and nothing from the ledger.
fn unreadable_json(job: &Job, now_usec: i64, units: Option<&JobUnits>, error: &str) -> Value {
    let next = jiff::Timestamp::from_microsecond(now_usec)
        .ok()
        .and_then(|t| job.calendar.next_elapse(t))
        .map(|t| t.as_microsecond());
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
        "error": error,
    })
}

/// Runs `jobguard status`; returns the exit status (non-zero if a store could not be read).
pub fn run(args: &StatusArgs) -> u8 {
    let set = config::load(&ConfigSource::resolve(args.config.config.clone()));
    let now = jiff::Timestamp::now().as_microsecond();
    let mut status = exit::OK;
    let mut stores: BTreeMap<String, Result<Box<dyn Store>, String>> = BTreeMap::new();
    let mut jobs_json = Vec::new();
    let mut rows = Vec::new();
    let mut attention_all = Vec::new();
    let mut problems = Vec::new();
    let names: Vec<&str> = set.jobs.values().map(|j| j.name.as_str()).collect();
    let (systemd, systemd_note) = read_systemd(&names);
    for (i, job) in set.jobs.values().enumerate() {
        let units = systemd.as_ref().and_then(|v| v.get(i));
        let Ok(address) = job_store_address(job) else {
            let e = "the store address could not be read";
            problems.push(format!("{}: {e}", job.name));
            status = exit::CONFIG;
            rows.push(unreadable_row(job, now));
            jobs_json.push(unreadable_json(job, now, units, e));
            continue;
        };
        let store = stores.entry(address.clone()).or_insert_with(|| {
            crate::store::open(&address)
                .and_then(|mut s| s.init().map(|()| s))
                .map_err(|e| e.to_string())
        });
        let store = match store {
            Ok(s) => s,
            Err(e) => {
                let e = format!(
                    "store {} could not be opened: {e}",
                    crate::store::address::mask(&address)
                );
                problems.push(format!("{}: {e}", job.name));
                status = exit::STORE_UNAVAILABLE;
                rows.push(unreadable_row(job, now));
                jobs_json.push(unreadable_json(job, now, units, &e));
                continue;
            }
        };
        match job_status(store.as_mut(), job, now, units) {
            Ok(s) => {
                jobs_json.push(s.json);
                rows.push(s.row);
                attention_all.extend(s.attention);
            }
            Err(e) => {
                problems.push(format!("{}: {e}", job.name));
                status = exit::STORE_UNAVAILABLE;
                rows.push(unreadable_row(job, now));
                jobs_json.push(unreadable_json(job, now, units, &e));
            }
        }
    }
    let errors: Vec<String> = set.errors.iter().map(|e| e.to_string()).collect();
    if args.json {
        let out = json!({
            "jobs": jobs_json,
            "attention": attention_all.iter().map(view::run_json).collect::<Vec<_>>(),
            "config_errors": errors,
            "problems": problems,
            "systemd": {
                "read": systemd.is_some(),
                "note": systemd_note,
            },
        });
        println!("{out}");
        return status;
    }
    if rows.is_empty() {
        println!("no jobs in the job list");
    } else {
        print!(
            "{}",
            view::table(
                &[
                    "JOB",
                    "SCHEDULE",
                    "NEXT",
                    "STATE",
                    "LAST",
                    "RUNNING",
                    "ATTENTION"
                ],
                &rows
            )
        );
    }
    if !attention_all.is_empty() {
        println!("\nneeds attention:");
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
                "  {} slot {}: {} ({}) on {} at {}; {next}",
                r.job,
                r.slot.rfc3339(),
                r.outcome,
                r.reason.as_deref().unwrap_or("-"),
                r.host,
                format_usec(r.finished_at.unwrap_or(r.started_at))
            );
        }
    }
    for e in errors.iter().chain(problems.iter()) {
        eprintln!("jobguard: {e}");
    }
    if let Some(note) = systemd_note {
        eprintln!("jobguard: note: {note}");
    }
    status
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
    match systemd_dbus::read_jobs(names) {
        Ok(v) => (Some(v), None),
        Err(e) => (
            None,
            Some(format!(
                "{e}: timers and unit states not read; NEXT is computed by jobguard"
            )),
        ),
    }
}

//! `jobguard audit [JOB] [--since TIME] [--until TIME] [--json]`: read ledgers and list
//! what [`crate::ops::audit`] finds, as a table or one JSON object.
//!
//! Without JOB, every job of every store the job list names is audited, one job at a time
//! ([`crate::store::Store::jobs`], then one read per job: each read has one call's
//! deadline, and memory holds one job's records): jobs removed from the job list are
//! audited too, without the slot checks (their schedule is no longer known). With JOB,
//! its records are read from its store, or, for a job no longer in the job list, from
//! every store of the list.
//! With `--since`, only the records of the slots from then on are read, with the few older
//! ones the check needs ([`crate::store::rules::window`]): a job's whole history is not.
//! The one thing a window cannot see is the schedule a job had before it: a gap at a
//! change back to an earlier schedule is judged as after a change. Only reads: nothing is
//! marked, started or ended.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::json;

use crate::cli::{AuditArgs, job_store_address, open_store, report_store_addresses, view};
use crate::exit::{self, Error, Finished};
use crate::guard::identity;
use crate::guard::ledger::format_usec;
use crate::joblist::config::{self, ConfigSource, JobSet};
use crate::joblist::job::Job;
use crate::ops::audit::{self, Finding, Scope};
use crate::ops::recover;
use crate::store::{RunQuery, Store, StoreError};

/// An open store ([`Store::describe`] with secrets masked, as the job list's address is
/// masked) and the jobs to audit in it.
struct Audited {
    store: Box<dyn Store>,
    describe: String,
    jobs: Vec<String>,
}

/// Runs `jobguard audit`: ends with [`exit::OK`] when nothing needs attention,
/// [`exit::ATTENTION`] when something does, or the worst status of the store and job
/// list errors reported on the way.
///
/// # Errors
/// 2 for a `--since` or `--until` that cannot be read; [`exit::CONFIG`] for a job that
/// neither the list nor any store knows.
pub fn run(args: &AuditArgs) -> exit::Result {
    let set = config::load(&ConfigSource::resolve(args.config.config.clone()));
    let now_ts = jiff::Timestamp::now();
    let now = now_ts.as_microsecond();
    let parse = |what: &str, t: &Option<String>| -> Result<Option<i64>, Error> {
        match t {
            None => Ok(None),
            Some(text) => crate::calendar::parse_timestamp(text, now_ts)
                .map(|t| Some(t.as_microsecond()))
                .map_err(|e| Error::new(exit::USAGE, format!("bad {what} {text:?}: {e}"))),
        }
    };
    let (since, until) = match (parse("--since", &args.since), parse("--until", &args.until)) {
        (Ok(s), Ok(u)) => (s, u.unwrap_or(now)),
        (Err(a), Err(b)) => {
            let lines = a.messages().iter().chain(b.messages()).cloned().collect();
            return Err(Error::lines(exit::USAGE, lines));
        }
        (Err(e), _) | (_, Err(e)) => return Err(e),
    };
    let mut finished = Finished::OK;
    let mut stores = open_stores(&set, args.job.as_deref(), &mut finished);
    let boot = identity::boot_time_usec();
    let mut jobs_json = Vec::new();
    let mut rows = Vec::new();
    let (mut total, mut attention) = (0usize, 0usize);
    // By job, then store.
    let mut ledgers: Vec<(String, String, usize)> = stores
        .iter()
        .enumerate()
        .flat_map(|(i, a)| {
            a.jobs
                .iter()
                .map(move |j| (j.clone(), a.describe.clone(), i))
        })
        .collect();
    ledgers.sort();
    // Stores that stopped answering: their other jobs are not tried, each for a call's
    // deadline, but counted in one message at the end.
    let mut lost: BTreeMap<usize, usize> = BTreeMap::new();
    for (name, describe, i) in ledgers {
        if let Some(n) = lost.get_mut(&i) {
            *n += 1;
            continue;
        }
        let store = &mut stores[i].store;
        let runs = match store.runs(&RunQuery {
            job: Some(name.clone()),
            slots_from: since,
            ..RunQuery::default()
        }) {
            Ok(r) => r,
            Err(e) => {
                if matches!(e, StoreError::Unavailable { .. }) {
                    lost.insert(i, 0);
                }
                finished.report(&Error::from(e).context(&name));
                continue;
            }
        };
        if runs.is_empty() {
            continue;
        }
        // The schedule applies only where the job list says the job's records live.
        let job = set.jobs.get(&name).filter(|j| {
            job_store_address(j)
                .ok()
                .map(|a| crate::store::address::mask(&a))
                == Some(describe.clone())
        });
        let orphans = match recover::orphans(store.as_mut(), &runs) {
            Ok(o) => o,
            Err(e) => {
                finished.report(&Error::from(e).context(&name));
                continue;
            }
        };
        // Elapses in the job's pause windows are paused, not missed (crate::ops::pause).
        let paused = match job.map(|j| crate::ops::pause::of_job(store.as_mut(), j)) {
            Some(Ok(p)) => p.spans(),
            Some(Err(e)) => {
                finished.report(&Error::from(e).context(&name));
                continue;
            }
            None => Vec::new(),
        };
        let scope = Scope {
            since,
            until,
            now,
            boot,
            grace: job.map_or(0, grace_usec),
            kept_since: job.and_then(|j| audit::retention_bound(j, now)),
            missed_after: None,
            paused,
        };
        // A paused job expects no slot: like a removed one, it is audited without the slot
        // checks (no slot is missed while it is paused).
        let calendar = job.filter(|j| j.enabled).map(|j| &j.calendar);
        let findings = audit::audit_job(&runs, calendar, &orphans, &scope);
        total += findings.len();
        attention += findings
            .iter()
            .filter(|f| audit::needs_attention(f))
            .count();
        for f in &findings {
            rows.push(row(&name, f));
        }
        jobs_json.push(json!({
            "job": name,
            "store": describe,
            "in_job_list": job.is_some(),
            "paused": job.is_some_and(|j| !j.enabled),
            "records": runs.len(),
            "findings": findings.iter().map(Finding::json).collect::<Vec<_>>(),
        }));
    }
    // A job whose schedule is live in a store but that no live host arms any more: no
    // host will run its next slot.
    let mut unarmed_json = Vec::new();
    for (i, s) in stores.iter_mut().enumerate() {
        if lost.contains_key(&i) {
            continue;
        }
        match crate::ops::fleet::unarmed_jobs(s.store.as_mut()) {
            Ok(jobs) => {
                for job in jobs
                    .into_iter()
                    .filter(|j| args.job.as_ref().is_none_or(|n| n == j))
                {
                    total += 1;
                    attention += 1;
                    rows.push(vec![
                        job.clone(),
                        "-".into(),
                        "unarmed".into(),
                        "-".into(),
                        format!(
                            "its schedule is live in {}, but no live host arms it any more (jobguard status --fleet)",
                            s.describe
                        ),
                    ]);
                    unarmed_json.push(json!({ "job": job, "store": s.describe }));
                }
            }
            Err(e) => finished.report(&Error::from(e).context(format!("{}: fleet", s.describe))),
        }
    }
    for (i, n) in lost.into_iter().filter(|(_, n)| *n > 0) {
        finished.report(&Error::new(
            exit::STORE_UNAVAILABLE,
            format!(
                "{}: {n} more job(s) not audited: the store stopped answering",
                stores[i].describe
            ),
        ));
    }
    if let Some(name) = &args.job
        && !set.jobs.contains_key(name)
        && jobs_json.is_empty()
        && finished == Finished::OK
    {
        return Err(Error::new(
            exit::CONFIG,
            format!("no job named {name:?} in the job list, and no store holds records of it"),
        ));
    }
    // A job the list left out runs no slot, and its records would look settled: the job
    // list's error is the audit's status, as in `status`.
    for e in &set.errors {
        finished.report(&e.clone().into());
    }
    if args.json {
        let out = json!({
            "since": since.map(format_usec),
            "until": format_usec(until),
            "jobs": jobs_json,
            "findings": total,
            "attention": attention,
            "unarmed": unarmed_json,
        });
        println!("{out}");
    } else {
        if !rows.is_empty() {
            print!(
                "{}",
                view::table(&["JOB", "SLOT", "KIND", "RUNS", "DETAIL"], &rows)
            );
        }
        println!(
            "{total} finding(s) in {} job(s), {attention} needing attention",
            jobs_json.len()
        );
    }
    if attention > 0 {
        finished.add(exit::ATTENTION);
    }
    Ok(finished)
}

/// The job's grace in µs.
fn grace_usec(job: &Job) -> i64 {
    i64::try_from(audit::grace(job).as_micros()).unwrap_or(i64::MAX)
}

fn row(job: &str, f: &Finding) -> Vec<String> {
    vec![
        job.to_string(),
        format_usec(f.slot),
        f.kind.as_str().to_string(),
        if f.runs.is_empty() {
            "-".into()
        } else {
            f.runs.join(",")
        },
        f.detail.clone(),
    ]
}

/// Opens the stores to audit, each once, with the jobs to audit in each: `only`, or every
/// job the store holds records of ([`Store::jobs`]). A store that could not be opened or
/// listed is left out and reported into `finished`. The records
/// themselves are read one job at a time by the caller: with `--since`, only the records a
/// check of the slots from then on needs ([`RunQuery::slots_from`]), not every job's whole
/// history.
fn open_stores(set: &JobSet, only: Option<&str>, finished: &mut Finished) -> Vec<Audited> {
    // The stores to read: the job's own, or (no job, or a job not in the list) all that
    // the list names, `[defaults]` included.
    let addresses = match only.and_then(|n| set.jobs.get(n)) {
        Some(j) => match job_store_address(j) {
            Ok(a) => BTreeSet::from([a]),
            Err(e) => {
                finished.report(&e);
                BTreeSet::new()
            }
        },
        None => report_store_addresses(set, finished),
    };
    let mut out = Vec::new();
    for address in addresses {
        let mut store = match open_store(&address) {
            Ok(s) => s,
            Err(e) => {
                finished.report(&e);
                continue;
            }
        };
        let jobs = match only {
            Some(name) => vec![name.to_string()],
            None => match store.jobs() {
                Ok(jobs) => jobs,
                Err(e) => {
                    finished.report(&e.into());
                    continue;
                }
            },
        };
        out.push(Audited {
            store,
            describe: crate::store::address::mask(&address),
            jobs,
        });
    }
    out
}

//! `jobguard mark NAMESPACE KEY` and `jobguard marked NAMESPACE KEY`: fenced dedupe
//! records in the job's store ([`crate::store::Store::mark`], [`crate::guard::mark`]).
//!
//! Inside a run, the job is the run's (`JOBGUARD_JOB`) and the mark is fenced by the
//! run's `JOBGUARD_FENCING_TOKEN`: once the lease has been taken over, released or has
//! expired, `mark` exits 75 and records nothing, so a run that lost its lease cannot
//! record "done" for a key that the holder that took over then skips. Outside a run,
//! `--job` names the job whose store holds the marks; such marks are not fenced.
//!
//! A namespace is the job's own unless `--shared` ([`crate::guard::mark`]); a key of a job's own
//! namespace is also found as a shared mark, which every mark recorded before per-job
//! namespaces is.

use crate::cli::{MarkArgs, find_job, open_job_store};
use crate::exit::{self, Error, Finished};
use crate::guard::ledger::format_usec;
use crate::store::{Mark, Marking};

/// Runs `jobguard mark`: ends with 0 for a new mark, 1 (the mark printed) for a key
/// marked before.
///
/// # Errors
/// 75 for a run whose lease is lost; 2 for a bad namespace, key or run variables; the
/// job list's or the store's.
pub fn mark(args: &MarkArgs) -> exit::Result {
    let (job, new, fenced, mut store) = request(args)?;
    // A shared mark of the key (every mark from before namespaces were a job's own) is
    // read before anything is written, so a failure leaves no mark behind; the fence is
    // judged first all the same (75 for a run whose lease is gone).
    let answer = match earlier(args, store.as_mut()) {
        Ok(Some(m)) if fenced => fence(store.as_mut(), &new).map(|lease| match lease {
            Ok(()) => Marking::Already(m),
            Err(lease) => Marking::Fenced(lease),
        }),
        Ok(Some(m)) => Ok(Marking::Already(m)),
        Ok(None) => store.mark(&new, fenced),
        Err(e) => Err(e),
    };
    match answer? {
        Marking::New(_) => Ok(Finished::OK),
        Marking::Already(m) => {
            println!("{}", describe(&m));
            Ok(Finished::with(exit::FAILURE))
        }
        Marking::Fenced(lease) => {
            let now = match lease {
                Some(l) if !l.holder.is_empty() && l.token != new.token => {
                    format!("it is held by host {} with token {}", l.host, l.token)
                }
                Some(l) if !l.holder.is_empty() => {
                    format!("it expired {}", format_usec(l.expire_at))
                }
                _ => "it was released".to_string(),
            };
            Err(Error::new(
                exit::LEASE_LOST,
                format!(
                    "{} {}: not marked: the run's lease of {} (token {}) is lost: {now}",
                    args.namespace, new.key, job.name, new.token
                ),
            ))
        }
    }
}

/// Runs `jobguard marked`: ends with 0 (the mark printed) for a marked key, 1 for one
/// not marked.
///
/// # Errors
/// As `mark`'s, but for the fence.
pub fn marked(args: &MarkArgs) -> exit::Result {
    let (_, new, _, mut store) = request(args)?;
    let found = store
        .read_mark(&new.namespace, &new.key)
        .and_then(|m| match m {
            Some(m) => Ok(Some(m)),
            None => earlier(args, store.as_mut()),
        });
    match found? {
        Some(m) => {
            println!("{}", describe(&m));
            Ok(Finished::OK)
        }
        None => Ok(Finished::with(exit::FAILURE)),
    }
}

/// Whether the fence of `new` holds now ([`crate::store::rules::mark_fence_holds`], by the
/// store's clock on the job's lease row); else the row as read.
fn fence(
    store: &mut dyn crate::store::Store,
    new: &Mark,
) -> Result<Result<(), Option<crate::guard::lease::Lease>>, crate::store::StoreError> {
    let now = store.now()?;
    let lease = store.lease(&new.job)?;
    Ok(
        if crate::store::rules::mark_fence_holds(now, lease.as_ref(), new, true) {
            Ok(())
        } else {
            Err(lease)
        },
    )
}

/// For a job's own namespace: the shared mark of the key, if any, whichever job recorded it.
/// Every mark from before namespaces were a job's own is a shared one, so a key handled
/// then is not handled again after an upgrade (nor after a job's rename). `None` with
/// `--shared`, which reads that mark itself.
fn earlier(
    args: &MarkArgs,
    store: &mut dyn crate::store::Store,
) -> Result<Option<Mark>, crate::store::StoreError> {
    if args.shared {
        return Ok(None);
    }
    store.read_mark(&args.namespace, &args.key)
}

/// A recorded mark, for people: `NAMESPACE KEY: marked by run RUN (token N) of JOB on
/// host HOST at TIME`, and `, in the namespace shared by the store's jobs` for a shared
/// one.
fn describe(m: &Mark) -> String {
    let by = if m.run_id.is_empty() {
        format!("outside a run, for {}", m.job)
    } else {
        format!("by run {} (token {}) of {}", m.run_id, m.token, m.job)
    };
    let (namespace, own) = crate::guard::mark::parse_stored_namespace(&m.namespace);
    format!(
        "{namespace} {}: marked {by} on host {} at {}{}",
        m.key,
        m.host,
        format_usec(m.marked_at),
        if own.is_some() {
            ""
        } else {
            ", in the namespace shared by the store's jobs"
        }
    )
}

/// The job, the mark to make, whether it is fenced (from the arguments and the run's
/// variables) and the job's store, opened.
///
/// # Errors
/// 2 for a bad namespace, key or run variables; the job list's or the store's.
fn request(
    args: &MarkArgs,
) -> Result<
    (
        crate::joblist::job::Job,
        Mark,
        bool,
        Box<dyn crate::store::Store>,
    ),
    Error,
> {
    crate::guard::mark::check_namespace(&args.namespace)
        .and_then(|()| crate::guard::mark::check_key(&args.key))
        .map_err(|e| Error::new(exit::USAGE, e))?;
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let run_job = var("JOBGUARD_JOB");
    let Some(name) = args.job.clone().or_else(|| run_job.clone()) else {
        return Err(Error::new(
            exit::USAGE,
            "which job's store? Give --job JOB (inside a run, JOBGUARD_JOB names it)",
        ));
    };
    // Fenced when inside a run; a mark in another job's store could not be fenced by this
    // run's lease, so inside a run only the run's own job is accepted.
    if let Some(run) = run_job.as_deref().filter(|run| *run != name) {
        return Err(Error::new(
            exit::USAGE,
            format!(
                "--job {name}: inside a run of {run} a mark is fenced by the run's lease, which cannot fence another job's marks; mark in {run}'s store, or unset JOBGUARD_JOB and JOBGUARD_FENCING_TOKEN to mark outside a run"
            ),
        ));
    }
    let in_run = run_job.is_some();
    let token = match (in_run, var("JOBGUARD_FENCING_TOKEN")) {
        (false, _) => 0,
        (true, Some(t)) => match t.parse::<i64>() {
            Ok(t) if t > 0 => t,
            _ => {
                return Err(Error::new(
                    exit::USAGE,
                    format!("JOBGUARD_FENCING_TOKEN={t:?} is not a fencing token"),
                ));
            }
        },
        (true, None) => {
            return Err(Error::new(
                exit::USAGE,
                format!(
                    "JOBGUARD_JOB={name} is set but JOBGUARD_FENCING_TOKEN is not: run the command under `jobguard run`, or unset JOBGUARD_JOB and give --job"
                ),
            ));
        }
    };
    let job = find_job(&args.config, &name)?;
    let holder = crate::guard::lease::Holder::current();
    let new = Mark {
        namespace: crate::guard::mark::stored_namespace(&job.name, &args.namespace, args.shared),
        key: args.key.clone(),
        job: job.name.clone(),
        run_id: if in_run {
            var("JOBGUARD_RUN_ID").unwrap_or_default()
        } else {
            String::new()
        },
        host: format!("{} {}", holder.host, holder.machine_id),
        token,
        marked_at: 0,
    };
    let store = open_job_store(&job)?;
    Ok((job, new, in_run, store))
}

//! `jobguard unlock JOB [--force]`: end the job's lease now. For a holder that is known
//! to be dead (a host that will not come back) when waiting for expiry is not wanted. Does
//! not touch the ledger: `jobguard recover` then marks its run interrupted.
//!
//! A holder that is alive on this host (same machine id and boot id, its pid still runs
//! the process that started at the recorded time: [`crate::guard::identity::process_alive`]) is
//! not dead: ending its lease would let another host start the slot while the run goes
//! on. Unlock refuses it (exit status 1, naming the process), unless `--force`, which
//! warns naming it; that run then loses its lease at its next renewal and stops its
//! command. A holder on another host cannot be checked from here.

use crate::cli::{UnlockArgs, find_job_and_store};
use crate::exit::{self, Error, Finished};
use crate::guard::identity;
use crate::guard::lease::Lease;
use crate::guard::ledger::{Outcome, format_usec};
use crate::store::{RunQuery, Store};

/// Runs `jobguard unlock`.
///
/// # Errors
/// 1 for a holder alive on this host (without `--force`); the job list's or the store's.
pub fn run(args: &UnlockArgs) -> exit::Result {
    let (job, mut store) = find_job_and_store(&args.config, &args.job)?;
    let lease = store.lease(&job.name)?;
    if let Some(l) = &lease
        && let Some(pid) = live_here(&l.holder)
    {
        let who = describe_live(store.as_mut(), l, pid);
        if !args.force {
            return Err(Error::new(
                exit::FAILURE,
                format!(
                    "{}: not unlocked: the lease is held by {who}, which is alive on this host; ending it would let another host start the slot while this run goes on. Stop the run (`systemctl stop jobguard@{}.service`, or kill {pid}), or use --force",
                    job.name, job.name
                ),
            ));
        }
        eprintln!(
            "jobguard: warning: {}: ending the lease of {who}, which is alive on this host: it stops its command at its next renewal, and another host may start the slot meanwhile",
            job.name
        );
    }
    match store.unlock(&job.name)? {
        Some(l) => {
            println!(
                "{}: ended the lease of host {} (holder {}, token {}, due to expire {})",
                job.name,
                l.host,
                l.holder,
                l.token,
                format_usec(l.expire_at)
            );
        }
        None => {
            match lease.filter(|l| !l.holder.is_empty()) {
                // A lease that had lapsed is released too, so that a claim from another
                // machine no longer waits for its holder (store::rules::FOREIGN_GRACE_USEC).
                Some(l) => println!(
                    "{}: released the lease of host {} (holder {}, token {}), which expired {}: other machines no longer wait for its holder to record an outcome",
                    job.name,
                    l.host,
                    l.holder,
                    l.token,
                    format_usec(l.expire_at)
                ),
                None => println!("{}: no lease", job.name),
            }
        }
    }
    Ok(Finished::OK)
}

/// The pid of a lease holder ([`crate::guard::lease::Holder::id`]: `machine:boot:pid:start`)
/// that is alive on this machine in this boot; `None` for a holder elsewhere or gone.
fn live_here(holder: &str) -> Option<u32> {
    let mut parts = holder.split(':');
    let (machine, boot) = (parts.next()?, parts.next()?);
    let pid: u32 = parts.next()?.parse().ok()?;
    let start: u64 = parts.next()?.parse().ok()?;
    let here = !machine.is_empty() && machine == identity::machine_id();
    (here && boot == identity::boot_id() && identity::process_alive(pid, start)).then_some(pid)
}

/// `pid P on host H (run R, slot S, token T)`; the run is the `running` record with the
/// lease's fencing token, when the store can say.
fn describe_live(store: &mut dyn Store, lease: &Lease, pid: u32) -> String {
    let run = store
        .runs(&RunQuery {
            job: Some(lease.job.clone()),
            outcomes: vec![Outcome::Running],
            ..RunQuery::default()
        })
        .ok()
        .and_then(|runs| runs.into_iter().find(|r| r.fencing_token == lease.token));
    let run = run
        .map(|r| format!("run {}, slot {}, ", r.run_id, r.slot.rfc3339()))
        .unwrap_or_default();
    format!(
        "pid {pid} on host {} ({run}token {})",
        lease.host, lease.token
    )
}

//! Before a claim: ending what earlier attempts at the job left running on this host.
//!
//! `PR_SET_PDEATHSIG` reaches only the command itself, and outside systemd no cgroup ends
//! the rest, so a shim that was SIGKILLed (or a command that started a daemon in a session
//! of its own) can leave processes of an attempt running after its lease expired. The next
//! run on this host, when the job's lock file says the previous shim did not see its run
//! to the end ([`crate::guard::lock::JobLock::unfinished_run`]; a normal run reads no other
//! process's environment), finds them by their environment ([`identity::leftovers`]: the job,
//! the run id and a shim that is gone), ends them (SIGTERM, `kill_grace`, SIGKILL) before
//! it claims anything, and marks the attempt's record interrupted if it still says
//! `running`, its lease has expired, and it was written by the very holder the processes
//! name (this machine and boot, the gone shim's pid and start time): a process's
//! environment is only a claim, which any local user can make, so a record of another
//! host or of a live shim is never ended by it, and only processes of the job's own user
//! are looked at. Processes that cannot be ended (another user's, when not root; a process
//! stuck in the kernel) make the run refuse. Processes that started with a cleaned
//! environment cannot be found; under systemd the unit's cgroup ends them anyway.
//! Other hosts' processes are beyond reach: their own next run ends them. Not looked for:
//! a daemon that a command started in a session of its own and that outlived a shim which
//! saw its run to the end.
//!
//! A claim refused for a lease whose holder this installation ran and is gone (a shim
//! SIGKILLed with its command, as systemd ends a unit; a run of an earlier boot) waits for
//! that lease to expire by the store's clock and then ends the attempt the same way
//! ([`end_gone_holder`]), so the next slot is not lost to a dead holder's lease. Local
//! evidence never ends an unexpired lease: a copy of this machine resumed from one
//! snapshot has the same boot id and pids. A holder of another installation (another
//! machine, or one that shares this machine id) is left to `jobguard recover`.

use crate::exit;
use crate::guard::identity;
use crate::guard::lease::Lease;
use crate::guard::ledger::{Outcome, Run};
use crate::joblist::job::Job;
use crate::store::{RunQuery, Store};
use crate::systemd::journal::{self, Event, Kind};

/// Ends the leftover processes of earlier attempts at `job` on this host and marks their
/// `running` records interrupted. Returns the exit status to stop with when some cannot
/// be ended.
///
/// # Errors
/// [`exit::OS_ERROR`] when processes of an earlier attempt still run afterwards.
pub fn end_earlier_attempts(job: &Job, store: &mut dyn Store) -> Result<(), u8> {
    // The command runs as the job's user, or as the shim's own.
    let uid = match &job.user {
        Some(name) => match super::child::lookup_account(name) {
            Ok(account) => account.uid.as_raw(),
            // The run itself reports the missing user; no process can be its.
            Err(_) => return Ok(()),
        },
        None => nix::unistd::geteuid().as_raw(),
    };
    let found = identity::leftovers(&job.name, uid);
    if found.is_empty() {
        return Ok(());
    }
    let mut runs: Vec<&str> = found.iter().map(|p| p.run_id.as_str()).collect();
    runs.sort_unstable();
    runs.dedup();
    let pids: Vec<String> = found.iter().map(|p| p.pid.to_string()).collect();
    eprintln!(
        "jobguard: {}: ending {} process(es) left by earlier attempt(s) whose shim is gone (run {}; pid {}) before anything starts",
        job.name,
        found.len(),
        runs.join(", "),
        pids.join(", ")
    );
    let left = identity::end_leftovers(&found, job.kill_grace);
    if !left.is_empty() {
        let left: Vec<String> = left.iter().map(i32::to_string).collect();
        let mut ev = Event::new(
            Kind::Failed,
            &job.name,
            format!(
                "not run: processes of an earlier attempt still run and cannot be ended (pid {})",
                left.join(", ")
            ),
        );
        ev.reason = Some("leftover-processes".into());
        journal::emit(&ev);
        journal::status("not run: processes of an earlier attempt still run");
        return Err(exit::OS_ERROR);
    }
    mark_interrupted(job, store, &found);
    Ok(())
}

/// Marks interrupted, as `jobguard recover` would, the `running` records that `found`
/// names and that were written by the holder its processes name, on this machine and
/// boot, whose shim is gone (so every process they left is gone too). A record of
/// another holder is left alone: a process's environment is no proof of whose run it is.
/// Store errors are reported and left to `jobguard recover`.
fn mark_interrupted(job: &Job, store: &mut dyn Store, found: &[identity::Leftover]) {
    let (machine, boot) = (identity::machine_id(), identity::boot_id());
    let running = store.runs(&RunQuery {
        job: Some(job.name.clone()),
        outcomes: vec![Outcome::Running],
        ..RunQuery::default()
    });
    let running = match running {
        Ok(r) => r,
        Err(e) => {
            eprintln!("jobguard: {}: {e}", job.name);
            return;
        }
    };
    let written_by_its_holder = |r: &Run| {
        let holder = format!("{}:{}:{}:{}", r.machine_id, r.boot_id, r.pid, r.pid_start);
        !machine.is_empty()
            && r.machine_id == machine
            && r.boot_id == boot
            && !identity::process_alive(r.pid, r.pid_start)
            && found
                .iter()
                .any(|p| p.run_id == r.run_id && p.holder == holder)
    };
    // A record whose lease is still unexpired is left to that lease (recover::holder_gone).
    for run in running.iter().filter(|r| written_by_its_holder(r)) {
        let cut = crate::ops::recover::holder_gone(store, run).and_then(|gone| match gone {
            Some(reason) => crate::ops::recover::interrupt_cut(store, job, run, reason).map(|_| ()),
            None => Ok(()),
        });
        if let Err(e) = cut {
            eprintln!("jobguard: {}: {e}", job.name);
        }
    }
}

/// Ends the attempt that holds the job's lease when this installation wrote it and its
/// holder is gone by what this host sees: `lease` is the grant a claim was refused for
/// ([`crate::store::Claim::Busy`]) and `run` its `running` record. The holder is gone when
/// it ran under an earlier boot, or its shim (pid and start time) no longer runs and no
/// process of the attempt is left ([`identity::end_run_survivors`]). Local evidence does
/// not end a lease that is unexpired by the store's clock (a copy of this machine resumed
/// from one snapshot has this boot id and pids too), so the shim first waits until the
/// lease has expired (at most the job's `lease_ttl`; a stop request ends the wait: false);
/// then the record is marked interrupted with the job's `on_interrupted`, as `jobguard
/// recover` would
/// ([`crate::ops::recover::holder_gone`], [`crate::ops::recover::interrupt_cut`]). Returns true when
/// the record no longer holds the lease, so a claim may be tried again. A record of
/// another installation, a live holder, or a record that is not the lease's is never
/// touched: false. Store errors are reported: false.
pub fn end_gone_holder(job: &Job, store: &mut dyn Store, lease: &Lease, run: &Run) -> bool {
    let me = identity::Installation::here();
    let this_boot = run.boot_id == me.boot_id;
    if !me.wrote(run)
        || run.fencing_token != lease.token
        || run.outcome != Outcome::Running
        || (this_boot && identity::process_alive(run.pid, run.pid_start))
        || (this_boot && !identity::end_run_survivors(&run.run_id))
    {
        return false;
    }
    let waited = store.now().map(|now| {
        let left = lease.expire_at.saturating_sub(now).max(0);
        let ttl = i64::try_from(job.lease_ttl.as_micros()).unwrap_or(i64::MAX);
        let left = std::time::Duration::from_micros(left.min(ttl).unsigned_abs());
        if !left.is_zero() {
            eprintln!(
                "jobguard: {}: the lease of run {} (slot {}) is held by a holder of this host that is gone; waiting {} ms for it to expire by the store's clock",
                job.name,
                run.run_id,
                run.slot.rfc3339(),
                left.as_millis()
            );
            return crate::shim::child::sleep_unless_stopped(
                left + std::time::Duration::from_millis(20),
            );
        }
        true
    });
    if matches!(waited, Ok(false)) {
        eprintln!("jobguard: {}: asked to stop; no longer waiting", job.name);
        return false;
    }
    let gone = waited
        .and_then(|_| crate::ops::recover::holder_gone(store, run))
        .and_then(|gone| match gone {
            Some(reason) => {
                crate::ops::recover::interrupt_cut(store, job, run, reason).map(|_| true)
            }
            None => Ok(false),
        });
    gone.unwrap_or_else(|e| {
        eprintln!("jobguard: {}: {e}", job.name);
        false
    })
}

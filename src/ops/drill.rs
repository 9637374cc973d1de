//! `jobguard drill JOB`: the pre-production check "trigger it twice in one window; the
//! second is refused or does nothing; zero duplicates", run against each layer without
//! running the job's command and without touching its slots or lease.
//!
//! Every probe uses the job name `JOB@drill` ([`crate::joblist::job::drill_probe_name`]), in the
//! job's own lock directory and store, and probe slots taken from the store's clock, so a
//! drill never counts as a slot of the job and can run against a production store at any
//! time. No job can have that name: job names never hold `@`
//! ([`crate::joblist::job::is_valid_job_name`]), so a real job `JOB.drill` (which
//! `jobguard import-crontab` can make) keeps its slots.
//!
//! A drill leaves nothing for `jobguard audit` to report: the fenced first holder of the
//! lease layer is settled as taken over (`interrupted`, resolution `rerun`) once the
//! second holder's attempt succeeded, and a probe record that a killed drill left
//! `running` is settled (`interrupted`, resolution `done`) once its lease has expired by
//! the store's clock, by the next drill or by `jobguard recover`
//! ([`crate::ops::recover::settle_probes`]; for a job no longer in the job list, its probe is
//! found by [`crate::joblist::job::is_drill_probe_name`] and settled, not held for a person). The
//! records stay in the ledger under `JOB@drill` until the job's `retention` lets them go:
//! `jobguard prune` and `jobguard recover` prune them with the job's own
//! ([`crate::ops::retention::prune_job`]).
//!
//! The layers and what each must show:
//! 1. **lock**: a second taker of the probe lock is refused at once (flock(2) `LOCK_NB`,
//!    on a second open file description, as a second shim would).
//! 2. **store**: reachable, and its clock within `clock_tolerance` of this host's.
//! 3. **lease**: a second holder is refused while the first holds the lease; it gets the
//!    lease only after the first's has expired by the store's clock, with a higher
//!    fencing token; the first holder's late finish is then refused (fencing).
//! 4. **ledger**: a second trigger of a probe slot that succeeded is a skip (done).

use std::time::{Duration, Instant};

use crate::exit::Status;
use crate::guard::identity;
use crate::guard::lease::Holder;
use crate::guard::ledger::{Finish, NewRun, Outcome, Resolution, Slot};
use crate::guard::lock::{JobLock, LockAttempt};
use crate::joblist::job::{Job, drill_probe_name as probe_name};
use crate::store::{Claim, ClaimRequest, Store};

/// The lease time to live of the probes: the lease layer waits for it to expire.
pub const PROBE_TTL: Duration = Duration::from_secs(2);

/// One layer's verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// `lock`, `store`, `lease` or `ledger`.
    pub layer: &'static str,
    /// Whether the layer held.
    pub held: bool,
    /// What was seen, with numbers.
    pub detail: String,
    /// The exit status of the store error that kept the layer from being tried (the
    /// store's, [`crate::exit::Status::exit_status`]); `None` when it was tried.
    pub error: Option<u8>,
}

/// The exit status of a drill that gave `verdicts`: 0 when every layer held; 1 when one
/// did not; the store's status (69, 70, 78) when a store error kept a layer from being
/// tried, as when the store cannot be opened; the worst of them ([`crate::exit::worst`]).
pub fn status(verdicts: &[Verdict]) -> u8 {
    use crate::exit;
    verdicts
        .iter()
        .fold(exit::OK, |status, v| match (v.held, v.error) {
            (true, _) => status,
            (false, Some(e)) => exit::worst(status, e),
            (false, None) => exit::worst(status, exit::FAILURE),
        })
}

/// The verdict of a `layer` that a store error kept from being tried: not held, with the
/// store's exit status.
fn broken(layer: &'static str, e: &crate::store::StoreError) -> Verdict {
    Verdict {
        layer,
        held: false,
        error: Some(e.exit_status()),
        detail: e.to_string(),
    }
}

/// Why a probe record of an earlier drill is settled: that drill was cut off.
const LEFTOVER_REASON: &str = "drill-cut";

/// Runs the drill of `job` with its store `store`; the lock probe takes its lock in
/// `lock_dir`. Never fails as a whole: a layer that cannot be exercised (the store is
/// down) is a verdict that did not hold, and the layers after it are not tried.
pub fn run(job: &Job, store: &mut dyn Store, lock_dir: &std::path::Path) -> Vec<Verdict> {
    let mut out = vec![lock_layer(job, lock_dir)];
    let store_v = store_layer(job, store);
    if store_v.held {
        // Best effort: a leftover that cannot be settled now is settled by the next drill.
        let _ = settle_leftovers(job, store);
    }
    let store_ok = store_v.held;
    out.push(store_v);
    if store_ok {
        out.push(lease_layer(job, store));
        out.push(ledger_layer(job, store));
    }
    out
}

fn lock_layer(job: &Job, dir: &std::path::Path) -> Verdict {
    let name = probe_name(&job.name);
    let verdict = |held, detail| Verdict {
        layer: "lock",
        held,
        detail,
        error: None,
    };
    let first = match JobLock::try_acquire(dir, &name) {
        Ok(LockAttempt::Acquired(l)) => l,
        Ok(LockAttempt::Busy { .. }) => {
            return verdict(
                false,
                format!("the probe lock {name} is held by someone else"),
            );
        }
        Err(e) => return verdict(false, e.to_string()),
    };
    let t = Instant::now();
    let second = JobLock::try_acquire(dir, &name);
    let took = t.elapsed();
    drop(first);
    match second {
        Ok(LockAttempt::Busy { .. }) => verdict(
            true,
            format!(
                "a second taker was refused in {:.3} ms (flock LOCK_NB)",
                took.as_secs_f64() * 1000.0
            ),
        ),
        Ok(LockAttempt::Acquired(_)) => verdict(false, "a second taker got the lock too".into()),
        Err(e) => verdict(false, e.to_string()),
    }
}

fn store_layer(job: &Job, store: &mut dyn Store) -> Verdict {
    let t = Instant::now();
    let before = crate::guard::clock::Clock::now_usec(&crate::guard::clock::SystemClock);
    let answer = store.now();
    let after = crate::guard::clock::Clock::now_usec(&crate::guard::clock::SystemClock);
    let rtt = t.elapsed();
    match answer {
        Ok(store_now) => {
            let host = before + (after - before) / 2;
            let skew = store_now - host;
            let tolerance = i64::try_from(job.clock_tolerance.as_micros()).unwrap_or(i64::MAX);
            Verdict {
                layer: "store",
                held: skew.abs() <= tolerance,
                error: None,
                detail: format!(
                    "{} answered in {:.1} ms; its clock is {:+.3} s from this host's (tolerance {} s)",
                    store.describe(),
                    rtt.as_secs_f64() * 1000.0,
                    skew as f64 / 1e6,
                    job.clock_tolerance.as_secs()
                ),
            }
        }
        Err(e) => broken("store", &e),
    }
}

/// Settles the `running` probe records of `job` that an earlier drill left when it was
/// cut off: each whose lease is not live by the store's clock (the probes never renew)
/// becomes `interrupted`, resolution `done`, as no probe slot is ever run again. Returns
/// how many were settled.
fn settle_leftovers(job: &Job, store: &mut dyn Store) -> Result<usize, crate::store::StoreError> {
    let probe = probe_name(&job.name);
    let running = store.runs(&crate::store::RunQuery {
        job: Some(probe.clone()),
        outcomes: vec![Outcome::Running],
        ..Default::default()
    })?;
    if running.is_empty() {
        return Ok(0);
    }
    let now = store.now()?;
    let lease = store.lease(&probe)?;
    let mut settled = 0;
    for run in &running {
        let live = lease.as_ref().is_some_and(|l| {
            l.holder == run.holder().id() && l.token == run.fencing_token && l.expire_at > now
        });
        if !live && store.interrupt(run, LEFTOVER_REASON, Resolution::Done)? {
            settled += 1;
        }
    }
    Ok(settled)
}

/// A second probe holder: this process, with a start time no process has.
fn other_holder(h: &Holder) -> Holder {
    Holder {
        pid_start: h.pid_start.wrapping_add(1),
        ..h.clone()
    }
}

fn request(job: &Job, slot: i64, holder: &Holder) -> ClaimRequest {
    ClaimRequest::new(
        NewRun {
            run_id: identity::new_run_id(),
            job: probe_name(&job.name),
            slot: Slot {
                usec: slot,
                zone: "UTC".into(),
            },
            forced: false,
            trigger: "drill".into(),
            invocation_id: None,
        },
        holder.clone(),
        PROBE_TTL,
    )
}

fn succeeded() -> Finish {
    Finish {
        outcome: Outcome::Succeeded,
        reason: Some("drill".into()),
        exit_status: Some(0),
        report: Default::default(),
        resolution: None,
        ended_at: None,
    }
}

fn lease_layer(job: &Job, store: &mut dyn Store) -> Verdict {
    let fail = |detail: String| Verdict {
        layer: "lease",
        held: false,
        error: None,
        detail,
    };
    let a = crate::guard::lease::Holder::current();
    let b = other_holder(&a);
    let slot = match store.now() {
        Ok(n) => n,
        Err(e) => return broken("lease", &e),
    };
    let (lease_a, run_a) = match store.claim(&request(job, slot, &a)) {
        Ok(Claim::Claimed { lease, run, .. }) => (lease, run),
        Ok(other) => return fail(format!("the first holder was not granted: {other:?}")),
        Err(e) => return broken("lease", &e),
    };
    let t = Instant::now();
    let second = store.claim(&request(job, slot, &b));
    let refused_in = t.elapsed();
    match second {
        Ok(Claim::Busy { .. }) => {}
        Ok(other) => {
            return fail(format!(
                "a second holder was not refused while the first held the lease: {other:?}"
            ));
        }
        Err(e) => return broken("lease", &e),
    }
    // Takeover only after expiry by the store's clock.
    let waited = Instant::now();
    let (lease_b, run_b) = loop {
        match store.claim(&request(job, slot, &b)) {
            Ok(Claim::Claimed { lease, run, .. }) => break (lease, run),
            Ok(Claim::Busy { .. }) if waited.elapsed() < PROBE_TTL * 5 => {
                std::thread::sleep(Duration::from_millis(100));
            }
            Ok(other) => return fail(format!("the takeover was answered {other:?}")),
            Err(e) => return broken("lease", &e),
        }
    };
    let early = lease_b.acquired_at < lease_a.expire_at;
    let token_up = lease_b.token > lease_a.token;
    // The first holder's late finish must change nothing.
    let late = store.finish(&lease_a, &run_a.run_id, &succeeded());
    let _ = store.finish(&lease_b, &run_b.run_id, &succeeded());
    let fenced = matches!(late, Ok(ref f) if !f.recorded && !f.released);
    // The first holder stopped long ago: its record says the second one took its slot over,
    // and ends where that one's lease began (`rules::cut_end`), so nothing overlaps.
    if fenced {
        let _ = store.interrupt(&run_a, "drill", Resolution::Rerun);
    }
    Verdict {
        layer: "lease",
        held: !early && token_up && fenced,
        error: None,
        detail: format!(
            "a second holder was refused in {:.1} ms; it took over {:.2} s later, {} the first lease expired by the store's clock ({:+.3} s), fencing token {} -> {}; the first holder's late finish was {}",
            refused_in.as_secs_f64() * 1000.0,
            waited.elapsed().as_secs_f64(),
            if early { "BEFORE" } else { "after" },
            (lease_b.acquired_at - lease_a.expire_at) as f64 / 1e6,
            lease_a.token,
            lease_b.token,
            match late {
                Ok(f) if !f.recorded && !f.released => "refused".to_string(),
                Ok(_) => "ACCEPTED".to_string(),
                Err(e) => format!("an error: {e}"),
            }
        ),
    }
}

fn ledger_layer(job: &Job, store: &mut dyn Store) -> Verdict {
    let fail = |detail: String| Verdict {
        layer: "ledger",
        held: false,
        error: None,
        detail,
    };
    let a = crate::guard::lease::Holder::current();
    let slot = match store.now() {
        Ok(n) => n,
        Err(e) => return broken("ledger", &e),
    };
    let (lease, first) = match store.claim(&request(job, slot, &a)) {
        Ok(Claim::Claimed { lease, run, .. }) => (lease, run),
        Ok(other) => return fail(format!("the probe slot was not granted: {other:?}")),
        Err(e) => return broken("ledger", &e),
    };
    if let Err(e) = store.finish(&lease, &first.run_id, &succeeded()) {
        return broken("ledger", &e);
    }
    let t = Instant::now();
    let second = store.claim(&request(job, slot, &a));
    let took = t.elapsed();
    match second {
        Ok(Claim::SlotDone { .. }) => Verdict {
            layer: "ledger",
            held: true,
            error: None,
            detail: format!(
                "a second trigger of a done probe slot was a skip in {:.1} ms",
                took.as_secs_f64() * 1000.0
            ),
        },
        Ok(other) => fail(format!(
            "a second trigger of a done slot was answered {other:?}"
        )),
        Err(e) => broken("ledger", &e),
    }
}

#[cfg(test)]
mod status_tests {
    use super::*;

    #[test]
    fn a_drill_exits_with_the_worst_of_its_layers() {
        let v = |held, error| Verdict {
            layer: "store",
            held,
            detail: String::new(),
            error,
        };
        assert_eq!(status(&[v(true, None), v(true, None)]), 0);
        assert_eq!(status(&[v(true, None), v(false, None)]), 1);
        assert_eq!(status(&[v(false, None), v(false, Some(69))]), 69);
        assert_eq!(status(&[v(false, Some(70)), v(false, None)]), 70);
    }
}

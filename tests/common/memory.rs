//! [`Memory`]: a store held in memory and moved only by the rules of
//! `jobguard::store::rules`, the reference `tests/store_differential.rs` compares every
//! real store with, and the world of the rules' own property tests
//! (`src/store/rules/tests.rs` includes this file). Test support only: it is not part of
//! the library.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::time::Duration;

use jobguard::guard::lease::Lease;
use jobguard::guard::ledger::{Finish, Resolution, Run};
use jobguard::store::rules::{
    ClaimDecision, ClaimState, EndDecision, MarkStep, RuleError, RunState, claim, finish,
    interrupt, mark, newest_bound, newest_by, released, renew, resolve, unlock,
};
use jobguard::store::{ClaimRequest, Finished, Mark, Marking};

/// A store held in memory and moved only by the rules: the reference that
/// `tests/store_differential.rs` compares the real stores with, and the world of the
/// rules' property tests. Times are passed in (µs since the epoch, store clock).
#[derive(Debug, Clone, Default)]
pub struct Memory {
    /// The lease row of each job, released or not.
    pub leases: BTreeMap<String, Lease>,
    /// Every record, in the order recorded.
    pub runs: Vec<Run>,
    /// The marks, by namespace and key.
    pub marks: BTreeMap<(String, String), Mark>,
}

impl Memory {
    /// The records of `job`'s slot `usec`, in the order recorded.
    pub fn slot_runs(&self, job: &str, usec: i64) -> Vec<Run> {
        self.runs
            .iter()
            .filter(|r| r.job == job && r.slot.usec == usec)
            .cloned()
            .collect()
    }

    /// The snapshot [`claim`] needs for `req` at `now`.
    pub fn claim_state(&self, req: &ClaimRequest, now: i64) -> ClaimState {
        let job = &req.run.job;
        let lease = self.leases.get(job).cloned();
        let mut slots: BTreeMap<i64, Vec<Run>> = BTreeMap::new();
        slots.insert(req.run.slot.usec, self.slot_runs(job, req.run.slot.usec));
        if req.queued_first {
            for r in &self.runs {
                if r.job == *job && r.resolution == Some(Resolution::Queued) {
                    slots
                        .entry(r.slot.usec)
                        .or_insert_with(|| self.slot_runs(job, r.slot.usec));
                }
            }
        }
        let bound = newest_bound(now, req);
        let newest = self
            .runs
            .iter()
            .filter(|r| r.job == *job && r.slot.usec <= bound)
            .map(|r| r.slot.usec)
            .max();
        let lease_run = lease.as_ref().and_then(|l| {
            let same: Vec<Run> = self
                .runs
                .iter()
                .filter(|r| r.job == *job && r.fencing_token == l.token)
                .cloned()
                .collect();
            newest_by(&same, |_| Some(0)).cloned()
        });
        ClaimState {
            now,
            lease,
            retried: self
                .runs
                .iter()
                .find(|r| r.run_id == req.run.run_id)
                .cloned(),
            slots,
            newest,
            lease_run,
        }
    }

    /// [`jobguard::store::Store::claim`] at `now`: decides with [`claim`] and applies the
    /// writes.
    ///
    /// # Errors
    /// As [`claim`]; nothing is written.
    pub fn claim(&mut self, req: &ClaimRequest, now: i64) -> Result<ClaimDecision, RuleError> {
        let decision = claim(&self.claim_state(req, now), req)?;
        if let ClaimDecision::Grant(g) = &decision {
            self.leases.insert(g.lease.job.clone(), g.lease.clone());
            for r in &mut self.runs {
                if g.rerun.contains(&r.run_id) {
                    r.resolution = Some(Resolution::Rerun);
                }
            }
            self.runs.push(g.run.clone());
        }
        Ok(decision)
    }

    /// [`jobguard::store::Store::renew`] at `now`.
    pub fn renew(&mut self, lease: &Lease, next: i64, ttl: Duration, now: i64) -> Option<i64> {
        let row = self.leases.get_mut(&lease.job)?;
        let expire_at = renew(now, Some(row), lease, next, ttl)?;
        row.expire_at = expire_at;
        row.renewal = next;
        Some(expire_at)
    }

    fn end(&mut self, job: &str, decision: &EndDecision) {
        if let Some(new) = &decision.record
            && let Some(r) = self.runs.iter_mut().find(|r| r.run_id == new.run_id)
        {
            *r = new.clone();
        }
        if decision.release
            && let Some(row) = self.leases.get_mut(job)
        {
            *row = released(row);
        }
    }

    /// [`jobguard::store::Store::finish`] (with `kept`, `finish_kept`) at `now`.
    ///
    /// # Errors
    /// As [`finish`]; nothing is written.
    pub fn finish(
        &mut self,
        lease: &Lease,
        run_id: &str,
        end: &Finish,
        kept: bool,
        now: i64,
    ) -> Result<Finished, RuleError> {
        let record = self.runs.iter().find(|r| r.run_id == run_id).cloned();
        let slot_runs = record
            .as_ref()
            .map(|r| self.slot_runs(&r.job, r.slot.usec))
            .unwrap_or_default();
        let state = RunState {
            now,
            lease: self.leases.get(&lease.job),
            record: record.as_ref(),
            slot_runs: &slot_runs,
        };
        let decision = finish(&state, lease, run_id, end, kept)?;
        self.end(&lease.job, &decision);
        Ok(decision.finished())
    }

    /// [`jobguard::store::Store::interrupt`] at `now`: whether the record changed.
    pub fn interrupt(&mut self, run: &Run, reason: &str, resolution: Resolution, now: i64) -> bool {
        let record = self.runs.iter().find(|r| r.run_id == run.run_id).cloned();
        let state = RunState {
            now,
            lease: self.leases.get(&run.job),
            record: record.as_ref(),
            slot_runs: &[],
        };
        let decision = interrupt(&state, run, reason, resolution);
        self.end(&run.job, &decision);
        decision.record.is_some()
    }

    /// [`jobguard::store::Store::unlock`] at `now`.
    pub fn unlock(&mut self, job: &str, now: i64) -> Option<Lease> {
        let (ended, release) = unlock(now, self.leases.get(job));
        if release && let Some(row) = self.leases.get_mut(job) {
            *row = released(row);
        }
        ended
    }

    /// [`jobguard::store::Store::resolve`]: how many records changed.
    pub fn resolve(&mut self, job: &str, slot: i64, resolution: Resolution) -> usize {
        let ids = resolve(&self.slot_runs(job, slot), resolution);
        for r in &mut self.runs {
            if ids.contains(&r.run_id) {
                r.resolution = Some(resolution);
            }
        }
        ids.len()
    }

    /// [`jobguard::store::Store::mark`] at `now`: the fence on the job's lease (read only
    /// when `fenced`, as the store does), then the key.
    pub fn mark(&mut self, new: &Mark, fenced: bool, now: i64) -> Marking {
        let lease = if fenced { self.lease(&new.job) } else { None };
        let key = (new.namespace.clone(), new.key.clone());
        match mark(
            now,
            lease.as_ref(),
            self.marks.get(&key).cloned(),
            new,
            fenced,
        ) {
            MarkStep::Answer(answer) => answer,
            MarkStep::Insert(m) => {
                self.marks.insert(key, m.clone());
                Marking::New(m)
            }
        }
    }

    /// [`jobguard::store::Store::lease`]: the job's lease row unless released.
    pub fn lease(&self, job: &str) -> Option<Lease> {
        self.leases
            .get(job)
            .filter(|l| !l.holder.is_empty())
            .cloned()
    }

    /// [`jobguard::store::Store::runs`] for one job: newest first by `started_at`, records
    /// started in the same µs latest recorded first.
    pub fn runs(&self, job: &str) -> Vec<Run> {
        let mut out: Vec<(usize, &Run)> = self
            .runs
            .iter()
            .enumerate()
            .filter(|(_, r)| r.job == job)
            .collect();
        out.sort_by(|(ia, a), (ib, b)| (b.started_at, ib).cmp(&(a.started_at, ia)));
        out.into_iter().map(|(_, r)| r.clone()).collect()
    }
}

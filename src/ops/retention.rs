//! Retention: which ledger records `jobguard recover` and `jobguard prune` delete.
//!
//! A minutely job writes 525,600 records a year, and nothing else deletes them. A slot's
//! records are deleted, all of them, once every one started more than the job's
//! `retention` ago (default 90 days, [`crate::joblist::job::DEFAULT_RETENTION`]; `0` or `infinity`
//! keeps every record) and the slot is done: an attempt succeeded, or a person resolved
//! it as done. A slot goes whole or not at all, so it never loses the record that made it
//! done while a later attempt (a forced re-run) stays; the store re-checks this in the
//! delete's own atomic step. Whatever their age, these are kept:
//! - the slot of the job's newest success: `status` shows it as the last run, `metrics`
//!   as the time of the last success;
//! - every record of the job's newest recorded slot: a claim refuses a slot behind it, and
//!   catch-up counts the elapses after it;
//! - every attempt at a slot that is not done (failed, held, queued for a re-run, cut off
//!   or running): it waits for a person or a re-run, and `status` keeps showing it.
//!
//! `jobguard audit`, `status`, `metrics` and `recover` look for missed slots only from
//! now − `retention` + 2 × `clock_tolerance` on (retention judges by the store's clock,
//! which may be ahead of the host's by up to the tolerance, and a slot's record may start
//! up to the tolerance before it): before that, the records that showed a slot ran may be
//! gone. The record counts of `jobguard metrics` (gauges) drop when records are deleted.
//!
//! A job's marks (`jobguard mark`, [`crate::store::Store::mark`]) go once they were
//! recorded more than the job's `retention` ago (on etcd and ZooKeeper a whole day at a
//! time, so up to a day later).
//!
//! [`prunable`] chooses; [`prune_job`] reads a job's records and deletes what it chose
//! ([`crate::store::Store::delete_slots`]). `jobguard prune` calls it for every job, and
//! `jobguard recover` once a day per job ([`due`]).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use crate::guard::ledger::{Outcome, Run};
use crate::joblist::job::Job;
use crate::store::rules::is_done;
use crate::store::{RunQuery, Store, StoreError};

/// How often `jobguard recover` prunes a job: once a day (µs).
pub const RECOVER_PRUNE_EVERY_USEC: i64 = 86_400_000_000;

/// What [`prune_job`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pruned {
    /// Records deleted (with `dry_run`: that would be).
    pub deleted: usize,
    /// Records the job had before.
    pub total: usize,
    /// Records of the job's drill probes ([`crate::joblist::job::drill_probe_name`]) deleted (with
    /// `dry_run`: that would be), by the job's retention.
    pub probes: usize,
    /// The job's marks deleted ([`crate::store::Store::delete_marks`]: those recorded
    /// before now − `retention`); 0 with `dry_run`, which does not count them.
    pub marks: usize,
}

/// Deletes the job's records that its `retention` lets go ([`prunable`], judged by the
/// store's clock); with `dry_run` only counts them.
///
/// # Errors
/// Store errors.
pub fn prune_job(store: &mut dyn Store, job: &Job, dry_run: bool) -> Result<Pruned, StoreError> {
    if job.retention.is_none() {
        return Ok(Pruned {
            deleted: 0,
            total: 0,
            probes: 0,
            marks: 0,
        });
    }
    let now = store.now()?;
    let (deleted, total) = prune_name(store, &job.name, now, job.retention, dry_run)?;
    let probe = crate::joblist::job::drill_probe_name(&job.name);
    let (probes, _) = prune_name(store, &probe, now, job.retention, dry_run)?;
    // Marks keep as long as records: a key marked by a run is known while its record is.
    let marks = match kept_since(now, job.retention) {
        Some(before) if dry_run => store.count_marks(&job.name, before)?,
        Some(before) => store.delete_marks(&job.name, before)?,
        None => 0,
    };
    Ok(Pruned {
        deleted,
        total,
        probes,
        marks,
    })
}

/// Deletes (or with `dry_run` counts) the records of the job named `name` that `retention`
/// lets go at store time `now`; returns (deleted, records before).
fn prune_name(
    store: &mut dyn Store,
    name: &str,
    now: i64,
    retention: Option<Duration>,
    dry_run: bool,
) -> Result<(usize, usize), StoreError> {
    let runs = store.runs(&RunQuery {
        job: Some(name.to_string()),
        ..RunQuery::default()
    })?;
    let (slots, started_before) = prunable(&runs, now, retention);
    let deleted = if dry_run || slots.is_empty() {
        runs.iter()
            .filter(|r| slots.binary_search(&r.slot.usec).is_ok())
            .count()
    } else {
        store.delete_slots(name, &slots, started_before)?
    };
    Ok((deleted, runs.len()))
}

/// Where `jobguard recover` notes when it last pruned `job`.
fn mark(job: &str) -> PathBuf {
    crate::paths::state_dir().join("pruned").join(job)
}

/// Whether `jobguard recover` should prune `job` at `now` (µs since the epoch, this
/// host's clock): it has a retention and was not pruned on this host in the last day.
pub fn due(job: &Job, now: i64) -> bool {
    job.retention.is_some()
        && std::fs::read_to_string(mark(&job.name))
            .ok()
            .and_then(|t| t.trim().parse::<i64>().ok())
            .is_none_or(|last| now.saturating_sub(last) >= RECOVER_PRUNE_EVERY_USEC || last > now)
}

/// Notes that `jobguard recover` pruned `job` at `now`.
///
/// # Errors
/// The state directory cannot be written.
pub fn pruned(job: &str, now: i64) -> std::io::Result<()> {
    crate::paths::write_mark(&mark(job), now)
}

/// The slots (µs since the epoch) of `runs` (every record of one job) whose records
/// retention `retention` deletes at `now` (µs, the store's clock), with the bound their
/// records must have started before (`now` − `retention`): see the module
/// documentation. A slot goes whole or not at all: it is done, every record of it started
/// before the bound and none runs, and it is neither the newest recorded slot nor the slot
/// of the newest success. `None` deletes nothing.
pub fn prunable(runs: &[Run], now: i64, retention: Option<Duration>) -> (Vec<i64>, i64) {
    let Some(keep_after) = kept_since(now, retention) else {
        return (Vec::new(), i64::MIN);
    };
    let newest_slot = runs.iter().map(|r| r.slot.usec).max();
    let newest_success = runs
        .iter()
        .filter(|r| r.outcome == Outcome::Succeeded)
        .max_by_key(|r| (r.started_at, r.fencing_token))
        .map(|r| r.slot.usec);
    let mut slots: BTreeMap<i64, (bool, bool)> = BTreeMap::new();
    for r in runs {
        let (done, keep) = slots.entry(r.slot.usec).or_default();
        *done |= is_done(r);
        *keep |= r.started_at >= keep_after || r.outcome == Outcome::Running;
    }
    let gone = slots
        .into_iter()
        .filter(|(slot, (done, keep))| {
            *done && !*keep && Some(*slot) != newest_slot && Some(*slot) != newest_success
        })
        .map(|(slot, _)| slot)
        .collect();
    (gone, keep_after)
}

/// The earliest slot (µs since the epoch) whose records retention has surely kept at
/// `now`: `now` − `retention`, or `None` when every record is kept. Missed slots are not
/// looked for before it.
pub fn kept_since(now: i64, retention: Option<Duration>) -> Option<i64> {
    retention.map(|r| now.saturating_sub(i64::try_from(r.as_micros()).unwrap_or(i64::MAX)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guard::ledger::{Resolution, Slot};

    const DAY: i64 = 86_400_000_000;
    const NOW: i64 = 1_796_169_600_000_000;

    fn run(id: &str, day: i64, outcome: Outcome, resolution: Option<Resolution>) -> Run {
        let slot = NOW - day * DAY;
        Run {
            run_id: id.into(),
            job: "j".into(),
            slot: Slot {
                usec: slot,
                zone: "UTC".into(),
            },
            attempt: 1,
            outcome,
            reason: None,
            exit_status: None,
            forced: false,
            trigger: "timer".into(),
            host: "h".into(),
            machine_id: "m".into(),
            boot_id: "b".into(),
            pid: 1,
            pid_start: 1,
            invocation_id: None,
            started_at: slot + 1_000_000,
            finished_at: Some(slot + 2_000_000),
            fencing_token: 1000 - day,
            report: Default::default(),
            resolution,
        }
    }

    fn days(slots: &[i64]) -> Vec<i64> {
        slots.iter().map(|s| (NOW - s) / DAY).collect()
    }

    #[test]
    fn old_done_slots_go_whole_and_everything_that_waits_stays() {
        let mut late = run("old-ok-then-forced-failure", 130, Outcome::Failed, None);
        late.started_at = NOW - DAY;
        late.forced = true;
        let runs = vec![
            run("old-ok", 200, Outcome::Succeeded, None),
            run("old-failed-then-ok", 150, Outcome::Failed, None),
            run("old-ok-after-fail", 150, Outcome::Succeeded, None),
            run("old-ok-2", 130, Outcome::Succeeded, None),
            late,
            run("old-failed", 120, Outcome::Failed, None),
            run(
                "old-held",
                110,
                Outcome::Interrupted,
                Some(Resolution::Held),
            ),
            run(
                "old-queued",
                105,
                Outcome::Interrupted,
                Some(Resolution::Queued),
            ),
            run(
                "old-resolved-done",
                100,
                Outcome::Failed,
                Some(Resolution::Done),
            ),
            run("recent-ok", 10, Outcome::Succeeded, None),
        ];
        let (gone, before) = prunable(&runs, NOW, Some(Duration::from_secs(90 * 86_400)));
        // Day 130 stays whole: a forced re-run of it started yesterday.
        assert_eq!(days(&gone), vec![200, 150, 100]);
        assert_eq!(before, NOW - 90 * DAY);
        assert!(prunable(&runs, NOW, None).0.is_empty());
    }

    #[test]
    fn the_newest_success_and_the_newest_slot_stay_however_old() {
        // A yearly job: its only records are old.
        let runs = vec![
            run("y1", 700, Outcome::Succeeded, None),
            run("y2", 335, Outcome::Succeeded, None),
        ];
        let (gone, _) = prunable(&runs, NOW, Some(Duration::from_secs(90 * 86_400)));
        assert_eq!(days(&gone), vec![700]);
        // The newest slot failed and was resolved done: the older success stays too.
        let runs = vec![
            run("a", 400, Outcome::Succeeded, None),
            run("b", 300, Outcome::Failed, Some(Resolution::Done)),
        ];
        assert!(
            prunable(&runs, NOW, Some(Duration::from_secs(86_400)))
                .0
                .is_empty()
        );
    }
}

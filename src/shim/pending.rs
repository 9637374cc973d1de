//! Outcomes kept on this host until the store has them.
//!
//! When the store cannot take a run's outcome (a full disk under SQLite, a shared store
//! stopped or cut off at the end of a run), the outcome is not lost: the shim keeps it in
//! a small file, and the next `jobguard run` of the job or `jobguard recover` on this host
//! records it ([`replay`]) before anything decides that the slot was interrupted. Without
//! it, recover would find the record `running` with its holder gone and run the slot
//! again: a second execution of a command that had already ended.
//!
//! Where, and why there:
//! - `<runtime dir>/pending/<run id>.json` (`/run/jobguard/pending`) is written before the
//!   store write of every run and removed once the store has the outcome. `/run` is a
//!   tmpfs, in memory: it is not the file system that is full when the store's disk is,
//!   and writing there costs no disk I/O on the normal path. It does not survive a reboot.
//! - `<state dir>/pending/<run id>.json` (`/var/lib/jobguard/pending`, fsynced with its
//!   directory) is written as well once the first store write has failed or has not
//!   answered within half a second (a store that does not answer at all keeps that write
//!   waiting for its time-out, and a power cut meanwhile takes `/run` with it): it
//!   survives a reboot (a shared store that is still down when the host restarts), but
//!   usually shares the SQLite store's file system, so when that one is full this copy
//!   fails and the runtime copy carries the outcome.
//!
//! Either copy is enough. A kept outcome names the store it belongs to
//! ([`crate::store::Store::describe`], secrets masked) and is replayed only into that
//! store, with [`Store::finish_kept`], and only while its record is still `running` with
//! its fencing token, no other attempt at the slot runs, and (for a success) no other
//! attempt succeeded. Otherwise it is dropped with a message: another host's recover or
//! run got there first (a shared store whose lease expired meanwhile); this host cannot
//! undo that. The files of a shim that is still alive are left to it.
//!
//! Leaves to [`crate::shim`] when to keep and to [`crate::ops::recover`] when to replay.

use std::collections::BTreeMap;
use std::fs::{self, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::guard::identity;
use crate::guard::lease::Lease;
use crate::guard::ledger::{Finish, Outcome, Resolution, Run, format_usec};
use crate::paths;
use crate::store::{RunQuery, Store, StoreError};
use crate::systemd::journal::{self, Event, Kind};

/// One kept outcome: the run, its grant, the shim that wrote it, and how the run ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Kept {
    /// [`Store::describe`] of the store the run belongs to.
    pub store: String,
    /// Job name.
    pub job: String,
    /// Run id (32 hex digits).
    pub run_id: String,
    /// The slot, µs since the Unix epoch.
    pub slot_usec: i64,
    /// Fencing token of the run's grant.
    pub token: i64,
    /// [`Lease::renewal`] of the grant when the outcome was kept, or last rewritten (0 in
    /// a file written before renewal generations).
    #[serde(default)]
    pub renewal: i64,
    /// The generation of a renewal about to be sent, or sent and its answer lost: the
    /// store may hold it instead ([`crate::shim::renew::Renewal::draw`]). The shim writes
    /// the kept files again before each renewal.
    #[serde(default)]
    pub renewing: Option<i64>,
    /// [`crate::guard::lease::Holder::id`] of the grant.
    pub holder: String,
    /// Host name of the holder.
    pub host: String,
    /// Boot id of the shim that wrote the file.
    pub boot_id: String,
    /// Pid of that shim.
    pub pid: u32,
    /// Its start time, clock ticks since boot (`/proc/PID/stat` field 22).
    pub pid_start: u64,
    /// How the run ended: [`Outcome::as_str`].
    pub outcome: String,
    /// See [`Finish::reason`].
    pub reason: Option<String>,
    /// See [`Finish::exit_status`].
    pub exit_status: Option<i32>,
    /// See [`Finish::report`].
    pub report: BTreeMap<String, String>,
    /// See [`Finish::resolution`]: [`Resolution::as_str`].
    pub resolution: Option<String>,
    /// When the command ended, µs since the Unix epoch, this host's clock:
    /// [`Finish::ended_at`]. Absent in a file written before.
    #[serde(default)]
    pub ended_at: Option<i64>,
}

impl Kept {
    /// The kept form of `finish` for `run` under `lease` in `store` (its describe()),
    /// with the generation of a renewal in doubt, `renewing`.
    pub fn new(
        store: &str,
        lease: &Lease,
        renewing: Option<i64>,
        run: &Run,
        finish: &Finish,
    ) -> Self {
        Kept {
            store: store.to_string(),
            job: run.job.clone(),
            run_id: run.run_id.clone(),
            slot_usec: run.slot.usec,
            token: lease.token,
            renewal: lease.renewal,
            renewing,
            holder: lease.holder.clone(),
            host: lease.host.clone(),
            boot_id: run.boot_id.clone(),
            pid: run.pid,
            pid_start: run.pid_start,
            outcome: finish.outcome.as_str().to_string(),
            reason: finish.reason.clone(),
            exit_status: finish.exit_status,
            report: finish.report.clone(),
            resolution: finish.resolution.map(|r| r.as_str().to_string()),
            ended_at: finish.ended_at,
        }
    }

    /// The grant as kept, presenting each generation the store may hold for it: the
    /// confirmed one, then the one in doubt.
    fn leases(&self) -> Vec<Lease> {
        let lease = Lease {
            job: self.job.clone(),
            holder: self.holder.clone(),
            host: self.host.clone(),
            token: self.token,
            acquired_at: 0,
            expire_at: 0,
            renewal: self.renewal,
        };
        let mut out = vec![lease.clone()];
        out.extend(
            self.renewing
                .filter(|g| *g != self.renewal)
                .map(|renewal| Lease { renewal, ..lease }),
        );
        out
    }

    fn finish(&self) -> Option<Finish> {
        Some(Finish {
            outcome: self.outcome.parse().ok()?,
            reason: self.reason.clone(),
            exit_status: self.exit_status,
            report: self.report.clone(),
            resolution: match &self.resolution {
                Some(r) => Some(r.parse::<Resolution>().ok()?),
                None => None,
            },
            ended_at: self.ended_at,
        })
    }

    /// Whether the shim that wrote it still runs (this boot, same pid and start time).
    fn writer_alive(&self) -> bool {
        self.boot_id == identity::boot_id() && identity::process_alive(self.pid, self.pid_start)
    }
}

/// The runtime copy's directory: `<runtime dir>/pending` (a tmpfs under `/run`).
pub fn runtime_dir() -> PathBuf {
    paths::runtime_dir().join("pending")
}

/// The durable copy's directory: `<state dir>/pending`.
pub fn state_dir() -> PathBuf {
    paths::state_dir().join("pending")
}

/// Writes `kept` as `<dir>/<run id>.json` (mode 0600, directory 0700), through a
/// temporary file and a rename, so a reader never sees half a file; with `durable`, the
/// file and the directory are fsynced before this returns. Returns the file's path.
///
/// # Errors
/// The I/O error (e.g. `ENOSPC`).
pub fn keep(dir: &Path, kept: &Kept, durable: bool) -> std::io::Result<PathBuf> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    let path = dir.join(format!("{}.json", kept.run_id));
    let tmp = dir.join(format!(".{}.json.tmp", kept.run_id));
    let text = serde_json::to_vec(kept).map_err(std::io::Error::other)?;
    let written = (|| {
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(&text)?;
        if durable {
            f.sync_all()?;
        }
        fs::rename(&tmp, &path)?;
        if durable {
            fs::File::open(dir)?.sync_all()?;
        }
        Ok(())
    })();
    if written.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    written.map(|()| path)
}

/// Removes both copies of run `run_id`'s kept outcome (missing ones are fine).
pub fn forget(run_id: &str) {
    for dir in [runtime_dir(), state_dir()] {
        let _ = fs::remove_file(dir.join(format!("{run_id}.json")));
    }
}

/// The kept outcomes of `job` in `store` (a describe()), from both directories, one per
/// run id. A file that cannot be read is reported on stderr and left.
pub fn load(job: &str, store: &str) -> Vec<Kept> {
    let mut out: Vec<Kept> = Vec::new();
    for dir in [runtime_dir(), state_dir()] {
        let Ok(entries) = fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let path = e.path();
            if path.extension().is_none_or(|x| x != "json") {
                continue;
            }
            let parsed = fs::read(&path)
                .map_err(|e| e.to_string())
                .and_then(|b| serde_json::from_slice::<Kept>(&b).map_err(|e| e.to_string()));
            match parsed {
                Ok(k) if k.job == job && k.store == store => {
                    if !out.iter().any(|o| o.run_id == k.run_id) {
                        out.push(k);
                    }
                }
                Ok(_) => {}
                Err(e) => eprintln!(
                    "jobguard: {job}: ignored the kept outcome {}: {e}",
                    path.display()
                ),
            }
        }
    }
    out.sort_by_key(|k| k.slot_usec);
    out
}

/// What [`settle`] did with one kept outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settled {
    /// The store has it now.
    Recorded,
    /// Left for later: its shim still runs, or another attempt at the slot runs now.
    Waiting,
    /// Dropped: the record had moved on (see the message on stderr and in the journal).
    Dropped,
}

/// Records the kept outcomes of the job named `job` in `store` ([`load`], then [`settle`]
/// each), whether or not the job is still in the job list, except those of another shim
/// that still runs (it records its own). Returns how many the store has now.
///
/// # Errors
/// The store's; the outcome is then kept for the next try.
pub fn replay(store: &mut dyn Store, job: &str) -> Result<usize, StoreError> {
    let mut n = 0;
    for kept in load(job, &store.describe()) {
        if kept.writer_alive() && kept.pid != std::process::id() {
            continue;
        }
        if settle(store, &kept, true)? == Settled::Recorded {
            n += 1;
        }
    }
    Ok(n)
}

/// Records one kept outcome if its record still waits for it (see the module doc), and
/// removes the files unless it has to wait. With `announce`, a recorded outcome is logged
/// as a late finish event (the shim logs its own); a dropped one always is.
///
/// # Errors
/// The store's; the files are then left.
pub fn settle(store: &mut dyn Store, kept: &Kept, announce: bool) -> Result<Settled, StoreError> {
    let Some(finish) = kept.finish() else {
        return Ok(drop_kept(kept, "it cannot be read".to_string()));
    };
    let runs = store.runs(&RunQuery {
        job: Some(kept.job.clone()),
        slot: Some(kept.slot_usec),
        ..RunQuery::default()
    })?;
    let Some(mine) = runs.iter().find(|r| r.run_id == kept.run_id) else {
        return Ok(drop_kept(kept, "the store has no such run".to_string()));
    };
    if mine.outcome == finish.outcome && mine.fencing_token == kept.token {
        // The shim's own write reached the store after all (a request in flight when the
        // connection was lost): nothing is left to do.
        forget(&kept.run_id);
        return Ok(Settled::Recorded);
    }
    if mine.outcome != Outcome::Running || mine.fencing_token != kept.token {
        let why = format!(
            "the record is {} ({}) already",
            mine.outcome,
            mine.reason.as_deref().unwrap_or("-")
        );
        return Ok(drop_kept(kept, why));
    }
    if runs
        .iter()
        .any(|r| r.run_id != kept.run_id && r.outcome == Outcome::Running)
    {
        return Ok(Settled::Waiting);
    }
    if finish.outcome == Outcome::Succeeded
        && let Some(other) = runs
            .iter()
            .find(|r| r.run_id != kept.run_id && r.outcome == Outcome::Succeeded && !r.forced)
    {
        let why = format!(
            "run {} on host {} succeeded at the slot since: it ran twice",
            other.run_id, other.host
        );
        return Ok(drop_kept(kept, why));
    }
    let mut recorded = false;
    for lease in kept.leases() {
        if store.finish_kept(&lease, &kept.run_id, &finish)?.recorded {
            recorded = true;
            break;
        }
    }
    if !recorded {
        // The kept file names every generation its shim may have written (it is written
        // again before each renewal): a lease under another one is a copy's.
        let copy = store.lease(&kept.job)?.is_some_and(|l| {
            l.holder == kept.holder && l.token == kept.token && l.renewal != kept.renewal
        });
        let why = if copy {
            "a copy of its holder (a machine resumed from the same snapshot) holds the lease"
        } else {
            "the record moved on meanwhile"
        };
        return Ok(drop_kept(kept, why.to_string()));
    }
    forget(&kept.run_id);
    if !announce {
        return Ok(Settled::Recorded);
    }
    let mut ev = Event::new(
        kind_of(finish.outcome),
        &kept.job,
        format!(
            "finished slot {}: {} ({}, exit status {}); recorded late, from the outcome kept on host {} (run {})",
            format_usec(kept.slot_usec),
            finish.outcome,
            finish.reason.as_deref().unwrap_or("-"),
            finish
                .exit_status
                .map_or_else(|| "-".to_string(), |s| s.to_string()),
            kept.host,
            kept.run_id
        ),
    );
    ev.slot = Some(format_usec(kept.slot_usec));
    ev.run_id = Some(kept.run_id.clone());
    ev.reason = finish.reason.clone();
    ev.outcome = Some(finish.outcome);
    ev.exit_status = finish.exit_status;
    ev.fencing_token = Some(kept.token);
    journal::emit(&ev);
    Ok(Settled::Recorded)
}

/// The journal kind of a finish with `outcome`.
pub fn kind_of(outcome: Outcome) -> Kind {
    match outcome {
        Outcome::Succeeded => Kind::Finished,
        Outcome::Interrupted => Kind::Interrupted,
        Outcome::LeaseLost => Kind::LeaseLost,
        _ => Kind::Failed,
    }
}

fn drop_kept(kept: &Kept, why: String) -> Settled {
    forget(&kept.run_id);
    let outcome = kept.outcome.parse().unwrap_or(Outcome::Failed);
    let mut ev = Event::new(
        kind_of(outcome),
        &kept.job,
        format!(
            "the outcome of run {} (slot {}: {}) kept on host {} was not recorded: {why}",
            kept.run_id,
            format_usec(kept.slot_usec),
            kept.outcome,
            kept.host
        ),
    );
    ev.slot = Some(format_usec(kept.slot_usec));
    ev.run_id = Some(kept.run_id.clone());
    ev.fencing_token = Some(kept.token);
    journal::emit(&ev);
    Settled::Dropped
}

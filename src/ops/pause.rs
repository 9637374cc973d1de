//! Pausing a job across the fleet: `jobguard pause JOB [--until TIME]` and `jobguard
//! resume JOB` write the job's pause windows into its store, where every host that shares
//! the store reads them.
//!
//! A *window* starts when `pause` is run and ends at its `--until` time, or when `resume`
//! is run (both by the store's clock, [`crate::store::Store::now`]); without `--until`
//! it stays open until `resume`. While a window covers now, no host starts the job by its
//! timer or a catch-up (journal event `skipped`, reason `paused`). A slot whose elapse
//! lies in a window, `since ≤ slot < until`, is *paused*: no trigger or catch-up runs it
//! later, and `status`, `audit`, `recover` and `metrics` list it as paused, never as
//! missed. What a person asks for still runs: `jobguard rerun`, `jobguard run --slot …
//! --force`.
//!
//! A job paused in its job list (`enabled = false`) is paused on that host alone; this is
//! the fleet's. The windows are one fleet record per job ([`crate::store::Store::put_beat`]
//! under [`key`]): `pause` and `resume` read it, change it and write it whole, so two
//! people pausing one job in the same instant keep the later's change. Windows that ended
//! before the job's retention are dropped on the next write, as its records are.

use serde::{Deserialize, Serialize};

use crate::guard::ledger::format_usec;
use crate::joblist::job::Job;
use crate::store::{Store, StoreError};

/// The start of every pause record's key; no heartbeat's key has a `/` before its first
/// space ([`crate::ops::fleet::Beat::key`] starts with the host name).
pub const PREFIX: &str = "pause/";

/// The key of `job`'s pause windows among the store's fleet records.
pub fn key(job: &str) -> String {
    format!("{PREFIX}{job}")
}

/// Whether a fleet record's key holds pause windows (not a heartbeat).
pub fn is_key(key: &str) -> bool {
    key.starts_with(PREFIX)
}

/// One pause of a job. Moments are µs since the epoch, by the store's clock.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Window {
    /// When `pause` was run: the first moment paused.
    pub since: i64,
    /// The first moment no longer paused: the `--until` time, or when `resume` was run;
    /// `None` while it waits for `resume`.
    pub until: Option<i64>,
    /// Who paused it (`user@host`).
    pub by: String,
    /// Why, as given with `--reason`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Who ended it with `resume` (`user@host`), if anyone did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resumed_by: Option<String>,
}

impl Window {
    /// Whether the slot (or moment) `usec` lies in the window.
    pub fn covers(&self, usec: i64) -> bool {
        self.since <= usec && self.until.is_none_or(|u| usec < u)
    }

    /// `[since, until)` with an open end as `i64::MAX`.
    pub fn span(&self) -> (i64, i64) {
        (self.since, self.until.unwrap_or(i64::MAX))
    }

    /// For people: `paused since T until 2026-12-08T14:00:00Z by root@db-1: reason`
    /// (`until resumed` while it waits for `resume`).
    pub fn describe(&self) -> String {
        let until = self.until.map_or("until resumed".to_string(), |u| {
            format!("until {}", format_usec(u))
        });
        let reason = self
            .reason
            .as_deref()
            .map(|r| format!(": {r}"))
            .unwrap_or_default();
        format!(
            "paused since {} {until} by {}{reason}",
            format_usec(self.since),
            self.by
        )
    }
}

/// A job's pause windows, oldest first, as its store keeps them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pauses {
    /// The windows, oldest first; they do not overlap.
    pub windows: Vec<Window>,
}

impl Pauses {
    /// The window `usec` (a slot, or now) lies in.
    pub fn covering(&self, usec: i64) -> Option<&Window> {
        self.windows.iter().find(|w| w.covers(usec))
    }

    /// Every window as `[since, until)` ([`Window::span`]), for [`crate::ops::audit::Scope`].
    pub fn spans(&self) -> Vec<(i64, i64)> {
        self.windows.iter().map(Window::span).collect()
    }
}

/// Reads `job`'s pause windows from `store` (one round trip); none when it was never
/// paused.
///
/// # Errors
/// The store's; [`StoreError::Invalid`] when the record is not pause windows.
pub fn read(store: &mut dyn Store, job: &str) -> Result<Pauses, StoreError> {
    match store.read_beat(&key(job))? {
        None => Ok(Pauses::default()),
        Some(text) => serde_json::from_str(&text).map_err(|e| StoreError::Invalid {
            store: store.describe(),
            detail: format!("pause record of {job}: {e}"),
        }),
    }
}

/// `job`'s windows for [`pause`] and [`resume`] to change: a record that cannot be read
/// (written by hand, or cut) is replaced, with a warning on stderr, so that a person can
/// always end what it holds; the runs and reports that meet it fail until then.
/// Also returns whether the record was unreadable (it must be written, changed or not).
fn read_to_change(store: &mut dyn Store, job: &str) -> Result<(Pauses, bool), StoreError> {
    match read(store, job) {
        Err(StoreError::Invalid { detail, .. }) => {
            eprintln!(
                "jobguard: warning: {job}: {detail}: replaced; the windows it held are lost, and their slots count as missed"
            );
            Ok((Pauses::default(), true))
        }
        got => got.map(|p| (p, false)),
    }
}

/// The pause windows that judge `job`'s slots: none for a job paused in its job list
/// (`enabled = false`), whose slots are not judged at all; else [`read`].
///
/// # Errors
/// As [`read`].
pub fn of_job(store: &mut dyn Store, job: &Job) -> Result<Pauses, StoreError> {
    if job.enabled {
        read(store, &job.name)
    } else {
        Ok(Pauses::default())
    }
}

/// What [`pause`] and [`resume`] could not do.
#[derive(Debug, thiserror::Error)]
pub enum PauseError {
    /// The store's.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// `--until` is not after the store's now.
    #[error("--until {until} is not after the store's time {now}")]
    UntilPassed {
        /// The time asked for.
        until: String,
        /// The store's time.
        now: String,
    },
}

impl crate::exit::Status for PauseError {
    /// The store's; 2 (usage) for an `--until` that has passed.
    fn exit_status(&self) -> u8 {
        match self {
            PauseError::Store(e) => crate::exit::Status::exit_status(e),
            PauseError::UntilPassed { .. } => crate::exit::USAGE,
        }
    }
}

/// Pauses `job` from the store's now until `until` (µs since the epoch; `None`: until
/// `resume`), by `by` for `reason`. A job already paused keeps its window (and who paused
/// it), whose end and reason become these. Returns the window as written.
///
/// # Errors
/// The store's; [`PauseError::UntilPassed`] when `until` is not after the store's now.
pub fn pause(
    store: &mut dyn Store,
    job: &Job,
    until: Option<i64>,
    by: &str,
    reason: Option<&str>,
) -> Result<Window, PauseError> {
    let now = store.now()?;
    if let Some(u) = until
        && u <= now
    {
        return Err(PauseError::UntilPassed {
            until: format_usec(u),
            now: format_usec(now),
        });
    }
    let (mut p, _) = read_to_change(store, &job.name)?;
    let window = match p.windows.iter_mut().find(|w| w.covers(now)) {
        // Who paused it first stays named; the end and the reason are the new ones.
        Some(w) => {
            w.until = until;
            w.reason = reason.map(str::to_string).or(w.reason.take());
            w.clone()
        }
        None => {
            let w = Window {
                since: now,
                until,
                by: by.to_string(),
                reason: reason.map(str::to_string),
                resumed_by: None,
            };
            p.windows.push(w.clone());
            w
        }
    };
    write(store, job, p, now)?;
    Ok(window)
}

/// Ends `job`'s open window at the store's now. Returns it, or `None` when the job was
/// not paused (nothing is written).
///
/// # Errors
/// The store's.
pub fn resume(store: &mut dyn Store, job: &Job, by: &str) -> Result<Option<Window>, StoreError> {
    let now = store.now()?;
    let (mut p, replaced) = read_to_change(store, &job.name)?;
    let Some(w) = p.windows.iter_mut().find(|w| w.covers(now)) else {
        if replaced {
            write(store, job, p, now)?;
        }
        return Ok(None);
    };
    w.until = Some(now);
    w.resumed_by = Some(by.to_string());
    let ended = w.clone();
    write(store, job, p, now)?;
    Ok(Some(ended))
}

/// Writes `p` for `job`, without the windows that ended before the job's retention
/// ([`crate::ops::retention::kept_since`] at `now`).
fn write(store: &mut dyn Store, job: &Job, mut p: Pauses, now: i64) -> Result<(), StoreError> {
    if let Some(kept) = crate::ops::retention::kept_since(now, job.retention) {
        p.windows.retain(|w| w.until.is_none_or(|u| u >= kept));
    }
    p.windows.sort_by_key(|w| w.since);
    let text = serde_json::to_string(&p).expect("pause windows are plain data");
    store.put_beat(&key(&job.name), &text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(since: i64, until: Option<i64>) -> Window {
        Window {
            since,
            until,
            by: "root@a".into(),
            reason: None,
            resumed_by: None,
        }
    }

    #[test]
    fn a_window_covers_from_its_start_up_to_but_not_its_end() {
        let p = Pauses {
            windows: vec![w(10, Some(20)), w(30, None)],
        };
        assert!(p.covering(9).is_none());
        assert_eq!(p.covering(10), Some(&p.windows[0]));
        assert_eq!(p.covering(19), Some(&p.windows[0]));
        assert!(p.covering(20).is_none());
        assert!(p.covering(29).is_none());
        assert_eq!(p.covering(i64::MAX - 1), Some(&p.windows[1]));
        assert_eq!(p.spans(), vec![(10, 20), (30, i64::MAX)]);
    }

    #[test]
    fn a_record_written_by_an_older_version_reads_without_the_optional_fields() {
        let p: Pauses =
            serde_json::from_str(r#"{"windows":[{"since":1,"until":null,"by":"x"}]}"#).unwrap();
        assert_eq!(
            p.windows,
            vec![Window {
                by: "x".into(),
                ..w(1, None)
            }]
        );
        assert!(is_key(&key("sync")) && !is_key("pause 0123 abcd"));
    }
}

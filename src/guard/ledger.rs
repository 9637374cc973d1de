//! The run ledger: one record per attempt at a (job, slot).
//!
//! States: `running` → `succeeded` | `failed` | `lease_lost`, or `running` →
//! `interrupted` when the holder is found gone (recover). A slot is *done* once one of
//! its records `succeeded` or a person resolved it as done; a done slot is skipped by any
//! later trigger. At most one record per (job, slot) may be `succeeded`; stores enforce
//! that. The store operations are methods of [`crate::store::Store`].

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde::Serialize;

/// Report key of a catch-up decision: the newest slot recorded before the run's claim, RFC
/// 3339 UTC with µs where there are any. Every elapse strictly between it and the run's
/// slot was passed over by that claim. Written by the shim with the run's outcome (the
/// `jobguard.` prefix of report keys is reserved: a job's own key of that name is replaced).
pub const PASSED_OVER_AFTER: &str = "jobguard.passed_over_after";
/// Report key beside [`PASSED_OVER_AFTER`]: how many elapses were passed over (for people;
/// the interval is what counts).
pub const PASSED_OVER_COUNT: &str = "jobguard.passed_over";

/// Report key of the schedule a run's slot was an elapse of (`jobguard audit`'s
/// `schedule_fingerprint`), written by the shim with every outcome. Gaps between records
/// are judged only under the job's current schedule: an edited schedule's elapses are not
/// compared with the records of the old one.
pub const SCHEDULE: &str = "jobguard.schedule";

/// Whether `run` tells which schedule it was made under: it carries the [`SCHEDULE`] key,
/// or it succeeded or failed (written before the key existed: another schedule's). A
/// record another party ended (cut off, still running) has no report and tells nothing.
/// The audit judges gaps between records by it, and the SQL stores ask the same in their
/// window query.
pub fn names_a_schedule(run: &Run) -> bool {
    run.report.contains_key(SCHEDULE) || matches!(run.outcome, Outcome::Succeeded | Outcome::Failed)
}

/// A duration in µs as `1h 02m 03s`, `4m 05s` or `6.2s`.
pub fn format_span(usec: i64) -> String {
    let s = usec.max(0) / 1_000_000;
    if s >= 3600 {
        format!("{}h {:02}m {:02}s", s / 3600, (s % 3600) / 60, s % 60)
    } else if s >= 60 {
        format!("{}m {:02}s", s / 60, s % 60)
    } else {
        format!("{:.1}s", usec.max(0) as f64 / 1e6)
    }
}

/// State of one run record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The command is (or was, if the holder died) running.
    Running,
    /// The command exited with status 0.
    Succeeded,
    /// The command exited non-zero, died from a signal, timed out or could not start.
    Failed,
    /// The holder went away mid-run (crash, power cut, reboot, shutdown).
    Interrupted,
    /// The shim could not renew its lease and stopped the command.
    LeaseLost,
}

impl Outcome {
    /// The name stored in the ledger and shown to people.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Running => "running",
            Outcome::Succeeded => "succeeded",
            Outcome::Failed => "failed",
            Outcome::Interrupted => "interrupted",
            Outcome::LeaseLost => "lease_lost",
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Outcome {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s {
            "running" => Outcome::Running,
            "succeeded" => Outcome::Succeeded,
            "failed" => Outcome::Failed,
            "interrupted" => Outcome::Interrupted,
            "lease_lost" => Outcome::LeaseLost,
            _ => return Err(format!("unknown outcome {s:?}")),
        })
    }
}

/// What happens next to an `interrupted` or `lease_lost` record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Resolution {
    /// A re-run of the slot is queued (`on_interrupted = "rerun"` or `resolve --rerun`).
    Queued,
    /// The slot waits for a person (`on_interrupted = "hold"`).
    Held,
    /// A later attempt at the slot took it over.
    Rerun,
    /// A person declared the slot done (`resolve --done`): later triggers skip it.
    Done,
}

impl Resolution {
    /// The name stored in the ledger.
    pub fn as_str(self) -> &'static str {
        match self {
            Resolution::Queued => "queued",
            Resolution::Held => "held",
            Resolution::Rerun => "rerun",
            Resolution::Done => "done",
        }
    }
}

impl FromStr for Resolution {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s {
            "queued" => Resolution::Queued,
            "held" => Resolution::Held,
            "rerun" => Resolution::Rerun,
            "done" => Resolution::Done,
            _ => return Err(format!("unknown resolution {s:?}")),
        })
    }
}

/// A scheduled slot: one elapse of a job's calendar.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct Slot {
    /// The elapse, µs since the Unix epoch (UTC).
    pub usec: i64,
    /// IANA name of the zone the calendar was evaluated in (for display).
    pub zone: String,
}

impl Slot {
    /// RFC 3339 in UTC with a `Z`, seconds precision unless the slot has a fraction,
    /// e.g. `2026-11-29T02:00:00Z`. This is `JOBGUARD_SLOT`.
    pub fn rfc3339(&self) -> String {
        format_usec(self.usec)
    }

    /// The idempotency key of the slot: `<job>@<slot RFC 3339>`, the same for every attempt.
    pub fn idempotency_key(&self, job: &str) -> String {
        format!("{job}@{}", self.rfc3339())
    }
}

/// Formats µs since the epoch as RFC 3339 UTC (`2026-11-29T02:00:00Z`, with a fraction
/// only when there is one).
pub fn format_usec(usec: i64) -> String {
    match jiff::Timestamp::from_microsecond(usec) {
        Ok(ts) => {
            if usec % 1_000_000 == 0 {
                ts.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
            } else {
                ts.strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
            }
        }
        Err(_) => format!("@{usec}us"),
    }
}

/// One record of the ledger.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Run {
    /// 32 lower-case hex digits, unique.
    pub run_id: String,
    /// Job name.
    pub job: String,
    /// The slot this attempt belongs to.
    pub slot: Slot,
    /// 1 for the first attempt at the slot, then 2, 3, ...
    pub attempt: i64,
    /// Current state.
    pub outcome: Outcome,
    /// Why: for `interrupted` e.g. `boot`, `process-gone`, `shutdown`, `lease-expired`;
    /// for `failed` e.g. `exit`, `signal`, `timeout`, `exec`.
    pub reason: Option<String>,
    /// Exit status as the shim exits with it (128+N for signal N).
    pub exit_status: Option<i32>,
    /// Started with `--force` over a done slot.
    pub forced: bool,
    /// What started it: `timer`, `manual`, `rerun`.
    pub trigger: String,
    /// Host name of the holder.
    pub host: String,
    /// Machine id of the holder.
    pub machine_id: String,
    /// Boot id of the holder.
    pub boot_id: String,
    /// Pid of the shim.
    pub pid: u32,
    /// Start time of the shim process, clock ticks since boot.
    pub pid_start: u64,
    /// `INVOCATION_ID` of the systemd unit, if any.
    pub invocation_id: Option<String>,
    /// µs since the epoch, store clock.
    pub started_at: i64,
    /// µs since the epoch, store clock; `None` while running. For a run found cut
    /// (`interrupted`), the latest it can have run ([`crate::store::rules::cut_end`]).
    pub finished_at: Option<i64>,
    /// Fencing token of the lease the run held.
    pub fencing_token: i64,
    /// Counters the job reported (`key=value` lines of `JOBGUARD_REPORT`).
    pub report: BTreeMap<String, String>,
    /// For interrupted / lease_lost records: what happens next.
    pub resolution: Option<Resolution>,
}

impl Run {
    /// The holder that made this record: the lease holder identity its grant carried.
    pub fn holder(&self) -> crate::guard::lease::Holder {
        crate::guard::lease::Holder {
            machine_id: self.machine_id.clone(),
            boot_id: self.boot_id.clone(),
            pid: self.pid,
            pid_start: self.pid_start,
            host: self.host.clone(),
        }
    }
}

/// The parts of a new `running` record that the shim supplies; the store adds the
/// attempt number, fencing token and `started_at`.
#[derive(Debug, Clone)]
pub struct NewRun {
    /// 32 lower-case hex digits.
    pub run_id: String,
    /// Job name.
    pub job: String,
    /// Slot.
    pub slot: Slot,
    /// `--force` given.
    pub forced: bool,
    /// `timer`, `manual` or `rerun`.
    pub trigger: String,
    /// `INVOCATION_ID`, if any.
    pub invocation_id: Option<String>,
}

/// How a run ended, as the shim records it.
#[derive(Debug, Clone)]
pub struct Finish {
    /// `Succeeded`, `Failed` or `LeaseLost` (`Interrupted` for a shutdown cut).
    pub outcome: Outcome,
    /// See [`Run::reason`].
    pub reason: Option<String>,
    /// See [`Run::exit_status`].
    pub exit_status: Option<i32>,
    /// Counters reported by the job.
    pub report: BTreeMap<String, String>,
    /// For `Interrupted`: what happens next (queued re-run or held for a person).
    pub resolution: Option<Resolution>,
    /// When the command ended, µs since the Unix epoch by its host's clock (`None`: no
    /// command ran). Used only by an outcome the host kept and records later
    /// ([`crate::store::Store::finish_kept`]): the record's `finished_at` is then this
    /// moment, not the moment of the late write, kept within the record's start and the
    /// latest its lease let it run ([`crate::store::rules::cut_end`]). Every other write
    /// records the store's time of the write.
    pub ended_at: Option<i64>,
}

impl crate::guard::identity::Record for Run {
    fn machine_id(&self) -> &str {
        &self.machine_id
    }
    fn boot_id(&self) -> &str {
        &self.boot_id
    }
    fn started_at(&self) -> i64 {
        self.started_at
    }
}

//! Prometheus metrics of every job: `jobguard metrics` prints them, and `jobguard recover`
//! writes them to a node_exporter textfile-collector file ([`write_textfile`]) on every
//! pass when the job list names one (`[metrics] textfile`).
//!
//! The format is Prometheus' text exposition format 0.0.4
//! (<https://prometheus.io/docs/instrumenting/exposition_formats/>): every family has
//! `# HELP` and `# TYPE`, its samples follow together, label values escape `\`, `"` and
//! newline, help texts `\` and newline. Names follow Prometheus' naming conventions
//! (<https://prometheus.io/docs/practices/naming/>): base units (seconds, timestamps in
//! seconds since the epoch).
//!
//! What is read, per job, and over which window:
//! - `jobguard_ledger_records` and `jobguard_ledger_runs` count the job's records in its
//!   store now ([`Store::outcome_counts`]: one `GROUP BY` query on SQLite and PostgreSQL,
//!   every record read on the other stores). They are gauges, not counters: retention
//!   deletes records, and a counter that went down would read as a reset to Prometheus;
//!   no series here is a counter;
//! - the last success is the newest `succeeded` record by start (one query, one record);
//! - the last outcome and duration, the running records, and the missed, held, failed and
//!   queued slots come from the newest [`RECENT`] records and the older slots an attempt
//!   failed or was cut off in ([`crate::ops::audit::judged_records`]), judged by
//!   [`audit::status_findings`] exactly as `jobguard status` judges them (missed slots
//!   after the newest record and between the records read); `jobguard_job_needs_attention` is
//!   [`audit::job_needs_attention`] of those findings, or a record among them of another
//!   machine with this machine id (`jobguard_machine_id_shared`,
//!   [`crate::guard::identity::Installation::twin`]). systemd's timers are not read here,
//!   so a timer that is not waiting counts only in `jobguard status`;
//! - the lease is the store's lease row, listed while unexpired by the store's clock;
//! - `jobguard_paused` is 1 while the job is paused across the fleet ([`crate::ops::pause`]);
//!   elapses in its pause windows are not missed.
//!
//! A job whose store cannot be opened or read is still listed: `jobguard_store_up` 0 and
//! its schedule interval, nothing from the ledger. Collecting ([`collect`]) does the
//! reads; [`render`] is pure.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::Path;

use crate::guard::ledger::Outcome;
use crate::joblist::config::JobSet;
use crate::joblist::job::Job;
use crate::ops::audit::{self, FindingKind};
use crate::store::{RunQuery, Store, StoreError};

/// How many recent records per job are read for the last outcome, running runs and
/// slots that need attention (as `jobguard status`).
pub const RECENT: usize = 200;

/// The outcomes of finished records, in the order their series are written.
const FINISHED: [Outcome; 4] = [
    Outcome::Succeeded,
    Outcome::Failed,
    Outcome::Interrupted,
    Outcome::LeaseLost,
];

/// Debian's default directory of prometheus-node-exporter's textfile collector
/// (`--collector.textfile.directory`).
pub const DEBIAN_TEXTFILE_DIR: &str = "/var/lib/prometheus/node-exporter";

/// One job's metrics.
#[derive(Debug, Clone, PartialEq)]
pub struct JobMetrics {
    /// The job's name.
    pub job: String,
    /// The gap between the schedule's next two elapses after now, seconds; `None` when
    /// fewer than two are left.
    pub interval_seconds: Option<f64>,
    /// What the ledger says; `None` when the store could not be opened or read.
    pub ledger: Option<LedgerMetrics>,
}

/// What one job's ledger and lease say. Times are µs since the epoch.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LedgerMetrics {
    /// `finished_at` of the newest `succeeded` record.
    pub last_success: Option<i64>,
    /// The newest finished record (by slot, then start): outcome, slot, duration (µs).
    pub last: Option<(Outcome, i64, i64)>,
    /// Records by outcome over the whole ledger.
    pub counts: Vec<(Outcome, u64)>,
    /// Slots missed after the newest record.
    pub missed: usize,
    /// Slots held for a person.
    pub held: usize,
    /// Slots whose latest attempt failed.
    pub failed: usize,
    /// Slots cut off, waiting for their queued re-run.
    pub queued: usize,
    /// `running` records whose holder is gone.
    pub orphaned: usize,
    /// Host of each `running` record.
    pub running: Vec<String>,
    /// The unexpired lease: holder's host and expiry.
    pub lease: Option<(String, i64)>,
    /// [`audit::job_needs_attention`], or a record of another machine with this machine
    /// id.
    pub needs_attention: bool,
    /// Recent records that prove another machine with this machine id
    /// ([`crate::guard::identity::Installation::twin`]).
    pub machine_id_shared: usize,
    /// The job is paused across the fleet now ([`crate::ops::pause`]).
    pub paused: bool,
}

/// Every job's metrics and what could not be read.
#[derive(Debug, Clone, Default)]
pub struct Collected {
    /// One entry per job of the job list, by name.
    pub jobs: Vec<JobMetrics>,
    /// What went wrong (`job: …`; an address's own error names its job), with its exit
    /// status, for each job whose store could not be read, and `store: fleet: …` for each store whose fleet could not.
    pub problems: Vec<crate::exit::Error>,
    /// How many problems the job list has ([`JobSet::errors`]): files not read, keys
    /// refused, jobs left out.
    pub list_errors: usize,
    /// The jobs left out by an error in their definition (they have no timer), by name.
    pub refused: Vec<String>,
    /// The fleet of each store of the job list that could be read ([`crate::ops::fleet`]),
    /// with the store's address, masked.
    pub fleets: Vec<(String, crate::ops::fleet::Fleet)>,
}

/// The interval of a job's schedule: the gap between its next two elapses after `now`
/// (µs since the epoch), in seconds.
pub fn interval_seconds(job: &Job, now: i64) -> Option<f64> {
    let t = jiff::Timestamp::from_microsecond(now).ok()?;
    let a = job.calendar.next_elapse(t)?;
    let b = job.calendar.next_elapse(a)?;
    Some(seconds(b.as_microsecond() - a.as_microsecond()))
}

/// µs as seconds.
fn seconds(usec: i64) -> f64 {
    usec as f64 / 1e6
}

/// Reads one job's ledger and lease. `now` and `boot` (µs since the epoch) bound the
/// missed slots as in `jobguard status`.
///
/// # Errors
/// Store errors.
pub fn read_job(
    store: &mut dyn Store,
    job: &Job,
    now: i64,
    boot: i64,
) -> Result<LedgerMetrics, StoreError> {
    let (recent, read_back_to) = crate::ops::audit::judged_records(store, job, RECENT)?;
    let last_success = store
        .runs(&RunQuery {
            job: Some(job.name.clone()),
            outcomes: vec![Outcome::Succeeded],
            limit: 1,
            ..RunQuery::default()
        })?
        .first()
        .map(|r| r.finished_at.unwrap_or(r.started_at));
    let counts = store.outcome_counts(&job.name)?;
    let lease = store.lease(&job.name)?;
    let store_now = store.now()?;
    let orphans = crate::ops::recover::orphans(store, &recent)?;
    let mut scope = audit::recent_scope(job, now, boot, read_back_to);
    // Elapses in a pause window are paused, not missed.
    let pauses = crate::ops::pause::of_job(store, job)?;
    scope.paused = pauses.spans();
    // A paused job expects no slot: none of its slots is missed (as in `status`).
    let mut findings = audit::status_findings(
        &recent,
        job.enabled.then_some(&job.calendar),
        &orphans,
        &scope,
    );
    crate::ops::audit::confirm_missed(store, &job.name, &mut findings)?;
    let count = |kind: FindingKind| findings.iter().filter(|f| f.kind == kind).count();
    let twins = crate::guard::identity::Installation::here()
        .twins(&recent)
        .len();
    let last = recent
        .iter()
        .filter(|r| r.outcome != Outcome::Running)
        .max_by_key(|r| (r.slot.usec, r.started_at))
        .map(|r| {
            let took = r.finished_at.map_or(0, |f| (f - r.started_at).max(0));
            (r.outcome, r.slot.usec, took)
        });
    Ok(LedgerMetrics {
        last_success,
        last,
        counts,
        missed: count(FindingKind::Missed),
        held: count(FindingKind::Held),
        failed: count(FindingKind::Failed),
        queued: count(FindingKind::Queued),
        orphaned: count(FindingKind::OrphanRunning),
        running: recent
            .iter()
            .filter(|r| r.outcome == Outcome::Running)
            .map(|r| r.host.clone())
            .collect(),
        lease: lease
            .filter(|l| l.expire_at > store_now)
            .map(|l| (l.host, l.expire_at)),
        needs_attention: audit::job_needs_attention(&findings, None) || twins > 0,
        machine_id_shared: twins,
        paused: pauses.covering(now).is_some(),
    })
}

/// Reads every job of `set` (each store opened once). A job whose store cannot be read
/// is listed without ledger metrics and named in [`Collected::problems`].
pub fn collect(set: &JobSet, now: i64, boot: i64) -> Collected {
    let mut out = Collected {
        list_errors: set.errors.len(),
        refused: set.refused_jobs(),
        ..Collected::default()
    };
    let mut stores: BTreeMap<String, Result<Box<dyn Store>, StoreError>> = BTreeMap::new();
    for job in set.jobs.values() {
        let ledger = job
            .store_address()
            .map_err(crate::exit::Error::from)
            .and_then(|address| {
                let store = stores.entry(address.clone()).or_insert_with(|| {
                    crate::store::open(&address).and_then(|mut s| s.init().map(|()| s))
                });
                let read = match store {
                    Ok(s) => read_job(s.as_mut(), job, now, boot),
                    Err(e) => Err(e.clone()),
                };
                read.map_err(|e| crate::exit::Error::from(e).context(&job.name))
            });
        let ledger = match ledger {
            Ok(l) => Some(l),
            Err(e) => {
                out.problems.push(e);
                None
            }
        };
        out.jobs.push(JobMetrics {
            job: job.name.clone(),
            interval_seconds: interval_seconds(job, now),
            ledger,
        });
    }
    for (address, store) in &mut stores {
        let Ok(store) = store else { continue };
        let masked = crate::store::address::mask(address);
        match crate::ops::fleet::read(store.as_mut()) {
            Ok(fleet) => out.fleets.push((masked, fleet)),
            Err(e) => out
                .problems
                .push(crate::exit::Error::from(e).context(format!("{masked}: fleet"))),
        }
    }
    out
}

/// The store-wide series of the fleet view ([`crate::ops::fleet`]): every host that shares a
/// store exports the same ones, so the shipped rules aggregate them (`max by (host)`,
/// `max by (job)`) and one fact raises one alert.
fn render_fleets(out: &mut String, fleets: &[(String, crate::ops::fleet::Fleet)]) {
    use crate::ops::fleet::{HostView, JobView};
    type HostFamily = (&'static str, &'static str, fn(&HostView) -> Option<f64>);
    type JobFamily = (&'static str, &'static str, fn(&JobView) -> f64);
    const HOSTS: [HostFamily; 2] = [
        (
            "jobguard_fleet_host_last_beat_timestamp_seconds",
            "When a host that shares the store last wrote its heartbeat (each recovery pass), seconds since the epoch by the store's clock.",
            |h| Some(seconds(h.beat.seen_at)),
        ),
        (
            "jobguard_fleet_host_problem",
            "1 for a live host whose job list has errors or that shares its machine id with another live host.",
            |h| {
                let bad = h.shared_machine_id || h.beat.list_errors > 0;
                (!h.silent).then_some(f64::from(u8::from(bad)))
            },
        ),
    ];
    const JOBS: [JobFamily; 2] = [
        (
            "jobguard_fleet_job_armed_hosts",
            "How many live hosts arm the job (for each job a live host names or whose declared schedule is live in the store).",
            |j| j.armed_by.len() as f64,
        ),
        (
            "jobguard_fleet_job_problem",
            "1 for a job whose definitions differ between hosts, that a host's job list refused, or whose schedule is live but that no live host arms.",
            |j| f64::from(u8::from(j.problem().is_some())),
        ),
    ];
    for (name, help, value) in HOSTS {
        let mut f = family(out, name, "gauge", help);
        for (store, fleet) in fleets {
            for h in &fleet.hosts {
                if let Some(v) = value(h) {
                    // The boot keeps two machines of one image and one name apart.
                    let boot: String = h.beat.boot_id.chars().take(8).collect();
                    f.sample(&[("store", store), ("host", &h.label), ("boot", &boot)], v);
                }
            }
        }
    }
    for (name, help, value) in JOBS {
        let mut f = family(out, name, "gauge", help);
        for (store, fleet) in fleets {
            for j in &fleet.jobs {
                f.sample(&[("store", store), ("job", &j.job)], value(j));
            }
        }
    }
}

/// A label value escaped for the text format: `\` → `\\`, `"` → `\"`, newline → `\n`.
pub fn escape_label(value: &str) -> String {
    let mut s = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => s.push_str("\\\\"),
            '"' => s.push_str("\\\""),
            '\n' => s.push_str("\\n"),
            c => s.push(c),
        }
    }
    s
}

/// A number as the text format writes it (Go's `ParseFloat` syntax): integers without a
/// fraction, `NaN`, `+Inf`, `-Inf`.
fn number(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.into()
    } else {
        format!("{v}")
    }
}

/// A family of slot counts: name, help, the count.
type SlotFamily = (&'static str, &'static str, fn(&LedgerMetrics) -> usize);

/// One metric family being written.
struct Family<'a> {
    out: &'a mut String,
    name: &'static str,
}

impl Family<'_> {
    fn sample(&mut self, labels: &[(&str, &str)], value: f64) {
        self.out.push_str(self.name);
        if !labels.is_empty() {
            self.out.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                let _ = write!(self.out, "{k}=\"{}\"", escape_label(v));
            }
            self.out.push('}');
        }
        let _ = writeln!(self.out, " {}", number(value));
    }
}

fn family<'a>(out: &'a mut String, name: &'static str, kind: &str, help: &str) -> Family<'a> {
    let help = help.replace('\\', "\\\\").replace('\n', "\\n");
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
    Family { out, name }
}

/// The text exposition of what was collected (format 0.0.4). Every family is written
/// with its HELP and TYPE even when no job has a sample of it.
pub fn render(collected: &Collected) -> String {
    let jobs = &collected.jobs;
    let mut out = String::new();
    let mut f = family(
        &mut out,
        "jobguard_job_list_errors",
        "gauge",
        "Problems in the job list as last read: files not read, keys refused, jobs left out (jobguard check names them).",
    );
    f.sample(&[], collected.list_errors as f64);
    let mut f = family(
        &mut out,
        "jobguard_job_refused",
        "gauge",
        "1 for a job of the job list left out by an error in its definition: it has no timer and runs no slot.",
    );
    for job in &collected.refused {
        f.sample(&[("job", job)], 1.0);
    }
    render_fleets(&mut out, &collected.fleets);
    let ledgers = || {
        jobs.iter()
            .filter_map(|j| Some((j.job.as_str(), j.ledger.as_ref()?)))
    };
    let mut f = family(
        &mut out,
        "jobguard_store_up",
        "gauge",
        "Whether the job's store could be read (1) or not (0); without it the job has no ledger series.",
    );
    for j in jobs {
        f.sample(&[("job", &j.job)], f64::from(u8::from(j.ledger.is_some())));
    }
    let mut f = family(
        &mut out,
        "jobguard_schedule_interval_seconds",
        "gauge",
        "Seconds between the next two elapses of the job's schedule.",
    );
    for j in jobs {
        if let Some(i) = j.interval_seconds {
            f.sample(&[("job", &j.job)], i);
        }
    }
    let mut f = family(
        &mut out,
        "jobguard_last_success_timestamp_seconds",
        "gauge",
        "When the newest succeeded run finished, seconds since the epoch; absent if the job never succeeded.",
    );
    for (job, l) in ledgers() {
        if let Some(t) = l.last_success {
            f.sample(&[("job", job)], seconds(t));
        }
    }
    let mut f = family(
        &mut out,
        "jobguard_last_outcome",
        "gauge",
        "Outcome of the job's newest finished run (by slot): 1 for its outcome, 0 for the others.",
    );
    for (job, l) in ledgers() {
        if let Some((outcome, _, _)) = l.last {
            for o in FINISHED {
                f.sample(
                    &[("job", job), ("outcome", o.as_str())],
                    f64::from(u8::from(o == outcome)),
                );
            }
        }
    }
    let mut f = family(
        &mut out,
        "jobguard_last_slot_timestamp_seconds",
        "gauge",
        "Slot of the job's newest finished run, seconds since the epoch.",
    );
    for (job, l) in ledgers() {
        if let Some((_, slot, _)) = l.last {
            f.sample(&[("job", job)], seconds(slot));
        }
    }
    let mut f = family(
        &mut out,
        "jobguard_last_duration_seconds",
        "gauge",
        "From start to end of the job's newest finished run, seconds.",
    );
    for (job, l) in ledgers() {
        if let Some((_, _, took)) = l.last {
            f.sample(&[("job", job)], seconds(took));
        }
    }
    let mut f = family(
        &mut out,
        "jobguard_ledger_records",
        "gauge",
        "Records in the job's ledger now (every attempt, running ones too); retention lowers it.",
    );
    for (job, l) in ledgers() {
        let n: u64 = l.counts.iter().map(|(_, n)| n).sum();
        f.sample(&[("job", job)], n as f64);
    }
    let mut f = family(
        &mut out,
        "jobguard_ledger_runs",
        "gauge",
        "Finished runs in the job's ledger now, by outcome; retention lowers it.",
    );
    for (job, l) in ledgers() {
        for o in FINISHED {
            let n = l
                .counts
                .iter()
                .find(|(c, _)| *c == o)
                .map_or(0, |(_, n)| *n);
            f.sample(&[("job", job), ("outcome", o.as_str())], n as f64);
        }
    }
    let slot_families: [SlotFamily; 5] = [
        (
            "jobguard_missed_slots",
            "Slots that elapsed after the job's newest record, past its grace, with no record.",
            |l| l.missed,
        ),
        (
            "jobguard_held_slots",
            "Slots not done whose latest attempt is held for a person (jobguard resolve).",
            |l| l.held,
        ),
        (
            "jobguard_failed_slots",
            "Slots not done whose latest attempt failed.",
            |l| l.failed,
        ),
        (
            "jobguard_queued_slots",
            "Slots not done whose latest attempt was cut off and waits for its queued re-run.",
            |l| l.queued,
        ),
        (
            "jobguard_orphaned_runs",
            "Running records whose holder is gone (jobguard recover ends them).",
            |l| l.orphaned,
        ),
    ];
    for (name, help, get) in slot_families {
        let mut f = family(&mut out, name, "gauge", help);
        for (job, l) in ledgers() {
            f.sample(&[("job", job)], get(l) as f64);
        }
    }
    let mut f = family(
        &mut out,
        "jobguard_running",
        "gauge",
        "A run of the job in progress (a running record), by host; absent when none.",
    );
    for (job, l) in ledgers() {
        let mut hosts: BTreeMap<&str, u32> = BTreeMap::new();
        for h in &l.running {
            *hosts.entry(h.as_str()).or_default() += 1;
        }
        for (host, n) in hosts {
            f.sample(&[("job", job), ("host", host)], f64::from(n));
        }
    }
    let mut f = family(
        &mut out,
        "jobguard_lease_holder",
        "gauge",
        "The host holding the job's unexpired lease; absent when none.",
    );
    for (job, l) in ledgers() {
        if let Some((host, _)) = &l.lease {
            f.sample(&[("job", job), ("host", host)], 1.0);
        }
    }
    let mut f = family(
        &mut out,
        "jobguard_lease_expiry_timestamp_seconds",
        "gauge",
        "When the job's unexpired lease expires unless renewed, seconds since the epoch (store clock).",
    );
    for (job, l) in ledgers() {
        if let Some((host, until)) = &l.lease {
            f.sample(&[("job", job), ("host", host)], seconds(*until));
        }
    }
    let mut f = family(
        &mut out,
        "jobguard_job_needs_attention",
        "gauge",
        "1 when the job needs attention by the rule of jobguard status and audit (missed, held, failed or queued slots, runs whose holder is gone), else 0.",
    );
    for (job, l) in ledgers() {
        f.sample(&[("job", job)], f64::from(u8::from(l.needs_attention)));
    }
    let mut f = family(
        &mut out,
        "jobguard_machine_id_shared",
        "gauge",
        "Recent records of the job written by another machine with this host's machine id (an image copied without systemd-machine-id-setup); 0 when there are none.",
    );
    for (job, l) in ledgers() {
        f.sample(&[("job", job)], l.machine_id_shared as f64);
    }
    let mut f = family(
        &mut out,
        "jobguard_paused",
        "gauge",
        "1 while the job is paused across the fleet (jobguard pause), else 0: its slots are skipped on every host and none is missed.",
    );
    for (job, l) in ledgers() {
        f.sample(&[("job", job)], f64::from(u8::from(l.paused)));
    }
    out
}

/// Writes `text` to `path` atomically: a temporary file in the same directory (a name
/// node_exporter does not read: it starts with `.` and does not end in `.prom`), written,
/// fsynced, made readable by all (0644), renamed over `path`, then the directory fsynced.
/// A reader sees the old file or the new one, never a part. The temporary file is removed
/// on failure.
///
/// The directory may be writable by others (node_exporter's textfile directory often
/// belongs to its own user), and root writes here on every recovery pass, so nothing in
/// it is trusted: the directory is opened once without following a link
/// (`O_DIRECTORY | O_NOFOLLOW`) and every step is relative to that descriptor; the
/// temporary file has an unpredictable name and must be new (`O_CREAT | O_EXCL |
/// O_NOFOLLOW`, open(2)), so a symbolic link or FIFO planted at any name is never written
/// through or opened; the rename replaces whatever is at `path` (a planted link
/// included) without following it (rename(2)).
///
/// # Errors
/// I/O errors, with the temporary file removed.
pub fn write_textfile(path: &Path, text: &str) -> std::io::Result<()> {
    use nix::fcntl::{OFlag, open, openat, renameat};
    use nix::sys::stat::Mode;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .ok_or_else(|| std::io::Error::other("the path names no file"))?;
    let dir_fd = open(
        dir,
        OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_RDONLY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )?;
    // An unpredictable name (the pid, the time in ns, a counter), tried again if taken.
    let mut tries = 0u32;
    let (tmp, file) = loop {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let tmp = format!(
            ".{}.{}.{nanos:09}{tries}.tmp",
            name.to_string_lossy(),
            std::process::id()
        );
        match openat(
            &dir_fd,
            tmp.as_str(),
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::from_bits_truncate(0o644),
        ) {
            Ok(fd) => break (tmp, std::fs::File::from(fd)),
            Err(nix::errno::Errno::EEXIST) if tries < 16 => tries += 1,
            Err(e) => return Err(e.into()),
        }
    };
    let write = || -> std::io::Result<()> {
        let mut file = &file;
        file.write_all(text.as_bytes())?;
        // 0644 whatever the umask: node_exporter runs as a user of its own.
        nix::sys::stat::fchmod(file, Mode::from_bits_truncate(0o644))?;
        file.sync_all()?;
        renameat(&dir_fd, tmp.as_str(), &dir_fd, name)?;
        nix::unistd::fsync(&dir_fd)?;
        Ok(())
    };
    write().inspect_err(|_| {
        let _ = nix::unistd::unlinkat(
            &dir_fd,
            tmp.as_str(),
            nix::unistd::UnlinkatFlags::NoRemoveDir,
        );
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_escape_backslash_quote_and_newline() {
        assert_eq!(escape_label("a\\b\"c\nd é"), "a\\\\b\\\"c\\nd é");
    }

    #[test]
    fn numbers_use_the_text_format_spelling() {
        assert_eq!(number(1.0), "1");
        assert_eq!(number(1.5), "1.5");
        assert_eq!(number(f64::INFINITY), "+Inf");
        assert_eq!(number(f64::NEG_INFINITY), "-Inf");
        assert_eq!(number(f64::NAN), "NaN");
    }

    #[test]
    fn a_job_whose_store_is_down_is_listed_with_store_up_0_only() {
        let collected = Collected {
            jobs: vec![JobMetrics {
                job: "a\"b".into(),
                interval_seconds: Some(60.0),
                ledger: None,
            }],
            ..Collected::default()
        };
        let text = render(&collected);
        assert!(
            text.contains("jobguard_store_up{job=\"a\\\"b\"} 0\n"),
            "{text}"
        );
        assert!(text.contains("jobguard_schedule_interval_seconds{job=\"a\\\"b\"} 60\n"));
        assert!(!text.contains("jobguard_job_needs_attention{"), "{text}");
        // Every family has its HELP and TYPE even without samples.
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let name = line.split(['{', ' ']).next().unwrap_or_default();
            assert!(text.contains(&format!("# TYPE {name} ")), "{name}");
        }
    }
}

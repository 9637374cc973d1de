//! Structured events for the journal, and readable lines on stderr.
//!
//! Every event of a run (start, skip, finish, interrupted, ...) is one journal entry with
//! the fields `JOBGUARD_JOB`, `JOBGUARD_SLOT`, `JOBGUARD_RUN_ID`, `JOBGUARD_EVENT`,
//! `JOBGUARD_REASON`, `JOBGUARD_OUTCOME`, `JOBGUARD_EXIT_STATUS` (and a few more) and a
//! `MESSAGE_ID` fixed per kind of event, so `journalctl JOBGUARD_JOB=x` and
//! `journalctl -x` work. Entries go through `tracing` with the `tracing-journald` layer
//! (native protocol, systemd.journal-fields(7)); the text (`MESSAGE`) starts with the
//! job's name, which syslog keeps where it drops the fields. When stderr is not already
//! the journal (a shell, a test), the same event is also printed there as one readable
//! line, `jobguard[JOB]: …`.

use std::io::Write;
use std::os::fd::AsFd;

use tracing::Level;
use tracing_subscriber::Layer as _;
use tracing_subscriber::layer::SubscriberExt;

use crate::guard::ledger::Outcome;

/// The kinds of event, each with its own `MESSAGE_ID` (see the journal catalog).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The command was started for a slot.
    Started,
    /// Skipped: the slot already succeeded (or was resolved as done).
    SkippedSlotDone,
    /// Skipped: the slot is held for a person.
    SkippedSlotHeld,
    /// Skipped: another instance on this host holds the job's lock.
    SkippedLockHeld,
    /// Skipped: another holder's lease is unexpired.
    SkippedLeaseHeld,
    /// Skipped: the slot is older than one already recorded (clock behind, schedule changed).
    SkippedOutOfOrder,
    /// Not run: this host's clock and the store's differ by more than `clock_tolerance`.
    ClockSkew,
    /// Skipped: the job runs by another schedule, defined later on another host
    /// ([`crate::store::Store::declare_schedule`]).
    SkippedScheduleDiffers,
    /// Skipped: the store could not be reached (`on_store_unavailable = "skip"`).
    SkippedStoreUnavailable,
    /// Skipped: the slot lies in a window the job is paused across the fleet
    /// ([`crate::ops::pause`]).
    SkippedPaused,
    /// The command exited 0.
    Finished,
    /// The command failed (non-zero, signal, timeout, could not start).
    Failed,
    /// A run was cut off (crash, reboot, shutdown, stop) and marked interrupted.
    Interrupted,
    /// The lease could not be renewed; the command was stopped.
    LeaseLost,
    /// `jobguard recover` queued or started a re-run of an interrupted slot.
    Recovered,
    /// Slots between the last recorded one and this one never ran.
    GapDetected,
    /// `jobguard recover` found a slot that elapsed, past the job's grace, with no record
    /// and no catch-up decision (one event per slot).
    Missed,
    /// `jobguard recover` could not write the metrics textfile (`[metrics] textfile`);
    /// not a job's event: `JOBGUARD_JOB` is left out.
    MetricsNotWritten,
    /// `jobguard recover` found a `running` record of another machine with this host's
    /// machine id ([`crate::guard::identity::Installation::twin`]); once per run.
    MachineIdShared,
}

impl Kind {
    /// The value of `JOBGUARD_EVENT`.
    pub fn event(self) -> &'static str {
        match self {
            Kind::Started => "start",
            Kind::SkippedSlotDone
            | Kind::SkippedSlotHeld
            | Kind::SkippedLockHeld
            | Kind::SkippedLeaseHeld
            | Kind::SkippedOutOfOrder
            | Kind::SkippedScheduleDiffers
            | Kind::SkippedStoreUnavailable
            | Kind::SkippedPaused => "skip",
            Kind::ClockSkew => "clock-skew",
            Kind::Finished | Kind::Failed => "finish",
            Kind::Interrupted => "interrupted",
            Kind::LeaseLost => "lease-lost",
            Kind::Recovered => "recover",
            Kind::GapDetected => "gap",
            Kind::Missed => "missed",
            Kind::MetricsNotWritten => "metrics",
            Kind::MachineIdShared => "machine-id-shared",
        }
    }

    /// The `MESSAGE_ID` of this kind: 32 lower-case hex digits, fixed forever.
    pub fn message_id(self) -> &'static str {
        match self {
            Kind::Started => "34ff0b1f3dbf41c6ace7495ab7b45f37",
            Kind::SkippedSlotDone => "b080f0ce94bd4a5e9cc86070a2ed8d3c",
            Kind::SkippedSlotHeld => "6802e01bbd6e4a6db64db1aec00c9d0e",
            Kind::SkippedLockHeld => "0eaf93dacac44928b6d2bc029cf6f554",
            Kind::SkippedLeaseHeld => "d0a2cc62b51d423ca629c2ace623d194",
            Kind::SkippedStoreUnavailable => "af13661a32ea4be5a7fa8388a542caf1",
            Kind::ClockSkew => "320502f7a8c647ad8401ed61ec6e9466",
            Kind::SkippedOutOfOrder => "659e35ec95284ab8a34cf1f5e99c6772",
            Kind::SkippedScheduleDiffers => "8aa591b865fb4e6c995b95e505e44440",
            Kind::SkippedPaused => "8f798a822bfb446699254fe6d5d8351c",
            Kind::Finished => "9fb9749e319e40488204b6f156681d66",
            Kind::Failed => "70cff139d72b466dbe7c37818c4b50ba",
            Kind::Interrupted => "690bc128ba2840dcae86cd7463875f5e",
            Kind::LeaseLost => "d6a46057361e4b3d909eb236412d9815",
            Kind::Recovered => "b7a87ff5268947519bbbf9062178cdee",
            Kind::GapDetected => "328264b3aa754d54a5a32c0263f1204c",
            Kind::Missed => "a4b1d7192a4a4f6daa808b5fd70a3463",
            Kind::MetricsNotWritten => "ecb54cb947c54fb88eab7e3930fb5460",
            Kind::MachineIdShared => "33fbce3955d54a79bac1087918ef300a",
        }
    }

    /// The event's `tracing` level, which [`init`] maps to the journal's priority
    /// (syslog(3)): `ERROR` err (3), `WARN` warning (4), `INFO` notice (5), `DEBUG` info
    /// (6). Notice is what the recovery pass does (a re-run queued or started): its unit
    /// keeps notice and above (`LogLevelMax=notice`), so a pass that does nothing leaves no
    /// line, and one that does something is seen. A run's own start, end and skips are
    /// info.
    fn level(self) -> Level {
        match self {
            Kind::Failed | Kind::LeaseLost | Kind::ClockSkew | Kind::MachineIdShared => {
                Level::ERROR
            }
            Kind::Interrupted
            | Kind::GapDetected
            | Kind::Missed
            | Kind::MetricsNotWritten
            | Kind::SkippedStoreUnavailable
            | Kind::SkippedScheduleDiffers
            | Kind::SkippedOutOfOrder => Level::WARN,
            Kind::Recovered => Level::INFO,
            _ => Level::DEBUG,
        }
    }
}

/// One event. Empty optional fields are left out of the entry.
#[derive(Debug, Clone)]
pub struct Event<'a> {
    /// What happened.
    pub kind: Kind,
    /// Job name.
    pub job: &'a str,
    /// Slot, RFC 3339 UTC.
    pub slot: Option<String>,
    /// Run id.
    pub run_id: Option<String>,
    /// Why (skips, failures, interruptions), machine-readable: `slot-done`, `lock-held`, ...
    pub reason: Option<String>,
    /// Outcome of the run.
    pub outcome: Option<Outcome>,
    /// Exit status of the run (128+N for signal N).
    pub exit_status: Option<i32>,
    /// Attempt number at the slot.
    pub attempt: Option<i64>,
    /// Fencing token of the lease.
    pub fencing_token: Option<i64>,
    /// The job's report as `key=value` pairs separated by spaces.
    pub report: Option<String>,
    /// The readable message: says what, why and who.
    pub message: String,
}

impl<'a> Event<'a> {
    /// An event with only kind, job and message set.
    pub fn new(kind: Kind, job: &'a str, message: impl Into<String>) -> Self {
        Event {
            kind,
            job,
            slot: None,
            run_id: None,
            reason: None,
            outcome: None,
            exit_status: None,
            attempt: None,
            fencing_token: None,
            report: None,
            message: message.into(),
        }
    }
}

/// Sets up the journal sink once per process. Returns whether the journal is reachable.
/// Safe to call more than once.
pub fn init() -> bool {
    static INIT: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *INIT.get_or_init(|| match tracing_journald::layer() {
        Ok(layer) => {
            let layer = layer
                .with_field_prefix(None)
                .with_syslog_identifier("jobguard".to_string())
                // ERROR err, WARN warning, INFO notice, DEBUG info ([`Kind::level`]).
                .with_priority_mappings(tracing_journald::PriorityMappings::new());
            // jobguard's events only: a store's client that logs through `tracing` (etcd's
            // gRPC over h2: a hundred trace events per call) must not reach the journal.
            let ours = tracing_subscriber::filter::filter_fn(|meta| {
                meta.target().starts_with(env!("CARGO_CRATE_NAME"))
            });
            let subscriber = tracing_subscriber::registry().with(layer.with_filter(ours));
            tracing::subscriber::set_global_default(subscriber).is_ok()
        }
        Err(_) => false,
    })
}

/// Whether stderr is connected to the journal (`JOURNAL_STREAM` names its device and inode).
fn stderr_is_journal() -> bool {
    let Some(stream) = std::env::var_os("JOURNAL_STREAM") else {
        return false;
    };
    let Ok(st) = nix::sys::stat::fstat(std::io::stderr().as_fd()) else {
        return false;
    };
    stream.to_string_lossy() == format!("{}:{}", st.st_dev, st.st_ino)
}

/// Sends `ev` to the journal (if [`init`] found one) and, unless stderr is the journal,
/// prints it to stderr as `jobguard[JOB]: MESSAGE`.
pub fn emit(ev: &Event<'_>) {
    let journal = init();
    if journal {
        send(ev);
    }
    if !journal || !stderr_is_journal() {
        let _ = match ev.job {
            "" => writeln!(std::io::stderr(), "jobguard: {}", ev.message),
            job => writeln!(std::io::stderr(), "jobguard[{job}]: {}", ev.message),
        };
    }
}

/// Sends `ev` as one journal entry. Its `MESSAGE` starts with the job's name (`JOB: `):
/// syslog (rsyslog's imjournal, `ForwardToSyslog=`) and most log shippers keep the text
/// and the identifier, not the `JOBGUARD_*` fields.
fn send(ev: &Event<'_>) {
    let outcome = ev.outcome.map(Outcome::as_str);
    let message = match ev.job {
        "" => std::borrow::Cow::Borrowed(ev.message.as_str()),
        job => std::borrow::Cow::Owned(format!("{job}: {}", ev.message)),
    };
    macro_rules! at_level {
        ($lvl:expr) => {
            tracing::event!(
                $lvl,
                message_id = ev.kind.message_id(),
                jobguard_job = (!ev.job.is_empty()).then_some(ev.job),
                jobguard_event = ev.kind.event(),
                jobguard_slot = ev.slot.as_deref(),
                jobguard_run_id = ev.run_id.as_deref(),
                jobguard_reason = ev.reason.as_deref(),
                jobguard_outcome = outcome,
                jobguard_exit_status = ev.exit_status,
                jobguard_attempt = ev.attempt,
                jobguard_fencing_token = ev.fencing_token,
                jobguard_report = ev.report.as_deref(),
                "{}",
                message
            )
        };
    }
    match ev.kind.level() {
        Level::ERROR => at_level!(Level::ERROR),
        Level::WARN => at_level!(Level::WARN),
        Level::INFO => at_level!(Level::INFO),
        _ => at_level!(Level::DEBUG),
    }
}

/// Sends `STATUS=text` to systemd (no-op outside a unit or without `NotifyAccess=`).
pub fn status(text: &str) {
    let _ = sd_notify::notify(&[sd_notify::NotifyState::Status(text)]);
}

/// Waits until systemd has read every notification this process sent, at most `timeout`
/// (sd_notify_barrier(3), systemd 246 and later): sends `BARRIER=1` with the write end of
/// a pipe and waits for the read end to hang up, which happens when systemd closes its
/// copy after processing all earlier messages. Call before exiting: a `STATUS=` from a
/// process that is already gone may not be attributed to its unit. No-op outside a unit.
pub fn notify_barrier(timeout: std::time::Duration) {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    if std::env::var_os("NOTIFY_SOCKET").is_none() {
        return;
    }
    let Ok((read, write)) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC) else {
        return;
    };
    let sent = sd_notify::notify_with_fds(
        &[sd_notify::NotifyState::Custom("BARRIER=1")],
        &[write.as_fd()],
    );
    drop(write);
    if sent.is_err() {
        return;
    }
    let ms = u16::try_from(timeout.as_millis()).unwrap_or(u16::MAX);
    let mut fds = [PollFd::new(read.as_fd(), PollFlags::POLLIN)];
    let _ = poll(&mut fds, PollTimeout::from(ms));
}

//! logind while a job's command runs: an inhibitor lock, and a watch for shutdown and sleep.
//!
//! - **Inhibitor.** Just before the command starts, the shim calls
//!   `org.freedesktop.login1.Manager.Inhibit("shutdown:sleep", "jobguard JOB",
//!   "running slot SLOT (run RUN)", MODE)` with MODE from the job's `inhibit` key
//!   (`delay` or `block`; `none` takes nothing and talks to no bus). logind holds the lock
//!   until the returned file descriptor is closed, so [`RunGuard`] closes it as soon as the
//!   command ends (org.freedesktop.login1(5), "Inhibitor locks";
//!   <https://systemd.io/INHIBITOR_LOCKS>). The job must not inherit (and so prolong) the
//!   lock: zbus receives descriptors without `MSG_CMSG_CLOEXEC` and hands out a
//!   close-on-exec duplicate (zbus 6.2), and the shim sets `FD_CLOEXEC` on it again before
//!   the command is spawned, so the guarantee does not rest on that detail.
//! - **Shutdown watch.** One helper thread per process holds its own D-Bus connection
//!   subscribed to logind's `PrepareForShutdown` and `PrepareForSleep` signals and writes
//!   one byte per signal into a pipe; the supervisor
//!   ([`crate::shim::child::supervise_watching`]) polls the pipe beside its signalfd, so
//!   every decision stays on the shim's one thread. The helper is started after the shim
//!   blocked its signals, so it inherits the mask and never takes a SIGTERM or SIGCHLD
//!   meant for the signalfd.
//!
//! On `PrepareForShutdown(true)` the run is marked as being cut by a shutdown (in memory):
//! the lock is released (with `delay`, that lets the shutdown go on; systemd then stops
//! the unit and the shim forwards SIGTERM as usual), and if the command then ends other
//! than successfully, the shim records it `interrupted` with reason `shutdown` and the
//! job's `on_interrupted` resolution. The ledger row stays `running` until then, and the
//! lease stays held: recording early would let another host claim the queued slot while
//! this command still works. A power loss after the signal leaves `running`, which
//! `jobguard recover` already treats as interrupted after the next boot.
//! On `PrepareForSleep(true)` the lock is released so the machine can sleep; on
//! `PrepareForSleep(false)` (resume) it is taken again. A command that ends while the
//! machine is going to sleep is recorded `interrupted` with reason `sleep`.
//!
//! No system bus at all (no `DBUS_SYSTEM_BUS_ADDRESS`, no `/run/dbus/system_bus_socket`:
//! a container or a minimal host) means no logind: nothing is tried and nothing is said.
//! A system bus that cannot be reached, or one without logind, is one warning per process
//! on stderr, never a failure.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::joblist::job::{Inhibit, Job};

/// How long a D-Bus call to logind may take before it counts as "no logind".
const CALL_TIMEOUT: Duration = Duration::from_secs(5);

#[zbus::proxy(
    interface = "org.freedesktop.login1.Manager",
    default_service = "org.freedesktop.login1",
    default_path = "/org/freedesktop/login1"
)]
trait Manager {
    /// `Inhibit(what, who, why, mode) -> fd`.
    fn inhibit(&self, what: &str, who: &str, why: &str, mode: &str) -> zbus::Result<zbus::OwnedFd>;
}

/// Errors talking to logind.
#[derive(Debug, thiserror::Error)]
pub enum LogindError {
    /// The system bus could not be reached or logind did not answer.
    #[error("logind: {0}")]
    Bus(#[from] zbus::Error),
    /// A system call on the lock's descriptor or the watch pipe failed.
    #[error("logind: {what}: {errno}")]
    Os {
        /// What was being done.
        what: &'static str,
        /// The error number.
        errno: nix::errno::Errno,
    },
    /// The helper thread could not be started or did not report back.
    #[error("logind: shutdown watch: {0}")]
    Watch(String),
}

/// Why a run is being cut, as logind announced it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cut {
    /// `PrepareForShutdown(true)`: the system is powering off or rebooting.
    Shutdown,
    /// `PrepareForSleep(true)`: the system is suspending or hibernating.
    Sleep,
}

impl Cut {
    /// The ledger reason of a run ended by this cut: `shutdown` or `sleep`.
    pub fn reason(self) -> &'static str {
        match self {
            Cut::Shutdown => "shutdown",
            Cut::Sleep => "sleep",
        }
    }
}

/// Bytes the helper writes into the pipe, one per logind signal.
const SHUTDOWN_ON: u8 = b'S';
const SHUTDOWN_OFF: u8 = b's';
const SLEEP_ON: u8 = b'Z';
const SLEEP_OFF: u8 = b'z';

/// The `what`, `who` and `why` of the job's inhibitor lock, as `systemd-inhibit --list`
/// shows them.
pub fn lock_labels(job: &str, slot: &str, run_id: &str) -> (String, String, String) {
    (
        "shutdown:sleep".to_string(),
        format!("jobguard {job}"),
        format!("running slot {slot} (run {run_id})"),
    )
}

/// Takes an inhibitor lock from logind; `mode` is `delay` or `block`. The returned
/// descriptor is close-on-exec; closing it releases the lock.
///
/// # Errors
/// [`LogindError::Bus`] without a system bus, without logind, when logind refuses (e.g.
/// polkit), or after 5 s without an answer; [`LogindError::Os`] if the descriptor cannot be
/// marked close-on-exec (it is closed then).
pub fn inhibit(what: &str, who: &str, why: &str, mode: &str) -> Result<OwnedFd, LogindError> {
    let fd: OwnedFd = zbus::block_on(async {
        let conn = zbus::connection::Builder::system()
            .method_timeout(CALL_TIMEOUT)
            .build()
            .await?;
        let proxy = ManagerProxy::new(&conn).await?;
        let fd = proxy.inhibit(what, who, why, mode).await?;
        Ok::<_, zbus::Error>(fd.into())
    })?;
    set_cloexec(fd.as_fd())?;
    Ok(fd)
}

fn set_cloexec(fd: BorrowedFd<'_>) -> Result<(), LogindError> {
    use nix::fcntl::{FcntlArg, FdFlag, fcntl};
    fcntl(fd, FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC))
        .map(|_| ())
        .map_err(|errno| LogindError::Os {
            what: "cannot mark the inhibitor lock close-on-exec",
            errno,
        })
}

/// The process-wide shutdown watch: the read end of the pipe the helper thread writes to.
pub struct Watcher {
    pipe: OwnedFd,
}

impl Watcher {
    /// Starts the helper thread and waits until its subscription to logind's signals is in
    /// place (at most 5 s). Call after the shim blocked its signals.
    ///
    /// # Errors
    /// [`LogindError::Bus`] without a system bus; [`LogindError::Os`] if the pipe cannot be
    /// made; [`LogindError::Watch`] if the thread cannot start or does not report back.
    pub fn start() -> Result<Watcher, LogindError> {
        use nix::fcntl::OFlag;
        let (read, write) =
            nix::unistd::pipe2(OFlag::O_CLOEXEC | OFlag::O_NONBLOCK).map_err(|errno| {
                LogindError::Os {
                    what: "cannot make the watch pipe",
                    errno,
                }
            })?;
        let (ready_tx, ready_rx) = std::sync::mpsc::sync_channel::<Result<(), String>>(1);
        std::thread::Builder::new()
            .name("jobguard-logind".into())
            .spawn(move || watch_thread(write, ready_tx))
            .map_err(|e| LogindError::Watch(e.to_string()))?;
        match ready_rx.recv_timeout(CALL_TIMEOUT) {
            Ok(Ok(())) => Ok(Watcher { pipe: read }),
            Ok(Err(e)) => Err(LogindError::Watch(e)),
            Err(_) => Err(LogindError::Watch("no answer from the system bus".into())),
        }
    }

    /// The pipe to poll for readability.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.pipe.as_fd()
    }

    /// The signal bytes waiting in the pipe (empty if none), and whether the helper has
    /// ended (the pipe's write end is closed): then stop polling.
    fn drain(&self) -> (Vec<u8>, bool) {
        let mut out = Vec::new();
        let mut buf = [0u8; 64];
        loop {
            match nix::unistd::read(self.pipe.as_fd(), &mut buf) {
                Ok(0) => return (out, true),
                Ok(n) => out.extend_from_slice(&buf[..n]),
                Err(nix::errno::Errno::EINTR) => {}
                // EAGAIN: drained.
                Err(_) => return (out, false),
            }
        }
    }
}

/// The helper thread: subscribe, report readiness, then forward each signal as a byte.
fn watch_thread(write: OwnedFd, ready: std::sync::mpsc::SyncSender<Result<(), String>>) {
    use std::io::Write;
    let mut pipe = std::fs::File::from(write);
    zbus::block_on(async move {
        let subscribed = async {
            let conn = zbus::connection::Builder::system()
                .method_timeout(CALL_TIMEOUT)
                .build()
                .await?;
            let rule = zbus::MatchRule::builder()
                .msg_type(zbus::message::Type::Signal)
                .sender("org.freedesktop.login1")
                .interface("org.freedesktop.login1.Manager")
                .path("/org/freedesktop/login1")
                .build()?;
            let stream = zbus::MessageStream::for_match_rule(rule, &conn, None).await?;
            Ok::<_, zbus::Error>((conn, stream))
        }
        .await;
        let (_conn, mut stream) = match subscribed {
            Ok(s) => {
                let _ = ready.send(Ok(()));
                s
            }
            Err(e) => {
                let _ = ready.send(Err(e.to_string()));
                return;
            }
        };
        loop {
            let next = std::future::poll_fn(|cx| {
                futures_core::Stream::poll_next(std::pin::Pin::new(&mut stream), cx)
            })
            .await;
            let Some(Ok(msg)) = next else {
                // The bus connection ended: closing the pipe tells the supervisor.
                return;
            };
            let header = msg.header();
            let Some(member) = header.member() else {
                continue;
            };
            let Ok(start) = msg.body().deserialize::<bool>() else {
                continue;
            };
            let byte = match (member.as_str(), start) {
                ("PrepareForShutdown", true) => SHUTDOWN_ON,
                ("PrepareForShutdown", false) => SHUTDOWN_OFF,
                ("PrepareForSleep", true) => SLEEP_ON,
                ("PrepareForSleep", false) => SLEEP_OFF,
                _ => continue,
            };
            if pipe.write_all(&[byte]).is_err() {
                return;
            }
        }
    });
}

/// The process-wide watcher, started on first use; `None` (after one warning) without
/// logind.
fn watcher() -> Option<&'static Watcher> {
    static WATCHER: OnceLock<Option<Watcher>> = OnceLock::new();
    WATCHER
        .get_or_init(|| match Watcher::start() {
            Ok(w) => Some(w),
            Err(e) => {
                warn_once(&e);
                None
            }
        })
        .as_ref()
}

/// Whether logind announced a shutdown (not cancelled) to any run of this process: a
/// queued re-run started after the announcement is cut by it too.
static SHUTTING_DOWN: AtomicBool = AtomicBool::new(false);

/// Whether this host has a system bus to reach logind on: `DBUS_SYSTEM_BUS_ADDRESS` is
/// set, or the default socket `/run/dbus/system_bus_socket` (dbus-daemon(1), the D-Bus
/// specification's well-known system bus address) exists. Without one (a container or a
/// minimal host with no D-Bus) no logind runs to shut the host down or announce it, so
/// there is nothing to inhibit or watch, and the connection is not even tried: no time
/// spent, no warning.
fn system_bus_present() -> bool {
    std::env::var_os("DBUS_SYSTEM_BUS_ADDRESS").is_some_and(|v| !v.is_empty())
        || std::path::Path::new("/run/dbus/system_bus_socket").exists()
        || std::path::Path::new("/var/run/dbus/system_bus_socket").exists()
}

/// Prints the "no logind" warning once per process (stderr is the journal under systemd).
fn warn_once(e: &LogindError) {
    static WARNED: AtomicBool = AtomicBool::new(false);
    if !WARNED.swap(true, Ordering::Relaxed) {
        eprintln!("jobguard: warning: {e}; running without a logind inhibitor or shutdown watch");
    }
}

/// logind's side of one run: the inhibitor lock while the command runs, and what the
/// shutdown watch saw. Dropping it releases the lock.
pub struct RunGuard {
    job: String,
    mode: Option<&'static str>,
    labels: (String, String, String),
    lock: Option<OwnedFd>,
    watcher: Option<&'static Watcher>,
    shutting_down: bool,
    sleeping: bool,
}

impl RunGuard {
    /// For a run of `job` at `slot` (RFC 3339) with `run_id`: starts the shutdown watch
    /// (once per process) and takes the inhibitor lock by the job's `inhibit` key. With
    /// `inhibit = "none"` it does nothing at all. Failures are a warning (once), never an
    /// error: the run goes on unguarded.
    pub fn start(job: &Job, slot: &str, run_id: &str) -> RunGuard {
        let mode = match job.inhibit {
            Inhibit::Delay => Some("delay"),
            Inhibit::Block => Some("block"),
            Inhibit::None => None,
        };
        let mut g = RunGuard {
            job: job.name.clone(),
            mode,
            labels: lock_labels(&job.name, slot, run_id),
            lock: None,
            watcher: None,
            shutting_down: SHUTTING_DOWN.load(Ordering::Relaxed),
            sleeping: false,
        };
        if mode.is_some() && system_bus_present() {
            // Watch first: a shutdown announced after the lock is taken is then seen.
            g.watcher = watcher();
            // After a shutdown was announced, a new lock would not hold it up anyway.
            if !g.shutting_down {
                g.take();
            }
        }
        g
    }

    fn take(&mut self) {
        let Some(mode) = self.mode else { return };
        if self.lock.is_some() {
            return;
        }
        let (what, who, why) = &self.labels;
        match inhibit(what, who, why, mode) {
            Ok(fd) => self.lock = Some(fd),
            Err(e) => warn_once(&e),
        }
    }

    /// The pipe the supervisor polls beside its signalfd, if the watch runs.
    pub fn watch_fd(&self) -> Option<BorrowedFd<'static>> {
        self.watcher.map(|w| w.fd())
    }

    /// Handles what the watch pipe holds; call when it is readable. Returns false when
    /// the watch has ended and the pipe should no longer be polled.
    pub fn on_watch_ready(&mut self) -> bool {
        let Some(w) = self.watcher else { return false };
        let (bytes, ended) = w.drain();
        for b in bytes {
            match b {
                SHUTDOWN_ON if !self.shutting_down => {
                    self.shutting_down = true;
                    SHUTTING_DOWN.store(true, Ordering::Relaxed);
                    self.release();
                    self.note(
                        "the system is shutting down (logind PrepareForShutdown): inhibitor lock released; if the command is cut, the run is recorded interrupted (reason shutdown)",
                    );
                }
                SHUTDOWN_OFF if self.shutting_down => {
                    self.shutting_down = false;
                    SHUTTING_DOWN.store(false, Ordering::Relaxed);
                    self.take();
                    self.note("the shutdown was cancelled: inhibitor lock taken again");
                }
                SLEEP_ON if !self.sleeping => {
                    self.sleeping = true;
                    self.release();
                    self.note(
                        "the system is going to sleep (logind PrepareForSleep): inhibitor lock released",
                    );
                }
                SLEEP_OFF if self.sleeping => {
                    self.sleeping = false;
                    self.take();
                    self.note("the system resumed: inhibitor lock taken again");
                }
                _ => {}
            }
        }
        if ended {
            self.watcher = None;
        }
        !ended
    }

    fn note(&self, what: &str) {
        eprintln!("jobguard: {}: {what}", self.job);
        crate::systemd::journal::status(what);
    }

    /// What logind announced that is cutting the run now, if anything: a shutdown (from
    /// `PrepareForShutdown(true)` on, unless cancelled) or a sleep (between
    /// `PrepareForSleep(true)` and the resume).
    pub fn cut(&self) -> Option<Cut> {
        if self.shutting_down {
            Some(Cut::Shutdown)
        } else if self.sleeping {
            Some(Cut::Sleep)
        } else {
            None
        }
    }

    /// Releases the inhibitor lock (closes its descriptor); the watch stays.
    pub fn release(&mut self) {
        self.lock = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_name_the_job_slot_and_run() {
        let (what, who, why) = lock_labels("backup", "2026-11-29T02:00:00Z", "r1");
        assert_eq!(what, "shutdown:sleep");
        assert_eq!(who, "jobguard backup");
        assert_eq!(why, "running slot 2026-11-29T02:00:00Z (run r1)");
    }

    #[test]
    fn cut_reasons_are_the_ledger_reasons() {
        assert_eq!(Cut::Shutdown.reason(), "shutdown");
        assert_eq!(Cut::Sleep.reason(), "sleep");
    }
}

//! The job's command as a child process: spawned in a session of its own (so it and its
//! children can be signalled as one process group), with privileges dropped to the job's
//! user, `PR_SET_PDEATHSIG` so it cannot run on unguarded if the shim dies, an empty
//! signal mask and no descriptors but 0, 1 and 2. Then supervised: signals are forwarded,
//! the timeout enforced, and the command kept inside its lease: it is dead before the
//! lease could expire, whatever the store does ([`Keeper`] renews it without blocking the
//! supervisor; the caller decides when the lease ends).
//!
//! The shim blocks the signals it handles ([`block_signals`]) and reads them from a
//! signalfd, in one thread: no signal handlers, no races with `waitpid`.

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::signal::{SigSet, SigmaskHow, Signal, killpg, sigprocmask};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::{Gid, Pid, Uid, User};

/// The signals the shim handles through its signalfd.
const HANDLED: [Signal; 4] = [
    Signal::SIGTERM,
    Signal::SIGINT,
    Signal::SIGHUP,
    Signal::SIGCHLD,
];

/// Set once the shim has read a stop signal (SIGTERM, SIGINT or SIGHUP) in [`supervise`].
static STOP_SEEN: AtomicBool = AtomicBool::new(false);

/// Whether someone asked the shim to stop: a stop signal was read while a command ran, or
/// one is pending now (blocked by [`block_signals`], so it waits until read). A shim that
/// was asked to stop starts no further command.
pub fn stop_requested() -> bool {
    if STOP_SEEN.load(Ordering::Relaxed) {
        return true;
    }
    let mut raw = std::mem::MaybeUninit::<libc::sigset_t>::uninit();
    // SAFETY: sigpending(2) only writes the set it is given.
    if unsafe { libc::sigpending(raw.as_mut_ptr()) } != 0 {
        return false;
    }
    // SAFETY: sigpending returned 0, so it filled the set.
    let pending = unsafe { SigSet::from_sigset_t_unchecked(raw.assume_init()) };
    [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP]
        .iter()
        .any(|s| pending.contains(*s))
}

fn handled_set() -> SigSet {
    let mut set = SigSet::empty();
    for s in HANDLED {
        set.add(s);
    }
    set
}

/// Blocks SIGTERM, SIGINT, SIGHUP and SIGCHLD in the calling thread, so they queue for the
/// signalfd. Call before any thread exists (threads inherit the mask).
///
/// # Errors
/// The errno of `sigprocmask(2)`.
pub fn block_signals() -> Result<(), Errno> {
    sigprocmask(SigmaskHow::SIG_BLOCK, Some(&handled_set()), None)
}

/// The account a job's command runs as.
#[derive(Debug, Clone)]
pub struct Account {
    /// User name.
    pub name: String,
    /// User id.
    pub uid: Uid,
    /// Primary group id.
    pub gid: Gid,
    /// Supplementary groups (from the group database, as `initgroups(3)` would set).
    pub groups: Vec<Gid>,
    /// Home directory.
    pub home: PathBuf,
    /// Login shell.
    pub shell: PathBuf,
}

/// Looks up `name` in the user and group databases.
///
/// # Errors
/// A message naming the user when it does not exist or the lookup fails.
pub fn lookup_account(name: &str) -> Result<Account, String> {
    let found = match name.parse::<u32>() {
        Ok(uid) => User::from_uid(Uid::from_raw(uid)),
        Err(_) => User::from_name(name),
    };
    let user = match found {
        Ok(Some(u)) => u,
        Ok(None) => return Err(format!("user {name:?} does not exist")),
        Err(e) => return Err(format!("cannot look up user {name:?}: {e}")),
    };
    let cname = std::ffi::CString::new(user.name.as_str())
        .map_err(|_| format!("bad user name {name:?}"))?;
    let groups = nix::unistd::getgrouplist(&cname, user.gid)
        .map_err(|e| format!("cannot read the groups of user {name:?}: {e}"))?;
    Ok(Account {
        name: user.name.clone(),
        uid: user.uid,
        gid: user.gid,
        groups,
        home: user.dir,
        shell: user.shell,
    })
}

/// What to start.
#[derive(Debug, Clone)]
pub struct Spec {
    /// argv; `argv[0]` without a `/` is looked up in `PATH`.
    pub argv: Vec<String>,
    /// Variables to set (on top of the shim's environment).
    pub env: Vec<(String, String)>,
    /// Variables to remove from the shim's environment.
    pub env_remove: Vec<String>,
    /// Working directory.
    pub cwd: Option<PathBuf>,
    /// Account to switch to; `None` keeps the shim's.
    pub account: Option<Account>,
}

/// Starts the command. The child gets its own session and process group (pgid = pid).
///
/// # Errors
/// The `io::Error` of the spawn: `NotFound` and `PermissionDenied` when exec failed.
pub fn spawn(spec: &Spec) -> std::io::Result<Pid> {
    let (program, args) = spec
        .argv
        .split_first()
        .ok_or_else(|| std::io::Error::other("empty command"))?;
    let mut cmd = Command::new(program);
    cmd.args(args).stdin(Stdio::null());
    for k in &spec.env_remove {
        cmd.env_remove(k);
    }
    if let Some(acct) = &spec.account {
        cmd.env("HOME", &acct.home)
            .env("USER", &acct.name)
            .env("LOGNAME", &acct.name)
            .env("SHELL", &acct.shell);
    }
    for (k, v) in &spec.env {
        cmd.env(k, v);
    }
    if let Some(dir) = &spec.cwd {
        cmd.current_dir(dir);
    }
    let account = spec.account.clone();
    let parent = nix::unistd::getpid();
    // SAFETY: the closure runs in the forked child before exec and only makes
    // async-signal-safe system calls (setsid, setgroups, setgid, setuid, prctl,
    // getppid, sigprocmask, close_range); the group list was computed before the fork.
    unsafe {
        cmd.pre_exec(move || {
            nix::unistd::setsid()?;
            if let Some(a) = &account {
                nix::unistd::setgroups(&a.groups)?;
                nix::unistd::setgid(a.gid)?;
                nix::unistd::setuid(a.uid)?;
            }
            // Set after the credential change, which clears it (prctl(2)).
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)?;
            if nix::unistd::getppid() != parent {
                return Err(std::io::Error::other(
                    "shim exited before the command started",
                ));
            }
            sigprocmask(SigmaskHow::SIG_SETMASK, Some(&SigSet::empty()), None)?;
            // Descriptors the shim inherited without close-on-exec (a caller's shell or a
            // leaked pipe) do not reach the command: like a systemd service, it gets only
            // stdin, stdout and stderr. CLOSE_RANGE_CLOEXEC (Linux 5.11) keeps the fd std
            // uses to report a failed exec working until the exec. On an older kernel
            // (EINVAL, ENOSYS) the command starts anyway, as before.
            let _ = libc::close_range(3, libc::c_uint::MAX, libc::CLOSE_RANGE_CLOEXEC as i32);
            Ok(())
        });
    }
    let child = cmd.spawn()?;
    let pid = i32::try_from(child.id()).map_err(|_| std::io::Error::other("pid out of range"))?;
    // The `Child` handle is not needed: the pid is reaped by `waitpid` in `supervise`.
    drop(child);
    Ok(Pid::from_raw(pid))
}

/// The lease as the supervisor sees it: kept by the caller ([`Keeper`]), which renews it
/// without ever making the supervisor wait for the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Keep {
    /// The store answered that the lease is lost (expired or passed to another holder).
    pub lost: bool,
    /// SIGKILL must reach the command by this moment (the lease's expiry, measured from
    /// the last confirmed renewal, less the safety margin: [`crate::lease::fence_after`]).
    pub kill_by: Instant,
    /// Call [`Keeper::step`] again by then, even if its descriptor stays quiet.
    pub wake: Instant,
}

/// Keeps the lease while the command runs. [`supervise`] calls `step` whenever it wakes;
/// `step` starts a renewal when one is due and takes in the answers, and must never block
/// on the store (a store call runs elsewhere and signals its answer on `fd`).
pub trait Keeper {
    /// A descriptor that becomes readable when an answer is there for `step` to take.
    fn fd(&self) -> Option<std::os::fd::BorrowedFd<'_>>;
    /// Does what is due at `now`; returns the lease as it stands.
    fn step(&mut self, now: Instant) -> Keep;
}

/// Limits of a supervised run.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Stop the command after this long.
    pub timeout: Option<Duration>,
    /// SIGTERM → SIGKILL grace when the shim stops the command.
    pub kill_grace: Duration,
}

/// How the supervised command ended.
#[derive(Debug, Clone, Copy)]
pub struct Ended {
    /// Its wait status.
    pub status: ExitStatus,
    /// The shim stopped it because of the timeout.
    pub timed_out: bool,
    /// The shim stopped it because the lease was lost.
    pub lease_lost: bool,
    /// A stop signal the shim received and forwarded, if any.
    pub stop_signal: Option<Signal>,
}

/// Waits for `pid` to exit, forwarding SIGTERM/SIGINT/SIGHUP to its process group, letting
/// `keeper` renew the lease, and stopping the group (SIGTERM, then SIGKILL after the
/// grace) on timeout. Signals must be blocked ([`block_signals`]).
///
/// The lease is a deadline, not an event: the group gets SIGTERM `kill_grace` before the
/// keeper's [`Keep::kill_by`] (or at once when the store says the lease is lost) and
/// SIGKILL at `kill_by` at the latest, whatever else is going on; a SIGKILL after a
/// timeout or a stop signal also comes no later than `kill_by`. The loop sleeps in `poll`
/// until the next of these moments, so a command that ignores SIGTERM costs no CPU.
///
/// # Errors
/// The errno of signalfd, poll or waitpid.
pub fn supervise(pid: Pid, limits: Limits, keeper: &mut dyn Keeper) -> Result<Ended, Errno> {
    supervise_watching(pid, limits, keeper, None)
}

/// A descriptor polled beside the signalfd (the logind shutdown watch of
/// [`crate::logind`]), and what to do when it is readable: `ready` returns false to stop
/// polling it (e.g. its writer is gone).
pub struct Watch<'a> {
    /// Polled for `POLLIN`.
    pub fd: std::os::fd::BorrowedFd<'a>,
    /// Called on the shim's thread when `fd` is readable or hung up.
    pub ready: &'a mut dyn FnMut() -> bool,
}

/// [`supervise`], also polling `watch` (if any) and calling its `ready` when readable;
/// one thread, so nothing races the signal handling.
///
/// # Errors
/// The errno of signalfd, poll or waitpid.
pub fn supervise_watching(
    pid: Pid,
    limits: Limits,
    keeper: &mut dyn Keeper,
    mut watch: Option<Watch<'_>>,
) -> Result<Ended, Errno> {
    use std::os::fd::AsFd;
    let sfd = SignalFd::with_flags(
        &handled_set(),
        SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK,
    )?;
    let started = Instant::now();
    let deadline = limits.timeout.map(|t| started + t);
    // SIGKILL after a SIGTERM of the shim's own (timeout, stop signal, lost lease), once
    // the grace is over; `None` before any, or once sent.
    let mut kill_at: Option<Instant> = None;
    let mut killed = false;
    let mut keep = keeper.step(started);
    let mut ended = Ended {
        status: ExitStatus::default(),
        timed_out: false,
        lease_lost: false,
        stop_signal: None,
    };
    let term = |kill_at: &mut Option<Instant>, sig: Signal, now: Instant| {
        let _ = killpg(pid, sig);
        if kill_at.is_none() {
            *kill_at = Some(now + limits.kill_grace);
        }
    };
    loop {
        if let Some(status) = reap(pid)? {
            ended.status = status;
            // Anything the command left in its group goes with it.
            let _ = killpg(pid, Signal::SIGKILL);
            return Ok(ended);
        }
        let now = Instant::now();
        // The lease: SIGTERM once only the grace is left before the SIGKILL must land, or
        // at once when the store said it is lost. After that the lease is not renewed.
        if !ended.lease_lost {
            keep = keeper.step(now);
            let term_by = keep.kill_by.checked_sub(limits.kill_grace).unwrap_or(now);
            if keep.lost || now >= term_by {
                ended.lease_lost = true;
                term(&mut kill_at, Signal::SIGTERM, now);
            }
        }
        if let Some(d) = deadline
            && now >= d
            && !ended.timed_out
        {
            ended.timed_out = true;
            term(&mut kill_at, Signal::SIGTERM, now);
        }
        // SIGKILL: the grace is over, or the lease ends before it would be.
        let kill_due = kill_at.map(|k| k.min(keep.kill_by));
        if !killed && (kill_due.is_some_and(|k| now >= k) || now >= keep.kill_by) {
            let _ = killpg(pid, Signal::SIGKILL);
            killed = true;
        }
        // Sleep until the next thing to do: only moments still ahead count.
        let mut wake: Option<Instant> = None;
        let mut at = |t: Instant| {
            if t > now {
                wake = Some(wake.map_or(t, |w| w.min(t)));
            }
        };
        if !ended.lease_lost {
            at(keep.wake);
            at(keep.kill_by.checked_sub(limits.kill_grace).unwrap_or(now));
        }
        if !killed {
            at(keep.kill_by);
            if let Some(k) = kill_due {
                at(k);
            }
        }
        if let Some(d) = deadline
            && !ended.timed_out
        {
            at(d);
        }
        let wait = wake.map_or(Duration::from_secs(60), |w| w - now);
        // Rounded up: a wait shorter than a millisecond must not become a busy poll.
        let ms = wait.as_micros().div_ceil(1000).min(60_000);
        let ms = u16::try_from(ms).unwrap_or(u16::MAX);
        let mut fds = vec![PollFd::new(sfd.as_fd(), PollFlags::POLLIN)];
        let watch_at = watch.as_ref().map(|w| {
            fds.push(PollFd::new(w.fd, PollFlags::POLLIN));
            fds.len() - 1
        });
        let keeper_fd = if ended.lease_lost { None } else { keeper.fd() };
        if let Some(fd) = keeper_fd {
            fds.push(PollFd::new(fd, PollFlags::POLLIN));
        }
        match poll(&mut fds, PollTimeout::from(ms)) {
            Ok(_) | Err(Errno::EINTR) => {}
            Err(e) => return Err(e),
        }
        // The watch (logind's shutdown/sleep signals) is handled before the signals, so a
        // SIGTERM that systemd sends for a shutdown is already known to be one.
        let watch_ready = watch_at
            .and_then(|i| fds.get(i))
            .and_then(PollFd::revents)
            .is_some_and(|r| !r.is_empty());
        drop(fds);
        if watch_ready
            && let Some(w) = &mut watch
            && !(w.ready)()
        {
            watch = None;
        }
        while let Ok(Some(info)) = sfd.read_signal() {
            let Ok(sig) = Signal::try_from(info.ssi_signo as i32) else {
                continue;
            };
            if sig != Signal::SIGCHLD {
                STOP_SEEN.store(true, Ordering::Relaxed);
                ended.stop_signal = Some(sig);
                let _ = killpg(pid, sig);
                if matches!(sig, Signal::SIGTERM | Signal::SIGINT) && kill_at.is_none() {
                    kill_at = Some(Instant::now() + limits.kill_grace);
                }
            }
        }
    }
}

fn reap(pid: Pid) -> Result<Option<ExitStatus>, Errno> {
    use std::os::unix::process::ExitStatusExt;
    match waitpid(pid, Some(WaitPidFlag::WNOHANG)) {
        Ok(WaitStatus::Exited(_, code)) => Ok(Some(ExitStatus::from_raw((code & 0xff) << 8))),
        Ok(WaitStatus::Signaled(_, sig, core)) => Ok(Some(ExitStatus::from_raw(
            sig as i32 | if core { 0x80 } else { 0 },
        ))),
        Ok(_) => Ok(None),
        Err(Errno::EINTR) => Ok(None),
        Err(e) => Err(e),
    }
}

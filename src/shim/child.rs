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

use std::collections::BTreeMap;
use std::ffi::{CStr, CString, OsStr, OsString, c_char};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::process::ExitStatus;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sched::CloneFlags;
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

/// Sleeps `d`, in steps of at most 100 ms, looking for a stop between them
/// ([`stop_requested`]: the stop signals are blocked, so nothing else would wake the
/// sleep). Returns false, at once, when one was asked for, else true after `d`.
pub fn sleep_unless_stopped(d: std::time::Duration) -> bool {
    let wake = std::time::Instant::now() + d;
    loop {
        if stop_requested() {
            return false;
        }
        let left = wake.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return true;
        }
        std::thread::sleep(left.min(std::time::Duration::from_millis(100)));
    }
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
    /// The environment to start from: `None` for the shim's own, else these variables
    /// alone ([`super::environment::base`]).
    pub base: Option<Vec<(String, String)>>,
    /// Variables to set (on top of the base).
    pub env: Vec<(String, String)>,
    /// Variables to remove from the base.
    pub env_remove: Vec<String>,
    /// Working directory.
    pub cwd: Option<PathBuf>,
    /// Account to switch to; `None` keeps the shim's.
    pub account: Option<Account>,
}

/// Starts the command. The child gets its own session and process group (pgid = pid).
///
/// A command that keeps the shim's user is started as glibc's `posix_spawn(3)` starts its
/// children: `clone(2)` with `CLONE_VM | CLONE_VFORK`, on a stack of its own inside the
/// shim's memory, the calling thread suspended until the child has called `execve(2)` or
/// exited. `fork(2)` would copy the shim's page tables and then take a fault on every page
/// the shim writes afterwards (benches/shim-and-generator.sh: 0.25-0.29 ms of a 5 ms run).
/// `posix_spawn` itself cannot be used: it does not set `PR_SET_PDEATHSIG`. Everything
/// the child needs is built before the clone ([`Plan`]); the child then only makes system
/// calls, because it shares the memory of the shim, whose other threads (the logind
/// watcher) run on: it must not allocate or take a lock.
///
/// A command that runs as the job's `user` is forked: a change of credentials in a child
/// that shares the shim's memory would apply the kernel's `suid_dumpable` rule to that
/// memory, the shim's own (no core dumps; with `fs.suid_dumpable=1`, the job's user could
/// trace the child, and so the root shim's memory, between the switch and the exec).
///
/// # Errors
/// The `io::Error` of the spawn: `NotFound` and `PermissionDenied` when exec failed, as
/// `execvp(3)` reports them; `InvalidInput` for a NUL byte in the command, its
/// environment or its directory.
pub fn spawn(spec: &Spec) -> std::io::Result<Pid> {
    Plan::new(spec)?.start()
}

/// Size of the child's stack (bytes) when it shares the shim's memory: it only makes
/// system calls.
const CHILD_STACK: usize = 64 * 1024;

/// The longest file name (bytes) `execvp(3)` searches `PATH` for (`NAME_MAX`, limits.h).
const NAME_MAX: usize = 255;

/// Reported by the child when the shim had exited before the command could start
/// (not an errno: those are positive).
const SHIM_GONE: i32 = -1;

/// The child's work, prepared in the shim: C strings and the pointer arrays of `execve(2)`.
struct Plan {
    /// Paths to try in turn, as `execvp(3)` does: `argv[0]` when it holds a `/`, else
    /// `argv[0]` in each directory of the command's `PATH` (glibc's `/bin:/usr/bin` when
    /// it has none; an empty entry is the working directory, and then the name is tried
    /// as it is; a path too long for `PATH_MAX` is passed over).
    candidates: Vec<CString>,
    /// argv, NUL-terminated; the strings are owned by `_strings`.
    argv: Vec<*const c_char>,
    /// `/bin/sh CANDIDATE ARGS…`, NUL-terminated, for a file the kernel cannot execute
    /// (`ENOEXEC`: a script without `#!`), as `execvp(3)` runs it; slot 1 is the candidate.
    sh_argv: Vec<*const c_char>,
    /// The command's environment as `NAME=value`, NUL-terminated.
    envp: Vec<*const c_char>,
    /// Owns what `argv` and `envp` point into.
    _strings: Vec<CString>,
    cwd: Option<CString>,
    /// The account to switch to: the child is then forked (see [`spawn`]).
    account: Option<Account>,
    /// `/dev/null`, the command's stdin.
    devnull: OwnedFd,
    /// The shim's pid, to check from the child that it still runs.
    parent: libc::pid_t,
}

fn c_string(bytes: impl Into<Vec<u8>>) -> std::io::Result<CString> {
    CString::new(bytes).map_err(|_| {
        std::io::Error::new(std::io::ErrorKind::InvalidInput, "NUL byte in the command")
    })
}

impl Plan {
    fn new(spec: &Spec) -> std::io::Result<Plan> {
        let (program, _) = spec
            .argv
            .split_first()
            .ok_or_else(|| std::io::Error::other("empty command"))?;
        // The environment, as std::process::Command builds it: the base (the shim's, or
        // the clean one of a run started by hand), less the removed names, plus the
        // account's and the job's variables (the later wins).
        let mut env: BTreeMap<OsString, OsString> = match &spec.base {
            None => std::env::vars_os().collect(),
            Some(base) => base.iter().map(|(k, v)| (k.into(), v.into())).collect(),
        };
        for k in &spec.env_remove {
            env.remove(OsStr::new(k));
        }
        if let Some(acct) = &spec.account {
            env.insert("HOME".into(), acct.home.clone().into_os_string());
            env.insert("USER".into(), acct.name.clone().into());
            env.insert("LOGNAME".into(), acct.name.clone().into());
            env.insert("SHELL".into(), acct.shell.clone().into_os_string());
        }
        for (k, v) in &spec.env {
            env.insert(k.into(), v.into());
        }
        let candidates = if program.contains('/') {
            vec![c_string(program.as_str())?]
        } else if program.is_empty() {
            Vec::new()
        } else if program.len() > NAME_MAX {
            // execvp(3) fails at once, before any search.
            return Err(std::io::Error::from_raw_os_error(libc::ENAMETOOLONG));
        } else {
            let path = env.get(OsStr::new("PATH")).map(|p| p.as_bytes());
            let mut found = Vec::new();
            for dir in path.unwrap_or(b"/bin:/usr/bin").split(|b| *b == b':') {
                let candidate = match dir {
                    b"" => program.as_bytes().to_vec(),
                    dir => [dir, b"/", program.as_bytes()].concat(),
                };
                if candidate.len() < libc::PATH_MAX as usize {
                    found.push(c_string(candidate)?);
                }
            }
            found
        };
        let mut strings = Vec::with_capacity(spec.argv.len() + env.len());
        for a in &spec.argv {
            strings.push(c_string(a.as_str())?);
        }
        let args = strings.len();
        for (k, v) in &env {
            strings.push(c_string([k.as_bytes(), b"=", v.as_bytes()].concat())?);
        }
        let null = std::ptr::null::<c_char>();
        let argv: Vec<_> = strings[..args]
            .iter()
            .map(|s| s.as_ptr())
            .chain([null])
            .collect();
        let envp: Vec<_> = strings[args..]
            .iter()
            .map(|s| s.as_ptr())
            .chain([null])
            .collect();
        let sh_argv: Vec<_> = [SH.as_ptr(), null]
            .into_iter()
            .chain(argv[1..].iter().copied())
            .collect();
        let cwd = match &spec.cwd {
            Some(d) => Some(c_string(d.as_os_str().as_bytes())?),
            None => None,
        };
        let devnull = OwnedFd::from(std::fs::File::open("/dev/null")?);
        Ok(Plan {
            candidates,
            argv,
            sh_argv,
            envp,
            _strings: strings,
            cwd,
            account: spec.account.clone(),
            devnull,
            parent: nix::unistd::getpid().as_raw(),
        })
    }

    /// Starts the child, which runs [`Plan::exec`], and waits for its `execve(2)`: the
    /// child reports a failure as its errno on a close-on-exec pipe, which the exec
    /// closes.
    fn start(mut self) -> std::io::Result<Pid> {
        use nix::fcntl::OFlag;
        let (report, write_end) = nix::unistd::pipe2(OFlag::O_CLOEXEC)?;
        let writer = write_end.as_raw_fd();
        // Every signal stays blocked from the clone or fork until the child's exec, so
        // that no handler of the shim's runs in the child (posix_spawn does the same).
        let mut mask = SigSet::empty();
        nix::sys::signal::pthread_sigmask(
            SigmaskHow::SIG_SETMASK,
            Some(&SigSet::all()),
            Some(&mut mask),
        )?;
        let started = if self.account.is_some() {
            // SAFETY: the forked child runs only `Plan::exec`, whose calls are
            // async-signal-safe, then `_exit`.
            match unsafe { nix::unistd::fork() } {
                Ok(nix::unistd::ForkResult::Child) => {
                    if let Err(errno) = self.exec() {
                        report_failure(writer, errno);
                    }
                    // SAFETY: _exit(2) ends the child without running the shim's exit code.
                    unsafe { libc::_exit(127) }
                }
                Ok(nix::unistd::ForkResult::Parent { child }) => Ok(child),
                Err(e) => Err(e),
            }
        } else {
            let mut stack = vec![0u8; CHILD_STACK];
            let plan = &mut self;
            // SAFETY: CLONE_VFORK suspends this thread until the child has exec'd or
            // exited, so `self` and `stack` outlive its use of them. The child makes only
            // system calls, on the stack given, and writes to nothing but its own copies
            // of the descriptor table and signal dispositions, and slot 1 of `sh_argv`
            // (see `Plan::exec`); it changes no credential (`account` is `None`).
            unsafe {
                nix::sched::clone(
                    Box::new(move || {
                        if let Err(errno) = plan.exec() {
                            report_failure(writer, errno);
                        }
                        127
                    }),
                    &mut stack,
                    CloneFlags::CLONE_VM | CloneFlags::CLONE_VFORK,
                    Some(libc::SIGCHLD),
                )
            }
        };
        let _ = nix::sys::signal::pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&mask), None);
        let pid = started?;
        drop(write_end);
        let mut buf = [0u8; 4];
        let mut got = 0;
        while got < buf.len() {
            match nix::unistd::read(report.as_fd(), &mut buf[got..]) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(Errno::EINTR) => {}
                Err(e) => {
                    let _ = nix::sys::signal::kill(pid, Signal::SIGKILL);
                    let _ = waitpid(pid, None);
                    return Err(e.into());
                }
            }
        }
        if got == 0 {
            return Ok(pid);
        }
        let _ = waitpid(pid, None);
        Err(match i32::from_ne_bytes(buf) {
            SHIM_GONE => std::io::Error::other("shim exited before the command started"),
            errno => std::io::Error::from_raw_os_error(errno),
        })
    }

    /// In the child: set it up and exec the command; returns only on failure, with the
    /// errno to report ([`SHIM_GONE`] when the shim is gone). The order is
    /// std::process::Command's with the shim's former `pre_exec` step: stdin and the
    /// working directory (as the shim's user), then the session, the job's user, the
    /// parent-death signal, the descriptors and the signal mask.
    ///
    /// Only async-signal-safe calls that take no lock of the shim's. The job's user is
    /// only ever set in a forked child (see [`Plan::start`]).
    fn exec(&mut self) -> Result<(), i32> {
        fn check(ret: libc::c_long) -> Result<(), i32> {
            if ret < 0 {
                Err(Errno::last_raw())
            } else {
                Ok(())
            }
        }
        // SAFETY: plain system calls on values owned by `self`; see `Plan::start`.
        unsafe {
            // A handler of the shim's (the Rust runtime's SIGSEGV and SIGBUS ones) must
            // not run here, and exec would reset it anyway; SIGPIPE, which the Rust
            // runtime ignores, is given back its default, as std::process::Command does.
            // Other ignored signals stay ignored across the exec.
            for sig in 1..=64 {
                let mut old: libc::sigaction = std::mem::zeroed();
                if libc::sigaction(sig, std::ptr::null(), &mut old) != 0 {
                    continue;
                }
                if old.sa_sigaction == libc::SIG_DFL
                    || (old.sa_sigaction == libc::SIG_IGN && sig != libc::SIGPIPE)
                {
                    continue;
                }
                let mut default: libc::sigaction = std::mem::zeroed();
                default.sa_sigaction = libc::SIG_DFL;
                libc::sigaction(sig, &default, std::ptr::null_mut());
            }
            // dup2 onto itself would keep close-on-exec: clear it instead.
            match self.devnull.as_raw_fd() {
                0 => check(libc::fcntl(0, libc::F_SETFD, 0).into())?,
                fd => check(libc::dup2(fd, 0).into())?,
            }
            if let Some(dir) = &self.cwd {
                check(libc::chdir(dir.as_ptr()).into())?;
            }
            check(libc::setsid().into())?;
        }
        if let Some(a) = &self.account {
            // Forked, so glibc's wrappers change this process alone.
            nix::unistd::setgroups(&a.groups).map_err(|e| e as i32)?;
            nix::unistd::setgid(a.gid).map_err(|e| e as i32)?;
            nix::unistd::setuid(a.uid).map_err(|e| e as i32)?;
        }
        // SAFETY: as above.
        unsafe {
            // Set after the credential change, which clears it (prctl(2)).
            check(libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL).into())?;
            if libc::getppid() != self.parent {
                return Err(SHIM_GONE);
            }
            // Descriptors the shim inherited without close-on-exec (a caller's shell or a
            // leaked pipe) do not reach the command: like a systemd service, it gets only
            // stdin, stdout and stderr. CLOSE_RANGE_CLOEXEC is Linux 5.11; on an older
            // kernel (EINVAL, ENOSYS) the command starts anyway, as before.
            let _ = libc::close_range(3, libc::c_uint::MAX, libc::CLOSE_RANGE_CLOEXEC as i32);
            let mut empty: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut empty);
            check(libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut()).into())?;
            // execvp(3)'s search: go on past a missing file or directory, remember a
            // file that may not be executed, stop at any other error; report EACCES if
            // one was seen, else the last error.
            let mut denied = false;
            let mut last = libc::ENOENT;
            for path in &self.candidates {
                libc::execve(path.as_ptr(), self.argv.as_ptr(), self.envp.as_ptr());
                last = Errno::last_raw();
                match last {
                    libc::ENOEXEC => {
                        self.sh_argv[1] = path.as_ptr();
                        libc::execve(SH.as_ptr(), self.sh_argv.as_ptr(), self.envp.as_ptr());
                        return Err(Errno::last_raw());
                    }
                    libc::EACCES => denied = true,
                    libc::ENOENT
                    | libc::ENOTDIR
                    | libc::ESTALE
                    | libc::ENODEV
                    | libc::ETIMEDOUT => {}
                    errno => return Err(errno),
                }
            }
            Err(if denied { libc::EACCES } else { last })
        }
    }
}

/// In the child: writes `errno` to the report pipe for [`Plan::start`].
fn report_failure(writer: std::os::fd::RawFd, errno: i32) {
    let bytes = errno.to_ne_bytes();
    // SAFETY: write(2) of a local buffer; a failed write leaves the report empty, and
    // the shim then takes the child for started and sees it exit 127.
    unsafe {
        libc::write(writer, bytes.as_ptr().cast(), bytes.len());
    }
}

/// The shell `execvp(3)` runs a script without `#!` with.
const SH: &CStr = c"/bin/sh";

/// The lease as the supervisor sees it: kept by the caller ([`Keeper`]), which renews it
/// without ever making the supervisor wait for the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Keep {
    /// The store answered that the lease is lost (expired or passed to another holder).
    pub lost: bool,
    /// SIGKILL must reach the command by this moment (the lease's expiry, measured from
    /// the last confirmed renewal, less the safety margin: [`crate::guard::lease::fence_after`]).
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
/// [`crate::systemd::logind`]), and what to do when it is readable: `ready` returns false to stop
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

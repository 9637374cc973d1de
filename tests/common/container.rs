//! A throwaway host with systemd as PID 1, for tests that need the real thing: timers,
//! generators, `systemctl`, the journal, reboots and power cuts.
//!
//! [`Container::boot`] follows the recipe of `../shared/README.md`: `systemd-nspawn`
//! boots the machine's own root as an overlay, whose writable upper directory is a
//! temporary directory of the container's own. That directory is the container's disk:
//! what the container writes there (its /etc, its /var/lib, its journal) survives
//! [`Container::poweroff`] and [`Container::power_cut`] and is there again after
//! [`Container::boot_again`], as on a real server; each boot gets a new boot id.
//! Commands run inside through `nsenter -t PID1 -a` ([`Container::exec`]).
//!
//! Each container gets a unique machine name, host name and machine id, so tests may run
//! in parallel. `/dev/kmsg` inside is a FIFO that the harness reads ([`Container::kmsg`]):
//! an nspawn container has no kernel log of its own, and this is where a generator's
//! messages go (journald is told not to read it, `ReadKMsg=no`, so that the harness
//! sees every line). Dropping a [`Container`] kills it and removes its directories, also when
//! the test panics (then the console log and kmsg are printed first); set
//! `JOBGUARD_KEEP_CONTAINERS=1` to keep the directories for a look.
//!
//! What it leaves to the tests: what to install ([`Options`]) and what to check. Call
//! [`prerequisites`] first: booting needs root and `systemd-nspawn`.
//!
//! If a test run is killed (Ctrl-C), its containers keep running: they are the
//! `systemd-nspawn --machine=jg-...` processes and their `systemd` children.

use std::fmt;
use std::fs;
use std::io::{self, Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Component, Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// Units masked in every container: services the machine itself runs, which would fight
/// it for ports inside and keep the boot from finishing (`../shared/README.md`), and the
/// machine's housekeeping timers, whose catch-up runs would only add load.
pub const DEFAULT_MASKS: &[&str] = &[
    "postgresql.service",
    "postgresql@15-main.service",
    "mariadb.service",
    "redis-server.service",
    "rabbitmq-server.service",
    "mosquitto.service",
    "nats-server.service",
    "prometheus.service",
    "epmd.service",
    "epmd.socket",
    "apt-daily.timer",
    "apt-daily-upgrade.timer",
    "dpkg-db-backup.timer",
    "e2scrub_all.timer",
    "fstrim.timer",
    "logrotate.timer",
    "man-db.timer",
];

/// How long [`Container::exec`] waits for a command before it gives up.
pub const EXEC_TIMEOUT: Duration = Duration::from_secs(120);

const PATH_INSIDE: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Why booting or using a container failed. `Debug` prints the same as `Display`, so
/// that `.expect()` in a test shows the console log and command output readably.
pub enum Error {
    /// A file operation or a process start on the host failed.
    Io { what: String, source: io::Error },
    /// The container did not reach `running`/`degraded`, or systemd-nspawn exited.
    Boot {
        name: String,
        why: String,
        state: String,
        jobs: String,
        console: String,
    },
    /// A command inside exited unsuccessfully (from the `*_ok` helpers).
    Command {
        argv: String,
        status: ExitStatus,
        stdout: String,
        stderr: String,
    },
    /// Something did not happen in time.
    Timeout { what: String, after: Duration },
    /// The container is not booted (after `poweroff` or `power_cut`).
    NotRunning { name: String },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io { what, source } => write!(f, "{what}: {source}"),
            Error::Boot {
                name,
                why,
                state,
                jobs,
                console,
            } => write!(
                f,
                "container {name}: boot failed: {why}\n\
                 --- systemctl is-system-running: {state}\n\
                 --- systemctl list-jobs:\n{jobs}\n--- console (tail):\n{console}"
            ),
            Error::Command {
                argv,
                status,
                stdout,
                stderr,
            } => write!(
                f,
                "`{argv}` inside the container: {status}\n--- stdout:\n{stdout}\n--- stderr:\n{stderr}"
            ),
            Error::Timeout { what, after } => write!(f, "timed out after {after:?}: {what}"),
            Error::NotRunning { name } => write!(f, "container {name} is not running"),
        }
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl std::error::Error for Error {}

/// Result of the container operations.
pub type Result<T> = std::result::Result<T, Error>;

fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> Error {
    let what = what.into();
    move |source| Error::Io { what, source }
}

/// Why containers cannot be booted here (not root, no `systemd-nspawn`), or `None`.
/// Pass it to `common::go_on`, which skips the test, or fails it in CI.
pub fn prerequisites() -> Option<String> {
    if !nix::unistd::geteuid().is_root() {
        return Some("booting a systemd container needs root".into());
    }
    for tool in ["systemd-nspawn", "nsenter"] {
        if find_in_path(tool).is_none() {
            return Some(format!(
                "{tool} not found (apt-get install systemd-container util-linux)"
            ));
        }
    }
    None
}

fn find_in_path(tool: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_else(|| PATH_INSIDE.into());
    std::env::split_paths(&path)
        .chain(std::env::split_paths(PATH_INSIDE))
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
}

#[derive(Debug, Clone)]
enum Source {
    Bytes(Vec<u8>),
    Copy(PathBuf),
    Symlink(String),
    Dir,
}

#[derive(Debug, Clone)]
struct Install {
    path: String,
    source: Source,
    mode: Option<u32>,
}

/// What to put into a container's disk before it boots, and how to boot it.
///
/// Paths are absolute paths inside the container; they are written into the upper
/// directory, so they shadow the machine's own files at the same path.
#[derive(Debug, Clone)]
pub struct Options {
    installs: Vec<Install>,
    masks: Vec<String>,
    binds_ro: Vec<(PathBuf, String)>,
    binds: Vec<(PathBuf, String)>,
    boot_timeout: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            installs: Vec::new(),
            masks: DEFAULT_MASKS.iter().map(|s| s.to_string()).collect(),
            binds_ro: Vec::new(),
            binds: Vec::new(),
            boot_timeout: Duration::from_secs(90),
        }
    }
}

impl Options {
    /// Options with the default masks and a 90 s boot timeout.
    pub fn new() -> Self {
        Self::default()
    }

    /// A file with these contents, mode 0644.
    pub fn file(mut self, path: &str, contents: impl AsRef<[u8]>) -> Self {
        self.installs.push(Install {
            path: path.into(),
            source: Source::Bytes(contents.as_ref().to_vec()),
            mode: Some(0o644),
        });
        self
    }

    /// A file with these contents, mode 0755 (a script, a generator).
    pub fn executable(mut self, path: &str, contents: impl AsRef<[u8]>) -> Self {
        self.installs.push(Install {
            path: path.into(),
            source: Source::Bytes(contents.as_ref().to_vec()),
            mode: Some(0o755),
        });
        self
    }

    /// A copy of the host file `host`, with its mode (binaries keep their x bits).
    pub fn copy(mut self, host: impl AsRef<Path>, path: &str) -> Self {
        self.installs.push(Install {
            path: path.into(),
            source: Source::Copy(host.as_ref().to_path_buf()),
            mode: None,
        });
        self
    }

    /// A symbolic link at `path` pointing to `target` (a path inside the container).
    pub fn symlink(mut self, path: &str, target: &str) -> Self {
        self.installs.push(Install {
            path: path.into(),
            source: Source::Symlink(target.into()),
            mode: None,
        });
        self
    }

    /// An empty directory (mode 0755).
    pub fn dir(mut self, path: &str) -> Self {
        self.installs.push(Install {
            path: path.into(),
            source: Source::Dir,
            mode: Some(0o755),
        });
        self
    }

    /// Mask one more unit on the kernel command line (`systemd.mask=`).
    pub fn mask(mut self, unit: &str) -> Self {
        self.masks.push(unit.into());
        self
    }

    /// Bind a host path read-only into the container (`--bind-ro=`).
    pub fn bind_ro(mut self, host: impl AsRef<Path>, path: &str) -> Self {
        self.binds_ro
            .push((host.as_ref().to_path_buf(), path.into()));
        self
    }

    /// Bind a host path read-write into the container (`--bind=`): a directory that
    /// outlives the container's boots and power cuts, such as a small tmpfs of the host.
    pub fn bind(mut self, host: impl AsRef<Path>, path: &str) -> Self {
        self.binds.push((host.as_ref().to_path_buf(), path.into()));
        self
    }

    /// How long a boot may take to reach `running`/`degraded`.
    pub fn boot_timeout(mut self, timeout: Duration) -> Self {
        self.boot_timeout = timeout;
        self
    }
}

/// The host path of `inside` (an absolute path) below `base`; an error for relative
/// paths and `..`.
fn below(base: &Path, inside: &str) -> Result<PathBuf> {
    let p = Path::new(inside);
    let ok = p.is_absolute()
        && p.components()
            .all(|c| matches!(c, Component::RootDir | Component::Normal(_)));
    if !ok {
        return Err(Error::Io {
            what: format!("container path {inside:?}"),
            source: io::Error::new(
                io::ErrorKind::InvalidInput,
                "must be absolute, without '..'",
            ),
        });
    }
    Ok(base.join(p.strip_prefix("/").unwrap_or(p)))
}

/// Creates `dir` in an overlay's upper directory as an opaque directory
/// (`trusted.overlay.opaque=y`, see the kernel's overlayfs documentation): the lower
/// layer's files at that path are not visible through the overlay.
fn opaque_dir(dir: &Path) -> Result<()> {
    use std::os::unix::ffi::OsStrExt;
    fs::create_dir_all(dir).map_err(io_err(format!("create {}", dir.display())))?;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).map_err(|_| Error::Io {
        what: format!("path {}", dir.display()),
        source: std::io::Error::other("NUL in path"),
    })?;
    let name = c"trusted.overlay.opaque";
    // SAFETY: both strings are NUL-terminated and outlive the call; the value is 1 byte.
    let rc = unsafe { libc::setxattr(path.as_ptr(), name.as_ptr(), b"y".as_ptr().cast(), 1, 0) };
    if rc != 0 {
        return Err(Error::Io {
            what: format!("mark {} opaque", dir.display()),
            source: std::io::Error::last_os_error(),
        });
    }
    Ok(())
}

fn install(upper: &Path, item: &Install) -> Result<()> {
    let dest = below(upper, &item.path)?;
    if let Some(parent) = dest.parent() {
        fs::create_dir_all(parent).map_err(io_err(format!("create {}", parent.display())))?;
    }
    let what = format!("install {} as {}", dest.display(), item.path);
    match &item.source {
        Source::Bytes(b) => fs::write(&dest, b).map_err(io_err(what.clone()))?,
        Source::Copy(host) => {
            fs::copy(host, &dest).map_err(io_err(format!(
                "copy {} to {}",
                host.display(),
                dest.display()
            )))?;
        }
        Source::Symlink(target) => {
            std::os::unix::fs::symlink(target, &dest).map_err(io_err(what.clone()))?
        }
        Source::Dir => fs::create_dir_all(&dest).map_err(io_err(what.clone()))?,
    }
    if let Some(mode) = item.mode {
        fs::set_permissions(&dest, fs::Permissions::from_mode(mode)).map_err(io_err(what))?;
    }
    Ok(())
}

/// Collects what the container writes to its `/dev/kmsg`, a FIFO on the host.
struct Kmsg {
    text: Arc<Mutex<Vec<u8>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Kmsg {
    /// Creates the FIFO at `path` and starts reading it. The reader holds the FIFO open
    /// for reading and writing, so writers inside never block on open and the reader
    /// never sees end-of-file between writers.
    fn start(path: &Path) -> Result<Kmsg> {
        nix::unistd::mkfifo(path, nix::sys::stat::Mode::from_bits_truncate(0o600)).map_err(
            |e| Error::Io {
                what: format!("mkfifo {}", path.display()),
                source: e.into(),
            },
        )?;
        let mut fifo = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(path)
            .map_err(io_err(format!("open {}", path.display())))?;
        let text = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (t, s) = (Arc::clone(&text), Arc::clone(&stop));
        let thread = thread::spawn(move || {
            let mut buf = [0u8; 8192];
            while !s.load(Ordering::Relaxed) {
                match fifo.read(&mut buf) {
                    Ok(n) if n > 0 => {
                        if let Ok(mut v) = t.lock() {
                            v.extend_from_slice(&buf[..n]);
                        }
                    }
                    Ok(_) => thread::sleep(Duration::from_millis(50)),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        thread::sleep(Duration::from_millis(50))
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(_) => break,
                }
            }
        });
        Ok(Kmsg {
            text,
            stop,
            thread: Some(thread),
        })
    }

    fn text(&self) -> String {
        match self.text.lock() {
            Ok(v) => String::from_utf8_lossy(&v).into_owned(),
            Err(_) => String::new(),
        }
    }

    fn stop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Kmsg {
    fn drop(&mut self) {
        self.stop();
    }
}

/// One entry of the container's journal (`journalctl -o json`).
#[derive(Debug, Clone)]
pub struct JournalEntry(pub serde_json::Map<String, serde_json::Value>);

impl JournalEntry {
    /// A field's value as text: binary values are decoded lossily; for a field that
    /// occurs several times, the first value.
    pub fn get(&self, field: &str) -> Option<String> {
        fn text(v: &serde_json::Value) -> Option<String> {
            match v {
                serde_json::Value::String(s) => Some(s.clone()),
                serde_json::Value::Array(items)
                    if items.iter().all(|i| i.is_u64()) && !items.is_empty() =>
                {
                    let bytes: Vec<u8> = items
                        .iter()
                        .filter_map(|i| i.as_u64().and_then(|n| u8::try_from(n).ok()))
                        .collect();
                    Some(String::from_utf8_lossy(&bytes).into_owned())
                }
                serde_json::Value::Array(items) => items.first().and_then(text),
                _ => None,
            }
        }
        self.0.get(field).and_then(text)
    }
}

/// A command started inside the container with [`Container::spawn`]; killed (its
/// `nsenter`) when dropped unwaited.
pub struct Spawned {
    child: Option<Child>,
    argv: String,
}

impl Spawned {
    /// Waits up to `timeout` for the command; `None` if it is still running.
    pub fn wait_timeout(&mut self, timeout: Duration) -> Result<Option<Output>> {
        let deadline = Instant::now() + timeout;
        loop {
            let Some(child) = self.child.as_mut() else {
                return Err(Error::Io {
                    what: format!("wait for `{}`", self.argv),
                    source: io::Error::other("already waited for"),
                });
            };
            if child
                .try_wait()
                .map_err(io_err(format!("wait for `{}`", self.argv)))?
                .is_some()
            {
                let child = self.child.take().ok_or_else(|| Error::NotRunning {
                    name: self.argv.clone(),
                })?;
                return child
                    .wait_with_output()
                    .map(Some)
                    .map_err(io_err(format!("read output of `{}`", self.argv)));
            }
            if Instant::now() >= deadline {
                return Ok(None);
            }
            thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// A unique machine and host name: `jg-<tag>-<pid>-<n>`, valid as a host name.
fn unique_name(tag: &str) -> String {
    let clean: String = tag
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .take(30)
        .collect();
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("jg-{}-{}-{n}", clean.trim_matches('-'), std::process::id())
}

fn new_machine_id() -> Result<String> {
    let uuid = fs::read_to_string("/proc/sys/kernel/random/uuid")
        .map_err(io_err("read /proc/sys/kernel/random/uuid"))?;
    Ok(uuid.trim().replace('-', ""))
}

/// Host pid of the child of `parent` whose command name is `systemd`.
fn find_systemd_child(parent: u32) -> Option<i32> {
    let entries = fs::read_dir("/proc").ok()?;
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        let Some((comm, state, ppid)) = proc_stat(pid) else {
            continue;
        };
        if ppid == i64::from(parent) && comm == "systemd" && state != 'Z' {
            return Some(pid);
        }
    }
    None
}

/// (comm, state, ppid) from /proc/PID/stat.
fn proc_stat(pid: i32) -> Option<(String, char, i64)> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let comm = stat.get(open + 1..close)?.to_string();
    let mut rest = stat.get(close + 1..)?.split_whitespace();
    let state = rest.next()?.chars().next()?;
    let ppid = rest.next()?.parse().ok()?;
    Some((comm, state, ppid))
}

fn alive(pid: i32) -> bool {
    matches!(proc_stat(pid), Some((_, state, _)) if state != 'Z')
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Runs `cmd` to completion with a deadline; stdin gets `input` (or /dev/null).
fn run_with_timeout(
    mut cmd: Command,
    input: Option<&[u8]>,
    timeout: Duration,
    what: &str,
) -> Result<Output> {
    cmd.stdin(if input.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let mut child = cmd.spawn().map_err(io_err(format!("start `{what}`")))?;
    if let (Some(data), Some(mut stdin)) = (input, child.stdin.take()) {
        let data = data.to_vec();
        thread::spawn(move || {
            let _ = stdin.write_all(&data);
        });
    }
    let reader = |pipe: Option<Box<dyn Read + Send>>| {
        thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_end(&mut buf);
            }
            buf
        })
    };
    let out = reader(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let err = reader(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(status) = child
            .try_wait()
            .map_err(io_err(format!("wait for `{what}`")))?
        {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(Error::Timeout {
                what: format!("`{what}`"),
                after: timeout,
            });
        }
        thread::sleep(Duration::from_millis(10));
    };
    Ok(Output {
        status,
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
    })
}

/// A booted (or powered-off) throwaway host. See the module documentation.
pub struct Container {
    name: String,
    dir: Option<tempfile::TempDir>,
    root: PathBuf,
    upper: PathBuf,
    console: PathBuf,
    kmsg_path: PathBuf,
    kmsg: Kmsg,
    options: Options,
    nspawn: Option<Child>,
    leader: Option<i32>,
    boots: u32,
}

impl Container {
    /// Prepares the container's directories, installs `options`' files into its disk,
    /// boots it and waits until `systemctl is-system-running` prints `running` or
    /// `degraded`. `tag` becomes part of the unique machine name.
    ///
    /// Errors: a file could not be written, systemd-nspawn could not start or exited,
    /// or the boot did not finish within the boot timeout (the error carries the
    /// console log and `systemctl list-jobs`).
    pub fn boot(tag: &str, options: &Options) -> Result<Container> {
        let name = unique_name(tag);
        let dir = tempfile::Builder::new()
            .prefix(&format!("{name}."))
            .tempdir()
            .map_err(io_err("create the container's temporary directory"))?;
        let base = dir.path().to_path_buf();
        let root = base.join("root");
        let upper = base.join("upper");
        for d in [root.join("usr/lib"), root.join("etc"), upper.join("etc")] {
            fs::create_dir_all(&d).map_err(io_err(format!("create {}", d.display())))?;
        }
        // systemd-nspawn wants an OS tree at -D; the overlay replaces all of it.
        fs::copy("/etc/os-release", root.join("usr/lib/os-release"))
            .map_err(io_err("copy /etc/os-release"))?;
        let machine_id = new_machine_id()?;
        fs::write(upper.join("etc/machine-id"), format!("{machine_id}\n"))
            .map_err(io_err("write etc/machine-id"))?;
        // systemd sets the host name from /etc/hostname, over nspawn's --hostname.
        fs::write(upper.join("etc/hostname"), format!("{name}\n"))
            .map_err(io_err("write etc/hostname"))?;
        // The container has no kernel log: /dev/kmsg is the harness's FIFO, and the
        // harness must be its only reader (journald would read and drop the lines).
        let journald = upper.join("etc/systemd/journald.conf.d");
        fs::create_dir_all(&journald).map_err(io_err("create etc/systemd/journald.conf.d"))?;
        fs::write(
            journald.join("50-test-harness.conf"),
            "[Journal]\nReadKMsg=no\n",
        )
        .map_err(io_err("write the journald drop-in"))?;
        // The machine's own jobguard state (a job list, a store from a trial run) must not
        // leak into the container: opaque directories hide what the lower layer has there.
        for dir in ["etc/jobguard", "var/lib/jobguard"] {
            opaque_dir(&upper.join(dir))?;
        }
        for item in &options.installs {
            install(&upper, item)?;
        }
        let kmsg_path = base.join("kmsg");
        let kmsg = Kmsg::start(&kmsg_path)?;
        let mut c = Container {
            name,
            console: base.join("console.log"),
            dir: Some(dir),
            root,
            upper,
            kmsg_path,
            kmsg,
            options: options.clone(),
            nspawn: None,
            leader: None,
            boots: 0,
        };
        c.start()?;
        Ok(c)
    }

    /// Boots the container again on the same disk, after [`Container::poweroff`] or
    /// [`Container::power_cut`]. State written before survives; the boot id is new.
    pub fn boot_again(&mut self) -> Result<()> {
        if self.nspawn.is_some() {
            return Err(Error::Boot {
                name: self.name.clone(),
                why: "boot_again called while it is running".into(),
                state: String::new(),
                jobs: String::new(),
                console: String::new(),
            });
        }
        self.start()
    }

    fn start(&mut self) -> Result<()> {
        self.boots += 1;
        let mut log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.console)
            .map_err(io_err(format!("open {}", self.console.display())))?;
        let _ = writeln!(log, "=== boot {} ===", self.boots);
        let log2 = log
            .try_clone()
            .map_err(io_err("duplicate the console log descriptor"))?;
        let mut cmd = Command::new("systemd-nspawn");
        cmd.arg("-D")
            .arg(&self.root)
            .arg(format!("--overlay=/:{}:/", self.upper.display()))
            .args([
                "--register=no",
                "--keep-unit",
                "--console=passive",
                "--link-journal=no",
            ])
            .arg(format!("--machine={}", self.name))
            .arg(format!("--hostname={}", self.name))
            .arg(format!("--bind={}:/dev/kmsg", self.kmsg_path.display()));
        for (host, inside) in &self.options.binds_ro {
            cmd.arg(format!("--bind-ro={}:{inside}", host.display()));
        }
        for (host, inside) in &self.options.binds {
            cmd.arg(format!("--bind={}:{inside}", host.display()));
        }
        cmd.args(["-b", "--", "systemd.firstboot=off"]);
        for unit in &self.options.masks {
            cmd.arg(format!("systemd.mask={unit}"));
        }
        cmd.env_remove("NOTIFY_SOCKET")
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(log2));
        // A cgroup of its own in every hierarchy (see `own_cgroups`), made here: the child
        // only joins them, with calls that are async-signal-safe.
        let procs: Vec<std::ffi::CString> = own_cgroups(&self.name)?
            .iter()
            .filter_map(|d| {
                std::ffi::CString::new(d.join("cgroup.procs").as_os_str().as_encoded_bytes()).ok()
            })
            .collect();
        // Its own session, as in the recipe: a Ctrl-C in the terminal is not for it.
        // SAFETY: setsid, open, write and close are async-signal-safe; the paths were
        // made before the fork and are only read.
        unsafe {
            cmd.pre_exec(move || {
                for path in &procs {
                    let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                    if fd < 0 {
                        return Err(io::Error::last_os_error());
                    }
                    // "0": the writing process itself.
                    let n = libc::write(fd, b"0".as_ptr().cast(), 1);
                    let err = io::Error::last_os_error();
                    libc::close(fd);
                    if n != 1 {
                        return Err(err);
                    }
                }
                nix::unistd::setsid().map(|_| ()).map_err(io::Error::from)
            });
        }
        let child = cmd.spawn().map_err(io_err("start systemd-nspawn"))?;
        self.nspawn = Some(child);
        self.leader = None;
        self.wait_running(self.options.boot_timeout)
    }

    fn wait_running(&mut self, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        let mut state = String::from("(not asked yet)");
        loop {
            let Some(nspawn) = self.nspawn.as_mut() else {
                return Err(Error::NotRunning {
                    name: self.name.clone(),
                });
            };
            if let Ok(Some(status)) = nspawn.try_wait() {
                self.nspawn = None;
                self.leader = None;
                return Err(self.boot_error(format!("systemd-nspawn exited: {status}"), state));
            }
            if self.leader.is_none() {
                self.leader = find_systemd_child(nspawn.id());
            }
            if self.leader.is_some() {
                match self
                    .exec_timeout(&["systemctl", "is-system-running"], Duration::from_secs(10))
                {
                    Ok(out) => {
                        state = String::from_utf8_lossy(&out.stdout).trim().to_string();
                        if state == "running" || state == "degraded" {
                            return Ok(());
                        }
                    }
                    Err(e) => state = e.to_string(),
                }
            }
            if Instant::now() >= deadline {
                return Err(self.boot_error(format!("not up after {timeout:?}"), state));
            }
            thread::sleep(Duration::from_millis(100));
        }
    }

    fn boot_error(&self, why: String, state: String) -> Error {
        let jobs = if self.leader.is_some() {
            match self.exec_timeout(
                &["systemctl", "list-jobs", "--no-pager"],
                Duration::from_secs(10),
            ) {
                Ok(o) => String::from_utf8_lossy(&o.stdout).into_owned(),
                Err(e) => e.to_string(),
            }
        } else {
            "(container PID 1 not found)".into()
        };
        Error::Boot {
            name: self.name.clone(),
            why,
            state,
            jobs,
            console: tail(&self.console_log(), 80),
        }
    }

    /// The unique machine name, also the container's host name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The host directory of the container's disk (the overlay's upper directory). Read
    /// it only while the container is down: overlayfs does not promise what a reader of
    /// the upper directory sees while it is mounted.
    pub fn upper(&self) -> &Path {
        &self.upper
    }

    /// The host directory holding root, upper, the console log and the kmsg FIFO.
    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_ref().map(|d| d.path())
    }

    /// Whether the container is booted (systemd-nspawn is running).
    pub fn is_running(&mut self) -> bool {
        match self.nspawn.as_mut() {
            Some(c) => matches!(c.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// Host pids of systemd-nspawn and of the container's PID 1, while booted.
    pub fn pids(&self) -> Option<(u32, i32)> {
        Some((self.nspawn.as_ref()?.id(), self.leader?))
    }

    /// Everything systemd-nspawn and the container's console printed, all boots.
    pub fn console_log(&self) -> String {
        fs::read(&self.console)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    }

    /// Everything written to the container's `/dev/kmsg` so far, all boots.
    pub fn kmsg(&self) -> String {
        self.kmsg.text()
    }

    fn command(&self, argv: &[&str]) -> Result<Command> {
        let leader = self.leader.ok_or_else(|| Error::NotRunning {
            name: self.name.clone(),
        })?;
        let mut cmd = Command::new("nsenter");
        cmd.args(["-t", &leader.to_string(), "-a", "--"])
            .args(argv)
            .env_clear()
            .env("PATH", PATH_INSIDE)
            .env("HOME", "/root")
            .env("LANG", "C.UTF-8")
            .env("TERM", "dumb")
            .env("SYSTEMD_PAGER", "cat")
            .env("PAGER", "cat")
            .env("SYSTEMD_COLORS", "0");
        Ok(cmd)
    }

    /// Runs `argv` inside the container as root (all its namespaces, a clean
    /// environment with the usual PATH) and returns its output, whatever its status.
    /// Errors: the container is down, or the command ran longer than [`EXEC_TIMEOUT`].
    pub fn exec(&self, argv: &[&str]) -> Result<Output> {
        self.exec_timeout(argv, EXEC_TIMEOUT)
    }

    /// [`Container::exec`] with a deadline of its own.
    pub fn exec_timeout(&self, argv: &[&str], timeout: Duration) -> Result<Output> {
        run_with_timeout(self.command(argv)?, None, timeout, &argv.join(" "))
    }

    /// [`Container::exec`] that also fails on a non-zero status; returns stdout.
    pub fn exec_ok(&self, argv: &[&str]) -> Result<String> {
        let out = self.exec(argv)?;
        check(argv, out)
    }

    /// Runs a `/bin/sh -c` script inside; fails on a non-zero status; returns stdout.
    pub fn sh_ok(&self, script: &str) -> Result<String> {
        self.exec_ok(&["/bin/sh", "-c", script])
    }

    /// Writes `contents` to `path` inside the running container (parents created).
    pub fn write_file(&self, path: &str, contents: impl AsRef<[u8]>) -> Result<()> {
        let argv = [
            "/bin/sh",
            "-c",
            "mkdir -p \"$(dirname \"$1\")\" && cat > \"$1\"",
            "sh",
            path,
        ];
        let out = run_with_timeout(
            self.command(&argv)?,
            Some(contents.as_ref()),
            EXEC_TIMEOUT,
            &format!("write {path}"),
        )?;
        check(&argv, out).map(|_| ())
    }

    /// Starts `argv` inside the container in the background.
    pub fn spawn(&self, argv: &[&str]) -> Result<Spawned> {
        let mut cmd = self.command(argv)?;
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let child = cmd
            .spawn()
            .map_err(io_err(format!("start `{}`", argv.join(" "))))?;
        Ok(Spawned {
            child: Some(child),
            argv: argv.join(" "),
        })
    }

    /// The container's boot id (`/proc/sys/kernel/random/boot_id`), new at every boot.
    pub fn boot_id(&self) -> Result<String> {
        Ok(self
            .exec_ok(&["cat", "/proc/sys/kernel/random/boot_id"])?
            .trim()
            .to_string())
    }

    /// Every message of `unit` and of the manager about it, as text (`journalctl -u UNIT
    /// -o cat`); empty when the journal cannot be read.
    pub fn unit_log(&self, unit: &str) -> String {
        self.exec(&["journalctl", "-u", unit, "--no-pager", "-o", "cat"])
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default()
    }

    /// The journal entries (all boots) matching `matches` (`FIELD=value`, as for
    /// journalctl), oldest first.
    pub fn journal(&self, matches: &[&str]) -> Result<Vec<JournalEntry>> {
        let mut argv = vec!["journalctl", "--no-pager", "--all", "-o", "json"];
        argv.extend_from_slice(matches);
        let out = self.exec(&argv)?;
        // journalctl exits 1 with "-- No entries --" on stderr in some versions.
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let mut entries = Vec::new();
        for line in text.lines().filter(|l| l.starts_with('{')) {
            match serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(line) {
                Ok(map) => entries.push(JournalEntry(map)),
                Err(e) => {
                    return Err(Error::Io {
                        what: format!("parse journalctl output {line:?}"),
                        source: io::Error::new(io::ErrorKind::InvalidData, e),
                    });
                }
            }
        }
        if entries.is_empty() && !out.status.success() && !out.stderr.is_empty() {
            let stderr = String::from_utf8_lossy(&out.stderr);
            if !stderr.contains("No entries") {
                return Err(Error::Command {
                    argv: argv.join(" "),
                    status: out.status,
                    stdout: text,
                    stderr: stderr.into_owned(),
                });
            }
        }
        Ok(entries)
    }

    /// A clean shutdown: `systemctl poweroff` inside, then waits (up to 90 s) for
    /// systemd-nspawn to exit. On timeout the container is killed and an error returned.
    pub fn poweroff(&mut self) -> Result<()> {
        if self.nspawn.is_none() {
            return Err(Error::NotRunning {
                name: self.name.clone(),
            });
        }
        // The connection may drop while systemd goes down: the status says nothing.
        let _ = self.exec_timeout(&["systemctl", "poweroff"], Duration::from_secs(30));
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            let done = match self.nspawn.as_mut() {
                Some(c) => c
                    .try_wait()
                    .map_err(io_err("wait for systemd-nspawn"))?
                    .is_some(),
                None => true,
            };
            if done {
                self.nspawn = None;
                self.wait_leader_gone();
                self.leader = None;
                self.remove_nspawn_leftovers();
                return Ok(());
            }
            if Instant::now() >= deadline {
                self.kill();
                return Err(Error::Timeout {
                    what: format!("container {} to power off", self.name),
                    after: Duration::from_secs(90),
                });
            }
            thread::sleep(Duration::from_millis(50));
        }
    }

    /// Freezes (`true`) or thaws the whole container with the cgroup v2 freezer: `1` or
    /// `0` in `cgroup.freeze` of its own cgroup in the unified hierarchy (cgroups(7),
    /// "Freezing"; the kernel's cgroup-v2.rst), as a hypervisor pauses a VM: nothing in it
    /// runs, its clocks go on. Waits until `cgroup.events` says `frozen 1` (`frozen 0`).
    ///
    /// Errors: no unified hierarchy with a freezer here, a write failed, or the state did
    /// not come within 10 s.
    #[allow(dead_code)]
    pub fn freeze(&self, frozen: bool) -> Result<()> {
        let dir = cgroup_dirs(&self.name)
            .into_iter()
            .find(|d| d.join("cgroup.freeze").is_file())
            .ok_or_else(|| Error::Io {
                what: format!("freeze {}", self.name),
                source: io::Error::other("no cgroup v2 freezer (cgroup.freeze) for the container"),
            })?;
        let value = if frozen { "1" } else { "0" };
        fs::write(dir.join("cgroup.freeze"), value)
            .map_err(io_err(format!("write {}/cgroup.freeze", dir.display())))?;
        let want = format!("frozen {value}");
        let until = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let events = fs::read_to_string(dir.join("cgroup.events")).unwrap_or_default();
            if events.lines().any(|l| l == want) {
                return Ok(());
            }
            if std::time::Instant::now() > until {
                return Err(Error::Timeout {
                    what: format!("{} to say {want}", dir.join("cgroup.events").display()),
                    after: Duration::from_secs(10),
                });
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// A power cut: SIGKILL to the container's PID 1 (and so to everything in it) and to
    /// systemd-nspawn, then waits until both are gone. Nothing inside gets to clean up;
    /// what was written to the disk before stays.
    pub fn power_cut(&mut self) -> Result<()> {
        if self.nspawn.is_none() {
            return Err(Error::NotRunning {
                name: self.name.clone(),
            });
        }
        self.kill();
        Ok(())
    }

    fn kill(&mut self) {
        if let Some(pid) = self.leader {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
        if let Some(mut child) = self.nspawn.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.wait_leader_gone();
        self.leader = None;
        self.remove_nspawn_leftovers();
    }

    fn wait_leader_gone(&self) {
        if let Some(pid) = self.leader {
            let deadline = Instant::now() + Duration::from_secs(10);
            while alive(pid) && Instant::now() < deadline {
                thread::sleep(Duration::from_millis(20));
            }
        }
    }

    /// systemd-nspawn keeps a lock file per image and a propagation directory per
    /// machine under /run/systemd/nspawn; a killed nspawn leaves them behind.
    fn remove_nspawn_leftovers(&self) {
        let _ = fs::remove_dir(format!("/run/systemd/nspawn/propagate/{}", self.name));
        if let Ok(meta) = fs::metadata(&self.root) {
            use std::os::unix::fs::MetadataExt;
            let lock = format!(
                "/run/systemd/nspawn/locks/inode-{}:{}",
                meta.dev(),
                meta.ino()
            );
            let _ = fs::remove_file(lock);
        }
    }
}

/// Where the cgroup hierarchies are mounted on this machine that `systemd-nspawn` places a
/// container in: the named `systemd` one and the unified one of a cgroup v1 or hybrid
/// layout, or the cgroup v2 root.
const CGROUP_ROOTS: [&str; 3] = [
    "/sys/fs/cgroup/systemd",
    "/sys/fs/cgroup/unified",
    "/sys/fs/cgroup",
];

/// The container's own cgroup in each hierarchy mounted here, `ROOT/jg-harness/NAME`.
fn cgroup_dirs(name: &str) -> Vec<PathBuf> {
    CGROUP_ROOTS
        .iter()
        .map(Path::new)
        .filter(|root| root.join("cgroup.procs").is_file())
        .map(|root| root.join("jg-harness").join(name))
        .collect()
}

/// Creates the container's own cgroups ([`cgroup_dirs`]) for systemd-nspawn to start in.
///
/// Without them, on a machine whose PID 1 is not systemd, `systemd-nspawn --keep-unit`
/// builds every container's tree (`payload/system.slice/…`) under the cgroup it runs in,
/// the root for all of them: a unit of one name on two containers then has one cgroup
/// directory, which one container's systemd removes when its run ends while the other's
/// is starting there (`status=219/CGROUP`, "Failed to attach to cgroup …: No such file
/// or directory"), and two real hosts never share that.
fn own_cgroups(name: &str) -> Result<Vec<PathBuf>> {
    let dirs = cgroup_dirs(name);
    for d in &dirs {
        fs::create_dir_all(d).map_err(io_err(format!("create cgroup {}", d.display())))?;
    }
    Ok(dirs)
}

/// Removes a cgroup and the ones below it, deepest first; a cgroup that still has
/// processes stays.
fn remove_cgroup(dir: &Path) {
    if let Ok(entries) = fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                remove_cgroup(&e.path());
            }
        }
    }
    let _ = fs::remove_dir(dir);
}

fn check(argv: &[&str], out: Output) -> Result<String> {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    if out.status.success() {
        return Ok(stdout);
    }
    Err(Error::Command {
        argv: argv.join(" "),
        status: out.status,
        stdout,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    })
}

impl Drop for Container {
    fn drop(&mut self) {
        self.kill();
        self.kmsg.stop();
        for dir in cgroup_dirs(&self.name) {
            remove_cgroup(&dir);
            // The common parent goes with the last container.
            if let Some(parent) = dir.parent() {
                let _ = fs::remove_dir(parent);
            }
        }
        if thread::panicking() {
            eprintln!(
                "--- container {}: console (tail):\n{}\n--- container {}: kmsg (tail):\n{}",
                self.name,
                tail(&self.console_log(), 60),
                self.name,
                tail(&self.kmsg(), 60)
            );
        }
        let keep = std::env::var("JOBGUARD_KEEP_CONTAINERS").is_ok_and(|v| v == "1");
        if let Some(dir) = self.dir.take() {
            if keep {
                eprintln!("container {}: kept {}", self.name, dir.keep().display());
            } else if let Err(e) = dir.close() {
                eprintln!(
                    "container {}: could not remove its directory: {e}",
                    self.name
                );
            }
        }
    }
}

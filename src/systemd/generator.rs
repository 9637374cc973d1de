//! The systemd generator: load the job list, [`render`](crate::systemd::render::render) it, write the result.
//!
//! Follows systemd.generator(7): runs at boot and on every daemon-reload, writes only
//! into its output directory, talks to no other process, and never holds up boot. A bad
//! job (or file) is a warning ending in "skipping …" and the other jobs are still
//! written; the exit status is 0 unless the output directory cannot be written. In
//! generator mode warnings go to the kernel log (`/dev/kmsg`, as `<4>jobguard-generator[PID]: …`),
//! because stderr of a generator may go nowhere; otherwise to stderr.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::Write as _;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::sys::stat::Mode;
use nix::unistd::UnlinkatFlags;

use crate::joblist::config::{ConfigError, ConfigSource, ErrorScope, JobSet};
use crate::joblist::job::Job;
use crate::systemd::render::{RenderOptions, UnitContent, UnitFile, render_common, render_jobs};

/// Identifier in log lines.
pub const IDENT: &str = "jobguard-generator";

/// A failure to write the output.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// A file, directory or link could not be created.
    #[error("cannot write {path}: {source}")]
    Io {
        /// The path that failed.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
}

/// Where warnings go.
pub enum Log {
    /// The kernel log, one record per write.
    Kmsg(File),
    /// Standard error, each line prefixed with this program name and `: `.
    Stderr(&'static str),
}

impl Log {
    /// The kernel log when `generator_mode` and `/dev/kmsg` is writable, else stderr.
    pub fn open(generator_mode: bool) -> Self {
        if generator_mode && let Ok(f) = std::fs::OpenOptions::new().write(true).open("/dev/kmsg") {
            return Log::Kmsg(f);
        }
        Log::Stderr(IDENT)
    }

    /// Logs one line at warning level (kmsg priority 4).
    pub fn warn(&mut self, line: &str) {
        self.write(4, line);
    }

    /// Logs one line at error level (kmsg priority 3).
    pub fn error(&mut self, line: &str) {
        self.write(3, line);
    }

    fn write(&mut self, prio: u8, line: &str) {
        match self {
            Log::Kmsg(f) => {
                // One record per write(2); the kernel cuts records at about 1 KiB.
                let mut rec = format!("<{prio}>{IDENT}[{}]: {line}", std::process::id());
                if rec.len() > 1000 {
                    let mut cut = 1000;
                    while !rec.is_char_boundary(cut) {
                        cut -= 1;
                    }
                    rec.truncate(cut);
                }
                rec.push('\n');
                if f.write_all(rec.as_bytes()).is_err() {
                    eprintln!("{IDENT}: {line}");
                }
            }
            Log::Stderr(prog) => eprintln!("{prog}: {line}"),
        }
    }
}

/// The warning line for a job-list error: the error, then what was skipped.
pub fn warning_line(e: &ConfigError) -> String {
    match (e.scope, &e.job) {
        (ErrorScope::Job, Some(job)) => format!("{e}; skipping job {job}"),
        (ErrorScope::File, _) => format!("{e}; skipping file"),
        _ => format!("{e}; skipping this key"),
    }
}

/// Writes `units` below `dir` (which must exist): creates parent directories, replaces a
/// file or link that is already at a path. Keeps going after a failure.
///
/// # Errors
/// Every path that could not be written.
pub fn write_units(dir: &Path, units: &[UnitFile]) -> Result<(), Vec<WriteError>> {
    let mut uses: HashMap<&Path, usize> = HashMap::new();
    for u in units {
        if let Some(parent) = u.path.parent().filter(|p| !p.as_os_str().is_empty()) {
            *uses.entry(parent).or_default() += 1;
        }
    }
    let mut shared: Vec<&Path> = uses
        .iter()
        .filter(|(_, n)| **n > 1)
        .map(|(p, _)| *p)
        .collect();
    shared.sort();
    let mut errors = make_dirs(dir, &shared);
    let shared: HashSet<&Path> = shared.into_iter().collect();
    match OutDir::open(dir) {
        Ok(out) => errors.extend(in_parallel(units, |part| write_part(&out, part, &shared))),
        Err(e) => errors.push(e),
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors)
    }
}

/// Makes directories below `dir` (and their parents).
fn make_dirs(dir: &Path, rel: &[&Path]) -> Vec<WriteError> {
    let mut errors = Vec::new();
    for p in rel {
        let path = dir.join(p);
        if let Err(source) = std::fs::create_dir_all(&path) {
            errors.push(WriteError::Io { path, source });
        }
    }
    errors
}

/// Runs `f` on slices of `items` in a few threads and collects what they return, in
/// order. Most of a generator's time is file-system calls, which two or more threads
/// overlap well (systemd.generator(7) asks generators to be fast).
fn in_parallel<T: Sync>(
    items: &[T],
    f: impl Fn(&[T]) -> Vec<WriteError> + Sync,
) -> Vec<WriteError> {
    let threads = if items.len() < PARALLEL_MIN {
        1
    } else {
        std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .clamp(1, MAX_THREADS)
    };
    if threads == 1 {
        return f(items);
    }
    let chunk = items.len().div_ceil(threads);
    let f = &f;
    std::thread::scope(|scope| {
        let handles: Vec<_> = items
            .chunks(chunk)
            .map(|part| scope.spawn(move || f(part)))
            .collect();
        handles
            .into_iter()
            .flat_map(|h| {
                h.join().unwrap_or_else(|_| {
                    vec![WriteError::Io {
                        path: PathBuf::new(),
                        source: std::io::Error::other("writer thread panicked"),
                    }]
                })
            })
            .collect()
    })
}

/// Fewer items than this are written by one thread.
const PARALLEL_MIN: usize = 64;
/// Most writer threads.
const MAX_THREADS: usize = 4;

/// The output directory, opened once: every entry is made relative to it (`mkdirat`,
/// `openat`, `symlinkat`), which spares the kernel the walk down its path each time.
struct OutDir<'a> {
    path: &'a Path,
    fd: OwnedFd,
}

impl<'a> OutDir<'a> {
    fn open(path: &'a Path) -> Result<Self, WriteError> {
        let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
        match nix::fcntl::open(path, flags, Mode::empty()) {
            Ok(fd) => Ok(OutDir { path, fd }),
            Err(e) => Err(WriteError::Io {
                path: path.to_path_buf(),
                source: e.into(),
            }),
        }
    }

    fn error(&self, rel: &Path, source: std::io::Error) -> WriteError {
        WriteError::Io {
            path: self.path.join(rel),
            source,
        }
    }
}

/// Writes a slice of the units; parents not in `shared` (already made) are made here.
fn write_part(out: &OutDir<'_>, part: &[UnitFile], shared: &HashSet<&Path>) -> Vec<WriteError> {
    let mut errors = Vec::new();
    for u in part {
        if let Some(parent) = u
            .path
            .parent()
            .filter(|p| !p.as_os_str().is_empty() && !shared.contains(p))
        {
            match nix::sys::stat::mkdirat(&out.fd, parent, Mode::from_bits_truncate(0o755)) {
                Ok(()) | Err(Errno::EEXIST) => {}
                Err(e) => {
                    errors.push(out.error(parent, e.into()));
                    continue;
                }
            }
        }
        if let Err(e) = write_one(out, &u.path, &u.content) {
            errors.push(out.error(&u.path, e));
        }
    }
    errors
}

fn write_file(out: &OutDir<'_>, rel: &Path, text: &str) -> std::io::Result<()> {
    // O_NOFOLLOW: replace a link that is in the way rather than write through it.
    let flags =
        OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_TRUNC | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let fd = nix::fcntl::openat(&out.fd, rel, flags, Mode::from_bits_truncate(0o644))?;
    File::from(fd).write_all(text.as_bytes())
}

fn write_one(out: &OutDir<'_>, rel: &Path, content: &UnitContent) -> std::io::Result<()> {
    match content {
        UnitContent::File(text) => match write_file(out, rel, text) {
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
                nix::unistd::unlinkat(&out.fd, rel, UnlinkatFlags::NoRemoveDir)?;
                write_file(out, rel, text)
            }
            r => r,
        },
        UnitContent::Symlink(target) => {
            match nix::unistd::symlinkat(target.as_path(), &out.fd, rel) {
                Err(Errno::EEXIST) => {
                    nix::unistd::unlinkat(&out.fd, rel, UnlinkatFlags::NoRemoveDir)?;
                    Ok(nix::unistd::symlinkat(target.as_path(), &out.fd, rel)?)
                }
                r => Ok(r?),
            }
        }
    }
}

/// What the generator was asked to do.
#[derive(Debug, Clone)]
pub struct GeneratorArgs {
    /// The output directory (systemd's "normal" directory).
    pub normal_dir: PathBuf,
    /// Whether systemd runs us (three directories given, or `SYSTEMD_SCOPE` set): then
    /// warnings go to the kernel log.
    pub generator_mode: bool,
}

/// Loads, renders, writes and logs: the whole generator. Returns the exit status:
/// [`crate::exit::OK`], or [`crate::exit::FAILURE`] when the output could not be written.
pub fn run(args: &GeneratorArgs) -> u8 {
    let mut log = Log::open(args.generator_mode);
    let set = crate::joblist::config::load(&ConfigSource::resolve(None));
    let status = generate_into(&set, &args.normal_dir, &RenderOptions::from_env(), &mut log);
    // The process exits next: freeing thousands of jobs one by one is time at every boot
    // and reload for nothing.
    std::mem::forget(set);
    status
}

/// Logs `set`'s errors, renders it and writes the units into `dir`. Returns the exit
/// status as [`run`] does. Rendering and writing are split over a few threads by job;
/// the output is the same as [`write_units`] of [`crate::systemd::render::render`].
pub fn generate_into(set: &JobSet, dir: &Path, opts: &RenderOptions, log: &mut Log) -> u8 {
    for e in &set.errors {
        log.warn(&warning_line(e));
    }
    let jobs: Vec<&Job> = set.jobs.values().collect();
    let mut errors = Vec::new();
    if !jobs.is_empty() {
        errors.extend(make_dirs(dir, &[Path::new(WANTS_DIR)]));
        let shared: HashSet<&Path> = [Path::new(WANTS_DIR)].into_iter().collect();
        match OutDir::open(dir) {
            Ok(out) => errors.extend(in_parallel(&jobs, |part| {
                write_part(&out, &render_jobs(part, opts), &shared)
            })),
            Err(e) => errors.push(e),
        }
    }
    if let Err(e) = write_units(dir, &render_common(set, opts)) {
        errors.extend(e);
    }
    if errors.is_empty() {
        return crate::exit::OK;
    }
    for e in errors {
        log.error(&e.to_string());
    }
    crate::exit::FAILURE
}

/// The `.wants/` directory that every job's timer link goes into.
const WANTS_DIR: &str = "timers.target.wants";

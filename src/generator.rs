//! The systemd generator: load the job list, [`render`] it, write the result.
//!
//! Follows systemd.generator(7): runs at boot and on every daemon-reload, writes only
//! into its output directory, talks to no other process, and never holds up boot. A bad
//! job (or file) is a warning ending in "skipping …" and the other jobs are still
//! written; the exit status is 0 unless the output directory cannot be written. In
//! generator mode warnings go to the kernel log (`/dev/kmsg`, as `<4>jobguard-generator[PID]: …`),
//! because stderr of a generator may go nowhere; otherwise to stderr.

use std::collections::HashSet;
use std::fs::File;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use crate::config::{ConfigError, ConfigSource, ErrorScope, JobSet};
use crate::render::{RenderOptions, UnitContent, UnitFile, render};

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
/// Every path that could not be written, in order.
pub fn write_units(dir: &Path, units: &[UnitFile]) -> Result<(), Vec<WriteError>> {
    let mut made: HashSet<PathBuf> = HashSet::new();
    let mut errors = Vec::new();
    for u in units {
        let path = dir.join(&u.path);
        if let Some(parent) = path.parent()
            && parent != dir
            && !made.contains(parent)
        {
            if let Err(source) = std::fs::create_dir_all(parent) {
                errors.push(WriteError::Io {
                    path: parent.to_path_buf(),
                    source,
                });
                continue;
            }
            made.insert(parent.to_path_buf());
        }
        if let Err(source) = write_one(&path, &u.content) {
            errors.push(WriteError::Io { path, source });
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors)
    }
}

fn write_one(path: &Path, content: &UnitContent) -> std::io::Result<()> {
    match content {
        UnitContent::File(text) => {
            // Replace rather than write through an existing link.
            if path
                .symlink_metadata()
                .is_ok_and(|m| m.file_type().is_symlink())
            {
                std::fs::remove_file(path)?;
            }
            std::fs::write(path, text)
        }
        UnitContent::Symlink(target) => match std::os::unix::fs::symlink(target, path) {
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                std::fs::remove_file(path)?;
                std::os::unix::fs::symlink(target, path)
            }
            r => r,
        },
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
    let set = crate::config::load(&ConfigSource::resolve(None));
    generate_into(&set, &args.normal_dir, &RenderOptions::from_env(), &mut log)
}

/// Logs `set`'s errors, renders it and writes the units into `dir`. Returns the exit
/// status as [`run`] does.
pub fn generate_into(set: &JobSet, dir: &Path, opts: &RenderOptions, log: &mut Log) -> u8 {
    for e in &set.errors {
        log.warn(&warning_line(e));
    }
    let units = render(set, opts);
    match write_units(dir, &units) {
        Ok(()) => crate::exit::OK,
        Err(errors) => {
            for e in errors {
                log.error(&e.to_string());
            }
            crate::exit::FAILURE
        }
    }
}

//! Finding and reading the job list: `/etc/jobguard/jobs.toml`, then
//! `/etc/jobguard/jobs.d/*.toml` in lexical order, or one file or directory named by
//! `--config` / `JOBGUARD_CONFIG`.
//!
//! Loading never stops at the first problem: every error is collected with its file,
//! line, column and key, bad jobs are left out, and the good ones are returned. A TOML
//! syntax error skips that file only. What a source reads, and how `[defaults]` layer:
//!
//! - [`ConfigSource::Default`]: `/etc/jobguard/jobs.toml` (may be missing), then
//!   `/etc/jobguard/jobs.d/*.toml`.
//! - a file: that file alone.
//! - a directory `D`: `D/jobs.toml` if present, then the other `D/*.toml` files, then
//!   `D/jobs.d/*.toml`, so `--config /etc/jobguard` reads what the default reads (plus
//!   any other `*.toml` beside `jobs.toml`).
//! - As root, a file that anyone but root could change (owned by another user, or
//!   writable by group or others, itself, its directory or any directory above; links
//!   resolved first) is not read: an error of scope [`ErrorScope::File`]
//!   ([`crate::safe_path::check_file`]).
//! - Only regular files (or links to them) whose names end in `.toml` and do not start
//!   with `.` are read; "lexical" is byte order of the file names.
//! - A job takes each key from, in order: its own table; the `[defaults]` of its own file;
//!   the `[defaults]` of the source's `jobs.toml` (which so apply to every file); the
//!   built-in default.
//! - Relative paths (`working_directory`, `store_file`, a `sqlite://relative/path.db`
//!   store) are relative to the directory of the file that wrote them, also when they
//!   come from `[defaults]`.
//! - A job defined in two files is an error naming both, and neither definition is used.
//!
//! The TOML is read through toml's span-keeping document API ([`toml::de::DeTable`]), so
//! every value keeps its position. Time spans follow [`crate::joblist::timespan`], schedules
//! [`crate::calendar`].

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use toml::Spanned;
use toml::de::{DeTable, DeValue};

use crate::calendar::{CalendarSpec, Schedule};
use crate::joblist::job::{
    self, CatchUp, Inhibit, Job, OnInterrupted, OnStoreUnavailable, SettleFailures,
};
use crate::joblist::keys;
use crate::joblist::timespan::TimeSpan;

/// The directory of the default job list.
pub const DEFAULT_CONFIG_DIR: &str = "/etc/jobguard";
/// The main file of a job-list directory; its `[defaults]` apply to every file.
pub const MAIN_FILE: &str = "jobs.toml";
/// The drop-in directory of a job-list directory.
pub const DROPIN_DIR: &str = "jobs.d";

/// Shortest accepted `lease_ttl`: the shim renews every third of it.
pub const MIN_LEASE_TTL: Duration = Duration::from_secs(3);

/// Largest accepted `catch_up_limit`.
pub const MAX_CATCH_UP_LIMIT: u32 = 10_000;

/// The first job list a process resolved ([`ConfigSource::resolved`]).
static RESOLVED: std::sync::OnceLock<ConfigSource> = std::sync::OnceLock::new();

/// Where the job list comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigSource {
    /// `/etc/jobguard/jobs.toml` and `/etc/jobguard/jobs.d/*.toml`.
    Default,
    /// A file, or a directory whose `*.toml` files are read in lexical order.
    Path(PathBuf),
}

impl ConfigSource {
    /// `--config` if given, else `JOBGUARD_CONFIG` if set and not empty, else the default.
    /// The first source resolved in a process is kept for [`ConfigSource::resolved`].
    pub fn resolve(cli: Option<PathBuf>) -> Self {
        let source = match (cli, std::env::var_os("JOBGUARD_CONFIG")) {
            (Some(p), _) => ConfigSource::Path(p),
            (None, Some(v)) if !v.is_empty() => ConfigSource::Path(PathBuf::from(v)),
            _ => ConfigSource::Default,
        };
        let _ = RESOLVED.set(source.clone());
        source
    }

    /// The job list this process read first ([`ConfigSource::resolve`]), if any. The
    /// shim passes it to the command as `JOBGUARD_CONFIG` (made absolute), so that
    /// `jobguard mark` inside the run finds the job's store in the same job list.
    pub fn resolved() -> Option<&'static ConfigSource> {
        RESOLVED.get()
    }
}

impl fmt::Display for ConfigSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigSource::Default => write!(
                f,
                "{DEFAULT_CONFIG_DIR}/{MAIN_FILE} and {DEFAULT_CONFIG_DIR}/{DROPIN_DIR}"
            ),
            ConfigSource::Path(p) => write!(f, "{}", p.display()),
        }
    }
}

/// What an error cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorScope {
    /// The file was not read (unreadable, TOML syntax error, missing `--config` path).
    File,
    /// The job named in [`ConfigError::job`] was left out.
    Job,
    /// A key outside any job (in `[defaults]` or at the top level); jobs that inherit a
    /// bad default get an error of their own.
    Key,
}

/// One problem in the job list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The file.
    pub file: PathBuf,
    /// 1-based line, when known.
    pub line: Option<usize>,
    /// 1-based column (in characters), when known.
    pub column: Option<usize>,
    /// The job, when the problem is inside one.
    pub job: Option<String>,
    /// The key, dotted (`jobs.sync.schedule`), when known.
    pub key: Option<String>,
    /// What is wrong.
    pub message: String,
    /// What was skipped because of it.
    pub scope: ErrorScope,
}

impl crate::exit::Status for ConfigError {
    /// 78 (`EX_CONFIG`): the job list is wrong.
    fn exit_status(&self) -> u8 {
        crate::exit::CONFIG
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if let Some(l) = self.line {
            write!(f, ":{l}")?;
            if let Some(c) = self.column {
                write!(f, ":{c}")?;
            }
        }
        if let Some(k) = &self.key {
            write!(f, ": {k}")?;
        }
        write!(f, ": {}", self.message)
    }
}

impl std::error::Error for ConfigError {}

/// The loaded job list: the valid jobs and every error found.
#[derive(Debug, Clone, Default)]
pub struct JobSet {
    /// Valid jobs by name.
    pub jobs: BTreeMap<String, Job>,
    /// Every problem found, in file order, then by position.
    pub errors: Vec<ConfigError>,
    /// The files read, in order.
    pub files: Vec<PathBuf>,
    /// `[metrics] textfile`: where `jobguard recover` writes every job's metrics
    /// ([`crate::ops::metrics`]) on each pass, for node_exporter's textfile collector.
    pub metrics_textfile: Option<PathBuf>,
    /// The valid stores named by `[defaults]` tables, in file order: read, besides the
    /// jobs' own, for the ledgers of jobs no longer in the list.
    pub default_stores: Vec<job::DefaultStore>,
}

impl JobSet {
    /// The jobs left out by an error in their definition ([`ErrorScope::Job`]), by name,
    /// each once: the generator writes no timer for them, so no slot of theirs runs.
    pub fn refused_jobs(&self) -> Vec<String> {
        let names: std::collections::BTreeSet<&String> = self
            .errors
            .iter()
            .filter(|e| e.scope == ErrorScope::Job)
            .filter_map(|e| e.job.as_ref())
            .filter(|name| !self.jobs.contains_key(*name))
            .collect();
        names.into_iter().cloned().collect()
    }
}

/// Loads the job list from `source`. Never fails as a whole: unreadable files and bad
/// jobs become entries of [`JobSet::errors`].
pub fn load(source: &ConfigSource) -> JobSet {
    load_jobs(source, None)
}

/// Loads the job list from `source` as [`load`] does, but builds only the job `name`:
/// what a command about one job (`jobguard run`, `mark`, `history` …) needs. Every file
/// is still read and parsed as TOML (a syntax error is still a [`ErrorScope::File`]
/// error), `[defaults]` and `[metrics]` are still read, and a second definition of `name`
/// is still refused; the tables of the other jobs are not read, so neither they nor their
/// errors are in the set. A shim whose job list holds 1,000 jobs spent about 14 ms of
/// each run building the other 999 (`OTHER_JOBS=999 benches/shim-and-generator.sh`).
pub fn load_one(source: &ConfigSource, name: &str) -> JobSet {
    load_jobs(source, Some(name))
}

/// [`load`], or [`load_one`] when `only` names a job.
fn load_jobs(source: &ConfigSource, only: Option<&str>) -> JobSet {
    let mut set = JobSet::default();
    let files = match source {
        ConfigSource::Default => {
            list_dir_source(Path::new(DEFAULT_CONFIG_DIR), false, &mut set.errors)
        }
        ConfigSource::Path(p) => {
            let p = absolute(p);
            match std::fs::metadata(&p) {
                Ok(m) if m.is_dir() => list_dir_source(&p, true, &mut set.errors),
                Ok(_) => vec![SourceFile {
                    path: p,
                    main: false,
                }],
                Err(e) => {
                    set.errors.push(file_error(&p, None, io_message(&e)));
                    Vec::new()
                }
            }
        }
    };
    let mut loader = Loader {
        only: only.map(str::to_string),
        ..Loader::default()
    };
    for f in &files {
        // As root, a file that someone else could write (or its directory, which could
        // take their files or links) is not read: they could write a job run as root.
        let checked = f
            .path
            .parent()
            .map_or(Ok(PathBuf::new()), crate::safe_path::check_file)
            .and_then(|_| crate::safe_path::check_file(&f.path));
        let real = match checked {
            Ok(real) => real,
            Err(e) => {
                set.errors.push(file_error(&f.path, None, e.to_string()));
                continue;
            }
        };
        let text = match read_regular(&real) {
            Ok(bytes) => match utf8_text(bytes) {
                Ok(t) => t,
                Err((line, column, message)) => {
                    set.errors
                        .push(file_error(&f.path, Some((line, column)), message));
                    continue;
                }
            },
            Err(e) => {
                set.errors.push(file_error(&f.path, None, io_message(&e)));
                continue;
            }
        };
        set.files.push(f.path.clone());
        loader.load_file(&f.path, &text, f.main);
    }
    loader.finish(&mut set);
    set
}

/// Loads a job list from text, as if read from `path` (which only names it in errors and
/// anchors relative paths). For tests and tools.
pub fn load_str(path: &Path, text: &str) -> JobSet {
    let mut set = JobSet::default();
    let path = absolute(path);
    set.files.push(path.clone());
    let mut loader = Loader::default();
    loader.load_file(&path, text, false);
    loader.finish(&mut set);
    set
}

struct SourceFile {
    path: PathBuf,
    main: bool,
}

fn absolute(p: &Path) -> PathBuf {
    std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf())
}

fn io_message(e: &std::io::Error) -> String {
    let s = e.to_string();
    // "No such file or directory (os error 2)" -> "no such file or directory"
    let s = s.split(" (os error").next().unwrap_or(&s);
    let mut c = s.chars();
    match c.next() {
        Some(first) => first.to_lowercase().chain(c).collect(),
        None => String::new(),
    }
}

fn file_error(path: &Path, pos: Option<(usize, usize)>, message: String) -> ConfigError {
    ConfigError {
        file: path.to_path_buf(),
        line: pos.map(|p| p.0),
        column: pos.map(|p| p.1),
        job: None,
        key: None,
        message,
        scope: ErrorScope::File,
    }
}

/// The `*.toml` entries of a directory, sorted by name; a missing directory is empty.
fn toml_files(dir: &Path, errors: &mut Vec<ConfigError>) -> Vec<PathBuf> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Vec::new(),
        Err(e) => {
            errors.push(file_error(dir, None, io_message(&e)));
            return Vec::new();
        }
    };
    let mut names: Vec<std::ffi::OsString> = entries
        .filter_map(Result::ok)
        .map(|e| e.file_name())
        .filter(|n| {
            let b = n.as_encoded_bytes();
            b.ends_with(b".toml") && !b.starts_with(b".")
        })
        .collect();
    names.sort_by(|a, b| a.as_encoded_bytes().cmp(b.as_encoded_bytes()));
    // Every entry is read, so a dangling symlink or a directory named *.toml is an error
    // that names it, not a silent gap in the job list.
    names.into_iter().map(|n| dir.join(n)).collect()
}

/// Reads a job-list file, which must be a regular file: a FIFO or a device (maybe behind
/// a symlink) would block or never end, and the generator must never hold up boot. Opened
/// with `O_NONBLOCK` so that opening a FIFO does not wait for a writer.
fn read_regular(path: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    let meta = file.metadata()?;
    if meta.is_dir() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::IsADirectory,
            "is a directory",
        ));
    }
    if !meta.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// The text of a job-list file, or the line, column and message of its first byte that
/// is not UTF-8 (TOML files are UTF-8; a list saved in Latin-1 is the usual cause).
fn utf8_text(bytes: Vec<u8>) -> Result<String, (usize, usize, String)> {
    String::from_utf8(bytes).map_err(|e| {
        let valid = e.utf8_error().valid_up_to();
        let bytes = e.as_bytes();
        let before = std::str::from_utf8(&bytes[..valid]).unwrap_or_default();
        let line = before.matches('\n').count() + 1;
        let column = before.rsplit('\n').next().unwrap_or("").chars().count() + 1;
        let message = format!(
            "not UTF-8 (byte 0x{:02x}): a job list is UTF-8 text",
            bytes.get(valid).copied().unwrap_or(0)
        );
        (line, column, message)
    })
}

/// Whether `path` is an entry of its directory (a dangling symlink is one).
fn entry_exists(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok()
}

/// The files of a directory source; `all_toml` also reads `DIR/*.toml` beside `jobs.toml`.
fn list_dir_source(dir: &Path, all_toml: bool, errors: &mut Vec<ConfigError>) -> Vec<SourceFile> {
    let main = dir.join(MAIN_FILE);
    let mut out = Vec::new();
    if entry_exists(&main) {
        out.push(SourceFile {
            path: main.clone(),
            main: true,
        });
    }
    if all_toml {
        for p in toml_files(dir, errors) {
            if p != main {
                out.push(SourceFile {
                    path: p,
                    main: false,
                });
            }
        }
    }
    for p in toml_files(&dir.join(DROPIN_DIR), errors) {
        out.push(SourceFile {
            path: p,
            main: false,
        });
    }
    out
}

/// Byte offsets of line starts, for offset → (line, column).
struct LineIndex<'a> {
    text: &'a str,
    starts: Vec<usize>,
}

impl<'a> LineIndex<'a> {
    fn new(text: &'a str) -> Self {
        let mut starts = vec![0];
        starts.extend(text.match_indices('\n').map(|(i, _)| i + 1));
        LineIndex { text, starts }
    }

    /// 1-based line and 1-based column in characters.
    fn position(&self, offset: usize) -> (usize, usize) {
        let offset = offset.min(self.text.len());
        let line = self
            .starts
            .partition_point(|&s| s <= offset)
            .saturating_sub(1);
        let start = self.starts[line];
        let col = self
            .text
            .get(start..offset)
            .map_or(offset - start, |s| s.chars().count());
        (line + 1, col + 1)
    }
}

/// Where a value came from: the file (index into [`Loader::files`]), position and key.
#[derive(Debug, Clone)]
struct Origin {
    file: usize,
    line: usize,
    column: usize,
    key: String,
}

/// A key's value as read from one table; `None` when it was invalid (the error is
/// already recorded).
#[derive(Debug, Clone)]
struct Val<T> {
    value: Option<T>,
    at: Origin,
}

/// Every job key as read from one table (`[defaults]` or `[jobs.NAME]`), validated on
/// its own; relative paths already resolved against that table's file.
#[derive(Debug, Clone, Default)]
struct Partial {
    description: Option<Val<String>>,
    schedule: Option<Val<(String, Schedule)>>,
    command: Option<Val<Vec<String>>>,
    user: Option<Val<String>>,
    working_directory: Option<Val<PathBuf>>,
    environment: Option<Val<BTreeMap<String, String>>>,
    timeout: Option<Val<Option<Duration>>>,
    randomized_delay: Option<Val<Option<Duration>>>,
    /// `store`, `store_file` or `store_credential`, whichever the table names (more than
    /// one: an error).
    store: Option<Val<StoreRef>>,
    store_wait: Option<Val<Duration>>,
    on_store_unavailable: Option<Val<OnStoreUnavailable>>,
    clock_tolerance: Option<Val<Duration>>,
    lease_ttl: Option<Val<Duration>>,
    on_interrupted: Option<Val<OnInterrupted>>,
    settle_failures: Option<Val<SettleFailures>>,
    inhibit: Option<Val<Inhibit>>,
    on_failure: Option<Val<String>>,
    on_success: Option<Val<String>>,
    enabled: Option<Val<bool>>,
    kill_grace: Option<Val<Duration>>,
    persistent: Option<Val<bool>>,
    catch_up: Option<Val<CatchUp>>,
    catch_up_limit: Option<Val<u32>>,
    retention: Option<Val<Option<Duration>>>,
}

#[derive(Debug, Clone)]
enum StoreRef {
    Address(String),
    File(PathBuf),
    Credential(String),
}

/// A job as read, before defaults: where it was defined and its own keys.
struct RawJob {
    name: String,
    at: Origin,
    own: Partial,
    /// Errors in the job's own table.
    errors: Vec<ConfigError>,
    /// Index of the file's `[defaults]` in [`Loader::defaults`].
    file_defaults: Option<usize>,
}

#[derive(Default)]
struct Loader {
    files: Vec<PathBuf>,
    /// `[defaults]` of each file that has one.
    defaults: Vec<Partial>,
    /// The `[defaults]` of the source's main file.
    global_defaults: Option<usize>,
    jobs: Vec<RawJob>,
    errors: Vec<ConfigError>,
    /// `[metrics] textfile` and where it was set.
    metrics_textfile: Option<(PathBuf, Origin)>,
    /// The one job to read ([`load_one`]); `None` reads them all.
    only: Option<String>,
}

/// Formats a dotted TOML key, quoting the parts that are not bare keys.
fn key_path(parts: &[&str]) -> String {
    let mut out = String::new();
    for (i, p) in parts.iter().enumerate() {
        if i > 0 {
            out.push('.');
        }
        push_key_part(&mut out, p);
    }
    out
}

/// Appends one part of a dotted key: bare when TOML allows, else quoted.
fn push_key_part(out: &mut String, p: &str) {
    let bare = !p.is_empty()
        && p.bytes()
            .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_');
    if bare {
        out.push_str(p);
        return;
    }
    out.push('"');
    for c in p.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.extend(c.escape_unicode()),
            c => out.push(c),
        }
    }
    out.push('"');
}

fn type_name(v: &DeValue<'_>) -> &'static str {
    match v {
        DeValue::String(_) => "a string",
        DeValue::Integer(_) => "an integer",
        DeValue::Float(_) => "a float",
        DeValue::Boolean(_) => "a boolean",
        DeValue::Datetime(_) => "a date-time",
        DeValue::Array(_) => "an array",
        DeValue::Table(_) => "a table",
    }
}

/// Context for reading one table of one file.
struct TableCtx<'a> {
    file: usize,
    path: &'a Path,
    dir: &'a Path,
    lines: &'a LineIndex<'a>,
    /// Key prefix, dotted: `defaults` or `jobs.NAME`.
    prefix_key: String,
    job: Option<&'a str>,
    scope: ErrorScope,
    errors: Vec<ConfigError>,
}

impl TableCtx<'_> {
    fn origin(&self, key: &str, offset: usize) -> Origin {
        let (line, column) = self.lines.position(offset);
        Origin {
            file: self.file,
            line,
            column,
            key: self.key(key),
        }
    }

    /// The dotted path of `key` in this table.
    fn key(&self, key: &str) -> String {
        let mut s = String::with_capacity(self.prefix_key.len() + key.len() + 1);
        s.push_str(&self.prefix_key);
        if !s.is_empty() {
            s.push('.');
        }
        push_key_part(&mut s, key);
        s
    }

    fn error(&mut self, at: &Origin, message: String) {
        self.errors.push(ConfigError {
            file: self.path.to_path_buf(),
            line: Some(at.line),
            column: Some(at.column),
            job: self.job.map(str::to_string),
            key: Some(at.key.clone()),
            message,
            scope: self.scope,
        });
    }

    /// Reads a value with `f`, recording its error at the value's position.
    fn read<T>(
        &mut self,
        key: &str,
        v: &Spanned<DeValue<'_>>,
        f: impl FnOnce(&mut Self, &Spanned<DeValue<'_>>) -> Result<T, String>,
    ) -> Option<Val<T>> {
        let at = self.origin(key, v.span().start);
        match f(self, v) {
            Ok(value) => Some(Val {
                value: Some(value),
                at,
            }),
            Err(message) => {
                // An empty message: the reader recorded its own, more precise errors.
                if !message.is_empty() {
                    self.error(&at, message);
                }
                Some(Val { value: None, at })
            }
        }
    }

    fn read_table(&mut self, table: &DeTable<'_>) -> Partial {
        let mut p = Partial::default();
        for (k, v) in table.iter() {
            let key: &str = k.get_ref();
            // Only the keys of the one table (crate::joblist::keys) are read.
            if keys::find(keys::Scope::Job, key).is_none() {
                let at = self.origin(key, k.span().start);
                self.error(&at, unknown_key(&key_path(&[key]), key, keys::Scope::Job));
                continue;
            }
            match key {
                "description" => {
                    p.description = self.read(key, v, |_, v| string(v).map(str::to_string))
                }
                "schedule" => p.schedule = self.read(key, v, |_, v| schedule(v)),
                "command" => p.command = self.read(key, v, |_, v| command(v)),
                "user" => p.user = self.read(key, v, |_, v| user(v)),
                "working_directory" => {
                    p.working_directory = self.read(key, v, |c, v| path_value(v, c.dir));
                }
                "environment" => p.environment = self.read(key, v, |c, v| c.environment(v)),
                "timeout" => {
                    p.timeout = self.read(key, v, |_, v| span(v, SpanRule::ZeroOrInfinityIsNone))
                }
                "retention" => {
                    p.retention = self.read(key, v, |_, v| span(v, SpanRule::ZeroOrInfinityIsNone));
                }
                "randomized_delay" => {
                    p.randomized_delay =
                        self.read(key, v, |_, v| span(v, SpanRule::FiniteZeroIsNone));
                }
                "store" | "store_file" | "store_credential" => {
                    let val = match key {
                        "store" => self.read(key, v, |c, v| {
                            store_address(v, c.dir).map(StoreRef::Address)
                        }),
                        "store_file" => {
                            self.read(key, v, |c, v| path_value(v, c.dir).map(StoreRef::File))
                        }
                        _ => self.read(key, v, |_, v| credential_id(v).map(StoreRef::Credential)),
                    };
                    if let (Some(old), Some(new)) = (&p.store, &val) {
                        let (first, second) =
                            if (old.at.line, old.at.column) < (new.at.line, new.at.column) {
                                (old, new)
                            } else {
                                (new, old)
                            };
                        let at = second.at.clone();
                        let msg = format!(
                            "store, store_file and store_credential exclude each other \
                             ({} is set at line {})",
                            first.at.key, first.at.line
                        );
                        self.error(&at, msg);
                        p.store = Some(Val { value: None, at });
                    } else {
                        p.store = val;
                    }
                }
                "store_wait" => {
                    p.store_wait = self.read(key, v, |_, v| finite_span(v, Duration::ZERO))
                }
                "on_store_unavailable" => {
                    p.on_store_unavailable = self.read(key, v, |_, v| {
                        choice(
                            v,
                            &[
                                ("fail", OnStoreUnavailable::Fail),
                                ("skip", OnStoreUnavailable::Skip),
                            ],
                        )
                    });
                }
                "clock_tolerance" => {
                    p.clock_tolerance =
                        self.read(key, v, |_, v| finite_span(v, Duration::from_micros(1)));
                }
                "lease_ttl" => {
                    p.lease_ttl = self.read(key, v, |_, v| finite_span(v, MIN_LEASE_TTL))
                }
                "on_interrupted" => {
                    p.on_interrupted = self.read(key, v, |_, v| {
                        choice(
                            v,
                            &[
                                ("rerun", OnInterrupted::Rerun),
                                ("hold", OnInterrupted::Hold),
                            ],
                        )
                    });
                }
                "settle_failures" => {
                    p.settle_failures = self.read(key, v, |_, v| {
                        choice(
                            v,
                            &[
                                ("never", SettleFailures::Never),
                                ("next-success", SettleFailures::NextSuccess),
                            ],
                        )
                    });
                }
                "inhibit" => {
                    p.inhibit = self.read(key, v, |_, v| {
                        choice(
                            v,
                            &[
                                ("delay", Inhibit::Delay),
                                ("block", Inhibit::Block),
                                ("none", Inhibit::None),
                            ],
                        )
                    });
                }
                "on_failure" => p.on_failure = self.read(key, v, |_, v| unit_name_value(v)),
                "on_success" => p.on_success = self.read(key, v, |_, v| unit_name_value(v)),
                "enabled" => {
                    p.enabled = self.read(key, v, |_, v| match v.get_ref() {
                        DeValue::Boolean(b) => Ok(*b),
                        other => Err(format!("expected a boolean, found {}", type_name(other))),
                    });
                }
                "kill_grace" => {
                    p.kill_grace = self.read(key, v, |_, v| finite_span(v, Duration::ZERO))
                }
                "persistent" => {
                    p.persistent = self.read(key, v, |_, v| match v.get_ref() {
                        DeValue::Boolean(b) => Ok(*b),
                        other => Err(format!("expected a boolean, found {}", type_name(other))),
                    });
                }
                "catch_up" => {
                    p.catch_up = self.read(key, v, |_, v| {
                        choice(
                            v,
                            &[
                                ("latest", CatchUp::Latest),
                                ("all", CatchUp::All),
                                ("none", CatchUp::None),
                            ],
                        )
                    });
                }
                "catch_up_limit" => {
                    p.catch_up_limit = self.read(key, v, |_, v| match v.get_ref() {
                        DeValue::Integer(i) => match i.as_str().parse::<u32>() {
                            Ok(n) if i.radix() == 10 && (1..=MAX_CATCH_UP_LIMIT).contains(&n) => {
                                Ok(n)
                            }
                            _ => Err(format!(
                                "expected a whole number from 1 to {MAX_CATCH_UP_LIMIT}, found {}",
                                i.as_str()
                            )),
                        },
                        other => Err(format!(
                            "expected a whole number from 1 to {MAX_CATCH_UP_LIMIT}, found {}",
                            type_name(other)
                        )),
                    });
                }
                // A key of the table that this match does not read: refused as unknown,
                // which the test of every key's example catches.
                _ => {
                    let at = self.origin(key, k.span().start);
                    self.error(&at, unknown_key(&key_path(&[key]), key, keys::Scope::Job));
                }
            }
        }
        p
    }

    fn environment(
        &mut self,
        v: &Spanned<DeValue<'_>>,
    ) -> Result<BTreeMap<String, String>, String> {
        let DeValue::Table(t) = v.get_ref() else {
            return Err(format!(
                "expected a table of strings, found {}",
                type_name(v.get_ref())
            ));
        };
        let mut out = BTreeMap::new();
        let mut ok = true;
        for (k, val) in t.iter() {
            let name: &str = k.get_ref();
            let at = {
                let (line, column) = self.lines.position(k.span().start);
                let mut key = self.key("environment");
                key.push('.');
                push_key_part(&mut key, name);
                Origin {
                    file: self.file,
                    line,
                    column,
                    key,
                }
            };
            let check = if !is_env_name(name) {
                Err(format!("invalid environment variable name {name:?}"))
            } else if name.starts_with("JOBGUARD_") {
                Err(format!(
                    "{name} is reserved: the shim sets the JOBGUARD_* variables"
                ))
            } else {
                string(val).and_then(no_nul).map(str::to_string)
            };
            match check {
                Ok(s) => {
                    out.insert(name.to_string(), s);
                }
                Err(m) => {
                    ok = false;
                    self.error(&at, m);
                }
            }
        }
        // Entry errors are recorded one by one; the caller records nothing more.
        if ok { Ok(out) } else { Err(String::new()) }
    }
}

fn string<'v>(v: &'v Spanned<DeValue<'_>>) -> Result<&'v str, String> {
    match v.get_ref() {
        DeValue::String(s) => Ok(s),
        other => Err(format!("expected a string, found {}", type_name(other))),
    }
}

fn no_nul(s: &str) -> Result<&str, String> {
    if s.contains('\0') {
        Err(String::from("contains a NUL character"))
    } else {
        Ok(s)
    }
}

/// `[A-Za-z_][A-Za-z0-9_]*`, the names a shell and systemd's `Environment=` accept.
fn is_env_name(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && (b[0].is_ascii_alphabetic() || b[0] == b'_')
        && b.iter().all(|&c| c.is_ascii_alphanumeric() || c == b'_')
}

/// A schedule: one calendar expression, or an array of them (systemd.timer(5):
/// `OnCalendar=` may be given more than once; the timer elapses whenever any of them
/// does). Each must parse and elapse at least once from now on: a timer whose expression
/// never elapses (`*-02-30`, a year in the past) would never fire, so the job is refused
/// rather than given a timer (`systemd-analyze calendar` says "Next elapse: never" for
/// it). A zone that counts leap seconds (`right/…`, [`CalendarSpec::leap_second_zone`]) is
/// refused. All expressions of a list must be in one time zone. Returns the text shown for the
/// schedule (the expressions joined by `; `) and the schedule.
fn schedule(v: &Spanned<DeValue<'_>>) -> Result<(String, Schedule), String> {
    let one = |s: &str| -> Result<(String, CalendarSpec), String> {
        let c = CalendarSpec::parse(s).map_err(|e| e.to_string())?;
        if let Some((zone, plain)) = c.leap_second_zone() {
            return Err(format!(
                "schedule {s:?} is evaluated in {zone}, a zone that counts leap seconds: \
                 systemd's timer would elapse 27 s after the slot jobguard computes, so a run \
                 could take another slot; use {plain}"
            ));
        }
        let now = jiff::Timestamp::now();
        if c.next_elapse(now).is_none() {
            return Err(format!(
                "schedule {s:?} never elapses (none after {}): its timer would never fire",
                crate::guard::ledger::format_usec(now.as_second() * 1_000_000)
            ));
        }
        Ok((s.to_string(), c))
    };
    let parts = match v.get_ref() {
        DeValue::Array(a) => {
            if a.is_empty() {
                return Err("must not be empty: give one calendar expression or more".into());
            }
            let mut parts = Vec::with_capacity(a.len());
            for (i, item) in a.iter().enumerate() {
                let part = string(item)
                    .and_then(one)
                    .map_err(|m| format!("element {}: {m}", i + 1))?;
                parts.push(part);
            }
            parts
        }
        _ => vec![one(string(v)?)?],
    };
    let text = parts
        .iter()
        .map(|(t, _)| t.as_str())
        .collect::<Vec<_>>()
        .join("; ");
    Ok((text, Schedule::written(parts)?))
}

fn command(v: &Spanned<DeValue<'_>>) -> Result<Vec<String>, String> {
    let DeValue::Array(a) = v.get_ref() else {
        return Err(format!(
            "expected an array of strings, found {}",
            type_name(v.get_ref())
        ));
    };
    if a.is_empty() {
        return Err(String::from("must not be empty"));
    }
    let mut out = Vec::with_capacity(a.len());
    for (i, item) in a.iter().enumerate() {
        let s = string(item)
            .and_then(no_nul)
            .map_err(|m| format!("element {}: {m}", i + 1))?;
        out.push(s.to_string());
    }
    if out[0].is_empty() {
        return Err(String::from("the program (element 1) must not be empty"));
    }
    Ok(out)
}

/// systemd's relaxed user-name rule (a name it would accept in `User=`), or a numeric UID.
fn user(v: &Spanned<DeValue<'_>>) -> Result<String, String> {
    let s = string(v)?;
    let b = s.as_bytes();
    let numeric = !b.is_empty() && b.iter().all(u8::is_ascii_digit);
    let name_ok = !b.is_empty()
        && b.len() <= 256
        && !b[0].is_ascii_digit()
        && b[0] != b'-'
        && b.iter().enumerate().all(|(i, &c)| {
            c.is_ascii_alphanumeric()
                || matches!(c, b'_' | b'-' | b'.')
                || (c == b'$' && i == b.len() - 1)
        });
    if numeric {
        return match s.parse::<u32>() {
            Ok(uid) if uid != u32::MAX => Ok(s.to_string()),
            _ => Err(format!("invalid user {s:?}: UID out of range")),
        };
    }
    if name_ok {
        Ok(s.to_string())
    } else {
        Err(format!("invalid user name {s:?}"))
    }
}

fn path_value(v: &Spanned<DeValue<'_>>, dir: &Path) -> Result<PathBuf, String> {
    let s = no_nul(string(v)?)?;
    if s.is_empty() {
        return Err(String::from("must not be empty"));
    }
    Ok(dir.join(s))
}

/// A systemd credential ID ([`crate::systemd::credential::invalid_id`]).
fn credential_id(v: &Spanned<DeValue<'_>>) -> Result<String, String> {
    let s = string(v)?;
    match crate::systemd::credential::invalid_id(s) {
        None => Ok(s.to_string()),
        Some(why) => Err(why),
    }
}

fn store_address(v: &Spanned<DeValue<'_>>, dir: &Path) -> Result<String, String> {
    let s = no_nul(string(v)?)?;
    let Some((scheme, rest)) = s.split_once("://") else {
        // Whatever precedes an '@', or a keyword form's password, is not shown.
        let shown = crate::store::address::mask(s);
        return Err(format!(
            "invalid store address {shown:?}: expected SCHEME://…"
        ));
    };
    // Only kinds this build can open (crate::store::registry): a job whose store cannot
    // be opened would fail every run, so it gets no unit.
    if let Some(why) = crate::store::registry::unavailable(scheme) {
        return Err(why);
    }
    if crate::store::registry::by_scheme(scheme).is_some_and(|k| k.shared) {
        return Ok(s.to_string());
    }
    if rest.is_empty() {
        return Err(String::from("sqlite store without a path"));
    }
    Ok(format!("sqlite://{}", dir.join(rest).display()))
}

/// `on_failure` and `on_success`: a unit name, specifiers allowed (systemd.unit(5)).
fn unit_name_value(v: &Spanned<DeValue<'_>>) -> Result<String, String> {
    let s = string(v)?;
    if crate::systemd::unit_name::is_valid_unit_name_with_specifiers(s) {
        Ok(s.to_string())
    } else {
        Err(format!("invalid unit name {s:?}"))
    }
}

fn choice<T: Copy>(v: &Spanned<DeValue<'_>>, options: &[(&str, T)]) -> Result<T, String> {
    let s = string(v)?;
    options
        .iter()
        .find(|(name, _)| *name == s)
        .map(|(_, t)| *t)
        .ok_or_else(|| {
            let names: Vec<String> = options.iter().map(|(n, _)| format!("{n:?}")).collect();
            format!("expected one of {}, found {s:?}", names.join(", "))
        })
}

enum SpanRule {
    /// `0` and `infinity` mean "no limit" (`None`).
    ZeroOrInfinityIsNone,
    /// Finite; `0` means "not set" (`None`).
    FiniteZeroIsNone,
}

/// A time span from a string (`"2min"`) or a non-negative integer of seconds (`120`).
fn timespan(v: &Spanned<DeValue<'_>>) -> Result<TimeSpan, String> {
    match v.get_ref() {
        DeValue::String(s) => TimeSpan::parse(s).map_err(|e| e.to_string()),
        DeValue::Integer(i) => i
            .as_str()
            .parse::<u64>()
            .ok()
            .filter(|_| i.radix() == 10)
            .and_then(|secs| secs.checked_mul(1_000_000))
            .map(TimeSpan::from_usec)
            .ok_or_else(|| format!("invalid time span {}", i.as_str())),
        other => Err(format!(
            "expected a time span such as \"2min\", found {}",
            type_name(other)
        )),
    }
}

fn span(v: &Spanned<DeValue<'_>>, rule: SpanRule) -> Result<Option<Duration>, String> {
    let t = timespan(v)?;
    match rule {
        SpanRule::ZeroOrInfinityIsNone => Ok(t.as_duration().filter(|d| !d.is_zero())),
        SpanRule::FiniteZeroIsNone => match t.as_duration() {
            Some(d) => Ok(Some(d).filter(|d| !d.is_zero())),
            None => Err(String::from("must be finite")),
        },
    }
}

fn finite_span(v: &Spanned<DeValue<'_>>, min: Duration) -> Result<Duration, String> {
    let d = timespan(v)?
        .as_duration()
        .ok_or_else(|| String::from("must be finite"))?;
    if d < min {
        return Err(format!("must be at least {}", TimeSpan::from_duration(min)));
    }
    Ok(d)
}

impl Loader {
    fn load_file(&mut self, path: &Path, text: &str, main: bool) {
        let file = self.files.len();
        self.files.push(path.to_path_buf());
        let lines = LineIndex::new(text);
        let doc = match DeTable::parse(text) {
            Ok(d) => d,
            Err(e) => {
                let pos = e.span().map(|s| lines.position(s.start));
                let message = e.message().trim().to_string();
                let mut err = file_error(path, pos, format!("TOML syntax error: {message}"));
                err.message = err.message.replace('\n', " ");
                self.errors.push(err);
                return;
            }
        };
        let dir = path
            .parent()
            .map_or_else(|| PathBuf::from("/"), Path::to_path_buf);
        let mut file_defaults = None;
        let mut jobs_table = None;
        let mut top = TableCtx {
            file,
            path,
            dir: &dir,
            lines: &lines,
            prefix_key: String::new(),
            job: None,
            scope: ErrorScope::Key,
            errors: Vec::new(),
        };
        for (k, v) in doc.get_ref().iter() {
            let key: &str = k.get_ref();
            match (key, v.get_ref()) {
                ("defaults", DeValue::Table(t)) => {
                    let mut ctx = TableCtx {
                        prefix_key: String::from("defaults"),
                        ..top.sub()
                    };
                    let partial = ctx.read_table(t);
                    top.errors.append(&mut ctx.errors);
                    self.defaults.push(partial);
                    file_defaults = Some(self.defaults.len() - 1);
                }
                ("jobs", DeValue::Table(t)) => jobs_table = Some(t),
                ("metrics", DeValue::Table(t)) => {
                    let mut ctx = TableCtx {
                        prefix_key: String::from("metrics"),
                        ..top.sub()
                    };
                    self.read_metrics(&mut ctx, t);
                    top.errors.append(&mut ctx.errors);
                }
                ("defaults" | "jobs" | "metrics", other) => {
                    let at = top.origin(key, v.span().start);
                    top.error(&at, format!("expected a table, found {}", type_name(other)));
                }
                _ => {
                    let at = top.origin(key, k.span().start);
                    top.error(
                        &at,
                        format!(
                            "unknown key {} (expected defaults, jobs or metrics)",
                            key_path(&[key])
                        ),
                    );
                }
            }
        }
        if main {
            self.global_defaults = file_defaults;
        }
        self.errors.append(&mut top.errors);
        let Some(jobs) = jobs_table else {
            return;
        };
        for (k, v) in jobs.iter() {
            if self
                .only
                .as_deref()
                .is_none_or(|only| only == k.get_ref().as_ref())
            {
                self.jobs.push(read_job(&top, k, v, file_defaults));
            }
        }
    }

    /// Reads the `[metrics]` table: `textfile`, a path ending in `.prom` (node_exporter's
    /// textfile collector reads only those), relative to the file's directory. Set in two
    /// files, the first is used and the second is an error naming it.
    fn read_metrics(&mut self, ctx: &mut TableCtx<'_>, table: &DeTable<'_>) {
        for (k, v) in table.iter() {
            let key: &str = k.get_ref();
            if key != "textfile" {
                let at = ctx.origin(key, k.span().start);
                ctx.error(&at, unknown_key(&ctx.key(key), key, keys::Scope::Metrics));
                continue;
            }
            let Some(Val {
                value: Some(path),
                at,
            }) = ctx.read(key, v, |c, v| {
                let p = path_value(v, c.dir)?;
                if p.extension().is_none_or(|e| e != "prom") {
                    return Err(String::from(
                        "must end in .prom (node_exporter's textfile collector reads only *.prom)",
                    ));
                }
                Ok(p)
            })
            else {
                continue;
            };
            match &self.metrics_textfile {
                Some((_, first)) => {
                    let message = format!(
                        "metrics.textfile is also set in {}:{}:{}; the first is used",
                        self.files[first.file].display(),
                        first.line,
                        first.column
                    );
                    ctx.error(&at, message);
                }
                None => self.metrics_textfile = Some((path, at)),
            }
        }
    }

    fn finish(self, set: &mut JobSet) {
        set.metrics_textfile = self.metrics_textfile.as_ref().map(|(p, _)| p.clone());
        for d in &self.defaults {
            if let Some(Val {
                value: Some(sref),
                at,
            }) = &d.store
            {
                let (store, store_file, store_credential) = match sref {
                    StoreRef::Address(a) => (a.clone(), None, None),
                    StoreRef::File(f) => (String::new(), Some(f.clone()), None),
                    StoreRef::Credential(id) => (String::new(), None, Some(id.clone())),
                };
                set.default_stores.push(job::DefaultStore {
                    file: self.files[at.file].clone(),
                    store,
                    store_file,
                    store_credential,
                });
            }
        }
        let mut errors = self.errors;
        // Duplicates: every definition after the first is an error naming the first, and
        // the name is left out entirely.
        let mut first: HashMap<&str, &RawJob> = HashMap::new();
        let mut duplicated: HashSet<&str> = HashSet::new();
        for raw in &self.jobs {
            match first.get(raw.name.as_str()) {
                Some(prev) => {
                    duplicated.insert(raw.name.as_str());
                    errors.push(ConfigError {
                        file: self.files[raw.at.file].clone(),
                        line: Some(raw.at.line),
                        column: Some(raw.at.column),
                        job: Some(raw.name.clone()),
                        key: Some(raw.at.key.clone()),
                        message: format!(
                            "job {} is also defined in {}:{}:{}; neither definition is used",
                            raw.name,
                            self.files[prev.at.file].display(),
                            prev.at.line,
                            prev.at.column
                        ),
                        scope: ErrorScope::Job,
                    });
                }
                None => {
                    first.insert(raw.name.as_str(), raw);
                }
            }
        }
        for raw in &self.jobs {
            errors.extend(raw.errors.iter().cloned());
            if !raw.errors.is_empty() || duplicated.contains(raw.name.as_str()) {
                continue;
            }
            let layers: Vec<&Partial> = std::iter::once(&raw.own)
                .chain(raw.file_defaults.map(|i| &self.defaults[i]))
                .chain(
                    self.global_defaults
                        .filter(|g| Some(*g) != raw.file_defaults)
                        .map(|i| &self.defaults[i]),
                )
                .collect();
            match build_job(raw, &layers, &self.files) {
                Ok(job) => {
                    set.jobs.insert(job.name.clone(), job);
                }
                Err(mut errs) => errors.append(&mut errs),
            }
        }
        // File order first, then position; the sort is stable, so equal positions keep
        // the order they were found in.
        let order: HashMap<&Path, usize> = self
            .files
            .iter()
            .enumerate()
            .map(|(i, f)| (f.as_path(), i))
            .collect();
        errors.sort_by_key(|e| {
            (
                order.get(e.file.as_path()).copied().unwrap_or(0),
                e.line,
                e.column,
            )
        });
        set.errors.append(&mut errors);
    }
}

/// The message for `key`, which is not a key of `scope` ([`keys::KEYS`]), shown as
/// `shown` (its dotted path): the nearest key (at most two edits away) and what it does,
/// or the keys of `[metrics]`.
fn unknown_key(shown: &str, key: &str, scope: keys::Scope) -> String {
    let table = match scope {
        keys::Scope::Job => "",
        keys::Scope::Metrics => "metrics.",
    };
    match keys::nearest(scope, key) {
        Some(k) => format!(
            "unknown key {shown} (did you mean {table}{}: {}?)",
            k.name, k.meaning
        ),
        None if scope == keys::Scope::Metrics => {
            format!("unknown key {shown} (expected textfile)")
        }
        None => format!("unknown key {shown}"),
    }
}

/// Reads one `[jobs.NAME]` table: its name, its own keys, their errors.
fn read_job(
    top: &TableCtx<'_>,
    k: &Spanned<toml::de::DeString<'_>>,
    v: &Spanned<DeValue<'_>>,
    file_defaults: Option<usize>,
) -> RawJob {
    let name: &str = k.get_ref();
    let (line, column) = top.lines.position(k.span().start);
    let at = Origin {
        file: top.file,
        line,
        column,
        key: key_path(&["jobs", name]),
    };
    let mut ctx = TableCtx {
        prefix_key: at.key.clone(),
        job: Some(name),
        scope: ErrorScope::Job,
        ..top.sub()
    };
    if !job::is_valid_job_name(name) {
        ctx.error(
            &at,
            format!(
                "invalid job name {name:?}: use 1 to {} lower-case letters, digits, '-', '_', '.', \
                 starting with a letter or digit",
                job::MAX_JOB_NAME_LEN
            ),
        );
    }
    let own = match v.get_ref() {
        DeValue::Table(t) => ctx.read_table(t),
        other => {
            ctx.error(&at, format!("expected a table, found {}", type_name(other)));
            Partial::default()
        }
    };
    RawJob {
        name: name.to_string(),
        at,
        own,
        errors: ctx.errors,
        file_defaults,
    }
}

impl<'a> TableCtx<'a> {
    /// A context for a sub-table of the same file.
    fn sub(&self) -> TableCtx<'a> {
        TableCtx {
            file: self.file,
            path: self.path,
            dir: self.dir,
            lines: self.lines,
            prefix_key: String::new(),
            job: None,
            scope: ErrorScope::Key,
            errors: Vec::new(),
        }
    }
}

/// `AccuracySec=` of the shipped `jobguard@.timer`: a firing lands up to this long after
/// its elapse, plus `RandomizedDelaySec=`.
pub const TIMER_ACCURACY: Duration = Duration::from_secs(1);

/// The error for a job whose timer may fire after the next elapse: `randomized_delay` +
/// [`TIMER_ACCURACY`] not shorter than an interval between two consecutive elapses of its
/// schedule (looked for from now, see [`Schedule::interval_at_most`]). The shim takes
/// the slot from the clock ([`crate::shim::slot`]), so such a firing would run the next
/// slot instead of its own. Points at `randomized_delay` where it is set, else at
/// `schedule`.
fn firing_window_error(
    raw: &RawJob,
    layers: &[&Partial],
    files: &[PathBuf],
    calendar: &Schedule,
    randomized_delay: Option<Duration>,
) -> Option<ConfigError> {
    let late = randomized_delay.unwrap_or_default() + TIMER_ACCURACY;
    let limit = i64::try_from(late.as_micros()).unwrap_or(i64::MAX);
    let found = calendar.interval_at_most(limit, jiff::Timestamp::now())?;
    let (at, key) = match layers.iter().find_map(|l| l.randomized_delay.as_ref()) {
        Some(v) => (v.at.clone(), "randomized_delay"),
        None => (
            layers.iter().find_map(|l| l.schedule.as_ref())?.at.clone(),
            "schedule",
        ),
    };
    let span = |d: Duration| TimeSpan::from_duration(d).to_string();
    let interval = Duration::from_micros(u64::try_from(found.usec).unwrap_or(0));
    Some(ConfigError {
        file: files[at.file].clone(),
        line: Some(at.line),
        column: Some(at.column),
        job: Some(raw.name.clone()),
        key: Some(key_path(&["jobs", &raw.name, key])),
        message: format!(
            "randomized_delay {} plus the timer's AccuracySec={} ({}) is not shorter than \
             the shortest interval of the schedule, {} (daylight-saving changes included): \
             a firing could land after the next elapse and run that slot instead of its own",
            span(randomized_delay.unwrap_or_default()),
            span(TIMER_ACCURACY),
            span(late),
            span(interval),
        ),
        scope: ErrorScope::Job,
    })
}

/// Applies the layers (job first) and checks that the required keys are there.
fn build_job(
    raw: &RawJob,
    layers: &[&Partial],
    files: &[PathBuf],
) -> Result<Job, Vec<ConfigError>> {
    let mut errors = Vec::new();
    let job_error = |at: &Origin, key: String, message: String| ConfigError {
        file: files[raw.at.file].clone(),
        line: Some(at.line),
        column: Some(at.column),
        job: Some(raw.name.clone()),
        key: Some(key),
        message,
        scope: ErrorScope::Job,
    };
    let mut positions = BTreeMap::new();
    positions.insert(
        "",
        job::SourcePos {
            file: files[raw.at.file].clone(),
            line: raw.at.line,
            column: raw.at.column,
        },
    );
    macro_rules! pick {
        ($field:ident) => {{
            let found = layers.iter().find_map(|l| l.$field.as_ref());
            match found {
                Some(Val { value: Some(v), at }) => {
                    positions.insert(
                        stringify!($field),
                        job::SourcePos {
                            file: files[at.file].clone(),
                            line: at.line,
                            column: at.column,
                        },
                    );
                    Some(v.clone())
                }
                Some(Val { value: None, at }) => {
                    // Jobs with errors in their own table never get here, so this is a
                    // bad default: recorded once at the default, and here for this job.
                    let key = key_path(&["jobs", &raw.name, stringify!($field)]);
                    let message = format!(
                        "inherits the invalid {} at {}:{}:{}",
                        at.key,
                        files[at.file].display(),
                        at.line,
                        at.column
                    );
                    errors.push(job_error(&raw.at, key, message));
                    None
                }
                None => None,
            }
        }};
    }
    let description = pick!(description);
    let schedule = pick!(schedule);
    let command = pick!(command);
    let user = pick!(user);
    let working_directory = pick!(working_directory);
    let environment = pick!(environment);
    let timeout = pick!(timeout);
    let randomized_delay = pick!(randomized_delay);
    let store = pick!(store);
    let store_wait = pick!(store_wait);
    let on_store_unavailable = pick!(on_store_unavailable);
    let clock_tolerance = pick!(clock_tolerance);
    let lease_ttl = pick!(lease_ttl);
    let on_interrupted = pick!(on_interrupted);
    let settle_failures = pick!(settle_failures);
    let inhibit = pick!(inhibit);
    let on_failure = pick!(on_failure);
    let on_success = pick!(on_success);
    let enabled = pick!(enabled);
    let kill_grace = pick!(kill_grace);
    let persistent = pick!(persistent);
    let catch_up = pick!(catch_up).unwrap_or_default();
    let catch_up_limit = pick!(catch_up_limit);
    let retention = pick!(retention);
    for (present, key) in [
        (layers.iter().any(|l| l.schedule.is_some()), "schedule"),
        (layers.iter().any(|l| l.command.is_some()), "command"),
    ] {
        if !present {
            errors.push(job_error(
                &raw.at,
                key_path(&["jobs", &raw.name, key]),
                format!("missing key {key}"),
            ));
        }
    }
    let (Some((schedule, calendar)), Some(command), true) = (schedule, command, errors.is_empty())
    else {
        return Err(errors);
    };
    let lease_ttl = lease_ttl.unwrap_or(job::DEFAULT_LEASE_TTL);
    let kill_grace = kill_grace.unwrap_or(job::DEFAULT_KILL_GRACE);
    if let Err(message) = crate::guard::lease::check_fence(lease_ttl, kill_grace) {
        // At the kill_grace that was set (in the job or a default), else at lease_ttl.
        let set = |f: fn(&Partial) -> Option<&Origin>| layers.iter().find_map(|l| f(l));
        let at = set(|l| l.kill_grace.as_ref().map(|v| &v.at))
            .or_else(|| set(|l| l.lease_ttl.as_ref().map(|v| &v.at)))
            .unwrap_or(&raw.at);
        return Err(vec![ConfigError {
            file: files[at.file].clone(),
            line: Some(at.line),
            column: Some(at.column),
            job: Some(raw.name.clone()),
            key: Some(at.key.clone()),
            message,
            scope: ErrorScope::Job,
        }]);
    }
    if catch_up == CatchUp::None && persistent == Some(true) {
        let at = layers
            .iter()
            .find_map(|l| l.persistent.as_ref().map(|v| &v.at))
            .unwrap_or(&raw.at);
        return Err(vec![ConfigError {
            file: files[at.file].clone(),
            line: Some(at.line),
            column: Some(at.column),
            job: Some(raw.name.clone()),
            key: Some(at.key.clone()),
            message: "persistent = true contradicts catch_up = \"none\": a firing at boot for a slot missed while the machine was off is a catch-up; drop persistent or choose catch_up = \"latest\" or \"all\"".into(),
            scope: ErrorScope::Job,
        }]);
    }
    let randomized_delay = randomized_delay.flatten();
    if let Some(e) = firing_window_error(raw, layers, files, &calendar, randomized_delay) {
        return Err(vec![e]);
    }
    let (store, store_file, store_credential) = match store {
        Some(StoreRef::Address(a)) => (a, None, None),
        Some(StoreRef::File(f)) => (String::new(), Some(f), None),
        Some(StoreRef::Credential(id)) => (String::new(), None, Some(id)),
        None => (crate::paths::default_store_url(), None, None),
    };
    Ok(Job {
        name: raw.name.clone(),
        description,
        schedule,
        calendar,
        command,
        user,
        working_directory,
        environment: environment.unwrap_or_default(),
        timeout: timeout.flatten(),
        randomized_delay,
        store,
        store_file,
        store_credential,
        store_wait: store_wait.unwrap_or(job::DEFAULT_STORE_WAIT),
        on_store_unavailable: on_store_unavailable.unwrap_or_default(),
        clock_tolerance: clock_tolerance.unwrap_or(job::DEFAULT_CLOCK_TOLERANCE),
        lease_ttl,
        on_interrupted: on_interrupted.unwrap_or_default(),
        settle_failures: settle_failures.unwrap_or_default(),
        inhibit: inhibit.unwrap_or_default(),
        on_failure,
        on_success,
        enabled: enabled.unwrap_or(true),
        kill_grace,
        persistent: persistent.unwrap_or(catch_up != CatchUp::None),
        catch_up,
        catch_up_limit: catch_up_limit.unwrap_or(job::DEFAULT_CATCH_UP_LIMIT),
        retention: retention.unwrap_or(Some(job::DEFAULT_RETENTION)),
        source: files[raw.at.file].clone(),
        positions,
    })
}

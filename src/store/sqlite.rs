//! The embedded store: leases and the run ledger in one SQLite file on this host.
//!
//! Two tables, named so that an operator with `sqlite3` recognises them:
//! - `jobguard_lease`: one row per job (holder, host, fencing token, acquired_at,
//!   expire_at). A released lease keeps its row with an empty holder and `expire_at = 0`,
//!   so the fencing token keeps growing across releases.
//! - `jobguard_run`: one row per attempt at a (job, slot), with every field of
//!   [`crate::guard::ledger::Run`]; the job's counters are a JSON object in `report`. A partial
//!   unique index allows at most one non-forced `succeeded` row per (job, slot).
//!
//! All times are INTEGER µs since the Unix epoch, read from the store's [`Clock`] (the
//! host's clock: the file is only ever used from this host). The schema version is
//! `PRAGMA user_version`; the store creates and migrates the schema itself and refuses a
//! file whose version is newer than it knows.
//!
//! Durability: the file is in WAL mode with `synchronous=FULL`, so every committed ledger
//! write is on disk before the call returns and survives a power cut (with
//! `synchronous=NORMAL` a WAL commit can be lost; see <https://sqlite.org/pragma.html#pragma_synchronous>).
//! Every write is one `BEGIN IMMEDIATE` transaction, which takes the write lock at once so
//! that concurrent processes wait in the busy handler instead of failing
//! (<https://sqlite.org/lang_transaction.html>). Inside it, a claim, renewal, finish,
//! interrupt, resolve or unlock reads the job's state and applies what
//! [`crate::store::rules`] decides: the rules are not written again here. WAL needs every user of the file on the
//! same host (<https://sqlite.org/wal.html>): not on a network file system.
//!
//! This module does not decide paths (see [`crate::paths`]) or parse addresses (see
//! [`crate::store::address`]).

use std::fs::{DirBuilder, OpenOptions};
use std::io::ErrorKind;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rusqlite::types::Value;
use rusqlite::{
    Connection, ErrorCode, OpenFlags, OptionalExtension, Row, TransactionBehavior, params,
};

use crate::guard::clock::{Clock, SystemClock};
use crate::guard::lease::Lease;
use crate::guard::ledger::{Finish, Outcome, Resolution, Run, Slot};
use crate::store::engine::{self, Commit, LeaseRead, LeaseWrite, Need, Read, RunRead, Writes};
use crate::store::rules;
use crate::store::{
    Claim, ClaimRequest, Finished, Mark, Marking, RunQuery, ScheduleDecl, Store, StoreError,
};

/// The schema version this jobguard writes and understands (`PRAGMA user_version`).
pub const SCHEMA_VERSION: i64 = 3;

/// Default time a statement waits for another process's write lock, after which the
/// store answers [`StoreError::Unavailable`].
pub const DEFAULT_BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// `MIGRATIONS[n]` takes the schema from version `n` to `n + 1`.
const MIGRATIONS: [&str; SCHEMA_VERSION as usize] = [
    // 0 -> 1: leases and the run ledger.
    "
    CREATE TABLE jobguard_lease (
        job          TEXT    NOT NULL PRIMARY KEY,
        holder       TEXT    NOT NULL,  -- Holder::id(); '' once released
        host         TEXT    NOT NULL,
        token        INTEGER NOT NULL,  -- fencing token of the latest grant
        acquired_at  INTEGER NOT NULL,  -- µs since the epoch
        expire_at    INTEGER NOT NULL   -- µs since the epoch; 0 once released
    ) STRICT;

    CREATE TABLE jobguard_run (
        run_id         TEXT    NOT NULL PRIMARY KEY,
        job            TEXT    NOT NULL,
        slot_usec      INTEGER NOT NULL,
        slot_zone      TEXT    NOT NULL,
        attempt        INTEGER NOT NULL,
        outcome        TEXT    NOT NULL CHECK (outcome IN
                           ('running', 'succeeded', 'failed', 'interrupted', 'lease_lost')),
        reason         TEXT,
        exit_status    INTEGER,
        forced         INTEGER NOT NULL CHECK (forced IN (0, 1)),
        trigger_kind   TEXT    NOT NULL,
        host           TEXT    NOT NULL,
        machine_id     TEXT    NOT NULL,
        boot_id        TEXT    NOT NULL,
        pid            INTEGER NOT NULL,
        pid_start      INTEGER NOT NULL,
        invocation_id  TEXT,
        started_at     INTEGER NOT NULL,
        finished_at    INTEGER,
        fencing_token  INTEGER NOT NULL,
        report         TEXT    NOT NULL DEFAULT '{}',
        resolution     TEXT CHECK (resolution IS NULL OR resolution IN
                           ('queued', 'held', 'rerun', 'done'))
    ) STRICT;

    CREATE UNIQUE INDEX jobguard_run_one_success
        ON jobguard_run (job, slot_usec) WHERE outcome = 'succeeded' AND forced = 0;
    CREATE INDEX jobguard_run_slot ON jobguard_run (job, slot_usec);
    CREATE INDEX jobguard_run_history ON jobguard_run (job, started_at);
    CREATE INDEX jobguard_run_running ON jobguard_run (job) WHERE outcome = 'running';
    ",
    // 1 -> 2: queued re-runs are found by the claim.
    "
    CREATE INDEX jobguard_run_queued ON jobguard_run (job, slot_usec) WHERE resolution = 'queued';
    ",
    // 2 -> 3: the renewal generation (`Lease::renewal`): 0 at a grant.
    "
    ALTER TABLE jobguard_lease ADD COLUMN renewal INTEGER NOT NULL DEFAULT 0;
    ",
];

/// The columns of `jobguard_run`, in the order [`read_run`] reads them.
const RUN_COLUMNS: &str = "run_id, job, slot_usec, slot_zone, attempt, outcome, reason, \
     exit_status, forced, trigger_kind, host, machine_id, boot_id, pid, pid_start, \
     invocation_id, started_at, finished_at, fencing_token, report, resolution";

/// `PRAGMA wal_autocheckpoint` (pages): how long the WAL grows before a commit
/// checkpoints it (<https://sqlite.org/pragma.html#pragma_wal_autocheckpoint>); see
/// `SqliteStore::configure`. Measured with `benches/shim-and-generator.sh`.
const WAL_CHECKPOINT_PAGES: i64 = 100;

/// `PRAGMA synchronous` for the file (<https://sqlite.org/pragma.html#pragma_synchronous>).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Synchronous {
    /// fsync at every commit: a committed write survives a power cut. The default.
    #[default]
    Full,
    /// In WAL mode, fsync only at checkpoints: faster, but the last commits can be lost on
    /// a power cut. Only for measurements and throw-away stores.
    Normal,
}

/// How [`SqliteStore::open_with`] sets up the connection.
#[derive(Debug, Clone)]
pub struct SqliteOptions {
    /// Durability of commits; [`Synchronous::Full`] unless measuring.
    pub synchronous: Synchronous,
    /// How long a statement waits for another process's lock.
    pub busy_timeout: Duration,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        SqliteOptions {
            synchronous: Synchronous::Full,
            busy_timeout: DEFAULT_BUSY_TIMEOUT,
        }
    }
}

/// The embedded SQLite store: one connection to one file (or to a private in-memory
/// database).
pub struct SqliteStore {
    conn: Connection,
    describe: String,
    clock: Arc<dyn Clock>,
    schema_ready: bool,
    /// The configured wait for another process's write lock.
    busy_timeout: Duration,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore")
            .field("describe", &self.describe)
            .finish_non_exhaustive()
    }
}

/// This store's failures: SQLite's own errors, and those every store shares.
type Fail = engine::Fail<rusqlite::Error>;

impl From<rusqlite::Error> for Fail {
    fn from(e: rusqlite::Error) -> Self {
        Fail::Client(e)
    }
}

/// Sorts SQLite's errors: I/O, locks held past the busy timeout and files that cannot be
/// opened are [`StoreError::Unavailable`]; constraint violations, corruption and the rest
/// are [`StoreError::Invalid`].
impl engine::ClientError for rusqlite::Error {
    fn store_error(self, store: &str, op: &str) -> StoreError {
        let unavailable = matches!(
            self.sqlite_error_code(),
            Some(
                ErrorCode::DatabaseBusy
                    | ErrorCode::DatabaseLocked
                    | ErrorCode::CannotOpen
                    | ErrorCode::SystemIoFailure
                    | ErrorCode::DiskFull
                    | ErrorCode::ReadOnly
                    | ErrorCode::PermissionDenied
                    | ErrorCode::OutOfMemory
                    | ErrorCode::FileLockingProtocolFailed
                    | ErrorCode::NoLargeFileSupport
                    | ErrorCode::OperationInterrupted
            )
        );
        let store = store.to_string();
        let detail = format!("{op}: {self}");
        if unavailable {
            StoreError::Unavailable { store, detail }
        } else {
            StoreError::Invalid { store, detail }
        }
    }
}

/// The schema version of the file `conn` has open (`PRAGMA user_version`; 0 for a new
/// file), as of the connection's transaction, if one is open.
fn user_version(conn: &Connection) -> rusqlite::Result<i64> {
    conn.pragma_query_value(None, "user_version", |row| row.get(0))
}

/// Names a failure after the store and the operation ([`engine::Fail::store_error`]).
fn store_error(store: &str, op: &str, fail: Fail) -> StoreError {
    fail.store_error(store, op, SCHEMA_VERSION)
}

/// Checks the file held open since the path check (`held`) against what `path` names now,
/// and that it is a regular file only root can change.
fn same_file(held: &std::fs::File, path: &Path) -> Result<(), crate::safe_path::UnsafePath> {
    use std::os::unix::fs::MetadataExt;
    let fault = |why: String| crate::safe_path::UnsafePath {
        path: path.to_path_buf(),
        why,
    };
    let a = held
        .metadata()
        .map_err(|e| fault(format!("cannot be examined: {e}")))?;
    let b =
        std::fs::symlink_metadata(path).map_err(|e| fault(format!("cannot be examined: {e}")))?;
    if (a.dev(), a.ino()) != (b.dev(), b.ino()) {
        return Err(fault("was replaced while it was opened".to_string()));
    }
    if !a.is_file() {
        return Err(fault("is not a regular file".to_string()));
    }
    if a.uid() != 0 {
        return Err(fault(format!("is owned by uid {}, not root", a.uid())));
    }
    let mode = a.mode() & 0o7777;
    if mode & 0o022 != 0 {
        return Err(fault(format!(
            "is writable by group or others (mode {mode:04o})"
        )));
    }
    Ok(())
}

impl SqliteStore {
    /// Opens (creating if missing) the store file at `path` with the system clock and
    /// [`SqliteOptions::default`].
    ///
    /// # Errors
    /// As [`SqliteStore::open_with`].
    pub fn open(path: &Path) -> Result<SqliteStore, StoreError> {
        Self::open_with(path, Arc::new(SystemClock), &SqliteOptions::default())
    }

    /// Opens (creating if missing) the store file at `path`, reading time from `clock`.
    ///
    /// A missing parent directory is created with mode 0700 and a missing file with mode
    /// 0600 (both less the umask): jobs running as other users must not be able to write
    /// the ledger. Existing directories and files keep their modes. The connection is put
    /// in WAL mode with the requested `synchronous` level and busy timeout. The schema is
    /// created or migrated on first use (or by [`Store::init`]).
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when the directory or file cannot be created or opened,
    /// or the file cannot be switched to WAL; [`StoreError::Invalid`] when it is not an
    /// SQLite database. Messages name the path.
    pub fn open_with(
        path: &Path,
        clock: Arc<dyn Clock>,
        options: &SqliteOptions,
    ) -> Result<SqliteStore, StoreError> {
        let describe = format!("sqlite://{}", path.display());
        let unavailable = |detail: String| StoreError::Unavailable {
            store: describe.clone(),
            detail,
        };
        let unsafe_path = |e: crate::safe_path::UnsafePath| StoreError::Unsafe {
            store: describe.clone(),
            detail: e.to_string(),
        };
        // As root: every directory down to the file must be root's alone, before anything
        // is created (a directory someone else may write could hold their link), and again
        // after (they could have made a missing directory first).
        crate::safe_path::check_store(path).map_err(unsafe_path)?;
        let parent = path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        if !parent.is_dir() {
            DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(parent)
                .map_err(|e| {
                    unavailable(format!("cannot create directory {}: {e}", parent.display()))
                })?;
            if let Some(grandparent) = parent.parent().filter(|p| !p.as_os_str().is_empty()) {
                sync_dir(grandparent).map_err(|e| {
                    unavailable(format!("cannot sync {}: {e}", grandparent.display()))
                })?;
            }
        }
        crate::safe_path::check_store(path).map_err(unsafe_path)?;
        for suffix in ["-wal", "-shm", "-journal"] {
            let mut side = path.as_os_str().to_owned();
            side.push(suffix);
            crate::safe_path::check_store(Path::new(&side)).map_err(unsafe_path)?;
        }
        // O_NOFOLLOW: a link put in the file's place after the check is not followed.
        let held = match OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(path)
        {
            // SQLite syncs the directory when it creates the WAL, not for the main file;
            // make the new file's name durable before the first commit goes into the WAL.
            Ok(f) => {
                sync_dir(parent)
                    .map_err(|e| unavailable(format!("cannot sync {}: {e}", parent.display())))?;
                f
            }
            Err(e) if e.kind() == ErrorKind::AlreadyExists => OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
                .open(path)
                .map_err(|e| match e.raw_os_error() {
                    Some(libc::ELOOP) => unsafe_path(crate::safe_path::UnsafePath {
                        path: path.to_path_buf(),
                        why: "is a symbolic link".to_string(),
                    }),
                    _ => unavailable(format!("cannot open {}: {e}", path.display())),
                })?,
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
                return Err(unsafe_path(crate::safe_path::UnsafePath {
                    path: path.to_path_buf(),
                    why: "is a symbolic link".to_string(),
                }));
            }
            Err(e) => {
                return Err(unavailable(format!(
                    "cannot create {}: {e}",
                    path.display()
                )));
            }
        };
        // No SQLITE_OPEN_URI: the path is a path, even if it starts with "file:".
        // SQLITE_OPEN_NOFOLLOW: SQLite refuses a link in the file's place, too.
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX
            | OpenFlags::SQLITE_OPEN_NOFOLLOW;
        let conn = Connection::open_with_flags(path, flags)
            .map_err(|e| store_error(&describe, &format!("open {}", path.display()), e.into()))?;
        // The file SQLite opened is the one checked: same device and inode as the file
        // held open since the check (a directory only root can write cannot have changed,
        // so this only confirms it).
        if crate::safe_path::enforced() {
            same_file(&held, path).map_err(unsafe_path)?;
        }
        let mut store = SqliteStore {
            conn,
            describe,
            clock,
            schema_ready: false,
            busy_timeout: options.busy_timeout,
        };
        store.configure(options, true)?;
        Ok(store)
    }

    /// Opens a private in-memory store (`sqlite::memory:`), gone when dropped. For tests.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] if SQLite cannot allocate it.
    pub fn open_in_memory(clock: Arc<dyn Clock>) -> Result<SqliteStore, StoreError> {
        let describe = "sqlite::memory:".to_string();
        let conn =
            Connection::open_in_memory().map_err(|e| store_error(&describe, "open", e.into()))?;
        let mut store = SqliteStore {
            conn,
            describe,
            clock,
            schema_ready: false,
            busy_timeout: DEFAULT_BUSY_TIMEOUT,
        };
        store.configure(&SqliteOptions::default(), false)?;
        Ok(store)
    }

    fn configure(&mut self, options: &SqliteOptions, wal: bool) -> Result<(), StoreError> {
        let describe = &self.describe;
        let conn = &self.conn;
        conn.busy_timeout(options.busy_timeout)
            .map_err(|e| store_error(describe, "set busy timeout", e.into()))?;
        if wal {
            let mode = set_wal(conn, options.busy_timeout)
                .map_err(|e| store_error(describe, "set journal_mode=WAL", e.into()))?;
            if !mode.eq_ignore_ascii_case("wal") {
                return Err(StoreError::Unavailable {
                    store: describe.clone(),
                    detail: format!("cannot switch to WAL: journal_mode is {mode}"),
                });
            }
            // No checkpoint when the connection closes: the last connection would
            // otherwise checkpoint (syncing the WAL and the database) and delete the WAL,
            // and the next run would create it again (syncing its directory). The WAL is
            // checkpointed by size instead (`wal_autocheckpoint`), inside some later
            // commit. A run then syncs twice, at its claim and at its outcome
            // (https://sqlite.org/c3ref/c_dbconfig_defensive.html, NO_CKPT_ON_CLOSE).
            conn.set_db_config(
                rusqlite::config::DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE,
                true,
            )
            .map_err(|e| store_error(describe, "set NO_CKPT_ON_CLOSE", e.into()))?;
            // But every process is the file's first connection, and the first connection
            // rebuilds the WAL index by reading and checksumming the whole WAL
            // (https://sqlite.org/walformat.html#recovery): at SQLite's default of 1000
            // pages, up to 4 MB per run, which took about 1 ms of a 6 ms run. A run writes
            // about 12 pages, so at WAL_CHECKPOINT_PAGES a checkpoint (two more syncs, and
            // one of the WAL header at the next commit) comes every eighth run or so.
            conn.pragma_update(None, "wal_autocheckpoint", WAL_CHECKPOINT_PAGES)
                .map_err(|e| store_error(describe, "set wal_autocheckpoint", e.into()))?;
        }
        let level = match options.synchronous {
            Synchronous::Full => "FULL",
            Synchronous::Normal => "NORMAL",
        };
        conn.pragma_update(None, "synchronous", level)
            .map_err(|e| store_error(describe, "set synchronous", e.into()))?;
        Ok(())
    }

    /// The schema version of the file (`PRAGMA user_version`; 0 for a new file).
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] if the file cannot be read.
    pub fn schema_version(&mut self) -> Result<i64, StoreError> {
        user_version(&self.conn)
            .map_err(|e| store_error(&self.describe, "read schema version", e.into()))
    }

    /// The connection's `PRAGMA synchronous` level: 0 OFF, 1 NORMAL, 2 FULL, 3 EXTRA
    /// (<https://sqlite.org/pragma.html#pragma_synchronous>).
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] if SQLite cannot answer.
    pub fn synchronous_level(&self) -> Result<i64, StoreError> {
        self.conn
            .pragma_query_value(None, "synchronous", |row| row.get(0))
            .map_err(|e| store_error(&self.describe, "read synchronous", e.into()))
    }

    fn newer_schema(&self, version: i64) -> StoreError {
        StoreError::newer_schema(&self.describe, version, SCHEMA_VERSION)
    }

    /// [`Store::renew`] with whatever busy timeout is set.
    fn renew_now(
        &mut self,
        lease: &Lease,
        next: i64,
        ttl: Duration,
    ) -> Result<Option<i64>, StoreError> {
        self.engine("renew", |s| engine::renew(s, lease, next, ttl))
    }

    /// Runs [`Store::init`] once per connection.
    fn ready(&mut self) -> Result<(), StoreError> {
        if self.schema_ready {
            return Ok(());
        }
        self.init()
    }

    /// Runs `f` with this store's part of [`engine`]'s loop ([`Session`]) in one
    /// [`SqliteStore::write`] transaction.
    fn engine<T>(
        &mut self,
        op: &str,
        mut f: impl FnMut(&mut Session<'_>) -> Result<T, Fail>,
    ) -> Result<T, StoreError> {
        self.write(op, |tx, now| f(&mut Session { tx, now }))
    }

    /// Runs `f` in one `BEGIN IMMEDIATE` transaction with the store's time taken after the
    /// write lock is held, and commits if it returns `Ok`.
    fn write<T>(
        &mut self,
        op: &str,
        f: impl FnOnce(&rusqlite::Transaction<'_>, i64) -> Result<T, Fail>,
    ) -> Result<T, StoreError> {
        self.ready()?;
        let clock = &self.clock;
        let result = (|| {
            let tx = self
                .conn
                .transaction_with_behavior(TransactionBehavior::Immediate)?;
            let now = clock.now_usec();
            let value = f(&tx, now)?;
            tx.commit()?;
            Ok(value)
        })();
        result.map_err(|e| store_error(&self.describe, op, e))
    }
}

/// fsyncs a directory, so that the names created in it survive a power cut.
fn sync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

/// Puts the file in WAL mode (a no-op once it is) and returns the journal mode.
///
/// Switching a new file to WAL needs an exclusive lock, and SQLite answers `SQLITE_BUSY`
/// at once, without calling the busy handler, while another connection has the file open
/// (several processes opening a new store together). So the switch is retried here for
/// up to `patience`.
fn set_wal(conn: &Connection, patience: Duration) -> rusqlite::Result<String> {
    let current: String = conn.pragma_query_value(None, "journal_mode", |row| row.get(0))?;
    if current.eq_ignore_ascii_case("wal") {
        return Ok(current);
    }
    let deadline = std::time::Instant::now() + patience;
    let mut pause = Duration::from_millis(1);
    loop {
        match conn.pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0)) {
            Err(e)
                if e.sqlite_error_code() == Some(ErrorCode::DatabaseBusy)
                    && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(50));
            }
            other => return other,
        }
    }
}

/// Reads one `jobguard_run` row selected with [`RUN_COLUMNS`].
fn read_run(row: &Row<'_>) -> Result<Run, Fail> {
    let run_id: String = row.get(0)?;
    let bad = |what: String| Fail::Data(format!("run {run_id}: {what}"));
    let outcome: String = row.get(5)?;
    let outcome = outcome.parse::<Outcome>().map_err(bad)?;
    let resolution: Option<String> = row.get(20)?;
    let resolution = resolution
        .map(|r| r.parse::<Resolution>())
        .transpose()
        .map_err(bad)?;
    let pid: i64 = row.get(13)?;
    let pid = u32::try_from(pid).map_err(|_| bad(format!("pid {pid} out of range")))?;
    let pid_start: i64 = row.get(14)?;
    let pid_start =
        u64::try_from(pid_start).map_err(|_| bad(format!("pid_start {pid_start} out of range")))?;
    let report: String = row.get(19)?;
    let report = serde_json::from_str(&report).map_err(|e| bad(format!("report: {e}")))?;
    let forced: i64 = row.get(8)?;
    Ok(Run {
        job: row.get(1)?,
        slot: Slot {
            usec: row.get(2)?,
            zone: row.get(3)?,
        },
        attempt: row.get(4)?,
        outcome,
        reason: row.get(6)?,
        exit_status: row.get(7)?,
        forced: forced != 0,
        trigger: row.get(9)?,
        host: row.get(10)?,
        machine_id: row.get(11)?,
        boot_id: row.get(12)?,
        pid,
        pid_start,
        invocation_id: row.get(15)?,
        started_at: row.get(16)?,
        finished_at: row.get(17)?,
        fencing_token: row.get(18)?,
        report,
        resolution,
        run_id,
    })
}

/// Runs a `SELECT RUN_COLUMNS FROM jobguard_run <rest>` and reads every row.
fn select_runs(
    conn: &Connection,
    rest: &str,
    values: impl rusqlite::Params,
) -> Result<Vec<Run>, Fail> {
    let sql = format!("SELECT {RUN_COLUMNS} FROM jobguard_run {rest}");
    let mut stmt = conn.prepare_cached(&sql)?;
    let mut rows = stmt.query(values)?;
    let mut runs = Vec::new();
    while let Some(row) = rows.next()? {
        runs.push(read_run(row)?);
    }
    Ok(runs)
}

/// The first run of [`select_runs`], if any.
fn select_run(
    conn: &Connection,
    rest: &str,
    values: impl rusqlite::Params,
) -> Result<Option<Run>, Fail> {
    Ok(select_runs(conn, rest, values)?.into_iter().next())
}

/// The job's lease row, released or not.
fn lease_row(conn: &Connection, job: &str) -> Result<Option<Lease>, Fail> {
    Ok(conn
        .prepare_cached(
            "SELECT holder, host, token, acquired_at, expire_at, renewal FROM jobguard_lease
             WHERE job = ?1",
        )?
        .query_row([job], |row| {
            Ok(Lease {
                job: job.to_string(),
                holder: row.get(0)?,
                host: row.get(1)?,
                token: row.get(2)?,
                acquired_at: row.get(3)?,
                expire_at: row.get(4)?,
                renewal: row.get(5)?,
            })
        })
        .optional()?)
}

/// The snapshot [`rules::claim`] decides on, read in the claim's transaction: the lease
/// row, the record of a claim sent again, every record of the asked slot and (with
/// `queued_first`) of every slot with a queued record, the newest slot within the bound,
/// and the record that holds the lease row's token.
fn claim_state(conn: &Connection, req: &ClaimRequest, now: i64) -> Result<rules::ClaimState, Fail> {
    let job = &req.run.job;
    let lease = lease_row(conn, job)?;
    let retried = select_run(conn, "WHERE run_id = ?1", [&req.run.run_id])?;
    let mut slots: std::collections::BTreeMap<i64, Vec<Run>> = std::collections::BTreeMap::new();
    // Each branch a search of the slot index, which the planner finds by the schema alone
    // (a real store has no statistics: jobguard runs no ANALYZE). Written as one OR, it
    // walked every record of the job in the history index instead.
    let runs = select_runs(
        conn,
        "WHERE rowid IN (
             SELECT rowid FROM jobguard_run WHERE job = ?1 AND slot_usec = ?2
             UNION ALL
             SELECT rowid FROM jobguard_run WHERE ?3 AND job = ?1 AND slot_usec IN (
               SELECT slot_usec FROM jobguard_run WHERE job = ?1 AND resolution = 'queued'))
         ORDER BY rowid",
        params![job, req.run.slot.usec, req.queued_first],
    )?;
    for run in runs {
        slots.entry(run.slot.usec).or_default().push(run);
    }
    let newest: Option<i64> = conn.query_row(
        "SELECT MAX(slot_usec) FROM jobguard_run WHERE job = ?1 AND slot_usec <= ?2",
        params![job, rules::newest_bound(now, req)],
        |row| row.get(0),
    )?;
    let lease_run = match &lease {
        Some(l) if !l.holder.is_empty() => select_run(
            conn,
            "WHERE job = ?1 AND fencing_token = ?2 ORDER BY started_at DESC, rowid DESC LIMIT 1",
            params![job, l.token],
        )?,
        _ => None,
    };
    Ok(rules::ClaimState {
        now,
        lease,
        retried,
        slots,
        newest,
        lease_run,
    })
}

/// Writes the job's lease row as `lease` says (a grant, or a release).
fn write_lease(conn: &Connection, lease: &Lease) -> Result<(), Fail> {
    conn.execute(
        "INSERT INTO jobguard_lease (job, holder, host, token, acquired_at, expire_at, renewal)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
         ON CONFLICT (job) DO UPDATE SET holder = excluded.holder,
             host = excluded.host, token = excluded.token,
             acquired_at = excluded.acquired_at, expire_at = excluded.expire_at,
             renewal = excluded.renewal",
        params![
            lease.job,
            lease.holder,
            lease.host,
            lease.token,
            lease.acquired_at,
            lease.expire_at,
            lease.renewal
        ],
    )?;
    Ok(())
}

/// Writes what changes in a record after its start: its end, report and resolution.
fn update_run(conn: &Connection, run: &Run) -> Result<(), Fail> {
    let report = serde_json::to_string(&run.report)
        .map_err(|e| Fail::Data(format!("run {}: report: {e}", run.run_id)))?;
    conn.execute(
        "UPDATE jobguard_run SET outcome = ?2, reason = ?3, exit_status = ?4,
             finished_at = ?5, report = ?6, resolution = ?7
         WHERE run_id = ?1",
        params![
            run.run_id,
            run.outcome.as_str(),
            run.reason,
            run.exit_status,
            run.finished_at,
            report,
            run.resolution.map(Resolution::as_str)
        ],
    )?;
    Ok(())
}

/// One `BEGIN IMMEDIATE` transaction's part of [`engine`]'s loop: it holds the
/// database's write lock from its first read, so nothing read changes before its commit
/// (the transaction's own `COMMIT`, after the loop).
struct Session<'a> {
    tx: &'a rusqlite::Transaction<'a>,
    /// The store's time, µs since the epoch, taken once the lock was held.
    now: i64,
}

impl engine::Backend for Session<'_> {
    type Version = ();
    type Client = rusqlite::Error;
    const HOST_CLOCK: bool = true;

    /// Also reads the file's schema version (`PRAGMA user_version`, in the transaction's
    /// snapshot): a claim of this jobguard on a file that a newer one has upgraded since
    /// it was opened is refused.
    fn read_claim(&mut self, req: &ClaimRequest) -> Result<Read<(rules::ClaimState, ())>, Fail> {
        let version = user_version(self.tx)?;
        if version > SCHEMA_VERSION {
            return Err(Fail::Newer(version));
        }
        Ok(Read::Got((claim_state(self.tx, req, self.now)?, ())))
    }

    fn read_run(
        &mut self,
        job: &str,
        run_id: &str,
        need: Need,
    ) -> Result<Read<(RunRead, ())>, Fail> {
        let lease = lease_row(self.tx, job)?;
        let record = select_run(self.tx, "WHERE run_id = ?1", [run_id])?;
        let slot_runs = match &record {
            Some(r) if need.slot => select_runs(
                self.tx,
                "WHERE job = ?1 AND slot_usec = ?2 ORDER BY rowid",
                params![r.job, r.slot.usec],
            )?,
            _ => Vec::new(),
        };
        let read = RunRead {
            now: self.now,
            lease,
            // A record of another job is not this job's to change.
            record: record.filter(|r| r.job == job),
            slot_runs,
        };
        Ok(Read::Got((read, ())))
    }

    fn read_lease(&mut self, job: &str, _live: bool) -> Result<Read<(LeaseRead, ())>, Fail> {
        let lease = lease_row(self.tx, job)?;
        Ok(Read::Got((
            LeaseRead {
                now: self.now,
                lease,
            },
            (),
        )))
    }

    fn read_slot(&mut self, job: &str, slot: i64) -> Result<Read<(engine::Records, ())>, Fail> {
        let runs = select_runs(
            self.tx,
            "WHERE job = ?1 AND slot_usec = ?2 ORDER BY rowid",
            params![job, slot],
        )?;
        Ok(Read::Got((runs, ())))
    }

    /// Writes the lease row whole, inserts a grant's record and updates each changed one.
    fn commit(&mut self, (): (), writes: &Writes) -> Result<Commit, Fail> {
        match &writes.lease {
            LeaseWrite::Grant { lease, .. }
            | LeaseWrite::Renew(lease)
            | LeaseWrite::Release(lease) => write_lease(self.tx, lease)?,
            LeaseWrite::Keep => {}
        }
        for (run, before) in writes.changed() {
            match before {
                None => insert_run(self.tx, run)?,
                Some(_) => update_run(self.tx, run)?,
            }
        }
        Ok(Commit::Done)
    }
}

/// The table of heartbeats ([`Store::put_beat`]), made with the first beat like the
/// schedule table (no schema version: a jobguard that does not know it leaves it alone).
const BEAT_TABLE: &str =
    "CREATE TABLE IF NOT EXISTS jobguard_host (host TEXT PRIMARY KEY, beat TEXT NOT NULL)";

/// The table of marks ([`Store::mark`]), made with the first mark (no schema version for
/// it: a jobguard that does not know it leaves it alone), with the index retention
/// deletes by.
const MARK_TABLE: &str = "CREATE TABLE IF NOT EXISTS jobguard_mark (
    namespace TEXT NOT NULL, mark_key TEXT NOT NULL, job TEXT NOT NULL,
    run_id TEXT NOT NULL, host TEXT NOT NULL, token INTEGER NOT NULL,
    marked_at INTEGER NOT NULL, PRIMARY KEY (namespace, mark_key));
  CREATE INDEX IF NOT EXISTS jobguard_mark_age ON jobguard_mark (job, marked_at);";

fn mark_table_exists(conn: &Connection) -> Result<bool, Fail> {
    Ok(conn
        .prepare_cached(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'jobguard_mark'",
        )?
        .exists([])?)
}

fn select_mark(conn: &Connection, namespace: &str, key: &str) -> Result<Option<Mark>, Fail> {
    Ok(conn
        .prepare_cached(
            "SELECT job, run_id, host, token, marked_at FROM jobguard_mark
             WHERE namespace = ?1 AND mark_key = ?2",
        )?
        .query_row([namespace, key], |r| {
            Ok(Mark {
                namespace: namespace.to_string(),
                key: key.to_string(),
                job: r.get(0)?,
                run_id: r.get(1)?,
                host: r.get(2)?,
                token: r.get(3)?,
                marked_at: r.get(4)?,
            })
        })
        .optional()?)
}

fn insert_mark_row(conn: &Connection, m: &Mark) -> Result<(), Fail> {
    conn.prepare_cached(
        "INSERT INTO jobguard_mark (namespace, mark_key, job, run_id, host, token, marked_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    )?
    .execute(params![
        m.namespace,
        m.key,
        m.job,
        m.run_id,
        m.host,
        m.token,
        m.marked_at
    ])?;
    Ok(())
}

fn insert_run(conn: &Connection, run: &Run) -> Result<(), Fail> {
    let report = serde_json::to_string(&run.report)
        .map_err(|e| Fail::Data(format!("run {}: report: {e}", run.run_id)))?;
    let pid_start = i64::try_from(run.pid_start)
        .map_err(|_| Fail::Data(format!("pid_start {} out of range", run.pid_start)))?;
    conn.execute(
        &format!(
            "INSERT INTO jobguard_run ({RUN_COLUMNS}) VALUES
             (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18,
              ?19, ?20, ?21)"
        ),
        params![
            run.run_id,
            run.job,
            run.slot.usec,
            run.slot.zone,
            run.attempt,
            run.outcome.as_str(),
            run.reason,
            run.exit_status,
            run.forced,
            run.trigger,
            run.host,
            run.machine_id,
            run.boot_id,
            run.pid,
            pid_start,
            run.invocation_id,
            run.started_at,
            run.finished_at,
            run.fencing_token,
            report,
            run.resolution.map(Resolution::as_str),
        ],
    )?;
    Ok(())
}

/// Indexes that change no rule, only how fast a read is: created when missing, outside the
/// schema version, so a store that has them still opens with a jobguard that does not
/// know them (and one without them, opened read-only, works, only slower).
///
/// `jobguard_run_outcome`: the records of a job with given outcomes (`status` and `audit`
/// look for every unsettled attempt of a job). Without it the read walks all of a job's
/// records: at 10,000 records per job, `status` over 100 jobs took 11 times as long
/// (`benches/ledger-scale.sh`).
const EXTRA_INDEXES: &str =
    "CREATE INDEX IF NOT EXISTS jobguard_run_outcome ON jobguard_run (job, outcome);";

impl SqliteStore {
    /// Creates [`EXTRA_INDEXES`] when missing; a store this process cannot write (a
    /// read-only reader) goes on without them.
    fn add_indexes(&mut self) {
        let _ = self.conn.execute_batch(EXTRA_INDEXES);
    }
}

impl Store for SqliteStore {
    fn describe(&self) -> String {
        self.describe.clone()
    }

    engine::store_ops!();

    fn init(&mut self) -> Result<(), StoreError> {
        let version = self.schema_version()?;
        if version == SCHEMA_VERSION {
            self.add_indexes();
            self.schema_ready = true;
            return Ok(());
        }
        if version > SCHEMA_VERSION {
            return Err(self.newer_schema(version));
        }
        let result = (|| {
            let tx = self
                .conn
                .transaction_with_behavior(TransactionBehavior::Immediate)?;
            // Another process may have migrated while we waited for the lock.
            let version = user_version(&tx)?;
            if version > SCHEMA_VERSION {
                return Ok(Some(version));
            }
            let from = usize::try_from(version.max(0)).unwrap_or(0);
            for migration in MIGRATIONS.iter().skip(from) {
                tx.execute_batch(migration)?;
            }
            tx.pragma_update(None, "user_version", SCHEMA_VERSION)?;
            tx.commit()?;
            Ok(None)
        })();
        match result {
            Ok(None) => {
                self.add_indexes();
                self.schema_ready = true;
                Ok(())
            }
            Ok(Some(newer)) => Err(self.newer_schema(newer)),
            Err(e) => Err(store_error(
                &self.describe,
                "create schema",
                Fail::Client(e),
            )),
        }
    }

    fn now(&mut self) -> Result<i64, StoreError> {
        Ok(self.clock.now_usec())
    }

    fn renew(
        &mut self,
        lease: &Lease,
        next: i64,
        ttl: Duration,
    ) -> Result<Option<i64>, StoreError> {
        // A renewal waits for another process's write lock at most a sixth of the time to
        // live (the shim's safety margin), so that the shim can still stop its command
        // before the lease would expire; the store answers unavailable after that.
        let wait = (ttl / 6).min(self.busy_timeout);
        self.conn
            .busy_timeout(wait)
            .map_err(|e| store_error(&self.describe, "set busy timeout", e.into()))?;
        let result = self.renew_now(lease, next, ttl);
        let restored = self.conn.busy_timeout(self.busy_timeout);
        let value = result?;
        restored.map_err(|e| store_error(&self.describe, "set busy timeout", e.into()))?;
        Ok(value)
    }

    fn lease(&mut self, job: &str) -> Result<Option<Lease>, StoreError> {
        self.ready()?;
        lease_row(&self.conn, job)
            .map(|lease| lease.filter(|l| !l.holder.is_empty()))
            .map_err(|e| store_error(&self.describe, "read lease", e))
    }

    fn outcome_counts(&mut self, job: &str) -> Result<Vec<(Outcome, u64)>, StoreError> {
        self.ready()?;
        let count = || -> Result<Vec<(Outcome, u64)>, Fail> {
            let mut stmt = self.conn.prepare_cached(
                "SELECT outcome, count(*) FROM jobguard_run WHERE job = ?1 GROUP BY outcome",
            )?;
            let rows = stmt.query_map([job], |row| {
                Ok((row.get::<_, String>(0)?, row.get::<_, i64>(1)?))
            })?;
            let mut out = Vec::new();
            for row in rows {
                let (outcome, n) = row?;
                let outcome: Outcome = outcome.parse().map_err(Fail::Data)?;
                out.push((outcome, u64::try_from(n).unwrap_or(0)));
            }
            Ok(out)
        };
        count().map_err(|e| store_error(&self.describe, "count runs", e))
    }

    fn jobs(&mut self) -> Result<Vec<String>, StoreError> {
        self.ready()?;
        let list = || -> Result<Vec<String>, Fail> {
            let sql = format!("SELECT job FROM {}", crate::store::EVERY_JOB);
            let mut stmt = self.conn.prepare_cached(&sql)?;
            let rows = stmt.query_map([], |row| row.get::<_, String>(0))?;
            let mut jobs: Vec<String> = rows.collect::<Result<_, _>>()?;
            // By bytes, whatever the column's collation.
            jobs.sort();
            Ok(jobs)
        };
        list().map_err(|e| store_error(&self.describe, "list jobs", e))
    }

    fn runs(&mut self, query: &RunQuery) -> Result<Vec<Run>, StoreError> {
        self.ready()?;
        let mut conditions: Vec<String> = Vec::new();
        let mut values: Vec<Value> = Vec::new();
        fn placeholder(values: &mut Vec<Value>, value: Value) -> String {
            values.push(value);
            format!("?{}", values.len())
        }
        if let Some(job) = &query.job {
            let p = placeholder(&mut values, Value::Text(job.clone()));
            // A window (below) holds only the job's records, found by rowid; `+` keeps the
            // planner from walking every record of the job and testing each against it.
            let column = if query.slots_from.is_some() {
                "+job"
            } else {
                "job"
            };
            conditions.push(format!("{column} = {p}"));
        }
        if let Some(slot) = query.slot {
            let p = placeholder(&mut values, Value::Integer(slot));
            conditions.push(format!("slot_usec = {p}"));
        }
        if let Some(from) = query.slots_from {
            // Each job's window (rules::window): its records from its newest slot before
            // `from` on, those of the newest slot before `from` with a record that names a
            // schedule (the slot index, walked back from `from`), and its first record
            // started before `from` (the (job, started_at) index: `+` keeps the planner
            // from finding every older record by slot and sorting them by start).
            let jobs = match &query.job {
                Some(job) => format!(
                    "(SELECT {} AS job)",
                    placeholder(&mut values, Value::Text(job.clone()))
                ),
                None => crate::store::EVERY_JOB.to_string(),
            };
            let f = placeholder(&mut values, Value::Integer(from));
            conditions.push(format!(
                "rowid IN (
                   SELECT r.rowid FROM {jobs} j, jobguard_run r
                    WHERE r.job = j.job AND r.slot_usec >= COALESCE((SELECT MAX(p.slot_usec)
                      FROM jobguard_run p WHERE p.job = j.job AND p.slot_usec < {f}), {f})
                   UNION ALL
                   SELECT r.rowid FROM {jobs} j, jobguard_run r
                    WHERE r.job = j.job AND r.slot_usec = (SELECT p.slot_usec
                      FROM jobguard_run p WHERE p.job = j.job AND p.slot_usec < {f}
                       AND (p.outcome IN ('succeeded', 'failed')
                            OR json_extract(p.report, '$.\"{key}\"') IS NOT NULL)
                      ORDER BY p.slot_usec DESC LIMIT 1)
                   UNION ALL
                   SELECT (SELECT p.rowid FROM jobguard_run p
                            WHERE p.job = j.job AND +p.slot_usec < {f}
                            ORDER BY p.started_at, p.rowid LIMIT 1)
                     FROM {jobs} j)",
                key = crate::guard::ledger::SCHEDULE
            ));
        }
        if !query.outcomes.is_empty() {
            let list: Vec<String> = query
                .outcomes
                .iter()
                .map(|o| placeholder(&mut values, Value::Text(o.as_str().to_string())))
                .collect();
            conditions.push(format!("outcome IN ({})", list.join(", ")));
        }
        if !query.resolutions.is_empty() {
            // Written out (fixed names of `Resolution::as_str`), so that `resolution =
            // 'queued'` matches the partial index of queued records; a bound value would
            // not, and the planner would walk every record of the job.
            let list: Vec<String> = query
                .resolutions
                .iter()
                .map(|r| format!("resolution = '{}'", r.as_str()))
                .collect();
            conditions.push(format!("({})", list.join(" OR ")));
        }
        let mut rest = String::new();
        if !conditions.is_empty() {
            rest.push_str("WHERE ");
            rest.push_str(&conditions.join(" AND "));
        }
        // Only a job's newest records are read in the history index's order. With a slot,
        // a window, outcomes or resolutions asked for, another index finds the few records
        // and they are sorted; `+` keeps the planner from walking all of a job's records
        // in the history index's order instead, which it does on a store without
        // statistics, that is every store: jobguard runs no ANALYZE.
        if query.slot.is_none()
            && query.slots_from.is_none()
            && query.outcomes.is_empty()
            && query.resolutions.is_empty()
        {
            rest.push_str(" ORDER BY started_at DESC, rowid DESC");
        } else {
            rest.push_str(" ORDER BY +started_at DESC, rowid DESC");
        }
        if query.limit > 0 {
            // Written out, not bound: SQLite plans with a bound LIMIT's value, so every bind
            // expired the statement and it was compiled again at each call. A few limits
            // are used, each one cached statement.
            let limit = i64::try_from(query.limit).unwrap_or(i64::MAX);
            rest.push_str(&format!(" LIMIT {limit}"));
        }
        select_runs(&self.conn, &rest, rusqlite::params_from_iter(values))
            .map_err(|e| store_error(&self.describe, "read runs", e))
    }

    fn read_schedule(&mut self, job: &str) -> Result<Option<ScheduleDecl>, StoreError> {
        self.ready()?;
        let read = || -> Result<Option<ScheduleDecl>, Fail> {
            // The table comes with the first declaration (no schema version for it: a
            // jobguard that does not know it leaves it alone).
            let exists = self
                .conn
                .prepare_cached(
                    "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'jobguard_schedule'",
                )?
                .exists([])?;
            if !exists {
                return Ok(None);
            }
            Ok(self
                .conn
                .prepare_cached(
                    "SELECT fingerprint, defined_at, host, seen_at, horizon FROM jobguard_schedule
                     WHERE job = ?1",
                )?
                .query_row([job], |r| {
                    Ok(ScheduleDecl {
                        job: job.to_string(),
                        fingerprint: r.get(0)?,
                        defined_at: r.get(1)?,
                        host: r.get(2)?,
                        seen_at: r.get(3)?,
                        horizon: r.get(4)?,
                    })
                })
                .optional()?)
        };
        read().map_err(|e| store_error(&self.describe, "read the schedule", e))
    }

    fn swap_schedule(
        &mut self,
        expected: Option<&ScheduleDecl>,
        new: &ScheduleDecl,
    ) -> Result<bool, StoreError> {
        self.write("declare the schedule", |tx, _now| {
            tx.execute_batch(
                "CREATE TABLE IF NOT EXISTS jobguard_schedule (
                    job TEXT PRIMARY KEY, fingerprint TEXT NOT NULL, defined_at INTEGER NOT NULL,
                    host TEXT NOT NULL, seen_at INTEGER NOT NULL, horizon INTEGER NOT NULL)",
            )?;
            let values = params![
                new.job,
                new.fingerprint,
                new.defined_at,
                new.host,
                new.seen_at,
                new.horizon
            ];
            let n = match expected {
                None => tx.execute(
                    "INSERT INTO jobguard_schedule
                       (job, fingerprint, defined_at, host, seen_at, horizon)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT (job) DO NOTHING",
                    values,
                )?,
                Some(e) => tx.execute(
                    "UPDATE jobguard_schedule SET fingerprint = ?2, defined_at = ?3, host = ?4,
                       seen_at = ?5, horizon = ?6
                     WHERE job = ?1 AND fingerprint = ?7 AND defined_at = ?8 AND seen_at = ?9",
                    params![
                        new.job,
                        new.fingerprint,
                        new.defined_at,
                        new.host,
                        new.seen_at,
                        new.horizon,
                        e.fingerprint,
                        e.defined_at,
                        e.seen_at
                    ],
                )?,
            };
            Ok(n == 1)
        })
    }

    fn put_beat(&mut self, host: &str, beat: &str) -> Result<(), StoreError> {
        self.write("write the heartbeat", |tx, _now| {
            tx.execute_batch(BEAT_TABLE)?;
            tx.execute(
                "INSERT INTO jobguard_host (host, beat) VALUES (?1, ?2)
                 ON CONFLICT (host) DO UPDATE SET beat = excluded.beat",
                params![host, beat],
            )?;
            Ok(())
        })
    }

    fn beats(&mut self) -> Result<Vec<(String, String)>, StoreError> {
        self.ready()?;
        let read = || -> Result<Vec<(String, String)>, Fail> {
            let exists = self
                .conn
                .prepare_cached(
                    "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'jobguard_host'",
                )?
                .exists([])?;
            if !exists {
                return Ok(Vec::new());
            }
            let mut stmt = self
                .conn
                .prepare_cached("SELECT host, beat FROM jobguard_host")?;
            let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?;
            Ok(rows.collect::<Result<_, _>>()?)
        };
        read().map_err(|e| store_error(&self.describe, "read the heartbeats", e))
    }

    fn read_beat(&mut self, key: &str) -> Result<Option<String>, StoreError> {
        self.ready()?;
        let read = || -> Result<Option<String>, Fail> {
            let got = self
                .conn
                .prepare_cached("SELECT beat FROM jobguard_host WHERE host = ?1")
                .and_then(|mut s| s.query_row([key], |r| r.get(0)).optional());
            match got {
                // No such table: no record was ever written.
                Err(rusqlite::Error::SqliteFailure(_, Some(m))) if m.contains("no such table") => {
                    Ok(None)
                }
                got => Ok(got?),
            }
        };
        read().map_err(|e| store_error(&self.describe, "read a fleet record", e))
    }

    fn forget_beats(&mut self, hosts: &[String]) -> Result<(), StoreError> {
        if hosts.is_empty() {
            return Ok(());
        }
        self.write("forget heartbeats", |tx, _now| {
            tx.execute_batch(BEAT_TABLE)?;
            for host in hosts {
                tx.execute("DELETE FROM jobguard_host WHERE host = ?1", [host])?;
            }
            Ok(())
        })
    }

    fn mark(&mut self, new: &Mark, fenced: bool) -> Result<Marking, StoreError> {
        // One write transaction: the lease row, the key and the insert are one step.
        self.write("mark", |tx, now| {
            tx.execute_batch(MARK_TABLE)?;
            let row = if fenced {
                lease_row(tx, &new.job)?
            } else {
                None
            };
            let existing = select_mark(tx, &new.namespace, &new.key)?;
            match rules::mark(now, row.as_ref(), existing, new, fenced) {
                rules::MarkStep::Answer(answer) => Ok(answer),
                rules::MarkStep::Insert(mark) => {
                    insert_mark_row(tx, &mark)?;
                    Ok(Marking::New(mark))
                }
            }
        })
    }

    fn read_mark(&mut self, namespace: &str, key: &str) -> Result<Option<Mark>, StoreError> {
        self.ready()?;
        let read = || -> Result<Option<Mark>, Fail> {
            // The table comes with the first mark.
            if !mark_table_exists(&self.conn)? {
                return Ok(None);
            }
            select_mark(&self.conn, namespace, key)
        };
        read().map_err(|e| store_error(&self.describe, "read a mark", e))
    }

    fn insert_mark(&mut self, mark: &Mark, fenced: bool) -> Result<bool, StoreError> {
        self.write("mark", |tx, now| {
            tx.execute_batch(MARK_TABLE)?;
            let row = if fenced {
                lease_row(tx, &mark.job)?
            } else {
                None
            };
            if !rules::mark_fence_holds(now, row.as_ref(), mark, fenced)
                || select_mark(tx, &mark.namespace, &mark.key)?.is_some()
            {
                return Ok(false);
            }
            insert_mark_row(tx, mark)?;
            Ok(true)
        })
    }

    fn delete_marks(&mut self, job: &str, before: i64) -> Result<usize, StoreError> {
        self.write("delete marks", |tx, _now| {
            if !mark_table_exists(tx)? {
                return Ok(0);
            }
            Ok(tx.execute(
                "DELETE FROM jobguard_mark WHERE job = ?1 AND marked_at < ?2",
                params![job, before],
            )?)
        })
    }

    fn count_marks(&mut self, job: &str, before: i64) -> Result<usize, StoreError> {
        self.ready()?;
        let read = || -> Result<i64, Fail> {
            if !mark_table_exists(&self.conn)? {
                return Ok(0);
            }
            Ok(self.conn.query_row(
                "SELECT count(*) FROM jobguard_mark WHERE job = ?1 AND marked_at < ?2",
                params![job, before],
                |r| r.get(0),
            )?)
        };
        let n = read().map_err(|e| store_error(&self.describe, "count marks", e))?;
        Ok(usize::try_from(n).unwrap_or(0))
    }

    fn delete_slots(
        &mut self,
        job: &str,
        slots: &[i64],
        started_before: i64,
    ) -> Result<usize, StoreError> {
        // A few hundred slots per transaction: claims wait for the write lock meanwhile.
        let mut n = 0;
        for chunk in slots.chunks(200) {
            n += self.write("delete runs", |tx, _now| {
                let mut n = 0;
                for slot in chunk {
                    n += tx.execute(
                        "DELETE FROM jobguard_run WHERE job = ?1 AND slot_usec = ?2
                           AND NOT EXISTS (SELECT 1 FROM jobguard_run o
                             WHERE o.job = ?1 AND o.slot_usec = ?2
                               AND (o.outcome = 'running' OR o.started_at >= ?3))",
                        params![job, slot, started_before],
                    )?;
                }
                Ok(n)
            })?;
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    //! A real store has no statistics (jobguard runs no `ANALYZE`), so SQLite's planner
    //! picks each statement's index by the schema alone. These tests hold the everyday
    //! reads and writes to work that does not grow with a job's history: the same calls
    //! on a job with 100 times more records take about as many steps of SQLite's virtual
    //! machine (`SQLITE_STMTSTATUS_VM_STEP`, <https://sqlite.org/c3ref/c_stmtstatus_counter.html>),
    //! counted, not timed.

    use std::collections::BTreeMap;
    use std::sync::Mutex;

    use rusqlite::StatementStatus;
    use rusqlite::trace::{TraceEvent, TraceEventCodes};

    use super::*;
    use crate::guard::clock::ManualClock;
    use crate::store::rules::tests::{end, req};
    use crate::store::{Claim, ClaimRequest, RunQuery};

    /// The store's clock: 2027-01-15T08:00:00Z, µs since the epoch.
    const NOW: i64 = 1_800_000_000_000_000;
    const MINUTE: i64 = 60_000_000;

    /// A claim of job `j`'s `slot` under run id number `r`, as the shim asks for a timer's
    /// slot (queued re-runs first, in order).
    fn request(slot: i64, r: u32) -> ClaimRequest {
        let mut req = req(slot, 1, r);
        req.queued_first = true;
        req.in_order = true;
        req
    }

    /// Claims `slot` and records its success.
    fn succeed(store: &mut SqliteStore, slot: i64, r: u32) {
        let req = request(slot, r);
        match store.claim(&req).expect("claim") {
            Claim::Claimed { lease, .. } => {
                let done = end(Outcome::Succeeded, None);
                store
                    .finish(&lease, &req.run.run_id, &done)
                    .expect("finish");
            }
            other => panic!("claim of slot {slot}: {other:?}"),
        }
    }

    /// A store whose job `j` has succeeded once a minute for `records` minutes up to one
    /// minute before [`NOW`], and another job as many times; and its clock.
    fn store_with(records: i64) -> (SqliteStore, ManualClock) {
        let clock = ManualClock::new(NOW);
        let mut store = SqliteStore::open_in_memory(Arc::new(clock.clone())).expect("open");
        store.init().expect("init");
        succeed(&mut store, NOW - (records + 1) * MINUTE, 0);
        store
            .conn
            .execute(
                &format!(
                    "INSERT INTO jobguard_run ({RUN_COLUMNS})
                     WITH RECURSIVE k(k) AS (SELECT 1 UNION ALL SELECT k + 1 FROM k WHERE k < ?1)
                     SELECT 'r' || j.name || k, j.name, ?2 - k * ?3, slot_zone, attempt, outcome,
                       reason, exit_status, forced, trigger_kind, host, machine_id, boot_id,
                       pid, pid_start, invocation_id, ?2 - k * ?3 + 1000, ?2 - k * ?3 + 2000,
                       fencing_token, report, resolution
                     FROM k, (SELECT * FROM jobguard_run) r,
                       (SELECT 'j' AS name UNION ALL SELECT 'other') j"
                ),
                params![records, NOW, MINUTE],
            )
            .expect("fill");
        (store, clock)
    }

    /// SQLite's counter `what` for every statement `f` runs on `store`, summed by SQL text.
    fn counted(
        store: &mut SqliteStore,
        what: StatementStatus,
        f: impl FnOnce(&mut SqliteStore),
    ) -> BTreeMap<String, i64> {
        // A cached statement's counters run on over its uses: every statement starts
        // fresh here, and `Run` tells when it is one more use of the same.
        store.conn.flush_prepared_statement_cache();
        type Seen = (BTreeMap<String, i64>, BTreeMap<String, i64>);
        let seen: Arc<Mutex<Seen>> = Arc::default();
        let s = Arc::clone(&seen);
        store
            .conn
            .trace_v2(
                TraceEventCodes::SQLITE_TRACE_PROFILE,
                Some(move |e: TraceEvent<'_>| {
                    if let TraceEvent::Profile(stmt, _) = e {
                        let sql = stmt.sql().into_owned();
                        let total = i64::from(stmt.get_status(what));
                        let fresh = stmt.get_status(StatementStatus::Run) <= 1;
                        let (last, sum) = &mut *s.lock().expect("lock");
                        let before = if fresh {
                            0
                        } else {
                            last.get(&sql).copied().unwrap_or(0)
                        };
                        *sum.entry(sql.clone()).or_default() += total - before;
                        last.insert(sql, total);
                    }
                }),
            )
            .expect("trace");
        f(store);
        store
            .conn
            .trace_v2(TraceEventCodes::empty(), None::<fn(TraceEvent<'_>)>)
            .expect("trace off");
        std::mem::take(&mut seen.lock().expect("lock").1)
    }

    /// The calls of a timer's run (claim and finish of `slot`, under run id number `r`), of
    /// `status` and `audit` (the newest records, the unsettled ones, a slot with no record,
    /// an hour's window of the job and of every job, the lease) and of `recover` (the
    /// queued re-runs).
    fn everyday(store: &mut SqliteStore, slot: i64, r: u32) {
        succeed(store, slot, r);
        let job = Some("j".to_string());
        for query in [
            RunQuery {
                job: job.clone(),
                limit: 200,
                ..RunQuery::default()
            },
            RunQuery {
                job: job.clone(),
                limit: 20,
                ..RunQuery::default()
            },
            RunQuery {
                job: job.clone(),
                outcomes: vec![Outcome::Failed, Outcome::Interrupted, Outcome::LeaseLost],
                ..RunQuery::default()
            },
            RunQuery {
                job: job.clone(),
                slot: Some(slot - MINUTE / 2),
                limit: 1,
                ..RunQuery::default()
            },
            RunQuery {
                job: job.clone(),
                slots_from: Some(slot - 60 * MINUTE),
                ..RunQuery::default()
            },
            // `recover` and the re-run service.
            RunQuery {
                job: job.clone(),
                resolutions: vec![Resolution::Queued],
                ..RunQuery::default()
            },
        ] {
            store.runs(&query).expect("runs");
        }
        // `audit` of every job: the jobs, then each one's window (above).
        store.jobs().expect("jobs");
        store.lease("j").expect("lease");
    }

    #[test]
    fn everyday_calls_do_not_grow_with_the_history_without_statistics() {
        let (mut small, _) = store_with(1_000);
        let (mut large, _) = store_with(100_000);
        let run = |store: &mut SqliteStore| everyday(store, NOW, 1);
        let s = counted(&mut small, StatementStatus::VmStep, run);
        let l = counted(&mut large, StatementStatus::VmStep, run);
        let mut grew = Vec::new();
        for (sql, large_steps) in &l {
            let small_steps = s.get(sql).copied().unwrap_or(0);
            // A B-tree one level deeper costs a few steps per search; a walk of the job's
            // records costs 100 times as many.
            if *large_steps > small_steps * 2 + 100 {
                grew.push(format!("{small_steps} -> {large_steps} steps: {sql}"));
            }
        }
        assert!(
            grew.is_empty(),
            "with 100 times the records, these statements took far more steps:\n{}",
            grew.join("\n")
        );
        // The counters were read: a claim takes steps.
        assert!(l.values().sum::<i64>() > 0 && l.len() >= 5, "{l:?}");
    }

    /// Every statement is prepared once per connection and then only bound and run. When
    /// the value bound to a parameter "might influence the choice of query plan", SQLite
    /// compiles the statement again at the first step after every new binding
    /// (<https://sqlite.org/c3ref/prepare.html>); a bound `LIMIT` was such a value.
    #[test]
    fn everyday_calls_are_not_prepared_again() {
        let (mut store, clock) = store_with(1_000);
        everyday(&mut store, NOW, 1);
        clock.advance(MINUTE);
        let again = counted(&mut store, StatementStatus::RePrepare, |s| {
            everyday(s, NOW + MINUTE, 2);
        });
        let prepared: Vec<String> = again
            .iter()
            .filter(|(_, n)| **n > 0)
            .map(|(sql, n)| format!("{n} times: {sql}"))
            .collect();
        assert!(
            prepared.is_empty(),
            "prepared again at their second use:\n{}",
            prepared.join("\n")
        );
        assert!(again.len() >= 5, "{again:?}");
    }
}

//! The local lock: one `flock(2)` per job, so that two runs of a job on this host never
//! overlap, and a second one is skipped at once instead of queued.
//!
//! The lock file is `<dir>/<job>.lock` in a runtime directory (see
//! [`crate::paths::lock_dir`]). It is opened close-on-exec, so the job's command and any
//! daemon it leaves behind do not inherit the lock: the lock lives exactly as long as the
//! shim holds the guard, and the kernel drops it when the shim exits or is killed. Lock
//! files are never unlinked, because unlinking races with `flock` (a process could lock
//! the unlinked inode while another creates a new file under the same name).
//!
//! After acquiring, the holder writes a one-line record into the file (pid, start time,
//! host, and the run id once it is known), so that a skipped second run can say who holds
//! the lock. The lock itself is the `flock`. The run id stays in the record until the
//! holder has seen its run to the end ([`JobLock::clear_run_id`]), so the next holder
//! learns of a run whose shim was killed ([`JobLock::unfinished_run`]).
//!
//! Leases across hosts are [`crate::guard::lease`]'s job, not this module's.

use std::fs::{DirBuilder, File, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

/// Who holds a job's lock, as its holder wrote it into the lock file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockHolder {
    /// Process id of the holder.
    pub pid: u32,
    /// When the holder took the lock, µs since the Unix epoch (host clock), if recorded.
    pub started_at: Option<i64>,
    /// Host name of the holder, if recorded.
    pub host: Option<String>,
    /// Run id of the holder's run, once it was known ([`JobLock::set_run_id`]).
    pub run_id: Option<String>,
}

impl std::fmt::Display for LockHolder {
    /// `pid 123 on host h, run abc…, since 2026-11-29T02:00:00Z`, leaving out what is unknown.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "pid {}", self.pid)?;
        if let Some(h) = &self.host {
            write!(f, " on host {h}")?;
        }
        if let Some(r) = &self.run_id {
            write!(f, ", run {r}")?;
        }
        if let Some(t) = self.started_at {
            write!(f, ", since {}", crate::guard::ledger::format_usec(t))?;
        }
        Ok(())
    }
}

/// Whether `path` still names the file `locked` refers to (same device and inode).
fn same_inode(locked: &Flock<File>, path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (locked.metadata(), std::fs::metadata(path)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

impl LockHolder {
    /// The record as stored in the lock file: one line of `key=value` fields separated by
    /// spaces, ending in a newline (`pid=… started_at=… host=… run_id=…`).
    fn to_line(&self) -> String {
        let clean = |s: &str| s.replace([' ', '\n', '='], "_");
        let mut line = format!("pid={}", self.pid);
        if let Some(t) = self.started_at {
            line.push_str(&format!(" started_at={t}"));
        }
        if let Some(h) = &self.host {
            line.push_str(&format!(" host={}", clean(h)));
        }
        if let Some(r) = &self.run_id {
            line.push_str(&format!(" run_id={}", clean(r)));
        }
        line.push('\n');
        line
    }

    /// Parses a record written by [`LockHolder::to_line`]. `None` for an empty, partly
    /// written or foreign record.
    fn parse(text: &str) -> Option<LockHolder> {
        let line = text.strip_suffix('\n')?;
        if line.contains('\n') {
            return None;
        }
        let mut holder = LockHolder {
            pid: 0,
            started_at: None,
            host: None,
            run_id: None,
        };
        for field in line.split(' ') {
            let (key, value) = field.split_once('=')?;
            match key {
                "pid" => holder.pid = value.parse().ok()?,
                "started_at" => holder.started_at = Some(value.parse().ok()?),
                "host" => holder.host = Some(value.to_string()),
                "run_id" => holder.run_id = Some(value.to_string()),
                _ => {}
            }
        }
        (holder.pid != 0).then_some(holder)
    }
}

/// Why the lock could not be tried. Contention is not an error: see [`LockAttempt`].
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// The job name cannot be a file name (empty, `.`/`..`, or contains `/` or NUL).
    #[error("job {job:?}: name cannot be used for a lock file")]
    BadName {
        /// The job name.
        job: String,
    },
    /// The lock directory could not be created.
    #[error("cannot create lock directory {}: {source}", path.display())]
    Directory {
        /// The directory.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// The lock file could not be opened or created.
    #[error("cannot open lock file {}: {source}", path.display())]
    Open {
        /// The lock file.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// `flock` failed for another reason than contention.
    #[error("cannot lock {}: {source}", path.display())]
    Lock {
        /// The lock file.
        path: PathBuf,
        /// The OS error.
        source: Errno,
    },
    /// The holder record could not be written.
    #[error("cannot write holder record to {}: {source}", path.display())]
    Record {
        /// The lock file.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
}

/// The result of [`JobLock::try_acquire`].
#[derive(Debug)]
pub enum LockAttempt {
    /// The lock is ours until the guard is dropped.
    Acquired(JobLock),
    /// Another process holds the lock.
    Busy {
        /// Its record, when it wrote one that is readable and its process still exists.
        holder: Option<LockHolder>,
    },
}

/// A held per-job lock. Dropping it (or the process ending in any way) releases it.
#[derive(Debug)]
pub struct JobLock {
    file: Flock<File>,
    path: PathBuf,
    holder: LockHolder,
    previous: Option<LockHolder>,
}

impl JobLock {
    /// Tries once, without waiting, to take the lock of `job` in `dir`.
    ///
    /// Creates `dir` (and its parents) with mode 0755 if missing, and the lock file
    /// `<dir>/<job>.lock` with mode 0600 (a job running as another user must not be able to
    /// open it and take the lock itself). The file is opened with `O_CLOEXEC` and
    /// `O_NOFOLLOW`, then locked with `flock(LOCK_EX | LOCK_NB)` (flock(2)). On success the
    /// holder record (this pid, now, the host name) is written into the file.
    ///
    /// # Errors
    /// [`LockError`] when the name is unusable or the directory, file or lock fail for a
    /// reason other than another holder; a held lock is `Ok(LockAttempt::Busy { .. })`.
    pub fn try_acquire(dir: &Path, job: &str) -> Result<LockAttempt, LockError> {
        if job.is_empty() || job == "." || job == ".." || job.contains(['/', '\0']) {
            return Err(LockError::BadName {
                job: job.to_string(),
            });
        }
        if !dir.is_dir() {
            DirBuilder::new()
                .recursive(true)
                .mode(0o755)
                .create(dir)
                .map_err(|source| LockError::Directory {
                    path: dir.to_path_buf(),
                    source,
                })?;
        }
        let path = dir.join(format!("{job}.lock"));
        // A lock on a file that was unlinked or replaced after we opened it (a temp-file
        // cleaner, an operator's rm) guards nothing: the next process locks the new file.
        // So after locking, check that the path still names the locked inode, else retry.
        let mut attempts = 0;
        let locked = loop {
            attempts += 1;
            let Some(locked) = Self::open_and_lock(&path)? else {
                let file = OpenOptions::new()
                    .read(true)
                    .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
                    .open(&path)
                    .ok();
                return Ok(LockAttempt::Busy {
                    holder: file.as_ref().and_then(read_record),
                });
            };
            if same_inode(&locked, &path) || attempts >= 5 {
                break locked;
            }
        };
        // The record the previous holder left. A run id in it means that holder did not
        // see its run to the end (it was killed): that run id is kept in this holder's
        // record until [`JobLock::clear_run_id`], so that it is not forgotten if this
        // holder dies too before it dealt with what the run left.
        let previous = {
            let file: &File = &locked;
            read_any_record(file)
        };
        let holder = LockHolder {
            pid: std::process::id(),
            started_at: Some(jiff::Timestamp::now().as_microsecond()),
            host: nix::unistd::gethostname()
                .ok()
                .map(|h| h.to_string_lossy().into_owned()),
            run_id: previous.as_ref().and_then(|p| p.run_id.clone()),
        };
        let mut lock = JobLock {
            file: locked,
            path,
            holder,
            previous,
        };
        lock.write_record()?;
        Ok(LockAttempt::Acquired(lock))
    }

    /// Opens `path` (creating it 0600) with `O_CLOEXEC | O_NOFOLLOW` and takes
    /// `flock(LOCK_EX | LOCK_NB)`; `None` when another holder has it.
    fn open_and_lock(path: &Path) -> Result<Option<Flock<File>>, LockError> {
        // std opens every file with O_CLOEXEC; it is named here as well because the lock
        // depends on it.
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
            .open(path)
            .map_err(|source| LockError::Open {
                path: path.to_path_buf(),
                source,
            })?;
        loop {
            match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
                Ok(locked) => return Ok(Some(locked)),
                Err((f, Errno::EINTR)) => file = f,
                Err((_, Errno::EWOULDBLOCK)) => return Ok(None),
                Err((_, source)) => {
                    return Err(LockError::Lock {
                        path: path.to_path_buf(),
                        source,
                    });
                }
            }
        }
    }

    /// Adds the run id to the holder record, once the run is known.
    ///
    /// # Errors
    /// [`LockError::Record`] if the file cannot be written (the lock stays held).
    pub fn set_run_id(&mut self, run_id: &str) -> Result<(), LockError> {
        self.holder.run_id = Some(run_id.to_string());
        self.write_record()
    }

    /// Marks the run in the holder record as seen to its end (or what an earlier holder's
    /// run left as dealt with): the record names no run.
    ///
    /// # Errors
    /// [`LockError::Record`] if the file cannot be written (the lock stays held).
    pub fn clear_run_id(&mut self) -> Result<(), LockError> {
        if self.holder.run_id.take().is_none() {
            return Ok(());
        }
        self.write_record()
    }

    /// The run an earlier holder of the lock did not see to its end (it was killed while
    /// its record named a run), if any: the run whose processes may still be running.
    pub fn unfinished_run(&self) -> Option<&str> {
        self.previous.as_ref()?.run_id.as_deref()
    }

    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The record this guard wrote.
    pub fn holder(&self) -> &LockHolder {
        &self.holder
    }

    fn write_record(&mut self) -> Result<(), LockError> {
        let line = self.holder.to_line();
        let file: &File = &self.file;
        file.set_len(0)
            .and_then(|()| file.write_all_at(line.as_bytes(), 0))
            .map_err(|source| LockError::Record {
                path: self.path.clone(),
                source,
            })
    }
}

/// Reads the holder record in a lock file, whoever wrote it.
fn read_any_record(file: &File) -> Option<LockHolder> {
    let mut buf = vec![0u8; 1024];
    let n = file.read_at(&mut buf, 0).ok()?;
    buf.truncate(n);
    LockHolder::parse(std::str::from_utf8(&buf).ok()?)
}

/// Reads the holder record of a lock file whose lock another process holds. A record whose
/// process no longer exists is the previous holder's (the new holder has not written yet)
/// and is not returned.
fn read_record(file: &File) -> Option<LockHolder> {
    let holder = read_any_record(file)?;
    let pid = nix::unistd::Pid::from_raw(i32::try_from(holder.pid).ok()?);
    match nix::sys::signal::kill(pid, None) {
        Ok(()) | Err(Errno::EPERM) => Some(holder),
        Err(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acquired(attempt: LockAttempt) -> JobLock {
        match attempt {
            LockAttempt::Acquired(lock) => lock,
            LockAttempt::Busy { holder } => panic!("busy, held by {holder:?}"),
        }
    }

    #[test]
    fn record_round_trip() {
        let h = LockHolder {
            pid: 42,
            started_at: Some(1_700_000_000_000_000),
            host: Some("web 1".into()),
            run_id: Some("0123abcd".into()),
        };
        let line = h.to_line();
        assert_eq!(
            line,
            "pid=42 started_at=1700000000000000 host=web_1 run_id=0123abcd\n"
        );
        let back = LockHolder::parse(&line).unwrap();
        assert_eq!(back.host.as_deref(), Some("web_1"));
        assert_eq!(back.run_id.as_deref(), Some("0123abcd"));
        assert_eq!(back.pid, 42);
    }

    #[test]
    fn partial_records_are_not_trusted() {
        assert_eq!(LockHolder::parse(""), None);
        assert_eq!(LockHolder::parse("pid=42 started_at=17"), None);
        assert_eq!(LockHolder::parse("pid=4x\n"), None);
        assert_eq!(LockHolder::parse("started_at=1\n"), None);
    }

    #[test]
    fn second_open_file_description_is_busy_and_names_us() {
        let dir = tempfile::tempdir().unwrap();
        let mut lock = acquired(JobLock::try_acquire(dir.path(), "a-job").unwrap());
        lock.set_run_id("feedface").unwrap();
        match JobLock::try_acquire(dir.path(), "a-job").unwrap() {
            LockAttempt::Busy { holder: Some(h) } => {
                assert_eq!(h.pid, std::process::id());
                assert_eq!(h.run_id.as_deref(), Some("feedface"));
            }
            other => panic!("expected busy with holder, got {other:?}"),
        }
        // Another job's lock is independent.
        acquired(JobLock::try_acquire(dir.path(), "other").unwrap());
        drop(lock);
        acquired(JobLock::try_acquire(dir.path(), "a-job").unwrap());
    }

    #[test]
    fn a_run_not_seen_to_its_end_is_passed_on_until_cleared() {
        let dir = tempfile::tempdir().unwrap();
        let mut first = acquired(JobLock::try_acquire(dir.path(), "j").unwrap());
        assert_eq!(first.unfinished_run(), None);
        first.set_run_id("cut").unwrap();
        // Dropped with the run id still in the record: as if the holder was killed.
        drop(first);
        let second = acquired(JobLock::try_acquire(dir.path(), "j").unwrap());
        assert_eq!(second.unfinished_run(), Some("cut"));
        // Until cleared, the run id stays in the record for the next holder.
        assert_eq!(second.holder().run_id.as_deref(), Some("cut"));
        drop(second);
        let mut third = acquired(JobLock::try_acquire(dir.path(), "j").unwrap());
        assert_eq!(third.unfinished_run(), Some("cut"));
        third.clear_run_id().unwrap();
        third.set_run_id("done").unwrap();
        third.clear_run_id().unwrap();
        drop(third);
        let fourth = acquired(JobLock::try_acquire(dir.path(), "j").unwrap());
        assert_eq!(fourth.unfinished_run(), None);
    }

    #[test]
    fn creates_directory_and_keeps_file() {
        let dir = tempfile::tempdir().unwrap();
        let sub = dir.path().join("run/jobguard/lock");
        let lock = acquired(JobLock::try_acquire(&sub, "j").unwrap());
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&sub).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode & 0o700, 0o700);
        assert_eq!(
            mode & 0o022,
            0,
            "lock directory is writable by others: {mode:o}"
        );
        let fmode = std::fs::metadata(lock.path()).unwrap().permissions().mode() & 0o777;
        assert_eq!(fmode, 0o600);
        let path = lock.path().to_path_buf();
        drop(lock);
        assert!(path.exists(), "lock file must not be unlinked");
    }

    #[test]
    fn bad_names_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["", ".", "..", "a/b", "a\0b"] {
            assert!(matches!(
                JobLock::try_acquire(dir.path(), name),
                Err(LockError::BadName { .. })
            ));
        }
    }

    #[test]
    fn symlinked_lock_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink("/etc/passwd", dir.path().join("j.lock")).unwrap();
        assert!(matches!(
            JobLock::try_acquire(dir.path(), "j"),
            Err(LockError::Open { .. })
        ));
    }
}

//! Per-job flock (placeholder until the real one lands).
use std::path::Path;

/// Who holds a lock.
#[derive(Debug, Clone)]
pub struct LockHolder {
    /// Holder's pid.
    pub pid: u32,
}
impl std::fmt::Display for LockHolder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "pid {}", self.pid)
    }
}
/// A held lock.
#[derive(Debug)]
pub struct JobLock {
    _file: std::fs::File,
}
impl JobLock {
    /// Tries to lock.
    pub fn try_acquire(dir: &Path, job: &str) -> Result<LockAttempt, LockError> {
        let f = std::fs::File::create(dir.join(format!("{job}.lock")))
            .map_err(|e| LockError(e.to_string()))?;
        Ok(LockAttempt::Acquired(JobLock { _file: f }))
    }
    /// Records the run id.
    pub fn set_run(&mut self, _run_id: &str) {}
}
/// Result of a try.
#[derive(Debug)]
pub enum LockAttempt {
    /// Got it.
    Acquired(JobLock),
    /// Someone else.
    Busy {
        /// Who.
        holder: Option<LockHolder>,
    },
}
/// Lock error.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct LockError(String);

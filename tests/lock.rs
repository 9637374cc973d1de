//! The per-job flock between real processes: a second process is turned away at once and
//! told who holds the lock; the lock dies with its holder, also when the holder leaves a
//! child behind.

#[path = "common/helper.rs"]
mod helper;

use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use jobguard::guard::lock::{JobLock, LockAttempt, LockHolder};

/// Guard against a hang in a helper; not a timing assertion.
const LIMIT: Duration = Duration::from_secs(60);

fn acquire(dir: &Path, job: &str) -> JobLock {
    match JobLock::try_acquire(dir, job).expect("try lock") {
        LockAttempt::Acquired(lock) => lock,
        LockAttempt::Busy { holder } => panic!("expected to acquire, held by {holder:?}"),
    }
}

fn busy_holder(dir: &Path, job: &str) -> Option<LockHolder> {
    match JobLock::try_acquire(dir, job).expect("try lock") {
        LockAttempt::Busy { holder } => holder,
        LockAttempt::Acquired(lock) => panic!("expected busy, acquired {}", lock.path().display()),
    }
}

fn alive(pid: i32) -> bool {
    kill(Pid::from_raw(pid), None).is_ok()
}

/// Starts a helper in `role` on the lock of `job` in `dir`; returns it and its first report.
fn start(
    role: &str,
    dir: &Path,
    job: &str,
) -> (Child, BufReader<std::process::ChildStdout>, String) {
    let mut child = helper::spawn(
        role,
        &[
            ("LOCK_DIR", dir.display().to_string()),
            ("JOB", job.to_string()),
        ],
    );
    let mut out = BufReader::new(child.stdout.take().expect("helper stdout"));
    let first = helper::next_report(&mut out).expect("helper report");
    (child, out, first)
}

fn kill_and_reap(child: &mut Child) {
    kill(
        Pid::from_raw(i32::try_from(child.id()).unwrap()),
        Signal::SIGKILL,
    )
    .unwrap();
    let status = helper::wait_or_kill(child, LIMIT, "killed holder");
    assert!(!status.success());
}

#[test]
fn second_process_is_busy_at_once_and_names_the_holder() {
    let dir = tempfile::tempdir().unwrap();
    let mut lock = acquire(dir.path(), "store-sync");
    lock.set_run_id("0123456789abcdef0123456789abcdef").unwrap();

    let (mut child, _out, report) = start("try", dir.path(), "store-sync");
    let status = helper::wait_or_kill(&mut child, LIMIT, "second instance");
    assert!(status.success());
    let host = nix::unistd::gethostname()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    assert_eq!(
        report,
        format!(
            "busy pid={} run_id=0123456789abcdef0123456789abcdef host={host} started={}",
            std::process::id(),
            lock.holder().started_at.unwrap()
        )
    );

    // Another job's lock is not affected.
    let (mut child, _out, report) = start("try", dir.path(), "other-job");
    helper::wait_or_kill(&mut child, LIMIT, "other job");
    assert_eq!(report, "acquired");
    drop(lock);
    let (mut child, _out, report) = start("try", dir.path(), "store-sync");
    helper::wait_or_kill(&mut child, LIMIT, "after release");
    assert_eq!(report, "acquired");
}

#[test]
fn lock_is_freed_when_the_holder_is_killed() {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, _out, report) = start("hold", dir.path(), "j");
    let _guard = helper::KillOnDrop(i32::try_from(child.id()).unwrap());
    assert_eq!(report, "holding");
    let holder = busy_holder(dir.path(), "j").expect("holder record");
    assert_eq!(holder.pid, child.id());
    assert_eq!(
        holder.run_id.as_deref(),
        Some("feedfacefeedfacefeedfacefeedface")
    );

    kill_and_reap(&mut child);
    let lock = acquire(dir.path(), "j");
    assert_eq!(lock.holder().pid, std::process::id());
    // The file is reused, never unlinked; the record is ours now.
    let text = std::fs::read_to_string(lock.path()).unwrap();
    assert!(
        text.starts_with(&format!("pid={} ", std::process::id())),
        "{text}"
    );
}

#[test]
fn lock_is_not_inherited_across_exec() {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, _out, report) = start("hold-and-spawn", dir.path(), "j");
    let _guard = helper::KillOnDrop(i32::try_from(child.id()).unwrap());
    let sleeper: i32 = report
        .strip_prefix("spawned ")
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("unexpected report {report}"));
    let _sleeper_guard = helper::KillOnDrop(sleeper);
    assert!(alive(sleeper));
    // The child process does not have the lock file open at all.
    let lock_path: PathBuf = dir.path().join("j.lock");
    let fds = std::fs::read_dir(format!("/proc/{sleeper}/fd")).unwrap();
    for fd in fds {
        let target = std::fs::read_link(fd.unwrap().path()).unwrap_or_default();
        assert_ne!(target, lock_path, "the child inherited the lock file");
    }
    assert_eq!(
        busy_holder(dir.path(), "j").map(|h| h.pid),
        Some(child.id())
    );

    kill_and_reap(&mut child);
    assert!(
        alive(sleeper),
        "the child must outlive the holder for this test"
    );
    acquire(dir.path(), "j");
}

/// Entry point of the helper processes (see `common::helper`); does nothing in a normal
/// test run.
#[test]
#[ignore = "helper process entry, started by other tests"]
fn helper_entry() {
    let Ok(role) = std::env::var(helper::ROLE_VAR) else {
        return;
    };
    let dir = PathBuf::from(std::env::var("LOCK_DIR").unwrap());
    let job = std::env::var("JOB").unwrap();
    match role.as_str() {
        "try" => match JobLock::try_acquire(&dir, &job).unwrap() {
            LockAttempt::Acquired(_) => helper::report("acquired"),
            LockAttempt::Busy { holder: None } => helper::report("busy unknown"),
            LockAttempt::Busy { holder: Some(h) } => helper::report(&format!(
                "busy pid={} run_id={} host={} started={}",
                h.pid,
                h.run_id.unwrap_or_default(),
                h.host.unwrap_or_default(),
                h.started_at.unwrap_or_default()
            )),
        },
        "hold" => {
            let mut lock = match JobLock::try_acquire(&dir, &job).unwrap() {
                LockAttempt::Acquired(lock) => lock,
                LockAttempt::Busy { .. } => panic!("helper could not take the lock"),
            };
            lock.set_run_id("feedfacefeedfacefeedfacefeedface").unwrap();
            helper::report("holding");
            linger();
        }
        "hold-and-spawn" => {
            let _lock = match JobLock::try_acquire(&dir, &job).unwrap() {
                LockAttempt::Acquired(lock) => lock,
                LockAttempt::Busy { .. } => panic!("helper could not take the lock"),
            };
            // As the shim starts a job: a plain fork + exec that keeps every inheritable fd.
            let mut child = std::process::Command::new("sleep")
                .arg("120")
                .stdout(std::process::Stdio::null())
                .spawn()
                .unwrap();
            helper::report(&format!("spawned {}", child.id()));
            // Holds the lock until the test kills this process (or the sleep ends).
            let _ = child.wait();
        }
        other => panic!("unknown helper role {other}"),
    }
}

/// Keeps a holder alive until the test kills it (bounded, in case the test died).
fn linger() {
    let until = Instant::now() + Duration::from_secs(120);
    while Instant::now() < until {
        std::thread::sleep(Duration::from_millis(100));
    }
}

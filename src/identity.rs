//! Who and where this process is: machine id, boot id, pid and the pid's start time.
//!
//! These make up the lease holder ([`crate::lease::Holder`]) and let `jobguard recover`
//! prove a holder gone: a record from another boot of this machine, or from a pid that
//! no longer runs the same process, belongs to a holder that is dead. They also find the
//! processes an attempt left behind when its shim died ([`leftovers`]).

use std::fs;

use crate::lease::Holder;

/// `/etc/machine-id`, trimmed; empty if unreadable.
pub fn machine_id() -> String {
    read_trimmed("/etc/machine-id")
}

/// The kernel's boot id (`/proc/sys/kernel/random/boot_id`) without dashes; empty if
/// unreadable.
pub fn boot_id() -> String {
    read_trimmed("/proc/sys/kernel/random/boot_id").replace('-', "")
}

/// When this host booted, µs since the epoch (`btime` of `/proc/stat`, proc(5), whole
/// seconds); 0 if unreadable.
pub fn boot_time_usec() -> i64 {
    fs::read_to_string("/proc/stat")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("btime "))
                .and_then(|v| v.trim().parse::<i64>().ok())
        })
        .map_or(0, |secs| secs.saturating_mul(1_000_000))
}

/// The host name, for display.
pub fn host_name() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_default()
}

/// Start time of process `pid` in clock ticks since boot (`/proc/PID/stat` field 22,
/// proc(5)); `None` if the process does not exist.
pub fn process_start(pid: u32) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may contain spaces and ')'.
    let after = &stat[stat.rfind(')')? + 1..];
    // After the name: field 3 (state) is index 0, so field 22 is index 19.
    after.split_whitespace().nth(19)?.parse().ok()
}

/// Whether the process `pid` that started at `start` (see [`process_start`]) still runs
/// on this boot.
pub fn process_alive(pid: u32, start: u64) -> bool {
    process_start(pid) == Some(start)
}

/// Ends what is left of a cut-off run on this host: every process whose environment
/// carries `JOBGUARD_RUN_ID=<run_id>` (the command's children and grandchildren that
/// outlived a killed shim; `PR_SET_PDEATHSIG` reaches only the command itself, and outside
/// systemd no cgroup ends the rest). Sends them SIGKILL and waits up to 5 s for them to
/// go. Returns true when none is left, false when some still run (or cannot be signalled,
/// e.g. another user's processes when not root).
///
/// The environment read is the one each process started with (`/proc/PID/environ`,
/// proc(5)), so a process that started with a cleaned environment is not found.
pub fn end_run_survivors(run_id: &str) -> bool {
    let needle = format!("JOBGUARD_RUN_ID={run_id}");
    let find = || -> Vec<i32> {
        let Ok(dir) = fs::read_dir("/proc") else {
            return Vec::new();
        };
        dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
            .filter(|pid| {
                fs::read(format!("/proc/{pid}/environ"))
                    .map(|env| env.split(|b| *b == 0).any(|v| v == needle.as_bytes()))
                    .unwrap_or(false)
            })
            .collect()
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let left = find();
        if left.is_empty() {
            return true;
        }
        if std::time::Instant::now() >= deadline {
            return false;
        }
        for pid in left {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// The variable that carries the shim's lease holder id ([`Holder::id`](crate::lease::Holder::id)) into the
/// environment of the command, and so of every process the command starts.
pub const HOLDER_VAR: &str = "JOBGUARD_HOLDER";

/// A process of an attempt at a job on this host whose shim is gone (see [`leftovers`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leftover {
    /// Process id.
    pub pid: i32,
    /// The attempt's `JOBGUARD_RUN_ID`.
    pub run_id: String,
    /// The holder its environment names ([`HOLDER_VAR`], as [`Holder::id`] writes it):
    /// a record is believed cut only when it names this very holder.
    pub holder: String,
}

/// The processes of earlier attempts at `job` on this machine and boot whose shim no
/// longer runs: every process of the user `uid` (the job's: its command runs as that
/// user) whose environment carries `JOBGUARD_JOB=<job>`, a `JOBGUARD_RUN_ID` and a
/// [`HOLDER_VAR`] naming this machine and boot and a shim process (pid and start time)
/// that is gone. A process whose shim still runs (another `jobguard` with its own runtime
/// directory, e.g. another user's) is not one, nor is another user's: any user may put
/// these variables in a process's environment.
///
/// The environment read is the one each process started with (`/proc/PID/environ`,
/// proc(5)): it survives `setsid`, double forks and a changed process group, but not a
/// process that started with a cleaned environment (`env -i`), nor one this user may not
/// read (another user's, when not root).
pub fn leftovers(job: &str, uid: u32) -> Vec<Leftover> {
    use std::os::unix::fs::MetadataExt;
    let me = std::process::id();
    let (machine, boot) = (machine_id(), boot_id());
    let Ok(dir) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        if pid == me {
            continue;
        }
        // /proc/PID belongs to the process's effective user (proc(5)).
        if entry.metadata().map(|m| m.uid()).ok() != Some(uid) {
            continue;
        }
        let Ok(env) = fs::read(format!("/proc/{pid}/environ")) else {
            continue;
        };
        let var = |name: &str| {
            env.split(|b| *b == 0).find_map(|v| {
                let v = v.strip_prefix(name.as_bytes())?.strip_prefix(b"=")?;
                std::str::from_utf8(v).ok().map(str::to_string)
            })
        };
        if var("JOBGUARD_JOB").as_deref() != Some(job) {
            continue;
        }
        let (Some(run_id), Some(holder)) = (var("JOBGUARD_RUN_ID"), var(HOLDER_VAR)) else {
            continue;
        };
        // machine_id:boot_id:pid:pid_start, as Holder::id writes it.
        let parts: Vec<&str> = holder.split(':').collect();
        let [m, b, shim, start] = parts[..] else {
            continue;
        };
        let (Ok(shim), Ok(start)) = (shim.parse::<u32>(), start.parse::<u64>()) else {
            continue;
        };
        if m != machine || b != boot || process_alive(shim, start) {
            continue;
        }
        if let Ok(pid) = i32::try_from(pid) {
            found.push(Leftover {
                pid,
                run_id,
                holder,
            });
        }
    }
    found
}

/// Ends `procs` (see [`leftovers`]): SIGTERM, up to `grace` for them to go, then SIGKILL
/// and up to 5 s more. Returns the pids still running after that (none, unless they may
/// not be signalled or hang in the kernel). A pid is only signalled while it still
/// carries the same `JOBGUARD_RUN_ID`, so a reused pid is left alone.
pub fn end_leftovers(procs: &[Leftover], grace: std::time::Duration) -> Vec<i32> {
    use nix::sys::signal::{Signal, kill};
    use std::time::{Duration, Instant};
    let still = |p: &Leftover| {
        let needle = format!("JOBGUARD_RUN_ID={}", p.run_id);
        fs::read(format!("/proc/{}/environ", p.pid))
            .map(|env| env.split(|b| *b == 0).any(|v| v == needle.as_bytes()))
            .unwrap_or(false)
    };
    let signal = |sig: Signal| {
        for p in procs.iter().filter(|p| still(p)) {
            let _ = kill(nix::unistd::Pid::from_raw(p.pid), sig);
        }
    };
    let wait = |until: Instant| loop {
        let left: Vec<i32> = procs.iter().filter(|p| still(p)).map(|p| p.pid).collect();
        if left.is_empty() || Instant::now() >= until {
            return left;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    signal(Signal::SIGTERM);
    if wait(Instant::now() + grace).is_empty() {
        return Vec::new();
    }
    signal(Signal::SIGKILL);
    wait(Instant::now() + Duration::from_secs(5))
}

/// The identity of this process as a lease holder.
pub fn current_holder() -> Holder {
    let pid = std::process::id();
    Holder {
        machine_id: machine_id(),
        boot_id: boot_id(),
        pid,
        pid_start: process_start(pid).unwrap_or(0),
        host: host_name(),
    }
}

fn read_trimmed(path: &str) -> String {
    fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// A new run id: 32 lower-case hex digits from the kernel's random source.
pub fn new_run_id() -> String {
    // /proc/sys/kernel/random/uuid gives a fresh random UUID on every read.
    let uuid = read_trimmed("/proc/sys/kernel/random/uuid").replace('-', "");
    if uuid.len() == 32 {
        return uuid;
    }
    let now = jiff::Timestamp::now().as_nanosecond();
    format!(
        "{:016x}{:08x}{:08x}",
        now as u64,
        std::process::id(),
        now.rotate_left(17) as u32
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_process_is_alive_and_a_changed_start_is_not() {
        let pid = std::process::id();
        let start = process_start(pid).expect("own /proc/PID/stat");
        assert!(process_alive(pid, start));
        assert!(!process_alive(pid, start + 1));
    }

    #[test]
    fn run_ids_are_32_hex_digits_and_differ() {
        let a = new_run_id();
        let b = new_run_id();
        assert_eq!(a.len(), 32);
        assert!(a.chars().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }

    #[test]
    fn holder_has_machine_and_boot() {
        let h = current_holder();
        assert_eq!(h.boot_id.len(), 32);
        assert!(h.id().contains(&h.boot_id));
    }
}

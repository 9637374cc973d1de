//! Who and where this process is: machine id, boot id, pid and the pid's start time.
//!
//! These make up the lease holder ([`crate::lease::Holder`]) and let `jobguard recover`
//! prove a holder gone: a record from another boot of this machine, or from a pid that
//! no longer runs the same process, belongs to a holder that is dead.

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

//! The container harness itself (`tests/common/container.rs`): a real systemd boots as
//! PID 1, survives a power cut and a clean poweroff with its disk, and leaves nothing
//! behind when a test panics.
//!
//! Needs root and systemd-nspawn; skipped with a `SKIPPED` line otherwise, failed in CI.
//! Run just the container tests (each boots in 1-3 s; they run in parallel):
//!
//! ```sh
//! cargo test --test systemd_container --test systemd_single_host
//! ```

mod common;

use std::path::PathBuf;
use std::time::Duration;

use common::container::{self, Container, Options};

fn can_boot(test: &str) -> bool {
    common::go_on(test, container::prerequisites())
}

#[test]
fn boots_systemd_and_keeps_its_disk_across_a_power_cut() {
    if !can_boot("boots_systemd_and_keeps_its_disk_across_a_power_cut") {
        return;
    }
    let mut c = Container::boot("power-cut", &Options::new()).expect("boot");

    assert_eq!(
        c.exec_ok(&["cat", "/proc/1/comm"]).expect("comm").trim(),
        "systemd"
    );
    let state = c
        .exec(&["systemctl", "is-system-running"])
        .expect("is-system-running");
    let state = String::from_utf8_lossy(&state.stdout).trim().to_string();
    assert!(
        state == "running" || state == "degraded",
        "is-system-running: {state}"
    );
    assert_eq!(c.exec_ok(&["hostname"]).expect("hostname").trim(), c.name());

    let calendar = c
        .exec_ok(&["systemd-analyze", "calendar", "daily"])
        .expect("calendar");
    assert!(
        calendar.contains("Normalized form: *-*-* 00:00:00"),
        "{calendar}"
    );

    // /dev/kmsg inside is the harness's FIFO.
    c.sh_ok("echo '<4>harness-probe: hello kmsg' > /dev/kmsg")
        .expect("write kmsg");
    common::wait_for(
        "the kmsg line",
        Duration::from_secs(10),
        Duration::from_millis(50),
        || Ok(c.kmsg().contains("harness-probe: hello kmsg").then_some(())),
    )
    .expect("kmsg");

    let first_boot = c.boot_id().expect("boot id");
    c.write_file("/var/lib/harness/marker", &first_boot)
        .expect("write marker");
    // Only what reached the disk may be expected after a power cut.
    c.exec_ok(&["sync"]).expect("sync");

    c.power_cut().expect("power cut");
    assert!(!c.is_running());
    c.boot_again().expect("boot again");

    let second_boot = c.boot_id().expect("boot id");
    assert_ne!(
        first_boot, second_boot,
        "a new boot must have a new boot id"
    );
    let marker = c
        .exec_ok(&["cat", "/var/lib/harness/marker"])
        .expect("marker survives");
    assert_eq!(marker, first_boot);
    let boots = c
        .exec_ok(&["journalctl", "--list-boots", "--no-pager"])
        .expect("boots");
    for id in [&first_boot, &second_boot] {
        assert!(
            boots.contains(&id.replace('-', "")),
            "the journal keeps both boots:\n{boots}"
        );
    }
}

#[test]
fn clean_poweroff_and_boot_again() {
    if !can_boot("clean_poweroff_and_boot_again") {
        return;
    }
    let opts = Options::new().file("/etc/harness/installed", "before boot\n");
    let mut c = Container::boot("poweroff", &opts).expect("boot");
    assert_eq!(
        c.exec_ok(&["cat", "/etc/harness/installed"])
            .expect("installed file"),
        "before boot\n"
    );
    let first_boot = c.boot_id().expect("boot id");
    c.write_file("/var/lib/harness/written", "first boot\n")
        .expect("write");

    c.poweroff().expect("poweroff");
    assert!(!c.is_running());
    // Down, its disk can be read from the host.
    let written =
        std::fs::read_to_string(c.upper().join("var/lib/harness/written")).expect("upper");
    assert_eq!(written, "first boot\n");
    assert!(
        c.console_log().contains("Powering off"),
        "{}",
        c.console_log()
    );

    c.boot_again().expect("boot again");
    assert_ne!(c.boot_id().expect("boot id"), first_boot);
    assert_eq!(
        c.exec_ok(&["cat", "/var/lib/harness/written"])
            .expect("written"),
        "first boot\n"
    );
    let previous = c
        .exec_ok(&["journalctl", "-b", "-1", "--no-pager", "-o", "cat"])
        .expect("journal -b -1");
    assert!(
        previous.contains("System Power Off"),
        "the previous boot ended in a poweroff:\n{previous}"
    );
}

#[test]
fn drop_removes_the_container_even_when_the_test_panics() {
    if !can_boot("drop_removes_the_container_even_when_the_test_panics") {
        return;
    }
    let seen: std::sync::Mutex<Option<(PathBuf, u32, i32)>> = std::sync::Mutex::new(None);
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let c = Container::boot("drop", &Options::new()).expect("boot");
        let (nspawn, leader) = c.pids().expect("pids");
        *seen.lock().expect("lock") = Some((c.dir().expect("dir").to_path_buf(), nspawn, leader));
        panic!("a failing test");
    }));
    assert!(result.is_err());
    let (dir, nspawn, leader) = seen
        .lock()
        .expect("lock")
        .take()
        .expect("booted before the panic");
    assert!(!dir.exists(), "{} is still there", dir.display());
    for pid in [i64::from(nspawn), i64::from(leader)] {
        let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let zombie_or_gone = state.is_empty()
            || state
                .rsplit(')')
                .next()
                .is_some_and(|s| s.trim_start().starts_with('Z'));
        assert!(zombie_or_gone, "process {pid} still runs: {state}");
    }
}

#[test]
fn a_boot_that_hangs_names_the_waiting_jobs() {
    if !can_boot("a_boot_that_hangs_names_the_waiting_jobs") {
        return;
    }
    let unit = "[Unit]\nDescription=never finishes starting\n\
                [Service]\nType=oneshot\nExecStart=/bin/sleep infinity\n";
    let opts = Options::new()
        .file("/etc/systemd/system/harness-hang.service", unit)
        .symlink(
            "/etc/systemd/system/multi-user.target.wants/harness-hang.service",
            "/etc/systemd/system/harness-hang.service",
        )
        .boot_timeout(Duration::from_secs(5));
    let err = match Container::boot("hang", &opts) {
        Ok(_) => panic!("the boot should not finish"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("boot failed: not up after"), "{err}");
    assert!(
        err.contains("harness-hang.service"),
        "list-jobs names the unit:\n{err}"
    );
}

/// Two hosts do not share a unit's cgroup, as two real machines do not. On a machine whose
/// PID 1 is not systemd, `systemd-nspawn --keep-unit` puts every container's tree under
/// its own cgroup, which was the root for all of them: a unit of one name on two hosts
/// then had one cgroup directory, and one host's systemd removing it when its run ended
/// made the other's start fail with `status=219/CGROUP` ("Failed to attach to cgroup
/// …: No such file or directory"), which lost slots in the soak on every host at once.
#[test]
fn two_hosts_do_not_share_a_units_cgroup() {
    let test = "two_hosts_do_not_share_a_units_cgroup";
    if !can_boot(test) {
        return;
    }
    let a = Container::boot("cg-a", &Options::new()).expect("boot a");
    let b = Container::boot("cg-b", &Options::new()).expect("boot b");
    a.exec_ok(&[
        "systemd-run",
        "--unit=jg-cgroup-probe",
        "--service-type=exec",
        "sleep",
        "120",
    ])
    .expect("a unit on host a");
    let cgroup = a
        .exec_ok(&[
            "systemctl",
            "show",
            "-p",
            "ControlGroup",
            "--value",
            "jg-cgroup-probe.service",
        ])
        .expect("its cgroup");
    assert!(cgroup.contains("jg-cgroup-probe.service"), "{cgroup}");
    // Every cgroup hierarchy host b sees: none may hold host a's unit.
    let seen = b
        .sh_ok("find /sys/fs/cgroup -type d -name jg-cgroup-probe.service 2>/dev/null; true")
        .expect("look on host b");
    assert_eq!(
        seen.trim(),
        "",
        "host b sees host a's unit cgroup {}: a stop on one host would remove the other's",
        cgroup.trim()
    );
}

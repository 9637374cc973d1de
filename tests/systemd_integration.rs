//! jobguard speaking systemd's language (issue 5), under a real systemd in a throwaway
//! container (`tests/common/container.rs`): logind inhibitor locks while a command runs,
//! a shutdown during a run recorded as `interrupted` (reason `shutdown`) and re-run after
//! the next boot, `STATUS=` lines in `systemctl status`, the journal catalog shown by
//! `journalctl -x`, and `jobguard status --json` agreeing with systemd's timers.
//!
//! Installed as in tests/systemd_single_host.rs: binaries in /usr/local/bin, the
//! generator in /etc/systemd/system-generators/, units/ in /usr/lib/systemd/system/, the
//! job list in /etc/jobguard/jobs.toml, plus the catalog in /usr/lib/systemd/catalog/.
//!
//! Needs root and systemd-nspawn (skipped with a `SKIPPED` line otherwise, failed in CI).
//!
//! ```sh
//! cargo test --test systemd_integration
//! ```

mod common;
mod support;

use std::process::Output;
use std::time::Duration;

use common::container::{self, Container, Options};
use serde_json::Value;

const JOBGUARD: &str = env!("CARGO_BIN_EXE_jobguard");
const GENERATOR: &str = env!("CARGO_BIN_EXE_jobguard-generator");
const UNITS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/units");
const CATALOG: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/packaging/catalog/jobguard.catalog"
);

fn ready(test: &str) -> bool {
    common::go_on(test, container::prerequisites())
}

/// A job whose command records its open descriptors, then waits until the test creates
/// /run/NAME.release (or, on a later boot, finishes at once: /var/lib/NAME.first is
/// there). Yearly UTC schedule: the slot cannot change while the test runs.
fn waiting_job(name: &str, extra: &str) -> String {
    format!(
        "[jobs.{name}]\n\
         schedule = \"*-01-01 00:00:00 UTC\"\n\
         {extra}\n\
         command = ['/bin/sh', '-c', 'if [ -e /var/lib/{name}.first ]; then exit 0; fi; \
         echo output of {name}; \
         ls -l /proc/$$/fd > /var/lib/{name}.fds; touch /var/lib/{name}.first; \
         while [ ! -e /run/{name}.release ]; do sleep 0.1; done']\n"
    )
}

fn options(jobs_toml: &str) -> Options {
    let mut opts = Options::new()
        .copy(JOBGUARD, "/usr/local/bin/jobguard")
        .copy(GENERATOR, "/usr/local/bin/jobguard-generator")
        .symlink(
            "/etc/systemd/system-generators/jobguard-generator",
            "/usr/local/bin/jobguard-generator",
        )
        .copy(CATALOG, "/usr/lib/systemd/catalog/jobguard.catalog")
        .file("/etc/jobguard/jobs.toml", jobs_toml);
    let mut units: Vec<_> = std::fs::read_dir(UNITS)
        .expect("units/")
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.extension()
                .is_some_and(|x| x == "service" || x == "timer")
        })
        .collect();
    units.sort();
    for p in units {
        let name = p
            .file_name()
            .expect("file name")
            .to_string_lossy()
            .into_owned();
        opts = opts.copy(&p, &format!("/usr/lib/systemd/system/{name}"));
    }
    opts
}

fn boot(tag: &str, jobs_toml: &str) -> Container {
    let c = Container::boot(tag, &options(jobs_toml)).expect("boot");
    c.exec_ok(&["systemctl", "enable", "jobguard-recover.service"])
        .expect("enable jobguard-recover.service");
    c
}

fn text(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn prop(c: &Container, unit: &str, name: &str) -> String {
    let out = c
        .exec_ok(&["systemctl", "show", unit, "-p", name, "--value"])
        .expect("systemctl show");
    out.trim().to_string()
}

fn start_and_wait_running(c: &Container, name: &str) {
    c.exec_ok(&[
        "systemctl",
        "start",
        "--no-block",
        &format!("jobguard@{name}.service"),
    ])
    .expect("start");
    let fds = format!("/var/lib/{name}.fds");
    common::wait_for(
        "the command to run",
        Duration::from_secs(60),
        Duration::from_millis(100),
        || {
            Ok(c.exec(&["test", "-s", &fds])
                .ok()
                .filter(|o| o.status.success()))
        },
    )
    .expect("the command runs");
}

fn wait_inactive(c: &Container, unit: &str) -> String {
    common::wait_for(
        &format!("{unit} to end"),
        Duration::from_secs(60),
        Duration::from_millis(200),
        || {
            let state = prop(c, unit, "ActiveState");
            Ok((state == "inactive" || state == "failed").then(|| prop(c, unit, "Result")))
        },
    )
    .expect("unit ended")
}

fn inhibitors(c: &Container) -> String {
    let out = c
        .exec(&["systemd-inhibit", "--list", "--no-pager", "--no-legend"])
        .expect("systemd-inhibit --list");
    text(&out)
}

fn history(c: &Container, job: &str) -> Vec<Value> {
    let out = c
        .exec_ok(&["jobguard", "history", job, "--json", "--limit", "1000000"])
        .expect("jobguard history");
    match serde_json::from_str(&out) {
        Ok(Value::Array(rows)) => rows,
        other => panic!("jobguard history --json: {other:?}: {out}"),
    }
}

fn s(v: &Value, key: &str) -> String {
    match v.get(key) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Null) | None => String::new(),
        Some(v) => v.to_string(),
    }
}

/// The `Status: "..."` line of `systemctl status UNIT`, if any.
fn status_line(c: &Container, unit: &str) -> Option<String> {
    let out = c
        .exec(&["systemctl", "status", "--no-pager", "--lines=0", unit])
        .expect("systemctl status");
    text(&out)
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with("Status: "))
        .map(str::to_string)
}

#[test]
fn a_run_holds_an_inhibitor_shows_its_status_and_the_catalog_explains_its_events() {
    if !ready("a_run_holds_an_inhibitor_shows_its_status_and_the_catalog_explains_its_events") {
        return;
    }
    let c = boot("sd5-inhibit", &waiting_job("hold-it", ""));
    start_and_wait_running(&c, "hold-it");

    // The lock names the job and the slot; the command did not inherit its descriptor.
    let list = inhibitors(&c);
    let line = list
        .lines()
        .find(|l| l.contains("jobguard hold-it"))
        .unwrap_or_else(|| panic!("no jobguard lock in systemd-inhibit --list:\n{list}"));
    eprintln!("systemd-inhibit --list: {line}");
    assert!(line.contains("running slot 20"), "{line}");
    assert!(line.contains("-01-01T00:00:00Z"), "{line}");
    assert!(line.contains("shutdown:sleep"), "{line}");
    assert!(line.contains("delay"), "{line}");
    let fds = c.exec_ok(&["cat", "/var/lib/hold-it.fds"]).expect("fds");
    assert!(
        !fds.contains("/run/systemd/inhibit/"),
        "the command inherited the inhibitor lock:\n{fds}"
    );
    // Nothing else of the shim's either (D-Bus sockets, the watch pipe): every open
    // descriptor is stdin, stdout, stderr or a copy the shell made of one of them.
    let targets: Vec<(&str, &str)> = fds
        .lines()
        .filter_map(|l| {
            let (left, target) = l.split_once(" -> ")?;
            Some((left.split_whitespace().last()?, target))
        })
        .collect();
    let std_targets: Vec<&str> = targets
        .iter()
        .filter(|(n, _)| ["0", "1", "2"].contains(n))
        .map(|(_, t)| *t)
        .collect();
    assert_eq!(std_targets.len(), 3, "{fds}");
    assert!(
        targets.iter().all(|(_, t)| std_targets.contains(t)),
        "the command inherited a descriptor of the shim:\n{fds}"
    );

    // systemctl status shows the running run's STATUS.
    let running = status_line(&c, "jobguard@hold-it.service").expect("a Status: line");
    eprintln!("running: {running}");
    assert!(
        running.contains("running slot") && running.contains("lease held by host"),
        "{running}"
    );

    c.exec_ok(&["touch", "/run/hold-it.release"])
        .expect("release");
    assert_eq!(wait_inactive(&c, "jobguard@hold-it.service"), "success");
    let after = inhibitors(&c);
    assert!(
        !after.contains("jobguard hold-it"),
        "the lock outlived the run:\n{after}"
    );

    // The job's own output is in the journal under the job's name with a `jobguard-`
    // prefix (a job named after its command, `curl`, must not log as curl does), apart from
    // jobguard's events (issue 12).
    let journal = |id: &str| {
        c.exec_ok(&["journalctl", "--no-pager", "-o", "cat", "-t", id])
            .unwrap_or_default()
    };
    assert!(
        support::wait_until(10, || journal("jobguard-hold-it")
            .contains("output of hold-it")),
        "journalctl -t jobguard-hold-it:\n{}",
        journal("jobguard-hold-it")
    );
    let bare = journal("hold-it");
    assert!(
        !bare.contains("output of hold-it"),
        "the bare job name is an identifier:\n{bare}"
    );
    let events = journal("jobguard");
    assert!(
        events.contains("finished slot") && !events.contains("output of hold-it"),
        "journalctl -t jobguard:\n{events}"
    );
    // Each event's text names the job: syslog and log shippers keep MESSAGE, not the
    // JOBGUARD_JOB field.
    let finished = events
        .lines()
        .find(|l| l.contains("finished slot"))
        .unwrap_or_default();
    assert!(
        finished.starts_with("hold-it: "),
        "the message names the job: {finished:?}"
    );

    // A start for the same slot is a skip, and says so in systemctl status.
    c.exec_ok(&["systemctl", "start", "jobguard@hold-it.service"])
        .expect("start again");
    // `systemctl start` returns once the shim is exec'd (Type=exec): wait for it to end.
    assert_eq!(wait_inactive(&c, "jobguard@hold-it.service"), "success");
    let skipped = status_line(&c, "jobguard@hold-it.service").unwrap_or_default();
    eprintln!("skipped: {skipped}");
    assert!(
        skipped.contains("skipped: slot") && skipped.contains("already succeeded"),
        "systemctl status after a skip: {skipped:?}"
    );

    // The catalog explains the finish and the skip.
    c.exec_ok(&["journalctl", "--update-catalog"])
        .expect("journalctl --update-catalog");
    let finished = c
        .exec_ok(&[
            "journalctl",
            "-x",
            "--no-pager",
            "MESSAGE_ID=9fb9749e319e40488204b6f156681d66",
        ])
        .expect("journalctl -x");
    eprintln!("journalctl -x:\n{finished}");
    assert!(
        finished.contains("Subject: jobguard job hold-it finished slot ")
            && finished.contains("Defined-By: jobguard")
            && finished.contains("Nothing needs to be done."),
        "{finished}"
    );
    let skip = c
        .exec_ok(&[
            "journalctl",
            "-x",
            "--no-pager",
            "MESSAGE_ID=b080f0ce94bd4a5e9cc86070a2ed8d3c",
        ])
        .expect("journalctl -x");
    assert!(
        skip.contains("jobguard run hold-it --slot ") && skip.contains("--force"),
        "{skip}"
    );

    // jobguard status --json reports the timer as systemd has it.
    let out = c
        .exec_ok(&["jobguard", "status", "--json"])
        .expect("jobguard status");
    let status: Value = serde_json::from_str(&out).expect("status JSON");
    eprintln!(
        "jobguard status:\n{}",
        c.exec_ok(&["jobguard", "status"]).unwrap_or_default()
    );
    let job = &status["jobs"][0];
    let timer = &job["systemd"]["timer"];
    let raw = c
        .exec_ok(&[
            "busctl",
            "get-property",
            "org.freedesktop.systemd1",
            "/org/freedesktop/systemd1/unit/jobguard_40hold_2dit_2etimer",
            "org.freedesktop.systemd1.Timer",
            "NextElapseUSecRealtime",
        ])
        .expect("busctl");
    assert_eq!(
        format!("t {}", timer["next_elapse_usec"]),
        raw.trim(),
        "{job}"
    );
    let shown = prop(&c, "jobguard@hold-it.timer", "NextElapseUSecRealtime");
    let shown_utc = c
        .exec_ok(&[
            "env",
            "TZ=UTC",
            "systemctl",
            "show",
            "jobguard@hold-it.timer",
            "-p",
            "NextElapseUSecRealtime",
            "--value",
        ])
        .expect("systemctl show");
    let rfc = s(timer, "next_elapse");
    // `systemctl show` prints e.g. "Fri 2027-01-01 00:00:00 UTC".
    let want = rfc.replace('T', " ").replace('Z', " UTC");
    assert!(
        shown_utc.trim().ends_with(&want),
        "{shown:?} {shown_utc:?} vs {rfc}"
    );
    assert_eq!(s(job, "next_elapse"), rfc, "{job}");
    assert_eq!(s(&job["systemd"]["service"], "active_state"), "inactive");
    assert_eq!(status["systemd"]["read"], Value::Bool(true), "{status}");
}

/// `jobguard rerun --wait` under systemd: the re-run runs as the job's own unit, and the
/// command returns once it has ended, with its outcome as its exit status: the failing
/// command's own status (3), then 0 once the command succeeds. The ledger holds both
/// re-runs, forced, in that order.
#[test]
fn rerun_wait_returns_the_reruns_outcome() {
    if !ready("rerun_wait_returns_the_reruns_outcome") {
        return;
    }
    let c = boot(
        "rerunwait",
        "[jobs.flaky]\nschedule = \"*-01-01 00:00:00 UTC\"\n\
         command = ['/bin/sh', '-c', 'test -e /run/flaky.ok || exit 3']\n",
    );
    let rerun = || {
        c.exec(&["jobguard", "rerun", "--wait", "flaky"])
            .expect("jobguard rerun")
    };
    let out = rerun();
    let said = format!("{}{}", text(&out), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(3), "{said}");
    assert!(said.contains("failed"), "{said}");
    c.exec_ok(&["touch", "/run/flaky.ok"]).expect("touch");
    let out = rerun();
    let said = format!("{}{}", text(&out), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{said}");
    assert!(said.contains("succeeded"), "{said}");
    let runs = history(&c, "flaky");
    let outcomes: Vec<(String, String)> = runs
        .iter()
        .map(|r| (s(r, "outcome"), s(r, "trigger")))
        .collect();
    assert_eq!(
        outcomes,
        [("succeeded", "rerun"), ("failed", "rerun")].map(|(o, t)| (o.to_string(), t.to_string())),
        "{runs:?}"
    );
}

#[test]
fn a_block_inhibitor_refuses_a_reboot_that_checks_inhibitors() {
    if !ready("a_block_inhibitor_refuses_a_reboot_that_checks_inhibitors") {
        return;
    }
    let mut c = boot("sd5-block", &waiting_job("blk", "inhibit = \"block\""));
    start_and_wait_running(&c, "blk");
    let list = inhibitors(&c);
    assert!(
        list.lines()
            .any(|l| l.contains("jobguard blk") && l.contains("block")),
        "{list}"
    );
    let out = c
        .exec(&["systemctl", "reboot", "--check-inhibitors=yes"])
        .expect("systemctl reboot");
    let said = format!("{}{}", text(&out), String::from_utf8_lossy(&out.stderr));
    eprintln!("systemctl reboot --check-inhibitors=yes: {said}");
    assert!(!out.status.success(), "the reboot was not refused: {said}");
    assert!(
        said.contains("jobguard blk"),
        "the refusal names the job: {said}"
    );
    assert!(c.is_running(), "the container went down");
    c.exec_ok(&["touch", "/run/blk.release"]).expect("release");
    assert_eq!(wait_inactive(&c, "jobguard@blk.service"), "success");
}

#[test]
fn a_poweroff_during_a_run_is_recorded_as_shutdown_and_rerun_after_boot() {
    if !ready("a_poweroff_during_a_run_is_recorded_as_shutdown_and_rerun_after_boot") {
        return;
    }
    let mut c = boot("sd5-poweroff", &waiting_job("cut", ""));
    start_and_wait_running(&c, "cut");
    c.poweroff().expect("poweroff");
    c.boot_again().expect("boot again");

    let rows = common::wait_for(
        "the re-run after boot",
        Duration::from_secs(90),
        Duration::from_millis(300),
        || {
            let rows = history(&c, "cut");
            Ok(rows
                .iter()
                .any(|r| s(r, "outcome") == "succeeded")
                .then_some(rows))
        },
    )
    .expect("the slot was re-run");
    let cut: Vec<&Value> = rows
        .iter()
        .filter(|r| s(r, "outcome") == "interrupted")
        .collect();
    assert_eq!(cut.len(), 1, "{rows:#?}");
    assert_eq!(s(cut[0], "reason"), "shutdown", "{rows:#?}");
    assert_eq!(s(cut[0], "resolution"), "rerun", "{rows:#?}");
    let done: Vec<&Value> = rows
        .iter()
        .filter(|r| s(r, "outcome") == "succeeded")
        .collect();
    assert_eq!(done.len(), 1, "{rows:#?}");
    assert_eq!(s(done[0], "slot"), s(cut[0], "slot"));
    assert_eq!(rows.len(), 2, "{rows:#?}");

    // The shim heard logind's PrepareForShutdown on the first boot (not only the SIGTERM).
    let first_boot = c
        .exec_ok(&[
            "journalctl",
            "-b",
            "-1",
            "--no-pager",
            "-o",
            "cat",
            "-u",
            "jobguard@cut.service",
        ])
        .expect("journal of the first boot");
    assert!(
        first_boot.contains("logind PrepareForShutdown"),
        "{first_boot}"
    );
}

/// Every kind of event, by an exhaustive match: adding a kind without a catalog entry
/// stops this file from compiling.
fn all_kinds() -> Vec<jobguard::systemd::journal::Kind> {
    use jobguard::systemd::journal::Kind;
    let all = [
        Kind::Started,
        Kind::SkippedSlotDone,
        Kind::SkippedSlotHeld,
        Kind::SkippedLockHeld,
        Kind::SkippedLeaseHeld,
        Kind::SkippedOutOfOrder,
        Kind::SkippedScheduleDiffers,
        Kind::SkippedStoreUnavailable,
        Kind::SkippedPaused,
        Kind::Finished,
        Kind::Failed,
        Kind::Interrupted,
        Kind::LeaseLost,
        Kind::Recovered,
        Kind::GapDetected,
        Kind::ClockSkew,
        Kind::Missed,
        Kind::MetricsNotWritten,
        Kind::MachineIdShared,
    ];
    for k in all {
        match k {
            Kind::Started
            | Kind::SkippedSlotDone
            | Kind::SkippedSlotHeld
            | Kind::SkippedLockHeld
            | Kind::SkippedLeaseHeld
            | Kind::SkippedOutOfOrder
            | Kind::SkippedScheduleDiffers
            | Kind::SkippedStoreUnavailable
            | Kind::SkippedPaused
            | Kind::Finished
            | Kind::Failed
            | Kind::Interrupted
            | Kind::LeaseLost
            | Kind::Recovered
            | Kind::GapDetected
            | Kind::ClockSkew
            | Kind::Missed
            | Kind::MetricsNotWritten
            | Kind::MachineIdShared => {}
        }
    }
    all.to_vec()
}

/// The catalog compiles with journalctl (in a scratch root, no systemd needed) and has
/// exactly one entry per MESSAGE_ID, each with a subject, `Defined-By: jobguard` and text.
#[test]
fn the_catalog_has_one_entry_per_event_kind_and_journalctl_reads_it() {
    let root = tempfile::tempdir().expect("tempdir");
    let dir = root.path().join("usr/lib/systemd/catalog");
    std::fs::create_dir_all(&dir).expect("mkdir");
    std::fs::copy(CATALOG, dir.join("jobguard.catalog")).expect("copy");
    let root_arg = format!("--root={}", root.path().display());
    let run = |args: &[&str]| {
        std::process::Command::new("journalctl")
            .arg(&root_arg)
            .args(args)
            .output()
    };
    let Ok(out) = run(&["--update-catalog"]) else {
        common::go_on(
            "the_catalog_has_one_entry_per_event_kind_and_journalctl_reads_it",
            Some("journalctl not found".into()),
        );
        return;
    };
    assert!(out.status.success(), "{out:?}");
    let listed = text(&run(&["--list-catalog", "--no-pager"]).expect("list"));
    let catalog = std::fs::read_to_string(CATALOG).expect("catalog");
    let ids: Vec<&str> = catalog
        .lines()
        .filter_map(|l| l.strip_prefix("-- "))
        .collect();
    let kinds = all_kinds();
    assert_eq!(ids.len(), kinds.len(), "one entry per kind: {ids:?}");
    for k in kinds {
        let id = k.message_id();
        assert!(ids.contains(&id), "{k:?} ({id}) has no catalog entry");
        let line = listed
            .lines()
            .find(|l| l.starts_with(id))
            .unwrap_or_else(|| panic!("journalctl --list-catalog lacks {k:?} ({id}):\n{listed}"));
        assert!(line.contains("jobguard"), "{line}");
        let entry = catalog
            .split("\n-- ")
            .find(|e| e.starts_with(id))
            .expect("entry");
        assert!(entry.contains("\nDefined-By: jobguard\n"), "{entry}");
        assert!(entry.contains("\nSupport: "), "{entry}");
        assert!(entry.lines().count() >= 8, "{k:?}: too short:\n{entry}");
    }
}

// ---------------------------------------------------------------------------------------
// Without systemd: on this machine (PID 1 is not systemd) with no system bus at the
// address given.
// ---------------------------------------------------------------------------------------

const FIRED: &str = "1795917780000000";

fn no_bus(cmd: &mut std::process::Command) -> &mut std::process::Command {
    cmd.env(
        "DBUS_SYSTEM_BUS_ADDRESS",
        "unix:path=/nonexistent/jobguard-test-bus",
    )
    .env("TRIGGER_TIMER_REALTIME_USEC", FIRED)
}

#[test]
fn without_logind_a_run_warns_once_and_succeeds_and_inhibit_none_does_not_ask() {
    let sb = support::Sandbox::new(
        "[jobs.plain]\nschedule = \"*-*-* 02:00:00 UTC\"\ncommand = [\"/bin/true\"]\n\n\
         [jobs.quiet]\nschedule = \"*-*-* 02:00:00 UTC\"\ncommand = [\"/bin/true\"]\ninhibit = \"none\"\n",
    );
    let out = no_bus(&mut sb.cmd(&["run", "plain"]))
        .output()
        .expect("run");
    let err = support::stderr(&out);
    assert!(out.status.success(), "{err}");
    assert_eq!(err.matches("warning: logind").count(), 1, "{err}");
    assert!(err.contains("without a logind inhibitor"), "{err}");
    let rows = sb.history("plain");
    assert_eq!(s(&rows[0], "outcome"), "succeeded", "{rows:?}");

    let out = no_bus(&mut sb.cmd(&["run", "quiet"]))
        .output()
        .expect("run");
    let err = support::stderr(&out);
    assert!(out.status.success(), "{err}");
    assert!(
        !err.contains("logind"),
        "inhibit = none asked logind: {err}"
    );
}

#[test]
fn status_without_systemd_shows_the_ledger_and_says_what_it_could_not_read() {
    if std::path::Path::new("/run/systemd/system").exists() {
        common::go_on(
            "status_without_systemd_shows_the_ledger_and_says_what_it_could_not_read",
            Some("systemd runs on this machine".into()),
        );
        return;
    }
    let sb = support::Sandbox::new(
        "[jobs.ledger]\nschedule = \"*-*-* 02:00:00 UTC\"\ncommand = [\"/bin/true\"]\n",
    );
    // The current slot (not a fixed date): earlier slots with no record would be missed,
    // and status would rightly exit 1.
    let out = no_bus(&mut sb.cmd(&["run", "ledger"]))
        .env_remove("TRIGGER_TIMER_REALTIME_USEC")
        .output()
        .expect("run");
    assert!(out.status.success(), "{}", support::stderr(&out));

    let out = sb.run(&["status", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", support::stderr(&out));
    let v: Value = serde_json::from_slice(&out.stdout).expect("status JSON");
    assert_eq!(v["systemd"]["read"], Value::Bool(false), "{v}");
    assert!(
        s(&v["systemd"], "note").contains("not running"),
        "the note says what was not read: {v}"
    );
    let job = &v["jobs"][0];
    assert_eq!(job["systemd"], Value::Null, "{job}");
    assert_eq!(s(&job["last"], "outcome"), "succeeded", "{job}");
    assert!(
        !s(job, "next_elapse").is_empty(),
        "jobguard's own NEXT: {job}"
    );

    let out = sb.run(&["status"]);
    assert!(out.status.success());
    let table = support::stdout(&out);
    assert!(
        table.contains("ledger") && table.contains("succeeded"),
        "{table}"
    );
    assert!(
        support::stderr(&out).contains("note: systemd is not running here"),
        "{}",
        support::stderr(&out)
    );
}

/// The manual's OnFailure= recipe: a failing job starts the alert unit with its own
/// unit's name as the instance.
#[test]
fn on_failure_starts_the_alert_unit_of_the_readme_recipe() {
    if !ready("on_failure_starts_the_alert_unit_of_the_readme_recipe") {
        return;
    }
    let jobs = "[jobs.broken]\n\
                schedule = \"*-01-01 00:00:00 UTC\"\n\
                command = ['/bin/sh', '-c', 'exit 3']\n\
                on_failure = \"jobguard-alert@%n.service\"\n";
    let alert = "[Unit]\nDescription=Alert about %i\n\n[Service]\nType=oneshot\n\
                 ExecStart=/bin/sh -c 'systemctl status --no-pager --lines=30 \"%i\" > /var/lib/alert.txt; echo \"host %H\" >> /var/lib/alert.txt'\n";
    let opts = options(jobs).file("/etc/systemd/system/jobguard-alert@.service", alert);
    let c = Container::boot("sd5-onfailure", &opts).expect("boot");
    let _ = c.exec(&["systemctl", "start", "jobguard@broken.service"]);
    let text = common::wait_for(
        "the alert",
        Duration::from_secs(60),
        Duration::from_millis(200),
        || {
            Ok(c.exec(&["cat", "/var/lib/alert.txt"])
                .ok()
                .filter(|o| o.status.success() && o.stdout.ends_with(b"\n"))
                .map(|o| text(&o))
                .filter(|t| t.contains("host ")))
        },
    )
    .expect("the alert unit ran");
    assert!(text.contains("jobguard@broken.service"), "{text}");
    assert!(text.contains("failed"), "{text}");
}

// ---------------------------------------------------------------------------------------
// Sleep, resume and shutdown signals from a mock logind on a private bus: logind cannot
// suspend a container, so PrepareForSleep is sent by this stand-in (same interface, same
// path, same well-known name) on a dbus-daemon of the test's own.
// ---------------------------------------------------------------------------------------

mod mock {
    use std::os::fd::OwnedFd;
    use std::sync::{Arc, Mutex};

    /// Each Inhibit call: (what, who, why, mode) and the read end of the pipe whose write
    /// end was handed out as the lock (it reads EOF once the lock is released).
    /// One Inhibit call: its four arguments and the read end of the lock's pipe.
    pub type Call = ([String; 4], OwnedFd);

    #[derive(Default, Clone)]
    pub struct Calls(pub Arc<Mutex<Vec<Call>>>);

    pub struct Logind {
        pub calls: Calls,
    }

    #[zbus::interface(name = "org.freedesktop.login1.Manager")]
    impl Logind {
        fn inhibit(
            &self,
            what: String,
            who: String,
            why: String,
            mode: String,
        ) -> zbus::fdo::Result<zbus::OwnedFd> {
            let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
                .map_err(|e| zbus::fdo::Error::Failed(e.to_string()))?;
            self.calls
                .0
                .lock()
                .expect("calls")
                .push(([what, who, why, mode], r));
            Ok(w.into())
        }

        #[zbus(signal)]
        pub async fn prepare_for_shutdown(
            emitter: &zbus::object_server::SignalEmitter<'_>,
            start: bool,
        ) -> zbus::Result<()>;

        #[zbus(signal)]
        pub async fn prepare_for_sleep(
            emitter: &zbus::object_server::SignalEmitter<'_>,
            start: bool,
        ) -> zbus::Result<()>;
    }
}

/// Whether the lock handed out by Inhibit call `i` has been released (its pipe reads EOF).
fn released(calls: &mock::Calls, i: usize) -> bool {
    use std::os::fd::AsFd;
    let calls = calls.0.lock().expect("calls");
    let Some((_, r)) = calls.get(i) else {
        return false;
    };
    let mut fds = [nix::poll::PollFd::new(
        r.as_fd(),
        nix::poll::PollFlags::POLLIN,
    )];
    nix::poll::poll(&mut fds, nix::poll::PollTimeout::ZERO).is_ok_and(|n| n > 0)
}

#[test]
fn sleep_releases_and_resume_retakes_the_lock_and_a_shutdown_makes_the_cut_interrupted() {
    let test =
        "sleep_releases_and_resume_retakes_the_lock_and_a_shutdown_makes_the_cut_interrupted";
    if std::process::Command::new("dbus-daemon")
        .arg("--version")
        .output()
        .is_err()
    {
        common::go_on(
            test,
            Some("dbus-daemon not found (apt-get install dbus)".into()),
        );
        return;
    }
    let sb = support::Sandbox::new(
        "[jobs.sleepy]\nschedule = \"*-*-* 02:00:00 UTC\"\n\
         command = [\"/bin/sh\", \"-c\", \"while [ ! -e \\\"$RELEASE\\\" ]; do sleep 0.1; done\"]\n",
    );
    let bus_path = sb.file("bus");
    let address = format!("unix:path={}", bus_path.display());
    let mut daemon = std::process::Command::new("dbus-daemon")
        .args(["--session", "--nofork", "--nopidfile"])
        .arg(format!("--address={address}"))
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("dbus-daemon");
    let daemon_guard = common::helper::KillOnDrop(daemon.id() as i32);
    common::wait_for(
        "the private bus",
        Duration::from_secs(20),
        Duration::from_millis(20),
        || Ok(bus_path.exists().then_some(())),
    )
    .expect("bus socket");

    let calls = mock::Calls::default();
    let logind = mock::Logind {
        calls: calls.clone(),
    };
    let conn = zbus::block_on(async {
        zbus::connection::Builder::address(address.as_str())
            .name("org.freedesktop.login1")
            .serve_at("/org/freedesktop/login1", logind)
            .build()
            .await
    })
    .expect("mock logind on the private bus");
    let emit = |shutdown: bool, start: bool| {
        zbus::block_on(async {
            let iface = conn
                .object_server()
                .interface::<_, mock::Logind>("/org/freedesktop/login1")
                .await?;
            if shutdown {
                mock::Logind::prepare_for_shutdown(iface.signal_emitter(), start).await
            } else {
                mock::Logind::prepare_for_sleep(iface.signal_emitter(), start).await
            }
        })
        .expect("emit");
    };
    let wait = |what: &str, f: &dyn Fn() -> bool| {
        common::wait_for(
            what,
            Duration::from_secs(30),
            Duration::from_millis(20),
            || Ok(f().then_some(())),
        )
        .expect(what)
    };

    let release = sb.file("release");
    let shim = sb
        .cmd(&["run", "sleepy"])
        .env("DBUS_SYSTEM_BUS_ADDRESS", &address)
        .env("TRIGGER_TIMER_REALTIME_USEC", FIRED)
        .env("RELEASE", &release)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("jobguard run");
    let shim_guard = common::helper::KillOnDrop(shim.id() as i32);
    let n = || calls.0.lock().expect("calls").len();
    wait("the first Inhibit call", &|| n() >= 1);
    {
        let c = calls.0.lock().expect("calls");
        let [what, who, why, mode] = &c[0].0;
        assert_eq!(what, "shutdown:sleep");
        assert_eq!(who, "jobguard sleepy");
        assert!(why.starts_with("running slot 2026-"), "{why}");
        assert_eq!(mode, "delay");
    }
    assert!(
        !released(&calls, 0),
        "the lock was released while the command runs"
    );

    emit(false, true);
    wait("the lock released before sleep", &|| released(&calls, 0));
    emit(false, false);
    wait("the lock taken again after resume", &|| n() >= 2);
    assert!(!released(&calls, 1));

    emit(true, true);
    wait("the lock released at shutdown", &|| released(&calls, 1));
    // What systemd would do next: stop the unit, i.e. SIGTERM to the shim.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(shim.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .expect("SIGTERM");
    let out = shim.wait_with_output().expect("shim");
    // Reaped: its pid may be reused, so the guard must not signal it any more.
    std::mem::forget(shim_guard);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(143), "{err}");
    assert!(
        err.contains("going to sleep") && err.contains("resumed"),
        "{err}"
    );
    let rows = sb.history("sleepy");
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(s(&rows[0], "outcome"), "interrupted", "{rows:?}");
    assert_eq!(
        s(&rows[0], "reason"),
        "shutdown",
        "not stopped-term: {rows:?}"
    );
    assert_eq!(s(&rows[0], "resolution"), "queued", "{rows:?}");
    drop(conn);
    let _ = daemon.kill();
    let _ = daemon.wait();
    std::mem::forget(daemon_guard);
}

/// The journal gets jobguard's events and nothing else, also from a store whose client
/// logs through `tracing` (etcd's gRPC client: a hundred trace events per call over h2,
/// which once all went to the journal under `SYSLOG_IDENTIFIER=jobguard`, and slowed
/// every host): each entry has a `MESSAGE_ID` and names the job.
#[cfg(feature = "store-etcd")]
#[test]
fn a_run_on_etcd_writes_only_jobguards_events_to_the_journal() {
    let test = "a_run_on_etcd_writes_only_jobguards_events_to_the_journal";
    if !ready(test) {
        return;
    }
    let Some(ns) = common::remote::Namespace::new(common::remote::server("etcd"), test) else {
        return;
    };
    let c = boot(
        "etcd-journal",
        &format!(
            "[jobs.on-etcd]\nschedule = \"*-01-01 00:00:00 UTC\"\ncommand = [\"/bin/true\"]\n\
             store = \"{}\"\n",
            ns.address()
        ),
    );
    let out = c.exec(&["jobguard", "run", "on-etcd"]).expect("run");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    // journald writes what it received a moment later: wait for the run's last event.
    let entries = common::wait_for(
        "the run's finish event in the journal",
        Duration::from_secs(10),
        Duration::from_millis(200),
        || {
            let entries = c
                .journal(&["SYSLOG_IDENTIFIER=jobguard"])
                .map_err(|e| e.to_string())?;
            let finished = entries.iter().any(|e| {
                e.get("MESSAGE")
                    .is_some_and(|m| m.contains("finished slot"))
            });
            Ok(finished.then_some(entries))
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let foreign: Vec<String> = entries
        .iter()
        .filter(|e| e.get("MESSAGE_ID").is_none() || e.get("JOBGUARD_EVENT").is_none())
        .filter_map(|e| e.get("MESSAGE"))
        .collect();
    assert!(
        foreign.is_empty(),
        "{} of {} entries are not jobguard's events, e.g. {:?}",
        foreign.len(),
        entries.len(),
        &foreign[..foreign.len().min(5)]
    );
}

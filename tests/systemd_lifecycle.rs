//! Pausing and removing jobs, under a real systemd (`tests/common/container.rs`):
//! `enabled = false` keeps a job's units and ledger but its timer is not enabled, the
//! recover pass neither starts nor re-arms it and stops it when it is still active after
//! the edit, and starts it again once the job is enabled; a job removed from the job list
//! keeps its ledger (`history`, `audit`), its timer does not linger, its `running`
//! record whose holder is gone, and a slot of it a poweroff left queued, are held by the
//! recover pass and listed by `status`, and `resolve --done` settles that slot.
//!
//! Needs root and systemd-nspawn (skipped with a `SKIPPED` line otherwise, failed in CI).
//!
//! ```sh
//! cargo test --test systemd_lifecycle -- --nocapture
//! ```

mod common;

use std::time::Duration;

use common::container::Container;
use common::host::*;

fn ready(test: &str) -> bool {
    common::go_on(test, common::container::prerequisites())
}

fn tick_job(name: &str, extra: &str) -> String {
    format!(
        "[jobs.{name}]\nschedule = \"*:*:0/5\"\ncommand = [\"/bin/true\"]\nstore_wait = \"0s\"\nclock_tolerance = \"1s\"\n{extra}\n"
    )
}

fn succeeded(c: &Container, job: &str) -> usize {
    history(c, job)
        .map(|h| outcome_rows(&h, "succeeded").len())
        .unwrap_or(0)
}

fn recover_pass(c: &Container) -> String {
    c.exec_ok(&["systemctl", "start", "jobguard-recover.service"])
        .expect("a recover pass");
    wait_unit_done(c, "jobguard-recover.service", Duration::from_secs(60));
    recover_journal(c)
}

/// Starts `job`'s service and waits until its run is recorded `running`.
fn start_running(c: &Container, job: &str) {
    let unit = format!("jobguard@{job}.service");
    c.exec_ok(&["systemctl", "start", "--no-block", &unit])
        .expect("start");
    common::wait_for(
        &format!("{job} running"),
        Duration::from_secs(60),
        Duration::from_millis(300),
        || {
            let rows = history(c, job)?;
            Ok((outcome_rows(&rows, "running").len() == 1).then_some(()))
        },
    )
    .expect("the run is running");
}

/// Writes the declaration of job `gone`'s schedule that another host sharing the SQLite
/// store would write as it fires the job, last seen at `seen_at` (an SQL expression, µs
/// since the epoch), with a horizon of two days.
fn declare_other_host(c: &Container, seen_at: &str) {
    // Waits for the lock of a recover pass that writes the store meanwhile, as jobguard's
    // own connections do ("database is locked" otherwise, seen in CI).
    c.exec_ok(&[
        "sqlite3",
        "-cmd",
        ".timeout 10000",
        "/var/lib/jobguard/jobguard.db",
        &format!(
            "CREATE TABLE IF NOT EXISTS jobguard_schedule (job TEXT PRIMARY KEY, \
             fingerprint TEXT NOT NULL, defined_at INTEGER NOT NULL, host TEXT NOT NULL, \
             seen_at INTEGER NOT NULL, horizon INTEGER NOT NULL); \
             INSERT OR REPLACE INTO jobguard_schedule VALUES ('gone', \
             '*-01-01 00:00:00 UTC', 0, 'other-host 0123456789abcdef0123456789abcdef', \
             {seen_at}, 172800000000);"
        ),
    ])
    .expect("another host's declaration of the schedule");
}

/// Everything the recover passes so far logged.
fn recover_journal(c: &Container) -> String {
    c.unit_log("jobguard-recover.service")
}

fn status(c: &Container) -> (Option<i32>, serde_json::Value) {
    let out = c.exec(&["jobguard", "status", "--json"]).expect("status");
    let v = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("status json: {e}: {}", text(&out)));
    (out.status.code(), v)
}

fn job_json<'a>(v: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    v["jobs"]
        .as_array()
        .and_then(|a| a.iter().find(|j| j["job"] == name))
        .unwrap_or_else(|| panic!("{name} in status: {v}"))
}

fn active(c: &Container, unit: &str) -> String {
    prop(c, unit, "ActiveState")
}

#[test]
fn a_paused_job_keeps_its_units_and_ledger_and_its_timer_stays_stopped_until_enabled() {
    let test = "a_paused_job_keeps_its_units_and_ledger_and_its_timer_stays_stopped_until_enabled";
    if !ready(test) {
        return;
    }
    let jobs = |tick_extra: &str| {
        format!(
            "{}{}",
            tick_job("tick", tick_extra),
            tick_job("idle", "enabled = false")
        )
    };
    let c = boot("lifecycle-pause", &jobguard_options(&jobs("")));
    c.exec_ok(&["systemctl", "stop", "jobguard-recover.timer"])
        .expect("stop the recover timer");
    // A job paused from the start: units written, timer not enabled, never started.
    assert_eq!(
        prop(&c, "jobguard@idle.timer", "LoadState"),
        "loaded",
        "the paused job's timer is written"
    );
    assert_eq!(active(&c, "jobguard@idle.timer"), "inactive");
    common::wait_for(
        "a run by tick's timer",
        Duration::from_secs(30),
        Duration::from_millis(500),
        || Ok((succeeded(&c, "tick") >= 1).then_some(())),
    )
    .expect("the enabled job runs");
    let log = recover_pass(&c);
    assert_eq!(
        active(&c, "jobguard@idle.timer"),
        "inactive",
        "recover does not start a paused job's timer: {log}"
    );
    let (code, v) = status(&c);
    assert_eq!(job_json(&v, "idle")["paused"], true, "{v}");
    assert_eq!(job_json(&v, "tick")["paused"], false, "{v}");
    assert_eq!(code, Some(0), "a paused job is not an attention item: {v}");
    let table = c.exec(&["jobguard", "status"]).expect("status");
    let idle_row = text(&table)
        .lines()
        .find(|l| l.starts_with("idle "))
        .map(str::to_string)
        .unwrap_or_default();
    assert!(idle_row.contains("paused"), "{}", text(&table));
    let h = c
        .exec(&["jobguard", "history", "idle", "--json"])
        .expect("history");
    assert_eq!(h.status.code(), Some(0), "history reads a paused job");

    // Pausing a running job: a reload leaves its timer active, and the recover pass that
    // the reload starts (jobguard-recover.path; the recover timer is stopped) stops it at
    // once. It does not fire any more.
    c.write_file("/etc/jobguard/jobs.toml", jobs("enabled = false"))
        .expect("pause tick");
    c.exec_ok(&["systemctl", "daemon-reload"]).expect("reload");
    common::wait_for(
        "tick's timer stopped",
        Duration::from_secs(10),
        Duration::from_millis(200),
        || Ok((active(&c, "jobguard@tick.timer") == "inactive").then_some(())),
    )
    .unwrap_or_else(|e| panic!("{e}\n{}", recover_journal(&c)));
    let log = recover_journal(&c);
    assert!(
        log.contains("stopped timers of paused or removed jobs: jobguard@tick.timer"),
        "{log}"
    );
    wait_unit_done(&c, "jobguard@tick.service", Duration::from_secs(30));
    let paused_at = succeeded(&c, "tick");
    std::thread::sleep(Duration::from_secs(12));
    assert_eq!(
        succeeded(&c, "tick"),
        paused_at,
        "a paused job does not run"
    );
    recover_pass(&c);
    assert_eq!(active(&c, "jobguard@tick.timer"), "inactive");
    let (code, v) = status(&c);
    assert_eq!(code, Some(0), "paused, its slots are not missed: {v}");
    let out = c
        .exec(&["jobguard", "audit", "tick", "--json"])
        .expect("audit");
    let a: serde_json::Value = serde_json::from_slice(&out.stdout).expect("audit json");
    assert_eq!(out.status.code(), Some(0), "{a}");
    assert_eq!(a["jobs"][0]["paused"], true, "{a}");

    // Enabled again: a reload does not start a timer that was stopped; the recover pass
    // it starts does, and the job runs.
    c.write_file("/etc/jobguard/jobs.toml", jobs(""))
        .expect("resume tick");
    c.exec_ok(&["systemctl", "daemon-reload"]).expect("reload");
    let log = String::new();
    common::wait_for(
        "tick's timer started again",
        Duration::from_secs(10),
        Duration::from_millis(200),
        || {
            let next = prop(&c, "jobguard@tick.timer", "NextElapseUSecRealtime");
            Ok((!next.is_empty()).then_some(()))
        },
    )
    .unwrap_or_else(|e| panic!("{e}\n{log}{}", recover_journal(&c)));
    common::wait_for(
        "a run after the resume",
        Duration::from_secs(30),
        Duration::from_millis(500),
        || Ok((succeeded(&c, "tick") > paused_at).then_some(())),
    )
    .expect("the job runs again");
}

#[test]
fn a_removed_job_keeps_its_ledger_and_leaves_no_timer_and_no_running_record_behind() {
    let test = "a_removed_job_keeps_its_ledger_and_leaves_no_timer_and_no_running_record_behind";
    if !ready(test) {
        return;
    }
    let keep = "[jobs.keep]\nschedule = \"*-01-01 00:00:00 UTC\"\ncommand = [\"/bin/true\"]\n";
    let gone = "[jobs.gone]\nschedule = \"*-01-01 00:00:00 UTC\"\nlease_ttl = \"20s\"\n\
                command = ['/bin/sh', '-c', 'sleep 300']\n";
    let c = boot(
        "lifecycle-remove",
        &jobguard_options(&format!("{keep}\n{gone}")),
    );
    c.exec_ok(&["systemctl", "stop", "jobguard-recover.timer"])
        .expect("stop the recover timer");
    assert_eq!(active(&c, "jobguard@gone.timer"), "active");
    start_running(&c, "gone");

    // The job leaves the list, a reload; then its run is cut (the shim and its command
    // SIGKILLed), so no one records an outcome.
    c.write_file("/etc/jobguard/jobs.toml", keep)
        .expect("remove gone");
    c.exec_ok(&["systemctl", "daemon-reload"]).expect("reload");
    // The recover pass the reload starts (jobguard-recover.path; the recover timer is
    // stopped) stops the removed job's timer at once: it does not linger in list-timers
    // as `bad-setting`. The run it leaves alone.
    common::wait_for(
        "gone's timer gone from list-timers",
        Duration::from_secs(10),
        Duration::from_millis(200),
        || {
            let t = c
                .exec_ok(&["systemctl", "list-timers", "--all", "--no-pager"])
                .map_err(|e| e.to_string())?;
            Ok((!t.contains("jobguard@gone.timer")).then_some(()))
        },
    )
    .unwrap_or_else(|e| panic!("{e}\n{}", recover_journal(&c)));
    let log = recover_journal(&c);
    assert!(
        log.contains("stopped timers of paused or removed jobs: jobguard@gone.timer"),
        "{log}"
    );
    assert_eq!(active(&c, "jobguard@gone.service"), "active", "{log}");
    c.exec_ok(&["systemctl", "kill", "-s", "KILL", "jobguard@gone.service"])
        .expect("kill");
    let killed = std::time::Instant::now();
    wait_unit_done(&c, "jobguard@gone.service", Duration::from_secs(30));
    // The run is cut once its lease (20 s) has expired by the store's clock.
    std::thread::sleep(Duration::from_secs(21).saturating_sub(killed.elapsed()));

    // history and audit still read the ledger of a job no longer in the list.
    let rows = history(&c, "gone").expect("history of a removed job");
    assert_eq!(outcome_rows(&rows, "running").len(), 1, "{rows:#?}");

    let log = recover_pass(&c);
    eprintln!("{log}");
    let rows = history(&c, "gone").expect("history");
    assert_eq!(outcome_rows(&rows, "running").len(), 0, "{rows:#?}\n{log}");
    let cut = outcome_rows(&rows, "interrupted");
    assert_eq!(cut.len(), 1, "{rows:#?}");
    assert_eq!(field(cut[0], "resolution"), "held", "no re-run: {rows:#?}");
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        history(&c, "gone")
            .map(|r| outcome_rows(&r, "running").is_empty())
            .unwrap_or(false),
        "no re-run was started"
    );
    let timers = c
        .exec_ok(&["systemctl", "list-timers", "--all", "--no-pager"])
        .expect("list-timers");
    assert!(!timers.contains("jobguard@gone.timer"), "{timers}\n{log}");
    let out = c
        .exec(&["jobguard", "audit", "gone", "--json"])
        .expect("audit");
    let a: serde_json::Value = serde_json::from_slice(&out.stdout).expect("audit json");
    assert_eq!(a["jobs"][0]["in_job_list"], false, "{a}");
    assert_eq!(a["jobs"][0]["records"], 1, "{a}");
    assert_eq!(
        out.status.code(),
        Some(1),
        "the held slot needs attention: {a}"
    );
    // status lists the removed job's held slot too: it waits for a person.
    let out = c.exec(&["jobguard", "status", "--json"]).expect("status");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("status json");
    assert_eq!(
        out.status.code(),
        Some(1),
        "the held slot needs attention: {v}"
    );
    assert!(
        v["attention"].as_array().is_some_and(|a| a
            .iter()
            .any(|r| r["job"] == "gone" && r["resolution"] == "held")),
        "status lists the removed job's held slot: {v}"
    );
    // A person declares the slot done; a re-run is refused (no job to run it).
    let slot = field(cut[0], "slot");
    let out = c
        .exec(&["jobguard", "resolve", "gone", &slot, "--rerun"])
        .expect("resolve --rerun");
    assert_eq!(out.status.code(), Some(78), "{}", text(&out));
    c.exec_ok(&["jobguard", "resolve", "gone", &slot, "--done"])
        .expect("resolve --done");
    let out = c.exec(&["jobguard", "audit", "gone"]).expect("audit");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let out = c.exec(&["jobguard", "status"]).expect("status");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    // The job that stays is untouched.
    assert_eq!(active(&c, "jobguard@keep.timer"), "active");
}

/// A job removed from the job list whose run a clean poweroff cuts: the shim records the
/// run interrupted with the policy it started with (`on_interrupted = "rerun"`: queued),
/// but no timer is left to run the slot again. After the boot, the recover pass leaves
/// it queued while another host still fires the job, then holds the slot for a person,
/// and `status` lists it.
#[test]
fn a_removed_job_cut_by_a_poweroff_is_held_after_the_boot() {
    let test = "a_removed_job_cut_by_a_poweroff_is_held_after_the_boot";
    if !ready(test) {
        return;
    }
    let keep = "[jobs.keep]\nschedule = \"*-01-01 00:00:00 UTC\"\ncommand = [\"/bin/true\"]\n";
    let gone = "[jobs.gone]\nschedule = \"*-01-01 00:00:00 UTC\"\n\
                command = ['/bin/sh', '-c', 'sleep 300']\n";
    let mut c = boot(
        "lifecycle-poweroff",
        &jobguard_options(&format!("{keep}\n{gone}")),
    );
    // While another host that shares the store still fires the job (its declaration of
    // the job's schedule, as its shim writes it as it fires, is fresh), that host re-runs
    // the slot: it stays queued, through the boot's recover pass and the next. (The run
    // here is started by hand, which declares nothing.)
    declare_other_host(
        &c,
        "CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER)",
    );
    start_running(&c, "gone");
    c.write_file("/etc/jobguard/jobs.toml", keep)
        .expect("remove gone");
    c.exec_ok(&["systemctl", "daemon-reload"]).expect("reload");
    c.poweroff().expect("a clean poweroff");
    c.boot_again().expect("boot again");

    let log = recover_pass(&c);
    let rows = history(&c, "gone").expect("history");
    let cut = outcome_rows(&rows, "interrupted");
    assert_eq!(cut.len(), 1, "{rows:#?}\n{log}");
    assert_eq!(field(cut[0], "reason"), "shutdown", "{rows:#?}");
    assert_eq!(
        field(cut[0], "resolution"),
        "queued",
        "another host runs the job: {rows:#?}\n{log}"
    );
    // That host's declaration is past its horizon: no host runs the job any more.
    declare_other_host(&c, "1");
    let log = recover_pass(&c);
    let rows = history(&c, "gone").expect("history");
    let cut = outcome_rows(&rows, "interrupted");
    assert_eq!(
        field(cut[0], "resolution"),
        "held",
        "no timer is left to run the slot again: {rows:#?}\n{log}"
    );
    let (code, v) = status(&c);
    assert_eq!(code, Some(1), "the held slot needs attention: {v}");
    assert!(
        v["attention"]
            .as_array()
            .is_some_and(|a| a.iter().any(|r| r["job"] == "gone")),
        "{v}"
    );
}

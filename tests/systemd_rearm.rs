//! Nothing silently lost, under a real systemd (`tests/common/container.rs`): a timer left
//! without a next elapse by a typo in the job list is re-armed by the recover pass, the
//! slots it did not fire are reported once each as `missed` (journal, `status`), a timer
//! whose job it started still runs is not reported, and a slot held after its second cut
//! by power cuts starts the job's `on_failure` unit.
//!
//! Needs root and systemd-nspawn (skipped with a `SKIPPED` line otherwise, failed in CI).
//!
//! ```sh
//! cargo test --test systemd_rearm -- --nocapture
//! ```

mod common;

use std::time::Duration;

use common::container::Container;
use common::host::*;

const MISSED_ID: &str = "a4b1d7192a4a4f6daa808b5fd70a3463";

fn ready(test: &str) -> bool {
    common::go_on(test, common::container::prerequisites())
}

fn tick_job(command_key: &str) -> String {
    format!(
        "[jobs.tick]\nschedule = \"*:*:0/5\"\n{command_key} = [\"/bin/sh\", \"-c\", \"echo $JOBGUARD_SLOT >> /var/tmp/tick\"]\nstore_wait = \"0s\"\nclock_tolerance = \"1s\"\n"
    )
}

fn succeeded(c: &Container, job: &str) -> usize {
    history(c, job)
        .map(|h| outcome_rows(&h, "succeeded").len())
        .unwrap_or(0)
}

fn status(c: &Container) -> (Option<i32>, serde_json::Value) {
    let out = c.exec(&["jobguard", "status", "--json"]).expect("status");
    let v = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("status json: {e}: {}", text(&out)));
    (out.status.code(), v)
}

fn recover_pass(c: &Container) {
    c.exec_ok(&["systemctl", "start", "jobguard-recover.service"])
        .expect("a recover pass");
    wait_unit_done(c, "jobguard-recover.service", Duration::from_secs(60));
}

fn missed_events(c: &Container) -> Vec<(String, String)> {
    c.journal(&["JOBGUARD_JOB=tick", "JOBGUARD_EVENT=missed"])
        .expect("journal")
        .iter()
        .map(|e| {
            (
                e.get("JOBGUARD_SLOT").unwrap_or_default(),
                e.get("MESSAGE_ID").unwrap_or_default(),
            )
        })
        .collect()
}

#[test]
fn a_typo_then_a_fix_leaves_the_timer_idle_and_recover_rearms_it_and_reports_the_missed_slots() {
    let test = "a_typo_then_a_fix_leaves_the_timer_idle_and_recover_rearms_it_and_reports_the_missed_slots";
    if !ready(test) {
        return;
    }
    let c = boot("rearm", &jobguard_options(&tick_job("command")));
    // The passes are driven by the test: neither the recover timer nor a reload
    // (jobguard-recover.path) starts one.
    c.exec_ok(&[
        "systemctl",
        "stop",
        "jobguard-recover.timer",
        "jobguard-recover.path",
    ])
    .expect("stop the recover timer and path");
    common::wait_for(
        "a run by the timer",
        Duration::from_secs(30),
        Duration::from_millis(500),
        || Ok((succeeded(&c, "tick") >= 1).then_some(())),
    )
    .expect("the timer runs the job");

    // A typo, a reload; the fix, a reload.
    c.write_file("/etc/jobguard/jobs.toml", tick_job("comand"))
        .expect("typo");
    c.exec_ok(&["systemctl", "daemon-reload"]).expect("reload");
    c.write_file("/etc/jobguard/jobs.toml", tick_job("command"))
        .expect("fix");
    c.exec_ok(&["systemctl", "daemon-reload"]).expect("reload");
    let props = show(
        &c,
        "jobguard@tick.timer",
        &["ActiveState", "NextElapseUSecRealtime", "TimersCalendar"],
    );
    eprintln!("after the fix: {props:?}");
    let get = |p: &[(String, String)], k: &str| {
        p.iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    };
    assert_eq!(get(&props, "ActiveState"), "active", "{props:?}");
    assert_eq!(
        get(&props, "NextElapseUSecRealtime"),
        "",
        "systemd 252 leaves the timer without a next elapse: {props:?}"
    );
    let runs_before = succeeded(&c, "tick");
    // status: the timer is not waiting; a monitoring check fails.
    let (code, v) = status(&c);
    assert_eq!(code, Some(1), "{v}");
    assert_eq!(v["jobs"][0]["timer_waiting"], false, "{v}");

    // Until a slot passed the grace (32 s here) without a record: status reports it.
    let v = common::wait_for(
        "a missed slot in status",
        Duration::from_secs(90),
        Duration::from_secs(1),
        || {
            let (code, v) = status(&c);
            let missed = v["jobs"][0]["missed"].as_array().map_or(0, Vec::len);
            Ok((code == Some(1) && missed >= 1).then_some(v))
        },
    )
    .expect("status reports the slots the idle timer did not fire");
    assert_eq!(
        succeeded(&c, "tick"),
        runs_before,
        "the idle timer never fired"
    );
    let missed_in_status = v["jobs"][0]["missed"].as_array().unwrap().len();

    recover_pass(&c);
    let events = missed_events(&c);
    assert!(events.len() >= missed_in_status, "{events:?}");
    assert!(events.iter().all(|(_, id)| id == MISSED_ID), "{events:?}");
    let mut slots: Vec<&String> = events.iter().map(|(s, _)| s).collect();
    slots.dedup();
    assert_eq!(slots.len(), events.len(), "once per slot: {events:?}");
    // The timer waits again and the job runs.
    let rearmed = common::wait_for(
        "the timer re-armed",
        Duration::from_secs(10),
        Duration::from_millis(200),
        || {
            let next = prop(&c, "jobguard@tick.timer", "NextElapseUSecRealtime");
            Ok((!next.is_empty()).then_some(next))
        },
    );
    let log = c.unit_log("jobguard-recover.service");
    assert!(rearmed.is_ok(), "re-armed: {rearmed:?}\n{log}");
    assert!(
        log.contains("re-armed timers without a next elapse: jobguard@tick.timer"),
        "{log}"
    );
    common::wait_for(
        "a run after the re-arm",
        Duration::from_secs(30),
        Duration::from_millis(500),
        || Ok((succeeded(&c, "tick") > runs_before).then_some(())),
    )
    .expect("the job runs again");
    // A second pass reports no slot twice.
    recover_pass(&c);
    let again = missed_events(&c);
    let mut all: Vec<&String> = again.iter().map(|(s, _)| s).collect();
    all.sort();
    let n = all.len();
    all.dedup();
    assert_eq!(all.len(), n, "no slot reported twice: {again:?}");
    // A pass with nothing to do leaves nothing in the journal (systemd's own starting and
    // finished lines included), where the passes above left what they did.
    let before = c.unit_log("jobguard-recover.service");
    recover_pass(&c);
    let after = c.unit_log("jobguard-recover.service");
    assert_eq!(after, before, "an idle pass logs nothing");
    assert!(
        !after.contains("Finished") && !after.contains("Deactivated"),
        "{after}"
    );
    // The slots reported missed were passed over by the catch-up run, on record.
    let out = c
        .exec(&["jobguard", "audit", "tick", "--json"])
        .expect("audit");
    let a: serde_json::Value = serde_json::from_slice(&out.stdout).expect("audit json");
    let passed: Vec<String> = a["jobs"][0]["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["kind"] == "passed_over")
        .map(|f| f["slot"].as_str().unwrap().to_string())
        .collect();
    for (slot, _) in &events {
        assert!(passed.contains(slot), "{slot} passed over: {a}");
    }
}

/// A slot cut off twice (two power cuts) is held for a person by the recover pass at
/// boot; no failing service announces it, so recover starts the job's `on_failure` unit.
#[test]
fn a_slot_held_after_its_second_cut_starts_the_on_failure_unit() {
    if !ready("a_slot_held_after_its_second_cut_starts_the_on_failure_unit") {
        return;
    }
    // A cut run is judged once its lease (20 s) has expired: by the pass at boot or the
    // next one, on the minute.
    let jobs = "[jobs.cut]\n\
                schedule = \"*-01-01 00:00:00 UTC\"\n\
                lease_ttl = \"20s\"\n\
                command = ['/bin/sh', '-c', 'sleep 300']\n\
                on_failure = \"jobguard-alert@%n.service\"\n";
    let alert = "[Unit]\nDescription=Alert about %i\n\n[Service]\nType=oneshot\n\
                 ExecStart=/bin/sh -c 'echo \"%i\" >> /var/lib/alert.txt'\n";
    let opts = jobguard_options(jobs).file("/etc/systemd/system/jobguard-alert@.service", alert);
    let mut c = boot("held-alert", &opts);
    let running = |c: &Container, attempt: i64| {
        common::wait_for(
            &format!("attempt {attempt} running"),
            Duration::from_secs(150),
            Duration::from_millis(300),
            || {
                let rows = history(c, "cut")?;
                Ok(rows
                    .iter()
                    .any(|r| {
                        field(r, "outcome") == "running" && r["attempt"].as_i64() == Some(attempt)
                    })
                    .then_some(()))
            },
        )
        .expect("the run is running")
    };
    c.exec_ok(&["systemctl", "start", "--no-block", "jobguard@cut.service"])
        .expect("start");
    running(&c, 1);
    c.power_cut().expect("power cut");
    c.boot_again().expect("boot again");
    // A recover pass after boot queues the slot once and starts it: attempt 2.
    running(&c, 2);
    assert!(
        c.exec(&["cat", "/var/lib/alert.txt"])
            .map(|o| !o.status.success())
            .unwrap_or(true),
        "no alert for a slot queued for its re-run"
    );
    c.power_cut().expect("power cut");
    c.boot_again().expect("boot again");
    let alert = common::wait_for(
        "the alert",
        Duration::from_secs(150),
        Duration::from_millis(300),
        || {
            Ok(c.exec(&["cat", "/var/lib/alert.txt"])
                .ok()
                .filter(|o| o.status.success())
                .map(|o| text(&o)))
        },
    )
    .expect("recover started the on_failure unit");
    assert_eq!(alert.trim(), "jobguard@cut.service", "{alert}");
    let rows = history(&c, "cut").expect("history");
    assert_eq!(field(&rows[0], "resolution"), "held", "{rows:#?}");
    let (code, v) = status(&c);
    assert_eq!(code, Some(1), "a held slot needs attention: {v}");
    // Another pass does not alert again.
    recover_pass(&c);
    std::thread::sleep(Duration::from_secs(2));
    let again = c.exec_ok(&["cat", "/var/lib/alert.txt"]).expect("alert");
    assert_eq!(again.lines().count(), 1, "{again}");
}

/// A job that its timer started and that still runs is neither a finding nor an idle
/// timer: systemd 252 keeps such a timer `running`, with no next elapse, until the
/// service ends. (A two-hour nightly job turned a monitoring check on `status` red every
/// night.) When the run ends, the timer waits again.
#[test]
fn a_job_its_timer_started_is_not_reported_while_it_runs() {
    let test = "a_job_its_timer_started_is_not_reported_while_it_runs";
    if !ready(test) {
        return;
    }
    let c = boot(
        "busy-timer",
        &jobguard_options(
            "[jobs.slow]\nschedule = \"*:*:0/5\"\ncommand = [\"/bin/sh\", \"-c\", \
             \"while [ ! -e /run/slow.release ]; do sleep 0.2; done\"]\n",
        ),
    );
    // Started by the timer, and its run claimed (the shim has written its record).
    let (code, v) = common::wait_for(
        "the timer to start the job",
        Duration::from_secs(30),
        Duration::from_millis(200),
        || {
            let timer = prop(&c, "jobguard@slow.timer", "SubState");
            let (code, v) = status(&c);
            Ok((timer == "running" && v["jobs"][0]["running"].is_object()).then_some((code, v)))
        },
    )
    .expect("the timer starts the job");
    assert_eq!(
        prop(&c, "jobguard@slow.timer", "NextElapseUSecRealtime"),
        "",
        "systemd 252 gives the timer no next elapse while its service runs"
    );
    assert_eq!(code, Some(0), "a running job is not a finding: {v}");
    let job = &v["jobs"][0];
    assert_eq!(job["timer_waiting"], true, "{v}");
    assert_eq!(job["needs_attention"], false, "{v}");
    assert!(
        job["next_elapse_usec"].is_i64(),
        "the next elapse is shown: {v}"
    );
    let out = c.exec(&["jobguard", "status"]).expect("status");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(!text(&out).contains("not waiting"), "{}", text(&out));

    c.exec_ok(&["touch", "/run/slow.release"]).expect("release");
    common::wait_for(
        "the timer to wait again",
        Duration::from_secs(30),
        Duration::from_millis(200),
        || {
            Ok(
                (!prop(&c, "jobguard@slow.timer", "NextElapseUSecRealtime").is_empty())
                    .then_some(()),
            )
        },
    )
    .expect("the timer waits again after the run");
}

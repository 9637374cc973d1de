//! `jobguard run` with real processes and a real SQLite store: the shim's guarantees on
//! one host (no overlap, a done slot is skipped, status pass-through, signals, crash of
//! the shim, timeouts, reports, the job's environment).

mod support;

use std::process::Stdio;

use std::time::{Duration, Instant};

use support::{Sandbox, stderr, stdout, wait_until};

/// A timer's fire time (2026-11-29T02:03:00Z, µs): marks a run as timer-started. It
/// does not pick the slot (systemd 252 keeps giving later firings the first one's).
const FIRED: &str = "1795917780000000";

/// The slot of a run now for the daily `02:00 UTC` schedule of [`job`]: the latest
/// 02:00 UTC at or before now, RFC 3339.
fn slot() -> String {
    slot_days_ago(0)
}

/// [`slot`] minus `days` days (negative: ahead).
fn slot_days_ago(days: i64) -> String {
    let now = jiff::Timestamp::now().as_second();
    let day = 86_400;
    let latest = (now - 7_200).div_euclid(day) * day + 7_200;
    jiff::Timestamp::from_second(latest - days * day)
        .expect("in range")
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

fn job(name: &str, command: &str, extra: &str) -> String {
    format!(
        "[jobs.{name}]\nschedule = \"*-*-* 02:00:00 UTC\"\ncommand = [\"/bin/sh\", \"-c\", {command:?}]\n{extra}\n"
    )
}

/// Whether the test runs as root, which it needs `to` do something; prints `SKIPPED`
/// (and fails in CI, which runs as root) when not.
fn as_root(to: &str) -> bool {
    if nix::unistd::geteuid().is_root() {
        return true;
    }
    eprintln!("SKIPPED: needs root to {to}");
    assert!(std::env::var_os("CI").is_none(), "CI runs as root");
    false
}

/// Starts `jobguard run NAME` as a timer would, with its stderr to `stderr`.
fn spawn_timer_run(sb: &Sandbox, name: &str, stderr: impl Into<Stdio>) -> std::process::Child {
    sb.cmd(&["run", name])
        .env("TRIGGER_TIMER_REALTIME_USEC", FIRED)
        .stderr(stderr)
        .spawn()
        .unwrap()
}

/// `jobguard recover`, as a person runs it (no timer's firing in its environment).
fn recover(sb: &Sandbox) -> std::process::Output {
    sb.cmd(&["recover"])
        .env_remove("TRIGGER_TIMER_REALTIME_USEC")
        .output()
        .expect("recover")
}

fn timer_run(sb: &Sandbox, name: &str) -> std::process::Output {
    sb.cmd(&["run", name])
        .env("TRIGGER_TIMER_REALTIME_USEC", FIRED)
        .output()
        .expect("run")
}

#[test]
fn second_trigger_for_a_succeeded_slot_is_a_skip_that_says_who() {
    let sb = Sandbox::new(&job(
        "sync",
        "echo ran >> \"$OUT\"",
        "environment = { OUT = \"@DIR@/out\" }",
    ));

    let first = timer_run(&sb, "sync");
    assert_eq!(first.status.code(), Some(0), "{}", stderr(&first));
    assert!(stderr(&first).contains("start"), "{}", stderr(&first));
    let second = timer_run(&sb, "sync");
    assert_eq!(
        second.status.code(),
        Some(0),
        "a skip exits 0: {}",
        stderr(&second)
    );
    let err = stderr(&second);
    assert!(
        err.contains("skip") && err.contains("already succeeded"),
        "{err}"
    );
    let slot = slot();
    assert!(err.contains(&slot), "the skip names the slot: {err}");
    // A manual start in the same slot's period is also a skip.
    let manual = sb.run(&["run", "sync", "--slot", &slot]);
    assert!(
        stderr(&manual).contains("already succeeded"),
        "{}",
        stderr(&manual)
    );
    assert_eq!(sb.lines("out"), 1, "the command ran once");

    let h = sb.history("sync");
    assert_eq!(h.len(), 1);
    assert_eq!(h[0]["outcome"], "succeeded");
    assert_eq!(h[0]["slot"], slot);
    assert_eq!(h[0]["attempt"], 1);
    assert_eq!(h[0]["forced"], false);
    assert_eq!(h[0]["trigger"], "timer");
    for key in [
        "run_id",
        "job",
        "slot",
        "host",
        "started_at",
        "finished_at",
        "outcome",
        "exit_status",
        "attempt",
        "forced",
    ] {
        assert!(h[0].get(key).is_some(), "history --json has {key}");
    }

    // --force runs again and is recorded as forced.
    let forced = sb
        .cmd(&["run", "sync", "--force"])
        .env("TRIGGER_TIMER_REALTIME_USEC", FIRED)
        .output()
        .unwrap();
    assert_eq!(forced.status.code(), Some(0), "{}", stderr(&forced));
    assert_eq!(sb.lines("out"), 2);
    let h = sb.history("sync");
    assert_eq!(h[0]["forced"], true);
    assert_eq!(h[0]["attempt"], 2);
}

#[test]
fn a_second_instance_gives_up_at_once_while_the_first_runs() {
    let sb = Sandbox::new(&job(
        "slow",
        "echo start >> \"$OUT\"; sleep 3",
        "environment = { OUT = \"@DIR@/out\" }",
    ));
    let mut first = spawn_timer_run(&sb, "slow", Stdio::piped());
    // Wait until the command runs.
    assert!(
        wait_until(10, || sb.lines("out") > 0),
        "the command started"
    );
    let mut others = Vec::new();
    for _ in 0..4 {
        others.push(
            sb.cmd(&["run", "slow"])
                .env("TRIGGER_TIMER_REALTIME_USEC", FIRED)
                .stderr(Stdio::piped())
                .spawn()
                .unwrap(),
        );
    }
    for o in others {
        let out = o.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(0));
        assert!(
            stderr(&out).contains("lock"),
            "skipped on the lock: {}",
            stderr(&out)
        );
    }
    assert!(
        first.try_wait().unwrap().is_none(),
        "the others returned while the first still ran"
    );
    assert!(first.wait().unwrap().success());
    assert_eq!(sb.lines("out"), 1);
}

#[test]
fn exit_status_passes_through_and_a_failed_slot_runs_again() {
    let sb = Sandbox::new(&job("fails", "exit 3", ""));
    let out = timer_run(&sb, "fails");
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let again = timer_run(&sb, "fails");
    assert_eq!(again.status.code(), Some(3));
    let h = sb.history("fails");
    assert_eq!(h.len(), 2);
    assert_eq!(h[0]["outcome"], "failed");
    assert_eq!(h[0]["exit_status"], 3);
    assert_eq!(h[0]["attempt"], 2);
}

#[test]
fn death_by_signal_becomes_128_plus_n() {
    let sb = Sandbox::new(&job("killed", "kill -KILL $$", ""));
    let out = timer_run(&sb, "killed");
    assert_eq!(out.status.code(), Some(137), "{}", stderr(&out));
    assert_eq!(sb.history("killed")[0]["outcome"], "failed");
}

#[test]
fn missing_command_is_127_and_recorded() {
    let sb = Sandbox::new("[jobs.nocmd]\nschedule = \"daily\"\ncommand = [\"/nonexistent/cmd\"]\n");
    let out = sb.run(&["run", "nocmd"]);
    assert_eq!(out.status.code(), Some(127), "{}", stderr(&out));
    let h = sb.history("nocmd");
    assert_eq!(h[0]["outcome"], "failed");
    assert_eq!(h[0]["reason"], "exec");
}

#[test]
fn unknown_job_is_a_config_error() {
    let sb = Sandbox::new(&job("a", "true", ""));
    let out = sb.run(&["run", "b"]);
    assert_eq!(out.status.code(), Some(78));
    assert!(
        stderr(&out).contains("no job named \"b\""),
        "{}",
        stderr(&out)
    );
}

#[test]
fn the_job_gets_its_slot_key_token_and_report_file() {
    let sb = Sandbox::new(&job(
        "env",
        "env | grep ^JOBGUARD_ | sort > \"$OUT\"; printf 'rows_read=3000\\nrows_inserted=2000\\nbatch=b1\\n' >> \"$JOBGUARD_REPORT\"",
        "environment = { OUT = \"@DIR@/out\" }",
    ));
    let out = timer_run(&sb, "env");
    assert!(out.status.success(), "{}", stderr(&out));
    let env = sb.read("out");
    assert!(env.contains("JOBGUARD_JOB=env\n"), "{env}");
    let slot = slot();
    assert!(env.contains(&format!("JOBGUARD_SLOT={slot}\n")), "{env}");
    assert!(
        env.contains(&format!("JOBGUARD_IDEMPOTENCY_KEY=env@{slot}\n")),
        "{env}"
    );
    assert!(env.contains("JOBGUARD_ATTEMPT=1\n"), "{env}");
    assert!(env.contains("JOBGUARD_FENCING_TOKEN="), "{env}");
    assert!(env.contains("JOBGUARD_RUN_ID="), "{env}");
    assert!(env.contains("JOBGUARD_REPORT="), "{env}");
    let h = sb.history("env");
    assert_eq!(h[0]["report"]["rows_read"], "3000");
    assert_eq!(h[0]["report"]["batch"], "b1");
    assert_eq!(h[0]["idempotency_key"], format!("env@{slot}"));
    assert!(
        stderr(&out).contains("rows_inserted=2000"),
        "logged at finish: {}",
        stderr(&out)
    );
    // The fencing token given to the job is the one stored with the run.
    let token = env
        .lines()
        .find_map(|l| l.strip_prefix("JOBGUARD_FENCING_TOKEN="))
        .unwrap();
    assert_eq!(h[0]["fencing_token"].to_string(), token);
}

#[test]
fn timeout_stops_the_command_and_records_it() {
    let sb = Sandbox::new(&job(
        "hang",
        "sleep 30",
        "timeout = \"1s\"\nkill_grace = \"1s\"",
    ));
    let out = timer_run(&sb, "hang");
    assert_eq!(out.status.code(), Some(124), "{}", stderr(&out));
    let h = sb.history("hang");
    assert_eq!(h[0]["outcome"], "failed");
    assert_eq!(h[0]["reason"], "timeout");
}

#[test]
fn sigterm_is_forwarded_to_the_command() {
    let sb = Sandbox::new(&job(
        "term",
        "trap 'echo got-term >> \"$OUT\"; exit 0' TERM; echo up >> \"$OUT\"; while :; do sleep 0.1; done",
        "environment = { OUT = \"@DIR@/out\" }",
    ));
    let child = spawn_timer_run(&sb, "term", Stdio::piped());
    assert!(
        wait_until(10, || sb.read("out").contains("up")),
        "the command started"
    );
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(sb.read("out").contains("got-term"), "{}", stderr(&out));
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(sb.history("term")[0]["outcome"], "succeeded");
}

#[test]
fn a_command_stopped_by_sigterm_is_interrupted_and_held() {
    let sb = Sandbox::new(&job(
        "stop",
        "echo up >> \"$OUT\"; sleep 30",
        "environment = { OUT = \"@DIR@/out\" }",
    ));
    let child = spawn_timer_run(&sb, "stop", Stdio::piped());
    assert!(
        wait_until(10, || sb.read("out").contains("up")),
        "the command started"
    );
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(143), "{}", stderr(&out));
    let h = sb.history("stop");
    assert_eq!(h[0]["outcome"], "interrupted");
    assert_eq!(h[0]["reason"], "stopped-term");
    assert_eq!(h[0]["resolution"], "held");
    // A held slot is skipped until a person decides.
    let again = timer_run(&sb, "stop");
    assert!(stderr(&again).contains("held"), "{}", stderr(&again));
    let resolved = sb.run(&["resolve", "stop", &slot(), "--done"]);
    assert!(resolved.status.success(), "{}", stderr(&resolved));
    let after = timer_run(&sb, "stop");
    assert!(
        stderr(&after).contains("resolved as done"),
        "{}",
        stderr(&after)
    );
}

#[test]
fn killing_the_shim_kills_the_command_and_recover_reruns_the_slot_once_its_lease_expired() {
    let sb = Sandbox::new(&job(
        "crash",
        "echo $$ >> \"$OUT\"; if [ \"$JOBGUARD_ATTEMPT\" = 1 ]; then sleep 60; fi",
        "lease_ttl = \"5s\"\nkill_grace = \"1s\"\nenvironment = { OUT = \"@DIR@/out\" }",
    ));
    let mut child = spawn_timer_run(&sb, "crash", Stdio::null());
    assert!(
        wait_until(10, || sb.lines("out") > 0),
        "the command started"
    );
    let cmd_pid: i32 = sb.read("out").trim().parse().unwrap();
    child.kill().unwrap(); // SIGKILL: no chance to record anything
    child.wait().unwrap();
    // PR_SET_PDEATHSIG: the command does not run on unguarded.
    assert!(
        wait_until(5, || !std::path::Path::new(&format!("/proc/{cmd_pid}"))
            .exists()),
        "command {cmd_pid} outlived the shim"
    );
    assert_eq!(sb.history("crash")[0]["outcome"], "running");
    let killed = Instant::now();

    // The holder's process is gone, but its lease is unexpired by the store's clock: local
    // evidence alone ends no lease (a copy of this machine resumed from one snapshot has
    // this boot id and pid too). The record waits for its lease.
    let rec = recover(&sb);
    assert!(rec.status.success(), "{}", stderr(&rec));
    if killed.elapsed() < Duration::from_secs(3) {
        let h = sb.history("crash");
        assert_eq!(h.len(), 1, "{h:?}");
        assert_eq!(h[0]["outcome"], "running", "{}", stderr(&rec));
        assert_eq!(sb.lines("out"), 1, "nothing ran the slot again");
    }
    std::thread::sleep(Duration::from_secs(5).saturating_sub(killed.elapsed()));

    // Without systemd, recover re-runs the slot itself.
    let rec = recover(&sb);
    let err = stderr(&rec);
    assert!(rec.status.success(), "{err}");
    assert!(
        err.contains("interrupted") && err.contains("process-gone"),
        "{err}"
    );
    let h = sb.history("crash");
    assert_eq!(h.len(), 2, "{h:?}");
    assert_eq!(h[0]["outcome"], "succeeded");
    assert_eq!(h[0]["attempt"], 2);
    assert_eq!(h[0]["slot"], slot());
    assert_eq!(h[0]["trigger"], "rerun");
    assert_eq!(h[1]["outcome"], "interrupted");
    assert_eq!(h[1]["resolution"], "rerun");
    // Nothing is left to do: a second recover changes nothing.
    let rec2 = sb.run(&["recover"]);
    assert!(rec2.status.success());
    assert_eq!(sb.history("crash").len(), 2);
}

/// A run cut off and found long after (its host was off) keeps its own time as its
/// duration in `status` and `history`: it ended at the latest when its lease expired, not
/// when recover found it.
#[test]
fn a_cut_runs_duration_is_its_own_time_not_the_downtime() {
    let sb = Sandbox::new(&job(
        "cut",
        "echo $$ >> \"$OUT\"; sleep 60",
        "lease_ttl = \"3s\"\nkill_grace = \"1s\"\non_interrupted = \"hold\"\n\
         environment = { OUT = \"@DIR@/out\" }",
    ));
    let begun = Instant::now();
    let mut child = spawn_timer_run(&sb, "cut", Stdio::null());
    assert!(
        wait_until(10, || sb.lines("out") > 0),
        "the command started"
    );
    std::thread::sleep(Duration::from_secs(1));
    child.kill().unwrap();
    child.wait().unwrap();
    // At most this long the run can have lived: until the kill, plus its lease's rest.
    let alive = begun.elapsed() + Duration::from_secs(3);
    // The "downtime": the cut is found well after the lease expired.
    std::thread::sleep(Duration::from_secs(10));
    let rec = recover(&sb);
    assert!(rec.status.success(), "{}", stderr(&rec));
    let found = begun.elapsed();
    let h = sb.history("cut");
    assert_eq!(h[0]["outcome"], "interrupted", "{h:?}");
    let took = h[0]["duration_usec"].as_i64().expect("a duration");
    assert!(
        took >= 1_000_000 && u128::try_from(took).unwrap() <= alive.as_micros(),
        "the run lived 1 s to {alive:?}, found cut after {found:?}; recorded {took} µs"
    );
    let st = sb.cmd(&["status", "--json"]).output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&st.stdout).unwrap();
    assert_eq!(
        v["jobs"][0]["last"]["duration_usec"].as_i64(),
        Some(took),
        "{v}"
    );
    let table = stdout(&sb.cmd(&["status", "--wide"]).output().unwrap());
    let mut lines = table.lines();
    let header = lines.next().unwrap_or_default();
    let row = lines.next().unwrap_or_default();
    let col = header.find("DURATION").unwrap_or_else(|| panic!("{table}"));
    let cell = row[col..].split_whitespace().next().unwrap_or_default();
    assert!(cell.ends_with('s') && cell.len() <= 4, "{table}");
}

#[test]
fn explicit_slot_must_be_an_elapse() {
    let sb = Sandbox::new(&job("s", "true", ""));
    let bad = sb.run(&["run", "s", "--slot", "2026-11-29T02:00:01Z"]);
    assert_eq!(bad.status.code(), Some(78), "{}", stderr(&bad));
    assert!(stderr(&bad).contains("not an elapse"), "{}", stderr(&bad));
    let good = sb.run(&["run", "s", "--slot", "2026-11-28T02:00:00Z"]);
    assert!(good.status.success(), "{}", stderr(&good));
    assert_eq!(sb.history("s")[0]["slot"], "2026-11-28T02:00:00Z");
}

#[test]
fn a_gap_of_missed_slots_is_logged() {
    let sb = Sandbox::new(&job("gap", "true", ""));
    let first = slot_days_ago(3);
    let out = sb.run(&["run", "gap", "--slot", &first]);
    assert!(out.status.success(), "{}", stderr(&out));
    // Three days later: the two slots in between never ran.
    let out = timer_run(&sb, "gap");
    let err = stderr(&out);
    assert!(
        err.contains("gap") && err.contains("2 slot(s) never ran"),
        "{err}"
    );
    assert!(
        err.contains(&slot_days_ago(2)) && err.contains(&slot_days_ago(1)),
        "{err}"
    );
}

#[test]
fn a_daemonized_grandchild_does_not_keep_the_lock() {
    let sb = Sandbox::new(&job(
        "daemon",
        "setsid sleep 20 >/dev/null 2>&1 < /dev/null & echo started",
        "",
    ));
    assert!(timer_run(&sb, "daemon").status.success());
    let again = sb
        .cmd(&["run", "daemon", "--force"])
        .env("TRIGGER_TIMER_REALTIME_USEC", FIRED)
        .output()
        .unwrap();
    assert!(!stderr(&again).contains("lock"), "{}", stderr(&again));
    assert!(again.status.success());
    let _ = std::process::Command::new("pkill")
        .args(["-f", "^sleep 20$"])
        .status();
}

#[test]
fn user_jobs_run_as_that_user_and_cannot_touch_the_ledger_or_locks() {
    if !as_root("switch users") {
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let sb = Sandbox::new(&job(
        "asuser",
        "id -u > \"$OUT/uid\"; id -G > \"$OUT/groups\"; echo \"$HOME $USER\" > \"$OUT/home\"; \
         if echo x >> \"$DB\"; then echo writable; else echo denied; fi > \"$OUT/db\"; \
         if echo x >> \"$LOCKS/other.lock\"; then echo writable; else echo denied; fi > \"$OUT/lock\"",
        "user = \"nobody\"\nenvironment = { OUT = \"OUTDIR\", DB = \"DBPATH\", LOCKS = \"LOCKDIR\" }",
    ));
    std::fs::set_permissions(sb.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
    let out_dir = sb.file("out");
    std::fs::create_dir(&out_dir).unwrap();
    std::fs::set_permissions(&out_dir, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let jobs = std::fs::read_to_string(sb.file("jobs.toml")).unwrap();
    let jobs = jobs
        .replace("OUTDIR", &out_dir.display().to_string())
        .replace(
            "DBPATH",
            &sb.file("state/jobguard.db").display().to_string(),
        )
        .replace("LOCKDIR", &sb.file("run/lock").display().to_string());
    std::fs::write(sb.file("jobs.toml"), jobs).unwrap();
    let out = timer_run(&sb, "asuser");
    assert!(out.status.success(), "{}", stderr(&out));
    let nobody = nix::unistd::User::from_name("nobody").unwrap().unwrap();
    assert_eq!(sb.read("out/uid").trim(), nobody.uid.to_string());
    assert!(
        !sb.read("out/groups").split_whitespace().any(|g| g == "0"),
        "root's group dropped"
    );
    assert!(
        sb.read("out/home")
            .starts_with(&nobody.dir.display().to_string())
    );
    assert_eq!(
        sb.read("out/db").trim(),
        "denied",
        "the job cannot write the ledger"
    );
    assert_eq!(
        sb.read("out/lock").trim(),
        "denied",
        "the job cannot reach the locks"
    );
    assert_eq!(sb.history("asuser")[0]["outcome"], "succeeded");
}

#[test]
fn a_clock_behind_does_not_run_an_old_slot_and_future_slots_are_refused() {
    // A clock a day behind the one that ran the newest slot (e.g. a wrong RTC before time
    // sync): the newest slot is tomorrow's, recorded within clock_tolerance.
    let sb = Sandbox::new(&job("clock", "true", "clock_tolerance = \"2d\""));
    let ahead = slot_days_ago(-1);
    let out = sb.run(&["run", "clock", "--slot", &ahead, "--force"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = timer_run(&sb, "clock");
    assert!(out.status.success());
    assert!(
        stderr(&out).contains(&format!("older than slot {ahead}")),
        "{}",
        stderr(&out)
    );
    assert_eq!(sb.history("clock").len(), 1);
    // On purpose, with --slot, it runs.
    let out = sb.run(&["run", "clock", "--slot", &slot_days_ago(1)]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(sb.history("clock").len(), 2);
    let future = sb.run(&["run", "clock", "--slot", "2099-01-01T02:00:00Z"]);
    assert_eq!(future.status.code(), Some(2), "{}", stderr(&future));
    assert!(stderr(&future).contains("in the future"));
}

#[test]
fn a_slot_recorded_ahead_of_the_clock_does_not_hold_back_the_timer() {
    // A forced run of a slot far ahead (or a clock that was ahead when it ran) must not
    // make every later trigger a "slot-behind" skip until that date.
    let sb = Sandbox::new(&job("ahead", "true", ""));
    let out = sb.run(&["run", "ahead", "--slot", "2099-01-01T02:00:00Z", "--force"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = timer_run(&sb, "ahead");
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!stderr(&out).contains("older than"), "{}", stderr(&out));
    let h = sb.history("ahead");
    assert_eq!(h.len(), 2, "{h:?}");
    assert_eq!(h[0]["slot"], slot(), "{h:?}");
    assert_eq!(h[0]["outcome"], "succeeded", "{h:?}");
}

fn wait_for_lines(sb: &Sandbox, name: &str, n: usize) {
    wait_until(10, || sb.lines(name) >= n);
}

#[test]
fn a_stop_during_a_queued_rerun_does_not_start_the_current_slot() {
    // The 28th fails once, is queued for a re-run by a person, and the re-run is slow.
    let sb = Sandbox::new(&job(
        "queue",
        "echo \"$JOBGUARD_SLOT\" >> \"$OUT\"; case \"$JOBGUARD_SLOT\" in 2026-11-28*) \
         if [ -e \"$OUT.go\" ]; then sleep 30; fi; exit 1;; esac",
        "environment = { OUT = \"@DIR@/out\" }",
    ));
    let first = sb.run(&["run", "queue", "--slot", "2026-11-28T02:00:00Z"]);
    assert_eq!(first.status.code(), Some(1), "{}", stderr(&first));
    let resolved = sb.run(&["resolve", "queue", "2026-11-28T02:00:00Z", "--rerun"]);
    assert!(resolved.status.success(), "{}", stderr(&resolved));
    std::fs::write(sb.file("out.go"), "").unwrap();

    // The timer fires for the 29th: the queued 28th runs first; an operator stops it.
    let child = spawn_timer_run(&sb, "queue", Stdio::piped());
    wait_for_lines(&sb, "out", 2);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(143), "{}", stderr(&out));
    assert_eq!(
        sb.read("out").lines().collect::<Vec<_>>(),
        ["2026-11-28T02:00:00Z", "2026-11-28T02:00:00Z"],
        "a stopped shim starts nothing more: {}",
        stderr(&out)
    );
    let h = sb.history("queue");
    assert!(h.iter().all(|r| r["slot"] != slot()), "{h:?}");
    assert_eq!(h[0]["reason"], "stopped-term");
}

#[test]
fn a_runtime_dir_others_can_write_or_own_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let sb = Sandbox::new(&job(
        "rt",
        "echo ran >> \"$OUT\"",
        "environment = { OUT = \"@DIR@/out\" }",
    ));
    // e.g. /tmp/jobguard-UID made in advance by another user to hold or swap the locks.
    let rt = sb.file("run");
    std::fs::create_dir(&rt).unwrap();
    std::fs::set_permissions(&rt, std::fs::Permissions::from_mode(0o777)).unwrap();
    let out = timer_run(&sb, "rt");
    assert_eq!(out.status.code(), Some(71), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("writable by others"),
        "{}",
        stderr(&out)
    );
    assert_eq!(sb.lines("out"), 0, "nothing ran");
    if nix::unistd::geteuid().is_root() {
        std::fs::set_permissions(&rt, std::fs::Permissions::from_mode(0o755)).unwrap();
        let nobody = nix::unistd::User::from_name("nobody").unwrap().unwrap();
        nix::unistd::chown(&rt, Some(nobody.uid), None).unwrap();
        let out = timer_run(&sb, "rt");
        assert_eq!(out.status.code(), Some(71), "{}", stderr(&out));
        assert!(stderr(&out).contains("owned by uid"), "{}", stderr(&out));
        nix::unistd::chown(&rt, Some(nix::unistd::geteuid()), None).unwrap();
    }
    let out = timer_run(&sb, "rt");
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(sb.lines("out"), 1);
}

/// Whether `pid` runs (exists and is not a zombie).
fn running(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            let after = &s[s.rfind(')').unwrap() + 1..];
            !after.trim_start().starts_with('Z')
        })
        .unwrap_or(false)
}

#[test]
fn the_commands_children_left_by_a_killed_shim_never_overlap_the_rerun() {
    // The command's own child is a grandchild of the shim: PR_SET_PDEATHSIG does not reach
    // it, and without systemd no cgroup ends it.
    let sb = Sandbox::new(&job(
        "orphan",
        "if [ \"$JOBGUARD_ATTEMPT\" = 1 ]; then sh -c 'echo $$ > \"$OUT.pid\"; sleep 60; echo late >> \"$OUT\"'; fi; \
         echo \"attempt $JOBGUARD_ATTEMPT\" >> \"$OUT\"",
        "lease_ttl = \"3s\"\nkill_grace = \"1s\"\nenvironment = { OUT = \"@DIR@/out\" }",
    ));
    let mut shim = spawn_timer_run(&sb, "orphan", Stdio::null());
    wait_for_lines(&sb, "out.pid", 1);
    let orphan: i32 = sb.read("out.pid").trim().parse().unwrap();
    shim.kill().unwrap();
    shim.wait().unwrap();
    assert!(running(orphan), "the grandchild outlives the shim");
    // Past the lease (3 s) by the store's clock: before, the run is not cut.
    std::thread::sleep(Duration::from_millis(3500));

    let rec = sb.run(&["recover"]);
    let survived = running(orphan);
    if survived {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(orphan),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    assert!(rec.status.success(), "{}", stderr(&rec));
    assert!(
        !survived,
        "the cut run's processes are ended before its slot runs again: {}",
        stderr(&rec)
    );
    assert_eq!(sb.read("out"), "attempt 2\n");
    let h = sb.history("orphan");
    assert_eq!(h[0]["outcome"], "succeeded", "{h:?}");
    assert_eq!(h[1]["outcome"], "interrupted");
}

/// The default `status` table fits 100 columns (jobs of names and schedules up to 16 and
/// 18 characters: a failed run, a running one, one that never ran); `--wide` keeps every
/// detail, the hosts among them.
#[test]
fn status_fits_100_columns_and_wide_shows_every_detail() {
    let sb = Sandbox::new(&format!(
        "{}{}{}{}",
        job("nightly-backup01", "exit 3", ""),
        job("store-sync-daily", "sleep 20", ""),
        job("never-ran-report", "true", ""),
        job("typo-in-its-keys", "true", "catch_up = \"al\""),
    ));
    assert_eq!(timer_run(&sb, "nightly-backup01").status.code(), Some(3));
    let mut running = sb
        .cmd(&["run", "store-sync-daily"])
        .env("TRIGGER_TIMER_REALTIME_USEC", FIRED)
        .spawn()
        .unwrap();
    assert!(
        wait_until(10, || stdout(&sb.run(&["status", "--json"]))
            .contains("\"outcome\":\"running\"")),
        "the run started"
    );
    let narrow = stdout(&sb.run(&["status"]));
    let wide = stdout(&sb.run(&["status", "--wide"]));
    let _ = running.kill();
    let _ = running.wait();
    // The table and what needs attention (the failed slot and what to do about it).
    assert!(narrow.contains("needs attention"), "{narrow}");
    for line in narrow.lines() {
        assert!(
            line.chars().count() <= 100,
            "{} columns: {line}\n{narrow}",
            line.chars().count()
        );
    }
    let row = |table: &str, job: &str| {
        table
            .lines()
            .find(|l| l.starts_with(&format!("{job} ")))
            .unwrap_or_else(|| panic!("{job} in {table}"))
            .to_string()
    };
    assert!(
        row(&narrow, "store-sync-daily").contains(" running "),
        "{narrow}"
    );
    assert!(
        row(&narrow, "nightly-backup01").contains("02:00Z failed"),
        "{narrow}"
    );
    assert!(
        row(&narrow, "never-ran-report").contains("never ran"),
        "{narrow}"
    );
    assert!(
        row(&narrow, "typo-in-its-keys").contains(" refused "),
        "{narrow}"
    );
    let host = nix::unistd::gethostname()
        .unwrap()
        .to_string_lossy()
        .to_string();
    assert!(
        !row(&narrow, "nightly-backup01").contains(&format!(" on {host}")),
        "{narrow}"
    );
    assert!(
        row(&wide, "nightly-backup01").contains(&format!("T02:00:00Z failed on {host}")),
        "{wide}"
    );
    assert!(row(&wide, "store-sync-daily").contains("since "), "{wide}");
    assert!(wide.lines().next().unwrap().contains("RUNNING"), "{wide}");
}

#[test]
fn status_lists_every_job_even_when_its_store_cannot_be_read() {
    let sb = Sandbox::new(&job("lost", "true", ""));
    std::fs::create_dir_all(sb.file("state")).unwrap();
    std::fs::write(sb.file("state/jobguard.db"), vec![0xa5u8; 8192]).unwrap();
    let out = sb.run(&["status"]);
    assert_ne!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(!text.contains("no jobs"), "{text}");
    assert!(
        text.lines()
            .any(|l| l.starts_with("lost ") && l.contains("store unreadable")),
        "{text}"
    );
}

#[test]
fn a_store_file_that_cannot_be_read_is_named_by_run_and_listed_by_status() {
    let sb = Sandbox::new(&job("nofile", "true", "store_file = \"@DIR@/missing.url\""));
    let out = timer_run(&sb, "nofile");
    assert_eq!(out.status.code(), Some(78), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("cannot read store_file") && !stderr(&out).contains("\"\""),
        "{}",
        stderr(&out)
    );
    let out = sb.run(&["status"]);
    assert_eq!(out.status.code(), Some(78), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.lines()
            .any(|l| l.starts_with("nofile ") && l.contains("store unreadable")),
        "{text}"
    );
}

#[test]
fn a_store_disk_full_at_the_end_of_a_run_is_waited_out_not_turned_into_a_rerun() {
    if !as_root("mount a small file system") {
        return;
    }
    // The store on a 1 MiB file system that the job fills; a cleaner (here the test, in
    // life e.g. logrotate) frees it 5 s after the command ended. The lease (30s) still
    // holds meanwhile.
    let fs_dir = tempfile::tempdir().unwrap();
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=1m", "tmpfs"])
        .arg(fs_dir.path())
        .status()
        .unwrap();
    assert!(mounted.success(), "mount tmpfs");
    struct Unmount(std::path::PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount").arg(&self.0).status();
        }
    }
    let _unmount = Unmount(fs_dir.path().to_path_buf());
    let fill = fs_dir.path().join("fill");
    let sb = Sandbox::new(&job(
        "full",
        "echo ran >> \"$OUT\"; cat /dev/zero > \"$FILL\" 2>/dev/null; echo filled >> \"$OUT\"",
        &format!(
            "lease_ttl = \"30s\"\nenvironment = {{ OUT = \"@DIR@/out\", FILL = {:?} }}",
            fill.display().to_string()
        ),
    ));
    let jobs = std::fs::read_to_string(sb.file("jobs.toml"))
        .unwrap()
        .replace(
            "sqlite://state/jobguard.db",
            &format!("sqlite://{}/jobguard.db", fs_dir.path().display()),
        );
    std::fs::write(sb.file("jobs.toml"), jobs).unwrap();
    let out_file = sb.file("out");
    let cleaner = std::thread::spawn(move || {
        let t0 = Instant::now();
        while !std::fs::read_to_string(&out_file)
            .unwrap_or_default()
            .contains("filled")
            && t0.elapsed() < Duration::from_secs(20)
        {
            std::thread::sleep(Duration::from_millis(20));
        }
        std::thread::sleep(Duration::from_secs(5));
        let _ = std::fs::remove_file(&fill);
    });
    let out = timer_run(&sb, "full");
    cleaner.join().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(!stderr(&out).contains("NOT recorded"), "{}", stderr(&out));
    let h = sb.history("full");
    assert_eq!(h[0]["outcome"], "succeeded", "{h:?}");
    // Nothing for recover to re-run: the command ran once.
    assert!(sb.run(&["recover"]).status.success());
    assert_eq!(sb.read("out"), "ran\nfilled\n");
}

#[test]
fn descriptors_the_shim_inherited_do_not_reach_the_command() {
    // A root shell (or a caller's leaked pipe) holding fd 7 on a file: a job running as
    // another user must not get it, as systemd gives a service only 0, 1 and 2.
    let sb = Sandbox::new(&job(
        "fds",
        "ls /proc/self/fd > \"$OUT\"",
        "environment = { OUT = \"@DIR@/out\" }",
    ));
    std::fs::write(sb.file("secret"), "x").unwrap();
    let mut cmd = sb.cmd(&["run", "fds"]);
    let secret = std::fs::File::open(sb.file("secret")).unwrap();
    let raw = std::os::fd::AsRawFd::as_raw_fd(&secret);
    // SAFETY: dup2 in the forked test child before exec, async-signal-safe.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut cmd, move || {
            if libc::dup2(raw, 7) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let fds: Vec<String> = sb.read("out").lines().map(str::to_string).collect();
    assert!(fds.contains(&"1".to_string()), "{fds:?}");
    assert!(
        !fds.contains(&"7".to_string()),
        "fd 7 leaked into the job: {fds:?}"
    );
}

#[test]
fn the_command_starts_as_execvp_would_in_a_session_of_its_own_with_a_clean_signal_state() {
    // The command is found in the PATH of its own environment, past a file it may not
    // execute; a file without `#!` is run by /bin/sh; it gets its working directory,
    // /dev/null as stdin, a session of its own, no blocked signal and SIGPIPE not ignored
    // (the shim itself ignores SIGPIPE and blocks SIGTERM, SIGINT, SIGHUP and SIGCHLD).
    let config = |name: &str, argv: &str| {
        format!(
            "[jobs.{name}]\nschedule = \"daily\"\ncommand = {argv}\nworking_directory = \"@DIR@/wd\"\n\
             environment = {{ PATH = \"@DIR@/noexec:@DIR@/bin:/usr/bin:/bin\", OUT = \"@DIR@/out\" }}\n"
        )
    };
    let sb = Sandbox::new(&format!(
        "{}{}{}",
        config("script", r#"["probe", "arg 1"]"#),
        config(
            "status",
            r#"["grep", "-E", "^(Pid|NSsid|SigBlk|SigIgn):", "/proc/self/status"]"#
        ),
        config("denied", r#"["denied"]"#),
    ));
    use std::os::unix::fs::PermissionsExt;
    for dir in ["wd", "noexec", "bin"] {
        std::fs::create_dir(sb.file(dir)).unwrap();
    }
    let script = "readlink /proc/$$/fd/0 > \"$OUT\"; pwd >> \"$OUT\"; echo \"$0|$1\" >> \"$OUT\"\n";
    for (path, mode) in [
        ("noexec/probe", 0o644),
        ("bin/probe", 0o755),
        ("noexec/denied", 0o644),
    ] {
        std::fs::write(sb.file(path), script).unwrap();
        std::fs::set_permissions(sb.file(path), std::fs::Permissions::from_mode(mode)).unwrap();
    }
    let out = sb.run(&["run", "script"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let dir = sb.file("").display().to_string();
    let dir = dir.trim_end_matches('/');
    assert_eq!(
        sb.read("out"),
        format!("/dev/null\n{dir}/wd\n{dir}/bin/probe|arg 1\n")
    );

    let out = sb.run(&["run", "status"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let status = String::from_utf8_lossy(&out.stdout).to_string();
    let field = |name: &str| {
        let line = status.lines().find(|l| l.starts_with(&format!("{name}:")));
        let value = line.unwrap_or_else(|| panic!("no {name} in {status}"));
        value.split_once(':').unwrap().1.trim().to_string()
    };
    assert_eq!(
        field("NSsid"),
        field("Pid"),
        "not a session leader: {status}"
    );
    assert_eq!(
        u64::from_str_radix(&field("SigBlk"), 16).unwrap(),
        0,
        "{status}"
    );
    let ignored = u64::from_str_radix(&field("SigIgn"), 16).unwrap();
    assert_eq!(
        ignored & (1 << (libc::SIGPIPE - 1)),
        0,
        "SIGPIPE ignored: {status}"
    );

    let out = sb.run(&["run", "denied"]);
    assert_eq!(out.status.code(), Some(126), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("ermission denied"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn the_command_search_keeps_execvps_errors_and_its_meaning_of_path_entries() {
    // execvp(3): a path with a `/` reports its own error (ENOTDIR: 126, not 127); an
    // empty PATH entry is the working directory, and the program is named as given
    // (`cmdx`, not `./cmdx`); an entry too long for a path is passed over; a name longer
    // than NAME_MAX fails at once (126, not 127).
    let long = format!("/{}", "a".repeat(5000));
    let sb = Sandbox::new(&format!(
        "[jobs.notdir]\nschedule = \"daily\"\ncommand = [\"/etc/passwd/x\"]\n\
         [jobs.empty]\nschedule = \"daily\"\ncommand = [\"cmdx\"]\nworking_directory = \"@DIR@/wd\"\n\
         environment = {{ PATH = \"@DIR@/none::/usr/bin:/bin\", OUT = \"@DIR@/out\" }}\n\
         [jobs.long]\nschedule = \"daily\"\ncommand = [\"true\"]\nenvironment = {{ PATH = \"{long}:/usr/bin:/bin\" }}\n\
         [jobs.longname]\nschedule = \"daily\"\ncommand = [\"{}\"]\n",
        "x".repeat(300)
    ));
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir(sb.file("wd")).unwrap();
    std::fs::write(sb.file("wd/cmdx"), "echo \"$0\" > \"$OUT\"\n").unwrap();
    std::fs::set_permissions(sb.file("wd/cmdx"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = sb.run(&["run", "notdir"]);
    assert_eq!(out.status.code(), Some(126), "{}", stderr(&out));
    assert!(stderr(&out).contains("Not a directory"), "{}", stderr(&out));
    let out = sb.run(&["run", "empty"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(sb.read("out"), "cmdx\n");
    let out = sb.run(&["run", "long"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = sb.run(&["run", "longname"]);
    assert_eq!(out.status.code(), Some(126), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("File name too long"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_user_jobs_working_directory_is_entered_before_the_switch_to_its_user() {
    // As before the command was started by clone(2): the shim (root) enters the working
    // directory, then drops to the job's user, so a directory only root may enter works.
    if !as_root("switch users") {
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let sb = Sandbox::new(
        "[jobs.private]\nschedule = \"daily\"\ncommand = [\"/bin/true\"]\nuser = \"nobody\"\n\
         working_directory = \"@DIR@/private\"\n",
    );
    std::fs::create_dir(sb.file("private")).unwrap();
    std::fs::set_permissions(sb.file("private"), std::fs::Permissions::from_mode(0o700)).unwrap();
    let out = sb.run(&["run", "private"]);
    assert!(out.status.success(), "{}", stderr(&out));
}

/// Sends `child` SIGTERM (as `systemctl stop` does) and waits for it to exit; a guard
/// SIGKILLs a shim that does not hear the stop within `guard` (its status then has no
/// code). Returns the status and how long the exit took.
fn stop(child: &mut std::process::Child, guard: Duration) -> (std::process::ExitStatus, Duration) {
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let t0 = Instant::now();
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return (s, t0.elapsed());
        }
        if t0.elapsed() > guard {
            child.kill().unwrap();
            return (child.wait().unwrap(), t0.elapsed());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_stop_while_waiting_for_the_store_ends_the_wait() {
    // The store's directory cannot be made (its parent is a file): unavailable, retried
    // for store_wait. `systemctl stop` must not have to wait for that (or SIGKILL).
    let sb = Sandbox::new(&job("wait", "true", "store_wait = \"10min\""));
    std::fs::write(sb.file("state"), "not a directory").unwrap();
    let err_file = std::fs::File::create(sb.file("stderr")).unwrap();
    let mut child = spawn_timer_run(&sb, "wait", err_file);
    let t0 = Instant::now();
    while !sb.read("stderr").contains("retrying") && t0.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let (status, _) = stop(&mut child, Duration::from_secs(60));
    let err = sb.read("stderr");
    assert_ne!(status.code(), None, "the stop was not heard: {err}");
    assert!(err.contains("asked to stop"), "{err}");
}

#[test]
fn a_stop_while_waiting_out_a_gone_holders_lease_ends_the_wait() {
    // The shim of one slot is killed with its command; the next slot's shim waits for its
    // lease (60 s) to expire. `systemctl stop` must not have to wait for that (or SIGKILL),
    // and the stopped shim starts nothing.
    let sb = Sandbox::new(&job(
        "waitlease",
        WAIT_FOR_GO,
        "lease_ttl = \"60s\"\nkill_grace = \"1s\"\nenvironment = { OUT = \"@DIR@/out\" }",
    ));
    let first = sb
        .cmd(&["run", "waitlease", "--slot", "2026-11-10T02:00:00Z"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    assert!(wait_until(20, || sb.lines("out") > 0), "the first slot ran");
    kill_like_systemd(&sb, first, "out.pid");
    let err_file = std::fs::File::create(sb.file("stderr")).unwrap();
    let mut child = sb
        .cmd(&["run", "waitlease", "--slot", "2026-11-11T02:00:00Z"])
        .stdout(Stdio::null())
        .stderr(err_file)
        .spawn()
        .unwrap();
    assert!(
        wait_until(20, || sb.read("stderr").contains("waiting")),
        "{}",
        sb.read("stderr")
    );
    let (status, took) = stop(&mut child, Duration::from_secs(70));
    let err = sb.read("stderr");
    assert_ne!(status.code(), None, "the stop was not heard: {err}");
    assert!(
        took < Duration::from_secs(30),
        "the stop ended the wait, not the lease's expiry: {err}"
    );
    assert!(err.contains("asked to stop"), "{err}");
    assert_eq!(
        sb.lines("out"),
        1,
        "the stopped shim started nothing: {err}"
    );
}

#[test]
fn the_finish_event_names_the_status_jobguard_exits_with() {
    // JOBGUARD_EXIT_STATUS is "as jobguard exits": 124 for a timeout, even though the
    // command itself died from SIGKILL (137) after ignoring SIGTERM.
    let sb = Sandbox::new(&job(
        "deaf",
        "trap '' TERM; sleep 30 & wait; sleep 30",
        "timeout = \"1s\"\nkill_grace = \"1s\"",
    ));
    let out = timer_run(&sb, "deaf");
    assert_eq!(out.status.code(), Some(124), "{}", stderr(&out));
    let finished = stderr(&out)
        .lines()
        .find(|l| l.contains("finished slot"))
        .unwrap_or_default()
        .to_string();
    assert!(finished.contains("exit status 124"), "{finished}");
    assert!(finished.contains("command: 137"), "{finished}");
}

#[test]
fn a_rerun_that_is_cut_off_again_is_held_not_rerun_forever() {
    // A job that takes the host down with it (OOM, panic, a reboot) would otherwise be
    // re-run after every boot. "Re-run once": the second cut holds the slot for a person.
    let sb = Sandbox::new(&job(
        "again",
        "echo \"$JOBGUARD_ATTEMPT\" >> \"$OUT\"; if [ \"$JOBGUARD_ATTEMPT\" -le 2 ]; then sleep 60; fi",
        "lease_ttl = \"3s\"\nkill_grace = \"1s\"\nenvironment = { OUT = \"@DIR@/out\" }",
    ));
    // Each cut is judged once its lease (3 s) has expired by the store's clock.
    let kill_when = |mut p: std::process::Child, lines: usize| {
        wait_for_lines(&sb, "out", lines);
        p.kill().unwrap();
        p.wait().unwrap();
        std::thread::sleep(Duration::from_millis(3500));
    };
    let shim = spawn_timer_run(&sb, "again", Stdio::null());
    kill_when(shim, 1);
    // Without systemd, recover runs the re-run itself: cut that one too.
    let recover = sb.cmd(&["recover"]).stderr(Stdio::null()).spawn().unwrap();
    kill_when(recover, 2);
    let rec = sb.run(&["recover"]);
    assert!(rec.status.success(), "{}", stderr(&rec));
    assert_eq!(
        sb.read("out"),
        "1\n2\n",
        "no third attempt: {}",
        stderr(&rec)
    );
    let h = sb.history("again");
    assert_eq!(h[0]["attempt"], 2, "{h:?}");
    assert_eq!(h[0]["outcome"], "interrupted");
    assert_eq!(h[0]["resolution"], "held");
    assert!(stderr(&rec).contains("held"), "{}", stderr(&rec));
}

#[test]
fn store_init_creates_the_schema_of_the_job_lists_store() {
    let sb = Sandbox::new(&job("a", "true", ""));
    let out = sb.run(&["store", "init"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        support::stdout(&out).contains("schema ready"),
        "{}",
        support::stdout(&out)
    );
    let db = rusqlite::Connection::open(sb.file("state/jobguard.db")).unwrap();
    let tables: i64 = db
        .query_row(
            "SELECT count(*) FROM sqlite_master WHERE name IN ('jobguard_run', 'jobguard_lease')",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(tables, 2);
    let again = sb.run(&["store", "init"]);
    assert!(
        again.status.success(),
        "init is idempotent: {}",
        stderr(&again)
    );
    let unknown = sb.run(&["store", "init", "nope"]);
    assert_eq!(unknown.status.code(), Some(78));
}

/// A job list with an error: `store init` still makes the valid jobs' stores ready, but
/// says what is wrong (file, line, key) and exits 78, not "no jobs" and 0.
#[test]
fn store_init_names_the_job_lists_errors() {
    let sb = Sandbox::new(&format!(
        "{}{}",
        job("a", "true", ""),
        job("b", "true", "lease_ttl = 15")
    ));
    let out = sb.run(&["store", "init"]);
    assert_eq!(out.status.code(), Some(78), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("jobs.b.lease_ttl"),
        "{}",
        stderr(&out)
    );
    assert!(
        support::stdout(&out).contains("schema ready"),
        "{}",
        support::stdout(&out)
    );
    let only_bad = Sandbox::new(&job("b", "true", "lease_ttl = 15"));
    let out = only_bad.run(&["store", "init"]);
    assert_eq!(out.status.code(), Some(78), "{}", stderr(&out));
    assert!(
        !support::stdout(&out).contains("no jobs"),
        "{}",
        support::stdout(&out)
    );
}

/// Issue 10, defect 5: `--slot -2h` and `--base-time -2h`, as the manual shows them,
/// were taken for unknown flags.
#[test]
fn a_relative_slot_or_base_time_may_start_with_a_dash() {
    let sb = Sandbox::new(&job("rel", "true", ""));
    let out = sb.run(&["run", "rel", "--slot", "-2h"]);
    // Two hours ago is (almost surely) not an elapse of 02:00 UTC; what matters is that
    // it was read as a time.
    assert!(
        !stderr(&out).contains("unexpected argument"),
        "{}",
        stderr(&out)
    );
    assert!(
        out.status.success() || stderr(&out).contains("is not an elapse"),
        "{}",
        stderr(&out)
    );
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_jobguard"))
        .args([
            "calendar",
            "*-*-* 02:00:00 UTC",
            "--base-time",
            "-2h",
            "--previous",
        ])
        .output()
        .expect("run jobguard calendar");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        support::stdout(&out).contains("Prev elapse:"),
        "{}",
        support::stdout(&out)
    );
}

/// Issue 10, defects 5 and 6: a bad SLOT was "invalid calendar expression".
#[test]
fn a_bad_slot_is_called_a_bad_timestamp() {
    let sb = Sandbox::new(&job("bad-slot", "true", ""));
    for slot in [
        "today 02:00",
        "2026-01-01T00:00:00+25:00",
        "1937-01-01T12:00:27.87+00:20",
    ] {
        let out = sb.run(&["resolve", "bad-slot", slot, "--done"]);
        assert_eq!(out.status.code(), Some(2), "{slot}: {}", stderr(&out));
        assert!(
            stderr(&out).contains(&format!("invalid timestamp {slot:?}")),
            "{}",
            stderr(&out)
        );
        assert!(!stderr(&out).contains("calendar"), "{}", stderr(&out));
        let out = sb.run(&["run", "bad-slot", "--slot", slot]);
        assert!(
            stderr(&out).contains(&format!("invalid timestamp {slot:?}")),
            "{}",
            stderr(&out)
        );
    }
}

/// Issue 10, defect 6: `history --limit 0` printed every record.
#[test]
fn history_limit_0_prints_no_record() {
    let sb = Sandbox::new(&job("lim", "true", ""));
    for slot in ["2026-11-27T02:00:00Z", "2026-11-28T02:00:00Z"] {
        let out = sb.run(&["run", "lim", "--slot", slot]);
        assert!(out.status.success(), "{}", stderr(&out));
    }
    let out = sb.run(&["history", "lim", "--json", "--limit", "0"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(support::stdout(&out).trim(), "[]");
    let out = sb.run(&["history", "lim", "--limit", "0"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(support::stdout(&out), "");
    let out = sb.run(&["history", "lim", "--json", "--limit", "1"]);
    let runs: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(runs.len(), 1);
    assert_eq!(sb.history("lim").len(), 2);
}

/// Issue 10, defect 6: `status --json` left out a job whose store could not be opened
/// (`"jobs": []`), while the table listed it.
#[test]
fn status_json_lists_a_job_whose_store_cannot_be_opened_with_the_error() {
    let sb = Sandbox::new(&format!(
        "{}{}",
        job("lost", "true", ""),
        job("nofile", "true", "store_file = \"@DIR@/missing.url\"")
    ));
    std::fs::create_dir_all(sb.file("state")).unwrap();
    std::fs::write(sb.file("state/jobguard.db"), vec![0xa5u8; 8192]).unwrap();
    let out = sb.run(&["status", "--json"]);
    assert_ne!(out.status.code(), Some(0), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let jobs = v["jobs"].as_array().expect("jobs");
    let names: Vec<&str> = jobs.iter().filter_map(|j| j["job"].as_str()).collect();
    assert_eq!(names, ["lost", "nofile"], "{v}");
    for j in jobs {
        let error = j["error"].as_str().unwrap_or_default();
        assert!(!error.is_empty(), "{j}");
        assert_eq!(j["schedule"], "*-*-* 02:00:00 UTC", "{j}");
        assert!(j["last"].is_null(), "{j}");
    }
    assert!(
        jobs[0]["error"]
            .as_str()
            .unwrap()
            .contains("could not be opened"),
        "{v}"
    );
}

/// A Redis that accepts connections and never answers.
#[cfg(feature = "store-redis")]
fn silent_server() -> (std::net::TcpListener, u16) {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = l.local_addr().expect("addr").port();
    (l, port)
}

/// Issue 10, defect 6: a Redis call that timed out read "Resource temporarily
/// unavailable (os error 11)", and `rediss://` against a plain Redis said the same.
#[cfg(feature = "store-redis")]
#[test]
fn a_redis_that_does_not_answer_is_a_timeout_and_a_plain_one_is_named_for_tls() {
    let (_listener, port) = silent_server();
    let sb = Sandbox::new(&job(
        "quiet",
        "true",
        &format!("store = \"redis://127.0.0.1:{port}/0\""),
    ));
    let out = sb.run(&["history", "quiet"]);
    assert_eq!(out.status.code(), Some(69), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("timed out after 3 s"),
        "{}",
        stderr(&out)
    );
    assert!(!stderr(&out).contains("os error 11"), "{}", stderr(&out));

    if support::redis_up() {
        let sb = Sandbox::new(&job(
            "plain",
            "true",
            "store = \"rediss://127.0.0.1:6379/0\"",
        ));
        let out = sb.run(&["history", "plain"]);
        assert_eq!(out.status.code(), Some(69), "{}", stderr(&out));
        assert!(stderr(&out).contains("TLS"), "{}", stderr(&out));
        assert!(!stderr(&out).contains("os error 11"), "{}", stderr(&out));
    }
}

/// CPU time (user + system) the process `child` used, read from wait4(2) as it is reaped.
fn wait_with_cpu(child: std::process::Child) -> (Option<i32>, Duration) {
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: an all-zero rusage is valid; wait4 writes into it and into status.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let r = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(r, pid, "wait4: {}", std::io::Error::last_os_error());
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    let code = libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status));
    (code, tv(usage.ru_utime) + tv(usage.ru_stime))
}

#[test]
fn a_timed_out_command_that_ignores_sigterm_does_not_busy_loop_the_shim() {
    // Between the SIGTERM of the timeout and the SIGKILL after kill_grace the shim has
    // nothing to do but wait: its CPU time stays small, whatever the grace.
    let sb = Sandbox::new(&job(
        "stubborn",
        "trap '' TERM; echo up >> \"$OUT\"; sleep 30",
        "timeout = \"1s\"\nkill_grace = \"3s\"\nenvironment = { OUT = \"@DIR@/out\" }",
    ));
    for round in 0..2 {
        let child = sb
            .cmd(&["run", "stubborn", "--force"])
            .env("TRIGGER_TIMER_REALTIME_USEC", FIRED)
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let t0 = Instant::now();
        let (code, cpu) = wait_with_cpu(child);
        let took = t0.elapsed();
        assert_eq!(code, Some(124), "round {round}: the timeout's status");
        assert!(
            took >= Duration::from_secs(4),
            "round {round}: SIGKILL only after the grace ({took:?})"
        );
        assert!(
            cpu < Duration::from_millis(200),
            "round {round}: the shim used {cpu:?} of CPU in {took:?}"
        );
    }
    assert_eq!(sb.lines("out"), 2);
    let h = sb.history("stubborn");
    assert!(h.iter().all(|r| r["reason"] == "timeout"), "{h:?}");
}

/// Timestamps (seconds since the epoch, CLOCK_REALTIME) in file `name`, one a line.
fn stamps(sb: &Sandbox, name: &str) -> Vec<f64> {
    sb.read(name)
        .lines()
        .filter_map(|l| l.split_whitespace().last()?.parse().ok())
        .collect()
}

/// SIGKILLs the processes in `pids` (one a line) that still run; returns them.
fn kill_listed(pids: &str) -> Vec<i32> {
    let left: Vec<i32> = pids
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .filter(|p| running(*p))
        .collect();
    for p in &left {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(*p),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    left
}

#[test]
fn a_run_after_a_killed_shim_starts_only_once_the_earlier_attempts_processes_are_gone() {
    // Each attempt leaves a grandchild in a session of its own (setsid: out of the
    // command's process group, out of PR_SET_PDEATHSIG's reach) that writes a timestamp
    // every 50 ms. The shim is SIGKILLed; after its lease expired the next slot is run:
    // its command must start only after the earlier grandchild stopped writing.
    const ROUNDS: usize = 3;
    let sb = Sandbox::new(&job(
        "leftover",
        "echo \"$JOBGUARD_RUN_ID $(date +%s.%N)\" >> \"$OUT.starts\"; \
         [ -e \"$OUT.last\" ] && exit 0; \
         setsid sh -c 'echo $$ >> \"$0.pids\"; while :; do date +%s.%N >> \"$0.$1\"; sleep 0.05; done' \"$OUT\" \"$JOBGUARD_RUN_ID\" & \
         sleep 60",
        "lease_ttl = \"3s\"\nkill_grace = \"1s\"\non_interrupted = \"hold\"\n\
         environment = { OUT = \"@DIR@/out\" }",
    ));
    // Slots of consecutive days, each asked for by --slot.
    let slot = |day: usize| format!("2026-11-{:02}T02:00:00Z", 10 + day);
    for round in 0..=ROUNDS {
        if round == ROUNDS {
            std::fs::write(sb.file("out.last"), "").unwrap();
        }
        // To a file, not a pipe: a grandchild that outlives the shim keeps its stderr open.
        let err_file = sb.file(&format!("err.{round}"));
        let mut shim = sb
            .cmd(&["run", "leftover", "--slot", &slot(round)])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&err_file).unwrap())
            .spawn()
            .unwrap();
        if round == ROUNDS {
            shim.wait().unwrap();
            break;
        }
        let started = wait_until(20, || {
            let starts = sb.read("out.starts");
            starts.lines().count() > round
                && starts.lines().nth(round).is_some_and(|l| {
                    let run = l.split_whitespace().next().unwrap_or_default();
                    sb.lines(&format!("out.{run}")) > 2
                })
        });
        shim.kill().unwrap();
        shim.wait().unwrap();
        if !started {
            kill_listed(&sb.read("out.pids"));
        }
        assert!(
            started,
            "round {round}: the command and its grandchild started"
        );
        // Past the lease (3 s) by the store's clock.
        std::thread::sleep(Duration::from_millis(3500));
    }
    let left = kill_listed(&sb.read("out.pids"));
    let starts: Vec<(String, f64)> = sb
        .read("out.starts")
        .lines()
        .map(|l| {
            let (run, at) = l.split_once(' ').unwrap();
            (run.to_string(), at.parse().unwrap())
        })
        .collect();
    let errs: Vec<String> = (0..=ROUNDS).map(|r| sb.read(&format!("err.{r}"))).collect();
    assert_eq!(starts.len(), ROUNDS + 1, "one start per slot: {errs:#?}");
    for pair in starts.windows(2) {
        let (earlier, next_start) = (&pair[0].0, pair[1].1);
        let last = stamps(&sb, &format!("out.{earlier}"));
        let last = last.last().copied().unwrap_or(0.0);
        assert!(
            last < next_start,
            "run {earlier}'s grandchild wrote at {last:.3}, {:.3} s after the next command started at {next_start:.3}: {errs:#?}",
            last - next_start
        );
    }
    assert!(left.is_empty(), "grandchildren left running: {left:?}");
    // The cut attempts are on record as interrupted, not as running.
    let h = sb.history("leftover");
    assert_eq!(h.len(), ROUNDS + 1, "{h:?}");
    assert_eq!(h[0]["outcome"], "succeeded");
    for r in &h[1..] {
        assert_eq!(r["outcome"], "interrupted", "{h:?}");
    }
}

/// µs since the epoch, now.
fn now_usec() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after the epoch")
        .as_micros() as i64
}

/// Issue 9 §1: systemd 252 gives every later firing of a timer the first firing's
/// `TRIGGER_TIMER_REALTIME_USEC`. Each firing must still take its own slot, from the clock.
#[test]
fn later_firings_with_a_stale_trigger_time_take_their_own_slots() {
    let sb = Sandbox::new(
        "[jobs.tick]\nschedule = \"*-*-* *:*:0/2 UTC\"\n\
         command = [\"/bin/sh\", \"-c\", \"echo \\\"$JOBGUARD_SLOT\\\" >> \\\"$OUT\\\"\"]\n\
         environment = { OUT = \"@DIR@/slots\" }\n",
    );
    // The first firing's value, as systemd 252 keeps giving it.
    let stale = now_usec().to_string();
    let mut windows = Vec::new();
    for i in 0..5 {
        if i > 0 {
            std::thread::sleep(Duration::from_millis(2100));
        }
        let before = now_usec();
        let out = sb
            .cmd(&["run", "tick"])
            .env("TRIGGER_TIMER_REALTIME_USEC", &stale)
            .output()
            .expect("run");
        let after = now_usec();
        assert!(out.status.success(), "run {i}: {}", stderr(&out));
        windows.push((before, after, stderr(&out)));
    }
    let slots: Vec<String> = sb.read("slots").lines().map(str::to_string).collect();
    let mut distinct = slots.clone();
    distinct.sort();
    distinct.dedup();
    // A run that ends after the next elapse also catches that one up (catch_up), so a
    // loaded machine may show more slots than firings; never one twice.
    assert!(
        slots.len() >= 5 && distinct.len() == slots.len(),
        "every firing ran its own slot, each slot once; slots {slots:?}; runs {windows:#?}"
    );
    for (before, after, err) in &windows {
        // Each firing's first slot is the latest elapse at or before its start.
        let first = err
            .lines()
            .find_map(|l| l.split("started slot ").nth(1))
            .and_then(|r| r.split(' ').next())
            .unwrap_or_else(|| panic!("a start: {err}"));
        let at: jiff::Timestamp = first.parse().expect("RFC 3339 slot");
        let us = at.as_microsecond();
        assert_eq!(at.as_second() % 2, 0, "{first} is an elapse of */2");
        assert!(
            us <= *after && us > before - 2_000_000,
            "{first} is the latest elapse at or before the run ({before}..{after}): {err}"
        );
    }
}

/// Issue 9 §5.5: at a fall-back the repeated hour's second pass is not an elapse for
/// systemd (its timer never fires there). `--slot` with a local time of the repeated
/// hour means the interpretation that is an elapse; the second pass, given in UTC, is
/// refused.
#[test]
fn a_slot_in_the_repeated_hour_of_a_fall_back_is_the_one_systemd_fires() {
    let sb = Sandbox::new(
        "[jobs.fold]\nschedule = \"*-*-* 02:30 Europe/Berlin\"\ncommand = [\"/bin/true\"]\n\n\
         [jobs.quarter]\nschedule = \"*:0/15 Europe/Berlin\"\ncommand = [\"/bin/true\"]\n",
    );
    let out = sb.run(&["run", "fold", "--slot", "2026-10-25 02:30:00 Europe/Berlin"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(sb.history("fold")[0]["slot"], "2026-10-25T00:30:00Z");
    let out = sb.run(&["run", "fold", "--slot", "2026-10-25T01:30:00Z"]);
    assert_eq!(out.status.code(), Some(78), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("not an elapse") && stderr(&out).contains("2026-10-25T00:30:00Z"),
        "{}",
        stderr(&out)
    );
    for (given, slot) in [
        ("2026-10-25 02:45:00 Europe/Berlin", "2026-10-25T00:45:00Z"),
        ("2026-10-25 03:00:00 Europe/Berlin", "2026-10-25T02:00:00Z"),
    ] {
        let out = sb.run(&["run", "quarter", "--slot", given]);
        assert!(out.status.success(), "{given}: {}", stderr(&out));
        assert_eq!(sb.history("quarter")[0]["slot"], slot, "{given}");
    }
    for not_fired in ["2026-10-25T01:15:00Z", "2026-10-25T01:45:00Z"] {
        let out = sb.run(&["run", "quarter", "--slot", not_fired]);
        assert_eq!(out.status.code(), Some(78), "{not_fired}: {}", stderr(&out));
    }
    assert_eq!(sb.history("quarter").len(), 2);
}

/// Kills the shim `p` (SIGKILL) once `out` has `lines` lines: the slot's record stays
/// `running` with a holder that is gone.
fn cut_when(sb: &Sandbox, mut p: std::process::Child, lines: usize) {
    assert!(
        wait_until(10, || sb.lines("out") >= lines),
        "the command started"
    );
    p.kill().unwrap();
    p.wait().unwrap();
}

#[test]
fn recover_outside_systemd_runs_only_the_queued_reruns_not_the_current_slot() {
    // Three slots cut by a crash of the shim, each queued for a re-run by recover; the
    // current slot (today's 02:00) was never triggered and must not run.
    let sb = Sandbox::new(&job(
        "queued",
        "echo \"$JOBGUARD_SLOT $JOBGUARD_ATTEMPT\" >> \"$OUT\"; if [ -e \"$OUT.cut\" ]; then sleep 60; fi",
        "environment = { OUT = \"@DIR@/out\" }",
    ));
    std::fs::write(sb.file("out.cut"), "").unwrap();
    let slots = [
        "2026-11-26T02:00:00Z",
        "2026-11-27T02:00:00Z",
        "2026-11-28T02:00:00Z",
    ];
    for (n, slot) in slots.iter().enumerate() {
        let shim = sb
            .cmd(&["run", "queued", "--slot", slot])
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        cut_when(&sb, shim, n + 1);
        // The dead shim's lease would hold back the next slot until it expires.
        let unlocked = sb.run(&["unlock", "queued"]);
        assert!(unlocked.status.success(), "{}", stderr(&unlocked));
    }
    std::fs::remove_file(sb.file("out.cut")).unwrap();
    for round in 0..2 {
        let rec = sb.run(&["recover"]);
        assert!(rec.status.success(), "{}", stderr(&rec));
        let mut want: Vec<String> = slots.iter().map(|s| format!("{s} 1")).collect();
        want.extend(slots.iter().map(|s| format!("{s} 2")));
        assert_eq!(
            sb.read("out").lines().collect::<Vec<_>>(),
            want,
            "round {round}: only the queued slots ran, once each: {}",
            stderr(&rec)
        );
    }
    let h = sb.history("queued");
    assert_eq!(h.len(), 6, "no record for any other slot: {h:?}");
    for slot in slots {
        let done: Vec<_> = h
            .iter()
            .filter(|r| r["slot"] == slot && r["outcome"] == "succeeded")
            .collect();
        assert_eq!(done.len(), 1, "{slot}: {h:?}");
        assert_eq!(done[0]["trigger"], "rerun");
    }
}

#[test]
fn resolve_rerun_of_a_slot_that_has_since_succeeded_says_it_is_done_and_changes_nothing() {
    // Each slot fails once, then succeeds when run again (by hand); an operator then asks
    // for a re-run of the failed attempt.
    let sb = Sandbox::new(&job(
        "settled",
        "echo \"$JOBGUARD_SLOT\" >> \"$OUT\"; [ \"$JOBGUARD_ATTEMPT\" -ge 2 ]",
        "environment = { OUT = \"@DIR@/out\" }",
    ));
    let slots = ["2026-11-26T02:00:00Z", "2026-11-27T02:00:00Z"];
    for slot in slots {
        let failed = sb.run(&["run", "settled", "--slot", slot]);
        assert_eq!(failed.status.code(), Some(1), "{}", stderr(&failed));
        let ok = sb.run(&["run", "settled", "--slot", slot]);
        assert_eq!(ok.status.code(), Some(0), "{}", stderr(&ok));
    }
    let before = sb.history("settled");
    for slot in slots {
        let out = sb.run(&["resolve", "settled", slot, "--rerun"]);
        let said = format!("{}{}", support::stdout(&out), stderr(&out));
        assert_eq!(out.status.code(), Some(0), "{said}");
        assert!(said.contains("is done"), "{said}");
        assert!(!said.contains("queued"), "{said}");
    }
    assert_eq!(sb.history("settled"), before, "nothing changed");
    // Nothing is waiting: neither recover nor a trigger runs those slots again.
    assert!(sb.run(&["recover"]).status.success());
    for slot in slots {
        let again = sb.run(&["run", "settled", "--slot", slot]);
        assert!(
            stderr(&again).contains("already succeeded"),
            "{}",
            stderr(&again)
        );
    }
    assert_eq!(sb.lines("out"), 4, "two executions per slot");
    let h = sb.history("settled");
    assert_eq!(h, before);
    assert!(h.iter().all(|r| r["resolution"].is_null()), "{h:?}");
}

#[test]
fn unlock_refuses_to_end_the_lease_of_a_run_alive_on_this_host() {
    // lease_ttl 3 s: the shim renews every second, so an ended lease shows at once.
    let sb = Sandbox::new(&job(
        "alive",
        "echo \"start $JOBGUARD_SLOT\" >> \"$OUT\"; sleep 4; echo \"end $JOBGUARD_SLOT\" >> \"$OUT\"",
        "lease_ttl = \"3s\"\nkill_grace = \"1s\"\nenvironment = { OUT = \"@DIR@/out\" }",
    ));
    let host = jobguard::guard::identity::host_name();
    let slots = ["2026-11-26T02:00:00Z", "2026-11-27T02:00:00Z"];
    for (n, slot) in slots.iter().enumerate() {
        let shim = sb
            .cmd(&["run", "alive", "--slot", slot])
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        assert!(wait_until(10, || sb.lines("out") > 2 * n), "started");
        let run_id = sb.history("alive")[0]["run_id"]
            .as_str()
            .unwrap()
            .to_string();
        let out = sb.run(&["unlock", "alive"]);
        let err = stderr(&out);
        assert_ne!(out.status.code(), Some(0), "refused: {err}");
        for part in [
            shim.id().to_string(),
            host.clone(),
            run_id,
            "--force".into(),
        ] {
            assert!(err.contains(&part), "names {part}: {err}");
        }
        let done = shim.wait_with_output().unwrap();
        assert_eq!(done.status.code(), Some(0), "{}", stderr(&done));
        assert_eq!(sb.history("alive")[0]["outcome"], "succeeded");
    }
    // --force ends it, with a warning that names the live process; the run loses its lease.
    let slot = "2026-11-28T02:00:00Z";
    let shim = sb
        .cmd(&["run", "alive", "--slot", slot])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(wait_until(10, || sb.lines("out") > 4), "started");
    let out = sb.run(&["unlock", "alive", "--force"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains("warning") && err.contains(&shim.id().to_string()),
        "{err}"
    );
    let done = shim.wait_with_output().unwrap();
    assert_eq!(done.status.code(), Some(75), "{}", stderr(&done));
    assert_eq!(sb.history("alive")[0]["outcome"], "lease_lost");
    // A lapsed lease (its shim killed) is released too, and unlock says so: a claim from
    // another machine no longer waits for its holder.
    let mut shim = sb
        .cmd(&["run", "alive", "--slot", "2026-11-29T02:00:00Z"])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    assert!(
        wait_until(10, || sb.read("out").contains("start 2026-11-29")),
        "started"
    );
    shim.kill().unwrap();
    shim.wait().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(3500));
    let out = sb.run(&["unlock", "alive"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("released the lease") && stdout(&out).contains("expired"),
        "{}",
        stdout(&out)
    );
    assert!(stdout(&sb.run(&["unlock", "alive"])).contains("no lease"));
}

#[test]
fn a_store_disk_full_past_the_wait_fails_the_run_and_the_success_is_replayed_not_rerun() {
    if !as_root("mount a small file system") {
        return;
    }
    // The store on a 1 MiB file system that the job fills and nobody frees while the
    // shim waits (store_wait 3 s). Ground truth: one line per execution in $OUT, outside.
    let fs_dir = tempfile::tempdir().unwrap();
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=1m", "tmpfs"])
        .arg(fs_dir.path())
        .status()
        .unwrap();
    assert!(mounted.success(), "mount tmpfs");
    struct Unmount(std::path::PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount").arg(&self.0).status();
        }
    }
    let _unmount = Unmount(fs_dir.path().to_path_buf());
    let fill = fs_dir.path().join("fill");
    let sb = Sandbox::new(&job(
        "full",
        "echo \"$JOBGUARD_SLOT\" >> \"$OUT\"; if [ -e \"$OUT.fill\" ]; then cat /dev/zero > \"$FILL\" 2>/dev/null; fi; exit 0",
        &format!(
            "lease_ttl = \"30s\"\nstore_wait = \"3s\"\nenvironment = {{ OUT = \"@DIR@/out\", FILL = {:?} }}",
            fill.display().to_string()
        ),
    ));
    let jobs = std::fs::read_to_string(sb.file("jobs.toml"))
        .unwrap()
        .replace(
            "sqlite://state/jobguard.db",
            &format!("sqlite://{}/jobguard.db", fs_dir.path().display()),
        );
    std::fs::write(sb.file("jobs.toml"), jobs).unwrap();
    // The state directory on the full file system too, as /var/lib/jobguard beside the
    // store: the durable copy of the outcome fails there, the runtime copy carries it.
    let state = fs_dir.path().join("state");
    let run = |args: &[&str]| {
        sb.cmd(args)
            .env("JOBGUARD_STATE_DIR", &state)
            .output()
            .unwrap()
    };
    let slots = [
        "2026-11-26T02:00:00Z",
        "2026-11-27T02:00:00Z",
        "2026-11-28T02:00:00Z",
    ];
    for (n, slot) in slots.iter().enumerate() {
        std::fs::write(sb.file("out.fill"), "").unwrap();
        let out = run(&["run", "full", "--slot", slot]);
        std::fs::remove_file(sb.file("out.fill")).unwrap();
        let err = stderr(&out);
        assert_ne!(
            out.status.code(),
            Some(0),
            "not recorded is a failure: {err}"
        );
        assert!(err.contains("NOT recorded"), "{err}");
        assert!(err.contains("exit status 69, command: 0"), "{err}");
        assert_eq!(sb.history("full")[0]["outcome"], "running");
        std::fs::remove_file(&fill).unwrap();
        // The next to look replays the outcome before it decides anything: recover, or
        // (for the second slot) the run of the same slot, or (third) a run of another.
        let next = match n {
            0 => run(&["recover"]),
            1 => run(&["run", "full", "--slot", slot]),
            _ => run(&["run", "full", "--slot", "2026-11-29T02:00:00Z"]),
        };
        assert!(next.status.success(), "{}", stderr(&next));
        assert!(stderr(&next).contains("recorded late"), "{}", stderr(&next));
        let rec = run(&["recover"]);
        assert!(rec.status.success(), "{}", stderr(&rec));
        let again = run(&["run", "full", "--slot", slot]);
        assert!(
            stderr(&again).contains("already succeeded"),
            "{}",
            stderr(&again)
        );
        let h = sb.history("full");
        let this: Vec<_> = h.iter().filter(|r| r["slot"] == *slot).collect();
        assert_eq!(this.len(), 1, "{h:?}");
        assert_eq!(this[0]["outcome"], "succeeded", "{h:?}");
        assert_eq!(this[0]["exit_status"], 0, "{h:?}");
    }
    let ran = sb.read("out");
    for slot in slots.iter().chain(&["2026-11-29T02:00:00Z"]) {
        assert_eq!(
            ran.lines().filter(|l| l == slot).count(),
            1,
            "{slot}: {ran}"
        );
    }
}

#[test]
fn a_shim_killed_while_the_store_is_locked_at_the_end_leaves_its_success_for_recover() {
    // The command succeeds; the store's write lock is held by another process (a stuck
    // store) when the shim records the outcome, and the shim is SIGKILLed meanwhile (as
    // systemd does at the end of a stop time-out). The success was kept before the store
    // write: recover records it instead of running the slot again.
    let sb = Sandbox::new(&job(
        "stuck",
        "echo \"$JOBGUARD_SLOT\" >> \"$OUT\"; while [ ! -e \"$OUT.go\" ]; do sleep 0.05; done; rm \"$OUT.go\"",
        "lease_ttl = \"30s\"\nenvironment = { OUT = \"@DIR@/out\" }",
    ));
    assert!(sb.run(&["store", "init"]).status.success());
    let slots = ["2026-11-27T02:00:00Z", "2026-11-28T02:00:00Z"];
    let kept = || {
        std::fs::read_dir(sb.file("run/pending"))
            .map(|d| {
                d.flatten()
                    .any(|e| e.path().extension().is_some_and(|x| x == "json"))
            })
            .unwrap_or(false)
    };
    for (n, slot) in slots.iter().enumerate() {
        let mut shim = sb
            .cmd(&["run", "stuck", "--slot", slot])
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        assert!(
            wait_until(10, || sb.lines("out") > n),
            "the command started"
        );
        let locker = rusqlite::Connection::open(sb.file("state/jobguard.db")).unwrap();
        locker.execute_batch("BEGIN EXCLUSIVE").unwrap();
        std::fs::write(sb.file("out.go"), "").unwrap();
        // The shim now waits for the lock (busy_timeout, 10 s) in its final write.
        std::thread::sleep(Duration::from_secs(1));
        shim.kill().unwrap();
        shim.wait().unwrap();
        locker.execute_batch("ROLLBACK").unwrap();
        drop(locker);
        assert_eq!(sb.history("stuck")[0]["outcome"], "running");
        let rec = sb.run(&["recover"]);
        assert!(rec.status.success(), "{}", stderr(&rec));
        let again = sb.run(&["run", "stuck", "--slot", slot]);
        assert_eq!(
            sb.lines("out"),
            n + 1,
            "the slot ran once: {}{}",
            stderr(&rec),
            stderr(&again)
        );
        assert!(stderr(&rec).contains("recorded late"), "{}", stderr(&rec));
        assert!(
            stderr(&again).contains("already succeeded"),
            "{}",
            stderr(&again)
        );
        assert!(!kept(), "nothing left to replay");
    }
    assert_eq!(
        sb.read("out").lines().collect::<Vec<_>>(),
        slots,
        "once each"
    );
    let h = sb.history("stuck");
    assert_eq!(h.len(), 2, "{h:?}");
    assert!(h.iter().all(|r| r["outcome"] == "succeeded"), "{h:?}");
}

/// SIGKILLs the shim `p` and then its command's process group (the command leads a
/// session of its own; its pid is the first line of `pid_file`), as systemd ends a unit's
/// cgroup: nothing of the attempt is left and nothing could record its end.
fn kill_like_systemd(sb: &Sandbox, mut p: std::process::Child, pid_file: &str) {
    // The command writes its pid right after its slot: on a loaded machine the file may
    // not hold it yet when the slot line is seen.
    assert!(
        wait_until(10, || sb.read(pid_file).trim().parse::<i32>().is_ok()),
        "no pid in {pid_file}"
    );
    p.kill().unwrap();
    p.wait().unwrap();
    let pid: i32 = sb.read(pid_file).trim().parse().unwrap();
    let _ = nix::sys::signal::killpg(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    );
    assert!(
        wait_until(5, || !running(pid)),
        "command {pid} outlived its process group's SIGKILL"
    );
}

/// A command that records its slot and pid, then waits until `$OUT.go` exists.
const WAIT_FOR_GO: &str = "echo \"$JOBGUARD_SLOT\" >> \"$OUT\"; echo $$ > \"$OUT.pid\"; \
     while [ ! -e \"$OUT.go\" ]; do sleep 0.05; done";

#[test]
fn a_killed_shims_unexpired_lease_is_waited_out_and_the_next_slot_runs_after_it() {
    // The shim of each slot is SIGKILLed with its command (as systemd ends the unit); its
    // lease (4 s) has not expired when the next slot's shim claims. That holder ran on
    // this machine and boot and is gone by what this host sees, but local evidence alone
    // ends no unexpired lease: the next shim waits for it to expire by the store's clock,
    // marks the cut slot interrupted and queued, as `jobguard recover` would, and runs
    // its own slot. No slot is lost, none runs twice, and none starts before the lease of
    // the one before it could have ended.
    const ROUNDS: usize = 4;
    let sb = Sandbox::new(&job(
        "deadlease",
        WAIT_FOR_GO,
        "lease_ttl = \"4s\"\nkill_grace = \"1s\"\nenvironment = { OUT = \"@DIR@/out\" }",
    ));
    let slot = |day: usize| format!("2026-11-{:02}T02:00:00Z", 10 + day);
    let mut errs = Vec::new();
    for round in 0..=ROUNDS {
        if round == ROUNDS {
            std::fs::write(sb.file("out.go"), "").unwrap();
        }
        let err_file = sb.file(&format!("err.{round}"));
        let shim = sb
            .cmd(&["run", "deadlease", "--slot", &slot(round)])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&err_file).unwrap())
            .spawn()
            .unwrap();
        let started = wait_until(20, || sb.lines("out") > round);
        errs.push(sb.read(&format!("err.{round}")));
        if round == ROUNDS {
            let mut shim = shim;
            assert!(shim.wait().unwrap().success(), "{errs:#?}");
            break;
        }
        if !started {
            let mut shim = shim;
            let _ = shim.kill();
            let _ = shim.wait();
            panic!("round {round}: slot {} did not run: {errs:#?}", slot(round));
        }
        kill_like_systemd(&sb, shim, "out.pid");
    }
    errs = (0..=ROUNDS).map(|r| sb.read(&format!("err.{r}"))).collect();
    // Ground truth: every slot's command ran, once, in order.
    let ran: Vec<String> = sb.read("out").lines().map(str::to_string).collect();
    let want: Vec<String> = (0..=ROUNDS).map(slot).collect();
    assert_eq!(ran, want, "{errs:#?}");
    for (round, err) in errs.iter().enumerate().skip(1) {
        assert!(
            err.contains("waiting")
                && err.contains("interrupted")
                && err.contains(&slot(round - 1)),
            "round {round} waited for the lease and then cut the previous slot: {err}"
        );
    }
    // The ledger: the last slot succeeded, each cut one is interrupted and queued, and
    // each attempt started after the lease of the one before it could have ended (a cut
    // run's end is the latest it can have run: its lease's expiry).
    let mut h = sb.history("deadlease");
    assert_eq!(h.len(), ROUNDS + 1, "{h:#?}");
    h.sort_by_key(|r| r["started_at_usec"].as_i64());
    for (i, r) in h.iter().enumerate() {
        assert_eq!(r["slot"], slot(i), "{h:#?}");
        if i == ROUNDS {
            assert_eq!(r["outcome"], "succeeded", "{r}");
        } else {
            assert_eq!(r["outcome"], "interrupted", "{r}");
            assert_eq!(r["resolution"], "queued", "{r}");
            assert_eq!(r["reason"], "process-gone", "{r}");
        }
        if i > 0 {
            let cut_end = h[i - 1]["finished_at_usec"].as_i64().expect("an end");
            let began = r["started_at_usec"].as_i64().expect("a start");
            assert!(
                began >= cut_end,
                "attempt {i} began {began} before {cut_end}: {h:#?}"
            );
        }
    }
}

#[test]
fn a_live_holder_on_this_host_still_makes_the_next_run_skip() {
    // A second runtime directory has a lock of its own (as another user's jobguard, or a
    // second host sharing the store would): only the lease keeps it out, and its holder is
    // alive, so every try is a skip.
    let sb = Sandbox::new(&job(
        "livelease",
        WAIT_FOR_GO,
        "lease_ttl = \"60s\"\nenvironment = { OUT = \"@DIR@/out\" }",
    ));
    let mut first = sb
        .cmd(&["run", "livelease", "--slot", "2026-11-10T02:00:00Z"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    assert!(wait_until(20, || sb.lines("out") > 0), "the first started");
    let mut outs = Vec::new();
    for day in 11..14 {
        let s = format!("2026-11-{day}T02:00:00Z");
        outs.push(
            sb.cmd(&["run", "livelease", "--slot", &s])
                .env("JOBGUARD_RUNTIME_DIR", sb.file("run-other"))
                .output()
                .unwrap(),
        );
    }
    std::fs::write(sb.file("out.go"), "").unwrap();
    assert!(first.wait().unwrap().success());
    for out in &outs {
        assert_eq!(out.status.code(), Some(0), "{}", stderr(out));
        assert!(
            stderr(out).contains("lease-held") || stderr(out).contains("lease is held"),
            "skipped on the lease: {}",
            stderr(out)
        );
    }
    assert_eq!(sb.read("out"), "2026-11-10T02:00:00Z\n");
    let h = sb.history("livelease");
    assert_eq!(h.len(), 1, "{h:#?}");
    assert_eq!(h[0]["outcome"], "succeeded");
}

/// A job every 2 s whose first execution takes `first_secs` and later ones none; each
/// execution appends its `JOBGUARD_SLOT`.
fn overrunning_job(extra: &str, first_secs: u32) -> String {
    format!(
        "[jobs.over]\nschedule = \"*-*-* *:*:0/2 UTC\"\n\
         command = [\"/bin/sh\", \"-c\", \"echo \\\"$JOBGUARD_SLOT\\\" >> \\\"$OUT\\\"; \
         if [ ! -e \\\"$OUT.first\\\" ]; then touch \\\"$OUT.first\\\"; sleep {first_secs}; fi\"]\n\
         environment = {{ OUT = \"@DIR@/slots\" }}\n{extra}\n"
    )
}

/// Waits until 0.1 s past an even second, so that a run of the 2-second job starts at
/// its slot: returns that slot, µs since the epoch.
fn start_of_an_even_second() -> i64 {
    loop {
        let now = now_usec();
        let into = now.rem_euclid(2_000_000);
        if (100_000..300_000).contains(&into) {
            return now - into;
        }
        std::thread::sleep(Duration::from_micros(
            (2_100_000 - into).rem_euclid(2_000_000) as u64,
        ));
    }
}

fn slot_text(usec: i64) -> String {
    jiff::Timestamp::from_microsecond(usec)
        .expect("in range")
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// Issue 9: a run that outlasts the next elapse. systemd starts no second instance of an
/// active service, and other hosts find the lease held, so that elapse used to pass with
/// nobody running it. With the default `catch_up = "latest"` the shim runs it after its
/// own slot, as one catch-up run.
#[test]
fn an_elapse_that_passes_while_the_run_lasts_is_run_after_it() {
    let sb = Sandbox::new(&overrunning_job("", 3));
    let slot = start_of_an_even_second();
    let out = timer_run(&sb, "over");
    let ended = now_usec();
    assert!(out.status.success(), "{}", stderr(&out));
    let slots: Vec<String> = sb.read("slots").lines().map(str::to_string).collect();
    // The latest elapse before the 3 s run ended ran after it (S + 2 s on an idle machine;
    // later on a loaded one, when the elapses between are passed over, as recorded).
    assert_eq!(slots.len(), 2, "{slots:?}: {}", stderr(&out));
    assert_eq!(slots[0], slot_text(slot));
    let second: jiff::Timestamp = slots[1].parse().expect("a slot");
    let second = second.as_microsecond();
    assert!(
        second >= slot + 2_000_000 && second <= ended && (second - slot) % 2_000_000 == 0,
        "the elapse that passed during the run ran once after it: {slots:?}: {}",
        stderr(&out)
    );
    let h = sb.history("over");
    assert_eq!(h.len(), 2, "{h:#?}");
    assert_eq!(h[0]["trigger"], "catch-up");
    assert_eq!(h[0]["outcome"], "succeeded");
    assert_eq!(h[1]["trigger"], "timer");
    let between = (second - slot) / 2_000_000 - 1;
    if between > 0 {
        assert_eq!(
            h[0]["report"]["jobguard.passed_over"],
            between.to_string(),
            "{h:#?}"
        );
    }
}

/// With `catch_up = "latest"`, a run that outlasts two elapses runs only the newer one,
/// and the older one is recorded as passed over, which `audit` lists without alarm.
#[test]
fn latest_catch_up_after_a_long_run_passes_over_the_older_elapses() {
    let sb = Sandbox::new(&overrunning_job("", 5));
    let slot = start_of_an_even_second();
    let out = timer_run(&sb, "over");
    assert!(out.status.success(), "{}", stderr(&out));
    let slots: Vec<String> = sb.read("slots").lines().map(str::to_string).collect();
    assert_eq!(slots.len(), 2, "{slots:?}: {}", stderr(&out));
    assert_eq!(slots[0], slot_text(slot));
    let second: jiff::Timestamp = slots[1].parse().expect("a slot");
    let second = second.as_microsecond();
    assert!(second >= slot + 4_000_000, "{slots:?}: {}", stderr(&out));
    // The catch-up run records what it passed over, which `audit` lists as passed_over
    // (not as missed) once the slots are past the job's grace.
    let h = sb.history("over");
    assert_eq!(h[0]["trigger"], "catch-up");
    let between = (second - slot) / 2_000_000 - 1;
    assert_eq!(
        h[0]["report"]["jobguard.passed_over"],
        between.to_string(),
        "{h:#?}"
    );
    assert_eq!(
        h[0]["report"]["jobguard.passed_over_after"],
        slot_text(slot),
        "{h:#?}"
    );
}

/// With `catch_up = "all"`, every elapse a long run outlasted runs once after it, oldest
/// first, each with its own slot.
#[test]
fn all_catch_up_after_a_long_run_runs_every_elapse_it_outlasted_oldest_first() {
    let sb = Sandbox::new(&overrunning_job("catch_up = \"all\"", 5));
    let slot = start_of_an_even_second();
    let out = timer_run(&sb, "over");
    assert!(out.status.success(), "{}", stderr(&out));
    let slots: Vec<String> = sb.read("slots").lines().map(str::to_string).collect();
    // Every elapse from the firing's own on, each once, in order, with no gap (at least
    // S + 2 s and S + 4 s elapsed during the 5 s run; more on a loaded machine).
    let want: Vec<String> = (0..slots.len() as i64)
        .map(|i| slot_text(slot + i * 2_000_000))
        .collect();
    assert!(
        slots.len() >= 3 && slots == want,
        "{slots:?}: {}",
        stderr(&out)
    );
}

/// With `catch_up = "none"`, only the firing's own slot runs; the elapse the run outlasted
/// is passed over (recorded by the next claim), and the timer is not persistent.
#[test]
fn no_catch_up_runs_only_the_firings_own_slot() {
    let sb = Sandbox::new(&overrunning_job("catch_up = \"none\"", 3));
    let slot = start_of_an_even_second();
    let out = timer_run(&sb, "over");
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        sb.read("slots").lines().collect::<Vec<_>>(),
        [slot_text(slot)]
    );
}

/// With `catch_up = "all"`, a firing after downtime runs every slot since the newest
/// recorded one, oldest first, each as its own attempt with its own slot, then its own;
/// `catch_up_limit` keeps the newest ones and passes over the rest.
#[test]
fn all_catch_up_after_downtime_runs_each_missed_slot_once_oldest_first() {
    for (limit, expect_days) in [
        ("", vec![3, 2, 1, 0]),
        ("catch_up_limit = 1", vec![3, 1, 0]),
    ] {
        let sb = Sandbox::new(&job(
            "nightly",
            "echo \"$JOBGUARD_SLOT $JOBGUARD_IDEMPOTENCY_KEY\" >> \"$OUT\"",
            &format!("catch_up = \"all\"\n{limit}\nenvironment = {{ OUT = \"@DIR@/out\" }}"),
        ));
        let out = sb.run(&["run", "nightly", "--slot", &slot_days_ago(3)]);
        assert!(out.status.success(), "{}", stderr(&out));
        let out = timer_run(&sb, "nightly");
        assert!(out.status.success(), "{}", stderr(&out));
        let lines: Vec<String> = sb.read("out").lines().map(str::to_string).collect();
        let slots: Vec<&str> = lines
            .iter()
            .map(|l| l.split(' ').next().unwrap_or(""))
            .collect();
        let want: Vec<String> = expect_days.iter().map(|d| slot_days_ago(*d)).collect();
        assert_eq!(slots, want, "{limit}: {}", stderr(&out));
        let mut keys: Vec<&str> = lines
            .iter()
            .map(|l| l.split(' ').nth(1).unwrap_or(""))
            .collect();
        keys.sort_unstable();
        keys.dedup();
        assert_eq!(
            keys.len(),
            lines.len(),
            "each slot has its own key: {lines:?}"
        );
        // A second firing finds nothing more to do.
        let again = timer_run(&sb, "nightly");
        assert!(
            stderr(&again).contains("already succeeded"),
            "{}",
            stderr(&again)
        );
        assert_eq!(sb.read("out").lines().count(), lines.len());
    }
}

/// Issue 12: `jobguard rerun JOB [SLOT]` outside systemd runs a done slot again here,
/// forced, with trigger `rerun` and who asked in the report; without SLOT, the latest
/// elapse.
#[test]
fn rerun_runs_a_done_slot_again_forced_and_names_who_asked() {
    let sb = Sandbox::new(&job(
        "again",
        "echo \"$JOBGUARD_SLOT\" >> \"$OUT\"",
        "environment = { OUT = \"@DIR@/out\" }",
    ));
    let yesterday = slot_days_ago(1);
    let out = sb.run(&["run", "again", "--slot", &yesterday]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = sb.run(&["rerun", "again", &yesterday]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = sb.run(&["rerun", "again"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        sb.read("out").lines().collect::<Vec<_>>(),
        [yesterday.as_str(), yesterday.as_str(), slot().as_str()]
    );
    let h = sb.history("again");
    for r in &h[..2] {
        assert_eq!(r["forced"], true, "{h:#?}");
        assert_eq!(r["trigger"], "manual", "{h:#?}");
        assert!(
            r["report"]["jobguard.forced_by"]
                .as_str()
                .is_some_and(|s| !s.is_empty()),
            "{h:#?}"
        );
    }
    // A slot that is no elapse, or in the future, is refused.
    let out = sb.run(&["rerun", "again", "2026-11-29 03:00:00 UTC"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("not an elapse"), "{}", stderr(&out));
}

/// `rerun` runs a failed slot and a held slot again, as it does a done one: a held slot
/// refuses every trigger but a forced one (a person's), and the re-run settles it.
#[test]
fn rerun_runs_a_failed_slot_and_a_held_slot() {
    // Fails until the file `ok` exists.
    let sb = Sandbox::new(&job(
        "flaky",
        "echo \"$JOBGUARD_SLOT\" >> \"$OUT\"; test -e \"$OK\"",
        "environment = { OUT = \"@DIR@/out\", OK = \"@DIR@/ok\" }",
    ));
    let (failed, held) = (slot_days_ago(2), slot_days_ago(1));
    for s in [&failed, &held] {
        let out = sb.run(&["run", "flaky", "--slot", s]);
        assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    }
    // The second slot's failure held for a person (as a re-run cut off again is).
    let edited = std::process::Command::new("sqlite3")
        .arg(sb.file("state/jobguard.db"))
        .arg(format!(
            "UPDATE jobguard_run SET resolution = 'held' WHERE slot_usec = {}",
            held.parse::<jiff::Timestamp>().unwrap().as_microsecond()
        ))
        .status()
        .expect("sqlite3");
    assert!(edited.success());
    let out = sb.run(&["run", "flaky", "--slot", &held]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "a held slot is a skip: {}",
        stderr(&out)
    );
    assert!(stderr(&out).contains("held"), "{}", stderr(&out));
    std::fs::write(sb.file("ok"), "").expect("ok");
    for s in [&failed, &held] {
        let out = sb.run(&["rerun", "flaky", s]);
        assert!(out.status.success(), "{}", stderr(&out));
    }
    assert_eq!(
        sb.read("out").lines().collect::<Vec<_>>(),
        [&failed, &held, &failed, &held]
    );
    let h = sb.history("flaky");
    let outcomes: Vec<(&str, &str)> = h
        .iter()
        .map(|r| (r["slot"].as_str().unwrap(), r["outcome"].as_str().unwrap()))
        .collect();
    assert_eq!(
        outcomes,
        [
            (held.as_str(), "succeeded"),
            (failed.as_str(), "succeeded"),
            (held.as_str(), "failed"),
            (failed.as_str(), "failed")
        ],
        "{h:#?}"
    );
    // Both slots are done now: a trigger of either is a skip.
    for s in [&failed, &held] {
        let out = sb.run(&["run", "flaky", "--slot", s]);
        assert!(out.status.success(), "{}", stderr(&out));
    }
    assert_eq!(sb.read("out").lines().count(), 4);
}

/// A store that answers with something jobguard cannot use (here a record whose report is
/// not JSON) gives one exit status, 70, in every command that reads it.
#[test]
fn an_unusable_record_exits_70_in_every_command() {
    let sb = Sandbox::new(&job("bad", "true", ""));
    let out = sb.run(&["run", "bad", "--force"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let slot = sb.history("bad")[0]["slot"].as_str().unwrap().to_string();
    let edited = std::process::Command::new("sqlite3")
        .arg(sb.file("state/jobguard.db"))
        .arg("UPDATE jobguard_run SET report = 'not json'")
        .status()
        .expect("sqlite3");
    assert!(edited.success());
    for args in [
        vec!["history", "bad"],
        vec!["status"],
        vec!["audit", "bad"],
        vec!["resolve", "bad", slot.as_str(), "--done"],
        vec!["metrics"],
        vec!["run", "bad"],
    ] {
        let out = sb.run(&args);
        assert_eq!(out.status.code(), Some(70), "{args:?}: {}", stderr(&out));
    }
}

/// Without a system bus (no DBUS_SYSTEM_BUS_ADDRESS, no /run/dbus/system_bus_socket) there
/// is no logind to inhibit: a run says nothing about it. A system bus that is named but
/// cannot be reached is still a warning.
#[test]
fn no_system_bus_means_no_logind_warning() {
    let sb = Sandbox::new(&job("nobus", "true", ""));
    let socket = [
        "/run/dbus/system_bus_socket",
        "/var/run/dbus/system_bus_socket",
    ]
    .iter()
    .any(|p| std::path::Path::new(p).exists());
    if !socket {
        let out = sb
            .cmd(&["run", "nobus", "--force"])
            .env_remove("DBUS_SYSTEM_BUS_ADDRESS")
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        assert!(!stderr(&out).contains("logind"), "{}", stderr(&out));
    }
    let out = sb
        .cmd(&["run", "nobus", "--force"])
        .env(
            "DBUS_SYSTEM_BUS_ADDRESS",
            format!("unix:path={}", sb.file("no-bus").display()),
        )
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("warning: logind"), "{}", stderr(&out));
}

/// Issue 9: hosts that catch up at once run each missed slot once and lose none. Three
/// "hosts" (one runtime and state directory each) share one SQLite store and fire two
/// `catch_up = "all"` jobs and one `"latest"` job of every 2 seconds, each host one firing of a job after another
/// as its timer would, while the slots of the last minute wait to be caught up. A firing
/// whose catch-up found another holder at work used to claim its own later slot in the
/// moment between two of that holder's slots; every slot the holder had not reached yet
/// was then behind the ledger and never ran. Ground truth is each command's own list of
/// the slots it ran: with "all", every elapse from the seeded slot to the newest one run
/// appears exactly once; with "latest", none twice. `audit` finds nothing to attend to.
#[test]
fn hosts_catching_up_at_once_run_every_missed_slot_exactly_once() {
    const JOBS: [&str; 3] = ["tick0", "tick1", "latest"];
    let list: String = JOBS
        .iter()
        .map(|j| {
            let policy = if *j == "latest" { "latest" } else { "all" };
            format!(
                "[jobs.{j}]\nschedule = \"*:*:0/2\"\ncatch_up = \"{policy}\"\n\
                 command = [\"/bin/sh\", \"-c\", \"echo \\\"$JOBGUARD_SLOT\\\" >> \\\"$OUT\\\"\"]\n\
                 environment = {{ OUT = \"@DIR@/{j}\" }}\n"
            )
        })
        .collect();
    let sb = Sandbox::new(&list);
    let step = 2_000_000;
    let seeded = now_usec() / step * step - 30 * step;
    for j in JOBS {
        let out = sb.run(&["run", j, "--slot", &slot_text(seeded)]);
        assert!(out.status.success(), "{}", stderr(&out));
    }
    let until = Instant::now() + Duration::from_secs(6);
    let host = |name: &'static str, job: &'static str| {
        let sb = &sb;
        move || {
            let mut firings = 0;
            while Instant::now() < until {
                let out = sb
                    .cmd(&["run", job])
                    .env("JOBGUARD_RUNTIME_DIR", sb.file(&format!("run-{name}")))
                    .env("JOBGUARD_STATE_DIR", sb.file(&format!("state-{name}")))
                    .env("TRIGGER_TIMER_REALTIME_USEC", FIRED)
                    .output()
                    .expect("run");
                assert!(out.status.success(), "{name}: {}", stderr(&out));
                firings += 1;
            }
            firings
        }
    };
    let firings: Vec<usize> = std::thread::scope(|s| {
        let hosts: Vec<_> = ["a", "b", "c"]
            .into_iter()
            .flat_map(|h| JOBS.map(|j| s.spawn(host(h, j))))
            .collect();
        hosts.into_iter().map(|h| h.join().expect("host")).collect()
    });
    let texts = |v: &[i64]| v.iter().map(|s| slot_text(*s)).collect::<Vec<_>>();
    for j in JOBS {
        // One last firing catches up what elapsed while the hosts stopped.
        let out = timer_run(&sb, j);
        assert!(out.status.success(), "{}", stderr(&out));
        let ran: Vec<i64> = sb
            .read(j)
            .lines()
            .map(|l| {
                l.parse::<jiff::Timestamp>()
                    .expect("a slot")
                    .as_microsecond()
            })
            .collect();
        let newest = *ran.iter().max().expect("slots ran");
        let mut sorted = ran.clone();
        sorted.sort_unstable();
        let want: Vec<i64> = if j == "latest" {
            let mut once = sorted.clone();
            once.dedup();
            once
        } else {
            (seeded..=newest).step_by(step as usize).collect()
        };
        assert_eq!(
            texts(&sorted),
            texts(&want),
            "{j}: each slot from the seeded one on ran exactly once ({firings:?} firings \
             per host and job); ran in this order: {:?}",
            texts(&ran)
        );
    }
    let audit = sb.run(&["audit", "--json"]);
    assert!(
        audit.status.success(),
        "audit finds nothing to attend to: {}",
        support::stdout(&audit)
    );
}

/// Issue 11, "one job, two schedules": during a rolling change of the job list, two hosts
/// sharing one store run the job by different schedules (02:00 on host A, 03:00 on host
/// B, whose file is newer). Without a rule each runs "its" slot, so every day of the
/// change runs twice. The newest definition wins: from B's first firing, only B's slots
/// run and A skips with `schedule-differs`; when A's file is written again (now newer),
/// A takes the job back at its next firing and B skips. When A stops firing (retired), B
/// takes the job over once A's schedule has gone a whole horizon without A; and a host's
/// own later declaration replaces its earlier one even from an older file (a restored
/// backup). Two job lists with runtime directories of their own play the hosts;
/// libfaketime moves the clock from day to day.
#[test]
fn two_hosts_with_different_schedules_run_each_day_once_by_the_newest_definition() {
    let faketime = std::process::Command::new("sh")
        .args(["-c", "command -v faketime"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !faketime || !nix::unistd::geteuid().is_root() {
        assert!(
            std::env::var_os("CI").is_none(),
            "needs faketime and root (unshare)"
        );
        eprintln!("SKIPPED: needs faketime and root (unshare)");
        return;
    }
    let shared = tempfile::tempdir().expect("tempdir");
    let db = shared.path().join("jobguard.db");
    let out = shared.path().join("ran");
    let host = |at: &str| {
        Sandbox::new(&format!(
            "[jobs.sync]\nschedule = \"*-*-* {at} UTC\"\nstore = \"sqlite://{}\"\n\
             command = [\"/bin/sh\", \"-c\", \"echo $JOBGUARD_SLOT >> {}\"]\n",
            db.display(),
            out.display()
        ))
    };
    let (a, b) = (host("02:00:00"), host("03:00:00"));
    let set_mtime = |sb: &Sandbox, when: &str| {
        let t = jiff::Timestamp::strptime("%Y-%m-%d %H:%M:%S %z", format!("{when} +0000"))
            .expect("time");
        let t = std::time::UNIX_EPOCH + Duration::from_secs(t.as_second() as u64);
        std::fs::File::options()
            .write(true)
            .open(sb.file("jobs.toml"))
            .and_then(|f| f.set_modified(t))
            .expect("set mtime");
    };
    set_mtime(&a, "2027-02-01 00:00:00");
    set_mtime(&b, "2027-02-15 00:00:00");
    // Each host has a machine id of its own: `/etc/machine-id` bound over in a mount
    // namespace (unshare(1), as root), then libfaketime for the day.
    let fire = |sb: &Sandbox, at: &str| {
        let id = if sb.path() == a.path() {
            "0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a"
        } else {
            "0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b"
        };
        let file = sb.file("machine-id");
        std::fs::write(&file, format!("{id}\n")).expect("write machine-id");
        let file = file.display().to_string();
        let when = format!("@{at}");
        let o = sb
            .cmd_under(
                "unshare",
                &[
                    "--mount",
                    "--propagation",
                    "private",
                    "--",
                    "/bin/sh",
                    "-c",
                    "mount --bind \"$0\" /etc/machine-id && exec \"$@\"",
                    &file,
                    "faketime",
                    "-f",
                    &when,
                ],
                &["run", "sync"],
            )
            .env("TZ", "UTC")
            .env("TRIGGER_TIMER_REALTIME_USEC", FIRED)
            .output()
            .expect("run");
        assert_eq!(o.status.code(), Some(0), "{at}: {}", stderr(&o));
        stderr(&o)
    };
    fire(&a, "2027-03-01 02:00:30");
    fire(&b, "2027-03-01 03:00:30");
    let skipped = fire(&a, "2027-03-02 02:00:30");
    assert!(
        skipped.contains("schedule-differs") || skipped.contains("runs by the schedule"),
        "{skipped}"
    );
    assert!(
        skipped.contains("03:00:00"),
        "names the winning schedule: {skipped}"
    );
    fire(&b, "2027-03-02 03:00:30");
    // A's job list written again: now the newest definition.
    set_mtime(&a, "2027-03-02 12:00:00");
    fire(&a, "2027-03-03 02:00:30");
    let skipped = fire(&b, "2027-03-03 03:00:30");
    assert!(skipped.contains("runs by the schedule"), "{skipped}");
    // Host A is retired. Within the winning schedule's horizon (twice its day) B still
    // skips; after it, B takes the job over instead of skipping for ever.
    let skipped = fire(&b, "2027-03-04 03:00:30");
    assert!(skipped.contains("runs by the schedule"), "{skipped}");
    fire(&b, "2027-03-06 03:00:30");
    // B's job list is put back from a backup: another schedule, in a file with an older
    // time. A host's own declaration gives way to its next one, so it runs by it.
    let text = std::fs::read_to_string(b.file("jobs.toml")).expect("read");
    std::fs::write(b.file("jobs.toml"), text.replace("03:00:00", "02:30:00")).expect("write");
    set_mtime(&b, "2027-01-01 00:00:00");
    fire(&b, "2027-03-07 02:30:30");
    let ran = std::fs::read_to_string(&out).unwrap_or_default();
    assert_eq!(
        ran.lines().collect::<Vec<_>>(),
        [
            // The day of the change runs by both (as one host's own edit from 02:00 to
            // 03:00 at 02:30 would); every later day once.
            "2027-03-01T02:00:00Z",
            "2027-03-01T03:00:00Z",
            "2027-03-02T03:00:00Z",
            "2027-03-03T02:00:00Z",
            "2027-03-06T03:00:00Z",
            "2027-03-07T02:30:00Z",
        ],
        "{ran}"
    );
}

/// `jobguard mark` inside a run finds the job's store through the job list the shim read
/// (`--config` here), marks once, and carries the run's token; once the run's lease is
/// ended (`unlock --force`) its marks are refused with 75 and nothing is recorded; outside
/// a run `--job` names the store and the marks of the run are seen.
#[test]
fn marks_inside_a_run_are_fenced_by_its_lease() {
    let bin = env!("CARGO_BIN_EXE_jobguard");
    let sb = Sandbox::new(&job(
        "push",
        "\"$BIN\" mark shipping A; echo first=$? >> \"$OUT\"; \
         \"$BIN\" mark shipping A; echo again=$? >> \"$OUT\"; \
         \"$BIN\" mark shipping X --job other 2>/dev/null; echo other=$? >> \"$OUT\"; \
         \"$BIN\" unlock push --force 2>/dev/null; \
         \"$BIN\" mark shipping B; echo fenced=$? >> \"$OUT\"",
        &format!("environment = {{ OUT = \"@DIR@/out\", BIN = \"{bin}\" }}"),
    ));
    let run = timer_run(&sb, "push");
    let out = std::fs::read_to_string(sb.file("out")).unwrap_or_default();
    assert_eq!(
        out,
        "first=0\nagain=1\nother=2\nfenced=75\n",
        "inside a run another job's store is refused: its marks could not be fenced; {}",
        stderr(&run)
    );

    let marked = sb
        .cmd(&["marked", "shipping", "A", "--job", "push"])
        .output()
        .unwrap();
    assert_eq!(marked.status.code(), Some(0), "{}", stderr(&marked));
    assert!(
        stdout(&marked).contains("marked by run ") && stdout(&marked).contains(" of push on host "),
        "{}",
        stdout(&marked)
    );
    let not = sb
        .cmd(&["marked", "shipping", "B", "--job", "push"])
        .output()
        .unwrap();
    assert_eq!(
        not.status.code(),
        Some(1),
        "the fenced mark was not recorded"
    );
    let again = sb
        .cmd(&["mark", "shipping", "A", "--job", "push"])
        .output()
        .unwrap();
    assert_eq!(again.status.code(), Some(1), "{}", stderr(&again));
    assert!(
        stdout(&again).contains("shipping A: marked by run"),
        "{}",
        stdout(&again)
    );
    let outside = sb
        .cmd(&["mark", "shipping", "B", "--job", "push"])
        .output()
        .unwrap();
    assert_eq!(outside.status.code(), Some(0), "{}", stderr(&outside));
    let seen = sb
        .cmd(&["marked", "shipping", "B", "--job", "push"])
        .output()
        .unwrap();
    assert!(
        stdout(&seen).contains("marked outside a run, for push"),
        "{}",
        stdout(&seen)
    );

    // A key that starts with '-' is a key, not an option.
    let dash = sb
        .cmd(&["mark", "shipping", "-5", "--job", "push"])
        .output()
        .unwrap();
    assert_eq!(dash.status.code(), Some(0), "{}", stderr(&dash));
    let dash = sb
        .cmd(&["marked", "shipping", "-5", "--job", "push"])
        .output()
        .unwrap();
    assert!(
        stdout(&dash).starts_with("shipping -5: marked"),
        "{}",
        stdout(&dash)
    );

    for (args, why) in [
        (vec!["mark", "ship/ping", "A", "--job", "push"], "namespace"),
        (vec!["mark", "shipping", "", "--job", "push"], "key"),
        (vec!["mark", "shipping", "A"], "which job"),
    ] {
        let bad = sb.cmd(&args).output().unwrap();
        assert_eq!(bad.status.code(), Some(2), "{args:?}");
        assert!(stderr(&bad).contains(why), "{args:?}: {}", stderr(&bad));
    }
    let unknown = sb
        .cmd(&["mark", "shipping", "A", "--job", "nope"])
        .output()
        .unwrap();
    assert_eq!(unknown.status.code(), Some(78), "{}", stderr(&unknown));
}

/// Third hostile trial, 3: the keys of the `jobguard.` namespace are the ledger's own
/// (`jobguard.forced_by`, `jobguard.requested_by`, `jobguard.passed_over`, ...): a job
/// that writes them to its report must not make a run look forced, requested by someone
/// or passing over slots. They are dropped (with a warning naming them), in any case of
/// letters; the job's other keys are kept.
#[test]
fn a_job_cannot_write_the_ledgers_own_report_keys() {
    let sb = Sandbox::new(&job(
        "forger",
        "printf 'jobguard.forced_by=mallory\\njobguard.requested_by=root\\n\
         JobGuard.Passed_Over=9\\njobguard.passed_over_after=2026-01-01T00:00:00Z\\n\
         rows=3\\n' >> \"$JOBGUARD_REPORT\"",
        "",
    ));
    let out = timer_run(&sb, "forger");
    assert!(out.status.success(), "{}", stderr(&out));
    let h = sb.history("forger");
    assert_eq!(h.len(), 1, "{h:#?}");
    let report = h[0]["report"].as_object().cloned().unwrap_or_default();
    assert_eq!(
        report.get("rows").and_then(|v| v.as_str()),
        Some("3"),
        "{report:?}"
    );
    let forged: Vec<&String> = report
        .keys()
        .filter(|k| k.to_ascii_lowercase().starts_with("jobguard."))
        .filter(|k| *k != "jobguard.schedule")
        .collect();
    assert!(
        forged.is_empty(),
        "the job wrote the ledger's keys: {forged:?}"
    );
    assert_ne!(h[0]["forced"], true, "{}", h[0]);
    assert!(
        stderr(&out).contains("jobguard.forced_by"),
        "the dropped keys are named in a warning: {}",
        stderr(&out)
    );
}

/// Third hostile trial, 2: a local user could break another host's live lease. After a
/// shim on this host was SIGKILLed (its lock file says its run was not seen to the end),
/// the next run here looks for processes left by earlier attempts by their environment.
/// Any user may start a process whose environment names the job, another host's live run
/// and a made-up holder of this machine and boot whose shim is gone. That process must
/// not be believed (it is not the job's user's, and the record it names was written by
/// another holder): the live run stays running and ends as it would, the lease stays
/// with it, and this host's run is a skip. Before, the live run was marked interrupted,
/// which ended its lease, and this host ran the job while it still ran.
#[test]
fn a_process_of_another_user_naming_a_live_run_does_not_end_it() {
    if !as_root("start a process as another user") {
        return;
    }
    use std::os::unix::process::CommandExt;
    let sb = Sandbox::new(&job(
        "victim",
        "echo \"$JOBGUARD_RUN_ID\" >> \"$OUT\"; while [ ! -e \"$OUT.go\" ]; do sleep 0.05; done",
        "lease_ttl = \"3s\"\nkill_grace = \"1s\"\nenvironment = { OUT = \"@DIR@/out\" }",
    ));
    // 1. A shim on this host is SIGKILLed mid-run; its command goes with it
    // (PR_SET_PDEATHSIG). Its lease lapses 3 s later.
    let mut first = sb
        .cmd(&["run", "victim", "--slot", "2026-11-10T02:00:00Z"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    assert!(
        wait_until(20, || sb.lines("out") == 1),
        "the first run started"
    );
    first.kill().unwrap();
    first.wait().unwrap();
    std::thread::sleep(Duration::from_millis(3500));
    // 2. Another machine's run holds the lease, alive (its own runtime directory).
    let mut live = sb
        .cmd_on_machine(
            "0123456789abcdef0123456789abcdef",
            &["run", "victim", "--slot", "2026-11-11T02:00:00Z"],
        )
        .env("JOBGUARD_RUNTIME_DIR", sb.file("run-other"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    assert!(
        wait_until(20, || sb.lines("out") == 2),
        "the live run started"
    );
    let live_run = sb.read("out").lines().nth(1).unwrap().to_string();
    // 3. nobody's process claims that run, with a holder of this machine and boot whose
    // shim is gone.
    let trim = |p: &str| std::fs::read_to_string(p).unwrap().trim().replace('-', "");
    let holder = format!(
        "{}:{}:4194303:1",
        trim("/etc/machine-id"),
        trim("/proc/sys/kernel/random/boot_id")
    );
    let mut forger = std::process::Command::new("sleep")
        .arg("60")
        .env("JOBGUARD_JOB", "victim")
        .env("JOBGUARD_RUN_ID", &live_run)
        .env("JOBGUARD_HOLDER", &holder)
        .uid(65534)
        .gid(65534)
        .spawn()
        .unwrap();
    // 4. The next run on this host: a skip, at once (before, it ran the job, whose command
    // then waited with the live one's).
    let next = sb
        .cmd(&["run", "victim", "--slot", "2026-11-12T02:00:00Z"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = next.id();
    let ended = wait_until(20, || {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|s| s.contains(") Z "))
            .unwrap_or(true)
    });
    std::fs::write(sb.file("out.go"), "").unwrap();
    let out = next.wait_with_output().unwrap();
    let _ = forger.kill();
    let _ = forger.wait();
    let live_status = live.wait().unwrap();
    assert!(ended, "the next run did not end at once: {}", stderr(&out));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        sb.lines("out"),
        2,
        "the job ran while the live run still ran: {}",
        stderr(&out)
    );
    assert!(live_status.success(), "the live run ended as it would");
    let h = sb.history("victim");
    let mine: Vec<&serde_json::Value> = h.iter().filter(|r| r["run_id"] == *live_run).collect();
    assert_eq!(mine.len(), 1, "{h:#?}");
    assert_eq!(mine[0]["outcome"], "succeeded", "{h:#?}");
}

/// `settle_failures = "next-success"`: a failed slot needs a person until a later slot
/// succeeds; that success resolves it `done` and names it in its report
/// (`jobguard.settled`), once it is recorded. Without the key (the default) the same
/// history leaves the failed slot needing attention.
#[test]
fn a_later_success_settles_earlier_failures_only_when_the_job_says_so() {
    for (extra, settles) in [("", false), ("settle_failures = \"next-success\"", true)] {
        let sb = Sandbox::new(&job("ping", "test -e @DIR@/ok", extra));
        let (yesterday, today) = (slot_days_ago(1), slot());
        let out = sb.run(&["run", "ping", "--slot", &yesterday]);
        assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
        std::fs::write(sb.file("ok"), "").unwrap();
        let out = sb.run(&["run", "ping", "--slot", &today]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let history = sb.history("ping");
        let of = |slot: &str| {
            history
                .iter()
                .find(|r| r["slot"] == slot)
                .unwrap_or_else(|| panic!("no record of {slot}: {history:?}"))
                .clone()
        };
        let (failed, success) = (of(&yesterday), of(&today));
        assert_eq!(failed["outcome"], "failed");
        let status = sb.run(&["status"]);
        if settles {
            assert_eq!(failed["resolution"], "done", "{history:?}");
            assert_eq!(
                success["report"]["jobguard.settled"], yesterday,
                "{history:?}"
            );
            assert_eq!(status.status.code(), Some(0), "{}", stdout(&status));
        } else {
            assert!(failed["resolution"].is_null(), "{history:?}");
            assert!(
                success["report"].get("jobguard.settled").is_none(),
                "{history:?}"
            );
            assert_eq!(status.status.code(), Some(1), "{}", stdout(&status));
        }
    }
}

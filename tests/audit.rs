//! `jobguard audit` and `jobguard status` as monitoring checks, over histories built with
//! the real binary on SQLite and PostgreSQL (and, for a killed run, MariaDB and Redis):
//! missed slots, a catch-up's passed-over slots,
//! a forced re-run against a genuine duplicate, a SIGKILLed run, a removed job.

mod support;

use std::process::{Command, Output, Stdio};

use jobguard::calendar::CalendarSpec;
use jobguard::guard::ledger::format_usec;
use support::{Sandbox, stderr, stdout, wait_until};

const DAY: i64 = 86_400_000_000;

/// Where a test keeps its records.
enum Backend {
    Sqlite,
    /// PostgreSQL on 127.0.0.1:5432, in a schema of the test's own.
    Postgres(String),
    /// MariaDB on 127.0.0.1:3306, in a database of the test's own.
    Mysql(String),
    /// Redis on 127.0.0.1:6379, under a key prefix of the test's own.
    Redis(String),
}

impl Backend {
    fn namespace(tag: &str) -> String {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        format!("jgaudit_{tag}_{}_{nanos}", std::process::id())
    }

    fn postgres(tag: &str) -> Backend {
        Backend::Postgres(Backend::namespace(tag))
    }

    fn mysql(tag: &str) -> Backend {
        let ns = Backend::namespace(tag);
        let out = Command::new("mysql")
            .args(["-h", "127.0.0.1", "-u", "root", "-e"])
            .arg(format!("CREATE DATABASE {ns}"))
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        Backend::Mysql(ns)
    }

    fn redis(tag: &str) -> Backend {
        Backend::Redis(Backend::namespace(tag))
    }

    /// The job's `store =` line.
    fn store_line(&self) -> String {
        match self {
            Backend::Sqlite => String::new(),
            Backend::Postgres(ns) => {
                format!("store = \"postgres://root@127.0.0.1:5432/test?schema={ns}\"\n")
            }
            Backend::Mysql(ns) => format!("store = \"mysql://root@127.0.0.1:3306/{ns}\"\n"),
            Backend::Redis(ns) => format!("store = \"redis://127.0.0.1:6379/0?prefix={ns}:\"\n"),
        }
    }

    /// Runs SQL against the job's records (test-only surgery that no command can do).
    fn sql(&self, sb: &Sandbox, text: &str) {
        let out = match self {
            Backend::Sqlite => Command::new("sqlite3")
                .arg(sb.file("state/jobguard.db"))
                .arg(text)
                .output()
                .unwrap(),
            Backend::Postgres(ns) => Command::new("psql")
                .args([
                    "-h",
                    "127.0.0.1",
                    "-U",
                    "root",
                    "-d",
                    "test",
                    "-v",
                    "ON_ERROR_STOP=1",
                    "-c",
                ])
                .arg(format!("SET search_path TO {ns}; {text}"))
                .output()
                .unwrap(),
            Backend::Mysql(_) | Backend::Redis(_) => unreachable!("no SQL surgery on {text}"),
        };
        assert!(out.status.success(), "{text}: {}", stderr(&out));
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        match self {
            Backend::Sqlite => {}
            Backend::Postgres(ns) => {
                let _ = Command::new("psql")
                    .args(["-h", "127.0.0.1", "-U", "root", "-d", "test", "-c"])
                    .arg(format!("DROP SCHEMA IF EXISTS {ns} CASCADE"))
                    .output();
            }
            Backend::Mysql(ns) => {
                let _ = Command::new("mysql")
                    .args(["-h", "127.0.0.1", "-u", "root", "-e"])
                    .arg(format!("DROP DATABASE IF EXISTS {ns}"))
                    .output();
            }
            Backend::Redis(ns) => {
                let _ = Command::new("sh")
                    .arg("-c")
                    .arg(format!(
                        "redis-cli -h 127.0.0.1 --scan --pattern '{ns}:*' | xargs -r redis-cli -h 127.0.0.1 DEL"
                    ))
                    .output();
            }
        }
    }
}

/// A daily job at 00:00 UTC with a short grace (32 s): store_wait 0, clock_tolerance 1 s.
fn job(name: &str, command: &str, backend: &Backend) -> String {
    format!(
        "[jobs.{name}]\nschedule = \"*-*-* 00:00:00 UTC\"\ncommand = [\"/bin/sh\", \"-c\", {command:?}]\nstore_wait = \"0s\"\nclock_tolerance = \"1s\"\n{}\n",
        backend.store_line()
    )
}

/// The latest 00:00 UTC at or before now, µs; waits out the first minute after it so
/// that it is surely past the grace.
fn today() -> i64 {
    let cal = CalendarSpec::parse("*-*-* 00:00:00 UTC").unwrap();
    loop {
        let now = jiff::Timestamp::now();
        let d = cal.previous_elapse(now).unwrap().as_microsecond();
        if now.as_microsecond() - d > 60_000_000 {
            return d;
        }
        std::thread::sleep(std::time::Duration::from_secs(5));
    }
}

fn audit(sb: &Sandbox, args: &[&str]) -> (Output, serde_json::Value) {
    let mut all = vec!["audit", "--json"];
    all.extend_from_slice(args);
    let out = sb.run(&all);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("audit json: {e}: {} {}", stdout(&out), stderr(&out)));
    (out, v)
}

/// (kind, slot) of every finding of `job`.
fn findings(v: &serde_json::Value, job: &str) -> Vec<(String, String)> {
    v["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|j| j["job"] == job)
        .flat_map(|j| j["findings"].as_array().unwrap().clone())
        .map(|f| {
            (
                f["kind"].as_str().unwrap().to_string(),
                f["slot"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn of_kind(f: &[(String, String)], kind: &str) -> Vec<String> {
    f.iter()
        .filter(|(k, _)| k == kind)
        .map(|(_, s)| s.clone())
        .collect()
}

fn status_json(sb: &Sandbox) -> (Output, serde_json::Value) {
    let out = sb.run(&["status", "--json"]);
    let v = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("status json: {e}: {}", stdout(&out)));
    (out, v)
}

/// The history of one daily job: slots run by hand, then days with no record (missed),
/// then a catch-up run that passes them over (recorded), a forced re-run (not a
/// duplicate), and a duplicate success made by hand in the store (found).
fn missed_passed_over_and_duplicates(backend: Backend) {
    let sb = Sandbox::new(&job(
        "daily",
        "echo \"$JOBGUARD_SLOT\" >> \"@DIR@/out\"",
        &backend,
    ));
    let d = today();
    for back in [12, 11, 10] {
        let slot = format_usec(d - back * DAY);
        let out = sb.run(&["run", "daily", "--slot", &slot]);
        assert!(out.status.success(), "{}", stderr(&out));
    }
    // Days d−9 ..= d elapsed with no record: missed, every one, and audit says so.
    let (out, v) = audit(&sb, &[]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let f = findings(&v, "daily");
    let want: Vec<String> = (0..=9).rev().map(|b| format_usec(d - b * DAY)).collect();
    assert_eq!(of_kind(&f, "missed"), want, "{f:?}");
    assert_eq!(v["findings"], 10);
    assert!(v["until"].as_str().is_some());
    assert!(v["since"].is_null());
    // status: a monitoring check that fails, naming the missed slots.
    let (st, sv) = status_json(&sb);
    assert_eq!(st.status.code(), Some(1), "{}", stderr(&st));
    let missed = sv["jobs"][0]["missed"].as_array().unwrap();
    assert_eq!(missed.len(), 10, "{sv}");
    let table = sb.run(&["status"]);
    assert_eq!(table.status.code(), Some(1));
    assert!(stdout(&table).contains("missed"), "{}", stdout(&table));

    // recover reports each missed slot once: a second pass reports none again.
    let rec = sb.run(&["recover"]);
    assert!(rec.status.success(), "{}", stderr(&rec));
    let reported: Vec<String> = stderr(&rec)
        .lines()
        .filter(|l| l.contains("missed: slot "))
        .map(str::to_string)
        .collect();
    assert_eq!(reported.len(), 10, "{}", stderr(&rec));
    for slot in &want {
        assert!(
            reported.iter().any(|l| l.contains(slot.as_str())),
            "{slot}: {reported:?}"
        );
    }
    let rec = sb.run(&["recover"]);
    assert!(
        !stderr(&rec).contains("missed"),
        "reported once: {}",
        stderr(&rec)
    );
    assert_eq!(sb.history("daily").len(), 3, "recover ran nothing");

    // A run now takes today's slot and passes over the nine days before it, on record.
    let out = sb.run(&["run", "daily"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let h = sb.history("daily");
    assert_eq!(h[0]["slot"], format_usec(d));
    assert_eq!(h[0]["report"]["jobguard.passed_over"], "9", "{}", h[0]);
    assert_eq!(
        h[0]["report"]["jobguard.passed_over_after"],
        format_usec(d - 10 * DAY)
    );
    let (out, v) = audit(&sb, &["daily"]);
    assert_eq!(out.status.code(), Some(0), "passed over is not missed: {v}");
    let f = findings(&v, "daily");
    assert_eq!(of_kind(&f, "passed_over"), want[..9].to_vec(), "{f:?}");
    assert!(of_kind(&f, "missed").is_empty());
    assert_eq!(v["attention"], 0);
    let (st, _) = status_json(&sb);
    assert_eq!(st.status.code(), Some(0), "{}", stderr(&st));
    // --since / --until bound the slots.
    let since = format_usec(d - 3 * DAY);
    let until = format_usec(d - 2 * DAY);
    let (_, v) = audit(&sb, &["--since", &since, "--until", &until]);
    assert_eq!(
        of_kind(&findings(&v, "daily"), "passed_over"),
        vec![since.clone(), until.clone()]
    );
    assert_eq!(v["since"], since);
    // Relative times as systemd writes them, hyphen and all.
    let (out, v) = audit(&sb, &["--since", "-2d", "--until", "-1s"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        of_kind(&findings(&v, "daily"), "passed_over"),
        vec![format_usec(d - DAY)],
        "{v}"
    );

    // A forced re-run of a done slot is a second success on purpose: not a finding.
    let out = sb.run(&["run", "daily", "--force"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let (out, _) = audit(&sb, &[]);
    assert_eq!(out.status.code(), Some(0));
    // The same record as if the store had let a second, unforced success in.
    backend.sql(&sb, "DROP INDEX jobguard_run_one_success");
    backend.sql(
        &sb,
        "UPDATE jobguard_run SET forced = (1 = 0) WHERE attempt = 2 AND outcome = 'succeeded'",
    );
    let (out, v) = audit(&sb, &[]);
    assert_eq!(out.status.code(), Some(1));
    let f = findings(&v, "daily");
    assert_eq!(
        of_kind(&f, "duplicate_success"),
        vec![format_usec(d)],
        "{f:?}"
    );
    let table = sb.run(&["audit"]);
    assert_eq!(table.status.code(), Some(1));
    assert!(
        stdout(&table).contains("duplicate_success") && stdout(&table).contains("daily"),
        "{}",
        stdout(&table)
    );
    assert_eq!(sb.lines("out"), 5, "the command ran 3 + 1 + 1 times");
}

#[test]
fn sqlite_missed_passed_over_and_duplicates() {
    missed_passed_over_and_duplicates(Backend::Sqlite);
}

#[test]
fn postgres_missed_passed_over_and_duplicates() {
    missed_passed_over_and_duplicates(Backend::postgres("dup"));
}

/// A SIGKILLed shim leaves a `running` record without a holder: audit and status say so
/// until recover marks and re-runs it; a job removed from the job list is still audited.
fn a_killed_run_and_a_removed_job(backend: Backend) {
    let jobs = job(
        "crash",
        "echo $$ >> \"@DIR@/out\"; if [ \"$JOBGUARD_ATTEMPT\" = 1 ]; then sleep 60; fi",
        &backend,
    ) + "lease_ttl = \"3s\"\nkill_grace = \"1s\"\n";
    let sb = Sandbox::new(&jobs);
    let d = today();
    let slot = format_usec(d);
    let mut child = sb
        .cmd(&["run", "crash", "--slot", &slot])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    assert!(
        wait_until(10, || sb.lines("out") > 0),
        "the command started"
    );
    let (out, v) = audit(&sb, &[]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "a live run is not a finding: {v}"
    );
    child.kill().unwrap();
    child.wait().unwrap();
    let killed = std::time::Instant::now();
    let (out, v) = audit(&sb, &[]);
    if killed.elapsed() < std::time::Duration::from_secs(2) {
        assert_eq!(
            out.status.code(),
            Some(0),
            "a holder whose lease is unexpired is not judged gone: {v}"
        );
    }
    // Past the lease (3 s) by the store's clock.
    std::thread::sleep(std::time::Duration::from_millis(3500).saturating_sub(killed.elapsed()));
    let (out, v) = audit(&sb, &[]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        of_kind(&findings(&v, "crash"), "orphan_running"),
        vec![slot.clone()]
    );
    let (st, sv) = status_json(&sb);
    assert_eq!(st.status.code(), Some(1), "{sv}");
    assert_eq!(
        sv["jobs"][0]["orphans"].as_array().unwrap().len(),
        1,
        "{sv}"
    );
    // audit only reads: the record is still running.
    assert_eq!(sb.history("crash")[0]["outcome"], "running");

    let rec = sb.run(&["recover"]);
    assert!(rec.status.success(), "{}", stderr(&rec));
    let (out, v) = audit(&sb, &[]);
    assert_eq!(out.status.code(), Some(0), "{v}");
    let (st, _) = status_json(&sb);
    assert_eq!(st.status.code(), Some(0), "{}", stdout(&st));

    // Removed from the job list, its ledger is still read (without slot checks).
    let store_line = backend.store_line();
    std::fs::write(
        sb.file("jobs.toml"),
        format!(
            "[defaults]\nstore = \"sqlite://state/jobguard.db\"\n\n[jobs.other]\nschedule = \"daily\"\ncommand = [\"true\"]\n{store_line}"
        ),
    )
    .unwrap();
    let (out, v) = audit(&sb, &[]);
    assert_eq!(out.status.code(), Some(0), "{v}");
    let crash = v["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["job"] == "crash")
        .unwrap_or_else(|| panic!("removed job audited: {v}"));
    assert_eq!(crash["in_job_list"], false);
    assert_eq!(crash["records"], 2);
    let (out, v) = audit(&sb, &["crash"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(v["jobs"][0]["job"], "crash");
    let none = sb.run(&["audit", "never-was"]);
    assert_eq!(none.status.code(), Some(78), "{}", stderr(&none));
}

#[test]
fn sqlite_a_killed_run_and_a_removed_job() {
    a_killed_run_and_a_removed_job(Backend::Sqlite);
}

#[test]
fn postgres_a_killed_run_and_a_removed_job() {
    a_killed_run_and_a_removed_job(Backend::postgres("kill"));
}

#[test]
fn mysql_a_killed_run_and_a_removed_job() {
    a_killed_run_and_a_removed_job(Backend::mysql("kill"));
}

#[test]
fn redis_a_killed_run_and_a_removed_job() {
    a_killed_run_and_a_removed_job(Backend::redis("kill"));
}

/// A failed slot needs attention in `status` and `audit` until a person decides it.
fn a_failed_slot_until_it_is_resolved(backend: Backend) {
    let sb = Sandbox::new(&job("flaky", "exit 3", &backend));
    let slot = format_usec(today());
    let out = sb.run(&["run", "flaky", "--slot", &slot]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let (st, sv) = status_json(&sb);
    assert_eq!(st.status.code(), Some(1), "{sv}");
    assert_eq!(sv["jobs"][0]["attention"][0]["outcome"], "failed", "{sv}");
    assert_eq!(sv["jobs"][0]["needs_attention"], true, "{sv}");
    let (out, v) = audit(&sb, &[]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        of_kind(&findings(&v, "flaky"), "failed"),
        vec![slot.clone()]
    );
    let res = sb.run(&["resolve", "flaky", &slot, "--done"]);
    assert!(res.status.success(), "{}", stderr(&res));
    let (st, sv) = status_json(&sb);
    assert_eq!(st.status.code(), Some(0), "{sv}");
    let (out, v) = audit(&sb, &[]);
    assert_eq!(out.status.code(), Some(0), "{v}");
}

#[test]
fn sqlite_a_failed_slot_until_it_is_resolved() {
    a_failed_slot_until_it_is_resolved(Backend::Sqlite);
}

#[test]
fn postgres_a_failed_slot_until_it_is_resolved() {
    a_failed_slot_until_it_is_resolved(Backend::postgres("fail"));
}

/// Issue 13, `jobguard drill`: on every store, each layer holds (lock, store, lease with
/// takeover only after expiry and fencing, ledger), twice in a row, and the job's own
/// ledger and lease are untouched. With this host's clock two minutes ahead of
/// PostgreSQL's (libfaketime), the store layer fails and the drill exits 1.
///
/// Issue 38, items 5 and 6: a real job named `nightly.drill` keeps its slots (the probe's
/// name is one no job can have), `audit` finds nothing in the probes' records (the
/// fenced first holder's record is settled), and `prune` deletes them with the job's
/// retention.
#[test]
fn drill_exercises_every_layer_on_every_store_without_touching_the_job() {
    for backend in [
        Backend::Sqlite,
        Backend::postgres("drill"),
        Backend::mysql("drill"),
        Backend::redis("drill"),
    ] {
        let sb = Sandbox::new(&format!(
            "[jobs.nightly]\nschedule = \"*-*-* 02:00:00 UTC\"\ncommand = [\"/bin/false\"]\n\
             retention = \"1s\"\n{store}\
             [jobs.\"nightly.drill\"]\nschedule = \"*-*-* 03:00:00 UTC\"\ncommand = [\"/bin/true\"]\n{store}",
            store = backend.store_line()
        ));
        // Its latest elapse: no slot of it is missed.
        let out = sb.run(&["run", "nightly.drill"]);
        assert!(out.status.success(), "{}", stderr(&out));
        for round in 0..2 {
            let out = sb.run(&["drill", "nightly", "--json"]);
            let verdicts: serde_json::Value = serde_json::from_slice(&out.stdout)
                .unwrap_or_else(|e| panic!("{e}: {}{}", stdout(&out), stderr(&out)));
            let layers: Vec<(String, bool)> = verdicts
                .as_array()
                .expect("an array")
                .iter()
                .map(|v| {
                    (
                        v["layer"].as_str().unwrap_or("").to_string(),
                        v["held"] == true,
                    )
                })
                .collect();
            assert_eq!(
                layers,
                [
                    ("lock".to_string(), true),
                    ("store".to_string(), true),
                    ("lease".to_string(), true),
                    ("ledger".to_string(), true)
                ],
                "{} round {round}: {verdicts:#}",
                backend.store_line()
            );
            assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        }
        assert!(
            sb.history("nightly").is_empty(),
            "the job's ledger is untouched"
        );
        let real = sb.history("nightly.drill");
        assert_eq!(
            real.len(),
            1,
            "the job nightly.drill has its own run only: {real:#?}"
        );
        let again = sb.run(&["run", "nightly.drill"]);
        assert!(
            stderr(&again).contains("already succeeded"),
            "its slot stays done: {}",
            stderr(&again)
        );
        let (out, v) = audit(&sb, &[]);
        assert_eq!(
            out.status.code(),
            Some(0),
            "the probes leave nothing to attend: {v:#}"
        );
        std::thread::sleep(std::time::Duration::from_millis(1100));
        let out = sb.run(&["prune", "nightly"]);
        assert!(out.status.success(), "{}", stderr(&out));
        assert!(
            stdout(&out).contains("probe"),
            "prune deletes the drill's probe records: {}",
            stdout(&out)
        );
        let out = sb.run(&["unlock", "nightly"]);
        assert!(
            !stdout(&out).contains("ended"),
            "the job's lease was never taken: {}{}",
            stdout(&out),
            stderr(&out)
        );
        if matches!(backend, Backend::Postgres(_)) {
            let out = sb
                .cmd(&["drill", "nightly"])
                .env(
                    "LD_PRELOAD",
                    "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
                )
                .env("FAKETIME", "+120s")
                .env("FAKETIME_DONT_RESET", "1")
                .output()
                .expect("drill under faketime");
            assert_eq!(
                out.status.code(),
                Some(1),
                "{}{}",
                stdout(&out),
                stderr(&out)
            );
            let text = stdout(&out);
            assert!(
                text.lines()
                    .any(|l| l.starts_with("store") && l.contains("FAILED")),
                "{text}"
            );
        }
    }
}

/// A failed slot stays something to attend to in `status` and `metrics` however many
/// records came after it: 250 later days succeed, more than the newest records `status`
/// reads (200); the old failure is still flagged until it is resolved.
#[test]
fn sqlite_an_old_failed_slot_stays_flagged_after_250_later_runs() {
    let sb = Sandbox::new(&job(
        "old",
        "if [ -e \"@DIR@/fail\" ]; then exit 3; fi",
        &Backend::Sqlite,
    ));
    let d = today();
    std::fs::write(sb.file("fail"), "").unwrap();
    let failed = format_usec(d - 250 * DAY);
    let out = sb.run(&["run", "old", "--slot", &failed]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    std::fs::remove_file(sb.file("fail")).unwrap();
    for back in (0..250).rev() {
        let out = sb.run(&["run", "old", "--slot", &format_usec(d - back * DAY)]);
        assert!(out.status.success(), "{}", stderr(&out));
    }
    assert_eq!(sb.history("old").len(), 251);
    let (st, sv) = status_json(&sb);
    assert_eq!(st.status.code(), Some(1), "{sv}");
    let attention = sv["jobs"][0]["attention"].as_array().unwrap();
    assert_eq!(attention.len(), 1, "{sv}");
    assert_eq!(attention[0]["slot"], failed.as_str(), "{sv}");
    let metrics = stdout(&sb.run(&["metrics"]));
    assert!(
        metrics.contains("jobguard_job_needs_attention{job=\"old\"} 1"),
        "{metrics}"
    );
    // A forced run of an even older slot, now among the newest records, does not hide it.
    let older = format_usec(d - 300 * DAY);
    let out = sb.run(&["run", "old", "--slot", &older, "--force"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let (st, sv) = status_json(&sb);
    assert_eq!(st.status.code(), Some(1), "{sv}");
    let attention = sv["jobs"][0]["attention"].as_array().unwrap();
    assert_eq!(attention.len(), 1, "{sv}");
    assert_eq!(attention[0]["slot"], failed.as_str(), "{sv}");

    // Resolved, it is settled: nothing to attend to.
    let out = sb.run(&["resolve", "old", &failed, "--done"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let (st, sv) = status_json(&sb);
    assert_eq!(st.status.code(), Some(0), "{sv}");
}

/// `jobguard ARGS` in `sb` with this host's wall clock moved by `offset` (libfaketime's
/// `-f` syntax, e.g. `-200d`): records written then started that long ago.
fn faked(sb: &Sandbox, offset: &str, args: &[&str]) -> std::process::Output {
    sb.cmd_under("faketime", &["-f", offset], args)
        .env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
        .output()
        .expect("faketime")
}

/// Retention (here 10 days): `prune` deletes the old records of done slots, keeps an old
/// failed slot (status still shows it) and everything recent; `audit` then finds no
/// missed slot where records were deleted. `--dry-run` deletes nothing.
#[test]
fn sqlite_prune_deletes_old_records_of_done_slots_only() {
    let sb = Sandbox::new(&format!(
        "{}retention = \"10d\"\n",
        job(
            "daily",
            "if [ -e \"@DIR@/fail\" ]; then exit 3; fi",
            &Backend::Sqlite,
        )
    ));
    let d = today();
    // 200 and 199 days ago: a success and a failure; 150 days ago a failure then its
    // re-run's success; the last ten days: successes.
    let at = |days: i64| format_usec(d - days * DAY);
    let out = faked(&sb, "-200d", &["run", "daily", "--slot", &at(200)]);
    assert!(out.status.success(), "{}", stderr(&out));
    std::fs::write(sb.file("fail"), "").unwrap();
    let out = faked(&sb, "-199d", &["run", "daily", "--slot", &at(199)]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let out = faked(&sb, "-150d", &["run", "daily", "--slot", &at(150)]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    std::fs::remove_file(sb.file("fail")).unwrap();
    let out = faked(
        &sb,
        "-149d",
        &["run", "daily", "--slot", &at(150), "--force"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    for days in (0..=9).rev() {
        let out = sb.run(&["run", "daily", "--slot", &at(days)]);
        assert!(out.status.success(), "{}", stderr(&out));
    }
    assert_eq!(sb.history("daily").len(), 14);
    // A dedupe mark as old as the first run, and one of today: the old one goes too.
    for (when, key) in [("-200d", "old"), ("+0d", "new")] {
        let out = faked(&sb, when, &["mark", "orders", key, "--job", "daily"]);
        assert!(out.status.success(), "{}", stderr(&out));
    }

    let dry = sb.run(&["prune", "--dry-run"]);
    assert!(dry.status.success(), "{}", stderr(&dry));
    assert!(
        stdout(&dry).contains("daily: would delete 3 of 14 records and 1 marks (retention 10d)"),
        "the retention as written, not as 1w 3d: {}",
        stdout(&dry)
    );
    assert_eq!(sb.history("daily").len(), 14);
    let out = sb.run(&["marked", "orders", "old", "--job", "daily"]);
    assert!(
        out.status.success(),
        "the dry run deleted no mark: {}",
        stderr(&out)
    );
    // `recover` prunes once a day per job: this pass does.
    let out = sb.run(&["recover"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("daily: deleted 3 of 14 records older than its retention"),
        "{}",
        stdout(&out)
    );
    let marked = |key| {
        sb.run(&["marked", "orders", key, "--job", "daily"])
            .status
            .code()
    };
    assert_eq!(
        (marked("old"), marked("new")),
        (Some(1), Some(0)),
        "the old mark went"
    );
    let left: Vec<String> = sb
        .history("daily")
        .iter()
        .map(|r| {
            format!(
                "{} {}",
                r["slot"].as_str().unwrap(),
                r["outcome"].as_str().unwrap()
            )
        })
        .collect();
    let mut want: Vec<String> = (0..=9).map(|d| format!("{} succeeded", at(d))).collect();
    want.push(format!("{} failed", at(199)));
    assert_eq!(left, want);
    // The old failure still needs attention; no slot before the retention is missed.
    let (st, sv) = status_json(&sb);
    assert_eq!(st.status.code(), Some(1), "{sv}");
    assert_eq!(
        sv["jobs"][0]["attention"][0]["slot"],
        at(199).as_str(),
        "{sv}"
    );
    let (_, v) = audit(&sb, &["daily"]);
    let f = findings(&v, "daily");
    let missed = of_kind(&f, "missed");
    assert!(missed.is_empty(), "{missed:?}");
    assert_eq!(of_kind(&f, "failed"), vec![at(199)], "{f:?}");

    // Nothing is left to delete; the next pass of `recover` does not prune before a day.
    let out = sb.run(&["recover"]);
    assert!(!stdout(&out).contains("deleted"), "{}", stdout(&out));
    let out = sb.run(&["prune"]);
    assert!(
        stdout(&out).contains("daily: deleted 0 of 11"),
        "{}",
        stdout(&out)
    );
}

/// Issue 9: a slot missed between records is reported by `recover` even when newer missed
/// slots were reported before it; `status` names it too. `recover` used to remember only
/// the newest slot it had reported and never logged an older one. The slots are lost by
/// deleting their records from the store, as a slot left behind the ledger has none.
#[test]
fn sqlite_a_gap_found_behind_slots_reported_before_is_reported_too() {
    let d = today();
    let day = |back: i64| format_usec(d - back * DAY);
    let sb = Sandbox::new(&job("daily", "true", &Backend::Sqlite));
    // Each day's run started on its day, as its timer would have started it.
    for back in (1..=6).rev() {
        let out = faked(
            &sb,
            &format!("-{back}d"),
            &["run", "daily", "--slot", &day(back)],
        );
        assert!(out.status.success(), "{}", stderr(&out));
    }
    let lose = |back: i64| {
        let out = Command::new("sqlite3")
            .arg(sb.file("state/jobguard.db"))
            .arg(format!(
                "DELETE FROM jobguard_run WHERE slot_usec = {}",
                d - back * DAY
            ))
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
    };
    let missed_lines = |out: &Output| -> Vec<String> {
        stderr(out)
            .lines()
            .filter(|l| l.contains("missed: slot "))
            .map(str::to_string)
            .collect()
    };
    lose(2);
    let rec = sb.run(&["recover"]);
    assert!(rec.status.success(), "{}", stderr(&rec));
    let first = missed_lines(&rec);
    assert!(first.iter().any(|l| l.contains(&day(2))), "{first:?}");
    assert!(!first.iter().any(|l| l.contains(&day(5))), "{first:?}");
    // Day −5 is lost now, older than every slot reported before.
    lose(5);
    let rec = sb.run(&["recover"]);
    let second = missed_lines(&rec);
    assert_eq!(second.len(), 1, "{}", stderr(&rec));
    assert!(second[0].contains(&day(5)), "{second:?}");
    let (_, sv) = status_json(&sb);
    let missed: Vec<&str> = sv["jobs"][0]["missed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["slot"].as_str().unwrap())
        .collect();
    assert!(
        missed.contains(&day(5).as_str()) && missed.contains(&day(2).as_str()),
        "{sv}"
    );
    // Reported once.
    assert!(missed_lines(&sb.run(&["recover"])).is_empty());
}

/// Issue 9: a backfill (old slots run by hand, newest first, after the job's recent
/// slots) fills the newest 200 records `status` and `recover` read: the recent slots,
/// recorded before it and so after the newest slot read, are not missed (they are
/// confirmed with the store).
#[test]
fn sqlite_a_backfill_beyond_the_records_read_makes_nothing_missed() {
    let sb = Sandbox::new(&format!(
        "[jobs.hourly]\nschedule = \"*-*-* *:00:00 UTC\"\ncommand = [\"true\"]\n\
         store_wait = \"0s\"\nclock_tolerance = \"1s\"\n{}\n",
        Backend::Sqlite.store_line()
    ));
    let hour = 3_600_000_000;
    let cal = CalendarSpec::parse("*-*-* *:00:00 UTC").unwrap();
    let latest = cal
        .previous_elapse(jiff::Timestamp::now())
        .unwrap()
        .as_microsecond();
    let run = |slot: i64| {
        let out = sb.run(&["run", "hourly", "--slot", &format_usec(slot)]);
        assert!(out.status.success(), "{}", stderr(&out));
    };
    for back in (0..6).rev() {
        run(latest - back * hour);
    }
    // The 210 hours before them, newest first.
    for back in 6..216 {
        run(latest - back * hour);
    }
    let (st, sv) = status_json(&sb);
    assert_eq!(st.status.code(), Some(0), "{sv}");
    let rec = sb.run(&["recover"]);
    assert!(!stderr(&rec).contains("missed"), "{}", stderr(&rec));
}

/// `audit --since -7d` of every job of a busy PostgreSQL store: 100 minutely jobs with a
/// success at each of their last 10,086 slots (1,008,600 records, a week), written
/// straight into the table. Read as one call, every job's window took longer than one
/// call's deadline (`read runs: no answer within 4 s`, exit 69) and held every record in
/// memory at once; read one job at a time, each read is one job's window.
#[test]
fn postgres_audit_of_every_job_over_a_busy_week() {
    let backend = Backend::postgres("days");
    let mut list = String::new();
    for j in 0..100 {
        list += &format!(
            "[jobs.j{j:02}]\nschedule = \"*:*:00\"\ncommand = [\"/bin/true\"]\n{}\n",
            backend.store_line()
        );
    }
    let sb = Sandbox::new(&list);
    // Creates the store's schema.
    let out = sb.run(&["run", "--force", "j00"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let now_min = jiff::Timestamp::now().as_second() / 60;
    backend.sql(
        &sb,
        &format!(
            "DELETE FROM jobguard_run;
             INSERT INTO jobguard_run (run_id, job, slot_usec, slot_zone, attempt, outcome,
               reason, exit_status, forced, trigger_kind, host, machine_id, boot_id, pid,
               pid_start, invocation_id, started_at, finished_at, fencing_token, report,
               resolution)
             SELECT 'r' || j || '-' || k, 'j' || lpad(j::text, 2, '0'),
               ({now_min}::bigint - k) * 60000000, 'UTC', 1, 'succeeded', NULL, 0, false, 'timer',
               'h', 'm', 'b', 1, 1, NULL, ({now_min}::bigint - k) * 60000000 + 1000,
               ({now_min}::bigint - k) * 60000000 + 2000, 1000000000 - k, '{{}}', NULL
             FROM generate_series(0, 99) AS j, generate_series(0, 10085) AS k;
             INSERT INTO jobguard_lease (job, holder, host, token, acquired_at, expire_at)
               SELECT DISTINCT job, '', 'h', 1000000000, 0, 0 FROM jobguard_run WHERE true
               ON CONFLICT (job) DO UPDATE SET holder = '', token = excluded.token,
                 expire_at = 0;
             ANALYZE jobguard_run"
        ),
    );
    let started = std::time::Instant::now();
    let (out, v) = audit(&sb, &["--since", "-7d"]);
    eprintln!("audit --since -7d: {:?}", started.elapsed());
    // 1 when a minute that passed since the records were written counts as missed.
    assert!(
        matches!(out.status.code(), Some(0 | 1)),
        "{:?}: {}",
        out.status,
        stderr(&out)
    );
    let jobs = v["jobs"].as_array().unwrap();
    assert_eq!(jobs.len(), 100, "{}", stderr(&out));
    for j in jobs {
        assert!(j["records"].as_u64().unwrap() >= 10_080, "{j}");
        for f in j["findings"].as_array().unwrap() {
            assert_eq!(f["kind"], "missed", "{j}");
        }
    }
}

/// Issue 38, item 7: a dedupe mark is the job's own unless it is `--shared`. Two jobs of one
/// store mark the same key each once (the second pipeline is not told "already marked"),
/// a `--shared` mark is one for every job of the store, and a mark an older version
/// recorded (namespace without the job, the table as it made it) still counts, for every
/// job: the key was handled then. On MariaDB the old table's namespace column (64 bytes) is widened
/// for a job name of 64 characters.
#[test]
fn marks_are_per_job_unless_shared() {
    let long = format!("m{}", "x".repeat(63));
    for backend in [Backend::Sqlite, Backend::mysql("marks")] {
        let sb = Sandbox::new(&format!(
            "{}{}",
            job("ship", "true", &backend),
            job(&long, "true", &backend)
        ));
        if let Backend::Mysql(db) = &backend {
            // The table and a mark as the previous version wrote them.
            let out = Command::new("mysql")
                .args(["-h", "127.0.0.1", "-u", "root", db, "-e"])
                .arg(
                    "CREATE TABLE jobguard_mark (namespace VARBINARY(64) NOT NULL, \
                     mark_key VARBINARY(512) NOT NULL, job VARCHAR(255) NOT NULL, \
                     run_id VARCHAR(255) NOT NULL, host VARCHAR(255) NOT NULL, \
                     token BIGINT NOT NULL, marked_at BIGINT NOT NULL, \
                     PRIMARY KEY (namespace, mark_key), KEY jobguard_mark_age (job, marked_at)) \
                     ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin; \
                     INSERT INTO jobguard_mark VALUES ('orders', 'legacy-1', 'ship', '', 'old 1', 0, 1)",
                )
                .output()
                .unwrap();
            assert!(out.status.success(), "{}", stderr(&out));
        }
        let code = |args: &[&str]| {
            let out = sb.run(args);
            (out.status.code(), stdout(&out) + &stderr(&out))
        };
        let what = backend.store_line();
        assert_eq!(
            code(&["mark", "orders", "1042", "--job", "ship"]).0,
            Some(0),
            "{what}"
        );
        let (c, text) = code(&["mark", "orders", "1042", "--job", "ship"]);
        assert_eq!(c, Some(1), "{what}: {text}");
        let (c, text) = code(&["mark", "orders", "1042", "--job", &long]);
        assert_eq!(c, Some(0), "{what}: the other job's key is its own: {text}");
        let (c, text) = code(&["marked", "orders", "1042", "--job", &long]);
        assert_eq!(c, Some(0), "{what}: {text}");
        assert!(text.contains(&format!("for {long}")), "{what}: {text}");
        let (c, text) = code(&["mark", "--shared", "stock", "7", "--job", "ship"]);
        assert_eq!(c, Some(0), "{what}: {text}");
        let (c, text) = code(&["mark", "--shared", "stock", "7", "--job", &long]);
        assert_eq!(c, Some(1), "{what}: a shared mark is one per store: {text}");
        assert!(
            text.contains("shared") && text.contains("for ship"),
            "{what}: {text}"
        );
        let (c, text) = code(&["marked", "stock", "7", "--job", &long]);
        assert_eq!(
            c,
            Some(0),
            "{what}: a shared mark counts in every job's own namespace: {text}"
        );
        let (c, text) = code(&["marked", "--shared", "stock", "7", "--job", &long]);
        assert_eq!(c, Some(0), "{what}: {text}");
        if matches!(backend, Backend::Mysql(_)) {
            let (c, text) = code(&["mark", "orders", "legacy-1", "--job", "ship"]);
            assert_eq!(
                c,
                Some(1),
                "{what}: the older version's mark counts: {text}"
            );
            let (c, text) = code(&["marked", "orders", "legacy-1", "--job", "ship"]);
            assert_eq!(c, Some(0), "{what}: {text}");
            let (c, text) = code(&["mark", "orders", "legacy-1", "--job", &long]);
            assert_eq!(
                c,
                Some(1),
                "{what}: a key handled before the upgrade is not handled again: {text}"
            );
        }
    }
}

/// Issue 38, item 6: a drill killed in its lease layer leaves a probe record `running`;
/// the next recovery pass settles it (it is no slot to hold for a person), and `audit`
/// finds nothing.
#[test]
fn a_killed_drills_probe_is_settled_by_recover() {
    let sb = Sandbox::new(&job("nightly", "true", &Backend::Sqlite));
    let mut drill = sb
        .cmd(&["drill", "nightly"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // The lease layer waits for its first probe lease (2 s) to expire: kill it then.
    // (`history` fails until the drill has made the store.)
    let in_lease_layer = wait_until(10, || {
        let out = sb.run(&["history", "nightly@drill", "--json"]);
        out.status.success()
            && serde_json::from_slice::<serde_json::Value>(&out.stdout)
                .ok()
                .and_then(|v| v.as_array().cloned())
                .is_some_and(|rows| rows.iter().any(|r| r["outcome"] == "running"))
    });
    drill.kill().unwrap();
    assert!(in_lease_layer, "the drill reached its lease layer");
    drill.wait().unwrap();
    let probes = sb.history("nightly@drill");
    assert!(
        probes.iter().any(|r| r["outcome"] == "running"),
        "killed in its lease layer: {probes:#?}"
    );
    std::thread::sleep(std::time::Duration::from_millis(2500));
    let out = sb.run(&["recover"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let probes = sb.history("nightly@drill");
    assert!(
        probes.iter().all(|r| r["outcome"] != "running"),
        "{}{}{probes:#?}",
        stdout(&out),
        stderr(&out)
    );
    let (out, v) = audit(&sb, &[]);
    assert_eq!(out.status.code(), Some(0), "{v:#}");
}

/// A second file in `jobs.d` that reuses a job's name: neither definition is used, so
/// the job runs no slot. `audit` and `status` say so in their exit status (78, the job
/// list's) and name both files; a job list without the error audits clean again.
#[test]
fn a_job_defined_twice_makes_audit_and_status_fail() {
    let sb = Sandbox::new(&job("sync", "true", &Backend::Sqlite));
    let dir = sb.file("jobs.d");
    std::fs::create_dir(&dir).unwrap();
    let copy = "[jobs.sync]\nschedule = \"hourly\"\ncommand = [\"true\"]\nstore = \"sqlite://../state/jobguard.db\"\n";
    std::fs::write(dir.join("50-copy.toml"), copy).unwrap();
    let on_dir = |args: &[&str]| {
        let base = sb.cmd(&[]);
        let mut c = Command::new(base.get_program());
        c.args(args).arg("--config").arg(sb.path());
        for (k, v) in base.get_envs() {
            match v {
                Some(v) => c.env(k, v),
                None => c.env_remove(k),
            };
        }
        c.output().unwrap()
    };
    for cmd in [&["audit"][..], &["status"][..]] {
        let out = on_dir(cmd);
        let err = stderr(&out);
        assert_eq!(
            out.status.code(),
            Some(78),
            "{cmd:?}: {}{err}",
            stdout(&out)
        );
        assert!(
            err.contains("jobs.toml") && err.contains("50-copy.toml") && err.contains("sync"),
            "{cmd:?}: {err}"
        );
    }
    std::fs::remove_file(dir.join("50-copy.toml")).unwrap();
    let out = on_dir(&["audit"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
}

/// A daily job paused across the fleet for five days, as a history written with the real
/// binary and a moved clock: the slots in the window are skipped (the command's own
/// record shows none of them ran), listed as paused by `audit`, not missed by `status` or
/// counted by `metrics`; the slot the day before the pause began is still missed until a
/// catch-up (`catch_up = "all"`) runs it and every other slot outside the window, and
/// none inside. Pausing again with no end shows in `status` and `metrics`; a person's
/// forced run still runs; `resume` ends it.
#[test]
fn sqlite_slots_in_a_pause_window_are_skipped_and_listed_as_paused_never_missed() {
    let sb = Sandbox::new(&format!(
        "{}catch_up = \"all\"\n",
        job(
            "daily",
            "echo \"$JOBGUARD_SLOT\" >> \"@DIR@/out\"",
            &Backend::Sqlite
        )
    ));
    let d = today();
    let at = |days: i64| format_usec(d - days * DAY);
    for back in ["-12d", "-11d"] {
        let out = faked(&sb, back, &["run", "daily"]);
        assert!(out.status.success(), "{}", stderr(&out));
    }
    // Paused ten days ago, after that day's slot, until an hour after the slot 5 days ago.
    let until = format_usec(d - 5 * DAY + 3_600_000_000);
    let out = faked(
        &sb,
        "-10d",
        &["pause", "daily", "--until", &until, "--reason", "migration"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains(&until), "{}", stdout(&out));
    // While the window lasts nothing starts, not even that day's slot, which elapsed
    // before it began (it stays missed, for the catch-up after the window).
    let out = faked(&sb, "-10d", &["run", "daily"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("paused"), "{}", stderr(&out));
    // A firing in the window is skipped, saying who paused it and why.
    let out = faked(&sb, "-7d", &["run", "daily"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("paused") && stderr(&out).contains("migration"),
        "{}",
        stderr(&out)
    );
    assert_eq!(sb.lines("out"), 2, "nothing ran in the window");
    // Before the catch-up: 10 days ago and the last five are missed, the five in the
    // window are paused, and only the missed ones need a person.
    let (out, v) = audit(&sb, &[]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let f = findings(&v, "daily");
    let paused: Vec<String> = (5..=9).rev().map(at).collect();
    assert_eq!(of_kind(&f, "paused"), paused, "{f:?}");
    let mut missed = vec![at(10)];
    missed.extend((0..=4).rev().map(at));
    assert_eq!(of_kind(&f, "missed"), missed, "{f:?}");
    assert_eq!(v["attention"], 6, "{v}");
    let (_, sv) = status_json(&sb);
    assert_eq!(sv["jobs"][0]["missed"].as_array().unwrap().len(), 6, "{sv}");
    assert!(sv["jobs"][0]["fleet_pause"].is_null(), "{sv}");
    let metrics = stdout(&sb.run(&["metrics"]));
    assert!(
        metrics.contains("jobguard_missed_slots{job=\"daily\"} 6"),
        "{metrics}"
    );
    assert!(
        metrics.contains("jobguard_paused{job=\"daily\"} 0"),
        "{metrics}"
    );

    // The catch-up runs every slot since the newest record but the paused ones.
    let out = sb.run(&["run", "daily"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let ran: Vec<String> = std::fs::read_to_string(sb.file("out"))
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    let mut want = vec![at(12), at(11)];
    want.extend(missed.iter().cloned());
    assert_eq!(ran, want);
    let (out, v) = audit(&sb, &[]);
    assert_eq!(out.status.code(), Some(0), "{v}");
    assert_eq!(of_kind(&findings(&v, "daily"), "paused"), paused, "{v}");
    let (st, _) = status_json(&sb);
    assert_eq!(st.status.code(), Some(0), "{}", stderr(&st));

    // Paused again with no end: status and metrics say so; a forced run still runs.
    let out = sb.run(&["pause", "daily"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let (st, sv) = status_json(&sb);
    assert_eq!(st.status.code(), Some(0), "{}", stderr(&st));
    assert!(sv["jobs"][0]["fleet_pause"]["until"].is_null(), "{sv}");
    assert!(sv["jobs"][0]["next_elapse"].is_null(), "{sv}");
    let table = stdout(&sb.run(&["status"]));
    assert!(table.contains(" paused "), "{table}");
    let metrics = stdout(&sb.run(&["metrics"]));
    assert!(
        metrics.contains("jobguard_paused{job=\"daily\"} 1"),
        "{metrics}"
    );
    let out = sb.run(&["run", "daily", "--slot", &at(0), "--force"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(sb.lines("out"), want.len() + 1);
    let out = sb.run(&["resume", "daily"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let (_, sv) = status_json(&sb);
    assert!(sv["jobs"][0]["fleet_pause"].is_null(), "{sv}");
    // An end that has passed is refused.
    let out = sb.run(&["pause", "daily", "--until", "-1h"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    // A record nobody can read stops the job loudly, and resume replaces it.
    Backend::Sqlite.sql(
        &sb,
        "UPDATE jobguard_host SET beat = 'garbage' WHERE host = 'pause/daily'",
    );
    let out = sb.run(&["run", "daily"]);
    assert_eq!(out.status.code(), Some(70), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("pause record of daily"),
        "{}",
        stderr(&out)
    );
    let out = sb.run(&["resume", "daily"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("replaced"), "{}", stderr(&out));
    // The windows it held are gone with it: their slots are missed now, as said.
    let (st, sv) = status_json(&sb);
    assert_eq!(st.status.code(), Some(1), "{}", stderr(&st));
    let missed: Vec<&str> = sv["jobs"][0]["missed"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| f["slot"].as_str())
        .collect();
    assert_eq!(missed, paused, "{sv}");
}

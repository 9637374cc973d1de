//! `jobguard metrics` and the textfile `jobguard recover` writes, over histories built with
//! the real binary on SQLite and PostgreSQL: successes, a failure, a SIGKILLed run, missed
//! slots. Every line of the exposition is parsed (and checked by `promtool check metrics`
//! where Debian's prometheus package is installed, as in CI), every value is compared with
//! the ledger (`history --json`, `status --json`), and the example alert rules are checked
//! and unit-tested with promtool.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::process::{Command, Stdio};

use jobguard::calendar::CalendarSpec;
use jobguard::guard::ledger::format_usec;
use support::{Sandbox, stderr, stdout, wait_until};

const DAY: i64 = 86_400_000_000;
const RULES: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/packaging/prometheus/jobguard.rules.yml"
);
const RULES_TEST: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/prometheus/jobguard.rules.test.yml"
);

/// Where a test keeps its records.
enum Backend {
    Sqlite,
    /// PostgreSQL on 127.0.0.1:5432, in a schema of the test's own.
    Postgres(String),
}

impl Backend {
    fn postgres(tag: &str) -> Backend {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        Backend::Postgres(format!("jgmetrics_{tag}_{}_{nanos}", std::process::id()))
    }

    /// The job's `store =` line.
    fn store_line(&self) -> String {
        match self {
            Backend::Sqlite => String::new(),
            Backend::Postgres(ns) => {
                format!("store = \"postgres://root@127.0.0.1:5432/test?schema={ns}\"\n")
            }
        }
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        if let Backend::Postgres(ns) = self {
            let _ = Command::new("psql")
                .args(["-h", "127.0.0.1", "-U", "root", "-d", "test", "-c"])
                .arg(format!("DROP SCHEMA IF EXISTS {ns} CASCADE"))
                .output();
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
/// that it is surely past the grace, and the last minute before the next one so that the
/// test does not straddle it.
fn today() -> i64 {
    let cal = CalendarSpec::parse("*-*-* 00:00:00 UTC").unwrap();
    loop {
        let now = jiff::Timestamp::now();
        let d = cal.previous_elapse(now).unwrap().as_microsecond();
        let into = now.as_microsecond() - d;
        if into > 60_000_000 && into < DAY - 300_000_000 {
            return d;
        }
        std::thread::sleep(std::time::Duration::from_secs(5));
    }
}

/// One sample of the exposition.
#[derive(Debug, Clone)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// A parsed exposition: samples, and each family's HELP and TYPE.
#[derive(Debug, Default)]
struct Exposition {
    samples: Vec<Sample>,
    help: BTreeMap<String, String>,
    types: BTreeMap<String, String>,
}

impl Exposition {
    /// The samples named `name` whose labels include `labels`.
    fn find(&self, name: &str, labels: &[(&str, &str)]) -> Vec<&Sample> {
        self.samples
            .iter()
            .filter(|s| {
                s.name == name
                    && labels
                        .iter()
                        .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
            })
            .collect()
    }

    /// The value of the one sample named `name` with `labels`; `None` when there is none.
    fn value(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let found = self.find(name, labels);
        assert!(found.len() <= 1, "{name} {labels:?}: {found:?}");
        found.first().map(|s| s.value)
    }
}

fn is_name(s: &str, colon: bool) -> bool {
    let mut chars = s.chars();
    let ok_first = |c: char| c.is_ascii_alphabetic() || c == '_' || (colon && c == ':');
    chars.next().is_some_and(ok_first) && chars.all(|c| ok_first(c) || c.is_ascii_digit())
}

/// Parses text exposition format 0.0.4 strictly enough for what jobguard writes: HELP and
/// TYPE before the samples of every family, families not interleaved, no series twice,
/// label values unescaped (`\\`, `\"`, `\n`), counters named `_total`. Panics on any
/// violation, naming the line.
fn parse(text: &str) -> Exposition {
    assert!(text.ends_with('\n'), "the text ends with a newline");
    let mut e = Exposition::default();
    let mut done: BTreeSet<String> = BTreeSet::new();
    let mut current: Option<String> = None;
    let mut seen: BTreeSet<(String, Vec<(String, String)>)> = BTreeSet::new();
    for (n, line) in text.lines().enumerate() {
        let at = format!("line {}: {line:?}", n + 1);
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').unwrap_or_else(|| panic!("{at}"));
            assert!(is_name(name, true), "{at}");
            assert!(!help.is_empty(), "{at}: empty help");
            assert!(
                e.help.insert(name.into(), help.into()).is_none(),
                "{at}: HELP twice"
            );
            if let Some(c) = current.replace(name.to_string()) {
                done.insert(c);
            }
            assert!(!done.contains(name), "{at}: family interleaved");
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or_else(|| panic!("{at}"));
            assert_eq!(current.as_deref(), Some(name), "{at}: TYPE after its HELP");
            assert!(
                ["counter", "gauge", "histogram", "summary", "untyped"].contains(&kind),
                "{at}"
            );
            if kind == "counter" {
                assert!(name.ends_with("_total"), "{at}: a counter ends in _total");
            }
            assert!(e.types.insert(name.into(), kind.into()).is_none(), "{at}");
            continue;
        }
        assert!(!line.starts_with('#'), "{at}: unknown comment");
        // name{labels} value
        let name_end = line.find(['{', ' ']).unwrap_or_else(|| panic!("{at}"));
        let name = &line[..name_end];
        assert!(is_name(name, true), "{at}");
        assert_eq!(
            current.as_deref(),
            Some(name),
            "{at}: sample outside its family"
        );
        assert!(e.types.contains_key(name), "{at}: no TYPE");
        let mut rest = &line[name_end..];
        let mut labels = BTreeMap::new();
        if let Some(r) = rest.strip_prefix('{') {
            let mut chars = r.char_indices().peekable();
            loop {
                let (start, c) = chars.next().unwrap_or_else(|| panic!("{at}"));
                if c == '}' {
                    rest = &r[start + 1..];
                    break;
                }
                let eq = r[start..].find('=').unwrap_or_else(|| panic!("{at}")) + start;
                let lname = &r[start..eq];
                assert!(is_name(lname, false), "{at}: label {lname:?}");
                while chars.peek().is_some_and(|(i, _)| *i <= eq) {
                    chars.next();
                }
                assert_eq!(chars.next().map(|(_, c)| c), Some('"'), "{at}");
                let mut value = String::new();
                loop {
                    match chars.next().unwrap_or_else(|| panic!("{at}: open value")) {
                        (_, '\\') => match chars.next().map(|(_, c)| c) {
                            Some('\\') => value.push('\\'),
                            Some('"') => value.push('"'),
                            Some('n') => value.push('\n'),
                            other => panic!("{at}: bad escape {other:?}"),
                        },
                        (_, '"') => break,
                        (_, '\n') => panic!("{at}: raw newline"),
                        (_, c) => value.push(c),
                    }
                }
                assert!(labels.insert(lname.to_string(), value).is_none(), "{at}");
                if chars.peek().map(|(_, c)| *c) == Some(',') {
                    chars.next();
                }
            }
        }
        let value_text = rest.strip_prefix(' ').unwrap_or_else(|| panic!("{at}"));
        assert!(
            !value_text.contains(' '),
            "{at}: jobguard writes no timestamps"
        );
        let value: f64 = match value_text {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            "NaN" => f64::NAN,
            v => v.parse().unwrap_or_else(|_| panic!("{at}: value")),
        };
        let key = (
            name.to_string(),
            labels.clone().into_iter().collect::<Vec<_>>(),
        );
        assert!(seen.insert(key), "{at}: series twice");
        e.samples.push(Sample {
            name: name.into(),
            labels,
            value,
        });
    }
    for name in e.types.keys() {
        assert!(e.help.contains_key(name), "{name}: TYPE without HELP");
    }
    e
}

fn promtool() -> bool {
    let here = Command::new("promtool").arg("--version").output().is_ok();
    assert!(
        here || std::env::var_os("CI").is_none(),
        "promtool missing in CI (.ci/run installs Debian's prometheus)"
    );
    if !here {
        eprintln!("promtool not installed: only this test's own parser checks the text");
    }
    here
}

/// `promtool check metrics` on `text` (its linter: names, units, HELP), when installed.
fn promtool_check(text: &str) {
    if !promtool() {
        return;
    }
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool check metrics: {}{}\n{text}",
        stdout(&out),
        stderr(&out)
    );
}

/// `jobguard metrics`, checked and parsed; and its exit status.
fn metrics(sb: &Sandbox) -> (Option<i32>, String, Exposition) {
    let out = sb.run(&["metrics"]);
    let text = stdout(&out);
    promtool_check(&text);
    let e = parse(&text);
    (out.status.code(), text, e)
}

/// What the ledger says of `job`, as the metrics must say it.
fn check_against_ledger(sb: &Sandbox, e: &Exposition, job: &str) {
    let h = sb.history(job);
    let l = [("job", job)];
    assert_eq!(e.value("jobguard_store_up", &l), Some(1.0));
    assert_eq!(
        e.value("jobguard_schedule_interval_seconds", &l),
        Some(86_400.0)
    );
    assert_eq!(
        e.value("jobguard_ledger_records", &l),
        Some(h.len() as f64),
        "attempts"
    );
    for outcome in ["succeeded", "failed", "interrupted", "lease_lost"] {
        let n = h.iter().filter(|r| r["outcome"] == outcome).count();
        assert_eq!(
            e.value(
                "jobguard_ledger_runs",
                &[("job", job), ("outcome", outcome)]
            ),
            Some(n as f64),
            "{job} {outcome}"
        );
    }
    let secs = |v: &serde_json::Value| v.as_i64().unwrap() as f64 / 1e6;
    let last_success = h
        .iter()
        .filter(|r| r["outcome"] == "succeeded")
        .max_by_key(|r| r["started_at_usec"].as_i64())
        .map(|r| secs(&r["finished_at_usec"]));
    assert_eq!(
        e.value("jobguard_last_success_timestamp_seconds", &l),
        last_success
    );
    let last = h
        .iter()
        .filter(|r| r["outcome"] != "running")
        .max_by_key(|r| (r["slot_usec"].as_i64(), r["started_at_usec"].as_i64()));
    match last {
        Some(r) => {
            for outcome in ["succeeded", "failed", "interrupted", "lease_lost"] {
                assert_eq!(
                    e.value(
                        "jobguard_last_outcome",
                        &[("job", job), ("outcome", outcome)]
                    ),
                    Some(if r["outcome"] == outcome { 1.0 } else { 0.0 }),
                    "{job} last outcome {outcome}"
                );
            }
            assert_eq!(
                e.value("jobguard_last_slot_timestamp_seconds", &l),
                Some(secs(&r["slot_usec"]))
            );
            let took =
                r["finished_at_usec"].as_i64().unwrap() - r["started_at_usec"].as_i64().unwrap();
            assert_eq!(
                e.value("jobguard_last_duration_seconds", &l),
                Some(took as f64 / 1e6)
            );
        }
        None => {
            assert!(e.find("jobguard_last_outcome", &l).is_empty());
            assert!(e.find("jobguard_last_duration_seconds", &l).is_empty());
        }
    }
    let mut running: BTreeMap<String, f64> = BTreeMap::new();
    for r in h.iter().filter(|r| r["outcome"] == "running") {
        *running
            .entry(r["host"].as_str().unwrap().to_string())
            .or_default() += 1.0;
    }
    let shown: BTreeMap<String, f64> = e
        .find("jobguard_running", &l)
        .iter()
        .map(|s| (s.labels["host"].clone(), s.value))
        .collect();
    assert_eq!(shown, running, "{job} running");
}

/// `status --json`'s entry of `job`.
fn status_of(sb: &Sandbox, job: &str) -> serde_json::Value {
    let out = sb.run(&["status", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("status json: {e}: {}", stdout(&out)));
    v["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["job"] == job)
        .cloned()
        .unwrap()
}

fn lease_matches_status(sb: &Sandbox, e: &Exposition, job: &str) {
    let st = status_of(sb, job);
    let l = [("job", job)];
    match st["lease"].as_object() {
        Some(lease) => {
            let host = lease["host"].as_str().unwrap();
            let until: jiff::Timestamp = lease["expire_at"].as_str().unwrap().parse().unwrap();
            assert_eq!(
                e.value("jobguard_lease_holder", &[("job", job), ("host", host)]),
                Some(1.0)
            );
            assert_eq!(e.find("jobguard_lease_holder", &l).len(), 1);
            assert_eq!(
                e.value(
                    "jobguard_lease_expiry_timestamp_seconds",
                    &[("job", job), ("host", host)]
                ),
                Some(until.as_microsecond() as f64 / 1e6)
            );
        }
        None => {
            assert!(e.find("jobguard_lease_holder", &l).is_empty(), "{job}");
            assert!(
                e.find("jobguard_lease_expiry_timestamp_seconds", &l)
                    .is_empty()
            );
        }
    }
    let attention = st["needs_attention"].as_bool().unwrap();
    assert_eq!(
        e.value("jobguard_job_needs_attention", &l),
        Some(f64::from(u8::from(attention))),
        "{job}: the rule of status: {st}"
    );
}

/// Job `hist`: successes, a failure, then days with no record (missed). Job `crash`: a
/// run SIGKILLed mid-way (running with its lease held, then orphaned once the lease
/// expired), then recovered and re-run.
/// Then the textfile `recover` writes, read while it is being rewritten.
fn a_history_in_metrics(backend: Backend) {
    let jobs = format!(
        "[metrics]\ntextfile = \"prom/jobguard.prom\"\n\n{}{}",
        job(
            "hist",
            "if [ -e \"@DIR@/fail\" ]; then exit 3; fi",
            &backend
        ),
        job(
            "crash",
            "echo $$ >> \"@DIR@/out\"; if [ \"$JOBGUARD_ATTEMPT\" = 1 ]; then sleep 60; fi",
            &backend
        ) + "lease_ttl = \"3s\"\nkill_grace = \"1s\"\n",
    );
    let sb = Sandbox::new(&jobs);
    std::fs::create_dir(sb.file("prom")).unwrap();
    let d = today();

    // Nothing recorded yet: both listed, counters 0, nothing missed before a first record.
    let (code, _, e) = metrics(&sb);
    assert_eq!(code, Some(0));
    for j in ["hist", "crash"] {
        check_against_ledger(&sb, &e, j);
        assert_eq!(e.value("jobguard_missed_slots", &[("job", j)]), Some(0.0));
    }

    for (i, fail) in [(5, false), (4, true), (3, false)] {
        if fail {
            std::fs::write(sb.file("fail"), "").unwrap();
        }
        let slot = format_usec(d - i * DAY);
        let out = sb.run(&["run", "hist", "--slot", &slot]);
        assert_eq!(
            out.status.code(),
            Some(if fail { 3 } else { 0 }),
            "{}",
            stderr(&out)
        );
        let _ = std::fs::remove_file(sb.file("fail"));
    }
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
    child.kill().unwrap();
    child.wait().unwrap();
    let killed = std::time::Instant::now();

    let (code, _, e) = metrics(&sb);
    assert_eq!(code, Some(0));
    for j in ["hist", "crash"] {
        check_against_ledger(&sb, &e, j);
        lease_matches_status(&sb, &e, j);
    }
    let h = [("job", "hist")];
    // Missed: every day after the newest record (d - 3 days) up to today.
    assert_eq!(e.value("jobguard_missed_slots", &h), Some(3.0));
    assert_eq!(e.value("jobguard_failed_slots", &h), Some(1.0));
    assert_eq!(e.value("jobguard_held_slots", &h), Some(0.0));
    assert_eq!(e.value("jobguard_job_needs_attention", &h), Some(1.0));
    let c = [("job", "crash")];
    let host = sb.history("crash")[0]["host"].as_str().unwrap().to_string();
    assert_eq!(
        e.value("jobguard_running", &[("job", "crash"), ("host", &host)]),
        Some(1.0)
    );
    if killed.elapsed() < std::time::Duration::from_secs(2) {
        assert_eq!(
            e.value(
                "jobguard_lease_holder",
                &[("job", "crash"), ("host", &host)]
            ),
            Some(1.0),
            "the killed run's lease is not expired yet"
        );
        assert_eq!(
            e.value("jobguard_orphaned_runs", &c),
            Some(0.0),
            "a holder whose lease is unexpired is not judged gone"
        );
    }
    // Past the lease (3 s) by the store's clock: the run's holder is gone.
    std::thread::sleep(std::time::Duration::from_millis(3500).saturating_sub(killed.elapsed()));
    let (code, _, e) = metrics(&sb);
    assert_eq!(code, Some(0));
    check_against_ledger(&sb, &e, "crash");
    lease_matches_status(&sb, &e, "crash");
    assert_eq!(e.value("jobguard_orphaned_runs", &c), Some(1.0));
    assert!(e.find("jobguard_lease_holder", &c).is_empty());
    assert_eq!(e.value("jobguard_job_needs_attention", &c), Some(1.0));

    // recover marks the run interrupted and re-runs it (no systemd here: inline), and
    // writes the textfile; a reader never sees a part of it.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let dir = sb.file("prom");
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut reads = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                for entry in std::fs::read_dir(&dir).unwrap() {
                    let name = entry.unwrap().file_name().into_string().unwrap();
                    assert!(
                        name == "jobguard.prom"
                            || (name.starts_with('.') && !name.ends_with(".prom")),
                        "node_exporter would read {name}"
                    );
                }
                if let Ok(text) = std::fs::read_to_string(dir.join("jobguard.prom")) {
                    let e = parse(&text);
                    assert!(
                        e.types.contains_key("jobguard_job_needs_attention"),
                        "{text}"
                    );
                    reads += 1;
                }
            }
            reads
        })
    };
    for _ in 0..5 {
        let rec = sb.run(&["recover"]);
        assert_eq!(rec.status.code(), Some(0), "{}", stderr(&rec));
        assert!(!stderr(&rec).contains("not written"), "{}", stderr(&rec));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let reads = reader.join().unwrap();
    assert!(reads > 0, "the reader saw the file");
    let names: Vec<String> = std::fs::read_dir(sb.file("prom"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(
        names,
        vec!["jobguard.prom".to_string()],
        "no temporary file left"
    );
    let meta = std::fs::metadata(sb.file("prom/jobguard.prom")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(meta.permissions().mode() & 0o777, 0o644);

    let file = std::fs::read_to_string(sb.file("prom/jobguard.prom")).unwrap();
    promtool_check(&file);
    let (code, text, e) = metrics(&sb);
    assert_eq!(code, Some(0));
    assert_eq!(file, text, "the textfile is what jobguard metrics prints");
    for j in ["hist", "crash"] {
        check_against_ledger(&sb, &e, j);
        lease_matches_status(&sb, &e, j);
    }
    assert_eq!(
        e.value(
            "jobguard_ledger_runs",
            &[("job", "crash"), ("outcome", "interrupted")]
        ),
        Some(1.0)
    );
    assert_eq!(
        e.value(
            "jobguard_last_outcome",
            &[("job", "crash"), ("outcome", "succeeded")]
        ),
        Some(1.0),
        "the re-run of the slot is its newest record"
    );
    assert!(e.find("jobguard_running", &c).is_empty());
    assert_eq!(e.value("jobguard_orphaned_runs", &c), Some(0.0));
    assert_eq!(e.value("jobguard_job_needs_attention", &c), Some(0.0));
    // recover reported hist's missed slots; they are still missed.
    assert_eq!(e.value("jobguard_missed_slots", &h), Some(3.0));

    // Retention deletes hist's oldest slot, done (a prune four days from now, by a clock
    // moved with libfaketime: SQLite's clock is the host's): no series typed `counter`
    // may go down, which Prometheus would read as a reset.
    if !matches!(backend, Backend::Sqlite) {
        return;
    }
    let list = std::fs::read_to_string(sb.file("jobs.toml")).unwrap();
    let list = list.replacen("[jobs.hist]\n", "[jobs.hist]\nretention = \"1d\"\n", 1);
    std::fs::write(sb.file("jobs.toml"), list).unwrap();
    let pruned = sb
        .cmd_under("faketime", &["-f", "+4d"], &["prune", "hist"])
        .output()
        .expect("prune under faketime");
    assert_eq!(pruned.status.code(), Some(0), "{}", stderr(&pruned));
    assert_eq!(sb.history("hist").len(), 2, "{}", stdout(&pruned));
    let (code, _, after) = metrics(&sb);
    assert_eq!(code, Some(0));
    check_against_ledger(&sb, &after, "hist");
    for s in &e.samples {
        if e.types.get(&s.name).map(String::as_str) != Some("counter") {
            continue;
        }
        let labels: Vec<(&str, &str)> = s
            .labels
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let now = after.value(&s.name, &labels).unwrap_or(0.0);
        assert!(
            now >= s.value,
            "counter {} {:?} went down from {} to {now} when records were deleted",
            s.name,
            s.labels,
            s.value
        );
    }
}

#[test]
fn sqlite_a_history_in_metrics() {
    a_history_in_metrics(Backend::Sqlite);
}

#[test]
fn postgres_a_history_in_metrics() {
    a_history_in_metrics(Backend::postgres("hist"));
}

/// A job whose store cannot be reached is still listed (store_up 0, exit 69); a textfile
/// that cannot be written is a warning, and the pass still succeeds.
#[test]
fn a_store_that_cannot_be_read_and_a_textfile_that_cannot_be_written() {
    let sb = Sandbox::new(&format!(
        "[metrics]\ntextfile = \"missing/jobguard.prom\"\n\n{}[jobs.away]\nschedule = \"hourly\"\ncommand = [\"true\"]\nstore = \"postgres://root@127.0.0.1:1/test?connect_timeout=2\"\n",
        job("here", "true", &Backend::Sqlite)
    ));
    let (code, _, e) = metrics(&sb);
    assert_eq!(code, Some(69));
    assert_eq!(e.value("jobguard_store_up", &[("job", "away")]), Some(0.0));
    assert_eq!(
        e.value("jobguard_schedule_interval_seconds", &[("job", "away")]),
        Some(3600.0)
    );
    assert!(
        e.find("jobguard_ledger_records", &[("job", "away")])
            .is_empty()
    );
    assert!(
        e.find("jobguard_job_needs_attention", &[("job", "away")])
            .is_empty()
    );
    assert_eq!(e.value("jobguard_store_up", &[("job", "here")]), Some(1.0));

    let rec = sb.run(&["recover", "here"]);
    assert_eq!(rec.status.code(), Some(0), "{}", stderr(&rec));
    assert!(
        stderr(&rec).contains("metrics textfile")
            && stderr(&rec).contains("missing/jobguard.prom not written"),
        "{}",
        stderr(&rec)
    );
    assert!(!sb.file("missing").exists());
}

/// A command over several jobs exits with the worst status it met, not the last: job `a`
/// has a store file that cannot be read (78, the job list is wrong), and job `z`, read
/// after it, a store that cannot be reached (69). `metrics`, `status` and `audit` exit
/// 78 (crate::exit::SEVERITY); `metrics` returned the last job's 69.
#[test]
fn the_worst_status_of_several_jobs_is_the_exit_status_whatever_their_order() {
    let sb = Sandbox::new(
        "[jobs.a]\nschedule = \"hourly\"\ncommand = [\"true\"]\nstore_file = \"/nonexistent/jobguard-store\"\n\n\
         [jobs.z]\nschedule = \"hourly\"\ncommand = [\"true\"]\nstore = \"postgres://root@127.0.0.1:1/test?connect_timeout=2\"\n",
    );
    let (code, _, e) = metrics(&sb);
    assert_eq!(code, Some(78));
    assert_eq!(e.value("jobguard_store_up", &[("job", "z")]), Some(0.0));
    for args in [&["status"][..], &["audit"]] {
        let out = sb.run(args);
        assert_eq!(out.status.code(), Some(78), "{args:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("jobguard: job a: cannot read store_file"),
            "{}",
            stderr(&out)
        );
    }
}

/// A job left out by an error in its definition (a misspelt value, then a reload: its
/// timer is gone) does not vanish from monitoring: `metrics` counts the job list's
/// errors and names the job (alerts `JobguardJobListError`, `JobguardJobRefused`), and
/// `status` lists it as refused and exits 78, the status of a job list it cannot read.
#[test]
fn a_job_left_out_by_an_error_in_the_job_list_is_seen_by_status_and_metrics() {
    let sb = Sandbox::new(&format!(
        "{}[jobs.typo]\nschedule = \"hourly\"\ncommand = [\"true\"]\ncatch_up = \"al\"\n",
        job("here", "true", &Backend::Sqlite)
    ));
    let (code, text, e) = metrics(&sb);
    assert_eq!(code, Some(0), "{text}");
    promtool_check(&text);
    assert_eq!(
        e.types.get("jobguard_job_list_errors").map(String::as_str),
        Some("gauge")
    );
    assert_eq!(
        e.value("jobguard_job_list_errors", &[]),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        e.value("jobguard_job_refused", &[("job", "typo")]),
        Some(1.0),
        "{text}"
    );
    assert!(
        e.find("jobguard_job_refused", &[("job", "here")])
            .is_empty(),
        "{text}"
    );
    assert_eq!(e.value("jobguard_store_up", &[("job", "here")]), Some(1.0));

    let out = sb.run(&["status", "--json"]);
    assert_eq!(out.status.code(), Some(78), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("status json");
    let refused: Vec<&serde_json::Value> = v["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|j| j["job"] == "typo")
        .collect();
    assert_eq!(refused.len(), 1, "{v}");
    assert!(
        refused[0]["refused"]
            .as_str()
            .is_some_and(|r| r.contains("catch_up")),
        "{v}"
    );
    let out = sb.run(&["status"]);
    assert_eq!(out.status.code(), Some(78), "{}", stderr(&out));
    let row = stdout(&out)
        .lines()
        .find(|l| l.starts_with("typo "))
        .map(str::to_string);
    assert!(
        row.as_deref().is_some_and(|r| r.contains("refused")),
        "{}",
        stdout(&out)
    );

    // Fixed: no error, no refused job, status 0.
    let list = std::fs::read_to_string(sb.file("jobs.toml")).unwrap();
    std::fs::write(sb.file("jobs.toml"), list.replace("\"al\"", "\"all\"")).unwrap();
    let (_, text, e) = metrics(&sb);
    assert_eq!(
        e.value("jobguard_job_list_errors", &[]),
        Some(0.0),
        "{text}"
    );
    assert!(e.find("jobguard_job_refused", &[]).is_empty(), "{text}");
    assert_eq!(sb.run(&["status"]).status.code(), Some(0));
}

/// The `[metrics]` table: a misspelt key says what was meant, a path not ending in .prom
/// is refused, both with file:line:column.
#[test]
fn the_metrics_table_is_checked_with_positions() {
    let sb = Sandbox::new("[metrics]\ntextfiel = \"x.prom\"\n");
    let out = sb.run(&["check"]);
    let err = stderr(&out);
    assert!(
        err.contains("jobs.toml:5:1: metrics.textfiel: unknown key metrics.textfiel (did you mean metrics.textfile: the file jobguard recover writes the metrics to, for node_exporter?)"),
        "{err}"
    );
    let sb = Sandbox::new("[metrics]\ntextfile = \"/tmp/jobguard.txt\"\n");
    let err = stderr(&sb.run(&["check"]));
    assert!(
        err.contains("jobs.toml:5:12: metrics.textfile: must end in .prom"),
        "{err}"
    );
}

/// The example rules load in promtool and fire as their unit tests say.
#[test]
fn the_example_alert_rules_check_and_pass_their_unit_tests() {
    let text = std::fs::read_to_string(RULES).unwrap();
    let alerts: Vec<&str> = text
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- alert: "))
        .collect();
    for alert in [
        "JobguardNoRecentSuccess",
        "JobguardSlotHeld",
        "JobguardSlotMissed",
        "JobguardNeedsAttention",
        "JobguardMachineIdShared",
        "JobguardJobListError",
        "JobguardJobRefused",
        "JobguardHostSilent",
        "JobguardFleetJobProblem",
    ] {
        assert!(alerts.contains(&alert), "{alert} in {alerts:?}");
    }
    if !promtool() {
        return;
    }
    let out = Command::new("promtool")
        .args(["check", "rules", RULES])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    let out = Command::new("promtool")
        .args(["test", "rules", RULES_TEST])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
}

/// Two hosts share one store, the second in a mount namespace of its own where
/// `/etc/machine-id` is another machine's (as root): each whole recovery pass writes the
/// host's heartbeat, and `status --fleet` and `metrics` on the first host show both
/// hosts, the job whose definitions differ and the job the second host's list refused.
/// The second host then takes a job out of its list: removed on purpose, nothing to
/// report. Eleven minutes on (libfaketime) the second host is silent, and that job, whose
/// schedule it declared for an hour, is armed by no live host: `status --fleet`, `status`
/// and `audit` say so, until the schedule is past its horizon.
#[test]
fn a_fleet_of_two_hosts_on_one_store_is_seen_from_either() {
    const MB: &str = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";
    let a = Sandbox::new(&job("sync", "true", &Backend::Sqlite));
    let db = a.file("state/jobguard.db");
    let store = format!("store = \"sqlite://{}\"\n", db.display());
    let typo = format!(
        "[jobs.typo]\nschedule = \"hourly\"\ncommand = [\"true\"]\ncatch_up = \"al\"\n{store}"
    );
    let gone = format!("[jobs.gone]\nschedule = \"hourly\"\ncommand = [\"true\"]\n{store}");
    let b = Sandbox::new(&format!(
        "{}{store}{typo}{gone}",
        job("sync", "false", &Backend::Sqlite)
    ));
    let host = jobguard::guard::identity::host_name();
    let mine: String = jobguard::guard::identity::machine_id()
        .chars()
        .take(8)
        .collect();
    let (la, lb) = (format!("{host} ({mine})"), format!("{host} (bbbbbbbb)"));
    let on_b = |args: &[&str]| b.cmd_on_machine(MB, args).output().expect("run on b");

    // `gone` has run on b, by its schedule, which b declared.
    let out = on_b(&["run", "gone"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let now = jiff::Timestamp::now().as_microsecond();
    let mut s = jobguard::store::open(&format!("sqlite://{}", db.display())).unwrap();
    s.declare_schedule(&jobguard::store::ScheduleDecl {
        job: "gone".into(),
        fingerprint: "*-*-* *:00:00".into(),
        defined_at: now,
        host: format!("{host} {MB}"),
        seen_at: now,
        horizon: 3_600_000_000,
    })
    .unwrap();
    for _ in 0..2 {
        let out = a.run(&["recover"]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let out = on_b(&["recover"]);
        assert!(!stderr(&out).contains("heartbeat"), "{}", stderr(&out));
    }
    let fleet = |extra: &[&str], faked: Option<&str>| {
        let mut args = vec!["status", "--fleet"];
        args.extend(extra);
        let out = match faked {
            Some(f) => a.cmd_under("faketime", &["-f", f], &args).output().unwrap(),
            None => a.run(&args),
        };
        (out.status.code(), stdout(&out), stderr(&out))
    };
    let row = |text: &str, start: &str| -> String {
        text.lines()
            .find(|l| l.starts_with(&format!("{start} ")))
            .unwrap_or_else(|| panic!("no row {start:?} in\n{text}"))
            .to_string()
    };
    let (code, text, err) = fleet(&[], None);
    assert_eq!(code, Some(1), "{text}{err}");
    assert!(row(&text, &la).ends_with(" ok"), "{text}");
    assert!(row(&text, &lb).contains("job list: 1 error(s)"), "{text}");
    assert_eq!(
        text.lines().filter(|l| l.starts_with(&host)).count(),
        2,
        "each host once, after two passes each: {text}"
    );
    let sync = row(&text, "sync");
    assert!(
        sync.contains("definitions differ")
            && sync.contains(&format!("on {la}"))
            && sync.contains(&format!("on {lb}")),
        "{text}"
    );
    assert!(
        row(&text, "typo").contains(&format!("refused by the job list on {lb}")),
        "{text}"
    );
    assert!(row(&text, "gone").ends_with(" ok"), "{text}");
    let out = a.run(&["status"]);
    assert!(!stdout(&out).contains("gone"), "{}", stdout(&out));

    let (code, text, e) = metrics(&a);
    assert_eq!(code, Some(0), "{text}");
    promtool_check(&text);
    let beats = e.find("jobguard_fleet_host_last_beat_timestamp_seconds", &[]);
    assert_eq!(beats.len(), 2, "{text}");
    for (job, problem, armed) in [("sync", 1.0, 2.0), ("typo", 1.0, 0.0), ("gone", 0.0, 1.0)] {
        assert_eq!(
            e.value("jobguard_fleet_job_problem", &[("job", job)]),
            Some(problem),
            "{job}: {text}"
        );
        assert_eq!(
            e.value("jobguard_fleet_job_armed_hosts", &[("job", job)]),
            Some(armed),
            "{job}: {text}"
        );
    }
    assert_eq!(
        e.value("jobguard_fleet_host_problem", &[("host", &lb)]),
        Some(1.0),
        "{text}"
    );

    // b's list mended, and `gone` taken out of it while b lives on: removed on purpose.
    std::fs::write(
        b.file("jobs.toml"),
        format!("{}{store}", job("sync", "true", &Backend::Sqlite)),
    )
    .unwrap();
    let out = on_b(&["recover"]);
    assert!(!stderr(&out).contains("heartbeat"), "{}", stderr(&out));
    let (code, text, _) = fleet(&[], None);
    assert_eq!(code, Some(0), "{text}");
    assert!(row(&text, "sync").ends_with(" ok"), "{text}");
    assert!(!text.contains("typo"), "{text}");
    assert!(
        row(&text, "gone").contains("taken out of the job list"),
        "{text}"
    );
    let out = a.run(&["status"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));

    // Eleven minutes on: a has passed, b has not. gone's schedule, which b declared, is
    // live for an hour: no live host will run its next slot. Plain `status` and `audit`
    // on a say so too.
    let faked = |offset: &str, args: &[&str]| {
        a.cmd_under("faketime", &["-f", offset], args)
            .output()
            .unwrap()
    };
    let out = faked("+11m", &["recover"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let (code, text, _) = fleet(&[], Some("+11m"));
    assert_eq!(code, Some(1), "{text}");
    assert!(row(&text, &la).ends_with(" ok"), "{text}");
    assert!(
        row(&text, &lb).contains("silent: no heartbeat for 11m"),
        "{text}"
    );
    assert!(
        row(&text, "gone").contains("no live host arms it any more"),
        "{text}"
    );
    let out = faked("+11m", &["status"]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(
        stdout(&out).contains("gone: its schedule is live in"),
        "{}",
        stdout(&out)
    );
    let out = faked("+11m", &["audit"]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(
        stdout(&out)
            .lines()
            .any(|l| l.starts_with("gone ") && l.contains("unarmed")),
        "{}",
        stdout(&out)
    );
    // b is forgotten (taken out of service): gone stays unarmed until its schedule is
    // past its horizon, an hour after b declared it.
    let (code, text, err) = fleet(&["--forget", &lb], Some("+11m"));
    assert_eq!(code, Some(0), "{text}{err}");
    assert!(text.contains("forgot the heartbeat of"), "{text}");
    let (code, text, _) = fleet(&[], Some("+11m"));
    assert_eq!(code, Some(1), "{text}");
    assert!(!text.contains(&lb), "{text}");
    let out = faked("+61m", &["recover"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let (code, text, _) = fleet(&[], Some("+61m"));
    assert_eq!(code, Some(0), "{text}");
    assert!(!text.contains("gone"), "{text}");
    let out = faked("+61m", &["audit"]);
    assert!(!stdout(&out).contains("unarmed"), "{}", stdout(&out));
    let (code, _, err) = fleet(&["--forget", "nobody"], Some("+61m"));
    assert_eq!(code, Some(2), "{err}");
}

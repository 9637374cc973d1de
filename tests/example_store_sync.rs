//! The store-sync example's scripts: the generator writes the same bytes every time; the
//! sync inserts 3,000 rows and then none; a run killed halfway leaves whole batches, and
//! the next run inserts exactly the rest. The push step under `jobguard run`: a run killed
//! at any point and re-run by `jobguard recover` pushes every order exactly once, by the
//! stand-in partner's own record.
//!
//! Needs Debian's /usr/bin/python3 (the example uses its standard library only); skipped
//! with a `SKIPPED` line when it is missing, failed in CI.
#![cfg(feature = "store-sqlite")]

mod common;
mod support;

use common::psql;

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

const EXAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/store-sync");
const PYTHON: &str = "/usr/bin/python3";
const KEY: &str = "store-sync@2026-11-29T02:00:00Z";

fn have_python(test: &str) -> bool {
    let why_not = (!Path::new(PYTHON).exists()).then(|| format!("{PYTHON} not found"));
    common::go_on(test, why_not)
}

fn script(name: &str) -> PathBuf {
    Path::new(EXAMPLE).join(name)
}

fn gen_to(path: &Path, extra: &[&str]) -> Vec<u8> {
    let out = Command::new(PYTHON)
        .arg(script("gen_transactions.py"))
        .arg("--output")
        .arg(path)
        .args(extra)
        .output()
        .expect("run gen_transactions.py");
    assert!(
        out.status.success(),
        "gen_transactions.py: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::read(path).expect("read the CSV")
}

/// A sync.py command in `dir` with a clean environment (no JOBGUARD_* from outside).
fn sync_cmd(dir: &Path, run_id: &str) -> Command {
    let mut cmd = Command::new(PYTHON);
    cmd.arg(script("sync.py"))
        .current_dir(dir)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("JOBGUARD_IDEMPOTENCY_KEY", KEY)
        .env("JOBGUARD_RUN_ID", run_id)
        .env("JOBGUARD_REPORT", dir.join("report"));
    cmd
}

fn sync(dir: &Path, run_id: &str) -> Output {
    let out = sync_cmd(dir, run_id).output().expect("run sync.py");
    assert!(
        out.status.success(),
        "sync.py: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The report's key=value lines of the last run (the file is appended to).
fn last_report(dir: &Path) -> Vec<(String, String)> {
    let text = std::fs::read_to_string(dir.join("report")).expect("report");
    let pairs: Vec<(String, String)> = text
        .lines()
        .map(|l| {
            let (k, v) = l.split_once('=').expect("key=value");
            (k.to_string(), v.to_string())
        })
        .collect();
    pairs[pairs.len().saturating_sub(4)..].to_vec()
}

fn report(read: u64, inserted: u64, skipped: u64) -> Vec<(String, String)> {
    [
        ("rows_read", read.to_string()),
        ("rows_inserted", inserted.to_string()),
        ("rows_skipped", skipped.to_string()),
        ("batch", "2026-11-28".to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

fn count(db: &Path, sql: &str) -> i64 {
    let conn = rusqlite::Connection::open(db).expect("open orders.db");
    conn.query_row(sql, [], |r| r.get(0)).expect(sql)
}

#[test]
fn generator_writes_the_same_3000_rows_every_time() {
    if !have_python("generator_writes_the_same_3000_rows_every_time") {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let a = gen_to(&dir.path().join("a.csv"), &[]);
    let b = gen_to(&dir.path().join("b.csv"), &[]);
    assert!(a == b, "two runs wrote different bytes");
    let other = gen_to(&dir.path().join("c.csv"), &["--seed", "7"]);
    assert!(a != other, "the seed changes nothing");

    let text = String::from_utf8(a).expect("UTF-8");
    let mut lines = text.lines();
    assert_eq!(
        lines.next(),
        Some("txn_id,store,sku,qty,amount_cents,timestamp")
    );
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert_eq!(rows.len(), 3000);
    let ids: HashSet<&str> = rows.iter().map(|r| r[0]).collect();
    assert_eq!(ids.len(), 3000, "txn_id must be unique");
    for r in &rows {
        assert_eq!(r.len(), 6, "{r:?}");
        let qty: u64 = r[3].parse().expect("qty");
        let amount: u64 = r[4].parse().expect("amount_cents");
        assert!(qty > 0 && amount > 0 && amount.is_multiple_of(qty), "{r:?}");
        assert!(
            r[5].starts_with("2026-11-28T") && r[5].ends_with('Z'),
            "{r:?}"
        );
    }
}

#[test]
fn second_sync_inserts_nothing_and_skips_3000() {
    if !have_python("second_sync_inserts_nothing_and_skips_3000") {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("orders.db");

    // No CSV in the working directory: the default one is generated, with a note.
    let first = sync(dir.path(), "run-1");
    assert!(String::from_utf8_lossy(&first.stderr).contains("generated 3000"));
    let generated = std::fs::read(dir.path().join("transactions.csv")).expect("generated CSV");
    assert!(generated == gen_to(&dir.path().join("expected.csv"), &[]));
    assert_eq!(last_report(dir.path()), report(3000, 3000, 0));
    let stdout = String::from_utf8_lossy(&first.stdout);
    assert!(
        stdout.starts_with("store-sync: read 3000, inserted 3000, skipped 0"),
        "{stdout}"
    );

    assert_eq!(count(&db, "SELECT count(*) FROM orders"), 3000);
    assert_eq!(
        count(&db, "SELECT count(DISTINCT txn_id) FROM orders"),
        3000
    );
    let keyed =
        format!("SELECT count(*) FROM orders WHERE idempotency_key = '{KEY}' AND run_id = 'run-1'");
    assert_eq!(count(&db, &keyed), 3000);

    let second = sync(dir.path(), "run-2");
    assert_eq!(last_report(dir.path()), report(3000, 0, 3000));
    let stdout = String::from_utf8_lossy(&second.stdout);
    assert!(
        stdout.starts_with("store-sync: read 3000, inserted 0, skipped 3000"),
        "{stdout}"
    );
    assert_eq!(count(&db, "SELECT count(*) FROM orders"), 3000);
    // The unique index turned the rows away: they still belong to the first run.
    assert_eq!(
        count(&db, "SELECT count(*) FROM orders WHERE run_id = 'run-1'"),
        3000
    );

    let conn = rusqlite::Connection::open(&db).expect("open");
    let mode: String = conn
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .expect("journal_mode");
    assert_eq!(mode, "wal");
}

#[test]
fn a_sync_killed_halfway_is_completed_by_the_next_run() {
    if !have_python("a_sync_killed_halfway_is_completed_by_the_next_run") {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("orders.db");
    gen_to(&dir.path().join("transactions.csv"), &[]);

    let mut slow = sync_cmd(dir.path(), "run-1")
        .env("STORE_SYNC_PAUSE_MS", "300")
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("start sync.py");
    let seen = common::wait_for(
        "a partial orders table",
        Duration::from_secs(60),
        Duration::from_millis(20),
        || {
            if let Some(status) = slow.try_wait().map_err(|e| e.to_string())? {
                return Err(format!("sync.py ended before it was killed: {status}"));
            }
            let Ok(conn) = rusqlite::Connection::open(&db) else {
                return Ok(None);
            };
            let n: i64 = conn
                .query_row("SELECT count(*) FROM orders", [], |r| r.get(0))
                .unwrap_or(0);
            Ok((n >= 300).then_some(n))
        },
    );
    slow.kill().expect("SIGKILL sync.py");
    slow.wait().expect("wait");
    let seen = seen.expect("partial table");
    assert!(seen < 3000, "the run was not cut: {seen} rows");

    let left = count(&db, "SELECT count(*) FROM orders");
    assert!((seen..3000).contains(&left), "{left} rows after the kill");
    assert_eq!(
        left % 100,
        0,
        "only whole batches of 100 are committed, found {left}"
    );

    sync(dir.path(), "run-2");
    let left = u64::try_from(left).expect("count");
    assert_eq!(last_report(dir.path()), report(3000, 3000 - left, left));
    assert_eq!(count(&db, "SELECT count(*) FROM orders"), 3000);
    assert_eq!(
        count(&db, "SELECT count(*) FROM orders WHERE run_id = 'run-1'"),
        i64::try_from(left).expect("count")
    );
    assert_eq!(
        count(
            &db,
            &format!("SELECT count(*) FROM orders WHERE idempotency_key = '{KEY}'")
        ),
        3000
    );
}

#[test]
fn bad_input_changes_nothing() {
    if !have_python("bad_input_changes_nothing") {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let csv = dir.path().join("bad.csv");
    std::fs::write(
        &csv,
        "txn_id,store,sku,qty,amount_cents,timestamp\n\
         T1,store-001,SKU-1,2,500,2026-11-28T08:00:00Z\n\
         T2,store-001,SKU-1,two,500,2026-11-28T08:00:01Z\n",
    )
    .expect("write");
    let out = sync_cmd(dir.path(), "run-1")
        .env("STORE_SYNC_CSV", &csv)
        .output()
        .expect("run");
    assert_eq!(
        out.status.code(),
        Some(65),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("bad.csv:3:"));
    assert!(
        !dir.path().join("orders.db").exists(),
        "nothing may be written"
    );

    let out = sync_cmd(dir.path(), "run-1")
        .env("STORE_SYNC_CSV", "missing.csv")
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(66));
    assert!(
        !dir.path().join("transactions.csv").exists(),
        "an explicit input is never invented"
    );

    let out = sync_cmd(dir.path(), "run-1")
        .env("STORE_SYNC_PAUSE_MS", "soon")
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(64));
}

#[test]
fn job_list_matches_the_story() {
    let text = std::fs::read_to_string(script("jobs.toml")).expect("jobs.toml");
    let doc: toml::Table = toml::from_str(&text).expect("jobs.toml is TOML");
    let job = doc["jobs"]["store-sync"]
        .as_table()
        .expect("[jobs.store-sync]");
    assert_eq!(job["schedule"].as_str(), Some("*-*-* 02:00:00"));
    let command: Vec<&str> = job["command"]
        .as_array()
        .expect("command")
        .iter()
        .filter_map(|v| v.as_str())
        .collect();
    assert_eq!(command, ["python3", "sync.py"]);
    assert_eq!(job["working_directory"].as_str(), Some("."));
    assert_eq!(job["on_interrupted"].as_str(), Some("rerun"));
    assert!(job.contains_key("timeout") && job.contains_key("description"));
}

#[test]
fn sync_into_postgresql_inserts_3000_then_nothing() {
    let test = "sync_into_postgresql_inserts_3000_then_nothing";
    if !have_python(test) {
        return;
    }
    let why_not = psql("postgres", "SELECT 1")
        .err()
        .map(|e| format!("no PostgreSQL on 127.0.0.1: {e}"));
    if !common::go_on(test, why_not) {
        return;
    }
    let db = format!("store_sync_{}", std::process::id());
    psql("postgres", &format!("DROP DATABASE IF EXISTS {db}")).expect("drop");
    psql("postgres", &format!("CREATE DATABASE {db}")).expect("create");
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("postgresql://postgres@127.0.0.1/{db}");
    let run = |run_id: &str| {
        let out = sync_cmd(dir.path(), run_id)
            .env("STORE_SYNC_DB", &url)
            .output()
            .expect("sync.py");
        assert!(
            out.status.success(),
            "sync.py: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    run("run-1");
    assert_eq!(last_report(dir.path()), report(3000, 3000, 0));
    run("run-2");
    assert_eq!(last_report(dir.path()), report(3000, 0, 3000));
    assert_eq!(psql(&db, "SELECT count(*) FROM orders").unwrap(), "3000");
    assert_eq!(
        psql(&db, "SELECT count(*) FROM orders WHERE run_id = 'run-1'").unwrap(),
        "3000"
    );
    psql("postgres", &format!("DROP DATABASE {db}")).expect("drop");
}

/// The push step under `jobguard run`, cut by SIGKILL of the shim at three points and re-run
/// by `jobguard recover`: the stand-in partner's own file (not jobguard's records) has
/// every order exactly once, and the re-run's report accounts for every order.
#[test]
fn a_push_cut_anywhere_and_rerun_pushes_every_order_once() {
    if !have_python("a_push_cut_anywhere_and_rerun_pushes_every_order_once") {
        return;
    }
    const ORDERS: usize = 60;
    // (pushes, then ms) before the cut: each order is a check, a mark, a pause of 30 ms, the
    // push, a pause and a mark, so 0 ms cuts between a push and its confirmation, 60 ms
    // most likely between a mark and its push (both are then in doubt for the re-run).
    for (cut_after, delay) in [(1, 60), (20, 0), (45, 60)] {
        let sb = support::Sandbox::new(&format!(
            "[jobs.store-push]\nschedule = \"*-*-* 02:30:00 UTC\"\n\
             command = [{PYTHON:?}, {push:?}]\nworking_directory = \"@DIR@\"\n\
             on_interrupted = \"rerun\"\nlease_ttl = \"3s\"\nkill_grace = \"1s\"\n\
             environment = {{ STORE_SYNC_JOBGUARD = {bin:?}, STORE_SYNC_PAUSE_MS = \"30\" }}\n",
            push = script("push.py").display().to_string(),
            bin = env!("CARGO_BIN_EXE_jobguard"),
        ));
        let dir = sb.file("");
        gen_to(
            &dir.join("transactions.csv"),
            &["--count", &ORDERS.to_string()],
        );
        let synced = sync(&dir, "sync-1");
        assert!(
            synced.status.success(),
            "{}",
            String::from_utf8_lossy(&synced.stderr)
        );
        let orders: Vec<String> = {
            let conn = rusqlite::Connection::open(dir.join("orders.db")).expect("orders.db");
            let mut stmt = conn.prepare("SELECT txn_id FROM orders").expect("select");
            stmt.query_map([], |r| r.get(0))
                .expect("query")
                .collect::<Result<_, _>>()
                .expect("rows")
        };
        assert_eq!(orders.len(), ORDERS);

        let mut shim = sb
            .cmd(&["run", "store-push"])
            .env("TRIGGER_TIMER_REALTIME_USEC", "1795919580000000")
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(sb.file("run.err")).expect("run.err"))
            .spawn()
            .expect("start jobguard run");
        let reached = support::wait_until(60, || sb.lines("shipped.log") >= cut_after);
        std::thread::sleep(Duration::from_millis(delay));
        shim.kill().expect("SIGKILL the shim");
        shim.wait().expect("wait");
        assert!(
            reached,
            "{cut_after} orders pushed before the cut: {}",
            sb.read("run.err")
        );
        std::thread::sleep(Duration::from_millis(200));
        let before = sb.lines("shipped.log");
        assert!(before < ORDERS, "the run was not cut: {before} pushed");
        // The cut run is judged once its lease (3 s) has expired by the store's clock.
        std::thread::sleep(Duration::from_millis(3500));

        let rec = sb.run(&["recover"]);
        assert!(
            rec.status.success(),
            "{}",
            String::from_utf8_lossy(&rec.stderr)
        );
        let shipped = sb.read("shipped.log");
        let mut seen: Vec<&str> = shipped
            .lines()
            .filter_map(|l| l.split(' ').next())
            .collect();
        seen.sort_unstable();
        let mut want: Vec<&str> = orders.iter().map(String::as_str).collect();
        want.sort_unstable();
        assert_eq!(
            seen, want,
            "cut after {cut_after}: every order exactly once"
        );

        let history = sb.history("store-push");
        assert_eq!(history.len(), 2, "{history:#?}");
        assert_eq!(history[0]["outcome"], "succeeded", "{history:#?}");
        assert_eq!(history[1]["outcome"], "interrupted");
        let report = &history[0]["report"];
        let n = |k: &str| report[k].as_str().and_then(|v| v.parse::<usize>().ok());
        assert_eq!(n("orders"), Some(ORDERS), "{report}");
        assert_eq!(
            n("pushed")
                .zip(n("already_shipped"))
                .zip(n("recovered"))
                .zip(n("repushed"))
                .map(|(((p, a), r), x)| (p + x, a + r)),
            Some((ORDERS - before, before)),
            "the re-run pushed the rest and found the cut run's pushes: {report}"
        );
        eprintln!("cut after {cut_after}: {before} pushed before the cut; re-run: {report}");
    }
}

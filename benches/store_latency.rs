//! Lease decision latency per shared store (PostgreSQL, MariaDB, Redis and, in a build with
//! the cargo feature `store-etcd` or `store-zookeeper`, etcd or ZooKeeper on 127.0.0.1),
//! and the round trips a decision costs.
//!
//! For each store, in a fresh namespace:
//! - warm: `claim` (the lease, the done/held check and the `running` record: the whole
//!   decision before a job starts) on an open connection; median and p99 over many runs
//!   (each run is finished afterwards, outside the timing);
//! - cold: open + connect + `claim`, as one `jobguard run` process does;
//! - contention: 32 threads, each with its own connection, claim the same slot at once;
//!   the time from the start signal to each answer (median, p99, max over all answers
//!   of all rounds);
//! - round trips: every connection goes through a counting TCP proxy that counts the
//!   client's request flights (a flight is a run of client bytes after the server spoke);
//!   reported for connect and for one warm claim.
//!
//! Run: `cargo bench --bench store_latency [--features store-etcd,store-zookeeper]`
//! (optional: `BENCH_RUNS=N`, default 500; `BENCH_STORES=postgres,mysql,redis,etcd,zookeeper`;
//! `BENCH_PG_SSLMODE=disable` for PostgreSQL without TLS, whose default `prefer` encrypts
//! when the server offers TLS). Servers that are not reachable are skipped.

#[path = "support/counter.rs"]
mod counter;

use std::net::TcpStream;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use counter::{Counter, percentile};
use jobguard::guard::lease::Holder;
use jobguard::guard::ledger::{Finish, NewRun, Outcome, Slot};
use jobguard::store::{Claim, ClaimRequest, ClockCheck};

/// The request a `jobguard run` from a timer makes: with the clock check, queued re-runs
/// first and the order check, all inside the one claim.
fn request(job: &str, slot: i64, id: u64, holder: u32) -> ClaimRequest {
    let mut req = ClaimRequest::new(
        NewRun {
            run_id: format!("{id:032x}"),
            job: job.into(),
            slot: Slot {
                usec: slot,
                zone: "UTC".into(),
            },
            forced: false,
            trigger: "timer".into(),
            invocation_id: None,
        },
        Holder {
            machine_id: format!("{holder:032x}"),
            boot_id: "1".repeat(32),
            pid: std::process::id(),
            pid_start: u64::from(holder),
            host: format!("bench-{holder}"),
        },
        Duration::from_secs(120),
    );
    req.clock = Some(ClockCheck {
        host_now: jobguard::guard::clock::Clock::now_usec(&jobguard::guard::clock::SystemClock),
        tolerance: 60_000_000,
    });
    req.queued_first = true;
    req.in_order = true;
    req
}

fn finish() -> Finish {
    Finish {
        outcome: Outcome::Succeeded,
        reason: None,
        exit_status: Some(0),
        report: Default::default(),
        resolution: None,
        ended_at: None,
    }
}

fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1000.0)
}

fn report(what: &str, mut samples: Vec<Duration>) {
    samples.sort();
    println!(
        "  {what:<34} n={:<5} median {:>10}  p99 {:>10}  max {:>10}",
        samples.len(),
        ms(percentile(&samples, 0.5)),
        ms(percentile(&samples, 0.99)),
        ms(*samples.last().unwrap_or(&Duration::ZERO))
    );
}

fn address(kind: &str, port: u16, ns: &str) -> String {
    match kind {
        "postgres" => {
            let sslmode = std::env::var("BENCH_PG_SSLMODE")
                .map(|m| format!("&sslmode={m}"))
                .unwrap_or_default();
            format!("postgres://root@127.0.0.1:{port}/test?schema={ns}{sslmode}")
        }
        "mysql" => format!("mysql://root@127.0.0.1:{port}/{ns}"),
        "etcd" => format!("etcd://127.0.0.1:{port}?prefix={ns}/"),
        "zookeeper" => format!("zookeeper://127.0.0.1:{port}/{ns}"),
        _ => format!("redis://127.0.0.1:{port}/0?prefix={ns}:"),
    }
}

fn admin(kind: &str, sql: &str) {
    let status = match kind {
        "postgres" => std::process::Command::new("psql")
            .args(["-h", "127.0.0.1", "-d", "test", "-qc", sql])
            .status(),
        "mysql" => std::process::Command::new("mariadb")
            .args(["-uroot", "-h127.0.0.1", "-e", sql])
            .status(),
        _ => std::process::Command::new("sh").args(["-c", sql]).status(),
    };
    assert!(status.is_ok_and(|s| s.success()), "{sql}");
}

fn bench(kind: &str, port: u16, runs: u64) {
    if TcpStream::connect(("127.0.0.1", port)).is_err() {
        println!("{kind}: SKIPPED (no server on 127.0.0.1:{port})");
        return;
    }
    let ns = format!("jgbench_{}", std::process::id());
    if kind == "mysql" {
        admin(kind, &format!("CREATE DATABASE {ns}"));
    }
    let counter = Counter::start(port);
    let direct = address(kind, port, &ns);
    let counted = address(kind, counter.port, &ns);
    println!("{kind} ({direct})");

    let mut s = jobguard::store::open(&direct).unwrap();
    s.init().unwrap();

    // Round trips: connect, then one claim on the open connection.
    let before = counter.flights.load(Ordering::SeqCst);
    let mut c = jobguard::store::open(&counted).unwrap();
    let _ = c.now().unwrap();
    let after_connect = counter.flights.load(Ordering::SeqCst);
    let req = request("rt", 1, 1, 1);
    let lease = match c.claim(&req).unwrap() {
        Claim::Claimed { lease, .. } => lease,
        other => panic!("{other:?}"),
    };
    let after_claim = counter.flights.load(Ordering::SeqCst);
    // And a claim as the first call of a new connection (the shim's case).
    c.finish(&lease, &req.run.run_id, &finish()).unwrap();
    let before_cold = counter.flights.load(Ordering::SeqCst);
    let mut d = jobguard::store::open(&counted).unwrap();
    match d.claim(&request("rt", 2, 2, 1)).unwrap() {
        Claim::Claimed { .. } => {}
        other => panic!("{other:?}"),
    }
    let after_cold = counter.flights.load(Ordering::SeqCst);
    println!(
        "  round trips: connect + time query {}, warm claim {}, first claim of a new connection (connect included) {}",
        after_connect - before,
        after_claim - after_connect,
        after_cold - before_cold
    );

    // Warm claims.
    let mut warm = Vec::new();
    for i in 0..runs {
        let req = request("warm", 1_000 + i64::try_from(i).unwrap(), 10_000 + i, 1);
        let t = Instant::now();
        let answer = s.claim(&req).unwrap();
        warm.push(t.elapsed());
        let Claim::Claimed { lease, .. } = answer else {
            panic!("{answer:?}")
        };
        s.finish(&lease, &req.run.run_id, &finish()).unwrap();
    }
    report("claim, warm connection", warm);

    // Cold: open + connect + claim, as one process does.
    let mut cold = Vec::new();
    for i in 0..runs.min(200) {
        let req = request("cold", 1_000 + i64::try_from(i).unwrap(), 20_000 + i, 1);
        let t = Instant::now();
        let mut fresh = jobguard::store::open(&direct).unwrap();
        let answer = fresh.claim(&req).unwrap();
        cold.push(t.elapsed());
        let Claim::Claimed { lease, .. } = answer else {
            panic!("{answer:?}")
        };
        fresh.finish(&lease, &req.run.run_id, &finish()).unwrap();
    }
    report("open + connect + claim", cold);

    // 32-way contention for one slot, many rounds.
    let mut decisions = Vec::new();
    let mut winners_ok = true;
    for round in 0..20u64 {
        let barrier = Arc::new(Barrier::new(33));
        let handles: Vec<_> = (0..32u32)
            .map(|h| {
                let barrier = barrier.clone();
                let direct = direct.clone();
                std::thread::spawn(move || {
                    let mut st = jobguard::store::open(&direct).unwrap();
                    st.init().unwrap();
                    let req = request(
                        "race",
                        5_000 + i64::try_from(round).unwrap(),
                        100_000 + round * 100 + u64::from(h),
                        h + 100,
                    );
                    barrier.wait();
                    let t = Instant::now();
                    let answer = st.claim(&req).unwrap();
                    (t.elapsed(), matches!(answer, Claim::Claimed { .. }))
                })
            })
            .collect();
        barrier.wait();
        let mut claimed = 0;
        for h in handles {
            let (d, won) = h.join().unwrap();
            decisions.push(d);
            claimed += usize::from(won);
        }
        if claimed != 1 {
            println!("  round {round}: {claimed} winners");
        }
        winners_ok &= claimed == 1;
        s.unlock("race").unwrap();
    }
    report("32-way contention, time to decision", decisions);
    println!("  exactly one winner in every round: {winners_ok}");
    assert!(
        winners_ok,
        "{kind}: a round of 32-way contention did not end with exactly one winner"
    );

    match kind {
        "postgres" => admin(kind, &format!("DROP SCHEMA {ns} CASCADE")),
        "mysql" => admin(kind, &format!("DROP DATABASE {ns}")),
        "etcd" => admin(
            kind,
            &format!("ETCDCTL_API=3 etcdctl del --prefix '{ns}/' >/dev/null"),
        ),
        "zookeeper" => admin(
            kind,
            &format!(
                "/usr/share/zookeeper/bin/zkCli.sh -server 127.0.0.1:2181 deleteall /{ns} >/dev/null 2>&1"
            ),
        ),
        _ => admin(
            kind,
            &format!("redis-cli --scan --pattern '{ns}:*' | xargs -r redis-cli DEL >/dev/null"),
        ),
    }
}

fn main() {
    if !bench_mode() {
        return;
    }
    let runs: u64 = std::env::var("BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(500);
    let mut every = vec!["postgres", "mysql", "redis"];
    if cfg!(feature = "store-etcd") {
        every.push("etcd");
    }
    if cfg!(feature = "store-zookeeper") {
        every.push("zookeeper");
    }
    let stores = std::env::var("BENCH_STORES").unwrap_or(every.join(","));
    for kind in stores.split(',') {
        let port = match kind {
            "postgres" => 5432,
            "mysql" => 3306,
            "redis" => 6379,
            "etcd" => 2379,
            "zookeeper" => 2181,
            other => panic!("unknown store {other}"),
        };
        bench(kind, port, runs);
    }
}

/// Whether `cargo bench` started this (it passes `--bench`). `cargo test --all-targets`
/// builds the benches and runs them without it: they say so and measure nothing there.
fn bench_mode() -> bool {
    let yes = std::env::args().any(|a| a == "--bench");
    if !yes {
        println!("store_latency: a benchmark; run it with `cargo bench --bench store_latency`");
    }
    yes
}

//! A thousand racers: N claimants fire the same slot of one job at once on each shared
//! store (PostgreSQL, MariaDB, Redis and, in a build with `store-etcd` or
//! `store-zookeeper`, etcd and ZooKeeper on 127.0.0.1), as N hosts whose timers elapse in
//! the same second. Each claimant is a thread of this process with a store of its own,
//! opened and connected after the start signal, as a `jobguard run` process does, and
//! retrying a store that is unavailable (a server's connection limit, say) as the shim
//! does: after 100 ms, doubling to 10 s, each pause drawn between half of it and all of
//! it, for 60 s (`with_retry` in src/shim/mod.rs).
//!
//! For N = 32, 128, 512 and 1,000 (`BENCH_RACERS=32,128` for others), per store: the time
//! from the start signal to each claimant's decision (median, p99, max), how many won (1
//! is right), how many failed, and the server's work for the slot where the server says
//! it (PostgreSQL: transactions of `pg_stat_database`; MariaDB: `Questions`; Redis:
//! `total_commands_processed`). Round trips, counted by a TCP proxy (a flight is a run of
//! client bytes after the server spoke) on a warm connection: the winner's claim, and a
//! loser's claim while the lease is held.
//!
//! Run: `cargo bench --bench racers [--features store-etcd,store-zookeeper]`
//! (`BENCH_STORES=postgres,mysql,redis,etcd,zookeeper`). Servers that are not reachable
//! are skipped. PostgreSQL behind a pooler: `BENCH_PG_POOLER=postgres://USER@HOST:{port}/DB`
//! with `BENCH_PG_PORT=6432` (PgBouncer's); the bench leaves its tables in DB.

#[path = "support/counter.rs"]
mod counter;

use std::net::TcpStream;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use counter::{Counter, percentile};
use jobguard::guard::lease::Holder;
use jobguard::guard::ledger::{NewRun, Slot};
use jobguard::store::{Claim, ClaimRequest, ClockCheck, Store, StoreError};

/// A timer's claim of `slot` by host `holder`.
fn request(slot: i64, holder: u32) -> ClaimRequest {
    let mut req = ClaimRequest::new(
        NewRun {
            run_id: format!("{:016x}{holder:016x}", slot),
            job: "race".into(),
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
            host: format!("racer-{holder}"),
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

/// As the shim's `with_retry`: a store that is unavailable is tried again after 100 ms,
/// doubling to 10 s, each pause between half of it and all of it, for 60 s.
fn with_retry<T>(mut f: impl FnMut() -> Result<T, StoreError>) -> Result<T, StoreError> {
    use std::hash::BuildHasher;
    let give_up = Instant::now() + Duration::from_secs(60);
    let mut backoff = Duration::from_millis(100);
    loop {
        let r = std::collections::hash_map::RandomState::new().hash_one(Instant::now()) % 1_000;
        let pause = backoff / 2 + backoff / 2 * u32::try_from(r).unwrap() / 1_000;
        match f() {
            Err(StoreError::Unavailable { .. }) if Instant::now() + pause < give_up => {
                std::thread::sleep(pause);
                backoff = (backoff * 2).min(Duration::from_secs(10));
            }
            other => return other,
        }
    }
}

fn ms(d: Duration) -> String {
    format!("{:.0} ms", d.as_secs_f64() * 1000.0)
}

fn address(kind: &str, port: u16, ns: &str) -> String {
    match kind {
        // Through a pooler: its address (a database of the bench's own; no `schema=`,
        // which a pooler cannot pass).
        "postgres" if std::env::var("BENCH_PG_POOLER").is_ok() => {
            let pooler = std::env::var("BENCH_PG_POOLER").unwrap_or_default();
            pooler.replace("{port}", &port.to_string())
        }
        "postgres" => format!("postgres://root@127.0.0.1:{port}/test?schema={ns}"),
        "mysql" => format!("mysql://root@127.0.0.1:{port}/{ns}"),
        "etcd" => format!("etcd://127.0.0.1:{port}?prefix={ns}/"),
        "zookeeper" => format!("zookeeper://127.0.0.1:{port}/{ns}"),
        _ => format!("redis://127.0.0.1:{port}/0?prefix={ns}:"),
    }
}

fn shell(command: &str) -> String {
    let out = std::process::Command::new("sh")
        .args(["-c", command])
        .output()
        .expect("sh");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// The server's work counter for `kind`, where it has one.
fn work(kind: &str) -> Option<u64> {
    let text = match kind {
        "postgres" => shell(
            "psql -h 127.0.0.1 -d postgres -XAtc \"SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = 'test'\"",
        ),
        "mysql" => shell(
            "mariadb -uroot -h127.0.0.1 -N -e \"SHOW GLOBAL STATUS LIKE 'Questions'\" | cut -f2",
        ),
        "redis" => shell(
            "redis-cli -h 127.0.0.1 INFO stats | sed -n 's/^total_commands_processed:\\([0-9]*\\).*/\\1/p'",
        ),
        _ => return None,
    };
    text.parse().ok()
}

fn clean(kind: &str, ns: &str) {
    let _ = match kind {
        "postgres" => shell(&format!(
            "psql -h 127.0.0.1 -d test -qc 'SET client_min_messages = warning; DROP SCHEMA IF EXISTS {ns} CASCADE'"
        )),
        "mysql" => shell(&format!(
            "mariadb -uroot -h127.0.0.1 -e 'DROP DATABASE IF EXISTS {ns}'"
        )),
        "etcd" => shell(&format!(
            "ETCDCTL_API=3 etcdctl del --prefix '{ns}/' >/dev/null"
        )),
        "zookeeper" => shell(&format!(
            "/usr/share/zookeeper/bin/zkCli.sh -server 127.0.0.1:2181 deleteall /{ns} >/dev/null 2>&1"
        )),
        _ => shell(&format!(
            "redis-cli --scan --pattern '{ns}:*' | xargs -r redis-cli DEL >/dev/null"
        )),
    };
}

fn bench(kind: &str, port: u16, sizes: &[u32]) {
    if TcpStream::connect(("127.0.0.1", port)).is_err() {
        println!("{kind}: SKIPPED (no server on 127.0.0.1:{port})");
        return;
    }
    let ns = format!("jgracers_{}", std::process::id());
    if kind == "mysql" {
        shell(&format!(
            "mariadb -uroot -h127.0.0.1 -e 'CREATE DATABASE {ns}'"
        ));
    }
    let direct = address(kind, port, &ns);
    println!("{kind}");
    let mut s = jobguard::store::open(&direct).unwrap();
    s.init().unwrap();

    // Round trips on a warm connection: the winner's claim, then a loser's.
    let counter = Counter::start(port);
    let counted = address(kind, counter.port, &ns);
    let (mut a, mut b) = (
        jobguard::store::open(&counted).unwrap(),
        jobguard::store::open(&counted).unwrap(),
    );
    let _ = (a.now().unwrap(), b.now().unwrap());
    let f0 = counter.flights.load(Ordering::SeqCst);
    let won = a.claim(&request(1, 1)).unwrap();
    let f1 = counter.flights.load(Ordering::SeqCst);
    let lost = b.claim(&request(1, 2)).unwrap();
    let f2 = counter.flights.load(Ordering::SeqCst);
    assert!(matches!(won, Claim::Claimed { .. }), "{won:?}");
    assert!(matches!(lost, Claim::Busy { .. }), "{lost:?}");
    println!(
        "  round trips on a warm connection: winner {}, loser {}",
        f1 - f0,
        f2 - f1
    );
    drop((a, b));
    s.unlock("race").unwrap();

    println!(
        "  {:>5} {:>9} {:>9} {:>9} {:>7} {:>7} {:>16}",
        "N", "median", "p99", "max", "winners", "errors", "server work/slot"
    );
    for (round, &n) in sizes.iter().enumerate() {
        let slot = 1_000 + i64::try_from(round).unwrap();
        let barrier = Arc::new(Barrier::new(n as usize + 1));
        let handles: Vec<_> = (0..n)
            .map(|h| {
                let barrier = barrier.clone();
                let direct = direct.clone();
                std::thread::Builder::new()
                    .stack_size(256 * 1024)
                    .spawn(move || {
                        let req = request(slot, h + 100);
                        barrier.wait();
                        let t = Instant::now();
                        let answer = with_retry(|| {
                            let mut st: Box<dyn Store> = jobguard::store::open(&direct)?;
                            st.claim(&req)
                        });
                        (t.elapsed(), answer)
                    })
                    .expect("a thread")
            })
            .collect();
        let before = work(kind);
        barrier.wait();
        let mut times = Vec::new();
        let (mut winners, mut errors) = (0, 0);
        let mut first_error = None;
        for h in handles {
            let (d, answer) = h.join().unwrap();
            times.push(d);
            match answer {
                Ok(Claim::Claimed { .. }) => winners += 1,
                Ok(_) => {}
                Err(e) => {
                    errors += 1;
                    first_error.get_or_insert(e.to_string());
                }
            }
        }
        // The server's counters settle after the sessions end.
        std::thread::sleep(Duration::from_millis(1500));
        let after = work(kind);
        times.sort();
        println!(
            "  {n:>5} {:>9} {:>9} {:>9} {winners:>7} {errors:>7} {:>16}",
            ms(percentile(&times, 0.5)),
            ms(percentile(&times, 0.99)),
            ms(*times.last().unwrap()),
            match (before, after) {
                (Some(b), Some(a)) => (a - b).to_string(),
                _ => "-".to_string(),
            }
        );
        if let Some(e) = first_error {
            println!("        first error: {e}");
        }
        s.unlock("race").unwrap();
    }
    drop(s);
    clean(kind, &ns);
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!("racers: a benchmark; run it with `cargo bench --bench racers`");
        return;
    }
    let sizes: Vec<u32> = std::env::var("BENCH_RACERS")
        .unwrap_or_else(|_| "32,128,512,1000".into())
        .split(',')
        .filter_map(|n| n.parse().ok())
        .collect();
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
            "postgres" => std::env::var("BENCH_PG_PORT")
                .ok()
                .and_then(|p| p.parse().ok())
                .unwrap_or(5432),
            "mysql" => 3306,
            "redis" => 6379,
            "etcd" => 2379,
            "zookeeper" => 2181,
            other => panic!("unknown store {other}"),
        };
        bench(kind, port, &sizes);
    }
}

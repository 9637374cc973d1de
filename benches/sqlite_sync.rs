//! What `synchronous=FULL` costs the embedded store: one claim + finish (the two write
//! transactions of a run) with FULL and with NORMAL, on a warm connection and with a
//! fresh connection per run (as the shim does: one process per run).
//!
//! Run: `cargo bench --bench sqlite_sync` (optional: `BENCH_RUNS=N`, `BENCH_DIR=DIR`; the
//! directory should be on the disk the store will live on, not a tmpfs).

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use jobguard::guard::clock::SystemClock;
use jobguard::guard::lease::Holder;
use jobguard::guard::ledger::{Finish, NewRun, Outcome, Slot};
use jobguard::store::sqlite::{SqliteOptions, SqliteStore, Synchronous};
use jobguard::store::{Claim, ClaimRequest, Store};

fn request(i: u64) -> ClaimRequest {
    ClaimRequest::new(
        NewRun {
            run_id: format!("{i:032x}"),
            job: "bench".into(),
            slot: Slot {
                usec: 1_800_000_000_000_000 + i64::try_from(i).unwrap() * 60_000_000,
                zone: "UTC".into(),
            },
            forced: false,
            trigger: "timer".into(),
            invocation_id: None,
        },
        Holder {
            machine_id: "0".repeat(32),
            boot_id: "1".repeat(32),
            pid: std::process::id(),
            pid_start: 1,
            host: "bench".into(),
        },
        Duration::from_secs(120),
    )
}

fn claim_and_finish(store: &mut SqliteStore, i: u64) {
    let Claim::Claimed { lease, run, .. } = store.claim(&request(i)).unwrap() else {
        panic!("not claimed");
    };
    let finish = Finish {
        outcome: Outcome::Succeeded,
        reason: None,
        exit_status: Some(0),
        report: Default::default(),
        resolution: None,
        ended_at: None,
    };
    let done = store.finish(&lease, &run.run_id, &finish).unwrap();
    assert!(done.recorded && done.released);
}

struct Stats {
    median: Duration,
    p99: Duration,
    mean: Duration,
}

fn stats(mut samples: Vec<Duration>) -> Stats {
    samples.sort();
    let n = samples.len();
    let total: Duration = samples.iter().sum();
    Stats {
        median: samples[n / 2],
        p99: samples[(n * 99 / 100).min(n - 1)],
        mean: total / u32::try_from(n).unwrap(),
    }
}

fn measure(dir: &Path, level: Synchronous, fresh_connection: bool, runs: u64) -> Stats {
    let db = dir.join(format!("bench-{level:?}-{fresh_connection}.db"));
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", db.display()));
    }
    let options = SqliteOptions {
        synchronous: level,
        ..SqliteOptions::default()
    };
    let open = || SqliteStore::open_with(&db, Arc::new(SystemClock), &options).unwrap();
    let mut warm = open();
    warm.init().unwrap();
    // Warm-up.
    for i in 0..20 {
        claim_and_finish(&mut warm, 1_000_000 + i);
    }
    let mut samples = Vec::with_capacity(usize::try_from(runs).unwrap());
    for i in 0..runs {
        let start = Instant::now();
        if fresh_connection {
            let mut s = open();
            claim_and_finish(&mut s, i);
        } else {
            claim_and_finish(&mut warm, i);
        }
        samples.push(start.elapsed());
    }
    stats(samples)
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        // `cargo test --all-targets` builds and runs the benches without `--bench`.
        println!("sqlite_sync: a benchmark; run it with `cargo bench --bench sqlite_sync`");
        return;
    }
    let runs: u64 = std::env::var("BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(500);
    let base = std::env::var("BENCH_DIR").unwrap_or_else(|_| env!("CARGO_TARGET_TMPDIR").into());
    let dir = tempfile::tempdir_in(base).unwrap();
    println!(
        "claim + finish on {} ({runs} runs each)",
        dir.path().display()
    );
    println!(
        "{:<8} {:<11} {:>10} {:>10} {:>10}",
        "sync", "connection", "median", "p99", "mean"
    );
    for fresh in [false, true] {
        for level in [Synchronous::Full, Synchronous::Normal] {
            let s = measure(dir.path(), level, fresh, runs);
            println!(
                "{:<8} {:<11} {:>8.3}ms {:>8.3}ms {:>8.3}ms",
                format!("{level:?}").to_uppercase(),
                if fresh { "per run" } else { "warm" },
                s.median.as_secs_f64() * 1e3,
                s.p99.as_secs_f64() * 1e3,
                s.mean.as_secs_f64() * 1e3
            );
        }
    }
}

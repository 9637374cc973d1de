//! Several hosts, one run per slot (issue 3): three containers booted with systemd share
//! one store on this machine, each through a TCP proxy of its own (`socat`), with the same
//! job list. The store address comes from a root-only `store_file`. Every case runs on
//! PostgreSQL and, in a build with the cargo feature `store-etcd` or `store-zookeeper`, on
//! etcd or ZooKeeper: a module per case, a test per store
//! (`power_cut_of_the_running_host_another_host_finishes_the_slot::etcd`).
//!
//! - the same slot fired on all three at once: one run, two skips;
//! - a power cut of the host that runs store-sync: another host finishes the slot after the
//!   lease expired, with no overlap in time, and the orders table in the same PostgreSQL
//!   ends with exactly 3,000 rows;
//! - a host cut off from the store (its proxy frozen with SIGSTOP: packets stop,
//!   connections hang, as in a partition): it stops its job before its lease expires;
//!   another host takes over after expiry; the runs never overlap;
//! - a host cut off just as its job ends, past its lease, the other hosts' first sighting
//!   of its expiry and two of its own recovery passes: back 75 s after that sighting,
//!   inside the 90 s grace, it records the success it kept before any other host's pass
//!   may take it for gone, and no host runs the slot again.
//!
//! Needs root, systemd-nspawn, socat, psql and PostgreSQL on 127.0.0.1:5432 (trust
//! auth; the store-sync example writes its orders there whatever the store), and for the
//! etcd cases etcd on 127.0.0.1:2379, for the ZooKeeper ones ZooKeeper on 127.0.0.1:2181;
//! skipped with a `SKIPPED` line otherwise, failed in
//! CI. Run just these with `cargo test --test systemd_multi_host -- --nocapture`.
#![cfg(feature = "store-postgres")]

mod common;

use common::psql;

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::container::{self, Container};
use common::host::*;
use common::remote::{Namespace, Server, server};
use serde_json::Value;

/// A private PostgreSQL database for one test (the store-sync example's orders), dropped
/// at the end.
struct Database {
    name: String,
}

impl Database {
    fn create(tag: &str) -> Database {
        let name = format!("jg_mh_{tag}_{}", std::process::id());
        psql(
            "postgres",
            &format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"),
        )
        .expect("drop");
        psql("postgres", &format!("CREATE DATABASE {name}")).expect("create database");
        Database { name }
    }

    fn query(&self, sql: &str) -> Result<String, String> {
        psql(&self.name, sql)
    }
}

impl Drop for Database {
    fn drop(&mut self) {
        let _ = psql(
            "postgres",
            &format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name),
        );
    }
}

/// A TCP proxy from 127.0.0.1:`port` to the store's server, in a process group of its own
/// so that freezing it freezes every connection it forked.
struct Proxy {
    child: Child,
    port: u16,
}

impl Proxy {
    fn start(target_port: u16) -> Proxy {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let child = Command::new("setsid")
            .args([
                "socat",
                &format!("TCP-LISTEN:{port},bind=127.0.0.1,fork,reuseaddr"),
                &format!("TCP:127.0.0.1:{target_port}"),
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("socat");
        let up = common::wait_for(
            "the proxy to listen",
            Duration::from_secs(10),
            Duration::from_millis(50),
            || {
                Ok(std::net::TcpStream::connect(("127.0.0.1", port))
                    .is_ok()
                    .then_some(()))
            },
        );
        up.expect("proxy up");
        Proxy { child, port }
    }

    fn signal_group(&self, sig: &str) {
        let _ = Command::new("kill")
            .args([&format!("-{sig}"), "--", &format!("-{}", self.child.id())])
            .status();
    }

    /// Packets stop; open connections hang; new ones are not accepted.
    fn freeze(&self) {
        self.signal_group("STOP");
    }

    fn thaw(&self) {
        self.signal_group("CONT");
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.signal_group("CONT");
        self.signal_group("KILL");
        let _ = self.child.wait();
    }
}

fn prerequisites() -> Option<String> {
    if let Some(why) = container::prerequisites() {
        return Some(why);
    }
    for tool in ["socat", "psql", "setsid"] {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .output();
        if !found.is_ok_and(|o| o.status.success()) {
            return Some(format!("{tool} is not installed"));
        }
    }
    psql("postgres", "SELECT 1")
        .err()
        .map(|e| format!("no PostgreSQL on 127.0.0.1:5432: {e}"))
}

/// The store-sync example writes PostgreSQL through Debian's python3-psycopg2.
fn psycopg2() -> Option<String> {
    let imported = Command::new("/usr/bin/python3")
        .args(["-c", "import psycopg2"])
        .output()
        .is_ok_and(|o| o.status.success());
    (!imported).then(|| "/usr/bin/python3 cannot import psycopg2 (python3-psycopg2)".to_string())
}

fn now_secs() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// Three hosts with the same job list, each reaching the store through its own proxy.
struct Cluster {
    hosts: Vec<Container>,
    proxies: Vec<Proxy>,
}

fn cluster(
    tag: &str,
    store: &Namespace,
    jobs_toml: &str,
    extra: impl Fn(common::container::Options) -> common::container::Options,
) -> Cluster {
    let mut hosts = Vec::new();
    let mut proxies = Vec::new();
    for i in 1..=3 {
        let proxy = Proxy::start(store.server.port);
        let url = format!(
            "{}\n",
            (store.server.address)(&format!("127.0.0.1:{}", proxy.port), &store.name)
        );
        let opts = extra(jobguard_options(jobs_toml).file("/etc/jobguard/store.url", url));
        let c = boot(&format!("{tag}{i}"), &opts);
        c.exec_ok(&["chmod", "0600", "/etc/jobguard/store.url"])
            .expect("chmod");
        c.exec_ok(&["systemctl", "daemon-reload"])
            .expect("daemon-reload");
        c.exec_ok(&["systemctl", "start", "jobguard-recover.timer"])
            .expect("recover timer");
        hosts.push(c);
        proxies.push(proxy);
    }
    Cluster { hosts, proxies }
}

/// The job's own log on a host: (event, unix seconds, run id) per line.
fn job_log(c: &Container) -> Vec<(String, f64, String)> {
    let text = c
        .exec(&["cat", "/var/log/jobguard-test.log"])
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let mut parts = l.split_whitespace();
            let ev = parts.next()?.to_string();
            let t: f64 = parts.next()?.parse().ok()?;
            Some((ev, t, parts.next().unwrap_or_default().to_string()))
        })
        .collect()
}

/// Starts `sync` on `host` and waits until its command logged its start.
fn start_and_wait(host: &Container) {
    host.exec_ok(&["systemctl", "start", "--no-block", "jobguard@sync.service"])
        .expect("start");
    common::wait_for(
        &format!("the job to start on {}", host.name()),
        Duration::from_secs(60),
        Duration::from_millis(100),
        || Ok(job_log(host).iter().any(|l| l.0 == "start").then_some(())),
    )
    .expect("started");
}

/// Every line of `event` in the job's own logs of `hosts`: (host index, run id).
fn log_lines(hosts: &[Container], event: &str) -> Vec<(usize, String)> {
    hosts
        .iter()
        .enumerate()
        .flat_map(|(i, c)| {
            job_log(c)
                .into_iter()
                .filter(|l| l.0 == event)
                .map(move |l| (i, l.2))
        })
        .collect()
}

const LOGGING_JOB: &str = r#"
[defaults]
store_file = "/etc/jobguard/store.url"
lease_ttl = "30s"
on_interrupted = "rerun"

[jobs.sync]
schedule = "*-01-01 00:00:00 UTC"
kill_grace = "3s"
command = ["/bin/sh", "-c", """
log() { echo "$1 $(date +%s.%N) $JOBGUARD_RUN_ID" >> /var/log/jobguard-test.log; }
trap 'log term; exit 143' TERM
log start
if [ "$JOBGUARD_ATTEMPT" = 1 ]; then n=${FIRST_SECONDS:-6}; else n=2; fi
i=0; while [ $i -lt $((n * 10)) ]; do sleep 0.1; i=$((i + 1)); done
log end
"""]
"#;

/// A test per store for `case`, in a module named after it: the stores of these cases,
/// looked up in `common::remote::SERVERS` by name.
macro_rules! on_each_store {
    ($case:ident) => {
        mod $case {
            #[test]
            fn postgres() {
                super::$case(super::server("postgres"))
            }

            #[cfg(feature = "store-etcd")]
            #[test]
            fn etcd() {
                super::$case(super::server("etcd"))
            }

            #[cfg(feature = "store-zookeeper")]
            #[test]
            fn zookeeper() {
                super::$case(super::server("zookeeper"))
            }
        }
    };
}

/// The store the hosts share, in a namespace of its own; `None` when the case is skipped.
fn shared_store(server: &'static Server, case: &str, more: Option<String>) -> Option<Namespace> {
    let test = format!("{case}::{}", server.name);
    if !common::go_on(&test, prerequisites().or(more)) {
        return None;
    }
    Namespace::new(server, &test)
}

on_each_store!(the_same_slot_fired_on_three_hosts_runs_once);
fn the_same_slot_fired_on_three_hosts_runs_once(server: &'static Server) {
    let Some(store) = shared_store(server, "the_same_slot_fired_on_three_hosts_runs_once", None)
    else {
        return;
    };
    let cl = cluster("once", &store, LOGGING_JOB, |o| o);
    std::thread::scope(|s| {
        for c in &cl.hosts {
            s.spawn(move || {
                c.exec_ok(&["systemctl", "start", "--no-block", "jobguard@sync.service"])
                    .expect("start")
            });
        }
    });
    for c in &cl.hosts {
        wait_unit_done(c, "jobguard@sync.service", Duration::from_secs(120));
    }
    let rows = history(&cl.hosts[0], "sync").expect("history");
    assert_eq!(rows.len(), 1, "one run in the shared ledger: {rows:#?}");
    assert_eq!(field(&rows[0], "outcome"), "succeeded");
    let starts: usize = cl
        .hosts
        .iter()
        .map(|c| job_log(c).iter().filter(|l| l.0 == "start").count())
        .sum();
    assert_eq!(starts, 1, "the command ran once across the three hosts");
    let mut skips = 0;
    for c in &cl.hosts {
        for e in c
            .journal(&["JOBGUARD_JOB=sync", "JOBGUARD_EVENT=skip"])
            .expect("journal")
        {
            let reason = e.get("JOBGUARD_REASON").unwrap_or_default();
            assert!(
                ["lease-held", "slot-done"].contains(&reason.as_str()),
                "skip reason {reason}"
            );
            skips += 1;
        }
    }
    assert_eq!(skips, 2, "the two other hosts skipped with a reason");
}

on_each_store!(power_cut_of_the_running_host_another_host_finishes_the_slot);
fn power_cut_of_the_running_host_another_host_finishes_the_slot(server: &'static Server) {
    let Some(store) = shared_store(
        server,
        "power_cut_of_the_running_host_another_host_finishes_the_slot",
        psycopg2(),
    ) else {
        return;
    };
    // The store's name is in the database's: the cases of both stores run at once.
    let db = Database::create(&format!("cut_{}", server.name));
    let jobs = format!(
        r#"
[defaults]
store_file = "/etc/jobguard/store.url"
lease_ttl = "20s"
on_interrupted = "rerun"

[jobs.store-sync]
schedule = "*-01-01 00:00:00 UTC"
command = ["python3", "sync.py"]
working_directory = "/srv/store-sync"
environment = {{ STORE_SYNC_DB = "postgresql://postgres@127.0.0.1:5432/{}", STORE_SYNC_PAUSE_MS = "400" }}
"#,
        db.name
    );
    let mut cl = cluster("cut", &store, &jobs, |o| {
        o.copy(
            Path::new(EXAMPLE).join("sync.py"),
            "/srv/store-sync/sync.py",
        )
        .copy(
            Path::new(EXAMPLE).join("gen_transactions.py"),
            "/srv/store-sync/gen_transactions.py",
        )
    });
    for c in &cl.hosts {
        c.sh_ok("cd /srv/store-sync && python3 gen_transactions.py")
            .expect("csv");
    }
    let count = || {
        db.query("SELECT count(*) FROM orders")
            .ok()
            .and_then(|s| s.parse::<i64>().ok())
            .unwrap_or(0)
    };
    cl.hosts[0]
        .exec_ok(&[
            "systemctl",
            "start",
            "--no-block",
            "jobguard@store-sync.service",
        ])
        .expect("start");
    let seen = common::wait_for(
        "a partial orders table",
        Duration::from_secs(90),
        Duration::from_millis(100),
        || {
            let n = count();
            if n >= 3000 {
                return Err("store-sync finished before the cut".into());
            }
            Ok((n >= 300).then_some(n))
        },
    )
    .expect("halfway");
    cl.hosts[0].power_cut().expect("power cut");
    let cut_at = now_secs();

    let rows = common::wait_for(
        "a succeeded run on another host",
        Duration::from_secs(420),
        Duration::from_secs(2),
        || {
            let rows = history(&cl.hosts[1], "store-sync")?;
            Ok(rows
                .iter()
                .any(|r| field(r, "outcome") == "succeeded")
                .then_some(rows))
        },
    )
    .expect("another host finished the slot");
    assert_eq!(count(), 3000, "exactly 3,000 orders");
    let done = rows
        .iter()
        .find(|r| field(r, "outcome") == "succeeded")
        .expect("succeeded");
    let cut = rows
        .iter()
        .find(|r| field(r, "outcome") == "interrupted")
        .expect("the cut run is interrupted");
    assert_eq!(field(cut, "reason"), "lease-expired");
    assert_ne!(
        field(done, "host"),
        field(cut, "host"),
        "another host ran it"
    );
    assert_eq!(field(done, "slot"), field(cut, "slot"));
    let started = done
        .get("started_at_usec")
        .and_then(Value::as_i64)
        .expect("started_at_usec") as f64
        / 1e6;
    assert!(
        started > cut_at,
        "the re-run started after the cut ({started} > {cut_at})"
    );
    assert!(
        done.get("fencing_token").and_then(Value::as_i64)
            > cut.get("fencing_token").and_then(Value::as_i64),
        "a later grant has a larger fencing token"
    );
    // The job's own record: every row of the cut run was written before every row of the re-run.
    let last_cut = db
        .query(&format!(
            "SELECT max(synced_at) FROM orders WHERE run_id = '{}'",
            field(cut, "run_id")
        ))
        .expect("query");
    let first_done = db
        .query(&format!(
            "SELECT min(synced_at) FROM orders WHERE run_id = '{}'",
            field(done, "run_id")
        ))
        .expect("query");
    assert!(
        last_cut <= first_done,
        "no overlap: {last_cut} <= {first_done}"
    );
    let cut_rows: i64 = db
        .query(&format!(
            "SELECT count(*) FROM orders WHERE run_id = '{}'",
            field(cut, "run_id")
        ))
        .expect("query")
        .parse()
        .expect("count");
    assert!(
        cut_rows >= seen,
        "the rows committed before the cut are kept"
    );
}

on_each_store!(a_host_cut_off_from_the_store_stops_before_another_takes_over);
fn a_host_cut_off_from_the_store_stops_before_another_takes_over(server: &'static Server) {
    let Some(store) = shared_store(
        server,
        "a_host_cut_off_from_the_store_stops_before_another_takes_over",
        None,
    ) else {
        return;
    };
    let jobs = LOGGING_JOB.replace(
        "kill_grace = \"3s\"",
        "kill_grace = \"3s\"\nenvironment = { FIRST_SECONDS = \"300\" }",
    );
    let cl = cluster("part", &store, &jobs, |o| o);
    let (h1, proxy1) = (&cl.hosts[0], &cl.proxies[0]);
    start_and_wait(h1);
    proxy1.freeze();
    let frozen_at = now_secs();

    // h1 stops its copy on its own, without the store.
    let term = common::wait_for(
        "h1 to stop its job",
        Duration::from_secs(60),
        Duration::from_millis(200),
        || Ok(job_log(h1).into_iter().find(|l| l.0 == "term")),
    )
    .expect("h1 stopped its job");
    let result = wait_unit_done(h1, "jobguard@sync.service", Duration::from_secs(60));
    assert_eq!(
        prop(h1, "jobguard@sync.service", "ExecMainStatus"),
        "75",
        "lease lost ({result})"
    );

    // Another host takes over after the lease expired, and finishes.
    let (other, start) = common::wait_for(
        "another host to run the slot",
        Duration::from_secs(420),
        Duration::from_secs(1),
        || {
            Ok(cl.hosts[1..]
                .iter()
                .find_map(|c| job_log(c).into_iter().find(|l| l.0 == "end").map(|_| c))
                .map(|c| {
                    let start = job_log(c)
                        .into_iter()
                        .find(|l| l.0 == "start")
                        .expect("start line");
                    (c.name().to_string(), start)
                }))
        },
    )
    .expect("taken over");
    assert!(
        term.1 < start.1,
        "h1's job ended ({}) before {other}'s started ({}); frozen at {frozen_at}",
        term.1,
        start.1
    );
    assert!(
        term.1 - frozen_at < 30.0,
        "h1 stopped within its lease time to live"
    );
    proxy1.thaw();
    // The command's "end" line comes before its shim records the outcome: give the
    // record a moment (a read at once saw attempt 2 still `running`).
    let succeeded = |rows: &[serde_json::Value]| {
        rows.iter()
            .filter(|r| field(r, "outcome") == "succeeded")
            .count()
    };
    let rows = common::wait_for(
        "the other host's success to be recorded",
        Duration::from_secs(30),
        Duration::from_secs(1),
        || {
            Ok(history(&cl.hosts[1], "sync")
                .ok()
                .filter(|rows| succeeded(rows) > 0))
        },
    )
    .or_else(|_| history(&cl.hosts[1], "sync"))
    .expect("history");
    assert_eq!(succeeded(&rows), 1, "{rows:#?}");
    let first = rows
        .iter()
        .find(|r| field(r, "attempt") == "1")
        .expect("first attempt");
    assert!(
        ["interrupted", "lease_lost"].contains(&field(first, "outcome").as_str()),
        "{first}"
    );
}

on_each_store!(a_host_cut_off_as_its_job_ends_records_the_success_and_no_host_runs_it_again);
/// The holder is cut off as its job ends, and stays so past its lease's expiry, the other
/// hosts' first pass to see the lease expired (their first sighting) and its own next
/// pass. It is back 75 s after that first sighting, inside the 90 s in which a holder that
/// comes back records what it kept before any other host calls it gone. Its own pass is
/// held until 125 s after the sighting, past the other hosts' pass at 120 s: with a grace
/// of 90 s from the sighting, that pass took it for gone (and, when it won the race with
/// the holder's own pass at the same minute, ran the slot again); the grace is one pass
/// interval longer ([`jobguard::ops::recover::SIGHTING_GRACE_USEC`], 150 s), so that a holder
/// back within 90 s always has a pass of its own first. Then the holder's pass records
/// the success, and no host runs the slot again.
fn a_host_cut_off_as_its_job_ends_records_the_success_and_no_host_runs_it_again(
    server: &'static Server,
) {
    let test = "a_host_cut_off_as_its_job_ends_records_the_success_and_no_host_runs_it_again";
    let Some(store) = shared_store(server, test, None) else {
        return;
    };
    let jobs = LOGGING_JOB
        .replace("lease_ttl = \"30s\"", "lease_ttl = \"12s\"")
        .replace(
            "kill_grace = \"3s\"",
            "kill_grace = \"3s\"\nenvironment = { FIRST_SECONDS = \"4\" }",
        );
    let cl = cluster("kept", &store, &jobs, |o| o);
    let (h1, proxy1) = (&cl.hosts[0], &cl.proxies[0]);
    start_and_wait(h1);
    // Cut off before the command ends: its success cannot be recorded.
    proxy1.freeze();
    let frozen_at = now_secs();
    common::wait_for(
        "the job to end on h1",
        Duration::from_secs(60),
        Duration::from_millis(100),
        || Ok(job_log(h1).iter().any(|l| l.0 == "end").then_some(())),
    )
    .expect("ended");
    // The other hosts' first sighting of the expired lease (store time, µs, kept by each
    // host's recovery pass in /run/jobguard/suspect/RUN_ID).
    let sighted = common::wait_for(
        "another host to see h1's lease expired",
        Duration::from_secs(150),
        Duration::from_millis(500),
        || {
            let seen = cl.hosts[1..]
                .iter()
                .filter_map(|c| {
                    let out = c
                        .exec(&["sh", "-c", "cat /run/jobguard/suspect/* 2>/dev/null"])
                        .ok()?;
                    String::from_utf8_lossy(&out.stdout)
                        .lines()
                        .filter_map(|l| l.trim().parse::<i64>().ok())
                        .min()
                })
                .min();
            Ok(seen.map(|us| us as f64 / 1e6))
        },
    )
    .expect("sighted");
    // The holder's own passes stop here; it is back at +75 s, and its pass runs at +125 s.
    h1.exec_ok(&["systemctl", "stop", "jobguard-recover.timer"])
        .expect("stop h1's recover timer");
    let thaw_at = sighted + 75.0;
    std::thread::sleep(Duration::from_secs_f64((thaw_at - now_secs()).max(0.0)));
    proxy1.thaw();
    eprintln!(
        "{test}: cut off from {frozen_at:.1} to {thaw_at:.1}; lease first seen expired {sighted:.1}"
    );
    std::thread::sleep(Duration::from_secs_f64(
        (sighted + 125.0 - now_secs()).max(0.0),
    ));
    let rows = history(&cl.hosts[1], "sync").expect("history");
    assert_eq!(rows.len(), 1, "{rows:#?}");
    assert_eq!(
        field(&rows[0], "outcome"),
        "running",
        "no host calls the holder gone within 150 s of its first sighting: {rows:#?}"
    );
    h1.exec_ok(&["systemctl", "start", "jobguard-recover.service"])
        .expect("h1's recovery pass");
    h1.exec_ok(&["systemctl", "start", "jobguard-recover.timer"])
        .expect("h1's recover timer");
    let rows = history(&cl.hosts[1], "sync").expect("history");
    assert_eq!(field(&rows[0], "outcome"), "succeeded", "{rows:#?}");

    // Two more passes of every host: no host queues or runs the slot again.
    std::thread::sleep(Duration::from_secs_f64(
        (sighted + 250.0 - now_secs()).max(0.0),
    ));
    let starts: Vec<String> = cl
        .hosts
        .iter()
        .flat_map(|c| {
            job_log(c)
                .into_iter()
                .filter(|l| l.0 == "start")
                .map(|l| format!("{} {}", c.name(), l.2))
                .collect::<Vec<_>>()
        })
        .collect();
    let rows = history(&cl.hosts[1], "sync").expect("history");
    assert_eq!(starts.len(), 1, "one execution: {starts:?}\n{rows:#?}");
    assert_eq!(rows.len(), 1, "{rows:#?}");
    assert_eq!(field(&rows[0], "outcome"), "succeeded", "{rows:#?}");
}

/// Three hosts made from one image that was never given machine ids of their own (one
/// random `/etc/machine-id`, answered too), with [`LOGGING_JOB`] whose first attempt runs
/// `first_seconds`.
fn one_image_cluster(tag: &str, store: &Namespace, first_seconds: u32) -> (Cluster, String) {
    let shared_id = std::fs::read_to_string("/proc/sys/kernel/random/uuid")
        .expect("uuid")
        .trim()
        .replace('-', "");
    let jobs = LOGGING_JOB.replace(
        "kill_grace = \"3s\"",
        &format!("kill_grace = \"3s\"\nenvironment = {{ FIRST_SECONDS = \"{first_seconds}\" }}"),
    );
    let cl = cluster(tag, store, &jobs, |o| {
        o.file("/etc/machine-id", format!("{shared_id}\n"))
    });
    (cl, shared_id)
}

/// Three hosts made from one image that was never given machine ids of their own (one
/// `/etc/machine-id`; each boot has its own boot id) share a PostgreSQL store. The slot
/// fired on two at once runs once; while it runs, a recovery pass on every host leaves
/// the live run alone (it is not a run of an earlier boot of their machine: they never
/// had that boot); `status` on the others names the shared machine id and exits 1, and
/// their recovery pass logs it once. The job's own log is the ground truth: one start.
#[test]
fn hosts_with_one_machine_id_run_each_slot_once_and_report_the_shared_id() {
    let case = "hosts_with_one_machine_id_run_each_slot_once_and_report_the_shared_id";
    let Some(store) = shared_store(server("postgres"), case, None) else {
        return;
    };
    let (cl, shared_id) = one_image_cluster("clone", &store, 40);
    let boots: Vec<String> = cl
        .hosts
        .iter()
        .map(|c| c.boot_id().expect("boot id").replace('-', ""))
        .collect();
    for c in &cl.hosts {
        assert_eq!(
            c.exec_ok(&["cat", "/etc/machine-id"])
                .expect("machine id")
                .trim(),
            shared_id
        );
    }
    assert!(
        boots[0] != boots[1] && boots[1] != boots[2] && boots[0] != boots[2],
        "{boots:?}"
    );
    // A record proves a copy once it started a minute (identity::TWIN_MARGIN_USEC) after
    // the reader's boot: the last host booted just now.
    std::thread::sleep(Duration::from_secs(62));
    std::thread::scope(|s| {
        for c in &cl.hosts[..2] {
            s.spawn(move || {
                c.exec_ok(&["systemctl", "start", "--no-block", "jobguard@sync.service"])
                    .expect("start")
            });
        }
    });
    let runner = common::wait_for(
        "the job to start on one of the hosts",
        Duration::from_secs(60),
        Duration::from_millis(200),
        || {
            Ok(cl.hosts[..2]
                .iter()
                .position(|c| job_log(c).iter().any(|l| l.0 == "start")))
        },
    )
    .expect("a start");
    // While it runs: a recovery pass on every host, twice.
    for _ in 0..2 {
        for c in &cl.hosts {
            c.exec_ok(&["systemctl", "start", "jobguard-recover.service"])
                .expect("recover");
            wait_unit_done(c, "jobguard-recover.service", Duration::from_secs(60));
        }
    }
    let rows = history(&cl.hosts[0], "sync").expect("history");
    assert_eq!(rows.len(), 1, "{rows:#?}");
    assert_eq!(field(&rows[0], "outcome"), "running", "{rows:#?}");
    for (i, c) in cl.hosts.iter().enumerate() {
        let out = c.exec(&["jobguard", "status", "--json"]).expect("status");
        let v: Value = serde_json::from_slice(&out.stdout).expect("status json");
        let shared = v["jobs"][0]["machine_id_shared"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if i == runner {
            assert!(shared.is_empty(), "its own run: {v}");
            continue;
        }
        assert_eq!(out.status.code(), Some(1), "{v}");
        assert_eq!(shared.len(), 1, "{v}");
        assert_eq!(shared[0]["boot_id"], boots[runner].as_str(), "{v}");
        let events = c
            .journal(&["JOBGUARD_EVENT=machine-id-shared"])
            .expect("journal");
        assert_eq!(events.len(), 1, "once per run, over two passes: {events:?}");
        let text = c
            .exec(&["jobguard", "status"])
            .map(|o| text(&o))
            .unwrap_or_default();
        assert!(text.contains("systemd-machine-id-setup"), "{text}");
    }
    for c in &cl.hosts[..2] {
        wait_unit_done(c, "jobguard@sync.service", Duration::from_secs(120));
    }
    let rows = history(&cl.hosts[2], "sync").expect("history");
    assert_eq!(rows.len(), 1, "one run in the shared ledger: {rows:#?}");
    assert_eq!(field(&rows[0], "outcome"), "succeeded", "{rows:#?}");
    let starts = log_lines(&cl.hosts, "start");
    assert_eq!(
        starts.len(),
        1,
        "the command ran once across the hosts: {starts:?}"
    );
}

/// A whole host paused past its lease, as a hypervisor pauses a VM or a snapshot is
/// resumed later: the holder's container is frozen (cgroup v2 freezer) a few seconds into
/// a long run, on three hosts made from one image (one machine id). The others' recovery
/// passes judge the run cut only by the store's clock (its lease expired, then a pass's
/// grace), and one of them runs the slot again and records its success. Then the frozen
/// host is thawed with its command, its shim and its lease as they were: the shim finds
/// its lease long gone, kills the command before it gets further, writes nothing over the
/// new attempt, and exits 75. The job's own logs are the ground truth: one `end` in all.
#[test]
fn a_host_frozen_past_its_lease_is_fenced_when_it_resumes() {
    let case = "a_host_frozen_past_its_lease_is_fenced_when_it_resumes";
    let Some(store) = shared_store(server("postgres"), case, None) else {
        return;
    };
    let (cl, _) = one_image_cluster("frozen", &store, 900);
    let h1 = &cl.hosts[0];
    start_and_wait(h1);
    std::thread::sleep(Duration::from_secs(3));
    h1.freeze(true).expect("freeze h1");
    let frozen_at = now_secs();

    // Another host's recovery pass judges the run cut and runs the slot again.
    let other = common::wait_for(
        "another host to run the slot again",
        Duration::from_secs(480),
        Duration::from_secs(2),
        || {
            Ok(cl.hosts[1..]
                .iter()
                .position(|c| job_log(c).iter().any(|l| l.0 == "end"))
                .map(|i| i + 1))
        },
    )
    .expect("run again elsewhere");
    let succeeded = |rows: &[Value]| {
        rows.iter()
            .filter(|r| field(r, "outcome") == "succeeded")
            .count()
    };
    common::wait_for(
        "the other host's success to be recorded",
        Duration::from_secs(60),
        Duration::from_secs(1),
        || {
            Ok(history(&cl.hosts[other], "sync")
                .ok()
                .filter(|rows| succeeded(rows) == 1))
        },
    )
    .expect("recorded");
    let paused = now_secs() - frozen_at;
    assert!(paused > 30.0, "frozen past the lease: {paused} s");

    h1.freeze(false).expect("thaw h1");
    let result = wait_unit_done(h1, "jobguard@sync.service", Duration::from_secs(60));
    assert_eq!(
        prop(h1, "jobguard@sync.service", "ExecMainStatus"),
        "75",
        "the resumed holder's lease is lost ({result})"
    );
    let rows = history(&cl.hosts[2], "sync").expect("history");
    assert_eq!(succeeded(&rows), 1, "{rows:#?}");
    let first = rows
        .iter()
        .find(|r| field(r, "attempt") == "1")
        .expect("first attempt");
    assert_eq!(field(first, "outcome"), "interrupted", "{rows:#?}");
    let ends = log_lines(&cl.hosts, "end");
    assert_eq!(ends.len(), 1, "the command completed once: {ends:?}");
    assert_ne!(ends[0].0, 0, "not on the resumed host: {ends:?}");
}

/// The fleet view on two booted hosts that share one PostgreSQL store, each with a broken
/// job list: a typo in one job on the first (`catch_up = "al"`), a second file in `jobs.d`
/// that reuses another job's name on the second. Each host's recovery pass writes its
/// heartbeat and its metrics textfile. `jobguard status --fleet` on either host shows
/// both hosts and both refused jobs, and exits 1; the example alert rules, run by
/// promtool over the textfiles the two hosts wrote (as node_exporter exports them), raise
/// one `JobguardJobRefused` per host and one `JobguardFleetJobProblem` per job, not one per
/// host that reports it (each host reaches the store through a proxy of its own, so the
/// two export it under two addresses).
#[test]
fn two_hosts_with_broken_job_lists_are_seen_and_alerted_from_either() {
    let server = server("postgres");
    let case = "two_hosts_with_broken_job_lists_are_seen_and_alerted_from_either";
    let promtool = Command::new("promtool")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    let Some(store) = shared_store(
        server,
        case,
        (!promtool).then(|| "promtool not found (Debian: prometheus)".to_string()),
    ) else {
        return;
    };
    let list = |typo: &str| {
        format!(
            "[defaults]\nstore_file = \"/etc/jobguard/store.url\"\n\n\
             [metrics]\ntextfile = \"/var/lib/jobguard-test/jobguard.prom\"\n\n\
             [jobs.sync]\nschedule = \"*-01-01 00:00:00 UTC\"\ncommand = [\"true\"]\n\n\
             [jobs.nightly]\nschedule = \"*-*-* 03:00:00 UTC\"\ncommand = [\"true\"]\n{typo}\n\n\
             [jobs.report]\nschedule = \"*-*-* 04:00:00 UTC\"\ncommand = [\"true\"]\n\n\
             [jobs.beat]\nschedule = \"*:*:00/10\"\ncommand = [\"/bin/sh\", \"-c\", \"mkdir -p {BEATS} && echo $JOBGUARD_SLOT >> {BEATS}/slots\"]\n"
        )
    };
    let copy = "[jobs.report]\nschedule = \"hourly\"\ncommand = [\"true\"]\nstore_file = \"/etc/jobguard/store.url\"\n";
    let mut hosts = Vec::new();
    let mut proxies = Vec::new();
    for (i, (jobs, dropin)) in [(list("catch_up = \"al\""), None), (list(""), Some(copy))]
        .into_iter()
        .enumerate()
    {
        let proxy = Proxy::start(store.server.port);
        let url = format!(
            "{}\n",
            (store.server.address)(&format!("127.0.0.1:{}", proxy.port), &store.name)
        );
        let mut opts = jobguard_options(&jobs).file("/etc/jobguard/store.url", &url);
        if let Some(d) = dropin {
            opts = opts.file("/etc/jobguard/jobs.d/50-copy.toml", d);
        }
        let c = boot(&format!("fleet{}", i + 1), &opts);
        c.exec_ok(&["chmod", "0600", "/etc/jobguard/store.url"])
            .expect("chmod");
        c.exec_ok(&["mkdir", "-p", "/var/lib/jobguard-test"])
            .expect("mkdir");
        c.exec_ok(&["systemctl", "daemon-reload"])
            .expect("daemon-reload");
        hosts.push(c);
        proxies.push(proxy);
    }
    // Each host's pass after the other's first: both see both heartbeats.
    for _ in 0..2 {
        for c in &hosts {
            c.exec(&["jobguard", "recover"]).expect("jobguard recover");
        }
    }
    let labels: Vec<String> = hosts
        .iter()
        .map(|c| {
            let name = c.exec_ok(&["hostname"]).expect("hostname");
            let id = c.exec_ok(&["cat", "/etc/machine-id"]).expect("machine-id");
            format!("{} ({})", name.trim(), &id.trim()[..8])
        })
        .collect();
    for c in &hosts {
        let out = c
            .exec(&["jobguard", "status", "--fleet"])
            .expect("status --fleet");
        let said = text(&out);
        assert_eq!(out.status.code(), Some(1), "on {}: {said}", c.name());
        for l in &labels {
            assert!(
                said.lines().any(|line| line.starts_with(l.as_str())),
                "{l} on {}: {said}",
                c.name()
            );
        }
        let row = |job: &str| {
            said.lines()
                .find(|l| l.starts_with(&format!("{job} ")))
                .unwrap_or_default()
                .to_string()
        };
        assert!(
            row("nightly").contains(&format!("refused by the job list on {}", labels[0])),
            "{said}"
        );
        assert!(
            row("report").contains(&format!("refused by the job list on {}", labels[1])),
            "{said}"
        );
        assert!(row("sync").ends_with(" ok"), "{said}");
    }

    // The textfiles, as node_exporter exports them: the job label renamed, the host's
    // instance added; promtool then runs the example rules over 30 minutes of them.
    let mut series = String::new();
    for (i, c) in hosts.iter().enumerate() {
        let prom = c
            .exec_ok(&["cat", "/var/lib/jobguard-test/jobguard.prom"])
            .expect("the textfile");
        for line in prom
            .lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
        {
            let (name_labels, value) = line.rsplit_once(' ').expect("a sample");
            let (name, labels) = match name_labels.split_once('{') {
                Some((n, l)) => (n, l.trim_end_matches('}').replace("job=", "exported_job=")),
                None => (name_labels, String::new()),
            };
            let mut all = format!("job=\"node\",instance=\"h{}\"", i + 1);
            if !labels.is_empty() {
                all = format!("{all},{labels}");
            }
            series.push_str(&format!(
                "      - series: '{name}{{{all}}}'\n        values: '{value}x30'\n"
            ));
        }
    }
    let refused = |h: usize, job: &str| {
        format!(
            "          - exp_labels: {{severity: critical, job: node, instance: h{h}, exported_job: {job}}}\n            exp_annotations:\n              summary: \"jobguard job {job} on h{h} is left out of the job list: none of its slots run\"\n              description: \"`jobguard check` on h{h} says why; fix the definition and run `systemctl daemon-reload`.\"\n"
        )
    };
    let problem = |job: &str| {
        format!(
            "          - exp_labels: {{severity: warning, job: node, exported_job: {job}}}\n            exp_annotations:\n              summary: \"jobguard job {job}: the hosts disagree or none arms it\"\n              description: \"`jobguard status --fleet` on any host of the store says which hosts and why.\"\n"
        )
    };
    let rules =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("packaging/prometheus/jobguard.rules.yml");
    let test = format!(
        "rule_files:\n  - {}\nevaluation_interval: 1m\ntests:\n  - interval: 1m\n    input_series:\n{series}    alert_rule_test:\n      - eval_time: 20m\n        alertname: JobguardJobRefused\n        exp_alerts:\n{}{}      - eval_time: 20m\n        alertname: JobguardFleetJobProblem\n        exp_alerts:\n{}{}",
        rules.display(),
        refused(1, "nightly"),
        refused(2, "report"),
        problem("nightly"),
        problem("report"),
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("fleet.test.yml");
    std::fs::write(&file, &test).expect("write the promtool test");
    let out = Command::new("promtool")
        .args(["test", "rules"])
        .arg(&file)
        .output()
        .expect("promtool");
    assert!(
        out.status.success(),
        "promtool test rules: {}{}\n{test}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    a_paused_job_is_paused_on_both(&hosts);
    drop(proxies);
}

/// Where the job `beat` of [`two_hosts_with_broken_job_lists_are_seen_and_alerted_from_either`]
/// writes each slot it ran, on its host.
const BEATS: &str = "/var/lib/jobguard-beat";

/// The slots `beat` ran on `c` (its own record, ground truth apart from the ledger), µs.
fn beats_ran(c: &Container) -> Vec<i64> {
    c.exec(&["cat", &format!("{BEATS}/slots")])
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse::<jiff::Timestamp>().ok())
        .map(|t| t.as_microsecond())
        .collect()
}

/// `jobguard pause beat` on the first host pauses it on both: both show it paused, both
/// skip its slots (every 10 s) while it is, neither runs one in the window; `jobguard
/// resume beat` on the second ends it for both, and a slot after it runs once.
fn a_paused_job_is_paused_on_both(hosts: &[Container]) {
    let out = hosts[0]
        .exec(&["jobguard", "pause", "beat", "--reason", "fleet test"])
        .expect("jobguard pause");
    assert!(out.status.success(), "{}", text(&out));
    let mut since = 0;
    for c in hosts {
        let out = c.exec(&["jobguard", "status", "--json"]).expect("status");
        let v: Value = serde_json::from_slice(&out.stdout).expect("status json");
        let beat = v["jobs"]
            .as_array()
            .and_then(|j| j.iter().find(|j| j["job"] == "beat"))
            .cloned()
            .unwrap_or_else(|| panic!("beat on {}: {v}", c.name()));
        let pause = &beat["fleet_pause"];
        assert_eq!(pause["reason"], "fleet test", "on {}: {beat}", c.name());
        assert!(pause["until"].is_null(), "{beat}");
        since = pause["since"]
            .as_str()
            .and_then(|s| s.parse::<jiff::Timestamp>().ok())
            .expect("since")
            .as_microsecond();
        let table = text(&c.exec(&["jobguard", "status"]).expect("status"));
        let row = table.lines().find(|l| l.starts_with("beat ")).unwrap_or("");
        // `paused`, or `paused, running` while a run that started before the pause ends
        // (a run under way is not stopped).
        assert!(
            row.contains(" paused ") || row.contains(" paused, running "),
            "on {}: {table}",
            c.name()
        );
    }
    // Both hosts' timers fire in the window (a slot at least 1 s after the pause began,
    // so that no start of the slot before it is still under way) and skip.
    let paused_skip = |c: &Container| {
        c.journal(&["JOBGUARD_JOB=beat", "JOBGUARD_REASON=paused"])
            .unwrap_or_default()
            .iter()
            .filter_map(|e| e.get("JOBGUARD_SLOT"))
            .filter_map(|s| s.parse::<jiff::Timestamp>().ok())
            .any(|t| t.as_microsecond() >= since + 1_000_000)
    };
    for c in hosts {
        let skipped = (0..40).any(|_| {
            std::thread::sleep(Duration::from_secs(1));
            paused_skip(c)
        });
        assert!(
            skipped,
            "no paused skip on {}: {}",
            c.name(),
            c.unit_log("jobguard@beat.service")
        );
    }
    let out = hosts[1]
        .exec(&["jobguard", "resume", "beat"])
        .expect("jobguard resume");
    assert!(out.status.success(), "{}", text(&out));
    let until = hosts[1]
        .exec(&["date", "+%s%6N"])
        .ok()
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .trim()
                .parse::<i64>()
                .ok()
        })
        .expect("date");
    // A slot after the resume runs on one of them.
    let ran_after = || {
        hosts
            .iter()
            .flat_map(beats_ran)
            .any(|s| s > until + 1_000_000)
    };
    assert!(
        (0..40).any(|_| {
            std::thread::sleep(Duration::from_secs(1));
            ran_after()
        }),
        "nothing ran after the resume: {}",
        hosts[0].unit_log("jobguard@beat.service")
    );
    let mut all: Vec<i64> = hosts.iter().flat_map(beats_ran).collect();
    let in_window: Vec<i64> = all
        .iter()
        .copied()
        .filter(|&s| s >= since && s < until)
        .collect();
    assert!(in_window.is_empty(), "ran while paused: {in_window:?}");
    let n = all.len();
    all.sort();
    all.dedup();
    assert_eq!(all.len(), n, "a slot ran twice");
}

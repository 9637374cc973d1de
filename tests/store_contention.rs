//! 32 real `jobguard run` processes, as if on 32 hosts (each its own runtime directory,
//! so the local lock does not decide), fire the same slot of one job at once against
//! each shared store: exactly one runs the command, every other one skips and says why,
//! and the ledger holds one record for the slot. Also: a claim whose answer is lost after
//! the store committed it; a holder cut off from the store whose command must be dead
//! before another host may take the slot over; a store cut off at the end of a run, whose
//! outcome this host keeps and records later instead of running the slot again.
#![cfg(all(
    feature = "store-postgres",
    feature = "store-mysql",
    feature = "store-redis"
))]

mod common;
mod support;

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::remote::{Namespace, Proxy, Server, server};
use support::{Sandbox, stderr, wait_until};

/// A timer's fire time (2026-11-29T02:03:00Z, µs): marks the runs timer-started.
const FIRED: &str = "1795917780000000";
const RACERS: usize = 32;

fn contend(server: &'static Server, test: &str) {
    let Some(ns) = Namespace::new(server, test) else {
        return;
    };
    contend_at(&ns.address());
}

/// [`contend`] on the store at `address`.
fn contend_at(address: &str) {
    let out_file = tempfile::NamedTempFile::new().unwrap();
    let out = out_file.path().display().to_string();
    // The command takes a moment, so that most racers meet a held lease and some may
    // meet the succeeded slot: both are skips with a reason.
    let sb = Sandbox::new(&format!(
        "[jobs.race]\nschedule = \"*-*-* 02:00:00 UTC\"\nstore = {:?}\n\
         command = [\"/bin/sh\", \"-c\", \"echo ran >> {out}; sleep 1\"]\n",
        address
    ));
    let go = sb.file("go");
    let mut children: Vec<Child> = (0..RACERS)
        .map(|i| {
            // Each racer waits for the start file, so that all start together.
            let mut cmd = std::process::Command::new("/bin/sh");
            cmd.arg("-c")
                .arg(format!(
                    "while [ ! -e {go} ]; do sleep 0.01; done; exec \"$0\" \"$@\"",
                    go = go.display()
                ))
                .arg(env!("CARGO_BIN_EXE_jobguard"))
                .args(["run", "race", "--config"])
                .arg(sb.file("jobs.toml"))
                .env("JOBGUARD_RUNTIME_DIR", sb.file(&format!("run{i}")))
                .env("TRIGGER_TIMER_REALTIME_USEC", FIRED)
                .env_remove("JOBGUARD_CONFIG")
                .env_remove("INVOCATION_ID")
                .env_remove("NOTIFY_SOCKET")
                .env_remove("JOURNAL_STREAM")
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            cmd.spawn().expect("spawn jobguard run")
        })
        .collect();
    std::fs::write(&go, "").unwrap();
    let mut started = Vec::new();
    let mut skipped = Vec::new();
    for child in children.iter_mut() {
        let deadline = std::time::Instant::now() + Duration::from_secs(120);
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            if std::time::Instant::now() > deadline {
                let _ = child.kill();
                panic!("a racer did not finish within 120 s");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut err = String::new();
        use std::io::Read;
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut err)
            .unwrap();
        assert_eq!(status.code(), Some(0), "every racer exits 0: {err}");
        if err.contains("skipped") {
            assert!(
                err.contains("the lease is held by host") || err.contains("already succeeded"),
                "a skip names its reason: {err}"
            );
            skipped.push(err);
        } else {
            started.push(err);
        }
    }
    let ran = std::fs::read_to_string(out_file.path()).unwrap();
    assert_eq!(ran.lines().count(), 1, "the command ran once: {started:#?}");
    assert_eq!(started.len(), 1, "one racer started: {started:#?}");
    assert_eq!(skipped.len(), RACERS - 1);

    let history = sb.history("race");
    assert_eq!(history.len(), 1, "one record in the ledger: {history:#?}");
    assert_eq!(history[0]["outcome"], "succeeded");
    assert_eq!(history[0]["attempt"], 1);
}

/// [`contend`] and [`marks_race_the_lease`] on each shared server:
/// `NAME::thirty_two_racers_one_runs`, `NAME::a_mark_never_lands_after_its_lease_ended`.
macro_rules! racers {
    ($name:ident $judge:ident) => {
        mod $name {
            #[test]
            fn thirty_two_racers_one_runs() {
                super::contend(
                    crate::common::remote::server(stringify!($name)),
                    concat!("store_contention::", stringify!($name)),
                );
            }

            #[test]
            fn a_mark_never_lands_after_its_lease_ended() {
                super::marks_race_the_lease(
                    crate::common::remote::server(stringify!($name)),
                    concat!("store_contention::", stringify!($name), "::marks"),
                );
            }

            #[test]
            fn a_mark_whose_insert_is_held_past_its_lease_is_not_recorded() {
                super::a_held_mark_is_not_recorded(
                    crate::common::remote::server(stringify!($name)),
                    concat!("store_contention::", stringify!($name), "::held"),
                    super::LeaseEnd::Expiry,
                );
            }

            #[test]
            fn a_mark_whose_insert_is_held_while_another_host_takes_over_is_not_recorded() {
                super::a_held_mark_is_not_recorded(
                    crate::common::remote::server(stringify!($name)),
                    concat!("store_contention::", stringify!($name), "::taken"),
                    super::LeaseEnd::Takeover,
                );
            }

            #[test]
            fn a_mark_sent_after_its_lease_expired_is_not_recorded() {
                super::a_late_mark_is_not_recorded(
                    crate::common::remote::server(stringify!($name)),
                    concat!("store_contention::", stringify!($name), "::late"),
                );
            }
        }
    };
}
common::remote::each_server!(racers);

/// A fenced mark races the end of its run's lease (`unlock`, a read of the key, then
/// another holder's grant), round after round on real connections, the end coming later
/// in the mark's reads and write each round: a mark the store answered as new is in the
/// store as soon as the lease has ended (it never lands after), and the next holder sees
/// it; a refused mark is never recorded. Prints how often each side won.
fn marks_race_the_lease(server: &'static Server, test: &str) {
    const ROUNDS: u32 = 60;
    use common::conformance::{claimed, new_mark, request};
    use jobguard::store::Marking;
    let Some(ns) = Namespace::new(server, test) else {
        return;
    };
    let open = || jobguard::store::open(&ns.address()).expect("open the store");
    let (mut a, mut b) = (open(), open());
    let (mut new, mut fenced) = (0, 0);
    for round in 0..ROUNDS {
        let job = format!("race{round}");
        let slot = common::conformance::S1;
        let (lease, _) = claimed(&mut *a, &request(&job, slot, 1, 2 * round + 1, false));
        let key = format!("K{round}");
        let mark = new_mark(&job, "shipping", &key, 1, lease.token);
        let start = std::sync::Arc::new(std::sync::Barrier::new(2));
        let go = start.clone();
        let marker = std::thread::spawn(move || {
            go.wait();
            let answer = a.mark(&mark, true).expect("mark");
            (a, answer)
        });
        start.wait();
        // Later and later in the mark's reads and write, from round to round.
        std::thread::sleep(Duration::from_micros(u64::from(round) * 150));
        b.unlock(&job).expect("unlock");
        // What the store holds once the lease has ended: a mark it took must be in it.
        let seen = b.read_mark("shipping", &key).expect("read the mark");
        let after = request(&job, slot + 86_400_000_000, 2, 2 * round + 2, false);
        let (l2, _) = claimed(&mut *b, &after);
        let (back, answer) = marker.join().expect("the marker");
        a = back;
        match answer {
            Marking::New(m) => {
                new += 1;
                assert_eq!(
                    seen.as_ref(),
                    Some(&m),
                    "round {round}: a mark the store took landed after its lease ended"
                );
                assert_eq!(
                    b.mark(&new_mark(&job, "shipping", &key, 2, l2.token), true)
                        .expect("mark"),
                    Marking::Already(m),
                    "round {round}: the next holder sees the mark"
                );
            }
            Marking::Fenced(_) => {
                fenced += 1;
                assert_eq!(
                    b.read_mark("shipping", &key).expect("read"),
                    None,
                    "round {round}: a fenced mark was recorded"
                );
            }
            other => panic!("round {round}: {other:?}"),
        }
    }
    eprintln!("{test}: {ROUNDS} rounds: the mark won {new}, the end of the lease won {fenced}");
}

/// A run frozen between its read of the lease and its insert: the insert primitive,
/// called directly after the lease expired by the store's own clock (nobody took over,
/// nothing wrote the lease), records nothing. The same insert a moment earlier, while the
/// lease held, is recorded, so the refusal comes from the expiry.
fn a_late_mark_is_not_recorded(server: &'static Server, test: &str) {
    use common::conformance::{claimed, new_mark, request};
    let Some(ns) = Namespace::new(server, test) else {
        return;
    };
    let open = || jobguard::store::open(&ns.address()).expect("open the store");
    let (mut a, mut b) = (open(), open());
    let mut req = request("late", common::conformance::S1, 1, 1, false);
    req.ttl = Duration::from_secs(1);
    let (lease, _) = claimed(&mut *a, &req);
    let mut early = new_mark("late", "shipping", "EARLY", 1, lease.token);
    early.marked_at = a.now().expect("now");
    assert!(
        a.insert_mark(&early, true).expect("insert"),
        "an insert while the lease holds is recorded"
    );
    // Until the store itself says the lease has ended (etcd's leases live at least
    // about 2 s, whatever the time to live asked).
    let expired = wait_until(15, || {
        // The time first: etcd answers a held lease with an expiry just after its read.
        let now = b.now().expect("now");
        let row = b.lease("late").expect("read the lease");
        row.is_none_or(|l| l.expire_at <= now)
    });
    assert!(expired, "the lease expired by the store's clock");
    let mut late = new_mark("late", "shipping", "LATE", 1, lease.token);
    late.marked_at = early.marked_at;
    assert!(
        !a.insert_mark(&late, true).expect("insert"),
        "an insert after the lease expired is refused"
    );
    assert_eq!(b.read_mark("shipping", "LATE").expect("read"), None);
    assert!(b.read_mark("shipping", "EARLY").expect("read").is_some());
}

/// How the lease of [`a_held_mark_is_not_recorded`] ends while its mark's write is held.
#[derive(Clone, Copy, Debug, PartialEq)]
enum LeaseEnd {
    /// It expires by the store's clock; nobody takes over.
    Expiry,
    /// Another host unlocks the job and claims it.
    Takeover,
}

/// A run frozen just before its mark's write (a proxy holds the write, and only the
/// write) while its lease ends (`end`): once the write goes on, the mark is not recorded
/// and the run is told its lease ended. Unless the store held off the takeover until the
/// mark's commit (MySQL/MariaDB's share lock on the lease row): then the mark is recorded
/// and the new holder sees it. The write is the request that carries the mark: Redis's
/// `MULTI`/`EXEC`, the SQL stores' insert, etcd's and ZooKeeper's transaction (the mark's
/// JSON).
fn a_held_mark_is_not_recorded(server: &'static Server, test: &str, end: LeaseEnd) {
    use common::conformance::{claimed, new_mark, request};
    use jobguard::store::Marking;
    let Some(ns) = Namespace::new(server, test) else {
        return;
    };
    let write: &[u8] = match server.name {
        "redis" => b"MULTI",
        "postgres" | "mysql" => b"INSERT INTO jobguard_mark",
        _ => b"marked_at",
    };
    let proxy = Proxy::start(server.port);
    let mut via_proxy = (server.address)(&proxy.listen, &ns.name);
    if server.name == "postgres" {
        // In the clear, for the proxy to see the insert (the server offers TLS).
        via_proxy.push_str("&sslmode=disable");
    }
    let mut a = jobguard::store::open(&via_proxy).expect("open the store");
    let mut b = jobguard::store::open(&ns.address()).expect("open the store");
    let mut req = request("held", common::conformance::S1, 1, 1, false);
    req.ttl = Duration::from_secs(if end == LeaseEnd::Expiry { 1 } else { 60 });
    let (lease, _) = claimed(&mut *a, &req);
    // A first mark makes the mark table or keyspace, so the held write is the insert
    // itself (not a retry after the table was made).
    let early = new_mark("held", "shipping", "EARLY", 1, lease.token);
    assert!(matches!(a.mark(&early, true), Ok(Marking::New(_))));
    proxy.freeze_on(write);
    let marker = std::thread::spawn(move || {
        let mark = new_mark("held", "shipping", "K", 1, lease.token);
        a.mark(&mark, true)
    });
    assert!(
        wait_until(10, || proxy.is_frozen()),
        "the mark's write reached the proxy: {:?}",
        proxy
            .is_frozen()
            .then_some(())
            .ok_or_else(|| marker.is_finished())
    );
    let taken = match end {
        LeaseEnd::Expiry => {
            let expired = wait_until(15, || {
                let now = b.now().expect("now");
                let row = b.lease("held").expect("read the lease");
                row.is_none_or(|l| l.expire_at <= now)
            });
            assert!(expired, "the lease expired by the store's clock");
            proxy.freeze(false);
            None
        }
        LeaseEnd::Takeover => {
            let taker = std::thread::spawn(move || {
                b.unlock("held").expect("unlock");
                let next = request(
                    "held",
                    common::conformance::S1 + 86_400_000_000,
                    2,
                    2,
                    false,
                );
                claimed(&mut *b, &next);
                b
            });
            // A store that orders the takeover after the held mark keeps it waiting.
            let took = wait_until(3, || taker.is_finished());
            proxy.freeze(false);
            b = taker.join().expect("the taker");
            Some(took)
        }
    };
    let answer = marker.join().expect("the marker");
    let recorded = b.read_mark("shipping", "K").expect("read");
    if taken == Some(false) {
        assert!(
            matches!(&answer, Ok(Marking::New(m)) if recorded.as_ref() == Some(m)),
            "the takeover waited for the mark, which must then be recorded: {answer:?} {recorded:?}"
        );
        return;
    }
    assert!(
        matches!(answer, Ok(Marking::Fenced(_))),
        "a mark written after its lease ended ({end:?}): {answer:?}"
    );
    assert_eq!(recorded, None);
}

/// A claim's answer never arrives (the call times out while the grant waits for a lock on
/// the records' table, which another session holds for longer than a call may take): the
/// shim tries again, gets the grant (or, had the server finished the first after the
/// client gave up, the same grant back, confirmed with a renewal), and the slot runs once
/// with one record. A lock on the lease row itself does not hold a grant: it reads again
/// (`postgres_a_claim_that_finds_the_lease_row_locked_reads_again_until_it_is_free`).
#[test]
fn postgres_a_claim_whose_answer_is_lost_still_runs_the_slot_once() {
    let Some(ns) = Namespace::new(server("postgres"), "store_contention::lost_answer") else {
        return;
    };
    let out_file = tempfile::NamedTempFile::new().unwrap();
    let out = out_file.path().display().to_string();
    let sb = Sandbox::new(&format!(
        "[jobs.lost]\nschedule = \"*-*-* 02:00:00 UTC\"\nstore = {:?}\n\
         command = [\"/bin/sh\", \"-c\", \"echo ran >> {out}\"]\n",
        ns.address()
    ));
    let init = sb.run(&["store", "init"]);
    assert!(init.status.success(), "{init:?}");
    let n = &ns.name;
    common::psql(
        "test",
        &format!("INSERT INTO {n}.jobguard_lease VALUES ('lost', '', '', 0, 0, 0)"),
    )
    .expect("lease row");
    // Hold the job's records' table for longer than a store call may take (4 s): reads go
    // on, writes wait.
    let mut holder = std::process::Command::new("psql")
        .args(["-h", "127.0.0.1", "-U", "postgres", "-d", "test", "-Xq"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("psql");
    use std::io::Write;
    holder
        .stdin
        .take()
        .unwrap()
        .write_all(
            format!(
                "BEGIN;\nLOCK TABLE {n}.jobguard_run IN EXCLUSIVE MODE;\n\
                 SELECT pg_sleep(6);\nCOMMIT;\n"
            )
            .as_bytes(),
        )
        .unwrap();
    common::wait_for(
        "the records' table to be locked",
        Duration::from_secs(10),
        Duration::from_millis(50),
        || {
            let locks = common::psql(
                "test",
                "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'SELECT pg_sleep(6)%'",
            )?;
            Ok((locks == "1").then_some(()))
        },
    )
    .expect("locked");
    let run = sb
        .cmd(&["run", "lost"])
        .env("TRIGGER_TIMER_REALTIME_USEC", FIRED)
        .output()
        .unwrap();
    let _ = holder.wait();
    let err = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(0), "{err}");
    assert!(err.contains("retrying"), "the first call timed out: {err}");
    let ran = std::fs::read_to_string(out_file.path()).unwrap();
    assert_eq!(ran, "ran\n", "the command ran once: {err}");
    let history = sb.history("lost");
    assert_eq!(history.len(), 1, "one record: {history:#?}");
    assert_eq!(history[0]["outcome"], "succeeded");
}

/// A statement the client gave up on (no answer within 4 s: here it waits for a table
/// lock) is cancelled on the server, as libpq's `PQcancel` and the mysql client's
/// `KILL QUERY` on Ctrl-C do: it does not run on after the command that sent it has
/// exited, holding a backend and queueing for the lock. A server only notices a closed
/// connection when it next reads from it or writes to it, so without the cancel every
/// repeated slow `audit` or timed-out scrape piled up work there.
fn a_statement_given_up_on_does_not_run_on(server: &'static Server, test: &str) {
    let Some(ns) = Namespace::new(server, test) else {
        return;
    };
    let n = &ns.name;
    let postgres = server.port == 5432;
    // The store's own connections, told apart from every other test's.
    let (address, ours) = if postgres {
        let app = format!("jobguard_cancel_{}", std::process::id());
        (
            format!("{}&application_name={app}", ns.address()),
            format!("application_name = '{app}' AND state = 'active'"),
        )
    } else {
        (ns.address(), format!("db = '{n}' AND command = 'Query'"))
    };
    let sb = Sandbox::new(&format!(
        "[jobs.slow]\nschedule = \"*-*-* 02:00:00 UTC\"\nstore = {address:?}\n\
         command = [\"/bin/true\"]\n"
    ));
    let init = sb.run(&["store", "init"]);
    assert!(init.status.success(), "{init:?}");
    let (client, lock) = if postgres {
        (
            vec![
                "psql",
                "-h",
                "127.0.0.1",
                "-U",
                "postgres",
                "-d",
                "test",
                "-Xq",
            ],
            format!("BEGIN;\nLOCK TABLE {n}.jobguard_run IN ACCESS EXCLUSIVE MODE;\n"),
        )
    } else {
        (
            vec!["mariadb", "-uroot", "-h127.0.0.1"],
            format!("LOCK TABLES {n}.jobguard_run WRITE;\n"),
        )
    };
    let mut holder = std::process::Command::new(client[0])
        .args(&client[1..])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("a client of the server");
    use std::io::Write;
    let mut stdin = holder.stdin.take().unwrap();
    stdin
        .write_all(format!("{lock}SELECT {};\n", sleep_tagged(postgres, n)).as_bytes())
        .unwrap();
    let (list, id, text) = if postgres {
        ("pg_stat_activity", "pid", "query")
    } else {
        ("information_schema.processlist", "id", "info")
    };
    let holding = format!(
        "SELECT {id} FROM {list} WHERE {text} LIKE 'SELECT {}%'",
        sleep_tagged(postgres, n).replace('\'', "''")
    );
    let holder_id = common::wait_for(
        "the ledger table to be locked",
        Duration::from_secs(10),
        Duration::from_millis(50),
        || Ok(Some(sql_value(postgres, &holding)?).filter(|p| !p.is_empty())),
    )
    .expect("locked");
    let history = sb.run(&["history", "slow"]);
    let waiting = format!("SELECT count(*) FROM {list} WHERE {ours}");
    let left = common::wait_for(
        "the given-up statements to end",
        Duration::from_secs(2),
        Duration::from_millis(50),
        || Ok((sql_value(postgres, &waiting)? == "0").then_some(())),
    );
    let end = if postgres {
        format!("SELECT pg_terminate_backend({holder_id})")
    } else {
        format!("KILL {holder_id}")
    };
    let _ = sql_value(postgres, &end);
    drop(stdin);
    let _ = holder.wait();
    // Checked once the lock is gone: the namespace's removal would wait for it.
    let err = stderr(&history);
    assert!(
        !history.status.success(),
        "the read waited for the lock: {err}"
    );
    assert!(err.contains("no answer within 4 s"), "{err}");
    left.unwrap_or_else(|e| {
        panic!("a statement of the exited command still runs in the server 2 s later: {e}")
    });
}

/// A minute's sleep that names `ns`, so that its session can be found in the server's list.
fn sleep_tagged(postgres: bool, ns: &str) -> String {
    if postgres {
        format!("pg_sleep(60), '{ns}'")
    } else {
        format!("SLEEP(60), '{ns}'")
    }
}

/// One value from the test server.
fn sql_value(postgres: bool, sql: &str) -> Result<String, String> {
    if postgres {
        common::psql("test", sql)
    } else {
        common::mariadb(sql)
    }
}

#[test]
fn postgres_a_statement_given_up_on_does_not_run_on_in_the_server() {
    a_statement_given_up_on_does_not_run_on(server("postgres"), "store_contention::cancel");
}

#[test]
fn mysql_a_statement_given_up_on_does_not_run_on_in_the_server() {
    a_statement_given_up_on_does_not_run_on(server("mysql"), "store_contention::cancel");
}

/// Timestamps (seconds since the epoch, CLOCK_REALTIME) in `path`, one a line.
fn stamps(path: &std::path::Path) -> Vec<f64> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// Two hosts (two `jobguard run` processes with runtime directories of their own) share
/// one store; host A reaches it through a proxy. For each of `rounds` slots: A starts the
/// slot, then its proxy freezes (connections stay open, nothing moves: A's renewals hang
/// until the store call times out), and B tries the slot every 100 ms until it takes it
/// over; B's command runs until A's shim has given up. Ground truth outside the ledger:
/// each command writes a timestamp every 50 ms while it lives. A's last one must come
/// before B's first one.
fn cut_off_holder_is_dead_before_the_takeover(
    server: &'static Server,
    test: &str,
    settings: &str,
    command: &str,
    rounds: usize,
) {
    let Some(ns) = Namespace::new(server, test) else {
        return;
    };
    let proxy = Proxy::start(server.port);
    let truth = tempfile::tempdir().unwrap();
    let t = truth.path().display().to_string();
    let jobs = |host: &str, address: &str| {
        format!(
            "[jobs.fence]\nschedule = \"*-*-* 02:00:00 UTC\"\nstore = {address:?}\n{settings}\n\
             command = [\"/bin/sh\", \"-c\", {command:?}]\n\
             environment = {{ OUT = \"{t}/{host}\", STOP = \"{t}/stop\" }}\n"
        )
    };
    let a = Sandbox::new(&jobs("a", &(server.address)(&proxy.listen, &ns.name)));
    let b = Sandbox::new(&jobs("b", &ns.address()));
    let run = |sb: &Sandbox, slot: &str| {
        sb.cmd(&["run", "fence", "--slot", slot])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn jobguard run")
    };
    let file = |host: &str, slot: &str| truth.path().join(format!("{host}.{slot}"));
    for round in 0..rounds {
        let slot = format!("2026-11-{:02}T02:00:00Z", 10 + round);
        proxy.freeze(false);
        let host_a = run(&a, &slot);
        let up = support::wait_until(20, || stamps(&file("a", &slot)).len() >= 3);
        assert!(up, "round {round}: A's command started");
        proxy.freeze(true);
        let cut = std::time::Instant::now();
        // B fires again and again until it takes the slot over.
        let mut skips = 0;
        let host_b = loop {
            let mut host_b = run(&b, &slot);
            // B either takes the slot over (its command starts and runs until the stop
            // file) or skips (it ends): wait for one or the other, however long a loaded
            // machine takes to start B's command.
            let decided = support::wait_until(60, || {
                !stamps(&file("b", &slot)).is_empty() || host_b.try_wait().ok().flatten().is_some()
            });
            assert!(
                decided,
                "round {round}: B neither started its command nor ended"
            );
            if !stamps(&file("b", &slot)).is_empty() {
                break host_b;
            }
            let out = host_b.wait_with_output().unwrap();
            assert_eq!(out.status.code(), Some(0), "{out:?}");
            skips += 1;
            assert!(
                cut.elapsed() < Duration::from_secs(60),
                "round {round}: B never took the slot over"
            );
            std::thread::sleep(Duration::from_millis(100));
        };
        // A gives up on its own (its store stays frozen); then B's command is stopped.
        let out_a = host_a.wait_with_output().unwrap();
        std::thread::sleep(Duration::from_millis(500));
        std::fs::write(truth.path().join(format!("stop.{slot}")), "").unwrap();
        proxy.freeze(false);
        let out_b = host_b.wait_with_output().unwrap();
        let err_a = String::from_utf8_lossy(&out_a.stderr);
        let err_b = String::from_utf8_lossy(&out_b.stderr);
        let last_a = stamps(&file("a", &slot)).last().copied().unwrap_or(0.0);
        let first_b = stamps(&file("b", &slot)).first().copied().unwrap_or(0.0);
        assert!(
            last_a < first_b,
            "round {round}: A's command still ran {:.3} s after B's started ({skips} skips of B)\nA: {err_a}\nB: {err_b}",
            last_a - first_b
        );
        assert_eq!(
            out_a.status.code(),
            Some(75),
            "round {round}: A lost its lease: {err_a}"
        );
        assert_eq!(out_b.status.code(), Some(0), "round {round}: {err_b}");
    }
}

/// A well-behaved command, a lease of 3 s and no grace (`lease_ttl = "3s"`,
/// `kill_grace = "0s"`): a renewal hangs for the store's call time-out, longer than the
/// lease has left.
#[test]
fn redis_a_cut_off_holders_command_ends_before_its_lease_can_expire() {
    cut_off_holder_is_dead_before_the_takeover(
        server("redis"),
        "store_contention::fence_short",
        "lease_ttl = \"3s\"\nkill_grace = \"0s\"",
        "while [ ! -e \"$STOP.$JOBGUARD_SLOT\" ]; do date +%s.%N >> \"$OUT.$JOBGUARD_SLOT\"; sleep 0.05; done",
        3,
    );
}

/// A command that ignores SIGTERM, so only the SIGKILL after `kill_grace` ends it: the
/// SIGKILL too must come before the lease can expire.
#[test]
fn redis_a_cut_off_holders_command_that_ignores_sigterm_is_killed_before_its_lease_can_expire() {
    cut_off_holder_is_dead_before_the_takeover(
        server("redis"),
        "store_contention::fence_ignores_term",
        "lease_ttl = \"6s\"\nkill_grace = \"3s\"",
        "trap '' TERM; while [ ! -e \"$STOP.$JOBGUARD_SLOT\" ]; do date +%s.%N >> \"$OUT.$JOBGUARD_SLOT\"; sleep 0.05; done",
        3,
    );
}

/// The same over PostgreSQL, whose calls time out in the client library.
#[test]
fn postgres_a_cut_off_holders_command_ends_before_its_lease_can_expire() {
    cut_off_holder_is_dead_before_the_takeover(
        server("postgres"),
        "store_contention::fence_short_pg",
        "lease_ttl = \"3s\"\nkill_grace = \"0s\"",
        "while [ ! -e \"$STOP.$JOBGUARD_SLOT\" ]; do date +%s.%N >> \"$OUT.$JOBGUARD_SLOT\"; sleep 0.05; done",
        2,
    );
}

/// The store is cut off (a frozen proxy) just as the command ends, for longer than
/// `store_wait`: the run exits 69 with its success kept on this host; once the store is
/// back, `jobguard recover` (first slot) or the next run (second slot) records it, and the
/// slot never runs again. Ground truth: one line per execution in a file of the test's.
/// Job `cut` on `server` behind a proxy the test can freeze, with `store_wait`: its
/// command appends the slot to `out`, and the first execution of each slot then waits for
/// the file `out.go` (and removes it).
fn cut_off_job(
    server: &'static Server,
    test: &str,
    store_wait: &str,
) -> Option<(Namespace, Proxy, Sandbox)> {
    let ns = Namespace::new(server, test)?;
    let proxy = Proxy::start(server.port);
    let address = (server.address)(&proxy.listen, &ns.name);
    let sb = Sandbox::new(&format!(
        "[jobs.cut]\nschedule = \"*-*-* 02:00:00 UTC\"\nstore = {address:?}\n\
         lease_ttl = \"30s\"\nstore_wait = \"{store_wait}\"\n\
         environment = {{ OUT = \"@DIR@/out\" }}\n\
         command = [\"/bin/sh\", \"-c\", \"echo $JOBGUARD_SLOT >> $OUT; \
         [ -e $OUT.$JOBGUARD_SLOT ] && exit 0; touch $OUT.$JOBGUARD_SLOT; \
         while [ ! -e $OUT.go ]; do sleep 0.05; done; rm $OUT.go\"]\n"
    ));
    Some((ns, proxy, sb))
}

/// `jobguard run cut --slot SLOT` started, once its command runs (the `n`th line of
/// `out` is there).
fn start_cut(sb: &Sandbox, slot: &str, n: usize) -> Child {
    let shim = sb
        .cmd(&["run", "cut", "--slot", slot])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(
        wait_until(20, || sb.lines("out") > n),
        "the command started"
    );
    shim
}

/// `next` (a recover pass or a run) recorded the kept outcome of `slot`; a run of the
/// slot then skips it as done, and the slot has one record, succeeded.
fn recorded_late_once(sb: &Sandbox, next: &std::process::Output, slot: &str) {
    assert!(next.status.success(), "{}", stderr(next));
    assert!(stderr(next).contains("recorded late"), "{}", stderr(next));
    let again = sb.run(&["run", "cut", "--slot", slot]);
    assert!(
        stderr(&again).contains("already succeeded"),
        "{}",
        stderr(&again)
    );
    assert!(sb.run(&["recover"]).status.success());
    let h = sb.history("cut");
    let this: Vec<_> = h.iter().filter(|r| r["slot"] == slot).collect();
    assert_eq!(this.len(), 1, "{h:?}");
    assert_eq!(this[0]["outcome"], "succeeded", "{h:?}");
}

fn outcome_kept_while_the_store_is_cut_off(server: &'static Server, test: &str) {
    let Some((_ns, proxy, sb)) = cut_off_job(server, test, "2s") else {
        return;
    };
    let slots = ["2026-11-27T02:00:00Z", "2026-11-28T02:00:00Z"];
    for (n, slot) in slots.iter().enumerate() {
        let shim = start_cut(&sb, slot, n);
        proxy.freeze(true);
        let go = jiff::Timestamp::now();
        std::fs::write(sb.file("out.go"), "").unwrap();
        let out = shim.wait_with_output().unwrap();
        let exited = jiff::Timestamp::now();
        // The finish the shim sent never reaches the server (dropped with the connection).
        proxy.cut();
        proxy.freeze(false);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(69), "{err}");
        assert!(err.contains("NOT recorded"), "{err}");
        assert_eq!(sb.history("cut")[0]["outcome"], "running");
        // Recorded a while later; the record keeps the command's own end.
        std::thread::sleep(Duration::from_secs(3));
        let next = if n == 0 {
            sb.run(&["recover"])
        } else {
            sb.run(&["run", "cut", "--slot", slot])
        };
        recorded_late_once(&sb, &next, slot);
        let h = sb.history("cut");
        let row = h
            .iter()
            .find(|r| r["slot"] == *slot)
            .expect("the slot's record");
        let ended: jiff::Timestamp = row["finished_at"]
            .as_str()
            .and_then(|t| t.parse().ok())
            .unwrap_or_else(|| panic!("finished_at of {row}"));
        assert!(
            go <= ended && ended <= exited,
            "finished_at {ended} is the command's end (between {go} and {exited}), not the late write's time"
        );
    }
    assert_eq!(
        sb.read("out").lines().collect::<Vec<_>>(),
        slots,
        "each slot ran once"
    );
}

/// A shim that keeps an outcome (the store was cut off as the command ended) and goes on
/// to its next catch-up slot once the store answers again records the kept outcome
/// before it claims that slot. Until it does, no recovery pass can (the shim that kept it
/// is alive), and after the 90 s grace another host's pass would mark the attempt cut
/// off and the slot would run again, as a soak saw with a catch-up backlog.
fn kept_outcome_is_recorded_before_the_next_catch_up_slot(server: &'static Server, test: &str) {
    let Some(ns) = Namespace::new(server, test) else {
        return;
    };
    let proxy = Proxy::start(server.port);
    let address = (server.address)(&proxy.listen, &ns.name);
    let sb = Sandbox::new(&format!(
        "[jobs.cut]\nschedule = \"*:*:0/2\"\ncatch_up = \"all\"\nstore = {address:?}\n\
         lease_ttl = \"6s\"\nkill_grace = \"1s\"\nstore_wait = \"60s\"\n\
         environment = {{ OUT = \"@DIR@/out\" }}\n\
         command = [\"/bin/sh\", \"-c\", \"echo $JOBGUARD_SLOT >> $OUT; \
         if [ -e $OUT.hold ]; then while [ ! -e $OUT.go ]; do sleep 0.05; done; rm $OUT.go; fi\"]\n"
    ));
    // History: the current slot, then a few elapses pass unserved.
    let first = sb.run(&["run", "cut"]);
    assert!(first.status.success(), "{}", stderr(&first));
    std::fs::write(sb.file("out.hold"), "").unwrap();
    std::thread::sleep(Duration::from_secs(5));
    let shim = sb
        .cmd(&["run", "cut"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(
        wait_until(20, || sb.lines("out") >= 2),
        "the first catch-up slot started"
    );
    let kept_slot = sb.read("out").lines().nth(1).unwrap().to_string();
    // Its command ends while the store is cut off: the outcome is kept.
    proxy.freeze(true);
    std::fs::write(sb.file("out.go"), "").unwrap();
    // Past the finish's call and its retry, and the settling call after them (each up
    // to 4 s): the shim then waits for the store to claim its next slot.
    std::thread::sleep(Duration::from_secs(14));
    proxy.cut();
    proxy.freeze(false);
    // The shim goes on with the next catch-up slot, whose command holds.
    assert!(
        wait_until(30, || sb.lines("out") >= 3),
        "the next catch-up slot started"
    );
    let h = sb.history("cut");
    let kept: Vec<_> = h
        .iter()
        .filter(|r| r["slot"] == kept_slot.as_str())
        .collect();
    assert_eq!(kept.len(), 1, "{h:#?}");
    assert_eq!(
        kept[0]["outcome"], "succeeded",
        "the kept success is recorded before the next slot is claimed: {h:#?}"
    );
    std::fs::remove_file(sb.file("out.hold")).unwrap();
    std::fs::write(sb.file("out.go"), "").unwrap();
    let out = shim.wait_with_output().unwrap();
    let lines: Vec<String> = sb.read("out").lines().map(str::to_string).collect();
    let mut unique = lines.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(
        unique.len(),
        lines.len(),
        "each slot ran once: {lines:?}\n{}",
        stderr(&out)
    );
}

#[test]
fn redis_a_kept_outcome_is_recorded_before_the_next_catch_up_slot() {
    kept_outcome_is_recorded_before_the_next_catch_up_slot(
        server("redis"),
        "store_contention::kept_catch_up_redis",
    );
}

#[test]
fn postgres_an_outcome_kept_while_the_store_is_cut_off_is_recorded_later_not_rerun() {
    outcome_kept_while_the_store_is_cut_off(server("postgres"), "store_contention::kept_pg");
}

#[test]
fn mysql_an_outcome_kept_while_the_store_is_cut_off_is_recorded_later_not_rerun() {
    outcome_kept_while_the_store_is_cut_off(server("mysql"), "store_contention::kept_my");
}

#[test]
fn redis_an_outcome_kept_while_the_store_is_cut_off_is_recorded_later_not_rerun() {
    outcome_kept_while_the_store_is_cut_off(server("redis"), "store_contention::kept_redis");
}

/// Issue 9: the store stops answering (a frozen proxy) just as the command ends, and the
/// host loses power while the shim still waits for its first outcome write: `/run` (the
/// runtime copy of the outcome) is gone with it. The outcome must already be kept in the
/// state directory, so that once the host and the store are back, `jobguard recover`
/// records it and the slot never runs again. It used to be kept there only once the first
/// write had failed, which a store that does not answer makes wait for its time-out.
fn outcome_kept_durably_while_the_first_write_hangs(server: &'static Server, test: &str) {
    let Some((_ns, proxy, sb)) = cut_off_job(server, test, "60s") else {
        return;
    };
    let slot = "2026-11-27T02:00:00Z";
    let mut shim = start_cut(&sb, slot, 0);
    proxy.freeze(true);
    std::fs::write(sb.file("out.go"), "").unwrap();
    assert!(
        wait_until(20, || !sb.file("out.go").exists()),
        "the command ended"
    );
    // The power cut, a few seconds after the command ended: the shim dies and /run with it.
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        shim.try_wait().unwrap().is_none(),
        "the shim still waits for the store"
    );
    shim.kill().unwrap();
    let _ = shim.wait();
    std::fs::remove_dir_all(sb.file("run")).unwrap();
    proxy.cut();
    proxy.freeze(false);
    let rec = sb.run(&["recover"]);
    recorded_late_once(&sb, &rec, slot);
    assert_eq!(sb.lines("out"), 1, "the slot ran once");
}

/// A server that accepts the connection and never answers (a frozen proxy) is reported
/// with the deadline that ran out: connecting's (3 s), not a call's (4 s).
#[test]
fn postgres_a_connection_that_never_answers_names_the_connect_deadline() {
    let Some(ns) = Namespace::new(server("postgres"), "store_contention::connect_deadline") else {
        return;
    };
    let proxy = Proxy::start(server("postgres").port);
    proxy.freeze(true);
    let address = (server("postgres").address)(&proxy.listen, &ns.name);
    let sb = Sandbox::new(&format!(
        "[jobs.silent]\nschedule = \"*-*-* 02:00:00 UTC\"\nstore = {address:?}\n\
         command = [\"/bin/true\"]\n"
    ));
    let init = sb.run(&["store", "init"]);
    assert!(!init.status.success(), "{init:?}");
    let err = stderr(&init);
    assert!(err.contains("could not connect within 3 s"), "{err}");
    assert!(!err.contains("within 4 s"), "{err}");
    proxy.freeze(false);
}

#[test]
fn postgres_a_power_cut_while_the_first_outcome_write_hangs_loses_no_outcome() {
    outcome_kept_durably_while_the_first_write_hangs(
        server("postgres"),
        "store_contention::durable_pg",
    );
}

#[test]
fn redis_a_power_cut_while_the_first_outcome_write_hangs_loses_no_outcome() {
    outcome_kept_durably_while_the_first_write_hangs(
        server("redis"),
        "store_contention::durable_redis",
    );
}

/// Issue 9 (found by the hour-long soak): host A's command ends just as its store stops
/// answering, and A's lease lapses while A keeps the outcome and tries to record it. Host
/// B, another machine (its own `/etc/machine-id`), fires the same slot again and again
/// meanwhile: it must leave the slot to A, whose outcome may be a success, rather than run
/// it a second time. Once the store answers A again, A's recovery pass records the
/// outcome, and B finds the slot done. Ground truth: the command's own line per execution.
fn a_lapsed_holder_cut_off_with_its_outcome_keeps_its_slot(server: &'static Server, test: &str) {
    let Some(ns) = Namespace::new(server, test) else {
        return;
    };
    let proxy = Proxy::start(server.port);
    let truth = tempfile::tempdir().unwrap();
    let out = truth.path().join("out");
    let jobs = |address: &str| {
        format!(
            "[jobs.cut]\nschedule = \"*-*-* 02:00:00 UTC\"\nstore = {address:?}\n\
             lease_ttl = \"3s\"\nkill_grace = \"0s\"\nstore_wait = \"60s\"\n\
             environment = {{ OUT = \"{}\" }}\n\
             command = [\"/bin/sh\", \"-c\", \"echo $JOBGUARD_SLOT >> $OUT; \
             while [ ! -e $OUT.go ]; do sleep 0.05; done\"]\n",
            out.display()
        )
    };
    let a = Sandbox::new(&jobs(&(server.address)(&proxy.listen, &ns.name)));
    let b = Sandbox::new(&jobs(&ns.address()));
    let slot = "2026-11-27T02:00:00Z";
    let lines = || {
        std::fs::read_to_string(&out)
            .unwrap_or_default()
            .lines()
            .count()
    };
    let mut shim = a
        .cmd(&["run", "cut", "--slot", slot])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    if !wait_until(20, || lines() == 1) {
        let _ = shim.kill();
        panic!(
            "A's command did not start: {}",
            stderr(&shim.wait_with_output().unwrap())
        );
    }
    proxy.freeze(true);
    std::fs::write(truth.path().join("out.go"), "").unwrap();
    let gave_up = shim.wait_with_output().unwrap();
    assert_eq!(gave_up.status.code(), Some(69), "{}", stderr(&gave_up));
    // A has given up at its lease's end; B fires the slot for several seconds past it.
    let b_machine = "0123456789abcdef0123456789abcdef";
    let until = std::time::Instant::now() + Duration::from_secs(8);
    let mut tries = Vec::new();
    while std::time::Instant::now() < until {
        let fired = b
            .cmd_on_machine(b_machine, &["run", "cut", "--slot", slot])
            .output()
            .unwrap();
        assert_eq!(fired.status.code(), Some(0), "{}", stderr(&fired));
        tries.push(stderr(&fired));
        assert_eq!(
            lines(),
            1,
            "B ran the slot while A held its outcome:\n{}",
            tries.join("\n")
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    assert!(
        tries
            .last()
            .is_some_and(|t| t.contains("may still hold its outcome")),
        "{tries:?}"
    );
    proxy.cut();
    proxy.freeze(false);
    let rec = a.run(&["recover"]);
    assert!(rec.status.success(), "{}", stderr(&rec));
    assert!(stderr(&rec).contains("recorded late"), "{}", stderr(&rec));
    let again = b
        .cmd_on_machine(b_machine, &["run", "cut", "--slot", slot])
        .output()
        .unwrap();
    assert!(
        stderr(&again).contains("already succeeded"),
        "{}",
        stderr(&again)
    );
    assert_eq!(lines(), 1, "the slot ran once");
}

#[test]
fn postgres_a_lapsed_holder_cut_off_with_its_outcome_keeps_its_slot() {
    a_lapsed_holder_cut_off_with_its_outcome_keeps_its_slot(
        server("postgres"),
        "store_contention::lapsed_pg",
    );
}

#[test]
fn mysql_a_lapsed_holder_cut_off_with_its_outcome_keeps_its_slot() {
    a_lapsed_holder_cut_off_with_its_outcome_keeps_its_slot(
        server("mysql"),
        "store_contention::lapsed_my",
    );
}

/// Redis's `alive` key, which refuses a write held past the lease's expiry, never
/// outlives the lease: at a grant and at a renewal it expires at the last millisecond
/// before the lease's `expire_at` (Redis keeps a key through its expiry millisecond), and
/// a release deletes it.
#[test]
fn redis_the_alive_key_never_outlives_its_lease() {
    use common::conformance::{claimed, request};
    use jobguard::guard::ledger::Outcome;
    let Some(ns) = Namespace::new(server("redis"), "store_contention::alive") else {
        return;
    };
    let mut s = jobguard::store::open(&ns.address()).expect("open the store");
    let alive = format!("{}:alive:sync", ns.name);
    let expiry_ms = || -> i64 {
        common::remote::redis_cli(&["PEXPIRETIME", &alive])
            .trim()
            .parse()
            .expect("PEXPIRETIME")
    };
    let kept_until = |lease_expiry: i64, what: &str| {
        let ms = expiry_ms();
        // Alive through millisecond `ms`, that is until µs (ms + 1) * 1000.
        assert!(
            (ms + 1) * 1000 <= lease_expiry && (ms + 2) * 1000 > lease_expiry,
            "{what}: the alive key expires at ms {ms}, the lease at µs {lease_expiry}"
        );
    };
    let (lease, run) = claimed(
        &mut *s,
        &request("sync", common::conformance::S1, 1, 1, false),
    );
    kept_until(lease.expire_at, "grant");
    let renewed = s
        .renew(&lease, 7, Duration::from_secs(300))
        .expect("renew")
        .expect("renewed");
    kept_until(renewed, "renewal");
    let lease = jobguard::guard::lease::Lease {
        expire_at: renewed,
        renewal: 7,
        ..lease
    };
    let finish = common::conformance::finish(Outcome::Succeeded);
    assert!(
        s.finish(&lease, &run.run_id, &finish)
            .expect("finish")
            .released
    );
    assert_eq!(expiry_ms(), -2, "a release deletes the alive key");
}

#[test]
fn redis_a_lapsed_holder_cut_off_with_its_outcome_keeps_its_slot() {
    a_lapsed_holder_cut_off_with_its_outcome_keeps_its_slot(
        server("redis"),
        "store_contention::lapsed_redis",
    );
}

/// Found by the hour-long soak: a job removed from the job list while its last run's
/// outcome waited on this host for the store (the store stopped as the command ended).
/// `jobguard recover` marked the run's `running` record interrupted and held, as for a
/// run cut off, though the command had succeeded and its outcome was kept here: the kept
/// outcome must be recorded first, as for a job still in the list.
fn a_removed_jobs_kept_outcome_is_recorded(server: &'static Server, test: &str) {
    let Some(ns) = Namespace::new(server, test) else {
        return;
    };
    let proxy = Proxy::start(server.port);
    let address = (server.address)(&proxy.listen, &ns.name);
    let keep = format!(
        "[jobs.keep]\nschedule = \"*-*-* 03:00:00 UTC\"\nstore = {address:?}\ncommand = [\"/bin/true\"]\n"
    );
    let sb = Sandbox::new(&format!(
        "[jobs.cut]\nschedule = \"*-*-* 02:00:00 UTC\"\nstore = {address:?}\n\
         lease_ttl = \"30s\"\nstore_wait = \"2s\"\n\
         environment = {{ OUT = \"@DIR@/out\" }}\n\
         command = [\"/bin/sh\", \"-c\", \"echo $JOBGUARD_SLOT >> $OUT; \
         while [ ! -e $OUT.go ]; do sleep 0.05; done\"]\n\n{keep}"
    ));
    let slot = "2026-11-27T02:00:00Z";
    let shim = start_cut(&sb, slot, 0);
    proxy.freeze(true);
    std::fs::write(sb.file("out.go"), "").unwrap();
    let out = shim.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(69), "{}", stderr(&out));
    proxy.cut();
    proxy.freeze(false);
    // The job is removed from the job list; the other job keeps the store in it.
    std::fs::write(
        sb.file("jobs.toml"),
        format!("[defaults]\nstore = \"sqlite://state/jobguard.db\"\n\n{keep}"),
    )
    .unwrap();
    // The job list the generator reads (JOBGUARD_CONFIG, not --config): only against it
    // does recover judge jobs removed.
    let rec = std::process::Command::new(env!("CARGO_BIN_EXE_jobguard"))
        .arg("recover")
        .env("JOBGUARD_CONFIG", sb.file("jobs.toml"))
        .env("JOBGUARD_RUNTIME_DIR", sb.file("run"))
        .env("JOBGUARD_STATE_DIR", sb.file("state-dir"))
        .env_remove("INVOCATION_ID")
        .env_remove("NOTIFY_SOCKET")
        .env_remove("JOURNAL_STREAM")
        .output()
        .unwrap();
    assert!(rec.status.success(), "{}", stderr(&rec));
    let h = sb.history("cut");
    assert_eq!(h.len(), 1, "{h:?}");
    assert_eq!(
        h[0]["outcome"],
        "succeeded",
        "{h:?}\n{}\n{}",
        stderr(&rec),
        support::stdout(&rec)
    );
    assert!(h[0]["resolution"].is_null(), "{h:?}");
    assert_eq!(sb.lines("out"), 1, "the slot ran once");
}

#[test]
fn redis_a_removed_jobs_kept_outcome_is_recorded() {
    a_removed_jobs_kept_outcome_is_recorded(server("redis"), "store_contention::removed_redis");
}

#[test]
fn postgres_a_removed_jobs_kept_outcome_is_recorded() {
    a_removed_jobs_kept_outcome_is_recorded(server("postgres"), "store_contention::removed_pg");
}

/// A mixed fleet in a rolling upgrade: hosts of schema 3 claim as their jobguard does,
/// by calling the schema's `jobguard_claim` (PL/pgSQL, or MySQL's procedure; schema 5
/// dropped both, and such a host then reads the version and refuses, see
/// [`schema_3_host`]), or on Redis by sending schema 3's claim script; hosts of this
/// version decide with the rules in the client.
/// Four old and four new hosts race for each slot, all released at one instant (the old
/// ones sleep in the server until it, the new ones in the test), round after round: every
/// old host is refused ("schema version 5 is newer than this jobguard knows (3)"), never
/// granted, and exactly one new host is granted each slot. `old_claim(sql_schema, at, slot, name)`
/// is the command line of an old host's claim, printing the answer's kind last.
fn mixed_fleet(
    server: &'static Server,
    test: &str,
    old_claim: fn(&str, i64, i64, &str, u32) -> Command,
) {
    use jobguard::guard::ledger::{NewRun, Slot};
    use jobguard::store::{Claim, ClaimRequest};
    use std::time::{SystemTime, UNIX_EPOCH};

    let Some(ns) = Namespace::new(server, test) else {
        return;
    };
    let unix_us = || {
        i64::try_from(
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap()
                .as_micros(),
        )
        .unwrap()
    };
    jobguard::store::open(&ns.address())
        .unwrap()
        .init()
        .unwrap();
    let (mut refused, mut new_wins) = (0, 0);
    for round in 0..24_i64 {
        // One reading of the clock: two could straddle a second under load and make this
        // round's slot older than the last one, which an in-order claim refuses (behind).
        let now = unix_us();
        let slot = now - now % 1_000_000 + round;
        // Far enough ahead for every racer to be connected and waiting.
        let at = unix_us() + 700_000;
        let old: Vec<_> = (0..4)
            .map(|i| {
                old_claim(&ns.name, at, slot, &format!("old-{round}-{i}"), i)
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .expect("psql")
            })
            .collect();
        let new: Vec<_> = (0..4u32)
            .map(|i| {
                let address = ns.address();
                std::thread::spawn(move || {
                    let mut store = jobguard::store::open(&address).unwrap();
                    store.init().unwrap();
                    let req = ClaimRequest {
                        queued_first: true,
                        in_order: true,
                        ..ClaimRequest::new(
                            NewRun {
                                run_id: format!("new-{round}-{i}"),
                                job: "race".into(),
                                slot: Slot {
                                    usec: slot,
                                    zone: "UTC".into(),
                                },
                                forced: false,
                                trigger: "timer".into(),
                                invocation_id: None,
                            },
                            jobguard::guard::lease::Holder {
                                host: format!("new-host-{i}"),
                                machine_id: format!("m-new-{i}"),
                                boot_id: format!("b-new-{i}"),
                                pid: 1,
                                pid_start: 1,
                            },
                            Duration::from_secs(300),
                        )
                    };
                    let wait = at - unix_us();
                    if wait > 0 {
                        std::thread::sleep(Duration::from_micros(wait.unsigned_abs()));
                    }
                    store.claim(&req).unwrap()
                })
            })
            .collect();
        let mut granted = Vec::new();
        for (i, child) in old.into_iter().enumerate() {
            let mut out = child.wait_with_output().unwrap();
            // A deadlock or lock wait timeout (MySQL 1213, 1205; PostgreSQL "deadlock
            // detected") is an error the previous jobguard answers as "store unavailable",
            // and its shim claims again with the same run id: so does this old host (at
            // once, not waiting for the common instant).
            for _ in 0..5 {
                let err = String::from_utf8_lossy(&out.stderr);
                let lock_error = ["1213", "1205", "deadlock detected"]
                    .iter()
                    .any(|e| err.contains(e));
                if out.status.success() || !lock_error {
                    break;
                }
                eprintln!("round {round}: old host {i} retries after: {}", err.trim());
                out = old_claim(&ns.name, 0, slot, &format!("old-{round}-{i}"), i as u32)
                    .output()
                    .expect("retry");
            }
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(
                !out.status.success()
                    && err.contains("schema version")
                    && err.contains("is newer than this jobguard knows"),
                "round {round}: old host {i} must be refused by name: {err} {}",
                String::from_utf8_lossy(&out.stdout)
            );
            refused += 1;
        }
        for (i, t) in new.into_iter().enumerate() {
            match t.join().unwrap() {
                Claim::Claimed { .. } => {
                    granted.push(format!("new host {i}"));
                    new_wins += 1;
                }
                Claim::Busy { .. } => {}
                other => panic!("new host {i}: {other:?}"),
            }
        }
        assert_eq!(granted.len(), 1, "round {round}: granted to {granted:?}");
        jobguard::store::open(&ns.address())
            .unwrap()
            .unlock("race")
            .unwrap();
    }
    assert_eq!(new_wins, 24);
    eprintln!(
        "mixed fleet: 24 slots, won by new hosts {new_wins}; old hosts refused {refused} times"
    );
}

/// The command line of a host of schema 3 on PostgreSQL or MySQL/MariaDB: `call` (a
/// shell command) calls the schema's claim function or procedure; where the store has
/// none any more (schema 5 dropped them), it reads the schema version (`version`, a shell
/// command) and refuses as that jobguard does (it takes a missing function or procedure
/// for an older schema, migrates under the schema lock, and refuses only a version newer
/// than 3). The refusal's words are this script's; what the test shows is that the call
/// finds nothing to grant with, and that the store's version is newer.
fn schema_3_host(call: &str, version: &str) -> Command {
    let script = format!(
        "f=$(mktemp); out=$({call} 2>\"$f\") && {{ echo \"$out\"; exit 0; }}; \
         err=$(cat \"$f\"); rm -f \"$f\"; \
         case \"$err\" in *'does not exist'*) ;; *) echo \"$err\" >&2; exit 2;; esac; \
         v=$({version}) || exit 2; \
         [ \"$v\" -gt 3 ] || {{ echo \"no function, and schema version $v\" >&2; exit 2; }}; \
         echo \"schema version $v is newer than this jobguard knows (3); upgrade jobguard\" >&2; \
         exit 1"
    );
    let mut cmd = Command::new("sh");
    cmd.args(["-c", &script]);
    cmd
}

#[test]
fn postgres_hosts_of_the_previous_schema_are_refused_and_never_granted() {
    mixed_fleet(
        server("postgres"),
        "contention::mixed_fleet",
        |ns, at, slot, run, i| {
            let psql = "psql -h 127.0.0.1 -d test -v ON_ERROR_STOP=1 -tAq";
            schema_3_host(
                &format!(
                    "{psql} -c \"SET search_path = {ns}; \
                     SELECT pg_sleep_until(to_timestamp({at} / 1000000.0)); \
                     SELECT o_kind FROM jobguard_claim(3, NULL, 'race', {slot}, 'UTC', '{run}', \
                       false, 'timer', NULL, 'old-host-{i}:1:1', 'old-host-{i}', 'm-old-{i}', \
                       'b-old-{i}', 1, 1, 300000000, NULL, NULL, true, true)\""
                ),
                &format!(
                    "{psql} -c \"SELECT value FROM {ns}.jobguard_meta \
                     WHERE key = 'schema_version'\""
                ),
            )
        },
    );
}

#[test]
fn mysql_hosts_of_the_previous_schema_are_refused_and_never_granted() {
    mixed_fleet(
        server("mysql"),
        "contention::mixed_fleet",
        |ns, at, slot, run, i| {
            let mariadb = format!("mariadb -uroot -h127.0.0.1 -N -B {ns}");
            schema_3_host(
                &format!(
                    "{mariadb} -e \"DO SLEEP(GREATEST(0, {at} / 1000000.0 - UNIX_TIMESTAMP(NOW(6)))); \
                     CALL jobguard_claim(3, NULL, 'race', {slot}, 'UTC', '{run}', 0, 'timer', \
                       NULL, 'old-host-{i}:1:1', 'old-host-{i}', 'm-old-{i}', 'b-old-{i}', 1, 1, \
                       300000000, NULL, NULL, 1, 1)\""
                ),
                &format!(
                    "{mariadb} -e \"SELECT value FROM jobguard_meta WHERE name = 'schema_version'\""
                ),
            )
        },
    );
}

#[test]
fn redis_hosts_of_the_previous_schema_are_refused_and_never_granted() {
    mixed_fleet(
        server("redis"),
        "contention::mixed_fleet",
        |ns, at, slot, run, i| {
            // The claim script of schema 3 as those hosts send it (EVAL), and their reading
            // of its "newer" answer.
            let script = concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/tests/fixtures/redis-schema-3-claim.lua"
            );
            let claim = format!(
                "d=$(( {at} - $(date +%s%6N) )); \
                 [ $d -gt 0 ] && sleep $(printf '%d.%06d' $((d / 1000000)) $((d % 1000000))); \
                 out=$(redis-cli EVAL \"$(cat {script})\" 0 '{ns}:' '' 3 '' race {slot} UTC {run} \
                   0 timer '' old-host-{i}:1:1 old-host-{i} m-old-{i} b-old-{i} 1 1 300000000 '' \
                   0 1 1 90000000) || exit 2; \
                 case \"$out\" in newer*) echo \"schema version $(echo \"$out\" | sed -n 2p) \
                   is newer than this jobguard knows (3)\" >&2; exit 1;; esac; echo \"$out\""
            );
            let mut cmd = Command::new("sh");
            cmd.args(["-c", &claim]);
            cmd
        },
    );
}

/// The store takes renewals but not the outcome (a person's transaction holds the run's
/// record locked) for longer than `store_wait`: the shim renews the lease meanwhile, each
/// renewal with a new generation, gives up and keeps the success (exit 69). The lock goes
/// while the lease still lives; the next `jobguard recover` records the kept success:
/// the kept copies name the generation of the last renewal, so the store does not take
/// them for a copy of the holder and the outcome is not dropped (it was, and the slot
/// then ran again once the lease expired). Ground truth: one line per execution.
#[test]
fn postgres_an_outcome_kept_while_the_lease_was_renewed_is_recorded_while_it_lives() {
    let server = server("postgres");
    let Some(ns) = Namespace::new(server, "store_contention::kept_renewed_pg") else {
        return;
    };
    let address = ns.address();
    // A renewal every 20 s; the shim gives up 25 s after the command ended, after one.
    let sb = Sandbox::new(&format!(
        "[jobs.cut]\nschedule = \"*-*-* 02:00:00 UTC\"\nstore = {address:?}\n\
         lease_ttl = \"60s\"\nstore_wait = \"25s\"\n\
         environment = {{ OUT = \"@DIR@/out\" }}\n\
         command = [\"/bin/sh\", \"-c\", \"echo $JOBGUARD_SLOT >> $OUT; \
         while [ ! -e $OUT.go ]; do sleep 0.05; done\"]\n"
    ));
    let slot = "2026-11-27T02:00:00Z";
    let shim = start_cut(&sb, slot, 0);
    let run_id = sb.history("cut")[0]["run_id"]
        .as_str()
        .expect("run id")
        .to_string();
    // Holds the record's row for 32 s: the finish waits and times out, renewals go on.
    let lock = Command::new("psql")
        .args([
            "-h",
            "127.0.0.1",
            "-d",
            "test",
            "-v",
            "ON_ERROR_STOP=1",
            "-qc",
        ])
        .arg(format!(
            "BEGIN; SELECT 1 FROM {}.jobguard_run WHERE run_id = '{run_id}' FOR UPDATE; \
             SELECT pg_sleep(32); COMMIT;",
            ns.name
        ))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("psql");
    common::wait_for(
        "the record's row to be locked",
        Duration::from_secs(10),
        Duration::from_millis(50),
        || {
            let n = common::psql(
                "test",
                &format!(
                    "SELECT count(*) FROM pg_stat_activity \
                     WHERE wait_event = 'PgSleep' AND query LIKE '%{run_id}%'"
                ),
            )?;
            Ok((n == "1").then_some(()))
        },
    )
    .expect("locked");
    std::fs::write(sb.file("out.go"), "").unwrap();
    let out = shim.wait_with_output().unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(69), "{err}");
    assert!(err.contains("NOT recorded"), "{err}");
    let lock = lock.wait_with_output().unwrap();
    assert!(lock.status.success(), "{}", stderr(&lock));
    // The lease lives on under the generation of the shim's last renewal.
    let live = common::psql(
        "test",
        &format!(
            "SELECT renewal <> 0 AND expire_at > \
               (extract(epoch FROM clock_timestamp()) * 1000000)::bigint \
             FROM {}.jobguard_lease WHERE job = 'cut'",
            ns.name
        ),
    )
    .expect("the lease row");
    assert_eq!(live, "t", "renewed and unexpired");
    let next = sb.run(&["recover"]);
    recorded_late_once(&sb, &next, slot);
}

/// How many long jobs [`more_long_jobs_than_connections`] starts at once, and how many
/// connections their store's user may hold.
const LONG_JOBS: usize = 12;
const USER_CONNECTIONS: usize = 4;

/// A user of the test server allowed [`USER_CONNECTIONS`] connections at once (a role's
/// `CONNECTION LIMIT` on PostgreSQL, `MAX_USER_CONNECTIONS` on MariaDB: one tenant of a
/// managed server), owning namespace `ns`; removed when dropped. The server refuses a
/// connection past the limit (SQLSTATE 53300; MariaDB error 1226).
struct LimitedUser {
    postgres: bool,
    name: String,
    ns: String,
}

impl LimitedUser {
    fn new(postgres: bool, ns: &str) -> LimitedUser {
        let name = format!("{ns}_u");
        let statements = if postgres {
            vec![
                format!(
                    "CREATE ROLE {name} LOGIN PASSWORD 'pw' CONNECTION LIMIT {USER_CONNECTIONS}"
                ),
                // `CREATE SCHEMA IF NOT EXISTS` needs the right even when the schema exists.
                format!("GRANT CREATE ON DATABASE test TO {name}"),
            ]
        } else {
            vec![
                format!(
                    "CREATE USER '{name}'@'%' IDENTIFIED BY 'pw' WITH MAX_USER_CONNECTIONS {USER_CONNECTIONS}"
                ),
                format!("GRANT ALL ON {ns}.* TO '{name}'@'%'"),
            ]
        };
        for s in statements {
            sql_value(postgres, &s).unwrap_or_else(|e| panic!("{s}: {e}"));
        }
        LimitedUser {
            postgres,
            name,
            ns: ns.to_string(),
        }
    }

    /// The store address of namespace `ns` as this user.
    fn address(&self, ns: &str) -> String {
        if self.postgres {
            format!(
                "postgres://{}:pw@127.0.0.1:5432/test?schema={ns}",
                self.name
            )
        } else {
            format!("mysql://{}:pw@127.0.0.1:3306/{ns}", self.name)
        }
    }
}

impl Drop for LimitedUser {
    fn drop(&mut self) {
        let statements = if self.postgres {
            vec![
                // The schema the role owns goes first (the namespace's own drop follows).
                format!("DROP SCHEMA IF EXISTS {} CASCADE", self.ns),
                format!("REVOKE CREATE ON DATABASE test FROM {}", self.name),
                format!("DROP ROLE IF EXISTS {}", self.name),
            ]
        } else {
            vec![format!("DROP USER IF EXISTS '{}'@'%'", self.name)]
        };
        for s in statements {
            let _ = sql_value(self.postgres, &s);
        }
    }
}

/// More long jobs fire at once than their store's user may hold connections
/// ([`LONG_JOBS`] against [`USER_CONNECTIONS`]). A running job's shim holds no connection
/// between its store calls (its renewals, every `lease_ttl`/3, connect again), so every
/// job starts within seconds of its firing, by its command's own clock, and each slot
/// succeeds once. Were a connection held for the whole run, the jobs past the limit would
/// start only once a running one had ended, 8 s later.
fn more_long_jobs_than_connections(server: &'static Server, test: &str) {
    let postgres = server.name == "postgres";
    let Some(ns) = Namespace::new(server, test) else {
        return;
    };
    let user = LimitedUser::new(postgres, &ns.name);
    long_jobs_start_on_time(&user.address(&ns.name));
}

/// [`LONG_JOBS`] jobs of 8 s, with `lease_ttl = "6s"` (a renewal every 1.5 s), on the
/// store at `address`, fire at once: each starts within 4 s of its firing, by its
/// command's own clock, and each slot succeeds once.
fn long_jobs_start_on_time(address: &str) {
    let out = tempfile::tempdir().unwrap();
    let jobs: String = (0..LONG_JOBS)
        .map(|i| {
            format!(
                "[jobs.long{i}]\nschedule = \"*-*-* 02:00:00 UTC\"\nstore = {:?}\nlease_ttl = \"6s\"\nkill_grace = \"2s\"\n\
                 command = [\"/bin/sh\", \"-c\", \"date +%s.%N > {}/long{i}; sleep 8\"]\n\n",
                address,
                out.path().display()
            )
        })
        .collect();
    let sb = Sandbox::new(&jobs);
    let init = sb.run(&["store", "init"]);
    assert!(init.status.success(), "{}", stderr(&init));
    let fired = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let children: Vec<Child> = (0..LONG_JOBS)
        .map(|i| {
            sb.cmd(&["run", &format!("long{i}")])
                .env("TRIGGER_TIMER_REALTIME_USEC", FIRED)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn jobguard run")
        })
        .collect();
    for (i, child) in children.into_iter().enumerate() {
        let done = child.wait_with_output().expect("wait");
        assert_eq!(done.status.code(), Some(0), "long{i}: {}", stderr(&done));
    }
    let mut late = Vec::new();
    for i in 0..LONG_JOBS {
        let started = stamps(&out.path().join(format!("long{i}")));
        assert_eq!(started.len(), 1, "long{i} ran once");
        let after = started[0] - fired;
        println!("long{i} started {after:.2} s after its firing");
        if after > 4.0 {
            late.push(format!("long{i}: {after:.2} s"));
        }
        let history = sb.history(&format!("long{i}"));
        assert_eq!(history.len(), 1, "long{i}: {history:#?}");
        assert_eq!(history[0]["outcome"], "succeeded");
    }
    assert!(
        late.is_empty(),
        "{LONG_JOBS} jobs, {USER_CONNECTIONS} connections: started late: {late:?}"
    );
}

#[test]
fn postgres_more_long_jobs_than_the_server_lets_a_user_connect_all_start_on_time() {
    more_long_jobs_than_connections(server("postgres"), "store_contention::connections");
}

#[test]
fn mysql_more_long_jobs_than_the_server_lets_a_user_connect_all_start_on_time() {
    more_long_jobs_than_connections(server("mysql"), "store_contention::connections");
}

/// The PostgreSQL store behind PgBouncer in transaction mode, two server connections per
/// database and user ([`common::tls::pgbouncer`]): no session state lasts past a
/// statement, and a client waits in the pooler's queue. 32 racers of one slot run it
/// once, and [`LONG_JOBS`] long jobs, whose renewals each go through the pooler, start on
/// time and succeed once. `schema=` cannot pass a pooler (it is a start-up option): the
/// job list's error says what to do instead.
#[test]
fn postgres_behind_pgbouncer_in_transaction_mode_runs_each_slot_once() {
    let test = "store_contention::pgbouncer";
    let Some(bouncer) = common::tls::pgbouncer(test) else {
        return;
    };
    let db = common::remote::namespace();
    let admin = |sql: &str| common::psql("postgres", sql).unwrap_or_else(|e| panic!("{sql}: {e}"));
    admin(&format!("CREATE DATABASE {db}"));
    struct Dropped(String);
    impl Drop for Dropped {
        fn drop(&mut self) {
            let _ = common::psql(
                "postgres",
                &format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.0),
            );
        }
    }
    let _db = Dropped(db.clone());
    let address = format!(
        "postgres://root@127.0.0.1:{}/{db}?sslmode=verify-full&sslrootcert={}",
        bouncer.port,
        bouncer.ca().display()
    );
    contend_at(&address);
    long_jobs_start_on_time(&address);

    let sb = Sandbox::new(&format!(
        "[jobs.s]\nschedule = \"hourly\"\ncommand = [\"/bin/true\"]\nstore = {:?}\n",
        format!("{address}&schema=s1")
    ));
    let out = sb.run(&["run", "s"]);
    assert_eq!(out.status.code(), Some(78), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("leave schema= out, and give the role the schema instead"),
        "{}",
        stderr(&out)
    );
}

//! The store conformance suite on the embedded SQLite store (real files in temporary
//! directories), plus what only SQLite has: file modes, pragmas, the schema in the file,
//! and real processes racing for one slot.

mod common;

use std::io::BufReader;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use jobguard::guard::clock::{ManualClock, SystemClock};
use jobguard::guard::lease::Holder;
use jobguard::store::sqlite::{SCHEMA_VERSION, SqliteStore};
use jobguard::store::{Claim, RunQuery, Store, StoreError};

use common::conformance::{Env, S1, S2, T0, claimed, request};
use common::helper;

/// A fresh SQLite file in its own temporary directory, with a manual clock.
struct SqliteEnv {
    _dir: tempfile::TempDir,
    path: PathBuf,
    clock: ManualClock,
}

fn sqlite_env() -> Box<dyn Env> {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("state").join("jobguard.db");
    Box::new(SqliteEnv {
        _dir: dir,
        path,
        clock: ManualClock::new(T0),
    })
}

impl Env for SqliteEnv {
    fn connect(&self) -> Result<Box<dyn Store>, StoreError> {
        jobguard::store::open_with_clock(
            &format!("sqlite://{}", self.path.display()),
            Arc::new(self.clock.clone()),
        )
    }
    fn advance(&self, usec: i64) {
        self.clock.advance(usec);
    }
    fn set_schema_version(&self, version: i64) {
        let conn = rusqlite::Connection::open(&self.path).expect("open with rusqlite");
        conn.pragma_update(None, "user_version", version)
            .expect("set user_version");
    }
    fn current_schema_version(&self) -> i64 {
        SCHEMA_VERSION
    }
    fn store_clock_is_host_clock(&self) -> bool {
        true
    }
    fn one_writer_at_a_time(&self) -> bool {
        true
    }
}

mod sqlite {
    use super::sqlite_env;
    crate::common::conformance::conformance_suite!(sqlite_env);
}

/// The shared stores (`common::remote::SERVERS`): the same suite on each real server (a
/// namespace per case), plus the cases every shared store has: outages at start and during
/// a run, the password masked, and (where the server's clock judges leases) that clock.
/// Then [`one_store_only!`] adds the cases of that store alone.
#[allow(unused_macros)]
macro_rules! remote_store {
    ($module:ident $judge:ident) => {
        mod $module {
            use crate::common::remote::{self, Server};

            fn server() -> &'static Server {
                remote::server(stringify!($module))
            }

            fn fresh(case: &str) -> Option<Box<dyn crate::common::conformance::Env>> {
                remote::env(server(), &format!("{}::{case}", stringify!($module)))
            }
            crate::common::conformance::conformance_suite!(optional fresh);

            #[test]
            fn store_down_at_start_is_unavailable() {
                remote::outage_at_start(server());
            }

            #[test]
            fn store_cut_off_during_a_run_is_unavailable_then_recovers() {
                remote::outage_during_run(server(), concat!(stringify!($module), "::outage"));
            }

            #[test]
            fn describe_masks_the_password() {
                let s = jobguard::store::open(&(server().login)("u:hunter2@127.0.0.1")).unwrap();
                assert!(!s.describe().contains("hunter2"), "{}", s.describe());
                assert!(s.describe().contains("u:***@127.0.0.1"), "{}", s.describe());
            }

            remote_store!(@judge $judge $module);
            one_store_only!($module);
        }
    };
    (@judge Server $module:ident) => {
        #[test]
        fn server_clock_judges_with_a_skewed_host_clock() {
            remote::server_clock_judges(server(), concat!(stringify!($module), "::server_clock"));
        }
    };
    (@judge Host $module:ident) => {};
}

/// The cases of one shared store alone, in its module of [`remote_store!`].
#[allow(unused_macros)]
macro_rules! one_store_only {
    (postgres) => {
        schema_1_cases!(postgres);
    };
    (mysql) => {
        schema_1_cases!(mysql);
    };
    (redis) => {
        schema_1_cases!(redis);
    };
    (zookeeper) => {
        /// A holder cut off from the ensemble for longer than the session time-out (at
        /// most 20 ticks: 20 s with the test server's 1 s tick) finds its session expired by the server once
        /// it is back: the store opens a new session and the renewal goes through, as
        /// nothing of the lease lives in a session. Quiet calls in between need no session
        /// either.
        #[test]
        fn a_session_the_server_expired_is_replaced() {
            use jobguard::store::Claim;
            use std::time::Duration;
            let Some(ns) = remote::Namespace::new(server(), "zookeeper::session_expired") else {
                return;
            };
            let proxy = remote::Proxy::start(server().port);
            let mut s =
                jobguard::store::open(&(server().address)(&proxy.listen, &ns.name)).unwrap();
            let mut req = crate::common::conformance::request(
                "sync",
                crate::common::conformance::T0,
                1,
                1,
                false,
            );
            req.ttl = Duration::from_secs(300);
            let lease = match s.claim(&req).unwrap() {
                Claim::Claimed { lease, .. } => lease,
                other => panic!("{other:?}"),
            };
            proxy.freeze(true);
            // Until the server expires the session, which closes its connection (at
            // most 20 ticks after the last ping reached it).
            crate::common::wait_for(
                "the server to expire the cut-off session",
                Duration::from_secs(90),
                Duration::from_millis(200),
                || Ok((proxy.closed_by_target() >= 1).then_some(())),
            )
            .expect("the session expires while cut off");
            proxy.freeze(false);
            let until = s.renew(&lease, 1, Duration::from_secs(300)).unwrap();
            assert!(until.is_some_and(|u| u > lease.expire_at), "{until:?}");
            let lease = jobguard::guard::lease::Lease {
                renewal: 1,
                ..lease
            };
            std::thread::sleep(Duration::from_secs(5));
            let until = s.renew(&lease, 2, Duration::from_secs(300)).unwrap();
            assert!(until.is_some(), "{until:?}");
        }

        /// With a user in the address, the session authenticates with the digest scheme
        /// and every node jobguard creates is that user's alone: the same user on another
        /// connection works with it, another user (or none) is refused, and the password
        /// is not shown.
        #[test]
        fn digest_auth_keeps_the_nodes_to_their_user() {
            use jobguard::store::{Claim, StoreError};
            let Some(ns) = remote::Namespace::new(server(), "zookeeper::digest") else {
                return;
            };
            let at = |userinfo: &str| format!("zookeeper://{userinfo}127.0.0.1:2181/{}", ns.name);
            let req = |id| {
                crate::common::conformance::request(
                    "sync",
                    crate::common::conformance::T0,
                    id,
                    id,
                    false,
                )
            };
            let mut owner = jobguard::store::open(&at("jobs:s%40cret@")).unwrap();
            assert!(matches!(
                owner.claim(&req(1)).unwrap(),
                Claim::Claimed { .. }
            ));
            let mut again = jobguard::store::open(&at("jobs:s%40cret@")).unwrap();
            assert!(matches!(again.claim(&req(2)).unwrap(), Claim::Busy { .. }));
            for userinfo in ["jobs:wrong@", "other:s%40cret@", ""] {
                let mut s = jobguard::store::open(&at(userinfo)).unwrap();
                let e = s.claim(&req(3)).unwrap_err();
                assert!(
                    matches!(e, StoreError::Unavailable { .. }),
                    "{userinfo}: {e}"
                );
                assert!(!e.to_string().contains("s@cret"), "{e}");
            }
            // Only the owner may remove the nodes: zkCli.sh reads its commands from stdin.
            let mut cli = std::process::Command::new("/usr/share/zookeeper/bin/zkCli.sh")
                .args(["-server", "127.0.0.1:2181"])
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .expect("zkCli.sh");
            if let Some(mut stdin) = cli.stdin.take() {
                use std::io::Write;
                let _ = writeln!(
                    stdin,
                    "addauth digest jobs:s@cret\ndeleteall /{}\nquit",
                    ns.name
                );
            }
            let _ = cli.wait();
        }
    };
    (etcd) => {
        /// etcd's leases, not a host's clock, decide whether a lease is held.
        #[test]
        fn the_etcd_lease_decides_not_the_hosts_clocks() {
            remote::etcd_lease_decides("etcd::lease_decides");
        }

        #[test]
        fn reads_outlive_a_compaction_of_the_keyspace() {
            remote::etcd_reads_outlive_compaction("etcd::compaction");
        }
    };
    ($other:ident) => {};
}

/// A store of schema 1 (PostgreSQL, MySQL/MariaDB and Redis had one) migrated by the
/// first claim, alone and with hosts starting together.
#[allow(unused_macros)]
macro_rules! schema_1_cases {
    ($module:ident) => {
        #[test]
        fn a_store_of_schema_1_is_migrated_by_the_first_claim() {
            remote::upgrade_from_schema_1(server(), concat!(stringify!($module), "::upgrade"));
        }

        #[test]
        fn hosts_starting_together_on_a_store_of_schema_1_all_claim() {
            remote::concurrent_upgrade_from_schema_1(
                server(),
                concat!(stringify!($module), "::concurrent_upgrade"),
            );
        }
    };
}

#[cfg(all(
    feature = "store-postgres",
    feature = "store-mysql",
    feature = "store-redis"
))]
common::remote::each_server!(remote_store);

#[cfg(all(
    feature = "store-postgres",
    feature = "store-mysql",
    feature = "store-redis"
))]
#[test]
fn postgres_success_is_unique_in_the_schema() {
    common::remote::success_is_unique_in_the_schema(
        common::remote::server("postgres"),
        "postgres::unique",
    );
}

#[cfg(all(
    feature = "store-postgres",
    feature = "store-mysql",
    feature = "store-redis"
))]
#[test]
fn mysql_success_is_unique_in_the_schema() {
    common::remote::success_is_unique_in_the_schema(
        common::remote::server("mysql"),
        "mysql::unique",
    );
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).expect("stat").permissions().mode() & 0o777
}

#[test]
fn creates_private_directory_and_file() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("var/lib/jobguard/jobguard.db");
    let mut s = SqliteStore::open(&db).unwrap();
    s.init().unwrap();
    // The umask may take more away, never add.
    for d in [db.parent().unwrap(), &dir.path().join("var/lib")] {
        assert_eq!(mode(d) & 0o077, 0, "{} is {:o}", d.display(), mode(d));
        assert_eq!(mode(d) & 0o700, 0o700);
    }
    assert_eq!(mode(&db), 0o600);
    claimed(&mut s, &request("j", S1, 1, 1, false));
    for side in ["jobguard.db-wal", "jobguard.db-shm"] {
        let p = db.parent().unwrap().join(side);
        assert_eq!(mode(&p) & 0o077, 0, "{side} is {:o}", mode(&p));
    }
}

#[test]
fn existing_directory_keeps_its_mode() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o751)).unwrap();
    SqliteStore::open(&dir.path().join("x.db")).unwrap();
    assert_eq!(mode(dir.path()), 0o751);
}

#[test]
fn file_is_wal_with_full_sync_and_named_tables() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("j.db");
    let mut s = SqliteStore::open(&db).unwrap();
    s.init().unwrap();
    assert_eq!(s.schema_version().unwrap(), SCHEMA_VERSION);
    let conn = rusqlite::Connection::open(&db).unwrap();
    let journal: String = conn
        .pragma_query_value(None, "journal_mode", |r| r.get(0))
        .unwrap();
    assert_eq!(journal, "wal");
    let mut names: Vec<String> = conn
        .prepare("SELECT name FROM sqlite_schema WHERE type IN ('table', 'index') AND name LIKE 'jobguard%' ORDER BY name")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    names.sort();
    assert_eq!(
        names,
        [
            "jobguard_lease",
            "jobguard_run",
            "jobguard_run_history",
            "jobguard_run_one_success",
            "jobguard_run_outcome",
            "jobguard_run_queued",
            "jobguard_run_running",
            "jobguard_run_slot",
        ]
    );
}

/// The read-speed index (`jobguard_run_outcome`) is outside the schema version: a store
/// made before it gets it at the next open, and its version does not change, so a
/// jobguard that does not know the index still opens the store.
#[test]
fn a_store_without_the_outcome_index_gets_it_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.db");
    SqliteStore::open(&path).unwrap().init().unwrap();
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute_batch("DROP INDEX jobguard_run_outcome")
        .unwrap();
    let has = |c: &rusqlite::Connection| -> i64 {
        c.query_row(
            "SELECT count(*) FROM sqlite_schema WHERE name = 'jobguard_run_outcome'",
            [],
            |r| r.get(0),
        )
        .unwrap()
    };
    assert_eq!(has(&conn), 0);
    let mut s = SqliteStore::open(&path).unwrap();
    s.init().unwrap();
    assert_eq!(has(&conn), 1);
    assert_eq!(s.schema_version().unwrap(), SCHEMA_VERSION);
}

/// PostgreSQL, as SQLite: a schema made before the read-speed index gets it at the next
/// `schema=` with capitals: the schema is made with its name as written, and the
/// connection's `search_path` names that same schema (unquoted, PostgreSQL would fold it
/// to lower case and find no tables), so the store works and keeps its tables there.
#[cfg(feature = "store-postgres")]
#[test]
fn postgres_a_schema_name_with_capitals_is_kept_as_written() {
    use common::conformance::{claimed, request};
    use common::remote::server;
    let srv = server("postgres");
    let Some(base) = common::remote::Namespace::new(srv, "postgres::capitals") else {
        return;
    };
    let name = format!("Cap_{}", base.name);
    srv.sql(&format!("DROP SCHEMA IF EXISTS \"{name}\" CASCADE"));
    let address = base.address().replace(&base.name, &name);
    let mut store = jobguard::store::open(&address).expect("open");
    let (lease, _) = claimed(
        &mut *store,
        &request("capitals", common::conformance::S1, 1, 1, false),
    );
    assert_eq!(
        store.lease("capitals").unwrap().map(|l| l.token),
        Some(lease.token)
    );
    drop(store);
    let tables = common::psql(
        "test",
        &format!("SELECT count(*) FROM pg_tables WHERE schemaname = '{name}' AND tablename = 'jobguard_run'"),
    )
    .unwrap();
    srv.sql(&format!("DROP SCHEMA IF EXISTS \"{name}\" CASCADE"));
    assert_eq!(
        tables.trim(),
        "1",
        "the tables are in the schema as written"
    );
}

/// open, with its version unchanged.
#[cfg(feature = "store-postgres")]
#[test]
fn postgres_a_store_without_the_outcome_index_gets_it_at_open() {
    use common::remote::{Namespace, open, server};
    let Some(ns) = Namespace::new(server("postgres"), "postgres::outcome_index") else {
        return;
    };
    let n = &ns.name;
    open(ns.server, &ns.address(), None)
        .unwrap()
        .init()
        .unwrap();
    let has = || {
        common::psql(
            "test",
            &format!(
                "SELECT count(*) FROM pg_indexes WHERE schemaname = '{n}' AND indexname = 'jobguard_run_outcome'"
            ),
        )
        .unwrap()
        .trim()
        .to_string()
    };
    assert_eq!(has(), "1", "a new schema has it");
    ns.server
        .sql(&format!("DROP INDEX {n}.jobguard_run_outcome"));
    assert_eq!(has(), "0");
    open(ns.server, &ns.address(), None)
        .unwrap()
        .init()
        .unwrap();
    assert_eq!(has(), "1", "the next open made it");
    let version = common::psql(
        "test",
        &format!("SELECT value FROM {n}.jobguard_meta WHERE key = 'schema_version'"),
    )
    .unwrap();
    assert_eq!(
        version.trim(),
        jobguard::store::postgres::SCHEMA_VERSION.to_string()
    );
}

#[test]
fn store_connection_uses_synchronous_full() {
    // PRAGMA synchronous is per connection: ask the store's own connection through a
    // statement that reads it back. 2 is FULL (https://sqlite.org/pragma.html#pragma_synchronous).
    let dir = tempfile::tempdir().unwrap();
    let s = SqliteStore::open(&dir.path().join("j.db")).unwrap();
    assert_eq!(s.synchronous_level().unwrap(), 2);
}

#[test]
fn second_success_for_a_slot_is_refused_by_the_index() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("j.db");
    let clock = ManualClock::new(T0);
    let mut s = SqliteStore::open_with(&db, Arc::new(clock), &Default::default()).unwrap();
    let (lease, _) = claimed(&mut s, &request("j", S1, 1, 1, false));
    s.finish(
        &lease,
        &common::conformance::rid(1),
        &jobguard::guard::ledger::Finish {
            outcome: jobguard::guard::ledger::Outcome::Succeeded,
            reason: None,
            exit_status: Some(0),
            report: Default::default(),
            resolution: None,
            ended_at: None,
        },
    )
    .unwrap();
    let conn = rusqlite::Connection::open(&db).unwrap();
    let copy =
        "INSERT INTO jobguard_run SELECT 'x' || run_id, job, slot_usec, slot_zone, attempt + 1,
        outcome, reason, exit_status, forced, trigger_kind, host, machine_id, boot_id, pid,
        pid_start, invocation_id, started_at, finished_at, fencing_token, report, resolution
        FROM jobguard_run";
    let err = conn.execute(copy, []).unwrap_err();
    assert_eq!(
        err.sqlite_error_code(),
        Some(rusqlite::ErrorCode::ConstraintViolation),
        "{err}"
    );
}

#[test]
fn addresses() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("a.db");
    let mut s = jobguard::store::open(&format!("sqlite://{}", db.display())).unwrap();
    assert_eq!(s.describe(), format!("sqlite://{}", db.display()));
    s.init().unwrap();
    assert!(db.exists());

    let mut m = jobguard::store::open("sqlite::memory:").unwrap();
    assert_eq!(m.describe(), "sqlite::memory:");
    assert!(matches!(
        m.claim(&request("j", S1, 1, 1, false)).unwrap(),
        Claim::Claimed { .. }
    ));

    for (address, needle) in [
        ("consul://h:8500", "unknown store kind \"consul\""),
        ("jobguard.db", "no store kind"),
    ] {
        match jobguard::store::open(address) {
            Err(e @ StoreError::Address { .. }) => {
                let msg = e.to_string();
                assert!(msg.contains(needle), "{msg}");
                assert!(msg.contains("sqlite:///PATH"), "{msg}");
                assert!(!msg.contains(":pw@"), "{msg}");
            }
            Err(e) => panic!("{address}: expected an address error, got {e}"),
            Ok(s) => panic!("{address}: opened {}", s.describe()),
        }
    }
}

#[test]
fn relative_path_is_relative_to_the_current_directory() {
    // The test binary's working directory is the package root; use a name inside target.
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let rel = dir
        .path()
        .strip_prefix(std::env::current_dir().unwrap())
        .expect("CARGO_TARGET_TMPDIR is below the package root")
        .join("rel.db");
    let mut s = jobguard::store::open(&format!("sqlite://{}", rel.display())).unwrap();
    s.init().unwrap();
    assert!(dir.path().join("rel.db").exists());
}

#[test]
fn unopenable_path_is_unavailable_and_named() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("plain-file");
    std::fs::write(&file, "x").unwrap();
    let db = file.join("sub/j.db");
    let err = SqliteStore::open(&db).unwrap_err();
    assert!(matches!(err, StoreError::Unavailable { .. }), "{err}");
    assert!(
        err.to_string().contains(&file.display().to_string()),
        "{err}"
    );
}

#[test]
fn not_a_database_is_invalid() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("j.db");
    std::fs::write(&db, vec![b'z'; 8192]).unwrap();
    let err = match SqliteStore::open(&db) {
        Err(e) => e,
        Ok(mut s) => s.init().unwrap_err(),
    };
    assert!(matches!(err, StoreError::Invalid { .. }), "{err}");
    assert!(err.to_string().contains(&db.display().to_string()), "{err}");
}

#[test]
fn busy_beyond_the_timeout_is_unavailable() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("j.db");
    SqliteStore::open(&db).unwrap().init().unwrap();
    let mut blocker = rusqlite::Connection::open(&db).unwrap();
    let tx = blocker
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .unwrap();
    let options = jobguard::store::sqlite::SqliteOptions {
        busy_timeout: Duration::from_millis(50),
        ..Default::default()
    };
    let mut s = SqliteStore::open_with(&db, Arc::new(SystemClock), &options).unwrap();
    let err = s.claim(&request("j", S1, 1, 1, false)).unwrap_err();
    assert!(matches!(err, StoreError::Unavailable { .. }), "{err}");
    drop(tx);
    assert!(matches!(
        s.claim(&request("j", S1, 1, 1, false)).unwrap(),
        Claim::Claimed { .. }
    ));
}

#[cfg(all(
    feature = "store-postgres",
    feature = "store-mysql",
    feature = "store-redis"
))]
#[test]
fn a_store_parameter_given_twice_is_refused() {
    // Which of two values would win is no one's guess to make: a downgrade hides there.
    for a in [
        "mysql://u@127.0.0.1/test?ssl_mode=VERIFY_IDENTITY&ssl-mode=DISABLED",
        "postgres://u@127.0.0.1/test?sslmode=verify-full&sslmode=disable",
        "rediss://127.0.0.1/0?ssl-ca=/a.pem&ssl_ca=/b.pem",
        "redis://127.0.0.1/0?prefix=a:&prefix=b:",
    ] {
        let err = jobguard::store::open(a)
            .err()
            .unwrap_or_else(|| panic!("{a} opened"));
        assert!(
            matches!(err, StoreError::Address { .. }) && err.to_string().contains("more than once"),
            "{a}: {err}"
        );
    }
}

#[cfg(all(
    feature = "store-postgres",
    feature = "store-mysql",
    feature = "store-redis"
))]
#[test]
fn a_mysql_database_that_does_not_exist_is_an_address_error_that_says_so() {
    if !common::go_on(
        "a_mysql_database_that_does_not_exist",
        common::remote::unreachable(common::remote::server("mysql")),
    ) {
        return;
    }
    let mut s = jobguard::store::open("mysql://root@127.0.0.1:3306/jg_no_such_database").unwrap();
    let err = s.claim(&request("j", S1, 1, 1, false)).unwrap_err();
    assert!(
        matches!(err, StoreError::Address { .. }) && err.to_string().contains("CREATE DATABASE"),
        "{err}"
    );
}

#[test]
fn a_renewal_waits_for_a_locked_file_at_most_a_sixth_of_the_lease() {
    // With the default 10 s busy timeout, a renewal behind another process's write lock
    // would outlast a 3 s lease: the shim could not stop its command in time.
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("j.db");
    let mut s = SqliteStore::open(&db).unwrap();
    let (lease, _) = claimed(&mut s, &request("j", S1, 1, 1, false));
    let ttl = Duration::from_secs(3);
    let mut blocker = rusqlite::Connection::open(&db).unwrap();
    let tx = blocker
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .unwrap();
    let asked = Instant::now();
    let err = s.renew(&lease, 1, ttl).unwrap_err();
    let waited = asked.elapsed();
    assert!(matches!(err, StoreError::Unavailable { .. }), "{err}");
    assert!(
        waited < ttl / 2,
        "the renewal waited {waited:?}, about as long as the lease lives"
    );
    drop(tx);
    assert!(s.renew(&lease, 1, ttl).unwrap().is_some());
    // Claims still wait the whole busy timeout (10 s by default): they hold no lease yet.
    let mut blocker = rusqlite::Connection::open(&db).unwrap();
    let tx = blocker
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .unwrap();
    let waiter = std::thread::spawn(move || {
        let asked = Instant::now();
        let answer = s.claim(&request("j", S2, 1, 2, false));
        (asked.elapsed(), answer.is_ok())
    });
    std::thread::sleep(Duration::from_secs(1));
    drop(tx);
    let (waited, ok) = waiter.join().unwrap();
    assert!(ok && waited >= Duration::from_secs(1), "{waited:?} {ok}");
}

/// Entry point of the helper processes (see `common::helper`); does nothing in a normal
/// test run.
#[test]
#[ignore = "helper process entry, started by other tests"]
fn helper_entry() {
    let Ok(role) = std::env::var(helper::ROLE_VAR) else {
        return;
    };
    match role.as_str() {
        "claim" => helper_claim(),
        other => panic!("unknown helper role {other}"),
    }
}

/// Waits for the start file, opens the store and claims the slot once.
fn helper_claim() {
    let db = std::env::var("DB").unwrap();
    let go = PathBuf::from(std::env::var("GO").unwrap());
    let slot: i64 = std::env::var("SLOT").unwrap().parse().unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !go.exists() {
        assert!(Instant::now() < deadline, "start file never appeared");
        std::thread::sleep(Duration::from_millis(1));
    }
    let pid = std::process::id();
    let mut store = jobguard::store::open(&format!("sqlite://{db}")).unwrap();
    let mut req = request("race", slot, 0, pid, false);
    req.holder = Holder {
        machine_id: "0".repeat(32),
        boot_id: "1".repeat(32),
        pid,
        pid_start: 1,
        host: "racer".into(),
    };
    req.ttl = Duration::from_secs(600);
    let answer = match store.claim(&req) {
        Ok(Claim::Claimed { lease, .. }) => format!("claimed {}", lease.token),
        Ok(Claim::Busy { lease, run }) => format!(
            "busy {} {}",
            lease.token,
            run.map(|r| r.run_id).unwrap_or_default()
        ),
        Ok(other) => format!("other {other:?}"),
        Err(e) => format!("error {e}"),
    };
    helper::report(&answer);
}

/// Starts `n` processes that all claim `slot` of one job in the store at `db` the moment
/// the start file appears; returns their answers.
fn race(db: &Path, slot: i64, n: usize) -> Vec<String> {
    let go = db.with_extension(format!("go{slot}"));
    let env = [
        ("DB", db.display().to_string()),
        ("GO", go.display().to_string()),
        ("SLOT", slot.to_string()),
    ];
    let mut children: Vec<_> = (0..n).map(|_| helper::spawn("claim", &env)).collect();
    let _guards: Vec<_> = children
        .iter()
        .map(|c| helper::KillOnDrop(i32::try_from(c.id()).unwrap()))
        .collect();
    std::fs::write(&go, "").unwrap();
    let mut answers = Vec::new();
    for child in &mut children {
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let answer = helper::next_report(&mut out).unwrap_or_else(|| "no answer".into());
        let status = helper::wait_or_kill(child, Duration::from_secs(120), "claim racer");
        assert!(status.success(), "racer failed: {status}, said {answer}");
        answers.push(answer);
    }
    answers
}

#[test]
fn processes_racing_for_a_slot_exactly_one_claims() {
    const N: usize = 16;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("race.db");

    // Round 1: a file that does not exist yet, so the racers also race to create the
    // schema and switch to WAL.
    let answers = race(&db, S1, N);
    let claimed: Vec<_> = answers
        .iter()
        .filter(|a| a.starts_with("claimed"))
        .collect();
    let busy = answers.iter().filter(|a| a.starts_with("busy")).count();
    assert_eq!(claimed.len(), 1, "answers: {answers:#?}");
    assert_eq!(busy, N - 1, "answers: {answers:#?}");
    assert_eq!(claimed[0].as_str(), "claimed 1");

    let mut s = SqliteStore::open(&db).unwrap();
    let runs = s
        .runs(&RunQuery {
            job: Some("race".into()),
            ..RunQuery::default()
        })
        .unwrap();
    assert_eq!(runs.len(), 1, "{runs:#?}");
    let winner = &runs[0].run_id;
    assert!(
        answers
            .iter()
            .filter(|a| a.starts_with("busy"))
            .all(|a| a == &format!("busy 1 {winner}")),
        "every loser names the winner's run: {answers:#?}"
    );

    // Round 2: the operator ends the lease; the racers meet an existing schema.
    assert!(s.unlock("race").unwrap().is_some());
    let answers = race(&db, S2, N);
    let claimed: Vec<_> = answers
        .iter()
        .filter(|a| a.starts_with("claimed"))
        .collect();
    assert_eq!(claimed.len(), 1, "answers: {answers:#?}");
    assert_eq!(claimed[0].as_str(), "claimed 2");
    assert_eq!(
        answers.iter().filter(|a| a.starts_with("busy 2 ")).count(),
        N - 1,
        "answers: {answers:#?}"
    );
}

/// `sslmode=require` encrypts (the server sees the store's connection as TLS) without
/// checking the certificate, as libpq does; `verify-full` checks it, so the server's
/// self-signed certificate is refused, as unavailable.
#[cfg(all(
    feature = "store-postgres",
    feature = "store-mysql",
    feature = "store-redis"
))]
#[test]
fn postgres_tls_require_encrypts_and_verify_full_checks_the_certificate() {
    use common::remote::{Namespace, server};
    let Some(ns) = Namespace::new(server("postgres"), "postgres::tls") else {
        return;
    };
    let on = std::process::Command::new("psql")
        .args(["-h", "127.0.0.1", "-d", "test", "-Atc", "SHOW ssl"])
        .output()
        .unwrap();
    if !common::go_on(
        "postgres::tls",
        (String::from_utf8_lossy(&on.stdout).trim() != "on")
            .then(|| "the PostgreSQL server has ssl = off".to_string()),
    ) {
        return;
    }
    let app = format!("jgtls{}", std::process::id());
    let mut s = jobguard::store::open(&format!(
        "{}&sslmode=require&application_name={app}",
        ns.address()
    ))
    .unwrap();
    claimed(&mut *s, &request("j", S1, 1, 1, false));
    let out = std::process::Command::new("psql")
        .args(["-h", "127.0.0.1", "-d", "test", "-Atc"])
        .arg(format!(
            "SELECT s.ssl FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) \
             WHERE a.application_name = '{app}'"
        ))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "t", "{out:?}");

    let mut v = jobguard::store::open(&format!("{}&sslmode=verify-full", ns.address())).unwrap();
    let err = v.claim(&request("j", S2, 2, 2, false)).unwrap_err();
    assert!(matches!(err, StoreError::Unavailable { .. }), "{err}");
    assert!(err.to_string().contains("certificate"), "{err}");
}

/// MySQL/MariaDB commit each DDL statement on its own: a migration cut short (tables made,
/// version not yet written) is completed by the next start instead of failing on what
/// exists.
#[cfg(all(
    feature = "store-postgres",
    feature = "store-mysql",
    feature = "store-redis"
))]
#[test]
fn mysql_migration_cut_short_is_completed() {
    use common::remote::{Namespace, server};
    let Some(ns) = Namespace::new(server("mysql"), "mysql::migration") else {
        return;
    };
    jobguard::store::open(&ns.address())
        .unwrap()
        .init()
        .unwrap();
    // A migration from nothing cut short after its tables, before its index, with a
    // procedure of an older schema not yet dropped and the lease row's `rev` not yet
    // added.
    server("mysql").sql(&format!(
        "DELETE FROM {n}.jobguard_meta; DROP INDEX jobguard_run_queued ON {n}.jobguard_run;
         CREATE PROCEDURE {n}.jobguard_unlock() BEGIN END;
         ALTER TABLE {n}.jobguard_lease DROP COLUMN rev",
        n = ns.name
    ));
    let mut s = jobguard::store::open(&ns.address()).unwrap();
    s.init().unwrap();
    claimed(&mut *s, &request("j", S1, 1, 1, false));
    assert!(s.unlock("j").unwrap().is_some());
    let routines = server("mysql").routines.unwrap();
    assert_eq!(server("mysql").sql(&routines(&ns.name)).trim(), "");
}

/// PostgreSQL: a claim whose write finds the job's lease row locked by another
/// transaction (here a session that holds `FOR UPDATE`, taken between the claim's read and
/// its write) does not write; it is granted once the lock is gone. Held for longer than a
/// call may take, the claim fails as unavailable and has written nothing. Locked again
/// and again with only a round trip between (as retention deletes a job's slots in
/// batches), the row is still granted within the batches: after a few short pauses the
/// grant queues for the lock rather than missing every gap.
#[test]
fn postgres_a_claim_that_finds_the_lease_row_locked_reads_again_until_it_is_free() {
    use common::conformance::{finish, rid};
    use common::remote::{Namespace, server};
    use jobguard::guard::ledger::Outcome;
    let Some(ns) = Namespace::new(server("postgres"), "postgres::locked_row") else {
        return;
    };
    let mut s = jobguard::store::open(&ns.address()).unwrap();
    let (l, _) = claimed(&mut *s, &request("sync", S1, 1, 1, false));
    s.finish(&l, &rid(1), &finish(Outcome::Succeeded)).unwrap();
    // Runs `hold` seconds of `FOR UPDATE` on the lease row from another session, and
    // returns once that session holds the lock.
    fn lock(n: String, hold: f64) -> std::thread::JoinHandle<String> {
        // Its statements come as one message: asleep, it holds the lock.
        let asleep = format!(
            "SELECT count(*) FROM pg_stat_activity
              WHERE wait_event = 'PgSleep' AND query LIKE '%pg_sleep({hold}) /* {n} */%'
                AND query NOT LIKE '%pg_stat_activity%'"
        );
        let holder = std::thread::spawn(move || {
            server("postgres").sql(&format!(
                "BEGIN; SELECT 1 FROM {n}.jobguard_lease WHERE job = 'sync' FOR UPDATE;
                 SELECT pg_sleep({hold}) /* {n} */; COMMIT;"
            ))
        });
        while server("postgres").sql(&asleep).trim() != "1" {
            assert!(!holder.is_finished(), "the locking session ended");
            std::thread::sleep(Duration::from_millis(20));
        }
        holder
    }
    let slot = |n: i64| S1 + n * 60_000_000;
    let holder = std::rc::Rc::new(std::cell::RefCell::new(None));
    let hold_in_commit = |hold: f64| {
        let (h, n) = (holder.clone(), ns.name.clone());
        jobguard::store::before_next_commit(Some(Box::new(move || {
            *h.borrow_mut() = Some(lock(n, hold));
        })));
    };

    hold_in_commit(1.5);
    let began = Instant::now();
    let claim = s.claim(&request("sync", slot(1), 2, 2, false));
    assert!(matches!(claim, Ok(Claim::Claimed { .. })), "{claim:?}");
    // Granted only once the other session let go of the row.
    assert!(
        began.elapsed() >= Duration::from_secs(1),
        "{:?}",
        began.elapsed()
    );
    holder
        .borrow_mut()
        .take()
        .expect("the hook ran")
        .join()
        .unwrap();
    let Ok(Claim::Claimed { lease, run, .. }) = claim else {
        unreachable!()
    };
    s.finish(&lease, &run.run_id, &finish(Outcome::Succeeded))
        .unwrap();

    hold_in_commit(7.0);
    let claim = s.claim(&request("sync", slot(2), 3, 3, false));
    jobguard::store::before_next_commit(None);
    assert!(
        matches!(&claim, Err(StoreError::Unavailable { detail, .. })
            if detail.contains("no answer within 4 s")),
        "{claim:?}"
    );
    holder
        .borrow_mut()
        .take()
        .expect("the hook ran")
        .join()
        .unwrap();
    let runs = s
        .runs(&RunQuery {
            job: Some("sync".into()),
            ..RunQuery::default()
        })
        .unwrap();
    assert_eq!(runs.len(), 2, "{runs:#?}");
    assert!(runs.iter().all(|r| r.slot.usec != slot(2)), "{runs:#?}");
    // Locked in 25 transactions of 0.2 s, each its own round trips.
    let n = &ns.name;
    let mut chain = std::process::Command::new("psql")
        .args(["-h", "127.0.0.1", "-d", "test", "-Xq"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("psql");
    let batch = format!(
        "BEGIN;\nSELECT 1 FROM {n}.jobguard_lease WHERE job = 'sync' FOR UPDATE;\n\
         SELECT pg_sleep(0.2) /* {n} chain */;\nCOMMIT;\n"
    );
    use std::io::Write;
    chain
        .stdin
        .take()
        .unwrap()
        .write_all(batch.repeat(25).as_bytes())
        .unwrap();
    let asleep = format!(
        "SELECT count(*) FROM pg_stat_activity
          WHERE wait_event = 'PgSleep' AND query LIKE '%pg_sleep(0.2) /* {n} chain */%'
            AND query NOT LIKE '%pg_stat_activity%'"
    );
    while server("postgres").sql(&asleep).trim() != "1" {
        std::thread::sleep(Duration::from_millis(20));
    }
    let claim = s.claim(&request("sync", slot(2), 4, 4, false));
    let chained = chain.wait().unwrap();
    assert!(chained.success(), "{chained:?}");
    assert!(matches!(claim, Ok(Claim::Claimed { .. })), "{claim:?}");
}

/// MySQL/MariaDB during a rolling upgrade: a jobguard of schema 5, which knows no `rev`,
/// resolves a slot `done` between a claim's read and its write. Its write locks the lease
/// row and changes only the record (these are its statements, as its
/// `Session::commit` sent them); the claim still finds the record changed, reads again and
/// refuses the slot, which is not run again.
#[test]
fn mysql_a_resolve_of_schema_5_between_a_claims_read_and_write_is_seen() {
    use common::conformance::{finish, rid};
    use common::remote::{Namespace, server};
    use jobguard::guard::ledger::{Outcome, Resolution};
    let Some(ns) = Namespace::new(server("mysql"), "mysql::old_resolve") else {
        return;
    };
    let mut s = jobguard::store::open(&ns.address()).unwrap();
    let (l, _) = claimed(&mut *s, &request("sync", S1, 1, 1, false));
    s.finish(&l, &rid(1), &finish(Outcome::Failed)).unwrap();
    assert_eq!(s.resolve("sync", S1, Resolution::Queued).unwrap(), 1);
    let (n, id) = (ns.name.clone(), rid(1));
    jobguard::store::before_next_commit(Some(Box::new(move || {
        server("mysql").sql(&format!(
            "USE {n}; SET TRANSACTION ISOLATION LEVEL READ COMMITTED; START TRANSACTION;
             SELECT holder FROM jobguard_lease WHERE job = 'sync' FOR UPDATE;
             UPDATE jobguard_run SET resolution = 'done'
              WHERE run_id = '{id}' AND outcome = 'failed';
             COMMIT;"
        ));
    })));
    let claim = s.claim(&request("sync", S1, 2, 2, false));
    jobguard::store::before_next_commit(None);
    assert!(matches!(claim, Ok(Claim::SlotDone { .. })), "{claim:?}");
    let runs = s
        .runs(&RunQuery {
            job: Some("sync".into()),
            ..RunQuery::default()
        })
        .unwrap();
    assert_eq!(runs.len(), 1, "{runs:#?}");
    assert_eq!(runs[0].resolution, Some(Resolution::Done), "{runs:#?}");
}

/// A deployment whose database administrator creates the schema (an `init` as the owner)
/// and gives the hosts' user only data rights (no CREATE): every host operation works as
/// that user, including the schedule declaration of every run.
#[cfg(all(
    feature = "store-postgres",
    feature = "store-mysql",
    feature = "store-redis"
))]
fn a_user_with_data_rights_only_runs_jobs(server: &'static common::remote::Server, test: &str) {
    use common::remote::Namespace;
    use jobguard::store::ScheduleDecl;
    let Some(ns) = Namespace::new(server, test) else {
        return;
    };
    let user = format!("{}_rt", ns.name);
    let decl = |host: &str, seen_at: i64| ScheduleDecl {
        job: "j".into(),
        fingerprint: "*-*-* 02:00:00 Europe/Berlin".into(),
        defined_at: 1,
        host: host.into(),
        seen_at,
        horizon: 86_400_000_000,
    };
    let mut owner = jobguard::store::open(&ns.address()).unwrap();
    owner.init().unwrap();
    let (address, grants, revoke) = match server.name {
        "postgres" => (
            format!("postgres://{user}@127.0.0.1:5432/test?schema={}", ns.name),
            format!(
                "CREATE ROLE {user} LOGIN; GRANT USAGE ON SCHEMA {n} TO {user};
                 GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {n} TO {user};
                 GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA {n} TO {user};
                 ALTER DEFAULT PRIVILEGES IN SCHEMA {n}
                   GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO {user}",
                n = ns.name
            ),
            format!("DROP OWNED BY {user}; DROP ROLE {user}"),
        ),
        "mysql" => (
            format!("mysql://{user}@127.0.0.1:3306/{}", ns.name),
            format!(
                "CREATE USER '{user}'@'localhost', '{user}'@'%';
                 GRANT SELECT, INSERT, UPDATE, DELETE ON {n}.* TO '{user}'@'localhost';
                 GRANT SELECT, INSERT, UPDATE, DELETE ON {n}.* TO '{user}'@'%'",
                n = ns.name
            ),
            format!("DROP USER '{user}'@'localhost', '{user}'@'%'"),
        ),
        other => panic!("no users on {other}"),
    };
    server.sql(&grants);
    let result = std::panic::catch_unwind(|| {
        let mut s = jobguard::store::open(&address).unwrap();
        s.init().expect("init as the data user");
        // The first declaration of a job, then another host's refresh of it (a quarter
        // of its horizon later: an update of the row).
        assert_eq!(
            s.declare_schedule(&decl("a", 10)).expect("declare"),
            decl("a", 10)
        );
        let later = 10 + 86_400_000_000 / 4 + 1;
        assert_eq!(
            s.declare_schedule(&decl("b", later))
                .expect("declare again"),
            decl("b", later)
        );
        let (lease, _) = claimed(&mut *s, &request("j", S1, 1, 1, false));
        assert!(
            s.renew(&lease, 1, std::time::Duration::from_secs(60))
                .unwrap()
                .is_some()
        );
        let lease = jobguard::guard::lease::Lease {
            renewal: 1,
            ..lease
        };
        let done = s
            .finish(
                &lease,
                &common::conformance::rid(1),
                &common::conformance::finish(jobguard::guard::ledger::Outcome::Succeeded),
            )
            .expect("finish");
        assert!(done.recorded);
        let (lease, _) = claimed(&mut *s, &request("j", S2, 1, 2, false));
        assert!(s.unlock("j").unwrap().is_some(), "{lease:?}");
        assert_eq!(
            s.runs(&jobguard::store::RunQuery {
                job: Some("j".into()),
                ..Default::default()
            })
            .unwrap()
            .len(),
            2
        );
    });
    server.sql(&revoke);
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
}

#[cfg(all(
    feature = "store-postgres",
    feature = "store-mysql",
    feature = "store-redis"
))]
#[test]
fn postgres_a_user_with_data_rights_only_runs_jobs() {
    a_user_with_data_rights_only_runs_jobs(
        common::remote::server("postgres"),
        "postgres::data_user",
    );
}

#[cfg(all(
    feature = "store-postgres",
    feature = "store-mysql",
    feature = "store-redis"
))]
#[test]
fn mysql_a_user_with_data_rights_only_runs_jobs() {
    a_user_with_data_rights_only_runs_jobs(common::remote::server("mysql"), "mysql::data_user");
}

/// Redis, upgrading while a host of schema 1 is still running a job: its run was claimed
/// before the migration, and its end is written by the finish script of schema 1, which
/// queues the slot without adding it to `queued:JOB` (schema 1 had no such index). The
/// claims of schema 2 must still find that slot.
#[cfg(feature = "store-redis")]
#[test]
fn redis_a_slot_queued_by_a_schema_1_finish_after_the_upgrade_is_run() {
    use common::remote::{Namespace, open, server};
    use jobguard::guard::clock::ManualClock;
    use jobguard::store::redis::SCHEMA_VERSION;
    let Some(ns) = Namespace::new(server("redis"), "redis::mixed_versions") else {
        return;
    };
    let clock = ManualClock::new(common::conformance::T0);
    let redis = |args: &[&str]| common::remote::redis_cli(args).trim().to_string();
    let n = &ns.name;
    let cut = S1 - 86_400_000_000;
    // A host of schema 1 claims slot `cut` (a store of schema 1: no slots:/queued: keys).
    let mut s = open(ns.server, &ns.address(), Some(&clock)).unwrap();
    let (_, run) = claimed(&mut *s, &request("sync", cut, 1, 1, false));
    drop(s);
    redis(&[
        "DEL",
        &format!("{n}:slots:sync"),
        &format!("{n}:queued:sync"),
    ]);
    redis(&["SET", &format!("{n}:schema"), "1"]);
    // A host of schema 2 migrates the store.
    let mut s = open(ns.server, &ns.address(), Some(&clock)).unwrap();
    s.init().unwrap();
    assert_eq!(
        redis(&["GET", &format!("{n}:schema")]),
        SCHEMA_VERSION.to_string()
    );
    // The first host's run is cut (its lease lost); its finish of schema 1 writes the
    // record only.
    let key = format!("{n}:run:{}", run.run_id);
    redis(&[
        "HSET",
        &key,
        "outcome",
        "lease_lost",
        "reason",
        "lease-lost",
        "resolution",
        "queued",
        "finished_at",
        &common::conformance::T0.to_string(),
    ]);
    clock.advance(common::conformance::TTL_US);
    let mut req = request("sync", S1, 2, 2, false);
    req.queued_first = true;
    req.in_order = true;
    let (_, r2) = claimed(&mut *s, &req);
    assert_eq!(
        (r2.slot.usec, r2.trigger.as_str()),
        (cut, "rerun"),
        "the slot queued by the finish of schema 1 comes first"
    );
}

/// A password written into an address without percent-encoding may hold `?` or `#`,
/// which end the user-info part of a URL: the address is then malformed, and neither
/// the error nor the store's description may show any of the password.
#[test]
fn a_password_with_a_question_mark_or_hash_is_masked_whole() {
    for secret in ["hun?ter2", "hun#ter2", "h?un#ter2", "hun?ter2/x"] {
        for address in [
            format!("postgres://u:{secret}@127.0.0.1/test"),
            format!("mysql://u:{secret}@127.0.0.1/test"),
            format!("redis://u:{secret}@127.0.0.1/0"),
            format!("rediss://:{secret}@127.0.0.1/0"),
        ] {
            let shown = match jobguard::store::open(&address) {
                Ok(s) => s.describe(),
                Err(e) => e.to_string(),
            };
            assert!(!shown.contains("ter2"), "{address}: {shown}");
            assert!(shown.contains("***"), "{address}: {shown}");
        }
    }
    // A password parameter is still masked when the user-info part has none.
    let shown = jobguard::store::address::mask("postgres://127.0.0.1/test?password=se@cret");
    assert!(!shown.contains("se@cret"), "{shown}");
    let shown = jobguard::store::address::mask("redis://127.0.0.1:6379?password=se@cret");
    assert!(!shown.contains("se@cret"), "{shown}");
    let shown = jobguard::store::address::mask("postgres://h/db?application_name=a@b");
    assert_eq!(shown, "postgres://h/db?application_name=a@b");
}

/// The four stores given the same random sequences of claims (with and without
/// `queued_first`, `in_order`, forced), finishes, interrupts, resolutions, unlocks and
/// clock moves answer alike and hold the same ledger after every step. Six sequences of
/// 120 steps; `JOBGUARD_TEST_SEEDS=N` runs N.
#[cfg(all(
    feature = "store-postgres",
    feature = "store-mysql",
    feature = "store-redis"
))]
#[test]
fn the_four_stores_answer_random_histories_alike() {
    use common::remote;
    use jobguard::guard::ledger::{Finish, Outcome, Resolution, Run};
    use jobguard::store::ClockCheck;

    /// A claim's answer without what legitimately differs (times of the store's clock
    /// are the same manual clock everywhere, so they are kept).
    fn answer(r: &Result<Claim, StoreError>) -> String {
        match r {
            Err(_) => "error".to_string(),
            Ok(Claim::Claimed {
                lease,
                run,
                previous_slot,
            }) => format!(
                "claimed slot={} attempt={} trigger={} token={} forced={} prev={previous_slot:?}",
                run.slot.usec, run.attempt, run.trigger, lease.token, run.forced
            ),
            Ok(Claim::ClockSkew { store_now }) => format!("skew {store_now}"),
            Ok(Claim::SlotBehind { newest }) => format!("behind {newest}"),
            Ok(Claim::SlotDone { by }) => format!("done by {}", by.run_id),
            Ok(Claim::SlotHeld { by }) => format!("held by {}", by.run_id),
            Ok(Claim::Busy { lease, run }) => format!(
                "busy token={} run={:?}",
                lease.token,
                run.as_ref().map(|r| r.run_id.clone())
            ),
        }
    }
    fn ledger(s: &mut dyn Store) -> Vec<String> {
        let mut runs: Vec<Run> = s.runs(&RunQuery::default()).expect("runs");
        runs.sort_by(|a, b| a.run_id.cmp(&b.run_id));
        runs.iter()
            .map(|r| {
                format!(
                    "{} {} slot={} attempt={} {} {:?} trigger={} token={} forced={}",
                    r.run_id,
                    r.job,
                    r.slot.usec,
                    r.attempt,
                    r.outcome,
                    r.resolution,
                    r.trigger,
                    r.fencing_token,
                    r.forced
                )
            })
            .collect()
    }

    const DAY: i64 = 86_400_000_000;
    let seeds: u64 = std::env::var("JOBGUARD_TEST_SEEDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(6);
    for seed in 1..=seeds {
        let mut envs: Vec<(String, Box<dyn Env>)> = vec![("sqlite".into(), sqlite_env())];
        for name in ["postgres", "mysql", "redis"] {
            let Some(env) = remote::env(remote::server(name), &format!("differential::{name}"))
            else {
                return;
            };
            envs.push((name.into(), env));
        }
        let mut stores: Vec<Box<dyn Store>> = envs
            .iter()
            .map(|(_, e)| e.connect().expect("connect"))
            .collect();
        let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let mut next = |n: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % n
        };
        let mut running: Vec<(jobguard::guard::lease::Lease, Run)> = Vec::new();
        let mut elapsed = 0i64;
        for step in 0..120u32 {
            let what = next(100);
            let id = seed as u32 * 1000 + step;
            let mut answers: Vec<String> = Vec::new();
            let desc;
            if what < 45 {
                let slot = S1 - (next(12) as i64) * DAY;
                let mut req = request("j", slot, 1 + next(3) as u32, id, next(10) == 0);
                req.queued_first = next(2) == 0;
                req.in_order = next(2) == 0;
                if next(2) == 0 {
                    req.clock = Some(ClockCheck {
                        host_now: T0 + elapsed,
                        tolerance: 60_000_000,
                    });
                }
                desc = format!(
                    "claim slot={slot} holder={} forced={} queued_first={} in_order={}",
                    req.holder.host, req.run.forced, req.queued_first, req.in_order
                );
                let mut granted = None;
                for s in stores.iter_mut() {
                    let r = s.claim(&req);
                    if let Ok(Claim::Claimed { lease, run, .. }) = &r {
                        granted = Some((lease.clone(), run.clone()));
                    }
                    answers.push(answer(&r));
                }
                running.extend(granted);
            } else if what < 70 && !running.is_empty() {
                let (lease, run) = running.remove(next(running.len() as u64) as usize);
                let (outcome, resolution) = match next(6) {
                    0 => (Outcome::Succeeded, None),
                    1 => (Outcome::Failed, Some(Resolution::Held)),
                    2 => (Outcome::Failed, None),
                    3 => (Outcome::LeaseLost, Some(Resolution::Queued)),
                    4 => (Outcome::Interrupted, Some(Resolution::Queued)),
                    _ => (Outcome::Interrupted, Some(Resolution::Held)),
                };
                desc = format!("finish {} {outcome} {resolution:?}", run.run_id);
                let f = Finish {
                    outcome,
                    reason: Some("x".into()),
                    exit_status: Some(0),
                    report: Default::default(),
                    resolution,
                    ended_at: None,
                };
                for s in stores.iter_mut() {
                    answers.push(format!("{:?}", s.finish(&lease, &run.run_id, &f).ok()));
                }
            } else if what < 80 && !running.is_empty() {
                let (_, run) = running.remove(next(running.len() as u64) as usize);
                let resolution = if next(2) == 0 {
                    Resolution::Queued
                } else {
                    Resolution::Held
                };
                desc = format!("interrupt {} {resolution:?}", run.run_id);
                for s in stores.iter_mut() {
                    answers.push(format!("{:?}", s.interrupt(&run, "boot", resolution).ok()));
                }
            } else if what < 88 {
                let slot = S1 - (next(12) as i64) * DAY;
                let resolution = if next(3) == 0 {
                    Resolution::Done
                } else {
                    Resolution::Queued
                };
                desc = format!("resolve {slot} {resolution:?}");
                for s in stores.iter_mut() {
                    answers.push(format!("{:?}", s.resolve("j", slot, resolution).ok()));
                }
            } else if what < 91 {
                desc = "unlock".to_string();
                for s in stores.iter_mut() {
                    answers.push(format!(
                        "{:?}",
                        s.unlock("j").ok().map(|l| l.map(|l| l.token))
                    ));
                }
            } else {
                let by = if next(2) == 0 { 30_000_000 } else { 61_000_000 };
                elapsed += by;
                for (_, e) in &envs {
                    e.advance(by);
                }
                continue;
            }
            for (i, a) in answers.iter().enumerate() {
                assert_eq!(
                    a, &answers[0],
                    "seed {seed} step {step} ({desc}): {} answered differently from {}",
                    envs[i].0, envs[0].0
                );
            }
            let first = ledger(&mut *stores[0]);
            for (i, s) in stores.iter_mut().enumerate().skip(1) {
                assert_eq!(
                    ledger(&mut **s),
                    first,
                    "seed {seed} step {step} ({desc}): ledger of {}",
                    envs[i].0
                );
            }
        }
        let first = ledger(&mut *stores[0]);
        for (i, s) in stores.iter_mut().enumerate().skip(1) {
            assert_eq!(
                ledger(&mut **s),
                first,
                "seed {seed}: ledger of {}",
                envs[i].0
            );
        }
    }
}

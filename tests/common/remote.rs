//! The shared stores under test: PostgreSQL, MariaDB, Redis, etcd and ZooKeeper on
//! 127.0.0.1, each case in a namespace of its own (a schema, a database or a key prefix)
//! so cases run in parallel, plus what only a remote store needs: its own clock and
//! outages.
//!
//! Every shared server is one entry of [`SERVERS`]: its port, its addresses, how to make
//! and remove a namespace, how to open its store, its private TLS server. The suites do
//! not name servers for their generic cases: [`each_server!`] expands a suite's macro
//! once per entry (with the entry's name and [`Judge`]), and the cases look their server
//! up with [`server`]. A new store is one entry here; its generic conformance, contention
//! and differential cases follow. Cases of one store only (a migration from its old
//! layout, ZooKeeper's sessions) stay named tests that look their server up by name.
//!
//! The conformance suite moves time; a remote store judges time by its server's clock,
//! which a test cannot move, so [`RemoteEnv`] passes a manual clock's time into the
//! store's statements and scripts (`judge_time_by`), which still make every decision on
//! the server. The cases here ([`server_clock_judges`], [`outage_at_start`],
//! [`outage_during_run`]) use the real server clock and real waiting instead.
//!
//! A server that is not reachable fails the case in CI and skips it elsewhere
//! ([`super::go_on`]).

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream, ToSocketAddrs};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use jobguard::guard::clock::{Clock, ManualClock};
use jobguard::store::{Claim, RunQuery, Store, StoreError};

use super::conformance::{Env, T0, finish, holder, request, rid};
use super::tls;

/// Which clock judges a store's leases.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Judge {
    /// The server's own clock: a host's clock, however wrong, changes nothing
    /// ([`server_clock_judges`]).
    Server,
    /// The clock of the host that calls (etcd has no clock a client can read): "now" is
    /// the host's, and a test's manual clock moves it.
    Host,
}

/// Opens a store at an address; with a clock, time is judged by it (see the module docs).
pub type Opener = fn(&str, Option<Arc<dyn Clock>>) -> Result<Box<dyn Store>, StoreError>;

/// Runs SQL as a server's administrator: the client's output, unaligned and without
/// headers, or its error output on failure.
pub type SqlClient = fn(&str) -> Result<String, String>;

/// One shared server on 127.0.0.1 and what the suites need to know about it.
pub struct Server {
    /// Short name, as in test names (`postgres::…`) and in `jobguard::store::registry`.
    pub name: &'static str,
    /// The cargo feature that builds its store; without it the entry is left out.
    pub feature: &'static str,
    /// Which clock judges its leases.
    pub clock: Judge,
    /// The server's TCP port on 127.0.0.1.
    pub port: u16,
    /// The address of namespace `ns` (second argument) on the server at `host:port`
    /// (first argument), as the machine's administrator without password.
    pub address: fn(&str, &str) -> String,
    /// An address on `user:password@host:port` (the argument) without a namespace, for
    /// the cases that check a password is masked.
    pub login: fn(&str) -> String,
    /// Prepares a fresh namespace (MariaDB: the database must exist to connect to it).
    pub create: fn(&str),
    /// Removes a namespace and everything in it.
    pub drop: fn(&str),
    /// Writes the second argument as the schema version of a namespace.
    pub set_version: fn(&str, i64),
    /// The schema version this build of jobguard writes.
    pub schema_version: i64,
    /// Opens its store, with `judge_time_by` when given a clock.
    pub open: Opener,
    /// Runs one SQL statement as the server's administrator with its command-line client
    /// (the client's error output on failure); `None` for a store without SQL.
    pub sql: Option<SqlClient>,
    /// An SQL query that lists the functions and procedures in a namespace (`None` for a
    /// store without SQL).
    pub routines: Option<fn(&str) -> String>,
    /// Puts a namespace back to the layout of schema 1; `None` for a store that has had
    /// one layout only.
    pub downgrade_to_schema_1: Option<fn(&str)>,
    /// Its private TLS-only server ([`tls`]).
    pub tls: Tls,
}

/// A shared store's private TLS-only server, one per test process ([`tls`]).
pub struct Tls {
    /// Starts it on first use; `None` (after [`super::go_on`]) when it cannot run here.
    pub start: fn(&str) -> Option<&'static tls::Server>,
    /// The address of namespace `ns` (second argument) on it, the certificate checked
    /// against the CA file given third.
    pub address: fn(&tls::Server, &str, &str) -> String,
    /// Prepares a fresh namespace on it.
    pub create: fn(&tls::Server, &str),
    /// Writes the third argument as the schema version of a namespace on it.
    pub set_version: fn(&tls::Server, &str, i64),
}

impl Server {
    /// Runs SQL as the server's administrator: the client's output (rows one per line,
    /// columns tab-separated). Panics on failure or on a store without SQL.
    pub fn sql(&self, statement: &str) -> String {
        self.try_sql(statement)
            .unwrap_or_else(|e| panic!("{statement}: {e}"))
    }

    /// [`Server::sql`], returning the client's error output on failure.
    pub fn try_sql(&self, statement: &str) -> Result<String, String> {
        match self.sql {
            Some(run) => run(statement),
            None => panic!("no SQL on {}", self.name),
        }
    }
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}

/// An [`Opener`] for a store type with `open(address)` and `judge_time_by(clock)`.
macro_rules! opener {
    ($store:path) => {
        |address, clock| {
            use $store as S;
            let mut s = S::open(address)?;
            if let Some(c) = clock {
                s.judge_time_by(c);
            }
            Ok(Box::new(s))
        }
    };
}

/// Defines [`SERVERS`] and [`each_server!`] from one list of entries, so that the two
/// cannot disagree. An entry is `NAME { feature: "…", clock: Server|Host, fields… }`:
/// the other fields of [`Server`]. (`$d` is a `$`, for the macro it defines.)
macro_rules! servers {
    ($d:tt $(
        $name:ident {
            feature: $feature:literal,
            clock: $clock:ident,
            $($field:ident: $value:expr,)*
        }
    )*) => {
        /// Every shared server this build has a store for, in the order suites list them.
        pub static SERVERS: &[Server] = &[$(
            #[cfg(feature = $feature)]
            Server {
                name: stringify!($name),
                feature: $feature,
                clock: Judge::$clock,
                $($field: $value,)*
            },
        )*];

        /// Expands `$callback!(NAME JUDGE);` once per entry of [`SERVERS`] (each under its
        /// cargo feature), NAME being the entry's name as an identifier and JUDGE its
        /// [`Judge`] (`Server` or `Host`): a suite's generic cases, once per server.
        #[allow(unused_macros)]
        macro_rules! each_server {
            ($d callback:ident) => {
                $(
                    #[cfg(feature = $feature)]
                    $d callback!($name $clock);
                )*
            };
        }
        #[allow(unused_imports)]
        pub(crate) use each_server;
    };
}

servers! { $
    postgres {
        feature: "store-postgres",
        clock: Server,
        port: 5432,
        address: |host_port, ns| format!("postgres://root@{host_port}/test?schema={ns}"),
        login: |authority| format!("postgres://{authority}/test"),
        create: |_| {},
        drop: |ns| {
            server("postgres").sql(&format!("DROP SCHEMA IF EXISTS {ns} CASCADE"));
        },
        set_version: |ns, version| {
            server("postgres").sql(&format!(
                "UPDATE {ns}.jobguard_meta SET value = {version} WHERE key = 'schema_version'"
            ));
        },
        schema_version: jobguard::store::postgres::SCHEMA_VERSION,
        open: opener!(jobguard::store::postgres::PostgresStore),
        sql: Some(|statement| {
            client_result(
                Command::new("psql")
                    .args(["-h", "127.0.0.1", "-d", "test", "-v", "ON_ERROR_STOP=1", "-tAqc"])
                    .arg(statement),
            )
        }),
        routines: Some(|n| {
            format!(
                "SELECT p.proname FROM pg_proc p JOIN pg_namespace s ON s.oid = p.pronamespace
                  WHERE s.nspname = '{n}'"
            )
        }),
        downgrade_to_schema_1: Some(|n| {
            server("postgres").sql(&format!(
                "SET search_path = {n};
                 DROP INDEX jobguard_run_queued;
                 ALTER TABLE jobguard_lease DROP COLUMN renewal;
                 CREATE FUNCTION jobguard_claim(bigint, bigint, text, bigint, text, text,
                     boolean, text, text, text, text, text, text, bigint, bigint, bigint)
                     RETURNS SETOF text LANGUAGE sql AS 'SELECT NULL::text WHERE false';
                 CREATE FUNCTION jobguard_now_us(bigint) RETURNS bigint LANGUAGE sql
                     AS 'SELECT $1';
                 -- Not schema 1's, but what schemas 2 to 4 left: the migration's drop of
                 -- each signature is checked with the functions left (`routines`).
                 CREATE FUNCTION jobguard_claim(bigint, bigint, text, bigint, text, text,
                     boolean, text, text, text, text, text, text, bigint, bigint, bigint,
                     bigint, bigint, boolean, boolean)
                     RETURNS SETOF text LANGUAGE sql AS 'SELECT NULL::text WHERE false';
                 UPDATE jobguard_meta SET value = 1 WHERE key = 'schema_version';"
            ));
        }),
        tls: Tls {
            start: tls::postgres,
            address: |server, ns, ca| {
                format!(
                    "postgres://{user}@127.0.0.1:{}/{user}?schema={ns}&sslmode=verify-full\
                     &sslrootcert={ca}",
                    server.port,
                    user = tls::POSTGRES_USER,
                )
            },
            create: |_, _| {},
            set_version: |server, ns, version| {
                server.psql(&format!(
                    "UPDATE {ns}.jobguard_meta SET value = {version} WHERE key = 'schema_version'"
                ));
            },
        },
    }
    mysql {
        feature: "store-mysql",
        clock: Server,
        port: 3306,
        address: |host_port, ns| format!("mysql://root@{host_port}/{ns}"),
        login: |authority| format!("mysql://{authority}/test"),
        create: |ns| {
            server("mysql").sql(&format!("CREATE DATABASE {ns}"));
        },
        drop: |ns| {
            server("mysql").sql(&format!("DROP DATABASE IF EXISTS {ns}"));
        },
        set_version: |ns, version| {
            server("mysql").sql(&format!(
                "UPDATE {ns}.jobguard_meta SET value = {version} WHERE name = 'schema_version'"
            ));
        },
        schema_version: jobguard::store::mysql::SCHEMA_VERSION,
        open: opener!(jobguard::store::mysql::MysqlStore),
        sql: Some(|statement| {
            client_result(
                Command::new("mariadb")
                    .args(["-uroot", "-h127.0.0.1", "-N", "-B", "-e"])
                    .arg(statement),
            )
        }),
        routines: Some(|n| {
            format!(
                "SELECT routine_name FROM information_schema.routines
                  WHERE routine_schema = '{n}'"
            )
        }),
        downgrade_to_schema_1: Some(|n| {
            server("mysql").sql(&format!(
                "USE {n};
                 DROP INDEX jobguard_run_queued ON jobguard_run;
                 ALTER TABLE jobguard_lease DROP COLUMN renewal;
                 ALTER TABLE jobguard_lease DROP COLUMN rev;
                 CREATE PROCEDURE jobguard_renew() BEGIN END;
                 CREATE PROCEDURE jobguard_claim(IN a1 BIGINT, IN a2 BIGINT,
                     IN a3 BLOB, IN a4 BIGINT, IN a5 BLOB, IN a6 BLOB, IN a7 TINYINT,
                     IN a8 BLOB, IN a9 BLOB, IN a10 BLOB, IN a11 BLOB, IN a12 BLOB,
                     IN a13 BLOB, IN a14 BIGINT, IN a15 BIGINT, IN a16 BIGINT) BEGIN END;
                 UPDATE jobguard_meta SET value = 1 WHERE name = 'schema_version';"
            ));
        }),
        tls: Tls {
            start: tls::mariadb,
            address: |server, ns, ca| {
                format!(
                    "mysql://root@127.0.0.1:{}/{ns}?ssl-mode=VERIFY_IDENTITY&ssl-ca={ca}",
                    server.port
                )
            },
            create: |server, ns| server.sql(&format!("CREATE DATABASE {ns}")),
            set_version: |server, ns, version| {
                server.sql(&format!(
                    "UPDATE {ns}.jobguard_meta SET value = {version} WHERE name = 'schema_version'"
                ))
            },
        },
    }
    redis {
        feature: "store-redis",
        clock: Server,
        port: 6379,
        address: |host_port, ns| format!("redis://{host_port}/0?prefix={ns}:"),
        login: |authority| format!("redis://{authority}/0"),
        create: |_| {},
        drop: |ns| {
            let keys = redis_cli(&["--scan", "--pattern", &format!("{ns}:*")]);
            let keys: Vec<&str> = keys.lines().filter(|k| !k.is_empty()).collect();
            for chunk in keys.chunks(500) {
                let _ = Command::new("redis-cli")
                    .args(["-h", "127.0.0.1", "DEL"])
                    .args(chunk)
                    .output();
            }
        },
        set_version: |ns, version| {
            redis_cli(&["SET", &format!("{ns}:schema"), &version.to_string()]);
        },
        schema_version: jobguard::store::redis::SCHEMA_VERSION,
        open: opener!(jobguard::store::redis::RedisStore),
        sql: None,
        routines: None,
        downgrade_to_schema_1: Some(|n| {
            redis_cli(&["DEL", &format!("{n}:slots:sync"), &format!("{n}:queued:sync")]);
            (server("redis").set_version)(n, 1);
        }),
        tls: Tls {
            start: tls::redis,
            address: |server, ns, ca| {
                format!(
                    "rediss://127.0.0.1:{}/0?prefix={ns}:&ssl-ca={ca}",
                    server.port
                )
            },
            create: |_, _| {},
            set_version: |server, ns, version| {
                server.redis_cli(&["SET", &format!("{ns}:schema"), &version.to_string()]);
            },
        },
    }
    etcd {
        feature: "store-etcd",
        clock: Host,
        port: 2379,
        address: |host_port, ns| format!("etcd://{host_port}?prefix={ns}/"),
        login: |authority| format!("etcd://{authority}"),
        create: |_| {},
        drop: |ns| {
            let _ = etcdctl(&["del", "--prefix", &format!("{ns}/")]);
        },
        set_version: |ns, version| {
            etcdctl(&["put", &format!("{ns}/schema"), &version.to_string()])
                .expect("etcdctl put");
        },
        schema_version: jobguard::store::etcd::SCHEMA_VERSION,
        open: opener!(jobguard::store::etcd::EtcdStore),
        sql: None,
        routines: None,
        downgrade_to_schema_1: None,
        tls: Tls {
            start: tls::etcd,
            address: |server, ns, ca| {
                format!("etcds://127.0.0.1:{}?prefix={ns}/&ssl-ca={ca}", server.port)
            },
            create: |_, _| {},
            set_version: |server, ns, version| {
                server.etcdctl(&["put", &format!("{ns}/schema"), &version.to_string()]);
            },
        },
    }
    zookeeper {
        feature: "store-zookeeper",
        clock: Server,
        port: 2181,
        address: |host_port, ns| format!("zookeeper://{host_port}/{ns}"),
        login: |authority| format!("zookeeper://{authority}"),
        create: |_| {},
        drop: |ns| {
            let _ = zkcli(&["deleteall", &format!("/{ns}")]);
        },
        set_version: |ns, version| {
            zkcli(&["set", &format!("/{ns}/schema"), &version.to_string()])
                .expect("zkCli.sh set");
        },
        schema_version: jobguard::store::zookeeper::SCHEMA_VERSION,
        open: opener!(jobguard::store::zookeeper::ZooKeeperStore),
        sql: None,
        routines: None,
        downgrade_to_schema_1: None,
        tls: Tls {
            start: tls::zookeeper,
            address: |server, ns, ca| tls::zookeeper_address(server, "127.0.0.1", ns, ca),
            create: |_, _| {},
            set_version: |server, ns, version| {
                server.zookeeper_set(&format!("/{ns}/schema"), version.to_string().as_bytes());
            },
        },
    }
}

/// The entry of [`SERVERS`] named `name`; panics when this build has none.
pub fn server(name: &str) -> &'static Server {
    SERVERS
        .iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("no shared server {name:?} in this build"))
}

/// Opens the store of `server` at `address`; with `clock`, time is judged by it (see the
/// module docs).
pub fn open(
    server: &Server,
    address: &str,
    clock: Option<&ManualClock>,
) -> Result<Box<dyn Store>, StoreError> {
    (server.open)(
        address,
        clock.map(|c| Arc::new(c.clone()) as Arc<dyn Clock>),
    )
}

/// A command-line client's run: `Ok` when it exited 0, else its error output.
fn client_result(cmd: &mut Command) -> Result<String, String> {
    let out = cmd.output().expect("run the SQL client");
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// Runs `redis-cli` against 127.0.0.1:6379 with `args`; its standard output. Panics when
/// it fails.
pub fn redis_cli(args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .args(["-h", "127.0.0.1"])
        .args(args)
        .output()
        .expect("redis-cli");
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs `etcdctl` (API v3) against 127.0.0.1:2379; its standard output, or its error
/// output on failure.
pub fn etcdctl(args: &[&str]) -> Result<String, String> {
    let out = Command::new("etcdctl")
        .env("ETCDCTL_API", "3")
        .args(["--endpoints", "http://127.0.0.1:2379"])
        .args(args)
        .output()
        .map_err(|e| format!("etcdctl: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// One call of etcd's JSON gateway on 127.0.0.1:2379 (`POST /v3/...`, etcd's
/// `api/v3` gRPC-gateway, on by default): the response body. Much faster than `etcdctl`,
/// for a test that calls it thousands of times.
pub fn etcd_gateway(path: &str, body: &str) -> Result<String, String> {
    let mut conn = TcpStream::connect("127.0.0.1:2379").map_err(|e| e.to_string())?;
    write!(
        conn,
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .map_err(|e| e.to_string())?;
    let mut answer = String::new();
    conn.read_to_string(&mut answer)
        .map_err(|e| e.to_string())?;
    let (head, body) = answer.split_once("\r\n\r\n").ok_or("no HTTP body")?;
    if head.starts_with("HTTP/1.1 200") {
        Ok(body.to_string())
    } else {
        Err(body.to_string())
    }
}

/// Runs ZooKeeper's `zkCli.sh` against 127.0.0.1:2181 with one command; its output, or
/// its error output when the command failed (zkCli.sh exits 0 either way, so its output
/// is searched for the server's error names).
pub fn zkcli(args: &[&str]) -> Result<String, String> {
    let out = Command::new("/usr/share/zookeeper/bin/zkCli.sh")
        .args(["-server", "127.0.0.1:2181"])
        .args(args)
        .output()
        .map_err(|e| format!("zkCli.sh: {e}"))?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let failed = ["Node does not exist", "Exception", "Command not found"]
        .iter()
        .any(|e| text.contains(e));
    if out.status.success() && !failed {
        Ok(text)
    } else {
        Err(text)
    }
}

/// Whether `server` answers on its port; `Some(reason)` if not.
pub fn unreachable(server: &Server) -> Option<String> {
    let addr = ("127.0.0.1", server.port).to_socket_addrs().ok()?.next()?;
    match TcpStream::connect_timeout(&addr, Duration::from_secs(2)) {
        Ok(_) => None,
        Err(e) => Some(format!(
            "{} server at {addr} not reachable: {e}",
            server.name
        )),
    }
}

/// A fresh namespace name, unique across test processes and cases.
pub fn namespace() -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!(
        "jgt_{}_{}_{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed),
        nanos % 1000
    )
}

/// A namespace on the real server, removed when dropped.
pub struct Namespace {
    /// Which server.
    pub server: &'static Server,
    /// Its name.
    pub name: String,
}

impl Namespace {
    /// Creates a fresh namespace, or `None` (after [`super::go_on`]) if the server is down.
    pub fn new(server: &'static Server, test: &str) -> Option<Namespace> {
        if !super::go_on(test, unreachable(server)) {
            return None;
        }
        let name = namespace();
        (server.create)(&name);
        Some(Namespace { server, name })
    }

    /// The address of this namespace on the real server.
    pub fn address(&self) -> String {
        (self.server.address)(&format!("127.0.0.1:{}", self.server.port), &self.name)
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        (self.server.drop)(&self.name);
    }
}

/// A conformance env on a real server: a fresh namespace and a manual clock whose time
/// the store's statements use.
pub struct RemoteEnv {
    ns: Namespace,
    clock: ManualClock,
}

/// A fresh [`RemoteEnv`] on `server`, or `None` when it is down (outside CI).
pub fn env(server: &'static Server, test: &str) -> Option<Box<dyn Env>> {
    let ns = Namespace::new(server, test)?;
    Some(Box::new(RemoteEnv {
        ns,
        clock: ManualClock::new(T0),
    }))
}

impl Env for RemoteEnv {
    fn connect(&self) -> Result<Box<dyn Store>, StoreError> {
        (self.ns.server.open)(&self.ns.address(), Some(Arc::new(self.clock.clone())))
    }
    fn advance(&self, usec: i64) {
        self.clock.advance(usec);
    }
    fn set_schema_version(&self, version: i64) {
        (self.ns.server.set_version)(&self.ns.name, version);
    }
    fn current_schema_version(&self) -> i64 {
        self.ns.server.schema_version
    }
    fn store_clock_is_host_clock(&self) -> bool {
        self.ns.server.clock == Judge::Host
    }
}

/// A TCP proxy in front of a store that a test can freeze: while frozen it moves no
/// bytes but keeps every connection open, as a network partition does.
pub struct Proxy {
    /// `127.0.0.1:PORT` the proxy listens on.
    pub listen: String,
    frozen: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    /// Bumped by [`Proxy::cut`]: a connection opened under an earlier value is closed.
    generation: Arc<AtomicU32>,
    /// How many connections the target closed while frozen ([`Proxy::closed_by_target`]).
    closed_by_target: Arc<AtomicU32>,
    /// Bytes whose arrival from a client freezes the proxy before they pass
    /// ([`Proxy::freeze_on`]).
    trigger: Trigger,
}

/// What [`Proxy::freeze_on`] waits for.
type Trigger = Arc<std::sync::Mutex<Option<Vec<u8>>>>;

/// The direction a pump moves bytes in, with what it watches for: from a client to the
/// target (the bytes that freeze the proxy), or back (the count of closes by the target).
enum Way {
    Up(Trigger),
    Down(Arc<AtomicU32>),
}

impl Proxy {
    /// Starts a proxy to `127.0.0.1:target_port`.
    pub fn start(target_port: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind proxy");
        let listen = listener.local_addr().expect("proxy address").to_string();
        let frozen = Arc::new(AtomicBool::new(false));
        let stop = Arc::new(AtomicBool::new(false));
        let generation = Arc::new(AtomicU32::new(0));
        let closed_by_target = Arc::new(AtomicU32::new(0));
        let trigger: Trigger = Arc::default();
        let (f, s, g, c, t) = (
            frozen.clone(),
            stop.clone(),
            generation.clone(),
            closed_by_target.clone(),
            trigger.clone(),
        );
        std::thread::spawn(move || {
            for client in listener.incoming() {
                if s.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(client) = client else { continue };
                let Ok(server) = TcpStream::connect(("127.0.0.1", target_port)) else {
                    continue;
                };
                for (from, to, way) in [
                    (client.try_clone(), server.try_clone(), Way::Up(t.clone())),
                    (server.try_clone(), client.try_clone(), Way::Down(c.clone())),
                ] {
                    let (Ok(from), Ok(to)) = (from, to) else {
                        continue;
                    };
                    let (f, s, g) = (f.clone(), s.clone(), g.clone());
                    let born = g.load(Ordering::SeqCst);
                    std::thread::spawn(move || {
                        pump(from, to, &f, &s, &g, born, way);
                    });
                }
            }
        });
        Proxy {
            listen,
            frozen,
            stop,
            generation,
            closed_by_target,
            trigger,
        }
    }

    /// How many connections the target closed while the proxy was frozen. The close is
    /// passed on to the client only after the thaw, as a partition hides it.
    pub fn closed_by_target(&self) -> u32 {
        self.closed_by_target.load(Ordering::SeqCst)
    }

    /// Closes every open connection, dropping the bytes held while frozen (requests that
    /// never reached the server); later connections pass as before.
    pub fn cut(&self) {
        self.generation.fetch_add(1, Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(100));
    }

    /// Stops or resumes moving bytes.
    pub fn freeze(&self, frozen: bool) {
        self.frozen.store(frozen, Ordering::SeqCst);
    }

    /// Freezes the proxy when a client next sends `bytes` (within one read), before they
    /// pass: a client frozen just before that request, as a paused VM is.
    pub fn freeze_on(&self, bytes: &[u8]) {
        *self.trigger.lock().unwrap() = Some(bytes.to_vec());
    }

    /// Whether the proxy is frozen.
    pub fn is_frozen(&self) -> bool {
        self.frozen.load(Ordering::SeqCst)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop so it sees the stop flag.
        let _ = TcpStream::connect(&self.listen);
    }
}

fn pump(
    mut from: TcpStream,
    mut to: TcpStream,
    frozen: &AtomicBool,
    stop: &AtomicBool,
    generation: &AtomicU32,
    born: u32,
    way: Way,
) {
    let (closes, trigger) = match way {
        Way::Up(t) => (None, Some(t)),
        Way::Down(c) => (Some(c), None),
    };
    let _ = from.set_read_timeout(Some(Duration::from_millis(20)));
    let mut buf = [0u8; 16384];
    let cut = || generation.load(Ordering::SeqCst) != born;
    let mut counted = false;
    loop {
        if stop.load(Ordering::SeqCst) || cut() {
            break;
        }
        if frozen.load(Ordering::SeqCst) {
            // The target's end of the stream (a peek of 0 bytes) is seen without
            // moving a byte.
            if let (Some(closes), false) = (&closes, counted)
                && matches!(from.peek(&mut buf[..1]), Ok(0))
            {
                closes.fetch_add(1, Ordering::SeqCst);
                counted = true;
            }
            std::thread::sleep(Duration::from_millis(10));
            continue;
        }
        match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                if let Some(t) = &trigger {
                    let mut t = t.lock().unwrap();
                    if t.as_ref()
                        .is_some_and(|b| buf[..n].windows(b.len()).any(|w| w == b))
                    {
                        *t = None;
                        frozen.store(true, Ordering::SeqCst);
                    }
                }
                // Bytes read just as the proxy froze wait for the thaw: none pass while
                // frozen, and none are lost.
                while frozen.load(Ordering::SeqCst) && !stop.load(Ordering::SeqCst) && !cut() {
                    std::thread::sleep(Duration::from_millis(10));
                }
                if cut() {
                    break;
                }
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => break,
        }
    }
    let _ = to.shutdown(Shutdown::Both);
    let _ = from.shutdown(Shutdown::Both);
}

fn now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// The server's clock judges leases, whatever the host's clock says: opened with a host
/// clock 2 years off (`open_with_clock`), the store's time is the server's, and a 1 s
/// lease expires after 1 s of real time.
pub fn server_clock_judges(server: &'static Server, test: &str) {
    let Some(ns) = Namespace::new(server, test) else {
        return;
    };
    let skewed = Arc::new(ManualClock::new(now_us() - 2 * 365 * 86_400_000_000));
    let mut a = jobguard::store::open_with_clock(&ns.address(), skewed.clone()).unwrap();
    let mut b = jobguard::store::open_with_clock(&ns.address(), skewed).unwrap();
    let host = now_us();
    let store = a.now().unwrap();
    // The servers run on this machine, so their clock is the machine's.
    assert!(
        (store - host).abs() < 5_000_000,
        "store time {store} vs machine time {host}"
    );
    let mut req = request("sync", T0, 1, 1, false);
    req.ttl = Duration::from_secs(1);
    let lease = match a.claim(&req).unwrap() {
        Claim::Claimed { lease, run, .. } => {
            assert!((lease.acquired_at - store).abs() < 5_000_000, "{lease:?}");
            assert_eq!(lease.expire_at - lease.acquired_at, 1_000_000);
            assert_eq!(run.started_at, lease.acquired_at);
            lease
        }
        other => panic!("expected Claimed, got {other:?}"),
    };
    // The same machine and boot (another process): a lapsed lease is not kept from it for
    // the grace another machine or boot waits (rules::FOREIGN_GRACE_USEC).
    let mut other = request("sync", T0, 2, 2, false);
    other.holder.machine_id = holder(1).machine_id;
    other.holder.boot_id = holder(1).boot_id;
    other.ttl = Duration::from_secs(1);
    assert!(matches!(b.claim(&other).unwrap(), Claim::Busy { .. }));
    // Wait until the store's clock is past the expiry.
    super::wait_for(
        "the store clock to pass the lease's expiry",
        Duration::from_secs(10),
        Duration::from_millis(100),
        || Ok((b.now().map_err(|e| e.to_string())? > lease.expire_at).then_some(())),
    )
    .unwrap();
    assert_eq!(a.renew(&lease, 1, Duration::from_secs(1)).unwrap(), None);
    match b.claim(&other).unwrap() {
        Claim::Claimed { lease: l2, .. } => {
            assert!(l2.token > lease.token);
            assert_eq!(l2.holder, other.holder.id());
        }
        other => panic!("expected a takeover, got {other:?}"),
    }
}

/// etcd: an operator compacts the keyspace (`etcdctl compact $(current revision)`, as
/// maintenance scripts do before `defrag`) while hosts read long histories and claim.
/// A history read whose later pages were compacted away goes on at the current revision,
/// and a claim whose second read was starts again: every read answers in full, every
/// claim is answered.
pub fn etcd_reads_outlive_compaction(test: &str) {
    let Some(ns) = Namespace::new(server("etcd"), test) else {
        return;
    };
    const GRANTS: u32 = 600;
    // Reports of 8 KiB make a read of the history (about 5 MB in 19 pages) take longer
    // than the time between two compactions below, so most reads see one.
    let mut done = finish(jobguard::guard::ledger::Outcome::Failed);
    done.report.insert("output".into(), "x".repeat(8 << 10));
    let mut s = jobguard::store::open(&ns.address()).unwrap();
    s.init().unwrap();
    for n in 1..=GRANTS {
        let slot = T0 + i64::from(n) * 60_000_000;
        let mut req = request("sync", slot, 1, n, false);
        req.queued_first = true;
        let lease = match s.claim(&req).unwrap() {
            Claim::Claimed { lease, .. } => lease,
            other => panic!("grant {n}: {other:?}"),
        };
        s.finish(&lease, &rid(n), &done).unwrap();
        if n % 3 == 0 {
            s.resolve("sync", slot, jobguard::guard::ledger::Resolution::Held)
                .unwrap();
        }
    }
    let stop = Arc::new(AtomicBool::new(false));
    // Four compactors, so that one compacts within the few milliseconds of a read. Each
    // puts a key (base64 of `jgt_compaction_tick`) for a new revision and compacts to it.
    let compactors: Vec<_> = (0..4)
        .map(|_| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut compactions = 0;
                while !stop.load(Ordering::Relaxed) {
                    let put = r#"{"key":"amd0X2NvbXBhY3Rpb25fdGljaw==","value":"eA=="}"#;
                    let out = etcd_gateway("/v3/kv/put", put).expect("put");
                    let v: serde_json::Value = serde_json::from_str(&out).expect("json");
                    let revision = v["header"]["revision"].as_str().expect("revision");
                    // Another compactor may have compacted past it: that is an error.
                    let compact = format!(r#"{{"revision":"{revision}"}}"#);
                    if etcd_gateway("/v3/kv/compaction", &compact).is_ok() {
                        compactions += 1;
                    }
                }
                compactions
            })
        })
        .collect();
    let all = RunQuery {
        job: Some("sync".into()),
        ..RunQuery::default()
    };
    for i in 0..60 {
        let runs = s.runs(&all).unwrap_or_else(|e| panic!("read {i}: {e}"));
        assert_eq!(runs.len(), GRANTS as usize, "read {i}");
        let n = GRANTS + 1 + i;
        // A held slot: refused after the claim's reads.
        let mut req = request("sync", T0 + 3 * 60_000_000, 2, n, false);
        req.queued_first = true;
        match s.claim(&req).unwrap_or_else(|e| panic!("claim {i}: {e}")) {
            Claim::SlotHeld { .. } => {}
            other => panic!("claim {i}: {other:?}"),
        }
    }
    stop.store(true, Ordering::Relaxed);
    let compactions: u32 = compactors.into_iter().map(|c| c.join().unwrap()).sum();
    assert!(compactions > 10, "only {compactions} compactions ran");
}

/// etcd: whether a lease is held is decided by the etcd lease its grant attached to the
/// job's `alive` key, not by any host's clock. A host whose clock is an hour ahead finds
/// a fresh lease held; once the holder stops renewing and etcd expires its lease, a host
/// whose clock is an hour behind (by which the row's `expire_at` is still far off) takes
/// it over, and the old holder's renewal is refused.
pub fn etcd_lease_decides(test: &str) {
    let Some(ns) = Namespace::new(server("etcd"), test) else {
        return;
    };
    let hour = 3_600_000_000;
    let ahead = Arc::new(ManualClock::new(now_us() + hour));
    let behind = Arc::new(ManualClock::new(now_us() - hour));
    let mut a = jobguard::store::open(&ns.address()).unwrap();
    let mut b = jobguard::store::open_with_clock(&ns.address(), ahead).unwrap();
    let mut c = jobguard::store::open_with_clock(&ns.address(), behind).unwrap();
    let mut req = request("sync", T0, 1, 1, false);
    req.ttl = Duration::from_secs(2);
    let lease = match a.claim(&req).unwrap() {
        Claim::Claimed { lease, .. } => lease,
        other => panic!("expected Claimed, got {other:?}"),
    };
    // The same machine and boot: no grace for a lapsed lease (see server_clock_judges),
    // so only the lease itself is in the way.
    let other = |r: u32| {
        let mut o = request("sync", T0, 2, r, false);
        o.holder.machine_id = holder(1).machine_id;
        o.holder.boot_id = holder(1).boot_id;
        o.ttl = Duration::from_secs(2);
        o
    };
    assert!(
        matches!(b.claim(&other(2)).unwrap(), Claim::Busy { .. }),
        "a clock an hour ahead must not see the lease expired"
    );
    assert!(
        a.renew(&lease, 1, Duration::from_secs(2))
            .unwrap()
            .is_some()
    );
    let lease = jobguard::guard::lease::Lease {
        renewal: 1,
        ..lease
    };
    let alive = format!("{}/alive/sync", ns.name);
    super::wait_for(
        "etcd to expire the holder's lease",
        Duration::from_secs(15),
        Duration::from_millis(200),
        || Ok(etcdctl(&["get", &alive])?.trim().is_empty().then_some(())),
    )
    .unwrap();
    match c.claim(&other(3)).unwrap() {
        Claim::Claimed { lease: l2, .. } => assert!(l2.token > lease.token),
        other => panic!("a clock an hour behind must see the expired lease: {other:?}"),
    }
    assert_eq!(a.renew(&lease, 2, Duration::from_secs(2)).unwrap(), None);
}

/// A store that cannot be reached when a run starts answers `Unavailable` (not a hang,
/// not another error), with the address's password masked.
pub fn outage_at_start(server: &Server) {
    // Port 1 on loopback: nothing listens there, connections are refused.
    let address = (server.login)("root:hunter2@127.0.0.1:1");
    let mut s = jobguard::store::open(&address).expect("opening does not connect");
    let err = s.claim(&request("sync", T0, 1, 1, false)).unwrap_err();
    assert!(matches!(err, StoreError::Unavailable { .. }), "{err}");
    let msg = err.to_string();
    assert!(!msg.contains("hunter2"), "{msg}");
    assert!(msg.contains("127.0.0.1:1"), "{msg}");
}

/// A store cut off during a run (a frozen proxy: connections stay open, nothing moves)
/// makes renewal answer `Unavailable` within the call deadline instead of hanging; after
/// the partition heals, the holder renews its still-valid lease on a new connection.
pub fn outage_during_run(server: &'static Server, test: &str) {
    let Some(ns) = Namespace::new(server, test) else {
        return;
    };
    let proxy = Proxy::start(server.port);
    let address = (server.address)(&proxy.listen, &ns.name);
    let mut s = jobguard::store::open(&address).unwrap();
    let lease = match s.claim(&request("sync", T0, 1, 1, false)).unwrap() {
        Claim::Claimed { lease, .. } => lease,
        other => panic!("expected Claimed, got {other:?}"),
    };
    proxy.freeze(true);
    // The renewal that failed and the one sent after the partition carry one generation:
    // the store may have applied the first.
    let err = s.renew(&lease, 7, Duration::from_secs(60)).unwrap_err();
    assert!(matches!(err, StoreError::Unavailable { .. }), "{err}");
    proxy.freeze(false);
    let until = s.renew(&lease, 7, Duration::from_secs(60)).unwrap();
    assert!(until.is_some_and(|u| u > lease.expire_at - 1), "{until:?}");
    // Another host, directly on the server, still sees the lease held.
    let mut direct = jobguard::store::open(&ns.address()).unwrap();
    assert!(matches!(
        direct.claim(&request("sync", T0, 2, 2, false)).unwrap(),
        Claim::Busy { .. }
    ));
}

/// The store itself refuses a second non-forced `succeeded` record for a (job, slot),
/// whatever writes it: a copy of a succeeded row inserted behind jobguard's back is
/// refused by the index (PostgreSQL: partial unique index; MySQL/MariaDB: unique index on
/// the generated `success_slot` column), while a forced copy is allowed.
pub fn success_is_unique_in_the_schema(server: &'static Server, test: &str) {
    let Some(ns) = Namespace::new(server, test) else {
        return;
    };
    let mut s = jobguard::store::open(&ns.address()).unwrap();
    let (lease, run) = match s.claim(&request("sync", T0, 1, 1, false)).unwrap() {
        Claim::Claimed { lease, run, .. } => (lease, run),
        other => panic!("expected Claimed, got {other:?}"),
    };
    let done = s
        .finish(
            &lease,
            &run.run_id,
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
    assert!(done.recorded);
    let columns = "job, slot_usec, slot_zone, attempt, outcome, reason, exit_status, forced, \
        trigger_kind, host, machine_id, boot_id, pid, pid_start, invocation_id, started_at, \
        finished_at, fencing_token, report, resolution";
    let copy = |new_id: &str, forced: &str| {
        let forced_columns = columns.replace("forced,", &format!("{forced} AS forced,"));
        let table = format!("{}.jobguard_run", ns.name);
        format!(
            "INSERT INTO {table} (run_id, {columns}) \
             SELECT '{new_id}', {forced_columns} FROM {table}"
        )
    };
    let (no, yes) = match server.name {
        "postgres" => ("false", "true"),
        _ => ("0", "1"),
    };
    let refused = server
        .try_sql(&copy("copy1", no))
        .expect_err("a second success was stored");
    assert!(
        refused.to_lowercase().contains("duplicate"),
        "refused for another reason: {refused}"
    );
    server.sql(&copy("copy2", yes));
}

/// A store written by jobguard's schema 1 (the claim of that version, no queued-slot
/// index, Redis without the `slots:`/`queued:` keys) with a queued re-run in it: the
/// first claim of this jobguard migrates it and finds the queued slot.
pub fn upgrade_from_schema_1(server: &'static Server, test: &str) {
    use jobguard::guard::ledger::Resolution;
    let Some(ns) = Namespace::new(server, test) else {
        return;
    };
    let clock = ManualClock::new(T0);
    let (a, b) = (T0 - 2 * 86_400_000_000, T0 - 86_400_000_000);
    {
        let mut s = open(server, &ns.address(), Some(&clock)).expect("open");
        let (_, run) = match s.claim(&request("sync", a, 1, 1, false)).expect("claim") {
            Claim::Claimed { lease, run, .. } => (lease, run),
            other => panic!("{other:?}"),
        };
        assert!(s.interrupt(&run, "boot", Resolution::Queued).unwrap());
    }
    // Back to what schema 1 left.
    downgrade_to_schema_1(&ns);
    let mut s = open(server, &ns.address(), Some(&clock)).expect("open");
    let mut req = request("sync", b, 2, 2, false);
    req.queued_first = true;
    req.in_order = true;
    match s.claim(&req).expect("claim after the upgrade") {
        Claim::Claimed {
            run, previous_slot, ..
        } => {
            assert_eq!((run.slot.usec, run.trigger.as_str()), (a, "rerun"));
            assert_eq!(previous_slot, Some(a));
        }
        other => panic!("expected the queued slot, got {other:?}"),
    }
    // Nothing of schema 1 is left on the server to decide anything.
    if let Some(routines) = server.routines {
        assert_eq!(
            server.sql(&routines(&ns.name)).trim(),
            "",
            "left on the server"
        );
    }
    // The schema is the current one now: a fresh connection does not migrate again.
    let mut again = open(server, &ns.address(), Some(&clock)).expect("open");
    again.init().expect("init");
    let mut req = request("sync", b, 2, 3, false);
    req.queued_first = true;
    assert!(matches!(
        again.claim(&req).expect("claim"),
        Claim::Claimed { .. } | Claim::Busy { .. }
    ));
}

/// Puts namespace `ns` back to what schema 1 left: the claim function or procedure of
/// schema 1, no queued index (Redis: no `slots:`/`queued:` keys of job `sync`), version 1.
fn downgrade_to_schema_1(ns: &Namespace) {
    match ns.server.downgrade_to_schema_1 {
        Some(downgrade) => downgrade(&ns.name),
        None => panic!("{} has had one layout only", ns.server.name),
    }
}

/// Hosts starting together on a store of schema 1: every one's first claim (each for a
/// job of its own, on its own connection) migrates or waits for the migration, and none
/// fails.
pub fn concurrent_upgrade_from_schema_1(server: &'static Server, test: &str) {
    let Some(ns) = Namespace::new(server, test) else {
        return;
    };
    {
        let mut s = open(server, &ns.address(), None).expect("open");
        s.init().expect("init");
    }
    for round in 0..3 {
        downgrade_to_schema_1(&ns);
        let hosts = 8;
        let barrier = Arc::new(std::sync::Barrier::new(hosts));
        let threads: Vec<_> = (0..hosts)
            .map(|i| {
                let address = ns.address();
                let barrier = barrier.clone();
                std::thread::spawn(move || {
                    let mut s = open(server, &address, None).expect("open");
                    let mut req = request(
                        &format!("job{i}"),
                        T0,
                        i as u32 + 1,
                        round * 100 + i as u32 + 1,
                        false,
                    );
                    req.queued_first = true;
                    req.in_order = true;
                    barrier.wait();
                    s.claim(&req)
                })
            })
            .collect();
        for (i, t) in threads.into_iter().enumerate() {
            match t.join().expect("thread") {
                Ok(Claim::Claimed { .. }) | Ok(Claim::Busy { .. }) => {}
                other => panic!("round {round}, host {i}: {other:?}"),
            }
        }
    }
}

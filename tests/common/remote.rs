//! The shared stores under test: PostgreSQL, MariaDB and Redis on 127.0.0.1, each case in
//! a namespace of its own (a schema, a database or a key prefix) so cases run in parallel,
//! plus what only a remote store needs: its own clock and outages.
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

use jobguard::clock::ManualClock;
use jobguard::store::{Claim, RunQuery, Store, StoreError};

use super::conformance::{Env, T0, finish, holder, request, rid};

/// A kind of shared store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// PostgreSQL on 127.0.0.1:5432, database `test`, user `root` (trust).
    Postgres,
    /// MariaDB on 127.0.0.1:3306, user `root` without password.
    Mysql,
    /// Redis on 127.0.0.1:6379, database 0.
    Redis,
    /// etcd on 127.0.0.1:2379 (needs the cargo feature `store-etcd`).
    Etcd,
    /// ZooKeeper on 127.0.0.1:2181 (needs the cargo feature `store-zookeeper`).
    ZooKeeper,
}

impl Kind {
    /// The server's TCP port on 127.0.0.1.
    pub fn port(self) -> u16 {
        match self {
            Kind::Postgres => 5432,
            Kind::Mysql => 3306,
            Kind::Redis => 6379,
            Kind::Etcd => 2379,
            Kind::ZooKeeper => 2181,
        }
    }

    /// The address of namespace `ns` on the server at `host:port`.
    pub fn address(self, host_port: &str, ns: &str) -> String {
        match self {
            Kind::Postgres => format!("postgres://root@{host_port}/test?schema={ns}"),
            Kind::Mysql => format!("mysql://root@{host_port}/{ns}"),
            Kind::Redis => format!("redis://{host_port}/0?prefix={ns}:"),
            Kind::Etcd => format!("etcd://{host_port}?prefix={ns}/"),
            Kind::ZooKeeper => format!("zookeeper://{host_port}/{ns}"),
        }
    }

    /// Prepares namespace `ns` (MariaDB: the database must exist to connect to it).
    fn create(self, ns: &str) {
        if self == Kind::Mysql {
            sql(self, &format!("CREATE DATABASE {ns}"));
        }
    }

    /// Removes namespace `ns` and everything in it.
    fn drop_namespace(self, ns: &str) {
        match self {
            Kind::Postgres => sql(self, &format!("DROP SCHEMA IF EXISTS {ns} CASCADE")),
            Kind::Mysql => sql(self, &format!("DROP DATABASE IF EXISTS {ns}")),
            Kind::Redis => {
                let keys = Command::new("redis-cli")
                    .args(["-h", "127.0.0.1", "--scan", "--pattern", &format!("{ns}:*")])
                    .output()
                    .expect("redis-cli");
                let keys = String::from_utf8_lossy(&keys.stdout).into_owned();
                let keys: Vec<&str> = keys.lines().filter(|k| !k.is_empty()).collect();
                for chunk in keys.chunks(500) {
                    let _ = Command::new("redis-cli")
                        .args(["-h", "127.0.0.1", "DEL"])
                        .args(chunk)
                        .output();
                }
            }
            Kind::Etcd => {
                let _ = etcdctl(&["del", "--prefix", &format!("{ns}/")]);
            }
            Kind::ZooKeeper => {
                let _ = zkcli(&["deleteall", &format!("/{ns}")]);
            }
        }
    }

    /// Writes `version` as the schema version of namespace `ns`.
    fn set_version(self, ns: &str, version: i64) {
        match self {
            Kind::Postgres => sql(
                self,
                &format!(
                    "UPDATE {ns}.jobguard_meta SET value = {version} WHERE key = 'schema_version'"
                ),
            ),
            Kind::Mysql => sql(
                self,
                &format!(
                    "UPDATE {ns}.jobguard_meta SET value = {version} WHERE name = 'schema_version'"
                ),
            ),
            Kind::Redis => {
                let out = Command::new("redis-cli")
                    .args([
                        "-h",
                        "127.0.0.1",
                        "SET",
                        &format!("{ns}:schema"),
                        &version.to_string(),
                    ])
                    .output()
                    .expect("redis-cli");
                assert!(out.status.success(), "{out:?}");
            }
            Kind::Etcd => {
                etcdctl(&["put", &format!("{ns}/schema"), &version.to_string()])
                    .expect("etcdctl put");
            }
            Kind::ZooKeeper => {
                zkcli(&["set", &format!("/{ns}/schema"), &version.to_string()])
                    .expect("zkCli.sh set");
            }
        }
    }

    fn current_version(self) -> i64 {
        match self {
            Kind::Postgres => jobguard::store::postgres::SCHEMA_VERSION,
            Kind::Mysql => jobguard::store::mysql::SCHEMA_VERSION,
            Kind::Redis => jobguard::store::redis::SCHEMA_VERSION,
            #[cfg(feature = "store-etcd")]
            Kind::Etcd => jobguard::store::etcd::SCHEMA_VERSION,
            #[cfg(not(feature = "store-etcd"))]
            Kind::Etcd => panic!("this build has no etcd store (cargo feature store-etcd)"),
            #[cfg(feature = "store-zookeeper")]
            Kind::ZooKeeper => jobguard::store::zookeeper::SCHEMA_VERSION,
            #[cfg(not(feature = "store-zookeeper"))]
            Kind::ZooKeeper => {
                panic!("this build has no ZooKeeper store (cargo feature store-zookeeper)")
            }
        }
    }

    /// Opens a store at `address`; with `clock`, time is judged by it (see the module docs).
    pub fn open(
        self,
        address: &str,
        clock: Option<&ManualClock>,
    ) -> Result<Box<dyn Store>, StoreError> {
        let clock = clock.map(|c| Arc::new(c.clone()) as Arc<dyn jobguard::clock::Clock>);
        Ok(match self {
            Kind::Postgres => {
                let mut s = jobguard::store::postgres::PostgresStore::open(address)?;
                if let Some(c) = clock {
                    s.judge_time_by(c);
                }
                Box::new(s)
            }
            Kind::Mysql => {
                let mut s = jobguard::store::mysql::MysqlStore::open(address)?;
                if let Some(c) = clock {
                    s.judge_time_by(c);
                }
                Box::new(s)
            }
            Kind::Redis => {
                let mut s = jobguard::store::redis::RedisStore::open(address)?;
                if let Some(c) = clock {
                    s.judge_time_by(c);
                }
                Box::new(s)
            }
            #[cfg(feature = "store-etcd")]
            Kind::Etcd => {
                let mut s = jobguard::store::etcd::EtcdStore::open(address)?;
                if let Some(c) = clock {
                    s.judge_time_by(c);
                }
                Box::new(s)
            }
            #[cfg(feature = "store-zookeeper")]
            Kind::ZooKeeper => {
                let mut s = jobguard::store::zookeeper::ZooKeeperStore::open(address)?;
                if let Some(c) = clock {
                    s.judge_time_by(c);
                }
                Box::new(s)
            }
            #[cfg(not(all(feature = "store-etcd", feature = "store-zookeeper")))]
            _ => {
                let _ = clock;
                jobguard::store::open(address)?
            }
        })
    }
}

/// Runs one SQL statement as the server's administrator with its command-line client.
pub fn sql(kind: Kind, statement: &str) {
    if let Err(e) = try_sql(kind, statement) {
        panic!("{statement}: {e}");
    }
}

/// [`sql`], returning the client's error output on failure.
pub fn try_sql(kind: Kind, statement: &str) -> Result<(), String> {
    let out = match kind {
        Kind::Postgres => Command::new("psql")
            .args([
                "-h",
                "127.0.0.1",
                "-d",
                "test",
                "-v",
                "ON_ERROR_STOP=1",
                "-qc",
                statement,
            ])
            .output(),
        Kind::Mysql => Command::new("mariadb")
            .args(["-uroot", "-h127.0.0.1", "-e", statement])
            .output(),
        Kind::Redis | Kind::Etcd | Kind::ZooKeeper => panic!("no SQL on {kind:?}"),
    }
    .expect("run the SQL client");
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
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

/// Whether the server of `kind` answers on its port; `Some(reason)` if not.
pub fn unreachable(kind: Kind) -> Option<String> {
    let addr = ("127.0.0.1", kind.port()).to_socket_addrs().ok()?.next()?;
    match TcpStream::connect_timeout(&addr, Duration::from_secs(2)) {
        Ok(_) => None,
        Err(e) => Some(format!("{kind:?} server at {addr} not reachable: {e}")),
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
    pub kind: Kind,
    /// Its name.
    pub name: String,
}

impl Namespace {
    /// Creates a fresh namespace, or `None` (after [`super::go_on`]) if the server is down.
    pub fn new(kind: Kind, test: &str) -> Option<Namespace> {
        if !super::go_on(test, unreachable(kind)) {
            return None;
        }
        let name = namespace();
        kind.create(&name);
        Some(Namespace { kind, name })
    }

    /// The address of this namespace on the real server.
    pub fn address(&self) -> String {
        self.kind
            .address(&format!("127.0.0.1:{}", self.kind.port()), &self.name)
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        self.kind.drop_namespace(&self.name);
    }
}

/// A conformance env on a real server: a fresh namespace and a manual clock whose time
/// the store's statements use.
pub struct RemoteEnv {
    ns: Namespace,
    clock: ManualClock,
}

/// A fresh [`RemoteEnv`] for `kind`, or `None` when its server is down (outside CI).
pub fn env(kind: Kind, test: &str) -> Option<Box<dyn Env>> {
    let ns = Namespace::new(kind, test)?;
    Some(Box::new(RemoteEnv {
        ns,
        clock: ManualClock::new(T0),
    }))
}

impl Env for RemoteEnv {
    fn connect(&self) -> Result<Box<dyn Store>, StoreError> {
        self.ns.kind.open(&self.ns.address(), Some(&self.clock))
    }
    fn advance(&self, usec: i64) {
        self.clock.advance(usec);
    }
    fn set_schema_version(&self, version: i64) {
        self.ns.kind.set_version(&self.ns.name, version);
    }
    fn current_schema_version(&self) -> i64 {
        self.ns.kind.current_version()
    }
    fn store_clock_is_host_clock(&self) -> bool {
        // etcd has no clock a client can read: "now" is the host's.
        self.ns.kind == Kind::Etcd
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
}

impl Proxy {
    /// Starts a proxy to `127.0.0.1:target_port`.
    pub fn start(target_port: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind proxy");
        let listen = listener.local_addr().expect("proxy address").to_string();
        let frozen = Arc::new(AtomicBool::new(false));
        let stop = Arc::new(AtomicBool::new(false));
        let generation = Arc::new(AtomicU32::new(0));
        let (f, s, g) = (frozen.clone(), stop.clone(), generation.clone());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                if s.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(client) = client else { continue };
                let Ok(server) = TcpStream::connect(("127.0.0.1", target_port)) else {
                    continue;
                };
                for (from, to) in [
                    (client.try_clone(), server.try_clone()),
                    (server.try_clone(), client.try_clone()),
                ] {
                    let (Ok(from), Ok(to)) = (from, to) else {
                        continue;
                    };
                    let (f, s, g) = (f.clone(), s.clone(), g.clone());
                    let born = g.load(Ordering::SeqCst);
                    std::thread::spawn(move || pump(from, to, &f, &s, &g, born));
                }
            }
        });
        Proxy {
            listen,
            frozen,
            stop,
            generation,
        }
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
) {
    let _ = from.set_read_timeout(Some(Duration::from_millis(20)));
    let mut buf = [0u8; 16384];
    let cut = || generation.load(Ordering::SeqCst) != born;
    loop {
        if stop.load(Ordering::SeqCst) || cut() {
            break;
        }
        if frozen.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(10));
            continue;
        }
        match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
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
pub fn server_clock_judges(kind: Kind, test: &str) {
    let Some(ns) = Namespace::new(kind, test) else {
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
    // The same machine after a reboot (another boot, another process): a lapsed lease is
    // not kept from it for the grace another machine waits (rules::FOREIGN_GRACE_USEC).
    let mut other = request("sync", T0, 2, 2, false);
    other.holder.machine_id = holder(1).machine_id;
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
    assert_eq!(a.renew(&lease, Duration::from_secs(1)).unwrap(), None);
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
    let Some(ns) = Namespace::new(Kind::Etcd, test) else {
        return;
    };
    const GRANTS: u32 = 600;
    // Reports of 8 KiB make a read of the history (about 5 MB in 19 pages) take longer
    // than the time between two compactions below, so most reads see one.
    let mut done = finish(jobguard::ledger::Outcome::Failed);
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
            s.resolve("sync", slot, jobguard::ledger::Resolution::Held)
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
    let Some(ns) = Namespace::new(Kind::Etcd, test) else {
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
    // The same machine after a reboot: no grace for a lapsed lease (see
    // server_clock_judges), so only the lease itself is in the way.
    let other = |r: u32| {
        let mut o = request("sync", T0, 2, r, false);
        o.holder.machine_id = holder(1).machine_id;
        o.ttl = Duration::from_secs(2);
        o
    };
    assert!(
        matches!(b.claim(&other(2)).unwrap(), Claim::Busy { .. }),
        "a clock an hour ahead must not see the lease expired"
    );
    assert!(a.renew(&lease, Duration::from_secs(2)).unwrap().is_some());
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
    assert_eq!(a.renew(&lease, Duration::from_secs(2)).unwrap(), None);
}

/// A store that cannot be reached when a run starts answers `Unavailable` (not a hang,
/// not another error), with the address's password masked.
pub fn outage_at_start(kind: Kind) {
    // Port 1 on loopback: nothing listens there, connections are refused.
    let address = match kind {
        Kind::Postgres => "postgres://root:hunter2@127.0.0.1:1/test".to_string(),
        Kind::Mysql => "mysql://root:hunter2@127.0.0.1:1/test".to_string(),
        Kind::Redis => "redis://:hunter2@127.0.0.1:1/0".to_string(),
        Kind::Etcd => "etcd://root:hunter2@127.0.0.1:1".to_string(),
        Kind::ZooKeeper => "zookeeper://root:hunter2@127.0.0.1:1".to_string(),
    };
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
pub fn outage_during_run(kind: Kind, test: &str) {
    let Some(ns) = Namespace::new(kind, test) else {
        return;
    };
    let proxy = Proxy::start(kind.port());
    let address = kind.address(&proxy.listen, &ns.name);
    let mut s = jobguard::store::open(&address).unwrap();
    let lease = match s.claim(&request("sync", T0, 1, 1, false)).unwrap() {
        Claim::Claimed { lease, .. } => lease,
        other => panic!("expected Claimed, got {other:?}"),
    };
    proxy.freeze(true);
    let err = s.renew(&lease, Duration::from_secs(60)).unwrap_err();
    assert!(matches!(err, StoreError::Unavailable { .. }), "{err}");
    proxy.freeze(false);
    let until = s.renew(&lease, Duration::from_secs(60)).unwrap();
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
pub fn success_is_unique_in_the_schema(kind: Kind, test: &str) {
    let Some(ns) = Namespace::new(kind, test) else {
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
            &jobguard::ledger::Finish {
                outcome: jobguard::ledger::Outcome::Succeeded,
                reason: None,
                exit_status: Some(0),
                report: Default::default(),
                resolution: None,
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
    let (no, yes) = match kind {
        Kind::Postgres => ("false", "true"),
        _ => ("0", "1"),
    };
    let refused = try_sql(kind, &copy("copy1", no)).expect_err("a second success was stored");
    assert!(
        refused.to_lowercase().contains("duplicate"),
        "refused for another reason: {refused}"
    );
    sql(kind, &copy("copy2", yes));
}

/// A store written by jobguard's schema 1 (the claim of that version, no queued-slot
/// index, Redis without the `slots:`/`queued:` keys) with a queued re-run in it: the
/// first claim of this jobguard migrates it and finds the queued slot.
pub fn upgrade_from_schema_1(kind: Kind, test: &str) {
    use jobguard::ledger::Resolution;
    let Some(ns) = Namespace::new(kind, test) else {
        return;
    };
    let clock = ManualClock::new(T0);
    let (a, b) = (T0 - 2 * 86_400_000_000, T0 - 86_400_000_000);
    {
        let mut s = kind.open(&ns.address(), Some(&clock)).expect("open");
        let (_, run) = match s.claim(&request("sync", a, 1, 1, false)).expect("claim") {
            Claim::Claimed { lease, run, .. } => (lease, run),
            other => panic!("{other:?}"),
        };
        assert!(s.interrupt(&run, "boot", Resolution::Queued).unwrap());
    }
    // Back to what schema 1 left.
    downgrade_to_schema_1(kind, &ns);
    let mut s = kind.open(&ns.address(), Some(&clock)).expect("open");
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
    // The schema is the current one now: a fresh connection does not migrate again.
    let mut again = kind.open(&ns.address(), Some(&clock)).expect("open");
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
fn downgrade_to_schema_1(kind: Kind, ns: &Namespace) {
    let n = &ns.name;
    match kind {
        Kind::Postgres => sql(
            kind,
            &format!(
                "SET search_path = {n};
                 DROP INDEX jobguard_run_queued;
                 DROP FUNCTION jobguard_claim(bigint, bigint, text, bigint, text, text,
                     boolean, text, text, text, text, text, text, bigint, bigint, bigint,
                     bigint, bigint, boolean, boolean);
                 CREATE FUNCTION jobguard_claim(bigint, bigint, text, bigint, text, text,
                     boolean, text, text, text, text, text, text, bigint, bigint, bigint)
                     RETURNS SETOF text LANGUAGE sql AS 'SELECT NULL::text WHERE false';
                 UPDATE jobguard_meta SET value = 1 WHERE key = 'schema_version';"
            ),
        ),
        Kind::Mysql => {
            sql(
                kind,
                &format!(
                    "USE {n};
                     DROP INDEX jobguard_run_queued ON jobguard_run;
                     DROP PROCEDURE jobguard_claim;
                     CREATE PROCEDURE jobguard_claim(IN a1 BIGINT, IN a2 BIGINT,
                         IN a3 BLOB, IN a4 BIGINT, IN a5 BLOB, IN a6 BLOB, IN a7 TINYINT,
                         IN a8 BLOB, IN a9 BLOB, IN a10 BLOB, IN a11 BLOB, IN a12 BLOB,
                         IN a13 BLOB, IN a14 BIGINT, IN a15 BIGINT, IN a16 BIGINT) BEGIN END;
                     UPDATE jobguard_meta SET value = 1 WHERE name = 'schema_version';"
                ),
            );
        }
        Kind::Redis => {
            let out = Command::new("redis-cli")
                .args(["-h", "127.0.0.1", "DEL"])
                .args([format!("{n}:slots:sync"), format!("{n}:queued:sync")])
                .output()
                .expect("redis-cli");
            assert!(out.status.success(), "{out:?}");
            kind.set_version(n, 1);
        }
        Kind::Etcd | Kind::ZooKeeper => panic!("{kind:?} has had one layout only"),
    }
}

/// Hosts starting together on a store of schema 1: every one's first claim (each for a
/// job of its own, on its own connection) migrates or waits for the migration, and none
/// fails.
pub fn concurrent_upgrade_from_schema_1(kind: Kind, test: &str) {
    let Some(ns) = Namespace::new(kind, test) else {
        return;
    };
    {
        let mut s = kind.open(&ns.address(), None).expect("open");
        s.init().expect("init");
    }
    for round in 0..3 {
        downgrade_to_schema_1(kind, &ns);
        let hosts = 8;
        let barrier = Arc::new(std::sync::Barrier::new(hosts));
        let threads: Vec<_> = (0..hosts)
            .map(|i| {
                let address = ns.address();
                let barrier = barrier.clone();
                std::thread::spawn(move || {
                    let mut s = kind.open(&address, None).expect("open");
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

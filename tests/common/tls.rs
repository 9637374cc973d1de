//! Private TLS servers for the store TLS tests: a throwaway certificate authority and a
//! server certificate made with `openssl`, and a Redis, MariaDB, PostgreSQL or etcd server of
//! this test process that speaks only TLS, on a free port of 127.0.0.1 and 127.0.0.2.
//!
//! The server certificate names `127.0.0.1` and `localhost` (subjectAltName), not
//! `127.0.0.2`: connecting to 127.0.0.2 (also loopback on Linux) is the wrong host name.
//!
//! One server per kind serves every test of the process ([`redis`], [`mariadb`]). It is
//! started through `sh`, which reads its standard input from this process: when this
//! process ends, however it ends, the shell reads end-of-file, kills the server and
//! removes its directory. A missing `openssl`, `redis-server`, `mariadb-install-db`,
//! `mariadbd`, PostgreSQL's `initdb` and `postgres` (`/usr/lib/postgresql/N/bin`), `psql`
//! or (as root) the `postgres` user skips the tests outside CI and fails them in CI
//! ([`super::go_on`]).

use std::fs::Permissions;
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// A running TLS-only server of this test process.
pub struct Server {
    /// Its TLS port on 127.0.0.1 and 127.0.0.2.
    pub port: u16,
    /// The directory holding the certificates (and the server's files).
    pub dir: PathBuf,
    /// How long generating the certificates and starting the server took.
    pub startup: Duration,
    /// The watcher shell: the server lives while this pipe is open.
    _watch: Mutex<(Child, ChildStdin)>,
}

impl Server {
    /// The PEM file of the private certificate authority.
    pub fn ca(&self) -> PathBuf {
        self.dir.join("ca.pem")
    }
}

/// Whether `program` can be run (found on `PATH` or as a path).
fn missing(programs: &[&str]) -> Option<String> {
    let gone: Vec<&str> = programs
        .iter()
        .copied()
        .filter(|p| {
            Command::new("sh")
                .args(["-c", "command -v \"$1\"", "sh", p])
                .stdout(Stdio::null())
                .status()
                .map_or(true, |s| !s.success())
        })
        .collect();
    (!gone.is_empty()).then(|| format!("not installed: {}", gone.join(", ")))
}

/// A port that was free on 127.0.0.1 a moment ago.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

fn run(cmd: &mut Command) -> Result<(), String> {
    let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{cmd:?}: {}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// Makes `ca.pem` and `ca.key` in `dir`: a certificate authority named `CN=common_name`,
/// with an EC P-256 key, valid for 2 days.
pub fn make_ca(dir: &Path, common_name: &str) -> Result<(), String> {
    run(Command::new("openssl").current_dir(dir).args([
        "req",
        "-x509",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "2",
        "-subj",
        &format!("/CN={common_name}"),
    ]))
}

/// Makes `ca.pem` (a certificate authority, [`make_ca`]) and `server.pem`/`server.key`
/// (signed by it, for 127.0.0.1 and localhost) in `dir`, with EC P-256 keys valid for 2
/// days.
pub fn make_certificates(dir: &Path) -> Result<(), String> {
    let ossl = || {
        let mut c = Command::new("openssl");
        c.current_dir(dir);
        c
    };
    make_ca(dir, "jobguard test CA")?;
    run(ossl().args([
        "req",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
        "-subj",
        "/CN=localhost",
    ]))?;
    std::fs::write(
        dir.join("server.ext"),
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n\
         keyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n",
    )
    .map_err(|e| e.to_string())?;
    run(ossl().args([
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.pem",
        "-days",
        "2",
        "-extfile",
        "server.ext",
    ]))?;
    Ok(())
}

/// Starts `program args` under a watcher shell that kills it with SIGKILL and removes
/// `dir` when this process's end of the pipe closes.
fn watch(dir: &Path, program: &str, args: &[String]) -> Result<(Child, ChildStdin), String> {
    watch_with(dir, "KILL", program, args)
}

/// [`watch`], stopping the server with `signal` (a name for `kill -s`) instead.
fn watch_with(
    dir: &Path,
    signal: &str,
    program: &str,
    args: &[String],
) -> Result<(Child, ChildStdin), String> {
    let mut child = Command::new("sh")
        .args([
            "-c",
            // The server runs in the background (its standard input is /dev/null); `read`
            // returns at end-of-file, when this process is gone or drops the pipe.
            "dir=$1; sig=$2; shift 2; \"$@\" >\"$dir/server.log\" 2>&1 & pid=$!; \
             read -r _; kill -s \"$sig\" \"$pid\"; wait \"$pid\"; rm -rf \"$dir\"",
            "sh",
        ])
        .arg(dir)
        .arg(signal)
        .arg(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        // The shell's own "Killed" notice at the end; the server writes to its log.
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("sh: {e}"))?;
    let stdin = child.stdin.take().ok_or("no pipe to the watcher")?;
    Ok((child, stdin))
}

/// Polls `ready` every 50 ms until it holds, at most `timeout`; the server's log on failure.
fn wait_ready(
    dir: &Path,
    timeout: Duration,
    mut ready: impl FnMut() -> bool,
) -> Result<(), String> {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if ready() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let log = std::fs::read_to_string(dir.join("server.log")).unwrap_or_default();
    Err(format!(
        "server not ready after {timeout:?}; its log:\n{log}"
    ))
}

fn temp_dir(kind: &str) -> Result<PathBuf, String> {
    // Kept: the watcher removes it after the server is gone.
    tempfile::Builder::new()
        .prefix(&format!("jobguard-tls-{kind}-"))
        .tempdir()
        .map(|d| d.keep())
        .map_err(|e| e.to_string())
}

fn start_redis() -> Result<Server, String> {
    if let Some(why) = missing(&["openssl", "redis-server", "redis-cli"]) {
        return Err(why);
    }
    let started = Instant::now();
    let dir = temp_dir("redis")?;
    make_certificates(&dir)?;
    let port = free_port();
    let file = |name: &str| dir.join(name).display().to_string();
    let args: Vec<String> = [
        "--port",
        "0",
        "--tls-port",
        &port.to_string(),
        "--bind",
        "127.0.0.1",
        "127.0.0.2",
        "--tls-cert-file",
        &file("server.pem"),
        "--tls-key-file",
        &file("server.key"),
        "--tls-ca-cert-file",
        &file("ca.pem"),
        "--tls-auth-clients",
        "no",
        "--save",
        "",
        "--appendonly",
        "no",
        "--daemonize",
        "no",
        "--dir",
        &dir.display().to_string(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let watcher = watch(&dir, "redis-server", &args)?;
    wait_ready(&dir, Duration::from_secs(20), || {
        redis_cli_at(&dir, port, &["PING"]).is_ok_and(|o| o.trim() == "PONG")
    })?;
    Ok(Server {
        port,
        dir,
        startup: started.elapsed(),
        _watch: Mutex::new(watcher),
    })
}

fn redis_cli_at(dir: &Path, port: u16, args: &[&str]) -> Result<String, String> {
    let out = Command::new("redis-cli")
        .args(["--tls", "--cacert"])
        .arg(dir.join("ca.pem"))
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .output()
        .map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

fn start_etcd() -> Result<Server, String> {
    if let Some(why) = missing(&["openssl", "etcd", "etcdctl"]) {
        return Err(why);
    }
    let started = Instant::now();
    let dir = temp_dir("etcd")?;
    make_certificates(&dir)?;
    let port = free_port();
    let peer = free_port();
    let file = |name: &str| dir.join(name).display().to_string();
    let args: Vec<String> = vec![
        "--name".into(),
        "jobguard-tls".into(),
        "--data-dir".into(),
        file("data"),
        "--listen-client-urls".into(),
        format!("https://127.0.0.1:{port},https://127.0.0.2:{port}"),
        "--advertise-client-urls".into(),
        format!("https://127.0.0.1:{port}"),
        "--listen-peer-urls".into(),
        format!("http://127.0.0.1:{peer}"),
        "--initial-advertise-peer-urls".into(),
        format!("http://127.0.0.1:{peer}"),
        "--initial-cluster".into(),
        format!("jobguard-tls=http://127.0.0.1:{peer}"),
        "--cert-file".into(),
        file("server.pem"),
        "--key-file".into(),
        file("server.key"),
    ];
    let watcher = watch(&dir, "etcd", &args)?;
    wait_ready(&dir, Duration::from_secs(20), || {
        etcdctl_at(&dir, port, &["endpoint", "health"]).is_ok()
    })?;
    Ok(Server {
        port,
        dir,
        startup: started.elapsed(),
        _watch: Mutex::new(watcher),
    })
}

fn etcdctl_at(dir: &Path, port: u16, args: &[&str]) -> Result<String, String> {
    let out = Command::new("etcdctl")
        .env("ETCDCTL_API", "3")
        .arg("--cacert")
        .arg(dir.join("ca.pem"))
        .args(["--endpoints", &format!("https://127.0.0.1:{port}")])
        .args(args)
        .output()
        .map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// The Java classes of Debian's ZooKeeper server with TLS: its jar needs Netty's codec,
/// which `zkServer.sh`'s class path leaves out.
const ZOOKEEPER_CLASSES: &str =
    "/etc/zookeeper/conf:/usr/share/java/zookeeper.jar:/usr/share/java/netty-codec.jar";

fn start_zookeeper() -> Result<Server, String> {
    if let Some(why) = missing(&["openssl", "java"]) {
        return Err(why);
    }
    for jar in [
        "/usr/share/java/zookeeper.jar",
        "/usr/share/java/netty-codec.jar",
    ] {
        if !Path::new(jar).is_file() {
            return Err(format!("not installed: {jar}"));
        }
    }
    let started = Instant::now();
    let dir = temp_dir("zookeeper")?;
    make_certificates(&dir)?;
    let file = |name: &str| dir.join(name).display().to_string();
    // ZooKeeper reads a PEM key store: the key, then the certificate.
    let key = std::fs::read_to_string(dir.join("server.key")).map_err(|e| e.to_string())?;
    let cert = std::fs::read_to_string(dir.join("server.pem")).map_err(|e| e.to_string())?;
    std::fs::write(dir.join("keystore.pem"), format!("{key}{cert}")).map_err(|e| e.to_string())?;
    std::fs::create_dir(dir.join("data")).map_err(|e| e.to_string())?;
    let port = free_port();
    // TLS only (no clientPort), on every address: 127.0.0.2 serves the wrong-name case.
    let config = [
        "tickTime=2000".to_string(),
        format!("dataDir={}", file("data")),
        format!("secureClientPort={port}"),
        "serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory".to_string(),
        format!("ssl.keyStore.location={}", file("keystore.pem")),
        "ssl.keyStore.type=PEM".to_string(),
        format!("ssl.trustStore.location={}", file("ca.pem")),
        "ssl.trustStore.type=PEM".to_string(),
        "ssl.clientAuth=none".to_string(),
        "admin.enableServer=false".to_string(),
        "maxClientCnxns=0".to_string(),
    ];
    std::fs::write(dir.join("zoo.cfg"), config.join("\n") + "\n").map_err(|e| e.to_string())?;
    let args: Vec<String> = vec![
        "-Xmx256m".into(),
        format!("-Dzookeeper.log.dir={}", dir.display()),
        "-cp".into(),
        ZOOKEEPER_CLASSES.into(),
        "org.apache.zookeeper.server.ZooKeeperServerMain".into(),
        file("zoo.cfg"),
    ];
    let watcher = watch(&dir, "java", &args)?;
    // The port listens before the server serves: a session opened then is closed at once
    // ("no available hosts" for the first cases that start together), so ready means a
    // session over TLS opens.
    wait_ready(&dir, Duration::from_secs(30), || {
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
            && zookeeper_session_opens(&dir.join("ca.pem"), port)
    })?;
    Ok(Server {
        port,
        dir,
        startup: started.elapsed(),
        _watch: Mutex::new(watcher),
    })
}

/// Whether a session over TLS opens on the ZooKeeper server at `port` within 2 s, its
/// certificate checked against `ca`; without the client (no `store-zookeeper`), true.
fn zookeeper_session_opens(ca: &Path, port: u16) -> bool {
    #[cfg(feature = "store-zookeeper")]
    {
        let Ok(ca) = std::fs::read_to_string(ca) else {
            return false;
        };
        let Ok(rt) = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        else {
            return false;
        };
        rt.block_on(async {
            let _ = rustls::crypto::ring::default_provider().install_default();
            let Ok(tls) = zookeeper_client::TlsOptions::new().with_pem_ca(&ca) else {
                return false;
            };
            let at = format!("127.0.0.1:{port}");
            let connector = zookeeper_client::Client::connector();
            let connect = connector.with_tls(tls).secure_connect(&at);
            matches!(
                tokio::time::timeout(Duration::from_secs(2), connect).await,
                Ok(Ok(_))
            )
        })
    }
    #[cfg(not(feature = "store-zookeeper"))]
    {
        let _ = (ca, port);
        true
    }
}

/// The process's TLS-only ZooKeeper server, started on first use; `None` (after
/// [`super::go_on`]) when it cannot run here.
pub fn zookeeper(test: &str) -> Option<&'static Server> {
    static CELL: OnceLock<Result<Server, String>> = OnceLock::new();
    shared(&CELL, start_zookeeper, test)
}

/// A user of the TLS MariaDB server with every privilege, besides root without password.
pub const MARIADB_USER: &str = "jobguard";
/// [`MARIADB_USER`]'s password: tests check that no message shows it.
pub const MARIADB_PASSWORD: &str = "hunter2";

fn start_mariadb() -> Result<Server, String> {
    if let Some(why) = missing(&["openssl", "mariadb-install-db", "mariadbd", "mariadb"]) {
        return Err(why);
    }
    let started = Instant::now();
    let dir = temp_dir("mariadb")?;
    make_certificates(&dir)?;
    let data = dir.join("data");
    run(Command::new("mariadb-install-db")
        .arg("--no-defaults")
        .arg(format!("--datadir={}", data.display()))
        .args([
            "--user=root",
            "--auth-root-authentication-method=normal",
            "--skip-test-db",
        ]))?;
    let port = free_port();
    let file = |name: &str| dir.join(name).display().to_string();
    let args = vec![
        "--no-defaults".to_string(),
        "--user=root".to_string(),
        format!("--datadir={}", data.display()),
        format!("--socket={}", file("mariadb.sock")),
        format!("--port={port}"),
        "--bind-address=127.0.0.1,127.0.0.2".to_string(),
        format!("--ssl-cert={}", file("server.pem")),
        format!("--ssl-key={}", file("server.key")),
        format!("--ssl-ca={}", file("ca.pem")),
        // Only TLS connections are let in.
        "--require-secure-transport=ON".to_string(),
        "--skip-log-bin".to_string(),
        "--innodb-buffer-pool-size=16M".to_string(),
    ];
    let watcher = watch(&dir, "mariadbd", &args)?;
    wait_ready(&dir, Duration::from_secs(60), || {
        mariadb_at(&dir, port, "SELECT 1").is_ok()
    })?;
    mariadb_at(
        &dir,
        port,
        &format!(
            "CREATE USER '{MARIADB_USER}'@'%' IDENTIFIED BY '{MARIADB_PASSWORD}'; \
             GRANT ALL ON *.* TO '{MARIADB_USER}'@'%'"
        ),
    )?;
    Ok(Server {
        port,
        dir,
        startup: started.elapsed(),
        _watch: Mutex::new(watcher),
    })
}

fn mariadb_at(dir: &Path, port: u16, statement: &str) -> Result<(), String> {
    run(Command::new("mariadb")
        .args(["-uroot", "-h127.0.0.1", &format!("-P{port}"), "--ssl"])
        .arg(format!("--ssl-ca={}", dir.join("ca.pem").display()))
        .args(["-e", statement]))
}

impl Server {
    /// Runs `redis-cli` over TLS against this (Redis) server; its output.
    pub fn redis_cli(&self, args: &[&str]) -> String {
        redis_cli_at(&self.dir, self.port, args).expect("redis-cli")
    }

    /// Runs `etcdctl` over TLS against this (etcd) server.
    pub fn etcdctl(&self, args: &[&str]) -> String {
        etcdctl_at(&self.dir, self.port, args).expect("etcdctl")
    }

    /// Runs one SQL statement as root over TLS against this (MariaDB) server.
    pub fn sql(&self, statement: &str) {
        if let Err(e) = mariadb_at(&self.dir, self.port, statement) {
            panic!("{statement}: {e}");
        }
    }
}

fn shared(
    cell: &'static OnceLock<Result<Server, String>>,
    start: fn() -> Result<Server, String>,
    test: &str,
) -> Option<&'static Server> {
    match cell.get_or_init(start) {
        Ok(server) => Some(server),
        Err(why) => {
            super::go_on(test, Some(why.clone()));
            None
        }
    }
}

/// The process's TLS-only Redis server, started on first use; `None` (after
/// [`super::go_on`]) when it cannot run here.
pub fn redis(test: &str) -> Option<&'static Server> {
    static CELL: OnceLock<Result<Server, String>> = OnceLock::new();
    shared(&CELL, start_redis, test)
}

/// The process's TLS-only etcd server, started on first use; `None` (after
/// [`super::go_on`]) when it cannot run here.
pub fn etcd(test: &str) -> Option<&'static Server> {
    static CELL: OnceLock<Result<Server, String>> = OnceLock::new();
    shared(&CELL, start_etcd, test)
}

/// The process's TLS-only MariaDB server (root without password, TLS required), started
/// on first use; `None` (after [`super::go_on`]) when it cannot run here.
pub fn mariadb(test: &str) -> Option<&'static Server> {
    static CELL: OnceLock<Result<Server, String>> = OnceLock::new();
    shared(&CELL, start_mariadb, test)
}

/// The user the private PostgreSQL server runs as when this process is root (`initdb`
/// and `postgres` refuse to run as root).
const POSTGRES_OS_USER: &str = "postgres";

/// The newest PostgreSQL server installed (`/usr/lib/postgresql/N/bin`, Debian's layout).
fn postgres_bin() -> Result<PathBuf, String> {
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .map_err(|e| format!("no PostgreSQL server installed: /usr/lib/postgresql: {e}"))?
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let version = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            (bin.join("initdb").is_file() && bin.join("postgres").is_file())
                .then_some((version, bin))
        })
        .collect();
    found.sort();
    found
        .pop()
        .map(|(_, bin)| bin)
        .ok_or_else(|| "no PostgreSQL server installed under /usr/lib/postgresql".to_string())
}

/// `program` as the server's user: through `setpriv` (which execs, so the watcher's
/// signal reaches the server itself) when this process is root, else as this user.
fn as_server_user(program: &Path, uid: Option<(u32, u32)>) -> (String, Vec<String>) {
    match uid {
        Some((uid, gid)) => (
            "setpriv".to_string(),
            vec![
                format!("--reuid={uid}"),
                format!("--regid={gid}"),
                "--clear-groups".to_string(),
                "--".to_string(),
                program.display().to_string(),
            ],
        ),
        None => (program.display().to_string(), Vec::new()),
    }
}

/// The user and database of the private PostgreSQL server (trust authentication over
/// TLS, superuser).
pub const POSTGRES_USER: &str = "postgres";

/// The uid and gid PostgreSQL's programs run as: [`POSTGRES_OS_USER`]'s when this process
/// is root (`initdb`, `postgres` and `pgbouncer` refuse root), else `None` (this user).
fn postgres_os_user() -> Result<Option<(u32, u32)>, String> {
    if !nix::unistd::geteuid().is_root() {
        return Ok(None);
    }
    let user = nix::unistd::User::from_name(POSTGRES_OS_USER)
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("no user {POSTGRES_OS_USER:?} to run the server as"))?;
    Ok(Some((user.uid.as_raw(), user.gid.as_raw())))
}

/// A fresh server directory ([`temp_dir`]) with the certificates, the server's key
/// readable by its owner only (PostgreSQL and PgBouncer refuse any other).
fn private_key_dir(kind: &str) -> Result<PathBuf, String> {
    let dir = temp_dir(kind)?;
    make_certificates(&dir)?;
    std::fs::set_permissions(dir.join("server.key"), Permissions::from_mode(0o600))
        .map_err(|e| e.to_string())?;
    Ok(dir)
}

fn start_postgres() -> Result<Server, String> {
    if let Some(why) = missing(&["openssl", "psql", "setpriv"]) {
        return Err(why);
    }
    let bin = postgres_bin()?;
    let uid = postgres_os_user()?;
    let started = Instant::now();
    let dir = private_key_dir("postgres")?;
    let file = |name: &str| dir.join(name).display().to_string();
    // The server's own files (data, socket) in a directory of its user; the directory
    // above and `ca.pem` stay root's: jobguard, as root, refuses an `sslrootcert` that
    // another user could change.
    let server_dir = dir.join("pg");
    std::fs::create_dir(&server_dir).map_err(|e| e.to_string())?;
    if let Some((uid, gid)) = uid {
        std::fs::set_permissions(&dir, Permissions::from_mode(0o755)).map_err(|e| e.to_string())?;
        for path in [
            server_dir.clone(),
            dir.join("server.key"),
            dir.join("server.pem"),
        ] {
            std::os::unix::fs::chown(&path, Some(uid), Some(gid))
                .map_err(|e| format!("chown {}: {e}", path.display()))?;
        }
    }
    let data = server_dir.join("data");
    let (program, mut args) = as_server_user(&bin.join("initdb"), uid);
    args.extend(
        [
            "-D",
            &data.display().to_string(),
            "-U",
            POSTGRES_USER,
            "-A",
            "trust",
            "-E",
            "UTF8",
            "--locale=C",
            "--no-sync",
        ]
        .iter()
        .map(|s| s.to_string()),
    );
    run(Command::new(&program).args(&args))?;
    // TLS connections from loopback only: a plain connection finds no line and is refused.
    std::fs::write(
        data.join("pg_hba.conf"),
        "hostssl all all 127.0.0.0/8 trust\n",
    )
    .map_err(|e| e.to_string())?;
    let port = free_port();
    let (program, mut args) = as_server_user(&bin.join("postgres"), uid);
    args.extend([
        "-D".to_string(),
        data.display().to_string(),
        "-p".to_string(),
        port.to_string(),
        // The socket in the test's directory, not /var/run/postgresql.
        "-k".to_string(),
        server_dir.display().to_string(),
        "-c".to_string(),
        "listen_addresses=127.0.0.1,127.0.0.2".to_string(),
        "-c".to_string(),
        "ssl=on".to_string(),
        "-c".to_string(),
        format!("ssl_cert_file={}", file("server.pem")),
        "-c".to_string(),
        format!("ssl_key_file={}", file("server.key")),
        "-c".to_string(),
        "fsync=off".to_string(),
        "-c".to_string(),
        "max_connections=200".to_string(),
    ]);
    // SIGQUIT: immediate shutdown, which still removes the server's shared memory.
    let watcher = watch_with(&dir, "QUIT", &program, &args)?;
    wait_ready(&dir, Duration::from_secs(30), || {
        psql_at(&dir, port, "SELECT 1").is_ok()
    })?;
    Ok(Server {
        port,
        dir,
        startup: started.elapsed(),
        _watch: Mutex::new(watcher),
    })
}

fn psql_at(dir: &Path, port: u16, statement: &str) -> Result<String, String> {
    let out = Command::new("psql")
        .arg(format!(
            "host=127.0.0.1 port={port} user={POSTGRES_USER} dbname={POSTGRES_USER} \
             sslmode=verify-full sslrootcert={} connect_timeout=5",
            dir.join("ca.pem").display()
        ))
        .args(["-X", "-v", "ON_ERROR_STOP=1", "-Atc", statement])
        .output()
        .map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

impl Server {
    /// Runs SQL as the superuser over TLS (certificate checked) against this
    /// (PostgreSQL) server; its output (`psql -At`).
    pub fn psql(&self, statement: &str) -> String {
        psql_at(&self.dir, self.port, statement).unwrap_or_else(|e| panic!("{statement}: {e}"))
    }
}

/// PgBouncer in transaction mode (`pool_mode = transaction`, two server connections per
/// database and user), in front of the shared PostgreSQL at 127.0.0.1:5432 (plain, trust),
/// speaking only TLS to its clients with this process's certificate, any database, the
/// user `root` (trust). As a fleet runs it: no session state survives a transaction, and
/// a client waits in PgBouncer's queue for a server connection.
fn start_pgbouncer() -> Result<Server, String> {
    if let Some(why) = missing(&["openssl", "psql", "setpriv"]) {
        return Err(why);
    }
    // Not on a user's PATH: Debian puts it in /usr/sbin.
    if !Path::new("/usr/sbin/pgbouncer").is_file() {
        return Err("not installed: /usr/sbin/pgbouncer (Debian's pgbouncer)".to_string());
    }
    let uid = postgres_os_user()?;
    let started = Instant::now();
    let dir = private_key_dir("pgbouncer")?;
    let file = |name: &str| dir.join(name).display().to_string();
    let port = free_port();
    std::fs::write(dir.join("users.txt"), "\"root\" \"\"\n\"postgres\" \"\"\n")
        .map_err(|e| e.to_string())?;
    let config = [
        "[databases]".to_string(),
        "* = host=127.0.0.1 port=5432".to_string(),
        "[pgbouncer]".to_string(),
        "listen_addr = 127.0.0.1".to_string(),
        format!("listen_port = {port}"),
        "unix_socket_dir =".to_string(),
        "auth_type = trust".to_string(),
        format!("auth_file = {}", file("users.txt")),
        "pool_mode = transaction".to_string(),
        "default_pool_size = 2".to_string(),
        "max_client_conn = 2000".to_string(),
        "client_tls_sslmode = require".to_string(),
        format!("client_tls_key_file = {}", file("server.key")),
        format!("client_tls_cert_file = {}", file("server.pem")),
    ];
    std::fs::write(dir.join("pgbouncer.ini"), config.join("\n") + "\n")
        .map_err(|e| e.to_string())?;
    if let Some((uid, gid)) = uid {
        std::fs::set_permissions(&dir, Permissions::from_mode(0o755)).map_err(|e| e.to_string())?;
        for name in ["server.key", "server.pem", "users.txt", "pgbouncer.ini"] {
            std::os::unix::fs::chown(dir.join(name), Some(uid), Some(gid))
                .map_err(|e| format!("chown {name}: {e}"))?;
        }
    }
    let (program, mut args) = as_server_user(Path::new("/usr/sbin/pgbouncer"), uid);
    args.push(file("pgbouncer.ini"));
    let watcher = watch_with(&dir, "INT", &program, &args)?;
    wait_ready(&dir, Duration::from_secs(30), || {
        psql_at(&dir, port, "SELECT 1").is_ok()
    })?;
    Ok(Server {
        port,
        dir,
        startup: started.elapsed(),
        _watch: Mutex::new(watcher),
    })
}

/// The process's PgBouncer in transaction mode ([`start_pgbouncer`]), started on first
/// use; `None` (after [`super::go_on`]) when it cannot run here.
pub fn pgbouncer(test: &str) -> Option<&'static Server> {
    static CELL: OnceLock<Result<Server, String>> = OnceLock::new();
    shared(&CELL, start_pgbouncer, test)
}

/// The process's TLS-only PostgreSQL server (`hostssl` lines only, trust), started on
/// first use; `None` (after [`super::go_on`]) when it cannot run here.
pub fn postgres(test: &str) -> Option<&'static Server> {
    static CELL: OnceLock<Result<Server, String>> = OnceLock::new();
    shared(&CELL, start_postgres, test)
}

/// The address of namespace `ns` on the TLS ZooKeeper `server`, reached as `host`, the
/// certificate checked against the CA file `ca`.
pub fn zookeeper_address(server: &Server, host: &str, ns: &str, ca: &str) -> String {
    format!("zookeepers://{host}:{}/{ns}?ssl-ca={ca}", server.port)
}

#[cfg(feature = "store-zookeeper")]
impl Server {
    /// Sets the data of node `path` on this (ZooKeeper) server, with the client the store
    /// uses (the Java `zkCli.sh` of Debian's package lacks Netty's codec for TLS).
    pub fn zookeeper_set(&self, path: &str, data: &[u8]) {
        let ca = std::fs::read_to_string(self.ca()).expect("the CA");
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        rt.block_on(async {
            let _ = rustls::crypto::ring::default_provider().install_default();
            let tls = zookeeper_client::TlsOptions::new()
                .with_pem_ca(&ca)
                .expect("the CA");
            let client = zookeeper_client::Client::connector()
                .with_tls(tls)
                .secure_connect(&format!("127.0.0.1:{}", self.port))
                .await
                .expect("connect over TLS");
            client.set_data(path, data, None).await.expect("set_data");
        });
    }
}

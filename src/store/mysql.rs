//! The MySQL/MariaDB store: leases and the run ledger shared by every host that names it.
//!
//! Address: `mysql://USER[:PASSWORD]@HOST[:PORT]/DATABASE[?PARAMS]` (also `mariadb://`),
//! the `mysql` crate's URL form (<https://docs.rs/mysql/latest/mysql/struct.Opts.html>).
//! The database must exist; jobguard creates its tables in it.
//!
//! TLS follows the `mysql` client's `--ssl-mode` and `--ssl-ca` (mysql(1), MySQL's
//! "Command Options for Encrypted Connections"), written as address parameters
//! `ssl-mode=MODE` and `ssl-ca=PATH` (`ssl_mode`, `ssl_ca` also work; modes in any case):
//! - `DISABLED` (the default when `ssl-mode` is absent, unlike the `mysql` client):
//!   no TLS.
//! - `PREFERRED`: TLS without checking the certificate if the server offers it, else an
//!   unencrypted connection (a second connect: the client learns what the server offers
//!   only from its greeting).
//! - `REQUIRED`: TLS or no connection, the certificate not checked (it protects against
//!   listening, not against a forged server).
//! - `VERIFY_CA`: as `REQUIRED`, and the certificate must chain to a trusted root; the
//!   host name is not compared.
//! - `VERIFY_IDENTITY`: as `VERIFY_CA`, and the certificate must name the host of the
//!   address (a DNS name or IP address in its subjectAltName).
//!
//! The trusted roots are the file `ssl-ca` names (PEM or DER, by an absolute path; a
//! relative one is refused) when given; otherwise the
//! system's trust-store file (`/etc/ssl/certs/ca-certificates.crt` on Debian, or
//! `SSL_CERT_FILE`), to which the client always adds Mozilla's root list that it carries
//! (`webpki-roots`). As with the `mysql` client, `ssl-ca` without `ssl-mode` means
//! `VERIFY_CA`; with `DISABLED`, `PREFERRED` or `REQUIRED` it is refused as it would
//! check nothing. The client's own TLS parameters (`root_cert_path`, `danger_*`,
//! `cert_chain_path`, `priv_key_path`, `cipher_suites`) are refused; client
//! certificates are not supported. TLS is rustls with the ring provider.
//!
//! Tables: `jobguard_meta` (row `schema_version`), `jobguard_lease` (one row per job,
//! never deleted: a released lease keeps its row with an empty holder, so the fencing
//! token keeps growing) and `jobguard_run` (one row per attempt). MySQL and MariaDB have
//! no partial indexes, so the one-success rule is a stored generated column
//! `success_slot` (the slot when `outcome = 'succeeded' AND forced = 0`, else NULL) with a
//! UNIQUE index on `(job, success_slot)`: NULLs never collide. Identifiers compare
//! byte for byte (`utf8mb4_bin`). Times are BIGINT µs since the epoch by the server's
//! clock: `TIMESTAMPDIFF(MICROSECOND, '1970-01-01', UTC_TIMESTAMP(6))`, which does not
//! depend on the session's time zone.
//!
//! The claim is decided by [`rules::claim`] in [`engine`]'s loop, as on every store: one
//! `SELECT` reads the
//! job's state (the server's time, the schema version, the lease row, the records the
//! rules need) in one consistent read; a refusal is answered from it (one round trip), and
//! a grant is one transaction whose first statement updates the lease row only if its
//! revision `rev` and every column are still as read, then inserts the `running` record
//! and marks the re-run records (four round trips in all). A claim that lost that race
//! reads and decides again. No procedure runs on the server: schema 5 dropped those that
//! jobguards of schema 3 and older call, so such a jobguard finds none, reads the newer
//! version and refuses.
//!
//! Renew, finish, interrupt, unlock and resolve run the same loop ([`engine`]) in one
//! READ COMMITTED transaction sent statement by statement: it locks the job's lease row
//! (`SELECT … FOR UPDATE`), then reads the server's clock and the records, decides and
//! writes, moving the row's `rev` with every write (schema 6), so that a claim's write
//! finds a record changed under the lock even when the rest of the row is not. Values are sent as literals in the text protocol (strings as hex literals, so nothing needs escaping), which
//! avoids the extra prepare round trip of server-side prepared statements. Connecting does not ask the server for its settings
//! (`max_allowed_packet` is given). On a database without the schema, the tool creates it
//! under `GET_LOCK` (hosts starting together do not race) and asks again.
//!
//! Every call has deadlines: connect [`remote::CONNECT_TIMEOUT`], read and write
//! [`remote::CALL_TIMEOUT`]; a failed connection is dropped and the next call reconnects.
//! A statement given up on is stopped with `KILL QUERY` (see `MysqlStore::kill_query`).

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use mysql::prelude::Queryable;
use mysql::{Conn, Opts, OptsBuilder, Row, SslOpts, Value};

use crate::guard::clock::Clock;
use crate::guard::lease::Lease;
use crate::guard::ledger::{Finish, Outcome, Resolution, Run};
use crate::store::engine::{self, Commit, LeaseRead, LeaseWrite, Need, Read, RunRead, Writes};
use crate::store::remote::{self, CALL_TIMEOUT, CANCEL_TIMEOUT, CONNECT_TIMEOUT};
use crate::store::{
    Claim, ClaimRequest, Finished, Mark, RunQuery, ScheduleDecl, Store, StoreError, address, rules,
};

/// The schema version this jobguard writes and understands (`jobguard_meta`).
pub const SCHEMA_VERSION: i64 = 6;

/// The server's clock in µs since the epoch, independent of the session time zone.
const SERVER_NOW: &str = "TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))";

/// The columns of `jobguard_run` that make a record, as `run_from_row` reads them by name.
const RUN_COLUMNS: &str = "r.run_id, r.job, r.slot_usec, r.slot_zone, r.attempt, r.outcome, \
    r.reason, r.exit_status, r.forced, r.trigger_kind, r.host, r.machine_id, r.boot_id, r.pid, \
    r.pid_start, r.invocation_id, r.started_at, r.finished_at, r.fencing_token, r.report, \
    r.resolution";

/// Statements of migration 0 -> 1, each sent on its own: the tables. (Schemas 1 to 4 also
/// made stored procedures that decided on the server; migration 5 drops them.)
fn migration_1() -> Vec<String> {
    vec![
        "CREATE TABLE IF NOT EXISTS jobguard_lease (
            job          VARCHAR(255) NOT NULL PRIMARY KEY,
            holder       VARCHAR(255) NOT NULL,
            host         VARCHAR(255) NOT NULL,
            token        BIGINT       NOT NULL,
            acquired_at  BIGINT       NOT NULL,
            expire_at    BIGINT       NOT NULL
        ) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin"
            .to_string(),
        "CREATE TABLE IF NOT EXISTS jobguard_run (
            seq            BIGINT       NOT NULL AUTO_INCREMENT UNIQUE,
            run_id         VARCHAR(64)  NOT NULL PRIMARY KEY,
            job            VARCHAR(255) NOT NULL,
            slot_usec      BIGINT       NOT NULL,
            slot_zone      VARCHAR(64)  NOT NULL,
            attempt        BIGINT       NOT NULL,
            outcome        VARCHAR(16)  NOT NULL,
            reason         TEXT,
            exit_status    INT,
            forced         TINYINT      NOT NULL,
            trigger_kind   VARCHAR(32)  NOT NULL,
            host           VARCHAR(255) NOT NULL,
            machine_id     VARCHAR(64)  NOT NULL,
            boot_id        VARCHAR(64)  NOT NULL,
            pid            BIGINT       NOT NULL,
            pid_start      BIGINT       NOT NULL,
            invocation_id  VARCHAR(64),
            started_at     BIGINT       NOT NULL,
            finished_at    BIGINT,
            fencing_token  BIGINT       NOT NULL,
            report         TEXT         NOT NULL,
            resolution     VARCHAR(16),
            success_slot   BIGINT AS (CASE WHEN outcome = 'succeeded' AND forced = 0
                                       THEN slot_usec END) STORED,
            CONSTRAINT jobguard_run_outcome CHECK (outcome IN
                ('running', 'succeeded', 'failed', 'interrupted', 'lease_lost')),
            CONSTRAINT jobguard_run_resolution CHECK (resolution IS NULL OR resolution IN
                ('queued', 'held', 'rerun', 'done')),
            UNIQUE KEY jobguard_run_one_success (job, success_slot),
            KEY jobguard_run_slot (job, slot_usec),
            KEY jobguard_run_history (job, started_at)
        ) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin"
            .to_string(),
    ]
}

/// How to encrypt the connection: the address's `ssl-mode`, with MySQL's names
/// (mysql(1) `--ssl-mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SslMode {
    Disabled,
    Preferred,
    Required,
    VerifyCa,
    VerifyIdentity,
}

impl SslMode {
    fn parse(value: &str) -> Option<SslMode> {
        Some(match value.to_ascii_uppercase().as_str() {
            "DISABLED" => SslMode::Disabled,
            "PREFERRED" => SslMode::Preferred,
            "REQUIRED" => SslMode::Required,
            "VERIFY_CA" => SslMode::VerifyCa,
            "VERIFY_IDENTITY" => SslMode::VerifyIdentity,
            _ => return None,
        })
    }

    fn name(self) -> &'static str {
        match self {
            SslMode::Disabled => "DISABLED",
            SslMode::Preferred => "PREFERRED",
            SslMode::Required => "REQUIRED",
            SslMode::VerifyCa => "VERIFY_CA",
            SslMode::VerifyIdentity => "VERIFY_IDENTITY",
        }
    }
}

/// The `mysql` client's own TLS parameters, refused in favour of `ssl-mode` and `ssl-ca`.
const CLIENT_TLS_PARAMS: &[&str] = &[
    "root_cert_path",
    "danger_skip_domain_validation",
    "danger_accept_invalid_certs",
    "cert_chain_path",
    "priv_key_path",
    "cipher_suites",
];

/// The client's TLS options for `mode` (`None`: no TLS), trusting `ca` or else the
/// system's trust-store file as found by `openssl-probe` (as rustls-native-certs does).
fn ssl_opts(mode: SslMode, ca: Option<&str>) -> Option<SslOpts> {
    let roots = || {
        ca.map(std::path::PathBuf::from)
            .or_else(remote::system_trust_file)
    };
    let opts = SslOpts::default();
    match mode {
        SslMode::Disabled => None,
        SslMode::Preferred | SslMode::Required => Some(opts.with_danger_accept_invalid_certs(true)),
        SslMode::VerifyCa => Some(
            opts.with_root_cert_path(roots())
                .with_danger_skip_domain_validation(true),
        ),
        SslMode::VerifyIdentity => Some(opts.with_root_cert_path(roots())),
    }
}

/// The MySQL/MariaDB store: one connection (reconnected after a failure).
pub struct MysqlStore {
    opts: Opts,
    /// `ssl-mode=PREFERRED`: the options without TLS, for a server that offers none.
    plain_fallback: Option<Opts>,
    conn: Option<Conn>,
    /// `KILL QUERY`s for statements given up on ([`MysqlStore::kill_query`]).
    kills: remote::Cancels,
    describe: String,
    schema_ready: bool,
    /// Whether the mark table's namespace column was found as wide as [`MARK_TABLE`]
    /// makes it, or widened ([`WIDEN_MARK_NAMESPACE`]).
    marks_ready: bool,
    test_clock: Option<Arc<dyn Clock>>,
}

/// Whether `e` is a read or write that ran out of [`CALL_TIMEOUT`]: the `mysql` crate
/// reports the socket's timeout as the I/O error `WouldBlock` (`EAGAIN`) or `TimedOut`.
fn timed_out(e: &mysql::Error) -> bool {
    let io = match e {
        mysql::Error::IoError(io) => Some(io),
        mysql::Error::CodecError(codec) => {
            std::error::Error::source(codec).and_then(|s| s.downcast_ref::<std::io::Error>())
        }
        _ => None,
    };
    io.is_some_and(|io| {
        matches!(
            io.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        )
    })
}

impl std::fmt::Debug for MysqlStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MysqlStore")
            .field("describe", &self.describe)
            .finish_non_exhaustive()
    }
}

/// This store's failures: the client's own errors, and those every store shares.
type Fail = engine::Fail<mysql::Error>;

impl From<mysql::Error> for Fail {
    fn from(e: mysql::Error) -> Self {
        Fail::Client(e)
    }
}

/// Sorts the client's errors: a server error that may pass (a lock wait timeout, a
/// deadlock, too many connections, a shutdown, a statement stopped by `KILL QUERY`) and
/// every error of the connection are [`StoreError::Unavailable`]; an unknown database or
/// a refused login is [`StoreError::Address`]; other server errors are
/// [`StoreError::Invalid`] (MariaDB's error codes, `perror`).
impl engine::ClientError for mysql::Error {
    fn store_error(self, store: &str, op: &str) -> StoreError {
        let store = store.to_string();
        match self {
            // Unknown database (1049), refused login (1045): the address is wrong.
            mysql::Error::MySqlError(e) if matches!(e.code, 1045 | 1049) => StoreError::Address {
                address: store,
                detail: if e.code == 1049 {
                    format!(
                        "{op}: {} (jobguard creates its tables, not the database: CREATE DATABASE it first)",
                        e.message
                    )
                } else {
                    format!("{op}: {}", e.message)
                },
            },
            mysql::Error::MySqlError(e) => {
                // Lock wait timeout, deadlock, too many connections (the server's 1040, a
                // user's `max_user_connections` 1203 and `MAX_USER_CONNECTIONS` 1226: others
                // are connected for the moment), shutdown, a statement stopped by `KILL
                // QUERY` (1317, see `kill_query`): retryable.
                let retryable = matches!(e.code, 1205 | 1213 | 1040 | 1203 | 1053 | 1317 | 2006 | 2013)
                    // 1226 also names the hourly limits (`max_questions`, ...), which do not
                    // clear within a run's wait.
                    || (e.code == 1226 && e.message.contains("max_user_connections"));
                let detail = format!("{op}: {}", e.message);
                if retryable {
                    StoreError::Unavailable { store, detail }
                } else {
                    StoreError::Invalid { store, detail }
                }
            }
            e => StoreError::Unavailable {
                store,
                detail: format!("{op}: {e}"),
            },
        }
    }
}

/// Errors that mean "the schema is not there yet, or is older": an older schema version
/// read, no such table (1146) or column (1054: a schema before the column came).
fn missing_schema(e: &Fail) -> bool {
    matches!(e, Fail::Older)
        || matches!(e, Fail::Client(mysql::Error::MySqlError(e)) if matches!(e.code, 1146 | 1054))
}

/// A string as a hex literal: safe in any SQL text, whatever it contains.
fn lit(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 2 + 3);
    out.push_str("X'");
    for b in s.bytes() {
        let _ = write!(out, "{b:02x}");
    }
    out.push('\'');
    out
}

fn lit_opt(s: Option<&str>) -> String {
    s.map_or_else(|| "NULL".to_string(), lit)
}

fn int_opt(n: Option<i64>) -> String {
    n.map_or_else(|| "NULL".to_string(), |n| n.to_string())
}

/// One column of a row as JSON: text for strings, numbers for integers.
fn json_value(value: &Value) -> serde_json::Value {
    match value {
        Value::NULL => serde_json::Value::Null,
        Value::Bytes(b) => serde_json::Value::String(String::from_utf8_lossy(b).into_owned()),
        Value::Int(i) => serde_json::Value::from(*i),
        Value::UInt(u) => serde_json::Value::from(*u),
        Value::Float(f) => serde_json::Value::from(f64::from(*f)),
        Value::Double(d) => serde_json::Value::from(*d),
        other => serde_json::Value::String(format!("{other:?}")),
    }
}

fn row_object(row: &Row) -> serde_json::Map<String, serde_json::Value> {
    let mut object = serde_json::Map::new();
    for (i, column) in row.columns_ref().iter().enumerate() {
        if let Some(value) = row.as_ref(i) {
            object.insert(column.name_str().into_owned(), json_value(value));
        }
    }
    object
}

fn get_int(object: &serde_json::Map<String, serde_json::Value>, name: &str) -> Option<i64> {
    match object.get(name)? {
        serde_json::Value::Number(n) => n.as_i64(),
        serde_json::Value::String(s) => s.parse().ok(),
        _ => None,
    }
}

fn get_text(object: &serde_json::Map<String, serde_json::Value>, name: &str) -> String {
    match object.get(name) {
        Some(serde_json::Value::String(s)) => s.clone(),
        _ => String::new(),
    }
}

fn lease_from(
    job: &str,
    object: &serde_json::Map<String, serde_json::Value>,
    p: &str,
) -> Result<Lease, Fail> {
    let int = |name: &str| {
        get_int(object, &format!("{p}{name}"))
            .ok_or_else(|| Fail::Data(format!("job {job}: lease without {name}")))
    };
    Ok(Lease {
        job: job.to_string(),
        holder: get_text(object, &format!("{p}holder")),
        host: get_text(object, &format!("{p}host")),
        token: int("token")?,
        acquired_at: int(if p.is_empty() {
            "acquired_at"
        } else {
            "acquired"
        })?,
        expire_at: int(if p.is_empty() { "expire_at" } else { "expire" })?,
        renewal: int("renewal")?,
    })
}

impl MysqlStore {
    /// Parses `address` and prepares a store; connects on the first call.
    ///
    /// # Errors
    /// [`StoreError::Address`] when the address is not a URL the `mysql` client accepts,
    /// `ssl-mode` is not one of MySQL's five modes, `ssl-ca` names a file that cannot be
    /// read or comes with a mode that checks no certificate, or the address uses the
    /// client's own TLS parameters (see the module documentation).
    pub fn open(address: &str) -> Result<MysqlStore, StoreError> {
        super::tls_provider();
        let describe = address::mask(address);
        let address = &remote::encode_password(address);
        let bad = |detail: String| StoreError::Address {
            address: describe.clone(),
            detail,
        };
        if let Some(key) =
            remote::given_twice(address, &[&["ssl-mode", "ssl_mode"], &["ssl-ca", "ssl_ca"]])
        {
            return Err(bad(format!("{key} is given more than once")));
        }
        let (rest, ours) =
            remote::take_params(address, &["ssl-mode", "ssl_mode", "ssl-ca", "ssl_ca"]);
        let mode = ours[0].clone().or_else(|| ours[1].clone());
        let ca = ours[2].clone().or_else(|| ours[3].clone());
        let mode = match (mode.as_deref(), &ca) {
            (None, None) => SslMode::Disabled,
            // As the mysql client: a CA file alone asks for the chain to be checked.
            (None, Some(_)) => SslMode::VerifyCa,
            (Some(m), _) => SslMode::parse(m).ok_or_else(|| {
                bad(format!(
                    "unknown ssl-mode {m:?} (DISABLED, PREFERRED, REQUIRED, VERIFY_CA or VERIFY_IDENTITY)"
                ))
            })?,
        };
        if let Some(ca) = &ca {
            if !matches!(mode, SslMode::VerifyCa | SslMode::VerifyIdentity) {
                return Err(bad(format!(
                    "ssl-ca is only used with ssl-mode=VERIFY_CA or VERIFY_IDENTITY, not {}",
                    mode.name()
                )));
            }
            remote::read_ca_file("ssl-ca", ca, false).map_err(bad)?;
        }
        if let Some((_, query)) = rest.split_once('?')
            && let Some(key) = query
                .split('&')
                .map(|pair| pair.split_once('=').map_or(pair, |(k, _)| k))
                .find(|k| CLIENT_TLS_PARAMS.contains(k))
        {
            return Err(bad(format!(
                "{key} is not supported; use ssl-mode= and ssl-ca= (see the mysql client's --ssl-mode)"
            )));
        }
        let url = match rest.split_once("://") {
            Some((scheme, tail)) if scheme.eq_ignore_ascii_case("mariadb") => {
                format!("mysql://{tail}")
            }
            _ => rest,
        };
        let opts = Opts::from_url(&url).map_err(|e| bad(format!("not a mysql address: {e}")))?;
        let plain: Opts = OptsBuilder::from_opts(opts)
            .tcp_connect_timeout(Some(CONNECT_TIMEOUT))
            .read_timeout(Some(CALL_TIMEOUT))
            .write_timeout(Some(CALL_TIMEOUT))
            .prefer_socket(false)
            .max_allowed_packet(Some(16 * 1024 * 1024))
            .into();
        let opts = OptsBuilder::from_opts(plain.clone())
            .ssl_opts(ssl_opts(mode, ca.as_deref()))
            .into();
        Ok(MysqlStore {
            opts,
            plain_fallback: (mode == SslMode::Preferred).then_some(plain),
            conn: None,
            kills: remote::Cancels::default(),
            describe,
            schema_ready: false,
            marks_ready: false,
            test_clock: None,
        })
    }

    /// Judges time by `clock` instead of the server's clock: every statement that reads
    /// the server's time gets `clock`'s time instead. Only for tests that move time
    /// (the store conformance suite); jobguard itself never calls it.
    #[doc(hidden)]
    pub fn judge_time_by(&mut self, clock: Arc<dyn Clock>) {
        self.test_clock = Some(clock);
    }

    fn test_now(&self) -> String {
        int_opt(self.test_clock.as_ref().map(|c| c.now_usec()))
    }

    fn error(&self, op: &str, fail: Fail) -> StoreError {
        fail.store_error(&self.describe, op, SCHEMA_VERSION)
    }

    fn connect(&self) -> Result<Conn, mysql::Error> {
        match (Conn::new(self.opts.clone()), &self.plain_fallback) {
            (Err(mysql::Error::DriverError(mysql::DriverError::TlsNotSupported)), Some(plain)) => {
                Conn::new(plain.clone())
            }
            (result, _) => result,
        }
    }

    /// Runs `f` on the connection (connecting first if needed); a connection that failed
    /// other than with a server error is dropped.
    fn call<T>(&mut self, f: impl FnOnce(&mut Conn) -> Result<T, Fail>) -> Result<T, Fail> {
        if self.conn.is_none() {
            self.conn = Some(self.connect().map_err(|e| {
                if timed_out(&e) {
                    Fail::Unavailable(format!(
                        "no answer while connecting (within {} s to connect, {} s for each reply)",
                        CONNECT_TIMEOUT.as_secs(),
                        CALL_TIMEOUT.as_secs()
                    ))
                } else {
                    Fail::Client(e)
                }
            })?);
        }
        let Some(conn) = self.conn.as_mut() else {
            return Err(Fail::Data("no connection".to_string()));
        };
        let id = conn.connection_id();
        let result = f(conn);
        if let Err(Fail::Client(e)) = &result
            && !matches!(e, mysql::Error::MySqlError(_))
        {
            self.conn = None;
            if timed_out(e) {
                self.kill_query(id);
                return Err(Fail::Timeout(CALL_TIMEOUT));
            }
        }
        result
    }

    /// Stops the statement that connection `id` runs, as the mysql client does on Ctrl-C
    /// (`KILL QUERY`, MySQL's and MariaDB's `KILL` statement; a user may kill its own
    /// connections' statements). The server goes on with a statement until it next reads
    /// from or writes to its closed connection: one waiting for a lock would run on with
    /// its locks and its thread. Sent from a thread of its own, beside whatever this store
    /// does next; an error (the statement ended meanwhile: "Unknown thread id") changes
    /// nothing.
    ///
    /// A connection id names a connection of one server only, and the new connection may
    /// reach another one (a load balancer, a name with several addresses, a Galera
    /// node). So the kill is sent only when this server's connection `id` runs a statement
    /// of this user in this database for at least [`CALL_TIMEOUT`] less a second (the
    /// processlist's whole seconds): another server's unrelated statement is left alone.
    /// What is left is another jobguard's statement with the same id on another node that
    /// has run as long: its own client gives up on it within a second, and a killed
    /// statement (1317) is retried like a timed-out one.
    fn kill_query(&mut self, id: u32) {
        let short = |opts: &Opts| -> Opts {
            OptsBuilder::from_opts(opts.clone())
                .tcp_connect_timeout(Some(CANCEL_TIMEOUT))
                .read_timeout(Some(CANCEL_TIMEOUT))
                .write_timeout(Some(CANCEL_TIMEOUT))
                .into()
        };
        let (opts, plain) = (short(&self.opts), self.plain_fallback.as_ref().map(short));
        self.kills.start("kill-query", move || {
            let conn = match (Conn::new(opts), plain) {
                (
                    Err(mysql::Error::DriverError(mysql::DriverError::TlsNotSupported)),
                    Some(plain),
                ) => Conn::new(plain),
                (result, _) => result,
            };
            if let Ok(mut conn) = conn {
                let ours = format!(
                    "SELECT 1 FROM information_schema.PROCESSLIST WHERE ID = {id}
                       AND USER = SUBSTRING_INDEX(USER(), '@', 1) AND DB <=> DATABASE()
                       AND COMMAND = 'Query' AND TIME >= {}",
                    CALL_TIMEOUT.as_secs().saturating_sub(1)
                );
                if let Ok(Some(1)) = conn.query_first::<i64, _>(ours) {
                    let _ = conn.query_drop(format!("KILL QUERY {id}"));
                }
            }
        });
    }

    /// Runs `f`; on a database without the schema, creates it and runs `f` again.
    fn with_schema<T>(
        &mut self,
        op: &str,
        mut f: impl FnMut(&mut Conn) -> Result<T, Fail>,
    ) -> Result<T, StoreError> {
        match self.call(&mut f) {
            Ok(v) => Ok(v),
            Err(e) if missing_schema(&e) => {
                self.init()?;
                self.call(f).map_err(|e| self.error(op, e))
            }
            Err(e) => Err(self.error(op, e)),
        }
    }

    /// Runs `f` with this store's part of [`engine`]'s loop ([`Session`]), as
    /// [`MysqlStore::with_schema`].
    fn engine<T>(
        &mut self,
        op: &str,
        mut f: impl FnMut(&mut Session<'_>) -> Result<T, Fail>,
    ) -> Result<T, StoreError> {
        let now = self.test_now();
        self.with_schema(op, |c| {
            f(&mut Session {
                c,
                now: &now,
                open: false,
            })
        })
    }

    fn newer_schema(&self, version: i64) -> StoreError {
        StoreError::newer_schema(&self.describe, version, SCHEMA_VERSION)
    }

    fn ready(&mut self) -> Result<(), StoreError> {
        if self.schema_ready {
            return Ok(());
        }
        self.init()
    }

    /// Reads the schema version, `None` when there is no meta table.
    fn version(conn: &mut Conn) -> Result<Option<i64>, Fail> {
        match conn
            .query_first::<i64, _>("SELECT value FROM jobguard_meta WHERE name = 'schema_version'")
        {
            Ok(v) => Ok(Some(v.unwrap_or(0))),
            Err(e) => {
                let e = Fail::Client(e);
                if missing_schema(&e) { Ok(None) } else { Err(e) }
            }
        }
    }

    fn migrate(conn: &mut Conn) -> Result<Option<i64>, Fail> {
        let got: Option<i64> =
            conn.query_first("SELECT GET_LOCK(CONCAT('jobguard:', DATABASE()), 30)")?;
        if got != Some(1) {
            return Err(Fail::Data(
                "another host holds the schema lock for over 30 s".to_string(),
            ));
        }
        let result = (|| {
            conn.query_drop(
                "CREATE TABLE IF NOT EXISTS jobguard_meta (
                    name  VARCHAR(64) NOT NULL PRIMARY KEY,
                    value BIGINT      NOT NULL
                 ) ENGINE = InnoDB",
            )?;
            let version = Self::version(conn)?.unwrap_or(0);
            if version > SCHEMA_VERSION {
                return Ok(Some(version));
            }
            if version < 1 {
                // MySQL commits each DDL statement on its own, so a migration cut short
                // leaves part of the schema: every step can be run again.
                for statement in migration_1() {
                    conn.query_drop(statement)?;
                }
            }
            if version < 2 {
                // The queued re-runs a claim picks first. MySQL has no CREATE INDEX IF
                // NOT EXISTS (MariaDB has).
                let has_index: Option<i64> = conn.query_first(
                    "SELECT 1 FROM information_schema.statistics
                      WHERE table_schema = DATABASE() AND table_name = 'jobguard_run'
                        AND index_name = 'jobguard_run_queued' LIMIT 1",
                )?;
                if has_index.is_none() {
                    conn.query_drop(
                        "CREATE INDEX jobguard_run_queued
                             ON jobguard_run (job, resolution, slot_usec)",
                    )?;
                }
            }
            if version < 4 {
                // The renewal generation (`Lease::renewal`), 0 at a grant.
                add_lease_column(conn, "renewal")?;
            }
            if version < 5 {
                // Nothing is decided on the server any more: the procedures of schemas 1
                // to 4 (called only by jobguards of schema 3 and older) go. Such a
                // jobguard then finds no procedure (1305), reads the newer version and
                // refuses by name.
                for name in [
                    "jobguard_claim",
                    "jobguard_renew",
                    "jobguard_finish",
                    "jobguard_interrupt",
                    "jobguard_unlock",
                ] {
                    conn.query_drop(format!("DROP PROCEDURE IF EXISTS {name}"))?;
                }
            }
            if version < 6 {
                // The lease row's revision (`rev`): every write under the row's lock
                // moves it, so a claim, which reads without locking and writes only if
                // the row is unchanged, also finds a resolve or an end that changed only
                // records since its read.
                add_lease_column(conn, "rev")?;
            }
            conn.query_drop(SCHEDULE_TABLE)?;
            conn.query_drop(BEAT_TABLE)?;
            conn.query_drop(format!(
                "INSERT INTO jobguard_meta (name, value) VALUES ('schema_version', {SCHEMA_VERSION})
                 ON DUPLICATE KEY UPDATE value = VALUES(value)"
            ))?;
            Ok(None)
        })();
        let _ = conn.query_drop("DO RELEASE_LOCK(CONCAT('jobguard:', DATABASE()))");
        result
    }
}

/// Adds the column `name` (`BIGINT NOT NULL DEFAULT 0`) to `jobguard_lease` unless it is
/// there: a migration cut short may have added it. MySQL has no ADD COLUMN IF NOT EXISTS
/// (MariaDB has).
fn add_lease_column(conn: &mut Conn, name: &str) -> Result<(), Fail> {
    let has_column: Option<i64> = conn.query_first(format!(
        "SELECT 1 FROM information_schema.columns
          WHERE table_schema = DATABASE() AND table_name = 'jobguard_lease'
            AND column_name = '{name}' LIMIT 1"
    ))?;
    if has_column.is_none() {
        conn.query_drop(format!(
            "ALTER TABLE jobguard_lease ADD COLUMN {name} BIGINT NOT NULL DEFAULT 0"
        ))?;
    }
    Ok(())
}

/// The table of declared schedules ([`Store::declare_schedule`]). It has no schema
/// version of its own (a jobguard that does not know it leaves it alone): a new database
/// gets it with its migration, an older one with its first declaration.
/// The table of marks ([`Store::mark`]), made with the first mark like the schedule
/// table. Binary columns for the namespace and key: a `_bin` collation pads trailing
/// spaces, and `a` and `a ` are two keys. The namespace is as long as
/// [`crate::guard::mark::MAX_STORED_NAMESPACE`] (129 bytes); a table made before a namespace was
/// the job's own has 64 and is widened ([`WIDEN_MARK_NAMESPACE`]).
const MARK_TABLE: &str = "CREATE TABLE IF NOT EXISTS jobguard_mark (
    namespace VARBINARY(129) NOT NULL,
    mark_key  VARBINARY(512) NOT NULL,
    job       VARCHAR(255) NOT NULL,
    run_id    VARCHAR(255) NOT NULL,
    host      VARCHAR(255) NOT NULL,
    token     BIGINT NOT NULL,
    marked_at BIGINT NOT NULL,
    PRIMARY KEY (namespace, mark_key),
    KEY jobguard_mark_age (job, marked_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin";

/// The width of the mark table's namespace column, bytes.
const MARK_NAMESPACE_WIDTH: &str = "SELECT CHARACTER_MAXIMUM_LENGTH FROM information_schema.COLUMNS
     WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'jobguard_mark'
       AND COLUMN_NAME = 'namespace'";

/// Widens the namespace column of a mark table made with 64 bytes. A job's own namespace
/// longer than the column would be refused in strict SQL mode, and cut short (and so
/// perhaps another job's) without it.
const WIDEN_MARK_NAMESPACE: &str =
    "ALTER TABLE jobguard_mark MODIFY namespace VARBINARY(129) NOT NULL";

/// The table of heartbeats ([`Store::put_beat`]), made with the first beat like the
/// schedule table.
const BEAT_TABLE: &str = "CREATE TABLE IF NOT EXISTS jobguard_host (
    host VARCHAR(255) NOT NULL PRIMARY KEY,
    beat MEDIUMTEXT NOT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin";

const SCHEDULE_TABLE: &str = "CREATE TABLE IF NOT EXISTS jobguard_schedule (
    job         VARCHAR(255) NOT NULL PRIMARY KEY,
    fingerprint VARCHAR(1024) NOT NULL,
    defined_at  BIGINT NOT NULL,
    host        VARCHAR(255) NOT NULL,
    seen_at     BIGINT NOT NULL,
    horizon     BIGINT NOT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin";

/// The one statement that reads what [`rules::claim`] decides `req` on, in one consistent
/// read (InnoDB gives a statement one read view): a row per record that matters (the
/// record of a claim sent again, the asked slot's, with `queued_first` every queued
/// slot's, and those carrying the lease row's token), each with the server's time, the
/// schema version, the lease row and the newest slot within [`rules::newest_bound`]; one
/// row with no record when none matters. `now` is the test clock's literal or `NULL`.
fn claim_read_sql(now: &str, req: &ClaimRequest) -> String {
    let job = lit(&req.run.job);
    let run_id = lit(&req.run.run_id);
    let slot = req.run.slot.usec;
    let slots = format!(
        "r.job = {job} AND (r.slot_usec = {slot} OR ({qf} AND r.slot_usec IN (
             SELECT q.slot_usec FROM jobguard_run q
              WHERE q.job = {job} AND q.resolution = 'queued')))",
        qf = i32::from(req.queued_first)
    );
    let lease_run = "r.job = s.job AND s.lease_holder <> '' AND r.fencing_token = s.lease_token";
    format!(
        "SELECT s.store_now, s.schema_version, s.lease_found, s.lease_holder, s.lease_host,
                s.lease_token, s.lease_acquired, s.lease_expire, s.lease_renewal, s.lease_rev,
                s.newest,
                r.run_id = {run_id} AS is_retried, {slots} AS in_slots,
                {lease_run} AS is_lease, r.seq, {RUN_COLUMNS}
         FROM (SELECT t.now AS store_now, {job} AS job,
                 (SELECT value FROM jobguard_meta WHERE name = 'schema_version')
                   AS schema_version,
                 l.job IS NOT NULL AS lease_found, l.holder AS lease_holder,
                 l.host AS lease_host, l.token AS lease_token,
                 l.acquired_at AS lease_acquired, l.expire_at AS lease_expire,
                 l.renewal AS lease_renewal, l.rev AS lease_rev,
                 (SELECT MAX(n.slot_usec) FROM jobguard_run n
                   WHERE n.job = {job} AND n.slot_usec <= t.now + {tolerance}) AS newest
               FROM (SELECT COALESCE({now}, {SERVER_NOW}) AS now) t
               LEFT JOIN jobguard_lease l ON l.job = {job}) s
         LEFT JOIN jobguard_run r ON r.run_id = {run_id} OR ({slots}) OR ({lease_run})
         ORDER BY r.seq",
        tolerance = rules::tolerance_usec(req),
    )
}

/// [`rules::ClaimState`] from the rows of [`claim_read_sql`], and the lease row's `rev`
/// (0 when the job has no row).
///
/// # Errors
/// [`Fail::Newer`] for a schema newer than this jobguard's, [`Fail::Older`] for an older
/// one (migrate and ask again), [`Fail::Data`] for rows that make no sense.
fn claim_state(job: &str, run_id: &str, rows: &[Row]) -> Result<(rules::ClaimState, i64), Fail> {
    let first = rows
        .first()
        .map(row_object)
        .ok_or_else(|| Fail::Data("the claim's read answered nothing".to_string()))?;
    match get_int(&first, "schema_version") {
        Some(v) if v > SCHEMA_VERSION => return Err(Fail::Newer(v)),
        Some(v) if v == SCHEMA_VERSION => {}
        _ => return Err(Fail::Older),
    }
    let mut state = rules::ClaimState {
        now: get_int(&first, "store_now")
            .ok_or_else(|| Fail::Data("the claim's read has no time".to_string()))?,
        lease: if get_int(&first, "lease_found") == Some(1) {
            Some(lease_from(job, &first, "lease_")?)
        } else {
            None
        },
        newest: get_int(&first, "newest"),
        ..rules::ClaimState::default()
    };
    let mut lease_run: Option<(i64, i64, Run)> = None;
    for row in rows {
        let object = row_object(row);
        if object.get("run_id").is_none_or(serde_json::Value::is_null) {
            continue;
        }
        let run = remote::run_from_object(&object).map_err(Fail::Data)?;
        if run.run_id == run_id {
            state.retried = Some(run.clone());
        }
        if get_int(&object, "in_slots") == Some(1) {
            state
                .slots
                .entry(run.slot.usec)
                .or_default()
                .push(run.clone());
        }
        // The newest record carrying the lease's token: latest `started_at`, then latest
        // recorded.
        let seq = get_int(&object, "seq").unwrap_or(0);
        if get_int(&object, "is_lease") == Some(1)
            && lease_run
                .as_ref()
                .is_none_or(|(s, q, _)| (run.started_at, seq) >= (*s, *q))
        {
            lease_run = Some((run.started_at, seq, run));
        }
    }
    state.lease_run = lease_run.map(|(_, _, run)| run);
    let rev = match (&state.lease, get_int(&first, "lease_rev")) {
        (Some(_), None) => return Err(Fail::Data(format!("job {job}: lease without rev"))),
        (_, rev) => rev.unwrap_or(0),
    };
    Ok((state, rev))
}

/// Writes `grant` if the job's lease row is still `read` at revision `rev` (every write
/// under the row's lock moves `rev`: a resolve or an end that changed only records moves
/// it too) and each record it changes (`changed`: as it becomes, as it was read) is still
/// as read: the new lease, the records it re-runs and its `running` record, in one
/// transaction. The row's other columns and the records are compared too, for a host of
/// schema 4 or 5 during a rolling upgrade, whose writes do not move `rev`. False, with nothing written, when
/// the row changed since it was read. The update of the lease row comes first; its row
/// lock orders this write against every other write to the job's lease row.
fn write_grant(
    c: &mut Conn,
    (read, rev): &(Lease, i64),
    lease: &Lease,
    run: &Run,
    changed: &[(&Run, &Run)],
) -> Result<bool, Fail> {
    let mut tx = c.start_transaction(mysql::TxOpts::default())?;
    tx.query_drop(format!(
        "UPDATE jobguard_lease SET holder = {}, host = {}, token = {}, acquired_at = {},
             expire_at = {}, renewal = {}, rev = rev + 1
         WHERE job = {} AND rev = {rev} AND holder = {} AND host = {} AND token = {}
           AND acquired_at = {} AND expire_at = {} AND renewal = {}",
        lit(&lease.holder),
        lit(&lease.host),
        lease.token,
        lease.acquired_at,
        lease.expire_at,
        lease.renewal,
        lit(&lease.job),
        lit(&read.holder),
        lit(&read.host),
        read.token,
        read.acquired_at,
        read.expire_at,
        read.renewal,
    ))?;
    if tx.affected_rows() != 1 {
        tx.rollback()?;
        return Ok(false);
    }
    if !changed.is_empty() {
        // Each record only while it is as read: a jobguard of schema 4 or 5 still ending
        // its run or resolving during a rolling upgrade writes records without moving
        // `rev`.
        let mut cases = String::new();
        let mut read_as = Vec::new();
        for (r, before) in changed {
            let _ = write!(
                cases,
                " WHEN {} THEN {}",
                lit(&r.run_id),
                lit_opt(r.resolution.map(Resolution::as_str))
            );
            read_as.push(format!(
                "(run_id = {} AND outcome = {} AND resolution <=> {})",
                lit(&r.run_id),
                lit(before.outcome.as_str()),
                lit_opt(before.resolution.map(Resolution::as_str))
            ));
        }
        tx.query_drop(format!(
            "UPDATE jobguard_run SET resolution = CASE run_id{cases} END WHERE {}",
            read_as.join(" OR ")
        ))?;
        if tx.affected_rows() != changed.len() as u64 {
            tx.rollback()?;
            return Ok(false);
        }
    }
    tx.query_drop(format!(
        "INSERT INTO jobguard_run (run_id, job, slot_usec, slot_zone, attempt, outcome, forced,
             trigger_kind, host, machine_id, boot_id, pid, pid_start, invocation_id,
             started_at, fencing_token, report)
         VALUES ({}, {}, {}, {}, {}, 'running', {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, '{{}}')",
        lit(&run.run_id),
        lit(&run.job),
        run.slot.usec,
        lit(&run.slot.zone),
        run.attempt,
        i32::from(run.forced),
        lit(&run.trigger),
        lit(&run.host),
        lit(&run.machine_id),
        lit(&run.boot_id),
        run.pid,
        run.pid_start,
        lit_opt(run.invocation_id.as_deref()),
        run.started_at,
        run.fencing_token,
    ))?;
    tx.commit()?;
    Ok(true)
}

/// Opens the store at `address` for [`crate::store::registry`]; `clock` is not used: the server's clock judges.
///
/// # Errors
/// As [`MysqlStore::open`].
pub(crate) fn open_boxed(
    address: &str,
    clock: std::sync::Arc<dyn crate::guard::clock::Clock>,
) -> Result<Box<dyn Store>, StoreError> {
    let _ = clock;
    Ok(Box::new(MysqlStore::open(address)?))
}

impl Store for MysqlStore {
    /// Closes the connection (`COM_QUIT`, as the client does when it is dropped): one of
    /// the server's `max_connections` (and of the user's `MAX_USER_CONNECTIONS`) is free
    /// until the next call.
    fn rest(&mut self) {
        self.conn = None;
    }

    fn describe(&self) -> String {
        self.describe.clone()
    }

    engine::store_ops!(renew);

    fn init(&mut self) -> Result<(), StoreError> {
        let version = self
            .call(Self::version)
            .map_err(|e| self.error("read schema version", e))?;
        let newer = match version {
            Some(v) if v == SCHEMA_VERSION => None,
            Some(v) if v > SCHEMA_VERSION => Some(v),
            _ => self
                .call(Self::migrate)
                .map_err(|e| self.error("create schema", e))?,
        };
        if let Some(v) = newer {
            return Err(self.newer_schema(v));
        }
        self.schema_ready = true;
        Ok(())
    }

    fn now(&mut self) -> Result<i64, StoreError> {
        if let Some(clock) = &self.test_clock {
            return Ok(clock.now_usec());
        }
        self.call(|c| {
            c.query_first::<i64, _>(format!("SELECT {SERVER_NOW}"))?
                .ok_or_else(|| Fail::Data("no time".to_string()))
        })
        .map_err(|e| self.error("read time", e))
    }

    fn lease(&mut self, job: &str) -> Result<Option<Lease>, StoreError> {
        self.ready()?;
        let sql = format!(
            "SELECT holder, host, token, acquired_at, expire_at, renewal FROM jobguard_lease
             WHERE job = {} AND holder <> ''",
            lit(job)
        );
        self.with_schema("read lease", |c| {
            let row: Option<Row> = c.query_first(&sql)?;
            row.map(|r| lease_from(job, &row_object(&r), ""))
                .transpose()
        })
    }

    fn read_mark(&mut self, namespace: &str, key: &str) -> Result<Option<Mark>, StoreError> {
        self.ready()?;
        let sql = format!(
            "SELECT job, run_id, host, token, marked_at FROM jobguard_mark
             WHERE namespace = {} AND mark_key = {}",
            lit(namespace),
            lit(key)
        );
        self.with_schema("read a mark", |c| {
            let row: Option<(String, String, String, i64, i64)> = match c.query_first(&sql) {
                Ok(row) => row,
                // The table comes with the first mark. 1146: no such table.
                Err(mysql::Error::MySqlError(e)) if e.code == 1146 => None,
                Err(e) => return Err(e.into()),
            };
            Ok(row.map(|(job, run_id, host, token, marked_at)| Mark {
                namespace: namespace.to_string(),
                key: key.to_string(),
                job,
                run_id,
                host,
                token,
                marked_at,
            }))
        })
    }

    fn insert_mark(&mut self, mark: &Mark, fenced: bool) -> Result<bool, StoreError> {
        self.ready()?;
        if !self.marks_ready {
            // Read first, so that a store user without ALTER can mark in a table that is
            // already wide; a missing table comes with the first mark (1146 below).
            self.with_schema("widen the mark table", |c| {
                let width: Option<Option<i64>> = c.query_first(MARK_NAMESPACE_WIDTH)?;
                let wide =
                    i64::try_from(crate::guard::mark::MAX_STORED_NAMESPACE).unwrap_or(i64::MAX);
                if width.flatten().is_some_and(|w| w < wide) {
                    c.query_drop(WIDEN_MARK_NAMESPACE)?;
                }
                Ok(())
            })?;
            self.marks_ready = true;
        }
        // A locking read of the lease row orders the insert with every write to it: a
        // takeover that committed first is seen (a locking read reads the newest
        // version), and one that comes later waits for this commit. The fence is the
        // rules' (`rules::mark_fence_holds`) on that row and the server's time; the insert
        // then holds only while the server's clock is before `rules::fence_deadline`,
        // judged by its own statement: a run frozen between its read and its insert
        // records nothing once the lease has expired.
        let now = self.test_now();
        let insert = |deadline: Option<i64>| {
            format!(
                "INSERT INTO jobguard_mark (namespace, mark_key, job, run_id, host, token, marked_at)
                 SELECT {}, {}, {}, {}, {}, {}, {} FROM DUAL WHERE {}",
                lit(&mark.namespace),
                lit(&mark.key),
                lit(&mark.job),
                lit(&mark.run_id),
                lit(&mark.host),
                mark.token,
                mark.marked_at,
                deadline.map_or("TRUE".to_string(), |d| format!(
                    "COALESCE({now}, {SERVER_NOW}) < {d}"
                ))
            )
        };
        self.with_schema("mark", |c| {
            let mut created = false;
            loop {
                let mut tx = c.start_transaction(read_committed())?;
                let mut deadline = None;
                if fenced {
                    let (row, store_now) = lock_lease(&mut tx, &mark.job, &now, true)?;
                    if !rules::mark_fence_holds(store_now, row.as_ref(), mark, true) {
                        tx.rollback()?;
                        return Ok(false);
                    }
                    deadline = rules::fence_deadline(row.as_ref(), true);
                }
                return match tx.query_drop(insert(deadline)) {
                    Ok(()) if tx.affected_rows() == 1 => {
                        tx.commit()?;
                        Ok(true)
                    }
                    // The deadline passed before the insert.
                    Ok(()) => {
                        tx.rollback()?;
                        Ok(false)
                    }
                    // 1062: the key is recorded.
                    Err(mysql::Error::MySqlError(e)) if e.code == 1062 => {
                        tx.rollback()?;
                        Ok(false)
                    }
                    // 1146: no such table; it comes with the first mark.
                    Err(mysql::Error::MySqlError(e)) if e.code == 1146 && !created => {
                        tx.rollback()?;
                        c.query_drop(MARK_TABLE)?;
                        created = true;
                        continue;
                    }
                    Err(e) => Err(e.into()),
                };
            }
        })
    }

    fn delete_marks(&mut self, job: &str, before: i64) -> Result<usize, StoreError> {
        self.ready()?;
        let sql = format!(
            "DELETE FROM jobguard_mark WHERE job = {} AND marked_at < {before}",
            lit(job)
        );
        self.with_schema("delete marks", |c| match c.query_drop(&sql) {
            Ok(()) => Ok(usize::try_from(c.affected_rows()).unwrap_or(usize::MAX)),
            Err(mysql::Error::MySqlError(e)) if e.code == 1146 => Ok(0),
            Err(e) => Err(e.into()),
        })
    }

    fn count_marks(&mut self, job: &str, before: i64) -> Result<usize, StoreError> {
        self.ready()?;
        let sql = format!(
            "SELECT count(*) FROM jobguard_mark WHERE job = {} AND marked_at < {before}",
            lit(job)
        );
        self.with_schema("count marks", |c| match c.query_first::<u64, _>(&sql) {
            Ok(n) => Ok(usize::try_from(n.unwrap_or(0)).unwrap_or(usize::MAX)),
            Err(mysql::Error::MySqlError(e)) if e.code == 1146 => Ok(0),
            Err(e) => Err(e.into()),
        })
    }

    fn put_beat(&mut self, host: &str, beat: &str) -> Result<(), StoreError> {
        self.ready()?;
        let write = format!(
            "INSERT INTO jobguard_host (host, beat) VALUES ({}, {})
             ON DUPLICATE KEY UPDATE beat = VALUES(beat)",
            lit(host),
            lit(beat)
        );
        self.with_schema("write the heartbeat", |c| {
            match c.query_drop(&write) {
                // 1146: no such table: the first heartbeat in this database.
                Err(mysql::Error::MySqlError(e)) if e.code == 1146 => {
                    c.query_drop(BEAT_TABLE)?;
                    c.query_drop(&write)?;
                }
                got => got?,
            }
            Ok(())
        })
    }

    fn beats(&mut self) -> Result<Vec<(String, String)>, StoreError> {
        self.ready()?;
        self.with_schema("read the heartbeats", |c| {
            match c.query::<(String, String), _>("SELECT host, beat FROM jobguard_host") {
                Ok(rows) => Ok(rows),
                Err(mysql::Error::MySqlError(e)) if e.code == 1146 => Ok(Vec::new()),
                Err(e) => Err(e.into()),
            }
        })
    }

    fn read_beat(&mut self, key: &str) -> Result<Option<String>, StoreError> {
        self.ready()?;
        let sql = format!("SELECT beat FROM jobguard_host WHERE host = {}", lit(key));
        self.with_schema("read a fleet record", |c| {
            match c.query_first::<String, _>(&sql) {
                Ok(row) => Ok(row),
                Err(mysql::Error::MySqlError(e)) if e.code == 1146 => Ok(None),
                Err(e) => Err(e.into()),
            }
        })
    }

    fn forget_beats(&mut self, hosts: &[String]) -> Result<(), StoreError> {
        if hosts.is_empty() {
            return Ok(());
        }
        self.ready()?;
        let list: Vec<String> = hosts.iter().map(|h| lit(h)).collect();
        let sql = format!(
            "DELETE FROM jobguard_host WHERE host IN ({})",
            list.join(", ")
        );
        self.with_schema("forget heartbeats", |c| match c.query_drop(&sql) {
            Err(mysql::Error::MySqlError(e)) if e.code == 1146 => Ok(()),
            got => Ok(got?),
        })
    }

    fn read_schedule(&mut self, job: &str) -> Result<Option<ScheduleDecl>, StoreError> {
        self.ready()?;
        let sql = format!(
            "SELECT fingerprint, defined_at, host, seen_at, horizon FROM jobguard_schedule
             WHERE job = {}",
            lit(job)
        );
        self.with_schema("read the schedule", |c| {
            let row: Option<(String, i64, String, i64, i64)> = match c.query_first(&sql) {
                Ok(row) => row,
                // The table comes with the first declaration (no schema version for it: a
                // jobguard that does not know it leaves it alone). 1146: no such table.
                Err(mysql::Error::MySqlError(e)) if e.code == 1146 => None,
                Err(e) => return Err(e.into()),
            };
            Ok(row.map(
                |(fingerprint, defined_at, host, seen_at, horizon)| ScheduleDecl {
                    job: job.to_string(),
                    fingerprint,
                    defined_at,
                    host,
                    seen_at,
                    horizon,
                },
            ))
        })
    }

    fn swap_schedule(
        &mut self,
        expected: Option<&ScheduleDecl>,
        new: &ScheduleDecl,
    ) -> Result<bool, StoreError> {
        self.ready()?;
        let write = match expected {
            None => format!(
                "INSERT INTO jobguard_schedule (job, fingerprint, defined_at, host, seen_at, horizon)
                 VALUES ({}, {}, {}, {}, {}, {})",
                lit(&new.job),
                lit(&new.fingerprint),
                new.defined_at,
                lit(&new.host),
                new.seen_at,
                new.horizon
            ),
            Some(e) => format!(
                "UPDATE jobguard_schedule SET fingerprint = {}, defined_at = {}, host = {},
                   seen_at = {}, horizon = {}
                 WHERE job = {} AND fingerprint = {} AND defined_at = {} AND seen_at = {}",
                lit(&new.fingerprint),
                new.defined_at,
                lit(&new.host),
                new.seen_at,
                new.horizon,
                lit(&new.job),
                lit(&e.fingerprint),
                e.defined_at,
                e.seen_at
            ),
        };
        self.with_schema("declare the schedule", |c| {
            let mut created = false;
            loop {
                return match c.query_drop(&write) {
                    Ok(()) => Ok(c.affected_rows() == 1),
                    // 1062: another host inserted first.
                    Err(mysql::Error::MySqlError(e)) if e.code == 1062 => Ok(false),
                    // 1146: no such table. It exists unless no host has declared a schedule
                    // in this database since it was made by a jobguard before schedules:
                    // creating it takes the CREATE privilege, which a host's user need not
                    // have once it exists.
                    Err(mysql::Error::MySqlError(e)) if e.code == 1146 && !created => {
                        c.query_drop(SCHEDULE_TABLE)?;
                        created = true;
                        continue;
                    }
                    Err(e) => Err(e.into()),
                };
            }
        })
    }

    fn outcome_counts(&mut self, job: &str) -> Result<Vec<(Outcome, u64)>, StoreError> {
        self.ready()?;
        let sql = format!(
            "SELECT outcome, COUNT(*) FROM jobguard_run WHERE job = {} GROUP BY outcome",
            lit(job)
        );
        self.with_schema("count runs", |c| {
            let rows: Vec<(String, u64)> = c.query(&sql)?;
            rows.into_iter()
                .map(|(o, n)| Ok((o.parse::<Outcome>().map_err(Fail::Data)?, n)))
                .collect()
        })
    }

    fn jobs(&mut self) -> Result<Vec<String>, StoreError> {
        self.ready()?;
        // A loose index scan of the slot index (its first column), by MySQL's and
        // MariaDB's own plan for DISTINCT on an index prefix.
        self.with_schema("list jobs", |c| {
            let mut jobs: Vec<String> = c.query("SELECT DISTINCT job FROM jobguard_run")?;
            // By bytes, whatever the column's collation.
            jobs.sort();
            Ok(jobs)
        })
    }

    fn runs(&mut self, query: &RunQuery) -> Result<Vec<Run>, StoreError> {
        self.ready()?;
        let mut conditions = Vec::new();
        if let Some(job) = &query.job {
            conditions.push(format!("r.job = {}", lit(job)));
        }
        if let Some(slot) = query.slot {
            conditions.push(format!("r.slot_usec = {slot}"));
        }
        if !query.outcomes.is_empty() {
            let list: Vec<String> = query.outcomes.iter().map(|o| lit(o.as_str())).collect();
            conditions.push(format!("r.outcome IN ({})", list.join(", ")));
        }
        if !query.resolutions.is_empty() {
            let list: Vec<String> = query.resolutions.iter().map(|o| lit(o.as_str())).collect();
            conditions.push(format!("r.resolution IN ({})", list.join(", ")));
        }
        let mut sql = format!("SELECT {RUN_COLUMNS} FROM jobguard_run r");
        if let Some(from) = query.slots_from {
            // Each job's window (rules::window) as a derived table of record numbers:
            // its slots from `from` on, its newest slot before (the anchor, found by the
            // grouped MAX), its newest slot before with a record that names a schedule,
            // its first record started before `from`. Each part by an index with constant
            // bounds: MySQL and MariaDB filter a bound computed by a
            // subquery after reading every record of the job, and MySQL runs an
            // `IN (subquery)` with a UNION again for every record. The first record
            // started comes in (started_at, run_id) order, the (job, started_at) index's
            // own (InnoDB appends the primary key), so nothing is sorted.
            let (jobs, only) = match &query.job {
                Some(job) => (
                    format!("(SELECT {} AS job)", lit(job)),
                    format!("job = {} AND ", lit(job)),
                ),
                None => (
                    "(SELECT DISTINCT job FROM jobguard_run)".to_string(),
                    String::new(),
                ),
            };
            let _ = write!(
                sql,
                " JOIN (SELECT w.seq FROM {jobs} j
                          JOIN jobguard_run w ON w.job = j.job AND w.slot_usec >= {from}
                        UNION
                        SELECT w.seq FROM (SELECT job, MAX(slot_usec) AS anchor FROM jobguard_run
                                            WHERE {only}slot_usec < {from} GROUP BY job) a
                          JOIN jobguard_run w ON w.job = a.job AND w.slot_usec = a.anchor
                        UNION
                        SELECT w.seq FROM {jobs} j
                          JOIN jobguard_run w ON w.job = j.job AND w.slot_usec = (
                            SELECT p.slot_usec FROM jobguard_run p
                             WHERE p.job = j.job AND p.slot_usec < {from}
                               AND (p.outcome IN ('succeeded', 'failed')
                                    OR JSON_EXTRACT(p.report, '$.\"{key}\"') IS NOT NULL)
                             ORDER BY p.slot_usec DESC LIMIT 1)
                        UNION
                        SELECT (SELECT p.seq FROM jobguard_run p FORCE INDEX (jobguard_run_history)
                                 WHERE p.job = j.job AND p.slot_usec < {from}
                                 ORDER BY p.started_at, p.run_id LIMIT 1) FROM {jobs} j) win
                   ON win.seq = r.seq",
                key = crate::guard::ledger::SCHEDULE
            );
        }
        if !conditions.is_empty() {
            sql.push_str(" WHERE ");
            sql.push_str(&conditions.join(" AND "));
        }
        sql.push_str(" ORDER BY r.started_at DESC, r.seq DESC");
        if query.limit > 0 {
            let _ = write!(sql, " LIMIT {}", query.limit);
        }
        self.with_schema("read runs", |c| {
            let rows: Vec<Row> = c.query(&sql)?;
            rows.iter()
                .map(|r| remote::run_from_object(&row_object(r)).map_err(Fail::Data))
                .collect()
        })
    }

    fn delete_slots(
        &mut self,
        job: &str,
        slots: &[i64],
        started_before: i64,
    ) -> Result<usize, StoreError> {
        let mut statements = Vec::new();
        for chunk in slots.chunks(200) {
            let list: Vec<String> = chunk.iter().map(i64::to_string).collect();
            statements.push(format!(
                "DELETE FROM jobguard_run
                 WHERE job = {j} AND slot_usec IN ({list})
                   AND slot_usec NOT IN (SELECT slot_usec FROM (
                     SELECT slot_usec FROM jobguard_run
                     WHERE job = {j} AND slot_usec IN ({list})
                       AND (outcome = 'running' OR started_at >= {started_before})) AS busy)",
                j = lit(job),
                list = list.join(", ")
            ));
        }
        // Locks the row as every writer does, and moves its `rev` (a claim that read
        // one of these slots writes only if `rev` is unchanged).
        let lock = format!(
            "UPDATE jobguard_lease SET rev = rev + 1 WHERE job = {}",
            lit(job)
        );
        self.with_schema("delete runs", |c| {
            let mut n = 0;
            for sql in &statements {
                // The lease row is the job's lock (the claim takes it), so a claim that
                // adds an attempt to one of these slots commits before or after.
                c.query_drop("START TRANSACTION")?;
                let done = (|| -> Result<usize, Fail> {
                    c.query_drop(&lock)?;
                    c.query_drop(sql)?;
                    let n = usize::try_from(c.affected_rows()).unwrap_or(0);
                    c.query_drop("COMMIT")?;
                    Ok(n)
                })();
                match done {
                    Ok(k) => n += k,
                    Err(e) => {
                        let _ = c.query_drop("ROLLBACK");
                        return Err(e);
                    }
                }
            }
            Ok(n)
        })
    }
}

/// READ COMMITTED, as every locking transaction here: each statement sees what committed
/// before it, and the lease row's lock orders the writers.
fn read_committed() -> mysql::TxOpts {
    mysql::TxOpts::default().set_isolation_level(Some(mysql::IsolationLevel::ReadCommitted))
}

/// Locks `job`'s lease row and then reads the server's time (`now` is the test clock's
/// literal or `NULL`): the row, if any, and the time. The lock is `FOR UPDATE`, as every
/// writer of the row takes it, or with `share` a
/// share lock (`LOCK IN SHARE MODE`: writers of the row wait, readers do not).
fn lock_lease(
    tx: &mut impl Queryable,
    job: &str,
    now: &str,
    share: bool,
) -> Result<(Option<Lease>, i64), Fail> {
    let lock = if share {
        "LOCK IN SHARE MODE"
    } else {
        "FOR UPDATE"
    };
    let row: Option<Row> = tx.query_first(format!(
        "SELECT holder, host, token, acquired_at, expire_at, renewal FROM jobguard_lease
         WHERE job = {} {lock}",
        lit(job)
    ))?;
    let lease = row
        .map(|r| lease_from(job, &row_object(&r), ""))
        .transpose()?;
    let store_now: i64 = tx
        .query_first(format!("SELECT COALESCE({now}, {SERVER_NOW})"))?
        .ok_or_else(|| Fail::Data("the store's time: no answer".to_string()))?;
    Ok((lease, store_now))
}

/// One connection's part of [`engine`]'s loop. A claim reads in one statement and
/// writes only if the lease row is still at the revision it read ([`write_grant`]); an
/// end, a renewal, an unlock and a resolve read and write in one READ COMMITTED
/// transaction that locks the lease row first ([`lock_lease`]), so nothing they read
/// changes before their commit, and move the row's revision with their commit.
/// A transaction left open (a refusal writes nothing) is rolled back when the session
/// ends or reads again.
struct Session<'a> {
    c: &'a mut Conn,
    /// The test clock's literal, or `NULL`.
    now: &'a str,
    open: bool,
}

/// What a read of [`Session`] saw.
enum Seen {
    /// A claim's read: the lease row and its `rev` (`None`: the job has none).
    Row(Option<(Lease, i64)>),
    /// The lease row is locked in the session's open transaction.
    Locked,
}

impl Session<'_> {
    /// Starts a READ COMMITTED transaction (after rolling back one left open).
    fn begin(&mut self) -> Result<(), Fail> {
        self.end()?;
        self.c
            .query_drop("SET TRANSACTION ISOLATION LEVEL READ COMMITTED")?;
        self.c.query_drop("START TRANSACTION")?;
        self.open = true;
        Ok(())
    }

    /// Rolls back the transaction left open, if any.
    fn end(&mut self) -> Result<(), Fail> {
        if self.open {
            self.open = false;
            self.c.query_drop("ROLLBACK")?;
        }
        Ok(())
    }
}

impl Drop for Session<'_> {
    fn drop(&mut self) {
        let _ = self.end();
    }
}

impl engine::Backend for Session<'_> {
    type Version = Seen;
    type Client = mysql::Error;

    fn read_claim(&mut self, req: &ClaimRequest) -> Result<Read<(rules::ClaimState, Seen)>, Fail> {
        self.end()?;
        let rows: Vec<Row> = self.c.query(claim_read_sql(self.now, req))?;
        let (state, rev) = claim_state(&req.run.job, &req.run.run_id, &rows)?;
        let lease = state.lease.clone().map(|l| (l, rev));
        Ok(Read::Got((state, Seen::Row(lease))))
    }

    /// Locks the lease row, reads the server's time after the lock, then the record (and
    /// with [`Need::slot`] every record of its slot).
    fn read_run(
        &mut self,
        job: &str,
        run_id: &str,
        need: Need,
    ) -> Result<Read<(RunRead, Seen)>, Fail> {
        self.begin()?;
        let (lease, now) = lock_lease(self.c, job, self.now, false)?;
        let record: Option<Row> = self.c.query_first(format!(
            "SELECT {RUN_COLUMNS} FROM jobguard_run r WHERE r.run_id = {} FOR UPDATE",
            lit(run_id)
        ))?;
        let record = record
            .map(|r| remote::run_from_object(&row_object(&r)).map_err(Fail::Data))
            .transpose()?
            // A record of another job is not this job's to change.
            .filter(|r| r.job == job);
        let mut slot_runs = Vec::new();
        if let (true, Some(r)) = (need.slot, &record) {
            let rows: Vec<Row> = self.c.query(format!(
                "SELECT {RUN_COLUMNS} FROM jobguard_run r WHERE r.job = {} AND r.slot_usec = {}
                 ORDER BY r.seq",
                lit(&r.job),
                r.slot.usec
            ))?;
            for row in &rows {
                slot_runs.push(remote::run_from_object(&row_object(row)).map_err(Fail::Data)?);
            }
        }
        let read = RunRead {
            now,
            lease,
            record,
            slot_runs,
        };
        Ok(Read::Got((read, Seen::Locked)))
    }

    fn read_lease(&mut self, job: &str, _live: bool) -> Result<Read<(LeaseRead, Seen)>, Fail> {
        self.begin()?;
        let (lease, now) = lock_lease(self.c, job, self.now, false)?;
        Ok(Read::Got((LeaseRead { now, lease }, Seen::Locked)))
    }

    /// Locks the lease row, then reads the slot's records.
    fn read_slot(&mut self, job: &str, slot: i64) -> Result<Read<(engine::Records, Seen)>, Fail> {
        self.begin()?;
        let _ = lock_lease(self.c, job, self.now, false)?;
        let rows: Vec<Row> = self.c.query(format!(
            "SELECT {RUN_COLUMNS} FROM jobguard_run r WHERE r.job = {} AND r.slot_usec = {slot}
             ORDER BY r.seq",
            lit(job)
        ))?;
        let runs = rows
            .iter()
            .map(|row| remote::run_from_object(&row_object(row)).map_err(Fail::Data))
            .collect::<Result<Vec<Run>, Fail>>()?;
        Ok(Read::Got((runs, Seen::Locked)))
    }

    /// A grant: [`write_grant`] (the job's first grant first inserts its lease row, the
    /// token counter, and reads again). Under the lock: each changed record (while its
    /// outcome is still the one read) and the lease row, then `COMMIT`.
    fn commit(&mut self, seen: Seen, writes: &Writes) -> Result<Commit, Fail> {
        let job = lit(&writes.job);
        let locked = match (seen, &writes.lease) {
            (Seen::Row(None), LeaseWrite::Grant { .. }) => {
                self.c.query_drop(format!(
                    "INSERT IGNORE INTO jobguard_lease
                         (job, holder, host, token, acquired_at, expire_at)
                     VALUES ({job}, '', '', 0, 0, 0)"
                ))?;
                return Ok(Commit::Changed);
            }
            (Seen::Row(Some(read)), LeaseWrite::Grant { lease, run, .. }) => {
                let changed: Vec<(&Run, &Run)> = writes
                    .changed()
                    .filter_map(|(r, before)| Some((r, before?)))
                    .collect();
                return Ok(if write_grant(self.c, &read, lease, run, &changed)? {
                    Commit::Done
                } else {
                    Commit::Changed
                });
            }
            (Seen::Locked, _) if self.open => true,
            _ => false,
        };
        if !locked {
            return Err(Fail::Data(
                "a write without the read it depends on".to_string(),
            ));
        }
        for (r, before) in writes.changed() {
            let report =
                serde_json::to_string(&r.report).map_err(|e| Fail::Data(format!("report: {e}")))?;
            let was = before.map_or(Outcome::Running, |b| b.outcome);
            self.c.query_drop(format!(
                "UPDATE jobguard_run SET outcome = {}, reason = {}, exit_status = {},
                     finished_at = {}, report = {}, resolution = {}
                 WHERE run_id = {} AND outcome = {}",
                lit(r.outcome.as_str()),
                lit_opt(r.reason.as_deref()),
                int_opt(r.exit_status.map(i64::from)),
                int_opt(r.finished_at),
                lit(&report),
                lit_opt(r.resolution.map(Resolution::as_str)),
                lit(&r.run_id),
                lit(was.as_str())
            ))?;
        }
        // Every write moves the row's `rev`, which a claim's write compares.
        let set = match &writes.lease {
            LeaseWrite::Renew(l) => {
                format!("expire_at = {}, renewal = {},", l.expire_at, l.renewal)
            }
            LeaseWrite::Release(_) => "holder = '', host = '', expire_at = 0,".to_string(),
            LeaseWrite::Keep | LeaseWrite::Grant { .. } => String::new(),
        };
        self.c.query_drop(format!(
            "UPDATE jobguard_lease SET {set} rev = rev + 1 WHERE job = {job}"
        ))?;
        // A failed `COMMIT` leaves the transaction to the rollback of [`Session::end`].
        self.c.query_drop("COMMIT")?;
        self.open = false;
        Ok(Commit::Done)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mark_table_holds_the_longest_stored_namespace() {
        let column = format!(
            "namespace VARBINARY({})",
            crate::guard::mark::MAX_STORED_NAMESPACE
        );
        assert!(MARK_TABLE.contains(&column), "{MARK_TABLE}");
        assert!(
            WIDEN_MARK_NAMESPACE.contains(&column),
            "{WIDEN_MARK_NAMESPACE}"
        );
    }
}

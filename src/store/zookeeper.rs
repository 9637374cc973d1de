//! The ZooKeeper store: leases and the run ledger in ZooKeeper znodes, decided by the pure
//! rules of [`super::rules`] and applied in one `multi` whose first operation checks the
//! version of the job's lease node.
//!
//! Address: `zookeeper://[USER:PASSWORD@]HOST[:PORT][,HOST[:PORT]…][/PATH]`: the servers of
//! one ensemble (port 2181 by default) and the node under which everything lives
//! (`/jobguard` by default; 1 to 8 plain segments of letters, digits and `_:-.`), so that
//! several installations or test cases can share an ensemble. With a user, the session
//! authenticates with ZooKeeper's `digest` scheme (`addauth digest USER:PASSWORD`) and
//! every node jobguard creates carries the ACL `auth` with all permissions (only sessions
//! authenticated as that user can read or change it); without one, the nodes are open to
//! every client (`world:anyone`). The password may be percent-encoded.
//!
//! TLS: `zookeepers://…` speaks TLS to every server (ZooKeeper's `secureClientPort`, served
//! by its Netty connection factory). The server's certificate must chain to a root of the
//! system's trust-store file (found as OpenSSL finds it: `/etc/ssl/certs/ca-certificates.crt`
//! on Debian, or `SSL_CERT_FILE`), or with `ssl-ca=PATH` to the PEM certificates in that
//! file, and name the host it was reached by.
//!
//! Node layout (P is the path; a slot is 20 decimal digits, offset by 2^63 so that names
//! sort as the numbers do):
//! - `P/schema`: the layout version.
//! - `P/clock`: written by every operation to read the ensemble's time (below).
//! - `P/lease/JOB`: the lease row as JSON (`holder host token acquired_at expire_at
//!   run_id run_slot newest grants`); never deleted (a released row has an empty holder
//!   and `expire_at` 0). Its token is the job's fencing-token counter, `newest` the newest
//!   slot with a record, `grants` the slot and token of each of the last 256 grants, so
//!   that a reader of the newest records (`recover` every minute, catch-up, `audit`) reads
//!   those records and not the job's whole history (ZooKeeper has no ordered range reads).
//!   Every write to the job's state sets it, so its version is the version of the whole
//!   job: a `multi` that starts by setting it at the version read writes nothing when
//!   another host wrote the job in between.
//! - `P/run/JOB/SLOT`: a slot with records (no data). Its children `TOKEN` (the fencing
//!   token of the grant, 20 digits) are its records in grant order, each a JSON object
//!   with the SQL stores' column names but no report; a record's report (up to 64 KiB of
//!   JSON) is its child `report`, written when the record is created and when the report
//!   changes. One node per record, and the report apart, keep every node and every
//!   `multi` within ZooKeeper's packet limit (`jute.maxbuffer`, 1 MiB by default) however
//!   often a slot is run again, and a change of resolution rewrites a few hundred bytes.
//! - `P/id/RUN_ID`: `JOB/SLOT`, where the run's record is.
//! - `P/queued/JOB/SLOT`: present while a record of the slot is resolved `queued`.
//! - `P/schedule/JOB`: the schedule the job runs by
//!   ([`crate::store::Store::declare_schedule`]), as JSON; swapped at the version read.
//! - `P/hosts/HOST`: a host's heartbeat, JSON ([`crate::store::Store::put_beat`]); the
//!   host's key percent-encoded ([`crate::guard::mark::key_component`]).
//!
//! Each operation reads the ensemble's time, reads the job's state (one `multi` read, and a
//! second for the records the first pointed at), decides with the rules, and writes in one
//! `multi`. When the job changed meanwhile, nothing is written and the operation starts
//! again (at most [`RETRIES`] times).
//!
//! Time: "now" is the modification time ZooKeeper stamps on `P/clock` when the operation
//! writes it (`Stat.mtime`, ms since the epoch by the clock of the ensemble's leader, which
//! stamps every transaction), so a lease is judged by the store's clock, as with
//! PostgreSQL, and the claim's clock check compares the host with it.
//!
//! The lease is judged by its `expire_at` alone, not by an ephemeral node. An ephemeral
//! node ends with its session, and the server grants a session time-out of its own
//! choosing, 2 to 20 ticks (4 to 40 s by default), whatever the client asks. When that is
//! shorter than `lease_ttl`, a holder cut off from the ensemble would see its node deleted
//! and the job taken over while it still runs its command within its lease; when it is as
//! long, the node ends no sooner than `expire_at` passes. Either way it adds no safe
//! speed, so the holder fences itself by its own monotonic clock, as with every store
//! ([`crate::guard::lease::fence_after`]), and the others wait for `expire_at` by the leader's
//! clock. No state lives in the session: a session the server expired (an idle host, a
//! long pause) is replaced by a new one on the next call.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use zookeeper_client::{Acls, Client, CreateMode, MultiReadResult, MultiWriteError};

use crate::guard::clock::Clock;
use crate::guard::lease::Lease;
use crate::guard::ledger::{Finish, Resolution, Run};
use crate::store::engine::{
    self, Commit, LeaseRead, LeaseWrite, Need, RETRIES, Read, RunRead, SlotWrite, Writes,
};
use crate::store::remote::{self, CALL_TIMEOUT, CONNECT_TIMEOUT, slot_part};
use crate::store::rules;
use crate::store::{
    Claim, ClaimRequest, Finished, Mark, RunQuery, ScheduleDecl, Store, StoreError, address,
};

/// The node layout version this jobguard writes and understands (`P/schema`).
pub const SCHEMA_VERSION: i64 = 1;

/// The path when the address names none.
pub const DEFAULT_PATH: &str = "/jobguard";

/// The session time-out jobguard asks for. The server grants it limited to its
/// `minSessionTimeout`..`maxSessionTimeout` (2 to 20 ticks); no state depends on it.
const SESSION_TIMEOUT: Duration = Duration::from_secs(30);

/// The most queued slots a claim reads (oldest first), as the etcd store.
const MAX_QUEUED_READ: usize = 60;

/// The most operations in one `multi` read: its request (paths) is well within
/// ZooKeeper's 1 MiB packet limit (`jute.maxbuffer`), which the server applies to what it
/// receives, not to what it answers.
const READ_BATCH: usize = 200;

/// How many of a job's latest grants its lease row lists ([`Row::grants`]): a reader of
/// at most this many newest records (`recover` reads 200 every minute) reads those records
/// only, not every slot the job ever had.
const RECENT_GRANTS: usize = 256;

/// The ZooKeeper store: one session, driven by a runtime of its own (one worker thread).
pub struct ZooKeeperStore {
    rt: tokio::runtime::Runtime,
    cluster: String,
    /// `USER:PASSWORD` for the digest scheme.
    digest: Option<String>,
    /// `zookeepers://`: the PEM certificates the servers' certificates must chain to.
    tls: Option<String>,
    client: Option<Client>,
    describe: String,
    path: String,
    schema_ready: bool,
    /// The store's time read by the current operation ([`ZooKeeperStore::now_on`]): one
    /// write of `P/clock` per operation, not per try.
    call_now: std::cell::Cell<Option<i64>>,
    /// Set by [`ZooKeeperStore::judge_time_by`]: "now" comes from this clock.
    judged: Option<Arc<dyn Clock>>,
}

impl std::fmt::Debug for ZooKeeperStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZooKeeperStore")
            .field("store", &self.describe)
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

/// This store's failures: the client's own errors, and those every store shares.
type Fail = engine::Fail<zookeeper_client::Error>;

impl From<zookeeper_client::Error> for Fail {
    fn from(e: zookeeper_client::Error) -> Self {
        Fail::Client(e)
    }
}

/// Sorts the client's errors: every one is [`StoreError::Unavailable`], in the client's
/// words with their sources.
impl engine::ClientError for zookeeper_client::Error {
    fn store_error(self, store: &str, op: &str) -> StoreError {
        remote::unavailable(store, op, &self)
    }
}

/// The job's lease row as this store keeps it.
#[derive(Debug, Clone)]
struct Row {
    lease: Lease,
    /// The run id and slot of the record made by the row's grant (empty: none).
    run_id: String,
    run_slot: i64,
    /// The newest slot with a record, if any.
    newest: Option<i64>,
    /// The slot and fencing token of each of the job's last [`RECENT_GRANTS`] grants,
    /// newest first: every grant from the oldest listed on is listed, so a record not
    /// listed is older (by token) than every listed one. A grant on a row without the list
    /// (written by a jobguard that did not keep it) starts it.
    grants: Vec<(i64, i64)>,
}

fn row_to_json(row: &Row) -> String {
    json!({
        "holder": row.lease.holder,
        "host": row.lease.host,
        "token": row.lease.token,
        "acquired_at": row.lease.acquired_at,
        "expire_at": row.lease.expire_at,
        "renewal": row.lease.renewal,
        "run_id": row.run_id,
        "run_slot": row.run_slot,
        "newest": row.newest,
        "grants": row.grants,
    })
    .to_string()
}

fn row_from_json(job: &str, text: &[u8]) -> Result<Row, String> {
    let v: Value = serde_json::from_slice(text).map_err(|e| format!("lease of {job}: {e}"))?;
    let s = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    let n = |k: &str| -> Result<i64, String> {
        v.get(k)
            .and_then(Value::as_i64)
            .ok_or_else(|| format!("lease of {job}: {k} missing"))
    };
    Ok(Row {
        lease: Lease {
            job: job.to_string(),
            holder: s("holder"),
            host: s("host"),
            token: n("token")?,
            acquired_at: n("acquired_at")?,
            expire_at: n("expire_at")?,
            // Absent in a row an older jobguard wrote: its grants and renewals are at 0.
            renewal: v.get("renewal").and_then(Value::as_i64).unwrap_or(0),
        },
        run_id: s("run_id"),
        run_slot: n("run_slot")?,
        newest: v.get("newest").and_then(Value::as_i64),
        grants: v
            .get("grants")
            .and_then(Value::as_array)
            .and_then(|a| {
                a.iter()
                    .map(|g| Some((g.get(0)?.as_i64()?, g.get(1)?.as_i64()?)))
                    .collect::<Option<Vec<(i64, i64)>>>()
            })
            .unwrap_or_default(),
    })
}

/// A record node's data: the record without its report (kept in the record's `report`
/// node).
fn record_to_json(run: &Run) -> Result<Vec<u8>, Fail> {
    remote::bare_run_to_json(run)
        .map(String::into_bytes)
        .map_err(Fail::Data)
}

fn report_to_json(run: &Run) -> Result<Vec<u8>, Fail> {
    remote::report_to_json(run)
        .map(String::into_bytes)
        .map_err(Fail::Data)
}

/// The data of a `multi` read's answer: `None` for a node that does not exist.
fn data_of(result: MultiReadResult) -> Result<Option<Vec<u8>>, Fail> {
    match result {
        MultiReadResult::Data { data, .. } => Ok(Some(data)),
        MultiReadResult::Error {
            err: zookeeper_client::Error::NoNode,
        } => Ok(None),
        MultiReadResult::Error { err } => Err(Fail::Client(err)),
        other => Err(Fail::Data(format!("unexpected answer {other:?}"))),
    }
}

/// The children of a `multi` read's answer: empty for a node that does not exist.
fn children_of(result: MultiReadResult) -> Result<Vec<String>, Fail> {
    match result {
        MultiReadResult::Children { children } => Ok(children),
        MultiReadResult::Error {
            err: zookeeper_client::Error::NoNode,
        } => Ok(Vec::new()),
        MultiReadResult::Error { err } => Err(Fail::Client(err)),
        other => Err(Fail::Data(format!("unexpected answer {other:?}"))),
    }
}

/// The contents of the system's trust-store file ([`remote::system_trust_file`]).
///
/// # Errors
/// No such file, or one that cannot be read.
fn system_roots() -> Result<Vec<u8>, String> {
    let file = remote::system_trust_file().ok_or_else(|| {
        "no system trust-store file (install ca-certificates, or give ssl-ca=PATH)".to_string()
    })?;
    std::fs::read(&file).map_err(|e| format!("{}: {e}", file.display()))
}

/// Why a TLS handshake with the server at `host_port` (`HOST:PORT`, `[V6]:PORT`) fails
/// when its certificate is checked against `pem`, as the client checks it: an untrusted
/// issuer, a name that does not match, no TLS at all. `None` when the handshake succeeds,
/// the server cannot be reached or does not finish the handshake in time (the client's own
/// error says so).
fn tls_diagnosis(host_port: &str, pem: &str) -> Option<String> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, ServerName};
    use std::io::ErrorKind;
    use std::net::ToSocketAddrs;
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(pem.as_bytes()).flatten() {
        let _ = roots.add(cert);
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .ok()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let (host, _) = host_port.rsplit_once(':')?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let name = ServerName::try_from(host.to_string()).ok()?;
    let mut conn = rustls::ClientConnection::new(Arc::new(config), name).ok()?;
    let addr = host_port.to_socket_addrs().ok()?.next()?;
    let mut sock = std::net::TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT).ok()?;
    sock.set_read_timeout(Some(CONNECT_TIMEOUT)).ok()?;
    sock.set_write_timeout(Some(CONNECT_TIMEOUT)).ok()?;
    while conn.is_handshaking() {
        match conn.complete_io(&mut sock) {
            // A server too slow to finish the handshake in time says nothing about TLS
            // (a read past its timeout is `WouldBlock` on Linux).
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return None;
            }
            Err(e) => return Some(e.to_string()),
            Ok(_) => {}
        }
    }
    None
}

/// A path segment or path jobguard accepts: plain ASCII, no `.` or `..` segment.
fn path_ok(path: &str) -> bool {
    let segments: Vec<&str> = path.strip_prefix('/').unwrap_or("").split('/').collect();
    path.starts_with('/')
        && (1..=8).contains(&segments.len())
        && segments.iter().all(|s| {
            !s.is_empty()
                && *s != "."
                && *s != ".."
                && s.len() <= 48
                && s.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b':' | b'-' | b'.'))
        })
}

impl ZooKeeperStore {
    /// Parses a `zookeeper://` address (see the module docs). Connects lazily, on first
    /// use.
    ///
    /// # Errors
    /// [`StoreError::Address`] for an address without a host, with a bad port, path or
    /// parameter, `ssl-ca` on a plain `zookeeper://` address, or a trust file that cannot
    /// be read (`ssl-ca`, or the system's when none is given).
    pub fn open(address: &str) -> Result<ZooKeeperStore, StoreError> {
        super::tls_provider();
        let describe = address::mask(address);
        let bad = |detail: String| StoreError::Address {
            address: describe.clone(),
            detail,
        };
        let encoded = remote::encode_password(address);
        if let Some(key) = remote::given_twice(&encoded, &[&["ssl-ca", "ssl_ca"]]) {
            return Err(bad(format!("{key} is given more than once")));
        }
        let (encoded, ours) = remote::take_params(&encoded, &["ssl-ca", "ssl_ca"]);
        let ca = ours.into_iter().flatten().next();
        if let Some((_, query)) = encoded.split_once('?') {
            return Err(bad(format!(
                "unknown parameter in {query:?}; zookeeper addresses take ssl-ca (the path names the node)"
            )));
        }
        let (scheme, after) = encoded.split_once("://").ok_or_else(|| {
            bad("zookeeper addresses start with zookeeper:// or zookeepers://".to_string())
        })?;
        let tls = match scheme.to_ascii_lowercase().as_str() {
            "zookeeper" => false,
            "zookeepers" => true,
            _ => return Err(bad(format!("unknown scheme {scheme:?}"))),
        };
        let tls = match (tls, ca) {
            (false, Some(_)) => {
                return Err(bad("ssl-ca needs a zookeepers:// address".to_string()));
            }
            (false, None) => None,
            (true, Some(path)) => Some(remote::read_ca_file("ssl-ca", &path, true).map_err(&bad)?),
            (true, None) => Some(system_roots().map_err(&bad)?),
        };
        let tls = tls
            .map(String::from_utf8)
            .transpose()
            .map_err(|_| bad("ssl-ca: the file is not PEM text".to_string()))?;
        let (userinfo, rest) = match after.rsplit_once('@') {
            Some((u, h)) => (Some(u), h),
            None => (None, after),
        };
        let (hosts, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        };
        let path = match path.trim_end_matches('/') {
            "" => DEFAULT_PATH.to_string(),
            p => p.to_string(),
        };
        if !path_ok(&path) {
            return Err(bad(format!(
                "path {path:?} is not plain (1 to 8 segments of letters, digits, _:-.)"
            )));
        }
        if hosts.is_empty() {
            return Err(bad("no host".to_string()));
        }
        let mut servers = Vec::new();
        for host in hosts.split(',') {
            let port_of = |p: &str| {
                p.parse::<u16>()
                    .map_err(|_| bad(format!("bad port {p:?} in {host:?}")))
            };
            let with_port = match host.strip_prefix('[') {
                Some(v6) => match v6.split_once(']') {
                    Some((_, "")) => format!("{host}:2181"),
                    Some((_, p)) if p.starts_with(':') => {
                        port_of(&p[1..])?;
                        host.to_string()
                    }
                    _ => return Err(bad(format!("bad host {host:?}"))),
                },
                None => match host.rsplit_once(':') {
                    _ if host.is_empty() => return Err(bad("empty host".to_string())),
                    Some((h, p)) if !h.is_empty() && !h.contains(':') => {
                        port_of(p)?;
                        host.to_string()
                    }
                    Some(_) => return Err(bad(format!("bad host {host:?} (IPv6 goes in [])"))),
                    None => format!("{host}:2181"),
                },
            };
            servers.push(with_port);
        }
        let digest = userinfo.map(|info| {
            let (user, password) = info.split_once(':').unwrap_or((info, ""));
            format!(
                "{}:{}",
                remote::percent_decode(user),
                remote::percent_decode(password)
            )
        });
        // A worker thread of its own drives the session between calls (its pings, the
        // server's answers), so the session does not look dead when a call comes after
        // a quiet while.
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .map_err(|e| StoreError::Unavailable {
                store: describe.clone(),
                detail: format!("start the client's runtime: {e}"),
            })?;
        Ok(ZooKeeperStore {
            rt,
            cluster: servers.join(","),
            digest,
            tls,
            client: None,
            describe,
            path,
            schema_ready: false,
            call_now: std::cell::Cell::new(None),
            judged: None,
        })
    }

    /// Reads "now" from `clock` instead of the ensemble's clock, and judges every lease by
    /// it. Only for tests that move time (the store conformance suite); jobguard itself
    /// never calls it.
    #[doc(hidden)]
    pub fn judge_time_by(&mut self, clock: Arc<dyn Clock>) {
        self.judged = Some(clock);
    }

    fn node(&self, rest: &str) -> String {
        format!("{}/{rest}", self.path)
    }
    fn mark_node(&self, namespace: &str, key: &str) -> String {
        self.node(&format!(
            "mark/{namespace}/{}",
            crate::guard::mark::key_component(key)
        ))
    }

    /// The days (since the epoch) of `job`'s mark index that end at or before `before`
    /// (µs since the epoch): those retention deletes whole.
    fn mark_days_before(
        &mut self,
        job: &str,
        before: i64,
        op: &str,
    ) -> Result<Vec<i64>, StoreError> {
        let days_node = self.node(&format!("markday/{job}"));
        let days: Vec<i64> = self.retrying(op, async |_, client| {
            match client.list_children(&days_node).await {
                Ok(days) => Ok(Some(days.iter().filter_map(|d| d.parse().ok()).collect())),
                Err(zookeeper_client::Error::NoNode) => Ok(Some(Vec::new())),
                Err(e) => Err(Fail::Client(e)),
            }
        })?;
        Ok(days
            .into_iter()
            .filter(|day| (day + 1).saturating_mul(remote::MARK_DAY_USEC) <= before)
            .collect())
    }

    fn mark_day_node(&self, job: &str, day: i64) -> String {
        self.node(&format!("markday/{job}/{day:020}"))
    }
    fn lease_node(&self, job: &str) -> String {
        self.node(&format!("lease/{job}"))
    }
    fn slot_node(&self, job: &str, slot: i64) -> String {
        self.node(&format!("run/{job}/{}", slot_part(slot)))
    }
    /// The node of the record granted with fencing token `token` (20 digits, so that names
    /// sort in grant order).
    fn record_node(&self, job: &str, slot: i64, token: i64) -> String {
        format!("{}/{token:020}", self.slot_node(job, slot))
    }
    fn report_node(&self, job: &str, slot: i64, token: i64) -> String {
        format!("{}/report", self.record_node(job, slot, token))
    }
    fn id_node(&self, run_id: &str) -> String {
        self.node(&format!("id/{run_id}"))
    }
    fn queued_node(&self, job: &str, slot: i64) -> String {
        self.node(&format!("queued/{job}/{}", slot_part(slot)))
    }

    fn acls(&self) -> Acls<'static> {
        if self.digest.is_some() {
            Acls::creator_all()
        } else {
            Acls::anyone_all()
        }
    }

    fn error(&self, op: &str, fail: Fail) -> StoreError {
        fail.store_error(&self.describe, op, SCHEMA_VERSION)
    }

    fn connect(&mut self) -> Result<Client, StoreError> {
        if let Some(c) = &self.client {
            return Ok(c.clone());
        }
        let mut connector = Client::connector()
            .with_session_timeout(SESSION_TIMEOUT)
            .with_connection_timeout(CONNECT_TIMEOUT)
            .with_fail_eagerly();
        if let Some(d) = &self.digest {
            connector = connector.with_auth("digest", d.as_bytes());
        }
        if let Some(pem) = &self.tls {
            // The client builds its TLS configuration with the process's default provider,
            // which `open` made ring ([`super::tls_provider`]).
            let options = zookeeper_client::TlsOptions::new()
                .with_pem_ca(pem)
                .map_err(|e| StoreError::Address {
                    address: self.describe.clone(),
                    detail: format!("ssl-ca: {}", remote::chain(&e)),
                })?;
            connector = connector.with_tls(options);
        }
        let cluster = self.cluster.clone();
        let secure = self.tls.is_some();
        let client = self
            .rt
            .block_on(async {
                let connecting = async {
                    if secure {
                        connector.secure_connect(&cluster).await
                    } else {
                        connector.connect(&cluster).await
                    }
                };
                tokio::time::timeout(CONNECT_TIMEOUT + CALL_TIMEOUT, connecting).await
            })
            .map_err(|_| StoreError::Unavailable {
                store: self.describe.clone(),
                detail: "connect: timed out".to_string(),
            })?
            .map_err(|e| {
                // The client answers a failed handshake with "no available hosts" only.
                let why = self.tls.as_deref().and_then(|pem| {
                    let first = self.cluster.split(',').next()?;
                    tls_diagnosis(first, pem)
                });
                StoreError::Unavailable {
                    store: self.describe.clone(),
                    detail: match why {
                        Some(why) => format!("connect: {}: tls: {why}", remote::chain(&e)),
                        None => format!("connect: {}", remote::chain(&e)),
                    },
                }
            })?;
        self.client = Some(client.clone());
        Ok(client)
    }

    /// Runs `attempt` on the runtime, each try within [`CALL_TIMEOUT`], until it commits or
    /// answers without writing (`None` means the job changed between read and write; at
    /// most [`RETRIES`] tries). After a failure of the session (expired, closed, no
    /// answer) a new session is opened once and the operation starts again: nothing
    /// jobguard keeps lives in a session, and an operation whose answer was lost is
    /// decided again from what the store then holds (a claim finds its own record by its
    /// run id).
    fn retrying<T>(
        &mut self,
        op: &str,
        attempt: impl AsyncFn(&ZooKeeperStore, &Client) -> Result<Option<T>, Fail>,
    ) -> Result<T, StoreError> {
        self.engine(op, |s| {
            for _ in 0..RETRIES {
                if let Some(v) = s.call(async |store, client| attempt(store, client).await)? {
                    return Ok(v);
                }
            }
            Err(Fail::Contended)
        })
    }

    /// Runs `f` with this store's part of [`engine`]'s loop, once more on a new session
    /// after a failure of the session, as [`ZooKeeperStore::retrying`].
    fn engine<T>(
        &mut self,
        op: &str,
        mut f: impl FnMut(&mut Session<'_>) -> Result<T, Fail>,
    ) -> Result<T, StoreError> {
        if !self.schema_ready {
            self.init()?;
        }
        let mut reconnected = false;
        self.call_now.set(None);
        loop {
            let client = self.connect()?;
            let result = f(&mut Session {
                store: self,
                client: &client,
            });
            match result {
                // The session failed (expired, closed, a connection that stopped
                // answering): one new session and one more try.
                Err(Fail::Client(e)) => {
                    self.client = None;
                    if !reconnected {
                        reconnected = true;
                        continue;
                    }
                    return Err(self.error(op, Fail::Client(e)));
                }
                other => return other.map_err(|e| self.error(op, e)),
            }
        }
    }

    /// The store's time, µs since the epoch: the leader's stamp on a write of `P/clock`
    /// (ms), or the test clock of [`ZooKeeperStore::judge_time_by`]. Read once per
    /// operation ([`ZooKeeperStore::retrying`]): a try that lost a race to another host
    /// decides again with the same time, which is still no earlier than the call began, so
    /// a grant's `expire_at` is never later than the caller's own count from its send
    /// time (the store's clock and the host's agree within the clock tolerance), and 32
    /// hosts racing for one slot write the clock 32 times, not once per try.
    async fn now_on(&self, client: &Client) -> Result<i64, Fail> {
        if let Some(now) = self.call_now.get() {
            return Ok(now);
        }
        let (now, _) = self.read_clock(client).await?;
        self.call_now.set(Some(now));
        Ok(now)
    }

    /// Reads the store's time afresh (µs since the epoch, as [`ZooKeeperStore::now_on`])
    /// with the version `P/clock` has after this write (`None` with the test clock, which
    /// writes nothing).
    async fn read_clock(&self, client: &Client) -> Result<(i64, Option<i32>), Fail> {
        Ok(match &self.judged {
            Some(clock) => (clock.now_usec(), None),
            None => {
                let stat = client.set_data(&self.node("clock"), b"", None).await?;
                (stat.mtime.saturating_mul(1000), Some(stat.version))
            }
        })
    }

    /// Commits `writes` after setting the lease row to `row` at the version read (or
    /// creating it, with the job's directories, when there was none). False when the job
    /// changed since the read.
    async fn commit(
        &self,
        client: &Client,
        snap: &Snapshot,
        row: &Row,
        writes: &[Write],
    ) -> Result<bool, Fail> {
        let acls = self.acls();
        let options = CreateMode::Persistent.with_acls(acls);
        let mut multi = client.new_multi_writer();
        let lease = self.lease_node(&snap.job);
        let row_json = row_to_json(row);
        match snap.version {
            Some(v) => multi.add_set_data(&lease, row_json.as_bytes(), Some(v))?,
            None => {
                multi.add_create(&lease, row_json.as_bytes(), &options)?;
                multi.add_create(&self.node(&format!("run/{}", snap.job)), b"", &options)?;
                multi.add_create(&self.node(&format!("queued/{}", snap.job)), b"", &options)?;
            }
        }
        for w in writes {
            match w {
                Write::Create(path, data) => multi.add_create(path, data, &options)?,
                Write::Set(path, data) => multi.add_set_data(path, data, None)?,
                Write::Delete(path) => multi.add_delete(path, None)?,
            }
        }
        match multi.commit().await {
            Ok(_) => Ok(true),
            Err(MultiWriteError::OperationFailed {
                index: 0,
                source: zookeeper_client::Error::BadVersion | zookeeper_client::Error::NodeExists,
            }) => Ok(false),
            Err(MultiWriteError::OperationFailed { index, source }) => Err(Fail::Data(format!(
                "write {index} of {}: {source}",
                writes.len() + 1
            ))),
            Err(MultiWriteError::RequestFailed { source }) => Err(Fail::Client(source)),
        }
    }

    /// Reads the lease row of `job` and the store's time.
    async fn read_row(&self, client: &Client, job: &str) -> Result<Snapshot, Fail> {
        let now = self.now_on(client).await?;
        let mut reader = client.new_multi_reader();
        reader.add_get_data(&self.lease_node(job))?;
        let mut got = reader.commit().await?.into_iter();
        self.snapshot(job, now, got.next())
    }

    fn snapshot(
        &self,
        job: &str,
        now: i64,
        lease: Option<MultiReadResult>,
    ) -> Result<Snapshot, Fail> {
        let (row, version) = match lease {
            Some(MultiReadResult::Data { data, stat }) => (
                Some(row_from_json(job, &data).map_err(Fail::Data)?),
                Some(stat.version),
            ),
            Some(other) => {
                data_of(other)?;
                (None, None)
            }
            None => (None, None),
        };
        Ok(Snapshot {
            job: job.to_string(),
            now,
            row,
            version,
        })
    }

    /// Reads the records of `slots` of `job` in grant order (`None` for a slot with no
    /// node), in batches: the slots' children, then each record with its report.
    async fn read_slots(
        &self,
        client: &Client,
        job: &str,
        slots: &[i64],
    ) -> Result<Vec<Option<Vec<Run>>>, Fail> {
        let mut listed: Vec<Option<Vec<i64>>> = Vec::with_capacity(slots.len());
        for chunk in slots.chunks(READ_BATCH) {
            let mut reader = client.new_multi_reader();
            for s in chunk {
                reader.add_get_children(&self.slot_node(job, *s))?;
            }
            for r in reader.commit().await? {
                listed.push(match r {
                    MultiReadResult::Error {
                        err: zookeeper_client::Error::NoNode,
                    } => None,
                    r => {
                        let mut tokens: Vec<i64> = children_of(r)?
                            .iter()
                            .map(|c| c.parse::<i64>())
                            .collect::<Result<_, _>>()
                            .map_err(|e| Fail::Data(format!("record node name: {e}")))?;
                        tokens.sort_unstable();
                        Some(tokens)
                    }
                });
            }
        }
        let records: Vec<(i64, i64)> = slots
            .iter()
            .zip(&listed)
            .flat_map(|(s, t)| t.iter().flatten().map(|t| (*s, *t)))
            .collect();
        let mut runs: std::collections::BTreeMap<(i64, i64), Run> = records
            .iter()
            .copied()
            .zip(self.read_records(client, job, &records).await?)
            .filter_map(|(key, run)| Some((key, run?)))
            .collect();
        Ok(slots
            .iter()
            .zip(listed)
            .map(|(s, t)| t.map(|t| t.iter().filter_map(|t| runs.remove(&(*s, *t))).collect()))
            .collect())
    }

    /// The writes that turn the records of one slot from what they were into what they
    /// become (creating its node when `existed` is false): a new record's node and report
    /// node, a changed record's node, a changed report's node, and its queued marker, kept
    /// true.
    fn slot_writes(
        &self,
        job: &str,
        change: &SlotWrite,
        existed: bool,
    ) -> Result<Vec<Write>, Fail> {
        let (slot, before, runs) = (change.slot, &change.before, &change.after);
        let mut w = Vec::new();
        if !existed {
            w.push(Write::Create(self.slot_node(job, slot), Vec::new()));
        }
        for run in runs {
            let token = run.fencing_token;
            let record = record_to_json(run)?;
            match before.iter().find(|b| b.run_id == run.run_id) {
                None => {
                    w.push(Write::Create(self.record_node(job, slot, token), record));
                    w.push(Write::Create(
                        self.report_node(job, slot, token),
                        report_to_json(run)?,
                    ));
                }
                Some(b) => {
                    if record_to_json(b)? != record {
                        w.push(Write::Set(self.record_node(job, slot, token), record));
                    }
                    if b.report != run.report {
                        w.push(Write::Set(
                            self.report_node(job, slot, token),
                            report_to_json(run)?,
                        ));
                    }
                }
            }
        }
        let (was, is) = (change.was_queued(), change.is_queued());
        if is && !was {
            w.push(Write::Create(self.queued_node(job, slot), Vec::new()));
        } else if was && !is {
            w.push(Write::Delete(self.queued_node(job, slot)));
        }
        Ok(w)
    }

    /// The records of the job's last grants that are still there (retention may have
    /// deleted some), as many as its lease row lists ([`Row::grants`]), read by their
    /// nodes alone: every record not among them is older than each of them. `None` when
    /// the job has no lease row.
    async fn newest_runs(&self, client: &Client, job: &str) -> Result<Option<Vec<Run>>, Fail> {
        let mut reader = client.new_multi_reader();
        reader.add_get_data(&self.lease_node(job))?;
        let Some(data) = data_of(reader.commit().await?.remove(0))? else {
            return Ok(None);
        };
        let row = row_from_json(job, &data).map_err(Fail::Data)?;
        let runs = self.read_records(client, job, &row.grants).await?;
        Ok(Some(runs.into_iter().flatten().collect()))
    }

    /// The records of `job` at `(slot, token)` each with its report, in batches; `None`
    /// for a record that is not there (deleted since it was listed).
    async fn read_records(
        &self,
        client: &Client,
        job: &str,
        records: &[(i64, i64)],
    ) -> Result<Vec<Option<Run>>, Fail> {
        let mut runs = Vec::with_capacity(records.len());
        for chunk in records.chunks(READ_BATCH / 2) {
            let mut reader = client.new_multi_reader();
            for (slot, token) in chunk {
                reader.add_get_data(&self.record_node(job, *slot, *token))?;
                reader.add_get_data(&self.report_node(job, *slot, *token))?;
            }
            let mut got = reader.commit().await?.into_iter();
            for _ in chunk {
                let record = got.next().map(data_of).transpose()?.flatten();
                let report = got.next().map(data_of).transpose()?.flatten();
                runs.push(
                    record
                        .map(|r| remote::run_with_report(&r, report.as_deref()))
                        .transpose()
                        .map_err(Fail::Data)?,
                );
            }
        }
        Ok(runs)
    }

    /// Every slot of `job` with records, oldest first.
    async fn slots_of(&self, client: &Client, job: &str) -> Result<Vec<i64>, Fail> {
        let mut slots: Vec<i64> = match client
            .list_children(&self.node(&format!("run/{job}")))
            .await
        {
            Ok(c) => c.iter().filter_map(|c| remote::slot_from_part(c)).collect(),
            Err(zookeeper_client::Error::NoNode) => Vec::new(),
            Err(e) => return Err(Fail::Client(e)),
        };
        slots.sort_unstable();
        Ok(slots)
    }

    /// The names under the run node: every job that has held a record (retention deletes
    /// slot nodes, not a job's node), in the server's order.
    async fn job_nodes(&self, client: &Client) -> Result<Vec<String>, Fail> {
        match client.list_children(&self.node("run")).await {
            Ok(c) => Ok(c),
            Err(zookeeper_client::Error::NoNode) => Ok(Vec::new()),
            Err(e) => Err(Fail::Client(e)),
        }
    }
}

/// What a read saw: the lease row at its version, and which of the slots read have a
/// node.
struct Seen {
    snap: Snapshot,
    existing: std::collections::BTreeSet<i64>,
}

/// One session's part of [`engine`]'s loop: reads in `multi` reads, a commit in one
/// `multi` that sets the lease node at the version read. Each call within
/// [`CALL_TIMEOUT`].
struct Session<'a> {
    store: &'a ZooKeeperStore,
    client: &'a Client,
}

impl Session<'_> {
    /// Runs `f` within [`CALL_TIMEOUT`].
    fn call<T>(
        &self,
        f: impl AsyncFnOnce(&ZooKeeperStore, &Client) -> Result<T, Fail>,
    ) -> Result<T, Fail> {
        let (store, client) = (self.store, self.client);
        store
            .rt
            .block_on(async { tokio::time::timeout(CALL_TIMEOUT, f(store, client)).await })
            .unwrap_or(Err(Fail::Client(zookeeper_client::Error::Timeout)))
    }
}

impl engine::Backend for Session<'_> {
    type Version = Seen;
    type Client = zookeeper_client::Error;

    /// Reads the lease row, a record under the run id and (queued first) the queued
    /// slots, then the records of the asked slot, the retried record's, the lease's
    /// record's and the queued slots; and the newest slot, from the row (or, when a slot
    /// ahead of the bound was recorded, from the job's slot nodes).
    fn read_claim(&mut self, req: &ClaimRequest) -> Result<Read<(rules::ClaimState, Seen)>, Fail> {
        self.call(async |store, client| store.read_claim(client, req).await)
            .map(Read::Got)
    }

    /// Reads the lease row and the run id's index, then every record of the record's
    /// slot (this store always reads them).
    fn read_run(
        &mut self,
        job: &str,
        run_id: &str,
        _need: Need,
    ) -> Result<Read<(RunRead, Seen)>, Fail> {
        self.call(async |store, client| store.read_run(client, job, run_id).await)
            .map(Read::Got)
    }

    fn read_lease(&mut self, job: &str, _live: bool) -> Result<Read<(LeaseRead, Seen)>, Fail> {
        self.call(async |store, client| {
            let snap = store.read_row(client, job).await?;
            let lease = snap.row.as_ref().map(|r| r.lease.clone());
            let existing = std::collections::BTreeSet::new();
            let read = LeaseRead {
                now: snap.now,
                lease,
            };
            Ok(Read::Got((read, Seen { snap, existing })))
        })
    }

    /// Reads the lease row, then the slot's records.
    fn read_slot(&mut self, job: &str, slot: i64) -> Result<Read<(engine::Records, Seen)>, Fail> {
        self.call(async |store, client| {
            let snap = store.read_row(client, job).await?;
            let runs = store
                .read_slots(client, job, &[slot])
                .await?
                .pop()
                .flatten();
            let existing = runs.as_ref().map(|_| slot).into_iter().collect();
            Ok(Read::Got((
                runs.unwrap_or_default(),
                Seen { snap, existing },
            )))
        })
    }

    /// Sets the lease node at the version read (a grant's row names its record and keeps
    /// the newest slot and the last grants; a release's row is released) and writes each
    /// changed slot's records, reports and queued marker, and a grant's run id index.
    fn commit(&mut self, seen: Seen, writes: &Writes) -> Result<Commit, Fail> {
        self.call(async |store, client| store.commit_writes(client, seen, writes).await)
    }
}

impl ZooKeeperStore {
    async fn read_claim(
        &self,
        client: &Client,
        req: &ClaimRequest,
    ) -> Result<(rules::ClaimState, Seen), Fail> {
        let job = req.run.job.as_str();
        let now = self.now_on(client).await?;
        let bound = rules::newest_bound(now, req);
        let mut reader = client.new_multi_reader();
        reader.add_get_data(&self.lease_node(job))?;
        reader.add_get_data(&self.id_node(&req.run.run_id))?;
        // The layout version: a claim on a store that a newer jobguard has upgraded since
        // this one opened it is refused.
        reader.add_get_data(&self.node("schema"))?;
        if req.queued_first {
            reader.add_get_children(&self.node(&format!("queued/{job}")))?;
        }
        let mut got = reader.commit().await?.into_iter();
        let snap = self.snapshot(job, now, got.next())?;
        let id_at = got
            .next()
            .map(data_of)
            .transpose()?
            .flatten()
            .map(|d| String::from_utf8_lossy(&d).into_owned());
        if let Some(found) = got.next().map(data_of).transpose()?.flatten()
            && let Some(v) = remote::newer_version(&found, SCHEMA_VERSION).map_err(Fail::Data)?
        {
            return Err(Fail::Newer(v));
        }
        let queued_slots: Vec<i64> = match got.next() {
            Some(r) => {
                let mut v: Vec<i64> = children_of(r)?
                    .iter()
                    .filter_map(|c| remote::slot_from_part(c))
                    .filter(|s| *s != req.run.slot.usec)
                    .collect();
                v.sort_unstable();
                v.truncate(MAX_QUEUED_READ);
                v
            }
            None => Vec::new(),
        };
        // The slots whose records the decision needs besides the asked one: a retried
        // claim's, the lease's grant's, and the queued ones.
        let slot_of_id = |at: &str| {
            at.rsplit_once('/')
                .and_then(|(_, s)| remote::slot_from_part(s))
        };
        let retried_slot = id_at.as_deref().and_then(slot_of_id);
        let lease_slot = snap
            .row
            .as_ref()
            .filter(|r| !r.run_id.is_empty())
            .map(|r| r.run_slot);
        let mut others: Vec<i64> = queued_slots.clone();
        others.extend(retried_slot);
        others.extend(lease_slot);
        others.retain(|s| *s != req.run.slot.usec);
        others.sort_unstable();
        others.dedup();
        let mut read = self
            .read_slots(
                client,
                job,
                &[&[req.run.slot.usec][..], &others[..]].concat(),
            )
            .await?;
        let asked = read.remove(0);
        let asked_existed = asked.is_some();
        let asked_runs = asked.unwrap_or_default();
        let mut slots = std::collections::BTreeMap::new();
        slots.insert(req.run.slot.usec, asked_runs);
        let mut existing: std::collections::BTreeSet<i64> = others
            .iter()
            .zip(&read)
            .filter(|(_, r)| r.is_some())
            .map(|(s, _)| *s)
            .collect();
        if asked_existed {
            existing.insert(req.run.slot.usec);
        }
        let lookup: std::collections::BTreeMap<i64, Vec<Run>> = others
            .iter()
            .copied()
            .zip(read.into_iter().map(Option::unwrap_or_default))
            .collect();
        for s in &queued_slots {
            slots.insert(*s, lookup.get(s).cloned().unwrap_or_default());
        }
        let find = |slot: Option<i64>, run_id: &str| -> Option<Run> {
            let slot = slot?;
            let runs = if slot == req.run.slot.usec {
                slots.get(&slot)?
            } else {
                lookup.get(&slot)?
            };
            runs.iter()
                .find(|r| r.run_id == run_id && r.job == job)
                .cloned()
        };
        let retried = find(retried_slot, &req.run.run_id);
        let lease_run = snap.row.as_ref().and_then(|r| find(lease_slot, &r.run_id));
        let newest = match snap.row.as_ref().and_then(|r| r.newest) {
            Some(n) if n <= bound => Some(n),
            None => None,
            // A slot ahead of the bound was recorded (forced, or by a clock that was
            // ahead): find the newest within it.
            Some(_) => client
                .list_children(&self.node(&format!("run/{job}")))
                .await
                .or_else(|e| match e {
                    zookeeper_client::Error::NoNode => Ok(Vec::new()),
                    e => Err(e),
                })?
                .iter()
                .filter_map(|c| remote::slot_from_part(c))
                .filter(|s| *s <= bound)
                .max(),
        };
        let state = rules::ClaimState {
            now,
            lease: snap.row.as_ref().map(|r| r.lease.clone()),
            retried,
            slots,
            newest,
            lease_run,
        };
        Ok((state, Seen { snap, existing }))
    }

    async fn read_run(
        &self,
        client: &Client,
        job: &str,
        run_id: &str,
    ) -> Result<(RunRead, Seen), Fail> {
        let now = self.now_on(client).await?;
        let mut reader = client.new_multi_reader();
        reader.add_get_data(&self.lease_node(job))?;
        reader.add_get_data(&self.id_node(run_id))?;
        let mut got = reader.commit().await?.into_iter();
        let snap = self.snapshot(job, now, got.next())?;
        let at = got
            .next()
            .map(data_of)
            .transpose()?
            .flatten()
            .map(|d| String::from_utf8_lossy(&d).into_owned());
        // `JOB/SLOT`: a record of another job is not this job's to change.
        let slot = at.as_deref().and_then(|a| {
            let (j, s) = a.rsplit_once('/')?;
            (j == job).then_some(())?;
            remote::slot_from_part(s)
        });
        let slot_runs = match slot {
            Some(s) => self
                .read_slots(client, job, &[s])
                .await?
                .pop()
                .flatten()
                .unwrap_or_default(),
            None => Vec::new(),
        };
        let record = slot_runs.iter().find(|r| r.run_id == run_id).cloned();
        let read = RunRead {
            now,
            lease: snap.row.as_ref().map(|r| r.lease.clone()),
            record,
            slot_runs,
        };
        let existing = slot.into_iter().collect();
        Ok((read, Seen { snap, existing }))
    }

    async fn commit_writes(
        &self,
        client: &Client,
        seen: Seen,
        writes: &Writes,
    ) -> Result<Commit, Fail> {
        let Seen { snap, existing } = seen;
        let job = writes.job.as_str();
        let mut ops = Vec::new();
        for s in &writes.slots {
            if s.changed().next().is_some() {
                ops.extend(self.slot_writes(job, s, existing.contains(&s.slot))?);
            }
        }
        let row = match &writes.lease {
            LeaseWrite::Grant { lease, run, .. } => {
                ops.push(Write::Create(
                    self.id_node(&run.run_id),
                    format!("{job}/{}", slot_part(run.slot.usec)).into_bytes(),
                ));
                let old = snap.row.as_ref();
                Row {
                    lease: lease.clone(),
                    run_id: run.run_id.clone(),
                    run_slot: run.slot.usec,
                    newest: Some(
                        old.and_then(|r| r.newest)
                            .map_or(run.slot.usec, |n| n.max(run.slot.usec)),
                    ),
                    grants: std::iter::once((run.slot.usec, lease.token))
                        .chain(old.iter().flat_map(|r| r.grants.iter().copied()))
                        .take(RECENT_GRANTS)
                        .collect(),
                }
            }
            // A record is never without its job's lease node: with records to write,
            // the node came after the read (the job's first grant); read again.
            _ if snap.row.is_none() => {
                return Ok(if ops.is_empty() {
                    Commit::Done
                } else {
                    Commit::Changed
                });
            }
            LeaseWrite::Release(released) => Row {
                lease: released.clone(),
                ..snap.row.clone().expect("a lease row")
            },
            LeaseWrite::Renew(renewed) => {
                let mut row = snap.row.clone().expect("a lease row");
                row.lease.expire_at = renewed.expire_at;
                row.lease.renewal = renewed.renewal;
                row
            }
            LeaseWrite::Keep => snap.row.clone().expect("a lease row"),
        };
        Ok(if self.commit(client, &snap, &row, &ops).await? {
            Commit::Done
        } else {
            Commit::Changed
        })
    }
}

/// One write of a `multi`, after the lease row's.
enum Write {
    Create(String, Vec<u8>),
    Set(String, Vec<u8>),
    Delete(String),
}

/// What one read of a job's lease row found.
struct Snapshot {
    job: String,
    /// The store's time, µs since the epoch.
    now: i64,
    row: Option<Row>,
    /// The lease node's version (`None`: no node).
    version: Option<i32>,
}

/// Opens the store at `address` for [`crate::store::registry`]; `clock` is not used: the server's clock judges.
///
/// # Errors
/// As [`ZooKeeperStore::open`].
pub(crate) fn open_boxed(
    address: &str,
    clock: std::sync::Arc<dyn crate::guard::clock::Clock>,
) -> Result<Box<dyn Store>, StoreError> {
    let _ = clock;
    Ok(Box::new(ZooKeeperStore::open(address)?))
}

impl Store for ZooKeeperStore {
    /// Drops the client, which closes its session and connection: one of the server's
    /// `maxClientCnxns` per client address (60 by default) is free until the next call,
    /// which opens a new session. No state lives in a session (no ephemeral node). The
    /// cost: a session's creation and its close are each a write through the ensemble's
    /// quorum, once per renewal of a running job.
    fn rest(&mut self) {
        self.client = None;
    }

    fn describe(&self) -> String {
        self.describe.clone()
    }

    engine::store_ops!(renew);

    fn init(&mut self) -> Result<(), StoreError> {
        let client = self.connect()?;
        let options = CreateMode::Persistent.with_acls(self.acls());
        let schema = self.node("schema");
        let dirs: Vec<String> = ["clock", "lease", "run", "id", "queued", "schedule"]
            .iter()
            .map(|d| self.node(d))
            .collect();
        let result = self.rt.block_on(async {
            tokio::time::timeout(CALL_TIMEOUT, async {
                client.mkdir(&self.path, &options).await?;
                for d in &dirs {
                    match client.create(d, b"", &options).await {
                        Ok(_) | Err(zookeeper_client::Error::NodeExists) => {}
                        Err(e) => return Err(e),
                    }
                }
                match client
                    .create(&schema, SCHEMA_VERSION.to_string().as_bytes(), &options)
                    .await
                {
                    Ok(_) => Ok(SCHEMA_VERSION.to_string().into_bytes()),
                    Err(zookeeper_client::Error::NodeExists) => {
                        client.get_data(&schema).await.map(|(d, _)| d)
                    }
                    Err(e) => Err(e),
                }
            })
            .await
            .unwrap_or(Err(zookeeper_client::Error::Timeout))
        });
        let found = match result {
            Ok(found) => found,
            Err(e) => {
                self.client = None;
                return Err(self.error("read the schema version", Fail::Client(e)));
            }
        };
        if let Some(v) = remote::newer_version(&found, SCHEMA_VERSION)
            .map_err(|e| self.error("read the schema version", Fail::Data(e)))?
        {
            return Err(self.error("read the schema version", Fail::Newer(v)));
        }
        self.schema_ready = true;
        Ok(())
    }

    fn now(&mut self) -> Result<i64, StoreError> {
        self.retrying("read the time", async |store, client| {
            store.now_on(client).await.map(Some)
        })
    }

    fn lease(&mut self, job: &str) -> Result<Option<Lease>, StoreError> {
        self.retrying("read lease", async |store, client| {
            let mut reader = client.new_multi_reader();
            reader.add_get_data(&store.lease_node(job))?;
            let got = reader.commit().await?.into_iter().next();
            let snap = store.snapshot(job, 0, got)?;
            Ok(Some(
                snap.row.map(|r| r.lease).filter(|l| !l.holder.is_empty()),
            ))
        })
    }

    fn jobs(&mut self) -> Result<Vec<String>, StoreError> {
        // The children of the run node, less those left without a slot (retention
        // deletes slot nodes, not the job's node): one listing per job, no record read.
        self.retrying("list jobs", async |store, client| {
            let mut jobs = Vec::new();
            for name in store.job_nodes(client).await? {
                if !store.slots_of(client, &name).await?.is_empty() {
                    jobs.push(name);
                }
            }
            jobs.sort();
            Ok(Some(jobs))
        })
    }

    fn runs(&mut self, query: &RunQuery) -> Result<Vec<Run>, StoreError> {
        if let (Some(job), None, None, 1..=RECENT_GRANTS) =
            (&query.job, query.slot, query.slots_from, query.limit)
        {
            let newest = self.retrying("read runs", async |store, client| {
                store.newest_runs(client, job).await.map(Some)
            })?;
            if let Some(newest) = newest {
                let runs = remote::select(newest, query);
                if runs.len() == query.limit {
                    return Ok(runs);
                }
            }
        }
        let runs = self.retrying("read runs", async |store, client| {
            let jobs = match &query.job {
                Some(job) => vec![job.clone()],
                None => store.job_nodes(client).await?,
            };
            let mut runs = Vec::new();
            for job in &jobs {
                let slots = match query.slot {
                    Some(s) => vec![s],
                    None => store.slots_of(client, job).await?,
                };
                for r in store.read_slots(client, job, &slots).await? {
                    runs.extend(r.unwrap_or_default());
                }
            }
            Ok(Some(runs))
        })?;
        Ok(remote::select(runs, query))
    }

    fn read_mark(&mut self, namespace: &str, key: &str) -> Result<Option<Mark>, StoreError> {
        let node = self.mark_node(namespace, key);
        self.retrying("read a mark", async |_, client| {
            match client.get_data(&node).await {
                Ok((data, _)) => remote::mark_from_json(namespace, key, &data)
                    .map(|m| Some(Some(m)))
                    .map_err(Fail::Data),
                Err(zookeeper_client::Error::NoNode) => Ok(Some(None)),
                Err(e) => Err(Fail::Client(e)),
            }
        })
    }

    fn insert_mark(&mut self, mark: &Mark, fenced: bool) -> Result<bool, StoreError> {
        let node = self.mark_node(&mark.namespace, &mark.key);
        let day = self.mark_day_node(&mark.job, mark.marked_at.div_euclid(remote::MARK_DAY_USEC));
        let index = format!(
            "{day}/{}~{}",
            mark.namespace,
            crate::guard::mark::key_component(&mark.key)
        );
        let parents = [
            self.node("mark"),
            self.node(&format!("mark/{}", mark.namespace)),
            self.node("markday"),
            self.node(&format!("markday/{}", mark.job)),
            day.clone(),
        ];
        let data = remote::mark_to_json(mark);
        self.retrying("mark", async |store, client| {
            let options = CreateMode::Persistent.with_acls(store.acls());
            let mut multi = client.new_multi_writer();
            let mut ops = 2;
            // Index of the check of `P/clock` in the multi, when there is one.
            let mut clock_check = None;
            if fenced {
                // The store's time, then the lease node; the multi checks both at the
                // versions read. A takeover or release in between sets the lease node.
                // Every operation of every host writes `P/clock` first, so an unchanged
                // clock node means nothing happened since this time was read: the lease
                // judged unexpired then is still the one the insert lands under, and a
                // run frozen before the multi records nothing once its lease has expired.
                let (now, clock_version) = store.read_clock(client).await?;
                let mut reader = client.new_multi_reader();
                reader.add_get_data(&store.lease_node(&mark.job))?;
                let got = reader.commit().await?.into_iter().next();
                let snap = store.snapshot(&mark.job, now, got)?;
                let lease = snap.row.as_ref().map(|r| &r.lease);
                let held = rules::mark_fence_holds(now, lease, mark, true);
                let (true, Some(version)) = (held, snap.version) else {
                    return Ok(Some(false));
                };
                multi.add_check_version(&store.lease_node(&mark.job), version)?;
                ops += 1;
                if let Some(v) = clock_version {
                    multi.add_check_version(&store.node("clock"), v)?;
                    clock_check = Some(ops - 2);
                    ops += 1;
                }
            }
            multi.add_create(&node, data.as_bytes(), &options)?;
            multi.add_create(&index, b"", &options)?;
            match multi.commit().await {
                Ok(_) => Ok(Some(true)),
                // Another operation wrote the clock meanwhile: read the time again.
                Err(MultiWriteError::OperationFailed {
                    index,
                    source: zookeeper_client::Error::BadVersion,
                }) if Some(index) == clock_check => Ok(None),
                // The lease changed, or the key is recorded.
                Err(MultiWriteError::OperationFailed {
                    source:
                        zookeeper_client::Error::BadVersion | zookeeper_client::Error::NodeExists,
                    ..
                }) => Ok(Some(false)),
                // A parent is missing: the first mark of the namespace or of the job's day.
                Err(MultiWriteError::OperationFailed {
                    source: zookeeper_client::Error::NoNode,
                    ..
                }) => {
                    for parent in &parents {
                        match client.create(parent, b"", &options).await {
                            Ok(_) | Err(zookeeper_client::Error::NodeExists) => {}
                            Err(e) => return Err(Fail::Client(e)),
                        }
                    }
                    Ok(None)
                }
                Err(MultiWriteError::OperationFailed { index, source }) => Err(Fail::Data(
                    format!("mark: write {index} of {ops}: {source}"),
                )),
                Err(MultiWriteError::RequestFailed { source }) => Err(Fail::Client(source)),
            }
        })
    }

    fn delete_marks(&mut self, job: &str, before: i64) -> Result<usize, StoreError> {
        let mut n = 0;
        for day in self.mark_days_before(job, before, "delete marks")? {
            let day_node = self.mark_day_node(job, day);
            n += self.retrying("delete marks", async |store, client| {
                let entries = match client.list_children(&day_node).await {
                    Ok(e) => e,
                    Err(zookeeper_client::Error::NoNode) => return Ok(Some(0)),
                    Err(e) => return Err(Fail::Client(e)),
                };
                // A few hundred deletes per `multi`, well within the 1 MiB request limit.
                for chunk in entries.chunks(200) {
                    let mut multi = client.new_multi_writer();
                    for entry in chunk {
                        if let Some((namespace, key)) = entry.split_once('~') {
                            multi.add_delete(
                                &store.node(&format!("mark/{namespace}/{key}")),
                                None,
                            )?;
                        }
                        multi.add_delete(&format!("{day_node}/{entry}"), None)?;
                    }
                    match multi.commit().await {
                        Ok(_) => {}
                        // Another pass deleted some meanwhile: list again.
                        Err(MultiWriteError::OperationFailed {
                            source: zookeeper_client::Error::NoNode,
                            ..
                        }) => return Ok(None),
                        Err(MultiWriteError::OperationFailed { index, source }) => {
                            return Err(Fail::Data(format!(
                                "delete marks: write {index}: {source}"
                            )));
                        }
                        Err(MultiWriteError::RequestFailed { source }) => {
                            return Err(Fail::Client(source));
                        }
                    }
                }
                match client.delete(&day_node, None).await {
                    Ok(()) | Err(zookeeper_client::Error::NoNode) => Ok(Some(entries.len())),
                    // A mark made meanwhile with a clock that was behind: the next pass.
                    Err(zookeeper_client::Error::NotEmpty) => Ok(Some(entries.len())),
                    Err(e) => Err(Fail::Client(e)),
                }
            })?;
        }
        Ok(n)
    }

    fn count_marks(&mut self, job: &str, before: i64) -> Result<usize, StoreError> {
        let mut n = 0;
        // Each mark is one child of its day's node.
        for day in self.mark_days_before(job, before, "count marks")? {
            let day_node = self.mark_day_node(job, day);
            n += self.retrying("count marks", async |_, client| {
                match client.check_stat(&day_node).await {
                    Ok(stat) => {
                        Ok(Some(stat.map_or(0, |s| {
                            usize::try_from(s.num_children).unwrap_or(0)
                        })))
                    }
                    Err(e) => Err(Fail::Client(e)),
                }
            })?;
        }
        Ok(n)
    }

    fn put_beat(&mut self, host: &str, beat: &str) -> Result<(), StoreError> {
        let parent = self.node("hosts");
        let node = format!("{parent}/{}", crate::guard::mark::key_component(host));
        self.retrying("write the heartbeat", async |store, client| {
            match client.set_data(&node, beat.as_bytes(), None).await {
                Ok(_) => return Ok(Some(())),
                Err(zookeeper_client::Error::NoNode) => {}
                Err(e) => return Err(Fail::Client(e)),
            }
            let options = CreateMode::Persistent.with_acls(store.acls());
            match client.create(&node, beat.as_bytes(), &options).await {
                Ok(_) => Ok(Some(())),
                // Written meanwhile: set it again.
                Err(zookeeper_client::Error::NodeExists) => Ok(None),
                // The first heartbeat of the store.
                Err(zookeeper_client::Error::NoNode) => {
                    match client.create(&parent, b"", &options).await {
                        Ok(_) | Err(zookeeper_client::Error::NodeExists) => Ok(None),
                        Err(e) => Err(Fail::Client(e)),
                    }
                }
                Err(e) => Err(Fail::Client(e)),
            }
        })
    }

    fn beats(&mut self) -> Result<Vec<(String, String)>, StoreError> {
        let parent = self.node("hosts");
        self.retrying("read the heartbeats", async |_, client| {
            let children = match client.list_children(&parent).await {
                Ok(c) => c,
                Err(zookeeper_client::Error::NoNode) => return Ok(Some(Vec::new())),
                Err(e) => return Err(Fail::Client(e)),
            };
            let mut out = Vec::new();
            for child in children {
                let host = remote::percent_decode(&child);
                match client.get_data(&format!("{parent}/{child}")).await {
                    Ok((data, _)) => {
                        let beat = String::from_utf8(data)
                            .map_err(|e| Fail::Data(format!("heartbeat {host:?}: {e}")))?;
                        out.push((host, beat));
                    }
                    // Forgotten since the list was read.
                    Err(zookeeper_client::Error::NoNode) => {}
                    Err(e) => return Err(Fail::Client(e)),
                }
            }
            Ok(Some(out))
        })
    }

    fn read_beat(&mut self, key: &str) -> Result<Option<String>, StoreError> {
        let node = format!(
            "{}/{}",
            self.node("hosts"),
            crate::guard::mark::key_component(key)
        );
        self.retrying("read a fleet record", async |_, client| {
            match client.get_data(&node).await {
                Ok((data, _)) => String::from_utf8(data)
                    .map(|t| Some(Some(t)))
                    .map_err(|e| Fail::Data(format!("fleet record {key:?}: {e}"))),
                Err(zookeeper_client::Error::NoNode) => Ok(Some(None)),
                Err(e) => Err(Fail::Client(e)),
            }
        })
    }

    fn forget_beats(&mut self, hosts: &[String]) -> Result<(), StoreError> {
        let parent = self.node("hosts");
        for host in hosts {
            let node = format!("{parent}/{}", crate::guard::mark::key_component(host));
            self.retrying("forget heartbeats", async |_, client| {
                match client.delete(&node, None).await {
                    Ok(()) | Err(zookeeper_client::Error::NoNode) => Ok(Some(())),
                    Err(e) => Err(Fail::Client(e)),
                }
            })?;
        }
        Ok(())
    }

    fn read_schedule(&mut self, job: &str) -> Result<Option<ScheduleDecl>, StoreError> {
        let node = self.node(&format!("schedule/{job}"));
        self.retrying("read the schedule", async |_, client| {
            match client.get_data(&node).await {
                Ok((data, _)) => remote::schedule_from_json(job, &data)
                    .map(|d| Some(Some(d)))
                    .map_err(Fail::Data),
                Err(zookeeper_client::Error::NoNode) => Ok(Some(None)),
                Err(e) => Err(Fail::Client(e)),
            }
        })
    }

    fn swap_schedule(
        &mut self,
        expected: Option<&ScheduleDecl>,
        new: &ScheduleDecl,
    ) -> Result<bool, StoreError> {
        let node = self.node(&format!("schedule/{}", new.job));
        let value = remote::schedule_to_json(new);
        self.retrying("declare the schedule", async |store, client| {
            let Some(e) = expected else {
                let options = CreateMode::Persistent.with_acls(store.acls());
                return match client.create(&node, value.as_bytes(), &options).await {
                    Ok(_) => Ok(Some(true)),
                    Err(zookeeper_client::Error::NodeExists) => Ok(Some(false)),
                    Err(e) => Err(Fail::Client(e)),
                };
            };
            let (data, stat) = match client.get_data(&node).await {
                Ok(got) => got,
                Err(zookeeper_client::Error::NoNode) => return Ok(Some(false)),
                Err(e) => return Err(Fail::Client(e)),
            };
            if remote::schedule_from_json(&new.job, &data).map_err(Fail::Data)? != *e {
                return Ok(Some(false));
            }
            match client
                .set_data(&node, value.as_bytes(), Some(stat.version))
                .await
            {
                Ok(_) => Ok(Some(true)),
                Err(zookeeper_client::Error::BadVersion) => Ok(Some(false)),
                Err(e) => Err(Fail::Client(e)),
            }
        })
    }

    fn delete_slots(
        &mut self,
        job: &str,
        slots: &[i64],
        started_before: i64,
    ) -> Result<usize, StoreError> {
        // A few slots per `multi`, well within ZooKeeper's 1 MiB request limit.
        let mut n = 0;
        for chunk in remote::distinct_slots(slots).chunks(20) {
            n += self.retrying("delete runs", async |store, client| {
                let snap = store.read_row(client, job).await?;
                let Some(mut row) = snap.row.clone() else {
                    return Ok(Some(0));
                };
                let found = store.read_slots(client, job, chunk).await?;
                let mut writes = Vec::new();
                let mut n = 0;
                let mut gone = Vec::new();
                for (slot, runs) in chunk.iter().zip(found) {
                    let Some(runs) = runs else { continue };
                    if !rules::retention_may_delete(&runs, started_before) {
                        continue;
                    }
                    for r in &runs {
                        writes.push(Write::Delete(store.id_node(&r.run_id)));
                        let token = r.fencing_token;
                        writes.push(Write::Delete(store.report_node(job, *slot, token)));
                        writes.push(Write::Delete(store.record_node(job, *slot, token)));
                    }
                    if runs
                        .iter()
                        .any(|r| r.resolution == Some(Resolution::Queued))
                    {
                        writes.push(Write::Delete(store.queued_node(job, *slot)));
                    }
                    writes.push(Write::Delete(store.slot_node(job, *slot)));
                    n += runs.len();
                    gone.push(*slot);
                }
                if gone.is_empty() {
                    return Ok(Some(0));
                }
                if row.newest.is_some_and(|s| gone.contains(&s)) {
                    row.newest = store
                        .slots_of(client, job)
                        .await?
                        .into_iter()
                        .filter(|s| !gone.contains(s))
                        .max();
                }
                Ok(store
                    .commit(client, &snap, &row, &writes)
                    .await?
                    .then_some(n))
            })?;
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses() {
        for (good, cluster, path) in [
            ("zookeeper://127.0.0.1:2181", "127.0.0.1:2181", DEFAULT_PATH),
            (
                "zookeeper://h1,h2:2182,h3/ci/a",
                "h1:2181,h2:2182,h3:2181",
                "/ci/a",
            ),
            ("zookeeper://user:p%40ss@h/x/", "h:2181", "/x"),
            ("zookeeper://[::1]:2181", "[::1]:2181", DEFAULT_PATH),
        ] {
            let s = ZooKeeperStore::open(good).unwrap_or_else(|e| panic!("{good}: {e}"));
            assert_eq!(
                (s.cluster.as_str(), s.path.as_str()),
                (cluster, path),
                "{good}"
            );
        }
        let s = ZooKeeperStore::open("zookeeper://user:p%40ss@h").unwrap();
        assert_eq!(s.digest.as_deref(), Some("user:p@ss"));
        assert!(s.tls.is_none());
        let s = ZooKeeperStore::open("zookeepers://h1,h2:2281/x").unwrap();
        assert_eq!(
            (s.cluster.as_str(), s.path.as_str()),
            ("h1:2181,h2:2281", "/x")
        );
        assert!(
            s.tls
                .as_deref()
                .is_some_and(|p| p.contains("BEGIN CERTIFICATE"))
        );
        for (bad, why) in [
            ("zookeeper://", "no host"),
            ("zookeeper://h:99999", "bad port"),
            ("zookeeper://h/a b", "not plain"),
            ("zookeeper://h/a/../b", "not plain"),
            ("zookeeper://h?ssl=1", "unknown parameter"),
            (
                "zookeeper://h?ssl-ca=/etc/ssl/certs/ca-certificates.crt",
                "zookeepers://",
            ),
            ("zookeepers://h?ssl-ca=relative.pem", "absolute"),
            (
                "zookeepers://h?ssl-ca=/a.pem&ssl_ca=/b.pem",
                "more than once",
            ),
            ("zookeeperx://h", "unknown scheme"),
            ("zookeeper://h1,,h2", "empty host"),
        ] {
            let e = ZooKeeperStore::open(bad).unwrap_err().to_string();
            assert!(e.contains(why), "{bad}: {e}");
        }
        let e = ZooKeeperStore::open("zookeeper://u:secret@h/a b")
            .unwrap_err()
            .to_string();
        assert!(!e.contains("secret"), "{e}");
    }

    #[test]
    fn rows_read_back() {
        let row = Row {
            lease: Lease {
                job: "j".into(),
                holder: "h".into(),
                host: "host".into(),
                token: 7,
                acquired_at: 1,
                expire_at: 2,
                renewal: 3,
            },
            run_id: "r".into(),
            run_slot: -5,
            newest: Some(9),
            grants: vec![(9, 3), (-5, 2), (9, 1)],
        };
        let back = row_from_json("j", row_to_json(&row).as_bytes()).unwrap();
        assert_eq!(format!("{row:?}"), format!("{back:?}"));
        let row = Row {
            grants: Vec::new(),
            ..row
        };
        let back = row_from_json("j", row_to_json(&row).as_bytes()).unwrap();
        assert_eq!(format!("{row:?}"), format!("{back:?}"));
    }
}

//! The Redis store: leases and the run ledger in Redis, decided by the pure rules of
//! [`super::rules`] and applied in one `MULTI`/`EXEC` transaction that holds only while
//! nothing it read changed (`WATCH`).
//!
//! Address: `redis://[[USER]:PASSWORD@]HOST[:PORT][/DB][?prefix=PREFIX]` (the `redis` crate's
//! URL form, <https://docs.rs/redis/latest/redis/#connection-parameters>); `prefix` (default
//! `jobguard:`) starts every key, so several installations or test cases can share a
//! server.
//!
//! TLS: `rediss://…` (the scheme of redis-cli's `-u` and of the client) encrypts and
//! checks the server's certificate: it must chain to a root of the system's trust store
//! (`/etc/ssl/certs`, or `SSL_CERT_FILE`/`SSL_CERT_DIR`) and name the host of the address
//! (a DNS name or IP address in its subjectAltName). `ssl-ca=PATH` (as redis-cli's
//! `--cacert`) trusts the PEM certificates in that file instead of the system's roots.
//! `rediss://…#insecure` (the client's convention, after any parameters) encrypts without
//! checking the certificate; it cannot be combined with `ssl-ca`. TLS is rustls with the
//! ring provider; client certificates are not supported.
//!
//! Key layout (P is the prefix):
//! - `P schema`: the schema version (set once with `SETNX`, raised by a migration).
//! - `P lease:JOB`: hash `holder host token acquired_at expire_at run_id renewal`; never
//!   expires and is never deleted (a released lease has an empty holder and `expire_at`
//!   0). Its token is the job's fencing-token counter.
//! - `P alive:JOB`: the holder's id while its lease lives, expiring by the server's clock
//!   (`PEXPIREAT`) at the last millisecond before the lease's `expire_at`: set at a grant
//!   and at each renewal, deleted at a release. Since schema 4.
//! - `P token:JOB`: the counter of schema 3 and earlier, whose claims `INCR`ed it; no longer
//!   written or read (a claim of those versions is refused before it reads it).
//! - `P run:RUN_ID`: hash of one ledger record, fields named as the SQL stores' columns
//!   (`job slot_usec slot_zone attempt outcome reason exit_status forced trigger_kind host
//!   machine_id boot_id pid pid_start invocation_id started_at finished_at fencing_token
//!   report resolution`); absent fields are NULL. A job's records that started in the same
//!   µs are ordered by their fencing tokens (every grant makes one record). Records of
//!   schema 3 and earlier may carry a field `seq`, which nothing reads.
//! - `P runs:JOB`: sorted set of the job's run ids, scored by `started_at`.
//! - `P slot:JOB:SLOT_USEC`: set of the run ids of one (job, slot).
//! - `P slots:JOB`: sorted set of the job's recorded slots (member and score: the slot in µs),
//!   for the newest slot; `P queued:JOB`: the same for slots that had an attempt queued
//!   for a re-run (a hint: `claim` drops a slot that no longer has one queued or
//!   running). Since schema 2, whose migration builds both from the records (putting
//!   slots with a running record into `queued:JOB` too: a host of schema 1 may end that
//!   run with its own finish script, which does not index what it queues).
//! - `P jobs`: set of job names.
//! - `P schedule:JOB`, `P mark:NAMESPACE:KEY`, `P marks:JOB`: see [`Store::swap_schedule`]
//!   and [`Store::insert_mark`].
//! - `P hosts`: hash of the hosts' heartbeats, host key → JSON ([`Store::put_beat`]).
//!
//! Every operation reads what its rule needs under `WATCH` (the lease hash and every key
//! it reads: the slot's set and each of its records, the queued and slot indexes), judges
//! time by the server's `TIME`, decides with the rules, and writes in one `MULTI`/`EXEC`,
//! which Redis refuses when a watched key changed meanwhile (or expired: Redis 6.0.9 and
//! later); the operation then starts again, at most [`RETRIES`] times. A refusal writes
//! nothing and needs no transaction. A claim takes three round trips and a fourth to
//! commit (one more when it reads queued slots); a renewal two. No Lua script runs: the
//! server stores, compares and sets. Since schema 4 every older jobguard's claim is
//! refused (its scripts decided on the server). Key names are built from the prefix, so
//! this layout is for a single Redis server (or a primary with replicas), not Redis
//! Cluster.
//!
//! A decision is judged at its read, and its transaction commits only while what it read
//! is unchanged: a holder frozen between its read and its commit (one round trip) writes
//! nothing once another host took the lease. Nor once the lease expired by the server's
//! clock, taken over or not: a renewal, a finish and a fenced mark also watch
//! `P alive:JOB`, and Redis refuses a transaction whose watched key expired before its
//! `EXEC` (Redis 6.0.9 and later; <https://redis.io/docs/latest/develop/interact/transactions/>;
//! [`RedisStore::weak_settings`] names an older server), as the lease's expiry is judged
//! in the same atomic step as the write. For those writes a lease whose `alive` key is
//! gone counts as expired, whatever its `expire_at`. With a test clock
//! ([`RedisStore::judge_time_by`]) no `alive` key is written: the rules judge alone.
//!
//! Durability is the server's: a Redis without AOF (`appendonly yes`, `appendfsync
//! always` or `everysec`) loses the latest leases and records when it restarts.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use redis::{Connection, Pipeline, Value};

use crate::guard::clock::Clock;
use crate::guard::lease::Lease;
use crate::guard::ledger::{Finish, Outcome, Resolution, Run};
use crate::store::engine::{
    self, Commit, LeaseRead, LeaseWrite, Need, RETRIES, Read, RunRead, Writes,
};
use crate::store::remote::{self, CALL_TIMEOUT, CONNECT_TIMEOUT};
use crate::store::rules;
use crate::store::{
    Claim, ClaimRequest, Finished, Mark, RunQuery, ScheduleDecl, Store, StoreError, address,
};

/// The schema (key layout) version this jobguard writes and understands (`P schema`).
/// 4: every decision is the rules', applied with `WATCH`/`MULTI`/`EXEC`; older claims
/// (Lua) are refused.
pub const SCHEMA_VERSION: i64 = 4;

/// The key prefix when the address names none.
pub const DEFAULT_PREFIX: &str = "jobguard:";

/// How many marks one transaction of [`Store::delete_marks`] deletes.
const DELETE_MARKS_BATCH: usize = 1000;

/// How many slots one transaction of [`Store::delete_slots`] judges and deletes.
const DELETE_SLOTS_BATCH: usize = 200;

/// A mark's member in its job's index, and its key after `PREFIX mark:`: the namespace
/// (no `:` in it, [`crate::guard::mark::check_namespace`]) and the encoded key.
fn mark_member(namespace: &str, key: &str) -> String {
    format!("{namespace}:{}", crate::guard::mark::key_component(key))
}

/// A mark's key: `PREFIX mark:NAMESPACE:KEY`, the key percent-encoded.
fn mark_key(prefix: &str, namespace: &str, key: &str) -> String {
    format!("{prefix}mark:{}", mark_member(namespace, key))
}

/// The keys of one job.
struct Keys<'a> {
    p: &'a str,
    job: &'a str,
}

impl Keys<'_> {
    fn lease(&self) -> String {
        format!("{}lease:{}", self.p, self.job)
    }
    fn alive(&self) -> String {
        format!("{}alive:{}", self.p, self.job)
    }
    fn runs(&self) -> String {
        format!("{}runs:{}", self.p, self.job)
    }
    fn slots(&self) -> String {
        format!("{}slots:{}", self.p, self.job)
    }
    fn queued(&self) -> String {
        format!("{}queued:{}", self.p, self.job)
    }
    fn slot(&self, slot: i64) -> String {
        format!("{}slot:{}:{slot}", self.p, self.job)
    }
    fn run(&self, run_id: &str) -> String {
        format!("{}run:{run_id}", self.p)
    }
}

/// The Redis store: one connection (reconnected after a failure).
pub struct RedisStore {
    client: redis::Client,
    conn: Option<Connection>,
    describe: String,
    prefix: String,
    schema_ready: bool,
    test_clock: Option<Arc<dyn Clock>>,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("describe", &self.describe)
            .finish_non_exhaustive()
    }
}

/// This store's failures: the client's own errors, and those every store shares.
type Fail = engine::Fail<redis::RedisError>;

impl From<redis::RedisError> for Fail {
    fn from(e: redis::RedisError) -> Self {
        Fail::Client(e)
    }
}

impl From<redis::ParsingError> for Fail {
    fn from(e: redis::ParsingError) -> Self {
        Fail::Data(e.to_string())
    }
}

type Hash = HashMap<String, String>;

/// A run record from its hash (`HGETALL`); `None` for an empty hash (no such record).
fn run_of(hash: Hash) -> Result<Option<Run>, Fail> {
    if hash.is_empty() {
        return Ok(None);
    }
    let object: serde_json::Map<String, serde_json::Value> = hash
        .into_iter()
        .map(|(k, v)| (k, serde_json::Value::String(v)))
        .collect();
    remote::run_from_object(&object)
        .map(Some)
        .map_err(Fail::Data)
}

/// The fields of a run's hash (absent: NULL), as [`run_of`] reads them.
fn run_fields(run: &Run) -> Result<Vec<(&'static str, String)>, Fail> {
    let report = serde_json::to_string(&run.report).map_err(|e| Fail::Data(e.to_string()))?;
    let mut f = vec![
        ("run_id", run.run_id.clone()),
        ("job", run.job.clone()),
        ("slot_usec", run.slot.usec.to_string()),
        ("slot_zone", run.slot.zone.clone()),
        ("attempt", run.attempt.to_string()),
        ("outcome", run.outcome.as_str().to_string()),
        ("forced", if run.forced { "1" } else { "0" }.to_string()),
        ("trigger_kind", run.trigger.clone()),
        ("host", run.host.clone()),
        ("machine_id", run.machine_id.clone()),
        ("boot_id", run.boot_id.clone()),
        ("pid", run.pid.to_string()),
        ("pid_start", run.pid_start.to_string()),
        ("started_at", run.started_at.to_string()),
        ("fencing_token", run.fencing_token.to_string()),
        ("report", report),
    ];
    let optional = [
        ("reason", run.reason.clone()),
        ("exit_status", run.exit_status.map(|s| s.to_string())),
        ("invocation_id", run.invocation_id.clone()),
        ("finished_at", run.finished_at.map(|t| t.to_string())),
        ("resolution", run.resolution.map(|r| r.as_str().to_string())),
    ];
    f.extend(optional.into_iter().filter_map(|(k, v)| Some((k, v?))));
    Ok(f)
}

/// The lease in a lease hash (`HGETALL`); `None` when the job was never granted. An
/// absent `renewal` (a grant of schema 2 or earlier) is 0.
fn lease_of(job: &str, hash: &Hash) -> Result<Option<Lease>, Fail> {
    if hash.is_empty() {
        return Ok(None);
    }
    let int = |name: &str| -> Result<i64, Fail> {
        match hash.get(name).map(String::as_str) {
            None | Some("") if name == "renewal" => Ok(0),
            v => v.and_then(|v| v.parse().ok()).ok_or_else(|| {
                Fail::Data(format!(
                    "job {job}: lease field {name} is {v:?}, not a number"
                ))
            }),
        }
    };
    Ok(Some(Lease {
        job: job.to_string(),
        holder: hash.get("holder").cloned().unwrap_or_default(),
        host: hash.get("host").cloned().unwrap_or_default(),
        token: int("token")?,
        acquired_at: int("acquired_at")?,
        expire_at: int("expire_at")?,
        renewal: int("renewal")?,
    }))
}

/// Queues the writes of `lease` (with the run id of its record, `run_id`) on `pipe`, and
/// of its `alive` key unless a test clock judges (`judged`): set to expire with a held
/// lease, deleted with a released one.
fn put_lease(
    pipe: &mut Pipeline,
    keys: &Keys<'_>,
    lease: &Lease,
    run_id: Option<&str>,
    judged: bool,
) {
    put_alive(pipe, keys, lease, judged);
    let mut fields = vec![
        ("holder", lease.holder.clone()),
        ("host", lease.host.clone()),
        ("token", lease.token.to_string()),
        ("acquired_at", lease.acquired_at.to_string()),
        ("expire_at", lease.expire_at.to_string()),
        ("renewal", lease.renewal.to_string()),
    ];
    if let Some(id) = run_id {
        fields.push(("run_id", id.to_string()));
    }
    pipe.hset_multiple(keys.lease(), &fields);
}

/// Queues the write of `lease`'s `alive` key on `pipe` (see [`put_lease`]). It expires
/// (`PEXPIREAT`, Redis 2.6) at the last whole millisecond before the lease's `expire_at`
/// (µs): Redis keeps a key while its millisecond clock is at or before the expiry, so the
/// key is gone by `expire_at` and never outlives the lease.
fn put_alive(pipe: &mut Pipeline, keys: &Keys<'_>, lease: &Lease, judged: bool) {
    if lease.holder.is_empty() {
        pipe.del(keys.alive());
    } else if !judged {
        let last_ms = lease.expire_at.div_euclid(1000).saturating_sub(1).max(1);
        pipe.set(keys.alive(), &lease.holder)
            .cmd("PEXPIREAT")
            .arg(keys.alive())
            .arg(last_ms);
    }
}

/// A pipeline that drops what an earlier try watched, watches `keys` and the job's
/// `alive` key, and first reads whether that key exists (its first answer). An expired
/// key is removed by an `EXISTS` before the `WATCH` (Redis 6.0 aborts a transaction that
/// watched a key already expired but not yet removed, every time).
fn watching_alive(k: &Keys<'_>, keys: &[String]) -> Pipeline {
    let mut watch = keys.to_vec();
    watch.push(k.alive());
    let mut pipe = redis::pipe();
    pipe.cmd("UNWATCH")
        .ignore()
        .exists(k.alive())
        .ignore()
        .cmd("WATCH")
        .arg(watch)
        .ignore()
        .exists(k.alive());
    pipe
}

/// The lease row as the rules may judge it for a write that must land while the lease
/// lives (a renewal, a finish while held, a fenced mark): with no `alive` key watched
/// (`alive` false, and no test clock: `judged` false), nothing would refuse a commit that
/// comes after the expiry, so the lease counts as expired now.
fn as_watched(row: Option<Lease>, alive: bool, judged: bool, now: i64) -> Option<Lease> {
    row.map(|l| {
        if alive || judged || l.holder.is_empty() {
            l
        } else {
            Lease {
                expire_at: l.expire_at.min(now),
                ..l
            }
        }
    })
}

/// Queues the whole of `run`'s record on `pipe`: its hash replaced.
fn put_run(pipe: &mut Pipeline, keys: &Keys<'_>, run: &Run) -> Result<(), Fail> {
    let key = keys.run(&run.run_id);
    pipe.del(&key).hset_multiple(&key, &run_fields(run)?);
    Ok(())
}

/// The records of `hashes`, oldest first (by start, then fencing token).
fn runs_of(hashes: Vec<Hash>) -> Result<Vec<Run>, Fail> {
    let mut runs = Vec::with_capacity(hashes.len());
    for h in hashes {
        if let Some(run) = run_of(h)? {
            runs.push(run);
        }
    }
    runs.sort_by_key(|r| (r.started_at, r.fencing_token));
    Ok(runs)
}

/// A pipeline that first drops what an earlier try watched (a refusal leaves its keys
/// watched), then watches `keys`.
fn watching(keys: &[String]) -> Pipeline {
    let mut pipe = redis::pipe();
    pipe.cmd("UNWATCH").ignore().cmd("WATCH").arg(keys).ignore();
    pipe
}

/// A pipeline that watches `keys` too (after a first [`watching`]), then reads.
fn watching_more(keys: &[String]) -> Pipeline {
    let mut pipe = redis::pipe();
    if !keys.is_empty() {
        pipe.cmd("WATCH").arg(keys).ignore();
    }
    pipe
}

/// Reads the hashes at `keys` with `pipe` (which may watch first).
fn hashes(c: &mut Connection, mut pipe: Pipeline, keys: &[String]) -> Result<Vec<Hash>, Fail> {
    if keys.is_empty() {
        return Ok(Vec::new());
    }
    for k in keys {
        pipe.hgetall(k);
    }
    Ok(pipe.query(c)?)
}

/// Commits `pipe` as one `MULTI`/`EXEC`: false when a watched key changed (nothing was
/// written).
fn commit(c: &mut Connection, mut pipe: Pipeline) -> Result<bool, Fail> {
    let done: Option<Vec<Value>> = pipe.atomic().query(c)?;
    Ok(done.is_some())
}

/// The server's time from a `TIME` answer (seconds, microseconds), µs since the epoch.
fn usec((secs, micros): (i64, i64)) -> i64 {
    secs.saturating_mul(1_000_000).saturating_add(micros)
}

fn unavailable(e: &redis::RedisError) -> bool {
    e.is_io_error()
        || e.is_timeout()
        || e.is_connection_refusal()
        || e.is_connection_dropped()
        || e.is_unrecoverable_error()
}

/// What went wrong, in words: a socket deadline that passed is "timed out after N s"
/// (not the C library's "Resource temporarily unavailable"); a `rediss://` connection
/// that gets no TLS answer says that the server may not speak TLS (a plain Redis
/// reads the TLS greeting as a command and never answers it).
fn explain(store: &str, op: &str, e: &redis::RedisError) -> String {
    let connect = op.ends_with("connect");
    let tls = store
        .get(..9)
        .is_some_and(|s| s.eq_ignore_ascii_case("rediss://"));
    let mut text = if e.is_timeout() {
        let limit = if connect {
            CONNECT_TIMEOUT
        } else {
            CALL_TIMEOUT
        };
        format!("no answer: timed out after {} s", limit.as_secs())
    } else {
        e.to_string()
    };
    if connect && tls && !e.is_connection_refusal() {
        text.push_str(
            " (TLS handshake: a rediss:// address needs a server that speaks TLS on this port; \
             a plain Redis does not answer it)",
        );
    }
    text
}

/// Sorts the client's errors: those of the connection (I/O, a deadline, a refused or
/// dropped connection) are [`StoreError::Unavailable`], the server's answers
/// [`StoreError::Invalid`]; [`explain`] puts them in words.
impl engine::ClientError for redis::RedisError {
    fn store_error(self, store: &str, op: &str) -> StoreError {
        let detail = format!("{op}: {}", explain(store, op, &self));
        let store = store.to_string();
        if unavailable(&self) {
            StoreError::Unavailable { store, detail }
        } else {
            StoreError::Invalid { store, detail }
        }
    }
}

impl RedisStore {
    /// Parses `address` and prepares a store; connects on the first call.
    ///
    /// # Errors
    /// [`StoreError::Address`] when the address is not a Redis URL the client accepts,
    /// `prefix=` holds more than letters, digits and `_:-.` (at most 48), or `ssl-ca=`
    /// names a file without a readable PEM certificate or comes without `rediss://` or
    /// with `#insecure`.
    pub fn open(address: &str) -> Result<RedisStore, StoreError> {
        super::tls_provider();
        let describe = address::mask(address);
        let address = &remote::encode_password(address);
        let bad = |detail: String| StoreError::Address {
            address: describe.clone(),
            detail,
        };
        if let Some(key) = remote::given_twice(address, &[&["prefix"], &["ssl-ca", "ssl_ca"]]) {
            return Err(bad(format!("{key} is given more than once")));
        }
        let (rest, ours) = remote::take_params(address, &["prefix", "ssl-ca", "ssl_ca"]);
        let mut ours = ours.into_iter();
        let prefix = ours
            .next()
            .flatten()
            .unwrap_or_else(|| DEFAULT_PREFIX.to_string());
        if !remote::plain_name(&prefix, true) {
            return Err(bad(format!(
                "prefix {prefix:?} is not plain (letters, digits, _:-.)"
            )));
        }
        let ca = match (ours.next().flatten(), ours.next().flatten()) {
            (Some(ca), _) | (None, Some(ca)) => Some(ca),
            (None, None) => None,
        };
        let client = match ca {
            None => redis::Client::open(rest),
            Some(ca) => {
                if !rest
                    .get(..9)
                    .is_some_and(|s| s.eq_ignore_ascii_case("rediss://"))
                {
                    return Err(bad("ssl-ca needs a rediss:// address".to_string()));
                }
                if rest.ends_with("#insecure") {
                    return Err(bad(
                        "ssl-ca checks the certificate; #insecure does not: choose one".to_string(),
                    ));
                }
                let pem = remote::read_ca_file("ssl-ca", &ca, true).map_err(&bad)?;
                redis::Client::build_with_tls(
                    rest,
                    redis::TlsCertificates {
                        client_tls: None,
                        root_cert: Some(pem),
                    },
                )
            }
        }
        .map_err(|e| bad(format!("not a redis address: {e}")))?;
        Ok(RedisStore {
            client,
            conn: None,
            describe,
            prefix,
            schema_ready: false,
            test_clock: None,
        })
    }

    /// Judges time by `clock` instead of the server's `TIME`: the rules still make every
    /// decision, with `clock`'s time. Only for tests that move time (the store
    /// conformance suite); jobguard itself never calls it.
    #[doc(hidden)]
    pub fn judge_time_by(&mut self, clock: Arc<dyn Clock>) {
        self.test_clock = Some(clock);
    }

    fn error(&self, op: &str, fail: Fail) -> StoreError {
        fail.store_error(&self.describe, op, SCHEMA_VERSION)
    }

    /// Runs `f` on the connection (connecting first if needed) with read and write
    /// deadlines of [`CALL_TIMEOUT`]; a failed connection is dropped.
    fn call<T>(
        &mut self,
        op: &str,
        f: impl FnOnce(&mut Connection, &str) -> Result<T, Fail>,
    ) -> Result<T, StoreError> {
        if self.conn.is_none() {
            let conn = self
                .client
                .get_connection_with_timeout(CONNECT_TIMEOUT)
                .and_then(|c| {
                    c.set_read_timeout(Some(CALL_TIMEOUT))?;
                    c.set_write_timeout(Some(CALL_TIMEOUT))?;
                    Ok(c)
                })
                .map_err(|e| self.error(&format!("{op}: connect"), Fail::Client(e)))?;
            self.conn = Some(conn);
        }
        let Some(conn) = self.conn.as_mut() else {
            return Err(self.error(op, Fail::Data("no connection".to_string())));
        };
        match f(conn, &self.prefix) {
            Ok(v) => Ok(v),
            Err(Fail::Client(e)) if unavailable(&e) => {
                self.conn = None;
                Err(self.error(op, Fail::Client(e)))
            }
            Err(e) => Err(self.error(op, e)),
        }
    }

    /// Settings of the server that can lose a lease or a record, one sentence each:
    /// no persistence (`appendonly no`, and no `save` points either), a
    /// `maxmemory-policy` other than `noeviction` (an evicted lease key is a lost lock),
    /// and a server older than 6.0.9 (`INFO server`), which commits a transaction whose
    /// watched `alive` key expired.
    /// Read with `CONFIG GET`; where that command is not allowed (managed servers), from
    /// `INFO persistence` and `INFO memory` (which tell AOF but not `save`). See
    /// <https://redis.io/docs/latest/operate/oss_and_stack/management/persistence/>.
    ///
    /// # Errors
    /// As any call: [`StoreError::Unavailable`] when the server cannot be reached.
    pub fn weak_settings(&mut self) -> Result<Vec<String>, StoreError> {
        type Pairs = Vec<(String, String)>;
        let config: Result<Pairs, StoreError> = self.call("config get", |c, _| {
            Ok(redis::cmd("CONFIG")
                .arg("GET")
                .arg("appendonly")
                .arg("save")
                .arg("maxmemory-policy")
                .query(c)?)
        });
        let (aof, save, policy) = match config {
            Ok(pairs) => {
                let get = |k: &str| {
                    pairs
                        .iter()
                        .find(|(key, _)| key == k)
                        .map(|(_, v)| v.clone())
                };
                (
                    get("appendonly").map(|v| v == "yes"),
                    get("save"),
                    get("maxmemory-policy"),
                )
            }
            Err(StoreError::Invalid { .. }) => {
                let info: String = self.call("info", |c, _| {
                    Ok(redis::cmd("INFO")
                        .arg("persistence")
                        .arg("memory")
                        .query(c)?)
                })?;
                let get = |k: &str| {
                    info.lines()
                        .find_map(|l| l.trim().strip_prefix(k)?.strip_prefix(':'))
                        .map(str::to_string)
                };
                (
                    get("aof_enabled").map(|v| v == "1"),
                    None,
                    get("maxmemory_policy"),
                )
            }
            Err(e) => return Err(e),
        };
        let mut out = Vec::new();
        match (aof, save.as_deref().map(str::trim)) {
            (Some(false), Some("")) => out.push(
                "Redis keeps nothing on disk (appendonly no, save \"\"): a restart forgets \
                 every lease and record; set appendonly yes"
                    .to_string(),
            ),
            (Some(false), Some(points)) => out.push(format!(
                "Redis writes snapshots only (appendonly no, save \"{points}\"): a restart \
                 forgets what came after the last one; set appendonly yes"
            )),
            (Some(false), None) => out.push(
                "Redis has no append-only file (aof_enabled:0): a restart forgets what came \
                 after the last snapshot; set appendonly yes"
                    .to_string(),
            ),
            _ => {}
        }
        let info: String = self.call("info server", |c, _| {
            Ok(redis::cmd("INFO").arg("server").query(c)?)
        })?;
        let version = info
            .lines()
            .find_map(|l| l.trim().strip_prefix("redis_version:"))
            .unwrap_or("");
        let number: Vec<u32> = version.split('.').map_while(|n| n.parse().ok()).collect();
        if !number.is_empty() && number < vec![6, 0, 9] {
            out.push(format!(
                "Redis {version} does not refuse a transaction whose watched key expired \
                 (6.0.9 and later do): a renewal, a finish or a fenced mark that reaches it \
                 after its lease expired may still be written; upgrade Redis"
            ));
        }
        if let Some(policy) = policy.filter(|p| p != "noeviction") {
            out.push(format!(
                "Redis maxmemory-policy is {policy}: when memory runs short it may evict a \
                 lease key, and a lost lease lets a second host run the slot; set noeviction"
            ));
        }
        Ok(out)
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
}

/// What a try of an operation sees besides the connection: the key prefix, and the test
/// clock that stands in for the server's `TIME`.
struct Ctx<'a> {
    p: &'a str,
    clock: Option<Arc<dyn Clock>>,
}

impl Ctx<'_> {
    /// The store's time, µs since the epoch: the server's `TIME` answer read with the
    /// snapshot, or the test clock's.
    fn now(&self, time: (i64, i64)) -> i64 {
        self.clock
            .as_ref()
            .map_or_else(|| usec(time), |c| c.now_usec())
    }

    fn keys<'k>(&'k self, job: &'k str) -> Keys<'k> {
        Keys { p: self.p, job }
    }
}

impl RedisStore {
    /// Runs `attempt` until it answers (it answers `None` when what it read changed before
    /// its commit; at most [`RETRIES`] tries), on one connection with
    /// [`CALL_TIMEOUT`] per call.
    fn deciding<T>(
        &mut self,
        op: &str,
        mut attempt: impl FnMut(&mut Connection, &Ctx<'_>) -> Result<Option<T>, Fail>,
    ) -> Result<T, StoreError> {
        self.ready()?;
        let clock = self.test_clock.clone();
        self.call(op, |c, p| {
            let ctx = Ctx { p, clock };
            for _ in 0..RETRIES {
                if let Some(v) = attempt(c, &ctx)? {
                    return Ok(v);
                }
            }
            Err(Fail::Contended)
        })
    }

    /// Runs `f` with this store's part of [`engine`]'s loop, on one connection with
    /// [`CALL_TIMEOUT`] per call.
    fn engine<T>(
        &mut self,
        op: &str,
        f: impl FnOnce(&mut Session<'_>) -> Result<T, Fail>,
    ) -> Result<T, StoreError> {
        self.ready()?;
        let clock = self.test_clock.clone();
        self.call(op, |c, p| {
            f(&mut Session {
                c,
                ctx: Ctx { p, clock },
            })
        })
    }
}

/// One connection's part of [`engine`]'s loop: every key a read reads is watched before
/// it is read, and a commit is one `MULTI`/`EXEC`, which holds only while none of them
/// changed.
struct Session<'a> {
    c: &'a mut Connection,
    ctx: Ctx<'a>,
}

impl engine::Backend for Session<'_> {
    /// The slots in the job's queued index when read (`None`: not read).
    type Version = Option<Vec<i64>>;
    type Client = redis::RedisError;

    fn read_claim(
        &mut self,
        req: &ClaimRequest,
    ) -> Result<Read<(rules::ClaimState, Self::Version)>, Fail> {
        let (c, ctx) = (&mut *self.c, &self.ctx);
        let new = &req.run;
        let k = ctx.keys(&new.job);
        let asked = new.slot.usec;
        // 1: the time, the schema, the lease, the asked slot's run ids, the queued slots
        // and a record under the run id (a claim sent again).
        let mut pipe = watching(&[
            format!("{}schema", ctx.p),
            k.lease(),
            k.slot(asked),
            k.queued(),
            k.slots(),
            k.run(&new.run_id),
        ]);
        pipe.cmd("TIME")
            .get(format!("{}schema", ctx.p))
            .hgetall(k.lease())
            .smembers(k.slot(asked))
            .zrange(k.queued(), 0, -1)
            .hgetall(k.run(&new.run_id));
        type First = (
            (i64, i64),
            Option<String>,
            Hash,
            Vec<String>,
            Vec<String>,
            Hash,
        );
        let (time, schema, lease_hash, ids, queued, retried): First = pipe.query(c)?;
        let version = schema.and_then(|v| v.parse::<i64>().ok()).unwrap_or(0);
        if version > SCHEMA_VERSION {
            return Err(Fail::Newer(version));
        }
        if version < SCHEMA_VERSION {
            // Set back since this store was opened: migrate, then read again.
            migrate(c, ctx.p)?;
            return Ok(Read::Changed);
        }
        let now = ctx.now(time);
        let lease = lease_of(&new.job, &lease_hash)?;
        let retried = run_of(retried)?;
        let indexed: Vec<i64> = queued.iter().filter_map(|s| s.parse().ok()).collect();
        let queued_slots: Vec<i64> = if req.queued_first {
            indexed.iter().copied().filter(|s| *s != asked).collect()
        } else {
            Vec::new()
        };
        // 2: the asked slot's records, the lease's record, the queued slots' run ids, and
        // the newest slot.
        let lease_run_id = lease_hash
            .get("run_id")
            .filter(|id| !id.is_empty() && lease.is_some());
        let record_keys: Vec<String> = ids.iter().map(|id| k.run(id)).collect();
        let mut watch = record_keys.clone();
        watch.extend(lease_run_id.map(|id| k.run(id)));
        watch.extend(queued_slots.iter().map(|s| k.slot(*s)));
        let mut pipe = watching_more(&watch);
        for key in &record_keys {
            pipe.hgetall(key);
        }
        if let Some(id) = lease_run_id {
            pipe.hgetall(k.run(id));
        }
        for s in &queued_slots {
            pipe.smembers(k.slot(*s));
        }
        pipe.zrevrangebyscore_limit(k.slots(), rules::newest_bound(now, req), "-inf", 0, 1);
        let mut got = pipe.query::<Vec<Value>>(c)?.into_iter();
        let mut next = || got.next().unwrap_or(Value::Nil);
        let mut slot_hashes = Vec::with_capacity(record_keys.len());
        for _ in &record_keys {
            slot_hashes.push(redis::from_redis_value::<Hash>(next())?);
        }
        let lease_run = match lease_run_id {
            Some(_) => run_of(redis::from_redis_value(next())?)?,
            None => None,
        };
        let mut queued_ids = Vec::with_capacity(queued_slots.len());
        for _ in &queued_slots {
            queued_ids.push(redis::from_redis_value::<Vec<String>>(next())?);
        }
        let newest: Option<i64> = redis::from_redis_value::<Vec<String>>(next())?
            .first()
            .and_then(|s| s.parse().ok());
        let mut slots = BTreeMap::new();
        slots.insert(asked, runs_of(slot_hashes)?);
        // 3: the queued slots' records.
        let keys: Vec<String> = queued_ids.iter().flatten().map(|id| k.run(id)).collect();
        let mut queued_hashes = hashes(c, watching_more(&keys), &keys)?.into_iter();
        for (s, ids) in queued_slots.iter().zip(&queued_ids) {
            slots.insert(
                *s,
                runs_of(queued_hashes.by_ref().take(ids.len()).collect())?,
            );
        }
        let state = rules::ClaimState {
            now,
            lease,
            retried,
            slots,
            newest,
            lease_run,
        };
        Ok(Read::Got((state, Some(indexed))))
    }

    /// Reads the lease, the record and (with [`Need::slot`]) every record of its slot.
    /// With [`Need::live`] the lease counts as held only while its `alive` key is watched
    /// ([`as_watched`]).
    fn read_run(
        &mut self,
        job: &str,
        run_id: &str,
        need: Need,
    ) -> Result<Read<(RunRead, Self::Version)>, Fail> {
        let (c, ctx) = (&mut *self.c, &self.ctx);
        let k = ctx.keys(job);
        let mut pipe = watching_alive(&k, &[k.lease(), k.run(run_id)]);
        pipe.cmd("TIME").hgetall(k.lease()).hgetall(k.run(run_id));
        type First = (bool, (i64, i64), Hash, Hash);
        let (alive, time, lease_hash, record): First = pipe.query(c)?;
        let now = ctx.now(time);
        let lease = lease_of(job, &lease_hash)?;
        let lease = if need.live {
            as_watched(lease, alive, ctx.clock.is_some(), now)
        } else {
            lease
        };
        // A record of another job is not this job's to change.
        let record = run_of(record)?.filter(|r| r.job == job);
        let slot_runs = match &record {
            Some(r) if need.slot => {
                let slot_key = k.slot(r.slot.usec);
                let mut pipe = watching_more(std::slice::from_ref(&slot_key));
                pipe.smembers(&slot_key);
                let (ids,): (Vec<String>,) = pipe.query(c)?;
                let keys: Vec<String> = ids.iter().map(|id| k.run(id)).collect();
                runs_of(hashes(c, watching_more(&keys), &keys)?)?
            }
            _ => Vec::new(),
        };
        let read = RunRead {
            now,
            lease,
            record,
            slot_runs,
        };
        Ok(Read::Got((read, None)))
    }

    /// Reads the lease hash and the server's `TIME`; with `live`, the `alive` key too
    /// ([`as_watched`]).
    fn read_lease(
        &mut self,
        job: &str,
        live: bool,
    ) -> Result<Read<(LeaseRead, Self::Version)>, Fail> {
        let (c, ctx) = (&mut *self.c, &self.ctx);
        let k = ctx.keys(job);
        let (alive, time, row): (bool, (i64, i64), Hash) = if live {
            let mut pipe = watching_alive(&k, &[k.lease()]);
            pipe.cmd("TIME").hgetall(k.lease());
            pipe.query(c)?
        } else {
            let mut pipe = watching(&[k.lease()]);
            pipe.cmd("TIME").hgetall(k.lease());
            let (time, row): ((i64, i64), Hash) = pipe.query(c)?;
            (true, time, row)
        };
        let now = ctx.now(time);
        let row = as_watched(lease_of(job, &row)?, alive, ctx.clock.is_some(), now);
        Ok(Read::Got((LeaseRead { now, lease: row }, None)))
    }

    /// Reads the slot's run ids and then its records, all watched.
    fn read_slot(
        &mut self,
        job: &str,
        slot: i64,
    ) -> Result<Read<(engine::Records, Self::Version)>, Fail> {
        let (c, ctx) = (&mut *self.c, &self.ctx);
        let k = ctx.keys(job);
        let mut pipe = watching(&[k.slot(slot)]);
        pipe.smembers(k.slot(slot));
        let (ids,): (Vec<String>,) = pipe.query(c)?;
        let keys: Vec<String> = ids.iter().map(|id| k.run(id)).collect();
        let runs = runs_of(hashes(c, watching_more(&keys), &keys)?)?;
        Ok(Read::Got((runs, None)))
    }

    /// Writes each changed record whole, the lease hash and its `alive` key, and keeps the
    /// slot indexes: a grant's slot joins `slots:JOB`; a slot with a record resolved
    /// queued joins `queued:JOB`, and a claim drops from it each slot it read that has no
    /// record queued (nor, for a slot other than the granted one, `running`: a host of
    /// schema 1 may queue it without indexing it).
    fn commit(&mut self, indexed: Self::Version, writes: &Writes) -> Result<Commit, Fail> {
        let (c, ctx) = (&mut *self.c, &self.ctx);
        let k = ctx.keys(&writes.job);
        let judged = ctx.clock.is_some();
        let mut pipe = redis::pipe();
        let mut granted = None;
        match &writes.lease {
            LeaseWrite::Grant { lease, run, .. } => {
                put_lease(&mut pipe, &k, lease, Some(&run.run_id), judged);
                pipe.sadd(k.slot(run.slot.usec), &run.run_id)
                    .zadd(k.runs(), &run.run_id, run.started_at)
                    .zadd(k.slots(), run.slot.usec, run.slot.usec)
                    .sadd(format!("{}jobs", ctx.p), &writes.job);
                granted = Some(run.slot.usec);
            }
            LeaseWrite::Renew(row) => {
                put_alive(&mut pipe, &k, row, judged);
                pipe.hset_multiple(
                    k.lease(),
                    &[
                        ("expire_at", row.expire_at.to_string()),
                        ("renewal", row.renewal.to_string()),
                    ],
                );
            }
            LeaseWrite::Release(row) => put_lease(&mut pipe, &k, row, None, judged),
            LeaseWrite::Keep => {}
        }
        for (run, _) in writes.changed() {
            put_run(&mut pipe, &k, run)?;
        }
        for s in &writes.slots {
            let indexed = indexed.as_ref().map(|i| i.contains(&s.slot));
            let needed = s.is_queued()
                || (granted.is_some_and(|g| g != s.slot)
                    && s.after.iter().any(|r| r.outcome == Outcome::Running));
            if needed && indexed != Some(true) && s.is_queued() {
                pipe.zadd(k.queued(), s.slot, s.slot);
            } else if !needed && indexed == Some(true) {
                pipe.zrem(k.queued(), s.slot);
            }
        }
        Ok(if commit(c, pipe)? {
            Commit::Done
        } else {
            Commit::Changed
        })
    }
}

/// Migrates to [`SCHEMA_VERSION`] ([`migrate_once`], at most [`RETRIES`] tries);
/// answers the version found.
fn migrate(c: &mut Connection, p: &str) -> Result<i64, Fail> {
    for _ in 0..RETRIES {
        if let Some(v) = migrate_once(c, p)? {
            return Ok(v);
        }
    }
    Err(Fail::Contended)
}

/// One try of the migration to [`SCHEMA_VERSION`]: from schema 1, builds the `slots:JOB`
/// and `queued:JOB` indexes from every record (slots with a `running` record go into
/// `queued:JOB` too: a host of schema 1 may still be running one, and its finish script
/// queues the slot without indexing it; the claim drops such a slot once no record of it
/// is queued or running). From schemas 2 and 3 no key changes: a lease's `renewal` comes
/// with its next grant (absent: 0), and records' `seq` is no longer read. The version is
/// set in the same transaction, which holds only while no record was added meanwhile.
/// Answers the version found.
fn migrate_once(c: &mut Connection, p: &str) -> Result<Option<i64>, Fail> {
    let schema = format!("{p}schema");
    let jobs_key = format!("{p}jobs");
    redis::cmd("SETNX")
        .arg(&schema)
        .arg(SCHEMA_VERSION)
        .exec(c)?;
    let mut pipe = watching(&[schema.clone(), jobs_key.clone()]);
    pipe.get(&schema).smembers(&jobs_key);
    let (version, jobs): (Option<String>, Vec<String>) = pipe.query(c)?;
    let version: i64 = version
        .as_deref()
        .unwrap_or("0")
        .parse()
        .map_err(|_| Fail::Data(format!("bad schema version {version:?}")))?;
    if version >= SCHEMA_VERSION {
        return Ok(Some(version));
    }
    let mut pipe = redis::pipe();
    if version < 2 {
        let runs_keys: Vec<String> = jobs.iter().map(|j| format!("{p}runs:{j}")).collect();
        let mut read = watching_more(&runs_keys);
        for key in &runs_keys {
            read.zrange(key, 0, -1);
        }
        let ids: Vec<Vec<String>> = if runs_keys.is_empty() {
            Vec::new()
        } else {
            read.query(c)?
        };
        let record_keys: Vec<String> = ids
            .iter()
            .flatten()
            .map(|id| format!("{p}run:{id}"))
            .collect();
        let mut hashes = hashes(c, watching_more(&record_keys), &record_keys)?.into_iter();
        for (job, ids) in jobs.iter().zip(&ids) {
            for h in hashes.by_ref().take(ids.len()) {
                let Some(slot) = h.get("slot_usec") else {
                    continue;
                };
                pipe.zadd(format!("{p}slots:{job}"), slot, slot);
                let queued = h.get("resolution").is_some_and(|r| r == "queued");
                if queued || h.get("outcome").is_some_and(|o| o == "running") {
                    pipe.zadd(format!("{p}queued:{job}"), slot, slot);
                }
            }
        }
    }
    pipe.set(&schema, SCHEMA_VERSION);
    Ok(commit(c, pipe)?.then_some(SCHEMA_VERSION))
}

/// Opens the store at `address` for [`crate::store::registry`]; `clock` is not used: the server's clock judges.
///
/// # Errors
/// As [`RedisStore::open`].
pub(crate) fn open_boxed(
    address: &str,
    clock: std::sync::Arc<dyn crate::guard::clock::Clock>,
) -> Result<Box<dyn Store>, StoreError> {
    let _ = clock;
    Ok(Box::new(RedisStore::open(address)?))
}

impl Store for RedisStore {
    /// Closes the connection: one of the server's `maxclients` is free until the next
    /// call.
    fn rest(&mut self) {
        self.conn = None;
    }

    fn describe(&self) -> String {
        self.describe.clone()
    }

    engine::store_ops!(renew);

    fn init(&mut self) -> Result<(), StoreError> {
        let version = self.call("init", migrate)?;
        if version > SCHEMA_VERSION {
            return Err(self.newer_schema(version));
        }
        self.schema_ready = true;
        Ok(())
    }

    fn now(&mut self) -> Result<i64, StoreError> {
        if let Some(clock) = &self.test_clock {
            return Ok(clock.now_usec());
        }
        let time = self.call("read time", |c, _| Ok(redis::cmd("TIME").query(c)?))?;
        Ok(usec(time))
    }

    fn lease(&mut self, job: &str) -> Result<Option<Lease>, StoreError> {
        self.ready()?;
        let hash: Hash = self.call("read lease", |c, p| {
            Ok(redis::cmd("HGETALL")
                .arg(format!("{p}lease:{job}"))
                .query(c)?)
        })?;
        let lease = lease_of(job, &hash).map_err(|e| self.error("read lease", e))?;
        Ok(lease.filter(|l| !l.holder.is_empty()))
    }

    fn read_mark(&mut self, namespace: &str, key: &str) -> Result<Option<Mark>, StoreError> {
        self.ready()?;
        let fields: Vec<Option<String>> = self.call("read a mark", |c, p| {
            Ok(redis::cmd("HMGET")
                .arg(mark_key(p, namespace, key))
                .arg(&["job", "run_id", "host", "token", "marked_at"])
                .query(c)?)
        })?;
        let bad = |what: String| self.error("read a mark", Fail::Data(what));
        let [Some(job), run_id, host, token, marked_at] =
            <[Option<String>; 5]>::try_from(fields).map_err(|_| bad("5 fields".into()))?
        else {
            return Ok(None);
        };
        let number = |name: &str, v: Option<String>| -> Result<i64, StoreError> {
            let v = v.unwrap_or_default();
            v.parse()
                .map_err(|_| bad(format!("mark {namespace} {key}: {name} {v:?}")))
        };
        Ok(Some(Mark {
            namespace: namespace.to_string(),
            key: key.to_string(),
            job,
            run_id: run_id.unwrap_or_default(),
            host: host.unwrap_or_default(),
            token: number("token", token)?,
            marked_at: number("marked_at", marked_at)?,
        }))
    }

    /// The fence ([`rules::mark_fence_holds`]) is judged on the lease and the server's time
    /// read under `WATCH`, and the mark is written only while neither the lease nor the
    /// mark's key changed since.
    fn insert_mark(&mut self, mark: &Mark, fenced: bool) -> Result<bool, StoreError> {
        self.deciding("mark", |c, ctx| {
            let k = ctx.keys(&mark.job);
            let key = mark_key(ctx.p, &mark.namespace, &mark.key);
            let mut pipe = watching_alive(&k, &[key.clone(), k.lease()]);
            pipe.cmd("TIME").exists(&key).hgetall(k.lease());
            let (alive, time, exists, row): (bool, (i64, i64), bool, Hash) = pipe.query(c)?;
            let now = ctx.now(time);
            let row = as_watched(lease_of(&mark.job, &row)?, alive, ctx.clock.is_some(), now);
            if exists || !rules::mark_fence_holds(now, row.as_ref(), mark, fenced) {
                return Ok(Some(false));
            }
            let mut pipe = redis::pipe();
            pipe.hset_multiple(
                &key,
                &[
                    ("job", mark.job.clone()),
                    ("run_id", mark.run_id.clone()),
                    ("host", mark.host.clone()),
                    ("token", mark.token.to_string()),
                    ("marked_at", mark.marked_at.to_string()),
                ],
            )
            .zadd(
                format!("{}marks:{}", ctx.p, mark.job),
                mark_member(&mark.namespace, &mark.key),
                mark.marked_at,
            );
            Ok(commit(c, pipe)?.then_some(true))
        })
    }

    fn delete_marks(&mut self, job: &str, before: i64) -> Result<usize, StoreError> {
        self.ready()?;
        let mut n = 0;
        loop {
            let deleted = self.call("delete marks", |c, p| {
                let index = format!("{p}marks:{job}");
                let mut pipe = redis::pipe();
                pipe.cmd("UNWATCH").ignore().zrangebyscore_limit(
                    &index,
                    "-inf",
                    format!("({before}"),
                    0,
                    DELETE_MARKS_BATCH as isize,
                );
                let (old,): (Vec<String>,) = pipe.query(c)?;
                if old.is_empty() {
                    return Ok(0);
                }
                let mut pipe = redis::pipe();
                for m in &old {
                    pipe.del(format!("{p}mark:{m}"));
                }
                pipe.zrem(&index, &old);
                commit(c, pipe)?;
                Ok(old.len())
            })?;
            n += deleted;
            if deleted < DELETE_MARKS_BATCH {
                return Ok(n);
            }
        }
    }

    fn count_marks(&mut self, job: &str, before: i64) -> Result<usize, StoreError> {
        self.ready()?;
        let n: i64 = self.call("count marks", |c, p| {
            Ok(redis::cmd("ZCOUNT")
                .arg(format!("{p}marks:{job}"))
                .arg("-inf")
                .arg(format!("({before}"))
                .query(c)?)
        })?;
        Ok(usize::try_from(n).unwrap_or(0))
    }

    fn put_beat(&mut self, host: &str, beat: &str) -> Result<(), StoreError> {
        self.ready()?;
        self.call("write the heartbeat", |c, p| {
            Ok(redis::cmd("HSET")
                .arg(format!("{p}hosts"))
                .arg(host)
                .arg(beat)
                .query::<i64>(c)
                .map(|_| ())?)
        })
    }

    fn beats(&mut self) -> Result<Vec<(String, String)>, StoreError> {
        self.ready()?;
        let all: std::collections::BTreeMap<String, String> = self
            .call("read the heartbeats", |c, p| {
                Ok(redis::cmd("HGETALL").arg(format!("{p}hosts")).query(c)?)
            })?;
        Ok(all.into_iter().collect())
    }

    fn read_beat(&mut self, key: &str) -> Result<Option<String>, StoreError> {
        self.ready()?;
        self.call("read a fleet record", |c, p| {
            Ok(redis::cmd("HGET")
                .arg(format!("{p}hosts"))
                .arg(key)
                .query(c)?)
        })
    }

    fn forget_beats(&mut self, hosts: &[String]) -> Result<(), StoreError> {
        if hosts.is_empty() {
            return Ok(());
        }
        self.ready()?;
        self.call("forget heartbeats", |c, p| {
            Ok(redis::cmd("HDEL")
                .arg(format!("{p}hosts"))
                .arg(hosts)
                .query::<i64>(c)
                .map(|_| ())?)
        })
    }

    fn read_schedule(&mut self, job: &str) -> Result<Option<ScheduleDecl>, StoreError> {
        self.ready()?;
        let fields: Vec<Option<String>> = self.call("read the schedule", |c, p| {
            Ok(redis::cmd("HMGET")
                .arg(format!("{p}schedule:{job}"))
                .arg(&["fingerprint", "defined_at", "host", "seen_at", "horizon"])
                .query(c)?)
        })?;
        let bad = |what: String| self.error("read the schedule", Fail::Data(what));
        let [Some(fingerprint), Some(defined_at), host, seen_at, horizon] =
            <[Option<String>; 5]>::try_from(fields).map_err(|_| bad("5 fields".into()))?
        else {
            return Ok(None);
        };
        let number = |name: &str, v: Option<String>| -> Result<i64, StoreError> {
            let v = v.unwrap_or_default();
            v.parse().map_err(|_| bad(format!("{name} {v:?}")))
        };
        Ok(Some(ScheduleDecl {
            job: job.to_string(),
            fingerprint,
            defined_at: number("defined_at", Some(defined_at))?,
            host: host.unwrap_or_default(),
            seen_at: number("seen_at", seen_at)?,
            horizon: number("horizon", horizon)?,
        }))
    }

    /// Replaces the schedule hash if it still holds `expected`'s fingerprint, time and
    /// last declaration (none: if there is none), read under `WATCH`; false when it did
    /// not or changed before the commit.
    fn swap_schedule(
        &mut self,
        expected: Option<&ScheduleDecl>,
        new: &ScheduleDecl,
    ) -> Result<bool, StoreError> {
        self.ready()?;
        self.call("declare the schedule", |c, p| {
            let key = format!("{p}schedule:{}", new.job);
            let mut pipe = watching(std::slice::from_ref(&key));
            pipe.cmd("HMGET")
                .arg(&key)
                .arg(&["fingerprint", "defined_at", "seen_at"]);
            let (cur,): ((Option<String>, Option<String>, Option<String>),) = pipe.query(c)?;
            let expected = expected.map(|e| {
                (
                    Some(e.fingerprint.clone()),
                    Some(e.defined_at.to_string()),
                    Some(e.seen_at.to_string()),
                )
            });
            let unchanged = match expected {
                None => cur.0.is_none(),
                Some(e) => e == cur,
            };
            if !unchanged {
                return Ok(false);
            }
            let mut pipe = redis::pipe();
            pipe.hset_multiple(
                &key,
                &[
                    ("fingerprint", new.fingerprint.clone()),
                    ("defined_at", new.defined_at.to_string()),
                    ("host", new.host.clone()),
                    ("seen_at", new.seen_at.to_string()),
                    ("horizon", new.horizon.to_string()),
                ],
            );
            commit(c, pipe)
        })
    }

    fn runs(&mut self, query: &RunQuery) -> Result<Vec<Run>, StoreError> {
        self.ready()?;
        let hashes: Vec<Hash> = self.call("read runs", |c, p| {
            let ids: Vec<String> = match (&query.job, query.slot) {
                (Some(job), Some(slot)) => redis::cmd("SMEMBERS")
                    .arg(format!("{p}slot:{job}:{slot}"))
                    .query(c)?,
                (Some(job), None) => redis::cmd("ZRANGE")
                    .arg(format!("{p}runs:{job}"))
                    .arg(0)
                    .arg(-1)
                    .query(c)?,
                (None, _) => {
                    let jobs: Vec<String> =
                        redis::cmd("SMEMBERS").arg(format!("{p}jobs")).query(c)?;
                    let mut pipe = redis::pipe();
                    for j in &jobs {
                        pipe.zrange(format!("{p}runs:{j}"), 0, -1);
                    }
                    let per_job: Vec<Vec<String>> = if jobs.is_empty() {
                        Vec::new()
                    } else {
                        pipe.query(c)?
                    };
                    per_job.into_iter().flatten().collect()
                }
            };
            let mut out = Vec::with_capacity(ids.len());
            for chunk in ids.chunks(1000) {
                let keys: Vec<String> = chunk.iter().map(|id| format!("{p}run:{id}")).collect();
                out.extend(hashes(c, redis::pipe(), &keys)?);
            }
            Ok(out)
        })?;
        let mut runs = Vec::with_capacity(hashes.len());
        for h in hashes {
            // A record deleted between the read of its index and its own read is gone.
            if let Some(run) = run_of(h).map_err(|e| self.error("read runs", e))? {
                runs.push(run);
            }
        }
        if let Some(from) = query.slots_from {
            rules::window(&mut runs, from, |r| r);
        }
        runs.retain(|r| {
            (query.outcomes.is_empty() || query.outcomes.contains(&r.outcome))
                && (query.resolutions.is_empty()
                    || r.resolution.is_some_and(|x| query.resolutions.contains(&x)))
                && query.slot.is_none_or(|s| r.slot.usec == s)
        });
        runs.sort_by_key(|r| std::cmp::Reverse((r.started_at, r.fencing_token)));
        if query.limit > 0 {
            runs.truncate(query.limit);
        }
        Ok(runs)
    }

    /// Judges the slots a batch at a time on their records read under `WATCH`, and
    /// deletes the whole of each slot that may go in one transaction.
    fn delete_slots(
        &mut self,
        job: &str,
        slots: &[i64],
        started_before: i64,
    ) -> Result<usize, StoreError> {
        let slots = remote::distinct_slots(slots);
        let mut n = 0;
        for chunk in slots.chunks(DELETE_SLOTS_BATCH) {
            n += self.deciding("delete runs", |c, ctx| {
                let k = ctx.keys(job);
                let slot_keys: Vec<String> = chunk.iter().map(|s| k.slot(*s)).collect();
                let mut pipe = watching(&slot_keys);
                for key in &slot_keys {
                    pipe.smembers(key);
                }
                let ids: Vec<Vec<String>> = pipe.query(c)?;
                let keys: Vec<String> = ids.iter().flatten().map(|id| k.run(id)).collect();
                let mut records = hashes(c, watching_more(&keys), &keys)?.into_iter();
                let mut pipe = redis::pipe();
                let mut deleted = 0;
                for (slot, ids) in chunk.iter().zip(&ids) {
                    let runs = runs_of(records.by_ref().take(ids.len()).collect())?;
                    if ids.is_empty() || !rules::retention_may_delete(&runs, started_before) {
                        continue;
                    }
                    for id in ids {
                        pipe.del(k.run(id));
                    }
                    // A slot with no record left is no longer recorded, as in the SQL stores.
                    pipe.zrem(k.runs(), ids)
                        .del(k.slot(*slot))
                        .zrem(k.slots(), slot)
                        .zrem(k.queued(), slot);
                    deleted += ids.len();
                }
                if deleted == 0 {
                    return Ok(Some(0));
                }
                Ok(commit(c, pipe)?.then_some(deleted))
            })?;
        }
        Ok(n)
    }
}

//! The etcd store: leases and the run ledger in etcd v3, decided by the pure rules of
//! [`super::rules`] and applied in one transaction that compares a revision.
//!
//! Address: `etcd://[USER:PASSWORD@]HOST:PORT[,HOST:PORT…][?prefix=PREFIX]`, or
//! `etcds://…` for TLS (the server's certificate must chain to a root of the system's
//! trust store, or with `ssl-ca=PATH` to the PEM certificates in that file, and name the
//! host). `prefix` (default `jobguard/`) starts every key, so several installations or
//! test cases can share a cluster. With a user, the client authenticates with etcd's
//! simple-token auth (`etcdctl --user`); the password may be percent-encoded.
//!
//! Key layout (P is the prefix; a slot and a token are 20 decimal digits, the slot offset
//! by 2^63 so that keys sort as the numbers do):
//! - `P schema`: the layout version.
//! - `P lease/JOB`: the lease row as JSON (`holder host token acquired_at expire_at
//!   etcd_lease run_key`); never deleted (a released row has an empty holder and
//!   `expire_at` 0). Its token is the job's fencing-token counter. Every write to the
//!   job's state rewrites it, so its `mod_revision` is the version of the whole job.
//! - `P alive/JOB`: the holder's id, attached to an etcd lease of the lease's time to
//!   live (see "Time" below).
//! - `P run/JOB/SLOT/TOKEN`: one ledger record, as JSON with the SQL stores' column names
//!   but no report; every grant makes exactly one record, so the token orders a slot's
//!   records.
//! - `P run/JOB/SLOT/TOKEN/report`: that record's report (JSON, up to 64 KiB), created with
//!   the record and written again only when the report changes. Kept apart, a change of
//!   resolution rewrites a few hundred bytes, and a transaction that settles many records
//!   of large reports (re-queuing a slot, a re-run's claim) stays within etcd's request
//!   limit (`--max-request-bytes`, 1.5 MiB by default).
//! - `P id/RUN_ID`: the key of that run's record.
//! - `P queued/JOB/SLOT`: present while a record of the slot is resolved `queued`.
//! - `P hosts/HOST`: a host's heartbeat, JSON ([`Store::put_beat`]); the host's key
//!   percent-encoded ([`crate::guard::mark::key_component`]).
//!
//! Every operation reads the job's state in one transaction of range reads (and a
//! second one, when it needs records it learnt of in the first, that answers only while
//! the lease row is as the first read it), decides with the rules, and writes in one
//! transaction that compares the `mod_revision` of `P lease/JOB` with the one it read.
//! When another host wrote the job
//! meanwhile, the comparison fails, nothing is written, and the operation starts again
//! (at most [`RETRIES`] times; contention is rare: one job's hosts fire together once per
//! slot). The ledger's readers (`runs`: history, audit, catch-up, retention) read in
//! pages of 64 records: one gRPC response must fit the client's message limit, and a
//! job's history need not. The pages are read at one revision until the keyspace is
//! compacted past it; the rest is then read at the current revision, each record whole.
//! A reader of a job's newest records asks the server for the `limit` records created
//! last (sorted by their create revision). No decision reads at a past revision, so none
//! depends on what compaction keeps.
//!
//! A transaction holds at most 128 operations (`--max-txn-ops`), and one slot may hold
//! hundreds of records: a claim that would settle more of them than fit marks the ones
//! [`rules::settle_ahead`] picks first, in transactions of their own; `resolve` and
//! retention ([`Store::delete_slots`]) work through such a slot in parts, each a
//! transaction on the job as read, in an order that keeps the slot's state until the
//! last part (see each).
//!
//! Time: etcd keeps no wall clock a client can read, so "now" is this host's clock (as
//! for SQLite). Whether a lease is still held is not judged by any host's clock, though:
//! a grant attaches `P alive/JOB` to an etcd lease with the job's `lease_ttl` (rounded up
//! to whole seconds, etcd's unit), each renewal keeps it alive, and the cluster's leader
//! deletes it when it expires. A row whose `alive` key is gone is expired for every host,
//! whatever its `expire_at` says; a row whose `alive` key is there is held. etcd resets a
//! lease's time to live when a new leader is elected (etcd-io/etcd#9888), so the key may
//! outlive the time to live: that only makes other hosts wait longer. The holder never
//! relies on the server to expire it on time: it stops its command by its own monotonic
//! clock, [`crate::guard::lease::FENCE_MARGIN`] before the lease could expire counted from the
//! send time of its last confirmed renewal ([`crate::guard::lease::fence_after`]), as with every
//! store. The clock check of a claim ([`crate::store::ClaimRequest::clock`]) has no
//! store clock to compare with and always passes: keep the hosts' clocks in step (NTP),
//! as the slots themselves come from them.

use std::sync::Arc;
use std::time::Duration;

use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, GetOptions, KeyValue, KvClient, PutOptions,
    SortOrder, SortTarget, Txn, TxnOp, TxnOpResponse,
};
use serde_json::{Value, json};

use crate::guard::clock::{Clock, SystemClock};
use crate::guard::lease::Lease;
use crate::guard::ledger::{Finish, Resolution, Run};
use crate::store::engine::{self, Commit, LeaseRead, LeaseWrite, Need, RETRIES, Read, RunRead};
use crate::store::remote::{self, CALL_TIMEOUT, CONNECT_TIMEOUT, slot_part};
use crate::store::rules;
use crate::store::{
    Claim, ClaimRequest, Finished, Mark, RunQuery, ScheduleDecl, Store, StoreError, address,
};

/// The key layout version this jobguard writes and understands (`P schema`).
pub const SCHEMA_VERSION: i64 = 1;

/// The key prefix when the address names none.
pub const DEFAULT_PREFIX: &str = "jobguard/";

/// The longest time to live etcd grants a lease, s (`MaxLeaseTTL` of etcd's lessor).
const MAX_ETCD_TTL_SECS: u64 = 9_000_000_000;

/// The most operations this store puts in one transaction: etcd refuses more than 128
/// (`--max-txn-ops`).
const MAX_TXN_OPS: usize = 120;

/// The most records one page of [`range_all`] asks for. A record holds a report of at
/// most 64 KiB (`MAX_REPORT_BYTES`), which JSON escaping makes at most about four times
/// larger (a quote is escaped in the report and again in the record): 64 such records
/// are below 17 MiB, well within [`MAX_RESPONSE_BYTES`].
const PAGE_KEYS: i64 = 64;

/// The largest response the client decodes, bytes. gRPC's default, 4 MiB, is passed by a
/// few dozen records with large reports: a page of [`range_all`], or a claim's read of up
/// to [`MAX_QUEUED_READ`] queued slots.
const MAX_RESPONSE_BYTES: usize = 64 << 20;

/// The most queued slots a claim reads (oldest first): the rules pick the oldest that is
/// neither done nor held, and settle the done ones, so later claims get to the rest.
const MAX_QUEUED_READ: usize = 60;

/// The etcd store. One connection (a gRPC channel) driven by a runtime of its own.
pub struct EtcdStore {
    rt: tokio::runtime::Runtime,
    endpoints: Vec<String>,
    options: ConnectOptions,
    client: Option<Client>,
    describe: String,
    prefix: String,
    schema_ready: bool,
    clock: Arc<dyn Clock>,
    /// Set by [`EtcdStore::judge_time_by`]: the rows' `expire_at` alone decides, by this
    /// clock, and the `alive` keys are not read.
    judged: bool,
}

impl std::fmt::Debug for EtcdStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdStore")
            .field("store", &self.describe)
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

/// This store's failures: the client's own errors, and those every store shares.
type Fail = engine::Fail<etcd_client::Error>;

impl From<etcd_client::Error> for Fail {
    fn from(e: etcd_client::Error) -> Self {
        Fail::Client(e)
    }
}

/// Sorts the client's errors: every one is [`StoreError::Unavailable`], in the client's
/// words with their sources.
impl engine::ClientError for etcd_client::Error {
    fn store_error(self, store: &str, op: &str) -> StoreError {
        remote::unavailable(store, op, &self)
    }
}

/// The job's lease row as this store keeps it.
#[derive(Debug, Clone)]
struct Row {
    lease: Lease,
    /// The etcd lease that `P alive/JOB` is attached to (0: none).
    etcd_lease: i64,
    /// The key of the record made by the row's grant.
    run_key: String,
}

/// What one read of a job's state found.
#[derive(Debug, Default)]
struct Snapshot {
    /// The `mod_revision` of `P lease/JOB` (0: absent).
    row_revision: i64,
    row: Option<Row>,
    /// The holder id and etcd lease of `P alive/JOB`, if present.
    alive: Option<(String, i64)>,
}

/// A fencing token as a key part: 20 decimal digits.
fn token_part(token: i64) -> String {
    format!("{:020}", token.max(0))
}

fn row_to_json(row: &Row) -> String {
    json!({
        "holder": row.lease.holder,
        "host": row.lease.host,
        "token": row.lease.token,
        "acquired_at": row.lease.acquired_at,
        "expire_at": row.lease.expire_at,
        "renewal": row.lease.renewal,
        "etcd_lease": row.etcd_lease,
        "run_key": row.run_key,
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
        etcd_lease: n("etcd_lease")?,
        run_key: s("run_key"),
    })
}

/// The suffix of a record's report key.
const REPORT: &[u8] = b"/report";

/// The writes of one transaction, collected: later puts of one key replace earlier ones.
#[derive(Default)]
struct Writes {
    puts: Vec<(String, String, i64)>,
    deletes: Vec<String>,
}

impl Writes {
    fn put(&mut self, key: String, value: String) {
        self.put_leased(key, value, 0);
    }
    fn put_leased(&mut self, key: String, value: String, lease: i64) {
        self.deletes.retain(|k| *k != key);
        self.puts.retain(|(k, _, _)| *k != key);
        self.puts.push((key, value, lease));
    }
    fn delete(&mut self, key: String) {
        self.puts.retain(|(k, _, _)| *k != key);
        if !self.deletes.contains(&key) {
            self.deletes.push(key);
        }
    }
    /// How many operations the transaction holds, without the lease row's put.
    fn len(&self) -> usize {
        self.puts.len() + self.deletes.len()
    }
    fn ops(&self) -> Vec<TxnOp> {
        let mut ops: Vec<TxnOp> = self
            .puts
            .iter()
            .map(|(k, v, lease)| {
                let options = (*lease != 0).then(|| PutOptions::new().with_lease(*lease));
                TxnOp::put(k.as_bytes(), v.as_bytes(), options)
            })
            .collect();
        ops.extend(
            self.deletes
                .iter()
                .map(|k| TxnOp::delete(k.as_bytes(), None)),
        );
        ops
    }
}

impl EtcdStore {
    /// Parses an `etcd://` or `etcds://` address (see the module docs). Connects lazily,
    /// on first use.
    ///
    /// # Errors
    /// [`StoreError::Address`] for an address without a host, with a bad port, prefix or
    /// parameter, or `ssl-ca` on a plain `etcd://` address.
    pub fn open(address: &str) -> Result<EtcdStore, StoreError> {
        super::tls_provider();
        let describe = address::mask(address);
        let bad = |detail: String| StoreError::Address {
            address: describe.clone(),
            detail,
        };
        let encoded = remote::encode_password(address);
        if let Some(key) = remote::given_twice(&encoded, &[&["prefix"], &["ssl-ca", "ssl_ca"]]) {
            return Err(bad(format!("{key} is given more than once")));
        }
        let (rest, ours) = remote::take_params(&encoded, &["prefix", "ssl-ca", "ssl_ca"]);
        let mut ours = ours.into_iter();
        let prefix = ours
            .next()
            .flatten()
            .unwrap_or_else(|| DEFAULT_PREFIX.to_string());
        if !prefix_ok(&prefix) {
            return Err(bad(format!(
                "prefix {prefix:?} is not plain (letters, digits, _:-./)"
            )));
        }
        let ca = match (ours.next().flatten(), ours.next().flatten()) {
            (Some(ca), _) | (None, Some(ca)) => Some(ca),
            (None, None) => None,
        };
        if rest.contains('?') {
            return Err(bad(format!(
                "unknown parameter in {:?}; etcd addresses take prefix and ssl-ca",
                rest.split_once('?').map_or("", |(_, q)| q)
            )));
        }
        let (scheme, after) = rest
            .split_once("://")
            .ok_or_else(|| bad("etcd addresses start with etcd:// or etcds://".to_string()))?;
        let tls = match scheme.to_ascii_lowercase().as_str() {
            "etcd" => false,
            "etcds" => true,
            other => return Err(bad(format!("unknown scheme {other:?}"))),
        };
        let (userinfo, hosts) = match after.rsplit_once('@') {
            Some((u, h)) => (Some(u), h),
            None => (None, after),
        };
        let hosts = hosts.strip_suffix('/').unwrap_or(hosts);
        if hosts.is_empty() {
            return Err(bad("no host".to_string()));
        }
        let mut endpoints = Vec::new();
        for host in hosts.split(',') {
            if host.is_empty() || host.contains('/') {
                return Err(bad(format!(
                    "bad host {host:?} (HOST:PORT, comma-separated)"
                )));
            }
            let port_of = |p: &str| {
                p.parse::<u16>()
                    .map_err(|_| bad(format!("bad port {p:?} in {host:?}")))
            };
            let with_port = match host.strip_prefix('[') {
                // An IPv6 address: [ADDR] or [ADDR]:PORT.
                Some(v6) => match v6.split_once(']') {
                    Some((_, "")) => format!("{host}:2379"),
                    Some((_, p)) if p.starts_with(':') => {
                        port_of(&p[1..])?;
                        host.to_string()
                    }
                    _ => return Err(bad(format!("bad host {host:?}"))),
                },
                None => match host.rsplit_once(':') {
                    Some((h, p)) if !h.is_empty() && !h.contains(':') => {
                        port_of(p)?;
                        host.to_string()
                    }
                    Some(_) => return Err(bad(format!("bad host {host:?} (IPv6 goes in [])"))),
                    None => format!("{host}:2379"),
                },
            };
            let scheme = if tls { "https" } else { "http" };
            endpoints.push(format!("{scheme}://{with_port}"));
        }
        let mut options = ConnectOptions::new()
            .with_connect_timeout(CONNECT_TIMEOUT)
            .with_timeout(CALL_TIMEOUT);
        if let Some(info) = userinfo {
            let (user, password) = info.split_once(':').unwrap_or((info, ""));
            options = options.with_user(
                remote::percent_decode(user),
                remote::percent_decode(password),
            );
        }
        if tls {
            let mut config = etcd_client::TlsOptions::new();
            config = match &ca {
                Some(path) => {
                    let pem = remote::read_ca_file("ssl-ca", path, true).map_err(&bad)?;
                    config.ca_certificate(etcd_client::Certificate::from_pem(pem))
                }
                None => config.with_native_roots(),
            };
            options = options.with_tls(config);
        } else if ca.is_some() {
            return Err(bad("ssl-ca needs an etcds:// address".to_string()));
        }
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| StoreError::Unavailable {
                store: describe.clone(),
                detail: format!("start the client's runtime: {e}"),
            })?;
        Ok(EtcdStore {
            rt,
            endpoints,
            options,
            client: None,
            describe,
            prefix,
            schema_ready: false,
            clock: Arc::new(SystemClock),
            judged: false,
        })
    }

    /// Reads "now" from `clock` instead of this host's clock (for tests that move time);
    /// whether a lease is held is still decided by the `alive` keys.
    pub fn set_clock(&mut self, clock: Arc<dyn Clock>) {
        self.clock = clock;
    }

    /// Judges every lease by `clock` and the rows' `expire_at` alone, as the rules do,
    /// instead of by the `alive` keys' etcd leases. Only for tests that move time (the
    /// store conformance suite); jobguard itself never calls it.
    #[doc(hidden)]
    pub fn judge_time_by(&mut self, clock: Arc<dyn Clock>) {
        self.clock = clock;
        self.judged = true;
    }

    fn key(&self, rest: &str) -> String {
        format!("{}{rest}", self.prefix)
    }
    fn mark_key(&self, namespace: &str, key: &str) -> String {
        self.key(&format!(
            "mark/{namespace}/{}",
            crate::guard::mark::key_component(key)
        ))
    }
    fn mark_day_prefix(&self, job: &str, day: i64) -> String {
        self.key(&format!("markday/{job}/{day:020}/"))
    }
    fn lease_key(&self, job: &str) -> String {
        self.key(&format!("lease/{job}"))
    }
    fn alive_key(&self, job: &str) -> String {
        self.key(&format!("alive/{job}"))
    }
    fn slot_prefix(&self, job: &str, slot: i64) -> String {
        self.key(&format!("run/{job}/{}/", slot_part(slot)))
    }
    fn run_key(&self, run: &Run) -> String {
        format!(
            "{}{}",
            self.slot_prefix(&run.job, run.slot.usec),
            token_part(run.fencing_token)
        )
    }
    fn report_key(&self, run: &Run) -> String {
        format!("{}/report", self.run_key(run))
    }
    fn id_key(&self, run_id: &str) -> String {
        self.key(&format!("id/{run_id}"))
    }
    fn queued_key(&self, job: &str, slot: i64) -> String {
        self.key(&format!("queued/{job}/{}", slot_part(slot)))
    }

    fn error(&self, op: &str, fail: Fail) -> StoreError {
        fail.store_error(&self.describe, op, SCHEMA_VERSION)
    }

    fn connect(&mut self) -> Result<Client, StoreError> {
        if let Some(c) = &self.client {
            return Ok(c.clone());
        }
        let endpoints = self.endpoints.clone();
        let options = self.options.clone();
        let client = self
            .rt
            .block_on(async {
                tokio::time::timeout(
                    CONNECT_TIMEOUT + CALL_TIMEOUT,
                    Client::connect(endpoints, Some(options)),
                )
                .await
            })
            .map_err(|_| StoreError::Unavailable {
                store: self.describe.clone(),
                detail: "connect: timed out".to_string(),
            })?
            .map_err(|e| StoreError::Unavailable {
                store: self.describe.clone(),
                detail: format!("connect: {}", remote::chain(&e)),
            })?;
        self.client = Some(client.clone());
        Ok(client)
    }

    fn ready(&mut self) -> Result<Client, StoreError> {
        if !self.schema_ready {
            self.init()?;
        }
        self.connect()
    }

    fn now_usec(&self) -> i64 {
        self.clock.now_usec()
    }
}

/// A key prefix jobguard accepts: 1 to 48 ASCII letters, digits and `_:-./`.
fn prefix_ok(prefix: &str) -> bool {
    !prefix.is_empty()
        && prefix.len() <= 48
        && prefix
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b':' | b'-' | b'.' | b'/'))
}

fn timed_out() -> Fail {
    Fail::Client(etcd_client::Error::Internal(format!(
        "no answer within {} s",
        CALL_TIMEOUT.as_secs()
    )))
}

/// The key just past every key that starts with `prefix`.
fn prefix_end(prefix: &str) -> Vec<u8> {
    let mut end = prefix.as_bytes().to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

fn get_kvs(resp: &TxnOpResponse) -> Vec<KeyValue> {
    match resp {
        TxnOpResponse::Get(g) => g.kvs().to_vec(),
        _ => Vec::new(),
    }
}

/// The state one operation reads, and the plumbing of read, decide, write.
struct Job<'a> {
    store: &'a EtcdStore,
    client: &'a mut Client,
    job: &'a str,
    snapshot: Snapshot,
    now: i64,
}

impl<'a> Job<'a> {
    /// Reads the lease row and `alive` key of `job` and whatever `extra` asks, in one
    /// transaction (one revision).
    async fn read(
        store: &'a EtcdStore,
        client: &'a mut Client,
        job: &'a str,
        extra: Vec<TxnOp>,
    ) -> Result<(Job<'a>, Vec<Vec<KeyValue>>), Fail> {
        let mut ops = vec![
            TxnOp::get(store.lease_key(job).as_bytes(), None),
            TxnOp::get(store.alive_key(job).as_bytes(), None),
        ];
        ops.extend(extra);
        let resp = reader(client).txn(Txn::new().and_then(ops)).await?;
        let mut results: Vec<Vec<KeyValue>> = resp.op_responses().iter().map(get_kvs).collect();
        let rest = results.split_off(2);
        let row_kv = results[0].first();
        let row = row_kv
            .map(|kv| row_from_json(job, kv.value()))
            .transpose()
            .map_err(Fail::Data)?;
        let alive = results[1]
            .first()
            .map(|kv| (String::from_utf8_lossy(kv.value()).into_owned(), kv.lease()));
        let snapshot = Snapshot {
            row_revision: row_kv.map_or(0, KeyValue::mod_revision),
            row,
            alive,
        };
        let now = store.now_usec();
        Ok((
            Job {
                store,
                client,
                job,
                snapshot,
                now,
            },
            rest,
        ))
    }

    /// More reads, of the job as the snapshot saw it: made at the current revision in a
    /// transaction that compares the lease row's `mod_revision` with the snapshot's (every
    /// write to the job's state rewrites the row), so they answer only while nothing
    /// changed. A read pinned at the snapshot's revision instead would fail once the
    /// keyspace was compacted past it, as often as the server compacts.
    ///
    /// # Errors
    /// [`Fail::Changed`] when the job changed since the snapshot; etcd's.
    async fn read_more(&mut self, ops: Vec<TxnOp>) -> Result<Vec<Vec<KeyValue>>, Fail> {
        if ops.is_empty() {
            return Ok(Vec::new());
        }
        let resp = reader(self.client)
            .txn(Txn::new().when(vec![self.unchanged()]).and_then(ops))
            .await?;
        if !resp.succeeded() {
            return Err(Fail::Changed);
        }
        Ok(resp.op_responses().iter().map(get_kvs).collect())
    }

    /// The comparison that holds while the job is as the snapshot read it: its lease row
    /// has the same `mod_revision`, or is still absent.
    fn unchanged(&self) -> Compare {
        let key = self.store.lease_key(self.job);
        if self.snapshot.row_revision == 0 {
            Compare::version(key.as_bytes(), CompareOp::Equal, 0)
        } else {
            Compare::mod_revision(key.as_bytes(), CompareOp::Equal, self.snapshot.row_revision)
        }
    }

    /// The record at `key` with its report (a token is 20 digits: no other record's key
    /// starts with this one).
    fn record_at(&self, key: String) -> TxnOp {
        TxnOp::get(key.into_bytes(), Some(GetOptions::new().with_prefix()))
    }

    fn range_at(&self, prefix: String) -> TxnOp {
        let end = prefix_end(&prefix);
        TxnOp::get(prefix.into_bytes(), Some(GetOptions::new().with_range(end)))
    }

    /// The lease row as the rules see it: with `alive` keys, held exactly while the
    /// row's `alive` key (its holder, its etcd lease) is there.
    fn lease(&self) -> Option<Lease> {
        let row = self.snapshot.row.as_ref()?;
        let mut lease = row.lease.clone();
        if !self.store.judged && !lease.holder.is_empty() {
            let alive = self
                .snapshot
                .alive
                .as_ref()
                .is_some_and(|(holder, id)| *holder == lease.holder && *id == row.etcd_lease);
            lease.expire_at = if alive {
                lease.expire_at.max(self.now.saturating_add(1))
            } else {
                lease.expire_at.min(self.now)
            };
        }
        Some(lease)
    }

    /// Commits `writes` (with the lease row written, so the job's version moves) if the
    /// job is unchanged since the read. False when it changed.
    async fn commit(&mut self, mut writes: Writes, row: Option<Row>) -> Result<bool, Fail> {
        let key = self.store.lease_key(self.job);
        let row = row.or_else(|| self.snapshot.row.clone());
        if let Some(row) = &row {
            writes.put(key.clone(), row_to_json(row));
        }
        let guard = self.unchanged();
        let resp = self
            .client
            .txn(Txn::new().when(vec![guard]).and_then(writes.ops()))
            .await?;
        Ok(resp.succeeded())
    }

    /// The writes that record `changed` (new or changed records; a report only when new
    /// or changed) and keep each slot's queued marker true, given the slots' records as
    /// they were read (`slot_runs`).
    fn put_runs(
        &self,
        writes: &mut Writes,
        changed: &[Run],
        slot_runs: &[Run],
    ) -> Result<(), Fail> {
        for run in changed {
            writes.put(
                self.store.run_key(run),
                remote::bare_run_to_json(run).map_err(Fail::Data)?,
            );
            let before = slot_runs.iter().find(|r| r.run_id == run.run_id);
            if before.is_none_or(|b| b.report != run.report) {
                writes.put(
                    self.store.report_key(run),
                    remote::report_to_json(run).map_err(Fail::Data)?,
                );
            }
        }
        let mut slots: Vec<i64> = changed.iter().map(|r| r.slot.usec).collect();
        slots.dedup();
        for slot in slots {
            let queued = slot_runs
                .iter()
                .filter(|r| r.slot.usec == slot)
                .map(|r| changed.iter().find(|c| c.run_id == r.run_id).unwrap_or(r))
                .chain(changed.iter().filter(|c| {
                    c.slot.usec == slot && !slot_runs.iter().any(|r| r.run_id == c.run_id)
                }))
                .any(|r| r.resolution == Some(Resolution::Queued));
            let key = self.store.queued_key(self.job, slot);
            if queued {
                writes.put(key, String::new());
            } else {
                writes.delete(key);
            }
        }
        Ok(())
    }
}

impl Job<'_> {
    /// What this read saw, to condition a later commit on.
    fn seen(self) -> Seen {
        Seen {
            job: self.job.to_string(),
            snapshot: self.snapshot,
            now: self.now,
        }
    }

    /// Writes the first records of `ahead` ([`engine::Writes::ahead`]: those that
    /// [`rules::settle_ahead`] picked for a grant, or a resolve's), as many as one
    /// transaction holds, if the job is unchanged since the read: writes that do not fit
    /// in one transaction come after one or more of these. `all` is every record read.
    async fn settle_ahead(&mut self, ahead: &[Run], all: &[Run]) -> Result<Commit, Fail> {
        let mut part: Vec<Run> = Vec::new();
        let mut slots = std::collections::BTreeSet::new();
        for run in ahead {
            // A record and, the first time, its slot's queued marker; and the lease row.
            let more = 1 + usize::from(!slots.contains(&run.slot.usec));
            if part.len() + slots.len() + more + 1 > MAX_TXN_OPS {
                break;
            }
            slots.insert(run.slot.usec);
            part.push(run.clone());
        }
        if part.is_empty() {
            return Err(Fail::Data(format!(
                "job {}: the writes of one decision do not fit in one transaction",
                self.job
            )));
        }
        let mut writes = Writes::default();
        self.put_runs(&mut writes, &part, all)?;
        Ok(if self.commit(writes, None).await? {
            Commit::Part
        } else {
            Commit::Changed
        })
    }
}

/// The records among `kvs` (record keys and report keys, in any order), each with its
/// report when its report key is among them, in the order of their keys.
fn runs_of(kvs: &[KeyValue]) -> Result<Vec<Run>, Fail> {
    let mut reports = std::collections::HashMap::new();
    for kv in kvs.iter().filter(|kv| kv.key().ends_with(REPORT)) {
        reports.insert(&kv.key()[..kv.key().len() - REPORT.len()], kv.value());
    }
    let mut records: Vec<&KeyValue> = kvs
        .iter()
        .filter(|kv| !kv.key().ends_with(REPORT))
        .collect();
    records.sort_by(|a, b| a.key().cmp(b.key()));
    records
        .into_iter()
        .map(|kv| {
            remote::run_with_report(kv.value(), reports.get(kv.key()).copied()).map_err(Fail::Data)
        })
        .collect()
}

/// The records of `kvs` whose report key is there too, and those reports: a read cut
/// short by a limit may hold a record without its report, or a report without its record.
fn whole_records(kvs: &[KeyValue]) -> Vec<KeyValue> {
    let keys: std::collections::HashSet<&[u8]> = kvs.iter().map(KeyValue::key).collect();
    kvs.iter()
        .filter(|kv| {
            let key = kv.key();
            match key.strip_suffix(REPORT) {
                Some(record) => keys.contains(record),
                None => keys.contains(&[key, REPORT].concat()[..]),
            }
        })
        .cloned()
        .collect()
}

/// The key-value API of `client`, taking responses up to [`MAX_RESPONSE_BYTES`].
fn reader(client: &Client) -> KvClient {
    client
        .kv_client()
        .max_decoding_message_size(MAX_RESPONSE_BYTES)
}

/// Every key-value under `prefix`, oldest key first, read in pages of [`PAGE_KEYS`] (one
/// response of etcd's gRPC API must fit the client's message limit; a job's records
/// together need not).
///
/// The pages are read at the revision of the first page. When the keyspace is compacted
/// past that revision before the last page (`etcdctl compact`, the server's
/// auto-compaction), the rest is read at the then current revision instead of starting
/// over, so a long history is read to its end however often the server compacts. Each
/// record is still read whole: a record and its report (adjacent keys) always come from one
/// revision. A history read needs each record as it was at one instant, not the whole
/// history at one instant: a record created or deleted (retention) between pages is listed
/// or not, as a read a moment earlier or later would have.
///
/// # Errors
/// etcd's.
async fn range_all(client: &Client, prefix: &str) -> Result<Vec<KeyValue>, Fail> {
    let mut kv = reader(client);
    let end = prefix_end(prefix);
    let mut from = prefix.as_bytes().to_vec();
    let mut revision = 0;
    let mut all: Vec<KeyValue> = Vec::new();
    loop {
        let mut options = GetOptions::new()
            .with_range(end.clone())
            .with_limit(PAGE_KEYS);
        if revision > 0 {
            options = options.with_revision(revision);
        }
        let mut resp = match kv.get(from.clone(), Some(options)).await {
            Ok(resp) => resp,
            Err(e) if revision > 0 && compacted(&e) => {
                // Go on at the current revision, from the last record read: if its report
                // is on the page that failed, the record is read again with it.
                if all.last().is_some_and(|kv| !kv.key().ends_with(REPORT)) {
                    let record = all.pop().expect("a last key-value");
                    from = record.key().to_vec();
                }
                revision = 0;
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        if revision == 0 {
            revision = resp.header().map_or(0, |h| h.revision());
        }
        let more = resp.more();
        let page = resp.take_kvs();
        let Some(last) = page.last() else { break };
        // The next page starts just after this page's last key.
        from = last.key().to_vec();
        from.push(0);
        all.extend(page);
        if !more {
            break;
        }
    }
    Ok(all)
}

/// Whether `e` refuses a read at a revision the keyspace was compacted past (etcd's
/// `ErrCompacted`, gRPC status OUT_OF_RANGE, "mvcc: required revision has been
/// compacted").
fn compacted(e: &etcd_client::Error) -> bool {
    matches!(e, etcd_client::Error::GRpcStatus(s)
        if s.message().contains("required revision has been compacted"))
}

/// The slot of a `P queued/JOB/SLOT` or `P run/JOB/SLOT/…` key.
fn slot_of_key(key: &[u8], after: &str) -> Option<i64> {
    let key = std::str::from_utf8(key).ok()?;
    remote::slot_from_part(key.strip_prefix(after)?.get(..20)?)
}

impl EtcdStore {
    /// Runs `f` with this store's part of [`engine`]'s loop. A failure of the connection
    /// drops it, so the next call connects again.
    fn engine<T>(
        &mut self,
        op: &str,
        f: impl FnOnce(&mut Session<'_>) -> Result<T, Fail>,
    ) -> Result<T, StoreError> {
        let mut client = self.ready()?;
        let result = f(&mut Session {
            store: self,
            client: &mut client,
        });
        if matches!(result, Err(Fail::Client(_))) {
            self.client = None;
        }
        result.map_err(|e| self.error(op, e))
    }

    /// Runs `attempt` on the runtime with a handle to the client, each try within
    /// [`CALL_TIMEOUT`], until it commits or answers without writing (`None` from it means
    /// the job changed between read and write; at most [`RETRIES`] tries). A failure of
    /// the connection drops it, so the next call connects again.
    fn retrying<T>(
        &mut self,
        op: &str,
        attempt: impl AsyncFn(&EtcdStore, &mut Client) -> Result<Option<T>, Fail>,
    ) -> Result<T, StoreError> {
        let mut client = self.ready()?;
        let this: &EtcdStore = self;
        let result = this.rt.block_on(async {
            for _ in 0..RETRIES {
                let once = tokio::time::timeout(CALL_TIMEOUT, attempt(this, &mut client)).await;
                match once.unwrap_or_else(|_| Err(timed_out())) {
                    Ok(Some(v)) => return Ok(v),
                    Ok(None) => continue,
                    // A read at the try's first revision after the keyspace was compacted
                    // past it (`etcdctl compact`, the server's auto-compaction): the try
                    // wrote nothing; it starts again at the current revision.
                    Err(Fail::Client(e)) if compacted(&e) => continue,
                    // The job changed between the try's reads: it starts again.
                    Err(Fail::Changed) => continue,
                    Err(e) => return Err(e),
                }
            }
            Err(Fail::Contended)
        });
        if matches!(result, Err(Fail::Client(_))) {
            self.client = None;
        }
        result.map_err(|e| self.error(op, e))
    }
}

/// What a read saw: the job, its lease row and `alive` key as of one revision, and the
/// time the read was judged at.
struct Seen {
    job: String,
    snapshot: Snapshot,
    now: i64,
}

/// One client's part of [`engine`]'s loop: each read is one `Txn` (one revision) and
/// reads after it compare the lease row's `mod_revision`; a commit is a `Txn` that
/// compares it too. Each call within [`CALL_TIMEOUT`].
struct Session<'a> {
    store: &'a EtcdStore,
    client: &'a mut Client,
}

impl Session<'_> {
    /// Runs `f` within [`CALL_TIMEOUT`]; a read that found the job changed (or a read at
    /// a revision the keyspace was compacted past) is [`Read::Changed`].
    fn reading<T>(
        &mut self,
        f: impl AsyncFnOnce(&EtcdStore, &mut Client) -> Result<T, Fail>,
    ) -> Result<Read<T>, Fail> {
        let (store, client) = (self.store, &mut *self.client);
        let once = store
            .rt
            .block_on(async { tokio::time::timeout(CALL_TIMEOUT, f(store, client)).await });
        match once.unwrap_or_else(|_| Err(timed_out())) {
            Ok(v) => Ok(Read::Got(v)),
            Err(Fail::Client(e)) if compacted(&e) => Ok(Read::Changed),
            Err(Fail::Changed) => Ok(Read::Changed),
            Err(e) => Err(e),
        }
    }
}

impl engine::Backend for Session<'_> {
    type Version = Seen;
    type Client = etcd_client::Error;
    const HOST_CLOCK: bool = true;

    /// Reads the lease row, `alive` key, the asked slot's records, a record under the
    /// run id, the newest slot, the layout version (a newer one is refused) and (queued
    /// first) the queued markers at one revision;
    /// then the retried record, the lease's record and the queued slots' records while
    /// the row is unchanged.
    fn read_claim(&mut self, req: &ClaimRequest) -> Result<Read<(rules::ClaimState, Seen)>, Fail> {
        self.reading(async |store, client| {
            let job = req.run.job.as_str();
            let now = store.now_usec();
            let bound = rules::newest_bound(now, req);
            let runs_prefix = store.key(&format!("run/{job}/"));
            let mut extra = vec![
                // 0: the asked slot's records.
                TxnOp::get(
                    store.slot_prefix(job, req.run.slot.usec).into_bytes(),
                    Some(GetOptions::new().with_prefix()),
                ),
                // 1: a record under the run id (a claim sent again).
                TxnOp::get(store.id_key(&req.run.run_id).into_bytes(), None),
                // 2: the newest recorded slot no later than the bound.
                TxnOp::get(
                    runs_prefix.clone().into_bytes(),
                    Some(
                        GetOptions::new()
                            .with_range(
                                store
                                    .slot_prefix(job, bound.saturating_add(1))
                                    .trim_end_matches('/')
                                    .as_bytes()
                                    .to_vec(),
                            )
                            .with_sort(SortTarget::Key, SortOrder::Descend)
                            .with_limit(1)
                            .with_keys_only(),
                    ),
                ),
                // 3: the layout version: a claim on a store that a newer jobguard has
                // upgraded since this one opened it is refused.
                TxnOp::get(store.key("schema").into_bytes(), None),
            ];
            let queued_prefix = store.key(&format!("queued/{job}/"));
            if req.queued_first {
                // 4: the slots with a queued record.
                extra.push(TxnOp::get(
                    queued_prefix.clone().into_bytes(),
                    Some(GetOptions::new().with_prefix().with_keys_only()),
                ));
            }
            let (mut read, found) = Job::read(store, client, job, extra).await?;
            if let Some(kv) = found[3].first()
                && let Some(v) =
                    remote::newer_version(kv.value(), SCHEMA_VERSION).map_err(Fail::Data)?
            {
                return Err(Fail::Newer(v));
            }
            read.now = now;
            let mut slots = std::collections::BTreeMap::new();
            slots.insert(req.run.slot.usec, runs_of(&found[0])?);
            let newest = found[2]
                .first()
                .and_then(|kv| slot_of_key(kv.key(), &runs_prefix));
            let mut more = Vec::new();
            let id_kv = found[1].first();
            if let Some(kv) = id_kv {
                more.push(read.record_at(String::from_utf8_lossy(kv.value()).into_owned()));
            }
            let lease_run_key = read
                .snapshot
                .row
                .as_ref()
                .map(|r| r.run_key.clone())
                .filter(|k| !k.is_empty());
            if let Some(k) = &lease_run_key {
                more.push(read.record_at(k.clone()));
            }
            let queued_slots: Vec<i64> = found
                .get(4)
                .map(|kvs| {
                    kvs.iter()
                        .filter_map(|kv| slot_of_key(kv.key(), &queued_prefix))
                        .filter(|s| *s != req.run.slot.usec)
                        .take(MAX_QUEUED_READ)
                        .collect()
                })
                .unwrap_or_default();
            for s in &queued_slots {
                more.push(read.range_at(store.slot_prefix(job, *s)));
            }
            let mut got = read.read_more(more).await?.into_iter();
            let retried = match id_kv {
                Some(_) => runs_of(&got.next().unwrap_or_default())?.pop(),
                None => None,
            };
            let lease_run = match lease_run_key {
                Some(_) => runs_of(&got.next().unwrap_or_default())?.pop(),
                None => None,
            };
            for s in &queued_slots {
                let kvs = got.next().unwrap_or_default();
                slots.insert(*s, runs_of(&kvs)?);
            }
            let state = rules::ClaimState {
                now,
                lease: read.lease(),
                retried,
                slots,
                newest,
                lease_run,
            };
            Ok((state, read.seen()))
        })
    }

    /// Reads the lease row, `alive` key and the run id's index at one revision, then the
    /// record's slot (every record: this store always reads them) while the row is
    /// unchanged. The row's lease is judged by its `alive` key for a finish and an
    /// interrupt alike: an etcd lease that expired is a lease that ended.
    fn read_run(
        &mut self,
        job: &str,
        run_id: &str,
        _need: Need,
    ) -> Result<Read<(RunRead, Seen)>, Fail> {
        self.reading(async |store, client| {
            let (mut read, found) = Job::read(
                store,
                client,
                job,
                vec![TxnOp::get(store.id_key(run_id).into_bytes(), None)],
            )
            .await?;
            let record_key = found[0]
                .first()
                .map(|kv| String::from_utf8_lossy(kv.value()).into_owned());
            let (record, slot_runs) = match &record_key {
                Some(key) => {
                    let slot_prefix = key
                        .rsplit_once('/')
                        .map_or(String::new(), |(p, _)| format!("{p}/"));
                    let got = read
                        .read_more(vec![
                            read.record_at(key.clone()),
                            read.range_at(slot_prefix),
                        ])
                        .await?;
                    (runs_of(&got[0])?.pop(), runs_of(&got[1])?)
                }
                None => (None, Vec::new()),
            };
            // A record of another job is not this job's to change.
            let record = record.filter(|r| r.job == job);
            let slot_runs = if record.is_some() {
                slot_runs
            } else {
                Vec::new()
            };
            let run = RunRead {
                now: read.now,
                lease: read.lease(),
                record,
                slot_runs,
            };
            Ok((run, read.seen()))
        })
    }

    /// Reads the lease row and its `alive` key at one revision; the row's lease is judged
    /// by its `alive` key whatever `live` says.
    fn read_lease(&mut self, job: &str, _live: bool) -> Result<Read<(LeaseRead, Seen)>, Fail> {
        self.reading(async |store, client| {
            let (read, _) = Job::read(store, client, job, Vec::new()).await?;
            let lease = LeaseRead {
                now: read.now,
                lease: read.lease(),
            };
            Ok((lease, read.seen()))
        })
    }

    /// Reads the lease row and the slot's records at one revision.
    fn read_slot(&mut self, job: &str, slot: i64) -> Result<Read<(engine::Records, Seen)>, Fail> {
        self.reading(async |store, client| {
            let (read, found) = Job::read(
                store,
                client,
                job,
                vec![TxnOp::get(
                    store.slot_prefix(job, slot).into_bytes(),
                    Some(GetOptions::new().with_prefix()),
                )],
            )
            .await?;
            Ok((runs_of(&found[0])?, read.seen()))
        })
    }

    /// Writes each changed record (its report when new or changed) and its slot's queued
    /// marker, and the lease row: a grant's with a new etcd lease that its `alive` key is
    /// attached to and its run id's index; a release's with the `alive` key deleted and
    /// its etcd lease revoked after the commit. Writes that do not fit in one transaction
    /// ([`MAX_TXN_OPS`]), a grant's or a resolve's, first write [`Writes::ahead`] in
    /// parts ([`Commit::Part`]).
    fn commit(&mut self, seen: Seen, writes: &engine::Writes) -> Result<Commit, Fail> {
        let (store, client) = (self.store, &mut *self.client);
        let once = store.rt.block_on(async {
            tokio::time::timeout(CALL_TIMEOUT, async {
                let mut job = Job {
                    store,
                    client,
                    job: &seen.job,
                    snapshot: seen.snapshot,
                    now: seen.now,
                };
                let mut ops = Writes::default();
                for s in &writes.slots {
                    let changed: Vec<Run> = s.changed().map(|(r, _)| r.clone()).collect();
                    if !changed.is_empty() {
                        job.put_runs(&mut ops, &changed, &s.before)?;
                    }
                }
                let mut row = job.snapshot.row.clone();
                let mut revoke = None;
                match &writes.lease {
                    LeaseWrite::Grant { lease, run, ttl } => {
                        // With its run id, alive key and lease row, the grant must fit in
                        // one transaction.
                        if ops.len() + 3 > MAX_TXN_OPS {
                            let all: Vec<Run> =
                                writes.slots.iter().flat_map(|s| s.before.clone()).collect();
                            return job.settle_ahead(&writes.ahead, &all).await;
                        }
                        // The etcd lease the holder keeps alive; whole seconds, at least 1.
                        let ttl_secs = (ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0))
                            .clamp(1, MAX_ETCD_TTL_SECS)
                            as i64;
                        let etcd_lease = job.client.lease_grant(ttl_secs, None).await?.id();
                        let run_key = store.run_key(run);
                        ops.put(store.id_key(&run.run_id), run_key.clone());
                        ops.put_leased(
                            store.alive_key(&seen.job),
                            lease.holder.clone(),
                            etcd_lease,
                        );
                        // The etcd lease of a lost race is left to expire with nothing
                        // attached to it: revoking it would be one more write through Raft
                        // for every loser of a race.
                        row = Some(Row {
                            lease: lease.clone(),
                            etcd_lease,
                            run_key,
                        });
                    }
                    LeaseWrite::Renew(renewed) => {
                        let Some(r) = &mut row else {
                            return Ok(Commit::Changed);
                        };
                        if !store.judged {
                            // Keep the etcd lease alive first: when it is gone, so is the
                            // lease.
                            let (mut keeper, mut stream) =
                                job.client.lease_keep_alive(r.etcd_lease).await?;
                            keeper.keep_alive().await?;
                            let alive = stream.message().await?.is_some_and(|r| r.ttl() > 0);
                            if !alive {
                                return Ok(Commit::Lost);
                            }
                        }
                        r.lease.expire_at = renewed.expire_at;
                        r.lease.renewal = renewed.renewal;
                    }
                    LeaseWrite::Release(released) => {
                        if let Some(r) = &mut row {
                            r.lease = released.clone();
                            revoke = Some(r.etcd_lease).filter(|id| *id != 0);
                            r.etcd_lease = 0;
                            ops.delete(store.alive_key(&seen.job));
                        }
                    }
                    LeaseWrite::Keep => {
                        if ops.len() + 1 > MAX_TXN_OPS {
                            let all: Vec<Run> =
                                writes.slots.iter().flat_map(|s| s.before.clone()).collect();
                            return job.settle_ahead(&writes.ahead, &all).await;
                        }
                    }
                }
                if !job.commit(ops, row).await? {
                    return Ok(Commit::Changed);
                }
                if let Some(id) = revoke {
                    let _ = job.client.lease_revoke(id).await;
                }
                Ok(Commit::Done)
            })
            .await
        });
        once.unwrap_or_else(|_| Err(timed_out()))
    }
}

/// Opens the store at `address` for [`crate::store::registry`]; "now" comes from `clock` (this store has no clock of its own).
///
/// # Errors
/// As [`EtcdStore::open`].
pub(crate) fn open_boxed(
    address: &str,
    clock: std::sync::Arc<dyn crate::guard::clock::Clock>,
) -> Result<Box<dyn Store>, StoreError> {
    let mut store = EtcdStore::open(address)?;
    store.set_clock(clock);
    Ok(Box::new(store))
}

impl Store for EtcdStore {
    fn describe(&self) -> String {
        self.describe.clone()
    }

    engine::store_ops!(renew);

    fn init(&mut self) -> Result<(), StoreError> {
        let mut client = self.connect()?;
        let key = self.key("schema");
        let result = self.rt.block_on(async {
            let txn = Txn::new()
                .when(vec![Compare::version(key.as_bytes(), CompareOp::Equal, 0)])
                .and_then(vec![TxnOp::put(
                    key.as_bytes(),
                    SCHEMA_VERSION.to_string().as_bytes(),
                    None,
                )])
                .or_else(vec![TxnOp::get(key.as_bytes(), None)]);
            tokio::time::timeout(CALL_TIMEOUT, client.txn(txn)).await
        });
        let resp = match result {
            Err(_) => {
                self.client = None;
                return Err(self.error(
                    "read the schema version",
                    Fail::Client(etcd_client::Error::Internal("timed out".to_string())),
                ));
            }
            Ok(Err(e)) => {
                self.client = None;
                return Err(self.error("read the schema version", Fail::Client(e)));
            }
            Ok(Ok(resp)) => resp,
        };
        if !resp.succeeded() {
            let found = resp
                .op_responses()
                .iter()
                .flat_map(get_kvs)
                .next()
                .map(|kv| kv.value().to_vec())
                .unwrap_or_default();
            if let Some(v) = remote::newer_version(&found, SCHEMA_VERSION)
                .map_err(|e| self.error("read the schema version", Fail::Data(e)))?
            {
                return Err(self.error("read the schema version", Fail::Newer(v)));
            }
        }
        self.schema_ready = true;
        Ok(())
    }

    fn now(&mut self) -> Result<i64, StoreError> {
        Ok(self.now_usec())
    }

    fn lease(&mut self, job: &str) -> Result<Option<Lease>, StoreError> {
        self.retrying("read lease", async |store, client| {
            let (state_job, _) = Job::read(store, client, job, Vec::new()).await?;
            Ok(Some(state_job.lease().filter(|l| !l.holder.is_empty())))
        })
    }

    fn runs(&mut self, query: &RunQuery) -> Result<Vec<Run>, StoreError> {
        let prefix = match (&query.job, query.slot) {
            (Some(job), Some(slot)) => self.slot_prefix(job, slot),
            (Some(job), None) => self.key(&format!("run/{job}/")),
            (None, _) => self.key("run/"),
        };
        // A job's newest records: every record is created by a grant and never moved, so
        // the `limit` created last (by revision, sorted by the server) are the newest;
        // each comes with its report key, created in the same transaction (twice as many
        // keys). Only when a filter leaves fewer is the whole history read.
        if query.job.is_some()
            && query.slot.is_none()
            && query.slots_from.is_none()
            && query.limit > 0
        {
            let limit = i64::try_from(query.limit).unwrap_or(i64::MAX);
            let newest = self.retrying("read runs", async |_, client| {
                let options = GetOptions::new()
                    .with_prefix()
                    .with_sort(SortTarget::Create, SortOrder::Descend)
                    .with_limit(limit.saturating_mul(2));
                let resp = reader(client).get(prefix.as_bytes(), Some(options)).await?;
                Ok(Some((runs_of(&whole_records(resp.kvs()))?, resp.more())))
            })?;
            let (runs, more) = newest;
            let runs = remote::select(runs, query);
            if runs.len() == query.limit || !more {
                return Ok(runs);
            }
        }
        // Reads in pages, which never conflict: an attempt always answers.
        let runs = self.retrying("read runs", async |_, client| {
            runs_of(&range_all(client, &prefix).await?).map(Some)
        })?;
        Ok(remote::select(runs, query))
    }

    fn read_mark(&mut self, namespace: &str, key: &str) -> Result<Option<Mark>, StoreError> {
        let k = self.mark_key(namespace, key);
        self.retrying("read a mark", async |_, client| {
            let resp = client.get(k.as_bytes(), None).await?;
            resp.kvs()
                .first()
                .map(|kv| remote::mark_from_json(namespace, key, kv.value()).map_err(Fail::Data))
                .transpose()
                .map(Some)
        })
    }

    fn insert_mark(&mut self, mark: &Mark, fenced: bool) -> Result<bool, StoreError> {
        let k = self.mark_key(&mark.namespace, &mark.key);
        let index = format!(
            "{}{}~{}",
            self.mark_day_prefix(&mark.job, mark.marked_at.div_euclid(remote::MARK_DAY_USEC)),
            mark.namespace,
            crate::guard::mark::key_component(&mark.key)
        );
        let value = remote::mark_to_json(mark);
        self.retrying("mark", async |store, client| {
            let mut guards = vec![Compare::version(k.as_bytes(), CompareOp::Equal, 0)];
            if fenced {
                // The lease as the rules see it, then compared in the transaction: the
                // row at the revision read (a takeover or release in between rewrites
                // it) and the holder's `alive` key with its etcd lease (gone once the
                // lease expired), so a run frozen between its read and this insert
                // records nothing once its lease has ended, taken over or not.
                let (job, _) = Job::read(store, client, &mark.job, Vec::new()).await?;
                let held = job
                    .lease()
                    .filter(|l| rules::mark_fence_holds(job.now, Some(l), mark, true));
                let Some(lease) = held else {
                    return Ok(Some(false));
                };
                guards.push(job.unchanged());
                if !store.judged {
                    let alive = store.alive_key(&mark.job);
                    let etcd_lease = job.snapshot.row.as_ref().map_or(0, |r| r.etcd_lease);
                    guards.push(Compare::value(
                        alive.as_bytes(),
                        CompareOp::Equal,
                        lease.holder.as_bytes(),
                    ));
                    guards.push(Compare::lease(
                        alive.as_bytes(),
                        CompareOp::Equal,
                        etcd_lease,
                    ));
                }
            }
            let txn = Txn::new().when(guards).and_then(vec![
                TxnOp::put(k.as_bytes(), value.as_bytes(), None),
                TxnOp::put(index.as_bytes(), "", None),
            ]);
            Ok(Some(client.txn(txn).await?.succeeded()))
        })
    }

    fn delete_marks(&mut self, job: &str, before: i64) -> Result<usize, StoreError> {
        // The index keys sort by day: every key before the first day that ends after the
        // cut-off goes, in pages that fit one transaction (two deletes each).
        let start = self.key(&format!("markday/{job}/"));
        let end = self.mark_day_prefix(job, before.div_euclid(remote::MARK_DAY_USEC));
        let marks = self.key("mark/");
        let mut n = 0;
        loop {
            let deleted = self.retrying("delete marks", async |_, client| {
                let options = GetOptions::new()
                    .with_range(end.as_bytes())
                    .with_keys_only()
                    .with_limit(60);
                let resp = client.get(start.as_bytes(), Some(options)).await?;
                let mut ops = Vec::new();
                for kv in resp.kvs() {
                    let index = String::from_utf8_lossy(kv.key()).into_owned();
                    let entry = index.rsplit('/').next().unwrap_or_default();
                    if let Some((namespace, key)) = entry.split_once('~') {
                        ops.push(TxnOp::delete(format!("{marks}{namespace}/{key}"), None));
                    }
                    ops.push(TxnOp::delete(index, None));
                }
                if !ops.is_empty() {
                    client.txn(Txn::new().and_then(ops)).await?;
                }
                Ok(Some(resp.kvs().len()))
            })?;
            n += deleted;
            if deleted == 0 {
                return Ok(n);
            }
        }
    }

    fn count_marks(&mut self, job: &str, before: i64) -> Result<usize, StoreError> {
        // The index keys delete_marks deletes, one per mark.
        let start = self.key(&format!("markday/{job}/"));
        let end = self.mark_day_prefix(job, before.div_euclid(remote::MARK_DAY_USEC));
        self.retrying("count marks", async |_, client| {
            let options = GetOptions::new()
                .with_range(end.as_bytes())
                .with_count_only();
            let resp = client.get(start.as_bytes(), Some(options)).await?;
            Ok(Some(usize::try_from(resp.count()).unwrap_or(0)))
        })
    }

    fn put_beat(&mut self, host: &str, beat: &str) -> Result<(), StoreError> {
        let key = self.key(&format!(
            "hosts/{}",
            crate::guard::mark::key_component(host)
        ));
        self.retrying("write the heartbeat", async |_, client| {
            client.put(key.as_bytes(), beat.as_bytes(), None).await?;
            Ok(Some(()))
        })
    }

    fn beats(&mut self) -> Result<Vec<(String, String)>, StoreError> {
        let prefix = self.key("hosts/");
        self.retrying("read the heartbeats", async |_, client| {
            range_all(client, &prefix)
                .await?
                .iter()
                .map(|kv| {
                    let key = String::from_utf8_lossy(&kv.key()[prefix.len()..]);
                    let host = remote::percent_decode(&key);
                    let beat = String::from_utf8(kv.value().to_vec())
                        .map_err(|e| Fail::Data(format!("heartbeat {host:?}: {e}")))?;
                    Ok((host, beat))
                })
                .collect::<Result<Vec<_>, Fail>>()
                .map(Some)
        })
    }

    fn read_beat(&mut self, key: &str) -> Result<Option<String>, StoreError> {
        let path = self.key(&format!("hosts/{}", crate::guard::mark::key_component(key)));
        self.retrying("read a fleet record", async |_, client| {
            let resp = client.get(path.as_bytes(), None).await?;
            resp.kvs()
                .first()
                .map(|kv| {
                    String::from_utf8(kv.value().to_vec())
                        .map_err(|e| Fail::Data(format!("fleet record {key:?}: {e}")))
                })
                .transpose()
                .map(Some)
        })
    }

    fn forget_beats(&mut self, hosts: &[String]) -> Result<(), StoreError> {
        for host in hosts {
            let key = self.key(&format!(
                "hosts/{}",
                crate::guard::mark::key_component(host)
            ));
            self.retrying("forget heartbeats", async |_, client| {
                client.delete(key.as_bytes(), None).await?;
                Ok(Some(()))
            })?;
        }
        Ok(())
    }

    fn read_schedule(&mut self, job: &str) -> Result<Option<ScheduleDecl>, StoreError> {
        let key = self.key(&format!("schedule/{job}"));
        self.retrying("read the schedule", async |_, client| {
            let resp = client.get(key.as_bytes(), None).await?;
            resp.kvs()
                .first()
                .map(|kv| remote::schedule_from_json(job, kv.value()).map_err(Fail::Data))
                .transpose()
                .map(Some)
        })
    }

    fn swap_schedule(
        &mut self,
        expected: Option<&ScheduleDecl>,
        new: &ScheduleDecl,
    ) -> Result<bool, StoreError> {
        let key = self.key(&format!("schedule/{}", new.job));
        let guard = match expected {
            None => Compare::version(key.as_bytes(), CompareOp::Equal, 0),
            Some(e) => Compare::value(
                key.as_bytes(),
                CompareOp::Equal,
                remote::schedule_to_json(e).as_bytes(),
            ),
        };
        let value = remote::schedule_to_json(new);
        self.retrying("declare the schedule", async |_, client| {
            let txn = Txn::new()
                .when(vec![guard.clone()])
                .and_then(vec![TxnOp::put(key.as_bytes(), value.as_bytes(), None)]);
            Ok(Some(client.txn(txn).await?.succeeded()))
        })
    }

    fn delete_slots(
        &mut self,
        job: &str,
        slots: &[i64],
        started_before: i64,
    ) -> Result<usize, StoreError> {
        // A transaction holds at most MAX_TXN_OPS operations: a few slots per transaction,
        // and a slot whose records do not fit is deleted in parts, its records that make it
        // done last (until then it stays done) and its queued marker with the last.
        let mut n = 0;
        let slots = remote::distinct_slots(slots);
        let mut rest: &[i64] = &slots;
        while !rest.is_empty() {
            let chunk: Vec<i64> = rest.iter().take(10).copied().collect();
            let (deleted, done) = self.retrying("delete runs", async |store, client| {
                let reads = chunk
                    .iter()
                    .map(|s| {
                        TxnOp::get(
                            store.slot_prefix(job, *s).into_bytes(),
                            Some(GetOptions::new().with_prefix()),
                        )
                    })
                    .collect();
                let (mut state_job, found) = Job::read(store, client, job, reads).await?;
                let mut writes = Writes::default();
                let (mut n, mut done) = (0, 0);
                for (slot, kvs) in chunk.iter().zip(&found) {
                    let mut runs = runs_of(kvs)?;
                    if !rules::retention_may_delete(&runs, started_before) {
                        done += 1;
                        continue;
                    }
                    // Three keys per record, the marker and the lease row.
                    let room = (MAX_TXN_OPS - 1).saturating_sub(writes.len() + 1) / 3;
                    let whole = runs.len() <= room;
                    runs.sort_by_key(rules::is_done);
                    for r in runs.iter().take(room) {
                        writes.delete(store.run_key(r));
                        writes.delete(store.report_key(r));
                        writes.delete(store.id_key(&r.run_id));
                    }
                    n += runs.len().min(room);
                    if !whole {
                        break;
                    }
                    writes.delete(store.queued_key(job, *slot));
                    done += 1;
                }
                if n == 0 {
                    return Ok(Some((0, done)));
                }
                Ok(state_job.commit(writes, None).await?.then_some((n, done)))
            })?;
            n += deleted;
            rest = &rest[done..];
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_keys_sort_as_numbers() {
        let slots = [i64::MIN, -5, -1, 0, 1, 1_700_000_000_000_000, i64::MAX];
        let keys: Vec<String> = slots.iter().map(|s| slot_part(*s)).collect();
        let mut sorted = keys.clone();
        sorted.sort();
        assert_eq!(keys, sorted);
        for s in slots {
            let key = format!("p/{}", slot_part(s));
            assert_eq!(slot_of_key(key.as_bytes(), "p/"), Some(s));
        }
    }

    #[test]
    fn prefix_end_bounds_the_prefix() {
        assert_eq!(prefix_end("a/"), b"a0".to_vec());
        assert_eq!(prefix_end("a\u{7f}"), b"a\x80".to_vec());
    }

    #[test]
    fn addresses() {
        for good in [
            "etcd://127.0.0.1:2379",
            "etcd://h1:2379,h2:2379,h3",
            "etcd://user:p%40ss@h:2379?prefix=ci/a:",
            "etcd://[::1]:2379",
        ] {
            EtcdStore::open(good).unwrap_or_else(|e| panic!("{good}: {e}"));
        }
        for (bad, why) in [
            ("etcd://", "no host"),
            ("etcd://h:99999", "bad port"),
            ("etcd://h:2379?prefix=a b", "not plain"),
            (
                "etcd://h:2379?ssl-ca=/etc/ssl/certs/ca-certificates.crt",
                "etcds://",
            ),
            ("etcd://h:2379?sslmode=require", "unknown parameter"),
            ("etcd://h:2379?prefix=a&prefix=b", "more than once"),
        ] {
            let e = EtcdStore::open(bad).unwrap_err().to_string();
            assert!(e.contains(why), "{bad}: {e}");
        }
        let e = EtcdStore::open("etcd://u:secret@h:1?prefix=a b")
            .unwrap_err()
            .to_string();
        assert!(!e.contains("secret"), "{e}");
    }
}

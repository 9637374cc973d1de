//! What the shared (remote) stores have in common: time limits on every call
//! ([`CONNECT_TIMEOUT`], [`CALL_TIMEOUT`], [`CANCEL_TIMEOUT`]), a ledger record, schedule
//! and mark in the JSON or string form the key-value stores keep ([`run_from_object`],
//! [`run_to_json`], [`mark_to_json`], ...), and the selection of records by a
//! [`crate::store::RunQuery`] for stores that read them whole ([`select`]).
//!
//! Used by every backend but SQLite: [`super::postgres`], [`super::mysql`] and
//! [`super::redis`] for the time limits and records, [`super::etcd`] and
//! [`super::zookeeper`] for the JSON forms too. No lease or ledger rule is decided here;
//! those are [`super::rules`]'.

// Each remote store uses its part of this module: a build with some of them leaves the
// rest unused, which the build with all of them (CI's clippy) still checks.
#![cfg_attr(
    not(all(
        feature = "store-postgres",
        feature = "store-mysql",
        feature = "store-redis",
        feature = "store-etcd",
        feature = "store-zookeeper"
    )),
    allow(dead_code)
)]

use std::time::Duration;

use serde_json::Value;
#[cfg(any(feature = "store-etcd", feature = "store-zookeeper"))]
use serde_json::{Map, json};

use crate::guard::ledger::{Outcome, Resolution, Run, Slot};
use crate::store::StoreError;

/// How long connecting to a remote store may take before it counts as unavailable.
///
/// Well under a sixth of the shortest sensible `lease_ttl` (30 s), so that a store that
/// stopped answering never holds up the shim's renewal loop past its deadline.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// How long one call to a remote store (one statement or script, with its answer) may
/// take before it counts as unavailable; as [`CONNECT_TIMEOUT`]. The engine's loop waits
/// as long in all for a job another writer holds.
pub use crate::store::engine::CALL_TIMEOUT;

/// How long stopping a statement given up on (after [`CALL_TIMEOUT`]) may take: a new
/// connection to the server and one message, PostgreSQL's `CancelRequest` (the
/// protocol's "Canceling Requests in Progress") or MySQL's `KILL QUERY`. A server that
/// answers at all takes milliseconds. It runs beside whatever the store does next; only
/// dropping the store waits for it.
pub const CANCEL_TIMEOUT: Duration = Duration::from_secs(1);

/// Requests to stop statements given up on (PostgreSQL's `CancelRequest`, MySQL's
/// `KILL QUERY`), each on a thread of its own, so that nothing the store does next waits
/// for one. Dropping it waits for those still under way, at most [`CANCEL_TIMEOUT`] in
/// all, so that a command that gives up and exits still stops what it left running.
#[derive(Default)]
pub(crate) struct Cancels(Vec<std::sync::mpsc::Receiver<()>>);

impl Cancels {
    /// Runs `send` (which bounds itself by [`CANCEL_TIMEOUT`]) on a new thread named `name`.
    pub(crate) fn start(&mut self, name: &str, send: impl FnOnce() + Send + 'static) {
        self.0
            .retain(|done| matches!(done.try_recv(), Err(std::sync::mpsc::TryRecvError::Empty)));
        let (done, wait) = std::sync::mpsc::channel();
        let spawned = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                send();
                let _ = done.send(());
            });
        if spawned.is_ok() {
            self.0.push(wait);
        }
    }
}

impl Drop for Cancels {
    fn drop(&mut self) {
        let deadline = std::time::Instant::now() + CANCEL_TIMEOUT;
        for done in self.0.drain(..) {
            let _ =
                done.recv_timeout(deadline.saturating_duration_since(std::time::Instant::now()));
        }
    }
}

/// The schema (key or node layout) version a store keeps as text, `found`: `Ok(Some(v))`
/// when it is `v`, newer than `known`, this jobguard's; `Ok(None)` when it is not newer.
///
/// # Errors
/// The text is not a number: what to say, naming it.
#[cfg(any(feature = "store-etcd", feature = "store-zookeeper"))]
pub(crate) fn newer_version(found: &[u8], known: i64) -> Result<Option<i64>, String> {
    let text = String::from_utf8_lossy(found);
    match text.trim().parse::<i64>() {
        Ok(v) => Ok((v > known).then_some(v)),
        Err(_) => Err(format!("schema version {text:?} is not a number")),
    }
}

/// `e`, an error of `op` on `store` (its address with secrets masked), as
/// [`StoreError::Unavailable`] in its words with their sources ([`chain`]): how the etcd
/// and ZooKeeper stores sort every error of their clients.
pub(crate) fn unavailable(store: &str, op: &str, e: &dyn std::error::Error) -> StoreError {
    StoreError::Unavailable {
        store: store.to_string(),
        detail: format!("{op}: {}", chain(e)),
    }
}

/// An error with its sources, `outer: inner: innermost`, for messages.
pub(crate) fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let more = s.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        source = s.source();
    }
    text
}

fn field<'a>(object: &'a serde_json::Map<String, Value>, name: &str) -> Option<&'a Value> {
    object.get(name).filter(|v| !v.is_null())
}

fn int(object: &serde_json::Map<String, Value>, name: &str) -> Result<Option<i64>, String> {
    match field(object, name) {
        None => Ok(None),
        Some(Value::Number(n)) => n
            .as_i64()
            .map(Some)
            .ok_or_else(|| format!("{name} is not an integer: {n}")),
        Some(Value::String(s)) if s.is_empty() => Ok(None),
        Some(Value::String(s)) => s
            .parse()
            .map(Some)
            .map_err(|_| format!("{name} is not an integer: {s:?}")),
        Some(other) => Err(format!("{name} is not an integer: {other}")),
    }
}

fn text(object: &serde_json::Map<String, Value>, name: &str) -> Result<Option<String>, String> {
    match field(object, name) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err(format!("{name} is not text: {other}")),
    }
}

/// Reads a ledger record from an object keyed by the `jobguard_run` column names, as
/// PostgreSQL's `to_jsonb`, MySQL's `JSON_OBJECT` or a Redis hash (all values strings,
/// absent fields for NULL) give it. Integers may be numbers or decimal strings; `forced`
/// may be a boolean, 0/1 or "0"/"1".
///
/// # Errors
/// A short message naming the run and the field that is missing or malformed.
pub(crate) fn run_from_object(object: &serde_json::Map<String, Value>) -> Result<Run, String> {
    let run_id = text(object, "run_id")?.ok_or("run without run_id")?;
    let bad = |what: String| format!("run {run_id}: {what}");
    let need_text = |name: &str| -> Result<String, String> {
        text(object, name)
            .map_err(bad)?
            .ok_or_else(|| bad(format!("{name} missing")))
    };
    let need_int = |name: &str| -> Result<i64, String> {
        int(object, name)
            .map_err(bad)?
            .ok_or_else(|| bad(format!("{name} missing")))
    };
    let outcome: Outcome = need_text("outcome")?.parse().map_err(bad)?;
    let resolution = text(object, "resolution")
        .map_err(bad)?
        .map(|r| r.parse::<Resolution>())
        .transpose()
        .map_err(bad)?;
    let forced = match field(object, "forced") {
        Some(Value::Bool(b)) => *b,
        Some(Value::Number(n)) => n.as_i64() == Some(1),
        Some(Value::String(s)) => s == "1" || s == "true",
        _ => false,
    };
    let pid = need_int("pid")?;
    let pid = u32::try_from(pid).map_err(|_| bad(format!("pid {pid} out of range")))?;
    let pid_start = need_int("pid_start")?;
    let pid_start =
        u64::try_from(pid_start).map_err(|_| bad(format!("pid_start {pid_start} out of range")))?;
    let exit_status = int(object, "exit_status")
        .map_err(bad)?
        .map(|s| i32::try_from(s).map_err(|_| bad(format!("exit_status {s} out of range"))))
        .transpose()?;
    let report = match text(object, "report").map_err(bad)? {
        None => Default::default(),
        Some(r) if r.is_empty() => Default::default(),
        Some(r) => serde_json::from_str(&r).map_err(|e| bad(format!("report: {e}")))?,
    };
    Ok(Run {
        job: need_text("job")?,
        slot: Slot {
            usec: need_int("slot_usec")?,
            zone: need_text("slot_zone")?,
        },
        attempt: need_int("attempt")?,
        outcome,
        reason: text(object, "reason").map_err(bad)?,
        exit_status,
        forced,
        trigger: need_text("trigger_kind")?,
        host: need_text("host")?,
        machine_id: need_text("machine_id")?,
        boot_id: need_text("boot_id")?,
        pid,
        pid_start,
        invocation_id: text(object, "invocation_id").map_err(bad)?,
        started_at: need_int("started_at")?,
        finished_at: int(object, "finished_at").map_err(bad)?,
        fencing_token: need_int("fencing_token")?,
        report,
        resolution,
        run_id: run_id.clone(),
    })
}

/// A slot as a key part: 20 decimal digits, offset by 2^63 so that keys sort as the
/// slots (µs since the epoch, negative ones too) do.
#[cfg(any(feature = "store-etcd", feature = "store-zookeeper"))]
pub(crate) fn slot_part(usec: i64) -> String {
    // Offset so that negative slots sort before positive ones, as numbers do.
    format!("{:020}", (usec as u64) ^ (1 << 63))
}

/// A ledger record as JSON with the SQL stores' column names (read back by
/// [`run_from_json`]).
#[cfg(any(feature = "store-etcd", feature = "store-zookeeper"))]
pub(crate) fn run_to_json(run: &Run) -> Result<String, String> {
    let report = serde_json::to_string(&run.report).map_err(|e| e.to_string())?;
    let mut o = Map::new();
    o.insert("run_id".into(), json!(run.run_id));
    o.insert("job".into(), json!(run.job));
    o.insert("slot_usec".into(), json!(run.slot.usec));
    o.insert("slot_zone".into(), json!(run.slot.zone));
    o.insert("attempt".into(), json!(run.attempt));
    o.insert("outcome".into(), json!(run.outcome.as_str()));
    o.insert("reason".into(), json!(run.reason));
    o.insert("exit_status".into(), json!(run.exit_status));
    o.insert("forced".into(), json!(run.forced));
    o.insert("trigger_kind".into(), json!(run.trigger));
    o.insert("host".into(), json!(run.host));
    o.insert("machine_id".into(), json!(run.machine_id));
    o.insert("boot_id".into(), json!(run.boot_id));
    o.insert("pid".into(), json!(run.pid));
    o.insert("pid_start".into(), json!(run.pid_start));
    o.insert("invocation_id".into(), json!(run.invocation_id));
    o.insert("started_at".into(), json!(run.started_at));
    o.insert("finished_at".into(), json!(run.finished_at));
    o.insert("fencing_token".into(), json!(run.fencing_token));
    o.insert("report".into(), json!(report));
    o.insert(
        "resolution".into(),
        json!(run.resolution.map(|r| r.as_str())),
    );
    Ok(Value::Object(o).to_string())
}

/// A schedule declaration as the key-value stores keep it: JSON with the keys in one
/// order (serde_json's map is sorted), so that equal declarations are equal bytes.
#[cfg(any(feature = "store-etcd", feature = "store-zookeeper"))]
pub(crate) fn schedule_to_json(d: &crate::store::ScheduleDecl) -> String {
    json!({
        "fingerprint": d.fingerprint,
        "defined_at": d.defined_at,
        "host": d.host,
        "seen_at": d.seen_at,
        "horizon": d.horizon,
    })
    .to_string()
}

/// A schedule declaration of `job` written by [`schedule_to_json`].
#[cfg(any(feature = "store-etcd", feature = "store-zookeeper"))]
pub(crate) fn schedule_from_json(
    job: &str,
    text: &[u8],
) -> Result<crate::store::ScheduleDecl, String> {
    let v: Value = serde_json::from_slice(text).map_err(|e| format!("schedule of {job}: {e}"))?;
    let number = |k: &str| {
        v.get(k)
            .and_then(Value::as_i64)
            .ok_or_else(|| format!("schedule of {job}: no {k}"))
    };
    let text = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
    Ok(crate::store::ScheduleDecl {
        job: job.to_string(),
        fingerprint: text("fingerprint")
            .ok_or_else(|| format!("schedule of {job}: no fingerprint"))?,
        defined_at: number("defined_at")?,
        host: text("host").unwrap_or_default(),
        seen_at: number("seen_at")?,
        horizon: number("horizon")?,
    })
}

/// A mark as the key-value stores keep it (etcd, ZooKeeper): JSON without its namespace
/// and key, which are in its key.
#[cfg(any(feature = "store-etcd", feature = "store-zookeeper"))]
pub(crate) fn mark_to_json(m: &crate::store::Mark) -> String {
    json!({
        "job": m.job,
        "run_id": m.run_id,
        "host": m.host,
        "token": m.token,
        "marked_at": m.marked_at,
    })
    .to_string()
}

/// The mark of `key` in `namespace` written by [`mark_to_json`].
#[cfg(any(feature = "store-etcd", feature = "store-zookeeper"))]
pub(crate) fn mark_from_json(
    namespace: &str,
    key: &str,
    text: &[u8],
) -> Result<crate::store::Mark, String> {
    let what = || format!("mark {namespace} {key}");
    let v: Value = serde_json::from_slice(text).map_err(|e| format!("{}: {e}", what()))?;
    let number = |k: &str| {
        v.get(k)
            .and_then(Value::as_i64)
            .ok_or_else(|| format!("{}: no {k}", what()))
    };
    let text = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
    Ok(crate::store::Mark {
        namespace: namespace.to_string(),
        key: key.to_string(),
        job: text("job").ok_or_else(|| format!("{}: no job", what()))?,
        run_id: text("run_id").unwrap_or_default(),
        host: text("host").unwrap_or_default(),
        token: number("token")?,
        marked_at: number("marked_at")?,
    })
}

/// A day, for the key-value stores' index of marks by age: retention deletes a job's marks
/// a whole day at a time, once the day has ended before the cut-off (µs).
#[cfg(any(feature = "store-etcd", feature = "store-zookeeper"))]
pub(crate) const MARK_DAY_USEC: i64 = 86_400_000_000;

/// The records of `runs` that `query` asks for (its outcomes and resolutions), newest
/// first as [`crate::store::Store::runs`] answers (records of one job started in the
/// same µs: the latest recorded, by fencing token, first), at most `query.limit`. For the
/// key-value stores, which read the records and filter them here.
#[cfg(any(feature = "store-etcd", feature = "store-zookeeper"))]
pub(crate) fn select(mut runs: Vec<Run>, query: &crate::store::RunQuery) -> Vec<Run> {
    if let Some(from) = query.slots_from {
        crate::store::rules::window(&mut runs, from, |r| r);
    }
    runs.retain(|r| {
        (query.outcomes.is_empty() || query.outcomes.contains(&r.outcome))
            && (query.resolutions.is_empty()
                || r.resolution.is_some_and(|x| query.resolutions.contains(&x)))
    });
    // Newest first; a job's records started in the same µs, latest recorded first.
    runs.sort_by(|a, b| {
        (b.started_at, b.fencing_token, &b.job).cmp(&(a.started_at, a.fencing_token, &a.job))
    });
    if query.limit > 0 {
        runs.truncate(query.limit);
    }
    runs
}

/// `slots` sorted, each once: a slot listed twice to [`crate::store::Store::delete_slots`]
/// is deleted (and counted) once.
#[cfg(any(
    feature = "store-redis",
    feature = "store-etcd",
    feature = "store-zookeeper"
))]
pub(crate) fn distinct_slots(slots: &[i64]) -> Vec<i64> {
    let mut slots = slots.to_vec();
    slots.sort_unstable();
    slots.dedup();
    slots
}

/// The slot of a key part made by [`slot_part`]; `None` for anything else.
#[cfg(any(feature = "store-etcd", feature = "store-zookeeper"))]
pub(crate) fn slot_from_part(part: &str) -> Option<i64> {
    if part.len() != 20 || !part.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let raw: u64 = part.parse().ok()?;
    Some((raw ^ (1 << 63)) as i64)
}

/// [`run_from_object`] on JSON text.
///
/// # Errors
/// As [`run_from_object`], or when the text is not a JSON object.
pub(crate) fn run_from_json(json: &str) -> Result<Run, String> {
    match serde_json::from_str::<Value>(json) {
        Ok(Value::Object(object)) => run_from_object(&object),
        Ok(other) => Err(format!("run record is not an object: {other}")),
        Err(e) => Err(format!("run record: {e}")),
    }
}

/// A record without its report, as JSON ([`run_to_json`] with an empty report): the
/// stores that keep a record's report apart (etcd, ZooKeeper) write this as the record,
/// so a change of resolution rewrites a few hundred bytes.
#[cfg(any(feature = "store-etcd", feature = "store-zookeeper"))]
pub(crate) fn bare_run_to_json(run: &Run) -> Result<String, String> {
    run_to_json(&Run {
        report: Default::default(),
        ..run.clone()
    })
}

/// A record's report as JSON, kept apart from [`bare_run_to_json`].
#[cfg(any(feature = "store-etcd", feature = "store-zookeeper"))]
pub(crate) fn report_to_json(run: &Run) -> Result<String, String> {
    serde_json::to_string(&run.report).map_err(|e| format!("run report: {e}"))
}

/// A record from a [`bare_run_to_json`] text and its [`report_to_json`] text (`None`: no
/// report kept, the record's own).
#[cfg(any(feature = "store-etcd", feature = "store-zookeeper"))]
pub(crate) fn run_with_report(record: &[u8], report: Option<&[u8]>) -> Result<Run, String> {
    let text = std::str::from_utf8(record).map_err(|e| format!("run record: {e}"))?;
    let mut run = run_from_json(text)?;
    if let Some(report) = report {
        run.report = serde_json::from_slice(report).map_err(|e| format!("run report: {e}"))?;
    }
    Ok(run)
}

/// The system's trust-store file as OpenSSL (and rustls-native-certs) finds it:
/// `SSL_CERT_FILE`, else the distribution's bundle (`/etc/ssl/certs/ca-certificates.crt`
/// on Debian); `None` when there is no such file.
#[cfg(any(feature = "store-mysql", feature = "store-zookeeper"))]
pub(crate) fn system_trust_file() -> Option<std::path::PathBuf> {
    openssl_probe::probe()
        .cert_file
        .filter(|f| std::fs::metadata(f).is_ok_and(|m| m.is_file()))
}

/// The first of `groups` (spellings of one parameter) that the address's query gives
/// more than once, named by its first spelling: `ssl-mode=A&ssl_mode=B` has no one
/// meaning, so the stores refuse it rather than pick one.
pub(crate) fn given_twice(address: &str, groups: &[&[&str]]) -> Option<String> {
    let query = address.split_once('?')?.1;
    let query = query.split_once('#').map_or(query, |(q, _)| q);
    groups.iter().find_map(|group| {
        let n = query
            .split('&')
            .map(|pair| pair.split_once('=').map_or(pair, |(k, _)| k))
            .filter(|k| group.contains(k))
            .count();
        (n > 1).then(|| group[0].to_string())
    })
}

/// Splits `key=value` query parameters off an address: returns the address without the
/// parameters named in `ours`, and their values (percent-decoded), in order of `ours`. A
/// fragment after the query (`#insecure` in `rediss://h/0?prefix=p#insecure`) is kept.
pub(crate) fn take_params(address: &str, ours: &[&str]) -> (String, Vec<Option<String>>) {
    let mut values = vec![None; ours.len()];
    let Some((base, query)) = address.split_once('?') else {
        return (address.to_string(), values);
    };
    let (query, fragment) = match query.split_once('#') {
        Some((query, fragment)) => (query, format!("#{fragment}")),
        None => (query, String::new()),
    };
    let mut kept = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        match ours.iter().position(|o| *o == key) {
            Some(i) => values[i] = Some(percent_decode(value)),
            None => kept.push(pair),
        }
    }
    let rebuilt = if kept.is_empty() {
        format!("{base}{fragment}")
    } else {
        format!("{base}?{}{fragment}", kept.join("&"))
    };
    (rebuilt, values)
}

/// `s` with `%XX` escapes decoded (RFC 3986, section 2.1; a `%` not followed by two hex
/// digits stays as it is; invalid UTF-8 is replaced).
pub(crate) fn percent_decode(s: &str) -> String {
    percent_encoding::percent_decode_str(s)
        .decode_utf8_lossy()
        .into_owned()
}

/// Reads the certificate authority file an address names in parameter `param`
/// (`ssl-ca=PATH`, `sslrootcert=PATH`): certificates that the server's certificate must
/// chain to.
///
/// # Errors
/// A short message naming the file when it is not an absolute path, cannot be read, is
/// empty, or (with `pem_only`)
/// holds no `BEGIN CERTIFICATE` block.
pub(crate) fn read_ca_file(param: &str, path: &str, pem_only: bool) -> Result<Vec<u8>, String> {
    // Relative to what? The shim under systemd runs in `/`, a shell elsewhere.
    if !std::path::Path::new(path).is_absolute() {
        return Err(format!("{param} {path}: the path must be absolute"));
    }
    // As root: a file someone else could change would let them pick whom jobguard trusts.
    let real = crate::safe_path::check_file(std::path::Path::new(path))
        .map_err(|e| format!("{param} refused: {e}"))?;
    let data = std::fs::read(real).map_err(|e| format!("{param} {path}: {e}"))?;
    if data.is_empty() {
        return Err(format!("{param} {path}: empty file"));
    }
    if pem_only && !String::from_utf8_lossy(&data).contains("-----BEGIN CERTIFICATE-----") {
        return Err(format!("{param} {path}: no PEM certificate in the file"));
    }
    Ok(data)
}

/// The address with `@`, `?`, `#` and `/` in the password of its user-info part
/// percent-encoded, the user-info ending at the last `@` as [`crate::store::address::mask`]
/// reads it. A URL parser (RFC 3986) ends the user-info at the first `@`, `/`, `?` or
/// `#` instead, and would take the rest of such a password for the host and show it in
/// its errors; with the password encoded, it connects to the host that was meant and
/// the password is what was written. (An `@` in a query value is then read as the end of
/// the user-info too: percent-encode it there.)
pub(crate) fn encode_password(address: &str) -> String {
    let Some(i) = address.find("://") else {
        return address.to_string();
    };
    let (head, after) = address.split_at(i + 3);
    let Some(at) = after.rfind('@') else {
        return address.to_string();
    };
    let (userinfo, rest) = after.split_at(at);
    let Some((user, password)) = userinfo.split_once(':') else {
        return address.to_string();
    };
    if user.contains(['/', '?', '#']) {
        return address.to_string();
    }
    let mut encoded = String::with_capacity(password.len());
    for c in password.chars() {
        match c {
            '@' => encoded.push_str("%40"),
            '?' => encoded.push_str("%3F"),
            '#' => encoded.push_str("%23"),
            '/' => encoded.push_str("%2F"),
            _ => encoded.push(c),
        }
    }
    format!("{head}{user}:{encoded}{rest}")
}

/// True if `name` is a plain identifier jobguard accepts for a schema, database or key
/// prefix: 1 to 48 ASCII letters, digits, `_` (and `:`, `-`, `.` when `key` is true).
pub(crate) fn plain_name(name: &str, key: bool) -> bool {
    !name.is_empty()
        && name.len() <= 48
        && name.bytes().all(|b| {
            b.is_ascii_alphanumeric() || b == b'_' || (key && matches!(b, b':' | b'-' | b'.'))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_password_with_url_delimiters_is_encoded_up_to_the_last_at() {
        assert_eq!(
            encode_password("mysql://u:a:b@c#d?e/f@h:1/db?ssl-mode=DISABLED"),
            "mysql://u:a:b%40c%23d%3Fe%2Ff@h:1/db?ssl-mode=DISABLED"
        );
        assert_eq!(
            encode_password("redis://:p@h/0#insecure"),
            "redis://:p@h/0#insecure"
        );
        assert_eq!(encode_password("redis://h:6379/0"), "redis://h:6379/0");
    }

    #[test]
    fn params_are_taken_and_the_rest_kept() {
        let (rest, v) = take_params("postgres://h/db?schema=a%5Fb&sslmode=disable", &["schema"]);
        assert_eq!(rest, "postgres://h/db?sslmode=disable");
        assert_eq!(v, vec![Some("a_b".to_string())]);
        let (rest, v) = take_params("redis://h/0?prefix=x", &["prefix", "other"]);
        assert_eq!(rest, "redis://h/0");
        assert_eq!(v, vec![Some("x".to_string()), None]);
    }

    #[test]
    fn a_fragment_after_the_query_is_kept() {
        let (rest, v) = take_params("rediss://h/0?prefix=x&db=1#insecure", &["prefix"]);
        assert_eq!(rest, "rediss://h/0?db=1#insecure");
        assert_eq!(v, vec![Some("x".to_string())]);
        let (rest, v) = take_params("rediss://h/0?prefix=x#insecure", &["prefix"]);
        assert_eq!(rest, "rediss://h/0#insecure");
        assert_eq!(v, vec![Some("x".to_string())]);
    }

    #[test]
    fn run_from_strings_and_numbers() {
        let json = r#"{"run_id":"r","job":"j","slot_usec":"5","slot_zone":"UTC","attempt":1,
            "outcome":"running","forced":"0","trigger_kind":"timer","host":"h","machine_id":"m",
            "boot_id":"b","pid":"7","pid_start":8,"started_at":9,"fencing_token":"3","report":"{}"}"#;
        let run = run_from_json(json).unwrap();
        assert_eq!(run.slot.usec, 5);
        assert_eq!(run.fencing_token, 3);
        assert!(!run.forced);
        assert_eq!(run.finished_at, None);
        let err = run_from_json(r#"{"run_id":"r"}"#).unwrap_err();
        assert!(err.contains("run r"), "{err}");
    }

    #[test]
    fn a_parameter_given_twice_is_found_under_any_spelling() {
        let groups: &[&[&str]] = &[&["ssl-mode", "ssl_mode"], &["ssl-ca"]];
        let twice = |a: &str| given_twice(a, groups);
        assert_eq!(
            twice("mysql://h/d?ssl_mode=A&ssl-mode=B"),
            Some("ssl-mode".into())
        );
        assert_eq!(
            twice("mysql://h/d?ssl-ca=a&x=1&ssl-ca=b"),
            Some("ssl-ca".into())
        );
        assert_eq!(twice("mysql://h/d?ssl-mode=A&ssl-ca=b"), None);
        assert_eq!(twice("rediss://h/0?ssl-ca=a#ssl-ca=b"), None);
        assert_eq!(twice("mysql://h/d"), None);
    }
}

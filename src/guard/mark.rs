//! Fenced dedupe records (`jobguard mark NAMESPACE KEY`, `jobguard marked NAMESPACE
//! KEY`): what a namespace and a key may be, whose a namespace is, and how a key is spelled
//! in the key-value stores.
//!
//! A namespace is the job's own: `jobguard mark orders 1042` in the jobs `ship` and `mail`
//! records two marks, one for each pipeline, stored under `ship@orders` and `mail@orders`
//! ([`stored_namespace`]). With `--shared` it is one namespace for every job of the store,
//! stored as it is written. A shared mark of a key counts in every job's own namespace too:
//! marks recorded before namespaces were a job's own are shared ones, so a key handled
//! then is not handled again after an upgrade, nor after a job is renamed.
//!
//! The rule itself is [`crate::store::rules::mark`]; the stores keep the marks in
//! a table (`jobguard_mark`) or keyspace (`mark/`) of their own
//! ([`crate::store::Store::mark`]).

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};

/// The longest namespace, bytes.
pub const MAX_NAMESPACE: usize = 64;

/// The longest key, bytes: an order id, a message id or a hash fits, and every store
/// can index it (MySQL's InnoDB index limit is 3,072 bytes).
pub const MAX_KEY: usize = 512;

/// Between the job and the namespace in a job's own namespace as stored: `JOB@NAMESPACE`.
/// Neither a job name ([`crate::joblist::job::is_valid_job_name`]) nor a namespace
/// ([`check_namespace`]) holds it, so a stored name is read back unambiguously and a
/// shared namespace is never a job's own.
pub const JOB_SEPARATOR: char = '@';

/// The longest namespace as stored, bytes: a job's name, [`JOB_SEPARATOR`] and a
/// namespace.
pub const MAX_STORED_NAMESPACE: usize = crate::joblist::job::MAX_JOB_NAME_LEN + 1 + MAX_NAMESPACE;

/// The namespace as the store keeps it: `JOB@NAMESPACE` for the job's own, `NAMESPACE`
/// when `shared` (see the module documentation).
pub fn stored_namespace(job: &str, namespace: &str, shared: bool) -> String {
    if shared {
        namespace.to_string()
    } else {
        format!("{job}{JOB_SEPARATOR}{namespace}")
    }
}

/// A stored namespace read back: the namespace as written and the job it belongs to,
/// `None` for a shared one.
pub fn parse_stored_namespace(stored: &str) -> (&str, Option<&str>) {
    match stored.split_once(JOB_SEPARATOR) {
        Some((job, namespace)) => (namespace, Some(job)),
        None => (stored, None),
    }
}

/// Checks a namespace: 1 to [`MAX_NAMESPACE`] ASCII letters, digits, `-`, `_` or `.`,
/// starting with a letter or a digit.
///
/// # Errors
/// What is wrong, for the user.
pub fn check_namespace(namespace: &str) -> Result<(), String> {
    let ok_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    if namespace.is_empty() || namespace.len() > MAX_NAMESPACE {
        return Err(format!(
            "namespace {namespace:?}: must be 1 to {MAX_NAMESPACE} characters"
        ));
    }
    if !namespace.starts_with(|c: char| c.is_ascii_alphanumeric())
        || !namespace.chars().all(ok_char)
    {
        return Err(format!(
            "namespace {namespace:?}: only letters, digits, '-', '_' and '.' are allowed, starting with a letter or a digit"
        ));
    }
    Ok(())
}

/// Checks a key: 1 to [`MAX_KEY`] bytes of UTF-8 without control characters.
///
/// # Errors
/// What is wrong, for the user.
pub fn check_key(key: &str) -> Result<(), String> {
    if key.is_empty() || key.len() > MAX_KEY {
        return Err(format!("key {key:?}: must be 1 to {MAX_KEY} bytes"));
    }
    if key.chars().any(char::is_control) {
        return Err(format!("key {key:?}: control characters are not allowed"));
    }
    Ok(())
}

/// Every byte but ASCII letters, digits, `-` and `_` is percent-encoded: the result is a
/// valid ZooKeeper node name (no `/`, never `.` or `..`) and an unambiguous part of an
/// etcd or Redis key.
const ENCODE: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'_');

/// The key as one path component of a key-value store: percent-encoded
/// ([`ENCODE`]), so `a/b` is `a%2Fb`.
pub fn key_component(key: &str) -> String {
    utf8_percent_encode(key, ENCODE).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespaces() {
        assert!(check_namespace("shipping").is_ok());
        assert!(check_namespace("api.v2-orders_x").is_ok());
        for bad in ["", ".", "..", "-x", "a/b", "a b", "é", &"n".repeat(65)] {
            assert!(check_namespace(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_stored_namespace_is_read_back_whole() {
        let own = stored_namespace("ship.v2-a_b", "orders.x", false);
        assert_eq!(own, "ship.v2-a_b@orders.x");
        assert_eq!(
            parse_stored_namespace(&own),
            ("orders.x", Some("ship.v2-a_b"))
        );
        let shared = stored_namespace("ship", "orders", true);
        assert_eq!(parse_stored_namespace(&shared), ("orders", None));
        let longest = stored_namespace(&"j".repeat(64), &"n".repeat(MAX_NAMESPACE), false);
        assert_eq!(longest.len(), MAX_STORED_NAMESPACE);
    }

    #[test]
    fn keys() {
        assert!(check_key("ORDER-1042").is_ok());
        assert!(check_key("a/b c é").is_ok());
        for bad in ["", "a\nb", "a\u{0}", &"k".repeat(513)] {
            assert!(check_key(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn components_are_node_names() {
        assert_eq!(key_component("a/b"), "a%2Fb");
        assert_eq!(key_component("."), "%2E");
        assert_eq!(key_component(".."), "%2E%2E");
        assert_eq!(key_component("x%y"), "x%25y");
        assert_eq!(key_component("ORDER-1_2"), "ORDER-1_2");
        assert_eq!(key_component("é"), "%C3%A9");
    }
}

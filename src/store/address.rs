//! Store addresses: which kind of store a `store = "…"` value names, and how to show it.
//!
//! An address is `KIND://REST` (or `sqlite::memory:`). This module only parses and masks;
//! opening is [`crate::store::open`]. Relative SQLite paths are resolved by the job list
//! loader against the file that named them before an address reaches this module; a path
//! that is still relative here is relative to the current directory.
//!
//! Forms: `sqlite:///ABSOLUTE/PATH.db`, `sqlite://RELATIVE/PATH.db`, `sqlite::memory:` (a
//! private in-memory store, for tests), and the shared kinds' forms. Each shared kind lives
//! behind a cargo feature; a build without one recognises its addresses and answers "not
//! built in". Which schemes name which kind, which kinds are built and how each is opened
//! is [`crate::store::registry`]; the shared addresses are parsed further by their
//! backends.

use std::path::PathBuf;

use crate::store::StoreError;
use crate::store::registry;

/// A parsed store address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreAddress {
    /// The embedded SQLite store in a file. The path is used as given (no percent-decoding,
    /// no query string): everything after `sqlite://` is the path.
    SqliteFile(PathBuf),
    /// A private in-memory SQLite store (`sqlite::memory:`); gone when closed.
    SqliteMemory,
    /// An address of a shared store kind this build contains, as written.
    Shared {
        /// The kind, from [`registry::KINDS`].
        kind: &'static registry::StoreKind,
        /// The address as written.
        address: String,
    },
    /// A kind jobguard knows of but that this build does not contain (e.g. `postgres`).
    NotBuilt {
        /// The scheme as written, e.g. `postgres`.
        scheme: String,
    },
}

/// The address forms this build accepts, for error messages (from
/// [`registry::supported`]).
pub fn supported() -> String {
    registry::supported()
}

impl StoreAddress {
    /// Parses a store address.
    ///
    /// # Errors
    /// [`StoreError::Address`] (with the address masked by [`mask`]) for an address without
    /// a `KIND:` prefix, an unknown kind (the message lists the supported forms), or an empty
    /// SQLite path.
    pub fn parse(address: &str) -> Result<StoreAddress, StoreError> {
        let bad = |detail: String| StoreError::Address {
            address: mask(address),
            detail,
        };
        if address == "sqlite::memory:" {
            return Ok(StoreAddress::SqliteMemory);
        }
        let Some((scheme, rest)) = address.split_once(':') else {
            return Err(bad(format!("no store kind; supported: {}", supported())));
        };
        let Some(kind) = registry::by_scheme(scheme) else {
            return Err(bad(format!(
                "unknown store kind {:?}; supported: {}",
                scheme.to_ascii_lowercase(),
                supported()
            )));
        };
        if !kind.built {
            return Ok(StoreAddress::NotBuilt {
                scheme: scheme.to_ascii_lowercase(),
            });
        }
        let owned = address.to_string();
        match kind.name {
            "sqlite" => {
                let Some(path) = rest.strip_prefix("//") else {
                    return Err(bad(format!(
                        "sqlite addresses start with sqlite:// (e.g. sqlite:///var/lib/jobguard/jobguard.db); supported: {}",
                        supported()
                    )));
                };
                if path.is_empty() {
                    return Err(bad("empty sqlite path".to_string()));
                }
                if path.contains('\0') {
                    return Err(bad("sqlite path contains a NUL byte".to_string()));
                }
                Ok(StoreAddress::SqliteFile(PathBuf::from(path)))
            }
            _ => Ok(StoreAddress::Shared {
                kind,
                address: owned,
            }),
        }
    }
}

/// The address with any password replaced by `***`, whatever its form, for every
/// message that shows an address:
/// - a URL (`kind://…`): the password of the user-info part, which ends at the last `@`
///   (so a password holding `/`, `@`, `?`, `#` or `:` that is not percent-encoded is still
///   masked whole), and the values of query parameters named `password`, `pass`, `pwd` or
///   `secret`;
/// - a libpq keyword form (`host=… password=…`, libpq-connect(3), "Connection Strings"):
///   the values of those keys, quoted or not;
/// - anything else without `://` that holds an `@` (a malformed URL such as
///   `redis:/:SECRET@host`): everything before the last `@` becomes `…`.
///
/// Too much may be hidden when an `@` stands in a query value; a password is never shown.
pub fn mask(address: &str) -> String {
    let Some(scheme_end) = address.find("://") else {
        if let Some((_, host)) = address.rsplit_once('@') {
            return format!("…@{host}");
        }
        if address.contains('=') {
            return mask_keywords(address);
        }
        return address.to_string();
    };
    let (head, after) = address.split_at(scheme_end + 3);
    // An absolute SQLite path has no user-info; a `password=` parameter is masked all
    // the same. Anything else after `sqlite://` (a mistyped scheme with `USER:PASSWORD@`)
    // is masked as any other address.
    if head.eq_ignore_ascii_case("sqlite://") && after.starts_with('/') {
        return format!("{head}{}", mask_params(after));
    }
    let (authority, tail) = match after.rfind('@') {
        Some(at) => {
            let (userinfo, rest) = after.split_at(at);
            let authority = match userinfo.split_once(':') {
                Some((user, _secret)) => format!("{user}:***"),
                None => mask_params(userinfo),
            };
            (authority, rest)
        }
        None => (String::new(), after),
    };
    format!("{head}{authority}{}", mask_params(tail))
}

/// `text` with the value of every `?KEY=VALUE` or `&KEY=VALUE` whose key holds a secret
/// ([`is_password_key`]) replaced by `***`; a value ends at `&`, `#` or the end.
fn mask_params(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find(['?', '&']) {
        out.push_str(&rest[..=i]);
        rest = &rest[i + 1..];
        let key_end = rest.find(['=', '&', '#', '?']).unwrap_or(rest.len());
        if rest[key_end..].starts_with('=') && is_password_key(&rest[..key_end]) {
            out.push_str(&rest[..=key_end]);
            out.push_str("***");
            let value_end = rest[key_end..]
                .find(['&', '#'])
                .map_or(rest.len(), |j| key_end + j);
            rest = &rest[value_end..];
        }
    }
    out.push_str(rest);
    out
}

/// A libpq keyword/value string with the values of secret keys replaced by `***`: pairs
/// are `KEY = VALUE` separated by white space, a value is single-quoted (with `\'` and
/// `\\` escapes) or runs to the next white space (libpq-connect(3)).
fn mask_keywords(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(&c) = chars.peek() {
        if c.is_whitespace() {
            out.push(c);
            chars.next();
            continue;
        }
        let mut key = String::new();
        while let Some(&c) = chars.peek() {
            if c == '=' || c.is_whitespace() {
                break;
            }
            key.push(c);
            chars.next();
        }
        out.push_str(&key);
        while let Some(&c) = chars.peek().filter(|c| c.is_whitespace()) {
            out.push(c);
            chars.next();
        }
        if chars.peek() != Some(&'=') {
            continue;
        }
        out.push('=');
        chars.next();
        while let Some(&c) = chars.peek().filter(|c| c.is_whitespace()) {
            out.push(c);
            chars.next();
        }
        let mut value = String::new();
        if chars.peek() == Some(&'\'') {
            value.push('\'');
            chars.next();
            while let Some(c) = chars.next() {
                value.push(c);
                match c {
                    '\\' => value.extend(chars.next()),
                    '\'' => break,
                    _ => {}
                }
            }
        } else {
            while let Some(&c) = chars.peek().filter(|c| !c.is_whitespace()) {
                value.push(c);
                chars.next();
            }
        }
        out.push_str(if is_password_key(&key) { "***" } else { &value });
    }
    out
}

/// Whether a query parameter named `key` holds a secret (`password`, `pass`, `pwd` or
/// `secret`, in any case).
fn is_password_key(key: &str) -> bool {
    ["password", "pass", "pwd", "secret"].contains(&key.to_ascii_lowercase().as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absolute_sqlite_path() {
        assert_eq!(
            StoreAddress::parse("sqlite:///var/lib/jobguard/jobguard.db").unwrap(),
            StoreAddress::SqliteFile(PathBuf::from("/var/lib/jobguard/jobguard.db"))
        );
    }

    #[test]
    fn relative_sqlite_path_is_kept_relative() {
        assert_eq!(
            StoreAddress::parse("sqlite://state/jobs.db").unwrap(),
            StoreAddress::SqliteFile(PathBuf::from("state/jobs.db"))
        );
    }

    #[test]
    fn sqlite_path_with_odd_characters_is_taken_literally() {
        assert_eq!(
            StoreAddress::parse("sqlite:///srv/a b/%20?x.db").unwrap(),
            StoreAddress::SqliteFile(PathBuf::from("/srv/a b/%20?x.db"))
        );
    }

    #[test]
    fn memory() {
        assert_eq!(
            StoreAddress::parse("sqlite::memory:").unwrap(),
            StoreAddress::SqliteMemory
        );
    }

    #[test]
    fn empty_sqlite_path_is_refused() {
        let err = StoreAddress::parse("sqlite://").unwrap_err();
        assert!(err.to_string().contains("empty sqlite path"), "{err}");
    }

    #[test]
    fn sqlite_without_slashes_is_refused() {
        let err = StoreAddress::parse("sqlite:/var/x.db").unwrap_err();
        assert!(err.to_string().contains("sqlite://"), "{err}");
    }

    #[test]
    fn unknown_scheme_names_it_and_lists_supported() {
        let err = StoreAddress::parse("mongodb://u:hunter2@h/db").unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("\"mongodb\""), "{msg}");
        assert!(msg.contains("sqlite:///PATH"), "{msg}");
        assert!(!msg.contains("hunter2"), "{msg}");
    }

    #[test]
    fn no_scheme() {
        let err = StoreAddress::parse("/var/lib/jobguard/jobguard.db").unwrap_err();
        assert!(err.to_string().contains("no store kind"), "{err}");
    }

    #[test]
    fn remote_kinds_are_recognised() {
        for address in [
            "postgres://h/db",
            "PostgreSQL://h/db",
            "mysql://h/db",
            "mariadb://h/db",
            "redis://h:6379/0",
            "rediss://h:6379/0",
        ] {
            let parsed = StoreAddress::parse(address).unwrap();
            assert!(
                !matches!(
                    parsed,
                    StoreAddress::SqliteFile(_) | StoreAddress::SqliteMemory
                ),
                "{address}: {parsed:?}"
            );
        }
        #[cfg(feature = "store-postgres")]
        assert_eq!(
            StoreAddress::parse("postgres://h/db").unwrap(),
            StoreAddress::Shared {
                kind: registry::by_scheme("postgres").unwrap(),
                address: "postgres://h/db".into()
            }
        );
        #[cfg(feature = "store-redis")]
        assert_eq!(
            StoreAddress::parse("rediss://h/0#insecure").unwrap(),
            StoreAddress::Shared {
                kind: registry::by_scheme("redis").unwrap(),
                address: "rediss://h/0#insecure".into()
            }
        );
    }

    #[test]
    fn masks_userinfo_password() {
        assert_eq!(
            mask("postgres://jobguard:s3cr@t@db.example:5432/jobs"),
            "postgres://jobguard:***@db.example:5432/jobs"
        );
        assert_eq!(mask("redis://:pw@127.0.0.1/0"), "redis://:***@127.0.0.1/0");
        assert_eq!(mask("mysql://u:a/b@h/db"), "mysql://u:***@h/db");
    }

    #[test]
    fn masks_password_query_parameters() {
        assert_eq!(
            mask("mysql://h/db?user=a&password=x&ssl=1"),
            "mysql://h/db?user=a&password=***&ssl=1"
        );
    }

    #[test]
    fn masks_every_form_of_address() {
        for (address, shown) in [
            (
                "host=127.0.0.1 port=5432 user=u password=s3cr3t dbname=d",
                "host=127.0.0.1 port=5432 user=u password=*** dbname=d",
            ),
            (
                "host=h password = 'a b\\'s3cr3t' dbname=d",
                "host=h password = *** dbname=d",
            ),
            ("redis:/:s3cr3t@127.0.0.1:1/0", "…@127.0.0.1:1/0"),
            (
                "redis://:s3cr3t@?#:x@127.0.0.1:1/0",
                "redis://:***@127.0.0.1:1/0",
            ),
            ("mysql://u:s3cr3t:M@R#K@h/d", "mysql://u:***@h/d"),
            ("postgres://u:s3cr3t%40x@h/d", "postgres://u:***@h/d"),
            (
                "postgres://h/db?application_name=a@b&password=s3cr3t",
                "postgres://h/db?application_name=a@b&password=***",
            ),
            (
                "mysql://h/d?pass=s3cr3t#insecure",
                "mysql://h/d?pass=***#insecure",
            ),
        ] {
            assert_eq!(mask(address), shown, "{address}");
        }
    }

    #[test]
    fn leaves_addresses_without_secrets_alone() {
        for a in [
            "sqlite:///var/lib/jobguard/jobguard.db",
            "postgres://jobguard@db/jobs",
            "sqlite::memory:",
            "redis://127.0.0.1:6379",
        ] {
            assert_eq!(mask(a), a);
        }
    }
}

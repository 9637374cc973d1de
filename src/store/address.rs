//! Store addresses: which kind of store a `store = "…"` value names, and how to show it.
//!
//! An address is `KIND://REST` (or `sqlite::memory:`). This module only parses and masks;
//! opening is [`crate::store::open`]. Relative SQLite paths are resolved by the job list
//! loader against the file that named them before an address reaches this module; a path
//! that is still relative here is relative to the current directory.
//!
//! Forms: `sqlite:///ABSOLUTE/PATH.db`, `sqlite://RELATIVE/PATH.db`, `sqlite::memory:` (a
//! private in-memory store, for tests), `postgres://…`/`postgresql://…`,
//! `mysql://…`/`mariadb://…` and `redis://…`/`rediss://…` (TLS). Each remote kind lives behind a cargo
//! feature (`store-postgres`, `store-mysql`, `store-redis`, all on by default); a build
//! without one recognises its addresses and answers "not built in". Which schemes name
//! which kind, and which kinds are built, is [`crate::store::registry`]. The remote
//! addresses are parsed further by their backends.

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
    /// A PostgreSQL address (`postgres://` or `postgresql://`), as written.
    Postgres(String),
    /// A MySQL or MariaDB address (`mysql://` or `mariadb://`), as written.
    Mysql(String),
    /// A Redis address (`redis://`, or `rediss://` for TLS), as written.
    Redis(String),
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
            "postgres" => Ok(StoreAddress::Postgres(owned)),
            "mysql" => Ok(StoreAddress::Mysql(owned)),
            "redis" => Ok(StoreAddress::Redis(owned)),
            // A registry entry without a variant here: a build that lists a kind it
            // has no code for.
            other => Ok(StoreAddress::NotBuilt {
                scheme: other.to_string(),
            }),
        }
    }
}

/// The address with any password replaced by `***`: the password of the user-info part
/// (`kind://user:SECRET@host`, `redis://:SECRET@host`, also when SECRET holds `/`, `@`,
/// `?` or `#` that are not percent-encoded) and the values of query parameters
/// named `password`, `pass`, `pwd` or `secret`. Addresses without `://` are returned as
/// they are.
pub fn mask(address: &str) -> String {
    let Some(scheme_end) = address.find("://") else {
        return address.to_string();
    };
    let (head, after) = address.split_at(scheme_end + 3);
    if head.eq_ignore_ascii_case("sqlite://") {
        return address.to_string();
    }
    // The user-info part ends at the last '@' before any query or fragment, so that a
    // password containing '/' or '@' is still masked whole. Without one there, a
    // password written with '?' or '#' (not percent-encoded) ends at the first '@'
    // after them, when what comes before the '?' or '#' looks like user-info (a ':' and
    // no '/') and what follows it is not a password parameter.
    let query_start = after.find(['?', '#']).unwrap_or(after.len());
    let userinfo_end = after[..query_start].rfind('@').or_else(|| {
        let before = &after[..query_start];
        let param = after.get(query_start + 1..).unwrap_or("");
        let param = param.split_once('=').map_or("", |(k, _)| k);
        after
            .find('@')
            .filter(|_| before.contains(':') && !before.contains('/') && !is_password_key(param))
    });
    let (authority, tail) = match userinfo_end {
        Some(at) => {
            let (userinfo, rest) = after.split_at(at);
            let host_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
            let (host, tail) = rest.split_at(host_end);
            let authority = match userinfo.split_once(':') {
                Some((user, _secret)) => format!("{user}:***{host}"),
                None => format!("{userinfo}{host}"),
            };
            (authority, tail)
        }
        None => (String::new(), after),
    };
    let tail = match tail.split_once('?') {
        Some((path, query)) => {
            let query: Vec<String> = query
                .split('&')
                .map(|pair| match pair.split_once('=') {
                    Some((key, _)) if is_password_key(key) => {
                        format!("{key}=***")
                    }
                    _ => pair.to_string(),
                })
                .collect();
            format!("{path}?{}", query.join("&"))
        }
        None => tail.to_string(),
    };
    format!("{head}{authority}{tail}")
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
            StoreAddress::Postgres("postgres://h/db".into())
        );
        #[cfg(feature = "store-redis")]
        assert_eq!(
            StoreAddress::parse("rediss://h/0#insecure").unwrap(),
            StoreAddress::Redis("rediss://h/0#insecure".into())
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

//! The store kinds jobguard knows, in one list: which address schemes name each, the
//! cargo feature that builds it, whether this build contains it, and whether it is a
//! shared store on another host.
//!
//! Everything that asks "what kind of store is this address?" reads [`KINDS`]: the
//! address parser ([`crate::store::address`]), the job-list loader (which refuses a
//! kind this build cannot open, with file:line:column), `jobguard check`, a job's
//! network dependency ([`crate::joblist::job::Job::needs_network`]) and the generator (which
//! skips such a job). The list says what a kind is, not how to open it: that is
//! [`crate::store::open`]'s alone, so code that only reads the list (the generator,
//! `config`) links no store client. A new store is its backend file (with an `open_boxed`
//! function), its cargo feature, its `mod` line and its arm of `opener` in `store/mod.rs`,
//! and an entry here; its tests are one entry in the tests' table of servers (`servers!`
//! in `tests/common/remote.rs`), which gives it the conformance, contention, differential
//! and TLS suites, and, for the soak, one entry in `ENGINES` (`tests/soak.rs`).

/// One kind of store.
#[derive(Debug, Clone, Copy)]
pub struct StoreKind {
    /// Short name, as in messages (`postgres`).
    pub name: &'static str,
    /// The address schemes that name it, lower case (`postgres`, `postgresql`); an
    /// address's scheme is compared without regard to case.
    pub schemes: &'static [&'static str],
    /// The cargo feature that builds it.
    pub feature: &'static str,
    /// Whether this build contains it.
    pub built: bool,
    /// Whether it is a store on another host, shared by several hosts (its service then
    /// waits for the network); `false` for the embedded SQLite store.
    pub shared: bool,
    /// The server's usual TCP port, when it has one.
    pub default_port: Option<u16>,
    /// The address forms, for messages (`postgres://USER@HOST/DB`).
    pub forms: &'static [&'static str],
}

/// Kinds are one per name ([`KINDS`]).
impl PartialEq for StoreKind {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}

impl Eq for StoreKind {}

/// Every store kind jobguard has code for, in the order messages list them.
pub const KINDS: &[StoreKind] = &[
    StoreKind {
        name: "sqlite",
        schemes: &["sqlite"],
        feature: "store-sqlite",
        built: cfg!(feature = "store-sqlite"),
        shared: false,
        default_port: None,
        forms: &["sqlite:///PATH", "sqlite::memory:"],
    },
    StoreKind {
        name: "postgres",
        schemes: &["postgres", "postgresql"],
        feature: "store-postgres",
        built: cfg!(feature = "store-postgres"),
        shared: true,
        default_port: Some(5432),
        forms: &["postgres://USER@HOST/DB"],
    },
    StoreKind {
        name: "mysql",
        schemes: &["mysql", "mariadb"],
        feature: "store-mysql",
        built: cfg!(feature = "store-mysql"),
        shared: true,
        default_port: Some(3306),
        forms: &["mysql://USER@HOST/DB"],
    },
    StoreKind {
        name: "redis",
        schemes: &["redis", "rediss"],
        feature: "store-redis",
        built: cfg!(feature = "store-redis"),
        shared: true,
        default_port: Some(6379),
        forms: &["redis://HOST:PORT/DB", "rediss://HOST:PORT/DB"],
    },
    StoreKind {
        name: "etcd",
        schemes: &["etcd", "etcds"],
        feature: "store-etcd",
        built: cfg!(feature = "store-etcd"),
        shared: true,
        default_port: Some(2379),
        forms: &[
            "etcd://HOST:PORT[,HOST:PORT…]",
            "etcds://HOST:PORT[,HOST:PORT…]",
        ],
    },
    StoreKind {
        name: "zookeeper",
        schemes: &["zookeeper", "zookeepers"],
        feature: "store-zookeeper",
        built: cfg!(feature = "store-zookeeper"),
        shared: true,
        default_port: Some(2181),
        forms: &[
            "zookeeper://HOST:PORT[,HOST:PORT…][/PATH]",
            "zookeepers://HOST:PORT[,HOST:PORT…][/PATH][?ssl-ca=PATH]",
        ],
    },
];

/// The kind a scheme names (`PostgreSQL` finds `postgres`), built or not; `None` for a
/// scheme no kind uses.
pub fn by_scheme(scheme: &str) -> Option<&'static StoreKind> {
    KINDS
        .iter()
        .find(|k| k.schemes.iter().any(|s| s.eq_ignore_ascii_case(scheme)))
}

/// The kind of an address (`SCHEME:…`), built or not; `None` without a known scheme.
pub fn kind_of(address: &str) -> Option<&'static StoreKind> {
    by_scheme(address.split_once(':')?.0)
}

/// The address forms this build can open, comma-separated, for messages.
pub fn supported() -> String {
    KINDS
        .iter()
        .filter(|k| k.built)
        .flat_map(|k| k.forms.iter().copied())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Why this build cannot open `scheme`, or `None` when it can: an unknown kind, or a
/// kind whose cargo feature was left out. The message lists what this build opens.
pub fn unavailable(scheme: &str) -> Option<String> {
    match by_scheme(scheme) {
        Some(k) if k.built => None,
        Some(k) => Some(format!(
            "store kind {:?} is not built into this jobguard (cargo feature {}); it can open: {}",
            k.name,
            k.feature,
            supported()
        )),
        None => Some(format!(
            "unknown store kind {:?}; this jobguard can open: {}",
            scheme.to_ascii_lowercase(),
            supported()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schemes_are_unique_and_lower_case() {
        let mut seen = std::collections::HashSet::new();
        for k in KINDS {
            for s in k.schemes {
                assert_eq!(*s, s.to_ascii_lowercase());
                assert!(seen.insert(*s), "{s} twice");
            }
        }
    }

    #[test]
    fn unknown_kinds_are_refused_and_not_listed() {
        for scheme in ["consul", "mongodb", ""] {
            let why = unavailable(scheme).unwrap();
            assert!(why.contains("unknown store kind"), "{why}");
            assert!(!supported().contains(scheme) || scheme.is_empty(), "{why}");
        }
    }

    #[test]
    fn built_kinds_are_available() {
        for k in KINDS.iter().filter(|k| k.built) {
            for s in k.schemes {
                assert_eq!(unavailable(s), None);
                assert_eq!(unavailable(&s.to_ascii_uppercase()), None);
            }
        }
    }
}

//! TLS to the shared stores, against real servers that speak only TLS: a private Redis
//! (`rediss://`), a private MariaDB (`ssl-mode=`, `ssl-ca=`) and a private PostgreSQL
//! (`sslmode=`, `sslrootcert=`; `pg_hba.conf` has `hostssl` lines only), each started by
//! this test process with a certificate of a private certificate authority
//! ([`common::tls`]). Every case opens the store through `jobguard::store::open`, as the
//! shim does, and claims through the `Store` trait.
//!
//! Cases per engine: a claim over TLS checked against the private CA; refusals with a
//! "certificate" error when the CA is not given (the system's roots do not hold it) and
//! when the host name is wrong; encryption without checking (`#insecure`, `REQUIRED`)
//! works without the CA; a plain client against the TLS-only server fails at once;
//! a server that goes silent after accepting fails within the deadlines; address errors;
//! passwords masked in every message. PostgreSQL adds libpq's modes: `verify-ca` (chain
//! only) against `verify-full`, `require` checking the chain when `sslrootcert` is given,
//! `prefer` (the default) encrypting and falling back to a plain connection after a
//! failed handshake, `allow` encrypting after the server refused a plain connection.
//! Then the store conformance suite runs over TLS on every shared server
//! (`common::remote::SERVERS`, each entry's `tls`).
#![cfg(all(
    feature = "store-postgres",
    feature = "store-mysql",
    feature = "store-redis"
))]

mod common;

use std::time::{Duration, Instant};

use jobguard::guard::clock::ManualClock;
use jobguard::store::{Claim, Store, StoreError};

use common::conformance::{Env, S1, T0, claimed, request};
use common::remote::{self, namespace};
use common::tls::{self, Server};

/// Long enough for a refused connection, far shorter than a hang: the connect (3 s) and
/// call (4 s) deadlines together.
const QUICK: Duration = Duration::from_secs(7);

/// Opens `address` through `jobguard::store::open` and claims a fresh slot; the error, and
/// how long it took.
fn claim_at(address: &str) -> (Result<Claim, StoreError>, Duration) {
    let started = Instant::now();
    let result =
        jobguard::store::open(address).and_then(|mut s| s.claim(&request("j", S1, 1, 1, false)));
    (result, started.elapsed())
}

/// Expects a grant at `address`.
fn expect_claimed(address: &str) {
    let mut s = jobguard::store::open(address).expect("open");
    claimed(&mut *s, &request("j", S1, 1, 1, false));
}

/// Expects `address` to be refused quickly with `needle` in the message and no password.
fn expect_refused(address: &str, needle: &str) -> StoreError {
    let (result, took) = claim_at(address);
    let err = match result {
        Err(e) => e,
        Ok(c) => panic!("{address}: expected a refusal, got {c:?}"),
    };
    let msg = err.to_string();
    assert!(
        msg.to_lowercase().contains(needle),
        "{address}: wanted {needle:?} in: {msg}"
    );
    assert!(!msg.contains("hunter2"), "password shown: {msg}");
    assert!(took < QUICK, "{address}: took {took:?}");
    err
}

fn expect_address_error(address: &str, needle: &str) {
    match jobguard::store::open(address) {
        Err(e @ StoreError::Address { .. }) => {
            let msg = e.to_string();
            assert!(
                msg.contains(needle),
                "{address}: wanted {needle:?} in: {msg}"
            );
            assert!(!msg.contains("hunter2"), "password shown: {msg}");
        }
        Err(e) => panic!("{address}: expected an address error, got {e}"),
        Ok(s) => panic!("{address}: opened {}", s.describe()),
    }
}

// ---------------------------------------------------------------------------------------
// Redis

fn redis_address(server: &Server, host: &str, ns: &str, tail: &str) -> String {
    format!("rediss://{host}:{}/0?prefix={ns}:{tail}", server.port)
}

#[test]
fn redis_claim_over_tls_checked_against_the_private_ca() {
    let Some(server) = tls::redis("redis_tls::verified") else {
        return;
    };
    eprintln!("TLS redis-server ready in {:?}", server.startup);
    let ns = namespace();
    let ca = format!("&ssl-ca={}", server.ca().display());
    expect_claimed(&redis_address(server, "127.0.0.1", &ns, &ca));
    // The name in the certificate works as well (localhost may be ::1 first).
    let ns2 = namespace();
    expect_claimed(&redis_address(server, "localhost", &ns2, &ca));
    // The record is on the server.
    let keys = server.redis_cli(&["--scan", "--pattern", &format!("{ns}:run:*")]);
    assert_eq!(keys.lines().count(), 1, "{keys}");
}

#[test]
fn redis_certificate_of_an_unknown_ca_is_refused() {
    let Some(server) = tls::redis("redis_tls::system_roots") else {
        return;
    };
    let address = format!("rediss://:hunter2@127.0.0.1:{}/0", server.port);
    let err = expect_refused(&address, "certificate");
    assert!(matches!(err, StoreError::Unavailable { .. }), "{err}");
    assert!(err.to_string().contains("UnknownIssuer"), "{err}");
    assert!(err.to_string().contains(":***@127.0.0.1"), "{err}");
}

#[test]
fn redis_wrong_host_name_is_refused() {
    let Some(server) = tls::redis("redis_tls::wrong_name") else {
        return;
    };
    let ns = namespace();
    let ca = format!("&ssl-ca={}", server.ca().display());
    let err = expect_refused(&redis_address(server, "127.0.0.2", &ns, &ca), "certificate");
    assert!(matches!(err, StoreError::Unavailable { .. }), "{err}");
    assert!(
        err.to_string().contains("not valid for name"),
        "a name error: {err}"
    );
}

#[test]
fn redis_insecure_encrypts_without_the_ca() {
    let Some(server) = tls::redis("redis_tls::insecure") else {
        return;
    };
    let ns = namespace();
    // Also with the host name the certificate does not carry.
    expect_claimed(&redis_address(server, "127.0.0.2", &ns, "#insecure"));
    let keys = server.redis_cli(&["--scan", "--pattern", &format!("{ns}:run:*")]);
    assert_eq!(keys.lines().count(), 1, "{keys}");
}

#[test]
fn redis_plain_client_against_tls_only_server_fails_at_once() {
    let Some(server) = tls::redis("redis_tls::plain_client") else {
        return;
    };
    let address = format!("redis://:hunter2@127.0.0.1:{}/0", server.port);
    let (result, took) = claim_at(&address);
    let err = result.expect_err("a plain client was served by a TLS-only server");
    assert!(matches!(err, StoreError::Unavailable { .. }), "{err}");
    assert!(!err.to_string().contains("hunter2"), "{err}");
    assert!(took < QUICK, "took {took:?}: {err}");
}

#[test]
fn redis_tls_address_errors() {
    let dir = tempfile::tempdir().unwrap();
    let not_pem = dir.path().join("not.pem");
    std::fs::write(&not_pem, "hello\n").unwrap();
    expect_address_error(
        "rediss://:hunter2@127.0.0.1/0?ssl-ca=/nonexistent/ca.pem",
        "ssl-ca /nonexistent/ca.pem",
    );
    expect_address_error(
        &format!("rediss://:hunter2@127.0.0.1/0?ssl-ca={}", not_pem.display()),
        "no PEM certificate",
    );
    expect_address_error(
        &format!("redis://:hunter2@127.0.0.1/0?ssl-ca={}", not_pem.display()),
        "needs a rediss://",
    );
    expect_address_error(
        &format!(
            "rediss://:hunter2@127.0.0.1/0?ssl-ca={}#insecure",
            not_pem.display()
        ),
        "#insecure",
    );
    // The prefix still applies with a fragment after it.
    expect_address_error("rediss://127.0.0.1/0?prefix=a b#insecure", "prefix");
}

// ---------------------------------------------------------------------------------------
// MariaDB

/// A fresh database on the TLS MariaDB, and its address with `params` on `host`.
fn mariadb_db(server: &Server) -> String {
    let ns = namespace();
    server.sql(&format!("CREATE DATABASE {ns}"));
    ns
}

fn mariadb_address(server: &Server, host: &str, db: &str, params: &str) -> String {
    format!("mysql://root@{host}:{}/{db}?{params}", server.port)
}

#[test]
fn mariadb_claim_over_tls_checked_against_the_private_ca() {
    let Some(server) = tls::mariadb("mariadb_tls::verified") else {
        return;
    };
    eprintln!("TLS mariadbd ready in {:?}", server.startup);
    let db = mariadb_db(server);
    let ca = server.ca().display().to_string();
    for params in [
        format!("ssl-mode=VERIFY_IDENTITY&ssl-ca={ca}"),
        format!("ssl_mode=verify_ca&ssl_ca={ca}"),
        // A CA alone means VERIFY_CA, as with the mysql client.
        format!("ssl-ca={ca}"),
    ] {
        let mut s = jobguard::store::open(&mariadb_address(server, "127.0.0.1", &db, &params))
            .expect("open");
        s.init().unwrap_or_else(|e| panic!("{params}: {e}"));
    }
    expect_claimed(&format!(
        "mariadb://root@localhost:{}/{db}?ssl-mode=VERIFY_IDENTITY&ssl-ca={ca}",
        server.port
    ));
}

#[test]
fn mariadb_certificate_of_an_unknown_ca_is_refused() {
    let Some(server) = tls::mariadb("mariadb_tls::system_roots") else {
        return;
    };
    for mode in ["VERIFY_CA", "VERIFY_IDENTITY"] {
        let address = format!(
            "mysql://root:hunter2@127.0.0.1:{}/mysql?ssl-mode={mode}",
            server.port
        );
        let err = expect_refused(&address, "certificate");
        assert!(matches!(err, StoreError::Unavailable { .. }), "{err}");
        assert!(err.to_string().contains("UnknownIssuer"), "{err}");
        assert!(err.to_string().contains("root:***@127.0.0.1"), "{err}");
    }
}

#[test]
fn mariadb_wrong_host_name_is_refused_by_verify_identity_only() {
    let Some(server) = tls::mariadb("mariadb_tls::wrong_name") else {
        return;
    };
    let db = mariadb_db(server);
    let ca = server.ca().display().to_string();
    let err = expect_refused(
        &mariadb_address(
            server,
            "127.0.0.2",
            &db,
            &format!("ssl-mode=VERIFY_IDENTITY&ssl-ca={ca}"),
        ),
        "certificate",
    );
    assert!(
        err.to_string().contains("not valid for name"),
        "a name error: {err}"
    );
    expect_claimed(&mariadb_address(
        server,
        "127.0.0.2",
        &db,
        &format!("ssl-mode=VERIFY_CA&ssl-ca={ca}"),
    ));
}

#[test]
fn mariadb_required_and_preferred_encrypt_without_the_ca() {
    let Some(server) = tls::mariadb("mariadb_tls::required") else {
        return;
    };
    // The server lets in TLS connections only, so a claim proves the connection is TLS.
    let db = mariadb_db(server);
    expect_claimed(&mariadb_address(
        server,
        "127.0.0.2",
        &db,
        "ssl-mode=REQUIRED",
    ));
    let db = mariadb_db(server);
    expect_claimed(&mariadb_address(
        server,
        "127.0.0.1",
        &db,
        "ssl-mode=preferred",
    ));
}

#[test]
fn mariadb_plain_client_against_tls_only_server_fails_at_once() {
    let Some(server) = tls::mariadb("mariadb_tls::plain_client") else {
        return;
    };
    // The same user and password over TLS are let in: only the transport differs.
    let db = mariadb_db(server);
    let user = format!("{}:{}", tls::MARIADB_USER, tls::MARIADB_PASSWORD);
    expect_claimed(&format!(
        "mysql://{user}@127.0.0.1:{}/{db}?ssl-mode=REQUIRED",
        server.port
    ));
    for params in ["", "?ssl-mode=DISABLED"] {
        let address = format!("mysql://{user}@127.0.0.1:{}/{db}{params}", server.port);
        let (result, took) = claim_at(&address);
        let err = result.expect_err("a plain client was served by a TLS-only server");
        // MariaDB answers a plain connection under require_secure_transport as a
        // refused login.
        assert!(err.to_string().contains("Access denied"), "{err}");
        assert!(!err.to_string().contains("hunter2"), "{err}");
        assert!(took < QUICK, "took {took:?}: {err}");
    }
}

/// The machine's MariaDB (127.0.0.1:3306) has no TLS: `PREFERRED` falls back to an
/// unencrypted connection, `REQUIRED` refuses to.
#[test]
fn mariadb_without_tls_preferred_falls_back_and_required_refuses() {
    let Some(ns) =
        common::remote::Namespace::new(remote::server("mysql"), "mariadb_tls::no_tls_server")
    else {
        return;
    };
    let out = std::process::Command::new("mariadb")
        .args(["-uroot", "-h127.0.0.1", "-N", "-e", "SELECT @@have_ssl"])
        .output()
        .expect("mariadb");
    let have_ssl = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if !common::go_on(
        "mariadb_tls::no_tls_server",
        (have_ssl == "YES").then(|| "the machine's MariaDB speaks TLS".to_string()),
    ) {
        return;
    }
    expect_claimed(&format!("{}?ssl-mode=PREFERRED", ns.address()));
    let err = expect_refused(
        &format!("{}?ssl-mode=REQUIRED", ns.address()),
        "secure connection",
    );
    assert!(matches!(err, StoreError::Unavailable { .. }), "{err}");
}

#[test]
fn mariadb_tls_address_errors() {
    let base = "mysql://u:hunter2@127.0.0.1/db";
    expect_address_error(&format!("{base}?ssl-mode=VERIFY_FULL"), "unknown ssl-mode");
    expect_address_error(
        &format!("{base}?ssl-mode=REQUIRED&ssl-ca=/etc/hostname"),
        "only used with ssl-mode=VERIFY_CA or VERIFY_IDENTITY, not REQUIRED",
    );
    expect_address_error(
        &format!("{base}?ssl-mode=VERIFY_CA&ssl-ca=/nonexistent/ca.pem"),
        "ssl-ca /nonexistent/ca.pem",
    );
    expect_address_error(
        &format!("{base}?root_cert_path=/etc/hostname"),
        "root_cert_path is not supported",
    );
    expect_address_error(
        &format!("{base}?ssl-mode=REQUIRED&danger_accept_invalid_certs=true"),
        "danger_accept_invalid_certs is not supported",
    );
}

/// A server that accepts the connection and then says nothing (a partition after the
/// TCP handshake) makes a TLS store unavailable within the deadlines, not hang it.
#[test]
fn silent_server_is_unavailable_within_the_deadlines() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    // Accepted connections are kept open, unanswered, until the test ends.
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for c in listener.incoming() {
            held.push(c);
        }
    });
    let addresses = [
        format!("rediss://:hunter2@127.0.0.1:{port}/0#insecure"),
        format!("rediss://:hunter2@127.0.0.1:{port}/0"),
        format!("mysql://u:hunter2@127.0.0.1:{port}/db?ssl-mode=REQUIRED"),
        format!("postgres://u:hunter2@127.0.0.1:{port}/db?sslmode=require"),
        // Two attempts (TLS, then plain) share one connect deadline.
        format!("postgres://u:hunter2@127.0.0.1:{port}/db?sslmode=prefer"),
        format!("postgres://u:hunter2@127.0.0.1:{port}/db?sslmode=allow"),
    ];
    // In parallel: each waits for its deadline.
    std::thread::scope(|scope| {
        for address in &addresses {
            scope.spawn(move || {
                let (result, took) = claim_at(address);
                let err = result.expect_err("a silent server answered");
                assert!(matches!(err, StoreError::Unavailable { .. }), "{err}");
                assert!(!err.to_string().contains("hunter2"), "{err}");
                assert!(took < QUICK, "{address}: took {took:?}: {err}");
            });
        }
    });
}

// ---------------------------------------------------------------------------------------
// PostgreSQL

/// The address of a fresh schema on the TLS PostgreSQL server at `host`, with `params`
/// (and a password the server does not ask for: trust authentication, so that messages
/// can be checked for it).
fn postgres_address(server: &Server, host: &str, params: &str) -> String {
    format!(
        "postgres://{u}:hunter2@{host}:{}/{u}?schema={}&{params}",
        server.port,
        namespace(),
        u = tls::POSTGRES_USER,
    )
}

/// The schema named by `address`'s `schema=` parameter.
fn schema_of(address: &str) -> &str {
    let tail = address
        .split("schema=")
        .nth(1)
        .expect("a schema= parameter");
    tail.split('&').next().unwrap_or(tail)
}

/// Another certificate authority named `CN=common_name`, in a temporary directory: the
/// file's path.
fn other_ca(common_name: &str) -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    tls::make_ca(dir.path(), common_name).expect("another CA");
    let ca = dir.path().join("ca.pem").display().to_string();
    (dir, ca)
}

/// Claims at `address` with `application_name=NAME` and asks the server, while the
/// connection is open, whether it is TLS (`pg_stat_ssl`).
fn postgres_claim_sees_tls(server: &Server, address: &str) -> bool {
    let app = format!("jg{}", namespace());
    let mut s = jobguard::store::open(&format!("{address}&application_name={app}")).expect("open");
    claimed(&mut *s, &request("j", S1, 1, 1, false));
    let answer = server.psql(&format!(
        "SELECT s.ssl FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) \
         WHERE a.application_name = '{app}'"
    ));
    assert!(
        !answer.trim().is_empty(),
        "the store's connection is not open"
    );
    answer.trim() == "t"
}

#[test]
fn postgres_verify_full_with_sslrootcert() {
    let Some(server) = tls::postgres("postgres_tls::verified") else {
        return;
    };
    eprintln!("TLS postgres ready in {:?}", server.startup);
    let ca = format!("sslrootcert={}", server.ca().display());
    for host in ["127.0.0.1", "localhost"] {
        let address = postgres_address(server, host, &format!("sslmode=verify-full&{ca}"));
        assert!(postgres_claim_sees_tls(server, &address), "{address}");
    }
    // The record is on the server.
    let address = postgres_address(server, "127.0.0.1", &format!("sslmode=verify-full&{ca}"));
    expect_claimed(&address);
    let schema = schema_of(&address);
    assert_eq!(
        server
            .psql(&format!("SELECT count(*) FROM {schema}.jobguard_run"))
            .trim(),
        "1"
    );
}

#[test]
fn postgres_wrong_host_name_fails_verify_full_but_not_verify_ca() {
    let Some(server) = tls::postgres("postgres_tls::wrong_name") else {
        return;
    };
    let ca = format!("sslrootcert={}", server.ca().display());
    let err = expect_refused(
        &postgres_address(server, "127.0.0.2", &format!("sslmode=verify-full&{ca}")),
        "certificate",
    );
    assert!(matches!(err, StoreError::Unavailable { .. }), "{err}");
    assert!(
        err.to_string().contains("not valid for name"),
        "a name error: {err}"
    );
    // verify-ca checks the chain only; `require` with a root certificate is verify-ca.
    for mode in ["verify-ca", "require"] {
        let address = postgres_address(server, "127.0.0.2", &format!("sslmode={mode}&{ca}"));
        assert!(postgres_claim_sees_tls(server, &address), "{address}");
    }
}

#[test]
fn postgres_certificate_of_an_unknown_ca_is_refused() {
    let Some(server) = tls::postgres("postgres_tls::unknown_ca") else {
        return;
    };
    let (_dir, wrong) = other_ca("another CA");
    // A CA with the server's issuer name but another key: found by name, its signature
    // does not match.
    let (_dir2, impostor) = other_ca("jobguard test CA");
    let mut cases = vec![
        // The system's roots: without sslrootcert, and sslrootcert=system (verify-full).
        ("sslmode=verify-full".to_string(), "UnknownIssuer"),
        ("sslrootcert=system".to_string(), "UnknownIssuer"),
    ];
    // Another CA, in every mode that checks the chain with it.
    for mode in ["verify-full", "verify-ca", "require"] {
        cases.push((
            format!("sslmode={mode}&sslrootcert={wrong}"),
            "UnknownIssuer",
        ));
        cases.push((
            format!("sslmode={mode}&sslrootcert={impostor}"),
            "BadSignature",
        ));
    }
    for (params, reason) in cases {
        let address = postgres_address(server, "127.0.0.1", &params);
        let err = expect_refused(&address, "certificate");
        assert!(
            matches!(err, StoreError::Unavailable { .. }),
            "{params}: {err}"
        );
        assert!(err.to_string().contains(reason), "{params}: {err}");
        assert!(
            err.to_string().contains(":***@127.0.0.1"),
            "{params}: {err}"
        );
    }
}

#[test]
fn postgres_require_and_prefer_encrypt_without_the_ca() {
    let Some(server) = tls::postgres("postgres_tls::require") else {
        return;
    };
    // Not checked: the host name the certificate does not carry is fine too.
    for host in ["127.0.0.1", "127.0.0.2"] {
        for params in ["sslmode=require", "sslmode=prefer", "application_name=x"] {
            // The last: no sslmode, so libpq's default `prefer`.
            let address = postgres_address(server, host, params);
            assert!(postgres_claim_sees_tls(server, &address), "{address}");
        }
    }
}

#[test]
fn postgres_allow_encrypts_after_the_plain_connection_is_refused() {
    let Some(server) = tls::postgres("postgres_tls::allow") else {
        return;
    };
    let address = postgres_address(server, "127.0.0.2", "sslmode=allow");
    assert!(postgres_claim_sees_tls(server, &address), "{address}");
}

#[test]
fn postgres_plain_client_is_refused_at_once() {
    let Some(server) = tls::postgres("postgres_tls::plain_client") else {
        return;
    };
    let err = expect_refused(
        &postgres_address(server, "127.0.0.1", "sslmode=disable"),
        "no encryption",
    );
    assert!(err.to_string().contains("pg_hba.conf"), "{err}");
}

#[test]
fn postgres_prefer_falls_back_to_plain_after_a_failed_check() {
    let Some(server) = tls::postgres("postgres_tls::prefer_fallback") else {
        return;
    };
    // As libpq: `prefer` with a root certificate checks the chain; when the check fails it
    // connects again without TLS, which this server refuses. Both answers are reported.
    let (_dir, wrong) = other_ca("another CA");
    let err = expect_refused(
        &postgres_address(
            server,
            "127.0.0.1",
            &format!("sslmode=prefer&sslrootcert={wrong}"),
        ),
        "no encryption",
    );
    let msg = err.to_string();
    assert!(
        msg.contains("with TLS: ") && msg.contains("UnknownIssuer"),
        "{msg}"
    );
    assert!(msg.contains("; then no pg_hba.conf entry"), "{msg}");
}

/// A statement given up on (no answer within 4 s: it waits for a table lock) is cancelled
/// over TLS too: this server takes a `CancelRequest` only on a TLS connection (`hostssl`
/// lines only), so a cancel sent in the clear would be dropped and the statement would run
/// on with its backend. The cancel is sent at once, not at the store's next call.
#[test]
fn postgres_a_statement_given_up_on_is_cancelled_over_tls() {
    let Some(server) = tls::postgres("postgres_tls::cancel") else {
        return;
    };
    let ca = format!("sslrootcert={}", server.ca().display());
    let address = postgres_address(server, "localhost", &format!("sslmode=verify-full&{ca}"));
    let schema = schema_of(&address).to_string();
    let app = format!("jg{}", namespace());
    let mut s = jobguard::store::open(&format!("{address}&application_name={app}")).expect("open");
    claimed(&mut *s, &request("j", S1, 1, 1, false));
    let holder = {
        let (dir, port, schema) = (server.dir.clone(), server.port, schema.clone());
        std::thread::spawn(move || {
            let _ = std::process::Command::new("psql")
                .arg(format!(
                    "host=127.0.0.1 port={port} user={} dbname={} sslmode=verify-full \
                     sslrootcert={}",
                    tls::POSTGRES_USER,
                    tls::POSTGRES_USER,
                    dir.join("ca.pem").display()
                ))
                .args(["-X", "-qc"])
                .arg(format!(
                    "BEGIN; LOCK TABLE {schema}.jobguard_run IN ACCESS EXCLUSIVE MODE; \
                     SELECT pg_sleep(60), '{schema}'; COMMIT"
                ))
                .output();
        })
    };
    let holding =
        format!("SELECT pid FROM pg_stat_activity WHERE query LIKE 'BEGIN; LOCK TABLE {schema}.%'");
    let holder_pid = common::wait_for(
        "the ledger table to be locked",
        Duration::from_secs(10),
        Duration::from_millis(50),
        || Ok(Some(server.psql(&holding).trim().to_string()).filter(|p| !p.is_empty())),
    )
    .expect("locked");
    let read = s.runs(&jobguard::store::RunQuery {
        job: Some("j".into()),
        ..Default::default()
    });
    // The store is neither called again nor dropped meanwhile (as a shim's renewal
    // thread between two renewals): the cancel must not wait for either.
    let waiting = format!(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = '{app}' AND state = 'active'"
    );
    let left = common::wait_for(
        "the given-up statement to end",
        Duration::from_secs(2),
        Duration::from_millis(50),
        || Ok((server.psql(&waiting).trim() == "0").then_some(())),
    );
    drop(s);
    server.psql(&format!("SELECT pg_terminate_backend({holder_pid})"));
    let _ = holder.join();
    let err = read.expect_err("the read waited for the lock").to_string();
    assert!(err.contains("no answer within 4 s"), "{err}");
    left.unwrap_or_else(|e| panic!("the given-up statement still runs 2 s later: {e}"));
}

#[test]
fn postgres_tls_address_errors() {
    let dir = tempfile::tempdir().unwrap();
    let not_pem = dir.path().join("not.pem");
    std::fs::write(&not_pem, "hello\n").unwrap();
    let not_pem = not_pem.display();
    let base = "postgres://u:hunter2@127.0.0.1/db";
    for (params, needle) in [
        ("sslmode=verify_full".to_string(), "unknown sslmode"),
        (
            "sslmode=verify-ca&sslrootcert=system".to_string(),
            "sslrootcert=system needs sslmode=verify-full, not verify-ca",
        ),
        (
            "sslmode=require&sslrootcert=system".to_string(),
            "sslrootcert=system needs sslmode=verify-full, not require",
        ),
        (
            "sslmode=verify-ca".to_string(),
            "sslmode=verify-ca needs sslrootcert=PATH",
        ),
        (
            "sslmode=require&sslrootcert=/nonexistent/ca.pem".to_string(),
            "sslrootcert /nonexistent/ca.pem",
        ),
        (
            format!("sslmode=verify-full&sslrootcert={not_pem}"),
            "no PEM certificate",
        ),
        (
            "sslmode=disable&sslrootcert=/etc/hostname".to_string(),
            "not used with sslmode=disable",
        ),
        (
            "sslmode=require&sslcert=/etc/hostname".to_string(),
            "sslcert is not supported",
        ),
        (
            "sslcrl=/etc/hostname".to_string(),
            "sslcrl is not supported",
        ),
    ] {
        expect_address_error(&format!("{base}?{params}"), needle);
    }
}

// ---------------------------------------------------------------------------------------
// ZooKeeper

#[cfg(feature = "store-zookeeper")]
#[test]
fn zookeeper_claim_over_tls_checked_against_the_private_ca() {
    let Some(server) = tls::zookeeper("zookeeper_tls::verified") else {
        return;
    };
    eprintln!("TLS ZooKeeper ready in {:?}", server.startup);
    let ca = server.ca().display().to_string();
    expect_claimed(&tls::zookeeper_address(
        server,
        "127.0.0.1",
        &namespace(),
        &ca,
    ));
    // The name in the certificate works as well.
    expect_claimed(&tls::zookeeper_address(
        server,
        "localhost",
        &namespace(),
        &ca,
    ));
}

#[cfg(feature = "store-zookeeper")]
#[test]
fn zookeeper_certificate_of_an_unknown_ca_is_refused() {
    let Some(server) = tls::zookeeper("zookeeper_tls::system_roots") else {
        return;
    };
    // The system's roots do not hold the private CA.
    let address = format!("zookeepers://u:hunter2@127.0.0.1:{}/x", server.port);
    let err = expect_refused(&address, "certificate");
    assert!(matches!(err, StoreError::Unavailable { .. }), "{err}");
    assert!(err.to_string().contains("UnknownIssuer"), "{err}");
    assert!(err.to_string().contains("u:***@127.0.0.1"), "{err}");
}

#[cfg(feature = "store-zookeeper")]
#[test]
fn zookeeper_wrong_host_name_is_refused() {
    let Some(server) = tls::zookeeper("zookeeper_tls::wrong_name") else {
        return;
    };
    let ca = server.ca().display().to_string();
    let err = expect_refused(
        &tls::zookeeper_address(server, "127.0.0.2", &namespace(), &ca),
        "certificate",
    );
    assert!(matches!(err, StoreError::Unavailable { .. }), "{err}");
    assert!(
        err.to_string().contains("not valid for name"),
        "a name error: {err}"
    );
}

#[cfg(feature = "store-zookeeper")]
#[test]
fn zookeeper_plain_client_against_tls_only_server_fails_at_once() {
    let Some(server) = tls::zookeeper("zookeeper_tls::plain_client") else {
        return;
    };
    let address = format!("zookeeper://u:hunter2@127.0.0.1:{}/x", server.port);
    let (result, took) = claim_at(&address);
    let err = result.expect_err("a plain client was served by a TLS-only server");
    assert!(matches!(err, StoreError::Unavailable { .. }), "{err}");
    assert!(!err.to_string().contains("hunter2"), "{err}");
    assert!(took < QUICK, "took {took:?}: {err}");
}

#[cfg(feature = "store-zookeeper")]
#[test]
fn zookeeper_tls_address_errors() {
    let dir = tempfile::tempdir().unwrap();
    let not_pem = dir.path().join("not.pem");
    std::fs::write(&not_pem, "hello\n").unwrap();
    expect_address_error(
        "zookeepers://u:hunter2@127.0.0.1/x?ssl-ca=/nonexistent/ca.pem",
        "ssl-ca /nonexistent/ca.pem",
    );
    expect_address_error(
        &format!(
            "zookeepers://u:hunter2@127.0.0.1/x?ssl-ca={}",
            not_pem.display()
        ),
        "no PEM certificate",
    );
    expect_address_error(
        &format!(
            "zookeeper://u:hunter2@127.0.0.1/x?ssl-ca={}",
            not_pem.display()
        ),
        "needs a zookeepers://",
    );
}

// ---------------------------------------------------------------------------------------
// The conformance suite over TLS

/// A conformance env on a private TLS server: a fresh namespace, reached with the
/// certificate checked against the private CA, and a manual clock.
struct TlsEnv {
    store: &'static remote::Server,
    server: &'static Server,
    ns: String,
    clock: ManualClock,
}

fn tls_env(store: &'static remote::Server, test: &str) -> Option<Box<dyn Env>> {
    let server = (store.tls.start)(test)?;
    let ns = namespace();
    (store.tls.create)(server, &ns);
    Some(Box::new(TlsEnv {
        store,
        server,
        ns,
        clock: ManualClock::new(T0),
    }))
}

impl Env for TlsEnv {
    fn connect(&self) -> Result<Box<dyn Store>, StoreError> {
        let ca = self.server.ca().display().to_string();
        let address = (self.store.tls.address)(self.server, &self.ns, &ca);
        remote::open(self.store, &address, Some(&self.clock))
    }
    fn advance(&self, usec: i64) {
        self.clock.advance(usec);
    }
    fn set_schema_version(&self, version: i64) {
        (self.store.tls.set_version)(self.server, &self.ns, version);
    }
    fn current_schema_version(&self) -> i64 {
        self.store.schema_version
    }
    fn store_clock_is_host_clock(&self) -> bool {
        self.store.clock == remote::Judge::Host
    }
}

/// The conformance suite over TLS on each shared server's private TLS server, but for
/// the cases that only page through long histories (`conformance_suite!(transport …)`):
/// `conformance_over_tls::NAME::CASE`.
mod conformance_over_tls {
    macro_rules! over_tls {
        ($name:ident $judge:ident) => {
            mod $name {
                fn fresh(case: &str) -> Option<Box<dyn crate::common::conformance::Env>> {
                    super::super::tls_env(
                        crate::common::remote::server(stringify!($name)),
                        &format!("{}_tls::{case}", stringify!($name)),
                    )
                }
                crate::common::conformance::conformance_suite!(transport fresh);
            }
        };
    }
    crate::common::remote::each_server!(over_tls);
}

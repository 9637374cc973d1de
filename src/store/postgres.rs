//! The PostgreSQL store: leases and the run ledger shared by every host that names it.
//!
//! Address: `postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE[?PARAMS]` (also
//! `postgresql://`), with the parameters of libpq's connection URIs that the
//! `tokio-postgres` client understands (`sslmode=disable`, `application_name=`, …,
//! <https://www.postgresql.org/docs/current/libpq-connect.html#LIBPQ-CONNSTRING-URIS>) and
//! one of jobguard's own: `schema=NAME` keeps jobguard's tables in that schema (created if
//! missing; the connection's `search_path` is set to it in the start-up packet, so it
//! costs no round trip). Without a user name, the process's user name is used, as libpq
//! does.
//!
//! TLS follows libpq's `sslmode` and `sslrootcert` (libpq-connect(3); "SSL Support",
//! <https://www.postgresql.org/docs/current/libpq-ssl.html>):
//! - `disable`: no TLS.
//! - `allow`: without TLS first; when the server refuses that connection (a
//!   `pg_hba.conf` with `hostssl` lines only), again with TLS.
//! - `prefer` (the default): TLS when the server offers it, else none; when the TLS
//!   handshake fails (e.g. a certificate check against `sslrootcert` fails), again without
//!   TLS. Against a server with TLS on, the default connection is therefore encrypted
//!   but not checked, as with libpq.
//! - `require`: TLS or no connection; the certificate is not checked (it protects against
//!   listening, not against a forged server), unless `sslrootcert` is given: then, as in
//!   libpq, it is checked as with `verify-ca`.
//! - `verify-ca`: TLS, and the certificate must chain to a root of `sslrootcert`; the host
//!   name is not compared.
//! - `verify-full`: as `verify-ca`, and the certificate must name the host of the address
//!   (a DNS name or an IP address in its subjectAltName).
//!
//! `sslrootcert=PATH` names a file of PEM certificates, by an absolute path (a relative one
//! is refused: the shim runs in `/` under systemd and elsewhere in a shell), read when the
//! store is opened: a missing, unreadable or empty file is an address error in every mode. `sslrootcert=system`
//! trusts the system's store instead (`/etc/ssl/certs`, or `SSL_CERT_FILE`/`SSL_CERT_DIR`);
//! as in libpq it implies `verify-full`, and any weaker `sslmode` is refused (a public
//! certificate authority signs certificates for anyone's host names).
//!
//! Where jobguard differs from libpq, on purpose:
//! - It never reads `~/.postgresql/root.crt` (nor `root.crl`, `postgresql.crt`): the
//!   shim runs as root from a systemd unit, where a file in a home directory would
//!   silently change what every job's connection checks. So `require` without
//!   `sslrootcert` does not check; `verify-full` without `sslrootcert` uses the system's
//!   store (as `sslrootcert=system`); `verify-ca` without `sslrootcert` is refused (libpq
//!   refuses it too when that file does not exist, and checking only the chain against
//!   public roots proves nothing).
//! - An `sslrootcert` file that cannot be read is an error even with `require`, `prefer`
//!   and `allow` (libpq then quietly does not check); `sslrootcert` with `disable` is
//!   refused as it would check nothing.
//! - `prefer` tries again without TLS only after a failed handshake, not when the server
//!   refuses the start-up over TLS (a `pg_hba.conf` with `hostnossl` lines only).
//! - The host name is compared with the subjectAltName only; libpq also accepts the
//!   certificate's Common Name when it has no subjectAltName of the host's kind.
//! - Client certificates (`sslcert`, `sslkey`, `sslpassword`, `sslcertmode`) and
//!   revocation lists (`sslcrl`, `sslcrldir`) are refused; the environment variables
//!   (`PGSSLMODE`, `PGSSLROOTCERT`, …) are not read.
//!
//! Over a Unix socket there is no TLS: `disable`, `allow` and `prefer` connect without,
//! the other modes fail. TLS is rustls with the ring provider.
//!
//! Tables (names an operator recognises): `jobguard_meta` (key `schema_version`),
//! `jobguard_lease` (one row per job, never deleted: a released lease keeps its row with
//! an empty holder, so the fencing token keeps growing across every grant) and
//! `jobguard_run` (one row per attempt, with a partial unique index that allows one
//! non-forced `succeeded` row per (job, slot)). All times are `bigint` µs since the epoch
//! by the *server's* clock (`clock_timestamp()`), read inside the statement that decides.
//!
//! The claim is decided by [`rules::claim`] in [`engine`]'s loop, as on every store: one
//! statement reads the job's state (the schema version, the server's time, the lease row with its `xmin`, the
//! records the rules need) in one snapshot; a refusal is answered from it, and a grant is
//! one more statement whose first part updates the lease row only if its `xmin` is still
//! the one read (every write to the row, by any jobguard version, makes a new row version
//! with a new `xmin`), and whose other parts (the `running` record, the re-run records)
//! happen only if that update did. A claim that lost that race reads and decides again;
//! one that found the row locked by another writer does not queue for the lock at first,
//! but pauses briefly and reads again ([`engine::Commit::Busy`]), and queues only after a
//! few such pauses ([`engine::Backend::queue_for_locks`]).
//! So a granted claim is two round trips and a refused one is one. No function runs on
//! the server: schema 5 dropped the PL/pgSQL claim that jobguards of schema 3 and older
//! call, so such a jobguard finds no function, reads the newer version and refuses.
//! Statements are sent with `query_typed` (parse, bind and execute in one message flight);
//! on a store that has no schema yet, or an older one, the tool creates or migrates it
//! (under an advisory lock, so hosts starting together do not race) and asks again.
//! Renew, finish, interrupt, unlock and resolve run the same loop: one statement reads
//! the lease row with its `xmin` and the records; one writes only if `xmin` is unchanged
//! (and each record only while its outcome is still the one read: an end's record that
//! is no longer `running` is not written, nothing is, and the end is decided again).
//!
//! Every call (each read and each write of the loop) has a deadline
//! ([`remote::CALL_TIMEOUT`], connect [`remote::CONNECT_TIMEOUT`]);
//! the client is `tokio-postgres` driven by a private current-thread runtime, because the
//! synchronous `postgres` wrapper has no per-call time limit and a partitioned server
//! would hang the shim's renewal loop. A call that times out drops the connection, and
//! its statement is cancelled on the server (a `CancelRequest`, [`CANCEL_TIMEOUT`]); the
//! next call reconnects.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use tokio_postgres::config::SslMode;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::Type;
use tokio_postgres::{Client, Row};
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::guard::clock::Clock;
use crate::guard::lease::Lease;
use crate::guard::ledger::{Finish, Outcome, Resolution, Run};
use crate::store::engine::{self, Commit, LeaseRead, LeaseWrite, Need, Read, RunRead, Writes};
use crate::store::remote::{self, CALL_TIMEOUT, CANCEL_TIMEOUT, CONNECT_TIMEOUT};
use crate::store::rules;
use crate::store::{
    Claim, ClaimRequest, Finished, Mark, RunQuery, ScheduleDecl, Store, StoreError, address,
};

/// The schema version this jobguard writes and understands (`jobguard_meta`).
pub const SCHEMA_VERSION: i64 = 5;

/// The server's clock in µs, or the override a test passes (NULL in production).
const NOW_US: &str =
    "COALESCE($1::bigint, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint)";

/// `MIGRATIONS[n]` takes the schema from version `n` to `n + 1`.
const MIGRATIONS: [&str; SCHEMA_VERSION as usize] = [
    r#"
CREATE TABLE jobguard_lease (
    job          text   PRIMARY KEY,
    holder       text   NOT NULL,      -- Holder::id(); '' once released
    host         text   NOT NULL,
    token        bigint NOT NULL,      -- fencing token of the latest grant
    acquired_at  bigint NOT NULL,      -- µs since the epoch, server clock
    expire_at    bigint NOT NULL       -- µs since the epoch; 0 once released
);
CREATE TABLE jobguard_run (
    seq            bigint GENERATED ALWAYS AS IDENTITY,
    run_id         text    PRIMARY KEY,
    job            text    NOT NULL,
    slot_usec      bigint  NOT NULL,
    slot_zone      text    NOT NULL,
    attempt        bigint  NOT NULL,
    outcome        text    NOT NULL CHECK (outcome IN
                       ('running', 'succeeded', 'failed', 'interrupted', 'lease_lost')),
    reason         text,
    exit_status    integer,
    forced         boolean NOT NULL,
    trigger_kind   text    NOT NULL,
    host           text    NOT NULL,
    machine_id     text    NOT NULL,
    boot_id        text    NOT NULL,
    pid            bigint  NOT NULL,
    pid_start      bigint  NOT NULL,
    invocation_id  text,
    started_at     bigint  NOT NULL,
    finished_at    bigint,
    fencing_token  bigint  NOT NULL,
    report         text    NOT NULL DEFAULT '{}',
    resolution     text CHECK (resolution IS NULL OR resolution IN
                       ('queued', 'held', 'rerun', 'done'))
);
CREATE UNIQUE INDEX jobguard_run_one_success
    ON jobguard_run (job, slot_usec) WHERE outcome = 'succeeded' AND NOT forced;
CREATE INDEX jobguard_run_slot ON jobguard_run (job, slot_usec);
CREATE INDEX jobguard_run_history ON jobguard_run (job, started_at);
CREATE INDEX jobguard_run_running ON jobguard_run (job) WHERE outcome = 'running';
"#,
    r#"
-- 1 -> 2: an index for the queued re-runs a claim picks first. (Schemas 1 to 4 also
-- made the PL/pgSQL claim function `jobguard_claim`; migration 5 drops it.)
CREATE INDEX jobguard_run_queued ON jobguard_run (job, slot_usec) WHERE resolution = 'queued';
"#,
    r#"
-- 2 -> 3: the claim function's wait after a lapsed lease (rules::FOREIGN_GRACE_USEC),
-- now decided by rules.rs alone: no table changes.
"#,
    r#"
-- 3 -> 4: the renewal generation (Lease::renewal), 0 at a grant: renewals and the final
-- write of two copies of one holder (one snapshot resumed twice) tell the copies apart.
-- Renew and finish are decided by rules.rs and written with a compare-and-set on xmin.
ALTER TABLE jobguard_lease ADD COLUMN IF NOT EXISTS renewal bigint NOT NULL DEFAULT 0;
"#,
    r#"
-- 4 -> 5: nothing is decided on the server any more. The claim function of schemas 1
-- to 4 (called only by jobguards of schema 3 and older) and its clock helper go; such a
-- jobguard then finds no function, reads the newer version and refuses by name.
DROP FUNCTION IF EXISTS jobguard_claim(bigint, bigint, text, bigint, text, text, boolean,
    text, text, text, text, text, text, bigint, bigint, bigint, bigint, bigint, boolean,
    boolean);
DROP FUNCTION IF EXISTS jobguard_claim(bigint, bigint, text, bigint, text, text, boolean,
    text, text, text, text, text, text, bigint, bigint, bigint);
DROP FUNCTION IF EXISTS jobguard_now_us(bigint);
"#,
];

/// libpq's TLS parameters that jobguard refuses: client certificates and their keys,
/// certificate revocation lists, the client-certificate mode.
const UNSUPPORTED_TLS_PARAMS: &[&str] = &[
    "sslcert",
    "sslkey",
    "sslpassword",
    "sslcertmode",
    "sslcrl",
    "sslcrldir",
];

/// libpq's `sslmode` (libpq-connect(3), "sslmode"; the table in libpq's "SSL Support").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// No TLS.
    Disable,
    /// Without TLS first; with TLS when the server refuses that connection.
    Allow,
    /// With TLS when the server offers it (else without), and without TLS when the TLS
    /// handshake fails.
    Prefer,
    /// TLS or no connection.
    Require,
    /// TLS, the certificate's chain checked.
    VerifyCa,
    /// TLS, the certificate's chain and host name checked.
    VerifyFull,
}

impl Mode {
    fn parse(value: &str) -> Option<Mode> {
        Some(match value {
            "disable" => Mode::Disable,
            "allow" => Mode::Allow,
            "prefer" => Mode::Prefer,
            "require" => Mode::Require,
            "verify-ca" => Mode::VerifyCa,
            "verify-full" => Mode::VerifyFull,
            _ => return None,
        })
    }
}

/// What a TLS connection checks of the server's certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Check {
    /// Nothing (the handshake's signatures still are): encryption against listening only.
    Nothing,
    /// That it chains to a trusted root (libpq's `verify-ca`).
    Chain,
    /// The chain, and that it names the host of the address (libpq's `verify-full`).
    ChainAndName,
}

/// The roots a checked certificate must chain to.
#[derive(Debug, Clone)]
enum Roots {
    /// The system's trust store, as rustls-native-certs finds it (`/etc/ssl/certs`,
    /// `SSL_CERT_FILE`, `SSL_CERT_DIR`): `sslrootcert=system`.
    System,
    /// The certificates of an `sslrootcert=PATH` file, read when the store is opened.
    File(Arc<rustls::RootCertStore>),
}

/// How the store encrypts its connections: from the address's `sslmode` and `sslrootcert`.
#[derive(Debug, Clone)]
struct TlsPlan {
    mode: Mode,
    check: Check,
    roots: Roots,
}

/// Reads an `sslrootcert=PATH` file: one or more PEM certificates.
fn read_root_file(path: &str) -> Result<rustls::RootCertStore, String> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let data = remote::read_ca_file("sslrootcert", path, true)?;
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&data) {
        let cert = cert.map_err(|e| format!("sslrootcert {path}: {e}"))?;
        roots
            .add(cert)
            .map_err(|e| format!("sslrootcert {path}: {e}"))?;
    }
    if roots.is_empty() {
        return Err(format!(
            "sslrootcert {path}: no PEM certificate in the file"
        ));
    }
    Ok(roots)
}

/// Decides the TLS plan from the address's `sslmode` and `sslrootcert` values, by libpq's
/// rules except where the module documentation says otherwise.
///
/// # Errors
/// A message for an unknown `sslmode`, `sslrootcert=system` with a mode weaker than
/// `verify-full`, `sslrootcert` with `disable`, `verify-ca` without `sslrootcert`, or an
/// `sslrootcert` file that cannot be read or holds no certificate.
fn tls_plan(sslmode: Option<&str>, rootcert: Option<&str>) -> Result<TlsPlan, String> {
    let mode = sslmode
        .map(|m| {
            Mode::parse(m).ok_or_else(|| {
                format!(
                    "unknown sslmode {m:?} (disable, allow, prefer, require, verify-ca or verify-full)"
                )
            })
        })
        .transpose()?;
    let plan = |mode, check, roots| Ok(TlsPlan { mode, check, roots });
    match rootcert {
        Some("system") => match mode {
            // As libpq (16 and later): the system's roots imply verify-full.
            None | Some(Mode::VerifyFull) => {
                plan(Mode::VerifyFull, Check::ChainAndName, Roots::System)
            }
            Some(_) => Err(format!(
                "sslrootcert=system needs sslmode=verify-full, not {} (as libpq: a public \
                 certificate authority signs certificates for anyone's host names, so \
                 only the host name check protects)",
                sslmode.unwrap_or_default()
            )),
        },
        Some(path) => {
            if mode == Some(Mode::Disable) {
                return Err("sslrootcert is not used with sslmode=disable: choose one".to_string());
            }
            let roots = Roots::File(Arc::new(read_root_file(path)?));
            match mode.unwrap_or(Mode::Prefer) {
                // As libpq: with a root certificate, the chain is checked in every mode
                // that may encrypt (`require` acts as `verify-ca`).
                m @ (Mode::Allow | Mode::Prefer | Mode::Require | Mode::VerifyCa) => {
                    plan(m, Check::Chain, roots)
                }
                m => plan(m, Check::ChainAndName, roots),
            }
        }
        None => match mode.unwrap_or(Mode::Prefer) {
            Mode::VerifyCa => Err(
                "sslmode=verify-ca needs sslrootcert=PATH, the certificate authority to check \
                 the chain against (libpq would read ~/.postgresql/root.crt; jobguard does \
                 not read that file)"
                    .to_string(),
            ),
            // libpq would read ~/.postgresql/root.crt; jobguard uses the system's roots
            // (libpq's `sslrootcert=system`).
            Mode::VerifyFull => plan(Mode::VerifyFull, Check::ChainAndName, Roots::System),
            m => plan(m, Check::Nothing, Roots::System),
        },
    }
}

/// The handshake signature checks every verifier here shares: rustls's own, with the
/// ring provider's algorithms.
macro_rules! handshake_signatures {
    () => {
        fn verify_tls12_signature(
            &self,
            message: &[u8],
            cert: &rustls::pki_types::CertificateDer<'_>,
            dss: &rustls::DigitallySignedStruct,
        ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
            rustls::crypto::verify_tls12_signature(
                message,
                cert,
                dss,
                &self.provider.signature_verification_algorithms,
            )
        }

        fn verify_tls13_signature(
            &self,
            message: &[u8],
            cert: &rustls::pki_types::CertificateDer<'_>,
            dss: &rustls::DigitallySignedStruct,
        ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
            rustls::crypto::verify_tls13_signature(
                message,
                cert,
                dss,
                &self.provider.signature_verification_algorithms,
            )
        }

        fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
            self.provider
                .signature_verification_algorithms
                .supported_schemes()
        }
    };
}

/// Accepts any server certificate but still checks the handshake signatures: libpq's
/// `sslmode=require` (and `prefer`, `allow`) without a root certificate.
#[derive(Debug)]
struct AnyCertificate {
    provider: Arc<rustls::crypto::CryptoProvider>,
}

impl rustls::client::danger::ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &rustls::pki_types::CertificateDer<'_>,
        _intermediates: &[rustls::pki_types::CertificateDer<'_>],
        _server_name: &rustls::pki_types::ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    handshake_signatures!();
}

/// Checks that the certificate chains to a trusted root (validity period, key usage and
/// signatures included: rustls's `verify_server_cert_signed_by_trust_anchor`) and not the
/// host name: libpq's `sslmode=verify-ca`.
#[derive(Debug)]
struct ChainOnly {
    roots: Arc<rustls::RootCertStore>,
    provider: Arc<rustls::crypto::CryptoProvider>,
}

impl rustls::client::danger::ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &rustls::pki_types::CertificateDer<'_>,
        intermediates: &[rustls::pki_types::CertificateDer<'_>],
        _server_name: &rustls::pki_types::ServerName<'_>,
        _ocsp_response: &[u8],
        now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        let cert = rustls::server::ParsedCertificate::try_from(end_entity)?;
        rustls::client::verify_server_cert_signed_by_trust_anchor(
            &cert,
            &self.roots,
            intermediates,
            now,
            self.provider.signature_verification_algorithms.all,
        )?;
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    handshake_signatures!();
}

/// The rustls client configuration for `plan`, or a message saying why there is none.
fn tls_config(plan: &TlsPlan) -> Result<rustls::ClientConfig, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("tls: {e}"))?;
    let roots = || match &plan.roots {
        Roots::File(roots) => Ok(roots.clone()),
        Roots::System => {
            let mut roots = rustls::RootCertStore::empty();
            roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
            if roots.is_empty() {
                Err("tls: no trusted certificates in the system's store".to_string())
            } else {
                Ok(Arc::new(roots))
            }
        }
    };
    Ok(match plan.check {
        Check::ChainAndName => builder
            .with_root_certificates(roots()?)
            .with_no_client_auth(),
        Check::Chain => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(ChainOnly {
                roots: roots()?,
                provider,
            }))
            .with_no_client_auth(),
        Check::Nothing => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyCertificate { provider }))
            .with_no_client_auth(),
    })
}

/// True when `e` is a failed TLS handshake (rustls refused, or the server sent an alert):
/// what makes `sslmode=prefer` try again without TLS.
fn tls_handshake_failed(e: &tokio_postgres::Error) -> bool {
    use std::error::Error as _;
    let mut source = e.source();
    while let Some(s) = source {
        if s.downcast_ref::<rustls::Error>().is_some()
            || s.downcast_ref::<std::io::Error>()
                .and_then(|io| io.get_ref())
                .is_some_and(|inner| inner.downcast_ref::<rustls::Error>().is_some())
        {
            return true;
        }
        source = s.source();
    }
    false
}

/// Connects once with `mode` (`Disable`: no TLS; `Prefer`: TLS if the server offers it;
/// `Require`: TLS or an error) and starts driving the connection on the current runtime.
async fn connect_once(
    config: &tokio_postgres::Config,
    mode: SslMode,
    tls: &MakeRustlsConnect,
) -> Result<Connected, tokio_postgres::Error> {
    let mut config = config.clone();
    config.ssl_mode(mode);
    let (client, connection) = config.connect(tls.clone()).await?;
    let driver = tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok((client, driver))
}

/// A client and the task driving its connection, which ends once the client is dropped
/// and the connection has sent `Terminate` and closed.
type Connected = (Client, tokio::task::JoinHandle<()>);

/// How long dropping the store waits for its connection to close (see the `Drop` impl).
const CLOSE_TIMEOUT: Duration = Duration::from_millis(200);

/// Connects as `plan` says, with libpq's second attempt for `allow` and `prefer`; the
/// message of a failed first attempt is kept in front of the second one's.
async fn connect_as_planned(
    config: &tokio_postgres::Config,
    plan: &TlsPlan,
    tls: &MakeRustlsConnect,
) -> Result<Connected, Fail> {
    match plan.mode {
        Mode::Disable => Ok(connect_once(config, SslMode::Disable, tls).await?),
        Mode::Require | Mode::VerifyCa | Mode::VerifyFull => {
            Ok(connect_once(config, SslMode::Require, tls).await?)
        }
        Mode::Prefer => match connect_once(config, SslMode::Prefer, tls).await {
            Err(e) if tls_handshake_failed(&e) => {
                let first = format!("with TLS: {}", remote::chain(&e));
                connect_once(config, SslMode::Disable, tls)
                    .await
                    .map_err(|e| Fail::After(first, Box::new(Fail::Client(e))))
            }
            other => Ok(other?),
        },
        Mode::Allow => match connect_once(config, SslMode::Disable, tls).await {
            // The server refused the connection without TLS (pg_hba.conf `hostssl`).
            Err(e) if e.as_db_error().is_some() => {
                let first = format!("without TLS: {}", remote::chain(&e));
                connect_once(config, SslMode::Require, tls)
                    .await
                    .map_err(|e| Fail::After(first, Box::new(Fail::Client(e))))
            }
            other => Ok(other?),
        },
    }
}

/// The PostgreSQL store: one connection (reconnected after a failure).
pub struct PostgresStore {
    rt: tokio::runtime::Runtime,
    config: tokio_postgres::Config,
    tls: TlsPlan,
    /// The rustls connector, made at the first connect (reading the system's roots).
    connector: Option<MakeRustlsConnect>,
    client: Option<Client>,
    /// The task driving `client`'s connection.
    driver: Option<tokio::task::JoinHandle<()>>,
    /// Cancel requests for statements given up on.
    cancels: remote::Cancels,
    describe: String,
    schema: Option<String>,
    schema_ready: bool,
    test_clock: Option<Arc<dyn Clock>>,
}

impl Drop for PostgresStore {
    /// Ends the session as libpq does: with its client dropped, the connection sends
    /// `Terminate` and closes, waited for at most [`CLOSE_TIMEOUT`] so that a server that
    /// stopped answering never holds up the exit. A process that exits with the
    /// connection still open resets it instead, and over TLS the server then logs "could
    /// not receive data from client: Connection reset by peer" for every run.
    ///
    /// Then cancel requests still under way are waited for ([`remote::Cancels`]).
    fn drop(&mut self) {
        self.close();
    }
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore")
            .field("describe", &self.describe)
            .finish_non_exhaustive()
    }
}

/// This store's failures: the client's own errors, and those every store shares.
type Fail = engine::Fail<tokio_postgres::Error>;

impl From<tokio_postgres::Error> for Fail {
    fn from(e: tokio_postgres::Error) -> Self {
        Fail::Client(e)
    }
}

/// Sorts the client's errors: an error of the connection, and a server error of class 08
/// (connection), 53 (insufficient resources), 57 (operator intervention), a serialization
/// failure (40001) or a deadlock (40P01), are [`StoreError::Unavailable`]; other server
/// errors are [`StoreError::Invalid`] (PostgreSQL's Appendix A, "Error Codes").
impl engine::ClientError for tokio_postgres::Error {
    fn store_error(self, store: &str, op: &str) -> StoreError {
        let store = store.to_string();
        match self.as_db_error() {
            None => StoreError::Unavailable {
                store,
                detail: format!("{op}: {}", remote::chain(&self)),
            },
            Some(db) => {
                let code = db.code().code();
                let retryable = code.starts_with("08")
                    || code.starts_with("53")
                    || code.starts_with("57")
                    || code == "40001"
                    || code == "40P01";
                let detail = format!("{op}: {}", db.message());
                if retryable {
                    StoreError::Unavailable { store, detail }
                } else {
                    StoreError::Invalid { store, detail }
                }
            }
        }
    }
}

/// True for errors that mean "the schema is not there yet" (the first use of a store) or
/// "the schema is older" (the first use after an upgrade).
fn missing_schema(e: &Fail) -> bool {
    matches!(e, Fail::Older)
        || matches!(e, Fail::Client(e) if matches!(
            e.code(),
            Some(c) if *c == SqlState::UNDEFINED_TABLE
                || *c == SqlState::UNDEFINED_COLUMN
                || *c == SqlState::INVALID_SCHEMA_NAME
        ))
}

impl PostgresStore {
    /// Parses `address` and prepares a store; connects on the first call.
    ///
    /// # Errors
    /// [`StoreError::Address`] when the address is not a PostgreSQL URI the client accepts,
    /// `schema=` is not a plain name (letters, digits, `_`; at most 48), `sslmode` and
    /// `sslrootcert` do not go together or the `sslrootcert` file cannot be read (see the
    /// module documentation), or the address names a TLS parameter of libpq's that
    /// jobguard does not support (client certificates, revocation lists).
    pub fn open(address: &str) -> Result<PostgresStore, StoreError> {
        let describe = address::mask(address);
        let bad = |detail: String| StoreError::Address {
            address: describe.clone(),
            detail,
        };
        if let Some(key) =
            remote::given_twice(address, &[&["schema"], &["sslmode"], &["sslrootcert"]])
        {
            return Err(bad(format!("{key} is given more than once")));
        }
        let mut names = vec!["schema", "sslmode", "sslrootcert"];
        names.extend_from_slice(UNSUPPORTED_TLS_PARAMS);
        let (rest, ours) = remote::take_params(address, &names);
        if let Some(i) = (3..names.len()).find(|&i| ours[i].is_some()) {
            return Err(bad(format!(
                "{} is not supported (client certificates and revocation lists are not)",
                names[i]
            )));
        }
        let tls = tls_plan(ours[1].as_deref(), ours[2].as_deref()).map_err(&bad)?;
        let rest = match rest.split_once("://") {
            Some((scheme, tail)) if scheme.eq_ignore_ascii_case("postgres") => {
                format!("postgresql://{tail}")
            }
            _ => rest,
        };
        let mut config = tokio_postgres::Config::from_str(&rest)
            .map_err(|e| bad(format!("not a postgresql address: {e}")))?;
        let schema = ours[0].clone();
        if let Some(schema) = &schema {
            if !remote::plain_name(schema, false) {
                return Err(bad(format!(
                    "schema {schema:?} is not a plain name (letters, digits, _)"
                )));
            }
            // Quoted, as the schema is created: unquoted, a name with capitals would be
            // folded to lower case and name another schema.
            config.options(format!("-c search_path=\"{schema}\""));
        }
        if config.get_user().is_none() {
            // As libpq: the user name of the process (root for the shim).
            let me = nix::unistd::User::from_uid(nix::unistd::geteuid())
                .ok()
                .flatten()
                .map_or_else(|| "root".to_string(), |u| u.name);
            config.user(me);
        }
        config.connect_timeout(CONNECT_TIMEOUT);
        config.tcp_user_timeout(CALL_TIMEOUT);
        config.keepalives_idle(Duration::from_secs(10));
        if config.get_application_name().is_none() {
            config.application_name("jobguard");
        }
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| StoreError::Unavailable {
                store: describe.clone(),
                detail: format!("cannot start the client runtime: {e}"),
            })?;
        Ok(PostgresStore {
            rt,
            config,
            tls,
            connector: None,
            client: None,
            driver: None,
            cancels: remote::Cancels::default(),
            describe,
            schema,
            schema_ready: false,
            test_clock: None,
        })
    }

    /// Judges time by `clock` instead of the server's clock: every statement that reads
    /// the server's time gets `clock`'s time instead. Only for tests that move
    /// time (the store conformance suite); jobguard itself never calls it.
    #[doc(hidden)]
    pub fn judge_time_by(&mut self, clock: Arc<dyn Clock>) {
        self.test_clock = Some(clock);
    }

    fn test_now(&self) -> Option<i64> {
        self.test_clock.as_ref().map(|c| c.now_usec())
    }

    fn error(&self, op: &str, fail: Fail) -> StoreError {
        // A pooler that refuses the start-up option carrying `schema=` (PgBouncer 1.18:
        // "unsupported startup parameter: options"; 1.20 and later: "unsupported startup
        // parameter in options: search_path") refuses every connection: the address is
        // wrong for it. `allow` and `prefer` wrap a second attempt's error.
        let mut last = &fail;
        while let Fail::After(_, then) = last {
            last = then;
        }
        if let (Some(schema), Fail::Client(e)) = (&self.schema, last)
            && e.as_db_error().is_some_and(|db| {
                db.message().contains("unsupported startup parameter")
                    && db.message().contains("options")
            })
        {
            return StoreError::Address {
                address: self.describe.clone(),
                detail: format!(
                    "{op}: the server (a pooler such as PgBouncer) refused the start-up option that sets schema={schema}: leave schema= out, and give the role the schema instead (CREATE SCHEMA \"{schema}\"; ALTER ROLE ... IN DATABASE ... SET search_path = \"{schema}\")"
                ),
            };
        }
        fail.store_error(&self.describe, op, SCHEMA_VERSION)
    }

    /// Ends the session, if any ([`Drop`]'s way); the next call connects again.
    fn close(&mut self) {
        self.client = None;
        if let Some(driver) = self.driver.take() {
            let _ = self
                .rt
                .block_on(async { tokio::time::timeout(CLOSE_TIMEOUT, driver).await });
        }
    }

    /// Runs `f` on the connection (connecting first if needed) within [`CALL_TIMEOUT`].
    /// A timeout or a broken connection drops the connection.
    fn call<T>(&mut self, f: impl AsyncFnOnce(&mut Client) -> Result<T, Fail>) -> Result<T, Fail> {
        self.session(|s| s.run(f))
    }

    /// Runs `f` with a session on the connection (connecting first if needed), each of its
    /// calls within [`CALL_TIMEOUT`]. A timeout or a broken connection drops the
    /// connection.
    fn session<T>(
        &mut self,
        f: impl FnOnce(&mut Session<'_>) -> Result<T, Fail>,
    ) -> Result<T, Fail> {
        if self.client.as_ref().is_none_or(|c| c.is_closed()) {
            (self.client, self.driver) = (None, None);
            let connector = match &self.connector {
                Some(c) => c.clone(),
                None => {
                    let c = MakeRustlsConnect::new(tls_config(&self.tls).map_err(Fail::Data)?);
                    self.connector = Some(c.clone());
                    c
                }
            };
            let (config, plan) = (&self.config, &self.tls);
            // One deadline for both attempts of `allow` and `prefer`.
            let client = self
                .rt
                .block_on(async {
                    tokio::time::timeout(
                        CONNECT_TIMEOUT,
                        connect_as_planned(config, plan, &connector),
                    )
                    .await
                })
                .map_err(|_| {
                    Fail::Unavailable(format!(
                        "could not connect within {} s",
                        CONNECT_TIMEOUT.as_secs()
                    ))
                })??;
            self.client = Some(client.0);
            self.driver = Some(client.1);
        }
        let now = self.test_now();
        let Some(client) = self.client.as_mut() else {
            return Err(Fail::Data("no connection".to_string()));
        };
        let result = f(&mut Session {
            rt: &self.rt,
            client,
            now,
            queue: false,
        });
        // A connection given up on is not waited for when the store is dropped.
        match result {
            Err(Fail::Timeout(limit)) => {
                let cancel = self.client.as_ref().map(Client::cancel_token);
                (self.client, self.driver) = (None, None);
                // The server goes on with a statement until it next reads from or writes
                // to the closed connection: a statement waiting for a lock, or a slow
                // read, would run on with its locks and its backend. Cancel it, as libpq's
                // PQcancel does (the process id and secret key name the backend), on a
                // thread with a runtime of its own: this store's runs only inside a call.
                if let (Some(cancel), Some(tls)) = (cancel, self.connector.clone()) {
                    self.cancels.start("pg-cancel", move || {
                        let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                            .enable_all()
                            .build()
                        else {
                            return;
                        };
                        rt.block_on(async {
                            let _ = tokio::time::timeout(CANCEL_TIMEOUT, cancel.cancel_query(tls))
                                .await;
                        });
                    });
                }
                Err(Fail::Timeout(limit))
            }
            Err(Fail::Client(e)) if e.as_db_error().is_none() => {
                (self.client, self.driver) = (None, None);
                Err(Fail::Client(e))
            }
            other => other,
        }
    }

    /// Creates or migrates the schema under an advisory lock; `Ok(Some(v))` when the store
    /// has the newer version `v`.
    async fn migrate(client: &mut Client, schema: Option<&str>) -> Result<Option<i64>, Fail> {
        let tx = client.transaction().await?;
        // One lock per schema, so that hosts starting together migrate one at a time.
        let key = lock_key(schema.unwrap_or("public"));
        tx.query_typed("SELECT pg_advisory_xact_lock($1)", &[(&key, Type::INT8)])
            .await?;
        if let Some(schema) = schema {
            tx.batch_execute(&format!("CREATE SCHEMA IF NOT EXISTS \"{schema}\""))
                .await?;
        }
        tx.batch_execute(
            "CREATE TABLE IF NOT EXISTS jobguard_meta (key text PRIMARY KEY, value bigint NOT NULL)",
        )
        .await?;
        let version: i64 = tx
            .query_typed(
                "SELECT value FROM jobguard_meta WHERE key = 'schema_version'",
                &[],
            )
            .await?
            .first()
            .map(|r| r.try_get(0))
            .transpose()?
            .unwrap_or(0);
        if version > SCHEMA_VERSION {
            return Ok(Some(version));
        }
        let from = usize::try_from(version.max(0)).unwrap_or(0);
        for migration in MIGRATIONS.iter().skip(from) {
            tx.batch_execute(migration).await?;
        }
        tx.batch_execute(SCHEDULE_TABLE).await?;
        tx.batch_execute(BEAT_TABLE).await?;
        tx.query_typed(
            "INSERT INTO jobguard_meta (key, value) VALUES ('schema_version', $1)
             ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            &[(&SCHEMA_VERSION, Type::INT8)],
        )
        .await?;
        tx.commit().await?;
        Ok(None)
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

    /// Runs a call that needs the schema; on a store without one, creates it and asks again.
    fn with_schema<T>(
        &mut self,
        op: &str,
        mut f: impl AsyncFnMut(&mut Client) -> Result<T, Fail>,
    ) -> Result<T, StoreError> {
        self.schema_session(op, |s| s.run(async |c| f(c).await))
    }

    /// Runs `f` with this store's part of [`engine`]'s loop ([`Session`]), as
    /// [`PostgresStore::schema_session`].
    fn engine<T>(
        &mut self,
        op: &str,
        f: impl FnMut(&mut Session<'_>) -> Result<T, Fail>,
    ) -> Result<T, StoreError> {
        self.schema_session(op, f)
    }

    /// Runs a session that needs the schema ([`PostgresStore::session`]); on a store
    /// without one, creates it and runs it again.
    fn schema_session<T>(
        &mut self,
        op: &str,
        mut f: impl FnMut(&mut Session<'_>) -> Result<T, Fail>,
    ) -> Result<T, StoreError> {
        match self.session(&mut f) {
            Ok(v) => {
                self.schema_ready = true;
                Ok(v)
            }
            Err(e) if missing_schema(&e) => {
                self.init()?;
                self.session(&mut f).map_err(|e| self.error(op, e))
            }
            Err(Fail::Client(e))
                if e.code() == Some(&SqlState::RAISE_EXCEPTION)
                    && e.as_db_error()
                        .is_some_and(|d| d.message().contains("newer")) =>
            {
                Err(StoreError::Invalid {
                    store: self.describe.clone(),
                    detail: format!(
                        "{op}: {}",
                        e.as_db_error().map(|d| d.message()).unwrap_or_default()
                    ),
                })
            }
            Err(e) => Err(self.error(op, e)),
        }
    }
}

/// A 64-bit advisory lock key for a schema name (FNV-1a).
fn lock_key(schema: &str) -> i64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in "jobguard:".bytes().chain(schema.bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    i64::from_ne_bytes(h.to_ne_bytes())
}

/// The lease in `row`'s columns `first` to `first + 5`: holder, host, token, acquired_at,
/// expire_at, renewal.
fn lease_from(job: &str, row: &Row, first: usize) -> Result<Lease, Fail> {
    Ok(Lease {
        job: job.to_string(),
        holder: row.try_get(first)?,
        host: row.try_get(first + 1)?,
        token: row.try_get(first + 2)?,
        acquired_at: row.try_get(first + 3)?,
        expire_at: row.try_get(first + 4)?,
        renewal: row.try_get(first + 5)?,
    })
}

/// The job's lease row as one statement reads it, with the server's time and the row's
/// version (`xmin`).
struct PgRowState {
    now: i64,
    /// The row and its version, `None` while the job has no lease row.
    row: Option<(String, Lease)>,
    /// The record asked for, if any.
    record: Option<Run>,
    /// Every record of that record's slot, oldest first.
    slot_runs: Vec<Run>,
}

/// Reads, in one statement (one snapshot), what [`rules::renew`] and [`rules::finish`]
/// decide on: the server's time, `job`'s lease row and its version, the record `run_id`
/// (none for an empty id) and every record of its slot.
async fn read_row_state(
    c: &mut Client,
    now: Option<i64>,
    job: &str,
    run_id: &str,
) -> Result<PgRowState, Fail> {
    let rows = c
        .query_typed(
            &format!(
                "WITH t AS (SELECT {NOW_US} AS now),
                 rec AS (SELECT r.* FROM jobguard_run r WHERE r.run_id = $3)
                 SELECT t.now, l.xmin::text, l.holder, l.host, l.token, l.acquired_at,
                   l.expire_at, l.renewal,
                   (SELECT to_jsonb(r)::text FROM rec r),
                   (SELECT jsonb_agg(to_jsonb(o) ORDER BY o.seq)::text
                      FROM jobguard_run o, rec WHERE o.job = rec.job
                       AND o.slot_usec = rec.slot_usec)
                 FROM t LEFT JOIN jobguard_lease l ON l.job = $2"
            ),
            &[
                (&now, Type::INT8),
                (&job, Type::TEXT),
                (&run_id, Type::TEXT),
            ],
        )
        .await?;
    let row = rows
        .first()
        .ok_or_else(|| Fail::Data("the read of the lease row answered nothing".to_string()))?;
    let version: Option<String> = row.try_get(1)?;
    let lease = match version {
        Some(v) => Some((v, lease_from(job, row, 2)?)),
        None => None,
    };
    Ok(PgRowState {
        now: row.try_get(0)?,
        row: lease,
        record: run_from(row.try_get(8)?)?,
        slot_runs: runs_from_json(row.try_get(9)?)?,
    })
}

/// The records of a `jsonb_agg(to_jsonb(r))` column, in its order; none for NULL.
fn runs_from_json(json: Option<String>) -> Result<Vec<Run>, Fail> {
    let Some(json) = json else {
        return Ok(Vec::new());
    };
    let records: Vec<serde_json::Map<String, serde_json::Value>> =
        serde_json::from_str(&json).map_err(|e| Fail::Data(format!("records: {e}")))?;
    records
        .iter()
        .map(|o| remote::run_from_object(o).map_err(Fail::Data))
        .collect()
}

/// Applies an end ([`rules::finish`], [`rules::interrupt`]), an unlock or a resolve
/// ([`rules::resolve`]) in one statement, only if the job's lease row is still at
/// `version`: the row released (with `release`; otherwise rewritten as it is, so that its
/// version moves) and each record's new state, given with the record as read. Each
/// record is written only while its outcome is still the one read (an interrupt of a
/// record under an earlier grant writes no lease row, so the row's version does not
/// cover it: a record no longer `running` is not ended twice), and nothing is written
/// unless every record is. False, with nothing written, when the row changed or a record
/// did (read and decide again).
async fn write_end(
    c: &mut Client,
    job: &str,
    version: Option<&str>,
    release: bool,
    records: &[(&Run, Option<&Run>)],
) -> Result<bool, Fail> {
    let Some(version) = version else {
        if let Some((r, _)) = records.first() {
            return Err(Fail::Data(format!(
                "run {} is recorded but job {job} has no lease row",
                r.run_id
            )));
        }
        return Ok(true);
    };
    let mut ids = Vec::new();
    let mut was = Vec::new();
    let mut outcome = Vec::new();
    let mut reason = Vec::new();
    let mut exit_status = Vec::new();
    let mut finished_at = Vec::new();
    let mut report = Vec::new();
    let mut resolution = Vec::new();
    for (r, before) in records {
        ids.push(r.run_id.as_str());
        was.push(before.map_or(Outcome::Running, |b| b.outcome).as_str());
        outcome.push(r.outcome.as_str());
        reason.push(r.reason.as_deref());
        exit_status.push(r.exit_status);
        finished_at.push(r.finished_at);
        report.push(
            serde_json::to_string(&r.report).map_err(|e| Fail::Data(format!("report: {e}")))?,
        );
        resolution.push(r.resolution.map(Resolution::as_str));
    }
    let rows = c
        .query_typed(
            "WITH v AS (
               SELECT 1 FROM jobguard_lease WHERE job = $1 AND xmin::text = $2 FOR UPDATE),
             u AS (
               SELECT * FROM unnest($4::text[], $5::text[], $6::text[], $7::text[],
                 $8::int4[], $9::int8[], $10::text[], $11::text[])
                 AS u(id, was, outcome, reason, exit_status, finished_at, report, resolution)),
             ok AS (
               SELECT count(*) = cardinality($4::text[]) AS all_as_read
                 FROM jobguard_run r JOIN u ON r.run_id = u.id AND r.outcome = u.was),
             rec AS (
               UPDATE jobguard_run r SET outcome = u.outcome, reason = u.reason,
                 exit_status = u.exit_status, finished_at = u.finished_at,
                 report = u.report, resolution = u.resolution
               FROM u
               WHERE r.run_id = u.id AND r.outcome = u.was
                 AND EXISTS (SELECT 1 FROM v) AND (SELECT all_as_read FROM ok)
               RETURNING 1),
             l AS (
               UPDATE jobguard_lease SET
                 holder = CASE WHEN $3 THEN '' ELSE holder END,
                 host = CASE WHEN $3 THEN '' ELSE host END,
                 expire_at = CASE WHEN $3 THEN 0 ELSE expire_at END
               WHERE job = $1 AND EXISTS (SELECT 1 FROM v)
                 AND (SELECT count(*) FROM rec) = cardinality($4::text[])
               RETURNING 1)
             SELECT count(*) FROM l",
            &[
                (&job, Type::TEXT),
                (&version, Type::TEXT),
                (&release, Type::BOOL),
                (&ids, Type::TEXT_ARRAY),
                (&was, Type::TEXT_ARRAY),
                (&outcome, Type::TEXT_ARRAY),
                (&reason, Type::TEXT_ARRAY),
                (&exit_status, Type::INT4_ARRAY),
                (&finished_at, Type::INT8_ARRAY),
                (&report, Type::TEXT_ARRAY),
                (&resolution, Type::TEXT_ARRAY),
            ],
        )
        .await?;
    let row = rows
        .first()
        .ok_or_else(|| Fail::Data("the end's write answered nothing".to_string()))?;
    Ok(row.try_get::<_, i64>(0)? == 1)
}

fn run_from(json: Option<String>) -> Result<Option<Run>, Fail> {
    json.map(|j| remote::run_from_json(&j).map_err(Fail::Data))
        .transpose()
}

/// The table of declared schedules ([`Store::declare_schedule`]). It has no schema
/// version of its own (a jobguard that does not know it leaves it alone): a new schema
/// gets it with its migration, an older one with its first declaration.
const SCHEDULE_TABLE: &str = "CREATE TABLE IF NOT EXISTS jobguard_schedule (
    job text PRIMARY KEY, fingerprint text NOT NULL,
    defined_at bigint NOT NULL, host text NOT NULL,
    seen_at bigint NOT NULL, horizon bigint NOT NULL)";

/// The table of heartbeats ([`Store::put_beat`]), made with the first beat like the
/// schedule table.
const BEAT_TABLE: &str =
    "CREATE TABLE IF NOT EXISTS jobguard_host (host text PRIMARY KEY, beat text NOT NULL)";

/// Indexes outside the schema version, created at the first open that finds them missing
/// ([`Store::init`]), so that an older jobguard still opens the store: `(job, outcome)`
/// for the reads of unsettled attempts by outcome (`status`, `audit` and `metrics` look
/// for every unsettled attempt of a job). Without it the read walks all of a job's
/// records: 4 ms per job at 10,000 records each, against 0.1 ms with it
/// (`benches/ledger-scale.sh`).
const EXTRA_INDEXES: &str =
    "CREATE INDEX IF NOT EXISTS jobguard_run_outcome ON jobguard_run (job, outcome)";

/// The table of marks ([`Store::mark`]), made with the first mark like the schedule
/// table, with the index retention deletes by.
const MARK_TABLE: &str = "CREATE TABLE IF NOT EXISTS jobguard_mark (
    namespace text NOT NULL, mark_key text NOT NULL, job text NOT NULL,
    run_id text NOT NULL, host text NOT NULL, token bigint NOT NULL,
    marked_at bigint NOT NULL, PRIMARY KEY (namespace, mark_key));
  CREATE INDEX IF NOT EXISTS jobguard_mark_age ON jobguard_mark (job, marked_at)";

/// Creates the schedule table if it is missing.
///
/// # Errors
/// The server's: without the right to create in the schema (SQLSTATE 42501).
async fn create_schedule_table(c: &Client) -> Result<(), Fail> {
    create_table(c, SCHEDULE_TABLE).await
}

/// The rows of `sql`, a read of a table made on first use (schedules, marks): none while
/// the table does not exist yet.
///
/// # Errors
/// The server's, but for the missing table.
async fn rows_if_made(
    c: &Client,
    sql: &str,
    values: &[(&(dyn tokio_postgres::types::ToSql + Sync), Type)],
) -> Result<Vec<Row>, Fail> {
    match c.query_typed(sql, values).await {
        Err(e) if e.code() == Some(&SqlState::UNDEFINED_TABLE) => Ok(Vec::new()),
        got => Ok(got?),
    }
}

/// Runs `sql`, a `CREATE TABLE IF NOT EXISTS` (and its indexes).
///
/// # Errors
/// The server's: without the right to create in the schema (SQLSTATE 42501).
async fn create_table(c: &Client, sql: &str) -> Result<(), Fail> {
    // Two sessions creating the table at once: one of them may fail on the catalog's
    // unique index; the table is there either way.
    match c.batch_execute(sql).await {
        Err(e)
            if e.code() != Some(&SqlState::UNIQUE_VIOLATION)
                && e.code() != Some(&SqlState::DUPLICATE_TABLE) =>
        {
            Err(e.into())
        }
        _ => Ok(()),
    }
}

/// How often a claim reads and decides again after the lease row changed between its read
/// and its write (another host's claim, renewal or finish won the race).
/// [`rules::ClaimState`] and the version of the job's lease row it was read at (the row's
/// `xmin`: every write to the row, by any jobguard version, makes a new one), `None`
/// while the job has no lease row.
struct PgClaimState {
    claim: rules::ClaimState,
    version: Option<String>,
}

/// Reads, in one statement (one snapshot), what [`rules::claim`] decides `req` on: the
/// server's time, the schema version, the lease row and its version, the record of a claim
/// sent again, the records of the asked slot (and of queued slots with `queued_first`), the
/// newest slot within [`rules::newest_bound`], and the record that holds the lease's token.
async fn read_claim_state(
    c: &mut Client,
    now: Option<i64>,
    req: &ClaimRequest,
) -> Result<PgClaimState, Fail> {
    let job = &req.run.job;
    let tolerance = rules::tolerance_usec(req);
    let rows = c
        .query_typed(
            &format!(
                "WITH t AS (SELECT {NOW_US} AS now)
                 SELECT t.now,
                   (SELECT value FROM jobguard_meta WHERE key = 'schema_version'),
                   l.xmin::text, l.holder, l.host, l.token, l.acquired_at, l.expire_at,
                   l.renewal,
                   (SELECT to_jsonb(r)::text FROM jobguard_run r WHERE r.run_id = $3),
                   (SELECT jsonb_agg(to_jsonb(r) ORDER BY r.seq)::text FROM jobguard_run r
                     WHERE r.job = $2 AND (r.slot_usec = $4 OR ($5 AND r.slot_usec IN (
                       SELECT q.slot_usec FROM jobguard_run q
                        WHERE q.job = $2 AND q.resolution = 'queued')))),
                   (SELECT max(r.slot_usec) FROM jobguard_run r
                     WHERE r.job = $2 AND r.slot_usec <= t.now + $6),
                   (SELECT to_jsonb(r)::text FROM jobguard_run r
                     WHERE r.job = $2 AND r.fencing_token = l.token AND l.holder <> ''
                     ORDER BY r.started_at DESC, r.seq DESC LIMIT 1)
                 FROM t LEFT JOIN jobguard_lease l ON l.job = $2"
            ),
            &[
                (&now, Type::INT8),
                (job, Type::TEXT),
                (&req.run.run_id, Type::TEXT),
                (&req.run.slot.usec, Type::INT8),
                (&req.queued_first, Type::BOOL),
                (&tolerance, Type::INT8),
            ],
        )
        .await?;
    let row = rows
        .first()
        .ok_or_else(|| Fail::Data("the claim's read answered nothing".to_string()))?;
    match row.try_get::<_, Option<i64>>(1)? {
        Some(v) if v > SCHEMA_VERSION => return Err(Fail::Newer(v)),
        Some(v) if v == SCHEMA_VERSION => {}
        _ => return Err(Fail::Older),
    }
    let version: Option<String> = row.try_get(2)?;
    let lease = match version {
        Some(_) => Some(lease_from(job, row, 3)?),
        None => None,
    };
    let mut slots: std::collections::BTreeMap<i64, Vec<Run>> = std::collections::BTreeMap::new();
    for run in runs_from_json(row.try_get(10)?)? {
        slots.entry(run.slot.usec).or_default().push(run);
    }
    Ok(PgClaimState {
        claim: rules::ClaimState {
            now: row.try_get(0)?,
            lease,
            retried: run_from(row.try_get(9)?)?,
            slots,
            newest: row.try_get(11)?,
            lease_run: run_from(row.try_get(12)?)?,
        },
        version,
    })
}

/// Writes a grant in one statement if the job's lease row is still at `version`: the new
/// `lease`, the resolution of each record in `changed` (those it re-runs) and its
/// `running` record `run`. Nothing is written when the row changed since it was read
/// ([`Commit::Changed`]) or another transaction holds its lock ([`Commit::Busy`]).
///
/// The row's lock, taken first, gates the rest and orders this write against every other
/// write to the job's lease row. Unless `queue`, it is taken without waiting (`SKIP
/// LOCKED`): racers for one slot do not queue for it, since behind a lock the server
/// wakes its waiters one at a time, each to find the row changed, while a busy answer
/// lets every loser read the winner's grant as soon as it is committed
/// (`benches/store_latency.rs`, 32-way). A writer that holds the row longer is queued
/// for ([`engine::Backend::queue_for_locks`]).
async fn write_grant(
    c: &mut Client,
    version: &str,
    lease: &Lease,
    run: &Run,
    changed: &[&Run],
    queue: bool,
) -> Result<Commit, Fail> {
    let ids: Vec<&str> = changed.iter().map(|r| r.run_id.as_str()).collect();
    let resolutions: Vec<Option<&str>> = changed
        .iter()
        .map(|r| r.resolution.map(Resolution::as_str))
        .collect();
    let pid = i64::from(run.pid);
    let pid_start = i64::try_from(run.pid_start)
        .map_err(|_| Fail::Data(format!("pid_start {} out of range", run.pid_start)))?;
    let rows = c
        .query_typed(
            &format!(
                "WITH v AS (
               SELECT 1 FROM jobguard_lease WHERE job = $1 AND xmin::text = $2
               FOR NO KEY UPDATE {}),
             l AS (
               UPDATE jobguard_lease SET holder = $3, host = $4, token = $5,
                 acquired_at = $6, expire_at = $7, renewal = $22
               WHERE job = $1 AND xmin::text = $2 AND EXISTS (SELECT 1 FROM v)
               RETURNING 1),
             changed AS (
               UPDATE jobguard_run r SET resolution = u.resolution
               FROM unnest($8::text[], $23::text[]) AS u(run_id, resolution)
               WHERE r.run_id = u.run_id AND EXISTS (SELECT 1 FROM l)
               RETURNING 1),
             ins AS (
               INSERT INTO jobguard_run (run_id, job, slot_usec, slot_zone, attempt, outcome,
                   forced, trigger_kind, host, machine_id, boot_id, pid, pid_start,
                   invocation_id, started_at, fencing_token)
               SELECT $9, $1, $10, $11, $12, 'running', $13, $14, $15, $16, $17, $18, $19,
                   $20, $21, $5
               WHERE EXISTS (SELECT 1 FROM l)
               RETURNING 1)
             SELECT (SELECT count(*) FROM l),
               EXISTS (SELECT 1 FROM jobguard_lease WHERE job = $1 AND xmin::text = $2)",
                if queue { "" } else { "SKIP LOCKED" }
            ),
            &[
                (&lease.job, Type::TEXT),
                (&version, Type::TEXT),
                (&lease.holder, Type::TEXT),
                (&lease.host, Type::TEXT),
                (&lease.token, Type::INT8),
                (&lease.acquired_at, Type::INT8),
                (&lease.expire_at, Type::INT8),
                (&ids, Type::TEXT_ARRAY),
                (&run.run_id, Type::TEXT),
                (&run.slot.usec, Type::INT8),
                (&run.slot.zone, Type::TEXT),
                (&run.attempt, Type::INT8),
                (&run.forced, Type::BOOL),
                (&run.trigger, Type::TEXT),
                (&run.host, Type::TEXT),
                (&run.machine_id, Type::TEXT),
                (&run.boot_id, Type::TEXT),
                (&pid, Type::INT8),
                (&pid_start, Type::INT8),
                (&run.invocation_id, Type::TEXT),
                (&run.started_at, Type::INT8),
                (&lease.renewal, Type::INT8),
                (&resolutions, Type::TEXT_ARRAY),
            ],
        )
        .await?;
    let row = rows
        .first()
        .ok_or_else(|| Fail::Data("the claim's write answered nothing".to_string()))?;
    // Not written, though the row is still as read in this statement's snapshot: its lock
    // was held (or a write committed since the snapshot, which the next read sees).
    Ok(
        match (row.try_get::<_, i64>(0)?, row.try_get::<_, bool>(1)?) {
            (1, _) => Commit::Done,
            (_, true) => Commit::Busy,
            (_, false) => Commit::Changed,
        },
    )
}

/// One connection's part of [`engine`]'s loop: each read is one statement (one
/// snapshot) that returns the lease row's version (`xmin`: every write to the row, by any
/// jobguard version, makes a new one), and each commit one statement that writes only if
/// the row is still that version.
struct Session<'a> {
    rt: &'a tokio::runtime::Runtime,
    client: &'a mut Client,
    /// The test clock's time (µs since the epoch) that stands in for the server's.
    now: Option<i64>,
    /// Whether a grant waits for the lease row's lock ([`engine::Backend::queue_for_locks`]).
    queue: bool,
}

impl Session<'_> {
    /// Runs `f` on the connection within [`CALL_TIMEOUT`].
    fn run<T>(&mut self, f: impl AsyncFnOnce(&mut Client) -> Result<T, Fail>) -> Result<T, Fail> {
        let client = &mut *self.client;
        self.rt
            .block_on(async { tokio::time::timeout(CALL_TIMEOUT, f(client)).await })
            .unwrap_or(Err(Fail::Timeout(CALL_TIMEOUT)))
    }
}

impl engine::Backend for Session<'_> {
    /// The lease row's `xmin`; `None` while the job has none.
    type Version = Option<String>;
    type Client = tokio_postgres::Error;

    fn queue_for_locks(&mut self) {
        self.queue = true;
    }

    fn read_claim(
        &mut self,
        req: &ClaimRequest,
    ) -> Result<Read<(rules::ClaimState, Self::Version)>, Fail> {
        let now = self.now;
        let state = self.run(async |c| read_claim_state(c, now, req).await)?;
        Ok(Read::Got((state.claim, state.version)))
    }

    fn read_run(
        &mut self,
        job: &str,
        run_id: &str,
        need: Need,
    ) -> Result<Read<(RunRead, Self::Version)>, Fail> {
        let now = self.now;
        let state = self.run(async |c| read_row_state(c, now, job, run_id).await)?;
        let (version, lease) = state.row.unzip();
        let read = RunRead {
            now: state.now,
            lease,
            // A record of another job is not this job's to change.
            record: state.record.filter(|r| r.job == job),
            slot_runs: if need.slot {
                state.slot_runs
            } else {
                Vec::new()
            },
        };
        Ok(Read::Got((read, version)))
    }

    fn read_lease(
        &mut self,
        job: &str,
        _live: bool,
    ) -> Result<Read<(LeaseRead, Self::Version)>, Fail> {
        let now = self.now;
        let state = self.run(async |c| read_row_state(c, now, job, "").await)?;
        let (version, lease) = state.row.unzip();
        Ok(Read::Got((
            LeaseRead {
                now: state.now,
                lease,
            },
            version,
        )))
    }

    /// The lease row's `xmin` and the slot's records in one statement; none (and no
    /// version) while the job has no lease row.
    fn read_slot(
        &mut self,
        job: &str,
        slot: i64,
    ) -> Result<Read<(engine::Records, Self::Version)>, Fail> {
        self.run(async |c| {
            let rows = c
                .query_typed(
                    "SELECT l.xmin::text,
                       (SELECT jsonb_agg(to_jsonb(r) ORDER BY r.seq)::text
                          FROM jobguard_run r WHERE r.job = $1 AND r.slot_usec = $2)
                     FROM jobguard_lease l WHERE l.job = $1",
                    &[(&job, Type::TEXT), (&slot, Type::INT8)],
                )
                .await?;
            Ok(Read::Got(match rows.first() {
                Some(row) => (runs_from_json(row.try_get(1)?)?, Some(row.try_get(0)?)),
                None => (Vec::new(), None),
            }))
        })
    }

    /// A grant: the lease row, the records it changes and its new record
    /// ([`write_grant`]); the job's first grant first inserts its lease row (the token
    /// counter) and reads again. A renewal: the row's `expire_at` and `renewal`. An end,
    /// an unlock or a resolve: the row released or kept and the records changed
    /// ([`write_end`]).
    fn commit(&mut self, version: Self::Version, writes: &Writes) -> Result<Commit, Fail> {
        let job = writes.job.as_str();
        let done = match (&writes.lease, &version) {
            (LeaseWrite::Grant { .. }, None) => {
                self.run(async |c| {
                    c.execute_typed(
                        "INSERT INTO jobguard_lease (job, holder, host, token, acquired_at,
                             expire_at) VALUES ($1, '', '', 0, 0, 0)
                         ON CONFLICT (job) DO NOTHING",
                        &[(&job, Type::TEXT)],
                    )
                    .await?;
                    Ok(())
                })?;
                false
            }
            (LeaseWrite::Grant { lease, run, .. }, Some(v)) => {
                let changed: Vec<&Run> = writes
                    .changed()
                    .filter(|(_, before)| before.is_some())
                    .map(|(r, _)| r)
                    .collect();
                let queue = self.queue;
                return self.run(async |c| write_grant(c, v, lease, run, &changed, queue).await);
            }
            (LeaseWrite::Renew(renewed), Some(v)) => {
                let n = self.run(async |c| {
                    Ok(c.execute_typed(
                        "UPDATE jobguard_lease SET expire_at = $3, renewal = $4
                         WHERE job = $1 AND xmin::text = $2",
                        &[
                            (&job, Type::TEXT),
                            (v, Type::TEXT),
                            (&renewed.expire_at, Type::INT8),
                            (&renewed.renewal, Type::INT8),
                        ],
                    )
                    .await?)
                })?;
                n == 1
            }
            (LeaseWrite::Renew(_), None) => false,
            (LeaseWrite::Release(_) | LeaseWrite::Keep, version) => {
                let release = matches!(writes.lease, LeaseWrite::Release(_));
                let records: Vec<_> = writes.changed().collect();
                self.run(async |c| write_end(c, job, version.as_deref(), release, &records).await)?
            }
        };
        Ok(if done { Commit::Done } else { Commit::Changed })
    }
}

/// Opens the store at `address` for [`crate::store::registry`]; `clock` is not used: the server's clock judges.
///
/// # Errors
/// As [`PostgresStore::open`].
pub(crate) fn open_boxed(
    address: &str,
    clock: std::sync::Arc<dyn crate::guard::clock::Clock>,
) -> Result<Box<dyn Store>, StoreError> {
    let _ = clock;
    Ok(Box::new(PostgresStore::open(address)?))
}

impl Store for PostgresStore {
    /// Ends the session ([`PostgresStore::close`]): a backend process of the server, and
    /// one of its `max_connections` (and of the role's `CONNECTION LIMIT`), is free until
    /// the next call.
    fn rest(&mut self) {
        self.close();
    }

    fn describe(&self) -> String {
        self.describe.clone()
    }

    engine::store_ops!(renew);

    fn init(&mut self) -> Result<(), StoreError> {
        let fast = self.call(async |c| {
            let rows = c
                .query_typed(
                    "SELECT value, to_regclass('jobguard_run_outcome') IS NOT NULL
                       FROM jobguard_meta WHERE key = 'schema_version'",
                    &[],
                )
                .await?;
            rows.first()
                .map(|r| Ok((r.try_get::<_, i64>(0)?, r.try_get::<_, bool>(1)?)))
                .transpose()
        });
        let (version, indexed) = match fast {
            Ok(Some((v, indexed))) => (Some(v), indexed),
            Ok(None) => (None, false),
            Err(e) if missing_schema(&e) => (None, false),
            Err(e) => return Err(self.error("read schema version", e)),
        };
        let newer = match version {
            Some(v) if v == SCHEMA_VERSION => None,
            Some(v) if v > SCHEMA_VERSION => Some(v),
            _ => {
                let schema = self.schema.clone();
                self.call(async |c| Self::migrate(c, schema.as_deref()).await)
                    .map_err(|e| self.error("create schema", e))?
            }
        };
        if let Some(v) = newer {
            return Err(self.newer_schema(v));
        }
        if !indexed {
            // A user without the right to create indexes (only the table's owner may)
            // goes on without it: the reads are slower, not wrong.
            let _ = self.call(async |c| create_table(c, EXTRA_INDEXES).await);
        }
        self.schema_ready = true;
        Ok(())
    }

    fn now(&mut self) -> Result<i64, StoreError> {
        let now = self.test_now();
        self.call(async |c| {
            let rows = c
                .query_typed(&format!("SELECT {NOW_US}"), &[(&now, Type::INT8)])
                .await?;
            let row = rows.first().ok_or(Fail::Data("no time".to_string()))?;
            Ok(row.try_get(0)?)
        })
        .map_err(|e| self.error("read time", e))
    }

    fn lease(&mut self, job: &str) -> Result<Option<Lease>, StoreError> {
        self.ready()?;
        self.with_schema("read lease", async |c| {
            let rows = c
                .query_typed(
                    "SELECT holder, host, token, acquired_at, expire_at, renewal
                     FROM jobguard_lease WHERE job = $1 AND holder <> ''",
                    &[(&job, Type::TEXT)],
                )
                .await?;
            rows.first().map(|r| lease_from(job, r, 0)).transpose()
        })
    }

    fn read_mark(&mut self, namespace: &str, key: &str) -> Result<Option<Mark>, StoreError> {
        self.ready()?;
        self.with_schema("read a mark", async |c| {
            // The table comes with the first mark.
            let rows = rows_if_made(
                c,
                "SELECT job, run_id, host, token, marked_at FROM jobguard_mark
                 WHERE namespace = $1 AND mark_key = $2",
                &[(&namespace, Type::TEXT), (&key, Type::TEXT)],
            )
            .await?;
            rows.first()
                .map(|r| {
                    Ok(Mark {
                        namespace: namespace.to_string(),
                        key: key.to_string(),
                        job: r.try_get(0)?,
                        run_id: r.try_get(1)?,
                        host: r.try_get(2)?,
                        token: r.try_get(3)?,
                        marked_at: r.try_get(4)?,
                    })
                })
                .transpose()
        })
    }

    /// The fence ([`rules::mark_fence_holds`]) is judged on the lease row and the server's
    /// time read in one statement; the insert then holds only while the row is the version
    /// read (locked `FOR SHARE`, so a takeover that comes later cannot write its grant
    /// before this commit, and reads the mark) and the server's clock is before
    /// [`rules::fence_deadline`].
    fn insert_mark(&mut self, mark: &Mark, fenced: bool) -> Result<bool, StoreError> {
        self.ready()?;
        let now = self.test_now();
        let sql = format!(
            "INSERT INTO jobguard_mark (namespace, mark_key, job, run_id, host, token, marked_at)
             SELECT $2, $3, $4, $5, $6, $7, $8
              WHERE $9::text IS NULL OR (EXISTS (SELECT 1 FROM jobguard_lease
                      WHERE job = $4 AND xmin::text = $9 FOR SHARE) AND {NOW_US} < $10)
             ON CONFLICT (namespace, mark_key) DO NOTHING RETURNING 1"
        );
        self.with_schema("mark", async |c| {
            let (version, deadline) = if fenced {
                let state = read_row_state(c, now, &mark.job, "").await?;
                let row = state.row.as_ref().map(|(_, l)| l);
                if !rules::mark_fence_holds(state.now, row, mark, true) {
                    return Ok(false);
                }
                (
                    state.row.as_ref().map(|(v, _)| v.clone()),
                    rules::fence_deadline(row, true),
                )
            } else {
                (None, None)
            };
            let values: [(&(dyn tokio_postgres::types::ToSql + Sync), Type); 10] = [
                (&now, Type::INT8),
                (&mark.namespace, Type::TEXT),
                (&mark.key, Type::TEXT),
                (&mark.job, Type::TEXT),
                (&mark.run_id, Type::TEXT),
                (&mark.host, Type::TEXT),
                (&mark.token, Type::INT8),
                (&mark.marked_at, Type::INT8),
                (&version, Type::TEXT),
                (&deadline, Type::INT8),
            ];
            match c.query_typed(&sql, &values).await {
                Err(e) if e.code() == Some(&SqlState::UNDEFINED_TABLE) => {
                    create_table(c, MARK_TABLE).await?;
                    Ok(c.query_typed(&sql, &values).await?.len() == 1)
                }
                got => Ok(got?.len() == 1),
            }
        })
    }

    fn delete_marks(&mut self, job: &str, before: i64) -> Result<usize, StoreError> {
        self.ready()?;
        self.with_schema("delete marks", async |c| {
            match c
                .execute_typed(
                    "DELETE FROM jobguard_mark WHERE job = $1 AND marked_at < $2",
                    &[(&job, Type::TEXT), (&before, Type::INT8)],
                )
                .await
            {
                Err(e) if e.code() == Some(&SqlState::UNDEFINED_TABLE) => Ok(0),
                got => Ok(usize::try_from(got?).unwrap_or(usize::MAX)),
            }
        })
    }

    fn count_marks(&mut self, job: &str, before: i64) -> Result<usize, StoreError> {
        self.ready()?;
        self.with_schema("count marks", async |c| {
            let rows = rows_if_made(
                c,
                "SELECT count(*) FROM jobguard_mark WHERE job = $1 AND marked_at < $2",
                &[(&job, Type::TEXT), (&before, Type::INT8)],
            )
            .await?;
            let n: i64 = rows.first().map(|r| r.try_get(0)).transpose()?.unwrap_or(0);
            Ok(usize::try_from(n).unwrap_or(usize::MAX))
        })
    }

    fn read_schedule(&mut self, job: &str) -> Result<Option<ScheduleDecl>, StoreError> {
        self.ready()?;
        self.with_schema("read the schedule", async |c| {
            // The table comes with the first declaration (no schema version for it: a
            // jobguard that does not know it leaves it alone).
            let rows = rows_if_made(
                c,
                "SELECT fingerprint, defined_at, host, seen_at, horizon FROM jobguard_schedule
                 WHERE job = $1",
                &[(&job, Type::TEXT)],
            )
            .await?;
            rows.first()
                .map(|r| {
                    Ok(ScheduleDecl {
                        job: job.to_string(),
                        fingerprint: r.try_get(0)?,
                        defined_at: r.try_get(1)?,
                        host: r.try_get(2)?,
                        seen_at: r.try_get(3)?,
                        horizon: r.try_get(4)?,
                    })
                })
                .transpose()
        })
    }

    fn swap_schedule(
        &mut self,
        expected: Option<&ScheduleDecl>,
        new: &ScheduleDecl,
    ) -> Result<bool, StoreError> {
        self.ready()?;
        self.with_schema("declare the schedule", async |c| {
            let mut values: Vec<(&(dyn tokio_postgres::types::ToSql + Sync), Type)> = vec![
                (&new.job, Type::TEXT),
                (&new.fingerprint, Type::TEXT),
                (&new.defined_at, Type::INT8),
                (&new.host, Type::TEXT),
                (&new.seen_at, Type::INT8),
                (&new.horizon, Type::INT8),
            ];
            let sql = match expected {
                None => {
                    "INSERT INTO jobguard_schedule
                       (job, fingerprint, defined_at, host, seen_at, horizon)
                     VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (job) DO NOTHING RETURNING 1"
                }
                Some(e) => {
                    values.extend([
                        (
                            &e.fingerprint as &(dyn tokio_postgres::types::ToSql + Sync),
                            Type::TEXT,
                        ),
                        (&e.defined_at, Type::INT8),
                        (&e.seen_at, Type::INT8),
                    ]);
                    "UPDATE jobguard_schedule SET fingerprint = $2, defined_at = $3, host = $4,
                       seen_at = $5, horizon = $6
                     WHERE job = $1 AND fingerprint = $7 AND defined_at = $8 AND seen_at = $9
                     RETURNING 1"
                }
            };
            // The table exists unless no host has declared a schedule in this schema since
            // it was made by a jobguard before schedules: creating it takes the right to
            // create in the schema, which a host's user need not have once it exists.
            match c.query_typed(sql, &values).await {
                Err(e) if e.code() == Some(&SqlState::UNDEFINED_TABLE) => {
                    create_schedule_table(c).await?;
                    Ok(c.query_typed(sql, &values).await?.len() == 1)
                }
                got => Ok(got?.len() == 1),
            }
        })
    }

    fn put_beat(&mut self, host: &str, beat: &str) -> Result<(), StoreError> {
        self.ready()?;
        self.with_schema("write the heartbeat", async |c| {
            let sql = "INSERT INTO jobguard_host (host, beat) VALUES ($1, $2)
                       ON CONFLICT (host) DO UPDATE SET beat = EXCLUDED.beat";
            let values: [(&(dyn tokio_postgres::types::ToSql + Sync), Type); 2] =
                [(&host, Type::TEXT), (&beat, Type::TEXT)];
            match c.query_typed(sql, &values).await {
                Err(e) if e.code() == Some(&SqlState::UNDEFINED_TABLE) => {
                    create_table(c, BEAT_TABLE).await?;
                    c.query_typed(sql, &values).await?;
                    Ok(())
                }
                got => got.map(|_| ()).map_err(Fail::from),
            }
        })
    }

    fn beats(&mut self) -> Result<Vec<(String, String)>, StoreError> {
        self.ready()?;
        self.with_schema("read the heartbeats", async |c| {
            rows_if_made(c, "SELECT host, beat FROM jobguard_host", &[])
                .await?
                .iter()
                .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
                .collect()
        })
    }

    fn read_beat(&mut self, key: &str) -> Result<Option<String>, StoreError> {
        self.ready()?;
        self.with_schema("read a fleet record", async |c| {
            rows_if_made(
                c,
                "SELECT beat FROM jobguard_host WHERE host = $1",
                &[(&key, Type::TEXT)],
            )
            .await?
            .first()
            .map(|r| r.try_get(0))
            .transpose()
            .map_err(Fail::from)
        })
    }

    fn forget_beats(&mut self, hosts: &[String]) -> Result<(), StoreError> {
        self.ready()?;
        self.with_schema("forget heartbeats", async |c| {
            for host in hosts {
                rows_if_made(
                    c,
                    "DELETE FROM jobguard_host WHERE host = $1",
                    &[(host, Type::TEXT)],
                )
                .await?;
            }
            Ok(())
        })
    }

    fn outcome_counts(&mut self, job: &str) -> Result<Vec<(Outcome, u64)>, StoreError> {
        self.ready()?;
        self.with_schema("count runs", async |c| {
            let rows = c
                .query_typed(
                    "SELECT outcome, count(*) FROM jobguard_run WHERE job = $1 GROUP BY outcome",
                    &[(&job, Type::TEXT)],
                )
                .await?;
            rows.iter()
                .map(|r| {
                    let outcome: String = r.try_get(0)?;
                    let n: i64 = r.try_get(1)?;
                    let outcome: Outcome = outcome.parse().map_err(Fail::Data)?;
                    Ok((outcome, u64::try_from(n).unwrap_or(0)))
                })
                .collect()
        })
    }

    fn jobs(&mut self) -> Result<Vec<String>, StoreError> {
        self.ready()?;
        let sql = format!("SELECT job FROM {} j", crate::store::EVERY_JOB);
        self.with_schema("list jobs", async |c| {
            let rows = c.query_typed(&sql, &[]).await?;
            let mut jobs = rows
                .iter()
                .map(|r| Ok(r.try_get(0)?))
                .collect::<Result<Vec<String>, Fail>>()?;
            // By bytes, whatever the database's collation.
            jobs.sort();
            Ok(jobs)
        })
    }

    fn runs(&mut self, query: &RunQuery) -> Result<Vec<Run>, StoreError> {
        self.ready()?;
        let outcomes: Vec<&str> = query.outcomes.iter().map(|o| o.as_str()).collect();
        let resolutions: Vec<&str> = query.resolutions.iter().map(|r| r.as_str()).collect();
        let limit = (query.limit > 0).then(|| i64::try_from(query.limit).unwrap_or(i64::MAX));
        // With `slots_from`, the records come from each job's window (rules::window): its
        // slots from $6 on, its newest slot before $6 (the anchor), its newest slot before
        // $6 with a record that names a schedule, and its first record started before $6
        // (each part without the records of another). Index reads per job,
        // each with a row estimate PostgreSQL can make (a bound computed per job would be
        // guessed at a third of the job's records, and the query's cost then turns on JIT
        // compilation, 100-200 ms for a read of a few ms).
        let source = match (query.slots_from, &query.job) {
            (None, _) => "jobguard_run r".to_string(),
            (Some(_), job) => format!(
                "{} j,
                 LATERAL (SELECT max(p.slot_usec) AS anchor FROM jobguard_run p
                           WHERE p.job = j.job AND p.slot_usec < $6) a,
                 LATERAL (SELECT (SELECT p.slot_usec FROM jobguard_run p
                                   WHERE p.job = j.job AND p.slot_usec < $6
                                     AND (p.outcome IN ('succeeded', 'failed')
                                          OR p.report::jsonb ? '{key}')
                                   ORDER BY p.slot_usec DESC LIMIT 1) AS named) n,
                 LATERAL (SELECT w.* FROM jobguard_run w
                           WHERE w.job = j.job AND w.slot_usec >= $6
                          UNION ALL
                          SELECT w.* FROM jobguard_run w
                           WHERE w.job = j.job AND w.slot_usec = a.anchor
                          UNION ALL
                          SELECT w.* FROM jobguard_run w
                           WHERE w.job = j.job AND w.slot_usec = n.named
                             AND n.named <> a.anchor
                          UNION ALL
                          SELECT f.* FROM (SELECT p.* FROM jobguard_run p
                                            WHERE p.job = j.job AND p.slot_usec < $6
                                            ORDER BY p.started_at, p.seq LIMIT 1) f
                           WHERE f.slot_usec <> a.anchor
                             AND f.slot_usec IS DISTINCT FROM n.named) r",
                if job.is_some() {
                    "(SELECT $1::text AS job)"
                } else {
                    crate::store::EVERY_JOB
                },
                key = crate::guard::ledger::SCHEDULE
            ),
        };
        let sql = format!(
            "SELECT to_jsonb(r)::text FROM {source}
             WHERE ($1::text IS NULL OR r.job = $1)
               AND ($2::bigint IS NULL OR r.slot_usec = $2)
               AND (cardinality($3::text[]) = 0 OR r.outcome = ANY($3))
               AND (cardinality($4::text[]) = 0 OR r.resolution = ANY($4))
             ORDER BY r.started_at DESC, r.seq DESC LIMIT $5"
        );
        self.with_schema("read runs", async |c| {
            let rows = c
                .query_typed(
                    &sql,
                    &[
                        (&query.job, Type::TEXT),
                        (&query.slot, Type::INT8),
                        (&outcomes, Type::TEXT_ARRAY),
                        (&resolutions, Type::TEXT_ARRAY),
                        (&limit, Type::INT8),
                        (&query.slots_from, Type::INT8),
                    ],
                )
                .await?;
            rows.iter()
                .map(|r| {
                    let json: String = r.try_get(0)?;
                    remote::run_from_json(&json).map_err(Fail::Data)
                })
                .collect()
        })
    }

    fn delete_slots(
        &mut self,
        job: &str,
        slots: &[i64],
        started_before: i64,
    ) -> Result<usize, StoreError> {
        let mut n = 0;
        for chunk in slots.chunks(200) {
            n += self.with_schema("delete runs", async |c| {
                // The lease row is the job's lock (the claim takes it): a claim that
                // adds an attempt to one of these slots commits before the delete reads,
                // or after it.
                let tx = c.transaction().await?;
                tx.query_typed(
                    "SELECT 1 FROM jobguard_lease WHERE job = $1 FOR UPDATE",
                    &[(&job, Type::TEXT)],
                )
                .await?;
                let n = tx
                    .query_typed(
                        "DELETE FROM jobguard_run r
                         WHERE r.job = $1 AND r.slot_usec = ANY($2)
                           AND NOT EXISTS (SELECT 1 FROM jobguard_run o
                             WHERE o.job = $1 AND o.slot_usec = r.slot_usec
                               AND (o.outcome = 'running' OR o.started_at >= $3))
                         RETURNING 1",
                        &[
                            (&job, Type::TEXT),
                            (&chunk, Type::INT8_ARRAY),
                            (&started_before, Type::INT8),
                        ],
                    )
                    .await?
                    .len();
                tx.commit().await?;
                Ok(n)
            })?;
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(mode: Option<&str>, root: Option<&str>) -> (Mode, Check, bool) {
        let p = tls_plan(mode, root).unwrap_or_else(|e| panic!("{mode:?} {root:?}: {e}"));
        (p.mode, p.check, matches!(p.roots, Roots::System))
    }

    #[test]
    fn sslmode_and_sslrootcert_as_libpq() {
        let dir = tempfile::tempdir().unwrap();
        let ca = dir.path().join("ca.pem");
        std::fs::write(&ca, test_certificate()).unwrap();
        let ca = ca.to_str().unwrap();
        let none = None;
        assert_eq!(plan(none, none), (Mode::Prefer, Check::Nothing, true));
        assert_eq!(
            plan(Some("disable"), none),
            (Mode::Disable, Check::Nothing, true)
        );
        assert_eq!(
            plan(Some("allow"), none),
            (Mode::Allow, Check::Nothing, true)
        );
        assert_eq!(
            plan(Some("require"), none),
            (Mode::Require, Check::Nothing, true)
        );
        assert_eq!(
            plan(Some("verify-full"), none),
            (Mode::VerifyFull, Check::ChainAndName, true)
        );
        assert_eq!(
            plan(none, Some("system")),
            (Mode::VerifyFull, Check::ChainAndName, true)
        );
        assert_eq!(plan(none, Some(ca)), (Mode::Prefer, Check::Chain, false));
        assert_eq!(
            plan(Some("require"), Some(ca)),
            (Mode::Require, Check::Chain, false)
        );
        assert_eq!(
            plan(Some("verify-ca"), Some(ca)),
            (Mode::VerifyCa, Check::Chain, false)
        );
        assert_eq!(
            plan(Some("verify-full"), Some(ca)),
            (Mode::VerifyFull, Check::ChainAndName, false)
        );
        for (mode, root) in [
            (Some("verify-ca"), None),
            (Some("prefer"), Some("system")),
            (Some("disable"), Some(ca)),
            (Some("VERIFY-FULL"), None),
        ] {
            assert!(tls_plan(mode, root).is_err(), "{mode:?} {root:?}");
        }
    }

    /// A self-signed certificate in PEM (made once with `openssl req -x509`, EC P-256).
    fn test_certificate() -> &'static str {
        "-----BEGIN CERTIFICATE-----\n\
MIIBkDCCATWgAwIBAgIUJNYP48yGU/iQsf34o08RnAl39B8wCgYIKoZIzj0EAwIw\n\
HTEbMBkGA1UEAwwSam9iZ3VhcmQgdW5pdCB0ZXN0MB4XDTI2MTEyOTE0Mzk0OFoX\n\
DTM2MTEyNjE0Mzk0OFowHTEbMBkGA1UEAwwSam9iZ3VhcmQgdW5pdCB0ZXN0MFkw\n\
EwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE+ZHkfIt3lHToH4M1pmNz87P15KQpLSuu\n\
iJKEPEVcCaGTMeRqG526JHc+b0wZKz6CiDc0YE8cDZ8ncPySpxDEIKNTMFEwHQYD\n\
VR0OBBYEFPbwGM3C4d7bzomRavrRmV9lM4l4MB8GA1UdIwQYMBaAFPbwGM3C4d7b\n\
zomRavrRmV9lM4l4MA8GA1UdEwEB/wQFMAMBAf8wCgYIKoZIzj0EAwIDSQAwRgIh\n\
AOEqm3x0PyouuKp0CCpqDu18VwCSUvwh383q/Hz5OQRZAiEA9kvosMso1UoPcPxT\n\
vlDo3ea6vj/dEd3VCh+PgI2gjpc=\n\
-----END CERTIFICATE-----\n"
    }
}

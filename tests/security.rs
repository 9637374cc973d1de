//! The threat model of SECURITY.md, claim by claim: jobguard runs as root and uses only
//! files that only root can change (the SQLite store and every directory above it, the
//! job list, `store_file`, credentials, TLS files); it never shows a password, whatever
//! form the address has; `jobguard check` warns about weak settings.
//!
//! The path checks apply when jobguard runs as root: these tests need root (they print
//! `SKIPPED` otherwise, and fail in CI) and the `nobody` account, which stands for a
//! job's less privileged user. The masking tests run the real binary with a marker
//! password through every command that reads or reports a store address and search
//! everything it printed.

mod common;
mod support;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Output;

use support::{Sandbox, stderr, stdout};

/// uid and gid of `nobody`: the job's user in these tests.
const NOBODY: u32 = 65534;

/// Whether the test can run: as root, with `nobody` present. Fails in CI otherwise.
fn as_root(test: &str) -> bool {
    let why = if !nix::unistd::geteuid().is_root() {
        Some("needs root".to_string())
    } else if nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(NOBODY))
        .ok()
        .flatten()
        .is_none()
    {
        Some("needs the nobody account (uid 65534)".to_string())
    } else {
        None
    };
    match why {
        None => true,
        Some(why)
            if std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "0" && v != "false") =>
        {
            panic!("{test}: cannot run in CI: {why}")
        }
        Some(why) => {
            eprintln!("SKIPPED {test}: {why}");
            false
        }
    }
}

fn chown(p: &Path, uid: u32) {
    std::os::unix::fs::lchown(p, Some(uid), Some(uid)).expect("chown");
}

fn chmod(p: &Path, mode: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

fn mkdir(p: &Path, uid: u32, mode: u32) {
    std::fs::create_dir_all(p).expect("mkdir");
    chown(p, uid);
    chmod(p, mode);
}

/// A root-owned file with mode 0600 and no content: what the attack turned into a database.
fn root_file(p: &Path) {
    std::fs::write(p, "").expect("write");
    chmod(p, 0o600);
}

fn all(o: &Output) -> String {
    format!("{}{}", stdout(o), stderr(o))
}

/// The root-owned file must still be empty: not an SQLite database.
fn untouched(p: &Path) {
    let meta = std::fs::metadata(p).expect("target");
    assert_eq!(meta.len(), 0, "{} was written by root", p.display());
    assert_eq!(meta.uid(), 0);
}

fn job(name: &str, extra: &str) -> String {
    format!(
        "[jobs.{name}]\nschedule = \"*-*-* 02:00:00 UTC\"\ncommand = [\"/bin/true\"]\n{extra}\n"
    )
}

/// Defect: the job's user owned the directory of a relative SQLite store. Its command
/// swapped the store's directory for one holding a symlink to a root-owned file, and the
/// next run (as root) turned that file into an SQLite database. Every run of the history
/// is refused now, before the command runs, and the file stays as it was.
#[test]
fn a_job_user_who_owns_the_store_directory_cannot_make_root_write_through_a_symlink() {
    if !as_root("a_job_user_who_owns_the_store_directory_cannot_make_root_write_through_a_symlink")
    {
        return;
    }
    let sb = Sandbox::new(&job(
        "swap",
        "user = \"nobody\"\nstore = \"sqlite://app/state/jg.db\"\nworking_directory = \"@DIR@/app\"\n\
         command = [\"/bin/sh\", \"-c\", \"rm -rf state.old; mv state state.old; mkdir state && ln -s @DIR@/rootfile state/jg.db\"]",
    ));
    let sb_job = std::fs::read_to_string(sb.file("jobs.toml")).unwrap();
    // The job above has two `command` keys once the default one is added: drop the first.
    let fixed = sb_job.replacen("command = [\"/bin/true\"]\n", "", 1);
    std::fs::write(sb.file("jobs.toml"), fixed).unwrap();
    chmod(sb.path(), 0o755);
    mkdir(&sb.file("app"), NOBODY, 0o755);
    root_file(&sb.file("rootfile"));
    for slot in [
        "2026-11-26T02:00:00Z",
        "2026-11-27T02:00:00Z",
        "2026-11-28T02:00:00Z",
    ] {
        let out = sb.run(&["run", "swap", "--slot", slot]);
        untouched(&sb.file("rootfile"));
        assert_eq!(out.status.code(), Some(78), "slot {slot}: {}", all(&out));
        assert!(
            stderr(&out).contains(&format!(
                "{} is owned by uid {NOBODY}",
                sb.file("app").display()
            )),
            "slot {slot}: {}",
            stderr(&out)
        );
    }
    // `check` names the path and why.
    let out = sb.run(&["check"]);
    assert_eq!(out.status.code(), Some(1), "{}", all(&out));
    assert!(stderr(&out).contains("jobs.swap.store"), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!(
            "{} is owned by uid {NOBODY}",
            sb.file("app").display()
        )),
        "{}",
        stderr(&out)
    );
}

/// The same attack constructed directly: every directory is root's, but the store's
/// file is a symlink (whoever made it). Refused, and the target is not written.
#[test]
fn an_sqlite_store_that_is_a_symlink_is_refused() {
    if !as_root("an_sqlite_store_that_is_a_symlink_is_refused") {
        return;
    }
    let sb = Sandbox::new(&job("link", ""));
    std::fs::create_dir(sb.file("state")).unwrap();
    chmod(&sb.file("state"), 0o700);
    root_file(&sb.file("rootfile"));
    std::os::unix::fs::symlink(sb.file("rootfile"), sb.file("state/jobguard.db")).unwrap();
    for slot in ["2026-11-27T02:00:00Z", "2026-11-28T02:00:00Z"] {
        let out = sb.run(&["run", "link", "--slot", slot]);
        untouched(&sb.file("rootfile"));
        assert_eq!(out.status.code(), Some(78), "{}", all(&out));
        assert!(
            stderr(&out).contains(&format!(
                "{} is a symbolic link",
                sb.file("state/jobguard.db").display()
            )),
            "{}",
            stderr(&out)
        );
    }
    for cmd in [&["history", "link"][..], &["unlock", "link"], &["recover"]] {
        let out = sb.run(cmd);
        untouched(&sb.file("rootfile"));
        assert_ne!(out.status.code(), Some(0), "{cmd:?}: {}", all(&out));
        assert!(
            stderr(&out).contains("is a symbolic link"),
            "{cmd:?}: {}",
            all(&out)
        );
    }
}

/// A directory above the store that its group or others may write: they could swap the
/// store's directory or file. Refused by the run and named by `check`.
#[test]
fn a_group_writable_store_directory_is_refused() {
    if !as_root("a_group_writable_store_directory_is_refused") {
        return;
    }
    let sb = Sandbox::new(&job("gw", ""));
    mkdir(&sb.file("state"), 0, 0o775);
    let out = sb.run(&["run", "gw", "--slot", "2026-11-28T02:00:00Z"]);
    assert_eq!(out.status.code(), Some(78), "{}", all(&out));
    let why = format!(
        "{} is writable by group or others (mode 0775)",
        sb.file("state").display()
    );
    assert!(stderr(&out).contains(&why), "{}", stderr(&out));
    assert!(!sb.file("state/jobguard.db").exists());
    let out = sb.run(&["check"]);
    assert_eq!(out.status.code(), Some(1), "{}", all(&out));
    assert!(stderr(&out).contains(&why), "{}", stderr(&out));

    // Fixed modes: it runs, and the store it made is root's 0600 in a directory of 0700.
    chmod(&sb.file("state"), 0o755);
    let out = sb.run(&["run", "gw", "--slot", "2026-11-28T02:00:00Z"]);
    assert_eq!(out.status.code(), Some(0), "{}", all(&out));
    let m = std::fs::metadata(sb.file("state/jobguard.db")).unwrap();
    assert_eq!((m.uid(), m.mode() & 0o777), (0, 0o600));
}

/// The store file itself owned by the job's user, or writable by others: refused.
#[test]
fn an_sqlite_store_file_owned_by_another_user_is_refused() {
    if !as_root("an_sqlite_store_file_owned_by_another_user_is_refused") {
        return;
    }
    let sb = Sandbox::new(&job("own", ""));
    mkdir(&sb.file("state"), 0, 0o700);
    let out = sb.run(&["run", "own", "--slot", "2026-11-28T02:00:00Z"]);
    assert_eq!(out.status.code(), Some(0), "{}", all(&out));
    let db = sb.file("state/jobguard.db");
    chown(&db, NOBODY);
    let out = sb.run(&["run", "own", "--slot", "2026-11-29T02:00:00Z"]);
    assert_eq!(out.status.code(), Some(78), "{}", all(&out));
    assert!(
        stderr(&out).contains(&format!("{} is owned by uid {NOBODY}", db.display())),
        "{}",
        stderr(&out)
    );
    chown(&db, 0);
    chmod(&db, 0o666);
    let out = sb.run(&["run", "own", "--slot", "2026-11-29T02:00:00Z"]);
    assert_eq!(out.status.code(), Some(78), "{}", all(&out));
    assert!(
        stderr(&out).contains(&format!(
            "{} is writable by group or others (mode 0666)",
            db.display()
        )),
        "{}",
        stderr(&out)
    );
}

/// A job-list file in jobs.d that is a symlink to a file the job's user owns: that user
/// could write a job that runs as root. The file is not read: `check` names it, `run`
/// does not know its jobs, the generator writes no unit for them and still writes the
/// others.
#[test]
fn a_jobs_d_file_that_links_to_a_file_another_user_owns_is_not_read() {
    if !as_root("a_jobs_d_file_that_links_to_a_file_another_user_owns_is_not_read") {
        return;
    }
    let sb = Sandbox::new(&job("good", ""));
    mkdir(&sb.file("app"), NOBODY, 0o755);
    std::fs::write(sb.file("app/jobs.toml"), job("evil", "")).unwrap();
    chown(&sb.file("app/jobs.toml"), NOBODY);
    std::fs::create_dir(sb.file("jobs.d")).unwrap();
    std::os::unix::fs::symlink(sb.file("app/jobs.toml"), sb.file("jobs.d/app.toml")).unwrap();
    let dir = sb.path().to_str().unwrap();
    let run = |args: &[&str]| {
        let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_jobguard"));
        c.args(args)
            .args(["--config", dir])
            .env("JOBGUARD_RUNTIME_DIR", sb.file("run"));
        c.output().unwrap()
    };
    let out = run(&["check"]);
    assert_eq!(out.status.code(), Some(1), "{}", all(&out));
    let why = format!(
        "{}: {} is owned by uid {NOBODY}",
        sb.file("jobs.d/app.toml").display(),
        sb.file("app").display()
    );
    assert!(stderr(&out).contains(&why), "{}", stderr(&out));
    assert!(stdout(&out).contains("1 valid job"), "{}", stdout(&out));
    let out = run(&["run", "evil"]);
    assert_eq!(out.status.code(), Some(78), "{}", all(&out));

    let units = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_jobguard-generator"))
        .arg(units.path())
        .env("JOBGUARD_CONFIG", dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", all(&out));
    assert!(stderr(&out).contains(&why), "{}", stderr(&out));
    assert!(units.path().join("jobguard@good.timer.d").exists());
    assert!(!units.path().join("jobguard@evil.timer.d").exists());
    assert!(!units.path().join("jobguard@evil.service.d").exists());
}

/// The main job-list file writable by others: not read.
#[test]
fn a_job_list_writable_by_others_is_not_read() {
    if !as_root("a_job_list_writable_by_others_is_not_read") {
        return;
    }
    let sb = Sandbox::new(&job("w", ""));
    chmod(&sb.file("jobs.toml"), 0o666);
    let out = sb.run(&["check"]);
    assert_eq!(out.status.code(), Some(1), "{}", all(&out));
    assert!(
        stderr(&out).contains("is writable by group or others (mode 0666)"),
        "{}",
        stderr(&out)
    );
    assert!(stdout(&out).contains("0 valid jobs"), "{}", stdout(&out));
}

/// A `store_file` the job's user owns could point the job at a store of that user's
/// choosing (or a symlink to any root-only file, shown in messages): refused by `check`
/// and `run`. One only readable by others is a warning (defect 7): its password is out.
#[test]
fn store_file_owned_by_another_user_is_refused_and_one_readable_by_others_is_a_warning() {
    if !as_root(
        "store_file_owned_by_another_user_is_refused_and_one_readable_by_others_is_a_warning",
    ) {
        return;
    }
    let sb = Sandbox::new(&job("sf", "store_file = \"store.addr\""));
    let addr = sb.file("store.addr");
    std::fs::write(
        &addr,
        format!("sqlite://{}/db/jg.db\n", sb.path().display()),
    )
    .unwrap();
    chmod(&addr, 0o600);
    let out = sb.run(&["check"]);
    assert_eq!(out.status.code(), Some(0), "{}", all(&out));
    assert!(!stderr(&out).contains("warning"), "{}", all(&out));

    chmod(&addr, 0o644);
    let out = sb.run(&["check"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "a warning is not an error: {}",
        all(&out)
    );
    assert!(
        stderr(&out).contains(&format!(
            "jobs.sf.store_file: warning: {} is readable by others (mode 0644)",
            addr.display()
        )),
        "{}",
        stderr(&out)
    );

    chown(&addr, NOBODY);
    let why = format!("{} is owned by uid {NOBODY}", addr.display());
    let out = sb.run(&["check"]);
    assert_eq!(out.status.code(), Some(1), "{}", all(&out));
    assert!(stderr(&out).contains(&why), "{}", stderr(&out));
    let out = sb.run(&["run", "sf", "--slot", "2026-11-28T02:00:00Z"]);
    assert_eq!(out.status.code(), Some(78), "{}", all(&out));
    assert!(stderr(&out).contains(&why), "{}", stderr(&out));
}

/// A credential file (systemd credentials, `$CREDENTIALS_DIRECTORY` here) owned by the
/// job's user: refused as the store_file is.
#[test]
fn a_store_credential_owned_by_another_user_is_refused() {
    if !as_root("a_store_credential_owned_by_another_user_is_refused") {
        return;
    }
    let sb = Sandbox::new(&job("cred", "store_credential = \"jg.store\""));
    mkdir(&sb.file("creds"), 0, 0o700);
    let cred = sb.file("creds/jg.store");
    std::fs::write(
        &cred,
        format!("sqlite://{}/db/jg.db\n", sb.path().display()),
    )
    .unwrap();
    chmod(&cred, 0o400);
    let ok = sb
        .cmd(&["run", "cred", "--slot", "2026-11-28T02:00:00Z"])
        .env("CREDENTIALS_DIRECTORY", sb.file("creds"))
        .output()
        .unwrap();
    assert_eq!(ok.status.code(), Some(0), "{}", all(&ok));
    chown(&cred, NOBODY);
    let out = sb
        .cmd(&["run", "cred", "--slot", "2026-11-29T02:00:00Z"])
        .env("CREDENTIALS_DIRECTORY", sb.file("creds"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(78), "{}", all(&out));
    assert!(
        stderr(&out).contains(&format!("{} is owned by uid {NOBODY}", cred.display())),
        "{}",
        stderr(&out)
    );
}

/// A TLS file (`sslrootcert`, `ssl-ca`) that the job's user owns would let that user
/// choose whom the store connection trusts: refused by `check`.
#[test]
fn a_tls_file_owned_by_another_user_is_refused() {
    if !as_root("a_tls_file_owned_by_another_user_is_refused") {
        return;
    }
    let ca = std::fs::read_to_string("/etc/ssl/certs/ca-certificates.crt").unwrap_or_default();
    if !ca.contains("BEGIN CERTIFICATE") {
        eprintln!("SKIPPED a_tls_file_owned_by_another_user_is_refused: no system CA bundle");
        return;
    }
    let sb = Sandbox::new(&job(
        "tls",
        "store = \"postgres://u@127.0.0.1:1/d?sslmode=verify-ca&sslrootcert=@DIR@/ca.pem\"\n\
         [jobs.tls2]\nschedule = \"daily\"\ncommand = [\"/bin/true\"]\n\
         store = \"mysql://u@127.0.0.1:1/d?ssl-ca=@DIR@/ca.pem\"\n\
         [jobs.tls3]\nschedule = \"daily\"\ncommand = [\"/bin/true\"]\n\
         store = \"rediss://127.0.0.1:1/0?ssl-ca=@DIR@/ca.pem\"",
    ));
    std::fs::write(sb.file("ca.pem"), &ca).unwrap();
    chmod(&sb.file("ca.pem"), 0o644);
    let out = sb.run(&["check"]);
    assert_eq!(out.status.code(), Some(0), "{}", all(&out));
    chown(&sb.file("ca.pem"), NOBODY);
    let out = sb.run(&["check"]);
    assert_eq!(out.status.code(), Some(1), "{}", all(&out));
    let why = format!("{} is owned by uid {NOBODY}", sb.file("ca.pem").display());
    for j in ["tls", "tls2", "tls3"] {
        assert!(
            stderr(&out)
                .lines()
                .any(|l| l.contains(&format!("jobs.{j}.store")) && l.contains(&why)),
            "{j}: {}",
            stderr(&out)
        );
    }
}

/// What the shim keeps from a job's user, over a history of runs: the command (as
/// `nobody`) cannot write the ledger or its directory, nor the lock directory; its report
/// file is its own, mode 0600. The store's directory jobguard made is root's 0700, the file
/// 0600.
#[test]
fn a_job_user_cannot_write_the_ledger_or_the_locks_and_owns_only_its_report() {
    if !as_root("a_job_user_cannot_write_the_ledger_or_the_locks_and_owns_only_its_report") {
        return;
    }
    let script = "for f in @DIR@/state/jobguard.db @DIR@/state/jobguard.db-wal; do \
                  if (: >> $f) 2>/dev/null; then echo wrote $f; fi; done; \
                  if touch @DIR@/run/lock/x.lock 2>/dev/null; then echo wrote lock; fi; \
                  if rm -f @DIR@/run/lock/own.lock 2>/dev/null && [ ! -e @DIR@/run/lock/own.lock ]; then echo removed lock; fi; \
                  stat -c '%u %a' \"$JOBGUARD_REPORT\"";
    let sb = Sandbox::new(&format!(
        "[jobs.own]\nschedule = \"*-*-* 02:00:00 UTC\"\nuser = \"nobody\"\n\
         command = [\"/bin/sh\", \"-c\", {:?}]\n",
        format!("({script}) >> @DIR@/out/log")
    ));
    chmod(sb.path(), 0o755);
    mkdir(&sb.file("out"), NOBODY, 0o755);
    let slots = [
        "2026-11-24T02:00:00Z",
        "2026-11-25T02:00:00Z",
        "2026-11-26T02:00:00Z",
        "2026-11-27T02:00:00Z",
    ];
    for slot in slots {
        let out = sb.run(&["run", "own", "--slot", slot]);
        assert_eq!(out.status.code(), Some(0), "{slot}: {}", all(&out));
    }
    let log = sb.read("out/log");
    assert_eq!(
        log,
        format!("{NOBODY} 600\n").repeat(slots.len()),
        "the job wrote what it must not"
    );
    let h = sb.history("own");
    assert_eq!(h.len(), slots.len());
    assert!(h.iter().all(|r| r["outcome"] == "succeeded"), "{h:?}");
    let dir = std::fs::metadata(sb.file("state")).unwrap();
    assert_eq!((dir.uid(), dir.mode() & 0o777), (0, 0o700));
    let db = std::fs::metadata(sb.file("state/jobguard.db")).unwrap();
    assert_eq!((db.uid(), db.mode() & 0o777), (0, 0o600));
}

/// The marker every password below holds (percent-encoded or not).
const MARKER: &str = "s3cr3t";

/// Store addresses in every form, each with a password that holds [`MARKER`]; the ports
/// are closed, so every store is unavailable at once. A password with `@`, `?`, `#` or
/// `:` has the marker between each, so that any piece of it a parser takes for a host or
/// a path still shows the marker.
const ADDRESSES: &[&str] = &[
    "postgres://u:s3cr3tMARKER@127.0.0.1:1/d",
    "postgresql://u:s3cr3t%4DARKER@127.0.0.1:1/d?sslmode=disable",
    "host=127.0.0.1 port=1 user=u password=s3cr3tMARKER dbname=d",
    "host=127.0.0.1 port=1 user=u password='s3cr3t MARKER' dbname=d",
    "redis:/:s3cr3tMARKER@127.0.0.1:1/0",
    "redis://:s3cr3tMARKER@s3cr3tMARKER?s3cr3tMARKER#s3cr3tMARKER:s3cr3tMARKER@127.0.0.1:1/0",
    "mysql://u:s3cr3tMARKER:s3cr3tMARKER@s3cr3tMARKER#s3cr3tMARKER@127.0.0.1:1/d",
    "mysql://u:s3cr3tMARKER?s3cr3tMARKER@127.0.0.1:1/d",
    "postgres://u:s3cr3tMARKER#s3cr3tMARKER@127.0.0.1:1/d",
    "postgres://u:s3cr3tMARKER@s3cr3tMARKER/s3cr3tMARKER@127.0.0.1:1/d",
    "mariadb://127.0.0.1:1/d?user=u&password=s3cr3tMARKER",
    "rediss://u:s3cr3tMARKER@127.0.0.1:1/0#insecure",
    "postgres:u:s3cr3tMARKER@127.0.0.1:1/d",
];

/// Every command that takes or reports a store address, with `job` as the job.
fn commands(job: &str) -> Vec<Vec<String>> {
    let v = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    vec![
        v(&["check"]),
        v(&["run", job]),
        v(&["run", job, "--slot", "2026-11-28T02:00:00Z"]),
        v(&["status"]),
        v(&["status", "--json"]),
        v(&["history", job]),
        v(&["history", job, "--json"]),
        v(&["recover"]),
        v(&["recover", job]),
        v(&["unlock", job]),
        v(&["resolve", job, "2026-11-28T02:00:00Z", "--done"]),
        v(&["store", "init"]),
    ]
}

fn assert_no_marker(what: &str, out: &str) {
    assert!(
        !out.to_lowercase().contains(MARKER) && !out.to_lowercase().contains("marker"),
        "{what} shows the password:\n{out}"
    );
}

/// Defect: a libpq keyword-form address in a store_file, and a malformed URL, were shown
/// whole, password and all, by `check` and `run` (and so in the journal and `STATUS=`).
/// Each form, from a store_file and from the job list itself, through every command.
#[test]
fn no_command_shows_a_password_in_any_address_form() {
    for (i, address) in ADDRESSES.iter().enumerate() {
        for from_file in [true, false] {
            let extra = if from_file {
                "store_file = \"store.addr\"\nstore_wait = \"0\"".to_string()
            } else {
                format!("store = {}\nstore_wait = \"0\"", toml_string(address))
            };
            let sb = Sandbox::new(&job("m", &extra));
            std::fs::write(sb.file("store.addr"), format!("{address}\n")).unwrap();
            chmod(&sb.file("store.addr"), 0o600);
            for cmd in commands("m") {
                let args: Vec<&str> = cmd.iter().map(String::as_str).collect();
                let out = sb
                    .cmd(&args)
                    .env("INVOCATION_ID", "0123456789abcdef0123456789abcdef")
                    .output()
                    .unwrap();
                assert_no_marker(
                    &format!("address {i} {address:?} (store_file: {from_file}), {cmd:?}"),
                    &all(&out),
                );
            }
            let units = tempfile::tempdir().unwrap();
            for out in [
                sb.run(&["generate", "--output", units.path().to_str().unwrap()]),
                std::process::Command::new(env!("CARGO_BIN_EXE_jobguard-generator"))
                    .arg(units.path().join("g"))
                    .env("JOBGUARD_CONFIG", sb.file("jobs.toml"))
                    .output()
                    .unwrap(),
            ] {
                assert_no_marker(
                    &format!("address {i} {address:?} (store_file: {from_file}), generator"),
                    &all(&out),
                );
            }
        }
    }
}

fn toml_string(s: &str) -> String {
    format!("'{s}'")
}

/// `jobguard check` warns about TLS that checks nothing (`#insecure`), and about a Redis
/// that can lose leases: no persistence, or an eviction policy (the machine's Redis runs
/// with `--save "" --appendonly no`). Warnings do not change the exit status.
#[test]
fn check_warns_about_insecure_tls_and_a_redis_that_can_forget_leases() {
    let sb = Sandbox::new(&job(
        "r",
        "store = \"redis://127.0.0.1:6379/0?prefix=jgsec:\"\n\
         [jobs.i]\nschedule = \"daily\"\ncommand = [\"/bin/true\"]\n\
         store = \"rediss://127.0.0.1:1/0#insecure\"",
    ));
    let redis_up = std::net::TcpStream::connect("127.0.0.1:6379").is_ok();
    let out = sb.run(&["check"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{}", all(&out));
    assert!(err.contains("jobs.i.store: warning: #insecure"), "{err}");
    if !redis_up {
        eprintln!("SKIPPED the Redis part: no Redis on 127.0.0.1:6379");
        return;
    }
    let redis = |args: &[&str]| {
        std::process::Command::new("redis-cli")
            .args(["-h", "127.0.0.1", "-p", "6379"])
            .args(args)
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default()
    };
    let aof = redis(&["CONFIG", "GET", "appendonly"]);
    let save = redis(&["CONFIG", "GET", "save"]);
    let policy = redis(&["CONFIG", "GET", "maxmemory-policy"]);
    let no_persistence = aof.ends_with("no") && save.lines().nth(1).unwrap_or("").is_empty();
    assert_eq!(
        err.contains("jobs.r.store: warning: Redis keeps nothing on disk"),
        no_persistence,
        "appendonly {aof:?}, save {save:?}: {err}"
    );
    assert_eq!(
        err.contains("jobs.r.store: warning: Redis maxmemory-policy"),
        !policy.ends_with("noeviction"),
        "{policy:?}: {err}"
    );
    // The machine's Redis is started without persistence (see .ci/run).
    assert!(
        no_persistence || std::env::var("CI").is_err(),
        "{aof} {save}"
    );

    // A private Redis with an append-only file but an eviction policy: only the latter.
    let dir = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap();
    let Ok(mut server) = std::process::Command::new("redis-server")
        .args([
            "--bind",
            "127.0.0.1",
            "--port",
            &port.to_string(),
            "--save",
            "",
        ])
        .args(["--appendonly", "yes", "--maxmemory-policy", "allkeys-lru"])
        .arg("--dir")
        .arg(dir.path())
        .stdout(std::process::Stdio::null())
        .spawn()
    else {
        eprintln!("SKIPPED the private Redis part: no redis-server");
        return;
    };
    let up = (0..100).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(50));
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    });
    let sb = Sandbox::new(&job(
        "lru",
        &format!("store = \"redis://127.0.0.1:{port}/0\""),
    ));
    let out = sb.run(&["check"]);
    let _ = server.kill();
    let _ = server.wait();
    assert!(up, "redis-server did not start");
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{}", all(&out));
    assert!(
        err.contains("jobs.lru.store: warning: Redis maxmemory-policy is allkeys-lru"),
        "{err}"
    );
    assert!(
        !err.contains("on disk") && !err.contains("appendonly no"),
        "{err}"
    );
}

/// The same marker through a booted systemd, where messages also reach the journal,
/// `STATUS=` and the kernel log (the generator's): the services of jobs whose store
/// addresses hold it in a keyword form, a malformed URL, a percent-encoded and a URL
/// whose password holds `@`, `?`, `#` and `:`; `jobguard-recover.service`; `status`,
/// `history`, `check` in a shell. Then every journal entry, `systemctl status` and the
/// kernel log are searched.
#[test]
fn the_journal_and_unit_status_never_show_a_password() {
    let test = "the_journal_and_unit_status_never_show_a_password";
    if !common::go_on(test, common::container::prerequisites()) {
        return;
    }
    use common::host::{boot, jobguard_options, wait_unit_done};
    let forms = [
        (
            "kw",
            "host=127.0.0.1 port=1 user=u password=s3cr3tMARKER dbname=d",
        ),
        (
            "pct",
            "postgres://u:s3cr3t%4DARKER@127.0.0.1:1/d?sslmode=disable",
        ),
        (
            "delims",
            "mysql://u:s3cr3tMARKER:s3cr3tMARKER@s3cr3tMARKER#s3cr3tMARKER?s3cr3tMARKER@127.0.0.1:1/d",
        ),
        ("malformed", "redis:/:s3cr3tMARKER@127.0.0.1:1/0"),
        ("rediss", "rediss://:s3cr3tMARKER@127.0.0.1:1/0#insecure"),
    ];
    let mut jobs = String::new();
    let mut opts_files = Vec::new();
    for (name, address) in forms {
        jobs.push_str(&format!(
            "[jobs.{name}]\nschedule = \"*-*-* 02:00:00 UTC\"\ncommand = [\"/bin/true\"]\n\
             store_file = \"/etc/jobguard/{name}.addr\"\nstore_wait = \"0\"\n\n\
             [jobs.{name}-inline]\nschedule = \"*-*-* 02:00:00 UTC\"\ncommand = [\"/bin/true\"]\n\
             store = '{address}'\nstore_wait = \"0\"\n\n"
        ));
        opts_files.push((format!("/etc/jobguard/{name}.addr"), format!("{address}\n")));
    }
    let mut opts = jobguard_options(&jobs);
    for (path, text) in &opts_files {
        opts = opts.file(path, text);
    }
    let c = boot("secrets", &opts);
    c.sh_ok("chmod 0600 /etc/jobguard/*.addr && systemctl daemon-reload")
        .expect("daemon-reload");
    let mut seen = String::new();
    for (name, _) in forms {
        for unit in [
            format!("jobguard@{name}.service"),
            format!("jobguard@{name}-inline.service"),
        ] {
            let _ = c.exec(&["systemctl", "start", &unit]);
            wait_unit_done(&c, &unit, std::time::Duration::from_secs(60));
            let out = c
                .exec(&["systemctl", "status", "--no-pager", "-l", &unit])
                .expect("status");
            seen.push_str(&all(&out));
        }
    }
    let _ = c.exec(&["systemctl", "start", "jobguard-recover.service"]);
    wait_unit_done(
        &c,
        "jobguard-recover.service",
        std::time::Duration::from_secs(60),
    );
    for argv in [
        &["jobguard", "check"][..],
        &["jobguard", "status"],
        &["jobguard", "status", "--json"],
        &["jobguard", "history", "kw"],
        &["jobguard", "recover"],
        &["jobguard", "unlock", "delims"],
    ] {
        seen.push_str(&all(&c.exec(argv).expect("exec")));
    }
    let journal = c
        .exec(&["journalctl", "--no-pager", "--all", "-o", "json"])
        .expect("journalctl");
    let journal = String::from_utf8_lossy(&journal.stdout).into_owned();
    assert!(
        journal.contains("JOBGUARD_JOB") && journal.contains("unavailable"),
        "the runs reached the journal"
    );
    seen.push_str(&journal);
    seen.push_str(&c.kmsg());
    for line in seen.lines() {
        assert_no_marker("the container's output and journal", line);
    }
}

/// Third hostile trial, 1: `[metrics] textfile` in a directory another user may write
/// (node_exporter's textfile directory often belongs to its own user). Root's recovery
/// pass writes there every minute; that user plants, where the temporary file of root's
/// process would go, a symbolic link to a file only root may write, and a FIFO, and links
/// the textfile's own name to another such file. Root must write neither file (before:
/// the temporary file `.NAME.<pid>.tmp` was opened with create + truncate, following the
/// link) and must not block on the FIFO (before: open(2) for writing waited for a reader).
#[test]
fn a_user_who_may_write_the_metrics_directory_cannot_make_root_write_through_a_link() {
    if !as_root("a_user_who_may_write_the_metrics_directory_cannot_make_root_write_through_a_link")
    {
        return;
    }
    let base = tempfile::tempdir().unwrap();
    let dir = base.path().join("textfile");
    mkdir(&dir, NOBODY, 0o755);
    let victim = base.path().join("shadow");
    let other = base.path().join("passwd");
    for p in [&victim, &other] {
        root_file(p);
        std::fs::write(p, "root's own\n").unwrap();
    }
    let pid = std::process::id();
    // What `nobody` plants, as `nobody` (a link in the directory is the user's own).
    let planted = dir.join(format!(".jobguard.prom.{pid}.tmp"));
    std::os::unix::fs::symlink(&victim, &planted).unwrap();
    std::os::unix::fs::symlink(&other, dir.join("jobguard.prom")).unwrap();
    for p in [&planted, &dir.join("jobguard.prom")] {
        chown(p, NOBODY);
    }
    let target = dir.join("jobguard.prom");
    jobguard::ops::metrics::write_textfile(&target, "jobguard_up 1\n").unwrap();
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "root's own\n");
    assert_eq!(std::fs::read_to_string(&other).unwrap(), "root's own\n");
    let meta = std::fs::symlink_metadata(&target).unwrap();
    assert!(meta.file_type().is_file(), "the textfile replaced the link");
    assert_eq!(meta.mode() & 0o777, 0o644);
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "jobguard_up 1\n");
    let leftovers: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tmp") && *n != format!(".jobguard.prom.{pid}.tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");

    // A FIFO where the temporary file would go: root neither blocks nor writes into it.
    std::fs::remove_file(&planted).unwrap();
    nix::unistd::mkfifo(&planted, nix::sys::stat::Mode::from_bits_truncate(0o666)).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let t = target.clone();
    std::thread::spawn(move || {
        let _ = tx.send(jobguard::ops::metrics::write_textfile(
            &t,
            "jobguard_up 2\n",
        ));
    });
    let done = rx.recv_timeout(std::time::Duration::from_secs(10));
    assert!(
        matches!(done, Ok(Ok(()))),
        "root's write blocked on, or failed at, a planted FIFO: {done:?}"
    );
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "jobguard_up 2\n");
}

/// Third hostile trial, 4: a run started by hand sees what a timer-started run sees, not
/// its caller's environment. `SECRET=x CREDENTIALS_DIRECTORY=… PATH=/tmp/evil:… jobguard
/// run JOB` gives the job (as its `user`, and as root without one) none of them: its
/// environment is a clean base (systemd's for services, here without a system manager its
/// `PATH`), the account's `HOME`, `USER`, `LOGNAME` and `SHELL`, the job's `environment`
/// and the run's `JOBGUARD_*` variables.
#[test]
fn a_run_started_by_hand_does_not_pass_on_the_callers_environment() {
    if !as_root("a_run_started_by_hand_does_not_pass_on_the_callers_environment") {
        return;
    }
    let sb = Sandbox::new(
        "[jobs.as-user]\nschedule = \"*-*-* 02:00:00 UTC\"\nuser = \"nobody\"\n\
         command = [\"/bin/sh\", \"-c\", \"env > @DIR@/out/as-user\"]\n\
         environment = { GREETING = \"hi\" }\n\
         [jobs.as-root]\nschedule = \"*-*-* 02:00:00 UTC\"\n\
         command = [\"/bin/sh\", \"-c\", \"env > @DIR@/out/as-root\"]\n",
    );
    chmod(sb.path(), 0o755);
    mkdir(&sb.file("out"), NOBODY, 0o777);
    for job in ["as-user", "as-root"] {
        let out = sb
            .cmd(&["run", job, "--slot", "2026-11-24T02:00:00Z"])
            .env("SECRET", "x")
            .env("CREDENTIALS_DIRECTORY", sb.file("creds"))
            .env(
                "PATH",
                format!("/tmp/evil:{}", std::env::var("PATH").unwrap()),
            )
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{job}: {}", all(&out));
        let env: std::collections::BTreeMap<String, String> = sb
            .read(&format!("out/{job}"))
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        for gone in ["SECRET", "CREDENTIALS_DIRECTORY"] {
            assert!(!env.contains_key(gone), "{job} saw {gone}: {env:#?}");
        }
        assert!(
            !env["PATH"].contains("/tmp/evil"),
            "{job} saw the caller's PATH: {}",
            env["PATH"]
        );
        let user = if job == "as-user" { "nobody" } else { "root" };
        assert_eq!(env.get("USER").map(String::as_str), Some(user), "{env:#?}");
        assert_eq!(
            env.get("LOGNAME").map(String::as_str),
            Some(user),
            "{env:#?}"
        );
        assert!(
            env.contains_key("HOME") && env.contains_key("SHELL"),
            "{env:#?}"
        );
        assert_eq!(env.get("JOBGUARD_JOB").map(String::as_str), Some(job));
        if job == "as-user" {
            assert_eq!(env.get("GREETING").map(String::as_str), Some("hi"));
        }
    }
}

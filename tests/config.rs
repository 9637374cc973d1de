//! The job list: every error names its file, line, column and key; defaults layer as
//! documented; `jobguard check` prints every error and exits 1.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use jobguard::joblist::config::{ConfigError, ConfigSource, ErrorScope, JobSet, load, load_one};
use jobguard::joblist::job::{Inhibit, OnInterrupted, OnStoreUnavailable};

/// A temporary job-list directory.
struct Dir(tempfile::TempDir);

impl Dir {
    fn new() -> Self {
        Dir(tempfile::tempdir().expect("tempdir"))
    }

    fn path(&self) -> &Path {
        self.0.path()
    }

    fn write(&self, rel: &str, text: &str) -> PathBuf {
        let p = self.path().join(rel);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(&p, text).expect("write");
        p
    }

    fn load(&self) -> JobSet {
        load(&ConfigSource::Path(self.path().to_path_buf()))
    }
}

/// 1-based line and column (in characters) of the first `needle` in `text`, after the
/// first line containing `after` (so a needle that also appears earlier can be found).
fn pos(text: &str, after: &str, needle: &str) -> (usize, usize) {
    let start = text.find(after).expect("anchor in text");
    let at = start + text[start..].find(needle).expect("needle in text");
    let line = text[..at].matches('\n').count() + 1;
    let line_start = text[..at].rfind('\n').map_or(0, |i| i + 1);
    (line, text[line_start..at].chars().count() + 1)
}

fn only_error(set: &JobSet) -> &ConfigError {
    assert_eq!(set.errors.len(), 1, "errors: {:#?}", set.errors);
    &set.errors[0]
}

fn assert_at(e: &ConfigError, file: &Path, (line, col): (usize, usize), key: &str) {
    assert_eq!(e.file, file, "{e}");
    assert_eq!((e.line, e.column), (Some(line), Some(col)), "{e}");
    assert_eq!(e.key.as_deref(), Some(key), "{e}");
}

const GOOD: &str = "schedule = \"*-*-* 02:00:00\"\ncommand = [\"/bin/true\"]\n";

/// Every key of the one table (`jobguard::joblist::keys::KEYS`) is read by the parser: its example
/// value, in a job, in `[defaults]` or in `[metrics]`, is never an unknown key (nor any
/// other error where the value stands alone), and a key the table does not hold is.
#[test]
fn the_parser_reads_every_key_of_the_table_and_no_other() {
    use jobguard::joblist::keys::{KEYS, Scope};
    for k in KEYS {
        let line = format!("{} = {}\n", k.name, k.example);
        let text = match k.scope {
            Scope::Job => {
                let rest: String = GOOD
                    .lines()
                    .filter(|l| !l.starts_with(&format!("{} ", k.name)))
                    .map(|l| format!("{l}\n"))
                    .collect();
                format!("[defaults]\n{line}\n[jobs.sync]\n{rest}{line}")
            }
            Scope::Metrics => format!("[metrics]\n{line}\n[jobs.sync]\n{GOOD}"),
        };
        let d = Dir::new();
        d.write("jobs.toml", &text);
        let set = d.load();
        let unknown: Vec<&ConfigError> = set
            .errors
            .iter()
            .filter(|e| e.message.contains("unknown key"))
            .collect();
        assert!(unknown.is_empty(), "{}: {unknown:?}", k.name);
    }
    let d = Dir::new();
    d.write(
        "jobs.toml",
        &format!("[jobs.sync]\n{GOOD}catchup = \"all\"\n"),
    );
    let set = d.load();
    assert_eq!(
        only_error(&set).message,
        "unknown key catchup (did you mean catch_up: which earlier elapses a firing runs when they never ran?)"
    );
}

#[test]
fn unknown_key_names_file_line_column_and_key() {
    let d = Dir::new();
    let text = format!("[jobs.sync]\n{GOOD}descripton = \"typo\"\n\n[jobs.other]\n{GOOD}");
    let f = d.write("jobs.toml", &text);
    let set = d.load();
    let e = only_error(&set);
    assert_at(e, &f, pos(&text, "", "descripton"), "jobs.sync.descripton");
    assert_eq!(
        e.message,
        "unknown key descripton (did you mean description: Description= of the job's units?)"
    );
    assert_eq!(e.job.as_deref(), Some("sync"));
    assert_eq!(e.scope, ErrorScope::Job);
    assert!(!set.jobs.contains_key("sync"));
    assert!(
        set.jobs.contains_key("other"),
        "the other job is still loaded"
    );
}

#[test]
fn unknown_top_level_and_defaults_keys_are_named() {
    let d = Dir::new();
    let text = format!("job = 1\n[defaults]\nlease = \"2min\"\n[jobs.a]\n{GOOD}");
    let f = d.write("jobs.toml", &text);
    let set = d.load();
    assert_eq!(set.errors.len(), 2, "{:#?}", set.errors);
    assert_at(&set.errors[0], &f, (1, 1), "job");
    assert_at(
        &set.errors[1],
        &f,
        pos(&text, "[defaults]", "lease"),
        "defaults.lease",
    );
    assert!(set.errors.iter().all(|e| e.scope == ErrorScope::Key));
    assert!(set.jobs.contains_key("a"));
}

#[test]
fn bad_schedule_names_the_value() {
    let d = Dir::new();
    let text = "[jobs.nightly]\nschedule = \"nonsense 25:99\"\ncommand = [\"/bin/true\"]\n";
    let f = d.write("jobs.toml", text);
    let set = d.load();
    let e = only_error(&set);
    assert_at(e, &f, pos(text, "", "\"nonsense"), "jobs.nightly.schedule");
    assert!(e.message.contains("invalid calendar expression"), "{e}");
    assert!(set.jobs.is_empty());
}

/// `schedule` may be a list of expressions (systemd.timer(5): `OnCalendar=` repeated):
/// the job elapses at each of them. A bad element is named by its position; an empty
/// list and expressions in different zones are refused.
#[test]
fn a_schedule_may_be_a_list_and_its_bad_elements_are_named() {
    let d = Dir::new();
    let text = "[jobs.either]\nschedule = [\"*-*-01 02:00:00 UTC\", \"Fri *-*-* 02:00:00 UTC\"]\n\
                command = [\"/bin/true\"]\n";
    d.write("jobs.toml", text);
    let set = d.load();
    assert!(set.errors.is_empty(), "{:#?}", set.errors);
    let job = &set.jobs["either"];
    assert_eq!(job.schedule, "*-*-01 02:00:00 UTC; Fri *-*-* 02:00:00 UTC");
    assert_eq!(job.calendar.texts().len(), 2);
    // 2027-01-01 is day 1 and a Friday; 2027-01-08 only a Friday.
    let after: jiff::Timestamp = "2027-01-01T03:00:00Z".parse().unwrap();
    assert_eq!(
        job.calendar.next_elapse(after).map(|t| t.to_string()),
        Some("2027-01-08T02:00:00Z".to_string())
    );

    for (list, needle, says) in [
        (
            "[\"*-*-01 02:00:00 UTC\", \"nonsense\"]",
            "[",
            "element 2: ",
        ),
        ("[]", "[", "must not be empty"),
        (
            "[\"*-*-01 02:00:00 UTC\", \"*-*-01 02:00:00 Europe/Berlin\"]",
            "[",
            "one time zone",
        ),
    ] {
        let d = Dir::new();
        let text = format!("[jobs.either]\nschedule = {list}\ncommand = [\"/bin/true\"]\n");
        let f = d.write("jobs.toml", &text);
        let set = d.load();
        let e = only_error(&set);
        assert_at(
            e,
            &f,
            pos(&text, "schedule", needle),
            "jobs.either.schedule",
        );
        assert!(e.message.contains(says), "{list}: {e}");
        assert!(set.jobs.is_empty());
    }
}

#[test]
fn bad_time_spans_name_the_value() {
    let d = Dir::new();
    let text = format!(
        "[jobs.a]\n{GOOD}timeout = \"5 parsecs\"\n\n[jobs.b]\n{GOOD}lease_ttl = \"1s\"\n\n\
         [jobs.c]\n{GOOD}randomized_delay = \"infinity\"\n\n[jobs.d]\n{GOOD}kill_grace = -5\n"
    );
    let f = d.write("jobs.toml", &text);
    let set = d.load();
    assert_eq!(set.errors.len(), 4, "{:#?}", set.errors);
    assert_at(
        &set.errors[0],
        &f,
        pos(&text, "[jobs.a]", "\"5 parsecs"),
        "jobs.a.timeout",
    );
    assert!(
        set.errors[0]
            .message
            .contains("invalid time span \"5 parsecs\"")
    );
    assert_at(
        &set.errors[1],
        &f,
        pos(&text, "[jobs.b]", "\"1s"),
        "jobs.b.lease_ttl",
    );
    assert!(
        set.errors[1].message.contains("at least 3s"),
        "{}",
        set.errors[1]
    );
    assert_at(
        &set.errors[2],
        &f,
        pos(&text, "[jobs.c]", "\"infinity"),
        "jobs.c.randomized_delay",
    );
    assert!(set.errors[2].message.contains("finite"));
    assert_at(
        &set.errors[3],
        &f,
        pos(&text, "[jobs.d]", "-5"),
        "jobs.d.kill_grace",
    );
    assert!(set.jobs.is_empty());
}

#[test]
fn bad_job_names_are_refused() {
    let d = Dir::new();
    let long = "x".repeat(65);
    let text = format!(
        "[jobs.Sync]\n{GOOD}\n[jobs.\"-dash\"]\n{GOOD}\n[jobs.\"a b\"]\n{GOOD}\n[jobs.{long}]\n{GOOD}\n[jobs.{}]\n{GOOD}",
        "y".repeat(64)
    );
    let f = d.write("jobs.toml", &text);
    let set = d.load();
    assert_eq!(set.errors.len(), 4, "{:#?}", set.errors);
    // Errors come in file order.
    assert_at(&set.errors[0], &f, pos(&text, "", "Sync"), "jobs.Sync");
    // `-dash` is a bare key to TOML, `a b` is not.
    assert_at(
        &set.errors[1],
        &f,
        pos(&text, "", "\"-dash\""),
        "jobs.-dash",
    );
    assert_at(
        &set.errors[2],
        &f,
        pos(&text, "", "\"a b\""),
        "jobs.\"a b\"",
    );
    assert_at(
        &set.errors[3],
        &f,
        pos(&text, "", &long),
        &format!("jobs.{long}"),
    );
    assert!(
        set.errors
            .iter()
            .all(|e| e.message.contains("invalid job name"))
    );
    assert_eq!(set.jobs.keys().collect::<Vec<_>>(), [&"y".repeat(64)]);
}

#[test]
fn the_same_job_in_two_files_names_both_and_uses_neither() {
    let d = Dir::new();
    let a = format!("[jobs.keep]\n{GOOD}\n[jobs.twice]\n{GOOD}");
    let b = format!("# second\n\n[jobs.twice]\n{GOOD}");
    let fa = d.write("jobs.d/10-a.toml", &a);
    let fb = d.write("jobs.d/20-b.toml", &b);
    let set = d.load();
    let e = only_error(&set);
    assert_at(e, &fb, pos(&b, "", "twice"), "jobs.twice");
    let (line, col) = pos(&a, "", "twice");
    assert!(
        e.message
            .contains(&format!("{}:{line}:{col}", fa.display())),
        "{e}"
    );
    assert!(!set.jobs.contains_key("twice"));
    assert!(set.jobs.contains_key("keep"));
}

#[test]
fn a_toml_syntax_error_skips_that_file_only() {
    let d = Dir::new();
    let bad = "[jobs.b]\nschedule = \"daily\ncommand = [\"x\"]\n";
    d.write("jobs.toml", &format!("[jobs.a]\n{GOOD}"));
    let fb = d.write("jobs.d/10-b.toml", bad);
    d.write("jobs.d/20-c.toml", &format!("[jobs.c]\n{GOOD}"));
    let set = d.load();
    let e = only_error(&set);
    assert_eq!(e.file, fb);
    // The string runs to the end of line 2, where TOML wants its closing quote.
    assert_eq!((e.line, e.column), (Some(2), Some(18)), "{e}");
    assert!(e.message.starts_with("TOML syntax error"), "{e}");
    assert_eq!(e.scope, ErrorScope::File);
    assert_eq!(set.jobs.keys().collect::<Vec<_>>(), ["a", "c"]);
    assert_eq!(set.files.len(), 3);
}

#[test]
fn a_missing_key_points_at_the_job() {
    let d = Dir::new();
    let text = "[jobs.half]\ncommand = [\"/bin/true\"]\n";
    let f = d.write("jobs.toml", text);
    let set = d.load();
    let e = only_error(&set);
    assert_at(e, &f, (1, 7), "jobs.half.schedule");
    assert!(e.message.contains("missing key schedule"));
}

#[test]
fn type_and_value_errors_are_reported_each() {
    let d = Dir::new();
    let text = format!(
        "[jobs.a]\n{GOOD}on_interrupted = \"retry\"\ninhibit = true\npersistent = \"yes\"\n\
         environment = {{ \"1X\" = \"v\", JOBGUARD_JOB = \"x\", OK = 1 }}\n\
         store = \"ftp://x\"\non_failure = \"mail.bogus\"\nuser = \"a:b\"\ncommand = [\"\"]\n"
    );
    let f = d.write("jobs.toml", &text);
    let set = d.load();
    // command appears twice in the table: that is a TOML error for the whole file.
    let e = only_error(&set);
    assert_eq!(e.scope, ErrorScope::File);
    assert_eq!(e.file, f);

    let text = format!(
        "[jobs.a]\n{GOOD}on_interrupted = \"retry\"\ninhibit = true\npersistent = \"yes\"\n\
         environment = {{ \"1X\" = \"v\", JOBGUARD_JOB = \"x\", OK = 1 }}\n\
         store = \"ftp://x\"\non_failure = \"mail.bogus\"\nuser = \"a:b\"\n"
    );
    let f = d.write("jobs.toml", &text);
    let set = d.load();
    let keys: Vec<&str> = set.errors.iter().filter_map(|e| e.key.as_deref()).collect();
    assert_eq!(
        keys,
        [
            "jobs.a.on_interrupted",
            "jobs.a.inhibit",
            "jobs.a.persistent",
            "jobs.a.environment.1X",
            "jobs.a.environment.JOBGUARD_JOB",
            "jobs.a.environment.OK",
            "jobs.a.store",
            "jobs.a.on_failure",
            "jobs.a.user",
        ]
    );
    assert_at(
        &set.errors[0],
        &f,
        pos(&text, "", "\"retry\""),
        "jobs.a.on_interrupted",
    );
    assert!(
        set.errors[0]
            .message
            .contains("expected one of \"rerun\", \"hold\"")
    );
    assert_at(
        &set.errors[3],
        &f,
        pos(&text, "", "\"1X\""),
        "jobs.a.environment.1X",
    );
    assert_at(
        &set.errors[5],
        &f,
        pos(&text, "", "OK"),
        "jobs.a.environment.OK",
    );
    assert!(set.jobs.is_empty());
}

#[test]
fn defaults_layer_and_relative_paths_follow_their_file() {
    let d = Dir::new();
    d.write(
        "jobs.toml",
        &format!(
            "[defaults]\nstore = \"sqlite://state/jobguard.db\"\nlease_ttl = \"5min\"\non_interrupted = \"hold\"\n\
             working_directory = \"work\"\n\n[jobs.main-job]\n{GOOD}"
        ),
    );
    d.write(
        "jobs.d/10-team.toml",
        &format!(
            "[defaults]\nlease_ttl = \"10min\"\ninhibit = \"block\"\n\n[jobs.team-job]\n{GOOD}lease_ttl = 30\n\n\
             [jobs.team-default]\n{GOOD}store_file = \"secret.url\"\n"
        ),
    );
    let set = d.load();
    assert!(set.errors.is_empty(), "{:#?}", set.errors);
    let root = d.path();
    let main = &set.jobs["main-job"];
    assert_eq!(
        main.store,
        format!("sqlite://{}", root.join("state/jobguard.db").display())
    );
    assert_eq!(main.lease_ttl, Duration::from_secs(300));
    assert_eq!(main.on_interrupted, OnInterrupted::Hold);
    assert_eq!(
        main.working_directory.as_deref(),
        Some(root.join("work").as_path())
    );
    assert_eq!(main.inhibit, Inhibit::Delay);
    // A file's own defaults override jobs.toml's; a job's keys override both; jobs.toml's
    // relative paths stay relative to jobs.toml.
    let team = &set.jobs["team-job"];
    assert_eq!(team.lease_ttl, Duration::from_secs(30));
    assert_eq!(team.inhibit, Inhibit::Block);
    assert_eq!(team.on_interrupted, OnInterrupted::Hold);
    assert_eq!(
        team.working_directory.as_deref(),
        Some(root.join("work").as_path())
    );
    let td = &set.jobs["team-default"];
    assert_eq!(td.lease_ttl, Duration::from_secs(600));
    assert_eq!(td.store, "");
    assert_eq!(
        td.store_file.as_deref(),
        Some(root.join("jobs.d/secret.url").as_path())
    );
    assert!(td.needs_network());
    assert!(!main.needs_network());
}

#[test]
fn a_bad_default_is_reported_once_and_for_each_job_that_inherits_it() {
    let d = Dir::new();
    let text = format!(
        "[defaults]\ntimeout = \"soon\"\n\n[jobs.a]\n{GOOD}\n[jobs.b]\n{GOOD}timeout = \"1h\"\n"
    );
    let f = d.write("jobs.toml", &text);
    let set = d.load();
    assert_eq!(set.errors.len(), 2, "{:#?}", set.errors);
    assert_at(
        &set.errors[0],
        &f,
        pos(&text, "", "\"soon\""),
        "defaults.timeout",
    );
    assert_eq!(set.errors[0].scope, ErrorScope::Key);
    // The job's error points at the job's name in its header.
    assert_at(
        &set.errors[1],
        &f,
        pos(&text, "[jobs.a]", "a]"),
        "jobs.a.timeout",
    );
    assert!(
        set.errors[1]
            .message
            .contains("inherits the invalid defaults.timeout")
    );
    assert_eq!(set.jobs.keys().collect::<Vec<_>>(), ["b"]);
}

#[test]
fn store_and_store_file_exclude_each_other() {
    let d = Dir::new();
    let text = format!(
        "[jobs.a]\n{GOOD}store = \"postgres://db/x\"\nstore_file = \"/etc/jobguard/store.url\"\n"
    );
    let f = d.write("jobs.toml", &text);
    let set = d.load();
    let e = only_error(&set);
    assert_at(
        e,
        &f,
        pos(&text, "", "\"/etc/jobguard/store.url\""),
        "jobs.a.store_file",
    );
}

#[test]
fn store_credential_counts_as_the_store_key_when_layering() {
    let d = Dir::new();
    d.write(
        "jobs.toml",
        &format!(
            "[defaults]\nstore_credential = \"jobguard.store\"\n\n[jobs.inherits]\n{GOOD}\n\
             [jobs.own-store]\n{GOOD}store = \"sqlite:///var/lib/x.db\"\n\n\
             [jobs.own-file]\n{GOOD}store_file = \"/etc/jobguard/store.url\"\n"
        ),
    );
    d.write(
        "jobs.d/10-team.toml",
        &format!(
            "[defaults]\nstore = \"postgres://db/team\"\n\n[jobs.team]\n{GOOD}\n\
             [jobs.team-cred]\n{GOOD}store_credential = \"team%db\"\n"
        ),
    );
    let set = d.load();
    assert!(set.errors.is_empty(), "{:#?}", set.errors);
    let store = |name: &str| {
        let j = &set.jobs[name];
        (
            j.store.clone(),
            j.store_file.clone(),
            j.store_credential.clone(),
        )
    };
    assert_eq!(
        store("inherits"),
        (String::new(), None, Some("jobguard.store".into()))
    );
    assert!(set.jobs["inherits"].needs_network());
    assert_eq!(
        store("own-store"),
        ("sqlite:///var/lib/x.db".into(), None, None)
    );
    assert!(!set.jobs["own-store"].needs_network());
    assert_eq!(
        store("own-file"),
        (String::new(), Some("/etc/jobguard/store.url".into()), None)
    );
    // A file's own [defaults] store replaces jobs.toml's store_credential, and a job's
    // store_credential replaces both.
    assert_eq!(store("team"), ("postgres://db/team".into(), None, None));
    assert_eq!(
        store("team-cred"),
        (String::new(), None, Some("team%db".into()))
    );
}

#[test]
fn store_credential_excludes_store_and_store_file_in_one_table() {
    let d = Dir::new();
    let text = format!(
        "[defaults]\nstore = \"postgres://db/x\"\nstore_credential = \"db\"\n\n\
         [jobs.a]\n{GOOD}store_credential = \"db\"\nstore_file = \"/etc/jobguard/store.url\"\n"
    );
    let f = d.write("jobs.toml", &text);
    let out = check(&["--config", d.path().to_str().expect("utf-8")]);
    assert_eq!(out.status.code(), Some(1));
    let (l1, c1) = pos(&text, "[defaults]", "\"db\"");
    let (l2, c2) = pos(&text, "[jobs.a]", "\"/etc/jobguard/store.url\"");
    let (l3, _) = pos(&text, "[jobs.a]", "store_credential");
    let (l4, _) = pos(&text, "[defaults]", "store =");
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        format!(
            "{f}:{l1}:{c1}: defaults.store_credential: store, store_file and store_credential \
             exclude each other (defaults.store is set at line {l4})\n\
             {f}:{l2}:{c2}: jobs.a.store_file: store, store_file and store_credential \
             exclude each other (jobs.a.store_credential is set at line {l3})\n",
            f = f.display()
        )
    );
}

#[test]
fn a_bad_credential_id_names_file_line_column_and_key() {
    let long = "x".repeat(256);
    let cases: &[(&str, &str)] = &[
        ("\"\"", "credential ID must not be empty"),
        ("\"..\"", "credential ID must not be \"..\""),
        ("\".\"", "credential ID must not be \".\""),
        (
            "\"db/x\"",
            "invalid credential ID \"db/x\": '/' is not allowed",
        ),
        (
            "\"db:x\"",
            "invalid credential ID \"db:x\": ':' is not allowed",
        ),
        (
            "\"my db\"",
            "invalid credential ID \"my db\": ' ' is not allowed",
        ),
        ("\"dé\"", "invalid credential ID \"dé\": 'é' is not allowed"),
        ("1", "expected a string, found an integer"),
    ];
    let long_value = format!("\"{long}\"");
    let cases = cases.iter().copied().chain([(
        long_value.as_str(),
        "credential ID is 256 bytes long, at most 255",
    )]);
    for (value, message) in cases {
        let d = Dir::new();
        let text = format!("[jobs.a]\n{GOOD}store_credential = {value}\n");
        let f = d.write("jobs.toml", &text);
        let set = d.load();
        let e = only_error(&set);
        assert_at(
            e,
            &f,
            pos(&text, "store_credential", value),
            "jobs.a.store_credential",
        );
        assert!(e.message.starts_with(message), "{value}: {}", e.message);
        assert!(set.jobs.is_empty());
    }
}

/// `jobguard history` with a job whose store is a credential, the environment of a
/// service that has `$CREDENTIALS_DIRECTORY` = `creds` (or none).
fn history_with_credential(list: &Path, creds: Option<&Path>) -> std::process::Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_jobguard"));
    cmd.args(["history", "a", "--config"])
        .arg(list)
        .env_remove("JOBGUARD_CONFIG")
        .env_remove("CREDENTIALS_DIRECTORY");
    if let Some(c) = creds {
        cmd.env("CREDENTIALS_DIRECTORY", c);
    }
    cmd.output().expect("run jobguard history")
}

#[test]
fn a_store_credential_is_read_from_the_services_credentials_directory() {
    let d = Dir::new();
    // An ID no host has in /etc/credstore and friends.
    let id = format!("jobguard-test-{}", std::process::id());
    let list = d.write(
        "jobs.toml",
        &format!("[jobs.a]\n{GOOD}store_credential = \"{id}\"\n"),
    );
    let db = d.path().join("ledger.db");
    d.write(
        &format!("creds/{id}"),
        &format!("# the ledger\n\nsqlite://{}\n", db.display()),
    );
    let out = history_with_credential(&list, Some(&d.path().join("creds")));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(db.exists(), "the store named by the credential was opened");

    // Not there: exit 78, and the message names the ID and every place looked.
    let out = history_with_credential(&list, None);
    assert_eq!(out.status.code(), Some(78));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        stderr,
        format!(
            "jobguard: job a: store_credential: credential {id} not found in \
             /run/credentials/@system/{id}, /etc/credstore/{id}, /run/credstore/{id}, \
             /usr/lib/credstore/{id}\n"
        )
    );
    // Empty: says so, with the file it read.
    let empty = d.write(&format!("empty/{id}"), "\n# nothing\n");
    let out = history_with_credential(&list, Some(&d.path().join("empty")));
    assert_eq!(out.status.code(), Some(78));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        format!(
            "jobguard: job a: store_credential {id} ({}) holds no address\n",
            empty.display()
        )
    );
}

#[test]
fn every_key_reaches_the_job() {
    let d = Dir::new();
    d.write(
        "jobs.toml",
        "[jobs.\"store-sync.v2\"]\n\
         description = \"Sync\"\n\
         schedule = \"Mon..Fri 02:00\"\n\
         command = [\"/usr/bin/php\", \"sync.php\", \"--all\"]\n\
         user = \"sync\"\n\
         working_directory = \"/srv/sync\"\n\
         environment = { APP_ENV = \"prod\", _X = \"\" }\n\
         timeout = \"1h 30min\"\n\
         randomized_delay = \"5min\"\n\
         store = \"postgres://db.example/jobs\"\n\
         store_wait = \"30s\"\n\
         on_store_unavailable = \"skip\"\n\
         clock_tolerance = \"5s\"\n\
         lease_ttl = \"1min\"\n\
         on_interrupted = \"hold\"\n\
         inhibit = \"none\"\n\
         on_failure = \"status-email@%n.service\"\n\
         kill_grace = \"1.5s\"\n\
         persistent = false\n",
    );
    let set = d.load();
    assert!(set.errors.is_empty(), "{:#?}", set.errors);
    let j = &set.jobs["store-sync.v2"];
    assert_eq!(j.description.as_deref(), Some("Sync"));
    assert_eq!(j.schedule, "Mon..Fri 02:00");
    assert_eq!(j.command, ["/usr/bin/php", "sync.php", "--all"]);
    assert_eq!(j.user.as_deref(), Some("sync"));
    assert_eq!(j.working_directory.as_deref(), Some(Path::new("/srv/sync")));
    assert_eq!(j.environment.len(), 2);
    assert_eq!(j.environment["APP_ENV"], "prod");
    assert_eq!(j.timeout, Some(Duration::from_secs(5400)));
    assert_eq!(j.randomized_delay, Some(Duration::from_secs(300)));
    assert_eq!(j.store, "postgres://db.example/jobs");
    assert_eq!(j.store_wait, Duration::from_secs(30));
    assert_eq!(j.on_store_unavailable, OnStoreUnavailable::Skip);
    assert_eq!(j.clock_tolerance, Duration::from_secs(5));
    assert_eq!(j.lease_ttl, Duration::from_secs(60));
    assert_eq!(j.on_interrupted, OnInterrupted::Hold);
    assert_eq!(j.inhibit, Inhibit::None);
    assert_eq!(j.on_failure.as_deref(), Some("status-email@%n.service"));
    assert_eq!(j.kill_grace, Duration::from_millis(1500));
    assert!(!j.persistent);
    assert_eq!(j.source, d.path().join("jobs.toml"));
}

#[test]
fn defaults_when_nothing_is_set() {
    let d = Dir::new();
    d.write(
        "jobs.toml",
        &format!("[jobs.a]\n{GOOD}timeout = \"infinity\"\nrandomized_delay = 0\n"),
    );
    let set = d.load();
    assert!(set.errors.is_empty(), "{:#?}", set.errors);
    let j = &set.jobs["a"];
    assert_eq!(j.store, jobguard::paths::default_store_url());
    assert_eq!(j.lease_ttl, Duration::from_secs(120));
    assert_eq!(j.store_wait, Duration::from_secs(120));
    assert_eq!(j.clock_tolerance, Duration::from_secs(60));
    assert_eq!(j.kill_grace, Duration::from_secs(10));
    assert_eq!((j.timeout, j.randomized_delay), (None, None));
    assert_eq!(j.on_interrupted, OnInterrupted::Rerun);
    assert_eq!(j.on_store_unavailable, OnStoreUnavailable::Fail);
    assert_eq!(j.inhibit, Inhibit::Delay);
    assert!(j.persistent);
}

#[test]
fn a_directory_reads_jobs_toml_first_then_toml_files_then_jobs_d() {
    let d = Dir::new();
    d.write("a.toml", &format!("[jobs.from-a]\n{GOOD}"));
    d.write("jobs.toml", &format!("[jobs.from-main]\n{GOOD}"));
    d.write("notes.txt", "not a job list");
    d.write(".hidden.toml", "this is not toml");
    d.write("jobs.d/z.toml", &format!("[jobs.from-z]\n{GOOD}"));
    d.write("jobs.d/b.toml", &format!("[jobs.from-b]\n{GOOD}"));
    let set = d.load();
    assert!(set.errors.is_empty(), "{:#?}", set.errors);
    let names: Vec<String> = set
        .files
        .iter()
        .map(|f| {
            f.strip_prefix(d.path())
                .expect("inside")
                .display()
                .to_string()
        })
        .collect();
    assert_eq!(
        names,
        ["jobs.toml", "a.toml", "jobs.d/b.toml", "jobs.d/z.toml"]
    );
    assert_eq!(set.jobs.len(), 4);
}

#[test]
fn a_missing_config_path_is_an_error_not_a_crash() {
    let d = Dir::new();
    let missing = d.path().join("nope.toml");
    let set = load(&ConfigSource::Path(missing.clone()));
    let e = only_error(&set);
    assert_eq!(e.file, missing);
    assert_eq!(e.message, "no such file or directory");
    assert!(set.jobs.is_empty());
}

fn check(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_jobguard"))
        .arg("check")
        .args(args)
        .env_remove("JOBGUARD_CONFIG")
        .output()
        .expect("run jobguard check")
}

#[test]
fn check_prints_every_error_and_exits_1() {
    let d = Dir::new();
    let text = format!("[jobs.good]\n{GOOD}\n[jobs.bad]\n{GOOD}bogus = 1\ntimeout = \"x\"\n");
    let f = d.write("jobs.toml", &text);
    let out = check(&["--config", d.path().to_str().expect("utf-8")]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let (l1, c1) = pos(&text, "", "bogus");
    let (l2, c2) = pos(&text, "", "\"x\"");
    assert_eq!(
        stderr,
        format!(
            "{f}:{l1}:{c1}: jobs.bad.bogus: unknown key bogus\n{f}:{l2}:{c2}: jobs.bad.timeout: invalid time span \"x\"\n",
            f = f.display()
        )
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "1 valid job in 1 file: good; 2 errors\n"
    );
}

#[test]
fn check_of_a_good_list_exits_0() {
    let d = Dir::new();
    d.write("jobs.toml", &format!("[jobs.a]\n{GOOD}\n[jobs.b]\n{GOOD}"));
    let out = check(&[
        "--config",
        d.path().join("jobs.toml").to_str().expect("utf-8"),
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.stderr.is_empty());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "2 valid jobs in 1 file: a, b\n"
    );
}

#[test]
fn check_names_what_this_host_lacks_for_a_valid_job() {
    let d = Dir::new();
    let text = format!(
        "[jobs.good]\n{GOOD}\n[jobs.odd]\nschedule = \"daily\"\n\
         command = [\"jobguard-no-such-program\", \"x\"]\nuser = \"jobguard-no-such-user\"\n\
         working_directory = \"/nonexistent/dir\"\nstore_file = \"missing.url\"\n\
         [jobs.script]\nschedule = \"daily\"\ncommand = [\"./not-executable.sh\"]\n\
         working_directory = \".\"\n\
         [jobs.found]\nschedule = \"daily\"\ncommand = [\"./run.sh\"]\nworking_directory = \".\"\n\
         [jobs.cronline]\nschedule = \"daily\"\n\
         command = [\"/bin/sh\", \"-c\", \"/nonexistent/backup.sh --full >/dev/null 2>&1\"]\n\
         [jobs.cronfound]\nschedule = \"daily\"\n\
         command = [\"/bin/sh\", \"-c\", \"cd {dir} && ./run.sh; php {dir}/run.sh\"]\n",
        dir = d.path().display()
    );
    let f = d.write("jobs.toml", &text);
    d.write("not-executable.sh", "#!/bin/sh\n");
    let run = d.write("run.sh", "#!/bin/sh\n");
    std::fs::set_permissions(&run, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let out = check(&["--config", f.to_str().expect("utf-8")]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    // Each problem names the line and column of the value that is wrong (issue 10,
    // defect 6: they had none).
    let at = |after: &str, needle: &str| {
        let (l, c) = pos(&text, after, needle);
        format!("{}:{l}:{c}", f.display())
    };
    for line in [
        format!(
            "{}: jobs.odd.user: user \"jobguard-no-such-user\" does not exist (on this host)",
            at("[jobs.odd]", "\"jobguard-no-such-user")
        ),
        format!(
            "{}: jobs.odd.working_directory: /nonexistent/dir is not a directory (on this host)",
            at("[jobs.odd]", "\"/nonexistent")
        ),
        format!(
            "{}: jobs.odd.command: jobguard-no-such-program is not found in PATH",
            at("[jobs.odd]", "[\"jobguard-no-such-program")
        ),
        format!(
            "{}: jobs.odd.store_file: job odd: cannot read store_file",
            at("[jobs.odd]", "\"missing.url")
        ),
        format!(
            "{}: jobs.script.command: ./not-executable.sh is not an executable file (on this host)",
            at("[jobs.script]", "[\"./not-executable.sh")
        ),
    ] {
        assert!(stderr.contains(&line), "missing {line:?} in:\n{stderr}");
    }
    assert!(!stderr.contains("jobs.good"), "{stderr}");
    assert!(!stderr.contains("jobs.found"), "{stderr}");
    // A script inside a shell command (a cron line, imported) is checked too.
    assert!(
        stderr.contains(
            "jobs.cronline.command: /nonexistent/backup.sh is not an executable file: the shell \
             command runs it (/nonexistent/backup.sh --full >/dev/null 2>&1) (on this host)"
        ),
        "{stderr}"
    );
    assert!(!stderr.contains("jobs.cronfound"), "{stderr}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "6 valid jobs in 1 file: cronfound, cronline, found, good, odd, script; 6 problems on this host\n"
    );
}

#[test]
fn a_relative_sqlite_path_in_a_store_file_is_refused_not_guessed() {
    // Relative to what? The shim runs in `/`, a shell elsewhere: they would not share a
    // ledger.
    let d = Dir::new();
    let f = d.write(
        "jobs.toml",
        &format!("[jobs.a]\n{GOOD}store_file = \"store.url\"\n"),
    );
    d.write("store.url", "# the store\nsqlite://state/jobguard.db\n");
    let out = check(&["--config", f.to_str().expect("utf-8")]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("holds a relative SQLite path (sqlite://state/jobguard.db)"),
        "{stderr}"
    );
    d.write("store.url", "sqlite:///var/lib/jobguard/x.db\n");
    let out = check(&["--config", f.to_str().expect("utf-8")]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[cfg(all(
    feature = "store-postgres",
    feature = "store-mysql",
    feature = "store-redis"
))]
#[test]
fn check_refuses_store_addresses_the_run_would_refuse() {
    let d = Dir::new();
    let text = format!(
        "[jobs.mode]\n{GOOD}store = \"postgres://u@127.0.0.1/test?sslmode=bogus\"\n\
         [jobs.ca]\n{GOOD}store = \"mysql://u@127.0.0.1/test?ssl-mode=VERIFY_CA&ssl-ca=/nonexistent.pem\"\n\
         [jobs.relca]\n{GOOD}store = \"rediss://127.0.0.1/0?ssl-ca=ca.pem\"\n\
         [jobs.ok]\n{GOOD}store = \"redis://127.0.0.1/0\"\n"
    );
    let f = d.write("jobs.toml", &text);
    let out = check(&["--config", f.to_str().expect("utf-8")]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    for needle in [
        "jobs.mode.store: bad store address",
        "unknown sslmode \"bogus\"",
        "jobs.ca.store: bad store address",
        "ssl-ca /nonexistent.pem",
        "jobs.relca.store: bad store address",
        "ssl-ca ca.pem: the path must be absolute",
    ] {
        assert!(stderr.contains(needle), "missing {needle:?} in:\n{stderr}");
    }
    // jobs.ok has no problem (a warning about the server's persistence is not one).
    assert!(
        !stderr
            .lines()
            .any(|l| l.contains("jobs.ok") && !l.contains("jobs.ok.store: warning: ")),
        "{stderr}"
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).ends_with("; 3 problems on this host\n"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// More jobs of one ZooKeeper store elapse at one moment than ZooKeeper's default
/// `maxClientCnxns` (60 per client address) lets this host connect: `check` warns once,
/// naming the store, the moment and what to do; 60 jobs, or jobs spread with
/// `randomized_delay`, are no warning; and a warning is not a problem (exit 0).
#[cfg(feature = "store-zookeeper")]
#[test]
fn check_warns_when_more_jobs_of_a_zookeeper_store_elapse_together_than_it_takes_connections() {
    let d = Dir::new();
    let jobs = |n: usize, extra: &str| -> String {
        (0..n)
            .map(|i| {
                format!(
                    "[jobs.z{i:03}]\nschedule = \"hourly\"\ncommand = [\"/bin/true\"]\n\
                     store = \"zookeeper://127.0.0.1:2181/jobguard\"\n{extra}"
                )
            })
            .collect()
    };
    let run = |text: &str| {
        let f = d.write("jobs.toml", text);
        let out = check(&["--config", f.to_str().expect("utf-8")]);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let stderr = run(&jobs(61, ""));
    let warned: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("maxClientCnxns"))
        .collect();
    assert_eq!(warned.len(), 1, "{stderr}");
    assert!(
        warned[0].contains("jobs.z000.schedule: warning: 61 jobs of ZooKeeper zookeeper://127.0.0.1:2181 elapse at ")
            && warned[0].contains("randomized_delay"),
        "{stderr}"
    );
    assert!(!run(&jobs(60, "")).contains("maxClientCnxns"));
    assert!(!run(&jobs(61, "randomized_delay = \"5min\"\n")).contains("maxClientCnxns"));
}

#[test]
fn a_long_list_is_read_whole_with_errors_in_order() {
    let d = Dir::new();
    let mut text = String::new();
    for i in 0..600 {
        text.push_str(&format!("[jobs.job-{i:03}]\n{GOOD}"));
        if i % 200 == 7 {
            text.push_str(&format!("bogus{i} = 1\n"));
        }
        text.push('\n');
    }
    let f = d.write("jobs.toml", &text);
    let set = d.load();
    assert_eq!(set.jobs.len(), 597);
    let keys: Vec<&str> = set.errors.iter().filter_map(|e| e.key.as_deref()).collect();
    assert_eq!(
        keys,
        [
            "jobs.job-007.bogus7",
            "jobs.job-207.bogus207",
            "jobs.job-407.bogus407"
        ]
    );
    for e in &set.errors {
        let name = e
            .key
            .as_deref()
            .and_then(|k| k.rsplit('.').next())
            .expect("key");
        assert_at(
            e,
            &f,
            pos(&text, "", &format!("{name} = 1")),
            e.key.as_deref().expect("key"),
        );
    }
}

#[test]
fn a_dangling_symlink_in_the_job_list_is_an_error_not_silence() {
    // e.g. jobs.d/app.toml -> /srv/app/jobs.toml while /srv is not mounted yet: the
    // generator runs before most mounts, and the app's jobs must not vanish unnoticed.
    let d = Dir::new();
    d.write("jobs.toml", &format!("[jobs.good]\n{GOOD}"));
    std::fs::create_dir_all(d.path().join("jobs.d")).unwrap();
    let link = d.path().join("jobs.d/app.toml");
    std::os::unix::fs::symlink("/nonexistent/jobguard/app.toml", &link).unwrap();
    let set = d.load();
    assert!(set.jobs.contains_key("good"));
    let e = only_error(&set);
    assert_eq!(e.file, link, "{e}");
    assert!(e.to_string().contains("no such file"), "{e}");

    // The main file too.
    let d = Dir::new();
    std::os::unix::fs::symlink(
        "/nonexistent/jobguard/jobs.toml",
        d.path().join("jobs.toml"),
    )
    .unwrap();
    let set = d.load();
    assert_eq!(only_error(&set).file, d.path().join("jobs.toml"));
}

#[test]
fn a_fifo_or_device_in_the_job_list_is_an_error_not_a_hang() {
    // The generator runs at boot: reading a FIFO named *.toml would block it for good.
    let d = Dir::new();
    d.write("jobs.toml", &format!("[jobs.good]\n{GOOD}"));
    std::fs::create_dir_all(d.path().join("jobs.d")).unwrap();
    let fifo = d.path().join("jobs.d/pipe.toml");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    std::os::unix::fs::symlink("/dev/zero", d.path().join("jobs.d/zero.toml")).unwrap();
    let path = d.path().to_path_buf();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(load(&ConfigSource::Path(path)));
    });
    let set = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("loading the job list hangs on a FIFO");
    assert!(set.jobs.contains_key("good"));
    assert_eq!(set.errors.len(), 2, "{:#?}", set.errors);
    assert_eq!(set.errors[0].file, fifo);
    assert!(
        set.errors[0].to_string().contains("not a regular file"),
        "{}",
        set.errors[0]
    );
}

/// A store address without `://` is refused without showing what may be a password
/// before its `@` (the message reaches the terminal, and the kernel log from the
/// generator).
#[test]
fn a_malformed_store_address_does_not_show_its_password() {
    let d = Dir::new();
    let text = format!("[jobs.a]\n{GOOD}store = \"postgres:u:hunter2@db/jobs\"\n");
    d.write("jobs.toml", &text);
    let set = d.load();
    let e = only_error(&set);
    assert!(
        e.message
            .starts_with("invalid store address \"…@db/jobs\": expected SCHEME://"),
        "{}",
        e.message
    );
    assert!(!e.to_string().contains("hunter2"), "{e}");
}

/// Issue 10, defect 3: `etcd://` and `zookeeper://` passed validation though no build
/// could open them, so every run exited 78 (both have a store since, behind a feature).
/// Only the kinds this build opens are accepted, and the message lists those, not
/// others.
#[test]
fn a_store_kind_this_build_cannot_open_is_refused_where_it_is_written() {
    for address in [
        "consul://127.0.0.1:8500",
        "mongodb://127.0.0.1:27017/jobs",
        "CONSUL://h",
    ] {
        let d = Dir::new();
        let text = format!("[jobs.ok]\n{GOOD}\n[jobs.a]\n{GOOD}store = \"{address}\"\n");
        let f = d.write("jobs.toml", &text);
        let set = d.load();
        let e = only_error(&set);
        assert_at(
            e,
            &f,
            pos(&text, "[jobs.a]", &format!("\"{address}")),
            "jobs.a.store",
        );
        assert_eq!(e.scope, ErrorScope::Job);
        assert!(e.message.contains("unknown store kind"), "{e}");
        assert!(e.message.contains("sqlite:///PATH"), "{e}");
        let listed = e
            .message
            .split_once("can open:")
            .expect("the kinds it opens")
            .1;
        assert!(
            !listed.contains("consul") && !listed.contains("mongodb"),
            "{e}"
        );
        assert!(!set.jobs.contains_key("a") && set.jobs.contains_key("ok"));

        let out = check(&["--config", f.to_str().expect("utf-8")]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        let (l, c) = pos(&text, "[jobs.a]", &format!("\"{address}"));
        assert!(
            stderr.starts_with(&format!("{}:{l}:{c}: jobs.a.store: ", f.display())),
            "{stderr}"
        );
    }
}

/// Issue 10, defect 4: `*-02-30` never elapses; it passed `check` and got a timer.
#[test]
fn a_schedule_that_never_elapses_is_refused_where_it_is_written() {
    for schedule in ["*-02-30", "*-04-31 02:00", "2001-01-01 00:00:00 UTC"] {
        let d = Dir::new();
        let text = format!(
            "[jobs.ok]\n{GOOD}\n[jobs.never]\nschedule = \"{schedule}\"\ncommand = [\"/bin/true\"]\n"
        );
        let f = d.write("jobs.toml", &text);
        let set = d.load();
        let e = only_error(&set);
        assert_at(
            e,
            &f,
            pos(&text, "[jobs.never]", &format!("\"{schedule}")),
            "jobs.never.schedule",
        );
        assert!(e.message.contains("never elapses"), "{e}");
        assert!(!set.jobs.contains_key("never") && set.jobs.contains_key("ok"));
    }
}

#[test]
fn check_refuses_a_kill_grace_that_leaves_no_time_to_renew_the_lease() {
    // The command must be dead kill_grace + 1 s before its lease could expire; what is
    // left of lease_ttl must leave room for a renewal.
    let d = Dir::new();
    let text = format!(
        "[defaults]\nkill_grace = \"20s\"\n\n\
         [jobs.long-grace]\n{GOOD}lease_ttl = \"6s\"\nkill_grace = \"30s\"\n\n\
         [jobs.short-lease]\n{GOOD}lease_ttl = \"30s\"\n\n\
         [jobs.fits]\n{GOOD}lease_ttl = \"3s\"\nkill_grace = \"0s\"\n\n\
         [jobs.fits-too]\n{GOOD}lease_ttl = \"6s\"\nkill_grace = \"3s\"\n"
    );
    let f = d.write("jobs.toml", &text);
    let set = d.load();
    assert_eq!(set.errors.len(), 2, "{:#?}", set.errors);
    assert_at(
        &set.errors[1],
        &f,
        pos(&text, "[jobs.long-grace]", "\"30s"),
        "jobs.long-grace.kill_grace",
    );
    assert_eq!(
        set.errors[1].message,
        "kill_grace 30s + safety margin 1s = 31s does not fit in lease_ttl 6s: the command must be \
         dead 31s before its lease could expire, which leaves no time to renew the lease (at most \
         two thirds of lease_ttl, 4s, may go to kill_grace and the margin); lower kill_grace to at \
         most 3s or raise lease_ttl to at least 47s"
    );
    // short-lease's grace comes from [defaults]: its error points there (errors come in
    // the order of the file).
    assert_at(
        &set.errors[0],
        &f,
        pos(&text, "[defaults]", "\"20s"),
        "defaults.kill_grace",
    );
    assert!(
        set.errors[0].message.contains("lease_ttl 30s"),
        "{}",
        set.errors[0]
    );
    let names: Vec<&str> = set.jobs.keys().map(String::as_str).collect();
    assert_eq!(names, ["fits", "fits-too"]);

    let out = check(&["--config", f.to_str().expect("utf-8")]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let (l, c) = pos(&text, "[jobs.long-grace]", "\"30s");
    assert!(
        stderr.contains(&format!(
            "{}:{l}:{c}: jobs.long-grace.kill_grace: kill_grace 30s + safety margin 1s = 31s does not fit in lease_ttl 6s",
            f.display()
        )),
        "{stderr}"
    );
}

/// Issue 9 §1: the slot is the latest elapse at or before the shim's start, which is
/// right only if a firing (late by up to `randomized_delay` + AccuracySec=1s) lands before
/// the next elapse. A job where it may not is refused, with the numbers.
#[test]
fn a_randomized_delay_as_long_as_the_shortest_interval_is_refused() {
    let d = Dir::new();
    let text = "[defaults]\nrandomized_delay = \"14min\"\n\n\
                [jobs.quarter]\nschedule = \"*:0/15 UTC\"\ncommand = [\"/bin/true\"]\n\n\
                [jobs.late]\nschedule = \"*:0/15 UTC\"\ncommand = [\"/bin/true\"]\nrandomized_delay = \"15min\"\n\n\
                [jobs.each-second]\nschedule = \"*:*:*\"\ncommand = [\"/bin/true\"]\nrandomized_delay = \"0\"\n\n\
                [jobs.dst]\nschedule = \"*-*-* 01,03:30 Europe/Berlin\"\ncommand = [\"/bin/true\"]\nrandomized_delay = \"1h\"\n\n\
                [jobs.nightly]\nschedule = \"daily Europe/Berlin\"\ncommand = [\"/bin/true\"]\nrandomized_delay = \"22h\"\n";
    let f = d.write("jobs.toml", text);
    let set = d.load();
    let names: Vec<&str> = set.jobs.keys().map(String::as_str).collect();
    assert_eq!(names, ["nightly", "quarter"], "errors: {:#?}", set.errors);
    assert_eq!(set.errors.len(), 3, "{:#?}", set.errors);
    let by_job = |job: &str| {
        set.errors
            .iter()
            .find(|e| e.job.as_deref() == Some(job))
            .unwrap_or_else(|| panic!("no error for {job}: {:#?}", set.errors))
    };
    let e = by_job("late");
    assert_at(
        e,
        &f,
        pos(text, "[jobs.late]", "\"15min\""),
        "jobs.late.randomized_delay",
    );
    assert!(
        e.message.contains("15min 1s")
            && e.message.contains("shortest interval")
            && e.message.contains("15min"),
        "{e}"
    );
    let e = by_job("each-second");
    assert_at(
        e,
        &f,
        pos(text, "[jobs.each-second]", "\"0\""),
        "jobs.each-second.randomized_delay",
    );
    assert!(e.message.contains("1s"), "{e}");
    // 01:30 and 03:30 are 2 h apart, but only 1 h on the day clocks spring forward
    // in Berlin.
    let e = by_job("dst");
    assert!(e.message.contains("interval of the schedule, 1h ("), "{e}");
    assert_eq!(e.scope, ErrorScope::Job);
}

#[test]
fn check_reports_a_randomized_delay_that_reaches_the_next_elapse() {
    let d = Dir::new();
    let text = "[jobs.tight]\nschedule = \"*:*:0/10\"\ncommand = [\"/bin/true\"]\nrandomized_delay = \"10s\"\n";
    let f = d.write("jobs.toml", text);
    let out = Command::new(env!("CARGO_BIN_EXE_jobguard"))
        .args(["check", "--config"])
        .arg(&f)
        .output()
        .expect("jobguard check");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let (line, col) = pos(text, "", "\"10s\"");
    assert!(
        err.contains(&format!("{}:{line}:{col}", f.display())) && err.contains("10s"),
        "{err}"
    );
}

#[test]
fn catch_up_and_its_limit_layer_and_bad_values_are_named() {
    use jobguard::joblist::job::CatchUp;
    let d = Dir::new();
    let text = format!(
        "[defaults]\ncatch_up = \"all\"\n\n[jobs.a]\n{GOOD}\n[jobs.b]\n{GOOD}catch_up = \"none\"\n\n\
         [jobs.c]\n{GOOD}catch_up = \"latest\"\ncatch_up_limit = 7\n"
    );
    d.write("jobs.toml", &text);
    let set = d.load();
    assert!(set.errors.is_empty(), "{:#?}", set.errors);
    let job = |n: &str| set.jobs.get(n).expect("job");
    assert_eq!(
        (job("a").catch_up, job("a").catch_up_limit),
        (CatchUp::All, 100)
    );
    assert!(job("a").persistent);
    // No catch-up: the timer does not fire at boot for a slot missed while down.
    assert_eq!(job("b").catch_up, CatchUp::None);
    assert!(!job("b").persistent);
    assert_eq!(
        (job("c").catch_up, job("c").catch_up_limit),
        (CatchUp::Latest, 7)
    );

    let text = format!(
        "[jobs.a]\n{GOOD}catch_up = \"every\"\ncatch_up_limit = 0\n\n\
         [jobs.b]\n{GOOD}catch_up_limit = \"10\"\n\n\
         [jobs.c]\n{GOOD}catch_up = \"none\"\npersistent = true\n"
    );
    let f = d.write("jobs.toml", &text);
    let set = d.load();
    let keys: Vec<&str> = set.errors.iter().filter_map(|e| e.key.as_deref()).collect();
    assert_eq!(
        keys,
        [
            "jobs.a.catch_up",
            "jobs.a.catch_up_limit",
            "jobs.b.catch_up_limit",
            "jobs.c.persistent"
        ],
        "{:#?}",
        set.errors
    );
    assert_at(
        &set.errors[0],
        &f,
        pos(&text, "", "\"every\""),
        "jobs.a.catch_up",
    );
    assert!(
        set.errors[0]
            .message
            .contains("expected one of \"latest\", \"all\", \"none\""),
        "{}",
        set.errors[0]
    );
    assert!(
        set.errors[1].message.contains("from 1 to 10000"),
        "{}",
        set.errors[1]
    );
    assert_at(
        &set.errors[3],
        &f,
        pos(&text, "persistent = true", "true"),
        "jobs.c.persistent",
    );
    assert!(
        set.errors[3].message.contains("contradicts"),
        "{}",
        set.errors[3]
    );
    assert_eq!(set.jobs.len(), 0, "no bad job is kept");
}

#[test]
fn enabled_pauses_a_job_and_on_success_is_a_unit_name() {
    let d = Dir::new();
    let text = format!(
        "[defaults]\nenabled = false\non_success = \"ok@%n.service\"\n\n\
         [jobs.paused]\n{GOOD}\n\
         [jobs.running]\n{GOOD}enabled = true\non_success = \"done-%i.service\"\n\n\
         [jobs.bad-flag]\n{GOOD}enabled = \"no\"\n\n\
         [jobs.bad-unit]\n{GOOD}on_success = \"mail.bogus\"\n"
    );
    let f = d.write("jobs.toml", &text);
    let set = d.load();
    assert!(!set.jobs["paused"].enabled);
    assert_eq!(
        set.jobs["paused"].on_success.as_deref(),
        Some("ok@%n.service")
    );
    assert!(set.jobs["running"].enabled);
    assert_eq!(
        set.jobs["running"].on_success.as_deref(),
        Some("done-%i.service")
    );
    let keys: Vec<&str> = set.errors.iter().filter_map(|e| e.key.as_deref()).collect();
    assert_eq!(keys, ["jobs.bad-flag.enabled", "jobs.bad-unit.on_success"]);
    assert_at(
        &set.errors[0],
        &f,
        pos(&text, "[jobs.bad-flag]", "\"no\""),
        "jobs.bad-flag.enabled",
    );
    assert!(
        set.errors[0]
            .message
            .contains("expected a boolean, found a string"),
        "{}",
        set.errors[0].message
    );
    assert!(
        set.errors[1].message.contains("invalid unit name"),
        "{}",
        set.errors[1].message
    );
    // Without the key a job runs on its schedule.
    d.write("jobs.toml", &format!("[jobs.a]\n{GOOD}"));
    let set = d.load();
    assert!(set.jobs["a"].enabled);
    assert_eq!(set.jobs["a"].on_success, None);
}

/// `load_one` (what `jobguard run` and the other one-job commands read) builds the named
/// job exactly as `load` does, from every file and both layers of `[defaults]`, finds the
/// same file-level and duplicate errors for it, and leaves the other jobs' tables unread:
/// neither they nor their errors are in the set.
#[test]
fn loading_one_job_builds_it_as_the_whole_list_does_and_reads_no_other_job() {
    let d = Dir::new();
    d.write(
        "jobs.toml",
        "[defaults]\nlease_ttl = \"3min\"\non_interrupted = \"hold\"\n\
         [jobs.a]\nschedule = \"hourly\"\ncommand = [\"/bin/true\"]\n\
         [jobs.broken]\nschedule = \"not a calendar\"\ncommand = [\"/bin/true\"]\n",
    );
    d.write(
        "jobs.d/more.toml",
        "[defaults]\ntimeout = \"5min\"\n\
         [jobs.b]\ndescription = \"B\"\nschedule = [\"Mon *-*-* 02:00\", \"Fri 03:00\"]\n\
         command = [\"/bin/echo\", \"b\"]\nkill_grace = \"20s\"\n\
         [jobs.twice]\nschedule = \"daily\"\ncommand = [\"/bin/true\"]\n\
         [jobs.also-broken]\nlease_ttl = \"a while\"\n",
    );
    d.write(
        "jobs.d/dup.toml",
        "[jobs.twice]\nschedule = \"weekly\"\ncommand = [\"/bin/true\"]\n",
    );
    let source = ConfigSource::Path(d.path().to_path_buf());
    let all = d.load();
    assert!(
        all.errors
            .iter()
            .any(|e| e.job.as_deref() == Some("broken")),
        "{:?}",
        all.errors
    );
    for name in ["a", "b"] {
        let one = load_one(&source, name);
        assert_eq!(one.jobs.keys().collect::<Vec<_>>(), [name], "{name}");
        assert!(one.errors.is_empty(), "{name}: {:?}", one.errors);
        assert_eq!(
            format!("{:?}", one.jobs[name]),
            format!("{:?}", all.jobs[name]),
            "{name} is built as by load"
        );
        assert_eq!(one.files, all.files);
        assert_eq!(one.default_stores.len(), all.default_stores.len());
    }
    // A job defined twice is refused by either load, with the same error.
    let twice = load_one(&source, "twice");
    assert!(twice.jobs.is_empty());
    let dup = |s: &JobSet| -> Vec<String> {
        s.errors
            .iter()
            .filter(|e| e.job.as_deref() == Some("twice"))
            .map(ToString::to_string)
            .collect()
    };
    assert_eq!(dup(&twice), dup(&all));
    assert_eq!(dup(&twice).len(), 1, "{:?}", twice.errors);
    // The named job's own errors are found; a syntax error anywhere still is.
    let broken = load_one(&source, "broken");
    assert!(broken.jobs.is_empty());
    assert!(
        broken
            .errors
            .iter()
            .all(|e| e.job.as_deref() == Some("broken"))
    );
    assert!(!broken.errors.is_empty());
    d.write("jobs.d/zz-bad.toml", "[jobs.c\n");
    let with_bad_file = load_one(&source, "a");
    assert!(with_bad_file.jobs.contains_key("a"));
    assert_eq!(with_bad_file.errors.len(), 1, "{:?}", with_bad_file.errors);
    assert_eq!(with_bad_file.errors[0].scope, ErrorScope::File);
}

/// Issue 38, item 9: a `right/` zone counts leap seconds. systemd evaluates `OnCalendar=`
/// with the C library, which counts them there, and fires 27 s after the elapse jobguard
/// computes (`systemd-analyze calendar '*-*-* 02:00:00 right/UTC'`: 02:00:27 UTC), so a run
/// could take another slot than its timer's. Such a schedule is refused, naming the file,
/// line and key and the zone to use instead, whether the zone is the expression's own or
/// the local one (`TZ`).
#[test]
fn a_zone_that_counts_leap_seconds_is_refused() {
    let d = Dir::new();
    let text = "[jobs.leap]\nschedule = \"*-*-* 02:00:00 right/Europe/Berlin\"\n\
                command = [\"/bin/true\"]\n";
    let f = d.write("jobs.toml", text);
    let set = d.load();
    let e = only_error(&set);
    assert_at(e, &f, pos(text, "", "\"*-*-*"), "jobs.leap.schedule");
    assert!(
        e.message.contains("leap seconds") && e.message.contains("use Europe/Berlin"),
        "{e}"
    );
    assert!(set.jobs.is_empty());

    let local = Dir::new();
    let f = local.write(
        "jobs.toml",
        "[jobs.local]\nschedule = \"*-*-* 02:00:00\"\ncommand = [\"/bin/true\"]\n",
    );
    // `jobguard check` with the local zone from TZ: its exit status and what it printed.
    let check_in = |tz: &str| {
        let out = Command::new(env!("CARGO_BIN_EXE_jobguard"))
            .args(["check", "--config"])
            .arg(&f)
            .env("TZ", tz)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        (out.status.code(), text)
    };
    let (code, text) = check_in("right/UTC");
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("jobs.local.schedule")
            && text.contains("right/UTC")
            && text.contains("use UTC"),
        "{text}"
    );
    // A zone file given by its path is judged by its contents.
    let (code, text) = check_in(":/usr/share/zoneinfo/right/Europe/Berlin");
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("leap seconds"), "{text}");
    let (code, text) = check_in("UTC");
    assert_eq!(code, Some(0), "{text}");
}

/// bash, with the registration `JOBGUARD_COMPLETE=bash jobguard` prints (what the packages ship,
/// packaging/gen-docs.rs), completes `WORDS` at their last word; one candidate per line.
fn bash_completes(list: &Path, words: &[&str]) -> Vec<String> {
    let bin = Path::new(env!("CARGO_BIN_EXE_jobguard"));
    let script = format!(
        "source <(JOBGUARD_COMPLETE=bash jobguard) || exit 9\n\
         COMP_WORDS=({words}); COMP_CWORD={cword}; COMP_TYPE=9\n\
         _clap_complete_jobguard jobguard {current} {previous}\n\
         printf '%s\\n' \"${{COMPREPLY[@]}}\"\n",
        words = words
            .iter()
            .map(|w| format!("'{w}'"))
            .collect::<Vec<_>>()
            .join(" "),
        cword = words.len() - 1,
        current = format_args!("'{}'", words[words.len() - 1]),
        previous = format_args!("'{}'", words[words.len() - 2]),
    );
    let path = format!(
        "{}:{}",
        bin.parent().expect("bin dir").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new("bash")
        .arg("-c")
        .arg(script)
        .env("PATH", path)
        .env("JOBGUARD_CONFIG", list)
        .output()
        .expect("bash");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.trim().to_string())
        .filter(|l| !l.is_empty())
        .collect()
}

#[test]
fn the_shell_completes_job_names_from_the_job_list() {
    let d = Dir::new();
    let list = d.write(
        "jobs.toml",
        &format!("[jobs.nightly-sync]\n{GOOD}\n[jobs.night-report]\n{GOOD}\n[jobs.backup]\n{GOOD}"),
    );
    assert_eq!(
        bash_completes(&list, &["jobguard", "history", "nig"]),
        ["night-report", "nightly-sync"]
    );
    for sub in [
        "run", "rerun", "resolve", "audit", "recover", "unlock", "drill", "prune",
    ] {
        let all = bash_completes(&list, &["jobguard", sub, ""]);
        for job in ["backup", "night-report", "nightly-sync"] {
            assert!(all.iter().any(|w| w == job), "{sub}: {all:?}");
        }
    }
    assert_eq!(
        bash_completes(&list, &["jobguard", "mark", "--job", "b"]),
        ["backup"]
    );
    // Options and subcommands still come from the command line's definition.
    assert!(bash_completes(&list, &["jobguard", "status", "--w"]).contains(&"--wide".to_string()));
    assert!(bash_completes(&list, &["jobguard", "his"]).contains(&"history".to_string()));
    // clap's own variable name does not take over a command: a `COMPLETE` that reached
    // a job's service must not turn its run into printing a script.
    let out = Command::new(env!("CARGO_BIN_EXE_jobguard"))
        .args(["calendar", "daily"])
        .env("COMPLETE", "bash")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(!String::from_utf8_lossy(&out.stdout).contains("complete"));
    // A job list that cannot be read completes no name, and says nothing.
    let none = bash_completes(&d.path().join("missing.toml"), &["jobguard", "run", ""]);
    assert!(none.iter().all(|w| !w.contains("sync")), "{none:?}");
}

/// The layout (issue 41): no file of src/ outside src/cli/ and src/bin/ names `crate::cli`,
/// and no file reaches itself through the `crate::` paths of its code (comments and test
/// modules left out). Adding an import that runs back up, or a circle, fails here.
#[test]
fn the_sources_import_downwards_only() {
    use std::collections::{BTreeMap, BTreeSet};
    fn rs_files(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                rs_files(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut paths = Vec::new();
    rs_files(&src, &mut paths);
    let name = |p: &Path| {
        let rel = p.strip_prefix(&src).unwrap().with_extension("");
        rel.to_string_lossy().into_owned()
    };
    let files: BTreeSet<String> = paths.iter().map(|p| name(p)).collect();
    // The file a `crate::a::b::c` path names: the longest prefix that is a file.
    let target = |path: &str| {
        let parts: Vec<&str> = path.split("::").collect();
        (1..=parts.len()).rev().find_map(|n| {
            let f = parts[..n].join("/");
            [f.clone(), format!("{f}/mod")]
                .into_iter()
                .find(|c| files.contains(c))
        })
    };
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for p in &paths {
        let me = name(p);
        let text = std::fs::read_to_string(p).unwrap();
        let code = text.split("#[cfg(test)]").next().unwrap_or("");
        for line in code.lines() {
            let line = line.split("//").next().unwrap_or("");
            for (i, _) in line.match_indices("crate::") {
                let path: String = line[i + 7..]
                    .chars()
                    .take_while(|c| c.is_ascii_lowercase() || *c == '_' || *c == ':')
                    .collect();
                let path = path.trim_end_matches(':');
                if let Some(t) = target(path).filter(|t| *t != me) {
                    if t.starts_with("cli/") && !me.starts_with("cli/") && !me.starts_with("bin/") {
                        panic!("src/{me}.rs imports from src/{t}.rs, above it");
                    }
                    edges.entry(me.clone()).or_default().insert(t);
                }
            }
        }
    }
    // A file that reaches itself: depth-first search from each.
    for start in edges.keys() {
        let mut seen = BTreeSet::new();
        let mut todo: Vec<&String> = edges[start].iter().collect();
        while let Some(f) = todo.pop() {
            assert!(
                f != start,
                "src/{start}.rs reaches itself through its imports"
            );
            if seen.insert(f) {
                todo.extend(edges.get(f).into_iter().flatten());
            }
        }
    }
    assert!(edges.len() > 30, "{} files with imports", edges.len());
}

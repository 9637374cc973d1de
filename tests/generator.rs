//! The generator, run as the real binary.
//!
//! Golden directories: each `tests/generator/NN-name/` holds `input/` (a job-list
//! directory) and `expected/` (the output tree; missing means empty), plus `stderr` when
//! the generator should warn. The generator runs with `JOBGUARD_CONFIG=input`; the
//! absolute path of `input` is replaced by `/etc/jobguard` in the output before comparing,
//! so the expected files read as on a real host. Files are compared by content, links by
//! target, and every difference is reported at once.
//!
//! `JOBGUARD_BLESS=1 cargo test --test generator` rewrites `expected/` and `stderr` from
//! what the generator writes now, for an intended change; review the diff before
//! committing it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use jobguard::systemd::unit_name::{escape_specifiers, file_uri};

mod common;

const GENERATOR: &str = env!("CARGO_BIN_EXE_jobguard-generator");

fn cases_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/generator")
}

fn bless() -> bool {
    std::env::var_os("JOBGUARD_BLESS").is_some_and(|v| v == "1")
}

/// The generator with a clean environment: `JOBGUARD_CONFIG=config`, output to `out`.
fn generator(config: &Path, args: &[&Path]) -> Output {
    Command::new(GENERATOR)
        .args(args)
        .env("JOBGUARD_CONFIG", config)
        .env_remove("JOBGUARD_UNIT_DIR")
        .env_remove("SYSTEMD_SCOPE")
        .output()
        .expect("run jobguard-generator")
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Entry {
    Dir,
    File(String),
    Link(PathBuf),
}

/// Every entry below `root` by relative path; a missing root is an empty tree.
fn tree(root: &Path) -> BTreeMap<PathBuf, Entry> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, Entry>) {
        let Ok(rd) = std::fs::read_dir(dir) else {
            return;
        };
        for e in rd {
            let e = e.expect("dir entry");
            let path = e.path();
            let rel = path.strip_prefix(root).expect("below root").to_path_buf();
            let ft = e.file_type().expect("file type");
            if ft.is_symlink() {
                out.insert(
                    rel,
                    Entry::Link(std::fs::read_link(&path).expect("read link")),
                );
            } else if ft.is_dir() {
                out.insert(rel, Entry::Dir);
                walk(root, &path, out);
            } else {
                out.insert(
                    rel,
                    Entry::File(std::fs::read_to_string(&path).expect("utf-8 file")),
                );
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    out
}

/// Replaces the input directory's absolute path, in every form the generator writes it,
/// with `/etc/jobguard`.
fn normalize(text: &str, input: &Path) -> String {
    let raw = input.display().to_string();
    let uri = file_uri(input);
    let uri = uri.strip_prefix("file:").unwrap_or(&uri);
    text.replace(&escape_specifiers(uri), "/etc/jobguard")
        .replace(&escape_specifiers(&raw), "/etc/jobguard")
        .replace(&raw, "/etc/jobguard")
}

fn normalized_tree(root: &Path, input: &Path) -> BTreeMap<PathBuf, Entry> {
    tree(root)
        .into_iter()
        .map(|(p, e)| {
            let e = match e {
                Entry::File(t) => Entry::File(normalize(&t, input)),
                other => other,
            };
            (p, e)
        })
        .collect()
}

/// Every difference between two trees, as readable lines.
fn diff(expected: &BTreeMap<PathBuf, Entry>, actual: &BTreeMap<PathBuf, Entry>) -> Vec<String> {
    let mut out = Vec::new();
    for (p, e) in expected {
        match actual.get(p) {
            None => out.push(format!("missing: {}", p.display())),
            Some(a) if a != e => out.push(format!(
                "differs: {}\n--- expected\n{e:?}\n+++ actual\n{a:?}",
                p.display()
            )),
            Some(_) => {}
        }
    }
    for p in actual.keys().filter(|p| !expected.contains_key(*p)) {
        out.push(format!("unexpected: {}", p.display()));
    }
    out
}

fn write_tree(root: &Path, t: &BTreeMap<PathBuf, Entry>) {
    for (p, e) in t {
        let path = root.join(p);
        match e {
            Entry::Dir => std::fs::create_dir_all(&path).expect("mkdir"),
            Entry::File(text) => std::fs::write(&path, text).expect("write"),
            Entry::Link(target) => std::os::unix::fs::symlink(target, &path).expect("symlink"),
        }
    }
}

#[test]
fn golden_directories() {
    let mut cases: Vec<PathBuf> = std::fs::read_dir(cases_dir())
        .expect("tests/generator")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.join("input").is_dir())
        .collect();
    cases.sort();
    assert!(cases.len() >= 6, "golden cases missing: {cases:?}");
    let mut failures = Vec::new();
    for case in &cases {
        let input = case.join("input");
        let out = tempfile::tempdir().expect("tempdir");
        let o = generator(&input, &[out.path()]);
        let name = case
            .file_name()
            .expect("name")
            .to_string_lossy()
            .into_owned();
        if o.status.code() != Some(0) {
            failures.push(format!(
                "{name}: exit {:?}, stderr: {}",
                o.status,
                String::from_utf8_lossy(&o.stderr)
            ));
            continue;
        }
        let actual = normalized_tree(out.path(), &input);
        let stderr = normalize(&String::from_utf8_lossy(&o.stderr), &input);
        let expected_dir = case.join("expected");
        let stderr_file = case.join("stderr");
        if bless() {
            let _ = std::fs::remove_dir_all(&expected_dir);
            let _ = std::fs::remove_file(&stderr_file);
            if !actual.is_empty() {
                std::fs::create_dir_all(&expected_dir).expect("mkdir expected");
                write_tree(&expected_dir, &actual);
            }
            if !stderr.is_empty() {
                std::fs::write(&stderr_file, &stderr).expect("write stderr");
            }
            continue;
        }
        for d in diff(&tree(&expected_dir), &actual) {
            failures.push(format!("{name}: {d}"));
        }
        let want = std::fs::read_to_string(&stderr_file).unwrap_or_default();
        if stderr != want {
            failures.push(format!(
                "{name}: stderr differs\n--- expected\n{want}+++ actual\n{stderr}"
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} differences:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn bad_jobs_are_skipped_with_a_warning_and_good_ones_written() {
    let input = cases_dir().join("03-bad-and-good/input");
    let out = tempfile::tempdir().expect("tempdir");
    let o = generator(&input, &[out.path()]);
    assert_eq!(o.status.code(), Some(0));
    let stderr = String::from_utf8_lossy(&o.stderr);
    for bad in ["Bad-Name", "typo", "bad-span", "no-command", "twice"] {
        assert!(
            stderr.contains(&format!("skipping job {bad}\n")),
            "{bad} not named in: {stderr}"
        );
        assert!(
            !out.path()
                .join(format!("jobguard@{bad}.service.d"))
                .exists()
        );
    }
    assert!(stderr.contains("10-broken.toml:2:"), "{stderr}");
    assert!(stderr.contains("skipping file\n"), "{stderr}");
    for good in ["good-one", "good-two"] {
        assert!(
            out.path()
                .join(format!("jobguard@{good}.timer.d/50-jobguard.conf"))
                .is_file()
        );
        assert!(
            out.path()
                .join(format!("timers.target.wants/jobguard@{good}.timer"))
                .is_symlink()
        );
    }
}

#[test]
fn three_directories_are_accepted_and_other_counts_are_usage_errors() {
    let input = cases_dir().join("01-one-job/input");
    let dirs = tempfile::tempdir().expect("tempdir");
    let (n, e, l) = (
        dirs.path().join("normal"),
        dirs.path().join("early"),
        dirs.path().join("late"),
    );
    for d in [&n, &e, &l] {
        std::fs::create_dir(d).expect("mkdir");
    }
    let o = generator(&input, &[&n, &e, &l]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        n.join("jobguard@store-sync.timer.d/50-jobguard.conf")
            .is_file()
    );
    assert!(
        tree(&e).is_empty() && tree(&l).is_empty(),
        "only the normal directory is written"
    );
    for args in [vec![], vec![n.as_path(), e.as_path()]] {
        let o = generator(&input, &args);
        assert_eq!(o.status.code(), Some(2));
        assert!(
            String::from_utf8_lossy(&o.stderr).contains("usage: jobguard-generator NORMAL_DIR")
        );
    }
}

#[test]
fn an_output_directory_that_cannot_be_written_fails() {
    let input = cases_dir().join("01-one-job/input");
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("not-a-dir");
    std::fs::write(&file, "").expect("write");
    let o = generator(&input, &[&file]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("cannot write"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

#[test]
fn the_template_directory_can_be_moved() {
    let input = cases_dir().join("01-one-job/input");
    let out = tempfile::tempdir().expect("tempdir");
    let o = Command::new(GENERATOR)
        .arg(out.path())
        .env("JOBGUARD_CONFIG", &input)
        .env("JOBGUARD_UNIT_DIR", "/opt/units")
        .output()
        .expect("run");
    assert_eq!(o.status.code(), Some(0));
    let link = std::fs::read_link(
        out.path()
            .join("timers.target.wants/jobguard@store-sync.timer"),
    )
    .expect("link");
    assert_eq!(link, Path::new("/opt/units/jobguard@.timer"));
}

#[test]
fn jobguard_generate_writes_what_the_generator_writes() {
    let input = cases_dir().join("02-defaults-several-files/input");
    let a = tempfile::tempdir().expect("tempdir");
    let b = tempfile::tempdir().expect("tempdir");
    let o = generator(&input, &[a.path()]);
    assert_eq!(o.status.code(), Some(0));
    let out_dir = b.path().join("new/dir");
    let o = Command::new(env!("CARGO_BIN_EXE_jobguard"))
        .args(["generate", "--output"])
        .arg(&out_dir)
        .arg("--config")
        .arg(&input)
        .env_remove("JOBGUARD_UNIT_DIR")
        .output()
        .expect("run jobguard generate");
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(tree(a.path()), tree(&out_dir));
    assert!(!tree(&out_dir).is_empty());
    // Writing again over the same directory replaces files and links.
    let o = Command::new(env!("CARGO_BIN_EXE_jobguard"))
        .args(["generate", "--output"])
        .arg(&out_dir)
        .arg("--config")
        .arg(&input)
        .env_remove("JOBGUARD_UNIT_DIR")
        .output()
        .expect("run jobguard generate");
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(tree(a.path()), tree(&out_dir));
}

/// Copies `src` into `dst` recursively, keeping links as links.
fn copy_tree(src: &Path, dst: &Path) {
    std::fs::create_dir_all(dst).expect("mkdir");
    for e in std::fs::read_dir(src).expect("read dir") {
        let e = e.expect("entry");
        let (from, to) = (e.path(), dst.join(e.file_name()));
        let ft = e.file_type().expect("file type");
        if ft.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(&from).expect("link"), &to)
                .expect("symlink");
        } else if ft.is_dir() {
            copy_tree(&from, &to);
        } else {
            std::fs::copy(&from, &to).expect("copy");
        }
    }
}

/// `systemd-analyze verify` of the templates plus generated units, in a root directory
/// laid out like a host: the system's own units and the templates in
/// /usr/lib/systemd/system, the generator's output in /etc/systemd/system, and a stand-in
/// `jobguard` in /usr/local/bin (verify checks that ExecStart= can be executed). Any
/// message on stderr (an unknown key, a bad value, a missing unit) fails the test.
#[test]
fn generated_units_pass_systemd_analyze_verify() {
    let root = tempfile::tempdir().expect("tempdir");
    let r = root.path();
    let unit_dir = r.join("usr/lib/systemd/system");
    copy_tree(Path::new("/usr/lib/systemd/system"), &unit_dir);
    for t in [
        "jobguard@.service",
        "jobguard@.timer",
        "jobguard-recover.service",
        "jobguard-recover.timer",
    ] {
        std::fs::copy(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("units").join(t),
            unit_dir.join(t),
        )
        .expect("copy template");
    }
    let bin = r.join("usr/local/bin/jobguard");
    std::fs::create_dir_all(bin.parent().expect("parent")).expect("mkdir");
    std::fs::write(&bin, "#!/bin/sh\nexit 0\n").expect("write stand-in");
    std::fs::set_permissions(&bin, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    let etc = r.join("etc/systemd/system");
    std::fs::create_dir_all(&etc).expect("mkdir");
    let mut units = vec![
        String::from("jobguard-recover.service"),
        String::from("jobguard-recover.timer"),
    ];
    for case in [
        "01-one-job",
        "02-defaults-several-files",
        "04-unicode-percent",
        "05-remote-store",
        "07-store-credential",
    ] {
        let input = cases_dir().join(case).join("input");
        let o = generator(&input, &[&etc]);
        assert_eq!(
            o.status.code(),
            Some(0),
            "{case}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let set =
            jobguard::joblist::config::load(&jobguard::joblist::config::ConfigSource::Path(input));
        for name in set.jobs.keys() {
            units.push(format!("jobguard@{name}.timer"));
            units.push(format!("jobguard@{name}.service"));
        }
    }
    assert!(units.len() > 12, "{units:?}");
    let o = Command::new("systemd-analyze")
        .arg("verify")
        .arg(format!("--root={}", r.display()))
        .args(&units)
        .output()
        .expect("run systemd-analyze");
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        o.status.success() && stderr.is_empty(),
        "systemd-analyze verify {units:?}:\n{stderr}"
    );

    // The same check catches a broken drop-in, so it can fail.
    let dropin = etc.join("jobguard@store-sync.timer.d/50-jobguard.conf");
    let mut text = std::fs::read_to_string(&dropin).expect("read drop-in");
    text.push_str("Persistent=maybe\n");
    std::fs::write(&dropin, text).expect("write drop-in");
    let o = Command::new("systemd-analyze")
        .arg("verify")
        .arg(format!("--root={}", r.display()))
        .arg("jobguard@store-sync.timer")
        .output()
        .expect("run systemd-analyze");
    assert!(String::from_utf8_lossy(&o.stderr).contains("Failed to parse boolean value"));
}

/// In generator mode (three directories) warnings go to the kernel log, not stderr.
#[test]
fn generator_mode_logs_to_kmsg() {
    use std::io::{Read, Seek, SeekFrom};
    use std::os::unix::fs::OpenOptionsExt;
    let mut kmsg = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open("/dev/kmsg")
        .expect("open /dev/kmsg (the tests run as root)");
    kmsg.seek(SeekFrom::End(0))
        .expect("seek to the end of the kernel log");
    let input = cases_dir().join("03-bad-and-good/input");
    let dirs = tempfile::tempdir().expect("tempdir");
    let (n, e, l) = (
        dirs.path().join("n"),
        dirs.path().join("e"),
        dirs.path().join("l"),
    );
    for d in [&n, &e, &l] {
        std::fs::create_dir(d).expect("mkdir");
    }
    let o = generator(&input, &[&n, &e, &l]);
    assert_eq!(o.status.code(), Some(0));
    assert!(
        o.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let mut records = Vec::new();
    let mut buf = vec![0u8; 8192];
    // One record per read; EAGAIN at the end.
    while let Ok(len) = kmsg.read(&mut buf) {
        records.push(String::from_utf8_lossy(&buf[..len]).into_owned());
    }
    let ours: Vec<&String> = records
        .iter()
        .filter(|r| r.contains("jobguard-generator[") && r.contains(input.to_str().expect("utf-8")))
        .collect();
    // The first field of a /dev/kmsg record is facility * 8 + level: a record written
    // from user space as "<4>" is facility user (1), level warning (4), so 12.
    assert!(
        ours.iter()
            .any(|r| r.starts_with("12,") && r.contains("skipping job typo")),
        "{records:#?}"
    );
    assert!(
        ours.iter().any(|r| r.contains("skipping file")),
        "{ours:#?}"
    );
}

/// systemd itself reads the generated drop-ins back as meant: a booted container (see
/// tests/common/container.rs) with the generator installed, and `systemctl show` of the
/// units. Checks the escaping of `%`, newlines and non-ASCII text in descriptions, a
/// trailing backslash, specifiers in `OnFailure=` and `OnSuccess=`, and the values from the job list.
#[test]
fn systemd_reads_the_generated_units_as_meant() {
    let test = "systemd_reads_the_generated_units_as_meant";
    if !common::go_on(test, common::container::prerequisites()) {
        return;
    }
    let jobs = "[jobs.\"report_v2.de\"]\n\
                description = \"Umsatz 100% → Übersicht für %i und %n\\nzweite Zeile\"\n\
                schedule = \"*-*-* 06:00:00\"\n\
                command = [\"/bin/true\"]\n\
                randomized_delay = \"90s\"\n\
                kill_grace = \"1min\"\n\
                on_failure = \"status-email@%n.service\"\n\
                on_success = \"done-%i.service\"\n\
                store = \"postgres://db.internal/jobs\"\n\
                persistent = false\n\n\
                [jobs.trailing]\n\
                description = 'ends with a backslash \\'\n\
                schedule = \"daily\"\n\
                command = [\"/bin/true\"]\n\
                store_credential = \"db%x\"\n";
    let mut opts = common::container::Options::new()
        .copy(env!("CARGO_BIN_EXE_jobguard"), "/usr/local/bin/jobguard")
        .copy(GENERATOR, "/usr/local/bin/jobguard-generator")
        .symlink(
            "/etc/systemd/system-generators/jobguard-generator",
            "/usr/local/bin/jobguard-generator",
        )
        .file("/etc/jobguard/jobs.toml", jobs)
        .file(
            "/etc/credstore/db%x",
            "sqlite:///var/lib/jobguard/jobguard.db\n",
        );
    // Each service lists the credentials systemd gave it, before the shim runs.
    for (unit, tag) in [
        ("jobguard@trailing.service", "trailing"),
        ("jobguard-recover.service", "recover"),
    ] {
        opts = opts.file(
            &format!("/etc/systemd/system/{unit}.d/90-test.conf"),
            format!(
                "[Service]\nExecStartPre=/bin/sh -c 'ls \"$$CREDENTIALS_DIRECTORY\" > /run/{tag}.creds'\n"
            ),
        );
    }
    for t in [
        "jobguard@.service",
        "jobguard@.timer",
        "jobguard-recover.service",
        "jobguard-recover.timer",
    ] {
        opts = opts.copy(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("units").join(t),
            &format!("/usr/lib/systemd/system/{t}"),
        );
    }
    let c = common::container::Container::boot("generator", &opts).expect("boot a container");
    let show = |unit: &str, props: &[&str]| -> BTreeMap<String, String> {
        let mut argv = vec!["systemctl", "show", unit];
        for p in props {
            argv.extend(["-p", p]);
        }
        let out = c.exec_ok(&argv).expect("systemctl show");
        out.lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    let svc = show(
        "jobguard@report_v2.de.service",
        &[
            "Description",
            "SourcePath",
            "Documentation",
            "OnFailure",
            "OnSuccess",
            "After",
            "Wants",
            "TimeoutStopUSec",
            "Type",
            "KillMode",
            "NotifyAccess",
            "DropInPaths",
        ],
    );
    assert_eq!(
        svc["Description"],
        "Umsatz 100% → Übersicht für %i und %n zweite Zeile"
    );
    assert_eq!(svc["SourcePath"], "/etc/jobguard/jobs.toml");
    // The template's documentation, then the job's file.
    assert_eq!(
        svc["Documentation"],
        "file:/usr/share/doc/jobguard/README.md file:/etc/jobguard/jobs.toml"
    );
    assert_eq!(
        svc["OnFailure"],
        "status-email@jobguard@report_v2.de.service.service"
    );
    assert_eq!(svc["OnSuccess"], "done-report_v2.de.service");
    assert!(svc["After"].contains("network-online.target"), "{svc:?}");
    assert!(svc["After"].contains("jobguard-recover.service"), "{svc:?}");
    assert!(svc["Wants"].contains("network-online.target"), "{svc:?}");
    assert_eq!(svc["TimeoutStopUSec"], "1min 30s");
    assert_eq!(
        (
            svc["Type"].as_str(),
            svc["KillMode"].as_str(),
            svc["NotifyAccess"].as_str()
        ),
        ("exec", "mixed", "main")
    );
    assert!(
        svc["DropInPaths"]
            .contains("/run/systemd/generator/jobguard@report_v2.de.service.d/50-jobguard.conf"),
        "{svc:?}"
    );
    let timer = show(
        "jobguard@report_v2.de.timer",
        &[
            "Description",
            "TimersCalendar",
            "Persistent",
            "RandomizedDelayUSec",
            "AccuracyUSec",
            "ActiveState",
        ],
    );
    assert_eq!(
        timer["Description"],
        "Timer for Umsatz 100% → Übersicht für %i und %n zweite Zeile"
    );
    assert!(
        timer["TimersCalendar"].contains("OnCalendar=*-*-* 06:00:00"),
        "{timer:?}"
    );
    assert_eq!(timer["Persistent"], "no");
    assert_eq!(timer["RandomizedDelayUSec"], "1min 30s");
    assert_eq!(timer["AccuracyUSec"], "1s");
    assert_eq!(timer["ActiveState"], "active");
    // A single trailing backslash would join the next line; it is doubled, and the next
    // line (SourcePath=) is still read.
    let trailing = show("jobguard@trailing.service", &["Description", "SourcePath"]);
    assert_eq!(trailing["Description"], "ends with a backslash \\\\");
    assert_eq!(trailing["SourcePath"], "/etc/jobguard/jobs.toml");
    // A '%' in a credential ID is doubled in the drop-ins and read back as one: the job's
    // service and the recover service get the credential under its own name.
    // (`systemctl show -p LoadCredential` prints "[unprintable]" on systemd 252.)
    // (The recover pass itself fails: report_v2.de's store is not reachable.)
    for unit in ["jobguard-recover.service", "jobguard@trailing.service"] {
        c.exec_ok(&["systemctl", "start", "--no-block", unit])
            .expect("start");
    }
    for unit in ["trailing", "recover"] {
        let listed = common::wait_for(
            &format!("/run/{unit}.creds"),
            std::time::Duration::from_secs(30),
            std::time::Duration::from_millis(100),
            || Ok(c.exec_ok(&["cat", &format!("/run/{unit}.creds")]).ok()),
        );
        assert_eq!(listed.expect("credentials listed"), "db%x\n", "{unit}");
    }
    // The recover units are enabled by the generator.
    let recover = show("jobguard-recover.timer", &["ActiveState"]);
    assert_eq!(recover["ActiveState"], "active");
}

/// Issue 10, defect 3: a job whose store kind this build cannot open got a timer that
/// failed every run. It gets no unit, with a warning; the other jobs are still written.
#[test]
fn a_job_whose_store_kind_cannot_be_opened_gets_no_unit() {
    let input = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        input.path().join("jobs.toml"),
        "[jobs.good]\nschedule = \"daily\"\ncommand = [\"/bin/true\"]\n\n\
         [jobs.on-consul]\nschedule = \"daily\"\ncommand = [\"/bin/true\"]\nstore = \"consul://127.0.0.1:8500\"\n\n\
         [jobs.on-mongo]\nschedule = \"daily\"\ncommand = [\"/bin/true\"]\nstore = \"mongodb://127.0.0.1:27017\"\n\n\
         [jobs.never]\nschedule = \"*-02-30\"\ncommand = [\"/bin/true\"]\n",
    )
    .expect("write");
    let out = tempfile::tempdir().expect("tempdir");
    let o = generator(input.path(), &[out.path()]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{stderr}");
    for (bad, line) in [("on-consul", 8), ("on-mongo", 13), ("never", 16)] {
        assert!(
            stderr.contains(&format!("jobs.toml:{line}:"))
                && stderr.contains(&format!("skipping job {bad}\n")),
            "{bad} not named at line {line} in: {stderr}"
        );
        assert!(!out.path().join(format!("jobguard@{bad}.timer.d")).exists());
        assert!(
            !out.path()
                .join(format!("timers.target.wants/jobguard@{bad}.timer"))
                .exists()
        );
    }
    assert!(
        out.path()
            .join("timers.target.wants/jobguard@good.timer")
            .is_symlink()
    );
}

/// Issue 10, defect 6: `jobguard-generator --help` took `--help` for an output directory
/// (`cannot write --help: No such file or directory`).
#[test]
fn help_and_version_are_answered_and_other_dashed_arguments_refused() {
    let input = cases_dir().join("01-one-job/input");
    let cwd = tempfile::tempdir().expect("tempdir");
    let run = |args: &[&str]| {
        Command::new(GENERATOR)
            .args(args)
            .current_dir(cwd.path())
            .env("JOBGUARD_CONFIG", &input)
            .output()
            .expect("run")
    };
    for flag in ["--help", "-h"] {
        let o = run(&[flag]);
        assert_eq!(o.status.code(), Some(0), "{flag}: {o:?}");
        let stdout = String::from_utf8_lossy(&o.stdout);
        assert!(
            stdout.contains("usage: jobguard-generator NORMAL_DIR"),
            "{stdout}"
        );
        assert!(stdout.contains("systemd.generator(7)"), "{stdout}");
    }
    let o = run(&["--version"]);
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        format!("jobguard-generator {}\n", env!("CARGO_PKG_VERSION"))
    );
    for args in [
        &["--bogus"][..],
        &["-x", "a", "b"],
        &["--", "x", "y", "z", "w"],
    ] {
        let o = run(args);
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains("usage: jobguard-generator"), "{stderr}");
        assert!(!stderr.contains("cannot write"), "{stderr}");
    }
    assert_eq!(
        std::fs::read_dir(cwd.path()).expect("read").count(),
        0,
        "nothing written"
    );
}

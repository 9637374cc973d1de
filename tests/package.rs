//! The packages (issue 4): `scripts/test` builds the .deb and the .rpm once, with the one
//! release build of its run (`scripts/package`), and names their directory in
//! `JOBGUARD_PACKAGES_DIR`. Without it (`cargo test --test package`), the test runs
//! `scripts/package` itself, once per test process, in its own target directory,
//! `target/package-test`, because `cargo test` holds the lock of the usual one. The tests read their
//! file lists, conffiles, dependencies and scriptlets with `dpkg-deb` and Debian's
//! `rpm`, and install the .deb and the .rpm on a freshly booted systemd in a container
//! (`tests/common/container.rs`): install, a job in /etc/jobguard/jobs.d/, its timer
//! started by the recover pass a daemon-reload starts (jobguard-recover.path), a run through the shim,
//! `man`, an upgrade that keeps an edited jobs.toml, remove and purge.
//!
//! Needs root, systemd-nspawn, dpkg-deb, rpm and man (skipped with a `SKIPPED` line
//! otherwise, failed in CI; `.ci/run` installs them), and cargo-deb and
//! cargo-generate-rpm (`scripts/package` installs them if missing, about 3 min).
//!
//! ```sh
//! cargo test --test package
//! cargo test --test package deb_installs -- --nocapture
//! ```

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use common::container::{self, Container, Options};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The built packages.
struct Packages {
    deb: PathBuf,
    rpm: PathBuf,
}

/// The packages: those `scripts/test` built with the one release build of its run
/// (`JOBGUARD_PACKAGES_DIR`, the output directory of `scripts/package`), or else built
/// here the first time it is called in this test process.
fn packages() -> &'static Packages {
    static BUILT: OnceLock<Result<Packages, String>> = OnceLock::new();
    let built = BUILT.get_or_init(|| {
        let out = match std::env::var_os("JOBGUARD_PACKAGES_DIR") {
            Some(dir) => PathBuf::from(dir),
            None => {
                let target = Path::new(ROOT).join("target/package-test");
                let out = target.join("out");
                let _ = std::fs::remove_dir_all(&out);
                let status = Command::new(Path::new(ROOT).join("scripts/package"))
                    .arg(&out)
                    .env("CARGO_TARGET_DIR", &target)
                    .status()
                    .map_err(|e| format!("cannot run scripts/package: {e}"))?;
                if !status.success() {
                    return Err(format!("scripts/package: {status}"));
                }
                out
            }
        };
        let arch = run(&["dpkg", "--print-architecture"]).trim().to_string();
        let rpm_arch = run(&["uname", "-m"]).trim().to_string();
        let deb = out.join(format!("jobguard_{VERSION}-1_{arch}.deb"));
        let rpm = out.join(format!("jobguard-{VERSION}-1.{rpm_arch}.rpm"));
        for p in [&deb, &rpm] {
            if !p.is_file() {
                return Err(format!("scripts/package did not write {}", p.display()));
            }
        }
        Ok(Packages { deb, rpm })
    });
    match built {
        Ok(p) => p,
        Err(e) => panic!("building the packages failed: {e}"),
    }
}

/// Runs a host command; panics unless it succeeds; returns stdout.
fn run(argv: &[&str]) -> String {
    let out = Command::new(argv[0])
        .args(&argv[1..])
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", argv[0]));
    assert!(
        out.status.success(),
        "`{}`: {}\n{}",
        argv.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn have(tool: &str) -> Option<String> {
    let found = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(tool).is_file()))
        .unwrap_or(false);
    (!found).then(|| format!("{tool} not found (.ci/run installs it)"))
}

fn ready(test: &str, tools: &[&str]) -> bool {
    let why = tools.iter().find_map(|t| have(t));
    common::go_on(test, why)
}

/// Files every package holds, beside the man pages and the zsh completion.
const FILES: &[&str] = &[
    "/usr/bin/jobguard",
    "/usr/lib/systemd/system-generators/jobguard-generator",
    "/usr/lib/systemd/system/jobguard@.service",
    "/usr/lib/systemd/system/jobguard@.timer",
    "/usr/lib/systemd/system/jobguard-recover.service",
    "/usr/lib/systemd/system/jobguard-recover.timer",
    "/usr/lib/systemd/system/jobguard-recover.path",
    "/usr/lib/systemd/system/jobguard-mail@.service",
    "/usr/lib/tmpfiles.d/jobguard.conf",
    "/usr/lib/systemd/catalog/jobguard.catalog",
    "/etc/jobguard/jobs.toml",
    "/etc/jobguard/jobs.d/README",
    "/usr/share/bash-completion/completions/jobguard",
    "/usr/share/fish/vendor_completions.d/jobguard.fish",
    "/usr/share/doc/jobguard/README.md",
    "/usr/share/doc/jobguard/CHANGELOG.md",
    "/usr/share/doc/jobguard/SECURITY.md",
    "/usr/share/doc/jobguard/docs/commands.md",
    "/usr/share/doc/jobguard/docs/development.md",
    "/usr/share/doc/jobguard/docs/from-cron.md",
    "/usr/share/doc/jobguard/docs/install.md",
    "/usr/share/doc/jobguard/docs/jobs.md",
    "/usr/share/doc/jobguard/docs/jobs.toml.md",
    "/usr/share/doc/jobguard/docs/monitoring.md",
    "/usr/share/doc/jobguard/docs/multi-host.md",
    "/usr/share/doc/jobguard/docs/security.md",
    "/usr/share/doc/jobguard/docs/stores.md",
    "/usr/share/doc/jobguard/docs/troubleshooting.md",
    "/usr/share/doc/jobguard/examples/jobguard.rules.yml",
];

/// The subcommands of `jobguard --help` (without `help`).
fn subcommands() -> Vec<String> {
    let help = run(&[env!("CARGO_BIN_EXE_jobguard"), "--help"]);
    let mut subs: Vec<String> = help
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|s| *s != "help")
        .map(str::to_string)
        .collect();
    subs.sort();
    subs
}

/// The subcommand pages that jobguard(1) names in SEE ALSO.
fn subcommands_in_jobguard_1() -> Vec<String> {
    let page = std::fs::read_to_string(Path::new(ROOT).join("packaging/man/jobguard.1"))
        .expect("read packaging/man/jobguard.1");
    let see_also = page
        .split(".SH SEE ALSO")
        .nth(1)
        .expect("a SEE ALSO section");
    let mut subs: Vec<String> = see_also
        .lines()
        .filter_map(|l| l.strip_prefix(".BR jobguard-")?.split_once(" (1)"))
        .map(|(sub, _)| sub.to_string())
        .collect();
    subs.sort();
    subs
}

fn man_pages(files: &[String], section: &str) -> Vec<String> {
    let dir = format!("/usr/share/man/man{section}/");
    let mut pages: Vec<String> = files
        .iter()
        .filter_map(|f| f.strip_prefix(&dir))
        .map(str::to_string)
        .collect();
    pages.sort();
    pages
}

fn check_man_pages(files: &[String]) {
    let subs = subcommands();
    assert!(subs.len() >= 9, "jobguard --help lists {subs:?}");
    assert_eq!(subcommands_in_jobguard_1(), subs, "jobguard(1) SEE ALSO");
    let mut expected: Vec<String> = subs.iter().map(|s| format!("jobguard-{s}.1.gz")).collect();
    expected.push("jobguard.1.gz".into());
    expected.sort();
    assert_eq!(man_pages(files, "1"), expected, "section 1 pages");
    assert_eq!(man_pages(files, "5"), ["jobguard.toml.5.gz"]);
    assert_eq!(man_pages(files, "8"), ["jobguard-generator.8.gz"]);
}

#[test]
fn deb_holds_the_files_conffiles_dependencies_and_scripts() {
    if !ready(
        "deb_holds_the_files_conffiles_dependencies_and_scripts",
        &["dpkg-deb"],
    ) {
        return;
    }
    let deb = packages().deb.to_str().expect("utf-8 path").to_string();
    let listing = run(&["dpkg-deb", "-c", &deb]);
    let files: Vec<String> = listing
        .lines()
        .filter(|l| !l.starts_with('d'))
        .filter_map(|l| l.split_whitespace().nth(5))
        .map(|p| p.trim_start_matches('.').to_string())
        .collect();
    for f in FILES
        .iter()
        .chain(&["/usr/share/zsh/vendor-completions/_jobguard"])
    {
        assert!(
            files.iter().any(|x| x == f),
            "{f} missing from the .deb:\n{listing}"
        );
    }
    check_man_pages(&files);
    for bin in [
        "./usr/bin/jobguard",
        "./usr/lib/systemd/system-generators/jobguard-generator",
    ] {
        let line = listing.lines().find(|l| l.ends_with(bin)).expect(bin);
        assert!(line.starts_with("-rwxr-xr-x"), "{line}");
    }

    let control = run(&["dpkg-deb", "-f", &deb, "Depends"]);
    assert!(control.contains("systemd (>= 252)"), "Depends: {control}");
    assert!(control.contains("libc6"), "Depends: {control}");

    let dir = tempfile::tempdir().expect("tempdir");
    let ctl = dir.path().to_str().expect("utf-8 path");
    run(&["dpkg-deb", "-e", &deb, ctl]);
    let read = |name: &str| std::fs::read_to_string(dir.path().join(name)).expect(name);
    let conffiles = read("conffiles");
    assert_eq!(
        conffiles.lines().collect::<Vec<_>>(),
        ["/etc/jobguard/jobs.toml", "/etc/jobguard/jobs.d/README"]
    );
    let postinst = read("postinst");
    for needle in [
        "systemctl daemon-reload",
        "journalctl --update-catalog",
        "systemd-tmpfiles --create jobguard.conf",
        "systemctl start jobguard-recover.timer",
        "[ -d /run/systemd/system ]",
    ] {
        assert!(
            postinst.contains(needle),
            "postinst lacks {needle:?}:\n{postinst}"
        );
    }
    let postrm = read("postrm");
    for needle in [
        "systemctl daemon-reload",
        "journalctl --update-catalog",
        "rm -rf /var/lib/jobguard",
    ] {
        assert!(
            postrm.contains(needle),
            "postrm lacks {needle:?}:\n{postrm}"
        );
    }
    // The state goes on purge only.
    let purge = postrm.split("purge)").nth(1).expect("a purge branch");
    assert!(purge.contains("rm -rf /var/lib/jobguard"));
    let remove = postrm.split("remove)").nth(1).expect("a remove branch");
    let remove = remove.split(";;").next().unwrap_or("");
    assert!(
        !remove.contains("/var/lib/jobguard"),
        "remove must keep the state"
    );
    for script in ["postinst", "prerm", "postrm"] {
        run(&["sh", "-n", &dir.path().join(script).to_string_lossy()]);
    }
}

#[test]
fn rpm_holds_the_files_config_dependencies_and_scripts() {
    if !ready(
        "rpm_holds_the_files_config_dependencies_and_scripts",
        &["rpm"],
    ) {
        return;
    }
    let rpm = packages().rpm.to_str().expect("utf-8 path").to_string();
    let files: Vec<String> = run(&["rpm", "-qlp", &rpm])
        .lines()
        .map(str::to_string)
        .collect();
    for f in FILES
        .iter()
        .chain(&["/usr/share/zsh/site-functions/_jobguard"])
    {
        assert!(
            files.iter().any(|x| x == f),
            "{f} missing from the .rpm: {files:?}"
        );
    }
    check_man_pages(&files);

    let flags = run(&[
        "rpm",
        "-qp",
        "--qf",
        "[%{FILENAMES} %{FILEFLAGS:fflags}\n]",
        &rpm,
    ]);
    let config: Vec<&str> = flags.lines().filter(|l| l.starts_with("/etc/")).collect();
    assert_eq!(
        config,
        [
            "/etc/jobguard/jobs.d/README cn",
            "/etc/jobguard/jobs.toml cn"
        ],
        "%config(noreplace) on /etc:\n{flags}"
    );
    let configs = run(&["rpm", "-qpc", &rpm]);
    assert!(
        configs.lines().any(|l| l == "/etc/jobguard/jobs.toml"),
        "{configs}"
    );

    let requires = run(&["rpm", "-qpR", &rpm]);
    assert!(
        requires.lines().any(|l| l.trim() == "systemd >= 252"),
        "requires:\n{requires}"
    );

    let scripts = run(&["rpm", "-qp", "--scripts", &rpm]);
    for needle in [
        "postinstall scriptlet",
        "preuninstall scriptlet",
        "postuninstall scriptlet",
        "systemctl daemon-reload",
        "journalctl --update-catalog",
        "systemd-tmpfiles --create jobguard.conf",
        "systemctl enable jobguard-recover.timer",
        "systemctl start jobguard-recover.timer",
    ] {
        assert!(
            scripts.contains(needle),
            "scripts lack {needle:?}:\n{scripts}"
        );
    }
    assert!(
        !scripts.lines().any(|l| l.trim_start().starts_with("rm ")),
        "rpm keeps the state:\n{scripts}"
    );
}

/// Runs `script` with `sh -c` inside; panics with its output unless it succeeds.
fn sh(c: &Container, script: &str) -> String {
    c.sh_ok(script).unwrap_or_else(|e| panic!("{e}"))
}

const APT: &str = "DEBIAN_FRONTEND=noninteractive apt-get -y -q \
    -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold";

const HELLO: &str = r#"[jobs.hello]
description = "Say hello from the package test"
schedule = "*-*-* 03:00:00"
command = ["/bin/sh", "-c", "echo \"$JOBGUARD_IDEMPOTENCY_KEY\" >> /var/tmp/hello.out"]
"#;

/// A job list with one job on each store kind that is not in every build: the packaged
/// jobguard must open them all (`check` refuses a kind its build left out).
const EVERY_KIND: &str = r#"[jobs.on-etcd]
schedule = "*-*-* 03:00:00"
command = ["/bin/true"]
store = "etcd://127.0.0.1:2379"

[jobs.on-zookeeper]
schedule = "*-*-* 03:00:00"
command = ["/bin/true"]
store = "zookeeper://127.0.0.1:2181/jobguard"
"#;

/// A copy of `deb` with version `VERSION-2` and one more line in the shipped jobs.toml,
/// so that the upgrade meets an operator's edit of a conffile the package changed.
fn newer_deb(deb: &Path, dir: &Path) -> PathBuf {
    let tree = dir.join("tree");
    run(&[
        "dpkg-deb",
        "-R",
        &deb.to_string_lossy(),
        &tree.to_string_lossy(),
    ]);
    let control = tree.join("DEBIAN/control");
    let text = std::fs::read_to_string(&control).expect("control");
    let text = text.replace(
        &format!("Version: {VERSION}-1\n"),
        &format!("Version: {VERSION}-2\n"),
    );
    assert!(text.contains(&format!("Version: {VERSION}-2")), "{text}");
    std::fs::write(&control, text).expect("write control");
    let jobs = tree.join("etc/jobguard/jobs.toml");
    let mut shipped = std::fs::read_to_string(&jobs).expect("jobs.toml");
    shipped.push_str("# Shipped by the newer package.\n");
    std::fs::write(&jobs, shipped).expect("write jobs.toml");
    let out = dir.join(format!("jobguard_{VERSION}-2.deb"));
    run(&[
        "dpkg-deb",
        "--root-owner-group",
        "-b",
        &tree.to_string_lossy(),
        &out.to_string_lossy(),
    ]);
    out
}

/// A job written to /etc/jobguard/jobs.d: after a daemon-reload, the recover pass it
/// starts (jobguard-recover.path, which the package started) starts its timer at once, not
/// at the recover timer's next minute; started, it runs through the shim and is recorded.
fn a_job_in_jobs_d_is_armed_and_runs(c: &Container) {
    c.write_file("/etc/jobguard/jobs.d/hello.toml", HELLO)
        .expect("write job");
    sh(c, "jobguard check && systemctl daemon-reload");
    common::wait_for(
        "jobguard@hello.timer to be started by the reload's recover pass",
        Duration::from_secs(20),
        Duration::from_secs(1),
        || {
            let out = c
                .exec(&["systemctl", "is-active", "jobguard@hello.timer"])
                .map_err(|e| e.to_string())?;
            Ok((String::from_utf8_lossy(&out.stdout).trim() == "active").then_some(()))
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));
    sh(c, "systemctl start jobguard@hello.service");
    common::wait_for(
        "the hello run to be recorded succeeded",
        Duration::from_secs(60),
        Duration::from_millis(200),
        || {
            let out = c
                .exec(&["jobguard", "history", "hello", "--json"])
                .map_err(|e| e.to_string())?;
            Ok(String::from_utf8_lossy(&out.stdout)
                .contains("\"succeeded\"")
                .then_some(()))
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(sh(c, "cat /var/tmp/hello.out").starts_with("hello@"));
    assert!(sh(c, "ls /var/lib/jobguard").contains("jobguard.db"));
}

/// After the package went and a daemon-reload, systemd knows no jobguard unit.
fn no_jobguard_unit_is_left(c: &Container) {
    sh(c, "systemctl daemon-reload");
    assert_eq!(
        sh(
            c,
            "systemctl list-units --all --plain --no-legend 'jobguard*'"
        )
        .trim(),
        "",
        "units left after the package went"
    );
}

#[test]
fn deb_installs_runs_upgrades_and_goes_away_on_a_booted_system() {
    let test = "deb_installs_runs_upgrades_and_goes_away_on_a_booted_system";
    if !common::go_on(test, container::prerequisites()) || !ready(test, &["dpkg-deb", "man"]) {
        return;
    }
    let pkgs = packages();
    let work = tempfile::tempdir().expect("tempdir");
    let newer = newer_deb(&pkgs.deb, work.path());
    let opts = Options::new()
        .copy(&pkgs.deb, "/root/pkg/jobguard_1.deb")
        .copy(&newer, "/root/pkg/jobguard_2.deb");
    let c = Container::boot("pkg", &opts).expect("boot");

    // Install: nothing is scheduled, the recovery timer runs, the catalog is loaded.
    sh(&c, &format!("{APT} install /root/pkg/jobguard_1.deb"));
    assert_eq!(sh(&c, "command -v jobguard").trim(), "/usr/bin/jobguard");
    assert_eq!(
        sh(&c, "jobguard --version").trim(),
        format!("jobguard {VERSION}")
    );
    assert_eq!(
        sh(&c, "systemctl is-enabled jobguard-recover.timer").trim(),
        "enabled"
    );
    assert_eq!(
        sh(&c, "systemctl is-active jobguard-recover.timer").trim(),
        "active"
    );
    assert!(
        sh(&c, "jobguard check").contains("0 valid jobs"),
        "the example job list must schedule nothing"
    );
    assert_eq!(
        sh(
            &c,
            "systemctl list-units --all --plain --no-legend 'jobguard@*'"
        )
        .trim(),
        ""
    );
    assert!(
        sh(
            &c,
            "test -d /run/jobguard/lock && stat -c %a /run/jobguard/lock"
        )
        .trim()
            == "700"
    );
    let catalog = sh(
        &c,
        "journalctl --list-catalog 34ff0b1f3dbf41c6ace7495ab7b45f37",
    );
    assert!(catalog.contains("jobguard"), "catalog: {catalog}");

    // Every store kind of the registry is built in, etcd's and ZooKeeper's included.
    c.write_file("/root/every-kind.toml", EVERY_KIND)
        .expect("write job list");
    let every = sh(&c, "jobguard check --config /root/every-kind.toml 2>&1");
    assert!(every.contains("2 valid jobs"), "{every}");

    // man, and the completions load.
    let page = sh(&c, "MANWIDTH=100 man -P cat jobguard 2>&1");
    assert!(
        page.contains("JOURNAL EVENTS") && page.contains("690bc128ba2840dcae86cd7463875f5e"),
        "{page}"
    );
    assert!(sh(&c, "man -P cat 5 jobguard.toml 2>&1").contains("on_interrupted"));
    assert!(sh(&c, "man -P cat 8 jobguard-generator 2>&1").contains("systemd.generator"));
    assert!(sh(&c, "man -P cat jobguard-run 2>&1").contains("--force"));
    assert!(
        sh(
            &c,
            "bash -c '. /usr/share/bash-completion/completions/jobguard && complete -p jobguard'"
        )
        .contains("jobguard")
    );

    a_job_in_jobs_d_is_armed_and_runs(&c);
    // The installed bash completion asks jobguard for the job list's names.
    c.write_file(
        "/root/complete.sh",
        ". /usr/share/bash-completion/completions/jobguard\n\
         COMP_WORDS=(jobguard history hel); COMP_CWORD=2; COMP_TYPE=9\n\
         _clap_complete_jobguard jobguard hel history\n\
         printf '%s\\n' \"${COMPREPLY[@]}\"\n",
    )
    .expect("write the completion script");
    let words = sh(&c, "bash /root/complete.sh");
    assert_eq!(words.trim(), "hello", "{words}");
    assert!(sh(&c, "ls /var/lib/jobguard").contains("jobguard.db"));

    // Upgrade: the operator's jobs.toml stays; the new one is put beside it.
    sh(
        &c,
        "echo '# Edited by the operator.' >> /etc/jobguard/jobs.toml",
    );
    sh(&c, &format!("{APT} install /root/pkg/jobguard_2.deb"));
    assert_eq!(
        sh(&c, "dpkg-query -W -f '${Version}' jobguard").trim(),
        format!("{VERSION}-2")
    );
    assert!(sh(&c, "cat /etc/jobguard/jobs.toml").contains("# Edited by the operator."));
    assert!(
        sh(&c, "cat /etc/jobguard/jobs.toml.dpkg-dist").contains("# Shipped by the newer package.")
    );
    assert_eq!(
        sh(
            &c,
            "systemctl is-active jobguard@hello.timer jobguard-recover.timer"
        )
        .trim(),
        "active\nactive"
    );

    // Remove: no jobguard unit is left after a daemon-reload; the state stays.
    sh(&c, &format!("{APT} remove jobguard"));
    no_jobguard_unit_is_left(&c);
    // list-unit-files exits 1 when nothing matches.
    let files = c
        .exec(&["systemctl", "list-unit-files", "--no-legend", "jobguard*"])
        .expect("systemctl list-unit-files");
    assert_eq!(
        String::from_utf8_lossy(&files.stdout).trim(),
        "",
        "unit files left after remove"
    );
    assert!(sh(&c, "ls /var/lib/jobguard").contains("jobguard.db"));
    assert!(sh(&c, "test ! -e /usr/bin/jobguard && echo gone").contains("gone"));

    // Installed again after a remove: the recovery timer is enabled and runs again.
    sh(&c, &format!("{APT} install /root/pkg/jobguard_2.deb"));
    assert_eq!(
        sh(&c, "systemctl is-enabled jobguard-recover.timer; systemctl is-active jobguard-recover.timer").trim(),
        "enabled\nactive"
    );

    // Purge: the state goes too.
    sh(&c, &format!("{APT} purge jobguard"));
    assert!(sh(&c, "test ! -e /var/lib/jobguard && echo gone").contains("gone"));
    assert!(sh(&c, "test ! -e /etc/jobguard/jobs.toml && echo gone").contains("gone"));
}

/// The .rpm on a booted systemd, with Debian's `rpm` (`--nodeps`: the machine's rpm
/// database knows none of the Debian packages it requires), so that its scriptlets run as
/// they would on a Fedora or RHEL host: install enables and starts the recovery timer,
/// creates the runtime directories and loads the catalog; a job added to jobs.d runs; an
/// upgrade (the package installed over itself) keeps the operator's edit of jobs.toml and
/// leaves every timer running; erasing stops and removes every unit and keeps the state;
/// installing again arms the recovery timer again.
#[test]
fn rpm_installs_runs_upgrades_and_goes_away_on_a_booted_system() {
    let test = "rpm_installs_runs_upgrades_and_goes_away_on_a_booted_system";
    if !common::go_on(test, container::prerequisites()) || !ready(test, &["rpm"]) {
        return;
    }
    let pkgs = packages();
    let opts = Options::new().copy(&pkgs.rpm, "/root/pkg/jobguard.rpm");
    let c = Container::boot("rpm", &opts).expect("boot");
    const RPM: &str = "rpm --nodeps";

    sh(&c, "mkdir -p /var/lib/rpm && rpm --initdb");
    sh(&c, &format!("{RPM} -i /root/pkg/jobguard.rpm"));
    assert_eq!(
        sh(&c, "rpm -q --qf '%{VERSION}' jobguard").trim(),
        VERSION,
        "the rpm database knows the package"
    );
    assert_eq!(
        sh(&c, "jobguard --version").trim(),
        format!("jobguard {VERSION}")
    );
    assert_eq!(
        sh(&c, "systemctl is-enabled jobguard-recover.timer; systemctl is-active jobguard-recover.timer jobguard-recover.path").trim(),
        "enabled\nactive\nactive"
    );
    assert_eq!(
        sh(&c, "stat -c %a /run/jobguard/lock").trim(),
        "700",
        "the tmpfiles of the package were created"
    );
    assert!(
        sh(
            &c,
            "journalctl --list-catalog 34ff0b1f3dbf41c6ace7495ab7b45f37"
        )
        .contains("jobguard"),
        "the catalog was loaded"
    );
    assert!(sh(&c, "jobguard check").contains("0 valid jobs"));

    a_job_in_jobs_d_is_armed_and_runs(&c);

    // Upgrade: the package installed over itself. The operator's jobs.toml stays, and
    // nothing stops.
    sh(
        &c,
        "echo '# Edited by the operator.' >> /etc/jobguard/jobs.toml",
    );
    sh(
        &c,
        &format!("{RPM} -U --replacepkgs /root/pkg/jobguard.rpm"),
    );
    assert!(sh(&c, "cat /etc/jobguard/jobs.toml").contains("# Edited by the operator."));
    assert_eq!(
        sh(
            &c,
            "systemctl is-enabled jobguard-recover.timer; systemctl is-active jobguard@hello.timer jobguard-recover.timer"
        )
        .trim(),
        "enabled\nactive\nactive"
    );

    // Erase: no jobguard unit is left after a daemon-reload; the state stays.
    sh(&c, &format!("{RPM} -e jobguard"));
    no_jobguard_unit_is_left(&c);
    assert!(sh(&c, "test ! -e /usr/bin/jobguard && echo gone").contains("gone"));
    assert!(sh(&c, "ls /var/lib/jobguard").contains("jobguard.db"));

    // Installed again: the recovery timer is enabled and runs again.
    sh(&c, &format!("{RPM} -i /root/pkg/jobguard.rpm"));
    assert_eq!(
        sh(&c, "systemctl is-enabled jobguard-recover.timer; systemctl is-active jobguard-recover.timer").trim(),
        "enabled\nactive"
    );
}

/// The reference page and jobguard.toml(5) describe exactly the keys the parser reads
/// (`jobguard::joblist::keys::KEYS`, the one table): docs/jobs.toml.md's key table has a row per
/// job key, in the table's order, with its type and default as the table writes them,
/// and its `[metrics]` section names each metrics key; the man page's KEYS section has an
/// entry per job key, and its METRICS section names each metrics key. A key added to the
/// parser without its documentation fails here.
#[test]
fn the_reference_page_and_jobguard_toml_5_describe_every_key_the_parser_reads() {
    use jobguard::joblist::keys::{self, Scope};
    let doc = std::fs::read_to_string(Path::new(ROOT).join("docs/jobs.toml.md"))
        .expect("read docs/jobs.toml.md");
    let rows: Vec<(String, String, String)> = doc
        .lines()
        .filter(|l| l.starts_with("| `"))
        .map(|l| {
            // Cells split at `|` not escaped as `\|`.
            let cells: Vec<String> = l
                .replace("\\|", "\u{1}")
                .split('|')
                .map(|c| c.trim().replace('\u{1}', "\\|"))
                .collect();
            (
                cells[1].trim_matches('`').to_string(),
                cells[2].clone(),
                cells[3].clone(),
            )
        })
        .collect();
    let table: Vec<(String, String, String)> = keys::of(Scope::Job)
        .map(|k| (k.name.to_string(), k.ty.to_string(), k.default.to_string()))
        .collect();
    assert_eq!(
        rows, table,
        "docs/jobs.toml.md against jobguard::joblist::keys::KEYS"
    );
    let metrics_section = doc
        .split("### Metrics textfile: `[metrics]`")
        .nth(1)
        .expect("a [metrics] section in docs/jobs.toml.md");
    let page = std::fs::read_to_string(Path::new(ROOT).join("packaging/man/jobguard.toml.5"))
        .expect("read packaging/man/jobguard.toml.5");
    let section = |name: &str| {
        page.split(&format!(".SH {name}\n"))
            .nth(1)
            .and_then(|s| s.split("\n.SH ").next())
            .unwrap_or_else(|| panic!("a {name} section"))
            .to_string()
    };
    let keys_section = section("KEYS");
    let lines: Vec<&str> = keys_section.lines().collect();
    let mut page_keys: Vec<&str> = lines
        .windows(2)
        .filter(|w| w[0] == ".TP")
        .filter_map(|w| w[1].strip_prefix(".B "))
        .collect();
    page_keys.sort_unstable();
    let mut job_keys: Vec<&str> = keys::of(Scope::Job).map(|k| k.name).collect();
    job_keys.sort_unstable();
    assert!(job_keys.len() >= 26, "{job_keys:?}");
    assert_eq!(
        page_keys, job_keys,
        "jobguard.toml(5) KEYS against jobguard::joblist::keys::KEYS"
    );
    let man_metrics = section("METRICS");
    for k in keys::of(Scope::Metrics) {
        assert!(
            metrics_section.contains(&format!("`{}`", k.name)),
            "{} in docs/jobs.toml.md's [metrics] section",
            k.name
        );
        assert!(
            man_metrics.contains(&format!(".B {}\n", k.name)),
            "{} in jobguard.toml(5)'s METRICS section",
            k.name
        );
    }
}

/// Every MESSAGE_ID of src/systemd/journal.rs is explained in jobguard(1).
#[test]
fn jobguard_1_lists_every_journal_message_id() {
    let source = std::fs::read_to_string(Path::new(ROOT).join("src/systemd/journal.rs"))
        .expect("read src/systemd/journal.rs");
    let ids: Vec<&str> = source
        .split('"')
        .filter(|s| s.len() == 32 && s.bytes().all(|b| b.is_ascii_hexdigit()))
        .collect();
    assert!(
        ids.len() >= 13,
        "MESSAGE_IDs in src/systemd/journal.rs: {ids:?}"
    );
    let page = std::fs::read_to_string(Path::new(ROOT).join("packaging/man/jobguard.1"))
        .expect("read packaging/man/jobguard.1");
    let events = page
        .split(".SH JOURNAL EVENTS")
        .nth(1)
        .expect("a JOURNAL EVENTS section");
    for id in ids {
        assert!(events.contains(id), "jobguard(1) lacks MESSAGE_ID {id}");
    }
}

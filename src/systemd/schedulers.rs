//! Other schedulers on this host that already run a job's command: cron's tables and
//! systemd timers that are not jobguard's. `jobguard check` warns about each, since the
//! same work would then run twice per slot, once outside every guard (issue "Run it like
//! cron": systemd-cron turns an `/etc/cron.d` line into a `cron-*.timer` of its own).
//!
//! Cron tables are read as crontab(5) describes them: the system tables (`/etc/crontab`,
//! `/etc/cron.d/*`) have a user field after the five time fields (or after an `@daily`
//! style keyword); the user tables (`/var/spool/cron/crontabs/USER` on Debian,
//! `/var/spool/cron/USER` with cronie on RHEL and Fedora, `/var/spool/cron/tabs/USER` on
//! SUSE) do not. Blank lines,
//! comments and `NAME=value` lines are skipped. Files under `/etc/cron.d` whose names
//! cron ignores (with a dot, or not made of `[A-Za-z0-9_-]`) are skipped too.
//!
//! A line matches a job when, with runs of white space made one space, the job's command
//! (its argv joined with spaces, or the script of `sh -c SCRIPT`) contains the line's
//! command or the line's command contains it, and the shorter of the two is at least
//! [`MIN_MATCH`] bytes long (so `true` matches nothing).

use std::path::{Path, PathBuf};

use crate::joblist::job::Job;

/// The shortest command text that counts as a match.
pub const MIN_MATCH: usize = 8;

/// One place where another scheduler runs a job's command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Elsewhere {
    /// The job.
    pub job: String,
    /// Where: `FILE:LINE` for a cron table, the unit name for a timer.
    pub place: String,
    /// The command as that scheduler has it.
    pub command: String,
}

/// The text of a command (`argv`) to compare: the script of `sh -c SCRIPT` (any shell by its
/// base name: sh, bash, dash, zsh), else the argv joined with spaces; white space
/// collapsed.
pub fn command_text(argv: &[String]) -> String {
    let shell = argv
        .first()
        .and_then(|p| Path::new(p).file_name())
        .and_then(|n| n.to_str());
    let text = match (shell, argv.get(1).map(String::as_str), argv.get(2)) {
        (Some("sh" | "bash" | "dash" | "zsh"), Some("-c"), Some(script)) => script.clone(),
        _ => argv.join(" "),
    };
    collapse(&text)
}

fn collapse(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Whether two command texts (collapsed) name the same work, by the rule of the module.
pub fn same_work(a: &str, b: &str) -> bool {
    let (short, long) = if a.len() <= b.len() { (a, b) } else { (b, a) };
    short.len() >= MIN_MATCH && long.contains(short)
}

/// The command of one crontab line, or `None` for a blank, comment, variable or
/// malformed line. `system`: the table has a user field.
pub fn cron_command(line: &str, system: bool) -> Option<String> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return None;
    }
    let first = line.split_whitespace().next()?;
    if !first.starts_with('@') && first.contains('=') {
        return None;
    }
    // `NAME = value` (spaces around `=`) is a variable too.
    let mut words = line.split_whitespace();
    if !first.starts_with('@') && words.nth(1) == Some("=") {
        return None;
    }
    let fields = if first.starts_with('@') { 1 } else { 5 } + usize::from(system);
    let mut rest = line;
    for _ in 0..fields {
        rest = rest.trim_start();
        let end = rest.find(char::is_whitespace)?;
        rest = &rest[end..];
    }
    // cron turns the first unescaped `%` into the end of the command (the rest is stdin).
    let mut cmd = String::new();
    let mut chars = rest.trim().chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'%') => {
                cmd.push('%');
                chars.next();
            }
            '%' => break,
            c => cmd.push(c),
        }
    }
    let cmd = collapse(&cmd);
    (!cmd.is_empty()).then_some(cmd)
}

/// The cron tables of this host under `root` (`/` in use; a directory in tests): each
/// file and whether it is a system table.
pub fn cron_tables(root: &Path) -> Vec<(PathBuf, bool)> {
    let mut out = vec![(root.join("etc/crontab"), true)];
    let valid = |n: &str| {
        !n.is_empty()
            && n.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    };
    // Debian's cron keeps the user tables in /var/spool/cron/crontabs, cronie (RHEL,
    // Fedora) in /var/spool/cron itself (where Debian has only that directory), SUSE's
    // cronie in /var/spool/cron/tabs.
    for (dir, system) in [
        (root.join("etc/cron.d"), true),
        (root.join("var/spool/cron/crontabs"), false),
        (root.join("var/spool/cron/tabs"), false),
        (root.join("var/spool/cron"), false),
    ] {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        let mut files: Vec<PathBuf> = entries
            .flatten()
            .filter(|e| e.file_name().to_str().is_some_and(valid))
            .map(|e| e.path())
            .filter(|p| p.is_file())
            .collect();
        files.sort();
        out.extend(files.into_iter().map(|p| (p, system)));
    }
    out.retain(|(p, _)| p.is_file());
    out
}

/// Every cron line under `root` that runs one of `jobs`' commands.
pub fn in_cron(jobs: &[&Job], root: &Path) -> Vec<Elsewhere> {
    let wanted: Vec<(&str, String)> = jobs
        .iter()
        .map(|j| (j.name.as_str(), command_text(&j.command)))
        .collect();
    let mut out = Vec::new();
    for (file, system) in cron_tables(root) {
        let Ok(text) = std::fs::read_to_string(&file) else {
            continue;
        };
        for (n, line) in text.lines().enumerate() {
            let Some(cmd) = cron_command(line, system) else {
                continue;
            };
            for (job, mine) in &wanted {
                if same_work(mine, &cmd) {
                    out.push(Elsewhere {
                        job: (*job).to_string(),
                        place: format!("{}:{}", file.display(), n + 1),
                        command: cmd.clone(),
                    });
                }
            }
        }
    }
    out
}

/// Every active systemd timer that is not jobguard's and whose service runs one of
/// `jobs`' commands (its `ExecStart=` argv joined, or its `sh -c` script).
///
/// # Errors
/// As [`crate::systemd::dbus::read_other_timers`].
pub fn in_timers(jobs: &[&Job]) -> Result<Vec<Elsewhere>, crate::systemd::dbus::SystemdError> {
    let wanted: Vec<(&str, String)> = jobs
        .iter()
        .map(|j| (j.name.as_str(), command_text(&j.command)))
        .collect();
    let mut out = Vec::new();
    for (timer, argvs) in crate::systemd::dbus::read_other_timers()? {
        for argv in argvs {
            let cmd = command_text(&argv);
            for (job, mine) in &wanted {
                if same_work(mine, &cmd) {
                    out.push(Elsewhere {
                        job: (*job).to_string(),
                        place: timer.clone(),
                        command: cmd.clone(),
                    });
                }
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crontab_lines_give_their_commands() {
        assert_eq!(
            cron_command(
                "0 2 * * * root flock -n /tmp/l /usr/bin/php /data/sync.php",
                true
            )
            .as_deref(),
            Some("flock -n /tmp/l /usr/bin/php /data/sync.php")
        );
        assert_eq!(
            cron_command("@daily  backup   /usr/local/bin/backup --all", true).as_deref(),
            Some("/usr/local/bin/backup --all")
        );
        assert_eq!(
            cron_command("*/5 * * * * /usr/bin/report  x%y\\%z", false).as_deref(),
            Some("/usr/bin/report x")
        );
        assert_eq!(
            cron_command("*/5 * * * * /usr/bin/date +\\%s", false).as_deref(),
            Some("/usr/bin/date +%s")
        );
        for skip in [
            "",
            "  # 0 2 * * * x",
            "MAILTO=root",
            "PATH = /bin",
            "0 2 * *",
        ] {
            assert_eq!(cron_command(skip, true), None, "{skip:?}");
        }
    }

    #[test]
    fn short_commands_never_match_and_either_may_contain_the_other() {
        assert!(same_work(
            "/usr/bin/php /data/sync.php",
            "flock -n /tmp/l /usr/bin/php /data/sync.php"
        ));
        assert!(same_work("/data/run.sh >> /var/log/x 2>&1", "/data/run.sh"));
        assert!(!same_work("true", "/bin/true"));
        assert!(!same_work("/usr/bin/a", "/usr/bin/b"));
    }

    #[test]
    fn tables_of_a_root_are_found_and_matched_with_file_and_line() {
        let d = tempfile::tempdir().expect("tempdir");
        let w = |rel: &str, text: &str| {
            let p = d.path().join(rel);
            std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
            std::fs::write(p, text).expect("write");
        };
        w(
            "etc/crontab",
            "SHELL=/bin/sh\n17 * * * * root cd / && run-parts --report /etc/cron.hourly\n",
        );
        w(
            "etc/cron.d/sync",
            "# nightly\n0 2 * * * root flock -n /tmp/s /usr/bin/php /data/sync.php\n",
        );
        w(
            "etc/cron.d/sync.dpkg-old",
            "0 2 * * * root /usr/bin/php /data/sync.php\n",
        );
        w(
            "var/spool/cron/crontabs/alice",
            "30 3 * * * /usr/bin/php /data/sync.php > /dev/null\n",
        );
        // cronie (RHEL, Fedora): the user tables lie in /var/spool/cron itself.
        w(
            "var/spool/cron/bob",
            "MAILTO=bob\n45 4 * * 1 /usr/bin/php /data/sync.php\n",
        );
        // SUSE: /var/spool/cron/tabs.
        w(
            "var/spool/cron/tabs/carol",
            "15 5 * * * /usr/bin/php /data/sync.php\n",
        );
        let cal = crate::calendar::CalendarSpec::parse("daily").expect("calendar");
        let job = Job::new(
            "sync",
            cal,
            vec!["/usr/bin/php".into(), "/data/sync.php".into()],
            Path::new("/etc/jobguard/jobs.toml"),
        );
        let found = in_cron(&[&job], d.path());
        let places: Vec<String> = found
            .iter()
            .map(|e| {
                e.place
                    .trim_start_matches(&d.path().display().to_string())
                    .to_string()
            })
            .collect();
        assert_eq!(
            places,
            [
                "/etc/cron.d/sync:2",
                "/var/spool/cron/crontabs/alice:1",
                "/var/spool/cron/tabs/carol:1",
                "/var/spool/cron/bob:2"
            ]
        );
    }
}

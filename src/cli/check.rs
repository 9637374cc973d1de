//! `jobguard check`: validates the whole job list. Prints every error to stderr as
//! `FILE:LINE:COLUMN: KEY: MESSAGE`, a one-line summary to stdout, and exits
//! [`crate::exit::FAILURE`] when there is any error.
//!
//! Then it checks each valid job against this host, as its run would meet it: the `user`
//! exists, the `working_directory` is a directory, the command is an executable file
//! (looked up in `PATH` when it has no `/`, as the run does), so is the script a shell
//! command (`sh -c TEXT`) starts with ([`shell_script`]), and the store address can
//! be read (`store_file`, `store_credential`) and is one this build can open (parameters,
//! TLS files; nothing is connected to), and, as root, that the SQLite store, `store_file`,
//! credential and TLS files are root's alone ([`crate::safe_path`]). Those problems are
//! printed as `FILE:LINE:COLUMN: KEY: MESSAGE (on this host)`, at the value that is
//! wrong, and also make the exit status 1; the generator does not check them, since a
//! user or file may appear after boot.
//!
//! Under systemd it also reads how systemd will end each job's service (over D-Bus,
//! [`crate::systemd::dbus::read_kill_settings`]): a drop-in of the operator's that sets
//! `KillMode=` to anything but `mixed`, or `SendSIGKILL=no`, would let the job's processes
//! outlive the lease of a shim that died ([`kill_problem`]); that is a problem on this
//! host too, printed as `FILE: jobs.JOB: jobguard@JOB.service: MESSAGE (on this host)`.
//! Without systemd on the system bus this part is left out.
//!
//! It reads no store's records, so it does not report another machine with this machine
//! id: a store's first read makes or migrates its schema, which a check must not do.
//! `jobguard status`, `metrics` and the journal report it.
//!
//! Last, warnings that do not change the exit status (`FILE: KEY: warning: MESSAGE`):
//! a `store_file` others may read, `#insecure` TLS, a Redis store without
//! persistence or with an eviction policy (the one check that connects to a store), and
//! a job whose command another scheduler also runs: a line of `/etc/crontab`,
//! `/etc/cron.d/*` or a user crontab, or an active timer that is not jobguard's
//! ([`crate::systemd::schedulers`]).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::cli::ConfigArgs;
use crate::guard::lease::FENCE_MARGIN;
use crate::joblist::config::{self, ConfigSource, JobSet};
use crate::joblist::job::Job;
use crate::joblist::timespan::TimeSpan;
use crate::systemd::dbus::KillSettings;

/// Runs `jobguard check`: ends with 0, or [`crate::exit::FAILURE`] when the job list or
/// this host has a problem. Its findings are its output (on stderr, in the compiler's
/// `FILE:LINE:COLUMN:` form), not errors of its own.
///
/// # Errors
/// None.
pub fn run(args: &ConfigArgs) -> crate::exit::Result {
    let source = ConfigSource::resolve(args.config.clone());
    let set = config::load(&source);
    for e in &set.errors {
        eprintln!("{e}");
    }
    // The PATH a run's command is looked up in: its service's (the caller's own plays no
    // part, crate::shim::environment), or the job's own.
    let service_path = crate::shim::environment::service_path();
    let mut on_host = 0;
    for job in set.jobs.values() {
        let path = job.environment.get("PATH").unwrap_or(&service_path);
        for (key, message) in host_problems(job, path) {
            let at = job
                .position(key)
                .map_or_else(|| job.source.display().to_string(), ToString::to_string);
            eprintln!("{at}: jobs.{}.{key}: {message} (on this host)", job.name);
            on_host += 1;
        }
        for (key, message) in host_warnings(job) {
            eprintln!(
                "{}: jobs.{}.{key}: warning: {message}",
                job.source.display(),
                job.name
            );
        }
    }
    for (job, message) in crowded_zookeeper(&set, jiff::Timestamp::now()) {
        eprintln!(
            "{}: jobs.{}.schedule: warning: {message}",
            job.source.display(),
            job.name
        );
    }
    let names: Vec<&str> = set.jobs.keys().map(String::as_str).collect();
    if !names.is_empty()
        && let Ok(settings) = crate::systemd::dbus::read_kill_settings(&names)
    {
        for (job, k) in set.jobs.values().zip(&settings) {
            if let Some(message) = kill_problem(job, k) {
                eprintln!(
                    "{}: jobs.{}: {}: {message} (on this host)",
                    job.source.display(),
                    job.name,
                    k.unit.name
                );
                on_host += 1;
            }
        }
    }
    // The same work run by another scheduler too: a warning each (issue: two schedulers).
    let jobs: Vec<&Job> = set.jobs.values().collect();
    let mut elsewhere = crate::systemd::schedulers::in_cron(&jobs, Path::new("/"));
    if !jobs.is_empty() {
        match crate::systemd::schedulers::in_timers(&jobs) {
            Ok(timers) => elsewhere.extend(timers),
            // Off systemd there are no timers to compare; on it, say what was not checked.
            Err(e) if crate::ops::recover::under_systemd() => {
                eprintln!(
                    "jobguard: warning: the other timers of this host were not compared: {e}"
                );
            }
            Err(_) => {}
        }
    }
    for e in elsewhere {
        let source = set.jobs.get(&e.job).map(|j| j.source.display().to_string());
        eprintln!(
            "{}: jobs.{}.command: warning: {} also runs it ({:?}): each slot would run twice, once without jobguard; remove it there",
            source.unwrap_or_default(),
            e.job,
            e.place,
            e.command
        );
    }
    let mut line = summary(&set);
    if on_host > 0 {
        line.push_str(&format!(
            "; {on_host} problem{} on this host",
            if on_host == 1 { "" } else { "s" }
        ));
    }
    println!("{line}");
    Ok(if set.errors.is_empty() && on_host == 0 {
        crate::exit::Finished::OK
    } else {
        crate::exit::Finished::with(crate::exit::FAILURE)
    })
}

/// ZooKeeper's default `maxClientCnxns`: connections one client address may hold to a
/// server at once (the ZooKeeper Administrator's Guide).
const ZOOKEEPER_MAX_CLIENT_CNXNS: usize = 60;

/// Jobs of one ZooKeeper ensemble (its servers, whatever the path) more of which elapse
/// at one moment (their next elapse after `now`, without `randomized_delay`) than
/// [`ZOOKEEPER_MAX_CLIENT_CNXNS`]: this host's runs would connect at once, and those past
/// the server's default limit wait for a retry, at their start and again at their
/// renewals, which come together too. One warning, on the first such job by name, per
/// ensemble and moment. Nothing is held between calls ([`crate::store::Store::rest`]), so
/// only jobs that call together count; only the next elapse is compared.
fn crowded_zookeeper(set: &JobSet, now: jiff::Timestamp) -> Vec<(&Job, String)> {
    use std::collections::BTreeMap;
    let mut at: BTreeMap<(String, i64), Vec<&Job>> = BTreeMap::new();
    for job in set
        .jobs
        .values()
        .filter(|j| j.enabled && j.randomized_delay.is_none())
    {
        let Ok(address) = job.store_address() else {
            continue;
        };
        let zookeeper =
            crate::store::registry::kind_of(&address).is_some_and(|k| k.name == "zookeeper");
        if let (true, Some(next)) = (zookeeper, job.calendar.next_elapse(now)) {
            // The ensemble: the address without its path (`zookeeper://HOSTS`).
            let servers = match address.split_once("://") {
                Some((scheme, rest)) => {
                    format!(
                        "{scheme}://{}",
                        rest.split(['/', '?']).next().unwrap_or(rest)
                    )
                }
                None => address,
            };
            at.entry((servers, next.as_microsecond()))
                .or_default()
                .push(job);
        }
    }
    at.into_iter()
        .filter(|(_, jobs)| jobs.len() > ZOOKEEPER_MAX_CLIENT_CNXNS)
        .map(|((address, usec), jobs)| {
            (
                jobs[0],
                format!(
                    "{} jobs of ZooKeeper {} elapse at {}: more than ZooKeeper's default maxClientCnxns ({ZOOKEEPER_MAX_CLIENT_CNXNS} connections per client address) would connect from this host at once, and those past it start later, after a retry, and meet it again at their renewals; raise maxClientCnxns on the ensemble, or spread the jobs with randomized_delay",
                    jobs.len(),
                    crate::store::address::mask(&address),
                    crate::guard::ledger::format_usec(usec)
                ),
            )
        })
        .collect()
}

/// What is wrong with how systemd will end `job`'s service, `k`, or `None` when it keeps
/// the job inside its lease.
///
/// When the shim dies, its lease may have only [`FENCE_MARGIN`] (1 s) left (its own
/// SIGKILL was due then), so every other process of the attempt must be gone within it.
/// With `KillMode=mixed` and `SendSIGKILL=yes` (the shipped template) systemd's SIGTERM
/// step finds no process once the shim is gone and its SIGKILL step reaches the whole
/// cgroup at once (systemd.kill(5); units/jobguard@.service has the measurements). With
/// `control-group` SIGKILL comes only after `TimeoutStopSec=`; with `process`, `none` or
/// `SendSIGKILL=no`, never. A unit that is not loaded is not judged.
pub fn kill_problem(job: &Job, k: &KillSettings) -> Option<String> {
    if k.unit.load_state != "loaded" || (k.kill_mode == "mixed" && k.send_sigkill) {
        return None;
    }
    let lease = format!(
        "while the lease may have only {} left (lease_ttl {})",
        TimeSpan::from_duration(FENCE_MARGIN),
        TimeSpan::from_duration(job.lease_ttl)
    );
    let fix = "remove the drop-in that sets it, so that the template's KillMode=mixed and \
               SendSIGKILL=yes apply";
    let what = if !k.send_sigkill {
        format!(
            "SendSIGKILL=no: when the shim dies, a process of the job that ignores SIGTERM is never killed, {lease}"
        )
    } else if k.kill_mode == "control-group" {
        let stop = if k.timeout_stop_usec == u64::MAX {
            "infinity".to_string()
        } else {
            TimeSpan::from_duration(Duration::from_micros(k.timeout_stop_usec)).to_string()
        };
        format!(
            "KillMode=control-group: when the shim dies, a process of the job that ignores SIGTERM runs on \
             until TimeoutStopSec={stop} has passed, {lease}"
        )
    } else {
        format!(
            "KillMode={}: when the shim dies, the other processes of the job run on, {lease}",
            k.kill_mode
        )
    };
    Some(format!("{what}; {fix}"))
}

/// `N valid jobs in M files: a, b, c` (plus `; K errors` when there are errors).
pub fn summary(set: &JobSet) -> String {
    let n = set.jobs.len();
    let files = set.files.len();
    let mut s = format!(
        "{n} valid job{} in {files} file{}",
        if n == 1 { "" } else { "s" },
        if files == 1 { "" } else { "s" }
    );
    if n > 0 {
        let names: Vec<&str> = set.jobs.keys().map(String::as_str).collect();
        s.push_str(": ");
        s.push_str(&names.join(", "));
    }
    let k = set.errors.len();
    if k > 0 {
        s.push_str(&format!("; {k} error{}", if k == 1 { "" } else { "s" }));
    }
    s
}

/// What would make `job` fail on this host before its command does anything, as
/// `(key, message)`. `path` is the `PATH` to look the command up in.
pub fn host_problems(job: &Job, path: &str) -> Vec<(&'static str, String)> {
    let mut problems = Vec::new();
    let account = match job.user.as_deref().map(crate::shim::child::lookup_account) {
        Some(Ok(a)) => Some(a),
        Some(Err(e)) => {
            problems.push(("user", e));
            None
        }
        None => None,
    };
    if let Some(dir) = &job.working_directory
        && !dir.is_dir()
    {
        problems.push((
            "working_directory",
            format!("{} is not a directory", dir.display()),
        ));
    }
    // A relative command with a `/` starts from the directory the command starts in:
    // `working_directory`, else the user's home (if it exists), else `/` (systemd's).
    let start = job.working_directory.clone().unwrap_or_else(|| {
        account
            .map(|a| a.home)
            .filter(|h| h.is_dir())
            .unwrap_or_else(|| PathBuf::from("/"))
    });
    if let Some(program) = job.command.first()
        && let Err(e) = find_program(program, &start, path)
    {
        problems.push(("command", e));
    }
    // The script a shell command (`sh -c TEXT`, what import-crontab writes for a line
    // with shell syntax) runs: a cron line's script that is gone fails every slot.
    if let Some(script) = shell_script(&job.command) {
        let dir = match &script.dir {
            Some(d) => start.join(d),
            None => start.clone(),
        };
        let p = dir.join(&script.path);
        let found = std::fs::metadata(&p).is_ok_and(|m| {
            m.is_file() && (!script.executable || m.permissions().mode() & 0o111 != 0)
        });
        if !found {
            let what = if script.executable {
                "an executable file"
            } else {
                "a file"
            };
            problems.push((
                "command",
                format!(
                    "{} is not {what}: the shell command runs it ({})",
                    p.display(),
                    script.shell_text
                ),
            ));
        }
    }
    let key = if job.store_credential.is_some() {
        "store_credential"
    } else if job.store_file.is_some() {
        "store_file"
    } else {
        "store"
    };
    match job.store_address() {
        Err(e) => problems.push((key, e.to_string())),
        // What the run would refuse before connecting: parameters, TLS files, a kind this
        // build does not contain. Opening a shared store does not connect; a SQLite store
        // is not opened, since that would create its file.
        Ok(address) if crate::store::registry::kind_of(&address).is_none_or(|k| k.shared) => {
            if let Err(e) = crate::store::open(&address) {
                problems.push((key, e.to_string()));
            }
        }
        // As root, the SQLite file and every directory above it must be root's alone
        // (the run refuses them otherwise); not opened, since that would create it.
        Ok(address) => {
            if let Ok(crate::store::address::StoreAddress::SqliteFile(p)) =
                crate::store::address::StoreAddress::parse(&address)
                && let Err(e) = crate::safe_path::check_store(&p)
            {
                problems.push((key, format!("store refused: {e}")));
            }
        }
    }
    problems
}

/// Settings that work but are weak, as `(key, message)`: a `store_file` others may read
/// (its password is out), TLS that checks no certificate (`#insecure`), a Redis that can
/// forget a lease (no persistence, or an eviction policy: asks the server, with the
/// store's time limits). Warnings do not change the exit status.
pub fn host_warnings(job: &Job) -> Vec<(&'static str, String)> {
    let mut warnings = Vec::new();
    if let Some(path) = &job.store_file
        && let Some(mode) = crate::safe_path::readable_by_others(path)
    {
        warnings.push((
            "store_file",
            format!(
                "{} is readable by others (mode {mode:04o}): its password is theirs; chmod 0600",
                path.display()
            ),
        ));
    }
    let key = if job.store_credential.is_some() {
        "store_credential"
    } else if job.store_file.is_some() {
        "store_file"
    } else {
        "store"
    };
    let Ok(address) = job.store_address() else {
        return warnings;
    };
    if address.ends_with("#insecure") {
        warnings.push((
            key,
            "#insecure: the server's certificate is not checked, so whoever sits on the \
             network path can pose as the store and read its password"
                .to_string(),
        ));
    }
    #[cfg(feature = "store-redis")]
    if let Ok(crate::store::address::StoreAddress::Shared { kind, address: a }) =
        crate::store::address::StoreAddress::parse(&address)
        && kind.name == "redis"
    {
        // An address that cannot be opened is already a problem of its own.
        if let Ok(mut store) = crate::store::redis::RedisStore::open(&a) {
            match store.weak_settings() {
                Ok(found) => warnings.extend(found.into_iter().map(|w| (key, w))),
                Err(e) => warnings.push((key, format!("cannot ask Redis about persistence: {e}"))),
            }
        }
    }
    warnings
}

/// A script that a shell command runs ([`shell_script`]).
#[derive(Debug, PartialEq, Eq)]
pub struct ShellScript {
    /// The script's path as written (a word with a `/`).
    pub path: String,
    /// The absolute directory of a leading `cd DIR &&`.
    pub dir: Option<String>,
    /// Whether the shell runs it as a program (it must be executable), not as an
    /// interpreter's argument (`php /srv/app/artisan`: it must be a file).
    pub executable: bool,
    /// The simple command it is in, for the message.
    pub shell_text: String,
}

/// Interpreters whose first argument, when it is a path, is the script they run.
const INTERPRETERS: &[&str] = &[
    "sh", "bash", "dash", "ksh", "zsh", "php", "python", "python3", "perl", "ruby", "node",
];

/// The script `command` runs first when it is a shell's `-c TEXT` (`/bin/sh -c`, `bash
/// -c`, as import-crontab writes a cron line with shell syntax): the first simple command
/// of TEXT (its words by POSIX shell quoting, up to the first `;`, `&&`, `||`, `|` or `&`),
/// after variable assignments and `exec`: its first word when that has a `/`, or the path
/// after an interpreter of [`INTERPRETERS`]. After a leading `cd /ABSOLUTE/DIR &&`, the
/// next simple command's, in that directory (`cd /srv/app && ./cleanup.sh`). Nothing
/// else is looked at: a script behind a guard (`test -x X && X`), in a subshell or a
/// compound command, or a word the shell expands (`$`, `` ` ``, `*`, `~`) is no missing
/// script that `check` can be sure of.
pub fn shell_script(command: &[String]) -> Option<ShellScript> {
    let [shell, dash_c, text, ..] = command else {
        return None;
    };
    let base = shell.rsplit('/').next().unwrap_or_default();
    if dash_c != "-c" || !["sh", "bash", "dash", "ksh", "zsh"].contains(&base) {
        return None;
    }
    let split = shlex::split(text)?;
    // `cd /srv/app; ./x`: a `;` that ends a word ends its command too.
    let mut words = Vec::new();
    for w in split {
        match w.strip_suffix(';') {
            Some(head) if !head.is_empty() => words.extend([head.to_string(), ";".into()]),
            _ => words.push(w),
        }
    }
    let expands = |w: &str| w.contains(['$', '`', '*', '?', '[', '~', '(', ')', '{', '}']);
    let mut commands = words.split(|w| [";", "&&", "||", "|", "&"].contains(&w.as_str()));
    let mut simple = commands.next()?;
    let mut dir = None;
    if let ["cd", d] = simple.iter().map(String::as_str).collect::<Vec<_>>()[..]
        && d.starts_with('/')
        && !expands(d)
        && words.get(2).map(String::as_str) == Some("&&")
    {
        dir = Some(d.to_string());
        simple = commands.next()?;
    }
    let mut rest = simple
        .iter()
        .skip_while(|w| w.as_str() == "exec" || is_assignment(w));
    let first = rest.next()?;
    let (path, executable) = if first.contains('/') {
        (first.clone(), true)
    } else if INTERPRETERS.contains(&first.as_str()) {
        let arg = rest
            .next()
            .filter(|w| w.contains('/') && !w.starts_with('-'))?;
        (arg.clone(), false)
    } else {
        return None;
    };
    (!expands(&path)).then(|| ShellScript {
        path,
        dir,
        executable,
        shell_text: simple.join(" "),
    })
}

/// `NAME=VALUE`, a variable assignment before a shell's simple command.
fn is_assignment(word: &str) -> bool {
    word.split_once('=').is_some_and(|(name, _)| {
        !name.is_empty()
            && !name.starts_with(|c: char| c.is_ascii_digit())
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    })
}

/// Finds `program` as execvp(3) would: as given (relative to `start`) when it contains a
/// `/`, else in each directory of `path`. It must be a regular file with an execute bit.
fn find_program(program: &str, start: &Path, path: &str) -> Result<PathBuf, String> {
    let executable = |p: &Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if program.contains('/') {
        let p = start.join(program);
        return if executable(&p) {
            Ok(p)
        } else {
            Err(format!("{program} is not an executable file"))
        };
    }
    path.split(':')
        .filter(|d| !d.is_empty())
        .map(|d| Path::new(d).join(program))
        .find(|p| executable(p))
        .ok_or_else(|| format!("{program} is not found in PATH ({path})"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::calendar::CalendarSpec;
    use crate::systemd::dbus::UnitState;

    fn script(shell: &str, text: &str) -> Option<(String, Option<String>, bool)> {
        shell_script(&[shell.into(), "-c".into(), text.into()])
            .map(|s| (s.path, s.dir, s.executable))
    }

    #[test]
    fn the_script_a_shell_command_starts_with_is_found_and_nothing_it_may_guard() {
        let s = |p: &str, d: Option<&str>, x: bool| Some((p.to_string(), d.map(str::to_string), x));
        assert_eq!(
            script("/bin/sh", "/usr/local/bin/backup.sh --full >/dev/null 2>&1"),
            s("/usr/local/bin/backup.sh", None, true)
        );
        assert_eq!(
            script(
                "/bin/bash",
                "cd /srv/app && ./cleanup.sh; php /srv/app/artisan run"
            ),
            s("./cleanup.sh", Some("/srv/app"), true)
        );
        assert_eq!(
            script(
                "/bin/sh",
                "LANG=C exec php /srv/app/artisan 'a && b' || echo failed"
            ),
            s("/srv/app/artisan", None, false)
        );
        // Guards, subshells, directories it cannot know, quoted operators, expansions,
        // and what is no shell's -c: nothing (a false alarm fails `check`).
        for text in [
            "test -x /etc/cron.daily/popularity-contest && /etc/cron.daily/popularity-contest --crond",
            "[ -x /usr/lib/php/sessionclean ] && /usr/lib/php/sessionclean",
            "grep -v '|' /var/log/syslog | mail -s x root",
            "(cd /srv/app && ./run.sh)",
            "{ cd /srv/app; ./run.sh; }",
            "cd $APP && ./run.sh",
            "cd ~/app && ./run.sh",
            "cd app && ./run.sh",
            "cd /srv/app; ./run.sh",
            "printf %s 'x' | { cd /srv/app && ./run.sh\n}",
            "$HOME/bin/x",
            "echo 'unbalanced",
        ] {
            assert_eq!(script("/bin/sh", text), None, "{text}");
        }
        assert_eq!(script("/usr/bin/env", "/usr/local/bin/backup.sh"), None);
    }

    fn job() -> Job {
        let mut job = Job::new(
            "beat",
            CalendarSpec::parse("*-01-01 00:00:00 UTC").unwrap(),
            vec!["/bin/true".into()],
            Path::new("/etc/jobguard/jobs.toml"),
        );
        job.lease_ttl = Duration::from_secs(6);
        job
    }

    fn settings(load: &str, mode: &str, sigkill: bool, stop_secs: u64) -> KillSettings {
        KillSettings {
            unit: UnitState {
                name: "jobguard@beat.service".into(),
                load_state: load.into(),
                ..UnitState::default()
            },
            kill_mode: mode.into(),
            send_sigkill: sigkill,
            timeout_stop_usec: stop_secs * 1_000_000,
        }
    }

    #[test]
    fn only_mixed_with_sigkill_keeps_a_dead_shims_processes_inside_the_lease() {
        let job = job();
        assert_eq!(
            kill_problem(&job, &settings("loaded", "mixed", true, 40)),
            None
        );
        assert_eq!(
            kill_problem(&job, &settings("not-found", "", false, 0)),
            None
        );
        let e = kill_problem(&job, &settings("loaded", "control-group", true, 31)).unwrap();
        assert!(
            e.starts_with("KillMode=control-group: when the shim dies, a process of the job that ignores SIGTERM runs on until TimeoutStopSec=31s has passed, while the lease may have only 1s left (lease_ttl 6s)"),
            "{e}"
        );
        assert!(
            e.ends_with("KillMode=mixed and SendSIGKILL=yes apply"),
            "{e}"
        );
        let e = kill_problem(&job, &settings("loaded", "mixed", false, 31)).unwrap();
        assert!(e.starts_with("SendSIGKILL=no: "), "{e}");
        let e = kill_problem(&job, &settings("loaded", "process", true, 31)).unwrap();
        assert!(e.starts_with("KillMode=process: "), "{e}");
        let mut inf = settings("loaded", "control-group", true, 0);
        inf.timeout_stop_usec = u64::MAX;
        let e = kill_problem(&job, &inf).unwrap();
        assert!(e.contains("TimeoutStopSec=infinity"), "{e}");
    }
}

//! The environment a job's command starts from.
//!
//! Started by its timer (or `jobguard rerun`, `systemctl start`), the shim runs in
//! `jobguard@JOB.service` and the command inherits the service's environment: systemd's
//! clean one (systemd.exec(5), "Environment Variables in Spawned Processes"): the
//! manager's `PATH`, `LANG` and `DefaultEnvironment=`, the unit's `Environment=`, and the
//! variables systemd sets for the service.
//!
//! Started by hand (`sudo SECRET=x jobguard run JOB`), the shim runs in its caller's
//! session, and the command must not see that caller's variables: a job's `user` would get
//! root's `SECRET`, `CREDENTIALS_DIRECTORY` and `PATH`, and the run would not behave as
//! the timer's. So the command then starts from what the service would have
//! ([`base`]): systemd's `PATH`, the account's `HOME`, `USER`, `LOGNAME` and `SHELL`, then
//! the manager's variables and (for root, whose job list the system unit runs) the
//! unit's `Environment=`, read from systemd over D-Bus; when systemd runs but does not
//! answer, a warning says so. The job's `environment` and the run's `JOBGUARD_*`
//! variables come on top ([`super::child::Spec`]). What systemd alone can give is
//! missing: the unit's `EnvironmentFile=`s (a warning names them), `LoadCredential=`'s
//! `CREDENTIALS_DIRECTORY`, `STATE_DIRECTORY`, `INVOCATION_ID`; `jobguard rerun` runs a
//! slot in its unit with all of them.

use crate::joblist::job::Job;

/// systemd's `PATH` for the services of the system manager when its environment cannot be
/// read (systemd.exec(5), `$PATH`: `/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin`,
/// with `:/sbin:/bin` appended by builds for an unmerged `/usr`, as Debian 12's).
pub const SERVICE_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Variables that name where the shim keeps its state ([`crate::paths::state_dir`],
/// [`crate::paths::runtime_dir`]), passed on so that `jobguard mark` in the command finds
/// what the shim used.
const PASSED_ON: [&str; 2] = ["JOBGUARD_STATE_DIR", "JOBGUARD_RUNTIME_DIR"];

/// A base environment as read for a job, by the job's name ([`prepare`]).
type Prepared = std::collections::BTreeMap<String, Option<Vec<(String, String)>>>;

/// The bases read in this process (`jobguard recover` off systemd runs several jobs).
static PREPARED: std::sync::Mutex<Prepared> = std::sync::Mutex::new(Prepared::new());

/// Reads the base environment of `job`'s run now ([`base`]), before the shim takes a lease:
/// a run started by hand asks systemd over D-Bus, which can take up to its call time-outs,
/// and the lease must not run out meanwhile.
pub fn prepare(job: &Job) {
    let _ = base(job);
}

/// The environment the command starts from: `None` to inherit the shim's (it runs in the
/// job's own service), else the clean base of a run started by hand (module
/// documentation), `NAME`/`VALUE` pairs, later ones winning. Read once per job and process.
pub fn base(job: &Job) -> Option<Vec<(String, String)>> {
    let mut prepared = PREPARED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    prepared
        .entry(job.name.clone())
        .or_insert_with(|| read_base(job))
        .clone()
}

fn read_base(job: &Job) -> Option<Vec<(String, String)>> {
    if in_own_service(&job.name) {
        return None;
    }
    let root = nix::unistd::geteuid().is_root();
    let mut env = vec![("PATH".to_string(), SERVICE_PATH.to_string())];
    // The account's variables first: the manager's and the unit's may set them too.
    if let Ok(Some(me)) = nix::unistd::User::from_uid(nix::unistd::geteuid()) {
        env.push(("HOME".into(), me.dir.display().to_string()));
        env.push(("USER".into(), me.name.clone()));
        env.push(("LOGNAME".into(), me.name));
        env.push(("SHELL".into(), me.shell.display().to_string()));
    }
    // The system unit runs the system job list's job: a user's own job list is not its.
    let read = if root {
        crate::systemd::dbus::read_service_environment(&job.name)
    } else {
        crate::systemd::dbus::read_manager_environment().map(|manager| {
            crate::systemd::dbus::ServiceEnvironment {
                manager,
                ..Default::default()
            }
        })
    };
    match read {
        Ok(service) => {
            if !service.files.is_empty() {
                eprintln!(
                    "jobguard: {}: warning: a run started by hand does not read the unit's EnvironmentFile= ({}); `systemctl start jobguard@{}.service` does",
                    job.name,
                    service.files.join(", "),
                    job.name
                );
            }
            env.extend(service.manager.iter().chain(&service.unit).filter_map(|a| {
                a.split_once('=')
                    .map(|(k, v)| (k.to_string(), v.to_string()))
            }));
        }
        Err(e) if crate::ops::recover::under_systemd() => eprintln!(
            "jobguard: {}: warning: the environment of jobguard@{}.service could not be read ({e}); the command starts with PATH={SERVICE_PATH} and its job's environment alone",
            job.name, job.name
        ),
        Err(_) => {}
    }
    // Where the shim keeps its state, for `jobguard mark` in the command: passed on when
    // set, and always for a user's shim (whose directories come from its session's
    // XDG_* variables, which the command does not get).
    for (name, dir) in PASSED_ON
        .iter()
        .zip([crate::paths::state_dir(), crate::paths::runtime_dir()])
    {
        if !root || std::env::var_os(name).is_some_and(|v| !v.is_empty()) {
            env.push((name.to_string(), dir.display().to_string()));
        }
    }
    Some(env)
}

/// The `PATH` of the system manager's services: its own environment's, read over D-Bus,
/// else [`SERVICE_PATH`].
pub fn service_path() -> String {
    crate::systemd::dbus::read_manager_environment()
        .ok()
        .and_then(|env| {
            env.iter()
                .find_map(|a| a.strip_prefix("PATH=").map(str::to_string))
        })
        .unwrap_or_else(|| SERVICE_PATH.to_string())
}

/// Whether this process runs in `jobguard@JOB.service`: a cgroup of `/proc/self/cgroup`
/// (cgroups(7): `ID:CONTROLLERS:PATH`, one line per hierarchy) ends in that unit's name,
/// and its directory, where this process can see it, is root's. The system manager makes
/// a unit's cgroup as root; a user can make cgroups of any name only inside a subtree
/// delegated to it (systemd.resource-control(5), `Delegate=`: its `user@UID.service`),
/// which it owns, so it cannot pass its shell off as the unit. A container without a
/// cgroup namespace of its own sees the host's path, which may not be under its
/// /sys/fs/cgroup: then the name alone decides. No variable plays a part.
fn in_own_service(job: &str) -> bool {
    let (_, service) = crate::systemd::dbus::unit_names(job);
    std::fs::read_to_string("/proc/self/cgroup").is_ok_and(|text| {
        in_service(&text, &service, |dir| {
            std::fs::metadata(dir).ok().map(|m| {
                use std::os::unix::fs::MetadataExt as _;
                m.uid()
            })
        })
    })
}

/// Whether a `/proc/self/cgroup` text puts the process in the cgroup of `service`:
/// a line's path ends in it, and no directory of that path under /sys/fs/cgroup (the
/// unified hierarchy, or cgroup v1's `systemd` and `unified` mounts) has an owner other
/// than root (`owner` reads a directory's owner; `None` where there is none).
fn in_service(cgroups: &str, service: &str, owner: impl Fn(&str) -> Option<u32>) -> bool {
    cgroups.lines().any(|line| {
        let mut fields = line.splitn(3, ':');
        let (_, controllers, path) = (fields.next(), fields.next(), fields.next());
        let Some(path) = path.filter(|p| p.rsplit('/').next() == Some(service)) else {
            return false;
        };
        let mounts: &[&str] = match controllers {
            Some("") => &["/sys/fs/cgroup", "/sys/fs/cgroup/unified"],
            Some("name=systemd") => &["/sys/fs/cgroup/systemd"],
            _ => &[],
        };
        mounts
            .iter()
            .filter_map(|m| owner(&format!("{m}{path}")))
            .all(|uid| uid == 0)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_own_service_is_read_from_the_cgroup_path() {
        let root = |_: &str| Some(0);
        let unified = "0::/system.slice/system-jobguard.slice/jobguard@nightly.service\n";
        assert!(in_service(unified, "jobguard@nightly.service", root));
        assert!(!in_service(unified, "jobguard@night.service", root));
        let hybrid = "12:pids:/\n1:name=systemd:/system.slice/system-jobguard.slice/jobguard@a.b.service\n0::/\n";
        assert!(in_service(hybrid, "jobguard@a.b.service", root));
        let session = "0::/user.slice/user-0.slice/session-3.scope\n";
        assert!(!in_service(session, "jobguard@nightly.service", root));
        assert!(!in_service("0::/\n", "jobguard@nightly.service", root));
        // A scope or service whose name only contains the unit's is another unit.
        let other = "0::/system.slice/cron.service/jobguard@nightly.service.x\n";
        assert!(!in_service(other, "jobguard@nightly.service", root));
        // A container without a cgroup namespace sees the host's path; not under its
        // /sys/fs/cgroup, the name decides.
        let docker = "0::/docker/0123abcd/system.slice/jobguard@nightly.service\n";
        assert!(in_service(docker, "jobguard@nightly.service", |_| None));
        // A cgroup of that name that a user made in its delegated subtree is the user's.
        let made =
            "0::/user.slice/user-1000.slice/user@1000.service/app.slice/jobguard@nightly.service\n";
        let users = |dir: &str| {
            Some(if dir.contains("user@1000.service") {
                1000
            } else {
                0
            })
        };
        assert!(!in_service(made, "jobguard@nightly.service", users));
        assert!(in_service(unified, "jobguard@nightly.service", users));
        // Where the path is seen, its directory is asked: the unified mount here.
        let asked = std::cell::RefCell::new(Vec::new());
        in_service(unified, "jobguard@nightly.service", |dir| {
            asked.borrow_mut().push(dir.to_string());
            None
        });
        assert_eq!(
            asked.into_inner(),
            [
                "/sys/fs/cgroup/system.slice/system-jobguard.slice/jobguard@nightly.service",
                "/sys/fs/cgroup/unified/system.slice/system-jobguard.slice/jobguard@nightly.service"
            ]
        );
    }

    #[test]
    fn this_process_is_in_no_jobguard_unit() {
        assert!(!in_own_service("nightly"));
    }
}

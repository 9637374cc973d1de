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
//! ([`base`]): the manager's and the unit's variables, read from systemd over D-Bus, or
//! systemd's fixed `PATH` when no system manager answers. The unit's `EnvironmentFile=`s
//! are not read (a warning names them; `systemctl start jobguard@JOB.service` applies
//! them). The account's `HOME`, `USER`, `LOGNAME` and `SHELL`, the job's `environment`
//! and the run's `JOBGUARD_*` variables come on top ([`super::child::Spec`]).

use crate::job::Job;

/// systemd's `PATH` for the services of the system manager when its environment cannot be
/// read (systemd.exec(5), `$PATH`: `/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin`,
/// with `:/sbin:/bin` appended by builds for an unmerged `/usr`, as Debian 12's).
pub const SERVICE_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Variables of the shim that name where it keeps its state, passed on so that `jobguard
/// mark` in the command finds what the shim used.
const PASSED_ON: [&str; 2] = ["JOBGUARD_STATE_DIR", "JOBGUARD_RUNTIME_DIR"];

/// The environment the command starts from: `None` to inherit the shim's (it runs in the
/// job's own service), else the clean base of a run started by hand (module
/// documentation), `NAME`/`VALUE` pairs, later ones winning.
pub fn base(job: &Job) -> Option<Vec<(String, String)>> {
    if in_own_service(&job.name) {
        return None;
    }
    let mut env = Vec::new();
    match crate::systemd_dbus::read_service_environment(&job.name) {
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
        Err(_) => env.push(("PATH".to_string(), SERVICE_PATH.to_string())),
    }
    if !env.iter().any(|(k, _)| k == "PATH") {
        env.push(("PATH".to_string(), SERVICE_PATH.to_string()));
    }
    if let Ok(Some(me)) = nix::unistd::User::from_uid(nix::unistd::geteuid()) {
        env.push(("HOME".into(), me.dir.display().to_string()));
        env.push(("USER".into(), me.name.clone()));
        env.push(("LOGNAME".into(), me.name));
        env.push(("SHELL".into(), me.shell.display().to_string()));
    }
    for name in PASSED_ON {
        if let Some(v) = std::env::var_os(name).filter(|v| !v.is_empty()) {
            env.push((name.to_string(), v.to_string_lossy().into_owned()));
        }
    }
    Some(env)
}

/// The `PATH` of the system manager's services: its own environment's, read over D-Bus,
/// else [`SERVICE_PATH`].
pub fn service_path() -> String {
    crate::systemd_dbus::read_manager_environment()
        .ok()
        .and_then(|env| {
            env.iter()
                .find_map(|a| a.strip_prefix("PATH=").map(str::to_string))
        })
        .unwrap_or_else(|| SERVICE_PATH.to_string())
}

/// Whether this process runs in `jobguard@JOB.service`: a cgroup of `/proc/self/cgroup`
/// (cgroups(7): `ID:CONTROLLERS:PATH`, one line per hierarchy) ends in that unit's name.
/// Nothing a caller sets in the environment can make it so.
fn in_own_service(job: &str) -> bool {
    let (_, service) = crate::systemd_dbus::unit_names(job);
    std::fs::read_to_string("/proc/self/cgroup").is_ok_and(|text| in_service(&text, &service))
}

/// Whether a `/proc/self/cgroup` text puts the process in the cgroup of `service`.
fn in_service(cgroups: &str, service: &str) -> bool {
    cgroups.lines().any(|line| {
        line.splitn(3, ':')
            .nth(2)
            .and_then(|path| path.rsplit('/').next())
            .is_some_and(|last| last == service)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_own_service_is_read_from_the_cgroup_path() {
        let unified = "0::/system.slice/system-jobguard.slice/jobguard@nightly.service\n";
        assert!(in_service(unified, "jobguard@nightly.service"));
        assert!(!in_service(unified, "jobguard@night.service"));
        let hybrid = "12:pids:/\n1:name=systemd:/system.slice/system-jobguard.slice/jobguard@a.b.service\n0::/\n";
        assert!(in_service(hybrid, "jobguard@a.b.service"));
        let session = "0::/user.slice/user-0.slice/session-3.scope\n";
        assert!(!in_service(session, "jobguard@nightly.service"));
        assert!(!in_service("0::/\n", "jobguard@nightly.service"));
        // A scope or service whose name only contains the unit's is another unit.
        let other = "0::/system.slice/cron.service/jobguard@nightly.service.x\n";
        assert!(!in_service(other, "jobguard@nightly.service"));
    }
}

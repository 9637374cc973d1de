//! What systemd knows about a job's units, read over D-Bus from `org.freedesktop.systemd1`
//! (org.freedesktop.systemd1(5)): the timer's next elapse and last trigger, and the
//! active state of the timer and the service; and how systemd will end a job's service
//! (`KillMode=`, `SendSIGKILL=`, `TimeoutStopSec=`). Used by `jobguard status` and
//! `jobguard check`, never by the shim or the generator.
//!
//! Units are looked up with `Manager.LoadUnit` (which also answers for a unit that is not
//! loaded, with `LoadState=not-found`), then their properties are read one by one with
//! `org.freedesktop.DBus.Properties.Get`, without caching or subscribing.

use std::time::Duration;

/// How long one D-Bus call may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// Errors reading systemd's view.
#[derive(Debug, thiserror::Error)]
pub enum SystemdError {
    /// No system bus, no systemd on it, or a call failed.
    #[error("systemd over D-Bus: {0}")]
    Bus(#[from] zbus::Error),
}

impl crate::exit::Status for SystemdError {
    /// 71 (`EX_OSERR`): systemd could not be asked, or refused.
    fn exit_status(&self) -> u8 {
        crate::exit::OS_ERROR
    }
}

/// One unit as systemd sees it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UnitState {
    /// The unit's name, e.g. `jobguard@backup.timer`.
    pub name: String,
    /// `LoadState`: `loaded`, `not-found`, `masked`, ...
    pub load_state: String,
    /// `ActiveState`: `active`, `inactive`, `activating`, `failed`, ...
    pub active_state: String,
    /// `SubState`: `waiting`, `running`, `dead`, ...
    pub sub_state: String,
}

/// A timer's schedule as systemd computed it (org.freedesktop.systemd1(5), "Timer Unit
/// Objects"). Times are µs since the Unix epoch, `None` where systemd says 0 (never / no
/// next elapse).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TimerState {
    /// The timer unit.
    pub unit: UnitState,
    /// `NextElapseUSecRealtime`: the next calendar elapse, µs since the epoch.
    pub next_elapse_usec: Option<u64>,
    /// `LastTriggerUSec`: when the timer last fired, µs since the epoch.
    pub last_trigger_usec: Option<u64>,
}

/// A job's two units.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobUnits {
    /// `jobguard@JOB.timer`.
    pub timer: TimerState,
    /// `jobguard@JOB.service`.
    pub service: UnitState,
}

/// Whether a timer has no next elapse because it waits for the service it started:
/// the timer is `running` (`SubState`), or the service is starting, running or stopping
/// (`ActiveState` other than `inactive` or `failed`). systemd leaves such a timer's next
/// elapse unset until the service ends, then computes it again (systemd 252,
/// org.freedesktop.systemd1(5): a timer's `running` state). Such a timer is not idle: a
/// restart would cut the start of the run, and a report would cry wolf for every long
/// job.
pub fn timer_waits_for_its_service(timer_sub_state: &str, service_active_state: &str) -> bool {
    timer_sub_state == "running" || !matches!(service_active_state, "" | "inactive" | "failed")
}

/// The unit names of job `job`: (`jobguard@JOB.timer`, `jobguard@JOB.service`). The job
/// name is the instance as it is, as the generator writes it (`src/systemd/render.rs`): every
/// character a job name may hold is valid in a unit name, and the templates use `%i`.
pub fn unit_names(job: &str) -> (String, String) {
    (
        format!("jobguard@{job}.timer"),
        format!("jobguard@{job}.service"),
    )
}

/// Reads the units of each job in `jobs` from the system manager, in order.
///
/// # Errors
/// [`SystemdError::Bus`] when the system bus or systemd cannot be reached, or a call
/// fails (one error for all: the view is all or nothing).
pub fn read_jobs(jobs: &[&str]) -> Result<Vec<JobUnits>, SystemdError> {
    zbus::block_on(async {
        let conn = zbus::connection::Builder::system()
            .method_timeout(CALL_TIMEOUT)
            .build()
            .await?;
        let mut out = Vec::with_capacity(jobs.len());
        for job in jobs {
            let (timer, service) = unit_names(job);
            let (t, path) = unit(&conn, &timer).await?;
            let (next, last) = if t.load_state == "loaded" {
                let iface = "org.freedesktop.systemd1.Timer";
                (
                    get_u64(&conn, &path, iface, "NextElapseUSecRealtime").await?,
                    get_u64(&conn, &path, iface, "LastTriggerUSec").await?,
                )
            } else {
                (0, 0)
            };
            out.push(JobUnits {
                timer: TimerState {
                    unit: t,
                    // systemd answers 0 or UINT64_MAX (infinity) for "none".
                    next_elapse_usec: (next != 0 && next != u64::MAX).then_some(next),
                    last_trigger_usec: (last != 0 && last != u64::MAX).then_some(last),
                },
                service: unit(&conn, &service).await?.0,
            });
        }
        Ok(out)
    })
}

/// How systemd will end a job's service, as it has the unit loaded (systemd.kill(5),
/// org.freedesktop.systemd1(5) "Service Unit Objects").
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KillSettings {
    /// `jobguard@JOB.service` and its `LoadState`; the other fields are read only when
    /// it is `loaded` (otherwise empty, `false` and 0).
    pub unit: UnitState,
    /// `KillMode`: `control-group`, `mixed`, `process` or `none`.
    pub kill_mode: String,
    /// `SendSIGKILL`: whether the stop ends with SIGKILL to what is left.
    pub send_sigkill: bool,
    /// `TimeoutStopUSec`, µs; `u64::MAX` is infinity.
    pub timeout_stop_usec: u64,
}

/// Reads the kill settings of each job's service in `jobs` from the system manager, in
/// order.
///
/// # Errors
/// [`SystemdError::Bus`] when the system bus or systemd cannot be reached, or a call
/// fails.
pub fn read_kill_settings(jobs: &[&str]) -> Result<Vec<KillSettings>, SystemdError> {
    zbus::block_on(async {
        let conn = zbus::connection::Builder::system()
            .method_timeout(CALL_TIMEOUT)
            .build()
            .await?;
        let iface = "org.freedesktop.systemd1.Service";
        let mut out = Vec::with_capacity(jobs.len());
        for job in jobs {
            let (_, service) = unit_names(job);
            let (unit, path) = unit(&conn, &service).await?;
            let mut k = KillSettings {
                unit,
                ..KillSettings::default()
            };
            if k.unit.load_state == "loaded" {
                k.kill_mode = String::try_from(get(&conn, &path, iface, "KillMode").await?)?;
                k.send_sigkill = bool::try_from(get(&conn, &path, iface, "SendSIGKILL").await?)?;
                k.timeout_stop_usec = get_u64(&conn, &path, iface, "TimeoutStopUSec").await?;
            }
            out.push(k);
        }
        Ok(out)
    })
}

/// A timer that is not jobguard's: its name, and the command lines (argv) of the unit it
/// activates.
pub type OtherTimer = (String, Vec<Vec<String>>);

/// The timers that are not jobguard's (not `jobguard@*` nor `jobguard-*`) and are active
/// or enabled (an enabled timer not started yet runs from the next boot on), each with
/// the `ExecStart=` command lines (argv) of the unit it activates
/// (org.freedesktop.systemd1(5): `Manager.ListUnitsByPatterns`,
/// `Manager.ListUnitFilesByPatterns`, `Timer.Unit`, `Service.ExecStart`).
///
/// # Errors
/// [`SystemdError::Bus`] when the system bus or systemd cannot be reached, or a call
/// fails.
pub fn read_other_timers() -> Result<Vec<OtherTimer>, SystemdError> {
    /// `ListUnitsByPatterns`' rows: name, description, load, active, sub, following,
    /// object path, job id, job type, job path.
    type Row = (
        String,
        String,
        String,
        String,
        String,
        String,
        zbus::OwnedObjectPath,
        u32,
        String,
        zbus::OwnedObjectPath,
    );
    /// `ExecStart`'s rows: path, argv, ignore failure, then times and pids.
    type Exec = (String, Vec<String>, bool, u64, u64, u64, u64, u32, i32, i32);
    zbus::block_on(async {
        let conn = zbus::connection::Builder::system()
            .method_timeout(CALL_TIMEOUT)
            .build()
            .await?;
        let manager = async |method: &str, states: &[&str]| {
            conn.call_method(
                Some("org.freedesktop.systemd1"),
                "/org/freedesktop/systemd1",
                Some("org.freedesktop.systemd1.Manager"),
                method,
                &(states, vec!["*.timer"]),
            )
            .await
        };
        let active: Vec<Row> = manager("ListUnitsByPatterns", &["active"])
            .await?
            .body()
            .deserialize()?;
        // Unit files: (path, state); a template (`name@.timer`) is no timer of its own.
        let enabled: Vec<(String, String)> =
            manager("ListUnitFilesByPatterns", &["enabled", "enabled-runtime"])
                .await?
                .body()
                .deserialize()?;
        let mut names: Vec<String> = active.into_iter().map(|row| row.0).collect();
        names.extend(enabled.into_iter().filter_map(|(path, _)| {
            let name = path.rsplit('/').next()?;
            (!name.ends_with("@.timer")).then(|| name.to_string())
        }));
        names.sort();
        names.dedup();
        let mut out = Vec::new();
        for name in names {
            if name.starts_with("jobguard@") || name.starts_with("jobguard-") {
                continue;
            }
            let (state, timer) = unit(&conn, &name).await?;
            if state.load_state != "loaded" {
                continue;
            }
            let target = String::try_from(
                get(&conn, &timer, "org.freedesktop.systemd1.Timer", "Unit").await?,
            )?;
            let (svc, path) = unit(&conn, &target).await?;
            if svc.load_state != "loaded" || !target.ends_with(".service") {
                continue;
            }
            let exec = get(
                &conn,
                &path,
                "org.freedesktop.systemd1.Service",
                "ExecStart",
            )
            .await?;
            let lines: Vec<Exec> = exec.try_into()?;
            out.push((name, lines.into_iter().map(|e| e.1).collect()));
        }
        Ok(out)
    })
}

/// What systemd gives a job's service to start with, as the system manager has it loaded
/// (systemd.exec(5), "Environment Variables in Spawned Processes";
/// org.freedesktop.systemd1(5): `Manager.Environment`, `Service.Environment`,
/// `Service.EnvironmentFiles`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServiceEnvironment {
    /// The manager's environment, `NAME=VALUE` (`systemctl show-environment`: `PATH`,
    /// `LANG`, `DefaultEnvironment=`).
    pub manager: Vec<String>,
    /// The unit's `Environment=` assignments, `NAME=VALUE`, drop-ins included; empty when
    /// `jobguard@JOB.service` is not loaded.
    pub unit: Vec<String>,
    /// The unit's `EnvironmentFile=` paths.
    pub files: Vec<String>,
}

/// Reads the system manager's environment, `NAME=VALUE` (`Manager.Environment`).
///
/// # Errors
/// [`SystemdError::Bus`] when the system bus or systemd cannot be reached, or a call
/// fails.
pub fn read_manager_environment() -> Result<Vec<String>, SystemdError> {
    zbus::block_on(async {
        let conn = zbus::connection::Builder::system()
            .method_timeout(CALL_TIMEOUT)
            .build()
            .await?;
        Ok(manager_environment(&conn).await?)
    })
}

async fn manager_environment(conn: &zbus::Connection) -> Result<Vec<String>, zbus::Error> {
    let root = zbus::OwnedObjectPath::try_from("/org/freedesktop/systemd1")?;
    get(
        conn,
        &root,
        "org.freedesktop.systemd1.Manager",
        "Environment",
    )
    .await?
    .try_into()
}

/// Reads the environment systemd starts `jobguard@JOB.service` with.
///
/// # Errors
/// [`SystemdError::Bus`] when the system bus or systemd cannot be reached, or a call
/// fails.
pub fn read_service_environment(job: &str) -> Result<ServiceEnvironment, SystemdError> {
    zbus::block_on(async {
        let conn = zbus::connection::Builder::system()
            .method_timeout(CALL_TIMEOUT)
            .build()
            .await?;
        let manager = manager_environment(&conn).await?;
        let (_, service) = unit_names(job);
        let (state, path) = unit(&conn, &service).await?;
        let mut out = ServiceEnvironment {
            manager,
            ..ServiceEnvironment::default()
        };
        if state.load_state == "loaded" {
            let iface = "org.freedesktop.systemd1.Service";
            out.unit = get(&conn, &path, iface, "Environment").await?.try_into()?;
            let files: Vec<(String, bool)> = get(&conn, &path, iface, "EnvironmentFiles")
                .await?
                .try_into()?;
            out.files = files.into_iter().map(|f| f.0).collect();
        }
        Ok(out)
    })
}

async fn load_unit(
    conn: &zbus::Connection,
    name: &str,
) -> Result<zbus::OwnedObjectPath, zbus::Error> {
    let reply = conn
        .call_method(
            Some("org.freedesktop.systemd1"),
            "/org/freedesktop/systemd1",
            Some("org.freedesktop.systemd1.Manager"),
            "LoadUnit",
            &(name,),
        )
        .await?;
    reply.body().deserialize()
}

async fn get(
    conn: &zbus::Connection,
    path: &zbus::OwnedObjectPath,
    iface: &str,
    prop: &str,
) -> Result<zbus::OwnedVariant, zbus::Error> {
    let reply = conn
        .call_method(
            Some("org.freedesktop.systemd1"),
            path,
            Some("org.freedesktop.DBus.Properties"),
            "Get",
            &(iface, prop),
        )
        .await?;
    reply.body().deserialize()
}

async fn get_u64(
    conn: &zbus::Connection,
    path: &zbus::OwnedObjectPath,
    iface: &str,
    prop: &str,
) -> Result<u64, zbus::Error> {
    let v = get(conn, path, iface, prop).await?;
    u64::try_from(v)
}

async fn get_string(
    conn: &zbus::Connection,
    path: &zbus::OwnedObjectPath,
    prop: &str,
) -> Result<String, zbus::Error> {
    let v = get(conn, path, "org.freedesktop.systemd1.Unit", prop).await?;
    String::try_from(v)
}

/// The unit's state and its object path.
async fn unit(
    conn: &zbus::Connection,
    name: &str,
) -> Result<(UnitState, zbus::OwnedObjectPath), zbus::Error> {
    let path = load_unit(conn, name).await?;
    let state = UnitState {
        name: name.to_string(),
        load_state: get_string(conn, &path, "LoadState").await?,
        active_state: get_string(conn, &path, "ActiveState").await?,
        sub_state: get_string(conn, &path, "SubState").await?,
    };
    Ok((state, path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unit_names_use_the_job_name_as_it_is() {
        assert_eq!(
            unit_names("backup"),
            (
                "jobguard@backup.timer".to_string(),
                "jobguard@backup.service".to_string()
            )
        );
        // As the generator names them: `jobguard@store-sync.timer`, not `store\x2dsync`.
        let (timer, _) = unit_names("store-sync");
        assert_eq!(timer, "jobguard@store-sync.timer");
    }
}

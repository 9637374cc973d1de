//! Who and where this process is: machine id, boot id, pid and the pid's start time.
//!
//! These make up the lease holder (`crate::guard::lease::Holder`) and let `jobguard recover`
//! prove a holder gone: a record from another boot of this machine, or from a pid that
//! no longer runs the same process, belongs to a holder that is dead. They also find the
//! processes an attempt left behind when its shim died ([`leftovers`]).

use std::fs;

/// `/etc/machine-id`, trimmed; empty if unreadable.
pub fn machine_id() -> String {
    read_trimmed("/etc/machine-id")
}

/// The kernel's boot id (`/proc/sys/kernel/random/boot_id`) without dashes; empty if
/// unreadable.
pub fn boot_id() -> String {
    read_trimmed("/proc/sys/kernel/random/boot_id").replace('-', "")
}

/// When this host booted, µs since the epoch (`btime` of `/proc/stat`, proc(5), whole
/// seconds); 0 if unreadable.
pub fn boot_time_usec() -> i64 {
    fs::read_to_string("/proc/stat")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("btime "))
                .and_then(|v| v.trim().parse::<i64>().ok())
        })
        .map_or(0, |secs| secs.saturating_mul(1_000_000))
}

/// When this boot began, µs since the epoch: the start of PID 1 (`/proc/1/stat` field
/// 22, in clock ticks after the kernel's boot, proc(5)) after [`boot_time_usec`]. In a
/// container with an init of its own that is the container's start (the kernel's boot
/// time is shared; the boot id is the container's own under systemd-nspawn, but the
/// kernel's under Docker and Podman); on a host it is the kernel's boot. [`boot_time_usec`] when PID 1 cannot be read.
pub fn this_boot_usec() -> i64 {
    let btime = boot_time_usec();
    let ticks = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .filter(|t| *t > 0);
    match (process_start(1), ticks) {
        (Some(start), Some(per_sec)) if btime > 0 => {
            let after = i64::try_from(start.saturating_mul(1_000_000) / per_sec.unsigned_abs())
                .unwrap_or(0);
            btime.saturating_add(after)
        }
        _ => btime,
    }
}

/// The host name, for display.
pub fn host_name() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_default()
}

/// Start time of process `pid` in clock ticks since boot (`/proc/PID/stat` field 22,
/// proc(5)); `None` if the process does not exist.
pub fn process_start(pid: u32) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may contain spaces and ')'.
    let after = &stat[stat.rfind(')')? + 1..];
    // After the name: field 3 (state) is index 0, so field 22 is index 19.
    after.split_whitespace().nth(19)?.parse().ok()
}

/// Whether the process `pid` that started at `start` (see [`process_start`]) still runs
/// on this boot.
pub fn process_alive(pid: u32, start: u64) -> bool {
    process_start(pid) == Some(start)
}

/// Ends what is left of a cut-off run on this host: every process whose environment
/// carries `JOBGUARD_RUN_ID=<run_id>` (the command's children and grandchildren that
/// outlived a killed shim; `PR_SET_PDEATHSIG` reaches only the command itself, and outside
/// systemd no cgroup ends the rest). Sends them SIGKILL and waits up to 5 s for them to
/// go. Returns true when none is left, false when some still run (or cannot be signalled,
/// e.g. another user's processes when not root).
///
/// The environment read is the one each process started with (`/proc/PID/environ`,
/// proc(5)), so a process that started with a cleaned environment is not found.
pub fn end_run_survivors(run_id: &str) -> bool {
    let needle = format!("JOBGUARD_RUN_ID={run_id}");
    let find = || -> Vec<i32> {
        let Ok(dir) = fs::read_dir("/proc") else {
            return Vec::new();
        };
        dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
            .filter(|pid| {
                fs::read(format!("/proc/{pid}/environ"))
                    .map(|env| env.split(|b| *b == 0).any(|v| v == needle.as_bytes()))
                    .unwrap_or(false)
            })
            .collect()
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let left = find();
        if left.is_empty() {
            return true;
        }
        if std::time::Instant::now() >= deadline {
            return false;
        }
        for pid in left {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// The variable that carries the shim's lease holder id (`Holder::id` of `crate::guard::lease`) into the
/// environment of the command, and so of every process the command starts.
pub const HOLDER_VAR: &str = "JOBGUARD_HOLDER";

/// A process of an attempt at a job on this host whose shim is gone (see [`leftovers`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leftover {
    /// Process id.
    pub pid: i32,
    /// The attempt's `JOBGUARD_RUN_ID`.
    pub run_id: String,
    /// The holder its environment names ([`HOLDER_VAR`], as `Holder::id` writes it):
    /// a record is believed cut only when it names this very holder.
    pub holder: String,
}

/// The processes of earlier attempts at `job` on this machine and boot whose shim no
/// longer runs: every process of the user `uid` (the job's: its command runs as that
/// user) whose environment carries `JOBGUARD_JOB=<job>`, a `JOBGUARD_RUN_ID` and a
/// [`HOLDER_VAR`] naming this machine and boot and a shim process (pid and start time)
/// that is gone. A process whose shim still runs (another `jobguard` with its own runtime
/// directory, e.g. another user's) is not one, nor is another user's: any user may put
/// these variables in a process's environment.
///
/// The environment read is the one each process started with (`/proc/PID/environ`,
/// proc(5)): it survives `setsid`, double forks and a changed process group, but not a
/// process that started with a cleaned environment (`env -i`), nor one this user may not
/// read (another user's, when not root).
pub fn leftovers(job: &str, uid: u32) -> Vec<Leftover> {
    use std::os::unix::fs::MetadataExt;
    let me = std::process::id();
    let (machine, boot) = (machine_id(), boot_id());
    let Ok(dir) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        if pid == me {
            continue;
        }
        // /proc/PID belongs to the process's effective user (proc(5)).
        if entry.metadata().map(|m| m.uid()).ok() != Some(uid) {
            continue;
        }
        let Ok(env) = fs::read(format!("/proc/{pid}/environ")) else {
            continue;
        };
        let var = |name: &str| {
            env.split(|b| *b == 0).find_map(|v| {
                let v = v.strip_prefix(name.as_bytes())?.strip_prefix(b"=")?;
                std::str::from_utf8(v).ok().map(str::to_string)
            })
        };
        if var("JOBGUARD_JOB").as_deref() != Some(job) {
            continue;
        }
        let (Some(run_id), Some(holder)) = (var("JOBGUARD_RUN_ID"), var(HOLDER_VAR)) else {
            continue;
        };
        // machine_id:boot_id:pid:pid_start, as Holder::id writes it.
        let parts: Vec<&str> = holder.split(':').collect();
        let [m, b, shim, start] = parts[..] else {
            continue;
        };
        let (Ok(shim), Ok(start)) = (shim.parse::<u32>(), start.parse::<u64>()) else {
            continue;
        };
        if m != machine || b != boot || process_alive(shim, start) {
            continue;
        }
        if let Ok(pid) = i32::try_from(pid) {
            found.push(Leftover {
                pid,
                run_id,
                holder,
            });
        }
    }
    found
}

/// Ends `procs` (see [`leftovers`]): SIGTERM, up to `grace` for them to go, then SIGKILL
/// and up to 5 s more. Returns the pids still running after that (none, unless they may
/// not be signalled or hang in the kernel). A pid is only signalled while it still
/// carries the same `JOBGUARD_RUN_ID`, so a reused pid is left alone.
pub fn end_leftovers(procs: &[Leftover], grace: std::time::Duration) -> Vec<i32> {
    use nix::sys::signal::{Signal, kill};
    use std::time::{Duration, Instant};
    let still = |p: &Leftover| {
        let needle = format!("JOBGUARD_RUN_ID={}", p.run_id);
        fs::read(format!("/proc/{}/environ", p.pid))
            .map(|env| env.split(|b| *b == 0).any(|v| v == needle.as_bytes()))
            .unwrap_or(false)
    };
    let signal = |sig: Signal| {
        for p in procs.iter().filter(|p| still(p)) {
            let _ = kill(nix::unistd::Pid::from_raw(p.pid), sig);
        }
    };
    let wait = |until: Instant| loop {
        let left: Vec<i32> = procs.iter().filter(|p| still(p)).map(|p| p.pid).collect();
        if left.is_empty() || Instant::now() >= until {
            return left;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    signal(Signal::SIGTERM);
    if wait(Instant::now() + grace).is_empty() {
        return Vec::new();
    }
    signal(Signal::SIGKILL);
    wait(Instant::now() + Duration::from_secs(5))
}

/// The file of [`crate::paths::state_dir`] that lists the boots this installation ran
/// under ([`Installation`]).
pub const BOOTS_FILE: &str = "boots";

/// How many boots [`BOOTS_FILE`] keeps, newest last: a record of an older boot is taken
/// for another installation's (judged by its lease alone, the safe way).
pub const BOOTS_KEPT: usize = 256;

/// How long after this boot began, µs, a `running` record of this machine id from a boot
/// this installation does not know proves another installation ([`Installation::twin`]):
/// the store's and this host's clocks may differ by up to a minute.
pub const TWIN_MARGIN_USEC: i64 = 60_000_000;

/// This installation of jobguard: the machine id, this boot, and every boot it ran
/// under (newest [`BOOTS_KEPT`]), from [`BOOTS_FILE`] in the state directory.
///
/// Machines made from one image often share `/etc/machine-id` (a template that was never
/// `systemd-machine-id-setup`'d), so a record with this machine id and another boot id
/// may be another machine's live run, not an earlier boot of this one. Boot ids are
/// random per boot (`/proc/sys/kernel/random/boot_id`, random(4)), so the boots an
/// installation wrote under are its own even where the image carried its state directory
/// along: a boot after the copy is the copy's alone. (A disk copied from a running
/// machine lists the boot it goes on running: [`Self::wrote`] believes a listed earlier
/// boot only for records that started before this boot began.) A random key kept in the
/// state directory would not be: it is copied with the image. Local evidence (a pid, a boot
/// id) is believed only for a record written under one of these boots ([`Self::wrote`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Installation {
    /// `/etc/machine-id`; empty if unreadable.
    pub machine_id: String,
    /// This boot's id ([`boot_id`]).
    pub boot_id: String,
    /// When this boot began, µs since the epoch ([`this_boot_usec`]).
    pub boot_usec: i64,
    /// The boots of [`BOOTS_FILE`] listed with this machine id, and this boot.
    pub boots: std::collections::BTreeSet<String>,
}

impl Installation {
    /// This installation, as [`BOOTS_FILE`] in [`crate::paths::state_dir`] lists it, read
    /// once per process (`recover` judges every record by it). A boot entered later by this
    /// process is this boot, which [`Self::wrote`] counts without the list.
    pub fn here() -> &'static Installation {
        static HERE: std::sync::OnceLock<Installation> = std::sync::OnceLock::new();
        HERE.get_or_init(|| Self::read(&crate::paths::state_dir()))
    }

    /// This installation, as [`BOOTS_FILE`] in `dir` lists it (an unreadable file lists
    /// no earlier boot). Lines are `MACHINE_ID BOOT_ID`; lines of another machine id (the
    /// id was changed since, e.g. by `systemd-machine-id-setup` on a copy) do not count.
    pub fn read(dir: &std::path::Path) -> Installation {
        let (machine_id, boot_id) = (machine_id(), boot_id());
        let text = fs::read_to_string(dir.join(BOOTS_FILE)).unwrap_or_default();
        let mut boots: std::collections::BTreeSet<String> = text
            .lines()
            .filter_map(|l| l.split_once(' '))
            .filter(|(m, _)| !machine_id.is_empty() && *m == machine_id)
            .map(|(_, b)| b.trim().to_string())
            .filter(|b| !b.is_empty())
            .collect();
        if !boot_id.is_empty() {
            boots.insert(boot_id.clone());
        }
        Installation {
            machine_id,
            boot_id,
            boot_usec: this_boot_usec(),
            boots,
        }
    }

    /// Adds this boot to [`BOOTS_FILE`] in `dir` unless it is listed: one line appended
    /// (`O_APPEND`, one write, not through a link), and the file cut back to the newest
    /// [`BOOTS_KEPT`] once it holds twice as many. Done before this process writes a
    /// record, so that after a crash the next boot knows the record for its own.
    ///
    /// # Errors
    /// Creating `dir` or writing the file.
    pub fn enter_this_boot(dir: &std::path::Path) -> std::io::Result<()> {
        use std::io::Write;
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
        let (machine, boot) = (machine_id(), boot_id());
        if machine.is_empty() || boot.is_empty() {
            return Ok(());
        }
        let path = dir.join(BOOTS_FILE);
        let line = format!("{machine} {boot}");
        let text = fs::read_to_string(&path).unwrap_or_default();
        if text.lines().any(|l| l == line) {
            return Ok(());
        }
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
        let lines: Vec<&str> = text.lines().collect();
        if lines.len() + 1 >= 2 * BOOTS_KEPT {
            let keep = &lines[lines.len() + 1 - BOOTS_KEPT..];
            let tmp = dir.join(format!(".{BOOTS_FILE}.{}.tmp", std::process::id()));
            let mut f = fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW)
                .open(&tmp)?;
            f.write_all(format!("{}\n{line}\n", keep.join("\n")).as_bytes())?;
            return fs::rename(&tmp, &path);
        }
        let mut f = fs::OpenOptions::new()
            .append(true)
            .create(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)?;
        f.write_all(format!("{line}\n").as_bytes())
    }

    /// Whether `run` was written by this installation: this machine id, and this boot,
    /// or an earlier boot it ran under that the record does not postdate. A disk copied
    /// from a running machine lists that machine's boot of the moment, which goes on
    /// after the copy: a record of it that started after this boot began
    /// ([`Self::after_this_boot_began`]) is the original's.
    pub fn wrote(&self, run: &impl Record) -> bool {
        !self.machine_id.is_empty()
            && run.machine_id() == self.machine_id
            && (run.boot_id() == self.boot_id
                || (self.boots.iter().any(|b| b == run.boot_id())
                    && !self.after_this_boot_began(run)))
    }

    /// Whether `run` proves another installation with this machine id: it has this
    /// machine id and another boot, and it started after this boot began
    /// ([`Self::after_this_boot_began`]), when no earlier boot of this machine can have
    /// written it.
    pub fn twin(&self, run: &impl Record) -> bool {
        !self.machine_id.is_empty()
            && run.machine_id() == self.machine_id
            && !run.boot_id().is_empty()
            && run.boot_id() != self.boot_id
            && self.after_this_boot_began(run)
    }

    /// The records of `runs` that prove another installation with this machine id
    /// ([`Self::twin`]).
    pub fn twins<'a, R: Record>(&self, runs: &'a [R]) -> Vec<&'a R> {
        runs.iter().filter(|r| self.twin(*r)).collect()
    }

    /// Whether `run` started (store clock) more than [`TWIN_MARGIN_USEC`] after this boot
    /// began (this host's clock); false when the boot's start is unknown.
    fn after_this_boot_began(&self, run: &impl Record) -> bool {
        self.boot_usec > 0 && run.started_at() > self.boot_usec.saturating_add(TWIN_MARGIN_USEC)
    }
}

/// What [`Installation`] reads of a ledger record ([`crate::guard::ledger::Run`]) to tell whose
/// it is: the machine and boot that wrote it, and when it started (µs since the epoch,
/// store clock).
pub trait Record {
    /// The machine id (machine-id(5)) of the host that wrote the record.
    fn machine_id(&self) -> &str;
    /// The boot id of the boot that wrote it.
    fn boot_id(&self) -> &str;
    /// When it started, µs since the epoch.
    fn started_at(&self) -> i64;
}

/// What to do about another installation with this machine id, for `status`, the journal
/// and the alert (machine-id(5)).
pub const SHARED_MACHINE_ID_FIX: &str = "give each machine its own id: on a machine made from an image, `rm /etc/machine-id && systemd-machine-id-setup` (then reboot), or empty /etc/machine-id in the image so that each machine makes its own at first boot; until then each judges the other's runs by their leases alone";

fn read_trimmed(path: &str) -> String {
    fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// A new run id: 32 lower-case hex digits from the kernel's random source.
pub fn new_run_id() -> String {
    // /proc/sys/kernel/random/uuid gives a fresh random UUID on every read.
    let uuid = read_trimmed("/proc/sys/kernel/random/uuid").replace('-', "");
    if uuid.len() == 32 {
        return uuid;
    }
    let now = jiff::Timestamp::now().as_nanosecond();
    format!(
        "{:016x}{:08x}{:08x}",
        now as u64,
        std::process::id(),
        now.rotate_left(17) as u32
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_process_is_alive_and_a_changed_start_is_not() {
        let pid = std::process::id();
        let start = process_start(pid).expect("own /proc/PID/stat");
        assert!(process_alive(pid, start));
        assert!(!process_alive(pid, start + 1));
    }

    #[test]
    fn run_ids_are_32_hex_digits_and_differ() {
        let a = new_run_id();
        let b = new_run_id();
        assert_eq!(a.len(), 32);
        assert!(a.chars().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }

    fn installation(boots: &[&str], boot_usec: i64) -> Installation {
        Installation {
            machine_id: "m".into(),
            boot_id: "b0".into(),
            boot_usec,
            boots: boots.iter().map(|b| b.to_string()).collect(),
        }
    }

    struct Rec(&'static str, &'static str, i64);

    impl Record for Rec {
        fn machine_id(&self) -> &str {
            self.0
        }
        fn boot_id(&self) -> &str {
            self.1
        }
        fn started_at(&self) -> i64 {
            self.2
        }
    }

    fn run(machine: &'static str, boot: &'static str, started_at: i64) -> Rec {
        Rec(machine, boot, started_at)
    }

    #[test]
    fn a_record_is_this_installations_only_under_a_boot_it_ran_under() {
        let boot = 1_000_000_000;
        let me = installation(&["b0", "b1"], boot);
        let (before, after) = (boot - 1, boot + TWIN_MARGIN_USEC + 1);
        assert!(me.wrote(&run("m", "b0", before)) && me.wrote(&run("m", "b0", after)));
        assert!(me.wrote(&run("m", "b1", before)));
        // Another machine with this machine id (a copied image): another boot.
        assert!(!me.wrote(&run("m", "c1", before)));
        assert!(!me.wrote(&run("n", "b1", before)));
        // A disk copied from a running machine lists that machine's boot, which went on
        // after the copy: its records that started after this boot began are not ours,
        // and prove the copy.
        assert!(!me.wrote(&run("m", "b1", after)));
        assert!(me.twin(&run("m", "b1", after)));
        let unknown = Installation {
            machine_id: String::new(),
            ..me.clone()
        };
        assert!(!unknown.wrote(&run("", "b0", before)));
    }

    #[test]
    fn a_record_of_an_unknown_boot_after_this_boot_began_proves_a_copy() {
        let boot = 1_000_000_000;
        let me = installation(&["b0", "b1"], boot);
        let after = boot + TWIN_MARGIN_USEC + 1;
        assert!(me.twin(&run("m", "c1", after)));
        // Not: an earlier boot (of this installation, or whose list was lost), a boot
        // this installation knows, another machine id, or within the margin.
        assert!(!me.twin(&run("m", "c1", boot - 1)));
        assert!(!me.twin(&run("m", "c1", boot + TWIN_MARGIN_USEC)));
        assert!(!me.twin(&run("m", "b0", after)));
        assert!(!me.twin(&run("n", "c1", after)));
        assert_eq!(
            me.twins(&[run("m", "c1", after), run("m", "b0", after)])
                .len(),
            1
        );
    }

    #[test]
    fn the_boots_file_keeps_this_boot_once_and_only_the_newest() {
        let dir = tempfile::tempdir().unwrap();
        let (machine, boot) = (machine_id(), boot_id());
        if machine.is_empty() || boot.is_empty() {
            return;
        }
        Installation::enter_this_boot(dir.path()).unwrap();
        Installation::enter_this_boot(dir.path()).unwrap();
        let file = dir.path().join(BOOTS_FILE);
        assert_eq!(
            std::fs::read_to_string(&file).unwrap(),
            format!("{machine} {boot}\n")
        );
        // Boots of another machine id do not count; a full file is cut back.
        let mut text: String = (0..2 * BOOTS_KEPT - 1)
            .map(|i| format!("{machine} old{i}\n"))
            .collect();
        text.push_str("othermachine other\n");
        std::fs::write(&file, text).unwrap();
        let read = Installation::read(dir.path());
        assert!(read.boots.contains("old0") && !read.boots.contains("other"));
        Installation::enter_this_boot(dir.path()).unwrap();
        let kept = std::fs::read_to_string(&file).unwrap();
        assert_eq!(kept.lines().count(), BOOTS_KEPT);
        assert_eq!(
            kept.lines().last(),
            Some(format!("{machine} {boot}").as_str())
        );
        let read = Installation::read(dir.path());
        assert!(!read.boots.contains("old0") && read.boots.contains(&boot));
        // Not through a link planted at the file's name.
        let target = dir.path().join("target");
        std::fs::write(&target, "").unwrap();
        std::fs::remove_file(&file).unwrap();
        std::os::unix::fs::symlink(&target, &file).unwrap();
        assert!(Installation::enter_this_boot(dir.path()).is_err());
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "");
    }

    #[test]
    fn this_boot_began_after_the_kernel_and_before_now() {
        let now = jiff::Timestamp::now().as_microsecond();
        let b = this_boot_usec();
        assert!(b >= boot_time_usec() && b <= now, "{b}");
    }
}

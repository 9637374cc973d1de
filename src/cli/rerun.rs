//! `jobguard rerun JOB [SLOT]`: run a slot again, forced, as the job's own unit under
//! systemd ([`crate::shim::rerun`]; root only: exit 77 for another user), else in this
//! process.

use crate::cli::{RerunArgs, find_job};
use crate::exit;
use crate::ledger::format_usec;
use crate::shim;

/// Runs `jobguard rerun`; returns the exit status.
pub fn run(args: &RerunArgs) -> u8 {
    let job = match find_job(&args.config, &args.job) {
        Ok(j) => j,
        Err(code) => return code,
    };
    let now = crate::clock::Clock::now_usec(&crate::clock::SystemClock);
    let slot = match shim::slot::for_request(&job, args.slot.as_deref(), now) {
        Ok(c) => c.slot,
        Err(e) => {
            eprintln!("jobguard: {}: {e}", job.name);
            return exit::USAGE;
        }
    };
    if slot.usec > now {
        eprintln!(
            "jobguard: {}: slot {} is in the future; its own firing will run it",
            job.name,
            slot.rfc3339()
        );
        return exit::USAGE;
    }
    let by = who();
    // The unit runs the default job list: another list (`--config`, `JOBGUARD_CONFIG`)
    // runs here.
    let default_list = crate::config::ConfigSource::resolve(args.config.config.clone())
        == crate::config::ConfigSource::Default;
    if crate::recover::under_systemd() && default_list {
        // The system unit takes root's requests (/run/jobguard/rerun) only, and only root
        // (or whom polkit allows) starts it: another user's request would wait unseen.
        if !nix::unistd::geteuid().is_root() {
            eprintln!(
                "jobguard: {}: a re-run under systemd is a request to the system unit jobguard@{}.service, which needs root: sudo jobguard rerun {} {}",
                job.name,
                job.name,
                job.name,
                slot.rfc3339()
            );
            return exit::NO_PERMISSION;
        }
        if let Err(e) = shim::rerun::request(&job.name, slot.usec, &by, true) {
            eprintln!("jobguard: {}: {e}", job.name);
            return exit::OS_ERROR;
        }
        let unit = format!("jobguard@{}.service", job.name);
        let active = std::process::Command::new("systemctl")
            .args(["is-active", "--quiet", &unit])
            .status()
            .is_ok_and(|s| s.success());
        if let Err(e) = crate::recover::start_unit(&job.name) {
            eprintln!(
                "jobguard: {}: {e}; the re-run of slot {} waits for the unit's next start",
                job.name,
                format_usec(slot.usec)
            );
            return exit::OS_ERROR;
        }
        if active {
            println!(
                "{} slot {}: {unit} is running; it re-runs the slot when its run ends (journalctl -u {unit})",
                job.name,
                slot.rfc3339()
            );
        } else {
            println!(
                "{} slot {}: re-run started as {unit} (journalctl -u {unit})",
                job.name,
                slot.rfc3339()
            );
        }
        return exit::OK;
    }
    let code = shim::run(
        &job,
        &shim::Request {
            slot: Some(slot.rfc3339()),
            force: true,
            queued_only: false,
            forced_by: Some(by),
        },
    );
    crate::journal::notify_barrier(std::time::Duration::from_secs(1));
    code
}

/// Who asks: the user, and the one behind sudo.
pub fn who() -> String {
    let uid = nix::unistd::getuid();
    let name = nix::unistd::User::from_uid(uid)
        .ok()
        .flatten()
        .map_or_else(|| uid.to_string(), |u| u.name);
    match std::env::var("SUDO_USER").ok().filter(|s| !s.is_empty()) {
        Some(sudo) if sudo != name => format!("{name} (sudo from {sudo})"),
        _ => name,
    }
}

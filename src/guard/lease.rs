//! Leases: who may run a job right now, across hosts.
//!
//! A lease is a row (or key) per job in the store: holder, acquired_at, expire_at and a
//! fencing token that grows with every grant. Expiry is judged by the store's clock.
//! The operations themselves are methods of [`crate::store::Store`]; this module holds the
//! values they exchange, the holder identity, and the rule that keeps a holder's command
//! inside its lease ([`fence_after`], [`check_fence`]): the command is dead before the
//! lease could expire by the store's clock, measured from the last confirmed renewal.

use std::time::Duration;

use serde::Serialize;

/// Identity of a lease holder: one process of one boot of one machine.
///
/// The host name is for display only: two hosts can share one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Holder {
    /// `/etc/machine-id`.
    pub machine_id: String,
    /// `/proc/sys/kernel/random/boot_id`, without dashes.
    pub boot_id: String,
    /// Process id of the shim.
    pub pid: u32,
    /// Start time of that process in clock ticks since boot (`/proc/PID/stat` field 22),
    /// so a reused pid is not mistaken for the holder.
    pub pid_start: u64,
    /// Host name, for people.
    pub host: String,
}

impl Holder {
    /// The identity of this process as a lease holder. This boot is first entered among the
    /// installation's boots ([`crate::guard::identity::Installation::enter_this_boot`]); when that fails, a warning
    /// goes to stderr and a record of this boot will be judged, after a crash, by its lease
    /// alone.
    pub fn current() -> Holder {
        let dir = crate::paths::state_dir();
        if let Err(e) = crate::guard::identity::Installation::enter_this_boot(&dir) {
            eprintln!(
                "jobguard: warning: {}: {e}: a run cut by a crash of this boot is found by its lease alone",
                dir.join(crate::guard::identity::BOOTS_FILE).display()
            );
        }
        let pid = std::process::id();
        Holder {
            machine_id: crate::guard::identity::machine_id(),
            boot_id: crate::guard::identity::boot_id(),
            pid,
            pid_start: crate::guard::identity::process_start(pid).unwrap_or(0),
            host: crate::guard::identity::host_name(),
        }
    }

    /// The identity string stored as the lease holder: `machine_id:boot_id:pid:pid_start`.
    pub fn id(&self) -> String {
        format!(
            "{}:{}:{}:{}",
            self.machine_id, self.boot_id, self.pid, self.pid_start
        )
    }
}

/// A granted lease, as the store recorded it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Lease {
    /// Job name.
    pub job: String,
    /// [`Holder::id`] of the holder.
    pub holder: String,
    /// Host name of the holder, for display.
    pub host: String,
    /// Fencing token of this grant; larger than every earlier grant's for the job.
    pub token: i64,
    /// When the lease was granted, µs since the Unix epoch, store clock.
    pub acquired_at: i64,
    /// When it expires unless renewed, µs since the Unix epoch, store clock.
    pub expire_at: i64,
    /// The renewal generation: 0 at the grant, then the random value the last renewal
    /// wrote ([`crate::store::Store::renew`]). Two copies of one holder (a host, VM or
    /// container resumed twice from one memory snapshot) share holder and token; the
    /// first copy to renew moves the generation on, and the other copy's renewal and final
    /// write, which present the old one, are refused ([`crate::store::rules::renew`]).
    pub renewal: i64,
}

/// A fresh renewal generation for [`crate::store::Store::renew`]: random, never 0 (the
/// generation of a grant), drawn at the moment of each renewal so that copies of one
/// process resumed from one memory snapshot draw different ones. The kernel's random
/// source ([`crate::guard::identity::new_run_id`]) is part of a VM's snapshot unless the
/// hypervisor gives the guest a VM generation id (Linux reseeds it then, since 5.18), so
/// the wall clock's nanoseconds are mixed in: copies resumed on two hosts do not renew in
/// one nanosecond.
pub fn next_renewal() -> i64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    loop {
        let id = crate::guard::identity::new_run_id();
        let random = u64::from_str_radix(&id[..16], 16).unwrap_or(0);
        let v = (random ^ nanos.rotate_left(29)) as i64 & i64::MAX;
        if v != 0 {
            return v;
        }
    }
}

/// How long before its lease could expire a holder's command must be dead: the safety
/// margin between the SIGKILL and the expiry. It covers the time a killed process takes
/// to go and the drift between this host's monotonic clock and the store's clock over one
/// time to live; an offset between the two clocks does not count, because the expiry is
/// measured on this host from the moment the confirmed call was sent (the store computes
/// it from its own clock when it receives the call, which is later).
///
/// It is also all the lease may have left when the shim itself dies (just before its own
/// SIGKILL was due), so whatever ends the processes of a dead shim must do so within it:
/// under systemd the template's `KillMode=mixed` SIGKILLs every process left in the
/// unit's cgroup as soon as the shim is gone (see [`crate::systemd::render`]).
pub const FENCE_MARGIN: Duration = Duration::from_secs(1);

/// When, after the send time of its last confirmed grant or renewal, the holder of a lease
/// of `ttl` stops its command: SIGTERM at the returned offset, SIGKILL `kill_grace` later,
/// [`FENCE_MARGIN`] before the lease could expire. `None` when `kill_grace` and the margin
/// take the whole time to live.
pub fn fence_after(ttl: Duration, kill_grace: Duration) -> Option<Duration> {
    ttl.checked_sub(kill_grace)?.checked_sub(FENCE_MARGIN)
}

/// How often the holder of a lease of `ttl` renews it: every third of the time to live,
/// more often when the fence ([`fence_after`]) leaves less, so that at least two renewals
/// are tried before it. At least 100 ms.
pub fn renew_every(ttl: Duration, kill_grace: Duration) -> Duration {
    let window = fence_after(ttl, kill_grace).unwrap_or_default();
    (ttl / 3).min(window / 2).max(Duration::from_millis(100))
}

/// Checks that a job's `lease_ttl` leaves time to renew the lease before the command must
/// be stopped for its safety ([`fence_after`]): `kill_grace` plus [`FENCE_MARGIN`] may take
/// at most two thirds of `lease_ttl`, so that the command is not stopped before the first
/// renewal (due after a third) could be confirmed. The rule of `jobguard check` and the
/// generator.
///
/// # Errors
/// A message with the numbers and both ways out: the longest `kill_grace` this
/// `lease_ttl` allows, and the shortest `lease_ttl` for this `kill_grace`.
pub fn check_fence(ttl: Duration, kill_grace: Duration) -> Result<(), String> {
    let lead = kill_grace + FENCE_MARGIN;
    if lead * 3 <= ttl * 2 {
        return Ok(());
    }
    let secs = |d: Duration| {
        let ms = d.as_millis();
        if ms.is_multiple_of(1000) {
            format!("{}s", ms / 1000)
        } else {
            format!("{}ms", ms)
        }
    };
    // Whole seconds, rounded so that the suggestion passes this check.
    let max_grace = (ttl * 2 / 3).saturating_sub(FENCE_MARGIN);
    let max_grace = Duration::from_secs(max_grace.as_secs());
    let min_ttl = Duration::from_secs((lead * 3 / 2).as_secs_f64().ceil() as u64);
    let grace_way = if ttl * 2 / 3 > FENCE_MARGIN {
        format!("lower kill_grace to at most {} or ", secs(max_grace))
    } else {
        String::new()
    };
    Err(format!(
        "kill_grace {} + safety margin {} = {} does not fit in lease_ttl {}: the command must be dead {} before its lease could expire, \
         which leaves no time to renew the lease (at most two thirds of lease_ttl, {}, may go to kill_grace and the margin); \
         {grace_way}raise lease_ttl to at least {}",
        secs(kill_grace),
        secs(FENCE_MARGIN),
        secs(lead),
        secs(ttl),
        secs(lead),
        secs(ttl * 2 / 3),
        secs(min_ttl),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_current_holder_has_this_machine_and_boot() {
        let h = Holder::current();
        assert_eq!(h.boot_id.len(), 32);
        assert!(h.id().contains(&h.boot_id));
    }

    fn s(secs: u64) -> Duration {
        Duration::from_secs(secs)
    }

    #[test]
    fn fence_rule_with_its_numbers() {
        assert!(check_fence(s(3), s(0)).is_ok());
        assert!(check_fence(s(6), s(3)).is_ok());
        assert!(check_fence(s(20), s(10)).is_ok());
        assert!(check_fence(s(120), s(10)).is_ok());
        let e = check_fence(s(6), s(30)).unwrap_err();
        assert!(
            e.starts_with("kill_grace 30s + safety margin 1s = 31s does not fit in lease_ttl 6s"),
            "{e}"
        );
        assert!(e.contains("at most 3s"), "{e}");
        assert!(e.contains("at least 47s"), "{e}");
        // The suggestions pass.
        assert!(check_fence(s(6), s(3)).is_ok() && check_fence(s(47), s(30)).is_ok());
        assert!(check_fence(s(46), s(30)).is_err());
        let e = check_fence(s(3), s(10)).unwrap_err();
        assert!(e.contains("at least 17s"), "{e}");
    }

    #[test]
    fn renewals_come_at_least_twice_before_the_fence() {
        for (ttl, grace) in [(3, 0), (6, 3), (20, 10), (30, 10), (120, 10), (120, 0)] {
            let (ttl, grace) = (s(ttl), s(grace));
            let fence = fence_after(ttl, grace).unwrap();
            let every = renew_every(ttl, grace);
            assert!(
                every * 2 <= fence,
                "{ttl:?} {grace:?}: every {every:?}, fence {fence:?}"
            );
            assert!(every <= ttl / 3);
        }
    }
}

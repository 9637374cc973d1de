//! Leases: who may run a job right now, across hosts.
//!
//! A lease is a row (or key) per job in the store: holder, acquired_at, expire_at and a
//! fencing token that grows with every grant. Expiry is judged by the store's clock.
//! The operations themselves are methods of [`crate::store::Store`]; this module holds the
//! values they exchange and the holder identity.

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
}

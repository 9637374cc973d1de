//! The fleet view: every host that shares a store writes a heartbeat there at each
//! recovery pass (every minute under `jobguard-recover.timer`), and any host reads them
//! all (`jobguard status --fleet`, `jobguard metrics`).
//!
//! A heartbeat ([`Beat`]) says who the host is (name, machine id, boot), which jobguard it
//! runs, which of its jobs use this store and whether each is armed (enabled) or paused,
//! a fingerprint of each job's definition, and what its job list refused. The store keeps
//! it as given under the host's key ([`Beat::key`]) and decides nothing
//! ([`crate::store::Store::put_beat`]); [`judge`] reads the beats with the store's clock
//! and the schedules the store holds, and finds:
//! - hosts whose heartbeat stopped ([`SILENT_AFTER_USEC`]);
//! - two live machines with one machine id (an image copied without
//!   `systemd-machine-id-setup`, machine-id(5));
//! - jobs whose definitions differ between the live hosts that arm them;
//! - jobs whose declared schedule is still live in the store
//!   ([`crate::store::ScheduleDecl`]) but that no live host arms;
//! - jobs a host's job list refused, and hosts with job-list errors.
//!
//! A host's beats of earlier boots are superseded by its newest boot's, and forgotten by
//! the next reader ([`read`], [`superseded`]); a host taken out of service for good is
//! forgotten by `jobguard status --fleet --forget HOST`. Every host that exports metrics
//! reads every beat of its stores at each pass: a few hundred bytes per host and job.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::joblist::job::Job;
use crate::store::ScheduleDecl;

/// How long after its last heartbeat a host counts as silent, µs: five recovery passes
/// of `jobguard-recover.timer` (one a minute).
pub const SILENT_AFTER_USEC: i64 = 5 * 60 * 1_000_000;

/// One host's heartbeat in one store, as JSON in the store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Beat {
    /// The host's name (gethostname(2)).
    pub host: String,
    /// `/etc/machine-id`; empty if unreadable.
    pub machine_id: String,
    /// The boot the beat was written in (`/proc/sys/kernel/random/boot_id`).
    pub boot_id: String,
    /// When that boot began, µs since the epoch by the host's clock.
    pub boot_usec: i64,
    /// The jobguard version that wrote it.
    pub version: String,
    /// When it was written, µs since the epoch by the store's clock.
    pub seen_at: i64,
    /// The host's jobs that use this store, by name.
    pub jobs: BTreeMap<String, JobBeat>,
    /// How many errors the host's job list has ([`crate::joblist::config::JobSet::errors`]).
    #[serde(default)]
    pub list_errors: usize,
    /// The jobs the host's job list left out for an error in their definition.
    #[serde(default)]
    pub refused: Vec<String>,
}

/// One job in a host's heartbeat.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobBeat {
    /// The job runs on its schedule on this host (key `enabled`): its timer is armed.
    pub armed: bool,
    /// [`definition_fingerprint`] of the job as this host reads it.
    pub definition: String,
}

impl Beat {
    /// This host's heartbeat for the jobs of `set` that use the store at `address`
    /// (those whose address cannot be read are left out), with `seen_at` the store's time.
    pub fn here(set: &crate::joblist::config::JobSet, address: &str, seen_at: i64) -> Beat {
        let jobs = set
            .jobs
            .values()
            .filter(|j| j.store_address().is_ok_and(|a| a == address))
            .map(|j| {
                let beat = JobBeat {
                    armed: j.enabled,
                    definition: definition_fingerprint(j),
                };
                (j.name.clone(), beat)
            })
            .collect();
        let installation = crate::guard::identity::Installation::here();
        Beat {
            host: crate::guard::identity::host_name(),
            machine_id: installation.machine_id.clone(),
            boot_id: installation.boot_id.clone(),
            boot_usec: installation.boot_usec,
            version: env!("CARGO_PKG_VERSION").to_string(),
            seen_at,
            jobs,
            list_errors: set.errors.len(),
            refused: set.refused_jobs(),
        }
    }

    /// The key the store keeps the beat under: host name, machine id and boot id. A new
    /// boot writes a new key; its earlier ones are [`superseded`].
    pub fn key(&self) -> String {
        format!("{} {} {}", self.host, self.machine_id, self.boot_id)
    }

    /// The host as people name it: its name and the first 8 digits of its machine id.
    pub fn label(&self) -> String {
        let id: String = self.machine_id.chars().take(8).collect();
        if id.is_empty() {
            self.host.clone()
        } else {
            format!("{} ({id})", self.host)
        }
    }

    /// The beat as the store keeps it.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a beat is plain data")
    }

    /// A beat read from the store.
    ///
    /// # Errors
    /// Text that is not a beat, named with its key.
    pub fn from_json(key: &str, text: &str) -> Result<Beat, String> {
        serde_json::from_str(text).map_err(|e| format!("heartbeat {key:?}: {e}"))
    }
}

/// Writes this host's heartbeat for the jobs of `set` that use `store` (at `address`),
/// stamped with the store's clock.
///
/// # Errors
/// The store's.
pub fn beat(
    store: &mut dyn crate::store::Store,
    set: &crate::joblist::config::JobSet,
    address: &str,
) -> Result<(), crate::store::StoreError> {
    let now = store.now()?;
    let beat = Beat::here(set, address, now);
    store.put_beat(&beat.key(), &beat.to_json())
}

/// Reads the fleet as `store` holds it at the store's time: every beat, and the declared
/// schedule of every job the store holds records of or a beat names. Beats superseded by
/// a newer boot of their host are forgotten on the way ([`superseded`]).
///
/// # Errors
/// The store's.
pub fn read(store: &mut dyn crate::store::Store) -> Result<Fleet, crate::store::StoreError> {
    let now = store.now()?;
    let raw = store.beats()?;
    let mut names: BTreeSet<String> = store.jobs()?.into_iter().collect();
    for (key, text) in &raw {
        if let Ok(b) = Beat::from_json(key, text) {
            // A name a job list refused may be no job name at all (not a ZooKeeper node).
            let valid = |n: &String| crate::joblist::job::is_valid_job_name(n);
            names.extend(b.jobs.into_keys().filter(valid));
            names.extend(b.refused.into_iter().filter(valid));
        }
    }
    let mut declared = Vec::new();
    for name in &names {
        declared.extend(store.read_schedule(name)?);
    }
    let fleet = judge(raw, &declared, now);
    // Tidying, best effort: a reader without the right to delete still gets its view.
    let _ = store.forget_beats(&fleet.superseded);
    Ok(fleet)
}

/// A fingerprint of what a job does and when, as this host reads it: 16 hex digits of
/// the SHA-256 of its settings (schedule and zone, command, user, directory, environment,
/// limits, catch-up, failure handling; not the store's address, which may hold a
/// password, nor whether it is enabled). Two hosts that read one definition get one
/// fingerprint; hosts of two jobguard versions may read one file differently.
pub fn definition_fingerprint(job: &Job) -> String {
    use sha2::Digest;
    let text = format!(
        "schedule={}\0command={:?}\0user={:?}\0dir={:?}\0env={:?}\0timeout={:?}\0delay={:?}\0\
         store_wait={:?}\0on_store_unavailable={:?}\0tolerance={:?}\0ttl={:?}\0\
         on_interrupted={:?}\0settle_failures={:?}\0inhibit={:?}\0on_failure={:?}\0on_success={:?}\0grace={:?}\0\
         persistent={}\0catch_up={:?}\0catch_up_limit={}\0retention={:?}",
        job.schedule_fingerprint(),
        job.command,
        job.user,
        job.working_directory,
        job.environment,
        job.timeout,
        job.randomized_delay,
        job.store_wait,
        job.on_store_unavailable,
        job.clock_tolerance,
        job.lease_ttl,
        job.on_interrupted,
        job.settle_failures,
        job.inhibit,
        job.on_failure,
        job.on_success,
        job.kill_grace,
        job.persistent,
        job.catch_up,
        job.catch_up_limit,
        job.retention,
    );
    let digest = sha2::Sha256::digest(text.as_bytes());
    digest.iter().take(8).map(|b| format!("{b:02x}")).collect()
}

/// The keys of `beats` that the same machine has superseded: by a later beat of the same
/// boot under another host name (the host was renamed, or its first pass ran before its
/// name was set), or by a newer boot, when the beat was last written before that boot
/// began (host clock against store clock, with [`crate::guard::identity::TWIN_MARGIN_USEC`]
/// between them). The machine is its machine id, or its name where it has none. A beat
/// of another boot written after this one began is another machine's (a copied image),
/// not an earlier boot, and stays.
pub fn superseded(beats: &[(String, Beat)]) -> BTreeSet<String> {
    let same_machine = |a: &Beat, b: &Beat| {
        if a.machine_id.is_empty() || b.machine_id.is_empty() {
            a.machine_id == b.machine_id && a.host == b.host
        } else {
            a.machine_id == b.machine_id
        }
    };
    let margin = crate::guard::identity::TWIN_MARGIN_USEC;
    let mut out = BTreeSet::new();
    for (key, b) in beats {
        let newer = beats.iter().any(|(k, o)| {
            k != key
                && same_machine(o, b)
                && ((o.boot_id == b.boot_id && o.seen_at > b.seen_at)
                    || (o.boot_usec > b.boot_usec
                        && b.seen_at < o.boot_usec.saturating_add(margin)))
        });
        if newer {
            out.insert(key.clone());
        }
    }
    out
}

/// One host in the fleet view.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HostView {
    /// The store's key of its beat ([`Beat::key`]).
    pub key: String,
    /// [`Beat::label`].
    pub label: String,
    /// The beat as read.
    pub beat: Beat,
    /// No beat for [`SILENT_AFTER_USEC`].
    pub silent: bool,
    /// Another live host has its machine id.
    pub shared_machine_id: bool,
}

/// One job in the fleet view: a job some host's beat names, or whose declared schedule
/// is live in the store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct JobView {
    /// The job.
    pub job: String,
    /// The live hosts that arm it, by label.
    pub armed_by: Vec<String>,
    /// The live hosts that list it paused.
    pub paused_on: Vec<String>,
    /// The live hosts whose job list refused it.
    pub refused_on: Vec<String>,
    /// The definitions of the live hosts that arm it: fingerprint → hosts. More than one:
    /// the hosts run different jobs under one name.
    pub definitions: BTreeMap<String, Vec<String>>,
    /// Its declared schedule is live in the store: a host declared it within its horizon
    /// ([`ScheduleDecl::horizon`]).
    pub declared_live: bool,
    /// The host that declared it (`HOST MACHINE_ID`, [`ScheduleDecl::host`]) has a live
    /// heartbeat: a job it no longer lists was taken out of its list on purpose.
    pub declarer_live: bool,
}

impl JobView {
    /// What is wrong with the job across the fleet, if anything.
    pub fn problem(&self) -> Option<String> {
        if self.definitions.len() > 1 {
            let parts: Vec<String> = self
                .definitions
                .iter()
                .map(|(d, hosts)| format!("{} on {}", d, hosts.join(", ")))
                .collect();
            return Some(format!("definitions differ: {}", parts.join("; ")));
        }
        if !self.refused_on.is_empty() {
            return Some(format!(
                "refused by the job list on {}",
                self.refused_on.join(", ")
            ));
        }
        if self.unarmed() {
            return Some(
                "its schedule is live in the store, but no live host arms it any more".into(),
            );
        }
        None
    }

    /// No live host arms it (nor lists it paused) while its schedule is live in the store
    /// and the host that declared it is silent or gone: no host will run its next slot.
    /// A job its declaring host took out of its list, while that host lives on, was
    /// removed on purpose.
    pub fn unarmed(&self) -> bool {
        self.armed_by.is_empty()
            && self.paused_on.is_empty()
            && self.declared_live
            && !self.declarer_live
    }
}

/// The fleet as one store sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Fleet {
    /// Every host with a beat that is not superseded, by label.
    pub hosts: Vec<HostView>,
    /// Every job a live host names or whose schedule is live, by name.
    pub jobs: Vec<JobView>,
    /// Beats superseded by a newer boot of their host ([`superseded`]), by key.
    pub superseded: Vec<String>,
    /// Beats that could not be read: `key: error`.
    pub unreadable: Vec<String>,
    /// When it was judged, µs since the epoch by the store's clock.
    pub now: i64,
}

impl Fleet {
    /// Whether anything needs a person: a silent host, a shared machine id, a job-list
    /// error, a job with a [`JobView::problem`], or an unreadable beat.
    pub fn needs_attention(&self) -> bool {
        !self.unreadable.is_empty()
            || self
                .hosts
                .iter()
                .any(|h| h.silent || h.shared_machine_id || h.beat.list_errors > 0)
            || self.jobs.iter().any(|j| j.problem().is_some())
    }
}

/// The jobs of `fleet` whose declared schedule is live in the store but that no live host
/// arms (nor lists paused), for `status` and `audit` on every host of the store. Judged
/// only while some host's heartbeat is live: a store no host has written a heartbeat to
/// (just after an upgrade, or used only by hand) says nothing about who arms what.
pub fn unarmed(fleet: &Fleet) -> Vec<&JobView> {
    if fleet.hosts.iter().all(|h| h.silent) {
        return Vec::new();
    }
    fleet.jobs.iter().filter(|j| j.unarmed()).collect()
}

/// Reads the fleet of `store` ([`read`]) and answers its [`unarmed`] jobs by name.
///
/// # Errors
/// The store's.
pub fn unarmed_jobs(
    store: &mut dyn crate::store::Store,
) -> Result<Vec<String>, crate::store::StoreError> {
    let fleet = read(store)?;
    Ok(unarmed(&fleet).into_iter().map(|j| j.job.clone()).collect())
}

/// Judges the beats a store holds (`(key, JSON)`, [`crate::store::Store::beats`]) at
/// `now` (µs since the epoch, store clock), with the schedules the store holds for the
/// jobs it knows (`declared`).
pub fn judge(raw: Vec<(String, String)>, declared: &[ScheduleDecl], now: i64) -> Fleet {
    let mut unreadable = Vec::new();
    let mut beats: Vec<(String, Beat)> = Vec::new();
    // A job's pause windows share the fleet records' keyspace (crate::ops::pause).
    for (key, text) in raw
        .into_iter()
        .filter(|(k, _)| !crate::ops::pause::is_key(k))
    {
        match Beat::from_json(&key, &text) {
            Ok(b) => beats.push((key, b)),
            Err(e) => unreadable.push(e),
        }
    }
    let old = superseded(&beats);
    beats.retain(|(k, _)| !old.contains(k));
    beats.sort_by(|a, b| (a.1.label(), &a.0).cmp(&(b.1.label(), &b.0)));
    let live = |b: &Beat| b.seen_at.saturating_add(SILENT_AFTER_USEC) >= now;
    let hosts: Vec<HostView> = beats
        .iter()
        .map(|(key, b)| HostView {
            key: key.clone(),
            label: b.label(),
            beat: b.clone(),
            silent: !live(b),
            shared_machine_id: live(b)
                && !b.machine_id.is_empty()
                && beats.iter().any(|(k, o)| {
                    k != key && o.machine_id == b.machine_id && live(o) && o.boot_id != b.boot_id
                }),
        })
        .collect();
    let mut jobs: BTreeMap<String, JobView> = BTreeMap::new();
    fn view<'a>(jobs: &'a mut BTreeMap<String, JobView>, name: &str) -> &'a mut JobView {
        jobs.entry(name.to_string()).or_insert_with(|| JobView {
            job: name.to_string(),
            armed_by: Vec::new(),
            paused_on: Vec::new(),
            refused_on: Vec::new(),
            definitions: BTreeMap::new(),
            declared_live: false,
            declarer_live: false,
        })
    }
    for h in hosts.iter().filter(|h| !h.silent) {
        for (name, jb) in &h.beat.jobs {
            let v = view(&mut jobs, name);
            if jb.armed {
                v.armed_by.push(h.label.clone());
                v.definitions
                    .entry(jb.definition.clone())
                    .or_default()
                    .push(h.label.clone());
            } else {
                v.paused_on.push(h.label.clone());
            }
        }
        for name in &h.beat.refused {
            view(&mut jobs, name).refused_on.push(h.label.clone());
        }
    }
    for d in declared {
        if d.seen_at.saturating_add(d.horizon) >= now {
            let declarer_live = hosts
                .iter()
                .any(|h| !h.silent && format!("{} {}", h.beat.host, h.beat.machine_id) == d.host);
            let v = view(&mut jobs, &d.job);
            v.declared_live = true;
            v.declarer_live = declarer_live;
        }
    }
    Fleet {
        hosts,
        jobs: jobs.into_values().collect(),
        superseded: old.into_iter().collect(),
        unreadable,
        now,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: i64 = 60_000_000;
    const T0: i64 = 1_800_000_000_000_000;

    fn beat(host: &str, machine: &str, boot: &str, boot_usec: i64, seen_at: i64) -> Beat {
        Beat {
            host: host.into(),
            machine_id: machine.into(),
            boot_id: boot.into(),
            boot_usec,
            version: "1.0.0".into(),
            seen_at,
            jobs: BTreeMap::new(),
            list_errors: 0,
            refused: Vec::new(),
        }
    }

    fn with_job(mut b: Beat, job: &str, armed: bool, definition: &str) -> Beat {
        b.jobs.insert(
            job.into(),
            JobBeat {
                armed,
                definition: definition.into(),
            },
        );
        b
    }

    fn raw(beats: &[Beat]) -> Vec<(String, String)> {
        beats.iter().map(|b| (b.key(), b.to_json())).collect()
    }

    #[test]
    fn a_beat_comes_back_from_its_json() {
        let b = with_job(
            beat("web1", "a1b2c3d4e5", "b1", T0, T0),
            "sync",
            true,
            "00ff",
        );
        assert_eq!(Beat::from_json(&b.key(), &b.to_json()).unwrap(), b);
        assert!(Beat::from_json("k", "{").unwrap_err().contains("\"k\""));
        assert_eq!(b.label(), "web1 (a1b2c3d4)");
    }

    #[test]
    fn a_host_is_silent_five_passes_after_its_last_beat() {
        let f = judge(raw(&[beat("a", "m1", "b", T0, T0)]), &[], T0 + 5 * MIN);
        assert!(!f.hosts[0].silent && !f.needs_attention());
        let f = judge(raw(&[beat("a", "m1", "b", T0, T0)]), &[], T0 + 5 * MIN + 1);
        assert!(f.hosts[0].silent && f.needs_attention());
    }

    #[test]
    fn an_earlier_boot_is_superseded_and_a_copy_of_the_machine_is_not() {
        let old = beat("a", "m1", "boot1", T0, T0 + 10 * MIN);
        let new = beat("a", "m1", "boot2", T0 + 20 * MIN, T0 + 30 * MIN);
        let f = judge(raw(&[old.clone(), new.clone()]), &[], T0 + 31 * MIN);
        assert_eq!(f.superseded, vec![old.key()]);
        assert_eq!(f.hosts.len(), 1);
        assert!(!f.needs_attention());
        // A machine made from the same image beats on after the other's boot began.
        let copy = beat("a", "m1", "boot3", T0 + 21 * MIN, T0 + 30 * MIN);
        let f = judge(raw(&[new, copy]), &[], T0 + 31 * MIN);
        assert!(f.superseded.is_empty());
        assert!(f.hosts.iter().all(|h| h.shared_machine_id), "{f:?}");
        assert!(f.needs_attention());
        // Renamed within a boot: the beat under the old name is superseded.
        let renamed = beat("b", "m1", "boot2", T0 + 20 * MIN, T0 + 31 * MIN);
        let f = judge(raw(&[new_again(), renamed.clone()]), &[], T0 + 31 * MIN);
        assert_eq!(f.hosts.len(), 1, "{f:?}");
        assert_eq!(f.hosts[0].label, renamed.label());
    }

    fn new_again() -> Beat {
        beat("a", "m1", "boot2", T0 + 20 * MIN, T0 + 30 * MIN)
    }

    #[test]
    fn jobs_are_judged_across_the_live_hosts() {
        let now = T0 + MIN;
        let a = with_job(beat("a", "m1", "b", T0, now), "sync", true, "d1");
        let b = with_job(beat("b", "m2", "b", T0, now), "sync", true, "d1");
        let f = judge(raw(&[a.clone(), b.clone()]), &[], now);
        assert_eq!(f.jobs[0].armed_by, vec!["a (m1)", "b (m2)"]);
        assert!(!f.needs_attention());
        // Another definition on b.
        let b2 = with_job(beat("b", "m2", "b", T0, now), "sync", true, "d2");
        let f = judge(raw(&[a.clone(), b2]), &[], now);
        let p = f.jobs[0].problem().unwrap();
        assert!(
            p.contains("d1 on a (m1)") && p.contains("d2 on b (m2)"),
            "{p}"
        );
        // A paused host's definition does not count.
        let b3 = with_job(beat("b", "m2", "b", T0, now), "sync", false, "d2");
        let f = judge(raw(&[a.clone(), b3]), &[], now);
        assert_eq!(f.jobs[0].problem(), None);
        assert_eq!(f.jobs[0].paused_on, vec!["b (m2)"]);
        // Refused on b.
        let mut b4 = beat("b", "m2", "b", T0, now);
        b4.refused = vec!["sync".into()];
        b4.list_errors = 1;
        let f = judge(raw(&[a, b4]), &[], now);
        assert!(f.jobs[0].problem().unwrap().contains("refused"));
        assert!(f.needs_attention());
    }

    #[test]
    fn a_live_schedule_that_no_live_host_arms_is_a_problem() {
        let now = T0 + 30 * MIN;
        let decl = |seen_at: i64| ScheduleDecl {
            job: "sync".into(),
            fingerprint: "*-*-* 02:00:00 UTC".into(),
            defined_at: T0,
            host: "a m1".into(),
            seen_at,
            horizon: 20 * MIN,
        };
        // The only host that armed it went silent.
        let a = with_job(beat("a", "m1", "b", T0, T0), "sync", true, "d1");
        let f = judge(raw(&[a]), &[decl(now - MIN)], now);
        assert!(f.jobs[0].problem().unwrap().contains("no live host arms"));
        // The schedule is past its horizon: removed everywhere on purpose.
        let f = judge(Vec::new(), &[decl(now - 21 * MIN)], now);
        assert!(f.jobs.is_empty());
        // The host that declared it lives on without it: taken out of its list.
        let a = beat("a", "m1", "b", T0, now);
        let f = judge(raw(&[a]), &[decl(now - MIN)], now);
        assert_eq!(f.jobs[0].problem(), None, "{f:?}");
        assert!(unarmed(&f).is_empty());
        // Another host lives, the declaring one is gone.
        let b = beat("b", "m2", "b", T0, now);
        let f = judge(raw(&[b]), &[decl(now - MIN)], now);
        assert_eq!(unarmed(&f).len(), 1, "{f:?}");
    }

    #[test]
    fn a_jobs_pause_windows_are_no_host_and_no_unreadable_heartbeat() {
        let mut r = raw(&[beat("a", "m1", "b", T0, T0)]);
        r.push((
            crate::ops::pause::key("sync"),
            r#"{"windows":[{"since":1,"until":null,"by":"root@a"}]}"#.into(),
        ));
        let f = judge(r, &[], T0 + MIN);
        assert_eq!(f.hosts.len(), 1, "{f:?}");
        assert!(f.unreadable.is_empty(), "{f:?}");
    }
}

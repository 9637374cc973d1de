//! Stores: where leases and the run ledger live, behind one trait.
//!
//! The embedded default is SQLite ([`sqlite`]); shared stores for several hosts
//! (PostgreSQL, MySQL/MariaDB, Redis, etcd, ZooKeeper) implement the same
//! [`Store`] trait, each in its own file behind a cargo feature.
//!
//! The trait is shaped around *atomic decisions* rather than rows, so that a key-value
//! store with server-side leases fits as well as SQL: [`Store::claim`] checks the slot,
//! takes the lease and records the start in one step (one round trip where the engine
//! allows), and every later write is conditional on the lease's holder and fencing token.
//! All times are µs since the Unix epoch by the store's clock.

use std::time::Duration;

use crate::guard::lease::{Holder, Lease};
use crate::guard::ledger::{Finish, NewRun, Outcome, Resolution, Run};

pub mod address;
mod engine;
#[cfg(feature = "store-etcd")]
pub mod etcd;
#[cfg(feature = "store-mysql")]
pub mod mysql;
#[cfg(feature = "store-postgres")]
pub mod postgres;
#[cfg(feature = "store-redis")]
pub mod redis;
pub mod registry;
#[cfg(any(
    feature = "store-postgres",
    feature = "store-mysql",
    feature = "store-redis",
    feature = "store-etcd",
    feature = "store-zookeeper"
))]
pub mod remote;
pub mod rules;
#[cfg(feature = "store-sqlite")]
pub mod sqlite;
#[cfg(feature = "store-zookeeper")]
pub mod zookeeper;

use std::sync::Arc;

use crate::guard::clock::{Clock, SystemClock};
use address::StoreAddress;

/// For tests of races on a real store: runs `f` once, in this thread, when this thread's
/// next claim, renewal, end, unlock or resolve has read and decided and is about to
/// commit (before every backend's conditional write: `src/store/engine.rs`). What `f`
/// writes to the store through another connection is then what the commit must find
/// changed. Setting another `f` drops the one not yet run.
#[doc(hidden)]
pub fn before_next_commit(f: Option<Box<dyn FnOnce()>>) {
    engine::set_before_commit(f);
}

/// Opens the store at `address` with the system clock. Nothing is written until the
/// first operation (which creates or migrates the schema).
///
/// # Errors
/// [`StoreError::Address`] for a malformed address or a kind this build does not contain
/// (the message lists what it supports); otherwise as the backend's open.
pub fn open(address: &str) -> Result<Box<dyn Store>, StoreError> {
    open_with_clock(address, Arc::new(SystemClock))
}

/// Opens the store at `address`; stores without a clock of their own (SQLite, which is on
/// this host, and etcd) read time from `clock`. For tests that move time. PostgreSQL,
/// MySQL/MariaDB, Redis and ZooKeeper ignore `clock`: their server's clock judges every
/// lease.
///
/// # Errors
/// As [`open`].
pub fn open_with_clock(address: &str, clock: Arc<dyn Clock>) -> Result<Box<dyn Store>, StoreError> {
    match StoreAddress::parse(address)? {
        #[cfg(feature = "store-sqlite")]
        StoreAddress::SqliteFile(path) => Ok(Box::new(sqlite::SqliteStore::open_with(
            &path,
            clock,
            &sqlite::SqliteOptions::default(),
        )?)),
        #[cfg(feature = "store-sqlite")]
        StoreAddress::SqliteMemory => Ok(Box::new(sqlite::SqliteStore::open_in_memory(clock)?)),
        #[cfg(not(feature = "store-sqlite"))]
        StoreAddress::SqliteFile(_) | StoreAddress::SqliteMemory => {
            let _ = clock;
            Err(not_built(address, "sqlite"))
        }
        StoreAddress::Shared { kind, address: a } => match opener(kind.name) {
            Some(open) => open(&a, clock),
            None => Err(not_built(address, kind.name)),
        },
        StoreAddress::NotBuilt { scheme } => Err(not_built(address, &scheme)),
    }
}

/// Opens a store of one kind: the address as written, and the clock that stores without a
/// clock of their own read "now" from ([`open_with_clock`]).
type Opener = fn(&str, Arc<dyn Clock>) -> Result<Box<dyn Store>, StoreError>;

/// How a shared kind ([`registry::StoreKind::name`]) is opened: its backend's
/// `open_boxed`, when this build contains it. Only [`open_with_clock`] reaches a backend,
/// so a binary that never opens a store (the generator) links none.
fn opener(kind: &str) -> Option<Opener> {
    match kind {
        #[cfg(feature = "store-postgres")]
        "postgres" => Some(postgres::open_boxed),
        #[cfg(feature = "store-mysql")]
        "mysql" => Some(mysql::open_boxed),
        #[cfg(feature = "store-redis")]
        "redis" => Some(redis::open_boxed),
        #[cfg(feature = "store-etcd")]
        "etcd" => Some(etcd::open_boxed),
        #[cfg(feature = "store-zookeeper")]
        "zookeeper" => Some(zookeeper::open_boxed),
        _ => None,
    }
}

fn not_built(address: &str, scheme: &str) -> StoreError {
    StoreError::Address {
        address: address::mask(address),
        detail: registry::unavailable(scheme)
            .unwrap_or_else(|| format!("store kind {scheme:?} is not built into this jobguard")),
    }
}

/// A store failure. Contention is never an error: see [`Claim`].
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// The store could not be reached or answered with an I/O error; worth retrying.
    #[error("store {store} unavailable: {detail}")]
    Unavailable {
        /// [`Store::describe`] of the store.
        store: String,
        /// What failed.
        detail: String,
    },
    /// The address is malformed or names an unknown kind of store.
    #[error("bad store address {address:?}: {detail}")]
    Address {
        /// The address, with any password masked.
        address: String,
        /// What is wrong.
        detail: String,
    },
    /// The store's file, or a directory above it, could be changed by someone other than
    /// root while jobguard runs as root ([`crate::safe_path`]); nothing was opened.
    #[error("store {store} refused: {detail}")]
    Unsafe {
        /// [`Store::describe`] of the store.
        store: String,
        /// Which path, and why.
        detail: String,
    },
    /// The store answered, but with something jobguard cannot use (schema too new, bad row).
    #[error("store {store}: {detail}")]
    Invalid {
        /// [`Store::describe`] of the store.
        store: String,
        /// What is wrong.
        detail: String,
    },
}

impl StoreError {
    /// The refusal of a store whose schema (or key layout) version `found` is newer than
    /// `known`, the one this jobguard writes: [`StoreError::Invalid`], naming both.
    pub(crate) fn newer_schema(store: &str, found: i64, known: i64) -> StoreError {
        StoreError::Invalid {
            store: store.to_string(),
            detail: format!(
                "schema version {found} is newer than this jobguard knows ({known}); upgrade jobguard"
            ),
        }
    }
}

impl crate::exit::Status for StoreError {
    /// The one exit status every command gives for this error (docs/commands.md, "Exit statuses"):
    /// 69 (`EX_UNAVAILABLE`) for a store that could not be reached, 78 (`EX_CONFIG`) for a
    /// bad or unsafe address, 70 (`EX_SOFTWARE`) for a store that answered with something
    /// jobguard cannot use.
    fn exit_status(&self) -> u8 {
        match self {
            StoreError::Unavailable { .. } => crate::exit::STORE_UNAVAILABLE,
            StoreError::Address { .. } | StoreError::Unsafe { .. } => crate::exit::CONFIG,
            StoreError::Invalid { .. } => crate::exit::SOFTWARE,
        }
    }
}

/// What the shim asks of [`Store::claim`].
#[derive(Debug, Clone)]
pub struct ClaimRequest {
    /// The record to create when the claim succeeds.
    pub run: NewRun,
    /// Who asks.
    pub holder: Holder,
    /// Lease time to live.
    pub ttl: Duration,
    /// Compare the asking host's clock with the store's before anything else; `None`:
    /// no check.
    pub clock: Option<ClockCheck>,
    /// Run queued re-runs first: when the job has a slot whose interrupted attempt was
    /// queued for a re-run ([`Resolution::Queued`]) and that is neither done nor held, claim
    /// the oldest such slot (with its zone, trigger `rerun`) instead of `run.slot`.
    pub queued_first: bool,
    /// Refuse `run.slot` with [`Claim::SlotBehind`] when the ledger holds a later slot of
    /// the job (one no later than the store's clock plus the [`ClockCheck`] tolerance:
    /// slots further ahead were forced or recorded by a clock that was ahead, and do not
    /// hold back later slots).
    pub in_order: bool,
}

impl ClaimRequest {
    /// A request for exactly `run.slot`: no clock check, no queued re-runs, no order check.
    pub fn new(run: NewRun, holder: Holder, ttl: Duration) -> Self {
        ClaimRequest {
            run,
            holder,
            ttl,
            clock: None,
            queued_first: false,
            in_order: false,
        }
    }
}

/// The asking host's clock, for [`ClaimRequest::clock`]: the store answers
/// [`Claim::ClockSkew`] when its own clock differs from `host_now` by more than
/// `tolerance`. Both in µs (since the Unix epoch, and a span).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClockCheck {
    /// The host's clock when the request was made, µs since the Unix epoch.
    pub host_now: i64,
    /// The largest difference accepted, µs (`clock_tolerance`).
    pub tolerance: i64,
}

/// The decision of [`Store::claim`]. Only [`Claim::Claimed`] lets the command run.
#[derive(Debug, Clone)]
pub enum Claim {
    /// Lease granted and `running` recorded; run the command.
    Claimed {
        /// The grant, with its fencing token.
        lease: Lease,
        /// The new `running` record; its slot is a queued one when
        /// [`ClaimRequest::queued_first`] found one.
        run: Run,
        /// The job's latest slot recorded before this claim, µs since the epoch (no
        /// later than the store's clock plus the clock tolerance): with the claimed slot it
        /// bounds the slots that never ran.
        previous_slot: Option<i64>,
    },
    /// The host's clock differs from the store's by more than the tolerance
    /// ([`ClaimRequest::clock`]); nothing was written.
    ClockSkew {
        /// The store's clock, µs since the epoch.
        store_now: i64,
    },
    /// `run.slot` is older than a slot the ledger already holds for the job
    /// ([`ClaimRequest::in_order`]); nothing was written.
    SlotBehind {
        /// The latest recorded slot, µs since the epoch.
        newest: i64,
    },
    /// The slot is done (a record succeeded, or a person resolved it as done) and the
    /// request was not forced.
    SlotDone {
        /// The record that made it done.
        by: Run,
    },
    /// An earlier attempt at the slot is held for a person (`on_interrupted = "hold"`).
    SlotHeld {
        /// The held record.
        by: Run,
    },
    /// Another holder's lease has not expired, or lapsed less than
    /// [`rules::FOREIGN_GRACE_USEC`] ago while its holder, on another machine, still has
    /// the asked slot `running`; or `run`, an attempt at the slot from another machine,
    /// is still `running` under an earlier lease (`lease` is the job's lease row).
    Busy {
        /// The lease that is in the way.
        lease: Lease,
        /// Its current run, if the store knows it.
        run: Option<Run>,
    },
}

/// Every job of a store's `jobguard_run`, as a subquery with one column `job`, in SQL both
/// SQLite and PostgreSQL take: one search of an index led by `job` per job (the next name
/// after the last, a recursive common table expression). `SELECT DISTINCT job` read every
/// entry of the index: 42 ms of 1,000,000 records on PostgreSQL.
#[cfg(any(feature = "store-sqlite", feature = "store-postgres"))]
pub(crate) const EVERY_JOB: &str = "(WITH RECURSIVE d(job) AS (
       SELECT min(job) FROM jobguard_run
       UNION ALL
       SELECT (SELECT min(job) FROM jobguard_run WHERE job > d.job) FROM d
        WHERE d.job IS NOT NULL)
     SELECT job FROM d WHERE job IS NOT NULL)";

/// What [`Store::finish`] managed to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Finished {
    /// The record was updated (it was still `running` with our fencing token, and for
    /// outcomes other than `lease_lost`, the lease was still ours and unexpired).
    pub recorded: bool,
    /// The lease was released (it was still ours and unexpired).
    pub released: bool,
}

/// The schedule a host runs a job by, as it declares it to the store
/// ([`Store::declare_schedule`]): during a rolling change of the job list, hosts can run
/// one job by different schedules, and each would run "its" slots.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduleDecl {
    /// The job.
    pub job: String,
    /// What decides the job's slots: the schedule's normalized form (as
    /// `systemd-analyze calendar` prints it) and the zone its times are in
    /// ([`crate::joblist::job::Job::schedule_fingerprint`]).
    pub fingerprint: String,
    /// When the declaring host's definition was written: the modification time of the
    /// file that states the job's schedule, µs since the Unix epoch.
    pub defined_at: i64,
    /// The declaring host: its name and machine id (`/etc/machine-id`), `HOST ID`. A
    /// host's declaration replaces its own earlier one whatever their times.
    pub host: String,
    /// When a host of this schedule last declared it, µs since the epoch by that host's
    /// clock: the hosts that run by a schedule refresh it as they fire.
    pub seen_at: i64,
    /// How long, µs, the schedule holds without a refresh before a host with another one
    /// takes the job over ([`crate::joblist::job::Job::schedule_horizon`]): twice the longest gap
    /// between its elapses, at least 10 minutes.
    pub horizon: i64,
}

/// A dedupe record ([`Store::mark`]): `key` in `namespace` was recorded once, by whom and
/// when. The seed's "already pushed" record and dedupe table, kept in the job's store so
/// that every host sees it. Its retention is the job's ([`Store::delete_marks`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mark {
    /// What kind of key this is, e.g. `shipping` ([`crate::guard::mark::check_namespace`]).
    pub namespace: String,
    /// The key itself, e.g. an order id ([`crate::guard::mark::check_key`]).
    pub key: String,
    /// The job whose store holds the mark and whose retention applies.
    pub job: String,
    /// The run that marked it; empty outside a run.
    pub run_id: String,
    /// The marking host, `HOST ID` as in a record's `host`.
    pub host: String,
    /// The run's fencing token; 0 outside a run.
    pub token: i64,
    /// When it was recorded, µs since the Unix epoch by the store's clock.
    pub marked_at: i64,
}

/// The answer of [`Store::mark`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Marking {
    /// The key was not recorded; it is now, as this.
    New(Mark),
    /// The key was recorded already, as this; nothing was written.
    Already(Mark),
    /// The mark was fenced ([`Store::mark`] with `fenced`): the job's lease no longer
    /// carries the mark's token (taken over, released or expired); nothing was written.
    /// The job's lease, if held (a released row is none).
    Fenced(Option<Lease>),
}

/// Which records [`Store::runs`] returns, newest first.
#[derive(Debug, Clone, Default)]
pub struct RunQuery {
    /// Only this job.
    pub job: Option<String>,
    /// Only this slot (µs since the epoch); needs `job`.
    pub slot: Option<i64>,
    /// Only the records a check of the slots from this one on (µs since the epoch) needs:
    /// those of the slots at or after it, and per job a few before it ([`rules::window`]
    /// says which, and why). `audit --since` reads this instead of a job's whole history.
    pub slots_from: Option<i64>,
    /// Only records in one of these states (empty: all).
    pub outcomes: Vec<Outcome>,
    /// Only records with one of these resolutions (empty: any, including none).
    pub resolutions: Vec<Resolution>,
    /// At most this many (0: no limit).
    pub limit: usize,
}

/// Leases and ledger in one store. Methods take `&mut self`: a store is one connection.
/// `Send`: the shim renews the lease from a thread of its own while the command runs.
pub trait Store: Send {
    /// The address for messages, with secrets masked.
    fn describe(&self) -> String;

    /// Lets go of what this store holds on its server between calls (a connection, a
    /// session), so that a running job costs the server nothing until its next call,
    /// which connects again. The shim's renewal thread ([`crate::shim::renew`]) calls it
    /// as the command starts and after each renewal: a fleet's running jobs are then not
    /// capped by the server's connection limit. Nothing a store keeps for a job lives in a
    /// connection or a session, so nothing is lost. Default: nothing to let go (SQLite's
    /// open file is no server's resource; etcd limits no connections, and a new channel
    /// would cost an `Authenticate`, a write through its Raft log, at every renewal).
    fn rest(&mut self) {}

    /// Creates the schema or migrates it to the current version. Idempotent; also done
    /// implicitly on first use.
    ///
    /// # Errors
    /// [`StoreError::Invalid`] if the schema is newer than this jobguard knows.
    fn init(&mut self) -> Result<(), StoreError>;

    /// The store's clock, µs since the Unix epoch.
    fn now(&mut self) -> Result<i64, StoreError>;

    /// In one atomic step, and one round trip on the shared stores, in this order:
    /// 1. with `req.clock`, answer [`Claim::ClockSkew`] if the store's clock and the host's
    ///    differ by more than the tolerance;
    /// 2. with `req.queued_first`, pick the oldest queued slot that is not done or held
    ///    instead of `req.run.slot`;
    /// 3. unless `req.run.forced`, answer [`Claim::SlotDone`] if the slot is done and
    ///    [`Claim::SlotHeld`] if an attempt at it is held;
    /// 4. with `req.in_order`, answer [`Claim::SlotBehind`] if a later slot is recorded;
    /// 5. answer [`Claim::Busy`] if another holder's lease is unexpired (by the store's
    ///    clock), or lapsed less than [`rules::FOREIGN_GRACE_USEC`] ago while the slot's
    ///    record under it, made on another machine than `req.holder`'s, is `running`, or
    ///    if the slot has a `running` record from another machine under an earlier lease
    ///    (until `jobguard recover` marks it);
    /// 6. else grant the lease with a fencing token larger than every earlier one for the
    ///    job, insert a `running` record (attempt = earlier attempts at the slot + 1) and
    ///    mark queued or held earlier attempts of the slot as [`Resolution::Rerun`]; with
    ///    `req.queued_first`, also the queued records of every slot that is done (even
    ///    when an attempt at it is held: nothing is left to re-run).
    ///
    /// A claim sent again with the same `req.run.run_id` (its first answer was lost, e.g.
    /// to a time-out after the store committed) answers the first grant again, with
    /// `previous_slot` `None`, while that record is still `running` under the job's
    /// unexpired lease with the same holder and token; otherwise it answers
    /// [`StoreError::Invalid`] and leaves that record as it is. Either way there is never a
    /// second record under one run id.
    fn claim(&mut self, req: &ClaimRequest) -> Result<Claim, StoreError>;

    /// Extends the lease to store-now + `ttl` and writes the renewal generation `next`
    /// ([`crate::guard::lease::next_renewal`]) if it is still held by `lease.holder` with
    /// `lease.token`, has not expired, and its generation is `lease.renewal` or `next`
    /// (this renewal sent again): [`rules::renew`]. Returns the new `expire_at` (µs since
    /// the epoch, store clock), or `None` when the lease is lost; the caller then uses
    /// `next` as its `lease.renewal`.
    fn renew(&mut self, lease: &Lease, next: i64, ttl: Duration)
    -> Result<Option<i64>, StoreError>;

    /// Records how run `run_id` ended and releases the lease, both conditional on the
    /// fencing token: see [`Finished`]. `finished_at` is the store's clock.
    fn finish(
        &mut self,
        lease: &Lease,
        run_id: &str,
        finish: &Finish,
    ) -> Result<Finished, StoreError> {
        self.finish_as(lease, run_id, finish, false)
    }

    /// Records how run `run_id` ended when its shim could not (the store was unavailable
    /// or full at the end of the run) and kept the outcome on its host instead: as
    /// [`Store::finish`], except that the lease need not be held any more, and
    /// `finished_at` is the command's own end ([`Finish::ended_at`], kept within the
    /// record's start and [`rules::cut_end`]). The record must still be `running` with
    /// `lease.token`, so an attempt that was since marked interrupted is left as it is
    /// (`recorded` false), and no copy of the holder may hold the lease (same holder and
    /// token, unexpired, another renewal generation: [`rules::finish`]). The lease is
    /// released if `lease` still holds it. The caller checks that no other attempt at the
    /// slot runs or succeeded (see [`crate::shim::pending`]).
    fn finish_kept(
        &mut self,
        lease: &Lease,
        run_id: &str,
        finish: &Finish,
    ) -> Result<Finished, StoreError> {
        self.finish_as(lease, run_id, finish, true)
    }

    /// What a backend implements for both [`Store::finish`] (`kept` false) and
    /// [`Store::finish_kept`] (`kept` true): [`rules::finish`] decided on the job's lease
    /// row, the record and its slot's records as the store holds them, in one atomic step.
    ///
    /// # Errors
    /// [`StoreError::Invalid`] for an outcome that is not an end state or would be the
    /// slot's second non-forced success ([`rules::RuleError`]); the store's own errors.
    fn finish_as(
        &mut self,
        lease: &Lease,
        run_id: &str,
        finish: &Finish,
        kept: bool,
    ) -> Result<Finished, StoreError>;

    /// Marks a `running` record whose holder is gone as `interrupted` with `reason` and
    /// `resolution`, and releases the job's lease if it is still the run's grant (same
    /// holder and token). Returns false if the record was no longer `running`. Its
    /// `finished_at` is [`rules::cut_end`]: the latest the run can have run, not the time
    /// it was found cut.
    fn interrupt(
        &mut self,
        run: &Run,
        reason: &str,
        resolution: Resolution,
    ) -> Result<bool, StoreError>;

    /// The job's lease row, expired or not; `None` if never granted or released.
    fn lease(&mut self, job: &str) -> Result<Option<Lease>, StoreError>;

    /// Records matching `query`, newest first (by `started_at`).
    fn runs(&mut self, query: &RunQuery) -> Result<Vec<Run>, StoreError>;

    /// The names of the jobs the store holds records of, sorted: for a command that reads
    /// every job's records (`audit`) one job at a time, so that each read has the deadline
    /// of one call and memory holds one job's records. The SQL stores search their index
    /// once per job and ZooKeeper lists its job nodes; the default (Redis, etcd) reads
    /// every record.
    ///
    /// # Errors
    /// As [`Store::runs`].
    fn jobs(&mut self) -> Result<Vec<String>, StoreError> {
        let mut jobs: Vec<String> = self
            .runs(&RunQuery::default())?
            .into_iter()
            .map(|r| r.job)
            .collect();
        jobs.sort();
        jobs.dedup();
        Ok(jobs)
    }

    /// How many records of `job` the store holds, by outcome (outcomes with none are left
    /// out), over the whole ledger. The SQL stores count in one query; the default reads
    /// every record of the job.
    ///
    /// # Errors
    /// As [`Store::runs`].
    fn outcome_counts(&mut self, job: &str) -> Result<Vec<(Outcome, u64)>, StoreError> {
        let runs = self.runs(&RunQuery {
            job: Some(job.to_string()),
            ..RunQuery::default()
        })?;
        let mut counts: Vec<(Outcome, u64)> = Vec::new();
        for r in runs {
            match counts.iter_mut().find(|(o, _)| *o == r.outcome) {
                Some((_, n)) => *n += 1,
                None => counts.push((r.outcome, 1)),
            }
        }
        Ok(counts)
    }

    /// Sets the resolution of the slot's `interrupted`, `lease_lost` and `failed` records
    /// that are not yet resolved as `rerun` or `done`; returns how many changed. A slot that
    /// is done (a record succeeded or is resolved as done) gets no [`Resolution::Queued`]:
    /// 0 changed, nothing is left to re-run.
    fn resolve(
        &mut self,
        job: &str,
        slot: i64,
        resolution: Resolution,
    ) -> Result<usize, StoreError>;

    /// Declares the schedule this host runs `decl.job` by, and answers the schedule the
    /// job runs by, as the store holds it after the declaration. The rule is
    /// [`rules::declare_schedule`]: the newest definition wins while its hosts keep
    /// declaring it, and a host's declaration replaces its own earlier one. A host whose
    /// fingerprint is not the answer's runs no slot by its own schedule (the shim skips
    /// with `schedule-differs`).
    ///
    /// Built on [`Store::read_schedule`] and [`Store::swap_schedule`]: read, decide,
    /// swap if unchanged, at most [`rules::SCHEDULE_TRIES`] times.
    ///
    /// # Errors
    /// As the two primitives; [`StoreError::Unavailable`] when the record kept changing.
    fn declare_schedule(&mut self, decl: &ScheduleDecl) -> Result<ScheduleDecl, StoreError> {
        for _ in 0..rules::SCHEDULE_TRIES {
            let current = self.read_schedule(&decl.job)?;
            let Some(write) = rules::declare_schedule(current.as_ref(), decl) else {
                return Ok(current.unwrap_or_else(|| decl.clone()));
            };
            if self.swap_schedule(current.as_ref(), &write)? {
                return Ok(write);
            }
        }
        Err(StoreError::Unavailable {
            store: self.describe(),
            detail: format!(
                "declare the schedule of {}: the record changed under {} attempts in a row",
                decl.job,
                rules::SCHEDULE_TRIES
            ),
        })
    }

    /// The schedule the store holds for `job` ([`Store::declare_schedule`]); `None` when
    /// no host has declared one (or the store predates declarations).
    fn read_schedule(&mut self, job: &str) -> Result<Option<ScheduleDecl>, StoreError>;

    /// Replaces the schedule held for `new.job` with `new` if it is still `expected`
    /// (`None`: none held), atomically; false when it was not.
    fn swap_schedule(
        &mut self,
        expected: Option<&ScheduleDecl>,
        new: &ScheduleDecl,
    ) -> Result<bool, StoreError>;

    /// Writes a fleet record `beat` (JSON) under `host`, replacing the earlier one of that
    /// key: a host's heartbeat ([`crate::ops::fleet::Beat`], under [`crate::ops::fleet::Beat::key`])
    /// or a job's pause windows ([`crate::ops::pause`], under [`crate::ops::pause::key`]). The
    /// store keeps it as given and decides nothing: [`crate::ops::fleet::judge`] and
    /// [`crate::ops::pause`] do. The table or keyspace is made on first use, like the
    /// schedule's.
    ///
    /// # Errors
    /// The store's.
    fn put_beat(&mut self, host: &str, beat: &str) -> Result<(), StoreError>;

    /// The fleet record kept under `key` ([`Store::put_beat`]); `None` when there is none
    /// (or no record was ever written). One round trip.
    ///
    /// # Errors
    /// The store's.
    fn read_beat(&mut self, key: &str) -> Result<Option<String>, StoreError>;

    /// Every fleet record the store holds, `(key, record)`, in no order; none before the
    /// first. Heartbeats and pause windows alike: readers tell them by key
    /// ([`crate::ops::pause::is_key`]).
    ///
    /// # Errors
    /// The store's.
    fn beats(&mut self) -> Result<Vec<(String, String)>, StoreError>;

    /// Deletes the heartbeats of `hosts`; one that is not there is no error.
    ///
    /// # Errors
    /// The store's.
    fn forget_beats(&mut self, hosts: &[String]) -> Result<(), StoreError>;

    /// Records `new.key` in `new.namespace` once (its `marked_at` is replaced by the
    /// store's clock). With `fenced`, only while the lease of `new.job` still carries
    /// `new.token` and has not expired ([`rules::mark`]): a run whose lease was taken over
    /// cannot record that it did something, so the holder that took over does not skip it.
    ///
    /// Built on [`Store::read_mark`] and [`Store::insert_mark`]: read, decide, insert if the
    /// key is still absent and the lease still the run's, at most [`rules::SCHEDULE_TRIES`]
    /// times.
    ///
    /// # Errors
    /// As the primitives; [`StoreError::Unavailable`] when the lease or the key kept
    /// changing.
    fn mark(&mut self, new: &Mark, fenced: bool) -> Result<Marking, StoreError> {
        // The marks this call sent: an insert whose answer was lost and that a store's
        // client sent again (a new ZooKeeper session) finds its own mark, which is this
        // call's, not an earlier one's.
        let mut sent: Vec<Mark> = Vec::new();
        for _ in 0..rules::SCHEDULE_TRIES {
            let now = self.now()?;
            let lease = if fenced { self.lease(&new.job)? } else { None };
            let existing = self.read_mark(&new.namespace, &new.key)?;
            if let Some(m) = existing.as_ref().filter(|m| sent.contains(m)) {
                return Ok(Marking::New(m.clone()));
            }
            match rules::mark(now, lease.as_ref(), existing, new, fenced) {
                rules::MarkStep::Answer(answer) => return Ok(answer),
                rules::MarkStep::Insert(mark) => {
                    if self.insert_mark(&mark, fenced)? {
                        return Ok(Marking::New(mark));
                    }
                    sent.push(mark);
                }
            }
        }
        Err(StoreError::Unavailable {
            store: self.describe(),
            detail: format!(
                "mark {} {}: the lease or the key changed under {} attempts in a row",
                new.namespace,
                new.key,
                rules::SCHEDULE_TRIES
            ),
        })
    }

    /// The mark of `key` in `namespace`, if recorded.
    ///
    /// # Errors
    /// The store's.
    fn read_mark(&mut self, namespace: &str, key: &str) -> Result<Option<Mark>, StoreError>;

    /// Inserts `mark` in one atomic step if its key is not recorded and, with `fenced`,
    /// the lease row of `mark.job` still has a holder and `mark.token` and has not expired
    /// by the store's clock ([`rules::mark_fence_holds`] on the row as read, and the write
    /// applied only before [`rules::fence_deadline`] by the store's clock and while the
    /// row is unchanged: a run frozen after its read records nothing once its lease
    /// ended); false otherwise, nothing written (also when the row changed meanwhile, a
    /// renewal say: [`Store::mark`] reads and decides again). The mark's table or keyspace
    /// is made on first use, like the schedule's.
    ///
    /// # Errors
    /// The store's.
    fn insert_mark(&mut self, mark: &Mark, fenced: bool) -> Result<bool, StoreError>;

    /// Deletes the marks of `job` recorded before `before` (µs since the epoch, store
    /// clock); returns how many (retention: [`crate::ops::retention::prune_job`]).
    ///
    /// # Errors
    /// The store's.
    fn delete_marks(&mut self, job: &str, before: i64) -> Result<usize, StoreError>;

    /// How many marks [`Store::delete_marks`] would delete with the same arguments, deleting
    /// none (`jobguard prune --dry-run`). A store that deletes marks by whole days (etcd,
    /// ZooKeeper: its index is by day) counts by the same days.
    ///
    /// # Errors
    /// The store's.
    fn count_marks(&mut self, job: &str, before: i64) -> Result<usize, StoreError>;

    /// Operator override: ends the job's lease now whoever holds it. Returns the lease
    /// that was ended, if one was unexpired.
    fn unlock(&mut self, job: &str) -> Result<Option<Lease>, StoreError>;

    /// Deletes every record of each of `slots` (µs since the epoch) of `job`, but only of
    /// a slot none of whose records is `running` or started at or after `started_before`
    /// (µs, store clock), judged in the same atomic step as the delete, so a claim that
    /// adds an attempt meanwhile keeps its slot whole (retention: [`crate::ops::retention`]
    /// chooses the slots). Returns how many records were deleted. Leases and
    /// fencing-token counters are never deleted.
    fn delete_slots(
        &mut self,
        job: &str,
        slots: &[i64],
        started_before: i64,
    ) -> Result<usize, StoreError>;
}

/// Makes ring the process's rustls crypto provider, once, before any store speaks TLS.
///
/// rustls chooses a provider from its cargo features only when exactly one is built in;
/// the ZooKeeper client's rustls brings aws-lc-rs beside the ring of the other stores,
/// and then a client that asks rustls for the default (the Redis client, the ZooKeeper
/// client) panics ("Could not automatically determine the process-level CryptoProvider").
/// Every remote store's `open` calls this; a second call finds ring installed.
#[cfg(any(
    feature = "store-mysql",
    feature = "store-redis",
    feature = "store-etcd",
    feature = "store-zookeeper"
))]
pub(crate) fn tls_provider() {
    #[cfg(any(feature = "store-postgres", feature = "store-zookeeper"))]
    {
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_shared_kind_this_build_contains_can_be_opened() {
        for k in registry::KINDS.iter().filter(|k| k.shared) {
            assert_eq!(k.built, opener(k.name).is_some(), "{}", k.name);
        }
    }
}

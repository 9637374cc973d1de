//! The one loop that applies the rules: read one job's snapshot with a version, decide with
//! [`rules`], commit the decision's writes only if the version is unchanged, and read
//! again when it changed.
//!
//! A backend implements [`Backend`]: what it reads for an operation (the rules' state and
//! the version it was read at), and how it commits a set of [`Writes`] conditioned on that
//! version (Redis: `MULTI`/`EXEC` under `WATCH`; etcd: a `Txn` that compares the lease
//! row's `mod_revision`; ZooKeeper: a `multi` that sets the lease node at the version
//! read). The decision, the records a decision changes and the retry loop are here, once.
//!
//! The writes are given as what each read slot's records were and what they become
//! ([`SlotWrite`]), and what the lease row becomes ([`LeaseWrite`]): a backend derives
//! its own keys and indexes (a queued marker, a slot index) from those, and nothing more
//! is decided below this module.
//!
//! Each read and commit is one call with the backend's own deadline ([`CALL_TIMEOUT`]). A
//! commit that found the job held by another writer ([`Commit::Busy`]) is tried again
//! after a pause that doubles and is drawn at random ([`busy_pause`]); after a few, the
//! backend queues for the lock instead ([`Backend::queue_for_locks`]).
//! Every store fails in one type, [`Fail`]: what means the same on every store (no answer,
//! bad data, a schema too old or too new, the rules' refusal, contention) is named and
//! sorted into a [`StoreError`] once ([`Fail::store_error`]); a backend sorts only its
//! client's own errors ([`ClientError`]).

// Each store uses its part of the loop: a build with some of the stores (or none) leaves
// the rest unused, which the build with all of them (CI's clippy) still checks.
#![cfg_attr(
    not(all(
        feature = "store-sqlite",
        feature = "store-postgres",
        feature = "store-mysql",
        feature = "store-redis",
        feature = "store-etcd",
        feature = "store-zookeeper"
    )),
    allow(dead_code, unused_macros, unused_imports)
)]

use std::cell::RefCell;
use std::hash::{BuildHasher, Hasher, RandomState};
use std::time::{Duration, Instant};

use crate::guard::lease::Lease;
use crate::guard::ledger::Run;
use crate::store::rules::{self, ClaimDecision, ClaimState, EndDecision, RuleError, RunState};
use crate::store::{Claim, ClaimRequest, StoreError};

/// Reads of one operation that may find the job changed between them (the snapshot's
/// version moved), and commits that may find it changed, before the operation gives up:
/// contention is rare (one job's hosts fire together once per slot), so 50 tries in a row
/// mean something is wrong.
pub const RETRIES: u32 = 50;

/// How long one call to a store (one statement or script, with its answer) may take
/// before it counts as unavailable (`remote::CALL_TIMEOUT` is this), and how long one
/// operation waits in all for a job that another writer holds ([`Commit::Busy`]): as long
/// as waiting on that writer's lock would have taken before it timed out.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(4);

/// The first pause after a [`Commit::Busy`], and the longest: a grant is written in about
/// a millisecond, so the first pause most often finds it done; a writer that holds the
/// job longer (a retention pass deleting many slots) is asked after every quarter second,
/// not hundreds of times.
const BUSY_PAUSE: (Duration, Duration) = (Duration::from_millis(1), Duration::from_millis(256));

/// How many busy answers in a row ([`Commit::Busy`]) an operation takes before it asks
/// the backend to queue for the lock ([`Backend::queue_for_locks`]): after pauses of
/// about 30 to 60 ms in all. A racer for the same slot writes its grant in a millisecond
/// or two; a writer that holds the job longer, or a chain of them (retention deleting a
/// job's slots in batches), would leave gaps that a pause misses, and a queue is served
/// at the first.
const BUSY_BEFORE_QUEUEING: u32 = 6;

/// What a read answers.
pub(crate) enum Read<T> {
    /// The state, consistent as of one version.
    Got(T),
    /// The job changed between the read's parts: nothing is decided; read again.
    Changed,
}

/// What a read answers, or how it failed.
pub(crate) type ReadAnswer<T, C> = Result<Read<T>, Fail<C>>;

/// What a commit did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Commit {
    /// Every write was applied.
    Done,
    /// The version moved since the read: nothing was written.
    Changed,
    /// Nothing was written: the store's own expiry ended the lease the writes needed
    /// (etcd: the etcd lease a renewal keeps alive is gone). A renewal answers that the
    /// lease is lost; any other operation reads again.
    Lost,
    /// One transaction cannot hold every write: a first part of [`Writes::ahead`] was
    /// written (for a grant, records that [`rules::settle_ahead`] settles, which leave
    /// every slot's state as it was; for a resolve, some of its records). The operation
    /// reads again and goes on. Does not count as a try.
    Part,
    /// Nothing was written: another writer held the job at that moment (PostgreSQL: the
    /// lease row's lock, which a grant does not queue for at first). The loop pauses
    /// ([`busy_pause`]) and reads again; it does not count as a try. After
    /// [`BUSY_BEFORE_QUEUEING`] of them it asks the backend to queue for the lock
    /// instead; one that still answers busy gives up [`CALL_TIMEOUT`] after the first
    /// time ([`Fail::Held`]).
    Busy,
}

/// The pause before reading again after the `n`th [`Commit::Busy`] in a row (from 1):
/// 1 ms doubling up to 256 ms, drawn by `draw` from the upper half of that, so that
/// racers who all found the job held do not all read again at the same moment.
pub(crate) fn busy_pause(n: u32, draw: u64) -> Duration {
    let (first, most) = BUSY_PAUSE;
    let top = first
        .saturating_mul(1 << n.saturating_sub(1).min(16))
        .min(most);
    let half = u64::try_from(top.as_micros() / 2)
        .unwrap_or(u64::MAX)
        .max(1);
    Duration::from_micros(half + draw % half)
}

/// An operation's count of tries: changed reads and commits ([`RETRIES`] in a row), and
/// how long it has found the job held ([`CALL_TIMEOUT`] at most).
#[derive(Default)]
struct Tries {
    changed: u32,
    busy: u32,
    /// When a commit first found the job held, since the last change.
    held_since: Option<Instant>,
}

impl Tries {
    /// Whether another read may be made; if not, how the operation failed.
    fn more<C>(&self) -> Result<(), Fail<C>> {
        if self.changed >= RETRIES {
            Err(Fail::Contended)
        } else if self.held_since.is_some_and(|t| t.elapsed() >= CALL_TIMEOUT) {
            Err(Fail::Held(CALL_TIMEOUT))
        } else {
            Ok(())
        }
    }

    /// The job changed under a read or a commit: someone else's write went in.
    fn changed(&mut self) {
        self.changed += 1;
        self.busy = 0;
        self.held_since = None;
    }

    /// A commit found the job held: pauses before the next read, not past
    /// [`CALL_TIMEOUT`] since the first time, and after [`BUSY_BEFORE_QUEUEING`] of
    /// them asks `backend` to queue for the lock from then on.
    fn busy<B: Backend>(&mut self, backend: &mut B) {
        self.busy += 1;
        if self.busy == BUSY_BEFORE_QUEUEING {
            backend.queue_for_locks();
        }
        let since = *self.held_since.get_or_insert_with(Instant::now);
        let pause = busy_pause(self.busy, RandomState::new().build_hasher().finish())
            .min(CALL_TIMEOUT.saturating_sub(since.elapsed()));
        std::thread::sleep(pause);
    }

    /// Some of the operation's writes were made ([`Commit::Part`]): the tries count again
    /// from none.
    fn progress(&mut self) {
        *self = Tries::default();
    }
}

/// A store operation's failure, on every store: its client's own error, or one that means
/// the same whatever the store.
#[derive(Debug)]
#[cfg_attr(test, derive(PartialEq))]
pub(crate) enum Fail<C> {
    /// The store client's error, sorted by [`ClientError::store_error`].
    Client(C),
    /// A call got no answer within this deadline (`remote::CALL_TIMEOUT`).
    Timeout(Duration),
    /// The store cannot be reached, in the backend's words (a connection that got no
    /// answer within its deadline, say).
    Unavailable(String),
    /// What the store holds or answered makes no sense.
    Data(String),
    /// The rules refused the request ([`RuleError`]); nothing was written.
    Rule(RuleError),
    /// The job changed between read and commit [`RETRIES`] times in a row.
    Contended,
    /// Another writer held the job ([`Commit::Busy`]) through pauses of this long in all.
    Held(Duration),
    /// The job changed between the parts of one read: read again (a backend turns it into
    /// [`Read::Changed`]; it reaches a caller only as [`Fail::Contended`] does).
    Changed,
    /// The store's schema is older than this jobguard's: migrate, then ask again.
    Older,
    /// The store's schema has this version, newer than this jobguard's.
    Newer(i64),
    /// A second way of connecting failed after a first one failed with this message
    /// (PostgreSQL's `sslmode=prefer` and `allow`).
    After(String, Box<Fail<C>>),
}

/// A store client's own error, sorted by its backend.
pub(crate) trait ClientError {
    /// This error of `op` on `store` (the address with its secrets masked):
    /// [`StoreError::Unavailable`] when trying again later may succeed (no connection, a
    /// lock wait, a server shutting down), [`StoreError::Invalid`] when it will not,
    /// [`StoreError::Address`] when the address is wrong.
    fn store_error(self, store: &str, op: &str) -> StoreError;
}

impl<C: ClientError> Fail<C> {
    /// This failure of `op` on `store` (its address with secrets masked), a store whose
    /// schema version this jobguard knows as `known`. Each message starts with `op: `.
    pub fn store_error(self, store: &str, op: &str, known: i64) -> StoreError {
        let unavailable = |detail: String| StoreError::Unavailable {
            store: store.to_string(),
            detail,
        };
        let invalid = |detail: String| StoreError::Invalid {
            store: store.to_string(),
            detail,
        };
        match self {
            Fail::Client(e) => e.store_error(store, op),
            Fail::Timeout(limit) => {
                unavailable(format!("{op}: no answer within {} s", limit.as_secs()))
            }
            Fail::Unavailable(detail) => unavailable(format!("{op}: {detail}")),
            Fail::Data(detail) => invalid(format!("{op}: {detail}")),
            Fail::Rule(e) => invalid(format!("{op}: {e}")),
            Fail::Contended | Fail::Changed => unavailable(format!(
                "{op}: the job's state changed under {RETRIES} attempts in a row"
            )),
            Fail::Held(limit) => unavailable(format!(
                "{op}: another writer held the job for {} s",
                limit.as_secs()
            )),
            Fail::Older => invalid(format!(
                "{op}: the schema is still older after migrating it"
            )),
            Fail::Newer(version) => StoreError::newer_schema(store, version, known),
            Fail::After(first, then) => {
                // `op: first; then second`, the second attempt's error kind.
                let both = |detail: String| {
                    let second = detail.strip_prefix(&format!("{op}: ")).unwrap_or(&detail);
                    format!("{op}: {first}; then {second}")
                };
                match then.store_error(store, op, known) {
                    StoreError::Unavailable { detail, .. } => unavailable(both(detail)),
                    StoreError::Invalid { detail, .. } => invalid(both(detail)),
                    other => other,
                }
            }
        }
    }
}

/// What an end ([`crate::store::Store::finish`], [`crate::store::Store::interrupt`]) needs to
/// read besides the lease row and the record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Need {
    /// Every record of the record's slot (the one-success rule of a finish that
    /// succeeded). A backend may read them anyway.
    pub slot: bool,
    /// Whether the lease row counts as held only while the store's own expiry still
    /// keeps it (a finish: Redis's and etcd's `alive` key); an interrupt judges the row
    /// as written.
    pub live: bool,
}

/// The owned form of [`RunState`], as a backend reads it.
#[derive(Debug, Clone, Default)]
pub(crate) struct RunRead {
    /// The store's time, µs since the epoch.
    pub now: i64,
    /// The job's lease row, released or not.
    pub lease: Option<Lease>,
    /// The record under the run id, if it is this job's.
    pub record: Option<Run>,
    /// Every record of the record's slot, the record among them, in the store's order;
    /// empty when [`Need::slot`] was not asked and the backend did not read them.
    pub slot_runs: Vec<Run>,
}

/// A job's lease row as a backend reads it.
#[derive(Debug, Clone, Default)]
pub(crate) struct LeaseRead {
    /// The store's time, µs since the epoch.
    pub now: i64,
    /// The row, released or not.
    pub lease: Option<Lease>,
}

/// A slot's records as read, in the store's order.
pub(crate) type Records = Vec<Run>;

/// What the job's lease row becomes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum LeaseWrite {
    /// A new grant: the row becomes `lease`, the grant of `run`, which lives for `ttl`
    /// (the request's time to live; etcd keeps an etcd lease of that many seconds).
    Grant {
        lease: Lease,
        run: Box<Run>,
        ttl: Duration,
    },
    /// A renewal: the row's `expire_at` and `renewal` become this lease's (the rest is the
    /// row as read).
    Renew(Lease),
    /// The row is released: it becomes this ([`rules::released`]).
    Release(Lease),
    /// The row is unchanged (a backend whose version is the row's own still rewrites it,
    /// so that the version moves).
    Keep,
}

/// What one slot's records were when read, and what they become.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SlotWrite {
    /// The slot, µs since the epoch.
    pub slot: i64,
    /// Its records as read, in the store's order.
    pub before: Vec<Run>,
    /// Its records after the commit: those of `before`, changed or not, in their order,
    /// then the new ones.
    pub after: Vec<Run>,
}

impl SlotWrite {
    /// The records of `after` that are new or differ from their `before`.
    pub fn changed(&self) -> impl Iterator<Item = (&Run, Option<&Run>)> {
        self.after.iter().filter_map(|run| {
            let was = self.before.iter().find(|b| b.run_id == run.run_id);
            (was != Some(run)).then_some((run, was))
        })
    }

    /// Whether the slot had a record resolved queued when read.
    pub fn was_queued(&self) -> bool {
        self.before.iter().any(queued)
    }

    /// Whether the slot has a record resolved queued after the commit.
    pub fn is_queued(&self) -> bool {
        self.after.iter().any(queued)
    }
}

/// The writes of one decision, to apply in one atomic step conditioned on the version read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Writes {
    /// The job.
    pub job: String,
    /// What its lease row becomes.
    pub lease: LeaseWrite,
    /// Every slot the operation read, oldest first, changed or not (a backend may
    /// settle an index of an unchanged slot in the same step).
    pub slots: Vec<SlotWrite>,
    /// Records that may be written ahead of the rest, in this order, in writes of their
    /// own, for a backend whose transaction cannot hold every write ([`Commit::Part`]): a
    /// grant's records that [`rules::settle_ahead`] settles, or a resolve's records
    /// ([`Writes::resolve`]).
    pub ahead: Vec<Run>,
}

impl Writes {
    /// The writes of `grant`, decided on `state`: the new record in its slot, and each
    /// record named in [`rules::Grant::rerun`] resolved re-run.
    pub fn grant(state: &ClaimState, grant: &rules::Grant, ttl: Duration) -> Writes {
        let mut slots: Vec<SlotWrite> = state
            .slots
            .iter()
            .map(|(slot, before)| SlotWrite {
                slot: *slot,
                before: before.clone(),
                after: before
                    .iter()
                    .map(|r| {
                        with_resolution(r, &grant.rerun, crate::guard::ledger::Resolution::Rerun)
                    })
                    .collect(),
            })
            .collect();
        let granted = grant.run.slot.usec;
        match slots.iter_mut().find(|s| s.slot == granted) {
            Some(s) => s.after.push(grant.run.clone()),
            None => {
                slots.push(SlotWrite {
                    slot: granted,
                    before: Vec::new(),
                    after: vec![grant.run.clone()],
                });
                slots.sort_by_key(|s| s.slot);
            }
        }
        Writes {
            job: grant.lease.job.clone(),
            lease: LeaseWrite::Grant {
                lease: grant.lease.clone(),
                run: Box::new(grant.run.clone()),
                ttl,
            },
            slots,
            ahead: rules::settle_ahead(state, grant),
        }
    }

    /// The writes of `decision`, an end decided on `read`.
    pub fn end(job: &str, read: &RunRead, decision: &EndDecision) -> Writes {
        let lease = match (&read.lease, decision.release) {
            (Some(row), true) => LeaseWrite::Release(rules::released(row)),
            _ => LeaseWrite::Keep,
        };
        let slots = decision
            .record
            .iter()
            .map(|new| {
                let whole = read.slot_runs.iter().any(|r| r.run_id == new.run_id);
                let before = if whole {
                    read.slot_runs.clone()
                } else {
                    read.record.iter().cloned().collect()
                };
                let after = before
                    .iter()
                    .map(|r| {
                        if r.run_id == new.run_id {
                            new.clone()
                        } else {
                            r.clone()
                        }
                    })
                    .collect();
                SlotWrite {
                    slot: new.slot.usec,
                    before,
                    after,
                }
            })
            .collect();
        Writes {
            job: job.to_string(),
            lease,
            slots,
            ahead: Vec::new(),
        }
    }

    /// The writes of a resolve of `slot` to `resolution` ([`rules::resolve`]), read as
    /// `runs`: each record named in `ids` takes it. [`Writes::ahead`] holds the same
    /// records, those that were held last, for a backend that writes them in parts
    /// ([`Commit::Part`]): until its last part a held slot stays held, and each part
    /// keeps the slot's own indexes right for its records (etcd's queued marker), so a
    /// resolve cut short leaves no queued record that a queued-first claim cannot find.
    pub fn resolve(
        job: &str,
        slot: i64,
        runs: &[Run],
        ids: &[String],
        resolution: crate::guard::ledger::Resolution,
    ) -> Writes {
        let after: Vec<Run> = runs
            .iter()
            .map(|r| with_resolution(r, ids, resolution))
            .collect();
        let mut ahead: Vec<Run> = after
            .iter()
            .filter(|r| ids.contains(&r.run_id))
            .cloned()
            .collect();
        let held = |id: &str| {
            runs.iter().any(|r| {
                r.run_id == id && r.resolution == Some(crate::guard::ledger::Resolution::Held)
            })
        };
        ahead.sort_by_key(|r| held(&r.run_id));
        Writes {
            job: job.to_string(),
            lease: LeaseWrite::Keep,
            slots: vec![SlotWrite {
                slot,
                before: runs.to_vec(),
                after,
            }],
            ahead,
        }
    }

    /// The records the writes change or add, oldest slot first.
    pub fn changed(&self) -> impl Iterator<Item = (&Run, Option<&Run>)> {
        self.slots.iter().flat_map(SlotWrite::changed)
    }
}

fn queued(run: &Run) -> bool {
    run.resolution == Some(crate::guard::ledger::Resolution::Queued)
}

/// `run`, resolved `resolution` when its run id is one of `ids`.
fn with_resolution(run: &Run, ids: &[String], resolution: crate::guard::ledger::Resolution) -> Run {
    Run {
        resolution: if ids.contains(&run.run_id) {
            Some(resolution)
        } else {
            run.resolution
        },
        ..run.clone()
    }
}

thread_local! {
    /// What [`crate::store::before_next_commit`] runs.
    static BEFORE_COMMIT: RefCell<Option<Box<dyn FnOnce()>>> = const { RefCell::new(None) };
}

/// Sets `f` to run once, in this thread, before the next commit of this module's loop.
pub(crate) fn set_before_commit(f: Option<Box<dyn FnOnce()>>) {
    BEFORE_COMMIT.with(|h| *h.borrow_mut() = f);
}

/// Commits `writes` under `version`, after the hook of [`set_before_commit`] if one is set.
fn commit<B: Backend>(
    backend: &mut B,
    version: B::Version,
    writes: &Writes,
) -> Result<Commit, Fail<B::Client>> {
    if let Some(f) = BEFORE_COMMIT.with(|h| h.borrow_mut().take()) {
        f();
    }
    backend.commit(version, writes)
}

/// Checks that `finish` is an end state whose report serializes, before a finish is
/// decided on any store.
///
/// # Errors
/// [`StoreError::Invalid`] naming `store` and `run_id` for `Running` or a report that does
/// not serialize.
pub(crate) fn check_finish(
    store: &str,
    run_id: &str,
    finish: &crate::guard::ledger::Finish,
) -> Result<(), StoreError> {
    let invalid = |detail: String| StoreError::Invalid {
        store: store.to_string(),
        detail,
    };
    if finish.outcome == crate::guard::ledger::Outcome::Running {
        return Err(invalid(format!(
            "finish: run {run_id}: running is not an end state"
        )));
    }
    serde_json::to_string(&finish.report)
        .map(drop)
        .map_err(|e| invalid(format!("finish: run {run_id}: report: {e}")))
}

/// A store's part of the loop: what it reads, and how it commits.
pub(crate) trait Backend {
    /// What a read saw that its commit is conditioned on (a revision, a version, the keys
    /// under `WATCH`), with whatever the backend needs again to write.
    type Version;
    /// The backend's client error.
    type Client: ClientError;
    /// Whether the store's clock is this host's (SQLite, etcd): a claim's clock check
    /// then compares the host's clock with itself, and always passes (the clock
    /// tolerance still bounds the slots that count as recorded).
    const HOST_CLOCK: bool = false;

    /// Reads what [`rules::claim`] needs for `req`, and the version it was read at. The
    /// state's `now` is the store's time.
    fn read_claim(
        &mut self,
        req: &ClaimRequest,
    ) -> ReadAnswer<(ClaimState, Self::Version), Self::Client>;

    /// Reads what an end of `run_id` (a record of `job`) needs, and the version it was
    /// read at.
    fn read_run(
        &mut self,
        job: &str,
        run_id: &str,
        need: Need,
    ) -> ReadAnswer<(RunRead, Self::Version), Self::Client>;

    /// Reads the job's lease row and the store's time (µs since the epoch), and the
    /// version they were read at. With `live`, the row is judged as [`Need::live`] says.
    fn read_lease(
        &mut self,
        job: &str,
        live: bool,
    ) -> ReadAnswer<(LeaseRead, Self::Version), Self::Client>;

    /// Reads every record of `job`'s `slot` (µs since the epoch), in the store's order,
    /// and the version they were read at.
    fn read_slot(
        &mut self,
        job: &str,
        slot: i64,
    ) -> ReadAnswer<(Records, Self::Version), Self::Client>;

    /// From now on in this operation, a commit waits for another writer's lock (within
    /// its call's deadline) instead of answering [`Commit::Busy`]. The engine asks this
    /// after [`BUSY_BEFORE_QUEUEING`] busy answers in a row; a backend that never answers
    /// busy has nothing to do.
    fn queue_for_locks(&mut self) {}

    /// Applies `writes` in one atomic step if nothing read under `version` changed.
    fn commit(
        &mut self,
        version: Self::Version,
        writes: &Writes,
    ) -> Result<Commit, Fail<Self::Client>>;
}

/// Decides and applies a claim ([`crate::store::Store::claim`]) on `backend`.
///
/// # Errors
/// [`Fail::Rule`] for a request the rules refuse as malformed; [`Fail::Contended`]
/// after [`RETRIES`] changed reads or commits in a row; the backend's failures.
pub(crate) fn claim<B: Backend>(
    backend: &mut B,
    req: &ClaimRequest,
) -> Result<Claim, Fail<B::Client>> {
    let mut tries = Tries::default();
    loop {
        tries.more()?;
        let Read::Got((state, version)) = backend.read_claim(req)? else {
            tries.changed();
            continue;
        };
        let decision = if B::HOST_CLOCK
            && let Some(check) = &req.clock
        {
            let mut req = req.clone();
            req.clock = Some(crate::store::ClockCheck {
                host_now: state.now,
                ..*check
            });
            rules::claim(&state, &req)
        } else {
            rules::claim(&state, req)
        }
        .map_err(Fail::Rule)?;
        let ClaimDecision::Grant(grant) = &decision else {
            return Ok(decision.answer());
        };
        let writes = Writes::grant(&state, grant, req.ttl);
        match commit(backend, version, &writes)? {
            Commit::Done => return Ok(decision.answer()),
            Commit::Changed | Commit::Lost => tries.changed(),
            Commit::Busy => tries.busy(backend),
            Commit::Part => {}
        }
    }
}

/// Decides with `decide` and applies an end of `run_id`, a record of `job`
/// ([`crate::store::Store::finish`], [`crate::store::Store::interrupt`]), on `backend`.
///
/// # Errors
/// As [`claim`]; `decide`'s refusals as [`Fail::Rule`].
pub(crate) fn end<B: Backend>(
    backend: &mut B,
    job: &str,
    run_id: &str,
    need: Need,
    decide: impl Fn(&RunState<'_>) -> Result<EndDecision, RuleError>,
) -> Result<EndDecision, Fail<B::Client>> {
    let mut tries = Tries::default();
    loop {
        tries.more()?;
        let Read::Got((read, version)) = backend.read_run(job, run_id, need)? else {
            tries.changed();
            continue;
        };
        let state = RunState {
            now: read.now,
            lease: read.lease.as_ref(),
            record: read.record.as_ref(),
            slot_runs: &read.slot_runs,
        };
        let decision = decide(&state).map_err(Fail::Rule)?;
        if decision.record.is_none() && !decision.release {
            return Ok(decision);
        }
        let writes = Writes::end(job, &read, &decision);
        match commit(backend, version, &writes)? {
            Commit::Done => return Ok(decision),
            Commit::Busy => tries.busy(backend),
            Commit::Changed | Commit::Lost | Commit::Part => tries.changed(),
        }
    }
}

/// Decides with [`rules::renew`] and applies a renewal of `lease` to generation `next`
/// for `ttl` ([`crate::store::Store::renew`]): the new `expire_at` (µs since the epoch,
/// store clock), or `None` when the lease is lost.
///
/// # Errors
/// As [`claim`].
pub(crate) fn renew<B: Backend>(
    backend: &mut B,
    lease: &Lease,
    next: i64,
    ttl: Duration,
) -> Result<Option<i64>, Fail<B::Client>> {
    let mut tries = Tries::default();
    loop {
        tries.more()?;
        let Read::Got((LeaseRead { now, lease: row }, version)) =
            backend.read_lease(&lease.job, true)?
        else {
            tries.changed();
            continue;
        };
        let (Some(expire_at), Some(row)) = (rules::renew(now, row.as_ref(), lease, next, ttl), row)
        else {
            return Ok(None);
        };
        let writes = Writes {
            job: lease.job.clone(),
            lease: LeaseWrite::Renew(Lease {
                expire_at,
                renewal: next,
                ..row
            }),
            slots: Vec::new(),
            ahead: Vec::new(),
        };
        match commit(backend, version, &writes)? {
            Commit::Done => return Ok(Some(expire_at)),
            Commit::Lost => return Ok(None),
            Commit::Busy => tries.busy(backend),
            Commit::Changed | Commit::Part => tries.changed(),
        }
    }
}

/// Decides with [`rules::unlock`] and applies an unlock of `job`
/// ([`crate::store::Store::unlock`]): the lease it ended, if one was unexpired.
///
/// # Errors
/// As [`claim`].
pub(crate) fn unlock<B: Backend>(
    backend: &mut B,
    job: &str,
) -> Result<Option<Lease>, Fail<B::Client>> {
    let mut tries = Tries::default();
    loop {
        tries.more()?;
        let Read::Got((LeaseRead { now, lease: row }, version)) = backend.read_lease(job, false)?
        else {
            tries.changed();
            continue;
        };
        let (ended, release) = rules::unlock(now, row.as_ref());
        let Some(row) = row.filter(|_| release) else {
            return Ok(ended);
        };
        let writes = Writes {
            job: job.to_string(),
            lease: LeaseWrite::Release(rules::released(&row)),
            slots: Vec::new(),
            ahead: Vec::new(),
        };
        match commit(backend, version, &writes)? {
            Commit::Done => return Ok(ended),
            Commit::Busy => tries.busy(backend),
            Commit::Changed | Commit::Lost | Commit::Part => tries.changed(),
        }
    }
}

/// Decides with [`rules::resolve`] and applies a resolve of `job`'s `slot` to
/// `resolution` ([`crate::store::Store::resolve`]): how many records it changed.
///
/// A backend that writes the records in parts ([`Commit::Part`]) has written some of
/// them; the slot is read again and the rest resolved. When a record joined the slot
/// between parts (a grant of the slot: its own firing, a forced run, a queued-first
/// claim, which settles what it found queued), the resolve ends there: the slot is being
/// run again, and queueing the rest after it would run it once more.
///
/// # Errors
/// As [`claim`].
pub(crate) fn resolve<B: Backend>(
    backend: &mut B,
    job: &str,
    slot: i64,
    resolution: crate::guard::ledger::Resolution,
) -> Result<usize, Fail<B::Client>> {
    let mut done = 0;
    // The slot's records when the first part was written.
    let mut known: Option<Vec<String>> = None;
    // The records the last part may have written (a prefix of its `ahead`): those that
    // carry the resolution when read again are counted.
    let mut part: Vec<String> = Vec::new();
    let mut tries = Tries::default();
    loop {
        tries.more()?;
        let Read::Got((runs, version)) = backend.read_slot(job, slot)? else {
            tries.changed();
            continue;
        };
        done += runs
            .iter()
            .filter(|r| part.contains(&r.run_id) && r.resolution == Some(resolution))
            .count();
        part.clear();
        if known
            .as_ref()
            .is_some_and(|k| runs.iter().any(|r| !k.contains(&r.run_id)))
        {
            return Ok(done);
        }
        let ids = rules::resolve(&runs, resolution);
        if ids.is_empty() {
            return Ok(done);
        }
        let writes = Writes::resolve(job, slot, &runs, &ids, resolution);
        match commit(backend, version, &writes)? {
            Commit::Done => return Ok(done + ids.len()),
            Commit::Part => {
                known.get_or_insert_with(|| runs.iter().map(|r| r.run_id.clone()).collect());
                part = ids;
                tries.progress();
            }
            Commit::Busy => tries.busy(backend),
            Commit::Changed | Commit::Lost => tries.changed(),
        }
    }
}

/// The [`crate::store::Store`] methods that are this module's loop: `claim`,
/// `finish_as`, `interrupt`, `unlock` and `resolve` (with `renew`, `renew` too), each run with the
/// store's own `fn engine<T>(&mut self, op: &str, f: impl FnMut(&mut Session<'_>) ->
/// Result<T, Fail>) -> Result<T, StoreError>`, which gives `f` its [`Backend`] and names a
/// failure after the store and `op`.
macro_rules! store_ops {
    () => {
        fn claim(&mut self, req: &ClaimRequest) -> Result<Claim, StoreError> {
            self.engine("claim", |s| engine::claim(s, req))
        }

        fn finish_as(
            &mut self,
            lease: &Lease,
            run_id: &str,
            finish: &Finish,
            kept: bool,
        ) -> Result<Finished, StoreError> {
            // The report must serialize before anything is decided.
            engine::check_finish(&self.describe(), run_id, finish)?;
            // The slot's records matter only to the one-success rule.
            let need = engine::Need {
                slot: finish.outcome == crate::guard::ledger::Outcome::Succeeded,
                live: true,
            };
            let decision = self.engine("finish", |s| {
                engine::end(s, &lease.job, run_id, need, |state| {
                    rules::finish(state, lease, run_id, finish, kept)
                })
            })?;
            Ok(decision.finished())
        }

        fn interrupt(
            &mut self,
            run: &Run,
            reason: &str,
            resolution: Resolution,
        ) -> Result<bool, StoreError> {
            let need = engine::Need {
                slot: false,
                live: false,
            };
            let decision = self.engine("interrupt", |s| {
                engine::end(s, &run.job, &run.run_id, need, |state| {
                    Ok(rules::interrupt(state, run, reason, resolution))
                })
            })?;
            Ok(decision.record.is_some())
        }

        fn unlock(&mut self, job: &str) -> Result<Option<Lease>, StoreError> {
            self.engine("unlock", |s| engine::unlock(s, job))
        }

        fn resolve(
            &mut self,
            job: &str,
            slot: i64,
            resolution: Resolution,
        ) -> Result<usize, StoreError> {
            self.engine("resolve", |s| engine::resolve(s, job, slot, resolution))
        }
    };
    (renew) => {
        engine::store_ops!();

        fn renew(
            &mut self,
            lease: &Lease,
            next: i64,
            ttl: Duration,
        ) -> Result<Option<i64>, StoreError> {
            self.engine("renew", |s| engine::renew(s, lease, next, ttl))
        }
    };
}
pub(crate) use store_ops;

#[cfg(test)]
mod tests {
    //! The loop itself, over a store kept in memory whose version can be made to move
    //! between a read and its commit (the real stores run it in
    //! `tests/store_conformance.rs` and `tests/store_differential.rs`).

    use super::*;
    use crate::guard::ledger::{Outcome, Resolution};
    use crate::store::rules::tests::{end as ended, req};

    /// One job's state, a version that every commit moves, and how many more commits
    /// are to find it moved by someone else (`steal`) or to write only a part (`parts`).
    #[derive(Default)]
    struct Kept {
        lease: Option<Lease>,
        runs: Vec<Run>,
        version: u64,
        steal: u32,
        parts: u32,
        /// How many more commits are to find the job held by another writer.
        busy: u32,
        /// Whether [`Backend::queue_for_locks`] ends the busy answers (the commit waits).
        queues: bool,
        /// After how many commits [`Backend::queue_for_locks`] was asked.
        queued_after: Option<u32>,
        commits: u32,
        /// The records written by parts, in order.
        written: Vec<String>,
    }

    impl ClientError for String {
        fn store_error(self, store: &str, op: &str) -> StoreError {
            StoreError::Invalid {
                store: store.to_string(),
                detail: format!("{op}: {self}"),
            }
        }
    }

    const NOW: i64 = 1_000_000_000;

    impl Backend for Kept {
        type Version = u64;
        type Client = String;

        fn read_claim(&mut self, req: &ClaimRequest) -> ReadAnswer<(ClaimState, u64), String> {
            let slot = req.run.slot.usec;
            let state = ClaimState {
                now: NOW,
                lease: self.lease.clone(),
                retried: self
                    .runs
                    .iter()
                    .find(|r| r.run_id == req.run.run_id)
                    .cloned(),
                slots: [(
                    slot,
                    self.runs
                        .iter()
                        .filter(|r| r.slot.usec == slot)
                        .cloned()
                        .collect(),
                )]
                .into(),
                newest: self.runs.iter().map(|r| r.slot.usec).max(),
                lease_run: None,
            };
            Ok(Read::Got((state, self.version)))
        }

        fn read_run(
            &mut self,
            _job: &str,
            run_id: &str,
            _need: Need,
        ) -> ReadAnswer<(RunRead, u64), String> {
            let record = self.runs.iter().find(|r| r.run_id == run_id).cloned();
            let slot_runs = self
                .runs
                .iter()
                .filter(|r| record.as_ref().is_some_and(|x| x.slot == r.slot))
                .cloned()
                .collect();
            let read = RunRead {
                now: NOW + 1,
                lease: self.lease.clone(),
                record,
                slot_runs,
            };
            Ok(Read::Got((read, self.version)))
        }

        fn read_lease(&mut self, _job: &str, _live: bool) -> ReadAnswer<(LeaseRead, u64), String> {
            let read = LeaseRead {
                now: NOW + 1,
                lease: self.lease.clone(),
            };
            Ok(Read::Got((read, self.version)))
        }

        fn read_slot(&mut self, _job: &str, slot: i64) -> ReadAnswer<(Records, u64), String> {
            let runs = self
                .runs
                .iter()
                .filter(|r| r.slot.usec == slot)
                .cloned()
                .collect();
            Ok(Read::Got((runs, self.version)))
        }

        fn queue_for_locks(&mut self) {
            self.queued_after = Some(self.commits);
            if self.queues {
                self.busy = 0;
            }
        }

        /// A part writes the first record of [`Writes::ahead`], if any.
        fn commit(&mut self, version: u64, writes: &Writes) -> Result<Commit, Fail<String>> {
            self.commits += 1;
            if self.busy > 0 {
                self.busy -= 1;
                return Ok(Commit::Busy);
            }
            if self.steal > 0 {
                self.steal -= 1;
                self.version += 1;
            }
            if version != self.version {
                return Ok(Commit::Changed);
            }
            if self.parts > 0 {
                self.parts -= 1;
                if let Some(run) = writes.ahead.first() {
                    self.version += 1;
                    self.written.push(run.run_id.clone());
                    let at = self.runs.iter().position(|r| r.run_id == run.run_id);
                    self.runs[at.expect("a record read")] = run.clone();
                }
                return Ok(Commit::Part);
            }
            self.version += 1;
            match &writes.lease {
                LeaseWrite::Grant { lease, .. }
                | LeaseWrite::Renew(lease)
                | LeaseWrite::Release(lease) => self.lease = Some(lease.clone()),
                LeaseWrite::Keep => {}
            }
            for (run, before) in writes.changed() {
                match before {
                    None => self.runs.push(run.clone()),
                    Some(_) => {
                        let at = self.runs.iter().position(|r| r.run_id == run.run_id);
                        self.runs[at.expect("a record read")] = run.clone();
                    }
                }
            }
            Ok(Commit::Done)
        }
    }

    #[test]
    fn a_failure_is_sorted_and_named_once_for_every_store() {
        let sorted = |f: Fail<String>| f.store_error("db://x", "claim", 5);
        let words = |e: StoreError| match e {
            StoreError::Unavailable { detail, .. } => format!("unavailable: {detail}"),
            StoreError::Invalid { detail, .. } => format!("invalid: {detail}"),
            other => format!("{other:?}"),
        };
        for (fail, said) in [
            (
                Fail::Contended,
                "unavailable: claim: the job's state changed under 50 attempts in a row",
            ),
            (
                Fail::Timeout(Duration::from_secs(4)),
                "unavailable: claim: no answer within 4 s",
            ),
            (Fail::Data("no time".into()), "invalid: claim: no time"),
            (Fail::Client("bad row".into()), "invalid: claim: bad row"),
            (
                Fail::After(
                    "with TLS: refused".into(),
                    Box::new(Fail::Timeout(Duration::from_secs(4))),
                ),
                "unavailable: claim: with TLS: refused; then no answer within 4 s",
            ),
        ] {
            assert_eq!(words(sorted(fail)), said);
        }
        assert!(matches!(
            sorted(Fail::Newer(7)),
            StoreError::Invalid { detail, .. } if detail.contains("schema version 7 is newer than this jobguard knows (5)")
        ));
    }

    #[test]
    fn a_claim_that_lost_a_race_decides_again_and_gives_up_only_after_the_retries() {
        let mut kept = Kept {
            steal: RETRIES - 1,
            ..Kept::default()
        };
        assert!(matches!(
            claim(&mut kept, &req(60_000_000, 1, 1)),
            Ok(Claim::Claimed { .. })
        ));
        assert_eq!(kept.commits, RETRIES);
        assert_eq!(kept.runs.len(), 1);

        let mut kept = Kept {
            steal: RETRIES,
            ..Kept::default()
        };
        assert!(matches!(
            claim(&mut kept, &req(60_000_000, 1, 1)),
            Err(Fail::Contended)
        ));
        assert!(kept.runs.is_empty() && kept.lease.is_none());
    }

    #[test]
    fn a_busy_pause_doubles_from_a_millisecond_to_256_and_is_drawn_from_its_upper_half() {
        let ms = |m: u64| Duration::from_micros(m * 1000);
        for (n, top) in [
            (1, 1),
            (2, 2),
            (3, 4),
            (6, 32),
            (9, 256),
            (10, 256),
            (99, 256),
        ] {
            for draw in [0, 1, 7, 499, 15_999, u64::MAX] {
                let pause = busy_pause(n, draw);
                assert!(
                    pause >= ms(top) / 2 && pause < ms(top),
                    "{n} {draw}: {pause:?}"
                );
            }
        }
        // The draw spreads racers over the half.
        assert_ne!(busy_pause(6, 1), busy_pause(6, 2));
    }

    #[test]
    fn a_claim_that_finds_the_job_held_pauses_and_does_not_count_it_as_a_try() {
        let mut kept = Kept {
            busy: BUSY_BEFORE_QUEUEING - 1,
            steal: RETRIES - 1,
            ..Kept::default()
        };
        let began = std::time::Instant::now();
        assert!(matches!(
            claim(&mut kept, &req(60_000_000, 1, 1)),
            Ok(Claim::Claimed { .. })
        ));
        assert_eq!(kept.commits, BUSY_BEFORE_QUEUEING - 1 + RETRIES);
        assert_eq!(kept.queued_after, None);
        // At least the lower half of every pause: 0.5 + 1 + 2 + 4 + 8 ms.
        assert!(
            began.elapsed() >= Duration::from_micros(15_500),
            "{:?}",
            began.elapsed()
        );
    }

    #[test]
    fn a_claim_that_finds_the_job_held_longer_than_a_racer_queues_for_the_lock() {
        let mut kept = Kept {
            busy: u32::MAX,
            queues: true,
            ..Kept::default()
        };
        assert!(matches!(
            claim(&mut kept, &req(60_000_000, 1, 1)),
            Ok(Claim::Claimed { .. })
        ));
        assert_eq!(kept.queued_after, Some(BUSY_BEFORE_QUEUEING));
        assert_eq!(kept.commits, BUSY_BEFORE_QUEUEING + 1);
    }

    #[test]
    fn a_claim_gives_up_when_the_job_stays_held_for_a_call_timeout() {
        let mut kept = Kept {
            busy: u32::MAX,
            ..Kept::default()
        };
        let began = std::time::Instant::now();
        let answer = claim(&mut kept, &req(60_000_000, 1, 1));
        assert!(
            matches!(answer, Err(Fail::Held(CALL_TIMEOUT))),
            "{answer:?}"
        );
        assert!(began.elapsed() >= CALL_TIMEOUT);
        assert!(kept.runs.is_empty() && kept.lease.is_none());
        let said = Fail::<String>::Held(CALL_TIMEOUT).store_error("db://x", "claim", 5);
        assert!(
            matches!(&said, StoreError::Unavailable { detail, .. }
                if detail == "claim: another writer held the job for 4 s"),
            "{said:?}"
        );
    }

    #[test]
    fn a_commit_in_parts_does_not_count_as_a_try() {
        let mut kept = Kept {
            parts: RETRIES * 2,
            ..Kept::default()
        };
        assert!(matches!(
            claim(&mut kept, &req(60_000_000, 1, 1)),
            Ok(Claim::Claimed { .. })
        ));
        assert_eq!(kept.commits, RETRIES * 2 + 1);
    }

    #[test]
    fn a_finish_writes_the_whole_slot_it_read_and_releases_the_lease() {
        let mut kept = Kept::default();
        let asked = req(60_000_000, 1, 1);
        let Ok(Claim::Claimed { lease, run, .. }) = claim(&mut kept, &asked) else {
            panic!("no grant");
        };
        let finish = ended(Outcome::Failed, Some(Resolution::Queued));
        let need = Need {
            slot: true,
            live: true,
        };
        let decided = end(&mut kept, "j", &run.run_id, need, |state| {
            let writes = Writes::end(
                "j",
                &read_of(state),
                &rules::finish(state, &lease, &run.run_id, &finish, false)?,
            );
            assert!(
                writes
                    .slots
                    .iter()
                    .all(|s| s.before.len() == state.slot_runs.len())
            );
            assert!(writes.slots.iter().all(SlotWrite::is_queued));
            assert!(!writes.slots.iter().any(SlotWrite::was_queued));
            rules::finish(state, &lease, &run.run_id, &finish, false)
        })
        .expect("finish");
        assert!(decided.release && decided.record.is_some());
        assert_eq!(kept.runs[0].outcome, Outcome::Failed);
        assert!(kept.lease.as_ref().is_some_and(|l| l.holder.is_empty()));
        // Renewing a released lease writes nothing.
        let version = kept.version;
        assert_eq!(
            renew(&mut kept, &lease, 1, Duration::from_secs(60)),
            Ok(None)
        );
        assert_eq!(kept.version, version);
    }

    /// Three failed records of one slot, the first one held.
    fn three_failed() -> Kept {
        let runs = (0..3)
            .map(|i| Run {
                run_id: format!("r{i}"),
                resolution: (i == 0).then_some(Resolution::Held),
                ..ended_run(i)
            })
            .collect();
        Kept {
            runs,
            ..Kept::default()
        }
    }

    fn ended_run(i: i64) -> Run {
        let mut kept = Kept::default();
        let Ok(Claim::Claimed { run, .. }) = claim(&mut kept, &req(60_000_000, 1, 1)) else {
            panic!("no grant");
        };
        Run {
            outcome: Outcome::Failed,
            started_at: NOW + i,
            ..run
        }
    }

    #[test]
    fn a_resolve_in_parts_writes_the_held_record_last_and_counts_every_record() {
        let mut kept = Kept {
            parts: 2,
            ..three_failed()
        };
        assert_eq!(
            resolve(&mut kept, "j", 60_000_000, Resolution::Queued),
            Ok(3)
        );
        assert!(
            kept.runs
                .iter()
                .all(|r| r.resolution == Some(Resolution::Queued))
        );
        // Two parts of one record each, then the last with the held one.
        assert_eq!(kept.written, ["r1", "r2"]);
        assert_eq!(kept.commits, 3);
    }

    /// [`Kept`], and what another host does right after each part.
    struct AfterPart(Kept, fn(&mut Kept));

    impl Backend for AfterPart {
        type Version = u64;
        type Client = String;
        fn read_claim(&mut self, r: &ClaimRequest) -> ReadAnswer<(ClaimState, u64), String> {
            self.0.read_claim(r)
        }
        fn read_run(&mut self, j: &str, id: &str, n: Need) -> ReadAnswer<(RunRead, u64), String> {
            self.0.read_run(j, id, n)
        }
        fn read_lease(&mut self, j: &str, l: bool) -> ReadAnswer<(LeaseRead, u64), String> {
            self.0.read_lease(j, l)
        }
        fn read_slot(&mut self, j: &str, s: i64) -> ReadAnswer<(Records, u64), String> {
            self.0.read_slot(j, s)
        }
        fn commit(&mut self, v: u64, w: &Writes) -> Result<Commit, Fail<String>> {
            let answer = self.0.commit(v, w);
            if answer == Ok(Commit::Part) {
                (self.1)(&mut self.0);
                self.0.version += 1;
            }
            answer
        }
    }

    #[test]
    fn a_record_that_joins_the_slot_between_parts_ends_the_resolve() {
        // A grant of the slot adds its running record.
        let mut joined = AfterPart(
            Kept {
                parts: 1,
                ..three_failed()
            },
            |kept| {
                let run = Run {
                    run_id: "granted".to_string(),
                    outcome: Outcome::Running,
                    resolution: None,
                    ..kept.runs[0].clone()
                };
                kept.runs.push(run);
            },
        );
        assert_eq!(
            resolve(&mut joined, "j", 60_000_000, Resolution::Queued),
            Ok(1)
        );
        let queued = joined
            .0
            .runs
            .iter()
            .filter(|r| r.resolution == Some(Resolution::Queued))
            .count();
        assert_eq!(queued, 1);
        // The held record is still held: the slot was never left unheld.
        assert_eq!(joined.0.written, ["r1"]);
        assert_eq!(joined.0.runs[0].resolution, Some(Resolution::Held));
    }

    #[test]
    fn a_resolve_counts_only_the_records_it_wrote() {
        // Between the parts another host's run of the slot succeeds: nothing is left to
        // queue, and the one record the part wrote is all this resolve did.
        let mut settled = AfterPart(
            Kept {
                parts: 1,
                ..three_failed()
            },
            |kept| kept.runs[2].outcome = Outcome::Succeeded,
        );
        assert_eq!(
            resolve(&mut settled, "j", 60_000_000, Resolution::Queued),
            Ok(1)
        );
        assert_eq!(settled.0.written, ["r1"]);
    }

    fn read_of(state: &RunState<'_>) -> RunRead {
        RunRead {
            now: state.now,
            lease: state.lease.cloned(),
            record: state.record.cloned(),
            slot_runs: state.slot_runs.to_vec(),
        }
    }
}

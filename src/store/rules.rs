//! The lease and ledger rules of every store, once, as pure functions: no I/O, no clock.
//!
//! Each function takes a snapshot of one job's state as the store holds it (the lease row,
//! the records that matter, the store's time in µs since the Unix epoch) and the request,
//! and returns a decision: a refusal, or the writes to apply. A store that uses these
//! functions only reads the snapshot and applies the writes in one atomic step; the
//! decision itself is made here and tested here, with no store at all.
//!
//! The module sits in `store/` (not beside [`crate::guard::lease`] and [`crate::guard::ledger`]) because
//! it is the store layer's decision procedure: it answers in the store's own values
//! ([`Claim`], [`Finished`]) and is called only by the backends and their tests.
//!
//! Every store decides with these functions. Claim, renew, finish, interrupt, unlock and
//! resolve run in [`super::engine`]'s one loop: read one job's snapshot with a version, decide
//! here, commit only while the version is unchanged (SQLite: one `BEGIN IMMEDIATE`
//! transaction; PostgreSQL: the lease row's `xmin`; MySQL/MariaDB: the lease row's
//! revision `rev` for a claim, the lease row's lock for the rest; Redis: `WATCH`/`MULTI`/`EXEC`;
//! etcd: a `Txn` on the lease row's `mod_revision`; ZooKeeper: a `multi` that sets the
//! lease node at its version). The mark's fence and the schedule are decided here too, in
//! one loop each ([`super::Store::mark`], [`super::Store::declare_schedule`]) over a
//! store's read and its conditional insert or swap; which slots retention may delete is
//! still a condition in each store's delete. No store runs a
//! function, procedure or script that decides (schema 5 on PostgreSQL and MySQL/MariaDB,
//! schema 4 on Redis).
//!
//! A fenced mark's insert also compares the store's clock with [`fence_deadline`]
//! (PostgreSQL and MySQL/MariaDB: in the insert's statement; Redis: the lease's `alive`
//! key, watched; etcd: the holder's `alive` key, gone with its etcd lease; SQLite reads
//! and inserts in one transaction under its write lock), so a mark whose insert arrives
//! after its lease ended is not recorded. (On MySQL/MariaDB the commit is one more round
//! trip after the insert, and holds the lease row's share lock until then: a takeover
//! waits for it and sees the mark.)
//!
//! `tests/store_differential.rs` drives every backend through random histories and
//! compares every answer and every resulting state with these functions. The rule order
//! ([`claim`]):
//! 0. a claim sent again under a run id that is already recorded answers that grant again
//!    while it holds, and is an error otherwise;
//! 1. with [`ClaimRequest::clock`], the clock check;
//! 2. with [`ClaimRequest::queued_first`], the oldest queued slot that is neither done nor
//!    held replaces the asked slot;
//! 3. unless forced, a done slot, then a held slot, is refused;
//! 4. with [`ClaimRequest::in_order`] and no queued slot picked, a slot behind the newest
//!    recorded slot (no later than the store's time plus the clock tolerance) is refused;
//! 5. another holder's unexpired lease is refused, and so is a lease that lapsed less than
//!    [`FOREIGN_GRACE_USEC`] ago while its holder, on another machine or boot, still has the
//!    asked slot `running`, and so is a slot with a `running` attempt from another machine
//!    or boot under
//!    an earlier lease (until a recovery pass judges it);
//! 6. the grant: a new lease with the next fencing token, a `running` record, and the
//!    queued or held records of the slot (and, with `queued_first`, the queued records of
//!    every done slot) marked [`Resolution::Rerun`].

use std::collections::BTreeMap;
use std::time::Duration;

use crate::guard::lease::Lease;
use crate::guard::ledger::{Finish, Outcome, Resolution, Run, Slot};
use crate::store::{Claim, ClaimRequest, Finished, Mark, Marking, ScheduleDecl};

/// How long after a lease's expiry, µs by the store's clock, a holder on another machine
/// (or under another boot id of the same machine id) still counts as alive when its
/// record of the asked slot is still `running`: 90 s.
///
/// Such a holder may have ended its command and be cut off from the store with the outcome
/// in hand: it keeps the outcome durably and gives up when its lease would expire, and its
/// host's next recovery pass (every minute, on the minute, `jobguard-recover.timer`)
/// records it. A claim of that slot from another machine in the meantime would run the
/// slot a second time, so it is refused as [`Claim::Busy`] until the lease has been lapsed
/// this long: one recovery pass of the holder's host (60 s) plus 30 s for passes that do
/// not start at the same second. A holder cut off for longer is taken for gone, as
/// `jobguard recover` takes it ([`crate::ops::recover::holder_gone`]). Once a later grant has
/// taken the lease on, when the attempt's lease lapsed is no longer known: its slot then
/// waits until a recovery pass has judged the attempt ([`claim`], step 5). A claim from the
/// same machine and boot needs no grace: its own shim replays a kept outcome before it
/// claims, and its local lock keeps a second run of the job on that machine out while the
/// first waits. A
/// claimer without a machine id (`/etc/machine-id` unreadable or empty) is taken for
/// another machine.
pub const FOREIGN_GRACE_USEC: i64 = 90_000_000;

/// How many times [`crate::store::Store::declare_schedule`] reads and swaps before it
/// gives up: another host would have to declare between every read and swap.
pub const SCHEDULE_TRIES: u32 = 10;

/// What to write when a host declares `asked` (with `seen_at` its clock's now) and the
/// store holds `current` ([`crate::store::Store::declare_schedule`]); `None`: nothing,
/// `current` stands.
///
/// The newest definition wins, while its hosts keep firing:
/// - `asked` replaces a record of another fingerprint when its `(defined_at,
///   fingerprint)` is greater (the fingerprint only breaks a tie, so that every host
///   agrees); when the record is the asking host's own (it changed its mind, even to a
///   file with an older time, such as a restored backup); or when no host has refreshed
///   the record for its `horizon` (the hosts of that schedule are gone, or no longer run
///   the job);
/// - a declaration of the recorded fingerprint refreshes it: a later `defined_at` is
///   kept (so that a later change back to the other schedule is newer than every host's
///   copy of this one), and `seen_at` is written again once a quarter of the horizon
///   has passed, so that the hosts of a live schedule write it a few times per horizon,
///   not at every firing.
///
/// From the first declaration that wins, only the winning schedule's hosts run the job's
/// slots; a host still on an older definition skips until its job list is updated, or
/// until the winning hosts have not fired for the winning schedule's horizon.
pub fn declare_schedule(
    current: Option<&ScheduleDecl>,
    asked: &ScheduleDecl,
) -> Option<ScheduleDecl> {
    let Some(c) = current else {
        return Some(asked.clone());
    };
    let stale = asked.seen_at.saturating_sub(c.seen_at) > c.horizon;
    if c.fingerprint == asked.fingerprint {
        let refresh = asked.seen_at.saturating_sub(c.seen_at) > c.horizon / 4;
        return (asked.defined_at > c.defined_at || refresh || stale).then(|| ScheduleDecl {
            defined_at: asked.defined_at.max(c.defined_at),
            ..asked.clone()
        });
    }
    let newer = (asked.defined_at, &asked.fingerprint) > (c.defined_at, &c.fingerprint);
    (newer || c.host == asked.host || stale).then(|| asked.clone())
}

/// The largest clock tolerance the rules use, µs: 1000 years. A larger `clock_tolerance`
/// means "any difference" and would overflow the sum of the store's clock and the
/// tolerance (the bound of the slots that count as recorded).
pub const MAX_TOLERANCE_USEC: i64 = 1000 * 366 * 86_400 * 1_000_000;

/// The clock tolerance of `req`, µs: 0 without a clock check, else the tolerance limited to
/// 0..=[`MAX_TOLERANCE_USEC`].
pub fn tolerance_usec(req: &ClaimRequest) -> i64 {
    req.clock
        .map_or(0, |c| c.tolerance.clamp(0, MAX_TOLERANCE_USEC))
}

/// The latest slot, µs since the epoch, that counts as recorded for `req` at store time
/// `now`: `now` plus [`tolerance_usec`]. Slots further ahead were forced or recorded by a
/// clock that was ahead, and do not hold back later slots. A store reads
/// [`ClaimState::newest`] with this bound.
pub fn newest_bound(now: i64, req: &ClaimRequest) -> i64 {
    now.saturating_add(tolerance_usec(req))
}

/// A span in µs, saturating at `i64::MAX`.
pub fn duration_usec(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

/// A rule that makes the request an error rather than an answer; nothing is written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RuleError {
    /// The claim's run id is already recorded and that record no longer holds its lease
    /// (or belongs to another job or holder): there is never a second record under one run
    /// id.
    #[error("run {run_id} is already recorded and no longer holds its lease")]
    AlreadyRecorded {
        /// The run id.
        run_id: String,
    },
    /// The job's fencing token would pass `i64::MAX`.
    #[error("job {job}: fencing token overflow")]
    TokenOverflow {
        /// The job.
        job: String,
    },
    /// A second non-forced `succeeded` record for one slot (also the unique index
    /// `jobguard_run_one_success` of PostgreSQL and MySQL/MariaDB).
    #[error("slot already succeeded by run {by}")]
    SecondSuccess {
        /// The run id of the record that succeeded first.
        by: String,
    },
    /// `finish` with `running`, which is not an end state.
    #[error("finish: run {run_id}: running is not an end state")]
    NotAnEndState {
        /// The run id.
        run_id: String,
    },
}

/// What a claim needs to know of one job, read in the same atomic step that applies the
/// decision. All times are µs since the Unix epoch by the store's clock.
#[derive(Debug, Clone, Default)]
pub struct ClaimState {
    /// The store's time.
    pub now: i64,
    /// The job's lease row, released (empty holder) or not; `None` if never granted. Its
    /// token is the job's fencing-token counter.
    pub lease: Option<Lease>,
    /// The record under the request's run id, if one exists (a claim sent again).
    pub retried: Option<Run>,
    /// Records by slot, each slot's in the order the store recorded them (oldest first):
    /// every record of the asked slot, and with [`ClaimRequest::queued_first`] every
    /// record of every slot that has a record resolved [`Resolution::Queued`].
    pub slots: BTreeMap<i64, Vec<Run>>,
    /// The job's latest recorded slot no later than [`newest_bound`].
    pub newest: Option<i64>,
    /// The newest record carrying the lease row's token (for [`Claim::Busy`]).
    pub lease_run: Option<Run>,
}

/// The writes of a granted claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// The new lease row (the job's next fencing token).
    pub lease: Lease,
    /// The new `running` record.
    pub run: Run,
    /// The records whose resolution becomes [`Resolution::Rerun`], by run id.
    pub rerun: Vec<String>,
    /// [`ClaimState::newest`], answered as [`Claim::Claimed::previous_slot`].
    pub previous_slot: Option<i64>,
}

/// The decision of [`claim`].
#[derive(Debug, Clone)]
pub enum ClaimDecision {
    /// Nothing is written; answer this ([`Claim::ClockSkew`], [`Claim::SlotDone`],
    /// [`Claim::SlotHeld`], [`Claim::SlotBehind`] or [`Claim::Busy`]).
    Refuse(Claim),
    /// A claim sent again while its grant holds: nothing is written; answer the grant again
    /// with `previous_slot` `None`.
    Retried {
        /// The lease row, as it is.
        lease: Lease,
        /// The record of the first sending.
        run: Run,
    },
    /// Apply these writes, then answer [`Claim::Claimed`].
    Grant(Grant),
}

impl ClaimDecision {
    /// The answer of [`crate::store::Store::claim`] once the writes (if any) are applied.
    pub fn answer(&self) -> Claim {
        match self {
            ClaimDecision::Refuse(c) => c.clone(),
            ClaimDecision::Retried { lease, run } => Claim::Claimed {
                lease: lease.clone(),
                run: run.clone(),
                previous_slot: None,
            },
            ClaimDecision::Grant(g) => Claim::Claimed {
                lease: g.lease.clone(),
                run: g.run.clone(),
                previous_slot: g.previous_slot,
            },
        }
    }
}

/// Whether a slot's records make it done, held or neither (done wins over held).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SlotState {
    Free,
    Held,
    Done,
}

fn slot_state(runs: &[Run]) -> SlotState {
    if runs.iter().any(is_done) {
        SlotState::Done
    } else if runs.iter().any(|r| r.resolution == Some(Resolution::Held)) {
        SlotState::Held
    } else {
        SlotState::Free
    }
}

/// The records of `runs` that [`crate::store::RunQuery::slots_from`] `from` (µs since
/// the epoch) asks for, job by job:
/// - every record of the slots at or after `from`;
/// - every record of the newest slot before it (the anchor: it bounds the first gap, and
///   a run still live there holds that gap back);
/// - every record of the newest slot before it with a record that names a schedule
///   ([`crate::guard::ledger::names_a_schedule`]): whether that schedule is the current one
///   decides whether the gaps from `from` on are judged at all;
/// - the first record started (lowest `started_at`; of several started in the same µs,
///   one: here the lowest run id, in the SQL stores the one their index finds first) of a
///   slot before it: whether the job had a history when an elapse in the first gap came
///   due.
///
/// With these, a check of the slots from `from` on ([`crate::ops::audit::audit_job`]) judges
/// as it would with every record, except where the schedule changed back to an earlier
/// one before `from`. For the stores that read every record and filter them here (`run`
/// gives the record of an item); the SQL stores ask the same in their query.
pub fn window<T>(items: &mut Vec<T>, from: i64, run: impl Fn(&T) -> &Run) {
    #[derive(Default)]
    struct Before {
        anchor: i64,
        named: Option<i64>,
        first: Option<(i64, String)>,
    }
    let mut before: BTreeMap<String, Before> = BTreeMap::new();
    for r in items.iter().map(&run).filter(|r| r.slot.usec < from) {
        let b = before.entry(r.job.clone()).or_insert(Before {
            anchor: i64::MIN,
            ..Before::default()
        });
        b.anchor = b.anchor.max(r.slot.usec);
        if crate::guard::ledger::names_a_schedule(r) {
            b.named = Some(b.named.map_or(r.slot.usec, |n| n.max(r.slot.usec)));
        }
        let first = (r.started_at, r.run_id.clone());
        if b.first.as_ref().is_none_or(|f| first < *f) {
            b.first = Some(first);
        }
    }
    items.retain(|item| {
        let r = run(item);
        r.slot.usec >= from
            || before.get(&r.job).is_some_and(|b| {
                r.slot.usec == b.anchor
                    || b.named == Some(r.slot.usec)
                    || b.first.as_ref().is_some_and(|(_, id)| *id == r.run_id)
            })
    });
}

/// A record that makes its slot done: it succeeded, or a person resolved it as done.
pub fn is_done(run: &Run) -> bool {
    run.outcome == Outcome::Succeeded || run.resolution == Some(Resolution::Done)
}

/// The record with the highest `rank`, then the latest `started_at`, then the latest
/// recorded (the stores' `ORDER BY rank DESC, started_at DESC, seq DESC LIMIT 1`).
pub fn newest_by(runs: &[Run], rank: impl Fn(&Run) -> Option<u8>) -> Option<&Run> {
    let mut best: Option<(u8, i64, &Run)> = None;
    for run in runs {
        let Some(r) = rank(run) else { continue };
        if best.is_none_or(|(br, bs, _)| (r, run.started_at) >= (br, bs)) {
            best = Some((r, run.started_at, run));
        }
    }
    best.map(|(_, _, run)| run)
}

/// Decides a claim (the rules of [`crate::store::Store::claim`]) on `state`, read for
/// `req` as [`ClaimState`] says.
///
/// A claim sent again (its run id is recorded) is decided first, before the clock check:
/// the first sending passed that check, and its grant is answered again while it holds
/// whatever the host's clock says now (as SQLite and Redis do; PostgreSQL and MySQL check
/// the clock first and answer [`Claim::ClockSkew`]).
///
/// # Errors
/// [`RuleError::AlreadyRecorded`] for a recorded run id whose record no longer holds the
/// lease; [`RuleError::TokenOverflow`] when the token counter is at `i64::MAX`.
pub fn claim(state: &ClaimState, req: &ClaimRequest) -> Result<ClaimDecision, RuleError> {
    let now = state.now;
    let holder = req.holder.id();
    let job = &req.run.job;
    // 0. A claim sent again after its answer was lost.
    if let Some(run) = &state.retried {
        return match &state.lease {
            Some(lease)
                if run.job == *job
                    && run.outcome == Outcome::Running
                    && lease.holder == holder
                    && lease.token == run.fencing_token
                    && lease.expire_at > now =>
            {
                Ok(ClaimDecision::Retried {
                    lease: lease.clone(),
                    run: run.clone(),
                })
            }
            _ => Err(RuleError::AlreadyRecorded {
                run_id: req.run.run_id.clone(),
            }),
        };
    }
    // 1. The host's clock against the store's.
    if let Some(check) = req.clock {
        let diff = (i128::from(now) - i128::from(check.host_now)).abs();
        if diff > i128::from(tolerance_usec(req)) {
            return Ok(ClaimDecision::Refuse(Claim::ClockSkew { store_now: now }));
        }
    }
    // 2. Queued re-runs first, oldest slot first; queued records of done slots are settled.
    let mut slot = req.run.slot.clone();
    let mut trigger = req.run.trigger.clone();
    let mut picked = false;
    let mut settled: Vec<i64> = Vec::new();
    if req.queued_first {
        for (usec, runs) in &state.slots {
            let Some(queued) = runs
                .iter()
                .find(|r| r.resolution == Some(Resolution::Queued))
            else {
                continue;
            };
            match slot_state(runs) {
                SlotState::Done => settled.push(*usec),
                SlotState::Free if !picked => {
                    slot = Slot {
                        usec: *usec,
                        zone: queued.slot.zone.clone(),
                    };
                    trigger = "rerun".to_string();
                    picked = true;
                }
                _ => {}
            }
        }
    }
    let runs: &[Run] = state.slots.get(&slot.usec).map_or(&[], Vec::as_slice);
    // 3. Done, then held, unless forced.
    if !req.run.forced {
        let done = newest_by(runs, |r| {
            if r.outcome == Outcome::Succeeded {
                Some(1)
            } else if r.resolution == Some(Resolution::Done) {
                Some(0)
            } else {
                None
            }
        });
        if let Some(by) = done {
            return Ok(ClaimDecision::Refuse(Claim::SlotDone { by: by.clone() }));
        }
        if let Some(by) = newest_by(runs, |r| {
            (r.resolution == Some(Resolution::Held)).then_some(0)
        }) {
            return Ok(ClaimDecision::Refuse(Claim::SlotHeld { by: by.clone() }));
        }
    }
    // 4. A slot behind the ledger.
    if req.in_order
        && !picked
        && let Some(newest) = state.newest
        && newest > slot.usec
    {
        return Ok(ClaimDecision::Refuse(Claim::SlotBehind { newest }));
    }
    // 5. Another holder's unexpired lease.
    if let Some(lease) = &state.lease
        && !lease.holder.is_empty()
        && lease.expire_at > now
        && lease.holder != holder
    {
        return Ok(ClaimDecision::Refuse(Claim::Busy {
            lease: lease.clone(),
            run: state.lease_run.clone(),
        }));
    }
    // 5b. The asked slot's attempt on another machine or boot whose lease lapsed a moment ago: its
    // holder may be cut off with the outcome in hand (see FOREIGN_GRACE_USEC).
    if let (Some(lease), Some(run)) = (&state.lease, &state.lease_run)
        && !lease.holder.is_empty()
        && lease.holder != holder
        && now < lease.expire_at.saturating_add(FOREIGN_GRACE_USEC)
        && run.outcome == Outcome::Running
        && run.slot.usec == slot.usec
        && from_another_boot(run, req)
    {
        return Ok(ClaimDecision::Refuse(Claim::Busy {
            lease: lease.clone(),
            run: state.lease_run.clone(),
        }));
    }
    // 5c. An earlier attempt at the slot on another machine or boot, still running under a lease
    // that has passed to a later grant since: when that lease lapsed is not known here, so
    // the slot waits until a recovery pass judges the attempt.
    if let Some(lease) = &state.lease
        && let Some(earlier) = newest_by(runs, |r| {
            (r.outcome == Outcome::Running
                && r.fencing_token != lease.token
                && from_another_boot(r, req))
            .then_some(0)
        })
    {
        return Ok(ClaimDecision::Refuse(Claim::Busy {
            lease: lease.clone(),
            run: Some(earlier.clone()),
        }));
    }
    // 6. The grant.
    let token = state
        .lease
        .as_ref()
        .map_or(0, |l| l.token)
        .checked_add(1)
        .ok_or_else(|| RuleError::TokenOverflow { job: job.clone() })?;
    let lease = Lease {
        job: job.clone(),
        holder,
        host: req.holder.host.clone(),
        token,
        acquired_at: now,
        expire_at: now.saturating_add(duration_usec(req.ttl)),
        renewal: 0,
    };
    let attempt = i64::try_from(runs.len())
        .unwrap_or(i64::MAX)
        .saturating_add(1);
    let run = Run {
        run_id: req.run.run_id.clone(),
        job: job.clone(),
        slot: slot.clone(),
        attempt,
        outcome: Outcome::Running,
        reason: None,
        exit_status: None,
        forced: req.run.forced,
        trigger,
        host: req.holder.host.clone(),
        machine_id: req.holder.machine_id.clone(),
        boot_id: req.holder.boot_id.clone(),
        pid: req.holder.pid,
        pid_start: req.holder.pid_start,
        invocation_id: req.run.invocation_id.clone(),
        started_at: now,
        finished_at: None,
        fencing_token: token,
        report: BTreeMap::new(),
        resolution: None,
    };
    let mut rerun: Vec<String> = runs
        .iter()
        .filter(|r| matches!(r.resolution, Some(Resolution::Queued | Resolution::Held)))
        .map(|r| r.run_id.clone())
        .collect();
    for usec in settled {
        for r in state.slots.get(&usec).map_or(&[][..], Vec::as_slice) {
            if r.resolution == Some(Resolution::Queued) && !rerun.contains(&r.run_id) {
                rerun.push(r.run_id.clone());
            }
        }
    }
    Ok(ClaimDecision::Grant(Grant {
        lease,
        run,
        rerun,
        previous_slot: state.newest,
    }))
}

/// The records of `grant.rerun` a store may mark [`Resolution::Rerun`] ahead of the grant,
/// in an atomic write of their own, when the grant with all of them would not fit in one
/// (etcd: 128 operations per transaction, `--max-txn-ops`): every one but the newest
/// queued and the newest held record of the granted slot. Those two keep the granted slot
/// as it was (queued, held) until the grant settles them, and a done slot stays done
/// whatever happens to its queued records; so settling these ahead changes no slot's state
/// and, decided again on the state they leave, the same claim is granted the same slot
/// with only the rest to settle. Returned as the records will read, oldest slot first.
pub fn settle_ahead(state: &ClaimState, grant: &Grant) -> Vec<Run> {
    let granted = grant.run.slot.usec;
    let runs: &[Run] = state.slots.get(&granted).map_or(&[], Vec::as_slice);
    let keep: Vec<&str> = [Resolution::Queued, Resolution::Held]
        .into_iter()
        .filter_map(|x| newest_by(runs, |r| (r.resolution == Some(x)).then_some(0)))
        .map(|r| r.run_id.as_str())
        .collect();
    state
        .slots
        .values()
        .flatten()
        .filter(|r| grant.rerun.contains(&r.run_id) && !keep.contains(&r.run_id.as_str()))
        .map(|r| Run {
            resolution: Some(Resolution::Rerun),
            ..r.clone()
        })
        .collect()
}

/// Whether `run` was recorded on another machine, or another boot, than `req`'s holder
/// runs on; a holder without a machine id counts as another machine
/// ([`FOREIGN_GRACE_USEC`]). Machines made from one image can share a machine id, and
/// only this very boot's shim replays what it kept before it claims: a record of another
/// boot (this machine's or a copy's) may have an outcome in hand elsewhere.
fn from_another_boot(run: &Run, req: &ClaimRequest) -> bool {
    run.machine_id != req.holder.machine_id
        || run.boot_id != req.holder.boot_id
        || req.holder.machine_id.is_empty()
}

/// Whether `row` (the job's lease row) is still the grant `lease` (same holder, token and
/// renewal generation, not released) and unexpired at `now`.
pub fn holds(row: Option<&Lease>, lease: &Lease, now: i64) -> bool {
    grant_live(row, lease, now) && row.is_some_and(|l| l.renewal == lease.renewal)
}

/// Whether `row` is still the grant of `lease` (same holder and token, not released) and
/// unexpired at `now`, whatever its renewal generation.
fn grant_live(row: Option<&Lease>, lease: &Lease, now: i64) -> bool {
    row.is_some_and(|l| {
        !l.holder.is_empty()
            && l.holder == lease.holder
            && l.token == lease.token
            && l.expire_at > now
    })
}

/// What [`mark`] decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MarkStep {
    /// The answer; nothing to write.
    Answer(Marking),
    /// Insert this mark if the key is still absent and the lease still the run's.
    Insert(Mark),
}

/// Decides a mark ([`crate::store::Store::mark`]) at store time `now` (µs), given the
/// lease row of `new.job` (`lease`, read only when `fenced`) and the key's current mark:
/// 1. with `fenced`, a lease row without a holder, with another token, or expired at
///    `now` refuses ([`Marking::Fenced`]), whether or not the key is recorded: the run
///    has lost its lease and learns it here;
/// 2. a recorded key answers [`Marking::Already`];
/// 3. else the mark is inserted with `marked_at` = `now`.
pub fn mark(
    now: i64,
    lease: Option<&Lease>,
    existing: Option<Mark>,
    new: &Mark,
    fenced: bool,
) -> MarkStep {
    if !mark_fence_holds(now, lease, new, fenced) {
        // The lease that fenced it, unless released (as `Store::lease` answers).
        let held = lease.filter(|l| !l.holder.is_empty());
        return MarkStep::Answer(Marking::Fenced(held.cloned()));
    }
    if let Some(m) = existing {
        return MarkStep::Answer(Marking::Already(m));
    }
    MarkStep::Insert(Mark {
        marked_at: now,
        ..new.clone()
    })
}

/// Whether a mark of `mark.token` with `fenced` may be recorded at store time `now` (µs)
/// on the job's lease row `row` ([`mark`], [`crate::store::Store::insert_mark`]): the
/// row has a holder and the mark's token and has not expired. A takeover changes the
/// token, a release empties the holder, and expiry needs no write at all, so each
/// store's insert judges all three in its one atomic step.
pub fn mark_fence_holds(now: i64, row: Option<&Lease>, mark: &Mark, fenced: bool) -> bool {
    !fenced
        || row.is_some_and(|l| !l.holder.is_empty() && l.token == mark.token && l.expire_at > now)
}

/// Until when a fenced write that [`mark_fence_holds`] allowed on `row` may be applied, µs
/// since the epoch by the store's clock: the lease's expiry (`None` without a fence;
/// `i64::MIN`, never, without a lease row). A store whose write comes later than its read
/// (a round trip, a host frozen in between) applies it only before this time by its own
/// clock, so a mark whose write arrives after its lease ended is not recorded.
pub fn fence_deadline(row: Option<&Lease>, fenced: bool) -> Option<i64> {
    fenced.then(|| row.map_or(i64::MIN, |l| l.expire_at))
}

/// The lease row once released: no holder, `expire_at` 0; the token (the job's counter)
/// and `acquired_at` stay.
pub fn released(row: &Lease) -> Lease {
    Lease {
        holder: String::new(),
        host: String::new(),
        expire_at: 0,
        ..row.clone()
    }
}

/// Decides a renewal ([`crate::store::Store::renew`]) at store time `now` on the job's
/// lease row `row`: the new `expire_at` (`now` + `ttl`, µs), to be written with the
/// renewal generation `next`, or `None` (lost; nothing is written).
///
/// The renewal holds when the row is still `lease`'s grant, unexpired, and its generation
/// is the one `lease` presents (`lease.renewal`, the last this holder knows it wrote) or
/// `next` itself (this very renewal, sent again after its answer was lost). Two copies of
/// one holder resumed from one snapshot present the same generation with different
/// `next`s: the first to arrive moves the row on, and every later renewal of the other is
/// refused, so it stops its command ([`crate::shim::renew`]).
pub fn renew(
    now: i64,
    row: Option<&Lease>,
    lease: &Lease,
    next: i64,
    ttl: Duration,
) -> Option<i64> {
    (grant_live(row, lease, now)
        && row.is_some_and(|l| l.renewal == lease.renewal || l.renewal == next))
    .then(|| now.saturating_add(duration_usec(ttl)))
}

/// Whether a copy of `lease`'s holder holds the row at `now`: same holder and token,
/// unexpired, but another renewal generation than `lease` presents. Such a row's record
/// is the copy's as much as this one's, and stays with the copy that renewed
/// ([`finish`]).
fn copy_holds(row: Option<&Lease>, lease: &Lease, now: i64) -> bool {
    grant_live(row, lease, now) && !holds(row, lease, now)
}

/// The writes of [`finish`] and [`interrupt`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndDecision {
    /// The record as it becomes, if it changes.
    pub record: Option<Run>,
    /// Whether the lease row is released ([`released`]).
    pub release: bool,
}

impl EndDecision {
    /// The answer of [`crate::store::Store::finish`].
    pub fn finished(&self) -> Finished {
        Finished {
            recorded: self.record.is_some(),
            released: self.release,
        }
    }
}

/// What [`finish`] and [`interrupt`] need to know, read in the same atomic step that
/// applies the decision.
#[derive(Debug, Clone, Copy)]
pub struct RunState<'a> {
    /// The store's time, µs since the epoch.
    pub now: i64,
    /// The job's lease row, released or not.
    pub lease: Option<&'a Lease>,
    /// The record under the run id, if any.
    pub record: Option<&'a Run>,
    /// Every record of that record's slot (for [`finish`]'s one-success rule; unused by
    /// [`interrupt`]).
    pub slot_runs: &'a [Run],
}

/// Decides [`crate::store::Store::finish`] (with `kept`, [`crate::store::Store::finish_kept`])
/// on `state`: its lease row is that of `lease.job`, its record the one under `run_id`.
///
/// The record changes if it is `running` with `lease.token` in `lease.job`; if `lease`
/// still holds the row ([`holds`]), unless `kept` or the outcome is `lease_lost`; and in
/// every case if no copy of the holder holds it (same holder and token, unexpired, another renewal
/// generation: the copy that renewed last is the one whose command still runs). The row
/// is released if `lease` holds it. The record's `finished_at` is `now`, or with `kept`
/// the command's own end ([`Finish::ended_at`]) within the record's start and
/// [`cut_end`].
///
/// # Errors
/// [`RuleError::NotAnEndState`] for `running`; [`RuleError::SecondSuccess`] when a
/// non-forced record would be the slot's second non-forced success. Nothing is written.
pub fn finish(
    state: &RunState<'_>,
    lease: &Lease,
    run_id: &str,
    finish: &Finish,
    kept: bool,
) -> Result<EndDecision, RuleError> {
    if finish.outcome == Outcome::Running {
        return Err(RuleError::NotAnEndState {
            run_id: run_id.to_string(),
        });
    }
    let now = state.now;
    let held = holds(state.lease, lease, now);
    let copy = copy_holds(state.lease, lease, now);
    let record = state.record.filter(|r| {
        r.run_id == run_id
            && r.outcome == Outcome::Running
            && r.fencing_token == lease.token
            && r.job == lease.job
            && (kept || finish.outcome == Outcome::LeaseLost || held)
            && !copy
    });
    let record = match record {
        None => None,
        Some(r) => {
            if finish.outcome == Outcome::Succeeded
                && !r.forced
                && let Some(by) = state
                    .slot_runs
                    .iter()
                    .find(|o| o.run_id != r.run_id && o.outcome == Outcome::Succeeded && !o.forced)
            {
                return Err(RuleError::SecondSuccess {
                    by: by.run_id.clone(),
                });
            }
            // A kept outcome ends when its command ended, as far as the store allows.
            let finished_at = match (kept, finish.ended_at) {
                (true, Some(t)) => t.max(r.started_at).min(cut_end(r, state.lease, now)),
                _ => now,
            };
            Some(Run {
                outcome: finish.outcome,
                reason: finish.reason.clone(),
                exit_status: finish.exit_status,
                finished_at: Some(finished_at),
                report: finish.report.clone(),
                resolution: finish.resolution,
                ..r.clone()
            })
        }
    };
    Ok(EndDecision {
        record,
        release: held,
    })
}

/// Decides [`crate::store::Store::interrupt`] on `state`: its record is the one under
/// `run.run_id` as the store holds it, its lease row that of `run.job`. The record
/// becomes `interrupted` if it is still `running`; the row is released if it is still the
/// run's grant (same holder and token), expired or not.
pub fn interrupt(
    state: &RunState<'_>,
    run: &Run,
    reason: &str,
    resolution: Resolution,
) -> EndDecision {
    let now = state.now;
    let record = state
        .record
        .filter(|r| r.outcome == Outcome::Running)
        .map(|r| Run {
            outcome: Outcome::Interrupted,
            reason: Some(reason.to_string()),
            resolution: Some(resolution),
            finished_at: Some(cut_end(r, state.lease, now)),
            ..r.clone()
        });
    let holder = run.holder().id();
    let release = state.lease.is_some_and(|l| {
        !l.holder.is_empty() && l.holder == holder && l.token == run.fencing_token
    });
    EndDecision { record, release }
}

/// The end [`interrupt`] records for `record`, a `running` record found cut at store
/// time `now` (µs since the epoch, store clock): the latest it can have run by what the
/// store holds, so that its duration is its own time and not the downtime until it was
/// found (a host off for hours is found at its next boot).
///
/// - The job's lease row is still its grant (same holder and token): the lease's
///   `expire_at`, its last renewal plus the time to live. The shim stops the command
///   before then (self-fencing, [`crate::guard::lease::FENCE_MARGIN`]).
/// - A later grant holds the row (a higher token): that grant's `acquired_at`. A grant is
///   made only once the run's lease had expired or been released.
/// - Otherwise (the row was released by a person, or is missing): `now`.
///
/// Never before the record's `started_at`, never after `now`.
pub fn cut_end(record: &Run, lease: Option<&Lease>, now: i64) -> i64 {
    let end = match lease {
        Some(l)
            if !l.holder.is_empty()
                && l.holder == record.holder().id()
                && l.token == record.fencing_token =>
        {
            l.expire_at
        }
        Some(l) if l.token > record.fencing_token => l.acquired_at,
        _ => now,
    };
    end.min(now).max(record.started_at)
}

/// Decides [`crate::store::Store::unlock`] at store time `now` on the job's lease row:
/// the lease that is ended (if one was unexpired), and whether the row is released (it is
/// whenever it has a holder).
pub fn unlock(now: i64, row: Option<&Lease>) -> (Option<Lease>, bool) {
    let held = row.filter(|l| !l.holder.is_empty());
    (held.filter(|l| l.expire_at > now).cloned(), held.is_some())
}

/// Whether retention may delete a slot whose records are `slot_runs`
/// ([`crate::store::Store::delete_slots`]): none of them is `running` or started at or after
/// `started_before` (µs since the epoch, store clock), so a claim that added an attempt
/// since retention chose the slot keeps the slot whole.
pub fn retention_may_delete(slot_runs: &[Run], started_before: i64) -> bool {
    !slot_runs
        .iter()
        .any(|r| r.outcome == Outcome::Running || r.started_at >= started_before)
}

/// Decides [`crate::store::Store::resolve`] on every record of one slot: the run ids whose
/// resolution becomes `resolution`. Only `interrupted`, `lease_lost` and `failed` records
/// not yet resolved as `rerun`, `done` or `resolution` change; a done slot gets no
/// [`Resolution::Queued`].
pub fn resolve(slot_runs: &[Run], resolution: Resolution) -> Vec<String> {
    if resolution == Resolution::Queued && slot_runs.iter().any(is_done) {
        return Vec::new();
    }
    slot_runs
        .iter()
        .filter(|r| {
            matches!(
                r.outcome,
                Outcome::Interrupted | Outcome::LeaseLost | Outcome::Failed
            ) && !matches!(
                r.resolution,
                Some(x) if x == Resolution::Rerun || x == Resolution::Done || x == resolution
            )
        })
        .map(|r| r.run_id.clone())
        .collect()
}

#[cfg(test)]
pub(crate) mod tests;

//! One invocation of `jobguard run JOB`: lock, slot, lease, ledger, child, renew, record,
//! report.
//!
//! Order of a run (the contract of docs/jobs.md, "How a run works"):
//! 1. take the job's local flock without waiting ([`crate::guard::lock`]); held → skip; then end
//!    what earlier attempts on this host left running ([`leftover`]);
//! 2. compute the slot ([`slot`]): the latest elapse of the schedule at or before the
//!    shim's own clock reading at start (`--slot` names another). The timer's fire time
//!    (`TRIGGER_TIMER_REALTIME_USEC`) never picks it: systemd 252 gives later firings the
//!    first firing's value. This is right because the job list refuses a job whose
//!    firings (late by up to `randomized_delay` + AccuracySec=1s) could land after the
//!    next elapse; a service started later still takes the newer slot, and the older
//!    one is recorded as passed over (`gap` event, `jobguard audit`);
//! 3. in one atomic store step ([`crate::store::Store::claim`]): skip if the slot is done
//!    or held, skip if another holder's lease is unexpired, else take the lease (with a
//!    new fencing token) and record `running`. A holder of this installation that is
//!    gone is cut off as `jobguard recover` would once its lease has expired, and the
//!    claim tried once more ([`leftover::end_gone_holder`]);
//! 4. run the command as a child ([`child`]) with the `JOBGUARD_*` variables, renewing the
//!    lease every third of its time to live (or more often, see [`renew`]) and forwarding
//!    stop signals; the command is dead before the lease could expire;
//! 5. record the outcome and release the lease, both conditional on the fencing token;
//!    exit with the command's status (128+N for signal N). A skip exits 0.
//!
//! Interrupted slots that `jobguard recover` queued for a re-run are run first, each as
//! its own attempt through the same steps.

pub mod child;
pub mod environment;
pub mod leftover;
pub mod pending;
pub mod renew;
pub mod report;
pub mod rerun;
pub mod slot;

use std::fs;
use std::os::unix::fs::DirBuilderExt;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::exit::{self, Status};
use crate::guard::identity;
use crate::guard::lease::{Holder, Lease};
use crate::guard::ledger::{Finish, NewRun, Outcome, Resolution, Run, Slot, format_usec};
use crate::guard::lock::{JobLock, LockAttempt};
use crate::joblist::job::{CatchUp, Job, OnInterrupted, OnStoreUnavailable, SettleFailures};
use crate::paths;
use crate::store::{self, Claim, ClaimRequest, ClockCheck, ScheduleDecl, Store, StoreError};
use crate::systemd::journal::{self, Event, Kind};
use crate::systemd::logind;

/// What the caller asks of one `jobguard run`.
#[derive(Debug, Clone, Default)]
pub struct Request {
    /// `--slot`: run this slot (systemd timestamp syntax or RFC 3339) instead of the current one.
    pub slot: Option<String>,
    /// `--force`: run even if the slot is done or held; recorded as forced.
    pub force: bool,
    /// Run only the slots queued for a re-run, oldest first, and not the current slot
    /// (`jobguard recover` without systemd). `slot` and `force` are then ignored.
    pub queued_only: bool,
    /// Who forced this run (`jobguard rerun` outside systemd): kept in the run's report
    /// as [`rerun::FORCED_BY`].
    pub forced_by: Option<String>,
}

/// Runs `job` once for its current slot (after any queued re-runs); returns the exit status
/// of [`crate::exit`]. Every skip and failure is reported to the journal and stderr.
///
/// The steps: [`prepare`] (signals, the user, the runtime directories, the local lock),
/// [`start`] (the slot, the store, outcomes kept on this host, what earlier attempts
/// left), then [`Shim::queued`] for `jobguard recover` without systemd, or
/// [`Shim::slots`]: requested re-runs, the declared schedule, a pause, catch-ups before,
/// the slot itself ([`run_slot`]: claim, supervise, record), catch-ups after, re-runs
/// requested meanwhile.
pub fn run(job: &Job, req: &Request) -> u8 {
    journal::init();
    let (account, mut lock) = match prepare(job) {
        Ok(x) => x,
        Err(code) => return code,
    };
    let now = crate::guard::clock::Clock::now_usec(&crate::guard::clock::SystemClock);
    let (current, store) = match start(job, &mut lock, req, now) {
        Ok(x) => x,
        Err(code) => return code,
    };
    let shim = Shim {
        job,
        store,
        lock,
        holder: crate::guard::lease::Holder::current(),
        account,
        status: exit::OK,
    };
    if req.queued_only {
        return shim.queued(&current, now);
    }
    shim.slots(req, &current, now)
}

/// One run's state: the job, its store, the local lock it holds, who holds its lease,
/// the user its command runs as, and the status to exit with: the first that was not 0
/// ([`Shim::note`]), unless a step ends the run with its own (a store that fails).
struct Shim<'a> {
    job: &'a Job,
    store: Box<dyn Store>,
    lock: JobLock,
    holder: Holder,
    account: Option<child::Account>,
    status: u8,
}

/// Blocks the signals the supervisor waits for, looks up the job's user (root is needed
/// for another user), makes the runtime directories, reads the environment systemd gives,
/// and takes the job's local lock. A lock another process holds is a skip: `Err(0)`.
///
/// # Errors
/// The exit status to end with.
fn prepare(job: &Job) -> Result<(Option<child::Account>, JobLock), u8> {
    if let Err(e) = child::block_signals() {
        eprintln!("jobguard: {}: cannot block signals: {e}", job.name);
        return Err(exit::OS_ERROR);
    }
    let account = match &job.user {
        Some(name) => match child::lookup_account(name) {
            Ok(a) => {
                let me = nix::unistd::geteuid();
                if !me.is_root() && me != a.uid {
                    eprintln!(
                        "jobguard: {}: running as user {name:?} needs root",
                        job.name
                    );
                    return Err(exit::NO_PERMISSION);
                }
                Some(a)
            }
            Err(e) => {
                eprintln!("jobguard: {}: {e}", job.name);
                return Err(exit::CONFIG);
            }
        },
        None => None,
    };
    if let Err(e) = prepare_runtime_dirs() {
        eprintln!("jobguard: {}: {e}", job.name);
        return Err(exit::OS_ERROR);
    }
    // Before any lease: reading it may wait for systemd (crate::shim::environment).
    environment::prepare(job);
    match JobLock::try_acquire(&paths::lock_dir(), &job.name) {
        Ok(LockAttempt::Acquired(l)) => Ok((account, l)),
        Ok(LockAttempt::Busy { holder }) => {
            let who = holder
                .map(|h| h.to_string())
                .unwrap_or_else(|| "another process".into());
            let mut ev = Event::new(
                Kind::SkippedLockHeld,
                &job.name,
                format!("skipped: another instance on this host holds the job's lock ({who})"),
            );
            ev.reason = Some("lock-held".into());
            journal::emit(&ev);
            journal::status(&format!("skipped: lock held by {who}"));
            Err(exit::OK)
        }
        Err(e) => {
            eprintln!("jobguard: {}: {e}", job.name);
            Err(exit::OS_ERROR)
        }
    }
}

/// Computes the slot (at `now`, µs since the epoch), opens the store, records the outcomes
/// this host kept because the store could not take them (before anything is decided
/// about their slots), refuses a future `--slot` without `--force`, and ends what earlier
/// attempts on this host left running.
///
/// # Errors
/// The exit status to end with.
fn start(
    job: &Job,
    lock: &mut JobLock,
    req: &Request,
    now: i64,
) -> Result<(slot::Current, Box<dyn Store>), u8> {
    let current = slot::for_request(job, req.slot.as_deref(), now).map_err(|e| {
        eprintln!("jobguard: {}: {e}", job.name);
        exit::CONFIG
    })?;
    let mut store = open_store(job)?;
    if let Err(e) = with_retry(job, || pending::replay(store.as_mut(), &job.name)) {
        return Err(store_failed(job, &e));
    }
    if let Some(given) = &req.slot
        && current.slot.usec > now
        && !req.force
    {
        eprintln!(
            "jobguard: {}: slot {given} is in the future; running it now would make its own firing a skip (use --force to insist)",
            job.name
        );
        return Err(exit::USAGE);
    }
    // Nothing starts while processes of an earlier attempt on this host live: looked for
    // when the lock says the previous shim did not see its run to the end.
    if lock.unfinished_run().is_some() {
        leftover::end_earlier_attempts(job, store.as_mut())?;
        if let Err(e) = lock.clear_run_id() {
            eprintln!("jobguard: {}: {e}", job.name);
        }
    }
    Ok((current, store))
}

impl Shim<'_> {
    /// Keeps `status` if it is the first that is not 0.
    fn note(&mut self, status: u8) {
        if self.status == exit::OK {
            self.status = status;
        }
    }

    /// Declares the schedule this host runs the job by ([`other_schedule`]).
    fn other_schedule(&mut self, slot: &Slot) -> Option<u8> {
        let store = self.store.as_mut();
        other_schedule(self.job, store, &self.holder, slot)
    }

    /// The job's pause windows ([`crate::ops::pause`]).
    ///
    /// # Errors
    /// The exit status of the store's failure.
    fn pauses(&mut self) -> Result<crate::ops::pause::Pauses, u8> {
        let job = self.job;
        with_retry(job, || {
            crate::ops::pause::read(self.store.as_mut(), &job.name)
        })
        .map_err(|e| store_failed(job, &e))
    }

    /// `jobguard recover` without systemd: only the queued re-runs, not the current slot;
    /// nothing when another host's schedule wins or the job is paused now.
    fn queued(mut self, current: &slot::Current, now: i64) -> u8 {
        let job = self.job;
        if let Some(code) = self.other_schedule(&current.slot) {
            return code;
        }
        // Queued re-runs wait while the job is paused across the fleet.
        match self.pauses() {
            Ok(p) => {
                if let Some(w) = p.covering(now) {
                    return paused(job, &current.slot, w);
                }
            }
            Err(code) => return code,
        }
        let store = self.store.as_mut();
        run_queued(
            job,
            store,
            &mut self.lock,
            &self.holder,
            self.account.as_ref(),
        )
    }

    /// Re-runs a person asked for with `jobguard rerun` ([`run_requested`]); whether there
    /// was one.
    fn requested(&mut self) -> bool {
        let store = self.store.as_mut();
        let (code, took) = run_requested(
            self.job,
            store,
            &mut self.lock,
            &self.holder,
            self.account.as_ref(),
        );
        self.note(code);
        took
    }

    /// Runs the elapses of `slots` as catch-ups ([`run_catch_ups`]); whether every one
    /// was tried.
    fn catch_ups(&mut self, slots: &[i64], pauses: &crate::ops::pause::Pauses) -> bool {
        let store = self.store.as_mut();
        let (code, go_on) = run_catch_ups(
            self.job,
            store,
            &mut self.lock,
            &self.holder,
            self.account.as_ref(),
            slots,
            pauses,
        );
        self.note(code);
        go_on
    }

    /// The slot of this start (`current`) and what goes with it, in order: requested
    /// re-runs, the declared schedule, a pause, catch-ups before ([`Self::catch_up_before`]),
    /// the slot itself with queued re-runs first ([`Self::current`]), catch-ups after
    /// ([`Self::catch_up_after`]), re-runs requested meanwhile. A start with `--slot` or
    /// `--force` runs only its slot.
    fn slots(mut self, req: &Request, current: &slot::Current, now: i64) -> u8 {
        let job = self.job;
        // A trigger (no --slot, no --force) runs queued re-runs first, oldest first, and
        // refuses a slot older than one already recorded; each claim is one store call.
        let by_trigger = req.slot.is_none() && !req.force;
        // Re-runs a person asked for with `jobguard rerun` (under systemd) come first. A
        // start that was not the timer's (`jobguard rerun` started the unit) runs nothing
        // else.
        if by_trigger {
            if self.requested() && current.trigger != "timer" {
                return self.status;
            }
            // Only the timer's own start declares: a person's `jobguard run JOB` from a
            // shell (whose TZ may differ from the service's) runs the slot it computes.
            if current.trigger == "timer"
                && let Some(code) = self.other_schedule(&current.slot)
            {
                self.note(code);
                return self.status;
            }
        }
        // Paused across the fleet (crate::ops::pause): while a window covers now, a trigger
        // starts nothing (not even a slot that elapsed before it began), and a slot in a
        // window is never run by a trigger or a catch-up. What a person asked for
        // (`rerun`, `--slot`, `--force`) runs.
        let pauses = if by_trigger {
            match self.pauses() {
                Ok(p) => p,
                Err(code) => return code,
            }
        } else {
            crate::ops::pause::Pauses::default()
        };
        if let Some(w) = pauses
            .covering(current.slot.usec)
            .or_else(|| pauses.covering(now))
        {
            self.note(paused(job, &current.slot, w));
            return self.status;
        }
        if by_trigger && job.catch_up == CatchUp::All && !self.catch_up_before(current, &pauses) {
            return self.status;
        }
        let last_ran = self.current(req, current, by_trigger, &pauses);
        if by_trigger
            && job.catch_up != CatchUp::None
            && let Some(done) = last_ran
        {
            self.catch_up_after(done, pauses);
        }
        // Requests made while this shim ran: starting an active unit did nothing.
        if by_trigger && !child::stop_requested() {
            self.requested();
        }
        self.status
    }

    /// With `catch_up = "all"`, the elapses since the newest recorded slot run first
    /// ([`missed_before`]). When another holder serves the job, this firing's slot is left
    /// to it too: claimed in a moment between two of that holder's catch-up slots, it
    /// would put every slot the holder has not reached yet behind the ledger, where no
    /// claim runs it. A holder started by its timer runs the elapses that passed while it
    /// ran once it is done ([`Self::catch_up_after`]); after any other holder (a forced
    /// run, a re-run), the next firing's catch-up runs them. Whether to go on.
    fn catch_up_before(
        &mut self,
        current: &slot::Current,
        pauses: &crate::ops::pause::Pauses,
    ) -> bool {
        let job = self.job;
        let missed = match missed_before(job, self.store.as_mut(), &current.slot, pauses) {
            Ok(m) => m,
            Err(e) => {
                // The store's failure is the run's status, whatever came before.
                self.status = store_failed(job, &e);
                return false;
            }
        };
        if self.catch_ups(&missed, pauses) {
            return true;
        }
        if !child::stop_requested() {
            eprintln!(
                "jobguard: {}: slot {} is left to the lease's holder, or else to the next catch-up",
                job.name,
                current.slot.rfc3339()
            );
        }
        false
    }

    /// This start's slot, after the queued re-runs a trigger's claim picks first (at most
    /// [`MAX_RERUNS_PER_RUN`], a slot that comes back once). Returns the slot of this
    /// start that ran, if it did.
    fn current(
        &mut self,
        req: &Request,
        current: &slot::Current,
        by_trigger: bool,
        pauses: &crate::ops::pause::Pauses,
    ) -> Option<i64> {
        let job = self.job;
        let mut reruns: Vec<i64> = Vec::new();
        let mut queued_first = by_trigger;
        loop {
            if child::stop_requested() {
                // An operator's stop ends the shim: no further slot is started.
                eprintln!(
                    "jobguard: {}: asked to stop; slot {} not started",
                    job.name,
                    current.slot.rfc3339()
                );
                return None;
            }
            let attempt = Attempt {
                slot: &current.slot,
                trigger: current.trigger,
                force: req.force,
                queued_first,
                in_order: by_trigger,
                asked_by: req.forced_by.as_deref(),
                pauses,
            };
            let store = self.store.as_mut();
            let r = run_slot(
                job,
                store,
                &mut self.lock,
                &self.holder,
                self.account.as_ref(),
                &attempt,
            );
            self.note(r.code);
            match r.ran {
                // A queued re-run ran; claim again for the next one or for this slot.
                Some(slot) if slot != current.slot.usec => {
                    // A slot that comes back (its end could not be recorded) is not taken
                    // again by this invocation, nor are more than MAX_RERUNS_PER_RUN.
                    if reruns.contains(&slot) || reruns.len() + 1 >= MAX_RERUNS_PER_RUN {
                        queued_first = false;
                    }
                    reruns.push(slot);
                }
                ran => return ran,
            }
        }
    }

    /// Elapses that passed while this shim ran (after slot `done`, µs since the epoch):
    /// systemd starts no second instance of an active service, and other hosts found the
    /// lease held, so nobody else runs them. `catch_up = "latest"` runs the newest,
    /// `"all"` each (at most `catch_up_limit` at a time), until none is left. A pause that
    /// began while the run went on stops them.
    fn catch_up_after(&mut self, mut done: i64, pauses: crate::ops::pause::Pauses) {
        let job = self.job;
        while !child::stop_requested() {
            let now = crate::guard::clock::Clock::now_usec(&crate::guard::clock::SystemClock);
            let limit = match job.catch_up {
                CatchUp::All => job.catch_up_limit as usize,
                _ => 1,
            };
            if slot::elapses_up_to(&job.calendar, done, now, limit, &pauses)
                .0
                .is_empty()
            {
                return;
            }
            // A pause may have begun while the run went on: read again. While one covers
            // now, no catch-up starts.
            let fresh = match self.pauses() {
                Ok(p) => p,
                Err(code) => {
                    self.note(code);
                    return;
                }
            };
            let (due, _) = slot::elapses_up_to(&job.calendar, done, now, limit, &fresh);
            let Some(&newest) = due.last() else {
                return;
            };
            if let Some(w) = fresh.covering(now) {
                let slot = Slot {
                    usec: newest,
                    zone: job.calendar.zone_name(),
                };
                self.note(paused(job, &slot, w));
                return;
            }
            if !self.catch_ups(&due, &fresh) {
                return;
            }
            done = newest;
        }
    }
}

/// Runs the slots `jobguard rerun` asked for ([`rerun`]), forced, oldest first, each as its
/// own attempt, then those asked for meanwhile, until none is left (at most
/// [`MAX_RERUNS_PER_RUN`]). Returns the first non-zero status (or 0), and whether there
/// was a request.
fn run_requested(
    job: &Job,
    store: &mut dyn Store,
    lock: &mut JobLock,
    holder: &Holder,
    account: Option<&child::Account>,
) -> (u8, bool) {
    let mut status = exit::OK;
    let mut ran = 0;
    while ran < MAX_RERUNS_PER_RUN {
        let requests = rerun::take(&job.name);
        if requests.is_empty() {
            break;
        }
        for request in requests {
            if child::stop_requested() {
                eprintln!(
                    "jobguard: {}: asked to stop; the re-run of slot {} asked by {} was not started",
                    job.name,
                    format_usec(request.slot_usec),
                    request.by
                );
                return (status, true);
            }
            let slot = Slot {
                usec: request.slot_usec,
                zone: job.calendar.zone_name(),
            };
            let attempt = Attempt {
                slot: &slot,
                trigger: "rerun",
                force: request.forced,
                queued_first: false,
                in_order: false,
                asked_by: Some(&request.by),
                pauses: &crate::ops::pause::Pauses::default(),
            };
            let r = run_slot(job, store, lock, holder, account, &attempt);
            if status == exit::OK {
                status = r.code;
            }
            ran += 1;
        }
    }
    (status, ran > 0)
}

/// The elapses before `slot` that have no record, oldest first, for `catch_up = "all"`:
/// those after the newest slot recorded before it and outside the job's pause windows
/// (`paused`), at most `catch_up_limit` (the older ones are passed over, and recorded so
/// by the first claim). Reads the job's most recently started records (one store call).
///
/// # Errors
/// The store's, from [`Store::runs`].
fn missed_before(
    job: &Job,
    store: &mut dyn Store,
    slot: &Slot,
    paused: &crate::ops::pause::Pauses,
) -> Result<Vec<i64>, StoreError> {
    let recent = store.runs(&store::RunQuery {
        job: Some(job.name.clone()),
        limit: 20,
        ..store::RunQuery::default()
    })?;
    // A job with no record has nothing to catch up: its history starts now.
    let Some(newest) = recent
        .iter()
        .map(|r| r.slot.usec)
        .filter(|&s| s < slot.usec)
        .max()
    else {
        return Ok(Vec::new());
    };
    if recent.iter().any(|r| r.slot.usec >= slot.usec) {
        return Ok(Vec::new());
    }
    let (mut missed, more) = slot::elapses_up_to(
        &job.calendar,
        newest,
        slot.usec,
        job.catch_up_limit as usize + 1,
        paused,
    );
    // The last one is `slot` itself.
    missed.retain(|&s| s < slot.usec);
    if more || missed.len() > job.catch_up_limit as usize {
        let keep = job.catch_up_limit as usize;
        let cut = missed.len().saturating_sub(keep);
        missed.drain(..cut);
        let mut ev = Event::new(
            Kind::GapDetected,
            &job.name,
            format!(
                "catch-up: more than {keep} slots elapsed since slot {}; the {keep} newest run, the older ones are passed over (catch_up_limit)",
                format_usec(newest)
            ),
        );
        ev.slot = Some(slot.rfc3339());
        ev.reason = Some("catch-up-limit".into());
        journal::emit(&ev);
    }
    Ok(missed)
}

/// Runs the elapses a catch-up found (µs since the epoch, oldest first), each as its own
/// attempt (trigger `catch-up`). A slot that is already done or behind the ledger
/// (another host caught it up) is passed quietly by the claim. Stops at another holder's
/// lease (it serves the job now) or a stop request. Returns the first non-zero status (or
/// 0) and whether every slot was tried.
fn run_catch_ups(
    job: &Job,
    store: &mut dyn Store,
    lock: &mut JobLock,
    holder: &Holder,
    account: Option<&child::Account>,
    slots: &[i64],
    pauses: &crate::ops::pause::Pauses,
) -> (u8, bool) {
    let mut status = exit::OK;
    for &usec in slots {
        let slot = Slot {
            usec,
            zone: job.calendar.zone_name(),
        };
        let attempt = Attempt {
            slot: &slot,
            trigger: "catch-up",
            force: false,
            queued_first: false,
            in_order: true,
            asked_by: None,
            pauses,
        };
        let r = run_slot(job, store, lock, holder, account, &attempt);
        if status == exit::OK {
            status = r.code;
        }
        if r.busy || child::stop_requested() {
            return (status, false);
        }
    }
    (status, true)
}

/// At most this many queued re-runs are run by one invocation before its own slot.
const MAX_RERUNS_PER_RUN: usize = 100;

/// Runs the job's queued re-runs, oldest first, each as its own attempt, and nothing else:
/// the current slot is left to its timer. Each claim asks for the oldest queued slot not
/// yet tried here, with `queued_first` so that the store picks the oldest queued slot
/// that is neither done nor held (the one asked for, when no other is left). A slot is
/// tried at most once per invocation. Returns the first non-zero status, or 0.
fn run_queued(
    job: &Job,
    store: &mut dyn Store,
    lock: &mut JobLock,
    holder: &Holder,
    account: Option<&child::Account>,
) -> u8 {
    let mut status = exit::OK;
    let mut tried: Vec<i64> = Vec::new();
    while tried.len() < MAX_RERUNS_PER_RUN && !child::stop_requested() {
        let queued = store.runs(&store::RunQuery {
            job: Some(job.name.clone()),
            resolutions: vec![Resolution::Queued],
            ..store::RunQuery::default()
        });
        let queued = match queued {
            Ok(q) => q,
            Err(e) => return store_failed(job, &e),
        };
        let Some(next) = queued
            .into_iter()
            .map(|r| r.slot)
            .filter(|s| !tried.contains(&s.usec))
            .min_by_key(|s| s.usec)
        else {
            break;
        };
        let attempt = Attempt {
            slot: &next,
            trigger: "rerun",
            force: false,
            queued_first: true,
            in_order: false,
            asked_by: None,
            pauses: &crate::ops::pause::Pauses::default(),
        };
        let r = run_slot(job, store, lock, holder, account, &attempt);
        if status == exit::OK {
            status = r.code;
        }
        tried.push(next.usec);
        tried.extend(r.ran);
    }
    status
}

/// One claim's worth of [`run`]: the slot asked for and how.
struct Attempt<'a> {
    slot: &'a Slot,
    trigger: &'a str,
    force: bool,
    queued_first: bool,
    in_order: bool,
    /// Who asked for it (`jobguard rerun`, forced; `resolve --rerun`, not), for the
    /// report: [`rerun::FORCED_BY`] or [`rerun::REQUESTED_BY`].
    asked_by: Option<&'a str>,
    /// The job's pause windows, as read before the claim: elapses in them are no gap.
    pauses: &'a crate::ops::pause::Pauses,
}

/// Creates the runtime directories: the base (0711: jobs may reach their report file but
/// not list it), the lock directory (0700: no job can take another job's lock) and the
/// report directory (0711).
///
/// Each must then be a real directory (not a symlink) owned by this user and not writable
/// by group or others: whoever can write one can take, delete or swap the locks, e.g. a
/// `/tmp/jobguard-UID` made in advance by another user.
fn prepare_runtime_dirs() -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    let me = nix::unistd::geteuid().as_raw();
    let mk = |p: &Path, mode: u32| -> Result<(), String> {
        let r = fs::DirBuilder::new().recursive(true).mode(mode).create(p);
        r.map_err(|e| format!("cannot create {}: {e}", p.display()))?;
        let m = fs::symlink_metadata(p).map_err(|e| format!("cannot read {}: {e}", p.display()))?;
        if !m.is_dir() {
            return Err(format!("{} is not a directory", p.display()));
        }
        if m.uid() != me {
            return Err(format!(
                "{} is owned by uid {}, not by this user (uid {me})",
                p.display(),
                m.uid()
            ));
        }
        if m.mode() & 0o022 != 0 {
            return Err(format!(
                "{} is writable by others (mode {:o}): they could take or swap the locks",
                p.display(),
                m.mode() & 0o7777
            ));
        }
        Ok(())
    };
    mk(&paths::runtime_dir(), 0o711)?;
    mk(&paths::lock_dir(), 0o700)?;
    mk(&pending::runtime_dir(), 0o700)?;
    mk(&rerun::dir(), 0o700)?;
    mk(&paths::report_dir(), 0o711)
}

/// Opens the store, retrying an unreachable one with backoff for `store_wait`; on giving
/// up applies `on_store_unavailable`. Returns the exit status to use on failure.
fn open_store(job: &Job) -> Result<Box<dyn Store>, u8> {
    // A missing or empty store_file or credential is the job list's problem: not retried.
    let address = job.store_address().map_err(|e| {
        let mut ev = Event::new(
            Kind::SkippedStoreUnavailable,
            &job.name,
            format!("failed: {e}; nothing was run"),
        );
        ev.reason = Some("store-unavailable".into());
        journal::emit(&ev);
        journal::status(&format!("store address unreadable: {e}"));
        exit::CONFIG
    })?;
    // No separate init(): every store creates or checks its schema on first use, which
    // saves a round trip per run on a shared store.
    with_retry(job, || store::open(&address)).map_err(|e| store_failed(job, &e))
}

/// Retries `f` while the store is unavailable, for `store_wait`: after a pause of 100 ms,
/// doubling to 10 s, each drawn at random between half of it and all of it ([`jitter`]),
/// so that the hosts and jobs refused together (a server's connection limit met by a
/// fleet firing in one second) do not all come back together. A stop signal (SIGTERM,
/// SIGINT, SIGHUP: `systemctl stop`) ends the wait at once with the last error.
fn with_retry<T>(job: &Job, mut f: impl FnMut() -> Result<T, StoreError>) -> Result<T, StoreError> {
    let give_up = Instant::now() + job.store_wait;
    let mut backoff = Duration::from_millis(100);
    loop {
        let pause = jitter(backoff);
        match f() {
            Err(StoreError::Unavailable { store, detail }) if Instant::now() + pause < give_up => {
                eprintln!(
                    "jobguard: {}: store {store} unavailable ({detail}); retrying in {pause:?}",
                    job.name
                );
                if !child::sleep_unless_stopped(pause) {
                    eprintln!("jobguard: {}: asked to stop; no longer waiting", job.name);
                    return Err(StoreError::Unavailable { store, detail });
                }
                backoff = (backoff * 2).min(Duration::from_secs(10));
            }
            other => return other,
        }
    }
}

/// A pause between half of `pause` and all of it, at random (std's random hash keys, per
/// thread and moved on at every use, over the moment: no generator is kept).
pub(crate) fn jitter(pause: Duration) -> Duration {
    use std::hash::BuildHasher;
    let r = std::collections::hash_map::RandomState::new().hash_one(Instant::now()) % 1_000;
    pause / 2 + pause / 2 * u32::try_from(r).unwrap_or(0) / 1_000
}

/// How many times a claim refused for a clock skew that its own round trip does not
/// prove ([`crate::guard::clock::skew_proven`]) is sent again before the refusal stands.
const SKEW_RECHECKS: u32 = 3;

fn store_failed(job: &Job, e: &StoreError) -> u8 {
    let skip = matches!(e, StoreError::Unavailable { .. })
        && job.on_store_unavailable == OnStoreUnavailable::Skip;
    let mut ev = Event::new(
        Kind::SkippedStoreUnavailable,
        &job.name,
        format!(
            "{}: {e}; nothing was run",
            if skip { "skipped" } else { "failed" }
        ),
    );
    ev.reason = Some("store-unavailable".into());
    journal::emit(&ev);
    journal::status(&format!("store unavailable: {e}"));
    match e {
        StoreError::Unavailable { .. } if skip => exit::OK,
        _ => e.exit_status(),
    }
}

/// Reports a refusal for clock skew: the slot comes from this host's clock and the lease
/// from the store's, so they must agree within `clock_tolerance`. Returns the exit status.
fn clock_skew(job: &Job, store: &dyn Store, host: i64, store_now: i64) -> u8 {
    let skew = store_now - host;
    let mut ev = Event::new(
        Kind::ClockSkew,
        &job.name,
        format!(
            "not run: this host's clock is {} {} the store's (host {}, store {} at {}; tolerance {}s)",
            crate::guard::ledger::format_span(skew.abs()),
            if skew > 0 { "behind" } else { "ahead of" },
            format_usec(host),
            format_usec(store_now),
            store.describe(),
            job.clock_tolerance.as_secs()
        ),
    );
    ev.reason = Some("clock-skew".into());
    journal::emit(&ev);
    journal::status(&format!(
        "not run: clock differs from the store's by {}",
        crate::guard::ledger::format_span(skew.abs())
    ));
    exit::CLOCK_SKEW
}

/// Logs the slots between `previous` (the newest recorded before this claim) and `slot`
/// that never ran: a gap is never silent. Returns the catch-up decision to record with the
/// run's outcome (see [`crate::guard::ledger::PASSED_OVER_AFTER`]), if there was a gap.
fn report_gap(
    job: &Job,
    previous: i64,
    slot: &Slot,
    pauses: &crate::ops::pause::Pauses,
) -> Option<PassedOver> {
    let mut missed = slot::elapses_between(&job.calendar, previous, slot.usec, 1000);
    // Elapses in a pause window did not run on purpose: no gap.
    missed.retain(|&e| pauses.covering(e).is_none());
    if missed.is_empty() {
        return None;
    }
    let (first, latest) = (missed[0], missed[missed.len() - 1]);
    let more = if missed.len() >= 1000 { " or more" } else { "" };
    let mut ev = Event::new(
        Kind::GapDetected,
        &job.name,
        format!(
            "gap: {}{more} slot(s) never ran between {} and {}: first {}, last {}",
            missed.len(),
            format_usec(previous),
            slot.rfc3339(),
            format_usec(first),
            format_usec(latest)
        ),
    );
    ev.slot = Some(slot.rfc3339());
    ev.reason = Some("missed-slots".into());
    journal::emit(&ev);
    Some(PassedOver {
        after: previous,
        count: missed.len(),
    })
}

/// A catch-up decision: the claim of a slot passed over every elapse after `after` (µs
/// since the epoch, the newest slot recorded before the claim); `count` of them (at most
/// 1000 counted).
#[derive(Debug, Clone, Copy)]
struct PassedOver {
    after: i64,
    count: usize,
}

impl PassedOver {
    /// Adds the decision to a run's report, replacing a job's own keys of these names.
    fn record(
        decision: Option<PassedOver>,
        report: &mut std::collections::BTreeMap<String, String>,
    ) {
        if let Some(d) = decision {
            report.insert(
                crate::guard::ledger::PASSED_OVER_AFTER.into(),
                format_usec(d.after),
            );
            report.insert(
                crate::guard::ledger::PASSED_OVER_COUNT.into(),
                d.count.to_string(),
            );
        }
    }
}

fn describe_run(r: &Run) -> String {
    format!(
        "run {} (attempt {}) on host {} at {}",
        r.run_id,
        r.attempt,
        r.host,
        format_usec(r.finished_at.unwrap_or(r.started_at))
    )
}

/// Declares the schedule this host runs the job by ([`Store::declare_schedule`]), for a
/// start by the job's timer or by a recovery pass. Slots come from the host's schedule:
/// when another host that shares the store runs the job by a newer definition, this one
/// runs no slot of its own (a person's `jobguard run`, `--slot`, `--force` and `jobguard
/// rerun` still run). `None` to go on; else the exit status of the skip, or
/// of the store's failure.
fn other_schedule(job: &Job, store: &mut dyn Store, holder: &Holder, slot: &Slot) -> Option<u8> {
    let mine = job.schedule_fingerprint();
    let now = crate::guard::clock::Clock::now_usec(&crate::guard::clock::SystemClock);
    let decl = ScheduleDecl {
        job: job.name.clone(),
        fingerprint: mine.clone(),
        defined_at: job.schedule_defined_at(),
        host: format!("{} {}", holder.host, holder.machine_id),
        seen_at: now,
        horizon: job.schedule_horizon(now),
    };
    match with_retry(job, || store.declare_schedule(&decl)) {
        Ok(wins) if wins.fingerprint != mine => Some(schedule_differs(job, slot, &decl, &wins)),
        Ok(_) => None,
        Err(e) => Some(store_failed(job, &e)),
    }
}

/// Reports a skip because the job runs by `wins`, another host's newer schedule, not by
/// `mine`, this host's declaration.
fn schedule_differs(job: &Job, slot: &Slot, mine: &ScheduleDecl, wins: &ScheduleDecl) -> u8 {
    skip(
        job,
        slot,
        Kind::SkippedScheduleDiffers,
        "schedule-differs",
        format!(
            "the job runs by the schedule {:?} of host {} (defined {}, last declared {}), not this host's {:?} (defined {}): the newest definition wins while its hosts fire (until {} without them); install the same job list on every host",
            wins.fingerprint,
            wins.host,
            format_usec(wins.defined_at),
            format_usec(wins.seen_at),
            mine.fingerprint,
            format_usec(mine.defined_at),
            format_usec(wins.seen_at.saturating_add(wins.horizon))
        ),
    )
}

/// Reports a skip of `slot` because the job is paused across the fleet by `window`.
fn paused(job: &Job, slot: &Slot, window: &crate::ops::pause::Window) -> u8 {
    skip(
        job,
        slot,
        Kind::SkippedPaused,
        "paused",
        format!(
            "the job is {} (jobguard pause); `jobguard resume {}` ends it",
            window.describe(),
            job.name
        ),
    )
}

fn skip(job: &Job, slot: &Slot, kind: Kind, reason: &str, message: String) -> u8 {
    let mut ev = Event::new(kind, &job.name, format!("skipped: {message}"));
    ev.slot = Some(slot.rfc3339());
    ev.reason = Some(reason.into());
    journal::emit(&ev);
    journal::status(&format!("skipped: {message}"));
    exit::OK
}

/// What [`run_slot`] did.
struct SlotResult {
    /// Exit status of [`crate::exit`].
    code: u8,
    /// The slot that ran (µs since the epoch), if one did.
    ran: Option<i64>,
    /// Another holder's lease was in the way: it, not this shim, serves the job now.
    busy: bool,
}

/// Claims a slot (the one asked for, or a queued re-run the store picks) and runs it:
/// [`claim`], [`granted`] (or the skip the answer means), [`confirm`] after a retry, then
/// [`execute`] (supervise and record).
fn run_slot(
    job: &Job,
    store: &mut dyn Store,
    lock: &mut JobLock,
    holder: &Holder,
    account: Option<&child::Account>,
    attempt: &Attempt<'_>,
) -> SlotResult {
    let sent = claim(job, store, holder, attempt);
    let (lease, run, passed_over) = match granted(job, store, attempt, &sent) {
        Ok(g) => g,
        Err(skipped) => return skipped,
    };
    let (lease, claimed_at) = match confirm(job, store, lease, &run, passed_over, &sent) {
        Ok(c) => c,
        Err(lost) => return lost,
    };
    if let Err(e) = lock.set_run_id(&run.run_id) {
        eprintln!("jobguard: {}: {e}", job.name);
    }
    let ran = run.slot.usec;
    let mut decisions = std::collections::BTreeMap::new();
    PassedOver::record(passed_over, &mut decisions);
    decisions.insert(
        crate::guard::ledger::SCHEDULE.to_string(),
        crate::ops::audit::schedule_fingerprint(&job.calendar),
    );
    if let Some(by) = attempt.asked_by {
        let key = if attempt.force {
            rerun::FORCED_BY
        } else {
            rerun::REQUESTED_BY
        };
        decisions.insert(key.to_string(), by.to_string());
    }
    let code = execute(job, store, &lease, &run, account, claimed_at, decisions);
    if let Err(e) = lock.clear_run_id() {
        eprintln!("jobguard: {}: {e}", job.name);
    }
    SlotResult {
        code,
        ran: Some(ran),
        busy: false,
    }
}

/// A claim as sent: the request, the store's answer, how many times the last try sent
/// it, and when the last sending left.
struct Sent {
    req: ClaimRequest,
    answer: Result<Claim, StoreError>,
    sendings: u32,
    claimed_at: Instant,
}

/// Sends the claim of `attempt` ([`Store::claim`]), retrying an unreachable store
/// ([`with_retry`]), each sending after recording the outcomes this shim kept. A holder of this installation that is gone is ended and the claim
/// sent once more; a clock-skew refusal that the call's own time in flight explains is
/// sent again (at most [`SKEW_RECHECKS`] times).
fn claim(job: &Job, store: &mut dyn Store, holder: &Holder, attempt: &Attempt<'_>) -> Sent {
    let slot = attempt.slot;
    let mut req = ClaimRequest::new(
        NewRun {
            run_id: identity::new_run_id(),
            job: job.name.clone(),
            slot: slot.clone(),
            forced: attempt.force,
            trigger: attempt.trigger.to_string(),
            invocation_id: std::env::var("INVOCATION_ID")
                .ok()
                .filter(|v| !v.is_empty()),
        },
        holder.clone(),
        job.lease_ttl,
    );
    req.queued_first = attempt.queued_first;
    req.in_order = attempt.in_order;
    let tolerance = i64::try_from(job.clock_tolerance.as_micros()).unwrap_or(i64::MAX);
    let mut claimed_at = Instant::now();
    let mut sendings: u32;
    let mut holder_ended = false;
    let mut skew_rechecks = 0;
    let answer = loop {
        sendings = 0;
        let answer = with_retry(job, || {
            // An outcome this shim kept earlier in this invocation (the store was out when
            // that command ended) is recorded before the next claim: while this shim
            // lives no other process records it, and after the grace another host's
            // recovery pass would take that attempt for cut off and run its slot again
            // (rules::FOREIGN_GRACE_USEC). No store call when nothing is kept.
            pending::replay(store, &job.name)?;
            // The host's time of this very call: it is compared with the store's inside it.
            req.clock = Some(ClockCheck {
                host_now: crate::guard::clock::Clock::now_usec(&crate::guard::clock::SystemClock),
                tolerance,
            });
            claimed_at = Instant::now();
            sendings += 1;
            store.claim(&req)
        });
        // A holder of this installation that is gone (its shim killed with its command, or
        // an earlier boot) is cut off as `jobguard recover` would once its lease expired,
        // and the claim is tried once more.
        if let Ok(Claim::Busy {
            lease,
            run: Some(held),
        }) = &answer
            && !holder_ended
            && leftover::end_gone_holder(job, store, lease, held)
        {
            holder_ended = true;
            continue;
        }
        // The store judged the clocks against the host's time before the call: a call that
        // spent longer than the tolerance in flight makes agreeing clocks look apart. A
        // refusal whose store time lies within the call's whole span (± the tolerance)
        // proves nothing, and the claim is sent again (nothing was written).
        if let Ok(Claim::ClockSkew { store_now }) = &answer
            && let Some(check) = req.clock
            && skew_rechecks < SKEW_RECHECKS
        {
            let took = i64::try_from(claimed_at.elapsed().as_micros()).unwrap_or(i64::MAX);
            let answered = check.host_now.saturating_add(took);
            if !crate::guard::clock::skew_proven(check.host_now, answered, *store_now, tolerance) {
                skew_rechecks += 1;
                continue;
            }
        }
        break answer;
    };
    Sent {
        req,
        answer,
        sendings,
        claimed_at,
    }
}

/// The lease and record a claim was granted, and the catch-up decision it made (a gap
/// before the slot, [`report_gap`]); or, for any other answer, the skip or failure it
/// means, reported (but for a catch-up's slot that another host recorded later: quiet).
fn granted(
    job: &Job,
    store: &mut dyn Store,
    attempt: &Attempt<'_>,
    sent: &Sent,
) -> Result<(Lease, Run, Option<PassedOver>), SlotResult> {
    match sent.answer.clone() {
        Ok(Claim::Claimed {
            lease,
            run,
            previous_slot,
        }) => {
            // A forced run (often of a slot not yet due) has no gap before it.
            let passed_over = match previous_slot {
                Some(previous) if run.slot.usec == attempt.slot.usec && !attempt.force => {
                    report_gap(job, previous, attempt.slot, attempt.pauses)
                }
                _ => None,
            };
            Ok((lease, run, passed_over))
        }
        Ok(other) => Err(refused(job, store, attempt, sent, other)),
        Err(e) => Err(SlotResult {
            code: store_failed(job, &e),
            ran: None,
            busy: false,
        }),
    }
}

/// A claim the store did not grant (`claim`, any answer but [`Claim::Claimed`]), said
/// in the journal with its reason ([`skip`], [`clock_skew`]): the slot's skip.
fn refused(
    job: &Job,
    store: &mut dyn Store,
    attempt: &Attempt<'_>,
    sent: &Sent,
    claim: Claim,
) -> SlotResult {
    let slot = attempt.slot;
    let host_now = sent.req.clock.map_or(0, |c| c.host_now);
    let skipped = |code| SlotResult {
        code,
        ran: None,
        busy: false,
    };
    match claim {
        // Not given one (`granted` keeps it); were it, nothing ran: an internal error.
        Claim::Claimed { .. } => skipped(exit::SOFTWARE),
        Claim::ClockSkew { store_now } => skipped(clock_skew(job, store, host_now, store_now)),
        // A catch-up found the slot recorded later by another host: nothing to say.
        Claim::SlotBehind { .. } if attempt.trigger == "catch-up" => skipped(exit::OK),
        Claim::SlotBehind { newest } => skipped(skip(
            job,
            slot,
            Kind::SkippedOutOfOrder,
            "slot-behind",
            format!(
                "slot {} is older than slot {} already recorded: this host's clock may be behind or the schedule changed; run it with `jobguard run {} --slot {}` if it is wanted",
                slot.rfc3339(),
                format_usec(newest),
                job.name,
                slot.rfc3339()
            ),
        )),
        Claim::SlotDone { by } => {
            let what = if by.outcome == Outcome::Succeeded {
                "already succeeded"
            } else {
                "was resolved as done"
            };
            skipped(skip(
                job,
                slot,
                Kind::SkippedSlotDone,
                "slot-done",
                format!("slot {} {what}: {}", slot.rfc3339(), describe_run(&by)),
            ))
        }
        Claim::SlotHeld { by } => skipped(skip(
            job,
            slot,
            Kind::SkippedSlotHeld,
            "slot-held",
            format!(
                "slot {} is held for a person after {} ended {}; decide with `jobguard resolve {} {} --rerun|--done`",
                slot.rfc3339(),
                describe_run(&by),
                by.outcome,
                job.name,
                slot.rfc3339()
            ),
        )),
        Claim::Busy { lease, run } => SlotResult {
            busy: true,
            ..skipped(skip(
                job,
                slot,
                Kind::SkippedLeaseHeld,
                "lease-held",
                lease_held(slot, &lease, run.as_ref(), host_now),
            ))
        },
    }
}

/// Why a claim found the lease of `slot` held ([`Claim::Busy`]): an attempt under an
/// earlier lease, a lapsed lease whose holder may still hold the outcome, or a live
/// holder. `host_now` is this host's time of the claim (µs since the epoch).
fn lease_held(slot: &Slot, lease: &Lease, run: Option<&Run>, host_now: i64) -> String {
    match run {
        // An attempt under an earlier lease: a recovery pass judges it.
        Some(r) if r.fencing_token != lease.token => format!(
            "slot {}: {} is still running as far as the store knows, under a lease that has passed on since; it may still hold its outcome, so the slot waits until a recovery pass judges it ({} s after a pass first sees it without its lease)",
            slot.rfc3339(),
            describe_run(r),
            store::rules::FOREIGN_GRACE_USEC / 1_000_000
        ),
        // The lease lapsed; its holder may still hold the run's outcome.
        Some(r) if lease.expire_at <= host_now && r.outcome == Outcome::Running => {
            format!(
                "slot {}: the lease of host {} (token {}) lapsed at {} while {} may still hold its outcome, cut off from the store; other machines leave the slot to it until {}",
                slot.rfc3339(),
                lease.host,
                lease.token,
                format_usec(lease.expire_at),
                describe_run(r),
                format_usec(
                    lease
                        .expire_at
                        .saturating_add(store::rules::FOREIGN_GRACE_USEC)
                )
            )
        }
        _ => format!(
            "slot {}: the lease is held by host {} (token {}) until {}{}",
            slot.rfc3339(),
            lease.host,
            lease.token,
            format_usec(lease.expire_at),
            run.map(|r| format!(", {}", describe_run(r)))
                .unwrap_or_default()
        ),
    }
}

/// A grant that came after a retry may answer an earlier sending whose reply was lost:
/// its time to live then counts from a moment this host does not know. A renewal gives
/// the lease a known start (one more round trip, only after a retry). Returns the lease
/// and when its time to live began; or, when the renewal fails, records the attempt
/// `lease_lost` and queued (nothing ran, so the slot can simply run again).
fn confirm(
    job: &Job,
    store: &mut dyn Store,
    lease: Lease,
    run: &Run,
    passed_over: Option<PassedOver>,
    sent: &Sent,
) -> Result<(Lease, Instant), SlotResult> {
    let (mut lease, mut claimed_at, sendings) = (lease, sent.claimed_at, sent.sendings);
    if sendings > 1 {
        let renewed_from = Instant::now();
        let mut renewal = renew::Renewal::new(lease.clone());
        match renewal.renew(store, job.lease_ttl) {
            Ok(Some(_)) => {
                claimed_at = renewed_from;
                lease = renewal.lease;
            }
            answer => {
                let why = match answer {
                    Err(e) => e.to_string(),
                    _ => "the lease expired or passed to another holder".to_string(),
                };
                eprintln!(
                    "jobguard: {}: the claim of slot {} could not be confirmed after a retry ({why}); nothing was run",
                    job.name,
                    run.slot.rfc3339()
                );
                // Nothing ran, so the slot can simply run again.
                let mut lost = Finish {
                    outcome: Outcome::LeaseLost,
                    reason: Some("lease-lost".into()),
                    exit_status: None,
                    report: Default::default(),
                    resolution: Some(Resolution::Queued),
                    ended_at: None,
                };
                PassedOver::record(passed_over, &mut lost.report);
                if let Err(e) = renewal.present(|l| store.finish(l, &run.run_id, &lost)) {
                    eprintln!("jobguard: {}: {e}", job.name);
                }
                return Err(SlotResult {
                    code: exit::LEASE_LOST,
                    ran: Some(run.slot.usec),
                    busy: false,
                });
            }
        }
    }
    Ok((lease, claimed_at))
}

/// What the command of `run` starts with: its argv, the `JOBGUARD_*` variables (the
/// report file at `report_path`, if it could be made), the job's environment, its
/// directory (`working_directory`; else, with `user`, like cron: the user's home when it
/// exists, else `/`; else the shim's own) and user.
fn command_spec(
    job: &Job,
    lease: &Lease,
    run: &Run,
    account: Option<&child::Account>,
    report_path: Option<&Path>,
) -> child::Spec {
    let mut env = vec![
        ("JOBGUARD_JOB".to_string(), job.name.clone()),
        ("JOBGUARD_SLOT".to_string(), run.slot.rfc3339()),
        ("JOBGUARD_RUN_ID".to_string(), run.run_id.clone()),
        (
            "JOBGUARD_IDEMPOTENCY_KEY".to_string(),
            run.slot.idempotency_key(&job.name),
        ),
        (
            "JOBGUARD_FENCING_TOKEN".to_string(),
            lease.token.to_string(),
        ),
        ("JOBGUARD_ATTEMPT".to_string(), run.attempt.to_string()),
        (identity::HOLDER_VAR.to_string(), lease.holder.clone()),
    ];
    if let Some(p) = report_path {
        env.push(("JOBGUARD_REPORT".to_string(), p.display().to_string()));
    }
    // The job list the shim read, for `jobguard mark` in the command; the default list
    // needs no variable (and an inherited one must not point elsewhere).
    if let Some(crate::joblist::config::ConfigSource::Path(p)) =
        crate::joblist::config::ConfigSource::resolved()
        && let Ok(p) = std::path::absolute(p)
    {
        env.push(("JOBGUARD_CONFIG".to_string(), p.display().to_string()));
    }
    env.extend(job.environment.iter().map(|(k, v)| (k.clone(), v.clone())));
    // Like cron: the user's home when it exists, else "/".
    let cwd = job.working_directory.clone().or_else(|| {
        account.map(|a| {
            if a.home.is_dir() {
                a.home.clone()
            } else {
                "/".into()
            }
        })
    });
    child::Spec {
        argv: job.command.clone(),
        base: environment::base(job),
        env,
        env_remove: vec!["NOTIFY_SOCKET".into(), "JOBGUARD_CONFIG".into()],
        cwd,
        account: account.cloned(),
    }
}

/// The journal's `started` event and the unit's status line for `run`.
fn announce(job: &Job, lease: &Lease, run: &Run) {
    let slot_text = run.slot.rfc3339();
    let mut ev = Event::new(
        Kind::Started,
        &job.name,
        format!(
            "started slot {slot_text} (attempt {}, trigger {}, fencing token {}, run {})",
            run.attempt, run.trigger, lease.token, run.run_id
        ),
    );
    ev.slot = Some(slot_text.clone());
    ev.run_id = Some(run.run_id.clone());
    ev.attempt = Some(run.attempt);
    ev.fencing_token = Some(lease.token);
    journal::emit(&ev);
    journal::status(&format!(
        "running slot {slot_text}, attempt {}, lease held by host {} with token {}",
        run.attempt, lease.host, lease.token
    ));
}

/// Runs the command for a claimed slot and records how it ended: the report file and the
/// command's spec, the start event, [`supervise`] (command and lease renewal side by
/// side), what the outcome carries ([`complete`]), [`record`], and the failed slots a
/// success settles. Returns the exit status.
fn execute(
    job: &Job,
    store: &mut dyn Store,
    lease: &Lease,
    run: &Run,
    account: Option<&child::Account>,
    claimed_at: Instant,
    decisions: std::collections::BTreeMap<String, String>,
) -> u8 {
    // `settle_failures = "next-success"`: the earlier failed slots a success would settle,
    // read before the command starts, so that nothing but the outcome's own write stands
    // between the command's end and its record.
    let settle = if job.settle_failures == SettleFailures::NextSuccess {
        failed_before(store, job, run.slot.usec)
    } else {
        Vec::new()
    };
    let owner = account.map(|a| (a.uid, a.gid));
    let report_path = match report::create(&paths::report_dir(), &run.run_id, owner) {
        Ok(p) => Some(p),
        Err(e) => {
            eprintln!("jobguard: {}: cannot create the report file: {e}", job.name);
            None
        }
    };
    let spec = command_spec(job, lease, run, account, report_path.as_deref());
    announce(job, lease, run);
    let Supervised {
        mut finish,
        code,
        mut renewal,
        good_until,
    } = match supervise(job, store, lease, run, &spec, claimed_at) {
        Ok(s) => s,
        Err(code) => return code,
    };
    complete(
        job,
        store,
        run,
        &mut finish,
        report_path.as_deref(),
        decisions,
    );
    // The slots a success settles are named in its report, and resolved once the success
    // is recorded (a shim that dies in between leaves them failed: louder, never quieter;
    // the next success settles them).
    let settles = if finish.outcome == Outcome::Succeeded {
        settle
    } else {
        Vec::new()
    };
    if !settles.is_empty() {
        let slots: Vec<String> = settles.iter().map(|u| format_usec(*u)).collect();
        finish.report.insert(SETTLED.into(), slots.join(","));
    }
    let code = record(job, store, &mut renewal, run, &finish, code, good_until);
    if code == exit::OK {
        for slot in settles {
            if let Err(e) = store.resolve(&job.name, slot, Resolution::Done) {
                eprintln!(
                    "jobguard: {}: slot {} not settled: {e}",
                    job.name,
                    format_usec(slot)
                );
            }
        }
    }
    code
}

/// How a supervised command ended: its outcome and status, and the lease as the
/// renewals left it ([`renew::Renewal`], good until the `Instant` of this host's
/// monotonic clock).
struct Supervised {
    finish: Finish,
    code: u8,
    renewal: renew::Renewal,
    good_until: Instant,
}

/// Starts the command and supervises it to its end, the lease renewed from a thread of
/// its own ([`renew::Renewer`]) so that a store call that hangs never holds up the
/// supervisor's deadlines, under the logind inhibitor lock ([`logind::RunGuard`]), which
/// is released as soon as the command ends. A command that cannot start is a failure
/// of its own ([`spawn_failed`]).
///
/// # Errors
/// [`exit::OS_ERROR`] when the supervisor lost track of the command (printed); the
/// command is then killed if its renewer could not start.
fn supervise(
    job: &Job,
    store: &mut dyn Store,
    lease: &Lease,
    run: &Run,
    spec: &child::Spec,
    claimed_at: Instant,
) -> Result<Supervised, u8> {
    // The lease surely holds until here (by this host's monotonic clock), less a margin.
    let good_until = renew::good_until(claimed_at, job.lease_ttl);
    let renewal = renew::Renewal::new(lease.clone());
    // The logind inhibitor lock is taken just before the command starts and released as
    // soon as it ends (when `guard` is dropped); the guard also hears logind's
    // PrepareForShutdown/PrepareForSleep, polled by `supervise_watching`. See crate::systemd::logind.
    let mut guard = logind::RunGuard::start(job, &run.slot.rfc3339(), &run.run_id);
    let pid = match child::spawn(spec) {
        Ok(pid) => pid,
        Err(e) => {
            let (finish, code) = spawn_failed(job, spec, &e);
            return Ok(Supervised {
                finish,
                code,
                renewal,
                good_until,
            });
        }
    };
    let limits = child::Limits {
        timeout: job.timeout,
        kill_grace: job.kill_grace,
    };
    let watch_fd = guard.watch_fd();
    let mut on_watch = || guard.on_watch_ready();
    let watch = watch_fd.map(|fd| child::Watch {
        fd,
        ready: &mut on_watch,
    });
    let supervised = std::thread::scope(|scope| {
        let renewer = renew::Renewer::start(
            scope,
            &mut *store,
            renewal,
            job.lease_ttl,
            job.kill_grace,
            claimed_at,
        );
        let mut renewer = match renewer {
            Ok(r) => r,
            Err(e) => {
                // Without a renewer, the lease must not be outlived: stop at once.
                let _ = nix::sys::signal::killpg(pid, nix::sys::signal::Signal::SIGKILL);
                return Err(e);
            }
        };
        let ended = child::supervise_watching(pid, limits, &mut renewer, watch);
        // The command's end, before the renewal thread's last call returns.
        let ended_at = jiff::Timestamp::now().as_microsecond();
        let good_until = renewer.good_until();
        Ok((ended, ended_at, good_until, renewer.into_renewal()))
    });
    let (ended, ended_at, good_until, renewal) = match supervised {
        Ok((Ok(e), ended_at, good_until, renewed)) => (e, ended_at, good_until, renewed),
        Ok((Err(e), ..)) | Err(e) => {
            eprintln!("jobguard: {}: lost track of the command: {e}", job.name);
            return Err(exit::OS_ERROR);
        }
    };
    if ended.lease_lost {
        // Processes of the attempt that left its process group (setsid) go too.
        identity::end_run_survivors(&run.run_id);
    }
    let (mut finish, code) = classify(job, &ended, guard.cut());
    finish.ended_at = Some(ended_at);
    // The command has ended: release the inhibitor lock before the final writes.
    drop(guard);
    Ok(Supervised {
        finish,
        code,
        renewal,
        good_until,
    })
}

/// The outcome of a command that could not be started (`e`): failed with reason `exec`,
/// and the status a shell gives, 127 for a command not found, else 126 (said on stderr,
/// with the working directory when that is what is missing).
fn spawn_failed(job: &Job, spec: &child::Spec, e: &std::io::Error) -> (Finish, u8) {
    let code = match e.kind() {
        std::io::ErrorKind::NotFound => exit::NOT_FOUND,
        _ => exit::CANNOT_EXECUTE,
    };
    match spec.cwd.as_ref().filter(|d| !d.is_dir()) {
        Some(d) => eprintln!(
            "jobguard: {}: cannot start {:?}: working directory {}: {e}",
            job.name,
            job.command[0],
            d.display()
        ),
        None => eprintln!(
            "jobguard: {}: cannot start {:?}: {e}",
            job.name, job.command[0]
        ),
    }
    let finish = Finish {
        outcome: Outcome::Failed,
        reason: Some("exec".into()),
        exit_status: Some(i32::from(code)),
        report: Default::default(),
        resolution: None,
        ended_at: Some(jiff::Timestamp::now().as_microsecond()),
    };
    (finish, code)
}

/// What the outcome carries besides how the command ended: a cut run's re-run queued
/// once, then held ([`crate::ops::recover::cut_resolution`]); the command's report file
/// (bad lines and jobguard's own keys left out, with a warning); and the run's
/// `decisions`, recorded with the outcome so that a shim that dies before it loses them,
/// and `jobguard audit` then calls the gap missed (louder, never quieter).
fn complete(
    job: &Job,
    store: &mut dyn Store,
    run: &Run,
    finish: &mut Finish,
    report_path: Option<&std::path::Path>,
    decisions: std::collections::BTreeMap<String, String>,
) {
    if finish.resolution == Some(Resolution::Queued) {
        // Re-run once: a slot already cut off before is held for a person this time.
        match crate::ops::recover::cut_resolution(store, job, run) {
            Ok(r) => finish.resolution = Some(r),
            Err(e) => eprintln!("jobguard: {}: {e}", job.name),
        }
    }
    if let Some(p) = report_path {
        let collected = report::collect(p);
        for line in collected.bad {
            eprintln!(
                "jobguard: {}: ignored report line {line:?} (want key=value)",
                job.name
            );
        }
        if !collected.reserved.is_empty() {
            eprintln!(
                "jobguard: {}: ignored report keys {} (the {} keys are jobguard's own)",
                job.name,
                collected.reserved.join(", "),
                report::RESERVED
            );
        }
        finish.report = collected.pairs;
    }
    finish.report.extend(decisions);
}

/// The report key of a success that settles earlier failed slots
/// (`settle_failures = "next-success"`): their slots, RFC 3339, comma-separated.
pub const SETTLED: &str = "jobguard.settled";

/// At most this many slots are settled by one success; the next one settles more.
const MAX_SETTLED_PER_RUN: usize = 100;

/// The slots of `job` before `slot` (µs since the epoch) that have a failed record not
/// yet resolved and no success: those a success settles, oldest first (at most
/// [`MAX_SETTLED_PER_RUN`]). A store error settles none (printed).
fn failed_before(store: &mut dyn Store, job: &Job, slot: i64) -> Vec<i64> {
    let mut settle = || -> Result<Vec<i64>, StoreError> {
        let failed = store.runs(&store::RunQuery {
            job: Some(job.name.clone()),
            outcomes: vec![Outcome::Failed],
            ..store::RunQuery::default()
        })?;
        let candidates: std::collections::BTreeSet<i64> = failed
            .iter()
            .filter(|r| r.slot.usec < slot && r.resolution.is_none())
            .map(|r| r.slot.usec)
            .collect();
        let mut out = Vec::new();
        for s in candidates {
            let runs = store.runs(&store::RunQuery {
                job: Some(job.name.clone()),
                slot: Some(s),
                ..store::RunQuery::default()
            })?;
            if !runs.iter().any(|r| r.outcome == Outcome::Succeeded) {
                out.push(s);
                if out.len() == MAX_SETTLED_PER_RUN {
                    break;
                }
            }
        }
        Ok(out)
    };
    settle().unwrap_or_else(|e| {
        eprintln!("jobguard: {}: earlier failures not settled: {e}", job.name);
        Vec::new()
    })
}

/// Decides outcome and exit status from how the command ended; `cut` is what logind
/// announced during the run (shutdown or sleep), if anything.
fn classify(job: &Job, ended: &child::Ended, cut: Option<logind::Cut>) -> (Finish, u8) {
    let code = exit::from_child(ended.status);
    let status = Some(i32::from(code));
    let mk = |outcome, reason: &str, resolution| Finish {
        outcome,
        reason: Some(reason.to_string()),
        exit_status: status,
        report: Default::default(),
        resolution,
        ended_at: None,
    };
    let policy = match job.on_interrupted {
        OnInterrupted::Rerun => Resolution::Queued,
        OnInterrupted::Hold => Resolution::Held,
    };
    if ended.lease_lost {
        // The slot was cut like a crash would cut it: the job's policy applies.
        return (
            mk(Outcome::LeaseLost, "lease-lost", Some(policy)),
            exit::LEASE_LOST,
        );
    }
    // A command that did not succeed after logind announced a shutdown (or sleep) was cut
    // by it, whatever signal or status it ended with: the job's policy applies.
    if let Some(cut) = cut
        && !ended.status.success()
    {
        return (mk(Outcome::Interrupted, cut.reason(), Some(policy)), code);
    }
    if ended.timed_out {
        return (mk(Outcome::Failed, "timeout", None), exit::TIMEOUT);
    }
    if ended.status.success() {
        return (mk(Outcome::Succeeded, "exit", None), code);
    }
    if let Some(sig) = ended.stop_signal {
        // Stopped from outside. A system going down cuts the run like a reboot would: the
        // job's policy applies. An operator's stop waits for a person.
        if system_stopping() {
            return (mk(Outcome::Interrupted, "shutdown", Some(policy)), code);
        }
        let reason = format!(
            "stopped-{}",
            sig.as_str().trim_start_matches("SIG").to_lowercase()
        );
        return (
            mk(Outcome::Interrupted, &reason, Some(Resolution::Held)),
            code,
        );
    }
    let reason = if ended.status.code().is_some() {
        "exit"
    } else {
        "signal"
    };
    (mk(Outcome::Failed, reason, None), code)
}

/// Whether systemd is taking the system down (`systemctl is-system-running` says
/// `stopping`). Only asked after a stop signal, never on the normal path.
fn system_stopping() -> bool {
    if !Path::new("/run/systemd/system").exists() {
        return false;
    }
    std::process::Command::new("systemctl")
        .arg("is-system-running")
        .stderr(std::process::Stdio::null())
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "stopping")
        .unwrap_or(false)
}

/// How long the first outcome write may go unanswered before the outcome is also kept in
/// the state directory ([`finish_with_retry`]).
const KEEP_DURABLY_AFTER: Duration = Duration::from_millis(500);

/// Keeps `kept` in the state directory, fsynced ([`pending::keep`]); says why not on
/// stderr. Returns whether it is kept.
fn keep_durably(job: &str, kept: &pending::Kept) -> bool {
    match pending::keep(&pending::state_dir(), kept, true) {
        Ok(_) => true,
        Err(e) => {
            eprintln!(
                "jobguard: {job}: cannot keep the outcome in {}: {e}",
                pending::state_dir().display()
            );
            false
        }
    }
}

/// Writes the outcome, releases the lease and logs the finish event; returns the status
/// to exit with: `code` (the ledger keeps the command's own), except that a 0 whose
/// outcome could not be recorded becomes [`exit::STORE_UNAVAILABLE`] (the store could not
/// take it: it is kept on this host, see [`pending`]), [`exit::SOFTWARE`] (the store
/// refused it) or [`exit::LEASE_LOST`] (the lease passed to another holder and the record
/// moved on): a success that the ledger does not show is not reported as one. A non-zero
/// `code` already says that something needs a look and is kept.
///
/// The outcome is kept in the runtime directory before the store write. A store that is
/// unavailable (a full disk, a lock held long, a server down) is retried while the lease
/// holds, renewing it ([`finish_with_retry`]). When the lease expired meanwhile, the
/// outcome is still recorded if its record waits for it.
fn record(
    job: &Job,
    store: &mut dyn Store,
    renewal: &mut renew::Renewal,
    run: &Run,
    finish: &Finish,
    code: u8,
    lease_good_until: Instant,
) -> u8 {
    let mut kept = pending::Kept::new(
        &store.describe(),
        &renewal.lease,
        renewal.in_doubt(),
        run,
        finish,
    );
    // Before the store write: a shim killed during it, or a store that cannot take it,
    // does not turn a run that ended into one that was cut off.
    if let Err(e) = pending::keep(&pending::runtime_dir(), &kept, false) {
        eprintln!(
            "jobguard: {}: cannot keep the outcome in {}: {e}",
            job.name,
            pending::runtime_dir().display()
        );
    }
    let kept_where = || {
        [pending::runtime_dir(), pending::state_dir()]
            .iter()
            .map(|d| d.join(format!("{}.json", run.run_id)))
            .filter(|p| p.exists())
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(" and ")
    };
    let kept_note = |e: &dyn std::fmt::Display| {
        format!(
            "; NOT recorded: {e}; kept in {}: the next `jobguard run {}` or `jobguard recover` on this host records it",
            kept_where(),
            job.name
        )
    };
    let result = finish_with_retry(
        job,
        store,
        renewal,
        run,
        finish,
        &mut kept,
        lease_good_until,
    );
    let (note, failure) = recorded(store, run, &kept, result, kept_note);
    let status = if code == exit::OK { failure } else { code };
    finished_event(job, run, renewal, finish, status, &note);
    status
}

/// What became of the outcome ([`finish_with_retry`]'s `result`): a note for the finish
/// event (empty when recorded) and the run's status for it: 0 when recorded, even after
/// the lease had expired while the record still waited for it ([`pending::settle`]);
/// [`exit::LEASE_LOST`] when another holder has the slot; [`exit::STORE_UNAVAILABLE`]
/// or [`exit::SOFTWARE`] when the store could not take it, kept for a later run
/// (`kept_note` says where).
fn recorded(
    store: &mut dyn Store,
    run: &Run,
    kept: &pending::Kept,
    result: Result<store::Finished, StoreError>,
    kept_note: impl Fn(&dyn std::fmt::Display) -> String,
) -> (String, u8) {
    match result {
        Ok(f) if f.recorded => {
            pending::forget(&run.run_id);
            (String::new(), exit::OK)
        }
        // The lease expired or passed while the store could not take the outcome: it is
        // recorded all the same while its record still waits for it.
        Ok(_) => match pending::settle(store, kept, false) {
            Ok(pending::Settled::Recorded) => (
                "; recorded after the lease had expired".to_string(),
                exit::OK,
            ),
            Ok(pending::Settled::Waiting) => (
                kept_note(
                    &"another attempt at the slot runs, or the lease lives on under a renewal this shim did not confirm",
                ),
                exit::LEASE_LOST,
            ),
            Ok(pending::Settled::Dropped) => (
                "; NOT recorded: the lease expired or passed to another holder".to_string(),
                exit::LEASE_LOST,
            ),
            Err(e) => (kept_note(&e), exit::STORE_UNAVAILABLE),
        },
        Err(e @ StoreError::Unavailable { .. }) => (kept_note(&e), exit::STORE_UNAVAILABLE),
        Err(e) => (kept_note(&e), exit::SOFTWARE),
    }
}

/// The run's finish event in the journal (its outcome's kind, [`pending::kind_of`]) and
/// the unit's `STATUS=`, with `note` ([`recorded`]).
fn finished_event(
    job: &Job,
    run: &Run,
    renewal: &renew::Renewal,
    finish: &Finish,
    status: u8,
    note: &str,
) {
    let slot_text = run.slot.rfc3339();
    let report = report::one_line(&finish.report);
    let mut ev = Event::new(
        pending::kind_of(finish.outcome),
        &job.name,
        format!(
            "finished slot {slot_text}: {} ({}, exit status {status}{}){}{note}",
            finish.outcome,
            finish.reason.as_deref().unwrap_or("-"),
            match finish.exit_status {
                Some(s) if s != i32::from(status) => format!(", command: {s}"),
                _ => String::new(),
            },
            if report.is_empty() {
                String::new()
            } else {
                format!("; report: {report}")
            },
        ),
    );
    ev.slot = Some(slot_text.clone());
    ev.run_id = Some(run.run_id.clone());
    ev.reason = finish.reason.clone();
    ev.outcome = Some(finish.outcome);
    ev.exit_status = Some(i32::from(status));
    ev.attempt = Some(run.attempt);
    ev.fencing_token = Some(renewal.lease.token);
    ev.report = (!report.is_empty()).then_some(report);
    journal::emit(&ev);
    journal::status(&format!("slot {slot_text}: {}{note}", finish.outcome));
}

/// [`Store::finish`], retried while the store is unavailable, with backoff (0.1 s doubling
/// to 2 s), while the lease surely holds (`lease_good_until`, by this host's monotonic
/// clock, less the renewer's margin) and at least 3 s, but no longer than `store_wait`
/// (at least 3 s). Meanwhile the lease is renewed every third of its time to live; each
/// confirmed renewal moves the lease's end on, so a store that still renews (a lock held
/// long) is waited out up to `store_wait`, while a store that is gone is given up when the
/// lease would expire: past that, another host may take the slot anyway. After a stop
/// signal (`systemctl stop`, a shutdown: the unit's stop time-out is short) renewals no
/// longer extend the wait. The outcome is also kept durably in the state directory once
/// the first write has failed or has not answered within [`KEEP_DURABLY_AFTER`]: a store
/// that does not answer at all (a partition) keeps the first write waiting for its
/// time-out, and a power cut meanwhile takes the runtime copy with `/run`.
fn finish_with_retry(
    job: &Job,
    store: &mut dyn Store,
    renewal: &mut renew::Renewal,
    run: &Run,
    finish: &Finish,
    kept: &mut pending::Kept,
    lease_good_until: Instant,
) -> Result<store::Finished, StoreError> {
    let start = Instant::now();
    let at_most = start + job.store_wait.max(Duration::from_secs(3));
    let at_least = start + Duration::from_secs(3);
    let every = (job.lease_ttl / 3).max(Duration::from_millis(100));
    let margin = (job.lease_ttl / 6).min(Duration::from_secs(10));
    let mut lease_until = lease_good_until;
    let give_up = |lease_until: Instant| lease_until.max(at_least).min(at_most);
    let mut next_renewal = lease_good_until.min(Instant::now() + every);
    let mut lease_held = true;
    let mut pause = Duration::from_millis(100);
    let mut failed_once = false;
    let mut kept_durably = false;
    loop {
        let result = if failed_once {
            renewal.present(|l| store.finish(l, &run.run_id, finish))
        } else {
            let (result, durably) = first_finish(job, store, renewal, run, finish, kept);
            kept_durably = durably;
            result
        };
        let Err(e @ StoreError::Unavailable { .. }) = &result else {
            return result;
        };
        if !failed_once {
            failed_once = true;
            if !kept_durably {
                keep_durably(&job.name, kept);
            }
            eprintln!(
                "jobguard: {}: recording the outcome failed: {e}; retrying for up to {} s",
                job.name,
                give_up(lease_until)
                    .saturating_duration_since(Instant::now())
                    .as_secs()
            );
        }
        let until = if child::stop_requested() {
            give_up(lease_good_until)
        } else {
            give_up(lease_until)
        };
        if Instant::now() + pause >= until {
            return result;
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_secs(2));
        if lease_held && Instant::now() >= next_renewal {
            let sent = Instant::now();
            match renew_waiting(job, store, renewal, kept) {
                Ok(Some(_)) => lease_until = sent + job.lease_ttl - margin,
                Ok(None) => {
                    lease_held = false;
                    eprintln!(
                        "jobguard: {}: the lease expired or passed to another holder while the outcome waited for the store",
                        job.name
                    );
                }
                Err(_) => {}
            }
            next_renewal = Instant::now() + every;
        }
    }
}

/// The first write of the outcome ([`Store::finish`]), watched by a thread that keeps it
/// durably ([`keep_durably`]) when the write has not answered within
/// [`KEEP_DURABLY_AFTER`] (kept first when no thread can start). Returns the write's
/// result and whether the outcome is kept durably; on success the join waits for a
/// durable write already under way.
fn first_finish(
    job: &Job,
    store: &mut dyn Store,
    renewal: &mut renew::Renewal,
    run: &Run,
    finish: &Finish,
    kept: &pending::Kept,
) -> (Result<store::Finished, StoreError>, bool) {
    let mut kept_durably = false;
    let (done, waiting) = std::sync::mpsc::channel::<()>();
    let (name, copy) = (job.name.clone(), kept.clone());
    let keeper = std::thread::Builder::new().spawn(move || {
        let late = waiting.recv_timeout(KEEP_DURABLY_AFTER)
            == Err(std::sync::mpsc::RecvTimeoutError::Timeout);
        late && keep_durably(&name, &copy)
    });
    // No thread to watch the write: keep the outcome durably first.
    if keeper.is_err() {
        kept_durably = keep_durably(&job.name, kept);
    }
    let result = renewal.present(|l| store.finish(l, &run.run_id, finish));
    drop(done);
    if let Ok(k) = keeper {
        kept_durably = k.join().unwrap_or(false);
    }
    (result, kept_durably)
}

/// One renewal of the lease while the outcome waits for the store
/// ([`renew::Renewal::renew`]: the lease's new expiry, µs since the epoch by the store's
/// clock, or `None` when it expired or passed to another holder). The kept copies name the generation this renewal writes
/// before it is sent: should the shim give up or die, they name every one the store may
/// hold.
///
/// # Errors
/// The store's.
fn renew_waiting(
    job: &Job,
    store: &mut dyn Store,
    renewal: &mut renew::Renewal,
    kept: &mut pending::Kept,
) -> Result<Option<i64>, StoreError> {
    let next = renewal.draw();
    if (kept.renewal, kept.renewing) != (renewal.lease.renewal, Some(next)) {
        kept.renewal = renewal.lease.renewal;
        kept.renewing = Some(next);
        if let Err(e) = pending::keep(&pending::runtime_dir(), kept, false) {
            eprintln!("jobguard: {}: cannot keep the outcome again: {e}", job.name);
        }
        keep_durably(&job.name, kept);
    }
    renewal.renew(store, job.lease_ttl)
}

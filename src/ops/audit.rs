//! Reading a job's ledger against its schedule: what went wrong, slot by slot.
//!
//! [`audit_job`] is pure: it takes a job's records, its calendar (when the job is still in
//! the job list), the set of `running` records whose holder is known to be gone, and the
//! moments that bound the check, and returns [`Finding`]s. `jobguard audit` reads every
//! record in its window; `jobguard status`, `metrics` and `recover` read the newest
//! records and look for missed slots only where every record that could show the slot ran
//! was read ([`read_back_to`], [`Scope::missed_after`]), in the gaps between records as
//! well as after the newest. Reading the store, asking whether a holder lives
//! and printing are left to the callers (`src/cli/audit.rs`, `src/cli/status.rs`,
//! `src/cli/recover.rs`); [`needs_attention`] is the one rule for "something to look at"
//! that they share.
//!
//! What counts as *missed*: an elapse of the schedule (systemd.time(7), the same engine
//! the shim uses) that is older than now − [`grace`] and older than this host's boot +
//! grace (a timer's `Persistent=` catch-up after a boot gets the same grace), with no
//! record at that slot and no catch-up decision covering it; after the job's newest
//! record, or between two records made under the job's current schedule ([`SCHEDULE`]),
//! neither of them running, within the job's retention, once the job had a history when
//! it came due (a record of an earlier slot started before it: a slot run by hand long
//! after its time, or a backfill, makes no elapse around it due). A *catch-up decision* is what the shim
//! records when it claims a slot while earlier elapses since the newest recorded slot
//! never ran ("latest": only the newest of them runs): the run's report keeps
//! [`PASSED_OVER_AFTER`], the slot before the gap, so every elapse strictly between it and
//! the run's slot was passed over on purpose. Those are listed as soon as the decision
//! is recorded: the grace holds back only elapses that may still run.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use jiff::Timestamp;
use serde_json::{Value, json};

use crate::calendar::Schedule;
use crate::guard::ledger::{
    Outcome, PASSED_OVER_AFTER, Resolution, Run, SCHEDULE, format_span, format_usec,
};
use crate::joblist::job::Job;
use crate::store::{RunQuery, Store, StoreError};

/// The value of [`SCHEDULE`] for `cal`: its normalized form, as `systemd-analyze
/// calendar` prints it, with the zone the schedule names (none: the host's local zone,
/// whatever it is called there, so that `UTC` and `Etc/UTC` hosts agree).
pub fn schedule_fingerprint(cal: &Schedule) -> String {
    cal.to_string()
}

/// At most this many elapses of one job are compared with its ledger in one check.
pub const MAX_ELAPSES: usize = 100_000;

/// Start-up allowance in [`grace`]: the timer's wake-up, the unit's start, the shim's
/// start and its first store round trip (seconds).
const STARTUP_ALLOWANCE: Duration = Duration::from_secs(30);
/// `AccuracySec=` of `jobguard@.timer` (units/jobguard@.timer).
const TIMER_ACCURACY: Duration = Duration::from_secs(1);

/// How long after an elapse a job's record may still be missing without the slot being
/// *missed*, the sum of: `randomized_delay` (the timer's `RandomizedDelaySec=`); 1 s
/// (`AccuracySec=`); `store_wait` (the shim retries an unreachable store that long before
/// it claims); `clock_tolerance` (the host that runs the slot may be behind this one by
/// that much); 30 s for start-up.
pub fn grace(job: &Job) -> Duration {
    job.randomized_delay.unwrap_or_default()
        + TIMER_ACCURACY
        + job.store_wait
        + job.clock_tolerance
        + STARTUP_ALLOWANCE
}

/// What a finding is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FindingKind {
    /// Two `succeeded` records for one slot, the later one not forced.
    DuplicateSuccess,
    /// Two attempts at one slot whose [started, finished] intervals overlap. An attempt
    /// that another party marked `interrupted` has no end of its own (its `finished_at`
    /// is the latest it can have run, [`crate::store::rules::cut_end`], up to its lease's
    /// expiry), so it is not compared with an attempt granted a higher
    /// fencing token: that grant was made after its lease had expired by the store's
    /// clock, when its shim had stopped the command (self-fencing).
    Overlap,
    /// A `running` record whose holder is gone.
    OrphanRunning,
    /// An elapse with no record and no catch-up decision.
    Missed,
    /// An elapse a catch-up claim passed over on purpose (informational).
    PassedOver,
    /// An elapse with no record inside a window the job was paused across the fleet
    /// ([`crate::ops::pause`]; informational).
    Paused,
    /// A slot not done whose latest attempt waits for a person.
    Held,
    /// A slot not done whose latest attempt failed.
    Failed,
    /// A slot not done whose latest attempt was cut off and waits for its queued re-run.
    Queued,
    /// A record whose fencing token is not larger than that of a record started before it.
    TokenBackwards,
}

impl FindingKind {
    /// The name in `--json` and in the table.
    pub fn as_str(self) -> &'static str {
        match self {
            FindingKind::DuplicateSuccess => "duplicate_success",
            FindingKind::Overlap => "overlap",
            FindingKind::OrphanRunning => "orphan_running",
            FindingKind::Missed => "missed",
            FindingKind::PassedOver => "passed_over",
            FindingKind::Paused => "paused",
            FindingKind::Held => "held",
            FindingKind::Failed => "failed",
            FindingKind::Queued => "queued",
            FindingKind::TokenBackwards => "token_backwards",
        }
    }
}

/// One thing found in a job's ledger.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// What.
    pub kind: FindingKind,
    /// The slot it is about, µs since the epoch.
    pub slot: i64,
    /// The records involved, by run id (none for a missed slot).
    pub runs: Vec<String>,
    /// For people: what and who.
    pub detail: String,
}

impl Finding {
    /// As JSON: `{"kind", "slot" (RFC 3339), "slot_usec", "runs", "detail"}`.
    pub fn json(&self) -> Value {
        json!({
            "kind": self.kind.as_str(),
            "slot": format_usec(self.slot),
            "slot_usec": self.slot,
            "runs": self.runs,
            "detail": self.detail,
            "attention": needs_attention(self),
        })
    }
}

/// Whether a finding needs a person: everything but [`FindingKind::PassedOver`], which a
/// catch-up policy decided, and [`FindingKind::Paused`], which a person decided. The exit
/// status of `audit` and `status` follows it.
pub fn needs_attention(f: &Finding) -> bool {
    !matches!(f.kind, FindingKind::PassedOver | FindingKind::Paused)
}

/// The findings `jobguard status` shows: held, failed and queued slots, running records
/// whose holder is gone, and missed slots ([`Scope::missed_after`] is the caller's to
/// set). Duplicates, overlaps and tokens are `audit`'s: history, not news.
pub fn status_findings(
    runs: &[Run],
    calendar: Option<&Schedule>,
    orphans: &BTreeSet<String>,
    scope: &Scope,
) -> Vec<Finding> {
    audit_job(runs, calendar, orphans, scope)
        .into_iter()
        .filter(|f| {
            matches!(
                f.kind,
                FindingKind::Held
                    | FindingKind::Failed
                    | FindingKind::Queued
                    | FindingKind::OrphanRunning
                    | FindingKind::Missed
            )
        })
        .collect()
}

/// Whether a job needs attention: one of its findings does ([`needs_attention`]), or its
/// timer is not waiting (`timer_idle`, `None` when systemd was not read).
pub fn job_needs_attention(findings: &[Finding], timer_idle: Option<bool>) -> bool {
    findings.iter().any(needs_attention) || timer_idle == Some(true)
}

/// The bounds of a check. All moments are µs since the epoch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scope {
    /// Only slots at or after this (`--since`); `None`: from the job's first record.
    pub since: Option<i64>,
    /// Only slots at or before this (`--until`, default now).
    pub until: i64,
    /// Now, by this host's clock: a `running` record's interval ends here, and only
    /// elapses older than now − grace can be missed.
    pub now: i64,
    /// This host's boot: only elapses older than boot + grace can be missed.
    pub boot: i64,
    /// The job's grace ([`grace`]), µs.
    pub grace: i64,
    /// Look for missed slots only from this slot on: records of older slots may have been
    /// deleted by the job's retention ([`retention_bound`]); `None`: no bound.
    pub kept_since: Option<i64>,
    /// Look for missed slots only after this slot (µs since the epoch): a record of an
    /// older slot may exist that the caller did not read ([`read_back_to`]); `None`: the
    /// caller read every record of the job in the window (`audit`).
    pub missed_after: Option<i64>,
    /// The job's pause windows, `[since, until)` µs since the epoch
    /// ([`crate::ops::pause::Pauses::spans`]): an elapse in one with no record is paused, not
    /// missed nor passed over.
    pub paused: Vec<(i64, i64)>,
}

/// The slot (µs since the epoch) after which `newest_first`, a job's newest records by
/// start as the store returns them, read with `limit`, holds every record that could show
/// a slot ran: `None` when fewer than `limit` came back (that is every record). A record
/// of slot S starts at S − `tolerance` or later (µs; a host's clock may be ahead of the
/// store's by up to `clock_tolerance`, beyond which the claim refuses), so every slot
/// after the oldest start read + `tolerance` would have its record among them.
///
/// Never later than the newest slot read, so that a tolerance longer than the span of
/// the records read does not turn the check off. A record of a future slot forced ahead
/// (`run --slot F --force`) starts before its slot, and a backfill's records start after
/// newer slots' records: callers confirm missed slots with the store
/// ([`confirm_missed`]).
pub fn read_back_to(newest_first: &[Run], limit: usize, tolerance: i64) -> Option<i64> {
    if newest_first.len() < limit {
        return None;
    }
    let oldest = newest_first.iter().map(|r| r.started_at).min()?;
    let newest_slot = newest_first.iter().map(|r| r.slot.usec).max()?;
    Some(oldest.saturating_add(tolerance).min(newest_slot))
}

/// The first slot (µs since the epoch) whose records `job`'s retention has surely kept at
/// `now` ([`crate::ops::retention::kept_since`]): retention deletes by start, by the store's
/// clock, which may be ahead of this host's by up to `clock_tolerance`, and a slot's
/// record may start up to `clock_tolerance` before it; hence twice the tolerance. `None`:
/// every record is kept.
pub fn retention_bound(job: &Job, now: i64) -> Option<i64> {
    let tolerance = crate::store::rules::duration_usec(job.clock_tolerance);
    crate::ops::retention::kept_since(now, job.retention)
        .map(|k| k.saturating_add(tolerance.saturating_mul(2)))
}

/// The scope of a check of `job`'s newest records (`status`, `metrics`, `recover`) at
/// `now` on a host booted at `boot` (µs since the epoch): missed slots are looked for
/// after `read_back_to` ([`read_back_to`] of what was read) and the retention bound.
pub fn recent_scope(job: &Job, now: i64, boot: i64, read_back_to: Option<i64>) -> Scope {
    Scope {
        since: None,
        until: now,
        now,
        boot,
        grace: i64::try_from(grace(job).as_micros()).unwrap_or(i64::MAX),
        kept_since: retention_bound(job, now),
        missed_after: read_back_to,
        paused: Vec::new(),
    }
}

/// Whether `cut` was marked interrupted by another party (so its end is not known) and
/// `later` was granted the lease after it, with a higher fencing token.
fn cut_before(cut: &Run, later: &Run) -> bool {
    cut.outcome == Outcome::Interrupted && later.fencing_token > cut.fencing_token
}

/// The catch-up decision a record carries: (slot before the gap, µs; the record's slot).
fn decision(r: &Run) -> Option<(i64, i64)> {
    let text = r.report.get(PASSED_OVER_AFTER)?;
    let after: Timestamp = text.parse().ok()?;
    Some((after.as_microsecond(), r.slot.usec))
}

/// Elapses of `cal` in [`from`, `to`] (µs since the epoch), at most `max`; and whether
/// there were more.
pub fn elapses_in(cal: &Schedule, from: i64, to: i64, max: usize) -> (Vec<i64>, bool) {
    let mut out = Vec::new();
    let Ok(start) = Timestamp::from_microsecond(from.saturating_sub(1)) else {
        return (out, false);
    };
    let mut t = start;
    loop {
        match cal.next_elapse(t) {
            Some(n) if n.as_microsecond() <= to => {
                if out.len() == max {
                    return (out, true);
                }
                out.push(n.as_microsecond());
                t = n;
            }
            _ => return (out, false),
        }
    }
}

/// Checks one job's records (any order) against its schedule (`None`: a job no longer in
/// the job list, whose slots cannot be compared). `orphans` are the run ids of `running`
/// records whose holder is gone. Findings come sorted by slot, then kind.
pub fn audit_job(
    runs: &[Run],
    calendar: Option<&Schedule>,
    orphans: &BTreeSet<String>,
    scope: &Scope,
) -> Vec<Finding> {
    let in_scope = |slot: i64| scope.since.is_none_or(|s| slot >= s) && slot <= scope.until;
    let mut out = Vec::new();
    let mut by_slot: BTreeMap<i64, Vec<&Run>> = BTreeMap::new();
    for r in runs {
        by_slot.entry(r.slot.usec).or_default().push(r);
    }
    for list in by_slot.values_mut() {
        list.sort_by_key(|r| (r.started_at, r.attempt));
    }
    for (&slot, list) in &by_slot {
        if !in_scope(slot) {
            continue;
        }
        per_slot(slot, list, orphans, scope.now, &mut out);
    }
    tokens(runs, &in_scope, &mut out);
    if let Some(cal) = calendar {
        slots(&by_slot, cal, orphans, scope, &mut out);
    }
    out.sort_by_key(|f| (f.slot, f.kind));
    out
}

/// Duplicates, overlaps, orphans and the state of one slot (its attempts oldest first).
fn per_slot(
    slot: i64,
    list: &[&Run],
    orphans: &BTreeSet<String>,
    now: i64,
    out: &mut Vec<Finding>,
) {
    let ids = |rs: &[&Run]| rs.iter().map(|r| r.run_id.clone()).collect::<Vec<_>>();
    let successes: Vec<&Run> = list
        .iter()
        .copied()
        .filter(|r| r.outcome == Outcome::Succeeded)
        .collect();
    if successes.iter().skip(1).any(|r| !r.forced) {
        out.push(Finding {
            kind: FindingKind::DuplicateSuccess,
            slot,
            runs: ids(&successes),
            detail: format!(
                "{} succeeded records, not forced: {}",
                successes.len(),
                successes
                    .iter()
                    .map(|r| describe(r))
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
        });
    }
    for (i, a) in list.iter().enumerate() {
        for b in &list[i + 1..] {
            if cut_before(a, b) || cut_before(b, a) {
                continue;
            }
            let (a_end, b_end) = (a.finished_at.unwrap_or(now), b.finished_at.unwrap_or(now));
            if a.started_at < b_end && b.started_at < a_end {
                out.push(Finding {
                    kind: FindingKind::Overlap,
                    slot,
                    runs: vec![a.run_id.clone(), b.run_id.clone()],
                    detail: format!(
                        "attempts overlap by {}: {}; {}",
                        format_span(a_end.min(b_end) - a.started_at.max(b.started_at)),
                        describe(a),
                        describe(b)
                    ),
                });
            }
        }
    }
    for r in list {
        if r.outcome == Outcome::Running && orphans.contains(&r.run_id) {
            out.push(Finding {
                kind: FindingKind::OrphanRunning,
                slot,
                runs: vec![r.run_id.clone()],
                detail: format!("running, but its holder is gone: {}", describe(r)),
            });
        }
    }
    let done = list
        .iter()
        .any(|r| r.outcome == Outcome::Succeeded || r.resolution == Some(Resolution::Done));
    let Some(latest) = list.last() else {
        return;
    };
    if done {
        return;
    }
    let kind = match (latest.outcome, latest.resolution) {
        (Outcome::Running, _) => return,
        (_, Some(Resolution::Held)) => FindingKind::Held,
        (_, Some(Resolution::Queued)) => FindingKind::Queued,
        (Outcome::Failed, _) => FindingKind::Failed,
        // Cut off with nothing decided: it waits for a person like a held one.
        (Outcome::Interrupted | Outcome::LeaseLost, _) => FindingKind::Held,
        (Outcome::Succeeded, _) => return,
    };
    let next = match kind {
        FindingKind::Queued => "a re-run is queued".to_string(),
        _ => format!(
            "decide with `jobguard resolve {} {} --rerun|--done`",
            latest.job,
            format_usec(slot)
        ),
    };
    out.push(Finding {
        kind,
        slot,
        runs: vec![latest.run_id.clone()],
        detail: format!(
            "latest attempt {} ({}): {}; {next}",
            latest.outcome,
            latest.reason.as_deref().unwrap_or("-"),
            describe(latest)
        ),
    });
}

/// Fencing tokens in `started_at` order must rise: a token not above the one started
/// before it means two grants were not ordered by the store.
fn tokens(runs: &[Run], in_scope: &dyn Fn(i64) -> bool, out: &mut Vec<Finding>) {
    let mut ordered: Vec<&Run> = runs.iter().collect();
    ordered.sort_by_key(|r| (r.started_at, r.fencing_token));
    // Each descent is reported once: against the record started just before.
    for pair in ordered.windows(2) {
        let (h, r) = (pair[0], pair[1]);
        if r.fencing_token <= h.fencing_token && in_scope(r.slot.usec) {
            out.push(Finding {
                kind: FindingKind::TokenBackwards,
                slot: r.slot.usec,
                runs: vec![h.run_id.clone(), r.run_id.clone()],
                detail: format!(
                    "fencing token {} started at {} is not above token {} started at {} (slot {})",
                    r.fencing_token,
                    format_usec(r.started_at),
                    h.fencing_token,
                    format_usec(h.started_at),
                    h.slot.rfc3339()
                ),
            });
        }
    }
}

/// Missed and passed-over elapses.
fn slots(
    by_slot: &BTreeMap<i64, Vec<&Run>>,
    cal: &Schedule,
    orphans: &BTreeSet<String>,
    scope: &Scope,
    out: &mut Vec<Finding>,
) {
    // Slots recorded ahead of now (forced, or by a clock that was ahead) bound nothing.
    let recorded: Vec<i64> = by_slot
        .keys()
        .copied()
        .filter(|s| *s <= scope.now)
        .collect();
    let Some(&newest) = recorded.last() else {
        return;
    };
    // Due: older than now − grace, and only once the boot is older than the grace. A gap
    // that a catch-up decision covers is a recorded fact, listed at once.
    let cutoff = scope.now - scope.grace;
    let due = cutoff > scope.boot;
    let to = scope.until.min(cutoff - 1);
    let since = scope
        .since
        .unwrap_or(i64::MIN)
        .max(scope.missed_after.map_or(i64::MIN, |a| a.saturating_add(1)));
    let decisions: Vec<(i64, i64, &str)> = by_slot
        .values()
        .flatten()
        .filter_map(|r| decision(r).map(|(a, s)| (a, s, r.run_id.as_str())))
        .collect();
    let runs_of = |slot: i64| by_slot.get(&slot).map_or(&[][..], Vec::as_slice);
    // A run in progress decides the gaps beside it: the one before it when its claim's
    // catch-up decision is not written yet, the one after it when its shim runs the
    // elapses that passed meanwhile once it ends (catch-up). Those gaps wait.
    let live = |slot: i64| {
        runs_of(slot)
            .iter()
            .any(|r| r.outcome == Outcome::Running && !orphans.contains(&r.run_id))
    };
    let mut budget = Budget::default();
    // An elapse between records is judged only once the job had a history when it came
    // due: a record of an earlier slot started before it. A slot run by hand long after
    // its time, or a backfill, does not make the elapses around it due. A caller that
    // read only the newest records (`missed_after`) knows older ones exist.
    let mut history_since = if scope.missed_after.is_some() {
        i64::MIN
    } else {
        i64::MAX
    };
    // Between two records: judged under the schedule the records were made with, and
    // where the retention kept every record.
    let gaps_from = gaps_from(by_slot, cal).max(scope.kept_since.unwrap_or(i64::MIN));
    for pair in recorded.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        history_since = runs_of(a)
            .iter()
            .map(|r| r.started_at)
            .fold(history_since, i64::min);
        let lo = a.saturating_add(1).max(since);
        // A gap a catch-up passed over is listed as such, whoever made its records.
        let whole = b.saturating_sub(1).min(scope.until);
        if lo <= whole && decisions.iter().any(|(d, s, _)| *d < lo && whole < *s) {
            judge(cal, lo, whole, &decisions, &scope.paused, &mut budget, out);
            continue;
        }
        let hi = b.saturating_sub(1).min(to);
        if !due || lo > hi || live(a) || live(b) {
            continue;
        }
        let lo = lo.max(gaps_from).max(history_since.saturating_add(1));
        if lo <= hi {
            judge(cal, lo, hi, &decisions, &scope.paused, &mut budget, out);
        }
    }
    // After the newest record: what ran since then would be recorded after it, or at a
    // slot a little ahead of now (a host's clock ahead within the tolerance), whose run
    // may still be going and whose decision counts. Every elapse after it is due: the
    // job has a history.
    let ahead_live = by_slot
        .range(newest.saturating_add(1)..)
        .any(|(&slot, _)| live(slot));
    let lo = newest.saturating_add(1).max(since);
    if due && lo <= to && !live(newest) && !ahead_live {
        judge(cal, lo, to, &decisions, &scope.paused, &mut budget, out);
    }
    if let Some(last) = budget.truncated {
        out.push(Finding {
            kind: FindingKind::Missed,
            slot: last,
            runs: Vec::new(),
            detail: format!(
                "more than {MAX_ELAPSES} elapses with no record; those after this one were not compared"
            ),
        });
    }
}

/// How many elapses one check still lists: passed-over and paused ones (information) and
/// the rest (each a missed slot) are counted apart, so that a long gap passed over or
/// paused on purpose does not use up the comparison.
#[derive(Default)]
struct Budget {
    passed_over: usize,
    /// Elapses listed as paused.
    paused: usize,
    judged: usize,
    /// The last elapse compared when the judged ones ran out.
    truncated: Option<i64>,
}

/// The slot (µs since the epoch) from which gaps between records are judged: the oldest
/// record made under the job's current schedule ([`SCHEDULE`]), after the newest made
/// under another. A success or failure without the key was written before the key
/// existed, and counts as another schedule's; a record another party ended (cut off,
/// still running) has no report and counts for neither. `i64::MAX` when no record was
/// made under the current schedule.
fn gaps_from(by_slot: &BTreeMap<i64, Vec<&Run>>, cal: &Schedule) -> i64 {
    let fingerprint = schedule_fingerprint(cal);
    let (mut oldest_current, mut newest_other) = (i64::MAX, i64::MIN);
    for r in by_slot.values().flatten() {
        let slot = r.slot.usec;
        match r.report.get(SCHEDULE) {
            Some(f) if *f == fingerprint => oldest_current = oldest_current.min(slot),
            Some(_) => newest_other = newest_other.max(slot),
            None if matches!(r.outcome, Outcome::Succeeded | Outcome::Failed) => {
                newest_other = newest_other.max(slot);
            }
            None => {}
        }
    }
    oldest_current.max(newest_other.saturating_add(1))
}

/// Compares the elapses of `cal` in [`lo`, `hi`] (µs since the epoch, none of them
/// recorded) with the job's pause windows (`paused`) and the catch-up `decisions` (slot
/// before the gap, the deciding record's slot, its run id): paused, passed over, or
/// missed. Elapses in a window are listed on a budget of their own, so that a long pause
/// neither uses up the comparison nor ends it in a missed slot.
fn judge(
    cal: &Schedule,
    lo: i64,
    hi: i64,
    decisions: &[(i64, i64, &str)],
    paused: &[(i64, i64)],
    budget: &mut Budget,
    out: &mut Vec<Finding>,
) {
    // Each window clipped to [lo, hi], with the window it came from for the finding.
    let mut windows: Vec<(i64, i64, (i64, i64))> = paused
        .iter()
        .map(|&w| (w.0.max(lo), w.1.saturating_sub(1).min(hi), w))
        .filter(|(s, e, _)| s <= e)
        .collect();
    windows.sort_unstable();
    let mut from = lo;
    for (s, e, window) in windows {
        if e < from {
            continue;
        }
        let s = s.max(from);
        if from < s {
            judge_unpaused(cal, from, s - 1, decisions, budget, out);
        }
        let (elapses, _) = elapses_in(cal, s, e, MAX_ELAPSES - budget.paused);
        budget.paused += elapses.len();
        out.extend(elapses.into_iter().map(|x| paused_finding(x, window)));
        from = e.saturating_add(1);
    }
    if from <= hi {
        judge_unpaused(cal, from, hi, decisions, budget, out);
    }
}

/// [`judge`] for [`lo`, `hi`] outside every pause window: passed over, or missed.
fn judge_unpaused(
    cal: &Schedule,
    lo: i64,
    hi: i64,
    decisions: &[(i64, i64, &str)],
    budget: &mut Budget,
    out: &mut Vec<Finding>,
) {
    // A decision that covers the whole interval: list what it passed over, as far as the
    // budget goes.
    if let Some(&(after, slot, run)) = decisions.iter().find(|(a, s, _)| *a < lo && hi < *s) {
        let (elapses, _) = elapses_in(cal, lo, hi, MAX_ELAPSES - budget.passed_over);
        budget.passed_over += elapses.len();
        out.extend(
            elapses
                .into_iter()
                .map(|e| passed_over(e, after, slot, run)),
        );
        return;
    }
    if budget.truncated.is_some() {
        return;
    }
    let (elapses, more) = elapses_in(cal, lo, hi, MAX_ELAPSES - budget.judged);
    budget.judged += elapses.len();
    if more {
        budget.truncated = elapses.last().copied().or(Some(lo));
    }
    for e in elapses {
        if let Some(&(after, slot, run)) = decisions.iter().find(|(a, s, _)| *a < e && e < *s) {
            out.push(passed_over(e, after, slot, run));
            continue;
        }
        out.push(Finding {
            kind: FindingKind::Missed,
            slot: e,
            runs: Vec::new(),
            detail: format!(
                "elapsed at {} with no record and no catch-up decision",
                format_usec(e)
            ),
        });
    }
}

/// The finding of elapse `e`, which lies in the pause window `[since, until)`.
fn paused_finding(e: i64, (since, until): (i64, i64)) -> Finding {
    let until = if until == i64::MAX {
        "until resumed".to_string()
    } else {
        format!("until {}", format_usec(until))
    };
    Finding {
        kind: FindingKind::Paused,
        slot: e,
        runs: Vec::new(),
        detail: format!(
            "elapsed while the job was paused (jobguard pause) from {} {until}",
            format_usec(since)
        ),
    }
}

fn passed_over(e: i64, after: i64, slot: i64, run: &str) -> Finding {
    Finding {
        kind: FindingKind::PassedOver,
        slot: e,
        runs: vec![run.to_string()],
        detail: format!(
            "passed over by the catch-up run of slot {} (run {run}): the newest slot recorded before it was {}",
            format_usec(slot),
            format_usec(after)
        ),
    }
}

fn describe(r: &Run) -> String {
    format!(
        "run {} attempt {} {}{} on {} started {}{}",
        r.run_id,
        r.attempt,
        r.outcome,
        if r.forced { " forced" } else { "" },
        r.host,
        format_usec(r.started_at),
        r.finished_at
            .map(|f| format!(" finished {}", format_usec(f)))
            .unwrap_or_default()
    )
}

/// The records `status` and `metrics` judge for a job: its newest `recent` records, and
/// every attempt at each slot where an attempt failed, was cut off or still runs (and
/// was not itself resolved as done) unless those records already show the slot done. A
/// slot left failed or held stays something to attend to however many records came
/// after it, and a slot is judged on all its attempts. Also returns the slot after which
/// every record of the job was read ([`read_back_to`] of the newest `recent`).
///
/// # Errors
/// Store errors.
pub fn judged_records(
    store: &mut dyn Store,
    job: &Job,
    recent: usize,
) -> Result<(Vec<Run>, Option<i64>), StoreError> {
    let name = &job.name;
    let mut runs = store.runs(&RunQuery {
        job: Some(name.clone()),
        limit: recent,
        ..RunQuery::default()
    })?;
    let back = read_back_to(
        &runs,
        recent,
        crate::store::rules::duration_usec(job.clock_tolerance),
    );
    if runs.len() < recent {
        return Ok((runs, back));
    }
    let done: BTreeSet<i64> = runs
        .iter()
        .filter(|r| crate::store::rules::is_done(r))
        .map(|r| r.slot.usec)
        .collect();
    let unsettled: BTreeSet<i64> = store
        .runs(&RunQuery {
            job: Some(name.clone()),
            outcomes: vec![
                Outcome::Failed,
                Outcome::Interrupted,
                Outcome::LeaseLost,
                Outcome::Running,
            ],
            ..RunQuery::default()
        })?
        .iter()
        .filter(|r| !crate::store::rules::is_done(r) && !done.contains(&r.slot.usec))
        .map(|r| r.slot.usec)
        .collect();
    let mut seen: BTreeSet<String> = runs.iter().map(|r| r.run_id.clone()).collect();
    for slot in unsettled {
        for run in store.runs(&RunQuery {
            job: Some(name.clone()),
            slot: Some(slot),
            ..RunQuery::default()
        })? {
            if seen.insert(run.run_id.clone()) {
                runs.push(run);
            }
        }
    }
    Ok((runs, back))
}

/// At most this many missed slots are confirmed with the store by [`confirm_missed`].
const MAX_CONFIRM: usize = 100;

/// Drops from `findings` (of `job`, judged on a window of its newest records) the missed
/// slots that do have a record after all, asking the store about each (at most
/// `MAX_CONFIRM`; the rest stay): a record outside the window can still belong to a slot
/// inside it, when it started long before its slot (`run --slot F --force` of a future
/// slot) or long before the records of older slots in the window (a backfill).
///
/// # Errors
/// Store errors.
pub fn confirm_missed(
    store: &mut dyn Store,
    job: &str,
    findings: &mut Vec<Finding>,
) -> Result<(), StoreError> {
    let gaps: Vec<i64> = findings
        .iter()
        .filter(|f| f.kind == FindingKind::Missed && f.runs.is_empty())
        .map(|f| f.slot)
        .take(MAX_CONFIRM)
        .collect();
    let mut recorded = BTreeSet::new();
    for slot in gaps {
        let found = store.runs(&RunQuery {
            job: Some(job.to_string()),
            slot: Some(slot),
            limit: 1,
            ..RunQuery::default()
        })?;
        if !found.is_empty() {
            recorded.insert(slot);
        }
    }
    findings.retain(|f| !(f.kind == FindingKind::Missed && recorded.contains(&f.slot)));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guard::ledger::Slot;

    const MIN: i64 = 60_000_000;
    /// 2026-11-29T00:00:00Z.
    const T0: i64 = 1_795_910_400_000_000;

    fn cal() -> Schedule {
        crate::calendar::CalendarSpec::parse("*-*-* *:*:00 UTC")
            .expect("valid")
            .into()
    }

    /// A finished attempt at minute `m` after T0, started 1 s after its slot, 10 s long.
    fn run(id: &str, m: i64, outcome: Outcome, token: i64) -> Run {
        let slot = T0 + m * MIN;
        Run {
            run_id: id.to_string(),
            job: "j".into(),
            slot: Slot {
                usec: slot,
                zone: "UTC".into(),
            },
            attempt: 1,
            outcome,
            reason: Some("exit".into()),
            exit_status: Some(0),
            forced: false,
            trigger: "timer".into(),
            host: "h".into(),
            machine_id: "m".into(),
            boot_id: "b".into(),
            pid: 1,
            pid_start: 1,
            invocation_id: None,
            started_at: slot + 1_000_000,
            finished_at: (outcome != Outcome::Running).then_some(slot + 11_000_000),
            fencing_token: token,
            report: if outcome == Outcome::Running {
                Default::default()
            } else {
                [(SCHEDULE.to_string(), schedule_fingerprint(&cal()))].into()
            },
            resolution: None,
        }
    }

    /// `n` succeeded minutes 0..n with rising tokens.
    fn clean(n: i64) -> Vec<Run> {
        (0..n)
            .map(|m| run(&format!("r{m}"), m, Outcome::Succeeded, m + 1))
            .collect()
    }

    fn scope(now_min: i64) -> Scope {
        Scope {
            since: None,
            until: T0 + now_min * MIN,
            now: T0 + now_min * MIN,
            boot: T0 - 86_400_000_000,
            grace: 90_000_000,
            kept_since: None,
            missed_after: None,
            paused: Vec::new(),
        }
    }

    /// Tokens as a store grants them: rising in `started_at` order.
    fn retoken(runs: &mut [Run]) {
        runs.sort_by_key(|r| r.started_at);
        for (i, r) in runs.iter_mut().enumerate() {
            r.fencing_token = i64::try_from(i).unwrap() + 1;
        }
    }

    fn kinds(f: &[Finding]) -> Vec<(&'static str, i64)> {
        f.iter()
            .map(|f| (f.kind.as_str(), (f.slot - T0) / MIN))
            .collect()
    }

    #[test]
    fn a_clean_history_of_many_slots_has_no_findings() {
        let runs = clean(500);
        // Now is 1 min after the last record: within the grace.
        let f = audit_job(&runs, Some(&cal()), &BTreeSet::new(), &scope(500));
        assert!(f.is_empty(), "{f:?}");
    }

    #[test]
    fn slots_after_the_newest_record_are_missed_once_past_the_grace() {
        let runs = clean(100);
        // Now = minute 105; grace 90 s: minutes 100..=103 are due (103 < 105 − 1.5).
        let f = audit_job(&runs, Some(&cal()), &BTreeSet::new(), &scope(105));
        assert_eq!(
            kinds(&f),
            vec![
                ("missed", 100),
                ("missed", 101),
                ("missed", 102),
                ("missed", 103)
            ]
        );
        assert!(f.iter().all(needs_attention));
        // Within the grace after this host's boot, nothing is missed yet.
        let mut s = scope(105);
        s.boot = T0 + 104 * MIN;
        assert!(audit_job(&runs, Some(&cal()), &BTreeSet::new(), &s).is_empty());
        // A job no longer in the job list has no schedule to compare.
        assert!(audit_job(&runs, None, &BTreeSet::new(), &scope(105)).is_empty());
    }

    /// Minutes 0..50 ran, 50..=59 never ran, and minute 60 ran as a catch-up that recorded
    /// its decision (it passed over everything after minute 49).
    fn caught_up_at_60() -> Vec<Run> {
        let mut runs = clean(50);
        let mut catch_up = run("c60", 60, Outcome::Succeeded, 51);
        catch_up
            .report
            .insert(PASSED_OVER_AFTER.into(), format_usec(T0 + 49 * MIN));
        runs.push(catch_up);
        runs
    }

    #[test]
    fn a_gap_passed_over_is_listed_at_once_after_a_boot() {
        // The host was off over minutes 50..=59, and at boot the catch-up ran minute 60
        // ("latest"). Audit right after the boot (within the grace, which holds back only
        // what may still run) lists the ten passed over.
        let runs = caught_up_at_60();
        let mut s = scope(60);
        s.now = T0 + 60 * MIN + 10_000_000;
        s.until = s.now;
        s.boot = T0 + 60 * MIN - 5_000_000;
        let f = audit_job(&runs, Some(&cal()), &BTreeSet::new(), &s);
        assert_eq!(
            kinds(&f),
            (50..60).map(|m| ("passed_over", m)).collect::<Vec<_>>()
        );
        // Long after the boot, the same.
        let f = audit_job(&runs, Some(&cal()), &BTreeSet::new(), &scope(60));
        assert_eq!(f.len(), 10, "{f:?}");
    }

    #[test]
    fn elapses_in_a_pause_window_are_paused_not_missed_nor_passed_over_and_need_no_one() {
        // Paused over minutes [52, 56): of the gap 50..=59 before the catch-up at 60, four
        // are paused and six passed over; with no catch-up decision, four paused and six
        // missed. After the newest record, an open window pauses every elapse.
        let mut s = scope(60);
        s.paused = vec![(T0 + 52 * MIN, T0 + 56 * MIN)];
        let f = audit_job(&caught_up_at_60(), Some(&cal()), &BTreeSet::new(), &s);
        let want = |other: &'static str| {
            (50..60)
                .map(|m| {
                    (
                        if (52..56).contains(&m) {
                            "paused"
                        } else {
                            other
                        },
                        m,
                    )
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(kinds(&f), want("passed_over"));
        assert!(!f.iter().any(needs_attention), "{f:?}");
        let mut runs = clean(50);
        runs.push(run("r60", 60, Outcome::Succeeded, 51));
        let mut s = scope(62);
        s.paused = vec![(T0 + 52 * MIN, T0 + 56 * MIN)];
        let f = audit_job(&runs, Some(&cal()), &BTreeSet::new(), &s);
        assert_eq!(kinds(&f), want("missed"));
        let mut s = scope(105);
        s.paused = vec![(T0 + 90 * MIN, i64::MAX)];
        let f = audit_job(&clean(100), Some(&cal()), &BTreeSet::new(), &s);
        assert_eq!(
            kinds(&f),
            (100..104).map(|m| ("paused", m)).collect::<Vec<_>>()
        );
        assert!(status_findings(&clean(100), Some(&cal()), &BTreeSet::new(), &s).is_empty());
    }

    #[test]
    fn a_pause_longer_than_the_comparison_is_never_a_missed_slot() {
        // A minutely job paused for 150,000 minutes (104 days), still paused: its elapses
        // are listed as paused as far as their budget goes, and nothing is missed.
        let mut s = scope(150_100);
        s.paused = vec![(T0 + 99 * MIN + 1, i64::MAX)];
        let f = audit_job(&clean(100), Some(&cal()), &BTreeSet::new(), &s);
        assert!(
            f.iter().all(|f| f.kind == FindingKind::Paused),
            "{:?}",
            f.last()
        );
        assert_eq!(f.len(), MAX_ELAPSES);
        // Resumed 10 minutes ago: the elapses since are missed, and only they.
        s.paused = vec![(T0 + 99 * MIN + 1, T0 + 150_090 * MIN)];
        let f = audit_job(&clean(100), Some(&cal()), &BTreeSet::new(), &s);
        let missed: Vec<i64> = f
            .iter()
            .filter(|f| f.kind == FindingKind::Missed)
            .map(|f| (f.slot - T0) / MIN)
            .collect();
        assert_eq!(missed, (150_090..=150_098).collect::<Vec<_>>());
    }

    #[test]
    fn a_gap_is_passed_over_when_a_catch_up_decision_covers_it_and_missed_otherwise() {
        let mut runs = caught_up_at_60();
        // Minutes 61..=69 ran; 70..=74 never ran and 75 ran with no decision (forced).
        for m in 61..70 {
            runs.push(run(&format!("r{m}"), m, Outcome::Succeeded, m));
        }
        let mut forced = run("f75", 75, Outcome::Succeeded, 80);
        forced.forced = true;
        runs.push(forced);
        let f = audit_job(&runs, Some(&cal()), &BTreeSet::new(), &scope(76));
        let k = kinds(&f);
        let passed: Vec<i64> = k
            .iter()
            .filter(|(k, _)| *k == "passed_over")
            .map(|x| x.1)
            .collect();
        let missed: Vec<i64> = k
            .iter()
            .filter(|(k, _)| *k == "missed")
            .map(|x| x.1)
            .collect();
        assert_eq!(passed, (50..60).collect::<Vec<_>>());
        assert_eq!(missed, (70..75).collect::<Vec<_>>());
        assert!(
            f.iter()
                .filter(|f| f.kind == FindingKind::PassedOver)
                .all(|f| !needs_attention(f) && f.runs == vec!["c60".to_string()])
        );
        // status and recover look only where they read every record.
        let mut s = scope(76);
        s.missed_after = Some(T0 + 72 * MIN);
        assert_eq!(
            kinds(&audit_job(&runs, Some(&cal()), &BTreeSet::new(), &s))
                .into_iter()
                .filter(|(k, _)| *k == "missed")
                .collect::<Vec<_>>(),
            vec![("missed", 73), ("missed", 74)]
        );
        // --since and --until bound the slots compared.
        let mut s = scope(76);
        s.since = Some(T0 + 72 * MIN);
        s.until = T0 + 73 * MIN;
        assert_eq!(
            kinds(&audit_job(&runs, Some(&cal()), &BTreeSet::new(), &s)),
            vec![("missed", 72), ("missed", 73)]
        );
    }

    #[test]
    fn the_gap_before_a_live_catch_up_run_waits_for_its_decision() {
        let mut runs = clean(10);
        runs.push(run("c20", 20, Outcome::Running, 11));
        let f = audit_job(&runs, Some(&cal()), &BTreeSet::new(), &scope(21));
        assert!(f.is_empty(), "{f:?}");
        // Its holder gone (a crash before the decision was written): the gap is missed.
        let orphans: BTreeSet<String> = ["c20".to_string()].into();
        let f = audit_job(&runs, Some(&cal()), &orphans, &scope(21));
        let k = kinds(&f);
        assert!(k.contains(&("orphan_running", 20)), "{k:?}");
        assert_eq!(
            k.iter().filter(|(k, _)| *k == "missed").count(),
            10,
            "{k:?}"
        );
    }

    /// Issue 9: slots lost behind the newest record (a claim of a later slot put them
    /// behind the ledger) are missed for `status` and `recover` too, as far back as they
    /// read every record; a run in progress holds back only the gaps beside it.
    #[test]
    fn a_gap_behind_the_newest_record_is_missed_where_every_record_was_read() {
        let mut runs = clean(30);
        // Minutes 3..=5 and 10..=14 lost; 15..=29 ran, then 30 runs now, 31..=33 elapsed.
        let lost = |m: i64| (3..6).contains(&m) || (10..15).contains(&m);
        runs.retain(|r| !lost((r.slot.usec - T0) / MIN));
        runs.push(run("r30", 30, Outcome::Running, 31));
        // The newest 19 records by start (30, 29..=15, 9, 8, 7): from minute 7 on, every
        // record was read.
        let mut newest_first = runs.clone();
        newest_first.sort_by_key(|r| std::cmp::Reverse(r.started_at));
        newest_first.truncate(19);
        let back = read_back_to(&newest_first, 19, 0);
        assert_eq!(back, Some(T0 + 7 * MIN + 1_000_000));
        assert_eq!(read_back_to(&newest_first, 20, 0), None);
        let mut s = scope(35);
        s.missed_after = back;
        let f = audit_job(&newest_first, Some(&cal()), &BTreeSet::new(), &s);
        // 10..=14 are missed (3..=5 are before what was read); 31..=33 wait for the run
        // of 30, whose shim catches them up when it ends.
        assert_eq!(
            kinds(&f),
            (10..15).map(|m| ("missed", m)).collect::<Vec<_>>()
        );
        // Its holder gone, the gap after it is missed as well.
        let orphans: BTreeSet<String> = ["r30".to_string()].into();
        let k = kinds(&audit_job(&newest_first, Some(&cal()), &orphans, &s));
        assert!(
            k.contains(&("missed", 33)) && k.contains(&("orphan_running", 30)),
            "{k:?}"
        );
    }

    /// An edited schedule: the elapses of the new one between the records of the old
    /// one are not missed; from the first record under the new one, gaps count again.
    #[test]
    fn gaps_are_judged_only_under_the_schedule_the_records_were_made_with() {
        let mut runs = clean(40);
        // Minutes 0..=19 ran under another schedule (every other minute, say), so minutes
        // 1, 3, 5 ... have no record; minute 30 was lost under the current one.
        runs.retain(|r| {
            let m = (r.slot.usec - T0) / MIN;
            (m >= 20 || m % 2 == 0) && m != 30
        });
        for r in runs.iter_mut().filter(|r| r.slot.usec < T0 + 20 * MIN) {
            r.report
                .insert(SCHEDULE.into(), "*-*-* *:00/2:00 (UTC)".into());
        }
        let f = audit_job(&runs, Some(&cal()), &BTreeSet::new(), &scope(40));
        assert_eq!(kinds(&f), vec![("missed", 30)]);
        // Records older than the key: gaps only from the first record that has it.
        for r in runs.iter_mut() {
            if r.slot.usec < T0 + 20 * MIN {
                r.report.clear();
            }
        }
        let f = audit_job(&runs, Some(&cal()), &BTreeSet::new(), &scope(40));
        assert_eq!(kinds(&f), vec![("missed", 30)]);
        // No record under the current schedule: only the slots after the newest count.
        for r in runs.iter_mut() {
            r.report.clear();
        }
        let f = audit_job(&runs, Some(&cal()), &BTreeSet::new(), &scope(43));
        assert_eq!(kinds(&f), vec![("missed", 40), ("missed", 41)]);
    }

    /// A slot run by hand long after (a backfill) bounds no gap: the history did not grow
    /// through it. A real gap between records made in order is missed.
    #[test]
    fn only_gaps_the_history_grew_through_are_missed() {
        let mut runs = clean(20);
        runs.retain(|r| (r.slot.usec - T0) / MIN != 15);
        // Minute −100, run by hand after everything else: minutes −99..=−1 never were due.
        let mut late = run("old", -100, Outcome::Succeeded, 99);
        late.started_at = T0 + 20 * MIN;
        runs.push(late);
        let f = audit_job(&runs, Some(&cal()), &BTreeSet::new(), &scope(20));
        assert_eq!(kinds(&f), vec![("missed", 15)]);
    }

    /// A gap passed over on purpose, longer than the comparison's budget, lists what the
    /// budget allows as passed over and no missed slot; a real gap after it is still found.
    #[test]
    fn a_long_gap_passed_over_does_not_use_up_the_comparison() {
        let long = MAX_ELAPSES as i64 + 10;
        let mut runs = clean(2);
        let mut catch_up = run("c", long, Outcome::Succeeded, 3);
        catch_up
            .report
            .insert(PASSED_OVER_AFTER.into(), format_usec(T0 + MIN));
        runs.push(catch_up);
        runs.push(run("n", long + 1, Outcome::Succeeded, 4));
        runs.push(run("m", long + 3, Outcome::Succeeded, 5));
        let f = audit_job(&runs, Some(&cal()), &BTreeSet::new(), &scope(long + 4));
        let missed: Vec<i64> = f
            .iter()
            .filter(|f| f.kind == FindingKind::Missed)
            .map(|f| (f.slot - T0) / MIN)
            .collect();
        assert_eq!(missed, vec![long + 2]);
        assert_eq!(
            f.iter()
                .filter(|f| f.kind == FindingKind::PassedOver)
                .count(),
            MAX_ELAPSES
        );
    }

    /// A success or failure without [`SCHEDULE`] was written before the key existed: it
    /// counts as another schedule's, so a forced re-run of an old slot under the current
    /// one does not open the old records' gaps; a short retention bounds the gaps, not
    /// the slots after the newest record.
    #[test]
    fn old_records_and_retention_bound_the_gaps_only() {
        let mut runs = clean(10);
        for r in runs.iter_mut() {
            r.report.clear();
        }
        runs.retain(|r| (r.slot.usec - T0) / MIN != 4);
        let mut forced = run("f", 2, Outcome::Succeeded, 11);
        forced.forced = true;
        forced.started_at = T0 + 10 * MIN;
        runs.push(forced);
        let mut s = scope(14);
        let k = kinds(&audit_job(&runs, Some(&cal()), &BTreeSet::new(), &s));
        assert_eq!(k, vec![("missed", 10), ("missed", 11), ("missed", 12)]);
        // Retention kept only the last 3 minutes: the slots after the newest record count.
        s.kept_since = Some(T0 + 11 * MIN);
        let k = kinds(&audit_job(&runs, Some(&cal()), &BTreeSet::new(), &s));
        assert_eq!(k, vec![("missed", 10), ("missed", 11), ("missed", 12)]);
    }

    /// Running one lost slot by hand later does not hide the rest of its gap, and a slot
    /// forced ahead of time (its record started before the slots before it came due)
    /// does not hide a loss just before it.
    #[test]
    fn a_late_or_early_record_hides_no_lost_slot_beside_it() {
        let mut runs = clean(8);
        // Minutes 8 and 9 lost; 10 forced at minute 9.5 (no decision), 11 on time; then
        // minute 8 run by hand at minute 12.
        let mut forced = run("f10", 10, Outcome::Succeeded, 20);
        forced.forced = true;
        forced.started_at = T0 + 9 * MIN + 30_000_000;
        runs.push(forced);
        runs.push(run("r11", 11, Outcome::Succeeded, 21));
        let mut late = run("l8", 8, Outcome::Succeeded, 22);
        late.started_at = T0 + 12 * MIN;
        runs.push(late);
        retoken(&mut runs);
        let f = audit_job(&runs, Some(&cal()), &BTreeSet::new(), &scope(13));
        assert_eq!(kinds(&f), vec![("missed", 9)]);
        // Minute 15 forced at minute 12; 13 ran, 14 lost, 16 ran.
        let mut runs = clean(14);
        let mut ahead = run("a15", 15, Outcome::Succeeded, 30);
        ahead.forced = true;
        ahead.started_at = T0 + 12 * MIN;
        runs.push(ahead);
        runs.retain(|r| r.run_id != "r14");
        runs.push(run("r16", 16, Outcome::Succeeded, 31));
        retoken(&mut runs);
        let f = audit_job(&runs, Some(&cal()), &BTreeSet::new(), &scope(18));
        assert_eq!(kinds(&f), vec![("missed", 14)]);
    }

    /// A claim a little ahead of now (a host's clock ahead within the tolerance) that
    /// passed slots over, or still runs, counts for the slots after the newest record
    /// before now.
    #[test]
    fn a_record_slightly_ahead_of_now_counts_for_the_slots_before_it() {
        let mut runs = clean(10);
        let mut ahead = run("c15", 15, Outcome::Succeeded, 11);
        ahead
            .report
            .insert(PASSED_OVER_AFTER.into(), format_usec(T0 + 9 * MIN));
        runs.push(ahead.clone());
        // Now is 20 s before minute 15.
        let mut s = scope(15);
        s.now -= 20_000_000;
        s.until = s.now;
        let k = kinds(&audit_job(&runs, Some(&cal()), &BTreeSet::new(), &s));
        assert!(k.iter().all(|(k, _)| *k == "passed_over"), "{k:?}");
        runs.pop();
        ahead.report.clear();
        ahead.outcome = Outcome::Running;
        ahead.finished_at = None;
        runs.push(ahead);
        assert!(audit_job(&runs, Some(&cal()), &BTreeSet::new(), &s).is_empty());
    }

    #[test]
    fn two_successes_are_a_duplicate_unless_the_later_was_forced() {
        let mut runs = clean(30);
        let mut again = run("dup", 7, Outcome::Succeeded, 31);
        again.attempt = 2;
        again.started_at += 5 * MIN;
        again.finished_at = Some(again.started_at + 1_000_000);
        runs.push(again.clone());
        retoken(&mut runs);
        let f = audit_job(&runs, Some(&cal()), &BTreeSet::new(), &scope(30));
        assert_eq!(kinds(&f), vec![("duplicate_success", 7)]);
        assert_eq!(f[0].runs, vec!["r7".to_string(), "dup".to_string()]);
        let mut runs = clean(30);
        again.forced = true;
        runs.push(again);
        retoken(&mut runs);
        assert!(audit_job(&runs, Some(&cal()), &BTreeSet::new(), &scope(30)).is_empty());
    }

    #[test]
    fn attempts_at_one_slot_that_overlap_are_found_and_sequential_ones_are_not() {
        let mut runs = clean(20);
        // Slot 3: attempt 1 interrupted and re-run after it ended: fine.
        runs[3].outcome = Outcome::Interrupted;
        runs[3].resolution = Some(Resolution::Rerun);
        let mut rerun = run("re3", 3, Outcome::Succeeded, 21);
        rerun.attempt = 2;
        rerun.started_at = runs[3].finished_at.unwrap() + 1;
        rerun.finished_at = Some(rerun.started_at + 1_000_000);
        runs.push(rerun);
        // Slot 12: a second attempt started while the first ran (it failed, then the other
        // succeeded).
        runs[12].outcome = Outcome::Failed;
        let mut other = run("ov12", 12, Outcome::Succeeded, 22);
        other.attempt = 2;
        other.started_at = runs[12].started_at + 2_000_000;
        runs.push(other);
        retoken(&mut runs);
        let f = audit_job(&runs, Some(&cal()), &BTreeSet::new(), &scope(20));
        let k = kinds(&f);
        assert_eq!(k.len(), 1, "{k:?}");
        assert!(k.contains(&("overlap", 12)), "{k:?}");
        assert!(!k.contains(&("overlap", 3)), "{k:?}");
        let overlap = f.iter().find(|f| f.kind == FindingKind::Overlap).unwrap();
        assert_eq!(overlap.runs, vec!["r12".to_string(), "ov12".to_string()]);
    }

    #[test]
    fn an_attempt_marked_interrupted_is_not_an_overlap_with_a_later_grant() {
        let mut runs = clean(10);
        // Slot 4: attempt 1 cut off (another host's lease expired); attempt 2 granted with
        // a higher token before recover marked attempt 1 (its finished_at is the mark).
        runs[4].outcome = Outcome::Interrupted;
        runs[4].reason = Some("lease-expired".into());
        runs[4].resolution = Some(Resolution::Queued);
        let mut later = run("re4", 4, Outcome::Succeeded, 11);
        later.attempt = 2;
        later.started_at = runs[4].finished_at.unwrap() - 3_000_000;
        runs.push(later);
        // Slot 6: the same times, but attempt 1 recorded its own end (failed): an overlap.
        runs[6].outcome = Outcome::Failed;
        let mut other = run("ov6", 6, Outcome::Succeeded, 12);
        other.attempt = 2;
        other.started_at = runs[6].finished_at.unwrap() - 3_000_000;
        runs.push(other);
        let f = audit_job(&runs, Some(&cal()), &BTreeSet::new(), &scope(10));
        let k = kinds(&f);
        assert!(!k.contains(&("overlap", 4)), "{k:?}");
        assert!(k.contains(&("overlap", 6)), "{k:?}");
    }

    #[test]
    fn tokens_that_go_backwards_by_start_time_are_found() {
        let mut runs = clean(40);
        runs[25].fencing_token = 3;
        runs[31].fencing_token = 31; // equal to the one before it (r30 has 31)
        runs[35].fencing_token = 1000; // the next one is below it
        let f = audit_job(&runs, Some(&cal()), &BTreeSet::new(), &scope(40));
        assert_eq!(
            kinds(&f),
            vec![
                ("token_backwards", 25),
                ("token_backwards", 31),
                ("token_backwards", 36)
            ]
        );
        assert_eq!(f[0].runs, vec!["r24".to_string(), "r25".to_string()]);
    }

    #[test]
    fn held_failed_and_queued_slots_are_listed_until_done() {
        let mut runs = clean(60);
        runs[5].outcome = Outcome::Failed;
        runs[9].outcome = Outcome::Interrupted;
        runs[9].resolution = Some(Resolution::Held);
        runs[14].outcome = Outcome::LeaseLost;
        runs[14].resolution = Some(Resolution::Queued);
        runs[20].outcome = Outcome::Failed;
        runs[20].resolution = Some(Resolution::Done); // a person decided
        runs[33].outcome = Outcome::Failed; // then a later attempt succeeded
        let mut ok = run("ok33", 33, Outcome::Succeeded, 61);
        ok.attempt = 2;
        ok.started_at += MIN / 2;
        ok.finished_at = Some(ok.started_at + 1);
        runs.push(ok);
        retoken(&mut runs);
        let f = audit_job(&runs, Some(&cal()), &BTreeSet::new(), &scope(60));
        assert_eq!(kinds(&f), vec![("failed", 5), ("held", 9), ("queued", 14)]);
        assert!(f.iter().all(needs_attention));
        assert!(
            f[1].detail.contains("jobguard resolve j"),
            "{}",
            f[1].detail
        );
    }

    #[test]
    fn a_long_healthy_history_is_cheap_and_a_long_gap_is_bounded() {
        // A week of minutes with one day missing in the middle.
        let runs: Vec<Run> = (0..7 * 1440)
            .filter(|m| !(3 * 1440..4 * 1440).contains(m))
            .map(|m| run(&format!("r{m}"), m, Outcome::Succeeded, m + 1))
            .collect();
        let f = audit_job(&runs, Some(&cal()), &BTreeSet::new(), &scope(7 * 1440));
        assert_eq!(f.len(), 1440, "{:?}", &f[..3]);
        assert!(f.iter().all(|f| f.kind == FindingKind::Missed));
        assert_eq!((f[0].slot - T0) / MIN, 3 * 1440);
    }

    /// What happened at one minute of a generated history.
    #[derive(Debug, Clone, Copy)]
    enum Event {
        Ran,
        Missing,
        Failed,
        FailedThenRan,
        /// Ran this many minutes late (by hand, or a backfill).
        Late(i64),
        /// Ran as a catch-up that passed over the two minutes before it.
        CaughtUp,
        /// Still running.
        Running,
        /// Cut off and marked so by another party: no report, so no schedule named.
        CutOff,
        /// Interrupted, recorded by its own shim: its report names the schedule.
        Interrupted,
    }

    fn event() -> impl proptest::strategy::Strategy<Value = Event> {
        use proptest::prelude::*;
        prop_oneof![
            6 => Just(Event::Ran),
            2 => Just(Event::Missing),
            1 => Just(Event::Failed),
            1 => Just(Event::FailedThenRan),
            1 => (1i64..40).prop_map(Event::Late),
            1 => Just(Event::CaughtUp),
            1 => Just(Event::Running),
            2 => Just(Event::CutOff),
            1 => Just(Event::Interrupted),
        ]
    }

    /// The records of `events`, minute by minute; those of the first `older` minutes were
    /// made under another schedule (the schedule changed once, never back).
    fn history(events: &[Event], older: i64) -> Vec<Run> {
        let mut runs = Vec::new();
        for (m, e) in (0..).zip(events) {
            let id = |k: &str| format!("{k}{m}");
            match *e {
                Event::Ran => runs.push(run(&id("r"), m, Outcome::Succeeded, 0)),
                Event::Missing => {}
                Event::Running => runs.push(run(&id("g"), m, Outcome::Running, 0)),
                Event::CutOff => {
                    let mut cut = run(&id("x"), m, Outcome::Interrupted, 0);
                    cut.report.clear();
                    runs.push(cut);
                }
                Event::Interrupted => runs.push(run(&id("i"), m, Outcome::Interrupted, 0)),
                Event::Failed => runs.push(run(&id("f"), m, Outcome::Failed, 0)),
                Event::FailedThenRan => {
                    runs.push(run(&id("f"), m, Outcome::Failed, 0));
                    let mut again = run(&id("r"), m, Outcome::Succeeded, 0);
                    again.started_at += 20_000_000;
                    again.finished_at = Some(again.started_at + 10_000_000);
                    runs.push(again);
                }
                Event::Late(k) => {
                    let mut late = run(&id("l"), m, Outcome::Succeeded, 0);
                    late.started_at += k * MIN;
                    late.finished_at = Some(late.started_at + 10_000_000);
                    runs.push(late);
                }
                Event::CaughtUp => {
                    runs.retain(|r: &Run| r.slot.usec < T0 + (m - 2) * MIN);
                    let mut c = run(&id("c"), m, Outcome::Succeeded, 0);
                    c.report
                        .insert(PASSED_OVER_AFTER.into(), format_usec(T0 + (m - 3) * MIN));
                    runs.push(c);
                }
            }
        }
        for r in &mut runs {
            if r.slot.usec < T0 + older * MIN && r.report.contains_key(SCHEDULE) {
                r.report
                    .insert(SCHEDULE.into(), "*-*-* *:00/2:00 (UTC)".into());
            }
        }
        retoken(&mut runs);
        runs
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(512))]

        /// `audit --since` reads only the window of slots from `since` on that
        /// `rules::window` keeps, and judges it as it would with every record read.
        #[test]
        fn a_window_of_records_is_judged_as_the_whole_history(
            events in proptest::collection::vec(event(), 1..80),
            since in -5i64..90,
            now in 60i64..130,
            older in proptest::prop_oneof![proptest::strategy::Just(0i64), 0i64..80],
        ) {
            let runs = history(&events, older);
            let mut s = scope(now);
            s.since = Some(T0 + since * MIN);
            let whole = audit_job(&runs, Some(&cal()), &BTreeSet::new(), &s);
            let mut window = runs.clone();
            crate::store::rules::window(&mut window, T0 + since * MIN, |r| r);
            let read = audit_job(&window, Some(&cal()), &BTreeSet::new(), &s);
            let show = |f: &[Finding]| f.iter().map(|f| format!("{} {} {:?}", f.kind.as_str(), (f.slot - T0) / MIN, f.runs)).collect::<Vec<_>>();
            proptest::prop_assert_eq!(show(&read), show(&whole));
        }
    }

    #[test]
    fn elapses_in_is_inclusive_and_bounded() {
        let (e, more) = elapses_in(&cal(), T0, T0 + 3 * MIN, 10);
        assert_eq!(e, vec![T0, T0 + MIN, T0 + 2 * MIN, T0 + 3 * MIN]);
        assert!(!more);
        let (e, more) = elapses_in(&cal(), T0, T0 + 3 * MIN, 2);
        assert_eq!(e.len(), 2);
        assert!(more);
    }
}

//! The store conformance suite: the same cases for every [`Store`] backend.
//!
//! A backend's test file provides a function returning a fresh [`Env`] (an empty store
//! plus a way to move its clock) and expands [`conformance_suite!`] with it, which makes
//! one `#[test]` per case. Every case starts the clock at [`T0`] and moves it only through
//! [`Env::advance`], so expiry is judged by the store's clock, never by sleeping.

use std::collections::BTreeMap;
use std::time::Duration;

use jobguard::guard::lease::{Holder, Lease};
use jobguard::guard::ledger::{Finish, NewRun, Outcome, Resolution, Run, Slot};
use jobguard::store::rules::FOREIGN_GRACE_USEC;
use jobguard::store::{
    Claim, ClaimRequest, ClockCheck, Finished, Mark, Marking, RunQuery, Store, StoreError,
};

/// The store clock at the start of every case: 2027-01-15T08:00:00Z.
pub const T0: i64 = 1_800_000_000_000_000;
/// Lease time to live used by the cases: 60 s.
pub const TTL: Duration = Duration::from_secs(60);
/// [`TTL`] in µs.
pub const TTL_US: i64 = 60_000_000;
/// One hour in µs.
const HOUR_US: i64 = 3_600_000_000;
/// µs after a grant when another machine may take its slot over while the grant's record
/// is still `running`: the lease's end plus the grace (`rules::FOREIGN_GRACE_USEC`).
pub const TAKEOVER_US: i64 = TTL_US + FOREIGN_GRACE_USEC;
/// A slot: 2027-01-15T02:00:00Z.
pub const S1: i64 = 1_799_978_400_000_000;
/// The next day's slot.
pub const S2: i64 = S1 + 86_400_000_000;
/// The day after.
pub const S3: i64 = S2 + 86_400_000_000;
/// The day after that.
pub const S4: i64 = S3 + 86_400_000_000;

/// One empty store under test, shared by any number of connections.
pub trait Env {
    /// A new connection to the store (a new "process").
    fn connect(&self) -> Result<Box<dyn Store>, StoreError>;
    /// Moves the store's clock forward by `usec` µs.
    fn advance(&self, usec: i64);
    /// Writes `version` as the store's schema version, behind the store's back.
    fn set_schema_version(&self, version: i64);
    /// The schema version this jobguard writes.
    fn current_schema_version(&self) -> i64;
    /// True when the store reads this host's clock (SQLite): no skew is possible, and
    /// `claim` does not compare the clocks.
    fn store_clock_is_host_clock(&self) -> bool {
        false
    }
    /// True when one operation holds the whole store from its read to its commit
    /// (SQLite's `BEGIN IMMEDIATE`): another connection's write waits for it.
    fn one_writer_at_a_time(&self) -> bool {
        false
    }
}

/// Expands to one `#[test]` per conformance case, each on a fresh env from `$fresh()`.
///
/// With `optional`, `$fresh(case_name)` returns `Option<Box<dyn Env>>` and a case whose
/// env is `None` (a store server that is not there, outside CI) returns at once.
///
/// With `transport` (as `optional`), the cases that only page through hundreds of
/// records of one key or job are left out: they test how a store lists and pages, which
/// TLS does not change, and cost minutes per store under TLS. The cases with large
/// values and many records in one answer (`a_long_history_of_large_reports_reads_back`,
/// `one_slot_keeps_every_attempt_of_a_large_report`) stay, for large frames over TLS.
#[allow(unused_macros)]
macro_rules! conformance_suite {
    ($fresh:path) => {
        $crate::common::conformance::conformance_suite!(@list required $fresh);
        $crate::common::conformance::conformance_suite!(@paging required $fresh);
    };
    (optional $fresh:path) => {
        $crate::common::conformance::conformance_suite!(@list optional $fresh);
        $crate::common::conformance::conformance_suite!(@paging optional $fresh);
    };
    (transport $fresh:path) => {
        $crate::common::conformance::conformance_suite!(@list optional $fresh);
    };
    (@paging $mode:ident $fresh:path) => {
        $crate::common::conformance::conformance_suite!(@cases $mode $fresh;
            the_newest_records_of_a_long_history_are_the_last_started,
            a_slot_of_hundreds_of_attempts_is_queued_rerun_once_and_deleted,
        );
    };
    (@list $mode:ident $fresh:path) => {
        $crate::common::conformance::conformance_suite!(@cases $mode $fresh;
            acquire_contend_expire_takeover,
            a_lapsed_holder_on_another_machine_keeps_its_running_slot_for_the_grace,
            own_unexpired_lease_can_be_claimed_again,
            renew_extends_by_store_clock,
            two_copies_of_one_holder_keep_the_lease_once,
            token_grows_across_release_takeover_and_unlock,
            stale_holder_changes_nothing,
            lease_lost_needs_only_the_running_record,
            unique_success_per_slot,
            slot_done_held_and_forced,
            attempts_count_per_slot,
            resolve_and_claim_mark_rerun,
            a_resolve_between_a_claims_read_and_commit_is_seen,
            interrupt_releases_only_the_matching_lease,
            a_cut_run_ends_at_its_leases_expiry,
            unlock_ends_any_lease,
            finish_records_every_field,
            runs_filters_and_order,
            reopen_and_init_are_idempotent,
            newer_schema_is_refused,
            claim_checks_the_host_clock,
            queued_re_runs_come_first,
            in_order_refuses_a_slot_behind_the_ledger,
            a_retried_claim_keeps_the_first_record,
            a_huge_clock_tolerance_is_no_error,
            a_done_slot_with_a_held_record_settles_its_queued_one,
            every_way_of_queueing_a_slot_is_seen_by_the_claim,
            a_rerun_is_not_queued_for_a_done_slot,
            a_kept_outcome_is_recorded_without_the_lease,
            a_kept_outcome_ends_when_its_command_ended,
            delete_slots_deletes_only_whole_settled_slots_of_the_job,
            schedules_are_declared_and_swapped_only_if_unchanged,
            heartbeats_are_kept_per_host_replaced_and_forgotten,
            a_long_history_of_large_reports_reads_back,
            one_slot_keeps_every_attempt_of_a_large_report,
            a_key_is_marked_once,
            a_mark_is_fenced_by_the_runs_lease,
            runs_reads_a_window_of_slots,
            marks_go_with_their_jobs_retention,
            jobs_are_those_with_records_sorted,
        );
    };
    (@cases required $fresh:path; $($case:ident),* $(,)?) => {
        $(
            #[test]
            fn $case() {
                let env = $fresh();
                $crate::common::conformance::$case(&*env);
            }
        )*
    };
    (@cases optional $fresh:path; $($case:ident),* $(,)?) => {
        $(
            #[test]
            fn $case() {
                let Some(env) = $fresh(stringify!($case)) else {
                    return;
                };
                $crate::common::conformance::$case(&*env);
            }
        )*
    };
}
#[allow(unused_imports)]
pub(crate) use conformance_suite;

/// Holder number `n`: its own machine, boot and pid.
pub fn holder(n: u32) -> Holder {
    Holder {
        machine_id: format!("{n:032x}"),
        boot_id: format!("b{n:031x}"),
        pid: 1000 + n,
        pid_start: 5_000_000 + u64::from(n),
        host: format!("host-{n}"),
    }
}

/// A run id from a number.
pub fn rid(n: u32) -> String {
    format!("{n:032x}")
}

/// A claim request for `job`/`slot` by holder `h` with run id `r`.
pub fn request(job: &str, slot: i64, h: u32, r: u32, forced: bool) -> ClaimRequest {
    ClaimRequest::new(
        NewRun {
            run_id: rid(r),
            job: job.to_string(),
            slot: Slot {
                usec: slot,
                zone: "Europe/Berlin".to_string(),
            },
            forced,
            trigger: "timer".to_string(),
            invocation_id: Some(format!("inv{r}")),
        },
        holder(h),
        TTL,
    )
}

fn connect(env: &dyn Env) -> Box<dyn Store> {
    env.connect().expect("connect to the store")
}

/// Claims and expects a grant.
pub fn claimed(s: &mut dyn Store, req: &ClaimRequest) -> (Lease, Run) {
    match s.claim(req).expect("claim") {
        Claim::Claimed { lease, run, .. } => (lease, run),
        other => panic!("expected Claimed for run {}, got {other:?}", req.run.run_id),
    }
}

/// Claims and expects a grant; also returns the previous slot the store answered.
pub fn claimed_after(s: &mut dyn Store, req: &ClaimRequest) -> (Lease, Run, Option<i64>) {
    match s.claim(req).expect("claim") {
        Claim::Claimed {
            lease,
            run,
            previous_slot,
        } => (lease, run, previous_slot),
        other => panic!("expected Claimed for run {}, got {other:?}", req.run.run_id),
    }
}

/// Claims and expects Busy; returns the lease in the way and its run.
pub fn busy(s: &mut dyn Store, req: &ClaimRequest) -> (Lease, Option<Run>) {
    match s.claim(req).expect("claim") {
        Claim::Busy { lease, run } => (lease, run),
        other => panic!("expected Busy for run {}, got {other:?}", req.run.run_id),
    }
}

/// The end of a run with `outcome`, as the shim reports it (exit status 0 or 1, no report).
pub fn finish(outcome: Outcome) -> Finish {
    Finish {
        outcome,
        reason: match outcome {
            Outcome::Failed => Some("exit".to_string()),
            Outcome::LeaseLost => Some("renew".to_string()),
            _ => None,
        },
        exit_status: match outcome {
            Outcome::Succeeded => Some(0),
            Outcome::Failed => Some(1),
            _ => None,
        },
        report: BTreeMap::new(),
        resolution: None,
        ended_at: None,
    }
}

fn run_by_id(s: &mut dyn Store, job: &str, run_id: &str) -> Run {
    s.runs(&RunQuery {
        job: Some(job.to_string()),
        ..RunQuery::default()
    })
    .expect("runs")
    .into_iter()
    .find(|r| r.run_id == run_id)
    .unwrap_or_else(|| panic!("run {run_id} not in the ledger"))
}

fn slot_runs(s: &mut dyn Store, job: &str, slot: i64) -> Vec<Run> {
    s.runs(&RunQuery {
        job: Some(job.to_string()),
        slot: Some(slot),
        ..RunQuery::default()
    })
    .expect("runs")
}

const RECORDED_AND_RELEASED: Finished = Finished {
    recorded: true,
    released: true,
};
const NOTHING: Finished = Finished {
    recorded: false,
    released: false,
};

/// A lease is granted with a token, contended until it expires by the store's clock, then
/// taken over by another holder.
pub fn acquire_contend_expire_takeover(env: &dyn Env) {
    let mut a = connect(env);
    let mut b = connect(env);
    assert_eq!(a.now().unwrap(), T0);
    assert_eq!(a.lease("sync").unwrap(), None);

    let (l1, r1) = claimed(&mut *a, &request("sync", S1, 1, 1, false));
    assert_eq!(l1.job, "sync");
    assert_eq!(l1.holder, holder(1).id());
    assert_eq!(l1.host, "host-1");
    assert_eq!(l1.acquired_at, T0);
    assert_eq!(l1.expire_at, T0 + TTL_US);
    assert_eq!(r1.outcome, Outcome::Running);
    assert_eq!(r1.fencing_token, l1.token);
    assert_eq!(r1.attempt, 1);
    assert_eq!(r1.started_at, T0);
    assert_eq!(b.lease("sync").unwrap(), Some(l1.clone()));

    // Another holder, through another connection: busy, and told who holds it.
    let (in_way, its_run) = busy(&mut *b, &request("sync", S1, 2, 2, false));
    assert_eq!(in_way, l1);
    assert_eq!(
        its_run.as_ref().map(|r| r.run_id.as_str()),
        Some(rid(1).as_str())
    );
    // Busy wrote nothing.
    assert_eq!(slot_runs(&mut *b, "sync", S1).len(), 1);

    // Still busy 1 µs before expiry.
    env.advance(TTL_US - 1);
    busy(&mut *b, &request("sync", S1, 2, 3, false));
    // Expired at expire_at, but the holder, on another machine, may still hold the
    // outcome of its run of the slot: busy for the grace more.
    env.advance(1);
    busy(&mut *b, &request("sync", S1, 2, 3, false));
    env.advance(FOREIGN_GRACE_USEC - 1);
    busy(&mut *b, &request("sync", S1, 2, 3, false));
    // Then taken over with a larger token.
    env.advance(1);
    let (l2, r2) = claimed(&mut *b, &request("sync", S1, 2, 4, false));
    assert!(l2.token > l1.token, "{l2:?} after {l1:?}");
    assert_eq!(l2.holder, holder(2).id());
    assert_eq!(r2.attempt, 2);
    assert_eq!(a.lease("sync").unwrap(), Some(l2.clone()));

    // Now the first holder is the one turned away.
    let (in_way, its_run) = busy(&mut *a, &request("sync", S1, 1, 5, false));
    assert_eq!(in_way, l2);
    assert_eq!(its_run.map(|r| r.run_id), Some(rid(4)));

    // Another job is independent.
    claimed(&mut *a, &request("other", S1, 1, 6, false));
}

/// A holder asking again while its own lease is unexpired gets a new grant.
pub fn own_unexpired_lease_can_be_claimed_again(env: &dyn Env) {
    let mut s = connect(env);
    let (l1, _) = claimed(&mut *s, &request("sync", S1, 1, 1, false));
    env.advance(1_000_000);
    let (l2, r2) = claimed(&mut *s, &request("sync", S1, 1, 2, false));
    assert!(l2.token > l1.token);
    assert_eq!(r2.attempt, 2);
    // The first grant is superseded: its run can no longer record.
    assert_eq!(
        s.finish(&l1, &rid(1), &finish(Outcome::Succeeded)).unwrap(),
        NOTHING
    );
    assert_eq!(
        s.finish(&l2, &rid(2), &finish(Outcome::Succeeded)).unwrap(),
        RECORDED_AND_RELEASED
    );
}

/// After a lease lapsed, its holder may be cut off from the store with the outcome of its
/// run in hand: for `FOREIGN_GRACE_USEC` after the lapse, its slot stays busy for another
/// machine's claim, forced or not, and for a claimer without a machine id, while the
/// record is `running`; and so for the same machine id under another boot (a reboot, or a
/// copy of the image with its own boot). The same boot (another process), another slot,
/// and a claim after `unlock` are not held back. Once a later grant took the lease on, the attempt keeps
/// its slot from other machines until it is judged (`interrupt`).
pub fn a_lapsed_holder_on_another_machine_keeps_its_running_slot_for_the_grace(env: &dyn Env) {
    let mut s = connect(env);
    let (l1, _) = claimed(&mut *s, &request("sync", S1, 1, 1, false));
    env.advance(TTL_US);
    let (in_way, its_run) = busy(&mut *s, &request("sync", S1, 2, 2, false));
    assert_eq!(in_way, l1);
    assert_eq!(its_run.map(|r| r.run_id), Some(rid(1)));
    busy(&mut *s, &request("sync", S1, 2, 2, true));
    let mut unknown = request("sync", S1, 2, 2, false);
    unknown.holder.machine_id = String::new();
    busy(&mut *s, &unknown);
    // Two hosts without a machine id are not taken for one machine.
    let mut blank = request("blank", S1, 1, 7, false);
    blank.holder.machine_id = String::new();
    claimed(&mut *s, &blank);
    env.advance(FOREIGN_GRACE_USEC - 1);
    busy(&mut *s, &request("sync", S1, 3, 2, false));
    let mut blank = request("blank", S1, 2, 8, false);
    blank.holder.machine_id = String::new();
    busy(&mut *s, &blank);
    // The same machine id under another boot: a reboot, or a copy of the image that may
    // still hold the outcome.
    let mut copy = request("sync", S1, 2, 2, false);
    copy.holder.machine_id = holder(1).machine_id;
    busy(&mut *s, &copy);
    // The same boot, another process: it records its own kept outcome before it claims.
    let mut same_boot = request("sync", S1, 2, 2, false);
    same_boot.holder.machine_id = holder(1).machine_id;
    same_boot.holder.boot_id = holder(1).boot_id;
    let (l2, r2) = claimed(&mut *s, &same_boot);
    assert_eq!((l2.token, r2.attempt), (l1.token + 1, 2));

    // Another slot is not held back. Once its grant took the lease on, the attempt at S1
    // waits, from any other machine, for a recovery pass to judge it (interrupt).
    let (l3, r3) = claimed(&mut *s, &request("other", S1, 1, 3, false));
    env.advance(TTL_US);
    claimed(&mut *s, &request("other", S2, 2, 4, false));
    env.advance(TAKEOVER_US);
    let (_, its_run) = busy(&mut *s, &request("other", S1, 3, 9, false));
    assert_eq!(its_run.map(|r| r.run_id), Some(rid(3)));
    assert!(
        s.interrupt(&r3, "lease-expired", Resolution::Queued)
            .unwrap()
    );
    claimed(&mut *s, &request("other", S1, 3, 9, false));
    // A person's unlock ends the wait.
    let (l5, _) = claimed(&mut *s, &request("third", S1, 1, 5, false));
    env.advance(TTL_US);
    busy(&mut *s, &request("third", S1, 2, 6, false));
    s.unlock("third").unwrap();
    let (l6, _) = claimed(&mut *s, &request("third", S1, 2, 6, false));
    assert!(l6.token > l5.token && l3.token > 0);
}

/// Renewal moves expiry to store-now + ttl, only for the current unexpired grant.
pub fn renew_extends_by_store_clock(env: &dyn Env) {
    let mut a = connect(env);
    let mut b = connect(env);
    let (l1, _) = claimed(&mut *a, &request("sync", S1, 1, 1, false));
    env.advance(30_000_000);
    let until = a.renew(&l1, 5, TTL).unwrap();
    let l1 = Lease { renewal: 5, ..l1 };
    assert_eq!(until, Some(T0 + 30_000_000 + TTL_US));
    assert_eq!(b.lease("sync").unwrap().unwrap().expire_at, T0 + 90_000_000);
    // Past the original expiry, still held.
    env.advance(TTL_US - 1);
    busy(&mut *b, &request("sync", S1, 2, 2, false));
    env.advance(1);
    // Expired: renewal is refused and changes nothing.
    assert_eq!(a.renew(&l1, 6, TTL).unwrap(), None);
    assert_eq!(b.lease("sync").unwrap().unwrap().expire_at, T0 + 90_000_000);
    env.advance(FOREIGN_GRACE_USEC);
    claimed(&mut *b, &request("sync", S1, 2, 3, false));
    assert_eq!(a.renew(&l1, 6, TTL).unwrap(), None);
    // A lease value with the right token but another holder is not ours either.
    let l2 = b.lease("sync").unwrap().unwrap();
    let forged = Lease {
        holder: holder(1).id(),
        ..l2.clone()
    };
    assert_eq!(a.renew(&forged, 6, TTL).unwrap(), None);
    assert_eq!(b.lease("sync").unwrap(), Some(l2));
}

/// Two copies of one holder (one memory snapshot resumed twice, on two connections):
/// one grant, one token, one run id. The first copy to renew moves the renewal
/// generation on; the other copy's renewals, and its final writes (as a lost lease, or
/// kept), are refused while the first copy's lease lives; the first copy's renewal sent
/// again after a lost answer is still its own, and it finishes.
pub fn two_copies_of_one_holder_keep_the_lease_once(env: &dyn Env) {
    let mut a = connect(env);
    let mut b = connect(env);
    let (lease, _) = claimed(&mut *a, &request("sync", S1, 1, 1, false));
    assert_eq!(lease.renewal, 0, "a grant's generation");
    env.advance(10_000_000);
    assert_eq!(
        a.renew(&lease, 11, TTL).unwrap(),
        Some(T0 + 10_000_000 + TTL_US)
    );
    env.advance(1_000_000);
    // Copy b, resumed from the same snapshot: same lease, its own next generation.
    assert_eq!(b.renew(&lease, 22, TTL).unwrap(), None);
    for outcome in [Outcome::LeaseLost, Outcome::Succeeded] {
        assert_eq!(
            b.finish(&lease, &rid(1), &finish(outcome)).unwrap(),
            NOTHING
        );
        assert_eq!(
            b.finish_kept(&lease, &rid(1), &finish(outcome)).unwrap(),
            NOTHING
        );
    }
    assert_eq!(
        run_by_id(&mut *b, "sync", &rid(1)).outcome,
        Outcome::Running
    );
    // Copy a sends its renewal again (the answer was lost): still its own.
    assert_eq!(
        a.renew(&lease, 11, TTL).unwrap(),
        Some(T0 + 11_000_000 + TTL_US)
    );
    let row = b.lease("sync").unwrap().expect("held");
    assert_eq!((row.renewal, row.token), (11, lease.token));
    let a_lease = Lease {
        renewal: 11,
        ..lease.clone()
    };
    assert_eq!(
        a.finish(&a_lease, &rid(1), &finish(Outcome::Succeeded))
            .unwrap(),
        RECORDED_AND_RELEASED
    );
    assert_eq!(
        run_by_id(&mut *a, "sync", &rid(1)).outcome,
        Outcome::Succeeded
    );
}

/// Tokens grow per job across every grant, also after release, takeover and unlock.
pub fn token_grows_across_release_takeover_and_unlock(env: &dyn Env) {
    let mut s = connect(env);
    let mut tokens = Vec::new();
    let (l, _) = claimed(&mut *s, &request("sync", S1, 1, 1, false));
    tokens.push(l.token);
    assert_eq!(
        s.finish(&l, &rid(1), &finish(Outcome::Succeeded)).unwrap(),
        RECORDED_AND_RELEASED
    );
    assert_eq!(s.lease("sync").unwrap(), None, "released");

    let (l, _) = claimed(&mut *s, &request("sync", S2, 2, 2, false));
    tokens.push(l.token);
    env.advance(TAKEOVER_US);
    let (l, _) = claimed(&mut *s, &request("sync", S2, 3, 3, false));
    tokens.push(l.token);
    assert!(s.unlock("sync").unwrap().is_some());
    let (l, _) = claimed(&mut *s, &request("sync", S3, 1, 4, false));
    tokens.push(l.token);
    let released = s.finish(&l, &rid(4), &finish(Outcome::Failed)).unwrap();
    assert_eq!(released, RECORDED_AND_RELEASED);
    let (l, _) = claimed(&mut *s, &request("sync", S3, 1, 5, false));
    tokens.push(l.token);

    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "tokens not increasing: {tokens:?}"
    );
    // Tokens are per job: another job's first token is not larger than sync's first.
    let (other, _) = claimed(&mut *s, &request("other", S1, 1, 6, false));
    assert!(other.token <= tokens[0], "{other:?} vs {tokens:?}");
}

/// A holder whose lease expired, or was taken over, renews, records and releases nothing,
/// and the store says so.
pub fn stale_holder_changes_nothing(env: &dyn Env) {
    let mut a = connect(env);
    let mut b = connect(env);
    let (l1, _) = claimed(&mut *a, &request("sync", S1, 1, 1, false));
    env.advance(TTL_US);

    // Expired, nobody took over yet.
    assert_eq!(a.renew(&l1, 6, TTL).unwrap(), None);
    for outcome in [Outcome::Succeeded, Outcome::Failed] {
        assert_eq!(a.finish(&l1, &rid(1), &finish(outcome)).unwrap(), NOTHING);
    }
    let r1 = run_by_id(&mut *a, "sync", &rid(1));
    assert_eq!(r1.outcome, Outcome::Running);
    assert_eq!(r1.finished_at, None);
    let row = b.lease("sync").unwrap().unwrap();
    assert_eq!(row, l1, "an expired holder must not touch the lease row");

    // Taken over (past the grace another machine waits).
    env.advance(FOREIGN_GRACE_USEC);
    let (l2, _) = claimed(&mut *b, &request("sync", S1, 2, 2, false));
    assert_eq!(a.renew(&l1, 6, TTL).unwrap(), None);
    assert_eq!(
        a.finish(&l1, &rid(1), &finish(Outcome::Succeeded)).unwrap(),
        NOTHING
    );
    // The old grant cannot finish the new holder's run either.
    assert_eq!(
        a.finish(&l1, &rid(2), &finish(Outcome::Failed)).unwrap(),
        NOTHING
    );
    assert_eq!(a.lease("sync").unwrap(), Some(l2.clone()));
    assert_eq!(
        run_by_id(&mut *a, "sync", &rid(2)).outcome,
        Outcome::Running
    );
    assert_eq!(
        run_by_id(&mut *a, "sync", &rid(1)).outcome,
        Outcome::Running
    );

    // The new holder is unaffected.
    assert_eq!(
        b.finish(&l2, &rid(2), &finish(Outcome::Succeeded)).unwrap(),
        RECORDED_AND_RELEASED
    );
}

/// `lease_lost` is recorded while the record is still `running` with the grant's token,
/// whoever holds the lease now, and never releases someone else's lease.
pub fn lease_lost_needs_only_the_running_record(env: &dyn Env) {
    let mut a = connect(env);
    let mut b = connect(env);
    let (l1, _) = claimed(&mut *a, &request("sync", S1, 1, 1, false));
    env.advance(TAKEOVER_US + 5);
    let (l2, _) = claimed(&mut *b, &request("sync", S1, 2, 2, false));

    let done = a.finish(&l1, &rid(1), &finish(Outcome::LeaseLost)).unwrap();
    assert_eq!(
        done,
        Finished {
            recorded: true,
            released: false
        }
    );
    let r1 = run_by_id(&mut *a, "sync", &rid(1));
    assert_eq!(r1.outcome, Outcome::LeaseLost);
    assert_eq!(r1.reason.as_deref(), Some("renew"));
    assert_eq!(r1.finished_at, Some(T0 + TAKEOVER_US + 5));
    assert_eq!(a.lease("sync").unwrap(), Some(l2));
    // Once recorded, it is no longer running: a second finish changes nothing.
    assert_eq!(
        a.finish(&l1, &rid(1), &finish(Outcome::LeaseLost)).unwrap(),
        NOTHING
    );
    // The wrong token never matches.
    let wrong = Lease {
        token: l1.token + 100,
        ..l1
    };
    assert!(
        !b.finish(&wrong, &rid(2), &finish(Outcome::LeaseLost))
            .unwrap()
            .recorded
    );
}

/// Two holders after an expiry cannot both record success for a slot.
pub fn unique_success_per_slot(env: &dyn Env) {
    let mut a = connect(env);
    let mut b = connect(env);
    let mut c = connect(env);
    let (l1, _) = claimed(&mut *a, &request("sync", S1, 1, 1, false));
    env.advance(TAKEOVER_US);
    let (l2, _) = claimed(&mut *b, &request("sync", S1, 2, 2, false));
    assert_eq!(
        b.finish(&l2, &rid(2), &finish(Outcome::Succeeded)).unwrap(),
        RECORDED_AND_RELEASED
    );
    // The lease is free again, but the old grant is still not ours.
    assert_eq!(
        a.finish(&l1, &rid(1), &finish(Outcome::Succeeded)).unwrap(),
        NOTHING
    );
    let succeeded = c
        .runs(&RunQuery {
            job: Some("sync".into()),
            slot: Some(S1),
            outcomes: vec![Outcome::Succeeded],
            ..RunQuery::default()
        })
        .unwrap();
    assert_eq!(succeeded.len(), 1);
    assert_eq!(succeeded[0].run_id, rid(2));
    match c.claim(&request("sync", S1, 3, 3, false)).unwrap() {
        Claim::SlotDone { by } => assert_eq!(by.run_id, rid(2)),
        other => panic!("expected SlotDone, got {other:?}"),
    }
}

/// Done and held slots are skipped unless forced; forcing never skips the lease.
pub fn slot_done_held_and_forced(env: &dyn Env) {
    let mut s = connect(env);
    // S1: succeeded -> done.
    let (l, _) = claimed(&mut *s, &request("sync", S1, 1, 1, false));
    s.finish(&l, &rid(1), &finish(Outcome::Succeeded)).unwrap();
    match s.claim(&request("sync", S1, 2, 2, false)).unwrap() {
        Claim::SlotDone { by } => {
            assert_eq!(by.run_id, rid(1));
            assert_eq!(by.outcome, Outcome::Succeeded);
        }
        other => panic!("expected SlotDone, got {other:?}"),
    }
    assert_eq!(
        slot_runs(&mut *s, "sync", S1).len(),
        1,
        "a skip writes nothing"
    );
    assert_eq!(s.lease("sync").unwrap(), None, "a skip takes no lease");
    let (l, forced) = claimed(&mut *s, &request("sync", S1, 2, 3, true));
    assert!(forced.forced);
    assert_eq!(forced.attempt, 2);
    assert_eq!(
        s.finish(&l, &rid(3), &finish(Outcome::Succeeded)).unwrap(),
        RECORDED_AND_RELEASED,
        "a forced run over a done slot records its success"
    );

    // S2: interrupted and held -> held.
    let (_, r) = claimed(&mut *s, &request("sync", S2, 1, 4, false));
    assert!(s.interrupt(&r, "boot", Resolution::Held).unwrap());
    match s.claim(&request("sync", S2, 2, 5, false)).unwrap() {
        Claim::SlotHeld { by } => {
            assert_eq!(by.run_id, rid(4));
            assert_eq!(by.resolution, Some(Resolution::Held));
        }
        other => panic!("expected SlotHeld, got {other:?}"),
    }
    let (_, r) = claimed(&mut *s, &request("sync", S2, 2, 6, true));
    assert_eq!(r.attempt, 2);
    assert_eq!(
        run_by_id(&mut *s, "sync", &rid(4)).resolution,
        Some(Resolution::Rerun),
        "the forced attempt takes the held one over"
    );

    // S3: a forced claim still waits for another holder's lease.
    env.advance(TTL_US);
    claimed(&mut *s, &request("sync", S3, 3, 7, false));
    let (lease, _) = busy(&mut *s, &request("sync", S3, 4, 8, true));
    assert_eq!(lease.holder, holder(3).id());

    // S4: failed, then resolved as done by a person -> done.
    env.advance(TTL_US);
    let (l, _) = claimed(&mut *s, &request("sync", S4, 1, 9, false));
    s.finish(&l, &rid(9), &finish(Outcome::Failed)).unwrap();
    assert_eq!(s.resolve("sync", S4, Resolution::Done).unwrap(), 1);
    match s.claim(&request("sync", S4, 2, 10, false)).unwrap() {
        Claim::SlotDone { by } => {
            assert_eq!(by.run_id, rid(9));
            assert_eq!(by.resolution, Some(Resolution::Done));
        }
        other => panic!("expected SlotDone, got {other:?}"),
    }
}

/// Attempts count the earlier records of the same (job, slot) only.
pub fn attempts_count_per_slot(env: &dyn Env) {
    let mut s = connect(env);
    for (n, expected) in [(1, 1), (2, 2), (3, 3)] {
        let (l, r) = claimed(&mut *s, &request("sync", S1, 1, n, false));
        assert_eq!(r.attempt, expected);
        s.finish(&l, &rid(n), &finish(Outcome::Failed)).unwrap();
    }
    let (l, r) = claimed(&mut *s, &request("sync", S2, 1, 4, false));
    assert_eq!(r.attempt, 1);
    s.finish(&l, &rid(4), &finish(Outcome::Failed)).unwrap();
    let (_, r) = claimed(&mut *s, &request("other", S1, 1, 5, false));
    assert_eq!(r.attempt, 1);
    let (_, r) = claimed(&mut *s, &request("sync", S1, 1, 6, false));
    assert_eq!(r.attempt, 4);
}

/// `resolve` sets what happens next to unresolved failed, lease-lost and interrupted
/// records; a later attempt marks queued and held ones as taken over (`rerun`).
pub fn resolve_and_claim_mark_rerun(env: &dyn Env) {
    let mut s = connect(env);
    let (l, _) = claimed(&mut *s, &request("sync", S1, 1, 1, false));
    s.finish(&l, &rid(1), &finish(Outcome::Failed)).unwrap();
    let (l, _) = claimed(&mut *s, &request("sync", S1, 1, 2, false));
    s.finish(&l, &rid(2), &finish(Outcome::LeaseLost)).unwrap();
    let (_, r3) = claimed(&mut *s, &request("sync", S1, 1, 3, false));
    assert!(s.interrupt(&r3, "boot", Resolution::Queued).unwrap());
    // Another slot and another job are not touched.
    let (l, _) = claimed(&mut *s, &request("sync", S2, 1, 4, false));
    s.finish(&l, &rid(4), &finish(Outcome::Failed)).unwrap();
    let (l, _) = claimed(&mut *s, &request("other", S1, 1, 5, false));
    s.finish(&l, &rid(5), &finish(Outcome::Failed)).unwrap();

    assert_eq!(s.resolve("sync", S1, Resolution::Held).unwrap(), 3);
    assert_eq!(
        s.resolve("sync", S1, Resolution::Held).unwrap(),
        0,
        "already held"
    );
    for n in [1, 2, 3] {
        assert_eq!(
            run_by_id(&mut *s, "sync", &rid(n)).resolution,
            Some(Resolution::Held)
        );
    }
    assert_eq!(run_by_id(&mut *s, "sync", &rid(4)).resolution, None);
    assert_eq!(run_by_id(&mut *s, "other", &rid(5)).resolution, None);
    assert!(matches!(
        s.claim(&request("sync", S1, 1, 6, false)).unwrap(),
        Claim::SlotHeld { .. }
    ));

    assert_eq!(s.resolve("sync", S1, Resolution::Queued).unwrap(), 3);
    let (l, r) = claimed(&mut *s, &request("sync", S1, 1, 7, false));
    assert_eq!(r.attempt, 4);
    for n in [1, 2, 3] {
        assert_eq!(
            run_by_id(&mut *s, "sync", &rid(n)).resolution,
            Some(Resolution::Rerun)
        );
    }
    // Rerun records are final; the running attempt is not resolvable.
    assert_eq!(s.resolve("sync", S1, Resolution::Done).unwrap(), 0);
    s.finish(&l, &rid(7), &finish(Outcome::Failed)).unwrap();
    assert_eq!(s.resolve("sync", S1, Resolution::Done).unwrap(), 1);
    assert_eq!(
        s.resolve("sync", S1, Resolution::Queued).unwrap(),
        0,
        "done is final"
    );
    // Succeeded records are never resolved.
    let (l, _) = claimed(&mut *s, &request("sync", S3, 1, 8, false));
    s.finish(&l, &rid(8), &finish(Outcome::Succeeded)).unwrap();
    assert_eq!(s.resolve("sync", S3, Resolution::Done).unwrap(), 0);
}

/// A person's resolve that lands between a claim's read and its commit (another
/// connection, on the real store) is seen by the claim: the version it read moved, so it
/// reads again, finds the slot done and refuses; the record keeps `done` and the slot
/// is not run again. Where one operation holds the whole store (SQLite) the resolve waits
/// for the claim and comes after it: the slot is re-run and the resolve, finding the
/// record `rerun`, changes nothing. Either way one order of the two explains the ledger.
pub fn a_resolve_between_a_claims_read_and_commit_is_seen(env: &dyn Env) {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, mpsc};

    let mut s = connect(env);
    let (l, _) = claimed(&mut *s, &request("sync", S1, 1, 1, false));
    s.finish(&l, &rid(1), &finish(Outcome::Failed)).unwrap();
    assert_eq!(s.resolve("sync", S1, Resolution::Queued).unwrap(), 1);
    let mut other = connect(env);
    let (go, went) = mpsc::channel::<()>();
    let (done, finished) = mpsc::channel::<()>();
    let first = Arc::new(AtomicBool::new(false));
    let (hooked, first_in_hook) = (Arc::new(AtomicBool::new(false)), first.clone());
    let ran = hooked.clone();
    let wait = Duration::from_secs(if env.one_writer_at_a_time() { 2 } else { 10 });
    let (claim, resolved) = std::thread::scope(|scope| {
        let person = scope.spawn(move || {
            went.recv().ok()?;
            let n = other.resolve("sync", S1, Resolution::Done).unwrap();
            let _ = done.send(());
            Some(n)
        });
        jobguard::store::before_next_commit(Some(Box::new(move || {
            ran.store(true, Ordering::SeqCst);
            go.send(()).unwrap();
            // Where the resolve waits for the claim (SQLite), not as long as its busy
            // timeout (10 s).
            let waited = finished.recv_timeout(wait).is_ok();
            first_in_hook.store(waited, Ordering::SeqCst);
        })));
        let claim = s.claim(&request("sync", S1, 2, 2, false));
        // A hook not run is dropped, and with it the person's signal.
        jobguard::store::before_next_commit(None);
        (claim, person.join().unwrap())
    });
    assert!(hooked.load(Ordering::SeqCst), "the claim never committed");
    let resolved = resolved.expect("the resolve ran");
    let record = run_by_id(&mut *s, "sync", &rid(1));
    let runs = slot_runs(&mut *s, "sync", S1);
    if first.load(Ordering::SeqCst) {
        assert!(matches!(claim, Ok(Claim::SlotDone { .. })), "{claim:?}");
        assert_eq!(resolved, 1);
        assert_eq!(record.resolution, Some(Resolution::Done), "{runs:#?}");
        assert_eq!(runs.len(), 1, "{runs:#?}");
    } else {
        assert!(
            env.one_writer_at_a_time(),
            "the resolve did not finish while the claim waited to commit"
        );
        assert!(matches!(claim, Ok(Claim::Claimed { .. })), "{claim:?}");
        assert_eq!(resolved, 0);
        assert_eq!(record.resolution, Some(Resolution::Rerun), "{runs:#?}");
        assert_eq!(runs.len(), 2, "{runs:#?}");
    }
}

/// `resolve` to `queued` changes nothing in a slot that is done (a record succeeded, or a
/// person resolved it as done): nothing is left to re-run, and a queued record there
/// would only say `failed (queued)` forever. `held` and `done` still apply.
pub fn a_rerun_is_not_queued_for_a_done_slot(env: &dyn Env) {
    let mut s = connect(env);
    // S1: failed, then succeeded.
    let (l, _) = claimed(&mut *s, &request("sync", S1, 1, 1, false));
    s.finish(&l, &rid(1), &finish(Outcome::Failed)).unwrap();
    let (l, _) = claimed(&mut *s, &request("sync", S1, 1, 2, false));
    s.finish(&l, &rid(2), &finish(Outcome::Succeeded)).unwrap();
    // S2: failed twice, then one attempt resolved as done by a person.
    let (l, _) = claimed(&mut *s, &request("sync", S2, 1, 3, false));
    s.finish(&l, &rid(3), &finish(Outcome::Failed)).unwrap();
    assert_eq!(s.resolve("sync", S2, Resolution::Done).unwrap(), 1);
    let (l, _) = claimed(&mut *s, &request("sync", S2, 1, 4, true));
    s.finish(&l, &rid(4), &finish(Outcome::Failed)).unwrap();
    for slot in [S1, S2] {
        let before = slot_runs(&mut *s, "sync", slot);
        assert_eq!(
            s.resolve("sync", slot, Resolution::Queued).unwrap(),
            0,
            "slot {slot} is done"
        );
        assert_eq!(slot_runs(&mut *s, "sync", slot), before);
    }
    let queued = s
        .runs(&RunQuery {
            job: Some("sync".into()),
            resolutions: vec![Resolution::Queued],
            ..RunQuery::default()
        })
        .unwrap();
    assert!(queued.is_empty(), "{queued:?}");
    // A queued-first claim finds nothing queued and takes the slot asked for.
    let mut req = request("sync", S3, 1, 5, false);
    req.queued_first = true;
    let (_, r) = claimed(&mut *s, &req);
    assert_eq!(r.slot.usec, S3);
    // Another job's failed attempt at the same slot is still queued.
    let (l, _) = claimed(&mut *s, &request("other", S1, 1, 6, false));
    s.finish(&l, &rid(6), &finish(Outcome::Failed)).unwrap();
    assert_eq!(s.resolve("other", S1, Resolution::Queued).unwrap(), 1);
    // Held still applies to a done slot's unresolved failure.
    assert_eq!(s.resolve("sync", S1, Resolution::Held).unwrap(), 1);
}

/// An outcome kept on its host and recorded late (the store was away when the command
/// ended) keeps the command's own end as `finished_at`, not the time of the late write,
/// within the record's start and the latest its lease let it run (`rules::cut_end`):
/// the lease's expiry while the row is still its grant, a later grant's start once one
/// took over.
pub fn a_kept_outcome_ends_when_its_command_ended(env: &dyn Env) {
    let mut s = connect(env);
    let kept = |outcome, ended_at| Finish {
        ended_at: Some(ended_at),
        ..finish(outcome)
    };
    // S1: ended 20 s in, recorded two hours later.
    let (l, _) = claimed(&mut *s, &request("sync", S1, 1, 1, false));
    env.advance(2 * 3_600_000_000);
    let done = s
        .finish_kept(&l, &rid(1), &kept(Outcome::Succeeded, T0 + 20_000_000))
        .unwrap();
    assert!(done.recorded, "{done:?}");
    let r = run_by_id(&mut *s, "sync", &rid(1));
    assert_eq!(r.finished_at, Some(T0 + 20_000_000));
    // S2: a host clock far ahead says it ended after its lease expired: the expiry.
    let t = T0 + 2 * 3_600_000_000;
    let (l, _) = claimed(&mut *s, &request("sync", S2, 1, 2, false));
    env.advance(10 * 60_000_000);
    assert!(
        s.finish_kept(&l, &rid(2), &kept(Outcome::Failed, t + 9 * 60_000_000))
            .unwrap()
            .recorded
    );
    assert_eq!(
        run_by_id(&mut *s, "sync", &rid(2)).finished_at,
        Some(l.expire_at)
    );
    // S3: a clock behind says it ended before it started: the start, also once a later
    // grant holds the row.
    let t = t + 10 * 60_000_000;
    let (l, r3) = claimed(&mut *s, &request("sync", S3, 1, 3, false));
    env.advance(TAKEOVER_US + 5);
    let (l4, _) = claimed(&mut *s, &request("sync", S3, 2, 4, false));
    assert!(
        s.finish_kept(&l, &rid(3), &kept(Outcome::Failed, t - 1))
            .unwrap()
            .recorded
    );
    assert_eq!(
        run_by_id(&mut *s, "sync", &rid(3)).finished_at,
        Some(r3.started_at)
    );
    assert!(l4.token > l.token);
}

/// `finish_kept` records an outcome that its shim could not record in time (kept on its
/// host and replayed): without the lease, only on a record still `running` with the
/// token, and it releases the lease only while that grant holds.
pub fn a_kept_outcome_is_recorded_without_the_lease(env: &dyn Env) {
    let mut s = connect(env);
    // S1: the lease expired before the store could take the outcome.
    let (l, _) = claimed(&mut *s, &request("sync", S1, 1, 1, false));
    env.advance(TTL_US + 1);
    assert_eq!(
        s.finish(&l, &rid(1), &finish(Outcome::Succeeded)).unwrap(),
        NOTHING
    );
    let recorded_only = Finished {
        recorded: true,
        released: false,
    };
    assert_eq!(
        s.finish_kept(&l, &rid(1), &finish(Outcome::Succeeded))
            .unwrap(),
        recorded_only
    );
    let r = run_by_id(&mut *s, "sync", &rid(1));
    assert_eq!(r.outcome, Outcome::Succeeded);
    assert_eq!(r.exit_status, Some(0));
    assert_eq!(r.finished_at, Some(T0 + TTL_US + 1));
    assert!(matches!(
        s.claim(&request("sync", S1, 2, 9, false)).unwrap(),
        Claim::SlotDone { .. }
    ));
    // Once only: the record is no longer running.
    assert_eq!(
        s.finish_kept(&l, &rid(1), &finish(Outcome::Failed))
            .unwrap(),
        NOTHING
    );
    assert_eq!(
        run_by_id(&mut *s, "sync", &rid(1)).outcome,
        Outcome::Succeeded
    );

    // S2: the grant still holds (the shim was killed at once): recorded and released.
    let (l, _) = claimed(&mut *s, &request("sync", S2, 1, 2, false));
    assert_eq!(
        s.finish_kept(&l, &rid(2), &finish(Outcome::Failed))
            .unwrap(),
        RECORDED_AND_RELEASED
    );
    assert_eq!(s.lease("sync").unwrap(), None);

    // S3: recover marked it interrupted first: left as it is.
    let (l, r3) = claimed(&mut *s, &request("sync", S3, 1, 3, false));
    assert!(
        s.interrupt(&r3, "process-gone", Resolution::Queued)
            .unwrap()
    );
    assert_eq!(
        s.finish_kept(&l, &rid(3), &finish(Outcome::Succeeded))
            .unwrap(),
        NOTHING
    );
    let r = run_by_id(&mut *s, "sync", &rid(3));
    assert_eq!(r.outcome, Outcome::Interrupted);
    assert_eq!(r.resolution, Some(Resolution::Queued));

    // S4: another holder has the job's lease now: the record is written, that lease kept.
    let (l4, _) = claimed(&mut *s, &request("sync", S4, 1, 4, false));
    env.advance(TTL_US + 1);
    let (l5, _) = claimed(&mut *s, &request("other-slot-holder", S4, 2, 5, false));
    let (l6, _) = claimed(&mut *s, &request("sync", S4 + 3_600_000_000, 2, 6, false));
    assert_eq!(
        s.finish_kept(&l4, &rid(4), &finish(Outcome::Failed))
            .unwrap(),
        recorded_only
    );
    assert_eq!(s.lease("sync").unwrap(), Some(l6));
    assert_eq!(s.lease("other-slot-holder").unwrap(), Some(l5));
}

/// `interrupt` ends a running record once and releases the lease only if it is still that
/// run's grant.
pub fn interrupt_releases_only_the_matching_lease(env: &dyn Env) {
    let mut s = connect(env);
    let (_, r1) = claimed(&mut *s, &request("sync", S1, 1, 1, false));
    env.advance(7);
    assert!(
        s.interrupt(&r1, "process-gone", Resolution::Queued)
            .unwrap()
    );
    assert_eq!(s.lease("sync").unwrap(), None, "its own grant is released");
    let rec = run_by_id(&mut *s, "sync", &rid(1));
    assert_eq!(rec.outcome, Outcome::Interrupted);
    assert_eq!(rec.reason.as_deref(), Some("process-gone"));
    assert_eq!(rec.resolution, Some(Resolution::Queued));
    assert_eq!(rec.finished_at, Some(T0 + 7));

    let (l2, r2) = claimed(&mut *s, &request("sync", S1, 2, 2, false));
    assert_eq!(r2.attempt, 2);
    assert_eq!(
        run_by_id(&mut *s, "sync", &rid(1)).resolution,
        Some(Resolution::Rerun)
    );
    // A second interrupt of the same record changes nothing and keeps the new lease.
    assert!(!s.interrupt(&r1, "boot", Resolution::Held).unwrap());
    assert_eq!(s.lease("sync").unwrap(), Some(l2.clone()));
    assert_eq!(
        run_by_id(&mut *s, "sync", &rid(1)).reason.as_deref(),
        Some("process-gone")
    );

    // r2's holder vanished, its lease expired and holder 3 took over: interrupting r2
    // must not end holder 3's lease.
    env.advance(TAKEOVER_US);
    let (l3, _) = claimed(&mut *s, &request("sync", S1, 3, 3, false));
    env.advance(HOUR_US);
    assert!(s.interrupt(&r2, "lease-expired", Resolution::Held).unwrap());
    assert_eq!(s.lease("sync").unwrap(), Some(l3.clone()));
    let rec2 = run_by_id(&mut *s, "sync", &rid(2));
    assert_eq!(rec2.outcome, Outcome::Interrupted);
    // It ended no later than the grant that took its lease over, not an hour later.
    assert_eq!(rec2.finished_at, Some(l3.acquired_at));
    assert_ne!(l2.token, 0);
}

/// A run found cut long after its lease expired (its host was off) is recorded as ended
/// at that expiry: its duration is its own time, not the downtime.
pub fn a_cut_run_ends_at_its_leases_expiry(env: &dyn Env) {
    let mut s = connect(env);
    let (l1, r1) = claimed(&mut *s, &request("sync", S1, 1, 1, false));
    env.advance(10_000_000);
    let expiry = s.renew(&l1, 5, TTL).unwrap().expect("renewed");
    env.advance(5 * HOUR_US);
    assert!(s.interrupt(&r1, "boot", Resolution::Queued).unwrap());
    let rec = run_by_id(&mut *s, "sync", &rid(1));
    assert_eq!(rec.outcome, Outcome::Interrupted);
    assert_eq!(rec.finished_at, Some(expiry));
    assert_eq!(s.lease("sync").unwrap(), None, "its own grant is released");
}

/// `unlock` ends whatever lease is there and reports it if it was unexpired.
pub fn unlock_ends_any_lease(env: &dyn Env) {
    let mut a = connect(env);
    let mut b = connect(env);
    assert_eq!(a.unlock("never").unwrap(), None);
    let (l1, _) = claimed(&mut *a, &request("sync", S1, 1, 1, false));
    assert_eq!(b.unlock("sync").unwrap(), Some(l1.clone()));
    assert_eq!(b.lease("sync").unwrap(), None);
    assert_eq!(a.renew(&l1, 6, TTL).unwrap(), None);
    let (l2, _) = claimed(&mut *b, &request("sync", S1, 2, 2, false));
    assert!(l2.token > l1.token);
    assert_eq!(
        a.finish(&l1, &rid(1), &finish(Outcome::Succeeded)).unwrap(),
        NOTHING
    );
    env.advance(TTL_US);
    assert_eq!(
        a.unlock("sync").unwrap(),
        None,
        "an expired lease is not reported"
    );
    claimed(&mut *a, &request("sync", S1, 1, 3, false));
}

/// The schedule a job runs by: nothing until declared; a swap happens only while the
/// record is what the caller read (two hosts racing: one wins); the newest definition
/// wins through `declare_schedule` on any connection; jobs are apart.
pub fn schedules_are_declared_and_swapped_only_if_unchanged(env: &dyn Env) {
    use jobguard::store::ScheduleDecl;
    let decl = |fp: &str, at: i64, host: &str| ScheduleDecl {
        job: "sync".into(),
        fingerprint: fp.into(),
        defined_at: at,
        host: host.into(),
        seen_at: T0,
        horizon: 86_400_000_000,
    };
    let mut a = connect(env);
    let mut b = connect(env);
    assert_eq!(a.read_schedule("sync").unwrap(), None);
    let old = decl("*-*-* 02:00:00 UTC", T0, "a");
    let new = decl("*-*-* 03:00:00 Europe/Berlin", T0 + 1, "b");
    assert!(a.swap_schedule(None, &old).unwrap());
    assert!(
        !b.swap_schedule(None, &new).unwrap(),
        "a second first write"
    );
    assert_eq!(b.read_schedule("sync").unwrap(), Some(old.clone()));
    assert!(
        !b.swap_schedule(Some(&new), &old).unwrap(),
        "not what is held"
    );
    assert!(b.swap_schedule(Some(&old), &new).unwrap());
    assert!(!a.swap_schedule(Some(&old), &old).unwrap(), "a lost race");
    assert_eq!(a.read_schedule("sync").unwrap(), Some(new.clone()));
    // The rule, through either connection: an older definition does not win.
    assert_eq!(a.declare_schedule(&old).unwrap(), new);
    let back = decl("*-*-* 02:00:00 UTC", T0 + 2, "a");
    assert_eq!(a.declare_schedule(&back).unwrap(), back);
    assert_eq!(b.declare_schedule(&new).unwrap(), back);
    assert_eq!(b.read_schedule("other").unwrap(), None);
    // A refresh moves `seen_at`: a swap that read the record before it does not go through.
    let fresh = ScheduleDecl {
        seen_at: T0 + 60_000_000,
        ..back.clone()
    };
    assert!(a.swap_schedule(Some(&back), &fresh).unwrap());
    assert!(
        !b.swap_schedule(Some(&back), &new).unwrap(),
        "read before the refresh"
    );
    let back = fresh;
    // A fresh connection reads what is there.
    assert_eq!(connect(env).read_schedule("sync").unwrap(), Some(back));
}

/// Heartbeats ([`Store::put_beat`]): none before the first; one per host, replaced by
/// that host's next, read back as written on any connection (keys with spaces, slashes
/// and non-ASCII, a value of 100 KiB); forgetting one leaves the others, and forgetting
/// one that is not there is no error. One record is read by its key ([`Store::read_beat`]),
/// before any was written, after, and once forgotten.
pub fn heartbeats_are_kept_per_host_replaced_and_forgotten(env: &dyn Env) {
    let mut a = connect(env);
    let mut b = connect(env);
    assert_eq!(a.beats().unwrap(), Vec::new());
    assert_eq!(a.read_beat("pause/sync").unwrap(), None);
    a.forget_beats(&["nobody".to_string()]).unwrap();
    let (ha, hb) = ("web-1 0123abcd b/1", "wéb 2 ffee %2F");
    a.put_beat(ha, "{\"n\":1}").unwrap();
    b.put_beat(hb, "{\"n\":2}").unwrap();
    a.put_beat(ha, "{\"n\":3}").unwrap();
    assert_eq!(b.read_beat(ha).unwrap().as_deref(), Some("{\"n\":3}"));
    assert_eq!(b.read_beat(hb).unwrap().as_deref(), Some("{\"n\":2}"));
    assert_eq!(b.read_beat("pause/sync").unwrap(), None);
    let sorted = |mut v: Vec<(String, String)>| {
        v.sort();
        v
    };
    assert_eq!(
        sorted(b.beats().unwrap()),
        vec![
            (ha.to_string(), "{\"n\":3}".to_string()),
            (hb.to_string(), "{\"n\":2}".to_string())
        ]
    );
    let big = format!("{{\"pad\":\"{}\"}}", "x".repeat(100 * 1024));
    b.put_beat(hb, &big).unwrap();
    b.forget_beats(&[ha.to_string(), "nobody".to_string()])
        .unwrap();
    assert_eq!(a.read_beat(ha).unwrap(), None);
    assert_eq!(a.read_beat(hb).unwrap(), Some(big.clone()));
    assert_eq!(connect(env).beats().unwrap(), vec![(hb.to_string(), big)]);
}

/// Every field of a record comes back as written.
pub fn finish_records_every_field(env: &dyn Env) {
    let mut s = connect(env);
    let req = request("store-sync", S1, 7, 1, false);
    let (l, r) = claimed(&mut *s, &req);
    let h = holder(7);
    let expected_start = Run {
        run_id: rid(1),
        job: "store-sync".into(),
        slot: Slot {
            usec: S1,
            zone: "Europe/Berlin".into(),
        },
        attempt: 1,
        outcome: Outcome::Running,
        reason: None,
        exit_status: None,
        forced: false,
        trigger: "timer".into(),
        host: h.host.clone(),
        machine_id: h.machine_id.clone(),
        boot_id: h.boot_id.clone(),
        pid: h.pid,
        pid_start: h.pid_start,
        invocation_id: Some("inv1".into()),
        started_at: T0,
        finished_at: None,
        fencing_token: l.token,
        report: BTreeMap::new(),
        resolution: None,
    };
    assert_eq!(r, expected_start);
    assert_eq!(run_by_id(&mut *s, "store-sync", &rid(1)), expected_start);

    env.advance(5_000_000);
    let report: BTreeMap<String, String> = [
        ("inserted", "2990"),
        ("duplicates", "10"),
        ("batch", "2027-01-15 \"night\" ünïcode"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let done = s
        .finish(
            &l,
            &rid(1),
            &Finish {
                outcome: Outcome::Failed,
                reason: Some("signal".into()),
                exit_status: Some(143),
                report: report.clone(),
                resolution: None,
                ended_at: None,
            },
        )
        .unwrap();
    assert_eq!(done, RECORDED_AND_RELEASED);
    let back = run_by_id(&mut *s, "store-sync", &rid(1));
    assert_eq!(
        back,
        Run {
            outcome: Outcome::Failed,
            reason: Some("signal".into()),
            exit_status: Some(143),
            finished_at: Some(T0 + 5_000_000),
            report,
            ..expected_start
        }
    );
}

/// `runs` with `slots_from` reads a window of slots: per job, the records of the slots at
/// or after it, of the newest slot before it, of the newest slot before it with a record
/// that names a schedule, and the first record started of a slot before it
/// (`rules::window`); with the other filters applied to those.
pub fn runs_reads_a_window_of_slots(env: &dyn Env) {
    let mut s = connect(env);
    let day = S2 - S1;
    let slot = |k: i64| S1 + k * day;
    // (run, job, slot, outcome), each started a second after the one before. Run 5 is a
    // backfill of an older slot than any, started after the others.
    let plan: [(u32, &str, i64, Outcome); 8] = [
        (1, "sync", slot(1), Outcome::Succeeded),
        (2, "sync", slot(2), Outcome::Failed),
        (3, "sync", slot(2), Outcome::Succeeded),
        (4, "sync", slot(4), Outcome::Succeeded),
        (5, "sync", slot(0), Outcome::Succeeded),
        (6, "other", slot(1), Outcome::Succeeded),
        (7, "other", slot(4), Outcome::Succeeded),
        (8, "sync", slot(5), Outcome::Running),
    ];
    for (n, job, slot, outcome) in plan {
        env.advance(1_000_000);
        let (l, _) = claimed(&mut *s, &request(job, slot, n, n, false));
        if outcome != Outcome::Running {
            s.finish(&l, &rid(n), &finish(outcome)).unwrap();
        }
    }
    let window = |s: &mut dyn Store, job: Option<&str>, from: i64, outcomes: &[Outcome]| {
        s.runs(&RunQuery {
            job: job.map(str::to_string),
            slots_from: Some(from),
            outcomes: outcomes.to_vec(),
            ..RunQuery::default()
        })
        .unwrap()
        .into_iter()
        .map(|r| r.run_id)
        .collect::<Vec<_>>()
    };
    let ids_of = |ns: &[u32]| ns.iter().map(|&n| rid(n)).collect::<Vec<_>>();
    let sync = Some("sync");
    // Slots 4 and 5, both records of slot 2 (the newest before), and run 1 (the first
    // started before); not the backfill.
    assert_eq!(
        window(&mut *s, sync, slot(3), &[]),
        ids_of(&[8, 4, 3, 2, 1])
    );
    assert_eq!(
        window(&mut *s, sync, slot(2), &[]),
        ids_of(&[8, 4, 3, 2, 1])
    );
    // From slot 1, the newest slot before is the backfill's.
    assert_eq!(
        window(&mut *s, sync, slot(1), &[]),
        ids_of(&[8, 5, 4, 3, 2, 1])
    );
    assert_eq!(
        window(&mut *s, sync, slot(-3), &[]),
        ids_of(&[8, 5, 4, 3, 2, 1])
    );
    // From slot 9: the newest slot before is 5, whose one record is running and names no
    // schedule; slot 4's success does.
    assert_eq!(window(&mut *s, sync, slot(9), &[]), ids_of(&[8, 4, 1]));
    // Every job, each with its own newest slot before.
    assert_eq!(
        window(&mut *s, None, slot(3), &[]),
        ids_of(&[8, 7, 6, 4, 3, 2, 1])
    );
    // The window is of the job's records; the outcome filter applies to it.
    assert_eq!(
        window(&mut *s, sync, slot(3), &[Outcome::Failed]),
        ids_of(&[2])
    );
    assert_eq!(window(&mut *s, Some("nobody"), slot(3), &[]), ids_of(&[]));

    // A record names its schedule by its report's key, whatever its outcome: of job
    // "keyed", slot 2's interrupted record does (its shim wrote it), slot 3's does not (no
    // report, as when another party ends a run).
    for (n, slot, report) in [
        (9, slot(1), false),
        (10, slot(2), true),
        (11, slot(3), false),
    ] {
        env.advance(1_000_000);
        let (l, _) = claimed(&mut *s, &request("keyed", slot, n, n, false));
        let mut end = finish(if n == 9 {
            Outcome::Succeeded
        } else {
            Outcome::Interrupted
        });
        if report {
            end.report.insert(
                jobguard::guard::ledger::SCHEDULE.into(),
                "*-*-* 02:00:00".into(),
            );
        }
        s.finish(&l, &rid(n), &end).unwrap();
    }
    assert_eq!(
        window(&mut *s, Some("keyed"), slot(4), &[]),
        ids_of(&[11, 10, 9])
    );
}

/// `runs` filters by job, slot, outcome and resolution, newest first, with a limit.
/// `jobs()`: none in a fresh store; then each job with a record, once, sorted by name,
/// whatever its records' outcomes; a job whose records were all deleted is gone.
pub fn jobs_are_those_with_records_sorted(env: &dyn Env) {
    let mut s = connect(env);
    assert_eq!(s.jobs().unwrap(), Vec::<String>::new());
    let plan: [(u32, &str, i64, Outcome); 5] = [
        (1, "sync", S1, Outcome::Succeeded),
        (2, "b-other", S1, Outcome::Failed),
        (3, "sync", S2, Outcome::Succeeded),
        (4, "a.first", S1, Outcome::Running),
        (5, "z_last", S1, Outcome::Succeeded),
    ];
    for (n, job, slot, outcome) in plan {
        env.advance(1_000_000);
        let (l, _) = claimed(&mut *s, &request(job, slot, n, n, false));
        if outcome != Outcome::Running {
            s.finish(&l, &rid(n), &finish(outcome)).unwrap();
        }
    }
    assert_eq!(s.jobs().unwrap(), ["a.first", "b-other", "sync", "z_last"]);
    assert_eq!(s.delete_slots("z_last", &[S1], i64::MAX).unwrap(), 1);
    assert_eq!(s.jobs().unwrap(), ["a.first", "b-other", "sync"]);
}

pub fn runs_filters_and_order(env: &dyn Env) {
    let mut s = connect(env);
    // (run, job, slot, outcome)
    let plan: [(u32, &str, i64, Outcome); 6] = [
        (1, "sync", S1, Outcome::Failed),
        (2, "sync", S1, Outcome::Succeeded),
        (3, "sync", S2, Outcome::Failed),
        (4, "other", S1, Outcome::Succeeded),
        (5, "sync", S3, Outcome::Running),
        (6, "other", S2, Outcome::Running),
    ];
    for (n, job, slot, outcome) in plan {
        env.advance(1_000_000);
        let (l, _) = claimed(&mut *s, &request(job, slot, n, n, false));
        if outcome != Outcome::Running {
            s.finish(&l, &rid(n), &finish(outcome)).unwrap();
        }
    }
    s.resolve("sync", S2, Resolution::Held).unwrap();

    let ids = |runs: Vec<Run>| runs.into_iter().map(|r| r.run_id).collect::<Vec<_>>();
    let ids_of = |ns: &[u32]| ns.iter().map(|&n| rid(n)).collect::<Vec<_>>();
    let q = |job: Option<&str>, slot: Option<i64>| RunQuery {
        job: job.map(str::to_string),
        slot,
        ..RunQuery::default()
    };

    assert_eq!(
        ids(s.runs(&q(None, None)).unwrap()),
        ids_of(&[6, 5, 4, 3, 2, 1])
    );
    assert_eq!(
        ids(s.runs(&q(Some("sync"), None)).unwrap()),
        ids_of(&[5, 3, 2, 1])
    );
    assert_eq!(
        ids(s.runs(&q(Some("sync"), Some(S1))).unwrap()),
        ids_of(&[2, 1])
    );
    assert_eq!(ids(s.runs(&q(Some("nobody"), None)).unwrap()), ids_of(&[]));
    assert_eq!(
        ids(s
            .runs(&RunQuery {
                outcomes: vec![Outcome::Running],
                ..RunQuery::default()
            })
            .unwrap()),
        ids_of(&[6, 5])
    );
    assert_eq!(
        ids(s
            .runs(&RunQuery {
                job: Some("sync".into()),
                outcomes: vec![Outcome::Failed, Outcome::Succeeded],
                ..RunQuery::default()
            })
            .unwrap()),
        ids_of(&[3, 2, 1])
    );
    assert_eq!(
        ids(s
            .runs(&RunQuery {
                resolutions: vec![Resolution::Held, Resolution::Queued],
                ..RunQuery::default()
            })
            .unwrap()),
        ids_of(&[3])
    );
    assert_eq!(
        ids(s
            .runs(&RunQuery {
                limit: 2,
                ..RunQuery::default()
            })
            .unwrap()),
        ids_of(&[6, 5])
    );
    assert_eq!(
        ids(s
            .runs(&RunQuery {
                job: Some("sync".into()),
                limit: 1,
                outcomes: vec![Outcome::Failed],
                ..RunQuery::default()
            })
            .unwrap()),
        ids_of(&[3])
    );
    // Counts by outcome over a job's whole ledger, in any order.
    let counts = |s: &mut dyn Store, job: &str| {
        let mut c = s.outcome_counts(job).unwrap();
        c.sort_by_key(|(o, _)| o.as_str());
        c
    };
    assert_eq!(
        counts(&mut *s, "sync"),
        vec![
            (Outcome::Failed, 2),
            (Outcome::Running, 1),
            (Outcome::Succeeded, 1)
        ]
    );
    assert_eq!(
        counts(&mut *s, "other"),
        vec![(Outcome::Running, 1), (Outcome::Succeeded, 1)]
    );
    assert_eq!(counts(&mut *s, "nobody"), vec![]);
}

/// Opening again sees the same data; `init` can run any number of times.
pub fn reopen_and_init_are_idempotent(env: &dyn Env) {
    let lease = {
        let mut s = connect(env);
        s.init().unwrap();
        s.init().unwrap();
        let (l, _) = claimed(&mut *s, &request("sync", S1, 1, 1, false));
        s.init().unwrap();
        l
    };
    let mut s = connect(env);
    s.init().unwrap();
    assert_eq!(s.lease("sync").unwrap(), Some(lease.clone()));
    assert_eq!(
        run_by_id(&mut *s, "sync", &rid(1)).fencing_token,
        lease.token
    );
    let mut t = connect(env);
    t.init().unwrap();
    busy(&mut *t, &request("sync", S1, 2, 2, false));
}

/// A store whose schema is newer than this jobguard knows is refused, not used: opened
/// afresh, it answers nothing. What another host's upgrade looks like to a host of the
/// previous version in the middle of a run: the schema moves one version past this
/// jobguard's while it holds a lease, and that run is still renewed and recorded (a
/// schema bump adds nothing a renewal or an end of the previous version reads or writes:
/// the last one only dropped server-side code), but its next claim is refused, naming
/// both versions.
pub fn newer_schema_is_refused(env: &dyn Env) {
    let version = env.current_schema_version();
    let mut s = connect(env);
    s.init().unwrap();
    let (lease, _) = claimed(&mut *s, &request("sync", S1, 1, 1, false));
    env.set_schema_version(version + 1);
    let newer = format!(
        "schema version {} is newer than this jobguard knows ({version})",
        version + 1
    );
    let refused = |e: StoreError| {
        let msg = e.to_string();
        assert!(
            matches!(e, StoreError::Invalid { .. }) && msg.contains(&newer),
            "expected \"{newer}\", got {msg}"
        );
    };
    env.advance(1_000_000);
    assert!(s.renew(&lease, 1, TTL).unwrap().is_some(), "renewed");
    let lease = Lease {
        renewal: 1,
        ..lease
    };
    assert_eq!(
        s.finish(&lease, &rid(1), &finish(Outcome::Succeeded))
            .unwrap(),
        RECORDED_AND_RELEASED
    );
    refused(s.claim(&request("sync", S2, 1, 2, false)).unwrap_err());
    match env.connect() {
        Err(e) => refused(e),
        Ok(mut t) => {
            refused(t.init().unwrap_err());
            refused(t.claim(&request("sync", S2, 2, 3, false)).unwrap_err());
            refused(t.runs(&RunQuery::default()).unwrap_err());
            refused(t.lease("sync").unwrap_err());
        }
    }
}

/// A day in µs.
const DAY_US: i64 = 86_400_000_000;

/// With a clock check, a claim compares the host's time with the store's first and
/// writes nothing when they differ by more than the tolerance.
pub fn claim_checks_the_host_clock(env: &dyn Env) {
    let mut s = connect(env);
    let check = |host_now| {
        Some(ClockCheck {
            host_now,
            tolerance: 60_000_000,
        })
    };
    let mut req = request("sync", S1, 1, 1, false);
    req.clock = check(T0 + 61_000_000);
    let answer = s.claim(&req).expect("claim");
    if env.store_clock_is_host_clock() {
        assert!(matches!(answer, Claim::Claimed { .. }), "{answer:?}");
        return;
    }
    match answer {
        Claim::ClockSkew { store_now } => assert_eq!(store_now, T0),
        other => panic!("expected ClockSkew, got {other:?}"),
    }
    req.clock = check(T0 - 61_000_000);
    assert!(matches!(s.claim(&req).unwrap(), Claim::ClockSkew { .. }));
    assert_eq!(s.lease("sync").unwrap(), None, "no lease was granted");
    assert!(
        slot_runs(&mut *s, "sync", S1).is_empty(),
        "nothing was recorded"
    );
    req.clock = check(T0 - 59_000_000);
    claimed(&mut *s, &req);
}

/// With `queued_first`, the claim takes the oldest queued slot that is neither done nor
/// held (its zone, trigger `rerun`) before the slot asked for, settles queued records of
/// slots that are done by now, and reports the previous slot.
pub fn queued_re_runs_come_first(env: &dyn Env) {
    let mut s = connect(env);
    let (a, b, c) = (S1 - 2 * DAY_US, S1 - DAY_US, S1);
    // Slot a: holder 1 was cut off, holder 2 took over after expiry and succeeded; then
    // holder 1's record is interrupted and queued: queued, but done.
    let (_, r1) = claimed(&mut *s, &request("sync", a, 1, 1, false));
    env.advance(TAKEOVER_US);
    let (l2, _) = claimed(&mut *s, &request("sync", a, 2, 2, false));
    s.finish(&l2, &rid(2), &finish(Outcome::Succeeded)).unwrap();
    assert!(
        s.interrupt(&r1, "lease-expired", Resolution::Queued)
            .unwrap()
    );
    // Slot b: interrupted at boot and queued; its zone differs from the request's.
    let mut rb = request("sync", b, 1, 3, false);
    rb.run.slot.zone = "America/New_York".to_string();
    let (_, r3) = claimed(&mut *s, &rb);
    assert!(s.interrupt(&r3, "boot", Resolution::Queued).unwrap());

    let mut req = request("sync", c, 3, 4, false);
    req.queued_first = true;
    req.in_order = true;
    let (l4, r4, previous) = claimed_after(&mut *s, &req);
    assert_eq!(r4.slot.usec, b, "the queued slot b comes first");
    assert_eq!(r4.slot.zone, "America/New_York");
    assert_eq!(r4.trigger, "rerun");
    assert_eq!(r4.attempt, 2);
    assert_eq!(r4.run_id, rid(4));
    assert_eq!(previous, Some(b));
    assert_eq!(
        run_by_id(&mut *s, "sync", &rid(3)).resolution,
        Some(Resolution::Rerun)
    );
    assert_eq!(
        run_by_id(&mut *s, "sync", &rid(1)).resolution,
        Some(Resolution::Rerun),
        "the queued record of done slot a is settled"
    );
    s.finish(&l4, &rid(4), &finish(Outcome::Succeeded)).unwrap();

    // Nothing is queued now: the slot asked for.
    let mut req = request("sync", c, 3, 5, false);
    req.queued_first = true;
    req.in_order = true;
    let (l5, r5, previous) = claimed_after(&mut *s, &req);
    assert_eq!((r5.slot.usec, r5.trigger.as_str()), (c, "timer"));
    assert_eq!(previous, Some(b));
    s.finish(&l5, &rid(5), &finish(Outcome::Succeeded)).unwrap();
    let mut req = request("sync", c, 3, 6, false);
    req.queued_first = true;
    assert!(matches!(s.claim(&req).unwrap(), Claim::SlotDone { .. }));

    // A slot with a queued record and a held one (two attempts cut at once, the second
    // held) waits for a person: the claim goes past it to the slot asked for.
    let d = a - DAY_US;
    let (_, r7) = claimed(&mut *s, &request("sync", d, 1, 7, false));
    env.advance(TAKEOVER_US);
    let (_, r8) = claimed(&mut *s, &request("sync", d, 2, 8, false));
    assert!(s.interrupt(&r8, "boot", Resolution::Held).unwrap());
    assert!(
        s.interrupt(&r7, "lease-expired", Resolution::Queued)
            .unwrap()
    );
    let mut req = request("sync", c, 3, 9, false);
    req.queued_first = true;
    assert!(matches!(s.claim(&req).unwrap(), Claim::SlotDone { .. }));
    assert_eq!(
        run_by_id(&mut *s, "sync", &rid(7)).resolution,
        Some(Resolution::Queued),
        "a held slot's queued record stays for the person"
    );
}

/// With `in_order`, a slot older than the newest recorded one is refused without writing;
/// slots beyond the store's clock plus the tolerance do not count.
pub fn in_order_refuses_a_slot_behind_the_ledger(env: &dyn Env) {
    let mut s = connect(env);
    let (l1, _) = claimed(&mut *s, &request("sync", S1, 1, 1, false));
    s.finish(&l1, &rid(1), &finish(Outcome::Succeeded)).unwrap();
    let mut behind = request("sync", S1 - DAY_US, 1, 2, false);
    behind.in_order = true;
    match s.claim(&behind).unwrap() {
        Claim::SlotBehind { newest } => assert_eq!(newest, S1),
        other => panic!("expected SlotBehind, got {other:?}"),
    }
    assert!(slot_runs(&mut *s, "sync", S1 - DAY_US).is_empty());
    behind.in_order = false;
    let (l2, _) = claimed(&mut *s, &behind);
    s.finish(&l2, &rid(2), &finish(Outcome::Succeeded)).unwrap();

    // A forced run of a slot two days ahead of the store's clock (S3) does not hold back
    // the slot of 07:00 today, which is after S1.
    let (l3, _) = claimed(&mut *s, &request("sync", S3, 1, 3, true));
    s.finish(&l3, &rid(3), &finish(Outcome::Succeeded)).unwrap();
    let mut today = request("sync", T0 - 3_600_000_000, 1, 4, false);
    today.in_order = true;
    today.clock = Some(ClockCheck {
        host_now: T0,
        tolerance: 60_000_000,
    });
    match s.claim(&today).unwrap() {
        Claim::Claimed { previous_slot, .. } => assert_eq!(previous_slot, Some(S1)),
        other => panic!("expected Claimed, got {other:?}"),
    }
}

/// A claim whose answer was lost (the connection broke after the store committed it) is
/// sent again with the same run id, as the shim's retry does: the first record must stay
/// as it was. Here the first claim took a queued slot; the retry must neither rewrite
/// that record into another slot nor grant a second record under the same id.
pub fn a_retried_claim_keeps_the_first_record(env: &dyn Env) {
    let mut s = connect(env);
    let queued = S1 - DAY_US;
    let (_, r1) = claimed(&mut *s, &request("sync", queued, 1, 1, false));
    assert!(s.interrupt(&r1, "boot", Resolution::Queued).unwrap());
    let mut req = request("sync", S1, 2, 2, false);
    req.queued_first = true;
    req.in_order = true;
    let (_, first) = claimed(&mut *s, &req);
    assert_eq!(first.slot.usec, queued, "the queued slot comes first");
    let first_lease = s.lease("sync").unwrap().expect("granted");
    let (again_lease, again, previous) = claimed_after(&mut *s, &req);
    assert_eq!(
        (again.run_id.as_str(), again.slot.usec, again.fencing_token),
        (first.run_id.as_str(), queued, first.fencing_token),
        "a retry answers the first grant"
    );
    assert_eq!((again_lease, previous), (first_lease, None));
    let record = run_by_id(&mut *s, "sync", &rid(2));
    assert_eq!(
        (record.slot.usec, record.outcome, record.trigger.as_str()),
        (queued, Outcome::Running, "rerun"),
        "the record of the first claim is unchanged"
    );
    assert_eq!(slot_runs(&mut *s, "sync", queued).len(), 2);
    assert!(
        slot_runs(&mut *s, "sync", S1).is_empty(),
        "nothing was recorded for the slot asked for"
    );
    // Once the lease has expired, a retry is refused and changes nothing.
    env.advance(TTL_US);
    let err = s.claim(&req).expect_err("a retry after the lease expired");
    assert!(err.to_string().contains("already recorded"), "{err}");
    assert_eq!(slot_runs(&mut *s, "sync", queued).len(), 2);
    assert_eq!(
        s.lease("sync").unwrap().map(|l| l.token),
        Some(first.fencing_token),
        "no new grant"
    );
}

/// A clock tolerance too large to add to the store's clock (a `clock_tolerance` of
/// centuries, i.e. "do not check") is accepted by every store alike.
pub fn a_huge_clock_tolerance_is_no_error(env: &dyn Env) {
    let mut s = connect(env);
    let mut req = request("sync", S1, 1, 1, false);
    req.in_order = true;
    req.queued_first = true;
    req.clock = Some(ClockCheck {
        host_now: T0,
        tolerance: i64::MAX,
    });
    match s.claim(&req).expect("claim with a huge tolerance") {
        Claim::Claimed { previous_slot, .. } => assert_eq!(previous_slot, None),
        other => panic!("expected Claimed, got {other:?}"),
    }
}

/// A slot that is done settles its queued records at the next claim with `queued_first`,
/// also when it has a held record too, and also when the claim took an older queued
/// slot first: there is nothing left to re-run. (The held record stays for the person.)
pub fn a_done_slot_with_a_held_record_settles_its_queued_one(env: &dyn Env) {
    let mut s = connect(env);
    let (older, d) = (S1 - 3 * DAY_US, S1 - 2 * DAY_US);
    // Slot older: cut and queued, not done: the claim takes it.
    let (_, r9) = claimed(&mut *s, &request("sync", older, 1, 9, false));
    assert!(s.interrupt(&r9, "boot", Resolution::Queued).unwrap());
    // Slot d: three holders in turn (each after the lease before expired); the third,
    // forced, succeeds; then the first is found cut (queued), the second held.
    let (_, r1) = claimed(&mut *s, &request("sync", d, 1, 1, false));
    env.advance(TAKEOVER_US);
    let (_, r2) = claimed(&mut *s, &request("sync", d, 2, 2, false));
    env.advance(TAKEOVER_US);
    // The third is the first one's machine and boot: the first attempt, still running
    // under an earlier lease, would keep the slot from any other machine or boot until
    // judged.
    let mut third = request("sync", d, 3, 3, true);
    third.holder.machine_id = holder(1).machine_id;
    third.holder.boot_id = holder(1).boot_id;
    let (l3, _) = claimed(&mut *s, &third);
    s.finish(&l3, &rid(3), &finish(Outcome::Succeeded)).unwrap();
    assert!(s.interrupt(&r2, "lease-expired", Resolution::Held).unwrap());
    assert!(
        s.interrupt(&r1, "lease-expired", Resolution::Queued)
            .unwrap()
    );

    let mut req = request("sync", S1, 4, 4, false);
    req.queued_first = true;
    let (l4, r4) = claimed(&mut *s, &req);
    assert_eq!(
        r4.slot.usec, older,
        "the queued slot that is not done comes first"
    );
    s.finish(&l4, &rid(4), &finish(Outcome::Succeeded)).unwrap();
    let mut req = request("sync", S1, 4, 5, false);
    req.queued_first = true;
    let (_, r5) = claimed(&mut *s, &req);
    assert_eq!(r5.slot.usec, S1, "nothing is left to re-run");
    assert_eq!(
        run_by_id(&mut *s, "sync", &rid(1)).resolution,
        Some(Resolution::Rerun),
        "the queued record of done slot d is settled"
    );
    assert_eq!(
        run_by_id(&mut *s, "sync", &rid(2)).resolution,
        Some(Resolution::Held),
        "the held record stays"
    );
    let queued = s
        .runs(&RunQuery {
            job: Some("sync".to_string()),
            resolutions: vec![Resolution::Queued],
            ..RunQuery::default()
        })
        .unwrap();
    assert!(queued.is_empty(), "nothing is queued: {queued:?}");
}

/// A slot queued by a finish (a lost lease or a cut run whose policy queues it), by
/// `resolve --rerun` of a failed attempt, or by `recover` (interrupt) is found by the
/// next claims with `queued_first`, oldest first, each once.
pub fn every_way_of_queueing_a_slot_is_seen_by_the_claim(env: &dyn Env) {
    let mut s = connect(env);
    let (a, b, c) = (S1 - 3 * DAY_US, S1 - 2 * DAY_US, S1 - DAY_US);
    // Slot c: cut off; recover queues it.
    let (_, r1) = claimed(&mut *s, &request("sync", c, 1, 1, false));
    assert!(s.interrupt(&r1, "boot", Resolution::Queued).unwrap());
    // Slot a: the lease was lost; the finish queues it.
    let (l2, _) = claimed(&mut *s, &request("sync", a, 1, 2, false));
    let lost = Finish {
        resolution: Some(Resolution::Queued),
        ..finish(Outcome::LeaseLost)
    };
    assert!(s.finish(&l2, &rid(2), &lost).unwrap().recorded);
    // Slot b: failed; a person queues a re-run.
    let (l3, _) = claimed(&mut *s, &request("sync", b, 1, 3, false));
    s.finish(&l3, &rid(3), &finish(Outcome::Failed)).unwrap();
    assert_eq!(s.resolve("sync", b, Resolution::Queued).unwrap(), 1);

    let mut seen = Vec::new();
    for n in 10..14 {
        let mut req = request("sync", S1, 2, n, false);
        req.queued_first = true;
        req.in_order = true;
        let (lease, run) = claimed(&mut *s, &req);
        s.finish(&lease, &rid(n), &finish(Outcome::Succeeded))
            .unwrap();
        seen.push((run.slot.usec, run.trigger));
        if run.slot.usec == S1 {
            break;
        }
    }
    assert_eq!(
        seen,
        [
            (a, "rerun".to_string()),
            (b, "rerun".to_string()),
            (c, "rerun".to_string()),
            (S1, "timer".to_string())
        ]
    );
}

/// Retention's primitive: `delete_slots` deletes whole slots of the job whose records all
/// started before the bound and none runs; never another job's records, a slot with a
/// running or newer record, or the lease and its token counter; a slot left without
/// records is no longer recorded (the newest recorded slot moves back).
pub fn delete_slots_deletes_only_whole_settled_slots_of_the_job(env: &dyn Env) {
    let mut s = connect(env);
    let a = S1 - DAY_US;
    let (l1, _) = claimed(&mut *s, &request("sync", a, 1, 1, false));
    s.finish(&l1, &rid(1), &finish(Outcome::Succeeded)).unwrap();
    let (l2, _) = claimed(&mut *s, &request("sync", S1, 1, 2, false));
    s.finish(&l2, &rid(2), &finish(Outcome::Failed)).unwrap();
    let (l3, _) = claimed(&mut *s, &request("sync", S1, 1, 3, true));
    s.finish(&l3, &rid(3), &finish(Outcome::Succeeded)).unwrap();
    let (l4, _) = claimed(&mut *s, &request("other", S1, 1, 4, false));
    s.finish(&l4, &rid(4), &finish(Outcome::Succeeded)).unwrap();
    let (l5, r5) = claimed(&mut *s, &request("sync", S3, 1, 5, true));
    env.advance(10_000_000);
    let bound = s.now().unwrap();
    env.advance(10_000_000);
    // S2 has no record; S3's runs; a slot listed twice is deleted once.
    assert_eq!(
        s.delete_slots("sync", &[a, S1, S2, S3, S1], bound).unwrap(),
        3
    );
    let left = |s: &mut dyn Store, job: &str| -> Vec<String> {
        s.runs(&RunQuery {
            job: Some(job.into()),
            ..RunQuery::default()
        })
        .unwrap()
        .into_iter()
        .map(|r| r.run_id)
        .collect()
    };
    assert_eq!(left(&mut *s, "sync"), vec![rid(5)]);
    assert_eq!(left(&mut *s, "other"), vec![rid(4)]);
    assert_eq!(s.delete_slots("sync", &[], bound).unwrap(), 0);
    // S3 ends; a bound at its start keeps it, one after deletes it.
    s.finish(&l5, &rid(5), &finish(Outcome::Succeeded)).unwrap();
    assert_eq!(s.delete_slots("sync", &[S3], r5.started_at).unwrap(), 0);
    let after = s.now().unwrap() + 1;
    assert_eq!(s.delete_slots("sync", &[S3], after).unwrap(), 1);
    assert!(left(&mut *s, "sync").is_empty());
    // The token counter was not reset; the slot's deleted attempts are not counted.
    let (l6, r6) = claimed(&mut *s, &request("sync", S1, 1, 6, false));
    assert!(l6.token > l5.token, "{} > {}", l6.token, l5.token);
    assert_eq!(r6.attempt, 1);
    // Only S1 is recorded now: a later slot is not behind it.
    s.finish(&l6, &rid(6), &finish(Outcome::Succeeded)).unwrap();
    let mut later = request("sync", S1 + DAY_US, 1, 7, false);
    later.in_order = true;
    match s.claim(&later).unwrap() {
        Claim::Claimed { previous_slot, .. } => assert_eq!(previous_slot, Some(S1)),
        other => panic!("expected Claimed, got {other:?}"),
    }
}

/// A minutely job's long history, each run with a report at the shim's limit
/// (`MAX_REPORT_BYTES`, 64 KiB), half of the slots failed and queued for a re-run: the
/// records together are far larger than one message of a store's protocol (etcd's gRPC
/// client takes 4 MiB by default), and every reader still answers: the newest records
/// with a limit (catch-up, `audit`, `history`), all of them (retention, `status`), the
/// queued ones, the claim that reads the queued slots first, and the next claim in order.
pub fn a_long_history_of_large_reports_reads_back(env: &dyn Env) {
    const SLOTS: u32 = 120;
    const MINUTE: i64 = 60_000_000;
    let mut s = connect(env);
    let report: BTreeMap<String, String> = [
        // Quotes and backslashes: escaped once more by every layer that quotes JSON.
        ("out".to_string(), "\"\\ line of output\n".repeat(3_000)),
        ("rows".to_string(), "2990".to_string()),
    ]
    .into_iter()
    .collect();
    assert!(serde_json::to_string(&report).unwrap().len() > 60_000);
    let slot = |n: u32| S1 + i64::from(n) * MINUTE;
    for n in 1..=SLOTS {
        env.advance(1_000_000);
        let (l, _) = claimed(&mut *s, &request("minutely", slot(n), 1, n, false));
        let outcome = if n % 2 == 0 {
            Outcome::Failed
        } else {
            Outcome::Succeeded
        };
        let done = s
            .finish(
                &l,
                &rid(n),
                &Finish {
                    report: report.clone(),
                    ..finish(outcome)
                },
            )
            .unwrap();
        assert!(done.recorded, "slot {n}: {done:?}");
        if outcome == Outcome::Failed {
            assert_eq!(
                s.resolve("minutely", slot(n), Resolution::Queued).unwrap(),
                1
            );
        }
    }
    let newest = s
        .runs(&RunQuery {
            job: Some("minutely".into()),
            limit: 20,
            ..RunQuery::default()
        })
        .expect("the 20 newest records");
    let want: Vec<String> = (SLOTS - 19..=SLOTS).rev().map(rid).collect();
    assert_eq!(
        newest.iter().map(|r| r.run_id.clone()).collect::<Vec<_>>(),
        want
    );
    assert!(newest.iter().all(|r| r.report == report));
    let all = s
        .runs(&RunQuery {
            job: Some("minutely".into()),
            ..RunQuery::default()
        })
        .expect("every record of the job");
    assert_eq!(all.len(), SLOTS as usize);
    let every_job = s.runs(&RunQuery::default()).expect("every record");
    assert_eq!(every_job.len(), SLOTS as usize);
    let queued = s
        .runs(&RunQuery {
            job: Some("minutely".into()),
            resolutions: vec![Resolution::Queued],
            ..RunQuery::default()
        })
        .expect("the queued records");
    assert_eq!(queued.len(), SLOTS as usize / 2);
    // The next firing reads the queued slots first and takes the oldest.
    env.advance(1_000_000);
    let next = slot(SLOTS + 1);
    let mut req = request("minutely", next, 1, SLOTS + 1, false);
    req.queued_first = true;
    req.in_order = true;
    let (l, r) = claimed(&mut *s, &req);
    assert_eq!(r.slot.usec, slot(2), "the oldest queued slot first");
    s.finish(&l, &rid(SLOTS + 1), &finish(Outcome::Succeeded))
        .unwrap();
    // The newest records are the ones started last, whatever their slot.
    let newest = s
        .runs(&RunQuery {
            job: Some("minutely".into()),
            limit: 3,
            ..RunQuery::default()
        })
        .expect("the 3 newest records");
    assert_eq!(
        newest.iter().map(|r| r.run_id.clone()).collect::<Vec<_>>(),
        vec![rid(SLOTS + 1), rid(SLOTS), rid(SLOTS - 1)]
    );
    let newest_failed = s
        .runs(&RunQuery {
            job: Some("minutely".into()),
            outcomes: vec![Outcome::Failed],
            limit: 2,
            ..RunQuery::default()
        })
        .expect("the 2 newest failed records");
    assert_eq!(
        newest_failed
            .iter()
            .map(|r| r.run_id.clone())
            .collect::<Vec<_>>(),
        vec![rid(SLOTS), rid(SLOTS - 2)]
    );
    // Its own slot, in order after the newest recorded one.
    env.advance(1_000_000);
    let mut req = request("minutely", next, 1, SLOTS + 2, false);
    req.in_order = true;
    let (_, r, previous) = claimed_after(&mut *s, &req);
    assert_eq!((r.slot.usec, previous), (next, Some(slot(SLOTS))));
    // Retention deletes the old settled slots in one call.
    let old: Vec<i64> = (1..=SLOTS / 2).map(slot).collect();
    let bound = s.now().unwrap();
    assert!(s.delete_slots("minutely", &old, bound).unwrap() >= old.len() / 2);
}

/// The newest records of a job with more grants than a store may list in its lease row
/// (the ZooKeeper store lists its last 256): with and without a filter, before and after
/// the list's end, and a filter whose newest match is older than every listed grant,
/// while a listed slot also holds an older attempt that matches it. The ground truth is
/// this case's own log of its grants.
pub fn the_newest_records_of_a_long_history_are_the_last_started(env: &dyn Env) {
    let mut s = connect(env);
    let (a, c, d) = (S1, S2, S3);
    // (slot, outcome) of grant n = index + 1: one failure on C, 99 failures on A, then
    // 300 successes on C and D.
    let mut plan = vec![(c, Outcome::Failed)];
    plan.extend((0..99).map(|_| (a, Outcome::Failed)));
    plan.extend((0..300).map(|i| (if i % 2 == 0 { c } else { d }, Outcome::Succeeded)));
    let grant = |s: &mut dyn Store, n: usize, (slot, outcome): (i64, Outcome)| {
        let n = u32::try_from(n).unwrap();
        env.advance(1_000_000);
        let (l, _) = claimed(s, &request("busy", slot, 1, n, true));
        s.finish(&l, &rid(n), &finish(outcome)).unwrap();
    };
    for (i, step) in plan.iter().enumerate() {
        grant(&mut *s, i + 1, *step);
    }
    let check = |s: &mut dyn Store, plan: &[(i64, Outcome)], deleted: &[i64], when: &str| {
        let expect = |outcome: Option<Outcome>, limit: usize| -> Vec<String> {
            (1..=plan.len())
                .rev()
                .filter(|n| !deleted.contains(&plan[n - 1].0))
                .filter(|n| outcome.is_none_or(|o| plan[n - 1].1 == o))
                .take(limit)
                .map(|n| rid(u32::try_from(n).unwrap()))
                .collect()
        };
        for (outcome, limit) in [
            (None, 1),
            (None, 20),
            (None, 200),
            (None, 256),
            (None, 257),
            (Some(Outcome::Succeeded), 5),
            (Some(Outcome::Failed), 1),
            (Some(Outcome::Failed), 3),
            (Some(Outcome::Failed), 100),
        ] {
            let got: Vec<String> = s
                .runs(&RunQuery {
                    job: Some("busy".into()),
                    outcomes: outcome.into_iter().collect(),
                    limit,
                    ..RunQuery::default()
                })
                .unwrap()
                .into_iter()
                .map(|r| r.run_id)
                .collect();
            assert_eq!(
                got,
                expect(outcome, limit),
                "{when}: {outcome:?}, limit {limit}"
            );
        }
    };
    check(&mut *s, &plan, &[], "after 400 grants");
    // Retention deletes slot D, whose grants are all among the newest, and D is run
    // again: the newest records are now that grant, then C's and A's.
    let bound = s.now().unwrap() + 1;
    assert_eq!(s.delete_slots("busy", &[d], bound).unwrap(), 150);
    let deleted = plan.len();
    plan.push((d, Outcome::Succeeded));
    grant(&mut *s, deleted + 1, plan[deleted]);
    // D's grants before the new one are gone: they count as grants of a slot no grant has.
    let mut shown = plan.clone();
    for step in &mut shown[..deleted] {
        if step.0 == d {
            step.0 = i64::MIN;
        }
    }
    check(
        &mut *s,
        &shown,
        &[i64::MIN],
        "after D was deleted and run again",
    );
}

/// One slot run again and again (`jobguard run --force`, then a queued re-run), each
/// attempt with a report at the shim's limit (`MAX_REPORT_BYTES`, 64 KiB): the slot's
/// records together are far larger than one value or request of a store's protocol
/// (ZooKeeper's `jute.maxbuffer` and etcd's request limit are about 1 MiB), and every
/// attempt is still granted, finished, re-queued, re-run and read back.
pub fn one_slot_keeps_every_attempt_of_a_large_report(env: &dyn Env) {
    const ATTEMPTS: u32 = 30;
    let mut s = connect(env);
    let report: BTreeMap<String, String> =
        [("out".to_string(), "\"\\ line of output\n".repeat(3_000))]
            .into_iter()
            .collect();
    assert!(serde_json::to_string(&report).unwrap().len() > 60_000);
    for n in 1..=ATTEMPTS {
        env.advance(1_000_000);
        let (l, r) = claimed(&mut *s, &request("again", S1, 1, n, n > 1));
        assert_eq!(r.slot.usec, S1);
        let done = s
            .finish(
                &l,
                &rid(n),
                &Finish {
                    report: report.clone(),
                    ..finish(Outcome::Failed)
                },
            )
            .unwrap_or_else(|e| panic!("finish attempt {n}: {e}"));
        assert!(done.recorded, "attempt {n}: {done:?}");
    }
    // Every failed attempt is queued, and the re-run settles them all in its claim.
    assert_eq!(
        s.resolve("again", S1, Resolution::Queued).unwrap(),
        ATTEMPTS as usize
    );
    // The next firing takes the queued slot first: its records are rewritten.
    env.advance(1_000_000);
    let mut req = request("again", S2, 1, ATTEMPTS + 1, false);
    req.queued_first = true;
    let (l, r) = claimed(&mut *s, &req);
    assert_eq!(r.slot.usec, S1, "the queued slot first");
    s.finish(
        &l,
        &rid(ATTEMPTS + 1),
        &Finish {
            report: report.clone(),
            ..finish(Outcome::Succeeded)
        },
    )
    .unwrap();
    let slot = s
        .runs(&RunQuery {
            job: Some("again".into()),
            slot: Some(S1),
            ..RunQuery::default()
        })
        .expect("the slot's records");
    let mut ids: Vec<String> = slot.iter().map(|r| r.run_id.clone()).collect();
    ids.sort();
    let mut want: Vec<String> = (1..=ATTEMPTS + 1).map(rid).collect();
    want.sort();
    assert_eq!(ids, want);
    assert!(slot.iter().all(|r| r.report == report));
    for r in &slot {
        let want = (r.run_id != rid(ATTEMPTS + 1)).then_some(Resolution::Rerun);
        assert_eq!(r.resolution, want, "{}", r.run_id);
    }
    let newest = s
        .runs(&RunQuery {
            job: Some("again".into()),
            limit: 2,
            ..RunQuery::default()
        })
        .unwrap();
    assert_eq!(
        newest.iter().map(|r| r.run_id.clone()).collect::<Vec<_>>(),
        vec![rid(ATTEMPTS + 1), rid(ATTEMPTS)]
    );
    // Retention deletes the whole slot.
    let bound = s.now().unwrap() + 1;
    assert_eq!(
        s.delete_slots("again", &[S1], bound).unwrap(),
        ATTEMPTS as usize + 1
    );
    assert!(
        s.runs(&RunQuery {
            job: Some("again".into()),
            ..RunQuery::default()
        })
        .unwrap()
        .is_empty()
    );
}

/// One slot with hundreds of failed attempts (a job that failed every minute all day,
/// each a `run --force` of the same slot, or re-queued failures): queueing them all, the
/// re-run that settles them all in its claim, a forced run of the slot held instead, and
/// retention deleting the slot each touch every record at once. A store that caps what
/// one atomic write holds (etcd: 128 operations, `--max-txn-ops`) must still do each, and
/// the slot must be re-run once: not again after the re-run, not lost.
pub fn a_slot_of_hundreds_of_attempts_is_queued_rerun_once_and_deleted(env: &dyn Env) {
    const ATTEMPTS: u32 = 200;
    let mut s = connect(env);
    // Run ids are unique across jobs: the held job's are numbered from 1001.
    for (job, base) in [("queued", 0), ("held", 1000)] {
        for n in 1..=ATTEMPTS {
            env.advance(1_000);
            let (l, _) = claimed(&mut *s, &request(job, S1, 1, base + n, n > 1));
            let done = s
                .finish(&l, &rid(base + n), &finish(Outcome::Failed))
                .unwrap_or_else(|e| panic!("{job}: finish attempt {n}: {e}"));
            assert!(done.recorded, "{job}: attempt {n}: {done:?}");
        }
    }
    // Queued: every attempt in one resolve, then one re-run, taken first.
    assert_eq!(
        s.resolve("queued", S1, Resolution::Queued).unwrap(),
        ATTEMPTS as usize
    );
    let slot_runs = |s: &mut dyn Store, job: &str| {
        s.runs(&RunQuery {
            job: Some(job.into()),
            slot: Some(S1),
            ..RunQuery::default()
        })
        .expect("the slot's records")
    };
    assert!(
        slot_runs(&mut *s, "queued")
            .iter()
            .all(|r| r.resolution == Some(Resolution::Queued))
    );
    env.advance(1_000_000);
    let mut req = request("queued", S2, 1, ATTEMPTS + 1, false);
    req.queued_first = true;
    let (l, r) = claimed(&mut *s, &req);
    assert_eq!(r.slot.usec, S1, "the queued slot first");
    // Before the re-run ends, the next firing does not take the slot again.
    env.advance(1_000_000);
    let mut again = request("queued", S2, 2, ATTEMPTS + 2, false);
    again.queued_first = true;
    match s.claim(&again).unwrap() {
        Claim::Busy { .. } => {}
        other => panic!("a second claim during the re-run: {other:?}"),
    }
    s.finish(&l, &rid(ATTEMPTS + 1), &finish(Outcome::Succeeded))
        .unwrap();
    for r in slot_runs(&mut *s, "queued") {
        let want = (r.run_id != rid(ATTEMPTS + 1)).then_some(Resolution::Rerun);
        assert_eq!(r.resolution, want, "{}", r.run_id);
    }
    // The firing after it runs its own slot: the queued slot ran once.
    env.advance(1_000_000);
    let mut next = request("queued", S3, 1, ATTEMPTS + 3, false);
    next.queued_first = true;
    let (l, r) = claimed(&mut *s, &next);
    assert_eq!(r.slot.usec, S3, "the queued slot is not run again");
    s.finish(&l, &rid(ATTEMPTS + 3), &finish(Outcome::Succeeded))
        .unwrap();
    // Held: every attempt held, then a forced run of the slot settles them all.
    assert_eq!(
        s.resolve("held", S1, Resolution::Held).unwrap(),
        ATTEMPTS as usize
    );
    env.advance(1_000_000);
    match s
        .claim(&request("held", S1, 1, 1000 + ATTEMPTS + 1, false))
        .unwrap()
    {
        Claim::SlotHeld { .. } => {}
        other => panic!("an unforced claim of the held slot: {other:?}"),
    }
    let (l, r) = claimed(&mut *s, &request("held", S1, 1, 1000 + ATTEMPTS + 2, true));
    assert_eq!(r.slot.usec, S1);
    s.finish(&l, &rid(1000 + ATTEMPTS + 2), &finish(Outcome::Succeeded))
        .unwrap();
    for r in slot_runs(&mut *s, "held") {
        let want = (r.run_id != rid(1000 + ATTEMPTS + 2)).then_some(Resolution::Rerun);
        assert_eq!(r.resolution, want, "{}", r.run_id);
    }
    // Retention deletes each whole slot.
    let bound = s.now().unwrap() + 1;
    assert_eq!(
        s.delete_slots("queued", &[S1], bound).unwrap(),
        ATTEMPTS as usize + 1
    );
    assert_eq!(
        s.delete_slots("held", &[S1], bound).unwrap(),
        ATTEMPTS as usize + 1
    );
    for job in ["queued", "held"] {
        assert!(slot_runs(&mut *s, job).is_empty(), "{job}");
    }
    let left = s
        .runs(&RunQuery {
            job: Some("queued".into()),
            ..RunQuery::default()
        })
        .unwrap();
    assert_eq!(
        left.iter().map(|r| r.slot.usec).collect::<Vec<_>>(),
        vec![S3]
    );
}

/// A mark of `key` in `namespace` for `job`, by run `r` with fencing token `token` (0 and
/// no run outside a run).
pub fn new_mark(job: &str, namespace: &str, key: &str, r: u32, token: i64) -> Mark {
    Mark {
        namespace: namespace.to_string(),
        key: key.to_string(),
        job: job.to_string(),
        run_id: if token == 0 { String::new() } else { rid(r) },
        host: format!("host-{r} {r:032x}"),
        token,
        marked_at: 0,
    }
}

/// A key is recorded once per namespace, whoever asks: the second asker is answered with
/// the first mark, as it was written (run, host, token, the store's time); keys that differ
/// only by case, a trailing space or a `/` are different keys; reading does not write.
pub fn a_key_is_marked_once(env: &dyn Env) {
    let mut a = connect(env);
    let mut b = connect(env);
    assert_eq!(a.read_mark("shipping", "ORDER-1").unwrap(), None);
    let first = new_mark("sync", "shipping", "ORDER-1", 1, 0);
    let Marking::New(m1) = a.mark(&first, false).unwrap() else {
        panic!("the first mark is new");
    };
    assert_eq!(m1.marked_at, T0, "marked at the store's time");
    assert_eq!(m1.host, first.host);
    env.advance(1_000_000);
    assert_eq!(
        b.mark(&new_mark("sync", "shipping", "ORDER-1", 2, 0), false)
            .unwrap(),
        Marking::Already(m1.clone()),
        "a second mark answers the first"
    );
    assert_eq!(
        b.read_mark("shipping", "ORDER-1").unwrap(),
        Some(m1.clone())
    );
    for (namespace, key) in [
        ("billing", "ORDER-1"),
        ("shipping", "order-1"),
        ("shipping", "ORDER-1 "),
        ("shipping", "ORDER-1/x"),
        ("shipping", "ORDER%2D1"),
        ("shipping", "é ü"),
    ] {
        let m = new_mark("sync", namespace, key, 3, 0);
        assert!(
            matches!(b.mark(&m, false).unwrap(), Marking::New(_)),
            "{namespace} {key:?} is a key of its own"
        );
        assert_eq!(
            a.read_mark(namespace, key).unwrap().map(|m| m.key),
            Some(key.to_string())
        );
    }
    let long = "k".repeat(jobguard::guard::mark::MAX_KEY);
    assert!(matches!(
        a.mark(&new_mark("sync", "shipping", &long, 1, 0), false)
            .unwrap(),
        Marking::New(_)
    ));
    assert_eq!(
        b.read_mark("shipping", &long).unwrap().map(|m| m.key.len()),
        Some(jobguard::guard::mark::MAX_KEY)
    );
    // The longest namespace as stored (a job's own: JOB@NAMESPACE), and the same namespace
    // one byte shorter, are two namespaces: nothing cuts it short.
    let widest = jobguard::guard::mark::stored_namespace(
        &"j".repeat(jobguard::joblist::job::MAX_JOB_NAME_LEN),
        &"n".repeat(jobguard::guard::mark::MAX_NAMESPACE),
        false,
    );
    assert_eq!(widest.len(), jobguard::guard::mark::MAX_STORED_NAMESPACE);
    for namespace in [&widest[..widest.len() - 1], &widest[..]] {
        assert!(
            matches!(
                a.mark(&new_mark("sync", namespace, "ORDER-1", 1, 0), false)
                    .unwrap(),
                Marking::New(_)
            ),
            "{namespace} is a namespace of its own"
        );
        assert_eq!(
            b.read_mark(namespace, "ORDER-1")
                .unwrap()
                .map(|m| m.namespace),
            Some(namespace.to_string())
        );
    }
}

/// A fenced mark holds only while the job's lease carries the run's token: it is refused
/// once the lease expired, was released by the run's finish, or was taken over (and the
/// holder that took over can mark); a refused mark writes nothing, and a recorded key is
/// still refused to a run that lost its lease.
pub fn a_mark_is_fenced_by_the_runs_lease(env: &dyn Env) {
    let mut a = connect(env);
    let mut b = connect(env);
    let fenced = |s: &mut dyn Store, m: &Mark| s.mark(m, true).unwrap();
    // No lease at all.
    assert!(matches!(
        fenced(&mut *a, &new_mark("sync", "shipping", "K0", 1, 1)),
        Marking::Fenced(None)
    ));
    let (l1, _) = claimed(&mut *a, &request("sync", S1, 1, 1, false));
    let Marking::New(m1) = fenced(&mut *a, &new_mark("sync", "shipping", "K1", 1, l1.token)) else {
        panic!("the holder marks");
    };
    assert_eq!(m1.token, l1.token);
    assert_eq!(m1.run_id, rid(1));
    // Another job's lease does not fence this one's marks.
    assert!(matches!(
        fenced(&mut *b, &new_mark("other", "shipping", "K1", 2, l1.token)),
        Marking::Fenced(_)
    ));
    // A stale token (one below the lease's) is fenced out.
    assert!(matches!(
        fenced(
            &mut *b,
            &new_mark("sync", "shipping", "K2", 2, l1.token - 1)
        ),
        Marking::Fenced(Some(_))
    ));
    env.advance(TTL_US);
    assert!(
        matches!(
            fenced(&mut *a, &new_mark("sync", "shipping", "K2", 1, l1.token)),
            Marking::Fenced(Some(_))
        ),
        "an expired lease fences"
    );
    assert_eq!(a.read_mark("shipping", "K2").unwrap(), None);
    // The primitive judges expiry itself, by the store's clock: a run frozen between its
    // read (lease unexpired) and its insert must not record a mark once the lease has
    // expired, even before anyone takes over.
    let mut late = new_mark("sync", "shipping", "K2", 1, l1.token);
    late.marked_at = T0;
    assert!(
        !a.insert_mark(&late, true).unwrap(),
        "an insert after the lease expired writes nothing"
    );
    assert_eq!(a.read_mark("shipping", "K2").unwrap(), None);
    env.advance(FOREIGN_GRACE_USEC);
    let (l2, _) = claimed(&mut *b, &request("sync", S1, 2, 2, false));
    assert!(l2.token > l1.token);
    assert!(
        matches!(
            fenced(&mut *a, &new_mark("sync", "shipping", "K1", 1, l1.token)),
            Marking::Fenced(Some(ref l)) if l.token == l2.token
        ),
        "after a takeover the old holder is fenced even from a recorded key"
    );
    assert!(matches!(
        fenced(&mut *a, &new_mark("sync", "shipping", "K2", 1, l1.token)),
        Marking::Fenced(_)
    ));
    assert_eq!(
        fenced(&mut *b, &new_mark("sync", "shipping", "K1", 2, l2.token)),
        Marking::Already(m1),
        "the holder that took over sees the old holder's mark"
    );
    assert!(matches!(
        fenced(&mut *b, &new_mark("sync", "shipping", "K2", 2, l2.token)),
        Marking::New(_)
    ));
    assert_eq!(
        b.finish(&l2, &rid(2), &finish(Outcome::Succeeded)).unwrap(),
        Finished {
            recorded: true,
            released: true
        }
    );
    assert!(
        matches!(
            fenced(&mut *b, &new_mark("sync", "shipping", "K3", 2, l2.token)),
            Marking::Fenced(_)
        ),
        "a released lease fences"
    );
    assert_eq!(b.read_mark("shipping", "K3").unwrap(), None);
    // The primitive itself re-checks the lease: an insert with a lost token writes
    // nothing even when the caller's read said it held.
    let mut stale = new_mark("sync", "shipping", "K4", 1, l1.token);
    stale.marked_at = T0;
    assert!(!a.insert_mark(&stale, true).unwrap());
    assert_eq!(a.read_mark("shipping", "K4").unwrap(), None);
}

/// Retention deletes a job's marks recorded before the cut-off and no other job's
/// (stores that index marks by day delete a day once it has ended before the cut-off);
/// counting them first (`prune --dry-run`) says how many, and deletes none.
pub fn marks_go_with_their_jobs_retention(env: &dyn Env) {
    let mut a = connect(env);
    assert_eq!(a.count_marks("sync", T0).unwrap(), 0, "no marks yet");
    assert_eq!(a.delete_marks("sync", T0).unwrap(), 0, "no marks yet");
    let mine = new_mark("sync", "shipping", "OLD", 1, 0);
    let theirs = new_mark("other", "shipping", "THEIRS", 1, 0);
    assert!(matches!(a.mark(&mine, false).unwrap(), Marking::New(_)));
    assert!(matches!(a.mark(&theirs, false).unwrap(), Marking::New(_)));
    env.advance(3 * 86_400_000_000);
    let recent = new_mark("sync", "shipping", "RECENT", 1, 0);
    assert!(matches!(a.mark(&recent, false).unwrap(), Marking::New(_)));
    let cut = T0 + 2 * 86_400_000_000;
    assert_eq!(a.count_marks("sync", T0).unwrap(), 0, "nothing before T0");
    assert_eq!(a.delete_marks("sync", T0).unwrap(), 0, "nothing before T0");
    for _ in 0..2 {
        assert_eq!(
            a.count_marks("sync", cut).unwrap(),
            1,
            "OLD, and counting deletes none"
        );
    }
    assert_eq!(
        a.count_marks("sync", T0 + 4 * 86_400_000_000).unwrap(),
        2,
        "OLD and RECENT"
    );
    assert_eq!(
        a.count_marks("other", cut).unwrap(),
        1,
        "THEIRS, of its own job"
    );
    assert!(a.read_mark("shipping", "OLD").unwrap().is_some());
    assert_eq!(a.delete_marks("sync", cut).unwrap(), 1);
    assert_eq!(a.count_marks("sync", cut).unwrap(), 0, "deleted");
    assert_eq!(a.read_mark("shipping", "OLD").unwrap(), None);
    assert!(a.read_mark("shipping", "THEIRS").unwrap().is_some());
    assert!(a.read_mark("shipping", "RECENT").unwrap().is_some());
    assert!(
        matches!(a.mark(&mine, false).unwrap(), Marking::New(_)),
        "a deleted key can be marked again"
    );
}

//! Unit and property tests of the pure rules, with no store at all.

use std::collections::BTreeMap;
use std::time::Duration;

use proptest::prelude::*;

use super::*;

#[path = "../../../tests/common/memory.rs"]
mod memory;
use crate::guard::lease::Holder;
use crate::guard::ledger::NewRun;
use crate::store::ClockCheck;
use memory::Memory;

const T0: i64 = 1_800_000_000_000_000;
const HOUR: i64 = 3_600_000_000;
const TTL: Duration = Duration::from_secs(60);
const TTL_US: i64 = 60_000_000;
/// When another machine may take a slot over from a holder whose lease lapsed.
const TAKEOVER: i64 = TTL_US + FOREIGN_GRACE_USEC;

/// Whether `held` was recorded on another machine or boot than `claimer`: by a holder
/// that may keep an outcome this claimer cannot replay.
fn elsewhere(held: &Run, claimer: &Run) -> bool {
    held.machine_id != claimer.machine_id
        || held.boot_id != claimer.boot_id
        || claimer.machine_id.is_empty()
}

/// `r` asked from holder `n`'s machine id: from that holder's boot too (another process
/// of it) with `same_boot`, else from another boot (a reboot, or a copy of its image).
fn on_machine_of(mut r: ClaimRequest, n: u32, same_boot: bool) -> ClaimRequest {
    r.holder.machine_id = holder(n).machine_id;
    if same_boot {
        r.holder.boot_id = holder(n).boot_id;
    }
    r
}

/// Holder number `n`.
pub(crate) fn holder(n: u32) -> Holder {
    Holder {
        machine_id: format!("{n:032x}"),
        boot_id: format!("b{n:031x}"),
        pid: 1000 + n,
        pid_start: 5_000_000 + u64::from(n),
        host: format!("host-{n}"),
    }
}

/// A claim of job `j`'s `slot` (UTC) by holder `h` under run id number `r`, ttl 60 s.
pub(crate) fn req(slot: i64, h: u32, r: u32) -> ClaimRequest {
    ClaimRequest::new(
        NewRun {
            run_id: format!("{r:032x}"),
            job: "j".to_string(),
            slot: Slot {
                usec: slot,
                zone: "UTC".to_string(),
            },
            forced: false,
            trigger: "timer".to_string(),
            invocation_id: None,
        },
        holder(h),
        TTL,
    )
}

/// The end of a run with `outcome` and `resolution`.
pub(crate) fn end(outcome: Outcome, resolution: Option<Resolution>) -> Finish {
    Finish {
        outcome,
        reason: None,
        exit_status: None,
        report: BTreeMap::new(),
        resolution,
        ended_at: None,
    }
}

fn granted(m: &mut Memory, r: &ClaimRequest, now: i64) -> Grant {
    match m.claim(r, now).expect("claim") {
        ClaimDecision::Grant(g) => g,
        other => panic!("expected a grant, got {other:?}"),
    }
}

fn answer(m: &mut Memory, r: &ClaimRequest, now: i64) -> Claim {
    m.claim(r, now).expect("claim").answer()
}

#[test]
fn first_claim_grants_token_1_attempt_1() {
    let mut m = Memory::default();
    let g = granted(&mut m, &req(T0, 1, 1), T0);
    assert_eq!((g.lease.token, g.run.attempt), (1, 1));
    assert_eq!(g.lease.expire_at, T0 + TTL_US);
    assert_eq!((g.run.started_at, g.run.outcome), (T0, Outcome::Running));
    assert_eq!(g.previous_slot, None);
}

#[test]
fn another_holder_is_busy_until_expiry_then_takes_over() {
    let mut m = Memory::default();
    let g1 = granted(&mut m, &req(T0, 1, 1), T0);
    match answer(&mut m, &req(T0, 2, 2), T0 + TTL_US - 1) {
        Claim::Busy { lease, run } => {
            assert_eq!(lease, g1.lease);
            assert_eq!(run.map(|r| r.run_id), Some(g1.run.run_id.clone()));
        }
        other => panic!("{other:?}"),
    }
    let g2 = granted(&mut m, &req(T0, 2, 3), T0 + TTL_US + FOREIGN_GRACE_USEC);
    assert_eq!((g2.lease.token, g2.run.attempt), (2, 2));
}

/// A holder on another machine or boot whose lease lapsed while its record of the slot is
/// still `running` may be cut off with the outcome in hand: the slot is busy for
/// FOREIGN_GRACE_USEC more. A machine made from the same image (one machine id, another
/// boot) counts as another machine, and so does the same machine after a reboot. Other
/// slots, the same boot, an ended record and a lease unlocked by a person are not held
/// back.
#[test]
fn a_lapsed_foreign_holders_running_slot_stays_busy_for_the_grace() {
    let expiry = T0 + TTL_US;
    let mut m = Memory::default();
    let g1 = granted(&mut m, &req(T0, 1, 1), T0);
    for at in [expiry, expiry + FOREIGN_GRACE_USEC - 1] {
        match answer(&mut m, &req(T0, 2, 2), at) {
            Claim::Busy { lease, run } => {
                assert_eq!(lease, g1.lease);
                assert_eq!(run.map(|r| r.run_id), Some(g1.run.run_id.clone()));
            }
            other => panic!("at expiry + {} µs: {other:?}", at - expiry),
        }
    }
    // Forced too: the slot may have run already.
    let mut forced = req(T0, 2, 2);
    forced.run.forced = true;
    assert!(matches!(
        answer(&mut m, &forced, expiry),
        Claim::Busy { .. }
    ));
    // Another slot of the job is not held back. Once its grant took the lease on, the cut
    // attempt's lapse is no longer known: its slot waits for a recovery pass to judge it,
    // however long that takes, from any machine but its own.
    let mut other_slot = m.clone();
    granted(&mut other_slot, &req(T0 + HOUR, 2, 3), expiry);
    let later = expiry + FOREIGN_GRACE_USEC + HOUR;
    match answer(&mut other_slot, &req(T0, 3, 8), later) {
        Claim::Busy { run, .. } => assert_eq!(run.map(|r| r.run_id), Some(g1.run.run_id.clone())),
        other => panic!("{other:?}"),
    }
    granted(
        &mut other_slot.clone(),
        &on_machine_of(req(T0, 3, 9), 1, true),
        later,
    );
    assert!(matches!(
        answer(
            &mut other_slot.clone(),
            &on_machine_of(req(T0, 3, 9), 1, false),
            later
        ),
        Claim::Busy { .. }
    ));
    assert!(other_slot.interrupt(&g1.run, "lease-expired", Resolution::Queued, later));
    granted(&mut other_slot, &req(T0, 3, 10), later);
    // The same boot (another process) replays its own kept outcome before it claims.
    granted(
        &mut m.clone(),
        &on_machine_of(req(T0, 2, 4), 1, true),
        expiry,
    );
    // Another boot with the machine id (a reboot, or a copy of the image that still runs
    // the slot elsewhere) waits out the grace.
    let same_machine_id = on_machine_of(req(T0, 2, 4), 1, false);
    assert!(matches!(
        answer(
            &mut m.clone(),
            &same_machine_id,
            expiry + FOREIGN_GRACE_USEC - 1
        ),
        Claim::Busy { .. }
    ));
    granted(
        &mut m.clone(),
        &same_machine_id,
        expiry + FOREIGN_GRACE_USEC,
    );
    // A claimer that cannot tell its machine (no /etc/machine-id) is taken for another.
    let mut unknown = req(T0, 2, 4);
    unknown.holder.machine_id = String::new();
    assert!(matches!(
        answer(&mut m, &unknown, expiry),
        Claim::Busy { .. }
    ));
    // Once the record has ended, or a person unlocked the job, nothing waits.
    let mut ended = m.clone();
    ended
        .finish(
            &g1.lease,
            &g1.run.run_id,
            &end(Outcome::Failed, None),
            true,
            expiry,
        )
        .unwrap();
    granted(&mut ended, &req(T0, 2, 5), expiry);
    let mut unlocked = m.clone();
    unlocked.unlock("j", expiry);
    granted(&mut unlocked, &req(T0, 2, 6), expiry);
    granted(&mut m, &req(T0, 2, 7), expiry + FOREIGN_GRACE_USEC);
}

#[test]
fn own_unexpired_lease_is_granted_again_with_a_new_token() {
    let mut m = Memory::default();
    granted(&mut m, &req(T0, 1, 1), T0);
    let g = granted(&mut m, &req(T0 + HOUR, 1, 2), T0 + 1);
    assert_eq!(g.lease.token, 2);
}

#[test]
fn clock_skew_is_refused_beyond_the_tolerance_only() {
    let mut m = Memory::default();
    let mut r = req(T0, 1, 1);
    r.clock = Some(ClockCheck {
        host_now: T0 - 5_000_001,
        tolerance: 5_000_000,
    });
    assert!(matches!(
        answer(&mut m, &r, T0),
        Claim::ClockSkew { store_now: T0 }
    ));
    r.clock = Some(ClockCheck {
        host_now: T0 + 5_000_000,
        tolerance: 5_000_000,
    });
    assert!(matches!(answer(&mut m, &r, T0), Claim::Claimed { .. }));
}

#[test]
fn done_and_held_slots_are_refused_unless_forced() {
    let mut m = Memory::default();
    let g = granted(&mut m, &req(T0, 1, 1), T0);
    m.finish(
        &g.lease,
        &g.run.run_id,
        &end(Outcome::Succeeded, None),
        false,
        T0 + 1,
    )
    .expect("finish");
    assert!(
        matches!(answer(&mut m, &req(T0, 2, 2), T0 + 2), Claim::SlotDone { by } if by.run_id == g.run.run_id)
    );
    let mut forced = req(T0, 2, 3);
    forced.run.forced = true;
    let f = granted(&mut m, &forced, T0 + 3);
    assert_eq!(f.run.attempt, 2);

    m.finish(
        &f.lease,
        &f.run.run_id,
        &end(Outcome::Failed, None),
        false,
        T0 + 4,
    )
    .expect("finish");
    let s2 = T0 + HOUR;
    let g = granted(&mut m, &req(s2, 1, 4), T0 + 4);
    assert!(m.interrupt(&g.run, "boot", Resolution::Held, T0 + 5));
    assert!(matches!(
        answer(&mut m, &req(s2, 2, 5), T0 + 6),
        Claim::SlotHeld { .. }
    ));
    let mut forced = req(s2, 2, 6);
    forced.run.forced = true;
    let f = granted(&mut m, &forced, T0 + 7);
    assert_eq!(
        f.rerun,
        vec![g.run.run_id.clone()],
        "the held record is taken over"
    );
}

#[test]
fn queued_slots_come_first_oldest_first_and_done_ones_settle() {
    let mut m = Memory::default();
    let (a, b, c) = (T0 - 3 * HOUR, T0 - 2 * HOUR, T0 - HOUR);
    // Slot a: an attempt is queued after a later attempt took over, and that attempt
    // succeeds: the slot is done with a queued record, which is settled, not re-run.
    let first = granted(&mut m, &req(a, 1, 1), T0);
    let takeover = granted(&mut m, &req(a, 2, 2), T0 + TAKEOVER);
    assert!(m.interrupt(&first.run, "boot", Resolution::Queued, T0 + TAKEOVER + 1));
    m.finish(
        &takeover.lease,
        &takeover.run.run_id,
        &end(Outcome::Succeeded, None),
        false,
        T0 + TAKEOVER + 2,
    )
    .expect("finish");
    let mut ids = vec![first.run.run_id.clone()];
    for (i, s) in [b, c].into_iter().enumerate() {
        let g = granted(
            &mut m,
            &req(s, 1, 10 + i as u32),
            T0 + TAKEOVER + 3 + i as i64,
        );
        assert!(m.interrupt(&g.run, "boot", Resolution::Queued, T0 + TAKEOVER + 10));
        ids.push(g.run.run_id);
    }
    let mut r = req(T0, 2, 30);
    r.queued_first = true;
    r.in_order = true;
    let g = granted(&mut m, &r, T0 + TAKEOVER + 30);
    assert_eq!(
        g.run.slot.usec, b,
        "the oldest queued slot that is not done"
    );
    assert_eq!(g.run.trigger, "rerun");
    assert_eq!(g.run.attempt, 2);
    assert_eq!(g.previous_slot, Some(c));
    let mut rerun = g.rerun.clone();
    rerun.sort();
    let mut want = vec![ids[0].clone(), ids[1].clone()];
    want.sort();
    assert_eq!(rerun, want);
}

#[test]
fn in_order_refuses_a_slot_behind_but_not_behind_a_slot_far_ahead() {
    let mut m = Memory::default();
    let g = granted(&mut m, &req(T0, 1, 1), T0);
    m.finish(
        &g.lease,
        &g.run.run_id,
        &end(Outcome::Failed, None),
        false,
        T0 + 1,
    )
    .expect("finish");
    let mut r = req(T0 - HOUR, 1, 2);
    r.in_order = true;
    assert!(matches!(
        answer(&mut m, &r, T0 + 2),
        Claim::SlotBehind { newest: T0 }
    ));
    // A forced slot far in the future does not count as recorded.
    let mut ahead = req(T0 + 10 * HOUR, 1, 3);
    ahead.run.forced = true;
    let g = granted(&mut m, &ahead, T0 + 3);
    assert_eq!(g.previous_slot, Some(T0));
    m.finish(
        &g.lease,
        &g.run.run_id,
        &end(Outcome::Failed, None),
        false,
        T0 + 4,
    )
    .expect("finish");
    let mut r = req(T0 + HOUR, 1, 4);
    r.in_order = true;
    r.clock = Some(ClockCheck {
        host_now: T0 + 5,
        tolerance: 5_000_000,
    });
    let g = granted(&mut m, &r, T0 + 5);
    assert_eq!(g.previous_slot, Some(T0));
}

#[test]
fn a_retry_answers_the_first_grant_then_is_an_error() {
    let mut m = Memory::default();
    let mut r = req(T0, 1, 1);
    r.clock = Some(ClockCheck {
        host_now: T0,
        tolerance: 1,
    });
    let g = granted(&mut m, &r, T0);
    // The retry comes after the clock check would refuse it: the grant is answered again.
    match m.claim(&r, T0 + 10).expect("retry") {
        ClaimDecision::Retried { lease, run } => {
            assert_eq!((lease, run), (g.lease.clone(), g.run.clone()));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(m.runs.len(), 1);
    assert_eq!(
        m.claim(&r, T0 + TAKEOVER).unwrap_err(),
        RuleError::AlreadyRecorded {
            run_id: g.run.run_id.clone()
        }
    );
}

#[test]
fn finish_needs_the_lease_unless_lost_or_kept_and_one_success_per_slot() {
    let mut m = Memory::default();
    let g1 = granted(&mut m, &req(T0, 1, 1), T0);
    let g2 = granted(&mut m, &req(T0, 2, 2), T0 + TAKEOVER);
    let ok = end(Outcome::Succeeded, None);
    // The first holder's lease is gone: a plain finish records nothing.
    assert_eq!(
        m.finish(&g1.lease, &g1.run.run_id, &ok, false, T0 + TAKEOVER + 1),
        Ok(Finished {
            recorded: false,
            released: false
        })
    );
    assert_eq!(
        m.finish(&g2.lease, &g2.run.run_id, &ok, false, T0 + TAKEOVER + 2),
        Ok(Finished {
            recorded: true,
            released: true
        })
    );
    // A kept success of the first attempt would be the slot's second.
    assert_eq!(
        m.finish(&g1.lease, &g1.run.run_id, &ok, true, T0 + TAKEOVER + 3),
        Err(RuleError::SecondSuccess {
            by: g2.run.run_id.clone()
        })
    );
    assert_eq!(
        m.finish(
            &g1.lease,
            &g1.run.run_id,
            &end(Outcome::LeaseLost, None),
            false,
            T0 + TAKEOVER + 4
        ),
        Ok(Finished {
            recorded: true,
            released: false
        })
    );
    assert!(matches!(
        m.finish(&g1.lease, "x", &end(Outcome::Running, None), false, T0),
        Err(RuleError::NotAnEndState { .. })
    ));
}

#[test]
fn renew_only_while_held_and_unexpired() {
    let mut m = Memory::default();
    let g = granted(&mut m, &req(T0, 1, 1), T0);
    assert_eq!(g.lease.renewal, 0);
    assert_eq!(m.renew(&g.lease, 7, TTL, T0 + 10), Some(T0 + 10 + TTL_US));
    let renewed = Lease {
        renewal: 7,
        ..g.lease.clone()
    };
    assert_eq!(m.renew(&renewed, 8, TTL, T0 + 10 + TTL_US), None);
    let mut stale = renewed.clone();
    stale.token += 1;
    assert_eq!(m.renew(&stale, 9, TTL, T0 + 11), None);
}

/// Two copies of one holder (one snapshot resumed twice): the first renewal moves the
/// generation on; the other copy's renewal and its final write are refused while the
/// first copy's lease lives, and the first copy's renewal sent again after a lost answer
/// is still its own.
#[test]
fn a_copy_of_the_holder_loses_at_its_next_renewal() {
    let mut m = Memory::default();
    let g = granted(&mut m, &req(T0, 1, 1), T0);
    let (a, b) = (g.lease.clone(), g.lease.clone());
    // Copy a renews (generation 11); its answer is lost and it sends it again.
    assert_eq!(m.renew(&a, 11, TTL, T0 + 10), Some(T0 + 10 + TTL_US));
    assert_eq!(m.renew(&a, 11, TTL, T0 + 20), Some(T0 + 20 + TTL_US));
    // Copy b presents the same generation 0 with its own next: refused, nothing written.
    assert_eq!(m.renew(&b, 22, TTL, T0 + 30), None);
    assert_eq!(
        m.lease("j").map(|l| (l.renewal, l.expire_at)),
        Some((11, T0 + 20 + TTL_US))
    );
    // b stops its command and records the lost lease: refused, the record is a's.
    for kept in [false, true] {
        for outcome in [Outcome::LeaseLost, Outcome::Succeeded] {
            assert_eq!(
                m.finish(&b, &g.run.run_id, &end(outcome, None), kept, T0 + 40),
                Ok(Finished {
                    recorded: false,
                    released: false
                })
            );
        }
    }
    // a, with the generation it wrote, renews and finishes.
    let a = Lease { renewal: 11, ..a };
    assert_eq!(m.renew(&a, 12, TTL, T0 + 50), Some(T0 + 50 + TTL_US));
    let a = Lease { renewal: 12, ..a };
    assert_eq!(
        m.finish(
            &a,
            &g.run.run_id,
            &end(Outcome::Succeeded, None),
            false,
            T0 + 60
        ),
        Ok(Finished {
            recorded: true,
            released: true
        })
    );
}

/// A copy whose generation is behind may still record once the lease that the other copy
/// renewed has expired and nothing else took the row: the other copy's command was
/// stopped by then ([`crate::guard::lease::fence_after`]), and its record would otherwise stay
/// `running` until a recovery pass.
#[test]
fn a_copy_behind_records_its_lost_lease_once_the_other_copys_lease_expired() {
    let mut m = Memory::default();
    let g = granted(&mut m, &req(T0, 1, 1), T0);
    assert!(m.renew(&g.lease, 5, TTL, T0 + 10).is_some());
    let late = T0 + 10 + TTL_US;
    assert_eq!(
        m.finish(
            &g.lease,
            &g.run.run_id,
            &end(Outcome::LeaseLost, None),
            false,
            late
        ),
        Ok(Finished {
            recorded: true,
            released: false
        })
    );
}

#[test]
fn unlock_ends_any_lease_and_the_token_keeps_growing() {
    let mut m = Memory::default();
    let g = granted(&mut m, &req(T0, 1, 1), T0);
    assert_eq!(m.unlock("j", T0 + 1), Some(g.lease.clone()));
    assert_eq!(m.lease("j"), None);
    assert_eq!(m.unlock("j", T0 + 2), None);
    let g = granted(&mut m, &req(T0 + HOUR, 2, 2), T0 + 3);
    assert_eq!(g.lease.token, 2);
}

#[test]
fn resolve_queues_nothing_in_a_done_slot() {
    let mut m = Memory::default();
    let g = granted(&mut m, &req(T0, 1, 1), T0);
    assert!(m.interrupt(&g.run, "boot", Resolution::Held, T0 + 1));
    assert_eq!(m.resolve("j", T0, Resolution::Queued), 1);
    assert_eq!(m.resolve("j", T0, Resolution::Queued), 0, "already queued");
    let mut forced = req(T0, 1, 2);
    forced.run.forced = true;
    let f = granted(&mut m, &forced, T0 + 2);
    m.finish(
        &f.lease,
        &f.run.run_id,
        &end(Outcome::Succeeded, None),
        false,
        T0 + 3,
    )
    .expect("finish");
    assert_eq!(m.resolve("j", T0, Resolution::Queued), 0);
    assert_eq!(
        m.resolve("j", T0, Resolution::Done),
        0,
        "rerun records stay"
    );
}

#[test]
fn interrupt_releases_only_the_runs_own_grant() {
    let mut m = Memory::default();
    let g1 = granted(&mut m, &req(T0, 1, 1), T0);
    let g2 = granted(&mut m, &req(T0, 2, 2), T0 + TAKEOVER);
    assert!(m.interrupt(&g1.run, "boot", Resolution::Queued, T0 + TAKEOVER + 1));
    assert_eq!(m.lease("j"), Some(g2.lease.clone()));
    assert!(m.interrupt(&g2.run, "boot", Resolution::Queued, T0 + TAKEOVER + 2));
    assert_eq!(m.lease("j"), None);
    assert!(!m.interrupt(&g2.run, "boot", Resolution::Queued, T0 + TAKEOVER + 3));
}

/// A cut run's recorded end is the latest it can have run by what the store holds, not
/// the time it was found cut: a host off for hours is not the run's own time.
#[test]
fn a_cut_run_ends_when_its_lease_did_not_when_it_was_found() {
    let found = T0 + 5 * HOUR;
    let ended = |m: &Memory, run: &Run| {
        m.runs("j")
            .into_iter()
            .find(|r| r.run_id == run.run_id)
            .and_then(|r| r.finished_at)
    };
    // Its own grant, expired: its expiry (renewed once, at T0 + 10 s).
    let mut m = Memory::default();
    let g1 = granted(&mut m, &req(T0, 1, 1), T0);
    let renewed = m
        .renew(&g1.lease, 1, TTL, T0 + 10_000_000)
        .expect("renewed");
    assert!(m.interrupt(&g1.run, "boot", Resolution::Queued, found));
    assert_eq!(ended(&m, &g1.run), Some(renewed));
    // Its own grant, unexpired (its shim found it gone): now.
    let mut m = Memory::default();
    let g1 = granted(&mut m, &req(T0, 1, 1), T0);
    assert!(m.interrupt(&g1.run, "process-gone", Resolution::Queued, T0 + 5_000_000));
    assert_eq!(ended(&m, &g1.run), Some(T0 + 5_000_000));
    // A later grant took the lease over: no later than that grant.
    let mut m = Memory::default();
    let g1 = granted(&mut m, &req(T0, 1, 1), T0);
    let g2 = granted(&mut m, &req(T0 + HOUR, 2, 2), T0 + TAKEOVER);
    assert!(m.interrupt(&g1.run, "lease-expired", Resolution::Queued, found));
    assert_eq!(ended(&m, &g1.run), Some(g2.lease.acquired_at));
    // Released by a person: nothing tells when it stopped, so when it was found.
    let mut m = Memory::default();
    let g1 = granted(&mut m, &req(T0, 1, 1), T0);
    m.unlock("j", T0 + 1);
    assert!(m.interrupt(&g1.run, "boot", Resolution::Held, found));
    assert_eq!(ended(&m, &g1.run), Some(found));
}

// Property tests: random histories through [`Memory`], with invariants checked at every
// step against the state before it.

#[derive(Debug, Clone)]
enum Op {
    Claim {
        slot: u8,
        holder: u8,
        forced: bool,
        queued_first: bool,
        in_order: bool,
    },
    Finish {
        pick: u8,
        outcome: u8,
        resolution: u8,
        kept: bool,
    },
    Interrupt {
        pick: u8,
        resolution: u8,
    },
    Resolve {
        slot: u8,
        resolution: u8,
    },
    Unlock,
    Advance(i64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u8..6, 0u8..3, prop::bool::weighted(0.1), any::<bool>(), any::<bool>()).prop_map(
            |(slot, holder, forced, queued_first, in_order)| Op::Claim {
                slot,
                holder,
                forced,
                queued_first,
                in_order
            }
        ),
        2 => (any::<u8>(), 0u8..3, 0u8..3, any::<bool>()).prop_map(|(pick, outcome, resolution, kept)| {
            Op::Finish { pick, outcome, resolution, kept }
        }),
        1 => (any::<u8>(), 0u8..2).prop_map(|(pick, resolution)| Op::Interrupt { pick, resolution }),
        1 => (0u8..6, 0u8..3).prop_map(|(slot, resolution)| Op::Resolve { slot, resolution }),
        1 => Just(Op::Unlock),
        2 => prop_oneof![Just(0i64), 1i64..TTL_US, Just(TTL_US), TTL_US..3 * TTL_US].prop_map(Op::Advance),
    ]
}

fn slot_usec(n: u8) -> i64 {
    T0 - 3 * HOUR + i64::from(n) * HOUR
}

fn resolution(n: u8) -> Resolution {
    match n {
        0 => Resolution::Queued,
        1 => Resolution::Held,
        _ => Resolution::Done,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn histories_keep_the_promises(ops in prop::collection::vec(op(), 1..80)) {
        let mut m = Memory::default();
        let mut now = T0;
        let mut grants: Vec<Grant> = Vec::new();
        let mut last_token = 0;
        let mut next_run = 0u32;
        for op in ops {
            match op {
                Op::Claim { slot, holder: h, forced, queued_first, in_order } => {
                    next_run += 1;
                    let mut r = req(slot_usec(slot), u32::from(h), next_run);
                    // Holder 2 runs on a copy of holder 1's machine: one machine id, its
                    // own boot.
                    if h == 2 {
                        r.holder.machine_id = holder(1).machine_id;
                    }
                    r.run.forced = forced;
                    r.queued_first = queued_first;
                    r.in_order = in_order;
                    let before = m.clone();
                    let state = before.claim_state(&r, now);
                    let decision = m.claim(&r, now).expect("fresh run ids never fail");
                    match decision {
                        ClaimDecision::Grant(g) => {
                            // Settling records ahead of the grant changes no decision: the
                            // same slot is granted with only the kept records to settle.
                            let ahead = settle_ahead(&state, &g);
                            let mut settled = state.clone();
                            for runs in settled.slots.values_mut() {
                                for run in runs.iter_mut() {
                                    if let Some(a) = ahead.iter().find(|a| a.run_id == run.run_id) {
                                        *run = a.clone();
                                    }
                                }
                            }
                            match claim(&settled, &r).expect("decided once") {
                                ClaimDecision::Grant(again) => {
                                    prop_assert_eq!(&again.run.slot, &g.run.slot);
                                    prop_assert_eq!(&again.lease, &g.lease);
                                    prop_assert!(again.rerun.len() <= 2, "{:?}", again.rerun);
                                    let mut all: Vec<&String> = ahead.iter().map(|a| &a.run_id).chain(&again.rerun).collect();
                                    all.sort();
                                    let mut want: Vec<&String> = g.rerun.iter().collect();
                                    want.sort();
                                    prop_assert_eq!(all, want);
                                }
                                other => prop_assert!(false, "settled ahead, then {other:?}"),
                            }
                            // Never two unexpired holders: the row was free, expired or ours.
                            if let Some(l) = &state.lease {
                                prop_assert!(
                                    l.holder.is_empty() || l.expire_at <= now || l.holder == g.lease.holder,
                                    "granted over {l:?}"
                                );
                                // Never over another machine's attempt at the slot within
                                // the grace after its lease.
                                if let Some(held) = &state.lease_run
                                    && !l.holder.is_empty()
                                    && l.holder != g.lease.holder
                                    && held.outcome == Outcome::Running
                                    && held.slot.usec == g.run.slot.usec
                                    && elsewhere(held, &g.run)
                                {
                                    prop_assert!(now >= l.expire_at + FOREIGN_GRACE_USEC, "granted over {held:?}");
                                }
                                // Never over another machine's attempt at the slot still
                                // running under an earlier lease.
                                prop_assert!(!before.slot_runs("j", g.run.slot.usec).iter().any(|x|
                                    x.outcome == Outcome::Running
                                        && x.fencing_token != l.token
                                        && elsewhere(x, &g.run)),
                                    "granted over an earlier attempt");
                            }
                            // Fencing tokens strictly increase, across releases and unlocks.
                            prop_assert!(g.lease.token > last_token);
                            last_token = g.lease.token;
                            let slot_before = before.slot_runs("j", g.run.slot.usec);
                            // A done or held slot is never granted unless forced.
                            if !forced {
                                prop_assert!(!slot_before.iter().any(is_done));
                                prop_assert!(!slot_before.iter().any(|x| x.resolution == Some(Resolution::Held)));
                            }
                            prop_assert_eq!(g.run.attempt, slot_before.len() as i64 + 1);
                            // Queued slots are taken oldest first.
                            let free_queued: Vec<i64> = state
                                .slots
                                .iter()
                                .filter(|(_, rs)| rs.iter().any(|x| x.resolution == Some(Resolution::Queued))
                                    && slot_state(rs) == SlotState::Free)
                                .map(|(s, _)| *s)
                                .collect();
                            if queued_first && let Some(oldest) = free_queued.first() {
                                prop_assert_eq!(g.run.slot.usec, *oldest);
                                prop_assert_eq!(g.run.trigger.as_str(), "rerun");
                            } else {
                                prop_assert_eq!(g.run.slot.usec, slot_usec(slot));
                                // in_order: nothing later is recorded (within the bound).
                                if in_order {
                                    prop_assert!(state.newest.is_none_or(|n| n <= g.run.slot.usec));
                                }
                            }
                            // Nothing queued or held is left in the claimed slot.
                            prop_assert!(!m.slot_runs("j", g.run.slot.usec).iter().any(|x|
                                matches!(x.resolution, Some(Resolution::Queued | Resolution::Held))));
                            grants.push(g);
                        }
                        ClaimDecision::Refuse(c) => {
                            // A refusal writes nothing.
                            prop_assert_eq!(m.runs.clone(), before.runs.clone());
                            prop_assert_eq!(&m.leases, &before.leases);
                            if let Claim::SlotBehind { newest } = c {
                                prop_assert!(in_order && newest > slot_usec(slot));
                            }
                            // Busy: an unexpired lease, or one that lapsed within the grace
                            // while another machine's attempt at the slot still runs.
                            if let Claim::Busy { lease, run } = c {
                                let foreign_running = run.as_ref().is_some_and(|x| {
                                    x.outcome == Outcome::Running
                                        && (x.machine_id != r.holder.machine_id
                                            || x.boot_id != r.holder.boot_id
                                            || r.holder.machine_id.is_empty())
                                });
                                let superseded =
                                    run.as_ref().is_some_and(|x| x.fencing_token != lease.token);
                                prop_assert!(
                                    lease.expire_at > now
                                        || (foreign_running
                                            && (superseded
                                                || lease.expire_at + FOREIGN_GRACE_USEC > now)),
                                    "busy by {lease:?}"
                                );
                            }
                        }
                        ClaimDecision::Retried { .. } => prop_assert!(false, "no run id is reused"),
                    }
                }
                Op::Finish { pick, outcome, resolution: res, kept } => {
                    if grants.is_empty() { continue; }
                    let g = grants[usize::from(pick) % grants.len()].clone();
                    let outcome = [Outcome::Succeeded, Outcome::Failed, Outcome::LeaseLost][usize::from(outcome)];
                    let res = [None, Some(Resolution::Queued), Some(Resolution::Held)][usize::from(res)];
                    let before = m.clone();
                    match m.finish(&g.lease, &g.run.run_id, &end(outcome, res), kept, now) {
                        Ok(f) => {
                            if f.released {
                                prop_assert!(holds(before.leases.get("j"), &g.lease, now));
                            }
                        }
                        Err(RuleError::SecondSuccess { .. }) => {
                            prop_assert_eq!(m.runs.clone(), before.runs.clone());
                            prop_assert_eq!(&m.leases, &before.leases);
                        }
                        Err(e) => prop_assert!(false, "{e}"),
                    }
                }
                Op::Interrupt { pick, resolution: res } => {
                    if grants.is_empty() { continue; }
                    let g = grants[usize::from(pick) % grants.len()].clone();
                    m.interrupt(&g.run, "boot", resolution(res), now);
                }
                Op::Resolve { slot, resolution: res } => {
                    m.resolve("j", slot_usec(slot), resolution(res));
                }
                Op::Unlock => {
                    m.unlock("j", now);
                }
                Op::Advance(d) => now += d,
            }
            // At most one non-forced success per slot; attempts number 1..n per slot.
            let mut per_slot: BTreeMap<i64, Vec<&Run>> = BTreeMap::new();
            for r in &m.runs {
                per_slot.entry(r.slot.usec).or_default().push(r);
            }
            for (s, rs) in per_slot {
                let wins = rs.iter().filter(|r| r.outcome == Outcome::Succeeded && !r.forced).count();
                prop_assert!(wins <= 1, "slot {s}: {wins} successes");
                let attempts: Vec<i64> = rs.iter().map(|r| r.attempt).collect();
                let want: Vec<i64> = (1..=rs.len() as i64).collect();
                prop_assert_eq!(attempts, want);
            }
            // Fencing tokens of records are unique per job.
            let mut tokens: Vec<i64> = m.runs.iter().map(|r| r.fencing_token).collect();
            tokens.sort_unstable();
            tokens.dedup();
            prop_assert_eq!(tokens.len(), m.runs.len());
        }
    }

    #[test]
    fn clock_check_is_symmetric_and_first_for_new_runs(
        offset in -10_000_000i64..10_000_000, tolerance in 0i64..10_000_000
    ) {
        let mut m = Memory::default();
        let mut r = req(T0, 1, 1);
        r.clock = Some(ClockCheck { host_now: T0 + offset, tolerance });
        let skew = matches!(answer(&mut m, &r, T0), Claim::ClockSkew { .. });
        prop_assert_eq!(skew, offset.abs() > tolerance);
    }
}

fn decl(fingerprint: &str, defined_at: i64, host: &str) -> ScheduleDecl {
    ScheduleDecl {
        job: "sync".into(),
        fingerprint: fingerprint.into(),
        defined_at,
        host: host.into(),
        seen_at: T0,
        horizon: 2 * 86_400_000_000,
    }
}

fn seen(d: ScheduleDecl, at: i64) -> ScheduleDecl {
    ScheduleDecl { seen_at: at, ..d }
}

/// Applies `asked` to `current` as a store does: the record after the declaration.
fn declared(current: Option<ScheduleDecl>, asked: &ScheduleDecl) -> ScheduleDecl {
    match declare_schedule(current.as_ref(), asked) {
        Some(w) => w,
        None => current.unwrap_or_else(|| asked.clone()),
    }
}

#[test]
fn the_newest_schedule_definition_wins() {
    let old = decl("*-*-* 02:00:00 UTC", T0, "a");
    let new = decl("*-*-* 03:00:00 UTC", T0 + HOUR, "b");
    // Nothing recorded: the first declaration is written.
    assert_eq!(declare_schedule(None, &old), Some(old.clone()));
    // A newer definition replaces an older one; an older one never replaces a newer one.
    assert_eq!(declare_schedule(Some(&old), &new), Some(new.clone()));
    assert_eq!(declare_schedule(Some(&new), &old), None);
    // The same fingerprint: only a later time is written (the host and time move on).
    let copy = decl("*-*-* 03:00:00 UTC", T0 + 2 * HOUR, "c");
    assert_eq!(declare_schedule(Some(&new), &copy), Some(copy.clone()));
    assert_eq!(declare_schedule(Some(&copy), &new), None);
    // Going back to the old schedule later is a newer definition than every copy.
    let back = decl("*-*-* 02:00:00 UTC", T0 + 3 * HOUR, "a");
    assert_eq!(declare_schedule(Some(&copy), &back), Some(back.clone()));
    // A tie in time is broken by the fingerprint, the same way for every host.
    let x = decl("x", T0, "a");
    let y = decl("y", T0, "b");
    assert_eq!(declare_schedule(Some(&x), &y), Some(y.clone()));
    assert_eq!(declare_schedule(Some(&y), &x), None);
}

/// A host's declaration replaces its own earlier one, even from a file with an older
/// time (a restored backup): otherwise the host would lose to itself for good.
#[test]
fn a_host_replaces_its_own_declaration() {
    let edited = decl("*-*-* 03:00:00 UTC", T0 + HOUR, "a");
    let restored = decl("*-*-* 02:00:00 UTC", T0, "a");
    assert_eq!(
        declare_schedule(Some(&edited), &restored),
        Some(restored.clone())
    );
    // Another host with the restored (older) file still loses to a newer one.
    let b = decl("*-*-* 02:00:00 UTC", T0, "b");
    assert_eq!(declare_schedule(Some(&edited), &b), None);
}

/// The winning schedule holds while its hosts keep firing: its hosts refresh it a few
/// times per horizon (not at every firing), and once nobody has for a whole horizon, a
/// host with another schedule takes the job over instead of skipping for ever.
#[test]
fn a_schedule_whose_hosts_stopped_declaring_is_taken_over() {
    let day = 86_400_000_000;
    let winner = decl("*-*-* 03:00:00 UTC", T0 + HOUR, "b");
    let loser = decl("*-*-* 02:00:00 UTC", T0, "a");
    // Within the horizon (2 days): the older definition loses.
    assert_eq!(
        declare_schedule(Some(&winner), &seen(loser.clone(), T0 + day)),
        None
    );
    // The winner's hosts refresh: not at a firing an hour later, but after a quarter of
    // the horizon.
    assert_eq!(
        declare_schedule(Some(&winner), &seen(winner.clone(), T0 + HOUR)),
        None
    );
    let refreshed = seen(winner.clone(), T0 + day);
    assert_eq!(
        declare_schedule(Some(&winner), &refreshed),
        Some(refreshed.clone())
    );
    assert_eq!(
        declare_schedule(Some(&refreshed), &seen(loser.clone(), T0 + 2 * day)),
        None
    );
    // Nobody refreshed it for more than its horizon: the other schedule takes over.
    let late = seen(loser.clone(), T0 + 3 * day + 1);
    assert_eq!(
        declare_schedule(Some(&refreshed), &late),
        Some(late.clone())
    );
    // A refresh keeps the later of the two definition times.
    let copy = seen(decl("*-*-* 03:00:00 UTC", T0, "c"), T0 + 2 * day);
    assert_eq!(
        declare_schedule(Some(&winner), &copy).map(|d| (d.defined_at, d.host)),
        Some((T0 + HOUR, "c".to_string()))
    );
}

proptest! {
    /// Whatever order hosts declare in, the record ends as the greatest declaration by
    /// (defined_at, fingerprint), so every host agrees on the winner once each declared.
    #[test]
    fn declarations_in_any_order_agree(
        decls in prop::collection::vec((0u8..3, 0i64..4), 1..8),
        seed in any::<u64>(),
    ) {
        let all: Vec<ScheduleDecl> = decls
            .iter()
            .enumerate()
            .map(|(i, (f, t))| decl(&format!("f{f}"), T0 + t, &format!("h{i}")))
            .collect();
        let best = all
            .iter()
            .max_by(|a, b| (a.defined_at, &a.fingerprint).cmp(&(b.defined_at, &b.fingerprint)))
            .expect("at least one")
            .clone();
        let mut order: Vec<usize> = (0..all.len()).collect();
        let mut s = seed;
        for i in (1..order.len()).rev() {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            order.swap(i, (s >> 33) as usize % (i + 1));
        }
        let mut record = None;
        for i in order {
            record = Some(declared(record, &all[i]));
        }
        let record = record.expect("declared");
        prop_assert_eq!(
            (&record.fingerprint, record.defined_at),
            (&best.fingerprint, best.defined_at)
        );
    }
}

/// One step of two copies of one holder in [`copies_of_one_holder_never_both_keep_the_lease`].
#[derive(Debug, Clone)]
enum CopyOp {
    /// Copy `copy` renews; with `lost`, the store applies it but the answer never arrives.
    Renew { copy: usize, lost: bool },
    /// Copy `copy` ends: as the shim does ([`crate::shim::renew::Renewal::present`]), the
    /// outcome (`lease_lost` once the copy was refused) is written presenting the confirmed
    /// generation, then, if that changed nothing, the one in doubt.
    Finish { copy: usize, kept: bool },
    /// The store's clock moves on, µs.
    Advance(i64),
}

fn copy_op() -> impl Strategy<Value = CopyOp> {
    prop_oneof![
        4 => (0usize..2, prop::bool::weighted(0.3)).prop_map(|(copy, lost)| CopyOp::Renew { copy, lost }),
        1 => (0usize..2, any::<bool>()).prop_map(|(copy, kept)| CopyOp::Finish { copy, kept }),
        2 => prop_oneof![1i64..TTL_US / 2, TTL_US / 2..2 * TTL_US].prop_map(CopyOp::Advance),
    ]
}

/// What one copy knows.
#[derive(Debug, Clone)]
struct Copy {
    lease: Lease,
    /// A renewal sent whose answer was lost: sent again with the same generation.
    pending: Option<i64>,
    refused: bool,
    done: bool,
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Two copies of one holder with one grant, in any interleaving of renewals (some
    /// answers lost), ends and time: once one copy's renewal is in the store, the other
    /// copy's renewals are refused for good; a copy records the outcome only while the
    /// other copy's renewed lease is not live; a copy is refused only when the other copy
    /// renewed or the lease expired.
    #[test]
    fn copies_of_one_holder_never_both_keep_the_lease(ops in prop::collection::vec(copy_op(), 1..40)) {
        let mut m = Memory::default();
        let g = granted(&mut m, &req(T0, 1, 1), T0);
        let mut now = T0;
        let mut copies = vec![
            Copy { lease: g.lease.clone(), pending: None, refused: false, done: false };
            2
        ];
        let mut fresh = 100i64;
        // Which copy's generation the row holds, once a renewal went in.
        let mut owner: Option<usize> = None;
        let mut recorded = false;
        for op in ops {
            match op {
                CopyOp::Advance(d) => now += d,
                CopyOp::Renew { copy, lost } => {
                    let c = &mut copies[copy];
                    if c.refused || c.done {
                        continue;
                    }
                    let next = c.pending.unwrap_or_else(|| { fresh += 1; fresh });
                    let row = m.lease("j");
                    let got = m.renew(&c.lease.clone(), next, TTL, now);
                    if got.is_some() {
                        if let Some(o) = owner {
                            prop_assert_eq!(o, copy, "both copies renewed: {:?}", row);
                        }
                        owner = Some(copy);
                    } else {
                        // Refused only when the other copy renewed or the lease is gone.
                        prop_assert!(
                            owner.is_some_and(|o| o != copy)
                                || row.as_ref().is_none_or(|l| l.expire_at <= now),
                            "refused {copy} on {row:?} at {now}"
                        );
                    }
                    match (got, lost) {
                        (_, true) => c.pending = Some(next),
                        (Some(expire_at), false) => {
                            c.lease.renewal = next;
                            c.lease.expire_at = expire_at;
                            c.pending = None;
                        }
                        (None, false) => c.refused = true,
                    }
                }
                CopyOp::Finish { copy, kept } => {
                    if copies[copy].done {
                        continue;
                    }
                    let c = &mut copies[copy];
                    c.done = true;
                    let outcome = if c.refused { Outcome::LeaseLost } else { Outcome::Succeeded };
                    let row = m.lease("j");
                    let live = row.as_ref().is_some_and(|l| l.expire_at > now);
                    let other_live = owner.is_some_and(|o| o != copy) && live;
                    let mut f = m
                        .finish(&c.lease, &g.run.run_id, &end(outcome, None), kept, now)
                        .expect("finish");
                    if !f.recorded && !f.released && let Some(p) = c.pending {
                        let doubtful = Lease { renewal: p, ..c.lease.clone() };
                        f = m
                            .finish(&doubtful, &g.run.run_id, &end(outcome, None), kept, now)
                            .expect("finish");
                    }
                    if f.recorded {
                        prop_assert!(!recorded, "recorded twice");
                        prop_assert!(!other_live, "{copy} recorded over the other copy's live lease {row:?}");
                        recorded = true;
                    } else {
                        // The copy whose generation the live row holds (or either, before any
                        // renewal) records, lost answers or not.
                        prop_assert!(
                            recorded || c.refused || !live || owner.is_some_and(|o| o != copy),
                            "{copy}'s own finish refused on {row:?} at {now}"
                        );
                    }
                }
            }
        }
    }
}

//! Which slot a run belongs to.
//!
//! The rule: the slot of a run without `--slot` is the latest elapse of the job's
//! `OnCalendar=` expression at or before the shim's own `CLOCK_REALTIME` reading when it
//! starts (`now`), as [`crate::calendar::Schedule::previous_elapse`] finds it (the
//! elapses systemd's timer iterates through; see [`crate::calendar`]). The timer's fire
//! time, `TRIGGER_TIMER_REALTIME_USEC` (systemd.exec(5): set for timer-started services,
//! "best effort"), never picks the slot: systemd 252 gives every later firing of a timer
//! the first firing's value until the next boot or daemon-reload. It only tells the
//! trigger (`timer` when set, else `manual`).
//!
//! Why `now` is right: a timer fires a service at most `RandomizedDelaySec=` +
//! `AccuracySec=` (1 s in the shipped `jobguard@.timer`) after the elapse, so as long as
//! that is shorter than the shortest interval between two elapses, the firing lands
//! before the next elapse and `now` still lies in the slot that fired. The job list
//! refuses jobs where it is not ([`crate::calendar::Schedule::interval_at_most`],
//! checked by [`crate::joblist::config`]).
//!
//! A service that starts later still (a loaded host) takes the newer slot; the older one
//! is then a slot that never ran, which the next run reports as a gap (`gap` event). A
//! `Persistent=` catch-up at boot runs once and takes the latest elapse at or before
//! now, as systemd itself fires a missed timer once; the slots of the downtime before it
//! are in the same gap report.
//!
//! `--slot TIME` names the slot instead; it must be an elapse. A local time in the
//! repeated hour of a fall-back names two instants: the one that is an elapse is the
//! slot (systemd's timers fire at most one of them); if both were, the run is refused
//! with both named.

use jiff::Timestamp;

use crate::calendar::{self, Schedule};
use crate::guard::ledger::Slot;
use crate::joblist::job::Job;

/// The slot of a run and what triggered it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Current {
    /// The slot.
    pub slot: Slot,
    /// `timer` when started by the job's timer, else `manual`.
    pub trigger: &'static str,
}

/// Why no slot could be found.
#[derive(Debug, thiserror::Error)]
pub enum SlotError {
    /// `--slot` could not be parsed.
    #[error("bad --slot: {0}")]
    Parse(#[from] calendar::TimestampError),
    /// `--slot` is not an elapse of the schedule.
    #[error(
        "--slot {given} is not an elapse of schedule {schedule:?}; the slot at or before it is {previous}"
    )]
    NotAnElapse {
        /// As given.
        given: String,
        /// The job's schedule.
        schedule: String,
        /// The previous elapse, RFC 3339, or "none".
        previous: String,
    },
    /// `--slot` is a local time of a fall-back's repeated hour, and both instants it
    /// names are elapses.
    #[error(
        "--slot {given} names two instants, {first} and {second}, both elapses of schedule {schedule:?}; give it in UTC"
    )]
    Ambiguous {
        /// As given.
        given: String,
        /// The job's schedule.
        schedule: String,
        /// The earlier instant, RFC 3339.
        first: String,
        /// The later instant, RFC 3339.
        second: String,
    },
    /// The schedule has no elapse at or before the moment.
    #[error("schedule {schedule:?} has no elapse at or before {at}")]
    NoElapse {
        /// The job's schedule.
        schedule: String,
        /// The moment, RFC 3339.
        at: String,
    },
}

/// The moment the timer fired, from `TRIGGER_TIMER_REALTIME_USEC` (µs since the epoch):
/// only a sign that a timer started the run, since systemd 252 gives later firings the
/// first firing's value.
pub fn timer_fire_time() -> Option<i64> {
    std::env::var("TRIGGER_TIMER_REALTIME_USEC")
        .ok()?
        .trim()
        .parse()
        .ok()
        .filter(|v| *v > 0)
}

/// The slot for `jobguard run`: `--slot` if given (it must be an elapse; a local time of
/// a fall-back's repeated hour means the instant that is one), else the latest elapse at
/// or before `now_usec` (µs since the epoch, the shim's clock at start), whether the
/// timer started the run or not.
///
/// # Errors
/// [`SlotError`] when `--slot` is bad or there is no elapse.
pub fn for_request(job: &Job, given: Option<&str>, now_usec: i64) -> Result<Current, SlotError> {
    let zone = job.calendar.zone_name();
    let now = Timestamp::from_microsecond(now_usec).unwrap_or(Timestamp::UNIX_EPOCH);
    if let Some(text) = given {
        let at = calendar::parse_timestamp(text, now)?;
        // A local time in the repeated hour of a fall-back names two instants; systemd's
        // timer fires at most one of them.
        let twin = calendar::wall_clock_zone(text, &calendar::local_zone())
            .and_then(|tz| calendar::fold_twin(&tz, at));
        let is_elapse = |t: Timestamp| job.calendar.previous_elapse(t) == Some(t);
        let elapses: Vec<Timestamp> = std::iter::once(at)
            .chain(twin)
            .filter(|&t| is_elapse(t))
            .collect();
        let slot = match elapses[..] {
            [one] => one,
            [a, b] => {
                return Err(SlotError::Ambiguous {
                    given: text.to_string(),
                    schedule: job.schedule.clone(),
                    first: crate::guard::ledger::format_usec(
                        a.as_microsecond().min(b.as_microsecond()),
                    ),
                    second: crate::guard::ledger::format_usec(
                        a.as_microsecond().max(b.as_microsecond()),
                    ),
                });
            }
            _ => {
                let prev = job.calendar.previous_elapse(at);
                return Err(SlotError::NotAnElapse {
                    given: text.to_string(),
                    schedule: job.schedule.clone(),
                    previous: prev
                        .map(|p| crate::guard::ledger::format_usec(p.as_microsecond()))
                        .unwrap_or_else(|| "none".into()),
                });
            }
        };
        return Ok(Current {
            slot: Slot {
                usec: slot.as_microsecond(),
                zone,
            },
            trigger: "manual",
        });
    }
    // The fire time only tells how the run was started: systemd 252 keeps giving later
    // firings of a timer the first firing's value, so it never picks the slot.
    let trigger = if timer_fire_time().is_some() {
        "timer"
    } else {
        "manual"
    };
    match job.calendar.previous_elapse(now) {
        Some(p) => Ok(Current {
            slot: Slot {
                usec: p.as_microsecond(),
                zone,
            },
            trigger,
        }),
        None => Err(SlotError::NoElapse {
            schedule: job.schedule.clone(),
            at: crate::guard::ledger::format_usec(now_usec),
        }),
    }
}

/// The elapses after `after_usec` and at or before `upto_usec` (µs since the epoch), oldest
/// first, leaving out those in a pause window ([`crate::ops::pause::Pauses`]): the newest
/// `limit` of them, and whether older ones were left out. Walks backward from
/// `upto_usec`, over a window in one step, so the cost is `limit` steps (and one per
/// window) however long the gap.
pub fn elapses_up_to(
    cal: &Schedule,
    after_usec: i64,
    upto_usec: i64,
    limit: usize,
    paused: &crate::ops::pause::Pauses,
) -> (Vec<i64>, bool) {
    let mut out = Vec::new();
    let mut at = upto_usec;
    while let Some(p) = Timestamp::from_microsecond(at)
        .ok()
        .and_then(|t| cal.previous_elapse(t))
        .map(|p| p.as_microsecond())
    {
        if p <= after_usec {
            break;
        }
        if let Some(w) = paused.covering(p) {
            at = w.since - 1;
            continue;
        }
        if out.len() == limit {
            out.reverse();
            return (out, true);
        }
        out.push(p);
        at = p - 1;
    }
    out.reverse();
    (out, false)
}

/// Elapses strictly between `after_usec` and `before_usec` (µs since the epoch), at most
/// `max` of them: the slots that never ran in a gap.
pub fn elapses_between(cal: &Schedule, after_usec: i64, before_usec: i64, max: usize) -> Vec<i64> {
    let mut out = Vec::new();
    let Ok(mut t) = Timestamp::from_microsecond(after_usec) else {
        return out;
    };
    while out.len() < max {
        match cal.next_elapse(t) {
            Some(n) if n.as_microsecond() < before_usec => {
                out.push(n.as_microsecond());
                t = n;
            }
            _ => break,
        }
    }
    out
}

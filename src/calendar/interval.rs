//! The shortest time between two consecutive elapses of a calendar event, as far as the
//! job list needs it: is any interval `limit` µs or shorter?
//!
//! Walking every elapse for two years costs milliseconds per hourly job, too much for a
//! generator with a thousand jobs. So the answer comes in three steps, each exact or a
//! proven bound:
//! 1. A lower bound on the wall-clock distance between any two distinct times the fields
//!    match ([`wall_gap_usec`]): two times in the same minute are at least the smallest
//!    step of the seconds apart, two in different minutes of one hour at least the
//!    smallest step of the minutes less the spread of the seconds, and so on up to two
//!    different days.
//! 2. Between two elapses in UTC the distance is the wall-clock one less the change of
//!    the zone's offset in between. Without an offset change it is at least the bound;
//!    so if the bound less the largest offset change in the window is above the limit,
//!    no interval is at or below it; if the bound alone is, only the pair of elapses
//!    around each offset change (from the zone's transitions) whose first one is within
//!    the limit before it needs looking at.
//! 3. Otherwise, and for expressions that force the DST flag, the elapses are walked.
//!
//! The window is bounded: [`super::INTERVAL_SCAN_ELAPSES`] elapses or
//! [`super::INTERVAL_SCAN_USEC`] from the first, whichever ends first.

use super::elapse::next_usec;
use super::spec::{Chain, Spec};
use super::tm::{LibcState, Zone};
use super::{INTERVAL_SCAN_ELAPSES, INTERVAL_SCAN_USEC, Interval};

const USEC_MINUTE: i64 = 60_000_000;
const USEC_HOUR: i64 = 3_600_000_000;
const USEC_DAY: i64 = 86_400_000_000;
/// Beyond this many values a field is taken as "every value" (a lower bound).
const MAX_VALUES: usize = 10_000;

/// (smallest step between two distinct values or `None` for one value, lowest, highest)
/// of the values `chain` matches in `0..=max`.
fn field(chain: &Chain, max: i64) -> (Option<i64>, i64, i64) {
    if chain.is_empty() {
        return (Some(1), 0, max);
    }
    let mut values = Vec::new();
    for c in chain {
        let start = i64::from(c.start);
        let repeat = i64::from(c.repeat);
        let stop = if c.stop >= 0 { i64::from(c.stop) } else { max };
        if start > max {
            continue;
        }
        if repeat <= 0 {
            values.push(start);
            continue;
        }
        if (stop - start) / repeat > MAX_VALUES as i64 {
            // Too many to list: every value is a lower bound on the step.
            return (Some(1), 0, max);
        }
        let mut v = start;
        while v <= stop.min(max) {
            values.push(v);
            v += repeat;
        }
    }
    values.sort_unstable();
    values.dedup();
    let step = values.windows(2).map(|w| w[1] - w[0]).min();
    match (values.first(), values.last()) {
        (Some(&lo), Some(&hi)) => (step, lo, hi),
        _ => (None, 0, 0),
    }
}

/// A lower bound, in µs, on the wall-clock distance between two distinct broken-down
/// times that match `spec`'s fields (the date fields are only taken as "another day").
pub(crate) fn wall_gap_usec(spec: &Spec) -> i64 {
    let (s_step, s_lo, s_hi) = field(&spec.usec, 59_999_999);
    let (m_step, m_lo, m_hi) = field(&spec.minute, 59);
    let (h_step, h_lo, h_hi) = field(&spec.hour, 23);
    let s_spread = s_hi - s_lo;
    let m_spread = (m_hi - m_lo) * USEC_MINUTE;
    let h_spread = (h_hi - h_lo) * USEC_HOUR;
    let mut bound = USEC_DAY - h_spread - m_spread - s_spread;
    if let Some(s) = s_step {
        bound = bound.min(s);
    }
    if let Some(m) = m_step {
        bound = bound.min(m * USEC_MINUTE - s_spread);
    }
    if let Some(h) = h_step {
        bound = bound.min(h * USEC_HOUR - m_spread - s_spread);
    }
    bound.max(1)
}

/// The largest difference between two UTC offsets of `zone` in `[from, to]` (µs since
/// the epoch), in µs, and the instants (µs) at which the offset changes in that window.
fn offset_changes(zone: &Zone, from: i64, to: i64) -> (i64, Vec<i64>) {
    let Zone::Local(tz) = zone else {
        return (0, Vec::new());
    };
    let Ok(start) = jiff::Timestamp::from_microsecond(from) else {
        return (0, Vec::new());
    };
    let first = i64::from(tz.to_offset(start).seconds());
    let (mut lo, mut hi) = (first, first);
    let mut at = Vec::new();
    for t in tz.following(start) {
        let us = t.timestamp().as_microsecond();
        // A zone whose transitions do not advance (jiff reads a `right/` zone's leap-second
        // records so) would otherwise be walked for ever.
        if us > to || at.last().is_some_and(|&last| us <= last) {
            break;
        }
        let off = i64::from(t.offset().seconds());
        lo = lo.min(off);
        hi = hi.max(off);
        at.push(us);
    }
    ((hi - lo) * 1_000_000, at)
}

/// Two consecutive elapses after `from` (µs since the epoch) at most `limit` µs apart,
/// within the window of [`super::CalendarSpec::interval_at_most`], or `None`.
pub(crate) fn interval_at_most(
    spec: &Spec,
    zone: &Zone,
    from: i64,
    limit: i64,
) -> Option<Interval> {
    let mut st = LibcState::default();
    let first = next_usec(spec, zone, from, &mut st).ok()?;
    let end = first.saturating_add(INTERVAL_SCAN_USEC);
    if spec.dst < 0 {
        let wall = wall_gap_usec(spec);
        if wall > limit {
            let (shift, changes) = offset_changes(zone, first, end);
            if wall - shift > limit {
                return None;
            }
            // Only a pair of elapses around an offset change can be closer than `wall`,
            // and only if its first one is within `limit` before the change.
            for t in changes {
                let mut st = LibcState::default();
                let Ok(mut a) = next_usec(spec, zone, t - limit - 1, &mut st) else {
                    continue;
                };
                if a >= t {
                    continue;
                }
                while let Ok(b) = next_usec(spec, zone, a, &mut st) {
                    if b >= t {
                        if b - a <= limit {
                            return Some(Interval {
                                usec: b - a,
                                from_usec: a,
                                to_usec: b,
                            });
                        }
                        break;
                    }
                    a = b;
                }
            }
            return None;
        }
    }
    let mut prev = first;
    for _ in 1..INTERVAL_SCAN_ELAPSES {
        let Ok(n) = next_usec(spec, zone, prev, &mut st) else {
            break;
        };
        if n - prev <= limit {
            return Some(Interval {
                usec: n - prev,
                from_usec: prev,
                to_usec: n,
            });
        }
        if n > end {
            break;
        }
        prev = n;
    }
    None
}

#[cfg(test)]
mod tests {
    use crate::calendar::CalendarSpec;
    use jiff::Timestamp;
    use jiff::tz::TimeZone;

    /// A `right/` zone (leap-second records) is walked to its end, not for ever. The job
    /// list refuses such a zone; `jobguard calendar` still shows it.
    #[test]
    fn a_zone_with_leap_second_records_ends_the_search() {
        if !std::path::Path::new("/usr/share/zoneinfo/right/Europe/Berlin").exists() {
            return;
        }
        let from: Timestamp = "2026-06-01T00:00:00Z".parse().expect("valid");
        let c = CalendarSpec::parse("*-*-* 02:00:00 right/Europe/Berlin").expect("parses");
        assert_eq!(c.interval_at_most(1_000_000, from), None);
    }

    /// The shortest interval is found exactly: at the limit, and not one µs below it.
    #[test]
    fn shortest_intervals_with_and_without_dst() {
        let from: Timestamp = "2026-06-01T00:00:00Z".parse().expect("valid");
        let h = 3_600_000_000i64;
        let m = 60_000_000i64;
        for (expr, shortest) in [
            ("hourly Europe/Berlin", h),
            // 01:30 to 03:30 is an hour when clocks spring forward.
            ("*-*-* 01,03:30 Europe/Berlin", h),
            ("daily Europe/Berlin", 23 * h),
            ("daily UTC", 24 * h),
            ("*:0/7 UTC", 4 * m),
            ("*-*-1 00,23:00 UTC", 23 * h),
            // A 30-minute shift.
            ("*-*-* 01:45 Australia/Lord_Howe", 23 * h + 30 * m),
            ("*-*-* *:*:0/2 America/Santiago", 2_000_000),
            ("Mon 09:00 America/New_York", 167 * h),
            ("*-*-* 02:00/15:00 Europe/Dublin", 15 * m),
        ] {
            let spec = CalendarSpec::parse_in(expr, TimeZone::UTC).expect("valid");
            let at = spec.interval_at_most(shortest, from);
            assert_eq!(at.map(|i| i.usec), Some(shortest), "{expr}");
            assert_eq!(spec.interval_at_most(shortest - 1, from), None, "{expr}");
        }
    }
}

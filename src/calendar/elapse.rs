//! Next and previous elapses of a parsed calendar event.
//!
//! The next elapse is computed as systemd 252's `calendar_spec_next_usec()` computes it
//! (`find_next()` in calendarspec.c): start from the broken-down local time just after
//! the base, and for each field from year to second move to the earliest matching
//! value, letting `mktime` normalize after every step and restarting whenever the
//! normalization moved a field. Every `mktime` goes through [`Zone::mktime`], which
//! reproduces glibc's, so daylight-saving gaps and folds come out as systemd's do.
//!
//! The previous elapse (systemd has none) is found by searching backwards with growing
//! windows and bisecting with the next-elapse function, so it is, by construction, an
//! elapse the next-elapse function produces; in the second pass of a fall-back fold it
//! is then re-derived by following the next-elapse function from the fold's first pass,
//! so that it is one a timer actually reaches.

use super::spec::{BITS_WEEKDAYS, Chain, MAX_YEAR, Spec, USEC_PER_SEC};
use super::tm::{LibcState, Tm, Zone};

/// Why no next elapse was computed (systemd's error codes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NextError {
    /// `-ENOENT`: the expression does not elapse again.
    NotFound,
    /// `-EDEADLK`: the search did not settle in 1000 rounds.
    Loop,
    /// `-EINVAL`: the base is beyond year 9999 or the result is before 1970.
    Invalid,
}

/// Largest microsecond timestamp systemd formats (9999-12-30 23:59:59.999999 UTC).
pub(crate) const USEC_TIMESTAMP_FORMATTABLE_MAX: i64 = 253_402_214_399_999_999;

const MAX_ITERATIONS: u32 = 1000;

/// One evaluation: the spec, its zone and glibc's `mktime` offset state.
struct Eval<'a> {
    spec: &'a Spec,
    zone: &'a Zone,
    st: LibcState,
}

impl Eval<'_> {
    /// `mktime_or_timegm()`: `None` is glibc's -1 (and `tm` unchanged).
    fn mktime(&mut self, tm: &mut Tm) -> Option<i64> {
        self.zone.mktime(tm, &mut self.st)
    }

    /// `find_end_of_month()`: the day of month that is `day` days from the end of
    /// `tm`'s month (1 = the last day), or -1.
    fn end_of_month(&mut self, tm: &Tm, day: i32) -> i64 {
        let mut t = *tm;
        t.mon += 1;
        t.mday = 1 - i64::from(day);
        match self.mktime(&mut t) {
            Some(x) if x >= 0 && t.mon == tm.mon => t.mday,
            _ => -1,
        }
    }

    /// `find_matching_component()`: moves `*val` to the earliest value of `chain` at or
    /// after it. `Ok(true)` if it changed, `Err(())` if there is none.
    fn matching(
        &mut self,
        chain: &Chain,
        is_day: bool,
        tm: &Tm,
        val: &mut i64,
    ) -> Result<bool, ()> {
        if chain.is_empty() {
            return Ok(false);
        }
        let end_of_month = self.spec.end_of_month && is_day;
        let mut d: Option<i64> = None;
        for c in chain {
            let (mut start, mut stop) = (i64::from(c.start), i64::from(c.stop));
            if end_of_month {
                start = self.end_of_month(tm, c.start);
                stop = self.end_of_month(tm, c.stop);
                if stop > 0 {
                    std::mem::swap(&mut start, &mut stop);
                }
            }
            let repeat = i64::from(c.repeat);
            if start >= *val {
                if d.is_none_or(|d| start < d) {
                    d = Some(start);
                }
            } else if repeat > 0 {
                let k = start + repeat * (*val - start + repeat - 1).div_euclid(repeat);
                if d.is_none_or(|d| k < d) && (stop < 0 || k <= stop) {
                    d = Some(k);
                }
            }
        }
        let d = d.ok_or(())?;
        let changed = *val != d;
        *val = d;
        Ok(changed)
    }

    /// `tm_within_bounds()`: `Ok(true)` if `tm` needed no normalization, `Ok(false)`
    /// if it did (and `tm` now holds the normalized time with the lower fields reset),
    /// `Err(())` if it is out of range or normalization went backwards.
    fn within_bounds(&mut self, tm: &mut Tm) -> Result<bool, ()> {
        if tm.year + 1900 > i64::from(MAX_YEAR) {
            return Err(());
        }
        let mut t = *tm;
        match self.mktime(&mut t) {
            Some(x) if x >= 0 => {}
            _ => return Err(()),
        }
        let cmp;
        if t.year != tm.year {
            cmp = t.year.cmp(&tm.year);
            t.mon = 0;
        } else if t.mon != tm.mon {
            cmp = t.mon.cmp(&tm.mon);
            t.mday = 1;
        } else if t.mday != tm.mday {
            cmp = t.mday.cmp(&tm.mday);
            t.hour = 0;
        } else if t.hour != tm.hour {
            cmp = t.hour.cmp(&tm.hour);
            t.min = 0;
        } else if t.min != tm.min {
            cmp = t.min.cmp(&tm.min);
            t.sec = 0;
        } else {
            cmp = t.sec.cmp(&tm.sec);
        }
        match cmp {
            std::cmp::Ordering::Less => Err(()),
            std::cmp::Ordering::Greater => {
                *tm = t;
                Ok(false)
            }
            std::cmp::Ordering::Equal => Ok(true),
        }
    }

    /// `matches_weekday()`.
    fn matches_weekday(&mut self, tm: &Tm) -> bool {
        let bits = self.spec.weekdays;
        if !(0..BITS_WEEKDAYS).contains(&bits) {
            return true;
        }
        let mut t = *tm;
        match self.mktime(&mut t) {
            Some(x) if x >= 0 => {}
            _ => return false,
        }
        let k = if t.wday == 0 { 6 } else { t.wday - 1 };
        bits & (1 << k) != 0
    }

    /// `find_next()`: the first matching broken-down time at or after `tm` + `usec`.
    fn find_next(&mut self, tm: &Tm, usec: i64) -> Result<(Tm, i64), NextError> {
        let spec = self.spec;
        let mut c = *tm;
        let mut tm_usec = usec;

        fn reset_from_hour(c: &mut Tm, u: &mut i64) {
            c.hour = 0;
            c.min = 0;
            c.sec = 0;
            *u = 0;
        }

        // Once a candidate fell before the start (a fall-back fold), the DST flag that
        // mktime() found is kept instead of being reset to the expression's.
        let mut keep_isdst = false;
        for _ in 0..MAX_ITERATIONS {
            let _ = self.mktime(&mut c);
            if !keep_isdst {
                c.isdst = i64::from(spec.dst);
            }

            c.year += 1900;
            let mut year = c.year;
            let r = self.matching(&spec.year, false, &c, &mut year);
            c.year = year - 1900;
            match r {
                Ok(true) => {
                    c.mon = 0;
                    c.mday = 1;
                    reset_from_hour(&mut c, &mut tm_usec);
                }
                Ok(false) => {}
                Err(()) => return Err(NextError::NotFound),
            }
            if !matches!(self.within_bounds(&mut c), Ok(true)) {
                return Err(NextError::NotFound);
            }

            c.mon += 1;
            let mut mon = c.mon;
            let r = self.matching(&spec.month, false, &c, &mut mon);
            c.mon = mon - 1;
            if r == Ok(true) {
                c.mday = 1;
                reset_from_hour(&mut c, &mut tm_usec);
            }
            let b = if r.is_err() {
                Err(())
            } else {
                self.within_bounds(&mut c)
            };
            match b {
                Err(()) => {
                    c.year += 1;
                    c.mon = 0;
                    c.mday = 1;
                    reset_from_hour(&mut c, &mut tm_usec);
                    continue;
                }
                Ok(false) => continue,
                Ok(true) => {}
            }

            let mut mday = c.mday;
            let r = self.matching(&spec.day, true, &c, &mut mday);
            c.mday = mday;
            if r == Ok(true) {
                reset_from_hour(&mut c, &mut tm_usec);
            }
            let b = if r.is_err() {
                Err(())
            } else {
                self.within_bounds(&mut c)
            };
            match b {
                Err(()) => {
                    c.mon += 1;
                    c.mday = 1;
                    reset_from_hour(&mut c, &mut tm_usec);
                    continue;
                }
                Ok(false) => continue,
                Ok(true) => {}
            }

            if !self.matches_weekday(&c) {
                c.mday += 1;
                reset_from_hour(&mut c, &mut tm_usec);
                continue;
            }

            let mut hour = c.hour;
            let r = self.matching(&spec.hour, false, &c, &mut hour);
            c.hour = hour;
            if r == Ok(true) {
                c.min = 0;
                c.sec = 0;
                tm_usec = 0;
            }
            let b = if r.is_err() {
                Err(())
            } else {
                self.within_bounds(&mut c)
            };
            match b {
                Err(()) => {
                    c.mday += 1;
                    reset_from_hour(&mut c, &mut tm_usec);
                    continue;
                }
                Ok(false) => continue,
                Ok(true) => {}
            }

            let mut min = c.min;
            let r = self.matching(&spec.minute, false, &c, &mut min);
            c.min = min;
            if r == Ok(true) {
                c.sec = 0;
                tm_usec = 0;
            }
            let b = if r.is_err() {
                Err(())
            } else {
                self.within_bounds(&mut c)
            };
            match b {
                Err(()) => {
                    c.hour += 1;
                    c.min = 0;
                    c.sec = 0;
                    tm_usec = 0;
                    continue;
                }
                Ok(false) => continue,
                Ok(true) => {}
            }

            let us = i64::from(USEC_PER_SEC);
            let mut sec = c.sec * us + tm_usec;
            let r = self.matching(&spec.usec, false, &c, &mut sec);
            tm_usec = sec % us;
            c.sec = sec / us;
            let b = if r.is_err() {
                Err(())
            } else {
                self.within_bounds(&mut c)
            };
            match b {
                Err(()) => {
                    c.min += 1;
                    c.sec = 0;
                    tm_usec = 0;
                    continue;
                }
                Ok(false) => continue,
                Ok(true) => {}
            }

            // Debian's systemd 252 (252.39) refuses a candidate whose local fields are
            // before the start's, as after a fall-back: it tries one hour later.
            let cand = (c.year, c.mon, c.mday, c.hour, c.min, c.sec, tm_usec);
            let start = (tm.year, tm.mon, tm.mday, tm.hour, tm.min, tm.sec, usec);
            if cand < start {
                c.hour += 1;
                keep_isdst = true;
                continue;
            }
            return Ok((c, tm_usec));
        }
        Err(NextError::Loop)
    }
}

/// `calendar_spec_next_usec()`: the first elapse strictly after `usec` (µs since the
/// epoch, UTC), evaluated in `zone`.
///
/// `st` is the emulated C library state carried over from earlier calls in the process
/// (see [`LibcState`]); it only matters in rare daylight-saving corner cases.
pub(crate) fn next_usec(
    spec: &Spec,
    zone: &Zone,
    usec: i64,
    st: &mut LibcState,
) -> Result<i64, NextError> {
    if usec > USEC_TIMESTAMP_FORMATTABLE_MAX {
        return Err(NextError::Invalid);
    }
    let usec = usec + 1;
    let us = i64::from(USEC_PER_SEC);
    let t = usec.div_euclid(us);
    let tm = zone.localtime(t).ok_or(NextError::Invalid)?;
    if matches!(zone, Zone::Local(_)) {
        st.last_local = Some(t);
    }
    let mut ev = Eval {
        spec,
        zone,
        st: *st,
    };
    let found = ev.find_next(&tm, usec.rem_euclid(us));
    *st = ev.st;
    let (mut tm, tm_usec) = found?;
    let r = ev.mktime(&mut tm);
    *st = ev.st;
    match r {
        Some(t) if t >= 0 => Ok(t * us + tm_usec),
        _ => Err(NextError::Invalid),
    }
}

/// The latest elapse at or before `at` (µs since the epoch) that a timer reaches: the
/// last element at or before `at` of the orbit `next_usec` walks from any point well
/// before (systemd's timers compute each elapse from the previous one), or `None` if
/// nothing elapses at or before `at`.
///
/// The candidate is the latest `p <= at` with `next_usec(p - 1) == p`. Outside a
/// fall-back fold that is an orbit element, because there `next_usec` never jumps over
/// a candidate. Inside a fold, the first pass (the earlier offset) is reached as usual;
/// in the second pass, the orbit comes from the last elapse of the first pass (or
/// earlier), whose successor skips every local time up to its own (systemd 252.39
/// refuses a candidate whose local time is before the start's), so the second-pass
/// candidates it skipped are not elapses. There the orbit is followed from that
/// elapse instead.
pub(crate) fn previous_usec(spec: &Spec, zone: &Zone, at: i64) -> Option<i64> {
    let c = candidate_usec(spec, zone, at)?;
    let Some((t, d)) = second_pass(zone, c) else {
        return Some(c);
    };
    let next = |x: i64| next_usec(spec, zone, x, &mut LibcState::default()).ok();
    // Where the orbit stands when the fold's repeated hour begins again (`t`): at the
    // last elapse before `t`, or, with none, about to take the first one after the
    // unambiguous local time just before the fold.
    let mut e = match previous_usec(spec, zone, t - 1) {
        Some(l) => l,
        None => match next(t - d - 1) {
            Some(first) if first <= at => first,
            _ => return None,
        },
    };
    // Follow the orbit up to `at`: it rejoins the candidates by the end of the fold.
    for _ in 0..MAX_ORBIT_STEPS {
        match next(e) {
            Some(n) if n <= at => e = n,
            _ => return Some(e),
        }
    }
    Some(c)
}

/// Most elapses [`previous_usec`] follows through a fold (a fold lasts at most a few
/// hours; an every-second schedule has 3600 elapses in one).
const MAX_ORBIT_STEPS: u32 = 100_000;

/// If `usec` lies in the second pass of a fall-back fold of `zone` (its local time
/// also happened before, at the previous, larger offset): the change's instant and
/// the fold's length, both µs.
fn second_pass(zone: &Zone, usec: i64) -> Option<(i64, i64)> {
    let Zone::Local(tz) = zone else {
        return None;
    };
    let ts = jiff::Timestamp::from_microsecond(usec.checked_add(1)?).ok()?;
    let tr = tz.preceding(ts).next()?;
    let t = tr.timestamp();
    let before = tz.to_offset(t.checked_sub(jiff::SignedDuration::from_secs(1)).ok()?);
    let d = i64::from(before.seconds() - tr.offset().seconds()) * 1_000_000;
    let t = t.as_microsecond();
    (d > 0 && usec < t + d).then_some((t, d))
}

/// The latest elapse candidate at or before `at` (µs since the epoch): the `p` with
/// `next_usec(p - 1) == p` and `next_usec(p) > at`, or `None` if nothing elapses at or
/// before `at`.
fn candidate_usec(spec: &Spec, zone: &Zone, at: i64) -> Option<i64> {
    let next = |x: i64| next_usec(spec, zone, x, &mut LibcState::default()).ok();
    // systemd's times are unsigned: its searches start at the epoch at the earliest,
    // so the first elapse it can produce is after 1970-01-01 00:00:00 UTC.
    let floor = 0;
    if at < 0 {
        return None;
    }
    // Find `lo` with an elapse in (lo, at], growing the window backwards.
    let mut window: i64 = 60 * 1_000_000;
    let (mut lo, mut e) = loop {
        let lo = (at - window).max(floor);
        match next(lo) {
            Some(e) if e <= at => break (lo, e),
            _ if lo == floor => return None,
            _ => window = window.saturating_mul(8),
        }
    };
    // Walk forward a few elapses: usually reaches the last one at once.
    for _ in 0..16 {
        match next(e) {
            Some(n) if n <= at => {
                lo = e;
                e = n;
            }
            _ => return Some(e),
        }
    }
    // Dense schedule: bisect for the last `lo` whose next elapse is still <= at.
    // Invariant: next(lo) <= at < next(hi) (or none).
    let mut hi = at;
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        match next(mid) {
            Some(n) if n <= at => lo = mid,
            _ => hi = mid,
        }
    }
    next(lo).filter(|&n| n <= at)
}

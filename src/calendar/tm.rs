//! Broken-down time and the two C library conversions systemd's calendar code is built
//! on: `localtime_r`/`gmtime_r` and `mktime`/`timegm`.
//!
//! systemd computes elapses by editing a `struct tm` and letting glibc's `mktime`
//! normalize it, so its results on daylight-saving gaps and folds are whatever glibc's
//! `mktime` does there. This module reproduces that algorithm (glibc 2.36,
//! `time/mktime.c`: probe with the offset of the previous call, follow the error,
//! stop on an oscillation across a spring-forward gap preferring the DST side, and
//! search neighbouring instants when a requested `tm_isdst` does not match) on top of
//! jiff's time zone data. What glibc keeps in process-wide statics (the offset the
//! previous `mktime` found, and which local time was converted last, which decides
//! `tzname[]`) is explicit state here: [`LibcState`].
//! Times are whole seconds since the Unix epoch, as `time_t`.

use jiff::Timestamp;
use jiff::tz::TimeZone;

/// A `struct tm`: fields as glibc keeps them (`year` counts from 1900, `mon` from 0,
/// `wday` from Sunday = 0); `isdst` is -1 (unknown), 0 or 1. Fields may be out of
/// range before normalization, as in C.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Tm {
    pub sec: i64,
    pub min: i64,
    pub hour: i64,
    pub mday: i64,
    pub mon: i64,
    pub year: i64,
    pub wday: i64,
    pub yday: i64,
    pub isdst: i64,
}

/// The C library's process state that calendar arithmetic depends on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct LibcState {
    /// glibc's `localtime_offset`: the guess the next `mktime` starts from (seconds).
    pub offset: i64,
    /// The last instant converted to local time in the local zone (sets `tzname[]`).
    pub last_local: Option<i64>,
}

/// The zone a conversion happens in: UTC through `gmtime`/`timegm`, or a tzdb zone
/// through `localtime`/`mktime`.
#[derive(Debug, Clone)]
pub(crate) enum Zone {
    /// `gmtime_r` and `timegm`.
    Utc,
    /// `localtime_r` and `mktime` with `TZ` naming this zone.
    Local(TimeZone),
}

const SECS_PER_DAY: i64 = 86_400;

/// Days before each month, for normal and leap years (glibc's `__mon_yday`).
const MON_YDAY: [[i64; 13]; 2] = [
    [0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334, 365],
    [0, 31, 60, 91, 121, 152, 182, 213, 244, 274, 305, 335, 366],
];

/// Whether `year` (counted from 1900, as in `tm_year`) is a Gregorian leap year.
fn leapyear(year: i64) -> bool {
    let y = year + 1900;
    y % 4 == 0 && (y % 100 != 0 || y % 400 == 0)
}

/// Days from 1970-01-01 to the given proleptic Gregorian date (month 1..=12).
pub(crate) fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The proleptic Gregorian date (year, month 1..=12, day) of a day count from 1970-01-01.
pub(crate) fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// Broken-down fields of `local` seconds (UTC seconds plus the UTC offset).
fn breakdown(local: i64, isdst: bool) -> Tm {
    let days = local.div_euclid(SECS_PER_DAY);
    let rem = local.rem_euclid(SECS_PER_DAY);
    let (y, m, d) = civil_from_days(days);
    let year = y - 1900;
    Tm {
        sec: rem % 60,
        min: (rem / 60) % 60,
        hour: rem / 3600,
        mday: d,
        mon: m - 1,
        year,
        wday: (days + 4).rem_euclid(7),
        yday: MON_YDAY[usize::from(leapyear(year))][(m - 1) as usize] + d - 1,
        isdst: i64::from(isdst),
    }
}

/// Seconds between two broken-down times, each given as (year from 1900, day of year,
/// hour, minute, second) with any field out of range (glibc's `ydhms_diff`).
#[allow(clippy::too_many_arguments)]
fn ydhms_diff(
    year1: i64,
    yday1: i64,
    hour1: i64,
    min1: i64,
    sec1: i64,
    year0: i64,
    yday0: i64,
    hour0: i64,
    min0: i64,
    sec0: i64,
) -> i64 {
    let a4 = (year1 >> 2) + (1900 >> 2) - i64::from(year1 & 3 == 0);
    let b4 = (year0 >> 2) + (1900 >> 2) - i64::from(year0 & 3 == 0);
    let a100 = a4.div_euclid(25);
    let b100 = b4.div_euclid(25);
    let a400 = a100 >> 2;
    let b400 = b100 >> 2;
    let leap_days = (a4 - b4) - (a100 - b100) + (a400 - b400);
    let days = 365 * (year1 - year0) + yday1 - yday0 + leap_days;
    let hours = 24 * days + hour1 - hour0;
    let minutes = 60 * hours + min1 - min0;
    60 * minutes + sec1 - sec0
}

/// Whether two `tm_isdst` values differ: one zero and the other positive.
fn isdst_differ(a: i64, b: i64) -> bool {
    (a == 0) != (b == 0) && a >= 0 && b >= 0
}

impl Zone {
    /// `localtime_r` (or `gmtime_r` for UTC) of `t` seconds; `None` outside jiff's
    /// range (years -9999..=9999).
    pub(crate) fn localtime(&self, t: i64) -> Option<Tm> {
        match self {
            Zone::Utc => Some(breakdown(t, false)),
            Zone::Local(tz) => {
                let ts = Timestamp::from_second(t).ok()?;
                let info = tz.to_offset_info(ts);
                let off = i64::from(info.offset().seconds());
                Some(breakdown(t + off, info.dst().is_dst()))
            }
        }
    }

    /// The time zone abbreviation `localtime_r` puts in `tm_zone` for `t` seconds.
    pub(crate) fn abbreviation(&self, t: i64) -> String {
        match self {
            Zone::Utc => "UTC".to_string(),
            Zone::Local(tz) => match Timestamp::from_second(t) {
                Ok(ts) => tz.to_offset_info(ts).abbreviation().to_string(),
                Err(_) => String::new(),
            },
        }
    }

    /// `mktime` (or `timegm` for UTC): the seconds since the epoch of the local time in
    /// `tm`, normalizing `tm` in place on success as glibc does, or `None` (glibc's -1
    /// with `EOVERFLOW`), leaving `tm` untouched.
    ///
    /// `st.offset` is glibc's `localtime_offset`: the guess of the previous call, updated.
    pub(crate) fn mktime(&self, tp: &mut Tm, st: &mut LibcState) -> Option<i64> {
        let conv = |t: i64, st: &mut LibcState| {
            if matches!(self, Zone::Local(_)) {
                st.last_local = Some(t);
            }
            self.localtime(t)
        };
        if matches!(self, Zone::Utc) {
            // glibc's timegm() ignores the caller's tm_isdst.
            tp.isdst = 0;
        }
        let sec_requested = tp.sec;
        let min = tp.min;
        let hour = tp.hour;
        let mday = tp.mday;
        let mon = tp.mon;
        let isdst = tp.isdst;
        let mut dst2 = false;

        let mon_remainder = mon % 12;
        let negative_mon_remainder = mon_remainder < 0;
        let mon_years = mon / 12 - i64::from(negative_mon_remainder);
        let year = tp.year + mon_years;
        let idx = (mon_remainder + 12 * i64::from(negative_mon_remainder)) as usize;
        let mon_yday = MON_YDAY[usize::from(leapyear(year))][idx] - 1;
        let yday = mon_yday + mday;

        let off = st.offset;
        let sec = sec_requested.clamp(0, 59);

        let negative_offset_guess = -off;
        let t0 = ydhms_diff(
            year,
            yday,
            hour,
            min,
            sec,
            70,
            0,
            0,
            0,
            negative_offset_guess,
        );
        let (mut t, mut t1, mut t2) = (t0, t0, t0);
        let mut remaining_probes = 6;
        let mut tm;
        let mut matched = true;

        loop {
            tm = conv(t, st)?;
            let dt = ydhms_diff(
                year, yday, hour, min, sec, tm.year, tm.yday, tm.hour, tm.min, tm.sec,
            );
            if dt == 0 {
                break;
            }
            let tm_dst = tm.isdst != 0;
            if t == t1
                && t != t2
                && (tm.isdst < 0
                    || if isdst < 0 {
                        i64::from(dst2) <= i64::from(tm_dst)
                    } else {
                        (isdst != 0) != tm_dst
                    })
            {
                // Oscillating across a spring-forward gap: keep this probe.
                matched = false;
                break;
            }
            remaining_probes -= 1;
            if remaining_probes == 0 {
                return None;
            }
            t1 = t2;
            t2 = t;
            t += dt;
            dst2 = tm_dst;
        }

        if matched && isdst_differ(isdst, tm.isdst) {
            // The wanted tm_isdst differs: use the offset of a neighbouring instant
            // that has it, probing outwards a week at a time.
            let dst_difference = i64::from(isdst == 0) - i64::from(tm.isdst == 0);
            let stride: i64 = 601_200;
            let duration_max: i64 = 457_243_209;
            let delta_bound = duration_max / 2 + stride;
            let mut found = false;
            let mut delta = stride;
            'probe: while delta < delta_bound {
                for direction in [-1, 1] {
                    let ot = t + delta * direction;
                    let otm = conv(ot, st)?;
                    if !isdst_differ(isdst, otm.isdst) {
                        let gt = ot
                            + ydhms_diff(
                                year, yday, hour, min, sec, otm.year, otm.yday, otm.hour, otm.min,
                                otm.sec,
                            );
                        if let Some(g) = conv(gt, st) {
                            t = gt;
                            tm = g;
                            found = true;
                            break 'probe;
                        }
                    }
                }
                delta += stride;
            }
            if !found {
                t += 3600 * dst_difference;
                tm = conv(t, st)?;
            }
        }

        st.offset = (t - t0 - negative_offset_guess) as i32 as i64;

        if sec_requested != tm.sec {
            let mut adj = i64::from(sec == 0 && tm.sec == 60);
            adj -= sec;
            adj += sec_requested;
            t += adj;
            tm = conv(t, st)?;
        }
        *tp = tm;
        Some(t)
    }
}

/// glibc's `tzname[]`, `daylight` and `timezone` for a zone after `tzset()`: the
/// abbreviations and offsets of the latest standard and daylight-saving transitions of
/// its data (glibc's `__tzfile_read`). Returns (std name, dst name, has DST, -std offset).
pub(crate) fn tz_names(tz: &TimeZone) -> (String, String, bool, i64) {
    let mut std_name: Option<String> = None;
    let mut dst_name: Option<String> = None;
    let mut std_off: Option<i64> = None;
    let mut dst_off: Option<i64> = None;
    // Transitions of fat TZif files (Debian's) end in 2037; glibc reads only those.
    if let Ok(end) = Timestamp::from_second(2_147_483_647) {
        for tr in tz.preceding(end) {
            let off = i64::from(tr.offset().seconds());
            if tr.dst().is_dst() {
                if dst_name.is_none() {
                    dst_name = Some(tr.abbreviation().to_string());
                    dst_off = Some(off);
                }
            } else if std_name.is_none() {
                std_name = Some(tr.abbreviation().to_string());
                std_off = Some(off);
            }
            if std_name.is_some() && dst_name.is_some() {
                break;
            }
        }
    }
    let (name0, off0) = match std_name.zip(std_off) {
        Some(pair) => pair,
        None => {
            let info = tz.to_offset_info(Timestamp::UNIX_EPOCH);
            (
                info.abbreviation().to_string(),
                i64::from(info.offset().seconds()),
            )
        }
    };
    let name1 = dst_name.unwrap_or_else(|| name0.clone());
    let off1 = dst_off.unwrap_or(off0);
    (name0, name1, off0 != off1, -off0)
}

/// glibc's `tzname[]` after converting `t` to local time in `tz` (`__tzfile_compute`):
/// the abbreviation in force, and for the other flavour (standard or DST) the next one
/// the zone's data switches to; beyond the data, the zone's current rule names.
pub(crate) fn names_at(tz: &TimeZone, t: i64) -> (String, String) {
    const DATA_END: i64 = 2_147_483_647;
    if t >= DATA_END {
        let (n0, n1, _, _) = tz_names(tz);
        return (n0, n1);
    }
    let Ok(ts) = Timestamp::from_second(t) else {
        let (n0, n1, _, _) = tz_names(tz);
        return (n0, n1);
    };
    let info = tz.to_offset_info(ts);
    let mut names: [Option<String>; 2] = [None, None];
    names[usize::from(info.dst().is_dst())] = Some(info.abbreviation().to_string());
    for tr in tz.following(ts) {
        if tr.timestamp().as_second() >= DATA_END {
            break;
        }
        let d = usize::from(tr.dst().is_dst());
        if names[d].is_none() {
            names[d] = Some(tr.abbreviation().to_string());
            if names[1 - d].is_some() {
                break;
            }
        }
    }
    if names[0].is_none() {
        names[0] = names[1].clone();
    }
    let [n0, n1] = names;
    (n0.unwrap_or_default(), n1.unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn berlin() -> Zone {
        Zone::Local(TimeZone::get("Europe/Berlin").expect("tzdb has Europe/Berlin"))
    }

    fn tm(y: i64, mo: i64, d: i64, h: i64, mi: i64, s: i64, isdst: i64) -> Tm {
        Tm {
            sec: s,
            min: mi,
            hour: h,
            mday: d,
            mon: mo - 1,
            year: y - 1900,
            isdst,
            ..Tm::default()
        }
    }

    #[test]
    fn civil_round_trip() {
        for days in [-800_000, -1, 0, 1, 59, 365, 11_016, 20_000, 84_000] {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days);
        }
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(19_782), (2024, 2, 29));
    }

    #[test]
    fn timegm_normalizes() {
        let mut t = tm(2026, 1, 32, 25, 0, 0, -1);
        let mut off = LibcState {
            offset: 0,
            last_local: None,
        };
        let r = Zone::Utc.mktime(&mut t, &mut off);
        assert_eq!(r, Some(1_769_994_000));
        assert_eq!((t.mon, t.mday, t.hour, t.wday), (1, 2, 1, 1));
    }

    #[test]
    fn spring_forward_gap_goes_to_dst_side() {
        // glibc 2.36: 02:30 on 2026-03-29 in Berlin becomes 03:30 CEST.
        let mut t = tm(2026, 3, 29, 2, 30, 0, -1);
        let mut off = LibcState {
            offset: -3600,
            last_local: None,
        };
        let r = berlin().mktime(&mut t, &mut off);
        assert_eq!(r, Some(1_774_747_800));
        assert_eq!((t.hour, t.min, t.isdst), (3, 30, 1));
    }

    #[test]
    fn fall_back_fold_follows_previous_offset() {
        let z = berlin();
        let mut t = tm(2026, 10, 25, 2, 30, 0, -1);
        let mut off = LibcState {
            offset: -7200,
            last_local: None,
        };
        assert_eq!(z.mktime(&mut t, &mut off), Some(1_792_888_200));
        let mut t = tm(2026, 10, 25, 2, 30, 0, -1);
        let mut off = LibcState {
            offset: -3600,
            last_local: None,
        };
        assert_eq!(z.mktime(&mut t, &mut off), Some(1_792_891_800));
        // A fresh process (offset 0) lands on standard time.
        let mut t = tm(2026, 10, 25, 2, 30, 0, -1);
        let mut off = LibcState {
            offset: 0,
            last_local: None,
        };
        assert_eq!(z.mktime(&mut t, &mut off), Some(1_792_891_800));
    }

    #[test]
    fn requested_dst_flag_uses_neighbouring_offset() {
        // 12:00 "CEST" in January is 11:00 CET.
        let mut t = tm(2026, 1, 10, 12, 0, 0, 1);
        let mut off = LibcState {
            offset: 0,
            last_local: None,
        };
        assert_eq!(berlin().mktime(&mut t, &mut off), Some(1_768_039_200));
        assert_eq!((t.hour, t.isdst), (11, 0));
    }

    #[test]
    fn berlin_names() {
        let (n0, n1, daylight, tz) = tz_names(&TimeZone::get("Europe/Berlin").expect("zone"));
        assert_eq!(
            (n0.as_str(), n1.as_str(), daylight, tz),
            ("CET", "CEST", true, -3600)
        );
        let (n0, n1, daylight, tz) = tz_names(&TimeZone::UTC);
        assert_eq!(
            (n0.as_str(), n1.as_str(), daylight, tz),
            ("UTC", "UTC", false, 0)
        );
    }
}

//! Timestamps in systemd's syntax: parsing (systemd.time(7), "PARSING TIMESTAMPS", as
//! systemd 252's `parse_timestamp()` accepts them, plus RFC 3339 with `Z` or an offset)
//! and printing (`format_timestamp()` and `format_timestamp_relative()`).
//!
//! Used for `jobguard calendar --base-time`, `jobguard run --slot` and the lines
//! `jobguard calendar` prints. Times are microseconds since the Unix epoch internally.

use jiff::Timestamp;
use jiff::tz::TimeZone;

use super::spec::{load_timezone, parse_fraction};
use super::tm::{self, LibcState, Tm, Zone};

const USEC_PER_SEC: u64 = 1_000_000;
const USEC_PER_MSEC: u64 = 1_000;
const USEC_PER_MINUTE: u64 = 60 * USEC_PER_SEC;
const USEC_PER_HOUR: u64 = 60 * USEC_PER_MINUTE;
const USEC_PER_DAY: u64 = 24 * USEC_PER_HOUR;
const USEC_PER_WEEK: u64 = 7 * USEC_PER_DAY;
const USEC_PER_MONTH: u64 = 2_629_800 * USEC_PER_SEC;
const USEC_PER_YEAR: u64 = 31_557_600 * USEC_PER_SEC;

/// Largest timestamp systemd parses or prints (9999-12-30 23:59:59.999999 UTC), in µs.
const FORMATTABLE_MAX: u64 = 253_402_214_399_999_999;

/// systemd's `parse_sec()`: a time span such as `5min 3s` or `1.5h` (a bare number is
/// seconds) in microseconds; `None` if it is not one. See [`crate::joblist::timespan`].
fn parse_sec(t: &str) -> Option<u64> {
    crate::joblist::timespan::TimeSpan::parse(t)
        .ok()
        .map(|s| s.as_usec())
}

/// Reads a number of at most `n` digits in `from..=to` after optional white space, as
/// glibc's strptime does (it stops early when another digit would exceed `to`).
fn get_number(s: &[u8], rp: &mut usize, from: i64, to: i64, n: usize) -> Option<i64> {
    while *rp < s.len() && s[*rp].is_ascii_whitespace() {
        *rp += 1;
    }
    if *rp >= s.len() || !s[*rp].is_ascii_digit() {
        return None;
    }
    let mut val: i64 = 0;
    let mut left = n;
    loop {
        val = val * 10 + i64::from(s[*rp] - b'0');
        *rp += 1;
        left -= 1;
        if !(left > 0 && val * 10 <= to && *rp < s.len() && s[*rp].is_ascii_digit()) {
            break;
        }
    }
    (from..=to).contains(&val).then_some(val)
}

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];

/// The subset of glibc's strptime(3) systemd's timestamp parser uses (`%y %Y %m %d %H
/// %M %S %b`, literal characters, white space). Returns where parsing stopped.
fn strptime(s: &[u8], fmt: &str, tm: &mut Tm) -> Option<usize> {
    let f = fmt.as_bytes();
    let mut rp = 0;
    let mut fi = 0;
    let mut want_xday = false;
    while fi < f.len() {
        let c = f[fi];
        if c.is_ascii_whitespace() {
            while rp < s.len() && s[rp].is_ascii_whitespace() {
                rp += 1;
            }
            fi += 1;
            continue;
        }
        if c != b'%' {
            if rp >= s.len() || s[rp] != c {
                return None;
            }
            rp += 1;
            fi += 1;
            continue;
        }
        let conv = *f.get(fi + 1)?;
        fi += 2;
        match conv {
            b'Y' => {
                tm.year = get_number(s, &mut rp, 0, 9999, 4)? - 1900;
                want_xday = true;
            }
            b'y' => {
                let v = get_number(s, &mut rp, 0, 99, 2)?;
                tm.year = if v >= 69 { v } else { v + 100 };
                want_xday = true;
            }
            b'm' => {
                tm.mon = get_number(s, &mut rp, 1, 12, 2)? - 1;
                want_xday = true;
            }
            b'd' => {
                tm.mday = get_number(s, &mut rp, 1, 31, 2)?;
                want_xday = true;
            }
            b'H' => tm.hour = get_number(s, &mut rp, 0, 23, 2)?,
            b'M' => tm.min = get_number(s, &mut rp, 0, 59, 2)?,
            b'S' => tm.sec = get_number(s, &mut rp, 0, 61, 2)?,
            b'b' => {
                let rest = &s[rp..];
                let mut found = None;
                for (i, name) in MONTHS.iter().enumerate() {
                    for cand in [*name, &name[..3]] {
                        let cb = cand.as_bytes();
                        if rest.len() >= cb.len() && rest[..cb.len()].eq_ignore_ascii_case(cb) {
                            found = Some((i, cb.len()));
                            break;
                        }
                    }
                    if found.is_some() {
                        break;
                    }
                }
                let (i, len) = found?;
                tm.mon = i as i64;
                rp += len;
                want_xday = true;
            }
            _ => return None,
        }
    }
    if want_xday && tm.year >= -1900 {
        let y = tm.year + 1900;
        let days = tm::days_from_civil(y, tm.mon + 1, 1) + tm.mday - 1;
        tm.wday = (days + 4).rem_euclid(7);
    }
    Some(rp)
}

/// `parse_timestamp_impl()` in `zone`; `with_tz` when the zone was named at the end.
fn parse_impl(
    t: &str,
    zone_tz: &TimeZone,
    with_tz: bool,
    now: u64,
    extended: bool,
    state: &mut LibcState,
) -> Option<u64> {
    if !with_tz && let Some(rest) = t.strip_prefix('@') {
        return parse_sec(rest);
    }
    let mut ret = now;
    let mut plus = 0;
    let mut minus = 0;
    let mut t = t;
    let mut utc = false;
    let mut dst = -1;
    let mut special = false;
    if !with_tz {
        if t == "now" {
            special = true;
        } else if let Some(rest) = t.strip_prefix('+') {
            plus = parse_sec(rest)?;
            special = true;
        } else if let Some(rest) = t.strip_prefix('-') {
            minus = parse_sec(rest)?;
            special = true;
        } else if let Some(rest) = t.strip_suffix(" ago") {
            minus = parse_sec(rest)?;
            special = true;
        } else if let Some(rest) = t.strip_suffix(" left") {
            plus = parse_sec(rest)?;
            special = true;
        } else if t.len() >= 4 && t.as_bytes()[t.len() - 4..].eq_ignore_ascii_case(b" UTC") {
            utc = true;
            t = &t[..t.len() - 4];
        } else {
            let (n0, n1, _, _) = tm::tz_names(zone_tz);
            for (j, name) in [n0, n1].iter().enumerate() {
                if name.is_empty() || t.len() <= name.len() {
                    continue;
                }
                let e = t.len() - name.len();
                if !t.as_bytes()[e..].eq_ignore_ascii_case(name.as_bytes())
                    || t.as_bytes()[e - 1] != b' '
                {
                    continue;
                }
                t = &t[..e - 1];
                dst = j as i64;
                break;
            }
        }
    }

    if !special {
        let zone = if utc {
            Zone::Utc
        } else {
            Zone::Local(zone_tz.clone())
        };
        let x = i64::try_from(ret / USEC_PER_SEC).ok()?;
        let mut tm = zone.localtime(x)?;
        if !utc {
            state.last_local = Some(x);
        }
        tm.isdst = dst;
        let mut x_usec: u64 = 0;
        let mut done = false;
        match t {
            "today" => {}
            "yesterday" => tm.mday -= 1,
            "tomorrow" => tm.mday += 1,
            _ => {
                let days = [
                    ("Sunday", 0),
                    ("Sun", 0),
                    ("Monday", 1),
                    ("Mon", 1),
                    ("Tuesday", 2),
                    ("Tue", 2),
                    ("Wednesday", 3),
                    ("Wed", 3),
                    ("Thursday", 4),
                    ("Thu", 4),
                    ("Friday", 5),
                    ("Fri", 5),
                    ("Saturday", 6),
                    ("Sat", 6),
                ];
                let mut weekday = -1;
                for (name, nr) in days {
                    let b = t.as_bytes();
                    if b.len() > name.len()
                        && b[..name.len()].eq_ignore_ascii_case(name.as_bytes())
                        && b[name.len()] == b' '
                    {
                        weekday = nr;
                        t = &t[name.len() + 1..];
                        break;
                    }
                }
                let s = t.as_bytes();
                let copy = tm;
                // (format, may carry a fraction, seconds are zero)
                let formats: [(&str, bool, bool); 12] = [
                    ("%y-%m-%d %H:%M:%S", true, false),
                    ("%Y-%m-%d %H:%M:%S", true, false),
                    ("%Y-%m-%dT%H:%M:%S", true, false),
                    ("%b %d %H:%M:%S", true, false),
                    ("%y-%m-%d %H:%M", false, true),
                    ("%Y-%m-%d %H:%M", false, true),
                    ("%Y-%m-%dT%H:%M", false, true),
                    ("%y-%m-%d", false, true),
                    ("%Y-%m-%d", false, true),
                    ("%H:%M:%S", true, false),
                    ("%H:%M", false, true),
                    ("", false, false),
                ];
                for (fmt, frac, zero) in formats {
                    if fmt.is_empty() {
                        return None;
                    }
                    if !extended && fmt.contains('T') {
                        continue;
                    }
                    let mut cand = copy;
                    let Some(k) = strptime(s, fmt, &mut cand) else {
                        continue;
                    };
                    if frac && s.get(k) == Some(&b'.') {
                        let (add, n) = parse_fraction(&s[k + 1..]).ok()?;
                        if k + 1 + n != s.len() {
                            return None;
                        }
                        x_usec = u64::from(add);
                    } else if k != s.len() {
                        continue;
                    }
                    if zero {
                        cand.sec = 0;
                        if fmt.ends_with("%d") {
                            cand.min = 0;
                            cand.hour = 0;
                        }
                    }
                    tm = cand;
                    done = true;
                    break;
                }
                if done && weekday >= 0 && tm.wday != weekday {
                    return None;
                }
            }
        }
        if !done {
            tm.sec = 0;
            tm.min = 0;
            tm.hour = 0;
        }
        let mut gm_state = LibcState::default();
        let x = zone.mktime(&mut tm, if utc { &mut gm_state } else { state })?;
        if x < 0 {
            return None;
        }
        ret = u64::try_from(x).ok()? * USEC_PER_SEC + x_usec;
        if ret > FORMATTABLE_MAX {
            return None;
        }
    }

    ret = ret.checked_add(plus)?;
    if ret > FORMATTABLE_MAX {
        return None;
    }
    ret.checked_sub(minus)
}

/// Why a text is not a timestamp.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid timestamp {text:?}: {reason}")]
pub struct TimestampError {
    /// The text as given.
    pub text: String,
    /// What is wrong, in a few words.
    pub reason: String,
}

/// The reason given for a text that is no timestamp form at all.
const NOT_A_TIMESTAMP: &str = "not a timestamp (systemd.time(7): e.g. \"2026-11-29 02:00:00 UTC\", \
     \"2026-11-29T02:00:00Z\", \"@1795917600\", \"-2h\")";

/// RFC 3339 (`YYYY-MM-DDTHH:MM[:SS[.frac]]` followed by `Z` or a numeric offset `±HH:MM`,
/// `±HHMM` or `±HH`; `T` may be `t` or a space), read as systemd does from version 255
/// on (its test-time-util.c): the fields are normalized as timegm(3) does, so a leap
/// second `23:59:60` is the first second of the next minute and February 30 is March 2;
/// an offset must be less than 24 hours; a time before 1970 is refused (systemd:
/// `-ERANGE`). In µs since the epoch; `Ok(None)` when `s` does not have this shape.
fn parse_rfc3339(s: &str) -> Result<Option<u64>, &'static str> {
    let b = s.as_bytes();
    // The zone designator: `Z`, or the last '+' or '-' after the time's first ':'.
    let Some(colon) = b.iter().position(|&c| c == b':') else {
        return Ok(None);
    };
    let (body, offset_s) = if matches!(b.last(), Some(b'Z' | b'z')) {
        (&b[..b.len() - 1], 0i64)
    } else {
        let Some(sign_at) = b[colon..]
            .iter()
            .rposition(|&c| c == b'+' || c == b'-')
            .map(|i| i + colon)
        else {
            return Ok(None);
        };
        let sign = if b[sign_at] == b'-' { -1 } else { 1 };
        let off = &b[sign_at + 1..];
        let (h, m) = match off.len() {
            2 => (digits(off), Some(0)),
            4 => (digits(&off[..2]), digits(&off[2..])),
            5 if off[2] == b':' => (digits(&off[..2]), digits(&off[3..])),
            _ => return Ok(None),
        };
        let (Some(h), Some(m)) = (h, m) else {
            return Ok(None);
        };
        if h > 23 || m > 59 {
            return Err("the offset from UTC must be less than 24 hours (at most ±23:59)");
        }
        (&b[..sign_at], sign * (h * 3600 + m * 60))
    };
    if body.len() < 16
        || body[4] != b'-'
        || body[7] != b'-'
        || !matches!(body[10], b'T' | b't' | b' ')
    {
        return Ok(None);
    }
    let (Some(y), Some(mo), Some(d)) = (
        digits(&body[..4]),
        digits(&body[5..7]),
        digits(&body[8..10]),
    ) else {
        return Ok(None);
    };
    let time = &body[11..];
    if time.len() < 5 || time[2] != b':' {
        return Ok(None);
    }
    let (Some(h), Some(mi)) = (digits(&time[..2]), digits(&time[3..5])) else {
        return Ok(None);
    };
    let mut sec = 0;
    let mut usec = 0u64;
    let rest = &time[5..];
    if !rest.is_empty() {
        if rest.len() < 3 || rest[0] != b':' {
            return Ok(None);
        }
        let Some(v) = digits(&rest[1..3]) else {
            return Ok(None);
        };
        sec = v;
        let frac = &rest[3..];
        if !frac.is_empty() {
            if frac[0] != b'.' {
                return Ok(None);
            }
            match parse_fraction(&frac[1..]) {
                Ok((v, n)) if n + 1 == frac.len() => usec = u64::from(v),
                _ => return Ok(None),
            }
        }
    }
    // The ranges of strptime's %m %d %H %M %S, as systemd reads the same fields.
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || sec > 61 {
        return Err(
            "a field is out of range (month 1-12, day 1-31, hour 0-23, minute 0-59, second 0-61)",
        );
    }
    let days = tm::days_from_civil(y, mo, 1) + d - 1;
    let secs = days * 86_400 + h * 3600 + mi * 60 + sec - offset_s;
    if secs < 0 {
        return Err("it is before 1970-01-01 00:00:00 UTC");
    }
    let total = u64::try_from(secs)
        .ok()
        .and_then(|v| v.checked_mul(USEC_PER_SEC))
        .and_then(|v| v.checked_add(usec))
        .filter(|v| *v <= FORMATTABLE_MAX);
    total.map(Some).ok_or("it is after 9999-12-30")
}

/// A run of ASCII digits as a number; `None` for anything else (or nothing).
fn digits(s: &[u8]) -> Option<i64> {
    if s.is_empty() || s.len() > 4 || !s.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(s.iter().fold(0, |n, &c| n * 10 + i64::from(c - b'0')))
}

/// Parses a timestamp in systemd's syntax (systemd.time(7), "PARSING TIMESTAMPS", as
/// systemd 252 reads it): `[WEEKDAY] YYYY-MM-DD [HH:MM[:SS[.frac]]]` (two-digit years
/// too), `HH:MM[:SS]` (today), `YYYY-MM-DDTHH:MM[:SS]`, `Mon DD HH:MM:SS`, `now`,
/// `today`, `yesterday`, `tomorrow`, `@EPOCH`, `+SPAN`, `-SPAN`, `SPAN ago`, `SPAN
/// left`, each optionally followed by ` UTC`, the local zone's abbreviation or a tzdb
/// zone name; and also RFC 3339 with `Z` or a numeric offset
/// (`2026-11-29T02:00:00Z`). Local times are in the process's local zone. `now` is the
/// current time relative forms start from.
///
/// # Errors
/// [`TimestampError`] when `s` is none of these, or an RFC 3339 time with an offset of
/// 24 hours or more, or before 1970.
pub fn parse_timestamp(s: &str, now: Timestamp) -> Result<Timestamp, TimestampError> {
    parse_timestamp_in(s, now, &super::local_zone())
}

/// The other instant with the same local time as `t` in `tz`, if `t` lies in the
/// repeated hour of a fall-back (a change to a smaller UTC offset): `t` + the change in
/// the first pass, `t` - the change in the second.
pub fn fold_twin(tz: &TimeZone, t: Timestamp) -> Option<Timestamp> {
    let day = jiff::SignedDuration::from_hours(24);
    let from = t.checked_sub(day).ok()?;
    for tr in tz.following(from) {
        let at = tr.timestamp();
        if at > t.checked_add(day).ok()? {
            break;
        }
        let before = tz.to_offset(at.checked_sub(jiff::SignedDuration::from_secs(1)).ok()?);
        let d = i64::from(before.seconds() - tr.offset().seconds());
        if d <= 0 {
            continue;
        }
        let d = jiff::SignedDuration::from_secs(d);
        if t >= at.checked_sub(d).ok()? && t < at {
            return t.checked_add(d).ok();
        }
        if t >= at && t < at.checked_add(d).ok()? {
            return t.checked_sub(d).ok();
        }
    }
    None
}

/// The zone whose wall-clock time `s` names, as [`parse_timestamp`] reads it: the zone
/// named at its end, else the local zone; `None` when the text fixes the instant
/// itself (an RFC 3339 offset or `Z`, ` UTC`, `@EPOCH`, a relative time, or the local
/// zone's standard or daylight-saving abbreviation).
pub fn wall_clock_zone(s: &str, local: &TimeZone) -> Option<TimeZone> {
    let t = s.trim();
    if t.parse::<Timestamp>().is_ok()
        || t.starts_with(['@', '+', '-'])
        || t.len() >= 4 && t.as_bytes()[t.len() - 4..].eq_ignore_ascii_case(b" UTC")
        || ["now", "today", "yesterday", "tomorrow"].contains(&t)
        || t.ends_with(" ago")
        || t.ends_with(" left")
    {
        return None;
    }
    let last = t.rsplit(' ').next().unwrap_or("");
    let (n0, n1, _, _) = tm::tz_names(local);
    if last == n0 || last == n1 {
        return None;
    }
    match t.rfind(' ').and_then(|sp| load_timezone(&t[sp + 1..])) {
        Some(tz) => Some(tz),
        None => Some(local.clone()),
    }
}

/// [`parse_timestamp`] with `local` as the local time zone.
///
/// # Errors
/// [`TimestampError`] as [`parse_timestamp`].
pub fn parse_timestamp_in(
    s: &str,
    now: Timestamp,
    local: &TimeZone,
) -> Result<Timestamp, TimestampError> {
    parse_timestamp_with_state(s, now, local, &mut LibcState::default())
}

/// [`parse_timestamp_in`] that also returns glibc's `mktime` state afterwards, for
/// emulating a whole `systemd-analyze` process.
pub(crate) fn parse_timestamp_with_state(
    s: &str,
    now: Timestamp,
    local: &TimeZone,
    state: &mut LibcState,
) -> Result<Timestamp, TimestampError> {
    let err = |reason: &str| TimestampError {
        text: s.to_string(),
        reason: reason.to_string(),
    };
    let now_us = u64::try_from(now.as_microsecond()).map_err(|_| err("now is before 1970"))?;
    let us = match parse_systemd(s, local, now_us, true, state) {
        Some(us) => us,
        None => parse_rfc3339(s.trim())
            .map_err(err)?
            .ok_or_else(|| err(NOT_A_TIMESTAMP))?,
    };
    i64::try_from(us)
        .ok()
        .and_then(|v| Timestamp::from_microsecond(v).ok())
        .ok_or_else(|| err("out of range"))
}

/// Whether systemd 252 itself accepts `s` as a timestamp (without this module's
/// additions: `T` between date and time, zone names, RFC 3339 offsets), as seen from
/// an emulated process whose C library state is `state` (updated as glibc's would be).
pub(crate) fn is_systemd_timestamp(
    s: &str,
    now: Timestamp,
    local: &TimeZone,
    state: &mut LibcState,
) -> bool {
    u64::try_from(now.as_microsecond())
        .is_ok_and(|n| parse_systemd(s, local, n, false, state).is_some())
}

/// Whether `s` is a time span in systemd's syntax (`parse_sec()`, e.g. `5min 3s`).
pub fn is_systemd_timespan(s: &str) -> bool {
    parse_sec(s).is_some()
}

/// systemd's `parse_timestamp()`: a named zone at the end switches the zone.
/// `extended` also accepts `T` between date and time and zone names, which systemd 252
/// rejects.
fn parse_systemd(
    t: &str,
    local: &TimeZone,
    now: u64,
    extended: bool,
    state: &mut LibcState,
) -> Option<u64> {
    let named = t
        .rfind(' ')
        .and_then(|sp| load_timezone(&t[sp + 1..]).map(|tz| (sp, tz)));
    let ends_utc = t.len() >= 4 && t.as_bytes()[t.len() - 4..].eq_ignore_ascii_case(b" UTC");
    match named {
        // systemd 252 fails every timestamp ending in a zone name other than " UTC"
        // (its forked parser never reports success); later versions accept them.
        Some(_) if !ends_utc && !extended => None,
        Some((sp, tz)) if !ends_utc => {
            let name = &t[sp + 1..];
            let (n0, n1, _, _) = tm::tz_names(&tz);
            let with_tz = name != n0 && name != n1;
            let t = if with_tz { &t[..sp] } else { t };
            // systemd parses in a forked child: the process's mktime state is untouched.
            parse_impl(t, &tz, with_tz, now, extended, &mut state.clone())
        }
        _ => parse_impl(t, local, false, now, extended, state),
    }
}

const WEEKDAYS: [&str; 7] = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"];

/// systemd's `format_timestamp()`: `Www YYYY-MM-DD HH:MM:SS ZONE` in `zone` (the zone's
/// abbreviation), or with `UTC` when `zone` is `None`; seconds are rounded down.
pub fn format_timestamp(t: Timestamp, zone: Option<&TimeZone>) -> String {
    let us = t.as_microsecond();
    if us < 0 || us as u64 > FORMATTABLE_MAX {
        return "--- XXXX-XX-XX XX:XX:XX".to_string();
    }
    let secs = us.div_euclid(1_000_000);
    let z = match zone {
        Some(tz) => Zone::Local(tz.clone()),
        None => Zone::Utc,
    };
    let Some(tm) = z.localtime(secs) else {
        return "--- XXXX-XX-XX XX:XX:XX".to_string();
    };
    let mut out = format!(
        "{} {:04}-{:02}-{:02} {:02}:{:02}:{:02}",
        WEEKDAYS[tm.wday as usize],
        tm.year + 1900,
        tm.mon + 1,
        tm.mday,
        tm.hour,
        tm.min,
        tm.sec
    );
    let abbr = z.abbreviation(secs);
    if !abbr.is_empty() {
        out.push(' ');
        out.push_str(&abbr);
    }
    out
}

/// systemd's `format_timestamp_relative()`: how far `t` is from `now`, e.g. `5min 3s
/// left`, `1 day 2h ago`, `3 months 4 days left`, `now`; months are 30.44 days and
/// years 365.25 days, as in systemd.
pub fn format_relative(t: Timestamp, now: Timestamp) -> String {
    let (t, n) = (t.as_microsecond(), now.as_microsecond());
    let (d, s) = if n > t {
        ((n - t) as u64, " ago")
    } else {
        ((t - n) as u64, " left")
    };
    let plural = |v: u64, one: &'static str, many: &'static str| if v == 1 { one } else { many };
    if d >= USEC_PER_YEAR {
        let years = d / USEC_PER_YEAR;
        let months = (d % USEC_PER_YEAR) / USEC_PER_MONTH;
        format!(
            "{years} {} {months} {}{s}",
            plural(years, "year", "years"),
            plural(months, "month", "months")
        )
    } else if d >= USEC_PER_MONTH {
        let months = d / USEC_PER_MONTH;
        let days = (d % USEC_PER_MONTH) / USEC_PER_DAY;
        format!(
            "{months} {} {days} {}{s}",
            plural(months, "month", "months"),
            plural(days, "day", "days")
        )
    } else if d >= USEC_PER_WEEK {
        let weeks = d / USEC_PER_WEEK;
        let days = (d % USEC_PER_WEEK) / USEC_PER_DAY;
        format!(
            "{weeks} {} {days} {}{s}",
            plural(weeks, "week", "weeks"),
            plural(days, "day", "days")
        )
    } else if d >= 2 * USEC_PER_DAY {
        format!("{} days{s}", d / USEC_PER_DAY)
    } else if d >= 25 * USEC_PER_HOUR {
        format!("1 day {}h{s}", (d - USEC_PER_DAY) / USEC_PER_HOUR)
    } else if d >= 6 * USEC_PER_HOUR {
        format!("{}h{s}", d / USEC_PER_HOUR)
    } else if d >= USEC_PER_HOUR {
        format!(
            "{}h {}min{s}",
            d / USEC_PER_HOUR,
            (d % USEC_PER_HOUR) / USEC_PER_MINUTE
        )
    } else if d >= 5 * USEC_PER_MINUTE {
        format!("{}min{s}", d / USEC_PER_MINUTE)
    } else if d >= USEC_PER_MINUTE {
        format!(
            "{}min {}s{s}",
            d / USEC_PER_MINUTE,
            (d % USEC_PER_MINUTE) / USEC_PER_SEC
        )
    } else if d >= USEC_PER_SEC {
        format!("{}s{s}", d / USEC_PER_SEC)
    } else if d >= USEC_PER_MSEC {
        format!("{}ms{s}", d / USEC_PER_MSEC)
    } else if d > 0 {
        format!("{d}us{s}")
    } else {
        "now".to_string()
    }
}

/// Whether systemd would call `zone` UTC (`timezone == 0 && daylight == 0` after
/// `tzset()`): then `systemd-analyze` prints no "(in UTC)" lines.
pub fn is_utc_zone(zone: &TimeZone) -> bool {
    let (_, _, daylight, timezone) = tm::tz_names(zone);
    timezone == 0 && !daylight
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().expect("valid test timestamp")
    }

    fn parse_utc(s: &str) -> Result<Timestamp, TimestampError> {
        parse_timestamp_in(s, ts("2026-11-29T11:24:00Z"), &TimeZone::UTC)
    }

    #[test]
    fn absolute_forms() {
        let want = ts("2026-11-29T02:00:00Z");
        for s in [
            "2026-11-29 02:00:00",
            "2026-11-29 02:00",
            "26-11-29 02:00:00",
            "2026-11-29T02:00:00",
            "2026-11-29T02:00:00Z",
            "2026-11-29T03:00:00+01:00",
            "Sun 2026-11-29 02:00:00",
            "2026-11-29 02:00:00 UTC",
            "2026-11-29 03:00:00 Europe/Berlin",
            "@1795917600",
            "Nov 29 02:00:00",
            "02:00",
        ] {
            assert_eq!(parse_utc(s), Ok(want), "{s}");
        }
        assert_eq!(parse_utc("2026-11-29"), Ok(ts("2026-11-29T00:00:00Z")));
        assert_eq!(
            parse_utc("2026-11-29 02:00:00.25"),
            Ok(ts("2026-11-29T02:00:00.25Z"))
        );
    }

    #[test]
    fn relative_forms() {
        assert_eq!(parse_utc("now"), Ok(ts("2026-11-29T11:24:00Z")));
        assert_eq!(parse_utc("today"), Ok(ts("2026-11-29T00:00:00Z")));
        assert_eq!(parse_utc("yesterday"), Ok(ts("2026-11-28T00:00:00Z")));
        assert_eq!(parse_utc("tomorrow"), Ok(ts("2026-11-30T00:00:00Z")));
        assert_eq!(parse_utc("+5min"), Ok(ts("2026-11-29T11:29:00Z")));
        assert_eq!(parse_utc("-1h 30min"), Ok(ts("2026-11-29T09:54:00Z")));
        assert_eq!(parse_utc("2 days ago"), Ok(ts("2026-11-27T11:24:00Z")));
        assert_eq!(parse_utc("1.5h left"), Ok(ts("2026-11-29T12:54:00Z")));
    }

    #[test]
    fn rejects() {
        for s in [
            "",
            "bogus",
            "Mon 2026-11-29 02:00",
            "2026-13-01",
            "+",
            "5 agox",
            "-5 min x",
            "2026-11-29 02:00:00.x",
        ] {
            assert!(parse_utc(s).is_err(), "{s:?}");
        }
    }

    /// RFC 3339 as systemd reads it from version 255 on (the vectors of its
    /// test-time-util.c): issue 10, defect 5. A leap second was one second early, an
    /// offset of 25 hours and a time before 1970 were accepted.
    #[test]
    fn rfc3339_as_systemd_reads_it() {
        for (s, secs, usec) in [
            ("1985-04-12T23:20:50.52Z", 482_196_050, 520_000),
            ("1996-12-19T16:39:57-08:00", 851_042_397, 0),
            ("1996-12-20T00:39:57Z", 851_042_397, 0),
            ("1990-12-31T23:59:60Z", 662_688_000, 0),
            ("1990-12-31T15:59:60-08:00", 662_688_000, 0),
            ("1996-12-20T00:39Z", 851_042_397 - 57, 0),
            ("1990-12-31T15:59-08:00", 662_688_000 - 60, 0),
            ("2023-09-06 12:49:27.284029Z", 1_694_004_567, 284_029),
            ("2023-09-06 14:49:27+02:00", 1_694_004_567, 0),
            ("2023-09-06T12:49:27-00:00", 1_694_004_567, 0),
            ("2023-09-06T21:34:27+08:45", 1_694_004_567, 0),
            ("2023-09-06T21:34:27+0845", 1_694_004_567, 0),
            ("2023-09-06T14:49:27+02", 1_694_004_567, 0),
        ] {
            let want = Timestamp::from_microsecond(secs * 1_000_000 + usec).expect("valid");
            assert_eq!(parse_utc(s), Ok(want), "{s}");
        }
        for (s, why) in [
            ("1937-01-01T12:00:27.87+00:20", "before 1970"),
            ("2026-01-01T00:00:00+25:00", "less than 24 hours"),
            ("2026-01-01T00:00:00-24:00", "less than 24 hours"),
            ("2026-01-01T00:00:00+05:60", "less than 24 hours"),
            ("2026-13-01T00:00:00Z", "out of range"),
            ("2026-01-01T24:00:00Z", "out of range"),
        ] {
            let e = parse_utc(s).expect_err(s);
            assert!(e.reason.contains(why), "{s}: {e}");
            assert!(e.to_string().starts_with("invalid timestamp"), "{e}");
        }
    }

    /// Issue 10, defect 5: a bad timestamp was called an invalid calendar expression.
    #[test]
    fn a_bad_timestamp_is_called_a_timestamp() {
        for s in [
            "today 02:00",
            "2026-11-29T02:00:00Zjunk",
            "2026-11-29T0é:00Z",
            "x:+1",
        ] {
            let e = parse_utc(s).expect_err(s);
            assert_eq!(
                e.to_string(),
                format!("invalid timestamp {s:?}: {NOT_A_TIMESTAMP}")
            );
        }
    }

    #[test]
    fn formats() {
        let t = ts("2026-03-30T00:30:00Z");
        let berlin = TimeZone::get("Europe/Berlin").expect("zone");
        assert_eq!(
            format_timestamp(t, Some(&berlin)),
            "Mon 2026-03-30 02:30:00 CEST"
        );
        assert_eq!(format_timestamp(t, None), "Mon 2026-03-30 00:30:00 UTC");
        let now = ts("2026-11-29T11:24:00Z");
        let rel = |s: &str| format_relative(ts(s), now);
        assert_eq!(rel("2026-11-30T00:00:00Z"), "12h left");
        assert_eq!(rel("2026-12-01T00:00:00Z"), "1 day 12h left");
        assert_eq!(rel("2026-03-30T00:30:00Z"), "8 months 0 days ago");
        assert_eq!(rel("2069-01-01T00:00:00Z"), "42 years 1 month left");
        assert_eq!(rel("2026-11-29T11:24:00Z"), "now");
        assert_eq!(rel("2026-11-29T11:27:05Z"), "3min 5s left");
        assert!(is_utc_zone(&TimeZone::UTC));
        assert!(!is_utc_zone(&TimeZone::get("Europe/London").expect("zone")));
    }
}

//! systemd calendar events (`OnCalendar=`), evaluated the way systemd evaluates them.
//!
//! Parses the whole grammar of systemd.time(7) "CALENDAR EVENTS" as systemd 252 does
//! (submodule `spec`) and computes the next elapse after a point in time (what a timer
//! does) and the previous elapse at or before one (the slot a run belongs to) (submodule
//! `elapse`). The previous elapse is one a timer reaches: the last element at or before
//! the point of the orbit `next` walks from well before, which at a fall-back leaves out
//! local times of the repeated hour that systemd never fires. Also finds short
//! intervals between elapses, for the job list's check of `randomized_delay`
//! (submodule `interval`). Daylight-saving gaps and folds come out as systemd's, because the
//! arithmetic goes through a reproduction of glibc's `mktime` (submodule `tm`). Also
//! parses and prints timestamps in systemd's syntax ([`timestamp`]).
//!
//! The reference is the systemd on Debian 12 (252.39, glibc 2.36), including what it
//! does beyond upstream 252: after a fall-back it refuses a candidate whose local time is
//! before the start and tries an hour later. Quirks are kept on purpose: `~` lists are
//! validated with a bound that shrinks by 3 per item, `*/5` is rejected, an expression
//! ending in the local zone's abbreviation (`CET`) forces the DST flag. Time zones come from the system tzdb
//! through jiff. Printing in `systemd-analyze calendar`'s format lives in
//! `jobguard calendar`; this module has no I/O beyond reading time zone data.

use std::fmt;

use jiff::Timestamp;
use jiff::tz::TimeZone;

mod elapse;
mod interval;
mod schedule;
mod spec;
pub mod timestamp;
mod tm;

pub use schedule::Schedule;
pub use timestamp::{
    TimestampError, fold_twin, format_relative, format_timestamp, parse_timestamp, wall_clock_zone,
};

pub(crate) use elapse::NextError;
use spec::Spec;
pub(crate) use tm::LibcState;
use tm::Zone;

/// How many elapses [`CalendarSpec::interval_at_most`] looks at, at most.
pub const INTERVAL_SCAN_ELAPSES: usize = 4096;
/// How far past the first elapse [`CalendarSpec::interval_at_most`] looks, in µs: two
/// years (731 days).
pub const INTERVAL_SCAN_USEC: i64 = 731 * 86_400 * 1_000_000;

/// Two consecutive elapses and the time between them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Interval {
    /// `to_usec - from_usec`, µs.
    pub usec: i64,
    /// The earlier elapse, µs since the epoch.
    pub from_usec: i64,
    /// The later elapse, µs since the epoch.
    pub to_usec: i64,
}

/// A parsed `OnCalendar=` expression, with the time zone it is evaluated in.
#[derive(Debug, Clone)]
pub struct CalendarSpec {
    spec: Spec,
    zone: Zone,
    zone_name: String,
}

impl PartialEq for CalendarSpec {
    fn eq(&self, other: &Self) -> bool {
        self.spec == other.spec && self.zone_name == other.zone_name
    }
}

impl Eq for CalendarSpec {}

/// The kind of a parse error, after the error codes systemd returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CalendarErrorKind {
    /// Bad syntax or a value outside its field (systemd: `EINVAL`).
    Invalid,
    /// A number too large, or a repetition of 0 (systemd: `ERANGE`).
    Range,
    /// More than 241 items in one field's list (systemd: `ENOBUFS`).
    TooMany,
}

impl CalendarErrorKind {
    /// The C library's text for the matching error code, as systemd prints it.
    pub fn strerror(self) -> &'static str {
        match self {
            CalendarErrorKind::Invalid => "Invalid argument",
            CalendarErrorKind::Range => "Numerical result out of range",
            CalendarErrorKind::TooMany => "No buffer space available",
        }
    }

    fn reason(self) -> &'static str {
        match self {
            CalendarErrorKind::Invalid => "not a calendar event",
            CalendarErrorKind::Range => "number out of range",
            CalendarErrorKind::TooMany => "too many list items",
        }
    }
}

/// Why an expression is not a valid calendar event.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid calendar expression {expr:?}: {reason}")]
pub struct CalendarError {
    /// The expression as given.
    pub expr: String,
    /// What is wrong, in a few words.
    pub reason: String,
    /// The error class, matching systemd's error code.
    pub kind: CalendarErrorKind,
}

impl CalendarError {
    pub(crate) fn new(expr: &str, kind: CalendarErrorKind) -> Self {
        CalendarError {
            expr: expr.to_string(),
            reason: kind.reason().to_string(),
            kind,
        }
    }
}

/// The process's local time zone (`TZ`, else /etc/localtime), as glibc would use it.
///
/// A zone name (in `TZ`, or as the target of the /etc/localtime link) is loaded straight
/// from its file: jiff's own detection indexes the whole tzdb directory on first use,
/// which costs milliseconds on every start of the shim and the generator. Anything else
/// (a POSIX TZ string, a copied /etc/localtime) goes through jiff.
pub fn local_zone() -> TimeZone {
    // Cached per value of TZ: the generator parses one schedule per job.
    static CACHE: std::sync::Mutex<Option<(Option<std::ffi::OsString>, TimeZone)>> =
        std::sync::Mutex::new(None);
    let key = std::env::var_os("TZ");
    let mut cache = CACHE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some((k, zone)) = cache.as_ref()
        && *k == key
    {
        return zone.clone();
    }
    let zone = read_local_zone();
    *cache = Some((key, zone.clone()));
    zone
}

/// The file the local zone is read from (`TZ` naming a file or a tzdb zone, else
/// /etc/localtime); `None` for a POSIX `TZ` rule, which has no file.
fn local_zone_file() -> Option<std::path::PathBuf> {
    match std::env::var("TZ") {
        Ok(tz) => {
            let tz = tz.strip_prefix(':').unwrap_or(&tz);
            if tz.starts_with('/') {
                Some(tz.into())
            } else if !tz.is_empty() && spec::load_timezone(tz).is_some() {
                Some(format!("/usr/share/zoneinfo/{tz}").into())
            } else {
                None
            }
        }
        Err(_) => Some("/etc/localtime".into()),
    }
}

/// Whether the TZif file at `path` lists leap seconds (tzfile(5)). A header is the magic
/// `TZif`, a version byte, 15 reserved bytes and six 4-byte big-endian counts: `isutcnt`,
/// `isstdcnt`, `leapcnt`, `timecnt`, `typecnt`, `charcnt`. A version 2+ file repeats the
/// header after the version 1 data, and its 64-bit block is the one that counts: zic's
/// "slim" files (the default since tzcode 2020b) leave the version 1 block empty. False
/// for a file that cannot be read or is no TZif file.
fn tzif_counts_leap_seconds(path: &std::path::Path) -> bool {
    let Ok(data) = std::fs::read(path) else {
        return false;
    };
    let count = |at: usize| -> Option<usize> {
        let b = data.get(at..at + 4)?;
        usize::try_from(u32::from_be_bytes([b[0], b[1], b[2], b[3]])).ok()
    };
    let leaps = |header: usize| -> Option<usize> {
        (data.get(header..header + 4)? == b"TZif").then_some(())?;
        count(header + 28)
    };
    let Some(v1) = leaps(0) else {
        return false;
    };
    if data[4] < b'2' {
        return v1 > 0;
    }
    // The version 1 data: transition times (4 bytes) and types (1), local time types (6),
    // the abbreviations, leap records (4 + 4), standard/wall and UT/local indicators.
    let v1_data = (|| {
        let (ut, std, leap) = (count(20)?, count(24)?, count(28)?);
        let (time, types, chars) = (count(32)?, count(36)?, count(40)?);
        Some(time * 5 + types * 6 + chars + leap * 8 + std + ut)
    })();
    v1_data.and_then(|n| leaps(44 + n)).unwrap_or(v1) > 0
}

fn read_local_zone() -> TimeZone {
    let named =
        match std::env::var("TZ") {
            Ok(tz) => spec::load_timezone(tz.strip_prefix(':').unwrap_or(&tz)),
            Err(std::env::VarError::NotUnicode(_)) => None,
            Err(std::env::VarError::NotPresent) => std::fs::read_link("/etc/localtime")
                .ok()
                .and_then(|target| {
                    let target = target.to_string_lossy().into_owned();
                    let at = target.find("zoneinfo/")? + "zoneinfo/".len();
                    spec::load_timezone(&target[at..])
                }),
        };
    named.unwrap_or_else(TimeZone::system)
}

/// A name for a zone: its IANA name, or "UTC" when it has none.
fn name_of(tz: &TimeZone) -> String {
    tz.iana_name().unwrap_or("UTC").to_string()
}

impl CalendarSpec {
    /// Parses an expression in the syntax of systemd.time(7), "CALENDAR EVENTS", exactly
    /// as systemd 252 accepts it; expressions without a zone are evaluated in the
    /// process's local zone (`TZ`, else /etc/localtime), read now.
    ///
    /// # Errors
    /// [`CalendarError`] when systemd would reject the expression.
    pub fn parse(expr: &str) -> Result<Self, CalendarError> {
        Self::parse_in(expr, local_zone())
    }

    /// Like [`CalendarSpec::parse`], with `local` as the local time zone.
    ///
    /// # Errors
    /// [`CalendarError`] when systemd would reject the expression.
    pub fn parse_in(expr: &str, local: TimeZone) -> Result<Self, CalendarError> {
        let (n0, n1, _, _) = tm::tz_names(&local);
        Self::parse_with_names(expr, local, (&n0, &n1))
    }

    /// [`CalendarSpec::parse_in`] with the local zone's abbreviations as glibc's
    /// `tzname[]` holds them at that moment of an emulated process.
    pub(crate) fn parse_emulated(
        expr: &str,
        local: TimeZone,
        state: &LibcState,
    ) -> Result<Self, CalendarError> {
        let (n0, n1) = match state.last_local {
            Some(t) => tm::names_at(&local, t),
            None => {
                let (n0, n1, _, _) = tm::tz_names(&local);
                (n0, n1)
            }
        };
        Self::parse_with_names(expr, local, (&n0, &n1))
    }

    fn parse_with_names(
        expr: &str,
        local: TimeZone,
        (n0, n1): (&str, &str),
    ) -> Result<Self, CalendarError> {
        let parsed = spec::parse(expr, (n0, n1)).map_err(|k| CalendarError::new(expr, k))?;
        let (zone, zone_name) = if parsed.spec.utc {
            (Zone::Utc, "UTC".to_string())
        } else if let (Some(tz), Some(name)) = (parsed.zone, parsed.spec.timezone.clone()) {
            (Zone::Local(tz), name)
        } else {
            let name = name_of(&local);
            (Zone::Local(local), name)
        };
        Ok(CalendarSpec {
            spec: parsed.spec,
            zone,
            zone_name,
        })
    }

    /// The first elapse strictly after `after`, or `None` when there is none (e.g. a
    /// year in the past). Same rule as systemd's `calendar_spec_next_usec()`; times are
    /// handled in whole microseconds.
    pub fn next_elapse(&self, after: Timestamp) -> Option<Timestamp> {
        let usec = self
            .next_usec(after.as_microsecond(), &mut LibcState::default())
            .ok()?;
        Timestamp::from_microsecond(usec).ok()
    }

    /// The latest elapse at or before `at`: the slot a run started at `at` belongs to.
    /// It is the last element at or before `at` of the orbit a timer walks by calling
    /// [`CalendarSpec::next_elapse`] on its previous elapse, from any point well before
    /// (so `next_elapse(p)` is after `at`). At a fall-back, systemd 252 (252.39) never
    /// fires the local times of the repeated hour that are not after the last one it
    /// fired in the first pass; those are not elapses here either. `None` when nothing
    /// elapses at or before `at`.
    pub fn previous_elapse(&self, at: Timestamp) -> Option<Timestamp> {
        let usec = elapse::previous_usec(&self.spec, &self.zone, at.as_microsecond())?;
        Timestamp::from_microsecond(usec).ok()
    }

    /// Two consecutive elapses after `from` that are `limit_usec` µs apart or less, or
    /// `None` when there are none in the window looked at: the first
    /// [`INTERVAL_SCAN_ELAPSES`] elapses after `from`, or those within
    /// [`INTERVAL_SCAN_USEC`] of the first, whichever ends first (a calendar repeats
    /// within a few years; the daylight-saving changes of that window are all seen).
    /// Daylight-saving gaps and folds count as they fall: `01:30,03:00` in a zone
    /// that springs forward at 02:00 has a 30-minute interval once a year.
    pub fn interval_at_most(&self, limit_usec: i64, from: Timestamp) -> Option<Interval> {
        interval::interval_at_most(&self.spec, &self.zone, from.as_microsecond(), limit_usec)
    }

    /// `calendar_spec_next_usec()` on microseconds since the epoch, with systemd's
    /// error kinds.
    ///
    /// `state` is the C library's `mktime` guess of the emulated process: an expression
    /// with its own zone is evaluated in a forked child in systemd, so it sees the state
    /// but does not change it.
    pub(crate) fn next_usec(&self, usec: i64, state: &mut LibcState) -> Result<i64, NextError> {
        if self.spec.timezone.is_some() {
            let mut child = *state;
            elapse::next_usec(&self.spec, &self.zone, usec, &mut child)
        } else {
            elapse::next_usec(&self.spec, &self.zone, usec, state)
        }
    }

    /// Whether the expression names its own tzdb zone (systemd then evaluates it in a
    /// forked child, whose warnings are lost).
    pub(crate) fn has_own_zone(&self) -> bool {
        self.spec.timezone.is_some()
    }

    /// The zone the expression is evaluated in, when it counts leap seconds: a `right/`
    /// zone of the tzdb (tzfile(5): leap-second records). systemd evaluates `OnCalendar=`
    /// with the C library, whose `mktime(3)` counts them there, so its timer elapses as
    /// many seconds after the elapse this calendar computes as leap seconds have been
    /// inserted (27 since 2017). Returns (that zone, the same zone without them).
    ///
    /// Judged by the zone's file (its leap-second count), so a copied `/etc/localtime` or a
    /// `TZ` path counts too; the plain zone is named when the zone is a `right/` one.
    pub fn leap_second_zone(&self) -> Option<(String, String)> {
        if self.spec.utc {
            return None;
        }
        if let Some(plain) = self.zone_name.strip_prefix("right/") {
            return Some((self.zone_name.clone(), plain.to_string()));
        }
        let file = match &self.spec.timezone {
            Some(name) => std::path::PathBuf::from(format!("/usr/share/zoneinfo/{name}")),
            None => local_zone_file()?,
        };
        tzif_counts_leap_seconds(&file).then(|| {
            (
                format!("{} ({})", self.zone_name, file.display()),
                "the same zone without leap seconds (not from right/)".to_string(),
            )
        })
    }

    /// The IANA name of the time zone the expression is evaluated in: its own zone when
    /// it names one, `"UTC"` for UTC, else the local zone the expression was parsed in.
    pub fn zone_name(&self) -> String {
        self.zone_name.clone()
    }
}

impl fmt::Display for CalendarSpec {
    /// The normalized form, as `systemd-analyze calendar` prints it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.spec.fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A TZif header of `version` with the six counts `isutcnt`, `isstdcnt`, `leapcnt`,
    /// `timecnt`, `typecnt`, `charcnt` (tzfile(5)).
    fn tzif_header(version: u8, counts: [u32; 6]) -> Vec<u8> {
        let mut h = b"TZif".to_vec();
        h.push(version);
        h.extend([0u8; 15]);
        for c in counts {
            h.extend(c.to_be_bytes());
        }
        h
    }

    #[test]
    fn leap_seconds_are_read_from_the_block_that_counts() {
        let dir = tempfile::tempdir().unwrap();
        let file = |name: &str, bytes: Vec<u8>| {
            let p = dir.path().join(name);
            std::fs::write(&p, bytes).unwrap();
            p
        };
        // zic's "slim" form: an empty version 1 block, the leap records in version 2's.
        let mut slim = tzif_header(b'2', [0; 6]);
        slim.extend(tzif_header(b'2', [0, 0, 27, 0, 1, 4]));
        assert!(tzif_counts_leap_seconds(&file("slim-right", slim)));
        let mut slim_plain = tzif_header(b'2', [0; 6]);
        slim_plain.extend(tzif_header(b'2', [0, 0, 0, 0, 1, 4]));
        assert!(!tzif_counts_leap_seconds(&file("slim", slim_plain)));
        // The "fat" form: both blocks; version 1's 33 data bytes are skipped.
        let mut fat = tzif_header(b'2', [1, 1, 1, 2, 1, 4]);
        fat.extend([0u8; 2 * 5 + 6 + 4 + 8 + 1 + 1]);
        fat.extend(tzif_header(b'2', [1, 1, 1, 2, 1, 4]));
        assert!(tzif_counts_leap_seconds(&file("fat", fat)));
        assert!(tzif_counts_leap_seconds(&file(
            "v1",
            tzif_header(0, [0, 0, 3, 0, 1, 4])
        )));
        assert!(!tzif_counts_leap_seconds(&file(
            "other",
            b"not a zone".to_vec()
        )));
        assert!(!tzif_counts_leap_seconds(&dir.path().join("missing")));
        if std::path::Path::new("/usr/share/zoneinfo/right/UTC").exists() {
            assert!(tzif_counts_leap_seconds(std::path::Path::new(
                "/usr/share/zoneinfo/right/UTC"
            )));
            assert!(!tzif_counts_leap_seconds(std::path::Path::new(
                "/usr/share/zoneinfo/UTC"
            )));
        }
    }

    fn ts(s: &str) -> Timestamp {
        s.parse().expect("valid test timestamp")
    }

    fn berlin() -> TimeZone {
        TimeZone::get("Europe/Berlin").expect("tzdb has Europe/Berlin")
    }

    #[test]
    fn spring_forward_skips_the_missing_time() {
        // systemd 252: 02:30 does not exist on 2026-03-29 in Berlin; the next one is a
        // day later.
        let spec = CalendarSpec::parse_in("*-*-* 02:30", berlin()).expect("valid");
        let next = spec.next_elapse(ts("2026-03-28T11:00:00Z"));
        assert_eq!(next, Some(ts("2026-03-30T00:30:00Z")));
    }

    #[test]
    fn fall_back_fires_once_in_the_first_pass() {
        let spec = CalendarSpec::parse_in("*-*-* 02:30", berlin()).expect("valid");
        // From before the fold: 02:30 CEST, then the next day.
        let first = spec.next_elapse(ts("2026-10-24T22:00:00Z"));
        assert_eq!(first, Some(ts("2026-10-25T00:30:00Z")));
        let second = spec.next_elapse(ts("2026-10-25T00:30:00Z"));
        assert_eq!(second, Some(ts("2026-10-26T01:30:00Z")));
        // From inside the second pass, before 02:30 CET: that one.
        let inside = spec.next_elapse(ts("2026-10-25T01:15:00Z"));
        assert_eq!(inside, Some(ts("2026-10-25T01:30:00Z")));
    }

    #[test]
    fn zone_names() {
        let local = berlin();
        assert_eq!(
            CalendarSpec::parse_in("daily", local.clone())
                .expect("valid")
                .zone_name(),
            "Europe/Berlin"
        );
        assert_eq!(
            CalendarSpec::parse_in("daily UTC", local.clone())
                .expect("valid")
                .zone_name(),
            "UTC"
        );
        let ny = CalendarSpec::parse_in("daily America/New_York", local).expect("valid");
        assert_eq!(ny.zone_name(), "America/New_York");
        assert_eq!(ny.to_string(), "*-*-* 00:00:00 America/New_York");
    }

    #[test]
    fn parse_errors_name_the_expression() {
        let e = CalendarSpec::parse_in("*-*-* 25:00", TimeZone::UTC).expect_err("hour 25");
        assert_eq!(e.kind, CalendarErrorKind::Invalid);
        assert_eq!(
            e.to_string(),
            "invalid calendar expression \"*-*-* 25:00\": not a calendar event"
        );
        let e = CalendarSpec::parse_in("*:0/0", TimeZone::UTC).expect_err("repeat 0");
        assert_eq!(e.kind, CalendarErrorKind::Range);
    }

    /// previous_elapse(t) is an elapse, and the last one at or before t.
    fn check_previous(spec: &CalendarSpec, at: Timestamp) -> Option<Timestamp> {
        let p = spec.previous_elapse(at);
        match p {
            Some(p) => {
                assert!(p <= at, "{spec}: {p} after {at}");
                let before = Timestamp::from_microsecond(p.as_microsecond() - 1).expect("valid");
                assert_eq!(spec.next_elapse(before), Some(p), "{spec} at {at}");
                assert!(
                    spec.next_elapse(p).is_none_or(|n| n > at),
                    "{spec}: an elapse after {p} before {at}"
                );
            }
            None => {
                let first = spec.next_elapse(Timestamp::UNIX_EPOCH);
                assert!(
                    first.is_none_or(|n| n > at),
                    "{spec}: {first:?} at or before {at}"
                );
            }
        }
        p
    }

    #[test]
    fn previous_elapse_property() {
        let exprs = [
            "daily",
            "minutely",
            "*-*-* *:*:*",
            "*-*-* *:*:0/0.25",
            "*-02-29 00:00",
            "2021,2024,2030-06-01 12:00",
            "2100-01-01",
            "Mon..Fri *-*-* 09:00 Europe/Berlin",
            "*-*~1 23:59:59",
            "*-*-* 02:30",
            "*:0/15",
            "quarterly America/New_York",
        ];
        let ats = [
            "2026-03-29T00:59:59.999999Z",
            "2026-03-29T01:00:00Z",
            "2026-10-25T00:45:00Z",
            "2026-10-25T01:30:00Z",
            "2024-02-29T00:00:00Z",
            "2025-01-01T00:00:00.000001Z",
            "2026-11-29T11:24:00Z",
            "1970-01-01T00:00:30Z",
        ];
        for e in exprs {
            let spec = CalendarSpec::parse_in(e, berlin()).expect("valid");
            for at in ats {
                check_previous(&spec, ts(at));
            }
        }
        let leap = CalendarSpec::parse_in("*-02-29 00:00", TimeZone::UTC).expect("valid");
        assert_eq!(
            leap.previous_elapse(ts("2027-06-01T00:00:00Z")),
            Some(ts("2024-02-29T00:00:00Z"))
        );
        assert_eq!(
            leap.previous_elapse(ts("2024-02-29T00:00:00Z")),
            Some(ts("2024-02-29T00:00:00Z"))
        );
        let future = CalendarSpec::parse_in("2100-01-01", TimeZone::UTC).expect("valid");
        assert_eq!(future.previous_elapse(ts("2026-01-01T00:00:00Z")), None);
        let dense = CalendarSpec::parse_in("2020..2022-*-* *:*:*", TimeZone::UTC).expect("valid");
        assert_eq!(
            dense.previous_elapse(ts("2030-01-01T00:00:00Z")),
            Some(ts("2022-12-31T23:59:59Z"))
        );
    }

    /// Cost of the interval check, as the generator pays it once per job:
    /// `cargo test --release --lib interval_check_cost -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn interval_check_cost() {
        let from = ts("2026-12-01T00:00:00Z");
        for (e, limit) in [
            ("daily", 3_600_000_001),
            ("hourly", 1_000_001),
            ("minutely", 1_000_001),
            ("*:0/15", 600_000_001),
            ("Mon..Fri 09:00 Europe/Berlin", 1_000_001),
            ("*-*-* 02:00/15:00 Europe/Berlin", 1_000_001),
            ("*-*-1 03:00", 1_000_001),
            ("*:0/7", 400_000_001),
            ("*-*-1 00,23:00", 120_000_001),
            ("hourly Europe/Berlin", 301_000_000),
            ("*:0/15 America/New_York", 61_000_000),
            ("*:*:0/10", 1_000_000),
            ("Mon..Fri 09:00 Europe/Berlin", 1_801_000_000),
            ("*-*-* 01,03:30 Australia/Sydney", 601_000_000),
            ("*:0/7 Australia/Lord_Howe", 121_000_000),
        ] {
            let spec = CalendarSpec::parse_in(e, berlin()).expect("valid");
            let t0 = std::time::Instant::now();
            let n = 20;
            let mut r = None;
            for _ in 0..n {
                r = spec.interval_at_most(limit, from);
            }
            println!(
                "{e} (limit {limit} µs): {:?} per check, {r:?}",
                t0.elapsed() / n
            );
        }
    }

    /// The daylight-saving changes of `tz` in 2025 to 2027, µs since the epoch.
    fn dst_changes(tz: &TimeZone) -> Vec<i64> {
        let from = ts("2025-01-01T00:00:00Z");
        let to = ts("2028-01-01T00:00:00Z");
        tz.following(from)
            .take_while(|t| t.timestamp() < to)
            .map(|t| t.timestamp().as_microsecond())
            .collect()
    }

    pub(crate) const DST_ZONES: &[&str] = &[
        "Europe/Berlin",
        "America/New_York",
        "Australia/Sydney",
        "Australia/Lord_Howe",
        "America/Santiago",
        "Europe/Dublin",
    ];

    pub(crate) const DST_SCHEDULES: &[&str] = &[
        "hourly",
        "*:0/15",
        "*-*-* 02:30",
        "*-*-* 01:30",
        "*-*-* 02:00/15:00",
        "*:0/7",
        "*-*-* 00:00",
        "weekly",
        "Sun *-*-* 01:45,02:15",
    ];

    /// Issue 9 §5.5: the backward search returns exactly the elapses a timer reaches by
    /// iterating `next_elapse` from well before (systemd's timers do that), across
    /// daylight-saving changes in both directions and hemispheres. At a fall-back, local
    /// times of the repeated hour that the iteration never reaches are not elapses.
    #[test]
    fn previous_elapse_is_the_last_element_of_the_forward_orbit() {
        let mut failures = Vec::new();
        let mut checked = 0usize;
        for zone in DST_ZONES {
            let tz = TimeZone::get(zone).expect("zone");
            let changes = dst_changes(&tz);
            assert!(changes.len() >= 5, "{zone}: {changes:?}");
            for expr in DST_SCHEDULES {
                let spec = CalendarSpec::parse_in(expr, tz.clone()).expect("valid");
                for &t in &changes {
                    let day = 86_400_000_000;
                    // The orbit from eight days before (a week plus a day, for weekly).
                    let mut orbit = Vec::new();
                    let mut cur = Timestamp::from_microsecond(t - 8 * day).expect("valid");
                    while let Some(n) = spec.next_elapse(cur) {
                        orbit.push(n.as_microsecond());
                        if n.as_microsecond() > t + day {
                            break;
                        }
                        cur = n;
                    }
                    let mut ats = Vec::new();
                    for w in orbit.windows(2) {
                        let (a, b) = (w[0], w[1]);
                        if b < t - 6 * 3_600_000_000 || a > t + 6 * 3_600_000_000 {
                            continue;
                        }
                        ats.extend([a, a + 1, a + (b - a) / 3, a + (b - a) / 2, b - 1]);
                    }
                    // And every 5 minutes around the change, where folds are.
                    let step = 300_000_000;
                    let mut x = t - 3 * 3_600_000_000;
                    while x < t + 3 * 3_600_000_000 {
                        ats.push(x);
                        x += step;
                    }
                    for at in ats {
                        let Some(i) = orbit.iter().rposition(|&o| o <= at) else {
                            continue;
                        };
                        if i + 1 == orbit.len() {
                            continue;
                        }
                        checked += 1;
                        let want = orbit[i];
                        let got = spec
                            .previous_elapse(Timestamp::from_microsecond(at).expect("valid"))
                            .map(|p| p.as_microsecond());
                        if got != Some(want) {
                            failures.push(format!(
                                "{expr:?} in {zone} at {}: previous {:?}, orbit {}",
                                Timestamp::from_microsecond(at).expect("valid"),
                                got.map(|g| Timestamp::from_microsecond(g).expect("valid")),
                                Timestamp::from_microsecond(want).expect("valid"),
                            ));
                        }
                    }
                }
            }
        }
        assert!(checked > 10_000, "checked only {checked}");
        assert!(
            failures.is_empty(),
            "{} of {checked} wrong, first 40:\n{}",
            failures.len(),
            failures
                .iter()
                .take(40)
                .cloned()
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
}

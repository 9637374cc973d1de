//! systemd calendar events (`OnCalendar=`), evaluated the way systemd evaluates them.
//!
//! Parses the whole grammar of systemd.time(7) "CALENDAR EVENTS" as systemd 252 does
//! ([`spec`]) and computes the next elapse after a point in time (what a timer does) and
//! the previous elapse at or before one (the slot a run belongs to) ([`elapse`]).
//! Daylight-saving gaps and folds come out as systemd's, because the arithmetic goes
//! through a reproduction of glibc's `mktime` ([`tm`]). Also parses and prints
//! timestamps in systemd's syntax ([`timestamp`]). Time zones come from the system tzdb
//! through jiff. Printing in `systemd-analyze calendar`'s format lives in
//! [`crate::cli::calendar`]; this module has no I/O beyond reading time zone data.

use std::fmt;

use jiff::Timestamp;
use jiff::tz::TimeZone;

mod elapse;
mod spec;
pub mod timestamp;
mod tm;

pub use timestamp::{format_relative, format_timestamp, parse_timestamp};

pub(crate) use elapse::NextError;
use spec::Spec;
pub(crate) use tm::LibcState;
use tm::Zone;

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
pub(crate) fn local_zone() -> TimeZone {
    TimeZone::system()
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

    /// The latest elapse at or before `at`: the slot a run fired at `at` belongs to.
    /// It is an elapse [`CalendarSpec::next_elapse`] yields (`next_elapse(p - 1µs) ==
    /// p`) and no elapse lies after it up to `at`; `None` when nothing elapses at or
    /// before `at`.
    pub fn previous_elapse(&self, at: Timestamp) -> Option<Timestamp> {
        let usec = elapse::previous_usec(&self.spec, &self.zone, at.as_microsecond())?;
        Timestamp::from_microsecond(usec).ok()
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

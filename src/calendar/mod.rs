//! systemd calendar events (`OnCalendar=`), evaluated the way systemd evaluates them.
//!
//! Parses the whole grammar of systemd.time(7) "CALENDAR EVENTS" and computes the next
//! elapse after a point in time (what a timer does) and the previous elapse at or before
//! one (the slot a run belongs to). Time zones come from the system tzdb through jiff.
//! Printing in `systemd-analyze calendar`'s format lives in [`crate::cli`]; this module
//! has no I/O beyond reading time zone data.

use std::fmt;

use jiff::Timestamp;

/// A parsed `OnCalendar=` expression.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CalendarSpec {
    original: String,
}

/// Why an expression is not a valid calendar event.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid calendar expression {expr:?}: {reason}")]
pub struct CalendarError {
    /// The expression as given.
    pub expr: String,
    /// What is wrong, in a few words.
    pub reason: String,
}

impl CalendarSpec {
    /// Parses an expression in the syntax of systemd.time(7), "CALENDAR EVENTS".
    ///
    /// # Errors
    /// [`CalendarError`] when systemd would reject the expression.
    pub fn parse(expr: &str) -> Result<Self, CalendarError> {
        Err(CalendarError {
            expr: expr.to_string(),
            reason: "calendar engine not built yet".into(),
        })
    }

    /// The first elapse strictly after `after`, or `None` when there is none
    /// (e.g. a year in the past). Same rule as systemd's `calendar_spec_next_usec()`.
    pub fn next_elapse(&self, after: Timestamp) -> Option<Timestamp> {
        let _ = after;
        None
    }

    /// The latest elapse at or before `at`: the slot a run fired at `at` belongs to.
    pub fn previous_elapse(&self, at: Timestamp) -> Option<Timestamp> {
        let _ = at;
        None
    }

    /// The IANA name of the time zone the expression is evaluated in: its own zone when
    /// it names one, `"UTC"` for UTC, else the system's local zone.
    pub fn zone_name(&self) -> String {
        String::from("UTC")
    }
}

impl fmt::Display for CalendarSpec {
    /// The normalized form, as `systemd-analyze calendar` prints it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.original)
    }
}

/// Parses a timestamp in systemd's syntax (systemd.time(7), "PARSING TIMESTAMPS"),
/// relative to `now`.
///
/// # Errors
/// [`CalendarError`] when systemd would reject it.
pub fn parse_timestamp(s: &str, now: Timestamp) -> Result<Timestamp, CalendarError> {
    let _ = now;
    s.parse::<Timestamp>().map_err(|e| CalendarError {
        expr: s.to_string(),
        reason: e.to_string(),
    })
}

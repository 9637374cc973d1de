//! A job's schedule: one or more `OnCalendar=` expressions. systemd.timer(5): "may be
//! specified more than once, in which case the timer unit will trigger whenever any of
//! the specified expressions elapse". Its elapses are the union of the expressions'.

use std::fmt;

use jiff::Timestamp;

use super::{CalendarSpec, INTERVAL_SCAN_ELAPSES, INTERVAL_SCAN_USEC, Interval};

/// One or more calendar expressions, all evaluated in one time zone (a slot names one
/// zone). Built by [`Schedule::new`]; never empty.
#[derive(Debug, Clone)]
pub struct Schedule {
    specs: Vec<CalendarSpec>,
    /// Each expression as written (the job list's text, or the normalized form).
    texts: Vec<String>,
}

impl Schedule {
    /// The schedule of `specs`, in the order given, each written in its normalized form.
    ///
    /// # Errors
    /// As [`Schedule::written`].
    pub fn new(specs: Vec<CalendarSpec>) -> Result<Schedule, String> {
        Schedule::written(specs.into_iter().map(|s| (s.to_string(), s)).collect())
    }

    /// The schedule of `parts`: each expression as written, and parsed.
    ///
    /// # Errors
    /// A message when `parts` is empty, or when two expressions are evaluated in
    /// different zones (a slot is a time in one zone; give every expression the same
    /// zone, or none).
    pub fn written(parts: Vec<(String, CalendarSpec)>) -> Result<Schedule, String> {
        let (texts, specs): (Vec<String>, Vec<CalendarSpec>) = parts.into_iter().unzip();
        let Some(first) = specs.first() else {
            return Err("a schedule needs at least one calendar expression".to_string());
        };
        let zone = first.zone_name();
        if let Some(other) = specs.iter().find(|s| s.zone_name() != zone) {
            return Err(format!(
                "the expressions of one schedule must be in one time zone: {first} is in {zone}, {other} in {}",
                other.zone_name()
            ));
        }
        Ok(Schedule { specs, texts })
    }

    /// The schedule of one expression.
    pub fn single(spec: CalendarSpec) -> Schedule {
        Schedule {
            texts: vec![spec.to_string()],
            specs: vec![spec],
        }
    }

    /// The expressions, in the order given.
    pub fn specs(&self) -> &[CalendarSpec] {
        &self.specs
    }

    /// The expressions as written, in the order given: one `OnCalendar=` line each.
    pub fn texts(&self) -> &[String] {
        &self.texts
    }

    /// The first elapse strictly after `after`: the earliest of the expressions' next
    /// elapses ([`CalendarSpec::next_elapse`]), as a timer with several `OnCalendar=`
    /// computes it. `None` when no expression elapses again.
    pub fn next_elapse(&self, after: Timestamp) -> Option<Timestamp> {
        self.specs.iter().filter_map(|s| s.next_elapse(after)).min()
    }

    /// The latest elapse at or before `at`: the latest of the expressions' own previous
    /// elapses ([`CalendarSpec::previous_elapse`]), the slot a run started at `at`
    /// belongs to. `None` when nothing elapses at or before `at`.
    pub fn previous_elapse(&self, at: Timestamp) -> Option<Timestamp> {
        self.specs
            .iter()
            .filter_map(|s| s.previous_elapse(at))
            .max()
    }

    /// Two consecutive elapses after `from` that are `limit_usec` µs apart or less, as
    /// [`CalendarSpec::interval_at_most`] finds them for one expression; for several, the
    /// same window is walked over their union, so an elapse of one expression just after
    /// one of another counts too.
    pub fn interval_at_most(&self, limit_usec: i64, from: Timestamp) -> Option<Interval> {
        if let [one] = self.specs.as_slice() {
            return one.interval_at_most(limit_usec, from);
        }
        let mut previous = self.next_elapse(from)?;
        let first = previous.as_microsecond();
        for _ in 0..INTERVAL_SCAN_ELAPSES {
            let next = self.next_elapse(previous)?;
            let (a, b) = (previous.as_microsecond(), next.as_microsecond());
            if b - first > INTERVAL_SCAN_USEC {
                return None;
            }
            if b - a <= limit_usec {
                return Some(Interval {
                    usec: b - a,
                    from_usec: a,
                    to_usec: b,
                });
            }
            previous = next;
        }
        None
    }

    /// The IANA name of the zone the expressions are evaluated in
    /// ([`CalendarSpec::zone_name`]).
    pub fn zone_name(&self) -> String {
        self.specs[0].zone_name()
    }
}

impl From<CalendarSpec> for Schedule {
    fn from(spec: CalendarSpec) -> Schedule {
        Schedule::single(spec)
    }
}

impl fmt::Display for Schedule {
    /// The normalized forms (as `systemd-analyze calendar` prints them), joined by `; `:
    /// one expression prints as itself.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, s) in self.specs.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            s.fmt(f)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> Timestamp {
        s.parse().expect("timestamp")
    }

    fn list(exprs: &[&str]) -> Schedule {
        Schedule::new(
            exprs
                .iter()
                .map(|e| CalendarSpec::parse(e).expect("expression"))
                .collect(),
        )
        .expect("schedule")
    }

    /// cron's `0 2 1 * 5` (day 1 of the month OR a Friday) as two expressions: the
    /// elapses are the union, in order, and each previous elapse is the latest of both.
    #[test]
    fn a_list_elapses_at_every_elapse_of_each_expression() {
        let s = list(&["*-*-01 02:00:00 UTC", "Fri *-*-* 02:00:00 UTC"]);
        let mut t = at("2026-12-24T00:00:00Z");
        let mut seen = Vec::new();
        for _ in 0..4 {
            t = s.next_elapse(t).expect("next");
            seen.push(t.to_string());
        }
        assert_eq!(
            seen,
            [
                "2026-12-25T02:00:00Z",
                "2027-01-01T02:00:00Z",
                "2027-01-08T02:00:00Z",
                "2027-01-15T02:00:00Z"
            ]
        );
        // 2027-01-01 is both a Friday and day 1: one elapse.
        assert_eq!(
            s.previous_elapse(at("2027-01-07T00:00:00Z"))
                .map(|t| t.to_string()),
            Some("2027-01-01T02:00:00Z".to_string())
        );
        assert_eq!(
            s.previous_elapse(at("2026-12-31T23:00:00Z"))
                .map(|t| t.to_string()),
            Some("2026-12-25T02:00:00Z".to_string())
        );
        assert_eq!(s.to_string(), "*-*-01 02:00:00 UTC; Fri *-*-* 02:00:00 UTC");
    }

    #[test]
    fn expressions_in_different_zones_are_refused() {
        let specs = vec![
            CalendarSpec::parse("*-*-* 02:00:00 UTC").unwrap(),
            CalendarSpec::parse("*-*-* 02:00:00 Europe/Berlin").unwrap(),
        ];
        let e = Schedule::new(specs).unwrap_err();
        assert!(e.contains("one time zone"), "{e}");
        assert!(Schedule::new(Vec::new()).is_err());
    }

    /// Two daily expressions 30 minutes apart: their union has a 30-minute interval that
    /// neither has alone.
    #[test]
    fn the_shortest_interval_of_a_list_is_looked_for_across_its_expressions() {
        let s = list(&["*-*-* 02:00:00 UTC", "*-*-* 02:30:00 UTC"]);
        let found = s
            .interval_at_most(30 * 60 * 1_000_000, at("2026-12-01T00:00:00Z"))
            .expect("an interval");
        assert_eq!(found.usec, 30 * 60 * 1_000_000);
        assert!(
            s.interval_at_most(29 * 60 * 1_000_000, at("2026-12-01T00:00:00Z"))
                .is_none()
        );
    }
}

//! Time spans in systemd's syntax: `2min`, `1h 30min`, `90`, `1.5h`, `infinity`.
//!
//! Parsing follows `parse_sec()` of systemd (systemd.time(7), "PARSING TIME SPANS"): a
//! sequence of numbers, each with an optional unit (a bare number is seconds), added up;
//! spaces between the parts and between a number and its unit are optional; fractions
//! are allowed (`1.5h`, `.5s`) and are cut at the microsecond; `infinity` stands alone.
//! Printing follows `format_timespan()` with an accuracy of 1 µs, which is what
//! `systemd-analyze timespan` prints as "Human:". This module only converts text; which
//! spans make sense for which key is decided by [`crate::joblist::config`].

use std::fmt;
use std::time::Duration;

const USEC_PER_SEC: u64 = 1_000_000;
const USEC_PER_MINUTE: u64 = 60 * USEC_PER_SEC;
const USEC_PER_HOUR: u64 = 60 * USEC_PER_MINUTE;
const USEC_PER_DAY: u64 = 24 * USEC_PER_HOUR;
const USEC_PER_WEEK: u64 = 7 * USEC_PER_DAY;
/// 30.44 days, as systemd counts a month.
const USEC_PER_MONTH: u64 = 2_629_800 * USEC_PER_SEC;
/// 365.25 days, as systemd counts a year.
const USEC_PER_YEAR: u64 = 31_557_600 * USEC_PER_SEC;

/// Unit suffixes in the order systemd tries them (the first prefix that matches wins,
/// so longer spellings come before their prefixes).
const PARSE_UNITS: &[(&str, u64)] = &[
    ("seconds", USEC_PER_SEC),
    ("second", USEC_PER_SEC),
    ("sec", USEC_PER_SEC),
    ("s", USEC_PER_SEC),
    ("minutes", USEC_PER_MINUTE),
    ("minute", USEC_PER_MINUTE),
    ("min", USEC_PER_MINUTE),
    ("months", USEC_PER_MONTH),
    ("month", USEC_PER_MONTH),
    ("M", USEC_PER_MONTH),
    ("msec", 1_000),
    ("ms", 1_000),
    ("m", USEC_PER_MINUTE),
    ("hours", USEC_PER_HOUR),
    ("hour", USEC_PER_HOUR),
    ("hr", USEC_PER_HOUR),
    ("h", USEC_PER_HOUR),
    ("days", USEC_PER_DAY),
    ("day", USEC_PER_DAY),
    ("d", USEC_PER_DAY),
    ("weeks", USEC_PER_WEEK),
    ("week", USEC_PER_WEEK),
    ("w", USEC_PER_WEEK),
    ("years", USEC_PER_YEAR),
    ("year", USEC_PER_YEAR),
    ("y", USEC_PER_YEAR),
    ("usec", 1),
    ("us", 1),
    ("\u{3bc}s", 1),
    ("\u{b5}s", 1),
];

/// Units used when printing, largest first.
const FORMAT_UNITS: &[(&str, u64)] = &[
    ("y", USEC_PER_YEAR),
    ("month", USEC_PER_MONTH),
    ("w", USEC_PER_WEEK),
    ("d", USEC_PER_DAY),
    ("h", USEC_PER_HOUR),
    ("min", USEC_PER_MINUTE),
    ("s", USEC_PER_SEC),
    ("ms", 1_000),
    ("us", 1),
];

/// systemd's whitespace set for these parsers.
fn is_ws(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\n' | b'\r')
}

/// A time span in microseconds, or infinity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TimeSpan {
    usec: u64,
}

/// Why a string is not a time span.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TimeSpanError {
    /// Empty, a stray character, a unit systemd does not know, a dot without digits.
    #[error("invalid time span {0:?}")]
    Invalid(String),
    /// A minus sign anywhere, or a sum that does not fit in 64-bit microseconds.
    #[error("time span {0:?} is out of range")]
    OutOfRange(String),
}

impl TimeSpan {
    /// The span `infinity`.
    pub const INFINITY: TimeSpan = TimeSpan { usec: u64::MAX };
    /// The empty span, `0`.
    pub const ZERO: TimeSpan = TimeSpan { usec: 0 };

    /// A span of `usec` microseconds (`u64::MAX` is infinity).
    pub const fn from_usec(usec: u64) -> Self {
        TimeSpan { usec }
    }

    /// A finite span; saturates to one microsecond below infinity.
    pub fn from_duration(d: Duration) -> Self {
        let usec = u64::try_from(d.as_micros()).unwrap_or(u64::MAX - 1);
        TimeSpan {
            usec: usec.min(u64::MAX - 1),
        }
    }

    /// Microseconds; `u64::MAX` for infinity.
    pub const fn as_usec(self) -> u64 {
        self.usec
    }

    /// Whether this is `infinity`.
    pub const fn is_infinite(self) -> bool {
        self.usec == u64::MAX
    }

    /// The span as a [`Duration`], or `None` for infinity.
    pub fn as_duration(self) -> Option<Duration> {
        (!self.is_infinite()).then(|| Duration::from_micros(self.usec))
    }

    /// Parses a span as systemd's `parse_sec()` does: a bare number is seconds.
    ///
    /// # Errors
    /// [`TimeSpanError::Invalid`] for text systemd rejects with `EINVAL`,
    /// [`TimeSpanError::OutOfRange`] for a negative number or an overflow (`ERANGE`).
    pub fn parse(text: &str) -> Result<Self, TimeSpanError> {
        let invalid = || TimeSpanError::Invalid(text.to_string());
        let range = || TimeSpanError::OutOfRange(text.to_string());
        let b = text.as_bytes();
        let mut p = skip_ws(b, 0);
        if let Some(rest) = b[p..].strip_prefix(b"infinity") {
            return if rest.iter().all(|&c| is_ws(c)) {
                Ok(Self::INFINITY)
            } else {
                Err(invalid())
            };
        }
        let mut total: u64 = 0;
        let mut something = false;
        loop {
            p = skip_ws(b, p);
            if p >= b.len() {
                if !something {
                    return Err(invalid());
                }
                break;
            }
            if b[p] == b'-' {
                return Err(range());
            }
            // strtoll(): optional sign, then digits.
            let mut e = p;
            if b[e] == b'+' {
                e += 1;
            }
            let digits_start = e;
            while e < b.len() && b[e].is_ascii_digit() {
                e += 1;
            }
            let int: u64 = if e == digits_start {
                // strtoll() consumed nothing.
                e = p;
                0
            } else {
                // strtoll() stops at LLONG_MAX with ERANGE.
                let v: u64 = text[digits_start..e].parse().map_err(|_| range())?;
                if v > i64::MAX as u64 {
                    return Err(range());
                }
                v
            };
            let has_dot = e < b.len() && b[e] == b'.';
            let after_number;
            if has_dot {
                let mut q = e + 1;
                while q < b.len() && b[q].is_ascii_digit() {
                    q += 1;
                }
                after_number = q;
            } else if e == p {
                return Err(invalid());
            } else {
                after_number = e;
            }
            let unit_start = skip_ws(b, after_number);
            let (multiplier, s) = match extract_multiplier(&b[unit_start..]) {
                Some((m, len)) => (m, unit_start + len),
                None => (USEC_PER_SEC, unit_start),
            };
            if s == after_number && s < b.len() {
                return Err(invalid());
            }
            p = s;
            if int >= u64::MAX / multiplier {
                return Err(range());
            }
            let k = int * multiplier;
            if k >= u64::MAX - total {
                return Err(range());
            }
            total += k;
            something = true;
            if has_dot {
                let mut m = multiplier / 10;
                let mut q = e + 1;
                while q < b.len() && b[q].is_ascii_digit() {
                    let k = u64::from(b[q] - b'0') * m;
                    if k >= u64::MAX - total {
                        return Err(range());
                    }
                    total += k;
                    m /= 10;
                    q += 1;
                }
                if q == e + 1 {
                    return Err(invalid());
                }
            }
        }
        Ok(TimeSpan { usec: total })
    }
}

fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && is_ws(b[i]) {
        i += 1;
    }
    i
}

/// The multiplier of the unit at the start of `s` and the unit's length in bytes.
fn extract_multiplier(s: &[u8]) -> Option<(u64, usize)> {
    PARSE_UNITS
        .iter()
        .find(|(suffix, _)| s.starts_with(suffix.as_bytes()))
        .map(|(suffix, m)| (*m, suffix.len()))
}

impl fmt::Display for TimeSpan {
    /// The span as `format_timespan(…, 1)` prints it: `1h 30min`, `1.500000s`, `0`,
    /// `infinity`. systemd parses the result back to the same number.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_infinite() {
            return f.write_str("infinity");
        }
        let mut t = self.usec;
        if t == 0 {
            return f.write_str("0");
        }
        let mut first = true;
        for &(suffix, unit) in FORMAT_UNITS {
            if t == 0 {
                break;
            }
            if t < unit {
                continue;
            }
            let a = t / unit;
            let b = t % unit;
            let sep = if first { "" } else { " " };
            first = false;
            if t < USEC_PER_MINUTE && b > 0 {
                let mut width = 0usize;
                let mut cc = unit;
                while cc > 1 {
                    width += 1;
                    cc /= 10;
                }
                if width > 0 {
                    write!(f, "{sep}{a}.{b:0width$}{suffix}")?;
                    break;
                }
            }
            write!(f, "{sep}{a}{suffix}")?;
            t = b;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn us(s: &str) -> u64 {
        TimeSpan::parse(s)
            .map(TimeSpan::as_usec)
            .unwrap_or_else(|e| panic!("{s:?}: {e}"))
    }

    #[test]
    fn parses_the_forms_of_systemd_time_7() {
        assert_eq!(us("2min"), 120 * USEC_PER_SEC);
        assert_eq!(us("1h 30min"), 90 * USEC_PER_MINUTE);
        assert_eq!(us("1h30min"), 90 * USEC_PER_MINUTE);
        assert_eq!(us("90"), 90 * USEC_PER_SEC);
        assert_eq!(us("5s"), 5 * USEC_PER_SEC);
        assert_eq!(us("1.5h"), 90 * USEC_PER_MINUTE);
        assert_eq!(us(".5s"), 500_000);
        assert_eq!(us("5 min"), 5 * USEC_PER_MINUTE);
        assert_eq!(us("2 weeks 1d"), 15 * USEC_PER_DAY);
        assert_eq!(us("1M"), USEC_PER_MONTH);
        assert_eq!(us("1m"), USEC_PER_MINUTE);
        assert_eq!(us("1y"), USEC_PER_YEAR);
        assert_eq!(us("3.7us"), 3);
        assert_eq!(us("7\u{b5}s"), 7);
        assert_eq!(us("7\u{3bc}s"), 7);
        assert_eq!(us("5 5"), 10 * USEC_PER_SEC);
        assert_eq!(us("+5s"), 5 * USEC_PER_SEC);
        assert_eq!(us("0"), 0);
        assert!(TimeSpan::parse(" infinity ").is_ok_and(TimeSpan::is_infinite));
    }

    #[test]
    fn rejects_what_systemd_rejects() {
        for bad in [
            "",
            " ",
            "5x",
            "5secs",
            "1.s",
            "3. 1",
            "12.34.56",
            "infinityx",
            "5 s s",
            "min",
        ] {
            assert!(
                matches!(TimeSpan::parse(bad), Err(TimeSpanError::Invalid(_))),
                "{bad:?} should be invalid"
            );
        }
        for bad in ["-1s", "1s -1s", "1000000000000y", "18446744073709551615us"] {
            assert!(
                matches!(TimeSpan::parse(bad), Err(TimeSpanError::OutOfRange(_))),
                "{bad:?} should be out of range"
            );
        }
    }

    #[test]
    fn formats_as_systemd_does() {
        let cases = [
            ("1.5h", "1h 30min"),
            ("90", "1min 30s"),
            (".5s", "500ms"),
            ("1.5", "1.500000s"),
            ("61.5s", "1min 1.500000s"),
            ("1min 0.5s", "1min 500ms"),
            ("1M", "1month"),
            ("1w 2d", "1w 2d"),
            ("0", "0"),
            ("infinity", "infinity"),
            ("3us", "3us"),
        ];
        for (input, want) in cases {
            assert_eq!(
                TimeSpan::parse(input).map(|t| t.to_string()).as_deref(),
                Ok(want),
                "{input}"
            );
        }
    }

    #[test]
    fn durations_convert_both_ways() {
        let t = TimeSpan::from_duration(Duration::from_millis(1500));
        assert_eq!(t.as_usec(), 1_500_000);
        assert_eq!(t.as_duration(), Some(Duration::from_millis(1500)));
        assert_eq!(TimeSpan::INFINITY.as_duration(), None);
    }
}

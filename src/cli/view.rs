//! How runs and leases are shown to people and scripts: one JSON shape and one table
//! shape, shared by `history` and `status`.

use serde_json::{Value, json};

use crate::guard::lease::Lease;
use crate::guard::ledger::{Run, format_usec};

/// A run as a JSON object: times as RFC 3339 UTC strings plus `*_usec` (µs since the
/// epoch) twins for arithmetic.
pub fn run_json(r: &Run) -> Value {
    json!({
        "run_id": r.run_id,
        "job": r.job,
        "slot": r.slot.rfc3339(),
        "slot_usec": r.slot.usec,
        "slot_zone": r.slot.zone,
        "attempt": r.attempt,
        "outcome": r.outcome.as_str(),
        "reason": r.reason,
        "exit_status": r.exit_status,
        "forced": r.forced,
        "trigger": r.trigger,
        "host": r.host,
        "machine_id": r.machine_id,
        "boot_id": r.boot_id,
        "pid": r.pid,
        "invocation_id": r.invocation_id,
        "started_at": format_usec(r.started_at),
        "started_at_usec": r.started_at,
        "finished_at": r.finished_at.map(format_usec),
        "finished_at_usec": r.finished_at,
        "duration_usec": duration_usec(r),
        "fencing_token": r.fencing_token,
        "report": r.report,
        "resolution": r.resolution.map(|x| x.as_str()),
        "idempotency_key": r.slot.idempotency_key(&r.job),
    })
}

/// How long a finished run took, in µs: from its start to its end, both by the store's
/// clock. A run found cut ends at the latest it can have run
/// ([`crate::store::rules::cut_end`]), so the downtime until it was found is not counted.
/// `None` while it runs.
pub fn duration_usec(r: &Run) -> Option<i64> {
    r.finished_at.map(|f| (f - r.started_at).max(0))
}

/// A lease as a JSON object.
pub fn lease_json(l: &Lease) -> Value {
    json!({
        "job": l.job,
        "holder": l.holder,
        "host": l.host,
        "fencing_token": l.token,
        "acquired_at": format_usec(l.acquired_at),
        "expire_at": format_usec(l.expire_at),
    })
}

/// A duration in µs in at most 6 characters, rounded down, for the narrow `status`
/// table's STATE: `3d04h`, `1h02m`, `12m`, `45s`.
pub fn short_span(usec: i64) -> String {
    let s = usec.max(0) / 1_000_000;
    if s >= 86_400 {
        format!("{}d{:02}h", s / 86_400, (s % 86_400) / 3600)
    } else if s >= 3600 {
        format!("{}h{:02}m", s / 3600, (s % 3600) / 60)
    } else if s >= 60 {
        format!("{}m", s / 60)
    } else {
        format!("{s}s")
    }
}

/// A time (µs since the epoch) in UTC for the narrow `status` table: `12-08 02:00Z`, with
/// seconds when it has some (`12-08 02:00:30Z`), and the year when it is not the year of
/// `now_usec` (`2027-01-04 02:00Z`).
pub fn short_time(usec: i64, now_usec: i64) -> String {
    let f = |u: i64, format: &str| {
        jiff::Timestamp::from_microsecond(u)
            .map(|t| t.strftime(format).to_string())
            .unwrap_or_default()
    };
    let date = if f(usec, "%Y") == f(now_usec, "%Y") {
        f(usec, "%m-%d")
    } else {
        f(usec, "%Y-%m-%d")
    };
    let time = if usec.rem_euclid(60_000_000) == 0 {
        f(usec, "%H:%M")
    } else {
        f(usec, "%H:%M:%S")
    };
    format!("{date} {time}Z")
}

/// Prints rows as a table with a header, columns padded to their widest cell.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    debug_assert!(
        rows.iter().all(|r| r.len() == header.len()),
        "every row has a cell per column: {header:?} {rows:?}"
    );
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if let Some(w) = widths.get_mut(i) {
                *w = (*w).max(cell.chars().count());
            }
        }
    }
    let line = |cells: Vec<&str>| {
        let mut out = String::new();
        for (i, c) in cells.iter().enumerate() {
            if i + 1 == cells.len() {
                out.push_str(c);
            } else {
                out.push_str(&format!("{c:<w$}  ", w = widths[i]));
            }
        }
        out.trim_end().to_string()
    };
    let mut out = line(header.to_vec());
    out.push('\n');
    for row in rows {
        out.push_str(&line(row.iter().map(String::as_str).collect()));
        out.push('\n');
    }
    out
}

/// One line per run for `history`.
pub fn run_row(r: &Run) -> Vec<String> {
    let dur = duration_usec(r).map_or_else(|| "-".into(), crate::guard::ledger::format_span);
    let mut outcome = r.outcome.as_str().to_string();
    if let Some(res) = r.resolution {
        outcome.push_str(&format!(" ({})", res.as_str()));
    }
    if r.forced {
        outcome.push_str(" forced");
    }
    vec![
        r.slot.rfc3339(),
        r.attempt.to_string(),
        outcome,
        r.reason.clone().unwrap_or_else(|| "-".into()),
        r.exit_status
            .map(|s| s.to_string())
            .unwrap_or_else(|| "-".into()),
        r.host.clone(),
        format_usec(r.started_at),
        dur,
        r.run_id.clone(),
        crate::shim::report::one_line(&r.report),
    ]
}

/// Header of [`run_row`].
pub const RUN_HEADER: [&str; 10] = [
    "SLOT", "ATTEMPT", "OUTCOME", "REASON", "EXIT", "HOST", "STARTED", "DURATION", "RUN", "REPORT",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_spans_fit_six_characters() {
        let s = 1_000_000;
        assert_eq!(short_span(6_200_000), "6s");
        assert_eq!(short_span(245 * s), "4m");
        assert_eq!(short_span(3723 * s), "1h02m");
        assert_eq!(short_span((3 * 86_400 + 4 * 3600 + 59) * s), "3d04h");
        for u in [-s, 0, 59 * s, 3599 * s, 86_399 * s, 99 * 86_400 * s] {
            assert!(short_span(u).chars().count() <= 6, "{}", short_span(u));
        }
    }

    #[test]
    fn short_times_drop_the_year_and_the_seconds_only_when_they_say_nothing() {
        // 2026-12-08T02:00:00Z and 2026-12-07T18:00:00Z.
        let slot = 1_796_695_200_000_000;
        let now = slot - 8 * 3600 * 1_000_000;
        assert_eq!(short_time(slot, now), "12-08 02:00Z");
        assert_eq!(short_time(slot + 30_000_000, now), "12-08 02:00:30Z");
        let next_year = slot + 30 * 86_400 * 1_000_000;
        assert_eq!(short_time(next_year, now), "2027-01-07 02:00Z");
    }
}

//! `jobguard calendar`: prints what `systemd-analyze calendar` (systemd 252) prints for
//! the same arguments, line for line: original and normalized form, the next elapses
//! in the local zone, "(in UTC)" when the local zone is not UTC, and the distance from
//! now. `--previous` prints the elapses at or before the base time instead, newest
//! first, labelled "Prev elapse:". Errors go to stderr in systemd's words; the exit
//! status is 1 when any expression is invalid.

use std::io::Write;

use jiff::Timestamp;
use jiff::tz::TimeZone;

use crate::calendar::timestamp::{
    is_systemd_timespan, is_systemd_timestamp, is_utc_zone, parse_timestamp_with_state,
};
use crate::calendar::{CalendarSpec, LibcState, NextError, format_relative, format_timestamp};
use crate::cli::CalendarArgs;
use crate::exit::{Error, Finished};

/// Width of the label column (that of "Normalized form:").
const LABEL_WIDTH: usize = 16;

/// Runs `jobguard calendar`: ends with 0, or 1 when an expression is invalid (its error
/// printed in systemd-analyze's words, [`Error::verbatim`], and the rest still shown), or
/// when stdout cannot be written.
///
/// # Errors
/// 1 for a base time that cannot be read.
pub fn run(args: &CalendarArgs) -> crate::exit::Result {
    let now = Timestamp::now();
    let local = crate::calendar::local_zone();
    // The C library state of one systemd-analyze process, carried from call to call.
    let mut state = LibcState::default();
    let base = match &args.base_time {
        None => now,
        Some(s) => match parse_timestamp_with_state(s, now, &local, &mut state) {
            Ok(t) => t,
            Err(_) => {
                return Err(Error::verbatim(
                    crate::exit::FAILURE,
                    format!("Failed to parse --base-time= parameter: {s}\n"),
                ));
            }
        },
    };
    let show_utc = !is_utc_zone(&local);
    let mut finished = Finished::OK;
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    for (i, expr) in args.exprs.iter().enumerate() {
        let mut block = String::new();
        let ctx = Ctx {
            base,
            now,
            args,
            local: &local,
            show_utc,
        };
        if let Err(msg) = render(expr, &ctx, &mut state, &mut block) {
            finished.report(&Error::verbatim(crate::exit::FAILURE, msg));
        }
        if i + 1 < args.exprs.len() {
            block.push('\n');
        }
        if out
            .write_all(block.as_bytes())
            .and_then(|()| out.flush())
            .is_err()
        {
            return Ok(Finished::with(crate::exit::FAILURE));
        }
    }
    Ok(finished)
}

/// One table row; like systemd's table printer, without trailing white space.
fn line(out: &mut String, label: &str, value: &str) {
    let row = format!("{label:>LABEL_WIDTH$} {value}");
    out.push_str(row.trim_end());
    out.push('\n');
}

/// What every expression's table is computed against.
struct Ctx<'a> {
    base: Timestamp,
    now: Timestamp,
    args: &'a CalendarArgs,
    local: &'a TimeZone,
    show_utc: bool,
}

/// Renders one expression's table into `out`, or returns the error text for stderr
/// (then `out` gets nothing, as systemd prints no table for a failed expression).
fn render(
    expr: &str,
    ctx: &Ctx<'_>,
    state: &mut LibcState,
    out: &mut String,
) -> Result<(), String> {
    let Ctx {
        base,
        now,
        args,
        local,
        show_utc,
    } = *ctx;
    let spec = match CalendarSpec::parse_emulated(expr, local.clone(), state) {
        Ok(s) => s,
        Err(e) => {
            let mut msg = format!(
                "Failed to parse calendar specification '{expr}': {}\n",
                e.kind.strerror()
            );
            if is_systemd_timestamp(expr, now, local, state) {
                msg.push_str(&format!(
                    "Hint: this expression is a valid timestamp. Use 'systemd-analyze timestamp \"{expr}\"' instead?\n"
                ));
            }
            if is_systemd_timespan(expr) {
                msg.push_str(&format!(
                    "Hint: this expression is a valid timespan. Use 'systemd-analyze timespan \"{expr}\"' instead?\n"
                ));
            }
            return Err(msg);
        }
    };
    let mut table = String::new();
    let normalized = spec.to_string();
    if normalized != expr {
        line(&mut table, "Original form:", expr);
    }
    line(&mut table, "Normalized form:", &normalized);

    let first_label = if args.previous {
        "Prev elapse:"
    } else {
        "Next elapse:"
    };
    let mut n = base.as_microsecond();
    let mut last_printed = None;
    for i in 0..args.iterations {
        let found = if args.previous {
            let at = if i == 0 { n } else { n - 1 };
            Ok(spec
                .previous_elapse(Timestamp::from_microsecond(at).unwrap_or(Timestamp::MIN))
                .map(|t| t.as_microsecond()))
        } else {
            match spec.next_usec(n, state) {
                Ok(v) => Ok(Some(v)),
                Err(NextError::NotFound) => Ok(None),
                Err(e) => Err(e),
            }
        };
        let elapse = match found {
            Ok(Some(v)) => v,
            Ok(None) => {
                if i == 0 {
                    line(&mut table, first_label, "never");
                }
                break;
            }
            Err(e) => {
                let mut msg = String::new();
                let errno = match e {
                    NextError::Loop => {
                        // systemd logs this from a forked child for an expression with
                        // its own zone, and the child's stderr is closed.
                        if !spec.has_own_zone() {
                            msg.push_str(&format!(
                                "Infinite loop in calendar calculation: {normalized}\n"
                            ));
                        }
                        "Resource deadlock avoided"
                    }
                    _ => "Invalid argument",
                };
                msg.push_str(&format!(
                    "Failed to determine next elapse for '{expr}': {errno}\n"
                ));
                return Err(msg);
            }
        };
        let Ok(t) = Timestamp::from_microsecond(elapse) else {
            break;
        };
        let label = if i == 0 {
            first_label.to_string()
        } else {
            format!("Iter. #{}:", i + 1)
        };
        line(&mut table, &label, &format_timestamp(t, Some(local)));
        // Printing converts to local time, which sets glibc's tzname[].
        last_printed = Some(t.as_second());
        if show_utc {
            line(&mut table, "(in UTC):", &format_timestamp(t, None));
        }
        line(&mut table, "From now:", &format_relative(t, now));
        n = elapse;
    }
    if last_printed.is_some() {
        state.last_local = last_printed;
    }
    out.push_str(&table);
    Ok(())
}

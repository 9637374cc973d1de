//! crontab(5) text translated into a jobguard job list (`jobguard import-crontab`).
//!
//! Reading follows crontab(5) as Debian's cron (Vixie cron 3.0) and cronie read it:
//! blank lines and lines starting with `#` are comments; `NAME = VALUE` lines set a
//! variable for the entries after them (a value in matching quotes keeps its spaces);
//! an entry is five time fields (minute, hour, day of month, month, day of week) or an
//! `@` keyword, then the user in a system table (`/etc/crontab`, `/etc/cron.d/*`), then
//! the command, which is the rest of the line. A field is `*` or a list of numbers,
//! ranges `a-b` and steps `/n`; months and days of the week also take their first three
//! letters (`jan`, `mon`); day of week 0 and 7 are both Sunday.
//!
//! The translation keeps cron's meaning, or says where it cannot:
//! - **Days.** When both day fields are restricted and neither starts with `*`, cron runs
//!   on either day (Vixie's rule); the job then gets two `OnCalendar=` expressions, one per
//!   day field, in a `schedule` list. When one of them starts with `*` (`*/2`), cron
//!   requires both, and so does the one expression written.
//! - **Daylight-saving changes** ([`dst_conflict`]): a time in a gap runs right after the
//!   jump under cron (for a job with a fixed minute and hour) but not that day under
//!   `OnCalendar=`; in a repeated hour, cron runs a job with `*` in its minute or hour
//!   field in both, `OnCalendar=` in the first only. Each such line gets a warning.
//! - **The command.** cron runs it with `$SHELL -c` (default `/bin/sh`): a command with
//!   no shell syntax becomes its words as argv; any other becomes `[SHELL, "-c", TEXT]`.
//!   An unescaped `%` ends the command; the text after it is the command's standard input,
//!   with each further `%` a newline. `\%` is a `%`. A `flock -n LOCK` wrapper is dropped:
//!   jobguard takes the job's lock.
//! - **Variables.** `CRON_TZ=` (or `TZ=`) becomes the schedule's zone, `RANDOM_DELAY=`
//!   (minutes, cronie) `randomized_delay`, `MAILTO=` the mail hook `jobguard-mail@.service`
//!   as `on_failure` (with what to set for the recipient in a comment); others go to
//!   `environment`.
//! - **Shared settings.** What every job of the import shares (the tables' `PATH` and
//!   `SHELL`, one `MAILTO`) is written once, in `[defaults]`; so is `catch_up = "none"`,
//!   since cron never runs a slot it missed, where jobguard's default runs the latest
//!   missed one at boot (a comment says when to delete it).
//! - **Names.** A job's name is its ledger key, so it must not change when the table
//!   does: it comes from its own line only ([`name_jobs`]), never from its position.
//! - **What has no slot.** `@reboot` is not a schedule; `L`, `W`, `#`, `?` and `H` are
//!   extensions that Debian's cron does not know. Such a line is kept as a comment with a
//!   warning and gets no job.
//!
//! Everything here is pure: reading files and printing is the command's
//! (`cli::import_crontab`).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use jiff::civil::{Date, DateTime};
use jiff::tz::TimeZone;
use jiff::{Timestamp, ToSpan};

/// Month names as crontab(5) accepts them (`jan` is 1).
const MONTHS: [&str; 12] = [
    "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
];
/// Day-of-week names as crontab(5) accepts them (`sun` is 0).
const DAYS: [&str; 7] = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];
/// Characters of cron extensions (Quartz, cronie's `H`) that Debian's cron does not know.
const EXTENSIONS: &[char] = &['L', 'W', '#', '?', 'H'];
/// systemd.time(7)'s weekday names, Sunday first as cron counts.
const SYSTEMD_DAYS: [&str; 7] = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"];

/// How many years ahead [`dst_conflict`] looks for a daylight-saving change that touches
/// a schedule.
pub const DST_LOOKAHEAD_YEARS: i16 = 10;

/// One time field of an entry: the values it allows, and whether its text started with
/// `*` (cron's rule for combining the day fields looks at that, not at the values).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    /// The allowed values (minutes 0–59, hours 0–23, days 1–31, months 1–12, days of
    /// week 0–6 with 0 Sunday).
    pub values: BTreeSet<u8>,
    /// The field's text starts with `*`.
    pub star: bool,
    min: u8,
    max: u8,
}

impl Field {
    /// Whether the field allows every value of its range.
    pub fn is_full(&self) -> bool {
        self.values.len() == usize::from(self.max - self.min) + 1
    }

    fn has(&self, v: u8) -> bool {
        self.values.contains(&v)
    }
}

/// The five time fields of a crontab entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CronTime {
    /// Minute, 0–59.
    pub minute: Field,
    /// Hour, 0–23.
    pub hour: Field,
    /// Day of month, 1–31.
    pub dom: Field,
    /// Month, 1–12.
    pub month: Field,
    /// Day of week, 0–6, 0 Sunday.
    pub dow: Field,
}

impl CronTime {
    /// Parses the five fields (crontab(5)); the error names the field and why.
    pub fn parse(fields: [&str; 5]) -> Result<CronTime, String> {
        Ok(CronTime {
            minute: parse_field(fields[0], "minute", 0, 59, None)?,
            hour: parse_field(fields[1], "hour", 0, 23, None)?,
            dom: parse_field(fields[2], "day of month", 1, 31, None)?,
            month: parse_field(fields[3], "month", 1, 12, Some((&MONTHS, 1)))?,
            dow: parse_field(fields[4], "day of week", 0, 7, Some((&DAYS, 0)))?,
        })
    }

    /// The fields of an `@` keyword (crontab(5)); `None` for `@reboot` and unknown ones.
    pub fn keyword(word: &str) -> Option<CronTime> {
        let fields = match word {
            "@yearly" | "@annually" => ["0", "0", "1", "1", "*"],
            "@monthly" => ["0", "0", "1", "*", "*"],
            "@weekly" => ["0", "0", "*", "*", "0"],
            "@daily" | "@midnight" => ["0", "0", "*", "*", "*"],
            "@hourly" => ["0", "*", "*", "*", "*"],
            _ => return None,
        };
        CronTime::parse(fields).ok()
    }

    /// Whether cron runs the entry on `date` (Vixie's rule: with both day fields
    /// restricted and neither starting with `*`, either day suffices; else both must
    /// match).
    pub fn runs_on(&self, date: Date) -> bool {
        if !self.month.has(date.month() as u8) {
            return false;
        }
        let dom = self.dom.has(date.day() as u8);
        let dow = self.dow.has(date.weekday().to_sunday_zero_offset() as u8);
        if self.dom.star || self.dow.star {
            dom && dow
        } else {
            dom || dow
        }
    }

    /// Whether cron runs the entry at the civil minute `at`.
    pub fn runs_at(&self, at: DateTime) -> bool {
        self.minute.has(at.minute() as u8)
            && self.hour.has(at.hour() as u8)
            && self.runs_on(at.date())
    }

    /// Whether cron treats the entry as a "wildcard" job across a clock change: one whose
    /// minute or hour field starts with `*` (Vixie cron's `MIN_STAR`/`HR_STAR`).
    pub fn is_wildcard(&self) -> bool {
        self.minute.star || self.hour.star
    }

    /// The `OnCalendar=` expressions (systemd.time(7)) that elapse exactly when cron
    /// runs the entry in civil time, each followed by ` ZONE` when `zone` is given: one
    /// expression, or two when cron takes either day field.
    pub fn on_calendar(&self, zone: Option<&str>) -> Vec<String> {
        let time = format!(
            "{}:{}:00",
            component(&self.hour, 0, 23, 2),
            component(&self.minute, 0, 59, 2)
        );
        let month = component(&self.month, 1, 12, 2);
        let dom = component(&self.dom, 1, 31, 2);
        let dow = weekdays(&self.dow);
        let suffix = zone.map(|z| format!(" {z}")).unwrap_or_default();
        let expr = |dow: &str, dom: &str| {
            let dow = if dow.is_empty() {
                String::new()
            } else {
                format!("{dow} ")
            };
            format!("{dow}*-{month}-{dom} {time}{suffix}")
        };
        let either = !self.dom.star && !self.dow.star && !self.dom.is_full() && !self.dow.is_full();
        if either {
            vec![expr(&dow, "*"), expr("", &dom)]
        } else if !self.dom.star && !self.dow.star && (self.dom.is_full() || self.dow.is_full()) {
            // Either day, and one of them is every day: every day.
            vec![expr("", "*")]
        } else {
            vec![expr(&dow, &dom)]
        }
    }
}

/// A warning when cron implementations disagree on how this entry's day fields combine:
/// Vixie cron (Debian's, cronie) takes either day when neither field's text starts with
/// `*`, others (croniter, some libraries) when neither field allows every value. The two
/// rules part where a field is written `*/N` beside a restricted one, or names every day
/// (`1-31`) beside a restricted one. jobguard follows Vixie cron.
fn day_rule_ambiguity(time: &CronTime) -> Option<String> {
    let vixie_either = !time.dom.star && !time.dow.star;
    let by_value_either = !time.dom.is_full() && !time.dow.is_full();
    if vixie_either == by_value_either || (time.dom.is_full() && time.dow.is_full()) {
        return None;
    }
    let rule = if vixie_either {
        "either day"
    } else {
        "both days"
    };
    Some(format!(
        "the day fields combine by how they are written: Debian's cron (Vixie) runs on {rule}, \
         as written here; cron implementations that look at the values differ"
    ))
}

/// Parses one field: `*`, or a comma list of `N`, `A-B`, each optionally `/STEP`
/// (`N/STEP` is `N-MAX/STEP`, as cronie reads it). `names` gives the three-letter names
/// and the value of the first.
fn parse_field(
    text: &str,
    what: &str,
    min: u8,
    max: u8,
    names: Option<(&[&str], u8)>,
) -> Result<Field, String> {
    let bad = |why: &str| format!("{what} field `{text}`: {why}");
    if text.is_empty() {
        return Err(bad("empty"));
    }
    if let Some(c) = text.chars().find(|c| EXTENSIONS.contains(c)) {
        return Err(bad(&format!(
            "`{c}` is an extension Debian's cron does not know (nor OnCalendar=)"
        )));
    }
    let number = |s: &str| -> Result<u8, String> {
        if let Some((list, first)) = names {
            let lower = s.to_ascii_lowercase();
            if let Some(i) = list.iter().position(|n| *n == lower) {
                return Ok(first + i as u8);
            }
        }
        if s.is_empty() {
            return Err(bad(
                "a number is missing (a negative number or a stray `-`?)",
            ));
        }
        let n: u8 = s.parse().map_err(|_| {
            bad(&format!(
                "`{s}` is not a number{}",
                if names.is_some() { " or name" } else { "" }
            ))
        })?;
        if n < min || n > max {
            return Err(bad(&format!("{n} is outside {min}-{max}")));
        }
        Ok(n)
    };
    let mut values = BTreeSet::new();
    for part in text.split(',') {
        let (range, step) = match part.split_once('/') {
            Some((r, s)) => {
                let s: u8 = s
                    .parse()
                    .map_err(|_| bad(&format!("step `{s}` is not a number")))?;
                if s == 0 {
                    return Err(bad("a step of 0"));
                }
                (r, s)
            }
            None => (part, 1),
        };
        let (lo, hi) = if range == "*" {
            (min, max)
        } else if let Some((a, b)) = range.split_once('-') {
            let (a, b) = (number(a)?, number(b)?);
            if a > b {
                return Err(bad(&format!("range {a}-{b} runs backwards")));
            }
            (a, b)
        } else {
            let a = number(range)?;
            if part.contains('/') { (a, max) } else { (a, a) }
        };
        let mut v = lo;
        while v <= hi {
            values.insert(v);
            v = match v.checked_add(step) {
                Some(n) => n,
                None => break,
            };
        }
    }
    // Day of week 7 is Sunday, as 0.
    let (min, max) = if max == 7 && names.is_some() {
        if values.remove(&7) {
            values.insert(0);
        }
        (0, 6)
    } else {
        (min, max)
    };
    Ok(Field {
        values,
        star: text.starts_with('*'),
        min,
        max,
    })
}

/// One field as an `OnCalendar=` component: `*`, `START/STEP` for a progression that
/// runs to the end of the range, else a list of values and `A..B` ranges.
///
/// `START/STEP` is written only where the step divides the range (or for days of the
/// month): systemd 252 skips minute 0 of midnight for `*:00/7` (after 23:56 it elapses at
/// 00:07, though at 01:00 every hour after), while the same minutes as a list elapse at
/// 00:00.
fn component(f: &Field, min: u8, max: u8, width: usize) -> String {
    if f.is_full() {
        return "*".into();
    }
    let v: Vec<u8> = f.values.iter().copied().collect();
    if v.len() >= 3 {
        let step = v[1] - v[0];
        let progression = v.windows(2).all(|w| w[1] - w[0] == step);
        let last = *v.last().unwrap_or(&min);
        let divides = (u16::from(max - min) + 1) % u16::from(step.max(1)) == 0 || max == 31;
        if progression && step > 1 && divides && u16::from(last) + u16::from(step) > u16::from(max)
        {
            return format!("{:0width$}/{step}", v[0]);
        }
    }
    let mut out = Vec::new();
    let mut i = 0;
    while i < v.len() {
        let mut j = i;
        while j + 1 < v.len() && v[j + 1] == v[j] + 1 {
            j += 1;
        }
        if j > i {
            out.push(format!("{:0width$}..{:0width$}", v[i], v[j]));
        } else {
            out.push(format!("{:0width$}", v[i]));
        }
        i = j + 1;
    }
    out.join(",")
}

/// The day-of-week field as systemd weekday names, Monday first; empty when it allows
/// every day.
fn weekdays(f: &Field) -> String {
    if f.is_full() {
        return String::new();
    }
    // Monday-first order (systemd.time(7) ranges run Mon..Sun).
    let order: Vec<u8> = (1..=6)
        .chain(std::iter::once(0))
        .filter(|d| f.has(*d))
        .collect();
    let pos = |d: u8| if d == 0 { 7 } else { d };
    let mut out = Vec::new();
    let mut i = 0;
    while i < order.len() {
        let mut j = i;
        while j + 1 < order.len() && pos(order[j + 1]) == pos(order[j]) + 1 {
            j += 1;
        }
        let name = |d: u8| SYSTEMD_DAYS[usize::from(d)];
        if j >= i + 2 {
            out.push(format!("{}..{}", name(order[i]), name(order[j])));
        } else {
            out.extend(order[i..=j].iter().map(|d| name(*d).to_string()));
        }
        i = j + 1;
    }
    out.join(",")
}

/// Where cron and `OnCalendar=` part ways at a daylight-saving change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DstConflict {
    /// The civil minute cron would run the job at, in the change's gap or repeated hour.
    pub at: DateTime,
    /// The clock jumps forward over `at` (else: `at` happens twice).
    pub gap: bool,
}

/// The first daylight-saving change of `tz` within [`DST_LOOKAHEAD_YEARS`] after `from`
/// where cron and `OnCalendar=` do not run `time` alike: a fixed-time job's run in the
/// skipped hour (cron runs it right after the jump; `OnCalendar=` skips that elapse), or
/// a wildcard job's run in the repeated hour (cron runs it in both, `OnCalendar=` in the
/// first only). A wildcard job's runs in a gap and a fixed-time job's in a repeated hour
/// are the same under both (skipped; once). Source: Vixie cron's `cron.c` (the "time warp"
/// rules) and systemd 252's `calendar_spec_next_usec()`.
pub fn dst_conflict(time: &CronTime, tz: &TimeZone, from: Timestamp) -> Option<DstConflict> {
    let until = from
        .checked_add((i64::from(DST_LOOKAHEAD_YEARS) * 366 * 24).hours())
        .ok()?;
    for t in tz.following(from) {
        let ts = t.timestamp();
        if ts > until {
            break;
        }
        let before = tz.to_offset(ts.checked_sub(1.second()).ok()?);
        let after = t.offset();
        let delta = after.seconds() - before.seconds();
        if delta == 0 {
            continue;
        }
        let gap = delta > 0;
        // The civil minutes that are skipped (gap) or repeated (fold).
        let start = if gap {
            before.to_datetime(ts)
        } else {
            after.to_datetime(ts)
        };
        let minutes = delta.unsigned_abs() / 60;
        for m in 0..minutes {
            let at = start.checked_add(i64::from(m).minutes()).ok()?;
            if time.runs_at(at) && gap != time.is_wildcard() {
                return Some(DstConflict { at, gap });
            }
        }
    }
    None
}

/// What a crontab line became.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Line {
    /// A comment or blank line, kept as it was.
    Comment(String),
    /// A variable assignment (already applied to the entries after it).
    Variable(String),
    /// An entry translated into a job.
    Job(Box<ImportedJob>),
    /// A line that gets no job (`@reboot`, an unknown extension, a bad field): kept as
    /// a comment with the reason, which is also among the warnings.
    Skipped {
        /// The line as written.
        source: String,
        /// Why it has no job.
        why: String,
    },
}

/// One crontab entry as a job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImportedJob {
    /// The job's name: its command's ([`name_of`]), then unique in the import
    /// ([`name_jobs`]).
    pub name: String,
    /// The next telling word after the one that named the job (`full` of
    /// `backup.sh --full`): the second part of its name ([`name_jobs`]).
    pub qualifier: Option<String>,
    /// The line as written.
    pub source: String,
    /// `OnCalendar=` expressions.
    pub schedule: Vec<String>,
    /// argv.
    pub command: Vec<String>,
    /// The user the command runs as, if the table says.
    pub user: Option<String>,
    /// Variables for the command.
    pub environment: BTreeMap<String, String>,
    /// `RANDOM_DELAY` in minutes.
    pub randomized_delay_min: Option<u32>,
    /// `MAILTO` as cron had it: `None` when unset (mail to the table's owner).
    pub mailto: Option<String>,
    /// Notes for the reader, written as comments above the job.
    pub notes: Vec<String>,
    /// The lock file of the `flock -n` wrapper dropped from the command, if any.
    pub dropped_lock: Option<String>,
}

/// A warning about one line: the line number (1-based) and the text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Warning {
    /// Line number, 1-based.
    pub line: usize,
    /// What cannot be kept, in words.
    pub text: String,
}

/// A whole table read and translated.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Import {
    /// Every line, in order.
    pub lines: Vec<Line>,
    /// Warnings, in line order.
    pub warnings: Vec<Warning>,
    /// Entries that got no job because they could not be read (a subset of the
    /// warnings): the caller's exit status.
    pub errors: usize,
}

/// How a table is read.
#[derive(Debug, Clone)]
pub struct Table<'a> {
    /// The table has a user field after the time fields (`/etc/crontab`, `/etc/cron.d`).
    pub system: bool,
    /// The user a per-user table belongs to (`crontab -u USER`).
    pub user: Option<&'a str>,
    /// The zone `OnCalendar=` uses without a zone in the expression (the host's), for
    /// the daylight-saving checks.
    pub local: TimeZone,
    /// When the daylight-saving checks start.
    pub now: Timestamp,
}

/// Translates one table, given as bytes (a line that is not UTF-8 is an error: a TOML job
/// list cannot hold it). Each job's name is its command's ([`name_of`]) until
/// [`name_jobs`] makes the names of the whole import unique.
///
/// A `flock -n LOCK` wrapper is dropped only when no other entry of the table uses the
/// same LOCK: jobguard's lock is per job, so a lock shared by two entries (which keeps them
/// from overlapping under cron) stays, with a warning.
pub fn import(bytes: &[u8], table: &Table<'_>) -> Import {
    // First pass: which flock locks more than one entry takes.
    let first = import_with(bytes, table, &BTreeSet::new());
    let mut count: BTreeMap<&str, usize> = BTreeMap::new();
    for line in &first.lines {
        if let Line::Job(job) = line
            && let Some(lock) = &job.dropped_lock
        {
            *count.entry(lock).or_default() += 1;
        }
    }
    let shared: BTreeSet<String> = count
        .into_iter()
        .filter(|(_, n)| *n > 1)
        .map(|(l, _)| l.to_string())
        .collect();
    import_with(bytes, table, &shared)
}

fn import_with(bytes: &[u8], table: &Table<'_>, shared_locks: &BTreeSet<String>) -> Import {
    let mut out = Import::default();
    let mut env: BTreeMap<String, String> = BTreeMap::new();
    let mut crlf_warned = false;
    let mut raw_lines: Vec<&[u8]> = bytes.split(|b| *b == b'\n').collect();
    let unterminated = !bytes.is_empty() && !bytes.ends_with(b"\n");
    if !unterminated {
        raw_lines.pop();
    }
    let last = raw_lines.len();
    for (i, raw) in raw_lines.into_iter().enumerate() {
        let n = i + 1;
        let mut warn = |text: String| out.warnings.push(Warning { line: n, text });
        let raw = match std::str::from_utf8(raw) {
            Ok(r) => r,
            Err(_) => {
                let why = "the line is not UTF-8, which a TOML job list cannot hold; no job \
                           written"
                    .to_string();
                warn(why.clone());
                out.errors += 1;
                out.lines.push(Line::Skipped {
                    source: String::from_utf8_lossy(raw).into_owned(),
                    why,
                });
                continue;
            }
        };
        let raw = match raw.strip_suffix('\r') {
            Some(r) => {
                if !crlf_warned {
                    warn(
                        "the table has DOS line endings (CR LF): cron passes the CR on to the \
                         command and to variables; it is left out here"
                            .into(),
                    );
                    crlf_warned = true;
                }
                r
            }
            None => raw,
        };
        let line = raw.trim_start();
        if line.is_empty() || line.starts_with('#') {
            out.lines.push(Line::Comment(raw.to_string()));
            continue;
        }
        if n == last && unterminated {
            warn(
                "the last line has no newline: Vixie cron (Debian's) ignores such a line; \
                 translated anyway"
                    .into(),
            );
        }
        if let Some((k, v)) = variable(line) {
            if k.starts_with("JOBGUARD_") {
                warn(format!("variable {k} is reserved by jobguard; left out"));
            } else if !valid_env_name(&k) {
                warn(format!(
                    "variable name `{k}` cannot be passed to a command; left out"
                ));
            } else if k == "TZ" && !env.contains_key("CRON_TZ") {
                warn(
                    "TZ= sets the commands' zone, not the schedule's (Vixie cron, cronie): the \
                     schedule stays in the host's zone; CRON_TZ= moves it"
                        .into(),
                );
            }
            env.insert(k, v);
            out.lines.push(Line::Variable(raw.to_string()));
            continue;
        }
        match entry(line, table, &env, shared_locks, &mut warn) {
            Ok(Ok(mut job)) => {
                job.source = raw.to_string();
                out.lines.push(Line::Job(Box::new(job)));
            }
            Ok(Err(why)) => {
                warn(why.clone());
                out.lines.push(Line::Skipped {
                    source: raw.to_string(),
                    why,
                });
            }
            Err(why) => {
                warn(why.clone());
                out.errors += 1;
                out.lines.push(Line::Skipped {
                    source: raw.to_string(),
                    why,
                });
            }
        }
    }
    out
}

/// `NAME = VALUE` (crontab(5)): the name and the value, unquoted. `None` for an entry.
fn variable(line: &str) -> Option<(String, String)> {
    let (name, value) = line.split_once('=')?;
    let name = unquote(name.trim());
    if name.is_empty() || name.contains(char::is_whitespace) {
        return None;
    }
    Some((name, unquote(value.trim())))
}

fn unquote(s: &str) -> String {
    for q in ['"', '\''] {
        if s.len() >= 2 && s.starts_with(q) && s.ends_with(q) {
            return s[1..s.len() - 1].to_string();
        }
    }
    s.to_string()
}

/// Splits off the first white-space separated word.
fn word(s: &str) -> Option<(&str, &str)> {
    let s = s.trim_start();
    if s.is_empty() {
        return None;
    }
    let end = s.find(char::is_whitespace).unwrap_or(s.len());
    Some((&s[..end], &s[end..]))
}

/// Reads one entry. `Ok(Err(why))`: a line cron runs that can have no job (`@reboot`,
/// an extension). `Err(why)`: a line that cannot be read.
fn entry(
    line: &str,
    table: &Table<'_>,
    env: &BTreeMap<String, String>,
    shared_locks: &BTreeSet<String>,
    warn: &mut dyn FnMut(String),
) -> Result<Result<ImportedJob, String>, String> {
    let (first, mut rest) = word(line).ok_or("empty entry")?;
    let time = if first.starts_with('@') {
        if first == "@reboot" {
            return Ok(Err(
                "@reboot is not a slot, so jobguard has nothing to guard: run it \
                 from a plain Type=oneshot service with WantedBy=multi-user.target; no job \
                 written"
                    .into(),
            ));
        }
        CronTime::keyword(first)
            .ok_or_else(|| format!("unknown keyword `{first}`; no job written"))?
    } else {
        let mut fields = [first, "", "", "", ""];
        for f in fields.iter_mut().skip(1) {
            let (w, r) = word(rest).ok_or("fewer than five time fields")?;
            *f = w;
            rest = r;
        }
        match CronTime::parse(fields) {
            Ok(t) => t,
            Err(e) if fields.iter().any(|f| f.contains(EXTENSIONS)) => {
                return Ok(Err(format!("{e}; no job written")));
            }
            Err(e) => return Err(format!("{e}; no job written")),
        }
    };
    let user = if table.system {
        let (u, r) = word(rest).ok_or("no user field (a system table has one after the time)")?;
        rest = r;
        if word(rest).is_none() {
            return Err(format!(
                "no command after the user field `{u}` (a system table has a user field)"
            ));
        }
        if !valid_user(u) {
            return Err(format!(
                "user field `{u}` is not a user name (`user:group` is not supported); no job \
                 written"
            ));
        }
        Some(u.to_string())
    } else {
        table.user.map(str::to_string)
    };
    let text = rest.trim_start();
    if text.is_empty() {
        return Err("no command".into());
    }
    let mut notes = Vec::new();

    // The zone: CRON_TZ (cronie), else the host's. Its tzdb name as the database spells
    // it: systemd looks zones up by file name, case and all.
    let zone = match env.get("CRON_TZ").filter(|z| !z.is_empty()) {
        Some(z) => {
            let tz = TimeZone::get(z)
                .map_err(|_| format!("time zone `{z}` (CRON_TZ) is not in the tz database"))?;
            let name = tz.iana_name().unwrap_or(z).to_string();
            Some((name, tz))
        }
        None => None,
    };
    let zone_name = zone.as_ref().map(|(z, _)| z);
    let tz = zone
        .as_ref()
        .map(|(_, tz)| tz.clone())
        .unwrap_or_else(|| table.local.clone());
    if let Some(c) = dst_conflict(&time, &tz, table.now) {
        let zone_label = zone_name.map(String::as_str).unwrap_or("the local zone");
        let text = if c.gap {
            format!(
                "{} does not exist in {zone_label} (the clock jumps forward): cron runs the job \
                 right after the jump, OnCalendar= skips that day's run",
                c.at.strftime("%Y-%m-%d %H:%M")
            )
        } else {
            format!(
                "{} happens twice in {zone_label} (the clock goes back): cron runs the job in \
                 both hours, OnCalendar= in the first only",
                c.at.strftime("%Y-%m-%d %H:%M")
            )
        };
        notes.push(format!("daylight saving: {text}"));
        warn(text);
    }
    if let Some(text) = day_rule_ambiguity(&time) {
        notes.push(text.clone());
        warn(text);
    }
    let schedule = time.on_calendar(zone.as_ref().map(|(z, _)| z.as_str()));
    let calendar = calendar_of(&schedule);
    if calendar
        .as_ref()
        .is_some_and(|c| c.next_elapse(table.now).is_none())
    {
        return Ok(Err(
            "the fields name a date that never comes (such as 30 February): cron never runs \
             it, and a timer that never elapses is refused; no job written"
                .into(),
        ));
    }
    if let Some(text) = lone_step(&time_text(line)).filter(|_| !line.starts_with('@')) {
        notes.push(text.clone());
        warn(text);
    }

    let shell = env
        .get("SHELL")
        .cloned()
        .unwrap_or_else(|| "/bin/sh".into());
    let (command, stdin) = percent(text);
    let (command, dropped_lock) = match unwrap_flock(&command) {
        Some((lock, _)) if shared_locks.contains(&lock) => {
            let text = format!(
                "the `flock -n {lock}` wrapper stays: other lines take the same lock, and \
                 jobguard's lock is per job"
            );
            notes.push(text.clone());
            warn(text);
            (command, None)
        }
        Some((lock, inner)) => {
            notes.push(format!(
                "the `flock -n {lock}` wrapper is dropped: jobguard takes the job's lock (and \
                 its lease across hosts)"
            ));
            (inner, Some(lock))
        }
        None => (command, None),
    };
    let (name, qualifier) = name_parts(&command);
    // cron runs every command as `$SHELL -c`; a plain one runs the same without the
    // shell, unless the shell is not sh or reads a start-up file (BASH_ENV, ENV).
    let plain_shell =
        shell == "/bin/sh" && !env.contains_key("BASH_ENV") && !env.contains_key("ENV");
    let argv = match stdin {
        Some(input) => {
            vec![
                shell.clone(),
                "-c".into(),
                format!("printf %s {} | {{ {command}\n}}", sh_quote(&input)),
            ]
        }
        None if plain_shell && is_plain(&command) => {
            command.split_whitespace().map(str::to_string).collect()
        }
        None => vec![shell.clone(), "-c".into(), command],
    };

    // cron's own environment (crontab(5)): SHELL=/bin/sh and PATH=/usr/bin:/bin unless the
    // table sets them (HOME and LOGNAME jobguard sets from the user).
    let mut environment = BTreeMap::from([
        ("PATH".to_string(), "/usr/bin:/bin".to_string()),
        ("SHELL".to_string(), "/bin/sh".to_string()),
    ]);
    let mut randomized_delay_min = None;
    for (k, v) in env {
        match k.as_str() {
            "CRON_TZ" | "MAILTO" => {}
            "RANDOM_DELAY" => match v.parse::<u32>() {
                Ok(0) => {}
                Ok(m) => randomized_delay_min = Some(m),
                Err(_) => warn(format!(
                    "RANDOM_DELAY=`{v}` is not a number of minutes; left out"
                )),
            },
            _ if k.starts_with("JOBGUARD_") || !valid_env_name(k) => {}
            _ => {
                environment.insert(k.clone(), v.clone());
            }
        }
    }
    if let Some(why) = randomized_delay_min
        .zip(calendar.as_ref())
        .and_then(|(m, c)| delay_too_long(c, m, table.now))
    {
        warn(why);
        randomized_delay_min = None;
    }
    Ok(Ok(ImportedJob {
        dropped_lock,
        name,
        qualifier,
        source: String::new(),
        schedule,
        command: argv,
        user,
        environment,
        randomized_delay_min,
        mailto: env.get("MAILTO").cloned(),
        notes,
    }))
}

/// Why a `RANDOM_DELAY` of `minutes` cannot be the job's `randomized_delay`: with the
/// timer's accuracy it is not shorter than an interval of `schedule`, which the job list
/// refuses (docs/jobs.toml.md, `randomized_delay`). `None` when it fits.
fn delay_too_long(
    schedule: &crate::calendar::Schedule,
    minutes: u32,
    now: Timestamp,
) -> Option<String> {
    let late = std::time::Duration::from_secs(u64::from(minutes) * 60)
        + crate::joblist::config::TIMER_ACCURACY;
    let limit = i64::try_from(late.as_micros()).unwrap_or(i64::MAX);
    let found = schedule.interval_at_most(limit, now)?;
    Some(format!(
        "RANDOM_DELAY={minutes} (minutes) is not shorter than the schedule's shortest interval \
         ({} s): a firing could land after the next elapse; left out",
        found.usec / 1_000_000
    ))
}

fn valid_env_name(k: &str) -> bool {
    let mut c = k.chars();
    matches!(c.next(), Some(c) if c == '_' || c.is_ascii_alphabetic())
        && c.all(|c| c == '_' || c.is_ascii_alphanumeric())
}

/// crontab(5)'s `%`: the command up to the first unescaped `%`, and the standard input
/// after it with each further unescaped `%` a newline; `\%` is a `%` in both.
fn percent(text: &str) -> (String, Option<String>) {
    let mut command = String::new();
    let mut input: Option<String> = None;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        let target = input.as_mut().unwrap_or(&mut command);
        match c {
            '\\' if chars.peek() == Some(&'%') => {
                target.push('%');
                chars.next();
            }
            '%' => match input.as_mut() {
                Some(i) => i.push('\n'),
                None => input = Some(String::new()),
            },
            c => target.push(c),
        }
    }
    (command.trim_end().to_string(), input)
}

/// A command with no shell syntax: only words of letters, digits and `/._-+=:,@`.
fn is_plain(command: &str) -> bool {
    !command.is_empty()
        && command
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == ' ' || c == '\t' || "/._-+=:,@".contains(c))
        && !command
            .split_whitespace()
            .next()
            .is_some_and(|w| w.contains('='))
}

/// Single-quotes `s` for sh.
fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// A leading `flock -n LOCK` (util-linux flock(1), non-blocking) of `command`: the lock
/// file and the command inside. `None` for anything else (a blocking flock waits, which
/// is another meaning, so it stays).
fn unwrap_flock(command: &str) -> Option<(String, String)> {
    let (w, mut rest) = word(command)?;
    if w != "flock" && !w.ends_with("/flock") {
        return None;
    }
    let mut nonblock = false;
    let lock = loop {
        let (w, r) = word(rest)?;
        rest = r;
        match w {
            "-n" | "--nonblock" | "-x" | "-e" | "--exclusive" | "-o" | "--close" => {
                nonblock |= w == "-n" || w == "--nonblock";
            }
            "-E" | "--conflict-exit-code" => rest = word(rest)?.1,
            _ if w.starts_with('-')
                && !w.starts_with("--")
                && w[1..].chars().all(|c| "nxeo".contains(c)) =>
            {
                nonblock |= w.contains('n');
            }
            _ if w.starts_with('-') => return None,
            _ => break w,
        }
    };
    if !nonblock || !is_plain(lock) {
        return None;
    }
    let inner = rest.trim();
    let inner = match word(inner)? {
        ("-c" | "--command", script) => match shlex::split(script.trim()) {
            Some(words) if words.len() == 1 => words[0].clone(),
            _ => return None,
        },
        _ => inner.to_string(),
    };
    Some((lock.to_string(), inner))
}

/// A user name as cron and jobguard take it: no `:`, white space or control characters.
pub fn valid_user(u: &str) -> bool {
    !u.is_empty() && !u.contains(':') && !u.chars().any(|c| c.is_whitespace() || c.is_control())
}

/// The expressions [`CronTime::on_calendar`] wrote, parsed as the job list will parse
/// them; `None` if they do not parse (they always do).
fn calendar_of(schedule: &[String]) -> Option<crate::calendar::Schedule> {
    let specs = schedule
        .iter()
        .map(|e| crate::calendar::CalendarSpec::parse(e).ok())
        .collect::<Option<Vec<_>>>()?;
    crate::calendar::Schedule::new(specs).ok()
}

/// The five time fields of an entry line (or its `@` keyword).
fn time_text(line: &str) -> Vec<String> {
    line.split_whitespace()
        .take(5)
        .map(str::to_string)
        .collect()
}

/// A warning for a field written `N/STEP`: cronie (and croniter, systemd-cron) read it as
/// `N-MAX/STEP`, the original Vixie cron as `N` alone. The import follows cronie.
fn lone_step(fields: &[String]) -> Option<String> {
    let f = fields.iter().find(|f| {
        f.split(',').any(|p| {
            p.split_once('/').is_some_and(|(r, step)| {
                !r.is_empty()
                    && r.chars().all(|c| c.is_ascii_alphanumeric())
                    && step.parse::<u8>().is_ok()
            })
        })
    })?;
    Some(format!(
        "`{f}` is read as cronie reads it (from N to the end of the range, in steps); the \
         original Vixie cron reads `N/STEP` as N alone"
    ))
}

/// Words that say little about what a command does: shells, interpreters and wrappers.
const WRAPPERS: &[&str] = &[
    "sh",
    "bash",
    "dash",
    "zsh",
    "env",
    "nice",
    "ionice",
    "nohup",
    "timeout",
    "chronic",
    "exec",
    "php",
    "python",
    "python3",
    "perl",
    "ruby",
    "node",
    "run-parts",
    "sudo",
    "su",
    "flock",
    "cd",
    "test",
    "[",
    "true",
    "systemd-cat",
    "setsid",
    "stdbuf",
    "/",
    "if",
    "then",
];

/// A job name from a command's text: the base name of its first telling word (not a shell,
/// an interpreter, an option, a variable or a number), without a script extension,
/// made of the characters a job name allows (docs/jobs.toml.md, "Job names").
pub fn name_of(text: &str) -> String {
    name_parts(text).0
}

/// [`name_of`] and the qualifier of [`ImportedJob::qualifier`]: the next word after the
/// telling one that is not a one-letter option, a number, a variable or punctuation,
/// without its leading dashes and the path before its last `/`, in a job name's
/// characters, at most 24 of them.
fn name_parts(text: &str) -> (String, Option<String>) {
    let mut skip_next = false;
    let words = text
        .split(|c: char| c.is_whitespace() || ";&|()<>{}'\"`".contains(c))
        .filter(|w| !w.is_empty());
    for w in words {
        if skip_next && !w.starts_with('-') {
            skip_next = false;
            continue;
        }
        if w == "-c" || w == "-u" {
            skip_next = w == "-u";
            continue;
        }
        if w.starts_with('-')
            || w.contains('=')
            || w.contains('$')
            || w.chars()
                .all(|c| c.is_ascii_digit() || c == '.' || c.is_ascii_punctuation())
        {
            continue;
        }
        let base = w.rsplit('/').next().unwrap_or(w);
        let base = base.trim_start_matches('.');
        if base == "flock" || base == "timeout" || base == "cd" {
            // Their next word that is not an option is a lock file, a duration or a
            // directory.
            skip_next = true;
            continue;
        }
        if base.is_empty()
            || WRAPPERS.contains(&base)
            || base.starts_with("python")
            || base == "printf"
        {
            continue;
        }
        let base = [".sh", ".php", ".py", ".pl", ".rb", ".js", ".bash"]
            .iter()
            .find_map(|ext| base.strip_suffix(ext))
            .unwrap_or(base);
        let name = name_chars(base, 56);
        if !name.is_empty() {
            // In the rest of its simple command, before any redirection (`> FILE`): not a
            // one-letter option (`-s`), a variable, a number or punctuation.
            let offset = w.as_ptr() as usize - text.as_ptr() as usize;
            let rest = text[offset + w.len()..]
                .split(|c: char| ";&|<>".contains(c))
                .next()
                .unwrap_or_default();
            let qualifier = rest
                .split(|c: char| c.is_whitespace() || "(){}'\"`".contains(c))
                .filter(|w| {
                    !w.is_empty()
                        && (!w.starts_with('-') || w.starts_with("--"))
                        && !w.contains('$')
                        && !w.contains('=')
                        && !w
                            .chars()
                            .all(|c| c.is_ascii_digit() || c.is_ascii_punctuation())
                })
                .map(|w| name_chars(w.rsplit('/').next().unwrap_or(w), 24))
                .find(|q| !q.is_empty());
            return (name, qualifier);
        }
    }
    ("job".into(), None)
}

/// `text` in a job name's characters (lower case; a run of others is one `-`), without
/// a leading or trailing `-` or `.`, at most `max` characters.
fn name_chars(text: &str, max: usize) -> String {
    let mut name = String::new();
    for c in text.chars() {
        let c = c.to_ascii_lowercase();
        if c.is_ascii_alphanumeric() || c == '.' || c == '_' {
            name.push(c);
        } else if !name.ends_with('-') {
            name.push('-');
        }
    }
    let mut name = name
        .trim_matches(|c: char| !c.is_ascii_alphanumeric())
        .to_string();
    name.truncate(max);
    name.trim_end_matches(|c: char| !c.is_ascii_alphanumeric())
        .to_string()
}

/// The longest name part [`name_jobs`] builds from a line's words (command and next
/// word), so that a hash (`-xxxxxx`) and a number (`-NNNN`) still fit within
/// [`crate::joblist::job::MAX_JOB_NAME_LEN`].
const NAME_STEM_MAX: usize = crate::joblist::job::MAX_JOB_NAME_LEN - 7 - 5;

/// Gives every job of an import its final name. A name is the job's ledger key, so it
/// depends on its own line and on the lines that would share it, never on the place of
/// the line or on other lines: a re-import with lines of other commands added, removed
/// or moved names every job as before.
///
/// A name is the command's ([`name_of`]), then the next telling word of the line when it
/// has one ([`ImportedJob::qualifier`]): `backup-full` for `backup.sh --full`,
/// `artisan-schedule-run` for `php artisan schedule:run`, at most [`NAME_STEM_MAX`]
/// characters. Lines that share such a name get a hash each of what makes their job
/// (schedule, user, command, environment, `MAILTO`, delay): `sync-3fa2c1`. A line added
/// later that shares the name of an earlier one therefore renames it (`sync` becomes
/// `sync-3fa2c1`). Identical lines (cron runs such a command twice a slot) are numbered,
/// after every other name is given out: `sync`, `sync-2`, …
pub fn name_jobs(tables: &mut [(String, Import)]) {
    use sha2::{Digest, Sha256};
    let mut jobs: Vec<&mut ImportedJob> = tables
        .iter_mut()
        .flat_map(|(_, import)| import.lines.iter_mut())
        .filter_map(|l| match l {
            Line::Job(j) => Some(j.as_mut()),
            _ => None,
        })
        .collect();
    let hash = |j: &ImportedJob| {
        let mut h = Sha256::new();
        let delay = j.randomized_delay_min.map(|m| m.to_string());
        let mailto = j.mailto.as_ref().map(|m| format!("MAILTO={m}"));
        let env = j.environment.iter().map(|(k, v)| format!("{k}={v}"));
        let parts = (j.schedule.iter().cloned())
            .chain(j.user.iter().cloned())
            .chain(j.command.iter().cloned())
            .chain(env)
            .chain(mailto)
            .chain(delay);
        for part in parts {
            h.update(part.as_bytes());
            h.update([0]);
        }
        h.finalize()[..3]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    };
    let mut wanted: Vec<String> = jobs
        .iter()
        .map(|j| {
            let stem = match &j.qualifier {
                Some(q) => format!("{}-{q}", j.name),
                None => j.name.clone(),
            };
            name_chars(&stem, NAME_STEM_MAX)
        })
        .collect();
    let mut groups: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (i, name) in wanted.iter().enumerate() {
        groups.entry(name.clone()).or_default().push(i);
    }
    let hashes: Vec<String> = jobs.iter().map(|j| hash(j)).collect();
    for (name, members) in &groups {
        let distinct: BTreeSet<&str> = members.iter().map(|&i| hashes[i].as_str()).collect();
        if distinct.len() > 1 {
            for &i in members {
                wanted[i] = format!("{name}-{}", hashes[i]);
            }
        }
    }
    // Numbering, for identical lines only, and only after every name that is one job's
    // is given out: a number never takes another command's name.
    let mut count: BTreeMap<&str, usize> = BTreeMap::new();
    for name in &wanted {
        *count.entry(name.as_str()).or_default() += 1;
    }
    let single: Vec<bool> = wanted.iter().map(|n| count[n.as_str()] == 1).collect();
    let mut taken = Names::default();
    for (name, _) in wanted.iter().zip(&single).filter(|(_, one)| **one) {
        taken.taken.insert(name.clone());
    }
    for ((j, name), single) in jobs.iter_mut().zip(wanted).zip(single) {
        j.name = if single {
            name
        } else {
            unique(name, &mut taken)
        };
    }
}

/// The job names an import has given out, and for each name asked for the next suffix to
/// try, so that N entries of one name cost about N steps, not N²/2 (8,000 identical lines
/// took 15 s).
#[derive(Debug, Default)]
struct Names {
    taken: BTreeSet<String>,
    next: BTreeMap<String, u64>,
}

/// `name`, or `name-2`, `name-3`… the first not in `names`; recorded in `names`.
fn unique(name: String, names: &mut Names) -> String {
    let mut candidate = name.clone();
    let next = names.next.entry(name.clone()).or_insert(2);
    while names.taken.contains(&candidate) {
        candidate = format!("{name}-{next}");
        *next += 1;
    }
    names.taken.insert(candidate.clone());
    candidate
}

/// `s` for a TOML comment: control characters other than tab (which TOML refuses in
/// comments) written as `\xNN`.
fn comment_safe(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_control() && c != '\t' {
                format!("\\x{:02x}", u32::from(c))
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// A TOML basic string.
fn toml_str(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

/// Writes the job list for the tables read: a header, then each table's lines in order
/// (comments kept, variables as comments, each entry as its `[jobs.NAME]` table, with the
/// crontab line and notes above it). `origin` names the table (a path, or `-`).
pub fn render(tables: &[(String, Import)]) -> String {
    let mut out = String::from(
        "# A jobguard job list from crontab(5) tables, by `jobguard import-crontab`.\n\
         # Review it, check it with `jobguard check --config FILE`, then put it in\n\
         # /etc/jobguard/jobs.d/ and remove the crontab lines it replaces: a line left in\n\
         # cron runs each slot a second time, unguarded.\n",
    );
    let defaults = Defaults::of(tables);
    defaults.render(&mut out);
    for (origin, import) in tables {
        let _ = writeln!(out, "\n# --- {origin} ---");
        for line in &import.lines {
            match line {
                Line::Comment(c) => {
                    if c.trim().is_empty() {
                        out.push('\n');
                    } else if c.trim_start_matches([' ', '\t']).starts_with('#') {
                        let _ = writeln!(out, "{}", comment_safe(c));
                    } else {
                        // Led by other white space (a form feed, U+3000, ...): TOML takes
                        // only spaces and tabs before a comment's `#`.
                        let _ = writeln!(out, "# {}", comment_safe(c));
                    }
                }
                Line::Variable(v) => {
                    let _ = writeln!(out, "# (crontab) {}", comment_safe(v));
                }
                Line::Skipped { source, why } => {
                    let _ = writeln!(
                        out,
                        "# (crontab) {}\n# no job: {}",
                        comment_safe(source),
                        comment_safe(why)
                    );
                }
                Line::Job(job) => render_job(&mut out, job, &defaults),
            }
        }
    }
    out
}

/// The `[defaults]` of an import: what every job of it shares, written once.
struct Defaults {
    /// Whether there is any job.
    any: bool,
    /// The variables most jobs have, all of them alike (the tables' `PATH`, `SHELL`): a
    /// job with just these writes no `environment` of its own (which would replace them
    /// whole).
    environment: BTreeMap<String, String>,
    /// `MAILTO` when every job has the same one (`Some(None)`: unset in every table).
    mailto: Option<Option<String>>,
}

impl Defaults {
    fn of(tables: &[(String, Import)]) -> Defaults {
        let jobs: Vec<&ImportedJob> = tables
            .iter()
            .flat_map(|(_, i)| i.lines.iter())
            .filter_map(|l| match l {
                Line::Job(j) => Some(j.as_ref()),
                _ => None,
            })
            .collect();
        let Some(first) = jobs.first() else {
            return Defaults {
                any: false,
                environment: BTreeMap::new(),
                mailto: None,
            };
        };
        // The environment most jobs have (the first of those as common): a job's own
        // replaces it whole, so the others write theirs.
        let mut count: Vec<(&BTreeMap<String, String>, usize)> = Vec::new();
        for j in &jobs {
            match count.iter_mut().find(|(e, _)| *e == &j.environment) {
                Some((_, n)) => *n += 1,
                None => count.push((&j.environment, 1)),
            }
        }
        let most = count.iter().map(|(_, n)| *n).max().unwrap_or(0);
        let environment = count
            .iter()
            .find(|(_, n)| *n == most)
            .map(|(e, _)| (*e).clone())
            .unwrap_or_default();
        let mailto = jobs
            .iter()
            .all(|j| j.mailto == first.mailto)
            .then(|| first.mailto.clone());
        Defaults {
            any: true,
            environment,
            mailto,
        }
    }

    fn render(&self, out: &mut String) {
        if !self.any {
            return;
        }
        let _ = writeln!(
            out,
            "\n[defaults]\n\
             # cron never runs a slot it missed (the machine was off, cron was stopped);\n\
             # jobguard's default runs the latest missed slot at the next boot. Delete this\n\
             # line where that is wanted (a backup), or set catch_up per job; keep it where a\n\
             # late run would do harm (a 07:00 mail sent at boot).\n\
             catch_up = \"none\""
        );
        if !self.environment.is_empty() {
            let _ = writeln!(
                out,
                "environment = {}   # most jobs' variables (cron's PATH and SHELL where unset); a job's own replaces them",
                toml_env(&self.environment)
            );
        }
        if let Some(mailto) = &self.mailto {
            render_mailto(out, mailto.as_deref(), None);
        }
    }
}

/// `{ K = "V", … }`.
fn toml_env(env: &BTreeMap<String, String>) -> String {
    let vars: Vec<String> = env
        .iter()
        .map(|(k, v)| format!("{k} = {}", toml_str(v)))
        .collect();
    format!("{{ {} }}", vars.join(", "))
}

/// The `on_failure` line of cron's `MAILTO` (`None`: unset), with where to set the
/// recipient: the mail unit of `job`, or with `None` its template (every job's).
fn render_mailto(out: &mut String, mailto: Option<&str>, job: Option<&str>) {
    match mailto {
        Some("") => {
            let _ = writeln!(out, "# MAILTO was empty: cron mailed nothing");
        }
        Some(to) => {
            let to = comment_safe(to);
            let _ = writeln!(
                out,
                "on_failure = \"jobguard-mail@%i.service\"   # MAILTO={to}: mails failed runs; cron \
                 mailed any output\n# recipient: `systemctl edit jobguard-mail@{}.service`, then \
                 [Service] Environment=MAILTO={to}",
                job.unwrap_or("")
            );
        }
        None => {
            let _ = writeln!(
                out,
                "on_failure = \"jobguard-mail@%i.service\"   # cron mailed any output to the \
                 table's owner; this mails failed runs to MAILTO of jobguard-mail@.service (root)"
            );
        }
    }
}

fn render_job(out: &mut String, job: &ImportedJob, defaults: &Defaults) {
    let _ = writeln!(out, "# (crontab) {}", comment_safe(&job.source));
    for note in &job.notes {
        let _ = writeln!(out, "# note: {}", comment_safe(note));
    }
    let _ = writeln!(out, "[jobs.{}]", toml_key(&job.name));
    match job.schedule.as_slice() {
        [one] => {
            let _ = writeln!(out, "schedule = {}", toml_str(one));
        }
        many => {
            let list: Vec<String> = many.iter().map(|s| toml_str(s)).collect();
            let _ = writeln!(
                out,
                "schedule = [{}]   # cron runs on either day",
                list.join(", ")
            );
        }
    }
    let argv: Vec<String> = job.command.iter().map(|s| toml_str(s)).collect();
    let _ = writeln!(out, "command = [{}]", argv.join(", "));
    if let Some(u) = &job.user {
        let _ = writeln!(out, "user = {}", toml_str(u));
    }
    // A job's own environment replaces the defaults' whole: written when it differs.
    if job.environment != defaults.environment {
        let _ = writeln!(out, "environment = {}", toml_env(&job.environment));
    }
    if let Some(m) = job.randomized_delay_min {
        let _ = writeln!(out, "randomized_delay = \"{m}min\"   # RANDOM_DELAY={m}");
    }
    if defaults.mailto.is_none() {
        render_mailto(out, job.mailto.as_deref(), Some(&job.name));
    }
}

/// A job name as a TOML key (quoted when it holds a dot).
fn toml_key(name: &str) -> String {
    if name.contains('.') {
        toml_str(name)
    } else {
        name.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(f: &str) -> CronTime {
        let w: Vec<&str> = f.split_whitespace().collect();
        CronTime::parse([w[0], w[1], w[2], w[3], w[4]]).unwrap()
    }

    #[test]
    fn fields_become_on_calendar_components() {
        assert_eq!(t("0 2 * * *").on_calendar(None), ["*-*-* 02:00:00"]);
        assert_eq!(t("*/15 * * * *").on_calendar(None), ["*-*-* *:00/15:00"]);
        assert_eq!(t("5 4 * * sun").on_calendar(None), ["Sun *-*-* 04:05:00"]);
        assert_eq!(
            t("0 22 * * 1-5").on_calendar(None),
            ["Mon..Fri *-*-* 22:00:00"]
        );
        assert_eq!(
            t("0 0 * * 6,0").on_calendar(None),
            ["Sat,Sun *-*-* 00:00:00"]
        );
        assert_eq!(
            t("0 0 * * 5-7").on_calendar(None),
            ["Fri..Sun *-*-* 00:00:00"]
        );
        assert_eq!(
            t("23 0-20/2 * * *").on_calendar(None),
            ["*-*-* 00,02,04,06,08,10,12,14,16,18,20:23:00"]
        );
        assert_eq!(
            t("0 0 1 jan *").on_calendar(Some("Europe/Berlin")),
            ["*-01-01 00:00:00 Europe/Berlin"]
        );
        assert_eq!(t("0 9 1-7 * *").on_calendar(None), ["*-*-01..07 09:00:00"]);
        assert_eq!(t("5/20 * * * *").on_calendar(None), ["*-*-* *:05/20:00"]);
        // A step that does not divide the hour is a list (systemd 252 skips 00:00 of `0/7`).
        assert_eq!(t("*/25 * * * *").on_calendar(None), ["*-*-* *:00,25,50:00"]);
        assert_eq!(
            t("0 */5 * * *").on_calendar(None),
            ["*-*-* 00,05,10,15,20:00:00"]
        );
    }

    #[test]
    fn both_day_fields_restricted_means_either_day() {
        // systemd-cron's own test expects `Fri *-4-3 2:1:00` here, which is "and".
        assert_eq!(
            t("1 2 3 4 5").on_calendar(None),
            ["Fri *-04-* 02:01:00", "*-04-03 02:01:00"]
        );
        // A day field written with `*` makes it "and" (Vixie cron's DOM_STAR/DOW_STAR).
        assert_eq!(
            t("0 0 */2 * 1").on_calendar(None),
            ["Mon *-*-01/2 00:00:00"]
        );
        // Either day, one of them every day: every day.
        assert_eq!(t("0 0 1-31 * 1").on_calendar(None), ["*-*-* 00:00:00"]);
    }

    #[test]
    fn cron_day_rule() {
        let d = |y, m, day| jiff::civil::date(y, m, day);
        let x = t("0 0 13 * 5"); // the 13th or any Friday
        assert!(x.runs_on(d(2026, 11, 13)));
        assert!(x.runs_on(d(2026, 12, 4))); // a Friday
        assert!(!x.runs_on(d(2026, 12, 5)));
    }

    #[test]
    fn bad_fields_are_named() {
        let e = CronTime::parse(["61", "*", "*", "*", "*"]).unwrap_err();
        assert!(e.contains("minute field `61`"), "{e}");
        let e = CronTime::parse(["0", "0", "L", "*", "*"]).unwrap_err();
        assert!(e.contains("`L`"), "{e}");
        let e = CronTime::parse(["0", "5-2", "*", "*", "*"]).unwrap_err();
        assert!(e.contains("backwards"), "{e}");
        assert!(CronTime::parse(["*/0", "*", "*", "*", "*"]).is_err());
    }

    #[test]
    fn percent_splits_command_and_input() {
        assert_eq!(
            percent("mail -s hi root%line 1%line 2"),
            ("mail -s hi root".into(), Some("line 1\nline 2".into()))
        );
        assert_eq!(percent(r"date +\%F"), ("date +%F".into(), None));
    }

    #[test]
    fn flock_wrapper_is_dropped() {
        let inner = |c: &str| unwrap_flock(c).map(|(_, inner)| inner);
        assert_eq!(
            unwrap_flock("flock -n /tmp/s.lock /usr/bin/php /data/sync.php"),
            Some(("/tmp/s.lock".into(), "/usr/bin/php /data/sync.php".into()))
        );
        assert_eq!(
            inner("/usr/bin/flock -xn /tmp/l -c 'a > /dev/null'").as_deref(),
            Some("a > /dev/null")
        );
        assert_eq!(inner("flock -n -E 0 /l cmd").as_deref(), Some("cmd"));
        // Blocking flock stays (it waits; the meaning differs).
        assert_eq!(inner("flock /tmp/l cmd"), None);
        assert_eq!(inner("flock -w 10 /tmp/l cmd"), None);
    }

    #[test]
    fn names_come_from_the_command() {
        assert_eq!(name_of("/usr/bin/php /data/sync/sync.php"), "sync");
        assert_eq!(
            name_of("test -x /usr/sbin/anacron || ( cd / && run-parts --report /etc/cron.daily )"),
            "anacron"
        );
        assert_eq!(
            name_of("cd / && run-parts --report /etc/cron.hourly"),
            "cron.hourly"
        );
        assert_eq!(
            name_of("PATH=/x:$PATH nice -n 5 ./backup.sh > /dev/null 2>&1"),
            "backup"
        );
        assert_eq!(name_of("flock -n /var/lock/s.lock /usr/bin/g"), "g");
        assert_eq!(name_of("timeout 5m /usr/bin/sync-orders"), "sync-orders");
        assert_eq!(
            name_parts("/usr/local/bin/backup.sh --full > /var/log/b.log 2>&1"),
            ("backup".into(), Some("full".into()))
        );
        assert_eq!(
            name_parts("php /srv/app/artisan schedule:run >/dev/null"),
            ("artisan".into(), Some("schedule-run".into()))
        );
        assert_eq!(
            name_parts("curl -fsS https://hc.example.com/ping/3f2a"),
            ("curl".into(), Some("3f2a".into()))
        );
        assert_eq!(name_parts("/usr/bin/sync | logger"), ("sync".into(), None));
        let mut taken = Names::default();
        assert_eq!(unique("a-3".into(), &mut taken), "a-3");
        assert_eq!(unique("a".into(), &mut taken), "a");
        assert_eq!(unique("a".into(), &mut taken), "a-2");
        assert_eq!(unique("a".into(), &mut taken), "a-4");
        assert_eq!(unique("a-2".into(), &mut taken), "a-2-2");
    }

    /// A user's table of root, read in UTC.
    fn root_table() -> Table<'static> {
        Table {
            system: false,
            user: Some("root"),
            local: TimeZone::UTC,
            now: "2026-01-01T00:00:00Z".parse().unwrap(),
        }
    }

    #[test]
    fn comments_led_by_other_white_space_stay_comments_in_the_job_list() {
        // Issue 38: a form feed or a Unicode space before `#` (cron, and this reader, take
        // the line for a comment) was written as it was, which TOML refuses.
        let table = root_table();
        let text = "\u{3000}# ideographic\n\x0c# form feed\n\u{a0}# no-break\n \t# plain\n\
                    0 2 * * * /usr/bin/true\n";
        let import = import(text.as_bytes(), &table);
        let rendered = render(&[("-".into(), import)]);
        let parsed: Result<toml::Table, _> = rendered.parse();
        assert!(parsed.is_ok(), "{parsed:?}\n{rendered}");
        for kept in ["ideographic", "form feed", "no-break", "plain"] {
            assert!(rendered.contains(kept), "{rendered}");
        }
        assert!(
            parsed.unwrap()["jobs"]
                .as_table()
                .is_some_and(|j| j.len() == 1)
        );
    }

    /// The names of the jobs of `text`, a table of root in UTC, in line order.
    fn names(text: &str) -> Vec<String> {
        let mut tables = [("-".to_string(), import(text.as_bytes(), &root_table()))];
        name_jobs(&mut tables);
        tables[0]
            .1
            .lines
            .iter()
            .filter_map(|l| match l {
                Line::Job(j) => Some(j.name.clone()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_name_comes_from_its_own_line_not_from_its_place_or_its_neighbours() {
        let lines = [
            "0 2 * * * /usr/local/bin/backup.sh --full",
            "30 3 * * * /usr/local/bin/backup.sh --incremental",
            "*/5 * * * * php /srv/app/artisan schedule:run >/dev/null 2>&1",
            "0 7 * * 1-5 /usr/local/bin/send-report.sh",
            "15 4 * * * cd /srv/app && ./cleanup.sh",
            "0 * * * * /usr/bin/sync",
            "30 * * * * /usr/bin/sync",
        ];
        let all = names(&(lines.join("\n") + "\n"));
        assert_eq!(
            all[..5],
            [
                "backup-full",
                "backup-incremental",
                "artisan-schedule-run",
                "send-report",
                "cleanup"
            ]
        );
        // Two lines of one command and no other word: told apart by their own hash.
        assert!(
            all[5].starts_with("sync-") && all[6].starts_with("sync-"),
            "{all:?}"
        );
        assert_ne!(all[5], all[6]);
        // Each line alone, and the lines backwards, give each line the same name.
        let by_line: BTreeMap<&str, &String> = lines.iter().copied().zip(&all).collect();
        for line in &lines[..5] {
            assert_eq!(
                names(&format!("{line}\n")),
                [by_line[line].clone()],
                "{line}"
            );
        }
        let backwards: Vec<&str> = lines.iter().rev().copied().collect();
        let again = names(&(backwards.join("\n") + "\n"));
        for (line, name) in backwards.iter().zip(&again) {
            assert_eq!(name, by_line[line], "{line}");
        }
    }

    #[test]
    fn a_number_never_takes_another_commands_name_and_every_name_fits() {
        // Two identical lines of one command and a line of a command named like their
        // number, in either order: `task-2` stays that command's.
        let (dup, other) = ("0 1 * * * /usr/bin/task\n", "0 2 * * * /usr/bin/task-2\n");
        let n = names(&format!("{dup}{dup}{other}"));
        assert_eq!(n, ["task", "task-3", "task-2"]);
        let n = names(&format!("{other}{dup}{dup}"));
        assert_eq!(n, ["task-2", "task", "task-3"]);
        // Lines that differ only in their variables are told apart by their hash.
        let n = names("0 1 * * * /usr/bin/sync\nFOO=1\n0 1 * * * /usr/bin/sync\n");
        assert!(
            n[0].starts_with("sync-") && n[1].starts_with("sync-") && n[0] != n[1],
            "{n:?}"
        );
        // The longest command and word, a hash and a number still make a job name.
        let long = "/opt/company/bin/synchronize-customer-records-with-salesforce.py \
                    --incremental-since-last-run";
        let n = names(&format!(
            "0 2 * * * {long}\n0 2 * * * {long}\n0 3 * * * {long}\n"
        ));
        assert_eq!(n.len(), 3);
        for name in &n {
            assert!(crate::joblist::job::is_valid_job_name(name), "{name}");
        }
        assert!(n[1].ends_with("-2"), "{n:?}");
    }

    #[test]
    fn a_thousand_entries_of_one_name_are_numbered_in_order() {
        let text = "0 2 * * * /usr/bin/sync\n".repeat(1000);
        let names = names(&text);
        let want: Vec<String> = std::iter::once("sync".to_string())
            .chain((2..=1000).map(|i| format!("sync-{i}")))
            .collect();
        assert_eq!(names, want);
    }

    #[test]
    fn dst_gap_and_fold_are_found() {
        let tz = TimeZone::get("Europe/Berlin").unwrap();
        let from: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let c = dst_conflict(&t("30 2 * * *"), &tz, from).unwrap();
        assert!(c.gap);
        assert_eq!(c.at.to_string(), "2026-03-29T02:30:00");
        // A wildcard job in the repeated hour of October.
        let c = dst_conflict(
            &t("*/10 * * * *"),
            &tz,
            "2026-04-01T00:00:00Z".parse().unwrap(),
        )
        .unwrap();
        assert!(!c.gap);
        // A fixed-time job in the repeated hour runs once under both.
        let c = dst_conflict(
            &t("30 2 * * *"),
            &tz,
            "2026-04-01T00:00:00Z".parse().unwrap(),
        )
        .unwrap();
        assert!(c.gap, "the next March's gap, not October's fold");
        assert!(dst_conflict(&t("0 12 * * *"), &tz, from).is_none());
        assert!(dst_conflict(&t("30 2 * * *"), &TimeZone::UTC, from).is_none());
    }
}

//! Differential tests of `jobguard calendar` against the real `systemd-analyze calendar`
//! (systemd 252) over a large, seeded, generated set of expressions: every grammar
//! feature, valid and invalid, several time zones (in the expression and through `TZ`),
//! base times around daylight-saving changes, month ends and leap days, and several
//! iterations. Outputs must be identical line by line; every difference is reported.
//!
//! A second test checks `--previous` against systemd's own next elapses: the latest
//! elapse systemd lists at or before the base time must be the one jobguard prints.
//!
//! A third draws a new seed on every run (proptest) for a few batches in zones with
//! daylight saving time, so that the expressions explored grow from run to run. A fourth
//! compares timestamps with `systemd-analyze timestamp`. A fifth walks systemd's own
//! iteration across the daylight-saving changes of 2025 to 2027 in zones of both
//! hemispheres, and the backward search must land on exactly the elapses systemd printed.
//!
//! The tests need `systemd-analyze`; without it they fail (it is on every machine this
//! project builds on).

use std::process::Command;

use jiff::Timestamp;
use jiff::tz::TimeZone;

const JOBGUARD: &str = env!("CARGO_BIN_EXE_jobguard");

/// splitmix64: small, seeded, reproducible.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn range(&mut self, lo: i64, hi: i64) -> i64 {
        if hi <= lo {
            return lo;
        }
        lo + self.below((hi - lo + 1) as u64) as i64
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
    fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.below(xs.len() as u64) as usize]
    }
}

/// The generator's seed: fixed, unless `JOBGUARD_CALENDAR_SEED` names another one (to
/// explore; a failure then names the seed to reproduce it).
fn seed(default: u64) -> u64 {
    std::env::var("JOBGUARD_CALENDAR_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// Zones the tests run in (through `TZ`), with their abbreviations.
const ZONES: &[(&str, &[&str])] = &[
    ("UTC", &["UTC"]),
    ("Europe/Berlin", &["CET", "CEST"]),
    ("America/New_York", &["EST", "EDT"]),
    ("Australia/Lord_Howe", &["+1030", "+11"]),
    ("America/Santiago", &["-04", "-03"]),
    ("Asia/Kolkata", &["IST"]),
    ("Europe/London", &["GMT", "BST"]),
    ("America/Havana", &["CST", "CDT"]),
];

const EXPR_ZONES: &[&str] = &[
    " UTC",
    " utc",
    " Europe/Berlin",
    " America/New_York",
    " Australia/Lord_Howe",
    " America/Santiago",
    " Asia/Kolkata",
    " Europe/London",
    " America/Havana",
    " Pacific/Chatham",
    " Etc/GMT-14",
    " GMT",
    " CET",
    " Mars/Base",
    " Europe//Berlin",
    " europe/berlin",
];

fn num(rng: &mut Rng, v: i64, width: usize) -> String {
    if rng.chance(70) {
        format!("{v:0width$}")
    } else {
        v.to_string()
    }
}

/// One item of a field: value, range, repetition, or a mix.
fn item(rng: &mut Rng, lo: i64, hi: i64, width: usize) -> String {
    let v = |rng: &mut Rng| {
        if rng.chance(4) {
            rng.range(lo - 2, hi + 2).max(0)
        } else {
            rng.range(lo, hi)
        }
    };
    match rng.below(10) {
        0..=4 => {
            let a = v(rng);
            num(rng, a, width)
        }
        5 | 6 => {
            let a = v(rng);
            let b = if rng.chance(85) {
                rng.range(a, hi)
            } else {
                v(rng)
            };
            format!("{}..{}", num(rng, a, width), num(rng, b, width))
        }
        7 => {
            let a = v(rng);
            let b = rng.range(a, hi);
            let r0 = i64::from(!rng.chance(5));
            let r = rng.range(r0, (hi - lo).max(1));
            format!("{}..{}/{}", num(rng, a, width), num(rng, b, width), r)
        }
        _ => {
            let a = v(rng);
            let r0 = i64::from(!rng.chance(5));
            let r = rng.range(r0, (hi - lo).max(1) / 2 + 1);
            format!("{}/{}", num(rng, a, width), r)
        }
    }
}

fn field(rng: &mut Rng, lo: i64, hi: i64, width: usize, star: u64) -> String {
    if rng.chance(star) {
        return "*".to_string();
    }
    let n = if rng.chance(70) { 1 } else { rng.range(2, 4) };
    (0..n)
        .map(|_| item(rng, lo, hi, width))
        .collect::<Vec<_>>()
        .join(",")
}

fn seconds(rng: &mut Rng) -> String {
    let frac = |rng: &mut Rng| -> String {
        match rng.below(6) {
            0 => ".5".into(),
            1 => format!(".{:06}", rng.below(1_000_000)),
            2 => format!(".{:07}", rng.below(10_000_000)),
            3 => format!(".{}", rng.below(100)),
            _ => String::new(),
        }
    };
    match rng.below(12) {
        0 | 1 => "*".into(),
        2 => format!("{}{}", rng.range(0, 59), frac(rng)),
        3 => format!("0/{}{}", rng.range(0, 30), frac(rng)),
        4 => format!("{}..{}{}", rng.range(0, 20), rng.range(20, 59), frac(rng)),
        5 => format!(
            "{}..{}/{}{}",
            rng.range(0, 20),
            rng.range(20, 59),
            rng.range(1, 20),
            frac(rng)
        ),
        6 => format!("{}{},{}", rng.range(0, 59), frac(rng), rng.range(0, 59)),
        _ => field(rng, 0, 59, 2, 10),
    }
}

const WEEKDAYS: &[&str] = &[
    "Mon",
    "Tue",
    "Wed",
    "Thu",
    "Fri",
    "Sat",
    "Sun",
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
];

fn weekday_name(rng: &mut Rng) -> String {
    let w = rng.pick(WEEKDAYS).to_string();
    match rng.below(6) {
        0 => w.to_lowercase(),
        1 => w.to_uppercase(),
        _ => w,
    }
}

fn weekdays(rng: &mut Rng) -> String {
    let n = rng.range(1, 3);
    let mut parts = Vec::new();
    for _ in 0..n {
        parts.push(match rng.below(4) {
            0 => format!("{}..{}", weekday_name(rng), weekday_name(rng)),
            1 => format!("{}-{}", weekday_name(rng), weekday_name(rng)),
            _ => weekday_name(rng),
        });
    }
    let mut s = parts.join(",");
    if rng.chance(5) {
        s.push(',');
    }
    s
}

const SHORTHANDS: &[&str] = &[
    "minutely",
    "hourly",
    "daily",
    "monthly",
    "weekly",
    "yearly",
    "annually",
    "anually",
    "quarterly",
    "semiannually",
    "semi-annually",
    "biannually",
    "bi-annually",
    "Daily",
    "WEEKLY",
];

/// One generated expression; `abbrevs` are the abbreviations of the `TZ` zone.
fn expression(rng: &mut Rng, abbrevs: &[&str]) -> String {
    let mut e = match rng.below(20) {
        0 | 1 => rng.pick(SHORTHANDS).to_string(),
        2 => format!("@{}", rng.range(1_500_000_000, 1_900_000_000)),
        _ => {
            let mut parts = Vec::new();
            if rng.chance(25) {
                parts.push(weekdays(rng));
            }
            let date = rng.below(10);
            if date < 7 {
                let sep = if rng.chance(15) { "~" } else { "-" };
                let day_hi = if sep == "~" { 28 } else { 31 };
                let md = format!(
                    "{}{sep}{}",
                    field(rng, 1, 12, 2, 40),
                    field(rng, 1, day_hi, 2, 35)
                );
                if date < 4 {
                    let year = if rng.chance(15) {
                        let y = rng.range(0, 99);
                        num(rng, y, 2)
                    } else {
                        field(rng, 2022, 2032, 4, 50)
                    };
                    parts.push(format!("{year}-{md}"));
                } else {
                    parts.push(md);
                }
            }
            if date >= 7 || rng.chance(75) {
                let h = field(rng, 0, 23, 2, 25);
                let m = field(rng, 0, 59, 2, 25);
                if rng.chance(50) {
                    parts.push(format!("{h}:{m}"))
                } else {
                    parts.push(format!("{h}:{m}:{}", seconds(rng)))
                }
            }
            if parts.is_empty() {
                parts.push("*-*-*".into());
            }
            parts.join(if rng.chance(5) { "  " } else { " " })
        }
    };
    if rng.chance(35) {
        if rng.chance(25) && !abbrevs.is_empty() {
            e.push(' ');
            let z: &&str = rng.pick(abbrevs);
            e.push_str(z);
        } else {
            let z: &&str = rng.pick(EXPR_ZONES);
            e.push_str(z);
        }
    }
    if rng.chance(4) {
        // A random edit, mostly making it invalid.
        let mut b: Vec<char> = e.chars().collect();
        let at = rng.below(b.len() as u64 + 1) as usize;
        match rng.below(3) {
            0 if at < b.len() => {
                b.remove(at);
            }
            1 if at < b.len() => {
                b[at] = *rng.pick(&['x', '.', '/', ':', ',', '-', ' ', '~', '*', '9'])
            }
            _ => b.insert(
                at,
                *rng.pick(&['0', '.', '/', ':', ',', '-', ' ', '~', '*']),
            ),
        }
        e = b.into_iter().collect();
    }
    if e.starts_with('-') {
        // Both tools would take it for an option, each in its own words.
        e.insert(0, '*');
    }
    e
}

/// Base times for a zone: around its DST transitions, month ends, leap days, year ends.
fn base_times(rng: &mut Rng, zone: &str) -> Vec<i64> {
    let tz = TimeZone::get(zone).expect("zone in tzdb");
    let mut out = Vec::new();
    let start: Timestamp = "2024-01-01T00:00:00Z".parse().expect("valid");
    let end: Timestamp = "2028-01-01T00:00:00Z".parse().expect("valid");
    let transitions: Vec<i64> = tz
        .following(start)
        .take_while(|t| t.timestamp() < end)
        .map(|t| t.timestamp().as_second())
        .collect();
    for &t in transitions.iter().take(6) {
        for d in [-86_400 - 1800, -3601, -1800, -1, 0, 1, 1800, 3600] {
            out.push(t + d);
        }
    }
    for s in [
        "2024-02-28T23:30:00Z",
        "2024-02-29T12:00:00Z",
        "2025-02-28T23:59:59Z",
        "2026-01-31T22:00:00Z",
        "2026-04-30T23:59:59Z",
        "2026-12-31T23:00:00Z",
        "2027-06-30T12:00:00Z",
        "2099-12-31T12:00:00Z",
        "2199-12-30T00:00:00Z",
        "1970-01-02T00:00:00Z",
    ] {
        out.push(s.parse::<Timestamp>().expect("valid").as_second());
    }
    for _ in 0..4 {
        out.push(rng.range(1_600_000_000, 1_900_000_000));
    }
    out
}

/// How a base time is written on the command line: mostly `@EPOCH.frac`, sometimes as
/// a local time or in UTC. (Not with a zone name: systemd 252 rejects those, jobguard
/// accepts them.)
fn base_arg(rng: &mut Rng, t: i64, zone: &str) -> String {
    let ts = Timestamp::from_second(t).expect("in range");
    match rng.below(10) {
        0 => {
            let dt = ts
                .to_zoned_datetime(TimeZone::get(zone).expect("zone"))
                .datetime();
            dt.strftime("%Y-%m-%d %H:%M:%S").to_string()
        }
        1 => ts.strftime("%Y-%m-%d %H:%M:%S UTC").to_string(),
        2 => ts.strftime("%Y-%m-%d %H:%M utc").to_string(),
        3 => format!("@{t}"),
        _ => format!("@{t}.{:06}", rng.below(1_000_000)),
    }
}

struct Output {
    stdout: String,
    stderr: String,
    status: Option<i32>,
}

fn run(program: &str, tz: &str, args: &[String]) -> Output {
    let out = Command::new(program)
        .arg("calendar")
        .args(args)
        .env("TZ", tz)
        .env("SYSTEMD_COLORS", "0")
        .env("SYSTEMD_LOG_COLOR", "0")
        .env_remove("SYSTEMD_PAGER")
        .output()
        .unwrap_or_else(|e| panic!("cannot run {program}: {e}"));
    Output {
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        status: out.status.code(),
    }
}

/// Whether a "From now:" value is under five minutes away: then it depends on the
/// exact moment each process read the clock (`443ms left` against `431ms left`).
fn clock_dependent(line: &str) -> bool {
    let Some(v) = line.trim_start().strip_prefix("From now: ") else {
        return false;
    };
    let v = v.trim_end_matches(" left").trim_end_matches(" ago");
    v == "now"
        || v.split(' ').all(|w| {
            let unit = w.trim_start_matches(|c: char| c.is_ascii_digit());
            matches!(unit, "ms" | "us" | "s") || (unit == "min" && w.len() == 4 && w < "5min")
        })
}

fn describe(a: &Output, b: &Output) -> Option<String> {
    let mut d = String::new();
    if a.status != b.status {
        d.push_str(&format!(
            "  exit status: systemd-analyze {:?}, jobguard {:?}\n",
            a.status, b.status
        ));
    }
    for (what, x, y) in [
        ("stdout", &a.stdout, &b.stdout),
        ("stderr", &a.stderr, &b.stderr),
    ] {
        let (xl, yl): (Vec<&str>, Vec<&str>) = (x.lines().collect(), y.lines().collect());
        for i in 0..xl.len().max(yl.len()) {
            let (p, q) = (xl.get(i).copied(), yl.get(i).copied());
            let tolerated = p
                .zip(q)
                .is_some_and(|(p, q)| clock_dependent(p) && clock_dependent(q));
            if p != q && !tolerated {
                d.push_str(&format!(
                    "  {what} line {}:\n    systemd-analyze: {:?}\n    jobguard:        {:?}\n",
                    i + 1,
                    p.unwrap_or("<none>"),
                    q.unwrap_or("<none>")
                ));
            }
        }
    }
    (!d.is_empty()).then_some(d)
}

/// Runs both tools; retries a differing batch twice, since "From now:" lines follow the
/// wall clock and the two processes run a few milliseconds apart.
fn compare(tz: &str, args: &[String]) -> Option<String> {
    let mut last = None;
    for _ in 0..3 {
        let a = run("systemd-analyze", tz, args);
        let b = run(JOBGUARD, tz, args);
        match describe(&a, &b) {
            None => return None,
            Some(d) => last = Some(d),
        }
    }
    last
}

#[test]
fn jobguard_calendar_matches_systemd_analyze() {
    let mut rng = Rng(seed(0x6a6f_6267_7561_7264));
    let mut failures = Vec::new();
    let mut expressions = 0usize;
    let mut invocations = 0usize;
    for (zone, abbrevs) in ZONES {
        let mut bases: Vec<Option<String>> = Vec::new();
        for t in base_times(&mut rng, zone) {
            bases.push(Some(base_arg(&mut rng, t, zone)));
        }
        bases.push(None);
        for base in bases {
            let iterations = *rng.pick(&[1u32, 1, 2, 3, 5, 8]);
            let n = rng.range(15, 30);
            let mut args: Vec<String> = Vec::new();
            if let Some(b) = &base {
                args.push(format!("--base-time={b}"));
            }
            args.push(format!("--iterations={iterations}"));
            for _ in 0..n {
                args.push(expression(&mut rng, abbrevs));
            }
            expressions += n as usize;
            invocations += 1;
            if let Some(d) = compare(zone, &args) {
                failures.push(format!("TZ={zone} {args:?}\n{d}"));
            }
        }
    }
    assert!(
        expressions > 3000,
        "generated only {expressions} expressions"
    );
    assert!(
        failures.is_empty(),
        "{} of {invocations} batches ({expressions} expressions) differ (seed {}):\n{}",
        failures.len(),
        seed(0x6a6f_6267_7561_7264),
        failures.join("\n")
    );
}

/// The first elapse `systemd-analyze calendar` prints after `base` (a timestamp
/// argument), in whole UTC seconds: `Some(None)` for "never", `None` if it printed no
/// elapse line (an error).
fn systemd_next(zone: &str, base: &str, expr: &str) -> Option<Option<i64>> {
    let out = run(
        "systemd-analyze",
        zone,
        &[
            format!("--base-time={base}"),
            "--iterations=1".into(),
            expr.into(),
        ],
    );
    let want = if zone == "UTC" {
        "Next elapse"
    } else {
        "(in UTC)"
    };
    for l in out.stdout.lines() {
        let Some((label, value)) = l.trim_start().split_once(": ") else {
            continue;
        };
        if label == "Next elapse" && value == "never" {
            return Some(None);
        }
        if label == want {
            // "Www YYYY-MM-DD HH:MM:SS UTC"
            let dt: jiff::civil::DateTime = value.get(4..23)?.parse().ok()?;
            return Some(Some(
                dt.to_zoned_datetime(TimeZone::UTC)
                    .ok()?
                    .timestamp()
                    .as_second(),
            ));
        }
    }
    None
}

/// The elapses `jobguard calendar --previous` prints, newest first, in whole UTC seconds.
fn jobguard_previous(zone: &str, at: &str, expr: &str) -> Vec<i64> {
    let out = run(
        JOBGUARD,
        zone,
        &[
            format!("--base-time={at}"),
            "--previous".into(),
            "--iterations=3".into(),
            expr.into(),
        ],
    );
    let want: &[&str] = if zone == "UTC" {
        &["Prev elapse", "Iter. #2", "Iter. #3"]
    } else {
        &["(in UTC)"]
    };
    out.stdout
        .lines()
        .filter_map(|l| l.trim_start().split_once(": "))
        .filter(|(label, value)| want.contains(label) && *value != "never")
        .filter_map(|(_, value)| {
            let dt: jiff::civil::DateTime = value.get(4..23)?.parse().ok()?;
            Some(
                dt.to_zoned_datetime(TimeZone::UTC)
                    .ok()?
                    .timestamp()
                    .as_second(),
            )
        })
        .collect()
}

/// `--previous` against systemd itself: for the latest elapse `p` jobguard prints at or
/// before `at`, systemd's next elapse after `p - 1µs` must be `p` and its next elapse
/// after `p` must come after `at`; with no previous elapse, systemd's first elapse
/// after the epoch must come after `at`. Also the library property
/// `next_elapse(previous_elapse(t) - 1µs) == previous_elapse(t)` with nothing in
/// between, and that the printed iterations step backwards through the same elapses.
///
/// Expressions ending in the local zone's own abbreviation (`CET` under
/// `TZ=Europe/Berlin`) are left out: systemd evaluates them with a forced DST flag, and
/// its next elapses are then not monotonic, so "the previous elapse" is not defined.
#[test]
fn previous_elapse_agrees_with_systemd_next_elapses() {
    let mut rng = Rng(seed(0x7072_6576_696f_7573));
    let mut failures = Vec::new();
    let mut checked = 0usize;
    for (zone, abbrevs) in ZONES {
        let local = TimeZone::get(zone).expect("zone");
        let bases = base_times(&mut rng, zone);
        for (k, base) in bases.into_iter().enumerate() {
            if k % 3 != 0 || base > 7_000_000_000 {
                continue;
            }
            let mut found = 0;
            while found < 5 {
                let e = expression(&mut rng, abbrevs);
                let forced_dst = abbrevs.iter().any(|a| {
                    e.len() > a.len()
                        && e.to_ascii_lowercase()
                            .ends_with(&format!(" {}", a.to_ascii_lowercase()))
                });
                let Ok(spec) = jobguard::calendar::CalendarSpec::parse_in(&e, local.clone()) else {
                    continue;
                };
                if forced_dst {
                    continue;
                }
                found += 1;
                let at = Timestamp::from_microsecond(base * 1_000_000 + 999_999).expect("valid");
                let prev = spec.previous_elapse(at);
                // The library property.
                match prev {
                    Some(p) => {
                        let before =
                            Timestamp::from_microsecond(p.as_microsecond() - 1).expect("valid");
                        if spec.next_elapse(before) != Some(p)
                            || spec.next_elapse(p).is_some_and(|n| n <= at)
                        {
                            failures.push(format!(
                                "TZ={zone} {e:?} at {at}: previous {p} is not the last elapse"
                            ));
                        }
                    }
                    None => {
                        let first = spec.next_elapse(Timestamp::UNIX_EPOCH);
                        if first.is_some_and(|n| n <= at) {
                            failures.push(format!(
                                "TZ={zone} {e:?} at {at}: no previous, yet {first:?}"
                            ));
                        }
                    }
                }
                // The binary prints the same chain the library computes.
                let mut chain = Vec::new();
                let mut cur = prev;
                while let Some(p) = cur {
                    chain.push(p);
                    if chain.len() == 3 {
                        break;
                    }
                    cur = spec.previous_elapse(
                        Timestamp::from_microsecond(p.as_microsecond() - 1).expect("valid"),
                    );
                }
                let mine = jobguard_previous(zone, &format!("@{base}.999999"), &e);
                let lib: Vec<i64> = chain.iter().map(|p| p.as_second()).collect();
                if mine != lib {
                    failures.push(format!(
                        "TZ={zone} {e:?} at @{base}.999999: printed {mine:?}, library {lib:?}"
                    ));
                }
                // Each is an elapse for systemd, and systemd has none between it and the
                // time it was asked for (the base, then the elapse before).
                let arg = |v: i64| {
                    format!(
                        "@{}.{:06}",
                        v.div_euclid(1_000_000),
                        v.rem_euclid(1_000_000)
                    )
                };
                let mut bound = at.as_microsecond();
                for p in &chain {
                    let us = p.as_microsecond();
                    let at_p = systemd_next(zone, &arg(us - 1), &e);
                    let after = systemd_next(zone, &arg(us), &e);
                    // systemd's own failures (its search loops) are the library's "none".
                    let after_ok = match after {
                        Some(Some(n)) => n * 1_000_000 + 999_999 > bound,
                        Some(None) => true,
                        None => spec.next_elapse(*p).is_none(),
                    };
                    if at_p != Some(Some(p.as_second())) || !after_ok {
                        failures.push(format!(
                            "TZ={zone} {e:?} at @{base}.999999: previous {p}; systemd's next after it - 1us is {at_p:?}, after it {after:?}"
                        ));
                    }
                    bound = us - 1;
                }
                if chain.is_empty() {
                    let first = systemd_next(zone, "@0", &e);
                    if !(matches!(first, Some(None)) | matches!(first, Some(Some(n)) if n > base)) {
                        failures.push(format!("TZ={zone} {e:?} at @{base}.999999: no previous, systemd's first is {first:?}"));
                    }
                }
                checked += 1;
            }
        }
    }
    assert!(checked > 250, "checked only {checked}");
    assert!(
        failures.is_empty(),
        "{} of {checked} failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Runs `systemd-analyze timestamp` once on every text of `texts` in zone `tz`: for
/// each, the µs since the epoch it printed (`UNIX seconds: @S[.FFFFFF]`), or `None` when
/// it failed to parse it.
fn systemd_timestamps(
    tz: &str,
    texts: &[String],
) -> std::collections::HashMap<String, Option<i64>> {
    let out = Command::new("systemd-analyze")
        .arg("timestamp")
        .args(texts)
        .env("TZ", tz)
        .env("SYSTEMD_COLORS", "0")
        .env_remove("SYSTEMD_PAGER")
        .output()
        .expect("systemd-analyze is on every machine this project builds on");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let mut found = std::collections::HashMap::new();
    let mut current: Option<String> = None;
    for line in stdout.lines() {
        let line = line.trim_start();
        if let Some(t) = line.strip_prefix("Original form: ") {
            current = Some(t.to_string());
        } else if let Some(v) = line.strip_prefix("UNIX seconds: @")
            && let Some(text) = current.take()
        {
            let (s, f) = v.split_once('.').unwrap_or((v, "0"));
            let usec = s.parse::<i64>().expect("seconds") * 1_000_000
                + format!("{f:0<6}")[..6].parse::<i64>().expect("fraction");
            found.insert(text, Some(usec));
        }
    }
    for t in texts {
        found.entry(t.clone()).or_insert(None);
    }
    found
}

/// Timestamps in the syntax systemd 252 reads (no `T`, no RFC 3339 offsets, nothing
/// relative to now), with fields in and out of range: leap seconds, February 29 to 31,
/// hour 24, two-digit years, weekdays that do and do not match, fractions, ` UTC`.
fn timestamp_text(rng: &mut Rng, dst_zone: bool) -> String {
    let year = rng.range(1965, 2110);
    let (yy, y4) = (format!("{:02}", year % 100), format!("{year:04}"));
    let month = rng.range(0, 13);
    let day = rng.range(0, 32);
    // In a zone with daylight saving time, keep away from the hours a change moves.
    let hour = if dst_zone {
        rng.range(4, 24)
    } else {
        rng.range(0, 24)
    };
    let minute = rng.range(0, 60);
    let second = rng.range(0, 61);
    let date = if rng.chance(15) { yy } else { y4 };
    let date = format!("{date}-{month:02}-{day:02}");
    let mut text = match rng.below(5) {
        0 => date,
        1 => format!("{date} {hour:02}:{minute:02}"),
        2 => format!(
            "{date} {hour:02}:{minute:02}:{second:02}.{}",
            rng.range(0, 999_999)
        ),
        _ => format!("{date} {hour:02}:{minute:02}:{second:02}"),
    };
    if rng.chance(15) {
        text = format!(
            "{} {text}",
            rng.pick(&["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"])
        );
    }
    if rng.chance(35) {
        text.push_str(" UTC");
    }
    text
}

/// Issue 10, defect 5: timestamps must read as systemd's `parse_timestamp()` reads them.
/// `systemd-analyze timestamp` is the oracle: one call per zone, for a batch of
/// generated timestamps and the vectors of the issue.
#[test]
fn timestamps_match_systemd_analyze_timestamp() {
    let base_seed = seed(0x7469_6d65_7374_616d);
    let mut failures = Vec::new();
    let mut compared = 0;
    for (i, (zone, dst)) in [
        ("UTC", false),
        ("Asia/Kolkata", false),
        ("Europe/Berlin", true),
    ]
    .into_iter()
    .enumerate()
    {
        let mut rng = Rng(base_seed.wrapping_add(i as u64));
        let mut texts: Vec<String> = [
            "1990-12-31 23:59:60 UTC",
            "1990-12-31 23:59:60",
            "1969-12-31 23:59:59 UTC",
            "1970-01-01 00:00:00 UTC",
            "2026-02-30 00:00:00 UTC",
            "2026-01-01 24:00 UTC",
            "today 02:00",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        for _ in 0..200 {
            texts.push(timestamp_text(&mut rng, dst));
        }
        texts.sort();
        texts.dedup();
        let theirs = systemd_timestamps(zone, &texts);
        let tz = TimeZone::get(zone).expect("zone");
        let now = Timestamp::now();
        for t in &texts {
            let ours = jobguard::calendar::timestamp::parse_timestamp_in(t, now, &tz)
                .ok()
                .map(|v| v.as_microsecond());
            compared += 1;
            if ours != theirs[t] {
                failures.push(format!(
                    "TZ={zone} {t:?}: systemd-analyze {:?}, jobguard {ours:?}",
                    theirs[t]
                ));
            }
        }
    }
    assert!(compared > 500, "compared only {compared}");
    assert!(
        failures.is_empty(),
        "{} of {compared} timestamps differ (seed {base_seed}):\n{}",
        failures.len(),
        failures.join("\n")
    );
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig {
        cases: 4,
        max_shrink_iters: 8,
        failure_persistence: None,
        ..proptest::prelude::ProptestConfig::default()
    })]

    /// The fixed-seed test above always explores the same expressions; this one draws a
    /// new seed on every run (proptest prints it with a failure, and
    /// `JOBGUARD_CALENDAR_SEED=SEED` replays the batch), with a zone that has daylight
    /// saving time, base times around its changes and 25 expressions: four batches, so
    /// at most a dozen `systemd-analyze` calls.
    #[test]
    fn generated_expressions_in_dst_zones_match_systemd_analyze(
        seed in proptest::prelude::any::<u64>(),
        zone in proptest::sample::select(vec![
            "Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "America/Santiago",
            "Europe/London", "America/Havana",
        ]),
    ) {
        let seed = std::env::var("JOBGUARD_CALENDAR_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(seed);
        let mut rng = Rng(seed);
        let abbrevs = ZONES.iter().find(|(z, _)| *z == zone).map_or(&[][..], |(_, a)| *a);
        let bases = base_times(&mut rng, zone);
        let at = *rng.pick(&bases);
        let base = base_arg(&mut rng, at, zone);
        let iterations = *rng.pick(&[1u32, 2, 3, 5]);
        let mut args = vec![format!("--base-time={base}"), format!("--iterations={iterations}")];
        for _ in 0..25 {
            args.push(expression(&mut rng, abbrevs));
        }
        if let Some(d) = compare(zone, &args) {
            return Err(proptest::test_runner::TestCaseError::fail(format!(
                "seed {seed}: TZ={zone} {args:?}\n{d}"
            )));
        }
    }
}

/// Every elapse `systemd-analyze calendar --iterations=N --base-time=BASE EXPR` prints
/// (systemd iterates each from the previous one, as a timer does), µs since the epoch.
fn systemd_orbit(zone: &str, base: i64, iterations: usize, expr: &str) -> Vec<i64> {
    let out = run(
        "systemd-analyze",
        zone,
        &[
            format!("--base-time=@{base}"),
            format!("--iterations={iterations}"),
            expr.into(),
        ],
    );
    out.stdout
        .lines()
        .filter_map(|l| l.trim_start().split_once(": "))
        .filter(|(label, _)| {
            if zone == "UTC" {
                *label == "Next elapse" || label.starts_with("Iter. #")
            } else {
                *label == "(in UTC)"
            }
        })
        .filter_map(|(_, value)| {
            let dt: jiff::civil::DateTime = value.get(4..23)?.parse().ok()?;
            Some(
                dt.to_zoned_datetime(TimeZone::UTC)
                    .ok()?
                    .timestamp()
                    .as_microsecond(),
            )
        })
        .collect()
}

/// Issue 9 §5.5: at a fall-back, systemd 252 never reaches some local times of the
/// repeated hour (`*-*-* 02:00/15:00 Europe/Berlin` fires at 00:00, 00:15, 00:30 and
/// 00:45 UTC on 2026-10-25, not at 01:15 or 01:45). Around every daylight-saving change
/// of 2025 to 2027 in six zones, systemd's own iteration from days before is the
/// truth: for each printed elapse `e` within 6 hours of the change and the next one `f`,
/// the previous elapse at `e`, in between and at `f - 1µs` must be `e`.
#[test]
fn previous_elapse_lands_on_systemds_elapses_across_dst_changes() {
    const ZONES: &[&str] = &[
        "Europe/Berlin",
        "America/New_York",
        "Australia/Sydney",
        "Australia/Lord_Howe",
        "America/Santiago",
        "Europe/Dublin",
    ];
    // (expression, days before the change systemd starts from, iterations).
    const SCHEDULES: &[(&str, i64, usize)] = &[
        ("hourly", 2, 24 * 3),
        ("*:0/15", 2, 4 * 24 * 3),
        ("*-*-* 02:30", 2, 4),
        ("*-*-* 01:30", 2, 4),
        ("*-*-* 02:00/15:00", 2, 8 * 4),
        ("*:0/7", 2, 9 * 24 * 3),
        ("*-*-* 00:00", 2, 4),
        ("weekly", 8, 3),
        ("Sun *-*-* 01:45,02:15", 8, 4),
    ];
    let from = Timestamp::from_second(1_735_689_600).expect("2025-01-01");
    let to = Timestamp::from_second(1_830_297_600).expect("2028-01-01");
    let mut failures = Vec::new();
    let mut checked = 0usize;
    for zone in ZONES {
        let tz = TimeZone::get(zone).expect("zone");
        let changes: Vec<i64> = tz
            .following(from)
            .take_while(|t| t.timestamp() < to)
            .map(|t| t.timestamp().as_second())
            .collect();
        assert!(changes.len() >= 5, "{zone}: {changes:?}");
        for (expr, days, iterations) in SCHEDULES {
            // Through TZ, and with the zone in the expression (systemd evaluates that
            // in a child process of its own).
            for (variant, (env_zone, text)) in
                [(*zone, expr.to_string()), ("UTC", format!("{expr} {zone}"))]
                    .into_iter()
                    .enumerate()
            {
                let spec = jobguard::calendar::CalendarSpec::parse_in(
                    &text,
                    TimeZone::get(env_zone).expect("zone"),
                )
                .expect("valid");
                for (k, &t) in changes.iter().enumerate() {
                    // The zone in the expression at every other change, to save time.
                    if variant == 1 && k % 2 == 1 {
                        continue;
                    }
                    let orbit = systemd_orbit(env_zone, t - days * 86_400, *iterations, &text);
                    if orbit.len() < 2 {
                        failures.push(format!("{text:?} TZ={env_zone}: systemd printed {orbit:?}"));
                        continue;
                    }
                    for w in orbit.windows(2) {
                        let (e, f) = (w[0], w[1]);
                        if (e - t * 1_000_000).abs() > 6 * 3_600_000_000 {
                            continue;
                        }
                        for at in [e, e + (f - e) / 2, f - 1] {
                            checked += 1;
                            let got = spec
                                .previous_elapse(Timestamp::from_microsecond(at).expect("valid"))
                                .map(|p| p.as_microsecond());
                            if got != Some(e) {
                                let show = |u: i64| Timestamp::from_microsecond(u).expect("valid");
                                failures.push(format!(
                                    "{text:?} TZ={env_zone} at {}: previous {:?}, systemd's elapse {}",
                                    show(at),
                                    got.map(show),
                                    show(e)
                                ));
                            }
                        }
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

/// Issue 9 §5.5, as reported: `jobguard calendar --previous` on 2026-10-25 in Berlin
/// gave 01:15Z and 01:45Z, which systemd never fires.
#[test]
fn calendar_previous_skips_the_repeated_hour_systemd_does_not_fire() {
    let expr = "*-*-* 02:00/15:00 Europe/Berlin";
    // 01:00Z, 01:20Z, 01:50Z: in the repeated hour (02:00 to 02:59 CET).
    for at in ["@1792890000", "@1792891200", "@1792893000"] {
        let out = jobguard_previous("UTC", at, expr);
        assert_eq!(
            out,
            [1_792_889_100, 1_792_888_200, 1_792_887_300],
            "at {at}: the three before are 00:45, 00:30, 00:15 UTC"
        );
    }
}

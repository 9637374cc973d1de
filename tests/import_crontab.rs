//! `jobguard import-crontab` against cron's meaning.
//!
//! Ground truth comes from outside jobguard on both sides: cron's fire times from
//! Python's croniter (`day_or=True`, Debian's python3-croniter; tests/crontab/
//! croniter_times.py), and the fire times of the `OnCalendar=` expressions the import
//! writes from systemd 252 itself (`systemd-analyze calendar --iterations`). A corpus of
//! cron lines in zones with and without daylight saving is compared over hundreds of fire
//! times from several starting points, two of them just before a zone's spring and
//! autumn changes. A line may differ only where the import warned about it, and only
//! within a day of a daylight-saving change (or, for a day field written `*/N` beside a
//! restricted one, anywhere: implementations differ and the warning says so). The
//! output must pass `jobguard check`.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::process::{Command, Stdio};

use jiff::Timestamp;
use jiff::civil::DateTime;
use jiff::tz::{AmbiguousOffset, TimeZone};

const BIN: &str = env!("CARGO_BIN_EXE_jobguard");
const CRONITER: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/crontab/croniter_times.py"
);

/// Fire times compared per line and starting point.
const N: usize = 200;

/// The corpus: the five time fields of cron lines (crontab(5) syntax, names included).
const EXPRS: &[&str] = &[
    "0 2 * * *",
    "30 2 * * *",
    "15 3 * * *",
    "0 0 * * *",
    "45 1 * * *",
    "*/15 * * * *",
    "*/7 * * * *",
    "5 * * * *",
    "30 * * * *",
    "0 */2 * * *",
    "23 0-20/2 * * *",
    "0 9-17 * * 1-5",
    "0 22 * * 1-5",
    "5 4 * * sun",
    "0 0 * * 6,0",
    "0 0 * * 7",
    "0 12 1 * *",
    "0 0 1 1 *",
    "0 0 29 2 *",
    "0 0 31 * *",
    "1 2 3 4 5",
    "0 0 13 * 5",
    "0 0 1,15 * 3",
    "30 6 1-7 * 1",
    "0 0 */2 * *",
    "0 0 * */3 *",
    "0 8 * jan,jul mon",
    "0 4 8-14 * *",
    "0 0,12 * * *",
    "59 23 31 12 *",
    "0 5 * * mon-fri",
    "*/30 1-3 * * *",
    "0 2-3 * * *",
    "0-59/20 2 * * *",
    "5/20 * * * *",
    "0 0 1-31 * 1",
    "0 3 * mar-oct sat",
    "*/5 2 * * *",
    "30 1,2 * * 0",
    "0 0 */2 * 1",
    "*/25 * * * *",
    "0 */5 * * *",
    "0 0 */10 * *",
    "0 0 * */5 *",
    "10 */7 * * *",
    "@daily",
    "@hourly",
    "@weekly",
    "@monthly",
    "@yearly",
];

/// Zones: one without daylight saving, and three with it: two northern ones that change
/// on different days, and a southern one (autumn in April). Not Australia/Lord_Howe, whose
/// clocks move by half an hour: croniter's naive times are fine there, but the zone adds
/// nothing the others do not test.
const ZONES: &[&str] = &[
    "UTC",
    "Europe/Berlin",
    "America/New_York",
    "Australia/Sydney",
];

/// crontab(5)'s meaning of the keywords, for croniter.
fn five_fields(expr: &str) -> &str {
    match expr {
        "@daily" => "0 0 * * *",
        "@hourly" => "0 * * * *",
        "@weekly" => "0 0 * * 0",
        "@monthly" => "0 0 1 * *",
        "@yearly" => "0 0 1 1 *",
        e => e,
    }
}

/// Runs the import on `text` with `args`; returns stdout, the warnings by line, and the
/// exit status.
fn import(text: &str, args: &[&str]) -> (String, BTreeMap<usize, Vec<String>>, i32) {
    let mut child = Command::new(BIN)
        .arg("import-crontab")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("jobguard import-crontab");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("write");
    let out = child.wait_with_output().expect("wait");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let mut warnings: BTreeMap<usize, Vec<String>> = BTreeMap::new();
    for l in stderr.lines() {
        let Some(rest) = l.strip_prefix("(standard input):") else {
            continue;
        };
        let (n, w) = rest
            .split_once(": warning: ")
            .unwrap_or_else(|| panic!("odd line {l:?}"));
        warnings
            .entry(n.parse().expect("line number"))
            .or_default()
            .push(w.to_string());
    }
    (
        String::from_utf8(out.stdout).expect("utf-8"),
        warnings,
        out.status.code().unwrap_or(-1),
    )
}

/// The first `n` elapses after `base` (seconds since the epoch) of the union of `exprs`
/// (each ending in ` ZONE`), by systemd 252's own `systemd-analyze calendar`. The zone
/// is given as `TZ` rather than in the expressions: systemd evaluates an expression with
/// a zone in a forked child with that `TZ`, once per iteration, which is the same rule
/// at a hundred times the cost.
fn systemd_elapses(exprs: &[String], zone: &str, base: i64, n: usize) -> Vec<i64> {
    let bare: Vec<&str> = exprs
        .iter()
        .map(|e| {
            e.strip_suffix(&format!(" {zone}"))
                .expect("the zone of CRON_TZ")
        })
        .collect();
    let out = Command::new("systemd-analyze")
        .env("TZ", zone)
        .arg("calendar")
        .arg(format!("--iterations={n}"))
        .arg(format!("--base-time=@{base}"))
        .args(&bare)
        .output()
        .expect("systemd-analyze");
    assert!(
        out.status.success(),
        "systemd-analyze {exprs:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    // In UTC: "(in UTC): Sat 2026-12-05 01:30:00 UTC" lines, or for TZ=UTC the elapses.
    let utc_lines = text.contains("(in UTC): ");
    let mut all = BTreeSet::new();
    for line in text.lines() {
        let Some((label, value)) = line.trim().split_once(": ") else {
            continue;
        };
        let wanted = if utc_lines {
            label == "(in UTC)"
        } else {
            label == "Next elapse" || label.starts_with("Iter. #")
        };
        if wanted {
            let v: Vec<&str> = value.split_whitespace().collect();
            let ts: Timestamp = format!("{}T{}Z", v[1], v[2]).parse().expect("timestamp");
            all.insert(ts.as_second());
        }
    }
    all.into_iter().take(n).collect()
}

/// croniter's first `n` wall-clock fire times after the civil time `base`, for each
/// (fields, base, n).
fn croniter_times(queries: &[(String, DateTime, usize)]) -> Vec<Vec<DateTime>> {
    let json: Vec<String> = queries
        .iter()
        .map(|(e, b, n)| format!(r#"{{"expr":"{e}","base":"{b}","n":{n}}}"#))
        .collect();
    let mut child = Command::new("/usr/bin/python3")
        .arg(CRONITER)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 (Debian's python3-croniter; scripts/test installs it)");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(format!("[{}]", json.join(",")).as_bytes())
        .expect("write");
    let out = child.wait_with_output().expect("wait");
    assert!(out.status.success(), "croniter failed");
    let v: Vec<Vec<String>> = serde_json::from_slice(&out.stdout).expect("croniter's JSON");
    v.into_iter()
        .map(|l| {
            l.into_iter()
                .map(|t| format!("{t}:00").parse().expect("civil time"))
                .collect()
        })
        .collect()
}

/// When Debian's cron (Vixie cron 3.0, `cron.c`'s clock-change rules) runs a job at the
/// wall-clock time `at` of `tz`: once at an unambiguous time; in a gap (the clock jumps
/// forward over `at`), a fixed-time job runs at the jump and a wildcard one (`*` in its
/// minute or hour field) not at all; in a repeated hour, a fixed-time job runs at the
/// first occurrence and a wildcard one at both. Seconds since the epoch.
fn cron_instants(tz: &TimeZone, at: DateTime, wildcard: bool) -> Vec<i64> {
    let secs = |offset: jiff::tz::Offset| offset.to_timestamp(at).unwrap().as_second();
    match tz.to_ambiguous_timestamp(at).offset() {
        AmbiguousOffset::Unambiguous { offset } => vec![secs(offset)],
        AmbiguousOffset::Gap { before, .. } if !wildcard => {
            // The jump: the last change at or before `at` read with the old offset.
            let after_jump = Timestamp::from_second(secs(before)).unwrap();
            let jump = tz
                .preceding(
                    after_jump
                        .checked_add(jiff::SignedDuration::from_secs(1))
                        .unwrap(),
                )
                .next()
                .unwrap();
            vec![jump.timestamp().as_second()]
        }
        AmbiguousOffset::Gap { .. } => vec![],
        AmbiguousOffset::Fold { before, after } if wildcard => vec![secs(before), secs(after)],
        AmbiguousOffset::Fold { before, .. } => vec![secs(before)],
    }
}

/// Asserts that `jobguard check` accepts the job list `toml_text` (exit 0).
fn check_accepts(toml_text: &str) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jobs.toml");
    std::fs::write(&path, toml_text).unwrap();
    let check = Command::new(BIN)
        .args(["check", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "check: {}{}",
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    );
}

/// crontab(5) read literally, as a second opinion where croniter and systemd differ:
/// whether cron fires at the wall-clock minute `at` (Vixie's day rule: either day when
/// neither day field's text starts with `*`). Names are not needed: the corpus lines that
/// use them agree.
fn crontab5_matches(fields: &[&str], at: DateTime) -> bool {
    fn has(field: &str, v: i64, min: i64, max: i64) -> bool {
        field.split(',').any(|part| {
            let (range, step) = part
                .split_once('/')
                .map_or((part, 1), |(r, s)| (r, s.parse().unwrap()));
            let (lo, hi) = match range {
                "*" => (min, max),
                r => match r.split_once('-') {
                    Some((a, b)) => (a.parse().unwrap(), b.parse().unwrap()),
                    None if part.contains('/') => (r.parse().unwrap(), max),
                    None => (r.parse().unwrap(), r.parse().unwrap()),
                },
            };
            v >= lo && v <= hi && (v - lo) % step == 0
        })
    }
    let numeric = fields
        .iter()
        .all(|f| !f.chars().any(|c| c.is_ascii_alphabetic()));
    assert!(numeric, "the second opinion reads numbers only: {fields:?}");
    let dow = i64::from(at.weekday().to_sunday_zero_offset());
    let dom = has(fields[2], at.day().into(), 1, 31);
    let dow = has(fields[4], dow, 0, 7) || (dow == 0 && has(fields[4], 7, 0, 7));
    let day = if fields[2].starts_with('*') || fields[4].starts_with('*') {
        dom && dow
    } else {
        dom || dow
    };
    has(fields[0], at.minute().into(), 0, 59)
        && has(fields[1], at.hour().into(), 0, 23)
        && has(fields[3], at.month().into(), 1, 12)
        && day
}

/// The instants of `zone`'s offset changes in the years compared.
fn transitions(zone: &str) -> Vec<i64> {
    let tz = TimeZone::get(zone).expect("zone");
    let from: Timestamp = "2026-12-01T00:00:00Z".parse().unwrap();
    let until: Timestamp = "2040-01-01T00:00:00Z".parse().unwrap();
    tz.following(from)
        .map(|t| t.timestamp())
        .take_while(|t| *t < until)
        .map(|t| t.as_second())
        .collect()
}

#[test]
fn imported_schedules_fire_when_cron_does_across_daylight_saving_changes() {
    let mut text = String::new();
    // Line number -> (zone, fields).
    let mut lines: BTreeMap<usize, (&str, &str)> = BTreeMap::new();
    let mut n = 0;
    for zone in ZONES {
        text.push_str(&format!("CRON_TZ={zone}\n"));
        n += 1;
        for expr in EXPRS {
            n += 1;
            text.push_str(&format!("{expr} /bin/true line{n}\n"));
            lines.insert(n, (zone, expr));
        }
    }
    let (toml_text, warnings, status) = import(&text, &["--user", "root"]);
    assert_eq!(status, 0, "{warnings:?}");
    let doc: toml::Table = toml::from_str(&toml_text).expect("the output is TOML");
    let jobs = doc["jobs"].as_table().expect("[jobs]");
    assert_eq!(jobs.len(), lines.len(), "one job per line");

    // Starting points: the new year, and a day before each change of 2027 in the zone.
    let mut queries = Vec::new();
    let mut cases = Vec::new();
    for (line, (zone, expr)) in &lines {
        let job = jobs[&format!("line{line}")].as_table().expect("job");
        let schedule: Vec<String> = match &job["schedule"] {
            toml::Value::String(s) => vec![s.clone()],
            toml::Value::Array(a) => a
                .iter()
                .map(|v| v.as_str().expect("string").to_string())
                .collect(),
            v => panic!("schedule {v:?}"),
        };
        let mut bases = vec![Timestamp::from_second(1_798_761_607).unwrap().as_second()]; // 2027-01-01 00:00:07 UTC
        bases.extend(
            transitions(zone)
                .into_iter()
                .filter(|t| (1_798_761_600..1_830_297_600).contains(t)) // in 2027
                .map(|t| t - 86_400 + 7),
        );
        for base in bases {
            let civil = TimeZone::get(zone)
                .unwrap()
                .to_datetime(Timestamp::from_second(base).unwrap());
            queries.push((five_fields(expr).to_string(), civil, N));
            cases.push((*line, *zone, *expr, schedule.clone(), base));
        }
    }
    let cron = croniter_times(&queries);

    let mut failures = Vec::new();
    let mut differing_warned = 0;
    let mut croniter_defects = BTreeSet::new();
    for ((line, zone, expr, schedule, base), cron) in cases.iter().zip(cron) {
        let tz = TimeZone::get(zone).unwrap();
        let fields: Vec<&str> = five_fields(expr).split_whitespace().collect();
        let wildcard = fields[0].starts_with('*') || fields[1].starts_with('*');
        let cron: Vec<i64> = cron
            .iter()
            .flat_map(|at| cron_instants(&tz, *at, wildcard))
            .collect();
        let systemd = systemd_elapses(schedule, zone, *base, N);
        let horizon = (*systemd.last().unwrap()).min(*cron.last().unwrap());
        let a: BTreeSet<i64> = systemd.iter().copied().filter(|t| *t <= horizon).collect();
        let b: BTreeSet<i64> = cron.iter().copied().filter(|t| *t <= horizon).collect();
        let diff: Vec<i64> = a.symmetric_difference(&b).copied().collect();
        if diff.is_empty() {
            continue;
        }
        let warned = warnings.get(line).cloned().unwrap_or_default();
        let star_rule = warned.iter().any(|w| w.contains("day fields combine"));
        let dst_warned = warned.iter().any(|w| w.contains("clock"));
        let changes = transitions(zone);
        let near_change = |t: &i64| changes.iter().any(|c| (t - c).abs() <= 26 * 3600);
        if star_rule || (dst_warned && diff.iter().all(near_change)) {
            differing_warned += 1;
            continue;
        }
        // Where croniter itself departs from crontab(5) (it skips March 1 for `*/10` in
        // the day of month after February), crontab(5) read literally decides.
        let numeric = fields
            .iter()
            .all(|f| !f.chars().any(|c| c.is_ascii_alphabetic()));
        if numeric && !diff.iter().any(near_change) {
            let only_systemd: Vec<i64> = a.difference(&b).copied().collect();
            let only_cron: Vec<i64> = b.difference(&a).copied().collect();
            let wall = |t: &i64| tz.to_datetime(Timestamp::from_second(*t).unwrap());
            if only_systemd
                .iter()
                .all(|t| crontab5_matches(&fields, wall(t)))
                && only_cron
                    .iter()
                    .all(|t| !crontab5_matches(&fields, wall(t)))
            {
                croniter_defects.insert(format!(
                    "`{expr}`: croniter misses {:?}",
                    only_systemd.iter().map(wall).take(2).collect::<Vec<_>>()
                ));
                continue;
            }
        }
        let show = |t: &i64| {
            format!(
                "{} {zone}",
                TimeZone::get(zone)
                    .unwrap()
                    .to_datetime(Timestamp::from_second(*t).unwrap())
            )
        };
        failures.push(format!(
            "line {line} `{expr}` in {zone} from {}: schedule {schedule:?}; only systemd: {:?}; only cron: {:?}; warnings {warned:?}",
            show(base),
            a.difference(&b).take(3).map(show).collect::<Vec<_>>(),
            b.difference(&a).take(3).map(show).collect::<Vec<_>>(),
        ));
    }
    eprintln!(
        "{} lines, {} comparisons of {N} fire times; {differing_warned} differed only where warned; \
         where croniter departs from crontab(5): {croniter_defects:?}",
        lines.len(),
        cases.len()
    );
    assert!(
        failures.is_empty(),
        "{} disagreements:\n{}",
        failures.len(),
        failures.join("\n")
    );
    // Zones with daylight saving produce clock-change warnings; UTC none.
    let dst = |l: &usize| warnings[l].iter().any(|w| w.contains("clock"));
    assert!(
        !warnings.keys().filter(|l| lines[*l].0 == "UTC").any(dst),
        "{warnings:?}"
    );
    for zone in &ZONES[1..] {
        assert!(
            warnings.keys().filter(|l| lines[*l].0 == *zone).any(dst),
            "{zone}: {warnings:?}"
        );
    }

    check_accepts(&toml_text);
}

/// The seed's line in a system table, with the variables and forms cron tables use.
#[test]
fn a_system_table_becomes_jobs_that_keep_crons_meaning() {
    let table = "\
# nightly sync (kept)
MAILTO=ops@example.com
RANDOM_DELAY=5
0 2 * * * root flock -n /tmp/sync.lock /bin/echo synced
*/5 * * * * root /bin/echo often
30 4 1 * * root /bin/echo \"report\" > /dev/null 2>&1
0 6 * * 1 root /usr/bin/sort%b%a
@reboot root /bin/true
0 0 L * * root /bin/true
0 0 * * * root
61 * * * * root /bin/true
";
    let (out, warnings, status) = import(table, &["--system"]);
    assert_eq!(
        status, 1,
        "a line that cannot be read gives exit 1: {warnings:?}"
    );
    let doc: toml::Table = toml::from_str(&out).expect("TOML");
    let jobs = doc["jobs"].as_table().unwrap();
    let job = |name: &str| {
        jobs[name]
            .as_table()
            .unwrap_or_else(|| panic!("{name} in {out}"))
    };
    // Each job is named by its own line: its command and the next telling word.
    let echo = job("echo-synced");
    assert_eq!(echo["schedule"].as_str(), Some("*-*-* 02:00:00"));
    assert_eq!(
        echo["command"],
        toml::Value::from(vec!["/bin/echo", "synced"]),
        "flock -n dropped"
    );
    assert_eq!(echo["user"].as_str(), Some("root"));
    assert_eq!(echo["randomized_delay"].as_str(), Some("5min"));
    // What every job shares is written once: the table's MAILTO, cron's PATH and SHELL,
    // and no catch-up (cron never runs a missed slot).
    let defaults = doc["defaults"].as_table().expect("[defaults]");
    assert_eq!(
        defaults["on_failure"].as_str(),
        Some("jobguard-mail@%i.service")
    );
    assert_eq!(defaults["catch_up"].as_str(), Some("none"));
    assert_eq!(
        defaults["environment"]["PATH"].as_str(),
        Some("/usr/bin:/bin")
    );
    assert!(!echo.contains_key("on_failure") && !echo.contains_key("environment"));
    assert!(out.contains("# nightly sync (kept)"), "comments are kept");
    assert!(
        out.contains("`systemctl edit jobguard-mail@.service`, then [Service] Environment=MAILTO=ops@example.com"),
        "what to set for the recipient"
    );
    // Every five minutes cannot take a five-minute delay: left out, with a warning.
    let often = job("echo-often");
    assert!(!often.contains_key("randomized_delay"));
    assert!(
        warnings[&5].iter().any(|w| w.contains("RANDOM_DELAY")),
        "{warnings:?}"
    );
    // Shell syntax runs in the shell; `%` feeds standard input.
    assert_eq!(
        job("echo-report")["command"],
        toml::Value::from(vec![
            "/bin/sh",
            "-c",
            "/bin/echo \"report\" > /dev/null 2>&1"
        ])
    );
    let sort = job("sort");
    assert_eq!(
        sort["command"][2].as_str(),
        Some("printf %s 'b\na' | { /usr/bin/sort\n}")
    );
    // @reboot and L have no job but a warning and a comment; a bad line is an error.
    assert!(warnings[&8][0].contains("@reboot"), "{warnings:?}");
    assert!(warnings[&9][0].contains("`L`"), "{warnings:?}");
    assert!(warnings[&10][0].contains("no command"), "{warnings:?}");
    assert!(
        warnings[&11][0].contains("minute field `61`"),
        "{warnings:?}"
    );
    assert!(
        out.contains("# (crontab) @reboot root /bin/true\n# no job: @reboot"),
        "{out}"
    );
    assert_eq!(jobs.len(), 4);

    // What the %-job's shell gets on standard input is what cron would give it.
    let sort_out = Command::new("/bin/sh")
        .arg("-c")
        .arg(sort["command"][2].as_str().unwrap())
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&sort_out.stdout), "a\nb\n");

    check_accepts(&out);
}

/// Tables as they come from real hosts, with what cron does with each oddity kept or
/// warned about, and never a silent change.
#[test]
fn odd_tables_keep_crons_meaning_or_say_why() {
    let mut table = Vec::new();
    table.extend_from_slice(b"TZ=America/New_York\n"); // 1: the command's zone only
    table.extend_from_slice(b"0 2 * * * root /bin/echo tz\n"); // 2
    table.extend_from_slice(b"0 14 * * * root flock -n /var/lock/s.lock /bin/echo g\n"); // 3
    table.extend_from_slice(b"30 14 * * * root flock -n /var/lock/s.lock /bin/echo h\n"); // 4
    table.extend_from_slice(b"# colour \x1b[0m in a comment\n"); // 5
    table.extend_from_slice(b"0 0 30 2 * root /bin/true\n"); // 6: never
    table.extend_from_slice(b"0 1 * * * root /bin/echo \xff\n"); // 7: not UTF-8
    table.extend_from_slice(b"0 2 * * * www-data:adm /bin/true\n"); // 8
    table.extend_from_slice(b"CRON_TZ=europe/berlin\n"); // 9
    table.extend_from_slice(b"SHELL=/bin/bash\n"); // 10
    table.extend_from_slice(b"0 3 * * * root /bin/echo via-bash\n"); // 11
    table.extend_from_slice(b"0 4 * * * root /bin/echo last"); // 12: no newline
    let mut child = Command::new(BIN)
        .args(["import-crontab", "--system"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(&table).unwrap();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "lines 7 and 8 cannot be read: {stderr}"
    );
    let warned = |line: usize, what: &str| {
        assert!(
            stderr.lines().any(
                |l| l.starts_with(&format!("(standard input):{line}: warning: "))
                    && l.contains(what)
            ),
            "line {line} should warn about {what:?}: {stderr}"
        )
    };
    warned(1, "TZ= sets the commands' zone");
    warned(3, "wrapper stays");
    warned(4, "wrapper stays");
    warned(6, "never comes");
    warned(7, "not UTF-8");
    warned(8, "`www-data:adm` is not a user name");
    warned(12, "no newline");
    let doc: toml::Table = toml::from_str(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let jobs = doc["jobs"].as_table().unwrap();
    let tz = jobs["echo-tz"].as_table().unwrap();
    assert_eq!(
        tz["schedule"].as_str(),
        Some("*-*-* 02:00:00"),
        "TZ= does not move the schedule"
    );
    // A job's environment is its own, else the one of [defaults].
    let env = |job: &toml::Table| {
        job.get("environment")
            .unwrap_or_else(|| &doc["defaults"]["environment"])
            .clone()
    };
    assert_eq!(env(tz)["TZ"].as_str(), Some("America/New_York"));
    assert_eq!(
        env(tz)["PATH"].as_str(),
        Some("/usr/bin:/bin"),
        "cron's default PATH"
    );
    assert_eq!(
        jobs["echo-g"]["command"][0].as_str(),
        Some("flock"),
        "a shared lock stays"
    );
    assert_eq!(jobs["echo-h"]["command"][0].as_str(), Some("flock"));
    assert!(
        text.contains("# colour \\x1b[0m in a comment"),
        "control characters are escaped"
    );
    let bash = jobs["echo-via-bash"].as_table().unwrap();
    assert_eq!(
        bash["schedule"].as_str(),
        Some("*-*-* 03:00:00 Europe/Berlin"),
        "the tzdb's spelling"
    );
    assert_eq!(
        bash["command"],
        toml::Value::from(vec!["/bin/bash", "-c", "/bin/echo via-bash"]),
        "SHELL= is kept"
    );
    assert_eq!(
        env(bash)["SHELL"].as_str(),
        Some("/bin/bash"),
        "a job whose variables are not most jobs' has its own"
    );
    assert!(
        jobs.contains_key("echo-last"),
        "the unterminated line is translated"
    );
    assert_eq!(jobs.len(), 5, "{text}");
}

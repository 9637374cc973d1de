//! Property tests of every parser, on generated input (proptest; a failure prints the
//! shrunk input and proptest's seed, and `PROPTEST_CASES=N` runs more cases):
//!
//! - the job-list loader, on whole files made from the valid examples (the golden
//!   generator inputs and `packaging/jobs.toml`) by random mutation and truncation, and
//!   on random text: it never panics; every error names the file, line and column, and
//!   the key and job where there is one; what it accepts can be rendered, elapses, names
//!   a store kind this build opens, and round-trips through unit-name escaping;
//! - calendar expressions: parsing never panics; the normalized form of a valid
//!   expression is a fixed point and elapses as the original;
//! - timestamps: parsing never panics; RFC 3339 with any offset under 24 hours reads
//!   back the instant it was made from; larger offsets are refused as such;
//! - time spans: parsing never panics; a sum of parts reads as the sum; printing and
//!   parsing again gives the same span;
//! - store addresses: parsing and masking never panic; a password is never shown, in
//!   any form an operator might write (URL user-info, query parameter, percent-encoded,
//!   libpq keyword form, malformed URL), by `address::mask`, by the error of a failed
//!   parse, or by the job-list loader's message;
//! - unit-name escaping: every valid job name round-trips, and agrees with
//!   `systemd-escape` (one call for a batch of names).
//!
//! The differential tests against `systemd-analyze` are in `calendar_differential.rs`.

use std::path::{Path, PathBuf};

use jiff::Timestamp;
use jiff::tz::TimeZone;
use proptest::prelude::*;

use jobguard::calendar::CalendarSpec;
use jobguard::calendar::timestamp::parse_timestamp_in;
use jobguard::joblist::config::{ErrorScope, JobSet, load_str};
use jobguard::joblist::timespan::TimeSpan;
use jobguard::store::address::{StoreAddress, mask};
use jobguard::systemd::unit_name;

fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases: std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(cases),
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

// ---------------------------------------------------------------------------------
// The job-list loader

/// The valid job lists of the repository, as seeds for mutation.
fn seeds() -> Vec<String> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(rd) = std::fs::read_dir(dir) else {
            return;
        };
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "toml") {
                out.push(p);
            }
        }
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = vec![root.join("packaging/jobs.toml")];
    walk(&root.join("tests/generator"), &mut files);
    files.retain(|p| !p.components().any(|c| c.as_os_str() == "expected"));
    files.sort();
    let texts: Vec<String> = files
        .iter()
        .filter_map(|p| std::fs::read_to_string(p).ok())
        .collect();
    assert!(texts.len() >= 8, "seed job lists not found");
    texts
}

/// Pieces an edit inserts: keys, misspelt keys, values of every type, good and bad,
/// and TOML punctuation.
const FRAGMENTS: &[&str] = &[
    "[jobs.x]\n",
    "[jobs.\"ä b\"]\n",
    "[jobs.Bad]\n",
    "[defaults]\n",
    "[jobs]\n",
    "[[jobs.y]]\n",
    "schedule = \"daily\"\n",
    "schedule = \"*-02-30\"\n",
    "schedule = \"Mon..Fri *-*-* 02:00 Europe/Berlin\"\n",
    "schedule = \"bogus\"\n",
    "command = [\"/bin/true\"]\n",
    "command = []\n",
    "command = \"/bin/true\"\n",
    "timeout = \"1h\"\n",
    "timeout = \"an hour\"\n",
    "timeout = -1\n",
    "lease_ttl = \"1s\"\n",
    "kill_grace = \"infinity\"\n",
    "store = \"etcd://h:2379\"\n",
    "store = \"zookeeper://u:pw@h1,h2/jobs\"\n",
    "store = \"redis://:pw@h/0\"\n",
    "store = \"sqlite://\"\n",
    "store = \"mongodb://u:p@h/db\"\n",
    "store_file = \"x.url\"\n",
    "store_credential = \"bad/id\"\n",
    "user = \"-root\"\n",
    "user = \"4294967295\"\n",
    "environment = { A = \"1\", JOBGUARD_X = \"2\", \"1bad\" = \"3\" }\n",
    "persistent = \"yes\"\n",
    "inhibit = \"sometimes\"\n",
    "on_failure = \"not a unit\"\n",
    "descripton = \"typo\"\n",
    "schedul = \"daily\"\n",
    "= \"no key\"\n",
    "x = \n",
    "\"",
    "'''",
    "[",
    "]",
    "{",
    "}",
    "=",
    ",",
    "#",
    "\\u0000",
    "\u{0}",
    "\u{feff}",
    "\r\n",
    "é",
    "1979-05-27T07:32:00Z",
    "3.14",
    "true",
    "0x10",
];

#[derive(Debug, Clone)]
enum Edit {
    /// Cut the text at this fraction (per mille) of its length.
    Truncate(u16),
    /// Remove the bytes at [a, a+n) (fractions of the length, per mille; n bytes).
    Delete(u16, u8),
    /// Insert a fragment at a fraction of the length.
    Insert(u16, usize),
    /// Insert arbitrary text.
    InsertText(u16, String),
    /// Repeat the line at a fraction of the line count.
    DuplicateLine(u16),
    /// Swap two lines.
    SwapLines(u16, u16),
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        (0u16..1000).prop_map(Edit::Truncate),
        (0u16..1000, 1u8..40).prop_map(|(a, n)| Edit::Delete(a, n)),
        (0u16..1000, 0..FRAGMENTS.len()).prop_map(|(a, i)| Edit::Insert(a, i)),
        (0u16..1000, ".{0,12}").prop_map(|(a, s)| Edit::InsertText(a, s)),
        (0u16..1000).prop_map(Edit::DuplicateLine),
        (0u16..1000, 0u16..1000).prop_map(|(a, b)| Edit::SwapLines(a, b)),
    ]
}

/// The byte offset at `per_mille` of `text`, moved back to a character boundary.
fn at(text: &str, per_mille: u16) -> usize {
    let mut i = text.len() * usize::from(per_mille) / 1000;
    while !text.is_char_boundary(i) {
        i -= 1;
    }
    i
}

fn apply(mut text: String, edits: &[Edit]) -> String {
    for e in edits {
        match e {
            Edit::Truncate(p) => {
                let i = at(&text, *p);
                text.truncate(i);
            }
            Edit::Delete(p, n) => {
                let a = at(&text, *p);
                let mut b = (a + usize::from(*n)).min(text.len());
                while !text.is_char_boundary(b) {
                    b += 1;
                }
                text.replace_range(a..b, "");
            }
            Edit::Insert(p, i) => {
                let a = at(&text, *p);
                text.insert_str(a, FRAGMENTS[*i]);
            }
            Edit::InsertText(p, s) => {
                let a = at(&text, *p);
                text.insert_str(a, s);
            }
            Edit::DuplicateLine(p) => {
                let mut lines: Vec<&str> = text.split_inclusive('\n').collect();
                if !lines.is_empty() {
                    let i = lines.len() * usize::from(*p) / 1000;
                    lines.insert(i, lines[i]);
                }
                text = lines.concat();
            }
            Edit::SwapLines(p, q) => {
                let mut lines: Vec<&str> = text.split_inclusive('\n').collect();
                if !lines.is_empty() {
                    let i = lines.len() * usize::from(*p) / 1000;
                    let j = lines.len() * usize::from(*q) / 1000;
                    lines.swap(i, j);
                }
                text = lines.concat();
            }
        }
    }
    text
}

/// What every loaded job list must satisfy, whatever the text.
fn check_set(path: &Path, text: &str, set: &JobSet) -> Result<(), TestCaseError> {
    let lines = text.split('\n').count();
    for e in &set.errors {
        prop_assert_eq!(&e.file, path, "{}", e);
        let (Some(line), Some(column)) = (e.line, e.column) else {
            return Err(TestCaseError::fail(format!("no line:column in {e}")));
        };
        prop_assert!(
            line >= 1 && line <= lines,
            "line {} of {}: {}",
            line,
            lines,
            e
        );
        prop_assert!(column >= 1, "{}", e);
        let prefix = format!("{}:{line}:{column}", path.display());
        prop_assert!(e.to_string().starts_with(&prefix), "{}", e);
        match e.scope {
            ErrorScope::Job => {
                prop_assert!(e.job.is_some() && e.key.is_some(), "{:?}", e);
            }
            ErrorScope::Key => prop_assert!(e.key.is_some(), "{:?}", e),
            ErrorScope::File => {}
        }
        prop_assert!(!e.message.is_empty(), "{:?}", e);
    }
    let now = Timestamp::now();
    for (name, job) in &set.jobs {
        prop_assert!(
            jobguard::joblist::job::is_valid_job_name(name),
            "{:?}",
            name
        );
        let escaped = unit_name::escape(name);
        prop_assert_eq!(
            unit_name::unescape(&escaped).ok(),
            Some(name.as_bytes().to_vec())
        );
        let unit = format!("jobguard@{escaped}.service");
        prop_assert!(unit_name::is_valid_unit_name(&unit), "{}", unit);
        prop_assert!(
            job.calendar.next_elapse(now).is_some(),
            "{} never elapses",
            job.schedule
        );
        if !job.store.is_empty() {
            prop_assert!(
                jobguard::store::registry::kind_of(&job.store).is_some_and(|k| k.built),
                "{} cannot be opened by this build",
                job.store
            );
        }
        for (key, p) in &job.positions {
            prop_assert!(p.line >= 1 && p.column >= 1, "{}: {:?}", key, p);
        }
    }
    // Rendering what was accepted never panics and names every job.
    let units = jobguard::systemd::render::render(
        set,
        &jobguard::systemd::render::RenderOptions::default(),
    );
    // The instance is the job name as it is (the templates use `%i`).
    for name in set.jobs.keys() {
        let dropin = PathBuf::from(format!("jobguard@{name}.timer.d"));
        prop_assert!(
            units.iter().any(|u| u.path.starts_with(&dropin)),
            "no unit for {}",
            name
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn the_loader_takes_mutated_job_lists_without_panicking_and_places_every_error(
        seed in any::<prop::sample::Index>(),
        edits in prop::collection::vec(edit(), 0..6),
    ) {
        let seeds = seeds();
        let text = apply(seed.get(&seeds).clone(), &edits);
        let path = Path::new("/etc/jobguard/jobs.d/50-fuzz.toml");
        let set = load_str(path, &text);
        check_set(path, &text, &set)?;
    }

    #[test]
    fn the_loader_takes_random_text_without_panicking(text in "(\\PC|\n|\\[|\\]|=|\"){0,200}") {
        let path = Path::new("/srv/jobs.toml");
        let set = load_str(path, &text);
        check_set(path, &text, &set)?;
    }
}

// ---------------------------------------------------------------------------------
// Calendar expressions

fn expression() -> impl Strategy<Value = String> {
    let weekday = prop::sample::select(vec![
        "",
        "Mon ",
        "Mon..Fri ",
        "Sat,Sun ",
        "Wed..Mon ",
        "mon,wed ",
        "Fri ",
    ]);
    let year = prop::sample::select(vec![
        "*",
        "2026",
        "2024..2030",
        "2025/2",
        "2027,2029",
        "1970",
        "2199",
    ]);
    let month = prop::sample::select(vec!["*", "02", "1..12", "1/3", "1,4,7,10", "12", "6"]);
    let day = prop::sample::select(vec![
        "*",
        "1",
        "29",
        "30",
        "31",
        "1..7",
        "~1",
        "~07/1",
        "2/5",
        "15",
        "01..31/10",
    ]);
    let hour = prop::sample::select(vec![
        "*", "00", "2", "0..23/6", "9..17", "02,14", "23", "1/5",
    ]);
    let minute = prop::sample::select(vec!["00", "*", "0/15", "30", "5,35", "59"]);
    let second = prop::sample::select(vec!["", ":00", ":30", ":*", ":0/20", ":05.5", ":59"]);
    let zone = prop::sample::select(vec![
        "",
        " UTC",
        " Europe/Berlin",
        " America/New_York",
        " Australia/Lord_Howe",
        " Asia/Kolkata",
        " America/Santiago",
        " Pacific/Chatham",
    ]);
    let shorthand = prop::sample::select(vec![
        "minutely",
        "hourly",
        "daily",
        "weekly",
        "monthly",
        "yearly",
        "quarterly",
        "semiannually",
    ]);
    prop_oneof![
        4 => (weekday, year, month, day, hour, minute, second, zone.clone()).prop_map(
            |(w, y, mo, d, h, mi, s, z)| format!("{w}{y}-{mo}-{d} {h}:{mi}{s}{z}")
        ),
        1 => (shorthand, zone).prop_map(|(s, z)| format!("{s}{z}")),
    ]
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn calendar_parsing_never_panics(expr in "\\PC{0,60}") {
        if let Ok(spec) = CalendarSpec::parse_in(&expr, TimeZone::UTC) {
            let _ = spec.to_string();
            let _ = spec.next_elapse(Timestamp::UNIX_EPOCH);
        }
    }

    #[test]
    fn the_normalized_form_is_a_fixed_point_and_elapses_as_the_original(
        expr in expression(),
        base in 0i64..4_102_444_800,
    ) {
        let berlin = TimeZone::get("Europe/Berlin").expect("zone");
        let Ok(spec) = CalendarSpec::parse_in(&expr, berlin.clone()) else {
            return Ok(());
        };
        let normalized = spec.to_string();
        let again = CalendarSpec::parse_in(&normalized, berlin.clone())
            .map_err(|e| TestCaseError::fail(format!("{expr:?} -> {normalized:?}: {e}")))?;
        prop_assert_eq!(again.to_string(), normalized.clone(), "from {:?}", expr);
        let base = Timestamp::from_second(base).expect("in range");
        prop_assert_eq!(spec.next_elapse(base), again.next_elapse(base), "{:?} / {:?}", expr, normalized);
        prop_assert_eq!(spec.previous_elapse(base), again.previous_elapse(base), "{:?}", expr);
    }
}

// ---------------------------------------------------------------------------------
// Timestamps

proptest! {
    #![proptest_config(config(512))]

    #[test]
    fn timestamp_parsing_never_panics(text in "(\\PC|[0-9:+ TZ-]){0,40}") {
        let now = Timestamp::from_second(1_795_917_600).expect("valid");
        let _ = parse_timestamp_in(&text, now, &TimeZone::UTC);
        let berlin = TimeZone::get("Europe/Berlin").expect("zone");
        let _ = parse_timestamp_in(&text, now, &berlin);
    }

    #[test]
    fn rfc3339_reads_back_the_instant_it_was_made_from(
        secs in 0i64..253_402_128_000,
        usec in 0i64..1_000_000,
        offset_min in -(23i64 * 60 + 59)..=(23 * 60 + 59),
        colon in any::<bool>(),
        sep in prop::sample::select(vec!["T", "t", " "]),
    ) {
        let t = Timestamp::from_microsecond(secs * 1_000_000 + usec).expect("in range");
        let sign = if offset_min < 0 { '-' } else { '+' };
        let (h, m) = (offset_min.abs() / 60, offset_min.abs() % 60);
        let zone = if colon { format!("{sign}{h:02}:{m:02}") } else { format!("{sign}{h:02}{m:02}") };
        let text = format!("{}.{usec:06}{zone}", civil(secs + offset_min * 60, sep));
        let got = parse_timestamp_in(&text, Timestamp::now(), &TimeZone::UTC);
        prop_assert_eq!(got, Ok(t), "{}", text);
    }

    #[test]
    fn an_offset_of_a_day_or_more_is_refused(h in 24u32..100, m in 0u32..60, minus in any::<bool>()) {
        let text = format!("2026-01-01T00:00:00{}{h:02}:{m:02}", if minus { '-' } else { '+' });
        let e = parse_timestamp_in(&text, Timestamp::now(), &TimeZone::UTC).expect_err("refused");
        prop_assert!(e.reason.contains("less than 24 hours"), "{}", e);
        prop_assert!(e.to_string().starts_with("invalid timestamp"), "{}", e);
    }
}

/// `YYYY-MM-DD{sep}HH:MM:SS` of seconds since the epoch, UTC (the days-to-civil
/// algorithm of H. Hinnant's chrono paper, independent of the code under test).
fn civil(secs: i64, sep: &str) -> String {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}{sep}{:02}:{:02}:{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

// ---------------------------------------------------------------------------------
// Time spans

const SPAN_UNITS: &[(&str, u64)] = &[
    ("us", 1),
    ("ms", 1_000),
    ("s", 1_000_000),
    ("sec", 1_000_000),
    ("min", 60_000_000),
    ("m", 60_000_000),
    ("h", 3_600_000_000),
    ("hr", 3_600_000_000),
    ("d", 86_400_000_000),
    ("days", 86_400_000_000),
    ("w", 604_800_000_000),
];

proptest! {
    #![proptest_config(config(512))]

    #[test]
    fn span_parsing_never_panics(text in "(\\PC|[0-9. ]|min|us|infinity){0,40}") {
        if let Ok(span) = TimeSpan::parse(&text) {
            let _ = span.to_string();
        }
    }

    #[test]
    fn a_sum_of_parts_reads_as_the_sum_and_prints_back(
        parts in prop::collection::vec((0u64..100_000, 0..SPAN_UNITS.len(), any::<bool>()), 1..5)
    ) {
        let mut text = String::new();
        let mut sum = 0u64;
        for (n, u, space) in &parts {
            let (unit, factor) = SPAN_UNITS[*u];
            if !text.is_empty() {
                text.push(' ');
            }
            text.push_str(&n.to_string());
            if *space {
                text.push(' ');
            }
            text.push_str(unit);
            sum += n * factor;
        }
        let span = TimeSpan::parse(&text).map_err(|e| TestCaseError::fail(format!("{text:?}: {e}")))?;
        prop_assert_eq!(span.as_usec(), sum, "{}", text);
        let printed = span.to_string();
        prop_assert_eq!(TimeSpan::parse(&printed).map(|s| s.as_usec()).ok(), Some(sum), "{} printed as {}", text, printed);
    }
}

// ---------------------------------------------------------------------------------
// Store addresses and masking

proptest! {
    #![proptest_config(config(512))]

    #[test]
    fn address_parsing_and_masking_never_panic(text in "(\\PC|:|/|@|\\?|#|=|&){0,60}") {
        let _ = mask(&text);
        if let Err(e) = StoreAddress::parse(&text) {
            let _ = e.to_string();
        }
    }
}

/// A password marker: distinctive, with the characters people put in passwords.
fn password() -> impl Strategy<Value = String> {
    (
        "[A-Za-z0-9]{6,10}",
        prop::sample::select(vec!["", "/", "@", "?", "#", ":", "!", "%", "&", "="]),
    )
        .prop_map(|(core, special)| format!("Zq{core}{special}Xw"))
}

fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// Every form a store address with a password takes.
fn secret_address() -> impl Strategy<Value = (String, String)> {
    let scheme = prop::sample::select(vec![
        "postgres",
        "postgresql",
        "mysql",
        "mariadb",
        "redis",
        "rediss",
        "etcd",
        "zookeeper",
        "sqlite",
    ]);
    (scheme, password(), 0u8..7).prop_map(|(scheme, pw, form)| {
        let address = match form {
            0 => format!("{scheme}://jobguard:{pw}@db.example:5432/jobs"),
            1 => format!("{scheme}://:{pw}@127.0.0.1:6379/0"),
            2 => format!("{scheme}://db.example/jobs?user=u&password={pw}&sslmode=require"),
            3 => format!(
                "{scheme}://jobguard:{}@db.example/jobs",
                percent_encode(&pw)
            ),
            4 => format!("host=127.0.0.1 port=5432 user=u password={pw} dbname=d"),
            5 => format!("{scheme}:/:{pw}@127.0.0.1:1/0"),
            _ => format!("{scheme}:u:{pw}@db/jobs"),
        };
        // A percent-encoded password is also a secret in its encoded form.
        let shown = if form == 3 { percent_encode(&pw) } else { pw };
        (address, shown)
    })
}

proptest! {
    #![proptest_config(config(256))]

    /// The manual: "Passwords are masked as `***` in every message".
    #[test]
    fn masking_hides_every_password_form((address, pw) in secret_address()) {
        let masked = mask(&address);
        prop_assert!(!masked.contains(&pw), "mask({:?}) = {:?}", address, masked);
        if let Err(e) = StoreAddress::parse(&address) {
            prop_assert!(!e.to_string().contains(&pw), "{}", e);
        }
        let text = format!(
            "[jobs.a]\nschedule = \"daily\"\ncommand = [\"/bin/true\"]\nstore = {}\n",
            toml_string(&address)
        );
        let set = load_str(Path::new("/etc/jobguard/jobs.toml"), &text);
        for e in &set.errors {
            prop_assert!(!e.to_string().contains(&pw), "{}", e);
        }
    }
}

/// `s` as a TOML basic string.
fn toml_string(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

// ---------------------------------------------------------------------------------
// Unit-name escaping

fn job_name_like() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => "[a-z0-9][a-z0-9._-]{0,63}",
        1 => "[a-zA-Z0-9._@ /\\\\-]{0,70}",
        1 => "\\PC{0,20}",
    ]
}

proptest! {
    #![proptest_config(config(512))]

    #[test]
    fn every_valid_job_name_round_trips_through_escaping(name in job_name_like()) {
        if !jobguard::joblist::job::is_valid_job_name(&name) {
            return Ok(());
        }
        let escaped = unit_name::escape(&name);
        prop_assert_eq!(unit_name::unescape(&escaped).ok(), Some(name.as_bytes().to_vec()));
        let unit = format!("jobguard@{escaped}.timer");
        prop_assert!(unit_name::is_valid_unit_name(&unit), "{}", unit);
        // The generator names the instance by the name itself (`%i` in the templates):
        // a valid unit name whose instance systemd reads back as the name.
        let unit = format!("jobguard@{name}.service");
        prop_assert!(unit_name::is_valid_unit_name(&unit), "{}", unit);
        let instance = unit
            .strip_prefix("jobguard@")
            .and_then(|r| r.rsplit_once('.'))
            .map(|(i, _)| i);
        prop_assert_eq!(instance, Some(name.as_str()));
        // What the generator writes for it is found again under that name.
        let text = format!("[jobs.{}]\nschedule = \"daily\"\ncommand = [\"/bin/true\"]\n", toml_string(&name));
        let set = load_str(Path::new("/etc/jobguard/jobs.toml"), &text);
        prop_assert!(set.jobs.contains_key(&name), "{:?}", set.errors);
    }
}

proptest! {
    #![proptest_config(config(2))]

    /// `systemd-escape` as the oracle: one call per batch of names.
    #[test]
    fn escaping_agrees_with_systemd_escape(
        names in prop::collection::vec("[a-z0-9][a-z0-9._-]{0,63}", 100..150),
    ) {
        let names: Vec<String> = names
            .into_iter()
            .filter(|n| jobguard::joblist::job::is_valid_job_name(n))
            .collect();
        let out = std::process::Command::new("systemd-escape")
            .arg("--")
            .args(&names)
            .output()
            .expect("systemd-escape is on every machine this project builds on");
        prop_assert!(out.status.success());
        let text = String::from_utf8(out.stdout).expect("utf-8");
        let theirs: Vec<&str> = text.split_whitespace().collect();
        prop_assert_eq!(theirs.len(), names.len());
        for (name, want) in names.iter().zip(theirs) {
            prop_assert_eq!(unit_name::escape(name), want, "{}", name);
        }
    }
}

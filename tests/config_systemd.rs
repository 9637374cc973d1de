//! jobguard's escaping and time-span rules against systemd's own tools on this machine:
//! `systemd-escape` (with and without `--path`, and `-u`) and `systemd-analyze timespan`.

use std::process::Command;

use jobguard::joblist::timespan::TimeSpan;
use jobguard::systemd::unit_name;

/// Odd strings: dashes, slashes, dots, backslashes, specifiers, white space, control
/// characters, non-ASCII in several scripts, emoji.
const ODD: &[&str] = &[
    "store-sync",
    "a.b_c:d",
    ".hidden",
    "..",
    "x\\y",
    "100%",
    "%i%n",
    "tab\there",
    "new\nline",
    "trailing-",
    "-leading",
    "a--b",
    "Überweisung",
    "日本語のジョブ",
    "кириллица",
    "emoji 🎉",
    "\u{7f}del",
    "quote\"s'and`ticks",
    "semi;colon&amp|pipe",
    "@at+plus!bang",
];

fn run(cmd: &mut Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 output")
}

#[test]
fn escape_matches_systemd_escape() {
    let theirs = run(Command::new("systemd-escape").arg("--").args(ODD));
    let theirs: Vec<&str> = theirs.trim_end_matches('\n').split(' ').collect();
    let ours: Vec<String> = ODD.iter().map(|s| unit_name::escape(s)).collect();
    assert_eq!(ours, theirs);
}

#[test]
fn unescape_matches_systemd_escape_u() {
    let escaped: Vec<String> = ODD.iter().map(|s| unit_name::escape(s)).collect();
    // systemd-escape -u prints the results separated by spaces; compare one at a time
    // because the results themselves contain spaces.
    for (orig, esc) in ODD.iter().zip(&escaped) {
        let theirs = run(Command::new("systemd-escape").args(["-u", "--"]).arg(esc));
        let ours = unit_name::unescape(esc).expect("our own escape unescapes");
        assert_eq!(
            String::from_utf8_lossy(&ours),
            theirs.trim_end_matches('\n'),
            "{orig:?}"
        );
        assert_eq!(ours, orig.as_bytes());
    }
}

#[test]
fn escape_path_matches_systemd_escape_path() {
    let paths = [
        "/",
        "/srv/sync",
        "/srv//sync/",
        "/srv/./sync/.",
        "/srv/my jobs/ä",
        "/var/lib/job-guard",
        "/.dot/x",
        "/a\\b/%c",
        "relative/path",
    ];
    let theirs = run(Command::new("systemd-escape")
        .args(["--path", "--"])
        .args(paths));
    let theirs: Vec<&str> = theirs.trim_end_matches('\n').split(' ').collect();
    let ours: Vec<String> = paths
        .iter()
        .map(|p| unit_name::escape_path(p).expect("normalized"))
        .collect();
    assert_eq!(ours, theirs);
    for bad in ["/a/../b", "..", "."] {
        let status = Command::new("systemd-escape")
            .args(["--path", "--", bad])
            .stderr(std::process::Stdio::null())
            .status()
            .expect("run systemd-escape");
        assert!(!status.success(), "systemd-escape accepted {bad:?}");
        assert!(unit_name::escape_path(bad).is_err(), "we accepted {bad:?}");
    }
    for p in ["/srv/my jobs/ä", "/var/lib/job-guard", "/"] {
        let esc = unit_name::escape_path(p).expect("normalized");
        let theirs = run(Command::new("systemd-escape")
            .args(["--path", "-u", "--"])
            .arg(&esc));
        let ours = unit_name::unescape_path(&esc).expect("unescape");
        assert_eq!(
            String::from_utf8_lossy(&ours),
            theirs.trim_end_matches('\n')
        );
    }
}

/// `systemd-analyze timespan` output: (µs, human) per argument, or `None` when rejected.
fn systemd_timespan(s: &str) -> Option<(u64, String)> {
    let out = Command::new("systemd-analyze")
        .args(["timespan", "--", s])
        .output()
        .expect("run systemd-analyze");
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8(out.stdout).expect("utf-8");
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.trim_start().strip_prefix(name))
            .map(|v| v.trim().to_string())
            .unwrap_or_else(|| panic!("no {name} in {text:?}"))
    };
    let usec = field("\u{3bc}s:").parse().expect("µs is a number");
    Some((usec, field("Human:")))
}

#[test]
fn timespans_match_systemd_analyze() {
    let inputs = [
        "2min",
        "1h 30min",
        "1h30min",
        "90",
        "5s",
        "1.5h",
        ".5s",
        "0",
        "1y 2M 3w 4d 5h 6min 7s 8ms 9us",
        "61.5s",
        "59.999999s",
        "1.23456789s",
        "3 seconds 2 minutes",
        "1 hour",
        "2 weeks",
        "1month",
        "12.34 .56",
        "5 5",
        "10msec",
        "7usec",
        "7µs",
        "1d 0.5h",
        "infinity",
        " infinity ",
        "+5s",
        "",
        "5x",
        "5secs",
        "1.s",
        "-1s",
        "12.34.56",
        "1000000000000y",
        "min",
        "5 s s",
    ];
    for s in inputs {
        let ours = TimeSpan::parse(s);
        match systemd_timespan(s) {
            Some((usec, human)) if usec == u64::MAX => {
                assert!(ours.is_ok_and(TimeSpan::is_infinite), "{s:?}");
                assert_eq!(human, "infinity");
            }
            Some((usec, human)) => {
                let ours = ours.unwrap_or_else(|e| panic!("{s:?}: systemd accepts, we say {e}"));
                assert_eq!(ours.as_usec(), usec, "{s:?}");
                assert_eq!(ours.to_string(), human, "{s:?}");
            }
            None => assert!(ours.is_err(), "{s:?}: systemd rejects, we accept {ours:?}"),
        }
    }
}

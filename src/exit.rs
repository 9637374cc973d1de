//! Exit statuses of the `jobguard` binary: one table ([`ALL`]), which the manual's
//! exit-status table is tested against, and one order of severity ([`SEVERITY`]).
//!
//! `jobguard run` passes the command's own status through (a death by signal N becomes
//! 128+N, as in a shell); its own failures use the BSD `sysexits.h` numbers, which jobs
//! rarely use, so an operator can tell "the job failed" from "jobguard could not run it".
//! A skip (slot done, lock held, lease held elsewhere) is a success: 0.

use std::fmt::Display;
use std::process::ExitStatus;

/// Success, or a run that was skipped.
pub const OK: u8 = 0;
/// `jobguard check` found errors; other commands: a generic failure.
pub const FAILURE: u8 = 1;
/// `jobguard status` and `jobguard audit`: something needs attention (a held, failed,
/// missed or queued slot, a run whose holder is gone, a timer that is not waiting, ...).
pub const ATTENTION: u8 = 1;
/// The command line was wrong (clap's status).
pub const USAGE: u8 = 2;
/// The store could not be reached (`EX_UNAVAILABLE`).
pub const STORE_UNAVAILABLE: u8 = 69;
/// An internal error (`EX_SOFTWARE`).
pub const SOFTWARE: u8 = 70;
/// A system call failed: lock or runtime directory, fork (`EX_OSERR`).
pub const OS_ERROR: u8 = 71;
/// The lease was lost while the command ran; the command was stopped (`EX_TEMPFAIL`).
pub const LEASE_LOST: u8 = 75;
/// This host's clock and the store's differ by more than `clock_tolerance`; nothing ran
/// (`EX_PROTOCOL`).
pub const CLOCK_SKEW: u8 = 76;
/// Not allowed: e.g. `user =` needs root (`EX_NOPERM`).
pub const NO_PERMISSION: u8 = 77;
/// The job is unknown or its configuration is invalid (`EX_CONFIG`).
pub const CONFIG: u8 = 78;
/// The command ran past its `timeout` and was stopped (as `timeout(1)`).
pub const TIMEOUT: u8 = 124;
/// The command exists but could not be executed (as a shell).
pub const CANNOT_EXECUTE: u8 = 126;
/// The command was not found (as a shell).
pub const NOT_FOUND: u8 = 127;

/// Every status `jobguard` exits with, for the exit-status table of the manual (a test
/// holds the table to this list: a status added here without its row fails it). A
/// command's own status and 128+N for signal N pass through `jobguard run` besides.
pub const ALL: [u8; 14] = [
    OK,
    FAILURE,
    USAGE,
    STORE_UNAVAILABLE,
    SOFTWARE,
    OS_ERROR,
    LEASE_LOST,
    CLOCK_SKEW,
    NO_PERMISSION,
    CONFIG,
    TIMEOUT,
    CANNOT_EXECUTE,
    NOT_FOUND,
    // 128+N: a command that died from signal N (the table's `128+N` row).
    128,
];

/// jobguard's own statuses from the most severe down, for a command over several jobs or
/// stores ([`worst`]): data a store holds that cannot be used (70), a system call that
/// failed (71), a right that is missing (77), a job list that is wrong (78), a store that
/// cannot be reached (69), clocks apart (76), a lease lost (75). Below them: any other
/// status that is not 0, 1 or 2 (a command's own, passed on by `recover` without
/// systemd), then a bad command line (2), then something that needs attention or a
/// generic failure (1), then success (0).
pub const SEVERITY: [u8; 7] = [
    SOFTWARE,
    OS_ERROR,
    NO_PERMISSION,
    CONFIG,
    STORE_UNAVAILABLE,
    CLOCK_SKEW,
    LEASE_LOST,
];

/// How severe `status` is by [`SEVERITY`]: larger is worse.
fn rank(status: u8) -> usize {
    match SEVERITY.iter().position(|s| *s == status) {
        Some(i) => 10 + SEVERITY.len() - i,
        None => match status {
            OK => 0,
            FAILURE => 1,
            USAGE => 2,
            _ => 3,
        },
    }
}

/// The more severe of two statuses ([`SEVERITY`]); the larger number when they rank alike
/// (two commands' own statuses), so that the order they come in does not matter. A
/// command over several jobs or stores (`recover`, `status`, `status --fleet`, `audit`,
/// `history`, `metrics`, `prune`, `resolve --done` of a removed job, `store init`) exits
/// with the worst status it met, whatever the jobs' order.
pub fn worst(a: u8, b: u8) -> u8 {
    if (rank(b), b) > (rank(a), a) { b } else { a }
}

/// The status to exit with for a child's status: its code, or 128+N for signal N.
pub fn from_child(status: ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    if let Some(code) = status.code() {
        return u8::try_from(code & 0xff).unwrap_or(FAILURE);
    }
    match status.signal() {
        Some(sig) => u8::try_from((128 + sig) & 0xff).unwrap_or(FAILURE),
        None => FAILURE,
    }
}

/// An error that ends a command, or one job's part of a command over several: what to
/// say and the exit status it means (one of [`ALL`]). The errors the commands end with or
/// report per job reach stderr through [`Error::print`], each line once, after
/// `jobguard: `; a run's own log (`jobguard run`'s lines beside its journal events),
/// warnings and notes, and `check`'s findings (its output) are printed where they arise.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    status: u8,
    lines: Vec<String>,
    verbatim: bool,
}

impl Error {
    /// An error of one line.
    pub fn new(status: u8, message: impl Display) -> Self {
        Error {
            status,
            lines: vec![message.to_string()],
            verbatim: false,
        }
    }

    /// An error of several lines (a job list's errors, one per line).
    pub fn lines(status: u8, lines: Vec<String>) -> Self {
        Error {
            status,
            lines,
            verbatim: false,
        }
    }

    /// An error printed as given, without `jobguard: ` (`jobguard calendar` speaks
    /// systemd-analyze's words).
    pub fn verbatim(status: u8, text: impl Display) -> Self {
        Error {
            status,
            lines: vec![text.to_string()],
            verbatim: true,
        }
    }

    /// The same error with `what: ` before its first line (the job or store it concerns).
    #[must_use]
    pub fn context(mut self, what: impl Display) -> Self {
        if let Some(first) = self.lines.first_mut() {
            *first = format!("{what}: {first}");
        }
        self
    }

    /// The exit status this error means.
    pub fn status(&self) -> u8 {
        self.status
    }

    /// What it says, one line per element, without `jobguard: `.
    pub fn messages(&self) -> &[String] {
        &self.lines
    }

    /// Prints the error to stderr and returns its status: the one place where a command's
    /// errors are printed.
    pub fn print(&self) -> u8 {
        for line in &self.lines {
            if self.verbatim {
                eprint!("{line}");
            } else {
                eprintln!("jobguard: {line}");
            }
        }
        self.status
    }
}

impl Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.lines.join("\n"))
    }
}

/// The exit status a layer's error means ([`ALL`]): each error type that reaches a
/// command says its own, and becomes an [`Error`] with it.
pub trait Status: Display {
    /// The status, one of [`ALL`].
    fn exit_status(&self) -> u8;
}

impl<E: Status> From<E> for Error {
    fn from(e: E) -> Self {
        Error::new(e.exit_status(), e)
    }
}

/// How a command that ran to its end exits: 0, 1 when something needs attention, a
/// command's own status that `jobguard run` passes on, or, for a command over several jobs
/// or stores, the worst status of the errors it reported on the way ([`worst`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Finished(u8);

impl Finished {
    /// Success (0).
    pub const OK: Finished = Finished(OK);
    /// Something needs attention (1).
    pub const ATTENTION: Finished = Finished(ATTENTION);

    /// Ends with `status` (a command's own, passed on).
    pub fn with(status: u8) -> Self {
        Finished(status)
    }

    /// The exit status.
    pub fn status(self) -> u8 {
        self.0
    }

    /// Notes one more status met: the worse of the two stays ([`worst`]).
    pub fn add(&mut self, status: u8) {
        self.0 = worst(self.0, status);
    }

    /// Prints one job's error ([`Error::print`]) and notes its status.
    pub fn report(&mut self, e: &Error) {
        self.add(e.print());
    }
}

/// What a subcommand returns: how it ended, or the error that ended it.
pub type Result = std::result::Result<Finished, Error>;

/// The exit status of a subcommand's result, its error printed ([`Error::print`]).
pub fn code(outcome: Result) -> u8 {
    match outcome {
        Ok(f) => f.status(),
        Err(e) => e.print(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    #[test]
    fn a_command_over_several_jobs_ends_with_the_worst_error_it_reported() {
        let errors = [
            Error::new(STORE_UNAVAILABLE, "store gone"),
            Error::new(CONFIG, "bad address").context("job a"),
            Error::new(ATTENTION, "held"),
        ];
        for order in [[0, 1, 2], [2, 1, 0], [1, 0, 2]] {
            let mut finished = Finished::OK;
            for i in order {
                finished.add(errors[i].status());
            }
            assert_eq!(finished.status(), CONFIG, "{order:?}");
        }
        assert_eq!(errors[1].to_string(), "job a: bad address");
        assert_eq!(code(Ok(Finished::with(3))), 3);
        assert_eq!(
            code(Err(Error::lines(CONFIG, vec!["a".into(), "b".into()]))),
            CONFIG
        );
    }

    /// Each layer's error says its own status, and keeps it on its way to the command.
    #[test]
    fn a_layers_error_keeps_its_status() {
        let e = crate::store::StoreError::Unavailable {
            store: "s".into(),
            detail: "down".into(),
        };
        assert_eq!(Error::from(e).status(), STORE_UNAVAILABLE);
        let e = crate::ops::pause::PauseError::UntilPassed {
            until: "a".into(),
            now: "b".into(),
        };
        assert_eq!(Error::from(e).context("job").status(), USAGE);
    }

    #[test]
    fn the_worst_status_wins_whatever_the_order() {
        let all: Vec<u8> = ALL.iter().copied().chain([3]).collect();
        for &a in &all {
            for &b in &all {
                assert_eq!(worst(a, b), worst(b, a), "{a} {b}");
                assert!(worst(a, b) == a || worst(a, b) == b);
            }
        }
        assert_eq!(worst(OK, ATTENTION), ATTENTION);
        assert_eq!(worst(ATTENTION, CONFIG), CONFIG);
        assert_eq!(worst(CONFIG, STORE_UNAVAILABLE), CONFIG);
        assert_eq!(worst(STORE_UNAVAILABLE, SOFTWARE), SOFTWARE);
        assert_eq!(worst(3, STORE_UNAVAILABLE), STORE_UNAVAILABLE);
        assert_eq!(worst(FAILURE, 3), 3);
        let folded = |order: &[u8]| order.iter().fold(OK, |s, x| worst(s, *x));
        assert_eq!(folded(&[CONFIG, OK, STORE_UNAVAILABLE]), CONFIG);
        assert_eq!(folded(&[STORE_UNAVAILABLE, OK, CONFIG]), CONFIG);
    }

    /// The manual's exit-status table (the Markdown table under a heading "Exit statuses"
    /// in README.md or a page of docs/) has one row per status of [`ALL`], in its order,
    /// each with a meaning.
    #[test]
    fn the_manual_documents_every_exit_status_in_one_table() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut pages = vec![root.join("README.md")];
        if let Ok(dir) = std::fs::read_dir(root.join("docs")) {
            pages.extend(dir.flatten().map(|e| e.path()));
        }
        let tables: Vec<Vec<(String, String)>> = pages
            .iter()
            .filter_map(|p| std::fs::read_to_string(p).ok())
            .filter_map(|text| {
                let (_, after) = text.split_once("## Exit statuses\n")?;
                let rows: Vec<(String, String)> = after
                    .lines()
                    .skip_while(|l| !l.starts_with('|'))
                    .take_while(|l| l.starts_with('|'))
                    .skip(2)
                    .filter_map(|l| {
                        let mut cells = l.split(" | ");
                        let status = cells.next()?.trim_start_matches('|').trim();
                        Some((status.trim_matches('`').to_string(), cells.collect()))
                    })
                    .collect();
                Some(rows)
            })
            .collect();
        assert_eq!(tables.len(), 1, "one exit-status table in the manual");
        let documented: Vec<String> = tables[0].iter().map(|(s, _)| s.clone()).collect();
        let want: Vec<String> = ALL
            .iter()
            .map(|s| match *s {
                128 => "128+N".to_string(),
                s => s.to_string(),
            })
            .collect();
        assert_eq!(documented, want);
        assert!(tables[0].iter().all(|(_, meaning)| meaning.len() > 10));
    }

    /// Every status constant of this file is in [`ALL`], so a new one cannot miss the
    /// manual's table.
    #[test]
    fn every_status_constant_is_in_the_table() {
        let source = include_str!("exit.rs");
        let constants: Vec<u8> = source
            .lines()
            .filter_map(|l| l.strip_prefix("pub const ")?.split_once(": u8 = "))
            .filter_map(|(_, v)| v.trim_end_matches(';').parse().ok())
            .collect();
        assert!(constants.len() >= 14, "{constants:?}");
        for c in constants {
            assert!(ALL.contains(&c), "status {c} is not in ALL");
        }
    }

    #[test]
    fn child_codes_pass_through_and_signals_become_128_plus_n() {
        assert_eq!(from_child(ExitStatus::from_raw(0)), 0);
        assert_eq!(from_child(ExitStatus::from_raw(3 << 8)), 3);
        assert_eq!(from_child(ExitStatus::from_raw(9)), 137);
        assert_eq!(from_child(ExitStatus::from_raw(15)), 143);
    }
}

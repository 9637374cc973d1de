//! The keys of the job list, in one table: what the parser accepts (anything else is an
//! `unknown key`, with the nearest key and its meaning), and what the reference page
//! (docs/jobs.toml.md, its key table: name, type and default as written here) and
//! jobguard.toml(5) (its KEYS section) describe; tests hold both pages to this table.
//!
//! Adding a key: its row here, its arm in the parser (`crate::joblist::config`), its row in
//! docs/jobs.toml.md and its entry in packaging/man/jobguard.toml.5.

/// Where a key may be written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// In a job's table (`[jobs.NAME]`) and in `[defaults]`.
    Job,
    /// In `[metrics]`.
    Metrics,
}

/// One key of the job list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Key {
    /// The key as written in TOML.
    pub name: &'static str,
    /// Its type, as the reference page writes it (Markdown).
    pub ty: &'static str,
    /// Its default, as the reference page writes it (Markdown).
    pub default: &'static str,
    /// Where it may be written.
    pub scope: Scope,
    /// What it does, in one line of plain text.
    pub meaning: &'static str,
    /// A valid value, as TOML (for the tests and for people).
    pub example: &'static str,
}

const fn job(
    name: &'static str,
    ty: &'static str,
    default: &'static str,
    meaning: &'static str,
    example: &'static str,
) -> Key {
    Key {
        name,
        ty,
        default,
        scope: Scope::Job,
        meaning,
        example,
    }
}

/// Every key, in the reference page's order: a job's keys (also valid in `[defaults]`),
/// then `[metrics]`'s.
pub const KEYS: &[Key] = &[
    job(
        "description",
        "string",
        "`jobguard job NAME`",
        "Description= of the job's units",
        "\"Nightly sync\"",
    ),
    job(
        "schedule",
        "string or array of strings",
        "**required**",
        "when the job runs: OnCalendar= expressions (systemd.time(7))",
        "\"*-*-* 02:00:00\"",
    ),
    job(
        "command",
        "array of strings",
        "**required**",
        "the command's argv, run without a shell",
        "[\"/bin/true\"]",
    ),
    job(
        "user",
        "string",
        "root",
        "the user the command runs as",
        "\"nobody\"",
    ),
    job(
        "working_directory",
        "string",
        "the user's home with `user` (if it exists, else `/`); else inherited (`/` under systemd)",
        "the directory the command starts in",
        "\"/\"",
    ),
    job(
        "environment",
        "table of strings",
        "none",
        "extra environment variables for the command",
        "{ APP_ENV = \"prod\" }",
    ),
    job(
        "timeout",
        "time span",
        "none",
        "how long a run may take before it is stopped",
        "\"1h\"",
    ),
    job(
        "randomized_delay",
        "time span",
        "none",
        "RandomizedDelaySec= of the timer: spreads the start",
        "\"5min\"",
    ),
    job(
        "persistent",
        "boolean",
        "`true` (`false` with `catch_up = \"none\"`)",
        "Persistent= of the timer: a slot missed while off runs at boot",
        "true",
    ),
    job(
        "catch_up",
        "`\"latest\"` \\| `\"all\"` \\| `\"none\"`",
        "`\"latest\"`",
        "which earlier elapses a firing runs when they never ran",
        "\"all\"",
    ),
    job(
        "catch_up_limit",
        "integer",
        "`100`",
        "with catch_up = \"all\", the most elapses one catch-up runs",
        "10",
    ),
    job(
        "retention",
        "time span",
        "`90d`",
        "how long the job's records are kept",
        "\"30d\"",
    ),
    job(
        "store",
        "string",
        "see below",
        "the store of the job's leases and ledger",
        "\"sqlite:///var/lib/jobguard/jobguard.db\"",
    ),
    job(
        "store_file",
        "string",
        "none",
        "a root-only file holding the store address",
        "\"/etc/jobguard/store.url\"",
    ),
    job(
        "store_credential",
        "string",
        "none",
        "a systemd credential holding the store address",
        "\"jobguard-store\"",
    ),
    job(
        "store_wait",
        "time span",
        "`2min`",
        "how long a run retries an unreachable store",
        "\"30s\"",
    ),
    job(
        "on_store_unavailable",
        "`\"fail\"` \\| `\"skip\"`",
        "`\"fail\"`",
        "what a run does when the store stays unreachable",
        "\"skip\"",
    ),
    job(
        "clock_tolerance",
        "time span",
        "`60s`",
        "the largest accepted difference between this host's and the store's clock",
        "\"30s\"",
    ),
    job(
        "lease_ttl",
        "time span",
        "`2min`",
        "the lease's time to live, renewed while the command runs",
        "\"3min\"",
    ),
    job(
        "on_interrupted",
        "`\"rerun\"` \\| `\"hold\"`",
        "`\"rerun\"`",
        "what happens to a run cut off by a crash or reboot",
        "\"hold\"",
    ),
    job(
        "settle_failures",
        "`\"never\"` \\| `\"next-success\"`",
        "`\"never\"`",
        "whether a success settles the job's earlier failed slots",
        "\"next-success\"",
    ),
    job(
        "inhibit",
        "`\"delay\"` \\| `\"block\"` \\| `\"none\"`",
        "`\"delay\"`",
        "the logind inhibitor lock held while the command runs",
        "\"block\"",
    ),
    job(
        "on_failure",
        "string",
        "none",
        "a unit started when the job's service fails (OnFailure=)",
        "\"status-email@%n.service\"",
    ),
    job(
        "on_success",
        "string",
        "none",
        "a unit started when the job's service succeeds (OnSuccess=)",
        "\"notify@%n.service\"",
    ),
    job(
        "enabled",
        "boolean",
        "`true`",
        "false pauses the job on this host: its timer is not armed",
        "false",
    ),
    job(
        "kill_grace",
        "time span",
        "`10s`",
        "the time between SIGTERM and SIGKILL when a run is stopped",
        "\"20s\"",
    ),
    Key {
        name: "textfile",
        ty: "string",
        default: "none",
        scope: Scope::Metrics,
        meaning: "the file jobguard recover writes the metrics to, for node_exporter",
        example: "\"/var/lib/prometheus/node-exporter/jobguard.prom\"",
    },
];

/// The keys of `scope`.
pub fn of(scope: Scope) -> impl Iterator<Item = &'static Key> {
    KEYS.iter().filter(move |k| k.scope == scope)
}

/// The key of `scope` named `name`.
pub fn find(scope: Scope, name: &str) -> Option<&'static Key> {
    of(scope).find(|k| k.name == name)
}

/// The key of `scope` nearest to a misspelt `name` (at most two edits away, Levenshtein
/// distance in characters), for an `unknown key` message.
pub fn nearest(scope: Scope, name: &str) -> Option<&'static Key> {
    of(scope)
        .map(|k| (strsim::levenshtein(name, k.name), k))
        .filter(|(d, _)| *d <= 2)
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_a_misspelling_finds_its_key() {
        let mut names: Vec<&str> = KEYS.iter().map(|k| k.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), KEYS.len());
        assert_eq!(
            nearest(Scope::Job, "catchup").map(|k| k.name),
            Some("catch_up")
        );
        assert_eq!(
            nearest(Scope::Metrics, "textfle").map(|k| k.name),
            Some("textfile")
        );
        assert!(nearest(Scope::Job, "textfile").is_none());
        assert!(find(Scope::Job, "textfile").is_none());
    }
}

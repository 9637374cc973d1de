#!/usr/bin/env python3
"""Writes tests/corpus/bad-jobs/NNN-NAME.toml: job lists with one realistic mistake each.

Each file holds a good job `good-NNN` and a job with the mistake; its second line says
which jobs must get a unit (`# good: good-NNN`, or `# good: -` when the mistake costs
the whole file, such as a TOML syntax error or a bad [defaults]). tests/corpus.rs runs
the real generator and `jobguard check` over every file. Run from the repository root
after changing the list below; the files are committed.
"""
import os
import shutil

BASE = 'schedule = "daily"\ncommand = ["/bin/true"]\n'

# (name, text of the bad part, whether the good job survives). In the text, BAD is a
# job table with the usual schedule and command, ready for one more key.
BAD = "[jobs.bad]\n" + BASE
CASES = [
    # Misspelt keys.
    ("typo-schedule", "[jobs.bad]\nschedul = \"daily\"\ncommand = [\"/bin/true\"]\n", True),
    ("typo-shedule", "[jobs.bad]\nshedule = \"daily\"\ncommand = [\"/bin/true\"]\n", True),
    ("typo-command", "[jobs.bad]\nschedule = \"daily\"\ncomand = [\"/bin/true\"]\n", True),
    ("typo-commnad", "[jobs.bad]\nschedule = \"daily\"\ncommnad = [\"/bin/true\"]\n", True),
    ("typo-description", BAD + 'descripton = "nightly sync"\n', True),
    ("typo-timeout", BAD + 'timout = "1h"\n', True),
    ("dash-lease-ttl", BAD + 'lease-ttl = "30s"\n', True),
    ("typo-store-file", BAD + 'store_fil = "/etc/jobguard/store.url"\n', True),
    ("british-randomised-delay", BAD + 'randomised_delay = "5min"\n', True),
    ("typo-on-interrupted", BAD + 'on_interupted = "hold"\n', True),
    ("typo-inhibit", BAD + 'inhibt = "block"\n', True),
    ("typo-persistent", BAD + 'persistant = false\n', True),
    ("typo-environment", BAD + 'enviroment = { A = "1" }\n', True),
    ("working-dir-short", BAD + 'working_dir = "/srv"\n', True),
    ("usr-for-user", BAD + 'usr = "nobody"\n', True),
    ("store-url-key", BAD + 'store_url = "sqlite:///var/lib/x.db"\n', True),
    ("onfailure-no-underscore", BAD + 'onfailure = "alert@%n.service"\n', True),
    ("camel-case-key", BAD + 'killGrace = "5s"\n', True),
    ("upper-case-key", "[jobs.bad]\nSCHEDULE = \"daily\"\ncommand = [\"/bin/true\"]\n", True),
    ("cron-key", BAD + 'cron = "0 2 * * *"\n', True),
    # Values of the wrong type.
    ("schedule-integer", "[jobs.bad]\nschedule = 5\ncommand = [\"/bin/true\"]\n", True),
    ("schedule-array", "[jobs.bad]\nschedule = [\"daily\", 5]\ncommand = [\"/bin/true\"]\n", True),
    ("command-string", "[jobs.bad]\nschedule = \"daily\"\ncommand = \"/bin/true\"\n", True),
    ("command-empty", "[jobs.bad]\nschedule = \"daily\"\ncommand = []\n", True),
    ("command-integers", "[jobs.bad]\nschedule = \"daily\"\ncommand = [1, 2]\n", True),
    ("command-empty-program", "[jobs.bad]\nschedule = \"daily\"\ncommand = [\"\", \"x\"]\n", True),
    ("command-nested", "[jobs.bad]\nschedule = \"daily\"\ncommand = [[\"/bin/true\"]]\n", True),
    ("timeout-boolean", BAD + 'timeout = true\n', True),
    ("timeout-float", BAD + 'timeout = 1.5\n', True),
    ("timeout-array", BAD + 'timeout = [1]\n', True),
    ("lease-ttl-table", BAD + 'lease_ttl = {}\n', True),
    ("persistent-string", BAD + 'persistent = "yes"\n', True),
    ("persistent-integer", BAD + 'persistent = 1\n', True),
    ("environment-string", BAD + 'environment = "A=1"\n', True),
    ("environment-integer-value", BAD + 'environment = { A = 1 }\n', True),
    ("inhibit-boolean", BAD + 'inhibit = true\n', True),
    ("user-integer", BAD + 'user = 1000\n', True),
    ("description-integer", BAD + 'description = 42\n', True),
    ("store-integer", BAD + 'store = 1\n', True),
    ("working-directory-boolean", BAD + 'working_directory = false\n', True),
    ("kill-grace-negative", BAD + 'kill_grace = -5\n', True),
    ("timeout-datetime", BAD + 'timeout = 2026-01-01T00:00:00Z\n', True),
    ("timeout-hex", BAD + 'timeout = 0x10\n', True),
    # Schedules that are not calendar events, or never elapse.
    ("schedule-bogus", "[jobs.bad]\nschedule = \"every night\"\ncommand = [\"/bin/true\"]\n", True),
    ("schedule-february-30", "[jobs.bad]\nschedule = \"*-02-30\"\ncommand = [\"/bin/true\"]\n", True),
    ("schedule-april-31", "[jobs.bad]\nschedule = \"*-04-31 02:00\"\ncommand = [\"/bin/true\"]\n", True),
    ("schedule-in-the-past", "[jobs.bad]\nschedule = \"2001-01-01 00:00:00\"\ncommand = [\"/bin/true\"]\n", True),
    ("schedule-hour-25", "[jobs.bad]\nschedule = \"*-*-* 25:00\"\ncommand = [\"/bin/true\"]\n", True),
    ("schedule-minute-60", "[jobs.bad]\nschedule = \"*-*-* 02:60\"\ncommand = [\"/bin/true\"]\n", True),
    ("schedule-bad-weekday", "[jobs.bad]\nschedule = \"Mon..Funday 02:00\"\ncommand = [\"/bin/true\"]\n", True),
    ("schedule-cron-syntax", "[jobs.bad]\nschedule = \"0 2 * * *\"\ncommand = [\"/bin/true\"]\n", True),
    ("schedule-unknown-zone", "[jobs.bad]\nschedule = \"*-*-* 02:00 Mars/Base\"\ncommand = [\"/bin/true\"]\n", True),
    ("schedule-empty", "[jobs.bad]\nschedule = \"\"\ncommand = [\"/bin/true\"]\n", True),
    ("schedule-month-13", "[jobs.bad]\nschedule = \"*-13-01\"\ncommand = [\"/bin/true\"]\n", True),
    ("schedule-star-slash", "[jobs.bad]\nschedule = \"*:*/5\"\ncommand = [\"/bin/true\"]\n", True),
    ("schedule-second-61", "[jobs.bad]\nschedule = \"*-*-* *:*:61\"\ncommand = [\"/bin/true\"]\n", True),
    ("schedule-1969", "[jobs.bad]\nschedule = \"1969-01-01\"\ncommand = [\"/bin/true\"]\n", True),
    ("schedule-repeat-zero", "[jobs.bad]\nschedule = \"*:0/0\"\ncommand = [\"/bin/true\"]\n", True),
    # Time spans.
    ("span-words", BAD + 'timeout = "an hour"\n', True),
    ("span-unknown-unit", BAD + 'timeout = "1 fortnight"\n', True),
    ("span-negative", BAD + 'timeout = "-5min"\n', True),
    ("span-two-dots", BAD + 'timeout = "1.5.5h"\n', True),
    ("span-empty", BAD + 'timeout = ""\n', True),
    ("lease-ttl-too-short", BAD + 'lease_ttl = "1s"\n', True),
    ("lease-ttl-infinite", BAD + 'lease_ttl = "infinity"\n', True),
    ("kill-grace-infinite", BAD + 'kill_grace = "infinity"\n', True),
    ("clock-tolerance-zero", BAD + 'clock_tolerance = "0"\n', True),
    ("store-wait-forever", BAD + 'store_wait = "forever"\n', True),
    ("span-unit-only", BAD + 'timeout = "min"\n', True),
    ("span-huge", BAD + 'timeout = "99999999999999999999y"\n', True),
    # Stores.
    ("store-etdc", BAD + 'store = "etdc://127.0.0.1:2379"\n', True),
    ("store-memcached", BAD + 'store = "memcached://127.0.0.1:11211"\n', True),
    ("store-mongodb", BAD + 'store = "mongodb://u@db/jobs"\n', True),
    ("store-consul", BAD + 'store = "consul://127.0.0.1:8500"\n', True),
    ("store-sqlite-no-path", BAD + 'store = "sqlite://"\n', True),
    ("store-bare-path", BAD + 'store = "/var/lib/jobguard/jobguard.db"\n', True),
    ("store-no-slashes", BAD + 'store = "postgres:u:secret@db/jobs"\n', True),
    ("store-memory", BAD + 'store = "sqlite::memory:"\n', True),
    ("store-and-store-file", BAD + 'store = "sqlite:///var/lib/a.db"\nstore_file = "/etc/jobguard/b.url"\n', True),
    ("store-credential-slash", BAD + 'store_credential = "bad/id"\n', True),
    ("store-credential-empty", BAD + 'store_credential = ""\n', True),
    ("store-file-empty", BAD + 'store_file = ""\n', True),
    ("store-nul", BAD + 'store = "sqlite:///var/lib/a\\u0000.db"\n', True),
    # One job twice, or clashing tables: TOML refuses the whole file.
    ("duplicate-table", "[jobs.bad]\n" + BASE + "\n[jobs.bad]\n" + BASE, False),
    ("duplicate-quoted-table", "[jobs.bad]\n" + BASE + "\n[jobs.\"bad\"]\n" + BASE, False),
    ("duplicate-key", "[jobs.bad]\n" + BASE + 'schedule = "hourly"\n', False),
    ("dotted-key-clash", "[jobs.bad]\n" + BASE + "\n[jobs]\nbad.schedule = \"hourly\"\n", False),
    # Job names.
    ("name-upper-case", "[jobs.Bad-Name]\n" + BASE, True),
    ("name-space", "[jobs.\"with space\"]\n" + BASE, True),
    ("name-umlaut", "[jobs.\"übung\"]\n" + BASE, True),
    ("name-leading-dash", "[jobs.\"-lead\"]\n" + BASE, True),
    ("name-leading-dot", "[jobs.\".dot\"]\n" + BASE, True),
    ("name-slash", "[jobs.\"a/b\"]\n" + BASE, True),
    ("name-too-long", "[jobs." + "x" * 65 + "]\n" + BASE, True),
    ("name-cjk", "[jobs.\"日本\"]\n" + BASE, True),
    ("name-at", "[jobs.\"a@b\"]\n" + BASE, True),
    ("name-underscore-first", "[jobs._under]\n" + BASE, True),
    ("name-empty", "[jobs.\"\"]\n" + BASE, True),
    ("name-emoji", "[jobs.\"backup-\U0001F4BE\"]\n" + BASE, True),
    ("name-rtl-override", "[jobs.\"a\u202eb\"]\n" + BASE, True),
    # Users.
    ("user-leading-dash", BAD + 'user = "-root"\n', True),
    ("user-space", BAD + 'user = "ro ot"\n', True),
    ("user-uid-max", BAD + 'user = "4294967295"\n', True),
    ("user-uid-huge", BAD + 'user = "99999999999"\n', True),
    ("user-empty", BAD + 'user = ""\n', True),
    ("user-colon", BAD + 'user = "a:b"\n', True),
    ("user-dollar-first", BAD + 'user = "$x"\n', True),
    ("user-newline", BAD + 'user = "root\\n"\n', True),
    # Environment.
    ("env-name-digit", BAD + 'environment = { "1A" = "x" }\n', True),
    ("env-reserved", BAD + 'environment = { JOBGUARD_SLOT = "x" }\n', True),
    ("env-name-dash", BAD + 'environment = { "A-B" = "x" }\n', True),
    ("env-nul", BAD + 'environment = { A = "x\\u0000y" }\n', True),
    # Choices.
    ("on-interrupted-retry", BAD + 'on_interrupted = "retry"\n', True),
    ("inhibit-yes", BAD + 'inhibit = "yes"\n', True),
    ("on-store-unavailable-ignore", BAD + 'on_store_unavailable = "ignore"\n', True),
    ("on-failure-not-a-unit", BAD + 'on_failure = "not a unit!"\n', True),
    ("on-interrupted-upper", BAD + 'on_interrupted = "Rerun"\n', True),
    # Structure.
    ("missing-schedule", "[jobs.bad]\ncommand = [\"/bin/true\"]\n", True),
    ("missing-command", "[jobs.bad]\nschedule = \"daily\"\n", True),
    ("empty-table", "[jobs.bad]\n", True),
    ("job-not-a-table", "[jobs]\nbad = 5\n", True),
    ("array-of-tables", "[[jobs.bad]]\n" + BASE, True),
    ("singular-job-table", "[job.bad]\n" + BASE, True),
    ("command-nul", "[jobs.bad]\nschedule = \"daily\"\ncommand = [\"/bin/tr\\u0000ue\"]\n", True),
    ("working-directory-empty", BAD + 'working_directory = ""\n', True),
    # Defaults every job inherits.
    ("bad-default-timeout", "[defaults]\ntimeout = \"soon\"\n\n[jobs.bad]\n" + BASE, False),
    ("bad-default-store", "[defaults]\nstore = \"consul://127.0.0.1:8500\"\n\n[jobs.bad]\n" + BASE, False),
    ("defaults-not-a-table", "defaults = \"none\"\n\n[jobs.bad]\n" + BASE + 'timeout = "x"\n', True),
    # Broken TOML: the whole file is skipped.
    ("truncated-string", "[jobs.bad]\nschedule = \"dai", False),
    ("truncated-table-header", "[jobs.bad", False),
    ("truncated-array", "[jobs.bad]\nschedule = \"daily\"\ncommand = [\"/bin/true\"", False),
    ("missing-equals", "[jobs.bad]\nschedule \"daily\"\ncommand = [\"/bin/true\"]\n", False),
    ("bare-value", "[jobs.bad]\nschedule = daily\ncommand = [\"/bin/true\"]\n", False),
    ("bad-escape", "[jobs.bad]\nschedule = \"daily\\q\"\ncommand = [\"/bin/true\"]\n", False),
    ("control-character", "[jobs.bad]\nschedule = \"dai\x01ly\"\ncommand = [\"/bin/true\"]\n", False),
    ("yaml-instead", "jobs:\n  bad:\n    schedule: daily\n", False),
    ("ini-instead", "[jobs.bad]\nschedule: daily\n", False),
    ("unclosed-inline-table", BAD + 'environment = { A = "1"\n', False),
    ("stray-bracket", "[jobs.bad]]\n" + BASE, False),
    ("latin1-byte", None, False),
]


def main():
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bad-jobs")
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    names = set()
    for i, (name, bad, good_survives) in enumerate(CASES, 1):
        assert name not in names, name
        names.add(name)
        good = f"good-{i:03}"
        head = f"# {i:03}-{name}: a job list with one mistake\n# good: {good if good_survives else '-'}\n\n"
        good_job = f"[jobs.{good}]\n{BASE}\n"
        path = os.path.join(out, f"{i:03}-{name}.toml")
        if bad is None:
            # Not UTF-8: a job list saved in Latin-1.
            data = (head + good_job).encode() + b'[jobs.bad]\nschedule = "daily"\ndescription = "caf\xe9"\ncommand = ["/bin/true"]\n'
        else:
            # A key outside any table must come before the first table.
            first, second = (bad, good_job) if not bad.startswith("[") else (good_job, bad)
            data = (head + first + second).encode()
        with open(path, "wb") as f:
            f.write(data)
    print(f"wrote {len(CASES)} files to {out}")


if __name__ == "__main__":
    main()

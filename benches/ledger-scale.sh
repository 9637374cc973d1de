#!/usr/bin/env bash
# The ledger at scale (not run by CI): `jobguard status`, `history JOB --limit 20`,
# `audit JOB --since -1d`, `audit --since -1d` (every job: "audit-all") and a claim
# (`run --force` of /bin/true) on a store holding
# 1,000,000 records over 100 jobs, against the same commands on two yardsticks, in one
# hyperfine run each: a store holding only the jobs' first runs ("empty"), and a store
# holding only the newest day of the same history, 1,440 records per job ("recent").
# Prints each median and the ratios full/empty (the issue's goal: at most 2) and
# full/recent (what the old records cost: `status` reads each job's newest 200 records and
# `audit --since -1d` judges a day of slots whatever the store holds, so only this ratio
# isolates the store's size).
#
#   benches/ledger-scale.sh            # SQLite and PostgreSQL (127.0.0.1:5432, database test)
#   STORES=sqlite benches/ledger-scale.sh
#   JOBGUARD_BIN=path/to/jobguard RUNS=3 PER_JOB=1000 benches/ledger-scale.sh   # a dry run
#
# The records are written straight into the store's table (a recursive CTE in SQLite,
# generate_series in PostgreSQL): 10,000 per job, one success per minutely slot, newest
# one minute ago, so every slot of the last week is done and none is missed until the
# minutes the benchmark itself takes pass. Fencing tokens rise with the start, and each
# job's lease row holds the newest (the claims go on from there): a ledger an audit finds
# nothing wrong with (tokens that fell with the start made every record a finding, and
# `audit` spent its time printing them). SQLite's file gets no ANALYZE: jobguard never
# runs one, so a real store has no statistics and the planner goes by the schema alone
# (with them it found the slot index on its own, and hid a claim that read every record
# of its job). PostgreSQL's tables are analysed, as autovacuum does after such a load.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${JOBGUARD_BIN:-}" ]; then
  cargo build --release --locked -q
fi
BIN=${JOBGUARD_BIN:-$PWD/target/release/jobguard}
STORES=${STORES:-sqlite postgres}
RUNS=${RUNS:-20}
PER_JOB=${PER_JOB:-10000}
RECENT=${RECENT:-1440}
JOBS=100
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
export JOBGUARD_RUNTIME_DIR=$W/run

joblist() { # STORE_ADDRESS FILE
  {
    printf '[defaults]\nstore = "%s"\n' "$1"
    for i in $(seq -w 0 $((JOBS - 1))); do
      printf '[jobs.j%s]\nschedule = "*:*:00"\ncommand = ["/bin/true"]\n' "$i"
    done
  } > "$2"
}

# The rows: job j00..j99, slot s = now minus 1..PER_JOB minutes, one success each.
now_min=$(( $(date +%s) / 60 ))
fill_sql() { # SERIES_FROM CTE_OR_FUNCTION
  cat <<SQL
INSERT INTO jobguard_run (run_id, job, slot_usec, slot_zone, attempt, outcome, reason,
  exit_status, forced, trigger_kind, host, machine_id, boot_id, pid, pid_start,
  invocation_id, started_at, finished_at, fencing_token, report, resolution)
SELECT 'r' || j || '-' || k, 'j' || substr('0' || j, -2, 2) , (CAST($now_min AS BIGINT) - k) * 60000000, 'UTC', 1,
  'succeeded', NULL, 0, 0, 'timer', 'bench', 'm', 'b', 1, 1, NULL,
  (CAST($now_min AS BIGINT) - k) * 60000000 + 1000, (CAST($now_min AS BIGINT) - k) * 60000000 + 2000, 1000000000 - k, '{}', NULL
FROM $1;
INSERT INTO jobguard_lease (job, holder, host, token, acquired_at, expire_at)
  SELECT DISTINCT job, '', 'bench', 1000000000, 0, 0 FROM jobguard_run WHERE true
  ON CONFLICT (job) DO UPDATE SET holder = '', token = excluded.token, expire_at = 0;
SQL
}

# The "empty" store: each job's first run. The "full" one: its schema (one run), whose
# records the caller then replaces.
first_runs() {
  for i in $(seq -w 0 $((JOBS - 1))); do
    "$BIN" run --force "j$i" --config "$W/empty.toml" 2>/dev/null
  done
  "$BIN" run --force j00 --config "$W/recent.toml" 2>/dev/null
  "$BIN" run --force j00 --config "$W/full.toml" 2>/dev/null
}

bench() { # NAME EMPTY_LIST RECENT_LIST FULL_LIST
  local name=$1 empty=$2 recent=$3 full=$4
  local args=()
  for what in status history audit audit-all claim; do
    for store in empty recent full; do
      local list=${!store}
      case $what in
        status) cmd="$BIN status --config $list" ;;
        history) cmd="$BIN history j42 --limit 20 --config $list" ;;
        audit) cmd="$BIN audit j42 --since -1d --config $list" ;;
        audit-all) cmd="$BIN audit --since -1d --config $list" ;;
        claim) cmd="$BIN run --force j42 --config $list" ;;
      esac
      args+=(-n "$what $store" "$cmd")
    done
  done
  hyperfine -N -i --warmup 3 --runs "$RUNS" --export-json "$W/$name.json" "${args[@]}" > /dev/null
  python3 - "$W/$name.json" "$name" <<'PY'
import json, sys
r = {x["command"]: x["median"] * 1e3 for x in json.load(open(sys.argv[1]))["results"]}
for what in ["status", "history", "audit", "audit-all", "claim"]:
    e, n, f = r[f"{what} empty"], r[f"{what} recent"], r[f"{what} full"]
    print(f"{sys.argv[2]:>8} {what:>9}: empty {e:7.2f} ms, recent {n:7.2f} ms, full {f:7.2f} ms,"
          f" full/empty {f / e:5.2f}, full/recent {f / n:5.2f}")
PY
}

for store in $STORES; do
  case $store in
    sqlite)
      joblist "sqlite://$W/empty.db" "$W/empty.toml"
      joblist "sqlite://$W/recent.db" "$W/recent.toml"
      joblist "sqlite://$W/full.db" "$W/full.toml"
      first_runs
      for store in recent full; do
        [ $store = recent ] && n=$RECENT || n=$PER_JOB
        sqlite3 "$W/$store.db" "DELETE FROM jobguard_run;
          $(fill_sql "(WITH RECURSIVE k(k) AS (SELECT 1 UNION ALL SELECT k + 1 FROM k WHERE k < $n)
                       SELECT j.j AS j, k.k AS k FROM k,
                         (WITH RECURSIVE j(j) AS (SELECT 0 UNION ALL SELECT j + 1 FROM j WHERE j < $((JOBS - 1))) SELECT j FROM j) j)")"
        echo "sqlite $store: $(sqlite3 "$W/$store.db" 'SELECT count(*) FROM jobguard_run') records"
      done
      bench sqlite "$W/empty.toml" "$W/recent.toml" "$W/full.toml"
      ;;
    postgres)
      drop="DROP SCHEMA IF EXISTS bench_empty CASCADE; DROP SCHEMA IF EXISTS bench_recent CASCADE;
        DROP SCHEMA IF EXISTS bench_full CASCADE;"
      psql -qX -h 127.0.0.1 -d test -c "$drop"
      for store in empty recent full; do
        joblist "postgres://root@127.0.0.1/test?schema=bench_$store" "$W/$store.toml"
      done
      first_runs
      for store in recent full; do
        [ $store = recent ] && n=$RECENT || n=$PER_JOB
        psql -qX -h 127.0.0.1 -d test -c "SET search_path = bench_$store; DELETE FROM jobguard_run;
          $(fill_sql "generate_series(0, $((JOBS - 1))) AS j, generate_series(1, $n) AS k" |
            sed "s/substr('0' || j, -2, 2)/lpad(j::text, 2, '0')/; s/'succeeded', NULL, 0, 0,/'succeeded', NULL, 0, false,/")" \
          -c "VACUUM ANALYZE bench_$store.jobguard_run"
        echo "postgres $store: $(psql -qAtX -h 127.0.0.1 -d test -c "SELECT count(*) FROM bench_$store.jobguard_run") records"
      done
      bench postgres "$W/empty.toml" "$W/recent.toml" "$W/full.toml"
      psql -qX -h 127.0.0.1 -d test -c "$drop"
      ;;
  esac
done

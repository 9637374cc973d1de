#!/usr/bin/env bash
# The ledger at scale (not run by CI): `jobguard status`, `history JOB --limit 20`,
# `audit JOB --since -1d` and a claim (`run --force` of /bin/true) on a store holding
# 1,000,000 records over 100 jobs, against the same commands on a store holding only the
# jobs' first runs, in one hyperfine run each. Prints each median and the ratio
# full/empty (the goal: at most 2).
#
#   benches/ledger-scale.sh            # SQLite and PostgreSQL (127.0.0.1:5432, database test)
#   STORES=sqlite benches/ledger-scale.sh
#   JOBGUARD_BIN=path/to/jobguard RUNS=3 PER_JOB=1000 benches/ledger-scale.sh   # a dry run
#
# The records are written straight into the store's table (a recursive CTE in SQLite,
# generate_series in PostgreSQL): 10,000 per job, one success per minutely slot, newest
# one minute ago, so every slot of the last week is done and none is missed.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${JOBGUARD_BIN:-}" ]; then
  cargo build --release --locked -q
fi
BIN=${JOBGUARD_BIN:-$PWD/target/release/jobguard}
STORES=${STORES:-sqlite postgres}
RUNS=${RUNS:-20}
PER_JOB=${PER_JOB:-10000}
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
  (CAST($now_min AS BIGINT) - k) * 60000000 + 1000, (CAST($now_min AS BIGINT) - k) * 60000000 + 2000, k, '{}', NULL
FROM $1;
SQL
}

# The "empty" store: each job's first run. The "full" one: its schema (one run), whose
# records the caller then replaces.
first_runs() {
  for i in $(seq -w 0 $((JOBS - 1))); do
    "$BIN" run --force "j$i" --config "$W/empty.toml" 2>/dev/null
  done
  "$BIN" run --force j00 --config "$W/full.toml" 2>/dev/null
}

bench() { # NAME EMPTY_LIST FULL_LIST
  local name=$1 empty=$2 full=$3
  hyperfine -N -i --warmup 3 --runs "$RUNS" --export-json "$W/$name.json" \
    -n "status empty" "$BIN status --config $empty" \
    -n "status full" "$BIN status --config $full" \
    -n "history empty" "$BIN history j42 --limit 20 --config $empty" \
    -n "history full" "$BIN history j42 --limit 20 --config $full" \
    -n "audit empty" "$BIN audit j42 --since -1d --config $empty" \
    -n "audit full" "$BIN audit j42 --since -1d --config $full" \
    -n "claim empty" "$BIN run --force j42 --config $empty" \
    -n "claim full" "$BIN run --force j42 --config $full" > /dev/null
  python3 - "$W/$name.json" "$name" <<'PY'
import json, sys
r = {x["command"]: x["median"] * 1e3 for x in json.load(open(sys.argv[1]))["results"]}
for what in ["status", "history", "audit", "claim"]:
    e, f = r[f"{what} empty"], r[f"{what} full"]
    print(f"{sys.argv[2]:>8} {what:>8}: empty {e:7.2f} ms, full {f:7.2f} ms, ratio {f / e:.2f}")
PY
}

for store in $STORES; do
  case $store in
    sqlite)
      joblist "sqlite://$W/empty.db" "$W/empty.toml"
      joblist "sqlite://$W/full.db" "$W/full.toml"
      first_runs
      sqlite3 "$W/full.db" "DELETE FROM jobguard_run;
        $(fill_sql "(WITH RECURSIVE k(k) AS (SELECT 1 UNION ALL SELECT k + 1 FROM k WHERE k < $PER_JOB)
                     SELECT j.j AS j, k.k AS k FROM k,
                       (WITH RECURSIVE j(j) AS (SELECT 0 UNION ALL SELECT j + 1 FROM j WHERE j < $((JOBS - 1))) SELECT j FROM j) j)")
        ANALYZE;"
      echo "sqlite: $(sqlite3 "$W/full.db" 'SELECT count(*) FROM jobguard_run') records"
      bench sqlite "$W/empty.toml" "$W/full.toml"
      ;;
    postgres)
      psql -qX -h 127.0.0.1 -d test -c "DROP SCHEMA IF EXISTS bench_empty CASCADE; DROP SCHEMA IF EXISTS bench_full CASCADE;"
      joblist "postgres://root@127.0.0.1/test?schema=bench_empty" "$W/empty.toml"
      joblist "postgres://root@127.0.0.1/test?schema=bench_full" "$W/full.toml"
      first_runs
      psql -qX -h 127.0.0.1 -d test -c "SET search_path = bench_full; DELETE FROM jobguard_run;
        $(fill_sql "generate_series(0, $((JOBS - 1))) AS j, generate_series(1, $PER_JOB) AS k" |
          sed "s/substr('0' || j, -2, 2)/lpad(j::text, 2, '0')/; s/'succeeded', NULL, 0, 0,/'succeeded', NULL, 0, false,/")
        ANALYZE jobguard_run;"
      echo "postgres: $(psql -qAtX -h 127.0.0.1 -d test -c 'SELECT count(*) FROM bench_full.jobguard_run') records"
      bench postgres "$W/empty.toml" "$W/full.toml"
      psql -qX -h 127.0.0.1 -d test -c "DROP SCHEMA bench_empty CASCADE; DROP SCHEMA bench_full CASCADE;"
      ;;
  esac
done

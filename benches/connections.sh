#!/usr/bin/env bash
# What one long run costs its PostgreSQL server (not run by CI): the connections it
# opened, the statements it ran, and how long it held a connection, for one or more
# builds of jobguard in the same run.
#
#   benches/connections.sh [BIN...]          # default: target/debug/jobguard
#   RUN_SECONDS=60 TTL=30s benches/connections.sh /tmp/jobguard-before target/debug/jobguard
#
# Needs PostgreSQL at 127.0.0.1:5432 with database `test`, trust authentication for root
# (scripts/test starts it so), and nothing else using database `test` meanwhile. Each
# build runs one job whose command sleeps RUN_SECONDS (default 30) with `lease_ttl` TTL
# (default 15s, so a renewal every 5 s less kill_grace), in a schema of its own made
# beforehand (`jobguard store init`). `pg_stat_database` for `test` before and after gives
# the sessions opened and the transactions (one per statement: jobguard sends none in an
# explicit transaction while a job runs); `pg_stat_activity`, sampled every 0.1 s from the
# `postgres` database, how long a connection named `jgbench` was open. A round trip per
# statement, and per connection those of TCP and of PostgreSQL's start-up (one more for
# authentication other than trust, two more for TLS).
set -euo pipefail
cd "$(dirname "$0")/.."
RUN_SECONDS=${RUN_SECONDS:-30}
TTL=${TTL:-15s}
[ $# -gt 0 ] || set -- target/debug/jobguard
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
q() { psql -h 127.0.0.1 -d "$1" -XAtc "$2"; }
stat() { q postgres "SELECT sessions || ' ' || xact_commit + xact_rollback FROM pg_stat_database WHERE datname = 'test'"; }
printf '%-40s %12s %11s %18s\n' build connections statements "connection held"
n=0
for bin in "$@"; do
  n=$((n + 1))
  schema="jgbench_$$_$n"
  dir="$W/$n"
  mkdir -p "$dir"
  cat >"$dir/jobs.toml" <<EOF
[jobs.bench]
schedule = "*-*-* 00:00:00 UTC"
command = ["sleep", "$RUN_SECONDS"]
lease_ttl = "$TTL"
kill_grace = "2s"
store = "postgres://root@127.0.0.1:5432/test?schema=$schema&application_name=jgbench"
EOF
  env -u JOBGUARD_CONFIG JOBGUARD_RUNTIME_DIR="$dir/run" JOBGUARD_STATE_DIR="$dir/state" \
    "$bin" store init --config "$dir/jobs.toml" >/dev/null
  sleep 1 # pg_stat_database is updated when a session ends, at most every 1 s
  read -r s0 x0 < <(stat)
  env -u JOBGUARD_CONFIG JOBGUARD_RUNTIME_DIR="$dir/run" JOBGUARD_STATE_DIR="$dir/state" \
    "$bin" run bench --config "$dir/jobs.toml" 2>"$dir/stderr" &
  pid=$!
  held=0 samples=0
  while kill -0 "$pid" 2>/dev/null; do
    c=$(q postgres "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'jgbench'")
    [ "$c" -gt 0 ] && held=$((held + 1))
    samples=$((samples + 1))
    sleep 0.1
  done
  wait "$pid" || { echo "$bin: run failed:" >&2; cat "$dir/stderr" >&2; exit 1; }
  sleep 1.5
  read -r s1 x1 < <(stat)
  q test "SET client_min_messages = warning; DROP SCHEMA $schema CASCADE" >/dev/null
  printf '%-40s %12d %11d %11d of %3d samples\n' "$bin" $((s1 - s0)) $((x1 - x0)) "$held" "$samples"
done

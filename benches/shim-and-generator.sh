#!/usr/bin/env bash
# Benchmarks of jobguard's own overhead (not run by CI; numbers go into release notes).
#
#   benches/shim-and-generator.sh            # needs hyperfine (apt-get install hyperfine)
#
# 1. The shim: `jobguard run` of /bin/true (lock, slot, SQLite claim with fsync'd commit,
#    fork/exec/wait, fsync'd finish) against `flock -n LOCK /bin/true`, median of many
#    runs; the difference is the shim's own cost. `--force` makes every run a real run of
#    the same slot instead of a skip.
# 2. The generator: `jobguard-generator DIR` for 10, 100, 1,000 and 10,000 jobs.
# 3. The generator against systemd-cron 2.x's C++ generator on the same 1,000 and 10,000
#    schedules (as `/etc/cron.d` lines), in one hyperfine run each, inside a private mount
#    namespace whose /etc/cron.d is a tmpfs holding those lines (needs root, and g++, make
#    and libmd-dev to build it). Its source release is read from SYSTEMD_CRON_TAR (default:
#    ../shared/bench/systemd-cron-2.8.1.tar.gz beside the project), unpacked and built in a
#    temporary directory; without it this part is skipped.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --locked -q
BIN=$PWD/target/release
# On tmpfs, like /run where the generator writes and the locks live.
W=$(mktemp -d -p /dev/shm)
trap 'rm -rf "$W"' EXIT
RUNS=${RUNS:-300}
# The store must be on a real disk for fsync to mean anything: the default is a directory
# under target/, on the same file system as a real /var/lib.
STATE=${STATE:-$PWD/target/bench-state}
rm -rf "$STATE"; mkdir -p "$STATE"

cat > "$W/jobs.toml" <<TOML
[defaults]
store = "sqlite://$STATE/jobguard.db"
[jobs.true]
schedule = "daily"
command = ["/bin/true"]
TOML
export JOBGUARD_RUNTIME_DIR=$W/run
"$BIN/jobguard" run --config "$W/jobs.toml" true 2>/dev/null
hyperfine -N --warmup 20 --runs "$RUNS" --export-json "$W/shim.json" \
  -n flock "flock -n $W/bench.lock /bin/true" \
  -n 'jobguard run' "$BIN/jobguard run --force --config $W/jobs.toml true"
python3 - "$W/shim.json" <<'PY'
import json, sys
r = {x["command"]: x for x in json.load(open(sys.argv[1]))["results"]}
f, j = r["flock"]["median"] * 1e3, r["jobguard run"]["median"] * 1e3
print(f"shim: flock median {f:.2f} ms, jobguard run median {j:.2f} ms, "
      f"overhead {j - f:.2f} ms, ratio {j / f:.2f}")
PY

for n in 10 100 1000 10000; do
  mkdir -p "$W/gen$n/out"
  python3 - "$n" > "$W/gen$n/jobs.toml" <<'PY'
import sys
n = int(sys.argv[1])
print('[defaults]\nstore = "sqlite:///var/lib/jobguard/jobguard.db"\n')
for i in range(n):
    print(f'[jobs.job-{i}]\ndescription = "Job {i}"\nschedule = "*-*-* {i % 24:02d}:{i % 60:02d}:00"\n'
          f'command = ["/usr/bin/true", "{i}"]\n')
PY
done
# systemd hands a generator empty directories on tmpfs: so does each timed run here.
args=()
for n in 10 100 1000 10000; do
  args+=(-n "$n" --prepare "sh -c 'rm -rf $W/gen$n/out && mkdir $W/gen$n/out'"
         "env JOBGUARD_CONFIG=$W/gen$n/jobs.toml $BIN/jobguard-generator $W/gen$n/out")
done
hyperfine -N --warmup 5 --runs 50 --export-json "$W/gen.json" "${args[@]}"
python3 - "$W/gen.json" <<'PY'
import json, sys
for x in json.load(open(sys.argv[1]))["results"]:
    print(f"generator: {x['command']:>5} jobs: median {x['median'] * 1e3:.2f} ms")
PY

SC_TAR=${SYSTEMD_CRON_TAR:-$PWD/../shared/bench/systemd-cron-2.8.1.tar.gz}
if [ ! -f "$SC_TAR" ] || [ "$(id -u)" != 0 ]; then
  echo "generator vs systemd-cron: skipped (no $SC_TAR, or not root)"
  exit 0
fi
tar xzf "$SC_TAR" -C "$W"
SRC=$(echo "$W"/systemd-cron-*)
(cd "$SRC" && ./configure --statedir=/var/spool/cron/crontabs > /dev/null &&
  mkdir -p out/build/bin && make -s "$PWD/out/build/bin/systemd-crontab-generator" > /dev/null)
SC=$SRC/out/build/bin/systemd-crontab-generator
for n in 1000 10000; do
  mkdir -p "$W/cron$n"
  python3 - "$n" > "$W/cron$n/jobs" <<'PY'
import sys
for i in range(int(sys.argv[1])):
    print(f"{i % 60} {i % 24} * * * root /usr/bin/true {i}")
PY
  # One private namespace per size: /etc/cron.d holds that size's lines; both generators
  # write fresh tmpfs directories, as under systemd.
  unshare -m sh -c "
    mount -t tmpfs none /etc/cron.d && cp $W/cron$n/jobs /etc/cron.d/jobs &&
    hyperfine -N --warmup 5 --runs 50 --export-json $W/vs$n.json \
      -n jobguard --prepare 'sh -c \"rm -rf $W/o1 && mkdir $W/o1\"' \
        'env JOBGUARD_CONFIG=$W/gen$n/jobs.toml $BIN/jobguard-generator $W/o1' \
      -n systemd-cron --prepare 'sh -c \"rm -rf $W/o2 && mkdir $W/o2\"' \
        '$SC $W/o2' > /dev/null"
  python3 - "$W/vs$n.json" "$n" "$W/o1" "$W/o2" <<'PY'
import json, os, sys
r = {x["command"]: x["median"] * 1e3 for x in json.load(open(sys.argv[1]))["results"]}
j, c = r["jobguard"], r["systemd-cron"]
count = lambda d: sum(len(f) for _, _, f in os.walk(d))
print(f"generator vs systemd-cron 2.8.1, {sys.argv[2]} jobs: jobguard {j:.2f} ms "
      f"({count(sys.argv[3])} files), systemd-cron {c:.2f} ms ({count(sys.argv[4])} files), "
      f"ratio {j / c:.2f} (goal <= 0.5)")
PY
done

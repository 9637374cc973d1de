#!/usr/bin/env bash
# Benchmarks of jobguard's own overhead (not run by CI; numbers go into release notes).
#
#   benches/shim-and-generator.sh            # needs hyperfine (apt-get install hyperfine)
#   RUNS=100 SHIM_ONLY=1 benches/shim-and-generator.sh   # part 1 only, 100 slots
#   BASE=path/to/other/jobguard SHIM_ONLY=1 benches/shim-and-generator.sh
#                         # part 1, with another build of the shim timed in the same run
#                         # (its own store), to measure a change against what it replaces
#   GEN_ONLY=1 benches/shim-and-generator.sh             # parts 2 to 4 only
#   OTHER_JOBS=999 SHIM_ONLY=1 benches/shim-and-generator.sh
#                         # part 1 with 999 other jobs in the shim's job list
#
# 1. The shim: `jobguard run` of /bin/true (lock, slot, SQLite claim with fsync'd commit,
#    clone/exec/wait, fsync'd finish) against `flock -n LOCK /bin/true`, the two taken in
#    turn, one run each per slot, so the difference is the shim's own cost. Each run is
#    its own slot (a past minute named with `--slot`), as under a timer: the forced re-runs
#    of one slot that an earlier version of this script timed each read every earlier
#    attempt of that slot, and got slower with every run. Then the shim's peak RSS, and
#    the fsync calls of one run (strace, when installed).
# 2. The generator: `jobguard-generator DIR` for 10, 100, 1,000 and 10,000 jobs.
# 3. The generator against systemd-cron 2.x's C++ generator on the same 1,000 and 10,000
#    schedules (as `/etc/cron.d` lines), in one hyperfine run each, inside a private mount
#    namespace whose /etc/cron.d is a tmpfs holding those lines (needs root, and g++, make
#    and libmd-dev to build it). Its source release is read from SYSTEMD_CRON_TAR (default:
#    ../shared/bench/systemd-cron-2.8.1.tar.gz beside the project), unpacked and built in a
#    temporary directory; without it this part is skipped.
# 4. In part 3's run for each size: the file-system part alone of the generator's output
#    (no parsing, no rendering) in its own layout and in two with fewer files per job
#    (benches/support/generator_layouts.rs, built with rustc): what a different layout
#    could save.
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

if [ "${GEN_ONLY:-0}" != 1 ]; then
cat > "$W/jobs.toml" <<TOML
[defaults]
store = "sqlite://$STATE/jobguard.db"
[jobs.true]
schedule = "minutely"
command = ["/bin/true"]
TOML
# OTHER_JOBS=N: N more jobs in the list, as on a host with many jobs.
python3 -c "import sys; [print(f'[jobs.other-{i}]\nschedule = \"*-*-* {i % 24:02d}:{i % 60:02d}:00\"'
  f'\ncommand = [\"/usr/bin/true\", \"{i}\"]') for i in range(int(sys.argv[1]))]" \
  "${OTHER_JOBS:-0}" >> "$W/jobs.toml"
export JOBGUARD_RUNTIME_DIR=$W/run
# Minutes of 2024 (past, so each is an ordinary manual run of its own slot): a first set
# to warm the caches and the store, then RUNS for the measurement.
slots() { python3 -c "import datetime as d, sys; a, n = map(int, sys.argv[1:]); print(','.join(
  f'{d.datetime(2024, 1, 1) + d.timedelta(minutes=m):%Y-%m-%dT%H:%M:00Z}'
  for m in range(a, a + n)))" "$@"; }
# The shims run from copies made the same way, on the store's disk: the same binary ran
# 0.24 ms faster from a copy than from the linker's output, and mapped 1.1 MiB more, since
# the page cache keeps a file in larger or smaller folios depending on how it was written
# and read, and a fault maps the folio around it. With BASE, the base's job has its own
# name, so the two shims share no lock or state file either.
SHIM=$STATE/jobguard
cp "$BIN/jobguard" "$SHIM"
shims=("$SHIM run --config $W/jobs.toml --slot {slot} true")
if [ -n "${BASE:-}" ]; then
  cp "$BASE" "$STATE/base"
  BASE=$STATE/base
  sed -e "s#$STATE/#$STATE/base-#" -e 's#^\[jobs.true\]#[jobs.base]#' "$W/jobs.toml" \
    > "$W/base.toml"
  shims+=("$BASE run --config $W/base.toml --slot {slot} base")
fi
# Each binary dropped from the page cache and read back whole, as a shim that runs every
# minute stays cached.
for b in "$SHIM" ${BASE:+"$BASE"}; do
  dd if="$b" iflag=nocache count=0 status=none
  cat "$b" > /dev/null
done
hyperfine -N --runs 1 -L slot "$(slots 0 30)" "${shims[@]}" > /dev/null 2>&1
# hyperfine runs the commands of each slot in the order given: with BASE, half of the
# slots run the two shims in the other order, so that neither always follows the other.
half=$(( ${#shims[@]} > 1 ? RUNS / 2 : RUNS ))
hyperfine -N --runs 1 --style none --export-json "$W/shim.json" -L slot "$(slots 30 "$half")" \
  "flock -n $W/bench.lock /bin/true" "${shims[@]}" > /dev/null 2>&1
if [ "$half" != "$RUNS" ]; then
  hyperfine -N --runs 1 --style none --export-json "$W/shim2.json" \
    -L slot "$(slots $((30 + half)) $((RUNS - half)))" \
    "flock -n $W/bench.lock /bin/true" "${shims[1]}" "${shims[0]}" > /dev/null 2>&1
fi
python3 - "$W/shim.json" "$SHIM" "$W/jobs.toml" "$(slots 100000 5)" "${BASE:-}" <<'PY'
import json, os, statistics, subprocess, sys
times = {"flock": [], "jobguard": [], "base": []}
results = json.load(open(sys.argv[1]))["results"]
if os.path.exists(sys.argv[1].replace("shim.json", "shim2.json")):
    results += json.load(open(sys.argv[1].replace("shim.json", "shim2.json")))["results"]
for x in results:
    assert x["exit_codes"] == [0], x
    key = x["command"].split()[0]
    times["flock" if key == "flock" else "jobguard" if key == sys.argv[2] else "base"] += x["times"]
f, j = (statistics.median(times[k]) * 1e3 for k in ("flock", "jobguard"))
print(f"shim: {len(times['jobguard'])} slots: flock median {f:.2f} ms, jobguard run median "
      f"{j:.2f} ms, overhead {j - f:.2f} ms, ratio {j / f:.2f} (goal <= 2)")
if times["base"]:
    b = statistics.median(times["base"]) * 1e3
    print(f"shim: BASE (a copy in {os.path.dirname(sys.argv[5])}) in the same run: median {b:.2f} ms, ratio {b / f:.2f}")
# Peak RSS of the shim, KiB, from GNU time (package `time`): a process forked from this
# Python would start from Python's own RSS, which the kernel counts in the peak.
if not os.path.exists("/usr/bin/time"):
    sys.exit("shim: peak RSS skipped (no /usr/bin/time: apt-get install time)")
def peak(shim, config, job):
    peaks = []
    for slot in sys.argv[4].split(","):
        out = subprocess.run(["/usr/bin/time", "-f", "%M", shim, "run", "--config", config,
                              "--slot", slot, job], capture_output=True, text=True,
                             check=True)
        peaks.append(int(out.stderr.split()[-1]))
    return statistics.median(peaks) / 1024
print(f"shim: peak RSS median {peak(sys.argv[2], sys.argv[3], 'true'):.1f} MiB (goal <= 8)")
if sys.argv[5]:
    base = os.path.join(os.path.dirname(sys.argv[3]), "base.toml")
    print(f"shim: BASE peak RSS median {peak(sys.argv[5], base, 'base'):.1f} MiB")
PY
if command -v strace > /dev/null; then
  strace -f -e trace=fsync,fdatasync -o "$W/sync.txt" \
    "$SHIM" run --config "$W/jobs.toml" --slot 2024-06-01T00:00:00Z true 2> /dev/null
  echo "shim: fsync calls in one run: $(grep -c sync "$W/sync.txt") ($(
    grep -o '[a-z]*sync([0-9]*' "$W/sync.txt" | tr '\n' ' '))"
fi
fi
[ "${SHIM_ONLY:-0}" = 1 ] && exit 0

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
rustc --edition 2024 -O -o "$W/generator_layouts" benches/support/generator_layouts.rs
for n in 1000 10000; do
  mkdir -p "$W/cron$n"
  python3 - "$n" > "$W/cron$n/jobs" <<'PY'
import sys
for i in range(int(sys.argv[1])):
    print(f"{i % 60} {i % 24} * * * root /usr/bin/true {i}")
PY
  # One private namespace per size: /etc/cron.d holds that size's lines; both generators
  # write fresh tmpfs directories, as under systemd.
  # 4. The file-system part alone of three layouts (benches/support/generator_layouts.rs),
  # in the same run: today's drop-ins and links, and whole unit files, two or one per job.
  layouts=""
  for l in dropins units timers; do
    layouts="$layouts -n fs-only:$l --prepare 'sh -c \"rm -rf $W/o3 && mkdir $W/o3\"'"
    layouts="$layouts '$W/generator_layouts $l $n $W/o3'"
  done
  unshare -m sh -c "
    mount -t tmpfs none /etc/cron.d && cp $W/cron$n/jobs /etc/cron.d/jobs &&
    hyperfine -N --warmup 5 --runs 50 --export-json $W/vs$n.json \
      -n jobguard --prepare 'sh -c \"rm -rf $W/o1 && mkdir $W/o1\"' \
        'env JOBGUARD_CONFIG=$W/gen$n/jobs.toml $BIN/jobguard-generator $W/o1' \
      -n systemd-cron --prepare 'sh -c \"rm -rf $W/o2 && mkdir $W/o2\"' \
        '$SC $W/o2' $layouts > /dev/null"
  python3 - "$W/vs$n.json" "$n" "$W/o1" "$W/o2" <<'PY'
import json, os, sys
r = {x["command"]: x["median"] * 1e3 for x in json.load(open(sys.argv[1]))["results"]}
j, c = r["jobguard"], r["systemd-cron"]
count = lambda d: sum(len(f) for _, _, f in os.walk(d))
print(f"generator vs systemd-cron 2.8.1, {sys.argv[2]} jobs: jobguard {j:.2f} ms "
      f"({count(sys.argv[3])} files), systemd-cron {c:.2f} ms ({count(sys.argv[4])} files), "
      f"ratio {j / c:.2f} (goal <= 0.5)")
for layout in ("dropins", "units", "timers"):
    t = r[f"fs-only:{layout}"]
    print(f"  the file-system part alone, layout {layout}: {t:.2f} ms "
          f"({t / c:.2f} of systemd-cron)")
PY
done

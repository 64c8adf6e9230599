#!/usr/bin/env bash
# db_bench's pace through a run: its write calls (/proc/PID/task/*/io syscw: one a write, the
# WAL's) every BIN seconds, untraced or under wprof, with wprof's budget messages stamped with
# the time since db_bench started. Shows what the budget's first checks and the duty cycle's
# live and paused windows cost the writes, window by window.
#
# Run as root: benches/rocksdb_pace.sh [KEYS] [BIN] [wprof record options...]
#   benches/rocksdb_pace.sh 2000000 0.1 --target rocksdb --max-overhead 10
#   benches/rocksdb_pace.sh 2000000 0.1          (untraced)
set -euo pipefail
cd "$(dirname "$0")/.."
. benches/setup.sh
N=${1:-2000000}; BIN=${2:-0.1}; shift 2 || true
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
ARGS=(--benchmarks=fillrandom --num="$N" --write_buffer_size=4194304 --db="$tmp/db")
# The sampler: polls db_bench's threads every 20 ms from the moment it exists.
python3 benches/db_bench_pace.py "$tmp/pace" 0.02 &
mon=$!
stamp() { # wprof's messages, stamped against db_bench's start
  python3 -c '
import sys, time, os
t0f = sys.argv[1] + ".t0"
for line in sys.stdin:
    for part in line.replace("\r", "\n").split("\n"):
        if part.startswith("wprof: probes took") or part.startswith("wprof: with the probes live") or part.startswith("fillrandom") or "aggregating in the kernel" in part:
            t0 = float(open(t0f).read()) if os.path.exists(t0f) else time.time()
            print(f"{time.time() - t0:7.2f} s  {part[:600]}", flush=True)
' "$tmp/pace"
}
if [ $# -gt 0 ]; then
  "$W" record "$@" -- /usr/bin/db_bench "${ARGS[@]}" 2>&1 | stamp
else
  /usr/bin/db_bench "${ARGS[@]}" 2>&1 | stamp
fi
wait "$mon" || true
python3 - "$tmp/pace" "$BIN" <<'PY'
import sys
start = float(open(sys.argv[1] + ".t0").read())
rows = [(t - start, c) for t, c in (map(float, l.split()) for l in open(sys.argv[1]))]
w = float(sys.argv[2]); bins = {}
for (t0, c0), (t1, c1) in zip(rows, rows[1:]):
    if c1 < c0:
        continue  # a thread exited: its count left the sum
    bins[int(t1 / w)] = bins.get(int(t1 / w), 0) + c1 - c0
print(f"writes a second (thousands), every {w} s:")
print(" ".join(f"{v / w / 1000:.0f}" for v in bins.values()))
PY

#!/usr/bin/env bash
# wprof's own CPU while it traces a busy program: `wprof attach --target rocksdb` for 12 s to a
# db_bench fillrandom started 3 s before (a fresh one each time: a growing database slows it),
# ROUNDS times, alternating the builds given (paths, default: this checkout's). For each
# attach: wprof's user+system CPU between 5 and 10 s into it (from /proc/PID/stat), the events
# (spans) it read a second, and its CPU per event.
#
# Run as root: benches/reader_cpu.sh [ROUNDS] [BUILD...]        (default: 3)
set -euo pipefail
cd "$(dirname "$0")/.."
. benches/setup.sh
R=${1:-3}; shift || true
builds=("$@"); [ ${#builds[@]} -gt 0 ] || builds=("$W")
tmp=$(mktemp -d)
bench=
trap 'kill $bench 2>/dev/null || true; wait $bench 2>/dev/null || true; rm -rf "$tmp"' EXIT
hz=$(getconf CLK_TCK)
for r in $(seq "$R"); do
  for b in "${builds[@]}"; do
    rm -rf "$tmp/db"
    /usr/bin/db_bench --benchmarks=fillrandom --num=100000000 --duration=3600 \
      --write_buffer_size=4194304 --db="$tmp/db" >/dev/null 2>&1 &
    bench=$!
    sleep 3
    "$b" attach -q --target rocksdb --calibrate-once --pid "$bench" --duration 12s \
      --json "$tmp/r.json" >/dev/null 2>"$tmp/err" &
    w=$!
    sleep 5
    t1=$(awk '{print $14+$15}' "/proc/$w/stat"); sleep 5; t2=$(awk '{print $14+$15}' "/proc/$w/stat")
    wait "$w"
    kill "$bench"; wait "$bench" 2>/dev/null || true; bench=
    python3 - "$tmp/r.json" "$b" "$(( t2 - t1 ))" "$hz" <<'PY'
import json, sys
run = json.load(open(sys.argv[1]))
ticks, hz = int(sys.argv[3]), int(sys.argv[4])
rate = run["counters"]["events"] / 12
cpu = ticks / hz / 5
print(f"{sys.argv[2]}: cpu {100 * cpu:.1f}%  events/s {rate:,.0f}  cpu/event {1e9 * cpu / rate:.0f} ns")
PY
    sleep 1
  done
done

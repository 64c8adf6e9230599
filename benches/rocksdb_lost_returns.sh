#!/usr/bin/env bash
# Returns never seen on db_bench: for each way of attaching, `wprof attach`
# to one db_bench fillrandom for LIVE seconds, ROUNDS times in turn, and write_impl's entries
# less its returns (JSON phases[].entries / returns: the uretprobe program never ran for
# those calls, whose frames are then closed as abandoned). docs/benchmarks.md §41 found 1.6-3.9%
# (35-47% per point) lost under the unwind guard; §42 the cause (the detach) and the fix.
#
#   guarded    the default: uretprobes and the unwind guard's probes on the unwinder
#   uretprobe  --return uretprobe: uretprobes alone (unsafe for C++ that throws through them)
#   per-point  the default, with one link per probe point (WPROF_PER_POINT_LINKS=1)
#
# Run as root: benches/rocksdb_lost_returns.sh [ROUNDS] [LIVE]     (defaults: 2 4)
# WPROF_BIN=path runs another wprof build.
set -euo pipefail
cd "$(dirname "$0")/.."
. benches/setup.sh
W=${WPROF_BIN:-$W}
R=${1:-2}; LIVE=${2:-4}
tmp=$(mktemp -d)
/usr/bin/db_bench --benchmarks=fillrandom --num=1000000 --duration=3600 --statistics=1 \
  --write_buffer_size=4194304 --db="$tmp/db" >"$tmp/bench.out" 2>&1 &
bench=$!
trap 'kill "$bench" 2>/dev/null || true; wait "$bench" 2>/dev/null || true; rm -rf "$tmp"' EXIT
sleep 5
for r in $(seq "$R"); do
  for mode in guarded uretprobe per-point; do
    args=(); env=()
    case $mode in
      uretprobe) args=(--return uretprobe) ;;
      per-point) env=(WPROF_PER_POINT_LINKS=1) ;;
    esac
    env "${env[@]}" "$W" attach -q --target rocksdb --calibrate-once --pid "$bench" \
      --duration "${LIVE}s" "${args[@]}" --json "$tmp/r.json" >/dev/null 2>"$tmp/err"
    python3 - "$tmp/r.json" "$mode" <<'PY'
import json, sys
run = json.load(open(sys.argv[1]))
p = {x["name"]: x for x in run["phases"]}
w = p["write_impl"]
lost = w["entries"] - w["returns"]
print(f"{sys.argv[2]:<10} write_impl entries {w['entries']} never returned {lost} "
      f"({100 * lost / max(w['entries'], 1):.2f}%) abandoned (all phases) "
      f"{run['counters']['abandoned']} return_mode {w['return_mode']}")
PY
    sleep 2
  done
done

#!/usr/bin/env bash
# Two sets of wprof options on one db_bench, attach by attach: for each, per write, the
# write_impl's time on the CPU as measured (raw mean less its preempted time), the price the
# correction took out, and the calibrated pair cost before the run and at its end. What the
# probes cost the writes is read from the first; whether the calibration prices it, from the
# others. Found the guarded entries' return-address read missing from the calibration
# (benchmarks §39).
#
# Run as root: benches/rocksdb_modes.sh [PAIRS] [SECONDS] "[OPTIONS A]" "[OPTIONS B]"
#   (defaults: 5 3 "" "--off-cpu")
set -euo pipefail
cd "$(dirname "$0")/.."
. benches/setup.sh
N=${1:-5}; S=${2:-3}; A=${3:-}; B=${4:---off-cpu}
tmp=$(mktemp -d)
/usr/bin/db_bench --benchmarks=fillrandom --num=1000000 --duration=3600 \
  --write_buffer_size=4194304 --db="$tmp/db" >"$tmp/bench.out" 2>&1 &
bench=$!
trap 'kill "$bench" 2>/dev/null || true; wait "$bench" 2>/dev/null || true; rm -rf "$tmp"' EXIT
sleep 4
for _ in $(seq "$N"); do
  for opts in "$A" "$B"; do
    # shellcheck disable=SC2086  # the options are words
    "$W" attach -q --target rocksdb --pid "$bench" --duration "${S}s" $opts --json "$tmp/r.json" \
      >/dev/null 2>"$tmp/err" || { cat "$tmp/err"; exit 1; }
    python3 - "${opts:-(default)}" "$tmp/r.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[2]))
r = j["tree"]["roots"][0]
n = r["count"]
per = lambda ns: (ns or 0) / n / 1e3
cal = j["probe_cost"]["calibration"]
end = cal["at_end"][0]["pair_ns"] if cal.get("at_end") else float("nan")
print(f"{sys.argv[1]:<22} calls {n:>7} on_cpu_raw {per(r['total_ns']) - per(r.get('preempted_ns')):.2f}us "
      f"price {per(r['corrected']['probe_ns']):.2f}us pair {cal['classes'][0]['pair_ns']:.0f}ns "
      f"at_end {end:.0f}ns return_addresses {cal.get('return_addresses')}")
PY
    sleep 2
  done
done

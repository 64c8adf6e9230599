#!/usr/bin/env bash
# pgbench tpcb-like (2 clients, synchronous_commit=off, scale 4) under wprof's aggregation modes
# with and without `--max-overhead 5%`, next to bpftrace timing only standard_ExecutorRun,
# interleaved round by round against an untraced run of the same round (this VM's untraced tps
# moves by ±8% from run to run, so only ratios within a round compare). `live`: the share of the
# run the probes were live (the budget's duty cycle).
#
# Run as root: benches/budget_modes.sh [SECONDS] [ROUNDS]     (defaults: 10 3)
set -euo pipefail
unset SUDO_UID SUDO_GID
cd "$(dirname "$0")/.."
. benches/setup.sh
T=${1:-10}
ROUNDS=${2:-3}
# shellcheck source=benches/pg_cluster.sh
. benches/pg_cluster.sh
pg_throwaway
tps() { pg_tps "$T"; }
pg_executor_bt "$tmp/pg.bt"
wp() { # profile extra...
  local prof=$1; shift
  "$W" attach -q --target "$prof" --pid "$pm" --follow-forks "$@" --duration $((T + 3)) --json "$tmp/p.json" >/dev/null 2>"$tmp/w.err" &
  local w=$!
  for _ in $(seq 100); do grep -q "attached" "$tmp/w.err" && break; sleep 0.1; done
  local t; t=$(tps); wait "$w" || true
  local live; live=$(python3 -c "import json;print(round(json.load(open('$tmp/p.json'))['provenance'].get('probes_live_fraction') or 1.0, 2))")
  echo "$t live=$live $(grep -o 'moved to CPU sampling: [^;]*' "$tmp/w.err" | head -1 | cut -c1-80)"
}
printf '%-6s %-34s %9s %6s %6s\n' round tool tps ratio live
for r in $(seq "$ROUNDS"); do
  b=$(tps); printf '%-6s %-34s %9.0f %6.2f\n' "$r" untraced "$b" 1
  for mode in "" "--aggregate event --max-overhead 5" "--aggregate kernel" "--aggregate kernel --max-overhead 5"; do
    read -r t live rest < <(wp postgres $mode)
    printf '%-6s %-34s %9.0f %6.2f %6s\n' "$r" "wprof ${mode:-(default)}" "$t" "$(echo "$t / $b" | bc -l)" "${live#live=}"
  done
  bpftrace "$tmp/pg.bt" >/dev/null 2>&1 & bt=$!; sleep 3
  t=$(tps); kill -INT $bt; wait $bt 2>/dev/null || true
  printf '%-6s %-34s %9.0f %6.2f\n' "$r" "bpftrace (executor_run only)" "$t" "$(echo "$t / $b" | bc -l)"
done

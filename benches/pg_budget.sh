#!/usr/bin/env bash
# pgbench tpcb-like (2 clients, synchronous_commit=off, scale 4) under `--target postgres
# --follow-forks --max-overhead 5`, per event and in the kernel mode, each traced run
# bracketed by untraced runs (its ratio is against the mean of the untraced runs before and
# after it: this VM's untraced tps drifts by several % within minutes). `live`: the share of
# the run the probes were live (the budget's duty cycle); `in situ`: the budget's last reading
# of the probes' time from CPU samples against the calibration's price; `/N%`: the backends'
# own slowdown while the probes were live (probe_cost.progress), when the duty cycle read one.
#
# Run as root: benches/pg_budget.sh [SECONDS] [ROUNDS]     (defaults: 20 5)
# WPROF_BIN=path runs another wprof build (the script still builds the tree's).
set -euo pipefail
unset SUDO_UID SUDO_GID
cd "$(dirname "$0")/.."
. benches/setup.sh
W=${WPROF_BIN:-$W}
T=${1:-20}
ROUNDS=${2:-5}
# shellcheck source=benches/pg_cluster.sh
. benches/pg_cluster.sh
pg_throwaway
tps() { pg_tps "$T"; }
wp() { # extra wprof options...
  "$W" attach -q --target postgres --pid "$pm" --follow-forks --max-overhead 5 "$@" \
    --duration $((T + 3)) --json "$tmp/p.json" >/dev/null 2>"$tmp/w.err" &
  local w=$!
  for _ in $(seq 100); do grep -q "attached" "$tmp/w.err" && break; sleep 0.1; done
  local t; t=$(tps); wait "$w" || true
  local live; live=$(python3 -c "import json;r=json.load(open('$tmp/p.json'));p=r['probe_cost'].get('progress');print(str(round(r['provenance'].get('probes_live_fraction') or 1.0, 3))+('/%.0f%%' % p['slowdown_pct'] if p else ''))")
  local insitu; insitu=$(grep -o '×[0-9.]* the calibration' "$tmp/w.err" | tail -1 | cut -d' ' -f1 || true)
  echo "$t $live ${insitu:-×1}"
}
printf '%-6s %-12s %9s %9s %9s %6s %10s %8s\n' round mode before traced after ratio live "in situ"
before=$(tps)
for r in $(seq "$ROUNDS"); do
  for mode in event kernel; do
    if [ "$mode" = kernel ]; then read -r t live insitu < <(wp --aggregate kernel); else read -r t live insitu < <(wp --aggregate event); fi
    after=$(tps)
    printf '%-6s %-12s %9.0f %9.0f %9.0f %6.3f %10s %8s\n' "$r" "$mode" "$before" "$t" "$after" \
      "$(echo "2 * $t / ($before + $after)" | bc -l)" "$live" "$insitu"
    before=$after
  done
done

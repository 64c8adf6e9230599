#!/usr/bin/env bash
# One probe pair on PostgreSQL's executor against the CPU share it takes: pgbench tpcb-like
# (2 clients, synchronous_commit=off, scale 4), each traced run bracketed by untraced runs,
# with a profile of standard_ExecutorRun alone, `--aggregate kernel`:
#   exec-always     always live, --cpu-sample 99 (so the run records probe_cost.in_situ)
#   exec-duty       --max-overhead 1 (a duty cycle)
#   bpftrace-empty  bpftrace with `{}` actions on the same pair (the floor)
#
# Run as root: benches/pg_one_pair.sh [SECONDS] [ROUNDS]     (defaults: 20 3)
# WPROF_BIN=path runs another wprof build.
set -euo pipefail
unset SUDO_UID SUDO_GID
cd "$(dirname "$0")/.."
. benches/setup.sh
W=${WPROF_BIN:-$W}
T=${1:-20}; ROUNDS=${2:-3}
# shellcheck source=benches/pg_cluster.sh
. benches/pg_cluster.sh
pg_throwaway
cat >"$tmp/exec.toml" <<TOML
name = "pg-exec"
object = "exe"
[[phase]]
name = "executor_run"
symbol = "standard_ExecutorRun"
TOML
tps() { pg_tps "$T"; }
wp() { "$W" attach -q --pid "$pm" --follow-forks "$@" --duration $((T + 3)) --json "$tmp/p.json" >/dev/null 2>"$tmp/w.err" &
  local w=$!
  for _ in $(seq 100); do grep -q "attached" "$tmp/w.err" && break; sleep 0.1; done
  local t; t=$(tps); wait "$w" || true
  echo "$t $(python3 -c "import json;r=json.load(open('$tmp/p.json'));print(round(r['provenance'].get('probes_live_fraction') or 1.0, 3), r['probe_cost'].get('in_situ'))")"
}
before=$(tps)
for r in $(seq "$ROUNDS"); do
  for mode in "exec-always" "exec-duty" "bpftrace-empty"; do
    case $mode in
      bpftrace-empty) bpftrace -e "uprobe:$PGBIN/postgres:standard_ExecutorRun {} uretprobe:$PGBIN/postgres:standard_ExecutorRun {}" >/dev/null 2>&1 & bt=$!; sleep 3; out="$(tps) -"; kill -INT $bt; wait $bt 2>/dev/null || true;;
      exec-always) out=$(wp --target "$tmp/exec.toml" --aggregate kernel --cpu-sample 99);;
      exec-duty) out=$(wp --target "$tmp/exec.toml" --aggregate kernel --max-overhead 1);;
    esac
    after=$(tps); t=${out%% *}
    echo "$r $mode before $before traced $t after $after ratio $(echo "2*$t/($before+$after)"|bc -l|cut -c1-5) :: ${out#* }"
    [ "$mode" = bpftrace-empty ] || grep -o "live [0-9]*% of each second" "$tmp/w.err" | tail -1 || true
    before=$after
  done
done

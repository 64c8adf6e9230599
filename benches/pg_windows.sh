#!/usr/bin/env bash
# pgbench under `--max-overhead 5`, measured against itself: pgbench's own per-transaction log
# (`-l`: each transaction's completion time and latency) split by wprof's live windows (JSON
# `provenance.live_windows`, wall clock). The paused windows, interleaved with the live ones
# every 2 s, are the same run without the probes, so the host's drift from run to run (untraced
# tps moved by ±20% within an hour here) falls out of the ratio. Untraced runs before and
# after each traced one are printed too, for the ratio across runs.
#
# Printed per traced run: untraced tps before and after; the traced run's tps over its whole
# length; its tps in the paused windows and in the live ones; `run/paused`, the run's tps over
# its own paused windows' (what the probes cost the whole run, startup included); `live/paused`;
# the mean latency live and paused; the share of the run the probes were live.
# What the paused windows still carry (wprof's process, the fork tracepoints of
# --follow-forks, an idle ring) is not in `run/paused`.
#
# Run as root: benches/pg_windows.sh [SECONDS] [ROUNDS] [MODE...]   (defaults: 30 2 kernel event)
# WPROF_BIN=path runs another wprof build.
set -euo pipefail
unset SUDO_UID SUDO_GID
cd "$(dirname "$0")/.."
. benches/setup.sh
W=${WPROF_BIN:-$W}
T=${1:-30}
ROUNDS=${2:-2}
shift 2 || true
MODES=("$@")
[ ${#MODES[@]} -gt 0 ] || MODES=(kernel event)
# shellcheck source=benches/pg_cluster.sh
. benches/pg_cluster.sh
pg_throwaway
printf '%-5s %-7s %8s %8s %8s %8s %8s %10s %11s %14s %5s\n' round mode before after run \
  paused live run/paused live/paused "lat live/paused" live
before=$(pg_tps "$T")
for r in $(seq "$ROUNDS"); do
  for mode in "${MODES[@]}"; do
    rm -f "$tmp"/tx.* "$tmp/p.json"
    "$W" attach -q --target postgres --pid "$pm" --follow-forks --max-overhead 5 \
      --aggregate "$mode" --duration $((T + 3)) --json "$tmp/p.json" >/dev/null 2>"$tmp/w.err" &
    w=$!
    for _ in $(seq 100); do grep -q "attached" "$tmp/w.err" && break; sleep 0.1; done
    pgb -c 2 -T "$T" -l --log-prefix="$tmp/tx" >/dev/null
    wait "$w" || true
    after=$(pg_tps "$T")
    python3 - "$tmp/p.json" "$r" "$mode" "$before" "$after" "$tmp"/tx.* <<'PY'
import json, sys
run = json.load(open(sys.argv[1]))
r, mode, before, after = sys.argv[2], sys.argv[3], float(sys.argv[4]), float(sys.argv[5])
windows = [(a / 1e9, b / 1e9) for a, b in run["provenance"].get("live_windows", [])]
tx = []  # (completion time s, latency µs)
for f in sys.argv[6:]:
    for line in open(f):
        p = line.split()
        tx.append((int(p[4]) + int(p[5]) / 1e6, int(p[2])))
tx.sort()
t0 = tx[0][0] - tx[0][1] / 1e6
t1 = tx[-1][0]
live_s = sum(max(0.0, min(b, t1) - max(a, t0)) for a, b in windows)
paused_s = (t1 - t0) - live_s
def live(t):
    return any(a <= t < b for a, b in windows)
n_live = [l for t, l in tx if live(t)]
n_paused = [l for t, l in tx if not live(t)]
run_tps = len(tx) / (t1 - t0)
tps_l = len(n_live) / live_s if live_s > 0 else float("nan")
tps_p = len(n_paused) / paused_s if paused_s > 0 else float("nan")
mean = lambda xs: sum(xs) / len(xs) / 1e3 if xs else float("nan")
print(f"{r:<5} {mode:<7} {before:8.0f} {after:8.0f} {run_tps:8.0f} {tps_p:8.0f} {tps_l:8.0f} "
      f"{run_tps / tps_p:10.3f} {tps_l / tps_p:11.3f} {mean(n_live):6.2f}/{mean(n_paused):.2f} ms "
      f"{live_s / (t1 - t0):5.2f}")
PY
    before=$after
  done
done

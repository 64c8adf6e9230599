#!/usr/bin/env bash
# wprof's memory while it serves Prometheus for a long time against a server whose processes
# come and go: does RSS stay bounded (issue 19: series of exited processes expire, the label
# cardinality is capped)?
#
# A throwaway PostgreSQL 15 cluster (unix socket only, synchronous_commit=off); `wprof attach
# --target postgres --pid POSTMASTER --follow-forks --per-pid --serve 127.0.0.1:PORT` with no
# --duration; pgbench tpcb-like, 2 clients, `-C` (a new connection, so a new backend process,
# for every transaction) for SECONDS. Every EVERY s the script reads wprof's VmRSS from
# /proc/PID/status and scrapes the endpoint (text format: the series it serves). At the end
# wprof is stopped with SIGINT: its final JSON gives the calls it counted.
#
# Run as root: benches/serve_rss.sh [SECONDS] [EVERY]     (defaults: 600 60)
set -euo pipefail
unset SUDO_UID SUDO_GID
cd "$(dirname "$0")/.."
SECONDS_RUN=${1:-600}
EVERY=${2:-60}
# shellcheck source=benches/setup.sh
. benches/setup.sh
# shellcheck source=benches/pg_cluster.sh
. benches/pg_cluster.sh
tmp=$(mktemp -d)
wp=""
cleanup() {
  [ -n "$wp" ] && kill -INT "$wp" 2>/dev/null && wait "$wp" 2>/dev/null
  pg_stop
  rm -rf "$tmp"
}
trap cleanup EXIT
pg_start "$tmp"

addr=127.0.0.1:$((40000 + RANDOM % 20000))
"$W" attach -q --target postgres --pid "$pm" --follow-forks --per-pid --serve "$addr" \
  --json "$tmp/run.json" >/dev/null 2>"$tmp/w.err" &
wp=$!
for _ in $(seq 200); do curl -sf "http://$addr/metrics" >/dev/null && break; sleep 0.1; done

rss() { awk '/^VmRSS/ { print $2 }' "/proc/$wp/status"; }
series() { curl -sf "http://$addr/metrics" | grep -c '^wprof_phase_calls_total{' || true; }
processes() { curl -sf "http://$addr/metrics" | grep -o 'process="[^"]*"' | sort -u | wc -l; }
echo "wprof pid $wp serving $addr; pgbench -C, 2 clients, ${SECONDS_RUN} s"
printf '%8s %10s %14s %10s\n' elapsed_s rss_kb call_series labels
printf '%8s %10s %14s %10s\n' 0 "$(rss)" "$(series)" "$(processes)"
pgb -C -c 2 -T "$SECONDS_RUN" >"$tmp/pgbench.out" &
pb=$!
start=$(date +%s)
while kill -0 "$pb" 2>/dev/null; do
  sleep "$EVERY"
  kill -0 "$pb" 2>/dev/null || break
  printf '%8s %10s %14s %10s\n' $(($(date +%s) - start)) "$(rss)" "$(series)" "$(processes)"
done
wait "$pb" || true
sleep 3
printf '%8s %10s %14s %10s   (pgbench done)\n' $(($(date +%s) - start)) "$(rss)" "$(series)" "$(processes)"
hwm=$(awk '/^VmHWM/ { print $2 }' "/proc/$wp/status")
kill -INT "$wp"
wait "$wp" || true
wp=""
tx=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' "$tmp/pgbench.out")
tps=$(sed -n 's/^tps = \([0-9.]*\).*/\1/p' "$tmp/pgbench.out" | head -n1)
python3 - "$tmp/run.json" "$tx" "$tps" "$hwm" <<'PY'
import json, sys
run = json.load(open(sys.argv[1]))
roots = run["tree"]["roots"]
calls = {r["name"]: r["count"] for r in roots}
print(f"pgbench: {sys.argv[2]} transactions (each on a new backend), {sys.argv[3]} tps")
print(f"wprof: peak RSS (VmHWM) {int(sys.argv[4]) / 1024:.1f} MiB; forked processes seen "
      f"{len(run['provenance'].get('forked', []))} (exited ones are forgotten under --serve)")
print("root calls:", ", ".join(f"{k} {v}" for k, v in sorted(calls.items())))
print("counters:", {k: v for k, v in run["counters"].items() if v})
PY
grep -i "warning\|error" "$tmp/w.err" | head -5 || true

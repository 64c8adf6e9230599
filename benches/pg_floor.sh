#!/usr/bin/env bash
# Where pgbench's lost throughput goes under wprof when the probes are (almost) never hit:
# pgbench tpcb-like (2 clients, synchronous_commit=off, scale 4), each run against the untraced
# run of its round (ratios of tps), wprof attached to the postmaster with --follow-forks and
#   null        one phase on a function pgbench never calls (CopyFrom): wprof's own machinery
#               (fork and exit tracepoints, the ring reader, the polling loop)
#   +syscalls   the same plus the `postgres` profile's two syscall phases (fdatasync, pwrite64):
#               the syscall tracepoints, which fire for every process on the host
#   +sampler    the null profile with --cpu-sample HZ (the rate `--max-overhead 5` picks here)
#   budget      the whole `postgres` profile, --aggregate kernel --max-overhead 5
#   bpftrace    one entry + uretprobe pair on standard_ExecutorRun, latency kept
#
# Run as root: benches/pg_floor.sh [SECONDS] [ROUNDS] [HZ]     (defaults: 10 3 900)
set -euo pipefail
unset SUDO_UID SUDO_GID
cd "$(dirname "$0")/.."
. benches/setup.sh
T=${1:-10}
ROUNDS=${2:-3}
HZ=${3:-900}
# shellcheck source=benches/pg_cluster.sh
. benches/pg_cluster.sh
pg_throwaway
tps() { pg_tps "$T"; }
cat >"$tmp/null.toml" <<TOML
name = "pg-null"
object = "exe"
[[phase]]
name = "copy_from"
symbol = "CopyFrom"
TOML
cp "$tmp/null.toml" "$tmp/sys.toml"
cat >>"$tmp/sys.toml" <<TOML
[[phase]]
name = "fdatasync"
syscall = "fdatasync"
[[phase]]
name = "pwrite"
syscall = "pwrite64"
TOML
pg_executor_bt "$tmp/pg.bt"
wp() { # profile extra...
  local prof=$1; shift
  "$W" attach -q --target "$prof" --pid "$pm" --follow-forks "$@" --duration $((T + 3)) --json "$tmp/p.json" >/dev/null 2>"$tmp/w.err" &
  local w=$!
  for _ in $(seq 100); do grep -q "attached" "$tmp/w.err" && break; sleep 0.1; done
  tps; wait "$w" || true
}
row() { printf '%-6s %-12s %9.0f %6.3f\n' "$1" "$2" "$3" "$(echo "$3 / $4" | bc -l)"; }
printf '%-6s %-12s %9s %6s\n' round run tps ratio
for r in $(seq "$ROUNDS"); do
  b=$(tps); row "$r" untraced "$b" "$b"
  row "$r" null "$(wp "$tmp/null.toml")" "$b"
  row "$r" +syscalls "$(wp "$tmp/sys.toml")" "$b"
  row "$r" +sampler "$(wp "$tmp/null.toml" --cpu-sample "$HZ")" "$b"
  row "$r" budget "$(wp postgres --aggregate kernel --max-overhead 5)" "$b"
  bpftrace "$tmp/pg.bt" >/dev/null 2>&1 & bt=$!; sleep 3
  t=$(tps); kill -INT $bt; wait $bt 2>/dev/null || true
  row "$r" bpftrace "$t" "$b"
done

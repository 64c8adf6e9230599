#!/usr/bin/env bash
# What `--follow-forks` costs a process that is NOT traced but runs the same probed binary.
#
# With --follow-forks wprof attaches its uprobes to the object for every process that maps it
# (so a child forked later is covered from its first instruction) and drops untraced processes
# in BPF. An untraced process calling a probed function still takes the breakpoint trap and
# runs the BPF program up to that check. Without --follow-forks the probes are scoped to the
# traced pids and other processes run untouched.
#
# Workload: the C fixture with every phase time set to 0 (a write is 7 nested calls of ~50 ns
# each), ITERATIONS writes; it times itself (write_mean_ns). Per round: the fixture alone;
# while `wprof attach --pid IDLE` traces another (idle) fixture process; the same with
# --follow-forks. The added cost per probed call is (mean - plain) / 7 (each write is 7
# phase calls, each an entry + a return hit).
#
# Run as root: benches/follow_forks.sh [ITERATIONS] [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-20000}
ROUNDS=${2:-5}
# shellcheck source=benches/setup.sh
. benches/setup.sh
out=$(mktemp -d)
idle=""
wp=""
cleanup() {
  [ -n "$wp" ] && kill -INT "$wp" 2>/dev/null && wait "$wp" 2>/dev/null
  [ -n "$idle" ] && kill "$idle" 2>/dev/null
  rm -rf "$out"
}
trap cleanup EXIT

ZERO=(--write-us 0 --encode-us 0 --persist-us 0 --compress-us 0 --flush-us 0 --wal-us 0 --sync-us 0)
mean_of() { sed -n 's/.*write_mean_ns=\([0-9]*\).*/\1/p'; }
workload() { "$prog" --iterations "$N" "${ZERO[@]}" | mean_of; }

# The traced process: a fixture that waits on a fifo forever (never writes).
mkfifo "$out/hold"
"$prog" --wait <"$out/hold" >/dev/null &
idle=$!
exec 3>"$out/hold"

with_wprof() { # with_wprof [--follow-forks]
  "$W" attach -q --target fixture --pid "$idle" "$@" 2>"$out/err" &
  wp=$!
  for _ in $(seq 100); do grep -q "wprof: attached" "$out/err" && break; sleep 0.1; done
  grep -q "wprof: attached" "$out/err" || { cat "$out/err" >&2; exit 1; }
  workload
  kill -INT "$wp"; wait "$wp" || true; wp=""
}

declare -a P S F
printf '%-6s %14s %14s %16s\n' round plain_ns scoped_ns follow_forks_ns
for r in $(seq "$ROUNDS"); do
  P+=("$(workload)"); S+=("$(with_wprof)"); F+=("$(with_wprof --follow-forks)")
  i=$((r - 1))
  printf '%-6s %14s %14s %16s\n' "$r" "${P[$i]}" "${S[$i]}" "${F[$i]}"
done
python3 - "${P[*]}" "${S[*]}" "${F[*]}" <<'PY'
import statistics, sys
p, s, f = (statistics.median(map(int, a.split())) for a in sys.argv[1:])
print(f"median write of an UNTRACED process: plain {p:.0f} ns, scoped probes {s:.0f} ns "
      f"({s / p:.2f}x), --follow-forks {f:.0f} ns ({f / p:.2f}x)")
print(f"--follow-forks adds {(f - p) / 7:.0f} ns per call of a probed function to an untraced process "
      f"(scoped probes: {(s - p) / 7:.0f} ns)")
PY

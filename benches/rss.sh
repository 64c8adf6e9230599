#!/usr/bin/env bash
# wprof's memory over a long run at the highest event rate the machine gives: does RSS stay
# bounded (README: the per-call table keeps --max-calls rows, and says when it is capped)?
#
# Fixture: benches/fixtures/flatout.c, the C fixture's seven nested phases (same names and
# nesting as tests/fixtures/writepath.c) with no work in them, 2 threads calling write_record
# in a loop for SECONDS (writepath keeps every write's duration for its median, so its own
# memory grows with the run; flatout keeps none). Built gcc -O2 -fno-omit-frame-pointer
# -fcf-protection=none: every phase enters with push %rbp.
#
# First the fixture alone for 5 s (its untraced rate), then under `wprof record` with the seven
# phases (MODE per-event: wprof's default, one ring-buffer span per call; MODE kernel:
# --aggregate kernel, if this wprof has it) for SECONDS; every 10 s the script reads wprof's
# VmRSS and VmHWM from /proc/PID/status. At the end: the calls/s achieved under tracing, the
# events/s wprof read (JSON counters.events / provenance.duration_s), lost spans, RSS over time.
#
# Run as root: benches/rss.sh [SECONDS] [MODE]     (defaults: 600 per-event)
set -euo pipefail
# Run as root, even through sudo: wprof record would run the traced commands as SUDO_UID
# (docs/security.md), and they live in root-only temporary directories.
unset SUDO_UID SUDO_GID
cd "$(dirname "$0")/.."
SECONDS_RUN=${1:-600}
MODE=${2:-per-event}
EVERY=10
# shellcheck source=benches/setup.sh
. benches/setup.sh
out=$(mktemp -d)
wp=""
cleanup() { # interrupted: stop the fixture (wprof's child) and wprof
  if [ -n "$wp" ]; then
    for c in $(pgrep -P "$wp" || true); do kill "$c" 2>/dev/null || true; done
    kill -INT "$wp" 2>/dev/null || true
    wait 2>/dev/null || true
  fi
  rm -rf "$out"
}
trap cleanup EXIT

extra=()
case $MODE in
per-event)
  # explicit when this wprof has the flag, even if a later default is auto
  if "$W" record --help | grep -q -- --aggregate; then extra=(--aggregate event); fi ;;
kernel)
  "$W" record --help | grep -q -- --aggregate ||
    { echo "rss: this wprof has no --aggregate (in-kernel mode not built yet)" >&2; exit 2; }
  extra=(--aggregate kernel) ;;
*) echo "usage: $0 [SECONDS] [per-event|kernel]" >&2; exit 2 ;;
esac

fbin=$(readlink -f "$FX")/flatout
gcc -O2 -fno-omit-frame-pointer -fcf-protection=none -Wall -Wextra -pthread \
  -o "$fbin" benches/fixtures/flatout.c
{
  echo 'name = "flatout"'
  echo 'description = "benches/rss.sh: the seven phases of benches/fixtures/flatout.c"'
  echo 'object = "exe"'
  for p in write_record encode_record persist_block compress_block flush_block wal_append wal_sync; do
    printf '\n[[phase]]\nname = "%s"\nsymbol = "%s"\n' "$p" "$p"
  done
} >"$out/flat.toml"

rate_of() { sed -n 's/^flatout: .*phase_calls_per_s=\([0-9]*\).*/\1/p'; }
untraced=$("$fbin" --threads 2 --seconds 5 | rate_of)
echo "untraced: $untraced phase calls/s (2 threads, 5 s)"

# A python parent reports wprof's peak RSS (ru_maxrss) after it exits, output writing included.
python3 -c '
import resource, subprocess, sys
p = subprocess.Popen(sys.argv[2:])
open(sys.argv[1], "w").write(str(p.pid))
rc = p.wait()
print("maxrss_kb", resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr)
sys.exit(rc)' "$out/pid" "$W" record -q --target "$out/flat.toml" "${extra[@]}" --json "$out/run.json" -- \
  "$fbin" --threads 2 --seconds "$SECONDS_RUN" >"$out/fx.out" 2>"$out/err" &
py=$!
for _ in $(seq 100); do [ -s "$out/pid" ] && break; sleep 0.05; done
wp=$(cat "$out/pid")
start=$(date +%s)
printf '%8s %12s %12s\n' t_s VmRSS_kB VmHWM_kB
: >"$out/rss"
sample() {
  local st rss hwm
  st=$(cat "/proc/$wp/status" 2>/dev/null) || return 0
  rss=$(awk '/^VmRSS:/ { print $2 }' <<<"$st")
  hwm=$(awk '/^VmHWM:/ { print $2 }' <<<"$st")
  [ -n "$rss" ] || return 0
  printf '%8s %12s %12s\n' "$(($(date +%s) - start))" "$rss" "$hwm" | tee -a "$out/rss"
}
sleep 1
sample
while kill -0 "$py" 2>/dev/null; do
  for _ in $(seq $((EVERY * 10))); do kill -0 "$py" 2>/dev/null || break; sleep 0.1; done
  sample
done
rc=0
wait "$py" || rc=$?
wp=""
[ "$rc" -eq 0 ] || { echo "rss: wprof exited $rc" >&2; cat "$out/err" >&2; exit 1; }

maxrss=$(sed -n 's/^maxrss_kb //p' "$out/err")
python3 - "$out/run.json" "$(rate_of <"$out/fx.out")" "$untraced" "$out/rss" "$MODE" "$maxrss" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
calls, untraced = float(sys.argv[2]), float(sys.argv[3])
rss = [l.split() for l in open(sys.argv[4])]
c, d = r["counters"], r["provenance"]["duration_s"]
print(f"mode {sys.argv[5]}: {d:.0f} s traced, 2 threads")
print(f"calls/s under tracing: {calls:,.0f} phase calls/s ({calls / 7:,.0f} writes/s); "
      f"untraced {untraced:,.0f} (empty functions)")
print(f"events/s read by wprof: {c['events'] / d:,.0f} ({c['events']:,} events); lost spans {c['lost_spans']:,}, "
      f"lost node defs {c['lost_node_defs']:,}; calls table capped: {r['calls']['capped']}")
first, last = rss[0], rss[-1]
mx = max(int(x[1]) for x in rss)
print(f"VmRSS: {int(first[1]) / 1024:.1f} MiB at {first[0]} s, {int(last[1]) / 1024:.1f} MiB at {last[0]} s, "
      f"max sampled {mx / 1024:.1f} MiB; peak over the whole run (ru_maxrss, outputs written) "
      f"{int(sys.argv[6]) / 1024:.1f} MiB")
PY

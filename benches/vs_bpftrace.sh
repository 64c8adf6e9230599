#!/usr/bin/env bash
# End-to-end cost of tracing, wprof next to bpftrace on the same workload in the same run.
#
# Workload: the C fixture with every phase's spin set to 0, so a write is ~0.4 µs of real work
# and 7 phase calls; what tracing adds per phase call is (traced mean - untraced mean) / 7.
# Both tools probe the same 7 functions, entry + uretprobe (the fixture is C, so wprof's
# auto mode picks uretprobes too), and both compute per-phase latency in the kernel path.
# Also prints the real end-to-end event rate wprof sustained (spans read / traced seconds).
#
# Run as root: benches/vs_bpftrace.sh [ITERATIONS] [ROUNDS]
set -euo pipefail
# Run as root, even through sudo: wprof record would run the traced commands as SUDO_UID
# (docs/security.md), and they live in root-only temporary directories.
unset SUDO_UID SUDO_GID
cd "$(dirname "$0")/.."
N=${1:-20000}
ROUNDS=${2:-3}
# shellcheck source=benches/setup.sh
. benches/setup.sh
zero=(--write-us 0 --encode-us 0 --persist-us 0 --compress-us 0 --flush-us 0 --wal-us 0 --sync-us 0)
phases=(write_record encode_record persist_block compress_block flush_block wal_append wal_sync)

bt=$(mktemp --suffix=.bt)
empty=$(mktemp --suffix=.bt)
trap 'rm -f "$bt" "$empty"' EXIT
for p in "${phases[@]}"; do
  cat >>"$bt" <<BT
uprobe:${prog}:${p} { @s_${p}[tid] = nsecs; }
uretprobe:${prog}:${p} /@s_${p}[tid]/ { @lat["${p}"] = avg(nsecs - @s_${p}[tid]); @n["${p}"] = count(); delete(@s_${p}[tid]); }
BT
  # The floor: the same probes with empty programs (the traps alone).
  echo "uprobe:${prog}:${p} {} uretprobe:${prog}:${p} {}" >>"$empty"
done

mean_of() { sed -n 's/.*write_mean_ns=\([0-9]*\).*/\1/p'; }
run_plain()   { "$prog" --iterations "$N" "${zero[@]}" | mean_of; }
run_wprof()   { "$W" record -q --target fixture --json /tmp/wprof-bench.json -- "$prog" --iterations "$N" "${zero[@]}" | mean_of; }
run_bpftrace(){ bpftrace "$bt" -c "$prog --iterations $N ${zero[*]}" 2>/dev/null | mean_of; }
run_empty()   { bpftrace "$empty" -c "$prog --iterations $N ${zero[*]}" 2>/dev/null | mean_of; }

printf '%-6s %12s %12s %12s %14s %14s %8s %14s %9s %12s\n' round plain_ns wprof_ns bpftrace_ns wprof_add/call bt_add/call ratio floor_add/call vs_floor wprof_ev/s
for r in $(seq "$ROUNDS"); do
  p=$(run_plain); w=$(run_wprof); b=$(run_bpftrace); e=$(run_empty)
  ev=$(python3 -c 'import json;r=json.load(open("/tmp/wprof-bench.json"));print(int(r["counters"]["events"]/max(r["provenance"]["duration_s"],1e-9)))')
  python3 - "$r" "$p" "$w" "$b" "$ev" "$e" <<'PY'
import sys
r, p, w, b, ev, e = sys.argv[1], *map(float, sys.argv[2:])
wa, ba, ea = (w - p) / 7, (b - p) / 7, (e - p) / 7
print(f"{r:<6} {p:12.0f} {w:12.0f} {b:12.0f} {wa:14.0f} {ba:14.0f} {wa/ba:8.2f} {ea:14.0f} {wa/ea:9.2f} {ev:12.0f}")
PY
done
echo "add/call = ns added per traced phase call (entry+return probes and the tool's work); ratio = wprof/bpftrace (lower is better)"
echo "floor = bpftrace with empty programs on the same probes (the traps alone); vs_floor = wprof/floor"

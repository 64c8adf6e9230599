#!/usr/bin/env bash
# RocksDB's db_bench fillrandom (Debian's librocksdb 7.8, a real C++ engine) untraced, under
# wprof's `rocksdb` profile in each return mode, and under bpftrace with the same probes
# (entry + uretprobe on the same ten functions, per-function latency kept in maps), in the
# same run. Prints per tool: db_bench's ops/s and its slowdown against untraced, RocksDB's own
# mean write time (rocksdb.db.write.micros SUM / COUNT, inflated by every probe inside it),
# and wprof's corrected write_impl mean next to the untraced one (how much of the distortion
# the correction takes out).
#
#   auto        wprof's default: guarded uretprobes where the unwind guard loads, RET sites
#               where the kernel refuses it (these VMs: lockdown)
#   uretprobe   plain uretprobes: what a guarded return costs (the guard's own probes fire
#               only when an exception starts to unwind; db_bench throws none)
#   ret-sites   a single-stepped probe on every RET
#
# Run as root: benches/rocksdb.sh [KEYS] [ROUNDS]
set -euo pipefail
# Run as root, even through sudo: wprof record would run the traced commands as SUDO_UID
# (docs/security.md), and they live in root-only temporary directories.
unset SUDO_UID SUDO_GID
cd "$(dirname "$0")/.."
N=${1:-50000}
ROUNDS=${2:-3}
# shellcheck source=benches/setup.sh
. benches/setup.sh
LIB=/usr/lib/x86_64-linux-gnu/librocksdb.so.7.8
[ -e "$LIB" ] || { echo "no $LIB: apt install librocksdb-dev rocksdb-tools" >&2; exit 1; }
DB=$(mktemp -d)
bt=$(mktemp --suffix=.bt)
trap 'rm -rf "$DB" "$bt"' EXIT
ARGS=(--benchmarks=fillrandom --num="$N" --statistics=1 --write_buffer_size=4194304)

# The profile's functions, mangled (bpftrace 0.17 takes no demangled C++ names): its symbol
# patterns, looked up in the library's dynamic symbols.
mapfile -t syms < <(sed -n 's/^symbol = "\(.*\)"$/\1/p' attach-profiles/rocksdb.toml)
nm -D --defined-only "$LIB" | awk '{ print $3 }' >"$DB/all.txt"
i=0
for s in "${syms[@]}"; do
  if [[ $s == _Z* ]]; then
    mangled=$s
  else
    # Every mangled name whose demangling starts with the pattern and a parameter list.
    mangled=$(paste -d' ' "$DB/all.txt" <(c++filt <"$DB/all.txt") |
      awk -v p="$s(" 'index($0, " " p) { print $1 }')
  fi
  for m in $mangled; do
    i=$((i + 1))
    cat >>"$bt" <<BT
uprobe:$LIB:$m { @s$i[tid] = nsecs; }
uretprobe:$LIB:$m /@s$i[tid]/ { @lat[$i] = avg(nsecs - @s$i[tid]); @n[$i] = count(); delete(@s$i[tid]); }
BT
  done
done
echo "bpftrace: $i functions, entry + uretprobe each"

bench() { rm -rf "$DB/db"; "$@" /usr/bin/db_bench "${ARGS[@]}" --db="$DB/db" 2>/dev/null; }
ops() { sed -n 's/^fillrandom .* \([0-9]*\) ops\/sec.*/\1/p' | head -n1; }
# ... COUNT : n SUM : s  ->  s / n
own() { awk '$1 == "rocksdb.db.write.micros" { print ($(NF-3) > 0 ? $NF / $(NF-3) : 0) }'; }
corrected() {
  python3 - "$1" <<'PY'
import json, sys
run = json.load(open(sys.argv[1]))
root = next(x for x in run["tree"]["roots"] if x["name"] == "write_impl")
print(f"{root['corrected']['mean_ns'] / 1e3:.2f}")
PY
}

printf '%-6s %-22s %10s %9s %14s %16s\n' round tool ops/s slowdown own_mean_us wprof_corr_us
for r in $(seq "$ROUNDS"); do
  base=$(bench env)
  b_ops=$(ops <<<"$base")
  printf '%-6s %-22s %10s %9s %14.2f %16s\n' "$r" untraced "$b_ops" 1.00 "$(own <<<"$base")" -
  for mode in auto uretprobe ret-sites; do
    out=$(bench "$W" record -q --target rocksdb --return "$mode" --json "$DB/run.json" --)
    corr=$(corrected "$DB/run.json")
    o=$(ops <<<"$out")
    printf '%-6s %-22s %10s %9.2f %14.2f %16s\n' "$r" "wprof --return $mode" "$o" \
      "$(echo "$b_ops / $o" | bc -l)" "$(own <<<"$out")" "$corr"
  done
  out=$(rm -rf "$DB/db"; bpftrace "$bt" -c "/usr/bin/db_bench ${ARGS[*]} --db=$DB/db" 2>/dev/null)
  o=$(ops <<<"$out")
  printf '%-6s %-22s %10s %9.2f %14.2f %16s\n' "$r" "bpftrace (same probes)" "$o" \
    "$(echo "$b_ops / $o" | bc -l)" "$(own <<<"$out")" -
done
echo "slowdown = untraced ops/s / traced ops/s; own_mean_us = RocksDB's own mean write time in that run"

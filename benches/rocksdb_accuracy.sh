#!/usr/bin/env bash
# How close wprof's corrected RocksDB write comes to RocksDB's own figures (issue 20): db_bench
# fillrandom with `--statistics=1 --perf_level=3`, so RocksDB times its own writes
# (`rocksdb.db.write.micros`: mean and P99) and the write's WAL and memtable parts
# (PerfContext `write_wal_time`, `write_memtable_time`, summed over the run). Each round runs
# untraced, under `wprof record --target rocksdb` (corrected by the calibration), under the
# same with `--in-situ`, and untraced again; the traced figures are set against the mean of
# the two untraced runs around them (RocksDB's figures inside a traced run carry the probes).
#
# Printed per traced run: db_bench ops/s, wprof's corrected write_impl mean and p99,
# write_to_wal and memtable_insert corrected means, and each against RocksDB's untraced
# figure (ratio).
#
# Run as root: benches/rocksdb_accuracy.sh [KEYS] [ROUNDS]     (defaults: 1000000 3)
# WPROF_BIN=path runs another wprof build.
set -euo pipefail
unset SUDO_UID SUDO_GID
cd "$(dirname "$0")/.."
# shellcheck source=benches/setup.sh
. benches/setup.sh
W=${WPROF_BIN:-$W}
N=${1:-1000000}
ROUNDS=${2:-3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ARGS=(--benchmarks=fillrandom --num="$N" --statistics=1 --perf_level=3 --write_buffer_size=4194304)
bench() { rm -rf "$tmp/db"; "$@" /usr/bin/db_bench "${ARGS[@]}" --db="$tmp/db" 2>/dev/null; }
# RocksDB's own figures, µs a write: "ops mean p99 wal memtable".
own() {
  python3 -c '
import re, sys
t = sys.stdin.read()
ops = re.search(r"^fillrandom .* (\d+) ops/sec", t, re.M).group(1)
w = re.search(r"rocksdb.db.write.micros P50 : \S+ P95 : \S+ P99 : (\S+) .*COUNT : (\d+) SUM : (\d+)", t)
p99, n, s = float(w.group(1)), int(w.group(2)), int(w.group(3))
wal = int(re.search(r"write_wal_time = (\d+)", t).group(1)) / n / 1e3
mem = int(re.search(r"write_memtable_time = (\d+)", t).group(1)) / n / 1e3
print(ops, s / n, p99, wal, mem)'
}
# wprof's corrected figures, µs: "mean p99 wal memtable".
wprof_figures() {
  python3 - "$1" <<'PY'
import json, sys
run = json.load(open(sys.argv[1]))
root = next(x for x in run["tree"]["roots"] if x["name"] == "write_impl")
kid = lambda name: next((c for c in root["children"] if c["name"] == name), None)
mean = lambda n: n["corrected"]["total_ns"] / max(n["count"], 1) / 1e3
# A child's share of the root, in µs per root call (the tree's first column).
per_root = lambda n: n["corrected"]["total_ns"] / max(root["count"], 1) / 1e3
print(f'{mean(root):.3f} {root["corrected"]["p99_ns"] / 1e3:.3f} '
      f'{per_root(kid("write_to_wal")):.3f} {per_root(kid("memtable_insert")):.3f}')
PY
}
printf '%-5s %-16s %8s %21s %21s %21s %21s\n' round run ops/s "mean µs (×own)" "p99 µs (×own)" \
  "wal µs (×own)" "memtable µs (×own)"
for r in $(seq "$ROUNDS"); do
  read -r o0 m0 p0 w0 t0 < <(bench env | own)
  bench "$W" record -q --target rocksdb --json "$tmp/cal.json" -- >"$tmp/cal.out"
  bench "$W" record -q --target rocksdb --in-situ --json "$tmp/situ.json" -- >"$tmp/situ.out"
  read -r o1 m1 p1 w1 t1 < <(bench env | own)
  m=$(echo "($m0 + $m1) / 2" | bc -l); p=$(echo "($p0 + $p1) / 2" | bc -l)
  w=$(echo "($w0 + $w1) / 2" | bc -l); t=$(echo "($t0 + $t1) / 2" | bc -l)
  printf '%-5s %-16s %8s %12.2f        %12.2f        %12.2f        %12.2f\n' "$r" untraced \
    "$(((o0 + o1) / 2))" "$m" "$p" "$w" "$t"
  for run in cal situ; do
    read -r wm wp ww wt < <(wprof_figures "$tmp/$run.json")
    read -r o _ < <(own <"$tmp/$run.out")
    label=$([ $run = cal ] && echo "wprof" || echo "wprof --in-situ")
    printf '%-5s %-16s %8s %12.2f (%5.2f) %12.2f (%5.2f) %12.2f (%5.2f) %12.2f (%5.2f)\n' "$r" "$label" "$o" \
      "$wm" "$(echo "$wm / $m" | bc -l)" "$wp" "$(echo "$wp / $p" | bc -l)" \
      "$ww" "$(echo "$ww / $w" | bc -l)" "$wt" "$(echo "$wt / $t" | bc -l)"
    echo "$run $(echo "$wm / $m" | bc -l) $(echo "$wp / $p" | bc -l)" >>"$tmp/ratios"
  done
done
echo "untraced: RocksDB's own figures, the mean of the runs before and after; (×own) = wprof / that"
# Over the rounds: this host's untraced figures move by ±20% within minutes, so one round
# says little; the medians and the rounds within 5% and 10% say more.
python3 - "$tmp/ratios" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
for run, label in (("cal", "wprof"), ("situ", "wprof --in-situ")):
    m = [float(r[1]) for r in rows if r[0] == run]
    p = [float(r[2]) for r in rows if r[0] == run]
    near = lambda xs, tol: sum(abs(x - 1) <= tol for x in xs)
    print(f"{label}: mean ×own median {statistics.median(m):.3f} ({near(m, .05)} of {len(m)} "
          f"within 5%, {near(m, .10)} within 10%); p99 ×own median {statistics.median(p):.3f} "
          f"({near(p, .10)} within 10%)")
PY

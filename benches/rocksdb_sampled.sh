#!/usr/bin/env bash
# Sampled sub-phases on RocksDB's db_bench fillrandom against probed ones (issue 20, part 3).
#
# Each round: write_impl probed with write_to_wal and memtable_insert `measure = "sample"`
# (--cpu-sample HZ), then each child probed alone under write_impl (one probe pair inside the
# write: its corrected share is what a probe measures with the least distortion), then the full
# `rocksdb` profile (seven pairs a write). Prints each child's share of write_impl's time in
# each run, and RocksDB's own PerfContext split (write_wal_time, write_memtable_time over the
# write's time) from an untraced run with --perf_level=3 (its timers cover a little more than
# the two functions: the write group's enter and exit around each).
#
# Run as root: benches/rocksdb_sampled.sh [KEYS] [ROUNDS] [HZ]     (defaults: 1000000 2 1999)
set -euo pipefail
cd "$(dirname "$0")/.."
. benches/setup.sh
N=${1:-1000000}; R=${2:-2}; HZ=${3:-1999}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
# Profiles cut from the built-in one: the root, the flush thread's phases, and the children
# the variant keeps (sampled, or probed).
cut() { # OUT KEEP... (a name ending in ~ is kept as measure = "sample")
  python3 - attach-profiles/rocksdb.toml "$@" <<'PY'
import re, sys
src, out, keep = sys.argv[1], sys.argv[2], sys.argv[3:]
blocks = open(src).read().split("[[phase]]")
parts = [blocks[0].replace('name = "rocksdb"', 'name = "rocksdb-cut"')]
for b in blocks[1:]:
    n = re.search(r'name = "(\w+)"', b).group(1)
    if n in ("write_impl", "flush_job", "table_add") or n in keep:
        parts.append(b)
    elif n + "~" in keep:
        parts.append(b.rstrip() + '\nmeasure = "sample"\n\n')
open(out, "w").write("[[phase]]".join(parts))
PY
}
cut "$tmp/sampled.toml" write_to_wal~ memtable_insert~
cut "$tmp/wal.toml" write_to_wal
cut "$tmp/mem.toml" memtable_insert
ARGS=(--benchmarks=fillrandom --num="$N" --statistics=1 --write_buffer_size=4194304)
run() { # TOML EXTRA...
  local t=$1; shift
  rm -rf "$tmp/db"
  "$W" record -q --target "$t" "$@" --json "$tmp/r.json" -- /usr/bin/db_bench "${ARGS[@]}" \
    --db="$tmp/db" >"$tmp/out" 2>/dev/null
}
perf_context() { # RocksDB's own split, untraced
  rm -rf "$tmp/db"
  /usr/bin/db_bench "${ARGS[@]}" --perf_level=3 --db="$tmp/db" >"$tmp/out" 2>/dev/null
  python3 - "$tmp/out" <<'PY'
import re, sys
out = open(sys.argv[1]).read()
pc = dict((k, int(v)) for k, v in re.findall(r"(write_wal_time|write_memtable_time) = (\d+)", out))
m = re.search(r"rocksdb.db.write.micros .*COUNT : (\d+) SUM : (\d+)", out)
ns = int(m.group(2)) * 1e3
wal, mem = (100 * pc[k] / ns for k in ("write_wal_time", "write_memtable_time"))
print(f"{'untraced, PerfContext':<28} wal {wal:5.1f}%  memtable {mem:5.1f}%")
PY
}
shares() { # LABEL: prints LABEL wal% mem% (sampled or corrected shares of write_impl)
  python3 - "$tmp/r.json" "$tmp/out" "$1" <<'PY'
import json, sys
run = json.load(open(sys.argv[1]))
w = [r for r in run["tree"]["roots"] if r["name"] == "write_impl"][0]
tot = lambda n: (n.get("corrected") or n)["total_ns"]
def share(name):
    for c in w["children"]:
        if c["name"] == name:
            s = c.get("sampled")
            return 100 * (s["share"] if s else tot(c) / tot(w))
    return float("nan")
print(f"{sys.argv[3]:<28} wal {share('write_to_wal'):5.1f}%  memtable {share('memtable_insert'):5.1f}%")
PY
}
for r in $(seq "$R"); do
  echo "round $r"
  perf_context
  run "$tmp/sampled.toml" --cpu-sample "$HZ"; shares sampled
  run "$tmp/wal.toml"; shares "write_to_wal probed alone"
  run "$tmp/mem.toml"; shares "memtable_insert probed alone"
  run rocksdb; shares "full profile probed"
done

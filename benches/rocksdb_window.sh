#!/usr/bin/env bash
# What wprof's window of DBImpl::WriteImpl holds beyond RocksDB's own StopWatch: db_bench
# fillrandom with write_impl alone probed (the root of the `rocksdb` profile, nothing under
# it, no budget), wprof's corrected mean over RocksDB's own `rocksdb.db.write.micros` mean in
# the same run. WriteImpl starts its StopWatch after its option checks and the writer's
# construction and stops it before recording the histogram; wprof times the whole call. Each
# round runs the two return detections of a C++ phase, guarded uretprobes and RET sites, whose
# traps cost the write very differently: a ratio that holds across both is the window's, not
# the probe's left over. benches/rocksdb_budget.sh sets its ratio_paused against this.
#
# Run as root: benches/rocksdb_window.sh [KEYS] [ROUNDS]     (defaults: 2000000 3)
# WPROF_BIN=path runs another wprof build; WPROF_ARGS adds to wprof's arguments (e.g.
# "--cpu-sample 1999": the samples' cost then comes out of the calls they land in).
set -euo pipefail
cd "$(dirname "$0")/.."
. benches/setup.sh
W=${WPROF_BIN:-$W}
N=${1:-2000000}; R=${2:-3}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
# The rocksdb profile's header and its root phase, nothing else.
awk '/^\[\[phase\]\]/ { n++ } n < 2' attach-profiles/rocksdb.toml |
  sed 's/^name = "rocksdb"/name = "rocksdb-root"/' >"$tmp/root.toml"
for r in $(seq "$R"); do
  for mode in guarded ret-sites; do
    rm -rf "$tmp/db"
    # shellcheck disable=SC2086  # WPROF_ARGS is words
    "$W" record -q --target "$tmp/root.toml" --return "$mode" ${WPROF_ARGS:-} --json "$tmp/r.json" -- \
      /usr/bin/db_bench --benchmarks=fillrandom --num="$N" --statistics=1 \
      --write_buffer_size=4194304 --db="$tmp/db" >"$tmp/out" 2>/dev/null
    python3 - "$tmp/r.json" "$r" "$mode" "$tmp/out" <<'PY'
import json, re, sys
text = open(sys.argv[4]).read()
ops = re.search(r"^fillrandom .* (\d+) ops/sec", text, re.M)[1]
m = re.search(r"^rocksdb\.db\.write\.micros .* COUNT : (\d+) SUM : (\d+)", text, re.M)
own = int(m[2]) / int(m[1])
root = next(x for x in json.load(open(sys.argv[1]))["tree"]["roots"] if x["name"] == "write_impl")
raw = root["total_ns"] / root["count"] / 1e3
corr = root["corrected"]["total_ns"] / root["count"] / 1e3
print(f"round {sys.argv[2]} {sys.argv[3]:<9} ops/s {ops:>6} calls {root['count']} "
      f"(own COUNT {m[1]}) raw {raw:.2f}us corrected {corr:.2f}us own {own:.2f}us "
      f"corrected/own {corr / own:.3f}")
PY
  done
done
